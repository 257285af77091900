//! The diff of two planned queries (`sluice_plan::diff`), over DAGs the
//! planner makes: what `ALTER PIPELINE … AS` keeps, replaces, moves and
//! refuses. Expected outcomes follow from the uid rules (an operator is
//! kept iff it and its whole upstream are unchanged), written out per case.

use super::uid_tests::{COUNTS, plan};
use sluice_plan::diff::{Change, ResetPolicy, StateFate, diff, set_parallelism};
use sluice_plan::{OperatorKind, Partitioning, PhysicalDag};
use sluice_types::OperatorId;

/// (change, kind, state) per line.
fn summary(d: &sluice_plan::diff::DagDiff) -> Vec<(Change, String, StateFate)> {
    d.lines.iter().map(|l| (l.change, l.kind.clone(), l.state)).collect()
}

fn kinds(dag: &PhysicalDag) -> Vec<&'static str> {
    dag.operators.iter().map(|o| o.kind.name()).collect()
}

#[tokio::test]
async fn a_filter_above_the_window_keeps_the_window_and_its_upstream() {
    let having = |n: u32| {
        format!(
            "SELECT * FROM (SELECT window_start, k, count(*) AS n FROM TUMBLE(s, ts, INTERVAL '10' SECOND) \
             GROUP BY window_start, window_end, k) WHERE n > {n}"
        )
    };
    let old = plan(&having(1), 1).await;
    let new = plan(&having(5), 1).await;
    assert_eq!(kinds(&old), kinds(&new));
    let d = diff(&old, &new, ResetPolicy::Refuse);
    assert!(d.refused.is_empty(), "{:?}", d.refused);
    let s = summary(&d);
    // source, pre-projection, window: untouched upstream of the change.
    assert_eq!(
        s[..3],
        [
            (Change::Kept, "source".into(), StateFate::Kept),
            (Change::Kept, "project".into(), StateFate::None),
            (Change::Kept, "window_aggregate".into(), StateFate::Kept),
        ]
    );
    // The changed filter, and the sink below it (same options: its state moves).
    assert_eq!(
        s[3..],
        [
            (Change::Replaced, "project".into(), StateFate::None),
            (Change::Replaced, "sink".into(), StateFate::Moved),
        ]
    );
    let handoff = d.handoff(7);
    assert_eq!(handoff.checkpoint, 7);
    let sink_new = new.operators.last().unwrap().uid;
    let sink_old = old.operators.last().unwrap().uid;
    assert_ne!(sink_new, sink_old);
    assert_eq!(handoff.source_of(sink_new), Some(sink_old));
    // A kept operator restores its own state.
    assert_eq!(handoff.source_of(old.operators[2].uid), Some(old.operators[2].uid));
}

#[tokio::test]
async fn a_filter_below_the_window_moves_the_window_state() {
    let old = plan(COUNTS, 2).await;
    let new = plan(&COUNTS.replace("v > 1", "v > 2"), 2).await;
    let d = diff(&old, &new, ResetPolicy::Refuse);
    assert!(d.refused.is_empty(), "{:?}", d.refused);
    let s = summary(&d);
    assert_eq!(s[0], (Change::Kept, "source".into(), StateFate::Kept));
    assert_eq!(s[1], (Change::Replaced, "project".into(), StateFate::None));
    assert_eq!(s[2], (Change::Replaced, "window_aggregate".into(), StateFate::Moved));
    assert!(s.iter().all(|(c, ..)| *c != Change::Added && *c != Change::Removed));
    let window = |dag: &PhysicalDag| {
        dag.operators
            .iter()
            .find(|o| matches!(o.kind, OperatorKind::WindowAggregate(_)))
            .unwrap()
            .uid
    };
    assert_eq!(d.handoff(3).source_of(window(&new)), Some(window(&old)));
}

#[tokio::test]
async fn other_aggregates_are_refused_unless_state_is_reset() {
    let old = plan(COUNTS, 1).await;
    let new = plan(&COUNTS.replace("count(*)", "sum(v)"), 1).await;
    let refused = diff(&old, &new, ResetPolicy::Refuse);
    assert_eq!(refused.refused.len(), 1, "{:?}", refused.refused);
    assert!(refused.refused[0].contains("other aggregates"), "{:?}", refused.refused);
    assert!(refused.refused[0].contains("state = 'reset'"));
    let reset = diff(&old, &new, ResetPolicy::ResetChanged);
    assert!(reset.refused.is_empty());
    let window = reset.lines.iter().find(|l| l.kind == "window_aggregate").unwrap();
    assert_eq!((window.change, window.state), (Change::Replaced, StateFate::Reset));
    assert!(reset.handoff(1).reset.contains(&window.uid.unwrap()));
    assert_eq!(reset.handoff(1).source_of(window.uid.unwrap()), None);
}

#[tokio::test]
async fn a_new_grouping_key_is_another_state_shape() {
    let old = plan(COUNTS, 1).await;
    let new = plan(
        "SELECT window_start, k, v, count(*) AS n FROM TUMBLE(s, ts, INTERVAL '10' SECOND) \
         WHERE v > 1 GROUP BY window_start, window_end, k, v",
        1,
    )
    .await;
    let d = diff(&old, &new, ResetPolicy::Refuse);
    assert!(
        d.refused.iter().any(|r| r.contains("window_aggregate")),
        "{:?}",
        d.refused
    );
}

#[tokio::test]
async fn the_same_query_is_an_empty_diff() {
    let old = plan(COUNTS, 2).await;
    let d = diff(&old, &plan(COUNTS, 2).await, ResetPolicy::Refuse);
    assert!(d.is_empty() && d.refused.is_empty());
    assert!(d.handoff(1).moves.is_empty() && d.handoff(1).reset.is_empty());
}

