//! Helpers shared by the data plane tests: two data planes on 127.0.0.1,
//! channel keys, batches, deadlines and a TCP proxy whose link can be cut.

#![allow(dead_code)]

use arrow::array::{Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use sluice_dataflow::channel::ChannelKey;
use sluice_net::{DataPlane, DataPlaneConfig, LinkFailure};
use sluice_types::{EdgeId, PipelineId, WorkerId};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

/// Every wait in these tests ends by this deadline.
pub const DEADLINE: Duration = Duration::from_secs(20);

pub async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, f)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// Waits until `check` holds, polling every 5 ms, up to the deadline.
pub async fn until(what: &str, mut check: impl FnMut() -> bool) {
    within(what, async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

pub fn worker(name: &str) -> WorkerId {
    WorkerId(name.to_string())
}

pub fn key(deployment: u64, edge: u32) -> ChannelKey {
    ChannelKey {
        pipeline: PipelineId(7),
        deployment,
        edge: EdgeId(edge),
        from: 0,
        to: 1,
    }
}

pub fn batch(from: i64, rows: usize) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("key", DataType::Int64, false),
        Field::new("msg", DataType::Utf8, false),
    ]));
    let keys = Int64Array::from_iter_values(from..from + rows as i64);
    let msgs = StringArray::from_iter_values((from..from + rows as i64).map(|i| format!("message {i:>20}")));
    RecordBatch::try_new(schema, vec![Arc::new(keys), Arc::new(msgs)]).unwrap()
}

pub async fn start(name: &str, config: DataPlaneConfig) -> Arc<DataPlane> {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    DataPlane::start(worker(name), listener, config).unwrap()
}

/// Workers `a` and `b`, each knowing the other's address.
pub async fn pair(a_config: DataPlaneConfig, b_config: DataPlaneConfig) -> (Arc<DataPlane>, Arc<DataPlane>) {
    let a = start("a", a_config).await;
    let b = start("b", b_config).await;
    connect(&a, "b", b.local_addr());
    connect(&b, "a", a.local_addr());
    (a, b)
}

pub fn connect(plane: &DataPlane, peer: &str, address: SocketAddr) {
    plane.set_peers(HashMap::from([(worker(peer), address.to_string())]));
}

pub async fn next_failure(failures: &mut broadcast::Receiver<LinkFailure>) -> LinkFailure {
    within("a link failure report", failures.recv()).await.unwrap()
}

/// A TCP proxy to `target`; dropping (or `cut`) it closes every
/// connection it carries, as a dead peer or a cut network does.
pub struct Proxy {
    pub address: SocketAddr,
    task: JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut pipes = tokio::task::JoinSet::new();
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                pipes.spawn(async move {
                    let mut outbound = TcpStream::connect(target).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                });
            }
        });
        Proxy { address, task }
    }

    /// Closes every connection through the proxy.
    pub fn cut(&self) {
        self.task.abort();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
