//! Placing a deployment's tasks on workers.
//!
//! A worker offers `slots` (`sluice worker --slots`): one slot runs one task
//! instance (an operator instance not chained into another's task). A
//! [`Strategy`] picks, for each task in the DAG's order, a worker with a
//! free slot among those that match the pipeline's label constraints
//! (`WITH (placement = 'zone=a')`):
//!
//! - [`Spread`] (the default): the instances of each operator go to as many
//!   workers as possible, the least loaded first — a failure takes out the
//!   smallest share of each operator, and every worker's cores are used;
//! - [`Pack`]: fill a worker's slots before the next — fewer data-plane
//!   hops, fewer workers to keep up.
//!
//! Tasks that must run where their state lives ([`Pinned`]: a session
//! query's result sink on the master's own worker, taking no slot; a
//! memory stream's readers and writer where its log is) go there whatever
//! the strategy.
//! A deployment that cannot be placed fails with SQLSTATE 53000 saying
//! what was missing.

use sluice_dataflow::deploy::DeployConfig;
use sluice_dataflow::part::{Placement, task_root};
use sluice_plan::{OperatorKind, OperatorSpec, PhysicalDag};
use sluice_types::{Error, OperatorId, Result, SqlCode, WorkerId};
use std::collections::{BTreeMap, HashMap};

/// A worker as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSlots {
    pub id: WorkerId,
    pub slots: u32,
    /// Slots taken by tasks of other deployments.
    pub used: u32,
    pub labels: BTreeMap<String, String>,
}

/// Label constraints: every `key=value` must match the worker's labels.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Constraints(pub BTreeMap<String, String>);

impl Constraints {
    /// Parses `zone=a,disk=ssd` (empty: no constraint).
    pub fn parse(text: &str) -> Result<Self> {
        let mut labels = BTreeMap::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((k, v)) = part.split_once('=') else {
                return Err(Error::invalid_option(format!(
                    "placement '{text}': expected key=value pairs separated by commas, e.g. 'zone=a,disk=ssd'"
                )));
            };
            labels.insert(k.trim().to_string(), v.trim().to_string());
        }
        Ok(Constraints(labels))
    }

    fn admits(&self, worker: &WorkerSlots) -> bool {
        self.0.iter().all(|(k, v)| worker.labels.get(k) == Some(v))
    }
}

/// Tasks that run on one worker whatever the strategy.
pub trait Pinned {
    /// The worker `op`'s instances must run on, if any.
    fn pinned(&self, op: &OperatorSpec) -> Option<WorkerId>;
}

/// What runs where its state lives: a session query's results on the
/// master (its client is there); a memory stream's readers and writer
/// where the stream's log lives — the master's own worker, or with a
/// master quorum one worker per stream, so that the pipelines reading it
/// outlive a leader; and the rows of a materialized view that reads a
/// memory stream whose log is in the master (its pipeline cannot outlive
/// the master's process anyway). Any other view's sink runs on a worker,
/// like every other task, so the view's pipeline keeps running when a
/// quorum's leader fails over; the masters ask that worker for its rows
/// (`FetchView`).
pub struct MasterOwned {
    master: WorkerId,
    /// Where each memory stream of the DAG has its log.
    logs: HashMap<String, WorkerId>,
    views: bool,
}

impl MasterOwned {
    /// The pinned tasks of `dag`: what lives in the master on `master`,
    /// memory stream `s`'s readers and writer on `home(s)` (`None`: the
    /// master).
    pub fn of(dag: &PhysicalDag, master: &WorkerId, mut home: impl FnMut(&str) -> Option<WorkerId>) -> Self {
        let logs: HashMap<String, WorkerId> = memory_streams(dag)
            .into_iter()
            .map(|s| {
                let at = home(&s).unwrap_or_else(|| master.clone());
                (s, at)
            })
            .collect();
        let views = dag.operators.iter().any(|o| match &o.kind {
            OperatorKind::Source(s) if s.connector == "memory" => logs.get(&s.stream) == Some(master),
            _ => false,
        });
        MasterOwned {
            master: master.clone(),
            logs,
            views,
        }
    }
}

