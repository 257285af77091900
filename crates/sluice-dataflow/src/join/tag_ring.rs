//! The hash tags of a scanned join side's held rows, in arrival order, in
//! chunks of a fixed size that are recycled.
//!
//! One contiguous ring (a `VecDeque`) doubled its buffer as a side grew:
//! Nexmark q7 holds ~32 M bids per instance, so a doubling allocated and
//! copied 64–128 MiB in one poll, and on a VM where first-touching memory
//! is slow (a 2 MiB huge page took 4–47 ms to fault in) both join instances
//! stopped for 100–900 ms at once, delaying every window's result behind
//! them. Chunks never move: a side grows by one chunk at a time, and the
//! chunks its oldest rows free are reused for its newest, so a side in a
//! steady state touches no new memory.

use std::collections::VecDeque;

/// 16 bits of a key's hash that scans compare: 2 bytes a row to read
/// (the scan is bound by memory bandwidth); one row in 65 536 matches a
/// tag by chance and has its key compared in vain.
pub(super) type Tag = u16;

/// Tags per chunk: 64 Ki (128 KiB), long enough runs for a scan to stream
/// (64 in unit tests, so they cross chunks).
pub(super) const CHUNK: usize = if cfg!(test) { 64 } else { 1 << 16 };

/// Freed chunks kept for reuse at most (2 MiB): a freeing step frees at
/// most [`super::FREE_ROWS_STEP`] rows (4 chunks) before the next batch is
/// stored, so more would sit idle.
pub(super) const SPARE_MAX: usize = 16;

/// Tags at positions `start..end`, counted from the side's first row ever.
#[derive(Default)]
pub(super) struct TagRing {
    /// `chunks[k]` holds positions `base + k * CHUNK ..` (`base` is a
    /// multiple of [`CHUNK`] at or below `start`).
    chunks: VecDeque<Box<[Tag]>>,
    base: u64,
    start: u64,
    end: u64,
    spare: Vec<Box<[Tag]>>,
}

impl TagRing {
    /// The position the next tag gets.
    pub(super) fn end(&self) -> u64 {
        self.end
    }

