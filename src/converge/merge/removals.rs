//! Which positions of a list were popped, and by the oldest pop of each:
//! disjoint spans of positions, each with the stamp of the oldest pop that
//! removed its positions (`list_positions`). Pops come in at the ends, so
//! a list's removals are a few spans at rest; a position popped on two
//! sites at once is removed once and keeps the older stamp.

use std::collections::BTreeMap;

use crate::converge::merge::Seen;
use crate::converge::version::Stamp;

/// A position in a list's lineage, or an index in a run.
pub type Pos = i64;

/// Positions and indexes stay within `(-MAX_POS, MAX_POS)`: far beyond any
/// list's length, far from overflow. A pop or a state naming one outside
/// is refused.
pub const MAX_POS: Pos = 1 << 40;

/// Removed positions: span start -> (span end, exclusive; stamp of the
/// oldest pop that removed them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removals {
    spans: BTreeMap<Pos, (Pos, Stamp)>,
}

impl Removals {
    /// Nothing removed.
    pub fn new() -> Self {
        Self::default()
    }

    /// The span holding `pos`: its start, end and stamp.
    fn span_of(&self, pos: Pos) -> Option<(Pos, Pos, Stamp)> {
        let (&start, &(end, stamp)) = self.spans.range(..=pos).next_back()?;
        (pos < end).then_some((start, end, stamp))
    }

    /// Whether `pos` was removed.
    pub fn contains(&self, pos: Pos) -> bool {
        self.span_of(pos).is_some()
    }

    /// Notes `pos` removed by a pop stamped `stamp`; false when it already
    /// was (its stamp then becomes the older of the two).
    pub fn remove(&mut self, pos: Pos, stamp: Stamp) -> bool {
        match self.span_of(pos) {
            Some((_, _, held)) if held <= stamp => false,
            Some((start, end, held)) => {
                self.spans.remove(&start);
                if start < pos {
                    self.spans.insert(start, (pos, held));
                }
                self.spans.insert(pos, (pos + 1, stamp));
                if pos + 1 < end {
                    self.spans.insert(pos + 1, (end, held));
                }
                self.coalesce_around(pos);
                false
            }
            None => {
                self.spans.insert(pos, (pos + 1, stamp));
                self.coalesce_around(pos);
                true
            }
        }
    }

    /// Joins the span at `pos` with its neighbours where they touch and
    /// share a stamp.
    fn coalesce_around(&mut self, pos: Pos) {
        let Some((mut start, mut end, stamp)) = self.span_of(pos) else {
            return;
        };
        if let Some((s, _, st)) = self.span_of(start - 1) {
            if st == stamp {
                self.spans.remove(&start);
                start = s;
            }
        }
        if let Some((s, e, st)) = self.span_of(end) {
            if st == stamp {
                self.spans.remove(&s);
                end = e;
            }
        }
        self.spans.insert(start, (end, stamp));
    }

    /// Notes every position of `[from, to)` removed by a pop stamped
    /// `stamp`, as [`Removals::remove`] of each would, at the cost of the
    /// spans it meets: a position already removed keeps the older stamp.
    pub fn remove_span(&mut self, from: Pos, to: Pos, stamp: Stamp) {
        if from >= to {
            return;
        }
        let first = self.span_of(from).map_or(from, |(s, _, _)| s);
        let met: Vec<(Pos, Pos, Stamp)> = (self.spans.range(first..to))
            .map(|(&s, &(e, st))| (s, e, st))
            .collect();
        let mut pieces = Vec::with_capacity(2 * met.len() + 3);
        let mut cursor = from;
        for &(s, e, st) in &met {
            self.spans.remove(&s);
            if s < from {
                pieces.push((s, from, st));
            }
            let (inner_from, inner_to) = (s.max(from), e.min(to));
            if cursor < inner_from {
                pieces.push((cursor, inner_from, stamp));
            }
            pieces.push((inner_from, inner_to, st.min(stamp)));
            cursor = inner_to;
            if e > to {
                pieces.push((to, e, st));
            }
        }
        if cursor < to {
            pieces.push((cursor, to, stamp));
        }
        let (low, high) = (first.min(from), met.last().map_or(to, |m| m.1.max(to)));
        for (s, e, st) in pieces {
            self.spans.insert(s, (e, st));
        }
        self.coalesce_within(low - 1, high);
    }

