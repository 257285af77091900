//! Operator, edge and DAG specifications.

use arrow_schema::{Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use sluice_types::{EdgeId, OperatorId, OperatorUid};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A pipeline's dataflow: operators in topological order and their edges.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PhysicalDag {
    pub operators: Vec<OperatorSpec>,
    pub edges: Vec<EdgeSpec>,
    /// How many key groups hash-partitioned edges route by, and keyed
    /// state is stored by ([`crate::key_groups`]); a power of two. DAGs
    /// stored before key groups existed get the default.
    #[serde(default = "key_groups_default")]
    pub key_groups: u32,
}

fn key_groups_default() -> u32 {
    crate::KEY_GROUPS_DEFAULT
}

impl PhysicalDag {
    /// A DAG of `operators` and `edges` with the default key groups (uids
    /// as the operators carry them: see [`PhysicalDag::assign_uids`]).
    pub fn new(operators: Vec<OperatorSpec>, edges: Vec<EdgeSpec>) -> Self {
        PhysicalDag {
            operators,
            edges,
            key_groups: crate::KEY_GROUPS_DEFAULT,
        }
    }

    /// The key columns of the hash exchange into `id`, when every input of
    /// `id` is hash-partitioned (one list per input): its state is keyed
    /// and stored per key group. None for an operator whose rows are not
    /// routed by key (its state is per instance).
    pub fn input_keys(&self, id: OperatorId) -> Option<Vec<Vec<usize>>> {
        let inputs = self.inputs_of(id);
        if inputs.is_empty() {
            return None;
        }
        inputs
            .iter()
            .map(|e| match &e.partitioning {
                Partitioning::Hash(cols) => Some(cols.clone()),
                _ => None,
            })
            .collect()
    }
    /// The operator with `id`.
    pub fn operator(&self, id: OperatorId) -> Option<&OperatorSpec> {
        self.operators.iter().find(|o| o.id == id)
    }
    /// Edges into `id`, in input order.
    pub fn inputs_of(&self, id: OperatorId) -> Vec<&EdgeSpec> {
        self.edges.iter().filter(|e| e.to == id).collect()
    }
    /// Edges out of `id`.
    pub fn outputs_of(&self, id: OperatorId) -> Vec<&EdgeSpec> {
        self.edges.iter().filter(|e| e.from == id).collect()
    }
    /// The operator whose task operator `id` runs in, if it is chained
    /// (operator chaining): a filter/projection whose only input is a
    /// forward edge runs on its upstream's output in the upstream's task.
    pub fn chained_into(&self, id: OperatorId) -> Option<OperatorId> {
        let op = self.operator(id)?;
        if !matches!(op.kind, OperatorKind::Project(_)) {
            return None;
        }
        match self.inputs_of(id).as_slice() {
            [e] if e.partitioning == Partitioning::Forward => Some(e.from),
            _ => None,
        }
    }
    /// True when operator `id` emits a changelog (rows with an
    /// [`OP_COLUMN`] whose updates retract earlier rows) rather than
    /// append-only rows: an aggregate without a window, and the
    /// filters/projections and sink after it.
    pub fn updating(&self, id: OperatorId) -> bool {
        match self.operator(id).map(|o| &o.kind) {
            Some(OperatorKind::GroupAggregate(_) | OperatorKind::TopN(_)) => true,
            Some(OperatorKind::OverAggregate(o)) => o.op_column.is_some(),
            Some(OperatorKind::Join(j)) => j.updating(),
            Some(OperatorKind::Project(_) | OperatorKind::Sink(_)) => {
                self.inputs_of(id).iter().any(|e| self.updating(e.from))
            }
            _ => false,
        }
    }

    /// Source operators.
    pub fn sources(&self) -> impl Iterator<Item = &OperatorSpec> {
        self.operators
            .iter()
            .filter(|o| matches!(o.kind, OperatorKind::Source(_)))
    }
}

/// One operator of the DAG; it runs as `parallelism` task instances.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OperatorSpec {
    /// The planner's number for the operator (its position): names it in
    /// EXPLAIN and the metrics of one deployment.
    pub id: OperatorId,
    /// Its stable identity ([`crate::identity`]): what its state is stored
    /// under. Unset in DAGs stored before uids; filled on load.
    #[serde(default, skip_serializing_if = "OperatorUid::is_unset")]
    pub uid: OperatorUid,
    pub kind: OperatorKind,
    pub parallelism: u32,
    /// The schema of the rows this operator emits (for sinks: of rows it receives).
    pub output_schema: SchemaRef,
}

