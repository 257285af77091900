//! Catalog queries as clients send them, over a catalog of known streams.
//! Expected rows follow from the streams made here.

use super::Snapshot;
use crate::engine::test_support::{query, texts};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use sluice_plan::catalog::StreamDef;
use std::collections::BTreeMap;
use std::sync::Arc;

fn stream(name: &str, fields: Vec<Field>) -> StreamDef {
    StreamDef {
        name: name.into(),
        schema: Arc::new(Schema::new(fields)),
        event_time: None,
        connector: "memory".into(),
        options: BTreeMap::new(),
        pipeline: None,
        computed: Vec::new(),
    }
}

/// Streams `clicks` (user_id bigint, page text, ts timestamp, amount
/// numeric(10,2) not null) and `bids` (price bigint), given out of order.
fn snapshot() -> Snapshot {
    Snapshot::new(
        vec![
            stream(
                "clicks",
                vec![
                    Field::new("user_id", DataType::Int64, true),
                    Field::new("page", DataType::Utf8, true),
                    Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
                    Field::new("amount", DataType::Decimal128(10, 2), false),
                ],
            ),
            stream("bids", vec![Field::new("price", DataType::Int64, true)]),
        ],
        vec![(
            "search_path".into(),
            "\"$user\", public".into(),
            "PostgreSQL client setting".into(),
        )],
    )
}

async fn rows(sql: &str) -> Vec<Vec<String>> {
    let batches = query(sql, snapshot())
        .await
        .unwrap_or_else(|e| panic!("{sql}\nfailed: {e}"));
    let columns = batches.first().map_or(0, |b| b.num_columns());
    let by_column: Vec<Vec<String>> = (0..columns).map(|c| texts(&batches, c)).collect();
    let n = by_column.first().map_or(0, Vec::len);
    (0..n)
        .map(|r| by_column.iter().map(|c| c[r].clone()).collect())
        .collect()
}

fn strings(rows: &[&[&str]]) -> Vec<Vec<String>> {
    rows.iter().map(|r| r.iter().map(|s| s.to_string()).collect()).collect()
}

/// pgJDBC 42.7's `getTables(null, "public", "%", {"TABLE"})`, its parameters
/// bound as the server binds them.
#[tokio::test]
async fn pgjdbc_get_tables() {
    let sql = r#"SELECT current_database() AS "TABLE_CAT", n.nspname AS "TABLE_SCHEM", c.relname AS "TABLE_NAME",  CASE n.nspname ~ '^pg_' OR n.nspname = 'information_schema'  WHEN true THEN CASE  WHEN n.nspname = 'pg_catalog' OR n.nspname = 'information_schema' THEN CASE c.relkind   WHEN 'r' THEN 'SYSTEM TABLE'   WHEN 'v' THEN 'SYSTEM VIEW'   WHEN 'i' THEN 'SYSTEM INDEX'   ELSE NULL   END  WHEN n.nspname = 'pg_toast' THEN CASE c.relkind   WHEN 'r' THEN 'SYSTEM TOAST TABLE'   WHEN 'i' THEN 'SYSTEM TOAST INDEX'   ELSE NULL   END  ELSE CASE c.relkind   WHEN 'r' THEN 'TEMPORARY TABLE'   WHEN 'p' THEN 'TEMPORARY TABLE'   WHEN 'i' THEN 'TEMPORARY INDEX'   WHEN 'S' THEN 'TEMPORARY SEQUENCE'   WHEN 'v' THEN 'TEMPORARY VIEW'   ELSE NULL   END  END  WHEN false THEN CASE c.relkind  WHEN 'r' THEN 'TABLE'  WHEN 'p' THEN 'PARTITIONED TABLE'  WHEN 'i' THEN 'INDEX'  WHEN 'P' then 'PARTITIONED INDEX'  WHEN 'S' THEN 'SEQUENCE'  WHEN 'v' THEN 'VIEW'  WHEN 'c' THEN 'TYPE'  WHEN 'f' THEN 'FOREIGN TABLE'  WHEN 'm' THEN 'MATERIALIZED VIEW'  ELSE NULL  END  ELSE NULL  END  AS "TABLE_TYPE", d.description AS "REMARKS",  '' as "TYPE_CAT", '' as "TYPE_SCHEM", '' as "TYPE_NAME", '' AS "SELF_REFERENCING_COL_NAME", '' AS "REF_GENERATION"  FROM pg_catalog.pg_namespace n, pg_catalog.pg_class c  LEFT JOIN pg_catalog.pg_description d ON (c.oid = d.objoid AND d.objsubid = 0  and d.classoid = 'pg_class'::regclass)  WHERE c.relnamespace = n.oid  AND n.nspname LIKE 'public' AND c.relname LIKE '%' AND (false  OR ( c.relkind = 'r' AND n.nspname !~ '^pg_' AND n.nspname <> 'information_schema' ) )  ORDER BY "TABLE_TYPE","TABLE_SCHEM","TABLE_NAME" "#;
    let got: Vec<Vec<String>> = rows(sql).await.into_iter().map(|r| r[..5].to_vec()).collect();
    assert_eq!(
        got,
        strings(&[
            &["sluice", "public", "bids", "TABLE", "NULL"],
            &["sluice", "public", "clicks", "TABLE", "NULL"],
        ])
    );
}

