//! The catalog on the master quorum (`sluice master --peers`).
//!
//! The catalog is kept in the quorum's replicated state as one register per
//! object — `stream/<name>`, `pipeline/<name>`, and `security` and
//! `next_pipeline_id` — each holding the object's JSON; a dropped object is
//! a tombstone. `checkpoint/<pipeline>` holds the newest checkpoint the
//! leader saw complete ([`Master::record_checkpoints`](crate::Master::record_checkpoints)):
//! a new leader restores from it or a newer one, never from older state. Only the leader changes it: [`Master::apply`](crate::Master::apply)
//! on the leader applies the command to its own catalog, then writes the
//! registers that changed and answers once a majority of masters holds them.
//! On a follower, `apply` hands the command to the leader
//! ([`QuorumCatalog::forward`], the `Catalog` service of `quorum.proto`);
//! followers' catalogs follow the replicated state (reads there may be a
//! moment stale). A master that has no quorum (no leader it can reach, or a
//! leader without its lease) refuses DDL with `57P03`, naming the quorum;
//! reads keep working.
//!
//! Pipelines run on the leader only: a master that becomes leader starts the
//! catalog's pipelines from their newest checkpoints (as a restarted master
//! does), one that stops leading stops its own and ends its workers'
//! sessions, and workers register with the next master in their list; a
//! follower refuses workers, naming the leader.

use crate::catalog::{CatalogState, PipelineDef};
use crate::command::{Applied, CatalogCommand};
use crate::session_query::Batches;
use crate::view_cache::ViewCache;
use arrow::record_batch::RecordBatch;
use futures::StreamExt;
use futures::future::BoxFuture;
use sluice_connectors::views::{PublishedView, Views};
use sluice_connectors::{ClientSinks, Connectors, MemoryLogs};
use sluice_plan::PhysicalDag;
use sluice_plan::catalog::StreamDef;
use sluice_proto::v1::catalog_client::CatalogClient;
use sluice_proto::v1::catalog_server::{Catalog, CatalogServer};
use sluice_proto::v1::{
    CatalogApplied, CatalogApply, InsertRows, InsertedRows, QueryBatch, QueryRequest, ViewRowsReply, ViewRowsRequest,
};
use sluice_quorum::{NodeError, QuorumError, QuorumNode, ReplicatedState};
use sluice_types::{Error, Result, SqlCode};
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

const STREAM: &str = "stream/";
const PIPELINE: &str = "pipeline/";
const SECURITY: &str = "security";
const NEXT_PIPELINE_ID: &str = "next_pipeline_id";
const CHECKPOINT: &str = "checkpoint/";
/// A forwarded command waits this long for the leader (an ALTER stops a
/// pipeline at a barrier first, which may take a while).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(60);
pub use crate::view_cache::{INSERT_BYTES_MAX, LEADER_VIEW_BYTES_MAX};
/// A forwarded query's result rows in one message at most (a bigger batch
/// goes in pieces).
pub const QUERY_BATCH_BYTES_MAX: usize = 4 << 20;

