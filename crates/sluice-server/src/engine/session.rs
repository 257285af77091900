//! A client session: settings, cursors, and statement execution.

use super::catalog::MasterCatalog;
use super::query::{Cursor, SharedCursor, fetch};
use super::settings::Settings;
use super::show::{self, Table};
use super::{Engine, Output, Prepared, RowStream, batch, insert, params, pg_catalog, query};
use datafusion::scalar::ScalarValue;
use sluice_cluster::catalog::PipelineKind;
use sluice_connectors::factory::{validate_sink, validate_sink_output};
use sluice_plan::catalog::{EventTime, StreamDef};
use sluice_sql::create::stream_def;
use sluice_sql::planner::sink_spec;
use sluice_sql::statement::{CreateStream, DropKind, SluiceStatement, normalize_ident, parse_statements};
use sluice_sql::{PlannedQuery, Planner, PlannerSettings};
use sluice_types::{Error, ObjectKind, Result, SqlCode};
use sqlparser::ast::{CloseCursor, CopySource, CopyTarget, FetchDirection, Query, Set, Statement, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Open cursors per session.
pub const CURSORS_MAX: usize = 64;

/// One client's session. Not shared between connections.
pub struct Session {
    engine: Arc<Engine>,
    settings: Settings,
    cursors: HashMap<String, OpenCursor>,
    /// Inside BEGIN … COMMIT/ROLLBACK.
    in_transaction: bool,
    /// A statement failed inside the transaction: only its end is accepted.
    transaction_failed: bool,
}

/// A cursor and whether it outlives its transaction (`WITH HOLD`).
struct OpenCursor {
    cursor: SharedCursor,
    hold: bool,
}

/// Runs the handling of statement text `sql`, turning a panic anywhere in
/// it (a bug) into `Err(XX000)` for this statement: the session, its
/// connection and everything else in the process go on. Session state a
/// panic interrupted stays as it was when the panic hit; the transaction
/// flags and cursors are plain data, never left half-written.
async fn caught<T>(sql: &str, work: impl Future<Output = T>) -> std::result::Result<T, Error> {
    use futures::FutureExt;
    let work = async {
        injected_panic(sql);
        work.await
    };
    match std::panic::AssertUnwindSafe(work).catch_unwind().await {
        Ok(result) => Ok(result),
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_string());
            tracing::error!(panic = %what, "statement handling panicked; the session goes on");
            Err(Error::internal(format!("statement handling failed: {what}")))
        }
    }
}

/// A test hook: with `SLUICE_FAULT_PANIC_STATEMENT=<marker>` set, handling
/// a statement whose text contains the marker panics. Unset, it is one
/// lookup per statement.
fn injected_panic(sql: &str) {
    static MARKER: std::sync::LazyLock<Option<String>> = std::sync::LazyLock::new(|| {
        std::env::var("SLUICE_FAULT_PANIC_STATEMENT")
            .ok()
            .filter(|m| !m.is_empty())
    });
    if let Some(marker) = MARKER.as_deref()
        && sql.contains(marker)
    {
        panic!("injected fault (SLUICE_FAULT_PANIC_STATEMENT={marker})");
    }
}

fn command(tag: &str) -> Output {
    Output::Command {
        tag: tag.to_string(),
        rows: None,
    }
}

impl Session {
    pub(crate) fn new(engine: Arc<Engine>) -> Self {
        Session {
            engine,
            settings: Settings::default(),
            cursors: HashMap::new(),
            in_transaction: false,
            transaction_failed: false,
        }
    }

    /// Runs every statement of a simple-protocol query string in order,
    /// stopping at the first error (its `Err` is the last element).
    pub async fn execute(&mut self, sql: &str) -> Vec<Result<Output>> {
        match caught(sql, self.execute_unguarded(sql)).await {
            Ok(outputs) => outputs,
            Err(panicked) => vec![Err(self.failed_by(panicked))],
        }
    }

