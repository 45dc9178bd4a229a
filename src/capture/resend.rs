//! Ships what the peer missed, in time slices on the main thread: the
//! backlog (each change resent at its recorded version), changes whose read
//! failed while being resent (retried once per flush, never restamped), and
//! a full sync.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::capture::flush::{count_read_failures, entry, op_of, pending_of, push};
use crate::catchup::big_read::{BigRead, BigStep};
use crate::catchup::fullsync::{FullSync, Shipment};
use crate::catchup::replication::Replication;
use crate::catchup::state_slices::{StateSlices, StateStep};
use crate::converge::changes::PendingOp;
use crate::converge::version::{KeyVersion, Stamp};
use crate::ops::status::Stats;
use crate::proto::entry::{Entry, Op};
use crate::redis::server;
use crate::redis::snapshot::{Read, Reader};
use crate::shared::Shared;

/// The deletes to ship again (`Replication::deletes_again`) whose key's
/// version here is still the one it had when they were queued.
fn deletes_again(st: &mut Replication) -> Vec<Entry> {
    let mut entries = Vec::new();
    for (db, key, stamp, seen) in std::mem::take(&mut st.deletes_again) {
        if st.versions.get(db, &key).map(KeyVersion::stamp) != seen {
            // Written or deleted here since: that version shipped.
            continue;
        }
        let op = Op::Delete { key: key.into() };
        entries.push(entry(db, stamp, op));
    }
    entries
}

/// Entries per catch-up batch.
const CATCH_UP_BATCH: usize = 256;

/// Reads again, once per flush, the changes a resend or full sync could not
/// read, and ships those now readable at the version recorded for them.
pub fn retry_unread(reader: &Reader, shared: &Shared, st: &mut Replication) {
    if (st.unread.is_empty() && st.deletes_again.is_empty()) || shared.queue.is_full() {
        return;
    }
    let mut entries = deletes_again(st);
    let mut failed = 0;
    for ((db, key), stamp) in std::mem::take(&mut st.unread) {
        if st.versions.get(db, &key).is_some_and(|v| v.stamp() > stamp) {
            // Written or deleted here since: that newer version shipped.
            continue;
        }
        server::select_db(reader.ctx(), db);
        match reader.read_one(&key) {
            Read::Value(snap) => entries.push(entry(db, stamp, snap.into_op(key.into()))),
            // Deleted or expired since: the hook marked it, its delete ships.
            Read::Absent => {}
            Read::Failed => {
                failed += 1;
                st.unread.insert((db, key), stamp);
            }
        }
    }
    if failed > 0 {
        count_read_failures(shared, failed);
    }
    crate::capture::hashes::as_states(reader.ctx(), shared, st, &mut entries, false);
    if let Err(entries) = push(shared, st, entries, true) {
        for e in entries {
            let stamp = Stamp::new(e.clock, e.origin);
            match e.op {
                Op::Value { key, .. } | Op::Counter { key, .. } | Op::Fields { key, .. } => {
                    st.unread.insert((e.db, key.into()), stamp);
                }
                Op::Delete { key } => {
                    let seen = st.versions.get(e.db, &key).map(KeyVersion::stamp);
                    st.deletes_again.push((e.db, key.into(), stamp, seen));
                }
                _ => {}
            }
        }
    }
}

/// The entries that resend a backlog op with its recorded version; nothing
/// when the key's last version came from the peer (it has it already).
fn backlog_entry(
    reader: &Reader,
    shared: &Shared,
    st: &mut Replication,
    op: PendingOp,
) -> Option<Entry> {
    let me = shared.node_id;
    match op {
        PendingOp::Key { db, key } => key_entry(reader, shared, st, db, key),
        PendingOp::FlushDb(db) => {
            let floor = st.versions.floor(db);
            (floor.node == me).then(|| entry(db, floor, Op::FlushDb))
        }
        PendingOp::FlushAll => {
            let floor = st.versions.floor_all();
            (floor.node == me).then(|| entry(0, floor, Op::FlushAll))
        }
        PendingOp::SwapDb(a, b, shipped) => {
            // One that already went out keeps its stamp: the peer skips a
            // swap it applied before the link broke.
            let stamp = shipped.unwrap_or_else(|| Stamp::new(shared.clock.now(), me));
            Some(entry(a, stamp, Op::SwapDb { other: b }))
        }
        PendingOp::Library(name) => {
            crate::capture::libraries::resend_entry(reader.ctx(), shared, st, &name)
        }
        // Each library changed is queued by name (`flush::record_local`):
        // this one compares all of them with their versions again.
        PendingOp::Functions => {
            if let Some(mut dirty) = crate::capture::state::main_state().dirty.get() {
                dirty.mark_functions();
            }
            None
        }
    }
}

