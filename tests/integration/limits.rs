//! One statement must never take the server down (issue 29): the long and
//! deep shapes BI tools generate either answer or fail with `54000` /
//! `54001`, the session stays usable, and other sessions and pipelines keep
//! running; a panic in statement handling is `XX000` for that statement
//! only; stored pipelines with long expressions restart; random deep and
//! wide expressions never crash the server.

use crate::common::TestServer;
use crate::fuzz;
use crate::support::{describe, exec, simple_rows, within};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Value, json};
use std::time::Duration;
use tokio_postgres::{Client, SimpleQueryMessage};

const LIMIT: Duration = Duration::from_secs(300);

/// What a statement came back with: its rows (text), or its SQLSTATE.
#[derive(Debug, PartialEq)]
enum Answer {
    Rows(Vec<Vec<Option<String>>>),
    Failed(String),
}

/// Runs `sql`, panicking if the connection (not the statement) failed.
async fn answer(client: &Client, sql: &str) -> Answer {
    try_answer(client, sql).await.unwrap_or_else(|why| panic!("{why}"))
}

/// Runs `sql`: what it came back with, or why the connection (not the
/// statement) failed.
async fn try_answer(client: &Client, sql: &str) -> Result<Answer, String> {
    let head: String = sql.chars().take(80).collect();
    match within(&head, LIMIT, client.simple_query(sql)).await {
        Ok(messages) => Ok(Answer::Rows(
            messages
                .into_iter()
                .filter_map(|m| match m {
                    SimpleQueryMessage::Row(r) => Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect()),
                    _ => None,
                })
                .collect(),
        )),
        Err(e) => match e.as_db_error() {
            Some(db) => Ok(Answer::Failed(db.code().code().to_string())),
            None => Err(format!("{head}…: the connection failed: {e}")),
        },
    }
}

async fn assert_alive(client: &Client, what: &str) {
    let rows = within(what, LIMIT, client.simple_query("SELECT 41 + 1"))
        .await
        .unwrap_or_else(|e| panic!("after {what}: the session is gone: {}", describe(&e)));
    let value = rows.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
        _ => None,
    });
    assert_eq!(value.as_deref(), Some("42"), "after {what}");
}

fn joined(n: usize, term: impl Fn(usize) -> String, sep: &str) -> String {
    (0..n).map(term).collect::<Vec<_>>().join(sep)
}

fn or_chain(n: usize) -> String {
    format!(
        "SELECT k FROM lim_s WHERE {} LIMIT 1",
        joined(n, |i| format!("k = {}", 1000 + i), " OR ")
    )
}

fn plus_chain(n: usize) -> String {
    format!("SELECT {}", joined(n, |_| "1".into(), " + "))
}

/// A window over `lim_w` whose WHERE is `n` conjuncts, all true for every row.
fn and_window(n: usize) -> String {
    format!(
        "SELECT window_start, count(*) FROM TUMBLE(lim_w, ts, INTERVAL '10' SECOND) WHERE {} \
         GROUP BY window_start, window_end LIMIT 1",
        joined(n, |i| format!("k >= -{i}"), " AND ")
    )
}

fn parens(n: usize) -> String {
    format!("SELECT {}1{}", "(".repeat(n), ")".repeat(n))
}

fn nested_subqueries(n: usize) -> String {
    let mut sql = "SELECT 1 AS x".to_string();
    for i in 0..n {
        sql = format!("SELECT x FROM ({sql}) AS t{i}");
    }
    sql
}

fn case_branches(n: usize) -> String {
    format!(
        "SELECT CASE 5 {} ELSE -1 END",
        joined(n, |i| format!("WHEN {i} THEN {}", i * 10), " ")
    )
}

fn in_list(n: usize) -> String {
    format!(
        "SELECT k FROM lim_s WHERE k IN ({}) LIMIT 1",
        joined(n, |i| (1000 + i).to_string(), ", ")
    )
}

fn rows(values: &[&str]) -> Answer {
    Answer::Rows(vec![values.iter().map(|v| Some(v.to_string())).collect()])
}

