//! The master: owns the catalog, applies [`CatalogCommand`]s to it, starts
//! and stops pipelines through the scheduler, and answers status questions.
//!
//! It holds no data-plane object: memory streams' logs and session result
//! channels belong to the connectors of the process that runs the tasks
//! (the worker); the master reaches them only through the [`Scheduler`]
//! (`release_stream` when a memory stream is dropped).

use crate::catalog::{CatalogState, CatalogStore, PipelineDef, PipelineKind};
use crate::command::{Applied, CatalogCommand};
use crate::scheduler::Scheduler;
use crate::status::{PipelineInfo, describe_status, totals};
use crate::supervisor::{Slot, Supervised, supervise};
use sluice_dataflow::checkpoint::manifest::{prune, read_checkpoint};
use sluice_dataflow::checkpoint::{CheckpointConfig, RestoredCheckpoint, StateStore};
use sluice_dataflow::deploy::{CheckpointPlan, PipelineRuntime, PipelineStatus};
use sluice_plan::OperatorKind;
use sluice_plan::PhysicalDag;
use sluice_plan::catalog::StreamDef;
use sluice_plan::diff::{ResetPolicy, diff};
use sluice_types::{Error, ObjectKind, PipelineId, Result, SqlCode, now_ms};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Session query ids start here, apart from named pipelines' ids.
const SESSION_QUERY_ID_BASE: u64 = 1 << 40;

struct Running {
    slot: Arc<Slot>,
    since_ms: i64,
}

/// How long the running version may take to stop at the barrier of an
/// ALTER before the change is abandoned (and the pipeline restarted from
/// its last checkpoint).
pub const ALTER_STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The new version an `ALTER PIPELINE` asks for.
struct Alteration {
    sql: String,
    statement: String,
    dag: PhysicalDag,
    derived: Option<StreamDef>,
    policy: ResetPolicy,
    changed_ms: i64,
}

/// How an ALTER treats state whose operator changed.
pub fn policy(reset_state: bool, rewind: bool) -> ResetPolicy {
    match (rewind, reset_state) {
        (true, _) => ResetPolicy::ResetReplaced,
        (false, true) => ResetPolicy::ResetChanged,
        (false, false) => ResetPolicy::Refuse,
    }
}

/// Marks a pipeline as being altered while it lives.
struct AlterGuard<'a> {
    master: &'a Master,
    name: String,
}

impl Drop for AlterGuard<'_> {
    fn drop(&mut self) {
        self.master.altering.lock().expect("altering lock").remove(&self.name);
    }
}

/// The master of a Sluice cluster.
pub struct Master {
    store: CatalogStore,
    state: Mutex<CatalogState>,
    scheduler: Arc<dyn Scheduler>,
    running: Mutex<HashMap<String, Running>>,
    /// Pipelines an ALTER is changing: one change at a time per pipeline.
    altering: Mutex<std::collections::HashSet<String>>,
    next_query_id: AtomicU64,
    /// Session queries this master runs now, for its clients or a
    /// follower's ([`crate::session_query`]).
    session_queries: Arc<AtomicU64>,
    /// Where checkpoints go unless a pipeline says otherwise: a directory
    /// (every worker's, in a cluster) or `hdfs://host:port/dir`.
    checkpoint_location: String,
    /// With a master quorum: where changes go and commands are forwarded
    /// (`crate::replication`); `None` for a single master.
    replication: Option<Arc<dyn crate::replication::Replication>>,
}

/// The pipelines that read `stream`, but `except`.
fn readers_of<'a>(state: &'a CatalogState, stream: &str, except: Option<&str>) -> Vec<&'a str> {
    state
        .pipelines
        .values()
        .filter(|p| Some(p.name.as_str()) != except && p.reads(stream))
        .map(|p| p.name.as_str())
        .collect()
}

/// Refuses to drop `what` while pipelines read `stream`.
fn ensure_unread(state: &CatalogState, stream: &str, what: &str) -> Result<()> {
    let readers = readers_of(state, stream, None);
    if readers.is_empty() {
        return Ok(());
    }
    Err(Error::user(
        SqlCode::DependentObjectsStillExist,
        format!(
            "cannot drop {what}: pipeline(s) {} read stream \"{stream}\"; drop them first",
            readers.join(", ")
        ),
    ))
}

impl Master {
    /// Opens the catalog in `data_dir` and restarts its pipelines;
    /// checkpoints go to `data_dir/checkpoints` unless a pipeline says
    /// otherwise.
    pub fn open(data_dir: &Path, scheduler: Arc<dyn Scheduler>) -> Result<Self> {
        let root = data_dir.join("checkpoints");
        Self::open_with(data_dir, &root.display().to_string(), scheduler)
    }

