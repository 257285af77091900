//! The security flags every serving command takes (`sluice playground`
//! now, `sluice master` with the cluster), and the rules that turn them
//! into a [`SecurityConfig`]: a loopback-only playground defaults to
//! `trust`; anything listening beyond loopback defaults to `scram-sha-256`
//! and refuses `trust` unless `--insecure` says so.

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use sluice_server::security::{AuthMethod, CONNECTIONS_PER_ROLE_MAX, SecurityConfig, TlsFiles};
use std::net::SocketAddr;
use std::path::PathBuf;

/// The environment variable holding the first superuser's password.
pub const SUPERUSER_PASSWORD_ENV: &str = "SLUICE_SUPERUSER_PASSWORD";

/// `--auth` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthArg {
    /// No passwords: any existing role connects as itself.
    Trust,
    /// SCRAM-SHA-256 passwords (HTTP Basic or a token on REST).
    #[value(name = "scram-sha-256")]
    ScramSha256,
}

/// Authentication, TLS and file-system confinement flags.
#[derive(Debug, Clone, Args)]
pub struct SecurityArgs {
    /// How clients authenticate. Default: `trust` when every listener is on
    /// loopback (playground), `scram-sha-256` otherwise.
    #[arg(long, value_enum)]
    pub auth: Option<AuthArg>,
    /// Allow `--auth trust` on a non-loopback address.
    #[arg(long)]
    pub insecure: bool,
    /// A file whose first line is the first superuser's password (instead
    /// of the SLUICE_SUPERUSER_PASSWORD environment variable).
    #[arg(long)]
    pub superuser_password_file: Option<PathBuf>,
    /// File sinks (and local checkpoint directories) may only write under
    /// this directory.
    #[arg(long)]
    pub file_root: Option<PathBuf>,
    /// TLS certificate chain (PEM) for pgwire and HTTPS.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Refuse pgwire clients that do not use TLS.
    #[arg(long, requires = "tls_cert")]
    pub tls_required: bool,
    /// Connections one role may hold at once.
    #[arg(long, default_value_t = CONNECTIONS_PER_ROLE_MAX)]
    pub connections_per_role_max: usize,
}

impl SecurityArgs {
    /// The configuration for a server listening on `listeners`, with the
    /// superuser password read from `env_password` or the file.
    pub fn config(&self, listeners: &[SocketAddr], env_password: Option<String>) -> anyhow::Result<SecurityConfig> {
        let loopback = listeners.iter().all(|a| a.ip().is_loopback());
        self.build(loopback, env_password)
    }

    /// The configuration of a cluster master: SCRAM by default wherever it
    /// listens (workers and clients reach it over the network), `trust`
    /// only with `--insecure`.
    pub fn config_for_master(&self, env_password: Option<String>) -> anyhow::Result<SecurityConfig> {
        self.build(false, env_password)
    }

    fn build(&self, loopback: bool, env_password: Option<String>) -> anyhow::Result<SecurityConfig> {
        let auth = match (self.auth, loopback) {
            (Some(AuthArg::Trust), false) if !self.insecure => bail!(
                "--auth trust on a non-loopback address lets anyone who reaches it act as any role; \
                 use --auth scram-sha-256, or add --insecure if that is really what you want"
            ),
            (Some(AuthArg::Trust), false) => {
                tracing::warn!("INSECURE: --auth trust on a non-loopback address; anyone who can connect is trusted");
                AuthMethod::Trust
            }
            (Some(AuthArg::Trust), true) | (None, true) => AuthMethod::Trust,
            (Some(AuthArg::ScramSha256), _) | (None, false) => AuthMethod::ScramSha256,
        };
        let superuser_password = match &self.superuser_password_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading --superuser-password-file {}", path.display()))?;
                Some(text.lines().next().unwrap_or_default().to_string())
            }
            None => env_password,
        }
        .filter(|p| !p.is_empty());
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => None,
        };
        Ok(SecurityConfig {
            auth,
            superuser_password,
            file_root: self.file_root.clone(),
            tls,
            tls_required: self.tls_required,
            connections_per_role_max: self.connections_per_role_max,
            ..SecurityConfig::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        security: SecurityArgs,
    }

    fn args(flags: &[&str]) -> SecurityArgs {
        Cli::parse_from(std::iter::once("sluice").chain(flags.iter().copied())).security
    }

    const LOOPBACK: &str = "127.0.0.1:5433";
    const ANY: &str = "0.0.0.0:5433";

    fn config(flags: &[&str], addr: &str) -> anyhow::Result<SecurityConfig> {
        args(flags).config(&[addr.parse().unwrap()], Some("pw".into()))
    }

    #[test]
    fn loopback_defaults_to_trust_and_other_addresses_to_scram() {
        assert_eq!(config(&[], LOOPBACK).unwrap().auth, AuthMethod::Trust);
        assert_eq!(config(&[], ANY).unwrap().auth, AuthMethod::ScramSha256);
        assert_eq!(
            config(&["--auth", "scram-sha-256"], LOOPBACK).unwrap().auth,
            AuthMethod::ScramSha256
        );
    }

    #[test]
    fn trust_beyond_loopback_needs_insecure() {
        let err = config(&["--auth", "trust"], ANY).unwrap_err().to_string();
        assert!(err.contains("--insecure"), "{err}");
        assert_eq!(
            config(&["--auth", "trust", "--insecure"], ANY).unwrap().auth,
            AuthMethod::Trust
        );
    }

    #[test]
    fn the_password_file_wins_over_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "from-file\nignored\n").unwrap();
        let c = config(&["--superuser-password-file", file.to_str().unwrap()], LOOPBACK).unwrap();
        assert_eq!(c.superuser_password.as_deref(), Some("from-file"));
        assert_eq!(config(&[], LOOPBACK).unwrap().superuser_password.as_deref(), Some("pw"));
    }
}
