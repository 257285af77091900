//! The extended query protocol.
//!
//! - Parse → `Session::prepare` (through pgwire's default `on_parse` and
//!   [`StatementParser`]); parameter types the client gave in Parse win
//!   over the engine's inferred ones.
//! - Bind → the parameters are decoded and cast to the engine's types
//!   here, so bad input fails at Bind as in Postgres; the portal keeps its
//!   own copy of the statement carrying the bound values.
//! - Describe → ParameterDescription and RowDescription, or NoData for a
//!   statement without rows (pgwire's default sends an empty
//!   RowDescription for a command with parameters).
//! - Execute → `Session::execute_prepared`, rows streamed as batches
//!   arrive, at most `max_rows` per Execute: the rest stays in the portal
//!   and the client gets PortalSuspended (JDBC's fetch size). pgwire's
//!   default collects a whole Execute's rows in memory before sending, which
//!   never ends for a continuous query, so Execute is Sluice's own.
//! - Sync → ReadyForQuery; outside a transaction block every portal is
//!   closed, as Postgres closes them when its implicit transaction ends.

use std::fmt::Debug;
use std::sync::Arc;

use arrow::datatypes::{DataType, Schema};
use async_trait::async_trait;
use datafusion::scalar::ScalarValue;
use futures::{Sink, SinkExt};
use pgwire::api::portal::{Format, Portal, PortalExecutionState};
use pgwire::api::query::ExtendedQueryHandler;
use pgwire::api::results::{FieldInfo, QueryResponse, Response};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{ClientInfo, ClientPortalStore, DEFAULT_NAME, PgWireConnectionState, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::data::{NoData, ParameterDescription};
use pgwire::messages::extendedquery::{
    Bind, BindComplete, Describe, Execute, PortalSuspended, Sync as PgSync, TARGET_TYPE_BYTE_PORTAL,
    TARGET_TYPE_BYTE_STATEMENT,
};
use pgwire::messages::response::{EmptyQueryResponse, ReadyForQuery, TransactionStatus};
use sluice_types::{Error, ObjectKind};

use super::connection::{Connection, QueryWatch, SessionSlot, lock_session, user_error};
use super::delivery::{
    Delivered, command_complete, command_tag, data_rows, deliver, engine_error, error_info, row_description,
    send_copy_out, transaction_after,
};
use super::params::decode_params;
use super::types::{column_formats, field_infos, pg_type};
use crate::engine::{Output, Prepared};

/// A prepared statement as pgwire stores it; a portal's copy also carries
/// the values bound to it.
#[derive(Debug, Clone)]
pub(crate) struct Statement {
    pub(crate) prepared: Arc<Prepared>,
    /// The wire type of each parameter: the client's from Parse, else the
    /// engine's inferred type.
    pub(crate) param_types: Arc<[Type]>,
    /// The bound values (empty on the statement itself).
    pub(crate) params: Arc<[ScalarValue]>,
}

/// Parameter types: the client's where it named one (OID ≠ 0), else the
/// Postgres type of the engine's inferred type.
pub(crate) fn effective_param_types(client: &[Option<Type>], engine: &[DataType]) -> Vec<Type> {
    (0..client.len().max(engine.len()))
        .map(|idx| {
            let from_client = client.get(idx).cloned().flatten();
            from_client
                .or_else(|| engine.get(idx).map(pg_type))
                .unwrap_or(Type::TEXT)
        })
        .collect()
}

/// The result columns of `statement` in `format`, or `None` without rows.
fn result_fields(statement: &Statement, format: &Format) -> Option<Vec<FieldInfo>> {
    let schema = statement.prepared.schema.as_ref()?;
    Some(field_infos(schema, &column_formats(format, schema.fields().len())))
}

/// RowDescription for a statement with rows, NoData otherwise.
fn describe_rows(fields: Option<Vec<FieldInfo>>) -> PgWireBackendMessage {
    match fields {
        Some(fields) => row_description(&fields),
        None => PgWireBackendMessage::NoData(NoData::new()),
    }
}

/// Checks Bind's result format codes: each 0 or 1, and one per column
/// when more than one is given.
fn check_result_formats(codes: &[i16], schema: Option<&Schema>) -> PgWireResult<()> {
    if let Some(code) = codes.iter().find(|c| !matches!(c, 0 | 1)) {
        return Err(user_error("22023", format!("unsupported format code: {code}")));
    }
    let columns = schema.map_or(0, |s| s.fields().len());
    if codes.len() > 1 && schema.is_some() && codes.len() != columns {
        let message = format!(
            "bind message has {} result formats but query has {columns} columns",
            codes.len()
        );
        return Err(user_error("08P01", message));
    }
    Ok(())
}

/// A portal for `stored` with the parameters of `bind` decoded.
fn bind_portal(stored: &StoredStatement<Statement>, bind: &Bind) -> PgWireResult<Portal<Statement>> {
    let statement = &stored.statement;
    if bind.parameters.len() != statement.param_types.len() {
        let name = bind.statement_name.as_deref().unwrap_or("");
        let message = format!(
            "bind message supplies {} parameters, but prepared statement \"{name}\" requires {}",
            bind.parameters.len(),
            statement.param_types.len()
        );
        return Err(user_error("08P01", message));
    }
    check_result_formats(&bind.result_column_format_codes, statement.prepared.schema.as_deref())?;
    let params = decode_params(
        &bind.parameters,
        &bind.parameter_format_codes,
        &statement.param_types,
        &statement.prepared.param_types,
    )
    .map_err(|e| user_error(e.sqlstate, e.message))?;
    let bound = Statement {
        params: params.into(),
        ..statement.clone()
    };
    let bound = StoredStatement::new(stored.id.clone(), bound, stored.parameter_types.clone());
    Portal::try_new(bind, Arc::new(bound))
}

fn no_statement(name: Option<&str>) -> PgWireError {
    not_found(ObjectKind::PreparedStatement, name)
}

fn no_portal(name: Option<&str>) -> PgWireError {
    not_found(ObjectKind::Portal, name)
}

fn not_found(kind: ObjectKind, name: Option<&str>) -> PgWireError {
    let e = Error::not_found(kind, name.unwrap_or(""));
    user_error(e.sqlstate(), e.to_string())
}

/// Sends up to `max_rows` rows of a started portal, then `{tag} n` or
/// PortalSuspended.
async fn send_portal_rows<C>(
    client: &mut C,
    response: &mut QueryResponse,
    max_rows: usize,
    watch: &mut QueryWatch<'_>,
) -> PgWireResult<Result<(), ErrorInfo>>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<C::Error>,
{
    let tag = response.command_tag().to_owned();
    match deliver(
        client,
        response.data_rows(),
        max_rows,
        watch,
        PgWireBackendMessage::DataRow,
    )
    .await?
    {
        Delivered::Complete(n) => client.feed(command_complete(format!("{tag} {n}"))).await?,
        Delivered::Suspended => {
            client
                .feed(PgWireBackendMessage::PortalSuspended(PortalSuspended::new()))
                .await?
        }
        Delivered::Failed(error) => return Ok(Err(*error)),
    }
    Ok(Ok(()))
}

impl Connection {
    /// Runs one Execute of `portal`; returns the transaction status after
    /// it, or the error that ended it. A portal's state is `Suspended`
    /// from its first rows on (its stream is fused, so a finished portal
    /// answers `{tag} 0`) and `Finished` after a command, COPY or error.
    async fn execute_portal<C>(
        &self,
        client: &mut C,
        portal: &Portal<Statement>,
        max_rows: usize,
        status: TransactionStatus,
    ) -> PgWireResult<Result<TransactionStatus, ErrorInfo>>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<C::Error>,
    {
        let mut watch = self.start_query().await;
        let state = portal.state();
        let mut state = state.lock().await;
        let sent = match &mut *state {
            PortalExecutionState::Suspended(response) => {
                send_portal_rows(client, response, max_rows, &mut watch).await?
            }
            PortalExecutionState::Finished => {
                client.feed(command_complete("SELECT 0".to_owned())).await?;
                Ok(())
            }
            PortalExecutionState::Initial => {
                let (next_state, outcome) = self.start_portal(client, portal, max_rows, &mut watch).await?;
                *state = next_state;
                return Ok(outcome.map(|tag| tag.map_or(status, |tag| transaction_after(&tag, status))));
            }
        };
        if sent.is_err() {
            *state = PortalExecutionState::Finished;
        }
        Ok(sent.map(|()| status))
    }

    /// First Execute of a portal: runs the statement and sends its first
    /// output. Returns the portal's next state and the command tag of a
    /// command (for the transaction status).
    async fn start_portal<C>(
        &self,
        client: &mut C,
        portal: &Portal<Statement>,
        max_rows: usize,
        watch: &mut QueryWatch<'_>,
    ) -> PgWireResult<(PortalExecutionState, Result<Option<String>, ErrorInfo>)>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<C::Error>,
    {
        let statement = &portal.statement.statement;
        let output = {
            let mut session = lock_session(&self.session).await?;
            watch
                .guard(session.execute_prepared(&statement.prepared, statement.params.to_vec()))
                .await
        };
        let finished = PortalExecutionState::Finished;
        let output = match output {
            Ok(Ok(output)) => output,
            Ok(Err(error)) => return Ok((finished, Err(error_info(&error)))),
            Err(interrupt) => return Ok((finished, Err(interrupt.into_error()?))),
        };
        match output {
            Output::Command { tag, rows } => {
                client.feed(command_complete(command_tag(&tag, rows))).await?;
                Ok((finished, Ok(Some(tag))))
            }
            Output::CopyOut(rows) => Ok((finished, send_copy_out(client, rows, watch).await?.map(|()| None))),
            Output::Rows { tag, rows } => {
                let described = statement.prepared.schema.clone();
                let columns = described.as_ref().unwrap_or(&rows.schema).fields().len();
                let formats = column_formats(&portal.result_column_format, columns);
                let fields = field_infos(described.as_ref().unwrap_or(&rows.schema), &formats);
                let mut response = QueryResponse::new(Arc::new(fields), data_rows(rows, formats, described));
                response.set_command_tag(&tag);
                let sent = send_portal_rows(client, &mut response, max_rows, watch).await?;
                let next = if sent.is_ok() {
                    PortalExecutionState::Suspended(response)
                } else {
                    finished
                };
                Ok((next, sent.map(|()| None)))
            }
        }
    }
}

/// Parses statements for pgwire's default `on_parse` through the session.
pub(crate) struct StatementParser {
    session: Arc<SessionSlot>,
}

#[async_trait]
impl QueryParser for StatementParser {
    type Statement = Statement;

    async fn parse_sql<C>(&self, _client: &C, sql: &str, types: &[Option<Type>]) -> PgWireResult<Option<Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let prepared = lock_session(&self.session)
            .await?
            .prepare(sql)
            .await
            .map_err(|e| engine_error(&e))?;
        let param_types = effective_param_types(types, &prepared.param_types);
        Ok(Some(Statement {
            prepared: Arc::new(prepared),
            param_types: param_types.into(),
            params: Arc::new([]),
        }))
    }

    fn get_parameter_types(&self, statement: &Statement) -> PgWireResult<Vec<Type>> {
        Ok(statement.param_types.to_vec())
    }

    fn get_result_schema(&self, statement: &Statement, format: Option<&Format>) -> PgWireResult<Vec<FieldInfo>> {
        Ok(result_fields(statement, format.unwrap_or(&Format::UnifiedText)).unwrap_or_default())
    }
}

