//! The benchmark's end-to-end latency probe, not a product feature: a
//! `blackhole` sink with `'latency.column'` hands every batch it discards
//! to a [`LatencyRecorder`], which measures wall-clock now minus each row's
//! event time in that column (rounded up to the end of its window with
//! `'latency.window'`), skips a warm-up (`'latency.warmup'`), and writes
//! p50/p99/max and the worst 100-ms slots to `'latency.file'` (JSON) when
//! the input ends. `sluice-bench`'s latency runs create such a sink over
//! pgwire and read the file; it lives here because the sink runs inside the
//! server process, which does not depend on the benchmark crate.

use arrow::record_batch::RecordBatch;
use sluice_types::{Error, Result};
use std::path::PathBuf;

/// Latency histogram buckets: 100 µs each, up to [`LATENCY_BUCKETS`] × 100 µs
/// (60 s); slower rows count in the last bucket.
pub const LATENCY_BUCKETS: usize = 600_000;
/// Rows in the first seconds after the first row are warm-up, not measured
/// (unless `'latency.warmup'` says how long).
pub const LATENCY_WARMUP: std::time::Duration = std::time::Duration::from_secs(2);
/// The measured time is also cut into slots of this length, each keeping
/// its worst latency, so the report shows *when* rows were late (one stall
/// or a steady tail).
pub const LATENCY_SLOT: std::time::Duration = std::time::Duration::from_millis(100);
/// Slots kept (one hour); later rows still count in the histogram.
pub const LATENCY_SLOTS_MAX: usize = 36_000;
/// The worst slots written to the report.
const LATENCY_WORST_SLOTS: usize = 10;

/// Which column holds a row's time, and the window its result closes.
#[derive(Clone, Copy)]
struct LatencyWalk {
    column: usize,
    window_ms: i64,
}

impl LatencyWalk {
    /// Calls `f` with each row's latency in µs at wall-clock `now_us`, or
    /// `None` for a row whose (window-end) time is still ahead of the clock
    /// (a window flushed before its end, at the end of input).
    fn for_each(self, batch: &RecordBatch, now_us: i64, mut f: impl FnMut(Option<u64>)) -> Result<()> {
        for t in sluice_dataflow::time::timestamps_ms(batch.column(self.column))?
            .into_iter()
            .flatten()
        {
            let w = self.window_ms;
            let t = if w > 0 {
                t.div_euclid(w) * w + if t % w == 0 { 0 } else { w }
            } else {
                t
            };
            f((t * 1000 <= now_us).then(|| (now_us - t * 1000) as u64));
        }
        Ok(())
    }
}

/// End-to-end latency of the rows reaching a blackhole sink.
pub struct LatencyRecorder {
    walk: LatencyWalk,
    path: PathBuf,
    buckets: Vec<u64>,
    rows: u64,
    /// Rows whose (window-end) time is still ahead of the clock.
    rows_early: u64,
    max_us: u64,
    first_row: Option<std::time::Instant>,
    /// How long after the first row measuring starts.
    warmup: std::time::Duration,
    /// Worst latency (µs) of the rows during the warm-up: reported, so a
    /// slow start is seen even though it is not measured.
    warmup_max_us: u64,
    /// Worst latency (µs) per [`LATENCY_SLOT`] since the warm-up ended.
    slots: Vec<u64>,
}

impl LatencyRecorder {
    /// From the sink's options, if `'latency.column'` is set.
    pub fn from_options(
        options: &std::collections::BTreeMap<String, String>,
        schema: &arrow::datatypes::SchemaRef,
    ) -> Result<Option<Self>> {
        let Some(column) = options.get("latency.column") else {
            return Ok(None);
        };
        let index = schema.index_of(column).map_err(|_| {
            Error::invalid_option(format!(
                "'latency.column' = '{column}' is not a column of the sink's rows"
            ))
        })?;
        let window_ms = match options.get("latency.window") {
            None => 0,
            Some(v) => sluice_types::parse_duration_ms(v)
                .ok_or_else(|| Error::invalid_option(format!("'latency.window' must be a duration, got '{v}'")))?
                as i64,
        };
        let warmup = match options.get("latency.warmup") {
            None => LATENCY_WARMUP,
            Some(v) => std::time::Duration::from_millis(
                sluice_types::parse_duration_ms(v)
                    .ok_or_else(|| Error::invalid_option(format!("'latency.warmup' must be a duration, got '{v}'")))?,
            ),
        };
        let path = options
            .get("latency.file")
            .ok_or_else(|| Error::invalid_option("'latency.column' needs 'latency.file'"))?;
        Ok(Some(LatencyRecorder {
            walk: LatencyWalk {
                column: index,
                window_ms,
            },
            path: PathBuf::from(path),
            buckets: vec![0; LATENCY_BUCKETS],
            rows: 0,
            rows_early: 0,
            max_us: 0,
            first_row: None,
            warmup,
            warmup_max_us: 0,
            slots: Vec::new(),
        }))
    }

