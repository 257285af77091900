//! Postgres wire protocol front end.
//!
//! [`serve`] accepts clients (psql, JDBC, tokio-postgres, …) and runs each
//! connection with pgwire against its own engine [`Session`]:
//!
//! - `startup`: no password, any user, the ParameterStatus values drivers
//!   expect, BackendKeyData for cancel;
//! - `simple`: Query messages (several statements, stop at the first error);
//! - `extended`: Parse/Bind/Describe/Execute/Sync, with parameter decoding
//!   (`params`) and suspended portals for a fetch size;
//! - `delivery`: rows and COPY data streamed as the engine's batches
//!   arrive, flushed whenever the engine is not ready, stopped by a
//!   CancelRequest or a client hang-up (`connection`);
//! - `types`, `encode`, `format`, `copy`: Arrow types and values in
//!   Postgres' text and binary wire forms.
//!
//! Limits: at most `CONNECTIONS_MAX` clients at once (more are refused
//! with `53300`, as Postgres does); per connection, one record batch plus
//! pgwire's 8 KiB write buffer of results in flight.
//!
//! [`Session`]: crate::engine::Session

mod connection;
mod copy;
mod delivery;
mod encode;
mod extended;
mod format;
mod frame_limit;
mod params;
mod simple;
mod startup;
#[cfg(test)]
mod type_agreement_tests;
mod types;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use pgwire::api::PgWireServerHandlers;
use pgwire::api::auth::StartupHandler;
use pgwire::api::cancel::{CancelHandler, DefaultCancelHandler};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::error::{ErrorInfo, SEVERITY_FATAL};
use pgwire::messages::PgWireBackendMessage;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use self::connection::{ClientProbe, Connection, Shared};
use crate::engine::Engine;

/// Clients served at once; one more is refused with `53300`.
pub(crate) const CONNECTIONS_MAX: usize = 1024;
/// Refusals in progress at once (each reads the client's first packet
/// so the client sees the error); beyond this a refused socket is closed.
const REFUSALS_MAX: usize = 16;
/// How long a refusal may take.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause after a failed `accept` (e.g. out of file descriptors).
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(100);

/// Serves the Postgres protocol on `listener` until `shutdown` is cancelled; each connection gets its own Session.
pub async fn serve(listener: TcpListener, engine: Arc<Engine>, shutdown: CancellationToken) -> std::io::Result<()> {
    let shared = Arc::new(Shared::new(engine));
    let cancel_handler = Arc::new(DefaultCancelHandler::new(shared.connections.clone()));
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving the Postgres protocol");
    }
    accept_loop(listener, shutdown, CONNECTIONS_MAX, move |socket| {
        serve_connection(socket, shared.clone(), cancel_handler.clone())
    })
    .await
}

/// Runs one client connection to its end.
async fn serve_connection(socket: TcpStream, shared: Arc<Shared>, cancel: Arc<DefaultCancelHandler>) {
    let (socket, probe) = match ClientProbe::attach(socket) {
        Ok(split) => split,
        Err(error) => {
            tracing::debug!(%error, "could not set up a client connection");
            return;
        }
    };
    let handlers = ConnectionHandlers {
        connection: Arc::new(Connection::new(shared, probe)),
        cancel,
    };
    let tls = handlers.connection.shared.engine.tls.as_ref().map(|t| t.pgwire.clone());
    if let Err(error) = process_socket(socket, tls, handlers).await {
        tracing::debug!(%error, "client connection ended with an error");
    }
}

