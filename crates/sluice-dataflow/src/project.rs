//! Filter and projection with DataFusion physical expressions.

use crate::operator::{Operator, OperatorContext};
use arrow::array::{Array, ArrayRef, BooleanArray};
use arrow::compute::{cast, filter_record_batch};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use async_trait::async_trait;
use datafusion::common::DFSchema;
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::prelude::SessionContext;
use sluice_plan::ProjectSpec;
use sluice_types::{Error, Result, SqlCode};
use std::sync::{Arc, LazyLock};

/// One DataFusion context for compiling expressions (its function registry
/// is read-only here).
static EXPR_CONTEXT: LazyLock<SessionContext> = LazyLock::new(|| {
    let config = datafusion::prelude::SessionConfig::new().set_usize(
        "datafusion.sql_parser.recursion_limit",
        sluice_types::limits::EXPRESSION_PARSE_RECURSION_MAX,
    );
    let ctx = SessionContext::new_with_config(config);
    sluice_functions::register(&ctx);
    ctx
});

mod cse;

/// Compiles SQL expression text over `schema` into a physical expression.
pub fn compile_expr(sql: &str, schema: &SchemaRef) -> Result<Arc<dyn PhysicalExpr>> {
    let df_schema = DFSchema::try_from(schema.as_ref().clone()).map_err(df_error)?;
    let expr = logical_expr(sql, &df_schema)?;
    physical_expr(expr, &df_schema)
}

/// A predicate over a few of a schema's columns, compiled to run on a batch
/// of just those (an operator can then build that narrow batch for rows it
/// has not gathered whole yet, as a join does for its candidate pairs).
pub struct NarrowPredicate {
    /// The columns it reads, as indices into the full schema, in order.
    pub columns: Vec<usize>,
    /// The schema of a batch of those columns.
    schema: SchemaRef,
    expr: Arc<dyn PhysicalExpr>,
}

impl NarrowPredicate {
    /// Compiles the SQL predicate `sql` over `schema`.
    pub fn compile(sql: &str, schema: &SchemaRef) -> Result<Self> {
        let full = DFSchema::try_from(schema.as_ref().clone()).map_err(df_error)?;
        let expr = logical_expr(sql, &full)?;
        let columns: Vec<usize> = {
            let read: std::collections::HashSet<&str> =
                expr.column_refs().into_iter().map(|c| c.name.as_str()).collect();
            (0..schema.fields().len())
                .filter(|i| read.contains(schema.field(*i).name().as_str()))
                .collect()
        };
        let narrow = Arc::new(schema.project(&columns)?);
        let narrow_df = DFSchema::try_from(narrow.as_ref().clone()).map_err(df_error)?;
        let expr = physical_expr(expr, &narrow_df)?;
        Ok(NarrowPredicate {
            columns,
            schema: narrow,
            expr,
        })
    }

    /// Whether the predicate holds for each of `rows` rows, given `columns`
    /// (one array per entry of [`Self::columns`]), as a mask without nulls
    /// (NULL is not true).
    pub fn mask(&self, columns: &[ArrayRef], rows: usize) -> Result<BooleanArray> {
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        let batch = RecordBatch::try_new_with_options(self.schema.clone(), columns.to_vec(), &options)?;
        let mask = evaluate(&self.expr, &batch)?;
        let mask = mask
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| Error::internal("a predicate that is not boolean"))?;
        Ok(if mask.null_count() > 0 {
            arrow::compute::prep_null_mask_filter(mask)
        } else {
            mask.clone()
        })
    }
}

/// SQL expression text over `df_schema`, parsed, coerced and simplified.
fn logical_expr(sql: &str, df_schema: &DFSchema) -> Result<Expr> {
    let expr = EXPR_CONTEXT.parse_sql_expr(sql, df_schema).map_err(df_error)?;
    // Some functions (coalesce, nvl, …) only run after simplification.
    let simplify = SimplifyContext::builder()
        .with_schema(Arc::new(df_schema.clone()))
        .build();
    let simplifier = ExprSimplifier::new(simplify);
    simplifier
        .coerce(expr, df_schema)
        .and_then(|e| simplifier.simplify(e))
        .map_err(df_error)
}

