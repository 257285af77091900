//! `CREATE STREAM` → a catalog [`StreamDef`].

use crate::errors::plan_error;
use crate::statement::{CreateStream, normalize_ident};
use crate::types::{arrow_type, interval_ms};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::DFSchema;
use datafusion::logical_expr::ExprSchemable;
use datafusion::prelude::SessionContext;
use sluice_plan::ComputedColumn;
use sluice_plan::catalog::{EventTime, StreamDef};
use sluice_types::{Error, Result, SqlCode};
use sqlparser::ast::{BinaryOperator, ColumnOption, Expr};
use std::sync::Arc;

/// Builds the stream definition. `connector_schema` is the schema a
/// connector dictates (nexmark); declared columns must then match it.
/// `metadata` are the connector's metadata columns (Kafka's partition,
/// offset, …): declared ones take the declared place and are visible, the
/// others are appended, hidden from `SELECT *`.
pub fn stream_def(
    create: &CreateStream,
    connector: &str,
    connector_schema: Option<SchemaRef>,
    metadata: Vec<Field>,
) -> Result<StreamDef> {
    let declared = declared_schema(create)?;
    let declared = match declared {
        Some(d) if !metadata.is_empty() => Some(with_metadata_columns(&d, metadata)?),
        other => other,
    };
    if !create.computed.is_empty() && connector_schema.is_some() {
        return Err(Error::unsupported(format!(
            "computed columns are not supported on {connector} streams (their schema is fixed)"
        )));
    }
    let schema = match (connector_schema, declared) {
        (Some(fixed), None) => fixed,
        (Some(fixed), Some(declared)) => {
            check_matches(&declared, &fixed, connector)?;
            fixed
        }
        (None, Some(declared)) => declared,
        (None, None) => {
            return Err(Error::syntax(format!(
                "stream {} needs a column list: CREATE STREAM {} (col TYPE, …)",
                create.name, create.name
            )));
        }
    };
    let (schema, computed) = with_computed_columns(&schema, &create.computed)?;
    let event_time = match &create.watermark {
        Some((column, expr)) => Some(event_time(&schema, column, expr)?),
        None => None,
    };
    let mut options = create.options.clone();
    options.remove("connector");
    Ok(StreamDef {
        name: create.name.clone(),
        schema,
        event_time,
        connector: connector.to_string(),
        options,
        pipeline: None,
        computed,
    })
}

/// Inserts the computed columns (typed by DataFusion over the connector's
/// columns) at their declared positions.
fn with_computed_columns(
    physical: &SchemaRef,
    computed: &[(usize, String, Expr)],
) -> Result<(SchemaRef, Vec<ComputedColumn>)> {
    if computed.is_empty() {
        return Ok((physical.clone(), Vec::new()));
    }
    let df_schema = DFSchema::try_from(physical.as_ref().clone()).map_err(plan_error)?;
    let ctx = SessionContext::new_with_config(datafusion::prelude::SessionConfig::new().set_usize(
        "datafusion.sql_parser.recursion_limit",
        sluice_types::limits::EXPRESSION_PARSE_RECURSION_MAX,
    ));
    sluice_functions::register(&ctx);
    let mut fields: Vec<Field> = physical.fields().iter().map(|f| f.as_ref().clone()).collect();
    let mut specs = Vec::new();
    for (position, name, expr) in computed {
        if fields.iter().any(|f| f.name() == name) {
            return Err(Error::user(
                SqlCode::DuplicateColumn,
                format!("column \"{name}\" specified more than once"),
            ));
        }
        let sql = flink_functions_to_datafusion(expr)?.to_string();
        let logical = ctx.parse_sql_expr(&sql, &df_schema).map_err(plan_error)?;
        let data_type = logical.get_type(&df_schema).map_err(plan_error)?;
        let position = (*position).min(fields.len());
        fields.insert(position, Field::new(name, data_type, true));
        specs.push(ComputedColumn {
            column: position,
            expr: sql,
        });
    }
    Ok((Arc::new(Schema::new(fields)), specs))
}

