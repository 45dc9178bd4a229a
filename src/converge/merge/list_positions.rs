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

/// The element a pop took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Element `index` of the run pushed at `end` by the flush stamped
    /// `run`.
    Run {
        /// The run's end.
        end: End,
        /// The run's stamp.
        run: Stamp,
        /// The element's index in the run, head to tail.
        index: Pos,
    },
    /// Position `pos` of the lineage started by the run stamped
    /// `lineage`.
    Pos {
        /// The lineage.
        lineage: Stamp,
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
struct Run {
    values: Option<Vec<Bytes>>,
    removed: Removals,
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
struct Lineage {
    /// The run that started it ([`Stamp::ZERO`]: none yet).
    id: Stamp,
    low: Pos,
    high: Pos,
    removed: Removals,
}

impl Lineage {
    fn present(&self) -> usize {
        usize::try_from(self.high - self.low).unwrap_or(0)
            - self.removed.count_in(self.low, self.high)
    }
}

/// Where a collected run's elements went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Placed {
    lineage: Stamp,
    base: Pos,
}

/// Another site's decisions, copied while a merge collects what it had
/// collected: the runs older than `before`, the oldest run it still held
/// (none: every run the bound covers). Of those it started a lineage only
/// at `lineage`, its last. Its removals carry [`Stamp::ZERO`] where the
/// stamps settled, which could start a lineage it did not; for runs it
/// had not collected they are exact enough (they are older than `before`).
#[derive(Debug, Clone, Copy)]
struct Copied {
    lineage: Stamp,
    before: Option<Stamp>,
}

/// A list's merge metadata under pops of one element: its runs, its
/// lineage and the runs it collected lately.
#[derive(Debug, Clone, Default)]
pub struct ListPositions {
    lineage: Lineage,
    left: BTreeMap<Stamp, Run>,
    right: BTreeMap<Stamp, Run>,
    placed: BTreeMap<Stamp, Placed>,
    /// The bound collection reached (a state handed over carries it).
    bound: Seen,
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
            Taken::Run { end, run, index } => {
                let held = self.runs(end).get(&run)?;
                let present = (0..held.len()).contains(&index) && !held.removed.contains(index);
                present.then(|| self.run_start(end, run) + held.rank(index))
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
        let run_edge = |(&run, r): (&Stamp, &Run), end: End| {
            let index = r.removed.first_kept(0, r.len(), up)?;
            Some(Taken::Run { end, run, index })
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
            Taken::Run { end, run, index } => {
                self.runs_mut(end)
                    .entry(run)
                    .or_default()
                    .removed
                    .remove(index, stamp);
            }
            Taken::Pos { pos, .. } => {
                self.lineage.removed.remove(pos, stamp);
            }
        }
    }

    /// Another site's pop of `taken`, stamped `stamp`.
    pub fn apply_pop(&mut self, taken: Taken, stamp: Stamp) -> Option<ListChange> {
        let taken = self.resolve(taken)?;
        let index = self.index_of(taken);
        self.mark(taken, stamp);
        index.map(ListChange::Remove)
    }

    /// `taken` as this state holds it: a run held or awaited, or a
    /// position of its lineage; `None` where the pop changes nothing here.
    fn resolve(&mut self, taken: Taken) -> Option<Taken> {
        match taken {
            Taken::Run { end, run, index } => {
                if self.runs(end).contains_key(&run) {
                    return Some(taken);
                }
                if let Some(p) = self.placed.get(&run) {
                    let pos = p.base + index;
                    return (p.lineage == self.lineage.id).then_some(Taken::Pos {
                        lineage: p.lineage,
                        pos,
                    });
                }
                // Collected and every site said so: a resend. Else the
                // run has not arrived yet (a third site's).
                (!self.bound.covers(run)).then_some(taken)
            }
            Taken::Pos { lineage, pos } => {
                let l = &self.lineage;
                if lineage == l.id {
                    if (l.low..l.high).contains(&pos) {
                        return Some(taken);
                    }
                    return self.walk(pos, None);
                }
                if let Some(end) = [End::Left, End::Right]
                    .into_iter()
                    .find(|&e| self.runs(e).contains_key(&lineage))
                {
                    return self.walk(pos, Some((end, lineage)));
                }
                if lineage > l.id {
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
    fn walk(&mut self, pos: Pos, restart: Option<(End, Stamp)>) -> Option<Taken> {
        let (low, high, from) = match restart {
            None => (self.lineage.low, self.lineage.high, Stamp::ZERO),
            Some((_, first)) => (0, 0, first),
        };
        let end = if pos < low { End::Left } else { End::Right };
        let mut cursor = if end == End::Left { low } else { high };
        let found = self.runs(end).range(from..).find_map(|(&run, r)| {
            let (start, past) = match end {
                End::Left => (cursor - r.len(), cursor),
                End::Right => (cursor, cursor + r.len()),
            };
            cursor = if end == End::Left { start } else { past };
            let runs_values = r.values.is_some();
            (runs_values && (start..past).contains(&pos)).then_some(Taken::Run {
                end,
                run,
                index: pos - start,
            })
        });
        if found.is_none() {
            self.unplaced += 1;
        }
        found
    }

    /// Another site's run: `values` pushed at `end` by the flush stamped
    /// `stamp`.
    pub fn apply_push(&mut self, end: End, stamp: Stamp, values: &[Bytes]) -> Option<ListChange> {
        if self.placed.contains_key(&stamp)
            || (self.bound.covers(stamp) && !self.runs(end).contains_key(&stamp))
        {
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
        while let Some((end, stamp)) = self.oldest_run() {
            let arrived = self
                .runs(end)
                .get(&stamp)
                .is_some_and(|r| r.values.is_some());
            if !arrived || !self.bound.covers(stamp) {
                break;
            }
            let l = &self.lineage;
            let restart = match copied {
                Some(c) if c.before.is_none_or(|b| stamp < b) => stamp == c.lineage,
                _ => l.removed.all_removed_before(l.low, l.high, stamp),
            };
            if restart {
                let at = self.left_count();
                changes.extend((0..l.present()).map(|_| ListChange::Remove(at)));
                self.lineage = Lineage {
                    id: stamp,
                    ..Lineage::default()
                };
            }
            self.collect_run(end, stamp);
        }
        let below = self.oldest_run().map(|(_, s)| s);
        self.lineage.removed.settle(&self.bound, below);
        for run in self.left.values_mut().chain(self.right.values_mut()) {
            run.removed.settle(&self.bound, below);
        }
        // A site whose bound covers a run collected it only once its bound
        // covers every older run too: forget places oldest first.
        while let Some(entry) = self.placed.first_entry() {
            if !settled.covers(*entry.key()) {
                break;
            }
            entry.remove();
        }
        changes
    }

    /// The oldest run held, and its end.
    fn oldest_run(&self) -> Option<(End, Stamp)> {
        let left = self.left.keys().next().map(|&s| (End::Left, s));
        let right = self.right.keys().next().map(|&s| (End::Right, s));
        [left, right].into_iter().flatten().min_by_key(|&(_, s)| s)
    }

    /// Gives the run `stamp` at `end` its positions.
    fn collect_run(&mut self, end: End, stamp: Stamp) {
        let Some(run) = self.runs_mut(end).remove(&stamp) else {
            return;
        };
        let l = &mut self.lineage;
        let base = match end {
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
            stamp,
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
                    changes.extend(self.apply_push(end, stamp, values));
                }
            }
        }
        for (end, runs) in runs() {
            for (&stamp, run) in runs {
                for (from, to, by) in run.removed.iter() {
                    for index in from..to {
                        changes.extend(self.apply_pop(
                            Taken::Run {
                                end,
                                run: stamp,
                                index,
                            },
                            by,
                        ));
                    }
                }
            }
        }
        let lineage = other.lineage.id;
        for (from, to, by) in other.lineage.removed.iter() {
            for pos in from..to {
                changes.extend(self.apply_pop(Taken::Pos { lineage, pos }, by));
            }
        }
        let mut bound = self.bound.clone();
        bound.join(&other.bound);
        let copied = Copied {
            lineage,
            before: other.oldest_run().map(|(_, s)| s),
        };
        changes.extend(self.collect_to(&bound, &Seen::new(), Some(copied)));
        changes
    }

    /// Whether nothing is held but the lineage's edges and its removed
    /// spans (the metadata a list keeps at rest).
    pub fn at_rest(&self) -> bool {
        self.left.is_empty() && self.right.is_empty() && self.placed.is_empty()
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
