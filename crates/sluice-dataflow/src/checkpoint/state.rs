//! A task's snapshot ([`TaskState`]) and its versioned, checksummed
//! encoding.
//!
//! File layout (all integers little-endian), format version 4:
//!
//! ```text
//! "SLST" | format_version u32 | entries u32 |
//!   entries × ( kind u8 (0 bytes, 1 Arrow batch, 2 Arrow batches, 3 keyed batches) | key_len u32 | key utf-8 |
//!               chunks × ( len u32 (1..=CHUNK_BYTES) | bytes ) | 0u32 ) |
//! crc32 u32 (CRC-32/ISO-HDLC of every byte before it)
//! ```
//!
//! A value is cut into chunks so a file can be written front to back
//! through a buffer of [`CHUNK_BYTES`] ([`TaskState::write_to`]): a join's
//! state is hundreds of MB, and building it whole in memory first touched
//! that much fresh memory on every checkpoint. Version 1 (one `u64` length
//! before each value), version 2 (no keyed values) and version 3 (a batch
//! value in one IPC batch) are still read.
//!
//! A batch value is an Arrow IPC stream holding one record batch, written
//! in slices of at most [`IPC_BATCH_ROWS`] rows (read back as one); a
//! batches value an Arrow IPC stream holding any number (one schema); a
//! keyed batches value ([`super::keyed`]) the same with one more, last
//! column, [`KEY_GROUP_COLUMN`] (UInt16): each row's key group, computed
//! while the file is written.

use super::key_groups::{KeyGroups, KeyedBatches};
use arrow::array::{Array, UInt16Array};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;
use sluice_types::{Error, Result};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Write;

/// Version of the task state file format written.
pub const STATE_FORMAT_VERSION: u32 = 4;
/// The first format: one length-prefixed value per entry.
const FORMAT_V1: u32 = 1;
/// Chunked values, no keyed values (before key groups).
const FORMAT_V2: u32 = 2;
/// The column a keyed value's rows carry their key group in, in files.
pub const KEY_GROUP_COLUMN: &str = "__sluice_key_group";
/// Largest chunk of a value in a version-2 file, and the most a writer
/// buffers before passing bytes on.
pub const CHUNK_BYTES: usize = 1 << 20;
const MAGIC: &[u8; 4] = b"SLST";
/// Slice-by-16 tables: checkpoint files are hundreds of MB for a large
/// join, and the bytewise table ran at a fraction of memory speed.
const CRC: crc::Crc<u32, crc::Table<16>> = crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISO_HDLC);

/// CRC-32 (ISO-HDLC, as zlib and crc32fast compute it) of `bytes`.
pub fn crc32(bytes: &[u8]) -> u32 {
    CRC.checksum(bytes)
}

/// One named piece of a task's state.
#[derive(Debug, Clone)]
pub enum StateValue {
    Bytes(Vec<u8>),
    Batch(RecordBatch),
    /// Batches of one schema, e.g. a join's stored batches as they are.
    Batches(Vec<RecordBatch>),
    /// Keyed state: batches of one schema whose rows are split by key
    /// group on restore ([`super::keyed`]).
    Keyed(KeyedBatches),
}

/// What a task stored in a checkpoint: named byte strings and Arrow
/// batches. Stateless tasks store nothing.
#[derive(Debug, Clone, Default)]
pub struct TaskState {
    pub entries: BTreeMap<String, StateValue>,
    /// The pipeline's key group count, which keyed values are labelled by
    /// when written (the task sets it; 0 in a state without keyed values).
    pub key_groups: u32,
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

    /// Stores `batches` (all of one schema; at least one). A decoded state
    /// returns the same rows in order, runs of small batches gathered into
    /// larger ones.
    pub fn put_batches(&mut self, key: &str, batches: Vec<RecordBatch>) {
        self.entries.insert(key.to_string(), StateValue::Batches(batches));
    }

    /// Stores keyed state: `batches` (one schema, at least one) whose key
    /// is `key_columns`; each row is labelled with its key group when the
    /// file is written, off the task.
    pub fn put_keyed(&mut self, key: &str, batches: Vec<RecordBatch>, key_columns: Vec<usize>) {
        self.entries.insert(
            key.to_string(),
            StateValue::Keyed(KeyedBatches {
                batches,
                groups: KeyGroups::Columns(key_columns),
            }),
        );
    }

