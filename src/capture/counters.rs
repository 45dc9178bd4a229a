//! Local writes of counters as the flush records them, and the counter
//! state every path that reads a key (flush, backlog, full sync) ships in
//! place of its plain value while the key has merge metadata (issue 27).

use crate::catchup::replication::Replication;
use crate::converge::merge::codec;
use crate::converge::merge::counters::integer_of;
use crate::converge::version::{KeyVersion, Stamp};
use crate::ops::fallbacks::Fallback;
use crate::proto::entry::{Encoding, Entry, Op};
use crate::redis::snapshot::Snapshot;
use crate::shared::Shared;

/// What a read found of a key, as a counter sees it.
fn integer_read(snap: Option<&Snapshot>) -> Result<Option<i128>, ()> {
    match snap {
        None => Ok(None),
        Some(s) if s.encoding == Encoding::RawString => integer_of(&s.payload).map(Some).ok_or(()),
        Some(_) => Err(()),
    }
}

/// A local change of a key as the flush stamps it.
pub struct LocalChange<'a> {
    /// Database.
    pub db: u32,
    /// Key.
    pub key: &'a [u8],
    /// Its stamp.
    pub stamp: Stamp,
    /// The sum of its increments, when the flush found it only
    /// incremented (with `merge-counters`).
    pub sum: Option<i128>,
    /// Its version before the change.
    pub before: Option<KeyVersion>,
    /// What the key holds now (`None`: absent).
    pub snap: Option<&'a Snapshot>,
}

/// Records a local change in the counter table.
pub fn local_change(shared: &Shared, st: &mut Replication, change: LocalChange<'_>) {
    let LocalChange {
        db,
        key,
        stamp,
        sum,
        before,
        snap,
    } = change;
    let held_before = st.versions.counters.contains(db, key);
    if sum.is_none() && !held_before {
        // A plain write of a key that is not a counter: nothing to record.
        return;
    }
    let now = integer_read(snap);
    // A key with no version here is absent as of the database's newest
    // flush: its base is stamped with that flush, as the peer's is once it
    // trims this node's state at the flush (a base at the zero stamp here
    // and at the flush there would not be the same base, and the peer's,
    // newer, would drop the increments folded into this one).
    let before = before.or_else(|| {
        Some(KeyVersion::Deleted {
            stamp: st.versions.floor(db),
            gc_after: 0,
        })
    });
    match (sum, now) {
        (Some(sum), Ok(Some(after))) => {
            if !st
                .versions
                .counters
                .local_increment(db, key, stamp, sum, after, before)
            {
                fallback(
                    shared,
                    Fallback::IncrementAsWrite,
                    "an increment taken as a set (its value disagreed with the counter's \
                     state, or too many increments wait for the peer)",
                );
            }
        }
        (_, now) => {
            let held = st.versions.counters.local_write(db, key, stamp, now);
            if !held && now.is_err() && sum.is_some() {
                fallback(
                    shared,
                    Fallback::TypeChange,
                    "an increment of a key that is not a counter",
                );
            }
        }
    }
    if held_before || st.versions.counters.contains(db, key) {
        st.versions.journal_counter(db, key);
    }
}

/// Every value or delete in `entries` of a key with merge metadata ships
/// as the key's counter state instead (whichever path read it: a flush,
/// the backlog, a full sync); the others stay plain.
pub fn as_states(st: &mut Replication, entries: &mut [Entry]) {
    if st.versions.counters.is_empty() {
        return;
    }
    for e in entries.iter_mut() {
        let (key, expiry_ms) = match &mut e.op {
            Op::Value { key, expiry_ms, .. } => (key, *expiry_ms),
            Op::Delete { key } => (key, None),
            _ => continue,
        };
        if let Some(c) = st.versions.counters.shipped(e.db, key) {
            let state = codec::encode_counter(&c);
            st.versions.counters.sent(e.db, key);
            let key = std::mem::take(key);
            e.op = Op::Counter {
                key,
                state,
                expiry_ms,
            };
        }
    }
}

/// The notice a batch with keys in it opens with: this node's merge bound,
/// which is all it had seen of a key it held at rest.
pub fn bound_notice(shared: &Shared, st: &Replication) -> Op {
    use crate::converge::merge::hash_codec::{encode_notice, Notice};
    let notice = Notice {
        bound: st.versions.counters.bound().clone(),
        applied: Some(crate::capture::hashes::applied_now(shared, st)),
        coverage: st.coverage(),
    };
    Op::Bound {
        seen: encode_notice(&notice),
    }
}

/// In step, with counter metadata not yet collected and nothing of ours
/// waiting for the peer's ack: sends the bound notice alone, which the
/// peer acknowledges (with its own coverage), so that the bound moves and
/// the metadata is collected on an idle link too. At once when our own
/// changes lag in the bound; otherwise now and then (the peer's coverage
/// may have come while this node could not take it, and it is not sent
/// again until it moves).
pub fn probe(shared: &Shared, st: &mut Replication) {
    let Some(coverage) = st.coverage() else {
        return;
    };
    let counters = &st.versions.counters;
    if counters.live_len() + st.versions.hashes.len() == 0 || !st.own_bound.is_idle() {
        return;
    }
    let urgent = counters.bound().clock(shared.node_id) < coverage && !st.own_bound.held_back();
    if !st.own_bound.probe_due(std::time::Instant::now(), urgent) {
        return;
    }
    let notice =
        crate::capture::flush::entry(0, Stamp::new(0, shared.node_id), bound_notice(shared, st));
    let _ = crate::capture::flush::push(shared, st, vec![notice], false);
}

/// A write that merges as a whole key instead of per element (`why`, for
/// the debug log): counted in STATUS under `reason`.
pub fn fallback(shared: &Shared, reason: Fallback, why: &str) {
    crate::ops::fallbacks::count(&shared.stats, reason, 1);
    redis_module::logging::log_debug(format!("rdmasync: merge: {why}: merged as a whole key"));
}
