//! Engine internals for tests elsewhere in the crate (the type agreement
//! test in `pgwire`).

use super::Output;
use super::pg_catalog::Snapshot;
use super::show::Cell;
use arrow::array::{Array, AsArray};
use arrow::datatypes::{Int16Type, Int32Type, Int64Type, SchemaRef};
use arrow::record_batch::RecordBatch;
use futures::StreamExt;
use sluice_plan::catalog::StreamDef;
use sluice_sql::statement::{SluiceStatement, parse_statements};
use sqlparser::ast::Statement;
use std::collections::BTreeMap;

/// The name of the one stream of [`snapshot`].
pub const STREAM: &str = "all_types";

/// A memory stream named [`STREAM`] with `schema`.
pub fn stream(schema: &SchemaRef) -> StreamDef {
    StreamDef {
        name: STREAM.into(),
        schema: schema.clone(),
        event_time: None,
        connector: "memory".into(),
        options: BTreeMap::new(),
        pipeline: None,
        computed: Vec::new(),
    }
}

/// A catalog of that one stream.
pub fn snapshot(schema: &SchemaRef) -> Snapshot {
    Snapshot::new(vec![stream(schema)], Vec::new())
}

/// Every batch of a statement's rows.
pub async fn collect(output: Output) -> Vec<RecordBatch> {
    let Output::Rows { rows, .. } = output else {
        panic!("a statement without rows");
    };
    rows.batches.map(|b| b.expect("a batch")).collect().await
}

/// Runs the query `sql` as the batch path runs it, over `snapshot`: its
/// batches, or the error it fails with, planned or executed.
pub async fn query(sql: &str, snapshot: Snapshot) -> sluice_types::Result<Vec<RecordBatch>> {
    let mut statements = parse_statements(sql)?;
    let Some(SluiceStatement::Sql(statement)) = statements.pop() else {
        panic!("not a query: {sql}");
    };
    let Statement::Query(q) = *statement else {
        panic!("not a query: {sql}");
    };
    let rows = super::batch::run(&q, snapshot).await?;
    // An error while the rows are read (a catalog function's) is the query's.
    rows.batches.collect::<Vec<_>>().await.into_iter().collect()
}

/// Column `column` of every row, as text (NULL as "NULL").
pub fn texts(batches: &[RecordBatch], column: usize) -> Vec<String> {
    let mut out = Vec::new();
    for batch in batches {
        let array = arrow::compute::cast(batch.column(column), &arrow::datatypes::DataType::Utf8).expect("as text");
        let strings = array.as_string::<i32>();
        for i in 0..strings.len() {
            out.push(if strings.is_null(i) {
                "NULL".into()
            } else {
                strings.value(i).to_string()
            });
        }
    }
    out
}

/// DESCRIBE's `data_type` of each column.
pub fn describe_rows(schema: &SchemaRef) -> Vec<String> {
    super::show::describe(&stream(schema))
        .rows
        .iter()
        .map(|row| match &row[1] {
            Cell::Text(Some(t)) => t.clone(),
            other => panic!("data_type {other:?}"),
        })
        .collect()
}

/// The type psql's `\d all_types` shows for each column.
pub async fn psql_columns(schema: &SchemaRef) -> Vec<String> {
    let oid = Snapshot::stream_oid(0);
    let sql = format!(
        "SELECT a.attname,\n  pg_catalog.format_type(a.atttypid, a.atttypmod),\n  (SELECT pg_catalog.pg_get_expr(d.adbin, d.adrelid, true)\n   FROM pg_catalog.pg_attrdef d\n   WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum AND a.atthasdef),\n  a.attnotnull\nFROM pg_catalog.pg_attribute a\nWHERE a.attrelid = '{oid}' AND a.attnum > 0 AND NOT a.attisdropped\nORDER BY a.attnum;"
    );
    let snapshot = snapshot(schema);
    let output = super::psql_catalog::answer(&sql, || snapshot)
        .expect("psql's column query is answered")
        .expect("psql's column query succeeds");
    texts(&collect(output).await, 1)
}

/// What the catalog tables say about one column.
#[derive(Debug)]
pub struct CatalogRow {
    pub atttypid: i64,
    pub atttypmod: i32,
    pub typlen: i16,
    pub typname: String,
    pub format_type: String,
    pub information_schema_type: String,
}

/// `pg_attribute`, `pg_type`, `format_type` and `information_schema.columns`
/// for each column of a stream with `schema`.
pub async fn catalog_rows(schema: &SchemaRef) -> Vec<CatalogRow> {
    let sql = format!(
        "SELECT a.atttypid, a.atttypmod, t.typlen, t.typname, format_type(a.atttypid, a.atttypmod), c.data_type \
         FROM pg_catalog.pg_attribute a \
         JOIN pg_catalog.pg_class r ON r.oid = a.attrelid \
         JOIN pg_catalog.pg_type t ON t.oid = a.atttypid \
         JOIN information_schema.columns c ON c.table_name = r.relname AND c.ordinal_position = a.attnum \
         WHERE r.relname = '{STREAM}' ORDER BY a.attnum"
    );
    let batches = query(&sql, snapshot(schema)).await.expect("the catalog query runs");
    let (typnames, formats, info) = (texts(&batches, 3), texts(&batches, 4), texts(&batches, 5));
    let mut out = Vec::new();
    let mut n = 0;
    for batch in &batches {
        for i in 0..batch.num_rows() {
            out.push(CatalogRow {
                atttypid: batch.column(0).as_primitive::<Int64Type>().value(i),
                atttypmod: batch.column(1).as_primitive::<Int32Type>().value(i),
                typlen: batch.column(2).as_primitive::<Int16Type>().value(i),
                typname: typnames[n].clone(),
                format_type: formats[n].clone(),
                information_schema_type: info[n].clone(),
            });
            n += 1;
        }
    }
    out
}

/// An engine over a master and one local worker, its catalog in a fresh
/// directory under the system's temporary directory (removed by the
/// returned guard).
pub fn engine(label: &str) -> (std::sync::Arc<super::Engine>, TempDir) {
    use sluice_cluster::scheduler::LocalScheduler;
    use sluice_cluster::worker::Worker;
    use sluice_connectors::Connectors;
    use sluice_dataflow::channel::InProcessTransport;
    use sluice_dataflow::deploy::DeployConfig;
    use std::sync::Arc;
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "sluice-engine-{label}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let connectors = Connectors::default();
    let worker = Arc::new(Worker::new(
        connectors.clone(),
        InProcessTransport::default(),
        DeployConfig::default(),
    ));
    let master = sluice_cluster::Master::open(&dir, Arc::new(LocalScheduler { worker })).expect("master");
    let config = crate::security::SecurityConfig::default();
    // Creating a role awaits nothing: block_on finishes at once.
    futures::executor::block_on(crate::security::bootstrap_superuser(&master, &config)).expect("superuser");
    (super::Engine::new(Arc::new(master), connectors), TempDir(dir))
}

/// Removes its directory when dropped.
pub struct TempDir(pub std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
