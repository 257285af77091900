//! Inner equi-join of two streams: a symmetric hash join.
//!
//! Each side keeps the rows it has seen in the batches they arrived in
//! (immutable, shared with the output and with snapshots), numbered in
//! arrival order. A hash table maps each join key to its newest stored row,
//! and every stored row points to the previous row with the same key, so a
//! key's rows form a chain from newest to oldest: no per-key allocation;
//! short keys are kept in the index entry, longer ones are read from the
//! stored batches' row-encoded keys. A batch
//! from one side probes the other side's chains, emits the matches (left
//! columns, then right columns; output gathered with `take` and
//! `interleave`, no per-row copies of values) and is then stored.
//!
//! A side that is stored often and probed rarely — a stream joined to a
//! window's results, like Nexmark q7's bids to each window's highest price
//! — drops its index: inserting tens of millions of rows into a large hash
//! table costs a cache miss or two per row, while a rare probe can read
//! every held row's 2-byte hash tag in order instead (skipping batches whose
//! key range excludes the probing keys). Each side weighs the
//! two by what it lately stored and was probed with and switches when the
//! other way is clearly cheaper (`SideState::choose_strategy`); either way
//! a probe finds the same rows in the same order.
//!
//! State is freed by time ([`JoinState::expire`], pure bookkeeping):
//! - a *windowed* join (the keys pair both sides' event-time columns, e.g.
//!   both `window_end`s) frees the rows of a time once the low watermark has
//!   passed it, and drops rows that arrive behind the watermark (late);
//! - an *interval* join (the planner found bounds between the two sides'
//!   event times) frees a side's rows once the low watermark is past them by
//!   that side's interval — no row they could match can still come — and
//!   drops late rows too;
//! - otherwise rows expire `state_ttl_ms` after their event time (measured
//!   against the low watermark) or, when a side has no event time, after
//!   their arrival in processing time (checked on a timer).
//!
//! Expired rows never match (a probe skips rows older than the cutoff) and
//! snapshots leave them out. Memory is freed in arrival order: the oldest
//! stored rows go while they are expired, so a row that arrived out of time
//! order is held until the rows that arrived before it have expired too —
//! held at most as long as the side's disorder, and counted in `rows()`
//! until then. Freeing is done in steps of [`FREE_ROWS_STEP`] rows, one
//! with each message: a window's end (or a processing-time TTL's timer) can
//! expire millions of rows at once, and freeing them in one go would stall
//! the task, and every task waiting for its thread.
//!
//! `state_rows_max` bounds the rows one instance holds over both sides; a
//! batch that would exceed it fails the pipeline with a clear error.

use crate::checkpoint::TaskState;
use crate::operator::{Operator, OperatorContext};
use crate::time::timestamps_ms;
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, UInt32Array};
use arrow::buffer::BooleanBuffer;
use arrow::compute::{interleave, take};
use arrow::datatypes::SchemaRef;
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, Rows, SortField};
use async_trait::async_trait;
use datafusion::common::HashMap;
use hashbrown::{DefaultHashBuilder, HashTable};
use sluice_plan::{JoinSide, JoinSpec};
use sluice_types::{Error, Result, SqlCode, Watermark};
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod tag_ring;
use tag_ring::TagRing;

/// Names of the sides in a snapshot's keys.
const SIDE_NAMES: [&str; 2] = ["left", "right"];

/// Expired rows freed with each message at most (whole stored batches, so
/// a step may free one batch more): a few milliseconds of freeing.
pub const FREE_ROWS_STEP: usize = 1 << 18;

/// Rows gathered into one output batch at most.
pub const OUTPUT_BATCH_ROWS_MAX: usize = 8192;

/// A stored row's number on its side: its batch's number (arrival order,
/// never reused) in the high 40 bits, its row in that batch in the low
/// [`ROW_BITS`], so finding a row's batch is an index, not a search. 2^40
/// batches last centuries at any batch rate.
type Seq = u64;

/// (512 rows in unit tests, so they reach the slicing of larger batches.)
const ROW_BITS: u32 = if cfg!(test) { 9 } else { 24 };

/// Rows of one stored batch at most (larger input batches are stored in
/// slices).
pub const STORED_BATCH_ROWS_MAX: usize = 1 << ROW_BITS;

fn seq(batch: u64, row: usize) -> Seq {
    (batch << ROW_BITS) | row as u64
}

/// The batch number and row of a [`Seq`].
fn split(seq: Seq) -> (u64, usize) {
    (seq >> ROW_BITS, (seq & (STORED_BATCH_ROWS_MAX as u64 - 1)) as usize)
}

/// "No previous row with this key."
const NO_ROW: Seq = Seq::MAX;

/// One matched stored row: its batch (by number) and its row in that batch.
#[derive(Debug, Clone, Copy)]
struct Entry {
    batch: u64,
    row: u32,
}

/// A batch as it arrived (immutable, shared with the output and with
/// snapshots) and, per row, what the index needs.
struct StoredBatch {
    /// The batch's number on its side (arrival order).
    number: u64,
    batch: RecordBatch,
    /// Row-encoded join keys (compared on lookups).
    keys: Rows,
    /// Row times (event or arrival), kept for expiry and snapshots.
    times: Int64Array,
    /// Rows that were stored (a row with a null key or that arrived late
    /// is not).
    stored: BooleanBuffer,
    /// The previous stored row with the same key, or [`NO_ROW`] (empty
    /// while the side is scanned, not indexed).
    prev: Vec<Seq>,
    /// Where the batch's rows' tags start in the side's `tags` (counted
    /// from the side's first row ever; see [`SideState::tags`]).
    first_tag: u64,
    /// The earliest and latest times of a stored row.
    min_time: i64,
    max_time: i64,
    /// The batch as a snapshot holds it while every stored row lives (its
    /// columns, times and `stored`; shared arrays): built once when stored,
    /// so a checkpoint of tens of thousands of batches does not stall the
    /// task assembling them.
    snapshot: RecordBatch,
}

