//! Where checkpoints live: a [`StateStore`] (a local directory by default;
//! the connectors crate adds HDFS). Paths are `/`-separated and relative
//! to the store's root.

use super::state::{CHUNK_BYTES, FileSummary};
use async_trait::async_trait;
use sluice_types::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Produces a file front to back into the writer it is given (see
/// [`super::TaskState::write_to`]) and returns its summary.
pub type FileWriter = Box<dyn FnOnce(&mut dyn Write) -> Result<FileSummary> + Send>;

/// A [`FileWriter`] of `bytes`, handed over in writes of at most `piece`
/// bytes.
pub fn write_bytes(bytes: Vec<u8>, piece: usize) -> FileWriter {
    Box::new(move |w| {
        for part in bytes.chunks(piece.max(1)) {
            w.write_all(part)?;
        }
        Ok(FileSummary {
            bytes: bytes.len() as u64,
            crc32: super::state::crc32(&bytes),
        })
    })
}

/// A local file written through [`put_with`](StateStore::put_with) is
/// synced and dropped from the page cache every this many bytes, so a
/// checkpoint of hundreds of MB holds at most this much of it there.
pub const DROP_BEHIND_BYTES: u64 = 16 << 20;

/// A place to keep checkpoint files.
#[async_trait]
pub trait StateStore: Send + Sync {
    /// Writes `path` atomically (a temporary name, then a rename), creating
    /// parent directories, from `write` run on the checkpoint thread
    /// ([`super::background`]) a bounded buffer at a time: the file is
    /// never whole in memory.
    async fn put_with(&self, path: &str, write: FileWriter) -> Result<FileSummary>;
    /// Writes `bytes` to `path` as [`put_with`](StateStore::put_with) does.
    async fn put(&self, path: &str, bytes: Vec<u8>) -> Result<()> {
        self.put_with(path, write_bytes(bytes, usize::MAX)).await.map(drop)
    }
    /// The file's bytes, `None` when it does not exist.
    async fn get(&self, path: &str) -> Result<Option<Vec<u8>>>;
    /// Names of the entries of directory `dir` (empty when it does not exist).
    async fn list(&self, dir: &str) -> Result<Vec<String>>;
    /// Removes directory `dir` and everything in it (absent is fine).
    async fn delete_dir(&self, dir: &str) -> Result<()>;
    /// Removes file `path` (absent is fine).
    async fn delete_file(&self, path: &str) -> Result<()>;
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

/// A file written once and read only to recover: every
/// [`DROP_BEHIND_BYTES`] it is synced and its written part dropped from the
/// page cache (a GB every 10 s for a large join only pushed the machine
/// toward reclaiming memory, which can stall the tasks' allocations).
struct DropBehind {
    file: std::fs::File,
    written: u64,
    dropped_to: u64,
}

impl DropBehind {
    fn new(file: std::fs::File) -> Self {
        DropBehind {
            file,
            written: 0,
            dropped_to: 0,
        }
    }

    fn drop_behind(&mut self) -> std::io::Result<()> {
        self.file.sync_data()?;
        // Advice, so a failure changes nothing.
        let _ = rustix::fs::fadvise(
            &self.file,
            self.dropped_to,
            std::num::NonZeroU64::new(self.written - self.dropped_to),
            rustix::fs::Advice::DontNeed,
        );
        self.dropped_to = self.written;
        Ok(())
    }

    /// Makes the whole file durable and drops the rest from the cache.
    fn finish(mut self) -> std::io::Result<()> {
        self.file.sync_all()?;
        self.drop_behind()
    }
}

impl Write for DropBehind {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if self.written - self.dropped_to >= DROP_BEHIND_BYTES {
            self.drop_behind()?;
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[async_trait]
impl StateStore for LocalStateStore {
    async fn put_with(&self, path: &str, write: FileWriter) -> Result<FileSummary> {
        let target = self.path(path);
        super::background::run(move || {
            let dir = target.parent().expect("a file path has a parent");
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
            let name = target.file_name().expect("a file name").to_string_lossy().to_string();
            let tmp = dir.join(format!(".{name}.tmp"));
            let written = (|| {
                let file = std::fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
                let mut out = std::io::BufWriter::with_capacity(CHUNK_BYTES, DropBehind::new(file));
                let summary = write(&mut out)?;
                let file = out.into_inner().map_err(|e| io(&tmp, e.into_error()))?;
                file.finish().map_err(|e| io(&tmp, e))?;
                Ok(summary)
            })();
            let summary = match written {
                Ok(s) => s,
                Err(e) => {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(e);
                }
            };
            std::fs::rename(&tmp, &target).map_err(|e| io(&target, e))?;
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
            Ok(summary)
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

    async fn delete_file(&self, path: &str) -> Result<()> {
        let p = self.path(path);
        match tokio::fs::remove_file(&p).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(&p, e)),
        }
    }

    fn describe(&self) -> String {
        self.root.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, LocalStateStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStateStore::new(dir.path());
        (dir, store)
    }

    /// A file of 2.5 × DROP_BEHIND_BYTES, written in writes of odd sizes,
    /// arrives whole, with the summary its writer computed.
    #[tokio::test]
    async fn a_file_larger_than_the_drop_behind_window_arrives_whole() {
        let (_dir, store) = store();
        let len = DROP_BEHIND_BYTES as usize * 5 / 2;
        let data: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
        let expected = data.clone();
        let summary = store
            .put_with("p1/chk-1/task-1-0.state", write_bytes(data, 777_777))
            .await
            .unwrap();
        let back = store.get("p1/chk-1/task-1-0.state").await.unwrap().unwrap();
        assert!(back == expected, "the file differs from what was written");
        assert_eq!(summary.bytes, len as u64);
        assert_eq!(store.list("p1/chk-1").await.unwrap(), vec!["task-1-0.state"]);
    }

    /// A writer that fails half way leaves neither the file nor its
    /// temporary behind, and an earlier version of the file untouched.
    #[tokio::test]
    async fn a_failed_write_leaves_the_previous_file() {
        let (_dir, store) = store();
        store.put("p1/chk-1/MANIFEST", b"old".to_vec()).await.unwrap();
        let e = store
            .put_with(
                "p1/chk-1/MANIFEST",
                Box::new(|w| {
                    w.write_all(&[1; 100_000])?;
                    Err(Error::internal("encoding failed"))
                }),
            )
            .await
            .unwrap_err();
        assert!(e.to_string().contains("encoding failed"), "{e}");
        assert_eq!(store.get("p1/chk-1/MANIFEST").await.unwrap().unwrap(), b"old");
        assert_eq!(store.list("p1/chk-1").await.unwrap(), vec!["MANIFEST"]);
    }
}
