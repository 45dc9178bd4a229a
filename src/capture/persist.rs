//! Versions survive restarts: key versions, tombstones and flush floors are
//! written into the RDB as module aux data (after the keyspace) and read
//! back on load. AOF with an RDB preamble carries them as of the last
//! rewrite. The record codec is pure; the callbacks are Redis's.
//!
//! Record: `tag u8 | db u32 | clock u64 | node u64 | key_len u32 | key`,
//! little-endian; tags 1 live key, 2 tombstone, 3 FLUSHDB floor (no key),
//! 4 FLUSHALL floor (no key). Records are saved in blobs of about 1 MiB.

use std::os::raw::{c_int, c_void};

use redis_module::logging::{log_notice, log_warning};
use redis_module::native_types::RedisType;
use redis_module::{raw, Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue};

use crate::capture::state::main_state;
use crate::converge::changes::PendingOp;
use crate::converge::journal::{
    self, put_record, records, RecordError, RewriteBase, TAG_CHANGED, TAG_COVERED, TAG_FLOOR,
    TAG_FLOOR_ALL, TAG_FLUSHED, TAG_FLUSHED_ALL, TAG_LIVE, TAG_TOMBSTONE,
};
use crate::converge::version::{KeyVersion, Stamp, VersionStore};
use crate::shared::Shared;

/// Format of the aux payload this build writes and reads.
const FORMAT: u64 = 1;
/// Blob size the records are cut into.
const BLOB_BYTES: usize = 1 << 20;

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
    for (origin, clock) in store.watermarks() {
        add(TAG_COVERED, 0, Stamp::new(clock, origin), &[]);
    }
    for (name, version) in store.libraries().iter() {
        match version.crc() {
            Some(crc) => {
                let mut key = crc.to_le_bytes().to_vec();
                key.extend_from_slice(name);
                add(journal::TAG_LIBRARY, 0, version.stamp(), &key);
            }
            None => add(journal::TAG_LIBRARY_DELETED, 0, version.stamp(), name),
        }
    }
    for (origin, clock) in store.collected_marks() {
        add(journal::TAG_COLLECTED, 0, Stamp::new(clock, origin), &[]);
    }
    for (db, key, version) in store.records() {
        match version {
            KeyVersion::Live(stamp) => add(TAG_LIVE, db, stamp, key),
            KeyVersion::Deleted { stamp, .. } => add(TAG_TOMBSTONE, db, stamp, key),
        }
    }
    add_merge_records(store, &mut add);
    // Last: a build that does not know the record stops at it, with every
    // key record read.
    if let Some(dropped) = store.dropped() {
        add(journal::TAG_DROPPED, 0, dropped, &[]);
    }
    if let Some((from, to)) = store.lost_own() {
        add(
            journal::TAG_LOST_OWN,
            0,
            Stamp::new(from, 0),
            &to.to_le_bytes(),
        );
    }
    add_ttl_records(store, &mut add);
    blobs
}

/// The TTL writes held above their keys' versions (last: a build that
/// does not know the record stops at it).
fn add_ttl_records(store: &VersionStore, add: &mut impl FnMut(u8, u32, Stamp, &[u8])) {
    for (db, key, (stamp, expiry)) in store.ttls.iter() {
        add(
            journal::TAG_TTL,
            db,
            stamp,
            &journal::ttl_record(key, expiry),
        );
    }
}

/// The merge metadata's records: the bound, the counters, the hashes.
fn add_merge_records(store: &VersionStore, add: &mut impl FnMut(u8, u32, Stamp, &[u8])) {
    use crate::converge::merge::hash_journal::{field_record, key_record};
    // What keys at rest folded first, then the bound itself: a replay sets
    // the bound to the last record of each node and keeps the highest as
    // what was folded (`Counters::set_bound`).
    let counters = &store.counters;
    for (node, clock) in counters.folded().iter().chain(counters.bound().iter()) {
        add(journal::TAG_MERGE_BOUND, 0, Stamp::new(clock, node), &[]);
    }
    for (db, key, state) in store.counters.states() {
        let bytes = crate::converge::merge::journaled::record_key(key, Some(&state));
        add(journal::TAG_COUNTER, db, Stamp::ZERO, &bytes);
    }
    for (db, key, held) in store.hashes.entries() {
        add(
            journal::TAG_HASH,
            db,
            Stamp::ZERO,
            &key_record(key, Some(held), true),
        );
        for (field, element) in held.elements() {
            add(
                journal::TAG_HASH,
                db,
                Stamp::ZERO,
                &field_record(key, field, Some(element)),
            );
        }
    }
}

