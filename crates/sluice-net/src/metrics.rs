//! Counters of one data plane, and their snapshot.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of a data plane's counters (totals since start, over every
/// peer). Bytes are encoded gRPC message bytes (protobuf framing included,
/// HTTP/2 and TCP framing not).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DataPlaneMetrics {
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Channel messages (batches and control messages).
    pub messages_sent: u64,
    pub messages_received: u64,
    pub rows_sent: u64,
    pub rows_received: u64,
    /// gRPC messages carrying frames (several frames each when busy).
    pub grpc_messages_sent: u64,
    pub grpc_messages_received: u64,
    /// `bytes` fields received (IPC bodies, headers, schemas) that spanned
    /// HTTP/2 DATA frames and were copied into one buffer; the others are
    /// slices of the frame they arrived in.
    pub fields_gathered: u64,
    /// Time senders of remote channels waited for the receiver's credits.
    pub credit_wait_ns: u64,
    /// Credits this side granted to remote senders.
    pub credits_granted: u64,
    /// Outgoing connections made, and links that failed (either way).
    pub links_opened: u64,
    pub link_failures: u64,
    /// Gauges: remote channels open now. Sending ends on links …
    pub channels_out: usize,
    /// … receiving ends bound to a sender's stream …
    pub channels_in: usize,
    /// … receivers registered whose sender has not opened yet …
    pub receivers_waiting: usize,
    /// … opens whose receiver has not registered yet …
    pub opens_waiting: usize,
    /// … and receiving ends kept open after their link broke.
    pub receivers_orphaned: usize,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub bytes_sent: AtomicU64,
    pub bytes_received: AtomicU64,
    pub messages_sent: AtomicU64,
    pub messages_received: AtomicU64,
    pub rows_sent: AtomicU64,
    pub rows_received: AtomicU64,
    pub grpc_messages_sent: AtomicU64,
    pub grpc_messages_received: AtomicU64,
    pub fields_gathered: AtomicU64,
    /// Shared with every remote channel's sender (`forwarding_channel`).
    pub credit_wait_ns: Arc<AtomicU64>,
    pub credits_granted: AtomicU64,
    pub links_opened: AtomicU64,
    pub link_failures: AtomicU64,
}

pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    pub fn snapshot(&self) -> DataPlaneMetrics {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DataPlaneMetrics {
            bytes_sent: get(&self.bytes_sent),
            bytes_received: get(&self.bytes_received),
            messages_sent: get(&self.messages_sent),
            messages_received: get(&self.messages_received),
            rows_sent: get(&self.rows_sent),
            rows_received: get(&self.rows_received),
            grpc_messages_sent: get(&self.grpc_messages_sent),
            grpc_messages_received: get(&self.grpc_messages_received),
            fields_gathered: get(&self.fields_gathered),
            credit_wait_ns: get(&self.credit_wait_ns),
            credits_granted: get(&self.credits_granted),
            links_opened: get(&self.links_opened),
            link_failures: get(&self.link_failures),
            ..DataPlaneMetrics::default()
        }
    }
}
