//! Views' rows taken from another process: a quorum follower's from the
//! leader ([`crate::replication::QuorumCatalog`]), a master's from the
//! worker running the view's sink (`FetchView`, [`crate::control`]).
//! Both ask with a `ViewRowsRequest` and get a `ViewRowsReply` (an Arrow
//! IPC stream, [`reply`] builds it), and keep copies ([`ViewCache`]):
//! each with the process it came from and the publication it is of, so
//! the next read of the view asks only whether that publication is still
//! current and, when it is, answers from the copy instead of taking the
//! rows again ([`read_through`]). At most
//! [`LEADER_VIEW_BYTES_MAX`] bytes of rows (as the
//! source encoded them) are held in all; the copy used longest ago goes
//! first.

use sluice_connectors::views::PublishedView;
use sluice_proto::v1::ViewRowsReply;
use sluice_types::{Error, Result, SqlCode};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;

/// A view's rows a follower takes from the leader at most (Arrow IPC
/// bytes); a bigger view is read on the leader.
pub const LEADER_VIEW_BYTES_MAX: usize = 256 << 20;
/// A view's rows a master takes from a worker at most (Arrow IPC bytes;
/// the view's own `'rows.max'` bounds it first in practice): past it a
/// read is refused with `54000`.
pub const WORKER_VIEW_BYTES_MAX: usize = 4 << 30;
/// The rows go up in pieces of at most this many bytes (a session's
/// messages stay small beside its heartbeats).
pub const VIEW_PIECE_BYTES: usize = 16 << 20;
/// An INSERT's rows one process hands another at most (Arrow IPC bytes;
/// gRPC's default bound on a message): a follower to the leader, the
/// leader to the worker holding the stream's log. A bigger INSERT is
/// refused with `54000` before anything is appended.
pub const INSERT_BYTES_MAX: usize = 4 << 20;

/// The answer to a request for a view's rows, by the process holding
/// `view` (`None`: not published here, `missing` says so) to one that
/// holds publication `known` (0: none). A view whose rows pass
/// [`LEADER_VIEW_BYTES_MAX`] is refused with `54000` (`too_big` names
/// where to read it instead).
pub fn reply(
    view: Option<&PublishedView>,
    known: u64,
    missing: impl FnOnce() -> Error,
    too_big: impl FnOnce(usize) -> String,
) -> ViewRowsReply {
    reply_within(view, known, LEADER_VIEW_BYTES_MAX, missing, too_big)
}

/// [`reply`] with the bound `bytes_max`.
pub(crate) fn reply_within(
    view: Option<&PublishedView>,
    known: u64,
    bytes_max: usize,
    missing: impl FnOnce() -> Error,
    too_big: impl FnOnce(usize) -> String,
) -> ViewRowsReply {
    let failed = |e: Error| ViewRowsReply {
        sqlstate: e.sqlstate().to_string(),
        message: e.to_string(),
        ..Default::default()
    };
    let Some(view) = view else {
        return failed(missing());
    };
    let of_view = ViewRowsReply {
        publication: view.publication,
        has_checkpoint: view.checkpoint.is_some(),
        checkpoint: view.checkpoint.unwrap_or_default(),
        published_ms: view.published_ms,
        ..Default::default()
    };
    if known != 0 && known == view.publication {
        return ViewRowsReply {
            unchanged: true,
            ..of_view
        };
    }
    let ipc = match encode_rows(view) {
        Ok(ipc) => ipc,
        Err(e) => return failed(e),
    };
    if ipc.len() > bytes_max {
        return failed(Error::user(SqlCode::ProgramLimitExceeded, too_big(ipc.len())));
    }
    ViewRowsReply {
        ipc: ipc.into(),
        ..of_view
    }
}

