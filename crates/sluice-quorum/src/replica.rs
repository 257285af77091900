//! One master's side of the quorum protocol, as a pure state machine: the
//! caller feeds it the time, messages from peers and proposals, and carries
//! out what it asks for (persist, send, complete). No I/O, no clock, no
//! threads — the same code runs in `sluice master` and in the seeded
//! simulation that checks it (`tests/simulation.rs`).
//!
//! # The rules, and why they are enough
//!
//! CRDTs converge but do not decide: two masters could each place the same
//! task. So one master decides at a time — the **leader** of a **term** —
//! and the replicated state carries only its writes, stamped `(term, seq)`.
//!
//! - **Election** (as Raft's, without a log). A master that has heard no
//!   leader for a randomised election timeout first asks for *pre-votes*
//!   (would you vote for me in `term + 1`?) so that a master cut off in a
//!   minority does not inflate terms and depose a healthy leader when it
//!   comes back; with a majority of pre-votes it increments its term,
//!   persists its own vote and asks for votes. A master votes at most once
//!   per term (the vote is persisted before it answers), so **at most one
//!   leader per term**. A vote carries the voter's whole state and the new
//!   leader merges the states of its majority: every write acknowledged by a
//!   majority before is among them (two majorities share a master), so the
//!   new leader starts from every acknowledged write — the election is the
//!   read-majority.
//! - **Writes** (write-majority). The leader stamps a proposal with its term
//!   and next sequence number, applies it, and sends it to every peer until
//!   each acknowledges holding it (a stamp at least as new for each key); the
//!   proposal completes once a majority, the leader included, holds it. A
//!   master accepts writes only from a leader of a term at least its own, and
//!   a master that has voted in a newer term refuses the old leader's, so an
//!   old leader cannot gather a majority once a new one is elected.
//! - **Lease** (who may decide *now*). A master that heard from its leader
//!   less than the minimum election timeout ago does not vote for anyone
//!   else (nor after its own restart, for the same time). A leader whose
//!   heartbeat sent at `t` was acknowledged by a majority therefore knows no
//!   other leader can exist before `t + election_min`; it holds a lease
//!   until `t + lease` (`lease < election_min`, the margin covering clock
//!   rate differences) and decides — places tasks, sends commands to workers
//!   — only while [`Replica::is_leader`] says so. A leader that paused
//!   (SIGSTOP) finds its lease expired when it wakes and decides nothing;
//!   workers additionally refuse commands of a term older than one they
//!   have seen (fencing), so even a wrong clock cannot make two leaders'
//!   commands both obeyed. A leader that has not heard from a majority for
//!   an election timeout steps down and says it has no quorum.
//! - **Anti-entropy.** Every message from the leader carries its state's
//!   digest; a follower whose merged state differs answers with its whole
//!   state, and the leader merges it and sends its own whole state next.
//!   Entries an old leader wrote to a minority before it lost its term
//!   (never acknowledged, so never promised to a client) may thus still
//!   appear later, with their old stamps losing to anything newer — the
//!   outcome of a write that timed out is unknown, as in any replicated
//!   database.

use crate::state::{ReplicatedState, Stamp};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A master's id (`--id`).
pub type MasterId = String;

/// Timing and bounds of the protocol, in milliseconds.
#[derive(Debug, Clone)]
pub struct Config {
    /// A leader sends a heartbeat (with any unacknowledged writes) this often.
    pub heartbeat_ms: u64,
    /// Election timeouts are drawn from `election_min_ms..election_max_ms`.
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// How long a majority's acknowledgement of a heartbeat lets the leader
    /// decide. Must be below `election_min_ms`.
    pub lease_ms: u64,
    /// A proposal not held by a majority within this time fails (its outcome
    /// is then unknown).
    pub proposal_timeout_ms: u64,
    /// Proposals waiting for a majority at most; more are refused.
    pub max_pending: usize,
}

impl Config {
    /// Timing four to five times shorter than the default, for simulations and
    /// tests (heartbeat 50 ms, elections 300–600 ms, lease 200 ms).
    pub fn quick() -> Config {
        Config {
            heartbeat_ms: 50,
            election_min_ms: 300,
            election_max_ms: 600,
            lease_ms: 200,
            proposal_timeout_ms: 1000,
            max_pending: 4096,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            heartbeat_ms: 200,
            election_min_ms: 1500,
            election_max_ms: 3000,
            lease_ms: 1000,
            proposal_timeout_ms: 5000,
            max_pending: 4096,
        }
    }
}

