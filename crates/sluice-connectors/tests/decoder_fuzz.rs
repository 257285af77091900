//! Fuzz target: the Kafka record decoders (JSON and CSV) on random bytes
//! and on edited valid records, as proptest strategies run through
//! tests/support/fuzz.rs. Whatever the payloads, `decode` returns (no
//! panic), every payload is either a row or a bad record with a reason,
//! and an untouched valid record in the same batch still decodes to its
//! values. `SLUICE_FUZZ_CASES` batches (default 300), `SLUICE_FUZZ_SEED`
//! replays a run (the seed is printed), `SLUICE_FUZZ_SECONDS` bounds the
//! time (`scripts/fuzz.sh`); failures are shrunk and kept in
//! tests/fuzz-regressions/decoders.txt.

use arrow::array::{Array, Int64Array};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{Index, select};
use sluice_connectors::format::{RecordDecoder, RecordFormat};
use std::cell::Cell;
use std::sync::Arc;

#[path = "../../../tests/support/fuzz.rs"]
mod fuzz;

use fuzz::{Edit, apply};

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
fn valid(format: RecordFormat, id: i64, cents: u32, ok: bool) -> Vec<u8> {
    let price = cents as f64 / 100.0;
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

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<Index>(), any::<u8>()).prop_map(|(at, b)| Edit::Set(at, b)),
        (any::<Index>(), 1..9usize).prop_map(|(at, n)| Edit::Drop(at, n)),
        (any::<Index>(), select(INTERESTING)).prop_map(|(at, p)| Edit::Insert(at, p.to_vec())),
        any::<Index>().prop_map(Edit::Truncate),
        any::<Index>().prop_map(Edit::Double),
        // Four bytes of a huge or negative number's bits.
        (
            any::<Index>(),
            select(vec![0u32, 0x7fff_ffff, 0xffff_ffff, 0x3031_3233])
        )
            .prop_map(|(at, v)| Edit::Length(at, v)),
    ]
}

/// One payload of a batch.
#[derive(Debug, Clone)]
enum Payload {
    /// A valid record with its own id (1 000 000 + its place): it must
    /// decode to its own row whatever surrounds it.
    Untouched {
        cents: u32,
        ok: bool,
    },
    Random(Vec<u8>),
    Empty,
    /// A valid record (id = its place) changed one to four times.
    Edited {
        cents: u32,
        ok: bool,
        edits: Vec<Edit>,
    },
    /// Structurally broken but each part parses: two records in one
    /// payload (what shifts rows if only the total is counted) …
    Two {
        cents: u32,
        ok: bool,
    },
    /// … or half of one.
    Half {
        cents: u32,
        ok: bool,
        at: Index,
        front: bool,
    },
}

fn payload() -> impl Strategy<Value = Payload> {
    let cents = 0..100_000u32;
    prop_oneof![
        2 => (cents.clone(), any::<bool>()).prop_map(|(cents, ok)| Payload::Untouched { cents, ok }),
        1 => vec(any::<u8>(), 0..64).prop_map(Payload::Random),
        1 => Just(Payload::Empty),
        3 => (cents.clone(), any::<bool>(), vec(edit(), 1..5))
            .prop_map(|(cents, ok, edits)| Payload::Edited { cents, ok, edits }),
        1 => (cents.clone(), any::<bool>()).prop_map(|(cents, ok)| Payload::Two { cents, ok }),
        1 => (cents, any::<bool>(), any::<Index>(), any::<bool>())
            .prop_map(|(cents, ok, at, front)| Payload::Half { cents, ok, at, front }),
    ]
}

/// A batch: its format, eight payloads, and one place forced to hold an
/// untouched record.
fn batch() -> impl Strategy<Value = (RecordFormat, Vec<Payload>, Index)> {
    (
        select(vec![RecordFormat::Json, RecordFormat::Csv]),
        vec(payload(), 8),
        any::<Index>(),
    )
}

#[test]
fn json_and_csv_decoders_sort_any_bytes_into_rows_and_bad_records() {
    let bad_seen = Cell::new(0usize);
    let target = fuzz::fuzz(
        "decoder fuzz",
        300,
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fuzz-regressions/decoders.txt"),
        4096,
    );
    target.run(batch(), |(format, mut batch, forced)| {
        let forced = forced.index(batch.len());
        if !matches!(batch[forced], Payload::Untouched { .. }) {
            batch[forced] = Payload::Untouched { cents: 1, ok: true };
        }
        let decoder = RecordDecoder::new(format, schema()).unwrap();
        let mut untouched: Vec<(usize, i64)> = Vec::new();
        let payloads: Vec<Vec<u8>> = batch
            .iter()
            .enumerate()
            .map(|(i, p)| match p {
                Payload::Untouched { cents, ok } => {
                    let id = 1_000_000 + i as i64;
                    untouched.push((i, id));
                    valid(format, id, *cents, *ok)
                }
                Payload::Random(bytes) => bytes.clone(),
                Payload::Empty => Vec::new(),
                Payload::Edited { cents, ok, edits } => apply(valid(format, i as i64, *cents, *ok), edits),
                Payload::Two { cents, ok } => {
                    let sep: &[u8] = if format == RecordFormat::Csv { b"\r" } else { b"" };
                    [
                        valid(format, i as i64, *cents, *ok),
                        sep.to_vec(),
                        valid(format, 50 + i as i64, *cents, *ok),
                    ]
                    .concat()
                }
                Payload::Half { cents, ok, at, front } => {
                    let record = valid(format, i as i64, *cents, *ok);
                    let half = at.index(record.len());
                    if *front {
                        record[..half].to_vec()
                    } else {
                        record[half..].to_vec()
                    }
                }
            })
            .collect();
        let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let decoded = decoder.decode(&refs);
        prop_assert_eq!(decoded.batch.num_rows(), decoded.good.len());
        let mut all: Vec<usize> = decoded
            .good
            .iter()
            .copied()
            .chain(decoded.bad.iter().map(|(i, _)| *i))
            .collect();
        all.sort_unstable();
        prop_assert_eq!(all, (0..payloads.len()).collect::<Vec<_>>());
        prop_assert!(decoded.bad.iter().all(|(_, why)| !why.is_empty()));
        bad_seen.set(bad_seen.get() + decoded.bad.len());
        // Every untouched record is a row with its own values, wherever
        // the malformed ones are.
        let ids = decoded.batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        for (at, id) in untouched {
            let row = decoded.good.iter().position(|&i| i == at);
            prop_assert!(row.is_some(), "valid record {} was lost: {:?}", at, decoded.bad);
            let row = row.unwrap();
            prop_assert!(ids.is_valid(row));
            prop_assert_eq!(ids.value(row), id, "record {} got another record's row", at);
        }
        Ok(())
    });
    assert!(bad_seen.get() > 0, "the edits never produced a bad record");
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
