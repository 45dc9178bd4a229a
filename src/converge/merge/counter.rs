//! A counter written on several sites at once: the newest set (by stamp)
//! plus every increment that set had not seen. INCR on one site and SET on
//! the other both count; increments made on two sites all count.
//!
//! State, not operations: the base (the newest set or delete, with what it
//! had seen) is last writer wins, the increments are a set keyed by their
//! stamp, so fragments and whole states may arrive in any order and more
//! than once. An increment is one flush's total for the key on its origin
//! (one stamp per flush), which makes the stamp its identity.

use crate::converge::merge::seen::Seen;
use crate::converge::version::Stamp;

/// The newest set (or delete) of the counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base {
    /// When ([`Stamp::ZERO`] for a value that was never set here). Kept at
    /// rest: it is the key's version, which the version store holds anyway,
    /// and a resend of an older set must still lose to it.
    pub stamp: Stamp,
    /// The value set; `None`: the key was deleted.
    pub value: Option<i128>,
    /// The increments its site had applied when it set: those no longer
    /// count. Empty at rest.
    pub seen: Seen,
}

/// The state of one counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    base: Base,
    /// Increments not yet collected, sorted by stamp, one per stamp.
    increments: Vec<(Stamp, i128)>,
}

impl Default for Counter {
    fn default() -> Self {
        Self::at_rest(None)
    }
}

impl Counter {
    /// A counter every site holds at `value` (`None`: absent) with no
    /// metadata.
    pub fn at_rest(value: Option<i128>) -> Self {
        Self {
            base: Base {
                stamp: Stamp::ZERO,
                value,
                seen: Seen::new(),
            },
            increments: Vec::new(),
        }
    }

    /// The value, `None` when the key is absent: the base's value plus each
    /// increment it had not seen. A deleted base with such increments holds
    /// their sum (an increment of an absent key starts from 0).
    pub fn value(&self) -> Option<i128> {
        let mut unseen = self
            .increments
            .iter()
            .filter(|(s, _)| !self.base.seen.covers(*s))
            .map(|&(_, delta)| delta)
            .peekable();
        if self.base.value.is_none() && unseen.peek().is_none() {
            return None;
        }
        Some(unseen.fold(self.base.value.unwrap_or(0), i128::saturating_add))
    }

    /// The base: what a set or delete made here ships.
    pub fn base(&self) -> &Base {
        &self.base
    }

    /// The increments this site holds (its part of what a set made here
    /// has seen, besides the site's own `Seen`).
    pub fn observed(&self) -> Seen {
        self.increments
            .iter()
            .map(|(s, _)| (s.node, s.clock))
            .collect()
    }

    /// A set (`Some`) or delete (`None`) stamped `stamp` that had seen
    /// `seen`. Only a newer base replaces the one held.
    pub fn set(&mut self, stamp: Stamp, value: Option<i128>, seen: Seen) {
        if self.base.stamp >= stamp {
            return;
        }
        self.base = Base { stamp, value, seen };
    }

    /// An increment by `delta` stamped `stamp`. At or below `bound` it is
    /// one every site already applied: ignored.
    pub fn increment(&mut self, stamp: Stamp, delta: i128, bound: &Seen) {
        if bound.covers(stamp) {
            return;
        }
        if let Err(i) = self.increments.binary_search_by_key(&stamp, |&(s, _)| s) {
            self.increments.insert(i, (stamp, delta));
        }
    }

    /// Takes in another site's state. A base at rest there with the stamp
    /// of the one here is the same base, with increments folded in that
    /// every site applied: nothing to take.
    pub fn merge(&mut self, other: &Counter, bound: &Seen) {
        let base = &other.base;
        self.set(base.stamp, base.value, base.seen.clone());
        for &(stamp, delta) in &other.increments {
            self.increment(stamp, delta, bound);
        }
    }