/// How [`Master`](crate::Master) reaches the quorum. The master knows
/// only this trait, so the single-master path has no quorum at all.
pub trait Replication: Send + Sync {
    /// Whether this master leads and may decide now.
    fn is_leader(&self) -> bool;
    /// On the leader: why it may not decide now (no lease), if so.
    fn may_decide(&self) -> Result<()>;
    /// Writes the catalog's changed objects; returns once a majority holds them.
    fn replicate<'a>(&'a self, catalog: &'a CatalogState) -> BoxFuture<'a, Result<()>>;
    /// Hands a command to the leader.
    fn forward(&self, command: CatalogCommand) -> BoxFuture<'_, Result<Applied>>;
    /// On a follower: materialized view `name`'s rows as the leader, where
    /// its sink runs, last published them (from the copy taken before, when
    /// the leader says it is still current).
    fn leader_view(&self, name: &str) -> BoxFuture<'_, Result<PublishedView>>;
    /// On a follower: appends an INSERT's rows to memory stream `stream`
    /// on the leader; how many it appended.
    fn forward_insert<'a>(&'a self, stream: &'a str, rows: &'a [RecordBatch]) -> BoxFuture<'a, Result<u64>>;
    /// On a follower: runs a session's continuous query (`dag`, planned
    /// and checked here) on the leader; its result batches as the leader
    /// sends them (dropping them stops the query there).
    fn forward_query<'a>(&'a self, dag: &'a PhysicalDag) -> BoxFuture<'a, Result<Batches>>;
    /// On a follower: views' reads answered with rows taken from the
    /// leader, and from a copy.
    fn view_reads(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// The catalog as registers.
pub fn flatten(catalog: &CatalogState) -> Result<BTreeMap<String, String>> {
    let json = |v: &dyn erased::Json| v.to_json();
    let mut out = BTreeMap::new();
    for (name, def) in &catalog.streams {
        out.insert(format!("{STREAM}{name}"), json(def)?);
    }
    for (name, def) in &catalog.pipelines {
        out.insert(format!("{PIPELINE}{name}"), json(def)?);
    }
    for (name, id) in &catalog.checkpoints {
        out.insert(format!("{CHECKPOINT}{name}"), id.to_string());
    }
    out.insert(SECURITY.into(), json(&catalog.security)?);
    out.insert(NEXT_PIPELINE_ID.into(), catalog.next_pipeline_id.to_string());
    Ok(out)
}

/// The catalog the registers hold.
pub fn unflatten(state: &ReplicatedState) -> Result<CatalogState> {
    let bad = |key: &str, e: serde_json::Error| Error::internal(format!("replicated catalog entry {key}: {e}"));
    let mut catalog = CatalogState::default();
    for (key, value) in state.scan(STREAM) {
        let def: StreamDef = serde_json::from_str(value).map_err(|e| bad(key, e))?;
        catalog.streams.insert(key[STREAM.len()..].to_string(), def);
    }
    for (key, value) in state.scan(PIPELINE) {
        let mut def: PipelineDef = serde_json::from_str(value).map_err(|e| bad(key, e))?;
        def.dag.fill_uids();
        catalog.pipelines.insert(key[PIPELINE.len()..].to_string(), def);
    }
    for (key, value) in state.scan(CHECKPOINT) {
        let id = value
            .parse()
            .map_err(|e| Error::internal(format!("replicated catalog entry {key}: {e}")))?;
        catalog.checkpoints.insert(key[CHECKPOINT.len()..].to_string(), id);
    }
    if let Some(v) = state.get(SECURITY) {
        catalog.security = serde_json::from_str(v).map_err(|e| bad(SECURITY, e))?;
    }
    if let Some(v) = state.get(NEXT_PIPELINE_ID) {
        catalog.next_pipeline_id = v
            .parse()
            .map_err(|e| Error::internal(format!("replicated {NEXT_PIPELINE_ID}: {e}")))?;
    }
    Ok(catalog)
}

/// The writes that turn `held` into `catalog`: changed or new objects, and
/// tombstones for objects `catalog` no longer has.
pub fn writes(held: &ReplicatedState, catalog: &CatalogState) -> Result<Vec<(String, Option<String>)>> {
    let next = flatten(catalog)?;
    let mut out: Vec<(String, Option<String>)> = next
        .iter()
        .filter(|(k, v)| held.get(k) != Some(v.as_str()))
        .map(|(k, v)| (k.clone(), Some(v.clone())))
        .collect();
    for prefix in [STREAM, PIPELINE, CHECKPOINT] {
        for (key, _) in held.scan(prefix) {
            if !next.contains_key(key) {
                out.push((key.to_string(), None));
            }
        }
    }
    Ok(out)
}

mod erased {
    use sluice_types::{Error, Result};
    pub trait Json {
        fn to_json(&self) -> Result<String>;
    }
    impl<T: serde::Serialize> Json for T {
        fn to_json(&self) -> Result<String> {
            serde_json::to_string(self).map_err(|e| Error::internal(format!("catalog entry: {e}")))
        }
    }
}

fn no_quorum(node: &QuorumNode, why: &str) -> Error {
    let status = node.status();
    Error::user(
        SqlCode::CannotConnectNow,
        format!(
            "the master quorum cannot decide now: {why} (master {}, term {}, {} of {} masters reachable); \
             the catalog can be read here but may be stale; retry, or connect to another master",
            status.id,
            status.term,
            status.reachable.len() + 1,
            node.peers().len() + 1
        ),
    )
}

fn quorum_error(node: &QuorumNode, e: NodeError) -> Error {
    match e {
        NodeError::Quorum(QuorumError::NotLeader { leader: None }) => no_quorum(node, "no leader is known"),
        NodeError::Quorum(e) => Error::user(SqlCode::CannotConnectNow, format!("master quorum: {e}")),
        NodeError::Store(e) => Error::external(e.to_string()),
        NodeError::ShutDown => Error::user(SqlCode::CannotConnectNow, "this master is shutting down"),
    }
}

/// [`Replication`] over a [`QuorumNode`]; also serves the `Catalog`
/// service through which followers forward commands to it.
pub struct QuorumCatalog {
    node: QuorumNode,
    master: OnceLock<Weak<crate::Master>>,
    /// The views this master's sinks publish (served to followers).
    views: Arc<Views>,
    /// Memory streams' logs (a forwarded INSERT appends here).
    memory: Arc<MemoryLogs>,
    /// Result channels of session queries (a forwarded query's sink).
    clients: Arc<ClientSinks>,
    /// On a follower: the views' rows it took from the leader.
    view_copies: std::sync::Mutex<ViewCache>,
}

impl QuorumCatalog {
    pub fn new(node: QuorumNode, connectors: &Connectors) -> Arc<Self> {
        Arc::new(QuorumCatalog {
            node,
            master: OnceLock::new(),
            views: connectors.views.clone(),
            memory: connectors.memory.clone(),
            clients: connectors.clients.clone(),
            view_copies: std::sync::Mutex::new(ViewCache::new(LEADER_VIEW_BYTES_MAX)),
        })
    }

    /// A client of the leader's `Catalog` service, with the leader's id
    /// and an error naming it for what goes wrong on the way; its calls
    /// time out after [`FORWARD_TIMEOUT`].
    async fn leader(
        &self,
    ) -> Result<(
        String,
        CatalogClient<tonic::transport::Channel>,
        impl Fn(String) -> Error + '_,
    )> {
        self.leader_within(Some(FORWARD_TIMEOUT)).await
    }

    /// [`Self::leader`] whose calls time out after `timeout` (`None`:
    /// never, for a query that streams rows as long as it runs).
    async fn leader_within(
        &self,
        timeout: Option<Duration>,
    ) -> Result<(
        String,
        CatalogClient<tonic::transport::Channel>,
        impl Fn(String) -> Error + '_,
    )> {
        let status = self.node.status();
        let Some(leader) = status.leader.filter(|_| status.has_quorum) else {
            return Err(no_quorum(&self.node, "no leader is reachable"));
        };
        let Some(address) = self.node.peers().get(&leader).cloned() else {
            return Err(no_quorum(&self.node, "the leader is not among --peers"));
        };
        let named = format!("the leader {leader} ({address})");
        let unreachable = move |e: String| no_quorum(&self.node, &format!("{named}: {e}"));
        let mut endpoint = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
            .map_err(|e| unreachable(e.to_string()))?
            .connect_timeout(Duration::from_secs(2));
        endpoint = match timeout {
            Some(timeout) => endpoint.timeout(timeout),
            // Without a deadline, HTTP/2 pings notice a leader that died
            // or froze (the query then ends with 08006).
            None => endpoint
                .http2_keep_alive_interval(Duration::from_secs(1))
                .keep_alive_timeout(Duration::from_secs(3))
                .keep_alive_while_idle(true),
        };
        let channel = endpoint.connect().await.map_err(|e| unreachable(e.to_string()))?;
        Ok((leader, CatalogClient::new(channel), unreachable))
    }

    /// The master whose `apply` forwarded commands run on (set once, after
    /// the master is built with this replication).
    pub fn set_master(&self, master: Weak<crate::Master>) {
        let _ = self.master.set(master);
    }

    pub fn node(&self) -> &QuorumNode {
        &self.node
    }

    /// The gRPC service followers forward commands to.
    pub fn service(self: &std::sync::Arc<Self>) -> CatalogServer<CatalogService> {
        CatalogServer::new(CatalogService(self.clone()))
            // A forwarded INSERT's rows, plus room for the request's other fields.
            .max_decoding_message_size(INSERT_BYTES_MAX + (1 << 20))
    }

    /// The catalog the replicated state holds.
    pub fn catalog(&self) -> Result<CatalogState> {
        unflatten(&self.node.state())
    }
}

impl Replication for QuorumCatalog {
    fn is_leader(&self) -> bool {
        self.node.is_leader()
    }

    fn may_decide(&self) -> Result<()> {
        if self.node.is_leader() {
            Ok(())
        } else {
            Err(no_quorum(
                &self.node,
                "this master lost its lease (no majority heard from lately)",
            ))
        }
    }

    fn replicate<'a>(&'a self, catalog: &'a CatalogState) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let writes = writes(&self.node.state(), catalog)?;
            if writes.is_empty() {
                return Ok(());
            }
            self.node
                .propose(writes)
                .await
                .map(|_| ())
                .map_err(|e| quorum_error(&self.node, e))
        })
    }

    fn forward(&self, command: CatalogCommand) -> BoxFuture<'_, Result<Applied>> {
        Box::pin(async move {
            let bytes = serde_json::to_vec(&command).map_err(|e| Error::internal(e.to_string()))?;
            let (leader, mut client, unreachable) = self.leader().await?;
            let reply = client
                .apply(CatalogApply {
                    version: sluice_proto::PROTOCOL_VERSION,
                    command: bytes.into(),
                })
                .await
                .map_err(|e| unreachable(e.message().to_string()))?
                .into_inner();
            if reply.sqlstate.is_empty() {
                return Ok(if reply.changed {
                    Applied::Changed
                } else {
                    Applied::Unchanged
                });
            }
            Err(leader_error(&leader, &reply.sqlstate, reply.message))
        })
    }

    fn forward_insert<'a>(&'a self, stream: &'a str, rows: &'a [RecordBatch]) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            let Some(ipc) = crate::view_cache::insert_rows(rows, "the quorum's leader")? else {
                return Ok(0);
            };
            let (leader, mut client, unreachable) = self.leader().await?;
            let reply = client
                .insert(InsertRows {
                    version: sluice_proto::PROTOCOL_VERSION,
                    stream: stream.to_string(),
                    ipc: ipc.into(),
                })
                .await
                .map_err(|e| unreachable(e.message().to_string()))?
                .into_inner();
            if reply.sqlstate.is_empty() {
                return Ok(reply.rows);
            }
            Err(leader_error(&leader, &reply.sqlstate, reply.message))
        })
    }

    fn forward_query<'a>(&'a self, dag: &'a PhysicalDag) -> BoxFuture<'a, Result<Batches>> {
        Box::pin(async move {
            let dag_json = serde_json::to_vec(dag).map_err(|e| Error::internal(e.to_string()))?;
            let (leader, client, unreachable) = self.leader_within(None).await?;
            let batches = client
                // The call lasts as long as the query: no deadline.
                .max_decoding_message_size(QUERY_BATCH_BYTES_MAX + (1 << 20))
                .query(QueryRequest {
                    version: sluice_proto::PROTOCOL_VERSION,
                    dag_json: dag_json.into(),
                })
                .await
                .map_err(|e| unreachable(e.message().to_string()))?
                .into_inner();
            let lost = format!("the leader {leader}");
            let state: (tonic::Streaming<QueryBatch>, String, bool) = (batches, leader, false);
            let batches = futures::stream::unfold(state, move |(mut batches, leader, done)| {
                let lost = lost.clone();
                async move {
                    if done {
                        return None;
                    }
                    let item = match batches.message().await {
                        Ok(None) => return None,
                        Err(e) => Err(Error::user(
                            SqlCode::ConnectionFailure,
                            format!("{lost}, which runs this query, went away: {}", e.message()),
                        )),
                        Ok(Some(b)) if !b.sqlstate.is_empty() => Err(leader_error(&leader, &b.sqlstate, b.message)),
                        Ok(Some(b)) => crate::view_cache::decode_rows(&b.ipc)
                            .map_err(|e| Error::internal(format!("{lost} sent result rows that do not decode: {e}")))
                            .and_then(|(schema, rows)| Ok(arrow::compute::concat_batches(&schema, &rows)?)),
                    };
                    let done = item.is_err();
                    Some((item, (batches, leader, done)))
                }
            });
            Ok(futures::StreamExt::boxed(batches))
        })
    }

    fn leader_view(&self, name: &str) -> BoxFuture<'_, Result<PublishedView>> {
        let name = name.to_string();
        Box::pin(async move {
            let (leader, client, unreachable) = self.leader().await?;
            let ask = |known_publication| {
                let (client, name, unreachable) = (client.clone(), name.clone(), &unreachable);
                async move {
                    Ok(client
                        // The rows, plus room for the reply's other fields.
                        .max_decoding_message_size(LEADER_VIEW_BYTES_MAX + (1 << 20))
                        .view_rows(ViewRowsRequest {
                            version: sluice_proto::PROTOCOL_VERSION,
                            name,
                            known_publication,
                        })
                        .await
                        .map_err(|e| unreachable(e.message().to_string()))?
                        .into_inner())
                }
            };
            let failed = |sqlstate: &str, message| leader_error(&leader, sqlstate, message);
            crate::view_cache::read_through(&self.view_copies, &leader, &name, ask, failed).await
        })
    }

    fn view_reads(&self) -> (u64, u64) {
        let copies = self.view_copies.lock().unwrap_or_else(|e| e.into_inner());
        (copies.fetched, copies.reused)
    }
}

