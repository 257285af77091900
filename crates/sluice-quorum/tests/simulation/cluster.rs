//! Workers and the leaders' placement in the seeded simulation.
//!
//! A worker's keep-or-stop decisions are the real ones
//! ([`sluice_quorum::fence::Fence`], as `sluice worker` takes them); the
//! masters' side models `sluice-cluster`'s control (registration, worker
//! timeouts, moves, adoption by a new leader, step-down) by the same rules
//! and the same [`Timing`], five times shorter. Pipelines have one part
//! each; what is checked is that no pipeline ever runs on two workers (or
//! twice on one) at once.

use sluice_quorum::fence::{Admission, Fence, SessionEnd, Timing};
use sluice_quorum::{Replica, RoleName, Stamp};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Add;
use std::time::Duration;

/// A deployment's part: (pipeline, epoch).
pub type Key = (u32, u64);

/// Connection attempts to a master that does not answer give up after
/// this (the worker's 3 s, five times shorter), and the next comes this
/// much later (its 500 ms).
const CONNECT_TIMEOUT_MS: u64 = 600;
const RECONNECT_MS: u64 = 100;
/// A master declares a worker silent this long dead (`--worker-timeout`).
const WORKER_TIMEOUT_MS: u64 = 1000;
/// A placement that could not be recorded is tried again this much later.
const RECORD_MS: u64 = 200;

