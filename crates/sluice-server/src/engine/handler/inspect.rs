//! `SHOW STREAMS | PIPELINES | MATERIALIZED VIEWS | CHECKPOINTS FOR p | PIPELINE HISTORY p`,
//! `DESCRIBE stream`, `EXPLAIN query`, `EXPLAIN PIPELINE p`, `EXPLAIN ALTER
//! PIPELINE …`: rows about the catalog and the plans, formatted by
//! `super::super::show`.

use super::Ctx;
use crate::engine::Output;
use crate::engine::show;
use sluice_cluster::CatalogCommand;
use sluice_sql::statement::{PipelineChange, SluiceStatement};
use sluice_types::{Error, ObjectKind, Result};

/// Runs an inspection statement; `Err(statement)` hands back any other.
pub async fn handle(ctx: Ctx<'_>, statement: SluiceStatement) -> std::result::Result<Result<Output>, SluiceStatement> {
    let master = &ctx.engine.master;
    Ok(match statement {
        SluiceStatement::ShowStreams => show::streams(&master.streams()).output("SHOW"),
        SluiceStatement::ShowPipelines => show::pipelines(&master.pipelines()).output("SHOW"),
        SluiceStatement::ShowCluster => show::cluster(&cluster_rows(ctx.engine)).output("SHOW"),
        SluiceStatement::ShowMaterializedViews => {
            let views: Vec<show::ViewRow> = master
                .pipelines()
                .into_iter()
                .filter(|p| p.kind == "materialized view")
                .map(|p| show::ViewRow {
                    published: ctx.engine.data.views.get(&p.name),
                    name: p.name,
                    state: p.state,
                })
                .collect();
            show::materialized_views(&views).output("SHOW")
        }
        SluiceStatement::ShowCheckpoints(name) => match master.pipelines().into_iter().find(|p| p.name == name) {
            Some(info) => show::checkpoints(&info).output("SHOW"),
            None => Err(Error::not_found(ObjectKind::Pipeline, &name)),
        },
        SluiceStatement::Describe(name) => match master.stream(&name) {
            Some(def) => show::describe(&def).output("SHOW"),
            // A materialized view: the columns of its query.
            None => match ctx
                .catalog_snapshot()
                .view_relations
                .into_iter()
                .find(|v| v.name == name)
            {
                Some(view) => show::describe_columns(&view.schema).output("SHOW"),
                None => Err(Error::not_found(ObjectKind::Stream, &name)),
            },
        },
        SluiceStatement::Explain(q) => match ctx.explained(&q).await {
            Ok(dag) => show::explain(&dag).output("EXPLAIN"),
            Err(e) => Err(e),
        },
        SluiceStatement::ExplainPipeline(name) => match master.pipeline(&name) {
            Some(def) => show::explain(&def.dag).output("EXPLAIN"),
            None => Err(Error::not_found(ObjectKind::Pipeline, &name)),
        },
        SluiceStatement::ExplainAlter { name, change } => explain_alter(ctx, &name, &change).await,
        SluiceStatement::ShowPipelineHistory(name) => match master.pipeline(&name) {
            Some(def) => show::history(&def).output("SHOW"),
            None => Err(Error::not_found(ObjectKind::Pipeline, &name)),
        },
        other => return Err(other),
    })
}

