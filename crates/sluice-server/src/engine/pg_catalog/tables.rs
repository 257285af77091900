//! The catalog tables: their columns and their rows for a [`Snapshot`].
//!
//! Columns are declared with Postgres' catalog types, stored as the Arrow
//! type of the same Postgres type: `oid` as Int64 (bigint: an oid is
//! unsigned 32-bit, so it fits, and comparisons with integer literals need
//! no cast), `name`, `"char"`, `regproc` and arrays as text, `int2` as
//! Int16, `int4` as Int32, `float4` as Float32. A row names only the columns
//! that differ from their type's default (0, false, or NULL for text).

use super::resolve::all_types;
use super::{
    DATABASE_NAME, DATABASE_OID, INFORMATION_SCHEMA_OID, PG_CATALOG_OID, PUBLIC_OID, ROLE_NAME, ROLE_OID, Relation,
    Snapshot,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, ScalarValue};
use datafusion::error::Result as DfResult;
use sluice_sql::types::{PgType, pg_type, pg_type_modifier};
use std::sync::Arc;

/// A catalog relation: schema, name, oid, relkind, columns (`name type, …`).
struct TableDef {
    schema: &'static str,
    name: &'static str,
    oid: i64,
    kind: char,
    columns: &'static str,
}

const fn t(schema: &'static str, name: &'static str, oid: i64, kind: char, columns: &'static str) -> TableDef {
    TableDef {
        schema,
        name,
        oid,
        kind,
        columns,
    }
}

const PG: &str = "pg_catalog";
const IS: &str = "information_schema";

