//! TTL writes of keys whose value ships whole (`converge::ttl_ops`): a
//! change that wrote only a key's TTL ships as `Op::Expire`, which leaves
//! the value as each node has it, and a value or delete that ships again
//! (a resend, the backlog, a sync) takes with it the key's TTL write when
//! that is newer.

use redis_module::Context;

use crate::capture::fields::Changes;
use crate::capture::flush::entry;
use crate::catchup::replication::Replication;
use crate::converge::merge::counters::integer_of;
use crate::converge::version::{KeyVersion, Stamp};
use crate::proto::entry::{Encoding, Entry, Op};
use crate::redis::server;
use crate::redis::snapshot::{Read, Reader};

/// Whether a key's changes since the last flush wrote its TTL alone.
pub fn ttl_only(changes: &Changes) -> bool {
    changes.ttl && changes.kind.is_none() && changes.changed.is_empty()
}

/// The TTL write of `key` (of the selected database `db`) stamped
/// `stamp`: recorded, and the op that ships it; `None` when the key ships
/// whole instead (gone, never versioned here, or holding merge metadata,
/// whose state carries its TTL).
pub fn ttl_change(
    ctx: &Context,
    st: &mut Replication,
    (db, key): (u32, &[u8]),
    stamp: Stamp,
) -> Option<Op> {
    if st.versions.counters.contains(db, key) || st.versions.hashes.contains(db, key) {
        return None;
    }
    // A key of no version here may be unknown to the peer: its value ships.
    if !matches!(st.versions.get(db, key), Some(KeyVersion::Live(v)) if v < stamp) {
        return None;
    }
    let info = server::key_info(ctx, key);
    // A merged type's state carries its TTL write (and the key's type).
    if !info.exists() || server::kind_of_type(info.kind).is_some() {
        return None;
    }
    if info.is_string() && crate::capture::increments::enabled() && may_count(ctx, key) {
        // A counter's increments ship as its state, which carries no TTL
        // write: its TTL writes ship whole, as its base (found by CI's
        // fault test with merges: a PERSIST of a counter was lost).
        return None;
    }
    st.versions.record_ttl(db, key, (stamp, info.expiry_ms));
    Some(Op::Expire {
        key: key.to_vec(),
        expiry_ms: info.expiry_ms,
    })
}

/// The entry that ships this node's (`me`) TTL write of `key` held above
/// its version, if any (the version is the peer's: the value it has).
pub fn own_ttl_write(st: &Replication, (db, key): (u32, Vec<u8>), me: u64) -> Option<Entry> {
    let (stamp, expiry_ms) = st
        .versions
        .ttls
        .get(db, &key)
        .filter(|(s, _)| s.node == me)?;
    Some(entry(db, stamp, Op::Expire { key, expiry_ms }))
}

/// Whether the string `key` holds an integer (a counter that may merge
/// increments), or could not be read.
fn may_count(ctx: &Context, key: &[u8]) -> bool {
    match Reader::new(ctx).read_one(key) {
        Read::Value(snap) => {
            snap.encoding != Encoding::RawString || integer_of(&snap.payload).is_some()
        }
        Read::Absent | Read::Failed => true,
    }
}

/// Puts after each value, state or delete in `entries` the TTL write of its key
/// held here when newer than it: the peer takes the value (or delete) and
/// the TTL each by its own stamp.
pub fn with_ttl_writes(st: &Replication, entries: &mut Vec<Entry>) {
    if st.versions.ttls.is_empty() {
        return;
    }
    let mut out = Vec::with_capacity(entries.len() + 1);
    for e in entries.drain(..) {
        let write = match &e.op {
            // A merged key's state too (the backlog and syncs ship it in
            // place of its value): the peer that holds the key merged
            // ships it again whole, one that does not takes the TTL.
            Op::Value { key, .. }
            | Op::Delete { key }
            | Op::Fields { key, .. }
            | Op::Counter { key, .. } => st
                .versions
                .ttls
                .get(e.db, key)
                .filter(|(s, _)| *s > Stamp::new(e.clock, e.origin))
                .map(|(s, expiry_ms)| {
                    let key = key.clone();
                    entry(e.db, s, Op::Expire { key, expiry_ms })
                }),
            _ => None,
        };
        out.push(e);
        out.extend(write);
    }
    *entries = out;
}
