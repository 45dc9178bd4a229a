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
//!   kept until every site collected the run and everything before it:
//!   after that no pop names it; `list_collect`);
//! - of a position beyond the ones it gave out finds the run that will
//!   get it: the sender collected it, so it arrived here too, and this
//!   site will collect the same items in the same order before it (the
//!   walk in `list_apply`, along `collection_order`).
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
//! started yet (it holds the run or whole write that starts it) is found
//! by the same walk, from that lineage's first positions.
//!
//! Stamps of removals matter only for that decision; once the bound
//! covers them and no run still to be collected is older, they become
//! [`Stamp::ZERO`], so the removals at rest are a few spans.
//!
//! **Whole writes** (an index operation, a DEL: a new list at a stamp,
//! with what its site had applied) are held like runs, their elements
//! named by the write and an index, and start a lineage of their own when
//! collected (`list_collect`). While held, the newest one is the list's
//! middle. A whole write removes every element of the runs it had seen
//! (they stay as runs, every element removed, so that they still take
//! their positions), and a run it had not seen is collected after it,
//! into its lineage.
//!
//! Pure: the caller applies [`ListChange`]s to the server's list. The
//! pushes, pops and whole writes of other sites are in `list_apply`,
//! collection and whole states in `list_collect`.

use std::collections::{BTreeMap, VecDeque};

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

/// What started a lineage: a run collected into an emptied list, or a
/// whole write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A run (`RunId::NONE`: none yet).
    Run(RunId),
    /// The whole write stamped so.
    Write(Stamp),
}

impl Default for Origin {
    fn default() -> Self {
        Origin::Run(RunId::NONE)
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
    /// Element `index` of the list the whole write stamped `write` wrote.
    Write {
        /// The whole write.
        write: Stamp,
        /// The element's index in its list.
        index: Pos,
    },
    /// Position `pos` of the lineage `lineage` started.
    Pos {
        /// The lineage.
        lineage: Origin,
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
    /// Write the list anew: these elements (none: the key goes).
    Rebuild(Vec<Bytes>),
}

/// A run, or a whole write's list: its elements (`None`: only pops of it
/// have arrived), and which of its indexes were removed.
#[derive(Debug, Clone, Default)]
pub(super) struct Run {
    pub(super) values: Option<Vec<Bytes>>,
    pub(super) removed: Removals,
}

impl Run {
    pub(super) fn len(&self) -> Pos {
        self.values
            .as_ref()
            .map_or(0, |v| Pos::try_from(v.len()).unwrap_or(Pos::MAX))
    }

    pub(super) fn present(&self) -> usize {
        usize::try_from(self.len()).unwrap_or(0) - self.removed.count_in(0, self.len())
    }

    /// Its index's place among its present elements.
    pub(super) fn rank(&self, index: Pos) -> usize {
        usize::try_from(index).unwrap_or(0) - self.removed.count_in(0, index)
    }

    pub(super) fn holds(&self, index: Pos) -> bool {
        (0..self.len()).contains(&index) && !self.removed.contains(index)
    }

    pub(super) fn present_values(&self) -> Vec<Bytes> {
        let values = self.values.as_deref().unwrap_or_default();
        (0..self.len())
            .filter(|&i| !self.removed.contains(i))
            .filter_map(|i| values.get(usize::try_from(i).ok()?).cloned())
            .collect()
    }

    /// Removes every element (a whole write that had seen the run).
    pub(super) fn wipe(&mut self, stamp: Stamp) {
        self.removed.remove_span(0, self.len(), stamp);
    }
}

/// A whole write held until collected: its list, and what its site had
/// applied.
#[derive(Debug, Clone, Default)]
pub(super) struct Whole {
    pub(super) list: Run,
    pub(super) seen: Seen,
}

/// The positions given to collected runs.
#[derive(Debug, Clone, Default)]
pub(super) struct Lineage {
    /// What started it.
    pub(super) id: Origin,
    /// A whole write's length, its positions `[0, written)` (0 for a
    /// lineage a run started).
    pub(super) written: Pos,
    pub(super) low: Pos,
    pub(super) high: Pos,
    pub(super) removed: Removals,
}

impl Lineage {
    pub(super) fn present(&self) -> usize {
        usize::try_from(self.high - self.low).unwrap_or(0)
            - self.removed.count_in(self.low, self.high)
    }
}

/// Where a collected run's elements went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Placed {
    pub(super) lineage: Origin,
    pub(super) base: Pos,
    /// The run's whole length.
    pub(super) len: Pos,
}

/// A list's merge metadata under pops of one element: its runs, its
/// whole writes, its lineage and the runs it collected lately.
#[derive(Debug, Clone, Default)]
pub struct ListPositions {
    pub(super) lineage: Lineage,
    pub(super) left: BTreeMap<Stamp, Run>,
    pub(super) right: BTreeMap<Stamp, Run>,
    pub(super) wholes: BTreeMap<Stamp, Whole>,
    pub(super) placed: BTreeMap<RunId, Placed>,
    /// What this site collected, in order, until every site collected it:
    /// the stamp, and the run (`None`: a whole write). A run's place goes
    /// with its entry.
    pub(super) settling: VecDeque<(Stamp, Option<RunId>)>,
    /// The bound collection reached (a state handed over carries it).
    pub(super) bound: Seen,
    /// Pops that named a run or lineage this state cannot place (the
    /// rules say none can: counted, for the tests).
    pub(super) unplaced: u64,
}

impl ListPositions {
    pub(super) fn runs(&self, end: End) -> &BTreeMap<Stamp, Run> {
        match end {
            End::Left => &self.left,
            End::Right => &self.right,
        }
    }