    /// Joins the spans touching `[from, to]` that touch one another and
    /// share a stamp.
    fn coalesce_within(&mut self, from: Pos, to: Pos) {
        let first = self.span_of(from).map_or(from, |(s, _, _)| s);
        let met: Vec<(Pos, Pos, Stamp)> = (self.spans.range(first..=to))
            .map(|(&s, &(e, st))| (s, e, st))
            .collect();
        let mut joined: Vec<(Pos, Pos, Stamp)> = Vec::with_capacity(met.len());
        for (s, e, st) in met {
            self.spans.remove(&s);
            match joined.last_mut() {
                Some(last) if last.1 == s && last.2 == st => last.1 = e,
                _ => joined.push((s, e, st)),
            }
        }
        for (s, e, st) in joined {
            self.spans.insert(s, (e, st));
        }
    }

    /// How many positions in `[from, to)` were removed.
    pub fn count_in(&self, from: Pos, to: Pos) -> usize {
        let first = self.span_of(from).map_or(from, |(s, _, _)| s);
        self.spans
            .range(first..to)
            .map(|(&s, &(e, _))| usize::try_from(e.min(to) - s.max(from)).unwrap_or(0))
            .sum()
    }

    /// The removed positions in `[from, to)` with their stamps, span by
    /// span (clipped to the range).
    pub fn spans_in(&self, from: Pos, to: Pos) -> impl Iterator<Item = (Pos, Pos, Stamp)> + '_ {
        let first = self.span_of(from).map_or(from, |(s, _, _)| s);
        self.spans
            .range(first..to)
            .map(move |(&s, &(e, st))| (s.max(from), e.min(to), st))
            .filter(|(s, e, _)| s < e)
    }

    /// The first position of `[from, to)` not removed, searching upwards
    /// (`up`) or downwards.
    pub fn first_kept(&self, from: Pos, to: Pos, up: bool) -> Option<Pos> {
        let mut at = if up { from } else { to - 1 };
        while from <= at && at < to {
            match self.span_of(at) {
                None => return Some(at),
                Some((s, e, _)) => at = if up { e } else { s - 1 },
            }
        }
        None
    }

    /// Whether every position of `[from, to)` was removed by a pop older
    /// than `stamp`.
    pub fn all_removed_before(&self, from: Pos, to: Pos, stamp: Stamp) -> bool {
        let mut at = from;
        while at < to {
            match self.span_of(at) {
                Some((_, e, st)) if st < stamp => at = e,
                _ => return false,
            }
        }
        true
    }

    /// Gives every stamp that `bound` covers and that is older than
    /// `below` the stamp [`Stamp::ZERO`] (older than any pop or push still
    /// to be decided on), joining the spans that then touch.
    pub fn settle(&mut self, bound: &Seen, below: Option<Stamp>) {
        let old = std::mem::take(&mut self.spans);
        for (start, (end, stamp)) in old {
            let settled = bound.covers(stamp) && below.is_none_or(|b| stamp < b);
            let stamp = if settled { Stamp::ZERO } else { stamp };
            match self.spans.iter_mut().next_back() {
                Some((_, (e, st))) if *e == start && *st == stamp => *e = end,
                _ => {
                    self.spans.insert(start, (end, stamp));
                }
            }
        }
    }

    /// Removals from spans `(start, end, stamp)`; `None` unless they are
    /// non-empty, in order and apart (what [`Removals::iter`] gives).
    pub fn from_spans(spans: impl IntoIterator<Item = (Pos, Pos, Stamp)>) -> Option<Self> {
        let mut out = Self::new();
        let mut last_end = None;
        for (start, end, stamp) in spans {
            if start >= end || last_end.is_some_and(|e| start < e) {
                return None;
            }
            last_end = Some(end);
            out.spans.insert(start, (end, stamp));
        }
        Some(out)
    }

    /// Drops what lies outside `[from, to)` (removals named before a
    /// list's length was known).
    pub fn clip(&mut self, from: Pos, to: Pos) {
        let spans = self.iter().filter_map(|(s, e, st)| {
            let (s, e) = (s.max(from), e.min(to));
            (s < e).then_some((s, e, st))
        });
        self.spans = spans.map(|(s, e, st)| (s, (e, st))).collect();
    }

    /// Spans held (for the tests and the metadata's size).
    pub fn span_count(&self) -> usize {
        self.spans.len()
    }

    /// Every span: start, end, stamp.
    pub fn iter(&self) -> impl Iterator<Item = (Pos, Pos, Stamp)> + '_ {
        self.spans.iter().map(|(&s, &(e, st))| (s, e, st))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(clock: u64) -> Stamp {
        Stamp::new(clock, 1)
    }

    #[test]
    fn removals_join_when_they_touch_with_one_stamp_and_keep_the_older_stamp() {
        let mut r = Removals::new();
        assert!(r.remove(3, st(5)));
        assert!(r.remove(4, st(5)));
        assert!(r.remove(2, st(5)));
        assert_eq!(r.span_count(), 1);
        assert!(!r.remove(3, st(9)), "a second pop of one position");
        assert_eq!(r.iter().collect::<Vec<_>>(), [(2, 5, st(5))]);
        assert!(!r.remove(3, st(1)));
        assert_eq!(
            r.iter().collect::<Vec<_>>(),
            [(2, 3, st(5)), (3, 4, st(1)), (4, 5, st(5))]
        );
        assert_eq!(r.count_in(0, 10), 3);
        assert_eq!(r.count_in(3, 4), 1);
        assert_eq!(r.count_in(4, 9), 1);
        assert!(r.contains(4) && !r.contains(5) && !r.contains(1));
    }

    #[test]
    fn a_span_removed_at_once_is_what_removing_each_position_gives() {
        let mut r = Removals::new();
        r.remove(2, st(5));
        r.remove(6, st(1));
        r.remove_span(0, 8, st(3));
        assert_eq!(
            r.iter().collect::<Vec<_>>(),
            [(0, 6, st(3)), (6, 7, st(1)), (7, 8, st(3))]
        );
        r.remove_span(1 << 30, 1 << 39, st(9));
        assert_eq!(r.count_in(0, 1 << 40), 8 + (1 << 39) - (1 << 30));
    }

    proptest::proptest! {
        #[test]
        fn spans_removed_at_once_match_positions_removed_one_by_one(
            ops in proptest::collection::vec((-6i64..20, 0i64..8, 1u64..6), 1..12)
        ) {
            let (mut by_span, mut by_pos) = (Removals::new(), Removals::new());
            for (from, len, clock) in ops {
                by_span.remove_span(from, from + len, st(clock));
                for p in from..from + len {
                    by_pos.remove(p, st(clock));
                }
                proptest::prop_assert_eq!(
                    by_span.iter().collect::<Vec<_>>(),
                    by_pos.iter().collect::<Vec<_>>()
                );
            }
        }
    }

    #[test]
    fn the_first_kept_position_skips_removed_spans_either_way() {
        let mut r = Removals::new();
        for p in [0, 1, 2, 5] {
            r.remove(p, st(1));
        }
        assert_eq!(r.first_kept(0, 6, true), Some(3));
        assert_eq!(r.first_kept(0, 6, false), Some(4));
        assert_eq!(r.first_kept(0, 3, true), None);
        assert_eq!(r.first_kept(5, 6, false), None);
    }

    #[test]
    fn all_removed_before_looks_at_every_position_s_oldest_pop() {
        let mut r = Removals::new();
        r.remove(0, st(2));
        r.remove(1, st(7));
        assert!(r.all_removed_before(0, 2, st(8)));
        assert!(!r.all_removed_before(0, 2, st(7)));
        assert!(!r.all_removed_before(0, 3, st(8)));
        assert!(r.all_removed_before(4, 4, st(1)), "nothing to remove");
    }

    #[test]
    fn settled_stamps_become_zero_and_their_spans_join() {
        let mut r = Removals::new();
        r.remove(0, st(2));
        r.remove(1, st(3));
        r.remove(2, Stamp::new(9, 2));
        let bound: Seen = [(1, 5), (2, 9)].into_iter().collect();
        r.settle(&bound, Some(Stamp::new(9, 2)));
        assert_eq!(
            r.iter().collect::<Vec<_>>(),
            [(0, 2, Stamp::ZERO), (2, 3, Stamp::new(9, 2))],
            "a stamp at or above the oldest run still to come keeps its stamp"
        );
        r.settle(&bound, None);
        assert_eq!(r.iter().collect::<Vec<_>>(), [(0, 3, Stamp::ZERO)]);
    }
}
