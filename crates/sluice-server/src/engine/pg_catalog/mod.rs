//! `pg_catalog` and `information_schema` as tables over Sluice's stream
//! catalog, so that drivers and tools (pgJDBC's `DatabaseMetaData`,
//! psycopg, Grafana, DBeaver) can read what exists with their own queries.
//!
//! A query that reads a catalog relation runs once as a DataFusion batch
//! query (`engine/batch.rs`). Each catalog table is built when a query names
//! it, from a [`Snapshot`] of the streams and the session's settings taken
//! for that query. Streams are tables (`relkind` `'r'`) of schema `public`
//! with oids from [`STREAM_OID_BASE`] in name order; their columns are
//! named by the one Arrow → Postgres type map
//! ([`sluice_sql::types::pg_type`]), so `pg_attribute.atttypid` is the oid
//! a client receives for the column. Before planning, [`rewrite`] turns the
//! Postgres-only syntax these queries use (`'pg_class'::regclass`,
//! `OPERATOR(pg_catalog.~)`, `COLLATE`, `= ANY('{…}')`, `pg_catalog.`
//! function names, `oid`/`name` casts) into what DataFusion plans.
//!
//! Why streams are tables (`'r'`) and not views (`'v'`): memory streams take
//! `INSERT`, every stream is read by `SELECT` like a table, and tools list
//! tables by default (pgJDBC's `getTables(…, {"TABLE"})`, psql's `\dt`).

mod functions;
pub mod psql_meta;
mod resolve;
pub mod rewrite;
mod tables;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{MemorySchemaProvider, SchemaProvider, TableProvider};
use datafusion::datasource::MemTable;
use datafusion::error::Result as DfResult;
use datafusion::prelude::SessionContext;
use sluice_cluster::security::{
    BOOTSTRAP_SUPERUSER, BUILTIN_ROLES, PG_WRITE_SERVER_FILES, PUBLIC, Principal, Privilege, SecurityCatalog,
};
use sluice_connectors::views::PublishedView;
use sluice_plan::catalog::StreamDef;
use sqlparser::ast::Query;
use std::sync::Arc;

pub use tables::CATALOG_TABLE_NAMES;

/// Oid of the first stream (Postgres' first user oid).
pub const STREAM_OID_BASE: u32 = 16384;
/// `pg_namespace` oids, as in Postgres (`information_schema`'s varies there).
pub const PG_CATALOG_OID: i64 = 11;
pub const PUBLIC_OID: i64 = 2200;
pub const INFORMATION_SCHEMA_OID: i64 = 13_000;
/// The bootstrap superuser, `sluice` (Postgres' bootstrap superuser oid).
pub const ROLE_OID: i64 = 10;
pub const ROLE_NAME: &str = "sluice";
/// `pg_write_server_files`, with Postgres' oid for it.
pub const PG_WRITE_SERVER_FILES_OID: i64 = 4570;
/// Oid of the first created role other than `sluice` (roles in name
/// order); above any stream oid a catalog of 10 000 roles and a million
/// streams reaches, so a role and a relation never share an oid.
pub const ROLE_OID_BASE: i64 = 1_000_000_000;
/// The one database.
pub const DATABASE_NAME: &str = "sluice";
pub const DATABASE_OID: i64 = 5;

/// What the catalog tables show, taken once per query.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Every stream, in name order (a stream's oid is its position).
    pub streams: Vec<StreamDef>,
    /// The session's settings: (name, value, description).
    pub settings: Vec<(String, String, String)>,
    /// Roles, grants and owners, as the executor checks them
    /// (`engine/authorize.rs`): `pg_roles`, `pg_auth_members`,
    /// `pg_class.relacl` and `has_table_privilege` read them.
    pub security: SecurityCatalog,
    /// The role the query runs as (empty: `sluice`).
    pub user: String,
    /// The materialized views the query reads, by name, with their rows as
    /// of their last barrier: tables of `public` (an unqualified name finds
    /// them after `pg_catalog`, as Postgres' search path does).
    pub views: Vec<(String, Arc<PublishedView>)>,
    /// Every materialized view with its columns, in name order:
    /// relations of kind `'m'` in `public`, after the streams.
    pub view_relations: Vec<ViewRelation>,
}

/// A materialized view as the catalog tables show it.
#[derive(Debug, Clone)]
pub struct ViewRelation {
    pub name: String,
    /// Its query's columns (no `op`).
    pub schema: SchemaRef,
    /// Its query, as `pg_get_viewdef` returns it.
    pub definition: String,
}

/// A role as `pg_roles` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct RoleRow {
    pub oid: i64,
    pub name: String,
    pub superuser: bool,
    pub login: bool,
    /// Roles it is a member of, by name.
    pub member_of: Vec<String>,
}