/// Every catalog relation. Oids of `pg_catalog` tables are Postgres' own.
const TABLES: &[TableDef] = &[
    t(
        PG,
        "pg_namespace",
        2615,
        'r',
        "oid oid, nspname name, nspowner oid, nspacl text",
    ),
    t(
        PG,
        "pg_class",
        1259,
        'r',
        "oid oid, relname name, relnamespace oid, reltype oid, reloftype oid, relowner oid, relam oid, \
         relfilenode oid, reltablespace oid, relpages int4, reltuples float4, relallvisible int4, \
         reltoastrelid oid, relhasindex bool, relisshared bool, relpersistence char, relkind char, \
         relnatts int2, relchecks int2, relhasrules bool, relhastriggers bool, relhassubclass bool, \
         relrowsecurity bool, relforcerowsecurity bool, relispopulated bool, relreplident char, \
         relispartition bool, relrewrite oid, relfrozenxid int8, relminmxid int8, relacl text, \
         reloptions text, relpartbound text, relhasoids bool",
    ),
    t(
        PG,
        "pg_attribute",
        1249,
        'r',
        "attrelid oid, attname name, atttypid oid, attstattarget int4, attlen int2, attnum int2, \
         attndims int4, attcacheoff int4, atttypmod int4, attbyval bool, attalign char, attstorage char, \
         attcompression char, attnotnull bool, atthasdef bool, atthasmissing bool, attidentity char, \
         attgenerated char, attisdropped bool, attislocal bool, attinhcount int4, attcollation oid, \
         attacl text, attoptions text, attfdwoptions text, attmissingval text",
    ),
    t(
        PG,
        "pg_type",
        1247,
        'r',
        "oid oid, typname name, typnamespace oid, typowner oid, typlen int2, typbyval bool, typtype char, \
         typcategory char, typispreferred bool, typisdefined bool, typdelim char, typrelid oid, \
         typsubscript text, typelem oid, typarray oid, typinput text, typoutput text, typreceive text, \
         typsend text, typmodin text, typmodout text, typanalyze text, typalign char, typstorage char, \
         typnotnull bool, typbasetype oid, typtypmod int4, typndims int4, typcollation oid, \
         typdefaultbin text, typdefault text, typacl text",
    ),
    t(
        PG,
        "pg_database",
        1262,
        'r',
        "oid oid, datname name, datdba oid, encoding int4, datlocprovider char, datistemplate bool, \
         datallowconn bool, datconnlimit int4, datfrozenxid int8, datminmxid int8, dattablespace oid, \
         datcollate text, datctype text, daticulocale text, datcollversion text, datacl text",
    ),
    t(
        PG,
        "pg_proc",
        1255,
        'r',
        "oid oid, proname name, pronamespace oid, proowner oid, prolang oid, procost float4, prorows float4, \
         provariadic oid, prosupport text, prokind char, prosecdef bool, proleakproof bool, proisstrict bool, \
         proretset bool, provolatile char, proparallel char, pronargs int2, pronargdefaults int2, \
         prorettype oid, proargtypes text, proallargtypes text, proargmodes text, proargnames text, \
         proargdefaults text, protrftypes text, prosrc text, probin text, prosqlbody text, proconfig text, \
         proacl text",
    ),
    t(
        PG,
        "pg_description",
        2609,
        'r',
        "objoid oid, classoid oid, objsubid int4, description text",
    ),
    t(
        PG,
        "pg_shdescription",
        2396,
        'r',
        "objoid oid, classoid oid, description text",
    ),
    t(
        PG,
        "pg_index",
        2610,
        'r',
        "indexrelid oid, indrelid oid, indnatts int2, indnkeyatts int2, indisunique bool, \
         indnullsnotdistinct bool, indisprimary bool, indisexclusion bool, indimmediate bool, \
         indisclustered bool, indisvalid bool, indcheckxmin bool, indisready bool, indislive bool, \
         indisreplident bool, indkey text, indcollation text, indclass text, indoption text, \
         indexprs text, indpred text",
    ),
    t(
        PG,
        "pg_constraint",
        2606,
        'r',
        "oid oid, conname name, connamespace oid, contype char, condeferrable bool, condeferred bool, \
         convalidated bool, conrelid oid, contypid oid, conindid oid, conparentid oid, confrelid oid, \
         confupdtype char, confdeltype char, confmatchtype char, conislocal bool, coninhcount int4, \
         connoinherit bool, conkey text, confkey text, conpfeqop text, conppeqop text, conffeqop text, \
         confdelsetcols text, conexclop text, conbin text",
    ),
    t(
        PG,
        "pg_attrdef",
        2604,
        'r',
        "oid oid, adrelid oid, adnum int2, adbin text",
    ),
    t(
        PG,
        "pg_inherits",
        2611,
        'r',
        "inhrelid oid, inhparent oid, inhseqno int4, inhdetachpending bool",
    ),
    t(
        PG,
        "pg_trigger",
        2620,
        'r',
        "oid oid, tgrelid oid, tgparentid oid, tgname name, tgfoid oid, tgtype int2, tgenabled char, \
         tgisinternal bool, tgconstrrelid oid, tgconstrindid oid, tgconstraint oid, tgdeferrable bool, \
         tginitdeferred bool, tgnargs int2, tgattr text, tgargs text, tgqual text, tgoldtable name, \
         tgnewtable name",
    ),
    t(
        PG,
        "pg_rewrite",
        2618,
        'r',
        "oid oid, rulename name, ev_class oid, ev_type char, ev_enabled char, is_instead bool, \
         ev_qual text, ev_action text",
    ),
    t(
        PG,
        "pg_am",
        2601,
        'r',
        "oid oid, amname name, amhandler text, amtype char",
    ),
    t(
        PG,
        "pg_collation",
        3456,
        'r',
        "oid oid, collname name, collnamespace oid, collowner oid, collprovider char, \
         collisdeterministic bool, collencoding int4, collcollate text, collctype text",
    ),
    t(
        PG,
        "pg_tablespace",
        1213,
        'r',
        "oid oid, spcname name, spcowner oid, spcacl text, spcoptions text",
    ),
    t(
        PG,
        "pg_language",
        2612,
        'r',
        "oid oid, lanname name, lanowner oid, lanispl bool, lanpltrusted bool, lanplcallfoid oid, \
         laninline oid, lanvalidator oid, lanacl text",
    ),
    t(
        PG,
        "pg_depend",
        2608,
        'r',
        "classid oid, objid oid, objsubid int4, refclassid oid, refobjid oid, refobjsubid int4, deptype char",
    ),
    t(
        PG,
        "pg_enum",
        3501,
        'r',
        "oid oid, enumtypid oid, enumsortorder float4, enumlabel name",
    ),
    t(
        PG,
        "pg_extension",
        3079,
        'r',
        "oid oid, extname name, extowner oid, extnamespace oid, extrelocatable bool, extversion text, \
         extconfig text, extcondition text",
    ),
    t(
        PG,
        "pg_sequence",
        2224,
        'r',
        "seqrelid oid, seqtypid oid, seqstart int8, seqincrement int8, seqmax int8, seqmin int8, \
         seqcache int8, seqcycle bool",
    ),
    t(
        PG,
        "pg_statistic_ext",
        3381,
        'r',
        "oid oid, stxrelid oid, stxname name, stxnamespace oid, stxowner oid, stxstattarget int4, \
         stxkeys text, stxkind text, stxexprs text",
    ),
    t(
        PG,
        "pg_publication",
        6104,
        'r',
        "oid oid, pubname name, pubowner oid, puballtables bool, pubinsert bool, pubupdate bool, \
         pubdelete bool, pubtruncate bool, pubviaroot bool",
    ),
    t(
        PG,
        "pg_publication_rel",
        6106,
        'r',
        "oid oid, prpubid oid, prrelid oid, prqual text, prattrs text",
    ),
    t(
        PG,
        "pg_publication_namespace",
        6237,
        'r',
        "oid oid, pnpubid oid, pnnspid oid",
    ),
    t(
        PG,
        "pg_policy",
        3256,
        'r',
        "oid oid, polname name, polrelid oid, polcmd char, polpermissive bool, polroles text, \
         polqual text, polwithcheck text",
    ),
    t(
        PG,
        "pg_foreign_table",
        3118,
        'r',
        "ftrelid oid, ftserver oid, ftoptions text",
    ),
    t(
        PG,
        "pg_partitioned_table",
        3350,
        'r',
        "partrelid oid, partstrat char, partnatts int2, partdefid oid, partattrs text, partclass text, \
         partcollation text, partexprs text",
    ),
    t(
        PG,
        "pg_event_trigger",
        3466,
        'r',
        "oid oid, evtname name, evtevent name, evtowner oid, evtfoid oid, evtenabled char, evttags text",
    ),
    t(
        PG,
        "pg_auth_members",
        1261,
        'r',
        "oid oid, roleid oid, member oid, grantor oid, admin_option bool",
    ),
    t(
        PG,
        "pg_roles",
        12_001,
        'v',
        "rolname name, rolsuper bool, rolinherit bool, rolcreaterole bool, rolcreatedb bool, \
         rolcanlogin bool, rolreplication bool, rolconnlimit int4, rolpassword text, rolvaliduntil text, \
         rolbypassrls bool, rolconfig text, oid oid",
    ),
    t(
        PG,
        "pg_user",
        12_002,
        'v',
        "usename name, usesysid oid, usecreatedb bool, usesuper bool, userepl bool, usebypassrls bool, \
         passwd text, valuntil text, useconfig text",
    ),
    t(
        PG,
        "pg_settings",
        12_003,
        'v',
        "name text, setting text, unit text, category text, short_desc text, extra_desc text, context text, \
         vartype text, source text, min_val text, max_val text, enumvals text, boot_val text, reset_val text, \
         sourcefile text, sourceline int4, pending_restart bool",
    ),
    t(
        PG,
        "pg_tables",
        12_004,
        'v',
        "schemaname name, tablename name, tableowner name, tablespace name, hasindexes bool, hasrules bool, \
         hastriggers bool, rowsecurity bool",
    ),
    t(
        PG,
        "pg_views",
        12_005,
        'v',
        "schemaname name, viewname name, viewowner name, definition text",
    ),
    t(
        PG,
        "pg_matviews",
        12_006,
        'v',
        "schemaname name, matviewname name, matviewowner name, tablespace name, hasindexes bool, \
         ispopulated bool, definition text",
    ),
    t(
        IS,
        "schemata",
        13_001,
        'v',
        "catalog_name name, schema_name name, schema_owner name, default_character_set_catalog name, \
         default_character_set_schema name, default_character_set_name name, sql_path text",
    ),
    t(
        IS,
        "tables",
        13_002,
        'v',
        "table_catalog name, table_schema name, table_name name, table_type text, \
         self_referencing_column_name name, reference_generation text, user_defined_type_catalog name, \
         user_defined_type_schema name, user_defined_type_name name, is_insertable_into text, is_typed text, \
         commit_action text",
    ),
    t(
        IS,
        "columns",
        13_003,
        'v',
        "table_catalog name, table_schema name, table_name name, column_name name, ordinal_position int4, \
         column_default text, is_nullable text, data_type text, character_maximum_length int4, \
         character_octet_length int4, numeric_precision int4, numeric_precision_radix int4, \
         numeric_scale int4, datetime_precision int4, interval_type text, interval_precision int4, \
         character_set_catalog name, character_set_schema name, character_set_name name, \
         collation_catalog name, collation_schema name, collation_name name, domain_catalog name, \
         domain_schema name, domain_name name, udt_catalog name, udt_schema name, udt_name name, \
         scope_catalog name, scope_schema name, scope_name name, maximum_cardinality int4, \
         dtd_identifier name, is_self_referencing text, is_identity text, identity_generation text, \
         identity_start text, identity_increment text, identity_maximum text, identity_minimum text, \
         identity_cycle text, is_generated text, generation_expression text, is_updatable text",
    ),
    t(
        IS,
        "views",
        13_004,
        'v',
        "table_catalog name, table_schema name, table_name name, view_definition text, check_option text, \
         is_updatable text, is_insertable_into text, is_trigger_updatable text, is_trigger_deletable text, \
         is_trigger_insertable_into text",
    ),
    t(
        IS,
        "table_constraints",
        13_005,
        'v',
        "constraint_catalog name, constraint_schema name, constraint_name name, table_catalog name, \
         table_schema name, table_name name, constraint_type text, is_deferrable text, \
         initially_deferred text, enforced text, nulls_distinct text",
    ),
    t(
        IS,
        "key_column_usage",
        13_006,
        'v',
        "constraint_catalog name, constraint_schema name, constraint_name name, table_catalog name, \
         table_schema name, table_name name, column_name name, ordinal_position int4, \
         position_in_unique_constraint int4",
    ),
    t(
        IS,
        "referential_constraints",
        13_007,
        'v',
        "constraint_catalog name, constraint_schema name, constraint_name name, \
         unique_constraint_catalog name, unique_constraint_schema name, unique_constraint_name name, \
         match_option text, update_rule text, delete_rule text",
    ),
];

