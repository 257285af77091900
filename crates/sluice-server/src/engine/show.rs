//! Result rows for SHOW, DESCRIBE and EXPLAIN.

use super::{Output, RowStream};
use arrow::array::{ArrayRef, Int64Builder, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use sluice_cluster::catalog::PipelineDef;
use sluice_cluster::status::PipelineInfo;
use sluice_plan::PhysicalDag;
use sluice_plan::catalog::StreamDef;
use sluice_plan::diff::{DagDiff, DiffLine};
use sluice_plan::explain::{EXPLAIN_COLUMNS, explain_rows};
use sluice_sql::types::pg_type_name;
use sluice_types::{Result, Watermark, ts_ms_to_string};
use std::sync::Arc;

/// A cell of a small result.
#[derive(Debug, Clone)]
pub enum Cell {
    Text(Option<String>),
    Int(Option<i64>),
}

/// A small, fully known result: columns and rows.
pub struct Table {
    pub schema: SchemaRef,
    pub rows: Vec<Vec<Cell>>,
}

impl Table {
    /// A table whose columns are all text.
    pub fn text(columns: &[&str], rows: Vec<Vec<String>>) -> Self {
        let schema = Arc::new(Schema::new(
            columns
                .iter()
                .map(|c| Field::new(*c, DataType::Utf8, true))
                .collect::<Vec<_>>(),
        ));
        let rows = rows
            .into_iter()
            .map(|r| r.into_iter().map(|v| Cell::Text(Some(v))).collect())
            .collect();
        Table { schema, rows }
    }

    pub fn batch(&self) -> Result<RecordBatch> {
        let mut columns: Vec<ArrayRef> = Vec::new();
        for (i, f) in self.schema.fields().iter().enumerate() {
            match f.data_type() {
                DataType::Int64 => {
                    let mut b = Int64Builder::new();
                    for r in &self.rows {
                        b.append_option(match &r[i] {
                            Cell::Int(v) => *v,
                            Cell::Text(_) => None,
                        });
                    }
                    columns.push(Arc::new(b.finish()));
                }
                _ => {
                    let mut b = StringBuilder::new();
                    for r in &self.rows {
                        b.append_option(match &r[i] {
                            Cell::Text(v) => v.clone(),
                            Cell::Int(v) => v.map(|v| v.to_string()),
                        });
                    }
                    columns.push(Arc::new(b.finish()));
                }
            }
        }
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    /// As a `SELECT`-tagged result.
    pub fn output(self, tag: &str) -> Result<Output> {
        let batch = self.batch()?;
        let schema = self.schema.clone();
        Ok(Output::Rows {
            tag: tag.to_string(),
            rows: RowStream {
                schema,
                batches: Box::pin(futures::stream::iter([Ok(batch)])),
            },
        })
    }
}

/// `SHOW STREAMS`.
pub fn streams(defs: &[StreamDef]) -> Table {
    let rows = defs
        .iter()
        .map(|d| {
            let event_time = d
                .event_time
                .as_ref()
                .map(|e| {
                    let col = d.schema.field(e.column).name();
                    if e.from_upstream {
                        format!("{col} (from pipeline)")
                    } else {
                        format!("{col} - {} ms", e.delay_ms)
                    }
                })
                .unwrap_or_default();
            vec![
                d.name.clone(),
                d.connector.clone(),
                d.schema.fields().len().to_string(),
                event_time,
                d.pipeline.clone().unwrap_or_default(),
            ]
        })
        .collect();
    Table::text(&["name", "connector", "columns", "event_time", "pipeline"], rows)
}

/// `DESCRIBE name`.
pub fn describe(def: &StreamDef) -> Table {
    describe_with(&def.schema, |i, f| match &def.event_time {
        Some(e) if e.column == i && e.from_upstream => "event time (watermark from pipeline)".to_string(),
        Some(e) if e.column == i => format!("{} - INTERVAL '{}' MILLISECOND", f.name(), e.delay_ms),
        _ => String::new(),
    })
}

/// `DESCRIBE name` of a materialized view: its columns (no watermark).
pub fn describe_columns(schema: &SchemaRef) -> Table {
    describe_with(schema, |_, _| String::new())
}

fn describe_with(schema: &SchemaRef, watermark: impl Fn(usize, &Field) -> String) -> Table {
    let rows = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            vec![
                f.name().clone(),
                pg_type_name(f.data_type()),
                if f.is_nullable() { "YES" } else { "NO" }.to_string(),
                watermark(i, f),
            ]
        })
        .collect();
    Table::text(&["column_name", "data_type", "is_nullable", "watermark"], rows)
}

