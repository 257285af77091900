//! Logical plan → physical DAG.

use super::stage::{MARK_WINDOW_END, MARK_WINDOW_START, Stage, col, to_sql};
use super::{PlannedQuery, PlannerSettings, StreamCatalog, WINDOW_END, WINDOW_START};
use crate::errors::plan_error;
use crate::window_tvf::WindowTvf;
use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::logical_expr::{Aggregate, Expr, LogicalPlan, expr::AggregateFunction};
use sluice_plan::catalog::StreamDef;
use sluice_plan::{
    ALIGNMENT_MAX_DRIFT_MS_DEFAULT, AggregateCall, AlignmentSetting, EdgeSpec, GroupAggSpec, OP_COLUMN, OperatorKind,
    OperatorSpec, OverAggSpec, OverAggregateCall, OverFrame, Partitioning, PhysicalDag, ProjectSpec, SinkSpec, SortKey,
    SourceSpec, TopNSpec, WindowAggSpec, WindowKind,
};
use sluice_types::{EdgeId, Error, OperatorId, OperatorUid, Result, SqlCode};
use std::collections::HashMap;
use std::sync::Arc;

#[path = "join.rs"]
mod join;
#[path = "split_distinct.rs"]
mod split_distinct;

struct DagBuilder<'p> {
    operators: Vec<OperatorSpec>,
    edges: Vec<EdgeSpec>,
    settings: &'p PlannerSettings,
    windows: &'p [WindowTvf],
    streams: &'p HashMap<String, StreamDef>,
    catalog: &'p dyn StreamCatalog,
    /// The source operator of each stream read so far: a stream read twice
    /// in one query (a self-join, q7) is read once and fanned out.
    sources: HashMap<String, (OperatorId, u32)>,
    /// The N of a `WHERE rn <= N` over a `ROW_NUMBER()` column, set by the
    /// filter while its input (down to the window) is planned.
    top_n_limit: Option<usize>,
}

/// The most rows an OVER aggregate instance holds (waiting for the
/// watermark, or in frames).
const OVER_ROWS_MAX: usize = 10_000_000;

/// The most preceding rows of a `ROWS` frame (each row's aggregates are
/// computed over its frame).
const OVER_ROWS_PRECEDING_MAX: u64 = 10_000;

/// The most rows a top-N keeps per partition.
const TOP_N_MAX: usize = 10_000;

const OVER_UNSUPPORTED: &str = "ROW_NUMBER() OVER (PARTITION BY … ORDER BY …) is supported only filtered by WHERE rn <= N \
     in an outer query (top-N, deduplication); other OVER windows are count, sum, avg, min and max over ROWS or RANGE \
     BETWEEN … PRECEDING AND CURRENT ROW ordered by event time; for aggregates over time windows use TUMBLE, HOP or \
     SESSION in FROM";

/// True when `e` is `ROW_NUMBER() OVER (…)` (maybe aliased).
fn is_row_number(e: &Expr) -> bool {
    matches!(unaliased(e.clone()), Expr::WindowFunction(w) if w.fun.name() == "row_number")
}

/// True when column `index` of `plan`'s output is a `ROW_NUMBER()` of a
/// window under it (through aliases, projections and filters).
fn row_number_column(plan: &LogicalPlan, index: usize) -> bool {
    match plan {
        LogicalPlan::SubqueryAlias(a) => row_number_column(&a.input, index),
        LogicalPlan::Filter(f) => row_number_column(&f.input, index),
        LogicalPlan::Projection(p) => match p.expr.get(index).map(|e| unaliased(e.clone())) {
            Some(Expr::Column(c)) => p
                .input
                .schema()
                .index_of_column(&c)
                .is_ok_and(|i| row_number_column(&p.input, i)),
            _ => false,
        },
        LogicalPlan::Window(w) => {
            let n = w.input.schema().fields().len();
            index >= n && w.window_expr.get(index - n).is_some_and(is_row_number)
        }
        _ => false,
    }
}

/// The N of `rn <= N`, `rn < N + 1` or `rn = 1` among `predicate`'s
/// conjuncts, where rn is a `ROW_NUMBER()` column of `input`, and the
/// other conjuncts (the top-N's rows satisfy every such bound).
fn row_number_limit(predicate: &Expr, input: &LogicalPlan) -> Option<(usize, Option<Expr>)> {
    use datafusion::logical_expr::{BinaryExpr, Operator};
    // The analyzer compares ROW_NUMBER()'s UInt64 with an integer literal
    // through casts (to Decimal128): look through them.
    fn uncast(mut e: &Expr) -> &Expr {
        while let Expr::Cast(c) = e {
            e = &c.expr;
        }
        e
    }
    let integer = |e: &Expr| match uncast(e) {
        Expr::Literal(v, _) if v.data_type().is_integer() => v.to_string().parse::<i64>().ok(),
        _ => None,
    };
    let rn = |e: &Expr| match uncast(e) {
        Expr::Column(c) => input
            .schema()
            .index_of_column(c)
            .is_ok_and(|i| row_number_column(input, i)),
        _ => false,
    };
    let bound = |c: &Expr| match c {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (op, n) = if rn(left) {
                (*op, integer(right)?)
            } else if rn(right) {
                (op.swap()?, integer(left)?)
            } else {
                return None;
            };
            match op {
                Operator::LtEq => usize::try_from(n).ok(),
                Operator::Lt => usize::try_from(n - 1).ok(),
                Operator::Eq if n == 1 => Some(1),
                _ => None,
            }
        }
        _ => None,
    };
    let conjuncts = datafusion::logical_expr::utils::split_conjunction(predicate);
    let limit = conjuncts.iter().filter_map(|c| bound(c)).min()?;
    let rest = conjuncts
        .into_iter()
        .filter(|c| bound(c).is_none())
        .cloned()
        .reduce(Expr::and);
    Some((limit, rest))
}

/// The aggregates that ignore NULL inputs, so `FILTER (WHERE c)` can turn
/// the rows failing `c` into NULLs.
const SKIPS_NULLS: &[&str] = &[
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "stddev",
    "stddev_pop",
    "var",
    "var_pop",
    "bool_and",
    "bool_or",
    "approx_distinct",
    "median",
];

/// `e` without the aliases around it (a renamed column is the column).
fn unaliased(mut e: Expr) -> Expr {
    while let Expr::Alias(a) = e {
        e = *a.expr;
    }
    e
}

