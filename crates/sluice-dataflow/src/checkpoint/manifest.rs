//! The checkpoint manifest and the layout of a pipeline's checkpoints:
//!
//! ```text
//! <root>/p<pipeline id>/chk-<checkpoint id, 20 digits>/
//!     task-<operator uid, 16 hex>-<instance>.state   one per task (see `state.rs`)
//!     MANIFEST                                       written last: the checkpoint is complete
//! ```
//!
//! `MANIFEST` is JSON (format version, ids, times, the pipeline's key group
//! count, and per task file its operator uid, instance, parallelism, key
//! group range, length and CRC-32) followed by a line `#crc32 <8 hex
//! digits>` over the JSON bytes. A directory without a valid manifest, or
//! whose files do not match it, is skipped at recovery in favour of the
//! previous complete one.
//!
//! A task file written incrementally ([`super::incremental`]) references
//! the same task's files in earlier checkpoints; its manifest entry lists
//! them (checkpoint, length, CRC-32), reading the checkpoint reads and
//! checks them too, and [`prune`] keeps the files a retained checkpoint
//! references (of an older checkpoint, only those). Such a manifest is version 3 (older readers refuse it rather
//! than restore without the referenced rows); one without references is
//! still written as version 2.
//!
//! Manifest version 1 (before operator uids and key groups) named a task by
//! its operator's number (`task-<operator>-<instance>.state`); it is still
//! read, and [`RestoredCheckpoint::state_for`] migrates its state (see
//! [`super::keyed`]).

use super::keyed::{Migration, Part, assemble};
use super::state::{TaskState, crc32};
use super::store::StateStore;
use serde::{Deserialize, Serialize};
use sluice_plan::{KeyGroupRange, OperatorSpec, key_group_range};
use sluice_types::{Error, OperatorUid, PipelineId, Result};

/// Version of the manifest format written when a task file references
/// earlier checkpoints' files.
pub const MANIFEST_FORMAT_VERSION: u32 = 3;
/// Version written when no task file references another checkpoint.
pub const MANIFEST_FORMAT_V2: u32 = 2;
/// Tasks named by their operator's number, no key groups.
pub const MANIFEST_FORMAT_V1: u32 = 1;
pub const MANIFEST_FILE: &str = "MANIFEST";

/// One task's file in a checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskEntry {
    /// Version 1: the operator's number in the DAG.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<u32>,
    /// Version 2: the operator's uid.
    #[serde(default, skip_serializing_if = "OperatorUid::is_unset")]
    pub uid: OperatorUid,
    pub instance: u32,
    /// Version 2: the operator's parallelism when the file was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<u32>,
    /// Version 2: the key groups the instance owned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_groups: Option<KeyGroupRange>,
    pub file: String,
    pub bytes: u64,
    pub crc32: u32,
    /// Version 3: the files of the same name in earlier checkpoints that
    /// this file references (an incremental snapshot), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<FileRef>,
}

/// A task file of an earlier checkpoint that a task file references.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileRef {
    pub checkpoint: u64,
    pub bytes: u64,
    pub crc32: u32,
}

/// A completed checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format_version: u32,
    pub pipeline: u64,
    /// The pipeline's key group count (version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_groups: Option<u32>,
    pub checkpoint_id: u64,
    /// When the barriers were injected (epoch ms).
    pub started_ms: i64,
    /// When the last task acknowledged and the manifest was written.
    pub completed_ms: i64,
    /// Bytes of every task file.
    pub size_bytes: u64,
    pub tasks: Vec<TaskEntry>,
}

impl Manifest {
    /// The format version a manifest of `tasks` is written in.
    pub fn version_for(tasks: &[TaskEntry]) -> u32 {
        if tasks.iter().any(|t| !t.references.is_empty()) {
            MANIFEST_FORMAT_VERSION
        } else {
            MANIFEST_FORMAT_V2
        }
    }

