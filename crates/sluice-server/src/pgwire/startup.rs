//! Connection startup: no password (a playground server), any user name
//! (`sluice` when absent), the ParameterStatus values drivers look at, and
//! BackendKeyData so a client can cancel its statements.

use std::collections::HashMap;
use std::fmt::Debug;

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::auth::{
    ServerParameterProvider, StartupHandler, finish_authentication, protocol_negotiation,
    save_startup_parameters_to_metadata,
};
use pgwire::api::{ClientInfo, METADATA_APPLICATION_NAME, METADATA_USER, PidSecretKeyGenerator};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};

use super::connection::Connection;

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

#[async_trait]
impl StartupHandler for Connection {
    async fn on_startup<C>(&self, client: &mut C, message: PgWireFrontendMessage) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // Only the startup message matters: no authentication is asked for.
        let PgWireFrontendMessage::Startup(startup) = message else {
            return Ok(());
        };
        protocol_negotiation(client, &startup).await?;
        save_startup_parameters_to_metadata(client, &startup);
        let (pid, secret) = self.shared.pids.generate(&*client);
        client.set_pid_and_secret_key(pid, secret.clone());
        self.register_cancel(pid, secret);
        self.open_session(&user_of(client)).await;
        finish_authentication(client, &SluiceParameters).await
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
