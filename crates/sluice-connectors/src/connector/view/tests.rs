use super::*;
use arrow::array::{Int64Array, StringArray};
use arrow::datatypes::{DataType, Field};

fn input(changelog: bool) -> SchemaRef {
    let mut fields = Vec::new();
    if changelog {
        fields.push(Field::new("op", DataType::Utf8, false));
    }
    fields.push(Field::new("k", DataType::Int64, true));
    fields.push(Field::new("n", DataType::Int64, true));
    Arc::new(Schema::new(fields))
}

fn changes(rows: &[(&str, i64, i64)]) -> RecordBatch {
    RecordBatch::try_new(
        input(true),
        vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
        ],
    )
    .unwrap()
}

/// The published rows of `name`, sorted.
fn shown(views: &Views, name: &str) -> Vec<(i64, i64)> {
    let view = views.get(name).expect("published");
    let k = view.rows.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
    let n = view.rows.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
    let mut rows: Vec<(i64, i64)> = (0..view.rows.num_rows()).map(|i| (k.value(i), n.value(i))).collect();
    rows.sort_unstable();
    rows
}

/// Readers see the rows as of the last barrier: a batch applied after it
/// shows only at the next snapshot, and then with its update pairs whole.
#[tokio::test]
async fn rows_are_published_at_barriers_only() {
    let views = Arc::new(Views::default());
    let mut sink = ViewSink::new("v", &input(true), true, 100, views.clone()).unwrap();
    sink.restore(None).await.unwrap();
    assert_eq!(shown(&views, "v"), vec![], "a fresh view is empty at once");
    assert_eq!(views.get("v").unwrap().schema.fields().len(), 2, "no op column");
    sink.apply(&changes(&[("+I", 1, 1), ("+I", 2, 1)])).unwrap();
    assert_eq!(shown(&views, "v"), vec![], "nothing shows before the barrier");
    sink.snapshot(1).await.unwrap();
    assert_eq!(shown(&views, "v"), vec![(1, 1), (2, 1)]);
    assert_eq!(views.get("v").unwrap().checkpoint, Some(1));
    sink.apply(&changes(&[("-U", 1, 1), ("+U", 1, 2), ("-D", 2, 1)]))
        .unwrap();
    assert_eq!(shown(&views, "v"), vec![(1, 1), (2, 1)]);
    sink.snapshot(2).await.unwrap();
    assert_eq!(shown(&views, "v"), vec![(1, 2)]);
}

/// A result is a multiset: a row added twice and taken back once stays
/// once; a retraction of a row the view never held changes nothing.
#[tokio::test]
async fn duplicate_rows_are_counted() {
    let views = Arc::new(Views::default());
    let mut sink = ViewSink::new("v", &input(true), true, 100, views.clone()).unwrap();
    sink.apply(&changes(&[
        ("+I", 7, 7),
        ("+I", 7, 7),
        ("+I", 8, 8),
        ("-D", 7, 7),
        ("-D", 9, 9),
    ]))
    .unwrap();
    sink.snapshot(1).await.unwrap();
    assert_eq!(shown(&views, "v"), vec![(7, 7), (8, 8)]);
    assert_eq!(sink.len, 2);
}

/// The checkpoint holds the rows of its barrier: a sink restored from it
/// publishes them before it reads anything, duplicates included.
#[tokio::test]
async fn a_restored_view_publishes_its_checkpoint() {
    let views = Arc::new(Views::default());
    let mut sink = ViewSink::new("v", &input(true), true, 100, views.clone()).unwrap();
    sink.apply(&changes(&[("+I", 1, 10), ("+I", 1, 10), ("+I", 2, 20)]))
        .unwrap();
    let state = sink.snapshot(4).await.unwrap();
    sink.apply(&changes(&[("+I", 3, 30)])).unwrap();
    let state = TaskState::decode(&state.encode().unwrap()).unwrap();
    let fresh = Arc::new(Views::default());
    let mut restored = ViewSink::new("v", &input(true), true, 100, fresh.clone()).unwrap();
    restored.restore(Some((4, state))).await.unwrap();
    assert_eq!(shown(&fresh, "v"), vec![(1, 10), (1, 10), (2, 20)]);
    restored.apply(&changes(&[("-U", 1, 10), ("+U", 1, 11)])).unwrap();
    restored.snapshot(5).await.unwrap();
    assert_eq!(shown(&fresh, "v"), vec![(1, 10), (1, 11), (2, 20)]);
}

/// An append-only query's rows (no op column) only add; at `'rows.max'`
/// the next row fails with 53400, and the rows before it stay.
#[tokio::test]
async fn rows_max_is_enforced() {
    let views = Arc::new(Views::default());
    let mut sink = ViewSink::new("v", &input(false), false, 3, views.clone()).unwrap();
    let rows = |from: i64, to: i64| {
        RecordBatch::try_new(
            input(false),
            vec![
                Arc::new(Int64Array::from_iter_values(from..to)),
                Arc::new(Int64Array::from_iter_values(from..to)),
            ],
        )
        .unwrap()
    };
    sink.apply(&rows(0, 3)).unwrap();
    let err = sink.apply(&rows(3, 4)).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::User {
                code: SqlCode::ConfigurationLimitExceeded,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("more than 3 rows ('rows.max')"), "{err}");
    sink.snapshot(1).await.unwrap();
    assert_eq!(shown(&views, "v"), vec![(0, 0), (1, 1), (2, 2)]);
}

/// `WITH (…)` of CREATE MATERIALIZED VIEW: unknown keys are listed,
/// checkpoints cannot be off, `'rows.max'` is at least 1.
#[test]
fn options_are_checked() {
    let opts = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    validate(&opts(&[("rows.max", "5"), ("checkpoint.interval", "2s")])).unwrap();
    let err = validate(&opts(&[("colour", "red")])).unwrap_err().to_string();
    assert!(
        err.contains("unknown option 'colour' for a materialized view; known options: checkpoint.dir, checkpoint.interval, placement, rows.max"),
        "{err}"
    );
    let err = validate(&opts(&[("checkpoint.interval", "off")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot be 'off'"), "{err}");
    let err = validate(&opts(&[("rows.max", "0")])).unwrap_err().to_string();
    assert!(err.contains("at least 1"), "{err}");
}