    /// Opens the catalog in `data_dir` and restarts its pipelines;
    /// checkpoints go to `checkpoint_location` (a directory or
    /// `hdfs://host:port/dir`) unless a pipeline says otherwise.
    pub fn open_with(data_dir: &Path, checkpoint_location: &str, scheduler: Arc<dyn Scheduler>) -> Result<Self> {
        let store = CatalogStore::new(data_dir);
        let state = store.load()?;
        let master = Master {
            checkpoint_location: checkpoint_location.to_string(),
            store,
            state: Mutex::new(state),
            scheduler,
            running: Mutex::new(HashMap::new()),
            altering: Mutex::default(),
            next_query_id: AtomicU64::new(SESSION_QUERY_ID_BASE),
            session_queries: Arc::default(),
            replication: None,
        };
        let pipelines: Vec<PipelineDef> = master.lock().pipelines.values().cloned().collect();
        for p in pipelines {
            if let Err(e) = master.start(&p) {
                tracing::error!(pipeline = %p.name, error = %e, "could not restart pipeline");
            }
        }
        Ok(master)
    }

    /// A master of a quorum, starting as a follower with `catalog` (what
    /// the replicated state holds): it runs no pipeline until
    /// [`Master::promote`].
    pub fn open_replicated(
        data_dir: &Path,
        checkpoint_location: &str,
        scheduler: Arc<dyn Scheduler>,
        replication: Arc<dyn crate::replication::Replication>,
        catalog: CatalogState,
    ) -> Result<Self> {
        let store = CatalogStore::new(data_dir);
        store.save(&catalog)?;
        Ok(Master {
            checkpoint_location: checkpoint_location.to_string(),
            store,
            state: Mutex::new(catalog),
            scheduler,
            running: Mutex::new(HashMap::new()),
            altering: Mutex::default(),
            next_query_id: AtomicU64::new(SESSION_QUERY_ID_BASE),
            session_queries: Arc::default(),
            replication: Some(replication),
        })
    }

    /// This master became the quorum's leader: it takes `catalog` (the
    /// replicated state, which its election merged from a majority) and
    /// starts every pipeline from its newest checkpoint.
    pub fn promote(&self, catalog: CatalogState) -> Result<()> {
        self.mirror(catalog)?;
        let pipelines: Vec<PipelineDef> = self.lock().pipelines.values().cloned().collect();
        for p in pipelines {
            if self.running.lock().expect("running lock").contains_key(&p.name) {
                continue;
            }
            if let Err(e) = self.start(&p) {
                tracing::error!(pipeline = %p.name, error = %e, "could not start pipeline on the new leader");
            }
        }
        Ok(())
    }

    /// This master stopped leading: its pipelines stop (the new leader
    /// starts them from their checkpoints); the catalog stays.
    pub fn demote(&self) {
        let names: Vec<String> = self.running.lock().expect("running lock").keys().cloned().collect();
        for name in names {
            self.stop(&name);
        }
    }

    /// Takes `catalog` as this master's (a follower following the
    /// replicated state).
    pub fn mirror(&self, catalog: CatalogState) -> Result<()> {
        let mut state = self.lock();
        *state = catalog;
        self.store.save(&state)
    }

    /// The checkpoint store of a pipeline: the location recorded when it
    /// was created (older catalogs: its sink's `'checkpoint.dir'`, or this
    /// master's).
    fn checkpoint_store(&self, def: &PipelineDef) -> Result<Arc<dyn StateStore>> {
        let default = &self.checkpoint_location;
        let sink_dir = checkpointing(&def.dag)?.and_then(|(_, dir)| dir);
        let location = def.checkpoint_location.clone().or(sink_dir);
        sluice_connectors::state_store::open_state_store(
            Some(location.as_deref().unwrap_or(default)),
            Path::new(default),
        )
    }

