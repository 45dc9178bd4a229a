//! Node ids as small numbers: a table that holds a stamp per key stores
//! its node as a 4-byte place instead of the 8-byte id (a pair has two
//! nodes; a table of a million stamps names them a million times).

use hashbrown::HashMap;

/// The node ids seen, each with its place (in the order first seen; never
/// removed: ids come from the node and its peers).
#[derive(Debug, Default, Clone)]
pub struct NodePlaces {
    ids: Vec<u64>,
    places: HashMap<u64, u32>,
}

impl NodePlaces {
    /// The place of `node`, given one if it has none. (Places are u32:
    /// the 2^32 ids that would exhaust them take 32 GiB in `ids` alone,
    /// so the server's memory runs out first.)
    pub fn place_of(&mut self, node: u64) -> u32 {
        // A pair names two nodes: a look at the first few ids is cheaper
        // than hashing on every write; the map bounds the rest.
        if let Some(p) = self.ids.iter().take(4).position(|&id| id == node) {
            return p as u32;
        }
        if let Some(&p) = self.places.get(&node) {
            return p;
        }
        let place = u32::try_from(self.ids.len()).unwrap_or(u32::MAX);
        self.ids.push(node);
        self.places.insert(node, place);
        place
    }

    /// The node at `place` (0 for a place never given).
    pub fn node_at(&self, place: u32) -> u64 {
        self.ids.get(place as usize).copied().unwrap_or_default()
    }

    /// The ids, in the order first seen.
    #[cfg(test)]
    pub fn ids(&self) -> &[u64] {
        &self.ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_node_gets_one_place_for_good() {
        let mut n = NodePlaces::default();
        assert_eq!(n.place_of(77), 0);
        assert_eq!(n.place_of(5), 1);
        assert_eq!(n.place_of(77), 0);
        assert_eq!((n.node_at(0), n.node_at(1), n.node_at(9)), (77, 5, 0));
        assert_eq!(n.ids(), &[77, 5]);
    }
}
