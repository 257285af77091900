//! Each function through DataFusion's SQL, as a user reaches it: the
//! expected values are worked out by hand from the functions' definitions
//! (Flink's documentation), not taken from a run.

use super::date_format::java_pattern;
use super::{register, split_index};
use arrow::array::Array;
use arrow::util::display::array_value_to_string;
use datafusion::prelude::SessionContext;

fn ctx() -> SessionContext {
    let ctx = SessionContext::new();
    register(&ctx);
    ctx
}

/// The rows of `sql` as text (`NULL` for null).
async fn rows(sql: &str) -> Vec<Vec<String>> {
    let batches = ctx()
        .sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let mut out = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            out.push(
                b.columns()
                    .iter()
                    .map(|c| {
                        if c.is_null(r) {
                            "NULL".to_string()
                        } else {
                            array_value_to_string(c, r).unwrap()
                        }
                    })
                    .collect(),
            );
        }
    }
    out
}

async fn one(sql: &str) -> Vec<String> {
    rows(sql).await.remove(0)
}

async fn error(sql: &str) -> String {
    let ctx = ctx();
    match ctx.sql(sql).await {
        Err(e) => e.to_string(),
        Ok(df) => df.collect().await.expect_err(sql).to_string(),
    }
}

#[tokio::test]
async fn mod_is_the_remainder_with_the_dividends_sign() {
    assert_eq!(
        one("SELECT MOD(7, 3), MOD(-7, 3), MOD(7, -3), MOD(0, 5), MOD(123 * 5, 123)").await,
        ["1", "-1", "1", "0", "0"]
    );
    assert_eq!(one("SELECT MOD(CAST(7 AS INT), CAST(2 AS SMALLINT))").await, ["1"]);
    assert_eq!(
        one("SELECT MOD(7.5, 2), MOD(NULL, 2), MOD(2, NULL)").await,
        ["1.5", "NULL", "NULL"]
    );
    // Over a column, as Nexmark q2 uses it.
    let sql = "SELECT a FROM (VALUES (122), (123), (246), (250)) AS t(a) WHERE MOD(a, 123) = 0";
    assert_eq!(rows(sql).await, [["123"], ["246"]]);
    let e = error("SELECT MOD(a, 0) FROM (VALUES (1)) AS t(a)").await;
    assert!(e.contains("division by zero"), "{e}");
    let e = error("SELECT MOD('x', 2)").await;
    assert!(e.contains("MOD takes two numbers"), "{e}");
}

#[tokio::test]
async fn hour_reads_the_hour_of_the_day() {
    assert_eq!(
        one(
            "SELECT HOUR(TIMESTAMP '2026-12-03 00:59:59'), HOUR(TIMESTAMP '2026-12-03 23:00:00'), \
             HOUR(CAST(NULL AS TIMESTAMP))"
        )
        .await,
        ["0", "23", "NULL"]
    );
    // 1 800 000 000 000 ms after the epoch is 2027-01-15 08:00:00 UTC.
    assert_eq!(one("SELECT HOUR(to_timestamp_millis(1800000000000))").await, ["8"]);
    let e = error("SELECT HOUR(42)").await;
    assert!(e.contains("HOUR takes a timestamp"), "{e}");
}

#[tokio::test]
async fn date_format_takes_java_patterns() {
    let ts = "TIMESTAMP '2026-03-04 05:06:07.089'";
    assert_eq!(
        one(&format!(
            "SELECT DATE_FORMAT({ts}, 'yyyy-MM-dd'), DATE_FORMAT({ts}, 'HH:mm'), \
             DATE_FORMAT({ts}, 'yyyy-MM-dd HH:mm:ss.SSS'), DATE_FORMAT({ts}, 'd/M/yy h a'), \
             DATE_FORMAT({ts}, 'EEE, MMM d ''at'' H''h''')"
        ))
        .await,
        [
            "2026-03-04",
            "05:06",
            "2026-03-04 05:06:07.089",
            "4/3/26 5 AM",
            "Wed, Mar 4 at 5h"
        ]
    );
    // Text is read as a timestamp; text that is none is NULL.
    assert_eq!(
        one("SELECT DATE_FORMAT('2026-12-03 18:30:00', 'HH:mm'), DATE_FORMAT('no date', 'HH:mm')").await,
        ["18:30", "NULL"]
    );
    let e = error(&format!("SELECT DATE_FORMAT({ts}, 'yyyy-QQ')")).await;
    assert!(e.contains("letter 'Q'"), "{e}");
    // Instants past chrono's range (±262 000 years; a µs timestamp reaches
    // ±292 000) are NULL, between rows that are not, in one array.
    let rows = rows(
        "SELECT DATE_FORMAT(to_timestamp_micros(column1), 'yyyy-MM-dd') FROM (VALUES          (0), (9223372036854775807), (1000), (-9223372036854775807), (86400000000))",
    )
    .await;
    assert_eq!(
        rows.concat(),
        ["1970-01-01", "NULL", "1970-01-01", "NULL", "1970-01-02"]
    );
}

