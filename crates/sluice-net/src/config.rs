//! The data plane's settings and bounds.

use sluice_dataflow::channel::CHANNEL_CREDITS_DEFAULT;
use std::time::Duration;

/// Settings of one worker's data plane. Every queue the data plane keeps
/// has its bound here.
#[derive(Debug, Clone)]
pub struct DataPlaneConfig {
    /// Credits per channel (rows in flight), for local channels and for
    /// remote ones on both sides. Every worker of a cluster must use the
    /// same value: a receiver refuses a channel whose sender clamps a
    /// batch's cost with another.
    pub channel_credits: u32,
    /// HTTP/2 stream and connection flow-control windows, in bytes. One
    /// stream per connection carries every channel, and credits already
    /// bound its bytes in flight, so the window only has to keep the link
    /// busy: 16 MiB covers 1 GB/s over a 16-ms round trip (tonic's default
    /// 64 KiB caps a loopback link far below that).
    pub window_bytes: u32,
    /// Largest HTTP/2 frame either side accepts (HTTP/2 default 16 KiB):
    /// fewer frame headers and wake-ups per megabyte.
    pub frame_bytes_max: u32,
    /// Largest gRPC message either side accepts. A batch encodes into one
    /// message, so this is also the largest encoded batch.
    pub message_bytes_max: usize,
    /// The writer packs frames into one gRPC message up to this many
    /// bytes (it never waits to fill one) …
    pub message_bytes_target: usize,
    /// … and up to this many frames.
    pub message_frames_max: usize,
    /// Frames queued for one link's writer (each frame already holds its
    /// credits, so this bounds count, not bytes).
    pub link_frames_max: usize,
    /// Credit grants queued for one inbound stream's writer.
    pub credit_queue_max: usize,
    /// Channels whose sender opened them before their receiver registered,
    /// per data plane; an `Open` beyond it is refused.
    pub pending_opens_max: usize,
    /// Closed deployments remembered, to refuse their late channels.
    pub closed_deployments_max: usize,
    /// Link failures a subscriber of [`crate::DataPlane::failures`] may lag
    /// behind before it misses some (`broadcast` capacity).
    pub failures_max: usize,
    /// Connection attempts to a peer before its link fails …
    pub connect_attempts_max: u32,
    /// … each with this timeout, and a back-off doubling from 100 ms.
    pub connect_timeout: Duration,
    /// HTTP/2 keep-alive pings: interval and how long an answer may take
    /// before the connection counts as broken (a cut network sends no
    /// reset; this is how it is noticed).
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
    /// How long an accepted stream may take to send its first message.
    pub hello_timeout: Duration,
    /// The protocol version this side announces. Always
    /// `sluice_proto::PROTOCOL_VERSION` outside tests of the version check.
    pub protocol_version: u32,
}

impl Default for DataPlaneConfig {
    fn default() -> Self {
        DataPlaneConfig {
            channel_credits: CHANNEL_CREDITS_DEFAULT,
            window_bytes: 16 << 20,
            frame_bytes_max: 1 << 20,
            message_bytes_max: 256 << 20,
            message_bytes_target: 1 << 20,
            message_frames_max: 256,
            link_frames_max: 1024,
            credit_queue_max: 4096,
            pending_opens_max: 4096,
            closed_deployments_max: 4096,
            failures_max: 1024,
            connect_attempts_max: 5,
            connect_timeout: Duration::from_secs(2),
            keepalive_interval: Duration::from_secs(1),
            keepalive_timeout: Duration::from_secs(3),
            hello_timeout: Duration::from_secs(10),
            protocol_version: sluice_proto::PROTOCOL_VERSION,
        }
    }
}
