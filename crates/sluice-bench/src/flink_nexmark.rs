//! Flink beside Sluice over the Nexmark queries of `benches/nexmark`, both
//! reading the very same rows: Flink's tables are `benches/flink/
//! NexmarkSource.java`, a table connector around `NexmarkRows.java`, a port
//! of Sluice's generator checked value for value against it
//! (`tests/nexmark_java.rs`). Same number of events, same event-time model
//! and watermark delay, same SQL (the files' `SET` lines, Sluice's state
//! limits, are not sent to Flink), blackhole sinks, checkpoints off on both.
//!
//! Per query: one JVM warmed by one unmeasured run of a quarter of the
//! events, then `runs` times a Flink run and a Sluice run, alternately. A
//! query Flink refuses is reported with Flink's error (and still measured
//! on Sluice). Each table a query reads also gets a generator-only run on
//! both engines (`SELECT * FROM <table>`), the ceiling of the queries over it,
//! and one of only the columns the query reads (`SELECT auction, date_time
//! FROM bid` for q5): a query's *engine share* is its rate with that
//! generator's time taken out, `rows / (t_query - t_generator)`, on each
//! engine (issue 28's "engine's share", beside the raw ratio).

use crate::flink::{FlinkRun, JVM_MODULE_FLAGS, Jvm, build_driver, busy, other_cores, summarized};
use crate::nexmark::{
    StreamSetup, TimeModel, create_streams, generator_only, read_query, tables_of, throughput_checkpointed,
};
use crate::server::{Server, run_sink};
use crate::units::si;
use anyhow::{Result, ensure};
use serde_json::{Value, json};
use sluice_connectors::nexmark::{NexmarkTable, nexmark_schema};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

/// Rows of `table` among the first `events` global events: in each block of
/// 50 events one person (offset 0), three auctions (1–3), 46 bids (4–49).
pub fn table_rows(table: &str, events: u64) -> u64 {
    let (from, to) = match table {
        "person" => (0, 1),
        "auction" => (1, 4),
        _ => (4, 50),
    };
    let (blocks, rest) = (events / 50, events % 50);
    blocks * (to - from) + rest.clamp(from, to) - from
}

/// The rows a query over `tables` reads, on either engine.
fn rows_read(tables: &[&str], events: u64) -> u64 {
    tables.iter().map(|t| table_rows(t, events)).sum()
}