    /// On the quorum's leader: records each running pipeline's newest
    /// completed checkpoint in the replicated catalog, so whichever master
    /// leads next refuses to restore an older one (a checkpoint store that
    /// lost it, or a master pointed at another store). Returns once a
    /// majority holds the change; a no-op on a single master and on
    /// followers.
    pub async fn record_checkpoints(&self) -> Result<()> {
        let Some(replication) = &self.replication else {
            return Ok(());
        };
        if !replication.is_leader() {
            return Ok(());
        }
        let newest: Vec<(String, u64)> = self
            .running
            .lock()
            .expect("running lock")
            .iter()
            .filter_map(|(name, r)| r.slot.stats.last().map(|c| (name.clone(), c.id)))
            .collect();
        let catalog = {
            let mut state = self.lock();
            let mut changed = false;
            for (name, id) in newest {
                if !state.pipelines.contains_key(&name) {
                    continue;
                }
                let recorded = state.checkpoints.entry(name).or_insert(0);
                if id > *recorded {
                    *recorded = id;
                    changed = true;
                }
            }
            if !changed {
                return Ok(());
            }
            self.store.save(&state)?;
            state.clone()
        };
        replication.replicate(&catalog).await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CatalogState> {
        self.state.lock().expect("catalog lock")
    }

    /// Applies one catalog command: the only way the catalog changes.
    /// Returns once the change is made; an `ALTER PIPELINE` that changes
    /// the running DAG returns once the old version stopped at its barrier
    /// and the new one was started.
    ///
    /// `AsRole { role, .. }` runs its command for `role`: what it creates
    /// is owned by `role`. Whatever drops a stream or pipeline (with or
    /// without a role) forgets its owner and grants in the same step.
    pub async fn apply(&self, command: CatalogCommand) -> Result<Applied> {
        let Some(replication) = &self.replication else {
            return self.apply_here(command).await;
        };
        if !replication.is_leader() {
            return replication.forward(command).await;
        }
        replication.may_decide()?;
        let applied = self.apply_here(command).await?;
        // Acknowledged only once a majority of masters holds the change.
        let catalog = self.lock().clone();
        replication.replicate(&catalog).await?;
        Ok(applied)
    }

    async fn apply_here(&self, command: CatalogCommand) -> Result<Applied> {
        let (owner, command) = match command {
            CatalogCommand::AsRole { role, command } => (Some(role), *command),
            command => (None, command),
        };
        let effect = command.ownership_effect(&self.lock());
        let applied = self.apply_unowned(command).await?;
        if applied == Applied::Changed
            && let Some(effect) = effect
        {
            let mut state = self.lock();
            state.security.record_ownership(owner.as_deref().unwrap_or(""), &effect);
            self.store.save(&state)?;
        }
        Ok(applied)
    }

    async fn apply_unowned(&self, command: CatalogCommand) -> Result<Applied> {
        let changed = match command {
            CatalogCommand::Security(command) => self.apply_security(command)?,
            CatalogCommand::AsRole { .. } => return Err(Error::internal("AsRole inside AsRole")),
            CatalogCommand::CreateStream { def, if_not_exists } => self.create_stream(def, if_not_exists)?,
            CatalogCommand::CreatePipeline {
                name,
                kind,
                sql,
                dag,
                derived,
                if_not_exists,
                created_ms,
                expanded_query,
            } => self.create_pipeline(
                &name,
                kind,
                &sql,
                dag,
                derived,
                if_not_exists,
                created_ms,
                expanded_query,
            )?,
            CatalogCommand::DropStream { name, if_exists } => self.drop_stream(&name, if_exists)?,
            CatalogCommand::DropPipeline { name, if_exists, only } => self.drop_pipeline(&name, if_exists, only)?,
            CatalogCommand::SetPaused { name, paused } => {
                self.set_paused(&name, paused)?;
                true
            }
            CatalogCommand::AlterPipeline {
                name,
                sql,
                statement,
                dag,
                derived,
                reset_state,
                rewind,
                changed_ms,
            } => {
                let change = Alteration {
                    sql,
                    statement,
                    dag,
                    derived,
                    policy: policy(reset_state, rewind),
                    changed_ms,
                };
                self.alter_pipeline(&name, change).await?
            }
        };
        Ok(if changed { Applied::Changed } else { Applied::Unchanged })
    }

    /// Applies a change to roles, grants or tokens.
    fn apply_security(&self, command: crate::security::SecurityCommand) -> Result<bool> {
        let mut state = self.lock();
        let CatalogState { streams, security, .. } = &mut *state;
        let changed = security.apply(command, |s| streams.contains_key(s))?;
        if changed {
            self.store.save(&state)?;
        }
        Ok(changed)
    }

    /// The security part of the catalog, as it is now.
    pub fn security(&self) -> crate::security::SecurityCatalog {
        self.lock().security.clone()
    }

    /// Reads the security part of the catalog without copying it.
    pub fn with_security<T>(&self, read: impl FnOnce(&crate::security::SecurityCatalog) -> T) -> T {
        read(&self.lock().security)
    }

    pub fn stream(&self, name: &str) -> Option<StreamDef> {
        self.lock().streams.get(name).cloned()
    }

    pub fn streams(&self) -> Vec<StreamDef> {
        self.lock().streams.values().cloned().collect()
    }

    /// Adds a stream; `Ok(false)` when it exists and `if_not_exists`.
    fn create_stream(&self, def: StreamDef, if_not_exists: bool) -> Result<bool> {
        let mut state = self.lock();
        if state.streams.contains_key(&def.name) {
            if if_not_exists {
                return Ok(false);
            }
            return Err(Error::user(
                SqlCode::DuplicateObject,
                format!("stream \"{}\" already exists", def.name),
            ));
        }
        // Streams and materialized views share the names queries read.
        if state
            .pipelines
            .get(&def.name)
            .is_some_and(|p| p.kind == PipelineKind::MaterializedView)
        {
            return Err(Error::user(
                SqlCode::DuplicateObject,
                format!("materialized view \"{}\" already exists", def.name),
            ));
        }
        state.streams.insert(def.name.clone(), def);
        self.store.save(&state)?;
        Ok(true)
    }

    /// Drops a stream. A derived stream's pipeline is dropped with it; a
    /// stream other pipelines read cannot be dropped.
    fn drop_stream(&self, name: &str, if_exists: bool) -> Result<bool> {
        self.ensure_not_altering(name)?;
        let mut state = self.lock();
        let Some(def) = state.streams.get(name).cloned() else {
            if state
                .pipelines
                .get(name)
                .is_some_and(|p| p.kind == PipelineKind::MaterializedView)
            {
                return Err(Error::user(
                    SqlCode::WrongObjectType,
                    format!("\"{name}\" is a materialized view, not a stream: use DROP MATERIALIZED VIEW {name}"),
                ));
            }
            return if if_exists {
                Ok(false)
            } else {
                Err(Error::not_found(ObjectKind::Stream, name))
            };
        };
        ensure_unread(&state, name, &format!("stream \"{name}\""))?;
        if let Some(p) = &def.pipeline {
            state.pipelines.remove(p);
            self.stop(p);
        }
        state.streams.remove(name);
        self.store.save(&state)?;
        drop(state);
        self.scheduler.release_stream(name);
        Ok(true)
    }

    /// Registers and starts a named pipeline (and its derived stream).
    #[allow(clippy::too_many_arguments)]
    fn create_pipeline(
        &self,
        name: &str,
        kind: PipelineKind,
        sql: &str,
        dag: PhysicalDag,
        derived: Option<StreamDef>,
        if_not_exists: bool,
        created_ms: i64,
        expanded_query: Option<String>,
    ) -> Result<bool> {
        let def = {
            let mut state = self.lock();
            let read_by_name = derived.is_some() || kind == PipelineKind::MaterializedView;
            if state.pipelines.contains_key(name) || read_by_name && state.streams.contains_key(name) {
                if if_not_exists {
                    return Ok(false);
                }
                return Err(Error::user(
                    SqlCode::DuplicateObject,
                    format!("\"{name}\" already exists"),
                ));
            }
            let id = PipelineId(state.next_pipeline_id);
            state.next_pipeline_id += 1;
            let location = checkpointing(&dag)?.and_then(|(_, dir)| dir);
            let def = PipelineDef {
                name: name.to_string(),
                id,
                kind,
                sql: sql.to_string(),
                dag,
                created_ms,
                earlier_versions: Vec::new(),
                changed_ms: None,
                changed_by: None,
                diff: Vec::new(),
                handoff: None,
                checkpoint_location: Some(location.unwrap_or_else(|| self.checkpoint_location.clone())),
                expanded_query,
            };
            state.pipelines.insert(name.to_string(), def.clone());
            if let Some(stream) = derived {
                state.streams.insert(stream.name.clone(), stream);
            }
            self.store.save(&state)?;
            def
        };
        if let Err(e) = self.start(&def) {
            let mut state = self.lock();
            state.pipelines.remove(name);
            state.streams.retain(|_, s| s.pipeline.as_deref() != Some(name));
            self.store.save(&state)?;
            return Err(e);
        }
        Ok(true)
    }

    fn start(&self, def: &PipelineDef) -> Result<()> {
        self.start_version(def, Arc::new(Slot::default()), None)
    }

    /// Starts `def` in `slot`. A checkpointed pipeline runs under a
    /// supervisor, which restores it from its newest checkpoint (after an
    /// ALTER: the one the previous version stopped at, `def.handoff` saying
    /// where each operator's state is). A pipeline whose checkpoints are
    /// off is deployed here, checkpointing only when asked to stop at a
    /// barrier; it restores only `restored` (the snapshot an ALTER just
    /// took), never a checkpoint found at start-up.
    fn start_version(&self, def: &PipelineDef, slot: Arc<Slot>, restored: Option<RestoredCheckpoint>) -> Result<()> {
        match checkpointing(&def.dag)? {
            None => {
                let store = self.checkpoint_store(def)?;
                let plan = CheckpointPlan {
                    config: CheckpointConfig::on_demand(store, slot.stats.clone()),
                    // Above every id an earlier ALTER stopped at.
                    highest_id: def.handoff.as_ref().map_or(0, |h| h.checkpoint),
                    restored,
                    handoff: def.handoff.clone(),
                };
                let runtime = self.scheduler.deploy_checkpointed(def.id, &def.dag, plan)?;
                *slot.runtime.lock().expect("slot lock") = Some(runtime);
                slot.started.send_replace(true);
            }
            Some((interval, _)) => {
                let store = self.checkpoint_store(def)?;
                let run = Supervised {
                    dag: def.dag.clone(),
                    interval,
                    store,
                    handoff: def.handoff.clone(),
                    recorded: self.lock().checkpoints.get(&def.name).copied().unwrap_or(0),
                };
                tokio::spawn(supervise(def.id, run, self.scheduler.clone(), slot.clone()));
            }
        }
        self.running.lock().expect("running lock").insert(
            def.name.clone(),
            Running {
                slot,
                since_ms: now_ms(),
            },
        );
        Ok(())
    }

    fn stop(&self, name: &str) {
        if let Some(r) = self.running.lock().expect("running lock").remove(name) {
            r.slot.stop.cancel();
            if let Some(runtime) = r.slot.runtime() {
                self.scheduler.stop(runtime.id);
                runtime.stop();
            }
        }
    }

    /// Stops and forgets a pipeline (and its derived stream, if no one
    /// reads it). With `only`, a pipeline of another kind is refused.
    fn drop_pipeline(&self, name: &str, if_exists: bool, only: Option<PipelineKind>) -> Result<bool> {
        self.ensure_not_altering(name)?;
        let mut state = self.lock();
        let Some(kind) = state.pipelines.get(name).map(|p| p.kind) else {
            return if if_exists {
                Ok(false)
            } else {
                Err(Error::not_found(ObjectKind::Pipeline, name))
            };
        };
        if let Some(only) = only
            && only != kind
        {
            let (what, statement) = match kind {
                PipelineKind::Sink => ("a sink", "DROP SINK"),
                PipelineKind::DerivedStream => ("a stream", "DROP STREAM"),
                PipelineKind::MaterializedView => ("a materialized view", "DROP MATERIALIZED VIEW"),
            };
            let asked = match only {
                PipelineKind::Sink => "a sink",
                PipelineKind::DerivedStream => "a stream",
                PipelineKind::MaterializedView => "a materialized view",
            };
            return Err(Error::user(
                SqlCode::WrongObjectType,
                format!("\"{name}\" is {what}, not {asked}: use {statement} {name}"),
            ));
        }
        let derived: Vec<String> = state
            .streams
            .values()
            .filter(|s| s.pipeline.as_deref() == Some(name))
            .map(|s| s.name.clone())
            .collect();
        for stream in &derived {
            ensure_unread(&state, stream, &format!("\"{name}\""))?;
        }
        state.pipelines.remove(name);
        state.checkpoints.remove(name);
        for stream in &derived {
            state.streams.remove(stream);
        }
        self.store.save(&state)?;
        drop(state);
        self.stop(name);
        for stream in &derived {
            self.scheduler.release_stream(stream);
        }
        Ok(true)
    }

    /// Marks `name` as being altered; refused while another ALTER of it
    /// is in flight.
    fn begin_alter(&self, name: &str) -> Result<AlterGuard<'_>> {
        if !self.altering.lock().expect("altering lock").insert(name.to_string()) {
            return Err(Error::user(
                SqlCode::ObjectInUse,
                format!(
                    "pipeline \"{name}\" is being changed by another ALTER PIPELINE; try again when it has finished"
                ),
            ));
        }
        Ok(AlterGuard {
            master: self,
            name: name.to_string(),
        })
    }

