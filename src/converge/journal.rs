//! The version store's journal: every change to the convergence metadata
//! (a key's stamp, a tombstone, a flush, a swap) as a record, in the order
//! it happened. The main thread drains it at the end of each flush and each
//! applied batch into one `rdmasync.stamps` command, propagated in the same
//! execution unit as the data it describes, so the node's AOF and its
//! replicas carry every stamp with its change; loading the AOF (or a replica
//! receiving the stream) replays them. Pure: the codec and the replay.
//!
//! Record: `tag u8 | db u32 | clock u64 | node u64 | key_len u32 | key`,
//! little-endian (the RDB aux data of `persist` uses the same layout). A
//! payload is one format byte, then records.

use crate::converge::version::{Stamp, VersionStore};
use crate::proto::wire::{u32_at, u64_at};

/// Format byte of a journal payload this build writes and reads.
pub const FORMAT: u8 = 1;

/// Fixed bytes of a record before its key.
pub const RECORD_HEAD: usize = 1 + 4 + 8 + 8 + 4;

/// The key holds the value written at the stamp.
pub const TAG_LIVE: u8 = 1;
/// The key was deleted at the stamp (a tombstone).
pub const TAG_TOMBSTONE: u8 = 2;
/// The floor of a database (no key), in a snapshot of the store.
pub const TAG_FLOOR: u8 = 3;
/// The FLUSHALL floor (no key), in a snapshot of the store.
pub const TAG_FLOOR_ALL: u8 = 4;
/// `SWAPDB db other`: the key is `other`, 4 bytes; no stamp.
pub const TAG_SWAP: u8 = 5;
/// The key's version was forgotten (a write recorded for it did not happen).
pub const TAG_FORGET: u8 = 6;
/// A FLUSHDB of the database at the stamp (versions older than it go).
pub const TAG_FLUSH_DB: u8 = 7;
/// A FLUSHALL at the stamp.
pub const TAG_FLUSH_ALL: u8 = 8;
/// The key changed after its recorded version and was not stamped yet
/// when the snapshot was taken (no stamp).
pub const TAG_CHANGED: u8 = 9;
/// The records that follow describe the whole store (an AOF rewrite
/// without an RDB preamble starts its new file with them): forget
/// everything before.
pub const TAG_SNAPSHOT: u8 = 10;
/// The node holds every change of origin `stamp.node` stamped at or below
/// `stamp.clock` (a watermark; no key).
pub const TAG_COVERED: u8 = 11;
/// A FLUSHDB of the database not yet stamped when the snapshot was taken.
pub const TAG_FLUSHED: u8 = 12;
/// A FLUSHALL not yet stamped when the snapshot was taken.
pub const TAG_FLUSHED_ALL: u8 = 13;
/// A tombstone of `stamp.node` stamped `stamp.clock` was collected (the
/// newest so far; no key).
pub const TAG_COLLECTED: u8 = 14;
/// The function libraries as one set, as builds before per-library
/// versions wrote it (the key: the CRC64 of their `FUNCTION DUMP`):
/// replayed as nothing, the load then stamps each library it finds
/// without a version of its own.
pub const TAG_FUNCTIONS: u8 = 15;
/// The node dropped its own tombstones over `max-tombstones` up to
/// `stamp` (the newest; no key): its next full sync sweeps.
pub const TAG_DROPPED: u8 = 16;
/// A counter's merge state (`merge::journaled`; no stamp).
pub const TAG_COUNTER: u8 = 17;
/// The merge bound's clock of `stamp.node` is `stamp.clock` (no key).
pub const TAG_MERGE_BOUND: u8 = 18;
/// A hash's merge metadata, or a part of it (`merge::hash_journal`; no
/// stamp).
pub const TAG_HASH: u8 = 19;
/// A function library holds the code written at the stamp: the key is the
/// CRC64 of its code (8 bytes, little-endian), then its name.
pub const TAG_LIBRARY: u8 = 20;
/// A function library was deleted at the stamp (a tombstone); the key is
/// its name.
pub const TAG_LIBRARY_DELETED: u8 = 21;
/// A function library's version was forgotten (a collected tombstone); the
/// key is its name, no stamp.
pub const TAG_LIBRARY_FORGET: u8 = 22;

/// This node's own changes stamped after `stamp.clock` and up to the
/// clock in the key (8 bytes, little-endian) may have been lost by loads,
/// and the peer has not sent them back yet.
pub const TAG_LOST_OWN: u8 = 23;
/// The peer sent back what loads lost of this node's changes (no key, no
/// stamp).
pub const TAG_LOST_OWN_CLOSED: u8 = 24;
/// A write of a key's TTL alone, newer than its version
/// (`converge::ttl_ops`): the stamp, and in the key the expiry it set (8
/// bytes, little-endian, 0: none) then the key.
pub const TAG_TTL: u8 = 25;

