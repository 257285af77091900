//! One side of a join: its stored batches in arrival order, numbered, and
//! either the key index (a key's newest row, each row pointing to the
//! previous one with its key) or, for a side stored often and probed
//! rarely, the rows' hash tags that a probe scans in order
//! ([`SideState::choose_strategy`] weighs the two). Freeing expired rows is
//! in `expiry.rs`.

use super::snapshot_batch;
use super::snapshot_schema;
use super::tag_ring::{Tag, TagRing};
use arrow::array::Int64Array;
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow::row::Rows;
use hashbrown::{DefaultHashBuilder, HashTable};
use sluice_types::Result;
use std::collections::VecDeque;
use std::hash::BuildHasher;

/// A stored row's number on its side: its batch's number (arrival order,
/// never reused) in the high 40 bits, its row in that batch in the low
/// [`ROW_BITS`], so finding a row's batch is an index, not a search. 2^40
/// batches last centuries at any batch rate.
pub(super) type Seq = u64;

/// (512 rows in unit tests, so they reach the slicing of larger batches.)
pub(super) const ROW_BITS: u32 = if cfg!(test) { 9 } else { 24 };

/// Rows of one stored batch at most (larger input batches are stored in
/// slices).
pub const STORED_BATCH_ROWS_MAX: usize = 1 << ROW_BITS;

pub(super) fn seq(batch: u64, row: usize) -> Seq {
    (batch << ROW_BITS) | row as u64
}

/// The batch number and row of a [`Seq`].
pub(super) fn split(seq: Seq) -> (u64, usize) {
    (seq >> ROW_BITS, (seq & (STORED_BATCH_ROWS_MAX as u64 - 1)) as usize)
}

/// "No previous row with this key."
pub(super) const NO_ROW: Seq = Seq::MAX;

/// One matched stored row: its batch (by number) and its row in that batch.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    pub(super) batch: u64,
    pub(super) row: u32,
}

/// A batch as it arrived (immutable, shared with the output and with
/// snapshots) and, per row, what the index needs.
pub(super) struct StoredBatch {
    /// The batch's number on its side (arrival order).
    pub(super) number: u64,
    pub(super) batch: RecordBatch,
    /// Row-encoded join keys (compared on lookups).
    pub(super) keys: Rows,
    /// Row times (event or arrival), kept for expiry and snapshots.
    pub(super) times: Int64Array,
    /// Rows that were stored (a row with a null key or that arrived late
    /// is not).
    pub(super) stored: BooleanBuffer,
    /// The previous stored row with the same key, or [`NO_ROW`] (empty
    /// while the side is scanned, not indexed).
    pub(super) prev: Vec<Seq>,
    /// Where the batch's rows' tags start in the side's `tags` (counted
    /// from the side's first row ever; see [`SideState::tags`]).
    pub(super) first_tag: u64,
    /// The earliest and latest times of a stored row.
    pub(super) min_time: i64,
    pub(super) max_time: i64,
    /// The batch as a snapshot holds it while every stored row lives (its
    /// columns, times and `stored`; shared arrays): built once when stored,
    /// so a checkpoint of tens of thousands of batches does not stall the
    /// task assembling them.
    pub(super) snapshot: RecordBatch,
    /// On an outer join's preserved side: whether each row matched a row
    /// of the other side (empty on other sides).
    pub(super) matched: Vec<bool>,
    /// The checkpoint whose snapshot wrote the batch in full (later ones
    /// reference it there), `None` before one did.
    pub(super) written_in: Option<u64>,
}

/// Shards of a side's key index: a table grows (rehashing everything it
/// holds, at once) one shard at a time, so the pause is 1/256 of the index.
pub(super) const INDEX_SHARDS: usize = 256;

/// The shard of a key's hash: bits 32..40 (hashbrown picks buckets from the
/// low bits and tags from the top 7, so both stay spread within a shard).
pub(super) fn shard(hash: u64) -> usize {
    (hash >> 32) as usize % INDEX_SHARDS
}

