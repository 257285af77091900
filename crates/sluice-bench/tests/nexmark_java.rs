//! `benches/flink/NexmarkRows.java`, the Flink peer's Nexmark source, makes
//! exactly the rows of Sluice's own generator: compiled with `javac`, run as
//! `java NexmarkRows …` and compared line by line with rows of
//! [`NexmarkGenerator`], for every table, all columns and projections (the
//! Rust generator skipping the same columns), under two time models. Needs a
//! JDK 17 (`javac` and `java` on the PATH, or under `JAVA_HOME`): without one
//! the test fails, it does not skip.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Int64Type, TimeUnit, TimestampMillisecondType};
use sluice_connectors::nexmark::{NexmarkConfig, NexmarkGenerator, NexmarkTable, nexmark_schema};

/// Sluice's default base time.
const BASE_TIME_MS: i64 = 1_700_000_000_000;
/// Global events per case (of which 92% bids, 6% auctions, 2% persons).
const EVENTS: u64 = 200_000;

/// A JDK tool: `$JAVA_HOME/bin/<tool>` if there is one, else from the PATH.
fn jdk_tool(tool: &str) -> PathBuf {
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        let path = Path::new(&home).join("bin").join(tool);
        if path.is_file() {
            return path;
        }
    }
    PathBuf::from(tool)
}

/// The directory holding the compiled `NexmarkRows.class` (compiled once per
/// test binary).
fn classes() -> &'static Path {
    static CLASSES: OnceLock<PathBuf> = OnceLock::new();
    CLASSES.get_or_init(|| {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/flink/NexmarkRows.java");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nexmark_java-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the class directory");
        let javac = jdk_tool("javac");
        let output = Command::new(&javac)
            .args(["-Xlint:all", "-Werror", "--release", "17", "-d"])
            .arg(&dir)
            .arg(&source)
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {} ({e}): this test needs a JDK 17 (javac and java on the PATH, or JAVA_HOME)",
                    javac.display()
                )
            });
        assert!(
            output.status.success(),
            "javac {} failed:\n{}{}",
            source.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        dir
    })
}

/// One comparison: a table's rows among the first `events` global events.
struct Case {
    table: NexmarkTable,
    seed: u64,
    base_time_ms: i64,
    events_per_second: u64,
    events: u64,
    /// Comma-separated column names, or `*`.
    columns: &'static str,
}

impl Case {
    /// Schema numbers of the wanted columns.
    fn wanted(&self) -> Vec<usize> {
        let schema = nexmark_schema(self.table);
        if self.columns == "*" {
            return (0..schema.fields().len()).collect();
        }
        let mut wanted: Vec<usize> = self
            .columns
            .split(',')
            .map(|name| schema.index_of(name).unwrap_or_else(|_| panic!("no column {name}")))
            .collect();
        wanted.sort_unstable();
        wanted
    }

    /// The Rust generator's rows, formatted as `java NexmarkRows` prints them:
    /// the wanted columns, tab-separated, timestamps as ms. The generator
    /// skips every other column, as the connector does for a query.
    fn rust_lines(&self) -> Vec<String> {
        let config = NexmarkConfig {
            seed: self.seed,
            events_max: Some(self.events),
            base_time_ms: self.base_time_ms,
            events_per_second_for_timestamps: self.events_per_second,
        };
        let schema = nexmark_schema(self.table);
        let wanted = self.wanted();
        let unread: Vec<usize> = (0..schema.fields().len()).filter(|c| !wanted.contains(c)).collect();
        let mut generator = NexmarkGenerator::new(config, self.table, 0, 1);
        generator.skip_columns(&unread);
        let mut lines = Vec::new();
        while let Some(batch) = generator.next_batch(4096) {
            let mut rows = vec![String::new(); batch.num_rows()];
            for (i, &c) in wanted.iter().enumerate() {
                let column = batch.column(c);
                for (row, line) in rows.iter_mut().enumerate() {
                    if i > 0 {
                        line.push('\t');
                    }
                    assert!(column.is_valid(row));
                    match column.data_type() {
                        DataType::Int64 => line.push_str(&column.as_primitive::<Int64Type>().value(row).to_string()),
                        DataType::Timestamp(TimeUnit::Millisecond, None) => {
                            line.push_str(&column.as_primitive::<TimestampMillisecondType>().value(row).to_string())
                        }
                        DataType::Utf8 => line.push_str(column.as_string::<i32>().value(row)),
                        other => panic!("unexpected column type {other}"),
                    }
                }
            }
            lines.extend(rows);
        }
        lines
    }

