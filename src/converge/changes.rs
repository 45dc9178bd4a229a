//! What changed and is still to ship, pure: each change as a `PendingOp`
//! and the `DirtySet` that keeps them in order, each key once, with the
//! flushes and swaps between them (the hook fills it, the flush drains it,
//! a resting hot key waits in one).

use std::collections::VecDeque;
use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::converge::version::Stamp;
use crate::proto::entry::{Batch, Op};

/// Something to ship at the next flush, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingOp {
    /// The key changed; its value is read at flush time.
    Key {
        /// Database.
        db: u32,
        /// Key name.
        key: Vec<u8>,
    },
    /// `FLUSHDB` of a database.
    FlushDb(u32),
    /// `FLUSHALL`.
    FlushAll,
    /// `SWAPDB a b`, with the stamp it already shipped with, if it did (a
    /// resend keeps it, so the peer can tell it applied that swap already).
    SwapDb(u32, u32, Option<Stamp>),
    /// Any function library may have changed (`FUNCTION FLUSH`, `RESTORE`,
    /// a load by the server): all are read at flush time and compared with
    /// their versions. Pending at most once.
    Functions,
    /// The function library of this name may have changed (`FUNCTION
    /// LOAD`, `DELETE`); it is read at flush time. Pending once per name.
    Library(Vec<u8>),
}

impl PendingOp {
    /// Whether this is a FLUSHDB, FLUSHALL or SWAPDB (which move or drop
    /// the keys pending before it).
    pub fn is_flush_or_swap(&self) -> bool {
        matches!(
            self,
            PendingOp::FlushDb(_) | PendingOp::FlushAll | PendingOp::SwapDb(..)
        )
    }
}

/// Keys changed since the last flush plus the flushes and swaps between them.
/// Each key appears once; a flush or swap reorders the keys it affects so that
/// reading values at flush time gives the right result.
#[derive(Debug, Default)]
pub struct DirtySet {
    /// The ops in order; `ops[i]` is at position `base + i`.
    ops: VecDeque<PendingOp>,
    /// Position of `ops[0]` (positions only grow: taking from the front
    /// moves it on instead of renumbering).
    base: u64,
    /// Positions of the `Key` ops, found by `(db, key)`: a repeat write
    /// looks up without allocating, and each key is stored once (in `ops`).
    index: HashTable<u64>,
    hasher: DefaultHashBuilder,
    /// How many of `ops` are flushes or swaps.
    flushes_and_swaps: usize,
    /// The names of the `Library` ops.
    libraries: hashbrown::HashSet<Vec<u8>>,
}

fn hash_key(hasher: &DefaultHashBuilder, db: u32, key: &[u8]) -> u64 {
    hasher.hash_one((db, key))
}

/// Indexes the `Key` op at position `pos` (its hash is `h`).
fn index_position(
    index: &mut HashTable<u64>,
    ops: &VecDeque<PendingOp>,
    base: u64,
    hasher: &DefaultHashBuilder,
    h: u64,
    pos: u64,
) {
    index.insert_unique(h, pos, |&p| {
        key_at(ops, base, p).map_or(0, |(d, k)| hash_key(hasher, d, k))
    });
}

/// `(db, key)` of the `Key` op at position `pos`, if that is one.
fn key_at(ops: &VecDeque<PendingOp>, base: u64, pos: u64) -> Option<(u32, &[u8])> {
    let i = usize::try_from(pos.checked_sub(base)?).ok()?;
    match ops.get(i)? {
        PendingOp::Key { db, key } => Some((*db, key.as_slice())),
        _ => None,
    }
}

impl DirtySet {
    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Whether `key` of `db` is pending.
    pub fn contains(&self, db: u32, key: &[u8]) -> bool {
        self.contains_hashed(hash_key(&self.hasher, db, key), db, key)
    }

    fn contains_hashed(&self, h: u64, db: u32, key: &[u8]) -> bool {
        self.index
            .find(h, |&p| key_at(&self.ops, self.base, p) == Some((db, key)))
            .is_some()
    }

    /// The pending ops, in order.
    pub fn pending(&self) -> impl Iterator<Item = &PendingOp> {
        self.ops.iter()
    }

    /// Ops pending.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether a FLUSHDB, FLUSHALL or SWAPDB is pending.
    pub fn has_flush_or_swap(&self) -> bool {
        self.flushes_and_swaps > 0
    }

