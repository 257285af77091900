//! The catalog functions drivers and tools call, as DataFusion UDFs.
//!
//! Each takes its arguments as they come (oids as integers or text) and is
//! evaluated row by row: catalog tables are small.

use super::resolve::{self, OID_FUNCTION, REGCLASS_NAME, REGNAMESPACE_NAME, REGTYPE_NAME};
use super::{DATABASE_NAME, PG_CATALOG_OID, PUBLIC_OID, ROLE_OID, Snapshot};
use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionImplementation, ScalarUDF, Signature, SimpleScalarUDF, TypeSignature, Volatility,
};
use datafusion::prelude::SessionContext;
use sluice_cluster::security::{PUBLIC, Principal, Privilege};
use sluice_sql::errors::carry;
use sluice_types::{Error, ObjectKind, SqlCode};
use std::sync::Arc;

/// The version string `version()` returns.
pub fn version_string() -> String {
    format!(
        "PostgreSQL 15.0 (Sluice {}) on x86_64, a streaming SQL server",
        env!("CARGO_PKG_VERSION")
    )
}

type RowFn = dyn Fn(&[ScalarValue]) -> DfResult<ScalarValue> + Send + Sync;

/// A function that cannot fail, as a [`RowFn`].
fn ok(f: impl Fn(&[ScalarValue]) -> ScalarValue + Send + Sync + 'static) -> Arc<RowFn> {
    Arc::new(move |a: &[ScalarValue]| Ok(f(a)))
}

/// A function of `arities` arguments (any types) returning `ret`, computed
/// by `f` per row.
fn row_fn(name: &str, arities: &[usize], ret: DataType, f: Arc<RowFn>) -> ScalarUDF {
    let signatures = arities
        .iter()
        .map(|&n| {
            if n == 0 {
                TypeSignature::Nullary
            } else {
                TypeSignature::Any(n)
            }
        })
        .collect();
    let signature = Signature::one_of(signatures, Volatility::Stable);
    let out_type = ret.clone();
    let fun: ScalarFunctionImplementation = Arc::new(move |args: &[ColumnarValue]| -> DfResult<ColumnarValue> {
        let rows = args.iter().find_map(|a| match a {
            ColumnarValue::Array(a) => Some(a.len()),
            ColumnarValue::Scalar(_) => None,
        });
        let row = |i: usize| -> DfResult<ScalarValue> {
            let values = args
                .iter()
                .map(|a| match a {
                    ColumnarValue::Scalar(s) => Ok(s.clone()),
                    ColumnarValue::Array(array) => ScalarValue::try_from_array(array, i),
                })
                .collect::<DfResult<Vec<_>>>()?;
            f(&values)?.cast_to(&out_type)
        };
        match rows {
            None => Ok(ColumnarValue::Scalar(row(0)?)),
            Some(0) => Ok(ColumnarValue::Array(arrow::array::new_empty_array(&out_type))),
            Some(n) => {
                let values = (0..n).map(row).collect::<DfResult<Vec<_>>>()?;
                Ok(ColumnarValue::Array(ScalarValue::iter_to_array(values)?))
            }
        }
    });
    ScalarUDF::from(SimpleScalarUDF::new_with_signature(name, signature, ret, fun))
}

/// An integer argument (an oid, a typmod), from any integer or numeric text.
fn int_arg(v: Option<&ScalarValue>) -> Option<i64> {
    let v = v?;
    if v.is_null() {
        return None;
    }
    match v.cast_to(&DataType::Int64).ok()? {
        ScalarValue::Int64(n) => n,
        _ => None,
    }
}

fn text_arg(v: Option<&ScalarValue>) -> Option<String> {
    let v = v?;
    if v.is_null() {
        return None;
    }
    match v.cast_to(&DataType::Utf8).ok()? {
        ScalarValue::Utf8(s) => s,
        _ => None,
    }
}

fn text(v: impl Into<String>) -> ScalarValue {
    ScalarValue::Utf8(Some(v.into()))
}

