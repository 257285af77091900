//! Connector options: which ones each connector knows, and typed access.

use sluice_types::{Error, Result};
use std::collections::BTreeMap;

/// Options every source accepts.
pub const SOURCE_COMMON: &[&str] = &["connector", "idle.timeout"];

/// The options a source connector knows, or an error naming the known connectors.
pub fn source_options(connector: &str) -> Result<&'static [&'static str]> {
    match connector {
        "memory" => Ok(&["scan.startup.mode", "memory.rows.max"]),
        "nexmark" => Ok(&["table", "events.per.second", "events.max", "seed", "base.time"]),
        other => Err(Error::unsupported(format!(
            "unknown source connector '{other}'; known: memory, nexmark"
        ))),
    }
}

/// The options a sink connector knows.
pub fn sink_options(connector: &str) -> Result<&'static [&'static str]> {
    match connector {
        "file" => Ok(&["connector", "path", "format"]),
        "blackhole" => Ok(&["connector"]),
        other => Err(Error::unsupported(format!(
            "unknown sink connector '{other}'; known: file, blackhole"
        ))),
    }
}

/// Rejects options the connector does not know, listing the known ones.
pub fn check_known(kind: &str, options: &BTreeMap<String, String>, known: &[&str], common: &[&str]) -> Result<()> {
    for key in options.keys() {
        if !known.contains(&key.as_str()) && !common.contains(&key.as_str()) {
            let mut all: Vec<&str> = common.iter().chain(known.iter()).copied().collect();
            all.sort_unstable();
            all.dedup();
            return Err(Error::invalid_option(format!(
                "unknown option '{key}' for {kind}; known options: {}",
                all.join(", ")
            )));
        }
    }
    Ok(())
}

/// A non-negative integer option.
pub fn u64_option(options: &BTreeMap<String, String>, key: &str) -> Result<Option<u64>> {
    options
        .get(key)
        .map(|v| {
            v.trim()
                .parse::<u64>()
                .map_err(|_| Error::invalid_option(format!("option '{key}' must be a non-negative integer, got '{v}'")))
        })
        .transpose()
}

/// `'idle.timeout'` in milliseconds (`'5s'`, `'500ms'` or a number of ms).
pub fn idle_timeout_ms(options: &BTreeMap<String, String>) -> Result<u64> {
    let Some(v) = options.get("idle.timeout") else {
        return Ok(sluice_plan::IDLE_TIMEOUT_MS_DEFAULT);
    };
    sluice_types::parse_duration_ms(v).ok_or_else(|| {
        Error::invalid_option(format!(
            "option 'idle.timeout' must be a duration like '5s' or '500ms', got '{v}'"
        ))
    })
}
