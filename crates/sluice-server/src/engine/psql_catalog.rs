//! Answers to the two catalog queries of psql's `\d name` that DataFusion
//! cannot plan: the relation's flags (`array_to_string(c.reloptions ||
//! array(select …))`) and its columns (correlated scalar subqueries for
//! defaults and collations). Sluice recognises them by their shape and
//! answers them from the same catalog and type map as the `pg_catalog`
//! tables, which answer every other query psql sends (`\d`, `\dt`, `\d+`,
//! the oid lookup of `\d name`, its footers).

use super::Output;
use super::pg_catalog::Relation;
use super::pg_catalog::Snapshot;
use super::show::Table;
use sluice_sql::types::pg_type_name;
use sluice_types::Result;

/// The answer to `sql` if it is one of psql's catalog queries.
/// `snapshot` is asked only for a `pg_catalog` query.
pub fn answer(sql: &str, snapshot: impl FnOnce() -> Snapshot) -> Option<Result<Output>> {
    if !sql.contains("pg_catalog.") {
        return None;
    }
    let snapshot = snapshot();
    if let Some(answer) = super::pg_catalog::psql_meta::answer(sql, &snapshot) {
        return Some(answer.table().output("SELECT"));
    }
    if sql.trim_start().starts_with("SELECT c.relchecks, c.relkind") {
        let columns = [
            "relchecks",
            "relkind",
            "relhasindex",
            "relhasrules",
            "relhastriggers",
            "relrowsecurity",
            "relforcerowsecurity",
            "relhasoids",
            "relispartition",
            "reloptions",
            "reltablespace",
            "reloftype",
            "relpersistence",
            "relreplident",
            "amname",
        ];
        let rows = by_oid(sql, &snapshot)
            .map(|r| {
                let kind = r.kind.to_string();
                ["0", &kind, "f", "f", "f", "f", "f", "f", "f", "", "0", "", "p", "d", ""]
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<String>>()
            })
            .into_iter()
            .collect();
        return Some(Table::text(&columns, rows).output("SELECT"));
    }
    if sql.trim_start().starts_with(
        "SELECT a.attname,\n  pg_catalog.format_type(a.atttypid, a.atttypmod),\n  (SELECT pg_catalog.pg_get_expr(",
    ) {
        // The columns psql asks for, in its order (`\d+` adds storage,
        // compression, statistics target and description).
        let wanted: Vec<&str> = [
            ("attname", ""),
            ("format_type", ""),
            ("default", ""),
            ("attnotnull", ""),
            ("attcollation", "AS attcollation"),
            ("attidentity", "a.attidentity"),
            ("attgenerated", "a.attgenerated"),
            ("attstorage", "a.attstorage"),
            ("attcompression", "AS attcompression"),
            ("attstattarget", "AS attstattarget"),
            ("col_description", "col_description("),
        ]
        .into_iter()
        .filter(|(_, marker)| sql.contains(marker))
        .map(|(column, _)| column)
        .collect();
        let relation = by_oid(sql, &snapshot);
        let fields = relation.map(|r| r.schema.fields().to_vec()).unwrap_or_default();
        let rows = fields
            .iter()
            .map(|f| {
                wanted
                    .iter()
                    .map(|column| {
                        super::show::Cell::Text(match *column {
                            "attname" => Some(f.name().clone()),
                            "format_type" => Some(pg_type_name(f.data_type())),
                            "attnotnull" => Some(if f.is_nullable() { "f" } else { "t" }.into()),
                            "attidentity" | "attgenerated" | "attcompression" => Some(String::new()),
                            "attstorage" => Some(super::pg_catalog::attribute_storage(f.data_type()).into()),
                            // No default, no collation of its own, no
                            // statistics target, no comment: NULL.
                            _ => None,
                        })
                    })
                    .collect()
            })
            .collect();
        let schema = Table::text(&wanted, vec![]).schema;
        return Some(Table { schema, rows }.output("SELECT"));
    }
    // Anything else (psql's footers, other clients' queries) reads the
    // catalog tables.
    None
}

/// The stream or materialized view named by `WHERE c.oid = '16384'` /
/// `a.attrelid = '16384'`.
fn by_oid(sql: &str, snapshot: &Snapshot) -> Option<Relation> {
    let oid: i64 = ["c.oid = '", "a.attrelid = '"]
        .iter()
        .find_map(|marker| sql.split(marker).nth(1))
        .and_then(|rest| rest.split('\'').next())
        .and_then(|n| n.parse().ok())?;
    snapshot
        .relations()
        .into_iter()
        .find(|r| r.oid == oid && r.schema_name == "public")
}
