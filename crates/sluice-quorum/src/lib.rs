//! The masters' quorum: cluster state replicated as CRDTs among three or
//! five `sluice master` processes, one leader per term deciding, every
//! decision held by a majority before it is acknowledged.
//!
//! - [`state`]: the replicated map of last-writer-wins registers;
//! - [`replica`]: one master's protocol state machine (election with
//!   pre-votes, terms, leases, majority writes, anti-entropy) — pure, driven
//!   by the caller's clock and transport;
//! - [`fence`]: workers under the quorum — when they keep their tasks
//!   after losing the leader, and the timing leaders rely on (pure);
//! - [`store`]: a master's [`Durable`](replica::Durable) part on disk;
//! - [`node`]: a member on a real network (tokio clock, gRPC `Quorum`
//!   service of `proto/sluice/v1/quorum.proto`).
//!
//! The protocol is checked by a seeded simulation (`tests/simulation.rs`)
//! that crashes, restarts, partitions and drops messages over thousands of
//! histories.

pub mod fence;
pub mod node;
pub mod replica;
pub mod state;
pub mod store;

pub use node::{NodeError, QuorumNode};
pub use replica::{Config, Durable, MasterId, Message, Output, QuorumError, Replica, RoleName, Status};
pub use state::{ReplicatedState, Stamp};
