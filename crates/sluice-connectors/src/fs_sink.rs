//! The file-system sink (`connector = 'hdfs'` or `'file'`): rolling
//! Parquet / JSON-lines / CSV files under `path`, optionally in
//! `col=value` directories, on a [`FileStore`] — HDFS (`crate::hdfs`) or
//! the local file system (`crate::local_files`; the connector picks the store).
//!
//! A finished file is written under a hidden in-progress name
//! (`.part-….inprogress`) and renamed to its final name only when it is
//! complete, so readers never see half a file. When the store fails (a
//! NameNode or DataNode down, a full disk), the sink keeps the file's
//! bytes, retries with backoff (reporting the condition) and goes on when
//! the store is back; only after `'retry.timeout'` does the pipeline fail.
//! With checkpoints the sink commits in two phases: in-progress files are
//! written at the barrier and renamed when the checkpoint completes.

use crate::options::{byte_size_option, duration_option};
use crate::rolling::{FileEncoding, FinishedFile, RollPolicy, RollingFiles};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use bytes::Bytes;
use sluice_dataflow::checkpoint::TaskState;
use sluice_dataflow::deploy::InstanceContext;
use sluice_dataflow::metrics::TaskMetrics;
use sluice_dataflow::{Operator, OperatorContext};
use sluice_types::{Error, Result, Watermark};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SIZE_DEFAULT: usize = 128 << 20;
const INTERVAL_DEFAULT: Duration = Duration::from_secs(60);
const RETRY_TIMEOUT_DEFAULT: Duration = Duration::from_secs(600);
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Where finished files go: HDFS or a local directory; the trait also lets
/// tests drive the retry logic with a store that fails on purpose.
#[async_trait]
pub trait FileStore: Send + Sync {
    /// Stores `bytes` as `dir/name`, visible only when complete.
    async fn put(&self, dir: &str, name: &str, bytes: Bytes) -> Result<()>;

    /// Two-phase commit, first phase: stores `bytes` as the hidden
    /// `dir/.name.inprogress` (overwriting).
    async fn put_in_progress(&self, dir: &str, name: &str, bytes: Bytes) -> Result<()> {
        let _ = (dir, name, bytes);
        Err(Error::unsupported("this file store has no two-phase commit"))
    }

    /// Second phase: renames `dir/.name.inprogress` to `dir/name`;
    /// idempotent (done when only the final file is there).
    async fn finalize(&self, dir: &str, name: &str) -> Result<()> {
        let _ = (dir, name);
        Err(Error::unsupported("this file store has no two-phase commit"))
    }

    /// In-progress files under `root` (recursively): (dir, final name).
    async fn in_progress(&self, root: &str) -> Result<Vec<(String, String)>> {
        let _ = root;
        Ok(Vec::new())
    }

    /// Deletes the in-progress file of `dir/name`.
    async fn discard(&self, dir: &str, name: &str) -> Result<()> {
        let _ = (dir, name);
        Ok(())
    }

    /// Visible (committed) files under `root` (recursively): (dir, name).
    async fn committed(&self, root: &str) -> Result<Vec<(String, String)>> {
        let _ = root;
        Ok(Vec::new())
    }

    /// Deletes the committed file `dir/name` (absent is fine).
    async fn remove(&self, dir: &str, name: &str) -> Result<()> {
        let _ = (dir, name);
        Err(Error::unsupported("this file store cannot remove files"))
    }
}

/// The tag a two-phase sink puts in its file names:
/// `part-<instance>-<start ms>-<sequence>-p<pipeline>-c<after>.<ext>`, where
/// `after` is the last checkpoint committed or restored when the file was
/// named. Recovery from checkpoint `r` removes this pipeline's committed
/// files with `after >= r` (written after `r`; the replay writes them
/// again).
fn checkpoint_tag(pipeline: u64, after: u64) -> String {
    format!("-p{pipeline}-c{after}")
}

