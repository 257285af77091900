//! The results as JSON, a Markdown table and an SVG bar chart.

use anyhow::Result;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;

use crate::units::si;

/// Targets of issue 6: (query, events/s).
pub fn target(q: &str) -> Option<f64> {
    match q {
        "q0" | "q1" | "q2" => Some(5e6),
        "q5" | "q5_full" | "q7" => Some(1e6),
        "q3" | "q8" => Some(5e5),
        _ => None,
    }
}

pub fn utc_now() -> String {
    let out = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output();
    out.ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// CPU model, cores, memory, kernel, and the load when the run started.
pub fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let cores = cpuinfo.lines().filter(|l| l.starts_with("processor")).count();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kb: f64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    serde_json::json!({
        "cpu": model, "cores": cores, "memory_gib": (mem_kb / 1048576.0 * 10.0).round() / 10.0,
        "kernel": kernel.trim(), "loadavg_at_start": load.trim(),
    })
}

/// The three worst latency slots of a run, as "at 3.1 s: 89.9 ms".
fn worst_slots(slots: &Value) -> String {
    let worst: Vec<String> = slots
        .as_array()
        .into_iter()
        .flatten()
        .take(3)
        .map(|s| format!("{:.1}: {:.1}", f(&s["at_s"]), f(&s["max_ms"])))
        .collect();
    if worst.is_empty() {
        "–".into()
    } else {
        worst.join(", ")
    }
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

pub fn markdown(r: &Value) -> String {
    let mut md = String::new();
    let m = &r["machine"];
    let _ = writeln!(
        md,
        "Measured {} on {} ({} cores, {} GiB; load average at start {}), parallelism {}.\n",
        r["started_utc"].as_str().unwrap_or(""),
        m["cpu"].as_str().unwrap_or("?"),
        m["cores"],
        m["memory_gib"],
        m["loadavg_at_start"].as_str().unwrap_or("?"),
        r["parallelism"]
    );
    if let Some(qs) = r["nexmark"].as_object().filter(|qs| !qs.is_empty()) {
        let tm = &r["time_model"];
        let _ = writeln!(
            md,
            "Throughput: {} runs per query, each a fresh server over {} global events; event time advances {} (watermarks {} s behind); events/s is the median run (min–max). State: the rows the stateful operators held together at their peak (sampled every 250 ms), and the peak RSS per held row.\n",
            tm["runs"],
            si(f(&qs
                .values()
                .next()
                .map_or(Value::Null, |v| v["global_events"].clone()))),
            match tm["event_rate"].as_u64() {
                Some(0) | None => "10 000 events a second (the tests' fixed model)".to_string(),
                Some(rate) => format!(
                    "{} events a second ('event.rate', Flink Nexmark's first-event.rate = TPS)",
                    si(rate as f64)
                ),
            },
            tm["watermark_delay_s"],
        );
        let _ = writeln!(
            md,
            "| query | events/s median (min–max) | events/s per core | cores used | CPU s | peak RSS | state at peak: rows (by operator) | RSS per held row | generator-only events/s | target | met |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|");
        for (q, v) in qs {
            if v["events_per_s_median"].is_null() {
                continue;
            }
            let rate = f(&v["events_per_s_median"]);
            let (t, met) = match target(q) {
                Some(t) if rate >= t => (si(t), "yes".to_string()),
                Some(t) => (si(t), format!("no ({:.0} % of it)", rate / t * 100.0)),
                None => ("–".into(), "–".into()),
            };
            let rows = f(&v["state_rows_peak"]);
            let by_operator: Vec<String> = v["state"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|o| format!("{} {}", o["kind"].as_str().unwrap_or("?"), si(f(&o["rows_peak"]))))
                .collect();
            let per_row = if rows >= 1e5 {
                format!("{:.0} B", f(&v["peak_rss_mib"]) * (1 << 20) as f64 / rows)
            } else {
                "–".into()
            };
            let _ = writeln!(
                md,
                "| {q} | {} ({}–{}) | {} | {:.2} | {:.1} | {:.0} MiB | {} ({}) | {per_row} | {} | {t} | {met} |",
                si(rate),
                si(f(&v["events_per_s_min"])),
                si(f(&v["events_per_s_max"])),
                si(f(&v["events_per_cpu_s"])),
                f(&v["cores_used"]),
                f(&v["cpu_s"]),
                f(&v["peak_rss_mib"]),
                si(rows),
                by_operator.join(", "),
                si(f(&v["generator_only_events_per_s"])),
            );
        }
        let _ = writeln!(
            md,
            "\nEnd-to-end latency at a fixed input rate (by default half the measured rate; target p99 ≤ 10 ms):\n"
        );
        let _ = writeln!(
            md,
            "| query | paced events/s | measured from | warm-up (worst row in it) | rows measured | p50 | p99 | max | worst 100-ms slots (s after warm-up: ms) |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
        for (q, v) in qs {
            let l = &v["latency"];
            if l.is_null() {
                continue;
            }
            let _ = writeln!(
                md,
                "| {q} | {} | {} | {:.0} s ({:.1} ms) | {} | {:.1} ms | {:.1} ms | {:.1} ms | {} |",
                si(f(&l["events_per_s_paced"])),
                l["measured_from"].as_str().unwrap_or(""),
                f(&l["warmup_s"]),
                f(&l["warmup_max_ms"]),
                l["rows_measured"],
                f(&l["p50_ms"]),
                f(&l["p99_ms"]),
                f(&l["max_ms"]),
                worst_slots(&l["worst_slots"])
            );
        }
    }
    if let Some(qs) = r["checkpoint_overhead"].as_object().filter(|o| !o.is_empty()) {
        let paced = qs
            .values()
            .filter_map(|c| c["events_per_s_paced"].as_u64())
            .find(|r| *r > 0);
        let _ = writeln!(
            md,
            "\nCheckpoint cost: each query over a run sized to last about a minute {}, with checkpoints off, every 10 s and every 1 s ({} run(s) of each, alternated; events/s: median (min–max) of the runs; duration and size: over every checkpoint of every run, size being the bytes each checkpoint wrote; written in all: per run, median):\n",
            match paced {
                Some(r) => format!("paced at {} events/s", si(r as f64)),
                None => "at its median rate".to_string(),
            },
            qs.values()
                .filter_map(|c| c["runs"]["off"]["runs"].as_array().map(Vec::len))
                .max()
                .unwrap_or(1)
        );
        let _ = writeln!(
            md,
            "| query | checkpoints | events/s | vs off | wall s | cores | checkpoints taken | duration median / max | size median / max | written in all | state rows at peak | peak RSS |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|");
        for (q, c) in qs {
            let off = f(&c["runs"]["off"]["events_per_s_median"]);
            for interval in ["off", "10s", "1s"] {
                let v = &c["runs"][interval];
                let cps: Vec<&Value> = v["checkpoints_all"].as_array().into_iter().flatten().collect();
                let durations: Vec<f64> = cps.iter().map(|c| f(&c["duration_ms"])).collect();
                let sizes: Vec<f64> = cps.iter().map(|c| f(&c["size_bytes"])).collect();
                let (d50, _, dmax) = crate::nexmark::spread(&durations);
                let (s50, _, smax) = crate::nexmark::spread(&sizes);
                let written: Vec<f64> = v["checkpoint_bytes_written"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(f)
                    .collect();
                let taken: Vec<String> = v["checkpoints_taken"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|n| n.to_string())
                    .collect();
                let taken = taken.join(", ");
                let rate = f(&v["events_per_s_median"]);
                let spread = match (v.get("events_per_s_min"), v.get("events_per_s_max")) {
                    (Some(lo), Some(hi)) if f(lo) < f(hi) => format!(" ({}–{})", si(f(lo)), si(f(hi))),
                    _ => String::new(),
                };
                let _ = writeln!(
                    md,
                    "| {q} | {interval} | {}{spread} | {:+.0} % | {:.0} | {:.2} | {taken} | {} | {} | {} | {} | {:.0} MiB |",
                    si(rate),
                    (rate / off.max(1e-9) - 1.0) * 100.0,
                    f(&v["wall_s"]),
                    f(&v["cores_used"]),
                    if cps.is_empty() {
                        "–".into()
                    } else {
                        format!("{d50:.0} / {dmax:.0} ms")
                    },
                    if cps.is_empty() {
                        "–".into()
                    } else {
                        format!("{}B / {}B", si(s50), si(smax))
                    },
                    if cps.is_empty() {
                        "–".into()
                    } else {
                        format!("{}B", si(crate::nexmark::spread(&written).0))
                    },
                    si(f(&v["state_rows_peak"])),
                    f(&v["peak_rss_mib"]),
                );
            }
        }
    }
    if !r["alter"].is_null() {
        let a = &r["alter"];
        let s = &a["switch"];
        let _ = writeln!(
            md,
            "\nALTER PIPELINE on a q5-shaped pipeline at {} events/s (paced): {} switches of the filter above the window, {} s apart — statement time p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; state carried {} bytes (median stop checkpoint).",
            s["events_per_s_paced"],
            s["switches"],
            s["gap_s"],
            f(&s["p50_ms"]),
            f(&s["p99_ms"]),
            f(&s["max_ms"]),
            s["state_bytes_median"]
        );
        for step in a["rescale"].as_array().into_iter().flatten() {
            let _ = writeln!(
                md,
                "- SET PARALLELISM {}: {:.1} ms, state {} bytes",
                step["to"],
                f(&step["ms"]),
                step["state_bytes"]
            );
        }
    }
    if !r["q5_memory"].is_null() {
        let v = &r["q5_memory"];
        let samples: Vec<String> = v["rss_mib_samples"]
            .as_array()
            .map(|a| {
                let step = (a.len() / 8).max(1);
                a.iter()
                    .step_by(step)
                    .map(|s| format!("{:.0}s: {:.0}", f(&s[0]), f(&s[1])))
                    .collect()
            })
            .unwrap_or_default();
        let _ = writeln!(
            md,
            "\nq5 over {} events: {} events/s, peak RSS {:.0} MiB; RSS (MiB) over time: {}\n",
            v["global_events"],
            si(f(&v["events_per_s"])),
            f(&v["peak_rss_mib"]),
            samples.join(", ")
        );
    }
    cluster_markdown(&mut md, &r["cluster"]);
    let s = &r["sol"];
    if !s.is_null() {
        let _ = writeln!(
            md,
            "\nSOL message throughput ({} stages, {}-byte messages, random shuffle, parallelism {}): **{} messages/s** ({} per core, {:.2} cores; target 10 M/s).\n",
            s["stages"],
            s["message_bytes"],
            s["parallelism"],
            si(f(&s["messages_per_s"])),
            si(f(&s["messages_per_cpu_s"])),
            f(&s["cores_used"])
        );
    }
    if !r["flink"].is_null() {
        md.push('\n');
        md.push_str(&crate::flink::markdown(&r["flink"]));
        if !r["flink_nexmark"].is_null() {
            md.push('\n');
            md.push_str(&crate::flink_nexmark::markdown(&r["flink_nexmark"]));
        }
    }
    md
}

/// `lo–hi` of `key` over `runs[*][side]`, formatted by `fmt`.
fn range(runs: &[Value], side: &str, key: &str, fmt: impl Fn(f64) -> String) -> String {
    let values: Vec<f64> = runs.iter().filter_map(|r| r[side][key].as_f64()).collect();
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    match values.len() {
        0 => "–".into(),
        _ if fmt(lo) == fmt(hi) => fmt(lo),
        _ => format!("{}–{}", fmt(lo), fmt(hi)),
    }
}

/// The cluster section: throughput across two workers beside one process,
/// and kill -9 failover.
fn cluster_markdown(md: &mut String, c: &Value) {
    if c.is_null() {
        return;
    }
    let mut rows: Vec<(String, &Value, u64)> = Vec::new();
    for (q, v) in c["nexmark"].as_object().into_iter().flatten() {
        if let Some(why) = v["skipped"].as_str() {
            let _ = writeln!(md, "\nCluster, Nexmark {q}: not run across workers — {why}.");
            continue;
        }
        rows.push((format!("Nexmark {q}"), v, v["global_events"].as_u64().unwrap_or(0)));
    }
    if !c["sol"].is_null() {
        rows.push((
            "SOL-like (100-byte messages, hash by key, count)".into(),
            &c["sol"],
            c["sol"]["messages"].as_u64().unwrap_or(0),
        ));
    }
    if !rows.is_empty() {
        let _ = writeln!(
            md,
            "\nStages on two worker processes (pack placement, every row over the data plane) beside one process; \
             min–max over the runs; CPU summed over every process of the run (master and workers):\n"
        );
        let _ = writeln!(
            md,
            "| pipeline | runs | events | one process /s | two workers /s | CPU ns/event, one process | CPU ns/event, two workers | data plane bytes/event | payload GB/s | generator alone /s |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
        for (name, v, events) in rows {
            let runs = v["runs"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            let _ = writeln!(
                md,
                "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                runs.len(),
                si(events as f64),
                range(runs, "one_process", "events_per_s", si),
                range(runs, "two_workers", "events_per_s", si),
                range(runs, "one_process", "cpu_ns_per_event", |v| format!("{v:.0}")),
                range(runs, "two_workers", "cpu_ns_per_event", |v| format!("{v:.0}")),
                range(runs, "two_workers", "data_bytes_per_event", |v| format!("{v:.0}")),
                range(runs, "two_workers", "data_gb_per_s", |v| format!("{v:.2}")),
                range(runs, "generator_only", "events_per_s", si),
            );
        }
    }
    for key in ["failover", "freeze"] {
        let f_ = &c[key];
        if f_.is_null() {
            continue;
        }
        let runs = f_["runs"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        let _ = writeln!(
            md,
            "\n`{}` of a worker running tasks ({} runs; {} workers × {} slots, parallelism {}, paced {} events/s, \
             checkpoints every {} s, worker timeout {}): running again without it p50 {:.2} s, max {:.2} s; \
             sources reading again p50 {:.2} s, max {:.2} s. Per run (running / reading, s): {}\n",
            f_["fault"].as_str().unwrap_or("?"),
            runs.len(),
            f_["workers"],
            f_["slots_per_worker"],
            f_["parallelism"],
            si(f(&f_["events_per_s_paced"])),
            f_["checkpoint_interval_s"],
            f_["worker_timeout"].as_str().unwrap_or("?"),
            f(&f_["running_again_p50_s"]),
            f(&f_["running_again_max_s"]),
            f(&f_["reading_again_p50_s"]),
            f(&f_["reading_again_max_s"]),
            runs.iter()
                .map(|r| format!("{:.2} / {:.2}", f(&r["running_again_s"]), f(&r["reading_again_s"])))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

/// Horizontal bars: events/s per query (and Sluice vs Flink rows/s).
pub fn svg(r: &Value) -> String {
    let mut bars: Vec<(String, f64, &str)> = Vec::new();
    if let Some(qs) = r["nexmark"].as_object() {
        for (q, v) in qs.iter().filter(|(_, v)| !v["events_per_s_median"].is_null()) {
            bars.push((format!("nexmark {q}"), f(&v["events_per_s_median"]), "#2b6cb0"));
            bars.push((
                "  generator only".to_string(),
                f(&v["generator_only_events_per_s"]),
                "#a0aec0",
            ));
        }
    }
    if !r["sol"].is_null() {
        bars.push(("SOL messages".into(), f(&r["sol"]["messages_per_s"]), "#2f855a"));
    }
    if let Some(rows) = r["flink"]["queries"].as_array() {
        for v in rows {
            let q = v["query"].as_str().unwrap_or("");
            bars.push((format!("datagen {q} Sluice"), f(&v["sluice"]["median"]), "#2b6cb0"));
            bars.push((format!("datagen {q} Flink"), f(&v["flink"]["median"]), "#c05621"));
        }
    }
    let max = bars.iter().map(|b| b.1).fold(1.0, f64::max);
    let (label_w, bar_w, row_h) = (170.0, 560.0, 18.0);
    let height = 40.0 + row_h * bars.len() as f64;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <text x=\"4\" y=\"16\" font-size=\"13\">Throughput (events/s, log scale not used; {})</text>\n",
        label_w + bar_w + 90.0,
        r["started_utc"].as_str().unwrap_or("")
    );
    for (i, (label, v, color)) in bars.iter().enumerate() {
        let y = 28.0 + row_h * i as f64;
        let w = (v / max * bar_w).max(1.0);
        let _ = writeln!(
            s,
            "<text x=\"4\" y=\"{}\">{label}</text><rect x=\"{label_w}\" y=\"{y}\" width=\"{w:.1}\" height=\"{}\" fill=\"{color}\"/>\
             <text x=\"{}\" y=\"{}\">{}</text>",
            y + 12.0,
            row_h - 4.0,
            label_w + w + 4.0,
            y + 12.0,
            si(*v)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Writes the whole invocation's result (`latest.json`, `latest.md`,
/// `throughput.svg`) and removes the partial files it replaces
/// ([`crate::partial`]).
pub fn write(dir: &Path, r: &Value) -> Result<()> {
    std::fs::write(dir.join("latest.json"), serde_json::to_string_pretty(r)?)?;
    std::fs::write(dir.join("latest.md"), markdown(r))?;
    std::fs::write(dir.join("throughput.svg"), svg(r))?;
    crate::partial::remove(dir)?;
    crate::partial::remove(&dir.join("flink_nexmark"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partial::{PARTIAL, write_partial};

    /// What was measured so far stays on disk until the whole result
    /// replaces it.
    #[test]
    fn partial_results_stay_until_the_whole_result_is_written() {
        let dir = std::env::temp_dir().join(format!("sluice-bench-partial-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("flink_nexmark")).unwrap();
        write_partial(
            &dir,
            &serde_json::json!({ "nexmark": { "q0": { "events_per_s_median": 1.0 } } }),
        )
        .unwrap();
        write_partial(&dir.join("flink_nexmark"), &serde_json::json!({ "queries": [] })).unwrap();
        let kept: Value = serde_json::from_str(&std::fs::read_to_string(dir.join(PARTIAL)).unwrap()).unwrap();
        assert_eq!(kept["nexmark"]["q0"]["events_per_s_median"], 1.0);
        write(&dir, &serde_json::json!({})).unwrap();
        assert!(dir.join("latest.json").exists());
        assert!(!dir.join(PARTIAL).exists());
        assert!(!dir.join("flink_nexmark").join(PARTIAL).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The checkpoint table of the saved three-run result renders the rows
    /// the bench wrote for it when it ran (benches/results/checkpoints/
    /// q5-q7-three-runs.md).
    #[test]
    fn the_checkpoint_table_renders_the_saved_three_run_result() {
        let root = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../benches/results/checkpoints/q5-q7-three-runs"
        );
        let result: Value = serde_json::from_str(&std::fs::read_to_string(format!("{root}.json")).unwrap()).unwrap();
        let saved = std::fs::read_to_string(format!("{root}.md")).unwrap();
        let rendered = markdown(&result);
        let rows = |md: &str| -> Vec<String> {
            md.lines()
                .filter(|l| l.starts_with("| q5 |") || l.starts_with("| q7 |"))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(rows(&saved).len(), 6);
        assert_eq!(rows(&rendered), rows(&saved));
    }
}
