//! A low-priority thread for checkpoint work off the data path.
//!
//! Encoding a large state (Arrow IPC, CRC) and writing it is CPU work of up
//! to seconds per checkpoint. On tokio's blocking pool it competes with the
//! runtime's workers as an equal: on a machine whose cores the pipeline
//! keeps busy, tasks then wait behind it and end-to-end latency jumps for
//! the length of the write. This thread runs at a lower scheduling
//! priority (`nice` [`NICE`]), so the tasks go first and checkpoints use
//! the time they leave idle; under full load it still gets about a tenth of
//! a core (the kernel's weights for nice 0 and 10 are 1024 and 110), so a
//! checkpoint is slowed, never starved.
//!
//! Jobs queue in a bounded channel ([`QUEUE_MAX`]; a full queue makes the
//! caller wait) and run one at a time.

use sluice_types::{Error, Result};
use std::sync::OnceLock;
use tokio::sync::{mpsc, oneshot};

/// The thread's nice value (Linux applies it to the calling thread only).
pub const NICE: i32 = 10;

/// Jobs waiting at most; more make their callers wait.
pub const QUEUE_MAX: usize = 64;

type Job = Box<dyn FnOnce() + Send>;

static QUEUE: OnceLock<mpsc::Sender<Job>> = OnceLock::new();

fn queue() -> &'static mpsc::Sender<Job> {
    QUEUE.get_or_init(|| {
        let (tx, mut rx) = mpsc::channel::<Job>(QUEUE_MAX);
        std::thread::Builder::new()
            .name("sluice-checkpoint".into())
            .spawn(move || {
                lower_priority();
                while let Some(job) = rx.blocking_recv() {
                    // A panicking job drops its reply (the caller sees an
                    // error); the thread serves the next one.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            })
            .expect("spawning the checkpoint thread");
        tx
    })
}

#[cfg(target_os = "linux")]
fn lower_priority() {
    // `None` is the calling thread (Linux keeps a nice value per thread).
    if let Err(error) = rustix::process::setpriority_process(None, NICE) {
        tracing::warn!(%error, "could not lower the checkpoint thread's priority");
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_priority() {}

/// Runs `f` on the checkpoint thread and returns its result.
pub async fn run<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    let (tx, rx) = oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(f());
    });
    queue()
        .send(job)
        .await
        .map_err(|_| Error::internal("the checkpoint thread has stopped"))?;
    rx.await.map_err(|_| Error::internal("a checkpoint job panicked"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn jobs_run_in_order_on_one_lower_priority_thread() {
        let mut names = Vec::new();
        for i in 0..(QUEUE_MAX * 2) {
            let (n, name) = run(move || (i, std::thread::current().name().map(str::to_string)))
                .await
                .unwrap();
            assert_eq!(n, i);
            names.push(name);
        }
        assert!(names.iter().all(|n| n.as_deref() == Some("sluice-checkpoint")));
        #[cfg(target_os = "linux")]
        {
            let nice = run(|| rustix::process::getpriority_process(None)).await.unwrap();
            assert_eq!(nice.unwrap(), NICE);
        }
    }

    #[tokio::test]
    async fn a_panicking_job_is_an_error_and_the_thread_goes_on() {
        let err = run(|| -> u32 { panic!("boom") }).await.unwrap_err();
        assert!(err.to_string().contains("panicked"), "{err}");
        assert_eq!(run(|| 7).await.unwrap(), 7);
    }
}
