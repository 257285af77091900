//! Every connector of Sluice, by name: the one list the engine looks
//! connectors up in. Adding a connector is a file under `connector/` that
//! implements [`Connector`] and a line in [`CONNECTORS`].
//!
//! The "unknown connector" and "unknown option" messages come from here,
//! so they always list what is registered.

use crate::connector::{self, Connector};
use crate::options::{SINK_COMMON, SOURCE_COMMON};
use sluice_types::{Error, Result};
use std::collections::BTreeMap;

/// The registered connectors, in the order messages list them.
static CONNECTORS: &[&dyn Connector] = &[
    &connector::memory::Memory,
    &connector::nexmark::Nexmark,
    &connector::datagen::Datagen,
    &connector::file::FILE,
    &connector::blackhole::Blackhole,
    &connector::kafka::Kafka,
    &connector::hdfs::HDFS,
    &connector::client::Client,
    &connector::view::View,
];

/// Every registered connector.
pub fn all() -> &'static [&'static dyn Connector] {
    CONNECTORS
}

/// The connector named `name`, whatever it does (the runtime builds its
/// readers and sinks through this).
pub fn find(name: &str) -> Result<&'static dyn Connector> {
    lookup(name, "connector", |_| true)
}

/// A connector CREATE STREAM may name.
pub fn find_source(name: &str) -> Result<&'static dyn Connector> {
    lookup(name, "source connector", |c| c.source_options().is_some())
}

/// A connector CREATE SINK may name.
pub fn find_sink(name: &str) -> Result<&'static dyn Connector> {
    lookup(name, "sink connector", |c| c.sink_options().is_some())
}

fn lookup(name: &str, what: &str, fits: impl Fn(&dyn Connector) -> bool) -> Result<&'static dyn Connector> {
    let fitting: Vec<&'static dyn Connector> = CONNECTORS.iter().copied().filter(|c| fits(*c)).collect();
    if let Some(c) = fitting.iter().find(|c| c.name() == name) {
        return Ok(*c);
    }
    let known: Vec<&str> = fitting.iter().map(|c| c.name()).collect();
    Err(Error::unsupported(format!(
        "unknown {what} '{name}'; known: {}",
        known.join(", ")
    )))
}

/// Whether `INSERT INTO` appends to a stream of connector `name`.
pub fn accepts_insert(name: &str) -> bool {
    find(name).is_ok_and(|c| c.accepts_insert())
}

/// Whether a `name` source can change its parallelism (see
/// [`Connector::source_rescalable`]).
pub fn source_rescalable(name: &str) -> bool {
    find(name).is_ok_and(|c| c.source_rescalable())
}

/// The options of a `name` source rewound to `timestamp` (see
/// [`Connector::rewind_options`]).
pub fn rewind_options(spec: &sluice_plan::SourceSpec, timestamp: &str) -> Result<BTreeMap<String, String>> {
    find_source(&spec.connector)?.rewind_options(spec, timestamp)
}

/// Whether a `name` sink with `options` takes a changelog (see
/// [`Connector::sink_accepts_changelog`]).
pub fn sink_accepts_changelog(name: &str, options: &BTreeMap<String, String>) -> bool {
    find(name).is_ok_and(|c| c.sink_accepts_changelog(options))
}

/// How many instances can read a stream of connector `name` (`None`: any).
pub fn source_readers_max(name: &str) -> Option<usize> {
    find(name).ok().and_then(|c| c.source_readers_max())
}

/// Checks a stream's options (CREATE STREAM): the connector is a source,
/// it knows every key (else the error lists the known ones), and the
/// values are valid.
pub fn validate_source(name: &str, options: &BTreeMap<String, String>) -> Result<&'static dyn Connector> {
    let connector = find_source(name)?;
    let own = connector.source_options().expect("a source has source options");
    own.check(&format!("connector '{name}'"), SOURCE_COMMON, options)?;
    connector.check_source_options(options)?;
    crate::options::idle_timeout_ms(options)?;
    sluice_plan::AlignmentSetting::from_options(options).map_err(Error::invalid_option)?;
    Ok(connector)
}