/// What a master must keep on disk, written before any message that depends
/// on it is sent: its term, its vote in that term, and the state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Durable {
    pub term: u64,
    pub voted_for: Option<MasterId>,
    pub state: ReplicatedState,
}

/// Messages between masters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Message {
    /// Would you vote for me in `term`? Changes nothing at the receiver.
    PreVote { term: u64 },
    /// The answer; `term` is the receiver's current term.
    PreVoted { term: u64, granted: bool },
    /// Vote for me in `term`.
    RequestVote { term: u64 },
    /// The answer, with the voter's state when granted.
    Vote {
        term: u64,
        granted: bool,
        state: Option<ReplicatedState>,
    },
    /// From the leader: writes not yet acknowledged by the receiver (or the
    /// whole state when `full`), and the leader's digest when it sent them.
    Append {
        term: u64,
        round: u64,
        delta: ReplicatedState,
        full: bool,
        digest: u64,
    },
    /// The answer: for each key of the delta, the stamp now held; the
    /// receiver's whole state when its digest differs from the leader's.
    Appended {
        term: u64,
        round: u64,
        ok: bool,
        held: Vec<(String, Stamp)>,
        state: Option<ReplicatedState>,
    },
}

impl Message {
    pub fn term(&self) -> u64 {
        match self {
            Message::PreVote { term }
            | Message::PreVoted { term, .. }
            | Message::RequestVote { term }
            | Message::Vote { term, .. }
            | Message::Append { term, .. }
            | Message::Appended { term, .. } => *term,
        }
    }
}

/// Why a proposal was not (or may not have been) applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuorumError {
    #[error("this master is not the leader{}", leader.as_ref().map(|l| format!(" (the leader is {l})")).unwrap_or_else(|| " and no leader is known: the masters have no quorum".into()))]
    NotLeader { leader: Option<MasterId> },
    #[error("{pending} changes are already waiting for a majority of masters; try again")]
    Busy { pending: usize },
    #[error("a majority of masters did not acknowledge the change within {ms} ms; it may or may not take effect")]
    Timeout { ms: u64 },
    #[error("this master lost its leadership before a majority acknowledged the change; it may or may not take effect")]
    LeadershipLost,
}

/// A master's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RoleName {
    Follower,
    PreCandidate,
    Candidate,
    Leader,
}

impl std::fmt::Display for RoleName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RoleName::Follower => "follower",
            RoleName::PreCandidate => "pre-candidate",
            RoleName::Candidate => "candidate",
            RoleName::Leader => "leader",
        })
    }
}

/// What a master says about itself (`SHOW CLUSTER`, `/api/v1/cluster`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub id: MasterId,
    pub role: RoleName,
    pub term: u64,
    pub leader: Option<MasterId>,
    /// The leader holds its lease, or a follower heard from its leader within
    /// the minimum election timeout.
    pub has_quorum: bool,
    /// Peers heard from within the minimum election timeout (followers talk
    /// only to their leader, so a follower lists its leader; the leader
    /// lists every follower that answers).
    pub reachable: Vec<MasterId>,
    pub version: Stamp,
    pub entries: usize,
    pub digest: u64,
}

/// What the caller must do after an input, in this order: persist
/// [`Replica::durable`] when `persist`, then send `send`, then report
/// `completed` to whoever proposed.
#[derive(Debug, Default)]
pub struct Output {
    pub persist: bool,
    pub send: Vec<(MasterId, Message)>,
    pub completed: Vec<(Stamp, Result<(), QuorumError>)>,
}

struct Proposal {
    keys: Vec<String>,
    /// Per master, the keys it is known to hold at this stamp or newer.
    held: BTreeMap<MasterId, BTreeSet<String>>,
    deadline: u64,
}

#[derive(Default)]
struct Peer {
    /// Keys written in this term that the peer has not acknowledged, with
    /// the stamp to confirm.
    pending: BTreeMap<String, Stamp>,
    /// Send the whole state next time (the peer reported a different digest).
    full: bool,
    acked_round: u64,
}

