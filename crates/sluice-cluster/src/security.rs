//! Roles, privileges, ownership and API tokens: the security part of the
//! catalog, changed only through [`SecurityCommand`]s (wrapped in
//! [`CatalogCommand::Security`](crate::CatalogCommand::Security)) so a
//! replicated master applies them like every other catalog change.
//!
//! Plain data and plain functions: the master applies a command with
//! [`SecurityCatalog::apply`] under its catalog lock and persists; the SQL
//! engine and the REST API ask [`SecurityCatalog::privileges_of`] and
//! friends. Nothing here hashes or checks a password: a role stores a
//! SCRAM-SHA-256 verifier (`SCRAM-SHA-256$<iterations>:<salt>:<stored
//! key>:<server key>`, as Postgres stores it) that the front ends compute
//! and check; a token stores the hex SHA-256 of its secret.

use serde::{Deserialize, Serialize};
use sluice_types::{Error, ObjectKind, Result, SqlCode};
use std::collections::{BTreeMap, BTreeSet};

/// The first superuser, created on first start.
pub const BOOTSTRAP_SUPERUSER: &str = "sluice";
/// The built-in role whose members may write server files (`file` sinks).
pub const PG_WRITE_SERVER_FILES: &str = "pg_write_server_files";
/// Roles that exist without being created.
pub const BUILTIN_ROLES: &[&str] = &[PG_WRITE_SERVER_FILES];
/// The pseudo-role every role belongs to, as in Postgres: `GRANT … TO
/// PUBLIC` grants to everyone; no role can be called so.
pub const PUBLIC: &str = "public";
/// Roles in the catalog at most (a bound on catalog state).
pub const ROLES_MAX: usize = 10_000;
/// API tokens in the catalog at most.
pub const TOKENS_MAX: usize = 10_000;

/// A privilege on a stream.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Privilege {
    Select,
    Insert,
}

impl Privilege {
    /// As SQL names it.
    pub fn sql(self) -> &'static str {
        match self {
            Privilege::Select => "SELECT",
            Privilege::Insert => "INSERT",
        }
    }
}

/// A role (a user is a role that may log in).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RoleDef {
    pub name: String,
    #[serde(default)]
    pub superuser: bool,
    #[serde(default = "yes")]
    pub login: bool,
    /// The SCRAM-SHA-256 verifier; `None`: no password (such a role logs in
    /// only where authentication is `trust`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verifier: Option<String>,
    /// Roles this role is a member of (`GRANT pg_write_server_files TO r`).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub member_of: BTreeSet<String>,
}

fn yes() -> bool {
    true
}

/// An API token: its name, whose it is, and the SHA-256 of its secret.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TokenDef {
    pub name: String,
    pub user: String,
    /// Hex SHA-256 of the secret (the secret itself is shown once).
    pub sha256: String,
    pub created_ms: i64,
}

/// The security part of the catalog.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SecurityCatalog {
    #[serde(default)]
    pub roles: BTreeMap<String, RoleDef>,
    /// stream → role → privileges granted.
    #[serde(default)]
    pub grants: BTreeMap<String, BTreeMap<String, BTreeSet<Privilege>>>,
    /// stream → owning role.
    #[serde(default)]
    pub stream_owners: BTreeMap<String, String>,
    /// pipeline → owning role.
    #[serde(default)]
    pub pipeline_owners: BTreeMap<String, String>,
    #[serde(default)]
    pub tokens: BTreeMap<String, TokenDef>,
}

/// One change to roles, grants or tokens.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub enum SecurityCommand {
    /// `CREATE ROLE | USER name [WITH [PASSWORD '…'] [SUPERUSER] [LOGIN]]`.
    CreateRole {
        name: String,
        superuser: bool,
        login: bool,
        verifier: Option<String>,
    },
    /// `ALTER ROLE | USER name [WITH] PASSWORD '…' | NULL | [NO]SUPERUSER`.
    AlterRole {
        name: String,
        /// `Some(None)`: `PASSWORD NULL`.
        verifier: Option<Option<String>>,
        superuser: Option<bool>,
    },
    /// `DROP ROLE | USER [IF EXISTS] name`: its grants and tokens go too;
    /// a role that owns streams or pipelines cannot be dropped.
    DropRole { name: String, if_exists: bool },
    /// `GRANT SELECT | INSERT ON [STREAM] name TO role`.
    Grant {
        privileges: Vec<Privilege>,
        stream: String,
        role: String,
    },
    /// `REVOKE … ON [STREAM] name FROM role`.
    Revoke {
        privileges: Vec<Privilege>,
        stream: String,
        role: String,
    },
    /// `GRANT role TO member` (membership, e.g. of `pg_write_server_files`).
    GrantRole { role: String, member: String },
    /// `REVOKE role FROM member`.
    RevokeRole { role: String, member: String },
    /// `CREATE TOKEN name [FOR USER u]`.
    CreateToken {
        name: String,
        user: String,
        sha256: String,
        created_ms: i64,
    },
    /// `DROP TOKEN [IF EXISTS] name`.
    DropToken { name: String, if_exists: bool },
}

