//! Per-key versions and tombstones: the last-writer-wins rule.
//!
//! Every write is stamped `(hybrid clock, origin node)`; stamps are unique
//! and totally ordered. The store remembers the stamp of the last write (or
//! delete) of each key, and per database the stamp of the last flush (its
//! floor). A remote entry is applied only if its stamp is newer than both.
//! Deletes leave tombstones until the peer has acknowledged them, so a late
//! older write cannot bring a key back. Pure: no Redis calls here.

use hashbrown::HashMap;

use crate::converge::db_versions::DbVersions;
use crate::converge::key_table::KeyBytes;

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
    /// Records of the changes since the journal was last taken (`None`:
    /// not journaled); see `journal`.
    journal: Option<Vec<u8>>,
    /// Keys a load changed after their last stamp, per database: a data
    /// command in the AOF with no stamp record after it (the node went down
    /// in the event-loop iteration of the change), or a key the RDB marks
    /// as changed and not yet stamped. Dated by [`Self::date_unstamped`].
    unstamped: HashMap<u32, hashbrown::HashSet<KeyBytes>>,
    /// Flushes a load replayed without a stamp record after them
    /// (`Some(db)` FLUSHDB, `None` FLUSHALL), dated the same way.
    unstamped_flushes: Vec<Option<u32>>,
    /// SWAPDBs a load replayed whose stamp record has not followed yet:
    /// their versions moved at once (the record, when it comes, does not
    /// move them again).
    loaded_swaps: Vec<(u32, u32)>,
    /// Per origin node: every change of that node stamped at or below this
    /// clock has been applied here (or superseded). Advanced by the peer's
    /// acks (which say what its stream has covered), durable with the
    /// data: the watermark a restarted node asks the peer to sync from.
    covered: HashMap<u64, u64>,
    /// Per origin node: the newest stamp of a tombstone of that node's
    /// collected here. A peer that lost state may have lost that delete
    /// too, and a sync since a watermark would not ship it back (it is
    /// gone): below this, such a peer gets a full sync instead.
    collected: HashMap<u64, u64>,
    /// The newest of this node's tombstones dropped unacknowledged over
    /// `max-tombstones` (see [`Self::drop_oldest_own`]); the peer's next
    /// full sync sweeps below it (`converge::sweep`).
    dropped: Option<Stamp>,
    /// This node's own changes stamped in `(from, to]` that loads may have
    /// lost, until the peer's answering sync has brought them back:
    /// durable, so that a restart before that still asks for them.
    lost_own: Option<(u64, u64)>,
    /// The version of each function library (`converge::libraries`).
    libraries: crate::converge::libraries::Libraries,
    /// Counters with merge metadata and the merge bound (issue 27):
    /// journaled and persisted with the versions (`merge::journaled`).
    pub counters: crate::converge::merge::counters::Counters,
    /// Hashes, sets and sorted sets with merge metadata (issue 27,
    /// `merge-elements`).
    pub hashes: crate::converge::merge::hashes::Hashes,
    /// TTL writes newer than their key's version (`converge::ttl_ops`).
    pub ttls: crate::converge::ttl_ops::TtlOps,
    /// The versions of big strings this node shipped, which appends to them
    /// ship from (`converge::appends`; not journaled: without one a
    /// string ships whole).
    pub appends: crate::converge::appends::AppendBases,
    /// Flushes, swaps and replacements of whole databases so far: a read
    /// spread over several steps that sees it move read across one.
    db_changes: u64,
}

