//! Answers to the catalog queries psql sends for its `\d` meta-commands.
//!
//! psql describes relations with `pg_catalog` queries (joins, regclass
//! casts, array subqueries) that a streaming engine has no tables for.
//! Sluice recognises those queries by their shape and answers them from its
//! own catalog: streams appear as tables of schema `public`, with oids from
//! `STREAM_OID_BASE` in name order. Other `pg_catalog` queries psql sends
//! while describing (publications, statistics, inheritance, …) get an empty
//! result.

use super::Output;
use super::show::{Table, pg_type_name};
use sluice_plan::catalog::StreamDef;
use sluice_types::Result;

/// Oid of the first stream (Postgres' first user oid).
pub const STREAM_OID_BASE: u32 = 16384;

/// The answer to `sql` if it is one of psql's catalog queries.
/// `streams` is asked only for a `pg_catalog` query.
pub fn answer(sql: &str, streams: impl FnOnce() -> Vec<StreamDef>) -> Option<Result<Output>> {
    if !sql.contains("pg_catalog.") {
        return None;
    }
    let streams = streams();
    let streams = streams.as_slice();
    let oid = |i: usize| (STREAM_OID_BASE + i as u32).to_string();
    if sql.contains("pg_catalog.pg_get_userbyid(c.relowner) as \"Owner\"") {
        // \d, \dt: Schema | Name | Type | Owner
        let rows = matching(sql, streams)
            .map(|(_, s)| vec!["public".into(), s.name.clone(), "table".into(), "sluice".into()])
            .collect();
        return Some(Table::text(&["Schema", "Name", "Type", "Owner"], rows).output("SELECT"));
    }
    if sql.trim_start().starts_with("SELECT c.oid,\n  n.nspname,\n  c.relname") {
        let rows = matching(sql, streams)
            .map(|(i, s)| vec![oid(i), "public".into(), s.name.clone()])
            .collect();
        return Some(Table::text(&["oid", "nspname", "relname"], rows).output("SELECT"));
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
        let row: Vec<String> = ["0", "r", "f", "f", "f", "f", "f", "f", "f", "", "0", "", "p", "d", ""]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let rows = by_oid(sql, streams).map(|_| row.clone()).into_iter().collect();
        return Some(Table::text(&columns, rows).output("SELECT"));
    }
    if sql.trim_start().starts_with("SELECT a.attname,") {
        let Some(def) = by_oid(sql, streams) else {
            return Some(Table::text(&["attname"], vec![]).output("SELECT"));
        };
        let rows = def
            .schema
            .fields()
            .iter()
            .map(|f| {
                let not_null = if f.is_nullable() { "f" } else { "t" };
                vec![
                    f.name().clone(),
                    pg_type_name(f.data_type()),
                    String::new(),
                    not_null.into(),
                    String::new(),
                    String::new(),
                    String::new(),
                ]
            })
            .collect();
        let columns = [
            "attname",
            "format_type",
            "default",
            "attnotnull",
            "attcollation",
            "attidentity",
            "attgenerated",
        ];
        let mut table = Table::text(&columns, rows);
        // Postgres sends NULL for "no default" and "no collation".
        for row in &mut table.rows {
            row[2] = super::show::Cell::Text(None);
            row[4] = super::show::Cell::Text(None);
        }
        return Some(table.output("SELECT"));
    }
    // Footers psql asks for (publications, statistics, inheritance, …): none.
    Some(Table::text(&["none"], vec![]).output("SELECT"))
}

/// Streams whose names match the `OPERATOR(pg_catalog.~) '^(…)$'` pattern
/// psql adds for `\d name` / `\dt pattern` (all streams without one).
fn matching<'a>(sql: &str, streams: &'a [StreamDef]) -> impl Iterator<Item = (usize, &'a StreamDef)> {
    let pattern = sql
        .split("OPERATOR(pg_catalog.~) '")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .map(|p| p.to_string());
    let re = pattern.and_then(|p| regex::Regex::new(&p).ok());
    streams
        .iter()
        .enumerate()
        .filter(move |(_, s)| re.as_ref().is_none_or(|r| r.is_match(&s.name)))
}

/// The stream named by `WHERE c.oid = '16384'` / `a.attrelid = '16384'`.
fn by_oid<'a>(sql: &str, streams: &'a [StreamDef]) -> Option<&'a StreamDef> {
    let oid: u32 = ["c.oid = '", "a.attrelid = '"]
        .iter()
        .find_map(|marker| sql.split(marker).nth(1))
        .and_then(|rest| rest.split('\'').next())
        .and_then(|n| n.parse().ok())?;
    streams.get(oid.checked_sub(STREAM_OID_BASE)? as usize)
}