/// `SHOW PIPELINES`.
pub fn pipelines(infos: &[PipelineInfo]) -> Table {
    let text = |c: &str| Field::new(c, DataType::Utf8, true);
    let int = |c: &str| Field::new(c, DataType::Int64, true);
    let schema = Arc::new(Schema::new(vec![
        text("name"),
        text("kind"),
        text("state"),
        text("since"),
        int("rows_in"),
        int("rows_out"),
        int("late_rows_dropped"),
        int("records_malformed"),
        text("watermark"),
        text("error"),
        int("restarts"),
        text("last_checkpoint"),
        int("version"),
        text("changed_at"),
        text("workers"),
    ]));
    let rows = infos
        .iter()
        .map(|p| {
            vec![
                Cell::Text(Some(p.name.clone())),
                Cell::Text(Some(p.kind.clone())),
                Cell::Text(Some(p.state.clone())),
                Cell::Text(Some(ts_ms_to_string(p.since_ms))),
                Cell::Int(Some(p.rows_in as i64)),
                Cell::Int(Some(p.rows_out as i64)),
                Cell::Int(Some(p.late_rows_dropped as i64)),
                Cell::Int(Some(p.records_malformed as i64)),
                Cell::Text(p.watermark_ms.map(|w| Watermark(w).display())),
                // A failure, or else what a running pipeline is retrying.
                Cell::Text(p.error.clone().or_else(|| p.condition.clone())),
                Cell::Int(Some(p.restarts as i64)),
                Cell::Text(p.checkpoints.last().map(|c| {
                    format!(
                        "#{} at {}, {} bytes, {} ms",
                        c.id,
                        ts_ms_to_string(c.completed_ms),
                        c.size_bytes,
                        c.duration_ms
                    )
                })),
                Cell::Int(Some(i64::from(p.version))),
                Cell::Text(Some(ts_ms_to_string(p.changed_ms))),
                Cell::Text((!p.workers.is_empty()).then(|| p.workers.clone())),
            ]
        })
        .collect();
    Table { schema, rows }
}

/// A materialized view as `SHOW MATERIALIZED VIEWS` lists it.
pub struct ViewRow {
    pub name: String,
    /// Its pipeline's state.
    pub state: String,
    /// Its rows as this server last had them published.
    pub published: Option<Arc<sluice_connectors::views::PublishedView>>,
}

/// `SHOW MATERIALIZED VIEWS`: name, its pipeline's state, the rows a
/// SELECT reads now, the checkpoint they are as of (NULL: as of a start or
/// the end of the input) and when they were published (NULL: not on this
/// server yet).
pub fn materialized_views(views: &[ViewRow]) -> Table {
    let schema = Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, true),
        Field::new("state", DataType::Utf8, true),
        Field::new("rows", DataType::Int64, true),
        Field::new("checkpoint_id", DataType::Int64, true),
        Field::new("published_at", DataType::Utf8, true),
    ]));
    let rows = views
        .iter()
        .map(|v| {
            let p = v.published.as_deref();
            vec![
                Cell::Text(Some(v.name.clone())),
                Cell::Text(Some(v.state.clone())),
                Cell::Int(p.map(|p| p.num_rows() as i64)),
                Cell::Int(p.and_then(|p| p.checkpoint).map(|c| c as i64)),
                Cell::Text(p.map(|p| ts_ms_to_string(p.published_ms))),
            ]
        })
        .collect();
    Table { schema, rows }
}

/// `SHOW CHECKPOINTS FOR name`: the pipeline's completed checkpoints
/// since the server started (at most the last 10), newest first, and the
/// one it was restored from (`restored` true; its time and size are in its
/// manifest, not repeated here).
pub fn checkpoints(info: &PipelineInfo) -> Table {
    let schema = Arc::new(Schema::new(vec![
        Field::new("checkpoint_id", DataType::Int64, true),
        Field::new("completed", DataType::Utf8, true),
        Field::new("size_bytes", DataType::Int64, true),
        Field::new("duration_ms", DataType::Int64, true),
        Field::new("restored", DataType::Utf8, true),
    ]));
    let mut rows: Vec<Vec<Cell>> = info
        .checkpoints
        .iter()
        .rev()
        .map(|c| {
            vec![
                Cell::Int(Some(c.id as i64)),
                Cell::Text(Some(ts_ms_to_string(c.completed_ms))),
                Cell::Int(Some(c.size_bytes as i64)),
                Cell::Int(Some(c.duration_ms as i64)),
                Cell::Text(Some("no".into())),
            ]
        })
        .collect();
    if let Some(r) = info.restored_from
        && !info.checkpoints.iter().any(|c| c.id == r)
    {
        rows.push(vec![
            Cell::Int(Some(r as i64)),
            Cell::Text(None),
            Cell::Int(None),
            Cell::Int(None),
            Cell::Text(Some("yes".into())),
        ]);
    }
    Table { schema, rows }
}

