//! Where a task's incrementally checkpointed rows live, for state kept by
//! key and written again whole for a key when it changes — an aggregate's
//! group, a key's open sessions. A checkpoint writes the keys changed since
//! the previous one as one new batch (a key's rows together) and references
//! the batches earlier checkpoints wrote, with a liveness bit a row
//! ([`TaskState::put_incremental`](super::TaskState::put_incremental)): a
//! key's rows live in the batch that wrote it last, and a key gone in none.
//! A batch with no live row is forgotten. Rows held in earlier batches can
//! outgrow the state as keys change or go; [`Batches::compact`] forgets
//! every batch once they pass twice the live rows plus [`COMPACT_SLACK`],
//! and the checkpoint then writes every key again, so a restore reads at
//! most about three rows a live one.
//!
//! Where a key's rows are (its [`Place`]) the operator keeps in the key's
//! own state, and forgets here when the key's rows change or go: a map
//! from keys to places would hold a copy of every written key.

use super::incremental::{Held, Increment};
use arrow::record_batch::RecordBatch;
use hashbrown::HashSet;
use std::collections::BTreeMap;
use std::num::NonZeroU32;

/// Rows earlier batches may hold beyond twice the live rows before every
/// key is written again.
pub const COMPACT_SLACK: usize = 1024;

/// A batch an earlier checkpoint wrote in full.
struct Written {
    checkpoint: u64,
    /// Per row: its key was last written here and is still held.
    live: Vec<bool>,
    live_count: usize,
}

/// Where a key's rows are in the batches checkpoints wrote: the batch's
/// number (plus one: an `Option<Place>` is no larger, 12 bytes, which
/// counts in a state of millions of partitions), its first row there,
/// its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    number: NonZeroU32,
    first: u32,
    rows: u32,
}

impl Place {
    fn number(&self) -> u64 {
        u64::from(self.number.get()) - 1
    }
}

/// The batches a task's checkpoints wrote of one incremental value, with a
/// liveness bit a row. Where each key's rows are, its [`Place`], the
/// operator keeps beside the key's state.
#[derive(Default)]
pub struct Batches {
    batches: BTreeMap<u64, Written>,
    next_number: u64,
    /// Batches numbered below it went with a compaction: a place in them
    /// is void (its key is written again by the checkpoint that
    /// compacted, and its owner may not have been given the new place yet).
    void_below: u64,
}

impl Batches {
    /// The rows at `place` are dead from now on (their key changed, or
    /// went). A place is forgotten once: its owner lets go of it.
    pub fn forget(&mut self, place: Place) {
        let number = place.number();
        if number < self.void_below || place.rows == 0 {
            return;
        }
        let batch = self.batches.get_mut(&number).expect("a written key's batch is held");
        for live in &mut batch.live[place.first as usize..(place.first + place.rows) as usize] {
            *live = false;
        }
        batch.live_count -= place.rows as usize;
        if batch.live_count == 0 {
            self.batches.remove(&number);
        }
    }

    /// The rows held in written batches, live or not.
    pub fn held_rows(&self) -> usize {
        self.batches.values().map(|b| b.live.len()).sum()
    }

    /// Forgets every batch when the rows they hold pass twice `live_rows`
    /// (the state's rows now) plus [`COMPACT_SLACK`]; returns whether it
    /// did. Then every place given before is void, and the checkpoint
    /// writes every key again.
    pub fn compact(&mut self, live_rows: usize) -> bool {
        if self.held_rows() <= 2 * live_rows + COMPACT_SLACK {
            return false;
        }
        self.batches.clear();
        self.void_below = self.next_number;
        true
    }

    /// What checkpoint `checkpoint` stores: a reference to every batch
    /// earlier ones wrote that holds a live row, then `new` — batches of
    /// keys' rows, each with its keys' numbers of rows in order (the
    /// places of those keys' earlier rows forgotten before) — and, a
    /// batch of `new` a list, each key's place.
    pub fn write(&mut self, checkpoint: u64, new: Vec<(Vec<u32>, RecordBatch)>) -> (Increment, Vec<Vec<Place>>) {
        let mut inc = Increment::default();
        for (number, b) in &self.batches {
            inc.held.push(Held {
                checkpoint: b.checkpoint,
                number: *number,
                live: b.live.iter().copied().collect(),
            });
        }
        let mut places = Vec::with_capacity(new.len());
        for (counts, batch) in new {
            let number = self.next_number;
            self.next_number += 1;
            // A batch a checkpoint (65 536 keys each): 2^32 of them are
            // 136 years of checkpoints a second.
            let tag = u32::try_from(number + 1)
                .ok()
                .and_then(NonZeroU32::new)
                .expect("fewer than 2^32 batches an operator");
            let mut first = 0u32;
            places.push(
                counts
                    .into_iter()
                    .map(|rows| {
                        let place = Place {
                            number: tag,
                            first,
                            rows,
                        };
                        first += rows;
                        place
                    })
                    .collect(),
            );
            debug_assert_eq!(first as usize, batch.num_rows(), "the keys' rows are the batch's");
            self.batches.insert(
                number,
                Written {
                    checkpoint,
                    live: vec![true; first as usize],
                    live_count: first as usize,
                },
            );
            inc.new.push((number, batch));
        }
        (inc, places)
    }
}