/// What an operator does.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub enum OperatorKind {
    Source(SourceSpec),
    /// Filter then project, with DataFusion scalar expressions.
    Project(ProjectSpec),
    WindowAggregate(WindowAggSpec),
    /// Aggregate per key without a window: an updating result (a changelog).
    GroupAggregate(GroupAggSpec),
    /// The first rows per partition in an order (`ROW_NUMBER() … <= N`):
    /// top-N and deduplication, a changelog.
    TopN(TopNSpec),
    /// Aggregates over a frame of each row's preceding rows in its
    /// partition, in event-time order (`… OVER (PARTITION BY … ORDER BY ts
    /// ROWS | RANGE BETWEEN … PRECEDING AND CURRENT ROW)`): append-only.
    OverAggregate(OverAggSpec),
    /// Equi-join of two streams, inner or outer (input 0 = left, input 1 = right).
    Join(JoinSpec),
    Sink(SinkSpec),
}

impl OperatorKind {
    /// Every kind's [`name`](Self::name): the variant's name in snake case,
    /// in declaration order (a test checks both against the enum). What
    /// the HTTP API's OpenAPI document lists as an operator's `kind`.
    pub const NAMES: [&'static str; 8] = [
        "source",
        "project",
        "window_aggregate",
        "group_aggregate",
        "top_n",
        "over_aggregate",
        "join",
        "sink",
    ];

    /// Short name for EXPLAIN and metrics.
    pub fn name(&self) -> &'static str {
        let [
            source,
            project,
            window_aggregate,
            group_aggregate,
            top_n,
            over_aggregate,
            join,
            sink,
        ] = Self::NAMES;
        match self {
            OperatorKind::Source(_) => source,
            OperatorKind::Project(_) => project,
            OperatorKind::WindowAggregate(_) => window_aggregate,
            OperatorKind::GroupAggregate(_) => group_aggregate,
            OperatorKind::TopN(_) => top_n,
            OperatorKind::OverAggregate(_) => over_aggregate,
            OperatorKind::Join(_) => join,
            OperatorKind::Sink(_) => sink,
        }
    }
}

/// Event time of a source: which column, and how late rows may be.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WatermarkSpec {
    /// Index of the event-time column (a Timestamp column) in the source schema.
    pub column: usize,
    /// `WATERMARK FOR col AS col - INTERVAL …`: the watermark trails the
    /// maximum event time by this much.
    pub delay_ms: i64,
}

/// How long a source partition may go without data before it stops holding
/// the watermark back, unless a stream's `'idle.timeout'` says otherwise.
pub const IDLE_TIMEOUT_MS_DEFAULT: u64 = 5_000;

/// The stream option that bounds how far (in event time) a source instance
/// may run ahead of its slowest sibling: a duration, or `off`. Flink's name.
pub const ALIGNMENT_OPTION: &str = "scan.watermark.alignment.max-drift";

/// The drift sources are aligned to when the stream does not say, in
/// pipelines whose state is released by watermarks (windows, joins).
pub const ALIGNMENT_MAX_DRIFT_MS_DEFAULT: u64 = 1_000;

/// What a stream's [`ALIGNMENT_OPTION`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlignmentSetting {
    /// Absent: aligned by [`ALIGNMENT_MAX_DRIFT_MS_DEFAULT`] where watermarks
    /// release state, not aligned otherwise.
    Default,
    Off,
    MaxDriftMs(u64),
}

impl AlignmentSetting {
    /// Parses the stream's options; the error is the message for the user.
    pub fn from_options(options: &BTreeMap<String, String>) -> Result<Self, String> {
        let Some(v) = options.get(ALIGNMENT_OPTION) else {
            return Ok(AlignmentSetting::Default);
        };
        if v.trim().eq_ignore_ascii_case("off") {
            return Ok(AlignmentSetting::Off);
        }
        sluice_types::parse_duration_ms(v)
            .map(AlignmentSetting::MaxDriftMs)
            .ok_or_else(|| {
                format!("option '{ALIGNMENT_OPTION}' must be a duration like '1s' or '500ms', or 'off', got '{v}'")
            })
    }
}

