//! The catalog: streams and pipelines, persisted as JSON in the data
//! directory (written to a temporary file, then renamed, so a crash never
//! leaves half a catalog).

use serde::{Deserialize, Serialize};
use sluice_plan::PhysicalDag;
use sluice_plan::catalog::StreamDef;
use sluice_plan::diff::{DiffLine, StateHandoff};
use sluice_types::{Error, PipelineId, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a pipeline writes.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum PipelineKind {
    /// `CREATE SINK`.
    Sink,
    /// `CREATE STREAM … AS`.
    DerivedStream,
    /// `CREATE MATERIALIZED VIEW`: its sink keeps the query's current
    /// result, which `SELECT … FROM name` reads.
    MaterializedView,
}

/// A named pipeline.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PipelineDef {
    pub name: String,
    pub id: PipelineId,
    pub kind: PipelineKind,
    /// The statement that created it.
    pub sql: String,
    pub dag: PhysicalDag,
    pub created_ms: i64,
    /// Versions before the current one, oldest first (`ALTER PIPELINE …
    /// AS | SET PARALLELISM` appends here; a pipeline created once has none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_versions: Vec<PipelineVersion>,
    /// When the current version replaced the previous one (None: version 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_ms: Option<i64>,
    /// The statement that made the current version (None: the CREATE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_by: Option<String>,
    /// How the current version differs from the previous one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diff: Vec<DiffLine>,
    /// Where the current version's operators find their state in the
    /// checkpoint the previous version stopped at (used when restoring
    /// from that checkpoint: a crash right after the switch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<StateHandoff>,
    /// Where its checkpoints go, fixed when it was created: its sink's
    /// `'checkpoint.dir'`, or the `--checkpoint-dir` of the master that
    /// created it. Every master of a quorum restores it from here, whatever
    /// its own `--checkpoint-dir` (None in catalogs older than this field:
    /// the master's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_location: Option<String>,
    /// A materialized view's query with the views it read written out
    /// (`sluice_sql::views`): what a pipeline built over this view
    /// computes. None when its query reads no view (then it is the
    /// statement's own query).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expanded_query: Option<String>,
}

/// One version of a pipeline: the SQL it ran, since when, and how it
/// differed from the version before it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PipelineVersion {
    /// 1 for the version created by `CREATE …`.
    pub version: u32,
    pub sql: String,
    /// When it started (epoch ms).
    pub created_ms: i64,
    /// The statement that made it (None: the CREATE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_by: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diff: Vec<DiffLine>,
}

impl PipelineDef {
    /// Every version, oldest first; the last is the one running.
    pub fn versions(&self) -> Vec<PipelineVersion> {
        let mut versions = self.earlier_versions.clone();
        versions.push(self.current_version());
        versions
    }

    /// The running version's number (1 for a pipeline never altered).
    pub fn version(&self) -> u32 {
        self.earlier_versions.last().map_or(1, |v| v.version + 1)
    }

    /// The running version.
    pub fn current_version(&self) -> PipelineVersion {
        PipelineVersion {
            version: self.version(),
            sql: self.sql.clone(),
            created_ms: self.changed_ms.unwrap_or(self.created_ms),
            changed_by: self.changed_by.clone(),
            diff: self.diff.clone(),
        }
    }

    /// Makes `sql` and `dag` the running version (reached from the
    /// current one by `diff`, its state handed over by `handoff`).
    pub fn push_version(
        &mut self,
        (sql, changed_by): (String, String),
        dag: PhysicalDag,
        diff: Vec<DiffLine>,
        handoff: StateHandoff,
        changed_ms: i64,
    ) {
        let current = self.current_version();
        self.earlier_versions.push(current);
        self.sql = sql;
        self.dag = dag;
        self.changed_ms = Some(changed_ms);
        self.changed_by = Some(changed_by);
        self.diff = diff;
        self.handoff = Some(handoff);
    }

    /// True when the pipeline reads `stream`.
    pub fn reads(&self, stream: &str) -> bool {
        self.dag
            .sources()
            .any(|s| matches!(&s.kind, sluice_plan::OperatorKind::Source(src) if src.stream == stream))
    }
}

/// Version of the on-disk catalog format.
const CATALOG_FORMAT_VERSION: u32 = 1;

/// Everything the catalog holds.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct CatalogState {
    #[serde(default)]
    pub format_version: u32,
    pub streams: BTreeMap<String, StreamDef>,
    pub pipelines: BTreeMap<String, PipelineDef>,
    /// Pipeline ids are never reused.
    pub next_pipeline_id: u64,
    /// Roles, grants, owners and API tokens (absent in older catalogs).
    #[serde(default)]
    pub security: crate::security::SecurityCatalog,
    /// With a master quorum: each pipeline's newest checkpoint the leader
    /// saw complete (by pipeline name). A master restoring a pipeline never
    /// starts it from an older one: that would write output twice.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub checkpoints: BTreeMap<String, u64>,
}

/// The catalog file of a data directory.
#[derive(Debug)]
pub struct CatalogStore {
    path: PathBuf,
}

impl CatalogStore {
    pub fn new(data_dir: &Path) -> Self {
        CatalogStore {
            path: data_dir.join("catalog.json"),
        }
    }

    /// Loads the catalog, or an empty one when none exists yet.
    pub fn load(&self) -> Result<CatalogState> {
        match std::fs::read(&self.path) {
            Ok(bytes) => {
                let mut state: CatalogState = serde_json::from_slice(&bytes)
                    .map_err(|e| Error::external(format!("catalog {} is unreadable: {e}", self.path.display())))?;
                // Pipelines stored before operator uids get them computed
                // from their lineage (stored ones are kept).
                for p in state.pipelines.values_mut() {
                    p.dag.fill_uids();
                }
                if state.format_version > CATALOG_FORMAT_VERSION {
                    return Err(Error::external(format!(
                        "catalog {} has format {} but this Sluice reads up to {CATALOG_FORMAT_VERSION}",
                        self.path.display(),
                        state.format_version
                    )));
                }
                Ok(state)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(CatalogState::default()),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes the catalog atomically.
    pub fn save(&self, state: &CatalogState) -> Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut state = state.clone();
        state.format_version = CATALOG_FORMAT_VERSION;
        let bytes = serde_json::to_vec_pretty(&state).map_err(|e| Error::internal(e.to_string()))?;
        let tmp = self.path.with_extension("json.tmp");
        std::fs::write(&tmp, bytes)?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    #[test]
    fn round_trips_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = CatalogStore::new(dir.path());
        assert!(store.load().unwrap().streams.is_empty());
        let mut state = CatalogState::default();
        state.streams.insert(
            "s".into(),
            StreamDef {
                name: "s".into(),
                schema: Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)])),
                event_time: None,
                connector: "memory".into(),
                options: Default::default(),
                pipeline: None,
                computed: Vec::new(),
            },
        );
        state.next_pipeline_id = 7;
        store.save(&state).unwrap();
        let back = store.load().unwrap();
        assert_eq!(back.streams, state.streams);
        assert_eq!(back.next_pipeline_id, 7);
    }

    #[test]
    fn a_corrupt_catalog_is_an_error_not_an_empty_catalog() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("catalog.json"), b"{not json").unwrap();
        assert!(CatalogStore::new(dir.path()).load().is_err());
    }
}