/// A written key and where its rows are.
pub type KeyPlace = (Box<[u8]>, Place);

/// State kept by row-encoded key (a top-N's partition over a changelog, an
/// OVER aggregate's, a join key), written incrementally: the keys changed
/// since the previous checkpoint and the [`Batches`] earlier ones wrote.
/// Where a key's rows were written (its [`Place`]) the operator keeps with
/// the key's state, and forgets here when the key goes
/// ([`ChangedKeys::forget`]): a map from keys to places would hold a copy
/// of every written key for as long as it lives.
#[derive(Default)]
pub struct ChangedKeys {
    dirty: HashSet<Box<[u8]>>,
    batches: Batches,
    /// Whether a checkpoint was written. The first writes every key, so
    /// until then changes are not kept: with checkpoints off none ever is,
    /// and the set would have copied every key the state ever held (the
    /// updating join's keys twice over, without bound).
    tracking: bool,
}

impl ChangedKeys {
    /// `key` changed (rows came or went, it expired or was restored): the
    /// next checkpoint writes it again.
    pub fn mark(&mut self, key: &[u8]) {
        if self.tracking && !self.dirty.contains(key) {
            self.dirty.insert(key.into());
        }
    }

    /// The rows a checkpoint wrote at `place` are dead: their key went (or
    /// its rows did, on a join's side). Its owner lets go of the place.
    pub fn forget(&mut self, place: Option<Place>) {
        if let Some(place) = place {
            self.batches.forget(place);
        }
    }

    /// Keys marked since the last checkpoint, not yet written.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.dirty.len()
    }

    /// The keys the next checkpoint writes: those marked since the last
    /// one that `state` still holds — `taken` takes such a key's place
    /// from it (its earlier rows die here), `None` for a key gone — or,
    /// at the first checkpoint and after a compaction (the rows written
    /// outgrew twice the `stored` rows), every key `all` lists; the
    /// places given before are void then.
    fn keys_to_write<S: ?Sized>(
        &mut self,
        stored: usize,
        state: &mut S,
        all: impl FnOnce(&S) -> Vec<Box<[u8]>>,
        mut taken: impl FnMut(&mut S, &[u8]) -> Option<Option<Place>>,
    ) -> Vec<Box<[u8]>> {
        if self.batches.compact(stored) || !self.tracking {
            // The marks are moot, and the keys go to the batch as `all`
            // gives them (putting millions through the set first was most
            // of a big state's first checkpoint).
            self.dirty = HashSet::new();
            self.tracking = true;
            return all(state);
        }
        let mut keys = Vec::with_capacity(self.dirty.len());
        for key in self.dirty.drain() {
            if let Some(place) = taken(state, &key) {
                if let Some(place) = place {
                    self.batches.forget(place);
                }
                keys.push(key);
            }
        }
        keys
    }

    /// What checkpoint `checkpoint` stores: the rows of `keys` (from
    /// [`Self::keys_to_write`]), which `rows` gives (their columns, and each
    /// key's number of rows) and an all-true liveness column ends, and
    /// references to what earlier ones wrote; and each written key's
    /// place, which its owner keeps. `rows` is asked for
    /// [`SNAPSHOT_KEYS`] keys at a time, each answer a batch of its own: a
    /// state's first checkpoint decodes millions of keys, and one batch of
    /// them needed its bookkeeping (every row's place, a vector a row) all
    /// at once.
    fn write(
        &mut self,
        checkpoint: u64,
        keys: Vec<Box<[u8]>>,
        mut rows: impl FnMut(&[Box<[u8]>]) -> sluice_types::Result<Option<(Vec<u32>, Vec<arrow::array::ArrayRef>)>>,
    ) -> sluice_types::Result<(Increment, Vec<KeyPlace>)> {
        let mut new = Vec::with_capacity(keys.len().div_ceil(SNAPSHOT_KEYS));
        let mut written = Vec::with_capacity(new.capacity());
        let mut keys = keys.into_iter();
        loop {
            let chunk: Vec<Box<[u8]>> = keys.by_ref().take(SNAPSHOT_KEYS).collect();
            if chunk.is_empty() {
                break;
            }
            if let Some((counts, columns)) = rows(&chunk)? {
                new.push((counts, super::incremental::snapshot_rows(columns, true)?));
                written.push(chunk);
            }
        }
        let (inc, places) = self.batches.write(checkpoint, new);
        let places = written
            .into_iter()
            .zip(places)
            .flat_map(|(chunk, places)| chunk.into_iter().zip(places))
            .collect();
        Ok((inc, places))
    }
}