/// Shards of a side's key index: a table grows (rehashing everything it
/// holds, at once) one shard at a time, so the pause is 1/256 of the index.
const INDEX_SHARDS: usize = 256;

/// The shard of a key's hash: bits 32..40 (hashbrown picks buckets from the
/// low bits and tags from the top 7, so both stay spread within a shard).
fn shard(hash: u64) -> usize {
    (hash >> 32) as usize % INDEX_SHARDS
}

/// Keys up to this many bytes (row-encoded: a 64-bit key is 9) are kept in
/// the index itself, so a lookup compares them without reading the stored
/// batch, whose memory is cold in a large state.
const INLINE_KEY_MAX: usize = 15;

/// A key's newest stored row. Once that row is freed (so are all older rows
/// of the key) the head is stale: it matches nothing and is removed by the
/// next sweep of its shard.
struct Head {
    hash: u64,
    newest: Seq,
    /// The key's bytes and, last, their length; `NOT_INLINE` when longer
    /// than [`INLINE_KEY_MAX`].
    inline: [u8; INLINE_KEY_MAX + 1],
}

const NOT_INLINE: u8 = u8::MAX;

impl Head {
    fn new(hash: u64, newest: Seq, key: &[u8]) -> Head {
        let mut inline = [0; INLINE_KEY_MAX + 1];
        if key.len() <= INLINE_KEY_MAX {
            inline[..key.len()].copy_from_slice(key);
            inline[INLINE_KEY_MAX] = key.len() as u8;
        } else {
            inline[INLINE_KEY_MAX] = NOT_INLINE;
        }
        Head { hash, newest, inline }
    }

    /// Whether the head's key is `key`, when the head holds its key.
    fn inline_eq(&self, key: &[u8]) -> Option<bool> {
        match self.inline[INLINE_KEY_MAX] {
            NOT_INLINE => None,
            len => Some(&self.inline[..usize::from(len)] == key),
        }
    }
}

/// One side's rows: stored batches in arrival order and the key index.
struct SideState {
    /// Key → newest stored row, in [`INDEX_SHARDS`] shards.
    index: Vec<HashTable<Head>>,
    batches: VecDeque<StoredBatch>,
    /// Rows of the front batch already freed.
    freed: usize,
    /// Number of the next batch stored.
    next: u64,
    /// Stored rows held (freed ones excluded).
    rows: usize,
    /// Index entries a sweep may visit: earned by freeing rows (two per
    /// row), so sweeping costs O(freed rows) and stale heads stay fewer
    /// than the live ones.
    sweep_budget: usize,
    /// The shard the next sweep visits.
    sweep_next: usize,
    /// The side's schema plus the snapshot columns (once a batch came).
    snapshot_schema: Option<SchemaRef>,
    /// Whether snapshots carry the rows' times: only when they are
    /// arrival times; event times are read back from the batch's own
    /// event-time column (8 bytes a row less in every checkpoint).
    snapshot_times: bool,
    /// Whether the key index is kept; otherwise probes scan the stored
    /// rows' hash tags (see [`SideState::choose_strategy`]).
    indexed: bool,
    /// While scanned: every held batch's rows' tags, in arrival order, in
    /// recycled chunks of 64 Ki, so a scan reads long runs of memory (not
    /// tens of thousands of small arrays) and growing never copies. Empty
    /// while indexed.
    tags: TagRing,
    /// While scanned: one [`Zone`] per held batch, in the same order.
    zones: VecDeque<Zone>,
    /// Rows stored and rows a probe scanned (or would have scanned) lately,
    /// halved every [`STRATEGY_WINDOW_ROWS`] stored rows.
    stored_lately: u64,
    scanned_lately: u64,
}

/// What indexing a stored row costs, in scanned rows: an insert into a
/// large index is a cache miss or two; a scan reads 2 bytes a row in order.
const INDEX_ROW_COST: u64 = 64;

/// Stored rows between strategy decisions (and the halving of the costs).
const STRATEGY_WINDOW_ROWS: u64 = if cfg!(test) { 4096 } else { 1 << 20 };

/// A scanned batch's rows in the tag ring and the range of its stored
/// rows' keys, by their first 8 bytes (row-encoded keys sort as the keys
/// do, so a key whose first 8 bytes lie outside the range is in no row of
/// the batch). A scan skips such batches without reading their tags: the
/// highest price of a window, say, is above almost every batch's.
#[derive(Debug, Clone, Copy)]
struct Zone {
    first_tag: u64,
    rows: usize,
    min: u64,
    max: u64,
    /// The latest time of a stored row: a batch all expired is skipped
    /// while it waits to be freed.
    max_time: i64,
}

