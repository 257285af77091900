//! What changes when a running pipeline's DAG is replaced by another
//! (`ALTER PIPELINE … AS`, `SET PARALLELISM`): which operators are kept,
//! replaced, added or removed, what happens to each one's state, and
//! whether the change must be refused. Pure: `EXPLAIN ALTER` prints it,
//! the master applies it.
//!
//! Matching, in order:
//!
//! 1. an operator whose uid is in both DAGs is **kept**: its spec and its
//!    whole upstream are unchanged ([`crate::identity`]), so its state is
//!    its own (redistributed by key group if its parallelism changed);
//! 2. the remaining operators are paired from the sinks up: the sinks of
//!    the same connector, then, for every pair, their inputs in order
//!    when they are of the same kind. A pair is **replaced**: its state
//!    moves to the new operator when it has the same shape (a window with
//!    the same kind, sizes, keys and aggregates over inputs of the same
//!    types; a join with the same sides; a source of the same stream and
//!    options; a sink of the same connector and options), otherwise it
//!    must be reset, which is refused unless the user asks for it;
//! 3. what is left of the new DAG is **added** (starts empty), of the old
//!    one **removed** (its state is dropped).

use crate::{OperatorKind, OperatorSpec, Partitioning, PhysicalDag};
use serde::{Deserialize, Serialize};
use sluice_types::{OperatorId, OperatorUid};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What happens to one operator.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Kept,
    Replaced,
    Added,
    Removed,
}

impl Change {
    pub fn name(self) -> &'static str {
        match self {
            Change::Kept => "kept",
            Change::Replaced => "replaced",
            Change::Added => "added",
            Change::Removed => "removed",
        }
    }
}

/// What happens to one operator's state.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StateFate {
    /// A stateless operator (a projection).
    None,
    /// Keeps its own state.
    Kept,
    /// Its state moves from the operator it replaces.
    Moved,
    /// Starts empty although the operator it replaces had state.
    Reset,
    /// Starts empty: a new operator, or a sink whose options changed (what
    /// the old one wrote is committed at the switch).
    Fresh,
    /// Its state is dropped with it.
    Dropped,
}

impl StateFate {
    pub fn name(self) -> &'static str {
        match self {
            StateFate::None => "none",
            StateFate::Kept => "kept",
            StateFate::Moved => "moved",
            StateFate::Reset => "reset",
            StateFate::Fresh => "fresh",
            StateFate::Dropped => "dropped",
        }
    }
}

/// One operator of the diff.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DiffLine {
    pub change: Change,
    pub state: StateFate,
    /// The operator's kind (`window_aggregate`, …).
    pub kind: String,
    /// Its uid in the new DAG (`None` when removed).
    pub uid: Option<OperatorUid>,
    /// The uid of the operator it replaces or was (`None` when added).
    pub old_uid: Option<OperatorUid>,
    /// Its number in the new DAG (in the old one when removed).
    pub operator: u32,
    pub parallelism: u32,
    pub old_parallelism: Option<u32>,
    /// Why, in words.
    pub detail: String,
}

impl DiffLine {
    /// One line of text: `kept window_aggregate 1a2b3c4d (state kept)`.
    pub fn text(&self) -> String {
        let uid = self.uid.or(self.old_uid).map(OperatorUid::short).unwrap_or_default();
        let mut out = format!(
            "{} {} {uid} (state {})",
            self.change.name(),
            self.kind,
            self.state.name()
        );
        if !self.detail.is_empty() {
            out.push_str(": ");
            out.push_str(&self.detail);
        }
        out
    }
}

/// The whole diff of two DAGs.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DagDiff {
    /// The new DAG's operators in its order, then the removed ones.
    pub lines: Vec<DiffLine>,
    /// Why the change cannot be applied (empty: it can).
    pub refused: Vec<String>,
}

/// Where the operators of a new version find their state in the
/// checkpoint the old version stopped at.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StateHandoff {
    /// The checkpoint the old version stopped at.
    pub checkpoint: u64,
    /// New uid → the old uid whose state it restores (replaced operators
    /// whose state moves).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub moves: BTreeMap<OperatorUid, OperatorUid>,
    /// New uids that start empty although the checkpoint may hold state
    /// under them.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub reset: BTreeSet<OperatorUid>,
}