impl ChangedKeys {
    /// A checkpoint's increment of an operator `op` (this taken out of
    /// it): [`Self::keys_to_write`], [`Self::write`], and each written key's
    /// place kept where `place` says (`None` for a key `op` no longer
    /// holds).
    pub fn snapshot<S: ?Sized>(
        &mut self,
        checkpoint: u64,
        stored: usize,
        op: &mut S,
        all: impl FnOnce(&S) -> Vec<Box<[u8]>>,
        place: impl for<'a> Fn(&'a mut S, &[u8]) -> Option<&'a mut Option<Place>>,
        mut rows: impl FnMut(&mut S, &[Box<[u8]>]) -> sluice_types::Result<Option<(Vec<u32>, Vec<arrow::array::ArrayRef>)>>,
    ) -> sluice_types::Result<Increment> {
        let keys = self.keys_to_write(stored, op, all, |op, key| place(op, key).map(Option::take));
        let (inc, places) = self.write(checkpoint, keys, |keys| rows(op, keys))?;
        for (key, written) in places {
            if let Some(at) = place(op, &key) {
                *at = Some(written);
            }
        }
        Ok(inc)
    }
}

/// Keys whose rows [`ChangedKeys::write`] asks for at a time. Seven in
/// tests, so the operators' checkpoint tests (the restore equivalence runs
/// of `checkpoint::testing`) write and read several batches a checkpoint.
pub const SNAPSHOT_KEYS: usize = if cfg!(test) { 7 } else { 1 << 16 };

