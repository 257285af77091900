//! Continuous queries for a session: start the pipeline, stream its rows,
//! stop it when the stream is dropped (LIMIT reached, cancel, disconnect).

use super::RowStream;
use arrow::record_batch::RecordBatch;
use futures::StreamExt;
use futures::stream::BoxStream;
use sluice_cluster::Master;
use sluice_connectors::ClientSinks;
use sluice_dataflow::deploy::{PipelineRuntime, PipelineStatus};
use sluice_sql::PlannedQuery;
use sluice_types::{Error, Result, SqlCode};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Result batches buffered between a query's sink and its client.
pub const RESULT_BATCHES_MAX: usize = 4;

/// Stops the pipeline when dropped.
struct QueryGuard(Arc<PipelineRuntime>);

impl Drop for QueryGuard {
    fn drop(&mut self) {
        self.0.stop();
    }
}

struct QueryState {
    rx: mpsc::Receiver<RecordBatch>,
    remaining: Option<usize>,
    guard: QueryGuard,
    done: bool,
}

/// Starts `planned` and returns its rows as a stream. Its `client` sink
/// finds the result channel registered in `clients` under the query's id.
pub fn start(master: &Master, clients: &ClientSinks, planned: &PlannedQuery) -> Result<RowStream> {
    let (tx, rx) = mpsc::channel(RESULT_BATCHES_MAX);
    let id = master.new_query_id();
    clients.register(id, tx);
    let runtime = master.run_query(id, &planned.dag).inspect_err(|_| clients.forget(id))?;
    let state = QueryState {
        rx,
        remaining: planned.limit,
        guard: QueryGuard(runtime),
        done: planned.limit == Some(0),
    };
    let batches = futures::stream::unfold(state, |mut s| async move {
        if s.done {
            return None;
        }
        match s.rx.recv().await {
            Some(mut batch) => {
                if let Some(remaining) = s.remaining.as_mut() {
                    if batch.num_rows() >= *remaining {
                        batch = batch.slice(0, *remaining);
                        s.done = true;
                    }
                    *remaining -= batch.num_rows();
                }
                Some((Ok(batch), s))
            }
            None => {
                s.done = true;
                let status = s.guard.0.wait().await;
                match status {
                    PipelineStatus::Failed {
                        operator, error, code, ..
                    } => Some((
                        Err(Error::user(
                            code.unwrap_or(SqlCode::DataException),
                            format!("query failed in operator {operator}: {error}"),
                        )),
                        s,
                    )),
                    _ => None,
                }
            }
        }
    });
    Ok(RowStream {
        schema: planned.schema.clone(),
        batches: batches.boxed(),
    })
}

/// An open cursor: the rest of a query's rows.
pub struct Cursor {
    pub schema: arrow::datatypes::SchemaRef,
    stream: BoxStream<'static, Result<RecordBatch>>,
    /// Rows taken from the stream but not yet fetched.
    pending: Option<RecordBatch>,
}

/// A shared, lockable cursor (a FETCH's row stream holds it while it runs).
pub type SharedCursor = Arc<tokio::sync::Mutex<Cursor>>;

impl Cursor {
    pub fn new(rows: RowStream) -> SharedCursor {
        // Fused: a FETCH after the end gets no rows, again and again.
        Arc::new(tokio::sync::Mutex::new(Cursor {
            schema: rows.schema,
            stream: rows.batches.fuse().boxed(),
            pending: None,
        }))
    }
}

/// `FETCH n`: up to `count` rows (all when `None`), as they arrive.
pub fn fetch(cursor: SharedCursor, count: Option<usize>, schema: arrow::datatypes::SchemaRef) -> RowStream {
    let state = (cursor, count, false);
    let batches = futures::stream::unfold(state, |(cursor, remaining, done)| async move {
        if done || remaining == Some(0) {
            return None;
        }
        let mut c = cursor.clone().lock_owned().await;
        let next = match c.pending.take() {
            Some(b) => Some(Ok(b)),
            None => c.stream.next().await,
        };
        match next {
            None => None,
            Some(Err(e)) => Some((Err(e), (cursor.clone(), remaining, true))),
            Some(Ok(batch)) => {
                let (batch, remaining) = match remaining {
                    Some(r) if batch.num_rows() > r => {
                        c.pending = Some(batch.slice(r, batch.num_rows() - r));
                        (batch.slice(0, r), Some(0))
                    }
                    Some(r) => (batch.clone(), Some(r - batch.num_rows())),
                    None => (batch, None),
                };
                drop(c);
                Some((Ok(batch), (cursor, remaining, false)))
            }
        }
    });
    RowStream {
        schema,
        batches: batches.boxed(),
    }
}
