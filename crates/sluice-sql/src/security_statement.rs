//! Role, privilege and token statements, parsed on sqlparser's tokens:
//!
//! ```sql
//! CREATE USER | ROLE name [[WITH] PASSWORD 'p' | PASSWORD NULL | SUPERUSER | NOSUPERUSER | LOGIN | NOLOGIN …]
//! ALTER USER | ROLE name [WITH] option …
//! DROP USER | ROLE [IF EXISTS] name
//! GRANT SELECT | INSERT | ALL [PRIVILEGES] [, …] ON [STREAM | TABLE] name TO role
//! REVOKE … ON [STREAM | TABLE] name FROM role
//! GRANT role TO member      REVOKE role FROM member
//! CREATE TOKEN name [FOR USER u]      DROP TOKEN [IF EXISTS] name
//! SET SESSION AUTHORIZATION name | DEFAULT      RESET SESSION AUTHORIZATION
//! ```
//!
//! A password is carried in clear only as far as the session, which turns
//! it into a SCRAM verifier before anything stores or replicates it.

use crate::errors::parser_error;
use crate::names::normalize_ident;
use sluice_types::{Error, Result};
use sqlparser::ast::Ident;
use sqlparser::keywords::Keyword;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::Token;

/// A privilege a GRANT names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantedPrivilege {
    Select,
    Insert,
}

/// Role attributes a CREATE or ALTER sets (`None`: not mentioned).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoleOptions {
    /// `Some(None)`: `PASSWORD NULL`.
    pub password: Option<Option<String>>,
    pub superuser: Option<bool>,
    pub login: Option<bool>,
}

/// One role, privilege or token statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecurityStatement {
    /// `user`: CREATE USER (LOGIN by default) rather than CREATE ROLE.
    CreateRole {
        name: String,
        user: bool,
        options: RoleOptions,
    },
    AlterRole {
        name: String,
        options: RoleOptions,
    },
    DropRole {
        name: String,
        if_exists: bool,
    },
    Grant {
        privileges: Vec<GrantedPrivilege>,
        stream: String,
        role: String,
    },
    Revoke {
        privileges: Vec<GrantedPrivilege>,
        stream: String,
        role: String,
    },
    GrantRole {
        role: String,
        member: String,
    },
    RevokeRole {
        role: String,
        member: String,
    },
    CreateToken {
        name: String,
        user: Option<String>,
    },
    DropToken {
        name: String,
        if_exists: bool,
    },
    /// `None`: DEFAULT / RESET (back to the authenticated role).
    SetSessionAuthorization(Option<String>),
}

fn word(p: &Parser, n: usize) -> Option<String> {
    match p.peek_nth_token(n).token {
        Token::Word(w) => Some(w.value.to_ascii_uppercase()),
        _ => None,
    }
}

/// Whether the statement at the parser is one of these.
pub fn starts_security_statement(p: &Parser) -> bool {
    let (a, b, c) = (word(p, 0), word(p, 1), word(p, 2));
    matches!(
        (a.as_deref(), b.as_deref(), c.as_deref()),
        (Some("CREATE" | "ALTER" | "DROP"), Some("USER" | "ROLE"), _)
            | (Some("CREATE" | "DROP"), Some("TOKEN"), _)
            | (Some("GRANT" | "REVOKE"), _, _)
            | (Some("SET" | "RESET"), Some("SESSION"), Some("AUTHORIZATION"))
    )
}

fn ident(p: &mut Parser, what: &str) -> Result<String> {
    let id: Ident = p
        .parse_identifier()
        .map_err(|_| Error::syntax(format!("expected a {what} name at \"{}\"", p.peek_token().token)))?;
    Ok(normalize_ident(&id))
}

fn keyword(p: &mut Parser, expected: &str) -> Result<()> {
    if word(p, 0).as_deref() == Some(expected) {
        p.next_token();
        Ok(())
    } else {
        Err(Error::syntax(format!(
            "expected {expected} at \"{}\"",
            p.peek_token().token
        )))
    }
}