const NULL_TEXT: ScalarValue = ScalarValue::Utf8(None);

/// Postgres' `quote_ident`: double-quoted unless a lower-case identifier.
fn quote_ident(s: &str) -> String {
    let plain = s.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !sqlparser::keywords::RESERVED_FOR_COLUMN_ALIAS
            .iter()
            .any(|k| format!("{k:?}").eq_ignore_ascii_case(s));
    if plain {
        s.to_string()
    } else {
        format!("\"{}\"", s.replace('"', "\"\""))
    }
}

/// Postgres' `pg_size_pretty`: bytes, then kB, MB, GB, TB (rounded, each
/// unit used up to 10239 of it).
fn size_pretty(bytes: i64) -> String {
    let mut value = bytes;
    for unit in ["bytes", "kB", "MB", "GB"] {
        if value.abs() < 10 * 1024 {
            return format!("{value} {unit}");
        }
        value = (value + value.signum() * 512) / 1024;
    }
    format!("{value} TB")
}

/// (name, arities, return type) of every function, for `pg_proc`.
struct Def {
    name: &'static str,
    arities: &'static [usize],
    ret: DataType,
    f: Arc<RowFn>,
}

fn definitions(snapshot: &Arc<Snapshot>) -> Vec<Def> {
    let constant = |v: ScalarValue| -> Arc<RowFn> { ok(move |_: &[ScalarValue]| v.clone()) };
    let mut defs = vec![
        Def {
            name: "version",
            arities: &[0],
            ret: DataType::Utf8,
            f: constant(text(version_string())),
        },
        Def {
            name: "current_schema",
            arities: &[0],
            ret: DataType::Utf8,
            f: constant(text("public")),
        },
        Def {
            name: "current_database",
            arities: &[0],
            ret: DataType::Utf8,
            f: constant(text(DATABASE_NAME)),
        },
        Def {
            name: "current_user",
            arities: &[0],
            ret: DataType::Utf8,
            f: constant(text(snapshot.current_user())),
        },
        Def {
            name: "session_user",
            arities: &[0],
            ret: DataType::Utf8,
            f: constant(text(snapshot.current_user())),
        },
        Def {
            name: "current_schemas",
            arities: &[1],
            ret: DataType::Utf8,
            f: ok(|a: &[ScalarValue]| match a.first() {
                Some(ScalarValue::Boolean(Some(true))) => text("{pg_catalog,public}"),
                Some(ScalarValue::Boolean(Some(false))) => text("{public}"),
                _ => NULL_TEXT,
            }),
        },
        Def {
            name: "pg_get_userbyid",
            arities: &[1],
            ret: DataType::Utf8,
            f: {
                let s = snapshot.clone();
                ok(move |a: &[ScalarValue]| match int_arg(a.first()) {
                    Some(oid) => text(s.role_name(oid).unwrap_or_else(|| format!("unknown (OID={oid})"))),
                    None => NULL_TEXT,
                })
            },
        },
        Def {
            name: "format_type",
            arities: &[2],
            ret: DataType::Utf8,
            f: ok(|a: &[ScalarValue]| {
                let Some(oid) = int_arg(a.first()) else {
                    return NULL_TEXT;
                };
                let typmod = int_arg(a.get(1)).and_then(|t| i32::try_from(t).ok()).unwrap_or(-1);
                text(resolve::format_type(oid, typmod).unwrap_or_else(|| "???".into()))
            }),
        },
        Def {
            name: "pg_encoding_to_char",
            arities: &[1],
            ret: DataType::Utf8,
            f: ok(|a: &[ScalarValue]| match int_arg(a.first()) {
                Some(6) => text("UTF8"),
                Some(0) => text("SQL_ASCII"),
                Some(_) => text(""),
                None => NULL_TEXT,
            }),
        },
        Def {
            name: "pg_backend_pid",
            arities: &[0],
            ret: DataType::Int32,
            f: constant(ScalarValue::Int32(Some(std::process::id() as i32))),
        },
        Def {
            name: "pg_is_in_recovery",
            arities: &[0],
            ret: DataType::Boolean,
            f: constant(ScalarValue::Boolean(Some(false))),
        },
        Def {
            name: "quote_ident",
            arities: &[1],
            ret: DataType::Utf8,
            f: ok(|a: &[ScalarValue]| match text_arg(a.first()) {
                Some(s) => text(quote_ident(&s)),
                None => NULL_TEXT,
            }),
        },
        Def {
            name: OID_FUNCTION,
            arities: &[1],
            ret: DataType::Int64,
            f: ok(|a: &[ScalarValue]| ScalarValue::Int64(int_arg(a.first()))),
        },
        Def {
            name: REGTYPE_NAME,
            arities: &[1],
            ret: DataType::Utf8,
            f: ok(|a: &[ScalarValue]| match int_arg(a.first()) {
                Some(oid) => text(resolve::format_type(oid, -1).unwrap_or_else(|| oid.to_string())),
                None => NULL_TEXT,
            }),
        },
        Def {
            name: REGNAMESPACE_NAME,
            arities: &[1],
            ret: DataType::Utf8,
            f: ok(|a: &[ScalarValue]| match int_arg(a.first()) {
                Some(PG_CATALOG_OID) => text("pg_catalog"),
                Some(PUBLIC_OID) => text("public"),
                Some(super::INFORMATION_SCHEMA_OID) => text("information_schema"),
                Some(oid) => text(oid.to_string()),
                None => NULL_TEXT,
            }),
        },
    ];
    // Comments, defaults, index and constraint definitions: Sluice has none.
    for (name, arities) in [
        ("obj_description", &[1, 2][..]),
        ("col_description", &[2]),
        ("shobj_description", &[2]),
        ("pg_get_expr", &[2, 3]),
        ("pg_get_indexdef", &[1, 3]),
        ("pg_get_constraintdef", &[1, 2]),
        ("pg_get_triggerdef", &[1, 2]),
        ("pg_get_partkeydef", &[1]),
        ("pg_get_function_result", &[1]),
        ("pg_get_function_arguments", &[1]),
        ("pg_get_function_identity_arguments", &[1]),
        ("pg_get_statisticsobjdef_columns", &[1]),
    ] {
        defs.push(Def {
            name,
            arities,
            ret: DataType::Utf8,
            f: constant(NULL_TEXT),
        });
    }
    // Schemas, the database, functions and sequences: every role may use
    // them (Sluice has no privileges on them).
    for name in [
        "has_schema_privilege",
        "has_database_privilege",
        "has_function_privilege",
        "has_sequence_privilege",
    ] {
        defs.push(Def {
            name,
            arities: &[2, 3],
            ret: DataType::Boolean,
            f: constant(ScalarValue::Boolean(Some(true))),
        });
    }
    // Streams: by the executor's rules (`SecurityCatalog::allows`).
    for (name, arities, target) in [
        ("has_table_privilege", &[2, 3], Target::Table),
        ("has_any_column_privilege", &[2, 3], Target::AnyColumn),
        ("has_column_privilege", &[3, 4], Target::Column),
    ] {
        let s = snapshot.clone();
        defs.push(Def {
            name,
            arities,
            ret: DataType::Boolean,
            f: Arc::new(move |a: &[ScalarValue]| table_privilege(&s, a, target)),
        });
    }
    // A materialized view's query (psql's `\d+ view`); NULL for anything
    // else.
    let s = snapshot.clone();
    defs.push(Def {
        name: "pg_get_viewdef",
        arities: &[1, 2],
        ret: DataType::Utf8,
        f: ok(
            move |a: &[ScalarValue]| match int_arg(a.first()).and_then(|oid| s.view_definition(oid)) {
                Some(definition) => text(definition),
                None => NULL_TEXT,
            },
        ),
    });
    let s = snapshot.clone();
    defs.push(Def {
        name: "pg_has_role",
        arities: &[2, 3],
        ret: DataType::Boolean,
        f: Arc::new(move |a: &[ScalarValue]| has_role(&s, a)),
    });
    // Streams keep no relation files.
    for name in [
        "pg_total_relation_size",
        "pg_relation_size",
        "pg_table_size",
        "pg_indexes_size",
    ] {
        defs.push(Def {
            name,
            arities: &[1, 2],
            ret: DataType::Int64,
            f: constant(ScalarValue::Int64(Some(0))),
        });
    }
    let s = snapshot.clone();
    defs.push(Def {
        name: "current_setting",
        arities: &[1, 2],
        ret: DataType::Utf8,
        f: ok(move |a: &[ScalarValue]| match text_arg(a.first()) {
            Some(name) => s.setting(&name).map(text).unwrap_or(NULL_TEXT),
            None => NULL_TEXT,
        }),
    });
    // Visible: on the search path (pg_catalog, public).
    for name in ["pg_table_is_visible", "pg_type_is_visible", "pg_function_is_visible"] {
        let s = snapshot.clone();
        let tables = name == "pg_table_is_visible";
        defs.push(Def {
            name,
            arities: &[1],
            ret: DataType::Boolean,
            f: ok(move |a: &[ScalarValue]| {
                let Some(oid) = int_arg(a.first()) else {
                    return ScalarValue::Boolean(None);
                };
                let visible = !tables
                    || s.relations()
                        .iter()
                        .any(|r| r.oid == oid && matches!(r.namespace, PG_CATALOG_OID | PUBLIC_OID));
                ScalarValue::Boolean(Some(visible))
            }),
        });
    }
    let s = snapshot.clone();
    defs.push(Def {
        name: REGCLASS_NAME,
        arities: &[1],
        ret: DataType::Utf8,
        f: ok(move |a: &[ScalarValue]| match int_arg(a.first()) {
            Some(oid) => text(
                s.relations()
                    .into_iter()
                    .find(|r| r.oid == oid)
                    .map(|r| match r.namespace {
                        PG_CATALOG_OID | PUBLIC_OID => quote_ident(&r.name),
                        _ => format!("{}.{}", r.schema_name, quote_ident(&r.name)),
                    })
                    .unwrap_or_else(|| oid.to_string()),
            ),
            None => NULL_TEXT,
        }),
    });
    let s = snapshot.clone();
    defs.push(Def {
        name: "to_regclass",
        arities: &[1],
        ret: DataType::Int64,
        f: ok(move |a: &[ScalarValue]| {
            let oid = text_arg(a.first()).and_then(|name| {
                let (schema, name) = resolve::split_qualified(&name);
                s.relation_oid(schema.as_deref(), &name)
            });
            ScalarValue::Int64(oid)
        }),
    });
    defs.push(Def {
        name: "pg_size_pretty",
        arities: &[1],
        ret: DataType::Utf8,
        f: ok(|a: &[ScalarValue]| match int_arg(a.first()) {
            Some(n) => text(size_pretty(n)),
            None => NULL_TEXT,
        }),
    });
    defs.push(Def {
        name: "to_regtype",
        arities: &[1],
        ret: DataType::Int64,
        f: ok(|a: &[ScalarValue]| ScalarValue::Int64(text_arg(a.first()).and_then(|t| resolve::type_oid(&t)))),
    });
    defs
}

