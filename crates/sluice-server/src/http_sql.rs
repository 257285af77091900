//! `POST /api/v1/sql`: the same engine and errors as pgwire, answered as
//! JSON. A row result is cut at `HTTP_ROWS_MAX` rows or `HTTP_QUERY_WAIT`,
//! whichever comes first (a continuous query is then stopped), and says so.
//!
//! `POST /api/v1/sql/stream` (`{"sql": …}`; the dashboard's) and
//! `GET /api/v1/sql/stream?sql=…` (for EventSource) are the live form for
//! the dashboard's preview: server-sent events (`command`, `columns`, `rows`, `end`,
//! `error`) as rows arrive, up to `PREVIEW_ROWS_MAX` rows or
//! `PREVIEW_WAIT_MAX`; a client that goes away stops the query.

use crate::engine::{Engine, Output};
use arrow::util::display::array_value_to_string;
use axum::response::sse::{Event, Sse};
use futures::StreamExt;
use serde_json::{Value, json};
use sluice_types::Error;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

/// Rows returned for one statement at most.
pub const HTTP_ROWS_MAX: usize = 1000;
/// How long a row result is waited for at most.
pub const HTTP_QUERY_WAIT: Duration = Duration::from_secs(5);

/// Rows streamed to a live preview at most.
pub const PREVIEW_ROWS_MAX: usize = 1000;
/// How long a live preview runs at most.
pub const PREVIEW_WAIT_MAX: Duration = Duration::from_secs(60);
/// Events buffered for a slow preview client.
const PREVIEW_EVENTS_MAX: usize = 16;

/// Runs `sql` in a fresh session: one JSON result per statement, or the
/// first error (with the results before it).
pub async fn run(engine: &Arc<Engine>, user: &str, sql: &str) -> Result<Vec<Value>, (Vec<Value>, Error)> {
    let mut session = engine.new_session(user);
    let mut results = Vec::new();
    for output in session.execute(sql).await {
        match output {
            Ok(output) => match render(output).await {
                Ok(v) => results.push(v),
                Err(e) => return Err((results, e)),
            },
            Err(e) => return Err((results, e)),
        }
    }
    Ok(results)
}

async fn render(output: Output) -> Result<Value, Error> {
    let (tag, rows) = match output {
        Output::Command { tag, rows } => return Ok(json!({ "tag": tag, "rows_affected": rows })),
        Output::CopyOut(_) => {
            return Err(Error::unsupported(
                "COPY … TO STDOUT is for Postgres clients; use SELECT",
            ));
        }
        Output::Rows { tag, rows } => (tag, rows),
    };
    let columns = columns(&rows.schema);
    let mut out: Vec<Value> = Vec::new();
    let mut truncated = false;
    let mut batches = rows.batches;
    let deadline = tokio::time::Instant::now() + HTTP_QUERY_WAIT;
    loop {
        let next = tokio::time::timeout_at(deadline, batches.next()).await;
        let batch = match next {
            Err(_) => {
                truncated = true;
                break;
            }
            Ok(None) => break,
            Ok(Some(b)) => b?,
        };
        truncated = push_rows(&batch, &mut out, HTTP_ROWS_MAX);
        if truncated {
            break;
        }
    }
    // Dropping the stream stops a continuous query.
    drop(batches);
    Ok(json!({ "tag": tag, "columns": columns, "rows": out, "truncated": truncated }))
}

fn columns(schema: &arrow::datatypes::Schema) -> Vec<Value> {
    schema
        .fields()
        .iter()
        .map(|f| json!({ "name": f.name(), "type": crate::engine::pg_type_name(f.data_type()) }))
        .collect()
}

/// Appends `batch`'s rows as arrays of text cells (null stays null) until
/// `out` holds `max`; true when rows were left out.
fn push_rows(batch: &arrow::record_batch::RecordBatch, out: &mut Vec<Value>, max: usize) -> bool {
    for row in 0..batch.num_rows() {
        if out.len() == max {
            return true;
        }
        let cells: Vec<Value> = batch
            .columns()
            .iter()
            .map(|c| {
                if c.is_null(row) {
                    Value::Null
                } else {
                    Value::String(array_value_to_string(c, row).unwrap_or_default())
                }
            })
            .collect();
        out.push(Value::Array(cells));
    }
    false
}

/// One server-sent event.
fn event(name: &str, data: Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

/// The live preview of `sql` as server-sent events.
pub fn stream(
    engine: Arc<Engine>,
    user: String,
    sql: String,
) -> Sse<impl futures::Stream<Item = Result<Event, Infallible>>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(PREVIEW_EVENTS_MAX);
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + PREVIEW_WAIT_MAX;
        let mut session = engine.new_session(&user);
        for output in session.execute(&sql).await {
            let sent = match output {
                Err(e) => tx.send(error_event(&e)).await,
                Ok(Output::Command { tag, rows }) => {
                    tx.send(event("command", json!({"tag": tag, "rows_affected": rows})))
                        .await
                }
                Ok(Output::CopyOut(_)) => {
                    tx.send(error_event(&Error::unsupported(
                        "COPY … TO STDOUT is for Postgres clients; use SELECT",
                    )))
                    .await
                }
                Ok(Output::Rows { rows, .. }) => preview_rows(rows, &tx, deadline).await,
            };
            if sent.is_err() {
                return; // The client went away: dropping the rows stops the query.
            }
        }
    });
    let events = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (Ok(e), rx)) });
    Sse::new(events).keep_alive(axum::response::sse::KeepAlive::default())
}

fn error_event(e: &Error) -> Event {
    let message = match e {
        Error::Internal(_) => {
            tracing::error!(error = %e, "internal error in a live preview");
            "internal error".to_string()
        }
        other => other.to_string(),
    };
    event("error", json!({"error": message, "sqlstate": e.sqlstate()}))
}

type Sent = Result<(), tokio::sync::mpsc::error::SendError<Event>>;

/// Sends a row result batch by batch until it ends, `PREVIEW_ROWS_MAX` rows
/// or the deadline; then `end` with whether rows were left out.
async fn preview_rows(
    rows: crate::engine::RowStream,
    tx: &tokio::sync::mpsc::Sender<Event>,
    deadline: tokio::time::Instant,
) -> Sent {
    tx.send(event("columns", Value::Array(columns(&rows.schema)))).await?;
    let mut batches = rows.batches;
    let mut sent_rows = 0;
    let mut truncated = false;
    loop {
        let batch = match tokio::time::timeout_at(deadline, batches.next()).await {
            Err(_) => {
                truncated = true;
                break;
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => return tx.send(error_event(&e)).await,
            Ok(Some(Ok(b))) => b,
        };
        let mut out = Vec::new();
        truncated = push_rows(&batch, &mut out, PREVIEW_ROWS_MAX - sent_rows);
        sent_rows += out.len();
        if !out.is_empty() {
            tx.send(event("rows", Value::Array(out))).await?;
        }
        if truncated || sent_rows == PREVIEW_ROWS_MAX {
            truncated = true;
            break;
        }
    }
    drop(batches);
    tx.send(event("end", json!({"rows": sent_rows, "truncated": truncated})))
        .await
}
