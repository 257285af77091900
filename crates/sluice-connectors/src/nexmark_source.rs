//! The `nexmark` source connector: the generator behind a [`SourceReader`],
//! paced to `'events.per.second'` (0 = as fast as possible).

use crate::nexmark::{EmittedBefore, NexmarkConfig, NexmarkGenerator, NexmarkTable};
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
    /// `'scan.startup.timestamp'`: start at the first event at or after
    /// this event time (ms), unless restored.
    pub start_ms: Option<i64>,
    /// `'event.rate'` was given: it decides event time's spacing even when
    /// `'base.time' = 'now'` would take the pace.
    pub event_rate_set: bool,
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
    // Flink's Nexmark model (`first-event.rate` = the generation rate) is
    // 'event.rate' = the pace; without it event time advances at 10 000
    // events a second whatever the pace (the tests' fixed model).
    let event_rate = u64_option(options, "event.rate")?;
    if event_rate == Some(0) {
        return Err(Error::invalid_option(
            "nexmark 'event.rate' must be at least 1 event a second",
        ));
    }
    if let Some(rate) = event_rate {
        config.events_per_second_for_timestamps = rate;
    }
    let start_ms = options
        .get("scan.startup.timestamp")
        .map(|t| crate::kafka::parse_timestamp_ms(t))
        .transpose()?;
    if start_ms.is_some() && base_time_now {
        return Err(Error::invalid_option(
            "'scan.startup.timestamp' needs a fixed 'base.time': with 'now' event time is the wall clock",
        ));
    }
    config.validate()?;
    Ok(NexmarkOptions {
        table,
        config,
        events_per_second,
        base_time_now,
        start_ms,
        event_rate_set: event_rate.is_some(),
    })
}

const POSITION_KEY: &str = "nexmark.position";
/// `(instance, parallelism)` of the snapshot's reader.
const SPLIT_KEY: &str = "nexmark.split";
const EMITTED_KEY: &str = "nexmark.emitted_before";

fn position_of(state: &sluice_dataflow::checkpoint::TaskState) -> Result<Option<u64>> {
    state
        .bytes(POSITION_KEY)
        .map(|b| {
            b.try_into()
                .map(u64::from_le_bytes)
                .map_err(|_| Error::internal("bad nexmark position"))
        })
        .transpose()
}

