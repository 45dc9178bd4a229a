//! Two sites running the element table's decisions against a server each
//! (a map), with random local changes, in-order delivery and collection,
//! and a model that keeps every site's full [`Elements`] state: every site
//! ends holding the model's merged value (property test), for a hash, a
//! set (every value empty) and a sorted set (values are scores).

use std::collections::{BTreeMap, VecDeque};

use proptest::prelude::*;

use crate::converge::merge::counters::integer_of;
use crate::converge::merge::hash_codec::{decode_hash, encode_hash};
use crate::converge::merge::hashes::{
    add_increments, counts, score_bytes, score_of, Bytes, Change, HashState, Hashes, Kind,
    LocalHash, Whole, Writes,
};
use crate::converge::merge::{Elements, Seen};
use crate::converge::version::Stamp;

const KEY: (u32, &[u8]) = (0, b"h");

/// A server's hash (also the unit tests' `hashes_tests`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(in crate::converge::merge) struct Server(pub(in crate::converge::merge) BTreeMap<Bytes, Bytes>);

impl LocalHash for Server {
    fn field(&self, name: &[u8]) -> Option<Bytes> {
        self.0.get(name).cloned()
    }
    fn fields(&self) -> Vec<(Bytes, Bytes)> {
        self.0.iter().map(|(f, v)| (f.clone(), v.clone())).collect()
    }
    fn field_count(&self) -> usize {
        self.0.len()
    }
}

impl Server {
    /// The server after the merge's writes `w`.
    pub(in crate::converge::merge) fn written(mut self, w: &Writes) -> Self {
        self.apply(w.clone());
        self
    }

    fn apply(&mut self, w: Writes) {
        if w.clear {
            self.0.clear();
        }
        for (f, v) in w.set {
            self.0.insert(f, v);
        }
        for f in w.del {
            self.0.remove(&f);
        }
    }
}

/// What travels: the state (or a plain delete, with what its site had
/// applied), and the model's whole state at the sender.
type Message = (Result<HashState, Seen>, Elements<Bytes>, Stamp);

#[derive(Default)]
struct Site {
    kind: Kind,
    node: u64,
    clock: u64,
    server: Server,
    table: Hashes,
    bound: Seen,
    applied_peer: u64,
    inbox: VecDeque<Message>,
    model: Elements<Bytes>,
    /// The stamp of this site's plain delete of the key (not held then),
    /// while it is the key's version: `note_own_delete` of
    /// `receive::apply_fields` records it once a state of the key arrives.
    own_delete: Option<Stamp>,
}

impl Site {
    fn applied(&self, peer: u64) -> Seen {
        [(self.node, self.clock), (peer, self.applied_peer)]
            .into_iter()
            .collect()
    }

    /// The value written for `v` in a key of the site's kind: a number
    /// increments add to, or (`v` of 6 and up) one they cannot.
    fn value(&self, v: u8) -> Bytes {
        match self.kind {
            Kind::Hash if v < 6 => v.to_string().into_bytes(),
            Kind::Hash => vec![b'x', v],
            Kind::Set | Kind::List => Vec::new(),
            Kind::SortedSet if v < 6 => score_bytes(f64::from(v)),
            Kind::SortedSet => score_bytes(f64::from(v) - 3.5),
        }
    }

    /// The value `current` (`None`: absent) incremented by `delta`, as the
    /// server would leave it; `None` when the server refuses (not a
    /// number).
    fn incremented(&self, current: Option<&Bytes>, delta: i128) -> Option<Bytes> {
        match self.kind {
            Kind::Hash => {
                let x = current.map_or(Some(0), |v| integer_of(v))?;
                Some((x + delta).to_string().into_bytes())
            }
            Kind::SortedSet => {
                let x = current.map_or(Some(0.0), |v| score_of(v))?;
                Some(score_bytes(x + delta as f64))
            }
            Kind::Set | Kind::List => None,
        }
    }

    /// The model's write of `value` to `f` stamped `stamp` (`before`: what
    /// the site had applied): a number removes what the site had seen.
    fn model_write(&mut self, f: u8, stamp: Stamp, value: Bytes, before: &Seen) {
        if counts(self.kind, &value) {
            let mut seen = before.clone();
            seen.join(&self.model.observed(&[f]));
            self.model.remove(&[f], &seen, &Seen::new());
        }
        self.model.write(&[f], stamp, value, &Seen::new());
    }