/// Reads a stream from a connector.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SourceSpec {
    /// The stream's name (for memory logs: the log's name).
    pub stream: String,
    /// `memory`, `nexmark`, …
    pub connector: String,
    /// The `WITH (…)` options, keys lower-cased.
    pub options: BTreeMap<String, String>,
    pub watermark: Option<WatermarkSpec>,
    /// A source partition without data for this long stops holding the watermark back.
    pub idle_timeout_ms: u64,
    /// Computed columns (`ts AS TO_TIMESTAMP_LTZ(seq, 3)`): evaluated in the
    /// source task over the connector's columns, before watermarks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub computed: Vec<ComputedColumn>,
    /// Columns of the stream's schema that no operator of the query reads
    /// (column pruning). The schema stays whole; a connector may fill these
    /// with any value of the column's type instead of producing them — the
    /// Nexmark generator leaves such strings empty rather than composing
    /// them. Never the event-time column or an input of a computed column.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<usize>,
    /// Watermark alignment: an instance whose watermark is more than this
    /// many ms ahead of its slowest active sibling reads nothing until it is
    /// not (None: instances read independently).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alignment_max_drift_ms: Option<u64>,
}

/// A column of a stream computed from its other columns.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ComputedColumn {
    /// Index of the column in the stream's schema.
    pub column: usize,
    /// SQL expression text over the stream's other (connector) columns.
    pub expr: String,
}

impl SourceSpec {
    /// The schema a connector produces: `schema` without the computed columns.
    pub fn connector_schema(&self, schema: &SchemaRef) -> SchemaRef {
        without_computed(schema, &self.computed)
    }
}

/// `schema` without the `computed` columns: what a connector produces.
pub fn without_computed(schema: &SchemaRef, computed: &[ComputedColumn]) -> SchemaRef {
    if computed.is_empty() {
        return schema.clone();
    }
    let fields: Vec<_> = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(i, _)| !computed.iter().any(|c| c.column == *i))
        .map(|(_, f)| f.clone())
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Filter, then compute output columns. Expressions are SQL text over
/// `input_schema` (unqualified column names, quoted where needed).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProjectSpec {
    pub input_schema: SchemaRef,
    pub filter: Option<String>,
    /// One expression per output column, in output order.
    pub exprs: Vec<String>,
}

/// The window of a window aggregate, sizes in milliseconds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum WindowKind {
    Tumble { size_ms: i64 },
    Hop { slide_ms: i64, size_ms: i64 },
    Session { gap_ms: i64 },
}

impl WindowKind {
    /// A HOP whose size is not its slide is aggregated in panes of
    /// `gcd(slide, size)` that its windows are merged from: their length.
    pub fn pane_ms(&self) -> Option<i64> {
        match *self {
            WindowKind::Hop { slide_ms, size_ms } if slide_ms != size_ms => {
                let (mut a, mut b) = (slide_ms, size_ms);
                while b != 0 {
                    (a, b) = (b, a % b);
                }
                Some(a)
            }
            _ => None,
        }
    }
}

/// One aggregate function call.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AggregateCall {
    /// DataFusion aggregate function name (`count`, `sum`, `min`, `max`, `avg`, …).
    pub function: String,
    /// Input column indices of the arguments (none for `count(*)`).
    pub args: Vec<usize>,
    pub distinct: bool,
}

/// Group rows into event-time windows per key and aggregate them; emit each
/// window's rows once, when the low watermark passes its end.
///
/// Input rows are `[time, key columns…, aggregate argument columns…]` as
/// laid out by the planner; output rows are
/// `[window_start, window_end, keys…, aggregates…]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WindowAggSpec {
    pub input_schema: SchemaRef,
    pub window: WindowKind,
    /// Index of the event-time column in the input.
    pub time_column: usize,
    pub key_columns: Vec<usize>,
    pub aggregates: Vec<AggregateCall>,
    /// Bound on open (window, key) groups held by one instance; a row that
    /// would exceed it fails the pipeline with a clear error.
    pub groups_max: usize,
}

/// The leading column of a changelog's rows: what the row does to the
/// result (see [`ChangeOp`]).
pub const OP_COLUMN: &str = "op";

/// What a changelog row does to an updating result (Flink's `RowKind`,
/// written as Flink, RisingWave and Materialize print it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeOp {
    /// A new row.
    Insert,
    /// The row before an update: retracted.
    UpdateBefore,
    /// The row after an update.
    UpdateAfter,
    /// A row removed.
    Delete,
}

impl ChangeOp {
    /// Every op, in the order [`ChangeOp::as_str`] lists them.
    pub const ALL: [ChangeOp; 4] = [
        ChangeOp::Insert,
        ChangeOp::UpdateBefore,
        ChangeOp::UpdateAfter,
        ChangeOp::Delete,
    ];