#[test]
fn java_patterns_translate_to_strftime() {
    assert_eq!(java_pattern("yyyy-MM-dd HH:mm:ss").unwrap(), "%Y-%m-%d %H:%M:%S");
    assert_eq!(java_pattern("'100%' yy").unwrap(), "100%% %y");
    assert_eq!(java_pattern("''h''").unwrap(), "'%-I'");
    assert!(java_pattern("'open").unwrap_err().contains("unterminated"));
    assert!(java_pattern("SS").is_err());
}

#[tokio::test]
async fn regexp_extract_takes_a_group_of_the_first_match() {
    let url = "'https://www.nexmark.com/x?channel_id=42&other=1'";
    assert_eq!(
        one(&format!(
            "SELECT REGEXP_EXTRACT({url}, '(&|\\?)channel_id=([^&]*)', 2), \
             REGEXP_EXTRACT('foothebar', 'o+'), REGEXP_EXTRACT('100-200', '(\\d+)-(\\d+)', 1), \
             REGEXP_EXTRACT('100-200', '(\\d+)-(\\d+)', 3), REGEXP_EXTRACT('abc', 'x'), \
             REGEXP_EXTRACT('ab', 'a(x)?b', 1), REGEXP_EXTRACT(NULL, 'a')"
        ))
        .await,
        ["42", "oo", "100", "NULL", "NULL", "NULL", "NULL"]
    );
    // A pattern from a column: invalid ones are NULL row by row.
    let sql = "SELECT REGEXP_EXTRACT('a1b22', p) FROM (VALUES ('[0-9]+'), ('('), ('b(2)')) AS t(p)";
    assert_eq!(rows(sql).await, [["1"], ["NULL"], ["b2"]]);
    // A constant invalid pattern is refused when planned.
    let e = error("SELECT REGEXP_EXTRACT(s, '(') FROM (VALUES ('a')) AS t(s)").await;
    assert!(e.contains("invalid regular expression"), "{e}");
    let e = error("SELECT REGEXP_EXTRACT('a', '(')").await;
    assert!(e.contains("invalid regular expression"), "{e}");
}

#[tokio::test]
async fn split_index_counts_pieces_from_zero() {
    assert_eq!(
        one(
            "SELECT SPLIT_INDEX('a,b,,d', ',', 0), SPLIT_INDEX('a,b,,d', ',', 2), SPLIT_INDEX('a,b,,d', ',', 3), \
             SPLIT_INDEX('a,b,,d', ',', 4), SPLIT_INDEX('a,b', ',', -1), SPLIT_INDEX('a::b', '::', 1), \
             SPLIT_INDEX('', ',', 0), SPLIT_INDEX(NULL, ',', 0)"
        )
        .await,
        ["a", "", "d", "NULL", "NULL", "b", "NULL", "NULL"]
    );
    assert_eq!(split_index("x  y", "", 1), Some("y"));
}

