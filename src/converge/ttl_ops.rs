//! TTL writes of keys whose value ships whole (strings, streams, and the
//! other types when they do not merge per element): a key is two
//! registers, its value and its TTL (issue 27's TTL rule).
//!
//! - A write of the value (SET, a DUMP-restore, any data command) is
//!   stamped as the key's version, and writes the TTL register too: it
//!   carries the TTL the key has after it.
//! - A command that writes only the TTL (EXPIRE, PEXPIRE, EXPIREAT,
//!   PEXPIREAT, PERSIST, GETEX) writes the TTL register alone: its stamp
//!   is held here, above the key's version, and ships as `Op::Expire`.
//! - A delete is a write of the value: a TTL write does not bring a
//!   deleted key back, and a delete newer than the key's last value write
//!   takes the key even if a TTL write is newer still.
//!
//! So a SET on one node and an EXPIRE made at once on the other keep the
//! SET's value and the newer of the two TTLs on both nodes (with the key
//! as one register, the newer EXPIRE shipped its node's old value and
//! the SET was lost). A TTL write leaves this table once it is at rest:
//! its stamp then becomes the key's version (no value write between the
//! two can still arrive from anywhere), so a catch-up since a watermark
//! still sees it.

use std::collections::HashMap;

use crate::converge::merge::seen::Seen;
use crate::converge::version::Stamp;

/// A TTL write: its stamp and the absolute expiry it set (Unix ms;
/// `None`: PERSIST).
pub type TtlWrite = (Stamp, Option<u64>);

/// The TTL writes newer than their key's version, per database and key.
/// Kept also while the key is deleted by an older delete: a value write
/// of the peer between the two then takes this TTL, as on the node that
/// made it.
#[derive(Debug, Default, Clone)]
pub struct TtlOps {
    /// Per database (a lookup borrows the key: `set` asks for every
    /// version recorded while any is held).
    dbs: HashMap<u32, HashMap<Box<[u8]>, TtlWrite>>,
    len: usize,
}

impl TtlOps {
    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many are held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The newest TTL write of `key` above its version.
    pub fn get(&self, db: u32, key: &[u8]) -> Option<TtlWrite> {
        if self.len == 0 {
            return None;
        }
        self.dbs.get(&db)?.get(key).copied()
    }

    /// A TTL write of `key` (kept if newer than the one held).
    pub fn write(&mut self, db: u32, key: &[u8], write: TtlWrite) {
        let keys = self.dbs.entry(db).or_default();
        match keys.get_mut(key) {
            Some(held) if write.0 > held.0 => *held = write,
            Some(_) => {}
            None => {
                keys.insert(Box::from(key), write);
                self.len += 1;
            }
        }
    }

    /// The key's version became `version`: a TTL write not newer than it
    /// is superseded (the write carried the TTL too).
    pub fn versioned(&mut self, db: u32, key: &[u8], version: Stamp) {
        if self.len == 0 {
            return;
        }
        let Some(keys) = self.dbs.get_mut(&db) else {
            return;
        };
        if keys.get(key).is_some_and(|&(s, _)| s <= version) {
            keys.remove(key);
            self.len -= 1;
        }
    }

    /// A flush of `db` (`None`: all) stamped `stamp`: older TTL writes go.
    pub fn flushed(&mut self, db: Option<u32>, stamp: Stamp) {
        self.retain(|d, _, (s, _)| db.is_some_and(|f| f != d) || *s > stamp);
    }

    /// `SWAPDB a b`: the TTL writes move with the data.
    pub fn swap_dbs(&mut self, a: u32, b: u32) {
        let (ka, kb) = (self.dbs.remove(&a), self.dbs.remove(&b));
        self.dbs
            .extend(ka.map(|k| (b, k)).into_iter().chain(kb.map(|k| (a, k))));
    }

    /// The keys whose TTL write `wanted` picks (a catch-up since a
    /// watermark ships them too).
    pub fn changed(&self, wanted: impl Fn(Stamp) -> bool) -> Vec<(u32, Box<[u8]>)> {
        self.iter()
            .filter(|(_, _, (s, _))| wanted(*s))
            .map(|(d, k, _)| (d, Box::from(k)))
            .collect()
    }

    /// Takes out the TTL writes every node has applied (`bound` covers
    /// them): each becomes its key's version.
    pub fn take_at_rest(&mut self, bound: &Seen) -> Vec<(u32, Box<[u8]>, TtlWrite)> {
        let mut rest = Vec::new();
        self.retain(|d, k, w| {
            let keep = !bound.covers(w.0);
            if !keep {
                rest.push((d, Box::from(k), *w));
            }
            keep
        });
        rest
    }