/// `SHOW CLUSTER`'s rows: this master (with a quorum: its role, term,
/// leader and whether it has a quorum), the other masters as it sees them,
/// and the workers registered with it. The playground is one master and
/// its own worker.
fn cluster_rows(engine: &crate::engine::Engine) -> Vec<show::ClusterRow> {
    let Some(cluster) = engine.cluster.get() else {
        return vec![
            show::ClusterRow::master("master-0", "", "leader", "ok"),
            show::ClusterRow::worker(sluice_types::WorkerId::local().0.as_str(), "", "ok", "in process"),
        ];
    };
    let mut rows = Vec::new();
    match cluster.quorum() {
        None => rows.push(show::ClusterRow::master(
            cluster.master_id(),
            &cluster.control_address(),
            "leader",
            "ok",
        )),
        Some(node) => {
            let me = node.status();
            let mut row = show::ClusterRow::master(
                &me.id,
                &cluster.control_address(),
                &me.role.to_string(),
                if me.has_quorum { "ok" } else { "no quorum" },
            );
            row.term = Some(me.term as i64);
            row.leader = me.leader.clone();
            row.detail = format!(
                "this master; reachable: {}; state {} ({} entries)",
                if me.reachable.is_empty() {
                    "none".to_string()
                } else {
                    me.reachable.join(", ")
                },
                me.version,
                me.entries
            );
            rows.push(row);
            for (id, address) in node.peers() {
                let reachable = me.reachable.contains(id);
                let role = if me.leader.as_deref() == Some(id.as_str()) {
                    "leader"
                } else if reachable {
                    "follower"
                } else {
                    "unknown"
                };
                rows.push(show::ClusterRow::master(
                    id,
                    address,
                    role,
                    if reachable { "ok" } else { "unreachable" },
                ));
            }
        }
    }
    for w in cluster.workers() {
        let labels: Vec<String> = w.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let detail = format!(
            "slots {}/{}{}; heartbeat {} ms ago",
            w.used_slots,
            w.slots,
            if labels.is_empty() {
                String::new()
            } else {
                format!("; labels {}", labels.join(","))
            },
            w.heartbeat_age_ms
        );
        rows.push(show::ClusterRow::worker(&w.id, &w.data_address, &w.health, &detail));
    }
    // A follower has no worker of its own: it lists those the leader
    // recorded in the replicated state.
    if cluster.quorum().is_some_and(|q| !q.is_leader()) {
        for w in cluster.recorded_workers() {
            let labels: Vec<String> = w.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let detail = format!(
                "slots {}{}; as the leader recorded it",
                w.slots,
                if labels.is_empty() {
                    String::new()
                } else {
                    format!("; labels {}", labels.join(","))
                }
            );
            rows.push(show::ClusterRow::worker(&w.id, &w.data_address, "recorded", &detail));
        }
    }
    rows
}

/// `EXPLAIN ALTER PIPELINE …`: the new version planned as the ALTER
/// would plan it, and its diff against the running one; nothing applied.
async fn explain_alter(ctx: Ctx<'_>, name: &str, change: &PipelineChange) -> Result<Output> {
    let CatalogCommand::AlterPipeline {
        dag,
        derived,
        reset_state,
        rewind,
        ..
    } = super::ddl::alter_pipeline(ctx, name, change).await?
    else {
        return Err(Error::internal("ALTER PIPELINE planned into another command"));
    };
    let diff = ctx.engine.master.preview_alter(
        name,
        &dag,
        derived.as_ref(),
        sluice_cluster::master::policy(reset_state, rewind),
    )?;
    show::alter_diff(&diff).output("EXPLAIN")
}

/// The columns an inspection statement returns (for the extended
/// protocol's Describe); `None` for any other statement.
pub fn schema(statement: &SluiceStatement) -> Option<arrow::datatypes::SchemaRef> {
    let table = match statement {
        SluiceStatement::ShowStreams => "streams",
        SluiceStatement::ShowPipelines => "pipelines",
        SluiceStatement::ShowCluster => "cluster",
        SluiceStatement::ShowMaterializedViews => "materialized_views",
        SluiceStatement::ShowCheckpoints(_) => "checkpoints",
        SluiceStatement::Describe(_) => "describe",
        SluiceStatement::Explain(_) | SluiceStatement::ExplainPipeline(_) => "explain",
        SluiceStatement::ExplainAlter { .. } => "explain_alter",
        SluiceStatement::ShowPipelineHistory(_) => "history",
        _ => return None,
    };
    Some(show::schema_of(table))
}
