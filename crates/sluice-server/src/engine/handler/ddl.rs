//! DDL: `CREATE STREAM [AS]`, `CREATE SINK`, `DROP …`, `ALTER PIPELINE …
//! PAUSE | RESUME | AS … | SET PARALLELISM …`. Each statement is validated and planned here, in the
//! session, and becomes one [`CatalogCommand`]; the master only checks it
//! against the catalog and applies it ([`apply`]). The command is the unit
//! a master quorum replicates: everything it needs — the physical DAG, the
//! stream definition, the statement text, the time — is in it.

use super::{Ctx, command};
use crate::engine::Output;
use sluice_cluster::catalog::PipelineKind;
use sluice_cluster::{Applied, CatalogCommand};
use sluice_plan::OperatorKind;
use sluice_plan::catalog::{EventTime, StreamDef};
use sluice_sql::create::stream_def;
use sluice_sql::planner::sink_spec;
use sluice_sql::statement::{CreateStream, DropKind, PipelineChange, SluiceStatement};
use sluice_types::{Error, ObjectKind, OperatorId, Result, SqlCode, now_ms};
use std::collections::BTreeMap;

/// The catalog command a DDL statement stands for; `None` for any
/// statement that is not DDL.
pub async fn command_for(ctx: Ctx<'_>, statement: &SluiceStatement) -> Result<Option<CatalogCommand>> {
    let command = match statement {
        SluiceStatement::CreateStream(c) => create_stream(c)?,
        SluiceStatement::CreateStreamAs {
            name,
            if_not_exists,
            query,
        } => create_stream_as(ctx, name, *if_not_exists, query).await?,
        SluiceStatement::CreateSink {
            name,
            if_not_exists,
            options,
            query,
        } => create_sink(ctx, name, *if_not_exists, options.clone(), query).await?,
        SluiceStatement::CreateMaterializedView {
            name,
            if_not_exists,
            options,
            query,
        } => create_materialized_view(ctx, name, *if_not_exists, options.clone(), query).await?,
        SluiceStatement::Drop { kind, name, if_exists } => {
            let (name, if_exists) = (name.clone(), *if_exists);
            match kind {
                DropKind::Stream => CatalogCommand::DropStream { name, if_exists },
                DropKind::Sink => CatalogCommand::DropPipeline {
                    name,
                    if_exists,
                    only: Some(PipelineKind::Sink),
                },
                DropKind::Pipeline => CatalogCommand::DropPipeline {
                    name,
                    if_exists,
                    only: None,
                },
                DropKind::MaterializedView => CatalogCommand::DropPipeline {
                    name,
                    if_exists,
                    only: Some(PipelineKind::MaterializedView),
                },
            }
        }
        SluiceStatement::AlterPipelinePause { name, paused } => CatalogCommand::SetPaused {
            name: name.clone(),
            paused: *paused,
        },
        SluiceStatement::AlterPipeline { name, change } => alter_pipeline(ctx, name, change).await?,
        _ => return Ok(None),
    };
    Ok(Some(command))
}

/// The command tag a client sees for `command`.
pub fn tag(command: &CatalogCommand) -> &'static str {
    match command {
        CatalogCommand::CreateStream { .. } => "CREATE STREAM",
        CatalogCommand::CreatePipeline { kind, .. } => match kind {
            PipelineKind::Sink => "CREATE SINK",
            PipelineKind::DerivedStream => "CREATE STREAM",
            PipelineKind::MaterializedView => "CREATE MATERIALIZED VIEW",
        },
        CatalogCommand::DropStream { .. } => "DROP STREAM",
        CatalogCommand::DropPipeline { only, .. } => match only {
            Some(PipelineKind::Sink) => "DROP SINK",
            Some(PipelineKind::MaterializedView) => "DROP MATERIALIZED VIEW",
            _ => "DROP PIPELINE",
        },
        CatalogCommand::SetPaused { .. } | CatalogCommand::AlterPipeline { .. } => "ALTER PIPELINE",
        CatalogCommand::AsRole { command, .. } => tag(command),
        CatalogCommand::Security(_) => "SECURITY",
    }
}