    /// Records a batch reaching the sink now.
    pub fn record(&mut self, batch: &RecordBatch) -> Result<()> {
        let first = *self.first_row.get_or_insert_with(std::time::Instant::now);
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        match first.elapsed().checked_sub(self.warmup) {
            Some(measured) => self.record_at(batch, measured, now_us),
            None => self.record_warmup(batch, now_us),
        }
    }

    /// Keeps only the worst latency of a batch arriving during the warm-up.
    fn record_warmup(&mut self, batch: &RecordBatch, now_us: i64) -> Result<()> {
        let mut worst = self.warmup_max_us;
        self.walk
            .for_each(batch, now_us, |us| worst = worst.max(us.unwrap_or(0)))?;
        self.warmup_max_us = worst;
        Ok(())
    }

    /// Records a batch arriving `measured` after the warm-up, at wall-clock
    /// `now_us` (µs since the epoch).
    fn record_at(&mut self, batch: &RecordBatch, measured: std::time::Duration, now_us: i64) -> Result<()> {
        let slot = (measured.as_micros() / LATENCY_SLOT.as_micros()) as usize;
        let mut batch_max_us = 0;
        let (mut rows, mut rows_early) = (0, 0);
        let buckets = &mut self.buckets;
        self.walk.for_each(batch, now_us, |us| match us {
            // A window flushed before its end: no latency to measure.
            None => rows_early += 1,
            Some(us) => {
                buckets[((us / 100) as usize).min(LATENCY_BUCKETS - 1)] += 1;
                batch_max_us = batch_max_us.max(us);
                rows += 1;
            }
        })?;
        self.rows += rows;
        self.rows_early += rows_early;
        self.max_us = self.max_us.max(batch_max_us);
        if slot < LATENCY_SLOTS_MAX {
            if self.slots.len() <= slot {
                self.slots.resize(slot + 1, 0);
            }
            self.slots[slot] = self.slots[slot].max(batch_max_us);
        }
        Ok(())
    }

    /// The worst slots, worst first: (seconds after the warm-up, ms).
    pub fn worst_slots(&self) -> Vec<(f64, f64)> {
        let mut slots: Vec<(usize, u64)> = self.slots.iter().copied().enumerate().collect();
        slots.sort_by_key(|(i, us)| (std::cmp::Reverse(*us), *i));
        slots
            .into_iter()
            .take(LATENCY_WORST_SLOTS)
            .map(|(i, us)| {
                (
                    (i as u128 * LATENCY_SLOT.as_millis()) as f64 / 1000.0,
                    us as f64 / 1000.0,
                )
            })
            .collect()
    }

