//! Lists in the element table (issue 27, with `merge-elements`): pushes
//! made at once on several sites all survive, ordered by stamp.
//!
//! A list with metadata is its **rest** (the elements every site agrees
//! on, in the middle) with **runs** at each end. A run is what one site's
//! flush pushed at one end (`LPUSH`, `RPUSH`...): an element of the table
//! named by its end and stamp ([`run_name`]), written once, its value the
//! pushed elements in list order. The rest is the element named
//! [`REST`], written by a whole write of the list (a pop, `LSET`,
//! `LTRIM`, a transaction...), which is also a removal of every run its
//! site had seen. So the element rules give the list rules:
//! - runs of several sites all survive; at each end they sit by stamp, the
//!   newest outermost, as one site's own pushes do;
//! - a whole write keeps the runs it had not seen (outside its rest), and
//!   of two whole writes at once the newer one's rest wins (counted: the
//!   older one's pops or edits are undone);
//! - a delete removes the runs it had seen.
//!
//! The server holds `left runs (newest first) + rest + right runs (oldest
//! first)` of the present runs. [`ListRest`] shows the table's decisions
//! the list as they read a hash: the rest as the one field [`REST`], a
//! present run as the field its name says; [`edit`] turns a merge's
//! outcome into the pops and pushes at each end (or the whole list
//! written again when the rest changed).

use std::collections::BTreeMap;

use crate::converge::merge::hashes::{Bytes, LocalHash};
use crate::converge::version::Stamp;

/// The name of a list's rest in the table.
pub const REST: &[u8] = b"";

/// An end of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum End {
    /// The head (`LPUSH`).
    Left,
    /// The tail (`RPUSH`).
    Right,
}

impl End {
    /// The first byte of its runs' names.
    fn tag(self) -> u8 {
        match self {
            End::Left => b'L',
            End::Right => b'R',
        }
    }
}

/// The table's name of the run pushed at `end` by the flush stamped
/// `stamp`: names sort by end, then by stamp.
pub fn run_name(end: End, stamp: Stamp) -> Bytes {
    let mut name = Vec::with_capacity(17);
    name.push(end.tag());
    name.extend_from_slice(&stamp.clock.to_be_bytes());
    name.extend_from_slice(&stamp.node.to_be_bytes());
    name
}

/// The end and stamp a run's name says; `None` for any other name.
pub fn run_of(name: &[u8]) -> Option<(End, Stamp)> {
    let (&tag, rest) = name.split_first()?;
    let end = [End::Left, End::Right]
        .into_iter()
        .find(|e| e.tag() == tag)?;
    let clock = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
    let node = u64::from_be_bytes(rest.get(8..)?.try_into().ok()?);
    Some((end, Stamp::new(clock, node)))
}

/// Elements in list order as one element value: each its length (u32,
/// big-endian) and bytes.
pub fn encode_values(values: &[Bytes]) -> Bytes {
    let len: usize = values.iter().map(|v| 4 + v.len()).sum();
    let mut out = Vec::with_capacity(len);
    for v in values {
        // A list element is a Redis string: 512 MB at most.
        out.extend_from_slice(&u32::try_from(v.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(v);
    }
    out
}

/// The elements [`encode_values`] wrote; `None` for bytes it cannot have
/// written.
pub fn decode_values(mut bytes: &[u8]) -> Option<Vec<Bytes>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let len = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
        out.push(bytes.get(4..4 + len)?.to_vec());
        bytes = &bytes[4 + len..];
    }
    Some(out)
}

/// The present runs of a list (on the server), by name: their encoded
/// elements.
pub type Runs = BTreeMap<Bytes, Bytes>;

/// The runs of `runs` at `end`, innermost (oldest) first.
fn at_end(runs: &Runs, end: End) -> impl DoubleEndedIterator<Item = (&Bytes, &Bytes)> {
    runs.iter()
        .filter(move |(n, _)| run_of(n).is_some_and(|(e, _)| e == end))
}

/// How many elements the runs of `runs` at `end` hold.
fn len_at(runs: &Runs, end: End) -> usize {
    at_end(runs, end)
        .map(|(_, v)| decode_values(v).map_or(0, |v| v.len()))
        .sum()
}

