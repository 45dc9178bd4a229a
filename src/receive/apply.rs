//! Batch -> Redis on the main thread: the link thread hands decoded batches
//! to a bounded queue and wakes the event loop through a pipe; the main
//! thread applies each batch whole (no client command interleaves), with the
//! echo guard set, propagated to this node's replicas and AOF. No thread
//! ever waits for the GIL, so a busy server cannot starve the apply path and
//! unload cannot deadlock with it.

use std::time::{Duration, Instant};

use hashbrown::HashSet;
use redis_module::{CallOptions, CallOptionsBuilder, CallResult, Context};

use super::apply_append;
use super::apply_counter;
use super::apply_fields;
use super::apply_functions;
use super::apply_plan::{expired_on_arrival, swap_decision, MsetRun, Outcome, TakenRun};
use super::staging;
use crate::capture::hook::Suppressed;
use crate::capture::state::main_state;
use crate::catchup::peer::LinkView;
use crate::catchup::replication::Replication;
use crate::converge::sweep::{vouches_deleted, Sweep};
use crate::converge::ttl_ops;
use crate::converge::version::{Decision, KeyVersion, Stamp, GC_AT_NEXT_ACK};
use crate::ops::status::{unix_ms, Stats};
use crate::proto::entry::{Batch, Encoding, Entry, Op};
use crate::redis::server::{self, SetTail};
use crate::redis::snapshot::{Read, Reader};
use crate::shared::apply_queue::FromLink;
use crate::shared::{self, Shared};

/// Longest the main thread applies in one go before serving clients again.
const APPLY_SLICE: Duration = Duration::from_millis(2);
/// A value restored from a payload this big replaces the old one by
/// `UNLINK` first (whose memory is then freed by a background thread).
const UNLINK_FIRST_BYTES: usize = 1 << 20;
/// How often a paused server is asked again whether batches may apply.
const PAUSED_RETRY: Duration = Duration::from_millis(10);

/// Event-loop callback on the main thread (the wake-up pipe is readable):
/// schedules the apply in a 0 ms timer. Redis runs timer callbacks in a
/// proper module context, which propagates the applied writes to replicas
/// and AOF when it ends; a bare event-loop callback would leave them pending
/// (and Redis asserts on that).
pub fn on_wake(shared: &Shared) {
    let queue = &shared.apply;
    queue.take_wakeup();
    let mut timer = queue.timer.lock();
    if timer.is_none() {
        if let Some(tc) = queue.context.lock().as_ref() {
            let ctx = tc.main_thread_context();
            *timer = Some(ctx.create_timer(Duration::ZERO, on_timer, ()));
        }
    }
}

fn on_timer(ctx: &Context, (): ()) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        shared::with_shared(|shared| apply_pending(ctx, shared));
    }));
}

/// Applies queued batches for at most [`APPLY_SLICE`], then lets Redis serve
/// clients (waking itself again if batches remain).
fn apply_pending(ctx: &Context, shared: &Shared) {
    let queue = &shared.apply;
    *queue.timer.lock() = None;
    let held = main_state().faults.get().is_some_and(|f| f.apply_held());
    if server::clients_paused() || held {
        // CLIENT PAUSE, FAILOVER, a SHUTDOWN waiting for replicas: the
        // dataset must not change (and Redis asserts on propagation).
        // RDMASYNC.DEBUG HOLD-APPLY: the queue waits, as a backed-up one.
        *queue.timer.lock() = Some(ctx.create_timer(PAUSED_RETRY, on_timer, ()));
        return;
    }
    let started = Instant::now();
    let mut flushed = false;
    loop {
        let (batch, built) = match next_batch(ctx, shared) {
            staging::Next::Apply(batch, built) => (batch, built),
            staging::Next::Wait => {
                // A big value is being built: clients go first.
                queue.rewake();
                return;
            }
            staging::Next::Idle => break,
        };
        // Local changes made earlier in this event-loop iteration are
        // stamped (and shipped) before a remote entry that could overwrite
        // or move them is applied: a stamp taken after applying would be
        // newer than the write it did not see. A batch that touches none of
        // them lets them wait (a resting hot key stays held; see `hotkeys`).
        if !flushed && crate::capture::flush::local_changes_go_before(&batch) {
            crate::capture::flush::flush_now(ctx, shared);
            flushed = true;
        }
        apply_batch(ctx, shared, &batch, &built);
        staging::finish(ctx, built);
        if started.elapsed() > APPLY_SLICE {
            break;
        }
    }
    queue.rewake_if_left();
}

