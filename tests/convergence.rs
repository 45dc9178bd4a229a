//! Convergence: concurrent conflicting writes, partitions, crashes and
//! restarts end with both masters identical (DEBUG DIGEST), deleted keys
//! stay deleted, and writes made during an outage reach the other side.

mod common;

use std::time::Duration;

use common::{heal, wait_until, Node, Pair};
use redis::Commands;

const SETTLE: Duration = Duration::from_secs(30);

/// xorshift64: a small deterministic generator per seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One pipeline of random writes of every kind to a small shared keyspace.
fn random_writes(node: &Node, seed: u64, ops: usize) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut c = node.conn();
    let mut p = redis::pipe();
    for _ in 0..ops {
        let k = rng.below(8);
        let v = rng.below(1000);
        match rng.below(10) {
            0 => p.cmd("SET").arg(format!("s{k}")).arg(v),
            1 => p
                .cmd("HSET")
                .arg(format!("h{k}"))
                .arg(format!("f{}", v % 4))
                .arg(v),
            2 => p.cmd("RPUSH").arg(format!("l{k}")).arg(v),
            3 => p.cmd("SADD").arg(format!("set{k}")).arg(v % 16),
            4 => p
                .cmd("ZADD")
                .arg(format!("z{k}"))
                .arg(v)
                .arg(format!("m{}", v % 8)),
            5 => p.cmd("INCR").arg(format!("c{k}")),
            6 => p
                .cmd("EXPIRE")
                .arg(format!("s{k}"))
                .arg(1000 + rng.below(1000)),
            7 => p.cmd("DEL").arg(format!("h{k}")).arg(format!("l{k}")),
            8 => p.cmd("DEL").arg(format!("s{k}")).arg(format!("z{k}")),
            _ => p.cmd("SET").arg(format!("s{k}")).arg(v).arg("EX").arg(5000),
        };
        p.ignore();
    }
    let _: () = p.query(&mut c).unwrap();
}

fn conflicts(pair: &Pair) -> u64 {
    pair.a.stat("conflicts_discarded") + pair.b.stat("conflicts_discarded")
}

#[test]
fn concurrent_conflicting_writes_converge_for_many_seeds() {
    let pair = Pair::start();
    for seed in 1..=12u64 {
        let (a, b) = (&pair.a, &pair.b);
        std::thread::scope(|s| {
            for round in 0..4 {
                s.spawn(move || random_writes(a, seed * 100 + round, 150));
                s.spawn(move || random_writes(b, seed * 1000 + round, 150));
            }
        });
        let digest = pair.wait_converged(SETTLE);
        assert_ne!(digest, "0".repeat(40), "seed {seed}: empty keyspace");
        // Absolute expiries agree too (DIGEST covers them; check one directly).
        let ttl_a: i64 = redis::cmd("PEXPIRETIME")
            .arg("s1")
            .query(&mut pair.a.conn())
            .unwrap();
        let ttl_b: i64 = redis::cmd("PEXPIRETIME")
            .arg("s1")
            .query(&mut pair.b.conn())
            .unwrap();
        assert_eq!(ttl_a, ttl_b, "seed {seed}");
    }
    // Both sides wrote the same keys at the same time: some lost.
    assert!(conflicts(&pair) > 0, "no conflict was resolved");
    // Acknowledged tombstones are collected.
    assert!(wait_until(SETTLE, || pair.a.stat("tombstones")
        + pair.b.stat("tombstones")
        == 0));
}

#[test]
fn the_newer_write_wins_on_both_nodes() {
    let pair = Pair::start();
    // Cut the link, write the same key on both sides, B later.
    cut(&pair);
    let _: () = pair.a.conn().set("k", "from-a").unwrap();
    let _: () = pair.a.conn().set("only-a", "1").unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let _: () = pair.b.conn().set("k", "from-b").unwrap();
    heal(&pair);
    pair.wait_converged(SETTLE);
    let on_a: String = pair.a.conn().get("k").unwrap();
    assert_eq!(on_a, "from-b");
    let only: String = pair.b.conn().get("only-a").unwrap();
    assert_eq!(only, "1");
    // Every change was acknowledged: nothing left to resend.
    assert!(
        wait_until(SETTLE, || pair.a.stat("lag_entries") == 0
            && pair.b.stat("lag_entries") == 0),
        "a={:?}\nb={:?}",
        pair.a.status(),
        pair.b.status()
    );
}

