//! The peer's states of hashes, sets, sorted sets and lists, and its plain writes
//! of such keys this node holds with merge metadata, merged per element
//! (issue 27, `merge-elements`) and written as the elements that changed.

use redis_module::{CallOptions, Context};

use super::apply::run as call;
use super::apply_plan::Outcome;
use crate::capture::counters::fallback;
use crate::capture::state::main_state;
use crate::catchup::replication::Replication;
use crate::converge::merge::hashes::{score_of, Bytes, HashState, Kind, Writes};
use crate::converge::merge::lists::ListEdit;
use crate::converge::merge::{hash_codec, relisted};
use crate::converge::ttl_ops;
use crate::converge::version::{KeyVersion, Stamp};
use crate::ops::fallbacks::Fallback;
use crate::proto::entry::{Encoding, Entry, Op};
use crate::redis::server::{self, ElementKey, End};
use crate::shared::Shared;

/// Elements set or deleted per command.
const FIELDS_PER_CALL: usize = 512;

/// The commands that set and delete elements of a `kind` key (a list's
/// pushes, which [`write_list`] calls otherwise).
fn commands(kind: Kind) -> (&'static str, &'static str) {
    match kind {
        Kind::Hash => ("HSET", "HDEL"),
        Kind::Set => ("SADD", "SREM"),
        Kind::SortedSet => ("ZADD", "ZREM"),
        Kind::List => ("RPUSH", "LPUSH"),
    }
}

/// The arguments that set one element: a field and its value, a member, a
/// score (as text that reads back as the same double) and its member;
/// `Err` for a score that is not one.
fn set_args(
    kind: Kind,
    (name, value): &(Bytes, Bytes),
    args: &mut Vec<Vec<u8>>,
) -> Result<(), String> {
    match kind {
        Kind::Hash => args.extend([name.clone(), value.clone()]),
        Kind::Set | Kind::List => args.push(name.clone()),
        Kind::SortedSet => {
            let score = score_of(value)
                .filter(|s| !s.is_nan())
                .ok_or_else(|| format!("a score of {} bytes in the peer's state", value.len()))?;
            args.extend([format!("{score:e}").into_bytes(), name.clone()]);
        }
    }
    Ok(())
}

/// Makes the server hold the merged value of a `kind` key: `DEL` first
/// when every element without metadata went, then sets and deletes of the
/// elements that changed.
fn write(
    ctx: &Context,
    opts: &CallOptions,
    (key, kind): (&[u8], Kind),
    w: &Writes,
) -> Result<(), String> {
    if kind == Kind::List {
        return write_list(ctx, opts, key, &w.list);
    }
    if w.clear {
        call(ctx, opts, "DEL", &[key])?;
    }
    if matches!(kind, Kind::Hash | Kind::SortedSet) {
        if let Some(done) = write_elements(ctx, (key, kind), w) {
            return done;
        }
    }
    let (set, del) = commands(kind);
    for chunk in w.set.chunks(FIELDS_PER_CALL) {
        let mut owned = Vec::with_capacity(2 * chunk.len());
        for element in chunk {
            set_args(kind, element, &mut owned)?;
        }
        let mut args: Vec<&[u8]> = Vec::with_capacity(1 + owned.len());
        args.push(key);
        args.extend(owned.iter().map(Vec::as_slice));
        call(ctx, opts, set, &args)?;
    }
    for chunk in w.del.chunks(FIELDS_PER_CALL) {
        let mut args: Vec<&[u8]> = Vec::with_capacity(1 + chunk.len());
        args.push(key);
        args.extend(chunk.iter().map(Vec::as_slice));
        call(ctx, opts, del, &args)?;
    }
    Ok(())
}

