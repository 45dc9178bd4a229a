//! A borrowed `(database, key)` that finds an entry of a table keyed by an
//! owned one, `(u32, Vec<u8>)` or `(u32, Box<[u8]>)`, without copying the
//! key: it hashes as they do (the database, then the bytes as a slice).

use std::hash::{Hash, Hasher};

use hashbrown::hash_map::EntryRef;
use hashbrown::HashMap;

/// `(db, key)` borrowed, for lookups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbKey<'a>(pub u32, pub &'a [u8]);

impl Hash for DbKey<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As a tuple `(u32, [u8])` hashes: each part in order.
        self.0.hash(state);
        self.1.hash(state);
    }
}

impl hashbrown::Equivalent<(u32, Vec<u8>)> for DbKey<'_> {
    fn equivalent(&self, key: &(u32, Vec<u8>)) -> bool {
        self.0 == key.0 && self.1 == key.1.as_slice()
    }
}

impl hashbrown::Equivalent<(u32, Box<[u8]>)> for DbKey<'_> {
    fn equivalent(&self, key: &(u32, Box<[u8]>)) -> bool {
        self.0 == key.0 && self.1 == &key.1[..]
    }
}

/// The value of `(db, key)` in `map`, a default one put there first when
/// it has none: the key is copied only then.
pub fn entry_or_default<'m, V: Default>(
    map: &'m mut HashMap<(u32, Vec<u8>), V>,
    (db, key): (u32, &[u8]),
) -> &'m mut V {
    match map.entry_ref(&DbKey(db, key)) {
        EntryRef::Occupied(held) => held.into_mut(),
        // The key is the one looked up (the call panics otherwise).
        EntryRef::Vacant(slot) => slot.insert_with_key((db, key.to_vec()), V::default()),
    }
}

/// Database `db` once `SWAPDB a b` ran.
pub fn swapped(db: u32, a: u32, b: u32) -> u32 {
    match db {
        d if d == a => b,
        d if d == b => a,
        d => d,
    }
}

/// Moves the entries of `map` keyed `(db, key)` with their databases
/// (`SWAPDB a b`).
pub fn swap_dbs_in<K: std::hash::Hash + Eq, V>(map: &mut HashMap<(u32, K), V>, a: u32, b: u32) {
    let entries = std::mem::take(map);
    *map = entries
        .into_iter()
        .map(|((db, key), v)| ((swapped(db, a, b), key), v))
        .collect();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_borrowed_key_finds_what_an_owned_one_stored() {
        let mut vecs: HashMap<(u32, Vec<u8>), u8> = HashMap::new();
        let mut boxes: HashMap<(u32, Box<[u8]>), u8> = HashMap::new();
        for (i, key) in [&b""[..], b"k", b"a longer key than the inline size"]
            .iter()
            .enumerate()
        {
            vecs.insert((i as u32, key.to_vec()), i as u8);
            boxes.insert((i as u32, Box::from(*key)), i as u8);
        }
        assert_eq!(
            vecs.get(&DbKey(2, b"a longer key than the inline size")),
            Some(&2)
        );
        assert_eq!(boxes.get(&DbKey(1, b"k")), Some(&1));
        assert_eq!(vecs.get(&DbKey(0, b"k")), None, "another database");
        assert_eq!(boxes.get(&DbKey(1, b"")), None, "another key");
        *entry_or_default(&mut vecs, (7, b"new")) += 3;
        *entry_or_default(&mut vecs, (7, b"new")) += 1;
        assert_eq!(vecs.get(&(7, b"new".to_vec())), Some(&4));
        swap_dbs_in(&mut vecs, 7, 2);
        assert_eq!(vecs.get(&DbKey(2, b"new")), Some(&4));
        assert_eq!(
            vecs.get(&DbKey(7, b"a longer key than the inline size")),
            Some(&2)
        );
        assert_eq!(swapped(5, 7, 2), 5);
    }
}
