//! Flush the dirty set once per event-loop iteration: stamp each change with
//! the clock, record its version, snapshot it (DUMP payload and absolute
//! expiry, or "deleted") and queue the lot as one batch. A transaction or
//! script runs inside one iteration, so it ships as one atomic batch. When
//! the change cannot ship now (link down, queue full, catching up) it joins
//! the backlog, which `resend` drains in time slices, as it does a full sync.

use std::time::{Duration, Instant};

use redis_module::Context;

use crate::capture::counters;
use crate::capture::fields::Changes;
use crate::capture::flush_plan::{may_rest, plan, FlushFacts};
use crate::capture::hook::{ExpiredKey, Suppressed};
use crate::capture::hotkeys::is_costly;
use crate::capture::libraries;
use crate::capture::resend;
use crate::capture::state::{main_state, MainState};
use crate::catchup::fullsync::FullSync;
use crate::catchup::inflight::SentBatch;
use crate::catchup::peer::LinkView;
use crate::catchup::replication::{CatchUp, Replication};
use crate::catchup::snapshot::SyncKind;
use crate::converge::changes::PendingOp;
use crate::converge::version::Stamp;
use crate::ops::status::Stats;
use crate::proto::entry::{Batch, Encoding, Entry, Op};
use crate::proto::wire;
use crate::redis::server;
use crate::redis::snapshot::{Read, Reader, Snapshot};
use crate::shared::Shared;

/// Longest a flush spends on backlog and full sync before Redis serves
/// clients again.
const CATCH_UP_SLICE: Duration = Duration::from_millis(1);

/// An entry of this node's; its sequence number is given when it is queued
/// ([`push`]).
pub(crate) fn entry(db: u32, stamp: Stamp, op: Op) -> Entry {
    Entry {
        origin: stamp.node,
        seq: 0,
        clock: stamp.clock,
        db,
        op,
    }
}

/// The key's value as read, or its deletion.
pub(crate) fn op_of(key: Vec<u8>, snap: Option<Snapshot>) -> Op {
    match snap {
        Some(snap) => snap.into_op(key),
        None => Op::Delete { key },
    }
}

/// The pending op an entry was made from (to resend it).
pub(crate) fn pending_of(e: &Entry) -> Option<PendingOp> {
    Some(match &e.op {
        Op::Value { key, .. }
        | Op::Delete { key }
        | Op::Expire { key, .. }
        | Op::Counter { key, .. }
        | Op::Fields { key, .. }
        | Op::Append { key, .. } => PendingOp::Key {
            db: e.db,
            key: key.clone(),
        },
        Op::FlushDb => PendingOp::FlushDb(e.db),
        Op::FlushAll => PendingOp::FlushAll,
        Op::Library { name, .. } | Op::LibraryDelete { name } => PendingOp::Library(name.clone()),
        Op::SwapDb { other } => {
            PendingOp::SwapDb(e.db, *other, Some(Stamp::new(e.clock, e.origin)))
        }
        // Sync notices: a sync cut off starts over whole.
        Op::Ack { .. }
        | Op::SyncRequest { .. }
        | Op::SweepStart { .. }
        | Op::SweepEnd { .. }
        | Op::Bound { .. } => return None,
    })
}

/// Before `entries` ship: the TTL writes that follow their values
/// (`capture::ttl`), and the big strings they ship whole become the bases
/// of appends (`capture::appends`).
fn with_ttl_writes_and_bases(st: &mut Replication, entries: &mut Vec<Entry>) {
    crate::capture::ttl::with_ttl_writes(st, entries);
    crate::capture::appends::bases_of(st, entries);
}

/// Queues `entries` as one batch for the link the main thread knows now,
/// numbered after the last entry queued. On success tombstones are marked
/// shipped and, when `resend`, the changes are kept until the peer
/// acknowledges them; returns the last sequence number (0: nothing to
/// queue). On failure the entries come back and no number is used.
pub(crate) fn push(
    shared: &Shared,
    st: &mut Replication,
    mut entries: Vec<Entry>,
    resend: bool,
) -> Result<u64, Vec<Entry>> {
    refuse_unframeable(shared, st, &mut entries);
    if entries.is_empty() {
        return Ok(0);
    }
    with_ttl_writes_and_bases(st, &mut entries);
    if entries.iter().any(|e| e.is_data()) {
        let notice = counters::bound_notice(shared, st);
        entries.insert(0, entry(0, Stamp::new(0, shared.node_id), notice));
    }
    let first_seq = shared.last_seq() + 1;
    for (seq, e) in (first_seq..).zip(entries.iter_mut()) {
        e.seq = seq;
    }
    let count = entries.len() as u64;
    let last_seq = first_seq + count - 1;
    // One clock reading for the batch: the entries go out together.
    let mut sent = resend.then(|| SentBatch::new(Instant::now()));
    if let Some(sent) = sent.as_mut() {
        for e in &entries {
            sent.record(e);
        }
    }
    let tombstones = tombstones_of(&entries);
    counters::as_states(st, &mut entries);
    // An ack alone is never acknowledged: only what the peer applies is.
    let acknowledged = entries
        .iter()
        .any(|e| e.is_data() || matches!(e.op, Op::Bound { .. }));
    shared
        .queue
        .push(st.peer.link().epoch, Batch { entries })
        .map_err(|b| {
            let mut entries = b.entries;
            entries.retain(|e| !matches!(e.op, Op::Bound { .. }));
            entries
        })?;
    shared.seqs_queued(count);
    if let Some(coverage) = st.coverage().filter(|_| acknowledged) {
        st.own_bound.pushed(last_seq, coverage);
    }
    // Every tombstone shipped (live, resent or in a full sync) becomes
    // collectable once the peer acknowledges the entry that carried it.
    for (db, key, stamp, seq) in tombstones {
        match db {
            Some(db) => st.versions.mark_shipped(db, &key, stamp, seq),
            None => st.versions.mark_library_shipped(&key, stamp, seq),
        }
    }
    match sent {
        Some(sent) => st.shipped(sent, last_seq),
        None => st.peer.pushed(last_seq),
    }
    Ok(last_seq)
}