/// `DATE_FORMAT` reuses the text of the row before when a row falls in the
/// same day (hour, minute, second) of the pattern: over timestamps that
/// cross those boundaries (before 1970 too), in time order and shuffled,
/// in UTC and at +05:30 (its days and hours start at :30 in UTC), every
/// row's text equals chrono formatting that row alone with a hand-written
/// strftime. (Casting a timestamp without a zone to +05:30 keeps its wall
/// time, so both zones show the same texts from different instants.)
#[tokio::test]
async fn date_format_reuses_a_text_only_within_its_unit() {
    use chrono::DateTime;
    let mut seed: u64 = 0x5eed;
    let mut next = move |n: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    // From 1969-12-31 23:58:58.5 in steps of up to 40 minutes.
    let mut micros: Vec<i64> = Vec::new();
    let mut t: i64 = -61_500_000;
    for _ in 0..200 {
        micros.push(t);
        t += [1i64, 999_999, 59_000_000, 3_600_000_000, 2_400_000_000][next(5) as usize] + next(1_000_000) as i64;
    }
    let mut shuffled = micros.clone();
    for i in (1..shuffled.len()).rev() {
        shuffled.swap(i, next(i as u64 + 1) as usize);
    }
    let patterns = [
        ("yyyy-MM-dd", "%Y-%m-%d"),
        ("HH:mm", "%H:%M"),
        ("h a", "%-I %p"),
        ("dd HH", "%d %H"),
        ("a", "%p"),
        ("EEE d MMM", "%a %-d %b"),
        ("yyyy-MM-dd HH:mm:ss.SSS", "%Y-%m-%d %H:%M:%S.%3f"),
    ];
    for zone in ["", "+05:30"] {
        for order in [&micros, &shuffled] {
            let values: Vec<String> = order
                .iter()
                .map(|m| match zone {
                    "" => format!("(to_timestamp_micros({m}))"),
                    z => format!("(arrow_cast(to_timestamp_micros({m}), 'Timestamp(Microsecond, Some(\"{z}\"))'))"),
                })
                .collect();
            for (java, strftime) in patterns {
                let got: Vec<String> = rows(&format!(
                    "SELECT DATE_FORMAT(column1, '{java}') FROM (VALUES {})",
                    values.join(", ")
                ))
                .await
                .into_iter()
                .map(|mut r| r.remove(0))
                .collect();
                let want: Vec<String> = order
                    .iter()
                    .map(|m| {
                        DateTime::from_timestamp_micros(*m)
                            .unwrap()
                            .naive_utc()
                            .format(strftime)
                            .to_string()
                    })
                    .collect();
                assert_eq!(got, want, "{java} at {zone:?}");
            }
        }
    }
}

#[tokio::test]
async fn date_format_is_null_beyond_the_years_it_can_show() {
    // chrono shows years up to ±262 142; microseconds since 1970 reach
    // ±292 277 years. A day's first row out of range, then one in range on
    // the same side, and a row in range before and after.
    let max = chrono::DateTime::<chrono::Utc>::MAX_UTC.timestamp_micros();
    let min = chrono::DateTime::<chrono::Utc>::MIN_UTC.timestamp_micros();
    let sql = format!(
        "SELECT DATE_FORMAT(to_timestamp_micros(column1), 'yyyy-MM-dd') FROM (VALUES (0), ({}), ({max}), ({}), ({min}), ({}), (86400000000))",
        max + 1,
        i64::MAX,
        min - 1
    );
    let got: Vec<String> = rows(&sql).await.into_iter().map(|mut r| r.remove(0)).collect();
    assert_eq!(
        got,
        [
            "1970-01-01",
            "NULL",
            "+262142-12-31",
            "NULL",
            "-262143-01-01",
            "NULL",
            "1970-01-02"
        ]
    );
}

/// A pattern from a column is read a row at a time (a constant one is
/// compiled once): each row in its own pattern, the text of the row before
/// not reused across patterns, NULL for a NULL pattern, and a constant
/// NULL pattern NULL throughout.
#[tokio::test]
async fn date_format_takes_a_pattern_a_row() {
    let sql = "SELECT DATE_FORMAT(to_timestamp_micros(column1), column2) FROM (VALUES \
               (0, 'yyyy'), (0, 'HH:mm'), (60000000, 'HH:mm'), (60000000, NULL), (86400000000, 'yyyy-MM-dd'), \
               (86400000000, 'yyyy'))";
    let got: Vec<String> = rows(sql).await.into_iter().map(|mut r| r.remove(0)).collect();
    assert_eq!(got, ["1970", "00:00", "00:01", "NULL", "1970-01-02", "1970"]);
    let sql = "SELECT DATE_FORMAT(to_timestamp_micros(column1), CAST(NULL AS VARCHAR)) FROM (VALUES (0), (1))";
    let got: Vec<String> = rows(sql).await.into_iter().map(|mut r| r.remove(0)).collect();
    assert_eq!(got, ["NULL", "NULL"]);
}

