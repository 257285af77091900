//! Where memory streams' logs live in a cluster.
//!
//! A single master keeps every memory stream's log in its own process, on
//! its own worker, beside the readers and writers placement pins there:
//! its death stops the cluster anyway. With a master quorum the leader may
//! die and another take over while the pipelines run on; a log in the
//! leader would die with it, and every pipeline reading it would start
//! over. So there each log lives on one worker, its *home*: chosen when
//! the stream is first used (an INSERT, a deployment reading or writing
//! it: with no worker registered either fails with `53000`) among the
//! registered workers holding the fewest logs, recorded in
//! the replicated state (`memory/<stream>`, see [`crate::recorded`])
//! before anything is appended there or reads it there, and kept while
//! that worker is registered and not draining. Placement pins the stream's readers and its derived
//! stream's writer to the home ([`crate::placement::MasterOwned`]); an
//! INSERT's rows go there as an `AppendMemory` command down the worker's
//! session, answered by a `CommandResult`.
//!
//! A memory log is not durable: it dies with the worker holding it (as it
//! died with the master before). The stream then gets another home and
//! its readers, restarted from their checkpoints, find a log of another
//! incarnation and read by their startup mode.

use super::Cluster;
use arrow::record_batch::RecordBatch;
use sluice_proto::v1 as pb;
use sluice_types::{Error, Result, SqlCode, WorkerId};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// INSERTs waiting for the workers holding their logs at once, at most;
/// past it an INSERT is refused with `53300` (each holds up to
/// [`crate::view_cache::INSERT_BYTES_MAX`] bytes of rows).
pub const APPENDS_MAX: usize = 64;
/// How long a worker has to append an INSERT's rows and answer.
const APPEND_TIMEOUT: Duration = Duration::from_secs(30);

/// A stream's home as this master knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Home {
    worker: WorkerId,
    /// A majority of masters holds it (else it is to be recorded before
    /// use).
    recorded: bool,
}

/// The homes this master knows.
#[derive(Default)]
struct Homes {
    by_stream: HashMap<String, Home>,
    /// Streams dropped here since: the next use places the log anew (and
    /// tells every worker to drop what it holds), whatever was recorded.
    dropped: HashSet<String>,
}

/// An INSERT waiting for the worker holding its log.
struct Append {
    worker: WorkerId,
    tx: tokio::sync::oneshot::Sender<pb::CommandResult>,
}

/// The homes this master knows and the appends it waits on.
#[derive(Default)]
pub(super) struct MemoryHomes {
    homes: Mutex<Homes>,
    appends: Mutex<HashMap<u64, Append>>,
}

impl MemoryHomes {
    /// Forgets what it knew (a new term: the replicated state says).
    pub(super) fn forget_homes(&self) {
        *self.homes.lock().expect("homes lock") = Homes::default();
    }

    /// A worker's answer to an `AppendMemory`.
    pub(super) fn appended(&self, result: &pb::CommandResult) {
        let waiting = self.appends.lock().expect("appends lock").remove(&result.request_id);
        if let Some(append) = waiting {
            let _ = append.tx.send(result.clone());
        }
    }

    /// Worker `id` is gone: the INSERTs waiting for it fail now.
    pub(super) fn worker_gone(&self, id: &WorkerId) {
        self.appends
            .lock()
            .expect("appends lock")
            .retain(|_, a| a.worker != *id);
    }

    fn mark_recorded(&self, stream: &str, worker: &WorkerId) {
        if let Some(h) = self.homes.lock().expect("homes lock").by_stream.get_mut(stream)
            && h.worker == *worker
        {
            h.recorded = true;
        }
    }

    /// Forgets `stream`'s home unless it changed since (a record failed).
    fn forget(&self, stream: &str, worker: &WorkerId) {
        let mut homes = self.homes.lock().expect("homes lock");
        if homes
            .by_stream
            .get(stream)
            .is_some_and(|h| h.worker == *worker && !h.recorded)
        {
            homes.by_stream.remove(stream);
        }
    }
}