/// How long a client has to complete startup (pgwire's own value).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// pgwire's `process_socket` with Sluice's message cap
/// ([`frame_limit::MESSAGE_BYTES_MAX`]) between the stream and the
/// framing: the same TLS negotiation, startup timeout and message loop,
/// and a FATAL `54000` before closing a connection that declares a longer
/// message.
async fn process_socket(
    tcp: TcpStream,
    tls: Option<pgwire::tokio::TlsAcceptor>,
    handlers: ConnectionHandlers,
) -> std::io::Result<()> {
    use frame_limit::{FrameLimit, MESSAGE_BYTES_MAX};
    use futures::{SinkExt, StreamExt};
    use pgwire::api::{ClientInfo, ErrorHandler, PgWireConnectionState};
    use pgwire::messages::PgWireFrontendMessage;
    use pgwire::tokio::server::{negotiate_tls, process_error, process_message};
    use tokio_util::codec::{Framed, FramedParts};

    let startup_timeout = tokio::time::sleep(STARTUP_TIMEOUT);
    tokio::pin!(startup_timeout);
    let negotiated = tokio::select! {
        _ = &mut startup_timeout => return Ok(()),
        socket = negotiate_tls(tcp, tls) => socket?,
    };
    let Some(negotiated) = negotiated else {
        return Ok(());
    };
    let old = negotiated.into_parts();
    let limited = FrameLimit::new(old.io, MESSAGE_BYTES_MAX, &old.read_buf);
    let mut parts = FramedParts::new(limited, old.codec);
    parts.read_buf = old.read_buf;
    parts.write_buf = old.write_buf;
    let mut socket = Framed::from_parts(parts);

    let startup_handler = handlers.startup_handler();
    let simple_query_handler = handlers.simple_query_handler();
    let extended_query_handler = handlers.extended_query_handler();
    let copy_handler = handlers.copy_handler();
    let cancel_handler = handlers.cancel_handler();
    let error_handler = handlers.error_handler();
    loop {
        let starting = matches!(
            socket.state(),
            PgWireConnectionState::AwaitingStartup | PgWireConnectionState::AuthenticationInProgress
        );
        // pgwire's decoder panics on some malformed messages (a Bind whose
        // counts run past its body, found by tests/integration/
        // fuzz_targets.rs): caught here, so the client gets an error and the
        // connection closes cleanly instead of its task unwinding.
        let next = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(socket.next()));
        let msg = if starting {
            tokio::select! {
                _ = &mut startup_timeout => Ok(None),
                msg = next => msg,
            }
        } else {
            next.await
        };
        let Ok(msg) = msg else {
            tracing::info!("a client message could not be decoded: closing its connection");
            let info = ErrorInfo::new(
                SEVERITY_FATAL.to_owned(),
                "08P01".to_owned(),
                "invalid message: it could not be decoded; closing the connection".to_owned(),
            );
            let _ = socket.send(PgWireBackendMessage::ErrorResponse(info.into())).await;
            let _ = socket.close().await;
            return Ok(());
        };
        let msg = match msg {
            Some(Ok(msg)) => msg,
            Some(Err(error)) => {
                if let Some(declared) = socket.get_ref().refused() {
                    tracing::info!(
                        declared,
                        max = MESSAGE_BYTES_MAX,
                        "client message over the size limit: closing"
                    );
                    let info = ErrorInfo::new(
                        SEVERITY_FATAL.to_owned(),
                        "54000".to_owned(),
                        format!(
                            "message of {declared} bytes is over the limit of {MESSAGE_BYTES_MAX} bytes; \
                             closing the connection"
                        ),
                    );
                    socket.send(PgWireBackendMessage::ErrorResponse(info.into())).await?;
                    let _ = socket.close().await;
                    return Ok(());
                }
                return Err(std::io::Error::other(error.to_string()));
            }
            None => break,
        };
        if matches!(msg, PgWireFrontendMessage::Terminate(_)) {
            break;
        }
        let is_extended_query = match socket.state() {
            PgWireConnectionState::CopyInProgress(is_extended_query) => is_extended_query,
            _ => msg.is_extended_query(),
        };
        let is_cancel_request = matches!(msg, PgWireFrontendMessage::CancelRequest(_));
        if let Err(mut e) = process_message(
            msg,
            &mut socket,
            startup_handler.clone(),
            simple_query_handler.clone(),
            extended_query_handler.clone(),
            copy_handler.clone(),
            cancel_handler.clone(),
        )
        .await
        {
            error_handler.on_error(&socket, &mut e);
            let is_fatal = e.is_fatal();
            process_error(&mut socket, e, is_extended_query).await?;
            if is_fatal {
                break;
            }
        }
        if is_cancel_request {
            break;
        }
    }
    Ok(())
}

