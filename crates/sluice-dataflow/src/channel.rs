//! Credit-based channels and the transport that connects task instances.
//!
//! A channel's receiver grants credits: one credit per row of a data batch
//! (at least one per message, and one per control message). A sender waits
//! for credits before sending, and the receiver returns them as it takes
//! messages off the queue. So at most `credits_max` credits' worth of
//! messages are queued on a channel, whatever the speeds of the two ends,
//! and a slow consumer slows its producers all the way to the source.

use crate::message::Message;
use sluice_types::{EdgeId, Error, InstanceId, PipelineId, WorkerId};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::sync::{Semaphore, TryAcquireError, mpsc};

/// Default credits per channel (rows in flight).
pub const CHANNEL_CREDITS_DEFAULT: u32 = 16 * 1024;

/// Which channel: an edge between one upstream and one downstream instance
/// of one deployment of a pipeline. `deployment` (the epoch the master gave
/// the deployment) keeps a restarted pipeline's channels apart from its
/// previous deployment's, whose messages may still be in flight between
/// processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChannelKey {
    pub pipeline: PipelineId,
    pub deployment: u64,
    pub edge: EdgeId,
    pub from: InstanceId,
    pub to: InstanceId,
}

/// Connects task instances. A process asks for the ends it owns, never for
/// an end a task of another process holds (Timely's allocator: pushers to
/// every peer, one's own puller):
///
/// - both tasks run here: [`Transport::local`], an in-process credit
///   channel, no serialisation;
/// - the receiver runs on worker `peer`: [`Transport::sender_to`];
/// - the sender runs on worker `peer`: [`Transport::receiver_from`].
///
/// Across processes the transport bridges the local end to the remote one
/// with the same credit protocol: credits are granted by the receiving
/// side, so a slow consumer on another host bounds its producers' memory.
pub trait Transport: Send + Sync {
    /// Both ends of a channel inside this process.
    fn local(&self, key: ChannelKey) -> (ChannelSender, ChannelReceiver);
    /// The sending end of a channel whose receiver runs on worker `peer`.
    fn sender_to(&self, key: ChannelKey, peer: &WorkerId) -> Result<ChannelSender, Error>;
    /// The receiving end of a channel whose sender runs on worker `peer`.
    fn receiver_from(&self, key: ChannelKey, peer: &WorkerId) -> Result<ChannelReceiver, Error>;
}

/// Channels inside one process (the playground's single worker).
#[derive(Debug, Clone)]
pub struct InProcessTransport {
    pub credits_max: u32,
}

impl Default for InProcessTransport {
    fn default() -> Self {
        InProcessTransport {
            credits_max: CHANNEL_CREDITS_DEFAULT,
        }
    }
}

impl Transport for InProcessTransport {
    fn local(&self, _key: ChannelKey) -> (ChannelSender, ChannelReceiver) {
        channel(self.credits_max)
    }

    fn sender_to(&self, key: ChannelKey, peer: &WorkerId) -> Result<ChannelSender, Error> {
        Err(no_remote_workers(key, peer))
    }

    fn receiver_from(&self, key: ChannelKey, peer: &WorkerId) -> Result<ChannelReceiver, Error> {
        Err(no_remote_workers(key, peer))
    }
}

fn no_remote_workers(key: ChannelKey, peer: &WorkerId) -> Error {
    Error::internal(format!(
        "channel {key:?} crosses to worker {peer}, but this process has no data plane to other workers"
    ))
}

struct Envelope {
    message: Message,
    credits: u32,
}

/// The sending end; cheap to clone.
#[derive(Clone)]
pub struct ChannelSender {
    tx: mpsc::UnboundedSender<Envelope>,
    credits: Arc<Semaphore>,
    credits_max: u32,
    /// Nanoseconds spent waiting for credits, counted only for a channel
    /// whose credits come from another process ([`forwarding_channel`]);
    /// `None` in-process.
    credit_wait_ns: Option<Arc<AtomicU64>>,
}

/// The receiving end. Dropping it closes the channel: senders waiting for
/// credits wake up with [`Closed`].
pub struct ChannelReceiver {
    rx: mpsc::UnboundedReceiver<Envelope>,
    credits: Arc<Semaphore>,
    credits_max: u32,
}

/// The other end of the channel is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

