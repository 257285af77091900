//! A worker: runs the tasks of the pipelines scheduled onto it.

use sluice_connectors::Connectors;
use sluice_dataflow::channel::InProcessTransport;
use sluice_dataflow::deploy::{CheckpointPlan, DeployConfig, PipelineRuntime, deploy_with};
use sluice_plan::PhysicalDag;
use sluice_types::{PipelineId, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Runs pipelines in this process.
pub struct Worker {
    pub connectors: Connectors,
    transport: InProcessTransport,
    config: DeployConfig,
    running: Mutex<HashMap<PipelineId, Arc<PipelineRuntime>>>,
}

impl Worker {
    pub fn new(connectors: Connectors, transport: InProcessTransport, config: DeployConfig) -> Self {
        Worker {
            connectors,
            transport,
            config,
            running: Mutex::new(HashMap::new()),
        }
    }

    /// Starts every task of `dag` as pipeline `id`.
    pub fn run(&self, id: PipelineId, dag: &PhysicalDag, plan: Option<CheckpointPlan>) -> Result<Arc<PipelineRuntime>> {
        let runtime = Arc::new(deploy_with(
            id,
            dag,
            &self.connectors,
            &self.transport,
            &self.config,
            plan,
        )?);
        let mut running = self.running.lock().expect("worker lock");
        running.retain(|_, r| r.status() == sluice_dataflow::deploy::PipelineStatus::Running);
        running.insert(id, runtime.clone());
        Ok(runtime)
    }

    /// Task instances of the pipelines running here (named pipelines and
    /// session queries).
    pub fn tasks_running(&self) -> usize {
        let running = self.running.lock().expect("worker lock");
        running
            .values()
            .filter(|r| r.status() == sluice_dataflow::deploy::PipelineStatus::Running)
            .map(|r| r.tasks)
            .sum()
    }

    /// Task slots: the cores tasks share (tasks are async, so a slot is
    /// not exclusive; this says how much parallel work the worker can do).
    pub fn slots(&self) -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }

    /// Stops pipeline `id` if it runs here.
    pub fn stop(&self, id: PipelineId) {
        if let Some(r) = self.running.lock().expect("worker lock").remove(&id) {
            r.stop();
        }
    }
}