    pub(super) fn runs_mut(&mut self, end: End) -> &mut BTreeMap<Stamp, Run> {
        match end {
            End::Left => &mut self.left,
            End::Right => &mut self.right,
        }
    }

    /// The newest whole write held whose list arrived: the list's middle
    /// while there is one, else the lineage.
    pub(super) fn middle_write(&self) -> Option<(Stamp, &Run)> {
        let arrived = self.wholes.iter().rev();
        let mut arrived = arrived.filter(|(_, w)| w.list.values.is_some());
        arrived.next().map(|(&s, w)| (s, &w.list))
    }

    /// Elements on the server between the runs.
    pub(super) fn middle_count(&self) -> usize {
        self.middle_write()
            .map_or_else(|| self.lineage.present(), |(_, w)| w.present())
    }

    /// Elements on the server left of the middle.
    pub(super) fn left_count(&self) -> usize {
        self.left.values().map(Run::present).sum()
    }

    /// The server's index of the first element of run `stamp` at `end`.
    pub(super) fn run_start(&self, end: End, stamp: Stamp) -> usize {
        match end {
            End::Left => self
                .left
                .range(stamp..)
                .skip(1)
                .map(|(_, r)| r.present())
                .sum(),
            End::Right => {
                let inner: usize = self.right.range(..stamp).map(|(_, r)| r.present()).sum();
                self.left_count() + self.middle_count() + inner
            }
        }
    }

    /// The server's index of `taken`, where this state holds it present.
    pub(super) fn index_of(&self, taken: Taken) -> Option<usize> {
        match taken {
            Taken::Run { run, index } => {
                let held = self.runs(run.end).get(&run.stamp)?;
                held.holds(index)
                    .then(|| self.run_start(run.end, run.stamp) + held.rank(index))
            }
            Taken::Write { write, index } => {
                let (middle, list) = self.middle_write()?;
                (middle == write && list.holds(index)).then(|| self.left_count() + list.rank(index))
            }
            Taken::Pos { lineage, pos } => {
                let l = &self.lineage;
                let shown = self.middle_write().is_none() && lineage == l.id;
                let present = shown && (l.low..l.high).contains(&pos) && !l.removed.contains(pos);
                present.then(|| {
                    self.left_count() + usize::try_from(pos - l.low).unwrap_or(0)
                        - l.removed.count_in(l.low, pos)
                })
            }
        }
    }

