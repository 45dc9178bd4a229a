//! Two sites running the element table's list decisions against a server
//! each (a `Vec`), with random pushes at both ends, pops (whole writes),
//! deletes, resends of the whole state, in-order delivery and collection:
//! both sites end with the same list and no metadata, and with pushes only,
//! with the model's list (every run, by stamp, the newest outermost).

use std::collections::VecDeque;

use proptest::prelude::*;

use crate::converge::merge::hash_codec::{decode_hash, encode_hash};
use crate::converge::merge::hashes::{
    Bytes, Change, HashState, Hashes, Held, Kind, LocalHash, Whole,
};
use crate::converge::merge::lists::{self, End, REST};
use crate::converge::merge::Seen;
use crate::converge::version::Stamp;

const KEY: (u32, &[u8]) = (0, b"l");
const KL: (u32, &[u8], Kind) = (0, b"l", Kind::List);

/// A server's list, read as `ElementKey` reads one (also `relisted`'s
/// tests').
#[derive(Debug, Clone, Default, PartialEq)]
pub(in crate::converge::merge) struct Server(pub(in crate::converge::merge) Vec<Bytes>);

impl LocalHash for Server {
    fn field(&self, name: &[u8]) -> Option<Bytes> {
        (name == REST && !self.0.is_empty()).then(|| lists::encode_values(&self.0))
    }
    fn fields(&self) -> Vec<(Bytes, Bytes)> {
        self.field(REST)
            .map(|v| vec![(REST.to_vec(), v)])
            .unwrap_or_default()
    }
    fn field_count(&self) -> usize {
        self.0.len()
    }
}

/// A state, or a plain delete with what its site had applied; its stamp;
/// what its site had applied when it sent it (an ack rides with it).
type Message = (Result<HashState, Seen>, Stamp, Seen);

#[derive(Default)]
struct Site {
    node: u64,
    clock: u64,
    server: Server,
    table: Hashes,
    bound: Seen,
    applied_peer: u64,
    /// What the peer had applied, as its last message here said.
    peer_known: Seen,
    inbox: VecDeque<Message>,
    /// Every run pushed here: end, stamp, values in list order.
    pushed: Vec<(End, Stamp, Vec<Bytes>)>,
    /// What pops here returned.
    popped: Vec<Bytes>,
    /// What deletes here removed (a whole write made at once elsewhere,
    /// which had not seen the delete, writes again what it holds).
    deleted: Vec<Bytes>,
    /// A whole write of this site lost to one made at once elsewhere, or
    /// took in runs some site may lack (both counted as fall-backs).
    undone: bool,
}

impl Site {
    fn applied(&self, peer: u64) -> Seen {
        [(self.node, self.clock), (peer, self.applied_peer)]
            .into_iter()
            .collect()
    }

    fn tick(&mut self) -> Stamp {
        self.clock += 1;
        Stamp::new(self.clock, self.node)
    }
}

#[derive(Debug, Clone)]
enum Step {
    Push(bool, u8),
    Pop(bool),
    DelKey,
    Deliver,
    Collect,
    Resend,
}

/// A step; pops and deletes become deliveries where `run` is told no pops.
fn step() -> impl Strategy<Value = (bool, Step)> {
    let s = prop_oneof![
        6 => (any::<bool>(), 1u8..4).prop_map(|(left, n)| Step::Push(left, n)),
        2 => any::<bool>().prop_map(Step::Pop),
        1 => Just(Step::DelKey),
        5 => Just(Step::Deliver),
        2 => Just(Step::Collect),
        1 => Just(Step::Resend),
    ];
    (any::<bool>(), s)
}

