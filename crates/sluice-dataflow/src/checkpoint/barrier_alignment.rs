//! Barrier alignment at a task with several inputs (Chandy–Lamport,
//! aligned as in Flink): after an input delivers barrier `n` it is blocked
//! until every input not yet ended delivered `n` too; then the task
//! snapshots and forwards the barrier. Pure bookkeeping.

/// The alignment state of a task's inputs.
#[derive(Debug, Clone)]
pub struct BarrierAligner {
    blocked: Vec<bool>,
    ended: Vec<bool>,
    current: Option<u64>,
}

impl BarrierAligner {
    pub fn new(inputs: usize) -> Self {
        BarrierAligner {
            blocked: vec![false; inputs],
            ended: vec![false; inputs],
            current: None,
        }
    }

    /// Whether input `i` must not be read now.
    pub fn is_blocked(&self, i: usize) -> bool {
        self.blocked[i]
    }

    /// The blocked flags of every input.
    pub fn blocked(&self) -> &[bool] {
        &self.blocked
    }

    /// Input `i` delivered barrier `id`; returns `Some(id)` when it was the
    /// last one missing (then every input is unblocked).
    pub fn on_barrier(&mut self, i: usize, id: u64) -> Option<u64> {
        debug_assert!(!self.blocked[i], "a blocked input is not read");
        match self.current {
            Some(c) => debug_assert_eq!(c, id, "barriers arrive in order on every channel"),
            None => self.current = Some(id),
        }
        self.blocked[i] = true;
        self.complete()
    }

    /// Input `i` ended: it will deliver no barrier.
    pub fn on_end(&mut self, i: usize) -> Option<u64> {
        self.ended[i] = true;
        self.complete()
    }

    fn complete(&mut self) -> Option<u64> {
        let id = self.current?;
        if (0..self.blocked.len()).all(|i| self.blocked[i] || self.ended[i]) {
            self.blocked.iter_mut().for_each(|b| *b = false);
            self.current = None;
            return Some(id);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_each_input_until_all_delivered() {
        let mut a = BarrierAligner::new(3);
        assert_eq!(a.on_barrier(1, 5), None);
        assert!(a.is_blocked(1) && !a.is_blocked(0));
        assert_eq!(a.on_barrier(0, 5), None);
        assert_eq!(a.on_barrier(2, 5), Some(5));
        assert!(a.blocked().iter().all(|b| !b));
    }

    #[test]
    fn an_ended_input_counts_as_delivered() {
        let mut a = BarrierAligner::new(2);
        assert_eq!(a.on_barrier(0, 1), None);
        assert_eq!(a.on_end(1), Some(1));
        assert_eq!(a.on_barrier(0, 2), Some(2), "the ended input stays ended");
        let mut single = BarrierAligner::new(1);
        assert_eq!(single.on_barrier(0, 9), Some(9));
    }
}
