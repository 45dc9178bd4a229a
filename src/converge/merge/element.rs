//! One element of a collection (a hash field, a set member, a sorted-set
//! member's score): last writer wins among the writes no removal observed,
//! and a removal removes only what its site had seen (observed-remove), so
//! a write made concurrently on another site survives it.
//!
//! State, not operations: each origin's newest write and the removals'
//! `Seen` join like a lattice, so fragments and whole states may arrive in
//! any order, more than once, and every site ends with the same value.
//!
//! An element may also count (`HINCRBY`, `ZINCRBY`): each increment is one
//! flush's total on its origin, identified by its stamp, and adds to the
//! newest write unless a removal or a write made on some site had seen it
//! (a write of a number removes the increments its site had applied, see
//! `Hashes::local_fields`). What the increments add to is the caller's
//! rule (`add`): a hash field's decimal integer, a sorted set's integral
//! score; a value they cannot add to stays as written.

use crate::converge::merge::seen::Seen;
use crate::converge::version::Stamp;

/// The state of one element.
#[derive(Debug, Clone, PartialEq)]
pub struct Element<V> {
    /// The newest write of each origin node, sorted by node, one per node.
    /// An older write of an origin is implied by its newer one: a site that
    /// saw the newer saw the older.
    writes: Vec<(Stamp, V)>,
    /// What removals of this element had seen: a write they cover is gone.
    removed: Seen,
    /// The value at rest: every site holds it and the writes that made it
    /// were collected (see [`Element::collect`]). A later write beats it;
    /// a later removal removes it.
    rest: Option<V>,
    /// Increments not yet folded into the value at rest, by stamp, one per
    /// stamp.
    increments: Vec<(Stamp, i128)>,
}

impl<V> Default for Element<V> {
    fn default() -> Self {
        Self {
            writes: Vec::new(),
            removed: Seen::new(),
            rest: None,
            increments: Vec::new(),
        }
    }
}

/// How increments add to a value: the value they add to (`None`: absent)
/// and their sum; `None` when absent. Called only when some increment
/// counts.
pub type Add<'a, V> = &'a dyn Fn(Option<&V>, i128) -> Option<V>;

/// What [`Element::collect`] left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collected {
    /// Some metadata may still conflict: kept.
    Kept,
    /// Nothing left to conflict: the value at rest, no metadata.
    Rest,
    /// Nothing left at all: the element may be forgotten.
    Gone,
}

impl<V: Clone + PartialEq> Element<V> {
    /// An element every site holds with this value and no metadata (a
    /// value loaded before it was tracked, or collected).
    pub fn at_rest(value: V) -> Self {
        Self {
            rest: Some(value),
            ..Self::default()
        }
    }

    /// An element from its parts as they travel: each origin's newest write
    /// (any order, one per origin kept) and what its removals had seen.
    pub fn from_parts(writes: Vec<(Stamp, V)>, removed: Seen) -> Self {
        let mut element = Self {
            removed,
            ..Self::default()
        };
        for (stamp, value) in writes {
            element.write(stamp, value, &Seen::new());
        }
        element
    }

    /// The element with these increments too (any order; one kept per
    /// stamp, the one held first).
    pub fn with_increments(mut self, mut increments: Vec<(Stamp, i128)>) -> Self {
        increments.extend(std::mem::take(&mut self.increments));
        increments.sort_by_key(|&(s, _)| s);
        increments.dedup_by_key(|&mut (s, _)| s);
        self.increments = increments;
        self
    }

    /// The value at rest, if any (kept by the journal and the RDB: with
    /// increments the value depends on it).
    pub fn rest(&self) -> Option<&V> {
        self.rest.as_ref()
    }

    /// Each origin's newest write held, by node.
    pub fn writes(&self) -> &[(Stamp, V)] {
        &self.writes
    }

    /// What removals of this element had seen.
    pub fn removed(&self) -> &Seen {
        &self.removed
    }

    /// A write of `value` stamped `stamp`. Below `bound` it is a write every
    /// site already applied (a resend or an old state): ignored.
    pub fn write(&mut self, stamp: Stamp, value: V, bound: &Seen) {
        if bound.covers(stamp) {
            return;
        }
        match self
            .writes
            .binary_search_by_key(&stamp.node, |(s, _)| s.node)
        {
            Ok(i) if self.writes[i].0 < stamp => self.writes[i] = (stamp, value),
            Ok(_) => {}
            Err(i) => self.writes.insert(i, (stamp, value)),
        }
    }

    /// A removal that had seen `seen`. One issued after this site's
    /// collection bound (it dominates it) also removes the value at rest;
    /// one that does not was applied before the collection (the bound
    /// waits for every site's older changes) and is met again only as a
    /// resend.
    pub fn remove(&mut self, seen: &Seen, bound: &Seen) {
        self.removed.join(seen);
        if seen.dominates(bound) {
            self.rest = None;
        }
    }

    /// An increment by `delta` stamped `stamp`. At or below `bound` every
    /// site already applied it (a resend): ignored.
    pub fn increment(&mut self, stamp: Stamp, delta: i128, bound: &Seen) {
        if bound.covers(stamp) {
            return;
        }
        if let Err(i) = self.increments.binary_search_by_key(&stamp, |&(s, _)| s) {
            self.increments.insert(i, (stamp, delta));
        }
    }