    /// Refuses to drop or change a pipeline an ALTER is changing.
    fn ensure_not_altering(&self, name: &str) -> Result<()> {
        if self.altering.lock().expect("altering lock").contains(name) {
            return Err(Error::user(
                SqlCode::ObjectInUse,
                format!("pipeline \"{name}\" is being changed by ALTER PIPELINE; try again when it has finished"),
            ));
        }
        Ok(())
    }

    /// `ALTER PIPELINE … AS | SET PARALLELISM`: diffs the new DAG against
    /// the running one and refuses what cannot be done (state of another
    /// shape without `state = 'reset'`, a derived stream's columns
    /// changing under its readers) before touching anything; then stops
    /// the running version at a barrier, records the new version, and
    /// starts it from that barrier's snapshot. `Ok(false)` when the new
    /// version is the running one.
    ///
    /// A crash before the new version is recorded restarts the old one
    /// from the barrier's checkpoint; after it, the new one, with the
    /// recorded handoff: the old or the new version, never a mixture.
    async fn alter_pipeline(&self, name: &str, change: Alteration) -> Result<bool> {
        let _guard = self.begin_alter(name)?;
        let old = self
            .pipeline(name)
            .ok_or_else(|| Error::not_found(ObjectKind::Pipeline, name))?;
        let policy = change.policy;
        if let Some(stream) = &change.derived {
            self.check_derived_schema(name, stream)?;
        }
        let d = diff(&old.dag, &change.dag, policy);
        if !d.refused.is_empty() {
            return Err(Error::user(
                SqlCode::FeatureNotSupported,
                format!(
                    "cannot change pipeline \"{name}\": {}; the pipeline runs on unchanged",
                    d.refused.join("; ")
                ),
            ));
        }
        if d.is_empty() && old.sql == change.sql {
            return Ok(false);
        }
        let version = old.version();
        let slot = self
            .running
            .lock()
            .expect("running lock")
            .get(name)
            .map(|r| r.slot.clone());
        let running = slot
            .as_ref()
            .and_then(|s| s.runtime())
            .filter(|r| r.status() == PipelineStatus::Running);
        let checkpoint = match &running {
            Some(runtime) => runtime.stop_at_barrier(ALTER_STOP_TIMEOUT).await.map_err(|e| {
                Error::external(format!(
                    "ALTER PIPELINE {name}: the switch did not happen ({e}); the pipeline goes on as version {version}"
                ))
            })?,
            // Not running (failed, or given up): the new version starts
            // from the last complete checkpoint, if any.
            None => slot
                .as_ref()
                .and_then(|s| s.stats.last().map(|c| c.id).or(s.stats.restored_from()))
                .unwrap_or(0),
        };
        let stats = slot.as_ref().map(|s| s.stats.clone()).unwrap_or_default();
        if let Some(r) = self.running.lock().expect("running lock").remove(name) {
            r.slot.stop.cancel();
            if let Some(runtime) = r.slot.runtime() {
                runtime.stop();
            }
        }
        let def = {
            let mut state = self.lock();
            let def = state
                .pipelines
                .get_mut(name)
                .ok_or_else(|| Error::not_found(ObjectKind::Pipeline, name))?;
            def.push_version(
                (change.sql, change.statement),
                change.dag,
                d.lines.clone(),
                d.handoff(checkpoint),
                change.changed_ms,
            );
            let def = def.clone();
            if let Some(stream) = change.derived {
                state.streams.insert(stream.name.clone(), stream);
            }
            self.store.save(&state)?;
            def
        };
        tracing::info!(pipeline = %name, version = def.version(), checkpoint, "pipeline changed: {}", d.text().join("; "));
        // A pipeline whose checkpoints are off restores the barrier's
        // snapshot here (its supervisor-less start never looks for one).
        let restored = match checkpointing(&def.dag)? {
            None if checkpoint > 0 => {
                let store = self.checkpoint_store(&def)?;
                let store = store.as_ref();
                let restored = read_checkpoint(store, def.id, checkpoint)
                    .await
                    .map_err(|e| Error::internal(format!("the snapshot of the switch is unreadable: {e}")))?;
                prune(store, def.id, &[checkpoint], 1).await?;
                Some(restored)
            }
            _ => None,
        };
        let slot = Arc::new(Slot::carrying(stats));
        self.start_version(&def, slot.clone(), restored)?;
        self.running.lock().expect("running lock").insert(
            name.to_string(),
            Running {
                slot,
                since_ms: now_ms(),
            },
        );
        Ok(true)
    }

