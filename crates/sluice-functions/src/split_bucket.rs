//! `split_bucket(value, buckets)`: the planner's function for a split
//! distinct aggregation (`SET distinct_split_buckets`): which of `buckets`
//! buckets a distinct argument's value belongs to, so equal values meet in
//! one partial aggregate whatever instance or process computed the bucket.
//!
//! The hash is DataFusion's `create_hashes` with a seed fixed here, never
//! to change: partial aggregates store their groups by bucket, so a
//! checkpoint restored by a build that bucketed differently would count a
//! value in two buckets.

use arrow::array::{ArrayRef, Int32Array};
use arrow::datatypes::DataType;
use datafusion::common::hash_utils::{RandomState, create_hashes};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use std::sync::Arc;

/// The seed of every bucket hash (see the module's text: fixed for all time).
const SEED: RandomState = RandomState::with_seed(0x5B11_7D15);

/// The most buckets a split may have.
pub const BUCKETS_MAX: i64 = 65_536;

udf_struct!(
    /// `split_bucket(value, buckets)`: an INTEGER from 0 to `buckets - 1`, the
    /// same for equal values (NULLs share one bucket); `buckets` a constant
    /// from 1 to 65 536.
    SplitBucket
);

/// The call `split_bucket(value, buckets)`.
pub fn split_bucket(value: Expr, buckets: u32) -> Expr {
    ScalarUDF::from(SplitBucket::default()).call(vec![
        value,
        Expr::Literal(ScalarValue::Int64(Some(i64::from(buckets))), None),
    ])
}

impl ScalarUDFImpl for SplitBucket {
    fn name(&self) -> &str {
        "split_bucket"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args {
            [v, n] if crate::is_integer(n) => Ok(vec![v.clone(), DataType::Int64]),
            [_, n] => plan_err!("split_bucket takes (value, buckets integer), not a {n} count"),
            _ => plan_err!("split_bucket takes two arguments, not {}", args.len()),
        }
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let buckets = match &args.args[1] {
            ColumnarValue::Scalar(ScalarValue::Int64(Some(n))) if (1..=BUCKETS_MAX).contains(n) => *n as u64,
            ColumnarValue::Scalar(n) => {
                return exec_err!("split_bucket: buckets must be from 1 to {BUCKETS_MAX}, not {n}");
            }
            ColumnarValue::Array(_) => return exec_err!("split_bucket: buckets must be a constant"),
        };
        let values: ArrayRef = args.args[0].to_array(args.number_rows)?;
        let mut hashes = vec![0u64; values.len()];
        create_hashes(&[values], &SEED, &mut hashes)?;
        let out: Int32Array = hashes.iter().map(|h| Some((h % buckets) as i32)).collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}
