//! Collection of a big key a slice of elements at a time: a key whose
//! elements were written while the peer was away (2,000,000 fields, say)
//! passes the bound at once, and dropping all of its metadata in one go
//! held the main thread for most of a second (10,000,000: about 2 s).

use super::*;

/// Elements one collection visits at most in a big key; the next goes on
/// from there.
pub(super) const COLLECT_BUDGET: usize = 65_536;

impl Held {
    /// [`Held::collect`] of at most `budget` elements: `None` while the
    /// pass over a big key's elements goes on (the next call goes on from
    /// where this one stopped), else whether anything is left. A list, and
    /// a key of at most `budget` elements, is collected whole.
    pub(super) fn collect_some(&mut self, bound: &Seen, budget: usize) -> Option<bool> {
        if self.kind == Kind::List || self.fields.len() <= budget {
            self.collect_from = None;
            return Some(self.collect(bound));
        }
        self.drop_settled_parts(bound);
        use std::ops::Bound;
        let from = self
            .collect_from
            .take()
            .map_or(Bound::Unbounded, Bound::Excluded);
        let mut names = self.fields.range::<Bytes, _>((from, Bound::Unbounded));
        let slice: Vec<Bytes> = names
            .by_ref()
            .take(budget)
            .map(|(n, _)| n.clone())
            .collect();
        let more = names.next().is_some();
        let parts = (&self.removed, self.base, self.kind);
        for name in &slice {
            let Some(element) = self.fields.get_mut(name) else {
                continue;
            };
            if !keeps_metadata(element, parts, bound) {
                self.fields.remove(name);
            }
        }
        if more {
            self.collect_from = slice.last().cloned();
            return None;
        }
        // The pass reached the last element: the key's parts, and what is
        // left of its elements, as a whole collection does.
        Some(self.collect(bound))
    }
}
