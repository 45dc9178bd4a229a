//! A full sync: the whole local state streamed to the peer in slices, so
//! that Redis keeps serving clients in between. First the flush floors,
//! then every key of every database (`RM_Scan`), then every tombstone; each
//! carries its version, and the peer applies them by the usual rule, so
//! writes that run meanwhile (shipped as usual) cannot be undone by it.
//!
//! A sync *since* a watermark ships only this node's own changes stamped
//! after it (floors, keys and tombstones, found in the version store): what
//! a peer that holds everything of ours up to the watermark misses.

use std::collections::VecDeque;
use std::time::Instant;

use crate::catchup::big_read::{BigRead, BigStep};
use crate::catchup::state_slices::{StateSlices, StateStep};
use crate::converge::sweep::SweepFloors;
use crate::converge::version::{KeyVersion, Stamp, VersionStore};
use crate::proto::entry::Op;
use crate::redis::server;
use crate::redis::snapshot::{Read, Reader};

/// Keys asked of one SCAN call.
const SCAN_COUNT: usize = 256;

/// Where the walk over one database's keys stands: through the key API
/// (no command runs), or by SCAN commands on a server without it.
#[derive(Debug)]
enum KeyWalk {
    Api(server::KeyScan),
    Command { cursor: u64, done: bool },
}

impl KeyWalk {
    fn start() -> Self {
        match server::KeyScan::new() {
            Some(scan) => KeyWalk::Api(scan),
            None => KeyWalk::Command {
                cursor: 0,
                done: false,
            },
        }
    }

    /// The next page of key names of the database selected on `reader`
    /// (`None`: the walk failed and ends).
    fn next_page(&mut self, reader: &Reader) -> Option<Vec<Vec<u8>>> {
        Some(match self {
            KeyWalk::Api(scan) => scan.next_page(reader.ctx(), SCAN_COUNT),
            KeyWalk::Command { cursor, done } => {
                let Some((next, keys)) = reader.scan(*cursor, SCAN_COUNT) else {
                    // The rest of this database is not walked.
                    *done = true;
                    return None;
                };
                (*cursor, *done) = (next, next == 0);
                keys
            }
        })
    }

    fn is_done(&self) -> bool {
        match self {
            KeyWalk::Api(scan) => scan.is_done(),
            KeyWalk::Command { done, .. } => *done,
        }
    }
}

/// One change to ship: database, version, operation.
pub type Shipment = (u32, Stamp, Op);

#[derive(Debug)]
enum Phase {
    Floors,
    Keys {
        db: u32,
        walk: KeyWalk,
    },
    /// Position in the tombstone index (collection waits while a full sync runs).
    Tombstones {
        next: usize,
    },
    /// A sweeping sync's end mark.
    SweepEnd,
    /// A sync since a watermark: the position in `FullSync::owned`.
    Owned {
        next: usize,
    },
    Done,
}

/// Progress of one full sync.
#[derive(Debug)]
pub struct FullSync {
    phase: Phase,
    databases: u32,
    /// Keys and tombstones shipped so far.
    pub sent: u64,
    /// Sequence number of the last entry it pushed (0: none yet).
    pub last_seq: u64,
    /// When it started.
    pub started: Instant,
    /// Keys found but not read (a read error), with the version they ship
    /// at, to read again later.
    unread: Vec<(u32, Vec<u8>, Stamp)>,
    /// `Some((since, own))`: a sync since a watermark (this node's changes
    /// stamped after `since`, the peer's after `own`), not a full one.
    since: Option<(u64, u64)>,
    /// This node and its peer (whose own changes it may ship back).
    me: u64,
    peer: u64,
    /// For a sync since a watermark: this node's keys changed after it, by
    /// database (their versions are looked up again when shipped).
    owned: Vec<(u32, Box<[u8]>)>,
    /// A full sync that sweeps: what it vouches for (see `converge::sweep`).
    sweep: Option<SweepFloors>,
    /// A key it found could not be read (it ships later, after the end
    /// mark): the sweep must not run.
    missed: bool,
    /// Big values of the current page, read a slice per step.
    big: VecDeque<(u32, Vec<u8>)>,
    /// The big value being read.
    reading: Option<BigRead>,
    /// Big values shipped, and their reads started again, since the
    /// caller last took the counts.
    sliced: (u64, u64),
    /// Keys of the current page whose big merge state may ship a slice
    /// per step (see `state_slices`).
    states: VecDeque<(u32, Vec<u8>)>,
    /// The state being shipped.
    slicing: Option<StateSlices>,
}