/// `(pipeline, after)` of a two-phase sink's file name, if it has the tag.
pub fn parse_checkpoint_tag(name: &str) -> Option<(u64, u64)> {
    let stem = name.rsplit_once('.').map_or(name, |(s, _)| s);
    let (rest, after) = stem.rsplit_once("-c")?;
    let (_, pipeline) = rest.rsplit_once("-p")?;
    Some((pipeline.parse().ok()?, after.parse().ok()?))
}

/// The file systems the sink writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileSystem {
    Hdfs,
    Local,
}

/// The checked options of a file-system sink.
#[derive(Debug)]
pub struct FsSinkSettings {
    /// `hdfs://host:port` (HDFS only).
    pub url: String,
    pub path: String,
    pub policy: RollPolicy,
    pub retry_timeout: Duration,
}

impl FsSinkSettings {
    pub fn parse(fs: FileSystem, options: &BTreeMap<String, String>, schema: &SchemaRef) -> Result<Self> {
        let (url, path, default_format) = match fs {
            FileSystem::Hdfs => {
                let url = options
                    .get("url")
                    .filter(|u| u.starts_with("hdfs://") || u.starts_with("viewfs://"))
                    .ok_or_else(|| Error::invalid_option("the HDFS sink needs 'url' = 'hdfs://host:port'"))?
                    .clone();
                let path = options.get("path").filter(|p| p.starts_with('/')).ok_or_else(|| {
                    Error::invalid_option("the HDFS sink needs an absolute 'path' (e.g. '/sluice/out')")
                })?;
                (url, path, "parquet")
            }
            FileSystem::Local => {
                let path = options.get("path").filter(|p| !p.trim().is_empty()).ok_or_else(|| {
                    Error::invalid_option("the file sink needs 'path' (a directory, e.g. '/tmp/out')")
                })?;
                (String::new(), path, "json")
            }
        };
        let path = match path.trim_end_matches('/') {
            "" => "/".to_string(),
            p => p.to_string(),
        };
        let encoding = FileEncoding::parse(options.get("format").map(String::as_str).unwrap_or(default_format))?;
        let partition_by = match options.get("partition.by") {
            None => None,
            Some(col) => Some(schema.index_of(col.trim()).map_err(|_| {
                Error::invalid_option(format!("'partition.by' column \"{col}\" is not in the query's output"))
            })?),
        };
        match options.get("sink.delivery-guarantee").map(String::as_str) {
            None | Some("at-least-once") => {}
            // Two-phase commit whenever the pipeline checkpoints.
            Some("exactly-once") if crate::options::checkpoints_enabled(options)? => {}
            Some(other) => {
                return Err(Error::unsupported(format!(
                    "'sink.delivery-guarantee' = '{other}' is not supported here; use 'at-least-once' (files are committed exactly once whenever 'checkpoint.interval' is on)"
                )));
            }
        }
        let size_max = byte_size_option(options, "rollover.size")?
            .unwrap_or(SIZE_DEFAULT)
            .max(1);
        let interval = duration_option(options, "rollover.interval")?.unwrap_or(INTERVAL_DEFAULT);
        let retry_timeout = duration_option(options, "retry.timeout")?.unwrap_or(RETRY_TIMEOUT_DEFAULT);
        Ok(FsSinkSettings {
            url,
            path,
            policy: RollPolicy {
                encoding,
                size_max,
                interval: interval.max(Duration::from_millis(100)),
                partition_by,
            },
            retry_timeout,
        })
    }
}

/// One instance of a file-system sink.
pub struct RollingSink {
    store: Arc<dyn FileStore>,
    path: String,
    files: RollingFiles,
    encoding: FileEncoding,
    interval: Duration,
    retry_timeout: Duration,
    metrics: Arc<TaskMetrics>,
    /// File names: part-<instance>-<start ms>-<sequence>.<ext>, unique
    /// across instances and restarts.
    prefix: String,
    sequence: u64,
    /// Checkpointed pipeline: files stay in progress until the checkpoint
    /// after them completes.
    two_phase: bool,
    /// In-progress files of the current checkpoint: (dir, name).
    pending: Vec<(String, String)>,
    instance: u32,
    pipeline: u64,
    /// The last checkpoint committed or restored (in new file names).
    after: u64,
}

