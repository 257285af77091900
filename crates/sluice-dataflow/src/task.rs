//! The actor loop of a non-source task: take messages from the inputs in
//! arrival order, keep the low watermark (minimum over active inputs), and
//! hand data and watermark advances to the operator.
//!
//! Watermark bookkeeping is the pure [`InputFrontier`]; the loop is the
//! async shell around it.

use crate::channel::ChannelReceiver;
use crate::checkpoint::barrier_alignment::BarrierAligner;
use crate::checkpoint::{LOW_WATERMARK_KEY, TaskCheckpoint};
use crate::exchange::Output;
use crate::message::{Barrier, Message, Mutation};
use crate::metrics::TaskMetrics;
use crate::operator::{Operator, OperatorContext};
use sluice_types::{Error, Result, Watermark};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use tokio_util::sync::CancellationToken;

/// The watermark state of a task's inputs.
#[derive(Debug, Clone)]
pub struct InputFrontier {
    watermarks: Vec<Watermark>,
    idle: Vec<bool>,
    ended: Vec<bool>,
    low: Watermark,
}

/// What changed after an input event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrontierChange {
    None,
    /// The low watermark advanced to this value.
    Advanced(Watermark),
    /// Every input not yet ended is idle.
    AllIdle,
}

impl InputFrontier {
    pub fn new(inputs: usize) -> Self {
        InputFrontier {
            watermarks: vec![Watermark::MIN; inputs],
            idle: vec![false; inputs],
            ended: vec![false; inputs],
            low: Watermark::MIN,
        }
    }

    /// The current low watermark (never goes back).
    pub fn low(&self) -> Watermark {
        self.low
    }

    /// Starts from a restored low watermark (recovery).
    pub fn restore_low(&mut self, low: Watermark) {
        self.low = self.low.max(low);
    }

    /// True when every input has ended.
    pub fn all_ended(&self) -> bool {
        self.ended.iter().all(|e| *e)
    }

    /// Input `i` sent data: it is active again.
    pub fn on_data(&mut self, i: usize) {
        self.idle[i] = false;
    }

    pub fn on_watermark(&mut self, i: usize, watermark: Watermark) -> FrontierChange {
        self.idle[i] = false;
        if watermark > self.watermarks[i] {
            self.watermarks[i] = watermark;
        }
        self.recompute()
    }

    pub fn on_idle(&mut self, i: usize) -> FrontierChange {
        self.idle[i] = true;
        self.recompute()
    }

    pub fn on_end(&mut self, i: usize) -> FrontierChange {
        self.ended[i] = true;
        self.watermarks[i] = Watermark::MAX;
        self.recompute()
    }

    fn recompute(&mut self) -> FrontierChange {
        let active = (0..self.watermarks.len()).filter(|i| !self.idle[*i] || self.ended[*i]);
        let min = active.map(|i| self.watermarks[i]).min();
        match min {
            None => FrontierChange::AllIdle,
            Some(w) if w > self.low => {
                self.low = w;
                FrontierChange::Advanced(w)
            }
            Some(_) => FrontierChange::None,
        }
    }
}

/// Everything a task needs to run.
pub struct Task {
    pub operator: Box<dyn Operator>,
    pub inputs: Vec<ChannelReceiver>,
    pub output: Output,
    pub metrics: Arc<TaskMetrics>,
    pub cancel: CancellationToken,
    /// Checkpoint barriers, acks and commits (None: no checkpoints).
    pub checkpoint: Option<TaskCheckpoint>,
}