/// Keys up to this many bytes (row-encoded: a 64-bit key is 9) are kept in
/// the index itself, so a lookup compares them without reading the stored
/// batch, whose memory is cold in a large state.
pub(super) const INLINE_KEY_MAX: usize = 15;

/// A key's newest stored row. Once that row is freed (so are all older rows
/// of the key) the head is stale: it matches nothing and is removed by the
/// next sweep of its shard.
pub(super) struct Head {
    pub(super) hash: u64,
    pub(super) newest: Seq,
    /// The key's bytes and, last, their length; `NOT_INLINE` when longer
    /// than [`INLINE_KEY_MAX`].
    pub(super) inline: [u8; INLINE_KEY_MAX + 1],
}

pub(super) const NOT_INLINE: u8 = u8::MAX;

impl Head {
    pub(super) fn new(hash: u64, newest: Seq, key: &[u8]) -> Head {
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
    pub(super) fn inline_eq(&self, key: &[u8]) -> Option<bool> {
        match self.inline[INLINE_KEY_MAX] {
            NOT_INLINE => None,
            len => Some(&self.inline[..usize::from(len)] == key),
        }
    }
}

/// One side's rows: stored batches in arrival order and the key index.
pub(super) struct SideState {
    /// Key → newest stored row, in [`INDEX_SHARDS`] shards.
    pub(super) index: Vec<HashTable<Head>>,
    pub(super) batches: VecDeque<StoredBatch>,
    /// Rows of the front batch already freed.
    pub(super) freed: usize,
    /// Number of the next batch stored.
    pub(super) next: u64,
    /// Stored rows held (freed ones excluded).
    pub(super) rows: usize,
    /// Index entries a sweep may visit: earned by freeing rows (two per
    /// row), so sweeping costs O(freed rows) and stale heads stay fewer
    /// than the live ones.
    pub(super) sweep_budget: usize,
    /// The shard the next sweep visits.
    pub(super) sweep_next: usize,
    /// The side's schema plus the snapshot columns (once a batch came).
    pub(super) snapshot_schema: Option<SchemaRef>,
    /// Whether snapshots carry the rows' times: only when they are
    /// arrival times; event times are read back from the batch's own
    /// event-time column (8 bytes a row less in every checkpoint).
    pub(super) snapshot_times: bool,
    /// Whether the key index is kept; otherwise probes scan the stored
    /// rows' hash tags (see [`SideState::choose_strategy`]).
    pub(super) indexed: bool,
    /// While scanned: every held batch's rows' tags, in arrival order, in
    /// recycled chunks of 64 Ki, so a scan reads long runs of memory (not
    /// tens of thousands of small arrays) and growing never copies. Empty
    /// while indexed.
    pub(super) tags: TagRing,
    /// While scanned: one [`Zone`] per held batch, in the same order.
    pub(super) zones: VecDeque<Zone>,
    /// Rows stored and rows a probe scanned (or would have scanned) lately,
    /// halved every [`STRATEGY_WINDOW_ROWS`] stored rows.
    pub(super) stored_lately: u64,
    pub(super) scanned_lately: u64,
}

/// What indexing a stored row costs, in scanned rows: an insert into a
/// large index is a cache miss or two; a scan reads 2 bytes a row in order.
pub(super) const INDEX_ROW_COST: u64 = 64;

/// Stored rows between strategy decisions (and the halving of the costs).
pub(super) const STRATEGY_WINDOW_ROWS: u64 = if cfg!(test) { 4096 } else { 1 << 20 };

/// A scanned batch's rows in the tag ring and the range of its stored
/// rows' keys, by their first 8 bytes (row-encoded keys sort as the keys
/// do, so a key whose first 8 bytes lie outside the range is in no row of
/// the batch). A scan skips such batches without reading their tags: the
/// highest price of a window, say, is above almost every batch's.
#[derive(Debug, Clone, Copy)]
pub(super) struct Zone {
    pub(super) first_tag: u64,
    pub(super) rows: usize,
    pub(super) min: u64,
    pub(super) max: u64,
    /// The latest time of a stored row: a batch all expired is skipped
    /// while it waits to be freed.
    pub(super) max_time: i64,
}

/// The first 8 bytes of a row-encoded key, big-endian (zero-padded).
pub(super) fn key_prefix(key: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    let n = key.len().min(8);
    bytes[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(bytes)
}

impl Zone {
    pub(super) fn of(first_tag: u64, keys: &Rows, max_time: i64, stored: impl Fn(usize) -> bool) -> Zone {
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

pub(super) fn tag(hash: u64) -> Tag {
    (hash >> 40) as Tag
}

/// Makes row `seq` the newest of `key` in `index` and returns the key's
/// previous newest row ([`NO_ROW`] for a new key; a stale head's row is
/// freed, so its chain ends there). `key_at` reads a stored row's key, for
/// heads whose key is too long to sit in the index.
pub(super) fn index_row<'k>(
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
pub(super) fn locate(batches: &VecDeque<StoredBatch>, freed: usize, seq: Seq) -> Option<(&StoredBatch, usize)> {
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
    pub(super) fn keys(&self) -> usize {
        let live = |h: &&Head| locate(&self.batches, self.freed, h.newest).is_some();
        self.index.iter().map(|t| t.iter().filter(live).count()).sum()
    }

    /// Switches to scanning (`false`) or indexing (`true`) now.
    #[cfg(test)]
    pub(super) fn force_strategy(&mut self, indexed: bool, hasher: &DefaultHashBuilder) {
        match (self.indexed, indexed) {
            (false, true) => self.build_index(hasher),
            (true, false) => self.drop_index(hasher),
            _ => {}
        }
    }

    /// Index entries, stale ones included.
    #[cfg(test)]
    pub(super) fn index_len(&self) -> usize {
        self.index.iter().map(HashTable::len).sum()
    }

    /// The stored batch numbered `number`.
    pub(super) fn batch(&self, number: u64) -> Option<&StoredBatch> {
        let at = usize::try_from(number.checked_sub(self.batches.front()?.number)?).ok()?;
        self.batches.get(at)
    }

    /// The stored batch numbered `number`, to mark its rows matched.
    pub(super) fn batch_mut(&mut self, number: u64) -> Option<&mut StoredBatch> {
        let at = usize::try_from(number.checked_sub(self.batches.front()?.number)?).ok()?;
        self.batches.get_mut(at)
    }

    /// Appends `key`'s stored rows that have not expired (`time >= cutoff`)
    /// to `out`, oldest first, each paired with `probe_row`.
    pub(super) fn probe(&self, key: &[u8], hash: u64, cutoff: i64, probe_row: u32, out: &mut Vec<(u32, Entry)>) {
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

    /// Stores `batch` (its `stored` rows, with their keys, hashes and times;
    /// on a preserved side whether each row `matched`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn store(
        &mut self,
        batch: &RecordBatch,
        keys: Rows,
        hashes: Vec<u64>,
        times: Vec<i64>,
        stored: &[bool],
        count: usize,
        matched: Vec<bool>,
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
            matched,
            written_in: None,
        });
        self.next = number + 1;
        self.rows += count;
        self.stored_lately += count as u64;
        Ok(())
    }

    /// Appends the stored rows that have not expired (`time >= cutoff`)
    /// and whose keys equal a probing row's to `out`: (probing row, stored
    /// row), by probing row, oldest stored row first — what [`Self::probe`]
    /// gives, found by one pass over the rows' hash tags instead of the
    /// index. `probing` are (hash, row) of the probing rows.
    pub(super) fn scan(&self, keys: &Rows, probing: &[(u64, u32)], cutoff: i64, out: &mut Vec<(u32, Entry)>) {
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
    pub(super) fn choose_strategy(&mut self, hasher: &DefaultHashBuilder) {
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
    pub(super) fn build_index(&mut self, hasher: &DefaultHashBuilder) {
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
    pub(super) fn drop_index(&mut self, hasher: &DefaultHashBuilder) {
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
    pub(super) fn live(&self, at: usize, cutoff: i64) -> BooleanBuffer {
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
