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
//! Rows are not keyed: a result is a multiset, and a retraction carries
//! the whole row it takes back. They stay in the batches they arrived in,
//! with a bit a row for whether the result still holds them, so a barrier
//! publishes and checkpoints one bit a row, not the rows ([`ViewSink`]).
//! `'rows.max'` (default 10 M) bounds the result; a result past it fails
//! the pipeline with `53400`. Retracted rows are compacted away once they
//! outnumber the live ones, so the rows held stay under twice the bound
//! (plus 64 Ki).

use super::{Connector, OptionSet, option};
use crate::data_plane::Connectors;
use crate::format::change_ops;
use crate::options::u64_option;
use crate::views::{PublishedView, Views};
use arrow::array::{BooleanArray, BooleanBufferBuilder, UInt32Array};
use arrow::compute::{concat_batches, filter_record_batch, take};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{Row, RowConverter, SortField};
use async_trait::async_trait;
use sluice_dataflow::checkpoint::TaskState;
use sluice_dataflow::checkpoint::incremental::{Held, Increment};
use sluice_dataflow::deploy::InstanceContext;
use sluice_dataflow::{Operator, OperatorContext};
use sluice_plan::SinkSpec;
use sluice_types::{Error, PipelineId, Result, SqlCode, Watermark, now_ms};
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
        ctx: &InstanceContext,
    ) -> Result<Box<dyn Operator>> {
        let name = spec
            .options
            .get(VIEW_NAME_OPTION)
            .ok_or_else(|| Error::internal("a view sink without its view's name"))?;
        let rows_max = u64_option(&spec.options, ROWS_MAX_OPTION)?.unwrap_or(VIEW_ROWS_MAX_DEFAULT);
        Ok(Box::new(
            ViewSink::new(name, schema, spec.changelog, rows_max, connectors.views.clone())?.published_by(ctx.pipeline),
        ))
    }
}

/// A batch of the view's rows as they arrived, and which of them are
/// still in the result.
struct Stored {
    /// Its number: batches are numbered in arrival order.
    number: u64,
    /// The view's columns.
    batch: RecordBatch,
    /// Which rows are still in the result (a retraction clears a bit).
    live: BooleanBufferBuilder,
    /// How many bits are set.
    live_rows: usize,
    /// The checkpoint that wrote it in full (later ones reference it).
    written_in: Option<u64>,
}

/// The rows added since the last barrier: the pieces of the next stored
/// batch, sealed into one at the barrier (or once it holds
/// [`COMPACT_BATCH_ROWS`]), so a view fed small batches holds a batch per
/// barrier, not one per input batch.
struct Tail {
    number: u64,
    pieces: Vec<RecordBatch>,
    rows: usize,
    live: BooleanBufferBuilder,
    live_rows: usize,
}

/// Where a row of the view is: a stored batch's number and a row in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    batch: u64,
    row: u32,
}

/// The places of one distinct row: the first inline (most rows of a
/// result are distinct), any duplicates beside it.
struct Places {
    first: Place,
    more: Vec<Place>,
}

/// Dead rows (retracted, still in their batches) are compacted away once
/// they outnumber the live ones and are at least this many: the rows held
/// stay under twice the result plus this.
const COMPACT_DEAD_MIN: usize = 65_536;
/// Rows per batch after a compaction.
const COMPACT_BATCH_ROWS: usize = 65_536;