/// The deletes among `entries`: `(db, key, stamp, seq)`, the database
/// `None` for a function library's. A key's merge state (a hash, set or
/// sorted set with element metadata) may carry its delete too: the
/// tombstone at its stamp, if any, is marked (see
/// `VersionStore::mark_shipped`). Without that, a held key deleted
/// kept its tombstone for good.
fn tombstones_of(entries: &[Entry]) -> Vec<(Option<u32>, Vec<u8>, Stamp, u64)> {
    entries
        .iter()
        .filter_map(|e| {
            let db = match &e.op {
                Op::Delete { key } | Op::Fields { key, .. } | Op::Counter { key, .. } => {
                    (Some(e.db), key)
                }
                Op::LibraryDelete { name } => (None, name),
                _ => return None,
            };
            Some((db.0, db.1.clone(), Stamp::new(e.clock, e.origin), e.seq))
        })
        .collect()
}

/// Takes out of `entries` those the peer cannot hold: those no frame of
/// its ring can carry (a key longer than a frame, a value over 1 GiB), and
/// DUMP payloads its server would not restore (an RDB format newer than
/// its own: a stream, a module type or a hash with field TTLs going from
/// Valkey to Redis 7, or from Redis 8 to Valkey 9; the function libraries
/// cross as their code). They are refused here, before they are numbered, so that
/// the peer's acks never skip them; the refusal is counted
/// (`entries_refused`), logged and kept as `last_error`, and the key
/// differs between the nodes until it is written or deleted again
/// (docs/limitations.md).
fn refuse_unframeable(shared: &Shared, st: &mut Replication, entries: &mut Vec<Entry>) {
    let link = st.peer.link();
    if link.max_frame == 0 && link.peer_rdb == 0 {
        return;
    }
    if entries.iter().all(|e| why_refused(e, link).is_none()) {
        return;
    }
    entries.retain(|e| {
        let Some((msg, format)) = why_refused(e, link) else {
            return true;
        };
        Stats::add(&shared.stats.entries_refused, 1);
        // A change the peer's ring cannot carry caps what our acks claim
        // of our changes (a bigger ring would take it: a restarted peer's
        // sync ships it then). One its server cannot restore does not:
        // while the pair mixes servers no sync would carry it, and a cap
        // would hold back the merge bound and every collection for good.
        if e.origin == shared.node_id && !format {
            st.not_held(e.clock, true);
        }
        log_refusal(st, &msg);
        shared.stats.set_error(msg);
        false
    });
}

/// The log says a refusal at most this often, with the count since.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// Logs a refused change, unless one was logged less than
/// `REFUSAL_LOG_EVERY` ago (a stream written at 10,000 a second on the
/// newer server of a mixed pair is refused as often).
fn log_refusal(st: &mut Replication, msg: &str) {
    let (last, since) = &mut st.refusals_logged;
    *since += 1;
    if last.is_some_and(|at| at.elapsed() < REFUSAL_LOG_EVERY) {
        return;
    }
    let more = match *since - 1 {
        0 => String::new(),
        n => format!(" ({n} more refused since the last message)"),
    };
    redis_module::logging::log_warning(format!("rdmasync: {msg}{more}"));
    *last = Some(Instant::now());
    *since = 0;
}

/// Why the peer on `link` cannot hold the change `e` (`None`: it can),
/// and whether it is its RDB format (else its size).
fn why_refused(e: &Entry, link: LinkView) -> Option<(String, bool)> {
    let max_frame = link.max_frame;
    if max_frame != 0 && !wire::can_frame(e, max_frame) {
        let (_, key, value) = wire::entry_header(e);
        let msg = format!(
            "change of a key of {} bytes with {} value bytes refused: the peer's ring takes frames \
             of at most {max_frame} bytes (keys must fit one, values at most 1 GiB); the key \
             differs on the peer until it is written again",
            key.len(),
            value.len()
        );
        return Some((msg, false));
    }
    let (what, payload) = match &e.op {
        Op::Value {
            payload,
            encoding: Encoding::Dump,
            ..
        } => (crate::redis::dump::type_name(payload), payload),
        _ => return None,
    };
    let written = crate::redis::dump::payload_rdb_version(payload)?;
    if crate::redis::dump::restorable(written, link.peer_rdb) {
        return None;
    }
    let key = match &e.op {
        Op::Value { key, .. } => format!("key '{}' ", String::from_utf8_lossy(key)),
        _ => String::new(),
    };
    let msg = format!(
        "change of {key}refused: this server writes a {what} in RDB format {written}, which the \
         peer's server (RDB format {}) does not restore; it differs on the peer until it is \
         written again as a type that can cross (docs/operations.md, mixed pairs)",
        link.peer_rdb
    );
    Some((msg, true))
}

