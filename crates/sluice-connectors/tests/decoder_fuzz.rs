//! Fuzz target: the Kafka record decoders (JSON and CSV) on random bytes
//! and on mutated valid records. Whatever the payloads, `decode` returns
//! (no panic), every payload is either a row or a bad record with a
//! reason, and an unmutated valid record in the same batch still decodes
//! to its values. `SLUICE_FUZZ_CASES` batches (default 300),
//! `SLUICE_FUZZ_SEED` replays a run (the seed is printed), and
//! `SLUICE_FUZZ_SECONDS` bounds the time (`scripts/fuzz.sh`).

use arrow::array::{Array, Int64Array};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use sluice_connectors::format::{RecordDecoder, RecordFormat};
use std::sync::Arc;
use std::time::Instant;

#[path = "../../../tests/support/fuzz.rs"]
mod fuzz;

use fuzz::{Rng, plan};

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("price", DataType::Float64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("ok", DataType::Boolean, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]))
}

/// A valid record with id `id`, in `format`.
fn valid(format: RecordFormat, id: i64, rng: &mut Rng) -> Vec<u8> {
    let price = rng.below(100_000) as f64 / 100.0;
    let ok = rng.below(2) == 0;
    match format {
        RecordFormat::Json => {
            format!(r#"{{"id": {id}, "price": {price}, "name": "n{id}", "ok": {ok}, "ts": "2026-12-03T12:00:00"}}"#)
                .into_bytes()
        }
        _ => format!("{id},{price},n{id},{ok},2026-12-03T12:00:00").into_bytes(),
    }
}

/// Bytes that stress parsers: structure characters, quotes, escapes,
/// non-UTF-8, huge numbers.
const INTERESTING: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b"\\",
    b",",
    b":",
    b"\n",
    b"\r",
    b"\0",
    b"\xff",
    b"\xc3\x28",
    b"null",
    b"true",
    b"1e999",
    b"-9223372036854775809",
    b"99999999999999999999999",
    b"\\u0000",
    b"\\ud800",
    b"NaN",
];

/// `record` changed in one to four random ways.
fn mutate(mut record: Vec<u8>, rng: &mut Rng) -> Vec<u8> {
    for _ in 0..1 + rng.below(4) {
        let at = if record.is_empty() {
            0
        } else {
            rng.below(record.len() + 1)
        };
        match rng.below(5) {
            0 if !record.is_empty() => {
                let i = rng.below(record.len());
                record[i] = rng.next() as u8;
            }
            1 if !record.is_empty() => {
                let end = (at + 1 + rng.below(8)).min(record.len());
                record.drain(at.min(end)..end);
            }
            2 => {
                let piece = INTERESTING[rng.below(INTERESTING.len())];
                record.splice(at..at, piece.iter().copied());
            }
            3 => record.truncate(at),
            _ => {
                let copy = record.clone();
                record.splice(at..at, copy);
            }
        }
    }
    record
}

fn random_bytes(rng: &mut Rng) -> Vec<u8> {
    (0..rng.below(64)).map(|_| rng.next() as u8).collect()
}