/// A task whose downstream channel closed fails with
/// [`Error::DownstreamClosed`]: the consequence of a failure (or a stop)
/// downstream, which the supervisor does not take for the cause.
impl From<Closed> for Error {
    fn from(_: Closed) -> Self {
        Error::DownstreamClosed
    }
}

/// A channel with `credits_max` credits.
pub fn channel(credits_max: u32) -> (ChannelSender, ChannelReceiver) {
    assert!(credits_max > 0, "a channel needs credits");
    let (tx, rx) = mpsc::unbounded_channel();
    let credits = Arc::new(Semaphore::new(credits_max as usize));
    (
        ChannelSender {
            tx,
            credits: credits.clone(),
            credits_max,
            credit_wait_ns: None,
        },
        ChannelReceiver {
            rx,
            credits,
            credits_max,
        },
    )
}

/// The sending side of a channel whose receiver runs in another process.
/// The task gets an ordinary [`ChannelSender`] that starts without credits;
/// a bridge takes its messages off the [`ForwardingReceiver`] (which does
/// not return credits: they come from the remote receiver) and adds the
/// credits the remote receiver grants through the [`CreditGate`]. Time the
/// sender waits for credits is added to `credit_wait_ns`.
pub fn forwarding_channel(
    credits_max: u32,
    credit_wait_ns: Arc<AtomicU64>,
) -> (ChannelSender, ForwardingReceiver, CreditGate) {
    assert!(credits_max > 0, "a channel needs credits");
    let (tx, rx) = mpsc::unbounded_channel();
    let credits = Arc::new(Semaphore::new(0));
    (
        ChannelSender {
            tx,
            credits: credits.clone(),
            credits_max,
            credit_wait_ns: Some(credit_wait_ns),
        },
        ForwardingReceiver {
            rx,
            credits: credits.clone(),
        },
        CreditGate { credits },
    )
}

/// The bridge's end of a [`forwarding_channel`]. Dropping it closes the
/// channel.
pub struct ForwardingReceiver {
    rx: mpsc::UnboundedReceiver<Envelope>,
    credits: Arc<Semaphore>,
}

impl ForwardingReceiver {
    /// The next message, or `None` when every sender is gone. Its credits
    /// stay spent until the remote receiver grants them again.
    pub async fn recv(&mut self) -> Option<Message> {
        self.rx.recv().await.map(|envelope| envelope.message)
    }

    /// The next message if one is queued.
    pub fn try_recv(&mut self) -> Option<Message> {
        self.rx.try_recv().ok().map(|envelope| envelope.message)
    }
}

impl Drop for ForwardingReceiver {
    fn drop(&mut self) {
        self.credits.close();
    }
}

/// Adds the credits a remote receiver grants to a [`forwarding_channel`].
#[derive(Clone)]
pub struct CreditGate {
    credits: Arc<Semaphore>,
}

impl CreditGate {
    /// Lets the sender spend `credits` more.
    pub fn grant(&self, credits: u32) {
        self.credits.add_permits(credits as usize);
    }

    /// Closes the channel: a sender waiting for credits, and every later
    /// send, fails with [`Closed`].
    pub fn close(&self) {
        self.credits.close();
    }

    /// Credits the sender may still spend.
    pub fn available(&self) -> usize {
        self.credits.available_permits()
    }
}

impl ChannelSender {
    /// Sends `message`, waiting for credits first.
    pub async fn send(&self, message: Message) -> Result<(), Closed> {
        let needed = self.credits_for(&message);
        let permit = match &self.credit_wait_ns {
            None => self.credits.acquire_many(needed).await.map_err(|_| Closed)?,
            Some(wait_ns) => match self.credits.try_acquire_many(needed) {
                Ok(permit) => permit,
                Err(TryAcquireError::Closed) => return Err(Closed),
                Err(TryAcquireError::NoPermits) => {
                    let start = Instant::now();
                    let permit = self.credits.acquire_many(needed).await;
                    wait_ns.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    permit.map_err(|_| Closed)?
                }
            },
        };
        permit.forget();
        self.tx
            .send(Envelope {
                message,
                credits: needed,
            })
            .map_err(|_| Closed)
    }

    /// The credits `message` costs: its rows, at least one, at most the
    /// channel's capacity.
    pub fn credits_for(&self, message: &Message) -> u32 {
        (message.rows() as u32).clamp(1, self.credits_max)
    }

