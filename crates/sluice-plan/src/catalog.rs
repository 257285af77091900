//! Catalog entries shared by the planner (which reads them) and the master
//! (which owns and persists them).

use crate::{ComputedColumn, WatermarkSpec};
use arrow_schema::SchemaRef;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Field metadata key of a column that `SELECT *` leaves out: a
/// connector's metadata column (Kafka's `_kafka_offset`, …) that the user
/// did not declare. It can still be selected by name.
pub const HIDDEN_COLUMN: &str = "sluice.hidden";

/// Whether a column is hidden from `SELECT *`.
pub fn is_hidden(field: &arrow_schema::Field) -> bool {
    field.metadata().get(HIDDEN_COLUMN).is_some_and(|v| v == "true")
}

/// How a stream's event time advances.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EventTime {
    /// Index of the event-time column.
    pub column: usize,
    /// Watermark = max event time − delay (declared streams).
    pub delay_ms: i64,
    /// A derived stream: watermarks come from its pipeline, in its log.
    pub from_upstream: bool,
}

/// A stream: its schema, event time and connector.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StreamDef {
    pub name: String,
    pub schema: SchemaRef,
    pub event_time: Option<EventTime>,
    pub connector: String,
    /// `WITH (…)` options, keys lower-cased.
    pub options: BTreeMap<String, String>,
    /// The pipeline that writes this stream (derived streams).
    pub pipeline: Option<String>,
    /// Computed columns (`name AS expr`), evaluated by the source.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub computed: Vec<ComputedColumn>,
}

impl StreamDef {
    /// The source-side watermark spec (none for derived streams, whose
    /// watermarks travel in their log).
    pub fn watermark_spec(&self) -> Option<WatermarkSpec> {
        self.event_time
            .as_ref()
            .filter(|e| !e.from_upstream)
            .map(|e| WatermarkSpec {
                column: e.column,
                delay_ms: e.delay_ms,
            })
    }
}
