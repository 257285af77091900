//! Supervision of a checkpointed named pipeline: deploy it restored from
//! its newest complete checkpoint; when a task fails, restart it (from the
//! newest checkpoint again) after a backoff; a pipeline that fails
//! [`RESTARTS_MAX`] times in a row without completing a checkpoint in
//! between stays failed with its error. Other pipelines are not affected.

use crate::scheduler::Scheduler;
use sluice_dataflow::checkpoint::manifest::load_latest;
use sluice_dataflow::checkpoint::{CheckpointConfig, CheckpointStats, StateStore};
use sluice_dataflow::deploy::{CheckpointPlan, PipelineRuntime, PipelineStatus};
use sluice_plan::PhysicalDag;
use sluice_plan::diff::StateHandoff;
use sluice_types::PipelineId;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Consecutive failures (no checkpoint completed in between) before a
/// pipeline is left failed.
pub const RESTARTS_MAX: u32 = 5;
const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The backoff before restart number `attempt` (1-based): doubling from
/// 0.5 s, at most 30 s.
pub fn backoff(attempt: u32) -> Duration {
    (BACKOFF_MIN * 2u32.saturating_pow(attempt.saturating_sub(1).min(16))).min(BACKOFF_MAX)
}

/// What the master sees of a supervised pipeline.
pub struct Slot {
    pub runtime: Mutex<Option<Arc<PipelineRuntime>>>,
    pub restarts: AtomicU64,
    /// Set when the pipeline could not be (re)deployed or gave up.
    pub failed: Mutex<Option<String>>,
    pub stats: Arc<CheckpointStats>,
    pub stop: CancellationToken,
    /// Becomes true once the first deployment was attempted (deployed or
    /// failed), so CREATE can return with the pipeline in place.
    pub started: tokio::sync::watch::Sender<bool>,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            runtime: Mutex::new(None),
            restarts: AtomicU64::new(0),
            failed: Mutex::new(None),
            stats: Arc::default(),
            stop: CancellationToken::new(),
            started: tokio::sync::watch::channel(false).0,
        }
    }
}

impl Slot {
    /// A slot for a new version of a pipeline: its checkpoint history goes on.
    pub fn carrying(stats: Arc<CheckpointStats>) -> Self {
        Slot {
            stats,
            ..Slot::default()
        }
    }