impl Snapshot {
    pub fn new(mut streams: Vec<StreamDef>, settings: Vec<(String, String, String)>) -> Self {
        streams.sort_by(|a, b| a.name.cmp(&b.name));
        Snapshot {
            streams,
            settings,
            security: SecurityCatalog::default(),
            user: String::new(),
            views: Vec::new(),
            view_relations: Vec::new(),
        }
    }

    /// This snapshot with the security catalog and the query's role.
    pub fn with_security(mut self, security: SecurityCatalog, user: &str) -> Self {
        self.security = security;
        self.user = user.to_string();
        self
    }

    /// This snapshot with the rows of the views a query reads.
    pub fn with_views(mut self, views: Vec<(String, Arc<PublishedView>)>) -> Self {
        self.views = views;
        self
    }

    /// This snapshot with every materialized view's name and columns.
    pub fn with_view_relations(mut self, mut views: Vec<ViewRelation>) -> Self {
        views.sort_by(|a, b| a.name.cmp(&b.name));
        self.view_relations = views;
        self
    }

    /// A view's rows as a table.
    fn view_table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let Some((_, view)) = self.views.iter().find(|(n, _)| n == name) else {
            return Ok(None);
        };
        let rows = view
            .rows()
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        let table = MemTable::try_new(view.schema.clone(), vec![rows])?;
        Ok(Some(Arc::new(table)))
    }

    /// The role the query runs as.
    pub fn current_user(&self) -> &str {
        if self.user.is_empty() { ROLE_NAME } else { &self.user }
    }

    /// Every role: `sluice` (oid 10, present even in a catalog that has
    /// not recorded it), the built-in roles, then created roles in name
    /// order.
    pub fn roles(&self) -> Vec<RoleRow> {
        let mut out = Vec::new();
        let bootstrap = self.security.roles.get(BOOTSTRAP_SUPERUSER);
        out.push(RoleRow {
            oid: ROLE_OID,
            name: ROLE_NAME.to_string(),
            superuser: bootstrap.is_none_or(|r| r.superuser),
            login: bootstrap.is_none_or(|r| r.login),
            member_of: bootstrap
                .map(|r| r.member_of.iter().cloned().collect())
                .unwrap_or_default(),
        });
        out.push(RoleRow {
            oid: PG_WRITE_SERVER_FILES_OID,
            name: PG_WRITE_SERVER_FILES.to_string(),
            superuser: false,
            login: false,
            member_of: Vec::new(),
        });
        let created = self
            .security
            .roles
            .values()
            .filter(|r| r.name != BOOTSTRAP_SUPERUSER && !BUILTIN_ROLES.contains(&r.name.as_str()));
        for (i, r) in created.enumerate() {
            out.push(RoleRow {
                oid: ROLE_OID_BASE + i as i64,
                name: r.name.clone(),
                superuser: r.superuser,
                login: r.login,
                member_of: r.member_of.iter().cloned().collect(),
            });
        }
        out
    }

    /// The name of the role with `oid`.
    pub fn role_name(&self, oid: i64) -> Option<String> {
        self.roles().into_iter().find(|r| r.oid == oid).map(|r| r.name)
    }

    /// What role `name` may do, as the executor resolves it (a built-in
    /// role: nothing beyond its membership meaning).
    pub fn principal(&self, name: &str) -> Option<Principal> {
        if let Some(p) = self.security.principal(name) {
            return Some(p);
        }
        if name == ROLE_NAME {
            return Some(Principal {
                name: name.to_string(),
                superuser: true,
                writes_server_files: true,
            });
        }
        BUILTIN_ROLES.contains(&name).then(|| Principal {
            name: name.to_string(),
            superuser: false,
            writes_server_files: name == PG_WRITE_SERVER_FILES,
        })
    }

    /// The owner of stream `name` (`sluice` when none is recorded: a
    /// stream created before roles existed, which only superusers reach).
    pub fn stream_owner(&self, name: &str) -> &str {
        self.security
            .stream_owners
            .get(name)
            .map(String::as_str)
            .unwrap_or(ROLE_NAME)
    }

    /// `pg_class.relacl` of stream `name`: NULL while nothing is granted
    /// (Postgres' "default privileges": the owner's only), else the owner's
    /// item first, then each grantee's in name order, in Postgres' aclitem
    /// text (`grantee=privileges/grantor`, `a` INSERT, `r` SELECT); the
    /// grantor is the owner, as Postgres records a superuser's grant; a
    /// grant to PUBLIC has an empty grantee.
    pub fn stream_acl(&self, name: &str) -> Option<String> {
        let grants = self.security.grants.get(name).filter(|g| !g.is_empty())?;
        let owner = self.stream_owner(name);
        let mut items = vec![format!("{}=ar/{}", acl_name(owner), acl_name(owner))];
        for (role, privileges) in grants {
            if role == owner || privileges.is_empty() {
                continue;
            }
            let letters: String = [(Privilege::Insert, 'a'), (Privilege::Select, 'r')]
                .into_iter()
                .filter(|(p, _)| privileges.contains(p))
                .map(|(_, c)| c)
                .collect();
            // PUBLIC is the empty grantee, as in Postgres (`=r/owner`).
            let grantee = if role == PUBLIC { String::new() } else { acl_name(role) };
            items.push(format!("{grantee}={letters}/{}", acl_name(owner)));
        }
        Some(format!("{{{}}}", items.join(",")))
    }

    /// The oid of the stream at `index`.
    pub fn stream_oid(index: usize) -> i64 {
        i64::from(STREAM_OID_BASE) + index as i64
    }

    /// The oid of the view at `index` of [`Snapshot::view_relations`]:
    /// after the streams'.
    pub fn view_oid(&self, index: usize) -> i64 {
        Self::stream_oid(self.streams.len() + index)
    }

    /// The query of the materialized view whose oid is `oid`.
    pub fn view_definition(&self, oid: i64) -> Option<&str> {
        (0..self.view_relations.len())
            .find(|j| self.view_oid(*j) == oid)
            .map(|j| self.view_relations[j].definition.as_str())
    }

    /// Every relation: streams, materialized views, then the catalog's own
    /// tables and views.
    pub fn relations(&self) -> Vec<Relation> {
        let mut out: Vec<Relation> = self
            .streams
            .iter()
            .enumerate()
            .map(|(i, s)| Relation {
                oid: Self::stream_oid(i),
                namespace: PUBLIC_OID,
                schema_name: "public",
                name: s.name.clone(),
                kind: 'r',
                schema: s.schema.clone(),
                stream: Some(i),
            })
            .collect();
        out.extend(self.view_relations.iter().enumerate().map(|(j, view)| Relation {
            oid: self.view_oid(j),
            namespace: PUBLIC_OID,
            schema_name: "public",
            name: view.name.clone(),
            kind: 'm',
            schema: view.schema.clone(),
            stream: None,
        }));
        out.extend(tables::catalog_relations());
        out
    }

    /// The oid of relation `name` (optionally schema-qualified), as
    /// `'name'::regclass` resolves it: unqualified names look in `public`
    /// (a stream) first, then `pg_catalog`.
    pub fn relation_oid(&self, schema: Option<&str>, name: &str) -> Option<i64> {
        let relations = self.relations();
        let find = |schema_name: &str| {
            relations
                .iter()
                .find(|r| r.schema_name == schema_name && r.name == name)
                .map(|r| r.oid)
        };
        match schema {
            Some(s) => find(s),
            None => find("public").or_else(|| find("pg_catalog")),
        }
    }

    /// The value of setting `name` in this session, if it has one.
    pub fn setting(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.settings
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, v, _)| v.as_str())
    }
}

