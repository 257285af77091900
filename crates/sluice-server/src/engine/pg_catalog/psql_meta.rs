//! Answers to psql's `\du` and `\dp`, whose queries use `ARRAY(SELECT …)`
//! subqueries DataFusion cannot plan. Recognised by their shape (psql 15's
//! text; psql 16's `\du` has no subquery and runs on the catalog tables),
//! answered from the same [`Snapshot`] the `pg_catalog` tables read, so
//! they show what `pg_roles`, `pg_auth_members` and `pg_class.relacl` show.

use super::Snapshot;
use crate::engine::show::{Cell, Table};

/// A result with text columns, `None` for NULL.
pub struct Answer {
    pub columns: Vec<&'static str>,
    pub rows: Vec<Vec<Option<String>>>,
}

/// The answer to `sql` if it is psql's `\du` or `\dp` query.
pub fn answer(sql: &str, snapshot: &Snapshot) -> Option<Answer> {
    let text = sql.trim_start();
    if text.starts_with("SELECT r.rolname, r.rolsuper, r.rolinherit") && sql.contains("as memberof") {
        return Some(roles(sql, snapshot));
    }
    if text.starts_with("SELECT n.nspname as \"Schema\"") && sql.contains("AS \"Access privileges\"") {
        return Some(privileges(sql, snapshot));
    }
    None
}

impl Answer {
    /// As a row result of text columns.
    pub fn table(self) -> Table {
        let schema = Table::text(&self.columns, vec![]).schema;
        let rows = self
            .rows
            .into_iter()
            .map(|row| row.into_iter().map(Cell::Text).collect())
            .collect();
        Table { schema, rows }
    }
}

/// The regular expression psql made of a name pattern
/// (`rolname OPERATOR(pg_catalog.~) '^(alice)$'`), if it sent one.
fn name_pattern(sql: &str, column: &str) -> Option<regex::Regex> {
    let marker = format!("{column} OPERATOR(pg_catalog.~) '");
    let rest = sql.split(marker.as_str()).nth(1)?;
    let literal = rest.split('\'').next()?;
    regex::Regex::new(literal).ok()
}

fn flag(b: bool) -> Option<String> {
    Some(if b { "t" } else { "f" }.to_string())
}

/// `\du [pattern]`: roles whose names do not start with `pg_`, in name
/// order, with their memberships.
fn roles(sql: &str, snapshot: &Snapshot) -> Answer {
    let pattern = name_pattern(sql, "r.rolname");
    // `\du+` asks for a description after the memberships: none.
    let verbose = sql.contains("AS description");
    let mut roles = snapshot.roles();
    roles.sort_by(|a, b| a.name.cmp(&b.name));
    let rows = roles
        .into_iter()
        // `\du` without S or a pattern leaves out the built-in roles.
        .filter(|r| !(r.name.starts_with("pg_") && sql.contains("r.rolname !~ '^pg_'")))
        .filter(|r| pattern.as_ref().is_none_or(|p| p.is_match(&r.name)))
        .map(|r| {
            let mut member_of = r.member_of.clone();
            member_of.sort();
            let mut row = vec![
                Some(r.name.clone()),
                flag(r.superuser),
                flag(true),
                flag(r.superuser),
                flag(r.superuser),
                flag(r.login),
                Some("-1".to_string()),
                None,
                Some(format!("{{{}}}", member_of.join(","))),
                flag(false),
                flag(r.superuser),
            ];
            if verbose {
                row.insert(9, None);
            }
            row
        })
        .collect();
    let mut columns = vec![
        "rolname",
        "rolsuper",
        "rolinherit",
        "rolcreaterole",
        "rolcreatedb",
        "rolcanlogin",
        "rolconnlimit",
        "rolvaliduntil",
        "memberof",
        "rolreplication",
        "rolbypassrls",
    ];
    if verbose {
        columns.insert(9, "description");
    }
    Answer { columns, rows }
}

/// `\dp [pattern]`: the streams (the visible relations outside `pg_*`
/// schemas) in name order with their access privileges, one aclitem a
/// line (`array_to_string(c.relacl, E'\n')`); no column privileges or
/// policies.
fn privileges(sql: &str, snapshot: &Snapshot) -> Answer {
    let pattern = name_pattern(sql, "c.relname");
    let rows = snapshot
        .streams
        .iter()
        .filter(|s| pattern.as_ref().is_none_or(|p| p.is_match(&s.name)))
        .map(|s| {
            let acl = snapshot.stream_acl(&s.name).map(|acl| {
                acl.trim_start_matches('{')
                    .trim_end_matches('}')
                    .split(',')
                    .collect::<Vec<_>>()
                    .join("\n")
            });
            vec![
                Some("public".to_string()),
                Some(s.name.clone()),
                Some("table".to_string()),
                acl,
                Some(String::new()),
                Some(String::new()),
            ]
        })
        .collect();
    Answer {
        columns: vec![
            "Schema",
            "Name",
            "Type",
            "Access privileges",
            "Column privileges",
            "Policies",
        ],
        rows,
    }
}
