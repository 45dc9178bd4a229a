//! Property tests of the merges against a model: random operations on two
//! and three sites, delivered in random orders with duplicates, whole
//! states handed over and metadata collected in between. After every step
//! each site's value is the model's value over the operations that site
//! knows, and once everything is delivered every site holds the model's
//! value over the whole history.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use crate::converge::merge::network::{Network, Replica};
use crate::converge::merge::{Counter, Elements, Seen};
use crate::converge::version::Stamp;

/// How the network moves between operations.
#[derive(Debug, Clone)]
enum Move {
    Deliver(usize, usize),
    Duplicate(usize, usize),
    Sync(usize, usize),
    Acknowledge(usize),
    Collect(usize),
}

fn moves(sites: usize) -> impl Strategy<Value = Move> {
    let site = 0..sites;
    prop_oneof![
        4 => (site.clone(), site.clone()).prop_map(|(a, b)| Move::Deliver(a, b)),
        3 => (site.clone(), any::<usize>()).prop_map(|(a, p)| Move::Duplicate(a, p)),
        1 => (site.clone(), site.clone()).prop_map(|(a, b)| Move::Sync(a, b)),
        2 => site.clone().prop_map(Move::Acknowledge),
        2 => site.prop_map(Move::Collect),
    ]
}

fn run_move<R: Replica>(net: &mut Network<R>, step: &Move) {
    match *step {
        Move::Deliver(a, b) if a != b => net.deliver(a, b),
        Move::Duplicate(a, pick) => net.duplicate(a, pick),
        Move::Sync(a, b) if a != b => net.sync(a, b),
        Move::Acknowledge(a) => net.acknowledge(a),
        Move::Collect(a) => net.collect(a),
        _ => {}
    }
}

// ---- collections (hash fields, set members) ----

#[derive(Debug, Clone)]
pub enum ElementsFragment {
    Write(u8, Stamp, u32),
    Remove(u8, Seen),
    RemoveAll(Seen),
}

impl Replica for Elements<u32> {
    type Fragment = ElementsFragment;
    fn apply(&mut self, fragment: &ElementsFragment, bound: &Seen) {
        match fragment {
            ElementsFragment::Write(f, stamp, v) => self.write(&[*f], *stamp, *v, bound),
            ElementsFragment::Remove(f, seen) => self.remove(&[*f], seen, bound),
            ElementsFragment::RemoveAll(seen) => self.remove_all(seen, bound),
        }
    }
    fn merge(&mut self, other: &Self, bound: &Seen) {
        Elements::merge(self, other, bound);
    }
    fn collect(&mut self, bound: &Seen) {
        Elements::collect(self, bound, &|v: Option<&u32>, _| v.copied());
    }
}

#[derive(Debug, Clone)]
enum ElementsOp {
    Write(u8, u32),
    Remove(u8),
    RemoveAll,
}

/// An operation of the history, as the model sees it.
#[derive(Debug, Clone)]
enum ElementsEvent {
    Write(u8, Stamp, u32),
    /// The field (`None`: all) and the writes its site knew.
    Remove(Option<u8>, BTreeSet<usize>),
}

const FIELDS: u8 = 2;
const AT_REST: [(u8, u32); 2] = [(0, 1000), (1, 1001)];

fn elements_op() -> impl Strategy<Value = ElementsOp> {
    prop_oneof![
        4 => (0..FIELDS, 0..50u32).prop_map(|(f, v)| ElementsOp::Write(f, v)),
        2 => (0..FIELDS).prop_map(ElementsOp::Remove),
        1 => Just(ElementsOp::RemoveAll),
    ]
}

/// The model: a field holds the newest of the known writes no known removal
/// had seen; a value at rest was seen by every removal and loses to any write.
fn elements_model(history: &[ElementsEvent], known: &BTreeSet<usize>) -> BTreeMap<u8, u32> {
    let removes: Vec<_> = known
        .iter()
        .filter_map(|&i| match &history[i] {
            ElementsEvent::Remove(f, covered) => Some((*f, covered)),
            ElementsEvent::Write(..) => None,
        })
        .collect();
    let removes_field = |field: u8| {
        removes
            .iter()
            .filter(move |(f, _)| f.is_none_or(|f| f == field))
    };
    let mut out = BTreeMap::new();
    for (field, value) in AT_REST {
        if removes_field(field).next().is_none() {
            out.insert(field, value);
        }
    }
    let mut newest: BTreeMap<u8, Stamp> = BTreeMap::new();
    for &i in known {
        let ElementsEvent::Write(field, stamp, value) = history[i] else {
            continue;
        };
        if removes_field(field).any(|(_, covered)| covered.contains(&i)) {
            continue;
        }
        if newest.get(&field).is_none_or(|&n| stamp > n) {
            newest.insert(field, stamp);
            out.insert(field, value);
        }
    }
    out
}