impl FullSync {
    /// A full sync of `databases` databases, not started.
    pub fn new(databases: u32) -> Self {
        Self {
            phase: Phase::Floors,
            databases: databases.max(1),
            sent: 0,
            last_seq: 0,
            started: Instant::now(),
            unread: Vec::new(),
            since: None,
            me: 0,
            peer: 0,
            owned: Vec::new(),
            sweep: None,
            missed: false,
            big: VecDeque::new(),
            reading: None,
            sliced: (0, 0),
            states: VecDeque::new(),
            slicing: None,
        }
    }

    /// This full sync sweeps (`Some`): it starts with a mark carrying the
    /// floors and ends with one, after which the peer deletes what they
    /// vouch for and the sync did not carry.
    pub fn sweeping(mut self, floors: Option<SweepFloors>) -> Self {
        self.sweep = floors;
        self
    }

    /// Keys of this node wait to be read again (they ship after the end
    /// mark): the sweep must not run.
    pub fn missed_elsewhere(&mut self) {
        self.missed = true;
    }

    /// A sync of what a peer misses that holds this node's (`me`) changes
    /// up to `since` and its own up to `own`: the floors, keys and
    /// tombstones whose version is a change of ours after `since` or of
    /// the peer's after `own` (lost in its restart, held here), as the
    /// store lists them now.
    pub fn since_watermark(
        versions: &VersionStore,
        me: u64,
        peer: u64,
        since: u64,
        own: u64,
    ) -> Self {
        let mut sync = Self::new(1);
        sync.since = Some((since, own));
        sync.me = me;
        sync.peer = peer;
        sync.owned = versions.keys_changed_after(&[(me, since), (peer, own)]);
        sync
    }

    /// The watermarks of a sync since one, `(since, own)` (`None`: a full sync).
    pub fn since(&self) -> Option<(u64, u64)> {
        self.since
    }

    /// Whether a sync since a watermark ships a change stamped `s`.
    fn wanted(&self, s: Stamp) -> bool {
        match self.since {
            None => true,
            Some((since, own)) => {
                (s.node == self.me && s.clock > since) || (s.node == self.peer && s.clock > own)
            }
        }
    }

