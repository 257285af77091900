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
//! In the playground, and for a view over a memory stream, the view sink
//! runs in the master's process, which reads this store directly; in a
//! cluster it runs on a worker, whose agent answers the master's
//! `FetchView` from the store of the worker's process.

use arrow::array::BooleanArray;
use arrow::buffer::BooleanBuffer;
use arrow::compute::filter_record_batch;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use sluice_types::{PipelineId, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// A view's rows as of one barrier.
///
/// Held as the sink holds them — its batches (shared arrays) and which of
/// their rows are in the view — so publishing copies one bit a row, not the
/// rows; the first reader that asks for [`PublishedView::rows`] filters
/// them once, and later readers of the same publication share the result.
#[derive(Debug, Clone)]
pub struct PublishedView {
    /// The view's columns (the query's output without the `op` column).
    pub schema: SchemaRef,
    /// The batches and, where some of a batch's rows are not in the view,
    /// which are.
    parts: Arc<Vec<(RecordBatch, Option<BooleanBuffer>)>>,
    /// The rows in the view, counted at publish.
    num_rows: usize,
    /// `parts` filtered, once.
    filtered: Arc<OnceLock<Vec<RecordBatch>>>,
    /// The checkpoint whose barrier the rows are as of (`None`: as of the
    /// start — restored, or empty — or of the end of a bounded input).
    pub checkpoint: Option<u64>,
    /// When they were published (epoch ms).
    pub published_ms: i64,
    /// Names this publication among every one this process makes (and,
    /// as it starts from the clock, among a restarted process's): a
    /// follower that holds a view's rows asks whether they are still
    /// current by it.
    pub publication: u64,
}

/// The next [`PublishedView::publication`].
fn next_publication() -> u64 {
    static NEXT: OnceLock<std::sync::atomic::AtomicU64> = OnceLock::new();
    NEXT.get_or_init(|| {
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        std::sync::atomic::AtomicU64::new(now_ns.max(1))
    })
    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl PublishedView {
    /// A view holding every row of `batches` (of `schema`).
    pub fn new(schema: SchemaRef, batches: Vec<RecordBatch>, checkpoint: Option<u64>, published_ms: i64) -> Self {
        Self::from_parts(
            schema,
            batches.into_iter().map(|b| (b, None)).collect(),
            checkpoint,
            published_ms,
        )
    }

    /// A view holding the rows of each batch that its bits mark (every
    /// row where there are none).
    pub fn from_parts(
        schema: SchemaRef,
        parts: Vec<(RecordBatch, Option<BooleanBuffer>)>,
        checkpoint: Option<u64>,
        published_ms: i64,
    ) -> Self {
        let num_rows = parts
            .iter()
            .map(|(b, live)| live.as_ref().map_or(b.num_rows(), |l| l.count_set_bits()))
            .sum();
        PublishedView {
            schema,
            parts: Arc::new(parts),
            num_rows,
            filtered: Arc::new(OnceLock::new()),
            checkpoint,
            published_ms,
            publication: next_publication(),
        }
    }

    /// How many rows the view holds.
    pub fn num_rows(&self) -> usize {
        self.num_rows
    }

    /// The view's rows, in no particular order (a row repeated as often as
    /// it is in the result), as batches of the view's schema; no batch is
    /// empty.
    pub fn rows(&self) -> Result<Vec<RecordBatch>> {
        if let Some(rows) = self.filtered.get() {
            return Ok(rows.clone());
        }
        let mut rows = Vec::with_capacity(self.parts.len());
        for (batch, live) in self.parts.iter() {
            let batch = match live {
                None => batch.clone(),
                Some(live) => filter_record_batch(batch, &BooleanArray::new(live.clone(), None))?,
            };
            if batch.num_rows() > 0 {
                rows.push(batch);
            }
        }
        Ok(self.filtered.get_or_init(|| rows).clone())
    }
}

/// Published views of this process, by view name, each with the pipeline
/// whose sink published it.
#[derive(Debug, Default)]
pub struct Views {
    views: Mutex<HashMap<String, (PipelineId, Arc<PublishedView>)>>,
}

impl Views {
    /// Replaces what `name` shows: the rows pipeline `by`'s sink holds.
    pub fn publish(&self, name: &str, by: PipelineId, view: PublishedView) {
        self.views
            .lock()
            .expect("views lock")
            .insert(name.to_string(), (by, Arc::new(view)));
    }

    /// What `name` shows now, if its sink published in this process.
    pub fn get(&self, name: &str) -> Option<Arc<PublishedView>> {
        self.views.lock().expect("views lock").get(name).map(|(_, v)| v.clone())
    }

    /// What `name` shows now if pipeline `by` published it here (a worker
    /// answers for the deployment its master asks about, never with rows
    /// an earlier pipeline of the same name left).
    pub fn get_of(&self, name: &str, by: PipelineId) -> Option<Arc<PublishedView>> {
        self.views
            .lock()
            .expect("views lock")
            .get(name)
            .filter(|(p, _)| *p == by)
            .map(|(_, v)| v.clone())
    }

    /// Forgets a dropped view's rows.
    pub fn forget(&self, name: &str) {
        self.views.lock().expect("views lock").remove(name);
    }

    /// Forgets the rows pipeline `by` published here (a worker told to
    /// stop its part: the view's sink runs elsewhere next, or nowhere).
    pub fn forget_of(&self, by: PipelineId) {
        self.views.lock().expect("views lock").retain(|_, (p, _)| *p != by);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::Schema;

    fn empty() -> PublishedView {
        PublishedView::new(Arc::new(Schema::empty()), vec![], None, 0)
    }

    /// A worker answers for the pipeline asked about only, and forgets
    /// only what that pipeline published.
    #[test]
    fn rows_are_answered_and_forgotten_by_the_pipeline_that_published_them() {
        let views = Views::default();
        views.publish("v", PipelineId(1), empty());
        views.publish("w", PipelineId(2), empty());
        assert!(views.get_of("v", PipelineId(1)).is_some());
        assert!(
            views.get_of("v", PipelineId(3)).is_none(),
            "an earlier view of the name"
        );
        views.forget_of(PipelineId(3));
        assert!(views.get("v").is_some() && views.get("w").is_some());
        views.forget_of(PipelineId(1));
        assert!(views.get("v").is_none());
        assert!(views.get_of("w", PipelineId(2)).is_some());
        // A newer pipeline of the same name replaces the rows.
        views.publish("w", PipelineId(4), empty());
        assert!(views.get_of("w", PipelineId(2)).is_none());
        views.forget_of(PipelineId(2));
        assert!(views.get_of("w", PipelineId(4)).is_some());
    }
}