/// The next batch to apply: a held one whose big values are built, else
/// the next in the queue (link events on the way are taken), unless it
/// has big values to build first (`staging`).
fn next_batch(ctx: &Context, shared: &Shared) -> staging::Next {
    match staging::next(ctx, shared) {
        staging::Next::Idle => {}
        other => return other,
    }
    while let Some(item) = shared.apply.pop() {
        match item {
            FromLink::Batch(batch) => match staging::hold(ctx, shared, batch) {
                Some(batch) => return staging::Next::Apply(batch, staging::Built::default()),
                None => return staging::next(ctx, shared),
            },
            FromLink::LinkUp {
                epoch,
                peer_node,
                max_frame,
                peer_rdb,
            } => {
                // Before anything that came over the new link: its acks
                // must find what the old link may have lost already
                // requeued (`Replication::link_up`).
                let view = LinkView::up(epoch, peer_node, max_frame).reading_rdb(peer_rdb);
                crate::capture::flush::link_came_up(view);
            }
            FromLink::LinkDown { epoch } => link_ended(epoch),
        }
    }
    staging::Next::Idle
}

/// Link `epoch` to the peer ended, as the main thread knows it from now on.
fn link_ended(epoch: u64) {
    if let Some(mut st) = main_state().replication.get() {
        st.peer.progress.link_ended(epoch);
    }
}

/// Runs `cmd` through `RM_Call` (replicated); an error reply is the error,
/// naming the command.
pub(super) fn run(
    ctx: &Context,
    opts: &CallOptions,
    cmd: &str,
    args: &[&[u8]],
) -> std::result::Result<(), String> {
    match ctx.call_ext::<_, CallResult>(cmd, opts, args) {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("{cmd}: {}", e.to_utf8_string().unwrap_or_default())),
    }
}

fn restore(
    ctx: &Context,
    opts: &CallOptions,
    key: &[u8],
    payload: &[u8],
    expiry_ms: Option<u64>,
    encoding: Encoding,
) -> std::result::Result<(), String> {
    match (encoding, expiry_ms) {
        // SET replaces any type and clears a TTL, like RESTORE REPLACE.
        // Fresh arguments: the server encodes the value as a client's.
        (Encoding::RawString, None) => server::set_string(ctx, key, payload, SetTail::Plain),
        (Encoding::RawString, Some(at)) => {
            let at = at.to_string();
            server::set_string(ctx, key, payload, SetTail::PxAt(at.as_bytes()))
        }
        (Encoding::Dump, _) => {
            if payload.len() >= UNLINK_FIRST_BYTES {
                // A big value: the one it replaces is freed off the main
                // thread (RESTORE REPLACE would free it here, for seconds).
                run(ctx, opts, "UNLINK", &[key])?;
            }
            let ttl = expiry_ms.unwrap_or(0).to_string();
            run(
                ctx,
                opts,
                "RESTORE",
                &[key, ttl.as_bytes(), payload, b"REPLACE", b"ABSTTL"],
            )
        }
    }
}

/// Writes the run (and leaves it empty). If the MSET fails, each key is
/// written with SET; a key that still fails gets its previous version back
/// (so a resend is not taken for a duplicate). On failure, how many keys
/// were lost and why.
fn write_run(
    mset: &mut MsetRun<'_>,
    ctx: &Context,
    opts: &CallOptions,
    st: &mut Replication,
) -> std::result::Result<(), (u64, String)> {
    let Some(TakenRun { db, args, before }) = mset.take() else {
        return Ok(());
    };
    let db_ok = server::select_db(ctx, db);
    if db_ok && run(ctx, opts, "MSET", &args).is_ok() {
        return Ok(());
    }
    let (mut lost, mut why) = (0, format!("no database {db}"));
    for (pair, before) in args.chunks(2).zip(before) {
        let written = db_ok
            && match run(ctx, opts, "SET", pair) {
                Ok(()) => true,
                Err(msg) => {
                    why = msg;
                    false
                }
            };
        if !written {
            st.versions.reset(db, pair[0], before);
            lost += 1;
        }
    }
    if lost == 0 {
        Ok(())
    } else {
        Err((lost, why))
    }
}

