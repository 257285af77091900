//! Source tasks: pull batches from a [`SourceReader`], generate per-partition
//! watermarks from the declared event-time column, detect idle partitions,
//! and send everything downstream in order.
//!
//! The watermark arithmetic is the pure [`WatermarkGenerator`]; the loop is
//! the async shell around it. With an [`AlignmentGroup`] the loop also holds
//! back an instance that runs too far ahead of its siblings in event time.

use crate::checkpoint::TaskCheckpoint;
use crate::checkpoint::TaskState;
use crate::exchange::Output;
use crate::message::Message;
use crate::message::{Barrier, Mutation};
use crate::metrics::TaskMetrics;
use crate::time::max_timestamp_ms;
use crate::watermark_alignment::AlignmentGroup;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use sluice_plan::WatermarkSpec;
use sluice_types::{Error, Result, Watermark};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How often a held source instance adds to its held time while it waits.
const HOLD_REPORT_INTERVAL: Duration = Duration::from_millis(100);
/// The key of the generator's event-time state in a source's checkpoint
/// (beside the reader's own keys).
const WATERMARKS_KEY: &str = "source.watermarks";

/// What a checkpoint keeps of a [`WatermarkGenerator`]: per partition, the
/// largest event time read and the largest watermark the source provided
/// before the barrier. Without it a restored instance forgot the event time
/// of everything it read before the checkpoint: a partition whose rows
/// were all read then contributes no watermark after a restart, and when
/// every partition is in that state the windows downstream never close.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WatermarkState {
    pub max_event_ms: Vec<Option<i64>>,
    pub explicit: Vec<Option<i64>>,
}

/// What a reader produced.
#[derive(Debug)]
pub enum SourceEvent {
    /// Rows from one of the reader's partitions (`0..partitions()`).
    Data { partition: usize, batch: RecordBatch },
    /// A watermark the source itself knows for one partition (e.g. a derived
    /// stream's log carries its pipeline's watermarks).
    Watermark { partition: usize, watermark: Watermark },
    /// The reader now knows it reads `n` partitions (e.g. after fetching a
    /// topic's metadata); partitions without data hold the watermark back
    /// until they turn idle.
    Partitions(usize),
    /// The reader's input is exhausted (bounded sources).
    End,
}

/// A connector's reader for one source instance. It may own several
/// partitions (e.g. Kafka partitions); each gets its own watermark.
///
/// A reader that wraps another (e.g. [`ComputedColumnsReader`]) must
/// forward `snapshot`, `restore` and `restore_rescaled`: the defaults
/// would silently start the stream over on every restore.
///
/// [`ComputedColumnsReader`]: crate::computed::ComputedColumnsReader
#[async_trait]
pub trait SourceReader: Send {
    /// How many partitions this instance reads, as far as it knows at start
    /// (at least 1; [`SourceEvent::Partitions`] may change it later).
    fn partitions(&self) -> usize;

    /// Waits for the next batch, at most `batch_rows_max` rows. Must be
    /// cancel-safe: the source loop may drop the future to check idleness.
    async fn next(&mut self, batch_rows_max: usize) -> Result<SourceEvent>;

    /// The reader's position after the last event it returned (e.g. the
    /// next Kafka offset per partition), stored in checkpoints. Default:
    /// none (a restored reader starts over).
    fn snapshot(&mut self) -> Result<TaskState> {
        Ok(TaskState::default())
    }

    /// Called before the first [`SourceReader::next`] when restoring from
    /// a checkpoint: go on from the stored position.
    fn restore(&mut self, state: &TaskState) -> Result<()> {
        let _ = state;
        Ok(())
    }

    /// Like [`SourceReader::restore`], after the source's parallelism
    /// changed (`ALTER PIPELINE … SET PARALLELISM`): `parts` are the states
    /// of every instance of the old parallelism; this instance takes the
    /// positions of the partitions it now reads. Default: refused (only
    /// readers whose connector says [`rescalable`] implement it).
    ///
    /// [`rescalable`]: crate::deploy::ConnectorFactory
    fn restore_rescaled(&mut self, parts: &[TaskState]) -> Result<()> {
        let _ = parts;
        Err(Error::internal(
            "this source cannot be restored at another parallelism than its checkpoint's",
        ))
    }
}

/// The key marking a source state packed from every old instance's state
/// (a rescale): its value is the number of parts.
const RESCALED_PARTS_KEY: &str = "__source.rescaled_parts";