const NULL_BOOL: ScalarValue = ScalarValue::Boolean(None);

fn is_text(v: &ScalarValue) -> bool {
    matches!(v.data_type(), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// `role "name" does not exist` (`42704`), as Postgres reports it.
fn no_such_role(name: &str) -> DataFusionError {
    carry(Error::not_found(ObjectKind::Role, name))
}

/// `relation "name" does not exist` (`42P01`).
fn no_such_relation(name: &str) -> DataFusionError {
    carry(Error::user(
        SqlCode::UndefinedTable,
        format!("relation \"{name}\" does not exist"),
    ))
}

/// `unrecognized privilege type: "item"` (`22023`).
fn unrecognized_privilege(item: &str) -> DataFusionError {
    carry(Error::invalid_option(format!(
        "unrecognized privilege type: \"{}\"",
        item.trim()
    )))
}

/// The role an argument names (a name, or an oid); `Ok(None)` for an oid
/// no role has (Postgres answers NULL), an error for an unknown name.
fn role_arg(s: &Snapshot, v: &ScalarValue) -> DfResult<Option<Principal>> {
    let name = if is_text(v) {
        let name = text_arg(Some(v)).unwrap_or_default();
        return s.principal(&name).map(Some).ok_or_else(|| no_such_role(&name));
    } else {
        match int_arg(Some(v)).and_then(|oid| s.role_name(oid)) {
            Some(name) => name,
            None => return Ok(None),
        }
    };
    Ok(s.principal(&name))
}

/// The role a function without a role argument asks about: the one the
/// statement runs as (an error if it was dropped meanwhile).
fn current_principal(s: &Snapshot) -> DfResult<Principal> {
    s.principal(s.current_user())
        .ok_or_else(|| no_such_role(s.current_user()))
}

/// A privilege `has_table_privilege` is asked about.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Asked {
    /// SELECT or INSERT, optionally WITH GRANT OPTION.
    Stream(Privilege, bool),
    /// UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER, MAINTAIN: statements
    /// Sluice does not have, so no role holds them.
    Absent,
}

/// Which privilege function: its arguments, and the privilege words it
/// takes (Postgres' `convert_table_priv_string` for a table,
/// `convert_column_priv_string` for columns).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    /// `has_table_privilege([role,] table, privileges)`: SELECT, INSERT,
    /// UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER, MAINTAIN.
    Table,
    /// `has_any_column_privilege([role,] table, privileges)`: SELECT,
    /// INSERT, UPDATE, REFERENCES.
    AnyColumn,
    /// `has_column_privilege([role,] table, column, privileges)`: as
    /// `AnyColumn`.
    Column,
}