/// The first 8 bytes of a row-encoded key, big-endian (zero-padded).
fn key_prefix(key: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    let n = key.len().min(8);
    bytes[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(bytes)
}

impl Zone {
    fn of(first_tag: u64, keys: &Rows, max_time: i64, stored: impl Fn(usize) -> bool) -> Zone {
        let (min, max) = (0..keys.num_rows())
            .filter(|r| stored(*r))
            .map(|r| key_prefix(keys.row(r).data()))
            .fold((u64::MAX, 0), |(lo, hi), k| (lo.min(k), hi.max(k)));
        Zone {
            first_tag,
            rows: keys.num_rows(),
            min,
            max,
            max_time,
        }
    }
}

/// 16 bits of a key's hash that scans compare: 2 bytes a row to read
/// (the scan is bound by memory bandwidth); one row in 65 536 matches a
/// tag by chance and has its key compared in vain.
type Tag = u16;

fn tag(hash: u64) -> Tag {
    (hash >> 40) as Tag
}

/// Makes row `seq` the newest of `key` in `index` and returns the key's
/// previous newest row ([`NO_ROW`] for a new key; a stale head's row is
/// freed, so its chain ends there). `key_at` reads a stored row's key, for
/// heads whose key is too long to sit in the index.
fn index_row<'k>(
    index: &mut [HashTable<Head>],
    hash: u64,
    key: &[u8],
    seq: Seq,
    key_at: impl Fn(Seq) -> Option<&'k [u8]>,
) -> Seq {
    let shard = &mut index[shard(hash)];
    let same_key = |h: &Head| h.hash == hash && h.inline_eq(key).unwrap_or_else(|| key_at(h.newest) == Some(key));
    match shard.find_mut(hash, same_key) {
        Some(head) => std::mem::replace(&mut head.newest, seq),
        None => {
            shard.insert_unique(hash, Head::new(hash, seq, key), |h| h.hash);
            NO_ROW
        }
    }
}

/// The batch holding row `seq` and the row in it; `None` once freed.
fn locate(batches: &VecDeque<StoredBatch>, freed: usize, seq: Seq) -> Option<(&StoredBatch, usize)> {
    let (number, row) = split(seq);
    let at = usize::try_from(number.checked_sub(batches.front()?.number)?).ok()?;
    if at == 0 && row < freed {
        return None;
    }
    let b = batches.get(at)?;
    (row < b.batch.num_rows()).then_some((b, row))
}

impl Default for SideState {
    fn default() -> Self {
        SideState {
            index: (0..INDEX_SHARDS).map(|_| HashTable::new()).collect(),
            batches: VecDeque::new(),
            freed: 0,
            next: 0,
            rows: 0,
            sweep_budget: 0,
            sweep_next: 0,
            snapshot_schema: None,
            snapshot_times: true,
            indexed: true,
            tags: TagRing::default(),
            zones: VecDeque::new(),
            stored_lately: 0,
            scanned_lately: 0,
        }
    }
}

impl SideState {
    /// Keys with live rows in the index (stale heads not counted).
    #[cfg(test)]
    fn keys(&self) -> usize {
        let live = |h: &&Head| locate(&self.batches, self.freed, h.newest).is_some();
        self.index.iter().map(|t| t.iter().filter(live).count()).sum()
    }

    /// Switches to scanning (`false`) or indexing (`true`) now.
    #[cfg(test)]
    fn force_strategy(&mut self, indexed: bool, hasher: &DefaultHashBuilder) {
        match (self.indexed, indexed) {
            (false, true) => self.build_index(hasher),
            (true, false) => self.drop_index(hasher),
            _ => {}
        }
    }

    /// Index entries, stale ones included.
    #[cfg(test)]
    fn index_len(&self) -> usize {
        self.index.iter().map(HashTable::len).sum()
    }

    /// The stored batch numbered `number`.
    fn batch(&self, number: u64) -> Option<&StoredBatch> {
        let at = usize::try_from(number.checked_sub(self.batches.front()?.number)?).ok()?;
        self.batches.get(at)
    }

    /// Appends `key`'s stored rows that have not expired (`time >= cutoff`)
    /// to `out`, oldest first, each paired with `probe_row`.
    fn probe(&self, key: &[u8], hash: u64, cutoff: i64, probe_row: u32, out: &mut Vec<(u32, Entry)>) {
        let (batches, freed) = (&self.batches, self.freed);
        let same_key = |h: &Head| {
            h.hash == hash
                && h.inline_eq(key).unwrap_or_else(|| {
                    locate(batches, freed, h.newest).is_some_and(|(b, r)| b.keys.row(r).data() == key)
                })
        };
        let Some(head) = self.index[shard(hash)].find(hash, same_key) else {
            return;
        };
        let start = out.len();
        let mut seq = head.newest;
        while let Some((b, r)) = locate(batches, freed, seq) {
            if b.times.value(r) >= cutoff {
                out.push((
                    probe_row,
                    Entry {
                        batch: b.number,
                        row: r as u32,
                    },
                ));
            }
            seq = b.prev[r];
        }
        out[start..].reverse();
    }

    /// Stores `batch` (its `stored` rows, with their keys, hashes and times).
    fn store(
        &mut self,
        batch: &RecordBatch,
        keys: Rows,
        hashes: Vec<u64>,
        times: Vec<i64>,
        stored: &[bool],
        count: usize,
    ) -> Result<()> {
        let number = self.next;
        let n = batch.num_rows();
        debug_assert!(n <= STORED_BATCH_ROWS_MAX, "callers slice larger batches");
        let (min_time, max_time) = (0..n)
            .filter(|r| stored[*r])
            .map(|r| times[r])
            .fold((i64::MAX, i64::MIN), |(lo, hi), t| (lo.min(t), hi.max(t)));
        let mut prev = Vec::new();
        let first_tag = self.tags.end();
        if self.indexed {
            prev = vec![NO_ROW; n];
        } else {
            self.tags.extend(hashes.iter().map(|h| tag(*h)));
            self.zones
                .push_back(Zone::of(first_tag, &keys, max_time, |r| stored[r]));
        }
        let SideState {
            index, batches, freed, ..
        } = self;
        let key_at = |s: Seq| -> Option<&[u8]> {
            match split(s) {
                (b, r) if b == number => Some(keys.row(r).data()),
                _ => locate(batches, *freed, s).map(|(b, r)| b.keys.row(r).data()),
            }
        };
        let indexed = !prev.is_empty();
        for r in (0..n).filter(|r| indexed && stored[*r]) {
            prev[r] = index_row(index, hashes[r], keys.row(r).data(), seq(number, r), key_at);
        }
        let times = Int64Array::from(times);
        let stored = BooleanBuffer::from(stored);
        let schema = self
            .snapshot_schema
            .get_or_insert_with(|| snapshot_schema(&batch.schema(), self.snapshot_times))
            .clone();
        let snapshot = snapshot_batch(schema, batch, self.snapshot_times.then_some(&times), stored.clone())?;
        self.batches.push_back(StoredBatch {
            min_time,
            number,
            batch: batch.clone(),
            keys,
            times,
            stored,
            prev,
            first_tag,
            max_time,
            snapshot,
        });
        self.next = number + 1;
        self.rows += count;
        self.stored_lately += count as u64;
        Ok(())
    }

