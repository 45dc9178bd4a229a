//! List pops as removals of one element each (issue 27): positions that
//! outlive the collection of runs, so that an element popped on two sites
//! at once is removed once, and a pop never undoes a push it had not seen.
//!
//! A pushed run (`lists`) keeps its elements' names, `(run, index)`, until
//! every site applied it. Then each site **collects** it into the
//! **lineage**: it gives the run's elements positions next to those
//! already given, at the run's end (`[low - len, low)` at the head,
//! `[high, high + len)` at the tail), by the run's whole length, popped
//! elements included. Every site collects the same runs in the same order
//! (the runs the bound covers, by stamp, stopping at the first it does
//! not: a run older than a covered one has arrived everywhere, since its
//! site made it before applying the covered one), so every site gives an
//! element the same position.
//!
//! A pop names the element it took ([`Taken`]): by its run while its site
//! holds the run, else by its position. A site that receives a pop
//! - of a run it holds removes that index;
//! - of a run it collected removes the position it gave it ([`Placed`],
//!   kept until every site says it collected the run: after that no pop
//!   names it);
//! - of a position beyond the ones it gave out finds the run that will
//!   get it: the sender collected it, so it arrived here too, and the
//!   runs between it and the lineage are the same ones here ([`walk`]).
//!
//! Removals are a union, so two sites that pop one element at once both
//! return it and remove it once.
//!
//! **A new lineage.** A list popped empty keeps its lineage (its
//! positions, all removed) until the next run is collected: a run
//! collected into a lineage whose every position was removed by a pop
//! older than the run starts a new lineage, named by the run, at position
//! 0. That decision reads only pops older than the run, which every site
//! has when it collects the run, so all sites start it at the same run; a
//! site that drops an emptied list's metadata at rest starts the same
//! lineage. Pops of an older lineage are then no-ops: all its positions
//! were removed. A position named in a lineage that this site has not
//! started yet (it holds the run that starts it) is found by a walk from 0.
//!
//! Stamps of removals matter only for that decision; once the bound
//! covers them and no run still to be collected is older, they become
//! [`Stamp::ZERO`], so the removals at rest are a few spans.
//!
//! Pure: the caller applies [`ListChange`]s to the server's list.

use std::collections::BTreeMap;

use crate::converge::merge::hashes::Bytes;
use crate::converge::merge::lists::End;
use crate::converge::merge::removals::{Pos, Removals};
use crate::converge::merge::Seen;
use crate::converge::version::Stamp;

/// A run's name: the stamp of the flush that pushed it and its end (one
/// flush can push at both ends; of its two runs the left one counts as
/// the older).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RunId {
    /// The flush's stamp.
    pub stamp: Stamp,
    /// The end it pushed at.
    pub end: End,
}

impl RunId {
    /// No run: the lineage of a list that never collected one.
    pub const NONE: RunId = RunId {
        stamp: Stamp::ZERO,
        end: End::Left,
    };
}

impl Default for RunId {
    fn default() -> Self {
        RunId::NONE
    }
}

/// The element a pop took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Element `index` of the run `run`.
    Run {
        /// The run.
        run: RunId,
        /// The element's index in the run, head to tail.
        index: Pos,
    },
    /// Position `pos` of the lineage started by the run `lineage`.
    Pos {
        /// The lineage.
        lineage: RunId,
        /// The position.
        pos: Pos,
    },
}

/// What the server's list must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListChange {
    /// Remove the element at this index.
    Remove(usize),
    /// Insert these elements before this index.
    Insert(usize, Vec<Bytes>),
}

/// A run: what one flush pushed at one end (`None`: only pops of it have
/// arrived), and which of its indexes were popped.
#[derive(Debug, Clone, Default)]
pub(super) struct Run {
    pub(super) values: Option<Vec<Bytes>>,
    pub(super) removed: Removals,
}

impl Run {
    fn len(&self) -> Pos {
        self.values
            .as_ref()
            .map_or(0, |v| Pos::try_from(v.len()).unwrap_or(Pos::MAX))
    }