/// A key of this node's own, at its recorded version: its value read now, or
/// its delete.
fn key_entry(
    reader: &Reader,
    shared: &Shared,
    st: &mut Replication,
    db: u32,
    key: Vec<u8>,
) -> Option<Entry> {
    let me = shared.node_id;
    match st.versions.get(db, &key)? {
        KeyVersion::Live(stamp)
            if stamp.node == me
                || (st.versions.counters.contains(db, &key)
                    || st.versions.hashes.contains(db, &key)) =>
        {
            server::select_db(reader.ctx(), db);
            let snap = match reader.read_one(&key) {
                Read::Value(snap) => Some(snap),
                Read::Absent => {
                    // Expired or evicted since: its last version, deleted.
                    st.versions.record_delete(db, &key, stamp, 0);
                    None
                }
                Read::Failed => {
                    // Retried at this version, not restamped as new.
                    count_read_failures(shared, 1);
                    st.unread.insert((db, key.into()), stamp);
                    return None;
                }
            };
            let op = op_of(key, snap);
            Some(entry(db, stamp, op))
        }
        KeyVersion::Deleted { stamp, .. }
            if stamp.node == me
                || (st.versions.counters.contains(db, &key)
                    || st.versions.hashes.contains(db, &key)) =>
        {
            Some(entry(db, stamp, Op::Delete { key }))
        }
        // The peer's version: it has the value, not this node's TTL write
        // made since (a value or delete that ships takes it along).
        _ => crate::capture::ttl::own_ttl_write(st, (db, key), me),
    }
}

/// Ships the backlog for at most the rest of the slice. A big value on
/// the way is read a slice per step while its op waits at the front, so
/// the order of what ships is the backlog's.
pub fn drain_backlog(reader: &Reader, shared: &Shared, st: &mut Replication, deadline: Instant) {
    while !st.peer.backlog.is_empty() && !shared.queue.is_full() && Instant::now() < deadline {
        if st.peer.backlog_state.is_some() {
            advance_backlog_state(reader, shared, st);
            continue;
        }
        if st.peer.backlog_read.is_some() {
            advance_backlog_read(reader, shared, st);
            continue;
        }
        let mut ops = st.peer.backlog.take_front(CATCH_UP_BATCH).into_iter();
        let mut entries = Vec::new();
        while let Some(op) = ops.next() {
            if let Some(slices) = start_state_slices(reader, st, &op) {
                st.peer.backlog_state = Some(slices);
                st.peer
                    .backlog
                    .restore(std::iter::once(op).chain(ops).collect());
                break;
            }
            if let Some(big) = start_big_read(reader, shared, st, &op, 0) {
                st.peer.backlog_read = Some(big);
                st.peer
                    .backlog
                    .restore(std::iter::once(op).chain(ops).collect());
                break;
            }
            entries.extend(backlog_entry(reader, shared, st, op));
        }
        ship_backlog_entries(reader, shared, st, entries);
    }
}

/// Queues entries made from backlog ops (their ops go back to the front
/// of the backlog if the queue refuses them).
fn ship_backlog_entries(
    reader: &Reader,
    shared: &Shared,
    st: &mut Replication,
    mut entries: Vec<Entry>,
) {
    crate::capture::hashes::as_states(reader.ctx(), shared, st, &mut entries, false);
    let n = entries.len() as u64;
    if let Err(entries) = push(shared, st, entries, true) {
        let ops = entries.iter().filter_map(pending_of).collect();
        st.peer.backlog.restore(ops);
        return;
    }
    st.peer.report.entries += n;
    if st.peer.backlog.is_empty() {
        st.peer.report.done();
    }
}

