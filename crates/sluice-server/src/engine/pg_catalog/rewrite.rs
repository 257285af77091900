//! Postgres-only syntax of catalog queries, turned into what DataFusion plans.
//!
//! - `pg_catalog.f(…)` → `f(…)` (DataFusion's functions have no schema);
//! - `'name'::regclass` (also `regtype`, `regnamespace`, `regrole`,
//!   `regproc`) → the oid, looked up now (an unknown name is Postgres'
//!   error); `x::regclass::text` → the relation's name (likewise `regtype`,
//!   `regnamespace`); any other cast to an oid type → `BIGINT` (how oids are
//!   stored); casts to `name`, `"char"` and the vector types → `TEXT`;
//! - `OPERATOR(pg_catalog.~)` → `~` (and the other operators psql qualifies);
//! - `… COLLATE "C"` → `…` (one collation);
//! - `x = ANY('{a,b}')`, `x = ANY(ARRAY[…])`, `x = ANY(current_schemas(…))`
//!   → `x IN (…)`; `x <> ALL(…)` → `x NOT IN (…)`;
//! - `current_schemas(b)[n]` → its `n`th schema.

use super::resolve::{self, OID_FUNCTION, REGCLASS_NAME, REGNAMESPACE_NAME, REGTYPE_NAME, split_qualified};
use super::{PG_CATALOG_OID, PUBLIC_OID, ROLE_NAME, ROLE_OID, Snapshot};
use sluice_types::{Error, Result, SqlCode};
use sqlparser::ast::{
    AccessExpr, BinaryOperator, DataType as SqlType, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments,
    Ident, ObjectName, ObjectNamePart, Query, Subscript, Value, VisitMut, VisitorMut,
};
use std::ops::ControlFlow;

/// Rewrites `query` in place for the batch context (see the module docs).
pub fn rewrite(query: &mut Query, snapshot: &Snapshot) -> Result<()> {
    let mut rewriter = Rewriter { snapshot };
    match query.visit(&mut rewriter) {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(e) => Err(e),
    }
}

struct Rewriter<'a> {
    snapshot: &'a Snapshot,
}

impl VisitorMut for Rewriter<'_> {
    type Break = Error;

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<Error> {
        alias_columns_beside_wildcards(&mut query.body);
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<Error> {
        pre_rewrite(expr);
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<Error> {
        match post_rewrite(expr, self.snapshot) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => ControlFlow::Break(e),
        }
    }
}

/// `SELECT n.oid, n.* …` is valid in Postgres (two columns named `oid`),
/// but DataFusion refuses two columns of one name: a plain column beside a
/// wildcard is renamed `<name>_1` (clients read such columns by position or
/// find the wildcard's column of the same value by name).
fn alias_columns_beside_wildcards(body: &mut sqlparser::ast::SetExpr) {
    use sqlparser::ast::{SelectItem, SetExpr};
    let SetExpr::Select(select) = body else { return };
    let wildcard = select
        .projection
        .iter()
        .any(|item| matches!(item, SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)));
    if !wildcard {
        return;
    }
    for item in &mut select.projection {
        let SelectItem::UnnamedExpr(expr) = item else { continue };
        let name = match expr {
            Expr::Identifier(ident) => ident.value.to_lowercase(),
            Expr::CompoundIdentifier(parts) => match parts.last() {
                Some(last) => last.value.to_lowercase(),
                None => continue,
            },
            _ => continue,
        };
        *item = SelectItem::ExprWithAlias {
            expr: expr.clone(),
            alias: Ident::new(format!("{name}_1")),
        };
    }
}

/// The lower-case name of a SQL type (the last part of a qualified one).
fn type_name(t: &SqlType) -> String {
    match t {
        SqlType::Custom(name, _) => last_part(name).unwrap_or_default(),
        other => other.to_string().to_lowercase(),
    }
}

fn last_part(name: &ObjectName) -> Option<String> {
    name.0
        .last()
        .and_then(ObjectNamePart::as_ident)
        .map(|i| i.value.to_lowercase())
}

fn is_reg_type(name: &str) -> bool {
    matches!(
        name,
        "regclass" | "regtype" | "regnamespace" | "regrole" | "regproc" | "regprocedure" | "regoper" | "regconfig"
    )
}

fn is_text_type(t: &SqlType) -> bool {
    matches!(
        t,
        SqlType::Text | SqlType::Varchar(_) | SqlType::CharacterVarying(_) | SqlType::String(_)
    ) || matches!(type_name(t).as_str(), "text" | "name" | "varchar")
}

