//! The replicated cluster state: a map from keys to last-writer-wins
//! registers ([`crdts::LWWReg`]) whose markers are [`Stamp`]s.
//!
//! Only the leader of a term writes, and it numbers its writes, so a stamp
//! `(term, seq)` names one write in the whole history of the quorum
//! ([`crate::replica`] guarantees one leader per term). Later terms win over
//! earlier ones, later writes of a term over earlier ones: merging two
//! replicas' states key by key is commutative, associative and idempotent,
//! so masters can exchange deltas or whole states in any order, any number
//! of times, and converge. A deletion is a register holding `None` (a
//! tombstone): it must win over the value it deletes when the two meet, which
//! a plain removal from the map could not.
//!
//! Values are opaque strings (JSON written by the layer above: catalog
//! objects, workers, placements, checkpoint pointers). The state is small —
//! a catalog, not data — which is why anti-entropy may send it whole.

use crdts::{CvRDT, LWWReg};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

/// Which write a value came from: the leader's term and its sequence number
/// within that term. Ordered by term, then sequence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Stamp {
    pub term: u64,
    pub seq: u64,
}

impl std::fmt::Display for Stamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.term, self.seq)
    }
}

/// One key's register: its value (`None` once deleted) and the write it
/// came from.
pub type Register = LWWReg<Option<String>, Stamp>;

/// The replicated map. See the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicatedState {
    entries: BTreeMap<String, Register>,
}

impl ReplicatedState {
    /// The value of `key`, if it exists and is not deleted.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(key).and_then(|r| r.val.as_deref())
    }

    /// The register of `key`, tombstones included.
    pub fn register(&self, key: &str) -> Option<&Register> {
        self.entries.get(key)
    }

    /// Live entries (not deleted) whose key starts with `prefix`, in key order.
    pub fn scan<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.entries
            .range(prefix.to_string()..)
            .take_while(move |(k, _)| k.starts_with(prefix))
            .filter_map(|(k, r)| r.val.as_deref().map(|v| (k.as_str(), v)))
    }

    /// Every register, tombstones included.
    pub fn registers(&self) -> impl Iterator<Item = (&str, &Register)> {
        self.entries.iter().map(|(k, r)| (k.as_str(), r))
    }

    /// Writes `value` under `key` with `stamp`; an older stamp than the one
    /// held loses (returns false).
    pub fn write(&mut self, key: &str, value: Option<String>, stamp: Stamp) -> bool {
        self.merge_register(
            key,
            Register {
                val: value,
                marker: stamp,
            },
        )
    }

    /// Merges one register; true when it changed this state.
    pub fn merge_register(&mut self, key: &str, register: Register) -> bool {
        match self.entries.get_mut(key) {
            Some(held) if held.marker >= register.marker => false,
            Some(held) => {
                held.merge(register);
                true
            }
            None => {
                self.entries.insert(key.to_string(), register);
                true
            }
        }
    }

    /// Merges another replica's state (or a delta of it); true when this
    /// state changed.
    pub fn merge(&mut self, other: ReplicatedState) -> bool {
        let mut changed = false;
        for (key, register) in other.entries {
            changed |= self.merge_register(&key, register);
        }
        changed
    }

    /// A delta holding the current registers of `keys` (missing keys are
    /// skipped).
    pub fn delta<'a>(&self, keys: impl IntoIterator<Item = &'a str>) -> ReplicatedState {
        let mut entries = BTreeMap::new();
        for key in keys {
            if let Some(r) = self.entries.get(key) {
                entries.insert(key.to_string(), r.clone());
            }
        }
        ReplicatedState { entries }
    }

    /// The newest stamp held: the state's version as `SHOW CLUSTER` shows it.
    pub fn version(&self) -> Stamp {
        self.entries.values().map(|r| r.marker).max().unwrap_or_default()
    }

    /// Number of registers, tombstones included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A summary that two replicas share exactly when they hold the same
    /// registers: a hash of every key with its stamp (a stamp names one
    /// write, so its value need not be hashed). Equal digests end
    /// anti-entropy; different ones start a whole-state exchange.
    pub fn digest(&self) -> u64 {
        // FNV-1a over a canonical encoding: stable across processes and
        // builds (std's SipHash keys are not a promise of the language).
        let mut h = Fnv(0xcbf2_9ce4_8422_2325);
        for (k, r) in &self.entries {
            h.write(k.as_bytes());
            h.write_u8(0xff);
            h.write_u64(r.marker.term);
            h.write_u64(r.marker.seq);
        }
        h.finish()
    }
}

struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.write(&n.to_le_bytes());
    }
}

impl Hash for ReplicatedState {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.digest());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(term: u64, seq: u64) -> Stamp {
        Stamp { term, seq }
    }

    #[test]
    fn a_later_term_wins_whatever_its_sequence() {
        let mut a = ReplicatedState::default();
        a.write("stream/x", Some("v1".into()), s(1, 9));
        assert!(a.write("stream/x", Some("v2".into()), s(2, 1)));
        assert!(!a.write("stream/x", Some("old".into()), s(1, 10)));
        assert_eq!(a.get("stream/x"), Some("v2"));
    }

    #[test]
    fn a_tombstone_hides_the_value_and_wins_the_merge() {
        let mut a = ReplicatedState::default();
        a.write("stream/x", Some("v1".into()), s(1, 1));
        let mut b = a.clone();
        b.write("stream/x", None, s(1, 2));
        a.merge(b.clone());
        assert_eq!(a.get("stream/x"), None);
        assert_eq!(a.len(), 1);
        assert_eq!(a.scan("stream/").count(), 0);
        assert_eq!(a.digest(), b.digest());
    }

    #[test]
    fn merging_commutes_and_is_idempotent() {
        let mut a = ReplicatedState::default();
        let mut b = ReplicatedState::default();
        a.write("k1", Some("a".into()), s(1, 1));
        a.write("k2", Some("a".into()), s(2, 1));
        b.write("k1", Some("b".into()), s(1, 2));
        b.write("k3", Some("b".into()), s(1, 3));
        let mut ab = a.clone();
        ab.merge(b.clone());
        let mut ba = b.clone();
        ba.merge(a.clone());
        assert_eq!(ab, ba);
        assert!(
            !ab.clone().merge(ab.clone()),
            "merging a state into itself changes nothing"
        );
        assert_eq!(ab.get("k1"), Some("b"));
        assert_eq!(ab.version(), s(2, 1));
    }

    #[test]
    fn scan_sees_only_its_prefix() {
        let mut a = ReplicatedState::default();
        a.write("pipeline/p", Some("1".into()), s(1, 1));
        a.write("stream/a", Some("2".into()), s(1, 2));
        a.write("stream/b", Some("3".into()), s(1, 3));
        a.write("streamz", Some("4".into()), s(1, 4));
        let keys: Vec<_> = a.scan("stream/").map(|(k, _)| k).collect();
        assert_eq!(keys, ["stream/a", "stream/b"]);
    }

    #[test]
    fn the_digest_tells_states_apart() {
        let mut a = ReplicatedState::default();
        let empty = a.digest();
        a.write("k", Some("v".into()), s(1, 1));
        let one = a.digest();
        assert_ne!(empty, one);
        a.write("k", Some("v".into()), s(1, 2));
        assert_ne!(one, a.digest());
        let round_trip: ReplicatedState = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(round_trip.digest(), a.digest());
    }
}
