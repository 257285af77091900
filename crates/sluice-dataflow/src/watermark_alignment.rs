//! Watermark alignment between the instances of one source (as Flink's
//! FLIP-182 "watermark alignment").
//!
//! Every instance of a source reads its own partitions at its own pace. A
//! downstream window or join keeps the *lowest* of its inputs' watermarks, so
//! when one instance runs ahead in event time, everything it sends waits in
//! that operator's state until the slowest instance catches up: the skew
//! between instances, not the data, decides how much state is held. Left
//! alone the skew is unbounded (two unpaced generator instances drifted
//! 660 s of event time apart in 14 s, and a HOP window held a million
//! groups).
//!
//! An [`AlignmentGroup`] bounds it: each instance publishes its watermark,
//! and an instance whose watermark is more than `max_drift` ahead of the
//! lowest *counting* sibling stops reading until it no longer is. Instances
//! that are idle, ended or have no watermark yet do not count (they would
//! otherwise stall the others forever); the instance with the lowest
//! watermark is never held back, so the group always makes progress. A held
//! instance still injects barriers and honours cancel (see
//! [`crate::source::SourceTask`]).
//!
//! The group is shared memory: the slots are plain atomics, so a publish
//! costs a store and a load, and the mutex inside [`Notify`] is touched only
//! while an instance is held. When a source's instances run on several
//! workers, each worker's part keeps a group of all instances
//! ([`SplitAlignment`]): its own instances publish into it as above, and the
//! worker copies the others' published watermarks in from the master, which
//! relays every worker's every [`SPLIT_REPORT_INTERVAL`] (as Flink's source
//! coordinator does every `update-interval`). A remote slot is therefore up
//! to about two intervals stale; stale means *lower* (watermarks only rise),
//! so staleness holds an instance back a little longer, never lets it run
//! further ahead than `max_drift`.

use sluice_types::OperatorId;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;

/// A slot's value while its instance does not count.
const NOT_COUNTING: i64 = i64::MAX;

/// The published watermarks of a source's instances.
#[derive(Debug)]
pub struct AlignmentGroup {
    max_drift_ms: i64,
    slots: Box<[AtomicI64]>,
    /// Instances waiting to be released (a publish notifies only then).
    waiting: AtomicUsize,
    notify: Notify,
}

impl AlignmentGroup {
    /// A group of `instances` instances, none counting yet.
    pub fn new(instances: usize, max_drift: Duration) -> Arc<Self> {
        Arc::new(AlignmentGroup {
            max_drift_ms: i64::try_from(max_drift.as_millis()).unwrap_or(i64::MAX),
            slots: (0..instances).map(|_| AtomicI64::new(NOT_COUNTING)).collect(),
            waiting: AtomicUsize::new(0),
            notify: Notify::new(),
        })
    }

    /// Instance `instance` now has watermark `watermark` (ms), or does not
    /// count (`None`: idle, ended, or no watermark yet).
    pub fn publish(&self, instance: usize, watermark: Option<i64>) {
        let value = watermark.map_or(NOT_COUNTING, |w| w.min(NOT_COUNTING - 1));
        let old = self.slots[instance].swap(value, Ordering::SeqCst);
        // Pairs with `Hold::new`: either the waiter sees this store, or
        // this load sees the waiter (both sequentially consistent).
        if old != value && self.waiting.load(Ordering::SeqCst) > 0 {
            self.notify.notify_waiters();
        }
    }

    /// What instance `instance` last published (`None`: it does not count).
    pub fn published(&self, instance: usize) -> Option<i64> {
        let value = self.slots.get(instance)?.load(Ordering::SeqCst);
        (value != NOT_COUNTING).then_some(value)
    }

    /// The number of instances in the group.
    pub fn instances(&self) -> usize {
        self.slots.len()
    }

    /// The highest watermark `instance` may have and still read: the lowest
    /// counting sibling's watermark plus the maximum drift; `None` when no
    /// sibling counts.
    pub fn ceiling(&self, instance: usize) -> Option<i64> {
        let low = self
            .slots
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != instance)
            .map(|(_, s)| s.load(Ordering::SeqCst))
            .min()
            .filter(|w| *w != NOT_COUNTING)?;
        Some(low.saturating_add(self.max_drift_ms))
    }

    /// Whether `instance`, at watermark `watermark` (`None`: it has none),
    /// may read now.
    pub fn may_read(&self, instance: usize, watermark: Option<i64>) -> bool {
        match (watermark, self.ceiling(instance)) {
            (Some(w), Some(ceiling)) => w <= ceiling,
            _ => true,
        }
    }

    /// Registers a waiter: the returned hold's [`Hold::released`] completes
    /// after any later publish. Check [`AlignmentGroup::may_read`] after
    /// taking it (not before), so no publish in between is missed.
    pub fn hold(&self) -> Hold<'_> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut notified = Box::pin(self.notify.notified());
        notified.as_mut().enable();
        Hold { group: self, notified }
    }
}

/// How often a worker reports its instances' watermarks of a
/// [`SplitAlignment`] (when they changed; every tenth report carries them
/// all, for a worker that missed one).
pub const SPLIT_REPORT_INTERVAL: Duration = Duration::from_millis(100);

