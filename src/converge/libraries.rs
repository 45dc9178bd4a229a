//! The versions of the function libraries, one per library: each library
//! is written, replaced and deleted alone, last writer wins by library
//! name (as a key is). A `FUNCTION LOAD` ships one library's code and a
//! `FUNCTION DELETE` one library's delete, so loading N libraries one by
//! one costs each node N loads, not N reads of the whole set; and two
//! sites loading different libraries at once both keep both. Pure: no
//! Redis calls here.
//!
//! A deleted library leaves a tombstone, collected like a key's once the
//! peer acknowledged the delete (`gc_after`), so that an older load still
//! on its way cannot bring it back.

use hashbrown::HashMap;

use crate::converge::version::{Decision, Stamp, GC_AT_NEXT_ACK};

/// What the store knows of one library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LibraryVersion {
    /// The library holds the code written at `stamp`, of CRC64 `crc`.
    Live {
        /// When.
        stamp: Stamp,
        /// The CRC64 of its code (a load whose code differs changed it).
        crc: u64,
    },
    /// The library was deleted at `stamp`.
    Deleted {
        /// When.
        stamp: Stamp,
        /// Collectable once the peer acknowledged this sequence number of
        /// ours (0: not yet shipped; [`GC_AT_NEXT_ACK`]: applied from it).
        gc_after: u64,
    },
}

impl LibraryVersion {
    /// The stamp, live or deleted.
    pub fn stamp(self) -> Stamp {
        match self {
            Self::Live { stamp, .. } | Self::Deleted { stamp, .. } => stamp,
        }
    }

    /// The CRC64 of the code, `None` when deleted.
    pub fn crc(self) -> Option<u64> {
        match self {
            Self::Live { crc, .. } => Some(crc),
            Self::Deleted { .. } => None,
        }
    }
}

/// The versions of every library this node has written or applied.
#[derive(Debug, Default, Clone)]
pub struct Libraries {
    versions: HashMap<Box<[u8]>, LibraryVersion>,
    tombstones: usize,
}

impl Libraries {
    /// The version of library `name`, if known.
    pub fn get(&self, name: &[u8]) -> Option<LibraryVersion> {
        self.versions.get(name).copied()
    }

    /// Records `version` for `name`.
    pub fn set(&mut self, name: &[u8], version: LibraryVersion) {
        let is_tombstone = matches!(version, LibraryVersion::Deleted { .. });
        let was = self.versions.insert(name.into(), version);
        let was_tombstone = matches!(was, Some(LibraryVersion::Deleted { .. }));
        self.tombstones = self.tombstones + usize::from(is_tombstone) - usize::from(was_tombstone);
    }

    /// Forgets `name` (a collected tombstone).
    pub fn forget(&mut self, name: &[u8]) {
        if let Some(LibraryVersion::Deleted { .. }) = self.versions.remove(name) {
            self.tombstones -= 1;
        }
    }

    /// The verdict on the peer's write or delete of `name` stamped
    /// `remote` (a library without a version is older than any).
    pub fn decide(&self, name: &[u8], remote: Stamp) -> Decision {
        let local = self.get(name).map_or(Stamp::ZERO, LibraryVersion::stamp);
        match remote.cmp(&local) {
            std::cmp::Ordering::Greater => Decision::Apply,
            std::cmp::Ordering::Equal => Decision::Duplicate,
            std::cmp::Ordering::Less => Decision::Stale,
        }
    }

    /// The delete of `name` stamped `stamp` went out as sequence `seq`: it
    /// is collectable once the peer acknowledges that.
    pub fn mark_shipped(&mut self, name: &[u8], stamp: Stamp, seq: u64) {
        if let Some(LibraryVersion::Deleted {
            stamp: current,
            gc_after,
        }) = self.versions.get_mut(name)
        {
            if *current == stamp {
                *gc_after = seq;
            }
        }
    }

    /// The delete of `name` went out after `acked` and may be lost with
    /// the link: kept until shipped again.
    pub fn unship(&mut self, name: &[u8], acked: u64) {
        if let Some(LibraryVersion::Deleted { gc_after, .. }) = self.versions.get_mut(name) {
            if *gc_after > acked && *gc_after != GC_AT_NEXT_ACK {
                *gc_after = 0;
            }
        }
    }

    /// The tombstones the peer acknowledged (`gc_after <= acked`) and,
    /// when `acked_remote`, those applied from it: their names and stamps
    /// (the caller forgets them).
    pub fn collectable(&self, acked: u64, acked_remote: bool) -> Vec<(Box<[u8]>, Stamp)> {
        if self.tombstones == 0 {
            return Vec::new();
        }
        self.versions
            .iter()
            .filter_map(|(name, v)| match *v {
                LibraryVersion::Deleted { stamp, gc_after } => {
                    let ours = gc_after != GC_AT_NEXT_ACK && gc_after != 0 && gc_after <= acked;
                    let theirs = gc_after == GC_AT_NEXT_ACK && acked_remote;
                    (ours || theirs).then(|| (name.clone(), stamp))
                }
                LibraryVersion::Live { .. } => None,
            })
            .collect()
    }