/// The rows of a snapshot batch `width` columns wide that live: all of a
/// full snapshot's, those its liveness column (one more, last) says of
/// one an incremental checkpoint wrote, without the column. `what` names
/// the operator in errors.
pub fn live_rows(batch: &RecordBatch, width: usize, what: &str) -> sluice_types::Result<RecordBatch> {
    match batch.num_columns() {
        n if n == width => Ok(batch.clone()),
        n if n == width + 1 => {
            let live = batch
                .column(width)
                .as_any()
                .downcast_ref::<arrow::array::BooleanArray>()
                .ok_or_else(|| sluice_types::Error::internal(format!("{what} snapshot: bad liveness column")))?;
            let live = arrow::compute::filter_record_batch(batch, live)?;
            Ok(live.project(&(0..width).collect::<Vec<_>>())?)
        }
        n => Err(sluice_types::Error::internal(format!(
            "{what} snapshot: {n} columns, {width} expected"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use std::sync::Arc;

    fn batch(rows: usize) -> RecordBatch {
        let a = Int64Array::from_iter_values(0..rows as i64);
        RecordBatch::try_from_iter([("a", Arc::new(a) as arrow::array::ArrayRef)]).unwrap()
    }

    fn live(inc: &Increment) -> Vec<(u64, Vec<bool>)> {
        inc.held.iter().map(|h| (h.number, h.live.iter().collect())).collect()
    }

    #[test]
    fn a_key_written_again_or_gone_leaves_dead_rows_and_an_empty_batch_goes() {
        let mut l = Batches::default();
        // Checkpoint 1: a (2 rows), b (1), c (1).
        let (inc, first) = l.write(1, vec![(vec![2, 1, 1], batch(4))]);
        let [a, b, c] = first[0][..] else {
            panic!("three places")
        };
        assert!(inc.held.is_empty());
        assert_eq!(inc.new[0].0, 0);
        // Checkpoint 2: a changed (3 rows now), c gone.
        l.forget(c);
        l.forget(a);
        let (inc, _) = l.write(2, vec![(vec![3], batch(3))]);
        assert_eq!(live(&inc), vec![(0, vec![false, false, true, false])]);
        assert_eq!(inc.new[0].0, 1);
        assert_eq!(l.held_rows(), 7);
        // Checkpoint 3: nothing changed: references only.
        let (inc, _) = l.write(3, Vec::new());
        assert_eq!(
            live(&inc),
            vec![(0, vec![false, false, true, false]), (1, vec![true; 3])]
        );
        // b goes: batch 0 holds nothing live and is forgotten.
        l.forget(b);
        let (inc, _) = l.write(4, Vec::new());
        assert_eq!(live(&inc), vec![(1, vec![true; 3])]);
    }

    #[test]
    fn rows_held_past_twice_the_live_ones_and_the_slack_are_forgotten() {
        let mut l = Batches::default();
        let n = 2000;
        let (_, places) = l.write(1, vec![(vec![1; n], batch(n))]);
        for p in &places[0][..1500] {
            l.forget(*p);
        }
        // 2 000 rows held, 500 live: within 2 × 500 + 1 024.
        assert!(!l.compact(500));
        for p in &places[0][1500..1600] {
            l.forget(*p);
        }
        // 400 live: 2 000 > 1 824.
        assert!(l.compact(400));
        assert_eq!(l.held_rows(), 0);
        assert!(l.write(2, Vec::new()).0.held.is_empty());
    }

    /// Places given by [`Batches::write`] name each key's rows: forgetting
    /// one kills those rows only, a batch with none live goes, and a
    /// compaction forgets every batch.
    #[test]
    fn a_forgotten_place_kills_its_rows_only() {
        let mut b = Batches::default();
        let (inc, places) = b.write(1, vec![(vec![2, 1, 3], batch(6)), (vec![1], batch(1))]);
        assert_eq!(inc.new.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [0, 1]);
        let at = |p: Place| (p.number(), p.first, p.rows);
        assert_eq!(at(places[0][2]), (0, 3, 3));
        assert_eq!(at(places[1][0]), (1, 0, 1));
        assert_eq!(std::mem::size_of::<Option<Place>>(), 12);
        b.forget(places[0][1]);
        b.forget(places[1][0]);
        let (inc, none) = b.write(2, Vec::new());
        assert!(none.is_empty());
        assert_eq!(live(&inc), vec![(0, vec![true, true, false, true, true, true])]);
        assert_eq!(b.held_rows(), 6);
        // 6 held rows, 5 live: no compaction; with none live (the state
        // emptied some other way) past the slack, all go.
        assert!(!b.compact(5));
        let (_, more) = b.write(3, vec![(vec![COMPACT_SLACK as u32], batch(COMPACT_SLACK))]);
        assert_eq!(more[0][0].number(), 2, "numbers are never reused");
        assert!(b.compact(0));
        assert_eq!(b.held_rows(), 0);
    }

    /// An operator's state in these tests: each key's place.
    type Places = std::collections::BTreeMap<Box<[u8]>, Option<Place>>;

    fn take_place(state: &mut Places, key: &[u8]) -> Option<Option<Place>> {
        state.get_mut(key).map(Option::take)
    }

    /// The first checkpoint of many keys asks for their rows
    /// [`SNAPSHOT_KEYS`] keys at a time and writes a batch per answer; a
    /// key changed later is then dead in its own batch only.
    #[test]
    fn many_keys_are_written_in_batches_of_snapshot_keys() {
        let n = 2 * SNAPSHOT_KEYS + 5;
        let keys: Vec<Box<[u8]>> = (0..n as u32).map(|k| k.to_be_bytes().to_vec().into()).collect();
        let mut state: Places = keys.iter().map(|k| (k.clone(), None)).collect();
        let value = |k: &[u8]| u32::from_be_bytes(k.try_into().unwrap()) as i64;
        let asked = std::cell::RefCell::new(Vec::new());
        // Two rows a key, each its key's number.
        let rows = |ks: &[Box<[u8]>]| {
            asked.borrow_mut().push(ks.len());
            let a = Int64Array::from_iter_values(ks.iter().flat_map(|k| [value(k), value(k)]));
            Ok(Some((vec![2; ks.len()], vec![Arc::new(a) as arrow::array::ArrayRef])))
        };
        let mut c = ChangedKeys::default();
        let all = c.keys_to_write(2 * n, &mut state, |_| keys.clone(), take_place);
        let (inc, places) = c.write(1, all, rows).unwrap();
        assert_eq!(*asked.borrow(), [SNAPSHOT_KEYS, SNAPSHOT_KEYS, 5]);
        assert_eq!(inc.new.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(places.len(), n);
        state.extend(places.into_iter().map(|(k, p)| (k, Some(p))));
        let written: Vec<i64> = inc
            .new
            .iter()
            .flat_map(|(_, b)| {
                assert_eq!(b.num_columns(), 2, "the rows and the liveness");
                use arrow::array::AsArray;
                b.column(0)
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .values()
                    .to_vec()
            })
            .collect();
        let expected: Vec<i64> = (0..n as i64).flat_map(|k| [k, k]).collect();
        assert_eq!(written, expected);

        let k = SNAPSHOT_KEYS + 3;
        c.mark(&keys[k]);
        asked.borrow_mut().clear();
        let changed = c.keys_to_write(2 * n, &mut state, |_| unreachable!("not every key"), take_place);
        assert_eq!(changed, [keys[k].clone()]);
        let (inc, places) = c.write(2, changed, rows).unwrap();
        assert_eq!(*asked.borrow(), [1]);
        assert_eq!(inc.new.len(), 1);
        assert_eq!(inc.new[0].0, 3);
        assert_eq!(places[0].1.number(), 3);
        let dead: Vec<(u64, usize)> = inc
            .held
            .iter()
            .flat_map(|h| {
                h.live
                    .iter()
                    .enumerate()
                    .filter(|(_, l)| !l)
                    .map(|(r, _)| (h.number, r))
            })
            .collect();
        assert_eq!(dead, [(1, 6), (1, 7)], "key {k}'s two rows in the second batch");
    }

    /// Changes are kept only once a checkpoint was written (the first
    /// writes every key, and with checkpoints off none ever is written);
    /// after it, a checkpoint writes the keys changed, and the rows of a
    /// key gone (its place forgotten as it went) are dead.
    #[test]
    fn changed_keys_are_kept_from_the_first_checkpoint_on() {
        let key = |k: u8| -> Box<[u8]> { vec![k].into() };
        let mut state: Places = (0..5).map(|k| (key(k), None)).collect();
        let mut c = ChangedKeys::default();
        for k in 0..5 {
            c.mark(&[k]);
        }
        assert_eq!(c.pending(), 0, "no checkpoint yet: nothing kept");
        let write = |c: &mut ChangedKeys, state: &mut Places, id| {
            let keys = c.keys_to_write(
                state.len(),
                state,
                |s| {
                    // In an order of its own, as a hash map's.
                    let mut keys: Vec<Box<[u8]>> = s.keys().cloned().collect();
                    keys.reverse();
                    keys
                },
                take_place,
            );
            let written: Vec<u8> = keys.iter().map(|k| k[0]).collect();
            let (inc, places) = c
                .write(id, keys, |keys| {
                    let n = keys.len();
                    let a = Arc::new(Int64Array::from_iter_values(0..n as i64)) as arrow::array::ArrayRef;
                    Ok(Some((vec![1; n], vec![a])))
                })
                .unwrap();
            state.extend(places.into_iter().map(|(k, p)| (k, Some(p))));
            (written, inc)
        };
        let (first, inc) = write(&mut c, &mut state, 1);
        assert_eq!(first, vec![4, 3, 2, 1, 0], "the first checkpoint writes every key");
        assert!(inc.held.is_empty());
        c.mark(&[3]);
        c.mark(&[3]);
        let gone = state.remove(&key(4)).flatten();
        c.forget(gone);
        c.mark(&[4]);
        assert_eq!(c.pending(), 2);
        let (written, inc) = write(&mut c, &mut state, 2);
        assert_eq!(written, vec![3], "then only the changed ones; 4 is gone");
        // In the first batch, 4's row (gone) and 3's (written again) are dead.
        assert_eq!(live(&inc), vec![(0, vec![false, false, true, true, true])]);
        assert_eq!(c.pending(), 0);
    }

    /// A compaction voids every place given before: the checkpoint that
    /// compacts writes every key again, and forgetting an old place (a key
    /// gone before its new place reached it) is harmless.
    #[test]
    fn places_given_before_a_compaction_are_void() {
        let mut b = Batches::default();
        let (_, old) = b.write(1, vec![(vec![1; 2000], batch(2000))]);
        for p in &old[0][..1500] {
            b.forget(*p);
        }
        assert!(b.compact(400));
        let (_, new) = b.write(2, vec![(vec![1; 400], batch(400))]);
        b.forget(old[0][1900]);
        b.forget(new[0][0]);
        let (inc, _) = b.write(3, Vec::new());
        let mut expected = vec![true; 400];
        expected[0] = false;
        assert_eq!(live(&inc), vec![(1, expected)]);
    }
}
