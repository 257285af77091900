//! The rows of materialized views, as their sinks last published them.
//!
//! A materialized view's pipeline ends in a `view` sink
//! ([`crate::connector::view`]) that keeps the view's current rows and
//! publishes them here at every checkpoint barrier (and when its input
//! ends), so a reader always sees the rows as of one barrier: never half
//! of an update, never some keys' changes without others'. Publishing
//! swaps one `Arc`; a reader holds the batch it took for as long as its
//! query runs, and the sink goes on.
//!
//! The view sink runs on the master's own worker (it is pinned there like
//! a session's result sink), so the master that plans `SELECT … FROM
//! view` reads this store in its own process.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A view's rows as of one barrier.
#[derive(Debug, Clone)]
pub struct PublishedView {
    /// The view's columns (the query's output without the `op` column).
    pub schema: SchemaRef,
    /// Its rows, in no particular order (a row repeated as often as it is
    /// in the result).
    pub rows: RecordBatch,
    /// The checkpoint whose barrier the rows are as of (`None`: as of the
    /// start — restored, or empty — or of the end of a bounded input).
    pub checkpoint: Option<u64>,
    /// When they were published (epoch ms).
    pub published_ms: i64,
}

/// Published views of this process, by view name.
#[derive(Debug, Default)]
pub struct Views {
    views: Mutex<HashMap<String, Arc<PublishedView>>>,
}

impl Views {
    /// Replaces what `name` shows.
    pub fn publish(&self, name: &str, view: PublishedView) {
        self.views
            .lock()
            .expect("views lock")
            .insert(name.to_string(), Arc::new(view));
    }

    /// What `name` shows now, if its sink published in this process.
    pub fn get(&self, name: &str) -> Option<Arc<PublishedView>> {
        self.views.lock().expect("views lock").get(name).cloned()
    }

    /// Forgets a dropped view's rows.
    pub fn forget(&self, name: &str) {
        self.views.lock().expect("views lock").remove(name);
    }
}
