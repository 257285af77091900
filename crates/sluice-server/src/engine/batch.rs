//! Queries that read no stream (`SELECT 1`, `SELECT version()`, catalog
//! probes from drivers) run once, as DataFusion batch queries.

use super::RowStream;
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{ColumnarValue, ScalarUDF, Volatility, create_udf};
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;
use sluice_sql::errors::plan_error;
use sluice_types::Result;
use sqlparser::ast::{Query, Statement};
use std::sync::Arc;

/// The version string `version()` returns.
pub fn version_string() -> String {
    format!(
        "PostgreSQL 15.0 (Sluice {}) on x86_64, a streaming SQL server",
        env!("CARGO_PKG_VERSION")
    )
}

fn constant_udf(name: &str, value: String) -> ScalarUDF {
    create_udf(
        name,
        vec![],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(move |_args: &[ColumnarValue]| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(value.clone()))))),
    )
}

fn context() -> SessionContext {
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_information_schema(false));
    ctx.register_udf(constant_udf("version", version_string()));
    ctx.register_udf(constant_udf("current_schema", "public".into()));
    ctx.register_udf(constant_udf("current_database", "sluice".into()));
    ctx.register_udf(constant_udf("current_user", "sluice".into()));
    ctx.register_udf(constant_udf("session_user", "sluice".into()));
    ctx
}

/// Plans `query` and returns its parameter types and output schema.
pub async fn describe(query: &Query) -> Result<(Vec<DataType>, SchemaRef)> {
    let ctx = context();
    let statement = datafusion::sql::parser::Statement::Statement(Box::new(Statement::Query(Box::new(query.clone()))));
    let plan = ctx.state().statement_to_plan(statement).await.map_err(plan_error)?;
    sluice_sql::complexity::check_plan(&plan)?;
    let types = plan.get_parameter_types().map_err(plan_error)?;
    let mut params: Vec<(usize, DataType)> = types
        .into_iter()
        .filter_map(|(n, t)| {
            n.trim_start_matches('$')
                .parse()
                .ok()
                .map(|i| (i, t.unwrap_or(DataType::Utf8)))
        })
        .collect();
    params.sort_by_key(|(i, _)| *i);
    Ok((
        params.into_iter().map(|(_, t)| t).collect(),
        Arc::new(plan.schema().as_arrow().clone()),
    ))
}

/// Runs `query` to completion.
pub async fn run(query: &Query) -> Result<RowStream> {
    let ctx = context();
    let statement = datafusion::sql::parser::Statement::Statement(Box::new(Statement::Query(Box::new(query.clone()))));
    let plan = ctx.state().statement_to_plan(statement).await.map_err(plan_error)?;
    sluice_sql::complexity::check_plan(&plan)?;
    let df = ctx.execute_logical_plan(plan).await.map_err(plan_error)?;
    let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
    let stream = df.execute_stream().await.map_err(plan_error)?;
    Ok(RowStream {
        schema,
        batches: stream.map(|r| r.map_err(plan_error)).boxed(),
    })
}
