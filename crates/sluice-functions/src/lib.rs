//! Scalar functions Flink SQL users type that DataFusion does not have,
//! as DataFusion UDFs with Flink's semantics: `MOD`, `HOUR`,
//! `DATE_FORMAT` (Java date patterns), `REGEXP_EXTRACT` and `SPLIT_INDEX`;
//! DataFusion's `split_part` with a faster path for one-byte delimiters
//! ([`split`]); and the planner's own `split_bucket` ([`split_bucket`]).
//!
//! One list ([`udfs`]) registered by [`register`] in every context that
//! plans or evaluates an expression — the streaming planner, the operators
//! compiling expression text on workers, batch queries, INSERT values and
//! computed columns — so a function the planner accepts is one every task
//! can run.

/// A UDF's struct: its coercion is its own (`coerce_types`), so its
/// signature is user-defined and immutable.
macro_rules! udf_struct {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, PartialEq, Eq, Hash)]
        pub(crate) struct $name {
            signature: Signature,
        }

        impl Default for $name {
            fn default() -> Self {
                $name {
                    signature: Signature::user_defined(Volatility::Immutable),
                }
            }
        }
    };
}

mod date_format;
mod replace;
mod split;
mod split_bucket;
pub use split::split_index;
pub use split_bucket::{BUCKETS_MAX as SPLIT_BUCKETS_MAX, split_bucket};

use arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use arrow::compute::kernels::cast::{CastOptions, cast_with_options};
use arrow::compute::kernels::numeric::rem;
use arrow::compute::kernels::temporal::{DatePart, date_part};
use arrow::datatypes::{DataType, Int64Type, TimeUnit};
use datafusion::common::{DataFusionError, Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;
use regex::{Regex, RegexBuilder};
use std::collections::HashMap;
use std::sync::Arc;

/// Every function of this crate.
pub fn udfs() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::from(Mod::default()),
        ScalarUDF::from(Hour::default()),
        ScalarUDF::from(date_format::DateFormat::default()),
        ScalarUDF::from(RegexpExtract::default()),
        ScalarUDF::from(split::SplitIndex::default()),
        ScalarUDF::from(split::SplitPart::default()),
        ScalarUDF::from(replace::Replace::default()),
        ScalarUDF::from(split_bucket::SplitBucket::default()),
    ]
}

/// Registers every function of this crate in `ctx` (replacing DataFusion's
/// `date_format`, an alias of `to_char` with strftime patterns: Flink's
/// users write Java patterns; and its `split_part` and `replace` by the
/// same functions with a faster path).
pub fn register(ctx: &SessionContext) {
    for f in udfs() {
        ctx.register_udf(f);
    }
}

