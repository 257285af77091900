//! The JSON views of the REST API: pipelines with rates and their DAGs,
//! streams with redacted options, the cluster. Plain functions from catalog
//! entries, live counters and metric history to `serde_json::Value`.

use crate::metrics_history::{PipelineHistory, Rates, Sample, current_rates, rate_series};
use crate::redact::{redact_options, redact_sql};
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use sluice_cluster::catalog::{PipelineDef, PipelineVersion};
use sluice_cluster::status::PipelineInfo;
use sluice_dataflow::deploy::PipelineRuntime;
use sluice_plan::catalog::StreamDef;
use sluice_plan::diff::DiffLine;
use sluice_plan::explain::explain_rows;
use sluice_plan::{OperatorSpec, PhysicalDag};
use std::collections::BTreeMap;

/// Points in a pipeline's sparkline (the last minute at one sample a second).
pub const SPARKLINE_POINTS_MAX: usize = 60;

/// Lag of `watermark_ms` behind `now_ms`; none before the first watermark
/// and none at the end of input (`i64::MAX`).
pub fn watermark_lag_ms(watermark_ms: Option<i64>, now_ms: i64) -> Option<i64> {
    watermark_ms
        .filter(|w| *w != i64::MAX && *w != i64::MIN)
        .map(|w| now_ms - w)
}

/// Pipeline-level rates at each sample time: rows in = what the sources
/// emit, rows out = what the sinks receive.
pub fn pipeline_series(history: &PipelineHistory) -> Vec<(i64, f64, f64)> {
    let mut by_time: BTreeMap<i64, (f64, f64)> = BTreeMap::new();
    for task in &history.tasks {
        for (t, r) in rate_series(&task.samples) {
            let entry = by_time.entry(t).or_default();
            match task.kind {
                "source" => entry.0 += r.rows_out_per_s,
                "sink" => entry.1 += r.rows_in_per_s,
                _ => {}
            }
        }
    }
    by_time.into_iter().map(|(t, (i, o))| (t, i, o)).collect()
}

/// Current pipeline-level rates (rows in/s, rows out/s).
fn pipeline_rates(history: Option<&PipelineHistory>) -> (f64, f64) {
    let Some(history) = history else { return (0.0, 0.0) };
    history.tasks.iter().fold((0.0, 0.0), |(i, o), task| {
        let r = current_rates(&task.samples);
        match task.kind {
            "source" => (i + r.rows_out_per_s, o),
            "sink" => (i, o + r.rows_in_per_s),
            _ => (i, o),
        }
    })
}

/// One pipeline in the list: status, version, counters, rates, lag, errors
/// and a sparkline of rows out/s.
pub fn pipeline_summary(
    info: &PipelineInfo,
    def: Option<&PipelineDef>,
    history: Option<&PipelineHistory>,
    now_ms: i64,
) -> Value {
    let (rows_in_per_s, rows_out_per_s) = pipeline_rates(history);
    let series = history.map(pipeline_series).unwrap_or_default();
    let spark_from = series.len().saturating_sub(SPARKLINE_POINTS_MAX);
    let sparkline: Vec<f64> = series[spark_from..].iter().map(|(_, _, o)| *o).collect();
    let sparkline_in: Vec<f64> = series[spark_from..].iter().map(|(_, i, _)| *i).collect();
    let errors = history.map_or(0, |h| h.errors.len());
    json!({
        "name": info.name,
        "id": info.id,
        "kind": info.kind,
        "state": info.state,
        "since_ms": info.since_ms,
        "version": def.map_or(1, |d| d.version()),
        // When the running version started (its CREATE or its ALTER).
        "changed_ms": def.map(|d| d.changed_ms.unwrap_or(d.created_ms)),
        "rows_in": info.rows_in,
        "rows_out": info.rows_out,
        "rows_in_per_s": rows_in_per_s,
        "rows_out_per_s": rows_out_per_s,
        "late_rows_dropped": info.late_rows_dropped,
        "records_malformed": info.records_malformed,
        "watermark_ms": info.watermark_ms,
        "watermark_lag_ms": watermark_lag_ms(info.watermark_ms, now_ms),
        "error": info.error,
        "condition": info.condition,
        "errors": errors,
        "restarts": info.restarts,
        "restored_from_checkpoint": info.restored_from,
        "checkpoints": info.checkpoints,
        "sql": redact_sql(&info.sql),
        "sparkline": { "rows_out_per_s": sparkline, "rows_in_per_s": sparkline_in },
    })
}