/// Slices of the backlog op `op`'s state when it is a key with a big
/// merge state that ships so (see `state_slices`).
fn start_state_slices(reader: &Reader, st: &Replication, op: &PendingOp) -> Option<StateSlices> {
    let PendingOp::Key { db, key } = op else {
        return None;
    };
    let big = st.versions.hashes.get(*db, key).is_some_and(|h| h.is_big());
    let live = matches!(st.versions.get(*db, key), Some(KeyVersion::Live(_)));
    if !big || !live {
        return None;
    }
    StateSlices::begin(reader, &st.versions, (*db, key.clone())).ok()
}

/// One slice of the big state at the front of the backlog; its op leaves
/// the backlog with the last one. A state that no longer ships in slices
/// ships as any other op.
fn advance_backlog_state(reader: &Reader, shared: &Shared, st: &mut Replication) {
    let Some(slices) = st.peer.backlog_state.take() else {
        return;
    };
    let at_front = matches!(st.peer.backlog.front(),
        Some(PendingOp::Key { db, key }) if *db == slices.db && *key == slices.key);
    if !at_front {
        // Its op moved (put back behind others): shipped again when reached.
        return;
    }
    // A change of the key since the first slice is held in the same op:
    // the whole state ships, which has it (the slices before add nothing
    // it lacks).
    let step = match slices.changed() {
        true => StateStep::Whole((slices.db, slices.key)),
        false => slices.step(reader, &st.versions),
    };
    let (entries, more) = match step {
        StateStep::More(slices, (db, stamp, op)) => (vec![entry(db, stamp, op)], Some(slices)),
        StateStep::Last((db, stamp, op)) => {
            Stats::add(&shared.stats.values_sliced, 1);
            st.peer.backlog.take_front(1);
            (vec![entry(db, stamp, op)], None)
        }
        StateStep::Whole(_) => {
            let ops = st.peer.backlog.take_front(1);
            let entries = ops
                .into_iter()
                .filter_map(|op| backlog_entry(reader, shared, st, op))
                .collect();
            return ship_backlog_entries(reader, shared, st, entries);
        }
    };
    let n = entries.len() as u64;
    if let Err(entries) = push(shared, st, entries, true) {
        // Cannot happen after `is_full` said no (single producer): its op
        // goes back (held once), the state ships again from its first slice.
        let ops = entries.iter().filter_map(pending_of).collect();
        st.peer.backlog.restore(ops);
        return;
    }
    st.peer.backlog_state = more;
    st.peer.report.entries += n;
    if st.peer.backlog.is_empty() {
        st.peer.report.done();
    }
}

/// A slice-at-a-time read of the backlog op `op` when it is a big value
/// of this node's own (not one the merge tables hold: those ship states).
fn start_big_read(
    reader: &Reader,
    shared: &Shared,
    st: &Replication,
    op: &PendingOp,
    restarts: u8,
) -> Option<BigRead> {
    let PendingOp::Key { db, key } = op else {
        return None;
    };
    let stamp = match st.versions.get(*db, key)? {
        KeyVersion::Live(stamp) if stamp.node == shared.node_id => stamp,
        _ => return None,
    };
    if st.versions.counters.contains(*db, key) || st.versions.hashes.contains(*db, key) {
        return None;
    }
    BigRead::begin(reader, &st.versions, (*db, key.clone()), stamp, restarts).ok()
}

