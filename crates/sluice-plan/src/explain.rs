//! Rendering a [`PhysicalDag`] as rows for `EXPLAIN`.

use crate::{OperatorKind, PhysicalDag, WindowKind};

/// Columns of an EXPLAIN result.
pub const EXPLAIN_COLUMNS: [&str; 7] = [
    "operator_id",
    "uid",
    "kind",
    "parallelism",
    "detail",
    "inputs",
    "schema",
];

/// One row per operator: id, uid (its first 8 hex digits), kind, parallelism, detail, its input edges
/// (`op <id> <partitioning>`, `(chained)` when the operator runs in that
/// upstream's task), and its output columns.
pub fn explain_rows(dag: &PhysicalDag) -> Vec<[String; 7]> {
    dag.operators
        .iter()
        .map(|op| {
            let inputs: Vec<String> = dag
                .inputs_of(op.id)
                .iter()
                .map(|e| {
                    let edge = match &e.partitioning {
                        crate::Partitioning::Hash(cols) => {
                            let keys: Vec<String> = cols.iter().map(|c| column_label(dag, e.from, *c)).collect();
                            format!("op {} hash({})", e.from, keys.join(", "))
                        }
                        // A chained operator runs in its upstream's task.
                        crate::Partitioning::Forward if dag.chained_into(op.id) == Some(e.from) => {
                            format!("op {} forward (chained)", e.from)
                        }
                        other => format!("op {} {}", e.from, other.describe(&crate::empty_schema())),
                    };
                    // An edge carrying a changelog says so.
                    if dag.updating(e.from) {
                        format!("{edge} updating")
                    } else {
                        edge
                    }
                })
                .collect();
            let columns: Vec<String> = op
                .output_schema
                .fields()
                .iter()
                .map(|f| format!("{}: {}", f.name(), f.data_type()))
                .collect();
            [
                op.id.to_string(),
                op.uid.short(),
                op.kind.name().to_string(),
                op.parallelism.to_string(),
                detail(dag, op),
                inputs.join("; "),
                columns.join(", "),
            ]
        })
        .collect()
}

/// How column `column` of operator `op`'s output reads to a user: the
/// expression a project computes it with, or the column's name.
fn column_label(dag: &PhysicalDag, op: sluice_types::OperatorId, column: usize) -> String {
    match dag.operator(op) {
        Some(o) => match &o.kind {
            OperatorKind::Project(p) => p.exprs.get(column).cloned().unwrap_or_default(),
            _ => o
                .output_schema
                .fields()
                .get(column)
                .map(|f| f.name().clone())
                .unwrap_or_default(),
        },
        None => String::new(),
    }
}

/// How input column `i` of an aggregate reads: through the operator
/// feeding it (its pre-projection). Fed by several (a split distinct
/// aggregation's final level), through the first that computes it rather
/// than padding it with NULL.
fn input_label(dag: &PhysicalDag, op: &crate::OperatorSpec, schema: &arrow_schema::Schema, i: usize) -> String {
    let labels: Vec<String> = dag
        .inputs_of(op.id)
        .iter()
        .map(|e| column_label(dag, e.from, i))
        .collect();
    let padding = |l: &&String| l.as_str() == "NULL" || l.starts_with("CAST(NULL AS ");
    match labels.iter().find(|l| !padding(l)).or(labels.first()) {
        Some(l) => l.clone(),
        None => schema.field(i).name().clone(),
    }
}

fn labels(dag: &PhysicalDag, op: &crate::OperatorSpec, schema: &arrow_schema::Schema, columns: &[usize]) -> String {
    let names: Vec<String> = columns.iter().map(|i| input_label(dag, op, schema, *i)).collect();
    names.join(", ")
}

/// An updating operator's state TTL, if it has one.
fn ttl(ms: Option<i64>) -> String {
    ms.map(|ms| format!("; state ttl {ms} ms (processing time)"))
        .unwrap_or_default()
}

/// An aggregate's calls as SQL: `count(*)`, `sum(DISTINCT price)`.
fn calls(
    dag: &PhysicalDag,
    op: &crate::OperatorSpec,
    schema: &arrow_schema::Schema,
    calls: &[crate::AggregateCall],
) -> String {
    let calls: Vec<String> = calls
        .iter()
        .map(|a| {
            let args = match a.args.as_slice() {
                [] => "*".to_string(),
                args => labels(dag, op, schema, args),
            };
            let distinct = if a.distinct { "DISTINCT " } else { "" };
            format!("{}({distinct}{args})", a.function)
        })
        .collect();
    calls.join(", ")
}

