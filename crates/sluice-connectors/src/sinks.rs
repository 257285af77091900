//! Sinks: `client` (a session's result stream), `memory` (a derived
//! stream's log), `file`, `blackhole`.

use crate::memory::MemoryLog;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use sluice_dataflow::{Operator, OperatorContext};
use sluice_types::{Error, Result, Watermark};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Feeds a session's bounded result channel; a full channel backpressures
/// the pipeline, a closed one (client gone) stops it.
pub struct ClientSink {
    pub tx: Option<mpsc::Sender<RecordBatch>>,
}

#[async_trait]
impl Operator for ClientSink {
    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        let Some(tx) = &self.tx else { return Ok(()) };
        tx.send(batch).await.map_err(|_| Error::internal("client went away"))
    }
    async fn process_watermark(&mut self, _w: Watermark, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        Ok(())
    }
    async fn process_end_of_input(&mut self, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.tx = None;
        Ok(())
    }
}

/// Appends to a derived stream's memory log, watermarks included.
pub struct MemorySink {
    pub log: Arc<MemoryLog>,
}

#[async_trait]
impl Operator for MemorySink {
    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.log.append(vec![batch]).map(|_| ())
    }
    async fn process_watermark(&mut self, w: Watermark, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.log.append_watermark(w);
        Ok(())
    }
    async fn process_end_of_input(&mut self, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.log.append_end();
        Ok(())
    }
}

/// Discards rows (counted as the task's rows in).
pub struct BlackholeSink;

#[async_trait]
impl Operator for BlackholeSink {
    async fn process_batch(
        &mut self,
        _batch: RecordBatch,
        _input: usize,
        _ctx: &mut OperatorContext<'_>,
    ) -> Result<()> {
        Ok(())
    }
    async fn process_watermark(&mut self, _w: Watermark, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        Ok(())
    }
}

/// Text formats of the file sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    Json,
    Csv,
}

impl FileFormat {
    pub fn parse(text: &str) -> Result<Self> {
        match text.to_ascii_lowercase().as_str() {
            "json" | "jsonl" => Ok(FileFormat::Json),
            "csv" => Ok(FileFormat::Csv),
            other => Err(Error::invalid_option(format!(
                "file sink format '{other}' is not supported; use json or csv"
            ))),
        }
    }
}

/// Appends rows to a local file as JSON lines or CSV (with a header).
/// Instance `i > 0` of a parallel sink writes `<path>.<i>`.
pub struct FileSink {
    format: FileFormat,
    writer: BufWriter<File>,
    header_written: bool,
}

impl FileSink {
    pub fn open(path: &str, format: FileFormat, instance: u32) -> Result<Self> {
        let path = if instance == 0 {
            PathBuf::from(path)
        } else {
            PathBuf::from(format!("{path}.{instance}"))
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let header_written = path.exists() && std::fs::metadata(&path)?.len() > 0;
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(FileSink {
            format,
            writer: BufWriter::new(file),
            header_written,
        })
    }

    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        match self.format {
            FileFormat::Json => {
                let mut w = arrow::json::LineDelimitedWriter::new(&mut self.writer);
                w.write(batch)?;
                w.finish()?;
            }
            FileFormat::Csv => {
                let mut w = arrow::csv::WriterBuilder::new()
                    .with_header(!self.header_written)
                    .build(&mut self.writer);
                w.write(batch)?;
                self.header_written = true;
            }
        }
        self.writer.flush()?;
        Ok(())
    }
}

#[async_trait]
impl Operator for FileSink {
    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.write(&batch)
    }
    async fn process_watermark(&mut self, _w: Watermark, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        Ok(())
    }
    async fn process_end_of_input(&mut self, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.writer.flush()?;
        Ok(())
    }
}
