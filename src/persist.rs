//! Versions survive restarts: key versions, tombstones and flush floors are
//! written into the RDB as module aux data (after the keyspace) and read
//! back on load. AOF with an RDB preamble carries them as of the last
//! rewrite. The record codec is pure; the callbacks are Redis's.
//!
//! Record: `tag u8 | db u32 | clock u64 | node u64 | key_len u32 | key`,
//! little-endian; tags 1 live key, 2 tombstone, 3 FLUSHDB floor (no key),
//! 4 FLUSHALL floor (no key). Records are saved in blobs of about 1 MiB.

use std::os::raw::{c_int, c_void};

use redis_module::native_types::RedisType;
use redis_module::raw;

use crate::catchup::STATE;
use crate::version::{KeyVersion, Stamp, VersionStore};
use crate::wire::{u32_at, u64_at};

/// Format of the aux payload this build writes and reads.
const FORMAT: u64 = 1;
/// Blob size the records are cut into.
const BLOB_BYTES: usize = 1 << 20;
/// Fixed bytes of a record before its key.
const RECORD_HEAD: usize = 1 + 4 + 8 + 8 + 4;

const TAG_LIVE: u8 = 1;
const TAG_TOMBSTONE: u8 = 2;
const TAG_FLOOR: u8 = 3;
const TAG_FLOOR_ALL: u8 = 4;

fn put_record(out: &mut Vec<u8>, tag: u8, db: u32, stamp: Stamp, key: &[u8]) {
    out.push(tag);
    out.extend_from_slice(&db.to_le_bytes());
    out.extend_from_slice(&stamp.clock.to_le_bytes());
    out.extend_from_slice(&stamp.node.to_le_bytes());
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
}

/// The store as blobs of records.
pub fn encode(store: &VersionStore) -> Vec<Vec<u8>> {
    let mut blobs = vec![Vec::new()];
    let mut add = |tag: u8, db: u32, stamp: Stamp, key: &[u8]| {
        if blobs.last().is_some_and(|b| b.len() >= BLOB_BYTES) {
            blobs.push(Vec::new());
        }
        if let Some(blob) = blobs.last_mut() {
            put_record(blob, tag, db, stamp, key);
        }
    };
    for (db, stamp) in store.floors() {
        match db {
            Some(d) => add(TAG_FLOOR, d, stamp, &[]),
            None => add(TAG_FLOOR_ALL, 0, stamp, &[]),
        }
    }
    for (db, key, version) in store.records() {
        match version {
            KeyVersion::Live(stamp) => add(TAG_LIVE, db, stamp, key),
            KeyVersion::Deleted { stamp, .. } => add(TAG_TOMBSTONE, db, stamp, key),
        }
    }
    blobs
}

/// Why a blob could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad versions record at byte {at}: {what}")]
pub struct DecodeError {
    /// Offset in the blob.
    pub at: usize,
    /// What was wrong.
    pub what: &'static str,
}

/// Adds the records of one blob to `store`. Tombstones come back
/// uncollectable until shipped again (the full sync after a start does).
///
/// # Errors
/// [`DecodeError`] on a truncated record or an unknown tag; records before
/// it are kept.
pub fn decode_into(blob: &[u8], store: &mut VersionStore) -> Result<(), DecodeError> {
    let mut at = 0;
    while at < blob.len() {
        let head = blob.get(at..at + RECORD_HEAD).ok_or(DecodeError {
            at,
            what: "truncated header",
        })?;
        let tag = head[0];
        let db = u32_at(head, 1);
        let stamp = Stamp::new(u64_at(head, 5), u64_at(head, 13));
        let key_len = u32_at(head, 21) as usize;
        let key_start = at + RECORD_HEAD;
        let key = blob
            .get(key_start..key_start.saturating_add(key_len))
            .ok_or(DecodeError {
                at,
                what: "truncated key",
            })?;
        match tag {
            TAG_LIVE => store.record_write(db, key, stamp),
            TAG_TOMBSTONE => store.record_delete(db, key, stamp, 0),
            TAG_FLOOR => store.raise_floor(Some(db), stamp),
            TAG_FLOOR_ALL => store.raise_floor(None, stamp),
            _ => {
                return Err(DecodeError {
                    at,
                    what: "unknown tag",
                })
            }
        }
        at = key_start + key_len;
    }
    Ok(())
}

extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    // Never wait: if this thread holds the state (a save triggered from
    // inside the module's own commands), save no versions rather than hang.
    let blobs = match STATE.try_lock() {
        Some(st) => encode(&st.versions),
        None => {
            redis_module::logging::log_warning(
                "rdmasync: key versions not saved in this RDB (state busy); \
                 a full sync with the peer follows its next load",
            );
            Vec::new()
        }
    };
    raw::save_unsigned(rdb, FORMAT);
    raw::save_unsigned(rdb, blobs.len() as u64);
    for blob in &blobs {
        raw::save_slice(rdb, blob);
    }
}

extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, _encver: c_int, _when: c_int) -> c_int {
    let err = raw::REDISMODULE_ERR as c_int;
    let Ok(format) = raw::load_unsigned(rdb) else {
        return err;
    };
    let Ok(count) = raw::load_unsigned(rdb) else {
        return err;
    };
    let mut store = VersionStore::new();
    let mut bad = None;
    for _ in 0..count {
        // Every blob is read, even after an error, to stay aligned in the file.
        let Ok(blob) = raw::load_string_buffer(rdb) else {
            return err;
        };
        if bad.is_none() && format == FORMAT {
            if let Err(e) = decode_into(blob.as_ref(), &mut store) {
                bad = Some(e.to_string());
            }
        }
    }
    if format != FORMAT {
        bad = Some(format!("format {format}, this build reads {FORMAT}"));
    }
    if let Some(why) = bad {
        redis_module::logging::log_warning(format!(
            "rdmasync: key versions in the RDB not usable ({why}); starting without them \
             (the full sync with the peer decides by presence)"
        ));
        return raw::REDISMODULE_OK as c_int;
    }
    let newest = store.newest_clock();
    let keys = store.len();
    STATE.lock().versions = store;
    crate::runtime::with_shared(|s| s.clock.observe(newest));
    redis_module::logging::log_notice(format!(
        "rdmasync: loaded versions of {keys} keys from the RDB"
    ));
    raw::REDISMODULE_OK as c_int
}

extern "C" fn no_value_load(_rdb: *mut raw::RedisModuleIO, _encver: c_int) -> *mut c_void {
    // The type only carries aux data: no key ever holds it.
    std::ptr::null_mut()
}

extern "C" fn no_value_save(_rdb: *mut raw::RedisModuleIO, _value: *mut c_void) {}

extern "C" fn no_value_free(_value: *mut c_void) {}

/// The data type that carries the aux data (no key has this type).
pub static VERSIONS_TYPE: RedisType = RedisType::new(
    "rdmasyncv",
    1,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(no_value_load),
        rdb_save: Some(no_value_save),
        aof_rewrite: None,
        mem_usage: None,
        digest: None,
        free: Some(no_value_free),
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save_triggers: raw::REDISMODULE_AUX_AFTER_RDB as c_int,
        free_effort: None,
        unlink: None,
        copy: None,
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: None,
        copy2: None,
        aux_save2: None,
    },
);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn store_round_trips() {
        let mut s = VersionStore::new();
        s.record_write(0, b"a", Stamp::new(5, 1));
        s.record_delete(3, b"gone", Stamp::new(7, 2), 9);
        s.flush(Some(2), Stamp::new(4, 1));
        s.flush(None, Stamp::new(3, 2));
        let blobs = encode(&s);
        let mut back = VersionStore::new();
        for b in &blobs {
            decode_into(b, &mut back).unwrap();
        }
        assert_eq!(back.get(0, b"a"), Some(KeyVersion::Live(Stamp::new(5, 1))));
        assert_eq!(
            back.get(3, b"gone"),
            Some(KeyVersion::Deleted {
                stamp: Stamp::new(7, 2),
                gc_after: 0
            })
        );
        assert_eq!(back.tombstones(), 1);
        assert_eq!(back.floor(2), Stamp::new(4, 1));
        assert_eq!(back.floor_all(), Stamp::new(3, 2));
    }

    #[test]
    fn large_stores_are_cut_into_blobs() {
        let mut s = VersionStore::new();
        for i in 0..40_000u32 {
            s.record_write(
                0,
                format!("key:{i:08}").as_bytes(),
                Stamp::new(u64::from(i) + 1, 1),
            );
        }
        let blobs = encode(&s);
        assert!(blobs.len() > 1);
        let mut back = VersionStore::new();
        for b in &blobs {
            decode_into(b, &mut back).unwrap();
        }
        assert_eq!(back.len(), 40_000);
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut s = VersionStore::new();
            let _ = decode_into(&bytes, &mut s);
        }
    }
}