    /// What `ALTER PIPELINE name` to `dag` would do (`EXPLAIN ALTER`):
    /// the diff, with every reason it would be refused; nothing applied.
    pub fn preview_alter(
        &self,
        name: &str,
        dag: &PhysicalDag,
        derived: Option<&StreamDef>,
        policy: ResetPolicy,
    ) -> Result<sluice_plan::diff::DagDiff> {
        let old = self
            .pipeline(name)
            .ok_or_else(|| Error::not_found(ObjectKind::Pipeline, name))?;
        let mut d = diff(&old.dag, dag, policy);
        if let Some(Err(e)) = derived.map(|s| self.check_derived_schema(name, s)) {
            d.refused.insert(0, e.to_string());
        }
        Ok(d)
    }

    /// A derived stream's columns may not change while other pipelines
    /// read it.
    fn check_derived_schema(&self, name: &str, new: &StreamDef) -> Result<()> {
        let state = self.lock();
        let Some(current) = state.streams.get(&new.name) else {
            return Ok(());
        };
        if current.schema.fields() == new.schema.fields() {
            return Ok(());
        }
        let readers = readers_of(&state, &new.name, Some(name));
        if readers.is_empty() {
            return Ok(());
        }
        Err(Error::user(
            SqlCode::DependentObjectsStillExist,
            format!(
                "cannot change the columns of stream \"{}\" while pipeline(s) {} read it ({}); alter or drop them first",
                new.name,
                readers.join(", "),
                column_changes(&current.schema, &new.schema),
            ),
        ))
    }

