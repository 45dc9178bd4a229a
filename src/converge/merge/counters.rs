//! The counters of one node that still carry merge metadata, and the
//! decisions that change them: a local increment or other write, the
//! peer's counter state, the peer's plain write of such a key, collection.
//!
//! A key enters the table when it is first incremented (or the peer's
//! counter state for it arrives) and stays while it holds a counter, also
//! at rest (metadata collected): its base's stamp is then the stamp of
//! the last set every site applied, the same on every site, which the
//! key's version (its newest change, often an increment) is not. A base
//! rebuilt at the version instead was a set back-dated to it, which
//! another site could take over its own base and so count again, or
//! drop, increments (the restart test found both).
//!
//! A key the table does not hold is a plain string; its state is built
//! from its value and its version when it first counts ([`Local`]): its
//! last write was a set (its version), having seen exactly the bound.
//! Everything a site applied of a key at rest is at or below the bound,
//! and the bound holds only what it applied.
//!
//! The bound is what every site has applied (see `merge`): this node's
//! own changes up to what an in-step ack of the peer covered, the peer's
//! up to this node's watermark of it. A plain write of the peer's comes
//! with the peer's bound when it was read, which is everything it had seen
//! of a key it held at rest.
//!
//! The bound can go down (the peer lost what it had applied and asks
//! again), and a key at rest keeps no `Seen`: what its base has folded in
//! is [`Counters::folded`], the highest bound this node ever held, which
//! never goes down while the node keeps its data. Everything at or below
//! it was applied here, and an increment applied to a key at rest wakes
//! it, so a key at rest holds every increment of it at or below it: the
//! peer listing one of them again after a lowering must not count it
//! again (the fault test found it: two increments counted twice on the
//! node whose own they were).

use std::borrow::Cow;

use hashbrown::HashMap;

use crate::converge::key_table::KeyTable;
use crate::converge::node_places::NodePlaces;
use crate::converge::shrink::ShrinkWhenSparse;

use crate::converge::merge::counter::{Base, Counter};
use crate::converge::merge::db_key::DbKey;
use crate::converge::merge::seen::Seen;
use crate::converge::version::{KeyVersion, Stamp};

/// What this node holds of a key the table does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Local {
    /// No such key; its version (or a tombstone's, or [`Stamp::ZERO`]).
    Absent(Stamp),
    /// A string holding this integer, written at the version.
    Integer(i128, Stamp),
    /// Any other value, written at the version.
    Other(Stamp),
}

/// A plain write of the peer's (not a counter state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plain {
    /// A string holding this integer.
    Integer(i128),
    /// A delete.
    Deleted,
    /// Any other value.
    Other,
}

/// What applying a counter state (or a plain write merged as one) gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merged {
    /// The key now holds `value` (`None`: absent); `base_won`: the
    /// incoming base replaced the one held, so its expiry is the key's;
    /// `version`: the newest stamp of the key.
    Value {
        /// The value to hold.
        value: Option<i128>,
        /// The incoming base won.
        base_won: bool,
        /// The key's version.
        version: Stamp,
        /// The key held another type, which lost (counted).
        type_changed: bool,
    },
    /// Older than another type's write held here: nothing changes (counted).
    Discarded,
}

/// The peer's plain write of a key the table holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlainOutcome {
    /// The key is not in the table: last writer wins, as for any key.
    NotHeld,
    /// Merged as a set or delete.
    Merged(Merged),
    /// Another type, or no `Seen` came with it: last writer wins (counted
    /// as a fallback); the table still holds the key, to be forgotten if
    /// the write wins.
    WholeKey,
}

type Key = (u32, Box<[u8]>);

/// Increments a counter lists at most while the bound cannot rise (the
/// peer catching up for long: each state shipped, none acknowledged in
/// step); past it a local increment is taken as a set of the value it left
/// (which keeps every increment made elsewhere that it had not seen), so
/// that a state, and each journal record of it, stays bounded. Increments
/// not yet sent fold into one instead ([`Counter::coalesce`]).
pub const MAX_LISTED: usize = 1024;

/// A counter at rest as the table keeps it: its base's stamp, with the
/// node as its place in [`Counters::nodes`], and value (no metadata, no
/// increments), in 24 bytes where a [`Counter`] takes 112: a node keeps
/// every counter it ever merged (stop 46, `scripts/memory.sh`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Resting {
    clock: u64,
    value: i64,
    node: u32,
    present: bool,
}

