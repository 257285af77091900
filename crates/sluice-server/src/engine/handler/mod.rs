//! Statement handlers, one module per statement family (the shape of
//! RisingWave's `handler/`): [`Session`](super::Session) keeps the
//! per-connection state (settings, cursors, the transaction) and the
//! failed-transaction rule, and hands each statement to its family:
//!
//! - [`ddl`]: `CREATE STREAM [AS]`, `CREATE SINK`, `DROP …`, `ALTER
//!   PIPELINE …` — planned and validated here, turned into a serialisable
//!   [`CatalogCommand`](sluice_cluster::CatalogCommand) the master applies;
//! - [`inspect`]: `SHOW …`, `DESCRIBE`, `EXPLAIN` — rows about the catalog;
//! - [`cursor`]: `DECLARE`, `FETCH`, `CLOSE` and the session's open cursors;
//! - [`transaction`]: `BEGIN`, `COMMIT`, `ROLLBACK` and the block's state;
//! - [`security`]: `CREATE USER`, `GRANT`, `CREATE TOKEN`, … — catalog
//!   commands too, passwords turned into SCRAM verifiers first;
//! - [`variable`]: `SET`, `SHOW name`, `SHOW ALL`;
//! - queries (`SELECT`, `COPY … TO STDOUT`) and `INSERT` run through the
//!   planning methods of [`Ctx`] here and `super::insert`.

pub(super) mod cursor;
pub(super) mod ddl;
pub(super) mod inspect;
pub(super) mod security;
pub(super) mod transaction;
pub(super) mod variable;

use super::catalog::MasterCatalog;
use super::settings::Settings;
use super::{Engine, Output, RowStream, batch, column_names, pg_catalog, query};
use sluice_cluster::catalog::PipelineKind;
use sluice_connectors::views::PublishedView;
use sluice_sql::planner::sink_spec;
use sluice_sql::{PlannedQuery, Planner, PlannerSettings};
use sluice_types::{Error, Result, SqlCode};
use sqlparser::ast::Query;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The views a batch query reads, by name, with their rows.
type ViewRows = Vec<(String, Arc<PublishedView>)>;

/// What a handler sees of its session: the shared engine and the
/// session's settings.
#[derive(Clone, Copy)]
pub(super) struct Ctx<'a> {
    pub engine: &'a Engine,
    pub settings: &'a Settings,
    /// The role the statement runs as.
    pub user: &'a str,
}

/// A statement's result without rows.
pub(super) fn command(tag: &str) -> Output {
    Output::Command {
        tag: tag.to_string(),
        rows: None,
    }
}

