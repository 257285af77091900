//! In-memory append-only logs.
//!
//! A log holds batches and, for derived streams, the watermarks their
//! pipeline forwarded. Readers keep a position and wait for appends; an
//! append is atomic (all of an INSERT's rows or none). Each log has a row
//! limit: an append that would pass it is rejected.
//!
//! A reader's position (entries read) is stored in checkpoints with the
//! log's incarnation (a random id per log object): a pipeline restarted in
//! the same process goes on where it was; a log re-created after a process
//! restart is another log (memory logs are not durable), so the reader
//! then starts by its startup mode.

use crate::options::u64_option;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use sluice_dataflow::checkpoint::TaskState;
use sluice_dataflow::source::{SourceEvent, SourceReader};
use sluice_types::{Error, Result, SqlCode, Watermark};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::watch;

/// Default row limit of one memory log.
pub const MEMORY_ROWS_MAX_DEFAULT: u64 = 10_000_000;

/// One element of a log.
#[derive(Debug, Clone)]
pub enum LogEntry {
    Batch(RecordBatch),
    Watermark(Watermark),
    /// The writing pipeline finished: readers end here.
    End,
}

/// An append-only log.
#[derive(Debug)]
pub struct MemoryLog {
    entries: RwLock<Vec<LogEntry>>,
    rows: Mutex<u64>,
    rows_max: u64,
    len: watch::Sender<usize>,
    /// Tells this log apart from an earlier one of the same name.
    incarnation: u64,
}

impl MemoryLog {
    pub fn new(rows_max: u64) -> Arc<Self> {
        let (len, _) = watch::channel(0);
        Arc::new(MemoryLog {
            entries: RwLock::new(Vec::new()),
            rows: Mutex::new(0),
            rows_max,
            len,
            incarnation: rand::random(),
        })
    }

    /// Appends batches atomically; rejects the whole append past the row limit.
    pub fn append(&self, batches: Vec<RecordBatch>) -> Result<u64> {
        let added: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
        let mut rows = self.rows.lock().expect("rows lock");
        if *rows + added > self.rows_max {
            return Err(Error::user(
                SqlCode::ConfigurationLimitExceeded,
                format!(
                    "memory stream is full: {} rows held, limit 'memory.rows.max' = {}",
                    *rows, self.rows_max
                ),
            ));
        }
        let mut entries = self.entries.write().expect("log lock");
        entries.extend(batches.into_iter().filter(|b| b.num_rows() > 0).map(LogEntry::Batch));
        *rows += added;
        self.len.send_replace(entries.len());
        Ok(added)
    }

    /// Appends a watermark (derived streams).
    pub fn append_watermark(&self, watermark: Watermark) {
        let mut entries = self.entries.write().expect("log lock");
        entries.push(LogEntry::Watermark(watermark));
        self.len.send_replace(entries.len());
    }

