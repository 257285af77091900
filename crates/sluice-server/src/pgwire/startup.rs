//! Connection startup: authentication (`trust`: any existing role, no
//! password; `scram-sha-256`: the SASL exchange against the role's stored
//! verifier, `28P01` for a wrong password, `28000` for an unknown role,
//! both after the same delay), `--tls-required`, the per-role connection
//! limit, the ParameterStatus values drivers look at, and BackendKeyData so
//! a client can cancel its statements. A client naming no user is `sluice`.

use std::collections::HashMap;
use std::fmt::Debug;

use async_trait::async_trait;
use futures::Sink;
use futures::SinkExt;
use pgwire::api::PgWireConnectionState;
use pgwire::api::auth::sasl::SCRAM_SHA_256_METHOD;
use pgwire::api::auth::sasl::scram::ScramServerAuth;
use pgwire::api::auth::{
    ServerParameterProvider, StartupHandler, finish_authentication, protocol_negotiation,
    save_startup_parameters_to_metadata,
};
use pgwire::api::{ClientInfo, METADATA_APPLICATION_NAME, METADATA_USER, PidSecretKeyGenerator};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult, SEVERITY_FATAL};
use pgwire::messages::startup::{Authentication, PasswordMessageFamily};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};

use crate::security::AuthMethod;
use crate::security::password;

use super::connection::{Connection, PendingScram};

/// The user of a client that names none.
pub(crate) const DEFAULT_USER: &str = "sluice";

/// The ParameterStatus values sent after authentication. `server_version`
/// has Postgres' `major.minor (distribution)` shape, which psql and JDBC
/// parse as 15.0.
pub(crate) fn server_parameters(application_name: &str, user: &str) -> Vec<(&'static str, String)> {
    vec![
        ("server_version", format!("15.0 (Sluice {})", env!("CARGO_PKG_VERSION"))),
        ("server_encoding", "UTF8".to_owned()),
        ("client_encoding", "UTF8".to_owned()),
        ("DateStyle", "ISO, MDY".to_owned()),
        ("IntervalStyle", "postgres".to_owned()),
        ("TimeZone", "UTC".to_owned()),
        ("integer_datetimes", "on".to_owned()),
        ("standard_conforming_strings", "on".to_owned()),
        ("application_name", application_name.to_owned()),
        ("session_authorization", user.to_owned()),
        ("is_superuser", "off".to_owned()),
        ("default_transaction_read_only", "off".to_owned()),
        ("in_hot_standby", "off".to_owned()),
    ]
}

/// The user a client connected as.
fn user_of(client: &impl ClientInfo) -> String {
    client
        .metadata()
        .get(METADATA_USER)
        .filter(|user| !user.is_empty())
        .map_or_else(|| DEFAULT_USER.to_owned(), Clone::clone)
}

struct SluiceParameters;

impl ServerParameterProvider for SluiceParameters {
    fn server_parameters<C: ClientInfo>(&self, client: &C) -> Option<HashMap<String, String>> {
        let application_name = client
            .metadata()
            .get(METADATA_APPLICATION_NAME)
            .cloned()
            .unwrap_or_default();
        let parameters = server_parameters(&application_name, &user_of(client));
        Some(parameters.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }
}

/// A FATAL startup error with `sqlstate`.
fn fatal(sqlstate: &str, message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        SEVERITY_FATAL.to_owned(),
        sqlstate.to_owned(),
        message,
    )))
}

impl Connection {
    /// Fails an authentication after the configured delay (the same for
    /// every failure, so timing tells a wrong password and an unknown role
    /// apart no better than the SQLSTATE does).
    async fn refuse(&self, sqlstate: &str, message: String) -> PgWireResult<()> {
        tokio::time::sleep(self.shared.engine.security.auth_failure_delay).await;
        Err(fatal(sqlstate, message))
    }