/// The expression under any parentheses.
fn unnest(expr: &Expr) -> &Expr {
    match expr {
        Expr::Nested(inner) => unnest(inner),
        other => other,
    }
}

fn function_call(name: &str, arg: Expr) -> Expr {
    Expr::Function(Function {
        name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new(name))]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(sqlparser::ast::FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(arg))],
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

fn string(s: &str) -> Expr {
    Expr::value(Value::SingleQuotedString(s.to_string()))
}

fn number(n: i64) -> Expr {
    Expr::value(Value::Number(n.to_string(), false))
}

/// `current_schemas(b)`: the schemas on the search path, with `pg_catalog`
/// when `b` (it is searched first implicitly).
fn current_schemas(expr: &Expr) -> Option<Vec<&'static str>> {
    let Expr::Function(f) = unnest(expr) else {
        return None;
    };
    if last_part(&f.name).as_deref() != Some("current_schemas") {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    let implicit = match list.args.first() {
        Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(e))) => match unnest(e) {
            Expr::Value(v) => matches!(v.value, Value::Boolean(true)),
            _ => true,
        },
        _ => true,
    };
    Some(if implicit {
        vec!["pg_catalog", "public"]
    } else {
        vec!["public"]
    })
}

/// The elements of an array written as `'{a,b}'`, `'{a,b}'::text[]` or
/// `ARRAY['a', 'b']`, or the schemas of `current_schemas(…)`.
fn array_elements(expr: &Expr) -> Option<Vec<Expr>> {
    if let Some(schemas) = current_schemas(expr) {
        return Some(schemas.into_iter().map(string).collect());
    }
    match unnest(expr) {
        Expr::Cast { expr, .. } => array_elements(expr),
        Expr::Array(array) => Some(array.elem.clone()),
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) => {
                let inner = s.trim().strip_prefix('{')?.strip_suffix('}')?;
                if inner.trim().is_empty() {
                    return Some(Vec::new());
                }
                Some(inner.split(',').map(|e| string(e.trim().trim_matches('"'))).collect())
            }
            _ => None,
        },
        _ => None,
    }
}

/// Rewrites that must see an expression before its children change.
fn pre_rewrite(expr: &mut Expr) {
    match expr {
        // `current_catalog`, an SQL value function without parentheses
        // (pgJDBC's getTables/getColumns name TABLE_CAT with it): the
        // database's name.
        // sqlparser reads it as a call without an argument list.
        Expr::Identifier(id) if id.quote_style.is_none() && id.value.eq_ignore_ascii_case("current_catalog") => {
            *expr = string(super::DATABASE_NAME);
        }
        Expr::Function(f)
            if matches!(f.args, FunctionArguments::None)
                && last_part(&f.name).is_some_and(|n| n.eq_ignore_ascii_case("current_catalog")) =>
        {
            *expr = string(super::DATABASE_NAME);
        }
        // x::regclass::text → the name, not the oid's digits.
        Expr::Cast {
            expr: inner, data_type, ..
        } if is_text_type(data_type) => {
            if let Expr::Cast {
                expr: value,
                data_type: reg,
                ..
            } = unnest(inner)
            {
                let function = match type_name(reg).as_str() {
                    "regclass" => REGCLASS_NAME,
                    "regtype" => REGTYPE_NAME,
                    "regnamespace" => REGNAMESPACE_NAME,
                    _ => return,
                };
                if matches!(unnest(value), Expr::Value(_)) {
                    // A literal: the cast resolves it (and checks it exists).
                    return;
                }
                *expr = function_call(function, (**value).clone());
            }
        }
        // current_schemas(b)[n]
        Expr::CompoundFieldAccess { root, access_chain } => {
            let Some(schemas) = current_schemas(root) else { return };
            let [AccessExpr::Subscript(Subscript::Index { index })] = access_chain.as_slice() else {
                return;
            };
            let Expr::Value(v) = unnest(index) else { return };
            let Value::Number(n, _) = &v.value else { return };
            let schema = n
                .parse::<usize>()
                .ok()
                .and_then(|n| schemas.get(n.checked_sub(1)?).copied());
            *expr = match schema {
                Some(s) => string(s),
                None => Expr::value(Value::Null),
            };
        }
        Expr::AnyOp {
            left,
            compare_op: BinaryOperator::Eq,
            right,
            ..
        } => {
            if let Some(list) = array_elements(right) {
                *expr = in_list(left, list, false);
            }
        }
        Expr::AllOp {
            left,
            compare_op: BinaryOperator::NotEq,
            right,
        } => {
            if let Some(list) = array_elements(right) {
                *expr = in_list(left, list, true);
            }
        }
        _ => {}
    }
}