fn cut(pair: &Pair) {
    // Port 1: no listener over TCP or rdma_cm (a free ephemeral port on
    // loopback can be a node's listener on another address).
    for n in [&pair.a, &pair.b] {
        n.set_peer_port("1");
    }
    assert!(wait_until(SETTLE, || pair.a.status()["link"] != "up"
        && pair.b.status()["link"] != "up"));
}

fn exists(node: &Node, key: &str) -> bool {
    node.conn().exists(key).unwrap()
}

#[test]
fn partition_heals_with_deletes_kept_and_outage_writes_delivered() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    for i in 0..100 {
        let _: () = a.set(format!("k{i}"), "base").unwrap();
    }
    pair.wait_converged(SETTLE);
    let full_before = pair.a.syncs_sent() + pair.b.syncs_sent();
    cut(&pair);
    let mut b = pair.b.conn();
    // B rewrites k0..k9 first; A deletes them later: the delete is newer.
    for i in 0..10 {
        let _: () = b.set(format!("k{i}"), "b-older").unwrap();
    }
    std::thread::sleep(Duration::from_millis(5));
    for i in 0..20 {
        let _: () = a.del(format!("k{i}")).unwrap();
    }
    // Writes and deletes on both sides during the outage.
    for i in 20..30 {
        let _: () = a.set(format!("k{i}"), "a-outage").unwrap();
    }
    for i in 30..40 {
        let _: () = b.del(format!("k{i}")).unwrap();
    }
    for i in 0..10 {
        let _: () = b.hset(format!("new-b{i}"), "f", i).unwrap();
    }
    // A FLUSHDB on A between two writes of B to that database: only the
    // write after it survives.
    let _: () = in_db(&pair.b, 3).set("before-flush", 1).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let _: () = redis::cmd("FLUSHDB").query(&mut in_db(&pair.a, 3)).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let _: () = in_db(&pair.b, 3).set("after-flush", 1).unwrap();
    // Not acknowledged by B: in the backlog, or shipped into a link that was
    // already broken (resent after the heal).
    assert!(pair.a.stat("lag_entries") >= 30, "{:?}", pair.a.status());
    heal(&pair);
    pair.wait_converged(SETTLE);
    for i in 0..20 {
        assert!(!exists(&pair.a, &format!("k{i}")), "k{i} resurrected on a");
        assert!(!exists(&pair.b, &format!("k{i}")), "k{i} resurrected on b");
    }
    for i in 30..40 {
        assert!(
            !exists(&pair.a, &format!("k{i}")),
            "k{i} deleted on b, still on a"
        );
    }
    let v: String = pair.b.conn().get("k25").unwrap();
    assert_eq!(v, "a-outage");
    assert!(exists(&pair.a, "new-b3"));
    for n in [&pair.a, &pair.b] {
        let mut c = in_db(n, 3);
        assert!(!c.exists::<_, bool>("before-flush").unwrap(), "{}", n.name);
        assert!(c.exists::<_, bool>("after-flush").unwrap(), "{}", n.name);
    }
    // Caught up from the backlog: a partial resync, no full sync.
    assert!(pair.a.stat("partial_syncs") >= 1 && pair.b.stat("partial_syncs") >= 1);
    assert_eq!(pair.a.syncs_sent() + pair.b.syncs_sent(), full_before);
    assert!(wait_until(SETTLE, || pair.a.stat("lag_entries") == 0
        && pair.b.stat("lag_entries") == 0
        && pair.a.stat("sync_in_progress") == 0));
}

/// A connection with database `db` selected.
fn in_db(node: &Node, db: i64) -> redis::Connection {
    let mut c = node.conn();
    let _: () = redis::cmd("SELECT").arg(db).query(&mut c).unwrap();
    c
}

/// `k` in database `db` of `node`.
fn k_in(node: &Node, db: i64) -> Option<String> {
    in_db(node, db).get("k").unwrap()
}