/// The memory streams `dag` reads or writes (a derived stream's log), in
/// the DAG's order, each once.
pub fn memory_streams(dag: &PhysicalDag) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for op in &dag.operators {
        let stream = match &op.kind {
            OperatorKind::Source(s) if s.connector == "memory" => Some(&s.stream),
            OperatorKind::Sink(s) if s.connector == "memory" => s.options.get("stream"),
            _ => None,
        };
        if let Some(s) = stream
            && !out.contains(s)
        {
            out.push(s.clone());
        }
    }
    out
}

impl Pinned for MasterOwned {
    fn pinned(&self, op: &OperatorSpec) -> Option<WorkerId> {
        let log = |stream: Option<&String>| Some(stream.and_then(|s| self.logs.get(s)).unwrap_or(&self.master).clone());
        match &op.kind {
            OperatorKind::Source(s) if s.connector == "memory" => log(Some(&s.stream)),
            OperatorKind::Sink(s) => match s.connector.as_str() {
                "memory" => log(s.options.get("stream")),
                "client" => Some(self.master.clone()),
                "view" if self.views => Some(self.master.clone()),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Chooses a worker for each task.
pub trait Strategy: Send + Sync {
    /// `spread`, `pack`.
    fn name(&self) -> &'static str;
    /// The worker for the next instance of `op`, among `candidates` (each
    /// with a free slot and matching labels); `load` counts the slots used
    /// on each worker so far and `of_op` the instances of `op` on each.
    fn choose<'a>(
        &self,
        candidates: &[&'a WorkerSlots],
        load: &HashMap<WorkerId, u32>,
        of_op: &HashMap<WorkerId, u32>,
    ) -> &'a WorkerSlots;
}

/// Instances of an operator over as many workers as possible.
pub struct Spread;

impl Strategy for Spread {
    fn name(&self) -> &'static str {
        "spread"
    }
    fn choose<'a>(
        &self,
        candidates: &[&'a WorkerSlots],
        load: &HashMap<WorkerId, u32>,
        of_op: &HashMap<WorkerId, u32>,
    ) -> &'a WorkerSlots {
        let key = |w: &WorkerSlots| {
            let mine = of_op.get(&w.id).copied().unwrap_or(0);
            let used = load.get(&w.id).copied().unwrap_or(0);
            // Fewest instances of this operator, then the lowest share of
            // its slots in use, then the id (deterministic).
            (mine, (u64::from(used) << 16) / u64::from(w.slots.max(1)), w.id.clone())
        };
        candidates.iter().min_by_key(|w| key(w)).expect("candidates")
    }
}

/// Fill one worker's slots before the next.
pub struct Pack;

impl Strategy for Pack {
    fn name(&self) -> &'static str {
        "pack"
    }
    fn choose<'a>(
        &self,
        candidates: &[&'a WorkerSlots],
        load: &HashMap<WorkerId, u32>,
        _of_op: &HashMap<WorkerId, u32>,
    ) -> &'a WorkerSlots {
        // The worker with the most slots already used (then the id).
        let key = |w: &WorkerSlots| (std::cmp::Reverse(load.get(&w.id).copied().unwrap_or(0)), w.id.clone());
        candidates.iter().min_by_key(|w| key(w)).expect("candidates")
    }
}

/// The strategy named `name`.
pub fn strategy(name: &str) -> Result<Box<dyn Strategy>> {
    match name {
        "" | "spread" => Ok(Box::new(Spread)),
        "pack" => Ok(Box::new(Pack)),
        other => Err(Error::invalid_option(format!(
            "placement strategy '{other}' is not known; use 'spread' or 'pack'"
        ))),
    }
}