/// Keeps a view's current rows and publishes them at barriers.
///
/// The rows stay in the batches they arrived in (a row added is appended
/// in its batch, never copied into a per-row structure of its own) with a
/// bit a row saying whether the result still holds it; a retraction finds
/// one place of its row through an index of the distinct rows and clears
/// that bit. So a barrier costs one bit a row — the publication shares the
/// batches and copies the bits, and the checkpoint is incremental
/// ([`sluice_dataflow::checkpoint::incremental`]: a batch is written once,
/// later checkpoints reference it with its bits) — not a copy of the
/// result. Batches whose rows are all retracted are dropped; dead rows are
/// compacted away once they outnumber the live ones.
pub struct ViewSink {
    name: String,
    /// The view's columns: the input's without the op column.
    schema: SchemaRef,
    /// The view's columns plus the liveness column (its snapshot batches).
    snapshot_schema: SchemaRef,
    changelog: bool,
    converter: RowConverter,
    /// The stored batches, in arrival order (ascending numbers).
    batches: Vec<Stored>,
    /// The rows added since the last barrier (numbered after `batches`).
    tail: Option<Tail>,
    next_number: u64,
    /// Each distinct row of the result (its row-format bytes) and where
    /// it is.
    index: HashMap<Box<[u8]>, Places>,
    /// The rows in the result.
    len: u64,
    /// Retracted rows still in their batches.
    dead: usize,
    rows_max: u64,
    /// Whether the rows changed since it last published.
    changed: bool,
    views: Arc<Views>,
    /// The pipeline whose rows these are (tags each publication).
    pipeline: PipelineId,
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
        let mut fields = schema.fields().to_vec();
        fields.push(Arc::new(Field::new(LIVE_COLUMN, DataType::Boolean, false)));
        Ok(ViewSink {
            name: name.to_string(),
            snapshot_schema: Arc::new(Schema::new(fields)),
            schema,
            changelog,
            converter,
            batches: Vec::new(),
            tail: None,
            next_number: 0,
            index: HashMap::new(),
            len: 0,
            dead: 0,
            rows_max,
            changed: true,
            views,
            pipeline: PipelineId(0),
        })
    }

    /// Publishes as pipeline `pipeline`'s rows (see [`Views::get_of`]).
    pub fn published_by(mut self, pipeline: PipelineId) -> Self {
        self.pipeline = pipeline;
        self
    }

    /// Applies a batch of the query's output, row by row in order (a row
    /// added and taken back in one batch is gone).
    pub fn apply(&mut self, batch: &RecordBatch) -> Result<()> {
        let skip = usize::from(self.changelog);
        let ops = if self.changelog { Some(change_ops(batch)?) } else { None };
        let retracts = |i: usize| ops.as_ref().is_some_and(|o| o[i].retracts());
        let columns = &batch.columns()[skip..];
        let rows = self.converter.convert_columns(columns)?;
        // The added rows, stored before any of them is indexed (a later
        // row of this batch may take one back).
        let added: Vec<u32> = (0..batch.num_rows() as u32)
            .filter(|i| !retracts(*i as usize))
            .collect();
        let tail = self.tail.get_or_insert_with(|| {
            let number = self.next_number;
            self.next_number += 1;
            Tail {
                number,
                pieces: Vec::new(),
                rows: 0,
                live: BooleanBufferBuilder::new(0),
                live_rows: 0,
            }
        });
        let (number, base) = (tail.number, tail.rows as u32);
        if !added.is_empty() {
            let values = if added.len() == batch.num_rows() {
                RecordBatch::try_new(self.schema.clone(), columns.to_vec())?
            } else {
                let indices = UInt32Array::from(added.clone());
                let taken = columns
                    .iter()
                    .map(|c| take(c, &indices, None))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                RecordBatch::try_new(self.schema.clone(), taken)?
            };
            tail.rows += values.num_rows();
            tail.live.append_n(values.num_rows(), true);
            tail.live_rows += values.num_rows();
            tail.pieces.push(values);
        }
        let mut next_added = 0u32;
        for (i, row) in rows.iter().enumerate() {
            if retracts(i) {
                self.retract(row);
                continue;
            }
            if self.len >= self.rows_max {
                // The rows before this one stay applied; this one and the
                // rest of the batch's additions are not in the result.
                let tail = self.tail.as_mut().expect("the added rows are stored");
                for row in next_added as usize..added.len() {
                    tail.live.set_bit(base as usize + row, false);
                }
                let unapplied = added.len() - next_added as usize;
                tail.live_rows -= unapplied;
                self.dead += unapplied;
                self.changed = true;
                return Err(Error::user(
                    SqlCode::ConfigurationLimitExceeded,
                    format!(
                        "materialized view {} would hold more than {} rows ('{ROWS_MAX_OPTION}'); bound its query or raise the limit",
                        self.name, self.rows_max
                    ),
                ));
            }
            let place = Place {
                batch: number,
                row: base + next_added,
            };
            next_added += 1;
            self.index_row(row, place);
            self.len += 1;
        }
        self.changed = true;
        if self.tail.as_ref().is_some_and(|t| t.rows >= COMPACT_BATCH_ROWS) {
            self.seal()?;
        }
        self.drop_empty();
        if self.dead > COMPACT_DEAD_MIN && self.dead as u64 > self.len {
            self.compact()?;
        }
        Ok(())
    }

    /// Turns the tail into a stored batch.
    fn seal(&mut self) -> Result<()> {
        let Some(tail) = self.tail.take() else {
            return Ok(());
        };
        if tail.live_rows == 0 {
            self.dead -= tail.rows - tail.live_rows;
            return Ok(());
        }
        let batch = match tail.pieces.len() {
            1 => tail.pieces.into_iter().next().expect("one piece"),
            _ => concat_batches(&self.schema, &tail.pieces)?,
        };
        self.batches.push(Stored {
            number: tail.number,
            batch,
            live: tail.live,
            live_rows: tail.live_rows,
            written_in: None,
        });
        Ok(())
    }

    /// Records that `row` of the result is at `place`.
    fn index_row(&mut self, row: Row<'_>, place: Place) {
        match self.index.get_mut(row.as_ref()) {
            Some(places) => places.more.push(place),
            None => {
                self.index.insert(
                    row.as_ref().into(),
                    Places {
                        first: place,
                        more: Vec::new(),
                    },
                );
            }
        }
    }

    /// Takes one instance of `row` out of the result.
    fn retract(&mut self, row: Row<'_>) {
        // A row never added cannot be taken back; an upstream that
        // retracts what it did not emit is a bug, not a reason to lose
        // the view.
        let Some(places) = self.index.get_mut(row.as_ref()) else {
            tracing::warn!(view = %self.name, "a retraction of a row the view does not hold was ignored");
            return;
        };
        let place = match places.more.pop() {
            Some(place) => place,
            None => {
                let place = places.first;
                self.index.remove(row.as_ref());
                place
            }
        };
        let (live, live_rows) = match self.tail.as_mut() {
            Some(t) if t.number == place.batch => (&mut t.live, &mut t.live_rows),
            _ => {
                let at = self
                    .batches
                    .binary_search_by_key(&place.batch, |b| b.number)
                    .expect("an indexed row's batch is stored");
                let b = &mut self.batches[at];
                (&mut b.live, &mut b.live_rows)
            }
        };
        live.set_bit(place.row as usize, false);
        *live_rows -= 1;
        self.len -= 1;
        self.dead += 1;
    }

    /// Drops the batches none of whose rows is in the result.
    fn drop_empty(&mut self) {
        let dead = &mut self.dead;
        self.batches.retain(|b| {
            if b.live_rows == 0 {
                *dead -= b.batch.num_rows();
            }
            b.live_rows > 0
        });
    }

    /// Copies the live rows into new batches and moves the index to them.
    fn compact(&mut self) -> Result<()> {
        self.seal()?;
        // Each old batch's first new place and its rows' ranks among its
        // live ones.
        let first_number = self.next_number;
        let old = std::mem::take(&mut self.batches);
        let mut start: HashMap<u64, (usize, Vec<u32>)> = HashMap::with_capacity(old.len());
        let mut offset = 0usize;
        // The live rows, copied a batch at a time into new batches of
        // COMPACT_BATCH_ROWS (each its own buffers: a new batch dropped
        // later frees its memory).
        let mut chunk: Vec<RecordBatch> = Vec::new();
        let mut chunk_rows = 0;
        for b in old {
            let live = b.live.finish_cloned();
            let mut rank = 0u32;
            let ranks = live
                .iter()
                .map(|l| {
                    let r = rank;
                    rank += u32::from(l);
                    r
                })
                .collect();
            start.insert(b.number, (offset, ranks));
            offset += b.live_rows;
            let mut rows = filter_record_batch(&b.batch, &BooleanArray::new(live, None))?;
            drop(b);
            while rows.num_rows() > 0 {
                let n = (COMPACT_BATCH_ROWS - chunk_rows).min(rows.num_rows());
                chunk.push(rows.slice(0, n));
                chunk_rows += n;
                rows = rows.slice(n, rows.num_rows() - n);
                if chunk_rows == COMPACT_BATCH_ROWS {
                    self.push_compacted(&std::mem::take(&mut chunk))?;
                    chunk_rows = 0;
                }
            }
        }
        if chunk_rows > 0 {
            self.push_compacted(&chunk)?;
        }
        let new_place = |p: Place| -> Place {
            let (base, ranks) = &start[&p.batch];
            let at = base + ranks[p.row as usize] as usize;
            Place {
                batch: first_number + (at / COMPACT_BATCH_ROWS) as u64,
                row: (at % COMPACT_BATCH_ROWS) as u32,
            }
        };
        for places in self.index.values_mut() {
            places.first = new_place(places.first);
            for p in &mut places.more {
                *p = new_place(*p);
            }
        }
        self.dead = 0;
        Ok(())
    }

    /// Stores `pieces` (live rows) as one new batch.
    fn push_compacted(&mut self, pieces: &[RecordBatch]) -> Result<()> {
        let batch = concat_batches(&self.schema, pieces)?;
        let n = batch.num_rows();
        let mut live = BooleanBufferBuilder::new(n);
        live.append_n(n, true);
        self.batches.push(Stored {
            number: self.next_number,
            batch,
            live,
            live_rows: n,
            written_in: None,
        });
        self.next_number += 1;
        Ok(())
    }

    /// Publishes the current rows if they changed since it last did: the
    /// stored batches (shared) and a copy of their bits.
    fn publish(&mut self, checkpoint: Option<u64>) -> Result<()> {
        if !self.changed {
            return Ok(());
        }
        self.seal()?;
        let parts = self
            .batches
            .iter()
            .map(|b| {
                let live = (b.live_rows < b.batch.num_rows()).then(|| b.live.finish_cloned());
                (b.batch.clone(), live)
            })
            .collect();
        self.views.publish(
            &self.name,
            self.pipeline,
            PublishedView::from_parts(self.schema.clone(), parts, checkpoint, now_ms()),
        );
        self.changed = false;
        Ok(())
    }

    /// The checkpoint's share of the rows: the batches stored since the
    /// last snapshot in full (with their bits as a column), the others as
    /// references with their bits now.
    fn increment(&mut self, checkpoint: u64) -> Result<Increment> {
        self.seal()?;
        let mut inc = Increment::default();
        for b in &mut self.batches {
            let live = b.live.finish_cloned();
            match b.written_in {
                Some(written) => inc.held.push(Held {
                    checkpoint: written,
                    number: b.number,
                    live,
                }),
                None => {
                    let mut columns = b.batch.columns().to_vec();
                    columns.push(Arc::new(BooleanArray::new(live, None)));
                    inc.new
                        .push((b.number, RecordBatch::try_new(self.snapshot_schema.clone(), columns)?));
                    b.written_in = Some(checkpoint);
                }
            }
        }
        Ok(inc)
    }

    /// Stores `batch` (the view's columns) as restored, every row live.
    fn restore_batch(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let number = self.next_number;
        self.next_number += 1;
        let rows = self.converter.convert_columns(batch.columns())?;
        for (i, row) in rows.iter().enumerate() {
            let place = Place {
                batch: number,
                row: i as u32,
            };
            self.index_row(row, place);
        }
        self.len += batch.num_rows() as u64;
        let mut live = BooleanBufferBuilder::new(batch.num_rows());
        live.append_n(batch.num_rows(), true);
        self.batches.push(Stored {
            number,
            live_rows: batch.num_rows(),
            batch,
            live,
            written_in: None,
        });
        Ok(())
    }
}