/// `SHOW PIPELINE HISTORY name`: every version, oldest first, with the
/// statement that made it and its diff against the version before (one
/// entry per operator, separated by `; `).
pub fn history(def: &PipelineDef) -> Table {
    let schema = history_schema();
    let rows = def
        .versions()
        .into_iter()
        .map(|v| {
            let diff: Vec<String> = v.diff.iter().map(DiffLine::text).collect();
            vec![
                Cell::Int(Some(i64::from(v.version))),
                Cell::Text(Some(ts_ms_to_string(v.created_ms))),
                Cell::Text(Some(v.changed_by.unwrap_or_else(|| "CREATE".into()))),
                Cell::Text(Some(v.sql)),
                Cell::Text((!diff.is_empty()).then(|| diff.join("; "))),
            ]
        })
        .collect();
    Table { schema, rows }
}

fn history_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("version", DataType::Int64, true),
        Field::new("changed_at", DataType::Utf8, true),
        Field::new("changed_by", DataType::Utf8, true),
        Field::new("sql", DataType::Utf8, true),
        Field::new("diff", DataType::Utf8, true),
    ]))
}

/// `EXPLAIN ALTER PIPELINE …`: one row per operator of the new version
/// (then the removed ones), and one per reason the change is refused.
pub fn alter_diff(diff: &DagDiff) -> Table {
    let columns = ["operator", "uid", "kind", "change", "state", "parallelism", "detail"];
    let mut rows: Vec<Vec<String>> = diff
        .lines
        .iter()
        .map(|l| {
            let parallelism = match l.old_parallelism {
                Some(old) if old != l.parallelism => format!("{old} → {}", l.parallelism),
                _ => l.parallelism.to_string(),
            };
            vec![
                l.operator.to_string(),
                l.uid.or(l.old_uid).map(|u| u.short()).unwrap_or_default(),
                l.kind.clone(),
                l.change.name().to_string(),
                l.state.name().to_string(),
                parallelism,
                l.detail.clone(),
            ]
        })
        .collect();
    for why in &diff.refused {
        rows.push(vec![
            String::new(),
            String::new(),
            String::new(),
            "refused".into(),
            String::new(),
            String::new(),
            why.clone(),
        ]);
    }
    Table::text(&columns, rows)
}

/// `EXPLAIN …`.
pub fn explain(dag: &PhysicalDag) -> Table {
    Table::text(
        &EXPLAIN_COLUMNS,
        explain_rows(dag).into_iter().map(|r| r.to_vec()).collect(),
    )
}

/// Schemas of statements that return rows, for Describe in the extended protocol.
/// A row of `SHOW CLUSTER`.
pub struct ClusterRow {
    pub kind: &'static str,
    pub id: String,
    pub address: String,
    pub role: String,
    pub health: String,
    pub term: Option<i64>,
    pub leader: Option<String>,
    pub detail: String,
}

impl ClusterRow {
    pub fn master(id: &str, address: &str, role: &str, health: &str) -> ClusterRow {
        ClusterRow {
            kind: "master",
            id: id.into(),
            address: address.into(),
            role: role.into(),
            health: health.into(),
            term: None,
            leader: None,
            detail: String::new(),
        }
    }

    pub fn worker(id: &str, address: &str, health: &str, detail: &str) -> ClusterRow {
        ClusterRow {
            kind: "worker",
            id: id.into(),
            address: address.into(),
            role: "worker".into(),
            health: health.into(),
            term: None,
            leader: None,
            detail: detail.into(),
        }
    }
}

/// `SHOW CLUSTER`: one row per master and worker.
pub fn cluster(rows: &[ClusterRow]) -> Table {
    let text = |c: &str| Field::new(c, DataType::Utf8, true);
    let schema = Arc::new(Schema::new(vec![
        text("kind"),
        text("id"),
        text("address"),
        text("role"),
        text("health"),
        Field::new("term", DataType::Int64, true),
        text("leader"),
        text("detail"),
    ]));
    let rows = rows
        .iter()
        .map(|r| {
            vec![
                Cell::Text(Some(r.kind.to_string())),
                Cell::Text(Some(r.id.clone())),
                Cell::Text(Some(r.address.clone())),
                Cell::Text(Some(r.role.clone())),
                Cell::Text(Some(r.health.clone())),
                Cell::Int(r.term),
                Cell::Text(r.leader.clone()),
                Cell::Text(Some(r.detail.clone())),
            ]
        })
        .collect();
    Table { schema, rows }
}

pub fn schema_of(table: &str) -> SchemaRef {
    match table {
        "cluster" => cluster(&[]).schema,
        "streams" => streams(&[]).schema,
        "pipelines" => pipelines(&[]).schema,
        "materialized_views" => materialized_views(&[]).schema,
        "checkpoints" => checkpoints(&PipelineInfo::default()).schema,
        "explain_alter" => alter_diff(&DagDiff::default()).schema,
        "history" => history_schema(),
        "explain" => explain(&PhysicalDag::new(vec![], vec![])).schema,
        "describe" => Table::text(&["column_name", "data_type", "is_nullable", "watermark"], vec![]).schema,
        "show_all" => Table::text(&["name", "setting", "description"], vec![]).schema,
        other => Table::text(&[other], vec![]).schema,
    }
}
