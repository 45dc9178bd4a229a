//! One flush's pushes and pops of a list on this site, named for the other
//! sites (issue 27): the runs the flush pushed, one per end, and the
//! elements its pops took, named as `list_positions` names them.
//!
//! The commands ran on the server in order; the flush replays their notes
//! against the list as the state names it, with this flush's own pushes
//! at each end not named yet. A pop takes this flush's pushes at its end
//! first (they are outermost), then the named elements, then the far
//! end's pushes of this flush (when nothing else is left): so `LPUSH a`,
//! `LPOP`, `LPUSH b` ships the run `b` and no pop, and a later push never
//! moves what a pop named. The pushes a pop took never ship.
//!
//! A flush whose notes do not account for the server's list (a pop not
//! noted, such as a blocked client's) is refused before anything is
//! marked: the caller writes the list whole instead.

use std::collections::VecDeque;

use crate::converge::merge::hashes::Bytes;
use crate::converge::merge::list_positions::{ListPositions, Taken};
use crate::converge::merge::lists::End;
use crate::converge::version::Stamp;

/// A list command as the filter noted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListNote {
    /// `LPUSH` / `RPUSH` (and their X forms) of these elements, in the
    /// command's order.
    Push(End, Vec<Bytes>),
    /// `LPOP` / `RPOP` of up to this many elements.
    Pop(End, usize),
}

/// What one flush of a list ships.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlushedList {
    /// The runs pushed, one per end (none where the flush's pops took
    /// every element it pushed there), head to tail.
    pub runs: Vec<(End, Vec<Bytes>)>,
    /// The elements the flush's pops took that were named before it.
    pub taken: Vec<Taken>,
}

/// The list's length after `notes`, from `len` elements named before.
fn length_after(len: usize, notes: &[ListNote]) -> usize {
    notes.iter().fold(len, |len, note| match note {
        ListNote::Push(_, values) => len + values.len(),
        ListNote::Pop(_, count) => len - len.min(*count),
    })
}

/// This flush's pushes not named yet: at each end, head to tail.
#[derive(Default)]
struct Pending {
    left: VecDeque<Bytes>,
    right: VecDeque<Bytes>,
}

impl Pending {
    fn push(&mut self, end: End, values: &[Bytes]) {
        for value in values {
            match end {
                End::Left => self.left.push_front(value.clone()),
                End::Right => self.right.push_back(value.clone()),
            }
        }
    }

    /// Takes the element at `end` from this end's pushes, or (`far`) from
    /// the other end's.
    fn pop(&mut self, end: End, far: bool) -> bool {
        match (end, far) {
            (End::Left, false) => self.left.pop_front().is_some(),
            (End::Left, true) => self.right.pop_front().is_some(),
            (End::Right, false) => self.right.pop_back().is_some(),
            (End::Right, true) => self.left.pop_back().is_some(),
        }
    }
}