fn elements_issue(
    net: &mut Network<Elements<u32>>,
    history: &mut Vec<ElementsEvent>,
    site: usize,
    op: &ElementsOp,
) {
    let stamp = net.stamp(site);
    let id = history.len();
    let s = &net.sites[site];
    let known_writes = |field: Option<u8>| -> BTreeSet<usize> {
        s.known
            .iter()
            .copied()
            .filter(|&i| matches!(history[i], ElementsEvent::Write(f, ..) if field.is_none_or(|x| x == f)))
            .collect()
    };
    let (event, fragment) = match *op {
        ElementsOp::Write(f, v) => (
            ElementsEvent::Write(f, stamp, v),
            ElementsFragment::Write(f, stamp, v),
        ),
        ElementsOp::Remove(f) => {
            let mut seen = s.applied.clone();
            seen.join(&s.state.observed(&[f]));
            (
                ElementsEvent::Remove(Some(f), known_writes(Some(f))),
                ElementsFragment::Remove(f, seen),
            )
        }
        ElementsOp::RemoveAll => {
            let mut seen = s.applied.clone();
            seen.join(&s.state.observed_all());
            (
                ElementsEvent::Remove(None, known_writes(None)),
                ElementsFragment::RemoveAll(seen),
            )
        }
    };
    history.push(event);
    let s = &mut net.sites[site];
    s.state.apply(&fragment, &s.bound.clone());
    net.ship(site, id, stamp, fragment);
}

fn elements_values(state: &Elements<u32>) -> BTreeMap<u8, u32> {
    state
        .values()
        .into_iter()
        .map(|(k, v)| (k[0], *v))
        .collect()
}

fn check_elements(sites: usize, steps: &[(Option<(usize, ElementsOp)>, Move)]) {
    let initial = Elements::at_rest(AT_REST.iter().map(|&(f, v)| (vec![f], v)));
    let mut net = Network::new(sites, initial);
    let mut history = Vec::new();
    for (op, step) in steps {
        if let Some((site, op)) = op {
            elements_issue(&mut net, &mut history, *site, op);
        }
        run_move(&mut net, step);
        for (i, s) in net.sites.iter().enumerate() {
            assert_eq!(
                elements_values(&s.state),
                elements_model(&history, &s.known),
                "site {i}"
            );
        }
    }
    net.drain();
    let all: BTreeSet<usize> = (0..history.len()).collect();
    let want = elements_model(&history, &all);
    for (i, s) in net.sites.iter().enumerate() {
        assert_eq!(elements_values(&s.state), want, "site {i} after delivery");
    }
    // Once every site acknowledged everything, collection leaves nothing.
    for site in 0..sites {
        net.acknowledge(site);
    }
    net.drain();
    for site in 0..sites {
        net.collect(site);
        let s = &net.sites[site];
        assert_eq!(
            elements_values(&s.state),
            want,
            "site {site} after collection"
        );
        assert_eq!(s.state.metadata_len(), 0, "site {site} at rest");
    }
}

// ---- counters ----

#[derive(Debug, Clone)]
pub enum CounterFragment {
    Base(Stamp, Option<i128>, Seen),
    Increment(Stamp, i128),
}

impl Replica for Counter {
    type Fragment = CounterFragment;
    fn apply(&mut self, fragment: &CounterFragment, bound: &Seen) {
        match fragment {
            CounterFragment::Base(stamp, value, seen) => self.set(*stamp, *value, seen.clone()),
            CounterFragment::Increment(stamp, delta) => self.increment(*stamp, *delta, bound),
        }
    }
    fn merge(&mut self, other: &Self, bound: &Seen) {
        Counter::merge(self, other, bound);
    }
    fn collect(&mut self, bound: &Seen) {
        Counter::collect(self, bound);
    }
}

#[derive(Debug, Clone)]
enum CounterOp {
    Set(i8),
    Delete,
    Increment(i8),
}

#[derive(Debug, Clone)]
enum CounterEvent {
    /// A set or delete, and the increments its site knew.
    Base(Stamp, Option<i128>, BTreeSet<usize>),
    Increment(i128),
}

const COUNTER_AT_REST: i128 = 7;

