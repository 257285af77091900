//! A hash for row-encoded keys that keeps neighbouring integer ids in
//! neighbouring slots of a hash table.
//!
//! Ids are mostly handed out in sequence (database keys, Nexmark's persons
//! and auctions), and the keys a stream names at any moment are mostly
//! recent ones: a few thousand neighbours among millions held. A hash
//! scattering them over a table of millions of entries costs a cache miss
//! or two a lookup: perf of Nexmark q17 had the keyed aggregate's lookup at
//! 17 % of the server, most of it on loading the table's control bytes and
//! writing new entries. So when a key's first column is an integer, keys
//! alike but for that integer's lowest 4 bits hash alike but for the
//! hash's lowest 4 bits, which are those: a block of 16 consecutive ids
//! (with equal other columns) starts its probes in the same 16 slots. The
//! 4 bits are also mixed into the hash's top 7 (hashbrown's tag), so the
//! neighbours' tags differ and a probe compares only its own.
//!
//! It is a [`BuildHasher`], so every operation of a map using it (lookups
//! by key, removal, rehashing) agrees on the hash.

use arrow::datatypes::DataType;
use hashbrown::DefaultHashBuilder;
use std::hash::{BuildHasher, Hasher};

#[derive(Clone, Default)]
pub(crate) struct NeighbourHash {
    inner: DefaultHashBuilder,
    /// The byte of a row-encoded key holding its first column's lowest 8
    /// bits, when that column is an integer (`None`: plain hashing).
    at: Option<usize>,
}

impl NeighbourHash {
    /// For keys row-encoded (`arrow::row`, ascending) from columns the
    /// first of which is of type `first`.
    pub(crate) fn for_first_column(first: Option<&DataType>) -> Self {
        NeighbourHash {
            inner: DefaultHashBuilder::default(),
            // A validity byte, then the value's `width` bytes big-endian:
            // its lowest at `width`.
            at: first.filter(|t| t.is_integer()).and_then(|t| t.primitive_width()),
        }
    }

    /// For keys row-encoded from `key_columns` of `schema`.
    pub(crate) fn for_key(schema: &arrow::datatypes::Schema, key_columns: &[usize]) -> Self {
        Self::for_first_column(key_columns.first().map(|c| schema.field(*c).data_type()))
    }
}

impl BuildHasher for NeighbourHash {
    type Hasher = NeighbourHasher;

    fn build_hasher(&self) -> NeighbourHasher {
        NeighbourHasher {
            inner: self.inner.build_hasher(),
            at: self.at,
            nibble: None,
        }
    }
}

pub(crate) struct NeighbourHasher {
    inner: <DefaultHashBuilder as BuildHasher>::Hasher,
    at: Option<usize>,
    /// The first column's lowest 4 bits, once the key's bytes were written.
    nibble: Option<u64>,
}

impl Hasher for NeighbourHasher {
    /// A key's bytes (a slice's length goes to `write_usize`).
    fn write(&mut self, bytes: &[u8]) {
        match self.at.filter(|at| self.nibble.is_none() && *at < bytes.len()) {
            Some(at) => {
                let low = bytes[at];
                self.inner.write(&bytes[..at]);
                self.inner.write_u8(low & 0xf0);
                self.inner.write(&bytes[at + 1..]);
                self.nibble = Some(u64::from(low & 0x0f));
            }
            None => self.inner.write(bytes),
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.inner.write_u8(i);
    }

    fn write_u16(&mut self, i: u16) {
        self.inner.write_u16(i);
    }

    fn write_u32(&mut self, i: u32) {
        self.inner.write_u32(i);
    }

    fn write_u64(&mut self, i: u64) {
        self.inner.write_u64(i);
    }

    fn write_u128(&mut self, i: u128) {
        self.inner.write_u128(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.inner.write_usize(i);
    }

    fn finish(&self) -> u64 {
        let hash = self.inner.finish();
        match self.nibble {
            Some(n) => ((hash & !0x0f) | n) ^ (n << 57),
            None => hash,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int32Array, Int64Array, StringArray};
    use arrow::row::{RowConverter, SortField};
    use std::collections::HashSet;
    use std::sync::Arc;

    /// The hash without the bits a first column's lowest 4 set.
    fn middle(h: u64) -> u64 {
        h & !0x0f & !(0x0f << 57)
    }

    #[test]
    fn neighbouring_integer_keys_hash_to_neighbouring_slots() {
        let converter =
            RowConverter::new(vec![SortField::new(DataType::Int64), SortField::new(DataType::Utf8)]).unwrap();
        let hash = NeighbourHash::for_first_column(Some(&DataType::Int64));
        let key = |k: i64, day: &str| -> Vec<u8> {
            let columns: [ArrayRef; 2] = [
                Arc::new(Int64Array::from(vec![k])),
                Arc::new(StringArray::from(vec![day])),
            ];
            converter.convert_columns(&columns).unwrap().row(0).as_ref().to_vec()
        };
        let hashes: Vec<u64> = (1008..1040).map(|k| hash.hash_one(key(k, "2026-12-07"))).collect();
        // One block of 16 (1008–1023): alike but for the lowest 4 bits (the
        // key's) and the tag's (their mix).
        for (i, h) in hashes[..16].iter().enumerate() {
            assert_eq!(h & 0x0f, i as u64);
            assert_eq!(middle(*h), middle(hashes[0]));
        }
        assert_eq!(hashes[..16].iter().collect::<HashSet<_>>().len(), 16);
        // The next block hashes elsewhere, so does another day; negative
        // keys make blocks too.
        assert_ne!(middle(hashes[16]), middle(hashes[0]));
        assert_ne!(middle(hash.hash_one(key(1008, "2026-12-08"))), middle(hashes[0]));
        assert_eq!(
            middle(hash.hash_one(key(-16, "d"))),
            middle(hash.hash_one(key(-1, "d")))
        );
        assert_ne!(
            middle(hash.hash_one(key(-17, "d"))),
            middle(hash.hash_one(key(-16, "d")))
        );
        // Equal keys hash equally, as slices or boxed (as maps hold them).
        let boxed: Box<[u8]> = key(1010, "x").into();
        assert_eq!(hash.hash_one(&boxed), hash.hash_one(key(1010, "x").as_slice()));
    }

    #[test]
    fn other_first_columns_hash_whole_keys() {
        let int32 = NeighbourHash::for_first_column(Some(&DataType::Int32));
        assert_eq!(int32.at, Some(4));
        let converter = RowConverter::new(vec![SortField::new(DataType::Int32)]).unwrap();
        let key = |k: i32| -> Vec<u8> {
            let columns: [ArrayRef; 1] = [Arc::new(Int32Array::from(vec![k]))];
            converter.convert_columns(&columns).unwrap().row(0).as_ref().to_vec()
        };
        assert_eq!(middle(int32.hash_one(key(32))), middle(int32.hash_one(key(47))));
        for first in [None, Some(&DataType::Utf8), Some(&DataType::Float64)] {
            let plain = NeighbourHash::for_first_column(first);
            assert_eq!(plain.at, None);
            let h: HashSet<u64> = (0u8..16).map(|b| middle(plain.hash_one([b, 1, 2]))).collect();
            assert!(h.len() > 1, "{first:?}");
        }
    }
}
