//! When a join's stored rows expire, and freeing them (pure bookkeeping).
//!
//! Rows expire by time:
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
//! Freeing a row does no index lookup (each would be a cache miss in a
//! large index): a key whose newest row is freed leaves a stale head, which
//! matches nothing and is removed by a sweep that visits the index shards
//! in turn, budgeted by the rows freed.

use super::JoinState;
use super::side::{INDEX_SHARDS, SideState, locate};
use sluice_plan::JoinSpec;
use sluice_types::Watermark;

/// Expired rows freed with each message at most (whole stored batches, so
/// a step may free one batch more): a few milliseconds of freeing.
pub const FREE_ROWS_STEP: usize = 1 << 18;

/// The cutoffs (per side: rows older expire) that low watermark
/// `watermark` sets in an event-time join; `None` when nothing expires by
/// event time (no window, no interval, no TTL).
pub(super) fn watermark_cutoffs(spec: &JoinSpec, watermark: Watermark) -> Option<[i64; 2]> {
    let ttl = spec.state_ttl_ms.map(|ttl| watermark.0.saturating_sub(ttl));
    match (spec.windowed, spec.interval_ms) {
        (true, _) => Some([watermark.0; 2]),
        // A row of side s can match nothing once the watermark is past
        // its time plus interval[s]; a TTL may free it earlier.
        (false, Some(interval)) => Some(interval.map(|i| watermark.0.saturating_sub(i).max(ttl.unwrap_or(i64::MIN)))),
        (false, None) => ttl.map(|c| [c; 2]),
    }
}

/// The cutoff of a processing-time TTL of `ttl_ms` at wall-clock `now_ms`.
pub(super) fn processing_time_cutoff(ttl_ms: i64, now_ms: i64) -> i64 {
    now_ms.saturating_sub(ttl_ms)
}

impl JoinState {
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
}

impl SideState {
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
}
