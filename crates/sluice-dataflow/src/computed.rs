//! Computed columns of a source (`ts AS TO_TIMESTAMP_LTZ(seq, 3)`): a
//! [`SourceReader`] wrapper that evaluates them over the connector's batches,
//! so watermarks and everything downstream see the stream's full schema.

use crate::checkpoint::TaskState;
use crate::project::ProjectOperator;
use crate::source::{SourceEvent, SourceReader};
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use sluice_plan::{ComputedColumn, ProjectSpec};
use sluice_types::Result;

/// A reader whose batches gain the stream's computed columns.
pub struct ComputedColumnsReader {
    inner: Box<dyn SourceReader>,
    project: ProjectOperator,
}

impl ComputedColumnsReader {
    /// `connector_schema` is what `inner` produces; `schema` the stream's
    /// schema, with `computed` at their positions.
    pub fn new(
        inner: Box<dyn SourceReader>,
        connector_schema: &SchemaRef,
        schema: &SchemaRef,
        computed: &[ComputedColumn],
    ) -> Result<Self> {
        let exprs = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| match computed.iter().find(|c| c.column == i) {
                Some(c) => c.expr.clone(),
                None => format!("\"{}\"", f.name().replace('"', "\"\"")),
            })
            .collect();
        let spec = ProjectSpec {
            input_schema: connector_schema.clone(),
            filter: None,
            exprs,
        };
        Ok(ComputedColumnsReader {
            inner,
            project: ProjectOperator::new(&spec, schema.clone())?,
        })
    }
}

#[async_trait]
impl SourceReader for ComputedColumnsReader {
    fn partitions(&self) -> usize {
        self.inner.partitions()
    }

    async fn next(&mut self, batch_rows_max: usize) -> Result<SourceEvent> {
        match self.inner.next(batch_rows_max).await? {
            SourceEvent::Data { partition, batch } => Ok(SourceEvent::Data {
                partition,
                batch: self.project.apply(&batch)?,
            }),
            other => Ok(other),
        }
    }

    // The position is the inner reader's: without these three a stream
    // with computed columns started over from its beginning on every
    // restore (its replayed rows counted twice by windows whose state
    // already held them).
    fn snapshot(&mut self) -> Result<TaskState> {
        self.inner.snapshot()
    }

    fn restore(&mut self, state: &TaskState) -> Result<()> {
        self.inner.restore(state)
    }

    fn restore_rescaled(&mut self, parts: &[TaskState]) -> Result<()> {
        self.inner.restore_rescaled(parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int64Array, TimestampMillisecondArray};
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use arrow::record_batch::RecordBatch;
    use std::sync::Arc;

    struct OneBatch(Option<RecordBatch>);

    #[async_trait]
    impl SourceReader for OneBatch {
        fn partitions(&self) -> usize {
            1
        }
        async fn next(&mut self, _: usize) -> Result<SourceEvent> {
            Ok(match self.0.take() {
                Some(batch) => SourceEvent::Data { partition: 0, batch },
                None => SourceEvent::End,
            })
        }
    }

    #[tokio::test]
    async fn adds_computed_columns_in_place() {
        let physical = Arc::new(Schema::new(vec![
            Field::new("seq", DataType::Int64, false),
            Field::new("price", DataType::Int64, false),
        ]));
        let full = Arc::new(Schema::new(vec![
            Field::new("seq", DataType::Int64, false),
            Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
            Field::new("price", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            physical.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 1500])),
                Arc::new(Int64Array::from(vec![7, 8])),
            ],
        )
        .unwrap();
        let computed = [ComputedColumn {
            column: 1,
            expr: "to_timestamp_millis(seq)".into(),
        }];
        let mut r = ComputedColumnsReader::new(Box::new(OneBatch(Some(batch))), &physical, &full, &computed).unwrap();
        let SourceEvent::Data { batch, .. } = r.next(10).await.unwrap() else {
            panic!("no data")
        };
        assert_eq!(batch.schema(), full);
        let ts = batch
            .column(1)
            .as_any()
            .downcast_ref::<TimestampMillisecondArray>()
            .unwrap();
        assert_eq!(ts.values(), &[1, 1500]);
        let price = batch.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(price.values(), &[7, 8]);
        assert!(matches!(r.next(10).await.unwrap(), SourceEvent::End));
    }

    /// Emits `seq` = 0, 1, 2, … one row a batch; its position is the next
    /// value, and rescaled it takes the largest of the parts.
    struct Counter(i64);

    #[async_trait]
    impl SourceReader for Counter {
        fn partitions(&self) -> usize {
            1
        }
        async fn next(&mut self, _: usize) -> Result<SourceEvent> {
            let schema = Arc::new(Schema::new(vec![Field::new("seq", DataType::Int64, false)]));
            let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![self.0]))]).unwrap();
            self.0 += 1;
            Ok(SourceEvent::Data { partition: 0, batch })
        }
        fn snapshot(&mut self) -> Result<TaskState> {
            let mut state = TaskState::default();
            state.put_bytes("next", self.0.to_le_bytes().to_vec());
            Ok(state)
        }
        fn restore(&mut self, state: &TaskState) -> Result<()> {
            self.0 = i64::from_le_bytes(state.bytes("next").unwrap().try_into().unwrap());
            Ok(())
        }
        fn restore_rescaled(&mut self, parts: &[TaskState]) -> Result<()> {
            for p in parts {
                let mut other = Counter(0);
                other.restore(p)?;
                self.0 = self.0.max(other.0);
            }
            Ok(())
        }
    }

    fn with_ts(inner: Counter) -> ComputedColumnsReader {
        let physical = Arc::new(Schema::new(vec![Field::new("seq", DataType::Int64, false)]));
        let full = Arc::new(Schema::new(vec![
            Field::new("seq", DataType::Int64, false),
            Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        ]));
        let computed = [ComputedColumn {
            column: 1,
            expr: "to_timestamp_millis(seq)".into(),
        }];
        ComputedColumnsReader::new(Box::new(inner), &physical, &full, &computed).unwrap()
    }

    async fn next_seq(r: &mut ComputedColumnsReader) -> i64 {
        let SourceEvent::Data { batch, .. } = r.next(1).await.unwrap() else {
            panic!("no data")
        };
        batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0)
    }

    /// The wrapper's position is its reader's: restored, it goes on after
    /// the last row read before the snapshot instead of starting over.
    #[tokio::test]
    async fn the_position_is_the_inner_readers() {
        let mut first = with_ts(Counter(0));
        for expected in 0..3 {
            assert_eq!(next_seq(&mut first).await, expected);
        }
        let snapshot = first.snapshot().unwrap();
        assert_eq!(snapshot.bytes("next"), Some(&3i64.to_le_bytes()[..]));
        let mut restored = with_ts(Counter(0));
        restored.restore(&snapshot).unwrap();
        assert_eq!(next_seq(&mut restored).await, 3);
        let mut later = with_ts(Counter(0));
        for _ in 0..5 {
            next_seq(&mut later).await;
        }
        let mut rescaled = with_ts(Counter(0));
        rescaled
            .restore_rescaled(&[first.snapshot().unwrap(), later.snapshot().unwrap()])
            .unwrap();
        assert_eq!(next_seq(&mut rescaled).await, 5);
    }
}