fn physical_expr(expr: Expr, df_schema: &DFSchema) -> Result<Arc<dyn PhysicalExpr>> {
    let physical = EXPR_CONTEXT.create_physical_expr(expr, df_schema).map_err(df_error)?;
    check_depth(&physical)?;
    Ok(physical)
}

/// Refuses an expression nested deeper than the statement limit
/// ([`sluice_types::limits::EXPRESSION_DEPTH_MAX`], `54001`), measured
/// without recursion. The planner refuses such statements before they
/// reach a DAG; this holds a stored DAG written before a limit was lowered
/// to it too, so evaluating it can never overflow a task's stack.
fn check_depth(expr: &Arc<dyn PhysicalExpr>) -> Result<()> {
    use sluice_types::limits::EXPRESSION_DEPTH_MAX;
    let mut pending = vec![(expr, 1usize)];
    while let Some((node, depth)) = pending.pop() {
        if depth > EXPRESSION_DEPTH_MAX {
            return Err(Error::too_complex(format!(
                "expression nested more than {EXPRESSION_DEPTH_MAX} levels deep"
            )));
        }
        pending.extend(node.children().into_iter().map(|c| (c, depth + 1)));
    }
    Ok(())
}

/// DataFusion errors at run time are the data's fault (overflow, bad cast)
/// unless they say otherwise.
pub fn df_error(e: datafusion::error::DataFusionError) -> Error {
    use datafusion::error::DataFusionError as D;
    match e {
        D::ArrowError(a, _) => Error::from(*a),
        D::Execution(m) => Error::user(SqlCode::DataException, m),
        D::NotImplemented(m) => Error::unsupported(m),
        D::Plan(m) => Error::internal(format!("expression does not compile: {m}")),
        other => Error::internal(other.to_string()),
    }
}