/// Parses one statement that [`starts_security_statement`] recognised.
pub fn parse_security_statement(p: &mut Parser) -> Result<SecurityStatement> {
    let first = word(p, 0).unwrap_or_default();
    let second = word(p, 1).unwrap_or_default();
    p.next_token();
    match (first.as_str(), second.as_str()) {
        ("CREATE", "TOKEN") => {
            p.next_token();
            let name = ident(p, "token")?;
            let user = if word(p, 0).as_deref() == Some("FOR") {
                p.next_token();
                keyword(p, "USER")?;
                Some(ident(p, "role")?)
            } else {
                None
            };
            Ok(SecurityStatement::CreateToken { name, user })
        }
        ("DROP", "TOKEN") => {
            p.next_token();
            let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
            Ok(SecurityStatement::DropToken {
                name: ident(p, "token")?,
                if_exists,
            })
        }
        ("CREATE", kind) => {
            p.next_token();
            let name = ident(p, "role")?;
            Ok(SecurityStatement::CreateRole {
                name,
                user: kind == "USER",
                options: role_options(p)?,
            })
        }
        ("ALTER", _) => {
            p.next_token();
            let name = ident(p, "role")?;
            Ok(SecurityStatement::AlterRole {
                name,
                options: role_options(p)?,
            })
        }
        ("DROP", _) => {
            p.next_token();
            let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
            Ok(SecurityStatement::DropRole {
                name: ident(p, "role")?,
                if_exists,
            })
        }
        ("GRANT" | "REVOKE", _) => grant_or_revoke(p, first == "GRANT"),
        ("SET", _) => {
            p.next_token();
            p.next_token();
            if word(p, 0).as_deref() == Some("DEFAULT") {
                p.next_token();
                return Ok(SecurityStatement::SetSessionAuthorization(None));
            }
            let name = match p.peek_token().token {
                Token::SingleQuotedString(s) => {
                    p.next_token();
                    s
                }
                _ => ident(p, "role")?,
            };
            Ok(SecurityStatement::SetSessionAuthorization(Some(name)))
        }
        _ => {
            p.next_token();
            p.next_token();
            Ok(SecurityStatement::SetSessionAuthorization(None))
        }
    }
}

fn role_options(p: &mut Parser) -> Result<RoleOptions> {
    let mut options = RoleOptions::default();
    if word(p, 0).as_deref() == Some("WITH") {
        p.next_token();
    }
    while let Some(w) = word(p, 0) {
        match w.as_str() {
            "PASSWORD" => {
                p.next_token();
                options.password = Some(match p.next_token().token {
                    Token::SingleQuotedString(s) => Some(s),
                    Token::Word(w) if w.keyword == Keyword::NULL => None,
                    other => return Err(Error::syntax(format!("expected a password string at \"{other}\""))),
                });
            }
            "SUPERUSER" | "NOSUPERUSER" => {
                p.next_token();
                options.superuser = Some(w == "SUPERUSER");
            }
            "LOGIN" | "NOLOGIN" => {
                p.next_token();
                options.login = Some(w == "LOGIN");
            }
            _ => return Err(Error::unsupported(format!("role option {w} is not supported"))),
        }
    }
    Ok(options)
}

fn privilege(p: &mut Parser) -> Result<Vec<GrantedPrivilege>> {
    let w = word(p, 0).unwrap_or_default();
    let out = match w.as_str() {
        "SELECT" => vec![GrantedPrivilege::Select],
        "INSERT" => vec![GrantedPrivilege::Insert],
        "ALL" => {
            p.next_token();
            if word(p, 0).as_deref() == Some("PRIVILEGES") {
                p.next_token();
            }
            return Ok(vec![GrantedPrivilege::Select, GrantedPrivilege::Insert]);
        }
        _ => {
            return Err(Error::unsupported(format!(
                "privilege {w} is not supported: streams have SELECT and INSERT"
            )));
        }
    };
    p.next_token();
    Ok(out)
}