    /// A keyed operator's rows in one snapshot: an unkeyed batch without
    /// key columns, else keyed by them (stored per key group).
    pub fn put_rows(&mut self, key: &str, batch: RecordBatch, key_columns: Vec<usize>) {
        if key_columns.is_empty() {
            self.put_batch(key, batch);
        } else {
            self.put_keyed(key, vec![batch], key_columns);
        }
    }

    /// The rows of entry `key` of a restored checkpoint as one batch (none
    /// when absent): after a rescale they may come from several old
    /// instances, whose keys are disjoint.
    pub fn restored_rows(checkpoint: Option<(u64, TaskState)>, key: &str) -> Result<Option<RecordBatch>> {
        let batches = checkpoint.map(|(_, s)| s.rows(key)).unwrap_or_default();
        match batches.first() {
            Some(first) => Ok(Some(arrow::compute::concat_batches(&first.schema(), &batches)?)),
            None => Ok(None),
        }
    }

    /// The rows of a batch, batches or keyed entry, whichever it is (empty
    /// when absent).
    pub fn rows(&self, key: &str) -> Vec<RecordBatch> {
        match self.entries.get(key) {
            Some(StateValue::Batch(b)) => vec![b.clone()],
            Some(StateValue::Batches(b)) => b.clone(),
            Some(StateValue::Keyed(k)) => k.batches.clone(),
            _ => Vec::new(),
        }
    }

    /// Marks entry `key` (a batch or batches value from a checkpoint
    /// before key groups) as keyed by `key_columns`.
    pub fn mark_keyed(&mut self, key: &str, key_columns: Vec<usize>) {
        let batches = self.rows(key);
        if !batches.is_empty() {
            self.put_keyed(key, batches, key_columns);
        }
    }

    pub fn batches(&self, key: &str) -> Option<&[RecordBatch]> {
        match self.entries.get(key) {
            Some(StateValue::Batches(b)) => Some(b),
            _ => None,
        }
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
        self.write_to(&mut out)?;
        Ok(out)
    }

    /// Writes the file to `out` front to back, holding at most
    /// [`CHUNK_BYTES`] of it (plus one gathered Arrow batch, see
    /// [`write_ipc`]) at a time, and returns its length and the CRC-32 of
    /// the whole file (what the manifest lists), computed in the same pass.
    /// Arrow values are LZ4-compressed.
    pub fn write_to(&self, out: &mut dyn Write) -> Result<FileSummary> {
        let mut out = Checksummed::new(out);
        out.write_all(MAGIC)?;
        out.write_all(&STATE_FORMAT_VERSION.to_le_bytes())?;
        out.write_all(&(self.entries.len() as u32).to_le_bytes())?;
        let mut chunk = Vec::new();
        for (key, value) in &self.entries {
            let kind = match value {
                StateValue::Bytes(_) => 0u8,
                StateValue::Batch(_) => 1,
                StateValue::Batches(_) => 2,
                StateValue::Keyed(_) => 3,
            };
            out.write_all(&[kind])?;
            out.write_all(&(key.len() as u32).to_le_bytes())?;
            out.write_all(key.as_bytes())?;
            let mut w = ChunkWriter::new(&mut chunk, &mut out);
            match value {
                StateValue::Bytes(b) => w.write_all(b)?,
                StateValue::Batch(batch) => write_ipc(&mut w, std::slice::from_ref(batch), None)?,
                StateValue::Batches(batches) => write_ipc(&mut w, batches, None)?,
                StateValue::Keyed(keyed) => self.write_keyed(&mut w, keyed)?,
            }
            w.end()?;
        }
        let crc = out.digest.clone().finalize();
        out.write_all(&crc.to_le_bytes())?;
        out.flush()?;
        Ok(FileSummary {
            bytes: out.bytes,
            crc32: out.digest.finalize(),
        })
    }

