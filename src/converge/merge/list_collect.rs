//! Collection of a list's runs and whole writes into its lineage, and the
//! merge of another site's whole state (`list_positions`).
//!
//! A site collects the runs and whole writes its bound covers by stamp,
//! stopping at the first it does not cover, and passing over a run that a
//! whole write held here had not seen (it goes into that write's lineage,
//! once the write is collected). Every site holds the same ones when it
//! collects: a change older than a covered one, and a whole write made
//! before its site applied a covered run, arrived first everywhere.

use crate::converge::merge::list_positions::{
    Lineage, ListChange, ListPositions, Origin, Placed, RunId,
};
use crate::converge::merge::lists::End;
use crate::converge::merge::Seen;
use crate::converge::version::Stamp;

/// Another site's decisions, copied while a merge collects what it had
/// collected: the items older than `before`, the oldest it still held
/// (none: every one the bound covers). Of those it started a lineage at a
/// run only at `lineage`, its last. Its removals carry [`Stamp::ZERO`]
/// where the stamps settled, which could start a lineage it did not; for
/// items it had not collected they are exact enough.
#[derive(Debug, Clone)]
struct Copied {
    lineage: Origin,
    before: Option<Item>,
    /// Its bound: only what this covers it had collected (a state handed
    /// over late may be behind what this site's bound covers).
    bound: Seen,
}

/// A run or a whole write, in collection order: by stamp, a flush's runs
/// before a whole write of the same stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Item {
    Run(Stamp, End),
    Whole(Stamp),
}

impl Item {
    fn stamp(self) -> Stamp {
        match self {
            Item::Run(s, _) | Item::Whole(s) => s,
        }
    }

    fn key(self) -> (Stamp, u8) {
        match self {
            Item::Run(s, End::Left) => (s, 0),
            Item::Run(s, End::Right) => (s, 1),
            Item::Whole(s) => (s, 2),
        }
    }
}

/// What collection does next.
enum Next {
    Stop,
    /// Pops of a run or write collected before this state began: it will
    /// not come again.
    Leftover(Item),
    Collect(Item),
}

impl ListPositions {
    /// Collects what `bound` covers (see the module's doc); forgets where
    /// runs went that every site collected (`settled`: the least of the
    /// bounds the sites reported having collected at).
    pub fn collect(&mut self, bound: &Seen, settled: &Seen) {
        // Under this site's own rule a new lineage starts only where every
        // position was popped: nothing of the old one is on the server, so
        // there is no change to make.
        self.collect_to(bound, settled, None);
    }

    fn collect_to(
        &mut self,
        bound: &Seen,
        settled: &Seen,
        copied: Option<&Copied>,
    ) -> Vec<ListChange> {
        self.bound.join(bound);
        let mut changes = Vec::new();
        loop {
            match self.next_item() {
                Next::Stop => break,
                Next::Leftover(Item::Run(stamp, end)) => {
                    self.runs_mut(end).remove(&stamp);
                }
                Next::Leftover(Item::Whole(stamp)) => {
                    self.wholes.remove(&stamp);
                }
                Next::Collect(Item::Whole(stamp)) => self.collect_whole(stamp),
                Next::Collect(Item::Run(stamp, end)) => {
                    let run = RunId { stamp, end };
                    changes.extend(self.restart_if(run, copied));
                    self.collect_run(run);
                }
            }
        }
        let below = self.oldest_item().map(Item::stamp);
        self.lineage.removed.settle(&self.bound, below);
        let held = self.left.values_mut().chain(self.right.values_mut());
        for run in held.chain(self.wholes.values_mut().map(|w| &mut w.list)) {
            run.removed.settle(&self.bound, below);
        }
        self.forget_settled(settled);
        changes
    }

    /// Forgets where runs went that every site collected, in the order
    /// they were collected here. A site collected an item once its bound
    /// covers it, everything collected before it, and every item older
    /// than it (its collection stops at the first it does not cover, even
    /// one that waits for a whole write).
    fn forget_settled(&mut self, settled: &Seen) {
        let held: Vec<Stamp> = self.items().iter().map(|i| i.stamp()).collect();
        while let Some(&(stamp, run)) = self.settling.front() {
            let older_open = held.iter().any(|&h| h < stamp && !settled.covers(h));
            if !settled.covers(stamp) || older_open {
                break;
            }
            self.settling.pop_front();
            if let Some(run) = run {
                self.placed.remove(&run);
            }
        }
    }

    /// Every run and whole write held, in collection order.
    fn items(&self) -> Vec<Item> {
        let left = self.left.keys().map(|&s| Item::Run(s, End::Left));
        let right = self.right.keys().map(|&s| Item::Run(s, End::Right));
        let mut items: Vec<Item> = left
            .chain(right)
            .chain(self.wholes.keys().map(|&s| Item::Whole(s)))
            .collect();
        items.sort_by_key(|i| i.key());
        items
    }

    fn oldest_item(&self) -> Option<Item> {
        self.items().first().copied()
    }