/// Whether this node's changes not stamped yet must be flushed before the
/// peer's `batch` applies: when the batch could overwrite or move one of
/// them (see [`DirtySet::touched_by`]), or when expired keys wait for their
/// tombstones. Otherwise they keep their place: a resting hot key stays
/// held (acks and sync requests write nothing at all).
pub(crate) fn local_changes_go_before(batch: &Batch) -> bool {
    let main = main_state();
    main.dirty.get().is_some_and(|d| d.touched_by(batch))
        || ((main.expired.get().is_some_and(|e| !e.is_empty())
            || crate::capture::hook::silent_unresolved())
            && batch.entries.iter().any(Entry::is_data))
}

/// Keys read together (one MGET for their strings), at most.
const READ_RUN: usize = 256;

/// Consecutive changed keys of one database, read together.
struct ReadRun {
    db: u32,
    keys: Vec<Vec<u8>>,
}

impl ReadRun {
    /// Reads the keys, stamps each change in order and records its version.
    /// A hash, set or sorted set changed only element by element
    /// (`merge-elements`) ships those elements, read alone.
    fn ship(
        &mut self,
        reader: &Reader,
        shared: &Shared,
        st: &mut Replication,
        out: &mut Vec<Entry>,
    ) {
        if self.keys.is_empty() {
            return;
        }
        let db = self.db;
        server::select_db(reader.ctx(), db);
        let keys = std::mem::take(&mut self.keys);
        st.versions.warm(keys.iter().map(|k| (db, k.as_slice())));
        let wall = shared.clock.wall();
        let keys = ship_field_changes(reader.ctx(), shared, st, (db, wall), keys, out);
        let keys =
            crate::capture::appends::ship_appends(reader.ctx(), shared, st, (db, wall), keys, out);
        let reads = reader.read_many(&keys);
        let main = main_state();
        let mut window = main.increments.get();
        let mut failed = Vec::new();
        for (key, read) in keys.into_iter().zip(reads) {
            let sum = window.as_mut().and_then(|w| w.take(db, &key));
            let snap = match read {
                Read::Value(snap) => Some(snap),
                Read::Absent => None,
                Read::Failed => {
                    failed.push(key);
                    continue;
                }
            };
            let stamp = Stamp::new(shared.clock.tick(wall), shared.node_id);
            let change = (db, key, stamp);
            if let Err(key) = ship_read(reader.ctx(), shared, st, change, sum, snap, out) {
                failed.push(key);
            }
        }
        read_again_later(shared, db, failed);
    }
}

/// The change of `key` the read found (`snap`; `None`: absent), stamped
/// `stamp`: records its version and queues what ships; `Err` with the key
/// when it must be read again.
fn ship_read(
    ctx: &Context,
    shared: &Shared,
    st: &mut Replication,
    (db, key, stamp): (u32, Vec<u8>, Stamp),
    sum: Option<i128>,
    snap: Option<Snapshot>,
    out: &mut Vec<Entry>,
) -> Result<(), Vec<u8>> {
    if let Some(snap) = &snap {
        rest_if_costly(shared, db, &key, snap.read_time, snap.payload.len());
    }
    let merged_hash = (st.versions.hashes.contains(db, &key) || snap.as_ref().is_some_and(merges))
        && crate::capture::fields::enabled();
    let state = match merged_hash {
        true => {
            match crate::capture::hashes::whole_change(ctx, shared, st, (db, &key), stamp, true) {
                Ok(state) => state,
                Err(()) => return Err(key),
            }
        }
        false => None,
    };
    st.last_local_stamp = stamp.clock;
    // Only a counter's first increment needs it (its base).
    let before = sum.and_then(|_| st.versions.get(db, &key));
    if snap.is_some() {
        st.versions.record_write(db, &key, stamp);
    } else {
        st.versions.record_delete(db, &key, stamp, 0);
    }
    st.note_local_write((db, &key), stamp);
    let change = counters::LocalChange {
        db,
        key: &key,
        stamp,
        sum,
        before,
        snap: snap.as_ref(),
    };
    counters::local_change(shared, st, change);
    out.push(entry(db, stamp, state.unwrap_or_else(|| op_of(key, snap))));
    Ok(())
}

