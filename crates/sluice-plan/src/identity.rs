//! Stable operator identity: each operator's [`OperatorUid`] is a hash of
//! what defines its semantics and of its inputs' uids (its lineage), so
//! re-planning the same query gives the same uids, and changing one
//! operator changes the uids of it and of everything downstream of it only.
//! State is stored under the uid, so it finds its operator again after a
//! re-plan or a rescale (Flink's operator uids, derived rather than
//! declared).
//!
//! What is hashed, per kind (never the parallelism, nor limits such as
//! `groups_max`, nor optimisations such as a source's unread columns, nor
//! operator ids — the planner's numbering):
//!
//! - source: stream, connector, options, watermark, idle timeout, computed
//!   columns;
//! - project: filter and expressions;
//! - window: window kind and sizes, time column, keys, aggregates;
//! - join: both sides' keys, time columns and output widths, windowed or
//!   interval bounds, TTL;
//! - sink: connector, options, event-time column;
//! - for every operator: its output column names, and per input (in
//!   order) the input's uid and, for a hash exchange, its key columns.
//!
//! The hash is FNV-1a (64 bits) over a canonical encoding written here
//! field by field (strings and lists length-prefixed, integers little
//! endian), so it does not depend on the process, the Rust version
//! (`DefaultHasher` may change between releases) or serde's output.
//! Operators that hash alike (two identical branches of one DAG) are told
//! apart deterministically: the n-th repeat, in the DAG's order, hashes its
//! value again with n.
//!
//! A DAG stored before uids existed has none; [`PhysicalDag::fill_uids`]
//! computes them when it is loaded. Uids stored with a DAG are never
//! recomputed, so a later change to this derivation cannot orphan the state
//! of a running pipeline.

use crate::{OperatorKind, OperatorSpec, Partitioning, PhysicalDag, WindowKind};
use sluice_types::{OperatorId, OperatorUid};
use std::collections::HashMap;

/// FNV-1a, 64 bits: tiny, fixed for all time.
struct Fnv(u64);