/// Names of the `pg_catalog` relations (unqualified, Postgres finds them
/// first on the search path).
pub const CATALOG_TABLE_NAMES: &[&str] = &[
    "pg_namespace",
    "pg_class",
    "pg_attribute",
    "pg_type",
    "pg_database",
    "pg_proc",
    "pg_description",
    "pg_shdescription",
    "pg_index",
    "pg_constraint",
    "pg_attrdef",
    "pg_inherits",
    "pg_trigger",
    "pg_rewrite",
    "pg_am",
    "pg_collation",
    "pg_tablespace",
    "pg_language",
    "pg_depend",
    "pg_enum",
    "pg_extension",
    "pg_sequence",
    "pg_statistic_ext",
    "pg_publication",
    "pg_publication_rel",
    "pg_publication_namespace",
    "pg_policy",
    "pg_foreign_table",
    "pg_partitioned_table",
    "pg_event_trigger",
    "pg_auth_members",
    "pg_roles",
    "pg_user",
    "pg_settings",
    "pg_tables",
    "pg_views",
    "pg_matviews",
];

/// The Arrow type a catalog column of Postgres type `pg` is stored as.
fn column_type(pg: &str) -> DataType {
    match pg {
        "oid" | "int8" => DataType::Int64,
        "int2" => DataType::Int16,
        "int4" => DataType::Int32,
        "float4" => DataType::Float32,
        "bool" => DataType::Boolean,
        "name" | "char" | "text" => DataType::Utf8,
        other => unreachable!("catalog column type {other}"),
    }
}