impl Ctx<'_> {
    fn planner_settings(&self) -> PlannerSettings {
        PlannerSettings {
            parallelism: self.settings.parallelism(),
            join_state_ttl_ms: self.settings.join_state_ttl_ms(),
            join_state_rows_max: self.settings.join_state_rows_max(),
            aggregate_groups_max: self.settings.aggregate_groups_max(),
            window_groups_max: self.settings.window_groups_max(),
            state_ttl_ms: self.settings.state_ttl_ms(),
            distinct_split_buckets: self.settings.distinct_split_buckets(),
        }
    }

    /// The physical plan `EXPLAIN` shows: a continuous query's, with the
    /// materialized views it reads besides streams written out as their
    /// queries. A query reading views and no stream is refused with
    /// `0A000` (a SELECT reads a view's rows at once, as a batch query).
    pub async fn plan(&self, q: &Query, sink: sluice_plan::SinkSpec) -> Result<PlannedQuery> {
        let catalog = MasterCatalog(&self.engine.master);
        let planner = Planner::new(&catalog, self.planner_settings());
        sluice_sql::views::refuse_windows_over_views(q, &|n: &str| self.view_named(&[n.to_string()]).is_some())?;
        let views = self.views_named(q);
        if let Some(view) = views.first() {
            let is_view = |n: &str| views.iter().any(|v| v.name == n);
            if !planner.reads_streams_besides(q, &is_view)? {
                return Err(Error::unsupported(format!(
                    "EXPLAIN shows the plan of a continuous query, and this one reads materialized view \"{}\" and no stream: a SELECT reads its rows at once",
                    view.name
                )));
            }
        }
        match self.written_out(q)? {
            Some(expanded) => planner.plan(&expanded, sink).await,
            None => planner.plan(q, sink).await,
        }
    }

    /// The physical plan of a pipeline's query (a sink's, a derived
    /// stream's, a view's), and that query with the materialized views it
    /// reads written out as their queries (`sluice_sql::views`: the
    /// pipeline computes them itself, planned with this session's
    /// settings) — `None` when it reads no view.
    pub async fn plan_pipeline(&self, q: &Query, sink: sluice_plan::SinkSpec) -> Result<(PlannedQuery, Option<Query>)> {
        let catalog = MasterCatalog(&self.engine.master);
        let planner = Planner::new(&catalog, self.planner_settings());
        let expanded = self.written_out(q)?;
        let planned = planner.plan(expanded.as_ref().unwrap_or(q), sink).await?;
        Ok((planned, expanded))
    }

    /// `q` with the materialized views it reads written out as their
    /// queries (`sluice_sql::views`), or `None` when it reads none.
    fn written_out(&self, q: &Query) -> Result<Option<Query>> {
        let mut expanded = q.clone();
        let views = |parts: &[String]| -> Result<Option<sluice_sql::views::ViewQuery>> {
            self.view_named(parts).map(|def| view_query(&def)).transpose()
        };
        let inlined = sluice_sql::views::inline_views(&mut expanded, &views)?;
        Ok((!inlined.is_empty()).then_some(expanded))
    }

    /// The materialized views `q` names, each once, in the order named.
    fn views_named(&self, q: &Query) -> Vec<sluice_cluster::catalog::PipelineDef> {
        let mut views: Vec<sluice_cluster::catalog::PipelineDef> = Vec::new();
        for parts in pg_catalog::relation_names(q) {
            if let Some(def) = self.view_named(&parts)
                && !views.iter().any(|v| v.name == def.name)
            {
                views.push(def);
            }
        }
        views
    }

    /// The plan `EXPLAIN q` shows. As in Postgres, explaining needs what
    /// running needs: SELECT on every stream the plan reads (`42501`
    /// otherwise), so a plan does not reveal what the role may not read.
    pub async fn explained(&self, q: &Query) -> Result<sluice_plan::PhysicalDag> {
        let planned = self.plan(q, sink_spec("client", BTreeMap::new())).await?;
        let who = super::authorize::who(self.engine, self.user)?;
        super::authorize::check_reads(self.engine, &who, &planned.dag)?;
        Ok(planned.dag)
    }

    /// The parameter types and output columns of a query for this
    /// session's client (columns named as `rows` names them).
    pub async fn describe_query(
        &self,
        q: &Query,
    ) -> Result<(Vec<arrow::datatypes::DataType>, arrow::datatypes::SchemaRef)> {
        let catalog = MasterCatalog(&self.engine.master);
        let planner = Planner::new(&catalog, self.planner_settings());
        let (params, schema) = if let Some(views) = self.batch_views(q, &planner, Need::Schema).await? {
            batch::describe(q, self.catalog_snapshot().with_views(views)).await?
        } else {
            planner.describe(self.written_out(q)?.as_ref().unwrap_or(q)).await?
        };
        Ok((params, column_names::rename(q, &schema)))
    }

    /// Rows of a query for this session's client: continuous if it reads a
    /// stream, batch otherwise; columns named as Postgres names them.
    pub async fn rows(&self, q: &Query) -> Result<RowStream> {
        let catalog = MasterCatalog(&self.engine.master);
        let planner = Planner::new(&catalog, self.planner_settings());
        let rows = if let Some(views) = self.batch_views(q, &planner, Need::Rows).await? {
            batch::run(q, self.catalog_snapshot().with_views(views)).await?
        } else {
            let expanded = self.written_out(q)?;
            let planned = planner
                .plan(expanded.as_ref().unwrap_or(q), sink_spec("client", BTreeMap::new()))
                .await?;
            let who = super::authorize::who(self.engine, self.user)?;
            super::authorize::check_reads(self.engine, &who, &planned.dag)?;
            query::start(&self.engine.master, &self.engine.data.clients, &planned).await?
        };
        Ok(column_names::rename_rows(q, rows))
    }

    /// The materialized view a relation name (`v` or `public.v`) names.
    fn view_named(&self, parts: &[String]) -> Option<sluice_cluster::catalog::PipelineDef> {
        let name = match parts {
            [name] => name,
            [schema, name] if schema == "public" => name,
            _ => return None,
        };
        self.engine
            .master
            .pipeline(name)
            .filter(|p| p.kind == PipelineKind::MaterializedView)
    }

    /// `Some(views)` when `q` runs once as a batch query — it reads the
    /// catalog, materialized views (`views`: their rows as of their last
    /// barrier) or nothing — and `None` when it reads streams (a
    /// continuous query, the views it reads besides written out as their
    /// queries, see [`Ctx::plan_pipeline`]). Reading a view needs what
    /// reading its query needs (SELECT on every stream it reads, `42501`
    /// otherwise); on a quorum follower a view's rows come from the
    /// leader; a view whose pipeline has not published (on this server,
    /// or the leader) is `55000`. With [`Need::Schema`] (describing a
    /// statement) a view this server does not hold is no rows of its
    /// columns, from the catalog: a follower asks the leader for the rows
    /// once, when the statement runs.
    async fn batch_views(&self, q: &Query, planner: &Planner<'_>, need: Need) -> Result<Option<ViewRows>> {
        let defs = self.views_named(q);
        // A window names its stream as an argument, not a relation.
        sluice_sql::views::refuse_windows_over_views(q, &|n: &str| self.view_named(&[n.to_string()]).is_some())?;
        let is_view = |n: &str| defs.iter().any(|v| v.name == n);
        let catalog = self.reads_catalog(q);
        if !catalog && planner.reads_streams_besides(q, &is_view)? {
            return Ok(None);
        }
        let mut views: ViewRows = Vec::new();
        for def in defs {
            let name = &def.name;
            let who = super::authorize::who(self.engine, self.user)?;
            super::authorize::check_reads(self.engine, &who, &def.dag)?;
            // In a cluster the view's sink runs on a worker, which gives
            // its rows; in the playground (or for a view over a memory
            // stream) they are this process's; on a quorum follower the
            // leader's, which runs the view's pipeline.
            let on_worker = match need {
                Need::Rows => self.engine.master.worker_view(name).await?,
                Need::Schema => None,
            };
            let rows = match on_worker.map(Arc::new).or_else(|| self.engine.data.views.get(name)) {
                Some(rows) => rows,
                None if need == Need::Schema
                    && let Some(empty) = view_columns(&def) =>
                {
                    Arc::new(empty)
                }
                None => match self.engine.master.leader_view(name).await? {
                    Some(rows) => Arc::new(rows),
                    None => {
                        return Err(Error::user(
                            SqlCode::ObjectNotInPrerequisiteState,
                            format!(
                                "materialized view {name} has no rows on this server yet: its pipeline has not started here (SHOW PIPELINES says why)"
                            ),
                        ));
                    }
                },
            };
            views.push((name.clone(), rows));
        }
        Ok(Some(views))
    }
}

