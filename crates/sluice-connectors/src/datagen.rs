//! The `datagen` source connector, with Flink's option names so Flink (and
//! RisingWave) DDL runs unchanged:
//!
//! - `'number-of-rows'`: a bounded run (default: unbounded, or until a
//!   sequence field is exhausted);
//! - `'rows-per-second'`: the pace over all instances (default 10000, as in
//!   Flink; `0` = as fast as possible);
//! - `'fields.<col>.kind'` = `'sequence'` (`.start`, `.end`) or `'random'`
//!   (`.min`, `.max` for numbers, `.length` for strings, default 100).
//!
//! With parallelism P, instance i generates global rows i, i+P, i+2P, …, so
//! a sequence field advances in step over the instances (as in Flink).
//! Random values come from a seeded wyrand generator per instance (fast and
//! reproducible); random strings are lowercase hex, as Flink's.

use crate::options::u64_option;
use arrow::array::{ArrayRef, BooleanArray, Float64Array, Int64Array, StringArray};
use arrow::buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use sluice_dataflow::checkpoint::TaskState;
use sluice_dataflow::source::{SourceEvent, SourceReader};
use sluice_types::{Error, Result};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Flink's default pace.
pub const ROWS_PER_SECOND_DEFAULT: u64 = 10_000;
/// Flink's default random string length.
pub const STRING_LENGTH_DEFAULT: usize = 100;
/// Longest random string a field may ask for.
pub const STRING_LENGTH_MAX: usize = 1 << 20;

/// How one column is generated.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldKind {
    /// `start + global row number`, up to `end`.
    Sequence { start: i64, end: i64 },
    /// Uniform in `[min, max]` (numbers) or `length` hex characters (strings).
    Random {
        min: Option<f64>,
        max: Option<f64>,
        length: usize,
    },
}

/// Parsed datagen options (checked against the schema by [`DatagenConfig::new`]).
#[derive(Debug, Clone)]
pub struct DatagenConfig {
    pub rows_max: Option<u64>,
    pub rows_per_second: u64,
    /// One per column of the schema, in order.
    pub fields: Vec<FieldKind>,
    pub schema: SchemaRef,
}

fn field_options(options: &BTreeMap<String, String>) -> Result<BTreeMap<String, BTreeMap<String, String>>> {
    let mut fields: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (key, value) in options {
        let Some(rest) = key.strip_prefix("fields.") else {
            continue;
        };
        let Some((column, option)) = rest.rsplit_once('.') else {
            return Err(Error::invalid_option(format!(
                "option '{key}': expected 'fields.<column>.<kind|start|end|min|max|length>'"
            )));
        };
        if !["kind", "start", "end", "min", "max", "length"].contains(&option) {
            return Err(Error::invalid_option(format!(
                "unknown option '{key}' for connector 'datagen'; a field takes kind, start, end, min, max, length"
            )));
        }
        fields
            .entry(column.to_string())
            .or_default()
            .insert(option.to_string(), value.clone());
    }
    Ok(fields)
}

fn number(field: &str, option: &str, v: Option<&String>) -> Result<Option<f64>> {
    v.map(|v| {
        v.trim()
            .parse::<f64>()
            .map_err(|_| Error::invalid_option(format!("option 'fields.{field}.{option}' must be a number, got '{v}'")))
    })
    .transpose()
}