/// One operator of a version's diff: what happened to it and to its state.
/// Uids in their short form (8 hex digits, as `SHOW PIPELINE HISTORY`).
fn diff_line_view(line: &DiffLine) -> Value {
    json!({
        "operator": line.operator,
        "uid": line.uid.map(|u| u.short()),
        "old_uid": line.old_uid.map(|u| u.short()),
        "kind": line.kind,
        "change": line.change.name(),
        "state": line.state.name(),
        "parallelism": line.parallelism,
        "old_parallelism": line.old_parallelism,
        "detail": line.detail,
    })
}

/// One version of a pipeline: its SQL and the statement that made it
/// (secrets redacted in both; no statement for version 1, the CREATE),
/// since when it ran, and its diff from the version before it.
pub fn version_view(v: &PipelineVersion) -> Value {
    json!({
        "version": v.version,
        "sql": redact_sql(&v.sql),
        "created_ms": v.created_ms,
        "changed_by": v.changed_by.as_deref().map(redact_sql),
        "diff": v.diff.iter().map(diff_line_view).collect::<Vec<_>>(),
    })
}

/// One task instance: where it runs, live counters and rates from its
/// history.
fn instance_view(m: &sluice_dataflow::metrics::TaskMetrics, worker: Option<&str>, rates: Rates, now_ms: i64) -> Value {
    let s = Sample::read(m, now_ms);
    json!({
        "operator": m.operator.0,
        "instance": m.instance,
        "worker": worker,
        "kind": m.kind,
        "rows_in": s.rows_in,
        "rows_out": s.rows_out,
        "records_malformed": m.records_malformed.load(std::sync::atomic::Ordering::Relaxed),
        "condition": m.condition(),
        "late_rows_dropped": s.late_rows_dropped,
        "queued_rows": s.queued_rows,
        "backpressure_us": s.backpressure_us,
        "alignment_held_us": m.alignment_held_us.load(std::sync::atomic::Ordering::Relaxed),
        "state_groups": s.state_groups,
        "state_bytes": m.state_bytes.load(std::sync::atomic::Ordering::Relaxed),
        "checkpoint_alignment_us": m.checkpoint_alignment_us.load(std::sync::atomic::Ordering::Relaxed),
        "last_checkpoint_alignment_us": m.last_checkpoint_alignment_us.load(std::sync::atomic::Ordering::Relaxed),
        "watermark_ms": s.watermark_ms,
        "watermark_lag_ms": watermark_lag_ms(s.watermark_ms, now_ms),
        "rows_in_per_s": rates.rows_in_per_s,
        "rows_out_per_s": rates.rows_out_per_s,
        "backpressure_share": rates.backpressure_share,
        "busy_us": m.busy_us.load(std::sync::atomic::Ordering::Relaxed),
        "busy_share": rates.busy_share,
        "poll_max_us": m.poll_max_us.load(std::sync::atomic::Ordering::Relaxed),
    })
}

/// Every task instance of a running pipeline.
pub fn instance_views(runtime: &PipelineRuntime, history: Option<&PipelineHistory>, now_ms: i64) -> Vec<Value> {
    runtime
        .metrics
        .iter()
        .map(|m| {
            let rates = history
                .and_then(|h| {
                    h.tasks
                        .iter()
                        .find(|t| t.operator == m.operator.0 && t.instance == m.instance)
                })
                .map(|t| current_rates(&t.samples))
                .unwrap_or_default();
            let worker = runtime
                .placement
                .worker_of(m.operator, m.instance)
                .map(|w| w.0.as_str());
            instance_view(m, worker, rates, now_ms)
        })
        .collect()
}