    /// `+I`, `-U`, `+U`, `-D`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeOp::Insert => "+I",
            ChangeOp::UpdateBefore => "-U",
            ChangeOp::UpdateAfter => "+U",
            ChangeOp::Delete => "-D",
        }
    }

    /// The op written `s`.
    pub fn parse(s: &str) -> Option<ChangeOp> {
        Self::ALL.into_iter().find(|op| op.as_str() == s)
    }

    /// True when the row leaves the result (`-U`, `-D`).
    pub fn retracts(self) -> bool {
        matches!(self, ChangeOp::UpdateBefore | ChangeOp::Delete)
    }
}

/// The aggregate functions an aggregate over a changelog can run: their
/// accumulators take retracted rows back exactly (count, sum and avg by
/// subtracting; min, max and count(DISTINCT) keep a multiset of values).
pub const RETRACTABLE_AGGREGATES: &[&str] = &["count", "sum", "avg", "min", "max", "count(DISTINCT …)"];

/// Whether aggregate `function` can run over a changelog; the error is the
/// message for the user.
pub fn check_retractable(function: &str, distinct: bool) -> Result<(), String> {
    let fits = match function {
        "count" | "min" | "max" => true,
        "sum" | "avg" => !distinct,
        _ => false,
    };
    if fits {
        return Ok(());
    }
    let call = if distinct {
        format!("{function}(DISTINCT …)")
    } else {
        function.to_string()
    };
    Err(format!(
        "{call} over an updating result is not supported yet (of an aggregate without a window \
         or a top-N: only {} take retracted rows back)",
        RETRACTABLE_AGGREGATES.join(", ")
    ))
}

/// Aggregate rows per key with no window: each input batch updates its
/// keys' groups and emits, per group it changed, the update as changelog
/// rows — `+I` for a new group, `-U` (the row emitted before) and `+U` (the
/// new row) for a changed one, nothing when the aggregates did not change.
///
/// Input rows are `[key columns…, aggregate argument columns…]`, after
/// an op column when the input is itself a changelog; output rows are
/// `[op, keys…, aggregates…]` ([`OP_COLUMN`]). Over a changelog, `-U`/`-D`
/// rows are taken back (only aggregates that can retract: count, sum,
/// avg), and a group left with no rows is deleted (`-D`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GroupAggSpec {
    pub input_schema: SchemaRef,
    /// The input's op column when the input is a changelog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_column: Option<usize>,
    pub key_columns: Vec<usize>,
    pub aggregates: Vec<AggregateCall>,
    /// Bound on groups held by one instance; a row that would exceed it
    /// fails the pipeline with a clear error.
    pub groups_max: usize,
    /// `SET state_ttl`: a group not updated for this long (processing
    /// time) is deleted (`-D`) and its state freed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_ttl_ms: Option<i64>,
}

/// One ORDER BY key of a top-N: a column, its direction and where NULLs go.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct SortKey {
    pub column: usize,
    pub descending: bool,
    pub nulls_first: bool,
}

/// `ROW_NUMBER() OVER (PARTITION BY p… ORDER BY o…) AS rn … WHERE rn <= N`
/// over an append-only input: per partition, the first `limit` rows in the
/// order (ties: the row that came first ranks first). Emits a changelog
/// `[op, input columns…, rn]`: when a batch changes a partition's list,
/// each position whose row changed emits `-U` (the row it held, with its
/// number) and `+U` (the new one), a new position `+I`. `limit` 1 is
/// deduplication: keep the first row (ascending time) or the last
/// (descending).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TopNSpec {
    pub input_schema: SchemaRef,
    pub partition_columns: Vec<usize>,
    pub order: Vec<SortKey>,
    pub limit: usize,
    /// Bound on partitions held by one instance; past it the pipeline fails.
    pub partitions_max: usize,
    /// `SET state_ttl`: a partition not changed for this long (processing
    /// time) is deleted (`-D` of its rows) and its state freed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_ttl_ms: Option<i64>,
    /// Over a changelog: its [`OP_COLUMN`], the input's last column. The
    /// operator then keeps every row (a retracted top row is replaced by
    /// the next), at most `partitions_max` rows an instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_column: Option<usize>,
}