/// The key bytes of a [`TAG_TTL`] record: the expiry, then the key.
pub(crate) fn ttl_record(key: &[u8], expiry_ms: Option<u64>) -> Vec<u8> {
    let mut record = expiry_ms.unwrap_or(0).to_le_bytes().to_vec();
    record.extend_from_slice(key);
    record
}

/// One decoded record, borrowing its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// What the record says.
    pub tag: u8,
    /// Database.
    pub db: u32,
    /// Stamp (zero where the tag has none).
    pub stamp: Stamp,
    /// Key bytes (empty where the tag has none).
    pub key: &'a [u8],
}

/// Why a record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad versions record at byte {at}: {what}")]
pub struct RecordError {
    /// Offset in the payload.
    pub at: usize,
    /// What was wrong.
    pub what: &'static str,
}

/// Appends one record to `out`.
pub fn put_record(out: &mut Vec<u8>, tag: u8, db: u32, stamp: Stamp, key: &[u8]) {
    out.push(tag);
    out.extend_from_slice(&db.to_le_bytes());
    out.extend_from_slice(&stamp.clock.to_le_bytes());
    out.extend_from_slice(&stamp.node.to_le_bytes());
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
}

/// The records of `bytes` in order; stops at the first bad one.
pub fn records(bytes: &[u8]) -> impl Iterator<Item = Result<Record<'_>, RecordError>> {
    let mut at = 0;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || at >= bytes.len() {
            return None;
        }
        let parsed = parse_record(bytes, at);
        match &parsed {
            Ok((_, next)) => at = *next,
            Err(_) => failed = true,
        }
        Some(parsed.map(|(r, _)| r))
    })
}

fn parse_record(bytes: &[u8], at: usize) -> Result<(Record<'_>, usize), RecordError> {
    let head = bytes.get(at..at + RECORD_HEAD).ok_or(RecordError {
        at,
        what: "truncated header",
    })?;
    let key_len = u32_at(head, 21) as usize;
    let key_start = at + RECORD_HEAD;
    let key_end = key_start.saturating_add(key_len);
    let key = bytes.get(key_start..key_end).ok_or(RecordError {
        at,
        what: "truncated key",
    })?;
    let record = Record {
        tag: head[0],
        db: u32_at(head, 1),
        stamp: Stamp::new(u64_at(head, 5), u64_at(head, 13)),
        key,
    };
    Ok((record, key_end))
}

/// Why a journal payload was not (wholly) replayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// The payload is empty or its format byte is not [`FORMAT`].
    #[error("journal format {0:?}, this build reads {FORMAT}")]
    Format(Option<u8>),
    /// A record was truncated; the records before it were replayed.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// A record's tag is not a journal tag; the records before it were replayed.
    #[error("unknown journal record tag {tag} at byte {at}")]
    Tag {
        /// The tag.
        tag: u8,
        /// Where.
        at: usize,
    },
}

/// What a replay did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replayed {
    /// The newest clock the records carried (to move the clock past it).
    pub newest: u64,
    /// Records replayed.
    pub records: u64,
}

/// Replays a journal payload into `store` (without journaling it again).
///
/// # Errors
/// [`ReplayError`] on a payload of another format or a bad record; the
/// records before the bad one are kept.
pub fn replay(payload: &[u8], store: &mut VersionStore) -> Result<Replayed, ReplayError> {
    let (&format, body) = payload.split_first().ok_or(ReplayError::Format(None))?;
    if format != FORMAT {
        return Err(ReplayError::Format(Some(format)));
    }
    let mut newest = 0;
    let mut records_done = 0;
    let mut at = 0;
    let was = store.pause_journal();
    let result = records(body).try_for_each(|r| {
        let r = r?;
        newest = newest.max(r.stamp.clock);
        let start = at;
        at += RECORD_HEAD + r.key.len();
        if apply_record(store, &r) {
            records_done += 1;
            Ok(())
        } else {
            // Offsets count the format byte.
            Err(ReplayError::Tag {
                tag: r.tag,
                at: start + 1,
            })
        }
    });
    store.resume_journal(was);
    result.map(|()| Replayed {
        newest,
        records: records_done,
    })
}