/// Places every task of `dag`: pinned ones where [`Pinned`] says, the
/// others by `strategy` on `workers` that match `constraints` (`master`
/// stands in while the placement fails).
pub fn place(
    dag: &PhysicalDag,
    config: &DeployConfig,
    (strategy, constraints): (&dyn Strategy, &Constraints),
    workers: &[WorkerSlots],
    (master, pinned): (&WorkerId, &dyn Pinned),
) -> Result<Placement> {
    let eligible: Vec<&WorkerSlots> = workers.iter().filter(|w| constraints.admits(w)).collect();
    let mut load: HashMap<WorkerId, u32> = workers.iter().map(|w| (w.id.clone(), w.used)).collect();
    let mut per_op: HashMap<OperatorId, HashMap<WorkerId, u32>> = HashMap::new();
    let mut placed: HashMap<(OperatorId, u32), WorkerId> = HashMap::new();
    let mut failure: Option<Error> = None;
    let placement = Placement::new(dag, config, |op, instance| {
        if let Some(at) = pinned.pinned(op) {
            // On a worker (a memory stream's log there) it takes a slot
            // when one is free, and runs there regardless; its forward
            // downstream follows it as any task's does.
            if let Some(used) = load.get_mut(&at) {
                *used += 1;
                *per_op.entry(op.id).or_default().entry(at.clone()).or_default() += 1;
            }
            placed.insert((op.id, instance), at.clone());
            return at;
        }
        let free: Vec<&WorkerSlots> = eligible
            .iter()
            .copied()
            .filter(|w| load.get(&w.id).copied().unwrap_or(0) < w.slots)
            .collect();
        if free.is_empty() {
            failure.get_or_insert_with(|| unplaceable(dag, config, workers, &eligible, constraints));
            return master.clone();
        }
        // Behind a forward edge, instance i reads only upstream instance
        // i: on the same worker its rows never cross the network.
        let upstream = dag
            .inputs_of(op.id)
            .into_iter()
            .find(|e| e.partitioning == sluice_plan::Partitioning::Forward)
            .and_then(|e| placed.get(&(task_root(dag, config, e.from), instance)))
            .and_then(|w| free.iter().find(|f| f.id == *w).copied());
        let of_op = per_op.entry(op.id).or_default();
        let chosen = match upstream {
            Some(w) => w.id.clone(),
            None => strategy.choose(&free, &load, of_op).id.clone(),
        };
        *load.entry(chosen.clone()).or_default() += 1;
        *of_op.entry(chosen.clone()).or_default() += 1;
        placed.insert((op.id, instance), chosen.clone());
        chosen
    });
    match failure {
        Some(e) => Err(e),
        None => Ok(placement),
    }
}