    async fn execute_unguarded(&mut self, sql: &str) -> Vec<Result<Output>> {
        if let Some(answer) = super::psql_catalog::answer(sql, || self.catalog_snapshot()) {
            return vec![answer];
        }
        let statements = match parse_statements(sql) {
            Ok(s) => s,
            Err(e) => return vec![Err(e)],
        };
        let mut out = Vec::with_capacity(statements.len());
        for statement in statements {
            let result = self.run(statement).await;
            let failed = result.is_err();
            out.push(result);
            if failed {
                break;
            }
        }
        out
    }

    /// The physical DAG one query (optionally written as `EXPLAIN query`)
    /// would run as, without running it: what the dashboard draws before a
    /// query runs. Anything but one query that reads streams is a user error.
    pub async fn plan_dag(&self, sql: &str) -> Result<sluice_plan::PhysicalDag> {
        caught(sql, self.plan_dag_unguarded(sql)).await?
    }

    async fn plan_dag_unguarded(&self, sql: &str) -> Result<sluice_plan::PhysicalDag> {
        let mut statements = parse_statements(sql)?;
        let query = match (statements.pop(), statements.is_empty()) {
            (Some(SluiceStatement::Explain(q)), true) => q,
            (Some(SluiceStatement::Sql(s)), true) => match *s {
                Statement::Query(q) => q,
                _ => {
                    return Err(Error::user(
                        SqlCode::WrongObjectType,
                        "only a query (SELECT …) has a plan",
                    ));
                }
            },
            _ => {
                return Err(Error::user(
                    SqlCode::WrongObjectType,
                    "expected exactly one query (SELECT …)",
                ));
            }
        };
        Ok(self.plan(&query, sink_spec("client", BTreeMap::new())).await?.dag)
    }

    /// Parses and describes one statement for the extended protocol.
    pub async fn prepare(&mut self, sql: &str) -> Result<Prepared> {
        caught(sql, self.prepare_unguarded(sql))
            .await
            .unwrap_or_else(|p| Err(self.failed_by(p)))
    }

    async fn prepare_unguarded(&mut self, sql: &str) -> Result<Prepared> {
        let mut statements = parse_statements(sql)?;
        if statements.len() > 1 {
            return Err(Error::syntax(
                "cannot insert multiple commands into a prepared statement",
            ));
        }
        let Some(statement) = statements.pop() else {
            return Ok(Prepared {
                sql: sql.to_string(),
                param_types: vec![],
                schema: None,
            });
        };
        let (param_types, schema) = match &statement {
            SluiceStatement::Sql(s) => match s.as_ref() {
                Statement::Query(q) => {
                    let (p, s) = self.describe_query(q).await?;
                    (p, Some(s))
                }
                Statement::Insert(insert) => (self.insert_param_types(insert), None),
                Statement::Fetch { name, .. } => {
                    let cursor = self.cursor(&normalize_ident(name))?;
                    let schema = cursor.lock().await.schema.clone();
                    (vec![], Some(schema))
                }
                _ => (vec![], None),
            },
            SluiceStatement::ShowStreams => (vec![], Some(show::schema_of("streams"))),
            SluiceStatement::ShowPipelines => (vec![], Some(show::schema_of("pipelines"))),
            SluiceStatement::ShowCheckpoints(_) => (vec![], Some(show::schema_of("checkpoints"))),
            SluiceStatement::Describe(_) => (vec![], Some(show::schema_of("describe"))),
            SluiceStatement::Explain(_) | SluiceStatement::ExplainPipeline(_) => {
                (vec![], Some(show::schema_of("explain")))
            }
            SluiceStatement::ShowAll => (vec![], Some(show::schema_of("show_all"))),
            SluiceStatement::ShowVariable(name) => (vec![], Some(show::schema_of(name))),
            _ => (vec![], None),
        };
        Ok(Prepared {
            sql: sql.to_string(),
            param_types,
            schema,
        })
    }

    /// Runs a prepared statement with parameter values, typed as
    /// `Prepared::param_types` says (typed nulls for NULL).
    pub async fn execute_prepared(&mut self, stmt: &Prepared, params: Vec<ScalarValue>) -> Result<Output> {
        caught(&stmt.sql, self.execute_prepared_unguarded(stmt, params))
            .await
            .unwrap_or_else(|p| Err(self.failed_by(p)))
    }