#[tokio::test]
async fn set_parallelism_rescales_keyed_operators_and_what_runs_in_their_tasks() {
    let old = plan(COUNTS, 1).await;
    let new = set_parallelism(&old, None, 4, &no_source).unwrap();
    let p: Vec<(&str, u32)> = new.operators.iter().map(|o| (o.kind.name(), o.parallelism)).collect();
    // The memory source (one partition) and its filter keep theirs; the
    // window and the projection behind it go to 4; the sink stays one.
    assert_eq!(
        p,
        [
            ("source", 1),
            ("project", 1),
            ("window_aggregate", 4),
            ("project", 4),
            ("sink", 1)
        ]
    );
    let into_sink = new.edges.iter().find(|e| e.to == new.operators[4].id).unwrap();
    assert_eq!(into_sink.partitioning, Partitioning::Single);
    // What the planner makes at parallelism 4 is what the rescale made.
    let planned = plan(COUNTS, 4).await;
    assert_eq!(new, planned);
    let d = diff(&old, &new, ResetPolicy::Refuse);
    assert!(d.lines.iter().all(|l| l.change == Change::Kept));
    assert!(!d.is_empty(), "a rescale is a change");
    let window = &d.lines[2];
    assert_eq!((window.old_parallelism, window.parallelism), (Some(1), 4));
    assert!(
        window.detail.contains("redistributed by key group"),
        "{}",
        window.detail
    );
    // And back to one: the sink's edge is forward again.
    let back = set_parallelism(&new, None, 1, &no_source).unwrap();
    assert_eq!(back, old);
}

#[tokio::test]
async fn set_parallelism_refuses_what_cannot_rescale() {
    let dag = plan(COUNTS, 1).await;
    let source = dag.operators[0].id;
    let err = set_parallelism(&dag, Some(source), 2, &no_source).unwrap_err();
    assert!(err.contains("source"), "{err}");
    let err = set_parallelism(&dag, Some(OperatorId(99)), 2, &no_source).unwrap_err();
    assert!(err.contains("no operator 99"), "{err}");
    assert!(set_parallelism(&dag, None, 0, &no_source).is_err());
    assert!(set_parallelism(&dag, None, dag.key_groups + 1, &no_source).is_err());
    let window = dag.operators[2].id;
    let one = set_parallelism(&dag, Some(window), 3, &no_source).unwrap();
    assert_eq!(one.operators[2].parallelism, 3);
    assert_eq!(one.operators[3].parallelism, 3, "the projection in its task follows");
}

/// `RESET SOURCE`: the rewound source and every stateful operator below it
/// start empty (rebuilt from the re-read input); the sink keeps its state.
/// A later change that only differs in where the source starts keeps the
/// source's positions.
#[tokio::test]
async fn a_rewound_source_resets_what_is_below_it_and_startup_options_keep_positions() {
    let old = plan(COUNTS, 1).await;
    let mut rewound = old.clone();
    let OperatorKind::Source(s) = &mut rewound.operators[0].kind else {
        panic!("a source first")
    };
    s.options.insert("scan.startup.mode".into(), "timestamp".into());
    s.options
        .insert("scan.startup.timestamp".into(), "2026-01-01 00:00:00".into());
    rewound.assign_uids();
    let d = diff(&old, &rewound, ResetPolicy::ResetReplaced);
    assert!(d.refused.is_empty());
    let s = summary(&d);
    assert_eq!(s[0], (Change::Replaced, "source".into(), StateFate::Reset));
    assert_eq!(s[2], (Change::Replaced, "window_aggregate".into(), StateFate::Reset));
    assert_eq!(s[4], (Change::Replaced, "sink".into(), StateFate::Moved));
    // Back to the stream's own options (a later ALTER … AS re-plans from
    // them): only the start differs, so positions and window state move.
    let d = diff(&rewound, &old, ResetPolicy::Refuse);
    assert!(d.refused.is_empty(), "{:?}", d.refused);
    let s = summary(&d);
    assert_eq!(s[0], (Change::Replaced, "source".into(), StateFate::Moved));
    assert_eq!(s[2], (Change::Replaced, "window_aggregate".into(), StateFate::Moved));
}

/// A memory source (as the planner's test catalog has it) cannot re-split.
fn no_source(_: &sluice_plan::SourceSpec) -> bool {
    false
}

/// A source whose connector can re-split its partitions rescales with the
/// keyed operators; the filter chained behind it follows.
#[tokio::test]
async fn set_parallelism_rescales_a_source_that_can_re_split() {
    let dag = plan(COUNTS, 1).await;
    let any = |_: &sluice_plan::SourceSpec| true;
    let new = set_parallelism(&dag, None, 3, &any).unwrap();
    let p: Vec<u32> = new.operators.iter().map(|o| o.parallelism).collect();
    assert_eq!(p, [3, 3, 3, 3, 1]);
    let d = diff(&dag, &new, ResetPolicy::Refuse);
    assert!(
        d.lines[0].detail.contains("parallelism 1 → 3, partitions re-split"),
        "{}",
        d.lines[0].detail
    );
    let one = set_parallelism(&dag, Some(dag.operators[0].id), 2, &any).unwrap();
    assert_eq!(one.operators[0].parallelism, 2);
    assert_eq!(one.operators[1].parallelism, 2, "the chained filter follows");
    assert_eq!(one.operators[2].parallelism, 1, "the window keeps its own");
}