fn schema_of(def: &TableDef) -> SchemaRef {
    let fields: Vec<Field> = def
        .columns
        .split(',')
        .map(|c| {
            let mut words = c.split_whitespace();
            let (Some(name), Some(pg), None) = (words.next(), words.next(), words.next()) else {
                unreachable!("catalog column spec {c:?}")
            };
            Field::new(name, column_type(pg), true)
        })
        .collect();
    Arc::new(Schema::new(fields))
}

/// The catalog's own relations, as `pg_class` lists them.
pub fn catalog_relations() -> Vec<Relation> {
    TABLES
        .iter()
        .map(|d| Relation {
            oid: d.oid,
            namespace: if d.schema == PG {
                PG_CATALOG_OID
            } else {
                INFORMATION_SCHEMA_OID
            },
            schema_name: d.schema,
            name: d.name.to_string(),
            kind: d.kind,
            schema: schema_of(d),
            stream: None,
        })
        .collect()
}

/// One row: the columns that differ from their defaults.
type Row = Vec<(&'static str, ScalarValue)>;

fn o(v: i64) -> ScalarValue {
    ScalarValue::Int64(Some(v))
}
fn i(v: i64) -> ScalarValue {
    ScalarValue::Int64(Some(v))
}
fn s(v: impl Into<String>) -> ScalarValue {
    ScalarValue::Utf8(Some(v.into()))
}
fn b(v: bool) -> ScalarValue {
    ScalarValue::Boolean(Some(v))
}
fn yes_no(v: bool) -> ScalarValue {
    s(if v { "YES" } else { "NO" })
}

/// The table `schema.name` for `snapshot`, or `None` if there is none.
pub fn build(schema: &str, name: &str, snapshot: &Snapshot) -> DfResult<Option<RecordBatch>> {
    let Some(def) = TABLES.iter().find(|d| d.schema == schema && d.name == name) else {
        return Ok(None);
    };
    let rows = rows(def, snapshot);
    // pg_catalog's numbers are NOT NULL (0 for none); information_schema's
    // are NULL where they do not apply.
    batch(schema_of(def), rows, def.schema == IS).map(Some)
}

fn batch(schema: SchemaRef, rows: Vec<Row>, null_numbers: bool) -> DfResult<RecordBatch> {
    for row in &rows {
        if let Some((unknown, _)) = row.iter().find(|(c, _)| schema.index_of(c).is_err()) {
            return Err(DataFusionError::Internal(format!(
                "catalog row names no column {unknown}"
            )));
        }
    }
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let default = match field.data_type() {
            DataType::Utf8 => ScalarValue::Utf8(None),
            DataType::Boolean => b(false),
            other if null_numbers => ScalarValue::try_from(other)?,
            other => ScalarValue::Int64(Some(0)).cast_to(other)?,
        };
        let values = rows
            .iter()
            .map(|row| {
                let value = row
                    .iter()
                    .find(|(c, _)| c == field.name())
                    .map(|(_, v)| v.clone())
                    .unwrap_or_else(|| default.clone());
                value.cast_to(field.data_type())
            })
            .collect::<DfResult<Vec<_>>>()?;
        let array = if values.is_empty() {
            arrow::array::new_empty_array(field.data_type())
        } else {
            ScalarValue::iter_to_array(values)?
        };
        columns.push(array);
    }
    Ok(RecordBatch::try_new(schema, columns)?)
}