/// Why a deployment does not fit.
fn unplaceable(
    dag: &PhysicalDag,
    config: &DeployConfig,
    workers: &[WorkerSlots],
    eligible: &[&WorkerSlots],
    constraints: &Constraints,
) -> Error {
    let needed = dag
        .operators
        .iter()
        .filter(|o| task_root(dag, config, o.id) == o.id)
        .map(|o| o.parallelism)
        .sum::<u32>();
    let message = if workers.is_empty() {
        format!(
            "no worker is registered with the master; the pipeline needs {needed} task slot(s): start `sluice worker --masters …`"
        )
    } else if eligible.is_empty() {
        let wanted: Vec<String> = constraints.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(
            "no worker has the labels {} (workers: {})",
            wanted.join(","),
            workers
                .iter()
                .map(|w| format!(
                    "{} [{}]",
                    w.id,
                    w.labels
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(",")
                ))
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        let free: u32 = eligible.iter().map(|w| w.slots.saturating_sub(w.used)).sum();
        format!(
            "not enough free task slots: the pipeline needs {needed}, the {} eligible worker(s) have {free} free",
            eligible.len()
        )
    };
    Error::user(SqlCode::InsufficientResources, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_plan::{EdgeSpec, Partitioning, SinkSpec, SourceSpec};
    use sluice_types::EdgeId;

    fn worker(id: &str, slots: u32, labels: &[(&str, &str)]) -> WorkerSlots {
        WorkerSlots {
            id: WorkerId(id.into()),
            slots,
            used: 0,
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    /// source(p) → sink(p) over a hash edge: 2p tasks.
    fn dag(p: u32) -> PhysicalDag {
        let schema = std::sync::Arc::new(arrow::datatypes::Schema::empty());
        let op = |id: u32, kind| OperatorSpec {
            id: OperatorId(id),
            uid: Default::default(),
            kind,
            parallelism: p,
            output_schema: schema.clone(),
        };
        let source = SourceSpec {
            stream: "s".into(),
            connector: "datagen".into(),
            options: BTreeMap::new(),
            watermark: None,
            idle_timeout_ms: 1000,
            computed: vec![],
            unread: vec![],
            alignment_max_drift_ms: None,
        };
        let sink = SinkSpec {
            changelog: false,
            connector: "blackhole".into(),
            options: BTreeMap::new(),
            event_time_column: None,
        };
        PhysicalDag {
            operators: vec![op(0, OperatorKind::Source(source)), op(1, OperatorKind::Sink(sink))],
            edges: vec![EdgeSpec {
                id: EdgeId(0),
                from: OperatorId(0),
                to: OperatorId(1),
                partitioning: Partitioning::Hash(vec![]),
            }],
            key_groups: 256,
        }
    }

    fn count(p: &Placement, op: u32) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for (o, _, w) in &p.tasks {
            if o.0 == op {
                *m.entry(w.0.clone()).or_default() += 1;
            }
        }
        m
    }

    const MASTER: &str = "master";

    fn run(strategy: &dyn Strategy, c: &Constraints, workers: &[WorkerSlots], p: u32) -> Result<Placement> {
        place(
            &dag(p),
            &DeployConfig::default(),
            (strategy, c),
            workers,
            (
                &WorkerId(MASTER.into()),
                &MasterOwned::of(&dag(p), &WorkerId(MASTER.into()), |_| None),
            ),
        )
    }

    /// `d` spread over `workers`, what lives in the master on it.
    fn spread(d: &PhysicalDag, workers: &[WorkerSlots]) -> Placement {
        place(
            d,
            &DeployConfig::default(),
            (&Spread, &Constraints::default()),
            workers,
            (
                &WorkerId(MASTER.into()),
                &MasterOwned::of(d, &WorkerId(MASTER.into()), |_| None),
            ),
        )
        .unwrap()
    }

    #[test]
    fn spread_puts_each_operators_instances_on_every_worker() {
        let ws = [worker("a", 4, &[]), worker("b", 4, &[])];
        let p = run(&Spread, &Constraints::default(), &ws, 2).unwrap();
        assert_eq!(count(&p, 0), BTreeMap::from([("a".into(), 1), ("b".into(), 1)]));
        assert_eq!(count(&p, 1), BTreeMap::from([("a".into(), 1), ("b".into(), 1)]));
    }

    #[test]
    fn pack_fills_one_worker_first() {
        let ws = [worker("a", 4, &[]), worker("b", 4, &[])];
        let p = run(&Pack, &Constraints::default(), &ws, 2).unwrap();
        assert_eq!(p.workers(), vec![WorkerId("a".into())]);
        // Five tasks over 4 + 4 slots: the fifth goes to b.
        let mut ws = ws;
        ws[0].used = 1;
        let p = run(&Pack, &Constraints::default(), &ws, 2).unwrap();
        assert_eq!(count(&p, 0).get("a"), Some(&2));
        assert_eq!(count(&p, 1).get("a"), Some(&1));
        assert_eq!(count(&p, 1).get("b"), Some(&1));
    }

    #[test]
    fn a_forward_edges_instances_share_a_worker() {
        let mut d = dag(2);
        d.edges[0].partitioning = Partitioning::Forward;
        // Pack would put both sources on a; the sinks follow their sources
        // even under spread.
        let ws = [worker("a", 4, &[]), worker("b", 4, &[])];
        let p = spread(&d, &ws);
        for i in 0..2 {
            assert_eq!(
                p.worker_of(OperatorId(0), i),
                p.worker_of(OperatorId(1), i),
                "instance {i}: {p:?}"
            );
        }
        assert_eq!(p.workers().len(), 2, "still spread: {p:?}");
    }

    #[test]
    fn labels_restrict_the_workers() {
        let ws = [worker("a", 4, &[("zone", "a")]), worker("b", 4, &[("zone", "b")])];
        let c = Constraints::parse("zone=b").unwrap();
        let p = run(&Spread, &c, &ws, 2).unwrap();
        assert_eq!(p.workers(), vec![WorkerId("b".into())]);
        let e = run(&Spread, &Constraints::parse("zone=c").unwrap(), &ws, 1).unwrap_err();
        assert_eq!(e.sqlstate(), "53000");
        assert!(e.to_string().contains("zone=c"), "{e}");
        assert!(Constraints::parse("zone").is_err());
    }

    #[test]
    fn too_few_slots_or_no_worker_is_a_53000_naming_what_is_missing() {
        let ws = [worker("a", 1, &[]), worker("b", 2, &[])];
        let e = run(&Spread, &Constraints::default(), &ws, 2).unwrap_err();
        assert_eq!(e.sqlstate(), "53000");
        assert!(
            e.to_string().contains("needs 4") && e.to_string().contains("3 free"),
            "{e}"
        );
        // At the limit it fits.
        assert!(run(&Spread, &Constraints::default(), &ws, 1).is_ok());
        let e = run(&Spread, &Constraints::default(), &[], 1).unwrap_err();
        assert!(e.to_string().contains("no worker is registered"), "{e}");
    }

    /// A materialized view's sink runs on a worker, unless the view reads a
    /// memory stream (whose reader is the master's); a session's result
    /// sink always runs on the master.
    #[test]
    fn a_views_sink_goes_to_a_worker_unless_it_reads_a_memory_stream() {
        let ws = [worker("a", 4, &[])];
        let with = |source: &str, sink: &str| {
            let mut d = dag(1);
            if let OperatorKind::Source(s) = &mut d.operators[0].kind {
                s.connector = source.into();
            }
            if let OperatorKind::Sink(s) = &mut d.operators[1].kind {
                s.connector = sink.into();
            }
            let p = spread(&d, &ws);
            let at = |op| p.worker_of(OperatorId(op), 0).unwrap().0.clone();
            (at(0), at(1))
        };
        assert_eq!(with("datagen", "view"), ("a".into(), "a".into()));
        assert_eq!(with("memory", "view"), (MASTER.into(), MASTER.into()));
        assert_eq!(with("datagen", "client"), ("a".into(), MASTER.into()));
        assert_eq!(with("datagen", "blackhole"), ("a".into(), "a".into()));
    }

    /// With a quorum a memory stream's log lives on a worker: its reader
    /// and a derived stream's writer go where their log is, a view over it
    /// to a worker like any sink, and they count in that worker's load.
    #[test]
    fn a_memory_streams_reader_and_writer_go_where_its_log_lives() {
        let ws = [worker("a", 4, &[]), worker("b", 4, &[])];
        let master = WorkerId(MASTER.into());
        let mut d = dag(1);
        if let OperatorKind::Source(s) = &mut d.operators[0].kind {
            s.connector = "memory".into();
        }
        if let OperatorKind::Sink(s) = &mut d.operators[1].kind {
            s.connector = "memory".into();
            s.options.insert("stream".into(), "t".into());
        }
        assert_eq!(memory_streams(&d), ["s", "t"]);
        let homes = |s: &str| Some(WorkerId(if s == "s" { "b" } else { "a" }.into()));
        let placed = |d: &PhysicalDag, ws: &[WorkerSlots]| {
            let pinned = MasterOwned::of(d, &master, homes);
            let p = place(
                d,
                &DeployConfig::default(),
                (&Spread, &Constraints::default()),
                ws,
                (&master, &pinned),
            );
            p.map(|p| {
                (0..2)
                    .map(|op| p.worker_of(OperatorId(op), 0).unwrap().0.clone())
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(placed(&d, &ws).unwrap(), ["b", "a"]);
        // Logs in the master (no quorum): both there, as before.
        let pinned = MasterOwned::of(&d, &master, |_| None);
        let p = place(
            &d,
            &DeployConfig::default(),
            (&Spread, &Constraints::default()),
            &ws,
            (&master, &pinned),
        )
        .unwrap();
        assert_eq!(p.workers(), std::slice::from_ref(&master));
        // A view over a memory stream whose log is on b: its sink on a
        // worker, not pinned to the master.
        if let OperatorKind::Sink(s) = &mut d.operators[1].kind {
            s.connector = "view".into();
        }
        let at = placed(&d, &ws).unwrap();
        assert_eq!(at[0], "b");
        assert_ne!(at[1], MASTER);
        // The reader takes b's last free slot: the view's sink goes to a.
        let mut full = ws.clone();
        full[1].used = 3;
        assert_eq!(placed(&d, &full).unwrap(), ["b", "a"]);
        // ... and runs on b even when b has none free.
        full[1].used = 4;
        assert_eq!(placed(&d, &full).unwrap(), ["b", "a"]);
        // Behind a forward edge the sink follows its reader to b.
        d.edges[0].partitioning = Partitioning::Forward;
        assert_eq!(placed(&d, &ws).unwrap(), ["b", "b"]);
    }
}
