//! `pg_catalog` and `information_schema` over a live server, with queries
//! as Grafana, DBeaver and psycopg send them. Expected rows follow from the
//! streams each test creates (oids: 16384 on, in name order).

use crate::common::TestServer;
use crate::support::{STATEMENT_TIMEOUT, describe, exec, query, simple_rows, within};

fn text(rows: &[&[&str]]) -> Vec<Vec<Option<String>>> {
    rows.iter()
        .map(|r| r.iter().map(|v| Some(v.to_string())).collect())
        .collect()
}

const STREAMS: &str = "CREATE STREAM readings (sensor VARCHAR NOT NULL, celsius DOUBLE PRECISION, at TIMESTAMP);\n\
                       CREATE STREAM alerts (sensor VARCHAR, level INT, amount DECIMAL(10,2));";

#[tokio::test]
async fn grafana_lists_tables_and_columns() {
    let server = TestServer::start();
    let client = server.connect().await;
    exec(&client, STREAMS).await;
    let sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name";
    assert_eq!(simple_rows(&client, sql).await, text(&[&["alerts"], &["readings"]]));
    // Extended protocol, the table name as a parameter.
    let sql = "SELECT column_name, data_type, is_nullable FROM information_schema.columns \
               WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position";
    let rows = within(sql, STATEMENT_TIMEOUT, client.query(sql, &[&"readings"]))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", describe(&e)));
    let got: Vec<(String, String, String)> = rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    let want = [
        ("sensor", "text", "NO"),
        ("celsius", "double precision", "YES"),
        ("at", "timestamp without time zone", "YES"),
    ];
    let want: Vec<(String, String, String)> = want
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
    assert_eq!(got, want);
    let sql = "SELECT current_database(), current_schema(), current_setting('search_path')";
    assert_eq!(
        simple_rows(&client, sql).await,
        text(&[&["sluice", "public", "\"$user\", public"]])
    );
}

#[tokio::test]
async fn dbeaver_lists_schemas_and_tables() {
    let server = TestServer::start();
    let client = server.connect().await;
    exec(&client, STREAMS).await;
    let sql = "SELECT n.oid,n.*,d.description FROM pg_catalog.pg_namespace n\n\
               LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=n.oid AND d.objsubid=0 AND d.classoid='pg_namespace'::regclass\n \
               ORDER BY nspname";
    let names: Vec<Option<String>> = simple_rows(&client, sql)
        .await
        .into_iter()
        .map(|r| r[2].clone())
        .collect();
    assert_eq!(
        names,
        ["information_schema", "pg_catalog", "public"].map(|s| Some(s.to_string()))
    );
    // public's tables, the namespace's oid as a parameter (2200, Postgres' own).
    let sql = "SELECT c.oid,c.*,t.relname as tabrelname,rt.relnamespace as refnamespace,d.description\n\
               FROM pg_catalog.pg_class c\n\
               LEFT OUTER JOIN pg_catalog.pg_class t ON t.oid=c.reltoastrelid\n\
               LEFT OUTER JOIN pg_catalog.pg_class rt ON rt.oid=c.reloftype\n\
               LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=c.oid AND d.objsubid=0 AND d.classoid='pg_class'::regclass\n\
               WHERE c.relnamespace=$1 AND c.relkind not in ('i','I','c')";
    let rows = within(sql, STATEMENT_TIMEOUT, client.query(sql, &[&2200_i64]))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", describe(&e)));
    let mut tables: Vec<(i64, String, String)> = rows
        .iter()
        .map(|r| (r.get("oid"), r.get("relname"), r.get("relkind")))
        .collect();
    tables.sort();
    assert_eq!(
        tables,
        vec![
            (16384, "alerts".to_string(), "r".to_string()),
            (16385, "readings".to_string(), "r".to_string())
        ]
    );
    // The columns of one table, with their types.
    let sql = "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull FROM pg_catalog.pg_attribute a \
               WHERE a.attrelid = 'alerts'::regclass AND a.attnum > 0 ORDER BY a.attnum";
    assert_eq!(
        simple_rows(&client, sql).await,
        text(&[
            &["sensor", "text", "f"],
            &["level", "integer", "f"],
            &["amount", "numeric(10,2)", "f"],
        ])
    );
}

#[tokio::test]
async fn catalog_types_are_the_types_columns_arrive_as() {
    let server = TestServer::start();
    let client = server.connect().await;
    exec(&client, STREAMS).await;
    // psycopg's type listing.
    let types: Vec<(i64, String)> = query(&client, "SELECT oid, typname FROM pg_type")
        .await
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    // What a query over the stream sends, by the client's own decoding.
    let statement = within("prepare", STATEMENT_TIMEOUT, client.prepare("SELECT * FROM alerts"))
        .await
        .expect("prepare");
    let sql = "SELECT a.attname, a.atttypid FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
               WHERE c.relname = 'alerts' ORDER BY a.attnum";
    let catalog: Vec<(String, i64)> = query(&client, sql).await.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(catalog.len(), statement.columns().len());
    for (column, (name, oid)) in statement.columns().iter().zip(&catalog) {
        assert_eq!(column.name(), name);
        assert_eq!(
            i64::from(column.type_().oid()),
            *oid,
            "{name}: wire type vs pg_attribute"
        );
        let typname = types.iter().find(|(o, _)| o == oid).map(|(_, n)| n.as_str());
        assert_eq!(typname, Some(column.type_().name()), "{name}: pg_type's name for {oid}");
    }
    // DESCRIBE names them as format_type does.
    let described: Vec<Option<String>> = simple_rows(&client, "DESCRIBE alerts")
        .await
        .into_iter()
        .map(|r| r[1].clone())
        .collect();
    assert_eq!(
        described,
        ["text", "integer", "numeric(10,2)"].map(|s| Some(s.to_string()))
    );
}

#[tokio::test]
async fn unknown_relation_in_regclass_is_42p01() {
    let server = TestServer::start();
    let client = server.connect().await;
    let err = within(
        "regclass",
        STATEMENT_TIMEOUT,
        client.simple_query("SELECT 'nope'::regclass"),
    )
    .await
    .expect_err("an unknown relation");
    assert_eq!(err.code().map(|c| c.code()), Some("42P01"), "{}", describe(&err));
}
