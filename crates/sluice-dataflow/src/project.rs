//! Filter and projection with DataFusion physical expressions.

use crate::operator::{Operator, OperatorContext};
use arrow::array::{Array, ArrayRef, BooleanArray};
use arrow::compute::{cast, filter_record_batch};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use async_trait::async_trait;
use datafusion::common::DFSchema;
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

/// Compiles SQL expression text over `schema` into a physical expression.
pub fn compile_expr(sql: &str, schema: &SchemaRef) -> Result<Arc<dyn PhysicalExpr>> {
    let df_schema = DFSchema::try_from(schema.as_ref().clone()).map_err(df_error)?;
    let expr = EXPR_CONTEXT.parse_sql_expr(sql, &df_schema).map_err(df_error)?;
    // Some functions (coalesce, nvl, …) only run after simplification.
    let simplify = SimplifyContext::builder()
        .with_schema(Arc::new(df_schema.clone()))
        .build();
    let simplifier = ExprSimplifier::new(simplify);
    let expr = simplifier
        .coerce(expr, &df_schema)
        .and_then(|e| simplifier.simplify(e))
        .map_err(df_error)?;
    let physical = EXPR_CONTEXT.create_physical_expr(expr, &df_schema).map_err(df_error)?;
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

/// Filter, then project.
pub struct ProjectOperator {
    filter: Option<Arc<dyn PhysicalExpr>>,
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    output_schema: SchemaRef,
}

impl ProjectOperator {
    pub fn new(spec: &ProjectSpec, output_schema: SchemaRef) -> Result<Self> {
        let filter = spec
            .filter
            .as_deref()
            .map(|f| compile_expr(f, &spec.input_schema))
            .transpose()?;
        let exprs = spec
            .exprs
            .iter()
            .map(|e| compile_expr(e, &spec.input_schema))
            .collect::<Result<Vec<_>>>()?;
        if exprs.len() != output_schema.fields().len() {
            return Err(Error::internal("project: expression count differs from output schema"));
        }
        Ok(ProjectOperator {
            filter,
            exprs,
            output_schema,
        })
    }

    /// Applies the filter and projection to one batch.
    pub fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let batch = match &self.filter {
            None => batch.clone(),
            Some(f) => {
                let mask = evaluate(f, batch)?;
                let mask = mask
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .ok_or_else(|| Error::internal("filter is not boolean"))?;
                filter_record_batch(batch, mask)?
            }
        };
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
}