    fn present(&self) -> usize {
        usize::try_from(self.len()).unwrap_or(0) - self.removed.count_in(0, self.len())
    }

    /// Its index's place among its present elements.
    fn rank(&self, index: Pos) -> usize {
        usize::try_from(index).unwrap_or(0) - self.removed.count_in(0, index)
    }

    fn present_values(&self) -> Vec<Bytes> {
        let values = self.values.as_deref().unwrap_or_default();
        (0..self.len())
            .filter(|&i| !self.removed.contains(i))
            .filter_map(|i| values.get(usize::try_from(i).ok()?).cloned())
            .collect()
    }
}

/// The positions given to collected runs.
#[derive(Debug, Clone, Default)]
pub(super) struct Lineage {
    /// The run that started it ([`RunId::NONE`]: none yet).
    pub(super) id: RunId,
    pub(super) low: Pos,
    pub(super) high: Pos,
    pub(super) removed: Removals,
}

impl Lineage {
    fn present(&self) -> usize {
        usize::try_from(self.high - self.low).unwrap_or(0)
            - self.removed.count_in(self.low, self.high)
    }
}

/// Where a collected run's elements went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Placed {
    pub(super) lineage: RunId,
    pub(super) base: Pos,
}

/// Another site's decisions, copied while a merge collects what it had
/// collected: the runs older than `before`, the oldest run it still held
/// (none: every run the bound covers). Of those it started a lineage only
/// at `lineage`, its last. Its removals carry [`Stamp::ZERO`] where the
/// stamps settled, which could start a lineage it did not; for runs it
/// had not collected they are exact enough (they are older than `before`).
#[derive(Debug, Clone, Copy)]
struct Copied {
    lineage: RunId,
    before: Option<RunId>,
}

/// A list's merge metadata under pops of one element: its runs, its
/// lineage and the runs it collected lately.
#[derive(Debug, Clone, Default)]
pub struct ListPositions {
    pub(super) lineage: Lineage,
    pub(super) left: BTreeMap<Stamp, Run>,
    pub(super) right: BTreeMap<Stamp, Run>,
    pub(super) placed: BTreeMap<RunId, Placed>,
    /// The bound collection reached (a state handed over carries it).
    pub(super) bound: Seen,
    /// Pops that named a run or lineage this state cannot place (the
    /// rules say none can: counted, for the tests).
    unplaced: u64,
}

impl ListPositions {
    fn runs(&self, end: End) -> &BTreeMap<Stamp, Run> {
        match end {
            End::Left => &self.left,
            End::Right => &self.right,
        }
    }

    fn runs_mut(&mut self, end: End) -> &mut BTreeMap<Stamp, Run> {
        match end {
            End::Left => &mut self.left,
            End::Right => &mut self.right,
        }
    }

    /// Elements on the server left of the lineage.
    fn left_count(&self) -> usize {
        self.left.values().map(Run::present).sum()
    }

    /// The server's index of the first element of run `stamp` at `end`.
    fn run_start(&self, end: End, stamp: Stamp) -> usize {
        match end {
            End::Left => self
                .left
                .range(stamp..)
                .skip(1)
                .map(|(_, r)| r.present())
                .sum(),
            End::Right => {
                let inner: usize = self.right.range(..stamp).map(|(_, r)| r.present()).sum();
                self.left_count() + self.lineage.present() + inner
            }
        }
    }

    /// The server's index of `taken`, where this state holds it present.
    fn index_of(&self, taken: Taken) -> Option<usize> {
        match taken {
            Taken::Run { run, index } => {
                let held = self.runs(run.end).get(&run.stamp)?;
                let present = (0..held.len()).contains(&index) && !held.removed.contains(index);
                present.then(|| self.run_start(run.end, run.stamp) + held.rank(index))
            }
            Taken::Pos { lineage, pos } => {
                let l = &self.lineage;
                let present =
                    lineage == l.id && (l.low..l.high).contains(&pos) && !l.removed.contains(pos);
                present.then(|| {
                    self.left_count() + usize::try_from(pos - l.low).unwrap_or(0)
                        - l.removed.count_in(l.low, pos)
                })
            }
        }
    }

