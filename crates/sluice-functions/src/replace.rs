//! `replace(s, from, to)`: DataFusion's, with a faster path for its common
//! case, a constant `from` of one ASCII byte (`replace(extra, 'c', '')`,
//! how Nexmark q14 counts a character in SQL).
//!
//! DataFusion's finds each occurrence with a `memchr` search: for short
//! texts the set-up of a search a call was most of its cost (~15 % of
//! q14's samples, in `memchr`'s dispatch and `replace_into_writer`). Here
//! the text is read eight bytes a step and every occurrence in a word is
//! found at once ([`super::split::bytes_equal`]).

use super::split::bytes_equal;
use arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature};
use std::fmt::Write;
use std::sync::Arc;

/// Appends `s` with every `from` (an ASCII byte) replaced by `to` as the
/// builder's current value (the caller ends it). Cutting UTF-8 at an ASCII
/// byte cuts no character, so every piece is text.
pub(crate) fn write_replaced(s: &str, from: u8, to: &str, out: &mut impl Write) -> std::fmt::Result {
    debug_assert!(from.is_ascii(), "a byte within a character");
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut at = 0;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut found = bytes_equal(word, from);
        while found != 0 {
            let end = at + (found.trailing_zeros() / 8) as usize;
            out.write_str(&s[start..end])?;
            out.write_str(to)?;
            start = end + 1;
            found &= found - 1;
        }
        at += 8;
    }
    for (i, b) in words.remainder().iter().enumerate() {
        if *b == from {
            out.write_str(&s[start..at + i])?;
            out.write_str(to)?;
            start = at + i + 1;
        }
    }
    out.write_str(&s[start..])
}

/// DataFusion's `replace` (every occurrence of `from`, none when `from` is
/// empty), with [`write_replaced`] where a column of text has a constant
/// one-byte ASCII `from` replaced by a constant `to`; every other case is
/// DataFusion's own.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct Replace {
    inner: Arc<ScalarUDF>,
}

impl Default for Replace {
    fn default() -> Self {
        Replace {
            inner: datafusion::functions::string::replace(),
        }
    }
}

fn constant_text(value: &ColumnarValue) -> Option<&str> {
    match value {
        ColumnarValue::Scalar(
            ScalarValue::Utf8(Some(t)) | ScalarValue::LargeUtf8(Some(t)) | ScalarValue::Utf8View(Some(t)),
        ) => Some(t),
        _ => None,
    }
}

impl Replace {
    /// The fast path's arguments, when the call is its case: the text, the
    /// byte and its replacement.
    fn fast_case(args: &ScalarFunctionArgs) -> Option<(&ArrayRef, u8, &str)> {
        let [ColumnarValue::Array(s), from, to] = args.args.as_slice() else {
            return None;
        };
        let from = match constant_text(from)?.as_bytes() {
            [b] if b.is_ascii() => *b,
            _ => return None,
        };
        let to = constant_text(to)?;
        (*s.data_type() == DataType::Utf8 && *args.return_field.data_type() == DataType::Utf8).then_some((s, from, to))
    }
}

impl ScalarUDFImpl for Replace {
    fn name(&self) -> &str {
        "replace"
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        self.inner.return_type(args)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let Some((s, from, to)) = Self::fast_case(&args) else {
            return self.inner.invoke_with_args(args);
        };
        let s = s.as_string::<i32>();
        let offsets = s.value_offsets();
        let bytes = offsets.last().copied().unwrap_or(0) - offsets.first().copied().unwrap_or(0);
        let mut out = StringBuilder::with_capacity(s.len(), usize::try_from(bytes).unwrap_or(0));
        for row in 0..s.len() {
            if s.is_null(row) {
                out.append_null();
            } else {
                write_replaced(s.value(row), from, to, &mut out)
                    .map_err(|_| datafusion::common::DataFusionError::Execution("replace: cannot write".into()))?;
                // Ends the value written.
                out.append_value("");
            }
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}
