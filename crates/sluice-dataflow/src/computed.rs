//! Computed columns of a source (`ts AS TO_TIMESTAMP_LTZ(seq, 3)`): a
//! [`SourceReader`] wrapper that evaluates them over the connector's batches,
//! so watermarks and everything downstream see the stream's full schema.

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
}