fn push(site: &mut Site, left: bool, n: u8, before: &Seen) -> HashState {
    let stamp = site.tick();
    let created = site.server.0.is_empty();
    let values: Vec<Bytes> = (0..n)
        .map(|i| format!("{}.{}.{i}", site.node, stamp.clock).into_bytes())
        .collect();
    let end = if left { End::Left } else { End::Right };
    match end {
        End::Left => {
            site.server.0.splice(0..0, values.iter().cloned());
        }
        End::Right => site.server.0.extend(values.iter().cloned()),
    }
    site.pushed.push((end, stamp, values.clone()));
    let run = vec![(
        lists::run_name(end, stamp),
        Change::Write(lists::encode_values(&values)),
    )];
    site.table
        .local_changes(KL, stamp, (run, false), before, created)
        .0
}

fn local(site: &mut Site, peer: u64, step: &Step) -> Option<Result<HashState, Seen>> {
    if let Step::Resend = step {
        return site.table.whole(KEY.0, KEY.1, &site.server, true).map(Ok);
    }
    let before = site.applied(peer);
    match *step {
        Step::Push(left, n) => Some(Ok(push(site, left, n, &before))),
        Step::Pop(left) => {
            if site.server.0.is_empty() {
                return None;
            }
            let stamp = site.tick();
            let popped = if left {
                site.server.0.remove(0)
            } else {
                site.server.0.pop()?
            };
            site.popped.push(popped);
            let whole = match site.server.field(REST) {
                Some(all) => Whole::Elements(Kind::List, vec![(REST.to_vec(), all)]),
                None => Whole::Absent,
            };
            whole_write(site, stamp, whole, before)
        }
        Step::DelKey => {
            let stamp = site.tick();
            site.deleted.append(&mut site.server.0);
            whole_write(site, stamp, Whole::Absent, before)
        }
        _ => None,
    }
}

fn whole_write(
    site: &mut Site,
    stamp: Stamp,
    whole: Whole,
    before: Seen,
) -> Option<Result<HashState, Seen>> {
    // A whole write that takes in runs may lose them to a newer one made at
    // once elsewhere (counted there) or have them back after a pop that
    // empties the list elsewhere (a delete keeps what it had not seen).
    let runs = site.table.get(KEY.0, KEY.1).map(Held::present_runs);
    site.undone |= runs.is_some_and(|r| !r.is_empty());
    let state = site.table.local_whole(KEY, stamp, whole, &before);
    match state {
        Some(state) => Some(Ok(state)),
        None => Some(Err(before)),
    }
}

fn deliver(to: &mut Site) {
    let Some((state, stamp, acked)) = to.inbox.pop_front() else {
        return;
    };
    to.peer_known.join(&acked);
    match state {
        Ok(state) => {
            let state = decode_hash(&encode_hash(&state)).expect("round trip");
            let w = to.table.remote(KEY, &state, &to.bound, &to.server);
            to.undone |= w.whole_undone;
            lists::apply_edit(&mut to.server.0, &w.list);
        }
        Err(applied) => match to.table.remote_delete(KEY, &applied, &to.bound, &to.server) {
            Some(w) => lists::apply_edit(&mut to.server.0, &w.list),
            None => to.server.0.clear(),
        },
    }
    to.clock = to.clock.max(stamp.clock);
    to.applied_peer = to.applied_peer.max(stamp.clock);
}

/// Every run of `sites`, the newest outermost at each end.
fn model(sites: &[Site]) -> Vec<Bytes> {
    let mut runs: Vec<_> = sites
        .iter()
        .flat_map(|s| s.pushed.iter().cloned())
        .collect();
    runs.sort_by_key(|(_, stamp, _)| *stamp);
    let mut list = Vec::new();
    for (end, _, values) in runs.iter().filter(|(e, _, _)| *e == End::Left).rev() {
        debug_assert_eq!(*end, End::Left);
        list.extend(values.iter().cloned());
    }
    for (_, _, values) in runs.iter().filter(|(e, _, _)| *e == End::Right) {
        list.extend(values.iter().cloned());
    }
    list
}

/// Collection at `site` up to what both had applied as far as it knows:
/// every change still on its way was made by a site past that bound (the
/// peer's acknowledgement came after it, on the same ordered link).
fn collect(site: &mut Site, peer: u64) {
    let bound = site.applied(peer).meet(&site.peer_known);
    site.bound.join(&bound);
    site.table.collect(&site.bound);
}

