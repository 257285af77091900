//! Workers under a quorum of masters: when a worker keeps the tasks it
//! runs after losing its leader, when it gives them up, and the timing a
//! leader relies on so that a task never runs on two workers at once.
//!
//! [`Fence`] is the worker's side — pure, driven by the caller's clock —
//! used by the worker process (`sluice-cluster`'s agent) and by the seeded
//! simulation (`tests/simulation.rs`), which checks it against the
//! leaders' placement rules over thousands of histories. [`Timing`] holds
//! every duration both sides use; [`Timing::check`] states the
//! inequalities that keep two copies of a task from running.
//!
//! The rules:
//!
//! - A worker obeys a master only if its term is at least the highest term
//!   the worker has followed ([`Fence::admit`], [`Fence::obey`]): a deposed
//!   leader that wakes up moves nothing.
//! - A session with a quorum leader that *breaks* (a reset: the leader
//!   died, stopped or stepped down) leaves the worker's tasks running as
//!   orphans for [`Timing::orphan_grace`], for the next leader to adopt. A
//!   session that ends in *silence* (a frozen leader, or this worker's own
//!   cable) keeps them only [`Timing::silent_orphan_grace`], and only if a
//!   leader of a newer term takes the worker in that time (then they wait
//!   [`Timing::orphan_grace`] for its claim). A master that declares the
//!   worker lost says so, and the tasks stop at once.
//! - A worker counts as hearing from its master only the master's
//!   keepalives, which a quorum leader sends only while it holds its lease
//!   (so never after another master could have been elected); a broken
//!   session's orphans live [`Timing::orphan_grace`] from the last one.
//! - A leader moves the tasks of a worker it declared dead for silence
//!   [`Timing::silent_worker_move_delay`] later, past the worker's own
//!   silent grace. A new leader places anew the tasks of a worker that has
//!   not registered with it only [`Timing::adoption_wait`] after it took
//!   the lead, past any orphan's grace: the old leader's sessions broke at
//!   the latest when it stepped down, which was before anyone could be
//!   elected in its place (its lease and the voters' election timeout).

use std::ops::Add;
use std::time::Duration;

/// The durations workers and leaders agree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Workers' heartbeats and the master's keepalives, each this often.
    pub heartbeat: Duration,
    /// A worker that hears nothing from its master this long ends the
    /// session (for silence).
    pub master_silence: Duration,
    /// A session that breaks after this long without a word from the
    /// master broke of silence (HTTP/2 pings timing out), not of a reset.
    pub quiet: Duration,
    /// How long orphans of a broken session wait for a new leader's claim.
    pub orphan_grace: Duration,
    /// How long orphans of a silent session wait for a leader of a newer
    /// term to take the worker.
    pub silent_orphan_grace: Duration,
    /// How much later than it declares a worker lost for silence a quorum
    /// leader moves its tasks.
    pub silent_worker_move_delay: Duration,
    /// How long a new leader waits for workers named in the old leader's
    /// placements before it places their tasks anew.
    pub adoption_wait: Duration,
    /// After a new leader started its pipelines, parts reported and not
    /// adopted are stopped this much later.
    pub adoption_close_after: Duration,
}

impl Timing {
    /// The timing of `sluice master` and `sluice worker`.
    pub const DEFAULT: Timing = Timing {
        heartbeat: Duration::from_secs(1),
        master_silence: Duration::from_secs(5),
        quiet: Duration::from_secs(2),
        orphan_grace: Duration::from_secs(12),
        silent_orphan_grace: Duration::from_secs(2),
        // The worker's silent grace, plus two heartbeat intervals: each
        // side's last word may be a heartbeat older than the other's.
        silent_worker_move_delay: Duration::from_secs(4),
        // An orphan's grace plus a margin for the old leader's step-down
        // to reach its workers (a tick, the leading loop's poll, a reset
        // on the wire).
        adoption_wait: Duration::from_secs(13),
        adoption_close_after: Duration::from_secs(10),
    };

    /// [`Timing::DEFAULT`] five times shorter, matching
    /// [`crate::Config::quick`] against [`crate::Config::default`].
    pub fn quick() -> Timing {
        let d = Timing::DEFAULT;
        Timing {
            heartbeat: d.heartbeat / 5,
            master_silence: d.master_silence / 5,
            quiet: d.quiet / 5,
            orphan_grace: d.orphan_grace / 5,
            silent_orphan_grace: d.silent_orphan_grace / 5,
            silent_worker_move_delay: d.silent_worker_move_delay / 5,
            adoption_wait: d.adoption_wait / 5,
            adoption_close_after: d.adoption_close_after / 5,
        }
    }