    /// Notes a run pushed here (the server holds its values already).
    pub fn local_push(&mut self, end: End, stamp: Stamp, values: Vec<Bytes>) {
        let run = self.runs_mut(end).entry(stamp).or_default();
        run.values = Some(values);
    }

    /// The element at `end` of the list, as a pop names it.
    pub fn edge(&self, end: End) -> Option<Taken> {
        let up = end == End::Left;
        let run_edge = |(&stamp, r): (&Stamp, &Run), end: End| {
            let index = r.removed.first_kept(0, r.len(), up)?;
            let run = RunId { stamp, end };
            Some(Taken::Run { run, index })
        };
        let l = &self.lineage;
        let lineage = || {
            let pos = l.removed.first_kept(l.low, l.high, up)?;
            Some(Taken::Pos { lineage: l.id, pos })
        };
        match end {
            End::Left => (self.left.iter().rev().find_map(|r| run_edge(r, End::Left)))
                .or_else(lineage)
                .or_else(|| self.right.iter().find_map(|r| run_edge(r, End::Right))),
            End::Right => (self
                .right
                .iter()
                .rev()
                .find_map(|r| run_edge(r, End::Right)))
            .or_else(lineage)
            .or_else(|| self.left.iter().find_map(|r| run_edge(r, End::Left))),
        }
    }

    /// Pops the element at `end` (the server popped it), stamped `stamp`:
    /// what the pop ships.
    pub fn local_pop(&mut self, end: End, stamp: Stamp) -> Option<Taken> {
        let taken = self.edge(end)?;
        self.mark(taken, stamp);
        Some(taken)
    }

    /// Notes `taken` removed; `taken` names a run held (or awaited) or a
    /// position of the lineage.
    fn mark(&mut self, taken: Taken, stamp: Stamp) {
        match taken {
            Taken::Run { run, index } => {
                self.runs_mut(run.end)
                    .entry(run.stamp)
                    .or_default()
                    .removed
                    .remove(index, stamp);
            }
            Taken::Pos { pos, .. } => {
                self.lineage.removed.remove(pos, stamp);
            }
        }
    }

    /// Another site's pop of `taken`, stamped `stamp`; `bound`: the
    /// site's collection bound.
    pub fn apply_pop(&mut self, taken: Taken, stamp: Stamp, bound: &Seen) -> Option<ListChange> {
        self.bound.join(bound);
        let taken = self.resolve(taken)?;
        let index = self.index_of(taken);
        self.mark(taken, stamp);
        index.map(ListChange::Remove)
    }

    /// `taken` as this state holds it: a run held or awaited, or a
    /// position of its lineage; `None` where the pop changes nothing here.
    fn resolve(&mut self, taken: Taken) -> Option<Taken> {
        match taken {
            Taken::Run { run, index } => {
                if self.runs(run.end).contains_key(&run.stamp) {
                    return Some(taken);
                }
                if let Some(p) = self.placed.get(&run) {
                    let pos = p.base + index;
                    return (p.lineage == self.lineage.id).then_some(Taken::Pos {
                        lineage: p.lineage,
                        pos,
                    });
                }
                // Collected and every site said so (or before this state
                // began): a resend. Else the run has not arrived yet (a
                // third site's).
                (!self.bound.covers(run.stamp)).then_some(taken)
            }
            Taken::Pos { lineage, pos } => {
                let l = &self.lineage;
                if lineage == l.id {
                    if (l.low..l.high).contains(&pos) {
                        return Some(taken);
                    }
                    return self.walk(pos, None);
                }
                if self.runs(lineage.end).contains_key(&lineage.stamp) {
                    return self.walk(pos, Some(lineage));
                }
                // An older lineage (all of it popped), or one collected
                // before this state began. One not here yet cannot be:
                // its sender collected it, so it arrived everywhere.
                if !self.bound.covers(lineage.stamp) {
                    self.unplaced += 1;
                }
                None
            }
        }
    }