    /// Tags held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        (self.end - self.start) as usize
    }

    /// Appends `tags` at [`Self::end`].
    pub(super) fn extend(&mut self, mut tags: impl ExactSizeIterator<Item = Tag>) {
        while tags.len() > 0 {
            let at = (self.end - self.base) as usize;
            let (chunk, offset) = (at / CHUNK, at % CHUNK);
            if chunk == self.chunks.len() {
                let fresh = self.spare.pop().unwrap_or_else(|| vec![0; CHUNK].into_boxed_slice());
                self.chunks.push_back(fresh);
            }
            let room = &mut self.chunks[chunk][offset..];
            let n = room.len().min(tags.len());
            for (slot, t) in room[..n].iter_mut().zip(&mut tags) {
                *slot = t;
            }
            self.end += n as u64;
        }
    }

    /// Drops the tags before position `pos` (at most [`Self::end`]); chunks
    /// left wholly before it are kept for reuse, up to [`SPARE_MAX`].
    pub(super) fn free_before(&mut self, pos: u64) {
        debug_assert!(
            self.start <= pos && pos <= self.end,
            "{pos} outside {}..{}",
            self.start,
            self.end
        );
        self.start = pos.clamp(self.start, self.end);
        while self.base + CHUNK as u64 <= self.start {
            let Some(chunk) = self.chunks.pop_front() else {
                // Nothing allocated up to `start` (all freed): realign.
                self.base = self.start - self.start % CHUNK as u64;
                break;
            };
            if self.spare.len() < SPARE_MAX {
                self.spare.push(chunk);
            }
            self.base += CHUNK as u64;
        }
    }

    /// Drops every tag; positions go on from [`Self::end`].
    pub(super) fn clear(&mut self) {
        self.free_before(self.end);
    }

    /// The tags at positions `from..to` (held ones), as runs that do not
    /// cross a chunk: (position of the run's first tag, the run).
    pub(super) fn runs(&self, from: u64, to: u64) -> impl Iterator<Item = (u64, &[Tag])> + '_ {
        debug_assert!(self.start <= from && from <= to && to <= self.end);
        let mut at = from;
        std::iter::from_fn(move || {
            (at < to).then(|| {
                let i = (at - self.base) as usize;
                let (chunk, offset) = (i / CHUNK, i % CHUNK);
                let n = (CHUNK - offset).min((to - at) as usize);
                let run = (at, &self.chunks[chunk][offset..offset + n]);
                at += n as u64;
                run
            })
        })
    }

    /// Chunks allocated (held and spare).
    #[cfg(test)]
    pub(super) fn chunks_allocated(&self) -> (usize, usize) {
        (self.chunks.len(), self.spare.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(ring: &TagRing, from: u64, to: u64) -> Vec<Tag> {
        let mut out = Vec::new();
        let mut next = from;
        for (at, run) in ring.runs(from, to) {
            assert_eq!(at, next, "runs are consecutive");
            assert!(!run.is_empty() && run.len() <= CHUNK);
            out.extend_from_slice(run);
            next += run.len() as u64;
        }
        assert_eq!(next, to);
        out
    }

    #[test]
    fn tags_read_back_in_order_across_chunks_and_frees() {
        let mut ring = TagRing::default();
        // An independent model: every tag ever pushed, by position.
        let mut model: Vec<Tag> = Vec::new();
        let mut start = 0u64;
        for round in 0..50u64 {
            let n = (round * 37 % 150) as usize;
            let tags: Vec<Tag> = (0..n).map(|i| (round as usize * 1000 + i) as Tag).collect();
            ring.extend(tags.iter().copied());
            model.extend(&tags);
            assert_eq!(ring.end(), model.len() as u64);
            // Free up to a point that moves on unevenly (sometimes all).
            start = if round % 7 == 6 {
                ring.end()
            } else {
                (start + (round * 53 % 120)).min(ring.end())
            };
            ring.free_before(start);
            assert_eq!(ring.len() as u64, ring.end() - start);
            assert_eq!(collect(&ring, start, ring.end()), model[start as usize..]);
            // Any sub-range too.
            let (a, b) = (start + (ring.end() - start) / 3, ring.end() - (ring.end() - start) / 4);
            assert_eq!(collect(&ring, a, b), model[a as usize..b as usize]);
        }
        ring.clear();
        assert_eq!(ring.len(), 0);
        ring.extend([7, 8, 9].into_iter());
        assert_eq!(collect(&ring, ring.end() - 3, ring.end()), vec![7, 8, 9]);
    }

    #[test]
    fn freed_chunks_are_reused_and_spares_stay_bounded() {
        let mut ring = TagRing::default();
        // A steady state: store a chunk's worth, free a chunk's worth.
        ring.extend(std::iter::repeat_n(1, 4 * CHUNK));
        for _ in 0..100 {
            ring.extend(std::iter::repeat_n(2, CHUNK));
            let free_to = ring.end() - 4 * CHUNK as u64;
            ring.free_before(free_to);
        }
        let (held, spare) = ring.chunks_allocated();
        assert!(held <= 5, "{held} chunks held for 4 chunks of tags");
        assert!(spare <= 1, "a freed chunk waits for the next store: {spare}");
        // Freeing far more than SPARE_MAX chunks at once keeps SPARE_MAX.
        ring.extend(std::iter::repeat_n(3, 100 * CHUNK));
        ring.clear();
        assert_eq!(ring.chunks_allocated(), (0, SPARE_MAX));
        // The next stores take spares before allocating.
        ring.extend(std::iter::repeat_n(4, 3 * CHUNK));
        assert_eq!(ring.chunks_allocated(), (3, SPARE_MAX - 3));
    }
}
