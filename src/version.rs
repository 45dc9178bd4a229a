//! Per-key versions and tombstones: the last-writer-wins rule.
//!
//! Every write is stamped `(hybrid clock, origin node)`; stamps are unique
//! and totally ordered. The store remembers the stamp of the last write (or
//! delete) of each key, and per database the stamp of the last flush (its
//! floor). A remote entry is applied only if its stamp is newer than both.
//! Deletes leave tombstones until the peer has acknowledged them, so a late
//! older write cannot bring a key back. Pure: no Redis calls here.

use hashbrown::hash_map::EntryRef;
use hashbrown::HashMap;

/// Identifies one write: ordered by clock, then by node id (the tie-break).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stamp {
    /// Hybrid logical clock of the write.
    pub clock: u64,
    /// Node where the write happened.
    pub node: u64,
}

impl Stamp {
    /// Older than every real write: a key never seen.
    pub const ZERO: Stamp = Stamp { clock: 0, node: 0 };

    /// A stamp.
    pub const fn new(clock: u64, node: u64) -> Self {
        Self { clock, node }
    }
}

/// What the store knows of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyVersion {
    /// The key holds the value written at this stamp.
    Live(Stamp),
    /// The key was deleted (or expired) at this stamp.
    Deleted {
        /// When.
        stamp: Stamp,
        /// Collectable once the peer acknowledged this sequence number of
        /// ours; 0 while not yet shipped.
        gc_after: u64,
    },
}

impl KeyVersion {
    /// The stamp, live or deleted.
    pub fn stamp(self) -> Stamp {
        match self {
            Self::Live(s) | Self::Deleted { stamp: s, .. } => s,
        }
    }
}

/// `gc_after` of a tombstone applied from the peer: collectable as soon as
/// this node has acknowledged it (the peer sends nothing older for that key
/// after its delete, and what it sent before arrived first).
pub const GC_AT_NEXT_ACK: u64 = u64::MAX;

/// The verdict on a remote entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Newer than what this node has: apply it.
    Apply,
    /// Older than this node's version of the key (or a flush): discard and count.
    Stale,
    /// Exactly this node's version (a resend): nothing to do.
    Duplicate,
}

/// A key as the version map holds it: up to 24 bytes inside the table
/// entry itself, longer ones on the heap. Hashes and compares as `[u8]`.
type KeyBytes = smallvec::SmallVec<[u8; 24]>;

/// Versions of one database.
#[derive(Debug, Default, Clone)]
struct DbVersions {
    keys: HashMap<KeyBytes, KeyVersion>,
    /// Stamp of the newest FLUSHDB of this database.
    floor: Stamp,
}

/// Versions of every key this node has written or applied, per database.
/// Touched on the Redis main thread only.
#[derive(Debug, Default, Clone)]
pub struct VersionStore {
    dbs: HashMap<u32, DbVersions>,
    /// Stamp of the newest FLUSHALL.
    floor_all: Stamp,
    /// Tombstone keys to consider at the next collection (may hold keys
    /// rewritten since; those are skipped).
    tombstone_keys: Vec<(u32, Box<[u8]>)>,
    tombstones: usize,
}