impl Resting {
    /// `c` if it is at rest and its value fits 64 bits (a sum of
    /// increments made on several sites at once may not: see
    /// [`Counters::wide`]).
    fn of(c: &Counter, nodes: &mut NodePlaces) -> Option<Self> {
        let base = c.base();
        let value = match base.value {
            Some(v) => Some(i64::try_from(v).ok()?),
            None => None,
        };
        if c.metadata_len() != 0 {
            return None;
        }
        Some(Self {
            clock: base.stamp.clock,
            value: value.unwrap_or(0),
            node: nodes.place_of(base.stamp.node),
            present: value.is_some(),
        })
    }

    /// Its base's stamp.
    fn stamp(self, nodes: &NodePlaces) -> Stamp {
        Stamp::new(self.clock, nodes.node_at(self.node))
    }

    fn counter(self, nodes: &NodePlaces) -> Counter {
        Counter::from_parts(
            Base {
                stamp: self.stamp(nodes),
                value: self.present.then_some(i128::from(self.value)),
                seen: Seen::new(),
            },
            [],
        )
    }
}

/// The counters, and the bound.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    /// Counters with metadata (what collection visits).
    live: HashMap<Key, Counter>,
    /// Counters at rest, per database (a table emptied stays).
    resting: HashMap<u32, KeyTable<Resting>>,
    /// The nodes the resting counters' stamps name.
    nodes: NodePlaces,
    /// Counters at rest whose value is past 64 bits (only increments made
    /// on several sites at once get there), whole.
    wide: HashMap<Key, Counter>,
    /// Per key with metadata, the newest of its stamps a state this node
    /// pushed held (none: nothing since the key entered the table here; a
    /// state a load restored counts as sent whole). A key at rest has no
    /// increments to fold with a later one: it needs none.
    sent: HashMap<Key, Stamp>,
    /// Keys a flush trimmed whose value must be written again.
    trimmed: Vec<Key>,
    bound: Seen,
    /// The highest bound held since the data was last replaced: what a key
    /// at rest (or a plain integer) has folded in (see the module's doc).
    folded: Seen,
}

impl Counters {
    /// Keys whose state holds metadata (not at rest).
    pub fn live_len(&self) -> usize {
        self.live.len()
    }

