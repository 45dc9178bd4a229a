//! The versions of one database's keys, laid out for a million keys at
//! rest: a live key's version is its stamp with the node as a 4-byte
//! number (40 bytes an entry with the key), a tombstone's keeps the whole
//! stamp and when it may be collected in a table of its own (tombstones
//! are few: `max-tombstones` bounds them).
//!
//! Pure: what `converge::version` keeps per database, and nothing else.

use crate::converge::key_table::KeyTable;
use crate::converge::node_places::NodePlaces;
use crate::converge::version::{KeyVersion, Stamp};

/// A live key's stamp: the clock and the node's place in
/// [`DbVersions::nodes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LiveStamp {
    clock: u64,
    node: u32,
}

/// A tombstone: the delete's stamp and its `gc_after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tombstone {
    stamp: Stamp,
    gc_after: u64,
}

/// Versions of one database's keys. A key is live or a tombstone, never
/// both.
#[derive(Debug, Default, Clone)]
pub struct DbVersions {
    live: KeyTable<LiveStamp>,
    tombstones: KeyTable<Tombstone>,
    /// The node ids the live stamps name.
    nodes: NodePlaces,
    /// Stamp of the newest FLUSHDB of this database.
    pub floor: Stamp,
}

impl DbVersions {
    fn unpack(&self, s: LiveStamp) -> KeyVersion {
        KeyVersion::Live(Stamp::new(s.clock, self.nodes.node_at(s.node)))
    }

    /// Keys with a version (live or deleted).
    pub fn len(&self) -> usize {
        self.live.len() + self.tombstones.len()
    }

    /// Whether no key has a version.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Room of the two tables (a flush gives it back).
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.live.capacity() + self.tombstones.capacity()
    }

    /// The version of `key`.
    pub fn get(&self, key: &[u8]) -> Option<KeyVersion> {
        if let Some(&s) = self.live.get(key) {
            return Some(self.unpack(s));
        }
        if self.tombstones.is_empty() {
            return None;
        }
        let t = self.tombstones.get(key)?;
        Some(KeyVersion::Deleted {
            stamp: t.stamp,
            gc_after: t.gc_after,
        })
    }

    /// Whether `key` has a version.
    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.live.contains_key(key)
            || (!self.tombstones.is_empty() && self.tombstones.contains_key(key))
    }

    /// Sets `key`'s version; whether it was a tombstone.
    pub fn set(&mut self, key: &[u8], version: KeyVersion) -> bool {
        match version {
            KeyVersion::Live(stamp) => {
                let node = self.nodes.place_of(stamp.node);
                let live = LiveStamp {
                    clock: stamp.clock,
                    node,
                };
                if self.live.insert(key, live).is_some() {
                    return false;
                }
                !self.tombstones.is_empty() && self.tombstones.remove(key).is_some()
            }
            KeyVersion::Deleted { stamp, gc_after } => {
                let was = self.tombstones.insert(key, Tombstone { stamp, gc_after });
                if was.is_none() {
                    self.live.remove(key);
                }
                was.is_some()
            }
        }
    }

    /// Removes `key`'s version; what it was.
    pub fn remove(&mut self, key: &[u8]) -> Option<KeyVersion> {
        if let Some(s) = self.live.remove(key) {
            return Some(self.unpack(s));
        }
        let t = self.tombstones.remove(key)?;
        Some(KeyVersion::Deleted {
            stamp: t.stamp,
            gc_after: t.gc_after,
        })
    }

    /// Changes the `gc_after` of `key`'s tombstone, if it is one:
    /// `change(stamp, gc_after)`.
    pub fn update_tombstone(&mut self, key: &[u8], change: impl FnOnce(Stamp, &mut u64)) {
        if let Some(t) = self.tombstones.get_mut(key) {
            change(t.stamp, &mut t.gc_after);
        }
    }

    /// Keeps the versions `keep` says to.
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8], KeyVersion) -> bool) {
        let nodes = &self.nodes;
        self.live.retain(|k, s| {
            let node = nodes.node_at(s.node);
            keep(k, KeyVersion::Live(Stamp::new(s.clock, node)))
        });
        self.tombstones.retain(|k, t| {
            let v = KeyVersion::Deleted {
                stamp: t.stamp,
                gc_after: t.gc_after,
            };
            keep(k, v)
        });
    }

    /// Every key and its version.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], KeyVersion)> + '_ {
        let live = (self.live.iter()).map(|(k, &s)| (k, self.unpack(s)));
        let deleted = self.tombstones.iter().map(|(k, t)| {
            let v = KeyVersion::Deleted {
                stamp: t.stamp,
                gc_after: t.gc_after,
            };
            (k, v)
        });
        live.chain(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_entry_takes_forty_bytes_with_its_key() {
        assert_eq!(std::mem::size_of::<LiveStamp>(), 16);
        let mut d = DbVersions::default();
        let (a, b) = (0xA000_0000_0000_0001, 0xB);
        assert!(!d.set(b"k", KeyVersion::Live(Stamp::new(5, a))));
        assert!(!d.set(b"j", KeyVersion::Live(Stamp::new(6, b))));
        assert!(!d.set(b"k", KeyVersion::Live(Stamp::new(7, b))));
        assert_eq!(d.nodes.ids(), &[a, b], "each node once");
        assert_eq!(d.get(b"k"), Some(KeyVersion::Live(Stamp::new(7, b))));
        let deleted = KeyVersion::Deleted {
            stamp: Stamp::new(8, a),
            gc_after: 0,
        };
        assert!(!d.set(b"k", deleted), "was live");
        assert_eq!(d.len(), 2);
        assert_eq!(d.get(b"k"), Some(deleted));
        d.update_tombstone(b"k", |s, gc| {
            assert_eq!(s, Stamp::new(8, a));
            *gc = 40;
        });
        d.update_tombstone(b"j", |_, _| panic!("live: not a tombstone"));
        let shipped = KeyVersion::Deleted {
            stamp: Stamp::new(8, a),
            gc_after: 40,
        };
        assert_eq!(d.get(b"k"), Some(shipped));
        assert!(
            d.set(b"k", KeyVersion::Live(Stamp::new(9, a))),
            "was a tombstone"
        );
        assert_eq!(d.len(), 2);
        assert!(!d.set(b"j", deleted), "was live");
        let mut all: Vec<_> = d.iter().map(|(k, v)| (k.to_vec(), v)).collect();
        all.sort_by(|x, y| x.0.cmp(&y.0));
        let want = vec![
            (b"j".to_vec(), deleted),
            (b"k".to_vec(), KeyVersion::Live(Stamp::new(9, a))),
        ];
        assert_eq!(all, want);
        d.retain(|k, _| k == b"k");
        assert_eq!(d.remove(b"k"), Some(KeyVersion::Live(Stamp::new(9, a))));
        assert_eq!(
            (d.len(), d.get(b"j"), d.contains_key(b"k")),
            (0, None, false)
        );
    }
}
