//! `list_positions` against a model: two and three sites push at both
//! ends and pop (one element or two) at once, their changes delivered in
//! random orders (FIFO per channel), with duplicates, whole states handed
//! over and collection at each site's own bound. After every step each
//! site's list is the model's over the operations it knows: every push it
//! knows, the runs at each end by stamp (the newest outermost), less every
//! element a pop it knows took. Once everything is delivered and
//! collected, every site holds the model's list over the whole history,
//! and no run, no place of a collected run and no unplaced pop is left.

use std::collections::BTreeSet;

use proptest::prelude::*;

use crate::converge::merge::hashes::Bytes;
use crate::converge::merge::list_positions::{apply_change, ListChange, ListPositions, Taken};
use crate::converge::merge::lists::End;
use crate::converge::merge::network::{Network, Replica};
use crate::converge::merge::Seen;
use crate::converge::version::Stamp;

#[derive(Debug, Clone, Default)]
struct ListSite {
    meta: ListPositions,
    server: Vec<Bytes>,
}

#[derive(Debug, Clone)]
enum Fragment {
    Push(End, Stamp, Vec<Bytes>),
    Pop(Stamp, Vec<Taken>),
}

impl ListSite {
    fn change(&mut self, changes: impl IntoIterator<Item = ListChange>) {
        for change in changes {
            apply_change(&mut self.server, &change);
        }
    }
}

impl Replica for ListSite {
    type Fragment = Fragment;
    fn apply(&mut self, fragment: &Fragment, _bound: &Seen) {
        let changes: Vec<ListChange> = match fragment {
            Fragment::Push(end, stamp, values) => self
                .meta
                .apply_push(*end, *stamp, values)
                .into_iter()
                .collect(),
            Fragment::Pop(stamp, taken) => taken
                .iter()
                .filter_map(|t| self.meta.apply_pop(*t, *stamp))
                .collect(),
        };
        self.change(changes);
    }
    fn merge(&mut self, other: &Self, _bound: &Seen) {
        let changes = self.meta.merge(&other.meta);
        self.change(changes);
    }
    fn collect(&mut self, bound: &Seen) {
        self.meta.collect(bound, &Seen::new());
    }
    fn collect_settled(&mut self, bound: &Seen, settled: &Seen) {
        self.meta.collect(bound, settled);
    }
}

/// What the history records: a run pushed, or the values a pop took.
#[derive(Debug, Clone)]
enum Op {
    Push(End, Stamp, Vec<Bytes>),
    Pop(Vec<Bytes>),
}

/// The model's list over `known` of `history`.
fn model(history: &[Op], known: &BTreeSet<usize>) -> Vec<Bytes> {
    let ops = || known.iter().filter_map(|&i| history.get(i));
    let mut runs: Vec<(End, Stamp, &Vec<Bytes>)> = ops()
        .filter_map(|op| match op {
            Op::Push(end, stamp, values) => Some((*end, *stamp, values)),
            Op::Pop(_) => None,
        })
        .collect();
    let popped: BTreeSet<&Bytes> = ops()
        .filter_map(|op| match op {
            Op::Pop(values) => Some(values),
            Op::Push(..) => None,
        })
        .flatten()
        .collect();
    runs.sort_by_key(|&(_, stamp, _)| stamp);
    let left = runs.iter().rev().filter(|r| r.0 == End::Left);
    let right = runs.iter().filter(|r| r.0 == End::Right);
    left.chain(right)
        .flat_map(|r| r.2.iter())
        .filter(|v| !popped.contains(v))
        .cloned()
        .collect()
}

#[derive(Debug, Clone)]
enum Step {
    Push(usize, bool, u8),
    Pop(usize, bool, u8),
    Deliver(usize, usize),
    Duplicate(usize, usize),
    Sync(usize, usize),
    Acknowledge(usize),
    Collect(usize),
}

fn steps(sites: usize) -> impl Strategy<Value = Step> {
    let site = 0..sites;
    prop_oneof![
        4 => (site.clone(), any::<bool>(), 1u8..4).prop_map(|(s, l, n)| Step::Push(s, l, n)),
        4 => (site.clone(), any::<bool>(), 1u8..3).prop_map(|(s, l, n)| Step::Pop(s, l, n)),
        6 => (site.clone(), site.clone()).prop_map(|(a, b)| Step::Deliver(a, b)),
        2 => (site.clone(), any::<usize>()).prop_map(|(a, p)| Step::Duplicate(a, p)),
        1 => (site.clone(), site.clone()).prop_map(|(a, b)| Step::Sync(a, b)),
        3 => site.clone().prop_map(Step::Acknowledge),
        3 => site.prop_map(Step::Collect),
    ]
}

fn end_of(left: bool) -> End {
    if left {
        End::Left
    } else {
        End::Right
    }
}

