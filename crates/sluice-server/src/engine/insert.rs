//! `INSERT INTO stream VALUES …`: DataFusion evaluates and casts the values
//! against the stream's schema; the rows are appended to the stream's
//! memory log all at once, or not at all.

use arrow::compute::cast;
use arrow::record_batch::RecordBatch;
use datafusion::datasource::MemTable;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use sluice_cluster::Master;
use sluice_sql::errors::plan_error;
use sluice_sql::statement::normalize_name;
use sluice_types::{Error, Result, SqlCode};
use sqlparser::ast::{Insert, Statement, TableObject};
use std::sync::Arc;

/// Appends the rows of `insert`; returns how many.
pub async fn insert(master: &Master, insert: &Insert) -> Result<u64> {
    let TableObject::TableName(name) = &insert.table else {
        return Err(Error::unsupported("INSERT INTO a table function is not supported"));
    };
    let name = normalize_name(name);
    let def = master
        .stream(&name)
        .ok_or_else(|| Error::user(SqlCode::UndefinedTable, format!("stream \"{name}\" does not exist")))?;
    if def.connector != "memory" || def.pipeline.is_some() {
        return Err(Error::unsupported(format!(
            "INSERT works on memory streams; \"{name}\" is written by its {} connector",
            if def.pipeline.is_some() {
                "pipeline"
            } else {
                def.connector.as_str()
            }
        )));
    }
    if let Some(source) = &insert.source {
        let mut relations = Vec::new();
        let _ = sqlparser::ast::Visit::visit(source.as_ref(), &mut Relations(&mut relations));
        if !relations.is_empty() {
            return Err(Error::unsupported(
                "INSERT … SELECT from a stream is not supported; use CREATE SINK or CREATE STREAM … AS SELECT",
            ));
        }
    }
    let ctx = SessionContext::new();
    let table = MemTable::try_new(def.schema.clone(), vec![vec![]]).map_err(plan_error)?;
    ctx.register_table(datafusion::common::TableReference::bare(name.as_str()), Arc::new(table))
        .map_err(plan_error)?;
    let statement = datafusion::sql::parser::Statement::Statement(Box::new(Statement::Insert(insert.clone())));
    let plan = ctx.state().statement_to_plan(statement).await.map_err(plan_error)?;
    let LogicalPlan::Dml(dml) = plan else {
        return Err(Error::internal("INSERT did not plan to a DML node"));
    };
    let df = ctx
        .execute_logical_plan(dml.input.as_ref().clone())
        .await
        .map_err(plan_error)?;
    let batches = df.collect().await.map_err(plan_error)?;
    let mut rows = Vec::with_capacity(batches.len());
    for b in batches {
        rows.push(conform(&b, &def.schema)?);
    }
    master.memory_log(&def)?.append(rows)
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
                SqlCode::DataException,
                format!(
                    "null value in column \"{}\" violates its NOT NULL constraint",
                    field.name()
                ),
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
