//! Queries that read no stream (`SELECT 1`, `SELECT version()`, catalog
//! queries from drivers and tools) run once, as DataFusion batch queries,
//! with `pg_catalog` and `information_schema` (see `pg_catalog`).

use super::RowStream;
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;
use sluice_sql::errors::plan_error;
use sluice_types::Result;
use sqlparser::ast::{Query, Statement};
use std::sync::Arc;

use super::pg_catalog::rewrite::rewrite;
use super::pg_catalog::{self, DATABASE_NAME, Snapshot};

/// A context whose default schema is `pg_catalog` (unqualified catalog
/// names resolve as in Postgres) in catalog `sluice`, with the catalog
/// tables and functions over `snapshot`.
fn context(snapshot: Arc<Snapshot>) -> SessionContext {
    let config = SessionConfig::new()
        .with_information_schema(false)
        .with_default_catalog_and_schema(DATABASE_NAME, "pg_catalog");
    let ctx = SessionContext::new_with_config(config);
    sluice_functions::register(&ctx);
    pg_catalog::register(&ctx, snapshot);
    ctx
}

/// The logical plan of `query`, rewritten for the catalog (see
/// `pg_catalog::rewrite`).
async fn plan(ctx: &SessionContext, query: &Query, snapshot: &Snapshot) -> Result<LogicalPlan> {
    let mut query = query.clone();
    rewrite(&mut query, snapshot)?;
    let statement = datafusion::sql::parser::Statement::Statement(Box::new(Statement::Query(Box::new(query))));
    let plan = ctx.state().statement_to_plan(statement).await.map_err(plan_error)?;
    sluice_sql::complexity::check_plan(&plan)?;
    Ok(plan)
}

/// Plans `query` and returns its parameter types and output schema.
pub async fn describe(query: &Query, snapshot: Snapshot) -> Result<(Vec<DataType>, SchemaRef)> {
    let snapshot = Arc::new(snapshot);
    let ctx = context(snapshot.clone());
    let plan = plan(&ctx, query, &snapshot).await?;
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
pub async fn run(query: &Query, snapshot: Snapshot) -> Result<RowStream> {
    let snapshot = Arc::new(snapshot);
    let ctx = context(snapshot.clone());
    let plan = match plan(&ctx, query, &snapshot).await {
        Ok(plan) => plan,
        // psql's footers over tables without rows (see `has_no_rows`).
        Err(_) if pg_catalog::has_no_rows(query) => {
            let schema: SchemaRef = Arc::new(arrow::datatypes::Schema::new(vec![arrow::datatypes::Field::new(
                "none",
                DataType::Utf8,
                true,
            )]));
            return Ok(RowStream {
                schema,
                batches: futures::stream::empty().boxed(),
            });
        }
        Err(e) => return Err(e),
    };
    let df = ctx.execute_logical_plan(plan).await.map_err(plan_error)?;
    let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
    let stream = df.execute_stream().await.map_err(plan_error)?;
    Ok(RowStream {
        schema,
        batches: stream.map(|r| r.map_err(plan_error)).boxed(),
    })
}
