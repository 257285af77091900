//! Routing a task's output to the instances of its downstream operators:
//! forward, hash of key columns, single, round robin. Control messages go
//! to every downstream instance.
//!
//! Hash partitioning routes by key group ([`sluice_plan::key_groups`]): a
//! row goes to key group `hash(key) % key_groups`, and the group to the
//! instance whose contiguous range holds it — a mask, a multiply and a
//! shift per row. Keyed state is stored per key group with the same hash
//! ([`key_groups`]), so a restore at another parallelism finds every key's
//! state on the instance its rows now go to.
//!
//! Operator chaining: a filter/projection whose only input is a forward
//! edge runs inside its upstream task, on the upstream's output, with no
//! channel in between ([`Chained`]); it routes its own output on. A row then
//! crosses one channel (and one task wake-up) less, and the chained
//! operator costs no task of its own. It keeps its metrics.

use crate::channel::{ChannelSender, Closed};
use crate::message::Message;
use crate::metrics::TaskMetrics;
use arrow::array::UInt32Array;
use arrow::compute::take_record_batch;
use arrow::record_batch::RecordBatch;
use datafusion::common::hash_utils::{RandomState, create_hashes};
use sluice_plan::{KeyGroupRouter, Partitioning};
use sluice_types::{Error, OperatorId, Result, Watermark};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// The hash seed shared by every instance, so the same key always goes to
/// the same downstream instance.
const HASH_SEED: RandomState = RandomState::with_seed(0x5107_CE11);

/// The routing hash of each row's key, `arrays` being the key columns (the
/// same function for routing and for storing keyed state).
pub fn key_hashes(arrays: &[arrow::array::ArrayRef], rows: usize) -> Result<Vec<u64>> {
    let mut hashes = vec![0u64; rows];
    create_hashes(arrays, &HASH_SEED, &mut hashes).map_err(|e| Error::internal(e.to_string()))?;
    Ok(hashes)
}

/// The key group of each row whose key columns are `arrays`.
pub fn key_groups(arrays: &[arrow::array::ArrayRef], rows: usize, key_groups: u32) -> Result<Vec<u16>> {
    let router = KeyGroupRouter::new(key_groups, 1);
    let hashes = key_hashes(arrays, rows)?;
    Ok(hashes.iter().map(|h| router.key_group(*h) as u16).collect())
}

/// Which downstream instance each row of `batch` goes to, by the key group
/// of `columns`.
pub fn hash_partition(batch: &RecordBatch, columns: &[usize], router: &KeyGroupRouter) -> Result<Vec<u32>> {
    let arrays: Vec<_> = columns.iter().map(|c| batch.column(*c).clone()).collect();
    let hashes = key_hashes(&arrays, batch.num_rows())?;
    Ok(hashes.iter().map(|h| router.instance(*h)).collect())
}

/// Splits `batch` into one batch per partition (empty ones omitted).
pub fn split_by_partition(
    batch: &RecordBatch,
    targets: &[u32],
    partitions: usize,
) -> Result<Vec<(usize, RecordBatch)>> {
    let mut indices: Vec<Vec<u32>> = vec![Vec::new(); partitions];
    for (row, target) in targets.iter().enumerate() {
        indices[*target as usize].push(row as u32);
    }
    let mut out = Vec::new();
    for (partition, rows) in indices.into_iter().enumerate() {
        if rows.is_empty() {
            continue;
        }
        if rows.len() == batch.num_rows() {
            out.push((partition, batch.clone()));
            continue;
        }
        out.push((partition, take_record_batch(batch, &UInt32Array::from(rows))?));
    }
    Ok(out)
}

/// One outgoing edge: its partitioning and a sender per downstream instance.
pub struct OutputEdge {
    pub partitioning: Partitioning,
    pub senders: Vec<ChannelSender>,
    /// This task's instance index (for forward edges).
    pub instance: usize,
    next_round_robin: usize,
    /// Key groups to downstream instances (hash edges).
    router: KeyGroupRouter,
}

impl OutputEdge {
    /// `key_groups`: the DAG's (what hash edges route by).
    pub fn new(partitioning: Partitioning, senders: Vec<ChannelSender>, instance: usize, key_groups: u32) -> Self {
        let router = KeyGroupRouter::new(key_groups, senders.len() as u32);
        OutputEdge {
            partitioning,
            senders,
            instance,
            next_round_robin: instance,
            router,
        }
    }
}

/// Which operator instance of a task failed: the task's own unless a
/// chained operator's expression failed (set once, read by the deployer).
pub type Blame = Arc<OnceLock<(OperatorId, u32)>>;

/// What a chained operator does to each batch (a filter/projection:
/// `project::ProjectOperator`).
pub trait BatchMap: Send {
    fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch>;
}

/// A filter/projection running inside its upstream's task (see the module
/// doc): applied to every batch the upstream emits, then routed by its own
/// [`Output`].
pub struct Chained {
    pub operator: OperatorId,
    pub instance: u32,
    pub project: Box<dyn BatchMap>,
    /// The chained operator's own counters (rows, watermark).
    pub metrics: Arc<TaskMetrics>,
    pub output: Output,
    /// Set to this operator when its expression fails.
    pub blame: Blame,
}

/// All of a task's outgoing edges, and the operators chained into it.
pub struct Output {
    edges: Vec<OutputEdge>,
    chained: Vec<Chained>,
    metrics: Arc<TaskMetrics>,
}

impl Output {
    pub fn new(edges: Vec<OutputEdge>, metrics: Arc<TaskMetrics>) -> Self {
        Self::with_chained(edges, Vec::new(), metrics)
    }