    /// Whether everything has been handed out.
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
            && self.big.is_empty()
            && self.reading.is_none()
            && self.states.is_empty()
            && self.slicing.is_none()
    }

    /// Big values shipped and reads of them started again since the last
    /// call.
    pub fn take_sliced_counts(&mut self) -> (u64, u64) {
        std::mem::take(&mut self.sliced)
    }

    /// Keys the last steps found but could not read (none is shipped as
    /// deleted: the caller has them read again).
    pub fn take_unread(&mut self) -> Vec<(u32, Vec<u8>, Stamp)> {
        std::mem::take(&mut self.unread)
    }

    /// The next slice: at least one SCAN page (or the floors, or up to
    /// `max` tombstones). Leaves the selected database as it found it.
    pub fn step(
        &mut self,
        reader: &Reader,
        versions: &VersionStore,
        me: u64,
        max: usize,
    ) -> Vec<Shipment> {
        let mut out = Vec::new();
        if !self.states.is_empty() || self.slicing.is_some() {
            // Big merge states found by the last steps: a slice per step.
            self.ship_state_slice(reader, versions, me, &mut out);
        } else if !self.big.is_empty() || self.reading.is_some() {
            // Big values found by the last steps go before anything else.
            self.ship_big_slice(reader, versions, me, &mut out);
        } else {
            self.step_phase(reader, versions, me, max, &mut out);
        }
        self.sent += out.len() as u64;
        out
    }

    /// The next slice of the current phase.
    fn step_phase(
        &mut self,
        reader: &Reader,
        versions: &VersionStore,
        me: u64,
        max: usize,
        out: &mut Vec<Shipment>,
    ) {
        let max = max.max(1);
        self.phase = match std::mem::replace(&mut self.phase, Phase::Done) {
            Phase::Floors => {
                if let Some(floors) = self.sweep {
                    out.push((0, self.mark_stamp(floors, me), Op::SweepStart { floors }));
                }
                self.ship_floors(reader, versions, out)
            }
            Phase::Owned { next } => {
                let mut unread = Vec::new();
                let end = self.ship_owned(reader, versions, next, max, out, &mut unread);
                self.unread.extend(unread);
                if end >= self.owned.len() {
                    self.owned = Vec::new();
                    Phase::Done
                } else {
                    Phase::Owned { next: end }
                }
            }
            Phase::Keys { db, walk } => self.ship_key_page(reader, versions, me, db, walk, out),
            Phase::Tombstones { next } => {
                let end = versions.tombstone_index_len().min(next + max);
                for i in next..end {
                    if let Some((db, key, stamp)) = versions.tombstone_at(i) {
                        out.push((db, stamp, Op::Delete { key: key.into() }));
                    }
                }
                match (end == versions.tombstone_index_len(), self.sweep) {
                    (false, _) => Phase::Tombstones { next: end },
                    (true, Some(_)) => Phase::SweepEnd,
                    (true, None) => Phase::Done,
                }
            }
            Phase::SweepEnd => {
                if let Some(floors) = self.sweep {
                    let complete = !self.missed;
                    out.push((0, self.mark_stamp(floors, me), Op::SweepEnd { complete }));
                }
                Phase::Done
            }
            Phase::Done => Phase::Done,
        };
    }

    /// The floors wanted (FLUSHALL first: it covers the per-database
    /// ones) and the function libraries; returns the phase that follows.
    fn ship_floors(
        &mut self,
        reader: &Reader,
        versions: &VersionStore,
        out: &mut Vec<Shipment>,
    ) -> Phase {
        for (db, stamp) in versions.floors() {
            if !self.wanted(stamp) {
                continue;
            }
            match db {
                Some(d) => out.push((d, stamp, Op::FlushDb)),
                None => out.push((0, stamp, Op::FlushAll)),
            }
        }
        out.sort_by_key(|(_, _, op)| !matches!(op, Op::FlushAll));
        match library_shipments(reader, versions, |s| self.wanted(s)) {
            Some(libraries) => out.extend(libraries),
            // Not carried: the sync is not complete (no sweep).
            None => self.missed = true,
        }
        match self.since {
            None => Phase::Keys {
                db: 0,
                walk: KeyWalk::start(),
            },
            Some(_) => Phase::Owned { next: 0 },
        }
    }

    /// One page of database `db`'s keys, each with its version (a key
    /// without one was written at clock 0 here); returns the phase that
    /// follows.
    fn ship_key_page(
        &mut self,
        reader: &Reader,
        versions: &VersionStore,
        me: u64,
        db: u32,
        mut walk: KeyWalk,
        out: &mut Vec<Shipment>,
    ) -> Phase {
        let original = server::selected_db(reader.ctx());
        server::select_db(reader.ctx(), db);
        let keys = walk.next_page(reader).unwrap_or_else(|| {
            self.missed = true;
            Vec::new()
        });
        let keys: Vec<(Vec<u8>, Stamp)> = keys
            .into_iter()
            // A value of the peer's being built here is not a key yet.
            .filter(|key| !server::is_build_key(key))
            .map(|key| {
                let stamp = stamp_of(versions, db, &key, me);
                (key, stamp)
            })
            .collect();
        let small = self.set_big_apart(reader, versions, db, keys);
        let names: Vec<&[u8]> = small.iter().map(|(k, _)| k.as_slice()).collect();
        let reads = reader.read_many(&names);
        for ((key, stamp), read) in small.into_iter().zip(reads) {
            self.ship_read(db, key, stamp, read, out);
        }
        server::select_db(reader.ctx(), original);
        self.after_page(db, walk)
    }

    /// Queues the big values among `keys` (database `db`, selected) to be
    /// read a slice at a time; returns the others.
    fn set_big_apart(
        &mut self,
        reader: &Reader,
        versions: &VersionStore,
        db: u32,
        keys: Vec<(Vec<u8>, Stamp)>,
    ) -> Vec<(Vec<u8>, Stamp)> {
        let mut small = Vec::with_capacity(keys.len());
        for (key, stamp) in keys {
            // The merge tables' keys ship their states: a big one a slice
            // at a time, if it can (else, and the others, read whole).
            if versions.hashes.get(db, &key).is_some_and(|h| h.is_big()) {
                self.states.push_back((db, key));
                continue;
            }
            let held = versions.hashes.contains(db, &key) || versions.counters.contains(db, &key);
            match !held && reader.start_sliced(&key).is_some() {
                true => self.big.push_back((db, key)),
                false => small.push((key, stamp)),
            }
        }
        small
    }

    /// The phase after a page of database `db`: the same while its walk
    /// goes on, else the next database's walk, else the tombstones.
    fn after_page(&self, db: u32, walk: KeyWalk) -> Phase {
        match (walk.is_done(), db + 1 < self.databases) {
            (false, _) => Phase::Keys { db, walk },
            (true, true) => Phase::Keys {
                db: db + 1,
                walk: KeyWalk::start(),
            },
            (true, false) => Phase::Tombstones { next: 0 },
        }
    }

    /// Ships what reading `key` of database `db` found, at `stamp`.
    fn ship_read(
        &mut self,
        db: u32,
        key: Vec<u8>,
        stamp: Stamp,
        read: Read,
        out: &mut Vec<Shipment>,
    ) {
        match read {
            Read::Value(snap) => out.push((db, stamp, snap.into_op(key))),
            // Gone since the scan: its delete ships by itself.
            Read::Absent => {}
            Read::Failed => {
                self.missed = true;
                self.unread.push((db, key, stamp));
            }
        }
    }

    /// One slice of the big value being read, or of the first one found
    /// (see [`BigRead`]): once read it ships at the version it started
    /// at; a read across a change of the key starts again, at most
    /// `MAX_SLICED_RESTARTS` times, then the value is read at once.
    fn ship_big_slice(
        &mut self,
        reader: &Reader,
        versions: &VersionStore,
        me: u64,
        out: &mut Vec<Shipment>,
    ) {
        let started = match self.reading.take() {
            Some(big) => Ok(big),
            None => match self.big.pop_front() {
                Some(found) => begin_big(reader, versions, me, found, 0),
                None => return,
            },
        };
        let big = match started {
            Ok(big) => big,
            Err(found) => return self.read_whole(reader, versions, me, found, out),
        };
        let now = stamp_of(versions, big.db, &big.key, me);
        match big.step(reader, versions, now) {
            BigStep::More(big) => self.reading = Some(big),
            BigStep::Done(big, snap) => {
                self.sliced.0 += 1;
                out.push((big.db, big.stamp, snap.into_op(big.key)));
            }
            BigStep::Changed(big) => {
                self.sliced.1 += 1;
                let restarts = big.restarts() + 1;
                match begin_big(reader, versions, me, (big.db, big.key), restarts) {
                    Ok(big) => self.reading = Some(big),
                    Err(found) => self.read_whole(reader, versions, me, found, out),
                }
            }
            BigStep::Whole(big) => self.read_whole(reader, versions, me, (big.db, big.key), out),
        }
    }

    /// One slice of the big merge state being shipped, or of the first
    /// one found; a state that does not ship in slices (any more) is read
    /// whole (the caller ships its state in place of the value).
    fn ship_state_slice(
        &mut self,
        reader: &Reader,
        versions: &VersionStore,
        me: u64,
        out: &mut Vec<Shipment>,
    ) {
        let started = match self.slicing.take() {
            Some(slices) => Ok(slices),
            None => match self.states.pop_front() {
                Some(found) => StateSlices::begin(reader, versions, found),
                None => return,
            },
        };
        let slices = match started {
            Ok(slices) => slices,
            Err(found) => return self.read_whole(reader, versions, me, found, out),
        };
        match slices.step(reader, versions) {
            StateStep::More(slices, shipment) => {
                out.push(shipment);
                self.slicing = Some(slices);
            }
            StateStep::Last(shipment) => {
                self.sliced.0 += 1;
                out.push(shipment);
            }
            StateStep::Whole(found) => self.read_whole(reader, versions, me, found, out),
        }
    }

    /// Reads `key` of database `db` at once and ships it at its version.
    fn read_whole(
        &mut self,
        reader: &Reader,
        versions: &VersionStore,
        me: u64,
        (db, key): (u32, Vec<u8>),
        out: &mut Vec<Shipment>,
    ) {
        let original = server::selected_db(reader.ctx());
        server::select_db(reader.ctx(), db);
        let stamp = stamp_of(versions, db, &key, me);
        let read = reader.read_one(&key);
        server::select_db(reader.ctx(), original);
        self.ship_read(db, key, stamp, read, out);
    }
}