/// A remote FLUSHDB/FLUSHALL: removes what is older than it and keeps the
/// keys this node wrote (or applied) after it.
fn apply_flush(
    ctx: &Context,
    opts: &CallOptions,
    st: &mut Replication,
    db: Option<u32>,
    stamp: Stamp,
) -> std::result::Result<Outcome, String> {
    if !st.versions.flush_is_new(db, stamp) {
        return Ok(Outcome::Discarded);
    }
    let mut survivors: hashbrown::HashMap<u32, Vec<Box<[u8]>>> = hashbrown::HashMap::new();
    for (d, key) in st.versions.flush(db, stamp) {
        survivors.entry(d).or_default().push(key);
    }
    let reader = Reader::new(ctx).failing(main_state().failing_reads());
    // FLUSHALL as one FLUSHDB per database: with save points configured,
    // FLUSHALL also writes an RDB on the spot, whose aux data needs the
    // convergence state this thread holds.
    let dbs = match db {
        Some(d) => d..d + 1,
        None => 0..reader.databases(),
    };
    for d in dbs {
        server::select_db(ctx, d);
        let keep = survivors.remove(&d).unwrap_or_default();
        flush_keeping(ctx, opts, &reader, &keep)?;
        apply_fields::flush_survivors(ctx, d, &keep);
    }
    apply_counter::rewrite_trimmed(ctx, opts, st)?;
    Ok(Outcome::Applied)
}

/// Empties the selected database but for the keys in `keep`: FLUSHDB, then
/// each survivor restored from its DUMP. When a survivor cannot be read it
/// could not be restored, so then every other key is unlinked instead
/// (slower, and rare: nothing is lost).
fn flush_keeping(
    ctx: &Context,
    opts: &CallOptions,
    reader: &Reader,
    keep: &[Box<[u8]>],
) -> std::result::Result<(), String> {
    let mut saved = Vec::with_capacity(keep.len());
    for key in keep {
        match reader.read_one(key) {
            Read::Value(snap) => saved.push((key, snap)),
            Read::Absent => {}
            Read::Failed => return unlink_all_but(ctx, opts, reader, keep),
        }
    }
    run(ctx, opts, "FLUSHDB", &[])?;
    for (key, snap) in saved {
        restore(ctx, opts, key, &snap.payload, snap.expiry_ms, snap.encoding)?;
    }
    Ok(())
}