/// Has the master apply `command`. A new sink's or view's statement
/// returns once its pipeline's first deployment was attempted (a
/// checkpointed one restores first), so a failure to start shows in `SHOW
/// PIPELINES` at once. A dropped view's rows are forgotten.
pub async fn apply(ctx: Ctx<'_>, cmd: CatalogCommand) -> Result<Output> {
    let tag = tag(&cmd);
    let started = match &cmd {
        CatalogCommand::CreatePipeline {
            name,
            kind: PipelineKind::Sink | PipelineKind::MaterializedView,
            ..
        }
        | CatalogCommand::AlterPipeline { name, .. } => Some(name.clone()),
        _ => None,
    };
    let dropped_view = match &cmd {
        CatalogCommand::DropPipeline { name, .. } => ctx
            .engine
            .master
            .pipeline(name)
            .filter(|p| p.kind == PipelineKind::MaterializedView)
            .map(|p| p.name),
        _ => None,
    };
    let cmd = CatalogCommand::AsRole {
        role: ctx.user.to_string(),
        command: Box::new(cmd),
    };
    let applied = ctx.engine.master.apply(cmd).await?;
    if let (Some(name), Applied::Changed) = (started, applied) {
        ctx.engine.master.wait_started(&name).await;
    }
    if let (Some(name), Applied::Changed) = (dropped_view, applied) {
        ctx.engine.data.views.forget(&name);
    }
    Ok(command(tag))
}

/// `CREATE STREAM name (…) WITH (connector = …)`: the definition, with the
/// connector's own rules (fixed schemas, metadata columns, schema checks).
/// A memory stream's log is made where it is first used (an INSERT, a
/// reader), with the stream's options.
fn create_stream(c: &CreateStream) -> Result<CatalogCommand> {
    let name = c.options.get("connector").map_or("memory", String::as_str);
    let connector = sluice_connectors::registry::validate_source(name, &c.options)?;
    let fixed = connector.fixed_schema(&c.options)?;
    let def = stream_def(c, connector.name(), fixed, connector.metadata_columns())?;
    let columns = sluice_plan::without_computed(&def.schema, &def.computed);
    connector.check_stream_schema(&def.options, &columns)?;
    connector.check_stream(&def)?;
    Ok(CatalogCommand::CreateStream {
        def,
        if_not_exists: c.if_not_exists,
    })
}

/// `CREATE STREAM name AS query`: a pipeline writing a memory log, and the
/// stream that reads it.
async fn create_stream_as(
    ctx: Ctx<'_>,
    name: &str,
    if_not_exists: bool,
    query: &sqlparser::ast::Query,
) -> Result<CatalogCommand> {
    let (sql, dag, def) = plan_derived_stream(ctx, name, query).await?;
    Ok(CatalogCommand::CreatePipeline {
        name: name.to_string(),
        kind: PipelineKind::DerivedStream,
        sql,
        dag,
        derived: Some(def),
        if_not_exists,
        created_ms: now_ms(),
        expanded_query: None,
    })
}

/// A derived stream's pipeline: its statement as stored, its DAG and the
/// stream's definition.
async fn plan_derived_stream(
    ctx: Ctx<'_>,
    name: &str,
    query: &sqlparser::ast::Query,
) -> Result<(String, sluice_plan::PhysicalDag, StreamDef)> {
    let sink = sink_spec(
        "memory",
        BTreeMap::from([
            ("stream".to_string(), name.to_string()),
            // Memory logs live in memory only; derived streams do not
            // checkpoint (yet).
            ("checkpoint.interval".to_string(), "off".to_string()),
        ]),
    );
    let (planned, _) = ctx.plan_pipeline(query, sink).await?;
    let event_time = planned.event_time_column.filter(|c| {
        matches!(
            planned.schema.field(*c).data_type(),
            arrow::datatypes::DataType::Timestamp(_, _)
        )
    });
    let def = StreamDef {
        name: name.to_string(),
        schema: planned.schema.clone(),
        event_time: event_time.map(|column| EventTime {
            column,
            delay_ms: 0,
            from_upstream: true,
        }),
        connector: "memory".into(),
        options: BTreeMap::new(),
        pipeline: Some(name.to_string()),
        computed: Vec::new(),
    };
    Ok((format!("CREATE STREAM {name} AS {query}"), planned.dag, def))
}