impl SecurityCommand {
    /// The role, stream or token the command names.
    pub fn name(&self) -> &str {
        match self {
            SecurityCommand::CreateRole { name, .. }
            | SecurityCommand::AlterRole { name, .. }
            | SecurityCommand::DropRole { name, .. }
            | SecurityCommand::CreateToken { name, .. }
            | SecurityCommand::DropToken { name, .. } => name,
            SecurityCommand::Grant { stream, .. } | SecurityCommand::Revoke { stream, .. } => stream,
            SecurityCommand::GrantRole { role, .. } | SecurityCommand::RevokeRole { role, .. } => role,
        }
    }
}

/// What a role may do, resolved once per statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub superuser: bool,
    /// Member of `pg_write_server_files` (or superuser).
    pub writes_server_files: bool,
}

fn role_missing(name: &str) -> Error {
    Error::not_found(ObjectKind::Role, name)
}

/// `42501 permission denied for <what> <name>`.
pub fn permission_denied(what: &str, name: &str) -> Error {
    Error::user(
        SqlCode::InsufficientPrivilege,
        format!("permission denied for {what} {name}"),
    )
}

impl SecurityCatalog {
    /// Whether `name` is a role (created, or built in).
    pub fn role_exists(&self, name: &str) -> bool {
        self.roles.contains_key(name) || BUILTIN_ROLES.contains(&name)
    }

    /// The principal of a role that may log in.
    pub fn principal(&self, name: &str) -> Option<Principal> {
        let role = self.roles.get(name)?;
        Some(Principal {
            name: role.name.clone(),
            superuser: role.superuser,
            writes_server_files: role.superuser || role.member_of.contains(PG_WRITE_SERVER_FILES),
        })
    }

    /// Whether `role` may `privilege` on `stream`: superuser, owner or grantee.
    pub fn allows(&self, who: &Principal, privilege: Privilege, stream: &str) -> bool {
        who.superuser
            || self.stream_owners.get(stream) == Some(&who.name)
            || self.grants.get(stream).is_some_and(|g| {
                [who.name.as_str(), PUBLIC]
                    .iter()
                    .any(|grantee| g.get(*grantee).is_some_and(|p| p.contains(&privilege)))
            })
    }

    /// Checks `privilege` on `stream`; `42501` naming the stream otherwise.
    pub fn check(&self, who: &Principal, privilege: Privilege, stream: &str) -> Result<()> {
        if self.allows(who, privilege, stream) {
            Ok(())
        } else {
            Err(permission_denied("stream", stream))
        }
    }

    /// Whether `who` owns pipeline `name` (or is superuser).
    pub fn owns_pipeline(&self, who: &Principal, name: &str) -> bool {
        who.superuser || self.pipeline_owners.get(name) == Some(&who.name)
    }

    /// Whether `who` owns stream `name` (or is superuser).
    pub fn owns_stream(&self, who: &Principal, name: &str) -> bool {
        who.superuser || self.stream_owners.get(name) == Some(&who.name)
    }

    /// The token whose secret hashes to `sha256`.
    pub fn token_by_digest(&self, sha256: &str) -> Option<&TokenDef> {
        self.tokens.values().find(|t| t.sha256 == sha256)
    }

