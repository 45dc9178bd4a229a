//! Giving memory back once a table that grew is mostly empty again.
//!
//! A hash table or queue keeps its size when entries leave: the merge
//! tables grow with every key written while the peer has not acknowledged
//! it and drop the key at collection, so without this a node that once
//! held a burst of metadata kept that table's size at rest (59 B per key
//! of `scripts/memory.sh`, stop 46).

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash};

/// Shrinks when at most a quarter of what is allocated is used, so that
/// a table that shrinks and grows around one size does not rehash each
/// time (growth doubles: after a shrink to `2 * len` it is half full).
pub trait ShrinkWhenSparse {
    /// Entries held and room allocated for.
    fn used_and_room(&self) -> (usize, usize);
    /// Gives back all room past `room`.
    fn shrink_to_room(&mut self, room: usize);

    /// Shrinks to twice what it holds when it holds at most a quarter of
    /// its room (and the room is worth it).
    fn shrink_when_sparse(&mut self) {
        let (used, room) = self.used_and_room();
        if room > 64 && used <= room / 4 {
            self.shrink_to_room(used * 2);
        }
    }
}

impl<K: Eq + Hash, V, S: BuildHasher> ShrinkWhenSparse for hashbrown::HashMap<K, V, S> {
    fn used_and_room(&self) -> (usize, usize) {
        (self.len(), self.capacity())
    }
    fn shrink_to_room(&mut self, room: usize) {
        self.shrink_to(room);
    }
}

impl<K: Eq + Hash, S: BuildHasher> ShrinkWhenSparse for hashbrown::HashSet<K, S> {
    fn used_and_room(&self) -> (usize, usize) {
        (self.len(), self.capacity())
    }
    fn shrink_to_room(&mut self, room: usize) {
        self.shrink_to(room);
    }
}

impl<T> ShrinkWhenSparse for VecDeque<T> {
    fn used_and_room(&self) -> (usize, usize) {
        (self.len(), self.capacity())
    }
    fn shrink_to_room(&mut self, room: usize) {
        self.shrink_to(room);
    }
}

impl<T> ShrinkWhenSparse for Vec<T> {
    fn used_and_room(&self) -> (usize, usize) {
        (self.len(), self.capacity())
    }
    fn shrink_to_room(&mut self, room: usize) {
        self.shrink_to(room);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_emptied_to_a_quarter_gives_its_room_back_and_not_before() {
        let mut m: hashbrown::HashMap<u32, u64> = (0..10_000).map(|i| (i, 0)).collect();
        let room = m.capacity();
        m.retain(|k, _| *k < 5_000);
        m.shrink_when_sparse();
        assert!(m.capacity() > room / 2, "half full: kept");
        m.retain(|k, _| *k < 1_000);
        m.shrink_when_sparse();
        assert!(m.capacity() <= room / 4, "{} of {room}", m.capacity());
        assert!(m.capacity() >= 2_000);
        assert_eq!(m.len(), 1_000);
        let mut q: VecDeque<u8> = VecDeque::with_capacity(1_000);
        q.push_back(1);
        q.shrink_when_sparse();
        assert!(q.capacity() < 100);
        let mut small: Vec<u8> = Vec::with_capacity(64);
        small.shrink_when_sparse();
        assert_eq!(small.capacity(), 64, "too small to be worth it");
    }
}