/// A server's list as the table reads a hash (see the module's doc): the
/// rest as the field [`REST`] (absent when empty), each run present before
/// the merge as the field its name says.
pub struct ListRest<'a, L> {
    local: &'a L,
    runs: &'a Runs,
}

impl<'a, L: LocalHash> ListRest<'a, L> {
    /// The list `local` (whose field [`REST`] holds every element, see
    /// `ElementKey`) with the present runs `runs`.
    pub fn new(local: &'a L, runs: &'a Runs) -> Self {
        Self { local, runs }
    }

    /// The elements between the runs, head to tail.
    fn rest(&self) -> Vec<Bytes> {
        let all = self
            .local
            .field(REST)
            .and_then(|v| decode_values(&v))
            .unwrap_or_default();
        let (left, right) = (len_at(self.runs, End::Left), len_at(self.runs, End::Right));
        let end = all.len().saturating_sub(right).max(left.min(all.len()));
        all.get(left.min(all.len())..end)
            .map(<[_]>::to_vec)
            .unwrap_or_default()
    }
}

impl<L: LocalHash> LocalHash for ListRest<'_, L> {
    fn field(&self, name: &[u8]) -> Option<Bytes> {
        if name == REST {
            let rest = self.rest();
            return (!rest.is_empty()).then(|| encode_values(&rest));
        }
        self.runs.get(name).cloned()
    }

    fn fields(&self) -> Vec<(Bytes, Bytes)> {
        self.field(REST)
            .map(|rest| vec![(REST.to_vec(), rest)])
            .unwrap_or_default()
    }

    fn field_count(&self) -> usize {
        // The list's length against the runs' (no read of the elements).
        let runs = len_at(self.runs, End::Left) + len_at(self.runs, End::Right);
        usize::from(self.local.field_count() > runs)
    }
}

/// The sender's rest `rest` (in a sync's state) without the runs it
/// collected into it that this node still holds as runs: of this node's
/// present runs the sender lists none of (`listed`: the names it lists),
/// by stamp at each end, the sender collected the innermost (a run is
/// collected only once every site applied it and every older one) and
/// may not have the others yet (newer). Each end's longest such prefix
/// the rest's edge holds, element for element, is taken off.
pub fn without_collected_runs(
    mut rest: Vec<Bytes>,
    here: &Runs,
    listed: impl Fn(&[u8]) -> bool,
) -> Vec<Bytes> {
    for end in [End::Left, End::Right] {
        let unlisted: Vec<Vec<Bytes>> = at_end(here, end)
            .filter(|(n, _)| !listed(n))
            .map(|(_, v)| decode_values(v).unwrap_or_default())
            .collect();
        for k in (1..=unlisted.len()).rev() {
            // In list order: the left end's innermost run is its last.
            let edge: Vec<&Bytes> = match end {
                End::Left => unlisted[..k].iter().rev().flatten().collect(),
                End::Right => unlisted[..k].iter().flatten().collect(),
            };
            if edge.len() > rest.len() {
                continue;
            }
            let at = match end {
                End::Left => 0,
                End::Right => rest.len() - edge.len(),
            };
            if rest[at..at + edge.len()].iter().eq(edge.iter().copied()) {
                rest.drain(at..at + edge.len());
                break;
            }
        }
    }
    rest
}

/// What one end of a list needs: pop this many elements there, then push
/// these (in list order, head to tail).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndEdit {
    /// Elements popped at the end.
    pub pop: usize,
    /// Elements pushed after, head to tail.
    pub push: Vec<Bytes>,
}

/// What the server must do to a list to hold a merge's outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ListEdit {
    /// Nothing.
    #[default]
    Unchanged,
    /// The list is written anew (its rest changed): these elements, head
    /// to tail (none: the key goes).
    Rebuild(Vec<Bytes>),
    /// Pops then pushes at each end; the rest stays.
    Ends {
        /// At the head.
        left: EndEdit,
        /// At the tail.
        right: EndEdit,
    },
}

