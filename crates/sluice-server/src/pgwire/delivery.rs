//! Sending a statement's results to the client.
//!
//! Rows and COPY lines are produced lazily from the engine's batch stream
//! and written one message at a time. pgwire's sink only writes its buffer
//! once it holds 8 KiB (or on an explicit flush), so [`deliver`] flushes
//! whenever the next message is not ready yet: a client sees each batch
//! as soon as the engine produces it, and at most one batch plus the
//! sink's buffer is held per connection. Command tags, transaction status
//! and engine errors are translated here too.

use std::fmt::Debug;
use std::sync::Arc;

use arrow::compute::cast;
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{FutureExt, Sink, SinkExt, StreamExt};
use pgwire::api::results::{FieldFormat, FieldInfo, SendableRowStream};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult, SEVERITY_ERROR};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::copy::{CopyData, CopyDone, CopyOutResponse};
use pgwire::messages::data::RowDescription;
use pgwire::messages::response::{CommandComplete, TransactionStatus};
use sluice_types::{Error, Result};

use super::connection::QueryWatch;
use super::copy::encode_copy_lines;
use super::encode::encode_data_rows;
use crate::engine::RowStream;

/// How a stream of result messages ended.
#[derive(Debug)]
pub(crate) enum Delivered {
    /// The stream ended after this many messages.
    Complete(usize),
    /// `max_rows` messages were sent; the rest stays in the stream.
    Suspended,
    /// The statement failed or was cancelled; report this error.
    Failed(Box<ErrorInfo>),
}

/// Sends the messages of `items` until it ends, `max_rows` (if not 0) were
/// sent, or the statement is interrupted. Flushes before every wait.
/// `Err` is a connection-level failure (the client is gone).
pub(crate) async fn deliver<C, T>(
    client: &mut C,
    items: &mut BoxStream<'static, PgWireResult<T>>,
    max_rows: usize,
    watch: &mut QueryWatch<'_>,
    message: fn(T) -> PgWireBackendMessage,
) -> PgWireResult<Delivered>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<C::Error>,
{
    let mut sent = 0;
    loop {
        if max_rows != 0 && sent == max_rows {
            return Ok(Delivered::Suspended);
        }
        if watch.cancel_requested() {
            return Ok(Delivered::Failed(Box::new(super::connection::canceled_info())));
        }
        let next = match items.next().now_or_never() {
            Some(next) => next,
            None => {
                client.flush().await?;
                match watch.guard(items.next()).await {
                    Ok(next) => next,
                    Err(interrupt) => {
                        return Ok(Delivered::Failed(Box::new(interrupt.into_error()?)));
                    }
                }
            }
        };
        match next {
            None => return Ok(Delivered::Complete(sent)),
            Some(Err(e)) => return Ok(Delivered::Failed(Box::new(e.into()))),
            Some(Ok(item)) => {
                client.feed(message(item)).await?;
                sent += 1;
            }
        }
    }
}

/// A statement-level error as a pgwire error (an ErrorResponse).
pub(crate) fn engine_error(error: &Error) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(error)))
}

/// The ErrorResponse fields for an engine error: its SQLSTATE and message
/// (never Rust debug output).
pub(crate) fn error_info(error: &Error) -> ErrorInfo {
    if matches!(error, Error::Internal(_)) {
        tracing::warn!(%error, "internal error reported to a client");
    }
    let mut info = ErrorInfo::new(
        SEVERITY_ERROR.to_owned(),
        error.sqlstate().to_owned(),
        error.to_string(),
    );
    info.severity_nonlocalized = Some(SEVERITY_ERROR.to_owned());
    info
}

/// The CommandComplete tag of an `Output::Command`: `INSERT 0 n` for
/// INSERT, otherwise the tag with the row count appended when there is one.
pub(crate) fn command_tag(tag: &str, rows: Option<usize>) -> String {
    match rows {
        _ if tag.eq_ignore_ascii_case("INSERT") => format!("INSERT 0 {}", rows.unwrap_or(0)),
        Some(rows) => format!("{tag} {rows}"),
        None => tag.to_owned(),
    }
}