/// pgJDBC 42.7's `getColumns(null, "public", "clicks", "%")`.
#[tokio::test]
async fn pgjdbc_get_columns() {
    let sql = r#"SELECT * FROM (SELECT current_database() AS current_database, n.nspname,c.relname,a.attname,a.atttypid,a.attnotnull  OR (t.typtype = 'd' AND t.typnotnull) AS attnotnull,a.atttypmod,a.attlen,t.typtypmod,a.attnum, nullif(a.attidentity, '') as attidentity,nullif(a.attgenerated, '') as attgenerated,pg_catalog.pg_get_expr(def.adbin, def.adrelid) AS adsrc,dsc.description,t.typbasetype,t.typtype  FROM pg_catalog.pg_namespace n  JOIN pg_catalog.pg_class c ON (c.relnamespace = n.oid)  JOIN pg_catalog.pg_attribute a ON (a.attrelid=c.oid)  JOIN pg_catalog.pg_type t ON (a.atttypid = t.oid)  LEFT JOIN pg_catalog.pg_attrdef def ON (a.attrelid=def.adrelid AND a.attnum = def.adnum)  LEFT JOIN pg_catalog.pg_description dsc ON (c.oid=dsc.objoid AND a.attnum = dsc.objsubid)  LEFT JOIN pg_catalog.pg_class dc ON (dc.oid=dsc.classoid AND dc.relname='pg_class')  LEFT JOIN pg_catalog.pg_namespace dn ON (dc.relnamespace=dn.oid AND dn.nspname='pg_catalog')  WHERE c.relkind in ('r','p','v','f','m') and a.attnum > 0 AND NOT a.attisdropped  AND n.nspname LIKE 'public' AND c.relname LIKE 'clicks') c WHERE true  AND attname LIKE '%' ORDER BY nspname,c.relname,attnum "#;
    let got: Vec<Vec<String>> = rows(sql)
        .await
        .into_iter()
        .map(|r| {
            vec![
                r[2].clone(),
                r[3].clone(),
                r[4].clone(),
                r[5].clone(),
                r[6].clone(),
                r[9].clone(),
            ]
        })
        .collect();
    // numeric(10,2): typmod ((10 << 16) | 2) + 4 = 655366.
    assert_eq!(
        got,
        strings(&[
            &["clicks", "user_id", "20", "false", "-1", "1"],
            &["clicks", "page", "25", "false", "-1", "2"],
            &["clicks", "ts", "1114", "false", "-1", "3"],
            &["clicks", "amount", "1700", "true", "655366", "4"],
        ])
    );
}

/// pgJDBC 42.7's `getSchemas()` and `getCatalogs()`.
#[tokio::test]
async fn pgjdbc_get_schemas_and_catalogs() {
    let sql = r#"SELECT nspname AS "TABLE_SCHEM", current_database() AS "TABLE_CATALOG" FROM pg_catalog.pg_namespace  WHERE nspname <> 'pg_toast' AND (nspname !~ '^pg_temp_'  OR nspname = (pg_catalog.current_schemas(true))[1]) AND (nspname !~ '^pg_toast_temp_'  OR nspname = replace((pg_catalog.current_schemas(true))[1], 'pg_temp_', 'pg_toast_temp_'))  ORDER BY "TABLE_SCHEM""#;
    assert_eq!(
        rows(sql).await,
        strings(&[
            &["information_schema", "sluice"],
            &["pg_catalog", "sluice"],
            &["public", "sluice"],
        ])
    );
    let sql = r#"SELECT datname AS "TABLE_CAT" FROM pg_catalog.pg_database WHERE datallowconn = true ORDER BY datname"#;
    assert_eq!(rows(sql).await, strings(&[&["sluice"]]));
}