/// The elements of `runs` at `end` from the `skip`-th innermost outwards,
/// in list order.
fn values_at(runs: &Runs, end: End, skip: usize) -> Vec<Bytes> {
    let mut out = Vec::new();
    let values = |v: &Bytes| decode_values(v).unwrap_or_default();
    match end {
        End::Right => at_end(runs, end)
            .skip(skip)
            .for_each(|(_, v)| out.extend(values(v))),
        End::Left => {
            let n = at_end(runs, end).count();
            at_end(runs, end)
                .rev()
                .take(n.saturating_sub(skip))
                .for_each(|(_, v)| out.extend(values(v)));
        }
    }
    out
}

/// The edit of one end from the runs present before (`pre`) to after
/// (`post`): the runs both hold innermost stay, the others are popped and
/// pushed again.
fn end_edit(pre: &Runs, post: &Runs, end: End) -> EndEdit {
    let kept = at_end(pre, end)
        .zip(at_end(post, end))
        .take_while(|((a, _), (b, _))| a == b)
        .count();
    let popped: usize = at_end(pre, end)
        .skip(kept)
        .map(|(_, v)| decode_values(v).map_or(0, |v| v.len()))
        .sum();
    EndEdit {
        pop: popped,
        push: values_at(post, end, kept),
    }
}

/// What the server does to go from the runs present before a merge
/// (`pre`) to those after (`post`); `rest`: the rest's new elements when
/// it changed (`None`: unchanged).
pub fn edit(pre: &Runs, post: &Runs, rest: Option<Vec<Bytes>>) -> ListEdit {
    if let Some(rest) = rest {
        let mut all = values_at(post, End::Left, 0);
        all.extend(rest);
        all.extend(values_at(post, End::Right, 0));
        return ListEdit::Rebuild(all);
    }
    let (left, right) = (
        end_edit(pre, post, End::Left),
        end_edit(pre, post, End::Right),
    );
    if left == EndEdit::default() && right == EndEdit::default() {
        return ListEdit::Unchanged;
    }
    ListEdit::Ends { left, right }
}