    /// How long after declaring a worker lost a leader assumes its parts
    /// may still run: after silence (no heartbeat for `worker_timeout`), its
    /// silent grace and two heartbeats — more when the timeout is shorter
    /// than the worker's own wait for its master
    /// ([`Timing::master_silence`]), which the worker's grace follows;
    /// after a session that broke or closed, an orphan's grace (and the
    /// margin) — the leader cannot tell the worker's death from a reset
    /// that left it running orphans for a new leader.
    pub fn orphans_gone_after(&self, silent: bool, worker_timeout: Duration) -> Duration {
        if silent {
            let worker_gives_up = self.master_silence + self.silent_orphan_grace + self.heartbeat * 2;
            self.silent_worker_move_delay
                .max(worker_gives_up.saturating_sub(worker_timeout))
        } else {
            self.adoption_wait
        }
    }

    /// The inequalities that keep a task from running twice; `Err` names
    /// the one broken.
    pub fn check(&self) -> Result<(), String> {
        if self.silent_worker_move_delay < self.silent_orphan_grace + self.heartbeat * 2 {
            return Err(format!(
                "a silent worker's tasks move after {:?}, before its own grace {:?} and two heartbeats",
                self.silent_worker_move_delay, self.silent_orphan_grace
            ));
        }
        if self.adoption_wait <= self.orphan_grace {
            return Err(format!(
                "a new leader places an unregistered worker's tasks after {:?}, within an orphan's grace {:?}",
                self.adoption_wait, self.orphan_grace
            ));
        }
        if self.quiet >= self.master_silence {
            return Err("a quiet break must come before the silence limit".into());
        }
        Ok(())
    }
}

impl Default for Timing {
    fn default() -> Self {
        Timing::DEFAULT
    }
}

/// How a worker's session with a master ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnd {
    /// The master let the worker go (declared it lost), or the worker
    /// refused the master: its tasks run elsewhere.
    Released,
    /// The connection broke (reset or closed) while the master spoke.
    Broken,
    /// No word from the master for [`Timing::quiet`] or more.
    Silent,
}

/// Orphans: tasks whose session ended, kept for a leader's claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Orphans<I> {
    /// Those still unclaimed stop then.
    pub until: I,
    /// Kept only if the next master that takes the worker leads a term
    /// newer than this one (the session ended in silence).
    pub newer_than: Option<u64>,
}

/// A master's answer to a registration, as the worker takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The master's term is older than one this worker followed: a
    /// deposed leader. The worker does not register with it.
    Deposed { followed: u64 },
    /// Registered; the orphans (if any) wait for this master's claim.
    Admitted,
    /// Registered, but with a master of no newer term than the silent
    /// leader's: the orphans stop (they run elsewhere).
    AdmittedStopOrphans,
}

/// A worker's fencing state, across its sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence<I> {
    /// The highest master term followed.
    term: u64,
    orphans: Option<Orphans<I>>,
}

impl<I> Default for Fence<I> {
    fn default() -> Self {
        Fence { term: 0, orphans: None }
    }
}

impl<I: Copy + Ord + Add<Duration, Output = I>> Fence<I> {
    pub fn new() -> Self {
        Self::default()
    }

    /// The highest master term followed.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The orphans' deadline and condition, while there are orphans.
    pub fn orphans(&self) -> Option<Orphans<I>> {
        self.orphans
    }

    /// A master of `term` answered the registration.
    pub fn admit(&mut self, term: u64, now: I, timing: &Timing) -> Admission {
        if term < self.term {
            return Admission::Deposed { followed: self.term };
        }
        self.term = term;
        match self.orphans {
            Some(Orphans {
                newer_than: Some(silent),
                ..
            }) => {
                if term > silent {
                    self.orphans = Some(Orphans {
                        until: now + timing.orphan_grace,
                        newer_than: None,
                    });
                    Admission::Admitted
                } else {
                    self.orphans = None;
                    Admission::AdmittedStopOrphans
                }
            }
            _ => Admission::Admitted,
        }
    }

    /// Whether a command of `term` is obeyed (it is then the term followed).
    pub fn obey(&mut self, term: u64) -> bool {
        if term < self.term {
            return false;
        }
        self.term = term;
        true
    }

    /// The session with a master of `term` (0: a single master, not a
    /// quorum) ended as `end` at `now`, the worker running some tasks
    /// (`running`), the master's last keepalive heard at `last_heard`.
    /// Returns until when they run on as orphans, or `None` when they stop
    /// now.
    ///
    /// A broken session's orphans run an orphan's grace from the last
    /// keepalive, not from the break: a leader sends keepalives only while
    /// it holds its lease, which ends before anyone else can be elected,
    /// so the orphans are gone [`Timing::adoption_wait`] after any later
    /// leader's election however late the break is noticed.
    pub fn ended(
        &mut self,
        term: u64,
        end: SessionEnd,
        running: bool,
        now: I,
        last_heard: I,
        timing: &Timing,
    ) -> Option<I> {
        self.orphans = match (running, term, end) {
            (false, ..) | (_, 0, _) | (_, _, SessionEnd::Released) => None,
            (true, _, SessionEnd::Broken) => Some(Orphans {
                until: last_heard.min(now) + timing.orphan_grace,
                newer_than: None,
            }),
            (true, term, SessionEnd::Silent) => Some(Orphans {
                until: now + timing.silent_orphan_grace,
                newer_than: Some(term),
            }),
        };
        self.orphans.map(|o| o.until)
    }