/// Evaluates `expr` to an array of `rows` rows.
pub fn evaluate(expr: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Result<ArrayRef> {
    expr.evaluate(batch)
        .and_then(|v| v.into_array(batch.num_rows()))
        .map_err(df_error)
}

/// Filter, then project. An expression named more than once is computed
/// once a batch ([`cse`]): before the filter when the filter surely
/// computes it, else after.
pub struct ProjectOperator {
    /// Shared expressions computed before the filter, each appended to the
    /// batch as a column (with the batch's schema then).
    before: Vec<(Arc<dyn PhysicalExpr>, SchemaRef)>,
    filter: Option<Arc<dyn PhysicalExpr>>,
    /// With a filter: the columns of the batch (with those computed before
    /// it) that the shared expressions after it and the projection read,
    /// the only ones filtered.
    kept: Option<Vec<usize>>,
    /// Shared expressions computed after the filter, likewise.
    after: Vec<(Arc<dyn PhysicalExpr>, SchemaRef)>,
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    output_schema: SchemaRef,
}

/// Names of the columns shared expressions are computed into.
const SHARED_PREFIX: &str = "__sluice_shared_";

/// `SLUICE_SHARED_EXPRESSIONS=off` computes every occurrence as written
/// (what the benchmark's A/B runs compare against); read once.
static SHARING: LazyLock<bool> =
    LazyLock::new(|| std::env::var("SLUICE_SHARED_EXPRESSIONS").map_or(true, |v| v != "off"));

impl ProjectOperator {
    pub fn new(spec: &ProjectSpec, output_schema: SchemaRef) -> Result<Self> {
        let input = DFSchema::try_from(spec.input_schema.as_ref().clone()).map_err(df_error)?;
        let filter = spec.filter.as_deref().map(|f| logical_expr(f, &input)).transpose()?;
        let exprs = spec
            .exprs
            .iter()
            .map(|e| logical_expr(e, &input))
            .collect::<Result<Vec<_>>>()?;
        if exprs.len() != output_schema.fields().len() {
            return Err(Error::internal("project: expression count differs from output schema"));
        }
        let mut widened = input.clone();
        let mut next = 0;
        let (mut before, mut after) = (Vec::new(), Vec::new());
        let has_filter = filter.is_some();
        let mut roots: Vec<Expr> = filter.into_iter().chain(exprs).collect();
        if has_filter && *SHARING {
            // The filter runs on every row; the projection on those passing.
            let sure: Vec<bool> = (0..roots.len()).map(|i| i == 0).collect();
            cse::share(&mut roots, &sure, &mut before, &mut widened, (SHARED_PREFIX, &mut next)).map_err(df_error)?;
        }
        let (filter, mut exprs) = if has_filter {
            let filter = roots.remove(0);
            (Some(filter), roots)
        } else {
            (None, roots)
        };
        if *SHARING {
            let sure = vec![true; exprs.len()];
            cse::share(&mut exprs, &sure, &mut after, &mut widened, (SHARED_PREFIX, &mut next)).map_err(df_error)?;
        }
        // The batch's columns: the input's, then those computed before the
        // filter, then after it, each after the ones it reads.
        let (before, after) = (cse::in_order(before), cse::in_order(after));
        let mut fields: Vec<arrow::datatypes::FieldRef> = spec.input_schema.fields().iter().cloned().collect();
        let stages = |shared: Vec<cse::Shared>, fields: &mut Vec<arrow::datatypes::FieldRef>| {
            shared
                .into_iter()
                .map(|s| {
                    let field = widened.field_with_unqualified_name(&s.name).map_err(df_error)?.clone();
                    fields.push(field);
                    Ok((s.expr, Arc::new(arrow::datatypes::Schema::new(fields.clone()))))
                })
                .collect::<Result<Vec<_>>>()
        };
        let before = stages(before, &mut fields)?;
        let filtered = DFSchema::try_from(arrow::datatypes::Schema::new(fields.clone())).map_err(df_error)?;
        // With a filter, the batch keeps only the columns the rest reads
        // before it is filtered: the filter copies every column it keeps
        // (q21's URLs, read only before it, were a tenth of its profile).
        let kept = match filter {
            Some(_) => {
                let mut read = std::collections::HashSet::new();
                for e in after.iter().map(|s| &s.expr).chain(&exprs) {
                    read.extend(e.column_refs().into_iter().map(|c| c.name.clone()));
                }
                let kept: Vec<usize> = (0..fields.len()).filter(|i| read.contains(fields[*i].name())).collect();
                fields = kept.iter().map(|i| fields[*i].clone()).collect();
                Some(kept)
            }
            None => None,
        };
        let after = stages(after, &mut fields)?;
        let full = DFSchema::try_from(arrow::datatypes::Schema::new(fields)).map_err(df_error)?;
        let compile = |stage: Vec<(Expr, SchemaRef)>, schema: &DFSchema| {
            stage
                .into_iter()
                .map(|(e, so_far)| Ok((physical_expr(e, schema)?, so_far)))
                .collect::<Result<Vec<_>>>()
        };
        Ok(ProjectOperator {
            before: compile(before, &filtered)?,
            filter: filter.map(|f| physical_expr(f, &filtered)).transpose()?,
            kept,
            after: compile(after, &full)?,
            exprs: exprs
                .into_iter()
                .map(|e| physical_expr(e, &full))
                .collect::<Result<Vec<_>>>()?,
            output_schema,
        })
    }

    /// `batch` with the shared expressions of `stage` computed into columns.
    fn widen(batch: RecordBatch, stage: &[(Arc<dyn PhysicalExpr>, SchemaRef)]) -> Result<RecordBatch> {
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        let mut batch = batch;
        for (expr, schema) in stage {
            let mut array = evaluate(expr, &batch)?;
            let field = schema.fields().last().expect("the shared column");
            if array.data_type() != field.data_type() {
                array = cast(&array, field.data_type())?;
            }
            let mut columns = batch.columns().to_vec();
            columns.push(array);
            batch = RecordBatch::try_new_with_options(schema.clone(), columns, &options)?;
        }
        Ok(batch)
    }

    /// Applies the filter and projection to one batch.
    pub fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let batch = match &self.filter {
            None => batch.clone(),
            Some(f) => {
                let batch = Self::widen(batch.clone(), &self.before)?;
                let mask = evaluate(f, &batch)?;
                let mask = mask
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .ok_or_else(|| Error::internal("filter is not boolean"))?;
                let batch = match &self.kept {
                    Some(kept) => batch.project(kept)?,
                    None => batch,
                };
                filter_record_batch(&batch, mask)?
            }
        };
        let batch = Self::widen(batch, &self.after)?;
        let mut columns = Vec::with_capacity(self.exprs.len());
        for (expr, field) in self.exprs.iter().zip(self.output_schema.fields()) {
            let mut array = evaluate(expr, &batch)?;
            if array.data_type() != field.data_type() {
                array = cast(&array, field.data_type())?;
            }
            columns.push(array);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        Ok(RecordBatch::try_new_with_options(
            self.output_schema.clone(),
            columns,
            &options,
        )?)
    }
}

impl crate::exchange::BatchMap for ProjectOperator {
    fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        ProjectOperator::apply(self, batch)
    }
}