    /// A keyed value: its batches with each row's key group appended
    /// (computed here, on the checkpoint thread, a batch at a time).
    fn write_keyed(&self, out: &mut dyn Write, keyed: &KeyedBatches) -> Result<()> {
        let key_groups = self.key_groups;
        let groups = |i: usize, b: &RecordBatch| -> Result<UInt16Array> {
            match &keyed.groups {
                KeyGroups::Stored(g) => g.get(i).cloned().ok_or_else(|| corrupt("keyed batch without groups")),
                KeyGroups::Columns(columns) => {
                    if sluice_plan::key_groups::validate(key_groups).is_err() {
                        return Err(Error::internal("keyed state written without the key group count"));
                    }
                    super::key_groups::label(b, columns, key_groups)
                }
            }
        };
        write_ipc(out, &keyed.batches, Some(&groups))
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
        if !(FORMAT_V1..=STATE_FORMAT_VERSION).contains(&version) {
            return Err(corrupt(&format!(
                "format version {version}, expected {FORMAT_V1} to {STATE_FORMAT_VERSION}"
            )));
        }
        let _ = FORMAT_V2;
        let n = r.u32()?;
        let mut state = TaskState::default();
        for _ in 0..n {
            let kind = r.take(1)?[0];
            let key_len = r.u32()? as usize;
            let key = String::from_utf8(r.take(key_len)?.to_vec()).map_err(|_| corrupt("key"))?;
            let value: Cow<'_, [u8]> = if version == FORMAT_V1 {
                let len = r.u64()? as usize;
                Cow::Borrowed(r.take(len)?)
            } else {
                r.chunks()?
            };
            let value = match kind {
                0 => StateValue::Bytes(value.into_owned()),
                1 => {
                    // One IPC batch up to version 3; from version 4 a large
                    // batch is written in slices.
                    let reader = StreamReader::try_new(std::io::Cursor::new(&value[..]), None)?;
                    let schema = reader.schema();
                    let slices = reader.collect::<std::result::Result<Vec<_>, _>>()?;
                    if slices.is_empty() {
                        return Err(corrupt("empty batch entry"));
                    }
                    StateValue::Batch(arrow::compute::concat_batches(&schema, &slices)?)
                }
                2 => {
                    let reader = StreamReader::try_new(std::io::Cursor::new(&value[..]), None)?;
                    StateValue::Batches(reader.collect::<std::result::Result<Vec<_>, _>>()?)
                }
                3 if version > FORMAT_V2 => {
                    let reader = StreamReader::try_new(std::io::Cursor::new(&value[..]), None)?;
                    let mut batches = Vec::new();
                    let mut groups = Vec::new();
                    for b in reader {
                        let b = b?;
                        let last = b.num_columns().checked_sub(1).ok_or_else(|| corrupt("keyed batch"))?;
                        if b.schema().field(last).name() != KEY_GROUP_COLUMN {
                            return Err(corrupt("keyed batch without key groups"));
                        }
                        let g = b.column(last).as_any().downcast_ref::<UInt16Array>();
                        groups.push(g.ok_or_else(|| corrupt("key group column"))?.clone());
                        batches.push(b.project(&(0..last).collect::<Vec<_>>())?);
                    }
                    StateValue::Keyed(KeyedBatches {
                        batches,
                        groups: KeyGroups::Stored(groups),
                    })
                }
                _ => return Err(corrupt("entry kind")),
            };
            state.entries.insert(key, value);
        }
        Ok(state)
    }
}

/// Rows of one IPC batch in a state file at most: small batches are
/// gathered up to it (a join holds tens of thousands of batches of a few
/// hundred rows: written one by one, each costs an IPC header and
/// compresses badly), and a larger one is written in slices of it (the
/// IPC writer holds a batch's compressed buffers until it writes them).
const IPC_BATCH_ROWS: usize = 1 << 16;

/// Writes `batches` as one Arrow IPC stream, LZ4-compressed (a join's
/// 10 M rows: 330 MB raw, a third of that compressed; the bytes written
/// to disk, not the encoding, are what slowed the pipeline while a
/// checkpoint was written), in IPC batches of at most [`IPC_BATCH_ROWS`]
/// rows: runs of small batches gathered, large ones sliced (on the
/// checkpoint thread; rows, their order and values are unchanged).
/// With `key_groups`, each batch gets its rows' key groups as a last
/// column ([`KEY_GROUP_COLUMN`]), one batch at a time.
type GroupsOf<'a> = &'a dyn Fn(usize, &RecordBatch) -> Result<UInt16Array>;