    /// The earlier checkpoints this one's files reference.
    pub fn referenced(&self) -> impl Iterator<Item = u64> + '_ {
        self.tasks
            .iter()
            .flat_map(|t| t.references.iter().map(|r| r.checkpoint))
    }

    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut json = serde_json::to_vec_pretty(self).map_err(|e| Error::internal(e.to_string()))?;
        let crc = crc32(&json);
        json.extend_from_slice(format!("\n#crc32 {crc:08x}\n").as_bytes());
        Ok(json)
    }

    pub fn decode(bytes: &[u8]) -> std::result::Result<Manifest, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "manifest is not UTF-8".to_string())?;
        let (json, tail) = text.rsplit_once("\n#crc32 ").ok_or("manifest has no checksum line")?;
        let stored = u32::from_str_radix(tail.trim(), 16).map_err(|_| "bad checksum line".to_string())?;
        if crc32(json.as_bytes()) != stored {
            return Err("manifest checksum mismatch".into());
        }
        let m: Manifest = serde_json::from_str(json).map_err(|e| format!("manifest: {e}"))?;
        if !(MANIFEST_FORMAT_V1..=MANIFEST_FORMAT_VERSION).contains(&m.format_version) {
            return Err(format!(
                "manifest format version {} is not {MANIFEST_FORMAT_V1} to {MANIFEST_FORMAT_VERSION}",
                m.format_version
            ));
        }
        let named = |t: &TaskEntry| match m.format_version {
            MANIFEST_FORMAT_V1 => t.operator.is_some(),
            _ => !t.uid.is_unset() && t.parallelism.is_some() && t.key_groups.is_some(),
        };
        if !m.tasks.iter().all(named) {
            return Err("manifest has a task without its operator".into());
        }
        Ok(m)
    }
}

/// The directory of a pipeline's checkpoints.
pub fn pipeline_dir(pipeline: PipelineId) -> String {
    format!("p{}", pipeline.0)
}

/// The directory of checkpoint `id`.
pub fn checkpoint_dir(pipeline: PipelineId, id: u64) -> String {
    format!("{}/chk-{id:020}", pipeline_dir(pipeline))
}

/// A task's file: by its operator's uid.
pub fn task_file(uid: OperatorUid, instance: u32) -> String {
    format!("task-{uid}-{instance}.state")
}

