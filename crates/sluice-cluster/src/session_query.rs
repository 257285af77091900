//! A session's continuous query, run by the master that leads: its
//! pipeline ends in a `client` sink that hands result batches to a channel
//! registered under the query's id ([`ClientSinks`]), read here as a
//! stream. Dropping the stream stops the pipeline (LIMIT reached, cancel,
//! a client gone). On a quorum follower the query runs on the leader,
//! which streams the batches to the follower
//! ([`crate::replication::Replication::forward_query`]).

use crate::Master;
use crate::master::RunningQuery;
use arrow::record_batch::RecordBatch;
use futures::StreamExt;
use futures::stream::BoxStream;
use sluice_connectors::ClientSinks;
use sluice_dataflow::deploy::{PipelineRuntime, PipelineStatus};
use sluice_plan::PhysicalDag;
use sluice_types::{Error, Result, SqlCode};
use std::sync::Arc;
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

/// Starts `dag` as a session query on this master and returns its result
/// batches as they come (they end when its input ends).
pub fn run(master: &Master, clients: &ClientSinks, dag: &PhysicalDag) -> Result<Batches> {
    let (tx, rx) = mpsc::channel(RESULT_BATCHES_MAX);
    let id = master.new_query_id();
    clients.register(id, tx);
    let runtime = master.run_query(id, dag).inspect_err(|_| clients.forget(id))?;
    let guard = QueryGuard {
        runtime,
        _running: master.session_query_running(),
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
    Ok(batches.boxed())
}
