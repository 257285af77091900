//! Record formats of the message connectors (Kafka): decoding many record
//! payloads into one Arrow batch while isolating the malformed ones, and
//! encoding rows back into one payload each.
//!
//! Decoding takes the fast path — the whole set at once with arrow's JSON
//! or CSV decoder — and only when that fails (or yields a different number
//! of rows than records) decodes record by record to find the bad ones, so
//! the good records of a batch with one bad record still arrive.

use arrow::array::{Array, ArrayRef, BinaryArray, RecordBatch, StringArray};
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, SchemaRef};
use sluice_types::{Error, Result};
use std::sync::Arc;

/// How a record's value (or key) is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordFormat {
    /// One JSON object per record.
    Json,
    /// One CSV line per record, columns in schema order, no header.
    Csv,
    /// The bytes themselves, into (from) the only column (text or bytea).
    Raw,
}

impl RecordFormat {
    pub fn parse(text: &str) -> Result<Self> {
        match text.to_ascii_lowercase().as_str() {
            "json" => Ok(RecordFormat::Json),
            "csv" => Ok(RecordFormat::Csv),
            "raw" => Ok(RecordFormat::Raw),
            other => Err(Error::invalid_option(format!(
                "format '{other}' is not supported; use json, csv or raw"
            ))),
        }
    }

    /// Checks that `schema` can be read or written in this format.
    pub fn check_schema(self, schema: &SchemaRef) -> Result<()> {
        if self == RecordFormat::Raw {
            let ok =
                schema.fields().len() == 1 && matches!(schema.field(0).data_type(), DataType::Utf8 | DataType::Binary);
            if !ok {
                return Err(Error::invalid_option(
                    "format 'raw' needs exactly one TEXT or BYTEA column (besides the _kafka_* columns)",
                ));
            }
        }
        Ok(())
    }
}

/// Records decoded from a set of payloads: the good rows in order, and the
/// index and error of each bad one.
#[derive(Debug)]
pub struct Decoded {
    pub batch: RecordBatch,
    /// Indexes (into the payloads) of the rows of `batch`.
    pub good: Vec<usize>,
    pub bad: Vec<(usize, String)>,
}

/// Decodes payloads of one format into rows of `schema`.
#[derive(Debug, Clone)]
pub struct RecordDecoder {
    format: RecordFormat,
    schema: SchemaRef,
}

impl RecordDecoder {
    pub fn new(format: RecordFormat, schema: SchemaRef) -> Result<Self> {
        format.check_schema(&schema)?;
        Ok(RecordDecoder { format, schema })
    }

    pub fn decode(&self, payloads: &[&[u8]]) -> Decoded {
        if self.format == RecordFormat::Raw {
            return self.decode_raw(payloads);
        }
        if let Ok(batch) = self.decode_all(payloads)
            && batch.num_rows() == payloads.len()
        {
            return Decoded {
                batch,
                good: (0..payloads.len()).collect(),
                bad: Vec::new(),
            };
        }
        let mut batches = Vec::new();
        let mut good = Vec::new();
        let mut bad = Vec::new();
        for (i, p) in payloads.iter().enumerate() {
            match self.decode_all(std::slice::from_ref(p)) {
                Ok(b) if b.num_rows() == 1 => {
                    batches.push(b);
                    good.push(i);
                }
                Ok(b) => bad.push((i, format!("the record holds {} values, expected one", b.num_rows()))),
                Err(e) => bad.push((i, e)),
            }
        }
        let batch =
            concat_batches(&self.schema, &batches).unwrap_or_else(|_| RecordBatch::new_empty(self.schema.clone()));
        Decoded { batch, good, bad }
    }