fn rows(def: &TableDef, snapshot: &Snapshot) -> Vec<Row> {
    match (def.schema, def.name) {
        (PG, "pg_namespace") => namespaces()
            .into_iter()
            .map(|(oid, name)| vec![("oid", o(oid)), ("nspname", s(name)), ("nspowner", o(ROLE_OID))])
            .collect(),
        (PG, "pg_class") => pg_class(snapshot),
        (PG, "pg_attribute") => pg_attribute(snapshot),
        (PG, "pg_type") => pg_type_rows(),
        (PG, "pg_database") => vec![vec![
            ("oid", o(DATABASE_OID)),
            ("datname", s(DATABASE_NAME)),
            ("datdba", o(ROLE_OID)),
            ("encoding", i(6)),
            ("datlocprovider", s("c")),
            ("datallowconn", b(true)),
            ("datconnlimit", i(-1)),
            ("dattablespace", o(1663)),
            ("datcollate", s("C.UTF-8")),
            ("datctype", s("C.UTF-8")),
        ]],
        (PG, "pg_proc") => super::functions::catalog_rows(),
        (PG, "pg_am") => [(2, "heap", "t"), (403, "btree", "i"), (405, "hash", "i")]
            .into_iter()
            .map(|(oid, name, kind)| vec![("oid", o(oid)), ("amname", s(name)), ("amtype", s(kind))])
            .collect(),
        (PG, "pg_collation") => [(100, "default", "d"), (950, "C", "c"), (951, "POSIX", "c")]
            .into_iter()
            .map(|(oid, name, provider)| {
                vec![
                    ("oid", o(oid)),
                    ("collname", s(name)),
                    ("collnamespace", o(PG_CATALOG_OID)),
                    ("collowner", o(ROLE_OID)),
                    ("collprovider", s(provider)),
                    ("collisdeterministic", b(true)),
                    ("collencoding", i(-1)),
                ]
            })
            .collect(),
        (PG, "pg_tablespace") => [(1663, "pg_default"), (1664, "pg_global")]
            .into_iter()
            .map(|(oid, name)| vec![("oid", o(oid)), ("spcname", s(name)), ("spcowner", o(ROLE_OID))])
            .collect(),
        (PG, "pg_language") => [(12, "internal"), (13, "c"), (14, "sql")]
            .into_iter()
            .map(|(oid, name)| {
                vec![
                    ("oid", o(oid)),
                    ("lanname", s(name)),
                    ("lanowner", o(ROLE_OID)),
                    ("lanpltrusted", b(name == "sql")),
                ]
            })
            .collect(),
        (PG, "pg_roles") => snapshot
            .roles()
            .into_iter()
            .map(|r| {
                vec![
                    ("rolname", s(r.name)),
                    ("rolsuper", b(r.superuser)),
                    ("rolinherit", b(true)),
                    ("rolcreaterole", b(r.superuser)),
                    ("rolcreatedb", b(r.superuser)),
                    ("rolcanlogin", b(r.login)),
                    ("rolreplication", b(false)),
                    ("rolconnlimit", i(-1)),
                    // Postgres shows this constant, never the verifier.
                    ("rolpassword", s("********")),
                    ("rolbypassrls", b(r.superuser)),
                    ("oid", o(r.oid)),
                ]
            })
            .collect(),
        (PG, "pg_user") => snapshot
            .roles()
            .into_iter()
            .filter(|r| r.login)
            .map(|r| {
                vec![
                    ("usename", s(r.name)),
                    ("usesysid", o(r.oid)),
                    ("usecreatedb", b(r.superuser)),
                    ("usesuper", b(r.superuser)),
                    ("usebypassrls", b(r.superuser)),
                    ("passwd", s("********")),
                ]
            })
            .collect(),
        (PG, "pg_auth_members") => pg_auth_members(snapshot),
        (PG, "pg_settings") => pg_settings(snapshot),
        (PG, "pg_tables") => snapshot
            .relations()
            .into_iter()
            .filter(|r| r.kind == 'r')
            .map(|r| {
                vec![
                    ("schemaname", s(r.schema_name)),
                    ("tableowner", s(relation_owner(snapshot, &r).to_string())),
                    ("tablename", s(r.name)),
                ]
            })
            .collect(),
        (PG, "pg_views") => snapshot
            .relations()
            .into_iter()
            .filter(|r| r.kind == 'v')
            .map(|r| {
                vec![
                    ("schemaname", s(r.schema_name)),
                    ("viewname", s(r.name)),
                    ("viewowner", s(ROLE_NAME)),
                ]
            })
            .collect(),
        (IS, "schemata") => namespaces()
            .into_iter()
            .map(|(_, name)| {
                vec![
                    ("catalog_name", s(DATABASE_NAME)),
                    ("schema_name", s(name)),
                    ("schema_owner", s(ROLE_NAME)),
                ]
            })
            .collect(),
        (IS, "tables") => snapshot
            .relations()
            .into_iter()
            .map(|r| {
                let insertable = r
                    .stream
                    .is_some_and(|i| sluice_connectors::registry::accepts_insert(&snapshot.streams[i].connector));
                vec![
                    ("table_catalog", s(DATABASE_NAME)),
                    ("table_schema", s(r.schema_name)),
                    ("table_name", s(r.name)),
                    ("table_type", s(if r.kind == 'v' { "VIEW" } else { "BASE TABLE" })),
                    ("is_insertable_into", yes_no(insertable)),
                    ("is_typed", yes_no(false)),
                ]
            })
            .collect(),
        (IS, "columns") => information_schema_columns(snapshot),
        // The rest have no rows: Sluice has no indexes, constraints,
        // defaults, inheritance, triggers, rules, publications, policies,
        // extensions, sequences, comments …
        _ => Vec::new(),
    }
}