impl StateHandoff {
    /// The uid whose stored state the new operator `uid` restores, or
    /// `None` when it starts empty.
    pub fn source_of(&self, uid: OperatorUid) -> Option<OperatorUid> {
        if self.reset.contains(&uid) {
            return None;
        }
        Some(self.moves.get(&uid).copied().unwrap_or(uid))
    }
}

impl DagDiff {
    /// True when nothing but parallelism changed and nothing is refused.
    pub fn is_empty(&self) -> bool {
        self.lines
            .iter()
            .all(|l| l.change == Change::Kept && l.old_parallelism == Some(l.parallelism))
    }

    /// How the new version's state is found in checkpoint `checkpoint`.
    pub fn handoff(&self, checkpoint: u64) -> StateHandoff {
        let mut handoff = StateHandoff {
            checkpoint,
            ..StateHandoff::default()
        };
        for line in &self.lines {
            let Some(uid) = line.uid else { continue };
            match line.state {
                StateFate::Moved => {
                    if let Some(old) = line.old_uid {
                        handoff.moves.insert(uid, old);
                    }
                }
                StateFate::Reset | StateFate::Fresh => {
                    handoff.reset.insert(uid);
                }
                _ => {}
            }
        }
        handoff
    }

    /// The diff as lines of text (SHOW PIPELINE HISTORY, logs).
    pub fn text(&self) -> Vec<String> {
        self.lines.iter().map(DiffLine::text).collect()
    }
}

/// Source options that only say where a reader starts when it has no
/// restored position (Kafka's start mode; a rewind sets them): a source
/// whose other options are unchanged keeps its positions across a change
/// of these.
pub const STARTUP_OPTIONS: [&str; 3] = [
    "scan.startup.mode",
    "scan.startup.timestamp",
    "scan.startup.timestamp-millis",
];

/// How a change treats state whose shape changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetPolicy {
    /// Refuse the change (the default).
    Refuse,
    /// `WITH (state = 'reset')`: start such operators empty.
    ResetChanged,
    /// A rewound source (`RESET SOURCE`): every replaced operator that
    /// holds state, except sinks, starts empty — it is rebuilt from the
    /// re-read input.
    ResetReplaced,
}

/// The diff from `old` to `new` (see the module doc).
pub fn diff(old: &PhysicalDag, new: &PhysicalDag, policy: ResetPolicy) -> DagDiff {
    let pairs = match_operators(old, new);
    let mut out = DagDiff::default();
    let paired_old: BTreeSet<OperatorId> = pairs.values().map(|(o, _)| *o).collect();
    for op in &new.operators {
        let line = match pairs.get(&op.id) {
            Some((old_id, kept)) => {
                let before = old.operator(*old_id).expect("paired operator exists");
                paired_line(before, op, *kept, policy, &mut out.refused)
            }
            None => DiffLine {
                change: Change::Added,
                state: if stateful(op) {
                    StateFate::Fresh
                } else {
                    StateFate::None
                },
                kind: op.kind.name().to_string(),
                uid: Some(op.uid),
                old_uid: None,
                operator: op.id.0,
                parallelism: op.parallelism,
                old_parallelism: None,
                detail: added_detail(op),
            },
        };
        out.lines.push(line);
    }
    for op in old.operators.iter().filter(|o| !paired_old.contains(&o.id)) {
        out.lines.push(DiffLine {
            change: Change::Removed,
            state: if stateful(op) {
                StateFate::Dropped
            } else {
                StateFate::None
            },
            kind: op.kind.name().to_string(),
            uid: None,
            old_uid: Some(op.uid),
            operator: op.id.0,
            parallelism: op.parallelism,
            old_parallelism: Some(op.parallelism),
            detail: String::new(),
        });
    }
    out
}