/// Whether a read value is of a type whose elements merge (a DUMP payload
/// of a hash without field TTLs, a set or a sorted set).
fn merges(snap: &Snapshot) -> bool {
    snap.encoding == crate::proto::entry::Encoding::Dump
        && crate::redis::dump::merged_kind(&snap.payload).is_some()
}

/// Ships the keys of `db` changed only field by field since the last flush
/// (`merge-elements`): each stamped, its changed fields read alone; returns
/// the other keys (and any that holds no hash any more), to read whole.
fn ship_field_changes(
    ctx: &Context,
    shared: &Shared,
    st: &mut Replication,
    (db, wall): (u32, u64),
    keys: Vec<Vec<u8>>,
    out: &mut Vec<Entry>,
) -> Vec<Vec<u8>> {
    if !crate::capture::fields::enabled() {
        return keys;
    }
    let main = main_state();
    let Some(mut window) = main.fields.get() else {
        return keys;
    };
    let mut whole = Vec::with_capacity(keys.len());
    for key in keys {
        let Some(fields) = window.take(db, &key) else {
            whole.push(key);
            continue;
        };
        let stamp = Stamp::new(shared.clock.tick(wall), shared.node_id);
        let before = st.versions.get(db, &key);
        let ttl_only = crate::capture::ttl::ttl_only(&fields);
        match crate::capture::hashes::field_change(
            ctx,
            shared,
            st,
            (db, &key),
            stamp,
            fields,
            before,
        ) {
            Some(op) => {
                st.last_local_stamp = stamp.clock;
                st.versions.record_write(db, &key, stamp);
                st.note_local_write((db, &key), stamp);
                out.push(entry(db, stamp, op));
            }
            None => match ttl_only
                .then(|| crate::capture::ttl::ttl_change(ctx, st, (db, &key), stamp))
                .flatten()
            {
                Some(op) => {
                    st.last_local_stamp = stamp.clock;
                    out.push(entry(db, stamp, op));
                }
                None => whole.push(key),
            },
        }
    }
    whole
}

/// A read of `key` of `db` that took `cost` for `bytes`: a costly one is
/// counted and the key rests (see `hotkeys`).
pub(crate) fn rest_if_costly(shared: &Shared, db: u32, key: &[u8], cost: Duration, bytes: usize) {
    if !is_costly(cost, bytes) {
        return;
    }
    Stats::add(&shared.stats.costly_reads, 1);
    Stats::add(&shared.stats.costly_read_us, cost.as_micros() as u64);
    let max_rest = Duration::from_millis(shared.config.hot_key_rest_ms);
    if let Some(mut hot) = main_state().hot.get() {
        hot.snapshotted(db, key, cost, Instant::now(), max_rest);
    }
}

/// New changes of `db` whose keys could not be read: unread is not
/// deleted, so nothing ships for them now; they stay dirty and are read
/// (and stamped) at the next flush.
fn read_again_later(shared: &Shared, db: u32, keys: Vec<Vec<u8>>) {
    if keys.is_empty() {
        return;
    }
    count_read_failures(shared, keys.len());
    let main = main_state();
    let Some(mut dirty) = main.dirty.get() else {
        return;
    };
    for key in keys {
        dirty.mark(db, &key);
    }
}

pub(crate) fn count_read_failures(shared: &Shared, n: usize) {
    Stats::add(&shared.stats.read_failures, n as u64);
    shared.stats.set_error(format!(
        "capture: reading {n} changed key(s) failed; retrying"
    ));
}

/// Stamps new local changes and records their versions; returns the
/// entries to ship now (`direct`) or defers them to the backlog.
fn record_local(
    reader: &Reader,
    shared: &Shared,
    st: &mut Replication,
    ops: Vec<PendingOp>,
    direct: bool,
) -> Vec<Entry> {
    let mut entries = Vec::new();
    let mut deferred = Vec::new();
    let mut run = ReadRun {
        db: 0,
        keys: Vec::new(),
    };
    let mut library_reads = libraries::LibraryReads::new(reader.ctx(), &ops);
    for op in ops {
        if direct {
            if let PendingOp::Key { db, key } = op {
                if db != run.db || run.keys.len() >= READ_RUN {
                    run.ship(reader, shared, st, &mut entries);
                    run.db = db;
                }
                run.keys.push(key);
                continue;
            }
            // Everything before this op is stamped before it.
            run.ship(reader, shared, st, &mut entries);
        }
        let stamp = Stamp::new(shared.clock.now(), shared.node_id);
        st.last_local_stamp = stamp.clock;
        if matches!(op, PendingOp::Functions | PendingOp::Library(_)) {
            let ctx = reader.ctx();
            for wire in libraries::record(&mut library_reads, ctx, shared, st, &op, stamp) {
                let e = entry(0, stamp, wire);
                match pending_of(&e) {
                    Some(later) if !direct => deferred.push(later),
                    _ => entries.push(e),
                }
            }
            continue;
        }
        match record_change(reader, shared, st, &op, stamp) {
            Some((db, wire)) if direct => entries.push(entry(db, stamp, wire)),
            Some(_) => deferred.push(op),
            // A key is read when it ships (from the backlog).
            None if matches!(op, PendingOp::Key { .. }) => deferred.push(op),
            None => {}
        }
    }
    run.ship(reader, shared, st, &mut entries);
    library_reads.finish(reader.ctx());
    if !deferred.is_empty() {
        st.defer(deferred);
    }
    entries
}

