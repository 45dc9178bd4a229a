//! What a peer's state lists again that this node applied before its merge
//! bound went down.
//!
//! When the peer lost state (a restart from an older copy) and asks again
//! from an older watermark, this node lowers its bound's own clock to
//! that watermark (`VersionStore::lower_merge_bound`). Its collected
//! elements rest with no stamps, and their values hold every write and
//! increment at or below the highest bound this node ever held
//! ([`Counters::folded`](super::counters::Counters::folded)). The peer
//! then lists again changes this node had applied, collected and folded:
//! judged against the lowered bound they would count again (an increment
//! added twice, an older write taking the field back, a list run pushed
//! again, a removal taking a newer value at rest).
//!
//! Every change stamped at or below `folded` was applied here (each of the
//! bound's clocks, at its highest, said every site had applied that
//! origin's changes up to it), so it is dropped from the state before the
//! merge, and with it what it carried:
//! - a write, an increment, a whole write (`base`, with its fields) or a
//!   TTL write covered by `folded`;
//! - an element's removal, when no write of the element is left and
//!   `folded` dominates it (the removal a write of a number carries, or a
//!   removal of the field, which names its own stamp);
//! - the removal of the whole key, when `folded` dominates it, even riding
//!   with a fresh change of some elements (every change of a held key
//!   carries the key's removals). Such a removal names its node's clock
//!   just before it (`capture::hashes::applied_before`), and a node takes
//!   its clock two past its own changes the peer sends back
//!   (`receive::apply`), so one made after it came back from an older
//!   copy names a clock above `folded`.
//!
//! A removal with anything newer than `folded` stays: it was made (or
//! joined) after the bound was highest, and is decided against the
//! lowered bound as any removal.

use crate::converge::merge::element::Element;
use crate::converge::merge::hashes::{Bytes, HashState};
use crate::converge::merge::seen::Seen;
use crate::converge::version::Stamp;

/// `state` (whose entry is stamped `entry`) without what it lists again
/// that `folded` covers; `None` when nothing is left to merge.
pub fn without_relisted(mut out: HashState, entry: Stamp, folded: &Seen) -> Option<HashState> {
    let base_went = out.base.is_some_and(|b| folded.covers(b));
    if base_went {
        out.base = None;
        out.base_fields.clear();
    }
    if out.ttl.is_some_and(|t| folded.covers(t)) {
        out.ttl = None;
    }
    out.elements = std::mem::take(&mut out.elements)
        .into_iter()
        .filter_map(|(name, e)| Some((name, element_without_relisted(e, folded)?)))
        .collect();
    let nothing_else = out.base.is_none()
        && out.ttl.is_none()
        && out.elements.is_empty()
        && out.rest.is_empty()
        && folded.covers(entry);
    // A removal of the whole key names its node's clock just before it:
    // one `folded` dominates was made before the bound was highest.
    if folded.dominates(&out.removed) {
        out.removed = Seen::new();
    }
    let empty = nothing_else && out.removed.is_empty() && !out.more && !out.complete;
    (!empty).then_some(out)
}

