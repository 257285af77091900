//! The dashboard in a real browser: starts `sluice playground`, creates a
//! Nexmark pipeline and a windowed count over a memory stream with the
//! `psql` binary, and runs `tests/dashboard/e2e.mjs` (playwright-core
//! driving Debian's headless `chromium`). The script checks what a user
//! sees against the REST API: the pipeline listed, one DAG node per
//! operator, rates above zero and moving, instance rows and charts for a
//! clicked node, the SQL page's plan and live rows; then it alters the
//! count's filter (`ALTER PIPELINE … AS`) and checks that the open page
//! shows version 2 with its diff, each operator's change in its colour.
//! Screenshots go to `target/tmp/dashboard/`;
//! `SLUICE_UPDATE_SCREENSHOT=1` also copies the pipeline page to
//! `docs/dashboard.png` for the README.
//!
//! Needs `node`/`npm` and `/usr/bin/chromium` (scripts/test.sh installs
//! them); `CHROMIUM` overrides the browser path.

mod common;

use common::TestServer;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The whole browser run may take this long at most.
const E2E_DEADLINE: Duration = Duration::from_secs(240);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_dashboard_shows_a_live_pipeline_in_chromium() {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).exists(),
        "{chromium} is missing: apt-get install chromium (scripts/test.sh does)"
    );
    let script_dir = common::dashboard_scripts();

    let server = TestServer::start();
    // Event time starts now, so the watermark lag the page shows is small;
    // 100 ms windows fire about every second at 5000 events/s.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    server.psql(&format!(
        "CREATE STREAM bids (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, \
             date_time TIMESTAMP, extra VARCHAR, WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND) \
             WITH (connector = 'nexmark', table = 'bid', 'events.per.second' = 5000, 'base.time' = {now_ms})"
    ));
    server.psql(
        "SET parallelism = 2; CREATE SINK top_bids WITH (connector = 'blackhole') AS \
         SELECT window_start, auction, count(*) AS bids, max(price) AS top \
         FROM TUMBLE(bids, date_time, INTERVAL '100' MILLISECOND) GROUP BY window_start, window_end, auction",
    );

    // A count per key and 10-second window, filtered above the window: the
    // script changes only the filter, so the window is kept (see e2e.mjs).
    let counts_above = |min: u32| {
        format!(
            "SELECT * FROM (SELECT window_start, k, count(*) AS n FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) \
             GROUP BY window_start, window_end, k) WHERE n > {min}"
        )
    };
    server.psql(&format!(
        "CREATE STREAM ev (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) \
             WITH (connector = 'memory'); \
             INSERT INTO ev VALUES (1, TIMESTAMP '2024-01-01 00:00:01'), (1, TIMESTAMP '2024-01-01 00:00:02'), \
             (2, TIMESTAMP '2024-01-01 00:00:03'); \
             CREATE SINK counts WITH (connector = 'blackhole') AS {}",
        counts_above(1)
    ));

    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
    let url = format!("http://127.0.0.1:{}", server.http_port);
    let (ok, output) = common::run_node_script(
        &script_dir.join("e2e.mjs"),
        &[
            url,
            "top_bids".into(),
            shots.to_string_lossy().into_owned(),
            "counts".into(),
            format!("ALTER PIPELINE counts AS {}", counts_above(5)),
        ],
        &[],
        E2E_DEADLINE,
    );
    println!("{output}");
    println!("screenshots in {}", shots.display());
    assert!(ok, "the browser test failed:\n{output}");
    assert!(output.contains("e2e: 30 passed, 0 failed"), "{output}");
    for shot in ["overview.png", "pipeline.png", "sql.png", "altered.png"] {
        let size = std::fs::metadata(shots.join(shot)).map(|m| m.len()).unwrap_or(0);
        assert!(size > 10_000, "{shot} is missing or empty ({size} bytes)");
    }
    if std::env::var_os("SLUICE_UPDATE_SCREENSHOT").is_some() {
        std::fs::copy(shots.join("pipeline.png"), repo().join("docs/dashboard.png")).expect("copy screenshot");
    }
}