    /// Waits until the first deployment was attempted.
    pub async fn wait_started(&self) {
        let mut rx = self.started.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    pub fn runtime(&self) -> Option<Arc<PipelineRuntime>> {
        self.runtime.lock().expect("slot lock").clone()
    }
}

/// What a supervisor runs: a checkpointed pipeline's DAG, how it
/// checkpoints, and (after `ALTER PIPELINE`) where its operators find
/// their state in the checkpoint the previous version stopped at.
pub struct Supervised {
    pub dag: PhysicalDag,
    pub interval: Duration,
    pub store: Arc<dyn StateStore>,
    pub handoff: Option<StateHandoff>,
    /// The newest checkpoint known complete before this start (the master
    /// quorum's record; 0: none): restoring from an older one would write
    /// output twice, so a store without it is an error.
    pub recorded: u64,
}

/// Runs the pipeline until it finishes, is stopped (also at a barrier, by
/// `ALTER PIPELINE`), or gives up.
pub async fn supervise(id: PipelineId, run: Supervised, scheduler: Arc<dyn Scheduler>, slot: Arc<Slot>) {
    let mut failures = 0u32;
    loop {
        let completed_before = slot.stats.last().map(|c| c.id);
        let outcome = run_once(id, &run, &scheduler, &slot).await;
        if let Err(e) = &outcome {
            *slot.failed.lock().expect("slot lock") = Some(e.to_string());
        }
        slot.started.send_replace(true);
        let error = match outcome {
            Ok(PipelineStatus::Failed { error, .. }) => error,
            // Stopped at a barrier to move (a draining worker): on again
            // from that barrier's checkpoint, placed anew, at once.
            Ok(PipelineStatus::Stopped)
                if !slot.stop.is_cancelled() && slot.runtime().is_some_and(|r| r.relocating()) =>
            {
                tracing::info!(pipeline = %id, "pipeline stopped at a barrier to move; starting it again");
                continue;
            }
            Ok(_) => return,
            Err(e) => e.to_string(),
        };
        if slot.stop.is_cancelled() {
            return;
        }
        if slot.stats.last().map(|c| c.id) != completed_before {
            failures = 0;
        }
        failures += 1;
        if failures > RESTARTS_MAX {
            tracing::error!(pipeline = %id, %error, "pipeline keeps failing; giving up");
            *slot.failed.lock().expect("slot lock") = Some(format!("gave up after {RESTARTS_MAX} restarts: {error}"));
            return;
        }
        let wait = backoff(failures);
        tracing::warn!(pipeline = %id, %error, ?wait, "pipeline failed; restarting from its last checkpoint");
        tokio::select! {
            _ = slot.stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        slot.restarts.fetch_add(1, Ordering::Relaxed);
    }
}

async fn run_once(
    id: PipelineId,
    run: &Supervised,
    scheduler: &Arc<dyn Scheduler>,
    slot: &Slot,
) -> sluice_types::Result<PipelineStatus> {
    let (restored, highest_id) = load_latest(run.store.as_ref(), id).await?;
    let known = run.recorded.max(slot.stats.last().map_or(0, |c| c.id));
    if highest_id < known {
        return Err(sluice_types::Error::external(format!(
            "checkpoint {known} of pipeline {id} completed, but the checkpoint store {} has none that new \
             (newest: {highest_id}); not restarting from older state, which would write output twice \
             (do all masters and workers reach the same checkpoint directory?)",
            run.store.describe()
        )));
    }
    slot.stats.set_restored_from(restored.as_ref().map(|r| r.id));
    let plan = CheckpointPlan {
        config: CheckpointConfig::new(run.interval, run.store.clone(), slot.stats.clone()),
        restored,
        highest_id,
        handoff: run.handoff.clone(),
    };
    if slot.stop.is_cancelled() {
        return Ok(PipelineStatus::Stopped);
    }
    let runtime = scheduler.deploy_checkpointed(id, &run.dag, plan)?;
    *slot.runtime.lock().expect("slot lock") = Some(runtime.clone());
    *slot.failed.lock().expect("slot lock") = None;
    slot.started.send_replace(true);
    tokio::select! {
        status = runtime.wait() => Ok(status),
        _ = slot.stop.cancelled() => {
            runtime.stop();
            Ok(PipelineStatus::Stopped)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scheduler that must not be asked to deploy anything.
    struct NeverDeploy;

    impl Scheduler for NeverDeploy {
        fn deploy(&self, _: PipelineId, _: &PhysicalDag) -> sluice_types::Result<Arc<PipelineRuntime>> {
            panic!("deployed")
        }
        fn deploy_checkpointed(
            &self,
            _: PipelineId,
            _: &PhysicalDag,
            _: CheckpointPlan,
        ) -> sluice_types::Result<Arc<PipelineRuntime>> {
            panic!("deployed a pipeline whose recorded checkpoint is missing")
        }
        fn stop(&self, _: PipelineId) {}
        fn release_stream(&self, _: &str) {}
    }

    #[tokio::test]
    async fn a_store_without_the_recorded_checkpoint_is_refused_not_started_over() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn StateStore> = Arc::new(sluice_dataflow::checkpoint::LocalStateStore::new(dir.path()));
        let run = Supervised {
            dag: PhysicalDag::new(Vec::new(), Vec::new()),
            interval: Duration::from_secs(1),
            store,
            handoff: None,
            recorded: 7,
        };
        let scheduler: Arc<dyn Scheduler> = Arc::new(NeverDeploy);
        let err = run_once(PipelineId(3), &run, &scheduler, &Slot::default())
            .await
            .expect_err("an empty store holds no checkpoint 7");
        let text = err.to_string();
        assert!(
            text.contains("checkpoint 7") && text.contains("newest: 0") && text.contains("twice"),
            "{text}"
        );
    }

    #[test]
    fn backoff_doubles_up_to_its_bound() {
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(2), Duration::from_secs(1));
        assert_eq!(backoff(4), Duration::from_secs(4));
        assert_eq!(backoff(100), BACKOFF_MAX);
    }
}
