//! A client session: its settings, cursors and transaction block, and the
//! entry points the wire protocols call (`execute`, `prepare`,
//! `execute_prepared`, `plan_dag`). Each statement goes to the handler of
//! its family (`super::handler`); the session only dispatches, keeps the
//! failed-transaction rule, and turns a panic into this statement's error.

use super::authorize;
use super::handler::cursor::Cursors;
use super::handler::transaction::Transaction;
use super::handler::{Ctx, command, ddl, inspect, security, variable};
use super::settings::Settings;
use super::{Engine, Output, Prepared, insert, params};
use datafusion::scalar::ScalarValue;
use sluice_sql::security_statement::SecurityStatement;
use sluice_sql::statement::{SluiceStatement, normalize_ident, parse_statements};
use sluice_types::{Error, Result, SqlCode};
use sqlparser::ast::{CopySource, CopyTarget, Statement, Value};
use std::sync::Arc;

/// One client's session. Not shared between connections.
pub struct Session {
    engine: Arc<Engine>,
    /// The role statements run as (`SET SESSION AUTHORIZATION` changes it).
    user: String,
    /// The role the client authenticated as.
    session_user: String,
    settings: Settings,
    cursors: Cursors,
    transaction: Transaction,
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

impl Session {
    pub(crate) fn new(engine: Arc<Engine>, user: &str) -> Self {
        Session {
            engine,
            user: user.to_string(),
            session_user: user.to_string(),
            settings: Settings::default(),
            cursors: Cursors::default(),
            transaction: Transaction::default(),
        }
    }

    fn ctx(&self) -> Ctx<'_> {
        Ctx {
            engine: &self.engine,
            settings: &self.settings,
            user: &self.user,
        }
    }

    /// The role statements run as.
    pub fn user(&self) -> &str {
        &self.user
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
        if let Some(answer) = super::psql_catalog::answer(sql, || self.ctx().catalog_snapshot()) {
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
        self.ctx().explained(&query).await
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
                    let (p, s) = self.ctx().describe_query(q).await?;
                    (p, Some(s))
                }
                Statement::Insert(insert) => (self.insert_param_types(insert), None),
                Statement::Fetch { name, .. } => {
                    let cursor = self.cursors.get(&normalize_ident(name))?;
                    let schema = cursor.lock().await.schema.clone();
                    (vec![], Some(schema))
                }
                _ => (vec![], None),
            },
            SluiceStatement::ShowAll => (vec![], Some(variable::schema(None))),
            SluiceStatement::ShowVariable(name) => (vec![], Some(variable::schema(Some(name)))),
            other => (vec![], inspect::schema(other)),
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
        self.transaction.statement_failed();
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

    /// Runs one statement under the failed-transaction rule (see
    /// `handler::transaction`).
    async fn run(&mut self, statement: SluiceStatement) -> Result<Output> {
        if let Some(answer) = self.transaction.refuse_in_failed_block(&statement) {
            if answer.is_ok() {
                self.end_transaction();
            }
            return answer;
        }
        let result = self.dispatch(statement).await;
        if result.is_err() {
            self.transaction.statement_failed();
        }
        result
    }

    /// Hands a statement to its family's handler.
    async fn dispatch(&mut self, statement: SluiceStatement) -> Result<Output> {
        if let SluiceStatement::Security(statement) = statement {
            return self.run_security(statement).await;
        }
        if let Some(command) = ddl::command_for(self.ctx(), &statement).await? {
            let who = authorize::who(&self.engine, &self.user)?;
            authorize::check_command(&self.engine, &who, &command)?;
            return ddl::apply(self.ctx(), command).await;
        }
        let statement = match inspect::handle(self.ctx(), statement).await {
            Ok(output) => return output,
            Err(other) => other,
        };
        match statement {
            SluiceStatement::ShowVariable(name) => variable::show(&self.settings, &name),
            SluiceStatement::ShowAll => variable::show_all(&self.settings),
            SluiceStatement::Sql(s) => self.run_sql(*s).await,
            other => Err(Error::internal(format!("no handler for {other:?}"))),
        }
    }

    async fn run_sql(&mut self, statement: Statement) -> Result<Output> {
        match statement {
            Statement::Query(q) => Ok(Output::Rows {
                tag: "SELECT".into(),
                rows: self.ctx().rows(&q).await?,
            }),
            Statement::Insert(i) => {
                if let sqlparser::ast::TableObject::TableName(name) = &i.table {
                    authorize::check_insert(&self.engine, &self.user, &sluice_sql::names::normalize_name(name))?;
                }
                let n = insert::insert(&self.engine.master, &self.engine.data.memory, &i).await?;
                Ok(Output::Command {
                    tag: "INSERT".into(),
                    rows: Some(n as usize),
                })
            }
            Statement::Set(set) => variable::set(&mut self.settings, set),
            Statement::StartTransaction { .. } => Ok(self.transaction.begin()),
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
            Statement::Declare { stmts } => {
                let ctx = Ctx {
                    engine: &self.engine,
                    settings: &self.settings,
                    user: &self.user,
                };
                self.cursors.declare(ctx, stmts, self.transaction.in_block()).await
            }
            Statement::Fetch { name, direction, .. } => self.cursors.fetch(&normalize_ident(&name), direction).await,
            Statement::Close { cursor } => self.cursors.close(cursor),
            Statement::Copy {
                source: CopySource::Query(q),
                to: true,
                target: CopyTarget::Stdout,
                ..
            } => Ok(Output::CopyOut(self.ctx().rows(&q).await?)),
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

    /// A role, privilege or token statement; `SET SESSION AUTHORIZATION`
    /// changes this session's role (allowed when the authenticated role is
    /// a superuser, as in Postgres).
    async fn run_security(&mut self, statement: SecurityStatement) -> Result<Output> {
        if let SecurityStatement::SetSessionAuthorization(role) = statement {
            let role = role.unwrap_or_else(|| self.session_user.clone());
            let original = authorize::who(&self.engine, &self.session_user)?;
            if !original.superuser && role != self.session_user {
                return Err(sluice_cluster::security::permission_denied("role", &role));
            }
            authorize::who(&self.engine, &role)?;
            self.user = role;
            return Ok(command("SET"));
        }
        security::run(self.ctx(), statement).await
    }

    /// A transaction's end closes its cursors, except those declared WITH HOLD.
    fn end_transaction(&mut self) {
        self.transaction.end();
        self.cursors.end_of_block();
    }

    /// The columns of an open cursor (the pgwire layer describes cursors as portals).
    pub async fn cursor_schema(&self, name: &str) -> Option<arrow::datatypes::SchemaRef> {
        self.cursors.schema(name).await
    }
}