/// Adds the keys changed and not yet stamped (the dirty set: a fork in the
/// middle of an event-loop iteration, a flush held behind a resting hot
/// key) as "changed" records: the load dates them (see
/// [`VersionStore::date_unstamped`]) instead of taking the value for the
/// older version the store still gives it.
fn add_unstamped(blobs: &mut Vec<Vec<u8>>) {
    let main = main_state();
    let Some(dirty) = main.dirty.try_get() else {
        return;
    };
    let mut blob = Vec::new();
    for op in dirty.pending() {
        match op {
            PendingOp::Key { db, key } => put_record(&mut blob, TAG_CHANGED, *db, Stamp::ZERO, key),
            PendingOp::FlushDb(db) => put_record(&mut blob, TAG_FLUSHED, *db, Stamp::ZERO, &[]),
            PendingOp::FlushAll => put_record(&mut blob, TAG_FLUSHED_ALL, 0, Stamp::ZERO, &[]),
            PendingOp::SwapDb(a, b, _) => {
                put_record(
                    &mut blob,
                    journal::TAG_SWAP,
                    *a,
                    Stamp::ZERO,
                    &b.to_le_bytes(),
                );
            }
            // The libraries in the RDB are compared with their versions
            // after the load: a change not stamped yet shows there.
            PendingOp::Functions | PendingOp::Library(_) => {}
        }
    }
    if !blob.is_empty() {
        blobs.push(blob);
    }
}

/// Why a blob could not be read.
pub type DecodeError = RecordError;

/// Adds the records of one blob to `store`. Tombstones come back
/// uncollectable until shipped again (the full sync after a start does).
///
/// # Errors
/// [`DecodeError`] on a truncated record or an unknown tag; records before
/// it are kept.
pub fn decode_into(blob: &[u8], store: &mut VersionStore) -> Result<(), DecodeError> {
    // The journal's records, read by the journal's own rule: the aux data
    // is a snapshot of the store in the same record language.
    let mut at = 0;
    for record in records(blob) {
        let r = record?;
        if !journal::apply_record(store, &r) {
            return Err(DecodeError {
                at,
                what: "unknown tag",
            });
        }
        at += crate::converge::journal::RECORD_HEAD + r.key.len();
    }
    Ok(())
}

extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    // Never wait: if this thread holds the state (a save triggered from
    // inside the module's own commands), save no versions rather than hang.
    let blobs = match main_state().replication.try_get() {
        Some(st) => {
            let mut blobs = encode(&st.versions);
            add_unstamped(&mut blobs);
            blobs
        }
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
    // What the node changes from now on is journaled into its AOF again.
    store.start_journal();
    if let Some(mut st) = main_state().replication.get() {
        st.versions = store;
    }
    crate::shared::with_shared(|s| s.clock.observe(newest));
    redis_module::logging::log_notice(format!(
        "rdmasync: loaded versions of {keys} keys from the RDB"
    ));
    raw::REDISMODULE_OK as c_int
}

/// Propagates the version changes journaled since the last call as one
/// `rdmasync.stamps` command in the current execution unit, after the data
/// commands it describes: into this node's AOF and to its replicas (Redis
/// drops it when there are neither). Main thread, a context that propagates
/// (an event, a timer, a command).
pub fn propagate_stamps(ctx: &Context, shared: &Shared, versions: &mut VersionStore) {
    if !versions.journal_pending() {
        return;
    }
    if crate::redis::server::clients_paused() {
        // Redis asserts on propagation during a pause: they go after it.
        return;
    }
    let records = versions.take_journal();
    // Versions kept in memory only (persist-versions=no), or nowhere to
    // propagate to (no AOF, never a replica): the records are dropped.
    let wanted =
        ctx.get_flags().contains(ContextFlags::AOF) || crate::redis::server::has_had_replicas();
    if !shared.config.persist_versions || !wanted {
        return;
    }
    let mut payload = Vec::with_capacity(records.len() + 1);
    payload.push(journal::FORMAT);
    payload.extend_from_slice(&records);
    ctx.replicate("rdmasync.stamps", &[&payload[..]]);
}