    /// Frees the oldest rows while they are expired (`time < cutoff`) or
    /// were never stored, whole batches until `budget` rows are freed;
    /// returns how many stored rows were freed. Index heads of freed keys
    /// go stale (no lookup per freed row: each would be a cache miss in a
    /// large index) and are swept shard by shard.
    fn free(&mut self, cutoff: i64, budget: usize) -> usize {
        let mut freed_rows = 0;
        let SideState { batches, freed, .. } = self;
        'batches: while let Some(front) = batches.front() {
            if freed_rows >= budget {
                break;
            }
            if *freed == 0 && front.max_time < cutoff {
                // Every stored row of the batch expired (the common case).
                freed_rows += front.stored.count_set_bits();
                batches.pop_front();
                continue;
            }
            while *freed < front.batch.num_rows() {
                let r = *freed;
                if front.stored.value(r) {
                    if front.times.value(r) >= cutoff {
                        break 'batches;
                    }
                    freed_rows += 1;
                }
                *freed += 1;
            }
            batches.pop_front();
            *freed = 0;
        }
        self.rows -= freed_rows;
        if self.indexed {
            self.sweep_budget = self.sweep_budget.saturating_add(2 * freed_rows);
            self.sweep();
        } else {
            // The freed batches' tags leave the ring.
            let keep_from = self.batches.front().map_or(self.tags.end(), |b| b.first_tag);
            self.tags.free_before(keep_from);
            let popped = self.zones.len() - self.batches.len();
            self.zones.drain(..popped);
        }
        freed_rows
    }

    /// Removes stale heads from shards, in turn, while the budget lasts.
    fn sweep(&mut self) {
        let SideState {
            index,
            batches,
            freed,
            sweep_budget,
            sweep_next,
            ..
        } = self;
        for _ in 0..INDEX_SHARDS {
            let shard = &mut index[*sweep_next];
            if shard.len() > *sweep_budget {
                return;
            }
            *sweep_budget -= shard.len();
            shard.retain(|h| locate(batches, *freed, h.newest).is_some());
            *sweep_next = (*sweep_next + 1) % INDEX_SHARDS;
        }
    }

    /// Appends the stored rows that have not expired (`time >= cutoff`)
    /// and whose keys equal a probing row's to `out`: (probing row, stored
    /// row), by probing row, oldest stored row first — what [`Self::probe`]
    /// gives, found by one pass over the rows' hash tags instead of the
    /// index. `probing` are (hash, row) of the probing rows.
    fn scan(&self, keys: &Rows, probing: &[(u64, u32)], cutoff: i64, out: &mut Vec<(u32, Entry)>) {
        let mut wanted: Vec<(Tag, u32)> = probing.iter().map(|(h, r)| (tag(*h), *r)).collect();
        wanted.sort_unstable();
        let start = out.len();
        // The row at ring position `pos` (a tag matched): its batch is the
        // last one starting at or before it.
        let mut candidate = |pos: u64, probe_row: u32| {
            let at = self.batches.partition_point(|b| b.first_tag <= pos);
            let Some(b) = at.checked_sub(1).and_then(|at| self.batches.get(at)) else {
                return;
            };
            // (Rows of the front batch already freed are expired or were
            // never stored: the checks below skip them.)
            let r = (pos - b.first_tag) as usize;
            if b.stored.value(r)
                && b.times.value(r) >= cutoff
                && b.keys.row(r).data() == keys.row(probe_row as usize).data()
            {
                out.push((
                    probe_row,
                    Entry {
                        batch: b.number,
                        row: r as u32,
                    },
                ));
            }
        };
        // The probing keys' range (see `Zone`).
        let (low, high) = probing
            .iter()
            .map(|(_, r)| key_prefix(keys.row(*r as usize).data()))
            .fold((u64::MAX, 0), |(lo, hi), k| (lo.min(k), hi.max(k)));
        let mut scan_tags = |first: u64, tags: &[Tag]| {
            if let [(t, probe_row)] = wanted[..] {
                // One probing key (a window's result): compare 32 tags at a
                // time, which compiles to vector compares.
                for (c, chunk) in tags.chunks(32).enumerate() {
                    if chunk.iter().fold(false, |any, x| any | (*x == t)) {
                        for (i, x) in chunk.iter().enumerate() {
                            if *x == t {
                                candidate(first + (c * 32 + i) as u64, probe_row);
                            }
                        }
                    }
                }
                return;
            }
            for (i, x) in tags.iter().enumerate() {
                let from = wanted.partition_point(|(w, _)| w < x);
                for (_, probe_row) in wanted[from..].iter().take_while(|(w, _)| w == x) {
                    candidate(first + i as u64, *probe_row);
                }
            }
        };
        let wanted_zone = |z: &&Zone| low <= z.max && high >= z.min && z.max_time >= cutoff;
        for z in self.zones.iter().filter(wanted_zone) {
            // The batch's tags, in one run or two (across a chunk's end).
            for (first, run) in self.tags.runs(z.first_tag, z.first_tag + z.rows as u64) {
                scan_tags(first, run);
            }
        }
        out[start..].sort_unstable_by_key(|(p, e)| (*p, e.batch, e.row));
    }

    /// Keeps the key index or scans, whichever costs less lately: an index
    /// costs [`INDEX_ROW_COST`] per stored row, a scan one per held row
    /// per probing batch. A side that is stored often and probed rarely (a
    /// stream joined to a window's results: q7) is scanned; one probed
    /// about as often as it is stored keeps its index. Decided every
    /// [`STRATEGY_WINDOW_ROWS`] stored rows; a scanned side whose probes
    /// turn out dearer than indexing goes back at once (bounded waste).
    fn choose_strategy(&mut self, hasher: &DefaultHashBuilder) {
        let index_cost = self.stored_lately * INDEX_ROW_COST;
        if !self.indexed && self.scanned_lately > index_cost.max(STRATEGY_WINDOW_ROWS * INDEX_ROW_COST) {
            let started = std::time::Instant::now();
            self.build_index(hasher);
            tracing::debug!(rows = self.rows, took = ?started.elapsed(), "join side indexed");
        } else if self.stored_lately >= STRATEGY_WINDOW_ROWS {
            if self.indexed && self.scanned_lately * 4 < index_cost {
                let started = std::time::Instant::now();
                self.drop_index(hasher);
                tracing::debug!(rows = self.rows, took = ?started.elapsed(), "join side scanned");
            }
        } else {
            return;
        }
        // The next decision weighs the recent past half.
        self.stored_lately /= 2;
        self.scanned_lately /= 2;
    }

    /// Indexes the held rows (in arrival order, so chains run newest to
    /// oldest as if they had been indexed when stored).
    fn build_index(&mut self, hasher: &DefaultHashBuilder) {
        let SideState {
            index, batches, freed, ..
        } = self;
        for at in 0..batches.len() {
            let first = if at == 0 { *freed } else { 0 };
            let (done, rest) = batches.make_contiguous().split_at_mut(at);
            let b = &mut rest[0];
            b.prev = vec![NO_ROW; b.batch.num_rows()];
            let (number, keys) = (b.number, &b.keys);
            // Heads point at this batch or the ones indexed before it.
            let key_at = |s: Seq| -> Option<&[u8]> {
                match split(s) {
                    (n, r) if n == number => Some(keys.row(r).data()),
                    (n, r) => {
                        let i = usize::try_from(n.checked_sub(done.first()?.number)?).ok()?;
                        done.get(i).map(|d| d.keys.row(r).data())
                    }
                }
            };
            for r in (first..b.batch.num_rows()).filter(|r| b.stored.value(*r)) {
                let key = keys.row(r).data();
                b.prev[r] = index_row(index, hasher.hash_one(key), key, seq(number, r), key_at);
            }
        }
        self.tags.clear();
        self.zones.clear();
        self.indexed = true;
    }

    /// Drops the key index; held rows get the hash tags scans compare.
    fn drop_index(&mut self, hasher: &DefaultHashBuilder) {
        self.index = (0..INDEX_SHARDS).map(|_| HashTable::new()).collect();
        self.sweep_budget = 0;
        let SideState {
            batches, tags, zones, ..
        } = self;
        tags.clear();
        zones.clear();
        for b in batches {
            b.prev = Vec::new();
            b.first_tag = tags.end();
            tags.extend((0..b.batch.num_rows()).map(|r| tag(hasher.hash_one(b.keys.row(r).data()))));
            zones.push_back(Zone::of(b.first_tag, &b.keys, b.max_time, |r| b.stored.value(r)));
        }
        self.indexed = false;
    }

    /// Whether each row of a stored batch is live at `cutoff`.
    fn live(&self, at: usize, cutoff: i64) -> BooleanBuffer {
        let b = &self.batches[at];
        let freed = if at == 0 { self.freed } else { 0 };
        if freed == 0 && b.min_time >= cutoff {
            // Every stored row lives (the common case: all but the oldest).
            return b.stored.clone();
        }
        (0..b.batch.num_rows())
            .map(|r| r >= freed && b.stored.value(r) && b.times.value(r) >= cutoff)
            .collect()
    }
}

