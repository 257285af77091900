//! Hidden columns: a connector's metadata columns the user did not declare
//! (Kafka's `_kafka_partition`, `_kafka_offset`, …) are selectable by name
//! but left out of `SELECT *`, as ksqlDB does with its pseudo columns.
//!
//! DataFusion has no hidden columns, so before binding, each `*` (and
//! `t.*`) over a relation with hidden columns gets an `EXCLUDE (…)` list
//! naming them. A subquery's `*` is rewritten in its own SELECT, so an
//! outer `*` sees exactly what the inner query exposes.

use crate::names::{normalize_ident, normalize_name};
use sqlparser::ast::{
    ExcludeSelectItem, Ident, ObjectName, Query, SelectItem, SelectItemQualifiedWildcardKind, SetExpr, TableFactor,
    TableWithJoins, WildcardAdditionalOptions,
};
use std::collections::HashMap;

/// Hidden column names by relation name (as the FROM clause names it).
pub type HiddenColumns = HashMap<String, Vec<String>>;

/// Adds `EXCLUDE` lists for hidden columns to every wildcard of `query`.
pub fn exclude_hidden_columns(query: &mut Query, hidden: &HiddenColumns) {
    if hidden.values().all(Vec::is_empty) {
        return;
    }
    if let Some(with) = &mut query.with {
        for cte in &mut with.cte_tables {
            exclude_hidden_columns(&mut cte.query, hidden);
        }
    }
    set_expr(&mut query.body, hidden);
}

fn set_expr(body: &mut SetExpr, hidden: &HiddenColumns) {
    match body {
        SetExpr::Select(select) => {
            // (qualifier, hidden columns) of each relation in FROM.
            let mut relations: Vec<(String, Vec<String>)> = Vec::new();
            for twj in &mut select.from {
                table_with_joins(twj, hidden, &mut relations);
            }
            for item in &mut select.projection {
                match item {
                    SelectItem::Wildcard(options) => {
                        let names: Vec<&String> = relations.iter().flat_map(|(_, h)| h).collect();
                        add_excludes(options, &names);
                    }
                    SelectItem::QualifiedWildcard(SelectItemQualifiedWildcardKind::ObjectName(q), options) => {
                        let q = normalize_name(q);
                        let names: Vec<&String> =
                            relations.iter().filter(|(r, _)| *r == q).flat_map(|(_, h)| h).collect();
                        add_excludes(options, &names);
                    }
                    _ => {}
                }
            }
        }
        SetExpr::Query(q) => exclude_hidden_columns(q, hidden),
        SetExpr::SetOperation { left, right, .. } => {
            set_expr(left, hidden);
            set_expr(right, hidden);
        }
        _ => {}
    }
}

fn table_with_joins(twj: &mut TableWithJoins, hidden: &HiddenColumns, out: &mut Vec<(String, Vec<String>)>) {
    factor(&mut twj.relation, hidden, out);
    for join in &mut twj.joins {
        factor(&mut join.relation, hidden, out);
    }
}

fn factor(f: &mut TableFactor, hidden: &HiddenColumns, out: &mut Vec<(String, Vec<String>)>) {
    match f {
        TableFactor::Table { name, alias, .. } => {
            let columns = hidden.get(&normalize_name(name)).cloned().unwrap_or_default();
            if columns.is_empty() {
                return;
            }
            let qualifier = match alias {
                Some(a) => normalize_ident(&a.name),
                None => normalize_name(name),
            };
            out.push((qualifier, columns));
        }
        TableFactor::Derived { subquery, .. } => exclude_hidden_columns(subquery, hidden),
        TableFactor::NestedJoin {
            table_with_joins: t, ..
        } => table_with_joins(t, hidden, out),
        _ => {}
    }
}

fn add_excludes(options: &mut WildcardAdditionalOptions, names: &[&String]) {
    if names.is_empty() {
        return;
    }
    let mut list: Vec<ObjectName> = match options.opt_exclude.take() {
        None => Vec::new(),
        Some(ExcludeSelectItem::Single(one)) => vec![one],
        Some(ExcludeSelectItem::Multiple(many)) => many,
    };
    for n in names {
        if !list.iter().any(|o| normalize_name(o) == **n) {
            list.push(ObjectName::from(vec![Ident::with_quote('"', n.as_str())]));
        }
    }
    options.opt_exclude = Some(ExcludeSelectItem::Multiple(list));
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::ast::Statement;
    use sqlparser::dialect::GenericDialect;
    use sqlparser::parser::Parser;

    fn rewrite(sql: &str) -> String {
        let mut statement = Parser::parse_sql(&GenericDialect {}, sql).unwrap().remove(0);
        let Statement::Query(q) = &mut statement else { panic!() };
        let hidden = HiddenColumns::from([("k".to_string(), vec!["_kafka_offset".to_string()])]);
        exclude_hidden_columns(q, &hidden);
        statement.to_string()
    }

    #[test]
    fn wildcards_over_hidden_relations_get_excludes() {
        assert_eq!(
            rewrite("SELECT * FROM k"),
            "SELECT * EXCLUDE (\"_kafka_offset\") FROM k"
        );
        assert_eq!(
            rewrite("SELECT x.* FROM k AS x"),
            "SELECT x.* EXCLUDE (\"_kafka_offset\") FROM k AS x"
        );
        assert_eq!(rewrite("SELECT * FROM other"), "SELECT * FROM other");
        assert_eq!(
            rewrite("SELECT * FROM (SELECT * FROM k) AS s"),
            "SELECT * FROM (SELECT * EXCLUDE (\"_kafka_offset\") FROM k) AS s"
        );
        // Selecting it by name is untouched.
        assert_eq!(rewrite("SELECT _kafka_offset FROM k"), "SELECT _kafka_offset FROM k");
    }
}