/// UNLINKs every key of the selected database not in `keep`, a SCAN page at
/// a time.
fn unlink_all_but(
    ctx: &Context,
    opts: &CallOptions,
    reader: &Reader,
    keep: &[Box<[u8]>],
) -> std::result::Result<(), String> {
    let keep: HashSet<&[u8]> = keep.iter().map(|k| &**k).collect();
    let mut cursor = 0;
    loop {
        let (next, keys) = reader
            .scan(cursor, 1000)
            .ok_or_else(|| "SCAN failed while flushing around an unreadable key".to_owned())?;
        let doomed: Vec<&[u8]> = keys
            .iter()
            .map(Vec::as_slice)
            .filter(|k| !keep.contains(k))
            .collect();
        if !doomed.is_empty() {
            run(ctx, opts, "UNLINK", &doomed)?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

/// What applying the entries of a batch works with: the server, the
/// options its writes are called with, and this node's id.
struct Applier<'c> {
    ctx: &'c Context,
    opts: &'c CallOptions,
    shared: &'c Shared,
    me: u64,
    /// Values built for this batch ahead of it (`staging`).
    built: &'c staging::Built,
}

impl Applier<'_> {
    /// Applies one entry of the peer's (a data change, or a notice for the
    /// convergence state), dispatched by kind.
    fn entry<'a>(
        &self,
        st: &mut Replication,
        e: &'a Entry,
        mset: &mut MsetRun<'a>,
    ) -> std::result::Result<Outcome, String> {
        let (ctx, opts) = (self.ctx, self.opts);
        let stamp = Stamp::new(e.clock, e.origin);
        if let Some(noted) = self.notice(st, e) {
            return noted;
        }
        st.peer.applied(e.seq);
        if !server::select_db(ctx, e.db) {
            return Err(format!("no database {}", e.db));
        }
        note_carried(st, e);
        let merged = apply_counter::plain(ctx, opts, self.shared, st, e)
            .or_else(|| apply_fields::plain(ctx, opts, self.shared, st, e));
        if let Some(merged) = merged {
            return merged;
        }
        match &e.op {
            Op::Value { .. } => self.value(st, e, mset),
            Op::Counter { .. } => apply_counter::state(ctx, opts, self.shared, st, e),
            Op::Fields { .. } => apply_fields::state(ctx, opts, self.shared, st, e),
            Op::Append { .. } => apply_append::append(ctx, (opts, self.shared, self.me), st, e),
            Op::Delete { key } => match decide(ctx, st, self.me, e, key) {
                Decision::Apply => {
                    run(ctx, opts, "DEL", &[key])?;
                    st.versions.record_delete(e.db, key, stamp, GC_AT_NEXT_ACK);
                    Ok(Outcome::Applied)
                }
                other => {
                    if !ship_write_since_load(self.shared, st, e, self.me) {
                        apply_append::after_discard(ctx, self.shared, st, e, other);
                    }
                    Ok(Outcome::of(other))
                }
            },
            Op::Expire { key, expiry_ms } => {
                apply_expire(ctx, (opts, self.shared), st, e, (key, *expiry_ms))
            }
            Op::FlushDb => apply_flush(ctx, opts, st, Some(e.db), stamp),
            Op::FlushAll => apply_flush(ctx, opts, st, None, stamp),
            Op::SwapDb { other } => apply_swap(ctx, opts, st, e.db, *other, stamp),
            Op::Library { name, code } => {
                apply_functions::load(ctx, opts, self.shared, st, (name, code), stamp)
            }
            Op::LibraryDelete { name } => apply_functions::delete(ctx, opts, st, name, stamp),
            Op::Ack { .. }
            | Op::Bound { .. }
            | Op::SyncRequest { .. }
            | Op::SweepStart { .. }
            | Op::SweepEnd { .. } => Ok(Outcome::Notice),
        }
    }

    /// A notice of the peer's (an ack, a bound, a sync request, a sweep
    /// mark) taken in; `None` for a data change.
    fn notice(
        &self,
        st: &mut Replication,
        e: &Entry,
    ) -> Option<std::result::Result<Outcome, String>> {
        Some(match &e.op {
            Op::Ack {
                applied,
                in_step,
                holds,
            } => Ok(note_ack(st, e, (*applied, *in_step, *holds), self.me)),
            Op::Bound { .. } => Ok(apply_counter::bound(st, e)),
            Op::SyncRequest {
                received,
                since,
                own,
                answer,
            } => Ok(note_sync_request(
                st,
                (e.seq, self.me),
                *received,
                *since,
                *own,
                *answer,
            )),
            Op::SweepStart { .. } | Op::SweepEnd { .. } => {
                st.peer.applied(e.seq);
                self.sweep_mark(st, e)
            }
            _ => return None,
        })
    }

    /// A sweep mark of the peer's: the start of a sweeping full sync, or
    /// its end (see `sweep_end`).
    fn sweep_mark(&self, st: &mut Replication, e: &Entry) -> std::result::Result<Outcome, String> {
        match &e.op {
            Op::SweepStart { floors } => {
                st.peer.incoming_sweep = Some(Sweep::new(*floors, e.origin));
                Ok(Outcome::Notice)
            }
            Op::SweepEnd { complete } => {
                self.sweep_end(st, Stamp::new(e.clock, e.origin), *complete)
            }
            _ => Ok(Outcome::Notice),
        }
    }

    /// The end of the peer's sweeping full sync: the keys it vouches it
    /// deleted (and that it did not carry) are deleted here too, at the
    /// stamp of the sync's end (newer than every version it vouches for).
    fn sweep_end(
        &self,
        st: &mut Replication,
        stamp: Stamp,
        complete: bool,
    ) -> std::result::Result<Outcome, String> {
        let Some(sweep) = st.peer.incoming_sweep.take() else {
            return Ok(Outcome::Notice);
        };
        if !complete {
            crate::capture::flush::log_sweep_abandoned("the peer could not read some of its keys");
            return Ok(Outcome::Notice);
        }
        let doomed = sweep.deleted_at_sender(&st.versions, self.me);
        let main = main_state();
        let dirty = main.dirty.get();
        // Changed here and not stamped yet (a read that failed): newer.
        let changed = |db: u32, key: &[u8]| {
            dirty.as_ref().is_some_and(|d| d.contains(db, key))
                || st.unread.contains_key(&(db, Box::from(key)))
        };
        let doomed: Vec<_> = doomed
            .into_iter()
            .filter(|(db, key, _)| !changed(*db, key))
            .collect();
        drop(dirty);
        drop(main);
        let mut swept = 0u64;
        for (db, key, _) in &doomed {
            if !server::select_db(self.ctx, *db) {
                continue;
            }
            run(self.ctx, self.opts, "DEL", &[key])?;
            st.versions.record_delete(*db, key, stamp, GC_AT_NEXT_ACK);
            swept += 1;
        }
        shared::with_shared(|s| Stats::add(&s.stats.keys_swept, swept));
        redis_module::logging::log_notice(format!(
            "rdmasync: the peer's full sync carried {} key(s); {swept} key(s) held here at \
             versions it had deleted (their tombstones dropped while away) were deleted",
            sweep.carried_len()
        ));
        Ok(Outcome::Applied)
    }

    /// A value of the peer's, if it wins: into the MSET run when it can join
    /// one (the batch loop wrote the run first if it could not), else restored.
    fn value<'a>(
        &self,
        st: &mut Replication,
        e: &'a Entry,
        mset: &mut MsetRun<'a>,
    ) -> std::result::Result<Outcome, String> {
        let Op::Value {
            key,
            payload,
            expiry_ms,
            encoding,
        } = &e.op
        else {
            return Ok(Outcome::Notice);
        };
        match decide(self.ctx, st, self.me, e, key) {
            Decision::Apply => {
                let stamp = Stamp::new(e.clock, e.origin);
                // A TTL write held here newer than this value keeps its TTL.
                let held = st.versions.ttls.get(e.db, key);
                let expiry_ms = ttl_ops::expiry_after_value(stamp, *expiry_ms, held);
                if MsetRun::is_plain(e).is_some() && expiry_ms.is_none() {
                    let before = st.versions.get(e.db, key);
                    mset.push(e.db, key, payload, before);
                } else if !staging::commit(self.ctx, self.built, e, key, payload, expiry_ms)? {
                    restore(self.ctx, self.opts, key, payload, expiry_ms, *encoding)?;
                }
                record_value(st, e.db, key, stamp, expiry_ms);
                // A big string taken whole is the base of appends from here.
                let raw = *encoding == Encoding::RawString;
                st.versions
                    .appends
                    .shipped((e.db, key), stamp, raw.then_some(payload.len()));
                Ok(Outcome::Applied)
            }
            other => {
                if !ship_write_since_load(self.shared, st, e, self.me) {
                    apply_append::after_discard(self.ctx, self.shared, st, e, other);
                }
                Ok(Outcome::of(other))
            }
        }
    }
}