    /// Applies one command; `Ok(false)` when nothing changed (`IF EXISTS`).
    pub fn apply(&mut self, command: SecurityCommand, stream_exists: impl Fn(&str) -> bool) -> Result<bool> {
        match command {
            SecurityCommand::CreateRole {
                name,
                superuser,
                login,
                verifier,
            } => {
                if name.starts_with("pg_") {
                    return Err(Error::user(
                        SqlCode::ReservedName,
                        format!("role name \"{name}\" is reserved: names starting with pg_ are built in"),
                    ));
                }
                if name == PUBLIC || name == "none" {
                    return Err(Error::user(
                        SqlCode::ReservedName,
                        format!("role name \"{name}\" is reserved"),
                    ));
                }
                if self.role_exists(&name) {
                    return Err(Error::user(
                        SqlCode::DuplicateRole,
                        format!("role \"{name}\" already exists"),
                    ));
                }
                if self.roles.len() >= ROLES_MAX {
                    return Err(Error::user(
                        SqlCode::ConfigurationLimitExceeded,
                        format!("at most {ROLES_MAX} roles"),
                    ));
                }
                let role = RoleDef {
                    name: name.clone(),
                    superuser,
                    login,
                    verifier,
                    member_of: BTreeSet::new(),
                };
                self.roles.insert(name, role);
            }
            SecurityCommand::AlterRole {
                name,
                verifier,
                superuser,
            } => {
                let role = self.roles.get_mut(&name).ok_or_else(|| role_missing(&name))?;
                if let Some(v) = verifier {
                    role.verifier = v;
                }
                if let Some(s) = superuser {
                    if !s && name == BOOTSTRAP_SUPERUSER {
                        return Err(permission_denied("role", &name));
                    }
                    role.superuser = s;
                }
            }
            SecurityCommand::DropRole { name, if_exists } => return self.drop_role(&name, if_exists),
            SecurityCommand::Grant {
                privileges,
                stream,
                role,
            } => {
                if !stream_exists(&stream) {
                    return Err(Error::not_found(ObjectKind::Stream, &stream));
                }
                if role != PUBLIC && !self.roles.contains_key(&role) {
                    return Err(role_missing(&role));
                }
                let held = self.grants.entry(stream).or_default().entry(role).or_default();
                held.extend(privileges);
            }
            SecurityCommand::Revoke {
                privileges,
                stream,
                role,
            } => {
                if !stream_exists(&stream) {
                    return Err(Error::not_found(ObjectKind::Stream, &stream));
                }
                if role != PUBLIC && !self.roles.contains_key(&role) {
                    return Err(role_missing(&role));
                }
                if let Some(by_role) = self.grants.get_mut(&stream) {
                    if let Some(held) = by_role.get_mut(&role) {
                        held.retain(|p| !privileges.contains(p));
                        if held.is_empty() {
                            by_role.remove(&role);
                        }
                    }
                    if by_role.is_empty() {
                        self.grants.remove(&stream);
                    }
                }
            }
            SecurityCommand::GrantRole { role, member } | SecurityCommand::RevokeRole { role, member }
                if !self.role_exists(&role) || !self.roles.contains_key(&member) =>
            {
                let missing = if self.role_exists(&role) { member } else { role };
                return Err(role_missing(&missing));
            }
            SecurityCommand::GrantRole { role, member } => {
                if let Some(m) = self.roles.get_mut(&member) {
                    m.member_of.insert(role);
                }
            }
            SecurityCommand::RevokeRole { role, member } => {
                if let Some(m) = self.roles.get_mut(&member) {
                    m.member_of.remove(&role);
                }
            }
            SecurityCommand::CreateToken {
                name,
                user,
                sha256,
                created_ms,
            } => {
                if self.tokens.contains_key(&name) {
                    return Err(Error::user(
                        SqlCode::DuplicateRole,
                        format!("token \"{name}\" already exists"),
                    ));
                }
                if !self.roles.contains_key(&user) {
                    return Err(role_missing(&user));
                }
                if self.tokens.len() >= TOKENS_MAX {
                    return Err(Error::user(
                        SqlCode::ConfigurationLimitExceeded,
                        format!("at most {TOKENS_MAX} tokens"),
                    ));
                }
                let token = TokenDef {
                    name: name.clone(),
                    user,
                    sha256,
                    created_ms,
                };
                self.tokens.insert(name, token);
            }
            SecurityCommand::DropToken { name, if_exists } => {
                if self.tokens.remove(&name).is_none() {
                    return if if_exists {
                        Ok(false)
                    } else {
                        Err(Error::not_found(ObjectKind::Token, &name))
                    };
                }
            }
        }
        Ok(true)
    }