    /// A statement that panicked fails its transaction block like any
    /// error (only COMMIT/ROLLBACK are accepted after it).
    fn failed_by(&mut self, panicked: Error) -> Error {
        if self.in_transaction {
            self.transaction_failed = true;
        }
        panicked
    }

    async fn execute_prepared_unguarded(&mut self, stmt: &Prepared, params: Vec<ScalarValue>) -> Result<Output> {
        let mut statements = parse_statements(&stmt.sql)?;
        let Some(mut statement) = statements.pop() else {
            return Ok(Output::Command {
                tag: "EMPTY".into(),
                rows: None,
            });
        };
        if let SluiceStatement::Sql(s) = &mut statement {
            params::bind(s, &params)?;
        } else if !params.is_empty() {
            return Err(Error::unsupported(
                "parameters are supported in queries and INSERT only",
            ));
        }
        self.run(statement).await
    }

    /// Types of `$n` placeholders that stand directly for a column in
    /// `INSERT … VALUES`: the column's type (others stay unknown: text).
    fn insert_param_types(&self, insert: &sqlparser::ast::Insert) -> Vec<arrow::datatypes::DataType> {
        use arrow::datatypes::DataType;
        use sqlparser::ast::{Expr, SetExpr, TableObject};
        let (TableObject::TableName(name), Some(source)) = (&insert.table, &insert.source) else {
            return Vec::new();
        };
        let Some(def) = self.engine.master.stream(&sluice_sql::names::normalize_name(name)) else {
            return Vec::new();
        };
        let SetExpr::Values(values) = source.body.as_ref() else {
            return Vec::new();
        };
        let columns: Vec<usize> = if insert.columns.is_empty() {
            (0..def.schema.fields().len()).collect()
        } else {
            insert
                .columns
                .iter()
                .filter_map(|c| def.schema.index_of(&sluice_sql::names::normalize_name(c)).ok())
                .collect()
        };
        let mut types: Vec<DataType> = Vec::new();
        for row in &values.rows {
            for (i, expr) in row.iter().enumerate() {
                let Expr::Value(v) = expr else { continue };
                let Value::Placeholder(p) = &v.value else { continue };
                let (Some(n), Some(column)) = (p.trim_start_matches('$').parse::<usize>().ok(), columns.get(i)) else {
                    continue;
                };
                if n == 0 {
                    continue;
                }
                if types.len() < n {
                    types.resize(n, DataType::Utf8);
                }
                types[n - 1] = def.schema.field(*column).data_type().clone();
            }
        }
        types
    }

    fn planner_settings(&self) -> PlannerSettings {
        PlannerSettings {
            parallelism: self.settings.parallelism(),
            join_state_ttl_ms: self.settings.join_state_ttl_ms(),
            join_state_rows_max: self.settings.join_state_rows_max(),
            ..PlannerSettings::default()
        }
    }

    async fn describe_query(
        &self,
        q: &Query,
    ) -> Result<(Vec<arrow::datatypes::DataType>, arrow::datatypes::SchemaRef)> {
        let catalog = MasterCatalog(&self.engine.master);
        let planner = Planner::new(&catalog, self.planner_settings());
        if self.reads_catalog(q) || !planner.reads_streams(q)? {
            batch::describe(q, self.catalog_snapshot()).await
        } else {
            planner.describe(q).await
        }
    }

    /// Whether `q` reads `pg_catalog` or `information_schema` (it then runs
    /// as a batch query over the catalog, not as a stream query).
    fn reads_catalog(&self, q: &Query) -> bool {
        pg_catalog::reads_catalog(q, |name| self.engine.master.stream(name).is_some())
    }

    /// What the catalog tables show this session now.
    fn catalog_snapshot(&self) -> pg_catalog::Snapshot {
        pg_catalog::Snapshot::new(self.engine.master.streams(), self.settings.all())
    }

    async fn plan(&self, q: &Query, sink: sluice_plan::SinkSpec) -> Result<PlannedQuery> {
        let catalog = MasterCatalog(&self.engine.master);
        Planner::new(&catalog, self.planner_settings()).plan(q, sink).await
    }