/// Checks the constant arguments of this crate's functions in `expr` the
/// way their `simplify` does (a `DATE_FORMAT` pattern, a `REGEXP_EXTRACT`
/// pattern), for planners that hand expressions on as text without
/// simplifying them: the statement is refused when planned instead of
/// each task failing to compile it.
pub fn check_constants(expr: &Expr) -> Result<()> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    expr.apply(|e| {
        if let Expr::ScalarFunction(call) = e {
            check_pattern(call.func.name(), &call.args)?;
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map(|_| ())
}

/// The one check of a constant pattern argument (the second), shared by
/// [`check_constants`] and the functions' `simplify`: a `DATE_FORMAT`
/// pattern with a letter it does not know, or a `REGEXP_EXTRACT` pattern
/// that does not compile within [`REGEX_SIZE_MAX`], is a planning error.
fn check_pattern(function: &str, args: &[Expr]) -> Result<()> {
    let Some(pattern) = args.get(1).and_then(literal_text) else {
        return Ok(());
    };
    match function {
        "date_format" => match date_format::items(pattern) {
            Ok(_) => Ok(()),
            Err(why) => plan_err!("DATE_FORMAT: {why}"),
        },
        "regexp_extract" => match RegexBuilder::new(pattern).size_limit(REGEX_SIZE_MAX).build() {
            Ok(_) => Ok(()),
            Err(e) => plan_err!("REGEXP_EXTRACT: invalid regular expression \"{pattern}\": {e}"),
        },
        _ => Ok(()),
    }
}

/// The longest compiled regular expression `REGEXP_EXTRACT` builds; a
/// larger one is treated as an invalid pattern (NULL).
pub const REGEX_SIZE_MAX: usize = 1 << 20;
/// Distinct patterns `REGEXP_EXTRACT` keeps compiled per batch when the
/// pattern is a column, not a constant.
const REGEX_CACHE_MAX: usize = 64;

/// The text of a constant text argument.
fn literal_text(e: &Expr) -> Option<&str> {
    match e {
        Expr::Literal(
            ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) | ScalarValue::Utf8View(Some(s)),
            _,
        ) => Some(s.as_str()),
        _ => None,
    }
}

fn is_integer(t: &DataType) -> bool {
    t.is_integer() || *t == DataType::Null
}

fn is_numeric(t: &DataType) -> bool {
    t.is_numeric() || *t == DataType::Null
}

fn is_text(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
    )
}

/// Each argument as an array of the batch's rows.
fn arrays(args: &ScalarFunctionArgs) -> Result<Vec<ArrayRef>> {
    args.args.iter().map(|a| a.to_array(args.number_rows)).collect()
}

udf_struct!(
    /// `MOD(a, b)`: the remainder of `a / b`, negative only when `a` is (as
    /// Flink's, Java's and Postgres'). Integers give BIGINT, any other number
    /// DOUBLE. An integer division by zero is an error, as in Flink (a DOUBLE
    /// one is NaN).
    Mod
);

