//! Local changes of hashes, sets, sorted sets and lists as the flush records them,
//! and the state every path that reads such a key with merge metadata
//! ships in place of its plain value (issue 27, with `merge-elements`).
//!
//! A change of some elements ships those elements only: a field's value or
//! a member's score read through the key API, not the whole key (a set's
//! command says what it left). A whole write of the key (or a delete of
//! one with metadata) ships the whole state, which keeps every element
//! written elsewhere that it had not seen.

use redis_module::Context;

use crate::capture::counters::fallback;
use crate::capture::fields::{Changes, Post};
use crate::catchup::replication::Replication;
use crate::converge::merge::hash_codec;
use crate::converge::merge::hashes::{Bytes, Change, Kind, Whole};
use crate::converge::merge::lists::{self, End};
use crate::converge::merge::Seen;
use crate::converge::version::{KeyVersion, Stamp};
use crate::ops::fallbacks::Fallback;
use crate::proto::entry::{Entry, Op};
use crate::redis::server::{self, ElementKey};
use crate::shared::Shared;

/// Whether the hash `key` of `db` may hold a field with a TTL: the state
/// carries none, so such a hash ships whole with the server's own DUMP,
/// merged as a whole key (counted).
fn has_field_ttls(ctx: &Context, db: u32, key: &[u8]) -> bool {
    server::field_ttls_possible()
        && ElementKey::new(ctx, key).may_hold_field_ttls(server::db_may_hold_field_ttls(ctx, db))
}

/// What this node had applied before its change stamped `stamp`: its own
/// earlier changes and every origin's up to its watermark.
pub fn applied_before(st: &Replication, stamp: Stamp) -> Seen {
    let mut seen: Seen = st.versions.watermarks().collect();
    seen.raise(stamp.node, stamp.clock.saturating_sub(1));
    seen
}

/// What this node has applied now (its bound notice says it with each
/// batch): every change it made, and every origin's up to its watermark.
pub fn applied_now(shared: &Shared, st: &Replication) -> Seen {
    let mut seen: Seen = st.versions.watermarks().collect();
    seen.raise(shared.node_id, st.last_local_stamp);
    seen
}

/// A key changed only in some elements (and maybe its TTL) since the last
/// flush, as `noted`, stamped `stamp` (`before`: its version before):
/// records the change and returns the delta to ship, or `None` when the key
/// holds no merged type any more, or not the one noted (its whole value is
/// read instead).
pub fn field_change(
    ctx: &Context,
    shared: &Shared,
    st: &mut Replication,
    (db, key): (u32, &[u8]),
    stamp: Stamp,
    noted: Changes,
    before: Option<KeyVersion>,
) -> Option<Op> {
    let reads: Vec<Bytes> = noted
        .changed
        .iter()
        .filter(|(_, post)| matches!(post, Post::Read | Post::Incr(_)))
        .map(|(name, _)| name.clone())
        .collect();
    // One open of the key: its type, the values read and its expiry.
    let (kind, (values, expiry_ms)) = ElementKey::new(ctx, key).kind_values_and_expiry(&reads)?;
    if noted.kind.is_some_and(|n| n != kind) || (kind == Kind::Hash && has_field_ttls(ctx, db, key))
    {
        return None;
    }
    let changes = match kind {
        Kind::List => list_runs(noted.changed, stamp)?,
        _ => element_changes(noted.changed, values),
    };
    let applied = applied_before(st, stamp);
    let created = matches!(before, Some(KeyVersion::Deleted { .. }));
    let (state, written_instead) = st.versions.hashes.local_changes(
        (db, key, kind),
        stamp,
        (changes, noted.ttl),
        &applied,
        created,
    );
    for _ in 0..written_instead {
        fallback(
            shared,
            Fallback::IncrementAsWrite,
            "an increment taken as a write of the value it left (its value disagreed with the \
             element's state, a whole write's field, or too many increments wait)",
        );
    }
    st.versions.journal_hashes();
    Some(Op::Fields {
        key: key.to_vec(),
        state: hash_codec::encode_hash(&state),
        expiry_ms,
    })
}

/// A list's pushes (in the order made) as the runs they add at each end,
/// named by `stamp` (see `converge::merge::lists`); `None` when a change
/// is no push (a pop: the list is read whole).
fn list_runs(noted: Vec<(Bytes, Post)>, stamp: Stamp) -> Option<Vec<(Bytes, Change)>> {
    let mut left = std::collections::VecDeque::new();
    let mut right = Vec::new();
    for (value, post) in noted {
        match post {
            Post::PushLeft => left.push_front(value),
            Post::PushRight => right.push(value),
            _ => return None,
        }
    }
    let left: Vec<Bytes> = left.into();
    let runs = [(End::Left, left), (End::Right, right)];
    Some(
        runs.into_iter()
            .filter(|(_, values)| !values.is_empty())
            .map(|(end, values)| {
                let run = Change::Write(lists::encode_values(&values));
                (lists::run_name(end, stamp), run)
            })
            .collect(),
    )
}