fn grant_or_revoke(p: &mut Parser, grant: bool) -> Result<SecurityStatement> {
    let to = if grant { "TO" } else { "FROM" };
    // `GRANT role TO member`: a name followed by TO/FROM.
    if word(p, 1).as_deref() == Some(to) && !matches!(word(p, 0).as_deref(), Some("SELECT" | "INSERT" | "ALL")) {
        let role = ident(p, "role")?;
        keyword(p, to)?;
        let member = ident(p, "role")?;
        return Ok(if grant {
            SecurityStatement::GrantRole { role, member }
        } else {
            SecurityStatement::RevokeRole { role, member }
        });
    }
    let mut privileges = privilege(p)?;
    while p.consume_token(&Token::Comma) {
        privileges.extend(privilege(p)?);
    }
    keyword(p, "ON")?;
    if matches!(word(p, 0).as_deref(), Some("STREAM" | "TABLE")) {
        p.next_token();
    }
    let name = p.parse_object_name(false).map_err(parser_error)?;
    let stream = crate::names::normalize_name(&name);
    keyword(p, to)?;
    let role = ident(p, "role")?;
    Ok(if grant {
        SecurityStatement::Grant {
            privileges,
            stream,
            role,
        }
    } else {
        SecurityStatement::Revoke {
            privileges,
            stream,
            role,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statement::{SluiceStatement, parse_statements};

    fn one(sql: &str) -> SecurityStatement {
        match parse_statements(sql).unwrap().pop().unwrap() {
            SluiceStatement::Security(s) => s,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn parses_roles_grants_and_tokens() {
        assert_eq!(
            one("CREATE USER Alice WITH PASSWORD 'pw' SUPERUSER"),
            SecurityStatement::CreateRole {
                name: "alice".into(),
                user: true,
                options: RoleOptions {
                    password: Some(Some("pw".into())),
                    superuser: Some(true),
                    login: None
                }
            }
        );
        assert_eq!(
            one("alter role bob password null"),
            SecurityStatement::AlterRole {
                name: "bob".into(),
                options: RoleOptions {
                    password: Some(None),
                    ..RoleOptions::default()
                }
            }
        );
        assert_eq!(
            one("GRANT SELECT, INSERT ON STREAM clicks TO bob"),
            SecurityStatement::Grant {
                privileges: vec![GrantedPrivilege::Select, GrantedPrivilege::Insert],
                stream: "clicks".into(),
                role: "bob".into()
            }
        );
        assert_eq!(
            one("REVOKE ALL ON clicks FROM bob"),
            SecurityStatement::Revoke {
                privileges: vec![GrantedPrivilege::Select, GrantedPrivilege::Insert],
                stream: "clicks".into(),
                role: "bob".into()
            }
        );
        assert_eq!(
            one("GRANT pg_write_server_files TO bob"),
            SecurityStatement::GrantRole {
                role: "pg_write_server_files".into(),
                member: "bob".into()
            }
        );
        assert_eq!(
            one("CREATE TOKEN ci FOR USER bob"),
            SecurityStatement::CreateToken {
                name: "ci".into(),
                user: Some("bob".into())
            }
        );
        assert_eq!(
            one("DROP TOKEN IF EXISTS ci"),
            SecurityStatement::DropToken {
                name: "ci".into(),
                if_exists: true
            }
        );
        assert_eq!(
            one("DROP USER IF EXISTS bob"),
            SecurityStatement::DropRole {
                name: "bob".into(),
                if_exists: true
            }
        );
        assert_eq!(
            one("SET SESSION AUTHORIZATION bob"),
            SecurityStatement::SetSessionAuthorization(Some("bob".into()))
        );
        assert_eq!(
            one("RESET SESSION AUTHORIZATION"),
            SecurityStatement::SetSessionAuthorization(None)
        );
    }

    #[test]
    fn unknown_privileges_and_options_are_errors() {
        assert_eq!(
            parse_statements("GRANT DELETE ON s TO bob").unwrap_err().sqlstate(),
            "0A000"
        );
        assert_eq!(
            parse_statements("CREATE USER bob CREATEDB").unwrap_err().sqlstate(),
            "0A000"
        );
        assert_eq!(
            parse_statements("CREATE USER bob PASSWORD 3").unwrap_err().sqlstate(),
            "42601"
        );
    }
}