/// psql 15's `\d` (and `\dt`: the same with `c.relkind IN ('r','p','')`).
#[tokio::test]
async fn psql_list_relations() {
    let sql = "SELECT n.nspname as \"Schema\",\n  c.relname as \"Name\",\n  CASE c.relkind WHEN 'r' THEN 'table' WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' WHEN 'i' THEN 'index' WHEN 'S' THEN 'sequence' WHEN 't' THEN 'TOAST table' WHEN 'f' THEN 'foreign table' WHEN 'p' THEN 'partitioned table' WHEN 'I' THEN 'partitioned index' END as \"Type\",\n  pg_catalog.pg_get_userbyid(c.relowner) as \"Owner\"\nFROM pg_catalog.pg_class c\n     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace\n     LEFT JOIN pg_catalog.pg_am am ON am.oid = c.relam\nWHERE c.relkind IN ('r','p','v','m','S','f','')\n      AND n.nspname <> 'pg_catalog'\n      AND n.nspname !~ '^pg_toast'\n      AND n.nspname <> 'information_schema'\n  AND pg_catalog.pg_table_is_visible(c.oid)\nORDER BY 1,2;";
    assert_eq!(
        rows(sql).await,
        strings(&[
            &["public", "bids", "table", "sluice"],
            &["public", "clicks", "table", "sluice"],
        ])
    );
    // \d clicks: the oid lookup (streams have oids in name order).
    let sql = "SELECT c.oid,\n  n.nspname,\n  c.relname\nFROM pg_catalog.pg_class c\n     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace\nWHERE c.relname OPERATOR(pg_catalog.~) '^(clicks)$' COLLATE pg_catalog.default\n  AND pg_catalog.pg_table_is_visible(c.oid)\nORDER BY 2, 3;";
    assert_eq!(rows(sql).await, strings(&[&["16385", "public", "clicks"]]));
}

/// DBeaver's schema listing and a table listing of one schema.
#[tokio::test]
async fn dbeaver_namespaces_and_classes() {
    let sql = "SELECT n.oid,n.*,d.description FROM pg_catalog.pg_namespace n\nLEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=n.oid AND d.objsubid=0 AND d.classoid='pg_namespace'::regclass\n ORDER BY nspname";
    let got: Vec<String> = rows(sql).await.into_iter().map(|r| r[2].clone()).collect();
    assert_eq!(got, ["information_schema", "pg_catalog", "public"]);
    let sql = "SELECT c.oid,c.*,t.relname as tabrelname,rt.relnamespace as refnamespace,d.description\nFROM pg_catalog.pg_class c\nLEFT OUTER JOIN pg_catalog.pg_class t ON t.oid=c.reltoastrelid\nLEFT OUTER JOIN pg_catalog.pg_class rt ON rt.oid=c.reloftype\nLEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=c.oid AND d.objsubid=0 AND d.classoid='pg_class'::regclass\nWHERE c.relnamespace=2200 AND c.relkind not in ('i','I','c')";
    let got: Vec<String> = rows(sql).await.into_iter().map(|r| r[2].clone()).collect();
    assert_eq!(got, ["bids", "clicks"]);
}

/// psycopg's type listing and its `TypeInfo.fetch` query.
#[tokio::test]
async fn psycopg_types() {
    let all = rows("SELECT oid, typname FROM pg_type").await;
    for (oid, name) in [
        ("20", "int8"),
        ("25", "text"),
        ("1114", "timestamp"),
        ("1700", "numeric"),
    ] {
        assert!(all.contains(&vec![oid.to_string(), name.to_string()]), "{oid} {name}");
    }
    for regtype in ["to_regtype('numeric')", "'numeric'::regtype"] {
        let sql = format!(
            "SELECT\n    typname AS name, oid, typarray AS array_oid,\n    oid::regtype::text AS regtype, typdelim AS delimiter\nFROM pg_type t\nWHERE t.oid = {regtype}\nORDER BY t.oid\n"
        );
        assert_eq!(
            rows(&sql).await,
            strings(&[&["numeric", "1700", "1231", "numeric", ","]])
        );
    }
}

