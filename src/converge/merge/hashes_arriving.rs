//! A whole write of a key whose state is arriving from the peer in slices
//! (`HashState::more`, see `Held::slice`). A removal of the whole key says
//! what its node had seen as one clock per origin; the slices come in name
//! order, so the elements taken so far name the peer's newer writes before
//! all of its older ones have arrived, and a removal of what was seen
//! would remove the elements of the slices still to come, which this node
//! never held, on both nodes. Made while slices arrive, a whole write (or a
//! delete) is made element by element instead: each element held here
//! removed by itself, each field of the new value written at its stamp,
//! and the key's removal only what this node had applied.

use super::*;

impl Held {
    /// This node's whole write stamped `stamp` (`now`: the new type and
    /// elements; `None`: a delete), having applied `applied`, made while
    /// the key's state arrives in slices: the state to ship.
    pub(super) fn whole_element_by_element(
        &mut self,
        stamp: Stamp,
        now: Option<(Kind, Vec<(Bytes, Bytes)>)>,
        applied: &Seen,
    ) -> HashState {
        let mut seen = applied.clone();
        seen.join(&self.removed);
        if let Some(base) = self.base {
            seen.observe(base);
        }
        let mut fields: BTreeMap<Bytes, Element<Bytes>> = self
            .fields
            .iter()
            .map(|(name, held)| {
                let mut had = held.observed();
                had.join(held.removed());
                let mut gone = Element::default();
                gone.remove(&had, &Seen::new());
                (name.clone(), gone)
            })
            .collect();
        let written = now.is_some();
        if let Some((kind, values)) = now {
            self.kind = kind;
            for (name, value) in values {
                fields
                    .entry(name)
                    .or_default()
                    .write(stamp, value, &Seen::new());
            }
            self.expiry_of = Some(stamp);
        }
        // An element removed and not written again names the removal's own
        // stamp, as an HDEL does: a peer that lowered its merge bound tells
        // it from one listed again (`relisted`).
        let own: Seen = [(stamp.node, stamp.clock)].into_iter().collect();
        for gone in fields.values_mut().filter(|e| e.writes().is_empty()) {
            gone.remove(&own, &Seen::new());
        }
        self.removed.join(&seen);
        self.base = None;
        self.fields = fields;
        HashState {
            kind: self.kind,
            // A write of the value carries the key's TTL after it.
            ttl: written.then_some(stamp),
            removed: self.removed.clone(),
            elements: self
                .fields
                .iter()
                .map(|(n, e)| (n.clone(), e.clone()))
                .collect(),
            complete: true,
            ..HashState::default()
        }
    }
}
