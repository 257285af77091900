//! Role, privilege and token statements: each becomes one
//! [`CatalogCommand::Security`] (passwords turned into SCRAM verifiers
//! here, so clear text never reaches the catalog, the command log or a
//! replica), checked by `authorize` and applied by the master.
//! `CREATE TOKEN` returns the token's secret as its one row: it is shown
//! once, and only its SHA-256 is stored.

use super::{Ctx, command};
use crate::engine::Output;
use crate::engine::authorize;
use crate::engine::show::Table;
use crate::security::password;
use sluice_cluster::CatalogCommand;
use sluice_cluster::security::{Privilege, SecurityCommand, permission_denied};
use sluice_sql::security_statement::{GrantedPrivilege, SecurityStatement};
use sluice_types::{Error, Result, SqlCode, now_ms};

fn privileges(granted: Vec<GrantedPrivilege>) -> Vec<Privilege> {
    granted
        .into_iter()
        .map(|p| match p {
            GrantedPrivilege::Select => Privilege::Select,
            GrantedPrivilege::Insert => Privilege::Insert,
        })
        .collect()
}

fn verifier(password: Option<String>) -> Result<Option<String>> {
    match password {
        Some(p) if p.is_empty() => Err(Error::invalid_option("a password may not be empty")),
        Some(p) => Ok(Some(password::make_verifier(&p))),
        None => Ok(None),
    }
}

/// Runs one role, privilege or token statement (not `SET SESSION
/// AUTHORIZATION`, which the session handles).
pub async fn run(ctx: Ctx<'_>, statement: SecurityStatement) -> Result<Output> {
    let who = authorize::who(ctx.engine, ctx.user)?;
    let mut secret = None;
    let (tag, cmd) = match statement {
        SecurityStatement::CreateRole { name, user, options } => (
            if user { "CREATE USER" } else { "CREATE ROLE" },
            SecurityCommand::CreateRole {
                name,
                superuser: options.superuser.unwrap_or(false),
                login: options.login.unwrap_or(user),
                verifier: verifier(options.password.flatten())?,
            },
        ),
        SecurityStatement::AlterRole { name, options } => {
            if options.login.is_some() {
                return Err(Error::unsupported("ALTER ROLE … LOGIN | NOLOGIN is not supported"));
            }
            let verifier = match options.password {
                Some(p) => Some(verifier(p)?),
                None => None,
            };
            (
                "ALTER ROLE",
                SecurityCommand::AlterRole {
                    name,
                    verifier,
                    superuser: options.superuser,
                },
            )
        }
        SecurityStatement::DropRole { name, if_exists } => {
            if name == who.name {
                return Err(Error::user(SqlCode::ObjectInUse, "current user cannot be dropped"));
            }
            ("DROP ROLE", SecurityCommand::DropRole { name, if_exists })
        }
        SecurityStatement::Grant {
            privileges: p,
            stream,
            role,
        } => {
            owner_or_superuser(ctx, &who, &stream)?;
            let privileges = privileges(p);
            (
                "GRANT",
                SecurityCommand::Grant {
                    privileges,
                    stream,
                    role,
                },
            )
        }
        SecurityStatement::Revoke {
            privileges: p,
            stream,
            role,
        } => {
            owner_or_superuser(ctx, &who, &stream)?;
            let privileges = privileges(p);
            (
                "REVOKE",
                SecurityCommand::Revoke {
                    privileges,
                    stream,
                    role,
                },
            )
        }
        SecurityStatement::GrantRole { role, member } => ("GRANT ROLE", SecurityCommand::GrantRole { role, member }),
        SecurityStatement::RevokeRole { role, member } => ("REVOKE ROLE", SecurityCommand::RevokeRole { role, member }),
        SecurityStatement::CreateToken { name, user } => {
            let (clear, sha256) = password::new_token();
            secret = Some((name.clone(), clear));
            let command = SecurityCommand::CreateToken {
                name,
                user: user.unwrap_or_else(|| who.name.clone()),
                sha256,
                created_ms: now_ms(),
            };
            ("CREATE TOKEN", command)
        }
        SecurityStatement::DropToken { name, if_exists } => {
            let owner = ctx
                .engine
                .master
                .with_security(|s| s.tokens.get(&name).map(|t| t.user.clone()));
            if !who.superuser && owner.as_ref().is_some_and(|o| o != &who.name) {
                return Err(permission_denied("token", &name));
            }
            ("DROP TOKEN", SecurityCommand::DropToken { name, if_exists })
        }
        SecurityStatement::SetSessionAuthorization(_) => {
            return Err(Error::internal("SET SESSION AUTHORIZATION is the session's"));
        }
    };
    if !matches!(
        cmd,
        SecurityCommand::Grant { .. } | SecurityCommand::Revoke { .. } | SecurityCommand::DropToken { .. }
    ) {
        authorize::check_command(ctx.engine, &who, &CatalogCommand::Security(cmd.clone()))?;
    }
    ctx.engine.master.apply(CatalogCommand::Security(cmd)).await?;
    match secret {
        Some((name, clear)) => Table::text(&["name", "token"], vec![vec![name, clear]]).output("CREATE TOKEN"),
        None => Ok(command(tag)),
    }
}

/// GRANT and REVOKE on a stream: its owner's or a superuser's.
fn owner_or_superuser(ctx: Ctx<'_>, who: &sluice_cluster::security::Principal, stream: &str) -> Result<()> {
    if ctx.engine.master.stream(stream).is_none() || ctx.engine.master.with_security(|s| s.owns_stream(who, stream)) {
        Ok(())
    } else {
        Err(permission_denied("stream", stream))
    }
}