/// The liveness column of a view's snapshot batches.
const LIVE_COLUMN: &str = "__sluice_view_live";

#[async_trait]
impl Operator for ViewSink {
    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.apply(&batch)?;
        ctx.metrics
            .state_groups
            .store(self.index.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    async fn process_watermark(&mut self, _w: Watermark, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        Ok(())
    }

    /// The barrier: readers see the rows as of here from now on, and the
    /// checkpoint keeps them (incrementally).
    async fn snapshot(&mut self, checkpoint_id: u64) -> Result<TaskState> {
        self.publish(Some(checkpoint_id))?;
        let mut state = TaskState::default();
        let live_column = self.schema.fields().len();
        let inc = self.increment(checkpoint_id)?;
        // No key: a view's sink is one instance.
        state.put_incremental(ROWS_KEY, Vec::new(), live_column, inc)?;
        Ok(state)
    }

    /// The checkpoint's rows (none on a fresh start), published at once.
    async fn restore(&mut self, checkpoint: Option<(u64, TaskState)>) -> Result<()> {
        self.batches.clear();
        self.tail = None;
        self.index.clear();
        self.len = 0;
        self.dead = 0;
        if let Some((_, mut state)) = checkpoint {
            // A checkpoint read from its files comes resolved; a snapshot
            // handed over directly may not, and then must reference nothing.
            sluice_dataflow::checkpoint::incremental::resolve(&mut state, &Default::default())?;
            let view_columns = self.schema.fields().len();
            for stored in state.rows(ROWS_KEY) {
                let fields = stored.schema().fields().clone();
                // Incremental snapshots carry a liveness column; those from
                // before them are the rows alone.
                let live = match fields.last() {
                    Some(f) if f.name() == LIVE_COLUMN && fields.len() == view_columns + 1 => {
                        Some(stored.column(view_columns).clone())
                    }
                    _ => None,
                };
                let values = stored.project(&(0..view_columns.min(fields.len())).collect::<Vec<_>>())?;
                if values.schema().fields() != self.schema.fields() {
                    return Err(Error::internal(format!(
                        "the checkpoint of view {} has other columns than the view",
                        self.name
                    )));
                }
                let values = match live {
                    Some(live) => {
                        let live = live
                            .as_any()
                            .downcast_ref::<BooleanArray>()
                            .ok_or_else(|| Error::internal("a view snapshot's liveness is not boolean"))?;
                        filter_record_batch(&values, live)?
                    }
                    None => values,
                };
                self.restore_batch(values)?;
            }
        }
        self.changed = true;
        self.publish(None)
    }

    async fn process_end_of_input(&mut self, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.publish(None)
    }
}

#[cfg(test)]
mod tests;