#[tokio::test]
async fn split_bucket_puts_equal_values_in_one_bucket_of_the_range() {
    // 2000 values, each twice, in batches of different sizes (a VALUES list
    // per value and a generated series): equal values share a bucket,
    // every bucket is within 0..8, and all 8 are used.
    let sql = "SELECT v, split_bucket(v, 8) FROM (SELECT value % 2000 AS v FROM generate_series(0, 3999))";
    let mut seen = std::collections::HashMap::new();
    for row in rows(sql).await {
        let bucket: i32 = row[1].parse().unwrap();
        assert!((0..8).contains(&bucket), "{row:?}");
        assert_eq!(*seen.entry(row[0].clone()).or_insert(bucket), bucket, "{row:?}");
    }
    assert_eq!(seen.len(), 2000);
    let used: std::collections::HashSet<i32> = seen.values().copied().collect();
    assert_eq!(used.len(), 8, "{used:?}");
    // The same value in another batch (a row alone) gets the same bucket.
    let alone = one("SELECT split_bucket(CAST(1234 AS BIGINT), 8)").await;
    assert_eq!(alone[0], seen["1234"].to_string());
    // Text too; NULLs share one bucket; one bucket is bucket 0.
    let text = rows("SELECT split_bucket(s, 4) FROM (VALUES ('a'), ('b'), ('a')) AS t(s)").await;
    assert_eq!(text[0], text[2]);
    let nulls = rows("SELECT split_bucket(CAST(s AS VARCHAR), 4) FROM (VALUES (NULL), (NULL)) AS t(s)").await;
    assert_eq!(nulls[0], nulls[1]);
    assert_eq!(one("SELECT split_bucket(42, 1)").await, ["0"]);
    for bad in ["0", "65537", "-1"] {
        let e = error(&format!("SELECT split_bucket(1, {bad})")).await;
        assert!(e.contains("buckets must be from 1 to 65536"), "{bad}: {e}");
    }
}

/// Texts for the splitting tests: pieces of letters, two- and three-byte
/// characters and separators, of every length up to 40 (words of eight
/// bytes and their remainders), from a fixed seed.
fn texts_to_split(count: usize) -> Vec<String> {
    let alphabet = ['a', 'b', '/', ',', 'é', '日', '/', 'z', '&', '/'];
    let mut seed: u64 = 0x5e11;
    (0..count)
        .map(|i| {
            let len = i % 41;
            (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    alphabet[((seed >> 33) % alphabet.len() as u64) as usize]
                })
                .collect()
        })
        .collect()
}

/// [`super::split::nth_piece`] (eight bytes a step) finds the piece the
/// standard library's `split(..).nth(..)` does, for every piece and one
/// past the last, at separators in and across words.
#[test]
fn nth_piece_is_the_standard_split() {
    let mut texts = texts_to_split(2000);
    texts.extend(
        [
            "",
            "/",
            "//",
            "////////",
            "///////a/",
            "abcdefg/",
            "abcdefgh/",
            "abcdefghijklmnop/q",
        ]
        .map(String::from),
    );
    for s in &texts {
        for sep in [b'/', b',', b'&', b'x'] {
            for n in 0..12 {
                assert_eq!(
                    super::split::nth_piece(s, sep, n),
                    s.split(sep as char).nth(n),
                    "piece {n} of {s:?} at {:?}",
                    sep as char
                );
            }
        }
    }
}

