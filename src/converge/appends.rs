//! Big strings that were only appended to since they last shipped ship the
//! bytes appended, not the whole value (issue 26, point 3: an `APPEND` of
//! one byte to a 512 MiB string read and shipped the 512 MiB).
//!
//! - **The window** ([`AppendWindow`]): the keys whose every write event
//!   since the last flush was `append`. Any other event of the key (a
//!   `set`, a `setrange`, a `del`, an expiry...), a change the module
//!   marks itself (`capture::silent`) or a flush of the data takes it out.
//!   `APPEND` never changes the bytes already there, so the value of such
//!   a key is the value it had, then more bytes.
//! - **The base** ([`AppendBases`]): for a string of at least
//!   [`APPEND_MIN_BYTES`] this node shipped (whole or appended to), the
//!   version it shipped and its length then. A key of the window whose
//!   version is still that one and that is longer now ships
//!   [`AppendEdit`]: the base, the length at it, and the bytes past it.
//!   Anything else (no base, another version, a value not longer, a short
//!   string) ships whole, as before.
//! - **The receiver** applies an edit only onto the same base (its version
//!   of the key is the base and the key is a string of the length at it):
//!   `APPEND` of the bytes, which its AOF and replicas take as the
//!   command, then the expiry the edit carries, set as a value's is.
//!   Otherwise, when the edit is the newer write, it cannot build the
//!   value: it keeps what it holds, counts the edit (`appends_unapplied`)
//!   and ships what it holds again: its value at its version, or without
//!   the key a delete at the base's stamp.
//! - **Why that converges.** The receiver holds another version than the
//!   base when it made a write of the key the sender had not applied when
//!   it appended (that write is on its way), when its version moved
//!   without a write (a TTL write folded into it at rest), or when it lost
//!   the key (an eviction). Either way something of the receiver's, at a
//!   version older than the edit, reaches the sender: the write, or what it
//!   ships again. The sender discards it, and a node that discards the
//!   peer's write of a big string ships its own value again at its version
//!   ([`ships_again_after_discard`]), never at a new stamp (a new stamp
//!   would be a write no client made, and could win over one made at
//!   once); until it has shipped, the key has no base, so appends made
//!   meanwhile do not ship as edits the receiver cannot take. The receiver
//!   takes that whole value (it is newer), and the nodes agree. A write
//!   the receiver made after it took the edit in is newer than the edit
//!   (its clock observed it) and wins on both nodes by itself.

use hashbrown::HashMap;

use crate::converge::merge::db_key::{swap_dbs_in, DbKey};
use crate::converge::version::Stamp;

/// Strings this long or longer ship their appended bytes alone.
pub const APPEND_MIN_BYTES: usize = 64 * 1024;

/// Bases kept at most (past it, any one goes for a new one: a key without
/// a base ships whole once and has one again).
const MAX_BASES: usize = 4096;

/// Bytes before the appended bytes in an encoded [`AppendEdit`].
const HEADER: usize = 24;

/// The keys only appended to since the last flush.
#[derive(Debug, Default)]
pub struct AppendWindow {
    keys: HashMap<(u32, Vec<u8>), ()>,
}

impl AppendWindow {
    /// A write event on `key` of `db`; `already_dirty`: it changed before
    /// in this window (or rests). An `append` of a key not dirty before
    /// starts its window; any other event ends it.
    pub fn event(&mut self, db: u32, key: &[u8], event: &[u8], already_dirty: bool) {
        if event != b"append" {
            if !self.keys.is_empty() {
                self.keys.remove(&DbKey(db, key));
            }
            return;
        }
        if !already_dirty && !self.keys.contains_key(&DbKey(db, key)) {
            self.keys.insert((db, key.to_vec()), ());
        }
    }

    /// Whether `key` was only appended to since the last flush; forgets it.
    pub fn take(&mut self, db: u32, key: &[u8]) -> bool {
        !self.keys.is_empty() && self.keys.remove(&DbKey(db, key)).is_some()
    }

    /// Forgets `key` (changed in a way no event says).
    pub fn forget(&mut self, db: u32, key: &[u8]) {
        if !self.keys.is_empty() {
            self.keys.remove(&DbKey(db, key));
        }
    }

    /// Forgets every key (a flush of the data, a swap of databases).
    pub fn clear(&mut self) {
        self.keys.clear();
    }

    /// Whether no key is in it.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// A version of a big string this node shipped and its length then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Base {
    /// The version shipped.
    pub stamp: Stamp,
    /// The string's length at it.
    pub len: u64,
}