    /// Rows of a query: continuous if it reads a stream, batch otherwise.
    async fn rows(&self, q: &Query) -> Result<RowStream> {
        let catalog = MasterCatalog(&self.engine.master);
        let planner = Planner::new(&catalog, self.planner_settings());
        if self.reads_catalog(q) || !planner.reads_streams(q)? {
            return batch::run(q, self.catalog_snapshot()).await;
        }
        let planned = planner.plan(q, sink_spec("client", BTreeMap::new())).await?;
        query::start(&self.engine.master, &planned)
    }

    /// Runs one statement, keeping Postgres' failed-transaction rule: after
    /// an error inside BEGIN … only COMMIT/ROLLBACK are accepted (25P02),
    /// and COMMIT then rolls back.
    async fn run(&mut self, statement: SluiceStatement) -> Result<Output> {
        let ends_transaction = matches!(
            &statement,
            SluiceStatement::Sql(s) if matches!(s.as_ref(), Statement::Commit { .. } | Statement::Rollback { .. })
        );
        if self.transaction_failed {
            if !ends_transaction {
                return Err(Error::user(
                    SqlCode::InFailedTransaction,
                    "current transaction is aborted, commands ignored until end of transaction block",
                ));
            }
            self.end_transaction();
            return Ok(command("ROLLBACK"));
        }
        let result = self.run_statement(statement).await;
        if result.is_err() && self.in_transaction {
            self.transaction_failed = true;
        }
        result
    }

    async fn run_statement(&mut self, statement: SluiceStatement) -> Result<Output> {
        let master = self.engine.master.clone();
        match statement {
            SluiceStatement::CreateStream(c) => self.create_stream(&c).map(|_| command("CREATE STREAM")),
            SluiceStatement::CreateStreamAs {
                name,
                if_not_exists,
                query,
            } => {
                let sink = sink_spec(
                    "memory",
                    BTreeMap::from([
                        ("stream".to_string(), name.clone()),
                        // Memory logs live in memory only; derived streams do
                        // not checkpoint (yet).
                        ("checkpoint.interval".to_string(), "off".to_string()),
                    ]),
                );
                let planned = self.plan(&query, sink).await?;
                let event_time = planned.event_time_column.filter(|c| {
                    matches!(
                        planned.schema.field(*c).data_type(),
                        arrow::datatypes::DataType::Timestamp(_, _)
                    )
                });
                let def = StreamDef {
                    name: name.clone(),
                    schema: planned.schema.clone(),
                    event_time: event_time.map(|column| EventTime {
                        column,
                        delay_ms: 0,
                        from_upstream: true,
                    }),
                    connector: "memory".into(),
                    options: BTreeMap::new(),
                    pipeline: Some(name.clone()),
                    computed: Vec::new(),
                };
                let text = format!("CREATE STREAM {name} AS {query}");
                master.create_pipeline(
                    &name,
                    PipelineKind::DerivedStream,
                    &text,
                    planned.dag,
                    Some(def),
                    if_not_exists,
                )?;
                Ok(command("CREATE STREAM"))
            }
            SluiceStatement::CreateSink {
                name,
                if_not_exists,
                options,
                query,
            } => {
                let connector = options.get("connector").cloned().ok_or_else(|| {
                    Error::invalid_option(
                        "CREATE SINK needs WITH (connector = 'kafka' | 'hdfs' | 'file' | 'blackhole', …)",
                    )
                })?;
                let mut options = options;
                options
                    .entry("checkpoint.interval".to_string())
                    .or_insert(self.settings.get("checkpoint_interval")?);
                validate_sink(&connector, &options)?;
                let listed: Vec<String> = options
                    .iter()
                    .map(|(k, v)| format!("'{k}' = '{}'", v.replace('\'', "''")))
                    .collect();
                let text = format!("CREATE SINK {name} WITH ({}) AS {query}", listed.join(", "));
                let planned = self.plan(&query, sink_spec(&connector, options.clone())).await?;
                validate_sink_output(&connector, &options, &planned.schema)?;
                master.create_pipeline(&name, PipelineKind::Sink, &text, planned.dag, None, if_not_exists)?;
                master.wait_started(&name).await;
                Ok(command("CREATE SINK"))
            }
            SluiceStatement::Drop { kind, name, if_exists } => match kind {
                DropKind::Stream => master.drop_stream(&name, if_exists).map(|_| command("DROP STREAM")),
                DropKind::Sink => {
                    let is_stream = master.pipeline(&name).is_some_and(|p| p.kind != PipelineKind::Sink);
                    if is_stream {
                        return Err(Error::user(
                            SqlCode::WrongObjectType,
                            format!("\"{name}\" is a stream, not a sink: use DROP STREAM {name}"),
                        ));
                    }
                    master.drop_pipeline(&name, if_exists).map(|_| command("DROP SINK"))
                }
                DropKind::Pipeline => master.drop_pipeline(&name, if_exists).map(|_| command("DROP PIPELINE")),
            },
            SluiceStatement::ShowStreams => show::streams(&master.streams()).output("SHOW"),
            SluiceStatement::ShowPipelines => show::pipelines(&master.pipelines()).output("SHOW"),
            SluiceStatement::ShowCheckpoints(name) => {
                let info = master
                    .pipelines()
                    .into_iter()
                    .find(|p| p.name == name)
                    .ok_or_else(|| Error::not_found(ObjectKind::Pipeline, &name))?;
                show::checkpoints(&info).output("SHOW")
            }
            SluiceStatement::Describe(name) => {
                let def = master
                    .stream(&name)
                    .ok_or_else(|| Error::not_found(ObjectKind::Stream, &name))?;
                show::describe(&def).output("SHOW")
            }
            SluiceStatement::Explain(q) => {
                let planned = self.plan(&q, sink_spec("client", BTreeMap::new())).await?;
                show::explain(&planned.dag).output("EXPLAIN")
            }
            SluiceStatement::ExplainPipeline(name) => {
                let def = master
                    .pipeline(&name)
                    .ok_or_else(|| Error::not_found(ObjectKind::Pipeline, &name))?;
                show::explain(&def.dag).output("EXPLAIN")
            }
            SluiceStatement::AlterPipelinePause { name, paused } => {
                master.set_paused(&name, paused)?;
                Ok(command("ALTER PIPELINE"))
            }
            SluiceStatement::ShowVariable(name) => {
                let value = self.settings.get(&name)?;
                Table::text(&[name.as_str()], vec![vec![value]]).output("SHOW")
            }
            SluiceStatement::ShowAll => {
                let rows = self.settings.all().into_iter().map(|(n, v, d)| vec![n, v, d]).collect();
                Table::text(&["name", "setting", "description"], rows).output("SHOW")
            }
            SluiceStatement::Sql(s) => self.run_sql(*s).await,
        }
    }

