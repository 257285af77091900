//! The streaming planner: a query → DataFusion logical plan (binding names,
//! types and functions) → a [`PhysicalDag`].
//!
//! Streams are registered with DataFusion as schema-only tables; window
//! TVFs as synthetic tables with `window_start` / `window_end`. The logical
//! plan is then walked bottom-up ([`dag`]): scans become sources, chains of
//! filters and projections fuse into one project operator, and an aggregate
//! over a window table becomes a pre-projection, a hash exchange on the
//! group keys, and a window aggregate.

mod dag;
mod stage;

use crate::errors::plan_error;
use crate::hidden::{HiddenColumns, exclude_hidden_columns};
use crate::window_tvf::{WindowTvf, extract_window_tvfs};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::common::TableReference;
use datafusion::datasource::empty::EmptyTable;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use sluice_plan::catalog::StreamDef;
use sluice_plan::{PhysicalDag, SinkSpec};
use sluice_types::{Error, ObjectKind, Result, SqlCode};
use sqlparser::ast::{Query, Statement, Visit};
use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::sync::Arc;

/// Read access to the streams a query may name.
pub trait StreamCatalog: Send + Sync {
    fn stream(&self, name: &str) -> Option<StreamDef>;

    /// How many source instances can read `def` (its connector's limit, a
    /// memory log's one partition); `None`: as many as the parallelism.
    fn source_readers_max(&self, def: &StreamDef) -> Option<usize>;

    /// Whether a sink of `connector` with `options` takes a changelog; an
    /// append-only sink refuses an updating query.
    fn sink_accepts_changelog(&self, connector: &str, options: &BTreeMap<String, String>) -> bool;
}

/// Groups one instance of an aggregate without a window holds by default.
pub const AGGREGATE_GROUPS_MAX_DEFAULT: usize = 1_000_000;
/// Open window groups per window-aggregate instance unless `SET window_groups_max`.
pub const WINDOW_GROUPS_MAX_DEFAULT: usize = 1_000_000;

/// Settings that shape a plan.
#[derive(Debug, Clone)]
pub struct PlannerSettings {
    /// Instances per operator (sources, projections, keyed windows).
    pub parallelism: u32,
    /// Open window groups per window-aggregate instance (`SET window_groups_max`).
    pub window_groups_max: usize,
    /// Groups per instance of an aggregate without a window (`SET aggregate_groups_max`).
    pub aggregate_groups_max: usize,
    /// How long an updating operator keeps a group not updated (`SET state_ttl`).
    pub state_ttl_ms: Option<i64>,
    /// How long an unwindowed join keeps a row (`SET join_state_ttl`).
    pub join_state_ttl_ms: Option<i64>,
    /// Rows one join instance may hold (`SET join_state_rows_max`).
    pub join_state_rows_max: usize,
    /// Buckets of a split distinct aggregation (`SET
    /// distinct_split_buckets`; 0: not split).
    pub distinct_split_buckets: u32,
}

impl Default for PlannerSettings {
    fn default() -> Self {
        PlannerSettings {
            parallelism: 1,
            window_groups_max: WINDOW_GROUPS_MAX_DEFAULT,
            aggregate_groups_max: AGGREGATE_GROUPS_MAX_DEFAULT,
            state_ttl_ms: None,
            join_state_ttl_ms: None,
            join_state_rows_max: 10_000_000,
            distinct_split_buckets: 0,
        }
    }
}

/// A planned continuous query.
#[derive(Debug, Clone)]
pub struct PlannedQuery {
    pub dag: PhysicalDag,
    /// The rows the query produces (the sink's input).
    pub schema: SchemaRef,
    /// `LIMIT n`: the query ends after n rows.
    pub limit: Option<usize>,
    /// Output column carrying event time whose watermark the pipeline
    /// forwards (derived streams): a passed-through source event-time
    /// column, or `window_end`.
    pub event_time_column: Option<usize>,
}

/// Plans queries against a catalog.
pub struct Planner<'a> {
    catalog: &'a dyn StreamCatalog,
    settings: PlannerSettings,
}

/// Synthetic columns a window TVF adds.
pub const WINDOW_START: &str = "window_start";
pub const WINDOW_END: &str = "window_end";

impl<'a> Planner<'a> {
    pub fn new(catalog: &'a dyn StreamCatalog, settings: PlannerSettings) -> Self {
        Planner { catalog, settings }
    }

    /// Whether the query reads a stream (a continuous query) or not (a
    /// one-off batch query); `42P01` for a relation that is neither a
    /// stream nor one of the query's CTEs.
    pub fn reads_streams(&self, query: &Query) -> Result<bool> {
        self.reads_streams_besides(query, &|_| false)
    }