impl Task {
    /// Runs until every input ended (Ok), the pipeline is cancelled (Ok), or
    /// the operator fails (Err).
    pub async fn run(mut self) -> Result<()> {
        let mut frontier = InputFrontier::new(self.inputs.len());
        let mut aligner = BarrierAligner::new(self.inputs.len());
        if let Some(c) = &mut self.checkpoint {
            let restored = c.restored.take();
            if let Some(bytes) = restored.as_ref().and_then(|(_, s)| s.bytes(LOW_WATERMARK_KEY)) {
                let low = i64::from_le_bytes(bytes.try_into().map_err(|_| Error::internal("bad stored watermark"))?);
                frontier.restore_low(Watermark(low));
            }
            self.operator.restore(restored).await?;
        }
        let mut next = 0usize;
        // The mutation of the barrier being aligned (every input's copy
        // carries the same).
        let mut mutation: Option<Mutation> = None;
        // When the barrier being aligned first arrived.
        let mut aligning_since: Option<std::time::Instant> = None;
        // The last checkpoint this task acknowledged.
        let mut acked = 0u64;
        let mut timer = self.operator.timer_interval().map(|every| {
            let mut t = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        loop {
            let received = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Ok(()),
                _ = tick(&mut timer) => {
                    let mut ctx = OperatorContext {
                        output: &mut self.output,
                        metrics: &self.metrics,
                        watermark: frontier.low(),
                    };
                    self.operator.process_timer(&mut ctx).await?;
                    continue;
                }
                received = next_message(&mut self.inputs, aligner.blocked(), &mut next) => received,
            };
            let Some((input, message)) = received else {
                // Every upstream went away without ending: torn down.
                return Ok(());
            };
            self.record_queue();
            let done = match message {
                Message::Barrier(b) => {
                    mutation = mutation.or(b.mutation);
                    let since = *aligning_since.get_or_insert_with(std::time::Instant::now);
                    if let Some(id) = aligner.on_barrier(input, b.checkpoint_id) {
                        self.record_alignment(since);
                        aligning_since = None;
                        acked = id;
                        if self.aligned(id, mutation.take(), &frontier).await? {
                            return Ok(());
                        }
                    }
                    false
                }
                Message::EndOfInput => {
                    let aligned = aligner.on_end(input);
                    let done = self.handle(&mut frontier, input, Message::EndOfInput).await?;
                    if let (Some(id), false) = (aligned, done) {
                        if let Some(since) = aligning_since.take() {
                            self.record_alignment(since);
                        }
                        acked = id;
                        if self.aligned(id, mutation.take(), &frontier).await? {
                            return Ok(());
                        }
                    }
                    done
                }
                other => self.handle(&mut frontier, input, other).await?,
            };
            if done {
                if let Some(mut c) = self.checkpoint.take() {
                    c.finished();
                    // Its final state is every later checkpoint's, until
                    // every task finished.
                    while let Some(id) = c.next_after_finish(acked, &self.cancel).await {
                        let mut state = self.operator.snapshot(id).await?;
                        state.put_bytes(LOW_WATERMARK_KEY, frontier.low().0.to_le_bytes().to_vec());
                        c.ack(id, state);
                        acked = id;
                        if c.stops_at(id) {
                            break;
                        }
                    }
                }
                if self.output.has_downstream() {
                    // The operator's state can be large — a join holding a
                    // window of rows took 0.7–0.9 s to free at q7's end — and
                    // the tasks just sent its last rows wait for this
                    // worker (the one woken last sits in its LIFO slot, which
                    // no other worker steals). Freed on a blocking thread.
                    // (A sink is dropped here: its end is the pipeline's.)
                    let operator = self.operator;
                    tokio::task::spawn_blocking(move || drop(operator));
                }
                return Ok(());
            }
        }
    }

    /// Barrier `id` (carrying `mutation`) is aligned: checkpoint. Returns
    /// true when the task stops at it — without an end of input
    /// downstream, which stops at the same barrier.
    async fn aligned(&mut self, id: u64, mutation: Option<Mutation>, frontier: &InputFrontier) -> Result<bool> {
        let barrier = Barrier {
            checkpoint_id: id,
            mutation,
        };
        self.checkpoint(barrier, frontier).await?;
        Ok(barrier.stops())
    }

    /// Every input delivered barrier `id`: snapshot, forward the barrier,
    /// acknowledge; a two-phase-commit sink then waits for the checkpoint
    /// to complete and commits before taking more input.
    async fn checkpoint(&mut self, barrier: Barrier, frontier: &InputFrontier) -> Result<()> {
        let id = barrier.checkpoint_id;
        let mut state = self.operator.snapshot(id).await?;
        state.put_bytes(LOW_WATERMARK_KEY, frontier.low().0.to_le_bytes().to_vec());
        // A sink has no downstream.
        let _ = self.output.broadcast(Message::Barrier(barrier)).await;
        let Some(c) = &mut self.checkpoint else { return Ok(()) };
        c.ack(id, state);
        if !self.operator.commits_on_checkpoint() {
            return Ok(());
        }
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return Ok(()),
            done = c.handles.completed.wait_for(|done| *done >= id) => {
                if done.is_err() {
                    return Ok(());
                }
            }
        }
        self.operator.commit(id).await
    }

    fn record_alignment(&self, since: std::time::Instant) {
        let us = since.elapsed().as_micros() as u64;
        self.metrics.checkpoint_alignment_us.fetch_add(us, Ordering::Relaxed);
        self.metrics.last_checkpoint_alignment_us.store(us, Ordering::Relaxed);
    }

    fn record_queue(&self) {
        let queued: usize = self.inputs.iter().map(|r| r.queued_credits()).sum();
        self.metrics.queued_rows.store(queued as u64, Ordering::Relaxed);
    }