/// The CommandComplete message for `tag`.
pub(crate) fn command_complete(tag: String) -> PgWireBackendMessage {
    PgWireBackendMessage::CommandComplete(CommandComplete::new(tag))
}

/// The transaction status after a command with `tag` succeeded.
pub(crate) fn transaction_after(tag: &str, status: TransactionStatus) -> TransactionStatus {
    const STARTS: [&str; 2] = ["BEGIN", "START TRANSACTION"];
    const ENDS: [&str; 4] = ["COMMIT", "END", "ROLLBACK", "ABORT"];
    if STARTS.iter().any(|t| t.eq_ignore_ascii_case(tag)) {
        status.to_in_transaction_state()
    } else if ENDS.iter().any(|t| t.eq_ignore_ascii_case(tag)) {
        status.to_idle_state()
    } else {
        status
    }
}

/// RowDescription for `fields`.
pub(crate) fn row_description(fields: &[FieldInfo]) -> PgWireBackendMessage {
    PgWireBackendMessage::RowDescription(RowDescription::new(fields.iter().map(Into::into).collect()))
}

/// Flattens a batch stream into per-row items made by `encode`.
fn per_row<T: Send + 'static>(
    rows: RowStream,
    mut encode: impl FnMut(RecordBatch) -> Result<Vec<T>> + Send + 'static,
) -> BoxStream<'static, PgWireResult<T>> {
    rows.batches
        .flat_map(move |batch| match batch.and_then(&mut encode) {
            Ok(items) => stream::iter(items.into_iter().map(Ok)).left_stream(),
            Err(e) => stream::once(async move { Err(engine_error(&e)) }).right_stream(),
        })
        .fuse()
        .boxed()
}

/// The `DataRow`s of `rows`, column `i` in `formats[i]`. With `described`
/// (extended protocol), batches are first cast to the described column
/// types, so rows always match the RowDescription the client holds.
pub(crate) fn data_rows(rows: RowStream, formats: Vec<FieldFormat>, described: Option<SchemaRef>) -> SendableRowStream {
    per_row(rows, move |batch| {
        let batch = match &described {
            Some(schema) => conform(batch, schema)?,
            None => batch,
        };
        encode_data_rows(&batch, &formats)
    })
}

/// Casts `batch`'s columns to the types of `described` where they differ.
fn conform(batch: RecordBatch, described: &Schema) -> Result<RecordBatch> {
    if batch.num_columns() != described.fields().len() {
        return Err(Error::internal(format!(
            "a statement described with {} columns returned {}",
            described.fields().len(),
            batch.num_columns()
        )));
    }
    let same = batch
        .schema()
        .fields()
        .iter()
        .zip(described.fields())
        .all(|(a, b)| a.data_type() == b.data_type());
    if same {
        return Ok(batch);
    }
    let columns = batch
        .columns()
        .iter()
        .zip(described.fields())
        .map(|(column, field)| cast(column, field.data_type()))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let fields: Vec<Field> = described
        .fields()
        .iter()
        .map(|f| Field::new(f.name(), f.data_type().clone(), true))
        .collect();
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?)
}

/// [`deliver`] without a row limit: `Ok(n)` messages sent, or the error
/// that ended the statement.
async fn deliver_all<C, T>(
    client: &mut C,
    items: &mut BoxStream<'static, PgWireResult<T>>,
    watch: &mut QueryWatch<'_>,
    message: fn(T) -> PgWireBackendMessage,
) -> PgWireResult<std::result::Result<usize, ErrorInfo>>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<C::Error>,
{
    Ok(match deliver(client, items, 0, watch, message).await? {
        Delivered::Complete(n) => Ok(n),
        Delivered::Failed(error) => Err(*error),
        Delivered::Suspended => {
            debug_assert!(false, "an unlimited delivery cannot suspend");
            Err(error_info(&Error::internal("an unlimited delivery was suspended")))
        }
    })
}