fn detail(dag: &PhysicalDag, op: &crate::OperatorSpec) -> String {
    match &op.kind {
        OperatorKind::Source(s) => {
            let computed: Vec<String> = s
                .computed
                .iter()
                .map(|c| format!(", {} AS {}", op.output_schema.field(c.column).name(), c.expr))
                .collect();
            let wm = match &s.watermark {
                Some(w) => format!(
                    ", watermark {} - {} ms",
                    op.output_schema.field(w.column).name(),
                    w.delay_ms
                ),
                None => String::new(),
            };
            let unread = match s.unread.as_slice() {
                [] => String::new(),
                columns => {
                    let names: Vec<&str> = columns
                        .iter()
                        .filter_map(|c| op.output_schema.fields().get(*c).map(|f| f.name().as_str()))
                        .collect();
                    format!(", unread {}", names.join(", "))
                }
            };
            let aligned = s
                .alignment_max_drift_ms
                .map(|ms| format!(", aligned within {ms} ms"))
                .unwrap_or_default();
            format!(
                "{} ({}){}{}{}{}",
                s.stream,
                s.connector,
                computed.concat(),
                wm,
                aligned,
                unread
            )
        }
        OperatorKind::Project(p) => {
            let filter = p.filter.as_ref().map(|f| format!("filter {f}; ")).unwrap_or_default();
            format!("{filter}{}", p.exprs.join(", "))
        }
        OperatorKind::WindowAggregate(w) => {
            let window = match w.window {
                WindowKind::Tumble { size_ms } => format!("tumble {size_ms} ms"),
                WindowKind::Hop { slide_ms, size_ms } => match w.window.pane_ms() {
                    Some(pane) => format!("hop slide {slide_ms} ms size {size_ms} ms in {pane} ms panes"),
                    None => format!("hop slide {slide_ms} ms size {size_ms} ms"),
                },
                WindowKind::Session { gap_ms } => format!("session gap {gap_ms} ms"),
            };
            let name = |i: usize| input_label(dag, op, &w.input_schema, i);
            format!(
                "{window} on {}; keys [{}]; {}",
                name(w.time_column),
                labels(dag, op, &w.input_schema, &w.key_columns),
                calls(dag, op, &w.input_schema, &w.aggregates)
            )
        }
        OperatorKind::GroupAggregate(g) => format!(
            "keys [{}]; {}; changelog (+I, -U, +U); groups max {}{}",
            labels(dag, op, &g.input_schema, &g.key_columns),
            calls(dag, op, &g.input_schema, &g.aggregates),
            g.groups_max,
            ttl(g.state_ttl_ms)
        ),
        OperatorKind::OverAggregate(o) => {
            let calls: Vec<String> = o
                .aggregates
                .iter()
                .map(|a| match a.arg {
                    Some(c) => format!("{}({})", a.function, input_label(dag, op, &o.input_schema, c)),
                    None => format!("{}(*)", a.function),
                })
                .collect();
            let frame = match o.frame {
                crate::OverFrame::Rows { preceding } => format!("rows {preceding} preceding"),
                crate::OverFrame::Range { preceding_ms } => format!("range {preceding_ms} ms preceding"),
                crate::OverFrame::Unbounded { peers: false } => "rows unbounded preceding".to_string(),
                crate::OverFrame::Unbounded { peers: true } => "range unbounded preceding".to_string(),
            };
            format!(
                "over [{}] by {} {frame}; {}{}; rows max {}{}",
                labels(dag, op, &o.input_schema, &o.partition_columns),
                input_label(dag, op, &o.input_schema, o.time_column),
                calls.join(", "),
                if o.op_column.is_some() {
                    "; over a changelog: every row kept, changelog (+I, -U, +U, -D)"
                } else {
                    ""
                },
                o.rows_max,
                ttl(o.state_ttl_ms)
            )
        }
        OperatorKind::TopN(t) => {
            let order: Vec<String> = t
                .order
                .iter()
                .map(|k| {
                    let dir = if k.descending { " DESC" } else { "" };
                    format!("{}{dir}", input_label(dag, op, &t.input_schema, k.column))
                })
                .collect();
            format!(
                "top {} per [{}] by {}; changelog (+I, -U, +U){}; partitions max {}{}",
                t.limit,
                labels(dag, op, &t.input_schema, &t.partition_columns),
                order.join(", "),
                if t.op_column.is_some() {
                    "; over a changelog: every row kept (rows max = partitions max)"
                } else {
                    ""
                },
                t.partitions_max,
                ttl(t.state_ttl_ms)
            )
        }
        OperatorKind::Join(j) => {
            let inputs = dag.inputs_of(op.id);
            let label = |side: usize, i: usize| match inputs.get(side) {
                Some(e) => column_label(dag, e.from, i),
                None => format!("#{i}"),
            };
            let pairs: Vec<String> = j
                .left
                .keys
                .iter()
                .zip(&j.right.keys)
                .map(|(l, r)| format!("{} = {}", label(0, *l), label(1, *r)))
                .collect();
            let state = if j.updating() {
                let ttl = match j.state_ttl_ms {
                    Some(ttl) => format!("state ttl {ttl} ms of processing time per key"),
                    None => "state kept until rows max (no ttl)".to_string(),
                };
                format!("changelog (+I, -U, +U, -D); {ttl}")
            } else if j.windowed {
                "windowed: state freed on watermark".to_string()
            } else if let Some([l, r]) = j.interval_ms {
                format!("interval: state freed {l} ms (left), {r} ms (right) after the watermark")
            } else {
                match j.state_ttl_ms {
                    Some(ttl) => format!("state ttl {ttl} ms"),
                    None => "state kept until rows max (no ttl)".to_string(),
                }
            };
            let filter = j.filter.as_ref().map(|f| format!(" where {f}")).unwrap_or_default();
            format!(
                "{} join on {}{filter}; {state}; rows max {}",
                j.kind.describe(),
                pairs.join(" AND "),
                j.state_rows_max
            )
        }
        OperatorKind::Sink(s) => {
            let target = s
                .options
                .get("path")
                .or(s.options.get("stream"))
                .cloned()
                .unwrap_or_default();
            if target.is_empty() {
                s.connector.clone()
            } else {
                format!("{} {target}", s.connector)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EdgeSpec, OperatorSpec, Partitioning, ProjectSpec, SinkSpec};
    use arrow_schema::{DataType, Field, Schema};
    use sluice_types::{EdgeId, OperatorId, OperatorUid};
    use std::sync::Arc;

    #[test]
    fn hash_keys_read_as_the_expressions_that_compute_them() {
        let input = Arc::new(Schema::new(vec![Field::new("auction", DataType::Int64, false)]));
        let projected = Arc::new(Schema::new(vec![Field::new("_k0", DataType::Int64, true)]));
        let project = ProjectSpec {
            input_schema: input,
            filter: None,
            exprs: vec!["(auction % 10)".into()],
        };
        let sink = SinkSpec {
            changelog: false,
            connector: "blackhole".into(),
            options: Default::default(),
            event_time_column: None,
        };
        let dag = PhysicalDag::new(
            vec![
                OperatorSpec {
                    id: OperatorId(0),
                    uid: OperatorUid::UNSET,
                    kind: OperatorKind::Project(project),
                    parallelism: 2,
                    output_schema: projected.clone(),
                },
                OperatorSpec {
                    id: OperatorId(1),
                    uid: OperatorUid::UNSET,
                    kind: OperatorKind::Sink(sink),
                    parallelism: 1,
                    output_schema: projected,
                },
            ],
            vec![EdgeSpec {
                id: EdgeId(0),
                from: OperatorId(0),
                to: OperatorId(1),
                partitioning: Partitioning::Hash(vec![0]),
            }],
        );
        let mut dag = dag;
        dag.assign_uids();
        let rows = explain_rows(&dag);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1][5], "op 0 hash((auction % 10))");
        assert_eq!(rows[0][4], "(auction % 10)");
        assert_eq!(rows[1][4], "blackhole");
        assert_eq!(rows[0][1], format!("{:016x}", dag.operators[0].uid.0)[..8]);
    }
}