/// A pair whose databases 0 and 1 hold `k` = `was-0` and `was-1`, in step.
fn pair_with_two_databases() -> Pair {
    let pair = Pair::start();
    let _: () = in_db(&pair.a, 0).set("k", "was-0").unwrap();
    let _: () = in_db(&pair.a, 1).set("k", "was-1").unwrap();
    pair.wait_converged(SETTLE);
    pair
}

/// `SWAPDB 0 1` on A, once B has applied it.
fn swap_on_a_reaching_b(pair: &Pair) {
    let _: () = redis::cmd("SWAPDB")
        .arg(0)
        .arg(1)
        .query(&mut pair.a.conn())
        .unwrap();
    assert!(
        wait_until(SETTLE, || k_in(&pair.b, 0).as_deref() == Some("was-1")),
        "B never applied the swap: {:?}",
        pair.b.status()
    );
}

/// A's acks are dropped and the swap B applied is not acknowledged: the
/// link is cut and healed, A resends, then takes acks again; both nodes
/// must hold the databases swapped once.
fn resend_on_a_new_link_swaps_once(pair: &Pair) {
    cut(pair);
    heal(pair);
    // Acks still dropped: B's ack of everything it applied, sent again on
    // the new link, cannot take the swap out of A's resend. A marker
    // written now ships after the resend: once B has it, B has seen the
    // resent swap.
    let _: () = in_db(&pair.a, 2).set("marker", 1).unwrap();
    assert!(
        wait_until(SETTLE, || in_db(&pair.b, 2)
            .exists::<_, bool>("marker")
            .unwrap()),
        "{:?}",
        pair.b.status()
    );
    assert!(pair.a.stat("partial_syncs") >= 1, "{:?}", pair.a.status());
    pair.a.debug(&["DROP-ACKS", "OFF"]);
    let _: () = in_db(&pair.a, 2).set("marker", 2).unwrap();
    assert!(
        wait_until(SETTLE, || pair.a.stat("lag_entries") == 0),
        "{:?}",
        pair.a.status()
    );
    for node in [&pair.a, &pair.b] {
        assert_eq!(k_in(node, 0).as_deref(), Some("was-1"), "{}", node.name);
        assert_eq!(k_in(node, 1).as_deref(), Some("was-0"), "{}", node.name);
    }
    pair.wait_converged(SETTLE);
}

/// A's request for what it misses after a reload, resent on a new link
/// because B's ack of it never arrived, is the same loss of state: B must
/// not take it for a new one and forget the swap of A's it applied since,
/// or A's resend of that swap on the new link swaps B's databases back.
#[test]
fn a_swap_after_a_reload_resent_with_the_reloads_request_is_not_applied_twice() {
    let pair = pair_with_two_databases();
    assert!(wait_until(SETTLE, || pair.a.status()["peer_state"] == "streaming"));
    let syncs = |n: &Node| n.stat("since_syncs") + n.stat("full_syncs");
    let syncs_before = syncs(&pair.b);
    pair.a.debug(&["DROP-ACKS", "ON"]);
    let _: () = redis::cmd("DEBUG")
        .arg("RELOAD")
        .query(&mut pair.a.conn())
        .unwrap();
    // B took A's request (it answers with a sync); its ack never counts.
    assert!(
        wait_until(SETTLE, || syncs(&pair.b) > syncs_before),
        "{:?}",
        pair.b.status()
    );
    swap_on_a_reaching_b(&pair);
    assert_eq!(
        pair.a.status()["peer_state"],
        "probing",
        "request unacknowledged"
    );
    // The request, then the swap, go again on the new link.
    resend_on_a_new_link_swaps_once(&pair);
}

/// A SWAPDB the peer applied but never acknowledged (acks dropped here) is
/// resent after a reconnect and must not swap the peer's databases back.
/// (Resent with a new stamp, it was applied a second time.)
#[test]
fn a_swap_resent_after_a_reconnect_is_not_applied_twice() {
    let pair = pair_with_two_databases();
    // A's first-contact request acknowledged first: this test is about the
    // swap alone (the request resent too is the test above).
    assert!(
        wait_until(SETTLE, || pair.a.status()["peer_state"] == "streaming"),
        "{:?}",
        pair.a.status()
    );
    pair.a.debug(&["DROP-ACKS", "ON"]);
    swap_on_a_reaching_b(&pair);
    assert!(pair.a.stat("lag_entries") >= 1, "the swap was acknowledged");
    resend_on_a_new_link_swaps_once(&pair);
}

