//! The lists whose pops are named by position (issue 27, `list_positions`;
//! not on the data path yet), per key: the positions state while anything
//! of it may still be decided on, and at rest only what later pops need.
//!
//! A list at rest (no run, whole write or place held, every pop's stamp
//! settled) keeps its lineage: which change started it, its edges and its
//! removed spans ([`RestingList`], a few words, against a state's 232
//! bytes and its maps' nodes). An emptied list at rest keeps nothing (the
//! next run collected starts a new lineage everywhere, `forgettable`).
//! A change to the key takes the state up again with the table's bound:
//! the join of every bound the table was given (the bound is this node's,
//! the same for every list; a state at rest has nothing to collect, so
//! the table's bound is one it could have reached). Without it a resend
//! of a run collected before the list went to rest would be taken for a
//! new run (its place is gone; only the bound says it was collected).

use hashbrown::HashMap;

use crate::converge::merge::codec::DecodeError;
use crate::converge::merge::db_key::DbKey;
use crate::converge::merge::hashes::Bytes;
use crate::converge::merge::list_codec::{decode_list, encode_list};
use crate::converge::merge::list_flush::{name_flush, FlushedList, ListNote};
use crate::converge::merge::list_positions::{Lineage, ListChange, ListPositions, Origin};
use crate::converge::merge::removals::{Pos, Removals};
use crate::converge::merge::Seen;
use crate::converge::version::Stamp;

/// A list's lineage at rest: what started it, its edges, and its removed
/// spans (their stamps settled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestingList {
    id: Origin,
    written: Pos,
    low: Pos,
    high: Pos,
    removed: Box<[(Pos, Pos)]>,
}

impl RestingList {
    /// `state` at rest, if it is: nothing held, every removal settled.
    fn of(state: &ListPositions) -> Option<RestingList> {
        let l = &state.lineage;
        let settled = l.removed.iter().all(|(_, _, stamp)| stamp == Stamp::ZERO);
        (state.at_rest() && settled).then(|| RestingList {
            id: l.id,
            written: l.written,
            low: l.low,
            high: l.high,
            removed: l.removed.iter().map(|(from, to, _)| (from, to)).collect(),
        })
    }

    /// The state it stands for, at `bound`.
    fn state(&self, bound: &Seen) -> ListPositions {
        // Taken from a `Removals`: in order and apart, as `from_spans`
        // wants them.
        let spans = self.removed.iter().map(|&(f, t)| (f, t, Stamp::ZERO));
        let lineage = Lineage {
            id: self.id,
            written: self.written,
            low: self.low,
            high: self.high,
            removed: Removals::from_spans(spans).unwrap_or_default(),
        };
        ListPositions {
            lineage,
            bound: bound.clone(),
            ..ListPositions::default()
        }
    }
}

/// What the table holds, for STATUS and the tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListTableStats {
    /// Lists with something still to decide on.
    pub held: usize,
    /// Lists at rest with a lineage kept.
    pub resting: usize,
    /// Runs and whole writes held, over every list.
    pub runs_held: usize,
    /// Pops that named a run or lineage no state here could place.
    pub unplaced: u64,
}

/// What a local flush of a list ships.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListShip {
    /// Its runs and the names of what its pops took.
    Flush(FlushedList),
    /// The whole list, made where `seen` was applied (the flush's notes did
    /// not account for the list: a pop no note records, a list that had
    /// no positions state yet).
    Whole {
        /// What its node had applied: every run it held.
        seen: Seen,
        /// The list, head to tail.
        values: Vec<Bytes>,
    },
}

/// Per `(db, key)`: a list's positions state, or its lineage at rest.
#[derive(Debug, Default)]
pub struct ListTable {
    held: HashMap<(u32, Vec<u8>), ListPositions>,
    resting: HashMap<(u32, Vec<u8>), RestingList>,
    /// Unplaced pops of states that went to rest.
    unplaced: u64,
    /// Every bound the table was given, joined: what a state taken up
    /// from rest is collected to.
    bound: Seen,
}

impl ListTable {
    /// The positions state of `(db, key)`, taken up from rest (or new) at
    /// `bound`; call [`ListTable::settle`] once done with it.
    pub fn state_mut(&mut self, (db, key): (u32, &[u8]), bound: &Seen) -> &mut ListPositions {
        self.bound.join(bound);
        let resting = self.resting.remove(&DbKey(db, key));
        let held = crate::converge::merge::db_key::entry_or_default(&mut self.held, (db, key));
        if let Some(rest) = resting {
            *held = rest.state(&self.bound);
        }
        held.bound.join(&self.bound);
        held
    }