/// What a batch query over materialized views needs of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// Their columns (describing a statement).
    Schema,
    /// Their rows (running it).
    Rows,
}

/// Materialized view `def` holding no rows: its columns, as its sink
/// receives them without the changelog's op column.
fn view_columns(def: &sluice_cluster::catalog::PipelineDef) -> Option<sluice_connectors::views::PublishedView> {
    let (sink, schema) = def.dag.operators.iter().find_map(|o| match &o.kind {
        sluice_plan::OperatorKind::Sink(s) if s.connector == "view" => Some((s, o.output_schema.clone())),
        _ => None,
    })?;
    let skip = usize::from(sink.changelog);
    let schema = Arc::new(arrow::datatypes::Schema::new(schema.fields()[skip..].to_vec()));
    Some(sluice_connectors::views::PublishedView::new(
        schema,
        Vec::new(),
        None,
        0,
    ))
}

impl Ctx<'_> {
    /// Whether `q` reads `pg_catalog` or `information_schema` (it then runs
    /// as a batch query over the catalog, not as a stream query).
    fn reads_catalog(&self, q: &Query) -> bool {
        pg_catalog::reads_catalog(q, |name| self.engine.master.stream(name).is_some())
    }

    /// What the catalog tables show this session now: streams, and
    /// materialized views with the columns and text of their query.
    pub fn catalog_snapshot(&self) -> pg_catalog::Snapshot {
        let views = self
            .engine
            .master
            .pipeline_defs()
            .into_iter()
            .filter(|p| p.kind == PipelineKind::MaterializedView)
            .filter_map(|p| {
                let (changelog, schema) = p.dag.operators.iter().find_map(|o| match &o.kind {
                    sluice_plan::OperatorKind::Sink(s) => Some((s.changelog, o.output_schema.clone())),
                    _ => None,
                })?;
                let fields = schema.fields()[usize::from(changelog)..].to_vec();
                // Its statement as stored, parsed back for the query alone.
                let definition = match sluice_sql::statement::parse_statements(&p.sql).ok()?.pop()? {
                    sluice_sql::statement::SluiceStatement::CreateMaterializedView { query, .. } => query.to_string(),
                    _ => return None,
                };
                Some(pg_catalog::ViewRelation {
                    name: p.name,
                    schema: Arc::new(arrow::datatypes::Schema::new(fields)),
                    definition,
                })
            })
            .collect();
        pg_catalog::Snapshot::new(self.engine.master.streams(), self.settings.all())
            .with_security(self.engine.master.with_security(|s| s.clone()), self.user)
            .with_view_relations(views)
    }
}

/// The query a pipeline built over materialized view `def` computes: its
/// query with the views it read written out, as stored when it was
/// created.
fn view_query(def: &sluice_cluster::catalog::PipelineDef) -> Result<sluice_sql::views::ViewQuery> {
    use sluice_sql::statement::{SluiceStatement, parse_statements};
    let unreadable = |e: &dyn std::fmt::Display| sluice_sql::views::unreadable_definition(&def.name, e);
    let sql = def.expanded_query.as_deref().unwrap_or(&def.sql);
    let query = match parse_statements(sql).map_err(|e| unreadable(&e))?.pop() {
        Some(SluiceStatement::CreateMaterializedView { query, .. }) => *query,
        Some(SluiceStatement::Sql(statement)) => match *statement {
            sqlparser::ast::Statement::Query(query) => *query,
            other => return Err(unreadable(&format!("not a query: {other}"))),
        },
        _ => return Err(unreadable(&"not a query")),
    };
    Ok(sluice_sql::views::ViewQuery {
        name: def.name.clone(),
        query,
    })
}
