//! A map from key bytes to a small value, laid out for a million keys at
//! rest: the entries sit densely in fixed-size chunks, and the hash table
//! holds only their 4-byte positions.
//!
//! A `HashMap<SmallVec, KeyVersion>` at 1,000,000 keys had just doubled to
//! 2,097,152 buckets of 65 bytes, and the allocator's size class took that
//! 130 MiB to 160 MiB: 168 bytes per key at rest (`scripts/memory.sh`, stop
//! 46). Here the entries cost their size (chunks of [`CHUNK`], no growth by
//! doubling) and the table 5 bytes a bucket. A removal moves the last
//! entry into the hole, so positions stay dense.

use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

use crate::converge::shrink::ShrinkWhenSparse;

/// Key bytes: up to 16 inline (24 bytes in all), longer ones on the heap.
pub type KeyBytes = smallvec::SmallVec<[u8; 16]>;

/// Entries per chunk: each chunk is one allocation that never grows (a
/// few in unit tests, so that they cross chunks).
pub const CHUNK: usize = if cfg!(test) { 8 } else { 4096 };

#[derive(Debug, Clone)]
struct Entry<V> {
    key: KeyBytes,
    value: V,
}

/// Key bytes to `V`. Iteration order is unspecified.
#[derive(Debug, Clone)]
pub struct KeyTable<V> {
    /// Positions of the entries, hashed by their key. Invariant: exactly
    /// one position per entry, each below `len`.
    index: HashTable<u32>,
    /// Entry `p` is `chunks[p / CHUNK][p % CHUNK]`: every chunk before
    /// the one holding the last entry is full, and at most one empty chunk
    /// follows it (kept, so that a key written and removed again and
    /// again at a chunk's edge does not allocate and free a chunk each
    /// time).
    chunks: Vec<Vec<Entry<V>>>,
    len: usize,
    hasher: DefaultHashBuilder,
}

impl<V> Default for KeyTable<V> {
    fn default() -> Self {
        Self {
            index: HashTable::new(),
            chunks: Vec::new(),
            len: 0,
            hasher: DefaultHashBuilder::default(),
        }
    }
}

fn entry_at<V>(chunks: &[Vec<Entry<V>>], pos: u32) -> Option<&Entry<V>> {
    let p = pos as usize;
    chunks.get(p / CHUNK)?.get(p % CHUNK)
}

/// The key at `pos` (empty past the end, which the index never holds).
fn key_at<V>(chunks: &[Vec<Entry<V>>], pos: u32) -> &[u8] {
    entry_at(chunks, pos).map_or(&[], |e| &e.key[..])
}

impl<V> KeyTable<V> {
    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entries the index has room for without growing.
    pub fn capacity(&self) -> usize {
        self.index.capacity()
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    fn find(&self, key: &[u8]) -> Option<u32> {
        self.find_hashed(self.hash(key), key)
    }

    fn find_hashed(&self, hash: u64, key: &[u8]) -> Option<u32> {
        let chunks = &self.chunks;
        (self.index.find(hash, |&p| key_at(chunks, p) == key)).copied()
    }

    fn entry_mut(&mut self, pos: u32) -> Option<&mut Entry<V>> {
        let p = pos as usize;
        self.chunks.get_mut(p / CHUNK)?.get_mut(p % CHUNK)
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<&V> {
        Some(&entry_at(&self.chunks, self.find(key)?)?.value)
    }

    /// The value of `key`, to change in place.
    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        let p = self.find(key)?;
        Some(&mut self.entry_mut(p)?.value)
    }

    /// Whether `key` has a value.
    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.find(key).is_some()
    }

    /// Sets `key`'s value (the key is copied only when it is new); the
    /// value it replaced.
    pub fn insert(&mut self, key: &[u8], value: V) -> Option<V> {
        let hash = self.hash(key);
        if let Some(e) = self.find_hashed(hash, key).and_then(|p| self.entry_mut(p)) {
            return Some(std::mem::replace(&mut e.value, value));
        }
        // More than 2^32 keys in one table is beyond what a server holds;
        // refused rather than given a position another entry has.
        let pos = u32::try_from(self.len).ok()?;
        let chunk = self.len / CHUNK;
        if self.chunks.len() == chunk {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        self.chunks.get_mut(chunk)?.push(Entry {
            key: KeyBytes::from_slice(key),
            value,
        });
        self.len += 1;
        let (chunks, hasher) = (&self.chunks, &self.hasher);
        self.index
            .insert_unique(hash, pos, |&p| hasher.hash_one(key_at(chunks, p)));
        None
    }

    /// Removes `key`; its value.
    pub fn remove(&mut self, key: &[u8]) -> Option<V> {
        let hash = self.hash(key);
        let chunks = &self.chunks;
        let found = (self.index)
            .find_entry(hash, |&p| key_at(chunks, p) == key)
            .ok()?;
        let (pos, _) = found.remove();
        self.take_out(pos)
    }

    /// Takes the entry at `pos` out (its index entry is gone already): the
    /// last entry moves into its place.
    fn take_out(&mut self, pos: u32) -> Option<V> {
        let last = u32::try_from(self.len.checked_sub(1)?).ok()?;
        if pos != last {
            let hash = self.hash(key_at(&self.chunks, last));
            if let Some(p) = self.index.find_mut(hash, |&p| p == last) {
                *p = pos;
            }
        }
        let chunk = last as usize / CHUNK;
        let moved = self.chunks.get_mut(chunk)?.pop()?;
        self.len -= 1;
        // At most one empty chunk after the last entry's.
        self.chunks.truncate(chunk + 2);
        if pos == last {
            return Some(moved.value);
        }
        Some(std::mem::replace(self.entry_mut(pos)?, moved).value)
    }

    /// Keeps the entries `keep` says to (it may change their values).
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8], &mut V) -> bool) {
        let mut pos = 0u32;
        while (pos as usize) < self.len {
            let Some(entry) = self.entry_mut(pos) else {
                break;
            };
            if keep(&entry.key, &mut entry.value) {
                pos += 1;
                continue;
            }
            let hash = self.hash(key_at(&self.chunks, pos));
            if let Ok(found) = self.index.find_entry(hash, |&p| p == pos) {
                found.remove();
            }
            // The last entry moved here: look at it next.
            self.take_out(pos);
        }
        self.shrink_when_sparse();
    }

    /// Every key and its value.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &V)> + '_ {
        (self.chunks.iter().flatten()).map(|e| (&e.key[..], &e.value))
    }

    /// Removes every entry and gives the memory back.
    pub fn clear(&mut self) {
        self.index = HashTable::new();
        self.chunks = Vec::new();
        self.len = 0;
    }
}