    /// Folds what no site can conflict with any more: increments the base
    /// had seen are dropped once at or below `bound` (any newer base has
    /// seen them too), and a base at or below the bound, once no increment
    /// it had seen is left, takes in the increments at or below the bound
    /// and rests.
    pub fn collect(&mut self, bound: &Seen) {
        let base = &self.base;
        self.increments
            .retain(|&(s, _)| !(bound.covers(s) && base.seen.covers(s)));
        let base = &self.base;
        let base_settled = (base.stamp == Stamp::ZERO || bound.covers(base.stamp))
            && !self.increments.iter().any(|&(s, _)| base.seen.covers(s));
        if !base_settled {
            // The base, or an increment it had seen, may still conflict.
            return;
        }
        let (settled, live): (Vec<_>, Vec<_>) =
            self.increments.iter().partition(|&&(s, _)| bound.covers(s));
        let folded_some = !settled.is_empty();
        let mut value = self.base.value;
        for (_, delta) in settled {
            value = Some(value.unwrap_or(0).saturating_add(delta));
        }
        self.base.value = value;
        // The base now holds what the bound covers. At rest it keeps no
        // `Seen` (the table's `folded` stands for it); with increments
        // left it keeps the bound, so that one listed again after the
        // bound went down is not counted on top of the value it is in.
        if live.is_empty() {
            self.base.seen = Seen::new();
        } else if folded_some {
            self.base.seen.join(bound);
        }
        self.increments = live;
    }

    /// A counter from its parts as they travel (the increments in any
    /// order, one kept per stamp).
    pub fn from_parts(base: Base, increments: impl IntoIterator<Item = (Stamp, i128)>) -> Self {
        let mut increments: Vec<(Stamp, i128)> = increments.into_iter().collect();
        increments.sort_by_key(|&(s, _)| s);
        increments.dedup_by_key(|&mut (s, _)| s);
        Self { base, increments }
    }

    /// The increments held, by stamp.
    pub fn increments(&self) -> &[(Stamp, i128)] {
        &self.increments
    }

    /// The newest stamp the state holds (its base's or an increment's):
    /// the key's version.
    pub fn newest(&self) -> Stamp {
        self.increments
            .last()
            .map_or(self.base.stamp, |&(s, _)| s.max(self.base.stamp))
    }

    /// Folds the increments of `node` stamped after `after` (and after the
    /// base) into the newest of them: one increment of the sum, at that
    /// stamp. Only for increments no other site has been sent and no base
    /// has seen (the caller's `after` says what left this site): nothing
    /// elsewhere can tell them apart.
    pub fn coalesce(&mut self, node: u64, after: Stamp) {
        let after = after.max(self.base.stamp);
        let (folded, mut kept): (Vec<_>, Vec<_>) = self
            .increments
            .iter()
            .partition(|(s, _)| s.node == node && *s > after);
        // Sorted by stamp: the last one folded is the newest.
        let Some(&(newest, _)) = folded.last().filter(|_| folded.len() >= 2) else {
            return;
        };
        let sum = folded.iter().fold(0i128, |a, &(_, d)| a.saturating_add(d));
        let at = kept.partition_point(|&(s, _)| s < newest);
        kept.insert(at, (newest, sum));
        self.increments = kept;
    }

    /// A flush stamped `floor` removed everything at or below it: a base
    /// that old becomes an absent key at the floor (the same on every
    /// site), and older increments go. Whether anything changed.
    pub fn trim(&mut self, floor: Stamp) -> bool {
        let before = (self.base.stamp, self.increments.len());
        if self.base.stamp <= floor {
            self.base = Base {
                stamp: floor,
                value: None,
                seen: Seen::new(),
            };
        }
        self.increments.retain(|&(s, _)| s > floor);
        before != (self.base.stamp, self.increments.len())
    }