/// Sends a COPY TO STDOUT: CopyOutResponse (text, one text column per
/// result column), a CopyData per row as batches arrive, then CopyDone and
/// `COPY n`. A failure or cancel ends the copy with the returned error
/// (the caller sends it as ErrorResponse, as Postgres does).
pub(crate) async fn send_copy_out<C>(
    client: &mut C,
    rows: RowStream,
    watch: &mut QueryWatch<'_>,
) -> PgWireResult<std::result::Result<(), ErrorInfo>>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<C::Error>,
{
    let columns = i16::try_from(rows.schema.fields().len())
        .map_err(|_| engine_error(&Error::unsupported("COPY supports at most 32767 columns")))?;
    let response = CopyOutResponse::new(0, columns, vec![0; columns as usize]);
    client.feed(PgWireBackendMessage::CopyOutResponse(response)).await?;
    let mut lines = per_row(rows, |batch| encode_copy_lines(&batch));
    let message: fn(Bytes) -> PgWireBackendMessage = |line| PgWireBackendMessage::CopyData(CopyData::new(line));
    Ok(match deliver_all(client, &mut lines, watch, message).await? {
        Ok(n) => {
            client.feed(PgWireBackendMessage::CopyDone(CopyDone::new())).await?;
            client.feed(command_complete(format!("COPY {n}"))).await?;
            Ok(())
        }
        Err(error) => Err(error),
    })
}