    /// The increments held, by stamp.
    pub fn increments(&self) -> &[(Stamp, i128)] {
        &self.increments
    }

    /// Takes in another site's state of this element. Its value at rest
    /// adds nothing: every site applied what a value at rest holds.
    pub fn merge(&mut self, other: &Element<V>, bound: &Seen) {
        for (stamp, value) in &other.writes {
            self.write(*stamp, value.clone(), bound);
        }
        for &(stamp, delta) in &other.increments {
            self.increment(stamp, delta, bound);
        }
        if !other.removed.is_empty() {
            self.remove(&other.removed, bound);
        }
    }

    /// The sum of the increments that count (no removal or write had seen
    /// them), given what removals of the whole collection had seen; `None`
    /// when none counts.
    pub fn counted(&self, collection_removed: &Seen) -> Option<i128> {
        let mut counting = self
            .increments
            .iter()
            .filter(|(s, _)| !self.removed.covers(*s) && !collection_removed.covers(*s))
            .peekable();
        counting.peek()?;
        Some(counting.fold(0i128, |sum, &(_, d)| sum.saturating_add(d)))
    }

    /// The value with the increments that count added (`add`); `None` when
    /// absent.
    pub fn value_counted(&self, collection_removed: &Seen, add: Add<'_, V>) -> Option<V> {
        let value = self.value(collection_removed).map(|(_, v)| v);
        match self.counted(collection_removed) {
            None => value.cloned(),
            Some(sum) => add(value, sum),
        }
    }

    /// The value and its stamp (`None` for a value at rest), given what
    /// removals of the whole collection had seen; `None` when absent.
    pub fn value(&self, collection_removed: &Seen) -> Option<(Option<Stamp>, &V)> {
        let newest = self
            .writes
            .iter()
            .filter(|(s, _)| !self.removed.covers(*s) && !collection_removed.covers(*s))
            .max_by_key(|(s, _)| *s);
        match newest {
            Some((stamp, value)) => Some((Some(*stamp), value)),
            None => self.rest.as_ref().map(|v| (None, v)),
        }
    }

    /// The writes and increments this site holds: joined with the site's
    /// own `Seen`, what a removal made here covers.
    pub fn observed(&self) -> Seen {
        let mut seen: Seen = self.writes.iter().map(|(s, _)| (s.node, s.clock)).collect();
        for &(s, _) in &self.increments {
            seen.observe(s);
        }
        seen
    }

    /// Whether every write, increment and removal held is at or below
    /// `bound` (see [`Element::collect`]).
    pub fn settled(&self, collection_removed: &Seen, bound: &Seen) -> bool {
        self.writes_settled(collection_removed, bound)
            && self.increments.iter().all(|(s, _)| bound.covers(*s))
    }

    /// Whether every write and removal held is at or below `bound`.
    fn writes_settled(&self, collection_removed: &Seen, bound: &Seen) -> bool {
        self.writes.iter().all(|(s, _)| bound.covers(*s))
            && bound.dominates(&self.removed)
            && bound.dominates(collection_removed)
    }

    /// Drops the metadata no site can conflict with any more: once every
    /// write and removal is at or below `bound` (every site applied it and
    /// every change still to arrive was made after it), the element is its
    /// value at rest (with the increments at or below the bound that count
    /// added, `add`), or nothing; the increments above the bound stay.
    /// `collection_removed` is what removals of the whole collection had
    /// seen.
    pub fn collect(
        &mut self,
        collection_removed: &Seen,
        bound: &Seen,
        add: Add<'_, V>,
    ) -> Collected {
        if !self.writes_settled(collection_removed, bound) {
            return Collected::Kept;
        }
        let (settled, live): (Vec<_>, Vec<_>) = std::mem::take(&mut self.increments)
            .into_iter()
            .partition(|(s, _)| bound.covers(*s));
        self.increments = settled;
        let value = self.value_counted(collection_removed, add);
        // The increments left were made after the bound: no removal held
        // (at or below it) had seen them.
        *self = Self {
            rest: value,
            increments: live,
            ..Self::default()
        };
        match (self.increments.is_empty(), self.rest.is_some()) {
            (false, _) => Collected::Kept,
            (true, true) => Collected::Rest,
            (true, false) => Collected::Gone,
        }
    }

    /// Whether a write or increment held here is one `removed` covers.
    pub fn holds_write_covered_by(&self, removed: &Seen) -> bool {
        self.writes.iter().any(|(s, _)| removed.covers(*s))
            || self.increments.iter().any(|(s, _)| removed.covers(*s))
    }

    /// Sets the value at rest (a sync's, to a node that lost its data).
    pub fn set_rest(&mut self, value: V) {
        self.rest = Some(value);
    }

    /// Forgets the value at rest: a removal of the whole collection made
    /// after the collection bound removed it.
    pub fn forget_rest(&mut self) {
        self.rest = None;
    }