/// A role name inside an aclitem: double-quoted unless plain lower-case
/// letters, digits and underscores (as Postgres' `putid`).
fn acl_name(name: &str) -> String {
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// A relation as `pg_class` lists it.
#[derive(Debug, Clone)]
pub struct Relation {
    pub oid: i64,
    pub namespace: i64,
    pub schema_name: &'static str,
    pub name: String,
    /// `relkind`: `'r'` table, `'v'` view.
    pub kind: char,
    pub schema: SchemaRef,
    /// Index of the stream in [`Snapshot::streams`], for streams.
    pub stream: Option<usize>,
}

/// Whether `query` reads a catalog relation: a `pg_catalog.` or
/// `information_schema.` name, or an unqualified `pg_catalog` table name
/// (Postgres searches `pg_catalog` first) that `is_stream` does not claim.
pub fn reads_catalog(query: &Query, is_stream: impl Fn(&str) -> bool) -> bool {
    relation_names(query).iter().any(|parts| match parts.as_slice() {
        [.., schema, _] => schema == "pg_catalog" || schema == "information_schema",
        [table] => CATALOG_TABLE_NAMES.contains(&table.as_str()) && !is_stream(table),
        [] => false,
    })
}

pub use sluice_sql::views::relation_names;

/// Catalog tables that never have rows in Sluice (no policies, statistics
/// objects, publications, inheritance, triggers, rules, constraints,
/// indexes, partitions, foreign tables, sequences).
const EMPTY_TABLES: &[&str] = &[
    "pg_policy",
    "pg_statistic_ext",
    "pg_publication",
    "pg_publication_rel",
    "pg_publication_namespace",
    "pg_inherits",
    "pg_trigger",
    "pg_rewrite",
    "pg_constraint",
    "pg_index",
    "pg_partitioned_table",
    "pg_foreign_table",
    "pg_sequence",
    "pg_event_trigger",
];

/// Whether `query` has no rows whatever it computes: every `SELECT` of it
/// reads first (its driving relation) a catalog table that has no rows, and
/// aggregates nothing. psql's `\d name` footers are such queries, some
/// with Postgres-only syntax (`ARRAY(…)`, `= any(column)`) that DataFusion
/// cannot plan; they are answered with no rows rather than an error.
pub fn has_no_rows(query: &Query) -> bool {
    use sqlparser::ast::{SetExpr, TableFactor};
    fn select_is_empty(body: &SetExpr) -> bool {
        match body {
            SetExpr::Select(select) => {
                let Some(first) = select.from.first() else { return false };
                let TableFactor::Table { name, .. } = &first.relation else {
                    return false;
                };
                let table = sluice_sql::names::normalize_name(name);
                // An aggregate over no rows still has a row.
                let aggregates = select.projection.iter().any(|item| {
                    let expr = match item {
                        sqlparser::ast::SelectItem::UnnamedExpr(e)
                        | sqlparser::ast::SelectItem::ExprWithAlias { expr: e, .. } => e,
                        _ => return false,
                    };
                    let sqlparser::ast::Expr::Function(f) = expr else {
                        return false;
                    };
                    let name = sluice_sql::names::normalize_name(&f.name);
                    [
                        "count",
                        "sum",
                        "max",
                        "min",
                        "avg",
                        "string_agg",
                        "array_agg",
                        "bool_and",
                        "bool_or",
                    ]
                    .contains(&name.as_str())
                });
                EMPTY_TABLES.contains(&table.as_str())
                    && !aggregates
                    && matches!(&select.group_by, sqlparser::ast::GroupByExpr::Expressions(e, _) if e.is_empty())
            }
            SetExpr::SetOperation { left, right, .. } => select_is_empty(left) && select_is_empty(right),
            SetExpr::Query(q) => select_is_empty(&q.body),
            _ => false,
        }
    }
    select_is_empty(&query.body)
}

/// `pg_attribute.attstorage` of a column of `data_type`: plain for fixed
/// width, extended for variable width.
pub fn attribute_storage(data_type: &arrow::datatypes::DataType) -> &'static str {
    match sluice_sql::types::pg_type(data_type) {
        sluice_sql::types::PgType::Numeric => "m",
        t if t.typlen() > 0 => "p",
        _ => "x",
    }
}

