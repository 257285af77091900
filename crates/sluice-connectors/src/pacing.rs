//! When a paced generator (`nexmark` with `'events.per.second'`, `datagen`
//! with `'rows-per-second'`) emits: its rows fall due one by one, at the
//! rate; they are emitted in batches.
//!
//! Emitting each row as soon as it fell due made batches of a few dozen rows
//! at millions of rows a second: generating a batch takes about as long as
//! the next few dozen rows take to fall due, so the source never slept and
//! every operator downstream paid its per-batch cost for every few dozen
//! rows (a paced Nexmark q0 used both cores at half the rate one core
//! sustains unpaced). Rows now gather for [`LINGER`] at most, as a Kafka
//! producer's `linger.ms` or Flink's buffer timeout let records gather,
//! but in the spirit of this engine's adaptive batching: a full batch goes
//! at once, and at a low rate a row waits at most [`LINGER`].

use std::time::{Duration, Instant};

/// Longest a due row waits for others to join its batch.
pub const LINGER: Duration = Duration::from_millis(1);

/// When to emit the next batch, given when its first row fell (or falls)
/// due and when a full batch will be due: [`LINGER`] after the first, or as
/// soon as the batch is full, whichever comes first. Never before the first
/// row is due.
pub fn emit_at(first_due: Instant, full_batch_due: Instant) -> Instant {
    (first_due + LINGER).min(full_batch_due.max(first_due))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_waits_for_the_linger_or_until_it_is_full() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        // A slow rate: the first row waits the linger, not for a full batch.
        assert_eq!(emit_at(t, t + ms(500)), t + LINGER);
        // A fast rate: a full batch is due before the linger ends.
        assert_eq!(
            emit_at(t, t + Duration::from_micros(300)),
            t + Duration::from_micros(300)
        );
        // Behind the pace: the first row waited its linger long ago; a
        // time already past, so the batch goes now.
        assert_eq!(emit_at(t - ms(10), t - ms(5)), t - ms(9));
        // Never before the first row is due.
        assert_eq!(emit_at(t + ms(3), t), t + ms(3));
    }
}