enum Role {
    Follower {
        leader: Option<MasterId>,
    },
    PreCandidate {
        granted: BTreeSet<MasterId>,
    },
    Candidate {
        granted: BTreeSet<MasterId>,
    },
    Leader {
        next_seq: u64,
        round: u64,
        round_sent: BTreeMap<u64, u64>,
        peers: BTreeMap<MasterId, Peer>,
        proposals: BTreeMap<Stamp, Proposal>,
        lease_until: u64,
        /// When a heartbeat last acknowledged by a majority was sent.
        quorum_contact: u64,
        next_heartbeat: u64,
    },
}

/// One master's protocol state. See the module docs.
pub struct Replica {
    id: MasterId,
    peers: Vec<MasterId>,
    config: Config,
    durable: Durable,
    role: Role,
    rng: ChaCha8Rng,
    election_deadline: u64,
    /// Last time a leader of the current term was heard (followers), or the
    /// restart time: no vote is granted within `election_min_ms` of it.
    leader_contact: u64,
    last_heard: BTreeMap<MasterId, u64>,
    out: Output,
}

impl Replica {
    /// A master starting (or restarting) at `now` with what it persisted.
    /// `seed` draws its election timeouts.
    pub fn new(id: MasterId, peers: Vec<MasterId>, config: Config, durable: Durable, now: u64, seed: u64) -> Self {
        assert!(
            config.lease_ms < config.election_min_ms && config.election_min_ms < config.election_max_ms,
            "lease < election_min < election_max"
        );
        let peers: Vec<MasterId> = peers.into_iter().filter(|p| *p != id).collect();
        let mut replica = Replica {
            id,
            peers,
            config,
            durable,
            role: Role::Follower { leader: None },
            rng: ChaCha8Rng::seed_from_u64(seed),
            election_deadline: 0,
            leader_contact: now,
            last_heard: BTreeMap::new(),
            out: Output::default(),
        };
        // A lone master need not wait for anyone.
        replica.election_deadline = if replica.peers.is_empty() {
            now
        } else {
            replica.random_deadline(now)
        };
        replica
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn durable(&self) -> &Durable {
        &self.durable
    }

    pub fn state(&self) -> &ReplicatedState {
        &self.durable.state
    }

    pub fn term(&self) -> u64 {
        self.durable.term
    }

    /// A majority of all masters (this one included).
    pub fn majority(&self) -> usize {
        let masters = self.peers.len() + 1;
        masters / 2 + 1
    }

    /// Whether this master may decide now: it leads and holds its lease.
    pub fn is_leader(&self, now: u64) -> bool {
        matches!(self.role, Role::Leader { lease_until, .. } if lease_until > now)
    }

    /// The leader this master follows (itself when leading), if known.
    pub fn leader(&self) -> Option<&str> {
        match &self.role {
            Role::Follower { leader } => leader.as_deref(),
            Role::Leader { .. } => Some(&self.id),
            _ => None,
        }
    }

    pub fn role(&self) -> RoleName {
        match self.role {
            Role::Follower { .. } => RoleName::Follower,
            Role::PreCandidate { .. } => RoleName::PreCandidate,
            Role::Candidate { .. } => RoleName::Candidate,
            Role::Leader { .. } => RoleName::Leader,
        }
    }

    pub fn status(&self, now: u64) -> Status {
        let recent = |t: u64| t + self.config.election_min_ms > now;
        let has_quorum = match &self.role {
            Role::Leader { .. } => self.is_leader(now),
            Role::Follower { leader: Some(_) } => recent(self.leader_contact),
            _ => false,
        };
        Status {
            id: self.id.clone(),
            role: self.role(),
            term: self.durable.term,
            leader: self.leader().map(str::to_string),
            has_quorum,
            reachable: self
                .peers
                .iter()
                .filter(|p| self.last_heard.get(*p).is_some_and(|t| recent(*t)))
                .cloned()
                .collect(),
            version: self.durable.state.version(),
            entries: self.durable.state.len(),
            digest: self.durable.state.digest(),
        }
    }

    /// Takes what the last inputs asked for.
    pub fn take_output(&mut self) -> Output {
        std::mem::take(&mut self.out)
    }

    fn random_deadline(&mut self, now: u64) -> u64 {
        now + self
            .rng
            .random_range(self.config.election_min_ms..self.config.election_max_ms)
    }

    fn send(&mut self, to: &str, message: Message) {
        self.out.send.push((to.to_string(), message));
    }

    fn broadcast(&mut self, message: Message) {
        for p in self.peers.clone() {
            self.send(&p, message.clone());
        }
    }

    /// A newer term seen: adopt it and follow (nobody yet).
    fn adopt_term(&mut self, term: u64) {
        if term > self.durable.term {
            self.durable.term = term;
            self.durable.voted_for = None;
            self.out.persist = true;
            self.step_down(None);
        }
    }

    fn step_down(&mut self, leader: Option<MasterId>) {
        if let Role::Leader { proposals, .. } = std::mem::replace(&mut self.role, Role::Follower { leader: None }) {
            for stamp in proposals.into_keys() {
                self.out.completed.push((stamp, Err(QuorumError::LeadershipLost)));
            }
        }
        self.role = Role::Follower { leader };
    }

    /// Advances timers: elections, heartbeats, lease checks, proposal timeouts.
    pub fn tick(&mut self, now: u64) {
        match &self.role {
            Role::Leader { .. } => self.leader_tick(now),
            _ if now >= self.election_deadline => self.start_pre_vote(now),
            _ => {}
        }
    }

    fn start_pre_vote(&mut self, now: u64) {
        self.election_deadline = self.random_deadline(now);
        let granted = BTreeSet::from([self.id.clone()]);
        self.role = Role::PreCandidate { granted };
        let term = self.durable.term + 1;
        self.broadcast(Message::PreVote { term });
        self.maybe_win_pre_vote(now);
    }

    fn maybe_win_pre_vote(&mut self, now: u64) {
        if matches!(&self.role, Role::PreCandidate { granted } if granted.len() >= self.majority()) {
            self.start_election(now);
        }
    }

    fn start_election(&mut self, now: u64) {
        self.durable.term += 1;
        self.durable.voted_for = Some(self.id.clone());
        self.out.persist = true;
        self.election_deadline = self.random_deadline(now);
        self.role = Role::Candidate {
            granted: BTreeSet::from([self.id.clone()]),
        };
        let term = self.durable.term;
        self.broadcast(Message::RequestVote { term });
        self.maybe_win_election(now);
    }

    fn maybe_win_election(&mut self, now: u64) {
        if !matches!(&self.role, Role::Candidate { granted } if granted.len() >= self.majority()) {
            return;
        }
        let peers = self.peers.iter().map(|p| (p.clone(), Peer::default())).collect();
        self.role = Role::Leader {
            next_seq: 1,
            round: 0,
            round_sent: BTreeMap::new(),
            peers,
            proposals: BTreeMap::new(),
            lease_until: 0,
            quorum_contact: now,
            next_heartbeat: now,
        };
        self.leader_tick(now);
    }

    /// Whether this master would vote for someone else now: not while it
    /// hears from a leader (or holds a lease), nor just after a restart.
    fn refuses_votes(&self, now: u64) -> bool {
        match &self.role {
            Role::Leader { .. } => true,
            _ => self.leader_contact + self.config.election_min_ms > now,
        }
    }

    /// A message from peer `from` at `now`.
    pub fn handle(&mut self, now: u64, from: &str, message: Message) {
        if !self.peers.iter().any(|p| p == from) {
            return; // not a member: ignore
        }
        self.last_heard.insert(from.to_string(), now);
        match message {
            Message::PreVote { term } => {
                let granted = term > self.durable.term && !self.refuses_votes(now);
                let term = self.durable.term;
                self.send(from, Message::PreVoted { term, granted });
            }
            Message::PreVoted { term, granted } => {
                if term > self.durable.term {
                    self.adopt_term(term);
                    return;
                }
                if let Role::PreCandidate { granted: set } = &mut self.role
                    && granted
                {
                    set.insert(from.to_string());
                    self.maybe_win_pre_vote(now);
                }
            }
            Message::RequestVote { term } => {
                if term < self.durable.term || self.refuses_votes(now) {
                    let term = self.durable.term;
                    self.send(
                        from,
                        Message::Vote {
                            term,
                            granted: false,
                            state: None,
                        },
                    );
                    return;
                }
                self.adopt_term(term);
                let granted = match &self.durable.voted_for {
                    None => true,
                    Some(v) => v == from,
                };
                if granted {
                    self.durable.voted_for = Some(from.to_string());
                    self.out.persist = true;
                    self.election_deadline = self.random_deadline(now);
                }
                let state = granted.then(|| self.durable.state.clone());
                self.send(from, Message::Vote { term, granted, state });
            }
            Message::Vote { term, granted, state } => {
                if term > self.durable.term {
                    self.adopt_term(term);
                    return;
                }
                if term == self.durable.term
                    && granted
                    && let Role::Candidate { granted: set } = &mut self.role
                {
                    set.insert(from.to_string());
                    if let Some(state) = state
                        && self.durable.state.merge(state)
                    {
                        self.out.persist = true;
                    }
                    self.maybe_win_election(now);
                }
            }
            Message::Append {
                term,
                round,
                delta,
                full: _,
                digest,
            } => self.on_append(now, from, term, round, delta, digest),
            Message::Appended {
                term,
                round,
                ok,
                held,
                state,
            } => {
                if term > self.durable.term {
                    self.adopt_term(term);
                    return;
                }
                if ok && term == self.durable.term {
                    self.on_appended(from, round, held, state);
                }
            }
        }
    }

    fn on_append(&mut self, now: u64, from: &str, term: u64, round: u64, delta: ReplicatedState, digest: u64) {
        if term < self.durable.term {
            let term = self.durable.term;
            self.send(
                from,
                Message::Appended {
                    term,
                    round,
                    ok: false,
                    held: Vec::new(),
                    state: None,
                },
            );
            return;
        }
        self.adopt_term(term);
        debug_assert!(
            !matches!(self.role, Role::Leader { .. }),
            "two leaders in term {term}: {} and {from}",
            self.id
        );
        self.step_down(Some(from.to_string()));
        self.leader_contact = now;
        self.election_deadline = self.random_deadline(now);
        let keys: Vec<String> = delta.registers().map(|(k, _)| k.to_string()).collect();
        if self.durable.state.merge(delta) {
            self.out.persist = true;
        }
        let held = keys
            .into_iter()
            .filter_map(|k| {
                let stamp = self.durable.state.register(&k)?.marker;
                Some((k, stamp))
            })
            .collect();
        let state = (self.durable.state.digest() != digest).then(|| self.durable.state.clone());
        self.send(
            from,
            Message::Appended {
                term,
                round,
                ok: true,
                held,
                state,
            },
        );
    }

    fn on_appended(&mut self, from: &str, round: u64, held: Vec<(String, Stamp)>, state: Option<ReplicatedState>) {
        let differed = state.is_some();
        if let Some(state) = state
            && self.durable.state.merge(state)
        {
            self.out.persist = true;
        }
        let Role::Leader { peers, proposals, .. } = &mut self.role else {
            return;
        };
        let Some(peer) = peers.get_mut(from) else { return };
        peer.acked_round = peer.acked_round.max(round);
        for (key, stamp) in &held {
            if peer.pending.get(key).is_some_and(|p| p <= stamp) {
                peer.pending.remove(key);
            }
        }
        // The peer's state differed from ours: send it ours whole next (now
        // that its registers are merged into ours).
        if differed {
            peer.full = true;
        }
        for (stamp, proposal) in proposals.iter_mut() {
            for (key, held_stamp) in &held {
                if held_stamp >= stamp && proposal.keys.contains(key) {
                    proposal.held.entry(from.to_string()).or_default().insert(key.clone());
                }
            }
        }
        self.settle();
    }

    /// Recomputes the lease and completes proposals a majority holds.
    fn settle(&mut self) {
        let majority = self.majority();
        let lease_ms = self.config.lease_ms;
        let Role::Leader {
            round,
            round_sent,
            peers,
            proposals,
            lease_until,
            quorum_contact,
            ..
        } = &mut self.role
        else {
            return;
        };
        // The newest round a majority (this master included) acknowledged.
        let mut rounds: Vec<u64> = peers.values().map(|p| p.acked_round).collect();
        rounds.push(*round);
        rounds.sort_unstable_by(|a, b| b.cmp(a));
        let quorum_round = rounds[majority - 1];
        if let Some(sent) = round_sent.get(&quorum_round) {
            *lease_until = (*lease_until).max(sent + lease_ms);
            *quorum_contact = (*quorum_contact).max(*sent);
        }
        // Forget rounds older than the quorum's: they cannot extend the lease.
        while round_sent.first_key_value().is_some_and(|(r, _)| *r < quorum_round) {
            round_sent.pop_first();
        }
        let id = &self.id;
        let done: Vec<Stamp> = proposals
            .iter()
            .filter(|(_, p)| {
                1 + p
                    .held
                    .iter()
                    .filter(|(m, keys)| *m != id && keys.len() == p.keys.len())
                    .count()
                    >= majority
            })
            .map(|(s, _)| *s)
            .collect();
        for stamp in done {
            proposals.remove(&stamp);
            self.out.completed.push((stamp, Ok(())));
        }
    }

    fn leader_tick(&mut self, now: u64) {
        let (election_min, proposal_timeout) = (self.config.election_min_ms, self.config.proposal_timeout_ms);
        let heartbeat_ms = self.config.heartbeat_ms;
        let Role::Leader {
            proposals,
            quorum_contact,
            next_heartbeat,
            ..
        } = &mut self.role
        else {
            return;
        };
        let expired: Vec<Stamp> = proposals
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(s, _)| *s)
            .collect();
        for stamp in expired {
            proposals.remove(&stamp);
            self.out
                .completed
                .push((stamp, Err(QuorumError::Timeout { ms: proposal_timeout })));
        }
        if *quorum_contact + election_min <= now {
            // No majority for an election timeout: stop claiming to lead.
            self.step_down(None);
            self.election_deadline = self.random_deadline(now);
            return;
        }
        if now >= *next_heartbeat {
            *next_heartbeat = now + heartbeat_ms;
            self.send_round(now);
        }
    }