fn unsupported(what: &str) -> Error {
    Error::user(SqlCode::FeatureNotSupported, what.to_string())
}

pub(super) fn build(
    plan: &LogicalPlan,
    windows: &[WindowTvf],
    streams: &HashMap<String, StreamDef>,
    catalog: &dyn StreamCatalog,
    settings: &PlannerSettings,
    sink: SinkSpec,
) -> Result<PlannedQuery> {
    let mut b = DagBuilder {
        operators: Vec::new(),
        edges: Vec::new(),
        settings,
        windows,
        streams,
        catalog,
        sources: HashMap::new(),
        top_n_limit: None,
    };
    let (body, limit) = strip_limit(plan)?;
    let mut stage = b.plan_node(body)?;
    let mut names: Vec<String> = body.schema().fields().iter().map(|f| f.name().clone()).collect();
    // An updating result is a changelog: its rows lead with their op.
    if let Some(updater) = b.updater(stage.op) {
        if stage.input_schema.index_of(OP_COLUMN).is_err() {
            return Err(Error::internal("an updating stage without its op column"));
        }
        if !catalog.sink_accepts_changelog(&sink.connector, &sink.options) {
            return Err(Error::user(
                SqlCode::FeatureNotSupported,
                format!(
                    "a {} sink is append-only, and this query's result updates: {updater} emits a changelog \
                     (+I, -U, +U, -D rows); write it to Kafka with format 'debezium-json' or 'upsert-json', to a file, HDFS or \
                     blackhole sink (they write the op column), or query it from a session",
                    sink.connector
                ),
            ));
        }
        stage.exprs.insert(0, col(OP_COLUMN));
        names.insert(0, OP_COLUMN.to_string());
    }
    let (op, schema, parallelism) = b.materialize(&stage, &names)?;
    let event_time_column = stage.time_column.as_ref().and_then(|t| {
        stage
            .exprs
            .iter()
            .position(|e| matches!(e.clone().unalias(), Expr::Column(c) if &c.name == t))
    });
    let sink = SinkSpec {
        changelog: b.updating(stage.op),
        event_time_column,
        ..sink
    };
    let sink_op = b.add(OperatorKind::Sink(sink), 1, schema.clone());
    let partitioning = if parallelism == 1 {
        Partitioning::Forward
    } else {
        Partitioning::Single
    };
    b.connect(op, sink_op, partitioning);
    b.align_sources()?;
    let mut dag = PhysicalDag::new(b.operators, b.edges);
    dag.assign_uids();
    Ok(PlannedQuery {
        dag,
        schema,
        limit,
        event_time_column,
    })
}

fn strip_limit(plan: &LogicalPlan) -> Result<(&LogicalPlan, Option<usize>)> {
    match plan {
        LogicalPlan::Limit(limit) => {
            use datafusion::logical_expr::logical_plan::{FetchType, SkipType};
            if !matches!(limit.get_skip_type().map_err(plan_error)?, SkipType::Literal(0)) {
                return Err(unsupported("OFFSET is not supported on a continuous query"));
            }
            let fetch = match limit.get_fetch_type().map_err(plan_error)? {
                FetchType::Literal(n) => n,
                FetchType::UnsupportedExpr => return Err(unsupported("LIMIT must be a constant")),
            };
            Ok((limit.input.as_ref(), fetch))
        }
        other => Ok((other, None)),
    }
}

