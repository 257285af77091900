//! A stage under construction: the expressions of the current logical
//! columns over the output of the last materialised operator, plus a
//! pending filter. Filters and projections fold into it; it becomes a
//! project operator only when something needs its rows.

use crate::errors::plan_error;
use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema};
use datafusion::logical_expr::{Expr, ExprSchemable, Projection};
use datafusion::sql::unparser::Unparser;
use datafusion::sql::unparser::dialect::Dialect;
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
        substitute(expr, schema, &self.exprs)
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

/// Rewrites `expr`, written over `schema`, replacing its `i`th column by
/// `exprs[i]`.
pub fn substitute(expr: &Expr, schema: &DFSchema, exprs: &[Expr]) -> Result<Expr> {
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
    let sql = Unparser::new(&RuntimeDialect)
        .expr_to_sql(&expr)
        .map_err(|e| Error::unsupported(format!("expression {expr} cannot run in a stream: {e}")))?;
    Ok(sql.to_string())
}

/// DataFusion's default unparser dialect, with its identifier check done
/// without a regex. The default compiles `^[a-zA-Z_][a-zA-Z0-9_]*$` afresh
/// for every column it writes: slow, and in a debug build deep enough in
/// the stack to overflow it. The unparser grows its stack only when less
/// than 256 KiB is left at a level, one level of it is a 134 KB frame in a
/// debug build, and the regex's compilation under the last level took the
/// rest: a 500-term `seq - seq - …` in an aggregate without a window
/// aborted the server (found by the SQL fuzz test). Quoting is unchanged:
/// a name is quoted if it is a keyword (but `ID`), is not a plain
/// identifier, or has an upper-case letter.
struct RuntimeDialect;

impl Dialect for RuntimeDialect {
    fn identifier_quote_style(&self, identifier: &str) -> Option<char> {
        let mut chars = identifier.chars();
        let plain = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        let upper = identifier.to_uppercase();
        let keyword = upper != "ID" && sqlparser::keywords::ALL_KEYWORDS.contains(&upper.as_str());
        let needs_quote = keyword || !plain || identifier.chars().any(|c| c.is_ascii_uppercase());
        needs_quote.then_some('"')
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::unparser::dialect::DefaultDialect;

    /// The regex-free check quotes exactly what DataFusion's default dialect
    /// quotes.
    #[test]
    fn the_runtime_dialect_quotes_as_the_default_one_does() {
        let names = [
            "seq",
            "_x",
            "x1",
            "a_b_c",
            "1x",
            "",
            "x y",
            "Seq",
            "SEQ",
            "id",
            "ID",
            "Id",
            "select",
            "from",
            "window_start",
            "é",
            "xé",
            "x-y",
            "__sluice_mark_window_start",
            "count(*)",
            "sum",
            "order",
            "user",
        ];
        for name in names {
            assert_eq!(
                RuntimeDialect.identifier_quote_style(name),
                DefaultDialect {}.identifier_quote_style(name),
                "{name:?}"
            );
        }
    }

    /// A column written through the runtime dialect, in a deep chain.
    #[test]
    fn deep_expressions_unparse_with_their_columns() {
        let mut expr = datafusion::prelude::col("seq");
        for _ in 0..300 {
            expr = expr - datafusion::prelude::col("seq");
        }
        let sql = to_sql(&expr).unwrap();
        assert_eq!(sql.matches("seq").count(), 301);
    }
}