    fn drop_role(&mut self, name: &str, if_exists: bool) -> Result<bool> {
        if BUILTIN_ROLES.contains(&name) || name == BOOTSTRAP_SUPERUSER {
            return Err(Error::user(
                SqlCode::DependentObjectsStillExist,
                format!("cannot drop role {name} because it is required by the database system"),
            ));
        }
        if !self.roles.contains_key(name) {
            return if if_exists { Ok(false) } else { Err(role_missing(name)) };
        }
        let owned: Vec<String> = (self.stream_owners.iter().map(|(s, o)| (format!("stream {s}"), o)))
            .chain(self.pipeline_owners.iter().map(|(p, o)| (format!("pipeline {p}"), o)))
            .filter(|(_, owner)| owner.as_str() == name)
            .map(|(what, _)| what)
            .collect();
        if !owned.is_empty() {
            return Err(Error::user(
                SqlCode::DependentObjectsStillExist,
                format!(
                    "role \"{name}\" cannot be dropped because it owns {}; drop them first",
                    owned.join(", ")
                ),
            ));
        }
        self.roles.remove(name);
        for by_role in self.grants.values_mut() {
            by_role.remove(name);
        }
        self.grants.retain(|_, by_role| !by_role.is_empty());
        self.tokens.retain(|_, t| t.user != name);
        Ok(true)
    }

    /// Records `owner` as the owner of what a create made, or forgets the
    /// owners and grants of what a drop removed (a stream re-created under
    /// the same name starts with no grants).
    pub fn record_ownership(&mut self, owner: &str, effect: &OwnershipEffect) {
        match effect {
            OwnershipEffect::CreatedStream(s) => {
                self.stream_owners.insert(s.clone(), owner.to_string());
            }
            OwnershipEffect::CreatedPipeline { name, stream } => {
                self.pipeline_owners.insert(name.clone(), owner.to_string());
                if let Some(s) = stream {
                    self.stream_owners.insert(s.clone(), owner.to_string());
                }
            }
            OwnershipEffect::Dropped { streams, pipelines } => {
                for s in streams {
                    self.stream_owners.remove(s);
                    self.grants.remove(s);
                }
                for p in pipelines {
                    self.pipeline_owners.remove(p);
                }
            }
        }
    }
}