impl DagBuilder<'_> {
    /// Sets each source's watermark alignment: the stream's
    /// `'scan.watermark.alignment.max-drift'`, or, where watermarks release
    /// state (a window or a join), the default drift — the skew between
    /// instances would otherwise decide how much state is held. Pass-through
    /// pipelines are not aligned by default (holding an instance back would
    /// only delay its rows); nor is a source without a WATERMARK or with one
    /// instance (nothing to align).
    fn align_sources(&mut self) -> Result<()> {
        let stateful = self.operators.iter().any(|o| {
            matches!(
                o.kind,
                OperatorKind::WindowAggregate(_) | OperatorKind::Join(_) | OperatorKind::OverAggregate(_)
            )
        });
        for op in &mut self.operators {
            let parallelism = op.parallelism;
            let OperatorKind::Source(spec) = &mut op.kind else {
                continue;
            };
            let setting = AlignmentSetting::from_options(&spec.options).map_err(Error::invalid_option)?;
            spec.alignment_max_drift_ms = match setting {
                _ if spec.watermark.is_none() || parallelism < 2 => None,
                AlignmentSetting::MaxDriftMs(ms) => Some(ms),
                AlignmentSetting::Default if stateful => Some(ALIGNMENT_MAX_DRIFT_MS_DEFAULT),
                AlignmentSetting::Default | AlignmentSetting::Off => None,
            };
        }
        Ok(())
    }

    /// True when operator `id` emits a changelog (see [`PhysicalDag::updating`]).
    pub(super) fn updating(&self, id: OperatorId) -> bool {
        self.updater(id).is_some()
    }

    /// What makes operator `id`'s output a changelog, for messages (`None`
    /// when it is append-only).
    fn updater(&self, id: OperatorId) -> Option<String> {
        let dag = PhysicalDag::new(self.operators.clone(), self.edges.clone());
        if !dag.updating(id) {
            return None;
        }
        let mut at = id;
        loop {
            let op = dag.operator(at)?;
            match &op.kind {
                OperatorKind::GroupAggregate(_) => {
                    return Some(format!("the aggregate without a window (operator {})", op.id));
                }
                OperatorKind::TopN(_) => return Some(format!("the top-N of ROW_NUMBER() (operator {})", op.id)),
                OperatorKind::Join(j) if j.left.op_column.is_none() && j.right.op_column.is_none() => {
                    return Some(format!(
                        "the {} join without a window or interval (operator {})",
                        j.kind.describe(),
                        op.id
                    ));
                }
                _ => {}
            }
            at = dag.inputs_of(at).iter().find(|e| dag.updating(e.from))?.from;
        }
    }

    fn add(&mut self, kind: OperatorKind, parallelism: u32, output_schema: SchemaRef) -> OperatorId {
        let id = OperatorId(self.operators.len() as u32);
        self.operators.push(OperatorSpec {
            id,
            uid: OperatorUid::UNSET,
            kind,
            parallelism,
            output_schema,
        });
        id
    }

    /// Adds a keyed operator fed by `from` hashed on `keys` (one instance,
    /// fed whole, without keys); returns it and its parallelism.
    fn add_keyed(
        &mut self,
        kind: OperatorKind,
        from: OperatorId,
        keys: Vec<usize>,
        output_schema: SchemaRef,
    ) -> (OperatorId, u32) {
        let (parallelism, partitioning) = if keys.is_empty() {
            (1, Partitioning::Single)
        } else {
            (self.settings.parallelism, Partitioning::Hash(keys))
        };
        let op = self.add(kind, parallelism, output_schema);
        self.connect(from, op, partitioning);
        (op, parallelism)
    }

    fn connect(&mut self, from: OperatorId, to: OperatorId, partitioning: Partitioning) {
        let id = EdgeId(self.edges.len() as u32);
        self.edges.push(EdgeSpec {
            id,
            from,
            to,
            partitioning,
        });
    }

    fn plan_node(&mut self, plan: &LogicalPlan) -> Result<Stage> {
        match plan {
            LogicalPlan::TableScan(scan) => self.plan_scan(scan),
            LogicalPlan::Projection(p) => self.plan_node(&p.input)?.project(p),
            LogicalPlan::Filter(f) if matches!(f.input.as_ref(), LogicalPlan::Join(_)) => {
                let LogicalPlan::Join(j) = f.input.as_ref() else {
                    unreachable!("matched above")
                };
                self.plan_join(j, Some(&f.predicate))
            }
            // Column pruning may narrow the join's output under the filter
            // with a projection of plain columns: the filter still belongs to
            // the join (its one-side conjuncts and keys go below it).
            LogicalPlan::Filter(f)
                if matches!(f.input.as_ref(), LogicalPlan::Projection(p)
                    if matches!(p.input.as_ref(), LogicalPlan::Join(_))
                        && p.expr.iter().all(|e| matches!(e, Expr::Column(_)))) =>
            {
                let LogicalPlan::Projection(p) = f.input.as_ref() else {
                    unreachable!("matched above")
                };
                let LogicalPlan::Join(j) = p.input.as_ref() else {
                    unreachable!("matched above")
                };
                self.plan_join(j, Some(&f.predicate))?.project(p)
            }
            LogicalPlan::Filter(f) => {
                // `WHERE rn <= N` over a ROW_NUMBER(): the window below is a
                // top-N, whose rows all pass those bounds (the rest of the
                // filter applies). A bound that no window took (another
                // filter's took its own) stays in the filter.
                let (limit, rest) = row_number_limit(&f.predicate, &f.input).unzip();
                let outer = std::mem::replace(&mut self.top_n_limit, limit);
                let child = self.plan_node(&f.input);
                let taken = limit.is_some() && self.top_n_limit.is_none();
                self.top_n_limit = outer;
                let child = child?;
                let predicate = if taken {
                    rest.flatten()
                } else {
                    Some(f.predicate.clone())
                };
                let Some(predicate) = predicate else {
                    return Ok(child);
                };
                let predicate = child.substitute(&predicate, f.input.schema())?;
                let filter = Some(match child.filter.clone() {
                    Some(existing) => existing.and(predicate),
                    None => predicate,
                });
                Ok(Stage { filter, ..child })
            }
            LogicalPlan::SubqueryAlias(a) => self.plan_node(&a.input),
            LogicalPlan::Aggregate(agg) => self.plan_aggregate(agg),
            LogicalPlan::Sort(_) => Err(unsupported(
                "ORDER BY is not supported on a continuous query: a stream never ends, so it cannot be sorted",
            )),
            LogicalPlan::Limit(_) => Err(unsupported("LIMIT is supported only on the outermost query")),
            LogicalPlan::Join(j) => self.plan_join(j, None),
            // `SELECT DISTINCT …` is a GROUP BY of every column with no
            // aggregate: each new row is a +I, a repeated one changes nothing
            // (over a window TVF, grouped by its window: once per window).
            LogicalPlan::Distinct(datafusion::logical_expr::Distinct::All(input)) => {
                let columns = input.schema().columns().into_iter().map(Expr::Column).collect();
                let agg = Aggregate::try_new(input.clone(), columns, Vec::new()).map_err(plan_error)?;
                self.plan_aggregate(&agg)
            }
            LogicalPlan::Distinct(_) => Err(unsupported(
                "SELECT DISTINCT ON is not supported on a stream; use ROW_NUMBER() OVER (PARTITION BY …) with rn = 1",
            )),
            LogicalPlan::Union(u) => self.plan_union(u),
            LogicalPlan::Window(w) if w.window_expr.iter().any(is_row_number) => self.plan_top_n(w),
            LogicalPlan::Window(w) => self.plan_over(w),
            other => Err(unsupported(&format!(
                "{} is not supported in a continuous query",
                other.display()
            ))),
        }
    }

    fn plan_scan(&mut self, scan: &datafusion::logical_expr::TableScan) -> Result<Stage> {
        let table = scan.table_name.table();
        let window = self.windows.iter().position(|w| w.table == table);
        let stream_name = window.map(|w| self.windows[w].stream.as_str()).unwrap_or(table);
        let def = self
            .streams
            .get(stream_name)
            .ok_or_else(|| Error::internal(format!("unbound stream {stream_name}")))?;
        let idle_timeout_ms = def
            .options
            .get("idle.timeout")
            .and_then(|v| sluice_types::parse_duration_ms(v))
            .unwrap_or(sluice_plan::IDLE_TIMEOUT_MS_DEFAULT);
        let spec = SourceSpec {
            stream: def.name.clone(),
            connector: def.connector.clone(),
            options: def.options.clone(),
            // Set once the whole DAG is known (`align_sources`).
            alignment_max_drift_ms: None,
            watermark: def.watermark_spec(),
            idle_timeout_ms,
            computed: def.computed.clone(),
            unread: unread_columns(def, scan.projection.as_deref()),
        };
        // No more instances than the connector can read with (a memory
        // log has one partition: one reader).
        let parallelism = match self.catalog.source_readers_max(def) {
            Some(max) => self
                .settings
                .parallelism
                .min(u32::try_from(max).unwrap_or(u32::MAX))
                .max(1),
            None => self.settings.parallelism,
        };
        // A second read of the same stream shares the first one's source: its
        // output goes to every consumer (an operator may feed several edges).
        let (op, parallelism) = match self.sources.get(&def.name) {
            Some(shared) => {
                // The shared source produces what either read needs.
                if let OperatorKind::Source(first) = &mut self.operators[shared.0.0 as usize].kind {
                    first.unread.retain(|c| spec.unread.contains(c));
                }
                *shared
            }
            None => {
                let op = self.add(OperatorKind::Source(spec), parallelism, def.schema.clone());
                self.sources.insert(def.name.clone(), (op, parallelism));
                (op, parallelism)
            }
        };
        let mut exprs: Vec<Expr> = def.schema.fields().iter().map(|f| col(f.name())).collect();
        if window.is_some() {
            exprs.push(col(MARK_WINDOW_START));
            exprs.push(col(MARK_WINDOW_END));
        }
        if let Some(projection) = &scan.projection {
            exprs = projection.iter().map(|i| exprs[*i].clone()).collect();
        }
        let stage = Stage {
            op,
            parallelism,
            input_schema: def.schema.clone(),
            filter: None,
            exprs,
            time_column: def
                .event_time
                .as_ref()
                .map(|e| def.schema.field(e.column).name().clone()),
            window,
        };
        if !scan.filters.is_empty() {
            return Err(Error::internal("scan with pushed-down filters"));
        }
        Ok(stage)
    }

    /// `UNION ALL`: every branch projected to the union's columns (cast to
    /// its types), all of them feeding one pass-through operator, whose
    /// low watermark is the least of its inputs' (a task's watermark is the
    /// minimum over its input channels). The result has an event time when
    /// every branch has one in the same column. (`UNION` without ALL is a
    /// DISTINCT over this, planned by the caller as a changelog.)
    fn plan_union(&mut self, u: &datafusion::logical_expr::Union) -> Result<Stage> {
        let schema = u.schema.as_arrow();
        let names: Vec<String> = (0..schema.fields().len()).map(|i| format!("_u{i}")).collect();
        let mut branches = Vec::new();
        let mut time_columns = Vec::new();
        for input in &u.inputs {
            let child = self.plan_node(input)?;
            if let Some(updater) = self.updater(child.op) {
                return Err(unsupported(&format!(
                    "UNION ALL of an updating result is not supported yet: {updater} emits a changelog"
                )));
            }
            if child.window.is_some() {
                return Err(unsupported(
                    "UNION ALL of window TVFs is not supported; aggregate each window first, or take the UNION ALL \
                     of the streams and apply one window TVF to it in a derived stream",
                ));
            }
            let df = datafusion::common::DFSchema::try_from(child.input_schema.as_ref().clone()).map_err(plan_error)?;
            let mut exprs = Vec::with_capacity(child.exprs.len());
            for (e, field) in child.exprs.iter().zip(schema.fields()) {
                let e = unaliased(e.clone());
                let (_, have) = datafusion::logical_expr::ExprSchemable::to_field(&e, &df).map_err(plan_error)?;
                exprs.push(if have.data_type() == field.data_type() {
                    e
                } else {
                    Expr::Cast(datafusion::logical_expr::Cast::new(
                        Box::new(e),
                        field.data_type().clone(),
                    ))
                });
            }
            time_columns.push(
                child
                    .time_column
                    .as_ref()
                    .and_then(|t| exprs.iter().position(|e| matches!(e, Expr::Column(c) if &c.name == t))),
            );
            let branch = Stage { exprs, ..child };
            branches.push(self.materialize(&branch, &names)?);
        }
        let parallelism = branches.iter().map(|(_, _, p)| *p).max().unwrap_or(1);
        let union_schema = branches
            .first()
            .map(|(_, s, _)| s.clone())
            .ok_or_else(|| Error::internal("UNION without inputs"))?;
        let spec = ProjectSpec {
            input_schema: union_schema.clone(),
            filter: None,
            exprs: names.iter().map(|n| to_sql(&col(n))).collect::<Result<_>>()?,
        };
        let op = self.add(OperatorKind::Project(spec), parallelism, union_schema.clone());
        for (from, _, p) in branches {
            let partitioning = if p == parallelism {
                Partitioning::Forward
            } else {
                Partitioning::RoundRobin
            };
            self.connect(from, op, partitioning);
        }
        let time_column = match time_columns.first() {
            Some(Some(j)) if time_columns.iter().all(|t| *t == Some(*j)) => Some(names[*j].clone()),
            _ => None,
        };
        Ok(Stage {
            op,
            parallelism,
            input_schema: union_schema,
            filter: None,
            exprs: names.iter().map(|n| col(n)).collect(),
            time_column,
            window: None,
        })
    }

    /// Turns a stage into an operator (unless it is a pass-through with the
    /// same names); returns the operator, its schema and parallelism.
    fn materialize(&mut self, stage: &Stage, names: &[String]) -> Result<(OperatorId, SchemaRef, u32)> {
        let same_names = names
            .iter()
            .zip(stage.input_schema.fields())
            .all(|(n, f)| n == f.name());
        if stage.is_identity() && same_names {
            return Ok((stage.op, stage.input_schema.clone(), stage.parallelism));
        }
        let spec = ProjectSpec {
            input_schema: stage.input_schema.clone(),
            filter: stage.filter.as_ref().map(to_sql).transpose()?,
            exprs: stage.exprs.iter().map(to_sql).collect::<Result<_>>()?,
        };
        let schema = stage.output_schema(names)?;
        let op = self.add(OperatorKind::Project(spec), stage.parallelism, schema.clone());
        self.connect(stage.op, op, Partitioning::Forward);
        Ok((op, schema, stage.parallelism))
    }

    fn plan_aggregate(&mut self, agg: &Aggregate) -> Result<Stage> {
        let child = self.plan_node(&agg.input)?;
        let input_schema = agg.input.schema();
        // A window TVF scanned, or rows that already carry a window: an
        // aggregate over a window aggregate's output grouped by its event
        // time (`window_end`, maybe renamed) regroups each window's rows
        // (Nexmark q5's per-window maximum of per-auction counts).
        let tvf = match child.window {
            Some(w) => Some(&self.windows[w]),
            None => {
                let regroups = child.time_column.as_ref().is_some_and(|t| {
                    agg.group_expr.iter().any(|g| {
                        child
                            .substitute(g, input_schema)
                            .is_ok_and(|e| matches!(unaliased(e), Expr::Column(c) if &c.name == t))
                    })
                });
                if !regroups {
                    return self.plan_group_aggregate(agg, child);
                }
                None
            }
        };
        // Where each group expression goes: window_start, window_end, or key j.
        let mut slots = Vec::new();
        let mut keys = Vec::new();
        for g in &agg.group_expr {
            if matches!(g, Expr::GroupingSet(_)) {
                return Err(unsupported(
                    "GROUPING SETS, CUBE and ROLLUP are not supported on streams",
                ));
            }
            match unaliased(child.substitute(g, input_schema)?) {
                Expr::Column(c) if c.name == MARK_WINDOW_START => slots.push(col(WINDOW_START)),
                Expr::Column(c) if c.name == MARK_WINDOW_END => slots.push(col(WINDOW_END)),
                key => {
                    slots.push(col(&format!("_k{}", keys.len())));
                    keys.push(key);
                }
            }
        }
        let grouped = |c: &str| slots.iter().any(|s| matches!(s, Expr::Column(x) if x.name == c));
        if tvf.is_some() && (!grouped(WINDOW_START) || !grouped(WINDOW_END)) {
            return Err(unsupported(
                "a window aggregate must GROUP BY window_start, window_end (and any keys)",
            ));
        }
        // Sessions are per group key: Flink's `PARTITION BY` keys must be
        // grouped by, where both mean sessions per key.
        for key in tvf.iter().flat_map(|t| &t.partition_by) {
            if !keys.iter().any(|k| matches!(k, Expr::Column(c) if &c.name == key)) {
                return Err(unsupported(&format!(
                    "SESSION(… PARTITION BY {key} …) needs {key} in the GROUP BY (Sluice's sessions are per group key)"
                )));
            }
        }
        // Pre-projection: the time, the keys, then the arguments.
        let (calls, args) = self.aggregate_calls(agg, &child, 1 + keys.len())?;
        let time = child
            .time_column
            .clone()
            .ok_or_else(|| Error::internal("window over a stream without event time"))?;
        let (pre_op, pre_schema) = self.pre_project(child, Some((col(&time), "_time")), &keys, &args)?;
        let key_columns: Vec<usize> = (1..=keys.len()).collect();
        let time_type = pre_schema.field(0).data_type().clone();
        let mut fields = vec![
            Field::new(WINDOW_START, time_type.clone(), false),
            Field::new(WINDOW_END, time_type, false),
        ];
        fields.extend(key_columns.iter().map(|k| pre_schema.field(*k).clone()));
        for (i, _) in calls.iter().enumerate() {
            let logical = agg.schema.field(agg.group_expr.len() + i);
            fields.push(Field::new(format!("_a{i}"), logical.data_type().clone(), true));
        }
        let out_schema = Arc::new(Schema::new(fields));
        // Regrouping: each row's window is its own time, [t, t + 1 ms),
        // which closes once the watermark is past t, i.e. once the upstream
        // window aggregate has emitted every row of the window ending at t.
        let window = tvf.map_or(WindowKind::Tumble { size_ms: 1 }, |t| t.kind);
        // Where the output's event time is: the window's end, or (when
        // regrouping) the key that is the input's event time.
        let out_time = match tvf {
            Some(_) => WINDOW_END.to_string(),
            None => {
                let j = keys
                    .iter()
                    .position(|k| matches!(k, Expr::Column(c) if c.name == time))
                    .ok_or_else(|| Error::internal("regrouped window without its time key"))?;
                format!("_k{j}")
            }
        };
        let spec = WindowAggSpec {
            input_schema: pre_schema,
            window,
            time_column: 0,
            key_columns: key_columns.clone(),
            aggregates: calls,
            groups_max: self.settings.window_groups_max,
        };
        let parallelism = if keys.is_empty() { 1 } else { self.settings.parallelism };
        let op = self.add(OperatorKind::WindowAggregate(spec), parallelism, out_schema.clone());
        let partitioning = if keys.is_empty() {
            Partitioning::Single
        } else {
            Partitioning::Hash(key_columns)
        };
        self.connect(pre_op, op, partitioning);
        let mut exprs = slots;
        exprs.extend((0..agg.aggr_expr.len()).map(|i| col(&format!("_a{i}"))));
        Ok(Stage::new(op, parallelism, out_schema, exprs, Some(out_time)))
    }

    /// `agg(x) OVER (PARTITION BY p ORDER BY ts ROWS | RANGE BETWEEN …
    /// PRECEDING AND CURRENT ROW)`: an OVER aggregate operator over
    /// `[the input's columns…, partition keys…, arguments…, ts]`, hashed on
    /// the partition keys; its output is the input's columns and one per
    /// aggregate, append-only, with the input's event time.
    fn plan_over(&mut self, w: &datafusion::logical_expr::Window) -> Result<Stage> {
        use datafusion::logical_expr::{WindowFrameBound, WindowFrameUnits, WindowFunctionDefinition};
        let child = self.plan_node(&w.input)?;
        // Over a changelog rows are taken back: every row is kept, ordered
        // by the ORDER BY column whatever it is (no watermark orders them).
        let over_changelog = self.updating(child.op);
        if child.window.is_some() {
            return Err(unsupported(
                "an OVER aggregate over a window TVF is not supported; OVER a stream",
            ));
        }
        let time = match child.time_column.clone() {
            Some(time) => time,
            None if over_changelog => String::new(),
            None => {
                return Err(unsupported(
                    "an OVER aggregate needs ORDER BY the stream's event-time column (its WATERMARK column)",
                ));
            }
        };
        let input_schema = w.input.schema();
        let mut shape: Option<(Vec<Expr>, Expr, OverFrame)> = None;
        let mut calls = Vec::new();
        for e in &w.window_expr {
            let Expr::WindowFunction(f) = unaliased(e.clone()) else {
                return Err(unsupported(OVER_UNSUPPORTED));
            };
            let name = f.fun.name().to_string();
            let params = &f.params;
            if !matches!(f.fun, WindowFunctionDefinition::AggregateUDF(_))
                || !matches!(name.as_str(), "count" | "sum" | "avg" | "min" | "max")
                || params.distinct
                || params.filter.is_some()
                || params.args.len() > 1
            {
                return Err(unsupported(&format!(
                    "{name}(…) OVER is not supported; OVER aggregates are count, sum, avg, min and max of one \
                     argument (no DISTINCT or FILTER), and ROW_NUMBER() for a top-N"
                )));
            }
            let [order] = params.order_by.as_slice() else {
                return Err(unsupported(if over_changelog {
                    "an OVER aggregate over an updating result needs ORDER BY one column"
                } else {
                    "an OVER aggregate needs ORDER BY the stream's event-time column (its WATERMARK column), alone"
                }));
            };
            let order_expr = child.substitute(&order.expr, input_schema)?;
            if over_changelog && !order.asc {
                return Err(unsupported(&format!(
                    "an OVER aggregate over an updating result is ordered ascending (ORDER BY {} DESC is not \
                     supported)",
                    order.expr
                )));
            }
            if !over_changelog && (!matches!(&order_expr, Expr::Column(c) if c.name == time) || !order.asc) {
                return Err(unsupported(&format!(
                    "an OVER aggregate is ordered by the stream's event time ascending: ORDER BY {} (not {})",
                    child
                        .exprs
                        .iter()
                        .zip(input_schema.fields())
                        .find(|(e, _)| matches!(e, Expr::Column(c) if c.name == time))
                        .map_or(time.clone(), |(_, f)| f.name().clone()),
                    order.expr
                )));
            }
            let frame = &params.window_frame;
            let preceding = |b: &WindowFrameBound| match b {
                WindowFrameBound::CurrentRow => Some(datafusion::common::ScalarValue::UInt64(Some(0))),
                WindowFrameBound::Preceding(v) if !v.is_null() => Some(v.clone()),
                _ => None,
            };
            let frame_error = || {
                unsupported(
                    "an OVER aggregate's frame is ROWS BETWEEN n PRECEDING AND CURRENT ROW, RANGE BETWEEN \
                     INTERVAL '…' PRECEDING AND CURRENT ROW, or either from UNBOUNDED PRECEDING (FOLLOWING and \
                     GROUPS are not supported: a stream never ends)",
                )
            };
            if !matches!(frame.end_bound, WindowFrameBound::CurrentRow) {
                return Err(frame_error());
            }
            let unbounded = matches!(&frame.start_bound, WindowFrameBound::Preceding(v) if v.is_null());
            let start = preceding(&frame.start_bound);
            let over_frame = match (frame.units, start) {
                (WindowFrameUnits::Rows, _) if unbounded => OverFrame::Unbounded { peers: false },
                (WindowFrameUnits::Range, _) if unbounded => OverFrame::Unbounded { peers: true },
                (_, None) => return Err(frame_error()),
                (units, Some(start)) => match units {
                    WindowFrameUnits::Rows => {
                        let n = match start {
                            datafusion::common::ScalarValue::UInt64(Some(n)) => n,
                            other => other
                                .cast_to(&arrow::datatypes::DataType::UInt64)
                                .ok()
                                .and_then(|v| match v {
                                    datafusion::common::ScalarValue::UInt64(Some(n)) => Some(n),
                                    _ => None,
                                })
                                .ok_or_else(frame_error)?,
                        };
                        if n > OVER_ROWS_PRECEDING_MAX {
                            return Err(unsupported(&format!(
                                "a ROWS frame of an OVER aggregate holds at most {OVER_ROWS_PRECEDING_MAX} preceding \
                             rows, not {n}"
                            )));
                        }
                        OverFrame::Rows { preceding: n }
                    }
                    WindowFrameUnits::Range => {
                        let ms = match &start {
                            datafusion::common::ScalarValue::UInt64(Some(0)) => Some(0),
                            other => interval_literal_ms(other),
                        }
                        .filter(|ms| *ms >= 0)
                        .ok_or_else(frame_error)?;
                        if over_changelog
                            && !matches!(
                                datafusion::logical_expr::ExprSchemable::get_type(&order.expr, input_schema.as_ref()),
                                Ok(arrow::datatypes::DataType::Timestamp(..))
                            )
                        {
                            return Err(unsupported(&format!(
                                "a RANGE frame with an interval needs ORDER BY a timestamp column, not {}",
                                order.expr
                            )));
                        }
                        OverFrame::Range { preceding_ms: ms }
                    }
                    WindowFrameUnits::Groups => return Err(frame_error()),
                },
            };
            let partition: Vec<Expr> = params
                .partition_by
                .iter()
                .map(|p| child.substitute(p, input_schema))
                .collect::<Result<_>>()?;
            let this = (partition, order_expr, over_frame);
            match &shape {
                None => shape = Some(this),
                Some(s) if *s == this => {}
                Some(_) => {
                    return Err(unsupported(
                        "the OVER aggregates of one query must share their PARTITION BY, ORDER BY and frame",
                    ));
                }
            }
            let arg = match params.args.first() {
                None => None,
                // count(*) is count(1): no argument to read.
                Some(Expr::Literal(v, _)) if name == "count" && !v.is_null() => None,
                Some(a) => Some(child.substitute(a, input_schema)?),
            };
            calls.push((name, arg));
        }
        let (partition, order_expr, frame) = shape.ok_or_else(|| Error::internal("a Window without expressions"))?;
        let n = child.exprs.len();
        let mut pre_exprs = child.exprs.clone();
        let mut pre_names: Vec<String> = (0..n).map(|i| format!("_c{i}")).collect();
        // A key, argument or time that is already a column is not repeated.
        let mut column_of = |e: &Expr, name: String| match pre_exprs
            .iter()
            .position(|x| x.clone().unalias() == e.clone().unalias())
        {
            Some(i) => i,
            None => {
                pre_exprs.push(e.clone());
                pre_names.push(name);
                pre_exprs.len() - 1
            }
        };
        let partition_columns: Vec<usize> = partition
            .iter()
            .enumerate()
            .map(|(j, p)| column_of(p, format!("_p{j}")))
            .collect();
        let mut aggregates = Vec::new();
        for (i, (function, arg)) in calls.iter().enumerate() {
            let arg = arg.as_ref().map(|a| column_of(a, format!("_a{i}")));
            aggregates.push(OverAggregateCall {
                function: function.clone(),
                arg,
            });
        }
        let time_column = column_of(&order_expr, "_t".into());
        // Over a changelog its op goes last (`OverAggSpec::op_column`).
        if over_changelog {
            pre_exprs.push(col(OP_COLUMN));
            pre_names.push(OP_COLUMN.to_string());
        }
        let pre = Stage {
            exprs: pre_exprs,
            window: None,
            ..child.clone()
        };
        let (pre_op, pre_schema, _) = self.materialize(&pre, &pre_names)?;
        let op_column = over_changelog.then(|| pre_schema.fields().len() - 1);
        let mut fields: Vec<Field> = Vec::new();
        if over_changelog {
            fields.push(Field::new(OP_COLUMN, arrow::datatypes::DataType::Utf8, false));
        }
        fields.extend((0..n).map(|i| pre_schema.field(i).as_ref().clone().with_nullable(true)));
        for i in 0..calls.len() {
            let logical = w.schema.field(input_schema.fields().len() + i);
            fields.push(Field::new(format!("_o{i}"), logical.data_type().clone(), true));
        }
        let out_schema = Arc::new(Schema::new(fields));
        let spec = OverAggSpec {
            input_schema: pre_schema,
            output_columns: n,
            partition_columns: partition_columns.clone(),
            time_column,
            frame,
            aggregates,
            // Over a changelog every row is kept, as a top-N's over one.
            rows_max: if over_changelog {
                self.settings.aggregate_groups_max
            } else {
                OVER_ROWS_MAX
            },
            state_ttl_ms: self.settings.state_ttl_ms,
            op_column,
        };
        let (op, parallelism) = self.add_keyed(
            OperatorKind::OverAggregate(spec),
            pre_op,
            partition_columns,
            out_schema.clone(),
        );
        let mut exprs: Vec<Expr> = (0..n).map(|i| col(&format!("_c{i}"))).collect();
        exprs.extend((0..calls.len()).map(|i| col(&format!("_o{i}"))));
        // The output keeps event time where the input's time column is one
        // of its columns (a changelog has none).
        let time_column = child
            .exprs
            .iter()
            .position(|e| !over_changelog && matches!(e, Expr::Column(c) if c.name == time))
            .map(|k| format!("_c{k}"));
        Ok(Stage::new(op, parallelism, out_schema, exprs, time_column))
    }

    /// `ROW_NUMBER() OVER (PARTITION BY p ORDER BY o) … WHERE rn <= N`: a
    /// top-N operator, whose changelog is `[op, input columns…, rn]`.
    fn plan_top_n(&mut self, w: &datafusion::logical_expr::Window) -> Result<Stage> {
        let limit = self.top_n_limit.take();
        let Some(limit) = limit.filter(|_| w.window_expr.len() == 1 && is_row_number(&w.window_expr[0])) else {
            return Err(unsupported(OVER_UNSUPPORTED));
        };
        if limit == 0 || limit > TOP_N_MAX {
            return Err(unsupported(&format!(
                "a top-N keeps 1 to {TOP_N_MAX} rows per partition, not {limit}"
            )));
        }
        let Expr::WindowFunction(function) = unaliased(w.window_expr[0].clone()) else {
            return Err(unsupported(OVER_UNSUPPORTED));
        };
        let params = &function.params;
        if params.order_by.is_empty() {
            return Err(unsupported("ROW_NUMBER() for a top-N needs ORDER BY in its OVER (…)"));
        }
        let child = self.plan_node(&w.input)?;
        let over_changelog = self.updating(child.op);
        if child.window.is_some() {
            return Err(unsupported(
                "a top-N per window (over a window TVF) is not supported yet",
            ));
        }
        let input_schema = w.input.schema();
        let n = child.exprs.len();
        let mut pre_exprs = child.exprs.clone();
        let mut pre_names: Vec<String> = (0..n).map(|i| format!("_c{i}")).collect();
        for (j, p) in params.partition_by.iter().enumerate() {
            pre_exprs.push(child.substitute(p, input_schema)?);
            pre_names.push(format!("_p{j}"));
        }
        let mut order = Vec::new();
        for (j, o) in params.order_by.iter().enumerate() {
            pre_exprs.push(child.substitute(&o.expr, input_schema)?);
            pre_names.push(format!("_o{j}"));
            order.push(SortKey {
                column: n + params.partition_by.len() + j,
                descending: !o.asc,
                nulls_first: o.nulls_first,
            });
        }
        // Over a changelog its op goes last (`TopNSpec::op_column`).
        if over_changelog {
            pre_exprs.push(col(OP_COLUMN));
            pre_names.push(OP_COLUMN.to_string());
        }
        let pre = Stage {
            exprs: pre_exprs,
            window: None,
            ..child
        };
        let (pre_op, pre_schema, _) = self.materialize(&pre, &pre_names)?;
        let partition_columns: Vec<usize> = (n..n + params.partition_by.len()).collect();
        let op_column = over_changelog.then(|| pre_schema.fields().len() - 1);
        let mut fields = vec![Field::new(OP_COLUMN, arrow::datatypes::DataType::Utf8, false)];
        fields.extend(
            pre_schema
                .fields()
                .iter()
                .enumerate()
                .filter(|(i, _)| Some(*i) != op_column)
                .map(|(_, f)| f.as_ref().clone()),
        );
        // ROW_NUMBER() is a BIGINT, as in Flink and Postgres (DataFusion's
        // UInt64 would reach clients as numeric).
        fields.push(Field::new("_rn", arrow::datatypes::DataType::Int64, false));
        let out_schema = Arc::new(Schema::new(fields));
        let spec = TopNSpec {
            input_schema: pre_schema,
            partition_columns: partition_columns.clone(),
            order,
            limit,
            partitions_max: self.settings.aggregate_groups_max,
            state_ttl_ms: self.settings.state_ttl_ms,
            op_column,
        };
        let (op, parallelism) = self.add_keyed(OperatorKind::TopN(spec), pre_op, partition_columns, out_schema.clone());
        let mut exprs: Vec<Expr> = (0..n).map(|i| col(&format!("_c{i}"))).collect();
        exprs.push(col("_rn"));
        Ok(Stage::new(op, parallelism, out_schema, exprs, None))
    }

    /// An aggregate without a window: its result updates with every row,
    /// so it emits a changelog (`[op, keys…, aggregates…]`). Over a
    /// changelog it takes retracted rows back.
    fn plan_group_aggregate(&mut self, agg: &Aggregate, child: Stage) -> Result<Stage> {
        let input_schema = agg.input.schema();
        let over_changelog = self.updating(child.op);
        let mut keys = Vec::new();
        for g in &agg.group_expr {
            if matches!(g, Expr::GroupingSet(_)) {
                return Err(unsupported(
                    "GROUPING SETS, CUBE and ROLLUP are not supported on streams",
                ));
            }
            keys.push(unaliased(child.substitute(g, input_schema)?));
        }
        // Pre-projection: the input's op (over a changelog), the keys, then
        // the arguments.
        let lead = usize::from(over_changelog);
        let (calls, args) = self.aggregate_calls(agg, &child, lead + keys.len())?;
        if !over_changelog
            && self.settings.distinct_split_buckets > 0
            && self.settings.state_ttl_ms.is_none()
            && let Some(split) = self.split_of(agg, &child, &calls)?
        {
            return self.plan_split_distinct(agg, child, &keys, (calls, args), split);
        }
        if over_changelog {
            for call in &calls {
                sluice_plan::check_retractable(&call.function, call.distinct).map_err(|e| unsupported(&e))?;
            }
        }
        let lead_column = over_changelog.then(|| (col(OP_COLUMN), OP_COLUMN));
        let (pre_op, pre_schema) = self.pre_project(child, lead_column, &keys, &args)?;
        let key_columns: Vec<usize> = (lead..lead + keys.len()).collect();
        let mut fields = vec![Field::new(OP_COLUMN, arrow::datatypes::DataType::Utf8, false)];
        fields.extend(key_columns.iter().map(|k| pre_schema.field(*k).clone()));
        for (i, _) in calls.iter().enumerate() {
            let logical = agg.schema.field(agg.group_expr.len() + i);
            fields.push(Field::new(format!("_a{i}"), logical.data_type().clone(), true));
        }
        let out_schema = Arc::new(Schema::new(fields));
        let spec = GroupAggSpec {
            input_schema: pre_schema,
            op_column: over_changelog.then_some(0),
            state_ttl_ms: self.settings.state_ttl_ms,
            key_columns: key_columns.clone(),
            aggregates: calls,
            groups_max: self.settings.aggregate_groups_max,
        };
        let (op, parallelism) = self.add_keyed(
            OperatorKind::GroupAggregate(spec),
            pre_op,
            key_columns,
            out_schema.clone(),
        );
        let mut exprs: Vec<Expr> = (0..keys.len()).map(|j| col(&format!("_k{j}"))).collect();
        exprs.extend((0..agg.aggr_expr.len()).map(|i| col(&format!("_a{i}"))));
        Ok(Stage::new(op, parallelism, out_schema, exprs, None))
    }

    /// An aggregate's input projection: `lead` (the time, or a changelog's
    /// op), the keys as `_k<j>`, the arguments as `_arg<i>`.
    fn pre_project(
        &mut self,
        child: Stage,
        lead: impl IntoIterator<Item = (Expr, &'static str)>,
        keys: &[Expr],
        args: &[Expr],
    ) -> Result<(OperatorId, SchemaRef)> {
        let (mut exprs, mut names): (Vec<Expr>, Vec<String>) =
            lead.into_iter().map(|(e, name)| (e, name.to_string())).unzip();
        for (j, k) in keys.iter().enumerate() {
            exprs.push(k.clone());
            names.push(format!("_k{j}"));
        }
        for (i, a) in args.iter().enumerate() {
            exprs.push(a.clone());
            names.push(format!("_arg{i}"));
        }
        let pre = Stage {
            exprs,
            window: None,
            ..child
        };
        let (op, schema, _) = self.materialize(&pre, &names)?;
        Ok((op, schema))
    }

    /// The aggregate calls and the argument expressions they read (as
    /// pre-projection columns numbered from `first_arg`).
    fn aggregate_calls(
        &self,
        agg: &Aggregate,
        child: &Stage,
        first_arg: usize,
    ) -> Result<(Vec<AggregateCall>, Vec<Expr>)> {
        let mut calls = Vec::new();
        let mut args = Vec::new();
        for e in &agg.aggr_expr {
            let inner = match e {
                Expr::Alias(a) => a.expr.as_ref(),
                other => other,
            };
            let Expr::AggregateFunction(AggregateFunction { func, params }) = inner else {
                return Err(unsupported(&format!("{e} is not an aggregate function call")));
            };
            if !params.order_by.is_empty() {
                return Err(unsupported("ORDER BY inside aggregate calls is not supported"));
            }
            // `agg(x) FILTER (WHERE c)` is `agg(CASE WHEN c THEN x END)` for
            // an aggregate that skips NULLs (`count(*)` counts `1`s): rows
            // failing `c` (or where it is NULL) reach it as NULL.
            let filter = match &params.filter {
                None => None,
                Some(_) if !SKIPS_NULLS.contains(&func.name()) => {
                    return Err(unsupported(&format!(
                        "FILTER (WHERE …) is supported on {} (aggregates that skip NULLs), not on {}",
                        SKIPS_NULLS.join(", "),
                        func.name()
                    )));
                }
                Some(f) => Some(child.substitute(f, agg.input.schema())?),
            };
            let mut indices = Vec::new();
            for a in &params.args {
                let arg = child.substitute(a, agg.input.schema())?;
                let arg = match &filter {
                    Some(f) => datafusion::logical_expr::when(f.clone(), arg)
                        .end()
                        .map_err(plan_error)?,
                    None => arg,
                };
                indices.push(first_arg + args.len());
                args.push(arg);
            }
            calls.push(AggregateCall {
                function: func.name().to_string(),
                args: indices,
                distinct: params.distinct,
            });
        }
        Ok((calls, args))
    }
}

