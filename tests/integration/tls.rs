//! TLS end to end with a certificate made in the test: `psql` with
//! `sslmode=verify-full` (the server's certificate checked against the
//! test's root), `--tls-required` refusing a plain connection, a client
//! trusting another root refusing the server, and HTTPS checked by curl.

use crate::common::TestServer;
use std::path::Path;
use std::process::{Command, Stdio};

const PASSWORD: &str = "tls-admin-pw";

/// A self-signed certificate for `localhost` (and 127.0.0.1), PEM files
/// written into `dir`: (cert, key).
fn certificate(dir: &Path, name: &str) -> (String, String) {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .expect("a self-signed certificate");
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    (cert.display().to_string(), key.display().to_string())
}

fn psql(server: &TestServer, options: &str, command: &str) -> (bool, String) {
    let conn = format!(
        "host=localhost port={} user=sluice dbname=sluice connect_timeout=10 {options}",
        server.pg_port
    );
    let out = Command::new("psql")
        .args([&conn, "-X", "-w", "-A", "-t", "-c", command])
        .env("PGPASSWORD", PASSWORD)
        .stdin(Stdio::null())
        .output()
        .expect("run psql");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn psql_verify_full_and_https_with_a_test_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = certificate(dir.path(), "server");
    let (other_root, _) = certificate(dir.path(), "other");
    let server = TestServer::start_with(
        &dir.path().join("data"),
        &[
            "--auth",
            "scram-sha-256",
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--tls-required",
        ],
        &[("SLUICE_SUPERUSER_PASSWORD", PASSWORD)],
    );

    let verify = format!("sslmode=verify-full sslrootcert={cert}");
    let (ok, text) = psql(&server, &verify, "SELECT 6 * 7");
    assert!(ok && text.trim() == "42", "{text}");
    let (ok, text) = psql(&server, &verify, "\\conninfo");
    assert!(ok && text.contains("SSL connection"), "{text}");

    let (ok, text) = psql(&server, "sslmode=disable", "SELECT 1");
    assert!(!ok && text.contains("requires TLS"), "{text}");
    let (ok, text) = psql(
        &server,
        &format!("sslmode=verify-full sslrootcert={other_root}"),
        "SELECT 1",
    );
    assert!(!ok && text.contains("certificate"), "{text}");

    let https = format!("https://localhost:{}/health", server.http_port);
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert", &cert, &https])
        .output()
        .expect("run curl");
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && body.contains("\"status\":\"ok\""),
        "{body}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert", &other_root, &https])
        .output()
        .expect("run curl");
    assert!(!out.status.success(), "curl trusted a certificate from another root");
}
