//! A clock thread that wakes paced sources.
//!
//! Tokio's timer is driven by the runtime's workers: expired timers are
//! only seen when a worker parks or between task polls, so on a runtime
//! whose workers are busy a sub-millisecond sleep can return several
//! milliseconds late. Paced sources stamp rows with the time they were due,
//! so that lateness is end-to-end latency. This thread ticks on its own
//! (an OS sleep) and wakes the sources through a watch channel; it sleeps
//! long while no paced source listens.

use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How often the clock ticks while a paced source listens.
pub const TICK: Duration = Duration::from_micros(500);

static CLOCK: OnceLock<watch::Sender<()>> = OnceLock::new();

/// A receiver of the clock's ticks (starts the clock thread once).
pub fn ticks() -> watch::Receiver<()> {
    CLOCK
        .get_or_init(|| {
            let (tx, _) = watch::channel(());
            let clock = tx.clone();
            std::thread::Builder::new()
                .name("sluice-pacer".into())
                .spawn(move || {
                    loop {
                        if clock.receiver_count() == 0 {
                            std::thread::sleep(Duration::from_millis(20));
                            continue;
                        }
                        std::thread::sleep(TICK);
                        clock.send_replace(());
                    }
                })
                .expect("spawning the pacer thread");
            tx
        })
        .subscribe()
}

/// Waits until `deadline` on the clock's ticks (at most one tick late,
/// plus the OS's wake-up jitter).
pub async fn sleep_until(deadline: Instant, ticks: &mut watch::Receiver<()>) {
    while Instant::now() < deadline {
        if ticks.changed().await.is_err() {
            tokio::time::sleep_until(deadline.into()).await;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn never_wakes_before_the_deadline() {
        let mut ticks = ticks();
        for micros in [0, 100, 700, 3_000] {
            let deadline = Instant::now() + Duration::from_micros(micros);
            sleep_until(deadline, &mut ticks).await;
            assert!(Instant::now() >= deadline);
        }
    }
}
