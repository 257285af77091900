//! `view`: the sink of a materialized view (`CREATE MATERIALIZED VIEW`).
//! Only the engine builds it: CREATE SINK cannot name it.
//!
//! It keeps the query's current result — a changelog applied: `+I`/`+U`
//! add a row, `-U`/`-D` take one back; an append-only query's rows only
//! add — and publishes it to the process's [`Views`] at every checkpoint
//! barrier and at the end of a bounded input, so a reader sees the result
//! as of one barrier. The rows are its checkpointed state: a restarted
//! pipeline publishes what its checkpoint held before it reads on.
//!
//! Rows are counted, not keyed: a result is a multiset, and a retraction
//! carries the whole row it takes back. `'rows.max'` (default 10 M) bounds
//! them; a result past it fails the pipeline with `53400`.

use super::{Connector, OptionSet, option};
use crate::data_plane::Connectors;
use crate::format::change_ops;
use crate::options::u64_option;
use crate::views::{PublishedView, Views};
use arrow::array::ArrayRef;
use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use arrow::row::{OwnedRow, RowConverter, SortField};
use async_trait::async_trait;
use sluice_dataflow::checkpoint::TaskState;
use sluice_dataflow::deploy::InstanceContext;
use sluice_dataflow::{Operator, OperatorContext};
use sluice_plan::SinkSpec;
use sluice_types::{Error, Result, SqlCode, Watermark, now_ms};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub struct View;

/// The option naming the view (set by the engine, not by users).
pub const VIEW_NAME_OPTION: &str = "view.name";
/// The option bounding a view's rows.
pub const ROWS_MAX_OPTION: &str = "rows.max";
/// Rows a view holds by default.
pub const VIEW_ROWS_MAX_DEFAULT: u64 = 10_000_000;
/// The checkpoint interval of a view that does not set one: how stale
/// its rows may be (RisingWave's barrier interval is 1 s too).
pub const VIEW_CHECKPOINT_INTERVAL_DEFAULT: &str = "1s";

/// What `CREATE MATERIALIZED VIEW … WITH (…)` takes.
static VIEW_OPTIONS: OptionSet = OptionSet::keys(&[
    option(
        ROWS_MAX_OPTION,
        "rows the view holds (default 10 000 000); a result past it fails the pipeline with 53400",
    ),
    option(
        "checkpoint.interval",
        "how often the view's rows are published and checkpointed (a duration; default 1s; not 'off')",
    ),
    crate::options::CHECKPOINT_DIR,
    crate::options::PLACEMENT,
]);

/// Checks the options of `CREATE MATERIALIZED VIEW … WITH (…)`: the keys
/// (the error lists the known ones), `'rows.max'` at least 1, and a
/// checkpoint interval that is not `'off'`.
pub fn validate(options: &BTreeMap<String, String>) -> Result<()> {
    VIEW_OPTIONS.check("a materialized view", &[], options)?;
    if u64_option(options, ROWS_MAX_OPTION)? == Some(0) {
        return Err(Error::invalid_option(format!("'{ROWS_MAX_OPTION}' must be at least 1")));
    }
    if let Some(dir) = options.get("checkpoint.dir") {
        crate::state_store::split_hdfs_location(dir)?;
    }
    match crate::options::checkpoint_interval(options)? {
        Some(_) => Ok(()),
        None => Err(Error::invalid_option(
            "a materialized view publishes its rows at checkpoints: 'checkpoint.interval' cannot be 'off'",
        )),
    }
}

/// Where a view's rows are in its checkpoint.
const ROWS_KEY: &str = "rows";

impl Connector for View {
    fn name(&self) -> &'static str {
        "view"
    }

    /// A view is an updating query's natural home.
    fn sink_accepts_changelog(&self, _options: &BTreeMap<String, String>) -> bool {
        true
    }

    fn sink(
        &self,
        connectors: &Connectors,
        spec: &SinkSpec,
        schema: &SchemaRef,
        _ctx: &InstanceContext,
    ) -> Result<Box<dyn Operator>> {
        let name = spec
            .options
            .get(VIEW_NAME_OPTION)
            .ok_or_else(|| Error::internal("a view sink without its view's name"))?;
        let rows_max = u64_option(&spec.options, ROWS_MAX_OPTION)?.unwrap_or(VIEW_ROWS_MAX_DEFAULT);
        Ok(Box::new(ViewSink::new(
            name,
            schema,
            spec.changelog,
            rows_max,
            connectors.views.clone(),
        )?))
    }
}