    /// The state of `(db, key)` if one is held (not at rest).
    pub fn held(&self, (db, key): (u32, &[u8])) -> Option<&ListPositions> {
        self.held.get(&DbKey(db, key))
    }

    /// Puts `(db, key)` to rest if it is: its lineage kept, or nothing
    /// once the list is empty and forgettable.
    pub fn settle(&mut self, (db, key): (u32, &[u8])) {
        let Some(state) = self.held.get(&DbKey(db, key)) else {
            return;
        };
        let forget = state.forgettable();
        let rest = if forget { None } else { RestingList::of(state) };
        if forget || rest.is_some() {
            if let Some((k, state)) = self.held.remove_entry(&DbKey(db, key)) {
                self.unplaced += state.unplaced();
                if let Some(rest) = rest {
                    self.resting.insert(k, rest);
                }
            }
        }
    }

    /// Collects every held list at `bound` (`settled`: what every site
    /// collected) and puts to rest those that are; returns the keys it
    /// collected, every list held (to journal: a key with no
    /// [`ListTable::record`] any more was forgotten).
    pub fn collect(&mut self, bound: &Seen, settled: &Seen) -> Vec<(u32, Vec<u8>)> {
        self.bound.join(bound);
        let keys: Vec<(u32, Vec<u8>)> = self.held.keys().cloned().collect();
        for (db, key) in &keys {
            if let Some(state) = self.held.get_mut(&DbKey(*db, key)) {
                state.collect(bound, settled);
            }
            self.settle((*db, key));
        }
        keys
    }

    /// This node's flush of `(db, key)` stamped `stamp`: its `notes`
    /// named, or, where they do not account for the server's list
    /// (`server_len` long; `read` reads it), the whole list, which removes
    /// every run this node held (all of them are in what it read).
    pub fn local(
        &mut self,
        (db, key): (u32, &[u8]),
        (stamp, notes): (Stamp, &[ListNote]),
        (server_len, read): (usize, impl FnOnce() -> Vec<Bytes>),
        (applied, bound): (&Seen, &Seen),
    ) -> ListShip {
        let state = self.state_mut((db, key), bound);
        let ship = match name_flush(state, stamp, notes, server_len) {
            Some(flushed) => ListShip::Flush(flushed),
            None => {
                // Every run whose elements are on the server (a run only a
                // pop named so far is not); an origin's earlier changes
                // arrived before it (the link's order).
                let mut seen = applied.clone();
                for stamp in state.stamps_arrived() {
                    seen.observe(stamp);
                }
                let values = read();
                state.apply_whole(stamp, &seen, &values, bound);
                ListShip::Whole { seen, values }
            }
        };
        self.settle((db, key));
        ship
    }

    /// Another node's flush or whole write of `(db, key)` stamped `stamp`:
    /// what the server's list must do.
    pub fn remote(
        &mut self,
        (db, key): (u32, &[u8]),
        (stamp, ship): (Stamp, &ListShip),
        bound: &Seen,
    ) -> Vec<ListChange> {
        let state = self.state_mut((db, key), bound);
        let changes = match ship {
            ListShip::Flush(flushed) => state.apply_flush(stamp, flushed, bound),
            ListShip::Whole { seen, values } => state.apply_whole(stamp, seen, values, bound),
        };
        self.settle((db, key));
        changes
    }

    /// `(db, key)`'s state as the journal and the RDB keep it
    /// (`list_codec::encode_list`; a list at rest as its lineage alone);
    /// `None` when nothing is kept for it.
    pub fn record(&self, (db, key): (u32, &[u8])) -> Option<Vec<u8>> {
        if let Some(state) = self.held.get(&DbKey(db, key)) {
            return Some(encode_list(state));
        }
        let rest = self.resting.get(&DbKey(db, key))?;
        Some(encode_list(&rest.state(&self.bound)))
    }

    /// Takes in `(db, key)`'s state from a record (a replay, an RDB load:
    /// after [`ListTable::flushed`] of every database), in place of what
    /// was kept; refused (and nothing changed) when the bytes are not a
    /// state. Its bound joins the table's.
    pub fn load(&mut self, (db, key): (u32, &[u8]), record: &[u8]) -> Result<(), DecodeError> {
        let state = decode_list(record)?;
        self.bound.join(&state.bound);
        self.resting.remove(&DbKey(db, key));
        *crate::converge::merge::db_key::entry_or_default(&mut self.held, (db, key)) = state;
        self.settle((db, key));
        Ok(())
    }

    /// Forgets the lists of `db` (every database: `None`), flushed.
    pub fn flushed(&mut self, db: Option<u32>) {
        let kept = |d: &u32| db.is_some_and(|f| f != *d);
        self.held.retain(|(d, _), _| kept(d));
        self.resting.retain(|(d, _), _| kept(d));
    }

