//! Operator uids of planned queries: the same SQL planned twice gets the
//! same uids; a changed operator changes its uid and those downstream of
//! it, and nothing upstream.

use super::*;
use crate::statement::{SluiceStatement, parse_statements};
use arrow::datatypes::TimeUnit;
use sluice_plan::OperatorKind;
use sluice_types::OperatorUid;

pub(super) struct OneStream;

impl StreamCatalog for OneStream {
    /// A memory log: one reader, as the server's catalog answers.
    fn source_readers_max(&self, _def: &StreamDef) -> Option<usize> {
        Some(1)
    }

    /// As the server's registry answers for the sinks these tests use.
    fn sink_accepts_changelog(&self, connector: &str, _options: &BTreeMap<String, String>) -> bool {
        matches!(connector, "client" | "file" | "blackhole")
    }

    fn stream(&self, name: &str) -> Option<StreamDef> {
        (name == "s").then(|| StreamDef {
            name: "s".into(),
            schema: Arc::new(Schema::new(vec![
                Field::new("k", DataType::Utf8, true),
                Field::new("v", DataType::Int64, true),
                Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
            ])),
            event_time: Some(sluice_plan::catalog::EventTime {
                column: 2,
                delay_ms: 1_000,
                from_upstream: false,
            }),
            connector: "memory".into(),
            options: BTreeMap::new(),
            pipeline: None,
            computed: vec![],
        })
    }
}

pub(super) async fn plan(sql: &str, parallelism: u32) -> PhysicalDag {
    let query = match parse_statements(&format!("EXPLAIN {sql}")).unwrap().remove(0) {
        SluiceStatement::Explain(q) => q,
        _ => unreachable!("an EXPLAIN"),
    };
    let settings = PlannerSettings {
        parallelism,
        ..PlannerSettings::default()
    };
    Planner::new(&OneStream, settings)
        .plan(&query, sink_spec("client", BTreeMap::new()))
        .await
        .unwrap()
        .dag
}

fn uids(dag: &PhysicalDag) -> Vec<(&'static str, OperatorUid)> {
    dag.operators.iter().map(|o| (o.kind.name(), o.uid)).collect()
}

pub(super) const COUNTS: &str = "SELECT window_start, k, count(*) AS n FROM TUMBLE(s, ts, INTERVAL '10' SECOND) \
                      WHERE v > 1 GROUP BY window_start, window_end, k";

#[tokio::test]
async fn the_same_query_planned_twice_has_the_same_uids_at_any_parallelism() {
    let a = plan(COUNTS, 2).await;
    assert!(a.operators.iter().all(|o| !o.uid.is_unset()));
    assert_eq!(uids(&a), uids(&plan(COUNTS, 2).await));
    // A rescale is not a new operator.
    assert_eq!(uids(&a), uids(&plan(COUNTS, 4).await));
    let distinct: std::collections::HashSet<_> = a.operators.iter().map(|o| o.uid).collect();
    assert_eq!(distinct.len(), a.operators.len());
}

#[tokio::test]
async fn a_changed_filter_changes_it_and_everything_downstream_only() {
    let a = plan(COUNTS, 2).await;
    let b = plan(&COUNTS.replace("v > 1", "v > 2"), 2).await;
    let (ua, ub) = (uids(&a), uids(&b));
    assert_eq!(ua.len(), ub.len());
    assert_eq!(ua[0], ub[0], "the source is upstream of the filter");
    for i in 1..ua.len() {
        assert_ne!(ua[i].1, ub[i].1, "{} is at or below the filter", ua[i].0);
    }
}

#[tokio::test]
async fn a_changed_output_projection_keeps_the_window_and_what_feeds_it() {
    let a = plan(COUNTS, 2).await;
    let b = plan(&COUNTS.replace("count(*) AS n", "count(*) AS total"), 2).await;
    let window = a
        .operators
        .iter()
        .position(|o| matches!(o.kind, OperatorKind::WindowAggregate(_)))
        .unwrap();
    let (ua, ub) = (uids(&a), uids(&b));
    assert_eq!(
        &ua[..=window],
        &ub[..=window],
        "the window and its upstream are unchanged"
    );
    assert_ne!(ua.last(), ub.last(), "the sink's columns are renamed");
}
