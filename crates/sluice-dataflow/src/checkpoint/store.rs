//! Where checkpoints live: a [`StateStore`] (a local directory by default;
//! the connectors crate adds HDFS). Paths are `/`-separated and relative
//! to the store's root.

use async_trait::async_trait;
use sluice_types::{Error, Result};
use std::path::{Path, PathBuf};

/// A place to keep checkpoint files.
#[async_trait]
pub trait StateStore: Send + Sync {
    /// Writes `path` atomically (a temporary name, then a rename), creating
    /// parent directories.
    async fn put(&self, path: &str, bytes: Vec<u8>) -> Result<()>;
    /// The file's bytes, `None` when it does not exist.
    async fn get(&self, path: &str) -> Result<Option<Vec<u8>>>;
    /// Names of the entries of directory `dir` (empty when it does not exist).
    async fn list(&self, dir: &str) -> Result<Vec<String>>;
    /// Removes directory `dir` and everything in it (absent is fine).
    async fn delete_dir(&self, dir: &str) -> Result<()>;
    /// Where the store is, for logs.
    fn describe(&self) -> String;
}

/// Checkpoints in a local directory (`<data dir>/checkpoints`).
#[derive(Debug, Clone)]
pub struct LocalStateStore {
    root: PathBuf,
}

impl LocalStateStore {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalStateStore { root: root.into() }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::external(format!("checkpoint store {}: {e}", path.display()))
}

#[async_trait]
impl StateStore for LocalStateStore {
    async fn put(&self, path: &str, bytes: Vec<u8>) -> Result<()> {
        let target = self.path(path);
        // On the checkpoint thread: copying hundreds of MB into the page
        // cache is CPU work too (and the buffer is freed there).
        super::background::run(move || {
            let dir = target.parent().expect("a file path has a parent");
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
            let name = target.file_name().expect("a file name").to_string_lossy().to_string();
            let tmp = dir.join(format!(".{name}.tmp"));
            {
                use std::io::Write;
                let mut f = std::fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
                f.write_all(&bytes).map_err(|e| io(&tmp, e))?;
                f.sync_all().map_err(|e| io(&tmp, e))?;
                // Written once, read only to recover: keeping it in the page
                // cache (a GB every 10 s for a large join) only pushes the
                // machine toward reclaiming memory, which can stall the
                // tasks' allocations. Advice, so a failure changes nothing.
                let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
            }
            std::fs::rename(&tmp, &target).map_err(|e| io(&target, e))?;
            // Make the rename itself durable.
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
            Ok(())
        })
        .await?
    }

    async fn get(&self, path: &str) -> Result<Option<Vec<u8>>> {
        let p = self.path(path);
        match tokio::fs::read(&p).await {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(&p, e)),
        }
    }

    async fn list(&self, dir: &str) -> Result<Vec<String>> {
        let p = self.path(dir);
        let mut out = Vec::new();
        let mut entries = match tokio::fs::read_dir(&p).await {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(io(&p, e)),
        };
        while let Some(e) = entries.next_entry().await.map_err(|e| io(&p, e))? {
            out.push(e.file_name().to_string_lossy().to_string());
        }
        Ok(out)
    }

    async fn delete_dir(&self, dir: &str) -> Result<()> {
        let p = self.path(dir);
        match tokio::fs::remove_dir_all(&p).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(&p, e)),
        }
    }

    fn describe(&self) -> String {
        self.root.display().to_string()
    }
}