/// Checkpoint key of the in-progress files to rename on commit.
const PENDING_KEY: &str = "files.pending";

impl RollingSink {
    /// The sink on `store`, committing in two phases when `options`
    /// enable checkpoints.
    pub fn open(
        store: Arc<dyn FileStore>,
        s: FsSinkSettings,
        options: &BTreeMap<String, String>,
        schema: &SchemaRef,
        ctx: &InstanceContext,
    ) -> Result<Self> {
        let mut sink = Self::with_store(store, s, schema, ctx);
        sink.two_phase = crate::options::checkpoints_enabled(options)?;
        Ok(sink)
    }

    pub fn with_store(store: Arc<dyn FileStore>, s: FsSinkSettings, schema: &SchemaRef, ctx: &InstanceContext) -> Self {
        RollingSink {
            store,
            path: s.path,
            encoding: s.policy.encoding,
            interval: s.policy.interval,
            files: RollingFiles::new(schema.clone(), s.policy),
            retry_timeout: s.retry_timeout,
            metrics: ctx.metrics.clone(),
            prefix: format!("part-{:03}-{}", ctx.instance, sluice_types::now_ms()),
            sequence: 0,
            two_phase: false,
            pending: Vec::new(),
            instance: ctx.instance,
            pipeline: ctx.pipeline.0,
            after: 0,
        }
    }

    /// Stores finished files, retrying each until it is stored or the
    /// retry timeout passes (then the pipeline fails with the error).
    async fn store(&mut self, files: Vec<FinishedFile>) -> Result<()> {
        for file in files {
            let dir = match file.partition.as_str() {
                "" => self.path.clone(),
                p => format!("{}/{p}", self.path),
            };
            let tag = match self.two_phase {
                true => checkpoint_tag(self.pipeline, self.after),
                false => String::new(),
            };
            let name = format!(
                "{}-{:05}{tag}.{}",
                self.prefix,
                self.sequence,
                self.encoding.extension()
            );
            self.sequence += 1;
            let bytes = Bytes::from(file.bytes);
            let started = tokio::time::Instant::now();
            let mut backoff = BACKOFF_MIN;
            let mut attempt = 1u32;
            loop {
                let stored = if self.two_phase {
                    self.store.put_in_progress(&dir, &name, bytes.clone()).await
                } else {
                    self.store.put(&dir, &name, bytes.clone()).await
                };
                match stored {
                    Ok(()) => {
                        if attempt > 1 {
                            self.metrics.set_condition(None);
                        }
                        if self.two_phase {
                            self.pending.push((dir.clone(), name.clone()));
                        }
                        break;
                    }
                    Err(e) if started.elapsed() + backoff > self.retry_timeout => {
                        return Err(Error::external(format!(
                            "cannot write {dir}/{name} ({} rows) after {attempt} attempts in {:?}: {e}",
                            file.rows,
                            started.elapsed()
                        )));
                    }
                    Err(e) => {
                        tracing::warn!(file = %format!("{dir}/{name}"), attempt, error = %e, "file write failed; retrying");
                        self.metrics.set_condition(Some(format!(
                            "writing {dir}/{name} failed (attempt {attempt}): {e}; retrying"
                        )));
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(BACKOFF_MAX);
                        attempt += 1;
                    }
                }
            }
        }
        Ok(())
    }
}

impl RollingSink {
    /// Adds rows to the open files and stores those that became complete.
    pub async fn write_rows(&mut self, batch: &RecordBatch) -> Result<()> {
        let done = self.files.write(batch, Instant::now())?;
        self.store(done).await
    }

