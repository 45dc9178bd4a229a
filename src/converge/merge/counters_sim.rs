//! The counter table on two simulated sites, as the data path drives it:
//! local increments, sets and deletes (a key outside the table ships plain,
//! with the sender's bound), FIFO links that acknowledge what they applied
//! (the bound rises and states are collected), link cuts that lose what was
//! in flight and resend each site's key afterwards, duplicates, restarts
//! (the table and the bound are durable). At the end both sites hold the
//! model's value: the newest set or delete plus every increment it had not
//! seen. Property-tested; the rest rules of `counters` (a counter held at
//! rest keeps its base's stamp, a base rebuilt from a value has seen the
//! bound) are what it checks beyond `counter`'s own tests.

use std::collections::{BTreeSet, VecDeque};

use proptest::prelude::*;

use crate::converge::merge::counter::Counter;
use crate::converge::merge::counters::{Counters, Local, Merged, Plain, PlainOutcome};
use crate::converge::merge::Seen;
use crate::converge::version::{KeyVersion, Stamp};

const KEY: &[u8] = b"c";

/// What travels from one site to the other.
#[derive(Debug, Clone)]
enum Message {
    /// The key's counter state.
    State(Counter, BTreeSet<usize>),
    /// A plain value (`None`: deleted) at its version, with the sender's
    /// bound.
    Plain(Stamp, Option<i128>, Seen, BTreeSet<usize>),
    /// The sender applied every change of the receiver up to the first
    /// clock; its own are all in the stream up to the second.
    Ack(u64, u64),
}

#[derive(Debug, Clone)]
struct Site {
    node: u64,
    clock: u64,
    counters: Counters,
    value: Option<i128>,
    version: Option<KeyVersion>,
    /// Per origin, the newest clock applied from it (its own included).
    applied: Seen,
    /// Operations (history indexes) whose effect this site holds.
    known: BTreeSet<usize>,
}

/// One operation of the history, for the model.
#[derive(Debug, Clone)]
enum Made {
    Increment(i128),
    /// A set (`Some`) or delete, having seen these operations.
    Base(Stamp, Option<i128>, BTreeSet<usize>),
}

#[derive(Debug, Clone)]
enum Step {
    Increment(usize, i8),
    Set(usize, i8),
    Delete(usize),
    Deliver(usize),
    Ack(usize),
    Duplicate(usize, usize),
    Cut,
    Restart(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..2usize, -3i8..5).prop_map(|(s, d)| Step::Increment(s, d)),
        1 => (0..2usize, 0i8..9).prop_map(|(s, v)| Step::Set(s, v)),
        1 => (0..2usize).prop_map(Step::Delete),
        6 => (0..2usize).prop_map(Step::Deliver),
        3 => (0..2usize).prop_map(Step::Ack),
        1 => (0..2usize, any::<usize>()).prop_map(|(s, i)| Step::Duplicate(s, i)),
        1 => Just(Step::Cut),
        1 => (0..2usize).prop_map(Step::Restart),
    ]
}

struct World {
    sites: [Site; 2],
    /// `links[i]`: from site `i` to the other, in order.
    links: [VecDeque<(Message, u64)>; 2],
    /// What each site received, for duplicates.
    delivered: [Vec<Message>; 2],
    history: Vec<Made>,
}

impl World {
    fn new() -> Self {
        let site = |node| Site {
            node,
            clock: 0,
            counters: Counters::default(),
            value: None,
            version: None,
            applied: Seen::new(),
            known: BTreeSet::new(),
        };
        Self {
            sites: [site(1), site(2)],
            links: [VecDeque::new(), VecDeque::new()],
            delivered: [Vec::new(), Vec::new()],
            history: Vec::new(),
        }
    }

    fn stamp(&mut self, i: usize) -> Stamp {
        let s = &mut self.sites[i];
        s.clock += 1;
        s.applied.raise(s.node, s.clock);
        Stamp::new(s.clock, s.node)
    }

    /// What site `i` ships of the key now.
    fn shipment(&self, i: usize) -> Message {
        let s = &self.sites[i];
        match s.counters.get(0, KEY) {
            Some(c) => Message::State(c.into_owned(), s.known.clone()),
            None => {
                let stamp = s.version.map_or(Stamp::ZERO, KeyVersion::stamp);
                let bound = s.counters.bound().clone();
                Message::Plain(stamp, s.value, bound, s.known.clone())
            }
        }
    }

    /// Ships the key, with the sender's coverage of its own changes (all
    /// of them are in its stream up to here).
    fn ship(&mut self, i: usize) {
        let m = self.shipment(i);
        if matches!(m, Message::State(..)) {
            self.sites[i].counters.sent(0, KEY);
        }
        let coverage = self.sites[i].clock;
        self.links[i].push_back((m, coverage));
    }

    fn increment(&mut self, i: usize, delta: i128) {
        let stamp = self.stamp(i);
        let op = self.history.len();
        self.history.push(Made::Increment(delta));
        let s = &mut self.sites[i];
        let after = s.value.unwrap_or(0) + delta;
        let agrees = s
            .counters
            .local_increment(0, KEY, stamp, delta, after, s.version);
        assert!(agrees, "the state held disagrees with the value");
        s.value = Some(after);
        s.version = Some(KeyVersion::Live(stamp));
        s.known.insert(op);
        self.ship(i);
    }

    fn base(&mut self, i: usize, value: Option<i128>) {
        let stamp = self.stamp(i);
        let op = self.history.len();
        let s = &mut self.sites[i];
        self.history.push(Made::Base(stamp, value, s.known.clone()));
        s.counters.local_write(0, KEY, stamp, Ok(value));
        s.value = value;
        s.version = Some(match value {
            Some(_) => KeyVersion::Live(stamp),
            None => KeyVersion::Deleted { stamp, gc_after: 0 },
        });
        s.known.insert(op);
        self.ship(i);
    }

