//! A simulated network of sites for the merge property tests: FIFO
//! channels between every pair (each site ships its own changes, and an
//! acknowledgement after them, as the link does), duplicates of what was
//! delivered, whole states handed from one site to another (catch-up and
//! full sync), and collection at the bound every site has provably passed.
//! Each site also keeps the set of operations it knows, for the model.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::converge::merge::seen::Seen;
use crate::converge::version::Stamp;

/// A merge state the network moves.
pub trait Replica: Clone + Default {
    /// What one operation ships.
    type Fragment: Clone + std::fmt::Debug;
    /// Applies a fragment from another site.
    fn apply(&mut self, fragment: &Self::Fragment, bound: &Seen);
    /// Takes in another site's whole state.
    fn merge(&mut self, other: &Self, bound: &Seen);
    /// Drops what no site can conflict with.
    fn collect(&mut self, bound: &Seen);
    /// [`Replica::collect`], told also `settled`: the least of the bounds
    /// every site reported reaching (what every site collected).
    fn collect_settled(&mut self, bound: &Seen, _settled: &Seen) {
        self.collect(bound);
    }
}

/// What travels on a channel: an operation's fragment (none for an
/// acknowledgement), or the sender's whole state with the operations it
/// knows and its clock (a catch-up sent in turn with the changes), and
/// what the sender had applied when it sent.
#[derive(Debug, Clone)]
struct Message<F, R> {
    op: Option<(usize, Stamp, F)>,
    state: Option<(R, BTreeSet<usize>, u64)>,
    sender_applied: Seen,
    sender_bound: Seen,
}

/// A channel's messages, oldest first.
type Channel<R> = VecDeque<Message<<R as Replica>::Fragment, R>>;

/// One site.
#[derive(Debug, Clone)]
pub struct Site<R: Replica> {
    /// Its state.
    pub state: R,
    /// Operations (indexes into the test's history) it knows.
    pub known: BTreeSet<usize>,
    /// Per origin, what it applied from that origin's own channel (and all
    /// of its own): every change of the origin up to the clock.
    pub applied: Seen,
    /// The collection bound it reached.
    pub bound: Seen,
    clock: u64,
    node: u64,
    /// What each other site had applied, from its latest message here.
    peers_applied: BTreeMap<usize, Seen>,
    /// The bound each other site reached, from its latest message here.
    peers_bound: BTreeMap<usize, Seen>,
    delivered: Vec<Message<R::Fragment, R>>,
}

/// Every site and channel.
#[derive(Debug)]
pub struct Network<R: Replica> {
    /// The sites, by index; site `i` is node `i + 1`.
    pub sites: Vec<Site<R>>,
    channels: BTreeMap<(usize, usize), Channel<R>>,
}

impl<R: Replica> Network<R> {
    /// `n` sites holding `initial`, which every site holds at rest.
    pub fn new(n: usize, initial: R) -> Self {
        let sites = (0..n)
            .map(|i| Site {
                state: initial.clone(),
                known: BTreeSet::new(),
                applied: Seen::new(),
                bound: Seen::new(),
                clock: 0,
                node: i as u64 + 1,
                peers_applied: BTreeMap::new(),
                peers_bound: BTreeMap::new(),
                delivered: Vec::new(),
            })
            .collect();
        Self {
            sites,
            channels: BTreeMap::new(),
        }
    }

    /// A fresh stamp at `site` (its hybrid clock moves past all it knows).
    pub fn stamp(&mut self, site: usize) -> Stamp {
        let s = &mut self.sites[site];
        s.clock += 1;
        let stamp = Stamp::new(s.clock, s.node);
        s.applied.observe(stamp);
        stamp
    }

    /// Records operation `op` as made at `site` and ships its fragment to
    /// every other site.
    pub fn ship(&mut self, site: usize, op: usize, stamp: Stamp, fragment: R::Fragment) {
        self.sites[site].known.insert(op);
        self.send(site, Some((op, stamp, fragment)));
    }

    /// An acknowledgement from `site` to every other site (it carries what
    /// `site` applied, after everything it shipped before).
    pub fn acknowledge(&mut self, site: usize) {
        self.send(site, None);
    }

