//! Identifiers. A task instance is addressed by `(pipeline, operator, instance)`
//! wherever it runs: the address is the same in one process or across machines.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A running pipeline (a named sink/derived stream, or a session's query).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PipelineId(pub u64);

/// An operator in a physical DAG, unique within its pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OperatorId(pub u32);

/// An operator's stable identity: derived from what it does and from its
/// inputs' uids (see `sluice_plan::identity`), so re-planning the same query
/// gives the same uids and state written under a uid finds its operator
/// again after a re-plan. `OperatorUid::UNSET` (0) marks a DAG stored before
/// uids existed; its uids are computed when it is loaded. Serialised as 16
/// hex digits (a JSON number would lose bits in JavaScript); shown as its
/// first 8 ([`OperatorUid::short`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct OperatorUid(pub u64);

impl OperatorUid {
    /// No uid yet (a DAG from before uids).
    pub const UNSET: OperatorUid = OperatorUid(0);

    pub fn is_unset(&self) -> bool {
        *self == Self::UNSET
    }

    /// The first 8 of its 16 hex digits, for EXPLAIN and the dashboard.
    pub fn short(self) -> String {
        format!("{:08x}", self.0 >> 32)
    }

    /// Parses the 16 hex digits of [`fmt::Display`].
    pub fn parse(text: &str) -> Option<OperatorUid> {
        if text.len() != 16 {
            return None;
        }
        u64::from_str_radix(text, 16).ok().map(OperatorUid)
    }
}

impl fmt::Display for OperatorUid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl Serialize for OperatorUid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for OperatorUid {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        OperatorUid::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("operator uid must be 16 hex digits, got {text:?}")))
    }
}

/// One parallel instance of an operator, `0..parallelism`.
pub type InstanceId = u32;

/// An edge of a physical DAG, unique within its pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EdgeId(pub u32);

/// The address of one task instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TaskId {
    pub pipeline: PipelineId,
    pub operator: OperatorId,
    pub instance: InstanceId,
}

impl fmt::Display for PipelineId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p{}", self.0)
    }
}

impl fmt::Display for OperatorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/op{}#{}", self.pipeline, self.operator, self.instance)
    }
}

/// A worker process (`sluice worker --id`); the playground's one worker is
/// [`WorkerId::local`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default)]
pub struct WorkerId(pub String);

impl WorkerId {
    /// The worker of a single-process server.
    pub fn local() -> Self {
        WorkerId("local".to_string())
    }
}

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
