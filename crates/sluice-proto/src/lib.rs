//! The messages and gRPC services between Sluice processes, generated from
//! the `.proto` files in the repository's top-level `proto/` folder:
//!
//! - `control.proto`: worker ↔ master (a worker's session with its master:
//!   registration, heartbeats with task metrics, task deployment, barriers,
//!   checkpoint acknowledgements, task outcomes);
//! - `quorum.proto`: master ↔ master (the quorum protocol of
//!   `sluice-quorum`, one message per call);
//! - `dataplane.proto`: worker ↔ worker (task channels: Arrow IPC record
//!   batches, watermarks and barriers in band, credits flowing back).
//!
//! Every stream opens with the sender's [`PROTOCOL_VERSION`]; a peer of
//! another version is refused with a message naming both versions.

#![allow(clippy::all, missing_docs)]

/// The version of the protocol these files define. A change that an older
/// peer would misread bumps it. 2: `SourceWatermarks` (watermark alignment
/// across workers; a worker of version 1 would ignore them and run its
/// sources unaligned). 3: workers keep their parts when the session with a
/// quorum leader breaks and report them in `Register.running` (a version-2
/// worker would stop them, a version-2 master would not stop unknown ones).
/// 4: a worker counts only keepalives (`Peers`) as its master's word and
/// times a broken session's orphans from the last one, and a quorum leader
/// sends keepalives only under its lease and moves a lost worker's parts
/// only once they surely stopped (`sluice_quorum::fence`): mixed with
/// version 3, a task could run twice. 5: a materialized view's sink runs
/// on a worker, which answers `FetchView` with the rows it published (a
/// version-4 worker would never answer, a version-4 master would read the
/// view on its own worker and find nothing), and a follower forwards an
/// INSERT's rows to the leader (`Catalog.Insert`) and runs a continuous
/// query there (`Catalog.Query`), both unknown to version 4.
pub const PROTOCOL_VERSION: u32 = 6;

/// `package sluice.v1`.
pub mod v1 {
    tonic::include_proto!("sluice.v1");
}

/// The error a peer of another protocol version gets.
pub fn version_mismatch(ours: u32, theirs: u32) -> String {
    format!(
        "protocol version mismatch: this process speaks Sluice protocol {ours}, the peer speaks {theirs}; \
         run the same Sluice release on every master and worker"
    )
}