/// During the peer's sweeping full sync: the keys its stream carries are
/// noted; a SWAPDB of its ends the sweep (the marks name databases).
fn note_carried(st: &mut Replication, e: &Entry) {
    let Some(sweep) = st.peer.incoming_sweep.as_mut() else {
        return;
    };
    match &e.op {
        Op::Value { key, .. }
        | Op::Delete { key }
        | Op::Expire { key, .. }
        | Op::Counter { key, .. }
        | Op::Fields { key, .. }
        | Op::Append { key, .. } => sweep.carried(e.db, key),
        Op::SwapDb { .. } => {
            st.peer.incoming_sweep = None;
            crate::capture::flush::log_sweep_abandoned("a SWAPDB arrived during the sync");
        }
        _ => {}
    }
}

/// Last-writer-wins on `key` for entry `e`; a key without a version is
/// looked up through the key API.
///
/// A key of which nothing is recorded here, at a version this node
/// vouches it deleted (that delete's tombstone was dropped past
/// `max-tombstones`; see `converge::sweep`), is stale: the delete is newer.
pub(super) fn decide(ctx: &Context, st: &Replication, me: u64, e: &Entry, key: &[u8]) -> Decision {
    let stamp = Stamp::new(e.clock, e.origin);
    let exists = || server::key_info(ctx, key).exists();
    let decision = st.versions.decide(e.db, key, stamp, me, exists);
    let deleted_past_bound = || {
        st.sweep_floors()
            .is_some_and(|f| vouches_deleted(&f, stamp, me, e.origin))
            && st.versions.get(e.db, key).is_none()
            && !exists()
    };
    if decision == Decision::Apply && (deleted_past_bound() || lost_before_a_write(st, me, e, key))
    {
        return Decision::Stale;
    }
    decision
}

/// Whether `e` is a change of this node's own that a load lost, sent
/// back by the peer, of a key this node wrote since the load (its version
/// is still that write): older than the write, whatever their stamps (the
/// clock restarted below the lost ones: no lead file, or one older than
/// the copy, or a wall clock set back; see convergence.md, "A restart
/// starts the clock as far ahead as it ran"). The write ships again, just
/// above it ([`ship_write_since_load`]).
fn lost_before_a_write(st: &Replication, me: u64, e: &Entry, key: &[u8]) -> bool {
    e.origin == me
        && st
            .written_since_load(e.db, key)
            .is_some_and(|w| st.versions.get(e.db, key).is_some_and(|v| v.stamp() == w))
}

