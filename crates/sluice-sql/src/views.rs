//! Pipelines built over materialized views.
//!
//! A pipeline (a sink, a derived stream, another view) that reads a
//! materialized view computes the view's query itself: each relation that
//! names a view is replaced by the view's query as a derived table, aliased
//! by the name the query read it by, as Flink expands a view into the query
//! that reads it. A view's query is stored written out (its own views
//! already replaced, [`inline_views`] returns it), so a view's definition
//! is fixed when it is created: dropping or re-creating a view another was
//! built over changes nothing that runs.

use crate::names::normalize_ident;
use crate::window_tvf::extract_window_tvfs;
use sluice_types::{Error, Result, SqlCode};
use sqlparser::ast::{ObjectName, Query, TableAlias, TableFactor, Visit, VisitMut, Visitor, VisitorMut};
use std::ops::ControlFlow;

/// A materialized view as a query reading it sees it.
#[derive(Debug, Clone)]
pub struct ViewQuery {
    /// The view's name.
    pub name: String,
    /// Its query, with the views it read written out.
    pub query: Query,
}

/// What [`inline_views`] looks views up with: the normalised parts of a
/// relation name (`["v"]`, `["public", "v"]`) to the view they name, if
/// any.
pub type Views<'a> = &'a dyn Fn(&[String]) -> Result<Option<ViewQuery>>;

/// Replaces every relation of `query` that names a materialized view (and
/// that no `WITH` query in scope hides) by the view's query, and returns
/// the names of the views replaced, in the order first read.
///
/// Refused: a window TVF over a view (`0A000`; a window reads a stream,
/// with its watermarks — `CREATE STREAM … AS` the view's query for one), and
/// a `WITH` name that would hide, inside a view's query, a relation that
/// query reads (`0A000`: the name would read the `WITH` query instead).
pub fn inline_views(query: &mut Query, views: Views<'_>) -> Result<Vec<String>> {
    // A view whose stored query cannot be read back is still a view here.
    let is_view = |name: &str| !matches!(views(&[name.to_string()]), Ok(None));
    refuse_windows_over_views(query, &is_view)?;
    let mut inliner = Inliner {
        views,
        scopes: Vec::new(),
        inlined: Vec::new(),
        error: None,
    };
    let _ = query.visit(&mut inliner);
    match inliner.error {
        Some(e) => Err(e),
        None => Ok(inliner.inlined),
    }
}

/// A window TVF names its stream as an argument, not as a relation: a view
/// there (`is_view` of the name) cannot be replaced by a derived table, nor
/// read as a batch (`0A000` either way).
pub fn refuse_windows_over_views(query: &Query, is_view: &dyn Fn(&str) -> bool) -> Result<()> {
    let mut probe = query.clone();
    let Ok(windows) = extract_window_tvfs(&mut probe) else {
        // The planner reports a malformed window call itself.
        return Ok(());
    };
    match windows.into_iter().find(|w| is_view(&w.stream)) {
        Some(window) => Err(Error::unsupported(format!(
            "a window reads a stream, and \"{}\" is a materialized view: window the streams its query reads, or create a stream of its query (CREATE STREAM name AS …) and window that",
            window.stream
        ))),
        None => Ok(()),
    }
}

struct Inliner<'a> {
    views: Views<'a>,
    /// The `WITH` names of each enclosing query, innermost last.
    scopes: Vec<Vec<String>>,
    inlined: Vec<String>,
    error: Option<Error>,
}

impl Inliner<'_> {
    fn hidden_by_with(&self, parts: &[String]) -> bool {
        matches!(parts, [name] if self.scopes.iter().any(|names| names.contains(name)))
    }

    /// The derived table that stands for `view` read as `alias`.
    fn replacement(&self, view: ViewQuery, alias: Option<TableAlias>) -> Result<TableFactor> {
        // A relation the view's query reads by a name a WITH query in
        // scope also has would read that WITH query once written out here.
        for parts in relation_names(&view.query) {
            if self.hidden_by_with(&parts) {
                return Err(Error::unsupported(format!(
                    "the WITH query \"{}\" hides the relation of that name which materialized view \"{}\" reads; rename the WITH query",
                    parts.join("."),
                    view.name
                )));
            }
        }
        let alias = alias.unwrap_or_else(|| TableAlias {
            explicit: true,
            name: sqlparser::ast::Ident::with_quote('"', view.name.clone()),
            columns: Vec::new(),
            at: None,
        });
        Ok(TableFactor::Derived {
            lateral: false,
            subquery: Box::new(view.query),
            alias: Some(alias),
            sample: None,
        })
    }
}

