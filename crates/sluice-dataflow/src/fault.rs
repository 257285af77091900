//! Test hooks for crash-recovery tests: `SLUICE_FAULT_PANIC_AT=<kind>:<k>`
//! (e.g. `window_aggregate:5000`) makes the first task of that operator
//! kind whose input passes `k` rows panic, once per process. Unset (the
//! normal case), it costs one branch per batch.
//! `SLUICE_FAULT_SLOW_STATE=<kind>:<ms>` makes the state writer take `ms`
//! longer to store each snapshot of that operator kind (a slow checkpoint
//! store), so a test can find a checkpoint in flight; unset, nothing.

use crate::metrics::TaskMetrics;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};

static FAULT: LazyLock<Option<(String, u64)>> = LazyLock::new(|| {
    let v = std::env::var("SLUICE_FAULT_PANIC_AT").ok()?;
    let (kind, k) = v.split_once(':')?;
    Some((kind.to_string(), k.trim().parse().ok()?))
});
static FIRED: AtomicBool = AtomicBool::new(false);

/// Panics if the injected fault is due for this task.
pub fn check(metrics: &TaskMetrics) {
    let Some((kind, k)) = FAULT.as_ref() else { return };
    if metrics.kind == kind && metrics.rows_in.load(Ordering::Relaxed) >= *k && !FIRED.swap(true, Ordering::SeqCst) {
        panic!("injected fault (SLUICE_FAULT_PANIC_AT={kind}:{k})");
    }
}

static SLOW_STATE: LazyLock<Option<(String, std::time::Duration)>> = LazyLock::new(|| {
    let v = std::env::var("SLUICE_FAULT_SLOW_STATE").ok()?;
    let (kind, ms) = v.split_once(':')?;
    Some((
        kind.to_string(),
        std::time::Duration::from_millis(ms.trim().parse().ok()?),
    ))
});

/// How much longer storing a snapshot of operator kind `kind` takes
/// (`SLUICE_FAULT_SLOW_STATE`; `None` normally).
pub fn slow_state(kind: &str) -> Option<std::time::Duration> {
    SLOW_STATE.as_ref().filter(|(k, _)| k == kind).map(|(_, d)| *d)
}
