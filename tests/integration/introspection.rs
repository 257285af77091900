//! Catalog introspection from the role catalog, with the real `psql`: `\du`
//! lists the roles with their attributes and memberships, `\dp` shows the
//! grants after GRANT and REVOKE. The expected text is computed from what
//! the test set up (a small model of roles and grants, formatted by psql's
//! rules), never taken from the server.

use crate::common::TestServer;
use crate::support::{exec, simple_rows};
use std::collections::BTreeMap;
use std::process::{Command, Stdio};

/// `psql -A -t -c meta` as `sluice` (trust): unaligned rows, no headers.
fn psql(server: &TestServer, meta: &str) -> String {
    let out = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &server.pg_port.to_string(),
            "-U",
            "sluice",
            "-d",
            "sluice",
        ])
        .args(["-X", "-w", "-A", "-t", "-c", meta])
        .env("PGCONNECT_TIMEOUT", "10")
        .env_remove("PGPASSWORD")
        .stdin(Stdio::null())
        .output()
        .expect("run psql (install postgresql-client)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.is_empty(), "psql {meta}: {stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A role as the test made it.
struct Role {
    name: &'static str,
    superuser: bool,
    login: bool,
    member_of: Vec<&'static str>,
}

/// psql 15's `\du` line for `role` in unaligned mode: name, attributes
/// (psql's words, in its order, joined by ", "), memberships as an array.
fn du_line(role: &Role) -> String {
    let mut attributes = Vec::new();
    if role.superuser {
        attributes.extend(["Superuser", "Create role", "Create DB"]);
    }
    if !role.login {
        attributes.push("Cannot login");
    }
    if role.superuser {
        attributes.push("Bypass RLS");
    }
    format!(
        "{}|{}|{{{}}}",
        role.name,
        attributes.join(", "),
        role.member_of.join(",")
    )
}

/// `\dp` line of stream `name` owned by `owner` with `grants` (role →
/// privilege letters, `a` INSERT before `r` SELECT): the owner's aclitem
/// first, one a line; nothing when nothing is granted.
fn dp_line(name: &str, owner: &str, grants: &BTreeMap<&str, &str>) -> String {
    let acl = if grants.is_empty() {
        String::new()
    } else {
        std::iter::once(format!("{owner}=ar/{owner}"))
            .chain(grants.iter().map(|(role, letters)| format!("{role}={letters}/{owner}")))
            .collect::<Vec<_>>()
            .join("\n")
    };
    format!("public|{name}|table|{acl}||\n")
}

#[tokio::test]
async fn psql_du_and_dp_show_roles_and_grants() {
    let server = TestServer::start();
    let client = server.connect().await;
    exec(&client, "CREATE USER intro_alice WITH PASSWORD 'alice-secret-1'").await;
    exec(&client, "CREATE ROLE intro_bob").await;
    exec(&client, "CREATE USER intro_carol WITH SUPERUSER").await;
    exec(&client, "GRANT pg_write_server_files TO intro_alice").await;
    exec(&client, "CREATE STREAM intro_s (id BIGINT)").await;
    exec(&client, "CREATE STREAM intro_t (id BIGINT)").await;

    let roles = [
        Role {
            name: "intro_alice",
            superuser: false,
            login: true,
            member_of: vec!["pg_write_server_files"],
        },
        Role {
            name: "intro_bob",
            superuser: false,
            login: false,
            member_of: vec![],
        },
        Role {
            name: "intro_carol",
            superuser: true,
            login: true,
            member_of: vec![],
        },
        Role {
            name: "sluice",
            superuser: true,
            login: true,
            member_of: vec![],
        },
    ];
    let expected: String = roles.iter().map(|r| du_line(r) + "\n").collect();
    let du = psql(&server, "\\du");
    assert_eq!(du, expected, "\\du");
    assert!(!du.contains("alice-secret-1") && !du.contains("SCRAM"), "{du}");
    // \du+ adds an (empty) description column.
    assert_eq!(psql(&server, "\\du+ intro_bob"), du_line(&roles[1]) + "|\n");
    // A pattern selects by name, as psql turns it into a regular expression.
    assert_eq!(psql(&server, "\\du intro_a*"), du_line(&roles[0]) + "\n");

    // Nothing granted yet: default privileges, an empty cell.
    let mut grants_s: BTreeMap<&str, &str> = BTreeMap::new();
    let grants_t: BTreeMap<&str, &str> = BTreeMap::new();
    let dp = |s: &BTreeMap<&str, &str>, t: &BTreeMap<&str, &str>| {
        dp_line("intro_s", "sluice", s) + &dp_line("intro_t", "sluice", t)
    };
    assert_eq!(psql(&server, "\\dp"), dp(&grants_s, &grants_t));

    exec(&client, "GRANT SELECT ON intro_s TO intro_alice").await;
    exec(&client, "GRANT INSERT ON STREAM intro_s TO intro_bob").await;
    exec(&client, "GRANT SELECT ON intro_s TO intro_bob").await;
    grants_s.insert("intro_alice", "r");
    grants_s.insert("intro_bob", "ar");
    assert_eq!(psql(&server, "\\dp"), dp(&grants_s, &grants_t), "after GRANT");
    assert_eq!(
        psql(&server, "\\dp intro_s"),
        dp_line("intro_s", "sluice", &grants_s),
        "\\dp with a pattern"
    );

    exec(&client, "REVOKE SELECT ON intro_s FROM intro_bob").await;
    grants_s.insert("intro_bob", "a");
    assert_eq!(psql(&server, "\\dp"), dp(&grants_s, &grants_t), "after REVOKE SELECT");

    // has_table_privilege agrees with the executor: alice reads, bob does not.
    let rows = simple_rows(
        &client,
        "SELECT has_table_privilege('intro_alice', 'intro_s', 'SELECT'), \
         has_table_privilege('intro_bob', 'intro_s', 'SELECT'), \
         has_table_privilege('intro_bob', 'intro_s', 'INSERT')",
    )
    .await;
    assert_eq!(rows, vec![vec![Some("t".into()), Some("f".into()), Some("t".into())]]);

    exec(&client, "REVOKE SELECT ON intro_s FROM intro_alice").await;
    exec(&client, "REVOKE INSERT ON intro_s FROM intro_bob").await;
    grants_s.clear();
    assert_eq!(psql(&server, "\\dp"), dp(&grants_s, &grants_t), "after every REVOKE");

    // Membership revoked, a role dropped: \du follows.
    exec(&client, "REVOKE pg_write_server_files FROM intro_alice").await;
    exec(&client, "DROP ROLE intro_bob").await;
    let after: String = [
        Role {
            name: "intro_alice",
            superuser: false,
            login: true,
            member_of: vec![],
        },
        Role {
            name: "intro_carol",
            superuser: true,
            login: true,
            member_of: vec![],
        },
        Role {
            name: "sluice",
            superuser: true,
            login: true,
            member_of: vec![],
        },
    ]
    .iter()
    .map(|r| du_line(r) + "\n")
    .collect();
    assert_eq!(psql(&server, "\\du"), after, "\\du after REVOKE and DROP ROLE");
}