/// Keeps a view's current rows and publishes them at barriers.
pub struct ViewSink {
    name: String,
    /// The view's columns: the input's without the op column.
    schema: SchemaRef,
    changelog: bool,
    converter: RowConverter,
    /// Each distinct row and how many times the result holds it.
    rows: HashMap<OwnedRow, u64>,
    /// The sum of the counts.
    len: u64,
    rows_max: u64,
    /// What it last published (`None`: changed since).
    published: Option<RecordBatch>,
    views: Arc<Views>,
}

impl ViewSink {
    pub fn new(name: &str, input: &SchemaRef, changelog: bool, rows_max: u64, views: Arc<Views>) -> Result<Self> {
        let skip = usize::from(changelog);
        let schema = Arc::new(Schema::new(input.fields()[skip..].to_vec()));
        let converter = RowConverter::new(
            schema
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        Ok(ViewSink {
            name: name.to_string(),
            schema,
            changelog,
            converter,
            rows: HashMap::new(),
            len: 0,
            rows_max,
            published: None,
            views,
        })
    }

    /// Applies a batch of the query's output.
    fn apply(&mut self, batch: &RecordBatch) -> Result<()> {
        let skip = usize::from(self.changelog);
        let ops = if self.changelog { Some(change_ops(batch)?) } else { None };
        let rows = self.converter.convert_columns(&batch.columns()[skip..])?;
        for (i, row) in rows.iter().enumerate() {
            let retracts = ops.as_ref().is_some_and(|o| o[i].retracts());
            if retracts {
                // A row never added cannot be taken back; an upstream that
                // retracts what it did not emit is a bug, not a reason to
                // lose the view.
                let key = row.owned();
                if let Some(count) = self.rows.get_mut(&key) {
                    *count -= 1;
                    self.len -= 1;
                    if *count == 0 {
                        self.rows.remove(&key);
                    }
                } else {
                    tracing::warn!(view = %self.name, "a retraction of a row the view does not hold was ignored");
                }
            } else {
                if self.len >= self.rows_max {
                    return Err(Error::user(
                        SqlCode::ConfigurationLimitExceeded,
                        format!(
                            "materialized view {} would hold more than {} rows ('{ROWS_MAX_OPTION}'); bound its query or raise the limit",
                            self.name, self.rows_max
                        ),
                    ));
                }
                *self.rows.entry(row.owned()).or_insert(0) += 1;
                self.len += 1;
            }
        }
        self.published = None;
        Ok(())
    }

    /// The current rows as one batch.
    fn current(&self) -> Result<RecordBatch> {
        let repeated = self
            .rows
            .iter()
            .flat_map(|(row, n)| std::iter::repeat_n(row.row(), *n as usize));
        let columns: Vec<ArrayRef> = self.converter.convert_rows(repeated)?;
        let options = RecordBatchOptions::new().with_row_count(Some(self.len as usize));
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &options,
        )?)
    }

    /// Publishes the current rows if they changed since it last did, and
    /// returns them.
    fn publish(&mut self, checkpoint: Option<u64>) -> Result<RecordBatch> {
        if let Some(rows) = &self.published {
            return Ok(rows.clone());
        }
        let rows = self.current()?;
        self.views.publish(
            &self.name,
            PublishedView {
                schema: self.schema.clone(),
                rows: rows.clone(),
                checkpoint,
                published_ms: now_ms(),
            },
        );
        self.published = Some(rows.clone());
        Ok(rows)
    }
}

#[async_trait]
impl Operator for ViewSink {
    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.apply(&batch)?;
        ctx.metrics
            .state_groups
            .store(self.rows.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    async fn process_watermark(&mut self, _w: Watermark, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        Ok(())
    }

    /// The barrier: readers see the rows as of here from now on, and the
    /// checkpoint keeps them.
    async fn snapshot(&mut self, checkpoint_id: u64) -> Result<TaskState> {
        let rows = self.publish(Some(checkpoint_id))?;
        let mut state = TaskState::default();
        state.put_batch(ROWS_KEY, rows);
        Ok(state)
    }

    /// The checkpoint's rows (none on a fresh start), published at once.
    async fn restore(&mut self, checkpoint: Option<(u64, TaskState)>) -> Result<()> {
        self.rows.clear();
        self.len = 0;
        if let Some(batch) = TaskState::restored_rows(checkpoint, ROWS_KEY)? {
            if batch.schema().fields() != self.schema.fields() {
                return Err(Error::internal(format!(
                    "the checkpoint of view {} has other columns than the view",
                    self.name
                )));
            }
            let rows = self.converter.convert_columns(batch.columns())?;
            for row in rows.iter() {
                *self.rows.entry(row.owned()).or_insert(0) += 1;
                self.len += 1;
            }
        }
        self.published = None;
        self.publish(None).map(|_| ())
    }

    async fn process_end_of_input(&mut self, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.publish(None).map(|_| ())
    }
}

#[cfg(test)]
mod tests;
