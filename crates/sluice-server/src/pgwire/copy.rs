//! `COPY … TO STDOUT` in Postgres' text format.
//!
//! One `CopyData` message per row: the columns' text forms (as in a
//! `DataRow`) separated by tabs and ended by a newline, NULL written as
//! `\N`, and backslash, tab, newline, carriage return, backspace, form feed
//! and vertical tab escaped with a backslash, as Postgres'
//! `CopyAttributeOutText` does.

use arrow::record_batch::RecordBatch;
use bytes::{BufMut, Bytes, BytesMut};
use sluice_types::Result;

use super::encode::BatchEncoder;

/// Appends `value` with COPY text escaping.
pub(crate) fn escape_copy_text(value: &[u8], out: &mut BytesMut) {
    out.reserve(value.len());
    for &byte in value {
        let escaped = match byte {
            b'\\' => b'\\',
            b'\t' => b't',
            b'\n' => b'n',
            b'\r' => b'r',
            0x08 => b'b',
            0x0c => b'f',
            0x0b => b'v',
            _ => {
                out.put_u8(byte);
                continue;
            }
        };
        out.put_u8(b'\\');
        out.put_u8(escaped);
    }
}

/// Encodes every row of `batch` as one COPY text line (with its newline).
pub(crate) fn encode_copy_lines(batch: &RecordBatch) -> Result<Vec<Bytes>> {
    let encoder = BatchEncoder::try_new(batch)?;
    let mut value = BytesMut::new();
    let mut line = BytesMut::new();
    let mut lines = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        for col in 0..encoder.num_columns() {
            if col > 0 {
                line.put_u8(b'\t');
            }
            if encoder.is_null(col, row) {
                line.put_slice(b"\\N");
                continue;
            }
            value.clear();
            encoder.write_text(col, row, &mut value)?;
            escape_copy_text(&value, &mut line);
        }
        line.put_u8(b'\n');
        lines.push(line.split().freeze());
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BinaryArray, Float64Array, Int32Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn escaped(value: &str) -> String {
        let mut out = BytesMut::new();
        escape_copy_text(value.as_bytes(), &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn escapes_follow_copy_text_format() {
        assert_eq!(escaped("plain"), "plain");
        assert_eq!(escaped("a\tb"), "a\\tb");
        assert_eq!(escaped("line1\nline2\r"), "line1\\nline2\\r");
        assert_eq!(escaped("C:\\dir"), "C:\\\\dir");
        assert_eq!(escaped("\u{8}\u{c}\u{b}"), "\\b\\f\\v");
        // Other control characters and non-ASCII text pass through.
        assert_eq!(escaped("\u{1}é"), "\u{1}é");
        // A literal backslash-N is not NULL once escaped.
        assert_eq!(escaped("\\N"), "\\\\N");
    }

    #[test]
    fn lines_are_tab_separated_with_null_marker() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("price", DataType::Float64, true),
            Field::new("raw", DataType::Binary, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from(vec![Some(1), None])),
                Arc::new(StringArray::from(vec![Some("tab\there"), Some("x")])),
                Arc::new(Float64Array::from(vec![Some(2.5), None])),
                Arc::new(BinaryArray::from(vec![Some(&[0xab][..]), None])),
            ],
        )
        .unwrap();
        let lines = encode_copy_lines(&batch).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(&lines[0][..], b"1\ttab\\there\t2.5\t\\\\xab\n");
        assert_eq!(&lines[1][..], b"\\N\tx\t\\N\t\\N\n");
    }
}