    fn create_stream(&self, c: &CreateStream) -> Result<()> {
        let name = c.options.get("connector").map_or("memory", String::as_str);
        let connector = sluice_connectors::registry::validate_source(name, &c.options)?;
        let fixed = connector.fixed_schema(&c.options)?;
        let def = stream_def(c, connector.name(), fixed, connector.metadata_columns())?;
        let columns = sluice_plan::without_computed(&def.schema, &def.computed);
        connector.check_stream_schema(&def.options, &columns)?;
        let master = &self.engine.master;
        if master.create_stream(def.clone(), c.if_not_exists)? {
            connector.stream_created(master.connectors(), &def)?;
        }
        Ok(())
    }

    async fn run_sql(&mut self, statement: Statement) -> Result<Output> {
        match statement {
            Statement::Query(q) => Ok(Output::Rows {
                tag: "SELECT".into(),
                rows: self.rows(&q).await?,
            }),
            Statement::Insert(i) => {
                let n = insert::insert(&self.engine.master, &i).await?;
                Ok(Output::Command {
                    tag: "INSERT".into(),
                    rows: Some(n as usize),
                })
            }
            Statement::Set(set) => self.set(set),
            Statement::StartTransaction { .. } => {
                self.in_transaction = true;
                Ok(command("BEGIN"))
            }
            Statement::Commit { .. } => {
                self.end_transaction();
                Ok(command("COMMIT"))
            }
            Statement::Rollback { .. } => {
                self.end_transaction();
                Ok(command("ROLLBACK"))
            }
            Statement::Discard { .. } => {
                self.cursors.clear();
                Ok(command("DISCARD ALL"))
            }
            Statement::Deallocate { .. } => Ok(command("DEALLOCATE")),
            Statement::Declare { stmts } => self.declare(stmts).await,
            Statement::Fetch { name, direction, .. } => self.fetch(&normalize_ident(&name), direction).await,
            Statement::Close { cursor } => {
                match cursor {
                    CloseCursor::All => self.cursors.clear(),
                    CloseCursor::Specific { name } => {
                        let name = normalize_ident(&name);
                        self.cursors
                            .remove(&name)
                            .ok_or_else(|| Error::not_found(ObjectKind::Cursor, &name))?;
                    }
                }
                Ok(command("CLOSE CURSOR"))
            }
            Statement::Copy {
                source: CopySource::Query(q),
                to: true,
                target: CopyTarget::Stdout,
                ..
            } => Ok(Output::CopyOut(self.rows(&q).await?)),
            Statement::Copy { .. } => Err(Error::unsupported("COPY is supported as COPY (query) TO STDOUT")),
            other => Err(Error::unsupported(format!(
                "statement not supported: {}",
                other
                    .to_string()
                    .split_whitespace()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" ")
            ))),
        }
    }

    /// A transaction's end closes its cursors, except those declared WITH HOLD.
    fn end_transaction(&mut self) {
        self.in_transaction = false;
        self.transaction_failed = false;
        self.cursors.retain(|_, c| c.hold);
    }

    fn set(&mut self, set: Set) -> Result<Output> {
        match set {
            Set::SingleAssignment { variable, values, .. } => {
                let name = variable.to_string().to_ascii_lowercase();
                let value = values.iter().map(setting_value).collect::<Vec<_>>().join(", ");
                self.settings.set(&name, &value)?;
            }
            Set::SetTimeZone { value, .. } => self.settings.set("timezone", &setting_value(&value))?,
            Set::SetNames { charset_name, .. } => self.settings.set("client_encoding", &charset_name.to_string())?,
            other => return Err(Error::unsupported(format!("{other} is not supported"))),
        }
        Ok(command("SET"))
    }

    async fn declare(&mut self, stmts: Vec<sqlparser::ast::Declare>) -> Result<Output> {
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
            if !hold && !self.in_transaction {
                return Err(Error::user(
                    SqlCode::NoActiveTransaction,
                    "DECLARE CURSOR can only be used in transaction blocks (or declare it WITH HOLD)",
                ));
            }
            if self.cursors.contains_key(&name) {
                return Err(Error::user(
                    SqlCode::DuplicateCursor,
                    format!("cursor \"{name}\" already exists"),
                ));
            }
            if self.cursors.len() >= CURSORS_MAX {
                return Err(Error::user(
                    SqlCode::ConfigurationLimitExceeded,
                    format!("too many open cursors (limit {CURSORS_MAX}); CLOSE some first"),
                ));
            }
            let rows = self.rows(&q).await?;
            self.cursors.insert(
                name,
                OpenCursor {
                    cursor: Cursor::new(rows),
                    hold,
                },
            );
        }
        Ok(command("DECLARE CURSOR"))
    }

    /// The columns of an open cursor (the pgwire layer describes cursors as portals).
    pub async fn cursor_schema(&self, name: &str) -> Option<arrow::datatypes::SchemaRef> {
        let cursor = self.cursors.get(name)?.cursor.clone();
        let schema = cursor.lock().await.schema.clone();
        Some(schema)
    }

    fn cursor(&self, name: &str) -> Result<SharedCursor> {
        self.cursors
            .get(name)
            .map(|c| c.cursor.clone())
            .ok_or_else(|| Error::not_found(ObjectKind::Cursor, name))
    }

    async fn fetch(&mut self, name: &str, direction: FetchDirection) -> Result<Output> {
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
        let cursor = self.cursor(name)?;
        let schema = cursor.lock().await.schema.clone();
        Ok(Output::Rows {
            tag: "FETCH".into(),
            rows: fetch(cursor, count, schema),
        })
    }
}

fn setting_value(e: &sqlparser::ast::Expr) -> String {
    match e {
        sqlparser::ast::Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
            other => other.to_string(),
        },
        sqlparser::ast::Expr::Identifier(i) => i.value.clone(),
        other => other.to_string(),
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
