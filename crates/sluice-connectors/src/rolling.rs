//! Rolling files of a file-system sink (HDFS): rows are encoded in memory
//! (Parquet, JSON lines or CSV) into one open file per partition
//! directory; a file is finished when it reaches `rollover.size`, when it
//! is older than `rollover.interval`, or at the end. Finished files are
//! handed to the sink, which stores them under an in-progress name and
//! renames them when complete.
//!
//! The bytes held in memory are bounded: past `rollover.size` in total
//! over all open files, the largest one is finished early.

use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::SchemaRef;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use sluice_types::{Error, Result};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Open partition files at most (each finished early past this).
pub const OPEN_FILES_MAX: usize = 64;

/// How finished files are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileEncoding {
    Parquet,
    Jsonl,
    Csv,
}

impl FileEncoding {
    pub fn parse(text: &str) -> Result<Self> {
        match text.to_ascii_lowercase().as_str() {
            "parquet" => Ok(FileEncoding::Parquet),
            "jsonl" | "json" => Ok(FileEncoding::Jsonl),
            "csv" => Ok(FileEncoding::Csv),
            other => Err(Error::invalid_option(format!(
                "format '{other}' is not supported here; use parquet, jsonl or csv"
            ))),
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            FileEncoding::Parquet => "parquet",
            FileEncoding::Jsonl => "jsonl",
            FileEncoding::Csv => "csv",
        }
    }
}

/// When files roll, and how rows are split into directories.
#[derive(Debug, Clone)]
pub struct RollPolicy {
    pub encoding: FileEncoding,
    /// Finish a file at this many bytes (also the bound on buffered bytes).
    pub size_max: usize,
    /// Finish a file this long after its first row.
    pub interval: Duration,
    /// Column whose value names the directory (`col=value`).
    pub partition_by: Option<usize>,
}

/// A finished file: its partition directory (relative, "" for none) and bytes.
#[derive(Debug)]
pub struct FinishedFile {
    pub partition: String,
    pub bytes: Vec<u8>,
    pub rows: usize,
}

enum Encoder {
    Parquet(Box<ArrowWriter<Vec<u8>>>),
    Text { buf: Vec<u8>, encoding: FileEncoding },
}

impl Encoder {
    fn new(encoding: FileEncoding, schema: &SchemaRef) -> Result<Self> {
        Ok(match encoding {
            FileEncoding::Parquet => {
                let props = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
                let w = ArrowWriter::try_new(Vec::new(), schema.clone(), Some(props))
                    .map_err(|e| Error::internal(format!("parquet writer: {e}")))?;
                Encoder::Parquet(Box::new(w))
            }
            FileEncoding::Jsonl | FileEncoding::Csv => Encoder::Text {
                buf: Vec::new(),
                encoding,
            },
        })
    }

    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        match self {
            Encoder::Parquet(w) => w
                .write(batch)
                .map_err(|e| Error::internal(format!("parquet write: {e}"))),
            Encoder::Text { buf, encoding } => {
                if *encoding == FileEncoding::Jsonl {
                    let mut w = arrow::json::LineDelimitedWriter::new(&mut *buf);
                    w.write(batch)?;
                    w.finish()?;
                } else {
                    let header = buf.is_empty();
                    let mut w = arrow::csv::WriterBuilder::new().with_header(header).build(&mut *buf);
                    w.write(batch)?;
                }
                Ok(())
            }
        }
    }

    fn size(&self) -> usize {
        match self {
            Encoder::Parquet(w) => w.bytes_written() + w.in_progress_size(),
            Encoder::Text { buf, .. } => buf.len(),
        }
    }

    fn finish(self) -> Result<Vec<u8>> {
        match self {
            Encoder::Parquet(w) => w
                .into_inner()
                .map_err(|e| Error::internal(format!("parquet close: {e}"))),
            Encoder::Text { buf, .. } => Ok(buf),
        }
    }
}

struct OpenFile {
    encoder: Encoder,
    opened: Instant,
    rows: usize,
}

