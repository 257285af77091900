//! Event time. Timestamps are milliseconds since the Unix epoch (UTC) in the
//! runtime; columns are Arrow `Timestamp(Millisecond)` unless a user declares
//! otherwise.

use serde::{Deserialize, Serialize};

/// A watermark: no row with an event time at or below `0` will follow
/// (rows at or below it are late). `i64::MIN` means "nothing known yet",
/// `i64::MAX` means end of input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Watermark(pub i64);

impl Watermark {
    /// Nothing is known yet.
    pub const MIN: Watermark = Watermark(i64::MIN);
    /// End of input: every window may fire.
    pub const MAX: Watermark = Watermark(i64::MAX);

    /// Display form for SHOW PIPELINES and the API.
    pub fn display(self) -> String {
        match self.0 {
            i64::MIN => String::new(),
            i64::MAX => "end of input".to_string(),
            ms => ts_ms_to_string(ms),
        }
    }
}

/// Wall-clock now in epoch milliseconds.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// `2026-11-30 12:00:00.000` for an epoch-millisecond value.
pub fn ts_ms_to_string(ms: i64) -> String {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) => t.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
        None => ms.to_string(),
    }
}

/// A duration written as `'10s'`, `'500ms'`, `'2m'`, `'1h'` or plain
/// milliseconds, in milliseconds.
pub fn parse_duration_ms(text: &str) -> Option<u64> {
    let t = text.trim().to_ascii_lowercase();
    let (num, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t.as_str(), "ms"),
    };
    let n: u64 = num.parse().ok()?;
    let factor = match unit.trim() {
        "ms" => 1,
        "s" | "sec" | "second" | "seconds" => 1000,
        "m" | "min" | "minute" | "minutes" => 60_000,
        "h" | "hour" | "hours" => 3_600_000,
        _ => return None,
    };
    n.checked_mul(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_every_unit() {
        assert_eq!(parse_duration_ms("10s"), Some(10_000));
        assert_eq!(parse_duration_ms("250ms"), Some(250));
        assert_eq!(parse_duration_ms(" 2m "), Some(120_000));
        assert_eq!(parse_duration_ms("1h"), Some(3_600_000));
        assert_eq!(parse_duration_ms("42"), Some(42));
        assert_eq!(parse_duration_ms("5 parsecs"), None);
        assert_eq!(parse_duration_ms(""), None);
    }

    #[test]
    fn watermark_display_marks_the_ends() {
        assert_eq!(Watermark::MIN.display(), "");
        assert_eq!(Watermark::MAX.display(), "end of input");
        assert_eq!(Watermark(1_796_040_000_000).display(), "2026-11-30 12:00:00.000");
    }
}