    /// Whether applying the peer's `batch` now could overwrite or move a
    /// pending change, which must then be stamped first: the batch writes
    /// a pending key (the remote write would be judged against the key's
    /// older version), or a flush or swap on either side moves or drops
    /// keys under the other side's changes.
    pub fn touched_by(&self, batch: &Batch) -> bool {
        if self.is_empty() {
            return false;
        }
        let flush_or_swap = self.has_flush_or_swap();
        batch.entries.iter().any(|e| match &e.op {
            Op::Value { key, .. }
            | Op::Delete { key }
            | Op::Expire { key, .. }
            | Op::Counter { key, .. }
            | Op::Fields { key, .. }
            | Op::Append { key, .. } => flush_or_swap || self.contains(e.db, key),
            // A sweep's end deletes keys: a change of theirs is dated first.
            Op::FlushDb | Op::FlushAll | Op::SwapDb { .. } | Op::SweepEnd { .. } => true,
            // A library of the peer's can displace another one here (two
            // registering one function): any pending change of ours first.
            Op::Library { .. } | Op::LibraryDelete { .. } => self.libraries_pending(),
            Op::Ack { .. } | Op::SyncRequest { .. } | Op::SweepStart { .. } | Op::Bound { .. } => {
                false
            }
        })
    }

    /// The oldest op, left in place.
    pub fn front(&self) -> Option<&PendingOp> {
        self.ops.front()
    }

    /// Takes up to `n` of the oldest ops.
    pub fn take_front(&mut self, n: usize) -> Vec<PendingOp> {
        let n = n.min(self.ops.len());
        let front: Vec<PendingOp> = self.ops.drain(..n).collect();
        for (pos, op) in (self.base..).zip(&front) {
            match op {
                PendingOp::Key { db, key } => {
                    let h = hash_key(&self.hasher, *db, key);
                    if let Ok(entry) = self.index.find_entry(h, |&p| p == pos) {
                        entry.remove();
                    }
                }
                PendingOp::Library(name) => {
                    self.libraries.remove(name);
                }
                _ => {}
            }
        }
        self.base += n as u64;
        self.flushes_and_swaps -= front.iter().filter(|op| op.is_flush_or_swap()).count();
        front
    }

    /// Appends ops recorded elsewhere, after everything pending.
    pub fn extend(&mut self, ops: Vec<PendingOp>) {
        for op in ops {
            match op {
                PendingOp::Key { db, key } => self.mark_owned(db, key),
                PendingOp::FlushDb(d) => self.flushing(Some(d)),
                PendingOp::FlushAll => self.flushing(None),
                PendingOp::SwapDb(a, b, shipped) => self.swap_op(a, b, shipped),
                PendingOp::Functions => self.mark_functions(),
                PendingOp::Library(name) => self.mark_library(name),
            }
        }
    }

    /// Records that the function library `name` may have changed.
    pub fn mark_library(&mut self, name: Vec<u8>) {
        if self.libraries.insert(name.clone()) {
            self.ops.push_back(PendingOp::Library(name));
        }
    }

    /// Whether a change of any function library is pending.
    pub fn libraries_pending(&self) -> bool {
        !self.libraries.is_empty() || self.functions_pending()
    }

    /// Records that any function library may have changed.
    pub fn mark_functions(&mut self) {
        if !self.functions_pending() {
            self.ops.push_back(PendingOp::Functions);
        }
    }

    /// Whether a change of the function libraries is pending.
    pub fn functions_pending(&self) -> bool {
        self.ops.iter().any(|op| matches!(op, PendingOp::Functions))
    }

    /// Records that `key` in `db` changed.
    pub fn mark(&mut self, db: u32, key: &[u8]) {
        // One hash for the lookup and the insert: this runs for every write.
        let h = hash_key(&self.hasher, db, key);
        if !self.contains_hashed(h, db, key) {
            self.push_key(h, db, key.to_vec());
        }
    }

    /// [`DirtySet::mark`] of a name already owned (kept, not copied).
    fn mark_owned(&mut self, db: u32, key: Vec<u8>) {
        let h = hash_key(&self.hasher, db, &key);
        if !self.contains_hashed(h, db, &key) {
            self.push_key(h, db, key);
        }
    }

    /// Appends a key not pending yet (its hash is `h`).
    fn push_key(&mut self, h: u64, db: u32, key: Vec<u8>) {
        let pos = self.base + self.ops.len() as u64;
        self.ops.push_back(PendingOp::Key { db, key });
        index_position(&mut self.index, &self.ops, self.base, &self.hasher, h, pos);
    }