/// A data command replayed from the AOF changed `key`: it counts as
/// changed after its last stamp until the stamp record that follows it in
/// the file (if the node wrote one) is replayed.
pub fn loaded_change(db: u32, key: &[u8]) {
    if let Some(mut st) = main_state().replication.try_get() {
        st.versions.changed_unstamped(db, key);
    }
}

/// A SWAPDB replayed from the AOF: the versions move with the data now.
pub fn loaded_swap(a: u32, b: u32) {
    if let Some(mut st) = main_state().replication.try_get() {
        st.versions.swapped_while_loading(a, b);
    }
}

/// A FLUSHDB (`Some(db)`) or FLUSHALL replayed from the AOF: pending
/// until the stamp record that follows it, if the node wrote one.
pub fn loaded_flush(db: Option<u32>) {
    if let Some(mut st) = main_state().replication.try_get() {
        st.versions.flushed_unstamped(db);
    }
}

/// The load ended: keys it changed after their last stamp get a version
/// just after the newest stamp loaded, journaled into the AOF.
pub fn date_unstamped_changes(ctx: &Context, shared: &Shared) {
    let me = shared.node_id;
    let main = main_state();
    let Some(mut st) = main.replication.try_get() else {
        return;
    };
    // What survived of this node's own changes (its requests say so, and
    // the peer ships back what it holds after it).
    let own = st.versions.newest_of(me);
    // Changes of its own it lost may be stamped up to the clock it had
    // then, which may have run ahead of the wall clock by as much as a
    // peer's clock may be ahead: past both.
    let offset = crate::converge::clock::pack_millis(st.max_clock_offset_ms);
    st.loaded(own, shared.clock.now().saturating_add(offset));
    if st.versions.unstamped_len() == 0 {
        return;
    }
    let original = crate::redis::server::selected_db(ctx);
    let merged_again = merge_dated_again(ctx, &st);
    let (n, stamp) = st.versions.date_unstamped(me, |db, key| {
        crate::redis::server::select_db(ctx, db)
            && crate::redis::server::key_info(ctx, key).exists()
    });
    crate::redis::server::select_db(ctx, original);
    st.stamps_dated += n as u64;
    crate::shared::with_shared(|s| s.clock.observe(stamp.clock));
    redis_module::logging::log_notice(format!(
        "rdmasync: {n} loaded key(s) had changed after their last recorded stamp (the node went \
         down, or saved, in the event-loop iteration of the change); dated at clock {}",
        stamp.clock
    ));
    // Their records go out at the next flush before sleeping: propagating
    // here, inside DEBUG RELOAD/LOADAOF, would propagate that command too.
    if let Some(keys) = merged_again {
        if let Some(mut dirty) = main.dirty.get() {
            for (db, key) in keys {
                dirty.mark(db, &key);
            }
        }
    }
}

/// With the merges on, the keys a load dates changed without their merge
/// records too: the counter and element tables hold their state before the
/// change, and a state built from them (or a value the peer takes as at
/// rest, which adds nothing to a key it holds with metadata) would not
/// carry it. Those of them the tables hold, or that hold a hash, set or
/// sorted set now, are changed again at the next flush, as a whole write
/// of what they hold (recorded in the tables, and shipped as such), after
/// their dated version. Keys of other types keep their dated version only
/// (a whole-key value says all of them, and the peer's later writes keep
/// winning over it).
fn merge_dated_again(
    ctx: &Context,
    st: &crate::catchup::replication::Replication,
) -> Option<Vec<(u32, Vec<u8>)>> {
    let merges = crate::capture::increments::enabled() || crate::capture::fields::enabled();
    if !merges {
        return None;
    }
    let mut keys = st.versions.unstamped_keys();
    keys.retain(|(db, key)| {
        let held = st.versions.counters.contains(*db, key) || st.versions.hashes.contains(*db, key);
        let collection = crate::capture::fields::enabled()
            && crate::redis::server::select_db(ctx, *db)
            && crate::redis::server::kind_of_type(crate::redis::server::key_info(ctx, key).kind)
                .is_some();
        held || collection
    });
    Some(keys)
}

