//! The peer's counter states, and its plain writes of keys this node holds
//! as counters with metadata, merged (issue 27) and written as the value
//! that results.

use redis_module::{CallOptions, Context};

use super::apply::run as call;
use super::apply_plan::Outcome;
use crate::capture::counters::fallback;
use crate::catchup::replication::Replication;
use crate::converge::merge::codec;
use crate::converge::merge::counters::{integer_of, Local, Merged, Plain, PlainOutcome};
use crate::converge::version::{KeyVersion, Stamp, GC_AT_NEXT_ACK};
use crate::ops::fallbacks::Fallback;
use crate::ops::status::unix_ms;
use crate::proto::entry::{Encoding, Entry, Op};
use crate::redis::server::{self, SetTail};
use crate::redis::snapshot::{Read, Reader};
use crate::shared::Shared;

/// Writes the counter's merged value: `SET` of the integer (with the
/// incoming expiry when its base won, else keeping the TTL held), or
/// `DEL` when the counter is absent.
fn write(
    ctx: &Context,
    opts: &CallOptions,
    key: &[u8],
    value: Option<i128>,
    expiry: Option<Option<u64>>,
) -> Result<(), String> {
    let Some(value) = value else {
        return call(ctx, opts, "DEL", &[key]);
    };
    let text = value.to_string();
    let at = expiry.flatten().map(|at| at.to_string());
    let tail = match (expiry, &at) {
        (None, _) => SetTail::KeepTtl,
        (Some(_), Some(at)) => SetTail::PxAt(at.as_bytes()),
        (Some(_), None) => SetTail::Plain,
    };
    server::set_string(ctx, key, text.as_bytes(), tail)
}

/// What this node holds of `key` (the table does not hold it).
fn local(ctx: &Context, st: &Replication, db: u32, key: &[u8]) -> Local {
    let version = st.versions.get(db, key);
    let stamp = version.map_or(Stamp::ZERO, KeyVersion::stamp);
    match Reader::new(ctx).read_one(key) {
        Read::Absent => Local::Absent(stamp),
        Read::Value(s) if s.encoding == Encoding::RawString => match integer_of(&s.payload) {
            Some(v) => Local::Integer(v, stamp),
            None => Local::Other(stamp),
        },
        Read::Value(_) | Read::Failed => Local::Other(stamp),
    }
}

/// Writes what a merge gave and records the key's version.
fn settle(
    ctx: &Context,
    opts: &CallOptions,
    (st, me): (&mut Replication, u64),
    (db, key): (u32, &[u8]),
    merged: Merged,
    expiry_ms: Option<u64>,
) -> Result<Outcome, String> {
    let Merged::Value {
        value,
        base_won,
        version,
        ..
    } = merged
    else {
        return Ok(Outcome::Discarded);
    };
    // A TTL write held here newer than the value keeps its expiry.
    let held = st.versions.ttls.get(db, key);
    let expiry_ms = crate::converge::ttl_ops::expiry_after_value(version, expiry_ms, held);
    // Never lower the key's version (collection folds increments away).
    let version = st
        .versions
        .get(db, key)
        .map_or(version, |v| v.stamp().max(version));
    let absent_here = !server::key_info(ctx, key).exists();
    let expiry = if base_won || absent_here {
        Some(expiry_ms)
    } else {
        None
    };
    if value.is_some() && expiry.flatten().is_some_and(|at| at <= unix_ms()) {
        // Expired on arrival: gone here as on its origin, by itself.
        if !absent_here {
            call(ctx, opts, "DEL", &[key])?;
        }
        st.versions.record_delete(db, key, version, GC_AT_NEXT_ACK);
        st.versions.expired(db, key, GC_AT_NEXT_ACK);
        return Ok(Outcome::Applied);
    }
    st.versions.journal_counter(db, key);
    write(ctx, opts, key, value, expiry)?;
    if value.is_some() {
        st.versions.record_write(db, key, version);
    } else {
        st.versions.record_merged_absent(db, key, version, me);
    }
    Ok(Outcome::Applied)
}

/// Writes again the values of counters a flush trimmed (kept because
/// written after it, their parts before it removed).
pub(super) fn rewrite_trimmed(
    ctx: &Context,
    opts: &CallOptions,
    st: &mut Replication,
) -> Result<(), String> {
    for (db, key) in st.versions.counters.take_trimmed() {
        let Some(value) = st.versions.counters.get(db, &key).map(|c| c.value()) else {
            continue;
        };
        server::select_db(ctx, db);
        st.versions.journal_counter(db, &key);
        write(ctx, opts, &key, value, None)?;
    }
    Ok(())
}