/// Both sides' state and the rules that free it; no I/O.
pub struct JoinState {
    sides: [SideState; 2],
    rows_max: usize,
    /// Per side: rows older than this have expired (the latest expiry's
    /// cutoff; an interval join's sides expire at different times).
    cutoffs: [i64; 2],
    hasher: DefaultHashBuilder,
}

/// The probe of one batch: (probing row, stored entry) pairs.
type Matches = Vec<(u32, Entry)>;

impl JoinState {
    pub fn new(rows_max: usize) -> Self {
        JoinState {
            sides: [SideState::default(), SideState::default()],
            rows_max,
            cutoffs: [i64::MIN; 2],
            hasher: DefaultHashBuilder::default(),
        }
    }

    /// Rows held over both sides.
    pub fn rows(&self) -> usize {
        self.sides[0].rows + self.sides[1].rows
    }

    /// Expires rows older than `cutoff` on both sides and frees them all;
    /// returns how many were freed.
    pub fn expire(&mut self, cutoff: i64) -> usize {
        self.advance([cutoff, cutoff]);
        self.free(usize::MAX)
    }

    /// Rows older than `cutoffs[s]` on side `s` expire (cutoffs never go
    /// back): from now on they match nothing and snapshots leave them out.
    /// Their memory is freed by [`Self::free`], a step at a time.
    pub fn advance(&mut self, cutoffs: [i64; 2]) {
        for (c, new) in self.cutoffs.iter_mut().zip(cutoffs) {
            *c = (*c).max(new);
        }
    }