/// New operator id → (old operator id, kept by uid).
fn match_operators(old: &PhysicalDag, new: &PhysicalDag) -> HashMap<OperatorId, (OperatorId, bool)> {
    let old_by_uid: HashMap<OperatorUid, OperatorId> = old.operators.iter().map(|o| (o.uid, o.id)).collect();
    let mut pairs: HashMap<OperatorId, (OperatorId, bool)> = HashMap::new();
    let mut taken: BTreeSet<OperatorId> = BTreeSet::new();
    for op in &new.operators {
        if let Some(o) = old_by_uid.get(&op.uid) {
            pairs.insert(op.id, (*o, true));
            taken.insert(*o);
        }
    }
    // From the sinks up (operators are in topological order).
    for op in new.operators.iter().rev() {
        if !pairs.contains_key(&op.id)
            && let OperatorKind::Sink(sink) = &op.kind
            && let Some(o) = old.operators.iter().find(|o| {
                !taken.contains(&o.id) && matches!(&o.kind, OperatorKind::Sink(s) if s.connector == sink.connector)
            })
        {
            pairs.insert(op.id, (o.id, false));
            taken.insert(o.id);
        }
        let Some((o, _)) = pairs.get(&op.id).copied() else {
            continue;
        };
        let new_inputs = new.inputs_of(op.id);
        let old_inputs = old.inputs_of(o);
        for (ne, oe) in new_inputs.iter().zip(old_inputs.iter()) {
            if pairs.contains_key(&ne.from) || taken.contains(&oe.from) {
                continue;
            }
            let (Some(nf), Some(of)) = (new.operator(ne.from), old.operator(oe.from)) else {
                continue;
            };
            if nf.kind.name() == of.kind.name() {
                pairs.insert(nf.id, (of.id, false));
                taken.insert(of.id);
            }
        }
    }
    pairs
}

fn stateful(op: &OperatorSpec) -> bool {
    !matches!(op.kind, OperatorKind::Project(_))
}

fn added_detail(op: &OperatorSpec) -> String {
    match &op.kind {
        OperatorKind::Source(s) => format!("reads stream {} from its start position", s.stream),
        OperatorKind::Sink(s) => format!("writes to {}", s.connector),
        _ => String::new(),
    }
}

fn parallelism_note(before: &OperatorSpec, after: &OperatorSpec) -> Option<String> {
    (before.parallelism != after.parallelism).then(|| {
        let how = match after.kind {
            OperatorKind::WindowAggregate(_)
            | OperatorKind::GroupAggregate(_)
            | OperatorKind::TopN(_)
            | OperatorKind::OverAggregate(_)
            | OperatorKind::Join(_) => ", state redistributed by key group",
            OperatorKind::Source(_) => ", partitions re-split",
            _ => "",
        };
        format!("parallelism {} → {}{how}", before.parallelism, after.parallelism)
    })
}

fn paired_line(
    before: &OperatorSpec,
    after: &OperatorSpec,
    kept: bool,
    policy: ResetPolicy,
    refused: &mut Vec<String>,
) -> DiffLine {
    let mut notes: Vec<String> = Vec::new();
    let state = if kept {
        if stateful(after) {
            StateFate::Kept
        } else {
            StateFate::None
        }
    } else {
        match same_state_shape(before, after) {
            Shape::Stateless => StateFate::None,
            Shape::Same | Shape::Different(_)
                if policy == ResetPolicy::ResetReplaced && !matches!(after.kind, OperatorKind::Sink(_)) =>
            {
                notes.push("rebuilt from the rewound input".into());
                StateFate::Reset
            }
            Shape::Same => StateFate::Moved,
            Shape::SinkChanged => {
                notes.push("its options changed; the old sink committed everything at the switch".into());
                StateFate::Fresh
            }
            Shape::Different(why) => {
                if policy != ResetPolicy::Refuse {
                    notes.push(why);
                    StateFate::Reset
                } else {
                    refused.push(format!(
                        "{} {}: its state has another shape ({why}); add WITH (state = 'reset') to start it empty",
                        after.kind.name(),
                        before.uid.short()
                    ));
                    notes.push(why);
                    StateFate::Reset
                }
            }
        }
    };
    if !kept && state != StateFate::Reset {
        notes.insert(0, "its spec or an upstream operator changed".into());
    }
    // A source or sink keeps its parallelism unless the parallelism pass
    // changed it; kept or not, say when it changed.
    notes.extend(parallelism_note(before, after));
    DiffLine {
        change: if kept { Change::Kept } else { Change::Replaced },
        state,
        kind: after.kind.name().to_string(),
        uid: Some(after.uid),
        old_uid: Some(before.uid),
        operator: after.id.0,
        parallelism: after.parallelism,
        old_parallelism: Some(before.parallelism),
        detail: notes.join("; "),
    }
}