/// `list` after `edit` (the tests' server, and the writer's reference).
pub fn apply_edit(list: &mut Vec<Bytes>, edit: &ListEdit) {
    match edit {
        ListEdit::Unchanged => {}
        ListEdit::Rebuild(all) => list.clone_from(all),
        ListEdit::Ends { left, right } => {
            list.drain(..left.pop.min(list.len()));
            list.splice(0..0, left.push.iter().cloned());
            list.truncate(list.len().saturating_sub(right.pop));
            list.extend(right.push.iter().cloned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(list: &[(End, u64, &[&str])]) -> Runs {
        list.iter()
            .map(|(end, clock, values)| {
                let values: Vec<Bytes> = values.iter().map(|v| v.as_bytes().to_vec()).collect();
                (
                    run_name(*end, Stamp::new(*clock, 1)),
                    encode_values(&values),
                )
            })
            .collect()
    }

    fn strings(list: &[Bytes]) -> Vec<&str> {
        list.iter()
            .map(|v| std::str::from_utf8(v).unwrap_or("?"))
            .collect()
    }

    #[test]
    fn a_run_s_name_says_its_end_and_stamp_and_sorts_by_them() {
        let name = run_name(End::Right, Stamp::new(7, 2));
        assert_eq!(run_of(&name), Some((End::Right, Stamp::new(7, 2))));
        assert_eq!(run_of(REST), None);
        assert_eq!(run_of(b"Rshort"), None);
        assert!(run_name(End::Left, Stamp::new(9, 1)) < run_name(End::Left, Stamp::new(10, 0)));
        assert!(run_name(End::Left, Stamp::new(99, 1)) < name);
    }

    #[test]
    fn values_round_trip_and_bad_bytes_are_refused() {
        let values = vec![b"a".to_vec(), Vec::new(), b"ccc".to_vec()];
        assert_eq!(decode_values(&encode_values(&values)), Some(values));
        assert_eq!(decode_values(&[0, 0, 0, 5, b'x']), None);
        assert_eq!(decode_values(&[0, 0]), None);
        assert_eq!(decode_values(&[]), Some(Vec::new()));
    }

    #[test]
    fn a_run_goes_inside_the_newer_runs_of_its_end() {
        let pre = runs(&[(End::Right, 5, &["a"]), (End::Right, 9, &["c", "d"])]);
        let post = runs(&[
            (End::Right, 5, &["a"]),
            (End::Right, 7, &["b"]),
            (End::Right, 9, &["c", "d"]),
            (End::Left, 3, &["y", "z"]),
            (End::Left, 8, &["x"]),
        ]);
        let mut list: Vec<Bytes> = ["m", "a", "c", "d"]
            .iter()
            .map(|v| v.as_bytes().to_vec())
            .collect();
        let e = edit(&pre, &post, None);
        let ListEdit::Ends { left, right } = &e else {
            panic!("ends: {e:?}");
        };
        assert_eq!((left.pop, right.pop), (0, 2), "only the newer run moves");
        apply_edit(&mut list, &e);
        assert_eq!(strings(&list), ["x", "y", "z", "m", "a", "b", "c", "d"]);
    }

    #[test]
    fn a_new_rest_rewrites_the_list_around_the_runs() {
        let post = runs(&[(End::Left, 4, &["l"]), (End::Right, 4, &["r"])]);
        let e = edit(&Runs::new(), &post, Some(vec![b"m".to_vec()]));
        let mut list = vec![b"old".to_vec()];
        apply_edit(&mut list, &e);
        assert_eq!(strings(&list), ["l", "m", "r"]);
        assert_eq!(edit(&post, &post, None), ListEdit::Unchanged);
    }

    #[test]
    fn a_sync_s_rest_loses_the_runs_its_sender_collected_into_it() {
        let here = runs(&[
            (End::Left, 2, &["l2"]),
            (End::Left, 6, &["l6"]),
            (End::Right, 3, &["r3a", "r3b"]),
            (End::Right, 5, &["r5"]),
            (End::Right, 9, &["r9"]),
        ]);
        let listed_r5 = |n: &[u8]| n == run_name(End::Right, Stamp::new(5, 1)).as_slice();
        let rest: Vec<Bytes> = ["l2", "m", "r3a", "r3b"]
            .iter()
            .map(|v| v.as_bytes().to_vec())
            .collect();
        let left = without_collected_runs(rest, &here, listed_r5);
        assert_eq!(strings(&left), ["m"]);
        let unknown = vec![b"x".to_vec(), b"r3a".to_vec()];
        assert_eq!(
            without_collected_runs(unknown.clone(), &here, |_| false),
            unknown
        );
    }

    #[test]
    fn the_rest_is_the_list_between_the_present_runs() {
        struct Whole(Vec<Bytes>);
        impl LocalHash for Whole {
            fn field(&self, name: &[u8]) -> Option<Bytes> {
                (name == REST && !self.0.is_empty()).then(|| encode_values(&self.0))
            }
            fn fields(&self) -> Vec<(Bytes, Bytes)> {
                Vec::new()
            }
            fn field_count(&self) -> usize {
                self.0.len()
            }
        }
        let server = Whole(
            ["l", "m1", "m2", "r1", "r2"]
                .iter()
                .map(|v| v.as_bytes().to_vec())
                .collect(),
        );
        let present = runs(&[(End::Left, 2, &["l"]), (End::Right, 3, &["r1", "r2"])]);
        let view = ListRest::new(&server, &present);
        let rest = view.field(REST).and_then(|v| decode_values(&v));
        assert_eq!(rest.as_deref().map(strings), Some(vec!["m1", "m2"]));
        assert_eq!(view.field_count(), 1);
        let name = run_name(End::Right, Stamp::new(3, 1));
        assert_eq!(view.field(&name), present.get(&name).cloned());
        let only_runs = Whole(vec![b"l".to_vec(), b"r1".to_vec(), b"r2".to_vec()]);
        let view = ListRest::new(&only_runs, &present);
        assert_eq!((view.field(REST), view.field_count()), (None, 0));
    }
}