fn failed(code: &str) -> Answer {
    Answer::Failed(code.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn long_and_deep_statements_answer_or_fail_cleanly_and_nothing_else_stops() {
    let server = TestServer::start();
    let other = server.connect().await;
    // A pipeline that runs all along, and a session that watches it.
    exec(
        &other,
        "CREATE STREAM lim_bg (k BIGINT);
         CREATE STREAM lim_bg_big AS SELECT k FROM lim_bg WHERE k > 100;
         INSERT INTO lim_bg VALUES (1), (101), (102);",
    )
    .await;
    let client = server.connect().await;
    exec(
        &client,
        "CREATE STREAM lim_s (k BIGINT);
         INSERT INTO lim_s VALUES (1), (1007), (3);
         CREATE STREAM lim_w (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);
         INSERT INTO lim_w VALUES (1, '2026-11-30 12:00:01'), (2, '2026-11-30 12:00:02'),
                                  (3, '2026-11-30 12:00:09'), (4, '2026-11-30 12:00:30');",
    )
    .await;

    // (statement, what it must come back with). Expected values by hand:
    // lim_s holds 1007 (the 8th term of each list); 1 + … + 1 is n; the
    // window [12:00:00, 12:00:10) holds 3 rows and closes at the 12:00:30
    // row; CASE 5 takes branch 5 (50).
    let cases: Vec<(&str, String, Answer)> = vec![
        ("500-term OR", or_chain(500), rows(&["1007"])),
        ("5000-term OR", or_chain(5_000), rows(&["1007"])),
        ("1000-term +", plus_chain(1_000), rows(&["1000"])),
        ("10000-term +", plus_chain(10_000), failed("54001")),
        (
            "3000-term AND window",
            and_window(3_000),
            rows(&["2026-11-30 12:00:00", "3"]),
        ),
        (
            "30000-term AND window",
            and_window(30_000),
            rows(&["2026-11-30 12:00:00", "3"]),
        ),
        ("5000 parentheses", parens(5_000), failed("54001")),
        ("50000 parentheses", parens(50_000), failed("54001")),
        ("100 nested subqueries", nested_subqueries(100), failed("54001")),
        ("1000 nested subqueries", nested_subqueries(1_000), failed("54001")),
        ("2000-branch CASE", case_branches(2_000), rows(&["50"])),
        ("20000-branch CASE", case_branches(20_000), rows(&["50"])),
        ("50000-item IN", in_list(50_000), rows(&["1007"])),
        ("500000-item IN", in_list(500_000), failed("54000")),
    ];
    for (what, sql, expected) in cases {
        let got = answer(&client, &sql).await;
        assert_eq!(got, expected, "{what}");
        assert_alive(&client, what).await;
        assert_alive(&other, what).await;
    }

    // The same through EXPLAIN, and through the REST API.
    let deep_explain = format!(
        "EXPLAIN SELECT k FROM lim_s WHERE {} > 0",
        joined(10_000, |_| "k".into(), " + ")
    );
    assert_eq!(
        answer(&client, &deep_explain).await,
        failed("54001"),
        "EXPLAIN of a deep query"
    );
    let explain = format!("EXPLAIN {}", and_window(30_000));
    assert!(matches!(answer(&client, &explain).await, Answer::Rows(r) if !r.is_empty()));
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{}/api/v1", server.http_port);
    for (path, sql, status, code) in [
        ("sql", plus_chain(10_000), 400, Some("54001")),
        ("sql", parens(50_000), 400, Some("54001")),
        ("explain", plus_chain(10_000), 400, Some("54001")),
        ("explain", or_chain(5_000), 200, None),
    ] {
        let response = within(
            path,
            LIMIT,
            http.post(format!("{base}/{path}")).json(&json!({ "sql": sql })).send(),
        )
        .await
        .expect("the HTTP server answers");
        assert_eq!(response.status().as_u16(), status, "{path}");
        let body: Value = response.json().await.expect("JSON");
        if let Some(code) = code {
            assert_eq!(body["sqlstate"], code, "{path}: {body}");
        }
    }

    // The pipeline kept running: rows inserted now still come through.
    exec(&other, "INSERT INTO lim_bg VALUES (5), (103)").await;
    let through = simple_rows(&other, "SELECT k FROM lim_bg_big LIMIT 3").await;
    let mut through: Vec<String> = through.into_iter().map(|r| r[0].clone().unwrap()).collect();
    through.sort();
    assert_eq!(through, ["101", "102", "103"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_panic_in_statement_handling_is_xx000_and_the_session_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in_with_env(dir.path(), &[("SLUICE_FAULT_PANIC_STATEMENT", "boom_marker")]);
    let client = server.connect().await;
    // Simple protocol, several statements: the one that panics fails, the
    // ones before it ran.
    exec(&client, "CREATE STREAM pan_s (k BIGINT)").await;
    assert_eq!(answer(&client, "SELECT 1 AS boom_marker").await, failed("XX000"));
    assert_alive(&client, "a panic (simple protocol)").await;
    // Extended protocol: the panic hits while preparing.
    let err = within("prepare", LIMIT, client.query("SELECT 2 AS boom_marker", &[]))
        .await
        .expect_err("the injected panic");
    assert_eq!(err.as_db_error().map(|d| d.code().code()), Some("XX000"), "{err}");
    assert_alive(&client, "a panic (extended protocol)").await;
    // Inside a transaction block the failure leaves the block failed, as
    // any error does, and ROLLBACK ends it.
    exec(&client, "BEGIN").await;
    assert_eq!(answer(&client, "SELECT 3 AS boom_marker").await, failed("XX000"));
    assert_eq!(answer(&client, "SELECT 1").await, failed("25P02"));
    exec(&client, "ROLLBACK").await;
    assert_alive(&client, "a panic in a transaction").await;
    // The REST API: a 500 with the SQLSTATE, and the server goes on.
    let response = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{}/api/v1/sql", server.http_port))
        .json(&json!({ "sql": "SELECT 4 AS boom_marker" }))
        .send()
        .await
        .expect("HTTP answers");
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(body["sqlstate"], "XX000", "{status} {body}");
    assert_eq!(status, 500);
    // Other sessions never noticed.
    let other = server.connect().await;
    exec(&other, "INSERT INTO pan_s VALUES (7)").await;
    assert_eq!(
        simple_rows(&other, "SELECT k FROM pan_s LIMIT 1").await,
        [[Some("7".to_string())]]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn stored_pipelines_with_long_expressions_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = TestServer::start_in(dir.path());
    let client = server.connect().await;
    let conjuncts = joined(3_000, |i| format!("k >= -{i}"), " AND ");
    let sum = joined(400, |_| "k".into(), " + ");
    exec(&client, "CREATE STREAM rs_in (k BIGINT)").await;
    exec(
        &client,
        &format!("CREATE STREAM rs_filtered AS SELECT k FROM rs_in WHERE {conjuncts}"),
    )
    .await;
    exec(
        &client,
        &format!("CREATE STREAM rs_sum AS SELECT k, {sum} AS s FROM rs_in"),
    )
    .await;
    drop(client);
    assert!(server.interrupt().success(), "a clean stop");

    let server = TestServer::start_in(dir.path());
    let client = server.connect().await;
    let running = simple_rows(&client, "SHOW PIPELINES").await;
    let names: Vec<&str> = running.iter().filter_map(|r| r[0].as_deref()).collect();
    assert!(
        names.contains(&"rs_filtered") && names.contains(&"rs_sum"),
        "{running:?}"
    );
    // Memory streams lose their rows with the process; new rows go through.
    exec(&client, "INSERT INTO rs_in VALUES (3), (-5000)").await;
    assert_eq!(
        simple_rows(&client, "SELECT k FROM rs_filtered LIMIT 1").await,
        [[Some("3".to_string())]]
    );
    let sums = simple_rows(&client, "SELECT k, s FROM rs_sum LIMIT 2").await;
    let expected: Vec<Vec<Option<String>>> = [3i64, -5000]
        .iter()
        .map(|k| vec![Some(k.to_string()), Some((k * 400).to_string())])
        .collect();
    assert_eq!(sums, expected);
}

/// A generated expression over the column `seq` (BIGINT), nested and wide
/// in the ways generated SQL is. `repeat` makes a node wide cheaply (its
/// terms written again and again); rendering bounds the whole by a budget
/// of nodes, so a deep tree of wide nodes stays a statement of at most a
/// few hundred kilobytes.
#[derive(Debug, Clone)]
enum Expr {
    Col,
    Lit(i64),
    Mod(i64),
    /// `CAST((t > k AND t > k …) AS BIGINT)`.
    Logic {
        or: bool,
        terms: Vec<(Expr, i64)>,
        repeat: usize,
    },
    Arith {
        op: &'static str,
        terms: Vec<Expr>,
        repeat: usize,
    },
    /// `CASE seq % 10 WHEN 0 THEN … ELSE 0 END`.
    Case {
        branches: Vec<Expr>,
        repeat: usize,
    },
    /// Redundant parentheses, this many deep.
    Parens(usize, Box<Expr>),
    /// A scalar subquery (over a constant: it cannot see `seq`).
    Scalar(Box<Expr>),
    /// `CAST(seq IN (0, 1, …) AS BIGINT)` with this many items.
    InList(usize),
}

fn expr() -> impl Strategy<Value = Expr> {
    let leaf = prop_oneof![
        Just(Expr::Col),
        (-5..100i64).prop_map(Expr::Lit),
        (1..7i64).prop_map(Expr::Mod),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        let repeat = prop_oneof![1..4usize, 1..6000usize];
        prop_oneof![
            (any::<bool>(), vec((inner.clone(), -10..50i64), 1..4), repeat.clone())
                .prop_map(|(or, terms, repeat)| Expr::Logic { or, terms, repeat }),
            (select(vec!["+", "-", "*"]), vec(inner.clone(), 1..4), repeat.clone())
                .prop_map(|(op, terms, repeat)| Expr::Arith { op, terms, repeat }),
            (vec(inner.clone(), 1..4), repeat).prop_map(|(branches, repeat)| Expr::Case { branches, repeat }),
            (1..80usize, inner.clone()).prop_map(|(d, e)| Expr::Parens(d, Box::new(e))),
            inner.prop_map(|e| Expr::Scalar(Box::new(e))),
            (2..6000usize).prop_map(Expr::InList),
        ]
    })
}

impl Expr {
    /// The SQL text, at most about `budget` nodes, `col` standing for the
    /// column.
    fn render(&self, budget: usize, col: &str) -> String {
        // How many terms a wide node writes, and each one's budget.
        let widen = |n: usize, repeat: usize, cap: usize| {
            let width = (n * repeat).clamp(2, budget.clamp(2, cap));
            (width, (budget / width).max(1))
        };
        match self {
            Expr::Col => col.to_string(),
            Expr::Lit(n) => n.to_string(),
            Expr::Mod(k) => format!("({col} % {k})"),
            _ if budget <= 1 => col.to_string(),
            Expr::Logic { or, terms, repeat } => {
                let (width, part) = widen(terms.len(), *repeat, 6000);
                let op = if *or { " OR " } else { " AND " };
                let text: Vec<String> = (0..width)
                    .map(|i| {
                        let (t, k) = &terms[i % terms.len()];
                        format!("{} > {k}", t.render(part, col))
                    })
                    .collect();
                format!("CAST(({}) AS BIGINT)", text.join(op))
            }
            Expr::Arith { op, terms, repeat } => {
                let (width, part) = widen(terms.len(), *repeat, 1500);
                let text: Vec<String> = (0..width).map(|i| terms[i % terms.len()].render(part, col)).collect();
                format!("({})", text.join(&format!(" {op} ")))
            }
            Expr::Case { branches, repeat } => {
                let (width, part) = widen(branches.len(), *repeat, 6000);
                let text: Vec<String> = (0..width)
                    .map(|i| format!("WHEN {i} THEN {}", branches[i % branches.len()].render(part, col)))
                    .collect();
                format!("CASE {col} % 10 {} ELSE 0 END", text.join(" "))
            }
            Expr::Parens(depth, e) => {
                format!(
                    "{}{}{}",
                    "(".repeat(*depth),
                    e.render(budget - 1, col),
                    ")".repeat(*depth)
                )
            }
            Expr::Scalar(e) => format!("(SELECT {} AS v)", e.render(budget - 1, "7")),
            Expr::InList(n) => {
                let items: Vec<String> = (0..(*n).min(budget.max(2))).map(|i| i.to_string()).collect();
                format!("CAST({col} IN ({}) AS BIGINT)", items.join(", "))
            }
        }
    }
}

/// A generated statement: a batch query, a continuous query over a bounded
/// stream (with or without a window, or an aggregate without one: a
/// changelog), or EXPLAIN of one; its expression
/// gets a budget of 10 to 10 000 nodes.
#[derive(Debug, Clone)]
struct Statement {
    kind: usize,
    budget: usize,
    expr: Expr,
}

impl Statement {
    fn sql(&self) -> String {
        let e = self.expr.render(self.budget, "seq");
        match self.kind {
            0 => format!("SELECT {}", self.expr.render(self.budget, "3")),
            1 => format!("SELECT seq, {e} FROM fz_rows"),
            2 => format!(
                "SELECT window_start, count(*), sum({e}) FROM TUMBLE(fz_rows, ts, INTERVAL '1' SECOND) \
                 WHERE {e} IS NOT NULL GROUP BY window_start, window_end"
            ),
            3 => format!("SELECT seq % 7, count(*), sum({e}), max({e}) FROM fz_rows GROUP BY seq % 7"),
            _ => format!("EXPLAIN SELECT seq FROM fz_rows WHERE {e} > 0"),
        }
    }
}

fn statement() -> impl Strategy<Value = Statement> {
    (0..5usize, select(vec![10usize, 100, 1000, 10_000]), expr()).prop_map(|(kind, budget, expr)| Statement {
        kind,
        budget,
        expr,
    })
}

/// Generated deep and wide statements: each is answered or refused with a
/// SQLSTATE other than `XX000`, through parse → plan → run and through
/// EXPLAIN, and the session goes on. 16 cases by default
/// (`SLUICE_FUZZ_CASES`, `SLUICE_FUZZ_SEED`, `SLUICE_FUZZ_SECONDS`: see
/// tests/support/fuzz.rs); `scripts/fuzz.sh` runs more.
#[test]
fn random_deep_and_wide_statements_never_crash_the_server() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = TestServer::start();
    let client = rt.block_on(server.connect());
    rt.block_on(exec(
        &client,
        "CREATE STREAM fz_rows (
            seq BIGINT, ts AS TO_TIMESTAMP_LTZ(seq * 100, 3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
         ) WITH ('connector' = 'datagen', 'number-of-rows' = '50', 'rows-per-second' = '0',
                 'fields.seq.kind' = 'sequence', 'fields.seq.start' = '1', 'fields.seq.end' = '50')",
    ));
    let outcomes = std::cell::RefCell::new(std::collections::BTreeMap::<String, usize>::new());
    // The statement the server died on: once it has, every later case
    // (proptest's shrinking included) fails at once naming that statement,
    // not whatever smaller input the shrinking tried against a dead server.
    let died_on = std::cell::RefCell::new(None::<String>);
    let target = fuzz::fuzz(
        "SQL fuzz",
        16,
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fuzz-regressions/sql.txt"),
        32,
    );
    target.run(statement(), |statement| {
        let sql = statement.sql();
        if let Some(first) = died_on.borrow().as_ref() {
            return Err(TestCaseError::fail(format!("the server died earlier, on: {first}")));
        }
        let died = |why: String| {
            let shown: String = sql.chars().take(4000).collect();
            let first = format!("{shown} ({} bytes in all): {why}", sql.len());
            eprintln!("the server died on: {first}");
            *died_on.borrow_mut() = Some(first.clone());
            TestCaseError::fail(first)
        };
        rt.block_on(async {
            let outcome = match try_answer(&client, &sql).await.map_err(died)? {
                Answer::Rows(_) => "answered".to_string(),
                Answer::Failed(code) => code,
            };
            prop_assert_ne!(&outcome, "XX000", "an internal error for {}", sql);
            *outcomes.borrow_mut().entry(outcome).or_default() += 1;
            if let Answer::Failed(code) = try_answer(&client, &format!("EXPLAIN {sql}")).await.map_err(died)? {
                prop_assert_ne!(code, "XX000", "an internal error explaining {}", sql);
            }
            assert_alive(&client, "a generated statement").await;
            Ok(())
        })
    });
    eprintln!("fuzz outcomes: {:?}", outcomes.borrow());
}
