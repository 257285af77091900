//! A master's [`Durable`] part on disk: `quorum.json` in its data directory,
//! replaced atomically (a temporary file, fsync, rename, fsync of the
//! directory) before any message that depends on it leaves the process.
//!
//! A missing file is a new master. A file that cannot be read is an error,
//! never an empty state: a master that forgot its vote could vote twice in
//! one term and let two leaders be elected.

use crate::replica::Durable;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Where one master keeps its term, vote and replicated state.
pub struct DurableStore {
    path: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot read the quorum state {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error(
        "the quorum state {path} is corrupt ({source}); refusing to start with an empty one (move it away only if this master's peers hold the state)"
    )]
    Corrupt { path: PathBuf, source: serde_json::Error },
    #[error("cannot write the quorum state {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

impl DurableStore {
    pub fn new(data_dir: &Path) -> Self {
        DurableStore {
            path: data_dir.join("quorum.json"),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn load(&self) -> Result<Durable, StoreError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| StoreError::Corrupt {
                path: self.path.clone(),
                source,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Durable::default()),
            Err(source) => Err(StoreError::Read {
                path: self.path.clone(),
                source,
            }),
        }
    }

    pub fn save(&self, durable: &Durable) -> Result<(), StoreError> {
        let write = || -> std::io::Result<()> {
            let dir = self.path.parent().unwrap_or(Path::new("."));
            std::fs::create_dir_all(dir)?;
            let tmp = self.path.with_extension("json.tmp");
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(&serde_json::to_vec(durable).map_err(std::io::Error::other)?)?;
            file.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            std::fs::File::open(dir)?.sync_all()
        };
        write().map_err(|source| StoreError::Write {
            path: self.path.clone(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Stamp;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sluice-quorum-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_new_master_starts_empty_and_keeps_what_it_saved() {
        let d = dir("roundtrip");
        let store = DurableStore::new(&d);
        assert_eq!(store.load().unwrap(), Durable::default());
        let mut durable = Durable {
            term: 7,
            voted_for: Some("m2".into()),
            ..Default::default()
        };
        durable
            .state
            .write("stream/s", Some("{}".into()), Stamp { term: 7, seq: 1 });
        store.save(&durable).unwrap();
        assert_eq!(DurableStore::new(&d).load().unwrap(), durable);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_corrupt_file_is_an_error_not_an_empty_state() {
        let d = dir("corrupt");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("quorum.json"), b"{\"term\": 3, \"voted_for\"").unwrap();
        let err = DurableStore::new(&d).load().unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("refusing to start"), "{err}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