impl Fnv {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    fn new() -> Self {
        Fnv(Self::OFFSET)
    }
    fn bytes(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.bytes(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.bytes(s.as_bytes());
    }
    fn opt_str(&mut self, s: Option<&str>) {
        match s {
            Some(s) => {
                self.u64(1);
                self.str(s);
            }
            None => self.u64(0),
        }
    }
    fn opt_i64(&mut self, v: Option<i64>) {
        match v {
            Some(v) => {
                self.u64(1);
                self.i64(v);
            }
            None => self.u64(0),
        }
    }
    fn indices(&mut self, v: &[usize]) {
        self.u64(v.len() as u64);
        v.iter().for_each(|i| self.u64(*i as u64));
    }
    fn options(&mut self, options: &std::collections::BTreeMap<String, String>) {
        self.u64(options.len() as u64);
        for (k, v) in options {
            self.str(k);
            self.str(v);
        }
    }
}

impl Fnv {
    fn calls(&mut self, calls: &[crate::AggregateCall]) {
        self.u64(calls.len() as u64);
        for a in calls {
            self.str(&a.function);
            self.indices(&a.args);
            self.u64(u64::from(a.distinct));
        }
    }
}

/// Feeds what defines `op`'s semantics (see the module doc).
fn hash_kind(h: &mut Fnv, op: &OperatorSpec) {
    h.str(op.kind.name());
    match &op.kind {
        OperatorKind::Source(s) => {
            h.str(&s.stream);
            h.str(&s.connector);
            h.options(&s.options);
            match &s.watermark {
                Some(w) => {
                    h.u64(1);
                    h.u64(w.column as u64);
                    h.i64(w.delay_ms);
                }
                None => h.u64(0),
            }
            h.u64(s.idle_timeout_ms);
            h.u64(s.computed.len() as u64);
            for c in &s.computed {
                h.u64(c.column as u64);
                h.str(&c.expr);
            }
        }
        OperatorKind::Project(p) => {
            h.opt_str(p.filter.as_deref());
            h.u64(p.exprs.len() as u64);
            p.exprs.iter().for_each(|e| h.str(e));
        }
        OperatorKind::WindowAggregate(w) => {
            match w.window {
                WindowKind::Tumble { size_ms } => {
                    h.str("tumble");
                    h.i64(size_ms);
                }
                WindowKind::Hop { slide_ms, size_ms } => {
                    h.str("hop");
                    h.i64(slide_ms);
                    h.i64(size_ms);
                }
                WindowKind::Session { gap_ms } => {
                    h.str("session");
                    h.i64(gap_ms);
                }
            }
            h.u64(w.time_column as u64);
            h.indices(&w.key_columns);
            h.calls(&w.aggregates);
        }
        OperatorKind::GroupAggregate(g) => {
            h.str("group");
            h.u64(g.op_column.map_or(0, |c| c as u64 + 1));
            h.indices(&g.key_columns);
            h.calls(&g.aggregates);
        }
        OperatorKind::TopN(t) => {
            h.indices(&t.partition_columns);
            h.u64(t.order.len() as u64);
            for k in &t.order {
                h.u64(k.column as u64);
                h.u64(u64::from(k.descending));
                h.u64(u64::from(k.nulls_first));
            }
            h.u64(t.limit as u64);
            // (Only over a changelog: other uids stay as they were.)
            if let Some(op) = t.op_column {
                h.str("changelog");
                h.u64(op as u64);
            }
        }
        OperatorKind::OverAggregate(o) => {
            h.str("over");
            h.indices(&o.partition_columns);
            h.u64(o.time_column as u64);
            h.u64(o.output_columns as u64);
            match o.frame {
                crate::OverFrame::Rows { preceding } => {
                    h.u64(1);
                    h.u64(preceding);
                }
                crate::OverFrame::Range { preceding_ms } => {
                    h.u64(2);
                    h.i64(preceding_ms);
                }
                crate::OverFrame::Unbounded { peers } => {
                    h.u64(3);
                    h.u64(u64::from(peers));
                }
            }
            for a in &o.aggregates {
                h.str(&a.function);
                h.opt_i64(a.arg.map(|c| c as i64));
            }
            // (Only over a changelog: other uids stay as they were.)
            if let Some(op) = o.op_column {
                h.str("changelog");
                h.u64(op as u64);
            }
        }
        OperatorKind::Join(j) => {
            for side in [&j.left, &j.right] {
                h.indices(&side.keys);
                h.opt_i64(side.time_column.map(|c| c as i64));
                h.u64(side.output_columns as u64);
                // (Only a changelog side adds: other uids stay as they were.)
                if let Some(op) = side.op_column {
                    h.str("changelog");
                    h.u64(op as u64);
                }
            }
            h.u64(u64::from(j.windowed));
            // (Inner adds nothing: uids of inner joins stay as they were.)
            if !j.kind.is_inner() {
                h.str(j.kind.describe());
            }
            match j.interval_ms {
                Some([l, r]) => {
                    h.u64(1);
                    h.i64(l);
                    h.i64(r);
                }
                None => h.u64(0),
            }
            h.opt_i64(j.state_ttl_ms);
        }
        OperatorKind::Sink(s) => {
            h.str(&s.connector);
            h.options(&s.options);
            h.opt_i64(s.event_time_column.map(|c| c as i64));
        }
    }
    h.u64(op.output_schema.fields().len() as u64);
    for f in op.output_schema.fields() {
        h.str(f.name());
    }
}

/// The uid `op` hashes to, given its inputs' uids (before telling apart
/// operators that hash alike).
fn lineage_hash(dag: &PhysicalDag, op: &OperatorSpec, uids: &HashMap<OperatorId, OperatorUid>) -> Option<u64> {
    let mut h = Fnv::new();
    h.str("sluice.operator.v1");
    hash_kind(&mut h, op);
    let inputs = dag.inputs_of(op.id);
    h.u64(inputs.len() as u64);
    for e in inputs {
        h.u64(uids.get(&e.from)?.0);
        match &e.partitioning {
            // How rows are spread over instances is the parallelism's
            // business (forward, single and round robin only differ by it);
            // which rows meet is the keys'.
            Partitioning::Hash(cols) => {
                h.u64(1);
                h.indices(cols);
            }
            Partitioning::Forward | Partitioning::Single | Partitioning::RoundRobin => h.u64(0),
        }
    }
    Some(h.0)
}

/// Every operator's uid, in the DAG's (topological) order.
pub fn derive_uids(dag: &PhysicalDag) -> Vec<OperatorUid> {
    let mut uids: HashMap<OperatorId, OperatorUid> = HashMap::new();
    let mut seen: HashMap<u64, u64> = HashMap::new();
    // The operators are in topological order; passes make this robust to a
    // DAG that is not (each pass places at least one operator).
    while uids.len() < dag.operators.len() {
        let before = uids.len();
        for op in &dag.operators {
            if uids.contains_key(&op.id) {
                continue;
            }
            let Some(raw) = lineage_hash(dag, op, &uids) else {
                continue;
            };
            let repeat = seen.entry(raw).or_insert(0);
            let mut value = raw;
            if *repeat > 0 {
                let mut h = Fnv::new();
                h.u64(raw);
                h.str("repeat");
                h.u64(*repeat);
                value = h.0;
            }
            *repeat += 1;
            // 0 means "no uid".
            uids.insert(op.id, OperatorUid(value.max(1)));
        }
        assert!(
            uids.len() > before,
            "the DAG has a cycle or an edge from an unknown operator"
        );
    }
    dag.operators.iter().map(|o| uids[&o.id]).collect()
}

impl PhysicalDag {
    /// Sets every operator's uid from its lineage (the planner, once the
    /// DAG is complete).
    pub fn assign_uids(&mut self) {
        let uids = derive_uids(self);
        for (op, uid) in self.operators.iter_mut().zip(uids) {
            op.uid = uid;
        }
    }

