//! The peer's bytes appended to a big string (`Op::Append`,
//! `converge::appends`): appended here onto the version they were
//! appended to, never onto another; and a big string's value shipped again
//! at its version when the peer's edit cannot be taken here or the peer's
//! write of it loses here.

use redis_module::{CallOptions, Context};

use super::apply::{decide, run};
use super::apply_plan::Outcome;
use crate::catchup::replication::Replication;
use crate::converge::appends::{holds_base, ships_again_after_discard, AppendEdit};
use crate::converge::ttl_ops;
use crate::converge::version::{Decision, KeyVersion, Stamp};
use crate::ops::status::Stats;
use crate::proto::entry::{Entry, Op};
use crate::redis::server;
use crate::shared::Shared;

/// Appends the peer's bytes when they are the newer write of `key` and
/// this node holds the version they were appended to, then sets the
/// key's expiry as a value's is; counts them and keeps its own value when
/// it holds another (it ships what it holds again, see [`ship_again`]).
pub(super) fn append(
    ctx: &Context,
    (opts, shared, me): (&CallOptions, &Shared, u64),
    st: &mut Replication,
    e: &Entry,
) -> Result<Outcome, String> {
    let Op::Append {
        key,
        edit,
        expiry_ms,
    } = &e.op
    else {
        return Ok(Outcome::Notice);
    };
    let (key, expiry_ms) = (key.as_slice(), *expiry_ms);
    let Some(edit) = AppendEdit::decode(edit) else {
        return Err("appended bytes of the peer: no bytes, or shorter than their header".into());
    };
    let decision = decide(ctx, st, me, e, key);
    if decision != Decision::Apply {
        return Ok(Outcome::of(decision));
    }
    let version = match st.versions.get(e.db, key) {
        Some(KeyVersion::Live(stamp)) => Some(stamp),
        _ => None,
    };
    let here = server::string_tail(ctx, key, None);
    if !holds_base(&edit, version, here.as_ref().map(|s| s.len)) {
        Stats::add(&shared.stats.appends_unapplied, 1);
        ship_again(st, (e.db, key), here.is_some(), edit.base);
        return Ok(Outcome::Discarded);
    }
    run(ctx, opts, "APPEND", &[key, edit.tail])?;
    let stamp = Stamp::new(e.clock, e.origin);
    st.versions.record_write(e.db, key, stamp);
    let len_now = here.as_ref().map(|s| s.len + edit.tail.len());
    st.versions.appends.shipped((e.db, key), stamp, len_now);
    // A TTL write held here newer than the append keeps its TTL.
    let held = st.versions.ttls.get(e.db, key);
    let expiry = ttl_ops::expiry_after_value(stamp, expiry_ms, held);
    if expiry != here.and_then(|s| s.expiry_ms) {
        match expiry {
            Some(at) => run(ctx, opts, "PEXPIREAT", &[key, at.to_string().as_bytes()])?,
            None => run(ctx, opts, "PERSIST", &[key])?,
        }
        if !server::key_info(ctx, key).exists() {
            // An expiry in the past took it, as it does on the peer.
            let gc_after = st.peer.last_pushed.max(1);
            st.versions.record_delete(e.db, key, stamp, gc_after);
        }
    }
    Ok(Outcome::Applied)
}

/// The peer's write of `e`'s key lost here (`decision`): a big string's
/// value ships again at its version (see `converge::appends`: the peer may
/// hold another version than the one this node appended to, and could not
/// take the appended bytes).
pub(super) fn after_discard(
    ctx: &Context,
    shared: &Shared,
    st: &mut Replication,
    e: &Entry,
    decision: Decision,
) {
    let (Decision::Stale, Some(key)) = (decision, e.key()) else {
        return;
    };
    let Some(KeyVersion::Live(version)) = st.versions.get(e.db, key) else {
        return;
    };
    let len = server::string_tail(ctx, key, None).map(|s| s.len);
    if ships_again_after_discard(len) {
        value_again(st, (e.db, key), version);
        Stats::add(&shared.stats.appends_reshipped, 1);
    }
}

/// What this node holds of `key` ships again, older than the peer's
/// appended bytes it could not take (the peer discards it and ships its
/// value whole, see `after_discard`): its value at its version; without
/// the key (`exists` false: deleted, expired, evicted, or its tombstone
/// collected) a delete at `base`, older than the appended bytes and than
/// any version the peer holds since, so it never wins there.
fn ship_again(st: &mut Replication, (db, key): (u32, &[u8]), exists: bool, base: Stamp) {
    let version = st.versions.get(db, key);
    match version {
        Some(KeyVersion::Live(v)) if exists => value_again(st, (db, key), v),
        _ => {
            let seen = version.map(KeyVersion::stamp);
            st.deletes_again
                .retain(|(d, k, _, _)| !(*d == db && &k[..] == key));
            st.deletes_again.push((db, Box::from(key), base, seen));
        }
    }
}

/// `key`'s value ships again whole at its version `v`, as a resend whose
/// read failed is (`resend::retry_unread`); until then (and so for the
/// appends made before it ships) it has no base: an append ships it whole.
fn value_again(st: &mut Replication, (db, key): (u32, &[u8]), v: Stamp) {
    st.unread.insert((db, Box::from(key)), v);
    st.versions.appends.shipped((db, key), v, None);
}