    /// No key is held (at rest or not).
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
            && self.resting.values().all(KeyTable::is_empty)
            && self.wide.is_empty()
    }

    /// Keys held, at rest or not.
    pub fn held(&self) -> usize {
        let resting: usize = self.resting.values().map(KeyTable::len).sum();
        self.live.len() + resting + self.wide.len()
    }

    /// Holds `c` for `k`.
    fn put(&mut self, k: Key, c: Counter) {
        let resting = self.resting.get_mut(&k.0);
        if c.metadata_len() != 0 {
            resting.map(|t| t.remove(&k.1));
            self.wide.remove(&k);
            self.live.insert(k, c);
            return;
        }
        // At rest: nothing of it left to fold with a later increment.
        self.live.remove(&k);
        self.sent.remove(&k);
        match Resting::of(&c, &mut self.nodes) {
            Some(r) => {
                self.wide.remove(&k);
                self.resting.entry(k.0).or_default().insert(&k.1, r);
            }
            None => {
                resting.map(|t| t.remove(&k.1));
                self.wide.insert(k, c);
            }
        }
    }

    /// Takes `k`'s state out.
    fn take(&mut self, k: &Key) -> Option<Counter> {
        if self.is_empty() {
            return None;
        }
        if let Some(c) = self.live.remove(k) {
            return Some(c);
        }
        // An emptied table stays: a key resting and waking again and again
        // does not drop and build it each time.
        let at_rest = match self.resting.get_mut(&k.0).and_then(|t| t.remove(&k.1)) {
            Some(r) => r.counter(&self.nodes),
            None => self.wide.remove(k)?,
        };
        Some(self.woken(at_rest))
    }

    /// A counter at rest taken out to change: its base has seen what it
    /// folded in (see [`Counters::folded`]).
    fn woken(&self, c: Counter) -> Counter {
        let base = c.base();
        let seen = self.folded.clone();
        Counter::from_parts(
            Base {
                seen,
                ..base.clone()
            },
            c.increments().iter().copied(),
        )
    }

    fn get_resting(&self, db: u32, key: &[u8]) -> Option<Resting> {
        self.resting.get(&db)?.get(key).copied()
    }

    /// Forgets `k` for good (not put back).
    fn drop_key(&mut self, k: &Key) {
        self.take(k);
        self.sent.remove(k);
    }

    /// A state of `key` is being pushed to the peer: what it holds now has
    /// left this node.
    pub fn sent(&mut self, db: u32, key: &[u8]) {
        let k: Key = (db, Box::from(key));
        if let Some(c) = self.live.get(&k) {
            let newest = c.newest();
            self.sent.insert(k, newest);
        }
    }

    /// Forgets `key` (it expired or was evicted: gone here by itself).
    pub fn forget(&mut self, db: u32, key: &[u8]) -> bool {
        let held = self.contains(db, key);
        if held || self.sent.contains_key(&DbKey(db, key)) {
            self.drop_key(&(db, Box::from(key)));
        }
        held
    }

    /// The bound (what every site has applied).
    pub fn bound(&self) -> &Seen {
        &self.bound
    }

    /// Raises the bound's clock of `node`.
    pub fn raise_bound(&mut self, node: u64, clock: u64) {
        self.bound.raise(node, clock);
        self.folded.raise(node, clock);
    }

    /// Sets the bound's clock of `node` (a journal's record of it, which
    /// may have lowered it; what keys at rest folded stays).
    pub fn set_bound(&mut self, node: u64, clock: u64) {
        self.bound.lower(node, clock);
        self.bound.raise(node, clock);
        self.folded.raise(node, clock);
    }

    /// The highest bound held since the data was last replaced, at or above
    /// [`Counters::bound`]: every increment at or below it was applied
    /// here, so a key at rest, or a plain integer, holds it.
    pub fn folded(&self) -> &Seen {
        &self.folded
    }

    /// The state of `key`, if it is held.
    pub fn get(&self, db: u32, key: &[u8]) -> Option<Cow<'_, Counter>> {
        if self.is_empty() {
            return None;
        }
        let k = DbKey(db, key);
        if let Some(c) = self.live.get(&k).or_else(|| self.wide.get(&k)) {
            return Some(Cow::Borrowed(c));
        }
        (self.get_resting(db, key)).map(|r| Cow::Owned(r.counter(&self.nodes)))
    }

    /// The state of `key` to ship, if it is held: a key at rest has seen
    /// what it folded in ([`Counters::folded`]), so that a peer whose
    /// older base it replaces does not count those increments on top.
    pub fn shipped(&self, db: u32, key: &[u8]) -> Option<Cow<'_, Counter>> {
        let c = self.get(db, key)?;
        if c.metadata_len() != 0 {
            // Not at rest: its base's Seen says what it holds.
            return Some(c);
        }
        Some(Cow::Owned(self.woken(c.into_owned())))
    }

    /// Whether `key`'s state holds a change (its base or an increment)
    /// `wanted` picks: a key whose version is another node's may still
    /// carry increments of this node a peer misses.
    pub fn changed_after(&self, db: u32, key: &[u8], wanted: impl Fn(Stamp) -> bool) -> bool {
        self.contains(db, key)
            && self.get(db, key).is_some_and(|c| {
                wanted(c.base().stamp) || c.increments().iter().any(|&(s, _)| wanted(s))
            })
    }

    /// Whether `key` is held (as a counter, at rest or not).
    pub fn contains(&self, db: u32, key: &[u8]) -> bool {
        let k = DbKey(db, key);
        !self.is_empty()
            && (self.live.contains_key(&k)
                || self.get_resting(db, key).is_some()
                || self.wide.contains_key(&k))
    }

    /// What a write made here now has seen of `key`: its increments held
    /// and everything up to the bound.
    fn seen_of(&self, c: Option<&Counter>) -> Seen {
        let mut seen = c.map(Counter::observed).unwrap_or_default();
        seen.join(&self.folded);
        seen
    }

    /// A local flush in which `key` was only incremented, by `sum` in all,
    /// stamped `stamp`, leaving it at `after`. `before` is its version
    /// before. Returns `false` when the state here did not give `after`, or
    /// lists [`MAX_LISTED`] increments already (then the write is taken as
    /// a set of `after`; counted by the caller).
    pub fn local_increment(
        &mut self,
        db: u32,
        key: &[u8],
        stamp: Stamp,
        sum: i128,
        after: i128,
        before: Option<KeyVersion>,
    ) -> bool {
        let k: Key = (db, Box::from(key));
        let mut c = self.take(&k).unwrap_or_else(|| {
            let was = after.saturating_sub(sum);
            let value = match before {
                Some(KeyVersion::Live(_)) => Some(was),
                _ if was == 0 => None,
                _ => Some(was),
            };
            rest(
                before.map_or(Stamp::ZERO, KeyVersion::stamp),
                value,
                &self.folded,
            )
        });
        let crowded = c.increments().len() >= MAX_LISTED;
        if !crowded {
            c.increment(stamp, sum, &self.bound);
            let sent = self.sent.get(&k).copied().unwrap_or(Stamp::ZERO);
            c.coalesce(stamp.node, sent);
        }
        let agrees = !crowded && c.value() == Some(after);
        if !agrees {
            let seen = self.seen_of(Some(&c));
            c.set(stamp, Some(after), seen);
        }
        self.put(k, c);
        agrees
    }

    /// Any other local write of `key` stamped `stamp`: a set of `value`
    /// (`Some`), a delete (`None`), or another type (`Err`). Only a key the
    /// table holds changes: it is merged as a set that saw all this node
    /// holds, or forgotten (another type). Whether the table holds it now.
    pub fn local_write(
        &mut self,
        db: u32,
        key: &[u8],
        stamp: Stamp,
        value: Result<Option<i128>, ()>,
    ) -> bool {
        if self.is_empty() {
            return false;
        }
        let k: Key = (db, Box::from(key));
        let Some(mut c) = self.take(&k) else {
            return false;
        };
        let Ok(value) = value else {
            return false;
        };
        let seen = self.seen_of(Some(&c));
        c.set(stamp, value, seen);
        self.put(k, c);
        true
    }

    /// The peer's counter state of `key`, stamped `stamp`, against what is
    /// held here (`local`, read only when the table does not hold the key).
    pub fn remote_state(
        &mut self,
        db: u32,
        key: &[u8],
        incoming: &Counter,
        local: impl FnOnce() -> Local,
    ) -> Merged {
        let k: Key = (db, Box::from(key));
        let (mut c, type_changed) = match self.take(&k) {
            Some(c) => (c, false),
            None => match local() {
                Local::Absent(v) => (rest(v, None, &self.folded), false),
                Local::Integer(x, v) => (rest(v, Some(x), &self.folded), false),
                Local::Other(v) if incoming.newest() > v => (Counter::at_rest(None), true),
                Local::Other(_) => return Merged::Discarded,
            },
        };
        let held_base = c.base().stamp;
        c.merge(incoming, &self.bound);
        let base_won = type_changed || c.base().stamp > held_base;
        let (value, version) = self.keep(k, c);
        Merged::Value {
            value,
            base_won,
            version,
            type_changed,
        }
    }

    /// The peer's plain write of `key` stamped `stamp`, made having seen
    /// `seen` (its bound when it read the key, `None` if it sent none).
    pub fn remote_plain(
        &mut self,
        db: u32,
        key: &[u8],
        stamp: Stamp,
        plain: Plain,
        seen: Option<&Seen>,
    ) -> PlainOutcome {
        if !self.contains(db, key) {
            return PlainOutcome::NotHeld;
        }
        let k: Key = (db, Box::from(key));
        let value = match (plain, seen) {
            (Plain::Integer(x), Some(_)) => Some(x),
            (Plain::Deleted, Some(_)) => None,
            // Held until last writer wins has decided (`forget` if it won).
            _ => return PlainOutcome::WholeKey,
        };
        let Some(mut c) = self.take(&k) else {
            return PlainOutcome::NotHeld;
        };
        let held_base = c.base().stamp;
        c.set(stamp, value, seen.cloned().unwrap_or_default());
        let base_won = c.base().stamp > held_base;
        let (value, version) = self.keep(k, c);
        PlainOutcome::Merged(Merged::Value {
            value,
            base_won,
            version: version.max(stamp),
            type_changed: false,
        })
    }

    /// Collects every state with metadata at the bound; returns the keys
    /// that came to rest.
    pub fn collect(&mut self) -> Vec<(u32, Box<[u8]>)> {
        let bound = &self.bound;
        let rested: Vec<(Key, Counter)> = (self.live)
            .extract_if(|_, c| {
                c.collect(bound);
                c.metadata_len() == 0
            })
            .collect();
        // A deleted counter at rest is a plain absent key: its tombstone
        // holds the delete's stamp (nothing came after it), the same on
        // every site.
        let mut keys = Vec::with_capacity(rested.len());
        for (k, c) in rested {
            self.sent.remove(&k);
            if c.value().is_some() {
                self.put(k.clone(), c);
            }
            keys.push(k);
        }
        self.live.shrink_when_sparse();
        self.sent.shrink_when_sparse();
        keys
    }

    /// Puts back a key's state as a load found it (`None`: not held).
    pub fn restore(&mut self, db: u32, key: &[u8], state: Option<Counter>) {
        let k: Key = (db, Box::from(key));
        match state {
            Some(c) => {
                self.sent.insert(k.clone(), c.newest());
                self.put(k, c);
            }
            None => self.drop_key(&k),
        }
    }

    /// Every key's state, for persistence.
    pub fn states(&self) -> impl Iterator<Item = (u32, &[u8], Cow<'_, Counter>)> {
        let whole = self.live.iter().chain(self.wide.iter());
        let live = whole.map(|((db, k), c)| (*db, &k[..], Cow::Borrowed(c)));
        let nodes = &self.nodes;
        let resting = (self.resting.iter()).flat_map(move |(&db, table)| {
            (table.iter()).map(move |(k, r)| (db, k, Cow::Owned(r.counter(nodes))))
        });
        live.chain(resting)
    }

    /// Collects `c` and holds it; its value and newest stamp (taken
    /// first: collection folds increments away).
    fn keep(&mut self, k: Key, mut c: Counter) -> (Option<i128>, Stamp) {
        let (value, newest) = (c.value(), c.newest());
        c.collect(&self.bound);
        self.put(k, c);
        (value, newest)
    }

    /// Takes the keys a flush trimmed (their values to write again).
    pub fn take_trimmed(&mut self) -> Vec<(u32, Box<[u8]>)> {
        std::mem::take(&mut self.trimmed)
    }

    /// Forgets every key (the dataset was replaced or flushed).
    pub fn clear(&mut self) {
        self.live.clear();
        self.resting.clear();
        self.wide.clear();
        self.sent.clear();
        // What the data held is gone: nothing is folded beyond the bound.
        self.folded = self.bound.clone();
    }

    /// `SWAPDB a b`: the keys move with their databases.
    pub fn swap_dbs(&mut self, a: u32, b: u32) {
        if self.is_empty() {
            return;
        }
        crate::converge::merge::db_key::swap_dbs_in(&mut self.live, a, b);
        crate::converge::merge::db_key::swap_dbs_in(&mut self.wide, a, b);
        let (at_a, at_b) = (self.resting.remove(&a), self.resting.remove(&b));
        if let Some(t) = at_a {
            self.resting.insert(b, t);
        }
        if let Some(t) = at_b {
            self.resting.insert(a, t);
        }
        crate::converge::merge::db_key::swap_dbs_in(&mut self.sent, a, b);
    }

    /// A flush of `db` (`None`: all) stamped `stamp`: the keys it removed
    /// are forgotten; those written after it stay, trimmed of what the
    /// flush removed (their values must be written again: see
    /// [`Self::trimmed`]).
    pub fn flushed(&mut self, db: Option<u32>, stamp: Stamp) {
        let flushed = |d: u32| db.is_none_or(|f| f == d);
        self.live
            .retain(|(d, _), c| !flushed(*d) || c.newest() > stamp);
        // A counter at rest is its base: newer than the flush, nothing of
        // it to trim.
        self.wide
            .retain(|(d, _), c| !flushed(*d) || c.newest() > stamp);
        let nodes = &self.nodes;
        for (_, table) in self.resting.iter_mut().filter(|(d, _)| flushed(**d)) {
            table.retain(|_, r| r.stamp(nodes) > stamp);
        }
        let mut trimmed = Vec::new();
        for (k, c) in self.live.iter_mut() {
            if flushed(k.0) && c.trim(stamp) {
                trimmed.push(k.clone());
            }
        }
        self.trimmed.extend(trimmed);
        let live = &self.live;
        self.sent.retain(|k, _| live.contains_key(k));
    }
}

