//! `DECLARE name [WITH HOLD] CURSOR FOR query`, `FETCH`, `CLOSE`, and the
//! session's open cursors (at most [`CURSORS_MAX`]). A cursor without
//! `WITH HOLD` lives until its transaction block ends.

use super::{Ctx, command};
use crate::engine::Output;
use crate::engine::query::{Cursor, SharedCursor, fetch};
use sluice_sql::statement::normalize_ident;
use sluice_types::{Error, ObjectKind, Result, SqlCode};
use sqlparser::ast::{CloseCursor, FetchDirection, Value};
use std::collections::HashMap;

/// Open cursors per session.
pub const CURSORS_MAX: usize = 64;

/// A session's open cursors.
#[derive(Default)]
pub struct Cursors {
    open: HashMap<String, OpenCursor>,
}

/// A cursor and whether it outlives its transaction (`WITH HOLD`).
struct OpenCursor {
    cursor: SharedCursor,
    hold: bool,
}

impl Cursors {
    /// `DECLARE …`; `in_block`: inside a transaction block.
    pub async fn declare(
        &mut self,
        ctx: Ctx<'_>,
        stmts: Vec<sqlparser::ast::Declare>,
        in_block: bool,
    ) -> Result<Output> {
        for d in stmts {
            let Some(q) = d.for_query else {
                return Err(Error::unsupported(
                    "DECLARE is supported for cursors: DECLARE c CURSOR FOR query",
                ));
            };
            let name = d
                .names
                .first()
                .map(normalize_ident)
                .ok_or_else(|| Error::syntax("DECLARE needs a name"))?;
            let hold = d.hold.unwrap_or(false);
            if !hold && !in_block {
                return Err(Error::user(
                    SqlCode::NoActiveTransaction,
                    "DECLARE CURSOR can only be used in transaction blocks (or declare it WITH HOLD)",
                ));
            }
            if self.open.contains_key(&name) {
                return Err(Error::user(
                    SqlCode::DuplicateCursor,
                    format!("cursor \"{name}\" already exists"),
                ));
            }
            if self.open.len() >= CURSORS_MAX {
                return Err(Error::user(
                    SqlCode::ConfigurationLimitExceeded,
                    format!("too many open cursors (limit {CURSORS_MAX}); CLOSE some first"),
                ));
            }
            let rows = ctx.rows(&q).await?;
            self.open.insert(
                name,
                OpenCursor {
                    cursor: Cursor::new(rows),
                    hold,
                },
            );
        }
        Ok(command("DECLARE CURSOR"))
    }

    /// `FETCH [FORWARD] n | NEXT | ALL name`.
    pub async fn fetch(&self, name: &str, direction: FetchDirection) -> Result<Output> {
        let count = match direction {
            FetchDirection::Next => Some(1),
            FetchDirection::Count { limit } | FetchDirection::Forward { limit: Some(limit) } => {
                Some(fetch_count(&limit.value)?)
            }
            FetchDirection::Forward { limit: None } => Some(1),
            FetchDirection::All | FetchDirection::ForwardAll => None,
            _ => {
                return Err(Error::unsupported(
                    "cursors move forward only: FETCH [FORWARD] n | NEXT | ALL",
                ));
            }
        };
        let cursor = self.get(name)?;
        let schema = cursor.lock().await.schema.clone();
        Ok(Output::Rows {
            tag: "FETCH".into(),
            rows: fetch(cursor, count, schema),
        })
    }

    /// `CLOSE name | ALL`.
    pub fn close(&mut self, cursor: CloseCursor) -> Result<Output> {
        match cursor {
            CloseCursor::All => self.open.clear(),
            CloseCursor::Specific { name } => {
                let name = normalize_ident(&name);
                self.open
                    .remove(&name)
                    .ok_or_else(|| Error::not_found(ObjectKind::Cursor, &name))?;
            }
        }
        Ok(command("CLOSE CURSOR"))
    }

    /// Closes every cursor (`DISCARD ALL`).
    pub fn clear(&mut self) {
        self.open.clear();
    }

    /// A transaction block ended: its cursors close, those declared
    /// `WITH HOLD` stay.
    pub fn end_of_block(&mut self) {
        self.open.retain(|_, c| c.hold);
    }

    /// An open cursor.
    pub fn get(&self, name: &str) -> Result<SharedCursor> {
        self.open
            .get(name)
            .map(|c| c.cursor.clone())
            .ok_or_else(|| Error::not_found(ObjectKind::Cursor, name))
    }

    /// The columns of an open cursor.
    pub async fn schema(&self, name: &str) -> Option<arrow::datatypes::SchemaRef> {
        let cursor = self.open.get(name)?.cursor.clone();
        let schema = cursor.lock().await.schema.clone();
        Some(schema)
    }
}

fn fetch_count(v: &Value) -> Result<usize> {
    match v {
        Value::Number(n, _) => n
            .parse()
            .map_err(|_| Error::syntax(format!("FETCH count must be a number, got {n}"))),
        other => Err(Error::syntax(format!("FETCH count must be a number, got {other}"))),
    }
}