    fn send(&mut self, site: usize, op: Option<(usize, Stamp, R::Fragment)>) {
        let message = self.message(site, op, None);
        for to in 0..self.sites.len() {
            if to != site {
                self.channels
                    .entry((site, to))
                    .or_default()
                    .push_back(message.clone());
            }
        }
    }

    fn message(
        &self,
        site: usize,
        op: Option<(usize, Stamp, R::Fragment)>,
        state: Option<(R, BTreeSet<usize>, u64)>,
    ) -> Message<R::Fragment, R> {
        Message {
            op,
            state,
            sender_applied: self.sites[site].applied.clone(),
            sender_bound: self.sites[site].bound.clone(),
        }
    }

    /// Sends `from`'s whole state to `to` in turn with its changes: it
    /// arrives after what `from` sent before, and `to` may have moved on
    /// by then (a catch-up that a third site's changes overtake).
    pub fn sync_in_turn(&mut self, from: usize, to: usize) {
        let f = &self.sites[from];
        let state = Some((f.state.clone(), f.known.clone(), f.clock));
        let message = self.message(from, None, state);
        self.channels
            .entry((from, to))
            .or_default()
            .push_back(message);
    }

    /// Delivers the oldest message from `from` to `to`, if any.
    pub fn deliver(&mut self, from: usize, to: usize) {
        let Some(message) = self
            .channels
            .get_mut(&(from, to))
            .and_then(VecDeque::pop_front)
        else {
            return;
        };
        let site = &mut self.sites[to];
        if let Some((op, stamp, fragment)) = &message.op {
            site.state.apply(fragment, &site.bound);
            site.known.insert(*op);
            site.applied.observe(*stamp);
            site.clock = site.clock.max(stamp.clock);
        }
        if let Some((state, known, clock)) = &message.state {
            site.state.merge(state, &site.bound);
            site.known.extend(known);
            site.clock = site.clock.max(*clock);
        }
        site.peers_applied
            .insert(from, message.sender_applied.clone());
        site.peers_bound.insert(from, message.sender_bound.clone());
        site.delivered.push(message);
    }

    /// Delivers again a message `to` already had (a resend).
    pub fn duplicate(&mut self, to: usize, pick: usize) {
        let site = &mut self.sites[to];
        if site.delivered.is_empty() {
            return;
        }
        let message = &site.delivered[pick % site.delivered.len()];
        if let Some((_, _, fragment)) = &message.op {
            site.state.apply(fragment, &site.bound);
        }
        if let Some((state, _, _)) = &message.state {
            site.state.merge(state, &site.bound);
        }
    }

    /// Hands `from`'s whole state to `to` (catch-up, full sync).
    pub fn sync(&mut self, from: usize, to: usize) {
        let (state, known, clock) = {
            let f = &self.sites[from];
            (f.state.clone(), f.known.clone(), f.clock)
        };
        let site = &mut self.sites[to];
        site.state.merge(&state, &site.bound);
        site.known.extend(known);
        site.clock = site.clock.max(clock);
    }

    /// Collects at `site` at the bound every site has provably passed: the
    /// least of what each had applied, as its latest message here says
    /// (its earlier messages all arrived first).
    pub fn collect(&mut self, site: usize) {
        let n = self.sites.len();
        let s = &mut self.sites[site];
        let mut bound = s.applied.clone();
        for other in (0..n).filter(|&o| o != site) {
            bound = bound.meet(s.peers_applied.get(&other).unwrap_or(&Seen::new()));
        }
        s.bound.join(&bound);
        let mut settled = s.bound.clone();
        for other in (0..n).filter(|&o| o != site) {
            settled = settled.meet(s.peers_bound.get(&other).unwrap_or(&Seen::new()));
        }
        s.state.collect_settled(&s.bound, &settled);
    }

    /// Delivers everything still on a channel.
    pub fn drain(&mut self) {
        let pairs: Vec<_> = self.channels.keys().copied().collect();
        for (from, to) in pairs {
            while self
                .channels
                .get(&(from, to))
                .is_some_and(|c| !c.is_empty())
            {
                self.deliver(from, to);
            }
        }
    }
}