/// A read of `key` a slice at a time at its version now; the key back
/// when it is no longer big.
fn begin_big(
    reader: &Reader,
    versions: &VersionStore,
    me: u64,
    (db, key): (u32, Vec<u8>),
    restarts: u8,
) -> Result<BigRead, (u32, Vec<u8>)> {
    let stamp = stamp_of(versions, db, &key, me);
    BigRead::begin(reader, versions, (db, key), stamp, restarts).map_err(|key| (db, key))
}

/// The version a key of database `db` ships at: its own, or (present
/// without one, or a stale tombstone) clock 0 of this node.
fn stamp_of(versions: &VersionStore, db: u32, key: &[u8], me: u64) -> Stamp {
    match versions.get(db, key) {
        Some(KeyVersion::Live(s)) => s,
        _ => Stamp::new(0, me),
    }
}

impl FullSync {
    /// The stamp of a sweep mark: at the floor, newer than every version
    /// the sweep vouches for (the peer's tombstones of the keys it deletes
    /// take it).
    fn mark_stamp(&self, floors: SweepFloors, me: u64) -> Stamp {
        Stamp::new(floors.floor(), me)
    }

    /// Ships up to `max` keys of `owned` from position `start` (one
    /// database at a time, read together) whose version is still one this
    /// sync ships: live ones with their value, deleted ones as deletes.
    /// Returns the next position.
    fn ship_owned(
        &mut self,
        reader: &Reader,
        versions: &VersionStore,
        start: usize,
        max: usize,
        out: &mut Vec<Shipment>,
        unread: &mut Vec<(u32, Vec<u8>, Stamp)>,
    ) -> usize {
        let owned = &self.owned;
        let Some(&(db, _)) = owned.get(start) else {
            return start;
        };
        let end = owned[start..]
            .iter()
            .take(max)
            .position(|(d, _)| *d != db)
            .map_or((start + max).min(owned.len()), |n| start + n);
        let mut live = Vec::new();
        for (_, key) in &owned[start..end] {
            // Written again since (that change ships by itself, or came
            // from the peer): only versions this sync still ships.
            let counter = |_: Stamp| {
                versions.counters.changed_after(db, key, |s| self.wanted(s))
                    || versions.hashes.changed_after(db, key, |s| self.wanted(s))
                    || versions
                        .ttls
                        .get(db, key)
                        .is_some_and(|(s, _)| self.wanted(s))
            };
            match versions.get(db, key) {
                Some(KeyVersion::Live(s)) if self.wanted(s) || counter(s) => {
                    live.push((key.to_vec(), s))
                }
                Some(KeyVersion::Deleted { stamp, .. }) if self.wanted(stamp) || counter(stamp) => {
                    out.push((db, stamp, Op::Delete { key: key.to_vec() }));
                }
                _ => {}
            }
        }
        let original = server::selected_db(reader.ctx());
        server::select_db(reader.ctx(), db);
        let live = self.set_big_apart(reader, versions, db, live);
        let names: Vec<&[u8]> = live.iter().map(|(k, _)| k.as_slice()).collect();
        let reads = reader.read_many(&names);
        for ((key, stamp), read) in live.into_iter().zip(reads) {
            match read {
                Read::Value(snap) => out.push((db, stamp, snap.into_op(key))),
                // Expired since: each node expires it itself.
                Read::Absent => {}
                Read::Failed => unread.push((db, key, stamp)),
            }
        }
        server::select_db(reader.ctx(), original);
        end
    }
}