/// One slice of the big value at the front of the backlog; once read, it
/// ships at its version. Read across a change of the key, it starts again
/// (at most `MAX_SLICED_RESTARTS` times), then is read at once.
fn advance_backlog_read(reader: &Reader, shared: &Shared, st: &mut Replication) {
    let Some(big) = st.peer.backlog_read.take() else {
        return;
    };
    let at_front = matches!(st.peer.backlog.front(),
        Some(PendingOp::Key { db, key }) if *db == big.db && *key == big.key);
    if !at_front {
        // Its op moved (put back behind others): read again when reached.
        return;
    }
    let now = match st.versions.get(big.db, &big.key) {
        Some(KeyVersion::Live(stamp)) => stamp,
        _ => Stamp::ZERO,
    };
    let entries = match big.step(reader, &st.versions, now) {
        BigStep::More(big) => {
            st.peer.backlog_read = Some(big);
            return;
        }
        BigStep::Done(big, snap) => {
            Stats::add(&shared.stats.values_sliced, 1);
            st.peer.backlog.take_front(1);
            vec![entry(big.db, big.stamp, op_of(big.key, Some(snap)))]
        }
        BigStep::Changed(big) => {
            Stats::add(&shared.stats.slices_restarted, 1);
            let restarts = big.restarts() + 1;
            let op = PendingOp::Key {
                db: big.db,
                key: big.key,
            };
            // `None`: no longer big, or not ours: read as any other op.
            st.peer.backlog_read = start_big_read(reader, shared, st, &op, restarts);
            return;
        }
        BigStep::Whole(_) => {
            let ops = st.peer.backlog.take_front(1);
            ops.into_iter()
                .filter_map(|op| backlog_entry(reader, shared, st, op))
                .collect()
        }
    };
    ship_backlog_entries(reader, shared, st, entries);
}

/// Keys the sync's last step could not read wait to be read again, at
/// their versions.
fn keep_unread(shared: &Shared, st: &mut Replication, sync: &mut FullSync) {
    let unread = sync.take_unread();
    if !unread.is_empty() {
        count_read_failures(shared, unread.len());
    }
    for (db, key, stamp) in unread {
        st.unread.insert((db, key.into()), stamp);
    }
}

/// Counts the big values the sync's last step read a slice at a time.
fn count_sliced(shared: &Shared, sync: &mut FullSync) {
    let (sliced, restarted) = sync.take_sliced_counts();
    Stats::add(&shared.stats.values_sliced, sliced);
    Stats::add(&shared.stats.slices_restarted, restarted);
}

/// Advances the full sync for at most the rest of the slice.
pub fn advance_full_sync(
    reader: &Reader,
    shared: &Shared,
    st: &mut Replication,
    deadline: Instant,
) {
    // Our request goes first (see `Probe::own_due`).
    // Lent out: its pushes are not in step (the merge bound must not rise
    // on them).
    let running = (!st.peer.progress.own_request_due()).then(|| st.peer.progress.lend_sync());
    let Some(mut running) = running.flatten() else {
        return;
    };
    let sync = &mut running.sync;
    while !shared.queue.is_full() && Instant::now() < deadline && !sync.is_done() {
        if !st.unread.is_empty() {
            // They ship after the sync's end: it must not sweep them away.
            sync.missed_elsewhere();
        }
        let shipments: Vec<Shipment> =
            sync.step(reader, &st.versions, shared.node_id, CATCH_UP_BATCH);
        let mut entries: Vec<Entry> = shipments
            .into_iter()
            .map(|(db, stamp, op)| entry(db, stamp, op))
            .collect();
        crate::capture::hashes::as_states(reader.ctx(), shared, st, &mut entries, true);
        keep_unread(shared, st, sync);
        count_sliced(shared, sync);
        let refused = || shared.stats.entries_refused.load(Ordering::Relaxed);
        let before = refused();
        let pushed = push(shared, st, entries, false);
        if refused() != before {
            // A key it found did not go: the sweep must not remove it.
            sync.missed_elsewhere();
        }
        let Ok(last_seq) = pushed else {
            // Cannot happen after `is_full` said no (single producer); start over.
            st.peer.progress.sync_dropped();
            return;
        };
        if last_seq != 0 {
            sync.last_seq = last_seq;
        }
        st.peer.report.entries = sync.sent;
    }
    let (done, last_seq) = (sync.is_done(), sync.last_seq);
    if done {
        redis_module::logging::log_notice(format!(
            "rdmasync: full sync sent: {} keys and tombstones in {} ms",
            sync.sent,
            sync.started.elapsed().as_millis()
        ));
    }
    st.peer.progress.return_sync(running);
    if done {
        st.peer.full_sync_sent(last_seq);
    }
}