/// One item of a privilege list: its word (upper case), whether `WITH
/// GRANT OPTION` (or, for roles, `WITH ADMIN OPTION`) was asked, and the
/// item as written (for the error).
struct PrivilegeItem<'a> {
    word: String,
    option: bool,
    text: &'a str,
}

/// Splits Postgres' privilege list: comma-separated items, any case, each
/// a word optionally followed by `WITH GRANT OPTION` (or `WITH ADMIN
/// OPTION` when `admin_option`).
fn privilege_items(list: &str, admin_option: bool) -> DfResult<Vec<PrivilegeItem<'_>>> {
    list.split(',')
        .map(|text| {
            let words: Vec<String> = text.split_whitespace().map(|w| w.to_ascii_uppercase()).collect();
            let (word, option) = match words.as_slice() {
                [word] => (word.clone(), false),
                [word, w, g, o] if w == "WITH" && (g == "GRANT" || admin_option && g == "ADMIN") && o == "OPTION" => {
                    (word.clone(), true)
                }
                _ => return Err(unrecognized_privilege(text)),
            };
            Ok(PrivilegeItem { word, option, text })
        })
        .collect()
}

/// The privileges asked of a table or column function.
fn parse_privileges(list: &str, target: Target) -> DfResult<Vec<Asked>> {
    let table_only = ["DELETE", "TRUNCATE", "TRIGGER", "MAINTAIN"];
    privilege_items(list, false)?
        .into_iter()
        .map(|item| match item.word.as_str() {
            "SELECT" => Ok(Asked::Stream(Privilege::Select, item.option)),
            "INSERT" => Ok(Asked::Stream(Privilege::Insert, item.option)),
            "UPDATE" | "REFERENCES" => Ok(Asked::Absent),
            w if target == Target::Table && table_only.contains(&w) => Ok(Asked::Absent),
            _ => Err(unrecognized_privilege(item.text)),
        })
        .collect()
}