pub fn timing() -> Timing {
    Timing::quick()
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// Milliseconds of simulated time, as the fence's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ms(pub u64);

impl Add<Duration> for Ms {
    type Output = Ms;
    fn add(self, d: Duration) -> Ms {
        Ms(self.0 + ms(d))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wire {
    // Worker → master.
    Register {
        running: Vec<Key>,
    },
    Heartbeat,
    Exited(Key),
    /// The worker closed the connection.
    Closed,
    // Master → worker.
    Registered {
        term: u64,
    },
    NotLeader,
    Command {
        term: u64,
        command: Command,
    },
    /// The master closed the connection (or reset: it crashed).
    Close,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Keepalive,
    Start(Key),
    Stop(Key),
    /// A barrier signal for the deployment: claims an orphan.
    Claim(Key),
    /// The master declared the worker lost.
    Refused,
}

/// A message to send: to whom, on which connection.
#[derive(Debug, Clone)]
pub struct Out {
    pub to: String,
    pub conn: u64,
    pub wire: Wire,
}

struct Conn {
    id: u64,
    master: String,
    registered: bool,
    since: u64,
    last_heard: u64,
    next_heartbeat: u64,
}

/// A worker process.
pub struct Worker {
    pub id: String,
    fence: Fence<Ms>,
    conn: Option<Conn>,
    next_attempt: u64,
    attempt: usize,
    /// Running parts, and whether each is an orphan.
    pub parts: BTreeMap<Key, bool>,
    stopped: BTreeSet<Key>,
    /// Exits of parts not yet told to a master (given up between
    /// sessions: told to the next one).
    exits: Vec<Key>,
}

impl Worker {
    pub fn new(id: String) -> Worker {
        Worker {
            id,
            fence: Fence::new(),
            conn: None,
            next_attempt: 0,
            attempt: 0,
            parts: BTreeMap::new(),
            stopped: BTreeSet::new(),
            exits: Vec::new(),
        }
    }

    /// The master it is registered with.
    pub fn master(&self) -> Option<&str> {
        self.conn.as_ref().filter(|c| c.registered).map(|c| c.master.as_str())
    }

    /// Its connection (id, master), registered or not.
    pub fn conn(&self) -> Option<(u64, String)> {
        self.conn.as_ref().map(|c| (c.id, c.master.clone()))
    }

    /// The process restarts: nothing runs, no term followed.
    pub fn restart(&mut self, now: u64) {
        *self = Worker::new(self.id.clone());
        self.next_attempt = now + RECONNECT_MS;
    }

    fn out(&self, wire: Wire) -> Vec<Out> {
        self.conn
            .as_ref()
            .map(|c| Out {
                to: c.master.clone(),
                conn: c.id,
                wire,
            })
            .into_iter()
            .collect()
    }

    pub fn tick(&mut self, now: u64, masters: &[String], conn_ids: &mut u64, trace: &mut Vec<String>) -> Vec<Out> {
        let mut out = Vec::new();
        if self.fence.orphans_due(Ms(now)) {
            let given_up: Vec<Key> = self.parts.iter().filter(|(_, o)| **o).map(|(k, _)| *k).collect();
            self.fence.clear_orphans();
            trace.push(format!("{} gives up its orphans {given_up:?}", self.id));
            for key in given_up {
                self.parts.remove(&key);
                // A master that took the report hears it failed.
                self.exits.push(key);
            }
            if self.master().is_some() {
                for key in std::mem::take(&mut self.exits) {
                    out.extend(self.out(Wire::Exited(key)));
                }
            }
        }
        let t = timing();
        match &mut self.conn {
            Some(c) if !c.registered && now >= c.since + CONNECT_TIMEOUT_MS => {
                out.extend(self.out(Wire::Closed));
                self.conn = None;
                self.next_attempt = now + RECONNECT_MS;
            }
            Some(c) if c.registered && now >= c.last_heard + ms(t.master_silence) => {
                trace.push(format!("{} hears nothing from {}", self.id, c.master));
                out.extend(self.end(now, SessionEnd::Silent, trace));
            }
            Some(c) if c.registered && now >= c.next_heartbeat => {
                c.next_heartbeat = now + ms(t.heartbeat);
                out.extend(self.out(Wire::Heartbeat));
            }
            Some(_) => {}
            None if now >= self.next_attempt => {
                *conn_ids += 1;
                let master = masters[self.attempt % masters.len()].clone();
                self.attempt += 1;
                self.conn = Some(Conn {
                    id: *conn_ids,
                    master,
                    registered: false,
                    since: now,
                    last_heard: now,
                    next_heartbeat: now,
                });
                let running = self.parts.keys().copied().collect();
                out.extend(self.out(Wire::Register { running }));
            }
            None => {}
        }
        out
    }

    /// The session ended: the fence says whether the parts wait as orphans.
    fn end(&mut self, now: u64, how: SessionEnd, trace: &mut Vec<String>) -> Vec<Out> {
        let out = if how == SessionEnd::Broken {
            Vec::new()
        } else {
            self.out(Wire::Closed)
        };
        let term = self.fence.term();
        let last_heard = self.conn.as_ref().map_or(now, |c| c.last_heard);
        match self
            .fence
            .ended(term, how, !self.parts.is_empty(), Ms(now), Ms(last_heard), &timing())
        {
            Some(until) => {
                for orphan in self.parts.values_mut() {
                    *orphan = true;
                }
                trace.push(format!(
                    "{} session ended ({how:?}): orphans until {}",
                    self.id, until.0
                ));
            }
            None => {
                trace.push(format!("{} session ended ({how:?}): stops {:?}", self.id, self.parts));
                self.parts.clear();
            }
        }
        self.conn = None;
        self.next_attempt = now + RECONNECT_MS;
        out
    }

    pub fn receive(&mut self, now: u64, conn: u64, wire: Wire, trace: &mut Vec<String>) -> Vec<Out> {
        let Some(c) = self.conn.as_mut().filter(|c| c.id == conn) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        match wire {
            Wire::Registered { term } if !c.registered => match self.fence.admit(term, Ms(now), &timing()) {
                Admission::Deposed { .. } => {
                    out.extend(self.out(Wire::Closed));
                    self.conn = None;
                    self.next_attempt = now + RECONNECT_MS;
                }
                admitted => {
                    c.registered = true;
                    c.last_heard = now;
                    trace.push(format!("{} registered with {} (term {term})", self.id, c.master));
                    if admitted == Admission::AdmittedStopOrphans {
                        trace.push(format!("{} stops its orphans {:?}", self.id, self.parts));
                        self.exits.extend(self.parts.keys());
                        self.parts.clear();
                    }
                    for key in std::mem::take(&mut self.exits) {
                        out.extend(self.out(Wire::Exited(key)));
                    }
                }
            },
            Wire::NotLeader => {
                self.conn = None;
                self.next_attempt = now + RECONNECT_MS;
            }
            Wire::Close if !c.registered => {
                self.conn = None;
                self.next_attempt = now + RECONNECT_MS;
            }
            Wire::Close => {
                let how = Fence::broke(Ms(now), Ms(c.last_heard), &timing());
                out.extend(self.end(now, how, trace));
            }
            Wire::Command { term, command } if c.registered => {
                // Only keepalives count as hearing from the master (a
                // leader sends them only while it holds its lease).
                if command == Command::Keepalive && term >= self.fence.term() {
                    c.last_heard = now;
                }
                if command == Command::Refused {
                    if term >= self.fence.term() {
                        out.extend(self.end(now, SessionEnd::Released, trace));
                    }
                    return out;
                }
                if !self.fence.obey(term) {
                    return out;
                }
                match command {
                    Command::Start(key) => {
                        if !self.stopped.contains(&key) && !self.parts.contains_key(&key) {
                            trace.push(format!("{} starts {key:?} (term {term})", self.id));
                            self.parts.insert(key, false);
                        }
                    }
                    Command::Stop(key) => {
                        self.stopped.insert(key);
                        if self.parts.remove(&key).is_some() {
                            trace.push(format!("{} stops {key:?} (term {term})", self.id));
                            out.extend(self.out(Wire::Exited(key)));
                        }
                    }
                    Command::Claim(key) => {
                        if let Some(orphan) = self.parts.get_mut(&key) {
                            *orphan = false;
                        }
                    }
                    Command::Keepalive | Command::Refused => {}
                }
            }
            _ => {}
        }
        out
    }

    /// A part fails (a task error): it exits and says so.
    pub fn fail_one(&mut self, pick: usize, trace: &mut Vec<String>) -> Vec<Out> {
        let Some(key) = self.parts.keys().nth(pick % self.parts.len().max(1)).copied() else {
            return Vec::new();
        };
        self.parts.remove(&key);
        trace.push(format!("{} part {key:?} fails", self.id));
        self.out(Wire::Exited(key))
    }
}

struct MWorker {
    conn: u64,
    last_heard: u64,
}

struct Runtime {
    epoch: u64,
    worker: String,
}

/// A master's leadership: from opening adoption in its term.
struct Leading {
    term: u64,
    /// Adoption opened then; `None` once the pipelines started.
    adopting: Option<u64>,
    /// The old leader's placements: the workers to wait for.
    recorded: BTreeMap<u32, (u64, String)>,
    /// Parts workers reported while adoption is open.
    reports: BTreeMap<Key, String>,
    /// When the reports not adopted are stopped.
    close_at: Option<u64>,
    runtimes: BTreeMap<u32, Runtime>,
    /// Pipelines to place (anew) at these times.
    due: BTreeMap<u32, u64>,
    /// Parts that may still run, and until when at the latest (unless
    /// their exit is heard first, or their worker registers again without
    /// them). A pipeline with one is not placed anew.
    stopping: BTreeMap<Key, (String, u64)>,
    /// Placement writes in flight: started once a majority holds them.
    placing: BTreeMap<Stamp, Key>,
}

/// A master's control plane (volatile: gone with a crash).
#[derive(Default)]
pub struct Control {
    leading: Option<Leading>,
    /// The term commands carry: the one this master last took the lead in
    /// (not the quorum's current term, which a deposed leader has seen).
    led_term: u64,
    workers: BTreeMap<String, MWorker>,
    next_keepalive: u64,
}

/// Part `key` on `worker` may run until `until` (the later of two).
fn vacate(stopping: &mut BTreeMap<Key, (String, u64)>, key: Key, worker: &str, until: u64) {
    let e = stopping.entry(key).or_insert((worker.to_string(), until));
    e.1 = e.1.max(until);
}

pub fn placement_key(pipeline: u32) -> String {
    format!("placement/{pipeline}")
}

fn recorded(replica: &Replica) -> BTreeMap<u32, (u64, String)> {
    replica
        .state()
        .scan("placement/")
        .filter_map(|(k, v)| {
            let p = k["placement/".len()..].parse().ok()?;
            let (epoch, worker) = v.split_once('@')?;
            Some((p, (epoch.parse().ok()?, worker.to_string())))
        })
        .collect()
}

impl Control {
    fn send(&self, worker: &str, wire: Wire) -> Vec<Out> {
        self.workers
            .get(worker)
            .map(|w| Out {
                to: worker.to_string(),
                conn: w.conn,
                wire,
            })
            .into_iter()
            .collect()
    }

    fn command(&self, worker: &str, term: u64, command: Command) -> Vec<Out> {
        self.send(worker, Wire::Command { term, command })
    }

    /// The pipelines this leader runs (tests).
    pub fn runtimes(&self) -> BTreeMap<u32, (u64, String)> {
        self.leading
            .as_ref()
            .map(|l| {
                l.runtimes
                    .iter()
                    .map(|(p, r)| (*p, (r.epoch, r.worker.clone())))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn leads(&self) -> bool {
        self.leading.as_ref().is_some_and(|l| l.adopting.is_none())
    }

    /// A worker is gone: its pipelines move once its parts surely
    /// stopped — a worker declared lost for silence keeps them at most
    /// its silent grace, one whose session broke (a reset: perhaps this
    /// master's, perhaps the worker's death, perhaps the network) may keep
    /// them as orphans for a new leader, up to the orphan grace, unless it
    /// registers again first and reports what it runs.
    fn worker_lost(&mut self, id: &str, term: u64, now: u64, release: bool, silent: bool) -> Vec<Out> {
        let mut out = Vec::new();
        if release {
            out.extend(self.command(id, term, Command::Refused));
        }
        self.workers.remove(id);
        if let Some(l) = self.leading.as_mut() {
            let t = timing();
            let until = now + ms(t.orphans_gone_after(silent, Duration::from_millis(WORKER_TIMEOUT_MS)));
            let reported: Vec<Key> = l.reports.iter().filter(|(_, w)| *w == id).map(|(k, _)| *k).collect();
            for key in reported {
                l.reports.remove(&key);
                vacate(&mut l.stopping, key, id, until);
            }
            let on: Vec<(u32, u64)> = l
                .runtimes
                .iter()
                .filter(|(_, r)| r.worker == id)
                .map(|(p, r)| (*p, r.epoch))
                .collect();
            for (p, epoch) in on {
                l.runtimes.remove(&p);
                vacate(&mut l.stopping, (p, epoch), id, until);
                l.due.insert(p, now);
            }
        }
        out
    }

    pub fn receive(&mut self, now: u64, replica: &Replica, from: &str, conn: u64, wire: Wire) -> Vec<Out> {
        let term = self.led_term;
        let mut out = Vec::new();
        let current = self.workers.get(from).is_some_and(|w| w.conn == conn);
        match wire {
            Wire::Register { running } => {
                // Only while it holds its lease (a registration counts as a
                // word from the leader, like a keepalive).
                let taking = replica.is_leader(now) && self.leading.as_ref().is_some_and(|l| l.term == replica.term());
                if !taking {
                    return vec![Out {
                        to: from.to_string(),
                        conn,
                        wire: Wire::NotLeader,
                    }];
                }
                if self.workers.contains_key(from) {
                    out.extend(self.worker_lost(from, term, now, true, false));
                }
                self.workers.insert(from.to_string(), MWorker { conn, last_heard: now });
                out.extend(self.send(from, Wire::Registered { term }));
                let l = self.leading.as_mut().expect("taking");
                let open = l.adopting.is_some() || l.close_at.is_some();
                // What it does not report it does not run.
                l.stopping.retain(|k, (w, _)| w != from || running.contains(k));
                let mut stop = Vec::new();
                for key in running {
                    let elsewhere = l.runtimes.get(&key.0).is_some_and(|r| r.epoch != key.1);
                    if open && !l.stopping.contains_key(&key) && !elsewhere {
                        l.reports.insert(key, from.to_string());
                    } else {
                        vacate(&mut l.stopping, key, from, now + ms(timing().adoption_wait));
                        stop.push(key);
                    }
                }
                for key in stop {
                    out.extend(self.command(from, term, Command::Stop(key)));
                }
            }
            Wire::Heartbeat if current => {
                self.workers.get_mut(from).expect("current").last_heard = now;
            }
            Wire::Exited(key) if current => {
                if let Some(l) = self.leading.as_mut() {
                    l.reports.remove(&key);
                    l.stopping.remove(&key);
                    if l.runtimes
                        .get(&key.0)
                        .is_some_and(|r| r.epoch == key.1 && r.worker == from)
                    {
                        l.runtimes.remove(&key.0);
                        l.due.insert(key.0, now);
                    }
                }
            }
            Wire::Closed if current => out.extend(self.worker_lost(from, term, now, false, false)),
            _ => {}
        }
        out
    }

    /// A placement write completed: held by a majority, the part starts;
    /// else the pipeline is placed again.
    pub fn placed(&mut self, now: u64, term: u64, stamp: Stamp, held: bool) -> Vec<Out> {
        let Some(l) = self.leading.as_mut() else {
            return Vec::new();
        };
        let Some(key) = l.placing.remove(&stamp) else {
            return Vec::new();
        };
        let Some(r) = l.runtimes.get(&key.0).filter(|r| r.epoch == key.1) else {
            return Vec::new();
        };
        if !held {
            l.runtimes.remove(&key.0);
            l.due.insert(key.0, now + RECORD_MS);
            return Vec::new();
        }
        let worker = r.worker.clone();
        self.command(&worker, term, Command::Start(key))
    }

    /// Ends every session (stepping down, or crashing).
    pub fn disconnect_all(&mut self) -> Vec<Out> {
        let out = self
            .workers
            .iter()
            .map(|(id, w)| Out {
                to: id.clone(),
                conn: w.conn,
                wire: Wire::Close,
            })
            .collect();
        self.workers.clear();
        out
    }

    /// Advances timers. Placement writes go through `replica.propose`;
    /// returns what to send and the proposals made (stamp, writes).
    #[allow(clippy::type_complexity)]
    pub fn tick(
        &mut self,
        now: u64,
        replica: &mut Replica,
        pipelines: u32,
        next_epoch: &mut u64,
        trace: &mut Vec<String>,
    ) -> (Vec<Out>, Vec<(Stamp, Vec<(String, Option<String>)>)>) {
        let t = timing();
        let mut out = Vec::new();
        let mut proposed = Vec::new();
        if self.leading.is_none() && replica.is_leader(now) {
            self.led_term = replica.term();
        }
        let term = self.led_term;
        if now >= self.next_keepalive && replica.is_leader(now) {
            self.next_keepalive = now + ms(t.heartbeat);
            for id in self.workers.keys().cloned().collect::<Vec<_>>() {
                out.extend(self.command(&id, term, Command::Keepalive));
            }
        }
        let silent: Vec<String> = self
            .workers
            .iter()
            .filter(|(_, w)| now > w.last_heard + WORKER_TIMEOUT_MS)
            .map(|(id, _)| id.clone())
            .collect();
        for id in silent {
            trace.push(format!("declares {id} lost for silence"));
            out.extend(self.worker_lost(&id, term, now, true, true));
        }
        match &self.leading {
            None if replica.is_leader(now) => {
                trace.push(format!("opens adoption in term {term}"));
                self.leading = Some(Leading {
                    term,
                    adopting: Some(now),
                    recorded: recorded(replica),
                    reports: BTreeMap::new(),
                    close_at: None,
                    runtimes: BTreeMap::new(),
                    due: BTreeMap::new(),
                    stopping: BTreeMap::new(),
                    placing: BTreeMap::new(),
                });
            }
            None => {}
            Some(l) if l.adopting.is_some() && !replica.is_leader(now) => {
                // Lost the lead while waiting: the reports are the next
                // leader's to adopt, the workers go to it.
                self.leading = None;
                out.extend(self.disconnect_all());
                return (out, proposed);
            }
            Some(l) if l.adopting.is_none() && replica.role() != RoleName::Leader => {
                trace.push("steps down".to_string());
                self.leading = None;
                out.extend(self.disconnect_all());
                return (out, proposed);
            }
            Some(_) => {}
        }
        let Some(l) = self.leading.as_mut() else {
            return (out, proposed);
        };
        if let Some(opened) = l.adopting {
            let registered: BTreeSet<&String> = self.workers.keys().collect();
            // A pipeline no placement names runs nowhere (placements are
            // recorded before their parts start, and never removed).
            let ready = (0..pipelines).all(|p| {
                l.reports.iter().any(|(k, w)| k.0 == p && registered.contains(w))
                    || l.recorded.get(&p).is_none_or(|(_, w)| registered.contains(w))
            });
            if !ready && now < opened + ms(t.adoption_wait) {
                return (out, proposed);
            }
            l.adopting = None;
            l.close_at = Some(now + ms(t.adoption_close_after));
            for p in 0..pipelines {
                let adoptable = l
                    .reports
                    .iter()
                    .find(|(k, w)| k.0 == p && registered.contains(w))
                    .map(|(k, w)| (*k, w.clone()));
                if let Some((key, w)) = adoptable {
                    l.reports.remove(&key);
                    trace.push(format!("adopts {key:?} on {w}"));
                    l.runtimes.insert(
                        p,
                        Runtime {
                            epoch: key.1,
                            worker: w.clone(),
                        },
                    );
                    out.push(Out {
                        to: w.clone(),
                        conn: self.workers[&w].conn,
                        wire: Wire::Command {
                            term,
                            command: Command::Claim(key),
                        },
                    });
                } else {
                    l.due.insert(p, now);
                }
            }
        }
        if l.close_at.is_some_and(|at| now >= at) {
            l.close_at = None;
            for (key, w) in std::mem::take(&mut l.reports) {
                vacate(&mut l.stopping, key, &w, now + ms(t.adoption_wait));
                if let Some(c) = self.workers.get(&w) {
                    out.push(Out {
                        to: w.clone(),
                        conn: c.conn,
                        wire: Wire::Command {
                            term,
                            command: Command::Stop(key),
                        },
                    });
                }
            }
        }
        // Place what is due: the reports of it stop first, then, once no
        // part of it may still run, a worker with the fewest parts gets it.
        l.stopping.retain(|_, (_, until)| *until > now);
        let due: Vec<u32> = l.due.iter().filter(|(_, at)| **at <= now).map(|(p, _)| *p).collect();
        for p in due {
            let mut load: BTreeMap<&String, usize> = self.workers.keys().map(|w| (w, 0)).collect();
            for r in l.runtimes.values() {
                if let Some(n) = load.get_mut(&r.worker) {
                    *n += 1;
                }
            }
            let Some(worker) = load.iter().min_by_key(|(w, n)| (**n, **w)).map(|(w, _)| (*w).clone()) else {
                continue;
            };
            let discarded: Vec<(Key, String)> = l
                .reports
                .iter()
                .filter(|(k, _)| k.0 == p)
                .map(|(k, w)| (*k, w.clone()))
                .collect();
            for (key, w) in discarded {
                l.reports.remove(&key);
                vacate(&mut l.stopping, key, &w, now + ms(t.adoption_wait));
                if let Some(c) = self.workers.get(&w) {
                    out.push(Out {
                        to: w,
                        conn: c.conn,
                        wire: Wire::Command {
                            term,
                            command: Command::Stop(key),
                        },
                    });
                }
            }
            if l.stopping.keys().any(|k| k.0 == p) {
                continue;
            }
            l.due.remove(&p);
            *next_epoch += 1;
            let key = (p, *next_epoch);
            // The placement is recorded (held by a majority) before the
            // worker starts it: a next leader knows whom to wait for.
            let writes = vec![(placement_key(p), Some(format!("{}@{worker}", key.1)))];
            match replica.propose(now, writes.clone()) {
                Ok(stamp) => {
                    trace.push(format!("places {key:?} on {worker}"));
                    l.runtimes.insert(
                        p,
                        Runtime {
                            epoch: key.1,
                            worker: worker.clone(),
                        },
                    );
                    l.placing.insert(stamp, key);
                    proposed.push((stamp, writes));
                }
                Err(_) => {
                    l.due.insert(p, now + RECORD_MS);
                }
            }
        }
        (out, proposed)
    }
}