/// An OVER aggregate: each row of the input, in event-time order once the
/// watermark passes it, with aggregates over its frame.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OverAggSpec {
    /// `[output columns…, partition keys…, aggregate arguments…]`.
    pub input_schema: SchemaRef,
    /// The first `output_columns` input columns are the output's first.
    pub output_columns: usize,
    pub partition_columns: Vec<usize>,
    /// The event-time column (the ORDER BY).
    pub time_column: usize,
    pub frame: OverFrame,
    /// One output column each, after the input's output columns.
    pub aggregates: Vec<OverAggregateCall>,
    /// Rows one instance holds (waiting for the watermark, or in frames);
    /// past it the pipeline fails.
    pub rows_max: usize,
    /// `SET state_ttl`: a partition no row reached for this long
    /// (processing time) and none waits in is forgotten (its frame or
    /// running values; a later row starts it afresh).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_ttl_ms: Option<i64>,
    /// Over a changelog: the input's [`OP_COLUMN`], its last column. Then
    /// `time_column` is the ORDER BY column (any type for ROWS frames and
    /// peers, a timestamp for a RANGE interval), every row is kept until
    /// taken back (`rows_max` of them), and the output is a changelog
    /// `[op, output columns…, aggregates…]`: a row in or out of a
    /// partition changes the aggregates of the rows whose frames hold it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_column: Option<usize>,
}

/// Which preceding rows an OVER aggregate's frame holds (always up to the
/// current row).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum OverFrame {
    /// `ROWS BETWEEN n PRECEDING AND CURRENT ROW`: the row and the `n`
    /// before it.
    Rows { preceding: u64 },
    /// `RANGE BETWEEN INTERVAL … PRECEDING AND CURRENT ROW`: rows whose
    /// time is at most `preceding_ms` before the row's, and its peers.
    Range { preceding_ms: i64 },
    /// `… BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW`: every row so far
    /// (running aggregates; with `peers`, RANGE: rows of the row's time
    /// too). Only the aggregates' running values are kept.
    Unbounded { peers: bool },
}

/// `function(arg)` over a frame: `count` (arg None: `count(*)`), `sum`,
/// `avg`, `min`, `max`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct OverAggregateCall {
    pub function: String,
    pub arg: Option<usize>,
}

/// One side of a stream join: the rows it receives and where its keys are.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JoinSide {
    pub schema: SchemaRef,
    /// Equi-join key columns (pairwise equal to the other side's keys).
    pub keys: Vec<usize>,
    /// The event-time column, if the side has one.
    pub time_column: Option<usize>,
    /// The first `output_columns` columns go to the join's output.
    pub output_columns: usize,
    /// The side is a changelog (an aggregate without a window before it):
    /// its [`OP_COLUMN`] is this column, after every other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_column: Option<usize>,
}

/// Equi-join of two streams (inner, or outer: see [`JoinKind`]); output rows are the left side's output
/// columns followed by the right side's.
///
/// State is bounded three ways: a *windowed* join (the keys pair the two
/// sides' event-time columns, e.g. both `window_end`s) frees the rows of a
/// time once the low watermark passes it; an *interval* join (its condition
/// bounds each side's event time by the other's, e.g. `a.ts BETWEEN b.ts -
/// INTERVAL '10' SECOND AND b.ts`) frees a row once the watermark shows no
/// row it could match can still come; any other join keeps a row for
/// `state_ttl_ms` (event time when both sides have one, else processing
/// time; an [updating](JoinSpec::updating) join: processing time per key).
/// `state_rows_max` caps the rows one instance holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JoinSpec {
    pub left: JoinSide,
    pub right: JoinSide,
    /// Inner, or which sides are preserved (a windowed or interval outer
    /// join emits a preserved row without a match with NULLs for the other
    /// side once it expires; any other outer join is updating).
    #[serde(default, skip_serializing_if = "JoinKind::is_inner")]
    pub kind: JoinKind,
    pub windowed: bool,
    /// An interval join: a row of side `s` can match nothing once the low
    /// watermark passes its event time plus `interval_ms[s]` (for
    /// `l.t BETWEEN r.t - a AND r.t + b`: `[a, b]`).
    #[serde(default)]
    pub interval_ms: Option<[i64; 2]>,
    pub state_ttl_ms: Option<i64>,
    pub state_rows_max: usize,
    /// An inner join's other conditions on the pair (beyond the keys; SQL
    /// over the output columns): a pair is joined only when they hold.
    /// The operator evaluates them on the columns they read before it
    /// gathers the rest, so a pair they reject is never built whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
}

