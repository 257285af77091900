//! Reading a materialized view while it changes: the view `GROUP BY i %
//! 7` of count, sum and max over a sequence i = 0, 1, … read in order by
//! one source instance. Any answer it gives must be the result of a prefix
//! i = 0..=p of that sequence (its rows are published at barriers only),
//! which is computed here by counting.

use super::TestServer;
use std::collections::BTreeMap;
use std::time::Duration;

/// One row of the view: (k, n, s, hi).
pub type ViewRow = (i64, i64, i64, i64);

/// The columns the view must have, as its query selects them.
pub const VIEW_QUERY: &str = "SELECT i % 7 AS k, count(*) AS n, sum(i) AS s, max(i) AS hi";

/// The rows of view `name` on `server`, or `None` while it cannot answer
/// (the server starting, the view not yet published after a restart).
pub async fn view_rows(server: &TestServer, name: &str) -> Option<Vec<ViewRow>> {
    let (client, connection) = tokio_postgres::connect(&server.conn_str(), tokio_postgres::NoTls)
        .await
        .ok()?;
    tokio::spawn(connection);
    let rows = client
        .query(&format!("SELECT k, n, s, hi FROM {name} ORDER BY k"), &[])
        .await
        .ok()?;
    Some(rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect())
}

/// The view's rows when the source has read i = 0..=p.
pub fn groups_up_to(p: i64) -> Vec<ViewRow> {
    let mut groups: BTreeMap<i64, ViewRow> = BTreeMap::new();
    for i in 0..=p {
        let g = groups.entry(i % 7).or_insert((i % 7, 0, 0, i));
        g.1 += 1;
        g.2 += i;
        g.3 = g.3.max(i);
    }
    groups.into_values().collect()
}

/// Reads view `name` until it has read past `at_least` (`i64::MIN`: its
/// first answer), checking that every answer is the result of a prefix of
/// the input; returns the last i that answer counted (-1: none). Counts
/// the answers in `answers`.
pub async fn view_past(server: &TestServer, name: &str, at_least: i64, answers: &mut usize) -> i64 {
    let limit = Duration::from_secs(60);
    let reading = async {
        loop {
            if let Some(rows) = view_rows(server, name).await {
                let p = rows.iter().map(|r| r.3).max().unwrap_or(-1);
                assert_eq!(rows, groups_up_to(p), "the rows of {name} are those of i = 0..={p}");
                *answers += 1;
                if p >= at_least {
                    return p;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(limit, reading)
        .await
        .unwrap_or_else(|_| panic!("{name} did not read past i = {at_least} within {limit:?}"))
}