    fn settle(s: &mut Site, merged: Merged) {
        if let Merged::Value { value, version, .. } = merged {
            s.value = value;
            s.version = Some(match value {
                Some(_) => KeyVersion::Live(version),
                None => KeyVersion::Deleted {
                    stamp: version,
                    gc_after: 0,
                },
            });
        }
    }

    fn apply(&mut self, to: usize, m: &Message) {
        let s = &mut self.sites[to];
        match m {
            Message::State(c, known) => {
                let stamp = s.version.map_or(Stamp::ZERO, KeyVersion::stamp);
                let local = match s.value {
                    Some(v) => Local::Integer(v, stamp),
                    None => Local::Absent(stamp),
                };
                let merged = s.counters.remote_state(0, KEY, c, || local);
                Self::settle(s, merged);
                s.known.extend(known);
                s.clock = s.clock.max(c.newest().clock);
            }
            Message::Plain(stamp, value, bound, known) => {
                let plain = value.map_or(Plain::Deleted, Plain::Integer);
                match s.counters.remote_plain(0, KEY, *stamp, plain, Some(bound)) {
                    PlainOutcome::Merged(m) => Self::settle(s, m),
                    PlainOutcome::NotHeld => {
                        let held = s.version.map_or(Stamp::ZERO, KeyVersion::stamp);
                        if *stamp > held {
                            Self::settle(
                                s,
                                Merged::Value {
                                    value: *value,
                                    base_won: true,
                                    version: *stamp,
                                    type_changed: false,
                                },
                            );
                        }
                    }
                    PlainOutcome::WholeKey => unreachable!("integers only"),
                }
                s.known.extend(known);
                s.clock = s.clock.max(stamp.clock);
            }
            Message::Ack(mine, theirs) => {
                let (me, peer) = (s.node, 3 - s.node);
                s.counters.raise_bound(me, *mine);
                s.counters.raise_bound(peer, *theirs);
                s.counters.collect();
            }
        }
    }

    fn deliver(&mut self, from: usize) {
        let Some((m, coverage)) = self.links[from].pop_front() else {
            return;
        };
        let to = 1 - from;
        self.apply(to, &m);
        // What the sender had made when it sent this is applied, in order.
        let from_node = self.sites[from].node;
        self.sites[to].applied.raise(from_node, coverage);
        self.delivered[to].push(m);
    }

    /// Site `i` acknowledges: what it applied of the other, and its own
    /// changes, all in its stream before this.
    fn ack(&mut self, i: usize) {
        let s = &self.sites[i];
        let other = self.sites[1 - i].node;
        let m = Message::Ack(s.applied.clock(other), s.applied.clock(s.node));
        let coverage = s.clock;
        self.links[i].push_back((m, coverage));
    }

    /// The links drop what was in flight; each site sends its key again.
    fn reconnect(&mut self) {
        self.links = [VecDeque::new(), VecDeque::new()];
        for i in 0..2 {
            self.ship(i);
        }
    }

    fn run(&mut self, step: &Step) {
        match *step {
            Step::Increment(i, d) => self.increment(i, i128::from(d)),
            Step::Set(i, v) => self.base(i, Some(i128::from(v))),
            Step::Delete(i) => self.base(i, None),
            Step::Deliver(from) => self.deliver(from),
            Step::Ack(i) => self.ack(i),
            Step::Duplicate(to, pick) => {
                let got = &self.delivered[to];
                if let Some(m) = (!got.is_empty()).then(|| got[pick % got.len()].clone()) {
                    if !matches!(m, Message::Ack(..)) {
                        self.apply(to, &m);
                    }
                }
            }
            Step::Cut | Step::Restart(_) => self.reconnect(),
        }
    }

    /// The model's value over the whole history.
    fn model(&self) -> Option<i128> {
        let newest = self
            .history
            .iter()
            .filter_map(|m| match m {
                Made::Base(stamp, value, seen) => Some((stamp, value, seen)),
                Made::Increment(_) => None,
            })
            .max_by_key(|(stamp, ..)| **stamp);
        let empty = BTreeSet::new();
        let (base, seen) = newest.map_or((None, &empty), |(_, v, seen)| (*v, seen));
        let mut unseen = self
            .history
            .iter()
            .enumerate()
            .filter(|(i, _)| !seen.contains(i))
            .filter_map(|(_, m)| match m {
                Made::Increment(d) => Some(*d),
                Made::Base(..) => None,
            })
            .peekable();
        if base.is_none() && unseen.peek().is_none() {
            return None;
        }
        Some(unseen.fold(base.unwrap_or(0), |a, d| a + d))
    }

    /// Delivers and acknowledges until nothing moves.
    fn drain(&mut self) {
        for _ in 0..4 {
            for i in 0..2 {
                while !self.links[i].is_empty() {
                    self.deliver(i);
                }
            }
            for i in 0..2 {
                self.ack(i);
            }
        }
        for i in 0..2 {
            while !self.links[i].is_empty() {
                self.deliver(i);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn two_sites_end_at_the_model_through_cuts_duplicates_and_collection(
        steps in proptest::collection::vec(step(), 0..120)
    ) {
        let mut w = World::new();
        for s in &steps {
            w.run(s);
        }
        w.drain();
        let want = w.model();
        for (i, s) in w.sites.iter().enumerate() {
            prop_assert_eq!(s.value, want, "site {} of {:?}", i, w.history);
            prop_assert_eq!(s.counters.live_len(), 0, "site {} keeps metadata", i);
        }
    }
}