    /// Frees expired rows, whole stored batches, until `budget` rows (or
    /// all expired rows) are freed over both sides; returns how many were.
    /// A watermark can expire a whole window of rows at once, so the
    /// operator frees [`FREE_ROWS_STEP`] with each message and the task
    /// stays responsive.
    pub fn free(&mut self, budget: usize) -> usize {
        let started = std::time::Instant::now();
        let mut freed = 0;
        for (side, cutoff) in self.sides.iter_mut().zip(self.cutoffs) {
            freed += side.free(cutoff, budget.saturating_sub(freed));
        }
        if started.elapsed() >= crate::metrics::LONG_POLL {
            tracing::debug!(freed, took = ?started.elapsed(), "join took long to free expired rows");
        }
        freed
    }

    /// The hash of each `store` row's key (0 for the others).
    fn hashes(&self, keys: &Rows, store: &[bool]) -> Vec<u64> {
        store
            .iter()
            .enumerate()
            .map(|(r, s)| {
                if *s {
                    self.hasher.hash_one(keys.row(r).data())
                } else {
                    0
                }
            })
            .collect()
    }

    /// Probes `side`'s opposite with the `store` rows of `batch` (their
    /// row-encoded `keys`), then stores those rows with their times.
    fn probe_and_store(
        &mut self,
        side: usize,
        batch: &RecordBatch,
        keys: Rows,
        times: Vec<i64>,
        store: &[bool],
    ) -> Result<Matches> {
        let hashes = self.hashes(&keys, store);
        let other = &mut self.sides[1 - side];
        let mut matches = Vec::new();
        // (Built only when there is something to probe: q7's bids find the
        // other side empty but for a moment each window.)
        let probing: Vec<(u64, u32)> = match other.rows {
            0 => Vec::new(),
            _ => (0..batch.num_rows())
                .filter(|r| store[*r])
                .map(|r| (hashes[r], r as u32))
                .collect(),
        };
        if !probing.is_empty() {
            // One pass over the held rows (a few times dearer per row with
            // many probing keys: a search per row).
            let per_row = if probing.len() == 1 { 1 } else { 4 };
            other.scanned_lately = other.scanned_lately.saturating_add(per_row * other.rows as u64);
            other.choose_strategy(&self.hasher);
            let cutoff = self.cutoffs[1 - side];
            if other.indexed {
                for (hash, r) in &probing {
                    other.probe(keys.row(*r as usize).data(), *hash, cutoff, *r, &mut matches);
                }
            } else {
                let started = std::time::Instant::now();
                other.scan(&keys, &probing, cutoff, &mut matches);
                tracing::debug!(rows = other.rows, keys = probing.len(), took = ?started.elapsed(), "join scan");
            }
        }
        self.store(side, batch, keys, hashes, times, store)?;
        Ok(matches)
    }

    /// Stores the rows of `batch` marked in `store` on `side`.
    fn store(
        &mut self,
        side: usize,
        batch: &RecordBatch,
        keys: Rows,
        hashes: Vec<u64>,
        times: Vec<i64>,
        store: &[bool],
    ) -> Result<()> {
        let count = store.iter().filter(|s| **s).count();
        if count == 0 {
            return Ok(());
        }
        if self.rows() + count > self.rows_max {
            // Expired rows waiting to be freed do not count.
            self.free(usize::MAX);
        }
        if self.rows() + count > self.rows_max {
            return Err(Error::user(
                SqlCode::ConfigurationLimitExceeded,
                format!(
                    "join state limit reached: {} rows held (join_state_rows_max); use a window, a shorter join_state_ttl, or more parallelism",
                    self.rows_max
                ),
            ));
        }
        let hasher = &self.hasher;
        let state = &mut self.sides[side];
        state.store(batch, keys, hashes, times, store, count)?;
        state.choose_strategy(hasher);
        Ok(())
    }

    /// `side`'s stored batches as they are (shared arrays, no copy of
    /// values), each with two more columns: the rows' times and whether a
    /// row is live. O(stored batches) plus one bit per row; empty when the
    /// side holds nothing.
    fn snapshot_batches(&self, side: usize) -> Result<Vec<RecordBatch>> {
        let state = &self.sides[side];
        let cutoff = self.cutoffs[side];
        state
            .batches
            .iter()
            .enumerate()
            // A batch whose stored rows all expired (waiting to be freed).
            .filter(|(_, b)| b.max_time >= cutoff)
            .map(|(at, b)| {
                if (at == 0 && state.freed > 0) || b.min_time < cutoff {
                    // Some rows expired: mark them dead.
                    let times = state.snapshot_times.then_some(&b.times);
                    snapshot_batch(b.snapshot.schema(), &b.batch, times, state.live(at, cutoff))
                } else {
                    Ok(b.snapshot.clone())
                }
            })
            .collect()
    }
}

/// Column names a join snapshot adds to a side's stored batches.
const SNAPSHOT_TIME: &str = "__sluice_join_time";
const SNAPSHOT_LIVE: &str = "__sluice_join_live";

/// A row's event time in ms (a null time is the earliest: it expires first).
fn event_times(column: &ArrayRef) -> Result<Vec<i64>> {
    Ok(timestamps_ms(column)?
        .into_iter()
        .map(|t| t.unwrap_or(i64::MIN))
        .collect())
}