    /// Tombstones held.
    pub fn tombstones(&self) -> usize {
        self.tombstones
    }

    /// Every library's version.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], LibraryVersion)> {
        self.versions.iter().map(|(n, v)| (&n[..], *v))
    }

    /// What changed in the libraries the server holds, `held` (each name
    /// and the CRC64 of its code), since their versions: each name whose
    /// code is not the one recorded live, with `Some(crc)` (loaded or
    /// replaced) or `None` (recorded live, no longer held: deleted).
    pub fn differences<'a>(&'a self, held: &'a [(Vec<u8>, u64)]) -> Vec<(&'a [u8], Option<u64>)> {
        let held_names: hashbrown::HashSet<&[u8]> = held.iter().map(|(n, _)| &n[..]).collect();
        let changed = held
            .iter()
            .filter(|(name, crc)| self.get(name).and_then(LibraryVersion::crc) != Some(*crc))
            .map(|(name, crc)| (&name[..], Some(*crc)));
        let gone = self
            .versions
            .iter()
            .filter(|(name, v)| v.crc().is_some() && !held_names.contains(&name[..]))
            .map(|(name, _)| (&name[..], None));
        let mut out: Vec<_> = changed.chain(gone).collect();
        // Deletes first: a function a deleted library registered is free
        // for a library loaded after it in the same change.
        out.sort_unstable_by_key(|&(name, crc)| (crc.is_some(), name));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u64 = 1;
    const B: u64 = 2;

    fn live(clock: u64, crc: u64) -> LibraryVersion {
        LibraryVersion::Live {
            stamp: Stamp::new(clock, A),
            crc,
        }
    }

    #[test]
    fn each_library_is_decided_alone_by_its_own_stamp() {
        let mut l = Libraries::default();
        l.set(b"one", live(10, 7));
        assert_eq!(l.decide(b"one", Stamp::new(11, B)), Decision::Apply);
        assert_eq!(l.decide(b"one", Stamp::new(10, A)), Decision::Duplicate);
        assert_eq!(l.decide(b"one", Stamp::new(9, B)), Decision::Stale);
        // Another library is not held back by one's newer stamp.
        assert_eq!(l.decide(b"two", Stamp::new(1, B)), Decision::Apply);
    }

    #[test]
    fn a_tombstone_goes_only_once_its_delete_is_acknowledged() {
        let mut l = Libraries::default();
        let deleted = Stamp::new(5, A);
        l.set(
            b"gone",
            LibraryVersion::Deleted {
                stamp: deleted,
                gc_after: 0,
            },
        );
        assert_eq!(l.tombstones(), 1);
        assert!(l.collectable(100, true).is_empty(), "not yet shipped");
        l.mark_shipped(b"gone", deleted, 42);
        assert!(l.collectable(41, false).is_empty());
        l.unship(b"gone", 40);
        l.mark_shipped(b"gone", deleted, 50);
        assert!(l.collectable(49, true).is_empty(), "shipped again later");
        let due = l.collectable(50, false);
        assert_eq!(due, vec![(Box::from(&b"gone"[..]), deleted)]);
        l.forget(b"gone");
        assert_eq!((l.tombstones(), l.get(b"gone")), (0, None));
        // The peer's delete goes at this node's next ack.
        l.set(
            b"theirs",
            LibraryVersion::Deleted {
                stamp: Stamp::new(6, B),
                gc_after: GC_AT_NEXT_ACK,
            },
        );
        assert!(l.collectable(u64::MAX - 1, false).is_empty());
        assert_eq!(l.collectable(0, true).len(), 1);
        // A library loaded again is no tombstone.
        l.set(b"theirs", live(7, 1));
        assert_eq!(l.tombstones(), 0);
    }

    #[test]
    fn the_differences_are_the_loaded_the_replaced_and_the_deleted() {
        let mut l = Libraries::default();
        l.set(b"kept", live(1, 10));
        l.set(b"replaced", live(2, 20));
        l.set(b"deleted", live(3, 30));
        l.set(
            b"long_gone",
            LibraryVersion::Deleted {
                stamp: Stamp::new(4, B),
                gc_after: 0,
            },
        );
        let held = vec![
            (b"kept".to_vec(), 10),
            (b"replaced".to_vec(), 21),
            (b"new".to_vec(), 40),
        ];
        assert_eq!(
            l.differences(&held),
            vec![
                (&b"deleted"[..], None),
                (&b"new"[..], Some(40)),
                (&b"replaced"[..], Some(21)),
            ]
        );
        assert!(Libraries::default().differences(&[]).is_empty());
    }
}
