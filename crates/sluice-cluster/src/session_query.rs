//! A session's continuous query, run by the master that leads
//! (`Master::run_session_query`): its pipeline ends in a `client` sink
//! that hands result batches to a channel registered under the query's id
//! (`ClientSinks`), read here as a stream. Dropping the stream stops the
//! pipeline (LIMIT reached, cancel, a client gone). On a quorum follower
//! the query runs on the leader, which streams the batches to the
//! follower (`Replication::forward_query`).

use arrow::record_batch::RecordBatch;
use futures::StreamExt;
use futures::stream::BoxStream;
use sluice_dataflow::deploy::{PipelineRuntime, PipelineStatus};
use sluice_types::{Error, Result, SqlCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::mpsc;

/// Result batches buffered between a query's sink and its reader.
pub const RESULT_BATCHES_MAX: usize = 4;

/// A query's result batches; a failure of its pipeline is the last item.
pub type Batches = BoxStream<'static, Result<RecordBatch>>;

/// Stops the pipeline when dropped (and counts it as running until then).
struct QueryGuard {
    runtime: Arc<PipelineRuntime>,
    _running: RunningQuery,
}

impl Drop for QueryGuard {
    fn drop(&mut self) {
        self.runtime.stop();
    }
}

/// Counts a session query as running (in the counter it was made with)
/// until dropped.
pub struct RunningQuery(Arc<AtomicU64>);

impl RunningQuery {
    pub fn new(counter: Arc<AtomicU64>) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        RunningQuery(counter)
    }
}

impl Drop for RunningQuery {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The result batches of the session query `runtime` runs, as its sink
/// hands them to `rx` (they end when its input ends); dropping them stops
/// it, and `running` with it.
pub fn batches(runtime: Arc<PipelineRuntime>, rx: mpsc::Receiver<RecordBatch>, running: RunningQuery) -> Batches {
    let guard = QueryGuard {
        runtime,
        _running: running,
    };
    let state = (rx, guard, false);
    let batches = futures::stream::unfold(state, |(mut rx, guard, done)| async move {
        if done {
            return None;
        }
        match rx.recv().await {
            Some(batch) => Some((Ok(batch), (rx, guard, false))),
            None => match guard.runtime.wait().await {
                PipelineStatus::Failed {
                    operator, error, code, ..
                } => Some((
                    Err(Error::user(
                        code.unwrap_or(SqlCode::DataException),
                        format!("query failed in operator {operator}: {error}"),
                    )),
                    (rx, guard, true),
                )),
                _ => None,
            },
        }
    });
    batches.boxed()
}