/// A stored batch with its rows' times and liveness (shared arrays).
fn snapshot_batch(
    schema: SchemaRef,
    batch: &RecordBatch,
    times: Option<&Int64Array>,
    live: BooleanBuffer,
) -> Result<RecordBatch> {
    let mut columns = batch.columns().to_vec();
    if let Some(times) = times {
        columns.push(Arc::new(times.clone()));
    }
    columns.push(Arc::new(BooleanArray::new(live, None)));
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// A side's schema plus the snapshot's time and live columns.
fn snapshot_schema(side: &SchemaRef, with_times: bool) -> SchemaRef {
    let mut fields: Vec<Arc<Field>> = side.fields().iter().cloned().collect();
    if with_times {
        fields.push(Arc::new(Field::new(SNAPSHOT_TIME, DataType::Int64, false)));
    }
    fields.push(Arc::new(Field::new(SNAPSHOT_LIVE, DataType::Boolean, false)));
    Arc::new(Schema::new(fields))
}

/// The operator around [`JoinState`].
pub struct JoinOperator {
    spec: JoinSpec,
    output_schema: SchemaRef,
    /// Inputs `0..left_inputs` are the left side's channels.
    left_inputs: usize,
    converters: [RowConverter; 2],
    state: JoinState,
    /// Event-time TTL needs both sides' event time; else processing time.
    processing_time: bool,
}

impl JoinOperator {
    pub fn new(spec: &JoinSpec, output_schema: SchemaRef, left_inputs: usize) -> Result<Self> {
        let converter = |side: &JoinSide| {
            RowConverter::new(
                side.keys
                    .iter()
                    .map(|k| SortField::new(side.schema.field(*k).data_type().clone()))
                    .collect(),
            )
        };
        let (l, r) = (converter(&spec.left)?, converter(&spec.right)?);
        let event_time_bound = spec.windowed || spec.interval_ms.is_some();
        let processing_time =
            !event_time_bound && (spec.left.time_column.is_none() || spec.right.time_column.is_none());
        if event_time_bound && (spec.left.time_column.is_none() || spec.right.time_column.is_none()) {
            return Err(Error::internal("windowed or interval join without event time"));
        }
        Ok(JoinOperator {
            spec: spec.clone(),
            output_schema,
            left_inputs,
            converters: [l, r],
            state: {
                let mut state = JoinState::new(spec.state_rows_max);
                for side in &mut state.sides {
                    side.snapshot_times = processing_time;
                }
                state
            },
            processing_time,
        })
    }

    fn side(&self, side: usize) -> &JoinSide {
        if side == 0 { &self.spec.left } else { &self.spec.right }
    }

    /// The row-encoded join keys of `batch` from `side` (`None` for a null key).
    fn keys(&self, side: usize, batch: &RecordBatch) -> Result<(Rows, Vec<bool>)> {
        let key_arrays: Vec<ArrayRef> = self.side(side).keys.iter().map(|k| batch.column(*k).clone()).collect();
        let rows = self.converters[side].convert_columns(&key_arrays)?;
        let null = (0..batch.num_rows())
            .map(|r| key_arrays.iter().any(|a| a.is_null(r)))
            .collect();
        Ok((rows, null))
    }

    fn now_ms() -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }

    /// Stores the rows of `batch` marked in `live` with their times (restore).
    /// (An old checkpoint's gathered rows may exceed a stored batch: sliced.)
    fn restore_rows(&mut self, side: usize, batch: &RecordBatch, times: &[i64], live: &[bool]) -> Result<()> {
        let mut at = 0;
        while at < batch.num_rows() {
            let n = STORED_BATCH_ROWS_MAX.min(batch.num_rows() - at);
            let slice = batch.slice(at, n);
            let (keys, null) = self.keys(side, &slice)?;
            let store: Vec<bool> = live[at..at + n].iter().zip(&null).map(|(l, n)| *l && !n).collect();
            let hashes = self.state.hashes(&keys, &store);
            self.state
                .store(side, &slice, keys, hashes, times[at..at + n].to_vec(), &store)?;
            at += n;
        }
        Ok(())
    }

    /// Probes with and stores one batch of at most
    /// [`STORED_BATCH_ROWS_MAX`] rows from `input`.
    async fn process_slice(&mut self, batch: RecordBatch, input: usize, ctx: &mut OperatorContext<'_>) -> Result<()> {
        let side = usize::from(input >= self.left_inputs);
        // Rows a watermark or the timer expired: freed a step at a time.
        self.state.free(FREE_ROWS_STEP);
        let (keys, null) = self.keys(side, &batch)?;
        let times: Vec<i64> = match (self.processing_time, self.side(side).time_column) {
            (false, Some(c)) => event_times(batch.column(c))?,
            _ => vec![Self::now_ms(); batch.num_rows()],
        };
        let low = ctx.watermark.0;
        // Rows with a null key never match and are not stored.
        let store: Vec<bool> = if self.spec.windowed || self.spec.interval_ms.is_some() {
            // Behind the watermark: the other side's rows it could match may
            // be gone (as in a window, late rows are dropped and counted).
            let late = times.iter().filter(|t| **t < low).count();
            ctx.metrics.late_rows_dropped.fetch_add(late as u64, Ordering::Relaxed);
            times.iter().zip(&null).map(|(t, n)| *t >= low && !n).collect()
        } else {
            null.iter().map(|n| !n).collect()
        };
        let matches = self.state.probe_and_store(side, &batch, keys, times, &store)?;
        ctx.metrics
            .state_groups
            .store(self.state.rows() as u64, Ordering::Relaxed);
        for out in self.gather(side, &batch, &matches)? {
            ctx.emit(out).await?;
        }
        Ok(())
    }

    /// Output batches for the matches of a batch from `side`.
    fn gather(&self, side: usize, batch: &RecordBatch, matches: &[(u32, Entry)]) -> Result<Vec<RecordBatch>> {
        let stored = &self.state.sides[1 - side];
        let mut out = Vec::new();
        for chunk in matches.chunks(OUTPUT_BATCH_ROWS_MAX) {
            let probe_rows = UInt32Array::from_iter_values(chunk.iter().map(|(r, _)| *r));
            let probe: Vec<ArrayRef> = (0..self.side(side).output_columns)
                .map(|c| take(batch.column(c), &probe_rows, None))
                .collect::<std::result::Result<_, _>>()?;
            let mut sources: Vec<u64> = chunk.iter().map(|(_, e)| e.batch).collect();
            sources.sort_unstable();
            sources.dedup();
            let slot: HashMap<u64, usize> = sources.iter().enumerate().map(|(i, b)| (*b, i)).collect();
            let indices: Vec<(usize, usize)> = chunk.iter().map(|(_, e)| (slot[&e.batch], e.row as usize)).collect();
            let batches = sources
                .iter()
                .map(|b| stored.batch(*b).map(|s| &s.batch))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| Error::internal("join: a match refers to a freed batch"))?;
            let mut other = Vec::new();
            for c in 0..self.side(1 - side).output_columns {
                let arrays: Vec<&dyn Array> = batches.iter().map(|b| b.column(c).as_ref()).collect();
                other.push(interleave(&arrays, &indices)?);
            }
            let columns = if side == 0 {
                probe.into_iter().chain(other).collect()
            } else {
                other.into_iter().chain(probe).collect()
            };
            out.push(RecordBatch::try_new(self.output_schema.clone(), columns)?);
        }
        Ok(out)
    }
}

