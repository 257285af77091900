//! A follower's copies of the views' rows it took from the leader
//! ([`crate::replication::QuorumCatalog`]): each with the leader and the
//! publication it is of, so the next read of the view asks the leader only
//! whether that publication is still current and, when it is, answers from
//! the copy instead of taking the rows again. At most
//! [`crate::replication::LEADER_VIEW_BYTES_MAX`] bytes of rows (as the
//! leader encoded them) are held in all; the copy used longest ago goes
//! first.

use sluice_connectors::views::PublishedView;
use std::collections::HashMap;

struct Copy {
    leader: String,
    publication: u64,
    view: PublishedView,
    bytes: usize,
    used: u64,
}

/// The copies, and how reads were answered.
pub struct ViewCache {
    copies: HashMap<String, Copy>,
    bytes: usize,
    bytes_max: usize,
    clock: u64,
    /// Reads answered with rows taken from the leader, and from a copy.
    pub fetched: u64,
    pub reused: u64,
}

impl ViewCache {
    pub fn new(bytes_max: usize) -> Self {
        ViewCache {
            copies: HashMap::new(),
            bytes: 0,
            bytes_max,
            clock: 0,
            fetched: 0,
            reused: 0,
        }
    }

    /// The publication of view `name` held as `leader` published it (0:
    /// none), for the request.
    pub fn known(&self, name: &str, leader: &str) -> u64 {
        self.copies
            .get(name)
            .filter(|c| c.leader == leader)
            .map_or(0, |c| c.publication)
    }

    /// The leader said publication `publication` of view `name` is still
    /// current: the copy, if it is that one.
    pub fn reuse(&mut self, name: &str, leader: &str, publication: u64) -> Option<PublishedView> {
        self.clock += 1;
        let copy = self
            .copies
            .get_mut(name)
            .filter(|c| c.leader == leader && c.publication == publication)?;
        copy.used = self.clock;
        self.reused += 1;
        Some(copy.view.clone())
    }

    /// Rows of view `name` taken from `leader` (`bytes` as it encoded
    /// them): held in place of any older copy, the least recently used
    /// others going while the copies pass the bound. A view bigger than
    /// the bound is not held.
    pub fn took(&mut self, name: &str, leader: &str, publication: u64, view: &PublishedView, bytes: usize) {
        self.clock += 1;
        self.fetched += 1;
        if let Some(old) = self.copies.remove(name) {
            self.bytes -= old.bytes;
        }
        if bytes > self.bytes_max {
            return;
        }
        while self.bytes + bytes > self.bytes_max {
            let Some(oldest) = self.copies.iter().min_by_key(|(_, c)| c.used).map(|(n, _)| n.clone()) else {
                break;
            };
            let gone = self.copies.remove(&oldest).expect("found above");
            self.bytes -= gone.bytes;
        }
        self.bytes += bytes;
        self.copies.insert(
            name.to_string(),
            Copy {
                leader: leader.to_string(),
                publication,
                view: view.clone(),
                bytes,
                used: self.clock,
            },
        );
    }

    /// Bytes of rows held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;
    use std::sync::Arc;

    fn view(rows: i64) -> PublishedView {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from_iter_values(0..rows))]).unwrap();
        PublishedView::new(schema, vec![batch], None, 0)
    }

    #[test]
    fn a_copy_answers_only_for_its_leader_and_publication() {
        let mut c = ViewCache::new(1000);
        assert_eq!(c.known("v", "m1"), 0, "nothing held");
        c.took("v", "m1", 7, &view(3), 100);
        assert_eq!(c.known("v", "m1"), 7);
        assert_eq!(c.known("v", "m2"), 0, "another leader's publications are not these");
        assert!(c.reuse("v", "m1", 8).is_none(), "a newer publication: take the rows");
        assert!(c.reuse("v", "m2", 7).is_none());
        assert_eq!(c.reuse("v", "m1", 7).unwrap().num_rows(), 3);
        assert_eq!((c.fetched, c.reused), (1, 1));
        // A newer publication replaces the copy.
        c.took("v", "m1", 9, &view(5), 200);
        assert_eq!(c.bytes(), 200);
        assert_eq!(c.reuse("v", "m1", 9).unwrap().num_rows(), 5);
    }

    #[test]
    fn the_copies_stay_within_their_bound_the_least_recently_used_going_first() {
        let mut c = ViewCache::new(1000);
        c.took("a", "m1", 1, &view(1), 400);
        c.took("b", "m1", 1, &view(1), 400);
        assert!(c.reuse("a", "m1", 1).is_some(), "a used after b");
        c.took("c", "m1", 1, &view(1), 400);
        assert_eq!(c.bytes(), 800, "at the bound b went");
        assert_eq!(c.known("b", "m1"), 0);
        assert_eq!(c.known("a", "m1"), 1);
        assert_eq!(c.known("c", "m1"), 1);
        // Exactly at the bound fits; past it, a view is not held at all.
        c.took("d", "m1", 1, &view(1), 1000);
        assert_eq!(c.bytes(), 1000);
        assert_eq!(c.known("d", "m1"), 1);
        c.took("e", "m1", 1, &view(1), 1001);
        assert_eq!(c.known("e", "m1"), 0);
        assert_eq!(c.bytes(), 1000);
    }
}