/// A hash's fields or a sorted set's members written through the key API
/// (`None`: the server cannot, nothing written). Removals alone are first
/// narrowed to the elements the key holds: a write that changes nothing
/// leaves `WATCH` be, as an `HDEL` or `ZREM` of absent elements does.
fn write_elements(
    ctx: &Context,
    (key, kind): (&[u8], Kind),
    w: &Writes,
) -> Option<Result<(), String>> {
    if !w.set.is_empty() {
        return server::write_elements(ctx, (key, kind), &w.set, &w.del);
    }
    // An absent key, or one of another type: the commands say what they do.
    let (values, _) = ElementKey::new(ctx, key)
        .values_and_expiry(kind, &w.del)
        .ok()?;
    let held: Vec<Bytes> = w
        .del
        .iter()
        .zip(values)
        .filter_map(|(name, value)| value.map(|_| name.clone()))
        .collect();
    if held.is_empty() {
        return Some(Ok(()));
    }
    server::write_elements(ctx, (key, kind), &[], &held)
}

/// `values` pushed at `end` of `key` in this order: through the key API
/// where the server can, else `command` with `values` as its arguments,
/// 512 at a time.
fn push_all<'a>(
    ctx: &Context,
    opts: &CallOptions,
    (end, key): (End, &[u8]),
    values: impl Iterator<Item = &'a Bytes>,
) -> Result<(), String> {
    let values: Vec<&[u8]> = values.map(Vec::as_slice).collect();
    if values.is_empty() {
        return Ok(());
    }
    if let Some(done) = server::push_elements(ctx, key, end, &values) {
        return done;
    }
    let command = if end == End::Head { "LPUSH" } else { "RPUSH" };
    for chunk in values.chunks(FIELDS_PER_CALL) {
        let mut args: Vec<&[u8]> = Vec::with_capacity(1 + chunk.len());
        args.push(key);
        args.extend_from_slice(chunk);
        call(ctx, opts, command, &args)?;
    }
    Ok(())
}

/// `count` elements popped at `end` of `key`: through the key API where
/// the server can, else `LPOP` or `RPOP` with a count.
fn pop_some(
    ctx: &Context,
    opts: &CallOptions,
    (end, key): (End, &[u8]),
    count: usize,
) -> Result<(), String> {
    if count == 0 || server::pop_elements(ctx, key, end, count).is_some() {
        return Ok(());
    }
    let command = if end == End::Head { "LPOP" } else { "RPOP" };
    call(ctx, opts, command, &[key, count.to_string().as_bytes()])
}

/// Makes the server's list hold a merge's outcome: pops and pushes at the
/// ends, or the list written anew when its rest changed.
fn write_list(
    ctx: &Context,
    opts: &CallOptions,
    key: &[u8],
    edit: &ListEdit,
) -> Result<(), String> {
    match edit {
        ListEdit::Unchanged => {}
        ListEdit::Rebuild(all) => {
            call(ctx, opts, "DEL", &[key])?;
            push_all(ctx, opts, (End::Tail, key), all.iter())?;
        }
        ListEdit::Ends { left, right } => {
            pop_some(ctx, opts, (End::Head, key), left.pop)?;
            // Innermost first: the head ends as listed.
            push_all(ctx, opts, (End::Head, key), left.push.iter().rev())?;
            pop_some(ctx, opts, (End::Tail, key), right.pop)?;
            push_all(ctx, opts, (End::Tail, key), right.push.iter())?;
        }
    }
    Ok(())
}