/// What a catalog command did to owned objects.
#[derive(Debug, Clone, PartialEq)]
pub enum OwnershipEffect {
    CreatedStream(String),
    CreatedPipeline {
        name: String,
        stream: Option<String>,
    },
    Dropped {
        streams: Vec<String>,
        pipelines: Vec<String>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(name: &str, superuser: bool) -> SecurityCommand {
        SecurityCommand::CreateRole {
            name: name.into(),
            superuser,
            login: true,
            verifier: None,
        }
    }

    fn catalog() -> SecurityCatalog {
        let mut c = SecurityCatalog::default();
        c.apply(create("sluice", true), |_| true).unwrap();
        c.apply(create("alice", false), |_| true).unwrap();
        c
    }

    #[test]
    fn grants_and_revokes_take_effect_and_owners_need_none() {
        let mut c = catalog();
        let alice = c.principal("alice").unwrap();
        assert!(!c.allows(&alice, Privilege::Select, "s"));
        let grant = SecurityCommand::Grant {
            privileges: vec![Privilege::Select],
            stream: "s".into(),
            role: "alice".into(),
        };
        c.apply(grant, |s| s == "s").unwrap();
        assert!(c.allows(&alice, Privilege::Select, "s"));
        assert!(!c.allows(&alice, Privilege::Insert, "s"));
        let revoke = SecurityCommand::Revoke {
            privileges: vec![Privilege::Select],
            stream: "s".into(),
            role: "alice".into(),
        };
        c.apply(revoke, |s| s == "s").unwrap();
        assert!(!c.allows(&alice, Privilege::Select, "s"));
        assert!(c.grants.is_empty());
        c.record_ownership("alice", &OwnershipEffect::CreatedStream("t".into()));
        assert!(c.allows(&alice, Privilege::Insert, "t"));
        let err = c.check(&alice, Privilege::Select, "s").unwrap_err();
        assert_eq!(err.sqlstate(), "42501");
        assert!(err.to_string().contains("stream s"), "{err}");
    }

    #[test]
    fn a_grant_to_public_is_every_roles_and_public_is_no_role_name() {
        let mut c = catalog();
        c.apply(create("bob", false), |_| true).unwrap();
        let (alice, bob) = (c.principal("alice").unwrap(), c.principal("bob").unwrap());
        let to_public = |grant: bool| {
            let (privileges, stream, role) = (vec![Privilege::Select], "s".to_string(), PUBLIC.to_string());
            if grant {
                SecurityCommand::Grant {
                    privileges,
                    stream,
                    role,
                }
            } else {
                SecurityCommand::Revoke {
                    privileges,
                    stream,
                    role,
                }
            }
        };
        c.apply(to_public(true), |s| s == "s").unwrap();
        assert!(c.allows(&alice, Privilege::Select, "s") && c.allows(&bob, Privilege::Select, "s"));
        assert!(!c.allows(&alice, Privilege::Insert, "s"));
        c.apply(to_public(false), |s| s == "s").unwrap();
        assert!(!c.allows(&alice, Privilege::Select, "s") && !c.allows(&bob, Privilege::Select, "s"));
        for name in [PUBLIC, "none"] {
            let err = c.apply(create(name, false), |_| true).unwrap_err();
            assert_eq!(err.sqlstate(), "42939", "{err}");
        }
    }

    #[test]
    fn a_grant_on_a_missing_stream_or_role_is_refused() {
        let mut c = catalog();
        let on = |stream: &str, role: &str| SecurityCommand::Grant {
            privileges: vec![Privilege::Select],
            stream: stream.into(),
            role: role.into(),
        };
        assert_eq!(c.apply(on("nope", "alice"), |_| false).unwrap_err().sqlstate(), "42P01");
        assert_eq!(c.apply(on("s", "bob"), |_| true).unwrap_err().sqlstate(), "42704");
    }

    #[test]
    fn dropping_a_stream_forgets_its_grants_and_owner() {
        let mut c = catalog();
        c.record_ownership("alice", &OwnershipEffect::CreatedStream("s".into()));
        let grant = SecurityCommand::Grant {
            privileges: vec![Privilege::Select],
            stream: "s".into(),
            role: "sluice".into(),
        };
        c.apply(grant, |_| true).unwrap();
        let dropped = OwnershipEffect::Dropped {
            streams: vec!["s".into()],
            pipelines: vec![],
        };
        c.record_ownership("sluice", &dropped);
        assert!(c.grants.is_empty() && c.stream_owners.is_empty());
    }

    #[test]
    fn owners_and_the_bootstrap_superuser_cannot_be_dropped() {
        let mut c = catalog();
        let drop = |name: &str| SecurityCommand::DropRole {
            name: name.into(),
            if_exists: false,
        };
        c.record_ownership(
            "alice",
            &OwnershipEffect::CreatedPipeline {
                name: "p".into(),
                stream: None,
            },
        );
        let err = c.apply(drop("alice"), |_| true).unwrap_err();
        assert_eq!(err.sqlstate(), "2BP01");
        assert!(err.to_string().contains("pipeline p"), "{err}");
        assert_eq!(c.apply(drop("sluice"), |_| true).unwrap_err().sqlstate(), "2BP01");
        c.record_ownership(
            "x",
            &OwnershipEffect::Dropped {
                streams: vec![],
                pipelines: vec!["p".into()],
            },
        );
        assert!(c.apply(drop("alice"), |_| true).unwrap());
        assert_eq!(c.apply(drop("alice"), |_| true).unwrap_err().sqlstate(), "42704");
        assert!(
            !c.apply(
                SecurityCommand::DropRole {
                    name: "alice".into(),
                    if_exists: true
                },
                |_| true
            )
            .unwrap()
        );
    }

    #[test]
    fn reserved_and_duplicate_names_are_refused() {
        let mut c = catalog();
        assert_eq!(
            c.apply(create("pg_x", false), |_| true).unwrap_err().sqlstate(),
            "42939"
        );
        assert_eq!(
            c.apply(create("alice", false), |_| true).unwrap_err().sqlstate(),
            "42710"
        );
    }

    #[test]
    fn membership_in_pg_write_server_files_lets_a_role_write_files() {
        let mut c = catalog();
        assert!(!c.principal("alice").unwrap().writes_server_files);
        let grant = SecurityCommand::GrantRole {
            role: PG_WRITE_SERVER_FILES.into(),
            member: "alice".into(),
        };
        c.apply(grant, |_| true).unwrap();
        assert!(c.principal("alice").unwrap().writes_server_files);
        assert!(c.principal("sluice").unwrap().writes_server_files);
        let unknown = SecurityCommand::GrantRole {
            role: "nobody".into(),
            member: "alice".into(),
        };
        assert_eq!(c.apply(unknown, |_| true).unwrap_err().sqlstate(), "42704");
    }

    #[test]
    fn tokens_are_found_by_digest_and_go_with_their_user() {
        let mut c = catalog();
        let token = SecurityCommand::CreateToken {
            name: "ci".into(),
            user: "alice".into(),
            sha256: "ab".into(),
            created_ms: 1,
        };
        c.apply(token, |_| true).unwrap();
        assert_eq!(c.token_by_digest("ab").unwrap().user, "alice");
        c.apply(
            SecurityCommand::DropRole {
                name: "alice".into(),
                if_exists: false,
            },
            |_| true,
        )
        .unwrap();
        assert!(c.token_by_digest("ab").is_none());
    }
}
