//! One client connection: its engine [`Session`], its cancel registration,
//! and the [`QueryWatch`] that interrupts a running statement.
//!
//! pgwire serves a connection by calling handler methods one message at a
//! time and does not read the socket while a handler runs, so a statement
//! that streams rows is interrupted from the side: a CancelRequest arrives
//! on another connection and fires this connection's
//! [`ConnectionHandle`] (pgwire's cancel machinery), and a [`ClientProbe`]
//! notices when the client has hung up. Either ends the statement, which
//! drops its row stream and so stops the query in the engine.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::channel::oneshot;
use pgwire::api::{ConnectionGuard, ConnectionHandle, ConnectionManager, RandomPidSecretKeyGenerator};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult, SEVERITY_ERROR};
use pgwire::messages::startup::SecretKey;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::sync::{MappedMutexGuard, MutexGuard};

use crate::engine::{Engine, Session};

/// How often a client with unread pipelined messages is checked for a
/// hang-up while its statement waits for rows.
const CLIENT_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// State shared by all connections of one server.
pub(crate) struct Shared {
    pub(crate) engine: Arc<Engine>,
    /// `(pid, secret) → connection`, for CancelRequests.
    pub(crate) connections: Arc<ConnectionManager>,
    /// Process ids and secret keys for BackendKeyData.
    pub(crate) pids: RandomPidSecretKeyGenerator,
    /// Open connections per role (for `connections_per_role_max`).
    pub(crate) per_role: Arc<Mutex<std::collections::HashMap<String, usize>>>,
}

/// One connection counted against its role; uncounted on drop.
pub(crate) struct RoleSlot {
    role: String,
    counts: Arc<Mutex<std::collections::HashMap<String, usize>>>,
}

impl Drop for RoleSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = counts.get_mut(&self.role) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.role);
            }
        }
    }
}

impl Shared {
    pub(crate) fn new(engine: Arc<Engine>) -> Self {
        Shared {
            engine,
            connections: Arc::new(ConnectionManager::new()),
            pids: RandomPidSecretKeyGenerator::default(),
            per_role: Arc::default(),
        }
    }
}

/// The session slot of a connection: empty until startup completes.
pub(crate) type SessionSlot = tokio::sync::Mutex<Option<Session>>;

/// Locks the session of a started connection.
pub(crate) async fn lock_session(slot: &SessionSlot) -> PgWireResult<MappedMutexGuard<'_, Session>> {
    MutexGuard::try_map(slot.lock().await, Option::as_mut)
        .map_err(|_| user_error("08P01", "the connection has not completed startup"))
}

/// A pgwire error sent to the client as an ERROR with `sqlstate`.
pub(crate) fn user_error(sqlstate: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        SEVERITY_ERROR.to_owned(),
        sqlstate.to_owned(),
        message.into(),
    )))
}

/// Registration in the [`ConnectionManager`]; unregisters on drop.
struct CancelRegistration {
    handle: Arc<ConnectionHandle>,
    _guard: ConnectionGuard,
}

/// A SCRAM exchange waiting for the client's final message (`startup.rs`
/// runs it).
pub(crate) struct PendingScram {
    pub(super) exchange: pgwire::api::auth::sasl::scram::ScramServerAuthWaitingForClientFinal,
    pub(super) user: String,
    /// False for a role that does not exist: the exchange ran against a
    /// mock verifier and fails with `28000` at the end.
    pub(super) known: bool,
}

/// One client connection; implements pgwire's startup, simple-query and
/// extended-query handlers (see `startup.rs`, `simple.rs`, `extended.rs`).
pub(crate) struct Connection {
    pub(crate) shared: Arc<Shared>,
    pub(crate) session: Arc<SessionSlot>,
    cancel: Mutex<Option<CancelRegistration>>,
    probe: Option<ClientProbe>,
    /// A SCRAM exchange in progress (startup only).
    pub(crate) scram: Mutex<Option<PendingScram>>,
    /// This connection's place in its role's connection count.
    role_slot: Mutex<Option<RoleSlot>>,
}

