//! Which windows a row belongs to. Times in epoch milliseconds; windows are
//! half-open `[start, end)`.

/// The start of the tumbling window of `size_ms` containing `ts`.
pub fn tumble_start(ts: i64, size_ms: i64) -> i64 {
    debug_assert!(size_ms > 0);
    ts - ts.rem_euclid(size_ms)
}

/// The starts of every hopping window (`slide_ms` apart, `size_ms` long)
/// containing `ts`, latest first.
pub fn hop_starts(ts: i64, slide_ms: i64, size_ms: i64) -> impl Iterator<Item = i64> {
    debug_assert!(slide_ms > 0 && size_ms > 0);
    let last = ts - ts.rem_euclid(slide_ms);
    std::iter::successors(Some(last), move |s| Some(s - slide_ms)).take_while(move |s| s + size_ms > ts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tumble_handles_boundaries_and_negative_times() {
        assert_eq!(tumble_start(0, 10), 0);
        assert_eq!(tumble_start(9, 10), 0);
        assert_eq!(tumble_start(10, 10), 10);
        assert_eq!(tumble_start(-1, 10), -10);
    }

    #[test]
    fn hop_lists_every_containing_window() {
        // slide 2, size 10: ts 11 is in windows starting 10, 8, 6, 4, 2.
        assert_eq!(hop_starts(11, 2, 10).collect::<Vec<_>>(), vec![10, 8, 6, 4, 2]);
        // ts 10 is in [10,20), …, [2,12): start 0 ends at 10, excluded.
        assert_eq!(hop_starts(10, 2, 10).count(), 5);
        // size not a multiple of slide: slide 3, size 5, ts 7 → [6,11), [3,8).
        assert_eq!(hop_starts(7, 3, 5).collect::<Vec<_>>(), vec![6, 3]);
        // slide larger than size leaves gaps: ts 4 with slide 5 size 3 is in no window.
        assert_eq!(hop_starts(4, 5, 3).count(), 0);
    }
}