#[test]
fn crashed_node_restarted_from_its_rdb_converges_without_resurrection() {
    let mut pair = Pair::start();
    let mut a = pair.a.conn();
    let _: () = in_db(&pair.a, 3).set("seed", 1).unwrap();
    for i in 0..50 {
        let _: () = a.set(format!("k{i}"), "v").unwrap();
    }
    pair.wait_converged(SETTLE);
    let _: () = redis::cmd("SAVE").query(&mut pair.b.conn()).unwrap();
    // Written after B's snapshot: B loses it in the crash, A still has it.
    let _: () = pair.b.conn().set("late", "after-save").unwrap();
    assert!(wait_until(SETTLE, || exists(&pair.a, "late")));
    pair.b.kill();
    // While B is down: deletes of keys in B's RDB, and new writes.
    for i in 0..10 {
        let _: () = a.del(format!("k{i}")).unwrap();
    }
    for i in 0..10 {
        let _: () = a.set(format!("during{i}"), i).unwrap();
    }
    pair.b.restart();
    assert!(
        pair.b.log().contains("loaded versions of"),
        "{}",
        pair.b.log()
    );
    pair.wait_linked();
    pair.wait_converged(SETTLE);
    for i in 0..10 {
        assert!(!exists(&pair.b, &format!("k{i}")), "k{i} resurrected");
        assert!(!exists(&pair.a, &format!("k{i}")), "k{i} resurrected on a");
        assert!(exists(&pair.b, &format!("during{i}")));
    }
    let late: String = pair.b.conn().get("late").unwrap();
    assert_eq!(late, "after-save");
    // B lost state: it asked A for what it misses (a full sync, or one
    // since its watermark) and sent its own.
    assert!(pair.a.syncs_sent() >= 2, "{:?}", pair.a.status());
    assert!(pair.b.syncs_sent() >= 1, "{:?}", pair.b.status());
}

#[test]
fn remote_flushall_with_save_points_configured_applies_without_hanging() {
    // With save points, FLUSHALL writes an RDB on the spot; the versions in
    // it must not wait on the state the apply path holds.
    let pair = Pair::start();
    for n in [&pair.a, &pair.b] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("save")
            .arg("3600 1")
            .query(&mut n.conn())
            .unwrap();
    }
    let _: () = pair.a.conn().set("x", 1).unwrap();
    let _: () = in_db(&pair.a, 2).set("y", 1).unwrap();
    pair.wait_converged(SETTLE);
    let _: () = redis::cmd("FLUSHALL").query(&mut pair.a.conn()).unwrap();
    assert!(wait_until(SETTLE, || !exists(&pair.b, "x")
        && !in_db(&pair.b, 2).exists::<_, bool>("y").unwrap()));
    let pong: String = redis::cmd("PING").query(&mut pair.b.conn()).unwrap();
    assert_eq!(pong, "PONG");
    pair.wait_converged(SETTLE);
}

#[test]
fn a_local_write_is_stamped_before_a_remote_entry_applied_in_the_same_iteration() {
    // A sleeps; meanwhile B writes k and a client queues FLUSHALL on A. When
    // A wakes, its next event-loop iteration runs FLUSHALL and applies B's k
    // together: the FLUSHALL must be stamped before k is applied, or A keeps
    // k while B (receiving a FLUSHALL stamped after k) deletes it.
    let pair = Pair::start();
    for round in 0..3 {
        let a_port = pair.a.port;
        // Connected before A sleeps, so that its FLUSHALL is read in the
        // same poll as the wake-up of the apply path.
        let mut flusher = pair.a.conn();
        let sleeper = std::thread::spawn(move || {
            let client = redis::Client::open(format!("redis://127.0.0.1:{a_port}/")).unwrap();
            let mut c = client.get_connection().unwrap();
            let _: () = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg("0.4")
                .query(&mut c)
                .unwrap();
        });
        std::thread::sleep(Duration::from_millis(100));
        let _: () = pair.b.conn().set(format!("k{round}"), "from-b").unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let _: () = redis::cmd("FLUSHALL").query(&mut flusher).unwrap();
        sleeper.join().unwrap();
        pair.wait_converged(SETTLE);
    }
}