impl ScalarUDFImpl for Mod {
    fn name(&self) -> &str {
        "mod"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args {
            [a, b] if is_integer(a) && is_integer(b) => Ok(vec![DataType::Int64; 2]),
            [a, b] if is_numeric(a) && is_numeric(b) => Ok(vec![DataType::Float64; 2]),
            [a, b] => plan_err!("MOD takes two numbers, not {a} and {b}"),
            _ => plan_err!("MOD takes two arguments (MOD(a, b)), not {}", args.len()),
        }
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(match args.first() {
            Some(DataType::Float64) => DataType::Float64,
            _ => DataType::Int64,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [a, b] = <[ArrayRef; 2]>::try_from(arrays(&args)?)
            .map_err(|_| DataFusionError::Execution("MOD takes two arguments".into()))?;
        match rem(&a, &b) {
            Ok(r) => Ok(ColumnarValue::Array(r)),
            Err(arrow::error::ArrowError::DivideByZero) => exec_err!("division by zero in MOD"),
            Err(e) => Err(e.into()),
        }
    }
}

udf_struct!(
    /// `HOUR(ts)`: the hour of the day (0–23) of a timestamp, as BIGINT (in its
    /// time zone when it has one).
    Hour
);

impl ScalarUDFImpl for Hour {
    fn name(&self) -> &str {
        "hour"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args {
            [t @ DataType::Timestamp(..)] => Ok(vec![t.clone()]),
            [DataType::Date32 | DataType::Date64 | DataType::Null] => {
                Ok(vec![DataType::Timestamp(TimeUnit::Millisecond, None)])
            }
            [t] if is_text(t) => Ok(vec![DataType::Timestamp(TimeUnit::Microsecond, None)]),
            [t] => plan_err!("HOUR takes a timestamp, not {t}"),
            _ => plan_err!("HOUR takes one argument (HOUR(ts)), not {}", args.len()),
        }
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let ts = arrays(&args)?.remove(0);
        let hours = date_part(&ts, DatePart::Hour)?;
        Ok(ColumnarValue::Array(cast_with_options(
            &hours,
            &DataType::Int64,
            &CastOptions::default(),
        )?))
    }
}

udf_struct!(
    /// `REGEXP_EXTRACT(s, pattern[, group])`: the text of capture group
    /// `group` (default 0, the whole match) of the first match of `pattern`
    /// in `s`. NULL, as in Flink, when any argument is NULL, nothing matches,
    /// or the group does not exist or took no part in the match. The pattern
    /// is Rust's `regex` syntax (Java's for the common cases; no look-around
    /// or back-references): a constant invalid one is refused at planning, one
    /// read from a column is NULL where invalid (Flink's answer).
    RegexpExtract
);

fn compile(pattern: &str) -> Option<Regex> {
    RegexBuilder::new(pattern).size_limit(REGEX_SIZE_MAX).build().ok()
}

impl ScalarUDFImpl for RegexpExtract {
    fn name(&self) -> &str {
        "regexp_extract"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args {
            [s, p] if is_text(s) && is_text(p) => Ok(vec![DataType::Utf8; 2]),
            [s, p, g] if is_text(s) && is_text(p) && is_integer(g) => {
                Ok(vec![DataType::Utf8, DataType::Utf8, DataType::Int64])
            }
            [_, _] | [_, _, _] => plan_err!(
                "REGEXP_EXTRACT takes (text, pattern text[, group integer]), not ({})",
                args.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            ),
            _ => plan_err!("REGEXP_EXTRACT takes two or three arguments, not {}", args.len()),
        }
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    /// A constant pattern is compiled when the statement is planned: an
    /// invalid one is refused then (a pattern read from a column is NULL
    /// where it is invalid, as in Flink).
    fn simplify(&self, args: Vec<Expr>, _info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        check_pattern(self.name(), &args)?;
        Ok(ExprSimplifyResult::Original(args))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        // A constant pattern is compiled once for the batch.
        let constant = match &args.args[1] {
            ColumnarValue::Scalar(ScalarValue::Utf8(Some(p))) => match compile(p) {
                Some(r) => Some(Some(r)),
                None => return exec_err!("REGEXP_EXTRACT: invalid regular expression \"{p}\""),
            },
            _ => None,
        };
        let arrays = arrays(&args)?;
        let (s, p) = (arrays[0].as_string::<i32>(), arrays[1].as_string::<i32>());
        let group = arrays.get(2).map(|g| g.as_primitive::<Int64Type>());
        let mut cache: HashMap<&str, Option<Regex>> = HashMap::new();
        let mut out = StringBuilder::with_capacity(s.len(), 0);
        // The groups' positions, reused from row to row (no allocation a
        // row); made again when the pattern changes.
        let mut locations: Option<(String, regex::CaptureLocations)> = None;
        for row in 0..s.len() {
            if s.is_null(row) || p.is_null(row) || group.is_some_and(|g| g.is_null(row)) {
                out.append_null();
                continue;
            }
            let index = group.map_or(0, |g| g.value(row));
            let regex = match &constant {
                Some(compiled) => compiled.as_ref(),
                None => {
                    let pattern = p.value(row);
                    if !cache.contains_key(pattern) && cache.len() >= REGEX_CACHE_MAX {
                        cache.clear();
                    }
                    cache.entry(pattern).or_insert_with(|| compile(pattern)).as_ref()
                }
            };
            let text = s.value(row);
            let found = match (usize::try_from(index), regex) {
                (Ok(i), Some(r)) => {
                    if locations.as_ref().is_none_or(|(p, _)| p != r.as_str()) {
                        locations = Some((r.as_str().to_string(), r.capture_locations()));
                    }
                    let (_, locs) = locations.as_mut().expect("made above");
                    r.captures_read(locs, text)
                        .and_then(|_| locs.get(i))
                        .map(|(start, end)| &text[start..end])
                }
                _ => None,
            };
            out.append_option(found);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

#[cfg(test)]
mod tests;