impl DatagenConfig {
    /// Options without a schema: the checks that need no column types.
    pub fn check_options(options: &BTreeMap<String, String>) -> Result<()> {
        u64_option(options, "number-of-rows")?;
        u64_option(options, "rows-per-second")?;
        for (column, o) in field_options(options)? {
            match o.get("kind").map(String::as_str) {
                None | Some("random" | "sequence") => {}
                Some(other) => {
                    return Err(Error::invalid_option(format!(
                        "'fields.{column}.kind' = '{other}': use 'sequence' or 'random'"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Options checked against the stream's (connector) schema.
    pub fn new(options: &BTreeMap<String, String>, schema: &SchemaRef) -> Result<Self> {
        Self::check_options(options)?;
        let mut per_field = field_options(options)?;
        let mut fields = Vec::new();
        for f in schema.fields() {
            let o = per_field.remove(f.name()).unwrap_or_default();
            fields.push(field_kind(f.name(), f.data_type(), &o)?);
        }
        if let Some(unknown) = per_field.keys().next() {
            return Err(Error::invalid_option(format!(
                "datagen option 'fields.{unknown}.…' names no column of the stream"
            )));
        }
        Ok(DatagenConfig {
            rows_max: u64_option(options, "number-of-rows")?,
            rows_per_second: u64_option(options, "rows-per-second")?.unwrap_or(ROWS_PER_SECOND_DEFAULT),
            fields,
            schema: schema.clone(),
        })
    }

    /// Rows the run produces over all instances (None: unbounded).
    pub fn total_rows(&self) -> Option<u64> {
        let sequence_rows = self
            .fields
            .iter()
            .filter_map(|k| match k {
                FieldKind::Sequence { start, end } => Some((end - start).max(-1).wrapping_add(1) as u64),
                FieldKind::Random { .. } => None,
            })
            .min();
        match (self.rows_max, sequence_rows) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

fn field_kind(name: &str, data_type: &DataType, o: &BTreeMap<String, String>) -> Result<FieldKind> {
    let integer = data_type.is_integer();
    let supported = integer || data_type.is_floating() || matches!(data_type, DataType::Utf8 | DataType::Boolean);
    if !supported {
        return Err(Error::unsupported(format!(
            "datagen cannot generate column \"{name}\" of type {data_type}; use integer, floating-point, boolean or \
             VARCHAR columns (and computed columns for timestamps, e.g. ts AS TO_TIMESTAMP_LTZ(seq, 3))"
        )));
    }
    match o.get("kind").map(String::as_str).unwrap_or("random") {
        "sequence" => {
            if !integer {
                return Err(Error::invalid_option(format!(
                    "'fields.{name}.kind' = 'sequence' needs an integer column, not {data_type}"
                )));
            }
            let bound = |option: &str| -> Result<i64> {
                let v = o
                    .get(option)
                    .ok_or_else(|| Error::invalid_option(format!("a sequence field needs 'fields.{name}.{option}'")))?;
                v.trim().parse::<i64>().map_err(|_| {
                    Error::invalid_option(format!("option 'fields.{name}.{option}' must be an integer, got '{v}'"))
                })
            };
            let (start, end) = (bound("start")?, bound("end")?);
            if end < start {
                return Err(Error::invalid_option(format!(
                    "'fields.{name}.end' ({end}) is below 'fields.{name}.start' ({start})"
                )));
            }
            Ok(FieldKind::Sequence { start, end })
        }
        _ => {
            let min = number(name, "min", o.get("min"))?;
            let max = number(name, "max", o.get("max"))?;
            if let (Some(a), Some(b)) = (min, max)
                && b < a
            {
                return Err(Error::invalid_option(format!(
                    "'fields.{name}.max' ({b}) is below 'fields.{name}.min' ({a})"
                )));
            }
            let length = match o.get("length") {
                None => STRING_LENGTH_DEFAULT,
                Some(v) => v
                    .trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|l| *l <= STRING_LENGTH_MAX)
                    .ok_or_else(|| {
                        Error::invalid_option(format!(
                            "option 'fields.{name}.length' must be an integer from 0 to {STRING_LENGTH_MAX}, got '{v}'"
                        ))
                    })?,
            };
            Ok(FieldKind::Random { min, max, length })
        }
    }
}

/// wyrand: one multiply per 64 random bits.
#[derive(Debug, Clone)]
struct WyRand(u64);

impl WyRand {
    #[inline]
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = (self.0 as u128).wrapping_mul((self.0 ^ 0xe703_7ed1_a0b4_28db) as u128);
        ((t >> 64) ^ t) as u64
    }

    /// Uniform in `[min, max]` (inclusive).
    #[inline]
    fn range(&mut self, min: i64, max: i64) -> i64 {
        let span = (max as i128 - min as i128 + 1) as u128;
        let offset = ((self.next() as u128 * span) >> 64) as i64;
        min.wrapping_add(offset)
    }
}

/// The integer range of a type, for random fields without `.min` / `.max`.
fn integer_range(t: &DataType) -> (i64, i64) {
    match t {
        DataType::Int8 => (i8::MIN as i64, i8::MAX as i64),
        DataType::Int16 => (i16::MIN as i64, i16::MAX as i64),
        DataType::Int32 => (i32::MIN as i64, i32::MAX as i64),
        DataType::UInt8 => (0, u8::MAX as i64),
        DataType::UInt16 => (0, u16::MAX as i64),
        DataType::UInt32 => (0, u32::MAX as i64),
        DataType::UInt64 => (0, i64::MAX),
        _ => (i64::MIN, i64::MAX),
    }
}

/// Key of the reader's position in a checkpoint.
const POSITION_KEY: &str = "datagen.position";

/// A paced instance at most this far behind its pace: one held back longer
/// (by backpressure, or by watermark alignment while a sibling catches up)
/// paces on from here instead of emitting every row it missed at once, as
/// Flink's rate limiter keeps at most a second of permits. (An unbounded
/// catch-up made a source released by alignment read tens of seconds of
/// rows in one batch, far past the drift it was held to.)
const CATCH_UP_MAX: Duration = Duration::from_secs(1);

/// One instance's reader.
pub struct DatagenReader {
    config: DatagenConfig,
    rng: WyRand,
    /// Global row number of this instance's next row.
    next_row: u64,
    stride: u64,
    /// Rows over all instances (None: unbounded).
    total_rows: Option<u64>,
    rows_per_second: u64,
    started: Instant,
    produced: u64,
}

impl DatagenReader {
    pub fn new(config: DatagenConfig, instance: u32, parallelism: u32) -> Self {
        let parallelism = parallelism.max(1) as u64;
        let rows_per_second = config.rows_per_second.div_ceil(parallelism);
        DatagenReader {
            total_rows: config.total_rows(),
            rng: WyRand(0x5eed_da7a_u64 ^ ((instance as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15))),
            next_row: instance as u64,
            stride: parallelism,
            rows_per_second,
            started: Instant::now(),
            produced: 0,
            config,
        }
    }

    /// Rows left for this instance (None: unbounded).
    fn rows_left(&self) -> Option<u64> {
        self.total_rows
            .map(|total| total.saturating_sub(self.next_row).div_ceil(self.stride))
    }

    /// Generates the next `rows` rows.
    pub fn generate(&mut self, rows: usize) -> Result<RecordBatch> {
        let first = self.next_row;
        let stride = self.stride;
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.config.fields.len());
        for (kind, field) in self.config.fields.iter().zip(self.config.schema.fields()) {
            let t = field.data_type();
            let array: ArrayRef = match kind {
                FieldKind::Sequence { start, .. } => Arc::new(Int64Array::from_iter_values(
                    (0..rows as u64).map(|k| start.wrapping_add((first + k * stride) as i64)),
                )),
                FieldKind::Random { length, .. } if *t == DataType::Utf8 => {
                    Arc::new(hex_strings(&mut self.rng, rows, *length)?)
                }
                FieldKind::Random { .. } if *t == DataType::Boolean => Arc::new(BooleanArray::from_iter(
                    (0..rows).map(|_| Some(self.rng.next() & 1 == 1)),
                )),
                FieldKind::Random { min, max, .. } if t.is_floating() => {
                    let (lo, hi) = (min.unwrap_or(f32::MIN as f64), max.unwrap_or(f32::MAX as f64));
                    Arc::new(Float64Array::from_iter_values((0..rows).map(|_| {
                        let unit = (self.rng.next() >> 11) as f64 / (1u64 << 53) as f64;
                        lo + unit * (hi - lo)
                    })))
                }
                FieldKind::Random { min, max, .. } => {
                    let (tmin, tmax) = integer_range(t);
                    let lo = min.map_or(tmin, |m| (m.ceil() as i64).max(tmin));
                    let hi = max.map_or(tmax, |m| (m.floor() as i64).min(tmax));
                    Arc::new(Int64Array::from_iter_values((0..rows).map(|_| self.rng.range(lo, hi))))
                }
            };
            columns.push(if array.data_type() == t {
                array
            } else {
                cast(&array, t)?
            });
        }
        self.next_row += rows as u64 * stride;
        self.produced += rows as u64;
        Ok(RecordBatch::try_new(self.config.schema.clone(), columns)?)
    }

    /// Rows to produce now: at most `batch_rows_max`, the rows left, and
    /// (paced) the rows due by now; waits when none is due.
    async fn rows_now(&mut self, batch_rows_max: usize) -> usize {
        let mut rows = batch_rows_max.max(1) as u64;
        if let Some(left) = self.rows_left() {
            rows = rows.min(left);
        }
        if self.rows_per_second == 0 {
            return rows as usize;
        }
        let made = Duration::from_secs_f64(self.produced as f64 / self.rows_per_second as f64);
        if let Some(late) = Instant::now().checked_sub(CATCH_UP_MAX + made)
            && late > self.started
        {
            self.started = late;
        }
        // Once the next row has waited `pacing::LINGER` or `rows` are due
        // (see `pacing`), every row due by then, at most `rows`.
        let at = |n: u64| self.started + Duration::from_secs_f64(n as f64 / self.rows_per_second as f64);
        let emit = crate::pacing::emit_at(at(self.produced + 1), at(self.produced + rows));
        tokio::time::sleep_until(emit.into()).await;
        let due = (self.started.elapsed().as_secs_f64() * self.rows_per_second as f64) as u64;
        rows.min(due.saturating_sub(self.produced).max(1)) as usize
    }
}

/// Sixteen lowercase hex characters of `bits`, nibble 0 (the lowest) first —
/// the characters a loop over the nibbles would write, eight at a time in
/// one register. (Writing one character at a time, the generator was 41 %
/// of the sending worker's CPU in a profile of the SOL-like cluster
/// benchmark, whose messages are 100 random characters.)
#[inline]
fn hex16(bits: u64) -> [u8; 16] {
    #[inline]
    fn eight(half: u32) -> [u8; 8] {
        // Spread the 8 nibbles into the 8 bytes, nibble j in byte j.
        let mut x = half as u64;
        x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
        x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
        x = (x | (x << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
        // '0' + n, and 'a' - '0' - 10 = 0x27 more where n >= 10 (n + 6
        // carries into bit 4 exactly then); no byte carries into the next.
        let letters = ((x + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
        (x + 0x3030_3030_3030_3030 + letters * 0x27).to_le_bytes()
    }
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&eight(bits as u32));
    out[8..].copy_from_slice(&eight((bits >> 32) as u32));
    out
}

/// `rows` strings of `length` random hex characters: one 64-bit draw per
/// 16 characters (the last draw of a string only partly used).
fn hex_strings(rng: &mut WyRand, rows: usize, length: usize) -> Result<StringArray> {
    let total = rows
        .checked_mul(length)
        .filter(|t| i32::try_from(*t).is_ok())
        .ok_or_else(|| Error::internal("datagen batch too large"))?;
    // Every draw writes all 16 characters (a fixed-size copy the compiler
    // inlines) and the next one starts where this string's part ends,
    // overwriting the unused tail; 16 bytes of slack take the last one. A
    // copy of a variable `n <= 16` bytes was a call to memmove per draw:
    // 16 % of the sending worker's samples in the two-worker profile.
    let mut values = vec![0u8; total + 16];
    let mut at = 0;
    for _ in 0..rows {
        let mut left = length;
        while left > 0 {
            let n = left.min(16);
            values[at..at + 16].copy_from_slice(&hex16(rng.next()));
            at += n;
            left -= n;
        }
    }
    values.truncate(total);
    // In range: total fits an i32.
    let offsets = ScalarBuffer::from_iter((0..=rows).map(|r| (r * length) as i32));
    Ok(StringArray::try_new(
        OffsetBuffer::new(offsets),
        Buffer::from_vec(values),
        None,
    )?)
}

#[async_trait]
impl SourceReader for DatagenReader {
    fn partitions(&self) -> usize {
        1
    }

    /// The position: next row number, stride, random state and rows made
    /// (replay from it yields the same rows, random columns included).
    fn snapshot(&mut self) -> Result<TaskState> {
        let mut state = TaskState::default();
        let words = [self.next_row, self.stride, self.rng.0, self.produced];
        state.put_bytes(POSITION_KEY, words.iter().flat_map(|w| w.to_le_bytes()).collect());
        Ok(state)
    }

    fn restore(&mut self, state: &TaskState) -> Result<()> {
        let Some(bytes) = state.bytes(POSITION_KEY) else {
            return Ok(());
        };
        let words: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        let [next_row, stride, rng, produced] = words[..] else {
            return Err(Error::internal("datagen checkpoint: bad position"));
        };
        if stride != self.stride {
            return Err(Error::internal(format!(
                "datagen checkpoint was taken at parallelism {stride}, the pipeline now runs {}",
                self.stride
            )));
        }
        (self.next_row, self.rng.0, self.produced) = (next_row, rng, produced);
        if self.rows_per_second > 0 {
            // Pace on from the restored count, not from zero.
            let made = Duration::from_secs_f64(produced as f64 / self.rows_per_second as f64);
            self.started = Instant::now().checked_sub(made).unwrap_or_else(Instant::now);
        }
        Ok(())
    }

    async fn next(&mut self, batch_rows_max: usize) -> Result<SourceEvent> {
        if self.rows_left() == Some(0) {
            return Ok(SourceEvent::End);
        }
        let rows = self.rows_now(batch_rows_max).await;
        Ok(SourceEvent::Data {
            partition: 0,
            batch: self.generate(rows)?,
        })
    }
}

/// The schema datagen checks its field options against.
pub fn check_schema(options: &BTreeMap<String, String>, schema: &Schema) -> Result<()> {
    DatagenConfig::new(options, &Arc::new(schema.clone())).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int32Array};
    use arrow::datatypes::Field;

    /// The characters one nibble at a time, lowest first: what
    /// `hex_strings` must write.
    const HEX: &[u8; 16] = b"0123456789abcdef";

    fn hex_strings_one_by_one(rng: &mut WyRand, rows: usize, length: usize) -> Vec<String> {
        (0..rows)
            .map(|_| {
                let mut s = String::new();
                let mut left = length;
                while left > 0 {
                    let mut bits = rng.next();
                    for _ in 0..left.min(16) {
                        s.push(char::from(HEX[(bits & 15) as usize]));
                        bits >>= 4;
                    }
                    left -= left.min(16);
                }
                s
            })
            .collect()
    }

    #[test]
    fn hex_strings_write_each_nibble_as_its_hex_digit() {
        for length in [0, 1, 15, 16, 17, 100, 257] {
            let (mut a, mut b) = (WyRand(42), WyRand(42));
            let fast = hex_strings(&mut a, 37, length).unwrap();
            let slow = hex_strings_one_by_one(&mut b, 37, length);
            assert_eq!(
                fast.iter().map(|s| s.unwrap().to_string()).collect::<Vec<_>>(),
                slow,
                "length {length}"
            );
            assert_eq!(a.0, b.0, "the same draws, length {length}");
        }
        // Every digit, in every position of a draw.
        assert_eq!(&hex16(0xfedc_ba98_7654_3210), b"0123456789abcdef");
        assert_eq!(&hex16(0x0123_4567_89ab_cdef), b"fedcba9876543210");
    }

    fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("seq", DataType::Int64, false),
            Field::new("auction", DataType::Int32, false),
            Field::new("channel", DataType::Utf8, false),
        ]))
    }

    fn bid_options(rows: &str) -> BTreeMap<String, String> {
        options(&[
            ("number-of-rows", rows),
            ("rows-per-second", "0"),
            ("fields.seq.kind", "sequence"),
            ("fields.seq.start", "1"),
            ("fields.seq.end", "1000000"),
            ("fields.auction.min", "1000"),
            ("fields.auction.max", "1999"),
            ("fields.channel.length", "10"),
        ])
    }

    #[tokio::test]
    async fn a_restored_reader_goes_on_with_the_same_rows() {
        // The uninterrupted run of instance 1 of 2 is the reference; a fresh
        // reader restored from a snapshot taken after 3 batches must produce
        // exactly the remaining batches, random columns included.
        let config = || DatagenConfig::new(&bid_options("200"), &schema()).unwrap();
        let reference = drain(DatagenReader::new(config(), 1, 2), 7).await;
        let mut first = DatagenReader::new(config(), 1, 2);
        for _ in 0..3 {
            first.next(7).await.unwrap();
        }
        let snapshot = first.snapshot().unwrap();
        let mut restored = DatagenReader::new(config(), 1, 2);
        restored.restore(&snapshot).unwrap();
        let rest = drain(restored, 7).await;
        assert_eq!(rest.len(), reference.len() - 3);
        assert_eq!(rest[..], reference[3..]);
        let mut other_parallelism = DatagenReader::new(config(), 1, 3);
        assert!(other_parallelism.restore(&snapshot).is_err());
    }

    #[tokio::test]
    async fn a_paced_instance_held_back_catches_up_at_most_a_second_of_rows() {
        let options = BTreeMap::from([
            ("rows-per-second".to_string(), "100".to_string()),
            ("fields.i.kind".to_string(), "sequence".to_string()),
            ("fields.i.start".to_string(), "0".to_string()),
            ("fields.i.end".to_string(), "1000000".to_string()),
        ]);
        let schema = Arc::new(Schema::new(vec![arrow::datatypes::Field::new(
            "i",
            DataType::Int64,
            false,
        )]));
        let mut r = DatagenReader::new(DatagenConfig::new(&options, &schema).unwrap(), 0, 1);
        // Held for ten seconds: 1 000 rows fell due.
        r.started = Instant::now() - Duration::from_secs(10);
        let rows = r.rows_now(8192).await;
        assert!(
            (90..=110).contains(&rows),
            "a second of rows (100), not ten seconds': {rows}"
        );
        // On pace from there: the next rows come one by one.
        r.generate(rows).unwrap();
        let next = r.rows_now(8192).await;
        assert!(next <= 5, "{next} rows right after the catch-up");
    }

    async fn drain(mut r: DatagenReader, batch: usize) -> Vec<RecordBatch> {
        let mut out = Vec::new();
        while let SourceEvent::Data { batch, .. } = r.next(batch).await.unwrap() {
            out.push(batch);
        }
        out
    }

    #[tokio::test]
    async fn bounded_sequence_split_over_instances_with_ranges_respected() {
        let config = DatagenConfig::new(&bid_options("1001"), &schema()).unwrap();
        let mut seqs = Vec::new();
        for instance in 0..3 {
            for b in drain(DatagenReader::new(config.clone(), instance, 3), 100).await {
                let seq = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                seqs.extend(seq.values().iter().copied());
                let auction = b.column(1).as_any().downcast_ref::<Int32Array>().unwrap();
                assert!(auction.values().iter().all(|a| (1000..=1999).contains(a)));
                let channel = b.column(2).as_any().downcast_ref::<StringArray>().unwrap();
                assert!(
                    (0..channel.len()).all(
                        |i| channel.value(i).len() == 10 && channel.value(i).bytes().all(|c| c.is_ascii_hexdigit())
                    )
                );
            }
        }
        seqs.sort_unstable();
        assert_eq!(
            seqs,
            (1..=1001).collect::<Vec<i64>>(),
            "every sequence value exactly once"
        );
    }

    #[tokio::test]
    async fn sequence_end_bounds_the_run_and_random_covers_the_range() {
        let mut o = bid_options("0");
        o.remove("number-of-rows");
        o.insert("fields.seq.end".into(), "5000".into());
        let config = DatagenConfig::new(&o, &schema()).unwrap();
        assert_eq!(config.total_rows(), Some(5000));
        let batches = drain(DatagenReader::new(config, 0, 1), 4096).await;
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 5000);
        let mut seen = std::collections::HashSet::new();
        for b in &batches {
            let a = b.column(1).as_any().downcast_ref::<Int32Array>().unwrap();
            seen.extend(a.values().iter().copied());
        }
        assert!(
            seen.contains(&1000) && seen.contains(&1999) && seen.len() > 990,
            "{}",
            seen.len()
        );
    }

    #[tokio::test]
    async fn paced_by_rows_per_second() {
        let mut o = bid_options("300");
        o.insert("rows-per-second".into(), "1000".into());
        let config = DatagenConfig::new(&o, &schema()).unwrap();
        let started = Instant::now();
        let batches = drain(DatagenReader::new(config, 0, 1), 8192).await;
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 300);
        // 300 rows at 1000/s cannot all be out before ~0.3 s (a lower bound only).
        assert!(started.elapsed() >= Duration::from_millis(250));
        assert!(batches.len() > 1, "paced output comes in several batches");
    }

    #[test]
    fn bad_options_are_clear_errors() {
        let s = schema();
        let e = |o: &[(&str, &str)]| DatagenConfig::new(&options(o), &s).unwrap_err().to_string();
        assert!(e(&[("fields.nope.kind", "random")]).contains("nope"));
        assert!(e(&[("fields.seq.kind", "sequence")]).contains("fields.seq.start"));
        assert!(e(&[("fields.seq.kind", "counter")]).contains("sequence"));
        assert!(
            e(&[
                ("fields.channel.kind", "sequence"),
                ("fields.channel.start", "1"),
                ("fields.channel.end", "2")
            ])
            .contains("integer")
        );
        assert!(e(&[("fields.auction.min", "5"), ("fields.auction.max", "1")]).contains("below"));
        assert!(e(&[("number-of-rows", "-1")]).contains("number-of-rows"));
        let ts = Arc::new(Schema::new(vec![Field::new(
            "t",
            DataType::Timestamp(arrow::datatypes::TimeUnit::Millisecond, None),
            true,
        )]));
        assert!(
            DatagenConfig::new(&BTreeMap::new(), &ts)
                .unwrap_err()
                .to_string()
                .contains("computed")
        );
    }
}