fn in_list(left: &Expr, list: Vec<Expr>, negated: bool) -> Expr {
    if list.is_empty() {
        // x = ANY('{}') is false, x <> ALL('{}') true.
        return Expr::value(Value::Boolean(negated));
    }
    Expr::InList {
        expr: Box::new(left.clone()),
        list,
        negated,
    }
}

/// Rewrites of an expression whose children are already rewritten.
fn post_rewrite(expr: &mut Expr, snapshot: &Snapshot) -> Result<()> {
    match expr {
        Expr::Function(f) if f.name.0.len() > 1 => {
            let last = f.name.0.pop().expect("a qualified name has parts");
            f.name = ObjectName(vec![last]);
        }
        Expr::Collate { expr: inner, .. } => {
            *expr = (**inner).clone();
        }
        Expr::BinaryOp { op, .. } => {
            if let BinaryOperator::PGCustomBinaryOperator(parts) = op
                && let Some(plain) = parts.last().and_then(|p| plain_operator(p))
            {
                *op = plain;
            }
        }
        Expr::Cast {
            expr: inner, data_type, ..
        } => {
            let name = type_name(data_type);
            if is_reg_type(&name)
                && let Expr::Value(v) = unnest(inner)
                && let Value::SingleQuotedString(text) = &v.value
            {
                *expr = number(reg_oid(&name, text, snapshot)?);
                return Ok(());
            }
            if is_reg_type(&name) {
                // The oid under another name than the column's (`c.oid,
                // c.oid::regclass` are two columns).
                *expr = function_call(OID_FUNCTION, (**inner).clone());
                return Ok(());
            }
            let target = match name.as_str() {
                "oid" | "xid" | "xid8" | "cid" | "tid" => Some(SqlType::BigInt(None)),
                "name" | "\"char\"" | "char" | "bpchar" | "int2vector" | "oidvector" | "aclitem" | "pg_node_tree" => {
                    Some(SqlType::Text)
                }
                _ => None,
            };
            if let Some(target) = target {
                *data_type = target;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The plain operator for `OPERATOR(pg_catalog.op)`.
fn plain_operator(op: &str) -> Option<BinaryOperator> {
    Some(match op {
        "~" => BinaryOperator::PGRegexMatch,
        "~*" => BinaryOperator::PGRegexIMatch,
        "!~" => BinaryOperator::PGRegexNotMatch,
        "!~*" => BinaryOperator::PGRegexNotIMatch,
        "~~" => BinaryOperator::PGLikeMatch,
        "!~~" => BinaryOperator::PGNotLikeMatch,
        "~~*" => BinaryOperator::PGILikeMatch,
        "!~~*" => BinaryOperator::PGNotILikeMatch,
        "=" => BinaryOperator::Eq,
        "<>" | "!=" => BinaryOperator::NotEq,
        "<" => BinaryOperator::Lt,
        "<=" => BinaryOperator::LtEq,
        ">" => BinaryOperator::Gt,
        ">=" => BinaryOperator::GtEq,
        "||" => BinaryOperator::StringConcat,
        _ => return None,
    })
}

/// The oid a `'text'::reg…` literal names, or Postgres' error for a name
/// that does not exist.
fn reg_oid(kind: &str, text: &str, snapshot: &Snapshot) -> Result<i64> {
    if let Ok(oid) = text.trim().parse::<i64>() {
        return Ok(oid);
    }
    let (schema, name) = split_qualified(text);
    let found = match kind {
        "regclass" => snapshot.relation_oid(schema.as_deref(), &name),
        "regtype" => resolve::type_oid(text),
        "regnamespace" => match name.as_str() {
            "pg_catalog" => Some(PG_CATALOG_OID),
            "public" => Some(PUBLIC_OID),
            "information_schema" => Some(super::INFORMATION_SCHEMA_OID),
            _ => None,
        },
        "regrole" => (name == ROLE_NAME).then_some(ROLE_OID),
        _ => None,
    };
    found.ok_or_else(|| match kind {
        "regclass" => Error::user(SqlCode::UndefinedTable, format!("relation \"{text}\" does not exist")),
        "regnamespace" => Error::user(SqlCode::UndefinedObject, format!("schema \"{text}\" does not exist")),
        "regrole" => Error::user(SqlCode::UndefinedObject, format!("role \"{text}\" does not exist")),
        "regtype" => Error::user(SqlCode::UndefinedObject, format!("type \"{text}\" does not exist")),
        other => Error::unsupported(format!("{other} literals are not supported")),
    })
}
