//! Another site's pushes, pops and whole writes of a list, against its
//! positions state (`list_positions`): where a pop's names lead here, and
//! what the server's list must do.

use crate::converge::merge::hashes::Bytes;
use crate::converge::merge::list_collect::Item;
use crate::converge::merge::list_flush::FlushedList;
use crate::converge::merge::list_positions::{
    ListChange, ListPositions, Origin, Run, RunId, Taken, Whole,
};
use crate::converge::merge::lists::End;
use crate::converge::merge::removals::{Pos, MAX_POS};
use crate::converge::merge::Seen;
use crate::converge::version::Stamp;

impl ListPositions {
    /// Another site's pop of `taken`, stamped `stamp`; `bound`: the
    /// site's collection bound.
    pub fn apply_pop(&mut self, taken: Taken, stamp: Stamp, bound: &Seen) -> Option<ListChange> {
        self.bound.join(bound);
        self.apply_removed_span(taken, 1, stamp).pop()
    }

    /// Another site's flush of the list stamped `stamp` (`list_flush`):
    /// the elements its pops took, then its runs.
    pub fn apply_flush(
        &mut self,
        stamp: Stamp,
        flushed: &FlushedList,
        bound: &Seen,
    ) -> Vec<ListChange> {
        let mut changes = Vec::new();
        for &taken in &flushed.taken {
            changes.extend(self.apply_pop(taken, stamp, bound));
        }
        for (end, values) in &flushed.runs {
            changes.extend(self.apply_push(*end, stamp, values, bound));
        }
        changes
    }

    /// Another site's run: `values` pushed at `end` by the flush stamped
    /// `stamp`. A whole write held here that had seen the run removes
    /// every element of it.
    pub fn apply_push(
        &mut self,
        end: End,
        stamp: Stamp,
        values: &[Bytes],
        bound: &Seen,
    ) -> Option<ListChange> {
        self.bound.join(bound);
        let held = self.runs(end).contains_key(&stamp);
        if self.placed.contains_key(&RunId { stamp, end }) || (self.bound.covers(stamp) && !held) {
            return None;
        }
        let wiped_by = self
            .arrived_wholes()
            .filter(|(_, w)| w.seen.covers(stamp))
            .map(|(s, _)| s)
            .min();
        let run = self.runs_mut(end).entry(stamp).or_default();
        if run.values.is_some() {
            return None;
        }
        run.values = Some(values.to_vec());
        let len = run.len();
        run.removed.clip(0, len);
        if let Some(write) = wiped_by {
            run.wipe(write);
        }
        let present = run.present_values();
        let at = self.run_start(end, stamp);
        (!present.is_empty()).then_some(ListChange::Insert(at, present))
    }

    /// A whole write, here or from another site: the list `values` at
    /// `stamp`, made where `seen` was applied. It removes every element of
    /// the runs it had seen; as the newest whole write held, it is the
    /// list's middle.
    pub fn apply_whole(
        &mut self,
        stamp: Stamp,
        seen: &Seen,
        values: &[Bytes],
        bound: &Seen,
    ) -> Vec<ListChange> {
        self.bound.join(bound);
        let held = self.wholes.get(&stamp);
        let collected =
            self.lineage.id == Origin::Write(stamp) || (self.bound.covers(stamp) && held.is_none());
        if collected || held.is_some_and(|w| w.list.values.is_some()) {
            return Vec::new();
        }
        let mut changes = Vec::new();
        for end in [End::Left, End::Right] {
            let seen_runs: Vec<Stamp> = self
                .runs(end)
                .keys()
                .copied()
                .filter(|&s| seen.covers(s))
                .collect();
            for run_stamp in seen_runs {
                let run = RunId {
                    stamp: run_stamp,
                    end,
                };
                let len = self.runs(end).get(&run_stamp).map_or(0, Run::len);
                let first = Taken::Run { run, index: 0 };
                changes.extend(self.remove_stretch(first, len, stamp));
            }
        }
        let whole = self.wholes.entry(stamp).or_default();
        whole.list.values = Some(values.to_vec());
        let len = whole.list.len();
        whole.list.removed.clip(0, len);
        whole.seen = seen.clone();
        if let Some((middle, list)) = self.middle_write() {
            if middle == stamp {
                return vec![ListChange::Rebuild(self.around(list))];
            }
        }
        changes
    }

    /// The whole writes held whose lists arrived.
    pub(super) fn arrived_wholes(&self) -> impl Iterator<Item = (Stamp, &Whole)> {
        self.wholes
            .iter()
            .filter(|(_, w)| w.list.values.is_some())
            .map(|(&s, w)| (s, w))
    }

    /// `taken` as this state holds it: a run or whole write held or
    /// awaited, or a position of its lineage; `None` where the pop changes
    /// nothing here.
    pub(super) fn resolve(&mut self, taken: Taken) -> Option<Taken> {
        let resolved = self.resolve_named(taken);
        if resolved.is_none_or(|t| self.within(t)) {
            return resolved;
        }
        // An index past its run or list: no site names one.
        self.unplaced += 1;
        None
    }