/// `CREATE SINK name WITH (connector = …) AS query`. The session's
/// `checkpoint_interval` is written into the options when they do not say.
async fn create_sink(
    ctx: Ctx<'_>,
    name: &str,
    if_not_exists: bool,
    mut options: BTreeMap<String, String>,
    query: &sqlparser::ast::Query,
) -> Result<CatalogCommand> {
    let connector = options.get("connector").cloned().ok_or_else(|| {
        Error::invalid_option("CREATE SINK needs WITH (connector = 'kafka' | 'hdfs' | 'file' | 'blackhole', …)")
    })?;
    options
        .entry("checkpoint.interval".to_string())
        .or_insert(ctx.settings.get("checkpoint_interval")?);
    let (sql, dag) = plan_sink(ctx, name, &connector, options, query).await?;
    Ok(new_pipeline(name, PipelineKind::Sink, sql, dag, if_not_exists))
}

/// The command creating pipeline `name` (not a derived stream's), now.
fn new_pipeline(
    name: &str,
    kind: PipelineKind,
    sql: String,
    dag: sluice_plan::PhysicalDag,
    if_not_exists: bool,
) -> CatalogCommand {
    CatalogCommand::CreatePipeline {
        name: name.to_string(),
        kind,
        sql,
        dag,
        derived: None,
        if_not_exists,
        created_ms: now_ms(),
        expanded_query: None,
    }
}

/// `CREATE MATERIALIZED VIEW name [WITH (…)] AS query`: a pipeline whose
/// `view` sink keeps the query's current result (see
/// `sluice_connectors::connector::view`). A view checkpoints every second
/// unless it says otherwise, as its rows are published at checkpoints.
async fn create_materialized_view(
    ctx: Ctx<'_>,
    name: &str,
    if_not_exists: bool,
    mut options: BTreeMap<String, String>,
    query: &sqlparser::ast::Query,
) -> Result<CatalogCommand> {
    use sluice_connectors::connector::view;
    view::validate(&options)?;
    options
        .entry("checkpoint.interval".to_string())
        .or_insert_with(|| view::VIEW_CHECKPOINT_INTERVAL_DEFAULT.to_string());
    let sql = format!("CREATE MATERIALIZED VIEW {name} WITH ({}) AS {query}", listed(&options));
    options.insert(view::VIEW_NAME_OPTION.to_string(), name.to_string());
    let (planned, expanded) = ctx.plan_pipeline(query, sink_spec("view", options)).await?;
    let mut command = new_pipeline(name, PipelineKind::MaterializedView, sql, planned.dag, if_not_exists);
    if let CatalogCommand::CreatePipeline { expanded_query, .. } = &mut command {
        // What a pipeline built over this view will compute.
        *expanded_query = expanded.map(|q| q.to_string());
    }
    Ok(command)
}

/// Options as a statement lists them: `'key' = 'value', …`.
fn listed(options: &BTreeMap<String, String>) -> String {
    let listed: Vec<String> = options
        .iter()
        .map(|(k, v)| format!("'{k}' = '{}'", v.replace('\'', "''")))
        .collect();
    listed.join(", ")
}