    /// The server's list once the newest whole write's list is its
    /// middle: the runs' present elements around it.
    pub(super) fn around(&self, middle: &Run) -> Vec<Bytes> {
        let mut out: Vec<Bytes> = self
            .left
            .values()
            .rev()
            .flat_map(Run::present_values)
            .collect();
        out.extend(middle.present_values());
        out.extend(self.right.values().flat_map(Run::present_values));
        out
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
        let middle = || match self.middle_write() {
            Some((write, list)) => {
                let index = list.removed.first_kept(0, list.len(), up)?;
                Some(Taken::Write { write, index })
            }
            None => {
                let l = &self.lineage;
                let pos = l.removed.first_kept(l.low, l.high, up)?;
                Some(Taken::Pos { lineage: l.id, pos })
            }
        };
        let (near, far) = match end {
            End::Left => (&self.left, &self.right),
            End::Right => (&self.right, &self.left),
        };
        let other = if up { End::Right } else { End::Left };
        (near.iter().rev().find_map(|r| run_edge(r, end)))
            .or_else(middle)
            .or_else(|| far.iter().find_map(|r| run_edge(r, other)))
    }

    /// Pops the element at `end` (the server popped it), stamped `stamp`:
    /// what the pop ships.
    pub fn local_pop(&mut self, end: End, stamp: Stamp) -> Option<Taken> {
        let taken = self.edge(end)?;
        self.mark(taken, stamp);
        Some(taken)
    }

    /// Notes `taken` removed; `taken` names a run or whole write held (or
    /// awaited) or a position of the lineage.
    pub(super) fn mark(&mut self, taken: Taken, stamp: Stamp) {
        self.mark_span(taken, 1, stamp);
    }

    /// Notes `len` elements removed from `first` on, all in the run, whole
    /// write or lineage `first` names (see [`ListPositions::mark`]).
    pub(super) fn mark_span(&mut self, first: Taken, len: Pos, stamp: Stamp) {
        let (removed, from) = match first {
            Taken::Run { run, index } => {
                let run = self.runs_mut(run.end).entry(run.stamp).or_default();
                (&mut run.removed, index)
            }
            Taken::Write { write, index } => {
                let whole = self.wholes.entry(write).or_default();
                (&mut whole.list.removed, index)
            }
            Taken::Pos { pos, .. } => (&mut self.lineage.removed, pos),
        };
        removed.remove_span(from, from.saturating_add(len), stamp);
    }

    /// The removals of what `taken` names, where this state holds it, and
    /// `taken`'s index or position in them.
    pub(super) fn removals_of(&self, taken: Taken) -> Option<(&Removals, Pos)> {
        match taken {
            Taken::Run { run, index } => {
                let held = self.runs(run.end).get(&run.stamp)?;
                Some((&held.removed, index))
            }
            Taken::Write { write, index } => Some((&self.wholes.get(&write)?.list.removed, index)),
            Taken::Pos { pos, .. } => Some((&self.lineage.removed, pos)),
        }
    }

    /// Whether nothing is held but the lineage's edges and its removed
    /// spans (the metadata a list keeps at rest).
    pub fn at_rest(&self) -> bool {
        self.left.is_empty()
            && self.right.is_empty()
            && self.wholes.is_empty()
            && self.placed.is_empty()
            && self.settling.is_empty()
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

    /// Elements the server's list holds by this state.
    pub fn len(&self) -> usize {
        let right: usize = self.right.values().map(Run::present).sum();
        self.left_count() + self.middle_count() + right
    }

    /// Whether the server's list is empty by this state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The stamps of the runs and whole writes held whose elements arrived
    /// (not those only another site's pops named so far).
    pub fn stamps_arrived(&self) -> Vec<Stamp> {
        let runs = self.left.iter().chain(self.right.iter());
        let runs = runs.filter(|(_, r)| r.values.is_some()).map(|(&s, _)| s);
        let wholes = self.wholes.iter().filter(|(_, w)| w.list.values.is_some());
        runs.chain(wholes.map(|(&s, _)| s)).collect()
    }

    /// Runs and whole writes held (not collected yet).
    pub fn runs_held(&self) -> usize {
        self.left.len() + self.right.len() + self.wholes.len()
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
        ListChange::Rebuild(all) => list.clone_from(all),
        ListChange::Remove(_) => {}
    }
}