/// Element `e` without its writes and increments `folded` covers, and
/// without its removal when no write is left and `folded` dominates it;
/// `None` when nothing is left.
///
/// Every removal of an element that travels without a write of it names
/// its own stamp (an HDEL's, a whole write's made element by element), so
/// one `folded` dominates was applied here; one that rides with a write
/// of a number belongs to that write, and goes with it (a fresh increment
/// beside it carries no removal: kept, the removal would take the value
/// at rest, judged against the lowered bound).
fn element_without_relisted(e: Element<Bytes>, folded: &Seen) -> Option<Element<Bytes>> {
    let fresh = |s: Stamp| !folded.covers(s);
    let writes: Vec<_> = e.writes().iter().filter(|w| fresh(w.0)).cloned().collect();
    let increments: Vec<_> = e
        .increments()
        .iter()
        .filter(|i| fresh(i.0))
        .copied()
        .collect();
    let removal_went = writes.is_empty() && folded.dominates(e.removed());
    if removal_went && increments.is_empty() {
        return None;
    }
    let unchanged = writes.len() == e.writes().len() && increments.len() == e.increments().len();
    if unchanged && !removal_went {
        return Some(e);
    }
    let removed = if removal_went {
        Seen::new()
    } else {
        e.removed().clone()
    };
    Some(Element::from_parts(writes, removed).with_increments(increments))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::converge::merge::hashes::{Hashes, Kind, LocalHash};
    use crate::converge::merge::hashes_sim::Server as Map;
    use crate::converge::merge::lists::{self, End};
    use crate::converge::merge::lists_sim::Server as List;

    const K: (u32, &[u8]) = (0, b"h");

    fn seen(pairs: &[(u64, u64)]) -> Seen {
        pairs.iter().copied().collect()
    }

    fn s(clock: u64, node: u64) -> Stamp {
        Stamp::new(clock, node)
    }

    /// The highest bound node 1 held, and its bound after node 2 came
    /// back from an older copy holding node 1's changes up to clock 20.
    fn folded() -> Seen {
        seen(&[(1, 100), (2, 100)])
    }
    fn lowered() -> Seen {
        seen(&[(1, 20), (2, 100)])
    }

    fn state(kind: Kind, elements: Vec<(&str, Element<Bytes>)>) -> HashState {
        HashState {
            kind,
            elements: elements
                .into_iter()
                .map(|(n, e)| (n.as_bytes().to_vec(), e))
                .collect(),
            ..HashState::default()
        }
    }

    /// Node 1's hash {f: 7, g: x}, at rest (no metadata), after merging
    /// `incoming` (entry `entry`) against the lowered bound: with the
    /// re-listed part dropped first, and as the merge took it before.
    fn merged(incoming: &HashState, entry: Stamp) -> (Fields, Fields) {
        let here = Map([("f", "7"), ("g", "x")]
            .iter()
            .map(|(f, v)| (f.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect());
        let merge = |s: &HashState| {
            let w = Hashes::default().remote(K, s, &lowered(), &here);
            let after = here.clone().written(&w);
            after
                .fields()
                .into_iter()
                .map(|(f, v)| {
                    (
                        String::from_utf8_lossy(&f).into(),
                        String::from_utf8_lossy(&v).into(),
                    )
                })
                .collect::<Fields>()
        };
        let with = match without_relisted(incoming.clone(), entry, &folded()) {
            Some(kept) => merge(&kept),
            None => merge(&HashState::default()),
        };
        (with, merge(incoming))
    }

    /// A hash's fields and values, as text.
    type Fields = Vec<(String, String)>;

    fn pairs(p: &[(&str, &str)]) -> Fields {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn node_1_s_older_write_of_a_number_listed_again_leaves_the_newer_value_at_rest() {
        // HSET h f 5 at (50, 1), which removed what node 1 had applied;
        // f was 7 later and collected.
        let write =
            Element::from_parts(vec![(s(50, 1), b"5".to_vec())], seen(&[(1, 49), (2, 100)]));
        let (with, before) = merged(&state(Kind::Hash, vec![("f", write)]), s(50, 1));
        assert_eq!(with, pairs(&[("f", "7"), ("g", "x")]));
        assert_eq!(
            before,
            pairs(&[("f", "5"), ("g", "x")]),
            "the defect it fixes"
        );
    }

    #[test]
    fn an_increment_listed_again_is_not_added_twice() {
        let incr = Element::default().with_increments(vec![(s(60, 1), 3)]);
        let (with, before) = merged(&state(Kind::Hash, vec![("f", incr)]), s(60, 1));
        assert_eq!(with, pairs(&[("f", "7"), ("g", "x")]));
        assert_eq!(
            before,
            pairs(&[("f", "10"), ("g", "x")]),
            "the defect it fixes"
        );
    }

    #[test]
    fn a_removal_listed_again_leaves_a_value_written_after_it() {
        // HDEL h g at (70, 1); g written again later and collected.
        let mut gone = Element::default();
        gone.remove(&seen(&[(1, 70), (2, 100)]), &Seen::new());
        let (with, before) = merged(&state(Kind::Hash, vec![("g", gone)]), s(70, 1));
        assert_eq!(with, pairs(&[("f", "7"), ("g", "x")]));
        assert_eq!(before, pairs(&[("f", "7")]), "the defect it fixes");
    }

    #[test]
    fn a_whole_write_listed_again_with_its_removal_changes_nothing() {
        let mut whole = state(Kind::Hash, Vec::new());
        whole.base = Some(s(40, 1));
        whole.base_fields = vec![(b"f".to_vec(), b"1".to_vec())];
        whole.removed = seen(&[(1, 39), (2, 100)]);
        whole.complete = true;
        let (with, before) = merged(&whole, s(40, 1));
        assert_eq!(with, pairs(&[("f", "7"), ("g", "x")]));
        assert_eq!(before, pairs(&[("f", "1")]), "the defect it fixes");
    }

    #[test]
    fn what_the_peer_changed_after_it_came_back_merges_as_before() {
        let mut hdel = Element::default();
        hdel.remove(&seen(&[(1, 20), (2, 150)]), &Seen::new());
        let incr = Element::default().with_increments(vec![(s(151, 2), 2)]);
        let fresh = state(Kind::Hash, vec![("f", incr), ("g", hdel)]);
        let (with, before) = merged(&fresh, s(151, 2));
        assert_eq!(with, pairs(&[("f", "9")]));
        assert_eq!(with, before);
        let kept = without_relisted(fresh.clone(), s(151, 2), &folded()).expect("kept whole");
        assert_eq!(kept, fresh);
    }

    #[test]
    fn a_fresh_increment_beside_a_write_listed_again_adds_to_the_value_at_rest() {
        // Node 2 took node 1's HSET h f 7 at (55, 1) again, with the removal
        // it carried, then incremented f by 2 at (160, 2): it holds 9.
        let element =
            Element::from_parts(vec![(s(55, 1), b"7".to_vec())], seen(&[(1, 54), (2, 100)]))
                .with_increments(vec![(s(160, 2), 2)]);
        let (with, before) = merged(&state(Kind::Hash, vec![("f", element)]), s(160, 2));
        assert_eq!(with, pairs(&[("f", "9"), ("g", "x")]));
        assert_eq!(before, with);
    }

    #[test]
    fn the_key_s_old_removal_riding_with_a_fresh_change_clears_nothing() {
        // Node 1 created h again at (45, 1), having applied (44, 1) and
        // node 2's changes up to 100; f and g were written after and
        // collected. Node 2 took that removal again and writes y at (160, 2).
        let write = Element::from_parts(vec![(s(160, 2), b"y".to_vec())], Seen::new());
        let mut delta = state(Kind::Hash, vec![("y", write)]);
        delta.removed = seen(&[(1, 44), (2, 100)]);
        let (with, before) = merged(&delta, s(160, 2));
        assert_eq!(with, pairs(&[("f", "7"), ("g", "x"), ("y", "y")]));
        assert_eq!(before, pairs(&[("y", "y")]), "the defect it fixes");
    }

    #[test]
    fn a_key_created_after_the_peer_came_back_keeps_its_removal() {
        let mut b = Hashes::default();
        let y = vec![(b"y".to_vec(), Some(b"y".to_vec()))];
        // What it had applied names its own clock just before (as
        // `applied_before` gives it), past the 100 node 1 holds of it.
        let applied = seen(&[(1, 20), (2, 101)]);
        let delta = b.local_fields((0, b"h", Kind::Hash), s(102, 2), (y, false), &applied, true);
        let kept = without_relisted(delta.clone(), s(102, 2), &folded()).expect("a fresh change");
        assert_eq!(kept.removed, delta.removed);
    }

    #[test]
    fn a_state_keeps_its_fresh_part_and_drops_what_was_listed_again() {
        let old = Element::from_parts(vec![(s(50, 1), b"5".to_vec())], seen(&[(1, 49), (2, 100)]));
        let new = Element::from_parts(vec![(s(160, 2), b"y".to_vec())], Seen::new());
        let mixed = state(Kind::Hash, vec![("f", old), ("g", new)]);
        let (with, _) = merged(&mixed, s(160, 2));
        assert_eq!(with, pairs(&[("f", "7"), ("g", "y")]));
    }

    #[test]
    fn a_delete_of_the_key_made_after_the_peer_came_back_removes_it() {
        let mut del = state(Kind::Hash, Vec::new());
        del.removed = seen(&[(1, 20), (2, 150)]);
        del.complete = true;
        let (with, before) = merged(&del, s(151, 2));
        assert_eq!(with, Vec::new());
        assert_eq!(before, Vec::new());
        // Listed again (folded dominates it), it removes nothing.
        let mut old = del.clone();
        old.removed = seen(&[(1, 60), (2, 100)]);
        assert!(without_relisted(old, s(61, 2), &folded()).is_some_and(|s| s.removed.is_empty()));
    }

    #[test]
    fn a_run_of_pushes_listed_again_is_not_pushed_again() {
        // RPUSH l b at (50, 1), collected: the list at rest is [a, b].
        let run = Element::from_parts(
            vec![(s(50, 1), lists::encode_values(&[b"b".to_vec()]))],
            Seen::new(),
        );
        let name =
            String::from_utf8(lists::run_name(End::Right, s(50, 1))).expect("a run name is text");
        let pushed = state(Kind::List, vec![(name.as_str(), run)]);
        let here = List(vec![b"a".to_vec(), b"b".to_vec()]);
        let pushes = |s: &HashState| {
            let w = Hashes::default().remote(K, s, &lowered(), &here);
            let mut list = here.0.clone();
            lists::apply_edit(&mut list, &w.list);
            list.len()
        };
        assert_eq!(pushes(&pushed), 3, "the defect it fixes");
        assert!(without_relisted(pushed.clone(), s(50, 1), &folded()).is_none());
    }
}
