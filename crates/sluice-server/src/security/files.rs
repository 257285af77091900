//! `--file-root`: every server file path a statement names (a `file`
//! sink's `path`) must resolve under one directory. The path is made
//! absolute against the root, its longest existing prefix is resolved
//! (symlinks followed, as the kernel would follow them), and what does not
//! exist yet may not contain `..`; the result must lie under the resolved
//! root. Checked before anything is created.

use sluice_types::{Error, Result, SqlCode};
use std::path::{Component, Path, PathBuf};

/// `path` resolved and checked to be under `root`; `42501` otherwise.
pub fn confine(root: &Path, path: &str) -> Result<PathBuf> {
    let refused = || {
        Error::user(
            SqlCode::InsufficientPrivilege,
            format!(
                "path \"{path}\" is outside the file root {}: file sinks may only write under it",
                root.display()
            ),
        )
    };
    let root = root
        .canonicalize()
        .map_err(|e| Error::external(format!("file root {}: {e}", root.display())))?;
    let joined = root.join(path);
    // Split into the longest prefix that exists and the rest.
    let mut existing = joined.as_path();
    let mut rest: Vec<Component<'_>> = Vec::new();
    let resolved_prefix = loop {
        match existing.canonicalize() {
            Ok(p) => break p,
            Err(_) => {
                let Some(parent) = existing.parent() else {
                    return Err(refused());
                };
                if let Some(last) = existing.components().next_back() {
                    rest.push(last);
                }
                existing = parent;
            }
        }
    };
    let mut resolved = resolved_prefix;
    for component in rest.into_iter().rev() {
        match component {
            Component::Normal(part) => resolved.push(part),
            Component::CurDir => {}
            _ => return Err(refused()),
        }
    }
    if resolved.starts_with(&root) {
        Ok(resolved)
    } else {
        Err(refused())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_under_the_root_pass_and_escapes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("out")).unwrap();
        let canonical = root.canonicalize().unwrap();
        assert_eq!(confine(&root, "out/x").unwrap(), canonical.join("out/x"));
        assert_eq!(confine(&root, "new/deeper").unwrap(), canonical.join("new/deeper"));
        let inside = canonical.join("abs").display().to_string();
        assert_eq!(confine(&root, &inside).unwrap(), canonical.join("abs"));
        for escape in ["../x", "out/../../x", "/tmp/elsewhere", "new/../../x"] {
            let err = confine(&root, escape).unwrap_err();
            assert_eq!(err.sqlstate(), "42501", "{escape}");
        }
        // A symlink inside the root pointing out of it does not escape.
        std::os::unix::fs::symlink(dir.path(), root.join("link")).unwrap();
        assert_eq!(confine(&root, "link/x").unwrap_err().sqlstate(), "42501");
        assert!(!dir.path().join("x").exists());
    }
}