/// Checkpoint ids that have a directory, ascending.
pub async fn list_ids(store: &dyn StateStore, pipeline: PipelineId) -> Result<Vec<u64>> {
    let mut ids: Vec<u64> = store
        .list(&pipeline_dir(pipeline))
        .await?
        .iter()
        .filter_map(|n| n.strip_prefix("chk-").and_then(|d| d.parse().ok()))
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// A checkpoint read back for recovery.
#[derive(Debug, Clone, Default)]
pub struct RestoredCheckpoint {
    pub id: u64,
    pub manifest: Option<Manifest>,
    /// Every task's file, decoded, with its manifest entry.
    pub tasks: Vec<(TaskEntry, TaskState)>,
}

impl RestoredCheckpoint {
    /// The parallelism the operator stored under `uid` ran at, if the
    /// checkpoint has it.
    pub fn parallelism_of(&self, uid: OperatorUid) -> Option<u32> {
        self.tasks
            .iter()
            .find(|(t, _)| t.uid == uid)
            .and_then(|(t, _)| t.parallelism)
    }

    /// The state instance `instance` of `op` restores, in a DAG of
    /// `key_groups` key groups: its own file at an unchanged parallelism;
    /// after a rescale the rows of its key groups from every file that
    /// held some (see [`super::keyed`]). From a version-1 checkpoint the
    /// task is found by its operator's number (a pipeline's DAG never
    /// changed before uids existed), every file of the operator is read,
    /// and `migrate` marks its keyed entries.
    pub fn state_for(
        &self,
        op: &OperatorSpec,
        instance: u32,
        key_groups: u32,
        migrate: Migration<'_>,
    ) -> Result<TaskState> {
        let mine = key_group_range(instance, op.parallelism, key_groups);
        let legacy = self
            .manifest
            .as_ref()
            .is_some_and(|m| m.format_version == MANIFEST_FORMAT_V1);
        if let Some(stored) = self.manifest.as_ref().and_then(|m| m.key_groups)
            && stored != key_groups
        {
            return Err(Error::internal(format!(
                "checkpoint {} has {stored} key groups, the pipeline {key_groups}",
                self.id
            )));
        }
        let ours = |t: &TaskEntry| {
            if legacy {
                t.operator == Some(op.id.0)
            } else {
                t.uid == op.uid
            }
        };
        let legacy_parallelism = self.tasks.iter().filter(|(t, _)| ours(t)).count() as u32;
        let parts: Vec<Part> = self
            .tasks
            .iter()
            .filter(|(t, _)| ours(t))
            // Before key groups any instance may hold any key.
            .filter(|(t, _)| legacy || t.key_groups.is_none_or(|r| r.overlaps(&mine)))
            .map(|(t, state)| Part {
                instance: t.instance,
                same: t.instance == instance && t.parallelism.unwrap_or(legacy_parallelism) == op.parallelism,
                legacy,
                state: state.clone(),
            })
            .collect();
        let name = format!("{} ({} {})", op.id, op.kind.name(), op.uid.short());
        assemble(parts, mine, key_groups, migrate, &name)
    }
}

/// Reads and checks checkpoint `id`; the error says what is wrong.
pub async fn read_checkpoint(
    store: &dyn StateStore,
    pipeline: PipelineId,
    id: u64,
) -> std::result::Result<RestoredCheckpoint, String> {
    let dir = checkpoint_dir(pipeline, id);
    let bytes = store
        .get(&format!("{dir}/{MANIFEST_FILE}"))
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no manifest (the checkpoint never completed)")?;
    let manifest = Manifest::decode(&bytes)?;
    if manifest.checkpoint_id != id || manifest.pipeline != pipeline.0 {
        return Err("manifest names another checkpoint".into());
    }
    let mut tasks = Vec::new();
    for t in &manifest.tasks {
        let mut state = read_task_file(store, &dir, &t.file, t.bytes, t.crc32).await?;
        let wanted = state.referenced_checkpoints().map_err(|e| format!("{}: {e}", t.file))?;
        let listed: std::collections::BTreeSet<u64> = t.references.iter().map(|r| r.checkpoint).collect();
        if !wanted.is_subset(&listed) {
            return Err(format!(
                "{} references checkpoints {wanted:?}, its manifest entry lists {listed:?}",
                t.file
            ));
        }
        let mut earlier = std::collections::BTreeMap::new();
        for r in t.references.iter().filter(|r| wanted.contains(&r.checkpoint)) {
            let other = checkpoint_dir(pipeline, r.checkpoint);
            let file = read_task_file(store, &other, &t.file, r.bytes, r.crc32).await?;
            earlier.insert(r.checkpoint, file);
        }
        // Also without references: an incremental value's bookkeeping
        // entries go, so the state splits by key group like a full one.
        super::incremental::resolve(&mut state, &earlier).map_err(|e| format!("{}: {e}", t.file))?;
        tasks.push((t.clone(), state));
    }
    Ok(RestoredCheckpoint {
        id,
        manifest: Some(manifest),
        tasks,
    })
}

/// Task file `file` of checkpoint directory `dir`, checked against its
/// length and CRC-32 and decoded.
async fn read_task_file(
    store: &dyn StateStore,
    dir: &str,
    file: &str,
    len: u64,
    crc: u32,
) -> std::result::Result<TaskState, String> {
    let bytes = store
        .get(&format!("{dir}/{file}"))
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("{dir}/{file} is missing"))?;
    if bytes.len() as u64 != len || crc32(&bytes) != crc {
        return Err(format!(
            "{dir}/{file} does not match its length and CRC-32 in the manifest"
        ));
    }
    TaskState::decode(&bytes).map_err(|e| format!("{dir}/{file}: {e}"))
}

/// The newest complete, intact checkpoint of `pipeline`, skipping (with
/// an error log line) any that is partial or corrupt. Also returns the
/// highest id used so far, so new checkpoints never reuse a directory.
pub async fn load_latest(store: &dyn StateStore, pipeline: PipelineId) -> Result<(Option<RestoredCheckpoint>, u64)> {
    let ids = list_ids(store, pipeline).await?;
    let highest = ids.last().copied().unwrap_or(0);
    for id in ids.into_iter().rev() {
        match read_checkpoint(store, pipeline, id).await {
            Ok(c) => {
                tracing::info!(pipeline = %pipeline, checkpoint = id, "restoring from checkpoint");
                return Ok((Some(c), highest));
            }
            Err(reason) => tracing::error!(
                pipeline = %pipeline,
                checkpoint = id,
                store = %store.describe(),
                "checkpoint {id} of pipeline {pipeline} is partial or corrupt ({reason}); skipping it in favour of the previous complete one"
            ),
        }
    }
    Ok((None, highest))
}