    /// [`Planner::reads_streams`] where `other` claims relations that are
    /// not streams (materialized views, which a batch query reads).
    pub fn reads_streams_besides(&self, query: &Query, other: &dyn Fn(&str) -> bool) -> Result<bool> {
        let mut query = query.clone();
        let windows = extract_window_tvfs(&mut query)?;
        let mut names = Vec::new();
        let _ = query.visit(&mut RelationCollector(&mut names));
        let ctes = cte_names(&query);
        names.retain(|n| !n.starts_with(crate::window_tvf::WINDOW_TABLE_PREFIX) && !ctes.contains(n) && !other(n));
        names.extend(windows.into_iter().map(|w| w.stream));
        if let Some(unknown) = names.iter().find(|n| self.catalog.stream(n).is_none()) {
            return Err(Error::not_found(ObjectKind::Stream, unknown));
        }
        Ok(!names.is_empty())
    }

    /// Binds `query` with DataFusion: its logical plan and the windows it uses.
    pub async fn logical_plan(
        &self,
        query: &Query,
    ) -> Result<(LogicalPlan, Vec<WindowTvf>, HashMap<String, StreamDef>)> {
        let mut query = query.clone();
        let windows = extract_window_tvfs(&mut query)?;
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_information_schema(false));
        sluice_functions::register(&ctx);
        let mut streams = HashMap::new();
        let mut relations = Vec::new();
        let _ = query.visit(&mut RelationCollector(&mut relations));
        let ctes = cte_names(&query);
        for name in relations {
            if name.starts_with(crate::window_tvf::WINDOW_TABLE_PREFIX) || ctes.contains(&name) {
                continue;
            }
            let def = self
                .catalog
                .stream(&name)
                .ok_or_else(|| Error::not_found(ObjectKind::Stream, &name))?;
            register(&ctx, &name, def.schema.clone())?;
            streams.insert(name, def);
        }
        for w in &windows {
            let def = self
                .catalog
                .stream(&w.stream)
                .ok_or_else(|| Error::not_found(ObjectKind::Stream, &w.stream))?;
            check_window_time(&def, w)?;
            register(&ctx, &w.table, window_table_schema(&def, w))?;
            streams.insert(w.stream.clone(), def);
        }
        let mut hidden: HiddenColumns = streams
            .iter()
            .map(|(name, def)| (name.clone(), hidden_names(&def.schema)))
            .collect();
        for w in &windows {
            if let Some(def) = streams.get(&w.stream) {
                hidden.insert(w.table.clone(), hidden_names(&def.schema));
            }
        }
        exclude_hidden_columns(&mut query, &hidden);
        let state = ctx.state();
        let statement = datafusion::sql::parser::Statement::Statement(Box::new(Statement::Query(Box::new(query))));
        let plan = state.statement_to_plan(statement).await.map_err(plan_error)?;
        crate::complexity::check_plan(&plan)?;
        let plan = state
            .analyzer()
            .execute_and_check(plan, state.config_options(), |_, _| {})
            .map_err(plan_error)?;
        Ok((plan, windows, streams))
    }

    /// The parameter types (`$1`, …) and output schema of a query: the
    /// bound plan's columns, or the planned ones (the op column first) when
    /// the result is a changelog.
    pub async fn describe(&self, query: &Query) -> Result<(Vec<DataType>, SchemaRef)> {
        let (plan, windows, streams) = self.logical_plan(query).await?;
        let types = plan.get_parameter_types().map_err(plan_error)?;
        let mut params: Vec<(usize, DataType)> = types
            .into_iter()
            .filter_map(|(name, t)| {
                name.trim_start_matches('$')
                    .parse::<usize>()
                    .ok()
                    .map(|i| (i, t.unwrap_or(DataType::Utf8)))
            })
            .collect();
        params.sort_by_key(|(i, _)| *i);
        let mut out = Vec::new();
        for (i, t) in params {
            while out.len() + 1 < i {
                out.push(DataType::Utf8);
            }
            out.push(t);
        }
        let schema = Arc::new(plan.schema().as_arrow().clone());
        // Whether the rows are a changelog is known once the DAG is built; a
        // query that cannot be built yet (its parameters unbound) is
        // described by its bound plan.
        let sink = SinkSpec {
            changelog: false,
            connector: "client".into(),
            options: Default::default(),
            event_time_column: None,
        };
        let planned =
            prune_columns(plan).and_then(|p| dag::build(&p, &windows, &streams, self.catalog, &self.settings, sink));
        let schema = match planned {
            Ok(planned)
                if planned
                    .dag
                    .operators
                    .last()
                    .is_some_and(|sink| planned.dag.updating(sink.id)) =>
            {
                // Described as planned: the op column, and the types its
                // operators emit (ROW_NUMBER() as BIGINT).
                planned.schema
            }
            _ => schema,
        };
        Ok((out, schema))
    }

    /// Plans a continuous query whose rows go to `sink`.
    pub async fn plan(&self, query: &Query, sink: SinkSpec) -> Result<PlannedQuery> {
        let (plan, windows, streams) = self.logical_plan(query).await?;
        let plan = prune_columns(plan)?;
        dag::build(&plan, &windows, &streams, self.catalog, &self.settings, sink)
    }
}

