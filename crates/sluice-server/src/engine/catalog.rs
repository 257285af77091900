//! The master's catalog as the planner sees it.

use sluice_cluster::Master;
use sluice_plan::catalog::StreamDef;
use sluice_sql::planner::StreamCatalog;

pub struct MasterCatalog<'a>(pub &'a Master);

impl StreamCatalog for MasterCatalog<'_> {
    fn stream(&self, name: &str) -> Option<StreamDef> {
        self.0.stream(name)
    }

    fn source_readers_max(&self, def: &StreamDef) -> Option<usize> {
        sluice_connectors::registry::source_readers_max(&def.connector)
    }

    fn sink_accepts_changelog(&self, connector: &str, options: &std::collections::BTreeMap<String, String>) -> bool {
        sluice_connectors::registry::sink_accepts_changelog(connector, options)
    }
}