/// A failure the leader reported: its SQLSTATE kept.
fn leader_error(leader: &str, sqlstate: &str, message: String) -> Error {
    match SqlCode::from_sqlstate(sqlstate) {
        Some(code) => Error::user(code, message),
        None => Error::external(format!("the leader {leader}: {message}")),
    }
}

/// `batch` as Arrow IPC streams of at most `bytes_max` bytes each (halved
/// until a piece fits; a single row past it goes alone).
fn encode_pieces(batch: &RecordBatch, bytes_max: usize) -> Result<Vec<Vec<u8>>> {
    let ipc = crate::view_cache::encode_batches(&batch.schema(), std::slice::from_ref(batch))?;
    if ipc.len() <= bytes_max || batch.num_rows() <= 1 {
        return Ok(vec![ipc]);
    }
    let half = batch.num_rows() / 2;
    let mut pieces = encode_pieces(&batch.slice(0, half), bytes_max)?;
    pieces.extend(encode_pieces(&batch.slice(half, batch.num_rows() - half), bytes_max)?);
    Ok(pieces)
}

/// A request of another protocol version is refused, saying which.
fn same_version(version: u32) -> std::result::Result<(), tonic::Status> {
    if version == sluice_proto::PROTOCOL_VERSION {
        return Ok(());
    }
    Err(tonic::Status::failed_precondition(sluice_proto::version_mismatch(
        sluice_proto::PROTOCOL_VERSION,
        version,
    )))
}