impl VersionStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store that journals its changes (the node's own).
    pub fn journaled() -> Self {
        let mut s = Self::default();
        s.start_journal();
        s
    }

    /// How many flushes, swaps and replacements of whole databases this
    /// store has seen (it only grows).
    pub fn db_changes(&self) -> u64 {
        self.db_changes
    }

    /// Journals the changes from now on.
    pub fn start_journal(&mut self) {
        self.journal.get_or_insert_with(Vec::new);
    }

    /// The records journaled since the last call (empty when none, or when
    /// the store is not journaled).
    pub fn take_journal(&mut self) -> Vec<u8> {
        self.journal
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Whether journaled records wait to be taken.
    pub fn journal_pending(&self) -> bool {
        self.journal.as_ref().is_some_and(|j| !j.is_empty())
    }

    /// Stops journaling (while a journal is replayed); hands back what
    /// [`Self::resume_journal`] needs.
    pub(crate) fn pause_journal(&mut self) -> Option<Vec<u8>> {
        self.journal.take()
    }

    /// Journals again as before [`Self::pause_journal`].
    pub(crate) fn resume_journal(&mut self, was: Option<Vec<u8>>) {
        self.journal = was;
    }

    /// Whether changes are journaled.
    pub(crate) fn journaling(&self) -> bool {
        self.journal.is_some()
    }

    pub(crate) fn journal_record(&mut self, tag: u8, db: u32, stamp: Stamp, key: &[u8]) {
        if let Some(out) = self.journal.as_mut() {
            crate::converge::journal::put_record(out, tag, db, stamp, key);
        }
    }

    /// The version of `key`, if any is known.
    pub fn get(&self, db: u32, key: &[u8]) -> Option<KeyVersion> {
        self.dbs.get(&db)?.get(key)
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
                map = self.dbs.get(&db);
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
        self.dbs.values().map(DbVersions::len).sum()
    }

    /// Whether no key has a version.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tombstones held (of keys and of function libraries).
    pub fn tombstones(&self) -> usize {
        self.tombstones + self.libraries.tombstones()
    }

    /// Tombstones of keys (those `max-tombstones` bounds).
    pub fn key_tombstones(&self) -> usize {
        self.tombstones
    }

    /// Whether the tombstone index holds mostly keys rewritten since (a
    /// collection pass compacts it, so it stays bounded by the tombstones).
    pub fn needs_compaction(&self) -> bool {
        self.tombstone_keys.len() > 2 * self.tombstones + 1024
    }

    fn set(&mut self, db: u32, key: &[u8], version: KeyVersion) {
        let (tag, stamp) = match version {
            KeyVersion::Live(s) => (crate::converge::journal::TAG_LIVE, s),
            KeyVersion::Deleted { stamp, .. } => (crate::converge::journal::TAG_TOMBSTONE, stamp),
        };
        self.journal_record(tag, db, stamp, key);
        self.ttls.versioned(db, key, stamp);
        if !self.unstamped.is_empty() {
            if let Some(pending) = self.unstamped.get_mut(&db) {
                pending.remove(key);
            }
        }
        let was_tombstone = self.dbs.entry(db).or_default().set(key, version);
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
                self.journal_record(crate::converge::journal::TAG_FORGET, db, Stamp::ZERO, key);
                if let Some(pending) = self.unstamped.get_mut(&db) {
                    pending.remove(key);
                }
                let removed = self.dbs.get_mut(&db).and_then(|d| d.remove(key));
                if let Some(KeyVersion::Deleted { .. }) = removed {
                    self.tombstones -= 1;
                }
            }
        }
    }

    /// Records a write of `key`'s TTL alone (`converge::ttl_ops`), newer
    /// than its version: journaled, the version stays.
    pub fn record_ttl(&mut self, db: u32, key: &[u8], write: crate::converge::ttl_ops::TtlWrite) {
        // The change a load replayed before this record is stamped by it.
        if let Some(pending) = self.unstamped.get_mut(&db) {
            pending.remove(key);
        }
        if self.get(db, key).is_some_and(|v| v.stamp() >= write.0) {
            return;
        }
        let record = crate::converge::journal::ttl_record(key, write.1);
        self.journal_record(crate::converge::journal::TAG_TTL, db, write.0, &record);
        self.ttls.write(db, key, write);
    }

    /// The TTL writes every node has applied rest, once the key's version
    /// did too (`bound` covers both: no value write older than the TTL
    /// write can still arrive from anywhere, this node's own unshipped ones
    /// included): each becomes its key's version when the key lives, so a
    /// catch-up since a watermark still ships the key.
    pub fn fold_ttl_writes(&mut self, bound: &crate::converge::merge::seen::Seen) {
        for (db, key, write) in self.ttls.take_at_rest(bound) {
            match self.get(db, &key) {
                Some(v) if !bound.covers(v.stamp()) => self.ttls.write(db, &key, write),
                Some(KeyVersion::Live(s)) if s < write.0 => self.record_write(db, &key, write.0),
                _ => {}
            }
        }
    }

    /// Records a delete of `key`: a tombstone, collectable after the peer
    /// acknowledges `gc_after` (0: not yet shipped, keep).
    pub fn record_delete(&mut self, db: u32, key: &[u8], stamp: Stamp, gc_after: u64) {
        self.set(db, key, KeyVersion::Deleted { stamp, gc_after });
    }

    /// A merge of the peer's state left `key` absent, at version `stamp`:
    /// a tombstone collectable at this node's next ack, as any delete
    /// applied from the peer, unless the key's tombstone here is this
    /// node's (`me`) own delete not yet acknowledged (not shipped, or
    /// waiting for the peer's ack of the entry that carried it). That
    /// one stays as it is, at its own stamp,
    /// however new what the peer sent: what the peer sent did not see it,
    /// and only the entry that ships it (its removal of what this node had
    /// applied) takes the key from the peer. Replaced, it went at this
    /// node's next ack, before anything shipped it, and the peer kept the
    /// key for good.
    pub fn record_merged_absent(&mut self, db: u32, key: &[u8], stamp: Stamp, me: u64) {
        match self.get(db, key) {
            Some(KeyVersion::Deleted {
                stamp: held,
                gc_after,
            }) if held.node == me && gc_after != GC_AT_NEXT_ACK => {}
            _ => self.record_delete(db, key, stamp, GC_AT_NEXT_ACK),
        }
    }

    /// The tombstone of `key` was shipped after `acked` and may be lost: it
    /// must not be collected before it is shipped again.
    pub fn unship(&mut self, db: u32, key: &[u8], acked: u64) {
        if let Some(d) = self.dbs.get_mut(&db) {
            d.update_tombstone(key, |_, gc_after| {
                if *gc_after > acked && *gc_after != GC_AT_NEXT_ACK {
                    *gc_after = 0;
                }
            });
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
        if let Some(d) = self.dbs.get_mut(&db) {
            d.update_tombstone(key, |current, gc_after| {
                if current == stamp {
                    *gc_after = seq;
                }
            });
        }
    }

    /// The key expired (or was evicted) locally: not a new write. Its last
    /// stamp becomes a tombstone, collectable after `gc_after`.
    pub fn expired(&mut self, db: u32, key: &[u8], gc_after: u64) {
        if let Some(KeyVersion::Live(stamp)) = self.get(db, key) {
            self.record_delete(db, key, stamp, gc_after.max(1));
        }
        if self.counters.forget(db, key) {
            self.journal_counter(db, key);
        }
        if self.hashes.forget(db, key) {
            self.journal_hashes();
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
        match db {
            Some(d) => self.journal_record(crate::converge::journal::TAG_FLUSH_DB, d, stamp, &[]),
            None => self.journal_record(crate::converge::journal::TAG_FLUSH_ALL, 0, stamp, &[]),
        }
        self.db_changes += 1;
        self.raise_floor(db, stamp);
        self.counters.flushed(db, stamp);
        self.hashes.flushed(db);
        self.ttls.flushed(db, stamp);
        self.appends.clear();
        self.forget_unstamped_before_flush(db);
        // This flush's own stamp arrived: it is no longer pending.
        match db {
            Some(d) => self.unstamped_flushes.retain(|f| *f != Some(d)),
            None => self.unstamped_flushes.clear(),
        }
        let mut survivors = Vec::new();
        let mut removed_tombstones = 0;
        for (&d, dbv) in self.dbs.iter_mut() {
            if db.is_some_and(|f| f != d) {
                continue;
            }
            // Gives the memory back as it goes (`KeyTable::retain`).
            dbv.retain(|key, v| {
                let keep = v.stamp() > stamp;
                let tombstone = matches!(v, KeyVersion::Deleted { .. });
                if keep && !tombstone {
                    survivors.push((d, Box::from(key)));
                } else if !keep && tombstone {
                    removed_tombstones += 1;
                }
                keep
            });
        }
        self.tombstones -= removed_tombstones;
        survivors
    }

    /// `SWAPDB a b`: the versions move with the data.
    pub fn swap(&mut self, a: u32, b: u32) {
        self.journal_record(
            crate::converge::journal::TAG_SWAP,
            a,
            Stamp::ZERO,
            &b.to_le_bytes(),
        );
        self.db_changes += 1;
        self.counters.swap_dbs(a, b);
        self.hashes.swap_dbs(a, b);
        self.ttls.swap_dbs(a, b);
        self.appends.swap_dbs(a, b);
        let va = self.dbs.remove(&a);
        let vb = self.dbs.remove(&b);
        if let Some(v) = va {
            self.dbs.insert(b, v);
        }
        if let Some(v) = vb {
            self.dbs.insert(a, v);
        }
        let ua = self.unstamped.remove(&a);
        let ub = self.unstamped.remove(&b);
        if let Some(u) = ua {
            self.unstamped.insert(b, u);
        }
        if let Some(u) = ub {
            self.unstamped.insert(a, u);
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
        let mut newest_collected = Vec::new();
        let dbs = &mut self.dbs;
        // Journaled, so that the AOF and replicas drop them too.
        let journal = &mut self.journal;
        self.tombstone_keys.retain(|(db, key)| {
            let Some(keys) = dbs.get_mut(db) else {
                return false;
            };
            match keys.get(&key[..]) {
                Some(KeyVersion::Deleted { gc_after, stamp }) => {
                    let ours = gc_after != GC_AT_NEXT_ACK && gc_after <= acked;
                    let theirs = gc_after == GC_AT_NEXT_ACK && acked_remote;
                    if gc_after != 0 && (ours || theirs) {
                        keys.remove(&key[..]);
                        newest_collected.push(stamp);
                        if let Some(out) = journal.as_mut() {
                            let tag = crate::converge::journal::TAG_FORGET;
                            crate::converge::journal::put_record(out, tag, *db, Stamp::ZERO, key);
                        }
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
        for (name, stamp) in self.libraries.collectable(acked, acked_remote) {
            self.forget_library(&name);
            newest_collected.push(stamp);
            collected += 1;
        }
        for stamp in newest_collected {
            self.record_collected(stamp);
        }
        collected
    }

    /// A tombstone stamped `stamp` was collected: raises the newest
    /// collected of its node (journaled when it rises).
    pub fn record_collected(&mut self, stamp: Stamp) {
        let newest = self.collected.entry(stamp.node).or_default();
        if stamp.clock > *newest {
            *newest = stamp.clock;
            self.journal_record(crate::converge::journal::TAG_COLLECTED, 0, stamp, &[]);
        }
    }

    /// Drops the oldest tombstones of `me`'s deletes not yet collected
    /// until at most `limit` tombstones remain (the peer is away and has
    /// not acknowledged them): journaled as forgotten, each counted as
    /// collected (a sync since a watermark could not ship it) and the
    /// newest kept as the dropped floor. Returns how many went.
    pub fn drop_oldest_own(&mut self, me: u64, limit: usize) -> usize {
        let mut over = self.tombstones.saturating_sub(limit);
        if over == 0 {
            return 0;
        }
        let mut dropped = Vec::new();
        let dbs = &mut self.dbs;
        let journal = &mut self.journal;
        self.tombstone_keys.retain(|(db, key)| {
            if over == 0 {
                return true;
            }
            let Some(keys) = dbs.get_mut(db) else {
                return false;
            };
            match keys.get(&key[..]) {
                Some(KeyVersion::Deleted { stamp, .. }) if stamp.node == me => {
                    keys.remove(&key[..]);
                    if let Some(out) = journal.as_mut() {
                        let tag = crate::converge::journal::TAG_FORGET;
                        crate::converge::journal::put_record(out, tag, *db, Stamp::ZERO, key);
                    }
                    dropped.push(stamp);
                    over -= 1;
                    false
                }
                Some(KeyVersion::Deleted { .. }) => true,
                _ => false,
            }
        });
        self.tombstones -= dropped.len();
        for &stamp in &dropped {
            self.record_collected(stamp);
        }
        if let Some(&newest) = dropped.iter().max() {
            self.record_dropped(newest);
        }
        dropped.len()
    }

    /// Raises the dropped floor to `stamp` (journaled when it rises).
    pub fn record_dropped(&mut self, stamp: Stamp) {
        if self.dropped.is_none_or(|d| stamp > d) {
            self.dropped = Some(stamp);
            self.journal_record(crate::converge::journal::TAG_DROPPED, 0, stamp, &[]);
        }
    }

    /// Loads lost this node's own changes stamped in `(from, to]` (a
    /// window already open widens; journaled when it changes).
    pub fn record_lost_own(&mut self, from: u64, to: u64) {
        let window = match self.lost_own {
            Some((f, t)) => (f.min(from), t.max(to)),
            None => (from, to),
        };
        if self.lost_own != Some(window) {
            self.lost_own = Some(window);
            let (from, to) = window;
            let to = to.to_le_bytes();
            self.journal_record(
                crate::converge::journal::TAG_LOST_OWN,
                0,
                Stamp::new(from, 0),
                &to,
            );
        }
    }

    /// The peer sent back what loads lost of this node's own changes
    /// (journaled when a window was open).
    pub fn close_lost_own(&mut self) {
        if self.lost_own.take().is_some() {
            self.journal_record(
                crate::converge::journal::TAG_LOST_OWN_CLOSED,
                0,
                Stamp::ZERO,
                &[],
            );
        }
    }

    /// The window of own changes loads lost, `(from, to]`, if one is open.
    pub fn lost_own(&self) -> Option<(u64, u64)> {
        self.lost_own
    }

    /// The newest own tombstone dropped over the bound (`None`: none).
    pub fn dropped(&self) -> Option<Stamp> {
        self.dropped
    }

    /// The versions of the function libraries.
    pub fn libraries(&self) -> &crate::converge::libraries::Libraries {
        &self.libraries
    }

    /// Records library `name` as written at `stamp` with code of CRC64
    /// `crc` (`Some`), or deleted then (`None`, collectable after
    /// `gc_after`); journaled.
    pub fn record_library(&mut self, name: &[u8], stamp: Stamp, crc: Option<u64>, gc_after: u64) {
        use crate::converge::journal::{TAG_LIBRARY, TAG_LIBRARY_DELETED};
        use crate::converge::libraries::LibraryVersion;
        let version = match crc {
            Some(crc) => {
                let mut key = crc.to_le_bytes().to_vec();
                key.extend_from_slice(name);
                self.journal_record(TAG_LIBRARY, 0, stamp, &key);
                LibraryVersion::Live { stamp, crc }
            }
            None => {
                self.journal_record(TAG_LIBRARY_DELETED, 0, stamp, name);
                LibraryVersion::Deleted { stamp, gc_after }
            }
        };
        self.libraries.set(name, version);
    }

    /// The delete of library `name` stamped `stamp` went out as `seq`.
    pub fn mark_library_shipped(&mut self, name: &[u8], stamp: Stamp, seq: u64) {
        self.libraries.mark_shipped(name, stamp, seq);
    }

    /// The delete of library `name` went out after `acked` and may be
    /// lost: kept until shipped again.
    pub fn unship_library(&mut self, name: &[u8], acked: u64) {
        self.libraries.unship(name, acked);
    }

    /// Forgets library `name`'s version (journaled).
    pub(crate) fn forget_library(&mut self, name: &[u8]) {
        let tag = crate::converge::journal::TAG_LIBRARY_FORGET;
        self.journal_record(tag, 0, Stamp::ZERO, name);
        self.libraries.forget(name);
    }

    /// Whether a tombstone of `node` stamped after `clock` was collected
    /// here (see `collected`).
    pub fn collected_after(&self, node: u64, clock: u64) -> bool {
        self.collected.get(&node).is_some_and(|&c| c > clock)
    }

    /// The newest collected tombstone per node, for persistence.
    pub(crate) fn collected_marks(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.collected.iter().map(|(&o, &c)| (o, c))
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

    /// The newest clock in the store (to restart the clock past it). The
    /// merge bound counts too: a change dated at or below it would be
    /// taken by the peer for one it had applied (its keys may all be
    /// collected).
    pub fn newest_clock(&self) -> u64 {
        let keys = self.dbs.values().flat_map(|d| {
            d.iter()
                .map(|(_, v)| v.stamp().clock)
                .chain([d.floor.clock])
        });
        let libraries = self.libraries.iter().map(|(_, v)| v.stamp().clock);
        let ttls = self.ttls.iter().map(|(_, _, (s, _))| s.clock);
        let bound = self.counters.folded().iter().map(|(_, clock)| clock);
        keys.chain([self.floor_all.clock])
            .chain(ttls)
            .chain(libraries)
            .chain(bound)
            .max()
            .unwrap_or(0)
    }

    fn forget_unstamped_before_flush(&mut self, db: Option<u32>) {
        match db {
            Some(d) => {
                self.unstamped.remove(&d);
            }
            None => self.unstamped.clear(),
        }
    }

    /// A load replayed a FLUSHDB (`Some(db)`) or FLUSHALL (`None`) whose
    /// stamp record, if the node wrote one, comes after it: the keys changed
    /// before it are gone, and it is dated like them if no stamp follows.
    pub fn flushed_unstamped(&mut self, db: Option<u32>) {
        self.forget_unstamped_before_flush(db);
        if db.is_none() {
            self.unstamped_flushes.clear();
        }
        self.unstamped_flushes.push(db);
    }

    /// A load replayed `SWAPDB a b`: the versions (and the changes not yet
    /// stamped) move with the data now, not journaled.
    pub fn swapped_while_loading(&mut self, a: u32, b: u32) {
        let was = self.pause_journal();
        self.swap(a, b);
        self.resume_journal(was);
        self.loaded_swaps.push((a, b));
    }

    /// A journaled `SWAPDB a b` is replayed: moves the versions, unless the
    /// load already did when it replayed that SWAPDB.
    pub fn replayed_swap(&mut self, a: u32, b: u32) {
        let same = |&(x, y): &(u32, u32)| (x, y) == (a, b) || (x, y) == (b, a);
        match self.loaded_swaps.first() {
            Some(first) if same(first) => {
                self.loaded_swaps.remove(0);
            }
            _ => self.swap(a, b),
        }
    }

    /// Every change of `origin` stamped at or below `clock` is held here
    /// (the peer's stream said so and it was applied): raises that
    /// watermark, journaled.
    pub fn record_covered(&mut self, origin: u64, clock: u64) {
        let held = self.covered.entry(origin).or_default();
        if clock > *held {
            *held = clock;
            self.journal_record(
                crate::converge::journal::TAG_COVERED,
                0,
                Stamp::new(clock, origin),
                &[],
            );
        }
    }

    /// The watermark of `origin` (0: nothing known).
    pub fn covered(&self, origin: u64) -> u64 {
        self.covered.get(&origin).copied().unwrap_or(0)
    }

    /// Every watermark, for persistence.
    pub(crate) fn watermarks(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.covered.iter().map(|(&o, &c)| (o, c))
    }

    /// Live keys with a version (keys without one are data from elsewhere).
    pub fn live_len(&self) -> usize {
        self.len() - self.tombstones
    }

    /// The keys (live and deleted) whose version is a change of one of
    /// `after`'s nodes stamped after its clock, by database: what a peer
    /// that holds those nodes' changes up to those clocks misses.
    pub fn keys_changed_after(&self, after: &[(u64, u64)]) -> Vec<(u32, Box<[u8]>)> {
        let wanted = |s: Stamp| {
            after
                .iter()
                .any(|&(node, clock)| s.node == node && s.clock > clock)
        };
        let mut out: Vec<(u32, Box<[u8]>)> = self
            .records()
            .filter(|(db, key, v)| {
                wanted(v.stamp())
                    || self.counters.changed_after(*db, key, wanted)
                    || self.hashes.changed_after(*db, key, wanted)
            })
            .map(|(db, key, _)| (db, Box::from(key)))
            .collect();
        if !self.ttls.is_empty() {
            out.extend(self.ttls.changed(wanted));
            out.sort_unstable();
            out.dedup();
        }
        out.sort_unstable_by_key(|(db, _)| *db);
        out
    }

    /// The newest stamp of `node`'s changes in the store (versions and
    /// floors; 0: none).
    pub fn newest_of(&self, node: u64) -> u64 {
        let floors = self.floors().into_iter().map(|(_, s)| s);
        let libraries = self.libraries.iter().map(|(_, v)| v.stamp());
        let ttls = self.ttls.iter().map(|(_, _, (s, _))| s);
        self.records()
            .map(|(_, _, v)| v.stamp())
            .chain(ttls)
            .chain(floors)
            .chain(libraries)
            .filter(|s| s.node == node)
            .map(|s| s.clock)
            .max()
            .unwrap_or(0)
    }

    /// A load changed `key` after its last stamp (see `unstamped`).
    pub fn changed_unstamped(&mut self, db: u32, key: &[u8]) {
        let pending = self.unstamped.entry(db).or_default();
        if !pending.contains(key) {
            pending.insert(key.into());
        }
    }

    /// Keys changed by a load after their last stamp.
    pub fn unstamped_len(&self) -> usize {
        self.unstamped
            .values()
            .map(hashbrown::HashSet::len)
            .sum::<usize>()
            + self.unstamped_flushes.len()
            + self.loaded_swaps.len()
    }

    /// The keys a load changed after their last stamp, to date (see
    /// [`Self::date_unstamped`]).
    pub fn unstamped_keys(&self) -> Vec<(u32, Vec<u8>)> {
        self.unstamped
            .iter()
            .flat_map(|(&db, keys)| keys.iter().map(move |k| (db, k.to_vec())))
            .collect()
    }

    /// Gives the keys a load changed after their last stamp a version just
    /// after the newest stamp loaded (the change happened after every stamp
    /// the file recorded before it, and never reached the peer, whose copy
    /// is at most that old unless the peer wrote the key since): live if
    /// `exists(db, key)`, else a tombstone. Returns how many, and the stamp.
    pub fn date_unstamped(
        &mut self,
        me: u64,
        mut exists: impl FnMut(u32, &[u8]) -> bool,
    ) -> (usize, Stamp) {
        let newest = self.newest_clock();
        let mut n = 0;
        // The keys changed after the flushes (those changed before them
        // went with them when the load recorded the flush).
        let pending = std::mem::take(&mut self.unstamped);
        // Flushes first, just after the newest stamp: they removed every
        // version recorded before them; the keys come next.
        for db in std::mem::take(&mut self.unstamped_flushes) {
            self.flush(db, Stamp::new(newest + 1, me));
            n += 1;
        }
        let stamp = Stamp::new(newest + 2, me);
        // Swaps the load moved without their record: the record now.
        for (a, b) in std::mem::take(&mut self.loaded_swaps) {
            self.journal_record(
                crate::converge::journal::TAG_SWAP,
                a,
                Stamp::ZERO,
                &b.to_le_bytes(),
            );
        }
        for (db, keys) in pending {
            for key in keys {
                if exists(db, &key) {
                    self.record_write(db, &key, stamp);
                } else {
                    self.record_delete(db, &key, stamp, 0);
                }
                n += 1;
            }
        }
        (n, stamp)
    }

    /// Forgets everything (the dataset was replaced wholesale); a
    /// journaled store stays journaled, with nothing pending.
    pub fn clear(&mut self) {
        let journaled = self.journal.is_some();
        let db_changes = self.db_changes + 1;
        *self = Self::default();
        self.db_changes = db_changes;
        if journaled {
            self.start_journal();
        }
    }

    /// Every record, for persistence: `(db, key, version)` and floors.
    pub(crate) fn records(&self) -> impl Iterator<Item = (u32, &[u8], KeyVersion)> {
        self.dbs
            .iter()
            .flat_map(|(&db, d)| d.iter().map(move |(k, v)| (db, k, v)))
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
    fn the_highest_merge_bound_counts_in_the_newest_clock() {
        let mut s = VersionStore::new();
        s.record_write(0, b"k", Stamp::new(100, 1));
        s.counters.raise_bound(1, 250);
        assert_eq!(s.newest_clock(), 250, "past what the peer applied of ours");
        s.counters.set_bound(1, 50);
        assert_eq!(s.newest_clock(), 250, "past what it ever applied");
    }

    #[test]
    fn a_held_ttl_write_counts_in_the_newest_clock() {
        let mut s = VersionStore::new();
        s.record_write(0, b"k", Stamp::new(100, 1));
        s.record_ttl(0, b"k", (Stamp::new(200, 1), Some(5)));
        assert_eq!(s.newest_clock(), 200, "a load dates unstamped keys past it");
        assert_eq!(s.newest_of(1), 200);
        s.record_write(0, b"k", Stamp::new(300, 2));
        assert!(s.ttls.is_empty(), "a newer value write supersedes it");
    }

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
    fn over_the_bound_the_oldest_own_tombstones_go_and_the_floor_rises() {
        let mut s = VersionStore::journaled();
        s.record_delete(0, b"theirs", Stamp::new(1, B), GC_AT_NEXT_ACK);
        for i in 0..10u64 {
            s.record_delete(0, format!("k{i}").as_bytes(), Stamp::new(10 + i, A), 0);
        }
        assert_eq!(s.drop_oldest_own(A, 11), 0);
        assert_eq!(s.dropped(), None);
        assert_eq!(s.drop_oldest_own(A, 4), 7);
        assert_eq!(s.tombstones(), 4);
        assert!(s.get(0, b"theirs").is_some(), "only this node's own");
        assert_eq!(s.get(0, b"k6"), None);
        assert!(s.get(0, b"k7").is_some(), "the newest stay");
        assert_eq!(s.dropped(), Some(Stamp::new(16, A)));
        assert!(s.collected_after(A, 15) && !s.collected_after(A, 16));
        // Durable: the journal carries the drops and the floor.
        let mut replay = VersionStore::new();
        let mut journal = vec![crate::converge::journal::FORMAT];
        journal.extend(s.take_journal());
        assert!(crate::converge::journal::replay(&journal, &mut replay).is_ok());
        assert_eq!(replay.dropped(), Some(Stamp::new(16, A)));
        assert_eq!(replay.get(0, b"k0"), None);
    }

    #[test]
    fn the_window_of_lost_own_changes_widens_and_is_journaled() {
        let mut s = VersionStore::journaled();
        s.record_lost_own(100, 200);
        s.record_lost_own(150, 300);
        assert_eq!(s.lost_own(), Some((100, 300)));
        let mut journal = vec![crate::converge::journal::FORMAT];
        journal.extend(s.take_journal());
        let mut replay = VersionStore::new();
        assert!(crate::converge::journal::replay(&journal, &mut replay).is_ok());
        assert_eq!(replay.lost_own(), Some((100, 300)));
        s.close_lost_own();
        journal.extend(s.take_journal());
        let mut replay = VersionStore::new();
        assert!(crate::converge::journal::replay(&journal, &mut replay).is_ok());
        assert_eq!(replay.lost_own(), None);
        // Closing a closed window writes nothing.
        s.close_lost_own();
        assert!(s.take_journal().is_empty());
    }

    #[test]
    fn remote_tombstones_go_at_the_next_ack() {
        let mut s = VersionStore::new();
        s.record_delete(0, b"k", Stamp::new(10, B), GC_AT_NEXT_ACK);
        assert_eq!(s.collect(u64::MAX - 1, false), 0);
        assert_eq!(s.collect(0, true), 1);
    }

    #[test]
    fn an_own_unacknowledged_delete_outlives_a_state_merged_into_it() {
        let mut s = VersionStore::new();
        s.record_delete(0, b"k", Stamp::new(10, A), 0);
        // The peer's older state of the key, merged: the key stays absent.
        s.record_merged_absent(0, b"k", Stamp::new(10, A), A);
        assert_eq!(s.collect(u64::MAX - 1, true), 0, "not shipped yet");
        // A newer one that had not seen the delete: the delete stays ours.
        s.record_merged_absent(0, b"k", Stamp::new(12, B), A);
        assert_eq!(
            s.get(0, b"k").map(KeyVersion::stamp),
            Some(Stamp::new(10, A))
        );
        assert_eq!(s.collect(u64::MAX - 1, true), 0, "still not shipped");
        s.mark_shipped(0, b"k", Stamp::new(10, A), 5);
        s.record_merged_absent(0, b"k", Stamp::new(13, B), A);
        assert_eq!(s.collect(4, true), 0);
        assert_eq!(s.collect(5, false), 1, "once the peer acked it");
        // The peer's delete: it goes at the next ack.
        s.record_delete(0, b"j", Stamp::new(10, B), GC_AT_NEXT_ACK);
        s.record_merged_absent(0, b"j", Stamp::new(12, B), A);
        assert_eq!(
            s.get(0, b"j").map(KeyVersion::stamp),
            Some(Stamp::new(12, B))
        );
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
        assert!(s.dbs[&0].capacity() >= 10_000);
        s.flush(Some(0), Stamp::new(2, A));
        assert!(s.dbs[&0].capacity() < 100, "{}", s.dbs[&0].capacity());
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
    fn changes_a_load_left_unstamped_are_dated_after_the_newest_stamp() {
        let mut s = VersionStore::new();
        s.record_write(0, b"k", Stamp::new(40, B));
        s.record_write(0, b"stamped", Stamp::new(5, A));
        s.changed_unstamped(0, b"k");
        s.changed_unstamped(0, b"stamped");
        s.changed_unstamped(1, b"gone");
        s.changed_unstamped(2, b"flushed");
        s.changed_unstamped(3, b"moved");
        // A later stamp record (the AOF's next one) dates a key for real.
        s.record_write(0, b"stamped", Stamp::new(6, A));
        s.flush(Some(2), Stamp::new(7, A));
        s.swap(3, 4);
        assert_eq!(s.unstamped_len(), 3);
        let (n, stamp) = s.date_unstamped(A, |_, key| key != b"gone");
        assert_eq!((n, stamp), (3, Stamp::new(42, A)));
        assert_eq!(s.get(0, b"k"), Some(KeyVersion::Live(Stamp::new(42, A))));
        assert_eq!(
            s.get(4, b"moved"),
            Some(KeyVersion::Live(Stamp::new(42, A)))
        );
        assert_eq!(
            s.get(0, b"stamped"),
            Some(KeyVersion::Live(Stamp::new(6, A)))
        );
        assert!(matches!(
            s.get(1, b"gone"),
            Some(KeyVersion::Deleted { .. })
        ));
        assert_eq!(s.get(2, b"flushed"), None);
        assert_eq!(s.unstamped_len(), 0);
    }

    #[test]
    fn a_flush_a_load_left_unstamped_is_dated_before_the_keys_written_after_it() {
        let mut s = VersionStore::new();
        s.record_write(0, b"old", Stamp::new(30, B));
        s.record_write(1, b"other-db", Stamp::new(31, A));
        s.changed_unstamped(0, b"before-the-flush");
        s.flushed_unstamped(Some(0));
        s.changed_unstamped(0, b"after-the-flush");
        // Another flush whose stamp record did follow.
        s.flushed_unstamped(Some(1));
        s.flush(Some(1), Stamp::new(32, A));
        assert_eq!(s.unstamped_len(), 2);
        let (n, stamp) = s.date_unstamped(A, |_, _| true);
        assert_eq!((n, stamp), (2, Stamp::new(34, A)));
        assert_eq!(s.floor(0), Stamp::new(33, A));
        assert_eq!(s.get(0, b"old"), None);
        assert_eq!(s.get(0, b"before-the-flush"), None);
        assert_eq!(s.get(0, b"after-the-flush"), Some(KeyVersion::Live(stamp)));
        assert_eq!(s.floor(1), Stamp::new(32, A));
    }

    #[test]
    fn watermarks_only_rise_and_own_keys_since_lists_what_a_peer_misses() {
        let mut s = VersionStore::journaled();
        s.record_covered(B, 50);
        s.record_covered(B, 40);
        assert_eq!(s.covered(B), 50);
        assert_eq!(s.covered(A), 0);
        s.record_write(0, b"old", Stamp::new(10, A));
        s.record_write(2, b"new", Stamp::new(60, A));
        s.record_delete(1, b"gone", Stamp::new(70, A), 0);
        s.record_write(0, b"theirs", Stamp::new(80, B));
        assert_eq!(
            s.keys_changed_after(&[(A, 50)]),
            vec![(1, b"gone"[..].into()), (2, b"new"[..].into())]
        );
        assert_eq!(s.keys_changed_after(&[(A, 65), (B, 70)]).len(), 2);
        assert_eq!(s.newest_of(A), 70);
        assert_eq!(s.newest_of(B), 80);
        assert_eq!(s.live_len(), 3);
        let mut back = VersionStore::new();
        crate::converge::journal::replay(
            &[&[crate::converge::journal::FORMAT][..], &s.take_journal()].concat(),
            &mut back,
        )
        .unwrap();
        assert_eq!(back.covered(B), 50);
    }

    #[test]
    fn a_swap_a_load_replays_moves_versions_once() {
        let mut s = VersionStore::journaled();
        s.record_write(0, b"a", Stamp::new(1, A));
        s.take_journal();
        s.swapped_while_loading(0, 1);
        assert!(s.take_journal().is_empty());
        assert_eq!(s.get(1, b"a"), Some(KeyVersion::Live(Stamp::new(1, A))));
        // Its record follows: nothing moves again.
        s.replayed_swap(0, 1);
        assert_eq!(s.get(1, b"a"), Some(KeyVersion::Live(Stamp::new(1, A))));
        // One without a record: journaled when the load ends.
        s.swapped_while_loading(1, 2);
        assert_eq!(s.unstamped_len(), 1);
        s.date_unstamped(A, |_, _| true);
        assert_eq!(s.get(2, b"a"), Some(KeyVersion::Live(Stamp::new(1, A))));
        let mut replayed = VersionStore::new();
        replayed.record_write(1, b"a", Stamp::new(1, A));
        let payload = [&[crate::converge::journal::FORMAT][..], &s.take_journal()].concat();
        crate::converge::journal::replay(&payload, &mut replayed).unwrap();
        assert_eq!(
            replayed.get(2, b"a"),
            Some(KeyVersion::Live(Stamp::new(1, A)))
        );
    }

    #[test]
    fn collected_tombstones_are_remembered_by_their_newest_stamp() {
        let mut s = VersionStore::journaled();
        s.record_delete(0, b"a", Stamp::new(10, A), 3);
        s.record_delete(0, b"b", Stamp::new(30, A), 4);
        s.record_delete(0, b"c", Stamp::new(20, B), GC_AT_NEXT_ACK);
        assert!(!s.collected_after(A, 0));
        s.collect(3, true);
        assert!(s.collected_after(A, 9) && !s.collected_after(A, 10));
        assert!(s.collected_after(B, 19));
        s.collect(4, false);
        assert!(s.collected_after(A, 29));
        let mut back = VersionStore::new();
        let payload = [&[crate::converge::journal::FORMAT][..], &s.take_journal()].concat();
        crate::converge::journal::replay(&payload, &mut back).unwrap();
        assert!(back.collected_after(A, 29) && back.collected_after(B, 19));
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
