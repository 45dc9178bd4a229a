//! A big value read by a catch-up a slice per step (issue 26, point 3):
//! by a full or since sync before its next page, or at the front of the
//! backlog. The read is good only if nothing changed the key while it
//! ran: its version, and the databases as a whole (a flush or swap moves
//! keys without a version under the same name), are checked before each
//! slice, and the reader checks the type, the length and the count.

use crate::converge::version::{Stamp, VersionStore};
use crate::redis::server::{self, Slice, SlicedRead};
use crate::redis::snapshot::{Reader, Snapshot};

/// Reads of one big value started again after the key changed under
/// them; the next reads it at once.
pub const MAX_SLICED_RESTARTS: u8 = 3;

/// A big value being read a slice at a time.
#[derive(Debug)]
pub struct BigRead {
    /// Its database.
    pub db: u32,
    /// Its key.
    pub key: Vec<u8>,
    /// The key's version when the read started: the value ships at it
    /// only if it is still the key's version when the read ends.
    pub stamp: Stamp,
    read: SlicedRead,
    restarts: u8,
    /// The store's count of database flushes and swaps when it started.
    db_changes: u64,
}

/// What one step of a big read came to.
pub enum BigStep {
    /// More slices to read.
    More(BigRead),
    /// The value, to ship at the read's stamp.
    Done(BigRead, Snapshot),
    /// The key changed: start again (the read says how many times it did).
    Changed(BigRead),
    /// Read it at once: it cannot be read in slices, or changed too often.
    Whole(BigRead),
}

impl BigRead {
    /// A read of `key` of database `db` at version `stamp` when its value
    /// is big (see [`SlicedRead::start`]); else the key back.
    pub fn begin(
        reader: &Reader,
        versions: &VersionStore,
        (db, key): (u32, Vec<u8>),
        stamp: Stamp,
        restarts: u8,
    ) -> Result<Self, Vec<u8>> {
        let original = server::selected_db(reader.ctx());
        server::select_db(reader.ctx(), db);
        let read = reader.start_sliced(&key);
        server::select_db(reader.ctx(), original);
        match read {
            Some(read) => Ok(Self {
                db,
                key,
                stamp,
                read,
                restarts,
                db_changes: versions.db_changes(),
            }),
            None => Err(key),
        }
    }

    /// Times it started again so far.
    pub fn restarts(&self) -> u8 {
        self.restarts
    }

    /// The next slice, the key's version being `now`.
    pub fn step(mut self, reader: &Reader, versions: &VersionStore, now: Stamp) -> BigStep {
        let unchanged = now == self.stamp && versions.db_changes() == self.db_changes;
        let slice = match unchanged {
            true => {
                let original = server::selected_db(reader.ctx());
                server::select_db(reader.ctx(), self.db);
                let slice = reader.read_slice(&mut self.read, &self.key);
                server::select_db(reader.ctx(), original);
                slice
            }
            false => Slice::Changed,
        };
        match slice {
            Slice::More => BigStep::More(self),
            Slice::Done(payload, dump, expiry_ms) => {
                BigStep::Done(self, Snapshot::sliced(payload, dump, expiry_ms))
            }
            Slice::Changed if self.restarts < MAX_SLICED_RESTARTS => BigStep::Changed(self),
            Slice::Changed | Slice::Whole => BigStep::Whole(self),
        }
    }
}
