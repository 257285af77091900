//! Catalog introspection from the role catalog, with the real `psql`: `\du`
//! lists the roles with their attributes and memberships, `\dp` shows the
//! grants after GRANT and REVOKE. The expected text is computed from what
//! the test set up (a small model of roles and grants, formatted by psql's
//! rules), never taken from the server. The privilege functions fail with
//! Postgres' SQLSTATEs, as tokio-postgres and psql receive them.

use crate::common::TestServer;
use crate::support::{describe, exec, simple_rows, sqlstate};
use std::collections::BTreeMap;
use std::process::{Command, Stdio};

/// The real `psql` as `sluice` (trust) on `server`, with `flags`.
fn run_psql(server: &TestServer, flags: &[&str]) -> std::process::Output {
    Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &server.pg_port.to_string(),
            "-U",
            "sluice",
            "-d",
            "sluice",
            "-X",
            "-w",
        ])
        .args(flags)
        .env("PGCONNECT_TIMEOUT", "10")
        .env_remove("PGPASSWORD")
        .stdin(Stdio::null())
        .output()
        .expect("run psql (install postgresql-client)")
}

/// `psql -A -t -c meta` as `sluice` (trust): unaligned rows, no headers.
fn psql(server: &TestServer, meta: &str) -> String {
    let out = run_psql(server, &["-A", "-t", "-c", meta]);
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

    // PUBLIC: a grant to every role, `=r/owner` in the ACL (an empty
    // grantee), asked about as the role `public`; no role can be named so.
    let mut grants_t = grants_t;
    exec(&client, "GRANT SELECT ON intro_t TO PUBLIC").await;
    grants_t.insert("", "r");
    assert_eq!(
        psql(&server, "\\dp"),
        dp(&grants_s, &grants_t),
        "after GRANT … TO PUBLIC"
    );
    let public = "SELECT has_table_privilege('public', 'intro_t', 'SELECT'), \
         has_table_privilege('public', 'intro_s', 'SELECT'), \
         has_table_privilege('intro_bob', 'intro_t', 'SELECT'), \
         has_table_privilege('public', 'intro_t', 'INSERT')";
    let rows = simple_rows(&client, public).await;
    let t_f = |v: [bool; 4]| vec![v.map(|b| Some(if b { "t" } else { "f" }.to_string())).to_vec()];
    assert_eq!(rows, t_f([true, false, true, false]));
    let reserved = client.batch_execute("CREATE ROLE public").await.unwrap_err();
    assert_eq!(reserved.code().map(|c| c.code()), Some("42939"), "{reserved:?}");
    exec(&client, "REVOKE SELECT ON intro_t FROM PUBLIC").await;
    grants_t.clear();
    assert_eq!(simple_rows(&client, public).await, t_f([false, false, false, false]));

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

/// `psql -c sql` with `VERBOSITY verbose`, which prints an error's SQLSTATE:
/// psql's stderr (it must fail).
fn psql_error(server: &TestServer, sql: &str) -> String {
    let out = run_psql(server, &["-v", "VERBOSITY=verbose", "-c", sql]);
    assert!(!out.status.success(), "psql succeeded on {sql}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// An unknown role is `42704`, an unknown relation `42P01`, an unknown
/// column `42703` and an unknown privilege word `22023`, as Postgres
/// reports them (not DataFusion's `22000`), over the simple and the
/// extended protocol and in psql.
#[tokio::test]
async fn privilege_functions_fail_with_postgres_sqlstates() {
    let server = TestServer::start();
    let client = server.connect().await;
    exec(&client, "CREATE STREAM intro_p (id BIGINT)").await;
    exec(&client, "CREATE ROLE intro_p_reader").await;
    let cases = [
        (
            "SELECT has_table_privilege('nosuchuser', 'intro_p', 'SELECT')",
            "42704",
            "role \"nosuchuser\" does not exist",
        ),
        (
            "SELECT has_table_privilege('nosuchtable', 'SELECT')",
            "42P01",
            "relation \"nosuchtable\" does not exist",
        ),
        (
            "SELECT has_table_privilege('intro_p', 'SELECT, FLY')",
            "22023",
            "unrecognized privilege type: \"FLY\"",
        ),
        (
            "SELECT has_column_privilege('intro_p_reader', 'intro_p', 'nosuchcol', 'SELECT')",
            "42703",
            "column \"nosuchcol\" of relation \"intro_p\" does not exist",
        ),
        (
            "SELECT has_column_privilege('intro_p', 'id', 'DELETE')",
            "22023",
            "unrecognized privilege type: \"DELETE\"",
        ),
        (
            "SELECT has_any_column_privilege('nosuchuser', 'intro_p', 'SELECT')",
            "42704",
            "role \"nosuchuser\" does not exist",
        ),
        (
            "SELECT pg_has_role('intro_p_reader', 'nosuchrole', 'MEMBER')",
            "42704",
            "role \"nosuchrole\" does not exist",
        ),
        (
            "SELECT pg_has_role('intro_p_reader', 'OWNER')",
            "22023",
            "unrecognized privilege type: \"OWNER\"",
        ),
        // Row by row over a catalog table, not only a folded constant.
        (
            "SELECT has_table_privilege(rolname, 'intro_p', 'FLY') FROM pg_roles",
            "22023",
            "unrecognized privilege type: \"FLY\"",
        ),
    ];
    for (sql, code, message) in cases {
        let simple = client.simple_query(sql).await.expect_err(sql);
        assert_eq!(
            sqlstate(&simple),
            Some(code),
            "simple protocol, {sql}: {}",
            describe(&simple)
        );
        assert_eq!(simple.as_db_error().map(|d| d.message()), Some(message), "{sql}");
        let extended = client.query(sql, &[]).await.expect_err(sql);
        assert_eq!(
            sqlstate(&extended),
            Some(code),
            "extended protocol, {sql}: {}",
            describe(&extended)
        );
        let stderr = psql_error(&server, sql);
        assert!(
            stderr.contains(&format!("ERROR:  {code}: {message}")),
            "psql, {sql}: {stderr}"
        );
    }
    // The session goes on, and what exists is answered.
    let rows = simple_rows(
        &client,
        "SELECT has_table_privilege('intro_p_reader', 'intro_p', 'SELECT'), \
         has_column_privilege('intro_p_reader', 'intro_p', 'id', 'SELECT'), \
         pg_has_role('intro_p_reader', 'intro_p_reader', 'MEMBER')",
    )
    .await;
    assert_eq!(rows, vec![vec![Some("f".into()), Some("f".into()), Some("t".into())]]);
}
