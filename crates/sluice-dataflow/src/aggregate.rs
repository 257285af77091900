//! Building DataFusion aggregate functions from plan specs: what the
//! window aggregates and the aggregate without a window share.

use crate::project::df_error;
use arrow::array::ArrayRef;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::{Accumulator, GroupsAccumulator};
use datafusion::physical_expr::aggregate::{AggregateExprBuilder, AggregateFunctionExpr};
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_expr::{GroupsAccumulatorAdapter, PhysicalExpr};
use datafusion::prelude::SessionContext;
use datafusion::scalar::ScalarValue;
use sluice_plan::AggregateCall;
use sluice_types::{Error, Result};
use std::sync::{Arc, LazyLock};

pub mod multiset;

static REGISTRY: LazyLock<SessionContext> = LazyLock::new(|| {
    let ctx = SessionContext::new();
    sluice_functions::register(&ctx);
    ctx
});

/// An aggregate call compiled against the window operator's input schema.
#[derive(Debug, Clone)]
pub struct CompiledAggregate {
    pub expr: Arc<AggregateFunctionExpr>,
    /// The type of its first argument (none for `count(*)`).
    arg_type: Option<arrow::datatypes::DataType>,
}

impl CompiledAggregate {
    pub fn new(call: &AggregateCall, schema: &SchemaRef) -> Result<Self> {
        let udf = REGISTRY.udaf(&call.function).map_err(|_| {
            Error::unsupported(format!(
                "aggregate function {} is not supported on streams",
                call.function
            ))
        })?;
        let args: Vec<Arc<dyn PhysicalExpr>> = if call.args.is_empty() {
            vec![Arc::new(Literal::new(ScalarValue::Int64(Some(1))))]
        } else {
            call.args
                .iter()
                .map(|i| Arc::new(Column::new(schema.field(*i).name(), *i)) as Arc<dyn PhysicalExpr>)
                .collect()
        };
        let expr = AggregateExprBuilder::new(udf, args)
            .schema(schema.clone())
            .alias(call.function.clone())
            .with_distinct(call.distinct)
            .build()
            .map_err(df_error)?;
        let arg_type = call.args.first().map(|i| schema.field(*i).data_type().clone());
        Ok(CompiledAggregate {
            expr: Arc::new(expr),
            arg_type,
        })
    }

    /// The argument arrays of this aggregate over `batch`.
    pub fn arguments(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        self.expr
            .expressions()
            .iter()
            .map(|e| crate::project::evaluate(e, batch))
            .collect()
    }

    /// A vectorised accumulator over many groups.
    pub fn groups_accumulator(&self) -> Result<Box<dyn GroupsAccumulator>> {
        if self.expr.groups_accumulator_supported() {
            return self.expr.create_groups_accumulator().map_err(df_error);
        }
        let expr = self.expr.clone();
        Ok(Box::new(GroupsAccumulatorAdapter::new(move || {
            expr.create_accumulator()
        })))
    }

    /// An accumulator for one group.
    pub fn accumulator(&self) -> Result<Box<dyn Accumulator>> {
        self.expr.create_accumulator().map_err(df_error)
    }

    /// An accumulator for one group that can also take rows back
    /// (`retract_batch`): the one DataFusion's sliding window frames use.
    /// `min`, `max` and `count(DISTINCT …)` keep their values as a
    /// multiset ([`multiset`]): DataFusion's sliding `min`/`max` retract
    /// the oldest row, whatever row is given.
    pub fn retracting_accumulator(&self) -> Result<Box<dyn Accumulator>> {
        let (name, distinct) = (self.expr.fun().name(), self.expr.is_distinct());
        sluice_plan::check_retractable(name, distinct).map_err(Error::unsupported)?;
        if let Some(arg_type) = &self.arg_type
            && let Some(acc) = multiset::for_function(name, distinct, arg_type)?
        {
            return Ok(acc);
        }
        let acc = self.expr.create_sliding_accumulator().map_err(df_error)?;
        if !acc.supports_retract_batch() {
            return Err(Error::internal(format!(
                "{} cannot retract rows",
                self.expr.fun().name()
            )));
        }
        Ok(acc)
    }
}

/// What every aggregate operator compiles from its spec: the key row
/// converter (none without keys) and the aggregates.
pub struct AggregateInputs {
    pub converter: Option<arrow::row::RowConverter>,
    pub aggregates: Vec<CompiledAggregate>,
    pub key_columns: Vec<usize>,
}

impl AggregateInputs {
    pub fn new(spec: &sluice_plan::WindowAggSpec) -> Result<Self> {
        Self::compile(&spec.input_schema, &spec.key_columns, &spec.aggregates)
    }

    /// Compiles `aggregates` and a converter of `key_columns` over `schema`.
    pub fn compile(schema: &SchemaRef, key_columns: &[usize], aggregates: &[AggregateCall]) -> Result<Self> {
        let converter = if key_columns.is_empty() {
            None
        } else {
            let fields = key_columns
                .iter()
                .map(|c| arrow::row::SortField::new(schema.field(*c).data_type().clone()))
                .collect();
            Some(arrow::row::RowConverter::new(fields)?)
        };
        let aggregates = aggregates
            .iter()
            .map(|a| CompiledAggregate::new(a, schema))
            .collect::<Result<Vec<_>>>()?;
        Ok(AggregateInputs {
            converter,
            aggregates,
            key_columns: key_columns.to_vec(),
        })
    }
}

/// The batch's keys as rows (none without keys) and each aggregate's arguments.
pub fn read_inputs(
    converter: &Option<arrow::row::RowConverter>,
    key_columns: &[usize],
    aggregates: &[CompiledAggregate],
    batch: &RecordBatch,
) -> Result<(Option<arrow::row::Rows>, Vec<Vec<ArrayRef>>)> {
    let key_rows = match converter {
        Some(c) => {
            let keys: Vec<ArrayRef> = key_columns.iter().map(|k| batch.column(*k).clone()).collect();
            Some(c.convert_columns(&keys)?)
        }
        None => None,
    };
    let arguments = aggregates.iter().map(|a| a.arguments(batch)).collect::<Result<_>>()?;
    Ok((key_rows, arguments))
}