fn push(net: &mut Network<ListSite>, history: &mut Vec<Op>, site: usize, end: End, n: u8) {
    let stamp = net.stamp(site);
    let values: Vec<Bytes> = (0..n)
        .map(|i| format!("{}.{}.{i}", stamp.node, stamp.clock).into_bytes())
        .collect();
    let s = &mut net.sites[site].state;
    match end {
        End::Left => {
            s.server.splice(0..0, values.iter().cloned());
        }
        End::Right => s.server.extend(values.iter().cloned()),
    }
    s.meta.local_push(end, stamp, values.clone());
    history.push(Op::Push(end, stamp, values.clone()));
    net.ship(
        site,
        history.len() - 1,
        stamp,
        Fragment::Push(end, stamp, values),
    );
}

fn pop(net: &mut Network<ListSite>, history: &mut Vec<Op>, site: usize, end: End, n: u8) {
    if net.sites[site].state.server.is_empty() {
        return;
    }
    let stamp = net.stamp(site);
    let s = &mut net.sites[site].state;
    let (mut taken, mut values) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let Some(t) = s.meta.local_pop(end, stamp) else {
            break;
        };
        let value = match end {
            End::Left => Some(s.server.remove(0)),
            End::Right => s.server.pop(),
        };
        taken.push(t);
        values.extend(value);
    }
    history.push(Op::Pop(values));
    net.ship(site, history.len() - 1, stamp, Fragment::Pop(stamp, taken));
}

fn run(sites: usize, plan: &[Step]) -> Result<(), TestCaseError> {
    let mut net: Network<ListSite> = Network::new(sites, ListSite::default());
    let mut history = Vec::new();
    for step in plan {
        match *step {
            Step::Push(s, left, n) => push(&mut net, &mut history, s, end_of(left), n),
            Step::Pop(s, left, n) => pop(&mut net, &mut history, s, end_of(left), n),
            Step::Deliver(a, b) if a != b => net.deliver(a, b),
            Step::Duplicate(a, pick) => net.duplicate(a, pick),
            Step::Sync(a, b) if a != b => net.sync(a, b),
            Step::Acknowledge(a) => net.acknowledge(a),
            Step::Collect(a) => net.collect(a),
            _ => {}
        }
        for (i, site) in net.sites.iter().enumerate() {
            let want = model(&history, &site.known);
            prop_assert_eq!(&site.state.server, &want, "site {} after {:?}", i, step);
        }
    }
    for _ in 0..4 {
        for s in 0..sites {
            net.acknowledge(s);
        }
        net.drain();
        for s in 0..sites {
            net.collect(s);
        }
    }
    let all: BTreeSet<usize> = (0..history.len()).collect();
    let want = model(&history, &all);
    for (i, site) in net.sites.iter().enumerate() {
        let meta = &site.state.meta;
        prop_assert_eq!(&site.state.server, &want, "site {} at the end", i);
        prop_assert!(
            meta.at_rest(),
            "site {} keeps runs or places: {:?}",
            i,
            meta
        );
        prop_assert_eq!(meta.unplaced(), 0, "site {}", i);
        if want.is_empty() {
            prop_assert!(meta.removed_spans() <= 1, "site {}: {:?}", i, meta);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn two_sites_pushing_and_popping_at_once_end_with_the_model_s_list(
        plan in prop::collection::vec(steps(2), 1..300)
    ) {
        run(2, &plan)?;
    }

    #[test]
    fn three_sites_pushing_and_popping_at_once_end_with_the_model_s_list(
        plan in prop::collection::vec(steps(3), 1..300)
    ) {
        run(3, &plan)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both sites pop the one element at once: it is removed once, both
    /// return it, and the element behind it stays.
    #[test]
    fn an_element_popped_on_both_sites_at_once_is_removed_once() {
        let plan = [
            Step::Push(0, false, 2),
            Step::Deliver(0, 1),
            Step::Pop(0, true, 1),
            Step::Pop(1, true, 1),
            Step::Deliver(0, 1),
            Step::Deliver(1, 0),
        ];
        let mut net: Network<ListSite> = Network::new(2, ListSite::default());
        let mut history = Vec::new();
        for step in &plan {
            match *step {
                Step::Push(s, l, n) => push(&mut net, &mut history, s, end_of(l), n),
                Step::Pop(s, l, n) => pop(&mut net, &mut history, s, end_of(l), n),
                Step::Deliver(a, b) => net.deliver(a, b),
                _ => {}
            }
        }
        let taken: Vec<&Op> = history.iter().filter(|o| matches!(o, Op::Pop(_))).collect();
        assert!(matches!((taken[0], taken[1]), (Op::Pop(a), Op::Pop(b)) if a == b));
        for site in &net.sites {
            assert_eq!(site.state.server, vec![b"1.1.1".to_vec()]);
        }
    }
}