/// The open files of one sink instance.
pub struct RollingFiles {
    schema: SchemaRef,
    policy: RollPolicy,
    open: BTreeMap<String, OpenFile>,
}

impl RollingFiles {
    pub fn new(schema: SchemaRef, policy: RollPolicy) -> Self {
        RollingFiles {
            schema,
            policy,
            open: BTreeMap::new(),
        }
    }

    /// Adds rows; returns the files that became complete.
    pub fn write(&mut self, batch: &RecordBatch, now: Instant) -> Result<Vec<FinishedFile>> {
        let mut done = Vec::new();
        for (partition, rows) in self.split(batch)? {
            if !self.open.contains_key(&partition) {
                if self.open.len() >= OPEN_FILES_MAX {
                    let oldest = self
                        .open
                        .iter()
                        .min_by_key(|(_, f)| f.opened)
                        .map(|(p, _)| p.clone())
                        .expect("open files");
                    done.push(self.finish(&oldest)?);
                }
                let encoder = Encoder::new(self.policy.encoding, &self.schema)?;
                self.open.insert(
                    partition.clone(),
                    OpenFile {
                        encoder,
                        opened: now,
                        rows: 0,
                    },
                );
            }
            let file = self.open.get_mut(&partition).expect("just opened");
            file.encoder.write(&rows)?;
            file.rows += rows.num_rows();
            if file.encoder.size() >= self.policy.size_max {
                done.push(self.finish(&partition)?);
            }
        }
        // Bound the bytes held over all open files.
        while self.buffered() > self.policy.size_max {
            let largest = self
                .open
                .iter()
                .max_by_key(|(_, f)| f.encoder.size())
                .map(|(p, _)| p.clone())
                .expect("open files");
            done.push(self.finish(&largest)?);
        }
        Ok(done)
    }

    /// Files older than the rollover interval.
    pub fn due(&mut self, now: Instant) -> Result<Vec<FinishedFile>> {
        let old: Vec<String> = self
            .open
            .iter()
            .filter(|(_, f)| now.duration_since(f.opened) >= self.policy.interval)
            .map(|(p, _)| p.clone())
            .collect();
        old.iter().map(|p| self.finish(p)).collect()
    }

    /// Every open file.
    pub fn finish_all(&mut self) -> Result<Vec<FinishedFile>> {
        let all: Vec<String> = self.open.keys().cloned().collect();
        all.iter().map(|p| self.finish(p)).collect()
    }

    /// Bytes held in open files.
    pub fn buffered(&self) -> usize {
        self.open.values().map(|f| f.encoder.size()).sum()
    }

    fn finish(&mut self, partition: &str) -> Result<FinishedFile> {
        let file = self.open.remove(partition).expect("an open file");
        Ok(FinishedFile {
            partition: partition.to_string(),
            bytes: file.encoder.finish()?,
            rows: file.rows,
        })
    }

    /// The batch's rows by partition directory.
    fn split(&self, batch: &RecordBatch) -> Result<Vec<(String, RecordBatch)>> {
        let Some(col) = self.policy.partition_by else {
            return Ok(vec![(String::new(), batch.clone())]);
        };
        let name = self.schema.field(col).name().clone();
        let options = FormatOptions::default().with_null(NULL_PARTITION);
        let formatter = ArrayFormatter::try_new(batch.column(col).as_ref(), &options)?;
        let mut groups: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for row in 0..batch.num_rows() {
            let value = formatter.value(row).to_string();
            groups
                .entry(format!("{}={}", escape(&name), escape(&value)))
                .or_default()
                .push(row as u32);
        }
        if groups.len() == 1 {
            let (dir, _) = groups.into_iter().next().expect("one group");
            return Ok(vec![(dir, batch.clone())]);
        }
        groups
            .into_iter()
            .map(|(dir, rows)| Ok((dir, take_record_batch(batch, &UInt32Array::from(rows))?)))
            .collect()
    }
}

/// Hive's directory name for a NULL partition value.
pub const NULL_PARTITION: &str = "__HIVE_DEFAULT_PARTITION__";