/// After `e` was discarded: when it was a lost change of this node's own
/// newer by its stamp than the write made here since the load, that write
/// takes the stamp just above it and ships again at it (a value, or a
/// delete), so that the peer, which holds the lost change, takes the
/// later write too. Just above, not now: a write the peer made since,
/// newer than the lost change, still wins over it (the clock observed
/// `e`'s stamp plus one, so no later stamp of this node's reuses it).
/// Whether it did.
fn ship_write_since_load(shared: &Shared, st: &mut Replication, e: &Entry, me: u64) -> bool {
    let Some(key) = e.key().filter(|_| e.origin == me) else {
        return false;
    };
    let lost = Stamp::new(e.clock, e.origin);
    let Some(version) = st.versions.get(e.db, key) else {
        return false;
    };
    if version.stamp() >= lost || !lost_before_a_write(st, me, e, key) {
        return false;
    }
    let above = Stamp::new(e.clock.saturating_add(1), me);
    match version {
        KeyVersion::Live(_) => {
            st.versions.record_write(e.db, key, above);
            st.unread.insert((e.db, Box::from(key)), above);
        }
        KeyVersion::Deleted { .. } => {
            st.versions.record_delete(e.db, key, above, 0);
            st.deletes_again
                .push((e.db, Box::from(key), above, Some(above)));
        }
    }
    st.note_local_write((e.db, key), above);
    Stats::add(&shared.stats.lost_changes_superseded, 1);
    true
}

/// The peer's write of a key's TTL alone (`converge::ttl_ops`): the expiry
/// is set when it is the newest write of the key's TTL, and the write is
/// held either way then (a deleted key keeps it for a value that comes).
fn apply_expire(
    ctx: &Context,
    (opts, shared): (&CallOptions, &Shared),
    st: &mut Replication,
    e: &Entry,
    (key, expiry_ms): (&[u8], Option<u64>),
) -> std::result::Result<Outcome, String> {
    if st.versions.counters.contains(e.db, key) || st.versions.hashes.contains(e.db, key) {
        // Merged here, a plain key on the peer (a change of its type, or
        // of its counter, made at once): its state carries its own TTL
        // rule, so this node's ships again, newer, and wins whole there.
        crate::capture::counters::fallback(
            shared,
            crate::ops::fallbacks::Fallback::TypeChange,
            "a TTL write of a plain key over a merged one",
        );
        if let Some(mut dirty) = main_state().dirty.get() {
            dirty.mark(e.db, key);
        }
        return Ok(Outcome::Discarded);
    }
    let stamp = Stamp::new(e.clock, e.origin);
    let version = st
        .versions
        .get(e.db, key)
        .map_or(Stamp::ZERO, KeyVersion::stamp);
    let held = st.versions.ttls.get(e.db, key).map(|(s, _)| s);
    if !ttl_ops::takes_ttl_write(stamp, version, held) {
        let duplicate = held == Some(stamp) || version == stamp;
        return Ok(Outcome::of(match duplicate {
            true => Decision::Duplicate,
            false => Decision::Stale,
        }));
    }
    if server::key_info(ctx, key).exists() {
        match expiry_ms {
            Some(at) => run(ctx, opts, "PEXPIREAT", &[key, at.to_string().as_bytes()])?,
            None => run(ctx, opts, "PERSIST", &[key])?,
        }
        if !server::key_info(ctx, key).exists() {
            // An expiry in the past took it, as it does on the peer.
            st.versions.expired(e.db, key, GC_AT_NEXT_ACK);
        }
    }
    st.versions.record_ttl(e.db, key, (stamp, expiry_ms));
    Ok(Outcome::Applied)
}

/// The version of a value just applied: a write, or a delete when it had
/// already expired (RESTORE did not create it).
fn record_value(st: &mut Replication, db: u32, key: &[u8], stamp: Stamp, expiry_ms: Option<u64>) {
    if expired_on_arrival(expiry_ms, unix_ms()) {
        st.versions
            .record_delete(db, key, stamp, st.peer.last_pushed.max(1));
    } else {
        st.versions.record_write(db, key, stamp);
    }
}