/// Flink's `TO_TIMESTAMP_LTZ(epoch, precision)` (precision 0, 3, 6 or 9)
/// as DataFusion's `to_timestamp_seconds` / `_millis` / `_micros` / `_nanos`.
fn flink_functions_to_datafusion(expr: &Expr) -> Result<Expr> {
    use sqlparser::ast::{FunctionArg, FunctionArgExpr, FunctionArguments, Value, visit_expressions_mut};
    let mut expr = expr.clone();
    let mut failure = None;
    let _ = visit_expressions_mut(&mut expr, |e| {
        let Expr::Function(f) = e else {
            return std::ops::ControlFlow::<()>::Continue(());
        };
        if !f.name.to_string().eq_ignore_ascii_case("to_timestamp_ltz") {
            return std::ops::ControlFlow::Continue(());
        }
        let args: Vec<&Expr> = match &f.args {
            FunctionArguments::List(list) => list
                .args
                .iter()
                .filter_map(|a| match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        let precision = match args.get(1) {
            None => Some("3".to_string()),
            Some(Expr::Value(v)) => match &v.value {
                Value::Number(n, _) => Some(n.clone()),
                _ => None,
            },
            Some(_) => None,
        };
        let function = match precision.as_deref() {
            Some("0") => "to_timestamp_seconds",
            Some("3") => "to_timestamp_millis",
            Some("6") => "to_timestamp_micros",
            Some("9") => "to_timestamp_nanos",
            _ => {
                failure = Some(Error::unsupported(
                    "TO_TIMESTAMP_LTZ(value, precision) takes a precision of 0, 3, 6 or 9",
                ));
                return std::ops::ControlFlow::Break(());
            }
        };
        let Some(arg) = args.first() else {
            failure = Some(Error::syntax("TO_TIMESTAMP_LTZ needs an argument"));
            return std::ops::ControlFlow::Break(());
        };
        let text = format!("{function}({arg})");
        match sqlparser::parser::Parser::new(&sqlparser::dialect::PostgreSqlDialect {})
            .try_with_sql(&text)
            .and_then(|mut p| p.parse_expr())
        {
            Ok(new) => *e = new,
            Err(err) => failure = Some(Error::syntax(err.to_string())),
        }
        std::ops::ControlFlow::Continue(())
    });
    match failure {
        Some(e) => Err(e),
        None => Ok(expr),
    }
}

fn declared_schema(create: &CreateStream) -> Result<Option<SchemaRef>> {
    if create.columns.is_empty() {
        return Ok(None);
    }
    let mut fields: Vec<Field> = Vec::new();
    for c in &create.columns {
        let name = normalize_ident(&c.name);
        if fields.iter().any(|f| f.name() == &name) {
            return Err(Error::user(
                SqlCode::DuplicateColumn,
                format!("column \"{name}\" specified more than once"),
            ));
        }
        let not_null = c.options.iter().any(|o| matches!(o.option, ColumnOption::NotNull));
        fields.push(Field::new(name, arrow_type(&c.data_type)?, !not_null));
    }
    Ok(Some(Arc::new(Schema::new(fields))))
}

fn with_metadata_columns(declared: &Schema, metadata: Vec<Field>) -> Result<SchemaRef> {
    let mut fields: Vec<Field> = Vec::new();
    for f in declared.fields() {
        match metadata.iter().find(|m| m.name() == f.name()) {
            Some(m) if m.data_type() != f.data_type() => {
                return Err(Error::user(
                    SqlCode::DatatypeMismatch,
                    format!(
                        "column \"{}\" is a metadata column of type {}, not {}",
                        f.name(),
                        m.data_type(),
                        f.data_type()
                    ),
                ));
            }
            Some(m) => fields.push(m.clone().with_metadata(Default::default())),
            None => fields.push(f.as_ref().clone()),
        }
    }
    for m in metadata {
        if declared.field_with_name(m.name()).is_err() {
            fields.push(m);
        }
    }
    Ok(Arc::new(Schema::new(fields)))
}

fn check_matches(declared: &Schema, fixed: &Schema, connector: &str) -> Result<()> {
    let describe = |s: &Schema| {
        s.fields()
            .iter()
            .map(|f| format!("{} {}", f.name(), f.data_type()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let same = declared.fields().len() == fixed.fields().len()
        && declared
            .fields()
            .iter()
            .zip(fixed.fields())
            .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
    if same {
        return Ok(());
    }
    Err(Error::user(
        SqlCode::DatatypeMismatch,
        format!(
            "the declared columns ({}) do not match the {connector} connector's schema ({}); omit the column list to use it",
            describe(declared),
            describe(fixed)
        ),
    ))
}

fn event_time(schema: &Schema, column: &str, expr: &Expr) -> Result<EventTime> {
    let index = schema.index_of(column).map_err(|_| {
        Error::user(
            SqlCode::UndefinedColumn,
            format!("WATERMARK FOR {column}: column \"{column}\" does not exist"),
        )
    })?;
    if !matches!(schema.field(index).data_type(), DataType::Timestamp(_, _)) {
        return Err(Error::user(
            SqlCode::DatatypeMismatch,
            format!(
                "WATERMARK FOR {column}: the column must be a TIMESTAMP, not {}",
                schema.field(index).data_type()
            ),
        ));
    }
    let usage = || {
        Error::unsupported(format!(
            "WATERMARK FOR {column} AS {expr}: supported forms are `{column}` and `{column} - INTERVAL '…' SECOND`"
        ))
    };
    let is_column = |e: &Expr| matches!(e, Expr::Identifier(i) if normalize_ident(i) == column);
    let delay_ms = match expr {
        e if is_column(e) => 0,
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Minus,
            right,
        } if is_column(left) => interval_ms(right)?,
        _ => return Err(usage()),
    };
    Ok(EventTime {
        column: index,
        delay_ms,
        from_upstream: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statement::{SluiceStatement, parse_statements};
    use arrow::datatypes::TimeUnit;
    use std::collections::HashMap;

    fn metadata() -> Vec<Field> {
        let hidden = HashMap::from([(sluice_plan::catalog::HIDDEN_COLUMN.to_string(), "true".to_string())]);
        vec![
            Field::new("_m_offset", DataType::Int64, false).with_metadata(hidden.clone()),
            Field::new("_m_time", DataType::Timestamp(TimeUnit::Millisecond, None), true).with_metadata(hidden),
        ]
    }

    fn create(sql: &str) -> Result<StreamDef> {
        let Some(SluiceStatement::CreateStream(c)) = parse_statements(sql).unwrap().into_iter().next() else {
            panic!("not a CREATE STREAM: {sql}")
        };
        stream_def(&c, "kafka", None, metadata())
    }

    #[test]
    fn metadata_columns_are_appended_hidden_and_can_carry_event_time() {
        let def = create("CREATE STREAM s (v INT, WATERMARK FOR _m_time AS _m_time - INTERVAL '1' SECOND)").unwrap();
        let names: Vec<&str> = def.schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, vec!["v", "_m_offset", "_m_time"]);
        assert!(!sluice_plan::catalog::is_hidden(def.schema.field(0)));
        assert!(sluice_plan::catalog::is_hidden(def.schema.field(1)));
        let et = def.event_time.unwrap();
        assert_eq!((et.column, et.delay_ms), (2, 1000));
    }

    #[test]
    fn a_declared_metadata_column_is_visible_and_must_keep_its_type() {
        let def = create("CREATE STREAM s (_m_offset BIGINT, v INT)").unwrap();
        let names: Vec<&str> = def.schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, vec!["_m_offset", "v", "_m_time"]);
        assert!(!sluice_plan::catalog::is_hidden(def.schema.field(0)));
        let e = create("CREATE STREAM s (_m_offset TEXT)").unwrap_err();
        assert_eq!(e.sqlstate(), "42804", "{e}");
    }

    fn parse_create(sql: &str) -> CreateStream {
        match parse_statements(sql).unwrap().remove(0) {
            SluiceStatement::CreateStream(c) => *c,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn computed_timestamp_column_with_watermark() {
        let c = parse_create(
            "CREATE STREAM bid (seq BIGINT, ts AS TO_TIMESTAMP_LTZ(seq, 3), price BIGINT, \
             WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH (connector = 'datagen')",
        );
        let def = stream_def(&c, "datagen", None, Vec::new()).unwrap();
        let names: Vec<&str> = def.schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["seq", "ts", "price"]);
        assert!(matches!(
            def.schema.field(1).data_type(),
            DataType::Timestamp(TimeUnit::Millisecond, _)
        ));
        assert_eq!(
            def.computed,
            vec![ComputedColumn {
                column: 1,
                expr: "to_timestamp_millis(seq)".into()
            }]
        );
        let et = def.event_time.unwrap();
        assert_eq!((et.column, et.delay_ms), (1, 1000));
    }

    #[test]
    fn computed_column_errors() {
        let c = parse_create("CREATE STREAM s (a BIGINT, b AS nope + 1)");
        assert_eq!(
            stream_def(&c, "memory", None, Vec::new()).unwrap_err().sqlstate(),
            "42703"
        );
        let c = parse_create("CREATE STREAM s (a BIGINT, t AS TO_TIMESTAMP_LTZ(a, 2))");
        assert!(stream_def(&c, "memory", None, Vec::new()).is_err());
        let c = parse_create("CREATE STREAM s (a BIGINT, a AS a + 1)");
        assert_eq!(
            stream_def(&c, "memory", None, Vec::new()).unwrap_err().sqlstate(),
            "42701"
        );
    }
}