    /// A local change of some elements, recorded: the delta to ship.
    fn changed(
        &mut self,
        stamp: Stamp,
        changes: Vec<(Bytes, Option<Bytes>)>,
        before: &Seen,
        created: bool,
    ) -> HashState {
        let key = (KEY.0, KEY.1, self.kind);
        self.table
            .local_fields(key, stamp, (changes, false), before, created)
    }

    /// A local increment of `f` by `delta`, recorded: the delta to ship;
    /// `None` when the server refuses it (not a number).
    fn incr(
        &mut self,
        f: u8,
        delta: i128,
        stamp: Stamp,
        before: &Seen,
        created: bool,
    ) -> Option<HashState> {
        let after = self.incremented(self.server.0.get(&vec![f]), delta)?;
        self.own_delete = None;
        self.server.0.insert(vec![f], after.clone());
        let change = vec![(vec![f], Change::Increment(delta, after.clone()))];
        let key = (KEY.0, KEY.1, self.kind);
        let (state, written) =
            self.table
                .local_changes(key, stamp, (change, false), before, created);
        if written > 0 {
            self.model_write(f, stamp, after, before);
        } else {
            self.model.increment(&[f], stamp, delta, &Seen::new());
        }
        Some(state)
    }

    fn tick(&mut self) -> Stamp {
        self.clock += 1;
        Stamp::new(self.clock, self.node)
    }
}

#[derive(Debug, Clone)]
enum Step {
    Set(u8, u8),
    Incr(u8, i8),
    Del(u8),
    DelKey,
    Rewrite(u8),
    Deliver,
    Collect,
    Resend,
}

fn step() -> impl Strategy<Value = (bool, Step)> {
    let s = prop_oneof![
        4 => (0u8..4, 0u8..8).prop_map(|(f, v)| Step::Set(f, v)),
        3 => (0u8..4, -3i8..4).prop_map(|(f, d)| Step::Incr(f, d)),
        2 => (0u8..4).prop_map(Step::Del),
        1 => Just(Step::DelKey),
        1 => (0u8..8).prop_map(Step::Rewrite),
        5 => Just(Step::Deliver),
        1 => Just(Step::Collect),
        1 => Just(Step::Resend),
    ];
    (any::<bool>(), s)
}

fn local(site: &mut Site, peer: u64, step: &Step) -> Option<Result<HashState, Seen>> {
    if let Step::Resend = step {
        // A catch-up: the held key's whole state, again.
        return site.table.whole(KEY.0, KEY.1, &site.server, true).map(Ok);
    }
    let before = site.applied(peer);
    let stamp = site.tick();
    let created = site.server.0.is_empty();
    match *step {
        Step::Set(f, v) => {
            site.own_delete = None;
            let value = site.value(v);
            site.server.0.insert(vec![f], value.clone());
            site.model_write(f, stamp, value.clone(), &before);
            let changes = vec![(vec![f], Some(value))];
            Some(Ok(site.changed(stamp, changes, &before, created)))
        }
        Step::Incr(f, d) => site.incr(f, i128::from(d), stamp, &before, created).map(Ok),
        Step::Del(f) => {
            site.server.0.remove(&vec![f])?;
            let mut seen = before.clone();
            seen.join(&site.model.observed(&[f]));
            seen.observe(stamp);
            site.model.remove(&[f], &seen, &Seen::new());
            let changes = vec![(vec![f], None)];
            Some(Ok(site.changed(stamp, changes, &before, created)))
        }
        Step::DelKey | Step::Rewrite(_) => {
            let mut seen = before.clone();
            seen.join(&site.model.observed_all());
            site.model.remove_all(&seen, &Seen::new());
            let whole = if let Step::Rewrite(v) = *step {
                let new = site.value(v);
                for value in site.server.0.values_mut() {
                    *value = new.clone();
                }
                site.server.0.insert(vec![9], new);
                for (f, value) in &site.server.0 {
                    site.model.write(f, stamp, value.clone(), &Seen::new());
                }
                Whole::Elements(site.kind, site.server.fields())
            } else {
                site.server.0.clear();
                Whole::Absent
            };
            site.own_delete = None;
            match site.table.local_whole(KEY, stamp, whole, &before) {
                Some(state) => Some(Ok(state)),
                None => {
                    site.own_delete = Some(stamp);
                    Some(Err(before))
                }
            }
        }
        _ => None,
    }
}