/// The index gives its room back by the common rule (the chunks go as
/// they empty, all but one spare).
impl<V> ShrinkWhenSparse for KeyTable<V> {
    fn used_and_room(&self) -> (usize, usize) {
        (self.len, self.index.capacity())
    }

    fn shrink_to_room(&mut self, room: usize) {
        let (chunks, hasher) = (&self.chunks, &self.hasher);
        (self.index).shrink_to(room, |&p| hasher.hash_one(key_at(chunks, p)));
        self.chunks.shrink_when_sparse();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(Vec<u8>, u32),
        Remove(Vec<u8>),
        RetainOdd,
        Clear,
    }

    fn key() -> impl Strategy<Value = Vec<u8>> {
        // Few distinct keys (hits and misses), some longer than inline.
        (0u8..60, 0usize..3).prop_map(|(k, long)| {
            let mut v = vec![k];
            v.resize(1 + long * 12, b'x');
            v
        })
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (key(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            6 => key().prop_map(Op::Remove),
            1 => Just(Op::RetainOdd),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        #[test]
        fn behaves_as_a_hash_map(ops in proptest::collection::vec(op(), 1..400)) {
            let mut table = KeyTable::default();
            let mut model: HashMap<Vec<u8>, u32> = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => {
                        prop_assert_eq!(table.insert(&k, v), model.insert(k, v));
                    }
                    Op::Remove(k) => prop_assert_eq!(table.remove(&k), model.remove(&k)),
                    Op::RetainOdd => {
                        table.retain(|_, v| {
                            *v = v.wrapping_add(1);
                            *v % 2 == 1
                        });
                        model.retain(|_, v| {
                            *v = v.wrapping_add(1);
                            *v % 2 == 1
                        });
                    }
                    Op::Clear => {
                        table.clear();
                        model.clear();
                    }
                }
                prop_assert_eq!(table.len(), model.len());
                for (k, v) in &model {
                    prop_assert_eq!(table.get(k), Some(v));
                }
                let listed: HashMap<Vec<u8>, u32> =
                    table.iter().map(|(k, v)| (k.to_vec(), *v)).collect();
                prop_assert_eq!(&listed, &model);
            }
        }
    }

    #[test]
    fn many_keys_fill_whole_chunks_and_give_them_back() {
        const N: u32 = (3 * CHUNK + 5) as u32;
        let mut table = KeyTable::default();
        for i in 0..N {
            assert_eq!(table.insert(&i.to_le_bytes(), i), None);
        }
        assert_eq!(table.chunks.len(), 4);
        assert!(table.chunks.iter().all(|c| c.capacity() == CHUNK));
        for i in 0..N {
            assert_eq!(table.get(&i.to_le_bytes()), Some(&i));
        }
        *table.get_mut(&8u32.to_le_bytes()).unwrap() = 80;
        assert_eq!(table.get(&8u32.to_le_bytes()), Some(&80));
        for i in (0..N).filter(|i| i % 8 != 0) {
            assert_eq!(table.remove(&i.to_le_bytes()), Some(i));
        }
        assert_eq!(table.len(), (N as usize).div_ceil(8));
        let holding = table.len().div_ceil(CHUNK);
        assert_eq!(
            table.chunks.len(),
            holding + 1,
            "emptied chunks went, one kept"
        );
        // At a chunk's edge, a key written and removed again and again
        // keeps the spare chunk rather than allocating one each time.
        while table.len() % CHUNK != 0 {
            let k = (N + table.len() as u32).to_le_bytes();
            table.insert(&k, 0);
        }
        let spare = table.chunks.len();
        for _ in 0..3 {
            table.insert(b"edge", 1);
            assert_eq!(table.chunks.len(), spare);
            assert_eq!(table.remove(b"edge"), Some(1));
            assert_eq!(table.chunks.len(), spare);
        }
        table.retain(|_, _| false);
        assert!(table.is_empty());
        assert!(table.capacity() < 100, "the index shrank");
        assert!(!table.contains_key(&0u32.to_le_bytes()));
    }
}