/// A child process was forked: when it rewrites the AOF without an RDB
/// preamble, its new base file carries no versions, so the new incremental
/// file (opened before the fork) gets a snapshot of the store at the next
/// flush before sleeping ([`write_due_snapshot`]): propagating here, inside
/// the command that forked (BGREWRITEAOF, `CONFIG SET appendonly yes`),
/// would make Redis propagate that command into the AOF and to replicas.
///
/// With `appendonly` off there is no incremental file: the snapshot is
/// kept in memory instead, for a `DEBUG LOADAOF` of that base file
/// ([`restore_rewrite_versions`]).
pub fn on_child_born(ctx: &Context, shared: &Shared) {
    let persistence = ctx.server_info("persistence");
    let flag = |name: &str| {
        persistence
            .field(name)
            .is_some_and(|v| v.to_string_lossy() == "1")
    };
    if !flag("aof_rewrite_in_progress") {
        return;
    }
    let main = main_state();
    let Some(mut st) = main.replication.try_get() else {
        log_warning("rdmasync: versions not kept for an AOF rewrite (state busy)");
        return;
    };
    st.rewrite_pending = Some(RewriteBase::InFiles);
    if !shared.config.persist_versions || aof_preamble(ctx) {
        return;
    }
    if flag("aof_enabled") {
        // Written from the next flush before sleeping (a pause defers it).
        if !crate::redis::server::clients_paused() {
            SNAPSHOT_DUE.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        return;
    }
    let mut blobs = encode(&st.versions);
    drop(st);
    add_unstamped(&mut blobs);
    let st = main.replication.try_get();
    if let Some(mut st) = st {
        st.rewrite_pending = Some(RewriteBase::Kept(blobs));
    }
}

/// A child exited: the snapshot its rewrite was to go with counts only if
/// the rewrite finished and succeeded (a killed rewrite leaves the current
/// time of a rewrite set; a failed one a status other than ok).
pub fn on_child_died(ctx: &Context) {
    let main = main_state();
    let Some(mut st) = main.replication.try_get() else {
        return;
    };
    let Some(base) = st.rewrite_pending.take() else {
        return;
    };
    let persistence = ctx.server_info("persistence");
    let field = |name: &str| persistence.field(name).map(|v| v.to_string_lossy());
    let done = field("aof_current_rewrite_time_sec").as_deref() == Some("-1")
        && field("aof_last_bgrewrite_status").as_deref() == Some("ok");
    if done {
        st.rewrite_versions = match base {
            RewriteBase::Kept(blobs) => Some(blobs),
            RewriteBase::InFiles => None,
        };
    }
}

/// At the end of a load from the AOF that brought no versions at all (its
/// base file was rewritten without preamble while `appendonly` was off):
/// the versions of that base, as the rewrite found them ([`on_child_born`]).
pub fn restore_rewrite_versions() {
    let main = main_state();
    let Some(mut st) = main.replication.try_get() else {
        return;
    };
    let nothing_loaded = st.versions.is_empty() && st.versions.floors().is_empty();
    if !st.loading_aof || !nothing_loaded {
        return;
    }
    let Some(blobs) = st.rewrite_versions.take() else {
        return;
    };
    // Into an unjournaled store, as from the RDB: the records are the
    // files' own, not changes to propagate.
    let mut restored = VersionStore::new();
    let mut bad = None;
    for blob in &blobs {
        if let Err(e) = decode_into(blob, &mut restored) {
            bad = Some(e.to_string());
        }
    }
    let keys = restored.len();
    let newest = restored.newest_clock();
    restored.start_journal();
    st.versions = restored;
    // The same base may be loaded again.
    st.rewrite_versions = Some(blobs);
    drop(st);
    crate::shared::with_shared(|s| s.clock.observe(newest));
    match bad {
        None => log_notice(format!(
            "rdmasync: versions of {keys} key(s) restored from the last AOF rewrite (appendonly \
             off: its base file carries none)"
        )),
        Some(e) => log_warning(format!(
            "rdmasync: versions of the last AOF rewrite not wholly restored: {e}"
        )),
    }
}

/// An AOF rewrite without preamble started since the last flush.
static SNAPSHOT_DUE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Before sleeping, ahead of the flush: the snapshot an AOF rewrite without
/// preamble wants ([`on_child_born`]), after the records still pending, and
/// with the keys changed but not yet stamped (their stamps follow at this
/// flush). Commands between the fork and now replay before it, unstamped
/// until the records after it.
pub fn write_due_snapshot(ctx: &Context, shared: &Shared) {
    if crate::redis::server::clients_paused()
        || !SNAPSHOT_DUE.swap(false, std::sync::atomic::Ordering::Relaxed)
    {
        return;
    }
    let main = main_state();
    let Some(mut st) = main.replication.try_get() else {
        log_warning("rdmasync: versions not written after an AOF rewrite (state busy)");
        return;
    };
    propagate_stamps(ctx, shared, &mut st.versions);
    let mut blobs = encode(&st.versions);
    add_unstamped(&mut blobs);
    drop(st);
    for (i, blob) in blobs.into_iter().enumerate() {
        let mut payload = vec![journal::FORMAT];
        if i == 0 {
            put_record(&mut payload, journal::TAG_SNAPSHOT, 0, Stamp::ZERO, &[]);
        }
        payload.extend_from_slice(&blob);
        ctx.replicate("rdmasync.stamps", &[&payload[..]]);
    }
}

/// Whether AOF rewrites write an RDB preamble (`aof-use-rdb-preamble`,
/// yes unless the reply says no).
fn aof_preamble(ctx: &Context) -> bool {
    match ctx.call("CONFIG", &["GET", "aof-use-rdb-preamble"]) {
        Ok(RedisValue::Array(v)) => !matches!(
            v.get(1),
            Some(RedisValue::SimpleString(s) | RedisValue::BulkString(s)) if s == "no"
        ),
        Ok(_) | Err(_) => true,
    }
}

/// `RDMASYNC.STAMPS <records>`: replays stamps from this node's AOF while it
/// loads, or from its master's stream when it is a replica. Clients are
/// refused: the stamps are the module's own record of what happened.
pub fn stamps_command(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| replay_stamps(ctx, &args)))
        .unwrap_or(Ok(RedisValue::SimpleStringStatic("OK")))
}