/// The libraries whose versions a sync wants (`wanted`), as it ships
/// them: the code of each live one (all read once) and each delete. A
/// library whose code is no longer its version's is left out: the change
/// that made it so is pending, and ships stamped at the next flush.
/// `None` when the libraries could not be read.
fn library_shipments(
    reader: &Reader,
    versions: &VersionStore,
    wanted: impl Fn(Stamp) -> bool,
) -> Option<Vec<Shipment>> {
    let due: Vec<_> = versions
        .libraries()
        .iter()
        .filter(|(_, v)| wanted(v.stamp()))
        .collect();
    let live = due.iter().any(|(_, v)| v.crc().is_some());
    let held: hashbrown::HashMap<Vec<u8>, Vec<u8>> = if live {
        server::libraries_held(reader.ctx())?.into_iter().collect()
    } else {
        hashbrown::HashMap::new()
    };
    let mut out = Vec::with_capacity(due.len());
    for (name, version) in due {
        let name = name.to_vec();
        let op = match (version.crc(), held.get(&name)) {
            (None, _) => Op::LibraryDelete { name },
            (Some(crc), Some(code)) if crate::redis::dump::crc64(code) == crc => Op::Library {
                name,
                code: code.clone(),
            },
            _ => continue,
        };
        out.push((0, version.stamp(), op));
    }
    Some(out)
}