/// Each noted element's change, with the values read for those whose
/// value is read (in the order noted; `None`: absent).
fn element_changes(noted: Vec<(Bytes, Post)>, values: Vec<Option<Bytes>>) -> Vec<(Bytes, Change)> {
    let mut values = values.into_iter();
    let mut read = || values.next().flatten();
    noted
        .into_iter()
        .map(|(name, post)| {
            let change = match post {
                Post::Read => read().map_or(Change::Remove, Change::Write),
                Post::Incr(delta) => read().map_or(Change::Remove, |v| Change::Increment(delta, v)),
                Post::Present => Change::Write(Vec::new()),
                // A list's pushes go by `list_runs`.
                Post::Absent | Post::PushLeft | Post::PushRight => Change::Remove,
                Post::PopLeft(_) | Post::PopRight(_) => Change::Remove,
            };
            (name, change)
        })
        .collect()
}

/// A whole change of `key` stamped `stamp`, when its database merges
/// hashes: records it when the key is (or was) a hash, and returns the
/// state that ships in place of the plain value; `None` when the plain
/// value says it all (another type, or a delete of a key without
/// metadata). `ship`: the state is shipped now (else only recorded, and
/// read again when the backlog ships it). `Err` when the hash could not be
/// read: nothing was recorded, the key is read again later.
pub fn whole_change(
    ctx: &Context,
    shared: &Shared,
    st: &mut Replication,
    (db, key): (u32, &[u8]),
    stamp: Stamp,
    ship: bool,
) -> Result<Option<Op>, ()> {
    let info = server::key_info(ctx, key);
    let held = st.versions.hashes.contains(db, key);
    let kind = server::kind_of_type(info.kind)
        .filter(|k| *k != Kind::Hash || !has_field_ttls(ctx, db, key));
    let now = match kind {
        _ if !info.exists() => Whole::Absent,
        Some(_) if ship => {
            let (read, elements) = ElementKey::new(ctx, key).all().ok_or(())?;
            Whole::Elements(read, elements)
        }
        // A key arriving in slices records its elements (see
        // `hashes_arriving`): they are read now; if they cannot be, the
        // write is recorded as any other (its value read when it ships).
        Some(kind) if st.versions.hashes.is_arriving(db, key) => {
            match ElementKey::new(ctx, key).all() {
                Some((read, elements)) => Whole::Elements(read, elements),
                None => {
                    st.versions.hashes.end_arrival(db, key);
                    Whole::Elements(kind, Vec::new())
                }
            }
        }
        Some(kind) => Whole::Elements(kind, Vec::new()),
        None => {
            if held {
                fallback(
                    shared,
                    Fallback::TypeChange,
                    "a write of another type over a merged key, or a field TTL",
                );
            }
            Whole::Other
        }
    };
    let applied = applied_before(st, stamp);
    let state = st
        .versions
        .hashes
        .local_whole((db, key), stamp, now, &applied);
    st.versions.journal_hashes();
    Ok(state.filter(|_| ship).map(|state| Op::Fields {
        key: key.to_vec(),
        state: hash_codec::encode_hash(&state),
        expiry_ms: info.expiry_ms,
    }))
}

/// Every value or delete in `entries` of a key with merge metadata ships
/// as its whole state instead (a resend, the backlog, a full sync). Reads
/// the key again through the key API, in its database. A delete of this
/// node's (its version: the key is absent since) removes everything this
/// node has applied: a delete not recorded in the table when it was made
/// (the key was at rest) is not lost by the state taking its place. With
/// `rest` (a sync), a state carries the elements at rest too, for a peer
/// that lost its data.
pub fn as_states(
    ctx: &Context,
    shared: &Shared,
    st: &mut Replication,
    entries: &mut [Entry],
    rest: bool,
) {
    if st.versions.hashes.is_empty() {
        return;
    }
    let selected = server::selected_db(ctx);
    let applied = applied_now(shared, st);
    for e in entries.iter_mut() {
        let (key, expiry_ms, own_delete) = match &mut e.op {
            Op::Value { key, expiry_ms, .. } => (key, *expiry_ms, false),
            Op::Delete { key } => (key, None, e.origin == shared.node_id),
            _ => continue,
        };
        let Some(held_kind) = st.versions.hashes.get(e.db, key).map(|h| h.kind()) else {
            continue;
        };
        if !server::select_db(ctx, e.db) {
            continue;
        }
        let local = ElementKey::new(ctx, key);
        if !own_delete && local.kind() != Some(held_kind) {
            // The key holds another type since (its change not flushed
            // yet): its plain value ships, the flush records the change.
            continue;
        }
        if let Some(mut state) = st.versions.hashes.whole(e.db, key, &local, rest) {
            if own_delete {
                state.removed.join(&applied);
            }
            e.op = Op::Fields {
                key: std::mem::take(key),
                state: hash_codec::encode_hash(&state),
                expiry_ms,
            };
        }
    }
    server::select_db(ctx, selected);
}