/// The `Catalog` service: applies a forwarded command on the leader.
pub struct CatalogService(std::sync::Arc<QuorumCatalog>);

impl CatalogService {
    /// This master, which `what` was forwarded to as the leader: `57P03`
    /// when it does not lead (any more) — forwarded once at most, never
    /// again — or is starting or stopping.
    fn leading_master(&self, what: &str) -> Result<Arc<crate::Master>> {
        if !self.0.node.is_leader() {
            return Err(no_quorum(
                &self.0.node,
                &format!("{what} was forwarded to this master, which does not lead (any more)"),
            ));
        }
        self.0.master.get().and_then(Weak::upgrade).ok_or_else(|| {
            Error::user(
                SqlCode::CannotConnectNow,
                format!("{what} was forwarded to this master, which is starting or stopping"),
            )
        })
    }
}

#[tonic::async_trait]
impl Catalog for CatalogService {
    async fn apply(
        &self,
        request: tonic::Request<CatalogApply>,
    ) -> std::result::Result<tonic::Response<CatalogApplied>, tonic::Status> {
        let request = request.into_inner();
        same_version(request.version)?;
        let command: CatalogCommand = serde_json::from_slice(&request.command)
            .map_err(|e| tonic::Status::invalid_argument(format!("malformed catalog command: {e}")))?;
        let reply = |r: Result<Applied>| match r {
            Ok(applied) => CatalogApplied {
                changed: applied == Applied::Changed,
                ..Default::default()
            },
            Err(e) => CatalogApplied {
                sqlstate: e.sqlstate().to_string(),
                message: e.to_string(),
                changed: false,
            },
        };
        // Forwarded once at most: a master that is not the leader (any
        // more) says so instead of forwarding again.
        let master = match self.leading_master("a command") {
            Ok(master) => master,
            Err(e) => return Ok(tonic::Response::new(reply(Err(e)))),
        };
        Ok(tonic::Response::new(reply(master.apply(command).await)))
    }

