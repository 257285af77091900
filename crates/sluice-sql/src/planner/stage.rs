//! A stage under construction: the expressions of the current logical
//! columns over the output of the last materialised operator, plus a
//! pending filter. Filters and projections fold into it; it becomes a
//! project operator only when something needs its rows.

use crate::errors::plan_error;
use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema};
use datafusion::logical_expr::{Expr, ExprSchemable, Projection};
use datafusion::sql::unparser::expr_to_sql;
use sluice_types::{Error, OperatorId, Result, SqlCode};
use std::sync::Arc;

/// Marker columns standing for a window TVF's `window_start` / `window_end`
/// before the window aggregate exists.
pub const MARK_WINDOW_START: &str = "__sluice_mark_window_start";
pub const MARK_WINDOW_END: &str = "__sluice_mark_window_end";

#[derive(Debug, Clone)]
pub struct Stage {
    /// The operator whose output the expressions read.
    pub op: OperatorId,
    pub parallelism: u32,
    /// That operator's output schema (unqualified, unique names).
    pub input_schema: SchemaRef,
    pub filter: Option<Expr>,
    /// One expression per current logical column.
    pub exprs: Vec<Expr>,
    /// The input column carrying event time, if any.
    pub time_column: Option<String>,
    /// The window TVF scanned by this stage, if any (index into the plan's windows).
    pub window: Option<usize>,
}

pub fn col(name: &str) -> Expr {
    Expr::Column(Column::new_unqualified(name))
}

impl Stage {
    /// The output of operator `op` (`parallelism` instances, `input_schema`)
    /// as `exprs`, with no pending filter or window; event time in
    /// `time_column` if any.
    pub fn new(
        op: OperatorId,
        parallelism: u32,
        input_schema: SchemaRef,
        exprs: Vec<Expr>,
        time_column: Option<String>,
    ) -> Stage {
        Stage {
            op,
            parallelism,
            input_schema,
            filter: None,
            exprs,
            time_column,
            window: None,
        }
    }

    /// Rewrites `expr`, written over the child plan's `schema`, into an
    /// expression over this stage's input.
    pub fn substitute(&self, expr: &Expr, schema: &DFSchema) -> Result<Expr> {
        let exprs = &self.exprs;
        expr.clone()
            .transform_up(|e| match e {
                Expr::Column(c) => {
                    let i = schema.index_of_column(&c)?;
                    Ok(Transformed::yes(exprs[i].clone()))
                }
                Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_) => Err(
                    datafusion::error::DataFusionError::NotImplemented("subqueries in continuous queries".into()),
                ),
                other => Ok(Transformed::no(other)),
            })
            .map(|t| t.data)
            .map_err(plan_error)
    }

    /// This stage with its output replaced by `projection` (whose input is
    /// the plan this stage was built from).
    pub fn project(self, projection: &Projection) -> Result<Stage> {
        let exprs = projection
            .expr
            .iter()
            .map(|e| self.substitute(e, projection.input.schema()))
            .collect::<Result<_>>()?;
        Ok(Stage { exprs, ..self })
    }

    /// True when the stage passes its input through unchanged.
    pub fn is_identity(&self) -> bool {
        self.filter.is_none()
            && self.exprs.len() == self.input_schema.fields().len()
            && self
                .exprs
                .iter()
                .zip(self.input_schema.fields())
                .all(|(e, f)| matches!(e, Expr::Column(c) if c.name == *f.name()))
    }

    /// The output fields for `names`, typed over the input schema.
    pub fn output_schema(&self, names: &[String]) -> Result<SchemaRef> {
        let df = DFSchema::try_from(self.input_schema.as_ref().clone()).map_err(plan_error)?;
        let fields = self
            .exprs
            .iter()
            .zip(names)
            .map(|(e, name)| {
                let (_, field) = e.to_field(&df).map_err(plan_error)?;
                Ok(Field::new(name, field.data_type().clone(), true))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Arc::new(Schema::new(fields)))
    }
}

/// True when `expr` mentions a window marker column.
pub fn mentions_window_marker(expr: &Expr) -> bool {
    let mut found = false;
    let _ = expr.apply(|e| {
        if let Expr::Column(c) = e
            && (c.name == MARK_WINDOW_START || c.name == MARK_WINDOW_END)
        {
            found = true;
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    found
}

/// SQL text of an expression over unqualified columns, for the runtime.
pub fn to_sql(expr: &Expr) -> Result<String> {
    if mentions_window_marker(expr) {
        return Err(Error::user(
            SqlCode::FeatureNotSupported,
            "window_start and window_end can be used only as GROUP BY keys of a window aggregate and after it",
        ));
    }
    let expr = match expr {
        Expr::Alias(a) => a.expr.as_ref().clone(),
        other => other.clone(),
    };
    sluice_functions::check_constants(&expr).map_err(|e| Error::invalid_option(e.strip_backtrace()))?;
    let sql =
        expr_to_sql(&expr).map_err(|e| Error::unsupported(format!("expression {expr} cannot run in a stream: {e}")))?;
    Ok(sql.to_string())
}
