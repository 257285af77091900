//! Session settings: Sluice's own and the Postgres ones clients send.

use sluice_types::{Error, Result, SqlCode};
use std::collections::BTreeMap;

/// Largest parallelism a session may ask for.
pub const PARALLELISM_MAX: u32 = 64;

/// Sluice's settings: (name, default, description).
const SLUICE_SETTINGS: &[(&str, &str, &str)] = &[
    (
        "parallelism",
        "1",
        "instances per operator for new queries and pipelines",
    ),
    (
        "join_state_ttl",
        "none",
        "how long an unwindowed stream join keeps a row ('1h', '30s', …; none = only windowed joins)",
    ),
    (
        "join_state_rows_max",
        "10000000",
        "rows one join instance may hold over both inputs",
    ),
    (
        "state_ttl",
        "none",
        "how long an aggregate without a window or a top-N keeps a group not updated ('1h', …; none = forever)",
    ),
    (
        "aggregate_groups_max",
        "1000000",
        "groups one instance of an aggregate without a window may hold",
    ),
    (
        "distinct_split_buckets",
        "0",
        "buckets an aggregate without a window splits its DISTINCT values over (0 = not split)",
    ),
    (
        "window_groups_max",
        "1000000",
        "open window groups one instance of a window aggregate may hold",
    ),
    (
        "checkpoint_interval",
        "10s",
        "time between checkpoints of new pipelines",
    ),
];

/// Postgres settings accepted so drivers and tools connect: (name, default).
const POSTGRES_SETTINGS: &[(&str, &str)] = &[
    ("application_name", ""),
    ("bytea_output", "hex"),
    ("client_encoding", "UTF8"),
    ("client_min_messages", "notice"),
    ("datestyle", "ISO, MDY"),
    ("default_transaction_isolation", "read committed"),
    ("default_transaction_read_only", "off"),
    ("extra_float_digits", "1"),
    ("idle_in_transaction_session_timeout", "0"),
    ("intervalstyle", "postgres"),
    ("lc_messages", "C"),
    ("lc_monetary", "C"),
    ("lc_numeric", "C"),
    ("lc_time", "C"),
    ("lock_timeout", "0"),
    ("search_path", "\"$user\", public"),
    ("server_encoding", "UTF8"),
    ("server_version", "15.0"),
    ("server_version_num", "150000"),
    ("standard_conforming_strings", "on"),
    ("statement_timeout", "0"),
    ("timezone", "UTC"),
    ("transaction_isolation", "read committed"),
    ("transaction_read_only", "off"),
    ("integer_datetimes", "on"),
    ("is_superuser", "on"),
    ("jit", "off"),
    ("max_identifier_length", "63"),
];

/// A session's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    values: BTreeMap<String, String>,
}

impl Default for Settings {
    fn default() -> Self {
        let mut values = BTreeMap::new();
        for (name, default, _) in SLUICE_SETTINGS {
            values.insert(name.to_string(), default.to_string());
        }
        for (name, default) in POSTGRES_SETTINGS {
            values.insert(name.to_string(), default.to_string());
        }
        Settings { values }
    }
}

fn unknown(name: &str) -> Error {
    Error::user(
        SqlCode::UndefinedObject,
        format!("unrecognized configuration parameter \"{name}\""),
    )
}