/// pgwire's handler set for one connection.
struct ConnectionHandlers {
    connection: Arc<Connection>,
    cancel: Arc<DefaultCancelHandler>,
}

impl PgWireServerHandlers for ConnectionHandlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.connection.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.connection.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.connection.clone()
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        self.cancel.clone()
    }
}

/// Accepts connections until `shutdown`, running `serve_one` for each of
/// at most `connections_max` at once; then stops every connection.
async fn accept_loop<F, Fut>(
    listener: TcpListener,
    shutdown: CancellationToken,
    connections_max: usize,
    serve_one: F,
) -> std::io::Result<()>
where
    F: Fn(TcpStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(connections_max));
    let refusals = Arc::new(Semaphore::new(REFUSALS_MAX));
    let mut tasks = JoinSet::new();
    loop {
        let socket = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            Some(finished) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(error) = finished
                    && error.is_panic()
                {
                    tracing::warn!(%error, "a client connection task panicked");
                }
                continue;
            }
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) => socket,
                Err(error) => {
                    tracing::warn!(%error, "accepting a client failed");
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if let Ok(refusal) = refusals.clone().try_acquire_owned() {
                tasks.spawn(async move {
                    let _refusal = refusal;
                    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, refuse(socket)).await;
                });
            }
            continue;
        };
        let serve = serve_one(socket);
        let stop = shutdown.clone();
        tasks.spawn(async move {
            let _slot = slot;
            tokio::select! {
                () = stop.cancelled() => {}
                () = serve => {}
            }
        });
    }
    tasks.shutdown().await;
    Ok(())
}

/// Tells a client over the limit `FATAL 53300 sorry, too many clients
/// already` after reading its first packet (SSLRequest or startup; libpq
/// reports an ErrorResponse to either).
async fn refuse(mut socket: TcpStream) -> std::io::Result<()> {
    let mut first_packet = [0u8; 1024];
    let _ = socket.read(&mut first_packet).await?;
    socket.write_all(&too_many_clients()).await?;
    socket.shutdown().await
}

/// The encoded `53300` ErrorResponse.
fn too_many_clients() -> BytesMut {
    let info = ErrorInfo::new(
        SEVERITY_FATAL.to_owned(),
        "53300".to_owned(),
        "sorry, too many clients already".to_owned(),
    );
    let mut buf = BytesMut::new();
    // Encoding a small ErrorResponse into a growable buffer cannot fail.
    let _ = PgWireBackendMessage::ErrorResponse(info.into()).encode(&mut buf);
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn connect(addr: std::net::SocketAddr) -> TcpStream {
        TcpStream::connect(addr).await.unwrap()
    }

    #[tokio::test]
    async fn refuses_connections_beyond_the_limit_and_stops_on_shutdown() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        // Each served connection is held open until shutdown.
        let server = tokio::spawn(accept_loop(listener, shutdown.clone(), 2, |socket| async move {
            let _socket = socket;
            std::future::pending::<()>().await
        }));

        let mut first = connect(addr).await;
        let _second = connect(addr).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut third = connect(addr).await;
        // An SSLRequest, as libpq sends first.
        third.write_all(&[0, 0, 0, 8, 4, 210, 22, 47]).await.unwrap();
        let mut reply = Vec::new();
        third.read_to_end(&mut reply).await.unwrap();
        assert_eq!(reply[0], b'E');
        let text = String::from_utf8_lossy(&reply);
        assert!(text.contains("FATAL") && text.contains("53300"), "{text}");
        assert!(text.contains("sorry, too many clients already"), "{text}");

        shutdown.cancel();
        server.await.unwrap().unwrap();
        // The held connection was closed by the shutdown.
        let mut buf = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), first.read(&mut buf))
            .await
            .unwrap();
        assert!(matches!(read, Ok(0) | Err(_)));
    }

    #[test]
    fn refusal_message_is_an_error_response() {
        let bytes = too_many_clients();
        assert_eq!(bytes[0], b'E');
        let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
        assert_eq!(len + 1, bytes.len());
    }
}