/// Applies one record (of the journal, or of the RDB aux data, which uses
/// the same records); false for a tag neither writes.
pub(crate) fn apply_record(store: &mut VersionStore, r: &Record<'_>) -> bool {
    match r.tag {
        TAG_LIVE => store.record_write(r.db, r.key, r.stamp),
        TAG_TOMBSTONE => store.record_delete(r.db, r.key, r.stamp, 0),
        TAG_FORGET => store.reset(r.db, r.key, None),
        TAG_TTL => {
            // See `ttl_record`.
            if let Some((expiry, key)) = r.key.split_first_chunk::<8>() {
                let at = u64::from_le_bytes(*expiry);
                store.record_ttl(r.db, key, (r.stamp, (at != 0).then_some(at)));
            }
        }
        TAG_FLUSH_DB => {
            store.flush(Some(r.db), r.stamp);
        }
        TAG_FLUSH_ALL => {
            store.flush(None, r.stamp);
        }
        TAG_FLOOR => store.raise_floor(Some(r.db), r.stamp),
        TAG_FLOOR_ALL => store.raise_floor(None, r.stamp),
        TAG_CHANGED => store.changed_unstamped(r.db, r.key),
        TAG_SNAPSHOT => store.clear(),
        TAG_COVERED => store.record_covered(r.stamp.node, r.stamp.clock),
        TAG_COLLECTED => store.record_collected(r.stamp),
        TAG_DROPPED => store.record_dropped(r.stamp),
        TAG_COUNTER => return store.replay_counter(r.db, r.key),
        TAG_HASH => return store.replay_hash(r.db, r.key),
        // The bound as it was then (a record of a lowered one lowers it).
        TAG_MERGE_BOUND => store.counters.set_bound(r.stamp.node, r.stamp.clock),
        TAG_FUNCTIONS => {}
        TAG_LIBRARY => match r.key.split_first_chunk::<8>() {
            Some((crc, name)) => {
                store.record_library(name, r.stamp, Some(u64::from_le_bytes(*crc)), 0);
            }
            None => return false,
        },
        TAG_LIBRARY_DELETED => store.record_library(r.key, r.stamp, None, 0),
        TAG_LIBRARY_FORGET => store.forget_library(r.key),
        TAG_LOST_OWN => match <[u8; 8]>::try_from(r.key) {
            Ok(to) => store.record_lost_own(r.stamp.clock, u64::from_le_bytes(to)),
            Err(_) => return false,
        },
        TAG_LOST_OWN_CLOSED => store.close_lost_own(),
        TAG_FLUSHED => store.flushed_unstamped(Some(r.db)),
        TAG_FLUSHED_ALL => store.flushed_unstamped(None),
        TAG_SWAP => match <[u8; 4]>::try_from(r.key) {
            Ok(other) => store.replayed_swap(r.db, u32::from_le_bytes(other)),
            Err(_) => return false,
        },
        _ => return false,
    }
    true
}

/// The versions an AOF rewrite's new base file goes with.
#[derive(Debug)]
pub enum RewriteBase {
    /// None in the file (no preamble, `appendonly` off): these, as the
    /// fork found them (encoded blobs).
    Kept(Vec<Vec<u8>>),
    /// In the files (an RDB preamble, or the new incremental file).
    InFiles,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::converge::version::KeyVersion;
    use proptest::prelude::*;

    const A: u64 = 10;
    const B: u64 = 20;

    fn payload(store: &mut VersionStore) -> Vec<u8> {
        let mut out = vec![FORMAT];
        out.extend(store.take_journal());
        out
    }

    #[test]
    fn each_library_version_replays_and_a_short_record_is_refused() {
        let mut origin = VersionStore::journaled();
        origin.record_library(b"kept", Stamp::new(4, A), Some(1), 0);
        origin.record_library(b"gone", Stamp::new(5, A), Some(2), 0);
        origin.record_library(b"gone", Stamp::new(9, B), None, 0);
        origin.record_library(b"collected", Stamp::new(6, B), None, 0);
        origin.forget_library(b"collected");
        let bytes = payload(&mut origin);
        let mut loaded = VersionStore::journaled();
        assert_eq!(replay(&bytes, &mut loaded).map(|r| r.newest), Ok(9));
        let mut want: Vec<_> = origin.libraries().iter().collect();
        let mut got: Vec<_> = loaded.libraries().iter().collect();
        want.sort_unstable_by_key(|(n, _)| n.to_vec());
        got.sort_unstable_by_key(|(n, _)| n.to_vec());
        assert_eq!((got.len(), got), (2, want));
        assert_eq!(loaded.newest_of(B), 9);
        assert_eq!(loaded.tombstones(), 1);
        // A live record without its 8-byte CRC is not one this build writes.
        let mut bad = vec![FORMAT];
        put_record(&mut bad, TAG_LIBRARY, 0, Stamp::new(1, A), b"short");
        assert!(replay(&bad, &mut VersionStore::new()).is_err());
        // The set's version older builds wrote replays as nothing.
        let mut old = vec![FORMAT];
        put_record(&mut old, TAG_FUNCTIONS, 0, Stamp::new(3, A), &[0; 8]);
        assert!(replay(&old, &mut VersionStore::new()).is_ok());
    }