    /// Indexes every `Key` op again (after ops were removed or reordered).
    fn reindex(&mut self) {
        self.index.clear();
        self.flushes_and_swaps = self.ops.iter().filter(|op| op.is_flush_or_swap()).count();
        let (ops, base, hasher) = (&self.ops, self.base, &self.hasher);
        for (pos, op) in (base..).zip(ops.iter()) {
            if let PendingOp::Key { db, key } = op {
                let h = hash_key(hasher, *db, key);
                let seen = self
                    .index
                    .find(h, |&p| key_at(ops, base, p) == Some((*db, key.as_slice())))
                    .is_some();
                if !seen {
                    index_position(&mut self.index, ops, base, hasher, h, pos);
                }
            }
        }
    }

    /// Records a flush of `db` (or of everything): keys dirtied before it are
    /// gone, so they need not ship.
    pub fn flushing(&mut self, db: Option<u32>) {
        let hit = |d: u32| db.is_none_or(|f| f == d);
        self.ops
            .retain(|op| !matches!(op, PendingOp::Key { db: d, .. } if hit(*d)));
        self.ops.push_back(match db {
            Some(d) => PendingOp::FlushDb(d),
            None => PendingOp::FlushAll,
        });
        self.reindex();
    }

    /// Records `SWAPDB a b`: dirty keys of either database now live in the
    /// other one, and ship after the swap.
    pub fn swapped(&mut self, a: u32, b: u32) {
        self.swap_op(a, b, None);
    }

    fn swap_op(&mut self, a: u32, b: u32, shipped: Option<Stamp>) {
        let mut moved = Vec::new();
        self.ops.retain(|op| match op {
            PendingOp::Key { db, key } if *db == a || *db == b => {
                moved.push((if *db == a { b } else { a }, key.clone()));
                false
            }
            _ => true,
        });
        self.ops.push_back(PendingOp::SwapDb(a, b, shipped));
        self.reindex();
        for (db, key) in moved {
            self.mark_owned(db, key);
        }
    }

    /// Takes everything pending.
    pub fn take(&mut self) -> Vec<PendingOp> {
        self.index.clear();
        if !self.libraries.is_empty() {
            self.libraries.clear();
        }
        self.flushes_and_swaps = 0;
        self.base += self.ops.len() as u64;
        Vec::from(std::mem::take(&mut self.ops))
    }