fn deliver(to: &mut Site) {
    let Some((state, model, stamp)) = to.inbox.pop_front() else {
        return;
    };
    let own_delete = to.own_delete.take();
    let w = match state {
        Ok(state) => {
            if let Some(deleted) = own_delete.filter(|_| !to.table.contains(KEY.0, KEY.1)) {
                // What it applied since of the key would have brought it back.
                let mut seen: Seen = [(to.node, deleted.clock - 1), (stamp.node, to.applied_peer)]
                    .into_iter()
                    .collect();
                seen.observe(deleted);
                to.table.note_delete(KEY, &seen);
            }
            let state = decode_hash(&encode_hash(&state)).expect("round trip");
            to.table.remote(KEY, &state, &to.bound, &to.server)
        }
        Err(applied) => {
            // The newer delete is the key's version.
            to.own_delete = own_delete.filter(|own| *own > stamp);
            to.table
                .remote_delete(KEY, &applied, &to.bound, &to.server)
                .unwrap_or(Writes {
                    clear: true,
                    ..Writes::default()
                })
        }
    };
    to.server.apply(w);
    to.clock = to.clock.max(stamp.clock);
    to.applied_peer = to.applied_peer.max(stamp.clock);
    to.model.merge(&model, &Seen::new());
}

/// The value the model's state of a `kind` key holds.
fn merged(model: &Elements<Bytes>, kind: Kind) -> BTreeMap<Bytes, Bytes> {
    let add = |v: Option<&Bytes>, sum| add_increments(kind, v, sum);
    model
        .values_counted(&add)
        .into_iter()
        .map(|(f, v)| (f.to_vec(), v))
        .collect()
}

fn run(kind: Kind, steps: Vec<(bool, Step)>) -> Result<(), TestCaseError> {
    let mut sites = [
        Site {
            kind,
            node: 1,
            ..Site::default()
        },
        Site {
            kind,
            node: 2,
            ..Site::default()
        },
    ];
    let all = steps.iter().cloned().chain(
        std::iter::repeat_n((true, Step::Deliver), 64)
            .chain(std::iter::repeat_n((false, Step::Deliver), 64)),
    );
    for (on_a, step) in all {
        let (me, peer) = if on_a { (0, 1) } else { (1, 0) };
        match step {
            Step::Deliver => deliver(&mut sites[me]),
            Step::Collect if sites.iter().all(|s| s.inbox.is_empty()) => {
                let bound = sites[0].applied(2).meet(&sites[1].applied(1));
                for s in &mut sites {
                    s.bound.join(&bound);
                    s.table.collect(&s.bound);
                    // Acknowledged: the tombstone goes.
                    s.own_delete = s.own_delete.filter(|d| !s.bound.covers(*d));
                }
            }
            Step::Collect => {}
            step => {
                let peer_node = sites[peer].node;
                if let Some(state) = local(&mut sites[me], peer_node, &step) {
                    let sent = (
                        state,
                        sites[me].model.clone(),
                        Stamp::new(sites[me].clock, sites[me].node),
                    );
                    sites[peer].inbox.push_back(sent);
                }
            }
        }
    }
    let model = merged(&sites[0].model, kind);
    let model_b = merged(&sites[1].model, kind);
    prop_assert_eq!(&model, &model_b, "the model itself converged");
    prop_assert_eq!(&sites[0].server.0, &model, "site 1");
    prop_assert_eq!(&sites[1].server.0, &model, "site 2");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn two_sites_end_with_the_model_s_merged_hash(steps in proptest::collection::vec(step(), 0..60)) {
        run(Kind::Hash, steps)?;
    }

    #[test]
    fn two_sites_end_with_the_model_s_merged_set_and_sorted_set(
        steps in proptest::collection::vec(step(), 0..60),
        sorted in any::<bool>(),
    ) {
        run(if sorted { Kind::SortedSet } else { Kind::Set }, steps)?;
    }
}