/// The peer's state of a hash (`Op::Fields`), merged and written.
pub(super) fn state(
    ctx: &Context,
    opts: &CallOptions,
    shared: &Shared,
    st: &mut Replication,
    e: &Entry,
) -> Result<Outcome, String> {
    let Op::Fields {
        key,
        state,
        expiry_ms,
    } = &e.op
    else {
        return Ok(Outcome::Discarded);
    };
    let incoming =
        hash_codec::decode_hash(state).map_err(|why| format!("hash state of the peer: {why}"))?;
    // A removal alone names no write: the entry's stamp is the change's.
    let newest = incoming.newest().max(Stamp::new(e.clock, e.origin));
    if newest <= st.versions.floor(e.db) {
        // Every write in it is older than a flush applied here.
        return Ok(Outcome::Discarded);
    }
    let Some(incoming) = without_relisted(st, e, incoming) else {
        // All of it was applied here before the bound went down.
        return Ok(Outcome::Discarded);
    };
    let info = server::key_info(ctx, key);
    let mut before = Before {
        exists: info.exists(),
        expiry_ms: info.expiry_ms,
    };
    if info.exists() && server::kind_of_type(info.kind) != Some(incoming.kind) {
        if let Some(outcome) = over_other_type(ctx, opts, shared, st, e, &incoming, newest)? {
            return Ok(outcome);
        }
        before = Before::default();
    }
    note_own_delete(shared, st, (e.db, key), before.exists);
    let bound = st.versions.counters.bound().clone();
    let w = st
        .versions
        .hashes
        .remote((e.db, key), &incoming, &bound, &ElementKey::new(ctx, key));
    st.versions.journal_hashes();
    count_undone(shared, &w);
    let held = st.versions.ttls.get(e.db, key); // a newer TTL write here stays
    let expiry = (!before.exists || w.expiry_from_incoming)
        .then(|| ttl_ops::expiry_after_value(newest, *expiry_ms, held));
    let at = (newest, shared.node_id);
    settle(
        ctx,
        opts,
        st,
        (e.db, key, incoming.kind),
        (&w, before),
        expiry,
        at,
    )
}

/// `incoming` without what it lists again that this node applied and
/// folded at rest before its merge bound went down (`relisted`); `None`
/// when nothing is left. While the bound is at its highest, the merge
/// itself drops what the bound covers.
fn without_relisted(st: &Replication, e: &Entry, incoming: HashState) -> Option<HashState> {
    let (bound, folded) = (st.versions.counters.bound(), st.versions.counters.folded());
    if bound == folded {
        return Some(incoming);
    }
    relisted::without_relisted(incoming, Stamp::new(e.clock, e.origin), folded)
}

/// A whole write of a list made here lost to one made at once elsewhere:
/// counted.
fn count_undone(shared: &Shared, w: &Writes) {
    if w.whole_undone {
        fallback(
            shared,
            Fallback::ListWholeUndone,
            "a list's pops or edits undone by a whole write of it made at once elsewhere",
        );
    }
}

/// What the key was before a merge wrote it.
#[derive(Debug, Clone, Copy, Default)]
struct Before {
    exists: bool,
    expiry_ms: Option<u64>,
}

/// A state arrives for a key this node deleted at rest (its tombstone is
/// this node's, the table does not hold it): the delete may not have
/// reached the peer, and once this state is applied the key's version is
/// no longer the delete, so the backlog would never ship it. It goes into
/// the table as a removal of what this node had applied then (what it
/// applied since of this key would have brought the key back).
fn note_own_delete(shared: &Shared, st: &mut Replication, (db, key): (u32, &[u8]), exists: bool) {
    if exists || st.versions.hashes.contains(db, key) {
        return;
    }
    let Some(KeyVersion::Deleted { stamp, .. }) = st.versions.get(db, key) else {
        return;
    };
    if stamp.node != shared.node_id {
        return;
    }
    let mut seen = crate::capture::hashes::applied_before(st, stamp);
    seen.observe(stamp);
    st.versions.hashes.note_delete((db, key), &seen);
}