    /// How a session ended that broke at `now`, the master last heard at
    /// `last_heard`.
    pub fn broke(now: I, last_heard: I, timing: &Timing) -> SessionEnd {
        if now >= last_heard + timing.quiet {
            SessionEnd::Silent
        } else {
            SessionEnd::Broken
        }
    }

    /// Whether the unclaimed orphans are due to stop at `now`.
    pub fn orphans_due(&self, now: I) -> bool {
        self.orphans.is_some_and(|o| now >= o.until)
    }

    /// No orphan is left (all stopped or claimed).
    pub fn clear_orphans(&mut self) {
        self.orphans = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    struct Ms(u64);
    impl Add<Duration> for Ms {
        type Output = Ms;
        fn add(self, d: Duration) -> Ms {
            Ms(self.0 + d.as_millis() as u64)
        }
    }

    #[test]
    fn both_timings_keep_the_inequalities() {
        Timing::DEFAULT.check().unwrap();
        Timing::quick().check().unwrap();
        let mut short = Timing::DEFAULT;
        short.adoption_wait = short.orphan_grace;
        assert!(short.check().is_err());
        let mut early = Timing::DEFAULT;
        early.silent_worker_move_delay = early.silent_orphan_grace;
        assert!(early.check().is_err());
        // A silent worker's parts: 4 s after the default 5-s timeout, more
        // after a shorter one (the worker waits 5 s for its master).
        let t = Timing::DEFAULT;
        assert_eq!(
            t.orphans_gone_after(true, Duration::from_secs(5)),
            Duration::from_secs(4)
        );
        assert_eq!(
            t.orphans_gone_after(true, Duration::from_secs(1)),
            Duration::from_secs(8)
        );
        assert_eq!(
            t.orphans_gone_after(true, Duration::from_secs(30)),
            Duration::from_secs(4)
        );
        assert_eq!(t.orphans_gone_after(false, Duration::from_secs(1)), t.adoption_wait);
    }

    #[test]
    fn a_deposed_leader_is_neither_registered_with_nor_obeyed() {
        let t = Timing::DEFAULT;
        let mut f = Fence::<Ms>::new();
        assert_eq!(f.admit(3, Ms(0), &t), Admission::Admitted);
        assert!(f.obey(4));
        assert!(!f.obey(3));
        assert_eq!(f.admit(3, Ms(10), &t), Admission::Deposed { followed: 4 });
        assert_eq!(f.term(), 4);
    }

    #[test]
    fn orphans_of_a_broken_session_wait_the_grace_and_of_a_silent_one_need_a_newer_leader() {
        let t = Timing::DEFAULT;
        let mut f = Fence::<Ms>::new();
        f.admit(5, Ms(0), &t);
        // Broken: the grace counts from the last keepalive.
        assert_eq!(
            f.ended(5, SessionEnd::Broken, true, Ms(1500), Ms(1000), &t),
            Some(Ms(13_000))
        );
        assert!(!f.orphans_due(Ms(12_999)));
        assert!(f.orphans_due(Ms(13_000)));
        // Silence: kept 2 s, extended only by a newer term.
        assert_eq!(f.ended(5, SessionEnd::Silent, true, Ms(0), Ms(0), &t), Some(Ms(2000)));
        assert_eq!(f.admit(5, Ms(500), &t), Admission::AdmittedStopOrphans);
        assert_eq!(f.orphans(), None);
        f.ended(5, SessionEnd::Silent, true, Ms(0), Ms(0), &t);
        assert_eq!(f.admit(6, Ms(500), &t), Admission::Admitted);
        assert_eq!(f.orphans().map(|o| o.until), Some(Ms(12_500)));
        // Released, a single master, or nothing running: no orphans.
        assert_eq!(f.ended(6, SessionEnd::Released, true, Ms(0), Ms(0), &t), None);
        assert_eq!(f.ended(0, SessionEnd::Broken, true, Ms(0), Ms(0), &t), None);
        assert_eq!(f.ended(6, SessionEnd::Broken, false, Ms(0), Ms(0), &t), None);
        assert_eq!(Fence::<Ms>::broke(Ms(2000), Ms(0), &t), SessionEnd::Silent);
        assert_eq!(Fence::<Ms>::broke(Ms(1999), Ms(0), &t), SessionEnd::Broken);
    }
}