/// Sends `rows` in text format: RowDescription, a DataRow per row as
/// batches arrive, then `{tag} {n}` (the simple-protocol path).
pub(crate) async fn send_rows<C>(
    client: &mut C,
    tag: &str,
    rows: RowStream,
    watch: &mut QueryWatch<'_>,
) -> PgWireResult<std::result::Result<(), ErrorInfo>>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<C::Error>,
{
    let fields = super::types::field_infos(&rows.schema, &[]);
    client.feed(row_description(&fields)).await?;
    let mut stream = data_rows(rows, Vec::new(), None);
    Ok(
        match deliver_all(client, &mut stream, watch, PgWireBackendMessage::DataRow).await? {
            Ok(n) => {
                client.feed(command_complete(format!("{tag} {n}"))).await?;
                Ok(())
            }
            Err(error) => Err(error),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, Int64Array};
    use arrow::datatypes::DataType;
    use futures::channel::oneshot;
    use sluice_types::SqlCode;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use std::time::Duration;

    /// Records messages and how many had been written at each flush.
    #[derive(Default)]
    struct RecordingClient {
        messages: Vec<PgWireBackendMessage>,
        flushed_at: Vec<usize>,
    }

    impl Sink<PgWireBackendMessage> for RecordingClient {
        type Error = PgWireError;

        fn poll_ready(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<PgWireResult<()>> {
            Poll::Ready(Ok(()))
        }

        fn start_send(self: Pin<&mut Self>, item: PgWireBackendMessage) -> PgWireResult<()> {
            self.get_mut().messages.push(item);
            Ok(())
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<PgWireResult<()>> {
            let this = self.get_mut();
            this.flushed_at.push(this.messages.len());
            Poll::Ready(Ok(()))
        }

        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<PgWireResult<()>> {
            Poll::Ready(Ok(()))
        }
    }

    impl RecordingClient {
        fn data_rows(&self) -> usize {
            self.messages
                .iter()
                .filter(|m| matches!(m, PgWireBackendMessage::DataRow(_)))
                .count()
        }

        fn tags(&self) -> Vec<String> {
            self.messages
                .iter()
                .filter_map(|m| match m {
                    PgWireBackendMessage::CommandComplete(c) => Some(c.tag.clone()),
                    _ => None,
                })
                .collect()
        }
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("n", DataType::Int32, true)]))
    }

    fn batch(values: Vec<i32>) -> RecordBatch {
        RecordBatch::try_new(schema(), vec![Arc::new(Int32Array::from(values))]).unwrap()
    }

    /// A row stream of `batches` that then waits forever (a continuous query).
    fn endless(batches: Vec<RecordBatch>) -> RowStream {
        let batches = stream::iter(batches.into_iter().map(Ok)).chain(stream::pending());
        RowStream {
            schema: schema(),
            batches: batches.boxed(),
        }
    }

    fn bounded(batches: Vec<Result<RecordBatch>>) -> RowStream {
        RowStream {
            schema: schema(),
            batches: stream::iter(batches).boxed(),
        }
    }

    #[tokio::test]
    async fn rows_are_flushed_before_waiting_for_the_next_batch() {
        let mut client = RecordingClient::default();
        let mut rows = data_rows(endless(vec![batch(vec![1, 2])]), Vec::new(), None);
        let mut watch = QueryWatch::detached();
        let waiting = tokio::time::timeout(
            Duration::from_millis(50),
            deliver(&mut client, &mut rows, 0, &mut watch, PgWireBackendMessage::DataRow),
        )
        .await;
        assert!(waiting.is_err(), "a continuous query does not complete");
        assert_eq!(client.data_rows(), 2);
        assert_eq!(client.flushed_at, vec![2], "both rows flushed while waiting");
    }

    #[tokio::test]
    async fn max_rows_suspends_and_the_rest_follows() {
        let mut client = RecordingClient::default();
        let source = bounded(vec![Ok(batch(vec![1, 2, 3])), Ok(batch(vec![4, 5]))]);
        let mut rows = data_rows(source, Vec::new(), None);
        let mut watch = QueryWatch::detached();
        let first = deliver(&mut client, &mut rows, 2, &mut watch, PgWireBackendMessage::DataRow)
            .await
            .unwrap();
        assert!(matches!(first, Delivered::Suspended));
        assert_eq!(client.data_rows(), 2);
        let rest = deliver(&mut client, &mut rows, 10, &mut watch, PgWireBackendMessage::DataRow)
            .await
            .unwrap();
        assert!(matches!(rest, Delivered::Complete(3)));
        // A finished (fused) stream can be asked again.
        let again = deliver(&mut client, &mut rows, 10, &mut watch, PgWireBackendMessage::DataRow)
            .await
            .unwrap();
        assert!(matches!(again, Delivered::Complete(0)));
    }

    #[tokio::test]
    async fn cancel_stops_a_waiting_query_with_57014() {
        let mut client = RecordingClient::default();
        let mut rows = data_rows(endless(vec![batch(vec![1])]), Vec::new(), None);
        let (cancel, cancelled) = oneshot::channel();
        let mut watch = QueryWatch::with_cancel(cancelled);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = cancel.send(());
        });
        let outcome = deliver(&mut client, &mut rows, 0, &mut watch, PgWireBackendMessage::DataRow)
            .await
            .unwrap();
        let Delivered::Failed(error) = outcome else {
            panic!("expected a cancel, got {outcome:?}")
        };
        assert_eq!(error.code, "57014");
        assert_eq!(error.message, "canceling statement due to user request");
        assert_eq!(client.data_rows(), 1);
    }

    #[tokio::test]
    async fn cancel_stops_a_query_that_never_waits() {
        let mut client = RecordingClient::default();
        let always_ready = stream::repeat_with(|| Ok(batch(vec![1, 2, 3])));
        let mut rows = data_rows(
            RowStream {
                schema: schema(),
                batches: always_ready.boxed(),
            },
            Vec::new(),
            None,
        );
        let (cancel, cancelled) = oneshot::channel();
        let mut watch = QueryWatch::with_cancel(cancelled);
        cancel.send(()).unwrap();
        let outcome = deliver(&mut client, &mut rows, 0, &mut watch, PgWireBackendMessage::DataRow)
            .await
            .unwrap();
        assert!(matches!(outcome, Delivered::Failed(ref e) if e.code == "57014"));
    }

    #[tokio::test]
    async fn an_engine_error_ends_the_rows_with_its_sqlstate() {
        let mut client = RecordingClient::default();
        let failure = Error::user(SqlCode::DataException, "bad record at offset 7");
        let mut watch = QueryWatch::detached();
        let rows = bounded(vec![Ok(batch(vec![1])), Err(failure)]);
        let sent = send_rows(&mut client, "SELECT", rows, &mut watch).await.unwrap();
        let error = sent.unwrap_err();
        assert_eq!(
            (error.code.as_str(), error.message.as_str()),
            ("22000", "bad record at offset 7")
        );
        assert!(matches!(client.messages[0], PgWireBackendMessage::RowDescription(_)));
        assert_eq!(client.data_rows(), 1);
        assert!(client.tags().is_empty(), "no CommandComplete after an error");
    }

    #[tokio::test]
    async fn rows_end_with_their_tag_and_count() {
        let mut client = RecordingClient::default();
        let mut watch = QueryWatch::detached();
        let rows = bounded(vec![Ok(batch(vec![1, 2])), Ok(batch(vec![3]))]);
        send_rows(&mut client, "FETCH", rows, &mut watch)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(client.data_rows(), 3);
        assert_eq!(client.tags(), vec!["FETCH 3"]);
    }

    #[tokio::test]
    async fn copy_out_sends_one_line_per_row_then_copy_n() {
        let mut client = RecordingClient::default();
        let mut watch = QueryWatch::detached();
        let rows = bounded(vec![Ok(batch(vec![1, 2]))]);
        send_copy_out(&mut client, rows, &mut watch).await.unwrap().unwrap();
        let PgWireBackendMessage::CopyOutResponse(header) = &client.messages[0] else {
            panic!("CopyOutResponse first")
        };
        assert_eq!(
            (header.format, header.columns, header.column_formats.clone()),
            (0, 1, vec![0])
        );
        let lines: Vec<Bytes> = client
            .messages
            .iter()
            .filter_map(|m| match m {
                PgWireBackendMessage::CopyData(d) => Some(d.data.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(lines, vec![Bytes::from_static(b"1\n"), Bytes::from_static(b"2\n")]);
        assert!(matches!(client.messages[3], PgWireBackendMessage::CopyDone(_)));
        assert_eq!(client.tags(), vec!["COPY 2"]);
    }

    #[test]
    fn command_tags_follow_postgres() {
        assert_eq!(command_tag("INSERT", Some(3)), "INSERT 0 3");
        assert_eq!(command_tag("CREATE STREAM", None), "CREATE STREAM");
        assert_eq!(command_tag("DELETE", Some(2)), "DELETE 2");
        assert_eq!(command_tag("BEGIN", None), "BEGIN");
    }

    #[test]
    fn transaction_commands_move_the_status() {
        use TransactionStatus::{Error as Failed, Idle, Transaction};
        assert_eq!(transaction_after("BEGIN", Idle), Transaction);
        assert_eq!(transaction_after("START TRANSACTION", Idle), Transaction);
        assert_eq!(transaction_after("SET", Transaction), Transaction);
        assert_eq!(transaction_after("COMMIT", Transaction), Idle);
        assert_eq!(transaction_after("END", Transaction), Idle);
        assert_eq!(transaction_after("ROLLBACK", Failed), Idle);
        assert_eq!(transaction_after("ABORT", Failed), Idle);
        assert_eq!(transaction_after("DECLARE CURSOR", Failed), Failed);
        assert_eq!(Transaction.to_error_state(), Failed);
        assert_eq!(Idle.to_error_state(), Idle);
    }

    #[test]
    fn engine_errors_carry_sqlstate_and_plain_message() {
        let info = error_info(&Error::user(SqlCode::UndefinedTable, "stream \"bids\" does not exist"));
        assert_eq!((info.severity.as_str(), info.code.as_str()), ("ERROR", "42P01"));
        assert_eq!(info.message, "stream \"bids\" does not exist");
        let internal = error_info(&Error::internal("invariant broken"));
        assert_eq!(internal.code, "XX000");
        assert_eq!(internal.message, "internal error: invariant broken");
    }

    #[test]
    fn batches_are_cast_to_the_described_types() {
        let described = Schema::new(vec![Field::new("n", DataType::Int64, false)]);
        let conformed = conform(batch(vec![7]), &described).unwrap();
        let column = conformed.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(column.value(0), 7);
        let wider = Schema::new(vec![
            Field::new("n", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
        ]);
        assert!(conform(batch(vec![7]), &wider).is_err());
    }
}
