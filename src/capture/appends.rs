//! The flush's side of big strings only appended to (`converge::appends`):
//! such a key ships the bytes appended since the version it last shipped
//! at, read alone, instead of its whole value; every big string read whole
//! becomes the base of the next appends.

use redis_module::Context;

use crate::capture::flush::entry;
use crate::capture::state::main_state;
use crate::catchup::replication::Replication;
use crate::converge::appends::{AppendEdit, Base, APPEND_MIN_BYTES};
use crate::converge::version::{KeyVersion, Stamp};
use crate::ops::status::Stats;
use crate::proto::entry::{Encoding, Entry, Op};
use crate::redis::server::{self, StringTail};
use crate::shared::Shared;

/// Ships the keys of `db` (selected) only appended to since they last
/// shipped, each stamped with its appended bytes; returns the other keys,
/// to read whole.
pub fn ship_appends(
    ctx: &Context,
    shared: &Shared,
    st: &mut Replication,
    (db, wall): (u32, u64),
    keys: Vec<Vec<u8>>,
    out: &mut Vec<Entry>,
) -> Vec<Vec<u8>> {
    // Taken before any key is opened: an open may expire a key, whose
    // event forgets it in the window.
    let appended: Vec<bool> = match main_state().appends.get() {
        Some(mut window) if !window.is_empty() => {
            keys.iter().map(|key| window.take(db, key)).collect()
        }
        _ => return keys,
    };
    let mut whole = Vec::with_capacity(keys.len());
    for (key, appended) in keys.into_iter().zip(appended) {
        let Some((base, read)) = appended.then(|| tail_of(ctx, st, (db, &key))).flatten() else {
            whole.push(key);
            continue;
        };
        let stamp = Stamp::new(shared.clock.tick(wall), shared.node_id);
        st.last_local_stamp = stamp.clock;
        st.versions.record_write(db, &key, stamp);
        st.note_local_write((db, &key), stamp);
        st.versions
            .appends
            .shipped((db, &key), stamp, Some(read.len));
        let edit = AppendEdit {
            base: base.stamp,
            len_before: base.len,
            tail: &read.tail,
        };
        Stats::add(&shared.stats.appends_shipped, 1);
        let op = Op::Append {
            key,
            edit: edit.encode(),
            expiry_ms: read.expiry_ms,
        };
        out.push(entry(db, stamp, op));
    }
    whole
}

/// The base `key` was appended to and what it holds now (its length, the
/// bytes past the base, its expiry); `None` when it ships whole (no base
/// at its version, a merged key, not longer).
fn tail_of(ctx: &Context, st: &Replication, (db, key): (u32, &[u8])) -> Option<(Base, StringTail)> {
    if st.versions.counters.contains(db, key) || st.versions.hashes.contains(db, key) {
        return None;
    }
    let Some(KeyVersion::Live(version)) = st.versions.get(db, key) else {
        return None;
    };
    // A key queued to ship again whole has no base (`receive::apply_append`).
    let base = st.versions.appends.base_at((db, key), version)?;
    let from = usize::try_from(base.len).ok()?;
    let read = server::string_tail(ctx, key, Some(from))?;
    (base.grew_to(read.len) && read.tail.len() == read.len - from).then_some((base, read))
}

/// Every big string `entries` ship whole at the key's version (live,
/// a resend, a catch-up, a full sync): the base of its next appends.
pub fn bases_of(st: &mut Replication, entries: &[Entry]) {
    for e in entries {
        let Op::Value {
            key,
            payload,
            encoding: Encoding::RawString,
            ..
        } = &e.op
        else {
            continue;
        };
        let stamp = Stamp::new(e.clock, e.origin);
        let current = matches!(st.versions.get(e.db, key), Some(KeyVersion::Live(v)) if v == stamp);
        if payload.len() >= APPEND_MIN_BYTES && current {
            st.versions
                .appends
                .shipped((e.db, key), stamp, Some(payload.len()));
        }
    }
}