impl JoinSpec {
    /// The join's result updates — a changelog `[op, left…, right…]`: a
    /// side is a changelog, or an outer join is neither windowed nor an
    /// interval join (a row emitted with NULLs is taken back once a match
    /// comes). Such a join keeps its rows until `state_ttl_ms` or
    /// `state_rows_max`.
    pub fn updating(&self) -> bool {
        self.left.op_column.is_some()
            || self.right.op_column.is_some()
            || (!self.kind.is_inner() && !self.windowed && self.interval_ms.is_none())
    }
}

/// Which rows of a join's sides appear without a match.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub enum JoinKind {
    /// Matched pairs only.
    #[default]
    Inner,
    /// Every left row: with NULLs for the right side when nothing matched.
    Left,
    /// Every right row likewise.
    Right,
    /// Both.
    Full,
}

impl JoinKind {
    pub fn is_inner(&self) -> bool {
        *self == JoinKind::Inner
    }

    /// Whether each side (left, right) keeps its rows without a match.
    pub fn preserved(&self) -> [bool; 2] {
        match self {
            JoinKind::Inner => [false, false],
            JoinKind::Left => [true, false],
            JoinKind::Right => [false, true],
            JoinKind::Full => [true, true],
        }
    }

    /// `inner`, `left outer`, `right outer`, `full outer`.
    pub fn describe(&self) -> &'static str {
        match self {
            JoinKind::Inner => "inner",
            JoinKind::Left => "left outer",
            JoinKind::Right => "right outer",
            JoinKind::Full => "full outer",
        }
    }
}

/// Writes rows somewhere.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SinkSpec {
    /// `client` (a session's result), `memory` (a derived stream's log),
    /// `file`, `blackhole`, …
    pub connector: String,
    pub options: BTreeMap<String, String>,
    /// For a derived stream: the output column carrying event time, whose
    /// watermark the sink forwards into the log.
    pub event_time_column: Option<usize>,
    /// The rows are a changelog: the first column is their [`OP_COLUMN`]
    /// (set by the planner for an updating query).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub changelog: bool,
}

/// How the rows of an edge's upstream instances reach its downstream instances.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub enum Partitioning {
    /// Instance i feeds instance i (equal parallelism).
    Forward,
    /// By hash of these columns of the upstream output.
    Hash(Vec<usize>),
    /// Everything to instance 0.
    Single,
    /// Round robin over downstream instances.
    RoundRobin,
}

impl Partitioning {
    /// Display form for EXPLAIN.
    pub fn describe(&self, schema: &Schema) -> String {
        match self {
            Partitioning::Forward => "forward".into(),
            Partitioning::Single => "single".into(),
            Partitioning::RoundRobin => "round_robin".into(),
            Partitioning::Hash(cols) => {
                let names: Vec<&str> = cols
                    .iter()
                    .map(|c| schema.fields().get(*c).map(|f| f.name().as_str()).unwrap_or("?"))
                    .collect();
                format!("hash({})", names.join(", "))
            }
        }
    }
}

/// A directed edge of the DAG.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EdgeSpec {
    pub id: EdgeId,
    pub from: OperatorId,
    pub to: OperatorId,
    pub partitioning: Partitioning,
}

/// An empty schema, for operators that emit nothing.
pub fn empty_schema() -> SchemaRef {
    Arc::new(Schema::empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::{self, Deserializer, Visitor};

    /// The variant names serde's derive gives `T`'s `deserialize_enum`, in
    /// declaration order: the enum's own list, so a new variant shows up.
    fn enum_variants<T: de::DeserializeOwned>() -> &'static [&'static str] {
        struct Probe(Option<&'static [&'static str]>);
        impl<'de> Deserializer<'de> for &mut Probe {
            type Error = de::value::Error;
            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
                Err(de::Error::custom("not an enum"))
            }
            fn deserialize_enum<V: Visitor<'de>>(
                self,
                _name: &'static str,
                variants: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Self::Error> {
                self.0 = Some(variants);
                Err(de::Error::custom("variants read"))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
                option unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier
                ignored_any
            }
        }
        let mut probe = Probe(None);
        let _ = T::deserialize(&mut probe);
        probe.0.expect("an enum")
    }

    fn snake_case(name: &str) -> String {
        let mut out = String::new();
        for (i, c) in name.chars().enumerate() {
            if c.is_uppercase() && i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        }
        out
    }

    #[test]
    fn operator_kind_names_are_every_variant_in_order() {
        let variants: Vec<String> = enum_variants::<OperatorKind>().iter().map(|v| snake_case(v)).collect();
        assert_eq!(variants, OperatorKind::NAMES);
    }
}
