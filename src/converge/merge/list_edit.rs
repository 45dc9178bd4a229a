//! How the server's list makes a [`ListChange`] at an index: by pops and
//! pushes at the nearer end (the commands a replica and the AOF take as
//! they are), so that a removal or insertion costs its distance from that
//! end, not the list's length. A queue's pops and a run arriving at an
//! end cost a few elements.

use crate::converge::merge::hashes::Bytes;
use crate::converge::merge::list_positions::ListChange;
use crate::converge::merge::lists::End;

/// What goes back onto the list after the pops, innermost first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Put {
    /// The element the `i`-th pop took (the first pop: 0).
    Popped(usize),
    /// A new element.
    Value(Bytes),
}

/// One change as edits at one end: pop `take` elements there, then push
/// `put` there, innermost first (`LPOP key take`, `LPUSH key put...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Splice {
    /// The end.
    pub end: End,
    /// How many elements to pop.
    pub take: usize,
    /// What to push back, innermost first.
    pub put: Vec<Put>,
}

/// `change` as a splice at the nearer end of a list of `len` elements;
/// `None` for a removal past the end, an insertion of nothing or a whole
/// rebuild.
pub fn splice_of(len: usize, change: &ListChange) -> Option<Splice> {
    match change {
        ListChange::Remove(at) if *at < len => {
            let (end, take) = nearer(*at, len - at - 1);
            // The popped elements but the last (the one removed), the
            // innermost first.
            let put = (0..take - 1).rev().map(Put::Popped).collect();
            Some(Splice { end, take, put })
        }
        ListChange::Insert(at, values) if !values.is_empty() => {
            let at = (*at).min(len);
            let (end, take) = nearer(at, len - at);
            let take = take - 1;
            let new = values.iter().cloned().map(Put::Value);
            let mut put: Vec<Put> = match end {
                End::Left => new.rev().collect(),
                End::Right => new.collect(),
            };
            put.extend((0..take).rev().map(Put::Popped));
            Some(Splice { end, take, put })
        }
        ListChange::Remove(_) | ListChange::Insert(..) | ListChange::Rebuild(_) => None,
    }
}

/// The end nearer to a place with `before` elements on its left and
/// `after` on its right, and how many elements up to it and it.
fn nearer(before: usize, after: usize) -> (End, usize) {
    if before <= after {
        (End::Left, before + 1)
    } else {
        (End::Right, after + 1)
    }
}

/// `splice` made on `list` (the tests' server): whether it could be.
pub fn apply_splice(list: &mut std::collections::VecDeque<Bytes>, splice: &Splice) -> bool {
    if splice.take > list.len() {
        return false;
    }
    let popped: Vec<Bytes> = match splice.end {
        End::Left => list.drain(..splice.take).collect(),
        End::Right => list.drain(list.len() - splice.take..).rev().collect(),
    };
    for put in &splice.put {
        let value = match put {
            Put::Popped(i) => match popped.get(*i) {
                Some(v) => v.clone(),
                None => return false,
            },
            Put::Value(v) => v.clone(),
        };
        match splice.end {
            End::Left => list.push_front(value),
            End::Right => list.push_back(value),
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use proptest::prelude::*;

    use super::*;
    use crate::converge::merge::list_positions::apply_change;

    fn list(n: usize) -> Vec<Bytes> {
        (0..n).map(|i| i.to_string().into_bytes()).collect()
    }

    proptest! {
        #[test]
        fn a_splice_at_the_nearer_end_makes_the_change_at_its_distance(
            len in 0usize..12, at in 0usize..13, insert in 0usize..3, remove in any::<bool>()
        ) {
            let change = if remove {
                ListChange::Remove(at)
            } else {
                ListChange::Insert(at, (0..insert).map(|i| format!("new{i}").into_bytes()).collect())
            };
            let mut want = list(len);
            apply_change(&mut want, &change);
            let mut server: VecDeque<Bytes> = list(len).into();
            match splice_of(len, &change) {
                Some(splice) => {
                    prop_assert!(apply_splice(&mut server, &splice));
                    prop_assert!(splice.take <= len / 2 + 1, "{:?}", splice);
                }
                None => prop_assert!((remove && at >= len) || (!remove && insert == 0)),
            }
            prop_assert_eq!(Vec::from(server), want);
        }
    }

    #[test]
    fn a_queue_s_head_pop_and_a_run_at_its_tail_touch_nothing_else() {
        let pop = splice_of(1_000_000, &ListChange::Remove(0));
        let pop = pop.expect("a removal inside the list");
        assert_eq!((pop.end, pop.take, pop.put.len()), (End::Left, 1, 0));
        let run = ListChange::Insert(1_000_000, vec![b"a".to_vec(), b"b".to_vec()]);
        let push = splice_of(1_000_000, &run).expect("an insertion");
        assert_eq!(push.take, 0);
        assert_eq!(
            push.put,
            [Put::Value(b"a".to_vec()), Put::Value(b"b".to_vec())]
        );
    }
}
