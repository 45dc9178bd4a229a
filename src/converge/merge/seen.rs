//! What one site had applied of each origin's changes: per origin node, the
//! clock of the newest change it held.
//!
//! A site learns each origin's changes to a key in the order the origin
//! made them (the live stream is in order, catch-up and full sync carry a
//! key's whole state at once), so what it has seen of one origin is a
//! prefix: every change of that origin stamped at or below the clock.

use crate::converge::version::Stamp;

/// Per origin node, the newest clock seen (a version vector over hybrid
/// clocks). Origins never seen are at clock 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// `(node, clock)`, sorted by node, no node twice, no clock 0.
    clocks: Vec<(u64, u64)>,
}

impl Seen {
    /// Nothing seen.
    pub const fn new() -> Self {
        Self { clocks: Vec::new() }
    }

    /// The newest clock seen of `node` (0: none).
    pub fn clock(&self, node: u64) -> u64 {
        match self.clocks.binary_search_by_key(&node, |&(n, _)| n) {
            Ok(i) => self.clocks[i].1,
            Err(_) => 0,
        }
    }

    /// Whether the change stamped `stamp` was seen.
    pub fn covers(&self, stamp: Stamp) -> bool {
        stamp.clock <= self.clock(stamp.node)
    }

    /// Notes a change stamped `stamp` as seen.
    pub fn observe(&mut self, stamp: Stamp) {
        self.raise(stamp.node, stamp.clock);
    }

    /// `node`'s clock is at most `clock` from now on (0: nothing of it).
    pub fn lower(&mut self, node: u64, clock: u64) {
        if let Ok(i) = self.clocks.binary_search_by_key(&node, |&(n, _)| n) {
            if clock == 0 {
                self.clocks.remove(i);
            } else {
                self.clocks[i].1 = self.clocks[i].1.min(clock);
            }
        }
    }

    /// Raises `node`'s clock to `clock` (never lowers it).
    pub fn raise(&mut self, node: u64, clock: u64) {
        if clock == 0 {
            return;
        }
        match self.clocks.binary_search_by_key(&node, |&(n, _)| n) {
            Ok(i) => self.clocks[i].1 = self.clocks[i].1.max(clock),
            Err(i) => self.clocks.insert(i, (node, clock)),
        }
    }

    /// Everything either saw.
    pub fn join(&mut self, other: &Seen) {
        for &(node, clock) in &other.clocks {
            self.raise(node, clock);
        }
    }

    /// Whether this saw everything `other` saw.
    pub fn dominates(&self, other: &Seen) -> bool {
        other
            .clocks
            .iter()
            .all(|&(node, clock)| clock <= self.clock(node))
    }

    /// Nothing seen.
    pub fn is_empty(&self) -> bool {
        self.clocks.is_empty()
    }

    /// `(node, clock)` pairs, by node.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.clocks.iter().copied()
    }

    /// The pointwise minimum: what both saw.
    pub fn meet(&self, other: &Seen) -> Seen {
        let clocks = self
            .clocks
            .iter()
            .filter_map(|&(node, clock)| {
                let both = clock.min(other.clock(node));
                (both > 0).then_some((node, both))
            })
            .collect();
        Seen { clocks }
    }
}

impl FromIterator<(u64, u64)> for Seen {
    fn from_iter<I: IntoIterator<Item = (u64, u64)>>(pairs: I) -> Self {
        let mut seen = Seen::new();
        for (node, clock) in pairs {
            seen.raise(node, clock);
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covers_what_was_observed_and_older_of_the_same_origin() {
        let mut seen = Seen::new();
        seen.observe(Stamp::new(10, 1));
        assert!(seen.covers(Stamp::new(10, 1)));
        assert!(seen.covers(Stamp::new(3, 1)));
        assert!(!seen.covers(Stamp::new(11, 1)));
        assert!(
            !seen.covers(Stamp::new(2, 2)),
            "another origin is its own prefix"
        );
    }

    #[test]
    fn join_meet_and_dominates_agree() {
        let a: Seen = [(1, 5), (2, 9)].into_iter().collect();
        let b: Seen = [(1, 7), (3, 2)].into_iter().collect();
        let mut joined = a.clone();
        joined.join(&b);
        assert_eq!(joined, [(1, 7), (2, 9), (3, 2)].into_iter().collect());
        assert!(joined.dominates(&a) && joined.dominates(&b));
        assert!(!a.dominates(&b));
        assert_eq!(a.meet(&b), [(1, 5)].into_iter().collect());
        assert!(Seen::new().dominates(&Seen::new()));
    }
}
