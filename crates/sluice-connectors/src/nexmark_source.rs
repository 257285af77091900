//! The `nexmark` source connector: the generator behind a [`SourceReader`],
//! paced to `'events.per.second'` (0 = as fast as possible).

use crate::nexmark::{NexmarkConfig, NexmarkGenerator, NexmarkTable};
use crate::options::u64_option;
use async_trait::async_trait;
use sluice_dataflow::source::{SourceEvent, SourceReader};
use sluice_types::{Error, Result};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Parsed options of a nexmark stream.
#[derive(Debug, Clone)]
pub struct NexmarkOptions {
    pub table: NexmarkTable,
    pub config: NexmarkConfig,
    /// Global event rate over all instances; 0 = unpaced.
    pub events_per_second: u64,
    /// `'base.time' = 'now'`: event time is wall-clock time — event 0 at
    /// the reader's start, event n when it is due at the pace (for latency
    /// measurements: event time is then the event's creation time).
    pub base_time_now: bool,
}

/// Parses and checks a nexmark stream's options.
pub fn nexmark_config(options: &BTreeMap<String, String>) -> Result<NexmarkOptions> {
    let table = NexmarkTable::parse(options.get("table").ok_or_else(|| {
        Error::invalid_option("the nexmark connector needs a 'table' option: bid, auction or person")
    })?)?;
    let mut config = NexmarkConfig::default();
    if let Some(seed) = u64_option(options, "seed")? {
        config.seed = seed;
    }
    config.events_max = u64_option(options, "events.max")?;
    let base_time_now = options
        .get("base.time")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("now"));
    if !base_time_now && let Some(base) = u64_option(options, "base.time")? {
        config.base_time_ms = base as i64;
    }
    let events_per_second = u64_option(options, "events.per.second")?.unwrap_or(0);
    config.validate()?;
    Ok(NexmarkOptions {
        table,
        config,
        events_per_second,
        base_time_now,
    })
}

/// One instance's reader.
pub struct NexmarkReader {
    generator: NexmarkGenerator,
    events_per_second: u64,
    started: Instant,
    /// Events owned by earlier instances are interleaved; pacing uses the
    /// global event number, so instances stay in step.
    first_position: u64,
}

impl NexmarkReader {
    pub fn new(options: &NexmarkOptions, instance: u32, parallelism: u32) -> Self {
        let mut config = options.config.clone();
        if options.base_time_now {
            config.base_time_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            if options.events_per_second > 0 {
                config.events_per_second_for_timestamps = options.events_per_second;
            }
        }
        let generator = NexmarkGenerator::new(config, options.table, instance, parallelism);
        let first_position = generator.position();
        NexmarkReader {
            generator,
            events_per_second: options.events_per_second,
            started: Instant::now(),
            first_position,
        }
    }

    /// How long to wait before the next event is due (pacing).
    fn wait_before_next(&self) -> Option<Duration> {
        if self.events_per_second == 0 {
            return None;
        }
        let due_after = (self.generator.position() - self.first_position) as f64 / self.events_per_second as f64;
        let elapsed = self.started.elapsed().as_secs_f64();
        (due_after > elapsed).then(|| Duration::from_secs_f64(due_after - elapsed))
    }

    /// Rows to take now so as not to run ahead of the pace.
    fn rows_due(&self, batch_rows_max: usize) -> usize {
        if self.events_per_second == 0 {
            return batch_rows_max;
        }
        let due = (self.started.elapsed().as_secs_f64() * self.events_per_second as f64) as u64;
        let ahead = due.saturating_sub(self.generator.position() - self.first_position);
        (ahead as usize).clamp(1, batch_rows_max)
    }
}

#[async_trait]
impl SourceReader for NexmarkReader {
    fn partitions(&self) -> usize {
        1
    }

    fn snapshot(&mut self) -> Result<sluice_dataflow::checkpoint::TaskState> {
        let mut state = sluice_dataflow::checkpoint::TaskState::default();
        state.put_bytes("nexmark.position", self.generator.position().to_le_bytes().to_vec());
        Ok(state)
    }

    fn restore(&mut self, state: &sluice_dataflow::checkpoint::TaskState) -> Result<()> {
        if let Some(b) = state.bytes("nexmark.position") {
            let position = u64::from_le_bytes(b.try_into().map_err(|_| Error::internal("bad nexmark position"))?);
            self.generator.seek(position);
        }
        Ok(())
    }

    async fn next(&mut self, batch_rows_max: usize) -> Result<SourceEvent> {
        if let Some(wait) = self.wait_before_next() {
            tokio::time::sleep(wait).await;
        }
        let rows = self.rows_due(batch_rows_max);
        match self.generator.next_batch(rows) {
            Some(batch) => Ok(SourceEvent::Data { partition: 0, batch }),
            None => Ok(SourceEvent::End),
        }
    }
}