    /// Sends every peer what it has not acknowledged (or everything), with a
    /// new round number for the lease.
    fn send_round(&mut self, now: u64) {
        let term = self.durable.term;
        let digest = self.durable.state.digest();
        let Role::Leader {
            round,
            round_sent,
            peers,
            ..
        } = &mut self.role
        else {
            return;
        };
        *round += 1;
        round_sent.insert(*round, now);
        let round = *round;
        let mut messages = Vec::with_capacity(peers.len());
        for (id, peer) in peers.iter_mut() {
            let full = std::mem::take(&mut peer.full);
            let delta = if full {
                self.durable.state.clone()
            } else {
                self.durable.state.delta(peer.pending.keys().map(String::as_str))
            };
            messages.push((
                id.clone(),
                Message::Append {
                    term,
                    round,
                    delta,
                    full,
                    digest,
                },
            ));
        }
        self.out.send.extend(messages);
        self.settle();
    }

    /// Proposes writes (`None` deletes a key) as one change with one stamp.
    /// Only the leader accepts; the change completes (in
    /// [`Output::completed`]) once a majority holds it.
    pub fn propose(&mut self, now: u64, writes: Vec<(String, Option<String>)>) -> Result<Stamp, QuorumError> {
        let max_pending = self.config.max_pending;
        let deadline = now + self.config.proposal_timeout_ms;
        let term = self.durable.term;
        let Role::Leader {
            next_seq,
            peers,
            proposals,
            ..
        } = &mut self.role
        else {
            return Err(QuorumError::NotLeader {
                leader: self.leader().map(str::to_string),
            });
        };
        if proposals.len() >= max_pending {
            return Err(QuorumError::Busy {
                pending: proposals.len(),
            });
        }
        let stamp = Stamp { term, seq: *next_seq };
        *next_seq += 1;
        let mut keys = Vec::with_capacity(writes.len());
        for (key, value) in writes {
            self.durable.state.write(&key, value, stamp);
            for peer in peers.values_mut() {
                peer.pending.insert(key.clone(), stamp);
            }
            keys.push(key);
        }
        proposals.insert(
            stamp,
            Proposal {
                keys,
                held: BTreeMap::new(),
                deadline,
            },
        );
        self.out.persist = true;
        // Send now rather than at the next heartbeat: a statement waits for it.
        self.send_round(now);
        Ok(stamp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Masters connected by hand: `deliver` moves every message sent so far
    /// (except to or from the `cut` ones) and repeats until none is left.
    struct Net {
        masters: BTreeMap<MasterId, Replica>,
        cut: BTreeSet<MasterId>,
        acked: Vec<Stamp>,
    }

    fn config() -> Config {
        Config {
            max_pending: 4,
            ..Config::quick()
        }
    }

    impl Net {
        fn new(n: usize) -> Net {
            let ids: Vec<MasterId> = (1..=n).map(|i| format!("m{i}")).collect();
            let masters = ids
                .iter()
                .enumerate()
                .map(|(i, id)| {
                    let replica = Replica::new(id.clone(), ids.clone(), config(), Durable::default(), 0, i as u64);
                    (id.clone(), replica)
                })
                .collect();
            Net {
                masters,
                cut: BTreeSet::new(),
                acked: Vec::new(),
            }
        }

        fn m(&mut self, id: &str) -> &mut Replica {
            self.masters.get_mut(id).unwrap()
        }

        fn deliver(&mut self, now: u64) {
            loop {
                let mut sent = Vec::new();
                for (id, r) in self.masters.iter_mut() {
                    let out = r.take_output();
                    for (stamp, result) in out.completed {
                        if result.is_ok() {
                            self.acked.push(stamp);
                        }
                    }
                    for (to, m) in out.send {
                        if !self.cut.contains(id) && !self.cut.contains(&to) {
                            sent.push((id.clone(), to, m));
                        }
                    }
                }
                if sent.is_empty() {
                    return;
                }
                for (from, to, m) in sent {
                    if let Some(r) = self.masters.get_mut(&to) {
                        r.handle(now, &from, m);
                    }
                }
            }
        }

        /// Ticks everyone every 10 ms from `from` to `to`.
        fn run(&mut self, from: u64, to: u64) {
            let mut now = from;
            while now <= to {
                for r in self.masters.values_mut() {
                    r.tick(now);
                }
                self.deliver(now);
                now += 10;
            }
        }

        fn leaders(&self, now: u64) -> Vec<MasterId> {
            self.masters
                .iter()
                .filter(|(_, r)| r.is_leader(now))
                .map(|(id, _)| id.clone())
                .collect()
        }
    }

    #[test]
    fn a_lone_master_leads_at_once_and_commits_alone() {
        let mut net = Net::new(1);
        net.run(0, 0);
        assert!(net.m("m1").is_leader(0));
        let stamp = net.m("m1").propose(0, vec![("k".into(), Some("v".into()))]).unwrap();
        net.deliver(0);
        assert_eq!(net.acked, [stamp]);
        assert_eq!(net.m("m1").state().get("k"), Some("v"));
    }

    #[test]
    fn three_masters_elect_one_leader_and_a_write_needs_a_second_master() {
        let mut net = Net::new(3);
        net.run(0, 1000);
        let leaders = net.leaders(1000);
        assert_eq!(leaders.len(), 1, "{leaders:?}");
        let leader = leaders[0].clone();
        let followers: Vec<MasterId> = net.masters.keys().filter(|m| **m != leader).cloned().collect();
        assert_eq!(net.m(&followers[0]).leader(), Some(leader.as_str()));
        assert_eq!(
            net.m(&followers[0]).propose(1000, vec![("k".into(), None)]),
            Err(QuorumError::NotLeader {
                leader: Some(leader.clone())
            })
        );
        // With both followers cut off, the write waits; one back is enough.
        net.cut.extend(followers.iter().cloned());
        let stamp = net
            .m(&leader)
            .propose(1000, vec![("k".into(), Some("v".into()))])
            .unwrap();
        net.deliver(1000);
        assert!(net.acked.is_empty(), "acknowledged by the leader alone");
        net.cut.remove(&followers[0]);
        net.run(1010, 1100);
        assert_eq!(net.acked, [stamp]);
        assert_eq!(net.m(&followers[0]).state().get("k"), Some("v"));
    }

    #[test]
    fn a_leader_cut_off_from_the_majority_loses_its_lease_then_steps_down() {
        let mut net = Net::new(3);
        net.run(0, 1000);
        let leader = net.leaders(1000)[0].clone();
        net.cut.insert(leader.clone());
        net.run(1010, 1250);
        assert!(
            !net.m(&leader).is_leader(1250),
            "the lease outlived the majority's last word"
        );
        net.run(1260, 2500);
        let status = net.m(&leader).status(2500);
        assert_ne!(status.role, RoleName::Leader);
        assert!(!status.has_quorum);
        assert!(status.reachable.is_empty());
        assert_eq!(
            net.m(&leader).propose(2500, vec![("k".into(), None)]),
            Err(QuorumError::NotLeader { leader: None })
        );
        // The other two elected a new leader in a newer term, and the cut
        // master, still pre-voting, did not raise its own term meanwhile.
        let new = net.leaders(2500);
        assert_eq!(new.len(), 1);
        assert_ne!(new[0], leader);
        let new_term = net.m(&new[0]).term();
        assert_eq!(net.m(&leader).term() + 1, new_term);
        // Healed: it follows the new leader without disturbing it.
        net.cut.clear();
        net.run(2510, 3500);
        assert_eq!(net.leaders(3500), new);
        assert_eq!(net.m(&new[0]).term(), new_term);
        assert_eq!(net.m(&leader).leader(), Some(new[0].as_str()));
    }

    #[test]
    fn a_paused_leader_wakes_without_a_lease_and_its_old_term_is_refused() {
        let mut net = Net::new(3);
        net.run(0, 1000);
        let old = net.leaders(1000)[0].clone();
        let mut paused = net.masters.remove(&old).unwrap();
        // The others elect a new leader while it sleeps (not ticked).
        let mut now = 1010;
        while now <= 3000 {
            for r in net.masters.values_mut() {
                r.tick(now);
            }
            // Messages to the sleeping master are lost (`deliver` drops
            // messages to masters not in the net).
            net.deliver(now);
            now += 10;
        }
        let new = net.leaders(3000);
        assert_eq!(new.len(), 1);
        // It wakes: no lease, whatever it believed when it stopped.
        assert!(!paused.is_leader(20_000));
        // A write it sent before it noticed is refused by a newer term, and
        // the refusal makes it follow.
        let stale = Message::Append {
            term: paused.term(),
            round: 99,
            delta: ReplicatedState::default(),
            full: false,
            digest: 0,
        };
        let follower = net.masters.keys().find(|m| **m != new[0]).unwrap().clone();
        net.m(&follower).handle(3000, &old, stale);
        let out = net.m(&follower).take_output();
        let (_, reply) = &out.send[0];
        assert!(matches!(reply, Message::Appended { ok: false, .. }), "{reply:?}");
        paused.handle(20_000, &follower, reply.clone());
        assert_eq!(paused.role(), RoleName::Follower);
        assert_eq!(paused.term(), net.m(&new[0]).term());
    }

    #[test]
    fn proposals_beyond_the_bound_are_refused_and_a_lost_majority_times_them_out() {
        let mut net = Net::new(3);
        net.run(0, 1000);
        let leader = net.leaders(1000)[0].clone();
        let others: Vec<MasterId> = net.masters.keys().filter(|m| **m != leader).cloned().collect();
        net.cut.extend(others);
        for i in 0..4 {
            net.m(&leader).propose(1000, vec![(format!("k{i}"), None)]).unwrap();
        }
        assert_eq!(
            net.m(&leader).propose(1000, vec![("k9".into(), None)]),
            Err(QuorumError::Busy { pending: 4 })
        );
        net.m(&leader).take_output();
        // Steps down after the election timeout (300 ms) without a majority:
        // the waiting proposals fail as "outcome unknown".
        net.m(&leader).tick(1400);
        let out = net.m(&leader).take_output();
        assert_eq!(out.completed.len(), 4);
        assert!(
            out.completed
                .iter()
                .all(|(_, r)| *r == Err(QuorumError::LeadershipLost))
        );
    }
}