/// Records the version of one local change stamped `stamp`; returns the
/// entry that ships it, except for a key (read when it ships) and for
/// function libraries that did not change.
fn record_change(
    reader: &Reader,
    shared: &Shared,
    st: &mut Replication,
    op: &PendingOp,
    stamp: Stamp,
) -> Option<(u32, Op)> {
    match *op {
        PendingOp::Key { db, ref key } => {
            record_key_change(reader, shared, st, db, key, stamp);
            None
        }
        PendingOp::FlushDb(db) => {
            st.versions.flush(Some(db), stamp);
            // Nothing here is newer than a flush made here.
            let _ = st.versions.counters.take_trimmed();
            Some((db, Op::FlushDb))
        }
        PendingOp::FlushAll => {
            st.versions.flush(None, stamp);
            let _ = st.versions.counters.take_trimmed();
            Some((0, Op::FlushAll))
        }
        PendingOp::SwapDb(a, b, _) => {
            if st.swap_dbs(a, b) {
                log_sweep_abandoned("a SWAPDB ran here during the sync");
            }
            Some((a, Op::SwapDb { other: b }))
        }
        // Stamped with their reads in `record_local`.
        PendingOp::Functions | PendingOp::Library(_) => None,
    }
}

/// The version of a changed key shipped later from the backlog (read then,
/// as it is then); a counter's change is recorded in its table now.
fn record_key_change(
    reader: &Reader,
    shared: &Shared,
    st: &mut Replication,
    db: u32,
    key: &[u8],
    stamp: Stamp,
) {
    server::select_db(reader.ctx(), db);
    let before = st.versions.get(db, key);
    let fields = crate::capture::fields::enabled()
        .then(|| main_state().fields.get().and_then(|mut w| w.take(db, key)))
        .flatten();
    // Read whole from the backlog: not shipped as appended bytes.
    if let Some(mut window) = main_state().appends.get() {
        window.take(db, key);
    }
    if fields.as_ref().is_some_and(crate::capture::ttl::ttl_only)
        && crate::capture::ttl::ttl_change(reader.ctx(), st, (db, key), stamp).is_some()
    {
        // Its TTL write is recorded: the backlog ships the value at its
        // version, and that write after it.
        return;
    }
    let exists = reader.exists(key);
    if exists {
        st.versions.record_write(db, key, stamp);
    } else {
        st.versions.record_delete(db, key, stamp, 0);
    }
    st.note_local_write((db, key), stamp);
    let sum = main_state()
        .increments
        .get()
        .and_then(|mut w| w.take(db, key));
    if sum.is_some() || st.versions.counters.contains(db, key) {
        // Shipped later from the backlog, as its state then: the
        // change is recorded in the table now (a counter's read is
        // a short string).
        let snap = match reader.read_one(key) {
            Read::Value(snap) => Some(snap),
            _ => None,
        };
        let change = counters::LocalChange {
            db,
            key,
            stamp,
            sum,
            before,
            snap: snap.as_ref(),
        };
        counters::local_change(shared, st, change);
    }
    record_hash_change(reader.ctx(), shared, st, (db, key), stamp, (before, fields));
}

/// A change of `key` that ships later from the backlog, as its state then:
/// with `merge-elements`, a merged key's change is recorded in its table now
/// (fields changed alone read alone).
fn record_hash_change(
    ctx: &Context,
    shared: &Shared,
    st: &mut Replication,
    (db, key): (u32, &[u8]),
    stamp: Stamp,
    (before, fields): (
        Option<crate::converge::version::KeyVersion>,
        Option<Changes>,
    ),
) {
    if !crate::capture::fields::enabled() {
        return;
    }
    if let Some(fields) = fields {
        let change = (db, key);
        if crate::capture::hashes::field_change(ctx, shared, st, change, stamp, fields, before)
            .is_some()
        {
            return;
        }
    }
    let merges = server::kind_of_type(server::key_info(ctx, key).kind).is_some();
    if merges || st.versions.hashes.contains(db, key) {
        // Nothing read now (but a key arriving in slices: see
        // `hashes_arriving`): the backlog reads the whole key when it ships.
        let _ = crate::capture::hashes::whole_change(ctx, shared, st, (db, key), stamp, false);
    }
}

fn on_wake_timer(_ctx: &Context, (): ()) {
    if let Some(mut st) = main_state().replication.get() {
        st.wake_pending = false;
    }
}

/// Makes sure the event loop comes back soon while catching up (an idle
/// server would otherwise sleep up to 100 ms between iterations).
fn keep_awake(ctx: &Context, st: &mut Replication) {
    if !st.wake_pending {
        st.wake_pending = true;
        ctx.create_timer(Duration::from_millis(1), on_wake_timer, ());
    }
}