    /// Puts back ops taken earlier that could not be queued (or were shipped
    /// and not acknowledged), ahead of anything recorded since. They go in
    /// as if recorded again: a key named twice (in two unacknowledged
    /// batches) is held once, and a key before a SWAPDB of its database
    /// moves after it, to the database its value now lives in.
    pub fn restore(&mut self, ops: Vec<PendingOp>) {
        let newer = self.take();
        self.extend(ops);
        self.extend(newer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_front_is_the_oldest_op_left_in_place() {
        let mut set = DirtySet::default();
        assert_eq!(set.front(), None);
        set.extend(vec![key(0, "a"), key(1, "b")]);
        assert_eq!(set.front(), Some(&key(0, "a")));
        assert_eq!(set.len(), 2);
        set.take_front(1);
        assert_eq!(set.front(), Some(&key(1, "b")));
    }

    fn key(db: u32, k: &str) -> PendingOp {
        PendingOp::Key {
            db,
            key: k.as_bytes().to_vec(),
        }
    }

    fn remote(db: u32, op: Op) -> Batch {
        Batch {
            entries: vec![crate::proto::entry::Entry {
                origin: 2,
                seq: 1,
                clock: 1,
                db,
                op,
            }],
        }
    }

    fn delete(k: &str) -> Op {
        Op::Delete {
            key: k.as_bytes().to_vec(),
        }
    }

    #[test]
    fn a_remote_batch_touches_pending_changes_only_through_their_keys_or_a_flush_or_swap() {
        let mut d = DirtySet::default();
        assert!(!d.touched_by(&remote(0, delete("a"))), "nothing pending");
        d.mark(0, b"a");
        assert!(d.touched_by(&remote(0, delete("a"))));
        assert!(!d.touched_by(&remote(0, delete("b"))));
        assert!(!d.touched_by(&remote(1, delete("a"))), "another database");
        assert!(!d.touched_by(&remote(
            0,
            Op::Ack {
                applied: 3,
                in_step: false,
                holds: 0,
            }
        )));
        assert!(!d.touched_by(&remote(
            0,
            Op::SyncRequest {
                received: 3,
                since: 0,
                own: 0,
                answer: false
            }
        )));
        assert!(d.touched_by(&remote(5, Op::FlushDb)));
        assert!(d.touched_by(&remote(0, Op::FlushAll)));
        assert!(d.touched_by(&remote(2, Op::SwapDb { other: 3 })));
        assert!(!d.has_flush_or_swap());
        d.swapped(4, 5);
        assert!(d.has_flush_or_swap());
        assert!(d.touched_by(&remote(0, delete("b"))), "a swap waits here");
        let _ = d.take();
        d.flushing(Some(7));
        assert!(d.has_flush_or_swap());
        assert!(d.touched_by(&remote(0, delete("b"))), "a flush waits here");
    }

    #[test]
    fn restored_ops_are_recorded_again_so_keys_stay_unique_and_follow_swaps() {
        let mut d = DirtySet::default();
        d.mark(2, b"new");
        // Two unacknowledged batches: k in db 0, a swap of 0 and 1, k again.
        d.restore(vec![
            key(0, "k"),
            PendingOp::SwapDb(0, 1, None),
            key(0, "k"),
            key(0, "k"),
        ]);
        assert!(d.has_flush_or_swap());
        assert!(d.contains(1, b"k") && d.contains(0, b"k"));
        assert_eq!(
            d.take_front(2),
            vec![PendingOp::SwapDb(0, 1, None), key(1, "k")]
        );
        assert!(!d.has_flush_or_swap());
        assert_eq!(d.take(), vec![key(0, "k"), key(2, "new")]);
    }

    #[test]
    fn hot_key_ships_once() {
        let mut d = DirtySet::default();
        for _ in 0..100 {
            d.mark(0, b"hot");
        }
        d.mark(1, b"hot");
        assert_eq!(d.take(), vec![key(0, "hot"), key(1, "hot")]);
        assert!(d.is_empty());
    }

    #[test]
    fn flush_drops_earlier_keys_of_that_db_only() {
        let mut d = DirtySet::default();
        d.mark(0, b"a");
        d.mark(1, b"b");
        d.flushing(Some(0));
        d.mark(0, b"a");
        assert_eq!(
            d.take(),
            vec![key(1, "b"), PendingOp::FlushDb(0), key(0, "a")]
        );
        d.mark(3, b"c");
        d.flushing(None);
        assert_eq!(d.take(), vec![PendingOp::FlushAll]);
    }

    #[test]
    fn swap_moves_dirty_keys_after_it() {
        let mut d = DirtySet::default();
        d.mark(0, b"a");
        d.mark(1, b"b");
        d.mark(2, b"c");
        d.swapped(0, 1);
        assert_eq!(
            d.take(),
            vec![
                key(2, "c"),
                PendingOp::SwapDb(0, 1, None),
                key(1, "a"),
                key(0, "b")
            ]
        );
    }

    /// The dirty set's rules written the slow, obvious way.
    #[derive(Default)]
    struct Model(Vec<PendingOp>);

    impl Model {
        fn has(&self, db: u32, k: &[u8]) -> bool {
            self.0
                .iter()
                .any(|op| matches!(op, PendingOp::Key { db: d, key } if *d == db && key == k))
        }
        fn mark(&mut self, db: u32, k: &[u8]) {
            if !self.has(db, k) {
                self.0.push(PendingOp::Key {
                    db,
                    key: k.to_vec(),
                });
            }
        }
        fn flushing(&mut self, db: Option<u32>) {
            let hit = |d: u32| db.is_none_or(|f| f == d);
            self.0
                .retain(|op| !matches!(op, PendingOp::Key { db: d, .. } if hit(*d)));
            self.0
                .push(db.map_or(PendingOp::FlushAll, PendingOp::FlushDb));
        }
        fn swapped(&mut self, a: u32, b: u32) {
            let mut moved = Vec::new();
            self.0.retain(|op| match op {
                PendingOp::Key { db, key } if *db == a || *db == b => {
                    moved.push((if *db == a { b } else { a }, key.clone()));
                    false
                }
                _ => true,
            });
            self.0.push(PendingOp::SwapDb(a, b, None));
            for (db, k) in moved {
                self.mark(db, &k);
            }
        }
        fn extend(&mut self, ops: Vec<PendingOp>) {
            for op in ops {
                match op {
                    PendingOp::Key { db, key } => self.mark(db, &key),
                    PendingOp::FlushDb(d) => self.flushing(Some(d)),
                    PendingOp::FlushAll => self.flushing(None),
                    PendingOp::SwapDb(a, b, _) => self.swapped(a, b),
                    PendingOp::Functions => self.functions(),
                    PendingOp::Library(name) => self.library(name),
                }
            }
        }
        fn library(&mut self, name: Vec<u8>) {
            let op = PendingOp::Library(name);
            if !self.0.contains(&op) {
                self.0.push(op);
            }
        }
        fn functions(&mut self) {
            if !self.0.contains(&PendingOp::Functions) {
                self.0.push(PendingOp::Functions);
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Step {
        Mark(u32, u8),
        Flush(Option<u32>),
        Swap(u32, u32),
        Functions,
        Library(u8),
        TakeFront(usize),
        TakeAndRestore(usize),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            8 => (0u32..3, 0u8..12).prop_map(|(d, k)| Step::Mark(d, k)),
            1 => proptest::option::of(0u32..3).prop_map(Step::Flush),
            1 => (0u32..3, 0u32..3).prop_map(|(a, b)| Step::Swap(a, b)),
            1 => Just(Step::Functions),
            2 => (0u8..4).prop_map(Step::Library),
            2 => (0usize..6).prop_map(Step::TakeFront),
            1 => (0usize..6).prop_map(Step::TakeAndRestore),
        ]
    }

    proptest! {
        /// Any sequence of marks, flushes, swaps, partial takes and restores
        /// leaves the set holding exactly what the obvious implementation holds.
        #[test]
        fn matches_the_obvious_implementation(steps in proptest::collection::vec(step(), 0..200)) {
            let (mut d, mut m) = (DirtySet::default(), Model::default());
            for s in steps {
                match s {
                    Step::Mark(db, k) => {
                        d.mark(db, &[k]);
                        m.mark(db, &[k]);
                    }
                    Step::Flush(db) => {
                        d.flushing(db);
                        m.flushing(db);
                    }
                    Step::Swap(a, b) => {
                        d.swapped(a, b);
                        m.swapped(a, b);
                    }
                    Step::Functions => {
                        d.mark_functions();
                        m.functions();
                    }
                    Step::Library(n) => {
                        d.mark_library(vec![n]);
                        m.library(vec![n]);
                    }
                    Step::TakeFront(n) => {
                        let n2 = n.min(m.0.len());
                        prop_assert_eq!(d.take_front(n), m.0.drain(..n2).collect::<Vec<_>>());
                    }
                    Step::TakeAndRestore(extra) => {
                        // Taken, more marked meanwhile, then put back in front.
                        let taken = d.take();
                        let mtaken = std::mem::take(&mut m.0);
                        prop_assert_eq!(&taken, &mtaken);
                        for k in 0..extra as u8 {
                            d.mark(0, &[k]);
                            m.mark(0, &[k]);
                        }
                        d.restore(taken);
                        let newer = std::mem::replace(&mut m.0, mtaken);
                        m.extend(newer);
                    }
                }
                prop_assert_eq!(d.len(), m.0.len());
                prop_assert_eq!(
                    d.has_flush_or_swap(),
                    m.0.iter().any(PendingOp::is_flush_or_swap)
                );
                prop_assert_eq!(d.functions_pending(), m.0.contains(&PendingOp::Functions));
                prop_assert_eq!(
                    d.libraries_pending(),
                    m.0.iter().any(|op| matches!(op, PendingOp::Functions | PendingOp::Library(_)))
                );
                for db in 0..3 {
                    for k in 0..12u8 {
                        prop_assert_eq!(d.contains(db, &[k]), m.has(db, &[k]));
                    }
                }
            }
            prop_assert_eq!(d.take(), m.0);
        }
    }

    #[test]
    fn restore_keeps_order_and_dedups() {
        let mut d = DirtySet::default();
        d.mark(0, b"a");
        d.mark(0, b"b");
        let taken = d.take();
        d.mark(0, b"b");
        d.mark(0, b"c");
        d.restore(taken);
        assert_eq!(d.take(), vec![key(0, "a"), key(0, "b"), key(0, "c")]);
    }
}