    /// Whether `taken` (as resolved) lies inside what it names.
    fn within(&self, taken: Taken) -> bool {
        let inside = |index: Pos, len: Option<Pos>| (0..len.unwrap_or(MAX_POS)).contains(&index);
        match taken {
            Taken::Run { run, index } => {
                let held = self.runs(run.end).get(&run.stamp);
                inside(index, held.and_then(|r| r.values.as_ref().map(|_| r.len())))
            }
            Taken::Write { write, index } => {
                let held = self.wholes.get(&write).map(|w| &w.list);
                inside(index, held.and_then(|r| r.values.as_ref().map(|_| r.len())))
            }
            Taken::Pos { pos, .. } => pos.abs() < MAX_POS,
        }
    }

    fn resolve_named(&mut self, taken: Taken) -> Option<Taken> {
        match taken {
            Taken::Run { run, index } => {
                if self.runs(run.end).contains_key(&run.stamp) {
                    return Some(taken);
                }
                if let Some(p) = self.placed.get(&run) {
                    let fits = (0..p.len).contains(&index);
                    let pos = p.base + index.clamp(0, MAX_POS);
                    let here = p.lineage == self.lineage.id && fits;
                    self.unplaced += u64::from(!fits);
                    return here.then_some(Taken::Pos {
                        lineage: p.lineage,
                        pos,
                    });
                }
                // Collected and every site said so (or before this state
                // began): a resend. Else the run has not arrived yet (a
                // third site's).
                (!self.bound.covers(run.stamp)).then_some(taken)
            }
            Taken::Write { write, index } => {
                if self.wholes.contains_key(&write) {
                    return Some(taken);
                }
                let lineage = Origin::Write(write);
                if self.lineage.id == lineage {
                    let fits = (0..self.lineage.written).contains(&index);
                    return fits.then_some(Taken::Pos {
                        lineage,
                        pos: index,
                    });
                }
                (!self.bound.covers(write)).then_some(taken)
            }
            Taken::Pos { lineage, pos } => self.resolve_pos(lineage, pos),
        }
    }

    /// A position of lineage `lineage` as this state holds it.
    fn resolve_pos(&mut self, lineage: Origin, pos: Pos) -> Option<Taken> {
        let l = &self.lineage;
        if lineage == l.id {
            if (l.low..l.high).contains(&pos) {
                return Some(Taken::Pos { lineage, pos });
            }
            return self.walk(pos, None);
        }
        let (started_by_held, origin_stamp) = match lineage {
            Origin::Run(r) => (self.runs(r.end).contains_key(&r.stamp), r.stamp),
            Origin::Write(w) => (self.wholes.contains_key(&w), w),
        };
        if started_by_held {
            if let Origin::Write(write) = lineage {
                let len = self.wholes.get(&write).map_or(0, |w| w.list.len());
                if (0..len).contains(&pos) {
                    return Some(Taken::Write { write, index: pos });
                }
            }
            return self.walk(pos, Some(lineage));
        }
        // An older lineage (all of it popped or written over), or one
        // collected before this state began. One not here yet cannot be:
        // its sender collected it, so it arrived everywhere.
        if !self.bound.covers(origin_stamp) {
            self.unplaced += 1;
        }
        None
    }

    /// The run element that position `pos` will be once this site
    /// collects as far as the sender did: from the lineage's edge (or, in
    /// the lineage `restart` starts, from its own edges), through the runs
    /// at that end that collection will put into that lineage, in order.
    fn walk(&mut self, pos: Pos, restart: Option<Origin>) -> Option<Taken> {
        let order = self.collection_order();
        let at = |item: Item| order.iter().position(|&i| i == item);
        let (low, high, from) = match restart {
            None => (self.lineage.low, self.lineage.high, Some(0)),
            Some(Origin::Run(r)) => (0, 0, at(Item::Run(r.stamp, r.end))),
            Some(Origin::Write(w)) => {
                let len = self.wholes.get(&w).map_or(0, |x| x.list.len());
                (0, len, at(Item::Whole(w)).map(|i| i + 1))
            }
        };
        let end = if pos < low { End::Left } else { End::Right };
        let mut cursor = if end == End::Left { low } else { high };
        let mut found = None;
        for &item in order.get(from.unwrap_or(order.len())..).unwrap_or_default() {
            let (stamp, run_end) = match item {
                Item::Whole(_) => break,
                Item::Run(stamp, run_end) => (stamp, run_end),
            };
            let Some(r) = self.runs(run_end).get(&stamp).filter(|_| run_end == end) else {
                continue;
            };
            let (start, past) = match end {
                End::Left => (cursor - r.len(), cursor),
                End::Right => (cursor, cursor + r.len()),
            };
            cursor = if end == End::Left { start } else { past };
            if (start..past).contains(&pos) {
                let run = RunId { stamp, end };
                found = Some(Taken::Run {
                    run,
                    index: pos - start,
                });
                break;
            }
        }
        if found.is_none() {
            self.unplaced += 1;
        }
        found
    }
}
