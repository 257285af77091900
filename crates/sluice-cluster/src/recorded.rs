//! What a quorum's leader records about its workers and where each
//! pipeline's tasks run, in the replicated state beside the catalog:
//! `worker/<id>` (data-plane address, slots, labels) and
//! `placement/<pipeline id>` (the running deployment's epoch and every
//! task instance's worker). Workers are written once a second when
//! changed ([`crate::control::Cluster::record`]), a worker gone being a
//! tombstone; a placement as its deployment starts, before its parts do,
//! and it goes once nothing of its pipeline may run.
//! `memory/<stream>` names the worker holding a memory stream's log,
//! written before anything is appended there or reads it there.
//!
//! Followers list the recorded workers (SHOW CLUSTER, `/api/v1/cluster`),
//! and a new leader knows from the placements which workers it waits for
//! before it adopts or restarts a pipeline.

use serde::{Deserialize, Serialize};
use sluice_quorum::ReplicatedState;
use sluice_types::{PipelineId, WorkerId};
use std::collections::{BTreeMap, BTreeSet};

pub const WORKER: &str = "worker/";
pub const PLACEMENT: &str = "placement/";
pub const MEMORY: &str = "memory/";

/// The register naming the worker that holds memory stream `stream`'s log.
pub fn memory_register(stream: &str) -> String {
    format!("{MEMORY}{stream}")
}

/// Every memory stream's log `state` records, with the worker holding it.
pub fn memory_homes(state: &ReplicatedState) -> BTreeMap<String, WorkerId> {
    state
        .scan(MEMORY)
        .map(|(k, v)| (k[MEMORY.len()..].to_string(), WorkerId(v.to_string())))
        .collect()
}

/// The worker `state` says holds memory stream `stream`'s log.
pub fn memory_home(state: &ReplicatedState, stream: &str) -> Option<WorkerId> {
    state.get(&memory_register(stream)).map(|w| WorkerId(w.to_string()))
}

/// A worker as the leader recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedWorker {
    pub id: String,
    pub data_address: String,
    pub slots: u32,
    pub labels: BTreeMap<String, String>,
}

/// A running deployment's placement as the leader recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedPlacement {
    pub epoch: u64,
    /// (operator, instance, worker) for every operator instance.
    pub tasks: Vec<(u32, u32, String)>,
}

impl RecordedPlacement {
    pub fn workers(&self) -> BTreeSet<WorkerId> {
        self.tasks.iter().map(|(_, _, w)| WorkerId(w.clone())).collect()
    }
}

/// The registers `workers` and `placements` make, as JSON.
pub fn registers(
    workers: &[RecordedWorker],
    placements: &BTreeMap<PipelineId, RecordedPlacement>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for w in workers {
        if let Ok(json) = serde_json::to_string(w) {
            out.insert(format!("{WORKER}{}", w.id), json);
        }
    }
    for (id, p) in placements {
        if let Ok(json) = serde_json::to_string(p) {
            out.insert(format!("{PLACEMENT}{}", id.0), json);
        }
    }
    out
}

/// The writes that turn what `held` records into `want`: changed or new
/// registers, tombstones for those `want` no longer has.
pub fn writes(held: &ReplicatedState, want: &BTreeMap<String, String>) -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = want
        .iter()
        .filter(|(k, v)| held.get(k) != Some(v.as_str()))
        .map(|(k, v)| (k.clone(), Some(v.clone())))
        .collect();
    for prefix in [WORKER, PLACEMENT] {
        for (key, _) in held.scan(prefix) {
            if !want.contains_key(key) {
                out.push((key.to_string(), None));
            }
        }
    }
    out
}

/// The workers `state` records (entries that do not decode are skipped).
pub fn workers(state: &ReplicatedState) -> Vec<RecordedWorker> {
    state
        .scan(WORKER)
        .filter_map(|(_, v)| serde_json::from_str(v).ok())
        .collect()
}

/// The placements `state` records, by pipeline.
pub fn placements(state: &ReplicatedState) -> BTreeMap<PipelineId, RecordedPlacement> {
    state
        .scan(PLACEMENT)
        .filter_map(|(k, v)| {
            let id = k[PLACEMENT.len()..].parse().ok()?;
            Some((PipelineId(id), serde_json::from_str(v).ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_quorum::Stamp;

    #[test]
    fn workers_and_placements_round_trip_and_what_went_becomes_a_tombstone() {
        let w = |id: &str| RecordedWorker {
            id: id.into(),
            data_address: format!("{id}:1"),
            slots: 4,
            labels: BTreeMap::from([("zone".to_string(), "a".to_string())]),
        };
        let placement = RecordedPlacement {
            epoch: 7,
            tasks: vec![(0, 0, "w1".into()), (1, 0, "w2".into())],
        };
        let mut state = ReplicatedState::default();
        let want = registers(
            &[w("w1"), w("w2")],
            &BTreeMap::from([(PipelineId(3), placement.clone())]),
        );
        for (k, v) in writes(&state, &want) {
            state.write(&k, v, Stamp { term: 1, seq: 1 });
        }
        assert_eq!(workers(&state), [w("w1"), w("w2")]);
        assert_eq!(placements(&state)[&PipelineId(3)], placement);
        assert!(writes(&state, &want).is_empty(), "nothing changed, nothing written");
        // w2 gone, the deployment ended.
        let want = registers(&[w("w1")], &BTreeMap::new());
        let w2 = writes(&state, &want);
        assert_eq!(w2.len(), 2);
        assert!(w2.iter().all(|(_, v)| v.is_none()), "{w2:?}");
        for (k, v) in w2 {
            state.write(&k, v, Stamp { term: 1, seq: 2 });
        }
        assert_eq!(workers(&state), [w("w1")]);
        assert!(placements(&state).is_empty());
        // Garbage under the prefix is skipped, not fatal.
        state.write("worker/bad", Some("{".into()), Stamp { term: 1, seq: 3 });
        assert_eq!(workers(&state).len(), 1);
    }
}
