//! Incremental snapshots of keyed state that only grows and expires: a
//! value whose batches, once stored, never change except in which of their
//! rows still live — a stream join's stored rows. A checkpoint writes the
//! batches stored since the task's previous snapshot in full, and for each
//! older batch still held only a reference — the checkpoint whose file
//! holds it, its number, its rows — and its rows' liveness now, one bit a
//! row. Reading a checkpoint ([`super::manifest::read_checkpoint`])
//! resolves the references from the task's files in those checkpoints
//! ([`resolve`]), so a restore (at any parallelism) sees the value a full
//! snapshot would have held.
//!
//! A reference always names the checkpoint that wrote the batch in full,
//! never one that referenced it: resolving reads each referenced file once,
//! without following chains. The manifest lists, per task file, the files
//! it references with their lengths and CRC-32s (the writer knows them: it
//! wrote them), and pruning keeps every file a retained checkpoint
//! references (and of an older checkpoint nothing else).
//!
//! The entries of value `key` in a task's file:
//!
//! ```text
//! key              keyed batches: the new batches, in order (absent when none)
//! key#new          batch (number UInt64, rows UInt64): each new batch
//! key#refs         batch (checkpoint UInt64, number UInt64, rows UInt64): each referenced batch, in order
//! key#live         batch (live Boolean): the referenced batches' liveness, concatenated
//! key#live_column  bytes: u32 LE, the batches' liveness column, which the references' bits replace
//! ```
//!
//! A resolved value holds the referenced batches first, then the new ones:
//! a batch is referenced only once it was written, so this is the order
//! they were stored in.

use super::key_groups::{KeyGroups, KeyedBatches};
use super::state::{StateValue, TaskState};
use arrow::array::{Array, ArrayRef, BooleanArray, UInt16Array, UInt64Array};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::{Field, Schema};
use arrow::record_batch::RecordBatch;
use sluice_types::{Error, Result};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

const NEW: &str = "#new";
const REFS: &str = "#refs";
const LIVE: &str = "#live";
const LIVE_COLUMN: &str = "#live_column";

/// A batch written in full by an earlier checkpoint and still held.
#[derive(Debug, Clone)]
pub struct Held {
    /// The checkpoint whose file holds it.
    pub checkpoint: u64,
    /// Its number among the value's batches (as written then).
    pub number: u64,
    /// Which of its rows live now (its length is the batch's rows).
    pub live: BooleanBuffer,
}

/// What a task's snapshot holds of an incremental value.
#[derive(Debug, Clone, Default)]
pub struct Increment {
    /// Batches not written before, with their numbers, in order; each
    /// carries its own liveness column.
    pub new: Vec<(u64, RecordBatch)>,
    /// Older batches, in order, all before the new ones.
    pub held: Vec<Held>,
}

fn corrupt(what: String) -> Error {
    Error::internal(format!("corrupt task state: {what}"))
}

fn u64s(values: impl IntoIterator<Item = u64>) -> ArrayRef {
    Arc::new(UInt64Array::from_iter_values(values))
}

fn table(names: &[&str], columns: Vec<ArrayRef>) -> Result<RecordBatch> {
    let fields: Vec<Field> = names
        .iter()
        .zip(&columns)
        .map(|(n, c)| Field::new(*n, c.data_type().clone(), false))
        .collect();
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?)
}

/// Snapshot rows as a batch: `columns` named `c0…` (nullable), then with
/// `live` an all-true liveness column `live` (the format's, for a value
/// written incrementally), as many rows as the columns have.
pub fn snapshot_rows(mut columns: Vec<ArrayRef>, live: bool) -> Result<RecordBatch> {
    let rows = columns.first().map_or(0, |c| c.len());
    let mut fields: Vec<Field> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| Field::new(format!("c{i}"), c.data_type().clone(), true))
        .collect();
    if live {
        fields.push(Field::new("live", arrow::datatypes::DataType::Boolean, false));
        columns.push(Arc::new(BooleanArray::new(BooleanBuffer::new_set(rows), None)));
    }
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?)
}

