//! Split distinct aggregation's plans (`SET distinct_split_buckets`): which
//! aggregates split, into what. Their results are checked end to end in
//! `sql/split_distinct.slt` and by Nexmark q15's reference test.

use super::uid_tests::OneStream;
use super::*;
use crate::statement::{SluiceStatement, parse_statements};
use sluice_plan::{GroupAggSpec, OperatorKind, Partitioning, ProjectSpec};
use sluice_types::OperatorId;

async fn plan_with(sql: &str, settings: PlannerSettings) -> PhysicalDag {
    let query = match parse_statements(&format!("EXPLAIN {sql}")).unwrap().remove(0) {
        SluiceStatement::Explain(q) => q,
        _ => unreachable!("an EXPLAIN"),
    };
    Planner::new(&OneStream, settings)
        .plan(&query, sink_spec("client", BTreeMap::new()))
        .await
        .unwrap()
        .dag
}

fn split(buckets: u32) -> PlannerSettings {
    PlannerSettings {
        parallelism: 2,
        distinct_split_buckets: buckets,
        ..PlannerSettings::default()
    }
}

fn aggregates(dag: &PhysicalDag) -> Vec<(OperatorId, &GroupAggSpec)> {
    dag.operators
        .iter()
        .filter_map(|o| match &o.kind {
            OperatorKind::GroupAggregate(g) => Some((o.id, g)),
            _ => None,
        })
        .collect()
}

fn projects(dag: &PhysicalDag) -> Vec<&ProjectSpec> {
    dag.operators
        .iter()
        .filter_map(|o| match &o.kind {
            OperatorKind::Project(p) => Some(p),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn distinct_aggregates_split_into_a_partial_per_value_and_a_final_combining_them() {
    let sql = "SELECT k, count(*) AS n, count(DISTINCT v) AS dv, \
               count(DISTINCT v) FILTER (WHERE v > 10) AS big, count(DISTINCT ts) AS times, max(v) AS hi \
               FROM s GROUP BY k";
    let dag = plan_with(sql, split(16)).await;
    let aggs = aggregates(&dag);
    assert_eq!(aggs.len(), 3, "{aggs:?}");
    let (partials, finals): (Vec<_>, Vec<_>) = aggs.iter().partition(|(_, g)| g.op_column.is_none());
    // Two partials: v's (with the calls without DISTINCT) and ts's, each
    // grouped by k and its bucket.
    assert_eq!(partials.len(), 2);
    let calls: Vec<Vec<(String, bool)>> = partials
        .iter()
        .map(|(_, g)| g.aggregates.iter().map(|c| (c.function.clone(), c.distinct)).collect())
        .collect();
    let c = |f: &str, d: bool| (f.to_string(), d);
    assert_eq!(
        calls,
        [
            vec![c("count", false), c("count", true), c("count", true), c("max", false)],
            vec![c("count", true)]
        ]
    );
    // Their input: k, the five arguments (count(*) counts 1s), then a
    // bucket per value.
    for (d, (id, g)) in partials.iter().enumerate() {
        assert_eq!(g.key_columns, [0, 6 + d], "keyed by k and bucket {d}");
        assert_eq!(g.input_schema.fields().len(), 8);
        let edge = &dag.inputs_of(*id)[0];
        assert_eq!(edge.partitioning, Partitioning::Hash(vec![0, 6 + d]));
        assert_eq!(dag.operator(*id).unwrap().parallelism, 2);
    }
    // The buckets: one split_bucket per distinct value, of 16 buckets.
    let texts: Vec<String> = projects(&dag).iter().flat_map(|p| p.exprs.clone()).collect();
    let buckets: Vec<&String> = texts.iter().filter(|e| e.contains("split_bucket")).collect();
    assert_eq!(buckets.len(), 2, "{texts:?}");
    assert!(buckets.iter().all(|e| e.ends_with(", 16)")), "{buckets:?}");
    // The final: over both partials' changelogs, hashed on k, combining.
    let (id, g) = finals[0];
    assert_eq!(g.op_column, Some(0));
    assert_eq!(g.key_columns, [1]);
    let combined: Vec<(String, bool, Vec<usize>)> = g
        .aggregates
        .iter()
        .map(|c| (c.function.clone(), c.distinct, c.args.clone()))
        .collect();
    let f = |name: &str, arg: usize| (name.to_string(), false, vec![arg]);
    assert_eq!(
        combined,
        [f("sum", 2), f("sum", 3), f("sum", 4), f("sum", 5), f("max", 6)]
    );
    let inputs = dag.inputs_of(id);
    assert_eq!(inputs.len(), 2);
    assert!(inputs.iter().all(|e| e.partitioning == Partitioning::Hash(vec![1])));
    assert!(dag.updating(id));
}

#[tokio::test]
async fn without_keys_the_final_is_one_instance_over_parallel_partials() {
    let dag = plan_with("SELECT count(DISTINCT v) AS dv FROM s", split(8)).await;
    let aggs = aggregates(&dag);
    assert_eq!(aggs.len(), 2);
    let (partial, last) = (aggs[0], aggs[1]);
    assert_eq!(partial.1.key_columns, [1], "the bucket, after the argument");
    assert_eq!(dag.operator(partial.0).unwrap().parallelism, 2);
    assert_eq!(dag.operator(last.0).unwrap().parallelism, 1);
    assert_eq!(dag.inputs_of(last.0)[0].partitioning, Partitioning::Single);
}

#[tokio::test]
async fn aggregates_that_do_not_combine_or_expire_are_not_split() {
    let one_aggregate = |dag: &PhysicalDag| aggregates(dag).len() == 1;
    for sql in [
        // No DISTINCT.
        "SELECT k, count(*) AS n FROM s GROUP BY k",
        // avg does not add up over buckets.
        "SELECT k, count(DISTINCT v) AS dv, avg(v) AS a FROM s GROUP BY k",
        "SELECT k, avg(DISTINCT v) AS a FROM s GROUP BY k",
        // min of a timestamp: not among the combined types.
        "SELECT k, count(DISTINCT v) AS dv, min(ts) AS first FROM s GROUP BY k",
    ] {
        assert!(one_aggregate(&plan_with(sql, split(16)).await), "{sql}");
    }
    let sql = "SELECT k, count(DISTINCT v) AS dv FROM s GROUP BY k";
    assert!(one_aggregate(&plan_with(sql, split(0)).await), "0 buckets: not split");
    let ttl = PlannerSettings {
        state_ttl_ms: Some(60_000),
        ..split(16)
    };
    assert!(one_aggregate(&plan_with(sql, ttl).await), "with a state TTL");
    // Over a changelog (the inner aggregate's): only the inner one, which
    // has no DISTINCT, and the outer one unsplit.
    let sql = "SELECT n, count(DISTINCT k) AS keys FROM (SELECT k, count(*) AS n FROM s GROUP BY k) GROUP BY n";
    assert_eq!(aggregates(&plan_with(sql, split(16)).await).len(), 2, "{sql}");
}
