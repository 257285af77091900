//! `datagen`: rows generated from Flink-style options ([`crate::datagen`]):
//! sequences, random numbers and strings per column, bounded or paced.

use super::{Connector, OptionSet, option};
use crate::data_plane::Connectors;
use crate::datagen::{DatagenConfig, DatagenReader, check_schema};
use arrow::datatypes::{Schema, SchemaRef};
use sluice_dataflow::deploy::InstanceContext;
use sluice_dataflow::source::SourceReader;
use sluice_plan::SourceSpec;
use sluice_types::Result;
use std::collections::BTreeMap;

pub struct Datagen;

static SOURCE_OPTIONS: OptionSet = OptionSet {
    keys: &[
        option(
            "number-of-rows",
            "rows over all instances, then the stream ends (absent: unbounded, or until a sequence ends)",
        ),
        option(
            "rows-per-second",
            "rows a second over all instances (default 10 000; 0 = as fast as possible)",
        ),
    ],
    prefixes: &[option(
        "fields.",
        "'fields.<column>.<kind|start|end|min|max|length>': how a column is generated",
    )],
};

impl Connector for Datagen {
    fn name(&self) -> &'static str {
        "datagen"
    }

    fn source_options(&self) -> Option<&'static OptionSet> {
        Some(&SOURCE_OPTIONS)
    }

    fn check_source_options(&self, options: &BTreeMap<String, String>) -> Result<()> {
        DatagenConfig::check_options(options)
    }

    /// The `fields.*` options must name columns, of types they can fill.
    fn check_stream_schema(&self, options: &BTreeMap<String, String>, columns: &Schema) -> Result<()> {
        check_schema(options, columns)
    }

    fn source(
        &self,
        _connectors: &Connectors,
        spec: &SourceSpec,
        schema: &SchemaRef,
        ctx: &InstanceContext,
    ) -> Result<Box<dyn SourceReader>> {
        let config = DatagenConfig::new(&spec.options, schema)?;
        Ok(Box::new(DatagenReader::new(config, ctx.instance, ctx.parallelism)))
    }
}
