//! When a paced generator (`nexmark` with `'events.per.second'`, `datagen`
//! with `'rows-per-second'`) emits: its rows fall due one by one, at the
//! rate; they are emitted in batches.
//!
//! Emitting each row as soon as it fell due made batches of a few dozen rows
//! at millions of rows a second: generating a batch takes about as long as
//! the next few dozen rows take to fall due, so the source never slept and
//! every operator downstream paid its per-batch cost for every few dozen
//! rows (a paced Nexmark q0 used both cores at half the rate one core
//! sustains unpaced). Now the first due row waits [`LINGER`], unless a full
//! batch is due sooner, as a Kafka producer's `linger.ms` or Flink's buffer
//! timeout let records gather. The sleep is on tokio's timer, which rounds
//! a deadline up to its next millisecond tick, so in a steady stream a
//! batch goes every tick with the rows of the last millisecond, each
//! having waited half a millisecond on average. (A linger of a whole
//! millisecond made it every other tick: q0's median latency rose from 1.2
//! to 3.2 ms.)

use std::time::{Duration, Instant};

/// How long a due row waits for others to join its batch, at least (the
/// timer's next tick after it, at most).
pub const LINGER: Duration = Duration::from_micros(250);

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
        let soon = LINGER / 2;
        assert_eq!(emit_at(t, t + soon), t + soon);
        // Behind the pace: the first row waited its linger long ago; a
        // time already past, so the batch goes now.
        assert_eq!(emit_at(t - ms(10), t - ms(5)), t - ms(10) + LINGER);
        // Never before the first row is due.
        assert_eq!(emit_at(t + ms(3), t), t + ms(3));
    }
}
