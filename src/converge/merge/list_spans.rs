//! Another state's removals taken span by span (`list_collect`'s merge):
//! a span of removed indexes or positions is resolved here stretch by
//! stretch, each stretch lying in one run, whole write or lineage, so that
//! a merge costs the spans and the elements it newly removes, not every
//! element a queue ever popped.

use crate::converge::merge::list_positions::{ListChange, ListPositions, Origin, RunId, Taken};
use crate::converge::merge::lists::End;
use crate::converge::merge::removals::{Pos, MAX_POS};
use crate::converge::version::Stamp;

/// `taken` moved `by` indexes or positions on.
fn advanced(taken: Taken, by: Pos) -> Taken {
    match taken {
        Taken::Run { run, index } => Taken::Run {
            run,
            index: index + by,
        },
        Taken::Write { write, index } => Taken::Write {
            write,
            index: index + by,
        },
        Taken::Pos { lineage, pos } => Taken::Pos {
            lineage,
            pos: pos + by,
        },
    }
}

impl ListPositions {
    /// Another state's removal of the `len` elements named from `first` on
    /// (one of its spans), by pops the oldest of which was stamped `stamp`.
    pub(super) fn apply_removed_span(
        &mut self,
        first: Taken,
        len: Pos,
        stamp: Stamp,
    ) -> Vec<ListChange> {
        let mut changes = Vec::new();
        let mut done = 0;
        while done < len {
            let name = advanced(first, done);
            let Some(here) = self.resolve(name) else {
                // By the rules every later name of the span fares alike
                // (a run or lineage gone, or past what it named). Where
                // they are broken (a position beyond every run a walk can
                // reach, counted in `unplaced`) the rest of the span is
                // dropped with it.
                break;
            };
            let stretch = self.stretch(name).min(self.stretch(here)).min(len - done);
            changes.extend(self.remove_stretch(here, stretch, stamp));
            done += stretch.max(1);
        }
        changes
    }

    /// How many names from `taken` on lie in what it names here (runs and
    /// lists whose length is not known yet: no limit).
    fn stretch(&self, taken: Taken) -> Pos {
        let rest = |len: Option<Pos>, at: Pos| len.map_or(MAX_POS, |l| l - at);
        match taken {
            Taken::Run { run, index } => {
                let held = self.runs(run.end).get(&run.stamp);
                let placed = self.placed.get(&run).map(|p| p.len);
                let known = held.and_then(|r| r.values.as_ref().map(|_| r.len()));
                rest(known.or(placed.filter(|_| held.is_none())), index)
            }
            Taken::Write { write, index } => match self.wholes.get(&write) {
                Some(w) => rest(w.list.values.as_ref().map(|_| w.list.len()), index),
                None if self.lineage.id == Origin::Write(write) => {
                    rest(Some(self.lineage.written), index)
                }
                None => MAX_POS,
            },
            Taken::Pos { lineage, pos } => {
                let l = &self.lineage;
                let inside = lineage == l.id && (l.low..l.high).contains(&pos);
                if inside {
                    l.high - pos
                } else {
                    MAX_POS
                }
            }
        }
        .max(1)
    }

    /// Removes `len` elements from `first` on, all in what `first` names
    /// here: the server's list loses those it still shows (they sit next
    /// to each other there).
    pub(super) fn remove_stretch(
        &mut self,
        first: Taken,
        len: Pos,
        stamp: Stamp,
    ) -> Vec<ListChange> {
        let shown = self.removals_of(first).and_then(|(removed, from)| {
            let to = from.saturating_add(len);
            let kept = usize::try_from(to - from).unwrap_or(0) - removed.count_in(from, to);
            let at = removed.first_kept(from, to, true)?;
            Some((advanced(first, at - from), kept))
        });
        let index = shown.and_then(|(t, kept)| Some((self.index_of(t)?, kept)));
        self.mark_span(first, len, stamp);
        index.map_or_else(Vec::new, |(at, kept)| vec![ListChange::Remove(at); kept])
    }

    /// Every removal this state holds, span by span, as the first element
    /// a pop took, how many it took from there, and the oldest pop's stamp.
    pub(super) fn removed_spans_named(&self) -> Vec<(Taken, Pos, Stamp)> {
        let mut out = Vec::new();
        for (end, runs) in [(End::Left, &self.left), (End::Right, &self.right)] {
            for (&stamp, held) in runs {
                let run = RunId { stamp, end };
                let spans = held.removed.iter();
                out.extend(
                    spans.map(|(from, to, by)| (Taken::Run { run, index: from }, to - from, by)),
                );
            }
        }
        for (&write, whole) in &self.wholes {
            let spans = whole.list.removed.iter();
            out.extend(
                spans.map(|(from, to, by)| (Taken::Write { write, index: from }, to - from, by)),
            );
        }
        let lineage = self.lineage.id;
        let spans = self.lineage.removed.iter();
        out.extend(spans.map(|(from, to, by)| (Taken::Pos { lineage, pos: from }, to - from, by)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lineage_of(high: Pos, removed_to: Pos, stamp: Stamp) -> ListPositions {
        let mut state = ListPositions::default();
        state.lineage.high = high;
        state.lineage.removed.remove_span(0, removed_to, stamp);
        state
    }

    #[test]
    fn a_merge_costs_the_spans_not_every_position_a_queue_ever_popped() {
        // A queue that popped 2^39 - 2 elements here, 2^39 - 1 there: the
        // merge removes the one element more, at once (position by
        // position it would walk 2^39 positions).
        let high = 1 << 39;
        let mut here = lineage_of(high, high - 2, Stamp::new(5, 1));
        let there = lineage_of(high, high - 1, Stamp::new(3, 2));
        assert_eq!(here.merge(&there), [ListChange::Remove(0)]);
        let spans: Vec<_> = here.lineage.removed.iter().collect();
        assert_eq!(
            spans,
            [(0, high - 1, Stamp::new(3, 2))],
            "every position keeps the older pop's stamp"
        );
    }
}