/// Packs every old instance's state of a source into one, for a new
/// instance after a rescale ([`unpack_rescaled`] undoes it in the task).
pub fn pack_rescaled(parts: Vec<TaskState>) -> TaskState {
    let mut packed = TaskState::default();
    packed.put_bytes(RESCALED_PARTS_KEY, (parts.len() as u64).to_le_bytes().to_vec());
    for (i, part) in parts.into_iter().enumerate() {
        for (key, value) in part.entries {
            packed.entries.insert(format!("__part.{i}.{key}"), value);
        }
    }
    packed
}

/// The old instances' states packed by [`pack_rescaled`], if `state` is one.
fn unpack_rescaled(state: &TaskState) -> Option<Vec<TaskState>> {
    let n = u64::from_le_bytes(state.bytes(RESCALED_PARTS_KEY)?.try_into().ok()?) as usize;
    let mut parts = vec![TaskState::default(); n];
    for (key, value) in &state.entries {
        let Some(rest) = key.strip_prefix("__part.") else {
            continue;
        };
        let Some((i, key)) = rest.split_once('.') else { continue };
        if let Some(part) = i.parse::<usize>().ok().and_then(|i| parts.get_mut(i)) {
            part.entries.insert(key.to_string(), value.clone());
        }
    }
    Some(parts)
}

/// Per-partition watermarks and idleness of one source instance.
#[derive(Debug, Clone)]
pub struct WatermarkGenerator {
    delay_ms: i64,
    idle_timeout: Duration,
    max_event_ms: Vec<Option<i64>>,
    explicit: Vec<Option<Watermark>>,
    last_data: Vec<Instant>,
    idle: Vec<bool>,
    emitted: Watermark,
    idle_emitted: bool,
}

impl WatermarkGenerator {
    pub fn new(partitions: usize, delay_ms: i64, idle_timeout: Duration, now: Instant) -> Self {
        WatermarkGenerator {
            delay_ms,
            idle_timeout,
            max_event_ms: vec![None; partitions],
            explicit: vec![None; partitions],
            last_data: vec![now; partitions],
            idle: vec![false; partitions],
            emitted: Watermark::MIN,
            idle_emitted: false,
        }
    }

    /// The event-time state a checkpoint keeps.
    pub fn snapshot(&self) -> WatermarkState {
        WatermarkState {
            max_event_ms: self.max_event_ms.clone(),
            explicit: self.explicit.iter().map(|w| w.map(|w| w.0)).collect(),
        }
    }

    /// Starts from a checkpoint's event-time state: the next poll emits the
    /// watermark it implies (once every partition has a time), without
    /// waiting for new rows. Partitions keep their order (a reader numbers
    /// them the same way on every run); more stored than the reader knows
    /// widen the generator until the reader says otherwise.
    pub fn restore(&mut self, state: &WatermarkState, now: Instant) {
        let n = state.max_event_ms.len().max(state.explicit.len());
        if n > self.idle.len() {
            self.resize(n, now);
        }
        for (p, t) in state.max_event_ms.iter().enumerate() {
            self.max_event_ms[p] = *t;
        }
        for (p, w) in state.explicit.iter().enumerate() {
            self.explicit[p] = w.map(Watermark);
        }
    }

    /// The source now reads `partitions` partitions. New ones start active
    /// with no watermark (holding the low watermark back until they have
    /// data or turn idle); removed ones stop counting.
    pub fn resize(&mut self, partitions: usize, now: Instant) {
        let n = partitions.max(1);
        self.max_event_ms.resize(n, None);
        self.explicit.resize(n, None);
        self.last_data.resize(n, now);
        self.idle.resize(n, false);
    }

    /// Records the largest event time of a batch from `partition`.
    pub fn on_data(&mut self, partition: usize, max_event_ms: Option<i64>, now: Instant) {
        if partition >= self.idle.len() {
            self.resize(partition + 1, now);
        }
        self.last_data[partition] = now;
        self.idle[partition] = false;
        self.idle_emitted = false;
        if let Some(t) = max_event_ms {
            let m = &mut self.max_event_ms[partition];
            *m = Some(m.map_or(t, |old| old.max(t)));
        }
    }

    /// Records a watermark the source provided for `partition`.
    pub fn on_source_watermark(&mut self, partition: usize, watermark: Watermark, now: Instant) {
        if partition >= self.idle.len() {
            self.resize(partition + 1, now);
        }
        self.last_data[partition] = now;
        self.idle[partition] = false;
        self.idle_emitted = false;
        let e = &mut self.explicit[partition];
        *e = Some(e.map_or(watermark, |old| old.max(watermark)));
    }