/// Grafana's table and column pickers.
#[tokio::test]
async fn grafana_information_schema() {
    let sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name";
    assert_eq!(rows(sql).await, strings(&[&["bids"], &["clicks"]]));
    let sql = "SELECT quote_ident(column_name) AS column, data_type AS type FROM information_schema.columns WHERE quote_ident(table_name) = 'clicks' ORDER BY ordinal_position";
    assert_eq!(
        rows(sql).await,
        strings(&[
            &["user_id", "bigint"],
            &["page", "text"],
            &["ts", "timestamp without time zone"],
            &["amount", "numeric"],
        ])
    );
    let sql = "SELECT current_setting('search_path'), current_schema(), version() LIKE 'PostgreSQL 15%'";
    assert_eq!(rows(sql).await, strings(&[&["\"$user\", public", "public", "true"]]));
}

#[tokio::test]
async fn regclass_literals_name_relations_or_fail() {
    let sql = "SELECT 'clicks'::regclass::oid, 'pg_catalog.pg_class'::regclass, 'pg_type'::pg_catalog.regclass";
    assert_eq!(rows(sql).await, strings(&[&["16385", "1259", "1247"]]));
    let err = query("SELECT 'nope'::regclass", snapshot()).await.unwrap_err();
    assert_eq!(err.sqlstate(), "42P01", "{err}");
}

#[tokio::test]
async fn any_and_all_over_array_literals() {
    let sql = "SELECT relname FROM pg_class WHERE relkind = ANY('{r}') AND relname <> ALL (ARRAY['bids']) AND relnamespace = 2200";
    assert_eq!(rows(sql).await, strings(&[&["clicks"]]));
}

#[test]
fn every_pg_catalog_table_resolves_unqualified() {
    let tables: Vec<String> = super::tables::catalog_relations()
        .into_iter()
        .filter(|r| r.schema_name == "pg_catalog")
        .map(|r| r.name)
        .collect();
    let mut names: Vec<String> = super::CATALOG_TABLE_NAMES.iter().map(|s| s.to_string()).collect();
    let mut sorted = tables.clone();
    sorted.sort();
    names.sort();
    assert_eq!(sorted, names);
}

/// psql 15's publication footer of `\d name`: planned or not, no rows.
#[tokio::test]
async fn psql_publication_footer_has_no_rows() {
    let sql = "SELECT pubname\n     , NULL\n     , NULL\nFROM pg_catalog.pg_publication p\n     JOIN pg_catalog.pg_publication_namespace pn ON p.oid = pn.pnpubid\n     JOIN pg_catalog.pg_class pc ON pc.relnamespace = pn.pnnspid\nWHERE pc.oid ='16385' and pg_catalog.pg_relation_is_publishable('16385')\nUNION\nSELECT pubname\n     , pg_get_expr(pr.prqual, c.oid)\n     , (CASE WHEN pr.prattrs IS NOT NULL THEN\n         (SELECT string_agg(attname, ', ')\n           FROM pg_catalog.generate_series(0, pg_catalog.array_upper(pr.prattrs::pg_catalog.int2[], 1)) s,\n                pg_catalog.pg_attribute\n          WHERE attrelid = pr.prrelid AND attnum = prattrs[s])\n        ELSE NULL END) FROM pg_catalog.pg_publication p\n     JOIN pg_catalog.pg_publication_rel pr ON p.oid = pr.prpubid\n     JOIN pg_catalog.pg_class c ON c.oid = pr.prrelid\nWHERE pr.prrelid = '16385'\nUNION\nSELECT pubname\n     , NULL\n     , NULL\nFROM pg_catalog.pg_publication p\nWHERE p.puballtables AND pg_catalog.pg_relation_is_publishable('16385')\nORDER BY 1;";
    assert_eq!(rows(sql).await, Vec::<Vec<String>>::new());
}

/// `current_catalog` (an SQL value function written without parentheses,
/// as pgJDBC 42.7.14's getTables/getColumns use it) is the database's name.
#[tokio::test]
async fn current_catalog_is_the_database_name() {
    let sql = r#"SELECT current_catalog AS "TABLE_CAT", c.relname FROM pg_catalog.pg_class c WHERE c.relname = 'bids'"#;
    assert_eq!(rows(sql).await, strings(&[&["sluice", "bids"]]));
}