/// The bases of the big strings this node shipped last.
#[derive(Debug, Default, Clone)]
pub struct AppendBases {
    bases: HashMap<(u32, Vec<u8>), Base>,
}

impl AppendBases {
    /// `key` shipped at `stamp`, `len` bytes long (`None`: not a string):
    /// its base from now on, if it is big.
    pub fn shipped(&mut self, (db, key): (u32, &[u8]), stamp: Stamp, len: Option<usize>) {
        let big = len.filter(|&n| n >= APPEND_MIN_BYTES);
        let Some(len) = big else {
            if !self.bases.is_empty() {
                self.bases.remove(&DbKey(db, key));
            }
            return;
        };
        let base = Base {
            stamp,
            len: len as u64,
        };
        if let Some(held) = self.bases.get_mut(&DbKey(db, key)) {
            *held = base;
            return;
        }
        if self.bases.len() >= MAX_BASES {
            let any = self.bases.keys().next().cloned();
            if let Some(any) = any {
                self.bases.remove(&any);
            }
        }
        self.bases.insert((db, key.to_vec()), base);
    }

    /// The base `key` ships its appended bytes from: the one it has at
    /// `version` (its version before this flush's change), if any.
    pub fn base_at(&self, (db, key): (u32, &[u8]), version: Stamp) -> Option<Base> {
        if self.bases.is_empty() {
            return None;
        }
        self.bases
            .get(&DbKey(db, key))
            .filter(|b| b.stamp == version)
            .copied()
    }

    /// Forgets every base (a flush of the data).
    pub fn clear(&mut self) {
        self.bases.clear();
    }

    /// Moves the bases with their databases (`SWAPDB a b`).
    pub fn swap_dbs(&mut self, a: u32, b: u32) {
        swap_dbs_in(&mut self.bases, a, b);
    }

    /// Bases held.
    pub fn len(&self) -> usize {
        self.bases.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.bases.is_empty()
    }
}

impl Base {
    /// Whether a string `len_now` bytes long grew from it and is big: its
    /// bytes past the base ship alone.
    pub fn grew_to(&self, len_now: usize) -> bool {
        len_now as u64 > self.len && len_now >= APPEND_MIN_BYTES
    }
}

/// The bytes appended to a string since a version of it, as they travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendEdit<'a> {
    /// The version they were appended to.
    pub base: Stamp,
    /// The string's length at it.
    pub len_before: u64,
    /// The bytes appended.
    pub tail: &'a [u8],
}

impl AppendEdit<'_> {
    /// The encoded edit: the base's clock and node, the length before
    /// (little-endian u64 each), then the bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.tail.len());
        out.extend_from_slice(&self.base.clock.to_le_bytes());
        out.extend_from_slice(&self.base.node.to_le_bytes());
        out.extend_from_slice(&self.len_before.to_le_bytes());
        out.extend_from_slice(self.tail);
        out
    }

    /// Reads an encoded edit; `None` when it is shorter than its header or
    /// appends nothing.
    pub fn decode(bytes: &[u8]) -> Option<AppendEdit<'_>> {
        let word = |i: usize| {
            let b: [u8; 8] = bytes.get(i * 8..i * 8 + 8)?.try_into().ok()?;
            Some(u64::from_le_bytes(b))
        };
        let (clock, node, len_before) = (word(0)?, word(1)?, word(2)?);
        let tail = &bytes[HEADER..];
        (!tail.is_empty()).then_some(AppendEdit {
            base: Stamp::new(clock, node),
            len_before,
            tail,
        })
    }
}

/// Whether a receiver whose version of the key is `version` (a write;
/// `None`: deleted or unknown) and whose string there is `len` bytes long
/// (`None`: not a string) holds the edit's base.
pub fn holds_base(edit: &AppendEdit<'_>, version: Option<Stamp>, len: Option<usize>) -> bool {
    version == Some(edit.base) && len.is_some_and(|n| n as u64 == edit.len_before)
}