    /// The stored definition of a pipeline.
    pub fn pipeline(&self, name: &str) -> Option<PipelineDef> {
        self.lock().pipelines.get(name).cloned()
    }

    /// The stored definition of every pipeline, in name order.
    pub fn pipeline_defs(&self) -> Vec<PipelineDef> {
        let mut defs: Vec<PipelineDef> = self.lock().pipelines.values().cloned().collect();
        defs.sort_by(|a, b| a.name.cmp(&b.name));
        defs
    }

    /// Status of every named pipeline.
    pub fn pipelines(&self) -> Vec<PipelineInfo> {
        let defs: Vec<PipelineDef> = self.lock().pipelines.values().cloned().collect();
        let running = self.running.lock().expect("running lock");
        defs.into_iter()
            .map(|def| {
                let (state, since_ms, t, error) = match running.get(&def.name) {
                    Some(r) => match (r.slot.runtime(), r.slot.failed.lock().expect("slot lock").clone()) {
                        (_, Some(error)) => ("failed".to_string(), r.since_ms, Default::default(), Some(error)),
                        (Some(runtime), None) => {
                            let (mut state, error) = describe_status(&runtime.status());
                            if state == "running" && runtime.is_paused() {
                                state = "paused".to_string();
                            }
                            (state, r.since_ms, totals(&runtime), error)
                        }
                        (None, None) => ("starting".to_string(), r.since_ms, Default::default(), None),
                    },
                    None => ("not running".to_string(), def.created_ms, Default::default(), None),
                };
                let slot = running.get(&def.name).map(|r| r.slot.clone());
                let workers = slot
                    .as_ref()
                    .and_then(|s| s.runtime())
                    .filter(|r| r.status() == sluice_dataflow::deploy::PipelineStatus::Running)
                    .map(|r| r.workers())
                    .unwrap_or_default();
                let checkpoints = slot.as_ref().map(|s| s.stats.completed()).unwrap_or_default();
                let restarts = slot.as_ref().map_or(0, |s| s.restarts.load(Ordering::Relaxed));
                let restored_from = slot.as_ref().and_then(|s| s.stats.restored_from());
                PipelineInfo {
                    name: def.name.clone(),
                    id: def.id.0,
                    kind: match def.kind {
                        PipelineKind::Sink => "sink".into(),
                        PipelineKind::DerivedStream => "stream".into(),
                        PipelineKind::MaterializedView => "materialized view".into(),
                    },
                    state,
                    since_ms,
                    rows_in: t.rows_in,
                    rows_out: t.rows_out,
                    late_rows_dropped: t.late_rows_dropped,
                    records_malformed: t.records_malformed,
                    watermark_ms: t.watermark.map(|w| w.0),
                    error,
                    condition: t.condition,
                    sql: def.sql.clone(),
                    restarts,
                    restored_from,
                    checkpoints,
                    version: def.version(),
                    changed_ms: def.changed_ms.unwrap_or(def.created_ms),
                    workers,
                }
            })
            .collect()
    }

