//! The flush's side of big strings only appended to (`converge::appends`):
//! such a key ships the bytes appended since the version it last shipped
//! at, read alone, instead of its whole value; every big string read whole
//! becomes the base of the next appends.

use redis_module::Context;

use crate::capture::flush::entry;
use crate::capture::state::main_state;
use crate::catchup::replication::Replication;
use crate::converge::appends::{AppendEdit, Base};
use crate::converge::version::{KeyVersion, Stamp};
use crate::ops::status::Stats;
use crate::proto::entry::{Entry, Op};
use crate::redis::server;
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
    let main = main_state();
    let Some(mut window) = main.appends.get() else {
        return keys;
    };
    if window.is_empty() {
        return keys;
    }
    let mut whole = Vec::with_capacity(keys.len());
    for key in keys {
        let appended = window.take(db, &key).then(|| tail_of(ctx, st, (db, &key)));
        let Some((base, len_now, tail)) = appended.flatten() else {
            whole.push(key);
            continue;
        };
        let stamp = Stamp::new(shared.clock.tick(wall), shared.node_id);
        st.last_local_stamp = stamp.clock;
        st.versions.record_write(db, &key, stamp);
        st.versions
            .appends
            .shipped((db, &key), stamp, Some(len_now));
        let edit = AppendEdit {
            base: base.stamp,
            len_before: base.len,
            tail: &tail,
        };
        Stats::add(&shared.stats.appends_shipped, 1);
        out.push(entry(
            db,
            stamp,
            Op::Append {
                key,
                edit: edit.encode(),
            },
        ));
    }
    whole
}

/// The base `key` was appended to, its length now and the bytes past the
/// base; `None` when it ships whole (no base at its version, a merged
/// key, not longer).
fn tail_of(
    ctx: &Context,
    st: &Replication,
    (db, key): (u32, &[u8]),
) -> Option<(Base, usize, Vec<u8>)> {
    if st.versions.counters.contains(db, key) || st.versions.hashes.contains(db, key) {
        return None;
    }
    let Some(KeyVersion::Live(version)) = st.versions.get(db, key) else {
        return None;
    };
    let base = st.versions.appends.base_at((db, key), version)?;
    let from = usize::try_from(base.len).ok()?;
    let (len, tail) = server::string_tail(ctx, key, Some(from))?;
    (base.grew_to(len) && tail.len() == len - from).then_some((base, len, tail))
}

/// A value of `key` read whole and shipped at `stamp` (`len`: a string's
/// length; `None`: another type or absent): the base of its next appends,
/// if it is big.
pub fn shipped_whole(
    st: &mut Replication,
    (db, key): (u32, &[u8]),
    stamp: Stamp,
    len: Option<usize>,
) {
    if len.is_some() || !st.versions.appends.is_empty() {
        st.versions.appends.shipped((db, key), stamp, len);
    }
}