/// Sums an operator's instances: counters and rates add up, the
/// backpressure and busy shares are means, the watermark is the lowest.
fn operator_metrics(instances: &[&Value], now_ms: i64) -> Value {
    let sum_u = |k: &str| instances.iter().filter_map(|i| i[k].as_u64()).sum::<u64>();
    let sum_f = |k: &str| instances.iter().filter_map(|i| i[k].as_f64()).sum::<f64>();
    let watermark = if instances.iter().all(|i| i["watermark_ms"].is_i64()) {
        instances.iter().filter_map(|i| i["watermark_ms"].as_i64()).min()
    } else {
        None
    };
    let n = instances.len().max(1) as f64;
    json!({
        "rows_in": sum_u("rows_in"),
        "rows_out": sum_u("rows_out"),
        "late_rows_dropped": sum_u("late_rows_dropped"),
        "queued_rows": sum_u("queued_rows"),
        "state_groups": sum_u("state_groups"),
        "rows_in_per_s": sum_f("rows_in_per_s"),
        "rows_out_per_s": sum_f("rows_out_per_s"),
        "backpressure_share": sum_f("backpressure_share") / n,
        "busy_share": sum_f("busy_share") / n,
        "watermark_ms": watermark,
        "watermark_lag_ms": watermark_lag_ms(watermark, now_ms),
    })
}

fn columns(op: &OperatorSpec) -> Vec<Value> {
    op.output_schema
        .fields()
        .iter()
        .map(|f| json!({ "name": f.name(), "type": crate::engine::pg_type_name(f.data_type()) }))
        .collect()
}

/// A DAG as a graph: operators (kind, parallelism, what they do, output
/// columns, and with `instances` their metrics) and edges with partitioning
/// (and whether the edge is chained: no channel, one task).
/// Connector options are not part of it (EXPLAIN's detail names only the
/// stream or target), so no secret can leak through it.
pub fn dag_view(dag: &PhysicalDag, instances: Option<&[Value]>, now_ms: i64) -> Value {
    let rows = explain_rows(dag);
    let operators: Vec<Value> = dag
        .operators
        .iter()
        .zip(rows)
        .map(|(op, row)| {
            let mut view = json!({
                "id": op.id.0,
                "uid": op.uid.to_string(),
                "kind": op.kind.name(),
                "parallelism": op.parallelism,
                "detail": row[4],
                "columns": columns(op),
            });
            if let Some(instances) = instances {
                let mine: Vec<&Value> = instances.iter().filter(|i| i["operator"] == op.id.0).collect();
                view["metrics"] = operator_metrics(&mine, now_ms);
                view["instances"] = Value::Array(mine.into_iter().cloned().collect());
            }
            view
        })
        .collect();
    let edges: Vec<Value> = dag
        .edges
        .iter()
        .map(|e| {
            let schema = dag
                .operator(e.from)
                .map(|o| o.output_schema.clone())
                .unwrap_or_else(sluice_plan::empty_schema);
            json!({
                "id": e.id.0,
                "from": e.from.0,
                "to": e.to.0,
                "partitioning": e.partitioning.describe(&schema),
                // The downstream operator runs in the upstream's task.
                "chained": dag.chained_into(e.to) == Some(e.from),
            })
        })
        .collect();
    json!({ "operators": operators, "edges": edges })
}

