//! The Grafana dashboard against the series `/metrics` exports.

use serde_json::Value;
use std::collections::BTreeSet;

/// The oldest dashboard schema the file may declare (Grafana 9's).
const SCHEMA_VERSION_MIN: u64 = 36;

/// What an operator of a cluster looks for (issue 24), with a series that
/// shows it: the dashboard must use each.
const REQUIRED: [(&str, &str); 21] = [
    ("pipeline rows in", "sluice_pipeline_rows_in_total"),
    ("pipeline rows out", "sluice_pipeline_rows_out_total"),
    ("per-task rows by worker", "sluice_task_rows_out_total"),
    ("queued rows", "sluice_task_queued_rows"),
    ("backpressure share", "sluice_task_backpressure_seconds_total"),
    ("busy share", "sluice_task_busy_seconds_total"),
    ("watermark lag", "sluice_task_watermark_lag_seconds"),
    ("late rows", "sluice_task_late_rows_total"),
    ("checkpoint duration", "sluice_checkpoint_duration_seconds"),
    ("checkpoint bytes", "sluice_checkpoint_bytes"),
    ("checkpoint alignment", "sluice_checkpoint_alignment_seconds"),
    (
        "barrier alignment per task",
        "sluice_task_checkpoint_alignment_seconds_total",
    ),
    ("state bytes", "sluice_task_state_bytes"),
    ("worker slots", "sluice_worker_slots"),
    ("worker used slots", "sluice_worker_used_slots"),
    ("data-plane bytes", "sluice_worker_data_bytes_sent_total"),
    ("credit wait share", "sluice_worker_credit_wait_seconds_total"),
    ("worker RSS", "sluice_worker_resident_memory_bytes"),
    ("worker CPU", "sluice_worker_cpu_seconds_total"),
    ("process RSS", "sluice_process_resident_memory_bytes"),
    ("process CPU", "sluice_process_cpu_seconds_total"),
];

/// The metric names `metrics_export.rs` writes: its string literals that
/// start with `sluice_`.
pub fn exported_metrics(source: &str) -> BTreeSet<String> {
    let names: BTreeSet<String> = source
        .split("\"sluice_")
        .skip(1)
        .filter_map(|rest| rest.split_once('"'))
        .map(|(name, _)| format!("sluice_{name}"))
        .filter(|name| {
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
        .collect();
    assert!(names.len() >= REQUIRED.len(), "too few metric names found: {names:?}");
    names
}

/// `sluice_…` identifiers in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("sluice_") {
        let preceded = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if !preceded {
            names.push(tail[..len].to_string());
        }
        rest = &tail[len..];
    }
    names
}

/// Every panel, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().into_iter().flatten() {
        out.push(p);
        out.extend(p["panels"].as_array().into_iter().flatten());
    }
    out
}

/// Schema version, a Prometheus datasource variable every query uses, only
/// exported series, every required one shown, unique panel ids.
pub fn check_dashboard(dashboard: &Value, exported: &BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    let schema = dashboard["schemaVersion"].as_u64().unwrap_or(0);
    if schema < SCHEMA_VERSION_MIN {
        problems.push(format!("schemaVersion {schema} is under {SCHEMA_VERSION_MIN}"));
    }
    let variables = dashboard["templating"]["list"].as_array().cloned().unwrap_or_default();
    let Some(source) = variables
        .iter()
        .find(|v| v["type"] == "datasource" && v["query"] == "prometheus")
    else {
        return vec!["no Prometheus datasource variable in templating".into()];
    };
    let uses_source = |v: &Value| {
        let uid = v["datasource"]["uid"].as_str().unwrap_or_default();
        let name = source["name"].as_str().unwrap_or_default();
        uid == format!("${{{name}}}") || uid == format!("${name}")
    };
    let mut queries = Vec::new();
    let mut ids = BTreeSet::new();
    for p in panels(dashboard) {
        let title = p["title"].as_str().unwrap_or_default();
        if !ids.insert(p["id"].as_u64()) {
            problems.push(format!("panel {title:?}: id {} is not unique", p["id"]));
        }
        if p["type"] == "row" {
            continue;
        }
        if !uses_source(p) {
            problems.push(format!("panel {title:?}: datasource is not the datasource variable"));
        }
        for t in p["targets"].as_array().into_iter().flatten() {
            if t.get("datasource").is_some() && !uses_source(t) {
                problems.push(format!("panel {title:?}: a target's datasource is not the variable"));
            }
            queries.push((title.to_string(), t["expr"].as_str().unwrap_or_default().to_string()));
        }
    }
    for v in variables.iter().filter(|v| v["type"] == "query") {
        if !uses_source(v) {
            problems.push(format!(
                "variable {}: datasource is not the datasource variable",
                v["name"]
            ));
        }
        queries.push((
            format!("variable {}", v["name"]),
            v["definition"].as_str().unwrap_or_default().into(),
        ));
    }
    let mut used = BTreeSet::new();
    for (title, expr) in &queries {
        if expr.is_empty() {
            problems.push(format!("{title}: a query without expr"));
        }
        for name in metric_names(expr) {
            if !exported.contains(&name) {
                problems.push(format!("{title}: {name} is not exported by metrics_export.rs"));
            }
            used.insert(name);
        }
    }
    for (what, metric) in REQUIRED {
        if !used.contains(metric) {
            problems.push(format!("no panel shows {what} ({metric})"));
        }
    }
    problems
}

#[test]
fn metric_names_are_found_in_promql() {
    assert_eq!(
        metric_names("sum by (w) (rate(sluice_a_total{x=\"sluice_b\"}[1m])) / my_sluice_c + sluice_d"),
        ["sluice_a_total", "sluice_b", "sluice_d"]
    );
}