fn replay_stamps(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let from_disk_or_master = ContextFlags::LOADING | ContextFlags::REPLICATED;
    if !ctx.get_flags().intersects(from_disk_or_master) {
        return Err(RedisError::Str(
            "ERR rdmasync.stamps is internal: it carries the stamps of this node's changes \
             in its AOF and replication stream",
        ));
    }
    let [_, payload] = args else {
        return Err(RedisError::WrongArity);
    };
    // Never an error reply: a master's stream or the AOF loader only logs it.
    let main = main_state();
    let Some(mut st) = main.replication.try_get() else {
        log_warning("rdmasync: stamps not replayed (state busy)");
        return Ok(RedisValue::SimpleStringStatic("OK"));
    };
    match journal::replay(payload.as_slice(), &mut st.versions) {
        Ok(done) => {
            st.stamps_loaded += done.records;
            drop(st);
            crate::shared::with_shared(|s| s.clock.observe(done.newest));
        }
        Err(e) => log_warning(format!("rdmasync: stamps not wholly replayed: {e}")),
    }
    Ok(RedisValue::SimpleStringStatic("OK"))
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
        s.record_library(b"lib", Stamp::new(6, 2), Some(0xfeed), 0);
        s.record_library(b"old", Stamp::new(8, 1), None, 0);
        s.raise_merge_bound(1, 50);
        s.lower_merge_bound(1, 20);
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
        assert_eq!(back.tombstones(), 2);
        assert_eq!(back.floor(2), Stamp::new(4, 1));
        assert_eq!(back.floor_all(), Stamp::new(3, 2));
        assert_eq!(back.libraries().get(b"lib"), s.libraries().get(b"lib"));
        assert_eq!(back.libraries().get(b"old"), s.libraries().get(b"old"));
        // The bound as lowered, what keys at rest folded as it was.
        assert_eq!(back.counters.bound().clock(1), 20);
        assert_eq!(back.counters.folded().clock(1), 50);
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
