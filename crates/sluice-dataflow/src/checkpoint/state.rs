//! A task's snapshot ([`TaskState`]) and its versioned, checksummed
//! encoding.
//!
//! File layout (all integers little-endian):
//!
//! ```text
//! "SLST" | format_version u32 | entries u32 |
//!   entries × ( kind u8 (0 bytes, 1 Arrow batch) | key_len u32 | key utf-8 | value_len u64 | value ) |
//! crc32 u32 (CRC-32/ISO-HDLC of every byte before it)
//! ```
//!
//! A batch value is an Arrow IPC stream holding one record batch.

use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;
use sluice_types::{Error, Result};
use std::collections::BTreeMap;

/// Version of the task state file format.
pub const STATE_FORMAT_VERSION: u32 = 1;
const MAGIC: &[u8; 4] = b"SLST";
const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

/// CRC-32 (ISO-HDLC, as zlib and crc32fast compute it) of `bytes`.
pub fn crc32(bytes: &[u8]) -> u32 {
    CRC.checksum(bytes)
}

/// One named piece of a task's state.
#[derive(Debug, Clone)]
pub enum StateValue {
    Bytes(Vec<u8>),
    Batch(RecordBatch),
}

/// What a task stored in a checkpoint: named byte strings and Arrow
/// batches. Stateless tasks store nothing.
#[derive(Debug, Clone, Default)]
pub struct TaskState {
    pub entries: BTreeMap<String, StateValue>,
}

fn corrupt(what: &str) -> Error {
    Error::internal(format!("corrupt task state: {what}"))
}

impl TaskState {
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn put_bytes(&mut self, key: &str, value: Vec<u8>) {
        self.entries.insert(key.to_string(), StateValue::Bytes(value));
    }

    pub fn put_batch(&mut self, key: &str, batch: RecordBatch) {
        self.entries.insert(key.to_string(), StateValue::Batch(batch));
    }

    pub fn bytes(&self, key: &str) -> Option<&[u8]> {
        match self.entries.get(key) {
            Some(StateValue::Bytes(b)) => Some(b),
            _ => None,
        }
    }

    pub fn batch(&self, key: &str) -> Option<&RecordBatch> {
        match self.entries.get(key) {
            Some(StateValue::Batch(b)) => Some(b),
            _ => None,
        }
    }

    /// Stores `value` as JSON.
    pub fn put_json<T: serde::Serialize>(&mut self, key: &str, value: &T) -> Result<()> {
        let bytes = serde_json::to_vec(value).map_err(|e| Error::internal(format!("state encoding: {e}")))?;
        self.put_bytes(key, bytes);
        Ok(())
    }

    /// Reads a JSON value stored with [`TaskState::put_json`].
    pub fn json<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        self.bytes(key)
            .map(|b| serde_json::from_slice(b).map_err(|e| corrupt(&format!("{key}: {e}"))))
            .transpose()
    }

    /// The file bytes (with the trailing CRC).
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&STATE_FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for (key, value) in &self.entries {
            let (kind, bytes) = match value {
                StateValue::Bytes(b) => (0u8, b.clone()),
                StateValue::Batch(batch) => {
                    let mut buf = Vec::new();
                    let mut w = StreamWriter::try_new(&mut buf, &batch.schema())?;
                    w.write(batch)?;
                    w.finish()?;
                    drop(w);
                    (1u8, buf)
                }
            };
            out.push(kind);
            out.extend_from_slice(&(key.len() as u32).to_le_bytes());
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(&bytes);
        }
        let crc = crc32(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// Parses file bytes, checking the magic, version and CRC.
    pub fn decode(bytes: &[u8]) -> Result<TaskState> {
        if bytes.len() < 16 || &bytes[..4] != MAGIC {
            return Err(corrupt("not a Sluice task state file"));
        }
        let (body, tail) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_le_bytes(tail.try_into().expect("4 bytes"));
        if crc32(body) != stored {
            return Err(corrupt("checksum mismatch"));
        }
        let mut r = Reader { bytes: body, at: 4 };
        let version = r.u32()?;
        if version != STATE_FORMAT_VERSION {
            return Err(corrupt(&format!(
                "format version {version}, expected {STATE_FORMAT_VERSION}"
            )));
        }
        let n = r.u32()?;
        let mut state = TaskState::default();
        for _ in 0..n {
            let kind = r.take(1)?[0];
            let key_len = r.u32()? as usize;
            let key = String::from_utf8(r.take(key_len)?.to_vec()).map_err(|_| corrupt("key"))?;
            let len = r.u64()? as usize;
            let value = r.take(len)?;
            let value = match kind {
                0 => StateValue::Bytes(value.to_vec()),
                1 => {
                    let mut reader = StreamReader::try_new(std::io::Cursor::new(value), None)?;
                    let batch = reader.next().ok_or_else(|| corrupt("empty batch entry"))??;
                    StateValue::Batch(batch)
                }
                _ => return Err(corrupt("entry kind")),
            };
            state.entries.insert(key, value);
        }
        Ok(state)
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len());
        let end = end.ok_or_else(|| corrupt("truncated"))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn state() -> TaskState {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec![Some("a"), None])),
                Arc::new(Int64Array::from(vec![1, 2])),
            ],
        )
        .unwrap();
        let mut s = TaskState::default();
        s.put_bytes("offsets", b"{\"0\":5}".to_vec());
        s.put_batch("windows", batch);
        s
    }

    #[test]
    fn round_trips() {
        let bytes = state().encode().unwrap();
        let back = TaskState::decode(&bytes).unwrap();
        assert_eq!(back.bytes("offsets").unwrap(), b"{\"0\":5}");
        let b = back.batch("windows").unwrap();
        assert_eq!(b.num_rows(), 2);
        assert_eq!(b, state().batch("windows").unwrap());
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926, "the standard CRC-32 check value");
    }

    #[test]
    fn any_flipped_byte_or_truncation_is_detected() {
        let bytes = state().encode().unwrap();
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(TaskState::decode(&bad).is_err(), "flip at {i} undetected");
        }
        for n in 0..bytes.len() {
            assert!(TaskState::decode(&bytes[..n]).is_err(), "truncation to {n} undetected");
        }
    }
}