/// View `name`'s rows from `source` (a leader, a worker): `ask(known)`
/// sends the request naming the publication `copies` hold of it (0:
/// none) and returns the reply; a reply saying that one is still current
/// is answered from the copy, new rows are decoded and kept. A failure
/// the source reported becomes `failed(sqlstate, message)`.
pub async fn read_through<Fut>(
    copies: &Mutex<ViewCache>,
    source: &str,
    name: &str,
    ask: impl Fn(u64) -> Fut,
    failed: impl Fn(&str, String) -> Error,
) -> Result<PublishedView>
where
    Fut: Future<Output = Result<ViewRowsReply>>,
{
    let copies = || copies.lock().unwrap_or_else(|e| e.into_inner());
    // A copy may go (another view's rows pushed it out) between asking
    // and the answer: then the rows are asked for again.
    for known in [true, false] {
        let known_publication = if known { copies().known(name, source) } else { 0 };
        let reply = ask(known_publication).await?;
        if !reply.sqlstate.is_empty() {
            return Err(failed(&reply.sqlstate, reply.message));
        }
        if reply.unchanged {
            match copies().reuse(name, source, reply.publication) {
                Some(view) => return Ok(view),
                None => continue,
            }
        }
        let (schema, rows) = decode_rows(&reply.ipc)
            .map_err(|e| Error::internal(format!("{source} sent view {name}'s rows, which do not decode: {e}")))?;
        let view = PublishedView::new(
            schema,
            rows,
            reply.has_checkpoint.then_some(reply.checkpoint),
            reply.published_ms,
        );
        copies().took(name, source, reply.publication, &view, reply.ipc.len());
        return Ok(view);
    }
    Err(Error::internal(format!(
        "{source} said view {name}'s rows are unchanged when none were held"
    )))
}

/// A view's schema and rows as one Arrow IPC stream.
pub(crate) fn encode_rows(view: &PublishedView) -> Result<Vec<u8>> {
    encode_batches(&view.schema, &view.rows()?)
}

/// `batches` (their columns, as `schema`'s) as one Arrow IPC stream.
pub(crate) fn encode_batches(
    schema: &arrow::datatypes::SchemaRef,
    batches: &[arrow::record_batch::RecordBatch],
) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut writer = arrow::ipc::writer::StreamWriter::try_new(&mut out, schema)?;
    for rows in batches {
        let rows = arrow::record_batch::RecordBatch::try_new(schema.clone(), rows.columns().to_vec())?;
        writer.write(&rows)?;
    }
    writer.finish()?;
    drop(writer);
    Ok(out)
}

/// An INSERT's rows as one Arrow IPC stream to hand `to` (the leader, the
/// worker holding the log); `None` for no rows. Past [`INSERT_BYTES_MAX`]
/// it is refused with `54000`.
pub(crate) fn insert_rows(rows: &[arrow::record_batch::RecordBatch], to: &str) -> Result<Option<Vec<u8>>> {
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let ipc = encode_batches(&first.schema(), rows)?;
    if ipc.len() > INSERT_BYTES_MAX {
        return Err(sluice_types::Error::user(
            sluice_types::SqlCode::ProgramLimitExceeded,
            format!(
                "INSERT of {} bytes of rows is over the {INSERT_BYTES_MAX} bytes this master hands {to}; insert in smaller batches",
                ipc.len()
            ),
        ));
    }
    Ok(Some(ipc))
}

/// [`encode_rows`]'s stream back: the schema and the rows' batches.
pub(crate) fn decode_rows(
    ipc: &[u8],
) -> std::result::Result<(arrow::datatypes::SchemaRef, Vec<arrow::record_batch::RecordBatch>), arrow::error::ArrowError>
{
    let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(ipc), None)?;
    let schema = reader.schema();
    let batches = reader.collect::<std::result::Result<Vec<_>, _>>()?;
    Ok((schema, batches))
}

struct Copy {
    leader: String,
    publication: u64,
    view: PublishedView,
    bytes: usize,
    used: u64,
}

/// The copies, and how reads were answered.
pub struct ViewCache {
    copies: HashMap<String, Copy>,
    bytes: usize,
    bytes_max: usize,
    clock: u64,
    /// Reads answered with rows taken from the leader, and from a copy.
    pub fetched: u64,
    pub reused: u64,
}

impl ViewCache {
    pub fn new(bytes_max: usize) -> Self {
        ViewCache {
            copies: HashMap::new(),
            bytes: 0,
            bytes_max,
            clock: 0,
            fetched: 0,
            reused: 0,
        }
    }