    type QueryStream =
        std::pin::Pin<Box<dyn futures::Stream<Item = std::result::Result<QueryBatch, tonic::Status>> + Send + 'static>>;

    async fn query(
        &self,
        request: tonic::Request<QueryRequest>,
    ) -> std::result::Result<tonic::Response<Self::QueryStream>, tonic::Status> {
        let request = request.into_inner();
        same_version(request.version)?;
        let failed = |e: Error| QueryBatch {
            sqlstate: e.sqlstate().to_string(),
            message: e.to_string(),
            ..Default::default()
        };
        let started = (|| {
            let master = self.leading_master("a query")?;
            let dag: PhysicalDag = serde_json::from_slice(&request.dag_json)
                .map_err(|e| Error::internal(format!("a forwarded query's DAG did not decode: {e}")))?;
            master.run_session_query(&self.0.clients, &dag)
        })();
        let batches = match started {
            Ok(batches) => batches,
            Err(e) => {
                let once = futures::stream::iter([Ok(failed(e))]);
                return Ok(tonic::Response::new(Box::pin(once)));
            }
        };
        // Each batch in pieces of at most QUERY_BATCH_BYTES_MAX; a failure
        // ends the stream. Dropped by tonic when the follower ends the
        // call: the query stops.
        let messages = batches.flat_map(move |item| {
            let messages = match item {
                Ok(batch) => match encode_pieces(&batch, QUERY_BATCH_BYTES_MAX) {
                    Ok(pieces) => pieces
                        .into_iter()
                        .map(|ipc| QueryBatch {
                            ipc: ipc.into(),
                            ..Default::default()
                        })
                        .collect(),
                    Err(e) => vec![failed(e)],
                },
                Err(e) => vec![failed(e)],
            };
            futures::stream::iter(messages.into_iter().map(Ok))
        });
        Ok(tonic::Response::new(Box::pin(messages)))
    }

