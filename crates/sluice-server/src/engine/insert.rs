//! `INSERT INTO stream VALUES …`: DataFusion evaluates and casts the values
//! against the stream's schema; the rows are appended to the stream's
//! memory log all at once, or not at all.

use arrow::compute::cast;
use arrow::record_batch::RecordBatch;
use datafusion::datasource::MemTable;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use sluice_cluster::Master;
use sluice_connectors::MemoryLogs;
use sluice_sql::errors::plan_error;
use sluice_sql::statement::normalize_name;
use sluice_types::{Error, Result, SqlCode};
use sqlparser::ast::{Insert, Statement, TableObject};
use std::sync::Arc;

/// Rows one `INSERT` may write: 100 000. A VALUES list longer than this is
/// refused before anything is evaluated, an `INSERT … SELECT` (from
/// `generate_series`, `unnest`, …) as soon as its rows pass it; either way
/// `54000` naming the limit, and nothing is appended.
pub const INSERT_ROWS_MAX: usize = 100_000;

fn too_many_rows(rows: &str) -> Error {
    Error::user(
        SqlCode::ProgramLimitExceeded,
        format!("INSERT of {rows} rows is over the limit of {INSERT_ROWS_MAX} rows per statement; insert in batches"),
    )
}

/// Appends the rows of `insert` to its stream's log in `logs`; returns how many.
pub async fn insert(master: &Master, logs: &MemoryLogs, insert: &Insert) -> Result<u64> {
    let TableObject::TableName(name) = &insert.table else {
        return Err(Error::unsupported("INSERT INTO a table function is not supported"));
    };
    let name = normalize_name(name);
    let def = master.insertable(&name)?;
    if let Some(source) = &insert.source {
        let mut relations = Vec::new();
        let _ = sqlparser::ast::Visit::visit(source.as_ref(), &mut Relations(&mut relations));
        if !relations.is_empty() {
            return Err(Error::unsupported(
                "INSERT … SELECT from a stream is not supported; use CREATE SINK or CREATE STREAM … AS SELECT",
            ));
        }
    }
    if let Some(source) = &insert.source
        && let sqlparser::ast::SetExpr::Values(values) = source.body.as_ref()
        && values.rows.len() > INSERT_ROWS_MAX
    {
        return Err(too_many_rows(&values.rows.len().to_string()));
    }
    let ctx = SessionContext::new();
    sluice_functions::register(&ctx);
    // Plan against nullable columns so NOT NULL is checked below, by name.
    let nullable: Vec<arrow::datatypes::Field> = def
        .schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    let planning_schema = Arc::new(arrow::datatypes::Schema::new(nullable));
    let table = MemTable::try_new(planning_schema, vec![vec![]]).map_err(plan_error)?;
    ctx.register_table(datafusion::common::TableReference::bare(name.as_str()), Arc::new(table))
        .map_err(plan_error)?;
    let mut insert = insert.clone();
    assignment_rules(&mut insert, &def.schema)?;
    let statement = datafusion::sql::parser::Statement::Statement(Box::new(Statement::Insert(insert)));
    let plan = ctx.state().statement_to_plan(statement).await.map_err(plan_error)?;
    let LogicalPlan::Dml(dml) = plan else {
        return Err(Error::internal("INSERT did not plan to a DML node"));
    };
    let df = ctx
        .execute_logical_plan(dml.input.as_ref().clone())
        .await
        .map_err(plan_error)?;
    let mut batches = df.execute_stream().await.map_err(plan_error)?;
    let mut rows = Vec::new();
    let mut count = 0usize;
    while let Some(b) = futures::StreamExt::next(&mut batches).await {
        let b = b.map_err(plan_error)?;
        count += b.num_rows();
        if count > INSERT_ROWS_MAX {
            return Err(too_many_rows(&format!("more than {INSERT_ROWS_MAX}")));
        }
        rows.push(conform(&b, &def.schema)?);
    }
    // On a quorum follower the rows go to the leader, which knows where
    // the stream's log lives (a follower's would be read by nobody).
    if let Some(appended) = master.insert_on_leader(&def.name, &rows).await? {
        return Ok(appended);
    }
    master.append(&def, rows, logs).await
}