    /// The publication of view `name` held as `leader` published it (0:
    /// none), for the request.
    pub fn known(&self, name: &str, leader: &str) -> u64 {
        self.copies
            .get(name)
            .filter(|c| c.leader == leader)
            .map_or(0, |c| c.publication)
    }

    /// The leader said publication `publication` of view `name` is still
    /// current: the copy, if it is that one.
    pub fn reuse(&mut self, name: &str, leader: &str, publication: u64) -> Option<PublishedView> {
        self.clock += 1;
        let copy = self
            .copies
            .get_mut(name)
            .filter(|c| c.leader == leader && c.publication == publication)?;
        copy.used = self.clock;
        self.reused += 1;
        Some(copy.view.clone())
    }

    /// Rows of view `name` taken from `leader` (`bytes` as it encoded
    /// them): held in place of any older copy, the least recently used
    /// others going while the copies pass the bound. A view bigger than
    /// the bound is not held.
    pub fn took(&mut self, name: &str, leader: &str, publication: u64, view: &PublishedView, bytes: usize) {
        self.clock += 1;
        self.fetched += 1;
        if let Some(old) = self.copies.remove(name) {
            self.bytes -= old.bytes;
        }
        if bytes > self.bytes_max {
            return;
        }
        while self.bytes + bytes > self.bytes_max {
            let Some(oldest) = self.copies.iter().min_by_key(|(_, c)| c.used).map(|(n, _)| n.clone()) else {
                break;
            };
            let gone = self.copies.remove(&oldest).expect("found above");
            self.bytes -= gone.bytes;
        }
        self.bytes += bytes;
        self.copies.insert(
            name.to_string(),
            Copy {
                leader: leader.to_string(),
                publication,
                view: view.clone(),
                bytes,
                used: self.clock,
            },
        );
    }

    /// Bytes of rows held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;
    use std::sync::Arc;