/// The peer's counter state (`Op::Counter`).
pub(super) fn state(
    ctx: &Context,
    opts: &CallOptions,
    shared: &Shared,
    st: &mut Replication,
    e: &Entry,
) -> Result<Outcome, String> {
    let Op::Counter {
        key,
        state,
        expiry_ms,
    } = &e.op
    else {
        return Ok(Outcome::Notice);
    };
    let mut incoming = codec::decode_counter(state).map_err(|err| err.to_string())?;
    let floor = st.versions.floor(e.db);
    if incoming.newest() <= floor {
        // All of it older than a flush of the database held here.
        return Ok(Outcome::Discarded);
    }
    // What a flush held here removed is not taken back in.
    incoming.trim(floor);
    // Read only when the table does not hold the key (else unused).
    let held = if st.versions.counters.contains(e.db, key) {
        Local::Absent(Stamp::ZERO)
    } else {
        local(ctx, st, e.db, key)
    };
    let merged = st
        .versions
        .counters
        .remote_state(e.db, key, &incoming, || held);
    if let Merged::Value {
        type_changed: true, ..
    }
    | Merged::Discarded = merged
    {
        fallback(
            shared,
            Fallback::TypeChange,
            "a counter against another type",
        );
    }
    settle(
        ctx,
        opts,
        (st, shared.node_id),
        (e.db, key),
        merged,
        *expiry_ms,
    )
}

/// The peer's plain value or delete of a key: merged when the table holds
/// the key (`None` otherwise, or when it falls back to last writer wins:
/// the caller applies it as any key).
pub(super) fn plain(
    ctx: &Context,
    opts: &CallOptions,
    shared: &Shared,
    st: &mut Replication,
    e: &Entry,
) -> Option<Result<Outcome, String>> {
    let (key, plain, expiry_ms) = match &e.op {
        Op::Value {
            key,
            payload,
            expiry_ms,
            encoding,
        } => {
            let int = (*encoding == Encoding::RawString)
                .then(|| integer_of(payload))
                .flatten();
            (key, int.map_or(Plain::Other, Plain::Integer), *expiry_ms)
        }
        Op::Delete { key } => (key, Plain::Deleted, None),
        _ => return None,
    };
    if !st.versions.counters.contains(e.db, key) {
        return None;
    }
    let stamp = Stamp::new(e.clock, e.origin);
    let seen = st.peer_bound.clone();
    match st
        .versions
        .counters
        .remote_plain(e.db, key, stamp, plain, seen.as_ref())
    {
        PlainOutcome::NotHeld => None,
        PlainOutcome::WholeKey => other_type_over_counter(shared, st, e, key),
        PlainOutcome::Merged(merged) => Some(settle(
            ctx,
            opts,
            (st, shared.node_id),
            (e.db, key),
            merged,
            expiry_ms,
        )),
    }
}

/// The peer's value of another type meets a counter held here: newer, it
/// wins as any write of the key does (`None`: the caller applies it);
/// older, the counter stays as it is.
fn other_type_over_counter(
    shared: &Shared,
    st: &mut Replication,
    e: &Entry,
    key: &[u8],
) -> Option<Result<Outcome, String>> {
    fallback(
        shared,
        Fallback::TypeChange,
        "a write of another type over a counter",
    );
    let held = st
        .versions
        .get(e.db, key)
        .map_or(Stamp::ZERO, KeyVersion::stamp);
    if Stamp::new(e.clock, e.origin) <= held {
        return Some(Ok(Outcome::Discarded));
    }
    st.versions.counters.forget(e.db, key);
    st.versions.journal_counter(e.db, key);
    None
}

/// The peer's bound notice (`Op::Bound`): kept for the plain writes after
/// it in its batch, and acknowledged (a notice alone is the peer's probe
/// for the ack that moves its bound, see `capture::counters::probe`).
pub(super) fn bound(st: &mut Replication, e: &Entry) -> Outcome {
    if let Op::Bound { seen } = &e.op {
        let notice = crate::converge::merge::hash_codec::decode_notice(seen).ok();
        st.peer_bound = notice.as_ref().map(|n| n.bound.clone());
        st.peer_applied = notice.as_ref().and_then(|n| n.applied.clone());
        st.peer_batch_coverage = notice.and_then(|n| n.coverage).map(|c| (e.origin, c));
    }
    st.peer.applied(e.seq);
    Outcome::Notice
}

/// The peer acknowledged our changes up to `applied` (`in_step` and
/// holding ours up to `holds`, as it said): the bound rises, and counters
/// whose metadata it passed rest.
pub(super) fn bound_moved(
    st: &mut Replication,
    (me, peer): (u64, u64),
    (applied, in_step, holds): (u64, bool, u64),
) {
    if let Some(clock) = st.own_bound.acked(applied, in_step, holds) {
        st.versions.raise_merge_bound(me, clock);
    }
    let covered = st.versions.covered(peer);
    st.versions.raise_merge_bound(peer, covered);
    st.versions.collect_counters();
    let bound = st.versions.counters.bound().clone();
    st.versions.collect_hashes(&bound);
    st.versions.fold_ttl_writes(&bound);
}
