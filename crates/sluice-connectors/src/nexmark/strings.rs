//! Random text, as Nexmark's `StringsGenerator` makes it. Every function
//! appends to a caller's buffer, so a batch reuses one allocation.

use arrow::array::StringArray;
use arrow::buffer::{OffsetBuffer, ScalarBuffer};

use super::random::{EventRng, Fraction};

/// The shortest string [`push_string`] draws (before trimming).
const STRING_LENGTH_MIN: u64 = 3;

/// Characters per 64-bit draw in [`push_string`]: each spends about
/// `log2(13) + log2(26)` ≈ 8.4 bits.
const STRING_CHARS_PER_DRAW: usize = 4;

/// Letters per 64-bit draw in [`push_exact_letters`]: 8 spend about 38
/// bits, leaving the last letter 26 bits of precision.
const EXACT_CHARS_PER_DRAW: usize = 8;

/// Appends `3..max_len` (exclusive) random lowercase letters, each replaced by
/// `special` with probability 1/13; if `special` is a space the result is
/// trimmed, as Java's `String.trim` does in the reference.
pub(super) fn push_string(rng: &mut EventRng, max_len: u64, special: char, out: &mut String) {
    debug_assert!(max_len > STRING_LENGTH_MIN);
    let len = STRING_LENGTH_MIN + rng.below(max_len - STRING_LENGTH_MIN);
    let trim = special == ' ';
    let start = out.len();
    let mut left = len as usize;
    while left > 0 {
        let mut fraction = Fraction::new(rng.next_u64());
        let chars = left.min(STRING_CHARS_PER_DRAW);
        for _ in 0..chars {
            if fraction.take(13) == 0 {
                // A leading space would be trimmed away: skip it.
                if !(trim && out.len() == start) {
                    out.push(special);
                }
            } else {
                out.push(char::from(b'a' + fraction.take(26) as u8));
            }
        }
        left -= chars;
    }
    if trim {
        let end = out[start..].trim_end_matches(' ').len();
        out.truncate(start + end);
    }
}

/// Appends exactly `len` random lowercase letters, as bytes: the filler
/// is the bulk of the generated text, and building it as bytes then checking
/// it as UTF-8 once is several times cheaper than pushing `char`s.
pub(super) fn push_exact_letters(rng: &mut EventRng, len: usize, out: &mut Vec<u8>) {
    out.reserve(len);
    let mut left = len;
    while left > 0 {
        let mut fraction = Fraction::new(rng.next_u64());
        let chars = left.min(EXACT_CHARS_PER_DRAW);
        out.extend((0..chars).map(|_| b'a' + fraction.take(26) as u8));
        left -= chars;
    }
}

/// The `extra` column of a batch under construction: rows of filler
/// letters written straight into the column's bytes, checked as UTF-8 once,
/// when the batch is finished. Composing each row in a buffer, checking it
/// and copying it into a `StringBuilder` cost a `from_utf8` call and a copy
/// a row (~10 % of Nexmark q14's profile).
pub(super) struct FillerColumn {
    bytes: Vec<u8>,
    /// Where each row ends in `bytes`, after a first 0.
    offsets: Vec<i32>,
}

impl FillerColumn {
    /// Room for `rows` rows of `bytes` bytes in all.
    pub(super) fn with_capacity(rows: usize, bytes: usize) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        FillerColumn {
            bytes: Vec::with_capacity(bytes),
            offsets,
        }
    }

    /// Appends a row of filler, sized so that `size_so_far` plus its length
    /// is on average `size_average`: uniform within ±20% of the gap, empty
    /// if there is none. Without `rng` (no query reads the column) the row
    /// is empty: the filler is an event's last draws, so skipping them
    /// changes no other column.
    pub(super) fn append(&mut self, rng: Option<&mut EventRng>, size_so_far: usize, size_average: usize) {
        if let Some(rng) = rng
            && size_so_far <= size_average
        {
            let gap = size_average - size_so_far;
            // Java's Math.round(gap * 0.2), in integers.
            let delta = (2 * gap + 5) / 10;
            let len = gap - delta + if delta == 0 { 0 } else { rng.index(2 * delta) };
            push_exact_letters(rng, len, &mut self.bytes);
        }
        let end = i32::try_from(self.bytes.len()).expect("a batch's filler under 2 GiB");
        self.offsets.push(end);
    }

    /// The column: its bytes checked as UTF-8 once (they are lowercase
    /// ASCII letters).
    pub(super) fn finish(self) -> StringArray {
        let offsets = OffsetBuffer::new(ScalarBuffer::from(self.offsets));
        StringArray::try_new(offsets, self.bytes.into(), None).expect("lowercase ASCII letters")
    }
}

/// Appends `value` zero-padded to four digits (`%04d`, `value < 10_000`).
pub(super) fn push_four_digits(value: u64, out: &mut String) {
    debug_assert!(value < 10_000);
    for divisor in [1000, 100, 10, 1] {
        out.push(char::from(b'0' + (value / divisor % 10) as u8));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_trimmed_lowercase_words_of_bounded_length() {
        let mut rng = EventRng::for_event(0, 1);
        let mut out = String::new();
        let mut lengths = Vec::new();
        for _ in 0..2_000 {
            out.clear();
            push_string(&mut rng, 20, ' ', &mut out);
            assert!(out.len() < 20, "{out:?}");
            assert_eq!(out.trim(), out, "not trimmed: {out:?}");
            assert!(out.bytes().all(|b| b == b' ' || b.is_ascii_lowercase()), "{out:?}");
            lengths.push(out.len());
        }
        assert!(lengths.iter().any(|&len| len >= 17));
        assert!(lengths.contains(&3));
    }

    #[test]
    fn special_characters_are_kept_when_not_spaces() {
        let mut rng = EventRng::for_event(0, 2);
        let mut out = String::new();
        for _ in 0..200 {
            push_string(&mut rng, 5, '_', &mut out);
        }
        assert!(out.contains('_'));
        assert!(!out.contains(' '));
    }

    #[test]
    fn extra_hits_the_average_size_within_twenty_percent() {
        let mut rng = EventRng::for_event(0, 3);
        let mut column = FillerColumn::with_capacity(0, 0);
        for _ in 0..1_000 {
            column.append(Some(&mut rng), 32, 100);
        }
        column.append(Some(&mut rng), 120, 100);
        column.append(None, 32, 100);
        let column = column.finish();
        assert_eq!(arrow::array::Array::len(&column), 1_002);
        let mut total = 0;
        for row in 0..1_000 {
            let extra = column.value(row);
            // gap 68, delta round(13.6) = 14: lengths 54..=81.
            assert!((54..=81).contains(&extra.len()), "{}", extra.len());
            assert!(extra.bytes().all(|b| b.is_ascii_lowercase()));
            total += extra.len();
        }
        assert!((66_000..69_000).contains(&total), "{total}");
        assert_eq!(column.value(1_001), "");
        assert_eq!(column.value(1_000), "");
    }

    #[test]
    fn four_digits_are_zero_padded() {
        let mut out = String::new();
        push_four_digits(7, &mut out);
        push_four_digits(9_999, &mut out);
        assert_eq!(out, "00079999");
    }
}