fn write_ipc(out: &mut dyn Write, batches: &[RecordBatch], key_groups: Option<GroupsOf<'_>>) -> Result<()> {
    let first = batches
        .first()
        .ok_or_else(|| Error::internal("state entry without batches"))?;
    let mut schema = first.schema();
    if key_groups.is_some() {
        let mut fields: Vec<arrow::datatypes::FieldRef> = schema.fields().iter().cloned().collect();
        fields.push(std::sync::Arc::new(arrow::datatypes::Field::new(
            KEY_GROUP_COLUMN,
            arrow::datatypes::DataType::UInt16,
            false,
        )));
        schema = std::sync::Arc::new(arrow::datatypes::Schema::new(fields));
    }
    let options = arrow_ipc::writer::IpcWriteOptions::default()
        .try_with_compression(Some(arrow_ipc::CompressionType::LZ4_FRAME))?;
    let mut w = StreamWriter::try_new_with_options(out, &schema, options)?;
    let mut run: Vec<RecordBatch> = Vec::new();
    let mut rows = 0;
    for (i, b) in batches.iter().enumerate() {
        let b = match key_groups {
            Some(groups) => {
                let mut columns = b.columns().to_vec();
                columns.push(std::sync::Arc::new(groups(i, b)?));
                RecordBatch::try_new(schema.clone(), columns)?
            }
            None => b.clone(),
        };
        // A large batch goes in slices (no copy), so the IPC writer's
        // compressed buffers and scratch hold one slice at a time, not the
        // batch (a top-N's first checkpoint: 8.8 M rows, over 1 GB).
        let mut at = 0;
        loop {
            let piece = b.slice(at, (b.num_rows() - at).min(IPC_BATCH_ROWS));
            at += piece.num_rows();
            if rows + piece.num_rows() > IPC_BATCH_ROWS && !run.is_empty() {
                w.write(&arrow::compute::concat_batches(&schema, &run)?)?;
                run.clear();
                rows = 0;
            }
            rows += piece.num_rows();
            run.push(piece);
            if at >= b.num_rows() {
                break;
            }
        }
    }
    if !run.is_empty() {
        w.write(&arrow::compute::concat_batches(&schema, &run)?)?;
    }
    w.finish()?;
    Ok(())
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
    /// A version-2 value: its chunks, borrowed when there is one.
    fn chunks(&mut self) -> Result<Cow<'a, [u8]>> {
        let mut value: Cow<'a, [u8]> = Cow::Borrowed(&[]);
        loop {
            let len = self.u32()? as usize;
            if len == 0 {
                return Ok(value);
            }
            if len > CHUNK_BYTES {
                return Err(corrupt("chunk length"));
            }
            let chunk = self.take(len)?;
            if value.is_empty() {
                value = Cow::Borrowed(chunk);
            } else {
                value.to_mut().extend_from_slice(chunk);
            }
        }
    }
}

/// A written file's length and CRC-32 (of every byte, the trailing CRC
/// included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileSummary {
    pub bytes: u64,
    pub crc32: u32,
}

/// Counts and checksums what passes through to `inner`.
struct Checksummed<'w> {
    inner: &'w mut dyn Write,
    digest: crc::Digest<'static, u32, crc::Table<16>>,
    bytes: u64,
}

impl<'w> Checksummed<'w> {
    fn new(inner: &'w mut dyn Write) -> Self {
        Checksummed {
            inner,
            digest: CRC.digest(),
            bytes: 0,
        }
    }
}

impl Write for Checksummed<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.digest.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes one value as chunks of at most [`CHUNK_BYTES`] (each after its
/// length) and, at [`ChunkWriter::end`], the empty chunk that ends it.
struct ChunkWriter<'a> {
    /// Kept across a file's entries, so it is allocated once per file.
    buf: &'a mut Vec<u8>,
    out: &'a mut dyn Write,
}

impl<'a> ChunkWriter<'a> {
    fn new(buf: &'a mut Vec<u8>, out: &'a mut dyn Write) -> Self {
        buf.clear();
        ChunkWriter { buf, out }
    }