    fn view(rows: i64) -> PublishedView {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from_iter_values(0..rows))]).unwrap();
        PublishedView::new(schema, vec![batch], None, 0)
    }

    #[test]
    fn a_copy_answers_only_for_its_leader_and_publication() {
        let mut c = ViewCache::new(1000);
        assert_eq!(c.known("v", "m1"), 0, "nothing held");
        c.took("v", "m1", 7, &view(3), 100);
        assert_eq!(c.known("v", "m1"), 7);
        assert_eq!(c.known("v", "m2"), 0, "another leader's publications are not these");
        assert!(c.reuse("v", "m1", 8).is_none(), "a newer publication: take the rows");
        assert!(c.reuse("v", "m2", 7).is_none());
        assert_eq!(c.reuse("v", "m1", 7).unwrap().num_rows(), 3);
        assert_eq!((c.fetched, c.reused), (1, 1));
        // A newer publication replaces the copy.
        c.took("v", "m1", 9, &view(5), 200);
        assert_eq!(c.bytes(), 200);
        assert_eq!(c.reuse("v", "m1", 9).unwrap().num_rows(), 5);
    }

    #[test]
    fn the_copies_stay_within_their_bound_the_least_recently_used_going_first() {
        let mut c = ViewCache::new(1000);
        c.took("a", "m1", 1, &view(1), 400);
        c.took("b", "m1", 1, &view(1), 400);
        assert!(c.reuse("a", "m1", 1).is_some(), "a used after b");
        c.took("c", "m1", 1, &view(1), 400);
        assert_eq!(c.bytes(), 800, "at the bound b went");
        assert_eq!(c.known("b", "m1"), 0);
        assert_eq!(c.known("a", "m1"), 1);
        assert_eq!(c.known("c", "m1"), 1);
        // Exactly at the bound fits; past it, a view is not held at all.
        c.took("d", "m1", 1, &view(1), 1000);
        assert_eq!(c.bytes(), 1000);
        assert_eq!(c.known("d", "m1"), 1);
        c.took("e", "m1", 1, &view(1), 1001);
        assert_eq!(c.known("e", "m1"), 0);
        assert_eq!(c.bytes(), 1000);
    }

    /// A view's rows cross from one process to another unchanged, an
    /// empty view too.
    #[test]
    fn view_rows_decode_as_encoded() {
        use arrow::array::{Int64Array, StringArray};
        let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("k", arrow::datatypes::DataType::Int64, false),
            arrow::datatypes::Field::new("s", arrow::datatypes::DataType::Utf8, true),
        ]));
        let rows = arrow::record_batch::RecordBatch::try_new(
            schema.clone(),
            vec![
                std::sync::Arc::new(Int64Array::from(vec![1, 2, 3])),
                std::sync::Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])),
            ],
        )
        .unwrap();
        // Every row; none; and the rows a view's liveness bits keep (the
        // sink's form: only the live rows cross).
        let live = arrow::buffer::BooleanBuffer::from(vec![true, false, true]);
        let cases = [
            (vec![(rows.clone(), None)], vec![1, 2, 3]),
            (vec![(rows.slice(0, 0), None)], vec![]),
            (
                vec![(rows.clone(), Some(live)), (rows.slice(1, 1), None)],
                vec![1, 3, 2],
            ),
        ];
        for (parts, want) in cases {
            let view = PublishedView::from_parts(schema.clone(), parts, Some(4), 9);
            let (got_schema, got) = decode_rows(&encode_rows(&view).unwrap()).unwrap();
            assert_eq!(got_schema, schema);
            let keys: Vec<i64> = got
                .iter()
                .flat_map(|b| {
                    let k = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                    k.values().to_vec()
                })
                .collect();
            assert_eq!(keys, want);
            assert_eq!(view.num_rows(), want.len());
        }
    }

    /// A reply carries the rows up to its bound (54000 past it), says
    /// `unchanged` without rows for the publication the asker holds, and
    /// reports a view not published here as the asker's `missing` error;
    /// what it carries reads back through [`read_through`].
    #[tokio::test]
    async fn replies_are_bounded_and_read_through_a_copy() {
        let v = view(1000);
        let missing = || Error::user(SqlCode::ObjectNotInPrerequisiteState, "not here");
        let big = |n| format!("{n} bytes");
        let full = reply_within(Some(&v), 0, usize::MAX, missing, big);
        let bytes = full.ipc.len();
        assert!(full.sqlstate.is_empty() && bytes > 1000);
        let at = reply_within(Some(&v), 0, bytes, missing, big);
        assert_eq!(at.ipc.len(), bytes, "exactly at the bound it goes");
        let past = reply_within(Some(&v), 0, bytes - 1, missing, big);
        assert_eq!(past.sqlstate, "54000");
        assert!(past.ipc.is_empty() && past.message.contains(&bytes.to_string()));
        let same = reply_within(Some(&v), v.publication, usize::MAX, missing, big);
        assert!(same.unchanged && same.ipc.is_empty());
        assert_eq!(same.publication, v.publication);
        let none = reply_within(None, 0, usize::MAX, missing, big);
        assert_eq!(none.sqlstate, "55000");

        // Through a copy: rows once, then "unchanged" answered from it.
        let copies = Mutex::new(ViewCache::new(1 << 20));
        let asked = Mutex::new(Vec::new());
        let ask = |known| {
            asked.lock().unwrap().push(known);
            let r = reply(Some(&v), known, missing, big);
            async move { Ok(r) }
        };
        let failed = |state: &str, message: String| Error::external(format!("{state}: {message}"));
        for _ in 0..2 {
            let got = read_through(&copies, "w1", "v", ask, failed).await.unwrap();
            assert_eq!(got.num_rows(), 1000);
        }
        assert_eq!(*asked.lock().unwrap(), vec![0, v.publication]);
        let counts = {
            let c = copies.lock().unwrap();
            (c.fetched, c.reused)
        };
        assert_eq!(counts, (1, 1));
        let e = read_through(
            &copies,
            "w1",
            "gone",
            |_| async { Ok(reply(None, 0, missing, big)) },
            failed,
        )
        .await
        .unwrap_err();
        assert!(e.to_string().contains("55000"), "{e}");
    }
}
