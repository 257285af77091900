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