#[test]
fn tombstones_sent_in_a_full_sync_are_collected() {
    let pa = common::free_port();
    let pb = common::free_port();
    let a = Node::start("a", common::module_args(pa, pb, &[]));
    let _: () = a.conn().set("k", 1).unwrap();
    let _: () = a.conn().del("k").unwrap();
    assert!(wait_until(SETTLE, || a.stat("tombstones") == 1));
    let b = Node::start("b", common::module_args(pb, pa, &[]));
    assert!(wait_until(SETTLE, || b.status()["link"] == "up"));
    // B applies the tombstone and acknowledges it; A then lets it go.
    assert!(
        wait_until(SETTLE, || a.stat("tombstones") == 0),
        "{:?}",
        a.status()
    );
}

#[test]
fn a_transaction_with_flushall_and_save_points_ships_whole() {
    // With save points, FLUSHALL saves on the spot, in the middle of the
    // transaction; pending changes ship before a save, but never half a
    // transaction: B must never see the flush without the write after it.
    let pair = Pair::start();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("save")
        .arg("3600 1")
        .query(&mut pair.a.conn())
        .unwrap();
    let _: () = pair.a.conn().set("b", 0).unwrap();
    assert!(wait_until(SETTLE, || exists(&pair.b, "b")));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let checker = {
        let stop = stop.clone();
        let mut b = pair.b.conn();
        std::thread::spawn(move || {
            let (mut reads, mut torn) = (0u64, 0u64);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let present: bool = b.exists("b").unwrap();
                reads += 1;
                torn += u64::from(!present);
            }
            (reads, torn)
        })
    };
    let mut a = pair.a.conn();
    for i in 1..=100 {
        let _: () = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg("a")
            .arg(i)
            .ignore()
            .cmd("FLUSHALL")
            .ignore()
            .cmd("SET")
            .arg("b")
            .arg(i)
            .ignore()
            .query(&mut a)
            .unwrap();
    }
    let done = wait_until(SETTLE, || {
        pair.b.conn().get::<_, Option<i64>>("b").unwrap() == Some(100)
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (reads, torn) = checker.join().unwrap();
    assert!(done, "B: {:?}", pair.b.status());
    assert!(reads > 10, "only {reads} reads");
    assert_eq!(
        torn, 0,
        "B saw the FLUSHALL without the SET after it ({reads} reads)"
    );
    pair.wait_converged(SETTLE);
}

#[test]
fn a_key_that_cannot_be_read_is_never_shipped_as_deleted() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    let _: () = a.set("f:live", "v1").unwrap();
    let _: () = a.set("f:back", "old").unwrap();
    pair.wait_converged(SETTLE);
    pair.a.fail_reads(Some("f:"));
    // Live path: the change cannot be read, so nothing ships for it.
    let _: () = a.set("f:live", "v2").unwrap();
    assert!(wait_until(SETTLE, || pair.a.stat("read_failures") >= 1));
    // Backlog path: a change made while the link is down, resent at the heal.
    cut(&pair);
    let _: () = pair.a.conn().set("f:back", "new").unwrap();
    let _: () = pair.a.conn().set("sentinel", "1").unwrap();
    heal(&pair);
    assert!(wait_until(SETTLE, || exists(&pair.b, "sentinel")));
    std::thread::sleep(Duration::from_millis(300));
    for (key, old) in [("f:live", "v1"), ("f:back", "old")] {
        let v: Option<String> = pair.b.conn().get(key).unwrap();
        assert_eq!(v.as_deref(), Some(old), "{key} on b: unread became deleted");
        let v: Option<String> = pair.a.conn().get(key).unwrap();
        assert!(v.is_some(), "{key} on a");
    }
    let failures = pair.a.stat("read_failures");
    assert!(failures >= 2, "{:?}", pair.a.status());
    // Readable again: both changes ship and the pair converges.
    pair.a.fail_reads(None);
    pair.wait_converged(SETTLE);
    let v: String = pair.b.conn().get("f:live").unwrap();
    assert_eq!(v, "v2");
    let v: String = pair.b.conn().get("f:back").unwrap();
    assert_eq!(v, "new");
}

