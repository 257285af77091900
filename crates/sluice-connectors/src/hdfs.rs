//! HDFS as a [`FileStore`] for the file-system sink, on `hdfs-native`.
//!
//! Every call has a deadline; after a failure the next call gets a fresh
//! client (a new NameNode connection), so a restarted NameNode is picked up.

use crate::fs_sink::FileStore;
use async_trait::async_trait;
use bytes::Bytes;
use hdfs_native::{Client, ClientBuilder, WriteOptions};
use sluice_types::{Error, Result};
use std::sync::Arc;
use std::time::Duration;

/// A file system reached through `hdfs-native`.
pub struct HdfsStore {
    url: String,
    client: std::sync::Mutex<Arc<Client>>,
}

impl HdfsStore {
    pub fn connect(url: &str) -> Result<Self> {
        Ok(HdfsStore {
            url: url.to_string(),
            client: std::sync::Mutex::new(Arc::new(Self::client(url)?)),
        })
    }

    fn client(url: &str) -> Result<Client> {
        ClientBuilder::new()
            .with_url(url)
            .build()
            .map_err(|e| Error::invalid_option(format!("HDFS url '{url}': {e}")))
    }

    fn current(&self) -> Arc<Client> {
        self.client.lock().expect("hdfs client lock").clone()
    }

    /// After a failure: a new client (new NameNode connection) next time.
    fn renew(&self) {
        if let Ok(c) = Self::client(&self.url) {
            *self.client.lock().expect("hdfs client lock") = Arc::new(c);
        }
    }

    async fn put_once(&self, dir: &str, name: &str, bytes: Bytes) -> Result<()> {
        let client = self.current();
        let hdfs = |e: hdfs_native::HdfsError| Error::external(format!("HDFS: {e}"));
        let (in_progress, target) = (format!("{dir}/.{name}.inprogress"), format!("{dir}/{name}"));
        let length = bytes.len();
        client.mkdirs(dir, 0o755, true).await.map_err(hdfs)?;
        let mut w = client
            .create(&in_progress, WriteOptions::default().overwrite(true))
            .await
            .map_err(hdfs)?;
        w.write_bytes(bytes).await.map_err(hdfs)?;
        w.close().await.map_err(hdfs)?;
        if let Err(e) = client.rename(&in_progress, &target, false).await {
            // A retry after a rename whose answer was lost: the file is there.
            match client.get_file_info(&target).await {
                Ok(s) if s.length == length => {}
                _ => return Err(hdfs(e)),
            }
        }
        Ok(())
    }
}

/// One attempt to store a file gives up after this (a NameNode or DataNode
/// that went away can leave a call waiting).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(20);

impl HdfsStore {
    /// Runs one call with a deadline; after a failure the next call gets a
    /// fresh client.
    async fn attempt<T>(&self, call: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        let outcome = match tokio::time::timeout(ATTEMPT_TIMEOUT, call).await {
            Ok(r) => r,
            Err(_) => Err(Error::external(format!("HDFS: no answer within {ATTEMPT_TIMEOUT:?}"))),
        };
        if outcome.is_err() {
            self.renew();
        }
        outcome
    }
}

#[async_trait]
impl FileStore for HdfsStore {
    async fn put(&self, dir: &str, name: &str, bytes: Bytes) -> Result<()> {
        self.attempt(self.put_once(dir, name, bytes)).await
    }

    async fn put_in_progress(&self, dir: &str, name: &str, bytes: Bytes) -> Result<()> {
        self.attempt(async {
            let client = self.current();
            let hdfs = |e: hdfs_native::HdfsError| Error::external(format!("HDFS: {e}"));
            client.mkdirs(dir, 0o755, true).await.map_err(hdfs)?;
            let mut w = client
                .create(
                    &format!("{dir}/.{name}.inprogress"),
                    WriteOptions::default().overwrite(true),
                )
                .await
                .map_err(hdfs)?;
            w.write_bytes(bytes).await.map_err(hdfs)?;
            w.close().await.map_err(hdfs)
        })
        .await
    }

    async fn finalize(&self, dir: &str, name: &str) -> Result<()> {
        self.attempt(async {
            let client = self.current();
            let hdfs = |e: hdfs_native::HdfsError| Error::external(format!("HDFS: {e}"));
            let (in_progress, target) = (format!("{dir}/.{name}.inprogress"), format!("{dir}/{name}"));
            match client.rename(&in_progress, &target, false).await {
                Ok(()) => Ok(()),
                Err(e) => match client.get_file_info(&target).await {
                    // Renamed before (a re-commit after recovery).
                    Ok(_) => Ok(()),
                    Err(_) => Err(hdfs(e)),
                },
            }
        })
        .await
    }

    async fn in_progress(&self, root: &str) -> Result<Vec<(String, String)>> {
        self.attempt(async {
            let client = self.current();
            let statuses = match client.list_status(root, true).await {
                Ok(s) => s,
                Err(hdfs_native::HdfsError::FileNotFound(_)) => return Ok(Vec::new()),
                Err(e) => return Err(Error::external(format!("HDFS: {e}"))),
            };
            Ok(statuses
                .into_iter()
                .filter(|s| !s.isdir)
                .filter_map(|s| {
                    let (dir, file) = s.path.rsplit_once('/')?;
                    let name = file.strip_prefix('.')?.strip_suffix(".inprogress")?;
                    Some((dir.to_string(), name.to_string()))
                })
                .collect())
        })
        .await
    }

    async fn discard(&self, dir: &str, name: &str) -> Result<()> {
        self.remove(dir, &format!(".{name}.inprogress")).await
    }

    async fn committed(&self, root: &str) -> Result<Vec<(String, String)>> {
        self.attempt(async {
            let client = self.current();
            let statuses = match client.list_status(root, true).await {
                Ok(s) => s,
                Err(hdfs_native::HdfsError::FileNotFound(_)) => return Ok(Vec::new()),
                Err(e) => return Err(Error::external(format!("HDFS: {e}"))),
            };
            Ok(statuses
                .into_iter()
                .filter(|s| !s.isdir)
                .filter_map(|s| {
                    let (dir, file) = s.path.rsplit_once('/')?;
                    (!file.starts_with('.')).then(|| (dir.to_string(), file.to_string()))
                })
                .collect())
        })
        .await
    }

    async fn remove(&self, dir: &str, name: &str) -> Result<()> {
        self.attempt(async {
            let client = self.current();
            match client.delete(&format!("{dir}/{name}"), false).await {
                Ok(_) | Err(hdfs_native::HdfsError::FileNotFound(_)) => Ok(()),
                Err(e) => Err(Error::external(format!("HDFS: {e}"))),
            }
        })
        .await
    }
}