#[async_trait]
impl ExtendedQueryHandler for Connection {
    type Statement = Statement;
    type QueryParser = StatementParser;

    fn query_parser(&self) -> Arc<StatementParser> {
        Arc::new(StatementParser {
            session: self.session.clone(),
        })
    }

    async fn on_bind<C>(&self, client: &mut C, message: Bind) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statement_name = message.statement_name.as_deref().unwrap_or(DEFAULT_NAME);
        match client.portal_store().get_statement(statement_name) {
            Some(Entry::Value(stored)) => {
                let portal = bind_portal(&stored, &message)?;
                client.portal_store().put_portal(Arc::new(portal));
            }
            Some(Entry::Empty) if message.parameters.is_empty() => {
                let portal_name = message.portal_name.as_deref().unwrap_or(DEFAULT_NAME);
                client.portal_store().put_empty_portal(portal_name);
            }
            Some(Entry::Empty) => {
                let message = format!(
                    "bind message supplies {} parameters, but the statement requires 0",
                    message.parameters.len()
                );
                return Err(user_error("08P01", message));
            }
            None => return Err(no_statement(message.statement_name.as_deref())),
        }
        client
            .feed(PgWireBackendMessage::BindComplete(BindComplete::new()))
            .await?;
        Ok(())
    }

    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        match message.target_type {
            TARGET_TYPE_BYTE_STATEMENT => {
                let (param_oids, fields) = match client.portal_store().get_statement(name) {
                    Some(Entry::Value(stored)) => {
                        let statement = &stored.statement;
                        (
                            statement.param_types.iter().map(Type::oid).collect(),
                            result_fields(statement, &Format::UnifiedText),
                        )
                    }
                    Some(Entry::Empty) => (Vec::new(), None),
                    None => return Err(no_statement(message.name.as_deref())),
                };
                let parameters = ParameterDescription::new(param_oids);
                client
                    .feed(PgWireBackendMessage::ParameterDescription(parameters))
                    .await?;
                client.feed(describe_rows(fields)).await?;
            }
            TARGET_TYPE_BYTE_PORTAL => {
                let fields = match client.portal_store().get_portal(name) {
                    Some(Entry::Value(portal)) => {
                        result_fields(&portal.statement.statement, &portal.result_column_format)
                    }
                    Some(Entry::Empty) => None,
                    // A SQL-level cursor (DECLARE c CURSOR …) is a portal too:
                    // psycopg describes it by name before FETCHing.
                    None => {
                        let session = lock_session(&self.session).await?;
                        let schema = session.cursor_schema(name).await;
                        let schema = schema.ok_or_else(|| no_portal(message.name.as_deref()))?;
                        let formats = column_formats(&Format::UnifiedText, schema.fields().len());
                        Some(field_infos(&schema, &formats))
                    }
                };
                client.feed(describe_rows(fields)).await?;
            }
            other => {
                return Err(user_error("08P01", format!("invalid DESCRIBE message subtype {other}")));
            }
        }
        Ok(())
    }

    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        let portal = match client
            .portal_store()
            .get_portal(message.name.as_deref().unwrap_or(DEFAULT_NAME))
        {
            Some(Entry::Value(portal)) => portal,
            Some(Entry::Empty) => {
                client
                    .feed(PgWireBackendMessage::EmptyQueryResponse(EmptyQueryResponse::new()))
                    .await?;
                return Ok(());
            }
            None => return Err(no_portal(message.name.as_deref())),
        };
        // A negative or zero row limit means "all rows".
        let max_rows = usize::try_from(message.max_rows).unwrap_or(0);
        let status = client.transaction_status();
        client.set_state(PgWireConnectionState::QueryInProgress);
        let outcome = self.execute_portal(client, &portal, max_rows, status).await?;
        client.set_state(PgWireConnectionState::ReadyForQuery);
        match outcome {
            Ok(status) => {
                client.set_transaction_status(status);
                Ok(())
            }
            // pgwire sends it, marks a transaction block failed and skips to Sync.
            Err(error) => Err(PgWireError::UserError(Box::new(error))),
        }
    }

    async fn on_sync<C>(&self, client: &mut C, _message: PgSync) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let status = client.transaction_status();
        if status == TransactionStatus::Idle {
            client.portal_store().clear_portals();
        } else {
            client.portal_store().rm_portal(DEFAULT_NAME);
        }
        client
            .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(status)))
            .await?;
        Ok(())
    }

    async fn do_query<C>(
        &self,
        _client: &mut C,
        _portal: &Portal<Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // `on_execute` above does the work; pgwire only calls `do_query`
        // from its default `on_execute`.
        Err(user_error("XX000", "extended query dispatch bypassed Sluice's handler"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::Field;

    #[test]
    fn client_parameter_types_take_precedence() {
        let client = [Some(Type::INT4), None];
        let engine = [DataType::Int64, DataType::Utf8, DataType::Float64];
        assert_eq!(
            effective_param_types(&client, &engine),
            vec![Type::INT4, Type::TEXT, Type::FLOAT8]
        );
        // More client types than the engine inferred.
        assert_eq!(
            effective_param_types(&[None, Some(Type::BOOL)], &[]),
            vec![Type::TEXT, Type::BOOL]
        );
    }

    #[test]
    fn result_format_codes_are_checked_against_columns() {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("b", DataType::Utf8, true),
        ]);
        assert!(check_result_formats(&[], Some(&schema)).is_ok());
        assert!(check_result_formats(&[1], Some(&schema)).is_ok());
        assert!(check_result_formats(&[1, 0], Some(&schema)).is_ok());
        assert!(check_result_formats(&[1, 0, 1], Some(&schema)).is_err());
        assert!(check_result_formats(&[2], Some(&schema)).is_err());
        // A command has no columns; a single code is fine.
        assert!(check_result_formats(&[1], None).is_ok());
    }
}