    /// An output that also feeds the `chained` operators.
    pub fn with_chained(edges: Vec<OutputEdge>, chained: Vec<Chained>, metrics: Arc<TaskMetrics>) -> Self {
        Output {
            edges,
            chained,
            metrics,
        }
    }

    /// Whether anything is downstream (a sink has no edges).
    pub fn has_downstream(&self) -> bool {
        !self.edges.is_empty()
    }

    /// Sends a batch downstream, routed per edge. Waits for credits. Fails
    /// when downstream went away or a chained operator's expression fails.
    pub async fn send_batch(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.metrics.add_rows_out(batch.num_rows());
        let started = Instant::now();
        self.send_on_edges(&batch).await?;
        let waited = started.elapsed().as_micros() as u64;
        self.metrics.backpressure_us.fetch_add(waited, Ordering::Relaxed);
        for c in &mut self.chained {
            c.metrics.add_rows_in(batch.num_rows());
            crate::fault::check(&c.metrics);
            let out = match c.project.apply(&batch) {
                Ok(out) => out,
                Err(e) => {
                    let _ = c.blame.set((c.operator, c.instance));
                    return Err(e);
                }
            };
            // Boxed: the chain's outputs nest.
            Box::pin(c.output.send_batch(out)).await?;
        }
        Ok(())
    }

    async fn send_on_edges(&mut self, batch: &RecordBatch) -> Result<(), Closed> {
        for edge in &mut self.edges {
            let n = edge.senders.len();
            match &edge.partitioning {
                Partitioning::Forward => {
                    let target = edge.instance.min(n - 1);
                    edge.senders[target].send(Message::Data(batch.clone())).await?;
                }
                Partitioning::Single => edge.senders[0].send(Message::Data(batch.clone())).await?,
                Partitioning::RoundRobin => {
                    let target = edge.next_round_robin % n;
                    edge.next_round_robin = edge.next_round_robin.wrapping_add(1);
                    edge.senders[target].send(Message::Data(batch.clone())).await?;
                }
                Partitioning::Hash(columns) => {
                    if n == 1 {
                        edge.senders[0].send(Message::Data(batch.clone())).await?;
                        continue;
                    }
                    let targets = hash_partition(batch, columns, &edge.router).map_err(|_| Closed)?;
                    for (target, part) in split_by_partition(batch, &targets, n).map_err(|_| Closed)? {
                        edge.senders[target].send(Message::Data(part)).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Sends a control message to every downstream instance (through the
    /// chained operators, which pass control messages on: a single-input
    /// filter/projection's watermark is its input's).
    pub async fn broadcast(&mut self, message: Message) -> Result<(), Closed> {
        debug_assert!(!matches!(message, Message::Data(_)), "data is routed, not broadcast");
        for edge in &self.edges {
            for sender in &edge.senders {
                sender.send(message.clone()).await?;
            }
        }
        for c in &mut self.chained {
            match &message {
                Message::Watermark(Watermark(w)) => {
                    c.metrics.watermark_ms.fetch_max(*w, Ordering::Relaxed);
                }
                Message::EndOfInput => {
                    c.metrics.watermark_ms.store(Watermark::MAX.0, Ordering::Relaxed);
                }
                _ => {}
            }
            Box::pin(c.output.broadcast(message.clone())).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("s", DataType::Utf8, false),
        ]));
        let keys = Int64Array::from_iter_values((0..1000).map(|i| i % 37));
        let s = StringArray::from_iter_values((0..1000).map(|i| format!("v{i}")));
        RecordBatch::try_new(schema, vec![Arc::new(keys), Arc::new(s)]).unwrap()
    }

    #[test]
    fn equal_keys_go_to_the_same_partition_and_no_row_is_lost() {
        let b = batch();
        let targets = hash_partition(&b, &[0], &KeyGroupRouter::new(256, 4)).unwrap();
        let keys = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let mut owner = std::collections::HashMap::new();
        for (row, t) in targets.iter().enumerate() {
            let prev = owner.insert(keys.value(row), *t);
            assert!(prev.is_none() || prev == Some(*t), "key split over partitions");
        }
        let parts = split_by_partition(&b, &targets, 4).unwrap();
        let total: usize = parts.iter().map(|(_, p)| p.num_rows()).sum();
        assert_eq!(total, 1000);
        assert!(parts.len() > 1, "37 keys should spread over several of 4 partitions");
        for (p, part) in &parts {
            let ks = part.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            assert!((0..ks.len()).all(|i| owner[&ks.value(i)] == *p as u32));
        }
    }

    /// A row goes to the instance that owns its key's group: the group of
    /// its key in state files and its instance in routing always agree,
    /// at every parallelism.
    #[test]
    fn rows_go_to_the_instance_owning_their_key_group() {
        let b = batch();
        let groups = key_groups(&[b.column(0).clone()], b.num_rows(), 256).unwrap();
        for p in 1..=8u32 {
            let targets = hash_partition(&b, &[0], &KeyGroupRouter::new(256, p)).unwrap();
            for (row, t) in targets.iter().enumerate() {
                let range = sluice_plan::key_group_range(*t, p, 256);
                assert!(range.contains(u32::from(groups[row])), "p={p} row {row}");
            }
        }
        // 37 keys over 256 groups: several groups are used.
        let distinct: std::collections::HashSet<u16> = groups.iter().copied().collect();
        assert!(distinct.len() > 20, "{}", distinct.len());
    }
}