/// Runs `calls` over a table `t` of 500 texts (`s`, with NULLs) and an
/// integer column `k` in a context with this crate's functions and in
/// DataFusion's own, asserts that every column is the same, and returns
/// ours.
async fn answers_as_datafusions(calls: &[String]) -> arrow::record_batch::RecordBatch {
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;
    use datafusion::datasource::MemTable;
    use std::sync::Arc;
    let texts = texts_to_split(500);
    let s = StringArray::from_iter(
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| (i % 7 != 3).then_some(t.as_str())),
    );
    let k = Int64Array::from_iter_values(
        (0..texts.len() as i64)
            .map(|i| i % 9 - 4)
            .map(|i| if i == 0 { 2 } else { i }),
    );
    let schema = Arc::new(Schema::new(vec![
        Field::new("s", DataType::Utf8, true),
        Field::new("k", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(s), Arc::new(k)]).unwrap();
    let ours = ctx();
    let theirs = SessionContext::new();
    for c in [&ours, &theirs] {
        let table = MemTable::try_new(schema.clone(), vec![vec![batch.clone()]]).unwrap();
        c.register_table("t", Arc::new(table)).unwrap();
    }
    let sql = format!("SELECT {} FROM t", calls.join(", "));
    let run = |c: SessionContext| {
        let sql = sql.clone();
        async move {
            let batches = c.sql(&sql).await.unwrap().collect().await.unwrap();
            arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap()
        }
    };
    let (a, b) = (run(ours).await, run(theirs).await);
    assert_eq!(a.num_rows(), texts.len());
    for (i, call) in calls.iter().enumerate() {
        assert_eq!(a.column(i).as_ref(), b.column(i).as_ref(), "{call}");
    }
    a
}

/// `split_part` as registered here answers as DataFusion's own over a
/// column with NULLs: the fast path (a one-byte delimiter, a positive
/// position) and the cases it hands to DataFusion (from the end, a longer
/// or multi-byte delimiter, an empty one, a position column).
#[tokio::test]
async fn split_part_answers_as_datafusions() {
    let mut calls: Vec<String> = (1..9).map(|n| format!("split_part(s, '/', {n})")).collect();
    calls.extend(
        [
            "split_part(s, ',', 2)",
            "split_part(s, '/', -1)",
            "split_part(s, '/', -3)",
            "split_part(s, '//', 2)",
            "split_part(s, 'é', 2)",
            "split_part(s, '', 1)",
            "split_part(s, '/', k)",
            "split_part(s, NULL, 1)",
        ]
        .map(String::from),
    );
    let a = answers_as_datafusions(&calls).await;
    let first = a.column(1);
    assert!(
        first.null_count() > 0
            && (0..first.len()).any(|r| !first.is_null(r) && array_value_to_string(first, r).unwrap().len() > 1),
        "the texts have pieces and NULLs"
    );
}

/// [`super::replace::write_replaced`] (eight bytes a step) replaces as the
/// standard library's `str::replace` does, at bytes in and across words,
/// by nothing, by one byte, by more, by a multi-byte character.
#[test]
fn write_replaced_is_the_standard_replace() {
    let mut texts = texts_to_split(2000);
    texts.extend(["", "/", "////////", "///////a/", "abcdefgh/", "/abcdefghijklmnop/q/"].map(String::from));
    let mut out = String::new();
    for s in &texts {
        for from in [b'/', b',', b'a', b'x'] {
            for to in ["", "-", "XY", "é"] {
                out.clear();
                super::replace::write_replaced(s, from, to, &mut out).unwrap();
                assert_eq!(out, s.replace(from as char, to), "{s:?}: {:?} by {to:?}", from as char);
            }
        }
    }
}

/// `replace` as registered here answers as DataFusion's own over a column
/// with NULLs: the fast path (a constant one-byte `from`, a constant `to`)
/// and the cases it hands to DataFusion (a longer or multi-byte `from`, an
/// empty one, a NULL argument, a column `from`).
#[tokio::test]
async fn replace_answers_as_datafusions() {
    let calls = [
        "replace(s, '/', '')",
        "replace(s, 'a', 'é')",
        "replace(s, '/', '//')",
        "replace(s, ',', '-')",
        "replace(s, 'é', 'e')",
        "replace(s, '//', '/')",
        "replace(s, '', 'x')",
        "replace(s, '/', NULL)",
        "replace(s, NULL, 'x')",
        "replace(s, s, 'x')",
        "character_length(s) - character_length(replace(s, 'a', ''))",
    ]
    .map(String::from);
    let a = answers_as_datafusions(&calls).await;
    let first = a.column(0);
    assert!(
        first.null_count() > 0
            && (0..first.len()).any(|r| !first.is_null(r) && !array_value_to_string(first, r).unwrap().is_empty()),
        "the texts have values and NULLs"
    );
}