/// The link thread says link `link` is up (its `LinkUp` event, in order
/// with what came over the links): catch up on it at once, before any ack
/// that came over it is taken.
pub(crate) fn link_came_up(link: LinkView) {
    if let Some(mut st) = main_state().replication.get() {
        st.peer.progress.link_came_up(link);
        // A replica ships nothing of its own; once promoted, its first
        // flush catches up on this link (it is still new to the peer's
        // progress).
        if !server::is_replica_or_loading() {
            on_link_up(&mut st, link);
        }
    }
}

/// A new link is up: resend what was not acknowledged, and start a full
/// sync when one is due.
fn on_link_up(st: &mut Replication, link: LinkView) {
    st.peer.node_id = link.peer_node;
    let how = st.link_up(link);
    redis_module::logging::log_notice(match how {
        CatchUp::Full => "rdmasync: catching up with the peer: full sync".to_owned(),
        CatchUp::Since => {
            "rdmasync: catching up with the peer: sync since its watermark".to_owned()
        }
        CatchUp::Partial => format!(
            "rdmasync: catching up with the peer: partial sync of {} changes",
            st.peer.backlog.len()
        ),
    });
}

/// Asks the peer for what this node misses if it lost state, or answers
/// the peer's request with one of its own (at link-up, and at every flush
/// after while the queue had no room for the request). The request says
/// what this node holds: the peer's changes up to its watermark, its own
/// up to its newest surviving stamp.
fn ask_for_sync(shared: &Shared, st: &mut Replication) {
    let Some(answer) = st.peer.progress.request_to_send() else {
        return;
    };
    let me = shared.node_id;
    let since = if answer && st.peer.progress.answer_asks_all() {
        0
    } else {
        st.versions.covered(st.peer.node_id)
    };
    let (received, own) = if answer {
        // It lost nothing of ours: none of ours is to come back, unless a
        // load here lost some that the peer has not sent back yet (it
        // acknowledged our own request, then lost state before answering
        // it: its request does not know ours).
        (0, st.lost_window.map_or(u64::MAX, |(from, _)| from))
    } else {
        let own = st.own_durable.unwrap_or_else(|| st.versions.newest_of(me));
        (st.peer.received_at_loss(), own)
    };
    let op = Op::SyncRequest {
        received,
        since,
        own,
        answer,
    };
    let ask = entry(0, Stamp::new(since, me), op);
    if let Ok(seq) = push(shared, st, vec![ask], false) {
        st.peer.sync_request_sent(seq, answer);
    }
}

/// Starts the sync the peer's request (or a link drop) made due: a full
/// one, or one since the watermarks the peer gave.
fn start_due_sync(reader: &Reader, shared: &Shared, st: &mut Replication) {
    let held = main_state().faults.get().is_some_and(|f| f.syncs_held());
    if st.peer.progress.own_request_due() || held {
        return;
    }
    let sync = match st.peer.progress.sync_due() {
        None => return,
        Some(SyncKind::Full) => FullSync::new(reader.databases()).sweeping(st.sweep_floors()),
        Some(SyncKind::Since { since, own }) => {
            let peer = st.peer.node_id;
            FullSync::since_watermark(&st.versions, shared.node_id, peer, since, own)
        }
    };
    st.peer.start_full_sync(sync);
}

/// Ships what changed since the last call, unless a key resting after a
/// costly snapshot is among the changes: then they all wait, in order, for
/// a later iteration (see `hotkeys`). Called before the event loop sleeps.
pub fn flush(ctx: &Context, shared: &Shared) {
    flush_changes(ctx, shared, true, true);
}

/// Ships every change now: local changes are stamped before any remote
/// entry is applied.
pub fn flush_now(ctx: &Context, shared: &Shared) {
    flush_changes(ctx, shared, false, true);
}

/// Ships every change now, before an RDB or AOF rewrite records the data
/// (so the versions it saves match the values). Skipped when the module's
/// own code holds the convergence state (a save inside one of its commands).
pub fn flush_before_save(ctx: &Context, shared: &Shared) {
    // Inside a transaction or script (FLUSHALL with save points, DEBUG
    // RELOAD in MULTI) it would ship half of it: the lot ships at the end.
    let atomic = redis_module::ContextFlags::MULTI | redis_module::ContextFlags::LUA;
    if ctx.get_flags().intersects(atomic) {
        return;
    }
    let free = main_state().replication.try_get().is_some();
    if free {
        // Their stamps wait for the flush before sleeping: propagated from
        // inside the command that saves (FLUSHALL with save points), they
        // would precede that command in the AOF. The file being written
        // has them as aux data.
        flush_changes(ctx, shared, false, false);
    }
}

/// Stamps and ships what changed (`may_wait`: unless a resting hot key
/// holds it back); `propagate`: the stamps go into the AOF and to replicas
/// now (else at the next flush that may).
/// A replica's data comes from its master: it has nothing of its own to
/// ship, and drops the `n` changes taken (and what the element window
/// held of them).
fn drop_changes(shared: &Shared, main: &crate::capture::state::MainState, n: usize) {
    Stats::add(&shared.stats.entries_dropped, n as u64);
    if let Some(mut window) = main.fields.get() {
        window.clear();
    }
    if let Some(mut window) = main.appends.get() {
        window.clear();
    }
}

