//! Privilege checks, made per statement against the catalog as it is then
//! (a GRANT or REVOKE takes effect on the next statement of every
//! session):
//!
//! - a query needs SELECT on every stream its plan reads, `INSERT` needs
//!   INSERT on its stream (owners and superusers hold both);
//! - `CREATE SINK` / `CREATE STREAM … AS` / `ALTER PIPELINE … AS` need
//!   SELECT on what their plan reads; DROP and ALTER of a pipeline or
//!   stream need ownership (or superuser);
//! - a pipeline that writes server files (a `file` sink, a local
//!   `checkpoint.dir`) needs superuser or membership in
//!   `pg_write_server_files`, and with `--file-root` its paths must
//!   resolve under that directory;
//! - role and token statements are the superuser's, except a role
//!   changing its own password and creating or dropping its own tokens.
//!
//! Everything refused is `42501` naming the object; a refused statement
//! changes nothing.

use crate::security::{files, principal};
use sluice_cluster::CatalogCommand;
use sluice_cluster::security::{Principal, Privilege, SecurityCommand, permission_denied};
use sluice_plan::{OperatorKind, PhysicalDag};
use sluice_types::Result;

use super::Engine;

/// The principal of `user` now (`28000` when the role was dropped).
pub(crate) fn who(engine: &Engine, user: &str) -> Result<Principal> {
    principal(&engine.master, user)
}

/// SELECT on every stream `dag` reads.
pub(crate) fn check_reads(engine: &Engine, who: &Principal, dag: &PhysicalDag) -> Result<()> {
    engine.master.with_security(|s| {
        dag.sources().try_for_each(|source| match &source.kind {
            OperatorKind::Source(src) => s.check(who, Privilege::Select, &src.stream),
            _ => Ok(()),
        })
    })
}

/// INSERT on `stream`.
pub(crate) fn check_insert(engine: &Engine, user: &str, stream: &str) -> Result<()> {
    let who = who(engine, user)?;
    engine
        .master
        .with_security(|s| s.check(&who, Privilege::Insert, stream))
}

/// Server files a DAG's sink writes: a `file` sink's `path` and a local
/// `checkpoint.dir`.
fn server_paths(dag: &PhysicalDag) -> Vec<&str> {
    let mut paths = Vec::new();
    for op in &dag.operators {
        if let OperatorKind::Sink(sink) = &op.kind {
            if sink.connector == "file"
                && let Some(path) = sink.options.get("path")
            {
                paths.push(path.as_str());
            }
            if let Some(dir) = sink.options.get("checkpoint.dir")
                && !dir.contains("://")
            {
                paths.push(dir.as_str());
            }
        }
    }
    paths
}

/// The file-writing rule for a DAG about to run as a pipeline.
fn check_files(engine: &Engine, who: &Principal, name: &str, dag: &PhysicalDag) -> Result<()> {
    let paths = server_paths(dag);
    if paths.is_empty() {
        return Ok(());
    }
    if !who.writes_server_files {
        return Err(sluice_types::Error::user(
            sluice_types::SqlCode::InsufficientPrivilege,
            format!(
                "permission denied to write server files for pipeline {name}: \
                 only superusers and members of pg_write_server_files may"
            ),
        ));
    }
    if let Some(root) = &engine.security.file_root {
        for path in paths {
            files::confine(root, path)?;
        }
    }
    Ok(())
}

fn owns_pipeline(engine: &Engine, who: &Principal, name: &str) -> Result<()> {
    if engine.master.with_security(|s| s.owns_pipeline(who, name)) {
        Ok(())
    } else {
        Err(permission_denied("pipeline", name))
    }
}

/// Whether `who` may run `command`.
pub(crate) fn check_command(engine: &Engine, who: &Principal, command: &CatalogCommand) -> Result<()> {
    match command {
        CatalogCommand::CreateStream { .. } => Ok(()),
        CatalogCommand::CreatePipeline { name, dag, .. } => {
            check_reads(engine, who, dag)?;
            check_files(engine, who, name, dag)
        }
        CatalogCommand::AlterPipeline { name, dag, .. } => {
            owns_pipeline(engine, who, name)?;
            check_reads(engine, who, dag)?;
            check_files(engine, who, name, dag)
        }
        CatalogCommand::DropPipeline { name, .. } | CatalogCommand::SetPaused { name, .. } => {
            if engine.master.pipeline(name).is_none() {
                return Ok(()); // the master reports it missing (or IF EXISTS)
            }
            owns_pipeline(engine, who, name)
        }
        CatalogCommand::DropStream { name, .. } => {
            if engine.master.stream(name).is_none() || engine.master.with_security(|s| s.owns_stream(who, name)) {
                Ok(())
            } else {
                Err(permission_denied("stream", name))
            }
        }
        CatalogCommand::Security(command) => check_security(who, command),
        CatalogCommand::AsRole { command, .. } => check_command(engine, who, command),
    }
}

/// Role and token statements: the superuser's, except a role's own
/// password (without changing its SUPERUSER attribute) and own tokens.
fn check_security(who: &Principal, command: &SecurityCommand) -> Result<()> {
    if who.superuser {
        return Ok(());
    }
    let own = match command {
        SecurityCommand::AlterRole {
            name, superuser: None, ..
        } => name == &who.name,
        SecurityCommand::CreateToken { user, .. } => user == &who.name,
        _ => false,
    };
    if own {
        return Ok(());
    }
    let (what, name) = match command {
        SecurityCommand::Grant { stream, .. } | SecurityCommand::Revoke { stream, .. } => ("stream", stream.as_str()),
        SecurityCommand::CreateToken { name, .. } | SecurityCommand::DropToken { name, .. } => ("token", name.as_str()),
        other => ("role", other.name()),
    };
    Err(permission_denied(what, name))
}
