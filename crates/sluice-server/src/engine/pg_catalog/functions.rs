//! The catalog functions drivers and tools call, as DataFusion UDFs.
//!
//! Each takes its arguments as they come (oids as integers or text) and is
//! evaluated row by row: catalog tables are small.

use super::resolve::{self, OID_FUNCTION, REGCLASS_NAME, REGNAMESPACE_NAME, REGTYPE_NAME};
use super::{DATABASE_NAME, PG_CATALOG_OID, PUBLIC_OID, ROLE_NAME, ROLE_OID, Snapshot};
use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionImplementation, ScalarUDF, Signature, SimpleScalarUDF, TypeSignature, Volatility,
};
use datafusion::prelude::SessionContext;
use std::sync::Arc;

/// The version string `version()` returns.
pub fn version_string() -> String {
    format!(
        "PostgreSQL 15.0 (Sluice {}) on x86_64, a streaming SQL server",
        env!("CARGO_PKG_VERSION")
    )
}

type RowFn = dyn Fn(&[ScalarValue]) -> ScalarValue + Send + Sync;

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
            f(&values).cast_to(&out_type)
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
    let constant = |v: ScalarValue| -> Arc<RowFn> { Arc::new(move |_: &[ScalarValue]| v.clone()) };
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
            f: constant(text(ROLE_NAME)),
        },
        Def {
            name: "session_user",
            arities: &[0],
            ret: DataType::Utf8,
            f: constant(text(ROLE_NAME)),
        },
        Def {
            name: "current_schemas",
            arities: &[1],
            ret: DataType::Utf8,
            f: Arc::new(|a: &[ScalarValue]| match a.first() {
                Some(ScalarValue::Boolean(Some(true))) => text("{pg_catalog,public}"),
                Some(ScalarValue::Boolean(Some(false))) => text("{public}"),
                _ => NULL_TEXT,
            }),
        },
        Def {
            name: "pg_get_userbyid",
            arities: &[1],
            ret: DataType::Utf8,
            f: Arc::new(|a: &[ScalarValue]| match int_arg(a.first()) {
                Some(ROLE_OID) => text(ROLE_NAME),
                Some(oid) => text(format!("unknown (OID={oid})")),
                None => NULL_TEXT,
            }),
        },
        Def {
            name: "format_type",
            arities: &[2],
            ret: DataType::Utf8,
            f: Arc::new(|a: &[ScalarValue]| {
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
            f: Arc::new(|a: &[ScalarValue]| match int_arg(a.first()) {
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
            f: Arc::new(|a: &[ScalarValue]| match text_arg(a.first()) {
                Some(s) => text(quote_ident(&s)),
                None => NULL_TEXT,
            }),
        },
        Def {
            name: OID_FUNCTION,
            arities: &[1],
            ret: DataType::Int64,
            f: Arc::new(|a: &[ScalarValue]| ScalarValue::Int64(int_arg(a.first()))),
        },
        Def {
            name: REGTYPE_NAME,
            arities: &[1],
            ret: DataType::Utf8,
            f: Arc::new(|a: &[ScalarValue]| match int_arg(a.first()) {
                Some(oid) => text(resolve::format_type(oid, -1).unwrap_or_else(|| oid.to_string())),
                None => NULL_TEXT,
            }),
        },
        Def {
            name: REGNAMESPACE_NAME,
            arities: &[1],
            ret: DataType::Utf8,
            f: Arc::new(|a: &[ScalarValue]| match int_arg(a.first()) {
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
        ("pg_get_viewdef", &[1, 2]),
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
    // One superuser: every privilege.
    for name in [
        "has_table_privilege",
        "has_schema_privilege",
        "has_database_privilege",
        "has_column_privilege",
        "has_any_column_privilege",
        "has_function_privilege",
        "has_sequence_privilege",
        "pg_has_role",
    ] {
        defs.push(Def {
            name,
            arities: &[2, 3, 4],
            ret: DataType::Boolean,
            f: constant(ScalarValue::Boolean(Some(true))),
        });
    }
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
        f: Arc::new(move |a: &[ScalarValue]| match text_arg(a.first()) {
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
            f: Arc::new(move |a: &[ScalarValue]| {
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
        f: Arc::new(move |a: &[ScalarValue]| match int_arg(a.first()) {
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
        f: Arc::new(move |a: &[ScalarValue]| {
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
        f: Arc::new(|a: &[ScalarValue]| match int_arg(a.first()) {
            Some(n) => text(size_pretty(n)),
            None => NULL_TEXT,
        }),
    });
    defs.push(Def {
        name: "to_regtype",
        arities: &[1],
        ret: DataType::Int64,
        f: Arc::new(|a: &[ScalarValue]| ScalarValue::Int64(text_arg(a.first()).and_then(|t| resolve::type_oid(&t)))),
    });
    defs
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