/// The schemas: (oid, name).
fn namespaces() -> Vec<(i64, &'static str)> {
    vec![
        (PG_CATALOG_OID, "pg_catalog"),
        (PUBLIC_OID, "public"),
        (INFORMATION_SCHEMA_OID, "information_schema"),
    ]
}

/// The owner of a relation: a stream's recorded owner, else `sluice`.
fn relation_owner<'a>(snapshot: &'a Snapshot, r: &Relation) -> &'a str {
    match r.stream {
        Some(i) => snapshot.stream_owner(&snapshot.streams[i].name),
        None => ROLE_NAME,
    }
}

/// Memberships: one row per (role, member), oids from `pg_roles`.
fn pg_auth_members(snapshot: &Snapshot) -> Vec<Row> {
    let roles = snapshot.roles();
    let mut out = Vec::new();
    for member in &roles {
        for role in &member.member_of {
            let Some(role_oid) = roles.iter().find(|r| &r.name == role).map(|r| r.oid) else {
                continue;
            };
            out.push(vec![
                ("oid", o(AUTH_MEMBERS_OID_BASE + out.len() as i64)),
                ("roleid", o(role_oid)),
                ("member", o(member.oid)),
                ("grantor", o(ROLE_OID)),
                ("admin_option", b(false)),
            ]);
        }
    }
    out
}