/// Registers `pg_catalog` (also the default schema, so unqualified
/// `pg_class` resolves as in Postgres), `information_schema` and an empty
/// `public`, and the catalog functions, in `ctx` (whose default catalog is
/// [`DATABASE_NAME`]).
pub fn register(ctx: &SessionContext, snapshot: Arc<Snapshot>) {
    let catalog = ctx
        .catalog(DATABASE_NAME)
        .expect("the batch context's default catalog is registered");
    for schema in ["pg_catalog", "information_schema"] {
        let provider = Arc::new(CatalogSchema {
            schema,
            snapshot: snapshot.clone(),
        });
        catalog
            .register_schema(schema, provider)
            .expect("registering a schema in a memory catalog cannot fail");
    }
    let public = Arc::new(MemorySchemaProvider::new());
    for (name, _) in &snapshot.views {
        if let Ok(Some(table)) = snapshot.view_table(name) {
            public
                .register_table(name.clone(), table)
                .expect("a view's name is registered once");
        }
    }
    catalog
        .register_schema("public", public)
        .expect("registering a schema in a memory catalog cannot fail");
    functions::register(ctx, snapshot);
}

/// One catalog schema: its tables are built from the snapshot when a query
/// names them.
#[derive(Debug)]
struct CatalogSchema {
    schema: &'static str,
    snapshot: Arc<Snapshot>,
}

#[async_trait]
impl SchemaProvider for CatalogSchema {
    fn table_names(&self) -> Vec<String> {
        tables::catalog_relations()
            .into_iter()
            .filter(|r| r.schema_name == self.schema)
            .map(|r| r.name)
            .collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let Some(batch) = tables::build(self.schema, name, &self.snapshot)? else {
            // The search path: `pg_catalog`, then `public`.
            if self.schema == "pg_catalog" {
                return self.snapshot.view_table(name);
            }
            return Ok(None);
        };
        let table = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
        Ok(Some(Arc::new(table)))
    }

    fn table_exist(&self, name: &str) -> bool {
        tables::catalog_relations()
            .iter()
            .any(|r| r.schema_name == self.schema && r.name == name)
            || self.schema == "pg_catalog" && self.snapshot.views.iter().any(|(n, _)| n == name)
    }
}

#[cfg(test)]
mod tests;