    async fn insert(
        &self,
        request: tonic::Request<InsertRows>,
    ) -> std::result::Result<tonic::Response<InsertedRows>, tonic::Status> {
        let request = request.into_inner();
        same_version(request.version)?;
        let reply = |r: Result<u64>| match r {
            Ok(rows) => InsertedRows {
                rows,
                ..Default::default()
            },
            Err(e) => InsertedRows {
                sqlstate: e.sqlstate().to_string(),
                message: e.to_string(),
                rows: 0,
            },
        };
        let master = match self.leading_master("an INSERT") {
            Ok(master) => master,
            Err(e) => return Ok(tonic::Response::new(reply(Err(e)))),
        };
        let checked = (|| {
            let def = master.insertable(&request.stream)?;
            let (schema, rows) = crate::view_cache::decode_rows(&request.ipc)
                .map_err(|e| Error::internal(format!("a forwarded INSERT's rows do not decode: {e}")))?;
            // The follower conformed the rows to the stream's columns as
            // its catalog had them; the leader's may have changed since
            // (the stream dropped and created anew).
            let types =
                |s: &arrow::datatypes::Schema| s.fields().iter().map(|f| f.data_type().clone()).collect::<Vec<_>>();
            if types(&schema) != types(&def.schema) {
                return Err(Error::user(
                    SqlCode::DatatypeMismatch,
                    format!(
                        "the INSERT's rows do not have the columns of stream \"{}\" on the leader (it changed meanwhile); run it again",
                        def.name
                    ),
                ));
            }
            let rows = rows
                .into_iter()
                .map(|b| RecordBatch::try_new(def.schema.clone(), b.columns().to_vec()))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            Ok((def, rows))
        })();
        let appended = match checked {
            Ok((def, rows)) => master.append(&def, rows, &self.0.memory).await,
            Err(e) => Err(e),
        };
        Ok(tonic::Response::new(reply(appended)))
    }