#[test]
fn an_unreadable_resend_ships_later_at_its_own_version() {
    let pair = Pair::start();
    cut(&pair);
    // A writes first, B later: B's write is the newer one.
    let _: () = pair.a.conn().set("f:k", "a-older").unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let _: () = pair.b.conn().set("f:k", "b-newer").unwrap();
    // Neither side can read its change when the link heals.
    pair.a.fail_reads(Some("f:"));
    pair.b.fail_reads(Some("f:"));
    heal(&pair);
    assert!(wait_until(SETTLE, || pair.a.stat("unread_keys") == 1
        && pair.b.stat("unread_keys") == 1));
    // A reads again first: its change must ship at its own (older)
    // version, not as a new write that would beat B's.
    pair.a.fail_reads(None);
    assert!(wait_until(SETTLE, || pair.a.stat("unread_keys") == 0));
    std::thread::sleep(Duration::from_millis(200));
    let v: String = pair.b.conn().get("f:k").unwrap();
    assert_eq!(v, "b-newer", "an older write restamped as new won on b");
    pair.b.fail_reads(None);
    pair.wait_converged(SETTLE);
    for n in [&pair.a, &pair.b] {
        let v: String = n.conn().get("f:k").unwrap();
        assert_eq!(v, "b-newer", "{}", n.name);
    }
}

#[test]
fn a_remote_flush_keeps_a_newer_key_it_cannot_read() {
    let pair = Pair::start();
    let _: () = pair.a.conn().set("old", "1").unwrap();
    pair.wait_converged(SETTLE);
    cut(&pair);
    let _: () = redis::cmd("FLUSHDB").query(&mut pair.b.conn()).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let _: () = pair.a.conn().set("f:new", "after-flush").unwrap();
    // A cannot read its newer key when B's flush arrives.
    pair.a.fail_reads(Some("f:"));
    heal(&pair);
    assert!(wait_until(SETTLE, || !exists(&pair.a, "old")));
    let v: Option<String> = pair.a.conn().get("f:new").unwrap();
    assert_eq!(
        v.as_deref(),
        Some("after-flush"),
        "the flush lost a newer key"
    );
    pair.a.fail_reads(None);
    pair.wait_converged(SETTLE);
    let v: String = pair.b.conn().get("f:new").unwrap();
    assert_eq!(v, "after-flush");
    assert!(!exists(&pair.b, "old"));
}

/// Deletes past `max-tombstones` while the peer is away: the oldest
/// tombstones go (the bound holds), and the full sync that follows deletes
/// their keys on the peer (the sweep), while what the peer wrote meanwhile
/// stays. Without the sweep the dropped deletes' keys stay on B for good.
#[test]
fn deletes_past_the_tombstone_bound_while_away_do_not_come_back() {
    deletes_past_the_bound_stay_deleted(&["max-tombstones=200"]);
}

/// As above, with B's backlog overflowing while away: B answers with a
/// full sync of its own, which ships its copies of the keys A deleted
/// (A's old versions) back to A. A, whose tombstones of them are gone,
/// must still take them as deleted. Without that rule they come back.
#[test]
fn a_full_sync_from_the_peer_does_not_bring_back_keys_deleted_past_the_bound() {
    deletes_past_the_bound_stay_deleted(&["max-tombstones=200", "backlog-ops=1"]);
}