enum Shape {
    Stateless,
    Same,
    /// A sink of the same connector with other options.
    SinkChanged,
    Different(String),
}

fn types_of(schema: &arrow_schema::Schema) -> Vec<arrow_schema::DataType> {
    schema.fields().iter().map(|f| f.data_type().clone()).collect()
}

/// Whether the state `before` holds can be restored by `after`.
fn same_state_shape(before: &OperatorSpec, after: &OperatorSpec) -> Shape {
    match (&before.kind, &after.kind) {
        (_, OperatorKind::Project(_)) => Shape::Stateless,
        (OperatorKind::Source(a), OperatorKind::Source(b)) => {
            let positional = |o: &BTreeMap<String, String>| {
                o.iter()
                    .filter(|(k, _)| !STARTUP_OPTIONS.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<BTreeMap<_, _>>()
            };
            if a.stream == b.stream && a.connector == b.connector && positional(&a.options) == positional(&b.options) {
                Shape::Same
            } else {
                Shape::Different(format!(
                    "the source reads {} with other options; its position would not apply",
                    b.stream
                ))
            }
        }
        (OperatorKind::WindowAggregate(a), OperatorKind::WindowAggregate(b)) => {
            if a.window != b.window {
                Shape::Different("another window".into())
            } else if a.key_columns != b.key_columns || a.time_column != b.time_column {
                Shape::Different("other GROUP BY keys".into())
            } else if a.aggregates != b.aggregates {
                Shape::Different("other aggregates".into())
            } else if types_of(&a.input_schema) != types_of(&b.input_schema) {
                Shape::Different("its input columns have other types".into())
            } else {
                Shape::Same
            }
        }
        (OperatorKind::GroupAggregate(a), OperatorKind::GroupAggregate(b)) => {
            if a.op_column != b.op_column {
                Shape::Different("its input is a changelog in one version only".into())
            } else if a.key_columns != b.key_columns {
                Shape::Different("other GROUP BY keys".into())
            } else if a.aggregates != b.aggregates {
                Shape::Different("other aggregates".into())
            } else if types_of(&a.input_schema) != types_of(&b.input_schema) {
                Shape::Different("its input columns have other types".into())
            } else {
                Shape::Same
            }
        }
        (OperatorKind::TopN(a), OperatorKind::TopN(b)) => {
            if a.partition_columns != b.partition_columns || a.order != b.order || a.limit != b.limit {
                Shape::Different("another partition, order or number of rows".into())
            } else if types_of(&a.input_schema) != types_of(&b.input_schema) {
                Shape::Different("its input columns have other types".into())
            } else {
                Shape::Same
            }
        }
        (OperatorKind::OverAggregate(a), OperatorKind::OverAggregate(b)) => {
            if a.partition_columns != b.partition_columns
                || a.time_column != b.time_column
                || a.frame != b.frame
                || a.aggregates != b.aggregates
                || a.output_columns != b.output_columns
                || a.op_column != b.op_column
            {
                Shape::Different("another partition, frame or aggregates".into())
            } else if types_of(&a.input_schema) != types_of(&b.input_schema) {
                Shape::Different("its input columns have other types".into())
            } else {
                Shape::Same
            }
        }
        (OperatorKind::Join(a), OperatorKind::Join(b)) => {
            let side = |x: &crate::JoinSide, y: &crate::JoinSide| {
                x.keys == y.keys
                    && x.time_column == y.time_column
                    && x.output_columns == y.output_columns
                    && x.op_column == y.op_column
                    && types_of(&x.schema) == types_of(&y.schema)
            };
            if side(&a.left, &b.left)
                && side(&a.right, &b.right)
                && a.windowed == b.windowed
                && a.kind == b.kind
                && a.interval_ms == b.interval_ms
            {
                Shape::Same
            } else {
                Shape::Different("another join condition or other join inputs".into())
            }
        }
        (OperatorKind::Sink(a), OperatorKind::Sink(b)) => {
            if a.connector == b.connector && a.options == b.options {
                Shape::Same
            } else {
                Shape::SinkChanged
            }
        }
        _ => Shape::Different("another kind of operator".into()),
    }
}

/// Why an operator's parallelism cannot be set, if it cannot.
/// `source_rescalable` says whether a source's connector can re-split its
/// partitions.
fn rescalable(op: &OperatorSpec, source_rescalable: &dyn Fn(&crate::SourceSpec) -> bool) -> Result<(), String> {
    match &op.kind {
        OperatorKind::Source(s) if source_rescalable(s) => Ok(()),
        OperatorKind::WindowAggregate(w) if !w.key_columns.is_empty() => Ok(()),
        OperatorKind::GroupAggregate(g) if !g.key_columns.is_empty() => Ok(()),
        OperatorKind::Join(_) => Ok(()),
        OperatorKind::WindowAggregate(_) => {
            Err("a window without GROUP BY keys holds every row's state in one instance".into())
        }
        OperatorKind::GroupAggregate(_) => {
            Err("an aggregate without GROUP BY keys holds its one group in one instance".into())
        }
        OperatorKind::TopN(t) if !t.partition_columns.is_empty() => Ok(()),
        OperatorKind::TopN(_) => Err("a top-N without PARTITION BY holds its one list in one instance".into()),
        OperatorKind::OverAggregate(o) if !o.partition_columns.is_empty() => Ok(()),
        OperatorKind::OverAggregate(_) => {
            Err("an OVER aggregate without PARTITION BY holds its one partition in one instance".into())
        }
        OperatorKind::Source(s) => Err(format!(
            "a {} source reads its stream at the parallelism it started with (Kafka sources re-split their partitions)",
            s.connector
        )),
        OperatorKind::Project(_) => Err("a filter/projection runs at its input's parallelism".into()),
        OperatorKind::Sink(_) => Err("a sink runs as one instance".into()),
    }
}

/// The parallelism changes of `ALTER PIPELINE … SET PARALLELISM n`
/// (`operator: None`: every keyed window and join, and every source whose
/// connector can re-split its partitions) and `… ALTER OPERATOR id SET
/// PARALLELISM n`. The filters/projections behind a changed operator follow
/// it (they run in its task); edges into the sink are re-chosen as the
/// planner chooses them. Uids do not change.
pub fn set_parallelism(
    dag: &PhysicalDag,
    operator: Option<OperatorId>,
    n: u32,
    source_rescalable: &dyn Fn(&crate::SourceSpec) -> bool,
) -> Result<PhysicalDag, String> {
    if n == 0 || n > dag.key_groups {
        return Err(format!(
            "parallelism must be between 1 and {} (the pipeline's key groups)",
            dag.key_groups
        ));
    }
    let targets: Vec<OperatorId> = match operator {
        Some(id) => {
            let op = dag
                .operator(id)
                .ok_or_else(|| format!("the pipeline has no operator {id} (see EXPLAIN PIPELINE)"))?;
            rescalable(op, source_rescalable).map_err(|why| {
                format!(
                    "cannot set the parallelism of operator {id} ({}): {why}",
                    op.kind.name()
                )
            })?;
            vec![id]
        }
        None => dag
            .operators
            .iter()
            .filter(|o| rescalable(o, source_rescalable).is_ok())
            .map(|o| o.id)
            .collect(),
    };
    let mut out = dag.clone();
    let mut todo = targets;
    while let Some(id) = todo.pop() {
        if let Some(op) = out.operators.iter_mut().find(|o| o.id == id) {
            op.parallelism = n;
        }
        for e in dag.outputs_of(id) {
            let to = dag.operator(e.to).expect("edge target exists");
            if e.partitioning == Partitioning::Forward && matches!(to.kind, OperatorKind::Project(_)) {
                todo.push(e.to);
            }
        }
    }
    let parallelism: HashMap<OperatorId, u32> = out.operators.iter().map(|o| (o.id, o.parallelism)).collect();
    for e in &mut out.edges {
        let to = dag.operator(e.to).expect("edge target exists");
        if matches!(to.kind, OperatorKind::Sink(_)) {
            e.partitioning = if parallelism[&e.from] == 1 {
                Partitioning::Forward
            } else {
                Partitioning::Single
            };
        }
    }
    Ok(out)
}