/// The peer's ack: received (acks are not acknowledged), and unless the
/// fault switch drops acks, what it acknowledges and covers.
fn note_ack(
    st: &mut Replication,
    e: &Entry,
    (applied, in_step, holds): (u64, bool, u64),
    me: u64,
) -> Outcome {
    st.peer.received(e.seq);
    let dropped = main_state().faults.get().is_some_and(|f| f.acks_dropped());
    if !dropped {
        // An ack that acknowledges our request ends the wait; its coverage
        // counts (the peer voided what it claimed before when it applied
        // the request), an earlier ack's does not.
        let accepts = st.peer.accepts_coverage_of_ack(applied);
        st.peer.acknowledged(applied);
        // Its clock says what the peer's stream has covered of the peer's
        // own changes: all of it was applied here before this ack (same
        // ordered stream). Durable with the batch.
        if accepts {
            let cap = st.peer_coverage_cap.unwrap_or(u64::MAX);
            st.versions.record_covered(e.origin, e.clock.min(cap));
            if e.clock > 0 {
                // The peer claims coverage again only once its sync
                // answering our request arrived whole.
                st.lost_window_closed();
            }
        }
        apply_counter::bound_moved(st, (me, e.origin), (applied, in_step, holds));
    }
    Outcome::Notice
}

/// The peer asks for a sync (it lost state, or answers our request).
fn note_sync_request(
    st: &mut Replication,
    (seq, me): (u64, u64),
    received: u64,
    since: u64,
    own: u64,
    answer: bool,
) -> Outcome {
    redis_module::logging::log_notice(if answer {
        format!("rdmasync: the peer asks for our changes after clock {since}")
    } else {
        format!(
            "rdmasync: the peer lost state (restart or reload) and asks for what it \
             misses: our changes after clock {since}, its own after {own}"
        )
    });
    st.peer.peer_asks_for_sync(received, since, own, answer);
    // Acknowledged like data: the peer learns it arrived (one lost with a
    // link drop is sent again).
    st.peer.applied(seq);
    if !answer {
        // It holds our changes only up to `since` now: its whole writes and
        // removals say no more of ours (see `OwnBound::acked`), so the
        // bound of our own changes goes back there. Elements this node
        // collected past it that the peer lost and then removed whole
        // without seeing them go on both nodes (docs/convergence.md).
        st.versions.lower_merge_bound(me, since);
        // It lost its state, the swaps it had in flight with it: its next
        // swaps may carry any stamp its clock gives them (not when this is
        // the request of a loss taken already, resent: the swaps applied
        // since came after that loss). A sweeping sync of its being
        // received ends with it (its next sync starts anew).
        if st.peer.peer_lost_state(received, own) {
            st.peer.last_peer_swap = Stamp::default();
        }
        st.peer.incoming_sweep = None;
    }
    Outcome::Notice
}

/// SWAPDB from the peer. A swap resent after a reconnect keeps its stamp:
/// one applied here before the link broke must not swap the databases back.
fn apply_swap(
    ctx: &Context,
    opts: &CallOptions,
    st: &mut Replication,
    db: u32,
    other: u32,
    stamp: Stamp,
) -> std::result::Result<Outcome, String> {
    if let Decision::Duplicate = swap_decision(stamp, st.peer.last_peer_swap) {
        return Ok(Outcome::Duplicate);
    }
    let a = db.to_string();
    let b = other.to_string();
    run(ctx, opts, "SWAPDB", &[a.as_bytes(), b.as_bytes()])?;
    let _ = st.swap_dbs(db, other);
    st.peer.last_peer_swap = stamp;
    Ok(Outcome::Applied)
}

/// Applies one batch on the main thread, entry by entry under the
/// last-writer-wins rule.
fn apply_batch(ctx: &Context, shared: &Shared, batch: &Batch, built: &staging::Built) {
    let n = batch.entries.iter().filter(|e| e.is_data()).count() as u64;
    if ctx.get_flags().contains(redis_module::ContextFlags::SLAVE) {
        refuse_as_replica(shared, batch, n);
        return;
    }
    let opts = CallOptionsBuilder::new()
        .errors_as_replies()
        .replicate()
        .build();
    let original_db = server::selected_db(ctx);
    let suppressed = Suppressed::new();
    let main = main_state();
    let Some(mut st) = main.replication.get() else {
        // Held further up the stack (a bug, logged): not applied, not acked.
        Stats::add(&shared.stats.apply_errors, n);
        return;
    };
    st.versions
        .warm(batch.entries.iter().filter_map(|e| Some((e.db, e.key()?))));
    let tally = apply_entries(ctx, &opts, shared, &mut st, (batch, built));
    st.peer_bound = None;
    st.peer_applied = None;
    if let Some((origin, clock)) = st.peer_batch_coverage.take() {
        // As an ack's coverage is taken (see `note_ack`).
        if st.peer.accepts_coverage() {
            let cap = st.peer_coverage_cap.unwrap_or(u64::MAX);
            st.versions.record_covered(origin, clock.min(cap));
        }
    }
    // The peer's stamps go into this node's AOF in the batch's transaction.
    crate::capture::persist::propagate_stamps(ctx, shared, &mut st.versions);
    drop(st);
    drop(main);
    drop(suppressed);
    server::select_db(ctx, original_db);
    shared.clock.observe(tally.newest);
    Stats::add(
        &shared.stats.entries_applied,
        n - tally.failed - tally.refused,
    );
    Stats::add(&shared.stats.conflicts_discarded, tally.discarded);
    Stats::add(&shared.stats.entries_duplicate, tally.duplicates);
    Stats::add(&shared.stats.apply_errors, tally.failed);
    Stats::add(&shared.stats.batches_applied, 1);
}

