//! What a barrier costs a materialized view's sink: a view of 1 M rows
//! (a key and a value each) takes 10 000 updates (a `-U`/`+U` pair each,
//! to random keys), then a checkpoint barrier (publish to readers and
//! snapshot). `cargo bench -p sluice-connectors --bench view`; the figures
//! and what they compare are in docs/performance-notes.md.

use arrow::array::{Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use criterion::{Criterion, criterion_group, criterion_main};
use sluice_connectors::connector::view::ViewSink;
use sluice_connectors::views::Views;
use sluice_dataflow::Operator;
use std::sync::Arc;

const ROWS: i64 = 1_000_000;
const UPDATES: usize = 10_000;

fn changes(ops: Vec<&str>, keys: Vec<i64>, values: Vec<i64>) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("op", DataType::Utf8, false),
        Field::new("k", DataType::Int64, false),
        Field::new("n", DataType::Int64, false),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(ops)),
            Arc::new(Int64Array::from(keys)),
            Arc::new(Int64Array::from(values)),
        ],
    )
    .unwrap()
}

fn barrier(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let views = Arc::new(Views::default());
    let input = changes(vec![], vec![], vec![]).schema();
    let mut sink = ViewSink::new("v", &input, true, 10 * ROWS as u64, views.clone()).unwrap();
    rt.block_on(sink.restore(None)).unwrap();
    for from in (0..ROWS).step_by(8192) {
        let keys: Vec<i64> = (from..(from + 8192).min(ROWS)).collect();
        let n = keys.len();
        sink.apply(&changes(vec!["+I"; n], keys, vec![0; n])).unwrap();
    }
    let mut id = 1;
    rt.block_on(sink.snapshot(id)).unwrap();
    let mut values = vec![0i64; ROWS as usize];
    let mut seed = 7u64;
    let mut g = c.benchmark_group("view");
    g.sample_size(20);
    g.bench_function("1m_rows_10k_updates_then_a_barrier", |b| {
        b.iter(|| {
            let (mut ops, mut keys, mut vals) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..UPDATES {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let k = ((seed >> 33) % ROWS as u64) as usize;
                ops.extend(["-U", "+U"]);
                keys.extend([k as i64, k as i64]);
                vals.extend([values[k], values[k] + 1]);
                values[k] += 1;
            }
            sink.apply(&changes(ops, keys, vals)).unwrap();
            id += 1;
            let state = rt.block_on(sink.snapshot(id)).unwrap();
            assert!(views.get("v").unwrap().checkpoint == Some(id));
            state
        })
    });
    g.finish();
}

criterion_group!(benches, barrier);
criterion_main!(benches);