impl Cluster {
    /// With a master quorum: the worker holding memory stream `stream`'s
    /// log, and whether it still has to be recorded (before anything uses
    /// it). The known home while its worker is registered and not
    /// draining; else a new one, the worker holding the fewest logs, whose
    /// choice tells every registered worker (the new home too) to drop a
    /// log of that name it may hold. `57P03` while the recorded home may
    /// still register with this new leader (see
    /// [`Cluster::reconnect_window`]); `53000` when no worker is
    /// registered. `None` without a quorum: logs live in the master.
    pub(super) fn memory_home(&self, stream: &str) -> Result<Option<(WorkerId, bool)>> {
        let Some(node) = self.quorum() else { return Ok(None) };
        let registered: Vec<(WorkerId, bool)> = {
            let workers = self.workers.lock().expect("workers lock");
            workers.iter().map(|(id, w)| (id.clone(), w.draining)).collect()
        };
        let holders: Vec<WorkerId> = registered
            .iter()
            .filter(|(_, draining)| !draining)
            .map(|(id, _)| id.clone())
            .collect();
        let state = node.state();
        let mut homes = self.memory.homes.lock().expect("homes lock");
        let dropped = homes.dropped.contains(stream);
        let known = homes.by_stream.get(stream).cloned().or_else(|| {
            (!dropped)
                .then(|| crate::recorded::memory_home(&state, stream))
                .flatten()
                .map(|worker| Home { worker, recorded: true })
        });
        if let Some(home) = &known {
            if holders.contains(&home.worker) {
                homes.by_stream.insert(stream.to_string(), home.clone());
                return Ok(Some((home.worker.clone(), !home.recorded)));
            }
            let absent = !registered.iter().any(|(id, _)| *id == home.worker);
            if home.recorded && absent && self.reconnect_window(&node) {
                return Err(Error::user(
                    SqlCode::CannotConnectNow,
                    format!(
                        "memory stream {stream}'s log is on worker {}, which has not reconnected to this leader yet; try again in a few seconds",
                        home.worker
                    ),
                ));
            }
        }
        // Logs each worker holds: those recorded, and those placed here
        // since.
        let mut held: HashMap<WorkerId, usize> = HashMap::new();
        let mut placed = crate::recorded::memory_homes(&state);
        for (s, h) in &homes.by_stream {
            placed.insert(s.clone(), h.worker.clone());
        }
        for w in placed.values() {
            *held.entry(w.clone()).or_default() += 1;
        }
        let fewest = holders
            .iter()
            .min_by_key(|w| (held.get(*w).copied().unwrap_or(0), (*w).clone()))
            .cloned();
        let Some(worker) = fewest else {
            return Err(Error::user(
                SqlCode::InsufficientResources,
                format!(
                    "no worker is registered with the master to hold memory stream {stream}'s log: start `sluice worker --masters …`"
                ),
            ));
        };
        homes.dropped.remove(stream);
        homes.by_stream.insert(
            stream.to_string(),
            Home {
                worker: worker.clone(),
                recorded: false,
            },
        );
        // The new home too: a log it kept from an earlier time as the
        // stream's home (it was cut off meanwhile) is stale. Each worker's
        // commands are ordered, and these are queued before this home is
        // known to anyone else (the homes lock is held): the drop comes
        // before any append or reader.
        for other in &holders {
            self.send(
                other,
                pb::master_command::Command::DropMemory(pb::DropMemory {
                    stream: stream.to_string(),
                }),
            );
        }
        drop(homes);
        tracing::info!(stream, %worker, "memory stream's log placed");
        Ok(Some((worker, true)))
    }

    /// Whether a worker the old leader knew may still register with this
    /// master: it has not taken over yet in its term (the lead loop opens
    /// the adoption a moment after the election), or took over less than
    /// two worker timeouts ago (workers find a new leader within one).
    fn reconnect_window(&self, node: &sluice_quorum::QuorumNode) -> bool {
        let a = self.adoption.lock().expect("adoption lock");
        a.term != node.term() || a.opened_at.is_none_or(|t| t.elapsed() < self.worker_timeout * 2)
    }

    /// Whether the homes `streams` were placed on are still theirs here
    /// (checked before they are recorded with a deployment's placement).
    pub(super) fn homes_current(&self, streams: &[(String, WorkerId)]) -> bool {
        let homes = self.memory.homes.lock().expect("homes lock");
        streams
            .iter()
            .all(|(s, w)| homes.by_stream.get(s).is_some_and(|h| h.worker == *w))
    }

    /// The recorded homes of `streams` (chosen for a deployment) written
    /// with its placement: `(register, worker)` pairs to propose.
    pub(super) fn home_registers(&self, streams: &[(String, WorkerId)]) -> Vec<(String, Option<String>)> {
        streams
            .iter()
            .map(|(s, w)| (crate::recorded::memory_register(s), Some(w.0.clone())))
            .collect()
    }

