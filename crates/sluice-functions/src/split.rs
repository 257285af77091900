//! Splitting text at a separator: Flink's `SPLIT_INDEX` and Postgres'
//! `split_part` (DataFusion's, with a faster path for its common case).
//!
//! Both find a piece by counting separators from the start. With a
//! separator of one ASCII byte (`'/'`, `','`, `'&'`) [`nth_piece`] reads the
//! text eight bytes a step and finds every separator in a word at once.
//! DataFusion's `split_part` calls a `memchr` search a piece: for a URL's
//! short pieces its set-up cost a call dominated Nexmark q22's profile
//! (three `split_part` of each bid's URL; ~50 % of the samples).

use super::{arrays, is_integer, is_text};
use arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use arrow::datatypes::{DataType, Int64Type};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use std::sync::Arc;

/// The top bit of each byte of `word` (eight bytes, little-endian) that
/// equals `byte`, exactly: no carry crosses a byte.
pub(crate) fn bytes_equal(word: &[u8], byte: u8) -> u64 {
    const LOW: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let x = u64::from_le_bytes(word.try_into().expect("eight bytes")) ^ u64::from_ne_bytes([byte; 8]);
    // A byte of x is 0 where `word` had `byte`.
    !(((x & LOW) + LOW) | x | LOW)
}

/// Piece `n` (from 0) of `s` split at every `separator`, an ASCII byte
/// (empty pieces count), or `None` past the last piece. Splitting UTF-8 at
/// an ASCII byte cuts no character, so every piece is text.
pub(crate) fn nth_piece(s: &str, separator: u8, n: usize) -> Option<&str> {
    debug_assert!(separator.is_ascii(), "a separator byte within a character");
    let bytes = s.as_bytes();
    // Separators still to pass, and where the current piece starts.
    let mut left = n;
    let mut start = 0;
    let mut words = bytes.chunks_exact(8);
    let mut at = 0;
    for word in &mut words {
        let mut found = bytes_equal(word, separator);
        // How many: a byte's bit moved to its lowest and the bytes summed
        // into the top byte (one multiply; `count_ones` is a loop of
        // shifts on x86-64's baseline, without `popcnt`).
        let count = ((found >> 7).wrapping_mul(0x0101_0101_0101_0101) >> 56) as usize;
        if found != 0 && count <= left {
            // The wanted piece starts after this word: skip its
            // separators at once.
            left -= count;
            start = at + 8 - (found.leading_zeros() / 8) as usize;
        } else {
            while found != 0 {
                let end = at + (found.trailing_zeros() / 8) as usize;
                if left == 0 {
                    return Some(&s[start..end]);
                }
                left -= 1;
                start = end + 1;
                found &= found - 1;
            }
        }
        at += 8;
    }
    for (i, b) in words.remainder().iter().enumerate() {
        if *b == separator {
            if left == 0 {
                return Some(&s[start..at + i]);
            }
            left -= 1;
            start = at + i + 1;
        }
    }
    (left == 0).then(|| &s[start..])
}

/// Piece `index` of `s` split at `separator` (Flink's `SPLIT_INDEX`).
pub fn split_index<'a>(s: &'a str, separator: &str, index: i64) -> Option<&'a str> {
    let index = usize::try_from(index).ok()?;
    if s.is_empty() {
        return None;
    }
    match separator.as_bytes() {
        [] => s.split_whitespace().nth(index),
        [b] if b.is_ascii() => nth_piece(s, *b, index),
        _ => s.split(separator).nth(index),
    }
}

udf_struct!(
    /// `SPLIT_INDEX(s, separator, i)`: the `i`-th (from 0) piece of `s` split
    /// at every `separator` (a text, not a pattern; empty pieces kept), as
    /// Flink's. NULL when any argument is NULL, `i` is negative or past the
    /// last piece, or `s` is empty; an empty separator splits at whitespace.
    SplitIndex
);

impl ScalarUDFImpl for SplitIndex {
    fn name(&self) -> &str {
        "split_index"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args {
            [s, sep, i] if is_text(s) && is_text(sep) && is_integer(i) => {
                Ok(vec![DataType::Utf8, DataType::Utf8, DataType::Int64])
            }
            [_, _, _] => plan_err!(
                "SPLIT_INDEX takes (text, separator text, index integer), not ({})",
                args.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            ),
            _ => plan_err!("SPLIT_INDEX takes three arguments, not {}", args.len()),
        }
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = arrays(&args)?;
        let (s, sep) = (arrays[0].as_string::<i32>(), arrays[1].as_string::<i32>());
        let index = arrays[2].as_primitive::<Int64Type>();
        let mut out = StringBuilder::with_capacity(s.len(), 0);
        for row in 0..s.len() {
            if s.is_null(row) || sep.is_null(row) || index.is_null(row) {
                out.append_null();
            } else {
                out.append_option(split_index(s.value(row), sep.value(row), index.value(row)));
            }
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// `split_part(s, delimiter, n)`: DataFusion's (Postgres' semantics: `n`
/// from 1, negative from the end, `''` past the last piece), with
/// [`nth_piece`] where a column of text is split at a constant one-byte
/// ASCII delimiter and a constant positive `n`; every other case is
/// DataFusion's own.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct SplitPart {
    inner: Arc<ScalarUDF>,
}

impl Default for SplitPart {
    fn default() -> Self {
        SplitPart {
            inner: datafusion::functions::string::split_part(),
        }
    }
}

impl SplitPart {
    /// The fast path's arguments, when the call is its case: the text, the
    /// delimiter byte and the piece from 0.
    fn fast_case(args: &ScalarFunctionArgs) -> Option<(&ArrayRef, u8, usize)> {
        let [ColumnarValue::Array(s), delimiter, position] = args.args.as_slice() else {
            return None;
        };
        let separator = match delimiter {
            ColumnarValue::Scalar(
                ScalarValue::Utf8(Some(d)) | ScalarValue::LargeUtf8(Some(d)) | ScalarValue::Utf8View(Some(d)),
            ) => match d.as_bytes() {
                [b] if b.is_ascii() => *b,
                _ => return None,
            },
            _ => return None,
        };
        let n = match position {
            ColumnarValue::Scalar(ScalarValue::Int64(Some(n))) if *n > 0 => usize::try_from(*n - 1).ok()?,
            _ => return None,
        };
        (*s.data_type() == DataType::Utf8).then_some((s, separator, n))
    }
}

impl ScalarUDFImpl for SplitPart {
    fn name(&self) -> &str {
        "split_part"
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        self.inner.return_type(args)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let Some((s, separator, n)) = Self::fast_case(&args) else {
            return self.inner.invoke_with_args(args);
        };
        let s = s.as_string::<i32>();
        // A piece is a part of its text: a quarter of the texts' bytes to
        // start with (the builder grows past it).
        let bytes = s.value_offsets().last().copied().unwrap_or(0) - s.value_offsets().first().copied().unwrap_or(0);
        let mut out = StringBuilder::with_capacity(s.len(), usize::try_from(bytes / 4).unwrap_or(0));
        for row in 0..s.len() {
            if s.is_null(row) {
                out.append_null();
            } else {
                out.append_value(nth_piece(s.value(row), separator, n).unwrap_or(""));
            }
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}