/// Per-operator and pipeline time series over the kept history.
pub fn history_view(history: Option<&PipelineHistory>) -> Value {
    let Some(history) = history else {
        return json!({ "interval_ms": 1000, "pipeline": {"t_ms": [], "rows_in_per_s": [], "rows_out_per_s": []}, "operators": [] });
    };
    let series = pipeline_series(history);
    let mut operator_ids: Vec<u32> = history.tasks.iter().map(|t| t.operator).collect();
    operator_ids.dedup();
    let operators: Vec<Value> = operator_ids
        .iter()
        .map(|id| {
            let tasks: Vec<_> = history.tasks.iter().filter(|t| t.operator == *id).collect();
            let mut by_time: BTreeMap<i64, (f64, f64, f64, u64, Option<i64>)> = BTreeMap::new();
            for task in &tasks {
                let samples: Vec<&Sample> = task.samples.iter().skip(1).collect();
                for ((t, r), s) in rate_series(&task.samples).into_iter().zip(samples) {
                    let e = by_time.entry(t).or_insert((0.0, 0.0, 0.0, 0, Some(i64::MAX)));
                    e.0 += r.rows_in_per_s;
                    e.1 += r.rows_out_per_s;
                    e.2 += r.backpressure_share / tasks.len() as f64;
                    e.3 += s.queued_rows;
                    e.4 = match (e.4, s.watermark_ms) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        _ => None,
                    };
                }
            }
            let points: Vec<_> = by_time.into_iter().collect();
            json!({
                "id": id,
                "kind": tasks[0].kind,
                "t_ms": points.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
                "rows_in_per_s": points.iter().map(|(_, p)| p.0).collect::<Vec<_>>(),
                "rows_out_per_s": points.iter().map(|(_, p)| p.1).collect::<Vec<_>>(),
                "backpressure_share": points.iter().map(|(_, p)| p.2).collect::<Vec<_>>(),
                "queued_rows": points.iter().map(|(_, p)| p.3).collect::<Vec<_>>(),
                "watermark_lag_ms": points.iter().map(|(t, p)| watermark_lag_ms(p.4, *t)).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "interval_ms": crate::metrics_history::SAMPLE_INTERVAL.as_millis() as u64,
        "pipeline": {
            "t_ms": series.iter().map(|s| s.0).collect::<Vec<_>>(),
            "rows_in_per_s": series.iter().map(|s| s.1).collect::<Vec<_>>(),
            "rows_out_per_s": series.iter().map(|s| s.2).collect::<Vec<_>>(),
        },
        "operators": operators,
    })
}

/// A stream: columns, event time, connector and its options (secrets redacted).
pub fn stream_view(s: &StreamDef) -> Value {
    let columns: Vec<Value> = s
        .schema
        .fields()
        .iter()
        .map(|f| json!({"name": f.name(), "type": crate::engine::pg_type_name(f.data_type()), "nullable": f.is_nullable()}))
        .collect();
    let event_time = s.event_time.as_ref().map(|e| {
        json!({
            "column": s.schema.fields().get(e.column).map(|f| f.name().clone()),
            "delay_ms": e.delay_ms,
            "from_upstream": e.from_upstream,
        })
    });
    json!({
        "name": s.name,
        "connector": s.connector,
        "options": redact_options(&s.options),
        "columns": columns,
        "event_time": event_time,
        "pipeline": s.pipeline,
    })
}

/// A JSON error body with `status`.
pub(crate) fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermark_lag_is_absent_before_the_first_watermark_and_at_the_end() {
        assert_eq!(watermark_lag_ms(Some(1_000), 3_500), Some(2_500));
        assert_eq!(watermark_lag_ms(None, 3_500), None);
        assert_eq!(watermark_lag_ms(Some(i64::MAX), 3_500), None);
    }

    #[test]
    fn operator_metrics_add_counters_and_average_backpressure() {
        let a = json!({"rows_in": 10, "rows_out": 5, "rows_in_per_s": 2.0, "rows_out_per_s": 1.0,
                       "backpressure_share": 0.5, "queued_rows": 3, "watermark_ms": 100});
        let b = json!({"rows_in": 30, "rows_out": 15, "rows_in_per_s": 4.0, "rows_out_per_s": 3.0,
                       "backpressure_share": 0.0, "queued_rows": 1, "watermark_ms": 50});
        let m = operator_metrics(&[&a, &b], 150);
        assert_eq!(
            (&m["rows_in"], &m["rows_out"], &m["queued_rows"]),
            (&json!(40), &json!(20), &json!(4))
        );
        assert_eq!(
            (m["rows_in_per_s"].as_f64(), m["backpressure_share"].as_f64()),
            (Some(6.0), Some(0.25))
        );
        assert_eq!((&m["watermark_ms"], &m["watermark_lag_ms"]), (&json!(50), &json!(100)));
        // One instance without a watermark holds the operator's back.
        let c = json!({"watermark_ms": null});
        assert_eq!(operator_metrics(&[&a, &c], 150)["watermark_ms"], Value::Null);
    }

    #[test]
    fn a_version_shows_its_statement_redacted_and_its_diff_with_short_uids() {
        use sluice_plan::diff::{Change, StateFate};
        use sluice_types::OperatorUid;
        let line = |change, state, uid: Option<u64>, old_uid: Option<u64>| DiffLine {
            change,
            state,
            kind: "sink".into(),
            uid: uid.map(OperatorUid),
            old_uid: old_uid.map(OperatorUid),
            operator: 4,
            parallelism: 1,
            old_parallelism: old_uid.map(|_| 1),
            detail: "same connector and options".into(),
        };
        let v = PipelineVersion {
            version: 2,
            sql: "CREATE SINK s WITH (connector = 'kafka', 'sasl.password' = 'hunter2') AS SELECT 1".into(),
            created_ms: 42,
            changed_by: Some("ALTER PIPELINE s AS SELECT * FROM users WHERE password = 'hunter2'".into()),
            diff: vec![
                line(
                    Change::Replaced,
                    StateFate::Moved,
                    Some(0x0123_4567_89ab_cdef),
                    Some(0xfedc_ba98_7654_3210),
                ),
                line(Change::Added, StateFate::Fresh, Some(0x1111_2222_3333_4444), None),
            ],
        };
        let view = version_view(&v);
        assert!(!view.to_string().contains("hunter2"), "{view}");
        assert!(
            view["changed_by"].as_str().unwrap().starts_with("ALTER PIPELINE s AS"),
            "{view}"
        );
        assert_eq!(
            view["diff"][0],
            json!({"operator": 4, "uid": "01234567", "old_uid": "fedcba98", "kind": "sink", "change": "replaced",
                   "state": "moved", "parallelism": 1, "old_parallelism": 1, "detail": "same connector and options"})
        );
        assert_eq!(
            (
                &view["diff"][1]["old_uid"],
                &view["diff"][1]["old_parallelism"],
                &view["diff"][1]["change"]
            ),
            (&Value::Null, &Value::Null, &json!("added"))
        );
        // Version 1 (the CREATE): no statement of its own, no diff.
        let first = version_view(&PipelineVersion {
            version: 1,
            changed_by: None,
            diff: vec![],
            ..v
        });
        assert_eq!((&first["changed_by"], &first["diff"]), (&Value::Null, &json!([])));
    }

    /// The properties of `components.schemas.<schema>` in the served
    /// OpenAPI document.
    fn documented(schema: &str) -> Vec<String> {
        let spec: Value = serde_json::from_str(include_str!("openapi.json")).expect("openapi.json is JSON");
        let mut keys: Vec<String> = spec["components"]["schemas"][schema]["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("{schema} has properties"))
            .keys()
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    fn keys(view: &Value) -> Vec<String> {
        let mut keys: Vec<String> = view.as_object().expect("an object").keys().cloned().collect();
        keys.sort();
        keys
    }

    #[test]
    fn the_openapi_document_describes_every_field_of_a_version_and_its_diff() {
        use sluice_plan::diff::{Change, StateFate};
        let v = PipelineVersion {
            version: 2,
            sql: "CREATE SINK s AS SELECT 1".into(),
            created_ms: 1,
            changed_by: Some("ALTER PIPELINE s AS SELECT 2".into()),
            diff: vec![DiffLine {
                change: Change::Added,
                state: StateFate::Fresh,
                kind: "project".into(),
                uid: None,
                old_uid: None,
                operator: 1,
                parallelism: 1,
                old_parallelism: None,
                detail: String::new(),
            }],
        };
        let view = version_view(&v);
        assert_eq!(keys(&view), documented("PipelineVersion"));
        assert_eq!(keys(&view["diff"][0]), documented("DiffLine"));
    }
}