fn counter_op() -> impl Strategy<Value = CounterOp> {
    prop_oneof![
        1 => any::<i8>().prop_map(CounterOp::Set),
        1 => Just(CounterOp::Delete),
        4 => any::<i8>().prop_map(CounterOp::Increment),
    ]
}

/// The model: the newest known set (or the value at rest) plus every known
/// increment that set's site did not know.
fn counter_model(history: &[CounterEvent], known: &BTreeSet<usize>) -> Option<i128> {
    let base = known
        .iter()
        .filter_map(|&i| match &history[i] {
            CounterEvent::Base(stamp, value, seen) => Some((*stamp, *value, Some(seen))),
            CounterEvent::Increment(_) => None,
        })
        .max_by_key(|(stamp, ..)| *stamp);
    let (value, seen) = match base {
        Some((_, value, seen)) => (value, seen),
        None => (Some(COUNTER_AT_REST), None),
    };
    let unseen: Vec<i128> = known
        .iter()
        .filter(|i| seen.is_none_or(|s| !s.contains(i)))
        .filter_map(|&i| match history[i] {
            CounterEvent::Increment(delta) => Some(delta),
            CounterEvent::Base(..) => None,
        })
        .collect();
    if value.is_none() && unseen.is_empty() {
        return None;
    }
    Some(value.unwrap_or(0) + unseen.iter().sum::<i128>())
}

fn counter_issue(
    net: &mut Network<Counter>,
    history: &mut Vec<CounterEvent>,
    site: usize,
    op: &CounterOp,
) {
    let stamp = net.stamp(site);
    let id = history.len();
    let s = &net.sites[site];
    let base = |value: Option<i128>| {
        let mut seen = s.applied.clone();
        seen.join(&s.state.observed());
        let known: BTreeSet<usize> = s
            .known
            .iter()
            .copied()
            .filter(|&i| matches!(history[i], CounterEvent::Increment(_)))
            .collect();
        (
            CounterEvent::Base(stamp, value, known),
            CounterFragment::Base(stamp, value, seen),
        )
    };
    let (event, fragment) = match *op {
        CounterOp::Set(v) => base(Some(i128::from(v))),
        CounterOp::Delete => base(None),
        CounterOp::Increment(d) => (
            CounterEvent::Increment(i128::from(d)),
            CounterFragment::Increment(stamp, i128::from(d)),
        ),
    };
    history.push(event);
    let s = &mut net.sites[site];
    s.state.apply(&fragment, &s.bound.clone());
    net.ship(site, id, stamp, fragment);
}

fn check_counter(sites: usize, steps: &[(Option<(usize, CounterOp)>, Move)]) {
    let mut net = Network::new(sites, Counter::at_rest(Some(COUNTER_AT_REST)));
    let mut history = Vec::new();
    for (op, step) in steps {
        if let Some((site, op)) = op {
            counter_issue(&mut net, &mut history, *site, op);
        }
        run_move(&mut net, step);
        for (i, s) in net.sites.iter().enumerate() {
            assert_eq!(
                s.state.value(),
                counter_model(&history, &s.known),
                "site {i}"
            );
        }
    }
    net.drain();
    let all: BTreeSet<usize> = (0..history.len()).collect();
    let want = counter_model(&history, &all);
    for site in 0..sites {
        net.acknowledge(site);
    }
    net.drain();
    for site in 0..sites {
        assert_eq!(
            net.sites[site].state.value(),
            want,
            "site {site} after delivery"
        );
        net.collect(site);
        let s = &net.sites[site];
        assert_eq!(s.state.value(), want, "site {site} after collection");
        assert_eq!(s.state.metadata_len(), 0, "site {site} at rest");
    }
}

fn steps<O: std::fmt::Debug + Clone>(
    sites: usize,
    op: impl Strategy<Value = O>,
) -> impl Strategy<Value = Vec<(Option<(usize, O)>, Move)>> {
    prop::collection::vec(
        (prop::option::weighted(0.5, (0..sites, op)), moves(sites)),
        0..80,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn collections_on_two_sites_merge_as_the_model(s in steps(2, elements_op())) {
        check_elements(2, &s);
    }

    #[test]
    fn collections_on_three_sites_merge_as_the_model(s in steps(3, elements_op())) {
        check_elements(3, &s);
    }

    #[test]
    fn counters_on_two_sites_merge_as_the_model(s in steps(2, counter_op())) {
        check_counter(2, &s);
    }

    #[test]
    fn counters_on_three_sites_merge_as_the_model(s in steps(3, counter_op())) {
        check_counter(3, &s);
    }
}