/// Deletes every checkpoint directory of `pipeline` older than the
/// `retained` newest complete ones, and incomplete ones older than the
/// newest complete one — except the files a retained one references (read
/// from the retained manifests): of such a directory only those files are
/// kept, its manifest going first (it is no checkpoint to restore any
/// more, and the other tasks' files it held are not kept for it).
pub async fn prune(store: &dyn StateStore, pipeline: PipelineId, complete: &[u64], retained: usize) -> Result<()> {
    let keep: Vec<u64> = complete.iter().rev().take(retained.max(1)).copied().collect();
    let Some(oldest_kept) = keep.iter().min().copied() else {
        return Ok(());
    };
    let newest = keep.iter().max().copied().unwrap_or(0);
    // Checkpoint → the task files in it that a kept checkpoint references.
    let mut referenced: std::collections::BTreeMap<u64, std::collections::BTreeSet<String>> = Default::default();
    for id in &keep {
        let manifest = store
            .get(&format!("{}/{MANIFEST_FILE}", checkpoint_dir(pipeline, *id)))
            .await?
            .and_then(|b| Manifest::decode(&b).ok());
        for t in manifest.iter().flat_map(|m| &m.tasks) {
            for r in &t.references {
                referenced.entry(r.checkpoint).or_default().insert(t.file.clone());
            }
        }
    }
    for id in list_ids(store, pipeline).await? {
        if keep.contains(&id) || !(id < oldest_kept || id < newest) {
            continue;
        }
        let dir = checkpoint_dir(pipeline, id);
        match referenced.get(&id) {
            None => store.delete_dir(&dir).await?,
            Some(files) => {
                store.delete_file(&format!("{dir}/{MANIFEST_FILE}")).await?;
                for name in store.list(&dir).await? {
                    if !files.contains(&name) {
                        store.delete_file(&format!("{dir}/{name}")).await?;
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::store::LocalStateStore;

    #[test]
    fn manifest_round_trips_and_detects_changes() {
        let m = Manifest {
            format_version: MANIFEST_FORMAT_VERSION,
            pipeline: 3,
            checkpoint_id: 7,
            started_ms: 1,
            completed_ms: 2,
            size_bytes: 10,
            key_groups: Some(256),
            tasks: vec![TaskEntry {
                operator: None,
                uid: OperatorUid(0xabc),
                instance: 0,
                parallelism: Some(1),
                key_groups: Some(key_group_range(0, 1, 256)),
                file: task_file(OperatorUid(0xabc), 0),
                bytes: 10,
                crc32: 5,
                references: vec![],
            }],
        };
        let bytes = m.encode().unwrap();
        assert_eq!(Manifest::decode(&bytes).unwrap(), m);
        let text = String::from_utf8(bytes)
            .unwrap()
            .replace("\"bytes\": 10", "\"bytes\": 11");
        assert!(Manifest::decode(text.as_bytes()).unwrap_err().contains("checksum"));
    }

    async fn write(store: &LocalStateStore, id: u64, corrupt: bool) {
        let p = PipelineId(1);
        let mut s = TaskState::default();
        s.put_bytes("x", id.to_le_bytes().to_vec());
        let mut bytes = s.encode().unwrap();
        let entry = TaskEntry {
            operator: None,
            uid: OperatorUid(2),
            instance: 0,
            parallelism: Some(1),
            key_groups: Some(key_group_range(0, 1, 256)),
            file: task_file(OperatorUid(2), 0),
            bytes: bytes.len() as u64,
            crc32: crc32(&bytes),
            references: vec![],
        };
        if corrupt {
            bytes[6] ^= 1;
        }
        let dir = checkpoint_dir(p, id);
        store.put(&format!("{dir}/{}", entry.file), bytes).await.unwrap();
        let m = Manifest {
            format_version: MANIFEST_FORMAT_V2,
            pipeline: 1,
            checkpoint_id: id,
            started_ms: 0,
            completed_ms: 0,
            key_groups: Some(256),
            size_bytes: entry.bytes,
            tasks: vec![entry],
        };
        store
            .put(&format!("{dir}/{MANIFEST_FILE}"), m.encode().unwrap())
            .await
            .unwrap();
    }

    /// Writes checkpoint `id` of pipeline 1 with task files of uids 1 and
    /// 2; the first references `refs` (files of the same name).
    async fn write_two(store: &LocalStateStore, id: u64, refs: &[u64]) {
        let dir = checkpoint_dir(PipelineId(1), id);
        let mut tasks = Vec::new();
        for uid in [1, 2] {
            let bytes = TaskState::default().encode().unwrap();
            let file = task_file(OperatorUid(uid), 0);
            store.put(&format!("{dir}/{file}"), bytes.clone()).await.unwrap();
            let references = if uid == 1 {
                refs.iter()
                    .map(|c| FileRef {
                        checkpoint: *c,
                        bytes: 0,
                        crc32: 0,
                    })
                    .collect()
            } else {
                vec![]
            };
            tasks.push(TaskEntry {
                operator: None,
                uid: OperatorUid(uid),
                instance: 0,
                parallelism: Some(1),
                key_groups: Some(key_group_range(0, 1, 256)),
                file,
                bytes: bytes.len() as u64,
                crc32: crc32(&bytes),
                references,
            });
        }
        let m = Manifest {
            format_version: Manifest::version_for(&tasks),
            pipeline: 1,
            checkpoint_id: id,
            started_ms: 0,
            completed_ms: 0,
            key_groups: Some(256),
            size_bytes: 0,
            tasks,
        };
        store
            .put(&format!("{dir}/{MANIFEST_FILE}"), m.encode().unwrap())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn pruning_keeps_only_the_referenced_files_of_an_old_checkpoint() {
        let tmp = tempfile::tempdir().unwrap();
        let store = LocalStateStore::new(tmp.path());
        let p = PipelineId(1);
        write_two(&store, 1, &[]).await;
        write_two(&store, 2, &[1]).await;
        write_two(&store, 3, &[1]).await;
        prune(&store, p, &[1, 2, 3], 1).await.unwrap();
        // 3 is kept whole; of 1, only the file 3 references; 2 goes.
        assert_eq!(list_ids(&store, p).await.unwrap(), vec![1, 3]);
        let mut left = store.list(&checkpoint_dir(p, 1)).await.unwrap();
        left.sort();
        assert_eq!(left, vec![task_file(OperatorUid(1), 0)]);
        assert_eq!(store.list(&checkpoint_dir(p, 3)).await.unwrap().len(), 3);
        // 1 is no checkpoint any more: recovery takes 3, and falls back to
        // nothing older.
        let (c, _) = load_latest(&store, p).await.unwrap();
        assert_eq!(c.unwrap().id, 3);
        assert!(read_checkpoint(&store, p, 1).await.is_err());
        // Once nothing references 1, it goes too.
        write_two(&store, 4, &[]).await;
        prune(&store, p, &[3, 4], 1).await.unwrap();
        assert_eq!(list_ids(&store, p).await.unwrap(), vec![4]);
    }

    #[tokio::test]
    async fn recovery_skips_corrupt_and_partial_checkpoints() {
        let tmp = tempfile::tempdir().unwrap();
        let store = LocalStateStore::new(tmp.path());
        let p = PipelineId(1);
        write(&store, 1, false).await;
        write(&store, 2, false).await;
        write(&store, 3, true).await;
        // A partial checkpoint: a task file, no manifest.
        store
            .put(&format!("{}/x.state", checkpoint_dir(p, 4)), vec![1])
            .await
            .unwrap();
        let (c, highest) = load_latest(&store, p).await.unwrap();
        let c = c.unwrap();
        assert_eq!((c.id, highest), (2, 4));
        let op = OperatorSpec {
            id: sluice_types::OperatorId(0),
            uid: OperatorUid(2),
            kind: sluice_plan::OperatorKind::Sink(sluice_plan::SinkSpec {
                changelog: false,
                connector: "blackhole".into(),
                options: Default::default(),
                event_time_column: None,
            }),
            parallelism: 1,
            output_schema: sluice_plan::empty_schema(),
        };
        let state = c.state_for(&op, 0, 256, &Ok).unwrap();
        assert_eq!(state.bytes("x").unwrap(), 2u64.to_le_bytes());
        prune(&store, p, &[1, 2], 1).await.unwrap();
        assert_eq!(list_ids(&store, p).await.unwrap(), vec![2, 3, 4]);
    }
}