    /// The latency (ms, bucket upper bound) below which `q` of the rows are.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        let target = ((self.rows as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= target {
                return (i + 1) as f64 / 10.0;
            }
        }
        self.max_us as f64 / 1000.0
    }

    /// Writes the report to `'latency.file'`.
    pub fn write(&self) -> Result<()> {
        let summary = serde_json::json!({
            "rows": self.rows,
            "rows_early": self.rows_early,
            "p50_ms": self.quantile_ms(0.50),
            "p99_ms": self.quantile_ms(0.99),
            "max_ms": self.max_us as f64 / 1000.0,
            "warmup_s": self.warmup.as_secs_f64(),
            "warmup_max_ms": self.warmup_max_us as f64 / 1000.0,
            "worst_slots": self.worst_slots().iter().map(|(at_s, ms)| serde_json::json!({ "at_s": at_s, "max_ms": ms })).collect::<Vec<_>>(),
        });
        std::fs::write(&self.path, summary.to_string())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::TimestampMillisecondArray;
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use std::sync::Arc;
    use std::time::Duration;

    /// One millisecond timestamp column, `t`.
    fn schema() -> arrow::datatypes::SchemaRef {
        Arc::new(Schema::new(vec![Field::new(
            "t",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        )]))
    }

    /// A recorder's options over `t`, plus `extra`.
    fn options(extra: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
        let mut options = std::collections::BTreeMap::from([
            ("latency.column".to_string(), "t".to_string()),
            ("latency.file".to_string(), "/dev/null".to_string()),
        ]);
        options.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        options
    }

    fn recorder(window: Option<&str>) -> LatencyRecorder {
        let extra: Vec<(&str, &str)> = window.map(|w| ("latency.window", w)).into_iter().collect();
        LatencyRecorder::from_options(&options(&extra), &schema())
            .unwrap()
            .unwrap()
    }

    fn batch(times_ms: &[i64]) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![Arc::new(TimestampMillisecondArray::from(times_ms.to_vec()))],
        )
        .unwrap()
    }

    #[test]
    fn quantiles_and_the_worst_slots_come_from_the_rows() {
        let mut r = recorder(None);
        // 98 rows 1 ms late in slot 0, then one stall: 2 rows 50 and 80 ms
        // late in slot 12 (1.2 s), and 1 row 5 ms late in slot 30.
        let now_ms = 1_000_000;
        r.record_at(&batch(&[now_ms - 1; 98]), Duration::ZERO, now_ms * 1000)
            .unwrap();
        r.record_at(
            &batch(&[now_ms - 50, now_ms - 80]),
            Duration::from_millis(1_250),
            now_ms * 1000,
        )
        .unwrap();
        r.record_at(&batch(&[now_ms - 5]), Duration::from_millis(3_010), now_ms * 1000)
            .unwrap();
        assert_eq!(r.rows, 101);
        assert_eq!(r.quantile_ms(0.50), 1.1, "bucket upper bound of 1 ms");
        assert_eq!(r.quantile_ms(0.99), 50.1);
        assert_eq!(r.max_us, 80_000);
        assert_eq!(r.worst_slots()[..3], [(1.2, 80.0), (3.0, 5.0), (0.0, 1.0)]);
    }

    #[test]
    fn a_window_result_is_late_from_its_window_end_and_early_flushes_do_not_count() {
        let mut r = recorder(Some("10s"));
        let now_ms = 1_000_000;
        // Row times inside the window [990 000, 1 000 000) end at 1 000 000:
        // 0 ms late; one of the next window is flushed early.
        r.record_at(&batch(&[990_001, 999_999, 1_000_001]), Duration::ZERO, now_ms * 1000)
            .unwrap();
        assert_eq!((r.rows, r.rows_early, r.max_us), (2, 1, 0));
    }

    #[test]
    fn the_warm_up_is_an_option_and_its_worst_row_is_kept_apart() {
        let mut r = LatencyRecorder::from_options(&options(&[("latency.warmup", "22s")]), &schema())
            .unwrap()
            .unwrap();
        assert_eq!(r.warmup, Duration::from_secs(22));
        assert_eq!(recorder(None).warmup, LATENCY_WARMUP);
        let now_ms = 1_000_000;
        r.record_warmup(&batch(&[now_ms - 4_000, now_ms - 7, now_ms + 5]), now_ms * 1000)
            .unwrap();
        r.record_warmup(&batch(&[now_ms - 9]), now_ms * 1000).unwrap();
        assert_eq!((r.warmup_max_us, r.rows, r.rows_early), (4_000_000, 0, 0));
        assert_eq!(r.quantile_ms(0.99), 0.0, "no measured row");
        let e = LatencyRecorder::from_options(&options(&[("latency.warmup", "soon")]), &schema())
            .err()
            .unwrap();
        assert!(e.to_string().contains("'latency.warmup' must be a duration"), "{e}");
        // CREATE SINK checks option names before the recorder reads them.
        assert!(
            crate::registry::find_sink("blackhole")
                .unwrap()
                .sink_options()
                .unwrap()
                .knows("latency.warmup")
        );
    }

    #[test]
    fn slots_past_the_bound_are_not_kept_but_rows_still_count() {
        let mut r = recorder(None);
        let past = LATENCY_SLOT * LATENCY_SLOTS_MAX as u32;
        r.record_at(&batch(&[999_000]), past, 1_000_000 * 1000).unwrap();
        assert_eq!(r.rows, 1);
        assert!(r.slots.is_empty());
    }
}