fn deletes_past_the_bound_stay_deleted(b_args: &[&str]) {
    let pair = Pair::start_with(&["max-tombstones=200"], b_args);
    let (mut a, mut b) = (pair.a.conn(), pair.b.conn());
    let mut p = redis::pipe();
    for i in 0..1000 {
        p.set(format!("k{i}"), "base").ignore();
    }
    let _: () = p.query(&mut a).unwrap();
    let _: () = b.set("b-before", "kept").unwrap();
    pair.wait_converged(SETTLE);
    cut(&pair);
    // B writes while away: a key A will delete (older than the delete:
    // with that delete's tombstone dropped, nothing says so when B's write
    // arrives, and the write stays; with it kept, the delete wins), and
    // keys A never had.
    let _: () = b.set("k5", "b-older").unwrap();
    let _: () = b.set("b-away", "kept").unwrap();
    std::thread::sleep(Duration::from_millis(5));
    for chunk in (0..800).collect::<Vec<_>>().chunks(50) {
        let mut p = redis::pipe();
        for i in chunk {
            p.del(format!("k{i}")).ignore();
        }
        let _: () = p.query(&mut a).unwrap();
    }
    // Newer than A's delete: B's write wins.
    std::thread::sleep(Duration::from_millis(5));
    let _: () = b.set("k10", "b-newer").unwrap();
    let _: () = b.set("k900", "b-newer").unwrap();
    assert!(
        pair.a.stat("tombstones") <= 200 && pair.a.stat("tombstones_dropped") >= 600,
        "{:?}",
        pair.a.status()
    );
    heal(&pair);
    pair.wait_converged(SETTLE);
    for n in [&pair.a, &pair.b] {
        let gone = (0..800)
            .filter(|&i| i != 10 && i != 5 && exists(n, &format!("k{i}")))
            .count();
        assert_eq!(gone, 0, "deleted keys back on {}", n.name);
        let v: Option<String> = n.conn().get("k5").unwrap();
        assert!(matches!(v.as_deref(), None | Some("b-older")), "{v:?}");
        let v: Option<String> = n.conn().get("k10").unwrap();
        assert_eq!(v.as_deref(), Some("b-newer"), "{}", n.name);
        let v: Option<String> = n.conn().get("k900").unwrap();
        assert_eq!(v.as_deref(), Some("b-newer"), "{}", n.name);
        for k in ["b-before", "b-away", "k999"] {
            assert!(exists(n, k), "{k} lost on {}", n.name);
        }
    }
    assert!(pair.b.stat("keys_swept") >= 600, "{:?}", pair.b.status());
    assert!(pair.a.stat("full_syncs") >= 1, "{:?}", pair.a.status());
    if b_args.contains(&"backlog-ops=1") {
        assert!(pair.b.stat("full_syncs") >= 2, "{:?}", pair.b.status());
    }
}

/// `DEBUG SET-ACTIVE-EXPIRE` on both nodes.
fn active_expire(pair: &Pair, on: bool) {
    for n in [&pair.a, &pair.b] {
        let _: () = redis::cmd("DEBUG")
            .arg("SET-ACTIVE-EXPIRE")
            .arg(i32::from(on))
            .query(&mut n.conn())
            .unwrap();
    }
}

/// More keys expire in one event-loop iteration than are recorded (the
/// bound lowered to 10 for the test): those past it are counted in
/// `expiries_unrecorded` and keep their versions; no node brings them
/// back, and a later write of one of them replicates.
#[test]
fn expiries_past_the_bound_are_counted_and_nothing_comes_back() {
    let pair = Pair::start();
    pair.a.debug(&["EXPIRED-BOUND", "10"]);
    let mut a = pair.a.conn();
    let mut p = redis::pipe();
    for i in 0..50 {
        p.cmd("SET")
            .arg(format!("e{i}"))
            .arg("v")
            .arg("PX")
            .arg(400)
            .ignore();
    }
    let _: () = p.query(&mut a).unwrap();
    pair.wait_converged(SETTLE);
    active_expire(&pair, false);
    std::thread::sleep(Duration::from_millis(500));
    // One command: all 50 expire lazily in one event-loop iteration.
    let names: Vec<String> = (0..50).map(|i| format!("e{i}")).collect();
    let left: i64 = redis::cmd("EXISTS").arg(&names).query(&mut a).unwrap();
    assert_eq!(left, 0);
    assert!(
        wait_until(SETTLE, || pair.a.stat("expiries_unrecorded") == 40),
        "{:?}",
        pair.a.status()
    );
    let _: () = a.set("e45", "again").unwrap();
    active_expire(&pair, true);
    assert!(wait_until(SETTLE, || {
        let v: Option<String> = pair.b.conn().get("e45").unwrap();
        v.as_deref() == Some("again")
    }));
    pair.wait_converged(SETTLE);
    for n in [&pair.a, &pair.b] {
        let one = wait_until(SETTLE, || {
            redis::cmd("DBSIZE").query::<i64>(&mut n.conn()).unwrap() == 1
        });
        assert!(one, "only the key written again on {}", n.name);
    }
}