    fn java_output(&self) -> String {
        let java = jdk_tool("java");
        let output = Command::new(&java)
            .arg("-cp")
            .arg(classes())
            .arg("NexmarkRows")
            .args([
                self.table.name().to_owned(),
                self.seed.to_string(),
                self.base_time_ms.to_string(),
                self.events_per_second.to_string(),
                self.events.to_string(),
                self.columns.to_owned(),
            ])
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {} ({e}): this test needs a JDK 17 (javac and java on the PATH, or JAVA_HOME)",
                    java.display()
                )
            });
        assert!(
            output.status.success(),
            "java NexmarkRows failed for {}: {}",
            self.describe(),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("java prints UTF-8")
    }

    fn describe(&self) -> String {
        format!(
            "{} [{}] seed {} base {} at {} events/s over {} events",
            self.table.name(),
            self.columns,
            self.seed,
            self.base_time_ms,
            self.events_per_second,
            self.events
        )
    }

    /// Compares every row; returns how many.
    fn check(&self) -> usize {
        let expected = self.rust_lines();
        let output = self.java_output();
        let got: Vec<&str> = output.lines().collect();
        // The table's share of the event sequence, by the 1:3:46 pattern.
        let (blocks, rest) = (self.events / 50, self.events % 50);
        let share = match self.table {
            NexmarkTable::Person => blocks + rest.min(1),
            NexmarkTable::Auction => blocks * 3 + rest.saturating_sub(1).min(3),
            NexmarkTable::Bid => blocks * 46 + rest.saturating_sub(4),
        };
        assert_eq!(expected.len() as u64, share, "Rust rows of {}", self.describe());
        for (row, (want, have)) in expected.iter().zip(&got).enumerate() {
            assert_eq!(
                have,
                want,
                "row {row} of {} differs (Java left, Rust right)",
                self.describe()
            );
        }
        assert_eq!(got.len(), expected.len(), "Java rows of {}", self.describe());
        assert!(
            got.iter().any(|line| !line.is_empty()),
            "{}: nothing compared",
            self.describe()
        );
        expected.len()
    }
}

/// All columns of every table and the projections of typical queries.
const CASES: [(NexmarkTable, &str); 10] = [
    (NexmarkTable::Person, "*"),
    (NexmarkTable::Auction, "*"),
    (NexmarkTable::Bid, "*"),
    (NexmarkTable::Bid, "auction,price"),
    (NexmarkTable::Bid, "auction,bidder,price,date_time"),
    (NexmarkTable::Bid, "auction,bidder,price,channel,date_time"),
    (NexmarkTable::Bid, "url,extra"),
    (NexmarkTable::Auction, "id,seller,category,date_time,expires"),
    (NexmarkTable::Auction, "item_name,reserve,extra"),
    (NexmarkTable::Person, "id,name,state"),
];

fn check_time_model(events_per_second: u64) {
    let mut compared = 0;
    for (table, columns) in CASES {
        compared += Case {
            table,
            seed: 0,
            base_time_ms: BASE_TIME_MS,
            events_per_second,
            events: EVENTS,
            columns,
        }
        .check();
    }
    println!("{compared} rows equal at {events_per_second} events/s");
}

#[test]
fn java_rows_equal_rust_rows_at_ten_thousand_events_per_second() {
    check_time_model(10_000);
}

#[test]
fn java_rows_equal_rust_rows_at_ten_million_events_per_second() {
    check_time_model(10_000_000);
}

/// A seed with the top bit set (unsigned on both sides), a base time of 0 and
/// a slow clock (long auctions: `expires` draws from large bounds).
#[test]
fn java_rows_equal_rust_rows_for_a_high_seed_and_a_slow_clock() {
    let mut compared = 0;
    for table in NexmarkTable::ALL {
        compared += Case {
            table,
            seed: 0xDEAD_BEEF_CAFE_F00D,
            base_time_ms: 0,
            events_per_second: 3,
            events: 30_011,
            columns: "*",
        }
        .check();
    }
    println!("{compared} rows equal");
}