#[async_trait]
impl Operator for ProjectOperator {
    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, ctx: &mut OperatorContext<'_>) -> Result<()> {
        let out = self.apply(&batch)?;
        ctx.emit(out).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn expressions_deeper_than_the_statement_limit_do_not_compile() {
        use sluice_types::limits::EXPRESSION_DEPTH_MAX;
        let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        // `k + k + …`: one level per `+`, plus the leaf.
        let at_limit = vec!["k"; EXPRESSION_DEPTH_MAX].join(" + ");
        compile_expr(&at_limit, &schema).expect("at the limit");
        let over = vec!["k"; EXPRESSION_DEPTH_MAX + 1].join(" + ");
        let err = compile_expr(&over, &schema).expect_err("over the limit");
        assert_eq!(err.sqlstate(), "54001", "{err}");
    }

    #[test]
    fn filters_and_computes_with_datafusion_functions() {
        let input = Arc::new(Schema::new(vec![
            Field::new("price", DataType::Int64, false),
            Field::new("channel", DataType::Utf8, false),
        ]));
        let output = Arc::new(Schema::new(vec![
            Field::new("p2", DataType::Int64, true),
            Field::new("c", DataType::Utf8, true),
        ]));
        let spec = ProjectSpec {
            input_schema: input.clone(),
            filter: Some("price > 10".into()),
            exprs: vec!["price * 2".into(), "upper(channel)".into()],
        };
        let op = ProjectOperator::new(&spec, output).unwrap();
        let batch = RecordBatch::try_new(
            input,
            vec![
                Arc::new(Int64Array::from(vec![5, 11, 20])),
                Arc::new(StringArray::from(vec!["a", "b", "c"])),
            ],
        )
        .unwrap();
        let out = op.apply(&batch).unwrap();
        let p2 = out.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let c = out.column(1).as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(p2.values(), &[22, 40]);
        assert_eq!((c.value(0), c.value(1)), ("B", "C"));
    }