    /// The run element that position `pos` will be once this site
    /// collects as far as the sender did: from the lineage's edge (or, in
    /// a lineage that `restart` starts, from 0), through the runs held at
    /// that end, innermost first.
    fn walk(&mut self, pos: Pos, restart: Option<RunId>) -> Option<Taken> {
        let (low, high, from) = match restart {
            None => (self.lineage.low, self.lineage.high, RunId::NONE),
            Some(first) => (0, 0, first),
        };
        let end = if pos < low { End::Left } else { End::Right };
        let mut cursor = if end == End::Left { low } else { high };
        let runs = self.runs(end).iter();
        let mut runs = runs.filter(|(&stamp, _)| RunId { stamp, end } >= from);
        let found = runs.find_map(|(&stamp, r)| {
            let (start, past) = match end {
                End::Left => (cursor - r.len(), cursor),
                End::Right => (cursor, cursor + r.len()),
            };
            cursor = if end == End::Left { start } else { past };
            let runs_values = r.values.is_some();
            (runs_values && (start..past).contains(&pos)).then_some(Taken::Run {
                run: RunId { stamp, end },
                index: pos - start,
            })
        });
        if found.is_none() {
            self.unplaced += 1;
        }
        found
    }

    /// Another site's run: `values` pushed at `end` by the flush stamped
    /// `stamp`; `bound`: the site's collection bound.
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
        let run = self.runs_mut(end).entry(stamp).or_default();
        if run.values.is_some() {
            return None;
        }
        run.values = Some(values.to_vec());
        let present = run.present_values();
        let at = self.run_start(end, stamp);
        (!present.is_empty()).then_some(ListChange::Insert(at, present))
    }

    /// Collects the runs `bound` covers, oldest first, stopping at the
    /// first it does not; forgets where runs went that every site
    /// collected (`settled`: the least of the bounds the sites reported
    /// having collected at).
    pub fn collect(&mut self, bound: &Seen, settled: &Seen) {
        self.collect_to(bound, settled, None);
    }

    /// [`ListPositions::collect`]; with `copied`, the runs another site
    /// collected take its decisions (see [`Copied`]): the server drops
    /// what it still held of a lineage that site left.
    fn collect_to(
        &mut self,
        bound: &Seen,
        settled: &Seen,
        copied: Option<Copied>,
    ) -> Vec<ListChange> {
        self.bound.join(bound);
        let mut changes = Vec::new();
        while let Some(run) = self.oldest_run() {
            if !self.bound.covers(run.stamp) {
                break;
            }
            let arrived = self
                .runs(run.end)
                .get(&run.stamp)
                .is_some_and(|r| r.values.is_some());
            if !arrived {
                // Pops of a run collected before this state began (a
                // resend): the run will not come again.
                self.runs_mut(run.end).remove(&run.stamp);
                continue;
            }
            let l = &self.lineage;
            let restart = match copied {
                Some(c) if c.before.is_none_or(|b| run < b) => run == c.lineage,
                _ => l.removed.all_removed_before(l.low, l.high, run.stamp),
            };
            if restart {
                let at = self.left_count();
                changes.extend((0..l.present()).map(|_| ListChange::Remove(at)));
                self.lineage = Lineage {
                    id: run,
                    ..Lineage::default()
                };
            }
            self.collect_run(run);
        }
        let below = self.oldest_run().map(|r| r.stamp);
        self.lineage.removed.settle(&self.bound, below);
        for run in self.left.values_mut().chain(self.right.values_mut()) {
            run.removed.settle(&self.bound, below);
        }
        // A site whose bound covers a run collected it only once its bound
        // covers every older run too: forget places oldest first.
        while let Some(entry) = self.placed.first_entry() {
            if !settled.covers(entry.key().stamp) {
                break;
            }
            entry.remove();
        }
        changes
    }

    /// The oldest run held.
    fn oldest_run(&self) -> Option<RunId> {
        let left = self.left.keys().next().map(|&stamp| RunId {
            stamp,
            end: End::Left,
        });
        let right = self.right.keys().next().map(|&stamp| RunId {
            stamp,
            end: End::Right,
        });
        [left, right].into_iter().flatten().min()
    }

    /// Gives the run `id` its positions.
    fn collect_run(&mut self, id: RunId) {
        let Some(run) = self.runs_mut(id.end).remove(&id.stamp) else {
            return;
        };
        let l = &mut self.lineage;
        let base = match id.end {
            End::Left => {
                l.low -= run.len();
                l.low
            }
            End::Right => {
                l.high += run.len();
                l.high - run.len()
            }
        };
        for (from, to, removed_by) in run.removed.iter() {
            for index in from..to {
                l.removed.remove(base + index, removed_by);
            }
        }
        self.placed.insert(
            id,
            Placed {
                lineage: l.id,
                base,
            },
        );
    }

    /// Takes in another site's whole state (catch-up, full sync): its runs
    /// as pushes and its removals as pops, then collects as far as it did
    /// (its bound is a true bound, every run older than one it covers is
    /// now here, and where it started its lineage this state starts it).
    pub fn merge(&mut self, other: &ListPositions) -> Vec<ListChange> {
        let mut changes = Vec::new();
        let runs = || [(End::Left, &other.left), (End::Right, &other.right)];
        for (end, runs) in runs() {
            for (&stamp, run) in runs {
                if let Some(values) = &run.values {
                    changes.extend(self.apply_push(end, stamp, values, &Seen::new()));
                }
            }
        }
        for (end, runs) in runs() {
            for (&stamp, run) in runs {
                for (from, to, by) in run.removed.iter() {
                    for index in from..to {
                        let run = RunId { stamp, end };
                        let taken = Taken::Run { run, index };
                        changes.extend(self.apply_pop(taken, by, &Seen::new()));
                    }
                }
            }
        }
        let lineage = other.lineage.id;
        for (from, to, by) in other.lineage.removed.iter() {
            for pos in from..to {
                changes.extend(self.apply_pop(Taken::Pos { lineage, pos }, by, &Seen::new()));
            }
        }
        let mut bound = self.bound.clone();
        bound.join(&other.bound);
        let copied = Copied {
            lineage,
            before: other.oldest_run(),
        };
        changes.extend(self.collect_to(&bound, &Seen::new(), Some(copied)));
        changes
    }

    /// Whether nothing is held but the lineage's edges and its removed
    /// spans (the metadata a list keeps at rest).
    pub fn at_rest(&self) -> bool {
        self.left.is_empty() && self.right.is_empty() && self.placed.is_empty()
    }

    /// Whether the list is empty and nothing of it can still be decided
    /// on: no run, no place, and every pop's stamp settled. Its metadata
    /// may then go; the next run collected starts a new lineage here as it
    /// does everywhere else.
    pub fn forgettable(&self) -> bool {
        let l = &self.lineage;
        self.at_rest()
            && l.present() == 0
            && l.removed.iter().all(|(_, _, stamp)| stamp == Stamp::ZERO)
    }

    /// Runs held (not collected yet).
    pub fn runs_held(&self) -> usize {
        self.left.len() + self.right.len()
    }

    /// Removed spans the lineage holds.
    pub fn removed_spans(&self) -> usize {
        self.lineage.removed.span_count()
    }

    /// Pops this state could not place (none, by the rules).
    pub fn unplaced(&self) -> u64 {
        self.unplaced
    }
}

/// `list` after `change` (the tests' server).
pub fn apply_change(list: &mut Vec<Bytes>, change: &ListChange) {
    match change {
        ListChange::Remove(at) if *at < list.len() => {
            list.remove(*at);
        }
        ListChange::Insert(at, values) => {
            let at = (*at).min(list.len());
            list.splice(at..at, values.iter().cloned());
        }
        ListChange::Remove(_) => {}
    }
}