    /// Keeps the TTL writes `keep` says to.
    fn retain(&mut self, mut keep: impl FnMut(u32, &[u8], &TtlWrite) -> bool) {
        if self.len == 0 {
            return;
        }
        for (&d, keys) in self.dbs.iter_mut() {
            keys.retain(|k, w| keep(d, k, w));
        }
        self.dbs.retain(|_, keys| !keys.is_empty());
        self.len = self.dbs.values().map(HashMap::len).sum();
    }

    /// Every TTL write held, for persistence.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &[u8], TtlWrite)> {
        self.dbs
            .iter()
            .flat_map(|(&d, keys)| keys.iter().map(move |(k, w)| (d, &k[..], *w)))
    }
}

/// Whether a node takes the peer's TTL write stamped `stamp` of a key it
/// holds at `version` with the TTL write `held` (if any): only when it is
/// the newest write of the TTL register.
pub fn takes_ttl_write(stamp: Stamp, version: Stamp, held: Option<Stamp>) -> bool {
    stamp > version && held.is_none_or(|h| stamp > h)
}

/// The expiry a value write of the peer's, stamped `stamp` with `expiry`
/// and newer than the key's version here, leaves: its own, unless a TTL
/// write held here is newer (the value is taken, that TTL kept).
pub fn expiry_after_value(
    stamp: Stamp,
    expiry: Option<u64>,
    held: Option<TtlWrite>,
) -> Option<u64> {
    match held {
        Some((h, held_expiry)) if h > stamp => held_expiry,
        _ => expiry,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(clock: u64, node: u64) -> Stamp {
        Stamp::new(clock, node)
    }

    #[test]
    fn a_ttl_write_is_held_until_a_value_write_supersedes_it() {
        let mut t = TtlOps::default();
        t.write(0, b"k", (s(10, 1), Some(5)));
        t.write(0, b"k", (s(8, 2), None));
        assert_eq!(
            t.get(0, b"k"),
            Some((s(10, 1), Some(5))),
            "the newest stays"
        );
        t.versioned(0, b"k", s(9, 2));
        assert_eq!(
            t.get(0, b"k"),
            Some((s(10, 1), Some(5))),
            "an older value write"
        );
        t.versioned(0, b"k", s(11, 2));
        assert_eq!(t.get(0, b"k"), None);
        assert!(t.is_empty());
    }

    #[test]
    fn flushes_swaps_and_rest() {
        let mut t = TtlOps::default();
        t.write(0, b"a", (s(10, 1), None));
        t.write(1, b"b", (s(20, 1), None));
        t.write(2, b"c", (s(5, 1), None));
        t.swap_dbs(0, 1);
        assert_eq!(t.get(1, b"a"), Some((s(10, 1), None)));
        assert_eq!(t.get(0, b"b"), Some((s(20, 1), None)));
        t.flushed(Some(2), s(6, 2));
        assert_eq!(t.get(2, b"c"), None);
        t.flushed(None, s(15, 2));
        assert_eq!(t.len(), 1, "the newer one survives every flush");
        let changed = t.changed(|st| st.clock > 15);
        assert_eq!(changed, vec![(0, Box::from(&b"b"[..]))]);
        let mut bound = Seen::new();
        bound.raise(1, 19);
        assert!(t.take_at_rest(&bound).is_empty());
        bound.raise(1, 20);
        assert_eq!(
            t.take_at_rest(&bound),
            vec![(0, Box::from(&b"b"[..]), (s(20, 1), None))]
        );
        assert!(t.is_empty());
    }

    /// A SET on one node (stamp 20) and an EXPIRE on the other (30) of a
    /// key last written at 10, each applied on the other node: both keep
    /// the SET's value and the EXPIRE's TTL, in either order of arrival.
    #[test]
    fn a_value_write_and_a_ttl_write_made_at_once_both_count() {
        let (set, expire) = (s(20, 2), s(30, 1));
        // The EXPIRE's node: version 10, TTL write 30; the SET arrives.
        assert!(set > s(10, 1), "the SET's value is newer: taken");
        let held = Some((expire, Some(99)));
        assert_eq!(
            expiry_after_value(set, None, held),
            Some(99),
            "the TTL stays"
        );
        // The SET's node: version 20; the EXPIRE arrives.
        assert!(takes_ttl_write(expire, set, None));
        // An EXPIRE older than the SET loses to the TTL the SET carried.
        assert!(!takes_ttl_write(s(15, 1), set, None));
        assert_eq!(
            expiry_after_value(set, None, Some((s(15, 1), Some(99)))),
            None
        );
        // A resend of the EXPIRE changes nothing.
        assert!(!takes_ttl_write(expire, set, Some(expire)));
    }
}