fn flush_changes(ctx: &Context, shared: &Shared, may_wait: bool, propagate: bool) {
    crate::capture::hook::resolve_silent(ctx);
    crate::capture::hook::settle_exec(false);
    let main = main_state();
    // Taken first: held further up the stack, the changes stay recorded.
    let Some(mut st) = main.replication.get() else {
        return;
    };
    let link = st.peer.link();
    let (link_up, epoch) = (link.up, link.epoch);
    let resting = || main.hot.get().is_some_and(|h| !h.is_empty());
    let may_wait = may_rest(may_wait, link_up, resting, || st.lets_changes_rest(epoch));
    let (ops, held) = take_changes(&main, may_wait);
    if held {
        Stats::add(&shared.stats.flushes_deferred, 1);
    }
    if server::is_replica_or_loading() {
        drop_changes(shared, &main, ops.len());
        return;
    }
    let expired = main.expired.get().map(|mut e| std::mem::take(&mut *e));
    let expired = expired.unwrap_or_default();
    let facts = FlushFacts {
        changes: !ops.is_empty(),
        expired: !expired.is_empty(),
        link_up,
        new_link: link_up && st.peer.is_new_link(epoch),
        link_work: link_up && st.has_link_work(),
        held,
        stamps_pending: propagate && st.versions.journal_pending(),
    };
    let Some(steps) = plan(facts) else {
        return;
    };
    // Snapshots and lazy expiry raise events that are not local writes.
    let _guard = Suppressed::new();
    let reader = Reader::new(ctx).failing(main.failing_reads());
    let original_db = server::selected_db(ctx);
    record_expired(ctx, &reader, &mut st, expired);
    if steps.on_link_up {
        on_link_up(&mut st, link);
    }
    if steps.link_steps {
        start_syncs(&reader, shared, &mut st);
    }
    ship_local(&reader, shared, &mut st, ops, link_up);
    bound_tombstones(shared, &mut st);
    if steps.link_steps {
        catch_up_and_ack(ctx, &reader, shared, &mut st);
    }
    if steps.keep_awake {
        keep_awake(ctx, &mut st);
    }
    // The stamps go into the AOF and to replicas with this iteration's data.
    if propagate {
        crate::capture::persist::propagate_stamps(ctx, shared, &mut st.versions);
    }
    server::select_db(ctx, original_db);
}

/// A sweep being received from the peer ends without deleting anything.
pub(crate) fn log_sweep_abandoned(why: &str) {
    redis_module::logging::log_warning(format!(
        "rdmasync: the peer's sweeping full sync will delete nothing here: {why}; keys it \
         deleted while away may stay here until it sweeps again"
    ));
}

/// Past `max-tombstones` the oldest of this node's own go, counted and
/// logged, and the peer is owed a full sync that sweeps.
fn bound_tombstones(shared: &Shared, st: &mut Replication) {
    let dropped = st.bound_tombstones(shared.node_id) as u64;
    if dropped == 0 {
        return;
    }
    let before = shared
        .stats
        .tombstones_dropped
        .fetch_add(dropped, std::sync::atomic::Ordering::Relaxed);
    let every = st.tombstone_limit as u64;
    if before == 0 || before / every != (before + dropped) / every {
        redis_module::logging::log_warning(format!(
            "rdmasync: more than {every} tombstones wait for the peer (max-tombstones): \
             {} of the oldest dropped so far; the peer gets a full sync that deletes their keys",
            before + dropped
        ));
    }
}

/// Records this node's changes `ops` and queues them for the sender,
/// straight when the link is up and nothing waits before them.
fn ship_local(
    reader: &Reader<'_>,
    shared: &Shared,
    st: &mut Replication,
    ops: Vec<PendingOp>,
    link_up: bool,
) {
    let direct = link_up && st.peer.backlog.is_empty() && !shared.queue.is_full();
    let entries = record_local(reader, shared, st, ops, direct);
    if let Err(entries) = push(shared, st, entries, true) {
        // Cannot happen after `is_full` said no (single producer): keep them.
        Stats::add(&shared.stats.queue_overflows, 1);
        let ops = entries.iter().filter_map(pending_of).collect();
        st.defer(ops);
    }
}

/// Takes the dirty set, unless `may_wait` and a resting hot key in it holds
/// the lot back; returns the changes taken and whether they were held.
fn take_changes(main: &MainState, may_wait: bool) -> (Vec<PendingOp>, bool) {
    let Some(mut dirty) = main.dirty.get() else {
        return (Vec::new(), false);
    };
    if dirty.is_empty() {
        return (Vec::new(), false);
    }
    if may_wait {
        let Some(mut hot) = main.hot.get() else {
            return (Vec::new(), false);
        };
        let pending = |db: u32, k: &[u8]| {
            if db == crate::capture::hotkeys::FUNCTIONS_DB {
                dirty.libraries_pending()
            } else {
                dirty.contains(db, k)
            }
        };
        if !hot.is_empty() && hot.holds_back(Instant::now(), dirty.len(), pending) {
            return (Vec::new(), true);
        }
    }
    (dirty.take(), false)
}

