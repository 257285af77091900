//! The local file system as a [`FileStore`] for the `file` sink: part files
//! in a directory, written under a hidden in-progress name, flushed to disk
//! (`fsync`) and renamed, so a reader or a crash never sees half a file.
//! Blocking file calls run on tokio's blocking pool.

use crate::fs_sink::FileStore;
use async_trait::async_trait;
use bytes::Bytes;
use sluice_types::{Error, Result};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

/// Part files under a local directory.
pub struct LocalStore;

impl LocalStore {
    /// Checks that `root` is (or can become) a directory.
    pub fn open(root: &str) -> Result<Self> {
        let path = Path::new(root);
        if path.exists() && !path.is_dir() {
            return Err(Error::invalid_option(format!(
                "file sink 'path' = '{root}' is a file; the sink writes part files into a directory"
            )));
        }
        std::fs::create_dir_all(path).map_err(|e| fs_error("create", path, e))?;
        Ok(LocalStore)
    }
}

fn fs_error(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::external(format!("file sink: cannot {what} {}: {e}", path.display()))
}

fn in_progress_path(dir: &str, name: &str) -> PathBuf {
    Path::new(dir).join(format!(".{name}.inprogress"))
}

/// Runs blocking file calls off the async workers.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::internal(format!("file sink: blocking call failed: {e}")))?
}

/// Writes `bytes` to `path` and flushes them to disk.
fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| fs_error("create", dir, e))?;
    }
    let mut f = std::fs::File::create(path).map_err(|e| fs_error("create", path, e))?;
    f.write_all(bytes).map_err(|e| fs_error("write", path, e))?;
    f.sync_all().map_err(|e| fs_error("sync", path, e))
}

/// Makes a rename in `dir` durable.
fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| fs_error("sync", dir, e))
}

/// Renames `dir/.name.inprogress` to `dir/name`; done already when only
/// the final file is there.
fn finalize_sync(dir: &str, name: &str) -> Result<()> {
    let (from, to) = (in_progress_path(dir, name), Path::new(dir).join(name));
    match std::fs::rename(&from, &to) {
        Ok(()) => sync_dir(Path::new(dir)),
        Err(e) if e.kind() == ErrorKind::NotFound && to.exists() => Ok(()),
        Err(e) => Err(fs_error("rename", &from, e)),
    }
}

/// Files under `root`, recursively: (dir, file name).
fn walk(root: &Path, out: &mut Vec<(String, String)>) -> Result<()> {
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(fs_error("list", root, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| fs_error("list", root, e))?;
        let kind = entry.file_type().map_err(|e| fs_error("list", &entry.path(), e))?;
        if kind.is_dir() {
            walk(&entry.path(), out)?;
        } else if kind.is_file() {
            out.push((
                root.to_string_lossy().to_string(),
                entry.file_name().to_string_lossy().to_string(),
            ));
        }
    }
    Ok(())
}

fn remove_file(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(fs_error("remove", path, e)),
    }
}

#[async_trait]
impl FileStore for LocalStore {
    async fn put(&self, dir: &str, name: &str, bytes: Bytes) -> Result<()> {
        let (dir, name) = (dir.to_string(), name.to_string());
        blocking(move || {
            write_synced(&in_progress_path(&dir, &name), &bytes)?;
            finalize_sync(&dir, &name)
        })
        .await
    }

    async fn put_in_progress(&self, dir: &str, name: &str, bytes: Bytes) -> Result<()> {
        let path = in_progress_path(dir, name);
        blocking(move || write_synced(&path, &bytes)).await
    }

    async fn finalize(&self, dir: &str, name: &str) -> Result<()> {
        let (dir, name) = (dir.to_string(), name.to_string());
        blocking(move || finalize_sync(&dir, &name)).await
    }

    async fn in_progress(&self, root: &str) -> Result<Vec<(String, String)>> {
        let root = PathBuf::from(root);
        blocking(move || {
            let mut files = Vec::new();
            walk(&root, &mut files)?;
            Ok(files
                .into_iter()
                .filter_map(|(dir, file)| {
                    let name = file.strip_prefix('.')?.strip_suffix(".inprogress")?;
                    Some((dir, name.to_string()))
                })
                .collect())
        })
        .await
    }

    async fn discard(&self, dir: &str, name: &str) -> Result<()> {
        let path = in_progress_path(dir, name);
        blocking(move || remove_file(&path)).await
    }

    async fn committed(&self, root: &str) -> Result<Vec<(String, String)>> {
        let root = PathBuf::from(root);
        blocking(move || {
            let mut files = Vec::new();
            walk(&root, &mut files)?;
            files.retain(|(_, file)| !file.starts_with('.'));
            Ok(files)
        })
        .await
    }