    /// The watermark last emitted (ms), unless every partition is idle or
    /// none has produced one yet: what the instance publishes for alignment.
    pub fn current(&self) -> Option<i64> {
        (self.emitted > Watermark::MIN && !self.idle_emitted).then_some(self.emitted.0)
    }

    /// Restarts the idle clock of every active partition: the instance was
    /// held back (alignment) and read nothing, which is not idleness.
    pub fn touch(&mut self, now: Instant) {
        for p in 0..self.idle.len() {
            if !self.idle[p] {
                self.last_data[p] = now;
            }
        }
    }

    /// Marks partitions idle whose last data is older than the idle timeout.
    pub fn on_tick(&mut self, now: Instant) {
        for p in 0..self.idle.len() {
            if now.duration_since(self.last_data[p]) >= self.idle_timeout {
                self.idle[p] = true;
            }
        }
    }

    /// The message to send now, if any: a higher watermark, or `Idle` when
    /// every partition is idle (once).
    pub fn poll(&mut self) -> Option<Message> {
        let active: Vec<usize> = (0..self.idle.len()).filter(|p| !self.idle[*p]).collect();
        if active.is_empty() {
            if self.idle_emitted {
                return None;
            }
            self.idle_emitted = true;
            return Some(Message::Idle);
        }
        let mut low = i64::MAX;
        for p in active {
            let from_data = self.max_event_ms[p].map(|t| t.saturating_sub(self.delay_ms));
            match (from_data, self.explicit[p].map(|w| w.0)) {
                (None, None) => return None,
                (a, b) => low = low.min(a.unwrap_or(i64::MIN).max(b.unwrap_or(i64::MIN))),
            }
        }
        let w = Watermark(low);
        if w > self.emitted {
            self.emitted = w;
            Some(Message::Watermark(w))
        } else {
            None
        }
    }
}

/// Everything a source task needs to run.
pub struct SourceTask {
    pub reader: Box<dyn SourceReader>,
    pub watermark: Option<WatermarkSpec>,
    pub idle_timeout: Duration,
    pub batch_rows_max: usize,
    pub output: Output,
    pub metrics: Arc<TaskMetrics>,
    pub cancel: CancellationToken,
    /// While true the source reads nothing (ALTER PIPELINE … PAUSE).
    pub paused: tokio::sync::watch::Receiver<bool>,
    /// Barriers to inject and where to acknowledge them (None: no checkpoints).
    pub checkpoint: Option<TaskCheckpoint>,
    /// The source's alignment group and this instance's slot in it (None:
    /// not aligned).
    pub alignment: Option<(Arc<AlignmentGroup>, usize)>,
}

/// The next checkpoint to inject; never, without checkpoints.
async fn next_trigger(checkpoint: &mut Option<TaskCheckpoint>) -> u64 {
    match checkpoint {
        Some(c) => loop {
            match c.handles.trigger.changed().await {
                // 0 is the channel's initial value, never a checkpoint.
                Ok(()) => match *c.handles.trigger.borrow_and_update() {
                    0 => continue,
                    id => break id,
                },
                Err(_) => std::future::pending().await,
            }
        },
        None => std::future::pending().await,
    }
}