/// The columns of stream `def` that a scan with `projection` (indices into
/// the stream's columns, then `window_start`, `window_end` for a window
/// table) does not read. The event-time column is always read (the source
/// derives watermarks from it), and with computed columns every column is
/// (their inputs are evaluated in the source).
fn unread_columns(def: &StreamDef, projection: Option<&[usize]>) -> Vec<usize> {
    let Some(projection) = projection else {
        return Vec::new();
    };
    if !def.computed.is_empty() {
        return Vec::new();
    }
    let event_time = def.event_time.as_ref().map(|e| e.column);
    (0..def.schema.fields().len())
        .filter(|c| !projection.contains(c) && Some(*c) != event_time)
        .collect()
}

/// A constant day-time interval (a RANGE frame's offset, an interval
/// join's bound) in whole ms, rounded down.
fn interval_literal_ms(v: &datafusion::common::ScalarValue) -> Option<i64> {
    use datafusion::common::ScalarValue;
    match v {
        ScalarValue::IntervalMonthDayNano(Some(i)) if i.months == 0 => i64::from(i.days)
            .checked_mul(86_400_000)?
            .checked_add(i.nanoseconds.div_euclid(1_000_000)),
        ScalarValue::IntervalDayTime(Some(i)) => i64::from(i.days)
            .checked_mul(86_400_000)?
            .checked_add(i64::from(i.milliseconds)),
        _ => None,
    }
}