/// Postgres' assignment rules for literal VALUES, where DataFusion's casts
/// are looser: a short row fills the remaining columns with NULL, a
/// boolean or a number cannot go into a column of another kind (42804),
/// and a fractional number into an integer column is rounded.
fn assignment_rules(insert: &mut Insert, schema: &arrow::datatypes::SchemaRef) -> Result<()> {
    use arrow::datatypes::DataType as D;
    use sqlparser::ast::{Expr, SetExpr, Value};
    let Some(SetExpr::Values(values)) = insert.source.as_mut().map(|s| s.body.as_mut()) else {
        return Ok(());
    };
    let widest = values.rows.iter().map(|r| r.len()).max().unwrap_or(0);
    if insert.columns.is_empty() && widest < schema.fields().len() && values.rows.iter().all(|r| r.len() == widest) {
        insert.columns = schema
            .fields()
            .iter()
            .take(widest)
            .map(|f| sqlparser::ast::ObjectName::from(vec![sqlparser::ast::Ident::with_quote('"', f.name())]))
            .collect();
    }
    let targets: Vec<usize> = if insert.columns.is_empty() {
        (0..schema.fields().len()).collect()
    } else {
        insert
            .columns
            .iter()
            .filter_map(|c| schema.index_of(&normalize_name(c)).ok())
            .collect()
    };
    for row in &mut values.rows {
        for (expr, column) in row.iter_mut().zip(&targets) {
            let field = schema.field(*column);
            let mismatch = |kind: &str| {
                Error::user(
                    SqlCode::DatatypeMismatch,
                    format!(
                        "column \"{}\" is of type {} but expression is of type {kind}",
                        field.name(),
                        sluice_sql::types::pg_type_name(field.data_type())
                    ),
                )
            };
            // `-1.5` is a minus applied to 1.5: round the magnitude (half away from zero).
            let inner = match expr {
                Expr::UnaryOp {
                    op: sqlparser::ast::UnaryOperator::Minus | sqlparser::ast::UnaryOperator::Plus,
                    expr,
                } => expr.as_mut(),
                other => other,
            };
            let Expr::Value(v) = inner else { continue };
            match (&mut v.value, field.data_type()) {
                (Value::Boolean(_), D::Boolean | D::Utf8) => {}
                (Value::Boolean(_), _) => return Err(mismatch("boolean")),
                (Value::Number(_, _), D::Timestamp(_, _) | D::Date32 | D::Boolean | D::Binary) => {
                    return Err(mismatch("numeric"));
                }
                (Value::Number(n, _), t) if t.is_integer() && n.contains(['.', 'e', 'E']) => {
                    if let Ok(x) = n.parse::<f64>() {
                        *n = format!("{}", x.round() as i64);
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Casts to the stream's exact schema and checks NOT NULL columns.
fn conform(batch: &RecordBatch, schema: &arrow::datatypes::SchemaRef) -> Result<RecordBatch> {
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (i, field) in schema.fields().iter().enumerate() {
        let column = batch.column(i);
        let column = if column.data_type() == field.data_type() {
            column.clone()
        } else {
            cast(column, field.data_type())?
        };
        if !field.is_nullable() && column.null_count() > 0 {
            return Err(Error::user(
                SqlCode::NotNullViolation,
                format!("null value in column \"{}\" violates not-null constraint", field.name()),
            ));
        }
        columns.push(column);
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

struct Relations<'v>(&'v mut Vec<String>);

impl sqlparser::ast::Visitor for Relations<'_> {
    type Break = ();
    fn pre_visit_relation(&mut self, relation: &sqlparser::ast::ObjectName) -> std::ops::ControlFlow<()> {
        self.0.push(relation.to_string());
        std::ops::ControlFlow::Continue(())
    }
}