/// `has_table_privilege`, `has_any_column_privilege` and
/// `has_column_privilege` (a column has its stream's privileges): whether the role holds any of the privileges,
/// by the rules the executor enforces: on a stream, SELECT and INSERT for a
/// superuser, the owner or a grantee; a grant option only for the owner or
/// a superuser (they are the ones who may GRANT); on a catalog table SELECT
/// for everyone.
///
/// As in Postgres: an unknown role name is `42704`, an unknown relation
/// name `42P01`, an unknown column name `42703`, an unknown privilege word
/// `22023` (checked in that order); an oid that is no role or relation, or
/// a column number the relation does not have, gives NULL.
fn table_privilege(s: &Snapshot, a: &[ScalarValue], target: Target) -> DfResult<ScalarValue> {
    let (role, table, column, list) = match (target, a) {
        (Target::Column, [role, table, column, list]) => (Some(role), table, Some(column), list),
        (Target::Column, [table, column, list]) => (None, table, Some(column), list),
        (Target::Table | Target::AnyColumn, [role, table, list]) => (Some(role), table, None, list),
        (Target::Table | Target::AnyColumn, [table, list]) => (None, table, None, list),
        _ => return Ok(NULL_BOOL),
    };
    if table.is_null()
        || list.is_null()
        || role.is_some_and(ScalarValue::is_null)
        || column.is_some_and(ScalarValue::is_null)
    {
        return Ok(NULL_BOOL);
    }
    let who = match role {
        // `public`: what is granted to PUBLIC (Postgres' pseudo-role).
        Some(role) if is_text(role) && text_arg(Some(role)).as_deref() == Some(PUBLIC) => Some(Principal {
            name: PUBLIC.to_string(),
            superuser: false,
            writes_server_files: false,
        }),
        Some(role) => role_arg(s, role)?,
        None => Some(current_principal(s)?),
    };
    let relations = s.relations();
    let relation = if is_text(table) {
        let name = text_arg(Some(table)).unwrap_or_default();
        let (schema, unqualified) = resolve::split_qualified(&name);
        let oid = s
            .relation_oid(schema.as_deref(), &unqualified)
            .ok_or_else(|| no_such_relation(&name))?;
        relations.iter().find(|r| r.oid == oid)
    } else {
        let oid = int_arg(Some(table));
        relations.iter().find(|r| Some(r.oid) == oid)
    };
    let column_exists = match (column, relation) {
        (None, _) => true,
        (Some(column), Some(relation)) if is_text(column) => {
            let name = text_arg(Some(column)).unwrap_or_default();
            if relation.schema.fields().iter().all(|f| f.name() != &name) {
                return Err(carry(Error::user(
                    SqlCode::UndefinedColumn,
                    format!("column \"{name}\" of relation \"{}\" does not exist", relation.name),
                )));
            }
            true
        }
        (Some(column), Some(relation)) => {
            int_arg(Some(column)).is_some_and(|n| n >= 1 && n <= relation.schema.fields().len() as i64)
        }
        (Some(_), None) => false,
    };
    let asked = parse_privileges(&text_arg(Some(list)).unwrap_or_default(), target)?;
    let (Some(who), Some(relation), true) = (who, relation, column_exists) else {
        return Ok(NULL_BOOL);
    };
    let held = asked.iter().any(|asked| match (relation.stream, asked) {
        (_, Asked::Absent) => false,
        (Some(i), Asked::Stream(privilege, grant_option)) => {
            let stream = &s.streams[i].name;
            if *grant_option {
                who.superuser || s.stream_owner(stream) == who.name
            } else {
                who.superuser || s.stream_owner(stream) == who.name || s.security.allows(&who, *privilege, stream)
            }
        }
        (None, Asked::Stream(privilege, _)) => *privilege == Privilege::Select,
    });
    Ok(ScalarValue::Boolean(Some(held)))
}