/// Column pruning: DataFusion's `optimize_projections` rule (alone, not the
/// whole optimizer) narrows every scan to the columns something above it
/// reads and puts a projection under each join input and aggregate. The DAG
/// builder then materialises only those columns, so a join or window stores
/// and ships no column the query never uses. The output schema is unchanged.
fn prune_columns(plan: LogicalPlan) -> Result<LogicalPlan> {
    use datafusion::optimizer::optimize_projections::OptimizeProjections;
    use datafusion::optimizer::{OptimizerContext, OptimizerRule};
    let pruned = OptimizeProjections::new()
        .rewrite(plan, &OptimizerContext::new())
        .map_err(plan_error)?;
    Ok(pruned.data)
}

/// Names of the query's common table expressions (`WITH x AS …`).
fn cte_names(query: &Query) -> Vec<String> {
    let mut names = Vec::new();
    let _ = query.visit(&mut CteCollector(&mut names));
    names
}

struct CteCollector<'v>(&'v mut Vec<String>);

impl sqlparser::ast::Visitor for CteCollector<'_> {
    type Break = ();
    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        if let Some(with) = &query.with {
            self.0.extend(
                with.cte_tables
                    .iter()
                    .map(|c| crate::names::normalize_ident(&c.alias.name)),
            );
        }
        ControlFlow::Continue(())
    }
}

/// The hidden columns of a stream's schema.
fn hidden_names(schema: &Schema) -> Vec<String> {
    schema
        .fields()
        .iter()
        .filter(|f| sluice_plan::catalog::is_hidden(f))
        .map(|f| f.name().clone())
        .collect()
}

/// Registers a schema-only table under its exact (already normalised) name.
fn register(ctx: &SessionContext, name: &str, schema: SchemaRef) -> Result<()> {
    let table: Arc<dyn TableProvider> = Arc::new(EmptyTable::new(schema));
    ctx.register_table(TableReference::bare(name), table)
        .map_err(plan_error)?;
    Ok(())
}

fn window_table_schema(def: &StreamDef, w: &WindowTvf) -> SchemaRef {
    let time_type = def
        .schema
        .field_with_name(&w.time_column)
        .map(|f| f.data_type().clone())
        .unwrap_or(DataType::Null);
    let mut fields: Vec<Field> = def.schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(WINDOW_START, time_type.clone(), false));
    fields.push(Field::new(WINDOW_END, time_type, false));
    Arc::new(Schema::new(fields))
}

fn check_window_time(def: &StreamDef, w: &WindowTvf) -> Result<()> {
    let Some(et) = &def.event_time else {
        return Err(Error::user(
            SqlCode::FeatureNotSupported,
            format!(
                "stream \"{}\" has no event time; declare one with WATERMARK FOR col AS col - INTERVAL '…' SECOND to use windows",
                def.name
            ),
        ));
    };
    let time_col = def.schema.field(et.column).name();
    if time_col != &w.time_column {
        let code = if def.schema.index_of(&w.time_column).is_err() {
            SqlCode::UndefinedColumn
        } else {
            SqlCode::FeatureNotSupported
        };
        return Err(Error::user(
            code,
            format!(
                "window over \"{}\".\"{}\": the stream's event-time column is \"{time_col}\" (its WATERMARK column)",
                def.name, w.time_column
            ),
        ));
    }
    Ok(())
}

struct RelationCollector<'v>(&'v mut Vec<String>);

impl sqlparser::ast::Visitor for RelationCollector<'_> {
    type Break = ();
    fn pre_visit_relation(&mut self, relation: &sqlparser::ast::ObjectName) -> ControlFlow<()> {
        let name = crate::statement::normalize_name(relation);
        if !self.0.contains(&name) {
            self.0.push(name);
        }
        ControlFlow::Continue(())
    }
}

/// Options of a planned sink, for SinkSpec construction by callers.
pub fn sink_spec(connector: &str, options: BTreeMap<String, String>) -> SinkSpec {
    SinkSpec {
        changelog: false,
        connector: connector.to_string(),
        options,
        event_time_column: None,
    }
}

#[cfg(test)]
#[path = "uid_tests.rs"]
mod uid_tests;

#[cfg(test)]
#[path = "diff_tests.rs"]
mod diff_tests;

#[cfg(test)]
#[path = "split_tests.rs"]
mod split_tests;