/// Checks a sink's options (CREATE SINK), as [`validate_source`] does a
/// stream's.
pub fn validate_sink(name: &str, options: &BTreeMap<String, String>) -> Result<&'static dyn Connector> {
    let connector = find_sink(name)?;
    let own = connector.sink_options().expect("a sink has sink options");
    own.check(&format!("sink connector '{name}'"), SINK_COMMON, options)?;
    connector.check_sink_options(options)?;
    crate::options::checkpoint_interval(options)?;
    if let Some(dir) = options.get("checkpoint.dir") {
        crate::state_store::split_hdfs_location(dir)?;
    }
    Ok(connector)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// A connector registered twice, or under a name that is not a plain
    /// lower-case word, would make lookups ambiguous or unreachable.
    #[test]
    fn every_name_is_registered_once() {
        let mut seen = HashSet::new();
        for c in all() {
            let name = c.name();
            assert!(seen.insert(name), "connector '{name}' is registered twice");
            assert!(
                !name.is_empty() && name.chars().all(|ch| ch.is_ascii_lowercase() || ch == '-'),
                "connector name '{name}' is not a lower-case word"
            );
        }
        // The engine names these itself: memory streams are the default and
        // derived streams' sinks, client sinks feed sessions.
        for name in [
            "memory",
            "nexmark",
            "datagen",
            "kafka",
            "file",
            "hdfs",
            "blackhole",
            "client",
        ] {
            assert!(find(name).is_ok(), "connector '{name}' is not registered");
        }
        assert!(
            find_source("memory").is_ok(),
            "CREATE STREAM's default connector is no source"
        );
    }

    #[test]
    fn every_option_is_declared_once_with_a_doc() {
        let sets = all()
            .iter()
            .flat_map(|c| [("source", c.source_options()), ("sink", c.sink_options())].map(|(s, o)| (c.name(), s, o)));
        for (name, side, set) in sets {
            let Some(set) = set else { continue };
            let mut keys = HashSet::new();
            for o in set.keys.iter().chain(set.prefixes) {
                assert!(keys.insert(o.key), "{name} {side} option '{}' declared twice", o.key);
                assert!(!o.doc.trim().is_empty(), "{name} {side} option '{}' has no doc", o.key);
            }
            for p in set.prefixes {
                assert!(p.key.ends_with('.'), "{name} prefix '{}' does not end in '.'", p.key);
            }
        }
        for o in SOURCE_COMMON.iter().chain(SINK_COMMON) {
            assert!(!o.doc.trim().is_empty(), "common option '{}' has no doc", o.key);
        }
    }

    fn message(e: Result<&'static dyn Connector>) -> String {
        e.err().expect("an unknown name is an error").to_string()
    }

    /// The unknown-connector messages list every registered connector of
    /// the kind asked for, and only those.
    #[test]
    fn unknown_connector_messages_list_every_registered_one() {
        type Fits = fn(&dyn Connector) -> bool;
        let cases: [(Result<&'static dyn Connector>, Fits); 3] = [
            (find("carrier-pigeon"), |_| true),
            (find_source("carrier-pigeon"), |c| c.source_options().is_some()),
            (find_sink("carrier-pigeon"), |c| c.sink_options().is_some()),
        ];
        for (result, fits) in cases {
            let e = message(result);
            let (_, listed) = e.split_once("; known: ").expect(&e);
            let listed: Vec<&str> = listed.split(", ").collect();
            let expected: Vec<&str> = all().iter().filter(|c| fits(**c)).map(|c| c.name()).collect();
            assert_eq!(listed, expected, "{e}");
        }
        assert_eq!(
            message(find_source("x")),
            "unknown source connector 'x'; known: memory, nexmark, datagen, kafka"
        );
        assert_eq!(
            message(find_sink("x")),
            "unknown sink connector 'x'; known: file, blackhole, kafka, hdfs"
        );
    }

    fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn unknown_option_lists_the_known_ones() {
        let e = validate_source("nexmark", &options(&[("tabel", "bid")]))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("'tabel'") && e.contains("events.max") && e.contains("table"),
            "{e}"
        );
        let e = validate_sink("file", &options(&[("colour", "red")]))
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            e,
            "unknown option 'colour' for sink connector 'file'; known options: checkpoint.dir, checkpoint.interval, \
             connector, format, partition.by, path, placement, retry.timeout, rollover.interval, rollover.size, \
             sink.delivery-guarantee"
        );
    }

    /// `properties.*` and `fields.*` are declared by the connectors that
    /// take them, and listed as such; no other connector lets them pass.
    #[test]
    fn prefixes_pass_only_where_declared() {
        let kafka = [("topic", "t"), ("properties.bootstrap.servers", "b:9092")];
        assert!(validate_source("kafka", &options(&kafka)).is_ok());
        let e = validate_source("kafka", &options(&[("topic", "t"), ("properties.", "x")]))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("unknown option 'properties.'") && e.ends_with("properties.*"),
            "{e}"
        );
        assert!(validate_source("datagen", &options(&[("fields.a.kind", "random")])).is_ok());
        let e = validate_source("nexmark", &options(&[("table", "bid"), ("fields.a.kind", "random")]))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("unknown option 'fields.a.kind'"), "{e}");
        let e = validate_sink("blackhole", &options(&[("properties.x", "1")]))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("unknown option 'properties.x'"), "{e}");
    }

    #[test]
    fn the_engines_own_sinks_cannot_be_named_in_create_sink() {
        for name in ["memory", "client"] {
            assert!(find(name).is_ok());
            assert!(find_sink(name).is_err(), "{name}");
        }
        assert!(accepts_insert("memory") && !accepts_insert("nexmark") && !accepts_insert("nope"));
        assert_eq!(source_readers_max("memory"), Some(1));
        assert_eq!(source_readers_max("kafka"), None);
    }
}