/// Oid of the first `pg_auth_members` row.
const AUTH_MEMBERS_OID_BASE: i64 = 2_000_000_000;

fn pg_class(snapshot: &Snapshot) -> Vec<Row> {
    // Role oids looked up once, not per relation.
    let role_oids: std::collections::HashMap<String, i64> =
        snapshot.roles().into_iter().map(|r| (r.name, r.oid)).collect();
    snapshot
        .relations()
        .into_iter()
        .map(|r| {
            let table = r.kind == 'r';
            let owner = relation_owner(snapshot, &r);
            let owner_oid = role_oids.get(owner).copied().unwrap_or(ROLE_OID);
            let acl = r
                .stream
                .and_then(|i| snapshot.stream_acl(&snapshot.streams[i].name))
                .map(s)
                .unwrap_or(ScalarValue::Utf8(None));
            vec![
                ("oid", o(r.oid)),
                ("relname", s(r.name)),
                ("relnamespace", o(r.namespace)),
                ("relowner", o(owner_oid)),
                ("relacl", acl),
                ("relam", o(if table { 2 } else { 0 })),
                ("relfilenode", o(if table { r.oid } else { 0 })),
                ("reltuples", ScalarValue::Float32(Some(-1.0))),
                ("relpersistence", s("p")),
                ("relkind", s(r.kind.to_string())),
                ("relnatts", i(r.schema.fields().len() as i64)),
                ("relispopulated", b(true)),
                ("relreplident", s(if table { "d" } else { "n" })),
            ]
        })
        .collect()
}

/// `pg_type`'s fixed-width storage facts for a type of length `len`.
fn storage(len: i16) -> (bool, &'static str, &'static str) {
    match len {
        1 => (true, "c", "p"),
        2 => (true, "s", "p"),
        4 => (true, "i", "p"),
        8 => (true, "d", "p"),
        16 => (false, "d", "p"),
        _ => (false, "i", "x"),
    }
}

fn pg_type_rows() -> Vec<Row> {
    all_types()
        .into_iter()
        .map(|(oid, name, len, category, array, elem, pseudo)| {
            let (byval, align, storage) = storage(len);
            let storage = if name == "numeric" { "m" } else { storage };
            let text_like = matches!(name.as_str(), "text" | "varchar" | "bpchar" | "name");
            vec![
                ("oid", o(oid)),
                ("typname", s(name)),
                ("typnamespace", o(PG_CATALOG_OID)),
                ("typowner", o(ROLE_OID)),
                ("typlen", i(len.into())),
                ("typbyval", b(byval)),
                ("typtype", s(if pseudo { "p" } else { "b" })),
                ("typcategory", s(category)),
                ("typisdefined", b(true)),
                ("typdelim", s(",")),
                ("typelem", o(elem)),
                ("typarray", o(array)),
                ("typalign", s(align)),
                ("typstorage", s(storage)),
                ("typtypmod", i(-1)),
                ("typcollation", o(if text_like { 100 } else { 0 })),
            ]
        })
        .collect()
}

fn pg_attribute(snapshot: &Snapshot) -> Vec<Row> {
    let mut out = Vec::new();
    for r in snapshot.relations() {
        for (n, field) in r.schema.fields().iter().enumerate() {
            let t = pg_type(field.data_type());
            let (byval, align, _) = storage(t.typlen());
            let storage = super::attribute_storage(field.data_type());
            out.push(vec![
                ("attrelid", o(r.oid)),
                ("attname", s(field.name().clone())),
                ("atttypid", o(t.oid().into())),
                ("attstattarget", i(-1)),
                ("attlen", i(t.typlen().into())),
                ("attnum", i(n as i64 + 1)),
                ("attcacheoff", i(-1)),
                ("atttypmod", i(pg_type_modifier(field.data_type()).into())),
                ("attbyval", b(byval)),
                ("attalign", s(align)),
                ("attstorage", s(storage)),
                ("attcompression", s("")),
                ("attnotnull", b(!field.is_nullable())),
                ("attidentity", s("")),
                ("attgenerated", s("")),
                ("attislocal", b(true)),
                ("attcollation", o(if t == PgType::Text { 100 } else { 0 })),
            ]);
        }
    }
    out
}