    /// Swaps databases `a` and `b`.
    pub fn swap_dbs(&mut self, a: u32, b: u32) {
        crate::converge::merge::db_key::swap_dbs_in(&mut self.held, a, b);
        crate::converge::merge::db_key::swap_dbs_in(&mut self.resting, a, b);
    }

    /// What the table holds.
    pub fn stats(&self) -> ListTableStats {
        ListTableStats {
            held: self.held.len(),
            resting: self.resting.len(),
            runs_held: self.held.values().map(ListPositions::runs_held).sum(),
            unplaced: self.unplaced + self.held.values().map(ListPositions::unplaced).sum::<u64>(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::converge::merge::lists::End;

    fn values(n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| vec![i as u8]).collect()
    }

    fn flush(table: &mut ListTable, clock: u64, notes: &[ListNote], len: usize) {
        let state = table.state_mut((0, b"q"), &Seen::new());
        name_flush(state, Stamp::new(clock, 1), notes, len).expect("accounted for");
        table.settle((0, b"q"));
    }

    fn note() -> impl proptest::strategy::Strategy<Value = (bool, bool, usize)> {
        use proptest::prelude::*;
        (any::<bool>(), any::<bool>(), 1usize..4)
    }

    proptest::proptest! {
        /// Lists put to rest and taken up again are the states they stand
        /// for: every step's state as a table that never rests holds it
        /// (or, where the table forgot an emptied list, that state is
        /// forgettable and is forgotten too).
        #[test]
        fn a_list_taken_up_from_rest_is_the_state_it_stood_for(
            steps in proptest::collection::vec((proptest::collection::vec(note(), 1..4), proptest::prelude::any::<bool>()), 1..40)
        ) {
            let (mut table, mut plain) = (ListTable::default(), ListPositions::default());
            let (mut len, mut bound) = (0usize, Seen::new());
            for (i, (plan, collect)) in steps.into_iter().enumerate() {
                let stamp = Stamp::new(i as u64 + 1, 1);
                let notes: Vec<ListNote> = plan
                    .into_iter()
                    .map(|(push, left, n)| {
                        let end = if left { End::Left } else { End::Right };
                        if push {
                            len += n;
                            ListNote::Push(end, values(n))
                        } else {
                            len -= n.min(len);
                            ListNote::Pop(end, n)
                        }
                    })
                    .collect();
                let state = table.state_mut((0, b"q"), &bound);
                proptest::prop_assert!(name_flush(state, stamp, &notes, len).is_some());
                table.settle((0, b"q"));
                name_flush(&mut plain, stamp, &notes, len);
                bound.observe(stamp);
                plain.bound.join(&bound);
                if collect {
                    table.collect(&bound, &bound);
                    plain.collect(&bound, &bound);
                }
                let stats = table.stats();
                if stats.held + stats.resting == 0 {
                    // Forgotten: what an emptied list at rest may do.
                    proptest::prop_assert!(plain.forgettable(), "{:?}", plain);
                    plain = ListPositions::default();
                    plain.bound.join(&bound);
                }
                let state = table.state_mut((0, b"q"), &bound);
                proptest::prop_assert_eq!(encode_list(state), encode_list(&plain));
                table.settle((0, b"q"));
            }
        }
    }

    #[test]
    fn a_queue_at_rest_keeps_its_lineage_s_edges_and_takes_them_up_again() {
        let mut table = ListTable::default();
        flush(&mut table, 1, &[ListNote::Push(End::Right, values(5))], 5);
        flush(&mut table, 2, &[ListNote::Pop(End::Left, 2)], 3);
        assert_eq!(table.stats().held, 1, "a run and pops to decide on");
        let bound: Seen = [(1, 2)].into_iter().collect();
        table.collect(&bound, &bound);
        // The pops' stamps settle once a run newer than them is gone too.
        table.collect(&bound, &bound);
        let stats = table.stats();
        assert_eq!((stats.held, stats.resting, stats.runs_held), (0, 1, 0));
        let state = table.state_mut((0, b"q"), &bound);
        assert_eq!(state.len(), 3);
        let mut want = ListPositions::default();
        name_flush(
            &mut want,
            Stamp::new(1, 1),
            &[ListNote::Push(End::Right, values(5))],
            5,
        );
        name_flush(
            &mut want,
            Stamp::new(2, 1),
            &[ListNote::Pop(End::Left, 2)],
            3,
        );
        want.collect(&bound, &bound);
        want.collect(&bound, &bound);
        assert_eq!(encode_list(state), encode_list(&want), "taken up as it was");
        table.settle((0, b"q"));
        // As the journal keeps it, and loaded again (at rest again).
        let record = table.record((0, b"q")).expect("a lineage is kept");
        let mut loaded = ListTable::default();
        loaded.load((0, b"q"), &record).expect("a state");
        assert_eq!(loaded.stats().resting, 1);
        assert_eq!(loaded.record((0, b"q")), Some(record));
        assert!(loaded.load((0, b"q"), b"not a state").is_err());
        assert_eq!(
            loaded.stats().resting,
            1,
            "a refused record changes nothing"
        );
        assert_eq!(loaded.record((1, b"q")), None);
    }

    /// A node: its table and its server's list.
    #[derive(Default)]
    struct Node {
        table: ListTable,
        server: Vec<Vec<u8>>,
    }

    impl Node {
        /// Flushes `notes` (already run on the server), as shipped.
        fn flush(&mut self, stamp: Stamp, notes: &[ListNote]) -> ListShip {
            let server = self.server.clone();
            let none = Seen::new();
            let read = (server.len(), move || server);
            self.table
                .local((0, b"q"), (stamp, notes), read, (&none, &none))
        }

        fn take(&mut self, stamp: Stamp, ship: &ListShip) {
            let changes = self.table.remote((0, b"q"), (stamp, ship), &Seen::new());
            for change in &changes {
                crate::converge::merge::list_positions::apply_change(&mut self.server, change);
            }
        }
    }

    #[test]
    fn a_flush_its_notes_do_not_account_for_ships_the_list_whole_over_every_run_held() {
        let (mut a, mut b) = (Node::default(), Node::default());
        let (s1, s2, s3) = (Stamp::new(1, 1), Stamp::new(2, 2), Stamp::new(3, 1));
        a.server = values(3);
        let ship = a.flush(s1, &[ListNote::Push(End::Right, values(3))]);
        assert!(matches!(ship, ListShip::Flush(_)));
        b.take(s1, &ship);
        // B pushes a run that A applies but its watermark does not cover
        // (A's flush below is told nothing was applied).
        b.server.push(b"y".to_vec());
        let ship = b.flush(s2, &[ListNote::Push(End::Right, vec![b"y".to_vec()])]);
        a.take(s2, &ship);
        assert_eq!(a.server, b.server);
        // A blocked client on A pops the head: no note says so.
        a.server.remove(0);
        let ship = a.flush(s3, &[]);
        let ListShip::Whole { seen, values: list } = &ship else {
            panic!("a flush the notes do not account for ships whole: {ship:?}");
        };
        assert!(
            seen.covers(s2),
            "the whole write saw B's run, which its list holds"
        );
        assert_eq!(list, &a.server);
        b.take(s3, &ship);
        assert_eq!(b.server, a.server, "B's run is not kept twice");
        // Both collect everything; A's first flush comes again (a resend)
        // after B's list went to rest: B takes it for the run it collected.
        let all: Seen = [(1, 3), (2, 2)].into_iter().collect();
        for node in [&mut a, &mut b] {
            node.table.collect(&all, &all);
            node.table.collect(&all, &all);
        }
        assert_eq!(b.table.stats().resting, 1, "at rest");
        let resent = ListShip::Flush(FlushedList {
            runs: vec![(End::Right, values(3))],
            taken: Vec::new(),
        });
        b.take(s1, &resent);
        assert_eq!(b.server, a.server, "a resend after rest changes nothing");
        assert_eq!(
            a.table.state_mut((0, b"q"), &Seen::new()).len(),
            a.server.len()
        );
    }

    #[test]
    fn a_resting_list_is_a_few_words() {
        // The lineage at rest, its spans apart: against a whole state's.
        assert!(std::mem::size_of::<RestingList>() <= 64);
        assert!(std::mem::size_of::<ListPositions>() >= 3 * 64);
    }

    #[test]
    fn an_emptied_list_at_rest_keeps_nothing_and_a_database_swap_moves_lists() {
        let mut table = ListTable::default();
        flush(&mut table, 1, &[ListNote::Push(End::Left, values(2))], 2);
        flush(&mut table, 2, &[ListNote::Pop(End::Right, 2)], 0);
        let bound: Seen = [(1, 2)].into_iter().collect();
        table.collect(&bound, &bound);
        table.collect(&bound, &bound);
        assert_eq!(table.stats(), ListTableStats::default());
        flush(&mut table, 3, &[ListNote::Push(End::Left, values(1))], 1);
        table.swap_dbs(0, 4);
        assert!(table.held((4, b"q")).is_some() && table.held((0, b"q")).is_none());
        table.flushed(Some(4));
        assert_eq!(table.stats().held, 0);
    }
}