impl VisitorMut for Inliner<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        let mut names = Vec::new();
        if let Some(with) = query.with.as_mut() {
            // A WITH query's body sees the WITH queries before it (all of
            // them and itself under WITH RECURSIVE), not its own name nor
            // later ones: `WITH v AS (SELECT … FROM v)` reads view v. The
            // bodies are written out here, each in its own scope; the
            // visit that follows finds nothing more to replace in them.
            let all: Vec<String> = with.cte_tables.iter().map(|c| normalize_ident(&c.alias.name)).collect();
            for (i, cte) in with.cte_tables.iter_mut().enumerate() {
                let seen = if with.recursive { all.clone() } else { all[..i].to_vec() };
                self.scopes.push(seen);
                let _ = VisitMut::visit(cte.query.as_mut(), self);
                self.scopes.pop();
                if self.error.is_some() {
                    return ControlFlow::Break(());
                }
            }
            names = all;
        }
        self.scopes.push(names);
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _query: &mut Query) -> ControlFlow<()> {
        self.scopes.pop();
        ControlFlow::Continue(())
    }

    // After the factor's own children were visited: the derived table put
    // in its place is not visited again (a view's query is stored written
    // out already).
    fn post_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table {
            name,
            alias,
            args: None,
            ..
        } = factor
        else {
            return ControlFlow::Continue(());
        };
        let parts = name_parts(name);
        if self.hidden_by_with(&parts) {
            return ControlFlow::Continue(());
        }
        let replaced = (self.views)(&parts).and_then(|view| match view {
            None => Ok(None),
            Some(view) => {
                let name = view.name.clone();
                self.replacement(view, alias.take()).map(|r| Some((name, r)))
            }
        });
        match replaced {
            Ok(None) => ControlFlow::Continue(()),
            Ok(Some((name, replacement))) => {
                *factor = replacement;
                if !self.inlined.contains(&name) {
                    self.inlined.push(name);
                }
                ControlFlow::Continue(())
            }
            Err(e) => {
                self.error = Some(e);
                ControlFlow::Break(())
            }
        }
    }
}

fn name_parts(name: &ObjectName) -> Vec<String> {
    name.0
        .iter()
        .filter_map(|p| p.as_ident())
        .map(normalize_ident)
        .collect()
}

/// Every relation `query` names, each as its normalised parts
/// (`["public", "v"]`, `["v"]`), in the order they appear.
pub fn relation_names(query: &Query) -> Vec<Vec<String>> {
    struct Names(Vec<Vec<String>>);
    impl Visitor for Names {
        type Break = ();
        fn pre_visit_relation(&mut self, relation: &ObjectName) -> ControlFlow<()> {
            self.0.push(name_parts(relation));
            ControlFlow::Continue(())
        }
    }
    let mut names = Names(Vec::new());
    let _ = query.visit(&mut names);
    names.0
}