    /// Marks the end of a derived stream whose pipeline finished.
    pub fn append_end(&self) {
        let mut entries = self.entries.write().expect("log lock");
        entries.push(LogEntry::End);
        self.len.send_replace(entries.len());
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.read().expect("log lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows held.
    pub fn rows(&self) -> u64 {
        *self.rows.lock().expect("rows lock")
    }

    /// Entries from `position` on, at most `rows_max` rows of batches.
    fn read_from(&self, position: usize, rows_max: usize) -> Vec<LogEntry> {
        let entries = self.entries.read().expect("log lock");
        let mut out = Vec::new();
        let mut rows = 0;
        for e in entries.iter().skip(position) {
            if let LogEntry::Batch(b) = e {
                if rows > 0 && rows + b.num_rows() > rows_max {
                    break;
                }
                rows += b.num_rows();
            }
            out.push(e.clone());
        }
        out
    }

    fn subscribe(&self) -> watch::Receiver<usize> {
        self.len.subscribe()
    }
}

/// The memory logs of a process, by stream name.
#[derive(Debug, Default)]
pub struct MemoryLogs {
    logs: Mutex<HashMap<String, Arc<MemoryLog>>>,
}

impl MemoryLogs {
    /// The log of `stream`, created on first use with the stream's options.
    pub fn get_or_create(&self, stream: &str, options: &BTreeMap<String, String>) -> Result<Arc<MemoryLog>> {
        let rows_max = u64_option(options, "memory.rows.max")?.unwrap_or(MEMORY_ROWS_MAX_DEFAULT);
        let mut logs = self.logs.lock().expect("logs lock");
        Ok(logs
            .entry(stream.to_string())
            .or_insert_with(|| MemoryLog::new(rows_max))
            .clone())
    }

    /// Forgets a stream's log (DROP STREAM).
    pub fn remove(&self, stream: &str) {
        self.logs.lock().expect("logs lock").remove(stream);
    }
}

/// Reads a memory log from a position, waiting for appends.
pub struct MemoryReader {
    log: Arc<MemoryLog>,
    position: usize,
    changes: watch::Receiver<usize>,
    pending: std::collections::VecDeque<LogEntry>,
}

impl MemoryReader {
    /// From the start (`earliest`) or from the current end (`latest`).
    pub fn new(log: Arc<MemoryLog>, latest: bool) -> Self {
        let changes = log.subscribe();
        let position = if latest { log.len() } else { 0 };
        MemoryReader {
            log,
            position,
            changes,
            pending: Default::default(),
        }
    }
}

impl MemoryReader {
    /// From the first row, in the log's order, whose event time (column
    /// `time_column`) is at or after `start_ms`; the rest of its batch
    /// with it. At the end when there is none yet.
    pub fn from_time(log: Arc<MemoryLog>, start_ms: i64, time_column: usize) -> Result<Self> {
        let mut reader = MemoryReader::new(log.clone(), true);
        let entries = log.read_from(0, usize::MAX);
        for (i, entry) in entries.iter().enumerate() {
            let LogEntry::Batch(batch) = entry else { continue };
            let column = batch
                .columns()
                .get(time_column)
                .ok_or_else(|| Error::internal("memory log batch without its event-time column"))?;
            let times = sluice_dataflow::time::timestamps_ms(column)?;
            if let Some(row) = times.iter().position(|t| t.is_some_and(|t| t >= start_ms)) {
                reader.position = i + 1;
                reader
                    .pending
                    .push_back(LogEntry::Batch(batch.slice(row, batch.num_rows() - row)));
                reader.pending.extend(entries[i + 1..].iter().cloned());
                reader.position = entries.len();
                return Ok(reader);
            }
        }
        reader.position = entries.len();
        Ok(reader)
    }
}

/// Checkpoint key of a memory reader's position.
const POSITION_KEY: &str = "memory.position";

#[derive(serde::Serialize, serde::Deserialize)]
struct StoredPosition {
    incarnation: u64,
    /// Entries of the log already handed downstream.
    position: usize,
}

#[async_trait]
impl SourceReader for MemoryReader {
    fn partitions(&self) -> usize {
        1
    }

    fn snapshot(&mut self) -> Result<TaskState> {
        let mut state = TaskState::default();
        state.put_json(
            POSITION_KEY,
            &StoredPosition {
                incarnation: self.log.incarnation,
                position: self.position - self.pending.len(),
            },
        )?;
        Ok(state)
    }

    fn restore(&mut self, state: &TaskState) -> Result<()> {
        let Some(stored) = state.json::<StoredPosition>(POSITION_KEY)? else {
            return Ok(());
        };
        if stored.incarnation != self.log.incarnation || stored.position > self.log.len() {
            tracing::warn!(
                "the memory log read before the checkpoint is gone (memory streams do not survive a restart); reading by the startup mode"
            );
            return Ok(());
        }
        self.position = stored.position;
        self.pending.clear();
        Ok(())
    }

    async fn next(&mut self, batch_rows_max: usize) -> Result<SourceEvent> {
        loop {
            if let Some(entry) = self.pending.pop_front() {
                return Ok(match entry {
                    LogEntry::Batch(batch) => SourceEvent::Data { partition: 0, batch },
                    LogEntry::Watermark(watermark) => SourceEvent::Watermark {
                        partition: 0,
                        watermark,
                    },
                    LogEntry::End => SourceEvent::End,
                });
            }
            let entries = self.log.read_from(self.position, batch_rows_max);
            if !entries.is_empty() {
                self.position += entries.len();
                self.pending.extend(entries);
                continue;
            }
            // Cancel-safe: nothing consumed before this await.
            self.changes
                .changed()
                .await
                .map_err(|_| Error::internal("memory log dropped"))?;
        }
    }
}

/// An idle reader for source instances beyond the first (a memory log has one partition).
pub struct IdleReader;

#[async_trait]
impl SourceReader for IdleReader {
    fn partitions(&self) -> usize {
        1
    }
    async fn next(&mut self, _batch_rows_max: usize) -> Result<SourceEvent> {
        std::future::pending().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};

    fn batch(n: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(0..n))]).unwrap()
    }

    #[test]
    fn append_past_the_row_limit_is_rejected_whole() {
        let log = MemoryLog::new(10);
        log.append(vec![batch(6)]).unwrap();
        let err = log.append(vec![batch(3), batch(3)]).unwrap_err();
        assert!(err.to_string().contains("memory.rows.max"));
        assert_eq!(log.rows(), 6);
        assert_eq!(log.len(), 1);
        log.append(vec![batch(4)]).unwrap();
        assert_eq!(log.rows(), 10);
    }

    /// Values of the data events read until the log has no more.
    async fn drain(r: &mut MemoryReader, rows_max: usize) -> Vec<i64> {
        let mut out = Vec::new();
        while let Ok(Ok(e)) = tokio::time::timeout(std::time::Duration::from_millis(20), r.next(rows_max)).await {
            if let SourceEvent::Data { batch, .. } = e {
                let a = batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                out.extend(a.values().iter().copied());
            }
        }
        out
    }

    #[tokio::test]
    async fn a_restored_reader_goes_on_from_the_stored_position() {
        let log = MemoryLog::new(100);
        for n in 1..=4 {
            log.append(vec![batch(n)]).unwrap();
        }
        // One read takes batches 1 and 2 from the log and returns batch 1:
        // the snapshot is taken with batch 2 still pending in the reader.
        let mut r = MemoryReader::new(log.clone(), false);
        let _ = r.next(3).await.unwrap();
        assert_eq!(r.pending.len(), 1);
        let stored = TaskState::decode(&r.snapshot().unwrap().encode().unwrap()).unwrap();
        let mut fresh = MemoryReader::new(log.clone(), false);
        fresh.restore(&stored).unwrap();
        log.append(vec![batch(2)]).unwrap();
        // Independently: batches 2, 3 and 4, then the later 2.
        let expected: Vec<i64> = (0..2).chain(0..3).chain(0..4).chain(0..2).collect();
        assert_eq!(drain(&mut fresh, 1).await, expected);
        assert_eq!(drain(&mut r, 1).await, expected, "the original goes on the same way");
    }

    #[tokio::test]
    async fn a_position_in_another_log_is_ignored() {
        let old = MemoryLog::new(100);
        old.append(vec![batch(1), batch(1)]).unwrap();
        let mut r = MemoryReader::new(old, false);
        let _ = r.next(100).await.unwrap();
        let stored = r.snapshot().unwrap();
        // The process restarted: a new, empty log of the same stream.
        let new = MemoryLog::new(100);
        new.append(vec![batch(3)]).unwrap();
        let mut fresh = MemoryReader::new(new, false);
        fresh.restore(&stored).unwrap();
        assert_eq!(drain(&mut fresh, 100).await, vec![0, 1, 2]);
    }

    #[tokio::test]
    async fn reader_sees_earlier_and_later_appends() {
        let log = MemoryLog::new(100);
        log.append(vec![batch(2)]).unwrap();
        let mut r = MemoryReader::new(log.clone(), false);
        assert!(matches!(r.next(100).await.unwrap(), SourceEvent::Data { .. }));
        let waiting = tokio::spawn(async move { r.next(100).await.map(|e| matches!(e, SourceEvent::Data { .. })) });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        log.append(vec![batch(3)]).unwrap();
        assert!(waiting.await.unwrap().unwrap());
    }
}