fn run(steps: Vec<(bool, Step)>, pops: bool) -> Result<(), TestCaseError> {
    let mut sites = [
        Site {
            node: 1,
            ..Site::default()
        },
        Site {
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
        let step = match step {
            Step::Pop(_) | Step::DelKey if !pops => Step::Deliver,
            step => step,
        };
        match step {
            Step::Deliver => deliver(&mut sites[me]),
            Step::Collect => {
                let peer_node = sites[peer].node;
                collect(&mut sites[me], peer_node);
            }
            step => {
                let peer_node = sites[peer].node;
                if let Some(state) = local(&mut sites[me], peer_node, &step) {
                    let stamp = Stamp::new(sites[me].clock, sites[me].node);
                    let acked = sites[me].applied(peer_node);
                    sites[peer].inbox.push_back((state, stamp, acked));
                }
            }
        }
    }
    prop_assert_eq!(&sites[0].server, &sites[1].server, "the sites differ");
    if !sites.iter().any(|s| s.undone) {
        check_history(&sites)?;
    }
    if !pops {
        prop_assert_eq!(&sites[0].server.0, &model(&sites), "not the model's list");
    }
    // Each site learns what the other applied (an ack each way), then
    // collects.
    let known = [sites[0].applied(2), sites[1].applied(1)];
    sites[0].peer_known.join(&known[1]);
    sites[1].peer_known.join(&known[0]);
    collect(&mut sites[0], 2);
    collect(&mut sites[1], 1);
    for s in &sites {
        prop_assert!(s.table.is_empty(), "metadata left at rest: {:?}", s.table);
    }
    Ok(())
}

/// With no whole write lost to another or taking in runs some site lacked
/// (both counted as fall-backs, or a delete's documented rule): every push
/// is there once, in the order its site made it, unless a pop returned it
/// or a delete removed it, and no popped one is.
fn check_history(sites: &[Site; 2]) -> Result<(), TestCaseError> {
    let list = &sites[0].server.0;
    let mut unique = list.clone();
    unique.sort();
    unique.dedup();
    prop_assert_eq!(unique.len(), list.len(), "an element twice");
    for site in sites {
        // Each site's pushes at one end keep the order it made them in.
        for end in [End::Left, End::Right] {
            let mut made: Vec<&Bytes> = Vec::new();
            for (_, _, values) in site.pushed.iter().filter(|(e, _, _)| *e == end) {
                match end {
                    End::Right => made.extend(values),
                    End::Left => {
                        made.splice(0..0, values);
                    }
                }
            }
            let held: Vec<&Bytes> = sites[0]
                .server
                .0
                .iter()
                .filter(|v| made.contains(v))
                .collect();
            let order = |v: &&Bytes| made.iter().position(|m| m == v);
            prop_assert!(
                held.windows(2).all(|w| order(&w[0]) < order(&w[1])),
                "order"
            );
        }
    }
    let popped: Vec<&Bytes> = sites.iter().flat_map(|s| &s.popped).collect();
    let deleted: Vec<&Bytes> = sites.iter().flat_map(|s| &s.deleted).collect();
    for site in sites {
        for v in site.pushed.iter().flat_map(|(_, _, values)| values) {
            let taken = popped.contains(&v) || deleted.contains(&v);
            prop_assert!(taken || list.contains(v), "{:?} lost", v);
            prop_assert!(!popped.contains(&v) || !list.contains(v), "{:?} back", v);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn pushes_on_two_sites_end_as_the_model_s_list(
        steps in proptest::collection::vec(step(), 0..60),
    ) {
        run(steps, false)?;
    }

    #[test]
    fn pushes_pops_and_deletes_on_two_sites_end_equal(
        steps in proptest::collection::vec(step(), 0..60),
    ) {
        run(steps, true)?;
    }
}
