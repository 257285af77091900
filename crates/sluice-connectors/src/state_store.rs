//! Where a pipeline's checkpoints go: `'checkpoint.dir'` names a local
//! directory or an HDFS location (`hdfs://host:port/path`). The HDFS store
//! implements sluice-dataflow's [`StateStore`] on `hdfs-native`, with the
//! same layout and format as the local one: each file is written under a
//! hidden temporary name, closed, and renamed over its final name.

use async_trait::async_trait;
use hdfs_native::{Client, ClientBuilder, HdfsError, WriteOptions};
use sluice_dataflow::checkpoint::state::{CHUNK_BYTES, FileSummary};
use sluice_dataflow::checkpoint::store::FileWriter;
use sluice_dataflow::checkpoint::{LocalStateStore, StateStore, background};
use sluice_types::{Error, Result};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One call to HDFS gives up after this (a NameNode that went away can
/// leave a call waiting); the coordinator then fails the pipeline, which
/// restarts from its last checkpoint.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Chunks of a file on their way from the checkpoint thread to HDFS at
/// most (each up to [`CHUNK_BYTES`]).
const CHUNKS_IN_FLIGHT: usize = 4;

/// Splits `hdfs://host:port/path` into the file system URL and the
/// absolute path; `None` for a local directory.
pub fn split_hdfs_location(location: &str) -> Result<Option<(String, String)>> {
    let Some((scheme, rest)) = location.split_once("://") else {
        return Ok(None);
    };
    if scheme != "hdfs" && scheme != "viewfs" {
        return Err(Error::invalid_option(format!(
            "'checkpoint.dir' = '{location}': only a local directory or hdfs://host:port/path is supported"
        )));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let path = path.trim_end_matches('/');
    if authority.is_empty() || path.is_empty() {
        return Err(Error::invalid_option(format!(
            "'checkpoint.dir' = '{location}' needs a host and a directory, e.g. 'hdfs://namenode:9000/sluice/checkpoints'"
        )));
    }
    Ok(Some((format!("{scheme}://{authority}"), path.to_string())))
}

/// The checkpoint store for `'checkpoint.dir'` (`None`: `default_root`).
pub fn open_state_store(dir: Option<&str>, default_root: &Path) -> Result<Arc<dyn StateStore>> {
    let Some(dir) = dir else {
        return Ok(Arc::new(LocalStateStore::new(default_root)));
    };
    match split_hdfs_location(dir)? {
        Some((url, root)) => Ok(Arc::new(HdfsStateStore::connect(&url, &root)?)),
        None => Ok(Arc::new(LocalStateStore::new(dir))),
    }
}

/// Checkpoints on HDFS under `root`.
pub struct HdfsStateStore {
    url: String,
    root: String,
    client: Mutex<Arc<Client>>,
}

/// A missing file: hdfs-native reports some as an RPC error carrying
/// Java's exception.
fn not_found(e: &HdfsError) -> bool {
    match e {
        HdfsError::FileNotFound(_) => true,
        other => other.to_string().contains("java.io.FileNotFoundException"),
    }
}

fn hdfs(e: HdfsError) -> Error {
    Error::external(format!("checkpoint store (HDFS): {e}"))
}

impl HdfsStateStore {
    pub fn connect(url: &str, root: &str) -> Result<Self> {
        Ok(HdfsStateStore {
            url: url.to_string(),
            root: root.trim_end_matches('/').to_string(),
            client: Mutex::new(Arc::new(Self::client(url)?)),
        })
    }

    fn client(url: &str) -> Result<Client> {
        ClientBuilder::new()
            .with_url(url)
            .build()
            .map_err(|e| Error::invalid_option(format!("'checkpoint.dir' on {url}: {e}")))
    }

    fn path(&self, relative: &str) -> String {
        format!("{}/{}", self.root, relative.trim_start_matches('/'))
    }

    /// Runs one call with a deadline; after a failure the next call gets a
    /// fresh client (a new NameNode connection).
    async fn call<T>(&self, what: &str, f: impl AsyncFnOnce(Arc<Client>) -> Result<T>) -> Result<T> {
        let client = self.client.lock().expect("hdfs client lock").clone();
        let outcome = match tokio::time::timeout(CALL_TIMEOUT, f(client)).await {
            Ok(r) => r,
            Err(_) => Err(Error::external(format!(
                "checkpoint store (HDFS): {what} got no answer within {CALL_TIMEOUT:?}"
            ))),
        };
        if outcome.is_err()
            && let Ok(c) = Self::client(&self.url)
        {
            *self.client.lock().expect("hdfs client lock") = Arc::new(c);
        }
        outcome
    }
}

/// Hands each buffer of a file to the HDFS writing task.
struct ChannelSink(tokio::sync::mpsc::Sender<bytes::Bytes>);

impl std::io::Write for ChannelSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .blocking_send(bytes::Bytes::copy_from_slice(buf))
            .map_err(|_| std::io::Error::other("the HDFS write stopped"))?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[async_trait]
impl StateStore for HdfsStateStore {
    /// The checkpoint thread writes the file into a channel of at most
    /// [`CHUNKS_IN_FLIGHT`] chunks; this task writes them to HDFS, each
    /// write with its own deadline (the encoding's pace is not HDFS's).
    /// The file is renamed into place only when both sides succeeded.
    async fn put_with(&self, path: &str, write: FileWriter) -> Result<FileSummary> {
        let target = self.path(path);
        let (dir, name) = target.rsplit_once('/').expect("an absolute path");
        let (dir, tmp) = (dir.to_string(), format!("{dir}/.{name}.tmp"));
        let (tx, mut rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(CHUNKS_IN_FLIGHT);
        let produce = background::run(move || {
            let mut out = std::io::BufWriter::with_capacity(CHUNK_BYTES, ChannelSink(tx));
            let summary = write(&mut out)?;
            out.flush()?;
            Ok::<_, Error>(summary)
        });
        let tmp_ = tmp.clone();
        let consume = async {
            let mut w = self
                .call("create", async move |c: Arc<Client>| {
                    c.mkdirs(&dir, 0o755, true).await.map_err(hdfs)?;
                    c.create(&tmp_, WriteOptions::default().overwrite(true))
                        .await
                        .map_err(hdfs)
                })
                .await?;
            while let Some(chunk) = rx.recv().await {
                self.call("write", async |_| w.write_bytes(chunk).await.map(drop).map_err(hdfs))
                    .await?;
            }
            Ok::<_, Error>(w)
        };
        let (produced, consumed) = tokio::join!(produce, consume);
        let tmp_ = tmp.clone();
        let result = async {
            // HDFS's error first: the writer only saw its channel close.
            let mut w = consumed?;
            // Closed either way, so a failed file can be removed.
            let closed = self.call("close", async |_| w.close().await.map_err(hdfs)).await;
            let summary = produced??;
            closed?;
            self.call("rename", async move |c: Arc<Client>| {
                c.rename(&tmp_, &target, true).await.map_err(hdfs)
            })
            .await?;
            Ok(summary)
        }
        .await;
        if result.is_err() {
            // Best effort: a failed write leaves no temporary behind.
            let _ = self
                .call("delete", async move |c: Arc<Client>| {
                    c.delete(&tmp, false).await.map(drop).map_err(hdfs)
                })
                .await;
        }
        result
    }

    async fn get(&self, path: &str) -> Result<Option<Vec<u8>>> {
        let p = self.path(path);
        self.call("get", async move |c: Arc<Client>| {
            let r = match c.read(&p).await {
                Ok(r) => r,
                Err(e) if not_found(&e) => return Ok(None),
                Err(e) => return Err(hdfs(e)),
            };
            let bytes = r.read_range(0, r.file_length()).await.map_err(hdfs)?;
            Ok(Some(bytes.to_vec()))
        })
        .await
    }

    async fn list(&self, dir: &str) -> Result<Vec<String>> {
        let p = self.path(dir);
        self.call("list", async move |c: Arc<Client>| {
            match c.list_status(&p, false).await {
                Ok(s) => Ok(s
                    .into_iter()
                    .filter_map(|s| s.path.rsplit('/').next().map(str::to_string))
                    .collect()),
                Err(e) if not_found(&e) => Ok(Vec::new()),
                Err(e) => Err(hdfs(e)),
            }
        })
        .await
    }

    async fn delete_dir(&self, dir: &str) -> Result<()> {
        let p = self.path(dir);
        self.call("delete", async move |c: Arc<Client>| match c.delete(&p, true).await {
            Ok(_) => Ok(()),
            Err(e) if not_found(&e) => Ok(()),
            Err(e) => Err(hdfs(e)),
        })
        .await
    }

    async fn delete_file(&self, path: &str) -> Result<()> {
        let p = self.path(path);
        self.call("delete", async move |c: Arc<Client>| match c.delete(&p, false).await {
            Ok(_) => Ok(()),
            Err(e) if not_found(&e) => Ok(()),
            Err(e) => Err(hdfs(e)),
        })
        .await
    }

    fn describe(&self) -> String {
        format!("{}{}", self.url, self.root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_split_or_rejected() {
        assert_eq!(split_hdfs_location("/var/chk").unwrap(), None);
        assert_eq!(
            split_hdfs_location("hdfs://nn:9000/sluice/chk/").unwrap(),
            Some(("hdfs://nn:9000".into(), "/sluice/chk".into()))
        );
        for bad in ["s3://bucket/x", "hdfs://nn:9000", "hdfs://nn:9000/", "hdfs:///x"] {
            let e = split_hdfs_location(bad).unwrap_err().to_string();
            assert!(e.contains("checkpoint.dir"), "{bad}: {e}");
        }
    }

    /// The store against the real HDFS of `scripts/services.sh` (skipped
    /// with a note when it is not running).
    #[tokio::test]
    async fn stores_lists_and_deletes_on_real_hdfs() {
        if std::net::TcpStream::connect("127.0.0.1:9000").is_err() {
            eprintln!("HDFS is not running on localhost:9000; skipping");
            return;
        }
        let root = format!(
            "/sluice-test/state-store-{}-{}",
            std::process::id(),
            sluice_types::now_ms()
        );
        let store = HdfsStateStore::connect("hdfs://localhost:9000", &root).unwrap();
        assert_eq!(store.get("p1/chk-1/MANIFEST").await.unwrap(), None);
        assert!(store.list("p1").await.unwrap().is_empty());
        store.put("p1/chk-1/MANIFEST", b"one".to_vec()).await.unwrap();
        store.put("p1/chk-1/MANIFEST", b"two".to_vec()).await.unwrap();
        store.put("p1/chk-2/task-1-0.state", vec![7; 100_000]).await.unwrap();
        assert_eq!(store.get("p1/chk-1/MANIFEST").await.unwrap().unwrap(), b"two");
        assert_eq!(
            store.get("p1/chk-2/task-1-0.state").await.unwrap().unwrap(),
            vec![7; 100_000]
        );
        let mut ids = store.list("p1").await.unwrap();
        ids.sort();
        assert_eq!(ids, vec!["chk-1", "chk-2"]);
        assert_eq!(
            store.list("p1/chk-1").await.unwrap(),
            vec!["MANIFEST"],
            "no temporary file left"
        );
        // Streamed: more chunks than the channel holds, in odd-sized writes.
        let big: Vec<u8> = (0..CHUNK_BYTES * (CHUNKS_IN_FLIGHT + 3) + 12_345)
            .map(|i| (i % 241) as u8)
            .collect();
        let (data, expected) = (big.clone(), big);
        let summary = store
            .put_with(
                "p1/chk-2/task-2-0.state",
                sluice_dataflow::checkpoint::store::write_bytes(data, 333_333),
            )
            .await
            .unwrap();
        assert_eq!(summary.bytes, expected.len() as u64);
        let back = store.get("p1/chk-2/task-2-0.state").await.unwrap().unwrap();
        assert!(back == expected, "the streamed file differs");
        // A writer failing half way leaves no file and no temporary.
        let e = store
            .put_with(
                "p1/chk-2/task-3-0.state",
                Box::new(|w| {
                    w.write_all(&vec![1; CHUNK_BYTES * 2])?;
                    Err(Error::internal("encoding failed"))
                }),
            )
            .await
            .unwrap_err();
        assert!(e.to_string().contains("encoding failed"), "{e}");
        assert_eq!(store.get("p1/chk-2/task-3-0.state").await.unwrap(), None);
        let mut files = store.list("p1/chk-2").await.unwrap();
        files.sort();
        assert_eq!(files, vec!["task-1-0.state", "task-2-0.state"]);
        // One file goes (twice: absent is fine), its sibling stays.
        store.delete_file("p1/chk-2/task-1-0.state").await.unwrap();
        store.delete_file("p1/chk-2/task-1-0.state").await.unwrap();
        assert_eq!(store.list("p1/chk-2").await.unwrap(), vec!["task-2-0.state"]);
        store.delete_dir("p1/chk-1").await.unwrap();
        store.delete_dir("p1/chk-1").await.unwrap();
        assert_eq!(store.list("p1").await.unwrap(), vec!["chk-2"]);
        store.delete_dir("").await.unwrap();
    }
}