/// Replays `notes` (one flush, stamped `stamp`) against `state`, which
/// named the list before the flush; `server_len`: the list's length on
/// the server after it. `None`, with `state` untouched, when the notes do
/// not account for that length.
pub fn name_flush(
    state: &mut ListPositions,
    stamp: Stamp,
    notes: &[ListNote],
    server_len: usize,
) -> Option<FlushedList> {
    if length_after(state.len(), notes) != server_len {
        return None;
    }
    let mut pending = Pending::default();
    let mut taken = Vec::new();
    for note in notes {
        match note {
            ListNote::Push(end, values) => pending.push(*end, values),
            ListNote::Pop(end, count) => {
                for _ in 0..*count {
                    if pending.pop(*end, false) {
                        continue;
                    }
                    match state.local_pop(*end, stamp) {
                        Some(t) => taken.push(t),
                        None if pending.pop(*end, true) => {}
                        None => break,
                    }
                }
            }
        }
    }
    let mut runs = Vec::new();
    for (end, values) in [(End::Left, pending.left), (End::Right, pending.right)] {
        if !values.is_empty() {
            let values: Vec<Bytes> = values.into();
            state.local_push(end, stamp, values.clone());
            runs.push((end, values));
        }
    }
    Some(FlushedList { runs, taken })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::converge::merge::list_codec::encode_list;
    use crate::converge::merge::list_positions::{apply_change, ListChange};
    use crate::converge::merge::Seen;

    /// The server's list after `notes`.
    fn run_on_server(list: &mut VecDeque<Bytes>, notes: &[ListNote]) {
        for note in notes {
            match note {
                ListNote::Push(End::Left, values) => {
                    values.iter().for_each(|v| list.push_front(v.clone()))
                }
                ListNote::Push(End::Right, values) => list.extend(values.iter().cloned()),
                ListNote::Pop(End::Left, n) => drop(list.drain(..(*n).min(list.len()))),
                ListNote::Pop(End::Right, n) => {
                    let keep = list.len() - (*n).min(list.len());
                    list.truncate(keep);
                }
            }
        }
    }

    /// Site B's list after A's flush, as it travels.
    fn receive(
        b: &mut ListPositions,
        server: &mut Vec<Bytes>,
        stamp: Stamp,
        flushed: &FlushedList,
    ) {
        let bound = Seen::new();
        let mut changes: Vec<ListChange> = Vec::new();
        for taken in &flushed.taken {
            changes.extend(b.apply_pop(*taken, stamp, &bound));
        }
        for (end, values) in &flushed.runs {
            changes.extend(b.apply_push(*end, stamp, values, &bound));
        }
        changes.iter().for_each(|c| apply_change(server, c));
    }

    fn note() -> impl Strategy<Value = ListNote> {
        let end = any::<bool>().prop_map(|l| if l { End::Left } else { End::Right });
        prop_oneof![
            (end.clone(), 1usize..4).prop_map(|(e, n)| ListNote::Push(e, vec![Vec::new(); n])),
            (end, 0usize..4).prop_map(|(e, n)| ListNote::Pop(e, n)),
        ]
    }

    proptest! {
        #[test]
        fn the_other_site_pops_what_each_flush_popped_and_holds_what_it_pushed(
            flushes in prop::collection::vec((prop::collection::vec(note(), 1..6), any::<bool>()), 1..30)
        ) {
            let (mut a, mut b) = (ListPositions::default(), ListPositions::default());
            let (mut a_list, mut b_list) = (VecDeque::new(), Vec::new());
            let mut applied = Seen::new();
            for (i, (mut notes, collect)) in flushes.into_iter().enumerate() {
                let stamp = Stamp::new(i as u64 + 1, 1);
                // Elements every site can tell apart.
                let mut k = 0;
                for n in &mut notes {
                    if let ListNote::Push(_, values) = n {
                        for v in values.iter_mut() {
                            *v = format!("{i}.{k}").into_bytes();
                            k += 1;
                        }
                    }
                }
                run_on_server(&mut a_list, &notes);
                let flushed = name_flush(&mut a, stamp, &notes, a_list.len());
                let flushed = flushed.expect("the notes account for the list");
                prop_assert_eq!(a.len(), a_list.len());
                receive(&mut b, &mut b_list, stamp, &flushed);
                prop_assert_eq!(&b_list, &Vec::from(a_list.clone()), "after flush {}", i);
                applied.observe(stamp);
                if collect {
                    a.collect(&applied, &applied);
                    b.collect(&applied, &applied);
                }
            }
        }
    }

    #[test]
    fn a_pop_of_this_flush_s_own_push_ships_no_pop_and_a_later_push_moves_nothing() {
        let mut state = ListPositions::default();
        let old = vec![b"old".to_vec()];
        state.local_push(End::Left, Stamp::new(1, 1), old);
        let notes = [
            ListNote::Push(End::Left, vec![b"a".to_vec()]),
            ListNote::Pop(End::Left, 1),
            ListNote::Push(End::Left, vec![b"b".to_vec()]),
            ListNote::Pop(End::Right, 1),
        ];
        let flushed = name_flush(&mut state, Stamp::new(2, 1), &notes, 1);
        let flushed = flushed.expect("accounted for");
        assert_eq!(flushed.runs, [(End::Left, vec![b"b".to_vec()])]);
        assert_eq!(flushed.taken.len(), 1, "the RPOP took `old`");
    }

    #[test]
    fn notes_that_do_not_account_for_the_list_are_refused_and_mark_nothing() {
        let mut state = ListPositions::default();
        state.local_push(End::Right, Stamp::new(1, 1), vec![b"x".to_vec(); 3]);
        let before = encode_list(&state);
        let notes = [ListNote::Pop(End::Left, 1)];
        // A blocked client popped one more than the notes say.
        assert_eq!(name_flush(&mut state, Stamp::new(2, 1), &notes, 1), None);
        assert_eq!(encode_list(&state), before);
        assert!(name_flush(&mut state, Stamp::new(2, 1), &notes, 2).is_some());
    }
}