    /// The filter keeps only the columns read after it: a column read by
    /// the filter alone (`url`) is not filtered, a shared expression
    /// computed before the filter is; a projection that reads no column
    /// still has a row per row passing.
    #[test]
    fn a_filter_keeps_only_the_columns_read_after_it() {
        let input = Arc::new(Schema::new(vec![
            Field::new("price", DataType::Int64, false),
            Field::new("url", DataType::Utf8, false),
            Field::new("channel", DataType::Utf8, false),
        ]));
        let batch = RecordBatch::try_new(
            input.clone(),
            vec![
                Arc::new(Int64Array::from(vec![5, 11, 20, 30])),
                Arc::new(StringArray::from(vec!["x=1", "y=2", "x=3", "z"])),
                Arc::new(StringArray::from(vec!["a", "b", "c", "d"])),
            ],
        )
        .unwrap();
        let output = Arc::new(Schema::new(vec![
            Field::new("p", DataType::Int64, true),
            Field::new("u", DataType::Utf8, true),
        ]));
        let spec = ProjectSpec {
            input_schema: input.clone(),
            filter: Some("upper(url) <> 'Z' AND price > 10".into()),
            exprs: vec!["price + 1".into(), "upper(url)".into()],
        };
        let op = ProjectOperator::new(&spec, output).unwrap();
        let names: Vec<&str> = op.kept.iter().flatten().map(|i| op_field(&op, *i)).collect();
        assert_eq!(
            names.len(),
            2,
            "price and the shared upper(url), not url nor channel: {names:?}"
        );
        assert!(names.contains(&"price") && !names.contains(&"url") && !names.contains(&"channel"));
        let out = op.apply(&batch).unwrap();
        assert_eq!(ints(&out, 0), [12, 21]);
        assert_eq!(strings(out.column(1)), [Some("Y=2".into()), Some("X=3".into())]);

        let constant = ProjectSpec {
            input_schema: input,
            filter: Some("price > 10".into()),
            exprs: vec!["7".into()],
        };
        let output = Arc::new(Schema::new(vec![Field::new("seven", DataType::Int64, true)]));
        let op = ProjectOperator::new(&constant, output).unwrap();
        assert_eq!(op.kept.as_deref(), Some(&[][..]));
        assert_eq!(ints(&op.apply(&batch).unwrap(), 0), [7, 7, 7]);
    }

    /// The name of column `i` of the batch the filter sees (the input's
    /// columns, then the shared ones computed before it).
    fn op_field(op: &ProjectOperator, i: usize) -> &str {
        let n = op.before.last().map(|(_, schema)| schema.fields().len());
        let schema = &op.before.last().expect("a shared column").1;
        assert!(i < n.unwrap());
        schema.field(i).name()
    }

    fn ints(out: &RecordBatch, column: usize) -> Vec<i64> {
        out.column(column)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .values()
            .to_vec()
    }

    fn strings(a: &ArrayRef) -> Vec<Option<String>> {
        let a = cast(a, &DataType::Utf8).unwrap();
        let a = a.as_any().downcast_ref::<StringArray>().unwrap();
        (0..a.len())
            .map(|i| a.is_valid(i).then(|| a.value(i).to_string()))
            .collect()
    }

    /// q21's shape: the URL's channel id extracted in the WHERE and in the
    /// CASE is extracted once, before the filter; `lower(channel)`, which
    /// the WHERE may skip (after OR) but the CASE's first WHEN surely
    /// computes, once after it. The rows are those worked out by hand.
    #[test]
    fn an_expression_named_twice_is_computed_once_with_the_same_rows() {
        let input = Arc::new(Schema::new(vec![
            Field::new("channel", DataType::Utf8, true),
            Field::new("url", DataType::Utf8, true),
        ]));
        let extract = "regexp_extract(url, '(&|^)channel_id=([^&]*)', 2)";
        let spec = ProjectSpec {
            input_schema: input.clone(),
            filter: Some(format!(
                "{extract} IS NOT NULL OR lower(channel) IN ('apple', 'google')"
            )),
            exprs: vec![
                "channel".into(),
                format!(
                    "CASE WHEN lower(channel) = 'apple' THEN '0' WHEN lower(channel) = 'google' THEN '1' ELSE {extract} END"
                ),
            ],
        };
        let output = Arc::new(Schema::new(vec![
            Field::new("channel", DataType::Utf8, true),
            Field::new("channel_id", DataType::Utf8, true),
        ]));
        let op = ProjectOperator::new(&spec, output).unwrap();
        assert_eq!(
            (op.before.len(), op.after.len()),
            (1, 1),
            "one shared before the filter, one after"
        );
        let batch = RecordBatch::try_new(
            input,
            vec![
                Arc::new(StringArray::from(vec![
                    Some("Apple"),
                    Some("other"),
                    Some("other"),
                    Some("GOOGLE"),
                    None,
                ])),
                Arc::new(StringArray::from(vec![
                    Some("x?a=1"),
                    Some("x?a=1&channel_id=77"),
                    Some("x?a=1"),
                    None,
                    Some("channel_id=5&b=2"),
                ])),
            ],
        )
        .unwrap();
        let out = op.apply(&batch).unwrap();
        assert_eq!(
            strings(out.column(0)),
            [Some("Apple"), Some("other"), Some("GOOGLE"), None].map(|s| s.map(String::from))
        );
        assert_eq!(
            strings(out.column(1)),
            [Some("0"), Some("77"), Some("1"), Some("5")].map(|s| s.map(String::from))
        );
        assert_eq!(out.schema().fields().len(), 2, "the shared columns are not output");
    }

