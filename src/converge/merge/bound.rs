//! How this node learns the part of the merge bound that is its own:
//! which of its own changes the peer has applied, told by the peer's acks.
//!
//! Each batch pushed while this node is in step records its coverage (its
//! own changes stamped at or below it are in the stream up to the batch's
//! last sequence number). An ack of that number applied them all; only an
//! ack the peer sent in step counts, since a peer catching up may still
//! send changes it made before it applied ours (from its backlog, after
//! the ack), which the bound's rule forbids.

use std::collections::VecDeque;

/// Coverage recorded per pushed batch, waiting for the peer's ack.
#[derive(Debug, Default)]
pub struct OwnBound {
    pushed: VecDeque<(u64, u64)>,
    /// When a probe last went out (see `capture::counters::probe`).
    last_probe: Option<std::time::Instant>,
    /// See [`OwnBound::held_back`].
    held_back: bool,
}

/// Between probes sent only to learn the peer's coverage again.
pub const PROBE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// At most this many batches wait (older ones are dropped: the bound then
/// rises later, never wrongly).
const MAX_WAITING: usize = 4096;

impl OwnBound {
    /// A batch whose last sequence number is `seq` went out in step with
    /// coverage `clock`.
    pub fn pushed(&mut self, seq: u64, clock: u64) {
        if self.pushed.back().is_some_and(|&(_, c)| c >= clock) {
            // An ack of a later batch covers this one too.
            return;
        }
        if self.pushed.len() >= MAX_WAITING {
            self.pushed.pop_front();
        }
        self.pushed.push_back((seq, clock));
    }

    /// The peer acknowledged everything up to `applied`; `in_step` and
    /// holding our changes up to `holds` as its ack said. Returns the
    /// clock up to which the peer applied every change of ours and says
    /// so in its own writes, when that moved.
    ///
    /// A peer can apply a batch without taking its coverage (while its
    /// own request for what it lost is unanswered): its whole writes then
    /// carry a removal below what it applied, and a bound above that
    /// removal would take those writes for concurrent with elements at
    /// rest here (a field a whole write dropped stayed on this node).
    pub fn acked(&mut self, applied: u64, in_step: bool, holds: u64) -> Option<u64> {
        let mut covered = None;
        while let Some(&(seq, clock)) = self.pushed.front() {
            if seq > applied {
                break;
            }
            covered = Some(clock);
            self.pushed.pop_front();
        }
        // Out of step, the coverage is dropped, not kept for a later ack:
        // a later in-step ack covers a later batch anyway.
        let covered = covered.filter(|_| in_step)?;
        self.held_back = covered > holds;
        Some(covered.min(holds))
    }

    /// Whether the last ack that moved the bound held it below the batch's
    /// coverage (the peer had not taken it): probing again at once would
    /// only learn the same.
    pub fn held_back(&self) -> bool {
        self.held_back
    }

    /// Nothing waits for the peer's ack.
    pub fn is_idle(&self) -> bool {
        self.pushed.is_empty()
    }

    /// Whether a probe may go out at `now` (`urgent`: our own bound lags;
    /// otherwise at most one per [`PROBE_INTERVAL`]); records it.
    pub fn probe_due(&mut self, now: std::time::Instant, urgent: bool) -> bool {
        let due = urgent
            || self
                .last_probe
                .is_none_or(|at| now.saturating_duration_since(at) >= PROBE_INTERVAL);
        if due {
            self.last_probe = Some(now);
        }
        due
    }

    /// A new link: what was pushed may be lost with the old one.
    pub fn link_up(&mut self) {
        self.pushed.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_in_step_ack_of_the_batch_raises_the_bound() {
        let mut b = OwnBound::default();
        b.pushed(3, 100);
        b.pushed(7, 150);
        assert_eq!(b.acked(2, true, u64::MAX), None);
        assert_eq!(b.acked(5, true, u64::MAX), Some(100));
        assert_eq!(b.acked(9, false, u64::MAX), None, "a peer catching up");
        b.pushed(12, 200);
        b.link_up();
        assert_eq!(
            b.acked(20, true, u64::MAX),
            None,
            "pushed on a link that went down"
        );
    }

    #[test]
    fn the_bound_rises_no_higher_than_what_the_peer_holds_of_ours() {
        let mut b = OwnBound::default();
        b.pushed(3, 100);
        assert_eq!(b.acked(3, true, 0), Some(0), "coverage not taken there");
        assert!(b.held_back());
        b.pushed(5, 100);
        assert_eq!(b.acked(5, true, 100), Some(100));
        assert!(!b.held_back());
        b.pushed(8, 150);
        assert_eq!(b.acked(8, true, 120), Some(120));
    }
}