    /// Metadata entries held (writes and removal clocks): what collection
    /// shrinks.
    pub fn metadata_len(&self) -> usize {
        self.writes.len() + self.increments.len() + self.removed.iter().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: Seen = Seen::new();

    fn seen(pairs: &[(u64, u64)]) -> Seen {
        pairs.iter().copied().collect()
    }

    /// Values increments do not add to.
    fn keep(v: Option<&&'static str>, _: i128) -> Option<&'static str> {
        v.copied()
    }

    /// Increments add to a number.
    fn add(v: Option<&i128>, sum: i128) -> Option<i128> {
        Some(v.copied().unwrap_or(0) + sum)
    }

    #[test]
    fn increments_count_unless_a_write_or_removal_had_seen_them() {
        let mut e: Element<i128> = Element::default();
        e.write(Stamp::new(1, 1), 10, &NONE);
        e.increment(Stamp::new(2, 1), 5, &NONE);
        e.increment(Stamp::new(2, 2), 7, &NONE);
        assert_eq!(e.value_counted(&NONE, &add), Some(22));
        // Site 1 sets 100 having applied its own increment, not site 2's.
        e.remove(&seen(&[(1, 2)]), &NONE);
        e.write(Stamp::new(3, 1), 100, &NONE);
        assert_eq!(e.value_counted(&NONE, &add), Some(107));
        // A removal having seen all but a later increment.
        e.remove(&seen(&[(1, 3), (2, 2)]), &NONE);
        e.increment(Stamp::new(4, 2), 1, &NONE);
        assert_eq!(e.value_counted(&NONE, &add), Some(1), "from absent");
    }

    #[test]
    fn collection_folds_settled_increments_and_keeps_later_ones() {
        let mut e: Element<i128> = Element::default();
        e.write(Stamp::new(1, 1), 10, &NONE);
        e.increment(Stamp::new(2, 1), 5, &NONE);
        e.increment(Stamp::new(9, 2), 7, &NONE);
        let bound = seen(&[(1, 5), (2, 5)]);
        assert_eq!(e.collect(&NONE, &bound, &add), Collected::Kept);
        assert_eq!(e.writes().len(), 0);
        assert_eq!(e.increments(), &[(Stamp::new(9, 2), 7)]);
        assert_eq!(e.value_counted(&NONE, &add), Some(22));
        // A resent increment below the bound is not counted twice.
        e.increment(Stamp::new(2, 1), 5, &bound);
        assert_eq!(e.value_counted(&NONE, &add), Some(22));
        assert_eq!(
            e.collect(&NONE, &seen(&[(1, 9), (2, 9)]), &add),
            Collected::Rest
        );
        assert_eq!(e.value_counted(&NONE, &add), Some(22));
    }

    #[test]
    fn a_value_increments_cannot_add_to_stays() {
        let mut e = Element::default();
        e.write(Stamp::new(1, 1), "abc", &NONE);
        e.increment(Stamp::new(1, 2), 3, &NONE);
        assert_eq!(e.value_counted(&NONE, &keep), Some("abc"));
    }

    #[test]
    fn the_newest_write_wins() {
        let mut e = Element::default();
        e.write(Stamp::new(5, 2), "b", &NONE);
        e.write(Stamp::new(4, 1), "a", &NONE);
        e.write(Stamp::new(3, 2), "old", &NONE);
        assert_eq!(e.value(&NONE), Some((Some(Stamp::new(5, 2)), &"b")));
    }

    #[test]
    fn a_removal_keeps_a_write_it_had_not_seen() {
        let mut e = Element::default();
        e.write(Stamp::new(4, 1), "a", &NONE);
        e.write(Stamp::new(3, 2), "b", &NONE);
        // Site 1 removes having seen only its own write.
        e.remove(&seen(&[(1, 4)]), &NONE);
        assert_eq!(e.value(&NONE), Some((Some(Stamp::new(3, 2)), &"b")));
        e.remove(&seen(&[(2, 3)]), &NONE);
        assert_eq!(e.value(&NONE), None);
    }

    #[test]
    fn a_collected_value_survives_old_removals_and_falls_to_new_ones() {
        let mut e = Element::default();
        e.write(Stamp::new(4, 1), "a", &NONE);
        let bound = seen(&[(1, 10), (2, 10)]);
        assert_eq!(e.collect(&NONE, &bound, &keep), Collected::Rest);
        assert_eq!(e.metadata_len(), 0);
        e.write(Stamp::new(4, 1), "resent", &bound);
        e.remove(&seen(&[(1, 3)]), &bound);
        assert_eq!(e.value(&NONE), Some((None, &"a")));
        e.remove(&seen(&[(1, 11), (2, 10)]), &bound);
        assert_eq!(e.value(&NONE), None);
    }

    #[test]
    fn an_element_with_recent_metadata_is_kept() {
        let mut e = Element::default();
        e.write(Stamp::new(12, 1), "a", &NONE);
        assert_eq!(e.collect(&NONE, &seen(&[(1, 10)]), &keep), Collected::Kept);
        e.remove(&seen(&[(1, 12)]), &NONE);
        assert_eq!(e.collect(&NONE, &seen(&[(1, 12)]), &keep), Collected::Gone);
    }
}