    /// Pauses or resumes a named pipeline's sources (not persisted: a
    /// restarted server runs every pipeline).
    fn set_paused(&self, name: &str, paused: bool) -> Result<()> {
        let running = self.running.lock().expect("running lock");
        let r = running
            .get(name)
            .ok_or_else(|| Error::not_found(ObjectKind::Pipeline, name))?;
        let runtime = r
            .slot
            .runtime()
            .ok_or_else(|| Error::not_found(ObjectKind::RunningPipeline, name))?;
        runtime.set_paused(paused);
        Ok(())
    }

    /// Waits (at most 30 s) until a named pipeline's first deployment was
    /// attempted: a checkpointed pipeline is deployed by its supervisor
    /// after its newest checkpoint is loaded.
    pub async fn wait_started(&self, name: &str) {
        let slot = self
            .running
            .lock()
            .expect("running lock")
            .get(name)
            .map(|r| r.slot.clone());
        if let Some(slot) = slot {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(30), slot.wait_started()).await;
        }
    }

    /// The runtime of a running named pipeline.
    pub fn runtime(&self, name: &str) -> Option<Arc<PipelineRuntime>> {
        self.running
            .lock()
            .expect("running lock")
            .get(name)
            .and_then(|r| r.slot.runtime())
    }

    /// A new id for a session's query (apart from named pipelines' ids):
    /// its `client` sink's result channel is registered under it before
    /// [`Master::run_query`] deploys it.
    pub fn new_query_id(&self) -> PipelineId {
        PipelineId(self.next_query_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Session queries this master runs now (a gauge of `/metrics`).
    pub fn session_queries(&self) -> u64 {
        self.session_queries.load(Ordering::Relaxed)
    }

    /// Starts `dag` as a session query on this master (the leader) and
    /// returns its result batches as they come
    /// ([`crate::session_query::batches`]): its `client` sink finds the
    /// result channel registered in `clients` under the query's id.
    pub fn run_session_query(
        &self,
        clients: &sluice_connectors::ClientSinks,
        dag: &PhysicalDag,
    ) -> Result<crate::session_query::Batches> {
        use crate::session_query::{RESULT_BATCHES_MAX, RunningQuery, batches};
        let (tx, rx) = tokio::sync::mpsc::channel(RESULT_BATCHES_MAX);
        let id = self.new_query_id();
        clients.register(id, tx);
        let runtime = self.run_query(id, dag).inspect_err(|_| clients.forget(id))?;
        Ok(batches(runtime, rx, RunningQuery::new(self.session_queries.clone())))
    }

    /// Runs a session's query as pipeline `id`.
    pub fn run_query(&self, id: PipelineId, dag: &PhysicalDag) -> Result<Arc<PipelineRuntime>> {
        self.ensure_leader("continuous queries run")?;
        self.scheduler.deploy(id, dag)
    }

    /// With a master quorum, on a follower: materialized view `name`'s
    /// rows as the leader (where its sink runs) last published them;
    /// `None` on the leader or a single master (the rows are this
    /// process's).
    pub async fn leader_view(&self, name: &str) -> Result<Option<sluice_connectors::views::PublishedView>> {
        match &self.replication {
            Some(r) if !r.is_leader() => r.leader_view(name).await.map(Some),
            _ => Ok(None),
        }
    }

    /// Materialized view `name`'s rows when its sink runs on a worker of
    /// this master (a cluster's view that reads no memory stream): taken
    /// from that worker, as it last published them. `None` when they are
    /// this process's (the playground, a view over a memory stream, a
    /// finished view whose rows were brought here) or the view's pipeline
    /// runs nowhere here (a quorum follower asks the leader instead).
    pub async fn worker_view(&self, name: &str) -> Result<Option<sluice_connectors::views::PublishedView>> {
        let sink = {
            let state = self.state.lock().expect("catalog lock");
            state
                .pipelines
                .get(name)
                .and_then(|p| crate::control::view_sink(&p.dag).map(|(_, op)| (p.id, op)))
        };
        match sink {
            Some((id, op)) => self.scheduler.worker_view(id, op, name).await,
            None => Ok(None),
        }
    }

    /// With a master quorum: views' reads on this master (as a follower)
    /// answered with rows taken from the leader, and from a copy of them
    /// still current.
    pub fn view_reads(&self) -> Option<(u64, u64)> {
        self.replication.as_ref().map(|r| r.view_reads())
    }

    /// Memory stream `name`, which INSERT may append to: `42P01` when
    /// there is no such stream, `0A000` when another connector or a
    /// pipeline writes it.
    pub fn insertable(&self, name: &str) -> Result<StreamDef> {
        let def = self
            .stream(name)
            .ok_or_else(|| Error::not_found(ObjectKind::Stream, name))?;
        if !sluice_connectors::registry::accepts_insert(&def.connector) || def.pipeline.is_some() {
            return Err(Error::unsupported(format!(
                "INSERT works on memory streams; \"{name}\" is written by its {} connector",
                if def.pipeline.is_some() {
                    "pipeline"
                } else {
                    def.connector.as_str()
                }
            )));
        }
        Ok(def)
    }

    /// With a master quorum, on a follower: appends `rows` (an INSERT's,
    /// evaluated and checked here) to memory stream `stream` on the
    /// leader, where its log lives; `None` on the leader or a single
    /// master (the rows go to this process's log).
    pub async fn insert_on_leader(
        &self,
        stream: &str,
        rows: &[arrow::record_batch::RecordBatch],
    ) -> Result<Option<u64>> {
        match &self.replication {
            Some(r) if !r.is_leader() => r.forward_insert(stream, rows).await.map(Some),
            _ => Ok(None),
        }
    }

    /// On the leader or a single master: appends an INSERT's `rows` (for
    /// stream `def`, checked by [`Master::insertable`]) to the stream's
    /// log — on the worker holding it with a quorum, else in `local` (this
    /// process's logs); how many.
    pub async fn append(
        &self,
        def: &StreamDef,
        rows: Vec<arrow::record_batch::RecordBatch>,
        local: &sluice_connectors::MemoryLogs,
    ) -> Result<u64> {
        if let Some(appended) = self.scheduler.append_memory(&def.name, &def.options, &rows).await? {
            return Ok(appended);
        }
        local.get_or_create(&def.name, &def.options)?.append(rows)
    }

    /// With a master quorum, on a follower: runs a session's continuous
    /// query on the leader (where pipelines run) and returns its result
    /// batches as the leader streams them; `None` on the leader or a
    /// single master (run it here: [`Master::run_session_query`]).
    pub async fn forward_query(&self, dag: &PhysicalDag) -> Result<Option<crate::session_query::Batches>> {
        match &self.replication {
            Some(r) if !r.is_leader() => r.forward_query(dag).await.map(Some),
            _ => Ok(None),
        }
    }

    /// With a master quorum, refuses (57P03) what only the leader can do —
    /// run a session's query — on a follower.
    pub fn ensure_leader(&self, what: &str) -> Result<()> {
        match &self.replication {
            Some(r) if !r.is_leader() => Err(Error::user(
                sluice_types::SqlCode::CannotConnectNow,
                format!("{what} on the master quorum's leader: connect to it (SHOW CLUSTER names it)"),
            )),
            _ => Ok(()),
        }
    }
}

/// How a derived stream's columns change, in words (`n disappears, m
/// changes type, adds x`).
fn column_changes(old: &arrow::datatypes::Schema, new: &arrow::datatypes::Schema) -> String {
    let mut out = Vec::new();
    for f in old.fields() {
        match new.field_with_name(f.name()) {
            Err(_) => out.push(format!("{} disappears", f.name())),
            Ok(n) if n.data_type() != f.data_type() => out.push(format!("{} changes type", f.name())),
            Ok(_) => {}
        }
    }
    for f in new.fields() {
        if old.field_with_name(f.name()).is_err() {
            out.push(format!("adds {}", f.name()));
        }
    }
    if out.is_empty() {
        out.push("the columns change order".into());
    }
    out.join(", ")
}

/// A named pipeline's checkpoint interval and directory, from its sink's
/// options (`None`: checkpoints off).
fn checkpointing(dag: &PhysicalDag) -> Result<Option<(std::time::Duration, Option<String>)>> {
    let Some(sink) = dag.operators.iter().find_map(|o| match &o.kind {
        OperatorKind::Sink(s) => Some(s),
        _ => None,
    }) else {
        return Ok(None);
    };
    let Some(interval) = sluice_connectors::options::checkpoint_interval(&sink.options)? else {
        return Ok(None);
    };
    Ok(Some((interval, sink.options.get("checkpoint.dir").cloned())))
}