/// Tombstones for keys that expired, unless written again since.
fn record_expired(ctx: &Context, reader: &Reader, st: &mut Replication, expired: Vec<ExpiredKey>) {
    for (db, key) in expired {
        server::select_db(ctx, db);
        // Written again since it expired: that write has its own version,
        // and made a new key: it ships whole, not as elements of the old.
        if !reader.exists(&key) {
            let gc_after = st.peer.last_pushed;
            st.versions.expired(db, &key, gc_after);
        } else if let Some(mut window) = main_state().fields.get() {
            window.take(db, &key);
        }
    }
}

/// Asks for, answers and starts the syncs the link needs.
fn start_syncs(reader: &Reader, shared: &Shared, st: &mut Replication) {
    ask_for_sync(shared, st);
    if st.peer.progress.request_waits() {
        // Every key here has a version: a sync since a watermark misses
        // nothing.
        let versioned = reader.total_keys() <= st.versions.live_len() as u64;
        let peer = st.peer.node_id;
        st.take_sync_request(versioned, shared.node_id, peer);
        ask_for_sync(shared, st);
    }
    start_due_sync(reader, shared, st);
}

/// One slice of catching up (backlog, unread keys, full sync), then the ack
/// and the collection of acknowledged tombstones.
fn catch_up_and_ack(ctx: &Context, reader: &Reader, shared: &Shared, st: &mut Replication) {
    let deadline = Instant::now() + CATCH_UP_SLICE;
    resend::drain_backlog(reader, shared, st, deadline);
    resend::retry_unread(reader, shared, st);
    resend::advance_full_sync(reader, shared, st, deadline);
    if st.last_local_stamp == 0 && st.coverage().is_some() {
        // No change of ours since this node started, and in step: every
        // change of ours up to now is held by the peer (or was shipped),
        // and later ones are stamped after now.
        st.last_local_stamp = shared.clock.now();
    }
    let acked = send_ack(shared, st);
    counters::probe(shared, st);
    st.collect_tombstones(acked);
    if st.coverage().is_some_and(|c| c > st.peer.coverage_sent()) {
        // An ack held by the interval: come back for it even if idle.
        keep_awake(ctx, st);
    }
    if st.peer.catching_up() {
        if shared.queue.is_full() {
            Stats::add(&shared.stats.queue_overflows, 1);
        }
        keep_awake(ctx, st);
    }
}

/// Queues the ack that is due, if any; whether one was queued.
fn send_ack(shared: &Shared, st: &mut Replication) -> bool {
    let Some((applied, coverage)) = st.take_ack() else {
        return false;
    };
    // The ack's clock is what our stream has covered of our own changes
    // (the peer's watermark of us).
    let in_step = st.coverage().is_some();
    let holds = st.versions.covered(st.peer.node_id);
    let ack = entry(
        0,
        Stamp::new(coverage, shared.node_id),
        Op::Ack {
            applied,
            in_step,
            holds,
        },
    );
    let acked = push(shared, st, vec![ack], false).is_ok();
    if !acked {
        st.peer.ack_lost();
    } else if let Some(mut faults) = main_state().faults.get() {
        faults.ack_sent();
    }
    acked
}

/// The end of the server's `BeforeSleep` event, after the flush: Redis
/// writes its AOF buffer next, with everything applied so far (see
/// `Peer::persisting`). An ack that became due goes out in the next
/// event-loop iteration, which the wake-up pipe starts at once (a timer
/// would be one `MODULE UNLOAD` refuses to leave behind).
pub fn before_aof_write(shared: &Shared) {
    if let Some(mut st) = main_state().replication.get() {
        if st.peer.persisting() {
            shared.apply.rewake();
        }
    }
    exit_if_asked(shared);
}

/// The event loop woke up: the previous iteration's AOF write is done, so
/// an ack of what it held goes out now, together with anything else due
/// (sent from the next flush instead, a second ack close behind the
/// flush's own would wait for the ack interval, up to the next cron tick).
pub fn ack_after_sleep(shared: &Shared) {
    let main = main_state();
    let Some(mut st) = main.replication.get() else {
        return;
    };
    if !st.peer.link().up || !st.peer.ack_due() {
        return;
    }
    let acked = send_ack(shared, &mut st);
    st.collect_tombstones(acked);
    drop(st);
    drop(main);
    exit_if_asked(shared);
}

/// `RDMASYNC.DEBUG EXIT-AFTER-ACK`: once an ack went out, the process
/// exits before Redis writes its AOF buffer, as a crash at that moment
/// would (the ack is given time to leave first).
fn exit_if_asked(shared: &Shared) {
    if !main_state().faults.get().is_some_and(|f| f.exit_due()) {
        return;
    }
    let until = Instant::now() + Duration::from_secs(1);
    while shared.queue.waiting() != 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50));
    redis_module::logging::log_warning(
        "rdmasync: EXIT-AFTER-ACK: an ack went out, exiting before the AOF write",
    );
    std::process::exit(70);
}