impl VersionStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The version of `key`, if any is known.
    pub fn get(&self, db: u32, key: &[u8]) -> Option<KeyVersion> {
        self.dbs.get(&db)?.keys.get(key).copied()
    }

    /// Looks up every key once, results unused: independent lookups in a
    /// tight loop overlap their cache misses, so the lookups of the same keys
    /// that follow (one at a time, between Redis calls) hit the cache. Done
    /// for every batch applied and every run of keys captured.
    pub fn warm<'k>(&self, keys: impl IntoIterator<Item = (u32, &'k [u8])>) {
        let mut found = 0usize;
        let mut db_now = None;
        let mut map = None;
        for (db, key) in keys {
            if db_now != Some(db) {
                db_now = Some(db);
                map = self.dbs.get(&db).map(|d| &d.keys);
            }
            if let Some(m) = map {
                found += usize::from(m.contains_key(key));
            }
        }
        std::hint::black_box(found);
    }

    /// Stamp of the newest flush covering `db`.
    pub fn floor(&self, db: u32) -> Stamp {
        let own = self.dbs.get(&db).map(|d| d.floor).unwrap_or_default();
        own.max(self.floor_all)
    }

    /// Stamp of the newest FLUSHALL.
    pub fn floor_all(&self) -> Stamp {
        self.floor_all
    }

    /// Keys with a version (live or deleted).
    pub fn len(&self) -> usize {
        self.dbs.values().map(|d| d.keys.len()).sum()
    }

    /// Whether no key has a version.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tombstones held.
    pub fn tombstones(&self) -> usize {
        self.tombstones
    }

    /// Whether the tombstone index holds mostly keys rewritten since (a
    /// collection pass compacts it, so it stays bounded by the tombstones).
    pub fn needs_compaction(&self) -> bool {
        self.tombstone_keys.len() > 2 * self.tombstones + 1024
    }

    fn set(&mut self, db: u32, key: &[u8], version: KeyVersion) {
        let keys = &mut self.dbs.entry(db).or_default().keys;
        // One lookup; the key is copied only when it is new.
        let was_tombstone = match keys.entry_ref(key) {
            EntryRef::Occupied(mut o) => {
                let was = matches!(o.get(), KeyVersion::Deleted { .. });
                *o.get_mut() = version;
                was
            }
            EntryRef::Vacant(v) => {
                v.insert_with_key(key.into(), version);
                false
            }
        };
        let is_tombstone = matches!(version, KeyVersion::Deleted { .. });
        match (was_tombstone, is_tombstone) {
            (false, true) => {
                self.tombstones += 1;
                self.tombstone_keys.push((db, key.into()));
            }
            (true, false) => self.tombstones -= 1,
            _ => {}
        }
    }

    /// Records a write of `key` (local or applied).
    pub fn record_write(&mut self, db: u32, key: &[u8], stamp: Stamp) {
        self.set(db, key, KeyVersion::Live(stamp));
    }

    /// Puts back the version `key` had before (`None`: no version), after
    /// a write recorded for it did not happen.
    pub fn reset(&mut self, db: u32, key: &[u8], before: Option<KeyVersion>) {
        match before {
            Some(v) => self.set(db, key, v),
            None => {
                let removed = self.dbs.get_mut(&db).and_then(|d| d.keys.remove(key));
                if let Some(KeyVersion::Deleted { .. }) = removed {
                    self.tombstones -= 1;
                }
            }
        }
    }

    /// Records a delete of `key`: a tombstone, collectable after the peer
    /// acknowledges `gc_after` (0: not yet shipped, keep).
    pub fn record_delete(&mut self, db: u32, key: &[u8], stamp: Stamp, gc_after: u64) {
        self.set(db, key, KeyVersion::Deleted { stamp, gc_after });
    }

    /// The tombstone of `key` was shipped after `acked` and may be lost: it
    /// must not be collected before it is shipped again.
    pub fn unship(&mut self, db: u32, key: &[u8], acked: u64) {
        if let Some(KeyVersion::Deleted { gc_after, .. }) =
            self.dbs.get_mut(&db).and_then(|d| d.keys.get_mut(key))
        {
            if *gc_after > acked && *gc_after != GC_AT_NEXT_ACK {
                *gc_after = 0;
            }
        }
    }

    /// Entries of the tombstone index (live keys among them are skipped by
    /// [`Self::tombstone_at`]); only appended to between collections.
    pub fn tombstone_index_len(&self) -> usize {
        self.tombstone_keys.len()
    }

    /// The tombstone at position `i` of the index, if that key is still one.
    pub fn tombstone_at(&self, i: usize) -> Option<(u32, Box<[u8]>, Stamp)> {
        let (db, key) = self.tombstone_keys.get(i)?;
        match self.get(*db, key)? {
            KeyVersion::Deleted { stamp, .. } => Some((*db, key.clone(), stamp)),
            KeyVersion::Live(_) => None,
        }
    }

    /// The tombstone of `key` stamped `stamp` went out with sequence number `seq`.
    pub fn mark_shipped(&mut self, db: u32, key: &[u8], stamp: Stamp, seq: u64) {
        if let Some(KeyVersion::Deleted {
            gc_after,
            stamp: current,
        }) = self.dbs.get_mut(&db).and_then(|d| d.keys.get_mut(key))
        {
            if *current == stamp {
                *gc_after = seq;
            }
        }
    }

    /// The key expired (or was evicted) locally: not a new write. Its last
    /// stamp becomes a tombstone, collectable after `gc_after`.
    pub fn expired(&mut self, db: u32, key: &[u8], gc_after: u64) {
        if let Some(KeyVersion::Live(stamp)) = self.get(db, key) {
            self.record_delete(db, key, stamp, gc_after.max(1));
        }
    }

    /// The verdict on a remote entry for `key` stamped `remote`.
    /// `exists_locally` is asked only when the key has no recorded version:
    /// a key present without one (loaded before versions were kept) counts
    /// as written at clock 0 by this node `me`.
    pub fn decide(
        &self,
        db: u32,
        key: &[u8],
        remote: Stamp,
        me: u64,
        exists_locally: impl FnOnce() -> bool,
    ) -> Decision {
        if remote <= self.floor(db) {
            return Decision::Stale;
        }
        let local = match self.get(db, key) {
            Some(v) => v.stamp(),
            None if exists_locally() => Stamp::new(0, me),
            None => Stamp::ZERO,
        };
        match remote.cmp(&local) {
            std::cmp::Ordering::Greater => Decision::Apply,
            std::cmp::Ordering::Equal => Decision::Duplicate,
            std::cmp::Ordering::Less => Decision::Stale,
        }
    }

    /// Whether a flush stamped `stamp` of `db` (`None`: all) is newer than
    /// the floor already in place.
    pub fn flush_is_new(&self, db: Option<u32>, stamp: Stamp) -> bool {
        match db {
            Some(d) => stamp > self.floor(d),
            None => stamp > self.floor_all,
        }
    }

    /// A flush of `db` (`None`: every database) stamped `stamp`: raises the
    /// floor, forgets every version older than it, and returns the live keys
    /// written after it (they survive the flush).
    pub fn flush(&mut self, db: Option<u32>, stamp: Stamp) -> Vec<(u32, Box<[u8]>)> {
        self.raise_floor(db, stamp);
        let mut survivors = Vec::new();
        let mut removed_tombstones = 0;
        for (&d, dbv) in self.dbs.iter_mut() {
            if db.is_some_and(|f| f != d) {
                continue;
            }
            dbv.keys.retain(|key, v| {
                let keep = v.stamp() > stamp;
                if keep {
                    if let KeyVersion::Live(_) = v {
                        survivors.push((d, Box::from(key.as_slice())));
                    }
                } else if matches!(v, KeyVersion::Deleted { .. }) {
                    removed_tombstones += 1;
                }
                keep
            });
            // Give the memory back (the table keeps its size through retain).
            if dbv.keys.len() < dbv.keys.capacity() / 4 {
                dbv.keys.shrink_to_fit();
            }
        }
        self.tombstones -= removed_tombstones;
        survivors
    }

    /// `SWAPDB a b`: the versions move with the data.
    pub fn swap(&mut self, a: u32, b: u32) {
        let va = self.dbs.remove(&a);
        let vb = self.dbs.remove(&b);
        if let Some(v) = va {
            self.dbs.insert(b, v);
        }
        if let Some(v) = vb {
            self.dbs.insert(a, v);
        }
        for (db, _) in self.tombstone_keys.iter_mut() {
            if *db == a {
                *db = b;
            } else if *db == b {
                *db = a;
            }
        }
    }

    /// Drops the tombstones the peer has acknowledged (`gc_after <= acked`)
    /// and, when `acked_remote`, those applied from the peer
    /// ([`GC_AT_NEXT_ACK`]); returns how many went.
    pub fn collect(&mut self, acked: u64, acked_remote: bool) -> usize {
        let mut collected = 0;
        let dbs = &mut self.dbs;
        self.tombstone_keys.retain(|(db, key)| {
            let Some(keys) = dbs.get_mut(db).map(|d| &mut d.keys) else {
                return false;
            };
            match keys.get(&key[..]) {
                Some(KeyVersion::Deleted { gc_after, .. }) => {
                    let ours = *gc_after != GC_AT_NEXT_ACK && *gc_after <= acked;
                    let theirs = *gc_after == GC_AT_NEXT_ACK && acked_remote;
                    if *gc_after != 0 && (ours || theirs) {
                        keys.remove(&key[..]);
                        collected += 1;
                        false
                    } else {
                        true
                    }
                }
                _ => false,
            }
        });
        self.tombstones -= collected;
        collected
    }

    #[cfg(test)]
    fn collect_ours(&mut self, acked: u64) -> usize {
        self.collect(acked, false)
    }

    /// The flush floors in place: `(Some(db), stamp)` per database and
    /// `(None, stamp)` for FLUSHALL, zero stamps left out.
    pub fn floors(&self) -> Vec<(Option<u32>, Stamp)> {
        let mut out: Vec<(Option<u32>, Stamp)> = self
            .dbs
            .iter()
            .filter(|(_, d)| d.floor != Stamp::ZERO)
            .map(|(&db, d)| (Some(db), d.floor))
            .collect();
        if self.floor_all != Stamp::ZERO {
            out.push((None, self.floor_all));
        }
        out
    }

    /// The newest clock in the store (to restart the clock past it).
    pub fn newest_clock(&self) -> u64 {
        let keys = self.dbs.values().flat_map(|d| {
            d.keys
                .values()
                .map(|v| v.stamp().clock)
                .chain([d.floor.clock])
        });
        keys.chain([self.floor_all.clock]).max().unwrap_or(0)
    }

    /// Forgets everything (the dataset was replaced wholesale).
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// Every record, for persistence: `(db, key, version)` and floors.
    pub(crate) fn records(&self) -> impl Iterator<Item = (u32, &[u8], KeyVersion)> {
        self.dbs
            .iter()
            .flat_map(|(&db, d)| d.keys.iter().map(move |(k, v)| (db, k.as_slice(), *v)))
    }

    /// Raises the floor of `db` (`None`: FLUSHALL's) to `stamp`; also how
    /// persistence restores floors.
    pub(crate) fn raise_floor(&mut self, db: Option<u32>, stamp: Stamp) {
        match db {
            Some(d) => {
                let dbv = self.dbs.entry(d).or_default();
                dbv.floor = dbv.floor.max(stamp);
            }
            None => self.floor_all = self.floor_all.max(stamp),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const A: u64 = 10;
    const B: u64 = 20;

    #[test]
    fn newer_wins_older_is_stale_equal_is_duplicate() {
        let mut s = VersionStore::new();
        s.record_write(0, b"k", Stamp::new(100, A));
        assert_eq!(
            s.decide(0, b"k", Stamp::new(101, B), A, || true),
            Decision::Apply
        );
        assert_eq!(
            s.decide(0, b"k", Stamp::new(99, B), A, || true),
            Decision::Stale
        );
        assert_eq!(
            s.decide(0, b"k", Stamp::new(100, A), A, || true),
            Decision::Duplicate
        );
        // Same clock: the higher node id wins, on both sides.
        assert_eq!(
            s.decide(0, b"k", Stamp::new(100, B), A, || true),
            Decision::Apply
        );
        let mut t = VersionStore::new();
        t.record_write(0, b"k", Stamp::new(100, B));
        assert_eq!(
            t.decide(0, b"k", Stamp::new(100, A), B, || true),
            Decision::Stale
        );
    }

    #[test]
    fn unknown_keys_use_presence() {
        let s = VersionStore::new();
        // Absent and never seen: anything applies.
        assert_eq!(
            s.decide(0, b"k", Stamp::new(0, A), B, || false),
            Decision::Apply
        );
        // Present without a version: written at clock 0 by the holder.
        assert_eq!(
            s.decide(0, b"k", Stamp::new(0, A), B, || true),
            Decision::Stale
        );
        assert_eq!(
            s.decide(0, b"k", Stamp::new(0, B), A, || true),
            Decision::Apply
        );
        assert_eq!(
            s.decide(0, b"k", Stamp::new(1, A), B, || true),
            Decision::Apply
        );
    }

    #[test]
    fn tombstone_blocks_older_writes_until_collected() {
        let mut s = VersionStore::new();
        s.record_write(0, b"k", Stamp::new(5, A));
        s.record_delete(0, b"k", Stamp::new(10, A), 0);
        assert_eq!(s.tombstones(), 1);
        assert_eq!(
            s.decide(0, b"k", Stamp::new(7, B), A, || false),
            Decision::Stale
        );
        // Not shipped yet: never collected.
        assert_eq!(s.collect_ours(u64::MAX), 0);
        s.mark_shipped(0, b"k", Stamp::new(9, A), 41);
        assert_eq!(s.collect_ours(u64::MAX), 0, "another stamp's shipment");
        s.mark_shipped(0, b"k", Stamp::new(10, A), 42);
        assert_eq!(s.collect_ours(41), 0);
        assert_eq!(s.collect_ours(42), 1);
        assert_eq!(s.tombstones(), 0);
        assert_eq!(s.get(0, b"k"), None);
    }

    #[test]
    fn the_tombstone_index_stays_bounded() {
        let mut s = VersionStore::new();
        for i in 0..5000u64 {
            s.record_delete(0, b"k", Stamp::new(2 * i + 1, A), 0);
            s.record_write(0, b"k", Stamp::new(2 * i + 2, A));
            if s.needs_compaction() {
                s.collect(0, false);
            }
        }
        assert!(s.tombstone_keys.len() <= 1025);
    }

    #[test]
    fn remote_tombstones_go_at_the_next_ack() {
        let mut s = VersionStore::new();
        s.record_delete(0, b"k", Stamp::new(10, B), GC_AT_NEXT_ACK);
        assert_eq!(s.collect(u64::MAX - 1, false), 0);
        assert_eq!(s.collect(0, true), 1);
    }

    #[test]
    fn rewriting_a_tombstone_makes_it_live() {
        let mut s = VersionStore::new();
        s.record_delete(0, b"k", Stamp::new(10, A), 3);
        s.record_write(0, b"k", Stamp::new(11, B));
        assert_eq!(s.tombstones(), 0);
        assert_eq!(s.collect_ours(u64::MAX), 0);
        assert_eq!(s.get(0, b"k"), Some(KeyVersion::Live(Stamp::new(11, B))));
    }

    #[test]
    fn expiry_turns_the_last_write_into_a_tombstone() {
        let mut s = VersionStore::new();
        s.record_write(2, b"k", Stamp::new(10, A));
        s.expired(2, b"k", 7);
        assert_eq!(
            s.get(2, b"k"),
            Some(KeyVersion::Deleted {
                stamp: Stamp::new(10, A),
                gc_after: 7
            })
        );
        s.expired(2, b"unknown", 7);
        assert_eq!(s.tombstones(), 1);
    }

    #[test]
    fn flush_keeps_newer_keys_and_raises_the_floor() {
        let mut s = VersionStore::new();
        s.record_write(0, b"old", Stamp::new(5, A));
        s.record_write(0, b"new", Stamp::new(15, B));
        s.record_delete(0, b"gone", Stamp::new(6, A), 0);
        s.record_write(1, b"other", Stamp::new(1, A));
        let survivors = s.flush(Some(0), Stamp::new(10, A));
        assert_eq!(survivors, vec![(0, b"new"[..].into())]);
        assert_eq!(s.tombstones(), 0);
        assert_eq!(s.get(0, b"old"), None);
        assert_eq!(s.get(1, b"other"), Some(KeyVersion::Live(Stamp::new(1, A))));
        assert_eq!(
            s.decide(0, b"old", Stamp::new(9, B), A, || false),
            Decision::Stale
        );
        assert_eq!(
            s.decide(0, b"x", Stamp::new(11, B), A, || false),
            Decision::Apply
        );
        s.flush(None, Stamp::new(20, B));
        assert_eq!(
            s.decide(1, b"other", Stamp::new(19, A), A, || false),
            Decision::Stale
        );
        assert!(s.is_empty());
        assert_eq!(s.newest_clock(), 20);
    }

    #[test]
    fn reset_puts_back_the_version_before() {
        let mut s = VersionStore::new();
        s.record_delete(0, b"gone", Stamp::new(3, A), 0);
        s.record_write(0, b"gone", Stamp::new(5, B));
        assert_eq!(s.tombstones(), 0);
        s.reset(
            0,
            b"gone",
            Some(KeyVersion::Deleted {
                stamp: Stamp::new(3, A),
                gc_after: 0,
            }),
        );
        assert_eq!(s.tombstones(), 1);
        assert_eq!(
            s.decide(0, b"gone", Stamp::new(5, B), A, || false),
            Decision::Apply
        );
        s.record_write(0, b"new", Stamp::new(5, B));
        s.reset(0, b"new", None);
        assert_eq!(s.get(0, b"new"), None);
    }

    #[test]
    fn flush_gives_the_memory_back() {
        let mut s = VersionStore::new();
        for i in 0..10_000u32 {
            s.record_write(0, &i.to_le_bytes(), Stamp::new(1, A));
        }
        assert!(s.dbs[&0].keys.capacity() >= 10_000);
        s.flush(Some(0), Stamp::new(2, A));
        assert!(
            s.dbs[&0].keys.capacity() < 100,
            "{}",
            s.dbs[&0].keys.capacity()
        );
    }

    #[test]
    fn tombstone_index_and_unship() {
        let mut s = VersionStore::new();
        s.record_delete(0, b"a", Stamp::new(1, A), 0);
        s.record_write(0, b"a", Stamp::new(2, A));
        s.record_delete(1, b"b", Stamp::new(4, A), 9);
        assert_eq!(s.tombstone_index_len(), 2);
        assert_eq!(s.tombstone_at(0), None);
        assert_eq!(
            s.tombstone_at(1),
            Some((1, b"b"[..].into(), Stamp::new(4, A)))
        );
        s.unship(1, b"b", 8);
        assert_eq!(s.collect_ours(u64::MAX), 0, "unshipped: kept");
    }

    #[test]
    fn swap_moves_versions() {
        let mut s = VersionStore::new();
        s.record_write(0, b"a", Stamp::new(1, A));
        s.record_delete(1, b"b", Stamp::new(2, A), 5);
        s.swap(0, 1);
        assert_eq!(s.get(1, b"a"), Some(KeyVersion::Live(Stamp::new(1, A))));
        assert!(matches!(s.get(0, b"b"), Some(KeyVersion::Deleted { .. })));
        assert_eq!(s.collect_ours(5), 1);
        assert_eq!(s.get(0, b"b"), None);
    }

    /// One replicated change, as the apply path sees it.
    #[derive(Debug, Clone)]
    enum Change {
        Write { key: u8, value: u32 },
        Delete { key: u8 },
        FlushDb,
    }

    /// A replica: the keyspace and the store, applying remote entries the
    /// way `apply` does.
    #[derive(Default)]
    struct Replica {
        data: BTreeMap<u8, u32>,
        versions: VersionStore,
    }

    impl Replica {
        fn apply(&mut self, stamp: Stamp, change: &Change) {
            let me = 99;
            match change {
                Change::Write { key, value } => {
                    let present = self.data.contains_key(key);
                    if self.versions.decide(0, &[*key], stamp, me, || present) == Decision::Apply {
                        self.data.insert(*key, *value);
                        self.versions.record_write(0, &[*key], stamp);
                    }
                }
                Change::Delete { key } => {
                    let present = self.data.contains_key(key);
                    if self.versions.decide(0, &[*key], stamp, me, || present) == Decision::Apply {
                        self.data.remove(key);
                        self.versions.record_delete(0, &[*key], stamp, 1);
                    }
                }
                Change::FlushDb => {
                    if self.versions.flush_is_new(Some(0), stamp) {
                        let survivors = self.versions.flush(Some(0), stamp);
                        self.data
                            .retain(|k, _| survivors.iter().any(|(_, s)| **s == [*k]));
                    }
                }
            }
        }
    }

    fn change() -> impl Strategy<Value = Change> {
        prop_oneof![
            6 => (0u8..6, any::<u32>()).prop_map(|(key, value)| Change::Write { key, value }),
            3 => (0u8..6).prop_map(|key| Change::Delete { key }),
            1 => Just(Change::FlushDb),
        ]
    }

    proptest! {
        /// Any two orders of the same entries converge to the same keyspace.
        #[test]
        fn any_interleaving_converges(
            changes in proptest::collection::vec((0u64..20, prop::bool::ANY, change()), 1..40),
            seed in any::<u64>(),
        ) {
            // Unique stamps: clock from the input, node A or B, position as tie-break.
            let entries: Vec<(Stamp, Change)> = changes
                .into_iter()
                .enumerate()
                .map(|(i, (clock, on_a, c))| {
                    (Stamp::new(clock * 64 + i as u64, if on_a { A } else { B }), c)
                })
                .collect();
            let mut shuffled = entries.clone();
            // A deterministic permutation from the seed.
            let mut x = seed | 1;
            for i in (1..shuffled.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                shuffled.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let mut one = Replica::default();
            let mut two = Replica::default();
            for (s, c) in &entries {
                one.apply(*s, c);
            }
            for (s, c) in &shuffled {
                two.apply(*s, c);
            }
            prop_assert_eq!(&one.data, &two.data);
            // And it is the state of the newest change per key.
            let mut reverse = Replica::default();
            for (s, c) in entries.iter().rev() {
                reverse.apply(*s, c);
            }
            prop_assert_eq!(&one.data, &reverse.data);
        }
    }
}
