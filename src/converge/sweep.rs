//! Deletes a full sync carries without their tombstones: the sweep.
//!
//! A node whose peer stays away keeps the tombstones of its deletes until
//! the peer acknowledges them; past `max-tombstones` it drops the oldest
//! and owes the peer a full sync instead. That sync cannot ship the
//! dropped deletes, so it says what it vouches for: a key the receiver
//! holds at a version the sender had held (a change of the sender's, or
//! of the receiver's that the sender's watermark covers), older than the
//! newest tombstone the sender dropped, and that the sync did not carry,
//! was deleted at the sender. The receiver deletes exactly those keys at
//! the end of the sync. Writes the sender never saw (the receiver's own
//! during the outage) are newer than that watermark and stay.
//!
//! Pure: the floors, the rule, and the keys the sync carried.

use hashbrown::{HashMap, HashSet};

use super::version::{KeyVersion, Stamp, VersionStore};
pub use crate::proto::entry::SweepFloors;

/// Whether the sender of `floors` vouches that a key held at `version`
/// and not carried by its sync was deleted there.
pub fn vouches_deleted(floors: &SweepFloors, version: Stamp, sender: u64, receiver: u64) -> bool {
    if version.clock >= floors.floor() {
        return false;
    }
    if version.node == sender {
        let (from, to) = floors.gap();
        !(from < version.clock && version.clock <= to)
    } else if version.node == receiver {
        version.clock <= floors.receiver_covered()
    } else {
        false
    }
}

/// A sweep the receiver is following: the sender's floors and the keys
/// the sync (and the sender's live stream meanwhile) carried.
#[derive(Debug)]
pub struct Sweep {
    floors: SweepFloors,
    sender: u64,
    carried: HashMap<u32, HashSet<Box<[u8]>>>,
}

impl Sweep {
    /// The start of a sweeping sync from `sender`.
    pub fn new(floors: SweepFloors, sender: u64) -> Self {
        Self {
            floors,
            sender,
            carried: HashMap::new(),
        }
    }

    /// The sender's stream carried `key` (applied or not).
    pub fn carried(&mut self, db: u32, key: &[u8]) {
        let keys = self.carried.entry(db).or_default();
        if !keys.contains(key) {
            keys.insert(key.into());
        }
    }

    /// Keys carried so far.
    pub fn carried_len(&self) -> usize {
        self.carried.values().map(HashSet::len).sum()
    }

    /// The live keys of `versions` the sender vouches were deleted there,
    /// with their versions now (the caller deletes each only while it
    /// still holds that version).
    pub fn deleted_at_sender(
        &self,
        versions: &VersionStore,
        receiver: u64,
    ) -> Vec<(u32, Vec<u8>, Stamp)> {
        versions
            .records()
            .filter_map(|(db, key, v)| match v {
                KeyVersion::Live(s) if vouches_deleted(&self.floors, s, self.sender, receiver) => {
                    Some((db, key, s))
                }
                _ => None,
            })
            .filter(|(db, key, _)| !self.carried.get(db).is_some_and(|k| k.contains(*key)))
            .map(|(db, key, s)| (db, key.to_vec(), s))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u64 = 1;
    const B: u64 = 2;
    const C: u64 = 3;

    fn floors() -> SweepFloors {
        SweepFloors::new(100, 50, 70, 80)
    }

    #[test]
    fn floors_round_trip_and_refuse_other_lengths() {
        let f = floors();
        assert_eq!(SweepFloors::from_bytes(f.as_bytes()), Some(f));
        assert_eq!(
            (f.floor(), f.receiver_covered(), f.gap()),
            (100, 50, (70, 80))
        );
        assert_eq!(SweepFloors::from_bytes(&[0; 31]), None);
        assert_eq!(SweepFloors::from_bytes(&[0; 33]), None);
    }

    #[test]
    fn the_sender_vouches_for_its_own_changes_below_the_floor_outside_the_gap() {
        let f = floors();
        assert!(vouches_deleted(&f, Stamp::new(10, A), A, B));
        assert!(vouches_deleted(&f, Stamp::new(70, A), A, B));
        assert!(
            !vouches_deleted(&f, Stamp::new(71, A), A, B),
            "lost by its load"
        );
        assert!(!vouches_deleted(&f, Stamp::new(80, A), A, B));
        assert!(vouches_deleted(&f, Stamp::new(81, A), A, B));
        assert!(
            !vouches_deleted(&f, Stamp::new(100, A), A, B),
            "at the floor"
        );
        assert!(!vouches_deleted(&f, Stamp::new(200, A), A, B));
    }

    #[test]
    fn the_receivers_changes_only_up_to_the_senders_watermark() {
        let f = floors();
        assert!(vouches_deleted(&f, Stamp::new(50, B), A, B));
        assert!(
            !vouches_deleted(&f, Stamp::new(51, B), A, B),
            "written while away: the sender never saw it"
        );
        assert!(
            !vouches_deleted(&f, Stamp::new(10, C), A, B),
            "a third site"
        );
        assert!(!vouches_deleted(
            &SweepFloors::default(),
            Stamp::new(0, A),
            A,
            B
        ));
    }

    #[test]
    fn only_live_uncarried_vouched_keys_are_deleted() {
        let mut v = VersionStore::new();
        v.record_write(0, b"gone", Stamp::new(10, A));
        v.record_write(0, b"kept-carried", Stamp::new(10, A));
        v.record_write(0, b"mine-new", Stamp::new(60, B));
        v.record_write(0, b"mine-old", Stamp::new(40, B));
        v.record_write(1, b"gone", Stamp::new(20, A));
        v.record_delete(0, b"dead", Stamp::new(5, A), 0);
        let mut s = Sweep::new(floors(), A);
        s.carried(0, b"kept-carried");
        s.carried(0, b"kept-carried");
        assert_eq!(s.carried_len(), 1);
        let mut got = s.deleted_at_sender(&v, B);
        got.sort();
        assert_eq!(
            got,
            vec![
                (0, b"gone".to_vec(), Stamp::new(10, A)),
                (0, b"mine-old".to_vec(), Stamp::new(40, B)),
                (1, b"gone".to_vec(), Stamp::new(20, A)),
            ]
        );
    }
}
