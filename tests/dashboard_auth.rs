//! The dashboard's login in a real browser: starts `sluice playground
//! --auth scram-sha-256` with a superuser password, creates a Nexmark
//! pipeline as `sluice` and a role without privileges (over pgwire, with
//! SCRAM), and runs `tests/dashboard/auth.mjs` (playwright-core driving
//! Debian's headless `chromium`). The script checks the login form before
//! any data, a wrong password refused, the right one and an API token
//! showing the pipeline, sign-out and a dropped token asking again, a
//! reload asking again, the unprivileged role's "Permission denied" without
//! a login loop, no credential in the browser's storage, cookies or URLs,
//! and no HTTP auth dialog of the browser's own (see `http_auth.rs`).
//! Screenshots go to `target/tmp/dashboard/`.
//!
//! Needs `node`/`npm` and `/usr/bin/chromium` (scripts/test.sh installs
//! them); `CHROMIUM` overrides the browser path.

mod common;

use common::TestServer;
use std::path::PathBuf;
use std::time::Duration;

/// The whole browser run may take this long at most.
const DEADLINE: Duration = Duration::from_secs(240);
const PASSWORD: &str = "dashboard-admin-pw";
const VIEWER: &str = "dash_viewer";
const VIEWER_PASSWORD: &str = "dash-viewer-pw";

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_asks_for_a_login_when_auth_is_on() {
    let script_dir = common::dashboard_scripts();
    let dir = tempfile::tempdir().expect("temp dir");
    let server = TestServer::start_with(
        dir.path(),
        &["--auth", "scram-sha-256"],
        &[("SLUICE_SUPERUSER_PASSWORD", PASSWORD)],
    );
    let admin = server.connect_as("sluice", PASSWORD).await.expect("sluice logs in");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    admin
        .batch_execute(&format!(
            "CREATE STREAM bids (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, \
                 date_time TIMESTAMP, extra VARCHAR, WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND) \
                 WITH (connector = 'nexmark', table = 'bid', 'events.per.second' = 500, 'base.time' = {now_ms}); \
             CREATE SINK expensive WITH (connector = 'blackhole') AS SELECT auction, price FROM bids WHERE price > 10; \
             CREATE USER {VIEWER} WITH PASSWORD '{VIEWER_PASSWORD}'"
        ))
        .await
        .expect("set up the pipeline and the viewer");

    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
    let url = format!("http://127.0.0.1:{}", server.http_port);
    let viewer = format!("{VIEWER}:{VIEWER_PASSWORD}");
    // Passwords through the environment, not the command line.
    let script = script_dir.join("auth.mjs");
    let args = [url, "expensive".into(), shots.to_string_lossy().into_owned()];
    let env = [
        ("SLUICE_E2E_PASSWORD", PASSWORD),
        ("SLUICE_E2E_VIEWER", viewer.as_str()),
    ];
    let (ok, output) = tokio::task::block_in_place(|| common::run_node_script(&script, &args, &env, DEADLINE));
    println!("{output}");
    println!("screenshots in {}", shots.display());
    assert!(ok, "the browser test failed:\n{output}");
    assert!(output.contains("auth: 36 passed, 0 failed"), "{output}");
    for shot in ["auth-login.png", "auth-signed-in.png", "auth-denied.png"] {
        let size = std::fs::metadata(shots.join(shot)).map(|m| m.len()).unwrap_or(0);
        assert!(size > 10_000, "{shot} is missing or empty ({size} bytes)");
    }
}