    /// Startup done: a session for `user`, BackendKeyData, parameters.
    async fn admit<C>(&self, client: &mut C, user: &str) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let Err(refused) = self.hold_role_slot(user) {
            return Err(fatal("53300", refused));
        }
        let (pid, secret) = self.shared.pids.generate(&*client);
        client.set_pid_and_secret_key(pid, secret.clone());
        self.register_cancel(pid, secret);
        self.open_session(user).await;
        finish_authentication(client, &SluiceParameters).await
    }

    /// The client-first message: look the role up (a mock verifier for an
    /// unknown one) and send the server-first message.
    async fn scram_first<C>(&self, client: &mut C, message: PasswordMessageFamily) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let initial = message.into_sasl_initial_response()?;
        if initial.auth_method != SCRAM_SHA_256_METHOD {
            return self
                .refuse(
                    "28000",
                    format!("SASL mechanism {} is not supported", initial.auth_method),
                )
                .await;
        }
        let Some(data) = initial.data.as_ref() else {
            return self.refuse("08P01", "empty SCRAM client-first message".into()).await;
        };
        let user = user_of(client);
        let stored = self.shared.engine.master.with_security(|s| {
            s.roles
                .get(&user)
                .filter(|r| r.login)
                .map(|r| r.verifier.as_deref().and_then(password::parse_verifier))
        });
        let known = stored.is_some();
        // A role without a (readable) password cannot log in with SCRAM.
        let secret = stored.flatten().unwrap_or_else(|| password::mock_secret(&user));
        let (server_first, exchange) = match ScramServerAuth::new().on_client_first_message_with_secret(data, secret) {
            Ok(ok) => ok,
            Err(e) => return self.refuse("08P01", format!("invalid SCRAM message: {e}")).await,
        };
        *self.scram.lock().unwrap_or_else(|p| p.into_inner()) = Some(PendingScram { exchange, user, known });
        client.set_state(PgWireConnectionState::AuthenticationInProgress);
        client
            .send(PgWireBackendMessage::Authentication(Authentication::SASLContinue(
                server_first.into(),
            )))
            .await?;
        Ok(())
    }

    /// The client-final message: check the proof, then admit or refuse.
    async fn scram_final<C>(
        &self,
        client: &mut C,
        pending: PendingScram,
        message: PasswordMessageFamily,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let response = message.into_sasl_response()?;
        let verified = pending.exchange.on_client_final_message(&response.data);
        let PendingScram { user, known, .. } = pending;
        match verified {
            Ok(server_final) if known => {
                client
                    .send(PgWireBackendMessage::Authentication(Authentication::SASLFinal(
                        server_final.into(),
                    )))
                    .await?;
                self.admit(client, &user).await
            }
            _ if !known => self.refuse("28000", format!("role \"{user}\" does not exist")).await,
            _ => {
                tracing::info!(%user, "password authentication failed");
                self.refuse("28P01", format!("password authentication failed for user \"{user}\""))
                    .await
            }
        }
    }
}

#[async_trait]
impl StartupHandler for Connection {
    async fn on_startup<C>(&self, client: &mut C, message: PgWireFrontendMessage) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match message {
            PgWireFrontendMessage::Startup(startup) => {
                protocol_negotiation(client, &startup).await?;
                save_startup_parameters_to_metadata(client, &startup);
                let security = &self.shared.engine.security;
                if security.tls_required && !client.is_secure() {
                    return self
                        .refuse("28000", "this server requires TLS (sslmode=require or stronger)".into())
                        .await;
                }
                match security.auth {
                    AuthMethod::Trust => {
                        let user = user_of(client);
                        if crate::security::principal(&self.shared.engine.master, &user).is_err() {
                            return self.refuse("28000", format!("role \"{user}\" does not exist")).await;
                        }
                        self.admit(client, &user).await
                    }
                    AuthMethod::ScramSha256 => {
                        client.set_state(PgWireConnectionState::AuthenticationInProgress);
                        client
                            .send(PgWireBackendMessage::Authentication(Authentication::SASL(vec![
                                SCRAM_SHA_256_METHOD.to_owned(),
                            ])))
                            .await?;
                        Ok(())
                    }
                }
            }
            PgWireFrontendMessage::PasswordMessageFamily(message) => {
                let pending = self.scram.lock().unwrap_or_else(|p| p.into_inner()).take();
                match pending {
                    Some(pending) => self.scram_final(client, pending, message).await,
                    None if self.shared.engine.security.auth == AuthMethod::ScramSha256 => {
                        self.scram_first(client, message).await
                    }
                    None => Err(fatal("08P01", "unexpected password message".into())),
                }
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_what_drivers_expect() {
        let parameters: HashMap<_, _> = server_parameters("psql", "alice").into_iter().collect();
        assert!(parameters["server_version"].starts_with("15.0 (Sluice "));
        assert_eq!(parameters["server_encoding"], "UTF8");
        assert_eq!(parameters["client_encoding"], "UTF8");
        assert_eq!(parameters["DateStyle"], "ISO, MDY");
        assert_eq!(parameters["TimeZone"], "UTC");
        assert_eq!(parameters["integer_datetimes"], "on");
        assert_eq!(parameters["standard_conforming_strings"], "on");
        assert_eq!(parameters["application_name"], "psql");
        assert_eq!(parameters["session_authorization"], "alice");
    }

    #[test]
    fn server_version_parses_like_libpq() {
        // libpq reads `major.minor` up to the first non-digit; ≥ 10 means
        // version = major * 10000 + minor.
        let parameters: HashMap<_, _> = server_parameters("", DEFAULT_USER).into_iter().collect();
        let version = &parameters["server_version"];
        let numeric: String = version
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let (major, minor) = numeric.split_once('.').unwrap();
        let number = major.parse::<u32>().unwrap() * 10_000 + minor.parse::<u32>().unwrap();
        assert!(number >= 90_000, "{version}");
    }
}