/// Whether a node that discarded the peer's write of a key (its own
/// version is newer) ships its value again at its version: the key is a
/// string of `len` bytes (`None`: another type or absent) that may have
/// shipped as appended bytes the peer could not take.
pub fn ships_again_after_discard(len: Option<usize>) -> bool {
    len.is_some_and(|n| n >= APPEND_MIN_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIG: usize = APPEND_MIN_BYTES;

    #[test]
    fn a_key_only_appended_to_since_the_flush_stays_in_the_window() {
        let mut w = AppendWindow::default();
        w.event(0, b"log", b"append", false);
        w.event(0, b"log", b"append", true);
        assert!(w.take(0, b"log"), "appends only");
        assert!(!w.take(0, b"log"), "taken once");
        for other in [&b"set"[..], b"setrange", b"del", b"expire", b"rename_to"] {
            w.event(1, b"log", b"append", false);
            w.event(1, b"log", other, true);
            w.event(1, b"log", b"append", true);
            assert!(
                !w.take(1, b"log"),
                "{} makes it whole",
                String::from_utf8_lossy(other)
            );
        }
        w.event(1, b"set-first", b"append", true);
        assert!(!w.take(1, b"set-first"), "changed before the append");
        w.event(2, b"a", b"append", false);
        w.event(2, b"b", b"append", false);
        w.forget(2, b"a");
        assert!(!w.take(2, b"a"));
        w.clear();
        assert!(!w.take(2, b"b"));
    }

    #[test]
    fn a_big_string_ships_the_bytes_past_the_version_it_shipped_at() {
        let mut bases = AppendBases::default();
        let (s1, s2) = (Stamp::new(10, 1), Stamp::new(11, 1));
        bases.shipped((0, b"k"), s1, Some(BIG + 5));
        let base = bases.base_at((0, b"k"), s1).expect("shipped big");
        assert_eq!(
            base,
            Base {
                stamp: s1,
                len: (BIG + 5) as u64
            }
        );
        assert!(base.grew_to(BIG + 9));
        assert!(!base.grew_to(BIG + 5), "nothing appended");
        assert_eq!(bases.base_at((0, b"k"), s2), None, "another version");
        assert_eq!(bases.base_at((1, b"k"), s1), None, "another database");
        bases.shipped((0, b"k"), s2, Some(100));
        assert_eq!(bases.base_at((0, b"k"), s2), None, "shipped short");
        bases.shipped((0, b"k"), s2, None);
        assert!(bases.is_empty(), "not a string: no base");
        bases.shipped((3, b"k"), s1, Some(BIG));
        bases.swap_dbs(3, 4);
        assert!(bases.base_at((4, b"k"), s1).is_some());
        bases.clear();
        assert!(bases.is_empty());
    }

    #[test]
    fn bases_are_bounded() {
        let mut bases = AppendBases::default();
        for i in 0..MAX_BASES + 10 {
            bases.shipped((0, &i.to_le_bytes()), Stamp::new(1, 1), Some(BIG));
        }
        assert_eq!(bases.len(), MAX_BASES);
        bases.shipped((0, b"new"), Stamp::new(2, 1), Some(BIG));
        assert_eq!(bases.len(), MAX_BASES, "the newest replaces one");
        assert!(bases.base_at((0, b"new"), Stamp::new(2, 1)).is_some());
    }

    #[test]
    fn an_edit_round_trips_and_a_short_one_is_refused() {
        let edit = AppendEdit {
            base: Stamp::new(u64::MAX - 1, 7),
            len_before: 1 << 40,
            tail: b"more",
        };
        let bytes = edit.encode();
        assert_eq!(AppendEdit::decode(&bytes), Some(edit));
        for n in 0..=HEADER {
            assert_eq!(AppendEdit::decode(&bytes[..n]), None, "{n} bytes");
        }
    }

    #[test]
    fn the_receiver_takes_an_edit_only_onto_its_base() {
        let edit = AppendEdit {
            base: Stamp::new(5, 2),
            len_before: BIG as u64,
            tail: b"x",
        };
        assert!(holds_base(&edit, Some(Stamp::new(5, 2)), Some(BIG)));
        assert!(
            !holds_base(&edit, Some(Stamp::new(6, 1)), Some(BIG)),
            "its own write"
        );
        assert!(!holds_base(&edit, None, Some(BIG)), "deleted");
        assert!(!holds_base(&edit, Some(Stamp::new(5, 2)), Some(BIG + 1)));
        assert!(
            !holds_base(&edit, Some(Stamp::new(5, 2)), None),
            "not a string"
        );
    }

    #[test]
    fn a_discard_ships_again_only_a_big_string() {
        assert!(ships_again_after_discard(Some(BIG)));
        assert!(!ships_again_after_discard(Some(BIG - 1)), "short");
        assert!(!ships_again_after_discard(None), "not a string");
    }
}
