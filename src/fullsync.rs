//! A full sync: the whole local state streamed to the peer in slices, so
//! that Redis keeps serving clients in between. First the flush floors,
//! then every key of every database (SCAN), then every tombstone; each
//! carries its version, and the peer applies them by the usual rule, so
//! writes that run meanwhile (shipped as usual) cannot be undone by it.

use std::time::Instant;

use crate::entry::Op;
use crate::server;
use crate::snapshot::{Read, Reader};
use crate::version::{KeyVersion, Stamp, VersionStore};

/// Keys asked of one SCAN call.
const SCAN_COUNT: usize = 256;

/// One change to ship: database, version, operation.
pub type Shipment = (u32, Stamp, Op);

#[derive(Debug)]
enum Phase {
    Floors,
    Keys {
        db: u32,
        cursor: u64,
    },
    /// Position in the tombstone index (collection waits while a full sync runs).
    Tombstones {
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
        }
    }

    /// Whether everything has been handed out.
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
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
        match &mut self.phase {
            Phase::Floors => {
                for (db, stamp) in versions.floors() {
                    match db {
                        Some(d) => out.push((d, stamp, Op::FlushDb)),
                        None => out.push((0, stamp, Op::FlushAll)),
                    }
                }
                // FLUSHALL first: it covers the per-database floors.
                out.sort_by_key(|(_, _, op)| !matches!(op, Op::FlushAll));
                self.phase = Phase::Keys { db: 0, cursor: 0 };
            }
            Phase::Keys { db, cursor } => {
                let original = server::selected_db(reader.ctx());
                server::select_db(reader.ctx(), *db);
                let page = reader.scan(*cursor, SCAN_COUNT);
                let (next, keys) = page.unwrap_or((0, Vec::new()));
                let reads = reader.read_many(&keys);
                for (key, read) in keys.into_iter().zip(reads) {
                    let stamp = match versions.get(*db, &key) {
                        Some(KeyVersion::Live(s)) => s,
                        // Present without a version (or a stale tombstone):
                        // written at clock 0 here.
                        _ => Stamp::new(0, me),
                    };
                    match read {
                        Read::Value(snap) => out.push((*db, stamp, snap.into_op(key))),
                        // Gone since the SCAN: its delete ships by itself.
                        Read::Absent => {}
                        Read::Failed => self.unread.push((*db, key, stamp)),
                    }
                }
                server::select_db(reader.ctx(), original);
                if next != 0 {
                    *cursor = next;
                } else if *db + 1 < self.databases {
                    *db += 1;
                    *cursor = 0;
                } else {
                    self.phase = Phase::Tombstones { next: 0 };
                }
            }
            Phase::Tombstones { next } => {
                let end = versions.tombstone_index_len().min(*next + max.max(1));
                for i in *next..end {
                    if let Some((db, key, stamp)) = versions.tombstone_at(i) {
                        out.push((db, stamp, Op::Delete { key: key.into() }));
                    }
                }
                *next = end;
                if end == versions.tombstone_index_len() {
                    self.phase = Phase::Done;
                }
            }
            Phase::Done => {}
        }
        self.sent += out.len() as u64;
        out
    }
}