    async fn view_rows(
        &self,
        request: tonic::Request<ViewRowsRequest>,
    ) -> std::result::Result<tonic::Response<ViewRowsReply>, tonic::Status> {
        let request = request.into_inner();
        same_version(request.version)?;
        let failed = |e: Error| ViewRowsReply {
            sqlstate: e.sqlstate().to_string(),
            message: e.to_string(),
            ..Default::default()
        };
        let me = self.0.node.id();
        let name = &request.name;
        if !self.0.node.is_leader() {
            return Ok(tonic::Response::new(failed(no_quorum(
                &self.0.node,
                "a view's rows were asked of this master, which does not lead (any more)",
            ))));
        }
        // The rows of the sink's last publication: in this process, or
        // taken from the worker that runs the sink.
        let from_worker = match self.0.master.get().and_then(Weak::upgrade) {
            Some(master) => master.worker_view(name).await,
            None => Ok(None),
        };
        let view = match from_worker {
            Ok(Some(view)) => Some(Arc::new(view)),
            Ok(None) => self.0.views.get(name),
            Err(e) => return Ok(tonic::Response::new(failed(e))),
        };
        let missing = || {
            Error::user(
                SqlCode::ObjectNotInPrerequisiteState,
                format!(
                    "materialized view {name} has no rows on the leader {me} yet: its pipeline has not started there (SHOW PIPELINES says why)"
                ),
            )
        };
        let too_big = |bytes| {
            format!(
                "materialized view {name}'s rows ({bytes} bytes) are more than a follower takes from the leader ({LEADER_VIEW_BYTES_MAX} bytes): query it on the leader {me} (SHOW CLUSTER names it)"
            )
        };
        Ok(tonic::Response::new(crate::view_cache::reply(
            view.as_deref(),
            request.known_publication,
            missing,
            too_big,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use sluice_quorum::Stamp;

    fn catalog() -> CatalogState {
        let mut c = CatalogState {
            next_pipeline_id: 7,
            ..Default::default()
        };
        let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(vec![arrow::datatypes::Field::new(
            "a",
            arrow::datatypes::DataType::Int64,
            false,
        )]));
        for name in ["s1", "s2"] {
            let def = StreamDef {
                name: name.into(),
                schema: schema.clone(),
                event_time: None,
                connector: "memory".into(),
                options: Default::default(),
                pipeline: None,
                computed: Vec::new(),
            };
            c.streams.insert(name.into(), def);
        }
        c
    }

    fn apply(state: &mut ReplicatedState, writes: Vec<(String, Option<String>)>, seq: u64) {
        for (k, v) in writes {
            state.write(&k, v, Stamp { term: 1, seq });
        }
    }

    #[test]
    fn the_catalog_round_trips_through_registers_and_drops_become_tombstones() {
        let mut state = ReplicatedState::default();
        let mut c = catalog();
        let w = writes(&state, &c).unwrap();
        apply(&mut state, w, 1);
        let back = unflatten(&state).unwrap();
        assert_eq!(back.streams.keys().collect::<Vec<_>>(), ["s1", "s2"]);
        assert_eq!(back.next_pipeline_id, 7);
        assert_eq!(flatten(&back).unwrap(), flatten(&c).unwrap());
        assert!(
            writes(&state, &c).unwrap().is_empty(),
            "nothing changed, nothing written"
        );
        c.streams.remove("s1");
        let w = writes(&state, &c).unwrap();
        assert_eq!(w, [("stream/s1".to_string(), None)]);
        apply(&mut state, w, 2);
        assert_eq!(unflatten(&state).unwrap().streams.keys().collect::<Vec<_>>(), ["s2"]);
    }

    /// An INSERT forwarded to the leader is bounded: past
    /// [`INSERT_BYTES_MAX`] bytes of rows it is refused with 54000 before
    /// the leader is asked; within it, it goes to the leader (here none
    /// is reachable: 57P03).
    #[tokio::test]
    async fn a_forwarded_insert_is_bounded() {
        use arrow::array::StringArray;
        let dir = tempfile::tempdir().unwrap();
        let peers = BTreeMap::from([("m2".to_string(), "127.0.0.1:1".to_string())]);
        let node = QuorumNode::start("m1".into(), peers, sluice_quorum::Config::default(), dir.path()).unwrap();
        let q = QuorumCatalog::new(node.clone(), &Connectors::default());
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![arrow::datatypes::Field::new(
            "s",
            arrow::datatypes::DataType::Utf8,
            true,
        )]));
        let rows = |bytes: usize| {
            let text = "x".repeat(bytes);
            vec![RecordBatch::try_new(schema.clone(), vec![Arc::new(StringArray::from(vec![text]))]).unwrap()]
        };
        let e = q.forward_insert("s", &rows(INSERT_BYTES_MAX)).await.unwrap_err();
        assert_eq!(e.sqlstate(), "54000", "{e}");
        let e = q.forward_insert("s", &rows(INSERT_BYTES_MAX - 4096)).await.unwrap_err();
        assert_eq!(e.sqlstate(), "57P03", "{e}");
        assert_eq!(q.forward_insert("s", &[]).await.unwrap(), 0, "nothing to append");
        node.shutdown();
    }
}
