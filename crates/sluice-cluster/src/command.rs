//! Catalog commands: every change a statement makes to the catalog, as a
//! value the master applies with [`Master::apply`](crate::Master::apply).
//!
//! Statement handlers (the SQL engine's `handler` modules) do the planning
//! and validation and produce one of these; the master only checks it
//! against the catalog (names taken, readers of a dropped stream) and
//! applies it. A command is plain data — serialisable, self-contained
//! (it carries its creation time; the master derives pipeline ids from its
//! own state), and deterministic to apply — so a master quorum can
//! replicate the sequence of commands and every replica ends with the same
//! catalog.

use crate::catalog::{CatalogState, PipelineKind};
use crate::security::{OwnershipEffect, SecurityCommand};
use serde::{Deserialize, Serialize};
use sluice_plan::PhysicalDag;
use sluice_plan::catalog::StreamDef;

/// One change to the catalog or to a pipeline's run state.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub enum CatalogCommand {
    /// `CREATE STREAM` over a connector.
    CreateStream { def: StreamDef, if_not_exists: bool },
    /// `CREATE SINK … AS` (`derived: None`) or `CREATE STREAM … AS`
    /// (`derived`: the stream its pipeline writes).
    CreatePipeline {
        name: String,
        kind: PipelineKind,
        /// The statement, as shown by `SHOW PIPELINES` and stored.
        sql: String,
        dag: PhysicalDag,
        derived: Option<StreamDef>,
        if_not_exists: bool,
        /// When the statement ran (epoch ms).
        created_ms: i64,
        /// A materialized view's query with the views it read written
        /// out ([`PipelineDef::expanded_query`](crate::catalog::PipelineDef)).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expanded_query: Option<String>,
    },
    /// `DROP STREAM`: a derived stream's pipeline goes with it.
    DropStream { name: String, if_exists: bool },
    /// `DROP PIPELINE` / `DROP SINK`. With `only: Some(kind)`, a pipeline of
    /// another kind is refused (`DROP SINK` on a derived stream).
    DropPipeline {
        name: String,
        if_exists: bool,
        only: Option<PipelineKind>,
    },
    /// `ALTER PIPELINE … PAUSE | RESUME`: run state, not persisted.
    SetPaused { name: String, paused: bool },
    /// `ALTER PIPELINE name AS …`, `… SET PARALLELISM n`, `… ALTER
    /// OPERATOR id SET PARALLELISM n`: a new version of a running
    /// pipeline. The master diffs `dag` against the running DAG
    /// (`sluice_plan::diff`), refuses what the diff or the catalog forbids,
    /// stops the running version at a barrier and starts this one from
    /// that barrier's snapshot.
    AlterPipeline {
        name: String,
        /// The new version's definition as `SHOW PIPELINES` shows it.
        sql: String,
        /// The statement that asked for it (the history shows it).
        statement: String,
        dag: PhysicalDag,
        /// A derived stream's definition with its new schema.
        derived: Option<StreamDef>,
        /// `WITH (state = 'reset')`: operators whose state changed shape
        /// start empty instead of the change being refused.
        reset_state: bool,
        /// `RESET SOURCE … TO TIMESTAMP`: every replaced operator
        /// downstream of the rewound source starts empty.
        #[serde(default)]
        rewind: bool,
        /// When the statement ran (epoch ms).
        changed_ms: i64,
    },
    /// Roles, grants and API tokens.
    Security(SecurityCommand),
    /// `command` run by `role`: what it creates is owned by `role`.
    AsRole { role: String, command: Box<CatalogCommand> },
}

/// What applying a command did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The catalog changed (or the pipeline's run state).
    Changed,
    /// Nothing to do: `IF NOT EXISTS` on an existing object, `IF EXISTS`
    /// on a missing one.
    Unchanged,
}

impl CatalogCommand {
    /// The object the command names.
    pub fn name(&self) -> &str {
        match self {
            CatalogCommand::CreateStream { def, .. } => &def.name,
            CatalogCommand::CreatePipeline { name, .. }
            | CatalogCommand::DropStream { name, .. }
            | CatalogCommand::DropPipeline { name, .. }
            | CatalogCommand::SetPaused { name, .. }
            | CatalogCommand::AlterPipeline { name, .. } => name,
            CatalogCommand::Security(command) => command.name(),
            CatalogCommand::AsRole { command, .. } => command.name(),
        }
    }

    /// What this command would do to owned objects if it changes the catalog
    /// (computed before it is applied: a drop's derived objects are known then).
    pub(crate) fn ownership_effect(&self, state: &CatalogState) -> Option<OwnershipEffect> {
        match self {
            CatalogCommand::CreateStream { def, .. } => Some(OwnershipEffect::CreatedStream(def.name.clone())),
            CatalogCommand::CreatePipeline { name, derived, .. } => Some(OwnershipEffect::CreatedPipeline {
                name: name.clone(),
                stream: derived.as_ref().map(|d| d.name.clone()),
            }),
            CatalogCommand::DropStream { name, .. } => Some(OwnershipEffect::Dropped {
                streams: vec![name.clone()],
                pipelines: state
                    .streams
                    .get(name)
                    .and_then(|s| s.pipeline.clone())
                    .into_iter()
                    .collect(),
            }),
            CatalogCommand::DropPipeline { name, .. } => Some(OwnershipEffect::Dropped {
                streams: state
                    .streams
                    .values()
                    .filter(|s| s.pipeline.as_deref() == Some(name))
                    .map(|s| s.name.clone())
                    .collect(),
                pipelines: vec![name.clone()],
            }),
            _ => None,
        }
    }
}
