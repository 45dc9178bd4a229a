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
use crate::converge::version::{Decision, KeyVersion, Stamp};
use crate::ops::status::Stats;
use crate::proto::entry::Entry;
use crate::redis::server;
use crate::shared::Shared;

/// Appends the peer's bytes when they are the newer write of `key` and
/// this node holds the version they were appended to; counts them and
/// keeps its own value when it holds another (the peer ships the key
/// again, see [`after_discard`]).
pub(super) fn append(
    ctx: &Context,
    (opts, shared, me): (&CallOptions, &Shared, u64),
    st: &mut Replication,
    e: &Entry,
    (key, edit): (&[u8], &[u8]),
) -> Result<Outcome, String> {
    let Some(edit) = AppendEdit::decode(edit) else {
        return Err("appended bytes of the peer: shorter than their header".into());
    };
    let decision = decide(ctx, st, me, e, key);
    if decision != Decision::Apply {
        return Ok(Outcome::of(decision));
    }
    let version = match st.versions.get(e.db, key) {
        Some(KeyVersion::Live(stamp)) => Some(stamp),
        _ => None,
    };
    let len = server::string_tail(ctx, key, None).map(|(n, _)| n);
    if !holds_base(&edit, version, len) {
        Stats::add(&shared.stats.appends_unapplied, 1);
        ship_again(st, (e.db, key));
        return Ok(Outcome::Discarded);
    }
    run(ctx, opts, "APPEND", &[key, edit.tail])?;
    let stamp = Stamp::new(e.clock, e.origin);
    st.versions.record_write(e.db, key, stamp);
    let len_now = len.map(|n| n + edit.tail.len());
    st.versions.appends.shipped((e.db, key), stamp, len_now);
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
    if !matches!(st.versions.get(e.db, key), Some(KeyVersion::Live(_))) {
        return;
    }
    let len = server::string_tail(ctx, key, None).map(|(n, _)| n);
    if ships_again_after_discard(len) {
        ship_again(st, (e.db, key));
        Stats::add(&shared.stats.appends_reshipped, 1);
    }
}

/// `key`'s value ships again at its version (read at the next flush, as a
/// resend whose read failed is: `resend::retry_unread`).
fn ship_again(st: &mut Replication, (db, key): (u32, &[u8])) {
    if let Some(KeyVersion::Live(version)) = st.versions.get(db, key) {
        st.unread.insert((db, Box::from(key)), version);
    }
}
