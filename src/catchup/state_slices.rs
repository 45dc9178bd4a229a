//! A big key's merge state shipped by a sync, or from the backlog, a slice
//! of elements per step (issue 26, point 3, with `merge-elements`): a
//! hash, set or sorted set whose elements were written while the peer was
//! away holds each with its metadata, and its whole state, built and
//! merged at once, held the main threads of both nodes for seconds
//! (2,000,000 fields: 8.9 s on the writer, 18.4 s on the peer). Each slice
//! is a state by itself (`Held::slice`), merged as it comes, so neither
//! node holds its main thread longer than a slice takes; the receiver
//! makes its own whole writes of the key element by element until the
//! last slice arrives (`merge::hashes_arriving`).

use crate::converge::changes::PendingOp;
use crate::converge::merge::hash_codec;
use crate::converge::merge::hashes::{Bytes, Kind, LocalHash, STATE_SLICE};
use crate::converge::version::{KeyVersion, Stamp, VersionStore};
use crate::proto::entry::Op;
use crate::redis::server::{self, ElementKey};
use crate::redis::snapshot::Reader;

/// A key's state being shipped a slice at a time.
#[derive(Debug)]
pub struct StateSlices {
    /// Its database.
    pub db: u32,
    /// Its key.
    pub key: Vec<u8>,
    /// The last element shipped (`None`: none yet).
    after: Option<Bytes>,
    /// A local change of the key was recorded since the first slice.
    changed: bool,
}

/// What one step of it came to.
pub enum StateStep {
    /// A slice to ship (at the key's version), more to follow.
    More(StateSlices, (u32, Stamp, Op)),
    /// The last slice.
    Last((u32, Stamp, Op)),
    /// Its state no longer ships in slices (a whole write since, a new
    /// type, no metadata): the key is read whole, as any other.
    Whole((u32, Vec<u8>)),
}

/// Runs `read` with database `db` selected on the reader's context.
fn in_db<T>(reader: &Reader, db: u32, read: impl FnOnce() -> T) -> T {
    let original = server::selected_db(reader.ctx());
    server::select_db(reader.ctx(), db);
    let out = read();
    server::select_db(reader.ctx(), original);
    out
}

impl StateSlices {
    /// Slices of the state of `key` of database `db`, when it ships so
    /// (see `Held::ships_in_slices`); else the key back.
    pub fn begin(
        reader: &Reader,
        versions: &VersionStore,
        (db, key): (u32, Vec<u8>),
    ) -> Result<Self, (u32, Vec<u8>)> {
        let Some(held) = versions.hashes.get(db, &key) else {
            return Err((db, key));
        };
        let present = in_db(reader, db, || {
            let local = ElementKey::new(reader.ctx(), &key);
            (local.kind() == Some(held.kind())).then(|| local.field_count())
        });
        match present {
            Some(present) if held.ships_in_slices(present) => Ok(Self {
                changed: false,
                db,
                key,
                after: None,
            }),
            _ => Err((db, key)),
        }
    }

    /// Whether the local change `op` may change the key: a change of it,
    /// a flush, a swap.
    pub fn is_changed_by(&self, op: &PendingOp) -> bool {
        match op {
            PendingOp::Key { db, key } => *db == self.db && *key == self.key,
            other => other.is_flush_or_swap(),
        }
    }

    /// A local change of the key was recorded since the first slice (held
    /// in the backlog's op being sliced, it would not ship by itself).
    pub fn key_changed(&mut self) {
        self.changed = true;
    }

    /// Whether a local change of the key was recorded since the first
    /// slice.
    pub fn changed(&self) -> bool {
        self.changed
    }

    /// The next slice, at the key's version now.
    pub fn step(self, reader: &Reader, versions: &VersionStore) -> StateStep {
        let Some(KeyVersion::Live(stamp)) = versions.get(self.db, &self.key) else {
            // Deleted since: its delete ships (or is read) as any other.
            return StateStep::Whole((self.db, self.key));
        };
        let held = versions
            .hashes
            .get(self.db, &self.key)
            .filter(|h| h.key_parts().0.is_none() && h.kind() != Kind::List && h.is_big());
        let Some(held) = held else {
            return StateStep::Whole((self.db, self.key));
        };
        let (state, next) = held.slice(self.after.as_deref(), STATE_SLICE);
        let expiry_ms = in_db(reader, self.db, || {
            server::key_info(reader.ctx(), &self.key).expiry_ms
        });
        let op = Op::Fields {
            key: self.key.clone(),
            state: hash_codec::encode_hash(&state),
            expiry_ms,
        };
        let shipment = (self.db, stamp, op);
        match next {
            Some(after) => StateStep::More(
                Self {
                    after: Some(after),
                    ..self
                },
                shipment,
            ),
            None => StateStep::Last(shipment),
        }
    }
}
