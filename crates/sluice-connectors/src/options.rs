//! Options every source or sink takes ([`SOURCE_COMMON`], [`SINK_COMMON`])
//! and typed access to option values. Each connector declares its own
//! options in its file under [`crate::connector`].

use sluice_types::{Error, Result};
use std::collections::BTreeMap;

/// One option of a connector: its key and a line saying what it does (for
/// error messages and docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionDoc {
    pub key: &'static str,
    pub doc: &'static str,
}

/// An [`OptionDoc`], written short in option tables.
pub const fn option(key: &'static str, doc: &'static str) -> OptionDoc {
    OptionDoc { key, doc }
}

/// The options of one side (source or sink) of a connector.
#[derive(Debug, Clone, Copy)]
pub struct OptionSet {
    /// Options with a fixed key.
    pub keys: &'static [OptionDoc],
    /// Families of options by key prefix (`properties.`, passed through to
    /// a client library; `fields.`, per-column settings): any key that
    /// starts with one and has more after it.
    pub prefixes: &'static [OptionDoc],
}

impl OptionSet {
    /// A set of fixed keys, no prefixes.
    pub const fn keys(keys: &'static [OptionDoc]) -> Self {
        OptionSet { keys, prefixes: &[] }
    }

    /// Whether `key` is one of these options.
    pub fn knows(&self, key: &str) -> bool {
        self.keys.iter().any(|o| o.key == key)
            || self
                .prefixes
                .iter()
                .any(|p| key.len() > p.key.len() && key.starts_with(p.key))
    }

    /// Rejects an option that neither `common` nor this set knows, listing
    /// the known ones: keys sorted, then the prefixes as `prefix*`. `kind`
    /// names what was created ("connector 'kafka'").
    pub fn check(&self, kind: &str, common: &[OptionDoc], options: &BTreeMap<String, String>) -> Result<()> {
        let Some(unknown) = options
            .keys()
            .find(|key| !self.knows(key) && !common.iter().any(|o| o.key == key.as_str()))
        else {
            return Ok(());
        };
        let mut known: Vec<String> = common.iter().chain(self.keys).map(|o| o.key.to_string()).collect();
        known.sort_unstable();
        known.dedup();
        known.extend(self.prefixes.iter().map(|p| format!("{}*", p.key)));
        Err(Error::invalid_option(format!(
            "unknown option '{unknown}' for {kind}; known options: {}",
            known.join(", ")
        )))
    }
}

/// Options every source accepts.
pub const SOURCE_COMMON: &[OptionDoc] = &[
    option("connector", "the connector's name (default: memory)"),
    option(
        "idle.timeout",
        "a partition without rows this long stops holding the watermark back (default 5s)",
    ),
    option(
        sluice_plan::ALIGNMENT_OPTION,
        "how far an instance's watermark may run ahead of its slowest sibling's ('off' or a duration)",
    ),
];

/// Options every sink accepts: its connector and the pipeline's checkpointing.
pub const SINK_COMMON: &[OptionDoc] = &[
    option("connector", "the connector's name"),
    option(
        "checkpoint.interval",
        "how often the pipeline checkpoints ('off' or a duration; default: SET checkpoint_interval)",
    ),
    CHECKPOINT_DIR,
    PLACEMENT,
];

/// `'checkpoint.dir'` of a pipeline's sink (or materialized view).
pub const CHECKPOINT_DIR: OptionDoc = option(
    "checkpoint.dir",
    "where its checkpoints go: a local directory or 'hdfs://host:port/path'",
);

/// `'placement'` of a pipeline's sink (or materialized view).
pub const PLACEMENT: OptionDoc = option(
    "placement",
    "in a cluster, the labels the workers running its tasks must have ('zone=a,disk=ssd')",
);

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

/// A duration option (`'30s'`, `'5min'`, `'500ms'`, or milliseconds).
pub fn duration_option(options: &BTreeMap<String, String>, key: &str) -> Result<Option<std::time::Duration>> {
    options
        .get(key)
        .map(|v| {
            sluice_types::parse_duration_ms(v)
                .map(std::time::Duration::from_millis)
                .ok_or_else(|| {
                    Error::invalid_option(format!(
                        "option '{key}' must be a duration like '30s' or '5min', got '{v}'"
                    ))
                })
        })
        .transpose()
}

/// A size option in bytes: `'128MB'`, `'1GB'`, `'64KB'`, `'1048576'` (binary units).
pub fn byte_size_option(options: &BTreeMap<String, String>, key: &str) -> Result<Option<usize>> {
    let Some(v) = options.get(key) else { return Ok(None) };
    let t = v.trim().to_ascii_uppercase();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        _ => 0,
    };
    match digits.parse::<u64>() {
        Ok(n) if scale > 0 => Ok(Some(n.saturating_mul(scale) as usize)),
        _ => Err(Error::invalid_option(format!(
            "option '{key}' must be a size like '128MB' or '1GB', got '{v}'"
        ))),
    }
}

/// `'checkpoint.interval'` of a pipeline's sink: `None` when checkpoints
/// are off (`'off'` or `0`), the default (10 s) when absent.
pub fn checkpoint_interval(options: &BTreeMap<String, String>) -> Result<Option<std::time::Duration>> {
    let Some(v) = options.get("checkpoint.interval") else {
        return Ok(Some(
            sluice_dataflow::checkpoint::coordinator::CHECKPOINT_INTERVAL_DEFAULT,
        ));
    };
    if v.trim().eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let ms = sluice_types::parse_duration_ms(v).ok_or_else(|| {
        Error::invalid_option(format!(
            "option 'checkpoint.interval' must be a duration like '10s' or 'off', got '{v}'"
        ))
    })?;
    Ok((ms > 0).then(|| std::time::Duration::from_millis(ms)))
}

/// Whether the pipeline of a sink with these options checkpoints.
pub fn checkpoints_enabled(options: &BTreeMap<String, String>) -> Result<bool> {
    checkpoint_interval(options).map(|i| i.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations() {
        let o: BTreeMap<String, String> = [("a", "128MB"), ("b", "2 gb"), ("c", "10"), ("d", "ten"), ("e", "5min")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(byte_size_option(&o, "a").unwrap(), Some(128 << 20));
        assert_eq!(byte_size_option(&o, "b").unwrap(), Some(2 << 30));
        assert_eq!(byte_size_option(&o, "c").unwrap(), Some(10));
        assert!(byte_size_option(&o, "d").is_err());
        assert_eq!(byte_size_option(&o, "zz").unwrap(), None);
        assert_eq!(
            duration_option(&o, "e").unwrap(),
            Some(std::time::Duration::from_secs(300))
        );
        assert!(duration_option(&o, "d").is_err());
    }
}