/// The peer's state meets a value of another type here: a whole write
/// newer than it replaces it (deleted here; `None`: go on), else the state
/// is not applied (`Some`). So does a change of some elements whose
/// removal had seen this value (the peer deleted the key and wrote these
/// elements: they are the whole key; found by a test, a DEL and HSET made
/// while the link was cut lost to the peer's older string). Another change
/// of some elements cannot make the whole key here: this node's value
/// ships again, newer, and the peer either takes it or (its key newer)
/// ships its key whole.
fn over_other_type(
    ctx: &Context,
    opts: &CallOptions,
    shared: &Shared,
    st: &mut Replication,
    e: &Entry,
    incoming: &HashState,
    newest: Stamp,
) -> Result<Option<Outcome>, String> {
    let Some(key) = e.key() else {
        return Ok(Some(Outcome::Discarded));
    };
    let here = version_of(st, e.db, key);
    let replaced_here = here != Stamp::ZERO && incoming.removed.covers(here);
    if incoming.base.is_none() && !replaced_here {
        fallback(
            shared,
            Fallback::TypeChange,
            "an element change over a write of another type",
        );
        if let Some(mut dirty) = main_state().dirty.get() {
            dirty.mark(e.db, key);
        }
        return Ok(Some(Outcome::Discarded));
    }
    if newest <= here {
        fallback(
            shared,
            Fallback::TypeChange,
            "an element change older than a write of another type",
        );
        return Ok(Some(Outcome::Discarded));
    }
    fallback(
        shared,
        Fallback::TypeChange,
        "an element change newer than a write of another type",
    );
    call(ctx, opts, "DEL", &[key])?;
    if st.versions.counters.forget(e.db, key) {
        st.versions.journal_counter(e.db, key);
    }
    if st.versions.hashes.forget(e.db, key) {
        st.versions.journal_hashes();
    }
    Ok(None)
}

/// The key's version here (`Stamp::ZERO`: none).
fn version_of(st: &Replication, db: u32, key: &[u8]) -> Stamp {
    st.versions
        .get(db, key)
        .map_or(Stamp::ZERO, KeyVersion::stamp)
}

/// Writes what a merge gave, sets the expiry it brought (`expiry`:
/// `Some` when the incoming one wins) and records the key's version.
fn settle(
    ctx: &Context,
    opts: &CallOptions,
    st: &mut Replication,
    (db, key, kind): (u32, &[u8], Kind),
    (w, before): (&Writes, Before),
    expiry: Option<Option<u64>>,
    (newest, me): (Stamp, u64),
) -> Result<Outcome, String> {
    write(ctx, opts, (key, kind), w)?;
    if kind == Kind::List && !w.clear {
        keep_list_ttl(ctx, opts, key, before)?;
    }
    // A set leaves the key there; a delete of elements may have taken it.
    let mut exists = !w.set.is_empty()
        || (before.exists && !w.clear && w.del.is_empty())
        || server::key_info(ctx, key).exists();
    // A key written again after a DEL, or new, has no TTL, unless this
    // node's TTL write survives the removal that cleared it.
    let kept = before
        .expiry_ms
        .filter(|_| before.exists && w.clear && w.expiry_survives);
    let expiry = expiry.or(kept.map(Some));
    let had_ttl = before.exists && before.expiry_ms.is_some() && !w.clear;
    match expiry {
        Some(Some(at)) if exists => {
            let at = at.to_string();
            call(ctx, opts, "PEXPIREAT", &[key, at.as_bytes()])?;
            exists = server::key_info(ctx, key).exists();
        }
        Some(None) if exists && had_ttl => call(ctx, opts, "PERSIST", &[key])?,
        _ => {}
    }
    let version = version_of(st, db, key).max(newest);
    if exists {
        st.versions.record_write(db, key, version);
    } else {
        st.versions.record_merged_absent(db, key, version, me);
    }
    Ok(Outcome::Applied)
}

/// A list written anew or popped empty and pushed again lost its TTL,
/// which no removal took: set again.
fn keep_list_ttl(
    ctx: &Context,
    opts: &CallOptions,
    key: &[u8],
    before: Before,
) -> Result<(), String> {
    let Some(at) = before.expiry_ms.filter(|_| before.exists) else {
        return Ok(());
    };
    let now = server::key_info(ctx, key);
    if now.exists() && now.expiry_ms.is_none() {
        call(ctx, opts, "PEXPIREAT", &[key, at.to_string().as_bytes()])?;
    }
    Ok(())
}

