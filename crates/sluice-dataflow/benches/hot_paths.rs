//! Micro-benchmarks of the runtime's hot paths: hash partitioning in the
//! exchange, window aggregation (TUMBLE and HOP), and channel send/receive.
//! `cargo bench -p sluice-dataflow` (numbers in the README's Performance section).

use arrow::array::{Int64Array, StringArray, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sluice_dataflow::Message;
use sluice_dataflow::channel::channel;
use sluice_dataflow::exchange::{hash_partition, split_by_partition};
use sluice_dataflow::window::fixed::FixedWindowOperator;
use sluice_plan::KeyGroupRouter;
use sluice_plan::{AggregateCall, WindowAggSpec, WindowKind};
use sluice_types::Watermark;
use std::hint::black_box;
use std::sync::Arc;

const ROWS: usize = 8192;

fn bids(rows: usize, first_ms: i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("_time", DataType::Timestamp(TimeUnit::Millisecond, None), false),
        Field::new("_k0", DataType::Int64, false),
        Field::new("_arg0", DataType::Int64, false),
        Field::new("extra", DataType::Utf8, false),
    ]));
    let t = TimestampMillisecondArray::from_iter_values((0..rows as i64).map(|i| first_ms + i / 10));
    let k = Int64Array::from_iter_values((0..rows as i64).map(|i| 1000 + (i * 7919) % 1000));
    let v = Int64Array::from_iter_values((0..rows as i64).map(|i| (i * 31) % 10_000));
    let e = StringArray::from_iter_values((0..rows).map(|i| format!("{i:0>40}")));
    RecordBatch::try_new(schema, vec![Arc::new(t), Arc::new(k), Arc::new(v), Arc::new(e)]).unwrap()
}

fn exchange(c: &mut Criterion) {
    let batch = bids(ROWS, 0);
    let mut g = c.benchmark_group("exchange");
    g.throughput(Throughput::Elements(ROWS as u64));
    g.bench_function("hash_partition_int64_4_ways", |b| {
        b.iter(|| hash_partition(black_box(&batch), &[1], &KeyGroupRouter::new(256, 4)).unwrap())
    });
    let targets = hash_partition(&batch, &[1], &KeyGroupRouter::new(256, 4)).unwrap();
    g.bench_function("split_by_partition_4_ways", |b| {
        b.iter(|| split_by_partition(black_box(&batch), &targets, 4).unwrap())
    });
    g.finish();
}

fn window_spec(schema: SchemaRef, window: WindowKind) -> WindowAggSpec {
    WindowAggSpec {
        input_schema: schema,
        window,
        time_column: 0,
        key_columns: vec![1],
        aggregates: vec![
            AggregateCall {
                function: "count".into(),
                args: vec![],
                distinct: false,
            },
            AggregateCall {
                function: "max".into(),
                args: vec![2],
                distinct: false,
            },
        ],
        groups_max: 10_000_000,
    }
}

fn window_output() -> SchemaRef {
    let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
    Arc::new(Schema::new(vec![
        Field::new("window_start", ts.clone(), false),
        Field::new("window_end", ts, false),
        Field::new("_k0", DataType::Int64, false),
        Field::new("_a0", DataType::Int64, true),
        Field::new("_a1", DataType::Int64, true),
    ]))
}

fn window_aggregation(c: &mut Criterion) {
    let mut g = c.benchmark_group("window_aggregate");
    g.throughput(Throughput::Elements(ROWS as u64));
    for (name, kind) in [
        ("tumble_10s_1000_keys", WindowKind::Tumble { size_ms: 10_000 }),
        (
            "hop_10s_every_2s_1000_keys",
            WindowKind::Hop {
                slide_ms: 2_000,
                size_ms: 10_000,
            },
        ),
    ] {
        // Each iteration adds one batch (819 ms of event time) and fires what closed.
        g.bench_function(name, |b| {
            let batch0 = bids(ROWS, 0);
            let mut op = FixedWindowOperator::new(&window_spec(batch0.schema(), kind), window_output()).unwrap();
            let mut first = 0i64;
            b.iter(|| {
                let shifted = shift(&batch0, first);
                op.update(&shifted, Watermark(first - 1)).unwrap();
                first += (ROWS / 10) as i64;
                black_box(op.fire(Watermark(first - 2_000)).unwrap());
            })
        });
    }
    g.finish();
}

/// The same rows `offset_ms` later in event time.
fn shift(batch: &RecordBatch, offset_ms: i64) -> RecordBatch {
    let t = batch
        .column(0)
        .as_any()
        .downcast_ref::<TimestampMillisecondArray>()
        .unwrap();
    let t = TimestampMillisecondArray::from_iter_values(t.values().iter().map(|v| v + offset_ms));
    let mut columns = batch.columns().to_vec();
    columns[0] = Arc::new(t);
    RecordBatch::try_new(batch.schema(), columns).unwrap()
}

fn channels(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let batch = bids(1024, 0);
    let mut g = c.benchmark_group("channel");
    g.throughput(Throughput::Elements(1024));
    g.bench_function("send_recv_1024_row_batch", |b| {
        let (tx, mut rx) = channel(1 << 16);
        b.iter(|| {
            rt.block_on(tx.send(Message::Data(batch.clone()))).unwrap();
            black_box(rx.try_recv().unwrap());
        })
    });
    g.finish();
}

criterion_group!(benches, exchange, window_aggregation, channels);
criterion_main!(benches);