/// `pg_has_role([user,] role, 'MEMBER' | 'USAGE' | 'SET')`: the role
/// itself, a superuser, or a member of it; `… WITH ADMIN OPTION` (or
/// `WITH GRANT OPTION`) only a superuser, the only one who may GRANT a
/// role in Sluice. An unknown role name is `42704`, an unknown privilege
/// word `22023`, an oid no role has NULL (as in Postgres).
fn has_role(s: &Snapshot, a: &[ScalarValue]) -> DfResult<ScalarValue> {
    let (user, role, mode) = match a {
        [user, role, mode] => (Some(user), role, mode),
        [role, mode] => (None, role, mode),
        _ => return Ok(NULL_BOOL),
    };
    if role.is_null() || mode.is_null() || user.is_some_and(ScalarValue::is_null) {
        return Ok(NULL_BOOL);
    }
    let who = match user {
        Some(user) => role_arg(s, user)?,
        None => Some(current_principal(s)?),
    };
    let role = role_arg(s, role)?;
    let list = text_arg(Some(mode)).unwrap_or_default();
    // Whether each item asks for the admin option.
    let asked = privilege_items(&list, true)?
        .into_iter()
        .map(|item| match item.word.as_str() {
            "MEMBER" | "USAGE" | "SET" => Ok(item.option),
            _ => Err(unrecognized_privilege(item.text)),
        })
        .collect::<DfResult<Vec<bool>>>()?;
    let (Some(who), Some(role)) = (who, role) else {
        return Ok(NULL_BOOL);
    };
    let member = who.name == role.name
        || s.roles()
            .into_iter()
            .any(|r| r.name == who.name && r.member_of.contains(&role.name));
    let held = asked.iter().any(|&admin| who.superuser || !admin && member);
    Ok(ScalarValue::Boolean(Some(held)))
}