impl TaskState {
    /// Stores keyed value `key` incrementally (see the module doc): its key
    /// is `key_columns` and column `live_column` of every batch says which
    /// rows live. Nothing is stored when the increment is empty.
    pub fn put_incremental(
        &mut self,
        key: &str,
        key_columns: Vec<usize>,
        live_column: usize,
        inc: Increment,
    ) -> Result<()> {
        if inc.new.is_empty() && inc.held.is_empty() {
            return Ok(());
        }
        let new = table(
            &["number", "rows"],
            vec![
                u64s(inc.new.iter().map(|(n, _)| *n)),
                u64s(inc.new.iter().map(|(_, b)| b.num_rows() as u64)),
            ],
        )?;
        let refs = table(
            &["checkpoint", "number", "rows"],
            vec![
                u64s(inc.held.iter().map(|h| h.checkpoint)),
                u64s(inc.held.iter().map(|h| h.number)),
                u64s(inc.held.iter().map(|h| h.live.len() as u64)),
            ],
        )?;
        let bits: BooleanBuffer = inc.held.iter().flat_map(|h| h.live.iter()).collect();
        let live = table(&["live"], vec![Arc::new(BooleanArray::new(bits, None))])?;
        self.put_batch(&format!("{key}{NEW}"), new);
        self.put_batch(&format!("{key}{REFS}"), refs);
        self.put_batch(&format!("{key}{LIVE}"), live);
        self.put_bytes(
            &format!("{key}{LIVE_COLUMN}"),
            (live_column as u32).to_le_bytes().to_vec(),
        );
        if !inc.new.is_empty() {
            self.put_keyed(key, inc.new.into_iter().map(|(_, b)| b).collect(), key_columns);
        }
        Ok(())
    }

    /// The checkpoints whose files this state references (empty for a
    /// full snapshot or a resolved one).
    pub fn referenced_checkpoints(&self) -> Result<BTreeSet<u64>> {
        let mut out = BTreeSet::new();
        for key in self.incremental_keys() {
            let refs = Refs::of(self, &key)?;
            out.extend(refs.checkpoint.values().iter().copied());
        }
        Ok(out)
    }

    /// The values stored incrementally and not resolved yet.
    fn incremental_keys(&self) -> Vec<String> {
        self.entries
            .keys()
            .filter_map(|k| k.strip_suffix(LIVE_COLUMN).map(str::to_string))
            .collect()
    }
}

/// A value's references, read back.
struct Refs {
    checkpoint: UInt64Array,
    number: UInt64Array,
    rows: UInt64Array,
}

fn column(batch: &RecordBatch, at: usize, what: &str) -> Result<UInt64Array> {
    batch
        .columns()
        .get(at)
        .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
        .cloned()
        .ok_or_else(|| corrupt(format!("{what} column {at}")))
}

impl Refs {
    fn of(state: &TaskState, key: &str) -> Result<Refs> {
        let b = state
            .batch(&format!("{key}{REFS}"))
            .ok_or_else(|| corrupt(format!("{key} has no references entry")))?;
        Ok(Refs {
            checkpoint: column(b, 0, "references")?,
            number: column(b, 1, "references")?,
            rows: column(b, 2, "references")?,
        })
    }
}

/// Value `key`'s new batches in `state` (a task's file as decoded, its
/// own references unresolved), split back into the batches as numbered:
/// number → (rows, their key groups).
fn written(state: &TaskState, key: &str) -> Result<HashMap<u64, (RecordBatch, UInt16Array)>> {
    let ids = state
        .batch(&format!("{key}{NEW}"))
        .ok_or_else(|| corrupt(format!("{key} has no batch list")))?;
    let (numbers, rows) = (column(ids, 0, "batch list")?, column(ids, 1, "batch list")?);
    let (batches, groups) = match state.entries.get(key) {
        Some(StateValue::Keyed(KeyedBatches {
            batches,
            groups: KeyGroups::Stored(groups),
        })) => (batches.as_slice(), groups.as_slice()),
        None => (&[][..], &[][..]),
        Some(_) => return Err(corrupt(format!("{key} is not keyed batches"))),
    };
    let total: usize = batches.iter().map(|b| b.num_rows()).sum();
    if rows.values().iter().sum::<u64>() != total as u64 || groups.len() != batches.len() {
        return Err(corrupt(format!("{key}: the batch list does not match its rows")));
    }
    // Decoding gathers small batches: cut the rows back by the list.
    let mut out = HashMap::with_capacity(numbers.len());
    let (mut at, mut offset) = (0usize, 0usize);
    for (number, n) in numbers.values().iter().zip(rows.values()) {
        let mut n = *n as usize;
        let mut pieces = Vec::new();
        let mut piece_groups = Vec::new();
        while n > 0 {
            let b = &batches[at];
            let take = n.min(b.num_rows() - offset);
            pieces.push(b.slice(offset, take));
            piece_groups.push(groups[at].slice(offset, take));
            (offset, n) = (offset + take, n - take);
            if offset == b.num_rows() {
                (at, offset) = (at + 1, 0);
            }
        }
        let (batch, g) = match pieces.len() {
            1 => (pieces.pop().expect("one"), piece_groups.pop().expect("one")),
            _ => {
                let schema = batches[0].schema();
                let g: Vec<&dyn Array> = piece_groups.iter().map(|g| g as &dyn Array).collect();
                let g = arrow::compute::concat(&g)?;
                let g = g.as_any().downcast_ref::<UInt16Array>().expect("u16").clone();
                (arrow::compute::concat_batches(&schema, &pieces)?, g)
            }
        };
        if out.insert(*number, (batch, g)).is_some() {
            return Err(corrupt(format!("{key}: batch {number} listed twice")));
        }
    }
    Ok(out)
}