    /// Decodes the payloads with one decoder, a record per line, checking
    /// after each record that it added exactly one row: a record holding
    /// two values (`{…}{…}`, a CSV line with a `\r`) or an unfinished one
    /// (an open object or quote that the next record would complete) is an
    /// error here, never rows shifted onto the other records' offsets.
    fn decode_all(&self, payloads: &[&[u8]]) -> std::result::Result<RecordBatch, String> {
        // One more than expected, so a record holding two values shows.
        let rows = payloads.len() + 1;
        let one_each = |i: usize, buffered: usize, partial: bool| -> std::result::Result<(), String> {
            if partial {
                Err("the record is not one complete value".into())
            } else if buffered != i + 1 {
                Err(format!(
                    "the record holds {} values, expected one",
                    buffered.saturating_sub(i)
                ))
            } else {
                Ok(())
            }
        };
        let batch = match self.format {
            RecordFormat::Json => {
                let mut d = arrow::json::ReaderBuilder::new(self.schema.clone())
                    .with_batch_size(rows)
                    .build_decoder()
                    .map_err(|e| e.to_string())?;
                for (i, p) in payloads.iter().enumerate() {
                    feed(p, |b| d.decode(b)).map_err(|e| e.to_string())?;
                    feed(b"\n", |b| d.decode(b)).map_err(|e| e.to_string())?;
                    let partial = d.has_partial_record();
                    one_each(i, d.len() - usize::from(partial), partial)?;
                }
                d.flush().map_err(|e| e.to_string())?
            }
            RecordFormat::Csv => {
                let mut d = arrow::csv::ReaderBuilder::new(self.schema.clone())
                    .with_header(false)
                    .with_batch_size(rows)
                    .build_decoder();
                for (i, p) in payloads.iter().enumerate() {
                    if p.contains(&b'\n') {
                        return Err("a CSV record must be one line".into());
                    }
                    feed(p, |b| d.decode(b)).map_err(|e| e.to_string())?;
                    feed(b"\n", |b| d.decode(b)).map_err(|e| e.to_string())?;
                    // An open quote keeps the line in the decoder: no row.
                    one_each(i, rows - d.capacity(), false)?;
                }
                d.flush().map_err(|e| e.to_string())?
            }
            RecordFormat::Raw => unreachable!("raw records are not decoded as a buffer"),
        };
        let batch = batch.unwrap_or_else(|| RecordBatch::new_empty(self.schema.clone()));
        check_not_null(&batch)?;
        Ok(batch)
    }

    fn decode_raw(&self, payloads: &[&[u8]]) -> Decoded {
        let field = self.schema.field(0);
        let mut good = Vec::new();
        let mut bad = Vec::new();
        let column: ArrayRef = match field.data_type() {
            DataType::Utf8 => {
                let mut values = Vec::new();
                for (i, p) in payloads.iter().enumerate() {
                    match std::str::from_utf8(p) {
                        Ok(s) => {
                            values.push(s);
                            good.push(i);
                        }
                        Err(e) => bad.push((i, format!("the record is not valid UTF-8: {e}"))),
                    }
                }
                Arc::new(StringArray::from(values))
            }
            _ => {
                good = (0..payloads.len()).collect();
                Arc::new(BinaryArray::from(payloads.to_vec()))
            }
        };
        let batch = RecordBatch::try_new(self.schema.clone(), vec![column])
            .unwrap_or_else(|_| RecordBatch::new_empty(self.schema.clone()));
        Decoded { batch, good, bad }
    }
}

/// Feeds `buf` to a push decoder until it has taken all of it.
fn feed(
    buf: &[u8],
    mut decode: impl FnMut(&[u8]) -> std::result::Result<usize, arrow::error::ArrowError>,
) -> std::result::Result<(), arrow::error::ArrowError> {
    let mut at = 0;
    while at < buf.len() {
        let n = decode(&buf[at..])?;
        if n == 0 {
            if buf[at..].iter().all(u8::is_ascii_whitespace) {
                break;
            }
            return Err(arrow::error::ArrowError::JsonError("more values than records".into()));
        }
        at += n;
    }
    Ok(())
}

/// arrow's decoders accept a missing value for a NOT NULL column; a
/// required field that is absent is a malformed record here.
fn check_not_null(batch: &RecordBatch) -> std::result::Result<(), String> {
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        if !field.is_nullable() && column.null_count() > 0 {
            return Err(format!("required field \"{}\" is missing or null", field.name()));
        }
    }
    Ok(())
}

/// Encodes each row of a batch as one payload.
pub fn encode_rows(format: RecordFormat, batch: &RecordBatch) -> Result<Vec<Vec<u8>>> {
    match format {
        RecordFormat::Json => {
            let mut buf = Vec::new();
            {
                let mut w = arrow::json::LineDelimitedWriter::new(&mut buf);
                w.write(batch)?;
                w.finish()?;
            }
            // JSON escapes newlines inside strings: one line is one row.
            let rows: Vec<Vec<u8>> = buf
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .map(<[u8]>::to_vec)
                .collect();
            if rows.len() != batch.num_rows() {
                return Err(Error::internal("JSON encoding produced a different number of rows"));
            }
            Ok(rows)
        }
        RecordFormat::Csv => (0..batch.num_rows())
            .map(|i| {
                let mut buf = Vec::new();
                {
                    let mut w = arrow::csv::WriterBuilder::new().with_header(false).build(&mut buf);
                    w.write(&batch.slice(i, 1))?;
                }
                if buf.last() == Some(&b'\n') {
                    buf.pop();
                }
                Ok(buf)
            })
            .collect(),
        RecordFormat::Raw => {
            let column = batch.column(0);
            if let Some(s) = column.as_any().downcast_ref::<StringArray>() {
                Ok(s.iter().map(|v| v.unwrap_or_default().as_bytes().to_vec()).collect())
            } else if let Some(b) = column.as_any().downcast_ref::<BinaryArray>() {
                Ok(b.iter().map(|v| v.unwrap_or_default().to_vec()).collect())
            } else {
                Err(Error::invalid_option(
                    "format 'raw' needs exactly one TEXT or BYTEA column",
                ))
            }
        }
    }
}

