//! The simple query protocol: a Query message runs every statement of its
//! string through `Session::execute` and sends each statement's output in
//! turn, stopping at the first error or cancel; then ReadyForQuery with
//! the transaction status the statements left.
//!
//! pgwire's default `on_query` is replaced (not wrapped) because it
//! neither flushes while rows stream nor lets a cancel interrupt the
//! streaming; pgwire's `do_query` is therefore never called.

use std::fmt::Debug;

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::query::SimpleQueryHandler;
use pgwire::api::results::Response;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::response::{EmptyQueryResponse, ReadyForQuery, TransactionStatus};
use pgwire::messages::simplequery::Query;

use super::connection::{Connection, QueryWatch, lock_session, user_error};
use super::delivery::{command_complete, command_tag, error_info, send_copy_out, send_rows, transaction_after};
use crate::engine::Output;

/// Whether a query string holds no statement (only `;` and whitespace),
/// which Postgres answers with EmptyQueryResponse.
pub(crate) fn is_empty_query(sql: &str) -> bool {
    sql.chars().all(|c| c == ';' || c.is_whitespace())
}

impl Connection {
    /// Runs every statement of `sql`; returns the transaction status after
    /// them. Statement errors are sent here; `Err` means the connection failed.
    async fn run_simple_query<C>(
        &self,
        client: &mut C,
        sql: &str,
        status: TransactionStatus,
    ) -> PgWireResult<TransactionStatus>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<C::Error>,
    {
        let mut watch = self.start_query().await;
        let outputs = {
            let mut session = lock_session(&self.session).await?;
            watch.guard(session.execute(sql)).await
        };
        let outputs = match outputs {
            Ok(outputs) => outputs,
            Err(interrupt) => return send_error(client, interrupt.into_error()?, status).await,
        };
        let mut status = status;
        // Dropping the rest of `outputs` on error drops their row streams.
        for output in outputs {
            let sent = match output {
                Ok(output) => send_output(client, output, &mut watch, &mut status).await?,
                Err(error) => Err(error_info(&error)),
            };
            if let Err(error) = sent {
                return send_error(client, error, status).await;
            }
        }
        Ok(status)
    }
}

/// Sends one statement's output, updating `status` for transaction commands.
async fn send_output<C>(
    client: &mut C,
    output: Output,
    watch: &mut QueryWatch<'_>,
    status: &mut TransactionStatus,
) -> PgWireResult<Result<(), ErrorInfo>>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<C::Error>,
{
    match output {
        Output::Command { tag, rows } => {
            client.feed(command_complete(command_tag(&tag, rows))).await?;
            *status = transaction_after(&tag, *status);
            Ok(Ok(()))
        }
        Output::Rows { tag, rows } => send_rows(client, &tag, rows, watch).await,
        Output::CopyOut(rows) => send_copy_out(client, rows, watch).await,
    }
}

/// Sends `error` as ErrorResponse; an error inside a transaction block
/// leaves it failed (`E`) until ROLLBACK.
async fn send_error<C>(client: &mut C, error: ErrorInfo, status: TransactionStatus) -> PgWireResult<TransactionStatus>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<C::Error>,
{
    client.feed(PgWireBackendMessage::ErrorResponse(error.into())).await?;
    Ok(status.to_error_state())
}

#[async_trait]
impl SimpleQueryHandler for Connection {
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        client.set_state(PgWireConnectionState::QueryInProgress);
        let mut status = client.transaction_status();
        if is_empty_query(&query.query) {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(EmptyQueryResponse::new()))
                .await?;
        } else {
            status = self.run_simple_query(client, &query.query, status).await?;
        }
        if status == TransactionStatus::Idle {
            // Outside a transaction block, portals end with the statement.
            client.portal_store().clear_portals();
        }
        client.set_state(PgWireConnectionState::ReadyForQuery);
        client.set_transaction_status(status);
        client
            .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(status)))
            .await?;
        Ok(())
    }

    async fn do_query<C>(&self, _client: &mut C, _query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // `on_query` above does the work; pgwire only calls `do_query` from
        // its default `on_query`.
        Err(user_error("XX000", "simple query dispatch bypassed Sluice's handler"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_semicolons_and_whitespace_are_empty() {
        assert!(is_empty_query(""));
        assert!(is_empty_query(" ;\n; "));
        assert!(!is_empty_query("SELECT 1"));
        assert!(!is_empty_query(";SELECT 1;"));
    }
}