impl SourceTask {
    /// Runs until the reader ends (then sends the final watermark and
    /// end-of-input), the pipeline is cancelled, or the reader fails.
    pub async fn run(mut self) -> Result<()> {
        let delay = self.watermark.as_ref().map_or(0, |w| w.delay_ms);
        let mut restored_watermarks = None;
        // (A checkpoint the coordinator started before this task ran — a
        // stop asked for while the pipeline restores, a slow start — is
        // still to be injected: the trigger's receiver has not seen it, so
        // the first `next_trigger` returns it at once. Marking it seen here
        // lost it, and with one checkpoint in flight no other, not even the
        // stop of an ALTER, started until the checkpoint timed out.)
        if let Some(c) = &self.checkpoint
            && let Some((_, state)) = &c.restored
        {
            match unpack_rescaled(state) {
                // Rescaled: the per-partition watermarks were another
                // instance's; they start over from the rows read next.
                Some(parts) => self.reader.restore_rescaled(&parts)?,
                None => {
                    self.reader.restore(state)?;
                    restored_watermarks = state.json::<WatermarkState>(WATERMARKS_KEY)?;
                }
            }
        }
        let mut generator = WatermarkGenerator::new(
            self.reader.partitions().max(1),
            delay,
            self.idle_timeout,
            Instant::now(),
        );
        if let Some(state) = &restored_watermarks {
            generator.restore(state, Instant::now());
            // At once: the rows behind it may all have been read already.
            self.emit_watermark(&mut generator).await?;
        }
        let tick = (self.idle_timeout / 2).max(Duration::from_millis(10));
        let alignment = self.alignment.clone();
        let mut published = None;
        loop {
            if let Some((group, me)) = &alignment {
                let (group, me) = (group.as_ref(), *me);
                let own = generator.current();
                if own != published {
                    group.publish(me, own);
                    published = own;
                }
                if !group.may_read(me, own) {
                    if !self.hold(group, me, own, &generator).await? {
                        return Ok(());
                    }
                    generator.touch(Instant::now());
                    continue;
                }
            }
            if *self.paused.borrow() {
                let barrier = tokio::select! {
                    biased;
                    _ = self.cancel.cancelled() => return Ok(()),
                    id = next_trigger(&mut self.checkpoint) => Some(id),
                    _ = self.paused.wait_for(|p| !*p) => None,
                };
                if let Some(id) = barrier {
                    if self.inject_barrier(id, &generator).await? {
                        return Ok(());
                    }
                    continue;
                }
            }
            let event = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Ok(()),
                id = next_trigger(&mut self.checkpoint) => Err(Some(id)),
                // Paused while waiting for input: drop the (cancel-safe) read.
                _ = self.paused.wait_for(|p| *p) => Err(None),
                event = tokio::time::timeout(tick, self.reader.next(self.batch_rows_max)) => Ok(event),
            };
            let event = match event {
                Ok(event) => event,
                Err(Some(id)) => {
                    if self.inject_barrier(id, &generator).await? {
                        return Ok(());
                    }
                    continue;
                }
                Err(None) => continue,
            };
            match event {
                Err(_elapsed) => generator.on_tick(Instant::now()),
                Ok(Err(e)) => return Err(e),
                Ok(Ok(SourceEvent::End)) => return self.finish().await,
                Ok(Ok(SourceEvent::Partitions(n))) => generator.resize(n, Instant::now()),
                Ok(Ok(SourceEvent::Watermark { partition, watermark })) => {
                    generator.on_source_watermark(partition, watermark, Instant::now());
                }
                Ok(Ok(SourceEvent::Data { partition, batch })) => {
                    let max_ms = match &self.watermark {
                        Some(w) => max_timestamp_ms(batch.column(w.column))?,
                        None => None,
                    };
                    generator.on_data(partition, max_ms, Instant::now());
                    self.metrics.add_rows_in(batch.num_rows());
                    self.output.send_batch(batch).await?;
                    // One batch per turn: a reader with rows ready (behind
                    // its pace, or unpaced) never waits, so without this
                    // the task would keep its worker until tokio's budget
                    // ran out (75 ms polls seen in q0) while the sink it
                    // just woke waited in that worker's unstealable LIFO
                    // slot and the other source instance in its queue.
                    tokio::task::yield_now().await;
                }
            }
            self.emit_watermark(&mut generator).await?;
        }
    }

    /// Sends the generator's news (a higher watermark, or idleness), if any.
    async fn emit_watermark(&mut self, generator: &mut WatermarkGenerator) -> Result<()> {
        if let Some(message) = generator.poll() {
            if let Message::Watermark(w) = &message {
                self.metrics.watermark_ms.store(w.0, Ordering::Relaxed);
            }
            self.output.broadcast(message).await?;
        }
        Ok(())
    }

    /// Reads nothing while this instance is too far ahead of its siblings
    /// (see [`crate::watermark_alignment`]), still injecting barriers. Returns false
    /// when cancelled or stopped at a barrier.
    async fn hold(
        &mut self,
        group: &AlignmentGroup,
        me: usize,
        own: Option<i64>,
        generator: &WatermarkGenerator,
    ) -> Result<bool> {
        let mut since = Instant::now();
        loop {
            let mut hold = group.hold();
            if group.may_read(me, own) {
                return Ok(true);
            }
            let barrier = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Ok(false),
                id = next_trigger(&mut self.checkpoint) => Some(id),
                _ = hold.released() => None,
                // Wakes now and then so the held time shows while it lasts.
                _ = tokio::time::sleep(HOLD_REPORT_INTERVAL) => None,
            };
            drop(hold);
            let now = Instant::now();
            let held = u64::try_from(now.duration_since(since).as_micros()).unwrap_or(u64::MAX);
            self.metrics.alignment_held_us.fetch_add(held, Ordering::Relaxed);
            since = now;
            if let Some(id) = barrier
                && self.inject_barrier(id, generator).await?
            {
                return Ok(false);
            }
        }
    }

    /// Snapshots the reader's position and the event time read so far
    /// (everything emitted so far is before the barrier), acknowledges, and
    /// sends the barrier downstream.
    /// Returns true when the barrier stops the pipeline: the source then
    /// reads nothing more and exits.
    async fn inject_barrier(&mut self, checkpoint_id: u64, generator: &WatermarkGenerator) -> Result<bool> {
        let mut state = self.reader.snapshot()?;
        // A reader without a position starts over when restored: the event
        // time it read must then be forgotten too, or its replayed rows
        // would all be late.
        if !state.is_empty() {
            state.put_json(WATERMARKS_KEY, &generator.snapshot())?;
        }
        let mut barrier = Barrier::checkpoint(checkpoint_id);
        if let Some(c) = &self.checkpoint {
            if *c.handles.stop_at.borrow() == checkpoint_id {
                barrier.mutation = Some(Mutation::Stop);
            }
            c.ack(checkpoint_id, state);
        }
        self.output
            .broadcast(Message::Barrier(barrier))
            .await
            .map_err(Error::from)?;
        Ok(barrier.stops())
    }

    /// The reader ended: the final watermark and the end of input go
    /// downstream; then, with checkpoints, the task acknowledges every later
    /// checkpoint with its final position until every task finished.
    async fn finish(mut self) -> Result<()> {
        if let Some((group, me)) = &self.alignment {
            group.publish(*me, None);
        }
        self.metrics.watermark_ms.store(Watermark::MAX.0, Ordering::Relaxed);
        let _ = self.output.broadcast(Message::Watermark(Watermark::MAX)).await;
        let _ = self.output.broadcast(Message::EndOfInput).await;
        let Some(mut c) = self.checkpoint.take() else {
            return Ok(());
        };
        c.finished();
        // The trigger it last read was injected (`next_trigger` reads one
        // only to inject it); one it has not read yet was not.
        let trigger = &mut c.handles.trigger;
        let mut injected = if trigger.has_changed().unwrap_or(false) {
            0
        } else {
            *trigger.borrow()
        };
        while let Some(id) = c.next_after_finish(injected, &self.cancel).await {
            c.ack(id, self.reader.snapshot()?);
            injected = id;
            if c.stops_at(id) {
                break;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermark_is_min_over_partitions_minus_delay() {
        let t0 = Instant::now();
        let mut g = WatermarkGenerator::new(2, 2000, Duration::from_secs(5), t0);
        g.on_data(0, Some(10_000), t0);
        assert!(g.poll().is_none(), "partition 1 has no data yet and is not idle");
        g.on_data(1, Some(7_000), t0);
        assert!(matches!(g.poll(), Some(Message::Watermark(Watermark(5_000)))));
        g.on_data(1, Some(20_000), t0);
        assert!(matches!(g.poll(), Some(Message::Watermark(Watermark(8_000)))));
        // Out-of-order data does not move it back.
        g.on_data(0, Some(1_000), t0);
        assert!(g.poll().is_none());
    }

    #[test]
    fn idle_partition_stops_holding_back_then_all_idle_once() {
        let t0 = Instant::now();
        let mut g = WatermarkGenerator::new(2, 0, Duration::from_secs(5), t0);
        g.on_data(0, Some(10_000), t0);
        assert!(g.poll().is_none());
        let later = t0 + Duration::from_secs(3);
        g.on_data(0, Some(12_000), later);
        g.on_tick(t0 + Duration::from_secs(6));
        // Partition 1 never sent data: idle now; partition 0 still active.
        assert!(matches!(g.poll(), Some(Message::Watermark(Watermark(12_000)))));
        g.on_tick(t0 + Duration::from_secs(9));
        assert!(matches!(g.poll(), Some(Message::Idle)));
        assert!(g.poll().is_none(), "Idle is sent once");
    }

    #[test]
    fn time_held_back_by_alignment_is_not_idleness() {
        let t0 = Instant::now();
        let mut g = WatermarkGenerator::new(1, 0, Duration::from_secs(5), t0);
        g.on_data(0, Some(10_000), t0);
        assert!(matches!(g.poll(), Some(Message::Watermark(Watermark(10_000)))));
        assert_eq!(g.current(), Some(10_000));
        // Held for 8 s, then reading again: the idle clock starts over.
        g.touch(t0 + Duration::from_secs(8));
        g.on_tick(t0 + Duration::from_secs(9));
        assert!(g.poll().is_none(), "not idle");
        assert_eq!(g.current(), Some(10_000));
        g.on_tick(t0 + Duration::from_secs(13));
        assert!(matches!(g.poll(), Some(Message::Idle)));
        assert_eq!(g.current(), None, "an idle instance does not count for alignment");
    }

    #[test]
    fn partitions_learned_later_hold_the_watermark_until_they_have_data() {
        let t0 = Instant::now();
        let mut g = WatermarkGenerator::new(1, 0, Duration::from_secs(5), t0);
        g.resize(3, t0);
        g.on_data(0, Some(10_000), t0);
        g.on_data(1, Some(9_000), t0);
        assert!(g.poll().is_none(), "partition 2 has no data yet");
        g.on_data(2, Some(11_000), t0);
        assert!(matches!(g.poll(), Some(Message::Watermark(Watermark(9_000)))));
        // Shrinking drops partition 1 (the lowest) from the minimum.
        g.resize(1, t0);
        assert!(matches!(g.poll(), Some(Message::Watermark(Watermark(10_000)))));
    }

    #[test]
    fn a_restored_generator_emits_the_watermark_of_what_was_read_before_the_checkpoint() {
        let t0 = Instant::now();
        let mut g = WatermarkGenerator::new(2, 1_000, Duration::from_secs(5), t0);
        g.on_data(0, Some(130_000), t0);
        g.on_data(1, Some(119_000), t0);
        g.on_source_watermark(1, Watermark(100_000), t0);
        let state = g.snapshot();
        // A reader that learns its partitions later starts with one.
        let mut restored = WatermarkGenerator::new(1, 1_000, Duration::from_secs(5), t0);
        restored.restore(&state, t0);
        assert!(
            matches!(restored.poll(), Some(Message::Watermark(Watermark(118_000)))),
            "no new rows needed"
        );
        restored.on_data(1, Some(129_000), t0);
        assert!(matches!(restored.poll(), Some(Message::Watermark(Watermark(128_000)))));
        // A partition without a stored time still waits for rows or idleness.
        let mut g = WatermarkGenerator::new(2, 0, Duration::from_secs(5), t0);
        g.on_data(0, Some(5_000), t0);
        let mut restored = WatermarkGenerator::new(2, 0, Duration::from_secs(5), t0);
        restored.restore(&g.snapshot(), t0);
        assert!(restored.poll().is_none());
        restored.on_tick(t0 + Duration::from_secs(5));
        assert!(matches!(restored.poll(), Some(Message::Idle)), "both idle: no new rows");
    }

    /// A reader that restores its position and then has nothing more to
    /// read (everything was read before the checkpoint), or starts over.
    struct ReadEverything {
        restored: Arc<std::sync::atomic::AtomicBool>,
        keeps_position: bool,
    }

    #[async_trait]
    impl SourceReader for ReadEverything {
        fn partitions(&self) -> usize {
            2
        }
        async fn next(&mut self, _rows_max: usize) -> Result<SourceEvent> {
            std::future::pending().await
        }
        fn snapshot(&mut self) -> Result<TaskState> {
            let mut state = TaskState::default();
            if self.keeps_position {
                state.put_bytes("position", vec![1]);
            }
            Ok(state)
        }
        fn restore(&mut self, _state: &TaskState) -> Result<()> {
            self.restored.store(true, Ordering::SeqCst);
            Ok(())
        }
    }

    /// Runs a source task restored from `state` and returns the first
    /// message it sends within 2 s (its idle timeout is 60 s), if any.
    /// A source task over [`ReadEverything`] restored from checkpoint 7
    /// (`state`), sending into `tx`; whether its reader was restored; and
    /// its pause switch (kept by the caller: a dropped one ends waits).
    fn restored_task(
        handles: crate::checkpoint::coordinator::CheckpointHandles,
        (state, keeps_position): (TaskState, bool),
        watermark: Option<WatermarkSpec>,
        tx: crate::channel::ChannelSender,
        cancel: &CancellationToken,
    ) -> (
        SourceTask,
        Arc<std::sync::atomic::AtomicBool>,
        tokio::sync::watch::Sender<bool>,
    ) {
        let metrics = TaskMetrics::new(sluice_types::OperatorId(0), 0, "source");
        let restored = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (paused_tx, paused) = tokio::sync::watch::channel(false);
        let task = SourceTask {
            reader: Box::new(ReadEverything {
                restored: restored.clone(),
                keeps_position,
            }),
            watermark,
            idle_timeout: Duration::from_secs(60),
            batch_rows_max: 1024,
            output: forward_to(tx, &metrics),
            metrics,
            cancel: cancel.clone(),
            paused,
            checkpoint: Some(TaskCheckpoint {
                handles,
                operator: sluice_types::OperatorId(0),
                instance: 0,
                identity: crate::checkpoint::TaskIdentity::single(sluice_types::OperatorId(0)),
                restored: Some((7, state)),
            }),
            alignment: None,
        };
        (task, restored, paused_tx)
    }

    async fn first_message_after_restore(state: TaskState, keeps_position: bool) -> Option<Message> {
        let (handles, _acks, _coordinator) = crate::checkpoint::coordinator::test_handles(7);
        let (tx, mut rx) = crate::channel::channel(64);
        let cancel = CancellationToken::new();
        let watermark = Some(WatermarkSpec {
            column: 0,
            delay_ms: 1_000,
        });
        let (task, restored, _paused) = restored_task(handles, (state, keeps_position), watermark, tx, &cancel);
        let run = tokio::spawn(task.run());
        let first = tokio::time::timeout(Duration::from_secs(2), rx.recv())
            .await
            .ok()
            .flatten();
        assert!(restored.load(Ordering::SeqCst), "the reader was restored");
        cancel.cancel();
        run.await.unwrap().unwrap();
        first
    }

    /// The coordinator may start a checkpoint (the stop of an `ALTER`
    /// asked for while the pipeline restores, a slow start) before a
    /// source task runs: the task injects it once it runs.
    #[tokio::test]
    async fn a_checkpoint_triggered_before_the_source_ran_is_injected() {
        let (handles, mut acks, coordinator) = crate::checkpoint::coordinator::test_handles(7);
        coordinator.resume(8);
        let (tx, mut rx) = crate::channel::channel(64);
        let cancel = CancellationToken::new();
        let (task, _, _paused) = restored_task(handles, (TaskState::default(), true), None, tx, &cancel);
        let run = tokio::spawn(task.run());
        let first = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .ok()
            .flatten();
        match first {
            Some(Message::Barrier(b)) => assert_eq!(b.checkpoint_id, 8),
            other => panic!("expected barrier 8, got {other:?}"),
        }
        assert!(matches!(
            acks.recv().await,
            Some(crate::checkpoint::coordinator::AckEvent::Ack { checkpoint_id: 8, .. })
        ));
        cancel.cancel();
        run.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_restored_source_with_nothing_left_to_read_still_closes_the_windows_it_read() {
        // Before the checkpoint the instance read up to 130 s on one
        // partition and 119 s on the other, all of both partitions.
        let t0 = Instant::now();
        let mut g = WatermarkGenerator::new(2, 1_000, Duration::from_secs(60), t0);
        g.on_data(0, Some(130_000), t0);
        g.on_data(1, Some(119_000), t0);
        let mut state = TaskState::default();
        state.put_bytes("position", vec![1]);
        state.put_json(WATERMARKS_KEY, &g.snapshot()).unwrap();
        let first = first_message_after_restore(state.clone(), true).await;
        assert!(
            matches!(first, Some(Message::Watermark(Watermark(118_000)))),
            "the watermark of what was read before: {first:?}"
        );
        // Without the stored event time nothing would come until the
        // partitions turned idle, and then only Idle.
        state.entries.remove(WATERMARKS_KEY);
        let first = first_message_after_restore(state, true).await;
        assert!(first.is_none(), "{first:?}");
    }

    #[tokio::test]
    async fn a_checkpoint_keeps_the_event_time_only_for_readers_that_keep_a_position() {
        let (handles, mut acks, _coordinator) = crate::checkpoint::coordinator::test_handles(0);
        let metrics = TaskMetrics::new(sluice_types::OperatorId(0), 0, "source");
        let (tx, _rx) = crate::channel::channel(64);
        for keeps_position in [true, false] {
            let (_paused_tx, paused) = tokio::sync::watch::channel(false);
            let mut task = SourceTask {
                reader: Box::new(ReadEverything {
                    restored: Default::default(),
                    keeps_position,
                }),
                watermark: Some(WatermarkSpec { column: 0, delay_ms: 0 }),
                idle_timeout: Duration::from_secs(60),
                batch_rows_max: 1024,
                output: forward_to(tx.clone(), &metrics),
                metrics: metrics.clone(),
                cancel: CancellationToken::new(),
                paused,
                checkpoint: Some(TaskCheckpoint {
                    handles: handles.clone(),
                    operator: sluice_types::OperatorId(0),
                    instance: 0,
                    identity: crate::checkpoint::TaskIdentity::single(sluice_types::OperatorId(0)),
                    restored: None,
                }),
                alignment: None,
            };
            let t0 = Instant::now();
            let mut g = WatermarkGenerator::new(2, 0, Duration::from_secs(60), t0);
            g.on_data(0, Some(42), t0);
            task.inject_barrier(1, &g).await.unwrap();
            let state = match acks.recv().await {
                Some(crate::checkpoint::coordinator::AckEvent::Ack { state, .. }) => state,
                other => panic!("{other:?}"),
            };
            let stored: Option<WatermarkState> = state.json(WATERMARKS_KEY).unwrap();
            if keeps_position {
                assert_eq!(stored, Some(g.snapshot()));
            } else {
                assert_eq!(stored, None, "a reader that starts over forgets the event time too");
            }
        }
    }

    /// An output with one forward edge into `tx`.
    fn forward_to(tx: crate::channel::ChannelSender, metrics: &Arc<TaskMetrics>) -> Output {
        let edge = crate::exchange::OutputEdge::new(
            sluice_plan::Partitioning::Forward,
            vec![tx],
            0,
            sluice_plan::KEY_GROUPS_DEFAULT,
        );
        Output::new(vec![edge], metrics.clone())
    }

    /// A reader that always has a row ready (an unpaced generator, a
    /// backlog): it never makes its task wait.
    struct AlwaysReady;

    #[async_trait]
    impl SourceReader for AlwaysReady {
        fn partitions(&self) -> usize {
            1
        }
        async fn next(&mut self, _rows_max: usize) -> Result<SourceEvent> {
            let schema = Arc::new(arrow::datatypes::Schema::new(vec![arrow::datatypes::Field::new(
                "n",
                arrow::datatypes::DataType::Int64,
                false,
            )]));
            let column = Arc::new(arrow::array::Int64Array::from(vec![1]));
            Ok(SourceEvent::Data {
                partition: 0,
                batch: RecordBatch::try_new(schema, vec![column])?,
            })
        }
        fn snapshot(&mut self) -> Result<TaskState> {
            Ok(TaskState::default())
        }
        fn restore(&mut self, _state: &TaskState) -> Result<()> {
            Ok(())
        }
    }

    /// A source hands its worker back after every batch, so a task woken
    /// meanwhile (here: on the same single thread) runs between two batches
    /// rather than after tokio's budget of a hundred-odd.
    #[tokio::test(flavor = "current_thread")]
    async fn a_source_yields_its_worker_after_each_batch() {
        let (tx, rx) = crate::channel::channel(1 << 20);
        let metrics = TaskMetrics::new(sluice_types::OperatorId(0), 0, "source");
        let cancel = CancellationToken::new();
        let (_paused_tx, paused) = tokio::sync::watch::channel(false);
        let task = SourceTask {
            reader: Box::new(AlwaysReady),
            watermark: None,
            idle_timeout: Duration::from_secs(60),
            batch_rows_max: 1,
            output: forward_to(tx, &metrics),
            metrics: metrics.clone(),
            cancel: cancel.clone(),
            paused,
            checkpoint: None,
            alignment: None,
        };
        let source = tokio::spawn(task.run());
        // Each time this task gets the thread, count the batches sent since.
        let mut between = Vec::new();
        let mut seen = 0;
        for _ in 0..50 {
            tokio::task::yield_now().await;
            let sent = metrics.rows_in.load(Ordering::Relaxed);
            between.push(sent - seen);
            seen = sent;
        }
        cancel.cancel();
        source.await.expect("source task").expect("source ran");
        drop(rx);
        assert!(seen >= 40, "the source ran: {between:?}");
        assert!(
            between.iter().all(|n| *n <= 2),
            "batches per turn of the other task: {between:?}"
        );
    }
}