impl Connection {
    pub(crate) fn new(shared: Arc<Shared>, probe: Option<ClientProbe>) -> Self {
        Connection {
            shared,
            session: Arc::default(),
            cancel: Mutex::new(None),
            probe,
            scram: Mutex::new(None),
            role_slot: Mutex::new(None),
        }
    }

    /// Counts this connection against `role`; refused when the role holds
    /// `connections_per_role_max` already.
    pub(crate) fn hold_role_slot(&self, role: &str) -> Result<(), String> {
        let max = self.shared.engine.security.connections_per_role_max;
        let mut counts = self.shared.per_role.lock().unwrap_or_else(|p| p.into_inner());
        let held = counts.entry(role.to_string()).or_default();
        if *held >= max {
            return Err(format!("too many connections for role \"{role}\" (at most {max})"));
        }
        *held += 1;
        drop(counts);
        let slot = RoleSlot {
            role: role.to_string(),
            counts: self.shared.per_role.clone(),
        };
        *self.role_slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(slot);
        Ok(())
    }

    /// Opens the engine session for `user`.
    pub(crate) async fn open_session(&self, user: &str) {
        *self.session.lock().await = Some(self.shared.engine.new_session(user));
    }

    /// Makes CancelRequests carrying `(pid, secret)` reach this connection.
    pub(crate) fn register_cancel(&self, pid: i32, secret: SecretKey) {
        let (handle, guard) = self.shared.connections.register(pid, secret);
        if let Ok(mut slot) = self.cancel.lock() {
            *slot = Some(CancelRegistration { handle, _guard: guard });
        }
    }

    /// Starts a statement: from now on a CancelRequest interrupts it.
    pub(crate) async fn start_query(&self) -> QueryWatch<'_> {
        let handle = self
            .cancel
            .lock()
            .ok()
            .and_then(|slot| slot.as_ref().map(|r| r.handle.clone()));
        let cancel = match handle {
            Some(handle) => Some(handle.start_query().await),
            None => None,
        };
        QueryWatch {
            cancel,
            probe: self.probe.as_ref(),
        }
    }
}

/// Why a statement stopped before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interrupt {
    /// The client sent a matching CancelRequest.
    Canceled,
    /// The client closed the connection.
    ClientGone,
}

impl Interrupt {
    /// The error that reports this interrupt: an ErrorResponse for a
    /// cancel (the session goes on), a fatal I/O error for a hang-up.
    pub(crate) fn into_error(self) -> PgWireResult<ErrorInfo> {
        match self {
            Interrupt::Canceled => Ok(canceled_info()),
            Interrupt::ClientGone => Err(PgWireError::IoError(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "client closed the connection",
            ))),
        }
    }
}

/// `57014 canceling statement due to user request`, as Postgres says.
pub(crate) fn canceled_info() -> ErrorInfo {
    ErrorInfo::new(
        SEVERITY_ERROR.to_owned(),
        "57014".to_owned(),
        "canceling statement due to user request".to_owned(),
    )
}

/// Watches one statement for a cancel request or a client hang-up.
pub(crate) struct QueryWatch<'a> {
    /// Fires on a matching CancelRequest; `None` once it can no longer fire.
    cancel: Option<oneshot::Receiver<()>>,
    probe: Option<&'a ClientProbe>,
}

impl QueryWatch<'_> {
    /// A watch that never fires (for tests and connections without cancel).
    #[cfg(test)]
    pub(crate) fn detached() -> QueryWatch<'static> {
        QueryWatch {
            cancel: None,
            probe: None,
        }
    }

    /// A watch fired by `cancel` (for tests).
    #[cfg(test)]
    pub(crate) fn with_cancel(cancel: oneshot::Receiver<()>) -> QueryWatch<'static> {
        QueryWatch {
            cancel: Some(cancel),
            probe: None,
        }
    }

    /// Whether a cancel has arrived, without waiting.
    pub(crate) fn cancel_requested(&mut self) -> bool {
        match self.cancel.as_mut().map(|rx| rx.try_recv()) {
            Some(Ok(Some(()))) => true,
            Some(Ok(None)) | None => false,
            Some(Err(_)) => {
                self.cancel = None;
                false
            }
        }
    }

    /// Runs `work` until it completes or the statement is interrupted (then
    /// `work` is dropped).
    pub(crate) async fn guard<F: Future>(&mut self, work: F) -> Result<F::Output, Interrupt> {
        let QueryWatch { cancel, probe } = self;
        tokio::select! {
            biased;
            () = cancel_fired(cancel) => Err(Interrupt::Canceled),
            () = client_closed(*probe) => Err(Interrupt::ClientGone),
            output = work => Ok(output),
        }
    }
}