/// The state of a key at rest: its value at its version, having seen what
/// keys at rest fold in (`folded`).
fn rest(version: Stamp, value: Option<i128>, folded: &Seen) -> Counter {
    Counter::from_parts(
        Base {
            stamp: version,
            value,
            seen: folded.clone(),
        },
        [],
    )
}

/// A string's bytes as a counter's value: what `INCR` accepts (a decimal
/// `i64` written the one way Redis writes it).
pub fn integer_of(bytes: &[u8]) -> Option<i128> {
    if bytes.is_empty() || bytes.len() > 20 {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let v: i64 = text.parse().ok()?;
    (v.to_string().as_bytes() == bytes).then_some(i128::from(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u64 = 1;
    const B: u64 = 2;

    fn s(clock: u64, node: u64) -> Stamp {
        Stamp::new(clock, node)
    }

    fn value(m: Merged) -> Option<i128> {
        match m {
            Merged::Value { value, .. } => value,
            Merged::Discarded => panic!("discarded"),
        }
    }

    #[test]
    fn integers_are_what_incr_accepts() {
        assert_eq!(integer_of(b"-12"), Some(-12));
        assert_eq!(integer_of(b"9223372036854775807"), Some(i64::MAX.into()));
        for bad in [
            &b"007"[..],
            b"+1",
            b" 1",
            b"1.0",
            b"",
            b"-0",
            b"9223372036854775808",
        ] {
            assert_eq!(integer_of(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn concurrent_increments_on_two_nodes_both_count() {
        let (mut a, mut b) = (Counters::default(), Counters::default());
        let v0 = Some(KeyVersion::Live(s(1, A)));
        assert!(a.local_increment(0, b"k", s(5, A), 1, 11, v0));
        assert!(b.local_increment(0, b"k", s(5, B), 2, 12, v0));
        let from_a = a.get(0, b"k").unwrap().into_owned();
        let from_b = b.get(0, b"k").unwrap().into_owned();
        let on_b = b.remote_state(0, b"k", &from_a, || unreachable!());
        let on_a = a.remote_state(0, b"k", &from_b, || unreachable!());
        assert_eq!(value(on_a), Some(13));
        assert_eq!(value(on_b), Some(13));
    }

    #[test]
    fn a_node_at_rest_takes_the_peers_increment_on_its_own_value() {
        let mut a = Counters::default();
        let mut b = Counters::default();
        assert!(b.local_increment(0, b"k", s(5, B), 3, 13, Some(KeyVersion::Live(s(1, A)))));
        let state = b.get(0, b"k").unwrap().into_owned();
        let m = a.remote_state(0, b"k", &state, || Local::Integer(10, s(1, A)));
        assert_eq!(value(m), Some(13));
        // A duplicate changes nothing.
        let m = a.remote_state(0, b"k", &state, || unreachable!());
        assert_eq!(value(m), Some(13));
    }

    #[test]
    fn a_plain_set_that_had_not_seen_an_increment_keeps_it() {
        let mut b = Counters::default();
        assert!(b.local_increment(0, b"k", s(5, B), 3, 13, Some(KeyVersion::Live(s(1, A)))));
        // A set 100 at 6 having seen nothing of B's.
        let out = b.remote_plain(0, b"k", s(6, A), Plain::Integer(100), Some(&Seen::new()));
        assert!(matches!(out, PlainOutcome::Merged(m) if value(m) == Some(103)));
        // Had it seen B's increment, the set alone would count.
        let mut b = Counters::default();
        assert!(b.local_increment(0, b"k", s(5, B), 3, 13, Some(KeyVersion::Live(s(1, A)))));
        let seen: Seen = [(B, 5)].into_iter().collect();
        let out = b.remote_plain(0, b"k", s(6, A), Plain::Integer(100), Some(&seen));
        assert!(matches!(out, PlainOutcome::Merged(m) if value(m) == Some(100)));
    }

    #[test]
    fn a_delete_keeps_an_increment_it_had_not_seen() {
        let mut b = Counters::default();
        assert!(b.local_increment(0, b"k", s(5, B), 3, 13, Some(KeyVersion::Live(s(1, A)))));
        let out = b.remote_plain(0, b"k", s(6, A), Plain::Deleted, Some(&Seen::new()));
        assert!(matches!(out, PlainOutcome::Merged(m) if value(m) == Some(3)));
        let out = b.remote_plain(0, b"other", s(6, A), Plain::Deleted, Some(&Seen::new()));
        assert_eq!(out, PlainOutcome::NotHeld);
    }

    #[test]
    fn another_type_is_last_writer_wins() {
        let mut b = Counters::default();
        assert!(b.local_increment(0, b"k", s(5, B), 3, 13, None));
        let out = b.remote_plain(0, b"k", s(6, A), Plain::Other, Some(&Seen::new()));
        assert_eq!(out, PlainOutcome::WholeKey);
        assert!(b.contains(0, b"k"), "held until last writer wins decides");
        let mut a = Counters::default();
        let mut c = Counters::default();
        assert!(c.local_increment(0, b"k", s(5, B), 3, 13, None));
        let state = c.get(0, b"k").unwrap().into_owned();
        assert_eq!(
            a.remote_state(0, b"k", &state, || Local::Other(s(6, A))),
            Merged::Discarded
        );
        let m = a.remote_state(0, b"k", &state, || Local::Other(s(4, A)));
        assert!(matches!(
            m,
            Merged::Value {
                value: Some(3),
                type_changed: true,
                ..
            }
        ));
    }

    /// B increments k (10 -> 13) at (5, B); A takes it and, its bound past
    /// it, rests: A, B and B's state.
    fn b_increment_at_rest_on_a() -> (Counters, Counters, Counter) {
        let (mut a, mut b) = (Counters::default(), Counters::default());
        let v0 = Some(KeyVersion::Live(s(1, A)));
        assert!(b.local_increment(0, b"k", s(5, B), 3, 13, v0));
        let from_b = b.get(0, b"k").unwrap().into_owned();
        let on_a = a.remote_state(0, b"k", &from_b, || Local::Integer(10, s(1, A)));
        assert_eq!(value(on_a), Some(13));
        a.raise_bound(B, 5);
        a.raise_bound(A, 5);
        a.collect();
        assert_eq!(a.live_len(), 0, "at rest on A");
        (a, b, from_b)
    }

    #[test]
    fn a_base_rebuilt_at_rest_does_not_count_again_what_a_lagging_site_still_lists() {
        // B's increment reached A, whose bound passed it; B's bound has not.
        let (mut a, mut b, _) = b_increment_at_rest_on_a();
        // A increments again: its state is rebuilt at its version (5, B).
        assert!(a.local_increment(0, b"k", s(7, A), 1, 14, Some(KeyVersion::Live(s(5, B)))));
        let from_a = a.get(0, b"k").unwrap().into_owned();
        let on_b = b.remote_state(0, b"k", &from_a, || unreachable!());
        assert_eq!(value(on_b), Some(14), "B's increment counted once");
    }

    #[test]
    fn a_counter_at_rest_counts_what_it_folded_once_after_the_bound_went_down() {
        // B's increment reached A and every site: A's counter rests with it.
        let (mut a, _, from_b) = b_increment_at_rest_on_a();
        // The peer lost what it had applied of A's changes and of its own
        // past 2: A lowers its bound, and B still lists its increment.
        a.set_bound(B, 2);
        a.set_bound(A, 2);
        let on_a = a.remote_state(0, b"k", &from_b, || unreachable!());
        assert_eq!(value(on_a), Some(13), "B's increment counted once");
        // A's own increment still counts, and the key rests again once the
        // bound is back above it all.
        assert!(a.local_increment(0, b"k", s(8, A), 1, 14, Some(KeyVersion::Live(s(5, B)))));
        a.raise_bound(B, 8);
        a.raise_bound(A, 8);
        a.collect();
        assert_eq!(
            (a.live_len(), a.get(0, b"k").unwrap().value()),
            (0, Some(14))
        );
    }

    #[test]
    fn a_counter_shipped_at_rest_has_seen_what_it_folded() {
        // B's increment reached A and every site: A's counter rests with it.
        let (a, mut b, _) = b_increment_at_rest_on_a();
        // B, back from an older copy, holds an older base of k and lists
        // its increment again.
        let older = Counter::from_parts(
            Base {
                stamp: Stamp::ZERO,
                value: Some(10),
                seen: Seen::new(),
            },
            [(s(5, B), 3)],
        );
        b.restore(0, b"k", Some(older));
        let from_a = a.shipped(0, b"k").unwrap().into_owned();
        let on_b = b.remote_state(0, b"k", &from_a, || unreachable!());
        assert_eq!(value(on_b), Some(13), "16 before: A's base holds the 3");
    }

    #[test]
    fn collection_at_the_bound_lets_the_key_rest() {
        let mut a = Counters::default();
        assert!(a.local_increment(0, b"k", s(5, A), 1, 11, Some(KeyVersion::Live(s(1, A)))));
        a.collect();
        assert_eq!(a.live_len(), 1, "not yet acknowledged");
        a.raise_bound(A, 5);
        a.collect();
        assert_eq!((a.live_len(), a.held()), (0, 1), "held at rest");
    }

    #[test]
    fn a_counter_at_rest_is_kept_small_and_whole() {
        assert_eq!(std::mem::size_of::<Resting>(), 24);
        let mut nodes = NodePlaces::default();
        nodes.place_of(B);
        let max = Some(i128::from(i64::MAX));
        for value in [Some(0), Some(-1), max, Some(i128::from(i64::MIN)), None] {
            let c = Counter::from_parts(
                Base {
                    stamp: s(9, A),
                    value,
                    seen: Seen::new(),
                },
                [],
            );
            let r = Resting::of(&c, &mut nodes).expect("no metadata");
            assert_eq!(r.counter(&nodes), c, "{value:?}");
        }
        assert_eq!(nodes.ids(), &[B, A], "each node once");
        let mut listed = Counter::at_rest(Some(1));
        listed.increment(s(3, B), 1, &Seen::new());
        assert_eq!(
            Resting::of(&listed, &mut nodes),
            None,
            "an increment is metadata"
        );
        let wide = Counter::at_rest(Some(i128::from(i64::MAX) + 1));
        assert_eq!(Resting::of(&wide, &mut nodes), None, "past 64 bits");
        let mut a = Counters::default();
        assert!(a.local_increment(0, b"k", s(5, A), 1, 11, Some(KeyVersion::Live(s(1, A)))));
        a.sent(0, b"k");
        let before = a.get(0, b"k").unwrap().into_owned();
        a.raise_bound(A, 5);
        assert_eq!(a.collect(), vec![(0, Box::from(&b"k"[..]))]);
        assert_eq!((a.live.len(), a.held(), a.sent.len()), (0, 1, 0));
        let rested = a.get(0, b"k").unwrap().into_owned();
        assert_eq!(rested.value(), before.value());
        assert!(a.contains(0, b"k"));
        assert!(a.local_increment(0, b"k", s(7, A), 2, 13, Some(KeyVersion::Live(s(5, A)))));
        assert_eq!((a.live.len(), a.held()), (1, 1), "live again");
        assert!(a.resting.values().all(KeyTable::is_empty));
        // Two sites' increments past 64 bits: at rest whole, not among the
        // counters with metadata.
        let near = Some(KeyVersion::Live(s(1, B)));
        let big = i128::from(i64::MAX);
        assert!(a.local_increment(0, b"w", s(8, A), big, big, near));
        let from_b = Counter::from_parts(
            Base {
                stamp: s(1, B),
                value: Some(0),
                seen: Seen::new(),
            },
            [(s(8, B), big)],
        );
        a.remote_state(0, b"w", &from_b, || unreachable!());
        a.raise_bound(A, 8);
        a.raise_bound(B, 8);
        let mut rested = a.collect();
        rested.sort();
        assert_eq!(
            rested,
            vec![(0, Box::from(&b"k"[..])), (0, Box::from(&b"w"[..]))]
        );
        assert_eq!(a.get(0, b"w").unwrap().value(), Some(2 * big));
        assert_eq!((a.live_len(), a.held(), a.wide.len()), (0, 2, 1));
        assert!(a.contains(0, b"w"));
        assert_eq!(a.states().count(), 2);
        a.swap_dbs(0, 3);
        assert!(a.contains(3, b"w") && a.contains(3, b"k"));
        a.flushed(Some(3), s(100, A));
        assert_eq!(a.held(), 0, "the flush took both");
        assert!(a.is_empty());
    }

    #[test]
    fn a_state_that_disagrees_with_the_value_read_is_taken_as_a_set() {
        let mut a = Counters::default();
        assert!(a.local_increment(0, b"k", s(5, A), 1, 11, Some(KeyVersion::Live(s(1, A)))));
        assert!(!a.local_increment(0, b"k", s(6, A), 1, 50, None));
        assert_eq!(a.get(0, b"k").and_then(|c| c.value()), Some(50));
    }
}
