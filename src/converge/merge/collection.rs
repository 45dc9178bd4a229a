//! The elements of one collection key (a hash's fields, a set's members, a
//! sorted set's scores), each merged by [`Element`], and the removals of
//! the whole key (DEL, a type change, a rewrite of every element): such a
//! removal takes away every element version its site had seen and leaves
//! the ones written concurrently elsewhere.

use std::collections::BTreeMap;

use crate::converge::merge::element::{Add, Collected, Element};
use crate::converge::merge::seen::Seen;
use crate::converge::version::Stamp;

/// The state of one collection.
#[derive(Debug, Clone, PartialEq)]
pub struct Elements<V> {
    elements: BTreeMap<Vec<u8>, Element<V>>,
    /// What removals of the whole key had seen.
    removed: Seen,
}

impl<V> Default for Elements<V> {
    fn default() -> Self {
        Self {
            elements: BTreeMap::new(),
            removed: Seen::new(),
        }
    }
}

impl<V: Clone + PartialEq> Elements<V> {
    /// A collection every site holds with these elements and no metadata.
    pub fn at_rest(elements: impl IntoIterator<Item = (Vec<u8>, V)>) -> Self {
        Self {
            elements: elements
                .into_iter()
                .map(|(name, v)| (name, Element::at_rest(v)))
                .collect(),
            removed: Seen::new(),
        }
    }

    /// A write of element `name` (see [`Element::write`]).
    pub fn write(&mut self, name: &[u8], stamp: Stamp, value: V, bound: &Seen) {
        if bound.covers(stamp) {
            return;
        }
        self.elements
            .entry(name.to_vec())
            .or_default()
            .write(stamp, value, bound);
    }

    /// A removal of element `name` that had seen `seen`.
    pub fn remove(&mut self, name: &[u8], seen: &Seen, bound: &Seen) {
        if let Some(element) = self.elements.get_mut(name) {
            element.remove(seen, bound);
        } else if !bound.dominates(seen) {
            // Nothing here yet: the writes it covers may still arrive.
            let mut element = Element::default();
            element.remove(seen, bound);
            self.elements.insert(name.to_vec(), element);
        }
    }

    /// A removal of the whole key that had seen `seen`.
    pub fn remove_all(&mut self, seen: &Seen, bound: &Seen) {
        self.removed.join(seen);
        if seen.dominates(bound) {
            for element in self.elements.values_mut() {
                element.forget_rest();
            }
        }
    }

    /// Takes in another site's state of the collection.
    pub fn merge(&mut self, other: &Elements<V>, bound: &Seen) {
        if !other.removed.is_empty() {
            self.remove_all(&other.removed, bound);
        }
        for (name, theirs) in &other.elements {
            self.elements
                .entry(name.clone())
                .or_default()
                .merge(theirs, bound);
        }
    }

    /// The value of element `name`, `None` when absent.
    pub fn get(&self, name: &[u8]) -> Option<&V> {
        let element = self.elements.get(name)?;
        element.value(&self.removed).map(|(_, v)| v)
    }

    /// The present elements, by name.
    pub fn values(&self) -> BTreeMap<&[u8], &V> {
        self.elements
            .iter()
            .filter_map(|(name, e)| Some((name.as_slice(), e.value(&self.removed)?.1)))
            .collect()
    }

    /// An increment of element `name` (see [`Element::increment`]).
    pub fn increment(&mut self, name: &[u8], stamp: Stamp, delta: i128, bound: &Seen) {
        if bound.covers(stamp) {
            return;
        }
        self.elements
            .entry(name.to_vec())
            .or_default()
            .increment(stamp, delta, bound);
    }

    /// The present elements with the increments that count added (`add`).
    pub fn values_counted(&self, add: Add<'_, V>) -> BTreeMap<&[u8], V> {
        self.elements
            .iter()
            .filter_map(|(name, e)| Some((name.as_slice(), e.value_counted(&self.removed, add)?)))
            .collect()
    }

    /// The writes of `name` held here (see [`Element::observed`]).
    pub fn observed(&self, name: &[u8]) -> Seen {
        self.elements
            .get(name)
            .map(Element::observed)
            .unwrap_or_default()
    }

    /// The writes of every element held here: with the site's own `Seen`,
    /// what a removal of the whole key made here covers.
    pub fn observed_all(&self) -> Seen {
        let mut seen = Seen::new();
        for element in self.elements.values() {
            seen.join(&element.observed());
        }
        seen
    }

    /// Drops the metadata no site can conflict with any more (see
    /// [`Element::collect`]); the key's removals go once the bound covers
    /// them all and no element kept holds a write they removed.
    pub fn collect(&mut self, bound: &Seen, add: Add<'_, V>) {
        let removed = &self.removed;
        self.elements
            .retain(|_, element| element.collect(removed, bound, add) != Collected::Gone);
        let removed = &self.removed;
        let still_covers = self
            .elements
            .values()
            .any(|e| e.holds_write_covered_by(removed));
        if bound.dominates(removed) && !still_covers {
            self.removed = Seen::new();
        }
    }

    /// Metadata entries held: what collection shrinks.
    pub fn metadata_len(&self) -> usize {
        self.removed.iter().count()
            + self
                .elements
                .values()
                .map(Element::metadata_len)
                .sum::<usize>()
    }
}