    async fn remove(&self, dir: &str, name: &str) -> Result<()> {
        let path = Path::new(dir).join(name);
        blocking(move || remove_file(&path)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs_sink::{FileSystem, FsSinkSettings, RollingSink};
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use sluice_dataflow::Operator;
    use sluice_dataflow::checkpoint::TaskState;
    use sluice_dataflow::deploy::InstanceContext;
    use sluice_dataflow::metrics::TaskMetrics;
    use sluice_types::{OperatorId, PipelineId};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    /// A two-phase sink on a local directory, as the `file` connector opens it.
    fn local_sink(dir: &std::path::Path, pipeline: u64) -> RollingSink {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let options: BTreeMap<String, String> = [
            ("path", dir.to_str().unwrap()),
            ("format", "jsonl"),
            ("checkpoint.interval", "1s"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let ctx = InstanceContext {
            pipeline: PipelineId(pipeline),
            instance: 0,
            parallelism: 1,
            metrics: TaskMetrics::new(OperatorId(1), 0, "sink"),
        };
        let settings = FsSinkSettings::parse(FileSystem::Local, &options, &schema).unwrap();
        let store = Arc::new(LocalStore::open(&settings.path).unwrap());
        RollingSink::open(store, settings, &options, &schema, &ctx).unwrap()
    }

    async fn write(sink: &mut RollingSink, values: &[i64]) {
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(values.to_vec()))],
        )
        .unwrap();
        sink.write_rows(&batch).await.unwrap();
    }

    /// The values in the directory's committed files, sorted.
    fn committed_values(dir: &std::path::Path) -> Vec<i64> {
        let mut values = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().unwrap().to_string_lossy().starts_with('.') {
                continue;
            }
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                values.push(v["v"].as_i64().unwrap());
            }
        }
        values.sort();
        values
    }

    #[tokio::test]
    async fn local_files_commit_with_checkpoints_and_fall_back_exactly() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        let mut sink = local_sink(&dir, 7);
        sink.restore(None).await.unwrap();
        write(&mut sink, &[1, 2]).await;
        let first = sink.snapshot(1).await.unwrap();
        assert_eq!(
            committed_values(&dir),
            Vec::<i64>::new(),
            "nothing visible before the commit"
        );
        sink.commit(1).await.unwrap();
        assert_eq!(committed_values(&dir), vec![1, 2]);
        write(&mut sink, &[3]).await;
        sink.snapshot(2).await.unwrap();
        sink.commit(2).await.unwrap();
        write(&mut sink, &[4]).await;
        sink.snapshot(3).await.unwrap(); // pre-committed, never completed
        assert_eq!(committed_values(&dir), vec![1, 2, 3]);

        // Crash; checkpoint 2 turns out corrupt, so recovery restores 1: the
        // file committed by 2 goes, the in-progress one of 3 is discarded,
        // and the replay of the rows after 1 writes them once more.
        let mut sink = local_sink(&dir, 7);
        sink.restore(Some((1, first))).await.unwrap();
        assert_eq!(committed_values(&dir), vec![1, 2]);
        write(&mut sink, &[3, 4]).await;
        sink.snapshot(4).await.unwrap();
        sink.commit(4).await.unwrap();
        assert_eq!(committed_values(&dir), vec![1, 2, 3, 4], "every row exactly once");
        let hidden = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with('.'))
            .count();
        assert_eq!(hidden, 0, "no in-progress file is left");

        // Another pipeline's files in the same directory are not touched.
        let mut other = local_sink(&dir, 8);
        other.restore(Some((1, TaskState::default()))).await.unwrap();
        assert_eq!(committed_values(&dir), vec![1, 2, 3, 4]);
    }

    #[tokio::test]
    async fn two_phase_files_are_hidden_until_finalized() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("out");
        let root = root.to_str().unwrap();
        let store = LocalStore::open(root).unwrap();
        let dir = format!("{root}/k=a");
        store
            .put_in_progress(&dir, "part-1.jsonl", Bytes::from_static(b"{}\n"))
            .await
            .unwrap();
        assert_eq!(store.committed(root).await.unwrap(), vec![]);
        assert_eq!(
            store.in_progress(root).await.unwrap(),
            vec![(dir.clone(), "part-1.jsonl".to_string())]
        );
        store.finalize(&dir, "part-1.jsonl").await.unwrap();
        store.finalize(&dir, "part-1.jsonl").await.unwrap(); // idempotent
        assert_eq!(store.in_progress(root).await.unwrap(), vec![]);
        assert_eq!(
            store.committed(root).await.unwrap(),
            vec![(dir.clone(), "part-1.jsonl".to_string())]
        );
        assert_eq!(std::fs::read(format!("{dir}/part-1.jsonl")).unwrap(), b"{}\n");
        // A rename of a file that is nowhere fails.
        assert!(store.finalize(&dir, "part-9.jsonl").await.is_err());

        store.put(root, "part-2.jsonl", Bytes::from_static(b"x")).await.unwrap();
        store.remove(&dir, "part-1.jsonl").await.unwrap();
        store.remove(&dir, "part-1.jsonl").await.unwrap(); // absent is fine
        store.put_in_progress(root, "part-3.jsonl", Bytes::new()).await.unwrap();
        store.discard(root, "part-3.jsonl").await.unwrap();
        assert_eq!(
            store.committed(root).await.unwrap(),
            vec![(root.to_string(), "part-2.jsonl".to_string())]
        );
        assert_eq!(store.in_progress(root).await.unwrap(), vec![]);
    }

    #[test]
    fn a_file_where_the_directory_should_be_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("out.jsonl");
        std::fs::write(&file, "old").unwrap();
        let e = LocalStore::open(file.to_str().unwrap()).err().unwrap().to_string();
        assert!(e.contains("is a file") && e.contains("directory"), "{e}");
    }
}