/// Escapes a partition value for a directory name as Hive and Spark do
/// (`%3A` for `:`, which HDFS paths cannot hold, and so on).
pub fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, ' ' | '-' | '_' | '.' | '+' | ',') || !c.is_ascii() {
            out.push(c);
        } else {
            out.push_str(&format!("%{:02X}", c as u32));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use bytes::Bytes;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use std::sync::Arc;

    fn batch(keys: &[&str], values: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Int64, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(keys.to_vec())),
                Arc::new(Int64Array::from(values.to_vec())),
            ],
        )
        .unwrap()
    }

    fn policy(encoding: FileEncoding, size_max: usize, partition_by: Option<usize>) -> RollPolicy {
        RollPolicy {
            encoding,
            size_max,
            interval: Duration::from_secs(60),
            partition_by,
        }
    }

    fn read_parquet(bytes: Vec<u8>) -> Vec<RecordBatch> {
        ParquetRecordBatchReaderBuilder::try_new(Bytes::from(bytes))
            .unwrap()
            .build()
            .unwrap()
            .collect::<std::result::Result<Vec<_>, _>>()
            .unwrap()
    }

    #[test]
    fn partitions_by_value_and_parquet_round_trips() {
        let b = batch(&["a", "b:1", "a"], &[1, 2, 3]);
        let mut files = RollingFiles::new(b.schema(), policy(FileEncoding::Parquet, 1 << 20, Some(0)));
        let t0 = Instant::now();
        assert!(files.write(&b, t0).unwrap().is_empty());
        let mut done = files.finish_all().unwrap();
        done.sort_by(|a, b| a.partition.cmp(&b.partition));
        assert_eq!(done[0].partition, "k=a");
        assert_eq!(done[1].partition, "k=b%3A1");
        let a = read_parquet(std::mem::take(&mut done[0].bytes));
        let v = a[0].column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(v.values().to_vec(), vec![1, 3]);
        assert_eq!(done[0].rows, 2);
    }

    #[test]
    fn rolls_by_size_and_by_age() {
        let b = batch(&["x"; 100], &[7; 100]);
        let mut files = RollingFiles::new(b.schema(), policy(FileEncoding::Jsonl, 3000, None));
        let t0 = Instant::now();
        let mut finished = 0;
        let mut rows = 0;
        for _ in 0..10 {
            for f in files.write(&b, t0).unwrap() {
                assert!(f.bytes.len() >= 3000, "rolled early: {}", f.bytes.len());
                finished += 1;
                rows += f.rows;
            }
            assert!(files.buffered() <= 3000);
        }
        assert!(finished >= 3, "{finished}");
        assert!(files.due(t0 + Duration::from_secs(59)).unwrap().is_empty());
        let late = files.due(t0 + Duration::from_secs(61)).unwrap();
        rows += late.iter().map(|f| f.rows).sum::<usize>();
        assert_eq!(rows, 1000, "every row is in exactly one finished file");
    }

    #[test]
    fn open_files_are_bounded() {
        let mut files = RollingFiles::new(batch(&[], &[]).schema(), policy(FileEncoding::Csv, 1 << 30, Some(0)));
        let t0 = Instant::now();
        let mut finished = 0;
        for i in 0..(OPEN_FILES_MAX + 10) {
            let key = format!("p{i}");
            finished += files.write(&batch(&[key.as_str()], &[i as i64]), t0).unwrap().len();
        }
        assert_eq!(finished, 10);
        assert_eq!(files.finish_all().unwrap().len(), OPEN_FILES_MAX);
    }

    #[test]
    fn csv_files_have_one_header() {
        let mut files = RollingFiles::new(batch(&[], &[]).schema(), policy(FileEncoding::Csv, 1 << 20, None));
        let t0 = Instant::now();
        files.write(&batch(&["a"], &[1]), t0).unwrap();
        files.write(&batch(&["b"], &[2]), t0).unwrap();
        let f = files.finish_all().unwrap().remove(0);
        assert_eq!(String::from_utf8(f.bytes).unwrap(), "k,v\na,1\nb,2\n");
    }
}