impl Settings {
    /// Sets `name` (case-insensitive) after checking the value.
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let name = name.to_ascii_lowercase();
        let name = if name == "time zone" {
            "timezone".to_string()
        } else {
            name
        };
        if !self.values.contains_key(&name) {
            return Err(unknown(&name));
        }
        let value = match name.as_str() {
            "parallelism" => {
                let n: u32 = value
                    .trim()
                    .parse()
                    .ok()
                    .filter(|n| (1..=PARALLELISM_MAX).contains(n))
                    .ok_or_else(|| {
                        Error::user(
                            SqlCode::InvalidParameterValue,
                            format!("parallelism must be an integer from 1 to {PARALLELISM_MAX}, got '{value}'"),
                        )
                    })?;
                n.to_string()
            }
            "checkpoint_interval" if value.trim().eq_ignore_ascii_case("off") => "off".to_string(),
            "checkpoint_interval" => {
                sluice_types::parse_duration_ms(value)
                    .filter(|ms| *ms > 0)
                    .ok_or_else(|| {
                        Error::user(
                            SqlCode::InvalidParameterValue,
                            format!("checkpoint_interval must be a duration such as '10s', or 'off', got '{value}'"),
                        )
                    })?;
                value.to_string()
            }
            "join_state_ttl" | "state_ttl" => {
                let v = value.trim();
                if !v.eq_ignore_ascii_case("none") && sluice_types::parse_duration_ms(v).filter(|ms| *ms > 0).is_none()
                {
                    return Err(Error::user(
                        SqlCode::InvalidParameterValue,
                        format!("{name} must be a duration such as '1h' or 'none', got '{value}'"),
                    ));
                }
                v.to_ascii_lowercase()
            }
            "join_state_rows_max" | "aggregate_groups_max" | "window_groups_max" => {
                let n: u64 = value.trim().parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                    Error::user(
                        SqlCode::InvalidParameterValue,
                        format!("{name} must be a positive integer, got '{value}'"),
                    )
                })?;
                n.to_string()
            }
            "distinct_split_buckets" => {
                let max = sluice_functions::SPLIT_BUCKETS_MAX;
                let n: i64 = value
                    .trim()
                    .parse()
                    .ok()
                    .filter(|n| (0..=max).contains(n))
                    .ok_or_else(|| {
                        Error::user(
                            SqlCode::InvalidParameterValue,
                            format!(
                                "distinct_split_buckets must be an integer from 0 (not split) to {max}, got '{value}'"
                            ),
                        )
                    })?;
                n.to_string()
            }
            "server_version" | "server_version_num" | "server_encoding" | "integer_datetimes" => {
                return Err(Error::user(
                    SqlCode::CantChangeRuntimeParam,
                    format!("parameter \"{name}\" cannot be changed"),
                ));
            }
            _ => value.to_string(),
        };
        self.values.insert(name, value);
        Ok(())
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Result<String> {
        let name = name.to_ascii_lowercase();
        self.values.get(&name).cloned().ok_or_else(|| unknown(&name))
    }

    /// `join_state_ttl` in milliseconds (None: `none`).
    pub fn join_state_ttl_ms(&self) -> Option<i64> {
        self.values
            .get("join_state_ttl")
            .and_then(|v| sluice_types::parse_duration_ms(v))
            .map(|ms| ms as i64)
    }

    /// `state_ttl` in milliseconds (None: `none`).
    pub fn state_ttl_ms(&self) -> Option<i64> {
        self.values
            .get("state_ttl")
            .and_then(|v| sluice_types::parse_duration_ms(v))
            .map(|ms| ms as i64)
    }

    /// `join_state_rows_max`.
    pub fn join_state_rows_max(&self) -> usize {
        self.values
            .get("join_state_rows_max")
            .and_then(|v| v.parse().ok())
            .unwrap_or(10_000_000)
    }

    /// `aggregate_groups_max`.
    pub fn aggregate_groups_max(&self) -> usize {
        self.values
            .get("aggregate_groups_max")
            .and_then(|v| v.parse().ok())
            .unwrap_or(sluice_sql::planner::AGGREGATE_GROUPS_MAX_DEFAULT)
    }

    /// `window_groups_max`.
    pub fn window_groups_max(&self) -> usize {
        self.values
            .get("window_groups_max")
            .and_then(|v| v.parse().ok())
            .unwrap_or(sluice_sql::planner::WINDOW_GROUPS_MAX_DEFAULT)
    }

    /// `distinct_split_buckets` (0: not split).
    pub fn distinct_split_buckets(&self) -> u32 {
        self.values
            .get("distinct_split_buckets")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    pub fn parallelism(&self) -> u32 {
        self.values.get("parallelism").and_then(|v| v.parse().ok()).unwrap_or(1)
    }

    /// (name, value, description) of every setting.
    pub fn all(&self) -> Vec<(String, String, String)> {
        self.values
            .iter()
            .map(|(k, v)| {
                let desc = SLUICE_SETTINGS
                    .iter()
                    .find(|(n, _, _)| n == k)
                    .map(|(_, _, d)| *d)
                    .unwrap_or("PostgreSQL client setting");
                (k.clone(), v.clone(), desc.to_string())
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_unknown_and_checked_values() {
        let mut s = Settings::default();
        s.set("PARALLELISM", "4").unwrap();
        assert_eq!(s.parallelism(), 4);
        assert_eq!(s.set("parallelism", "0").unwrap_err().sqlstate(), "22023");
        assert_eq!(s.set("parallelism", "65").unwrap_err().sqlstate(), "22023");
        assert_eq!(s.set("no_such_thing", "1").unwrap_err().sqlstate(), "42704");
        s.set("application_name", "psql").unwrap();
        assert_eq!(s.get("application_name").unwrap(), "psql");
        assert_eq!(s.get("nope").unwrap_err().sqlstate(), "42704");
    }
}