/// A sink's pipeline: its statement as stored (every option listed) and
/// its DAG, the sink's output checked by its connector.
async fn plan_sink(
    ctx: Ctx<'_>,
    name: &str,
    connector: &str,
    options: BTreeMap<String, String>,
    query: &sqlparser::ast::Query,
) -> Result<(String, sluice_plan::PhysicalDag)> {
    let sink = sluice_connectors::registry::validate_sink(connector, &options)?;
    let sql = format!("CREATE SINK {name} WITH ({}) AS {query}", listed(&options));
    let (planned, _) = ctx.plan_pipeline(query, sink_spec(connector, options.clone())).await?;
    sink.check_sink_output(&options, &planned.schema)?;
    Ok((sql, planned.dag))
}

/// `ALTER PIPELINE name AS … | SET PARALLELISM n | ALTER OPERATOR id SET
/// PARALLELISM n`: the new version, planned here (a sink keeps its
/// connector and options, a derived stream stays a derived stream); the
/// master diffs and applies it.
pub async fn alter_pipeline(ctx: Ctx<'_>, name: &str, change: &PipelineChange) -> Result<CatalogCommand> {
    let def = ctx
        .engine
        .master
        .pipeline(name)
        .ok_or_else(|| Error::not_found(ObjectKind::Pipeline, name))?;
    let (sql, dag, derived, reset_state, statement) = match change {
        PipelineChange::Query { query, reset_state } => {
            let (sql, dag, derived) = match def.kind {
                PipelineKind::Sink => {
                    let sink = def
                        .dag
                        .operators
                        .iter()
                        .find_map(|o| match &o.kind {
                            OperatorKind::Sink(s) => Some(s.clone()),
                            _ => None,
                        })
                        .ok_or_else(|| Error::internal(format!("pipeline {name} has no sink")))?;
                    let (sql, dag) = plan_sink(ctx, name, &sink.connector, sink.options, query).await?;
                    (sql, dag, None)
                }
                PipelineKind::DerivedStream => {
                    let (sql, dag, def) = plan_derived_stream(ctx, name, query).await?;
                    (sql, dag, Some(def))
                }
                // The sink of a new query would start empty while the
                // operators it kept went on from their state: rows they
                // emitted before would be missing from the view.
                PipelineKind::MaterializedView => {
                    return Err(Error::unsupported(format!(
                        "ALTER PIPELINE … AS does not change a materialized view's query; DROP MATERIALIZED VIEW {name} and create it again (SET PARALLELISM and RESET SOURCE work)"
                    )));
                }
            };
            let with = if *reset_state { " WITH (state = 'reset')" } else { "" };
            let statement = format!("ALTER PIPELINE {name} AS {query}{with}");
            (sql, dag, derived, *reset_state, statement)
        }
        PipelineChange::Parallelism { operator, parallelism } => {
            let rescalable = |s: &sluice_plan::SourceSpec| sluice_connectors::registry::source_rescalable(&s.connector);
            let dag = sluice_plan::diff::set_parallelism(&def.dag, operator.map(OperatorId), *parallelism, &rescalable)
                .map_err(|e| Error::user(SqlCode::InvalidParameterValue, e))?;
            let statement = match operator {
                Some(op) => format!("ALTER PIPELINE {name} ALTER OPERATOR {op} SET PARALLELISM {parallelism}"),
                None => format!("ALTER PIPELINE {name} SET PARALLELISM {parallelism}"),
            };
            (def.sql.clone(), dag, None, false, statement)
        }
        PipelineChange::ResetSource { stream, timestamp } => {
            let mut dag = def.dag.clone();
            let mut found = false;
            for op in &mut dag.operators {
                if let OperatorKind::Source(s) = &mut op.kind
                    && s.stream == *stream
                {
                    s.options = sluice_connectors::registry::rewind_options(s, timestamp)?;
                    found = true;
                }
            }
            if !found {
                return Err(Error::user(
                    SqlCode::UndefinedObject,
                    format!("pipeline \"{name}\" does not read stream \"{stream}\""),
                ));
            }
            // The rewound source is another operator: its uid and those
            // downstream of it change.
            dag.assign_uids();
            let statement = format!(
                "ALTER PIPELINE {name} RESET SOURCE {stream} TO TIMESTAMP '{}'",
                timestamp.replace('\'', "''")
            );
            (def.sql.clone(), dag, None, true, statement)
        }
    };
    let rewind = matches!(change, PipelineChange::ResetSource { .. });
    Ok(CatalogCommand::AlterPipeline {
        name: name.to_string(),
        sql,
        statement,
        dag,
        derived,
        reset_state,
        rewind,
        changed_ms: now_ms(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::settings::Settings;
    use crate::engine::test_support::engine;
    use sluice_sql::statement::parse_statements;

    /// Every DDL statement becomes a command that survives serialisation,
    /// and applying the decoded commands to a second, empty master gives
    /// it the same catalog as the first (same definitions, pipeline ids,
    /// times and DAGs): what a master quorum replicating commands relies on.
    /// Two masters, each with its catalog: statements planned on the
    /// first, their commands applied to both.
    pub(super) struct TwoMasters {
        pub first: std::sync::Arc<crate::engine::Engine>,
        pub second: std::sync::Arc<crate::engine::Engine>,
        settings: Settings,
        _dirs: [crate::engine::test_support::TempDir; 2],
    }

    impl TwoMasters {
        pub fn new(label: &str) -> Self {
            let (first, one) = engine(&format!("{label}-first"));
            let (second, two) = engine(&format!("{label}-second"));
            TwoMasters {
                first,
                second,
                settings: Settings::default(),
                _dirs: [one, two],
            }
        }

        pub fn ctx(&self) -> Ctx<'_> {
            Ctx {
                engine: &self.first,
                settings: &self.settings,
                user: "sluice",
            }
        }

        /// Plans `sql` on the first master, checks its command survives
        /// serialisation, applies it to both and, as `apply` does for a new
        /// pipeline, waits for its first deployment on both (PAUSE needs it
        /// running). The command and what each master did with it.
        pub async fn replay(&self, sql: &str) -> (CatalogCommand, Applied, Applied) {
            let statement = parse_statements(sql).unwrap().pop().unwrap();
            let cmd = command_for(self.ctx(), &statement)
                .await
                .unwrap()
                .expect("DDL has a command");
            let decoded: CatalogCommand = serde_json::from_str(&serde_json::to_string(&cmd).unwrap()).unwrap();
            assert_eq!(decoded, cmd, "{sql}");
            let name = cmd.name().to_string();
            let here = self.first.master.apply(cmd.clone()).await.unwrap();
            let there = self.second.master.apply(decoded).await.unwrap();
            self.first.master.wait_started(&name).await;
            self.second.master.wait_started(&name).await;
            (cmd, here, there)
        }
    }

    #[tokio::test]
    async fn ddl_commands_serialise_and_replay_to_the_same_catalog() {
        let masters = TwoMasters::new("ddl");
        let (first, second, ctx) = (masters.first.clone(), masters.second.clone(), masters.ctx());
        let script = [
            "CREATE STREAM clicks (user_id BIGINT, page TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)",
            "CREATE STREAM IF NOT EXISTS clicks (x BIGINT)",
            "CREATE STREAM big_users AS SELECT user_id, ts FROM clicks WHERE user_id > 10",
            "CREATE SINK counts WITH (connector = 'blackhole') AS SELECT user_id, count(*) AS n FROM TUMBLE(clicks, ts, INTERVAL '1' MINUTE) GROUP BY user_id, window_start, window_end",
            "ALTER PIPELINE counts PAUSE",
            "ALTER PIPELINE counts SET PARALLELISM 2",
            "ALTER PIPELINE big_users AS SELECT user_id, ts FROM clicks WHERE user_id > 20",
            "DROP SINK IF EXISTS nothing_here",
            "CREATE SINK doomed WITH (connector = 'blackhole') AS SELECT page FROM clicks",
            "DROP PIPELINE doomed",
        ];
        let mut tags = Vec::new();
        for sql in script {
            let (cmd, here, there) = masters.replay(sql).await;
            tags.push(tag(&cmd));
            assert_eq!(here, there, "{sql}");
        }
        assert_eq!(
            tags,
            [
                "CREATE STREAM",
                "CREATE STREAM",
                "CREATE STREAM",
                "CREATE SINK",
                "ALTER PIPELINE",
                "ALTER PIPELINE",
                "ALTER PIPELINE",
                "DROP SINK",
                "CREATE SINK",
                "DROP PIPELINE"
            ]
        );
        let names = |e: &crate::engine::Engine| {
            (
                e.master.streams().into_iter().map(|s| s.name).collect::<Vec<_>>(),
                e.master.pipelines().into_iter().map(|p| p.name).collect::<Vec<_>>(),
            )
        };
        assert_eq!(
            names(&first),
            (
                vec!["big_users".to_string(), "clicks".to_string()],
                vec!["big_users".to_string(), "counts".to_string()]
            )
        );
        assert_eq!(first.master.streams(), second.master.streams());
        // Equal but for where each master keeps checkpoints (its own
        // `--checkpoint-dir`, recorded by the master that applied the CREATE).
        let without_location = |e: &crate::engine::Engine, name: &str| {
            e.master.pipeline(name).map(|p| sluice_cluster::catalog::PipelineDef {
                checkpoint_location: None,
                ..p
            })
        };
        for name in ["big_users", "counts"] {
            assert_ne!(
                first.master.pipeline(name).unwrap().checkpoint_location,
                second.master.pipeline(name).unwrap().checkpoint_location
            );
            assert_eq!(
                without_location(&first, name),
                without_location(&second, name),
                "{name}"
            );
            assert_eq!(
                first.master.pipeline(name).unwrap().version(),
                2,
                "{name} was altered once"
            );
        }
        // The DDL rules travel with the command: DROP SINK of a derived
        // stream's pipeline is refused by whichever master applies it.
        let statement = parse_statements("DROP SINK big_users").unwrap().pop().unwrap();
        let cmd = command_for(ctx, &statement).await.unwrap().unwrap();
        let refused = second.master.apply(cmd).await.unwrap_err();
        assert!(refused.to_string().contains("use DROP STREAM big_users"), "{refused}");
        // Statements that are not DDL have no command.
        let statement = parse_statements("SELECT 1").unwrap().pop().unwrap();
        assert!(command_for(ctx, &statement).await.unwrap().is_none());
    }
}

#[cfg(test)]
mod views_over_views {
    use super::tests::TwoMasters;
    use super::*;
    use sluice_sql::statement::parse_statements;

    /// A view built over a view stores the query it computes, with the view
    /// it read written out; the command carries it to every master, and a
    /// view over that one writes it out in turn (the stored query, not the
    /// first view's current definition, which is gone by then).
    #[tokio::test]
    async fn a_views_written_out_query_is_stored_replicated_and_built_on() {
        let masters = TwoMasters::new("nested");
        let (first, second, ctx) = (masters.first.clone(), masters.second.clone(), masters.ctx());
        let script = [
            "CREATE STREAM clicks (user_id BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)",
            "CREATE MATERIALIZED VIEW per_user AS SELECT user_id, count(*) AS n FROM clicks GROUP BY user_id",
            "CREATE MATERIALIZED VIEW busy AS SELECT user_id, n FROM per_user WHERE n > 5",
            "DROP MATERIALIZED VIEW per_user",
            "CREATE MATERIALIZED VIEW busiest AS SELECT max(n) AS n FROM busy",
        ];
        for sql in script {
            masters.replay(sql).await;
        }
        let per_user = "(SELECT user_id, count(*) AS n FROM clicks GROUP BY user_id) AS \"per_user\"";
        let busy = first.master.pipeline("busy").unwrap();
        assert_eq!(
            busy.expanded_query.as_deref(),
            Some(format!("SELECT user_id, n FROM {per_user} WHERE n > 5").as_str())
        );
        // The statement as the user wrote it is what SHOW PIPELINES shows.
        assert!(
            busy.sql.ends_with("AS SELECT user_id, n FROM per_user WHERE n > 5"),
            "{}",
            busy.sql
        );
        let busiest = first.master.pipeline("busiest").unwrap();
        assert_eq!(
            busiest.expanded_query.as_deref(),
            Some(
                format!("SELECT max(n) AS n FROM (SELECT user_id, n FROM {per_user} WHERE n > 5) AS \"busy\"").as_str()
            )
        );
        for name in ["busy", "busiest"] {
            let here = first.master.pipeline(name).unwrap();
            assert_eq!(
                second.master.pipeline(name).unwrap().expanded_query,
                here.expanded_query
            );
            let stored: sluice_cluster::catalog::PipelineDef =
                serde_json::from_str(&serde_json::to_string(&here).unwrap()).unwrap();
            assert_eq!(stored, here, "{name} as the catalog file keeps it");
        }
        // A view over streams only stores nothing more than its statement.
        let statement = parse_statements("CREATE MATERIALIZED VIEW plain AS SELECT user_id FROM clicks")
            .unwrap()
            .pop()
            .unwrap();
        let Some(CatalogCommand::CreatePipeline { expanded_query, .. }) = command_for(ctx, &statement).await.unwrap()
        else {
            panic!("CREATE MATERIALIZED VIEW has a CreatePipeline command");
        };
        assert_eq!(expanded_query, None);
    }
}

#[cfg(test)]
mod one_change_at_a_time {
    use super::*;
    use crate::engine::settings::Settings;
    use crate::engine::test_support::engine;
    use sluice_sql::statement::parse_statements;
    use sluice_types::SqlCode;

    /// While an ALTER of a pipeline is in flight (stopping it at its
    /// barrier), a second ALTER or a DROP of it is refused with `55006`;
    /// the first goes through, and afterwards the pipeline can be changed
    /// again. (`join!` polls the first ALTER up to its wait for the
    /// barrier before it polls the others.)
    #[tokio::test]
    async fn a_second_alter_or_a_drop_during_an_alter_is_refused() {
        let (e, _dir) = engine("one-change");
        let settings = Settings::default();
        let ctx = Ctx {
            engine: &e,
            settings: &settings,
            user: "sluice",
        };
        let command = |sql: &'static str| async move {
            let statement = parse_statements(sql).unwrap().pop().unwrap();
            command_for(ctx, &statement).await.unwrap().unwrap()
        };
        for sql in [
            "CREATE STREAM clicks (user_id BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)",
            "CREATE SINK counts WITH (connector = 'blackhole') AS SELECT user_id, count(*) AS n FROM TUMBLE(clicks, ts, INTERVAL '1' MINUTE) GROUP BY user_id, window_start, window_end",
        ] {
            apply(ctx, command(sql).await).await.unwrap();
        }
        let first = command("ALTER PIPELINE counts SET PARALLELISM 2").await;
        let second = command("ALTER PIPELINE counts SET PARALLELISM 3").await;
        let drop = command("DROP SINK counts").await;
        let (first, second, drop) = tokio::join!(e.master.apply(first), e.master.apply(second), e.master.apply(drop));
        assert_eq!(first.unwrap(), Applied::Changed);
        for refused in [second, drop] {
            let err = refused.unwrap_err();
            assert!(
                matches!(
                    &err,
                    Error::User {
                        code: SqlCode::ObjectInUse,
                        ..
                    }
                ),
                "{err}"
            );
            assert!(err.to_string().contains("being changed by"), "{err}");
        }
        assert_eq!(e.master.pipeline("counts").unwrap().version(), 2);
        let again = command("ALTER PIPELINE counts SET PARALLELISM 3").await;
        assert_eq!(e.master.apply(again).await.unwrap(), Applied::Changed);
        assert_eq!(e.master.pipeline("counts").unwrap().version(), 3);
    }
}