    /// Renames every pending in-progress file to its final name.
    async fn finalize_pending(&mut self) -> Result<()> {
        for (dir, name) in std::mem::take(&mut self.pending) {
            self.store.finalize(&dir, &name).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl Operator for RollingSink {
    fn commits_on_checkpoint(&self) -> bool {
        self.two_phase
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<TaskState> {
        let mut state = TaskState::default();
        if !self.two_phase {
            return Ok(state);
        }
        // Pre-commit: every open file becomes an in-progress file.
        let done = self.files.finish_all()?;
        self.store(done).await?;
        state.put_json(PENDING_KEY, &self.pending)?;
        Ok(state)
    }

    async fn commit(&mut self, checkpoint_id: u64) -> Result<()> {
        self.finalize_pending().await?;
        self.after = self.after.max(checkpoint_id);
        Ok(())
    }

    async fn restore(&mut self, checkpoint: Option<(u64, TaskState)>) -> Result<()> {
        if !self.two_phase {
            return Ok(());
        }
        let restored: Vec<(String, String)> = match &checkpoint {
            Some((_, state)) => state.json(PENDING_KEY)?.unwrap_or_default(),
            None => Vec::new(),
        };
        // Re-commit the restored checkpoint (idempotent) …
        self.pending = restored.clone();
        self.finalize_pending().await?;
        // … and drop what this instance wrote after it: uncommitted files,
        // and files committed by later checkpoints when those were lost
        // (the replay writes their rows again).
        let mine = format!("part-{:03}-", self.instance);
        let ours =
            |name: &str| name.starts_with(&mine) && parse_checkpoint_tag(name).is_none_or(|(p, _)| p == self.pipeline);
        for (dir, name) in self.store.in_progress(&self.path).await? {
            if ours(&name) && !restored.contains(&(dir.clone(), name.clone())) {
                tracing::info!(file = %format!("{dir}/{name}"), "discarding an uncommitted in-progress file");
                self.store.discard(&dir, &name).await?;
            }
        }
        let restored_id = checkpoint.as_ref().map_or(0, |(id, _)| *id);
        for (dir, name) in self.store.committed(&self.path).await? {
            let Some((pipeline, after)) = parse_checkpoint_tag(&name) else {
                continue;
            };
            if !name.starts_with(&mine) || pipeline != self.pipeline {
                continue;
            }
            if restored_id == 0 {
                // The sources start by their startup mode: what they replay
                // is not known, so nothing can be removed safely.
                tracing::error!(file = %format!("{dir}/{name}"), "no checkpoint could be restored although this pipeline committed files before; rows after its last checkpoint may be written again");
                break;
            }
            if after >= restored_id {
                tracing::warn!(file = %format!("{dir}/{name}"), checkpoint = restored_id, "removing a file committed after the restored checkpoint (its checkpoint was lost); the replay writes its rows again");
                self.store.remove(&dir, &name).await?;
            }
        }
        self.after = restored_id;
        Ok(())
    }

    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.write_rows(&batch).await
    }

    async fn process_watermark(&mut self, _w: Watermark, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        Ok(())
    }

    fn timer_interval(&self) -> Option<Duration> {
        Some((self.interval / 4).clamp(Duration::from_millis(50), Duration::from_secs(1)))
    }

    async fn process_timer(&mut self, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        let done = self.files.due(Instant::now())?;
        self.store(done).await
    }

    async fn process_end_of_input(&mut self, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        let done = self.files.finish_all()?;
        self.store(done).await?;
        // A clean end: nothing is replayed after it.
        self.finalize_pending().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use sluice_dataflow::metrics::TaskMetrics;
    use sluice_types::{OperatorId, PipelineId};
    use std::sync::Mutex;

    /// Fails the first `failures` puts, then keeps the files.
    struct FlakyStore {
        failures: Mutex<u32>,
        files: Mutex<Vec<(String, String, usize)>>,
    }

    #[async_trait]
    impl FileStore for FlakyStore {
        async fn put(&self, dir: &str, name: &str, bytes: Bytes) -> Result<()> {
            let mut f = self.failures.lock().unwrap();
            if *f > 0 {
                *f -= 1;
                return Err(Error::external("HDFS: connection refused"));
            }
            self.files.lock().unwrap().push((dir.into(), name.into(), bytes.len()));
            Ok(())
        }
    }

    fn setup(failures: u32, retry_timeout: &str) -> (RollingSink, Arc<FlakyStore>, RecordBatch, Arc<TaskMetrics>) {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let options: BTreeMap<String, String> = [
            ("url", "hdfs://localhost:9000"),
            ("path", "/out/"),
            ("format", "jsonl"),
            ("rollover.size", "1"),
            ("retry.timeout", retry_timeout),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let settings = FsSinkSettings::parse(FileSystem::Hdfs, &options, &schema).unwrap();
        let store = Arc::new(FlakyStore {
            failures: Mutex::new(failures),
            files: Mutex::new(Vec::new()),
        });
        let metrics = TaskMetrics::new(OperatorId(3), 0, "sink");
        let ctx = InstanceContext {
            pipeline: PipelineId(1),
            instance: 2,
            parallelism: 3,
            metrics: metrics.clone(),
        };
        let sink = RollingSink::with_store(store.clone(), settings, &schema, &ctx);
        let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1, 2, 3]))]).unwrap();
        (sink, store, batch, metrics)
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_store_is_retried_until_it_works() {
        let (mut sink, store, batch, metrics) = setup(3, "1min");
        let done = sink.files.write(&batch, Instant::now()).unwrap();
        assert_eq!(done.len(), 1, "rollover.size = 1 byte finishes the file at once");
        sink.store(done).await.unwrap();
        let files = store.files.lock().unwrap().clone();
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].0, "/out");
        assert!(
            files[0].1.starts_with("part-002-") && files[0].1.ends_with("-00000.jsonl"),
            "{}",
            files[0].1
        );
        assert_eq!(files[0].2, "{\"v\":1}\n{\"v\":2}\n{\"v\":3}\n".len());
        assert_eq!(metrics.condition(), None, "the condition clears after success");
    }

    #[tokio::test(start_paused = true)]
    async fn retries_stop_at_the_timeout_with_the_error() {
        let (mut sink, store, batch, _metrics) = setup(u32::MAX, "5s");
        let done = sink.files.write(&batch, Instant::now()).unwrap();
        let e = sink.store(done).await.unwrap_err().to_string();
        assert!(e.contains("connection refused") && e.contains("3 rows"), "{e}");
        assert!(store.files.lock().unwrap().is_empty());
    }

    #[test]
    fn file_names_carry_pipeline_and_checkpoint() {
        let name = format!("part-002-1700-00003{}.parquet", checkpoint_tag(7, 12));
        assert_eq!(name, "part-002-1700-00003-p7-c12.parquet");
        assert_eq!(parse_checkpoint_tag(&name), Some((7, 12)));
        assert_eq!(parse_checkpoint_tag("part-002-1700-00003.parquet"), None);
        assert_eq!(parse_checkpoint_tag("part-002-1700-00003-p7-cx.csv"), None);
        assert_eq!(parse_checkpoint_tag("notes.txt"), None);
    }

    #[test]
    fn options_are_checked() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let mut o: BTreeMap<String, String> = BTreeMap::new();
        o.insert("url".into(), "localhost:9000".into());
        assert!(
            FsSinkSettings::parse(FileSystem::Hdfs, &o, &schema)
                .unwrap_err()
                .to_string()
                .contains("url")
        );
        o.insert("url".into(), "hdfs://localhost:9000".into());
        o.insert("path".into(), "relative".into());
        assert!(FsSinkSettings::parse(FileSystem::Hdfs, &o, &schema).is_err());
        o.insert("path".into(), "/a".into());
        o.insert("partition.by".into(), "nope".into());
        assert!(
            FsSinkSettings::parse(FileSystem::Hdfs, &o, &schema)
                .unwrap_err()
                .to_string()
                .contains("nope")
        );
        o.insert("partition.by".into(), "v".into());
        o.insert("rollover.size".into(), "64MB".into());
        o.insert("rollover.interval".into(), "30s".into());
        let s = FsSinkSettings::parse(FileSystem::Hdfs, &o, &schema).unwrap();
        assert_eq!(s.policy.size_max, 64 << 20);
        assert_eq!(s.policy.interval, Duration::from_secs(30));
        assert_eq!(s.policy.encoding, FileEncoding::Parquet);
    }
}