    #[test]
    fn replaying_the_journal_rebuilds_the_store() {
        let mut origin = VersionStore::journaled();
        origin.record_write(0, b"k", Stamp::new(5, A));
        origin.record_write(0, b"d", Stamp::new(6, A));
        origin.record_delete(0, b"d", Stamp::new(7, A), 0);
        origin.record_write(1, b"m", Stamp::new(8, B));
        origin.swap(0, 1);
        origin.record_write(2, b"gone", Stamp::new(3, A));
        origin.flush(Some(2), Stamp::new(9, B));
        origin.record_write(3, b"x", Stamp::new(10, A));
        origin.reset(3, b"x", None);
        let bytes = payload(&mut origin);
        let mut loaded = VersionStore::journaled();
        assert_eq!(
            replay(&bytes, &mut loaded),
            Ok(Replayed {
                newest: 10,
                records: 9
            })
        );
        for (db, key) in [
            (1, &b"k"[..]),
            (1, b"d"),
            (0, b"m"),
            (2, b"gone"),
            (3, b"x"),
        ] {
            assert_eq!(loaded.get(db, key), origin.get(db, key), "{db} {key:?}");
        }
        assert!(matches!(
            loaded.get(1, b"d"),
            Some(KeyVersion::Deleted { .. })
        ));
        assert_eq!(loaded.floor(2), Stamp::new(9, B));
        assert_eq!(loaded.tombstones(), 1);
        assert!(
            loaded.take_journal().is_empty(),
            "a replay is not journaled again"
        );
    }

    #[test]
    fn a_snapshot_in_the_journal_replaces_what_came_before() {
        let mut origin = VersionStore::new();
        origin.record_write(0, b"k", Stamp::new(5, A));
        origin.record_delete(0, b"d", Stamp::new(6, A), 0);
        origin.flush(Some(1), Stamp::new(4, B));
        let mut bytes = vec![FORMAT];
        put_record(&mut bytes, TAG_SNAPSHOT, 0, Stamp::ZERO, b"");
        for blob in crate::capture::persist::encode(&origin) {
            bytes.extend(blob);
        }
        put_record(&mut bytes, TAG_CHANGED, 0, Stamp::ZERO, b"dirty");
        let mut loaded = VersionStore::journaled();
        loaded.record_write(0, b"stale", Stamp::new(1, A));
        loaded.changed_unstamped(0, b"from-the-base");
        loaded.take_journal();
        assert_eq!(replay(&bytes, &mut loaded).map(|r| r.newest), Ok(6));
        assert_eq!(loaded.get(0, b"stale"), None);
        assert_eq!(loaded.get(0, b"k"), origin.get(0, b"k"));
        assert_eq!(loaded.get(0, b"d"), origin.get(0, b"d"));
        assert_eq!(loaded.floor(1), Stamp::new(4, B));
        assert_eq!(
            loaded.unstamped_len(),
            1,
            "only the key dirty at the snapshot"
        );
        assert!(loaded.take_journal().is_empty());
    }

    #[test]
    fn a_store_without_a_journal_records_nothing() {
        let mut s = VersionStore::new();
        s.record_write(0, b"k", Stamp::new(5, A));
        assert!(s.take_journal().is_empty());
        s.start_journal();
        s.record_write(0, b"k", Stamp::new(6, A));
        assert!(!s.take_journal().is_empty());
        assert!(s.take_journal().is_empty(), "taken");
    }

    #[test]
    fn clearing_the_store_keeps_it_journaled() {
        let mut s = VersionStore::journaled();
        s.record_write(0, b"k", Stamp::new(5, A));
        s.clear();
        assert!(s.take_journal().is_empty());
        s.record_write(0, b"k", Stamp::new(6, A));
        assert!(!s.take_journal().is_empty());
    }

    #[test]
    fn bad_payloads_are_refused_and_keep_what_came_before() {
        let mut s = VersionStore::journaled();
        assert_eq!(replay(&[], &mut s), Err(ReplayError::Format(None)));
        assert_eq!(replay(&[9], &mut s), Err(ReplayError::Format(Some(9))));
        let mut bytes = vec![FORMAT];
        put_record(&mut bytes, TAG_LIVE, 0, Stamp::new(4, A), b"kept");
        put_record(&mut bytes, 77, 0, Stamp::new(5, A), b"");
        assert!(matches!(
            replay(&bytes, &mut s),
            Err(ReplayError::Tag { tag: 77, .. })
        ));
        assert_eq!(s.get(0, b"kept"), Some(KeyVersion::Live(Stamp::new(4, A))));
        bytes.truncate(bytes.len() - 3);
        assert!(matches!(
            replay(&bytes, &mut s),
            Err(ReplayError::Record(_))
        ));
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut s = VersionStore::journaled();
            let _ = replay(&bytes, &mut s);
            let mut with_format = vec![FORMAT];
            with_format.extend(&bytes);
            let _ = replay(&with_format, &mut s);
        }
    }
}