    /// Handles one message; returns true when the task is done.
    async fn handle(&mut self, frontier: &mut InputFrontier, input: usize, message: Message) -> Result<bool> {
        let change = match message {
            Message::Data(batch) => {
                frontier.on_data(input);
                self.metrics.add_rows_in(batch.num_rows());
                crate::fault::check(&self.metrics);
                let mut ctx = OperatorContext {
                    output: &mut self.output,
                    metrics: &self.metrics,
                    watermark: frontier.low(),
                };
                self.operator.process_batch(batch, input, &mut ctx).await?;
                FrontierChange::None
            }
            Message::Watermark(w) => frontier.on_watermark(input, w),
            Message::Idle => frontier.on_idle(input),
            Message::Barrier(_) => unreachable!("barriers are aligned in run"),
            Message::EndOfInput => frontier.on_end(input),
        };
        match change {
            FrontierChange::Advanced(w) => {
                self.metrics.watermark_ms.store(w.0, Ordering::Relaxed);
                let mut ctx = OperatorContext {
                    output: &mut self.output,
                    metrics: &self.metrics,
                    watermark: w,
                };
                self.operator.process_watermark(w, &mut ctx).await?;
            }
            FrontierChange::AllIdle => {
                self.output.broadcast(Message::Idle).await?;
            }
            FrontierChange::None => {}
        }
        if frontier.all_ended() {
            let mut ctx = OperatorContext {
                output: &mut self.output,
                metrics: &self.metrics,
                watermark: frontier.low(),
            };
            self.operator.process_end_of_input(&mut ctx).await?;
            // A sink has no downstream; a closed downstream at the end is fine.
            let _ = self.output.broadcast(Message::EndOfInput).await;
            return Ok(true);
        }
        Ok(false)
    }
}

