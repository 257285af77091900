//! What an invocation measured so far: `partial.json` in a results
//! directory, replaced after each measured item, so that an invocation
//! failing or stopped late keeps what it measured before; the whole
//! result (`crate::report::write`) removes it.

use anyhow::Result;
use serde_json::Value;
use std::path::Path;

/// The file's name.
pub const PARTIAL: &str = "partial.json";

/// Writes (replaces) `dir/partial.json` with `so_far`.
pub fn write_partial(dir: &Path, so_far: &Value) -> Result<()> {
    let tmp = dir.join(format!("{PARTIAL}.tmp"));
    std::fs::write(&tmp, serde_json::to_string_pretty(so_far)?)?;
    std::fs::rename(&tmp, dir.join(PARTIAL))?;
    Ok(())
}

/// Removes `dir/partial.json`, if there is one.
pub fn remove(dir: &Path) -> Result<()> {
    match std::fs::remove_file(dir.join(PARTIAL)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}