    /// A DAG stored before uids existed: computes them. A DAG with uids
    /// keeps them (stored uids are never recomputed).
    pub fn fill_uids(&mut self) {
        if self.operators.iter().any(|o| o.uid.is_unset()) {
            self.assign_uids();
        }
    }

    /// The operator with uid `uid`.
    pub fn operator_by_uid(&self, uid: OperatorUid) -> Option<&OperatorSpec> {
        self.operators.iter().find(|o| o.uid == uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EdgeSpec, ProjectSpec, SinkSpec, SourceSpec, WindowAggSpec};
    use arrow_schema::{DataType, Field, Schema};
    use sluice_types::EdgeId;
    use std::sync::Arc;

    fn schema(names: &[&str]) -> arrow_schema::SchemaRef {
        Arc::new(Schema::new(
            names
                .iter()
                .map(|n| Field::new(*n, DataType::Int64, true))
                .collect::<Vec<_>>(),
        ))
    }

    fn op(id: u32, kind: OperatorKind, parallelism: u32, out: &[&str]) -> OperatorSpec {
        OperatorSpec {
            id: OperatorId(id),
            uid: OperatorUid::UNSET,
            kind,
            parallelism,
            output_schema: schema(out),
        }
    }

    fn edge(id: u32, from: u32, to: u32, partitioning: Partitioning) -> EdgeSpec {
        EdgeSpec {
            id: EdgeId(id),
            from: OperatorId(from),
            to: OperatorId(to),
            partitioning,
        }
    }

    fn source(stream: &str) -> OperatorKind {
        OperatorKind::Source(SourceSpec {
            stream: stream.into(),
            connector: "memory".into(),
            options: Default::default(),
            watermark: None,
            idle_timeout_ms: 5000,
            computed: vec![],
            unread: vec![],
            alignment_max_drift_ms: None,
        })
    }

    fn project(filter: Option<&str>) -> OperatorKind {
        OperatorKind::Project(ProjectSpec {
            input_schema: schema(&["ts", "k", "v"]),
            filter: filter.map(String::from),
            exprs: vec!["ts".into(), "k".into(), "v".into()],
        })
    }

    fn window(size_ms: i64) -> OperatorKind {
        OperatorKind::WindowAggregate(WindowAggSpec {
            input_schema: schema(&["ts", "k", "v"]),
            window: WindowKind::Tumble { size_ms },
            time_column: 0,
            key_columns: vec![1],
            aggregates: vec![crate::AggregateCall {
                function: "sum".into(),
                args: vec![2],
                distinct: false,
            }],
            groups_max: 1000,
        })
    }

    fn sink() -> OperatorKind {
        OperatorKind::Sink(SinkSpec {
            changelog: false,
            connector: "blackhole".into(),
            options: Default::default(),
            event_time_column: None,
        })
    }

    /// source → project → window → sink.
    fn pipeline(filter: Option<&str>, size_ms: i64, parallelism: u32) -> PhysicalDag {
        let mut dag = PhysicalDag::new(
            vec![
                op(0, source("s"), 1, &["ts", "k", "v"]),
                op(1, project(filter), 1, &["ts", "k", "v"]),
                op(
                    2,
                    window(size_ms),
                    parallelism,
                    &["window_start", "window_end", "k", "s"],
                ),
                op(3, sink(), 1, &["window_start", "window_end", "k", "s"]),
            ],
            vec![
                edge(0, 0, 1, Partitioning::Forward),
                edge(1, 1, 2, Partitioning::Hash(vec![1])),
                edge(2, 2, 3, Partitioning::Single),
            ],
        );
        dag.assign_uids();
        dag
    }

    fn uids(dag: &PhysicalDag) -> Vec<OperatorUid> {
        dag.operators.iter().map(|o| o.uid).collect()
    }

    #[test]
    fn the_same_plan_gets_the_same_uids_and_they_are_fixed_values() {
        let a = pipeline(None, 10_000, 2);
        assert_eq!(uids(&a), uids(&pipeline(None, 10_000, 2)));
        // Fixed for all time: a change here orphans stored state. (The
        // values are FNV-1a of the canonical encoding; only a new
        // derivation version may change them.)
        let shown: Vec<String> = uids(&a).iter().map(|u| u.to_string()).collect();
        assert_eq!(shown.len(), 4);
        let again: Vec<String> = derive_uids(&a).iter().map(|u| u.to_string()).collect();
        assert_eq!(shown, again);
        assert!(uids(&a).iter().all(|u| !u.is_unset()));
    }

    /// The hash is FNV-1a 64 as published (test vectors from the FNV
    /// reference, computed independently of this code).
    #[test]
    fn the_hash_is_fnv_1a_64() {
        let hash = |s: &str| {
            let mut h = Fnv::new();
            h.bytes(s.as_bytes());
            h.0
        };
        assert_eq!(hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(hash("foobar"), 0x8594_4171_f739_67e8);
    }

    /// A change detector, not a correctness check: these are the uids this
    /// derivation gave a fixed DAG when it was written. Stored pipelines
    /// and their checkpoints are keyed by uids, so if this fails the
    /// derivation changed and every stored pipeline would lose its state:
    /// keep the old derivation for stored DAGs (they keep their stored
    /// uids) and only then update these values.
    #[test]
    fn uids_of_a_fixed_dag_never_change() {
        let shown: Vec<String> = uids(&pipeline(None, 10_000, 2)).iter().map(|u| u.to_string()).collect();
        assert_eq!(shown, GOLDEN_UIDS);
    }

    const GOLDEN_UIDS: [&str; 4] = [
        "40be63fe0b1dd011",
        "a032635024b0fb88",
        "5dbb39612b83a1ea",
        "26a0a476a1afddd5",
    ];

    #[test]
    fn a_change_changes_the_operator_and_everything_downstream_only() {
        let a = pipeline(None, 10_000, 2);
        let filtered = pipeline(Some("v > 1"), 10_000, 2);
        let (ua, uf) = (uids(&a), uids(&filtered));
        assert_eq!(ua[0], uf[0], "the source is upstream of the change");
        for i in 1..4 {
            assert_ne!(ua[i], uf[i], "operator {i} is at or below the changed filter");
        }
        let resized = pipeline(None, 20_000, 2);
        let ur = uids(&resized);
        assert_eq!(&ua[..2], &ur[..2], "upstream of the window");
        assert_ne!(ua[2], ur[2]);
        assert_ne!(ua[3], ur[3]);
    }

    #[test]
    fn parallelism_limits_and_ids_are_not_identity() {
        let a = pipeline(None, 10_000, 2);
        let mut b = pipeline(None, 10_000, 4);
        assert_eq!(uids(&a), uids(&b), "a rescale keeps the uids");
        if let OperatorKind::WindowAggregate(w) = &mut b.operators[2].kind {
            w.groups_max = 5;
        }
        for (i, o) in b.operators.iter_mut().enumerate() {
            o.id = OperatorId(10 + i as u32);
        }
        for e in &mut b.edges {
            e.from = OperatorId(e.from.0 + 10);
            e.to = OperatorId(e.to.0 + 10);
        }
        assert_eq!(uids(&a), derive_uids(&b));
    }

    #[test]
    fn identical_branches_get_distinct_uids_deterministically() {
        // One source feeding two identical projections, each to its sink.
        let mk = || {
            let mut dag = PhysicalDag::new(
                vec![
                    op(0, source("s"), 1, &["ts", "k", "v"]),
                    op(1, project(None), 1, &["ts", "k", "v"]),
                    op(2, project(None), 1, &["ts", "k", "v"]),
                    op(3, sink(), 1, &["ts", "k", "v"]),
                    op(4, sink(), 1, &["ts", "k", "v"]),
                ],
                vec![
                    edge(0, 0, 1, Partitioning::Forward),
                    edge(1, 0, 2, Partitioning::Forward),
                    edge(2, 1, 3, Partitioning::Forward),
                    edge(3, 2, 4, Partitioning::Forward),
                ],
            );
            dag.assign_uids();
            dag
        };
        let dag = mk();
        let u = uids(&dag);
        let distinct: std::collections::HashSet<_> = u.iter().collect();
        assert_eq!(distinct.len(), 5, "{u:?}");
        assert_eq!(u, uids(&mk()));
    }

    #[test]
    fn a_dag_stored_without_uids_gets_them_on_load_and_keeps_stored_ones() {
        let dag = pipeline(None, 10_000, 2);
        let mut json: serde_json::Value = serde_json::to_value(&dag).unwrap();
        for o in json["operators"].as_array_mut().unwrap() {
            o.as_object_mut().unwrap().remove("uid");
        }
        json.as_object_mut().unwrap().remove("key_groups");
        let mut old: PhysicalDag = serde_json::from_value(json).unwrap();
        assert!(old.operators.iter().all(|o| o.uid.is_unset()));
        assert_eq!(old.key_groups, crate::KEY_GROUPS_DEFAULT);
        old.fill_uids();
        assert_eq!(uids(&old), uids(&dag));
        // Stored uids stay as stored.
        let mut stored = dag.clone();
        stored.operators[1].uid = OperatorUid(42);
        stored.fill_uids();
        assert_eq!(stored.operators[1].uid, OperatorUid(42));
        // And round-trip as 16 hex digits.
        let text = serde_json::to_string(&dag).unwrap();
        assert!(text.contains(&format!("\"uid\":\"{}\"", dag.operators[0].uid)));
        assert_eq!(serde_json::from_str::<PhysicalDag>(&text).unwrap(), dag);
    }
}