    /// Metadata entries held beyond the key's version (increments and the
    /// base's `Seen`).
    pub fn metadata_len(&self) -> usize {
        self.increments.len() + self.base.seen.iter().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: Seen = Seen::new();

    fn seen(pairs: &[(u64, u64)]) -> Seen {
        pairs.iter().copied().collect()
    }

    #[test]
    fn an_increment_folded_while_others_stay_is_not_counted_again_after_the_bound_went_down() {
        let mut c = Counter::at_rest(Some(10));
        c.increment(Stamp::new(5, 1), 3, &NONE);
        c.increment(Stamp::new(9, 1), 4, &NONE);
        // The bound passes the first: it folds into the base, the second
        // stays listed.
        c.collect(&seen(&[(1, 6), (2, 6)]));
        assert_eq!((c.base().value, c.increments().len()), (Some(13), 1));
        // The bound goes down (the peer lost state) and the peer lists the
        // first again.
        c.increment(Stamp::new(5, 1), 3, &seen(&[(1, 2), (2, 6)]));
        assert_eq!(c.value(), Some(17), "20 before: counted on top of 13");
        // Once the bound is back above both, the counter rests at 17.
        c.collect(&seen(&[(1, 9), (2, 9)]));
        assert_eq!((c.value(), c.metadata_len()), (Some(17), 0));
    }

    #[test]
    fn increments_on_two_sites_all_count() {
        let mut c = Counter::at_rest(Some(10));
        c.increment(Stamp::new(5, 1), 3, &NONE);
        c.increment(Stamp::new(5, 2), 4, &NONE);
        c.increment(Stamp::new(5, 2), 4, &NONE);
        assert_eq!(c.value(), Some(17));
    }

    #[test]
    fn a_set_keeps_the_increments_it_had_not_seen() {
        let mut c = Counter::at_rest(Some(10));
        c.increment(Stamp::new(5, 1), 3, &NONE);
        c.increment(Stamp::new(6, 2), 4, &NONE);
        // Site 2 set 100 having seen its own increment only.
        c.set(Stamp::new(7, 2), Some(100), seen(&[(2, 6)]));
        assert_eq!(c.value(), Some(103));
        c.set(Stamp::new(6, 1), Some(0), NONE);
        assert_eq!(c.value(), Some(103), "an older set changes nothing");
    }

    #[test]
    fn a_delete_keeps_a_concurrent_increment_as_a_new_counter() {
        let mut c = Counter::at_rest(Some(10));
        c.set(Stamp::new(7, 1), None, seen(&[(1, 7)]));
        assert_eq!(c.value(), None);
        c.increment(Stamp::new(6, 2), 2, &NONE);
        assert_eq!(c.value(), Some(2));
    }

    #[test]
    fn a_flush_trims_what_it_removed_to_the_same_base_everywhere() {
        let mut c = Counter::at_rest(Some(70));
        c.increment(Stamp::new(5, 2), 10, &NONE);
        c.increment(Stamp::new(9, 2), 3, &NONE);
        assert!(c.trim(Stamp::new(7, 1)));
        assert_eq!(
            c.value(),
            Some(3),
            "the base and the increment before it go"
        );
        assert_eq!(c.base().stamp, Stamp::new(7, 1));
        assert!(!c.trim(Stamp::new(7, 1)));
    }

    #[test]
    fn unsent_increments_after_the_base_fold_into_one() {
        let mut c = Counter::at_rest(Some(10));
        c.increment(Stamp::new(3, 1), 1, &NONE);
        c.increment(Stamp::new(4, 2), 5, &NONE);
        c.set(Stamp::new(5, 1), Some(20), seen(&[(1, 3)]));
        for clock in 6..9 {
            c.increment(Stamp::new(clock, 1), 2, &NONE);
        }
        let before = c.value();
        c.coalesce(1, Stamp::new(6, 1));
        assert_eq!(c.value(), before);
        assert_eq!(
            c.increments(),
            &[
                (Stamp::new(3, 1), 1),
                (Stamp::new(4, 2), 5),
                (Stamp::new(6, 1), 2),
                (Stamp::new(8, 1), 4)
            ],
            "the increment sent (6) and those before the base stay"
        );
    }

    #[test]
    fn collecting_keeps_the_value_and_drops_the_metadata() {
        let mut c = Counter::at_rest(Some(1));
        c.increment(Stamp::new(5, 1), 3, &NONE);
        c.set(Stamp::new(6, 2), Some(50), seen(&[(2, 6)]));
        c.increment(Stamp::new(9, 2), 2, &NONE);
        assert_eq!(c.value(), Some(55));
        let bound = seen(&[(1, 6), (2, 6)]);
        c.collect(&bound);
        assert_eq!(c.value(), Some(55));
        assert_eq!(
            c.increments().len(),
            1,
            "the increment above the bound stays"
        );
        c.increment(Stamp::new(5, 1), 3, &bound);
        c.set(Stamp::new(6, 2), Some(50), seen(&[(2, 6)]));
        c.set(Stamp::new(5, 3), Some(0), NONE);
        assert_eq!(c.value(), Some(55), "resends and older sets change nothing");
    }
}