/// Resolves when a cancel arrives; never, if the sender is gone.
async fn cancel_fired(cancel: &mut Option<oneshot::Receiver<()>>) {
    if let Some(rx) = cancel.as_mut() {
        if rx.await.is_ok() {
            return;
        }
        *cancel = None;
    }
    std::future::pending().await
}

async fn client_closed(probe: Option<&ClientProbe>) {
    match probe {
        Some(probe) => probe.closed().await,
        None => std::future::pending().await,
    }
}

/// A second handle on a client's socket that only watches for hang-ups
/// (epoll's RDHUP through tokio's readiness), never reads.
pub(crate) struct ClientProbe {
    socket: TcpStream,
}

impl ClientProbe {
    /// Splits `socket` into itself and a probe on the same connection.
    pub(crate) fn attach(socket: TcpStream) -> std::io::Result<(TcpStream, Option<ClientProbe>)> {
        let socket = socket.into_std()?;
        let probe = socket.try_clone().ok().and_then(|dup| TcpStream::from_std(dup).ok());
        Ok((TcpStream::from_std(socket)?, probe.map(|socket| ClientProbe { socket })))
    }

    /// Resolves once the client has closed its side of the connection.
    async fn closed(&self) {
        loop {
            match self.socket.ready(Interest::READABLE).await {
                Ok(ready) if ready.is_read_closed() || ready.is_error() => return,
                // Unread messages keep the socket readable: look again later.
                Ok(_) => tokio::time::sleep(CLIENT_CHECK_INTERVAL).await,
                Err(_) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn watch_fires_on_cancel_and_not_on_a_replaced_sender() {
        let (tx, rx) = oneshot::channel();
        let mut watch = QueryWatch::with_cancel(rx);
        assert!(!watch.cancel_requested());
        tx.send(()).unwrap();
        assert!(watch.cancel_requested());

        // A dropped sender (the next statement replaced it) never fires.
        let (tx, rx) = oneshot::channel::<()>();
        let mut watch = QueryWatch::with_cancel(rx);
        drop(tx);
        assert!(!watch.cancel_requested());
        let work = watch.guard(tokio::time::sleep(Duration::from_millis(10))).await;
        assert_eq!(work, Ok(()));
    }

    #[tokio::test]
    async fn guard_interrupts_pending_work_on_cancel() {
        let (tx, rx) = oneshot::channel();
        let mut watch = QueryWatch::with_cancel(rx);
        tx.send(()).unwrap();
        let outcome = watch.guard(std::future::pending::<()>()).await;
        assert_eq!(outcome, Err(Interrupt::Canceled));
    }

    #[tokio::test]
    async fn probe_notices_a_hang_up_even_with_unread_data() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let (_server, probe) = ClientProbe::attach(server).unwrap();
        let probe = probe.unwrap();
        let mut watch = QueryWatch {
            cancel: None,
            probe: Some(&probe),
        };

        // A pipelined message does not count as a hang-up.
        client.write_all(b"X\0\0\0\x04").await.unwrap();
        let early = watch.guard(tokio::time::sleep(Duration::from_millis(50))).await;
        assert_eq!(early, Ok(()));

        drop(client);
        let outcome = tokio::time::timeout(Duration::from_secs(10), watch.guard(std::future::pending::<()>()))
            .await
            .expect("hang-up noticed");
        assert_eq!(outcome, Err(Interrupt::ClientGone));
    }
}
