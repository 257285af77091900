//! Continuous queries for a session: start the pipeline, stream its rows,
//! stop it when the stream is dropped (LIMIT reached, cancel, disconnect).

use super::RowStream;
use arrow::record_batch::RecordBatch;
use futures::StreamExt;
use futures::stream::BoxStream;
use sluice_cluster::Master;
use sluice_connectors::ClientSinks;
use sluice_sql::PlannedQuery;
use sluice_types::Result;
use std::sync::Arc;

/// Starts `planned` and returns its rows as a stream: on this master, or
/// on a quorum follower on the leader, which streams them here
/// (`sluice_cluster::session_query`). The stream ends at the query's
/// LIMIT, when its input ends, or with its failure; dropping it stops the
/// query.
pub async fn start(master: &Master, clients: &ClientSinks, planned: &PlannedQuery) -> Result<RowStream> {
    let batches = match master.forward_query(&planned.dag).await? {
        Some(batches) => batches,
        None => master.run_session_query(clients, &planned.dag)?,
    };
    let state = (batches, planned.limit, planned.limit == Some(0));
    let batches = futures::stream::unfold(state, |(mut batches, mut remaining, done)| async move {
        if done {
            return None;
        }
        match batches.next().await? {
            Ok(mut batch) => {
                let mut done = false;
                if let Some(remaining) = remaining.as_mut() {
                    if batch.num_rows() >= *remaining {
                        batch = batch.slice(0, *remaining);
                        done = true;
                    }
                    *remaining -= batch.num_rows();
                }
                Some((Ok(batch), (batches, remaining, done)))
            }
            Err(e) => Some((Err(e), (batches, remaining, true))),
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