/// An alignment group of a source whose instances run on several workers,
/// as one worker's part holds it.
#[derive(Debug, Clone)]
pub struct SplitAlignment {
    pub operator: OperatorId,
    pub group: Arc<AlignmentGroup>,
    /// The instances this part runs: they publish themselves; the others'
    /// slots are written by [`SplitAlignment::apply_remote`].
    pub local: Vec<u32>,
}

impl SplitAlignment {
    /// This part's instances and what they published (`None`: not counting).
    pub fn local_watermarks(&self) -> Vec<(u32, Option<i64>)> {
        self.local
            .iter()
            .map(|&i| (i, self.group.published(i as usize)))
            .collect()
    }

    /// Another worker's instance `instance` published `watermark`. Ignored
    /// for this part's own instances (they speak for themselves) and for
    /// instances the group does not have (a malformed report).
    pub fn apply_remote(&self, instance: u32, watermark: Option<i64>) {
        if (instance as usize) < self.group.instances() && !self.local.contains(&instance) {
            self.group.publish(instance as usize, watermark);
        }
    }
}

/// A registered wait for the next publish (see [`AlignmentGroup::hold`]).
pub struct Hold<'a> {
    group: &'a AlignmentGroup,
    notified: std::pin::Pin<Box<Notified<'a>>>,
}

impl Hold<'_> {
    /// Completes once a sibling published after this hold was taken.
    pub async fn released(&mut self) {
        self.notified.as_mut().await;
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.group.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_ahead_of_the_slowest_by_more_than_the_drift_is_held() {
        let g = AlignmentGroup::new(3, Duration::from_millis(1_000));
        g.publish(0, Some(10_000));
        g.publish(1, Some(10_500));
        g.publish(2, Some(11_001));
        assert!(g.may_read(0, Some(10_000)), "the slowest is never held");
        assert!(g.may_read(1, Some(10_500)));
        assert!(!g.may_read(2, Some(11_001)), "1 001 ms ahead of instance 0");
        assert!(g.may_read(2, Some(11_000)), "exactly the drift is allowed");
        g.publish(0, Some(10_001));
        assert!(g.may_read(2, Some(11_001)));
    }

    #[test]
    fn idle_and_unstarted_instances_do_not_count() {
        let g = AlignmentGroup::new(3, Duration::from_millis(100));
        assert!(g.may_read(0, Some(1_000_000)), "no sibling has a watermark yet");
        g.publish(1, Some(0));
        assert!(!g.may_read(0, Some(1_000)));
        g.publish(1, None);
        assert!(g.may_read(0, Some(1_000)), "instance 1 went idle");
        assert!(g.may_read(0, None), "an instance without a watermark is never held");
        g.publish(2, Some(950));
        assert!(!g.may_read(0, Some(1_051)));
        assert_eq!(g.ceiling(0), Some(1_050));
        assert_eq!(g.ceiling(2), None, "instance 0 never published");
    }

    #[test]
    fn a_single_instance_group_never_holds() {
        let g = AlignmentGroup::new(1, Duration::ZERO);
        g.publish(0, Some(5));
        assert!(g.may_read(0, Some(i64::MAX - 1)));
    }

    #[test]
    fn a_split_group_takes_remote_instances_only_from_reports() {
        let split = SplitAlignment {
            operator: OperatorId(3),
            group: AlignmentGroup::new(3, Duration::from_millis(1_000)),
            local: vec![0],
        };
        split.group.publish(0, Some(50_000));
        assert_eq!(split.local_watermarks(), vec![(0, Some(50_000))]);
        split.apply_remote(0, Some(1));
        assert_eq!(
            split.group.published(0),
            Some(50_000),
            "a report never overwrites a local instance"
        );
        split.apply_remote(7, Some(1));
        assert!(
            split.group.may_read(0, Some(50_000)),
            "no remote report yet: nothing to align with"
        );
        split.apply_remote(1, Some(10_000));
        assert!(
            !split.group.may_read(0, Some(50_000)),
            "40 s ahead of remote instance 1"
        );
        split.apply_remote(1, None);
        assert!(split.group.may_read(0, Some(50_000)), "instance 1 went idle");
        split.apply_remote(2, Some(49_000));
        assert!(split.group.may_read(0, Some(50_000)));
        assert_eq!(split.group.published(2), Some(49_000));
    }

    #[tokio::test]
    async fn a_held_instance_is_released_by_a_sibling_publish() {
        let g = AlignmentGroup::new(2, Duration::from_millis(10));
        g.publish(0, Some(0));
        let waiter = {
            let g = g.clone();
            tokio::spawn(async move {
                loop {
                    let mut hold = g.hold();
                    if g.may_read(1, Some(100)) {
                        return;
                    }
                    hold.released().await;
                }
            })
        };
        for w in [20, 50, 80] {
            tokio::task::yield_now().await;
            g.publish(0, Some(w));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "still 20 ms ahead");
        g.publish(0, Some(90));
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("released")
            .unwrap();
        assert_eq!(g.waiting.load(Ordering::SeqCst), 0, "holds deregister on drop");
    }
}