    /// Whether `item` waits for a whole write held here that had not
    /// seen it (a run goes into that write's lineage).
    fn deferred(&self, item: Item, open: &[(Stamp, &Seen)]) -> bool {
        match item {
            Item::Run(s, _) => open.iter().any(|(_, seen)| !seen.covers(s)),
            Item::Whole(_) => false,
        }
    }

    fn arrived(&self, item: Item) -> bool {
        match item {
            Item::Run(s, end) => self.runs(end).get(&s).is_some_and(|r| r.values.is_some()),
            Item::Whole(s) => self.wholes.get(&s).is_some_and(|w| w.list.values.is_some()),
        }
    }

    fn next_item(&self) -> Next {
        let open: Vec<(Stamp, &Seen)> = self.arrived_wholes().map(|(s, w)| (s, &w.seen)).collect();
        for item in self.items() {
            if !self.bound.covers(item.stamp()) {
                return Next::Stop;
            }
            if !self.arrived(item) {
                return Next::Leftover(item);
            }
            if !self.deferred(item, &open) {
                return Next::Collect(item);
            }
        }
        Next::Stop
    }

    /// The order in which this site will collect what it holds (as far as
    /// its bound lets it): by stamp, a run that a whole write held had not
    /// seen after that write.
    pub(super) fn collection_order(&self) -> Vec<Item> {
        let mut open: Vec<(Stamp, &Seen)> =
            self.arrived_wholes().map(|(s, w)| (s, &w.seen)).collect();
        let mut left: Vec<Item> = self
            .items()
            .into_iter()
            .filter(|&i| self.arrived(i))
            .collect();
        let mut order = Vec::with_capacity(left.len());
        while let Some(at) = left.iter().position(|&i| !self.deferred(i, &open)) {
            let item = left.remove(at);
            if let Item::Whole(w) = item {
                open.retain(|&(s, _)| s != w);
            }
            order.push(item);
        }
        order
    }

    /// Starts a new lineage at `run` where one starts: every position of
    /// the present one popped by a pop older than the run (or, copying
    /// another site, where it started one). The server drops what it still
    /// held of a lineage left that way.
    fn restart_if(&mut self, run: RunId, copied: Option<&Copied>) -> Vec<ListChange> {
        let l = &self.lineage;
        let item = Item::Run(run.stamp, run.end);
        let restart = match copied {
            Some(c)
                if c.bound.covers(run.stamp) && c.before.is_none_or(|b| item.key() < b.key()) =>
            {
                Origin::Run(run) == c.lineage
            }
            _ => l.removed.all_removed_before(l.low, l.high, run.stamp),
        };
        if !restart {
            return Vec::new();
        }
        let at = self.left_count();
        let shown = if self.middle_write().is_none() {
            l.present()
        } else {
            0
        };
        self.lineage = Lineage {
            id: Origin::Run(run),
            ..Lineage::default()
        };
        (0..shown).map(|_| ListChange::Remove(at)).collect()
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
            l.removed.remove_span(base + from, base + to, removed_by);
        }
        let lineage = l.id;
        let len = run.len();
        self.placed.insert(id, Placed { lineage, base, len });
        self.settling.push_back((id.stamp, Some(id)));
    }

    /// Starts the lineage of the whole write `stamp`: its list at
    /// positions from 0.
    fn collect_whole(&mut self, stamp: Stamp) {
        let Some(whole) = self.wholes.remove(&stamp) else {
            return;
        };
        self.lineage = Lineage {
            id: Origin::Write(stamp),
            written: whole.list.len(),
            low: 0,
            high: whole.list.len(),
            removed: whole.list.removed,
        };
        self.settling.push_back((stamp, None));
    }

    /// Takes in another site's whole state (catch-up, full sync): its whole
    /// writes, runs and removals, then collects as far as it did (its
    /// bound is a true bound, everything older than what it covers is now
    /// here, and where it started its lineage this state starts it).
    pub fn merge(&mut self, other: &ListPositions) -> Vec<ListChange> {
        let mut changes = Vec::new();
        let none = Seen::new();
        for (&stamp, whole) in &other.wholes {
            if let Some(values) = &whole.list.values {
                changes.extend(self.apply_whole(stamp, &whole.seen, values, &none));
            }
        }
        for (end, runs) in [(End::Left, &other.left), (End::Right, &other.right)] {
            for (&stamp, run) in runs {
                if let Some(values) = &run.values {
                    changes.extend(self.apply_push(end, stamp, values, &none));
                }
            }
        }
        for (first, len, by) in other.removed_spans_named() {
            changes.extend(self.apply_removed_span(first, len, by));
        }
        let mut bound = self.bound.clone();
        bound.join(&other.bound);
        let copied = Copied {
            lineage: other.lineage.id,
            before: other.oldest_item(),
            bound: other.bound.clone(),
        };
        changes.extend(self.collect_to(&bound, &Seen::new(), Some(&copied)));
        changes
    }
}