/// The op of each row of a changelog batch (its first column).
pub fn change_ops(batch: &RecordBatch) -> Result<Vec<sluice_plan::ChangeOp>> {
    let ops = batch
        .column(0)
        .as_any()
        .downcast_ref::<arrow::array::StringArray>()
        .ok_or_else(|| Error::internal("a changelog's op column is not text"))?;
    (0..ops.len())
        .map(|i| {
            sluice_plan::ChangeOp::parse(ops.value(i))
                .ok_or_else(|| Error::internal(format!("unknown changelog op {:?}", ops.value(i))))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, TimestampMillisecondArray};
    use arrow::datatypes::{Field, Schema, TimeUnit};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        ]))
    }

    #[test]
    fn json_fast_path_and_bad_records_isolated() {
        let d = RecordDecoder::new(RecordFormat::Json, schema()).unwrap();
        let ok = d.decode(&[br#"{"id":1,"name":"a","ts":"2026-11-30T12:00:00"}"#, br#"{"id":2}"#]);
        assert_eq!(ok.batch.num_rows(), 2);
        assert!(ok.bad.is_empty());
        let ts = ok
            .batch
            .column(2)
            .as_any()
            .downcast_ref::<TimestampMillisecondArray>()
            .unwrap();
        assert_eq!(ts.value(0), 1_796_040_000_000);

        let mixed = d.decode(&[
            br#"{"id":1}"#,
            br#"{"id":"x"}"#,       // wrong type
            br#"not json"#,         // not JSON
            br#"{"name":"b"}"#,     // required id missing
            br#"{"id":5}{"id":6}"#, // two values in one record
            br#"{"id":7}"#,
        ]);
        let ids = mixed.batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(ids.values().to_vec(), vec![1, 7]);
        assert_eq!(mixed.good, vec![0, 5]);
        let bad: Vec<usize> = mixed.bad.iter().map(|(i, _)| *i).collect();
        assert_eq!(bad, vec![1, 2, 3, 4]);
        assert!(mixed.bad[2].1.contains("\"id\""), "{}", mixed.bad[2].1);
    }

    #[test]
    fn csv_records_and_a_short_line() {
        let d = RecordDecoder::new(RecordFormat::Csv, schema()).unwrap();
        let out = d.decode(&[b"1,a,2026-11-30 12:00:00", b"2,b", b"3,,"]);
        assert_eq!(out.good, vec![0, 2]);
        assert_eq!(out.bad.len(), 1);
    }

    #[test]
    fn raw_text_rejects_invalid_utf8() {
        let s = Arc::new(Schema::new(vec![Field::new("line", DataType::Utf8, true)]));
        let d = RecordDecoder::new(RecordFormat::Raw, s).unwrap();
        let out = d.decode(&[b"hello", &[0xff, 0xfe], b"world"]);
        assert_eq!(out.good, vec![0, 2]);
        assert_eq!(out.batch.num_rows(), 2);
        assert!(RecordDecoder::new(RecordFormat::Raw, schema()).is_err());
    }

    #[test]
    fn encode_json_and_csv_one_payload_per_row() {
        let batch = RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("line\nbreak"), None])),
                Arc::new(TimestampMillisecondArray::from(vec![Some(0), None])),
            ],
        )
        .unwrap();
        let json = encode_rows(RecordFormat::Json, &batch).unwrap();
        assert_eq!(json.len(), 2);
        let v: serde_json::Value = serde_json::from_slice(&json[0]).unwrap();
        assert_eq!(v["name"], "line\nbreak");
        let csv = encode_rows(RecordFormat::Csv, &batch).unwrap();
        assert_eq!(csv.len(), 2);
        assert_eq!(String::from_utf8_lossy(&csv[1]), "2,,");
        // Round trip through the decoder.
        let d = RecordDecoder::new(RecordFormat::Json, schema()).unwrap();
        let refs: Vec<&[u8]> = json.iter().map(Vec::as_slice).collect();
        assert_eq!(d.decode(&refs).batch, batch);
    }
}