    fn emit(&mut self) -> std::io::Result<()> {
        if !self.buf.is_empty() {
            self.out.write_all(&(self.buf.len() as u32).to_le_bytes())?;
            self.out.write_all(self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    fn end(mut self) -> std::io::Result<()> {
        self.emit()?;
        self.out.write_all(&0u32.to_le_bytes())
    }
}

impl Write for ChunkWriter<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = data.len().min(CHUNK_BYTES - self.buf.len());
        if self.buf.len() + n > self.buf.capacity() {
            self.buf.reserve_exact(CHUNK_BYTES - self.buf.len());
        }
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK_BYTES {
            self.emit()?;
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
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
        s.put_batch("windows", batch.clone());
        s.put_batches("stored", vec![batch.clone(), batch.slice(1, 1)]);
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
        // Small batches come back gathered, their rows in order.
        let stored = back.batches("stored").unwrap();
        assert_eq!(stored.len(), 1);
        let rows = arrow::compute::concat_batches(&b.schema(), [b, &b.slice(1, 1)]).unwrap();
        assert_eq!(stored[0], rows);
        let mut again = Vec::new();
        let summary = state().write_to(&mut again).unwrap();
        assert_eq!(again, bytes);
        assert_eq!(
            summary,
            FileSummary {
                bytes: bytes.len() as u64,
                crc32: crc32(&bytes)
            }
        );
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926, "the standard CRC-32 check value");
    }

    /// Version 1 wrote each value after its u64 length; such files are
    /// still read. Built here byte by byte, as that version laid them out.
    #[test]
    fn a_version_1_file_is_still_read() {
        let batch = state().batch("windows").unwrap().clone();
        let mut ipc = Vec::new();
        let mut w = StreamWriter::try_new(&mut ipc, &batch.schema()).unwrap();
        w.write(&batch).unwrap();
        w.finish().unwrap();
        drop(w);
        let mut file = b"SLST".to_vec();
        file.extend_from_slice(&1u32.to_le_bytes());
        file.extend_from_slice(&2u32.to_le_bytes());
        for (kind, key, value) in [(0u8, "offsets", &b"{}"[..]), (1, "windows", &ipc[..])] {
            file.push(kind);
            file.extend_from_slice(&(key.len() as u32).to_le_bytes());
            file.extend_from_slice(key.as_bytes());
            file.extend_from_slice(&(value.len() as u64).to_le_bytes());
            file.extend_from_slice(value);
        }
        let crc = crc32(&file);
        file.extend_from_slice(&crc.to_le_bytes());
        let back = TaskState::decode(&file).unwrap();
        assert_eq!(back.bytes("offsets").unwrap(), b"{}");
        assert_eq!(back.batch("windows").unwrap(), &batch);
        file[4] = 3;
        assert!(TaskState::decode(&file).is_err());
    }

    /// At the chunk limit: a value of 2.5 chunks is written as chunks of
    /// exactly CHUNK_BYTES, CHUNK_BYTES and the rest, each at most the
    /// limit, and reads back whole.
    #[test]
    fn a_value_larger_than_a_chunk_is_cut_at_the_limit() {
        let value: Vec<u8> = (0..CHUNK_BYTES * 5 / 2).map(|i| (i % 251) as u8).collect();
        let mut s = TaskState::default();
        s.put_bytes("big", value.clone());
        let bytes = s.encode().unwrap();
        // Header 12, kind 1, key 4 + 3, then the chunks.
        let mut at = 12 + 1 + 4 + 3;
        let mut lens = Vec::new();
        loop {
            let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            at += 4 + len;
            if len == 0 {
                break;
            }
            lens.push(len);
        }
        assert_eq!(lens, [CHUNK_BYTES, CHUNK_BYTES, CHUNK_BYTES / 2]);
        assert_eq!(at + 4, bytes.len(), "only the CRC follows");
        assert_eq!(TaskState::decode(&bytes).unwrap().bytes("big").unwrap(), &value[..]);
        // A chunk claiming more than the limit is corrupt, whatever its CRC.
        let mut bad = bytes.clone();
        bad[20..24].copy_from_slice(&(CHUNK_BYTES as u32 + 1).to_le_bytes());
        let n = bad.len() - 4;
        let crc = crc32(&bad[..n]);
        bad[n..].copy_from_slice(&crc.to_le_bytes());
        let e = TaskState::decode(&bad).unwrap_err().to_string();
        assert!(e.contains("chunk length"), "{e}");
    }

    /// A writer that fails part way (a full disk) fails the encoding; no
    /// summary of a partial file comes back.
    #[test]
    fn a_failing_writer_fails_the_write() {
        struct Full(usize);
        impl Write for Full {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                if self.0 == 0 {
                    return Err(std::io::Error::other("disk full"));
                }
                let n = buf.len().min(self.0);
                self.0 -= n;
                Ok(n)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let len = state().encode().unwrap().len();
        for room in [0, 5, 40, len - 1] {
            let e = state().write_to(&mut Full(room)).unwrap_err().to_string();
            assert!(e.contains("disk full"), "{room}: {e}");
        }
        assert!(state().write_to(&mut Full(len)).is_ok());
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

#[cfg(test)]
mod gather_tests {
    use super::*;
    use arrow::array::{Array, Int64Array};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    #[test]
    fn many_small_batches_come_back_as_few_compressed_ones_with_every_row_in_order() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        // 300 batches of 500 rows: 150 000 rows, gathered into 65 536-row
        // batches (a batch is never split: 131 of them, 65 500 rows, a
        // gathered batch).
        let batches: Vec<RecordBatch> = (0..300)
            .map(|b| {
                let values = Int64Array::from_iter_values((0..500).map(|r| (b * 500 + r) % 1000));
                RecordBatch::try_new(schema.clone(), vec![Arc::new(values)]).unwrap()
            })
            .collect();
        let mut s = TaskState::default();
        s.put_batches("stored", batches);
        let bytes = s.encode().unwrap();
        // 1.2 MB of values, repeating every 1000 rows: LZ4 makes it small.
        assert!(bytes.len() < 400_000, "{} bytes", bytes.len());
        let back = TaskState::decode(&bytes).unwrap();
        let stored = back.batches("stored").unwrap();
        let sizes: Vec<usize> = stored.iter().map(RecordBatch::num_rows).collect();
        assert_eq!(sizes, [65_500, 65_500, 19_000]);
        let values: Vec<i64> = stored
            .iter()
            .flat_map(|b| {
                let c = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                c.values().to_vec()
            })
            .collect();
        assert_eq!(values, (0..150_000).map(|i| i % 1000).collect::<Vec<i64>>());
    }

    /// Rows of a batch whose strings and numbers follow from the row's
    /// number, with a NULL every seventh row.
    fn numbered(schema: &Arc<Schema>, from: usize, rows: usize) -> RecordBatch {
        let n = Int64Array::from_iter_values((from..from + rows).map(|i| i as i64));
        let s = arrow::array::StringArray::from_iter(
            (from..from + rows).map(|i| (!i.is_multiple_of(7)).then(|| format!("row-{i}-{}", "x".repeat(i % 13)))),
        );
        RecordBatch::try_new(schema.clone(), vec![Arc::new(n), Arc::new(s)]).unwrap()
    }

    fn check_numbered(batches: &[RecordBatch], rows: usize) {
        let mut next = 0usize;
        for b in batches {
            let n = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            let s = b
                .column(1)
                .as_any()
                .downcast_ref::<arrow::array::StringArray>()
                .unwrap();
            for r in 0..b.num_rows() {
                assert_eq!(n.value(r), next as i64);
                let expected = (!next.is_multiple_of(7)).then(|| format!("row-{next}-{}", "x".repeat(next % 13)));
                assert_eq!(s.is_valid(r).then(|| s.value(r).to_string()), expected, "row {next}");
                next += 1;
            }
        }
        assert_eq!(next, rows);
    }

    /// A batch larger than an IPC batch is written in slices — the file
    /// holds IPC batches of at most [`IPC_BATCH_ROWS`] rows — and every
    /// kind of value reads back its rows, in order: a batch value as one
    /// batch again, a batches or keyed value as the slices.
    #[test]
    fn a_large_batch_is_written_in_slices_and_read_back_whole() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let rows = 3 * IPC_BATCH_ROWS + 1234;
        // Sliced itself, as a batch cut from a larger one may be.
        let big = numbered(&schema, 0, rows + 10).slice(0, rows);
        let small = numbered(&schema, rows, 100);
        let mut s = TaskState {
            key_groups: 128,
            ..Default::default()
        };
        s.put_batch("one", big.clone());
        s.put_batches("many", vec![big.clone(), small]);
        s.put_keyed("keyed", vec![big.clone()], vec![0]);
        let back = TaskState::decode(&s.encode().unwrap()).unwrap();

        let one = back.batch("one").unwrap();
        assert_eq!(one.num_rows(), rows);
        check_numbered(std::slice::from_ref(one), rows);

        // The last slice and the small batch after it are gathered.
        let many = back.batches("many").unwrap();
        let sizes: Vec<usize> = many.iter().map(RecordBatch::num_rows).collect();
        let r = IPC_BATCH_ROWS;
        assert_eq!(sizes, [r, r, r, 1334]);
        check_numbered(many, rows + 100);

        let keyed = back.rows("keyed");
        assert!(keyed.iter().all(|b| b.num_rows() <= IPC_BATCH_ROWS));
        check_numbered(&keyed, rows);
    }
}