    /// A majority of masters holds these homes now.
    pub(super) fn homes_recorded(&self, streams: &[(String, WorkerId)]) {
        for (s, w) in streams {
            self.memory.mark_recorded(s, w);
        }
    }

    /// With a master quorum: appends an INSERT's `rows` to memory stream
    /// `stream`'s log (created with `options`) on the worker holding it,
    /// all or none, and returns how many; `None` when the log is in this
    /// process (a single master).
    pub async fn append_memory(
        &self,
        stream: &str,
        options: &BTreeMap<String, String>,
        rows: &[RecordBatch],
    ) -> Result<Option<u64>> {
        let Some(node) = self.quorum() else { return Ok(None) };
        let Some((home, unrecorded)) = self.memory_home(stream)? else {
            return Ok(None);
        };
        if unrecorded {
            let write = vec![(crate::recorded::memory_register(stream), Some(home.0.clone()))];
            if let Err(e) = node.propose(write).await {
                self.memory.forget(stream, &home);
                return Err(Error::user(
                    SqlCode::CannotConnectNow,
                    format!(
                        "memory stream {stream}'s log was not placed: a majority of masters did not record it ({e})"
                    ),
                ));
            }
            self.memory.mark_recorded(stream, &home);
        }
        let Some(ipc) = crate::view_cache::insert_rows(rows, &format!("worker {home}"))? else {
            return Ok(Some(0));
        };
        let count: u64 = rows.iter().map(|b| b.num_rows() as u64).sum();
        let request_id = self.next_request.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let mut appends = self.memory.appends.lock().expect("appends lock");
            if appends.len() >= APPENDS_MAX {
                return Err(Error::user(
                    SqlCode::TooManyConnections,
                    format!(
                        "{APPENDS_MAX} INSERTs already wait for the workers holding their streams' logs; try again"
                    ),
                ));
            }
            appends.insert(
                request_id,
                Append {
                    worker: home.clone(),
                    tx,
                },
            );
        }
        let forget = || {
            self.memory.appends.lock().expect("appends lock").remove(&request_id);
        };
        let unreachable = |why: &str| {
            Error::user(
                SqlCode::ConnectionFailure,
                format!("memory stream {stream}'s log is on worker {home}, which {why}"),
            )
        };
        let command = pb::master_command::Command::AppendMemory(pb::AppendMemory {
            stream: stream.to_string(),
            options: options.clone().into_iter().collect(),
            ipc: ipc.into(),
        });
        if !self.send_request(&home, request_id, command) {
            forget();
            return Err(unreachable(
                "is not connected (or its command queue is full); nothing was appended",
            ));
        }
        let started = Instant::now();
        match tokio::time::timeout(APPEND_TIMEOUT, rx).await {
            Ok(Ok(r)) if r.error.is_empty() => Ok(Some(count)),
            Ok(Ok(r)) => Err(match SqlCode::from_sqlstate(&r.sqlstate) {
                Some(code) => Error::user(code, r.error),
                None => Error::external(format!("worker {home}: {}", r.error)),
            }),
            Ok(Err(_)) => Err(unreachable(
                "went away before it answered; the rows may or may not have been appended",
            )),
            Err(_) => {
                forget();
                Err(unreachable(&format!(
                    "did not answer within {:?}; the rows may or may not have been appended",
                    started.elapsed()
                )))
            }
        }
    }

    /// A dropped stream: every registered worker forgets a log of its
    /// name, and this master where it lived; its next use places it anew.
    /// (The register stays, overwritten then; a new leader that never saw
    /// the drop reads it.)
    pub(super) fn drop_memory(&self, stream: &str) {
        if self.quorum().is_none() {
            return;
        }
        {
            let mut homes = self.memory.homes.lock().expect("homes lock");
            homes.by_stream.remove(stream);
            // Created again, the stream is placed anew, every worker told
            // to drop a log of its name (one cut off now keeps this one).
            homes.dropped.insert(stream.to_string());
        }
        let workers: Vec<WorkerId> = self.workers.lock().expect("workers lock").keys().cloned().collect();
        for w in &workers {
            self.send(
                w,
                pb::master_command::Command::DropMemory(pb::DropMemory {
                    stream: stream.to_string(),
                }),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::record_tests::leading_cluster;
    use super::super::{WorkerConn, mpsc};
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    type Commands = mpsc::Receiver<std::result::Result<pb::MasterCommand, tonic::Status>>;

    /// Worker `id` registered with `cluster`; its commands come out of the
    /// receiver.
    fn register(cluster: &Cluster, id: &str) -> Commands {
        let (tx, rx) = mpsc::channel(16);
        cluster.workers.lock().unwrap().insert(
            WorkerId(id.into()),
            WorkerConn {
                data_address: format!("{id}:1"),
                slots: 4,
                labels: BTreeMap::new(),
                last_heartbeat: Instant::now(),
                draining: false,
                process: Default::default(),
                commands: tx,
                session: 1,
            },
        );
        rx
    }

    fn rows(n: i64) -> Vec<RecordBatch> {
        let schema = Arc::new(Schema::new(vec![Field::new("i", DataType::Int64, true)]));
        vec![RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(0..n))]).unwrap()]
    }

    /// The next command `commands` holds.
    fn next(commands: &mut Commands) -> pb::MasterCommand {
        commands.try_recv().expect("a command").unwrap()
    }

    /// A log goes to the worker holding the fewest, is recorded by the
    /// quorum before its first append, stays while its worker does, and
    /// moves (the others told to drop a stale log) once it is gone. An
    /// append is answered by the worker's CommandResult, its error keeping
    /// its SQLSTATE; with no worker, 53000.
    #[tokio::test]
    async fn a_memory_streams_log_lives_on_one_worker_which_appends_and_answers() {
        let dir = tempfile::tempdir().unwrap();
        let (cluster, node) = leading_cluster(dir.path()).await;
        cluster.open_adoption();
        let options = BTreeMap::new();
        let e = cluster.append_memory("s", &options, &rows(1)).await.unwrap_err();
        assert_eq!(e.sqlstate(), "53000", "{e}");
        let mut w1 = register(&cluster, "w1");
        let mut w2 = register(&cluster, "w2");
        let answer = |cluster: Arc<Cluster>, error: &'static str, sqlstate: &'static str, commands: Commands| {
            tokio::spawn(async move {
                let mut commands = commands;
                let command = loop {
                    let command = commands.recv().await.unwrap().unwrap();
                    if !matches!(command.command, Some(pb::master_command::Command::DropMemory(_))) {
                        break command;
                    }
                };
                let Some(pb::master_command::Command::AppendMemory(append)) = command.command else {
                    panic!("not an append: {command:?}");
                };
                let (_, batches) = crate::view_cache::decode_rows(&append.ipc).unwrap();
                cluster.memory.appended(&pb::CommandResult {
                    request_id: command.request_id,
                    error: error.into(),
                    sqlstate: sqlstate.into(),
                });
                (
                    append.stream,
                    batches.iter().map(|b| b.num_rows()).sum::<usize>(),
                    commands,
                )
            })
        };
        // s: both hold none, w1 by its id; w1 and w2 are told to drop
        // any log s they kept (before the append, on w1).
        let appending = answer(cluster.clone(), "", "", w1);
        assert_eq!(cluster.append_memory("s", &options, &rows(3)).await.unwrap(), Some(3));
        let (stream, appended, back) = appending.await.unwrap();
        w1 = back;
        assert_eq!((stream.as_str(), appended), ("s", 3));
        let dropped = |c: pb::MasterCommand, stream: &str| matches!(c.command, Some(pb::master_command::Command::DropMemory(d)) if d.stream == stream);
        assert!(dropped(next(&mut w2), "s"));
        assert_eq!(
            crate::recorded::memory_home(&node.state(), "s"),
            Some(WorkerId("w1".into())),
            "recorded before the append"
        );
        // t: w2 holds fewer logs.
        assert_eq!(cluster.memory_home("t").unwrap(), Some((WorkerId("w2".into()), true)));
        assert!(dropped(next(&mut w1), "t") && dropped(next(&mut w2), "t"));
        // The worker's refusal comes back with its SQLSTATE.
        let appending = answer(cluster.clone(), "memory stream is full", "53400", w1);
        let e = cluster.append_memory("s", &options, &rows(2)).await.unwrap_err();
        assert_eq!(e.sqlstate(), "53400", "{e}");
        w1 = appending.await.unwrap().2;
        // A new term reads the home from the replicated state.
        cluster.memory.forget_homes();
        assert_eq!(cluster.memory_home("s").unwrap(), Some((WorkerId("w1".into()), false)));
        // w1 gone: within a new leader's first two worker timeouts it may
        // still come back (57P03, try again); after, s moves to w2, to be
        // recorded again.
        cluster.workers.lock().unwrap().remove(&WorkerId("w1".into()));
        drop(w1);
        let e = cluster.memory_home("s").unwrap_err();
        assert_eq!(e.sqlstate(), "57P03", "{e}");
        cluster.adoption.lock().unwrap().opened_at = Some(Instant::now() - Duration::from_secs(60));
        assert_eq!(cluster.memory_home("s").unwrap(), Some((WorkerId("w2".into()), true)));
        while w2.try_recv().is_ok() {}
        // Dropped, s is placed anew at its next use though its worker
        // lives, and every worker (its new home too) drops what it held.
        cluster.memory.mark_recorded("s", &WorkerId("w2".into()));
        cluster.drop_memory("s");
        assert!(dropped(next(&mut w2), "s"));
        assert_eq!(cluster.memory_home("s").unwrap(), Some((WorkerId("w2".into()), true)));
        assert!(dropped(next(&mut w2), "s"), "the new home drops a stale log first");
        node.shutdown();
    }

    /// A deployment placed on a home that moved before it was recorded
    /// does not record the old one; an INSERT waiting for a worker that is
    /// lost fails at once.
    #[tokio::test]
    async fn a_moved_home_is_not_recorded_back_and_a_lost_worker_fails_its_inserts() {
        let dir = tempfile::tempdir().unwrap();
        let (cluster, node) = leading_cluster(dir.path()).await;
        cluster.open_adoption();
        let _w1 = register(&cluster, "w1");
        let (w1, w2) = (WorkerId("w1".into()), WorkerId("w2".into()));
        assert_eq!(cluster.memory_home("s").unwrap(), Some((w1.clone(), true)));
        let placed = [("s".to_string(), w1.clone())];
        assert!(cluster.homes_current(&placed));
        // Meanwhile w1 went and an INSERT placed s on w2.
        cluster.memory.homes.lock().unwrap().by_stream.insert(
            "s".into(),
            Home {
                worker: w2.clone(),
                recorded: true,
            },
        );
        assert!(!cluster.homes_current(&placed));
        // An INSERT waiting for w1 when it is lost.
        let c = cluster.clone();
        let appending = tokio::spawn(async move { c.append_memory("t", &BTreeMap::new(), &rows(1)).await });
        let deadline = Instant::now() + Duration::from_secs(5);
        while cluster.memory.appends.lock().unwrap().is_empty() {
            assert!(Instant::now() < deadline, "the append was never sent");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        cluster.memory.worker_gone(&w1);
        let e = appending.await.unwrap().unwrap_err();
        assert_eq!(e.sqlstate(), "08006", "{e}");
        assert!(e.to_string().contains("went away"), "{e}");
        node.shutdown();
    }

    /// Appends waiting for their workers are bounded: at the bound an
    /// INSERT is refused with 53300 and nothing is sent.
    #[tokio::test]
    async fn appends_waiting_for_workers_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let (cluster, node) = leading_cluster(dir.path()).await;
        cluster.open_adoption();
        let mut w1 = register(&cluster, "w1");
        let options = BTreeMap::new();
        // Recorded first, so the bound is what refuses below.
        assert!(cluster.memory_home("s").unwrap().is_some());
        let mut held = Vec::new();
        for id in 0..APPENDS_MAX as u64 - 1 {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let worker = WorkerId("w1".into());
            cluster
                .memory
                .appends
                .lock()
                .unwrap()
                .insert(1_000_000 + id, Append { worker, tx });
            held.push(rx);
        }
        // One below the bound: sent, and answered.
        let c = cluster.clone();
        let options2 = options.clone();
        let appending = tokio::spawn(async move { c.append_memory("s", &options2, &rows(1)).await });
        let command = loop {
            if let Ok(Ok(c)) = w1.try_recv() {
                if matches!(c.command, Some(pb::master_command::Command::AppendMemory(_))) {
                    break c;
                }
            } else {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        assert_eq!(cluster.memory.appends.lock().unwrap().len(), APPENDS_MAX);
        let e = cluster.append_memory("s", &options, &rows(1)).await.unwrap_err();
        assert_eq!(e.sqlstate(), "53300", "{e}");
        assert!(w1.try_recv().is_err(), "nothing sent past the bound");
        cluster.memory.appended(&pb::CommandResult {
            request_id: command.request_id,
            ..Default::default()
        });
        assert_eq!(appending.await.unwrap().unwrap(), Some(1));
        assert_eq!(cluster.memory.appends.lock().unwrap().len(), APPENDS_MAX - 1);
        node.shutdown();
    }
}
