//! How names in catalog queries resolve, shared by the tables, the
//! functions and the rewrite: type names and oids (`format_type`,
//! `'int4'::regtype`), qualified relation names (`'public.clicks'::regclass`),
//! and the internal functions `reg…` casts are rewritten to.

use sluice_sql::types::{PgType, format_pg_type};

/// Name of the internal function `x::regclass::text` is rewritten to.
pub const REGCLASS_NAME: &str = "__sluice_regclass_name";
/// Name of the internal function `x::regtype::text` is rewritten to.
pub const REGTYPE_NAME: &str = "__sluice_regtype_name";
/// Name of the internal function `x::regnamespace::text` is rewritten to.
pub const REGNAMESPACE_NAME: &str = "__sluice_regnamespace_name";

/// Name of the internal function a non-literal `x::regclass` (or other
/// `reg…` cast) is rewritten to: the oid as bigint.
pub const OID_FUNCTION: &str = "__sluice_oid";

/// `schema.name`, `"Quoted"`, `name` → (schema, name), as Postgres reads a
/// regclass literal: unquoted parts lower-cased.
pub fn split_qualified(text: &str) -> (Option<String>, String) {
    let mut parts: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut chars = text.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                current.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            '.' if !quoted => parts.push(std::mem::take(&mut current)),
            c if quoted => current.push(c),
            c => current.extend(c.to_lowercase()),
        }
    }
    parts.push(current);
    let name = parts.pop().unwrap_or_default();
    (parts.pop(), name)
}

/// Types Postgres clients look up that Sluice never sends:
/// (oid, typname, typlen, typcategory, array oid, pseudo-type).
const OTHER_TYPES: &[(i64, &str, i16, &str, i64, bool)] = &[
    (18, "char", 1, "Z", 1002, false),
    (19, "name", 64, "S", 1003, false),
    (22, "int2vector", -1, "A", 1006, false),
    (24, "regproc", 4, "N", 1008, false),
    (26, "oid", 4, "N", 1028, false),
    (30, "oidvector", -1, "A", 1013, false),
    (114, "json", -1, "U", 199, false),
    (142, "xml", -1, "U", 143, false),
    (600, "point", 16, "G", 1017, false),
    (650, "cidr", -1, "I", 651, false),
    (705, "unknown", -2, "X", 0, true),
    (790, "money", 8, "N", 791, false),
    (829, "macaddr", 6, "U", 1040, false),
    (869, "inet", -1, "I", 1041, false),
    (1033, "aclitem", 12, "U", 1034, false),
    (1042, "bpchar", -1, "S", 1014, false),
    (1043, "varchar", -1, "S", 1015, false),
    (1266, "timetz", 12, "D", 1270, false),
    (1560, "bit", -1, "V", 1561, false),
    (1562, "varbit", -1, "V", 1563, false),
    (2205, "regclass", 4, "N", 2210, false),
    (2206, "regtype", 4, "N", 2211, false),
    (2249, "record", -1, "P", 2287, true),
    (2277, "anyarray", -1, "P", 0, true),
    (2278, "void", 4, "P", 0, true),
    (2950, "uuid", 16, "U", 2951, false),
    (3802, "jsonb", -1, "U", 3807, false),
];

/// Every type in `pg_type`: (oid, typname, len, category, array oid, element oid, pseudo).
pub fn all_types() -> Vec<(i64, String, i16, String, i64, i64, bool)> {
    let mut out = Vec::new();
    let base = PgType::ALL
        .iter()
        .map(|t| {
            (
                i64::from(t.oid()),
                t.typname(),
                t.typlen(),
                t.category().to_string(),
                i64::from(t.array_oid()),
                false,
            )
        })
        .chain(
            OTHER_TYPES
                .iter()
                .map(|(oid, name, len, cat, array, pseudo)| (*oid, *name, *len, cat.to_string(), *array, *pseudo)),
        );
    for (oid, name, len, category, array, pseudo) in base {
        out.push((oid, name.to_string(), len, category, array, 0, pseudo));
        if array != 0 {
            out.push((array, format!("_{name}"), -1, "A".to_string(), 0, oid, false));
        }
    }
    out
}

/// The name `format_type` gives type `oid` with modifier `typmod`, or
/// `None` for an oid `pg_type` does not have.
pub fn format_type(oid: i64, typmod: i32) -> Option<String> {
    if let Some(t) = u32::try_from(oid).ok().and_then(PgType::from_oid) {
        return Some(format_pg_type(t, typmod));
    }
    let (_, name, _, _, _, elem, _) = all_types().into_iter().find(|t| t.0 == oid)?;
    if elem != 0 {
        return Some(format!("{}[]", format_type(elem, -1)?));
    }
    Some(match name.as_str() {
        "varchar" if typmod >= 4 => format!("character varying({})", typmod - 4),
        "varchar" => "character varying".to_string(),
        "bpchar" if typmod >= 4 => format!("character({})", typmod - 4),
        "bpchar" => "character".to_string(),
        "char" => "\"char\"".to_string(),
        "timetz" => "time with time zone".to_string(),
        "varbit" => "bit varying".to_string(),
        _ => name,
    })
}

/// The oid of the type named `name` (`int4`, `integer`, `pg_catalog.text`), as
/// `'name'::regtype` and `to_regtype` resolve it.
pub fn type_oid(name: &str) -> Option<i64> {
    let wanted = name.trim().to_lowercase();
    let wanted = wanted.strip_prefix("pg_catalog.").unwrap_or(&wanted);
    all_types()
        .into_iter()
        .find(|t| t.1 == wanted || format_type(t.0, -1).as_deref() == Some(wanted))
        .map(|t| t.0)
}
