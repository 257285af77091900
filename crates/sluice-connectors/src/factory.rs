//! The [`ConnectorFactory`] of this process: builds readers and sink
//! operators by looking their connector up in the [`crate::registry`].

pub use crate::data_plane::{ClientSinks, Connectors};
use arrow::datatypes::SchemaRef;
use sluice_dataflow::Operator;
use sluice_dataflow::deploy::{ConnectorFactory, InstanceContext};
use sluice_dataflow::source::SourceReader;
use sluice_plan::{SinkSpec, SourceSpec};
use sluice_types::Result;

impl ConnectorFactory for Connectors {
    fn source(&self, spec: &SourceSpec, schema: &SchemaRef, ctx: &InstanceContext) -> Result<Box<dyn SourceReader>> {
        crate::registry::find(&spec.connector)?.source(self, spec, schema, ctx)
    }

    fn sink(&self, spec: &SinkSpec, schema: &SchemaRef, ctx: &InstanceContext) -> Result<Box<dyn Operator>> {
        crate::registry::find(&spec.connector)?.sink(self, spec, schema, ctx)
    }
}