#[async_trait]
impl Operator for JoinOperator {
    async fn process_batch(&mut self, batch: RecordBatch, input: usize, ctx: &mut OperatorContext<'_>) -> Result<()> {
        if batch.num_rows() > STORED_BATCH_ROWS_MAX {
            let mut at = 0;
            while at < batch.num_rows() {
                let n = STORED_BATCH_ROWS_MAX.min(batch.num_rows() - at);
                self.process_slice(batch.slice(at, n), input, ctx).await?;
                at += n;
            }
            return Ok(());
        }
        self.process_slice(batch, input, ctx).await
    }

    async fn process_watermark(&mut self, watermark: Watermark, ctx: &mut OperatorContext<'_>) -> Result<()> {
        if !self.processing_time {
            let ttl = self.spec.state_ttl_ms.map(|ttl| watermark.0.saturating_sub(ttl));
            let cutoffs = match (self.spec.windowed, self.spec.interval_ms) {
                (true, _) => Some([watermark.0; 2]),
                // A row of side s can match nothing once the watermark is past
                // its time plus interval[s]; a TTL may free it earlier.
                (false, Some(interval)) => {
                    Some(interval.map(|i| watermark.0.saturating_sub(i).max(ttl.unwrap_or(i64::MIN))))
                }
                (false, None) => ttl.map(|c| [c; 2]),
            };
            if let Some(cutoffs) = cutoffs {
                self.state.advance(cutoffs);
                self.state.free(FREE_ROWS_STEP);
                ctx.metrics
                    .state_groups
                    .store(self.state.rows() as u64, Ordering::Relaxed);
            }
        }
        ctx.emit_watermark(watermark).await
    }

    /// Both sides' stored batches, shared with the state (zero-copy: the
    /// coordinator encodes them off the task loop), with each row's time
    /// and liveness, so a restored join matches what the original would.
    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<TaskState> {
        let mut state = TaskState::default();
        for (side, name) in SIDE_NAMES.iter().enumerate() {
            let batches = self.state.snapshot_batches(side)?;
            if !batches.is_empty() {
                state.put_batches(&format!("join.{name}.batches"), batches);
            }
        }
        Ok(state)
    }

    async fn restore(&mut self, checkpoint: Option<(u64, TaskState)>) -> Result<()> {
        let Some((_, state)) = checkpoint else {
            return Ok(());
        };
        for (side, name) in SIDE_NAMES.iter().enumerate() {
            for stored in state.batches(&format!("join.{name}.batches")).unwrap_or_default() {
                let bad = || Error::internal(format!("join snapshot: bad {name} batch"));
                let last = stored.num_columns().checked_sub(1).ok_or_else(bad)?;
                // Times are stored for arrival times (and by checkpoints
                // from before event times were read back from the batch).
                let stored_times = last > 0 && stored.schema().field(last - 1).name() == SNAPSHOT_TIME;
                let n = if stored_times { last - 1 } else { last };
                let times: Vec<i64> = if stored_times {
                    stored
                        .column(n)
                        .as_primitive_opt::<Int64Type>()
                        .ok_or_else(bad)?
                        .values()
                        .to_vec()
                } else {
                    let c = self.side(side).time_column.filter(|c| *c < n).ok_or_else(bad)?;
                    event_times(stored.column(c))?
                };
                let live: Vec<bool> = stored
                    .column(last)
                    .as_boolean_opt()
                    .ok_or_else(bad)?
                    .values()
                    .iter()
                    .collect();
                let batch = stored.project(&(0..n).collect::<Vec<_>>())?;
                self.restore_rows(side, &batch, &times, &live)?;
            }
            // Checkpoints taken before stored batches were snapshotted whole:
            // the live rows gathered into one batch, the times beside it.
            if let Some(batch) = state.batch(&format!("join.{name}.rows")) {
                let times: Vec<i64> = state
                    .bytes(&format!("join.{name}.times"))
                    .filter(|b| b.len() == batch.num_rows() * 8)
                    .ok_or_else(|| Error::internal(format!("join snapshot: {name} times do not match its rows")))?
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .collect();
                self.restore_rows(side, batch, &times, &vec![true; batch.num_rows()])?;
            }
        }
        Ok(())
    }

    fn timer_interval(&self) -> Option<Duration> {
        let ttl = self.spec.state_ttl_ms.filter(|_| self.processing_time)?;
        Some(Duration::from_millis((ttl / 4).clamp(10, 1000) as u64))
    }

    async fn process_timer(&mut self, ctx: &mut OperatorContext<'_>) -> Result<()> {
        if let Some(ttl) = self.spec.state_ttl_ms {
            let cutoff = Self::now_ms().saturating_sub(ttl);
            self.state.advance([cutoff; 2]);
            self.state.free(FREE_ROWS_STEP);
            ctx.metrics
                .state_groups
                .store(self.state.rows() as u64, Ordering::Relaxed);
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "join_tests.rs"]
mod tests;