/// The privilege functions fail as Postgres' do: an unknown role name is
/// `42704`, relation name `42P01`, column name `42703`, privilege word
/// `22023`, checked in that order; folded as constants or evaluated row by
/// row over a catalog table.
#[tokio::test]
async fn privilege_functions_fail_with_postgres_sqlstates() {
    let role = ("42704", "role \"nosuchuser\" does not exist");
    let relation = ("42P01", "relation \"nosuchtable\" does not exist");
    let fly = ("22023", "unrecognized privilege type: \"FLY\"");
    for (sql, (sqlstate, message)) in [
        ("SELECT has_table_privilege('nosuchuser', 'clicks', 'SELECT')", role),
        ("SELECT has_table_privilege('nosuchtable', 'SELECT')", relation),
        (
            "SELECT has_table_privilege('sluice', 'nosuchtable', 'SELECT')",
            relation,
        ),
        ("SELECT has_table_privilege('clicks', 'FLY')", fly),
        (
            "SELECT has_table_privilege('clicks', 'SELECT, fly ')",
            ("22023", "unrecognized privilege type: \"fly\""),
        ),
        (
            "SELECT has_table_privilege('clicks', 'SELECT WITH ADMIN OPTION')",
            ("22023", "unrecognized privilege type: \"SELECT WITH ADMIN OPTION\""),
        ),
        ("SELECT has_table_privilege('nosuchuser', 'nosuchtable', 'FLY')", role),
        ("SELECT has_table_privilege('nosuchtable', 'FLY')", relation),
        ("SELECT has_table_privilege(16385, 'FLY')", fly),
        (
            "SELECT has_table_privilege('sluice', relname, 'FLY') FROM pg_class",
            fly,
        ),
        (
            "SELECT has_table_privilege(r.rolname, 'clicks', 'FLY') FROM pg_roles r",
            fly,
        ),
        (
            "SELECT has_any_column_privilege('clicks', 'DELETE')",
            ("22023", "unrecognized privilege type: \"DELETE\""),
        ),
        (
            "SELECT has_any_column_privilege('nosuchuser', 'clicks', 'SELECT')",
            role,
        ),
        (
            "SELECT has_column_privilege('clicks', 'nosuchcol', 'SELECT')",
            ("42703", "column \"nosuchcol\" of relation \"clicks\" does not exist"),
        ),
        (
            "SELECT has_column_privilege('nosuchuser', 'clicks', 'page', 'SELECT')",
            role,
        ),
        ("SELECT has_column_privilege('nosuchtable', 'page', 'SELECT')", relation),
        (
            "SELECT has_column_privilege('clicks', 'page', 'TRUNCATE')",
            ("22023", "unrecognized privilege type: \"TRUNCATE\""),
        ),
        ("SELECT pg_has_role('nosuchuser', 'MEMBER')", role),
        ("SELECT pg_has_role('nosuchuser', 'sluice', 'MEMBER')", role),
        ("SELECT pg_has_role('sluice', 'nosuchuser', 'MEMBER')", role),
        ("SELECT pg_has_role('sluice', 'FLY')", fly),
        (
            "SELECT pg_has_role('sluice', 'SELECT')",
            ("22023", "unrecognized privilege type: \"SELECT\""),
        ),
    ] {
        let err = query(sql, snapshot()).await.expect_err(sql);
        assert_eq!((err.sqlstate(), err.to_string().as_str()), (sqlstate, message), "{sql}");
    }
}

/// What the privilege functions answer when nothing is wrong: oids and
/// column numbers that name nothing are NULL; a superuser holds every
/// stream privilege and the admin option of every role.
#[tokio::test]
async fn privilege_functions_answer_null_for_unknown_oids() {
    let sql = "SELECT has_table_privilege(999999, 'SELECT'), has_table_privilege(999999, 16385, 'SELECT'), \
               has_column_privilege('clicks', 9, 'SELECT'), has_column_privilege('clicks', 2, 'INSERT'), \
               has_column_privilege('clicks', 'page', 'SELECT WITH GRANT OPTION'), has_any_column_privilege('bids', 'UPDATE'), \
               has_table_privilege('bids', 'TRUNCATE'), pg_has_role(999999, 'sluice', 'MEMBER'), \
               pg_has_role('sluice', 'pg_write_server_files', 'SET WITH ADMIN OPTION'), \
               pg_has_role('pg_write_server_files', 'pg_write_server_files', 'usage'), \
               pg_has_role('pg_write_server_files', 'pg_write_server_files', 'MEMBER WITH ADMIN OPTION')";
    assert_eq!(
        rows(sql).await,
        strings(&[&[
            "NULL", "NULL", "NULL", "true", "true", "false", "false", "NULL", "true", "true", "false"
        ]])
    );
}