/// The error for a view's stored query that no longer parses (a catalog
/// written by another version): the view cannot be built over.
pub fn unreadable_definition(view: &str, e: impl std::fmt::Display) -> Error {
    Error::user(
        SqlCode::ObjectNotInPrerequisiteState,
        format!("the query of materialized view \"{view}\" cannot be read back ({e}); build on its streams instead"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statement::{SluiceStatement, parse_statements};

    fn query(sql: &str) -> Query {
        match parse_statements(sql).unwrap().pop().unwrap() {
            SluiceStatement::Sql(s) => match *s {
                sqlparser::ast::Statement::Query(q) => *q,
                other => panic!("not a query: {other:?}"),
            },
            other => panic!("not a query: {other:?}"),
        }
    }

    /// Views `v1` (over stream `s`) and `v2` (written out over `v1`).
    fn views(parts: &[String]) -> Result<Option<ViewQuery>> {
        let name = match parts {
            [name] => name,
            [schema, name] if schema == "public" => name,
            _ => return Ok(None),
        };
        let sql = match name.as_str() {
            "v1" => "SELECT k, count(*) AS n FROM s GROUP BY k",
            "v2" => "SELECT k, n FROM (SELECT k, count(*) AS n FROM s GROUP BY k) AS \"v1\" WHERE n > 1",
            _ => return Ok(None),
        };
        Ok(Some(ViewQuery {
            name: name.clone(),
            query: query(sql),
        }))
    }

    fn inlined(sql: &str) -> Result<(String, Vec<String>)> {
        let mut q = query(sql);
        let names = inline_views(&mut q, &views)?;
        Ok((q.to_string(), names))
    }

    #[test]
    fn a_view_becomes_its_query_under_the_name_it_was_read_by() {
        let (sql, names) = inlined("SELECT k FROM v1 WHERE n > 2").unwrap();
        assert_eq!(
            sql,
            "SELECT k FROM (SELECT k, count(*) AS n FROM s GROUP BY k) AS \"v1\" WHERE n > 2"
        );
        assert_eq!(names, ["v1"]);
        let (sql, _) = inlined("SELECT x.k FROM public.v1 AS x").unwrap();
        assert_eq!(sql, "SELECT x.k FROM (SELECT k, count(*) AS n FROM s GROUP BY k) AS x");
        let (sql, names) = inlined("SELECT a.k FROM v1 a JOIN v2 b ON a.k = b.k JOIN v1 c ON c.k = a.k").unwrap();
        assert_eq!(names, ["v1", "v2"]);
        assert_eq!(sql.matches("FROM s GROUP BY k").count(), 3, "{sql}");
    }

    #[test]
    fn views_in_subqueries_and_with_queries_are_written_out_but_with_names_are_not_views() {
        let (sql, names) = inlined("SELECT * FROM s WHERE k IN (SELECT k FROM v2)").unwrap();
        assert_eq!(names, ["v2"]);
        assert!(
            sql.contains(
                "(SELECT k, n FROM (SELECT k, count(*) AS n FROM s GROUP BY k) AS \"v1\" WHERE n > 1) AS \"v2\""
            ),
            "{sql}"
        );
        let (sql, names) = inlined("WITH w AS (SELECT * FROM v1) SELECT * FROM w").unwrap();
        assert_eq!(names, ["v1"]);
        assert!(sql.ends_with("SELECT * FROM w"), "{sql}");
        // A WITH query named like a view hides it, in its scope only.
        let (sql, names) = inlined("WITH v1 AS (SELECT 1 AS k) SELECT * FROM v1").unwrap();
        assert!(names.is_empty());
        assert_eq!(sql, "WITH v1 AS (SELECT 1 AS k) SELECT * FROM v1");
        let (_, names) =
            inlined("SELECT * FROM (WITH v1 AS (SELECT 1 AS k) SELECT * FROM v1) x JOIN v1 ON true").unwrap();
        assert_eq!(names, ["v1"]);
        // A WITH query's body does not see its own name nor later ones (as
        // in Postgres, without RECURSIVE): there v1 is the view.
        let (sql, names) = inlined("WITH v1 AS (SELECT k FROM v1 WHERE n > 2) SELECT * FROM v1").unwrap();
        assert_eq!(names, ["v1"]);
        assert_eq!(
            sql,
            "WITH v1 AS (SELECT k FROM (SELECT k, count(*) AS n FROM s GROUP BY k) AS \"v1\" WHERE n > 2) SELECT * FROM v1"
        );
        let (sql, names) = inlined("WITH a AS (SELECT * FROM v1), v1 AS (SELECT 1 AS k) SELECT * FROM a, v1").unwrap();
        assert_eq!(names, ["v1"]);
        assert!(sql.starts_with("WITH a AS (SELECT * FROM (SELECT k, count(*)"), "{sql}");
        assert!(sql.ends_with("SELECT * FROM a, v1"), "{sql}");
        let (_, names) = inlined("WITH RECURSIVE v1 AS (SELECT 1 AS k) SELECT * FROM v1").unwrap();
        assert!(names.is_empty());
    }

    #[test]
    fn a_with_name_that_would_capture_a_views_stream_is_refused() {
        let e = inlined("WITH s AS (SELECT 1 AS k) SELECT * FROM v1").unwrap_err();
        assert_eq!(e.sqlstate(), "0A000", "{e}");
        assert!(e.to_string().contains("\"s\""), "{e}");
    }

    #[test]
    fn a_window_over_a_view_is_refused_and_over_a_stream_left_alone() {
        let e = inlined(
            "SELECT window_start, count(*) FROM TUMBLE(v1, ts, INTERVAL '1' SECOND) GROUP BY window_start, window_end",
        )
        .unwrap_err();
        assert_eq!(e.sqlstate(), "0A000", "{e}");
        assert!(e.to_string().contains("CREATE STREAM"), "{e}");
        let sql =
            "SELECT window_start, count(*) FROM TUMBLE(s, ts, INTERVAL '1' SECOND) GROUP BY window_start, window_end";
        let (out, names) = inlined(sql).unwrap();
        assert!(names.is_empty());
        assert_eq!(out, query(sql).to_string());
    }

    #[test]
    fn a_query_without_views_is_unchanged() {
        let sql = "SELECT a.k FROM s AS a JOIN t ON a.k = t.k WHERE a.k IN (SELECT k FROM u)";
        let (out, names) = inlined(sql).unwrap();
        assert!(names.is_empty());
        assert_eq!(out, query(sql).to_string());
    }
}
