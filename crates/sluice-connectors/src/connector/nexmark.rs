//! `nexmark`: the Nexmark benchmark's generator ([`crate::nexmark`]) as a
//! source of one of its tables, paced by [`crate::nexmark_source`]. The
//! table fixes the stream's schema.

use super::{Connector, OptionSet, option};
use crate::data_plane::Connectors;
use crate::nexmark::nexmark_schema;
use crate::nexmark_source::{NexmarkReader, nexmark_config};
use arrow::datatypes::SchemaRef;
use sluice_dataflow::deploy::InstanceContext;
use sluice_dataflow::source::SourceReader;
use sluice_plan::SourceSpec;
use sluice_types::Result;
use std::collections::BTreeMap;

pub struct Nexmark;

static SOURCE_OPTIONS: OptionSet = OptionSet::keys(&[
    option("table", "'bid', 'auction' or 'person' (required)"),
    option(
        "events.per.second",
        "events a second over all instances; 0 (default) = as fast as possible",
    ),
    option(
        "events.max",
        "events over the three tables, then the stream ends (absent: unbounded)",
    ),
    option("seed", "the generator's random seed"),
    option(
        "event.rate",
        "events a second of event time (event n is n / rate s after base.time); default 10000, or the pace with base.time 'now'",
    ),
    option(
        "base.time",
        "epoch ms of event 0, or 'now': event time is wall-clock (latency runs)",
    ),
    option(
        "scan.startup.timestamp",
        "start at the first event at or after this event time ('2026-11-30 12:00:00' or epoch ms)",
    ),
]);

impl Connector for Nexmark {
    /// Instances split the event numbers; a new split goes on from the old
    /// instances' positions (`NexmarkReader::restore_rescaled`).
    fn source_rescalable(&self) -> bool {
        true
    }

    /// The first event at or after `timestamp` (event time is a function
    /// of the event number, so this is exact).
    fn rewind_options(&self, spec: &SourceSpec, timestamp: &str) -> Result<BTreeMap<String, String>> {
        let mut rewound = spec.options.clone();
        rewound.insert("scan.startup.timestamp".into(), timestamp.to_string());
        nexmark_config(&rewound)?;
        Ok(rewound)
    }

    fn name(&self) -> &'static str {
        "nexmark"
    }

    fn source_options(&self) -> Option<&'static OptionSet> {
        Some(&SOURCE_OPTIONS)
    }

    fn check_source_options(&self, options: &BTreeMap<String, String>) -> Result<()> {
        nexmark_config(options).map(|_| ())
    }

    fn fixed_schema(&self, options: &BTreeMap<String, String>) -> Result<Option<SchemaRef>> {
        Ok(Some(nexmark_schema(nexmark_config(options)?.table)))
    }

    fn source(
        &self,
        _connectors: &Connectors,
        spec: &SourceSpec,
        _schema: &SchemaRef,
        ctx: &InstanceContext,
    ) -> Result<Box<dyn SourceReader>> {
        let options = nexmark_config(&spec.options)?;
        Ok(Box::new(NexmarkReader::new(
            &options,
            ctx.instance,
            ctx.parallelism,
            &spec.unread,
        )))
    }
}