/// Resolves every incremental value of `state` (a task's file as decoded)
/// from `earlier`: the same task's files in the checkpoints it references,
/// as decoded. Afterwards the state holds each value as a full snapshot
/// would (a value without references only loses its bookkeeping entries).
pub fn resolve(state: &mut TaskState, earlier: &BTreeMap<u64, TaskState>) -> Result<()> {
    for key in state.incremental_keys() {
        let refs = Refs::of(state, &key)?;
        if refs.number.is_empty() {
            // Only new batches: the value is already whole.
            for aux in [NEW, REFS, LIVE, LIVE_COLUMN] {
                state.entries.remove(&format!("{key}{aux}"));
            }
            continue;
        }
        let live = state
            .batch(&format!("{key}{LIVE}"))
            .and_then(|b| b.columns().first())
            .and_then(|c| c.as_any().downcast_ref::<BooleanArray>())
            .cloned()
            .ok_or_else(|| corrupt(format!("{key} has no liveness")))?;
        let live_column = state
            .bytes(&format!("{key}{LIVE_COLUMN}"))
            .and_then(|b| b.try_into().ok())
            .map(|b: [u8; 4]| u32::from_le_bytes(b) as usize)
            .ok_or_else(|| corrupt(format!("{key} has no liveness column")))?;
        if refs.rows.values().iter().sum::<u64>() != live.len() as u64 {
            return Err(corrupt(format!("{key}: liveness does not match the references")));
        }
        // Each referenced checkpoint's batches of this value, split once.
        let mut sources: BTreeMap<u64, HashMap<u64, (RecordBatch, UInt16Array)>> = BTreeMap::new();
        for c in refs.checkpoint.values().iter().collect::<BTreeSet<_>>() {
            let file = earlier
                .get(c)
                .ok_or_else(|| corrupt(format!("{key} references checkpoint {c}, which was not read")))?;
            sources.insert(*c, written(file, &key)?);
        }
        let mut batches = Vec::with_capacity(refs.number.len());
        let mut groups = Vec::with_capacity(refs.number.len());
        let mut offset = 0;
        for i in 0..refs.number.len() {
            let (c, number, rows) = (
                refs.checkpoint.value(i),
                refs.number.value(i),
                refs.rows.value(i) as usize,
            );
            let (batch, g) = sources[&c]
                .get(&number)
                .ok_or_else(|| corrupt(format!("{key}: checkpoint {c} does not hold batch {number}")))?;
            if batch.num_rows() != rows || live_column >= batch.num_columns() {
                return Err(corrupt(format!(
                    "{key}: batch {number} of checkpoint {c} is not as referenced"
                )));
            }
            let mut columns = batch.columns().to_vec();
            columns[live_column] = Arc::new(live.slice(offset, rows));
            if columns[live_column].data_type() != batch.column(live_column).data_type() {
                return Err(corrupt(format!("{key}: column {live_column} is not a liveness column")));
            }
            offset += rows;
            batches.push(RecordBatch::try_new(batch.schema(), columns)?);
            groups.push(g.clone());
        }
        match state.entries.remove(&key) {
            Some(StateValue::Keyed(KeyedBatches {
                batches: b,
                groups: KeyGroups::Stored(g),
            })) => {
                batches.extend(b);
                groups.extend(g);
            }
            None => {}
            Some(_) => return Err(corrupt(format!("{key} is not keyed batches"))),
        }
        for aux in [NEW, REFS, LIVE, LIVE_COLUMN] {
            state.entries.remove(&format!("{key}{aux}"));
        }
        if !batches.is_empty() {
            state.entries.insert(
                key,
                StateValue::Keyed(KeyedBatches {
                    batches,
                    groups: KeyGroups::Stored(groups),
                }),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;

    fn batch(keys: std::ops::Range<i64>, live: impl Fn(i64) -> bool) -> RecordBatch {
        let k = Int64Array::from_iter_values(keys.clone());
        let l: BooleanArray = keys.map(|k| Some(live(k))).collect();
        table(&["k", "live"], vec![Arc::new(k), Arc::new(l)]).unwrap()
    }

    fn keys_and_live(state: &TaskState, key: &str) -> Vec<(i64, bool)> {
        state
            .rows(key)
            .iter()
            .flat_map(|b| {
                let k = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().clone();
                let l = b.column(1).as_any().downcast_ref::<BooleanArray>().unwrap().clone();
                (0..b.num_rows()).map(move |r| (k.value(r), l.value(r)))
            })
            .collect()
    }

    fn encoded(mut s: TaskState) -> TaskState {
        s.key_groups = 256;
        TaskState::decode(&s.encode().unwrap()).unwrap()
    }

    /// Checkpoint 1 writes three batches in full (two of 100 000 rows, so
    /// decoding gathers them across IPC batches); checkpoint 2 references
    /// two of them with new liveness and adds one; resolved, it holds what
    /// a full snapshot of checkpoint 2 holds, in order.
    #[test]
    fn references_resolve_to_the_full_value() {
        let mut first = TaskState::default();
        let inc = Increment {
            new: vec![
                (0, batch(0..100_000, |_| true)),
                (1, batch(100_000..100_003, |k| k != 100_001)),
                (2, batch(200_000..300_000, |_| true)),
            ],
            held: vec![],
        };
        first.put_incremental("j", vec![0], 1, inc).unwrap();
        assert!(first.referenced_checkpoints().unwrap().is_empty());
        let first = encoded(first);

        let mut second = TaskState::default();
        let bits = |r: std::ops::Range<i64>, f: fn(i64) -> bool| r.map(f).collect::<BooleanBuffer>();
        let inc = Increment {
            new: vec![(3, batch(400..410, |_| true))],
            held: vec![
                Held {
                    checkpoint: 1,
                    number: 1,
                    live: bits(100_000..100_003, |k| k == 100_002),
                },
                Held {
                    checkpoint: 1,
                    number: 2,
                    live: bits(200_000..300_000, |k| k % 7 != 0),
                },
            ],
        };
        second.put_incremental("j", vec![0], 1, inc).unwrap();
        second.put_bytes("other", vec![1, 2]);
        let mut second = encoded(second);
        assert_eq!(second.referenced_checkpoints().unwrap(), BTreeSet::from([1]));
        assert!(
            resolve(&mut second.clone(), &BTreeMap::new()).is_err(),
            "not without checkpoint 1"
        );

        resolve(&mut second, &BTreeMap::from([(1, first)])).unwrap();
        assert!(second.referenced_checkpoints().unwrap().is_empty());
        let want: Vec<(i64, bool)> = (100_000..100_003)
            .map(|k| (k, k == 100_002))
            .chain((200_000..300_000).map(|k| (k, k % 7 != 0)))
            .chain((400..410).map(|k| (k, true)))
            .collect();
        assert_eq!(keys_and_live(&second, "j"), want);
        assert_eq!(second.bytes("other"), Some(&[1u8, 2][..]));
        assert_eq!(second.entries.len(), 2, "only the value and the other entry are left");
        // The key groups came along, one array per batch, matching its rows.
        let Some(StateValue::Keyed(k)) = second.entries.get("j") else {
            panic!("keyed")
        };
        let KeyGroups::Stored(g) = &k.groups else {
            panic!("stored groups")
        };
        let lens: Vec<usize> = g.iter().map(|g| g.len()).collect();
        assert_eq!(lens, k.batches.iter().map(|b| b.num_rows()).collect::<Vec<_>>());
        let relabelled = crate::checkpoint::key_groups::label(&k.batches[1], &[0], 256).unwrap();
        assert_eq!(g[1], relabelled);
    }

    #[test]
    fn a_missing_or_mismatched_reference_is_an_error_not_lost_rows() {
        let mut first = TaskState::default();
        first
            .put_incremental(
                "j",
                vec![0],
                1,
                Increment {
                    new: vec![(0, batch(0..5, |_| true))],
                    held: vec![],
                },
            )
            .unwrap();
        let first = encoded(first);
        let second = |number: u64, rows: i64| {
            let mut s = TaskState::default();
            let held = vec![Held {
                checkpoint: 1,
                number,
                live: (0..rows).map(|_| true).collect(),
            }];
            s.put_incremental("j", vec![0], 1, Increment { new: vec![], held })
                .unwrap();
            encoded(s)
        };
        let err =
            |mut s: TaskState, earlier: &BTreeMap<u64, TaskState>| resolve(&mut s, earlier).unwrap_err().to_string();
        let earlier = BTreeMap::from([(1, first)]);
        assert!(err(second(0, 5), &BTreeMap::new()).contains("checkpoint 1"));
        assert!(err(second(7, 5), &earlier).contains("does not hold batch 7"));
        assert!(err(second(0, 4), &earlier).contains("not as referenced"));
        let mut ok = second(0, 5);
        resolve(&mut ok, &earlier).unwrap();
        assert_eq!(keys_and_live(&ok, "j").len(), 5);
    }
}