/// The next tick of the operator's timer; never, without one.
async fn tick(timer: &mut Option<tokio::time::Interval>) {
    match timer {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// The next message from any input that has not ended, polling fairly
/// (round robin from `next`), skipping inputs blocked by barrier
/// alignment. `None` when every channel is closed.
async fn next_message(inputs: &mut [ChannelReceiver], blocked: &[bool], next: &mut usize) -> Option<(usize, Message)> {
    std::future::poll_fn(|cx| {
        let n = inputs.len();
        let mut closed = 0;
        for k in 0..n {
            let i = (*next + k) % n;
            if blocked[i] {
                // Aligning a barrier: its messages wait in the channel.
                continue;
            }
            match inputs[i].poll_recv(cx) {
                Poll::Ready(Some(m)) => {
                    *next = (i + 1) % n;
                    return Poll::Ready(Some((i, m)));
                }
                Poll::Ready(None) => closed += 1,
                Poll::Pending => {}
            }
        }
        if closed == n { Poll::Ready(None) } else { Poll::Pending }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::OutputEdge;
    use arrow::record_batch::RecordBatch;
    use std::sync::atomic::AtomicBool;

    /// An operator whose drop blocks until told to finish.
    struct SlowToFree {
        release: std::sync::mpsc::Receiver<()>,
        freed: Arc<AtomicBool>,
    }

    #[async_trait::async_trait]
    impl Operator for SlowToFree {
        async fn process_batch(&mut self, _: RecordBatch, _: usize, _: &mut OperatorContext<'_>) -> Result<()> {
            Ok(())
        }
    }

    impl Drop for SlowToFree {
        fn drop(&mut self) {
            let _ = self.release.recv_timeout(std::time::Duration::from_secs(10));
            self.freed.store(true, Ordering::SeqCst);
        }
    }

    /// A task without checkpoints running `operator` over `inputs`, its
    /// output one forward edge into `out`.
    fn test_task(
        operator: Box<dyn Operator>,
        inputs: Vec<crate::channel::ChannelReceiver>,
        out: crate::channel::ChannelSender,
    ) -> Task {
        let metrics = TaskMetrics::new(sluice_types::OperatorId(1), 0, "test");
        Task {
            operator,
            inputs,
            output: Output::new(
                vec![OutputEdge::new(
                    sluice_plan::Partitioning::Forward,
                    vec![out],
                    0,
                    sluice_plan::KEY_GROUPS_DEFAULT,
                )],
                metrics.clone(),
            ),
            metrics,
            cancel: CancellationToken::new(),
            checkpoint: None,
        }
    }

    /// A task that ended hands its downstream the end of input and returns
    /// without waiting for its operator's state to be freed.
    #[tokio::test]
    async fn an_ended_task_frees_its_operator_off_the_worker() {
        let (release_tx, release) = std::sync::mpsc::channel();
        let freed = Arc::new(AtomicBool::new(false));
        let (in_tx, in_rx) = crate::channel::channel(16);
        let (out_tx, mut out_rx) = crate::channel::channel(16);
        let task = test_task(
            Box::new(SlowToFree {
                release,
                freed: freed.clone(),
            }),
            vec![in_rx],
            out_tx,
        );
        in_tx.send(Message::EndOfInput).await.unwrap();
        task.run().await.unwrap();
        let mut ended = false;
        while let Ok(m) = out_rx.try_recv() {
            ended |= matches!(m, Message::EndOfInput);
        }
        assert!(ended, "downstream got the end of input");
        assert!(
            !freed.load(Ordering::SeqCst),
            "the task waited for its operator to be freed"
        );
        release_tx.send(()).unwrap();
        for _ in 0..1_000 {
            if freed.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the operator was never freed");
    }

    struct Noop;

    #[async_trait::async_trait]
    impl Operator for Noop {
        async fn process_batch(&mut self, _: RecordBatch, _: usize, _: &mut OperatorContext<'_>) -> Result<()> {
            Ok(())
        }
    }

    /// Alignment time runs from a checkpoint's first barrier (input 0) to
    /// its last (input 1, sent at least 60 ms later); a second checkpoint
    /// whose barriers come together adds almost nothing.
    #[tokio::test]
    async fn barrier_alignment_is_timed_from_first_barrier_to_last() {
        let (a_tx, a_rx) = crate::channel::channel(16);
        let (b_tx, b_rx) = crate::channel::channel(16);
        let (out_tx, _out_rx) = crate::channel::channel(64);
        let task = test_task(Box::new(Noop), vec![a_rx, b_rx], out_tx);
        let metrics = task.metrics.clone();
        let running = tokio::spawn(task.run());
        a_tx.send(Message::Barrier(Barrier::checkpoint(1))).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(60)).await;
        b_tx.send(Message::Barrier(Barrier::checkpoint(1))).await.unwrap();
        let first = loop {
            let us = metrics.last_checkpoint_alignment_us.load(Ordering::Relaxed);
            if us > 0 {
                break us;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        };
        assert!(
            first >= 60_000,
            "aligned in {first} µs, the last barrier came 60 ms after the first"
        );
        b_tx.send(Message::Barrier(Barrier::checkpoint(2))).await.unwrap();
        a_tx.send(Message::Barrier(Barrier::checkpoint(2))).await.unwrap();
        a_tx.send(Message::EndOfInput).await.unwrap();
        b_tx.send(Message::EndOfInput).await.unwrap();
        running.await.unwrap().unwrap();
        let second = metrics.last_checkpoint_alignment_us.load(Ordering::Relaxed);
        assert!(second < first, "the second alignment ({second} µs) is timed on its own");
        assert_eq!(
            metrics.checkpoint_alignment_us.load(Ordering::Relaxed),
            first + second,
            "the total adds every checkpoint's alignment"
        );
    }

    #[test]
    fn low_watermark_is_the_minimum_over_inputs() {
        let mut f = InputFrontier::new(2);
        assert_eq!(f.on_watermark(0, Watermark(10)), FrontierChange::None);
        assert_eq!(f.on_watermark(1, Watermark(5)), FrontierChange::Advanced(Watermark(5)));
        assert_eq!(
            f.on_watermark(1, Watermark(20)),
            FrontierChange::Advanced(Watermark(10))
        );
        // Never goes back.
        assert_eq!(f.on_watermark(0, Watermark(3)), FrontierChange::None);
        assert_eq!(f.low(), Watermark(10));
    }

    #[test]
    fn an_idle_input_stops_holding_the_watermark_back() {
        let mut f = InputFrontier::new(2);
        f.on_watermark(0, Watermark(100));
        assert_eq!(f.low(), Watermark::MIN);
        assert_eq!(f.on_idle(1), FrontierChange::Advanced(Watermark(100)));
        // Data makes it active again; its old watermark no longer lowers the frontier.
        f.on_data(1);
        assert_eq!(f.on_watermark(1, Watermark(50)), FrontierChange::None);
        assert_eq!(f.low(), Watermark(100));
    }

    #[test]
    fn all_idle_and_end_of_input() {
        let mut f = InputFrontier::new(2);
        f.on_idle(0);
        assert_eq!(f.on_idle(1), FrontierChange::AllIdle);
        // An ended input counts as "at the end of time"; idle ones are
        // excluded, so the frontier jumps to the end (as in Flink).
        assert_eq!(f.on_end(0), FrontierChange::Advanced(Watermark::MAX));
        assert!(!f.all_ended());
        assert_eq!(f.on_end(1), FrontierChange::None);
        assert!(f.all_ended());
    }
}