    /// The channel's capacity in credits.
    pub fn credits_max(&self) -> u32 {
        self.credits_max
    }

    /// For a bridge from a remote sender: waits until a credit is free, then
    /// takes every free credit up to `max`. The bridge grants them to the
    /// remote sender and queues what it sends with [`Self::send_reserved`];
    /// the receiver returns them as it takes those messages.
    pub async fn reserve_credits(&self, max: u32) -> Result<u32, Closed> {
        let first = self.credits.acquire_many(1).await.map_err(|_| Closed)?;
        first.forget();
        let more = (self.credits.available_permits() as u32).min(max.saturating_sub(1));
        if more > 0
            && let Ok(permit) = self.credits.try_acquire_many(more)
        {
            permit.forget();
            return Ok(1 + more);
        }
        Ok(1)
    }

    /// Queues `message` on credits taken earlier with
    /// [`Self::reserve_credits`]; never waits. The caller checks it holds
    /// [`Self::credits_for`] the message.
    pub fn send_reserved(&self, message: Message) -> Result<(), Closed> {
        let credits = self.credits_for(&message);
        self.tx.send(Envelope { message, credits }).map_err(|_| Closed)
    }
}

impl ChannelReceiver {
    /// The next message, or `None` when every sender is gone.
    pub async fn recv(&mut self) -> Option<Message> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Polls for the next message, returning its credits to the sender.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(envelope)) => {
                self.credits.add_permits(envelope.credits as usize);
                Poll::Ready(Some(envelope.message))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    /// The next message if one is queued (tests and benchmarks).
    pub fn try_recv(&mut self) -> Result<Message, Closed> {
        match self.rx.try_recv() {
            Ok(envelope) => {
                self.credits.add_permits(envelope.credits as usize);
                Ok(envelope.message)
            }
            Err(_) => Err(Closed),
        }
    }

    /// Credits currently held by queued messages (≈ rows queued).
    pub fn queued_credits(&self) -> usize {
        (self.credits_max as usize).saturating_sub(self.credits.available_permits())
    }
}

impl Drop for ChannelReceiver {
    fn drop(&mut self) {
        self.credits.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;
    use std::time::Duration;

    fn batch(rows: usize) -> Message {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let col = Int64Array::from_iter_values(0..rows as i64);
        Message::Data(RecordBatch::try_new(schema, vec![Arc::new(col)]).unwrap())
    }

    #[tokio::test]
    async fn sender_waits_at_the_credit_limit() {
        let (tx, mut rx) = channel(100);
        tx.send(batch(60)).await.unwrap();
        tx.send(batch(40)).await.unwrap();
        assert_eq!(rx.queued_credits(), 100);
        // No credit left: the next send must wait.
        let blocked = tokio::time::timeout(Duration::from_millis(50), tx.send(batch(1))).await;
        assert!(blocked.is_err(), "send beyond the credit limit must wait");
        // Taking one message returns its credits.
        assert_eq!(rx.recv().await.unwrap().rows(), 60);
        assert_eq!(rx.queued_credits(), 40);
        tx.send(batch(50)).await.unwrap();
        assert_eq!(rx.queued_credits(), 90);
    }

    #[tokio::test]
    async fn control_messages_cost_one_credit_and_keep_order() {
        let (tx, mut rx) = channel(3);
        tx.send(batch(2)).await.unwrap();
        tx.send(Message::Watermark(sluice_types::Watermark(5))).await.unwrap();
        assert_eq!(rx.queued_credits(), 3);
        assert!(matches!(rx.recv().await, Some(Message::Data(_))));
        assert!(matches!(rx.recv().await, Some(Message::Watermark(_))));
    }

    #[tokio::test]
    async fn batch_larger_than_credits_is_clamped_not_deadlocked() {
        let (tx, mut rx) = channel(10);
        tx.send(batch(25)).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().rows(), 25);
    }

    #[tokio::test]
    async fn dropping_the_receiver_wakes_a_blocked_sender() {
        let (tx, rx) = channel(1);
        tx.send(batch(1)).await.unwrap();
        let waiting = tokio::spawn(async move { tx.send(batch(1)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(rx);
        assert_eq!(waiting.await.unwrap(), Err(Closed));
    }
}
