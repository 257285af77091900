//! Who may connect and what a session may do.
//!
//! - [`SecurityConfig`]: how clients authenticate (`trust` or
//!   `scram-sha-256`), the first superuser's password, TLS files, the
//!   directory file sinks are confined to, and connection limits;
//! - [`password`]: SCRAM-SHA-256 verifiers (what the catalog stores), the
//!   password check of HTTP Basic, API token secrets and their digests;
//! - [`tls`]: rustls (ring) acceptors for pgwire and HTTPS;
//! - [`files`]: `--file-root` confinement of server file paths;
//! - [`bootstrap_superuser`]: creates the role `sluice` on first start.
//!
//! Roles, grants, owners and tokens are catalog state
//! (`sluice_cluster::security`); the engine checks privileges per statement
//! against the catalog as it is then, so a GRANT or REVOKE takes effect on
//! the next statement of every session.

pub mod files;
pub mod password;
pub mod tls;

use sluice_cluster::security::{BOOTSTRAP_SUPERUSER, Principal, SecurityCommand};
use sluice_cluster::{CatalogCommand, Master};
use sluice_types::{Error, Result};
use std::path::PathBuf;
use std::time::Duration;

/// How pgwire clients (and REST callers) prove who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthMethod {
    /// No password: any existing role may connect as itself. REST needs no
    /// credentials and runs as the bootstrap superuser.
    #[default]
    Trust,
    /// SCRAM-SHA-256 on pgwire; HTTP Basic (the same password) or a bearer
    /// token on REST.
    ScramSha256,
}

/// Certificate chain and private key files (PEM) for TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The security settings of a server.
#[derive(Debug, Clone)]
pub struct SecurityConfig {
    pub auth: AuthMethod,
    /// The password `sluice` gets when it is first created (or when it has
    /// none yet). Never stored in clear.
    pub superuser_password: Option<String>,
    /// Every path a file sink names must resolve under this directory.
    pub file_root: Option<PathBuf>,
    pub tls: Option<TlsFiles>,
    /// Refuse clients that do not use TLS.
    pub tls_required: bool,
    /// Connections one role may hold at once.
    pub connections_per_role_max: usize,
    /// How long a failed authentication waits before its error is sent
    /// (the same for a wrong password and an unknown role).
    pub auth_failure_delay: Duration,
}

/// Connections one role may hold at once by default.
pub const CONNECTIONS_PER_ROLE_MAX: usize = 256;
/// The delay before an authentication failure is reported.
pub const AUTH_FAILURE_DELAY: Duration = Duration::from_millis(200);

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            auth: AuthMethod::Trust,
            superuser_password: None,
            file_root: None,
            tls: None,
            tls_required: false,
            connections_per_role_max: CONNECTIONS_PER_ROLE_MAX,
            auth_failure_delay: AUTH_FAILURE_DELAY,
        }
    }
}

/// Creates the superuser `sluice` when the catalog has none, with the
/// configured password's verifier; gives an existing `sluice` without a
/// password the configured one. With `scram-sha-256` and no password for
/// `sluice` anywhere, start-up fails: nobody could log in.
pub async fn bootstrap_superuser(master: &Master, config: &SecurityConfig) -> Result<()> {
    let existing = master.security().roles.get(BOOTSTRAP_SUPERUSER).cloned();
    let verifier = config.superuser_password.as_deref().map(password::make_verifier);
    let command = match (&existing, verifier) {
        (None, verifier) => Some(SecurityCommand::CreateRole {
            name: BOOTSTRAP_SUPERUSER.into(),
            superuser: true,
            login: true,
            verifier,
        }),
        (Some(role), Some(verifier)) if role.verifier.is_none() => Some(SecurityCommand::AlterRole {
            name: BOOTSTRAP_SUPERUSER.into(),
            verifier: Some(Some(verifier)),
            superuser: None,
        }),
        _ => None,
    };
    if let Some(command) = command {
        master.apply(CatalogCommand::Security(command)).await?;
    }
    let has_password = master
        .security()
        .roles
        .get(BOOTSTRAP_SUPERUSER)
        .is_some_and(|r| r.verifier.is_some());
    if config.auth == AuthMethod::ScramSha256 && !has_password {
        return Err(Error::invalid_option(
            "authentication is scram-sha-256 but the superuser \"sluice\" has no password: \
             set SLUICE_SUPERUSER_PASSWORD or --superuser-password-file",
        ));
    }
    Ok(())
}

/// The principal of `role` now, or `28000` when it does not exist (any
/// more) or may not log in.
pub fn principal(master: &Master, role: &str) -> Result<Principal> {
    master
        .with_security(|s| s.principal(role).filter(|_| s.roles.get(role).is_some_and(|r| r.login)))
        .ok_or_else(|| role_refused(role))
}

/// `28000 role "x" does not exist`.
pub fn role_refused(role: &str) -> Error {
    Error::user(
        sluice_types::SqlCode::InvalidAuthorization,
        format!("role \"{role}\" does not exist"),
    )
}