#[test]
fn json_and_csv_decoders_sort_any_bytes_into_rows_and_bad_records() {
    let (cases, seed, seconds) = plan("decoder fuzz", 300);
    let mut rng = Rng(seed);
    let started = Instant::now();
    let mut bad_seen = 0usize;
    for case in 0..cases {
        if seconds.is_some_and(|s| started.elapsed() > s) {
            eprintln!("decoder fuzz: time bound reached after {case} cases");
            break;
        }
        let format = [RecordFormat::Json, RecordFormat::Csv][rng.below(2)];
        let decoder = RecordDecoder::new(format, schema()).unwrap();
        // A batch: untouched valid records (ids 1 000 000 + …, at least
        // one) among mutated records, random bytes and empty records.
        let mut payloads = Vec::new();
        let mut untouched: Vec<(usize, i64)> = Vec::new();
        let forced = rng.below(8);
        // A structural batch: every record parses, but some hold no value,
        // two values, or half of one (what shifts rows if only the total
        // is counted).
        let structural = rng.below(3) == 0;
        for i in 0..8 {
            let payload = match rng.below(5) {
                _ if i == forced => None,
                0 | 1 => None,
                _ if structural => Some(match rng.below(3) {
                    0 => Vec::new(),
                    1 => {
                        let sep: &[u8] = if format == RecordFormat::Csv { b"\r" } else { b"" };
                        [
                            valid(format, i as i64, &mut rng),
                            sep.to_vec(),
                            valid(format, 50 + i as i64, &mut rng),
                        ]
                        .concat()
                    }
                    _ => {
                        let record = valid(format, i as i64, &mut rng);
                        let half = rng.below(record.len());
                        if rng.below(2) == 0 {
                            record[..half].to_vec()
                        } else {
                            record[half..].to_vec()
                        }
                    }
                }),
                2 => Some(random_bytes(&mut rng)),
                3 if rng.below(4) == 0 => Some(Vec::new()),
                _ => {
                    let record = valid(format, i as i64, &mut rng);
                    Some(mutate(record, &mut rng))
                }
            };
            payloads.push(payload.unwrap_or_else(|| {
                let id = 1_000_000 + (case * 8 + i) as i64;
                untouched.push((i, id));
                valid(format, id, &mut rng)
            }));
        }
        let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let decoded = decoder.decode(&refs);
        let context = || format!("case {case} (SLUICE_FUZZ_SEED={seed}), {format:?}: {payloads:?}");
        assert_eq!(decoded.batch.num_rows(), decoded.good.len(), "{}", context());
        let mut all: Vec<usize> = decoded
            .good
            .iter()
            .copied()
            .chain(decoded.bad.iter().map(|(i, _)| *i))
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..payloads.len()).collect::<Vec<_>>(), "{}", context());
        assert!(decoded.bad.iter().all(|(_, why)| !why.is_empty()), "{}", context());
        bad_seen += decoded.bad.len();
        // Every untouched record is a row with its own values, wherever
        // the malformed ones are.
        let ids = decoded.batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        for (at, id) in untouched {
            let row = decoded
                .good
                .iter()
                .position(|&i| i == at)
                .unwrap_or_else(|| panic!("valid record {at} was lost: {:?}\n{}", decoded.bad, context()));
            assert!(ids.is_valid(row));
            assert_eq!(
                ids.value(row),
                id,
                "record {at} got another record's row\n{}",
                context()
            );
        }
    }
    assert!(bad_seen > 0, "the mutations never produced a bad record");
}

#[test]
fn a_record_holding_two_values_beside_an_empty_one_does_not_shift_the_rows() {
    let decoder = RecordDecoder::new(RecordFormat::Json, schema()).unwrap();
    let two = br#"{"id": 1}{"id": 2}"#.to_vec();
    let marker = br#"{"id": 7}"#.to_vec();
    let payloads: Vec<&[u8]> = vec![&two, &marker, b""];
    let decoded = decoder.decode(&payloads);
    let ids = decoded.batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
    let by_payload: Vec<(usize, i64)> = decoded
        .good
        .iter()
        .enumerate()
        .map(|(row, &i)| (i, ids.value(row)))
        .collect();
    assert!(
        by_payload.contains(&(1, 7)),
        "rows attributed: {by_payload:?}, bad: {:?}",
        decoded.bad
    );
    assert!(
        decoded.bad.iter().any(|(i, _)| *i == 0),
        "two values in one record: {:?}",
        decoded.bad
    );
}

#[test]
fn csv_records_joined_by_an_open_quote_or_split_by_a_carriage_return_do_not_shift_the_rows() {
    let decoder = RecordDecoder::new(RecordFormat::Csv, schema()).unwrap();
    let opens: &[u8] = b"1,1.5,\"a";
    let closes: &[u8] = b"b\",true,2026-12-03T12:00:00";
    let marker: &[u8] = b"7,1,m,true,2026-12-03T12:00:00";
    let two: &[u8] = b"3,1,x,true,2026-12-03T12:00:00\r4,1,y,true,2026-12-03T12:00:00";
    let decoded = decoder.decode(&[opens, closes, marker, two]);
    let ids = decoded.batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
    let by_payload: Vec<(usize, i64)> = decoded
        .good
        .iter()
        .enumerate()
        .map(|(row, &i)| (i, ids.value(row)))
        .collect();
    assert_eq!(by_payload, vec![(2, 7)], "bad: {:?}", decoded.bad);
    let bad: Vec<usize> = decoded.bad.iter().map(|(i, _)| *i).collect();
    assert_eq!(bad, vec![0, 1, 3]);
}
