//! Result column names as Postgres gives them to a client: an unaliased
//! output column is named after what it is — a column after the column
//! (as DataFusion names it too), a function call after the function
//! (`count(*)` → `count`), a cast after its operand or else its type
//! (`1::int` → `int4`), `CASE` → `case`, and anything else (`1`, `a + 1`)
//! `?column?`. Postgres' `FigureColname` is the reference.
//!
//! Only what a client receives is renamed (SELECT, DECLARE, COPY, and the
//! Describe of a prepared query): the columns of stored pipelines (`CREATE
//! STREAM … AS`, `CREATE SINK … AS`) keep the planner's names, which later
//! queries and sinks refer to.

use super::RowStream;
use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use futures::StreamExt;
use sqlparser::ast::{Expr, Query, SelectItem, SetExpr};
use std::sync::Arc;

/// Postgres' name for an unaliased select item, or `None` where the
/// planner's name is already Postgres' (column references, aliases,
/// wildcards).
fn figure_name(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => None,
        Expr::Nested(inner) => figure_name(inner),
        Expr::Function(f) => f
            .name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .map(sluice_sql::names::normalize_ident),
        Expr::Cast { expr, data_type, .. } => match expr.as_ref() {
            Expr::Identifier(i) => Some(sluice_sql::names::normalize_ident(i)),
            Expr::CompoundIdentifier(parts) => parts.last().map(sluice_sql::names::normalize_ident),
            inner => match figure_name(inner).as_deref() {
                Some("?column?") | None => Some(
                    sluice_sql::types::arrow_type(data_type)
                        .map(|t| sluice_sql::types::pg_type(&t).typname().to_string())
                        .unwrap_or_else(|_| "?column?".to_string()),
                ),
                Some(name) => Some(name.to_string()),
            },
        },
        Expr::Case { .. } => Some("case".into()),
        Expr::Exists { .. } => Some("exists".into()),
        Expr::Array(_) => Some("array".into()),
        Expr::Extract { .. } => Some("extract".into()),
        Expr::Substring { .. } => Some("substring".into()),
        Expr::Position { .. } => Some("position".into()),
        Expr::Trim { .. } => Some("btrim".into()),
        Expr::Ceil { .. } => Some("ceil".into()),
        Expr::Floor { .. } => Some("floor".into()),
        _ => Some("?column?".into()),
    }
}

/// The Postgres names of `query`'s output columns, by position, where they
/// differ from the planner's; `None` when the output cannot be matched to
/// select items (a wildcard among them).
fn postgres_names(query: &Query, columns: usize) -> Option<Vec<Option<String>>> {
    let mut body = query.body.as_ref();
    // Set operations take their names from the first branch.
    loop {
        match body {
            SetExpr::SetOperation { left, .. } => body = left,
            SetExpr::Query(q) => body = q.body.as_ref(),
            _ => break,
        }
    }
    let SetExpr::Select(select) = body else { return None };
    if select.projection.len() != columns {
        return None;
    }
    select
        .projection
        .iter()
        .map(|item| match item {
            SelectItem::UnnamedExpr(e) => Some(figure_name(e)),
            SelectItem::ExprWithAlias { .. } => Some(None),
            _ => None,
        })
        .collect()
}

/// `schema` with `query`'s unaliased columns named as Postgres names them.
pub fn rename(query: &Query, schema: &SchemaRef) -> SchemaRef {
    let columns = schema.fields().len();
    // A changelog's op column leads the select items' columns.
    let changelog = || {
        let op = schema.fields().first()?;
        if op.name() != sluice_plan::OP_COLUMN {
            return None;
        }
        let mut names = postgres_names(query, columns - 1)?;
        names.insert(0, None);
        Some(names)
    };
    let Some(names) = postgres_names(query, columns).or_else(changelog) else {
        return schema.clone();
    };
    if names.iter().all(Option::is_none) {
        return schema.clone();
    }
    let fields: Vec<_> = schema
        .fields()
        .iter()
        .zip(names)
        .map(|(f, name)| match name {
            Some(name) => Arc::new(f.as_ref().clone().with_name(name)),
            None => f.clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// `rows` with its columns named as Postgres names them.
pub fn rename_rows(query: &Query, rows: RowStream) -> RowStream {
    let schema = rename(query, &rows.schema);
    if Arc::ptr_eq(&schema, &rows.schema) {
        return rows;
    }
    let batch_schema = schema.clone();
    RowStream {
        schema,
        batches: rows
            .batches
            .map(move |b| {
                b.and_then(|b| {
                    RecordBatch::try_new(batch_schema.clone(), b.columns().to_vec())
                        .map_err(|e| sluice_types::Error::internal(format!("renaming result columns: {e}")))
                })
            })
            .boxed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field};
    use sluice_sql::statement::{SluiceStatement, parse_statements};

    fn names(sql: &str, planner_names: &[&str]) -> Vec<String> {
        let SluiceStatement::Sql(s) = parse_statements(sql).unwrap().pop().unwrap() else {
            panic!("not SQL")
        };
        let sqlparser::ast::Statement::Query(q) = *s else {
            panic!("not a query")
        };
        let schema = Arc::new(Schema::new(
            planner_names
                .iter()
                .map(|n| Field::new(*n, DataType::Int64, true))
                .collect::<Vec<_>>(),
        ));
        rename(&q, &schema).fields().iter().map(|f| f.name().clone()).collect()
    }

    /// Expected names are what Postgres 15 answers for the same queries.
    #[test]
    fn unaliased_columns_are_named_as_postgres_names_them() {
        assert_eq!(names("SELECT 1", &["Int64(1)"]), ["?column?"]);
        assert_eq!(
            names("SELECT 1, 2 AS two, 1 + 1", &["Int64(1)", "two", "Int64(1) + Int64(1)"]),
            ["?column?", "two", "?column?"]
        );
        assert_eq!(
            names(
                "SELECT a, s.b, count(*), CASE WHEN a > 1 THEN 1 END FROM s",
                &["a", "b", "count(*)", "x"]
            ),
            ["a", "b", "count", "case"]
        );
        assert_eq!(
            names("SELECT 1::int, a::text, version()::text FROM s", &["x", "y", "z"]),
            ["int4", "a", "version"]
        );
        assert_eq!(names("SELECT 1 UNION ALL SELECT 2", &["Int64(1)"]), ["?column?"]);
        // A wildcard: the output cannot be matched to items; names stay.
        assert_eq!(
            names("SELECT *, 1 FROM s", &["a", "b", "Int64(1)"]),
            ["a", "b", "Int64(1)"]
        );
    }
}