/// One line: Flink's driver reads a command a line.
fn one_line(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The query in Flink's dialect: `day` and `minute` are reserved words
/// there (quoted as Flink's own Nexmark q15–q17 quote them), its character
/// count is `CHAR_LENGTH` (Sluice's `length`), a window TVF names its table
/// and time column as `TABLE t, DESCRIPTOR(c)` (Sluice's `TUMBLE(t, c, …)`),
/// and the n-th part of a split string is `SPLIT_INDEX(s, d, n - 1)`
/// (Sluice's `split_part(s, d, n)`, as Flink's own Nexmark q22 writes it).
/// Nothing else changes.
pub fn flink_dialect(sql: &str) -> String {
    let sql = sql
        .replace(" AS day", " AS `day`")
        .replace(" AS minute", " AS `minute`");
    let sql = window_tvfs(&sql);
    let sql = split_parts(&sql);
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql.as_str();
    while let Some(i) = rest.to_ascii_lowercase().find("length(") {
        let word_start = rest[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
        out.push_str(&rest[..i]);
        out.push_str(if word_start { "CHAR_LENGTH(" } else { &rest[i..i + 7] });
        rest = &rest[i + 7..];
    }
    out.push_str(rest);
    out
}

/// `TUMBLE(t, c, …)`, `HOP(…)`, `SESSION(…)`, `CUMULATE(…)` with a bare
/// table and time column → `TUMBLE(TABLE t, DESCRIPTOR(c), …)`.
fn window_tvfs(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 32);
    let mut rest = sql;
    'scan: while let Some(open) = rest.find('(') {
        let (before, after) = (&rest[..open], &rest[open + 1..]);
        let word = before
            .rsplit(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .next()
            .unwrap_or("");
        let is_tvf = ["TUMBLE", "HOP", "SESSION", "CUMULATE"]
            .iter()
            .any(|f| word.eq_ignore_ascii_case(f));
        out.push_str(before);
        out.push('(');
        rest = after;
        if !is_tvf {
            continue;
        }
        // Two plain identifiers, comma-separated, come first.
        let mut parts = after.splitn(3, ',');
        let (Some(table), Some(column), Some(tail)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let plain = |s: &str| {
            let s = s.trim();
            !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if !plain(table) || !plain(column) || table.trim().eq_ignore_ascii_case("TABLE") {
            continue 'scan;
        }
        out.push_str(&format!("TABLE {}, DESCRIPTOR({}),", table.trim(), column.trim()));
        rest = tail;
    }
    out.push_str(rest);
    out
}

/// `split_part(s, d, n)` with a literal n → `SPLIT_INDEX(s, d, n - 1)`.
fn split_parts(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    while let Some(i) = rest.to_ascii_lowercase().find("split_part(") {
        out.push_str(&rest[..i]);
        let args = &rest[i + "split_part(".len()..];
        let Some(close) = args.find(')') else { break };
        let inner = &args[..close];
        match inner.rsplit_once(',').map(|(head, n)| (head, n.trim().parse::<i64>())) {
            Some((head, Ok(n))) => out.push_str(&format!("SPLIT_INDEX({head}, {})", n - 1)),
            _ => out.push_str(&rest[i..i + "split_part(".len() + close + 1]),
        }
        rest = &args[close + 1..];
    }
    out.push_str(rest);
    out
}

/// Flink's message in a failed command's error (not the command echoed).
fn flink_message(e: &anyhow::Error) -> String {
    let text = format!("{e:#}");
    let message = text.split_once(": ERROR ").map_or(text.as_str(), |(_, m)| m);
    message.split(" (cause: ").next().unwrap_or(message).trim().to_string()
}

/// A Flink run of `sql` (id `id`), timed over the rows of `tables`.
async fn flink_run(
    jvm: &mut Jvm,
    id: &str,
    sql: &str,
    tables: &[&str],
    events: u64,
    model: TimeModel,
) -> Result<FlinkRun> {
    let command = format!(
        "nexmark {id} {events} {} {} {}",
        model.event_rate.max(1),
        model.watermark_delay_s,
        one_line(&flink_dialect(sql))
    );
    let mut run = jvm.measured(&command, events).await?;
    // RESULT counts global events; the rate counts the rows read, as Sluice's.
    run.rows = rows_read(tables, events);
    Ok(run)
}

/// A Sluice run of `name` (a query file, or a generator-only run: `sql`
/// straight into a blackhole).
#[allow(clippy::too_many_arguments)]
async fn sluice_run(
    binary: &Path,
    dir: &Path,
    name: &str,
    sql: &str,
    p: u32,
    events: u64,
    model: TimeModel,
    rows: u64,
) -> Result<Value> {
    let b0 = busy();
    let started = Instant::now();
    let s = if name.starts_with("gen_") {
        generator_sql(binary, sql, p, events, model).await?
    } else {
        throughput_checkpointed(binary, dir, name, p, StreamSetup::unpaced(events, model), Some("off")).await?
    };
    let wall = started.elapsed().as_secs_f64();
    ensure!(
        s.rows_in == rows,
        "Sluice read {} rows for {name}, Flink's tables hold {rows}",
        s.rows_in
    );
    Ok(json!({
        "rows": s.rows_in, "rows_per_s": s.rows_per_s(), "wall_s": s.wall_s, "cpu_s": s.cpu_s,
        "rows_out": s.rows_out, "peak_rss_mib": s.peak_rss_bytes as f64 / (1 << 20) as f64,
        "state_rows_peak": s.state_rows_peak,
        "other_cores": other_cores(b0, busy(), s.cpu_s, wall),
    }))
}

/// `sql` alone into a blackhole, checkpoints off (a generator-only run).
async fn generator_sql(
    binary: &Path,
    sql: &str,
    p: u32,
    events: u64,
    model: TimeModel,
) -> Result<crate::server::RunStats> {
    if let Some(table) = sql.strip_prefix("SELECT * FROM ") {
        return generator_only(binary, table, p, events, model, Some("off")).await;
    }
    let server = Server::start(binary).await?;
    create_streams(&server, p, StreamSetup::unpaced(events, model)).await?;
    server.exec("SET checkpoint_interval = 'off'").await?;
    run_sink(&server, "generator", "connector = 'blackhole'", sql).await
}

/// The table and the columns (in the table's order) of each source `sql`
/// reads — a table read twice is listed twice, as its generator runs twice:
/// the projection Sluice's planner pushes into its sources (EXPLAIN's
/// source rows list the columns left unread), which Flink's source is
/// given too.
async fn read_columns(binary: &Path, p: u32, model: TimeModel, sql: &str) -> Result<Vec<(String, Vec<String>)>> {
    let server = Server::start(binary).await?;
    create_streams(&server, p, StreamSetup::unpaced(1, model)).await?;
    let mut read = Vec::new();
    for row in server.rows(&format!("EXPLAIN {sql}")).await? {
        if row.get(2).map(String::as_str) != Some("source") {
            continue;
        }
        let detail = &row[4];
        let table = detail.split(' ').next().unwrap_or_default().to_string();
        let unread: Vec<&str> = detail
            .split_once(", unread ")
            .map(|(_, u)| u.split(", ").collect())
            .unwrap_or_default();
        let schema = nexmark_schema(NexmarkTable::parse(&table)?);
        let mut columns: Vec<String> = schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .filter(|c| !unread.contains(&c.as_str()))
            .collect();
        if columns.is_empty() {
            // A count of rows reads no column; a generator run needs one.
            columns.push(schema.field(0).name().clone());
        }
        read.push((table, columns));
    }
    ensure!(!read.is_empty(), "EXPLAIN {sql}: no source");
    Ok(read)
}

/// A query's engine share on one side (`"sluice"`, `"flink"`): its rows
/// over its time less its generators' (each source's rows at the median
/// rate of the generator of the columns it reads). `None` when the query
/// takes under a tenth more than its generators alone: the generator's
/// cost is all that was measured.
fn engine_share(query: &Value, baselines: &[&Value], side: &str) -> Option<f64> {
    let median = |v: &Value| v[side]["median"].as_f64().filter(|r| *r > 0.0);
    let rows = query["rows"].as_f64()?;
    let t_query = rows / median(query)?;
    let mut t_gen = 0.0;
    for b in baselines {
        t_gen += b["rows"].as_f64()? / median(b)?;
    }
    let engine = t_query - t_gen;
    (engine > 0.1 * t_query).then(|| rows / engine)
}

/// Flink and Sluice over `queries` (names of `benches/nexmark/*.sql`), and
/// the generator alone over each table they read, at `events` global events
/// a run on both engines.
#[allow(clippy::too_many_arguments)]
pub async fn side_by_side(
    binary: &Path,
    root: &Path,
    flink_dir: &Path,
    out: &Path,
    p: u32,
    queries: &[String],
    runs: usize,
    events: u64,
    model: TimeModel,
) -> Result<Value> {
    let dir = root.join("benches/nexmark");
    let runs = runs.max(1);
    std::fs::create_dir_all(out)?;
    let driver = build_driver(flink_dir)?;
    let started = Instant::now();
    // (name, SQL, tables): the generator-only runs first, then the queries.
    let mut work: Vec<(String, String, Vec<&'static str>)> = Vec::new();
    let mut texts = Vec::new();
    for q in queries.iter().filter(|q| !q.is_empty()) {
        let (_, sql) = read_query(&dir, q)?;
        texts.push((q.clone(), sql));
    }
    for table in ["bid", "auction", "person"] {
        if texts.iter().any(|(_, sql)| tables_of(sql).contains(&table)) {
            work.push((format!("gen_{table}"), format!("SELECT * FROM {table}"), vec![table]));
        }
    }
    // Each query's generators of the columns it reads (shared by queries
    // reading the same ones): query → their names.
    let mut generators: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (q, sql) in &texts {
        for (table, columns) in read_columns(binary, p, model, sql).await? {
            let gen_sql = format!("SELECT {} FROM {table}", columns.join(", "));
            let name = match work.iter().find(|(_, s, _)| *s == gen_sql) {
                Some((name, _, _)) => name.clone(),
                None => {
                    let name = format!("gen_{table}_{q}");
                    let tables = tables_of(&gen_sql);
                    work.push((name.clone(), gen_sql, tables));
                    name
                }
            };
            generators.entry(q.clone()).or_default().push(name);
        }
    }
    for (q, sql) in texts {
        let tables = tables_of(&sql);
        work.push((q, sql, tables));
    }
    let mut results = Vec::new();
    let mut jvm_info = (BTreeMap::new(), BTreeMap::new());
    for (name, sql, tables) in &work {
        let rows = rows_read(tables, events);
        let warmup = (events / 4).max(50);
        eprintln!("  Flink {name}: a JVM, warm-up over {warmup} events, then {runs} × (Flink, Sluice) over {events}");
        let jvm_started = Instant::now();
        let mut jvm = Jvm::start(&driver, p, out.join(format!("{name}.jvm.log"))).await?;
        jvm_info = (jvm.ready.clone(), jvm.config.clone());
        let mut flink_error = None;
        let mut f_runs = Vec::new();
        let mut s_runs = Vec::new();
        match flink_run(&mut jvm, name, sql, tables, warmup, model).await {
            Ok(w) => eprintln!("    warm-up: {:.0} rows/s (net {:.1} s)", w.rows_per_s(), w.net_s),
            Err(e) => {
                eprintln!("    Flink refuses {name}: {}", flink_message(&e));
                flink_error = Some(flink_message(&e));
            }
        }
        for r in 1..=runs {
            let mut line = format!("    run {r}:");
            if flink_error.is_none() {
                match flink_run(&mut jvm, name, sql, tables, events, model).await {
                    Ok(f) => {
                        let _ = write!(line, " Flink {:.0} rows/s (net {:.1} s),", f.rows_per_s(), f.net_s);
                        f_runs.push(f.json());
                    }
                    // Out of memory, say: no Flink figure for the query.
                    Err(e) => {
                        let _ = write!(line, " Flink failed: {},", flink_message(&e));
                        flink_error = Some(format!("run {r}: {}", flink_message(&e)));
                        f_runs.clear();
                    }
                }
            }
            let s = sluice_run(binary, &dir, name, sql, p, events, model, rows).await?;
            let _ = write!(
                line,
                " Sluice {:.0} rows/s ({:.1} s)",
                s["rows_per_s"].as_f64().unwrap_or(0.0),
                s["wall_s"].as_f64().unwrap_or(0.0)
            );
            eprintln!("{line}");
            s_runs.push(s);
        }
        let flink_peak_rss_mib = match jvm.quit().await {
            Ok(whole) => whole.peak_rss_bytes as f64 / (1 << 20) as f64,
            Err(e) if flink_error.is_some() => {
                eprintln!("    (the JVM after the failure: {e:#})");
                0.0
            }
            Err(e) => return Err(e),
        };
        let flink = summarized(f_runs);
        let sluice = summarized(s_runs);
        let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
        let ratio = if flink_error.is_none() {
            json!({
                "median": f(&sluice, "median") / f(&flink, "median").max(1e-9),
                "min": f(&sluice, "min") / f(&flink, "max").max(1e-9),
                "max": f(&sluice, "max") / f(&flink, "min").max(1e-9),
            })
        } else {
            Value::Null
        };
        results.push(json!({
            "query": name, "sql": sql, "tables": tables, "events": events, "rows": rows,
            "flink_warmup_events": warmup, "flink": flink, "sluice": sluice, "ratio": ratio,
            "flink_error": flink_error,
            "flink_peak_rss_mib": flink_peak_rss_mib,
            "flink_jvm_wall_s": jvm_started.elapsed().as_secs_f64(),
        }));
        crate::partial::write_partial(out, &json!({ "events": events, "runs": runs, "queries": results }))?;
    }
    // Each query's engine share beside its raw ratio.
    let by_name: BTreeMap<String, Value> = results
        .iter()
        .map(|r| (r["query"].as_str().unwrap_or("").to_string(), r.clone()))
        .collect();
    for r in results.iter_mut() {
        let Some(names) = generators.get(r["query"].as_str().unwrap_or("")) else {
            continue;
        };
        let baselines: Vec<&Value> = names.iter().filter_map(|n| by_name.get(n)).collect();
        let sluice = engine_share(r, &baselines, "sluice");
        let flink = engine_share(r, &baselines, "flink");
        r["generators"] = json!(names);
        r["engine_share"] = json!({
            "sluice": sluice, "flink": flink,
            "ratio": sluice.zip(flink).map(|(s, f)| s / f),
        });
    }
    let (ready, config) = jvm_info;
    Ok(json!({
        "parallelism": p, "runs": runs, "events": events,
        "event_rate": model.event_rate, "watermark_delay_s": model.watermark_delay_s,
        "flink_version": ready.get("flink"), "java_version": ready.get("java"),
        "jvm_flags": driver.flags.iter().filter(|f| !f.starts_with("-Dlog4j")).collect::<Vec<_>>(),
        "jvm_module_flags": JVM_MODULE_FLAGS,
        "flink_config": config.iter().map(|(k, v)| (k.clone(), json!(v.replace('_', " ")))).collect::<serde_json::Map<_, _>>(),
        "queries": results,
        "wall_s": started.elapsed().as_secs_f64(),
    }))
}

/// "median (min–max)" of a summarized side, or what stands in for it.
fn cell(side: &Value, error: &Value) -> String {
    if let Some(e) = error.as_str() {
        return if e.starts_with("run ") { "failed" } else { "refused" }.into();
    }
    let f = |k: &str| side[k].as_f64().unwrap_or(0.0);
    format!("{} ({}–{})", si(f("median")), si(f("min")), si(f("max")))
}

/// The report's section on `v`, [`side_by_side`]'s result.
pub fn markdown(v: &Value) -> String {
    let mut md = String::from("## Flink side by side over the Nexmark queries\n\n");
    let Some(queries) = v["queries"].as_array().filter(|q| !q.is_empty()) else {
        md.push_str("Not run.\n");
        return md;
    };
    let s = |v: &Value| v.as_str().unwrap_or("?").to_string();
    let durations = |side: &str, key: &str| -> (f64, f64) {
        let d: Vec<f64> = queries
            .iter()
            .flat_map(|q| q[side]["runs"].as_array().into_iter().flatten())
            .filter_map(|r| r[key].as_f64())
            .collect();
        (
            d.iter().copied().fold(f64::INFINITY, f64::min),
            d.iter().copied().fold(0.0, f64::max),
        )
    };
    let (f_lo, f_hi) = durations("flink", "net_s");
    let (s_lo, s_hi) = durations("sluice", "wall_s");
    let config: Vec<String> = v["flink_config"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, val)| format!("`{k}: {}`", s(val)))
        .collect();
    let _ = write!(
        md,
        "Apache Flink {flink} (Java {java}, a local MiniCluster, `benches/flink/SluicePeer.java`) and \
         Sluice over the same rows: Flink's `person`, `auction` and `bid` are `benches/flink/NexmarkSource.java`, \
         Sluice's Nexmark generator ported to Java (equal value for value: `crates/sluice-bench/tests/nexmark_java.rs`), \
         making, like Sluice's, only the columns a query reads. {events} global events a run on both engines, event \
         time at {rate} events/s, watermarks {delay} s behind; the query files' SQL with their `SET` lines (Sluice's \
         state limits) left out for Flink; blackhole sinks; checkpoints off on both; parallelism {p}. Flink: {config} \
         (mini-batch on for the queries with state), heap `{flags}`. One JVM per query, warmed by one unmeasured run \
         of a quarter of the events, then {runs} Flink runs each followed by a Sluice run. Rates are the rows the \
         query's tables hold over the run: Flink's net job runtime ({f_lo:.1}–{f_hi:.1} s), Sluice's wall time from \
         `CREATE SINK` ({s_lo:.1}–{s_hi:.1} s). Median (min–max) of {runs}; the ratio's range is Sluice's slowest \
         over Flink's fastest to the reverse. `gen_<table>` rows are the generator alone (`SELECT * FROM <table>`), \
         `gen_<table>_<query>` the generator of only the columns the query reads (EXPLAIN's projection). A query's \
         *engine share* is its rows over its median run time less its generators' (each source's rows at its \
         generator's median rate): the engine's own rate, the generator's cost taken out; \"≈ generator\" when the \
         query takes under a tenth more than its generators alone.\n\n",
        flink = s(&v["flink_version"]),
        java = s(&v["java_version"]),
        events = si(v["events"].as_f64().unwrap_or(0.0)),
        rate = si(v["event_rate"].as_f64().unwrap_or(0.0)),
        delay = v["watermark_delay_s"],
        p = v["parallelism"],
        config = config.join(", "),
        flags = v["jvm_flags"]
            .as_array()
            .into_iter()
            .flatten()
            .map(s)
            .collect::<Vec<_>>()
            .join(" "),
        runs = v["runs"],
    );
    md.push_str(
        "| query | Sluice rows/s | Flink rows/s | ratio | engine share: Sluice / Flink | engine-share ratio | Sluice peak RSS | Flink JVM peak RSS |\n|---|---|---|---|---|---|---|---|\n",
    );
    for q in queries {
        let f = |k: &str| q[k].as_f64().unwrap_or(0.0);
        let ratio = match &q["ratio"] {
            Value::Null => "–".to_string(),
            r => format!(
                "{:.1}× ({:.1}–{:.1})",
                r["median"].as_f64().unwrap_or(0.0),
                r["min"].as_f64().unwrap_or(0.0),
                r["max"].as_f64().unwrap_or(0.0)
            ),
        };
        let rss: Vec<f64> = q["sluice"]["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["peak_rss_mib"].as_f64())
            .collect();
        let share = |side: &str| match q["engine_share"][side].as_f64() {
            Some(r) => si(r),
            None if q["engine_share"].is_object() => "≈ generator".to_string(),
            None => "–".to_string(),
        };
        let share_ratio = q["engine_share"]["ratio"]
            .as_f64()
            .map_or("–".to_string(), |r| format!("{r:.1}×"));
        let _ = writeln!(
            md,
            "| {} | {} | {} | {ratio} | {} / {} | {share_ratio} | {:.0} MiB | {:.1} GiB |",
            s(&q["query"]),
            cell(&q["sluice"], &Value::Null),
            cell(&q["flink"], &q["flink_error"]),
            share("sluice"),
            share("flink"),
            rss.iter().copied().fold(0.0, f64::max),
            f("flink_peak_rss_mib") / 1024.0
        );
    }
    for q in queries.iter().filter(|q| q["flink_error"].is_string()) {
        let _ = writeln!(md, "\n{}: Flink's error: `{}`", s(&q["query"]), s(&q["flink_error"]));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flinks_dialect_quotes_its_reserved_words_and_counts_characters_its_way() {
        assert_eq!(
            flink_dialect("SELECT length(extra) - LENGTH(replace(x, 'c', '')) AS day, char_length(y) AS minute"),
            "SELECT CHAR_LENGTH(extra) - CHAR_LENGTH(replace(x, 'c', '')) AS `day`, char_length(y) AS `minute`"
        );
        assert_eq!(flink_dialect("SELECT auction FROM bid"), "SELECT auction FROM bid");
        assert_eq!(
            flink_dialect(
                "SELECT count(*) FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) GROUP BY x"
            ),
            "SELECT count(*) FROM HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND) GROUP BY x"
        );
        assert_eq!(
            flink_dialect(
                "FROM tumble(person, date_time, INTERVAL '10' SECOND) JOIN (SELECT max(p) FROM TUMBLE(TABLE bid, DESCRIPTOR(t), s))"
            ),
            "FROM tumble(TABLE person, DESCRIPTOR(date_time), INTERVAL '10' SECOND) JOIN (SELECT max(p) FROM TUMBLE(TABLE bid, DESCRIPTOR(t), s))"
        );
        assert_eq!(
            flink_dialect("SELECT split_part(url, '/', 4) AS dir1, SPLIT_PART(url,'/',6) FROM bid"),
            "SELECT SPLIT_INDEX(url, '/', 3) AS dir1, SPLIT_INDEX(url,'/', 5) FROM bid"
        );
    }

    #[test]
    fn an_engine_share_takes_the_generators_time_out() {
        let side = |median: f64| json!({ "median": median });
        // 1000 rows in 10 s; its generators take 2 s (bids) and 3 s
        // (auctions) of it: the engine's own 5 s → 200 rows/s.
        let query = json!({ "rows": 1000.0, "sluice": side(100.0), "flink": side(50.0) });
        let bids = json!({ "rows": 400.0, "sluice": side(200.0), "flink": side(100.0) });
        let auctions = json!({ "rows": 600.0, "sluice": side(200.0), "flink": side(50.0) });
        assert_eq!(engine_share(&query, &[&bids, &auctions], "sluice"), Some(200.0));
        // Flink: 20 s in all, 4 s + 12 s generating → 250 rows/s.
        assert_eq!(engine_share(&query, &[&bids, &auctions], "flink"), Some(250.0));
        // Within a tenth of the generators' time (or faster): no share.
        let close = json!({ "rows": 1000.0, "sluice": side(1000.0 / 5.4) });
        assert_eq!(engine_share(&close, &[&bids, &auctions], "sluice"), None);
        let faster = json!({ "rows": 1000.0, "sluice": side(500.0) });
        assert_eq!(engine_share(&faster, &[&bids, &auctions], "sluice"), None);
        // A side that did not run has none.
        assert_eq!(engine_share(&query, &[&bids, &json!({ "rows": 600.0 })], "flink"), None);
    }

    #[test]
    fn table_rows_count_each_tables_share_of_the_events() {
        // Counted one event at a time, independently of the arithmetic.
        for events in [0u64, 1, 2, 4, 5, 49, 50, 51, 53, 54, 99, 100, 1234] {
            let count = |range: std::ops::Range<u64>| (0..events).filter(|n| range.contains(&(n % 50))).count() as u64;
            assert_eq!(table_rows("person", events), count(0..1), "{events}");
            assert_eq!(table_rows("auction", events), count(1..4), "{events}");
            assert_eq!(table_rows("bid", events), count(4..50), "{events}");
        }
    }
}