/// The peer's plain value or delete of a key this node holds with merge
/// metadata: merged (`None` when the key is not held, or when a value of
/// another type is the newer write: the caller applies it as any key).
///
/// A plain write comes from a key the peer holds at rest (its own changes
/// of a merged key ship as states): a value of the held type holds nothing
/// this node lacks, a delete removes what the peer had applied when it
/// read the batch.
pub(super) fn plain(
    ctx: &Context,
    opts: &CallOptions,
    shared: &Shared,
    st: &mut Replication,
    e: &Entry,
) -> Option<Result<Outcome, String>> {
    let (key, value_kind) = match &e.op {
        Op::Value {
            key,
            payload,
            encoding,
            ..
        } => (
            key,
            (*encoding == Encoding::Dump)
                .then(|| crate::redis::dump::merged_kind(payload))
                .flatten(),
        ),
        Op::Delete { key } => (key, None),
        _ => return None,
    };
    let held_kind = st.versions.hashes.get(e.db, key)?.kind();
    let same_type = value_kind == Some(held_kind);
    let stamp = Stamp::new(e.clock, e.origin);
    match &e.op {
        Op::Value { .. } if same_type => Some(Ok(Outcome::Discarded)),
        Op::Value { .. } if stamp > version_of(st, e.db, key) => {
            // Another type, newer: it wins as any write of the key does.
            fallback(
                shared,
                Fallback::TypeChange,
                "a write of another type over a merged key",
            );
            st.versions.hashes.forget(e.db, key);
            st.versions.journal_hashes();
            None
        }
        Op::Value { .. } => {
            // Another type, older: this node's hash wins, and ships again
            // whole at a new stamp so that the peer takes it over its own.
            fallback(
                shared,
                Fallback::TypeChange,
                "a write of another type older than a merged key",
            );
            if let Some(mut dirty) = main_state().dirty.get() {
                dirty.mark(e.db, key);
            }
            Some(Ok(Outcome::Discarded))
        }
        _ => plain_delete(
            ctx,
            opts,
            st,
            (e.db, key, held_kind),
            (stamp, shared.node_id),
        ),
    }
}

/// The peer's plain delete of a held key: removes what the peer had
/// applied when it read the batch.
fn plain_delete(
    ctx: &Context,
    opts: &CallOptions,
    st: &mut Replication,
    (db, key, kind): (u32, &[u8], Kind),
    (stamp, me): (Stamp, u64),
) -> Option<Result<Outcome, String>> {
    let applied = st.peer_applied.clone().or_else(|| st.peer_bound.clone())?;
    let bound = st.versions.counters.bound().clone();
    let local = ElementKey::new(ctx, key);
    let w = st
        .versions
        .hashes
        .remote_delete((db, key), &applied, &bound, &local)?;
    st.versions.journal_hashes();
    let before = Before {
        exists: true,
        expiry_ms: server::key_info(ctx, key).expiry_ms,
    };
    Some(settle(
        ctx,
        opts,
        st,
        (db, key, kind),
        (&w, before),
        None,
        (stamp, me),
    ))
}

/// Merged keys of `db` written here after a flush the peer made (`keep`,
/// the survivors just restored whole): the peer flushed the elements it
/// held and got only the elements changed since, so each ships again
/// whole, at a new stamp (counted; without `merge-elements`, nothing to
/// do).
pub(super) fn flush_survivors(ctx: &Context, db: u32, keep: &[Box<[u8]>]) {
    if !crate::capture::fields::enabled() || keep.is_empty() {
        return;
    }
    let main = main_state();
    let Some(mut dirty) = main.dirty.get() else {
        return;
    };
    for key in keep {
        if server::kind_of_type(server::key_info(ctx, key).kind).is_some() {
            crate::shared::with_shared(|s| {
                crate::ops::fallbacks::count(&s.stats, Fallback::FlushSurvivor, 1)
            });
            dirty.mark(db, key);
        }
    }
}