/// Registers every catalog function in `ctx`.
pub fn register(ctx: &SessionContext, snapshot: Arc<Snapshot>) {
    for def in definitions(&snapshot) {
        ctx.register_udf(row_fn(def.name, def.arities, def.ret, def.f));
    }
}

/// First oid of the functions in `pg_proc`.
const PROC_OID_BASE: i64 = 9000;

/// `pg_proc`'s rows: the catalog functions above (not DataFusion's own).
pub fn catalog_rows() -> Vec<Vec<(&'static str, ScalarValue)>> {
    let snapshot = Arc::new(Snapshot::default());
    definitions(&snapshot)
        .into_iter()
        .filter(|d| !d.name.starts_with("__"))
        .enumerate()
        .map(|(i, d)| {
            let ret = sluice_sql::types::pg_type(&d.ret).oid();
            let nargs = d.arities.iter().copied().max().unwrap_or(0);
            vec![
                ("oid", ScalarValue::Int64(Some(PROC_OID_BASE + i as i64))),
                ("proname", text(d.name)),
                ("pronamespace", ScalarValue::Int64(Some(PG_CATALOG_OID))),
                ("proowner", ScalarValue::Int64(Some(ROLE_OID))),
                ("prolang", ScalarValue::Int64(Some(12))),
                ("procost", ScalarValue::Float32(Some(1.0))),
                ("prokind", text("f")),
                ("provolatile", text("s")),
                ("proparallel", text("s")),
                ("pronargs", ScalarValue::Int64(Some(nargs as i64))),
                ("prorettype", ScalarValue::Int64(Some(ret.into()))),
                ("proargtypes", text("")),
                ("prosrc", text(d.name)),
            ]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_ident_quotes_what_postgres_quotes() {
        assert_eq!(quote_ident("bids"), "bids");
        assert_eq!(quote_ident("Bids"), "\"Bids\"");
        assert_eq!(quote_ident("a b"), "\"a b\"");
        assert_eq!(quote_ident("x\"y"), "\"x\"\"y\"");
        assert_eq!(quote_ident("select"), "\"select\"");
    }

    #[test]
    fn size_pretty_uses_postgres_units() {
        assert_eq!(size_pretty(0), "0 bytes");
        assert_eq!(size_pretty(10_239), "10239 bytes");
        assert_eq!(size_pretty(10_240), "10 kB");
        assert_eq!(size_pretty(20 * 1024 * 1024), "20 MB");
    }
}