/// The number of the first event whose event time is at or after
/// `start_ms` (event time rises with the number).
fn first_event_at(generator: &NexmarkGenerator, start_ms: i64) -> u64 {
    let (mut lo, mut hi) = (0u64, 1u64 << 52);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if generator.event_time_ms(mid) < start_ms {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// A paced reader woken this much after its next event fell due logs it
/// (debug level): its worker did not get to the timer in time.
const WOKE_LATE: Duration = Duration::from_millis(5);

/// One instance's reader.
pub struct NexmarkReader {
    generator: NexmarkGenerator,
    events_per_second: u64,
    started: Instant,
    /// Events owned by earlier instances are interleaved; pacing uses the
    /// global event number, so instances stay in step.
    first_position: u64,
    instance: u32,
    parallelism: u32,
}

impl NexmarkReader {
    /// The reader of instance `instance` of `parallelism`; the string
    /// columns numbered in `unread` are left empty (no query reads them).
    pub fn new(options: &NexmarkOptions, instance: u32, parallelism: u32, unread: &[usize]) -> Self {
        let mut config = options.config.clone();
        if options.base_time_now {
            config.base_time_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            if options.events_per_second > 0 && !options.event_rate_set {
                config.events_per_second_for_timestamps = options.events_per_second;
            }
        }
        let mut generator = NexmarkGenerator::new(config, options.table, instance, parallelism);
        generator.skip_columns(unread);
        if let Some(start) = options.start_ms {
            generator.seek(first_event_at(&generator, start));
        }
        let first_position = generator.position();
        NexmarkReader {
            generator,
            events_per_second: options.events_per_second,
            started: Instant::now(),
            first_position,
            instance,
            parallelism: parallelism.max(1),
        }
    }

    /// Seconds after the start at which global event `n` is due (pacing).
    fn due_after(&self, n: u64) -> f64 {
        n.saturating_sub(self.first_position) as f64 / self.events_per_second as f64
    }

    /// One past the last global event number due now.
    fn due_limit(&self) -> u64 {
        let due = (self.started.elapsed().as_secs_f64() * self.events_per_second as f64) as u64;
        self.first_position.saturating_add(due).saturating_add(1)
    }
}

#[async_trait]
impl SourceReader for NexmarkReader {
    fn partitions(&self) -> usize {
        1
    }

    /// The position, this instance's place in the split (so another
    /// parallelism can take over), and what an earlier split emitted ahead
    /// of it, while that matters.
    fn snapshot(&mut self) -> Result<sluice_dataflow::checkpoint::TaskState> {
        let mut state = sluice_dataflow::checkpoint::TaskState::default();
        state.put_bytes(POSITION_KEY, self.generator.position().to_le_bytes().to_vec());
        state.put_json(SPLIT_KEY, &(self.instance, self.parallelism))?;
        if !self.generator.emitted_before().is_empty() {
            state.put_json(EMITTED_KEY, &self.generator.emitted_before())?;
        }
        Ok(state)
    }

    /// After a rescale: every event below the lowest old position was
    /// emitted; between it and the highest, an event was emitted iff it was
    /// below its old owner's position (or an earlier split's). This
    /// instance goes on from the lowest, skipping those.
    fn restore_rescaled(&mut self, parts: &[sluice_dataflow::checkpoint::TaskState]) -> Result<()> {
        let mut split: Vec<Option<u64>> = Vec::new();
        let mut emitted: Vec<EmittedBefore> = Vec::new();
        for part in parts {
            let (instance, parallelism): (u32, u32) = part.json(SPLIT_KEY)?.ok_or_else(|| {
                Error::internal(
                    "this Nexmark checkpoint predates re-splitting; it restores at its own parallelism only",
                )
            })?;
            split.resize(parallelism as usize, None);
            split[instance as usize] = Some(position_of(part)?.unwrap_or(0));
            for e in part.json::<Vec<EmittedBefore>>(EMITTED_KEY)?.unwrap_or_default() {
                if !emitted.contains(&e) {
                    emitted.push(e);
                }
            }
        }
        let positions: Vec<u64> = split
            .into_iter()
            .map(|p| p.ok_or_else(|| Error::internal("a Nexmark checkpoint misses an instance's position")))
            .collect::<Result<_>>()?;
        let layer = EmittedBefore { positions };
        let start = emitted
            .iter()
            .map(EmittedBefore::start)
            .chain([layer.start()])
            .min()
            .unwrap_or(0);
        emitted.push(layer);
        self.generator.resume(start, emitted);
        self.first_position = self.generator.position();
        self.started = Instant::now();
        Ok(())
    }

    fn restore(&mut self, state: &sluice_dataflow::checkpoint::TaskState) -> Result<()> {
        if let Some(position) = position_of(state)? {
            let emitted = state.json::<Vec<EmittedBefore>>(EMITTED_KEY)?.unwrap_or_default();
            self.generator.resume(position, emitted);
            // Pace on from the restored position: counted from the first
            // position, the events before it would all be "due" only after
            // the time they took the first time, and the reader would
            // emit nothing for that long.
            self.first_position = self.generator.position();
            self.started = Instant::now();
        }
        Ok(())
    }

    async fn next(&mut self, batch_rows_max: usize) -> Result<SourceEvent> {
        if self.events_per_second == 0 {
            return Ok(match self.generator.next_batch(batch_rows_max) {
                Some(batch) => SourceEvent::Data { partition: 0, batch },
                None => SourceEvent::End,
            });
        }
        // Paced: emit every one of this instance's events due by now, never
        // one ahead of time, once the next has waited `pacing::LINGER` or a
        // full batch is due (see `pacing`). Sleeps on tokio's timer, which
        // ticks in milliseconds. (A clock thread of its own, ticking every
        // 0.5 ms, was tried: on two cores it is a third thread, and while
        // both workers ran its wake-ups waited for the kernel's next tick —
        // 5–9 ms late in q0 latency runs, every source waking late with it.
        // A worker fires due timers whenever it runs out of tasks and every
        // few dozen polls, and source polls are one batch long.)
        loop {
            if let Some(event) = self.next_paced(batch_rows_max).await {
                return Ok(event);
            }
        }
    }
}

impl NexmarkReader {
    /// The next paced batch, or `None` when the events due were all ones
    /// an earlier split emitted (skipped; the caller asks again).
    async fn next_paced(&mut self, batch_rows_max: usize) -> Option<SourceEvent> {
        let Some(next) = self.generator.next_event() else {
            return Some(SourceEvent::End);
        };
        let at = |n: u64| self.started + Duration::from_secs_f64(self.due_after(n));
        // The global number of this instance's last event of a full batch
        // (the instances' events interleave; about evenly).
        let full = next.saturating_add((batch_rows_max.max(1) as u64 - 1) * u64::from(self.parallelism));
        let due = crate::pacing::emit_at(at(next), at(full));
        if Instant::now() < due {
            tokio::time::sleep_until(due.into()).await;
            let late = due.elapsed();
            if late >= WOKE_LATE {
                tracing::debug!(late_us = late.as_micros() as u64, "paced nexmark reader woke late");
            }
        }
        let limit = self.due_limit().max(next + 1);
        match self.generator.next_batch_before(batch_rows_max, limit) {
            Some(batch) => Some(SourceEvent::Data { partition: 0, batch }),
            None if self.generator.next_event().is_none() => Some(SourceEvent::End),
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_dataflow::time::timestamps_ms;

    /// `'event.rate'` spaces event time: event n is n / rate s after the
    /// base time (here 1 000 000 events/s: 1 µs apart, 1 000 a millisecond),
    /// the default is 10 000 a second, and 0 is refused.
    #[test]
    fn event_rate_spaces_event_time() {
        let opts = |extra: &[(&str, &str)]| {
            let mut o: BTreeMap<String, String> = [("table", "bid"), ("base.time", "1000000")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            o.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            o
        };
        let fast = nexmark_config(&opts(&[("event.rate", "1000000")])).unwrap();
        let generator = NexmarkGenerator::new(fast.config.clone(), fast.table, 0, 1);
        assert_eq!(generator.event_time_ms(0), 1_000_000);
        assert_eq!(generator.event_time_ms(999), 1_000_000);
        assert_eq!(generator.event_time_ms(1_000), 1_000_001);
        assert_eq!(generator.event_time_ms(5_000_000), 1_005_000);
        let fixed = nexmark_config(&opts(&[])).unwrap();
        let generator = NexmarkGenerator::new(fixed.config.clone(), fixed.table, 0, 1);
        assert_eq!(generator.event_time_ms(10_000), 1_001_000);
        let e = nexmark_config(&opts(&[("event.rate", "0")])).unwrap_err();
        assert!(e.to_string().contains("'event.rate'"), "{e}");
        // With 'base.time' = 'now' and a pace, an explicit rate still wins.
        let paced = nexmark_config(&opts(&[
            ("base.time", "now"),
            ("events.per.second", "500"),
            ("event.rate", "7"),
        ]))
        .unwrap();
        let reader = NexmarkReader::new(&paced, 0, 1, &[]);
        assert_eq!(
            reader.generator.event_time_ms(7) - reader.generator.event_time_ms(0),
            1000
        );
    }

    /// Bids at `rate` events/s, `max` events, stamped with wall-clock time.
    fn paced_bids(rate: &str, max: &str) -> NexmarkOptions {
        let options: BTreeMap<String, String> = [
            ("table", "bid"),
            ("events.per.second", rate),
            ("events.max", max),
            ("base.time", "now"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        nexmark_config(&options).unwrap()
    }

    /// A paced reader restored far into its stream (as after a checkpoint
    /// or an `ALTER PIPELINE`) paces on from there: its next rows come at
    /// once, not after the time the events before the position took.
    #[tokio::test]
    async fn a_restored_paced_reader_paces_on_from_its_position() {
        let options: BTreeMap<String, String> = [("table", "bid"), ("events.per.second", "1000")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let config = nexmark_config(&options).unwrap();
        let mut state = sluice_dataflow::checkpoint::TaskState::default();
        state.put_bytes("nexmark.position", 60_000u64.to_le_bytes().to_vec());
        let mut reader = NexmarkReader::new(&config, 0, 1, &[]);
        reader.restore(&state).unwrap();
        // 60 000 events are 60 s at this rate; the next few are due within ms.
        let first = tokio::time::timeout(std::time::Duration::from_secs(5), reader.next(8192))
            .await
            .expect("rows within 5 s of the restore")
            .unwrap();
        assert!(matches!(first, SourceEvent::Data { .. }), "{first:?}");
        assert!(reader.generator.position() > 60_000);
    }

    /// `'scan.startup.timestamp'` starts every instance at the first event
    /// at or after the time: no row before it, and the first rows of all
    /// instances together begin right at it.
    #[tokio::test]
    async fn a_start_time_skips_every_event_before_it() {
        let options = |start: &str| -> BTreeMap<String, String> {
            [
                ("table", "bid"),
                ("events.max", "20000"),
                ("scan.startup.timestamp", start),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
        };
        let base = NexmarkConfig::default().base_time_ms;
        // Event n is at base + n / 10 000 s: 1 s in is event 10 000.
        let config = nexmark_config(&options(&(base + 1_000).to_string())).unwrap();
        let mut earliest = i64::MAX;
        let mut rows = 0;
        for instance in 0..2 {
            let mut reader = NexmarkReader::new(&config, instance, 2, &[]);
            while let SourceEvent::Data { batch, .. } = reader.next(8192).await.unwrap() {
                let column = batch.column_by_name("date_time").unwrap();
                for t in timestamps_ms(column).unwrap().into_iter().flatten() {
                    assert!(t >= base + 1_000, "a bid at {t} before the start");
                    earliest = earliest.min(t);
                }
                rows += batch.num_rows();
            }
        }
        assert_eq!(earliest, base + 1_000);
        // The bids among events 10 000..20 000: 46 of every 50.
        assert_eq!(rows, (10_000..20_000u64).filter(|n| n % 50 >= 4).count());
        let e = nexmark_config(
            &[("table", "bid"), ("base.time", "now"), ("scan.startup.timestamp", "0")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("fixed 'base.time'"), "{e}");
    }

    /// Re-split 2 → 3 → 1 part way (uneven positions, as instances are
    /// never exactly in step): the bids emitted by all the readers of all
    /// the splits are every bid exactly once.
    #[tokio::test]
    async fn a_re_split_sequence_emits_every_event_exactly_once() {
        use sluice_dataflow::checkpoint::TaskState;
        let options: BTreeMap<String, String> = [("table", "bid"), ("events.max", "30000")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let config = nexmark_config(&options).unwrap();
        let mut seen: Vec<i64> = Vec::new();
        let read = |reader: &mut NexmarkReader, batches: usize, seen: &mut Vec<i64>| {
            for _ in 0..batches {
                let SourceEvent::Data { batch, .. } = futures::executor::block_on(reader.next(700)).unwrap() else {
                    return;
                };
                let t = timestamps_ms(batch.column_by_name("date_time").unwrap()).unwrap();
                // Bids of one millisecond share a time: key by (time, auction, price).
                let a = batch
                    .column_by_name("auction")
                    .unwrap()
                    .as_any()
                    .downcast_ref::<arrow::array::Int64Array>()
                    .unwrap()
                    .clone();
                seen.extend(t.iter().zip(a.values()).map(|(t, a)| t.unwrap() * 1_000_000 + a));
            }
        };
        let mut gen1: Vec<NexmarkReader> = (0..2).map(|i| NexmarkReader::new(&config, i, 2, &[])).collect();
        read(&mut gen1[0], 3, &mut seen);
        read(&mut gen1[1], 5, &mut seen);
        let parts: Vec<TaskState> = gen1.iter_mut().map(|r| r.snapshot().unwrap()).collect();
        let mut gen2: Vec<NexmarkReader> = (0..3).map(|i| NexmarkReader::new(&config, i, 3, &[])).collect();
        for (i, r) in gen2.iter_mut().enumerate() {
            r.restore_rescaled(&parts).unwrap();
            read(r, 2 + i, &mut seen);
        }
        let parts: Vec<TaskState> = gen2.iter_mut().map(|r| r.snapshot().unwrap()).collect();
        let mut last = NexmarkReader::new(&config, 0, 1, &[]);
        last.restore_rescaled(&parts).unwrap();
        read(&mut last, usize::MAX, &mut seen);
        let mut all: Vec<i64> = Vec::new();
        let mut once = NexmarkReader::new(&config, 0, 1, &[]);
        read(&mut once, usize::MAX, &mut all);
        seen.sort_unstable();
        all.sort_unstable();
        assert_eq!(seen.len(), all.len(), "every bid once");
        assert_eq!(seen, all);
    }

    /// A paced reader emits an event only once it is due: no row's event
    /// time (wall clock with `'base.time' = 'now'`) is ahead of the clock
    /// when it is emitted.
    #[tokio::test]
    async fn paced_rows_are_never_ahead_of_their_time() {
        let config = paced_bids("20000", "4000");
        let mut reader = NexmarkReader::new(&config, 1, 2, &[]);
        let mut rows = 0;
        loop {
            match reader.next(8192).await.unwrap() {
                SourceEvent::Data { batch, .. } => {
                    let now_ms = sluice_types::now_ms();
                    let column = batch.column_by_name("date_time").unwrap();
                    let newest = timestamps_ms(column).unwrap().into_iter().flatten().max().unwrap();
                    assert!(newest <= now_ms, "a row stamped {newest} was emitted at {now_ms}");
                    rows += batch.num_rows();
                }
                SourceEvent::End => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        // Instance 1 of 2 owns about half of the 4000 events' bids (92 %).
        assert!((1700..=1900).contains(&rows), "{rows}");
    }

    /// At a high rate the due events gather into batches of about a
    /// timer tick of them (or a full batch), not a few dozen rows each. A
    /// slower machine makes batches larger, never smaller, so the bound
    /// holds anywhere.
    #[tokio::test]
    async fn paced_events_gather_into_batches() {
        let config = paced_bids("2000000", "200000");
        let mut reader = NexmarkReader::new(&config, 0, 1, &[]);
        let (mut rows, mut batches) = (0, 0);
        loop {
            match reader.next(1024).await.unwrap() {
                SourceEvent::Data { batch, .. } => {
                    assert!(batch.num_rows() <= 1024);
                    rows += batch.num_rows();
                    batches += 1;
                }
                SourceEvent::End => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        // 200 000 events, 92 % bids. A batch goes when 1024 events of the
        // stream are due (~940 of them bids, every ~0.5 ms) or at the timer
        // tick after the linger (250 µs: 460 bids at least), whichever
        // first; emitted as they fell due it held a few dozen.
        assert!(rows > 180_000, "{rows}");
        assert!(rows / batches >= 256, "{rows} rows in {batches} batches");
    }
}
