//! `POST /api/v1/sql`: the same engine and errors as pgwire, answered as
//! JSON. A row result is cut at `HTTP_ROWS_MAX` rows or `HTTP_QUERY_WAIT`,
//! whichever comes first (a continuous query is then stopped), and says so.

use crate::engine::{Engine, Output};
use arrow::util::display::array_value_to_string;
use futures::StreamExt;
use serde_json::{Value, json};
use sluice_types::Error;
use std::sync::Arc;
use std::time::Duration;

/// Rows returned for one statement at most.
pub const HTTP_ROWS_MAX: usize = 1000;
/// How long a row result is waited for at most.
pub const HTTP_QUERY_WAIT: Duration = Duration::from_secs(5);

/// Runs `sql` in a fresh session: one JSON result per statement, or the
/// first error (with the results before it).
pub async fn run(engine: &Arc<Engine>, sql: &str) -> Result<Vec<Value>, (Vec<Value>, Error)> {
    let mut session = engine.new_session("http");
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
    let columns: Vec<Value> = rows
        .schema
        .fields()
        .iter()
        .map(|f| json!({ "name": f.name(), "type": crate::engine::pg_type_name(f.data_type()) }))
        .collect();
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
        for row in 0..batch.num_rows() {
            if out.len() == HTTP_ROWS_MAX {
                truncated = true;
                break;
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
        if truncated {
            break;
        }
    }
    // Dropping the stream stops a continuous query.
    drop(batches);
    Ok(json!({ "tag": tag, "columns": columns, "rows": out, "truncated": truncated }))
}