fn pg_settings(snapshot: &Snapshot) -> Vec<Row> {
    let mut settings: Vec<(String, String, String)> = snapshot.settings.clone();
    // Read by drivers (pgJDBC's getMaxIndexKeys) though no client sets them.
    for (name, value) in [("max_index_keys", "32"), ("max_identifier_length", "63")] {
        if !settings.iter().any(|(n, _, _)| n == name) {
            settings.push((name.into(), value.into(), "PostgreSQL compatibility (read only)".into()));
        }
    }
    settings.sort();
    settings
        .into_iter()
        .map(|(name, value, description)| {
            vec![
                ("name", s(name)),
                ("setting", s(value.clone())),
                (
                    "category",
                    s(if description.starts_with("PostgreSQL") {
                        "Client"
                    } else {
                        "Sluice"
                    }),
                ),
                ("short_desc", s(description)),
                ("context", s("user")),
                ("vartype", s("string")),
                ("source", s("session")),
                ("boot_val", s(value.clone())),
                ("reset_val", s(value)),
            ]
        })
        .collect()
}

/// Numeric precision, radix and scale, and datetime precision, as
/// `information_schema.columns` reports them.
fn precision(data_type: &DataType) -> (Option<i64>, Option<i64>, Option<i64>, Option<i64>) {
    let t = pg_type(data_type);
    match t {
        PgType::Int2 => (Some(16), Some(2), Some(0), None),
        PgType::Int4 => (Some(32), Some(2), Some(0), None),
        PgType::Int8 => (Some(64), Some(2), Some(0), None),
        PgType::Float4 => (Some(24), Some(2), None, None),
        PgType::Float8 => (Some(53), Some(2), None, None),
        PgType::Numeric => {
            let typmod = pg_type_modifier(data_type);
            if typmod >= 4 {
                let packed = i64::from(typmod - 4);
                (Some(packed >> 16), Some(10), Some(packed & 0xffff), None)
            } else {
                (None, Some(10), None, None)
            }
        }
        PgType::Date => (None, None, None, Some(0)),
        PgType::Time | PgType::Timestamp | PgType::TimestampTz | PgType::Interval => (None, None, None, Some(6)),
        PgType::Bool | PgType::Text | PgType::Bytea => (None, None, None, None),
    }
}

fn information_schema_columns(snapshot: &Snapshot) -> Vec<Row> {
    let mut out = Vec::new();
    for r in snapshot.relations() {
        for (n, field) in r.schema.fields().iter().enumerate() {
            let t = pg_type(field.data_type());
            let (numeric_precision, radix, scale, datetime) = precision(field.data_type());
            let mut row = vec![
                ("table_catalog", s(DATABASE_NAME)),
                ("table_schema", s(r.schema_name)),
                ("table_name", s(r.name.clone())),
                ("column_name", s(field.name().clone())),
                ("ordinal_position", i(n as i64 + 1)),
                ("is_nullable", yes_no(field.is_nullable())),
                ("data_type", s(t.name())),
                ("udt_catalog", s(DATABASE_NAME)),
                ("udt_schema", s("pg_catalog")),
                ("udt_name", s(t.typname())),
                ("dtd_identifier", s((n + 1).to_string())),
                ("is_self_referencing", yes_no(false)),
                ("is_identity", yes_no(false)),
                ("identity_cycle", yes_no(false)),
                ("is_generated", s("NEVER")),
                ("is_updatable", yes_no(r.kind == 'r')),
            ];
            if t == PgType::Text {
                row.push(("character_octet_length", i(1_073_741_824)));
            }
            for (column, value) in [
                ("numeric_precision", numeric_precision),
                ("numeric_precision_radix", radix),
                ("numeric_scale", scale),
                ("datetime_precision", datetime),
            ] {
                row.push((column, value.map(i).unwrap_or(ScalarValue::Int32(None))));
            }
            out.push(row);
        }
    }
    out
}