    /// An expression only a CASE branch computes is not computed for every
    /// row (it could fail where the query does not): `10 / x` in two THENs
    /// guarded by `x <> 0` stays in them (the guard, surely computed by
    /// both, is shared), and a zero divides nothing. Volatile expressions
    /// are never shared.
    #[test]
    fn what_a_branch_guards_or_a_volatile_call_is_not_shared() {
        let input = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let spec = ProjectSpec {
            input_schema: input.clone(),
            filter: None,
            exprs: vec![
                "CASE WHEN x <> 0 THEN 10 / x ELSE -1 END".into(),
                "CASE WHEN x <> 0 THEN 10 / x + 1 ELSE -2 END".into(),
                "random()".into(),
                "random()".into(),
            ],
        };
        let output = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
            Field::new("r1", DataType::Float64, true),
            Field::new("r2", DataType::Float64, true),
        ]));
        let op = ProjectOperator::new(&spec, output).unwrap();
        // `x <> 0`, which both first WHENs surely compute, is shared;
        // neither the division nor random().
        let shared: Vec<String> = op.after.iter().map(|(e, _)| e.to_string()).collect();
        assert_eq!(shared.len(), 1, "{shared:?}");
        assert!(shared[0].contains("!=") && !shared[0].contains('/'), "{shared:?}");
        let batch = RecordBatch::try_new(input, vec![Arc::new(Int64Array::from(vec![0, 5, 0, 2]))]).unwrap();
        let out = op.apply(&batch).unwrap();
        let ints = |i: usize| ints(&out, i);
        assert_eq!(ints(0), [-1, 2, -1, 5]);
        assert_eq!(ints(1), [-2, 3, -2, 6]);
        assert_ne!(strings(out.column(2)), strings(out.column(3)));
    }

    /// A shared expression inside another shared one: `x * 2` and
    /// `(x * 2) + 1`, each named twice, are both computed once, the
    /// bigger reading the smaller's column; the filter's own is computed
    /// before it and read after.
    #[test]
    fn nested_shared_expressions_are_computed_in_order() {
        let input = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let spec = ProjectSpec {
            input_schema: input.clone(),
            filter: Some("x * 2 > 2".into()),
            exprs: vec!["x * 2".into(), "(x * 2 + 1) * 10".into(), "(x * 2 + 1) * 100".into()],
        };
        let output = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
            Field::new("c", DataType::Int64, true),
        ]));
        let op = ProjectOperator::new(&spec, output).unwrap();
        assert_eq!((op.before.len(), op.after.len()), (1, 1));
        let batch = RecordBatch::try_new(input, vec![Arc::new(Int64Array::from(vec![1, 2, 3]))]).unwrap();
        let out = op.apply(&batch).unwrap();
        let ints = |i: usize| ints(&out, i);
        assert_eq!(ints(0), [4, 6]);
        assert_eq!(ints(1), [50, 70]);
        assert_eq!(ints(2), [500, 700]);
    }
}