/// A replica writes nothing of the peer's: that would diverge from its own
/// master. Received, not applied (no ack): a sync request this node sends
/// once it is a master again says so, and gets a full sync.
fn refuse_as_replica(shared: &Shared, batch: &Batch, data_entries: u64) {
    if let Some(seq) = batch.entries.iter().map(|e| e.seq).max() {
        if let Some(mut st) = main_state().replication.get() {
            st.peer.received(seq);
        }
    }
    Stats::add(&shared.stats.apply_errors, data_entries);
    shared
        .stats
        .set_error("this node is a replica (REPLICAOF): remote writes not applied");
}

/// The clock this node moves past for entry `e`: its stamp, or one more
/// for a change of this node's own the peer sends back (it lost it, a
/// restart from an older copy). Its next stamp is then two past that
/// change, so a removal it makes, which names its clock just before it,
/// names one above every change the peer applied before (`relisted`), even
/// where the wall clock is behind the stamps it made before.
fn newest_to_observe(e: &Entry, me: u64) -> u64 {
    if e.origin == me {
        e.clock.saturating_add(1)
    } else {
        e.clock
    }
}

/// What became of a batch's entries.
#[derive(Default)]
struct Tally {
    failed: u64,
    /// Entries this node's server cannot hold (counted in
    /// `entries_refused` by whoever refused them).
    refused: u64,
    discarded: u64,
    duplicates: u64,
    /// The newest clock among them.
    newest: u64,
}

/// Applies the entries in order, plain string writes gathered into MSET runs.
fn apply_entries(
    ctx: &Context,
    opts: &CallOptions,
    shared: &Shared,
    st: &mut Replication,
    (batch, built): (&Batch, &staging::Built),
) -> Tally {
    let applier = Applier {
        ctx,
        opts,
        shared,
        me: shared.node_id,
        built,
    };
    let mut tally = Tally::default();
    let mut mset = MsetRun::new();
    // A failed MSET run holds entries of this batch: none newer is held.
    let oldest = batch
        .entries
        .iter()
        .filter(|e| e.is_data())
        .map(|e| e.clock)
        .min()
        .unwrap_or(0);
    for e in &batch.entries {
        tally.newest = tally.newest.max(newest_to_observe(e, shared.node_id));
        let merged_key = e.key().is_some_and(|k| {
            st.versions.counters.contains(e.db, k) || st.versions.hashes.contains(e.db, k)
        });
        if !mset.admits(e) || merged_key {
            // Writes stay in batch order: the run goes first.
            if let Err((keys, msg)) = write_run(&mut mset, ctx, opts, st) {
                tally.failed += keys;
                st.not_held(oldest, false);
                shared.stats.set_error(format!("apply: {msg}"));
            }
        }
        match applier.entry(st, e, &mut mset) {
            Ok(Outcome::Discarded) => tally.discarded += 1,
            Ok(Outcome::Refused) => tally.refused += 1,
            Ok(Outcome::Duplicate) => tally.duplicates += 1,
            Ok(Outcome::Applied | Outcome::Notice) => {}
            Err(msg) => {
                tally.failed += 1;
                st.not_held(e.clock, false);
                shared.stats.set_error(format!("apply: {msg}"));
            }
        }
    }
    if let Err((keys, msg)) = write_run(&mut mset, ctx, opts, st) {
        tally.failed += keys;
        st.not_held(oldest, false);
        shared.stats.set_error(format!("apply: {msg}"));
    }
    tally
}
