//! Numbers as the reports print them.

/// A count in SI units: "1.23 M", "456 k", "78".
pub fn si(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0} k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}
