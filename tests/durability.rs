//! Durable convergence: what a client was acknowledged, and what its node's
//! persistence kept, survives restarts and reloads on both nodes; a deleted
//! key stays deleted. Each scenario checks the values against what the
//! clients were told, not only that the two digests agree.

mod common;

use std::time::{Duration, Instant};

use common::{cut, free_port, module_args_at, test_ip, test_ip_b, wait_until, Node, Pair};
use redis::Commands;

const SETTLE: Duration = Duration::from_secs(20);

/// How the nodes persist.
#[derive(Debug, Clone, Copy)]
enum Persistence {
    /// `appendonly yes`, `appendfsync always` (RDB preamble, the default).
    AofAlways,
    /// As `AofAlways`, with a `BGREWRITEAOF` after the first writes.
    AofRewritten,
    /// `aof-use-rdb-preamble no`, rewritten after the first writes.
    AofNoPreamble,
    /// `appendfsync everysec`.
    AofEverysec,
    /// RDB snapshots only (a `SAVE` before the node goes down).
    Rdb,
}

impl Persistence {
    fn server_args(self) -> Vec<String> {
        let args: &[&str] = match self {
            Self::AofAlways | Self::AofRewritten => {
                &["--appendonly", "yes", "--appendfsync", "always"]
            }
            Self::AofNoPreamble => &[
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--aof-use-rdb-preamble",
                "no",
            ],
            Self::AofEverysec => &["--appendonly", "yes", "--appendfsync", "everysec"],
            Self::Rdb => &[],
        };
        args.iter().map(|s| s.to_string()).collect()
    }

    fn rewrites(self) -> bool {
        matches!(self, Self::AofRewritten | Self::AofNoPreamble)
    }
}

/// How node A goes down.
#[derive(Debug, Clone, Copy)]
enum Down {
    Shutdown,
    Kill,
}

/// A linked pair whose servers persist as `p`.
fn pair_persisting(p: Persistence) -> Pair {
    pair_persisting_with(p, &[])
}

/// The same, with `extra` module arguments on both nodes.
fn pair_persisting_with(p: Persistence, extra: &[&str]) -> Pair {
    let (pa, pb) = (free_port(), free_port());
    let (ia, ib) = (test_ip(), test_ip_b());
    let mut a_args = p.server_args();
    a_args.extend(module_args_at(&ia, pa, &ib, pb, extra));
    let mut b_args = p.server_args();
    b_args.extend(module_args_at(&ib, pb, &ia, pa, extra));
    let a = Node::start("a", a_args);
    let b = Node::start("b", b_args);
    let pair = Pair { a, b };
    pair.wait_linked();
    pair
}

fn get(node: &Node, key: &str) -> Option<String> {
    node.conn().get(key).unwrap()
}

/// B deletes `k`, A applies the delete, and B collects its tombstone.
fn delete_k_on_b_until_collected(pair: &Pair) {
    let _: i64 = pair.b.conn().del("k").unwrap();
    assert!(wait_value(&pair.a, "k", None));
    assert!(
        wait_until(SETTLE, || pair.b.stat("tombstones") == 0),
        "collected"
    );
}

fn wait_value(node: &Node, key: &str, want: Option<&str>) -> bool {
    wait_until(SETTLE, || get(node, key).as_deref() == want)
}

fn wait_rewritten(node: &Node) {
    let mut c = node.conn();
    let _: redis::Value = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    let done = wait_until(SETTLE, || {
        let info: String = redis::cmd("INFO").arg("persistence").query(&mut c).unwrap();
        info.contains("aof_rewrite_in_progress:0") && !info.contains("aof_rewrite_scheduled:1")
    });
    assert!(done, "BGREWRITEAOF did not finish");
}

/// Points both nodes at each other again.
fn heal(pair: &Pair) {
    pair.a.set_peer_port(&pair.b.listen_port().to_string());
    pair.b.set_peer_port(&pair.a.listen_port().to_string());
}

/// Takes A down as `down` says and starts it again with its dir and
/// arguments; B is pointed back at A.
fn restart_a(pair: &mut Pair, p: Persistence, down: Down) {
    if matches!(p, Persistence::Rdb) {
        let _: () = redis::cmd("SAVE").query(&mut pair.a.conn()).unwrap();
    }
    if matches!(down, Down::Shutdown) {
        let _ = redis::cmd("SHUTDOWN").query::<()>(&mut pair.a.conn());
        std::thread::sleep(Duration::from_millis(200));
    }
    pair.a.restart();
    pair.b.set_peer_port(&pair.a.listen_port().to_string());
    pair.wait_linked();
}

/// The minimal scenario: A's acknowledged SET, DEL and INCRBY made
/// while the link is cut survive A's restart, on both nodes.
fn changes_made_while_cut_survive_a_restart(p: Persistence, down: Down) {
    let mut pair = pair_persisting(p);
    let mut a = pair.a.conn();
    let _: () = a.set("a:k", "v1").unwrap();
    let _: () = a.set("a:d", "x").unwrap();
    let _: () = a.set("a:n", 10).unwrap();
    assert!(wait_value(&pair.b, "a:n", Some("10")));
    if p.rewrites() {
        wait_rewritten(&pair.a);
    }
    cut(&pair);
    let _: () = a.set("a:k", "v2").unwrap();
    let deleted: i64 = a.del("a:d").unwrap();
    let n: i64 = a.incr("a:n", 5).unwrap();
    assert_eq!((deleted, n), (1, 15));
    drop(a);
    restart_a(&mut pair, p, down);
    if !matches!(p, Persistence::Rdb) {
        assert!(
            pair.a.stat("stamps_loaded") > 0,
            "{p:?}: no stamps replayed from the AOF"
        );
    }
    for node in [&pair.a, &pair.b] {
        for (key, want) in [("a:k", Some("v2")), ("a:d", None), ("a:n", Some("15"))] {
            assert!(
                wait_value(node, key, want),
                "{p:?}/{down:?}: {key} on {} is {:?}, acknowledged {want:?}",
                node.name,
                get(node, key)
            );
        }
    }
    pair.wait_converged(SETTLE);
}

#[test]
fn aof_always_shutdown_keeps_what_was_acknowledged() {
    changes_made_while_cut_survive_a_restart(Persistence::AofAlways, Down::Shutdown);
}

#[test]
fn aof_always_kill_keeps_what_was_acknowledged() {
    changes_made_while_cut_survive_a_restart(Persistence::AofAlways, Down::Kill);
}

#[test]
fn aof_rewritten_shutdown_keeps_what_was_acknowledged() {
    changes_made_while_cut_survive_a_restart(Persistence::AofRewritten, Down::Shutdown);
}

#[test]
fn aof_rewritten_kill_keeps_what_was_acknowledged() {
    changes_made_while_cut_survive_a_restart(Persistence::AofRewritten, Down::Kill);
}

#[test]
fn aof_without_preamble_shutdown_keeps_what_was_acknowledged() {
    changes_made_while_cut_survive_a_restart(Persistence::AofNoPreamble, Down::Shutdown);
}

#[test]
fn aof_without_preamble_kill_keeps_what_was_acknowledged() {
    changes_made_while_cut_survive_a_restart(Persistence::AofNoPreamble, Down::Kill);
}

#[test]
fn aof_everysec_shutdown_keeps_what_was_acknowledged() {
    changes_made_while_cut_survive_a_restart(Persistence::AofEverysec, Down::Shutdown);
}

#[test]
fn rdb_shutdown_keeps_what_was_saved() {
    changes_made_while_cut_survive_a_restart(Persistence::Rdb, Down::Shutdown);
}

#[test]
fn rdb_kill_keeps_what_was_saved() {
    changes_made_while_cut_survive_a_restart(Persistence::Rdb, Down::Kill);
}

/// The link is up but A's changes are still queued (its sender held) when
/// A is killed: its AOF has them, with their stamps, and they reach B.
#[test]
fn changes_in_flight_when_a_is_killed_survive_on_both() {
    let mut pair = pair_persisting(Persistence::AofAlways);
    let mut a = pair.a.conn();
    let _: () = a.set("a:k", "v1").unwrap();
    let _: () = a.set("a:d", "x").unwrap();
    assert!(wait_value(&pair.b, "a:d", Some("x")));
    pair.a.hold_sends(true);
    let _: () = a.set("a:k", "v2").unwrap();
    let _: i64 = a.del("a:d").unwrap();
    drop(a);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(get(&pair.b, "a:k").as_deref(), Some("v1"), "held: not sent");
    pair.a.restart();
    pair.wait_linked();
    for node in [&pair.a, &pair.b] {
        assert!(wait_value(node, "a:k", Some("v2")), "a:k on {}", node.name);
        assert!(wait_value(node, "a:d", None), "a:d on {}", node.name);
    }
    pair.wait_converged(SETTLE);
}

/// An ack leaves only once what it covers is in the AOF buffer Redis has
/// written. B applies A's increment and exits right after its next ack
/// (`RDMASYNC.DEBUG EXIT-AFTER-ACK`), before Redis writes its AOF buffer
/// unless the ack waited for that write. An ack sent before the write
/// covered an increment B's restart took away: A, told B had applied it,
/// folded it into the counter's base, and its sync after B's restart
/// shipped a base B took for the one it held (A 15, B 10 for good).
#[test]
fn an_ack_never_covers_what_a_crash_can_take_from_the_acking_node() {
    let mut pair = pair_persisting(Persistence::AofAlways);
    let mut a = pair.a.conn();
    let _: () = a.set("c", "10").unwrap();
    assert!(wait_value(&pair.b, "c", Some("10")));
    pair.wait_converged(SETTLE);
    // The increment waits in B's apply queue while the switch is set, so
    // the ack B exits after is the one that covers it.
    pair.b.debug(&["HOLD-APPLY", "ON"]);
    let _: i64 = a.incr("c", 5).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(get(&pair.b, "c").as_deref(), Some("10"), "held");
    pair.b.debug(&["EXIT-AFTER-ACK"]);
    pair.b.debug(&["HOLD-APPLY", "OFF"]);
    assert!(
        wait_until(SETTLE, || pair.b.has_exited()),
        "B exits after its ack"
    );
    assert!(pair.b.log().contains("EXIT-AFTER-ACK"), "{}", pair.b.log());
    pair.b.restart();
    pair.wait_linked();
    for node in [&pair.a, &pair.b] {
        assert!(wait_value(node, "c", Some("15")), "c on {}", node.name);
    }
    let _: i64 = a.incr("c", 1).unwrap();
    for node in [&pair.a, &pair.b] {
        assert!(wait_value(node, "c", Some("16")), "c on {}", node.name);
    }
    pair.wait_converged(SETTLE);
}

/// A deletes a set and a counter while the link is cut, B removes a
/// member of the set and sets the counter, and A restarts from its AOF
/// (what it had queued for B is gone: its deletes ship with its answer to
/// B's request). B's states of the keys reach A first, and A's merges
/// leave them absent. A third key, a set B changed after A's delete
/// without having seen it, is absent after the merge too (A's delete
/// removed the member B kept). Each merge took A's unshipped tombstone for a delete
/// applied from B, collectable at A's next ack: gone when A answered B's
/// request, and B kept the keys for good (found by tests/faults.rs on
/// Redis 8.0.6, where B kept a member A had deleted).
#[test]
fn a_delete_made_while_cut_outlives_the_peer_s_older_state_after_a_restart() {
    let mut pair = pair_persisting(Persistence::AofAlways);
    let mut a = pair.a.conn();
    let _: i64 = redis::cmd("SADD")
        .arg(&["s", "m1", "m2"])
        .query(&mut a)
        .unwrap();
    let _: i64 = redis::cmd("SADD")
        .arg(&["t", "m1", "m2"])
        .query(&mut a)
        .unwrap();
    let _: i64 = a.incr("c", 5).unwrap();
    pair.wait_converged(SETTLE);
    cut(&pair);
    let mut b = pair.b.conn();
    let _: i64 = redis::cmd("SREM").arg(&["s", "m1"]).query(&mut b).unwrap();
    let _: () = b.set("c", 7).unwrap();
    // Newer than B's changes by more than a clock tick.
    std::thread::sleep(Duration::from_millis(20));
    let _: i64 = a.del(&["s", "c", "t"]).unwrap();
    drop(a);
    // And one of B's newer than A's delete, which it had not seen.
    std::thread::sleep(Duration::from_millis(20));
    let _: i64 = redis::cmd("SREM").arg(&["t", "m1"]).query(&mut b).unwrap();
    // A restarts still cut off, and answers B's request only once B's
    // state was applied and acknowledged (the order the fault run saw).
    let peer_arg = format!("port={}", pair.b.listen_port());
    let nowhere = format!("port={}", common::NOWHERE_PORT);
    let swap = |args: &mut Vec<String>, from: &str, to: &str| {
        for a in args.iter_mut().filter(|a| a.as_str() == from) {
            *a = to.to_string();
        }
    };
    swap(&mut pair.a.args, &peer_arg, &nowhere);
    pair.a.restart();
    swap(&mut pair.a.args, &nowhere, &peer_arg);
    pair.a.debug(&["HOLD-SYNCS", "ON"]);
    heal(&pair);
    pair.wait_linked();
    std::thread::sleep(Duration::from_millis(500));
    pair.a.debug(&["HOLD-SYNCS", "OFF"]);
    for node in [&pair.a, &pair.b] {
        let gone = wait_until(SETTLE, || {
            let n: i64 = node.conn().exists(&["s", "c", "t"]).unwrap();
            n == 0
        });
        assert!(gone, "s, c or t on {}: {}", node.name, node.log());
    }
    pair.wait_converged(SETTLE);
}

/// B's changes applied on A are in A's AOF with B's stamps. After A's
/// restart they are newer than B's earlier FLUSHALL, so B's full sync
/// (floors first, then keys) never removes them from A: A's clients see
/// every key throughout the catch-up.
#[test]
fn keys_applied_from_the_peer_never_vanish_while_a_restarted_node_catches_up() {
    const KEYS: usize = 20_000;
    let mut pair = pair_persisting(Persistence::AofAlways);
    let mut b = pair.b.conn();
    let _: () = redis::cmd("FLUSHALL").query(&mut b).unwrap();
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(1000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.set(format!("b:{i}"), i).ignore();
        }
        let _: () = pipe.query(&mut b).unwrap();
    }
    let dbsize = |n: &Node| -> usize { redis::cmd("DBSIZE").query(&mut n.conn()).unwrap() };
    assert!(wait_until(SETTLE, || dbsize(&pair.a) == KEYS));
    cut(&pair);
    pair.a.restart();
    assert_eq!(dbsize(&pair.a), KEYS, "loaded from the AOF");
    pair.b.set_peer_port(&pair.a.listen_port().to_string());
    let mut a = pair.a.conn();
    let mut fewest = KEYS;
    let caught_up = wait_until(SETTLE, || {
        let n: usize = redis::cmd("DBSIZE").query(&mut a).unwrap();
        fewest = fewest.min(n);
        pair.a.syncs_sent() >= 1 && pair.b.syncs_sent() >= 1 && {
            let s = pair.b.status();
            s["sync_in_progress"] == "0" && s["link"] == "up"
        }
    });
    assert!(caught_up, "no catch-up: a={:?}", pair.a.status());
    assert_eq!(
        fewest, KEYS,
        "A's clients saw keys vanish during the catch-up"
    );
    pair.wait_converged(SETTLE);
}

/// Clients refuse to send the internal stamps command.
#[test]
fn clients_cannot_send_stamps() {
    let pair = Pair::start();
    let r: redis::RedisResult<String> = redis::cmd("RDMASYNC.STAMPS")
        .arg(&b"\x01"[..])
        .query(&mut pair.a.conn());
    let err = r.expect_err("a client's stamps must be refused");
    assert!(err.to_string().contains("internal"), "{err}");
}

/// Writes on A (a counter and a stream per round) and on B flow while A
/// reloads its dataset with `reload` a few times, every other time with the
/// link cut so that B lags behind; A moves on to the next round's keys just
/// before each reload, so the earlier rounds' keys keep only what their
/// stamps say. A client polling A never sees a counter or a stream's length
/// go backwards, and every acknowledged increment and entry is on both
/// nodes at the end.
fn reloading_with_writes_flowing_loses_nothing(reload: &'static [&'static str]) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    const ROUNDS: usize = 4;
    let pair = pair_persisting(Persistence::AofAlways);
    // A flush floor on both nodes (Redis's own tests flush before each
    // file): a reloaded key without its stamp would fall below it.
    let _: () = redis::cmd("FLUSHALL").query(&mut pair.b.conn()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let round = Arc::new(AtomicUsize::new(0));
    let acked = Arc::new(Mutex::new(vec![0i64; ROUNDS + 1]));
    let writer = {
        let (stop, round, acked, mut c) =
            (stop.clone(), round.clone(), acked.clone(), pair.a.conn());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let r = round.load(Ordering::Relaxed);
                // One transaction: both or neither (refused while loading).
                let done: redis::RedisResult<(i64, String)> = redis::pipe()
                    .atomic()
                    .incr(format!("a:ctr:{r}"), 1)
                    .cmd("XADD")
                    .arg(format!("a:stream:{r}"))
                    .arg("*")
                    .arg("n")
                    .arg(1)
                    .query(&mut c);
                match done {
                    Ok((n, _)) => acked.lock().unwrap()[r] = n,
                    Err(e) if is_loading(&e) => std::thread::sleep(Duration::from_millis(5)),
                    Err(e) => panic!("{e}"),
                }
            }
        })
    };
    let b_writer = {
        let (stop, mut c) = (stop.clone(), pair.b.conn());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _: () = c.set(format!("b:{}", i % 500), i).unwrap();
                i += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    let poller = {
        let (stop, round, mut c) = (stop.clone(), round.clone(), pair.a.conn());
        std::thread::spawn(move || {
            let mut seen = [(0i64, 0i64); ROUNDS + 1];
            while !stop.load(Ordering::Relaxed) {
                for (r, seen) in seen
                    .iter_mut()
                    .enumerate()
                    .take(round.load(Ordering::Relaxed) + 1)
                {
                    let read: redis::RedisResult<(Option<i64>, i64)> = redis::pipe()
                        .get(format!("a:ctr:{r}"))
                        .cmd("XLEN")
                        .arg(format!("a:stream:{r}"))
                        .query(&mut c);
                    let (now, len) = match read {
                        Ok((now, len)) => (now.unwrap_or(0), len),
                        Err(e) if is_loading(&e) => continue,
                        Err(e) => panic!("{e}"),
                    };
                    assert!(
                        now >= seen.0,
                        "a:ctr:{r} went back from {} to {now}",
                        seen.0
                    );
                    assert!(
                        len >= seen.1,
                        "XLEN a:stream:{r} went back from {} to {len}",
                        seen.1
                    );
                    *seen = (now, len);
                }
            }
        })
    };
    let mut a = pair.a.conn();
    for r in 0..ROUNDS {
        std::thread::sleep(Duration::from_millis(200));
        let lagging = r % 2 == 0;
        if lagging {
            cut(&pair);
            std::thread::sleep(Duration::from_millis(200));
        }
        round.store(r + 1, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(20));
        let mut cmd = redis::cmd(reload[0]);
        for arg in &reload[1..] {
            cmd.arg(*arg);
        }
        let _: redis::Value = cmd.query(&mut a).unwrap();
        if lagging {
            heal(&pair);
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    b_writer.join().unwrap();
    poller.join().expect("the poller saw data go backwards");
    let acked = acked.lock().unwrap().clone();
    for (r, &n) in acked.iter().enumerate() {
        assert!(n > 0, "round {r} wrote nothing");
        for node in [&pair.a, &pair.b] {
            let want = n.to_string();
            let key = format!("a:ctr:{r}");
            assert!(
                wait_value(node, &key, Some(&want)),
                "{key} on {} is {:?}, acknowledged {n}",
                node.name,
                get(node, &key)
            );
            let len = || -> i64 {
                redis::cmd("XLEN")
                    .arg(format!("a:stream:{r}"))
                    .query(&mut node.conn())
                    .unwrap()
            };
            assert!(
                wait_until(SETTLE, || len() == n),
                "XLEN a:stream:{r} on {} is {}, want {n}",
                node.name,
                len()
            );
        }
    }
    pair.wait_converged(SETTLE);
}

fn is_loading(e: &redis::RedisError) -> bool {
    e.to_string().contains("loading")
}

#[test]
fn debug_loadaof_with_writes_flowing_loses_nothing() {
    reloading_with_writes_flowing_loses_nothing(&["DEBUG", "LOADAOF"]);
}

#[test]
fn debug_reload_with_writes_flowing_loses_nothing() {
    reloading_with_writes_flowing_loses_nothing(&["DEBUG", "RELOAD"]);
}

/// Redis's own test: a MULTI that turns the node into a replica of a
/// master that does not exist. What the transaction wrote before and after
/// REPLICAOF is the node's clients', and reaches the peer (after an earlier
/// FLUSHALL, whose floor must not refuse it).
#[test]
fn writes_in_a_multi_that_holds_replicaof_reach_the_peer() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    let _: () = redis::cmd("FLUSHALL").query(&mut a).unwrap();
    let _: () = a.set("foo", "bar").unwrap();
    let nowhere = free_port();
    let _: () = redis::pipe()
        .atomic()
        .set("foo2", "bar")
        .cmd("REPLICAOF")
        .arg("localhost")
        .arg(nowhere)
        .set("foo3", "bar")
        .query(&mut a)
        .unwrap();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut a)
        .unwrap();
    for key in ["foo", "foo2", "foo3"] {
        assert!(wait_value(&pair.b, key, Some("bar")), "{key} on b");
        assert_eq!(get(&pair.a, key).as_deref(), Some("bar"), "{key} on a");
    }
    pair.wait_converged(SETTLE);
}

/// A node made a replica of a master that does not exist keeps its data;
/// the peer's writes meanwhile are not applied, and arrive once it is a
/// master again; its own earlier writes stay on both.
#[test]
fn a_replica_of_nobody_promoted_again_merges_both_ways() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    let _: () = a.set("a:before", 1).unwrap();
    assert!(wait_value(&pair.b, "a:before", Some("1")));
    let nowhere = free_port();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(nowhere)
        .query(&mut a)
        .unwrap();
    let _: () = pair.b.conn().set("b:during", 1).unwrap();
    let _: () = pair.b.conn().del("a:before").map(|_: i64| ()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(get(&pair.a, "b:during"), None, "applied on a replica");
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut a)
        .unwrap();
    let _: () = a.set("a:after", 1).unwrap();
    for node in [&pair.a, &pair.b] {
        assert!(
            wait_value(node, "b:during", Some("1")),
            "b:during on {}",
            node.name
        );
        assert!(
            wait_value(node, "a:before", None),
            "a:before on {}",
            node.name
        );
        assert!(
            wait_value(node, "a:after", Some("1")),
            "a:after on {}",
            node.name
        );
    }
    pair.wait_converged(SETTLE);
}

/// An AOF rewrite without an RDB preamble writes no versions into the new
/// base: the new incremental file starts with a snapshot of them. Without
/// it, A's restarted copy of a key would count as newer than B's later
/// write made while the link was cut.
#[test]
fn a_rewrite_without_preamble_keeps_the_versions_of_what_it_rewrote() {
    let mut pair = pair_persisting(Persistence::AofNoPreamble);
    let _: () = pair.a.conn().set("k", "a-old").unwrap();
    assert!(wait_value(&pair.b, "k", Some("a-old")));
    cut(&pair);
    let _: () = pair.b.conn().set("k", "b-newer").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    wait_rewritten(&pair.a);
    // A stamp newer than B's write, after the rewrite.
    let _: () = pair.a.conn().set("other", "a-later").unwrap();
    pair.a.restart();
    pair.b.set_peer_port(&pair.a.listen_port().to_string());
    pair.wait_linked();
    for node in [&pair.a, &pair.b] {
        assert!(
            wait_value(node, "k", Some("b-newer")),
            "k on {} is {:?}",
            node.name,
            get(node, "k")
        );
        assert!(
            wait_value(node, "other", Some("a-later")),
            "other on {}",
            node.name
        );
    }
    pair.wait_converged(SETTLE);
}

/// The smallest DBSIZE seen while polling for `how_long`.
fn smallest_dbsize_for(c: &mut redis::Connection, how_long: Duration) -> u64 {
    let watched = Instant::now();
    let mut smallest = u64::MAX;
    while watched.elapsed() < how_long {
        let size: u64 = redis::cmd("DBSIZE").query(c).unwrap();
        smallest = smallest.min(size);
    }
    smallest
}

/// With `appendonly` off, a rewrite without preamble writes a base file
/// and no incremental file to carry the versions; `DEBUG LOADAOF` of it
/// (Redis's own suite: "Same dataset digest if saving/reloading as AOF?")
/// must find the versions the rewrite saw. Dated as unknown instead (just
/// after the newest stamp loaded: none), every key lost to the floor of an
/// earlier FLUSHDB the peer sent back, and A was empty after the reload.
#[test]
fn debug_loadaof_of_a_rewrite_made_with_appendonly_off_keeps_every_key() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    let _: () = a.set("before", "x").unwrap();
    let _: () = redis::cmd("FLUSHDB").query(&mut a).unwrap();
    for i in 0..200 {
        let _: () = a.set(format!("k:{i}"), i).unwrap();
    }
    let _: i64 = redis::cmd("HSET")
        .arg("h")
        .arg("f")
        .arg("v")
        .query(&mut a)
        .unwrap();
    pair.wait_converged(SETTLE);
    let before = pair.a.digest();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("aof-use-rdb-preamble")
        .arg("no")
        .query(&mut a)
        .unwrap();
    wait_rewritten(&pair.a);
    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut a).unwrap();
    assert_eq!(pair.a.digest(), before, "A changed in DEBUG LOADAOF");
    // No key vanishes while A catches up with the peer (the floor came
    // back with it, and the keys only after it).
    let smallest = smallest_dbsize_for(&mut a, Duration::from_secs(2));
    assert_eq!(smallest, 201, "keys vanished from A: {:?}", pair.a.status());
    assert_eq!(pair.wait_converged(SETTLE), before);
}

/// A rewrite that fails (its child killed) leaves the base file before it,
/// and so the versions kept for that base: taken from the failed rewrite's
/// fork instead, the keys written between the two rewrites (absent from
/// the older base) would count as held, and the peer would never ship them
/// back; dropped, every key would be dated below the earlier flush's floor.
#[test]
fn a_failed_rewrite_leaves_the_versions_of_the_base_before_it() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    let _: () = redis::cmd("FLUSHDB").query(&mut a).unwrap();
    for i in 0..100 {
        let _: () = a.set(format!("k:{i}"), i).unwrap();
    }
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("aof-use-rdb-preamble")
        .arg("no")
        .query(&mut a)
        .unwrap();
    wait_rewritten(&pair.a);
    for i in 0..50 {
        let _: () = a.set(format!("j:{i}"), i).unwrap();
    }
    pair.wait_converged(SETTLE);
    // A second rewrite, slowed down, killed half-way.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("rdb-key-save-delay")
        .arg("100000")
        .query(&mut a)
        .unwrap();
    let _: redis::Value = redis::cmd("BGREWRITEAOF").query(&mut a).unwrap();
    let child = wait_until(SETTLE, || {
        let out = std::process::Command::new("pkill")
            .args(["-9", "-P", &pair.a.pid().to_string()])
            .status()
            .unwrap();
        out.success()
    });
    assert!(child, "no rewrite child to kill");
    let failed = wait_until(SETTLE, || {
        let info: String = redis::cmd("INFO").arg("persistence").query(&mut a).unwrap();
        info.contains("aof_rewrite_in_progress:0") && info.contains("aof_last_bgrewrite_status:err")
    });
    assert!(failed, "the rewrite did not fail");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("rdb-key-save-delay")
        .arg("0")
        .query(&mut a)
        .unwrap();
    // The older base: the k keys only; the j keys come back from the peer.
    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut a).unwrap();
    let smallest = smallest_dbsize_for(&mut a, Duration::from_secs(2));
    assert!(
        smallest >= 100,
        "keys of the base vanished from A: {smallest}"
    );
    let back = wait_until(SETTLE, || {
        redis::cmd("DBSIZE").query::<u64>(&mut a).unwrap() == 150
    });
    assert!(
        back,
        "the j keys never came back to A: {:?}",
        pair.a.status()
    );
    pair.wait_converged(SETTLE);
}

/// The snapshot a rewrite without preamble wants goes out before sleeping,
/// never inside the command that forked: Redis would propagate that
/// command (`CONFIG SET appendonly yes`, `BGREWRITEAOF`) into the AOF and
/// to replicas, and replaying `CONFIG SET` inside the AOF's MULTI is an
/// error (with `propagation-error-behavior panic`, a crash; found by
/// Redis's own suite).
#[test]
fn commands_that_fork_a_rewrite_stay_out_of_the_aof() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    for (k, v) in [
        ("aof-use-rdb-preamble", "no"),
        ("propagation-error-behavior", "panic"),
        ("appendonly", "yes"),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query(&mut a)
            .unwrap();
    }
    // The rewrite CONFIG SET started, then one by BGREWRITEAOF.
    assert!(wait_until(SETTLE, || {
        let info: String = redis::cmd("INFO").arg("persistence").query(&mut a).unwrap();
        info.contains("aof_rewrite_in_progress:0") && !info.contains("aof_rewrite_scheduled:1")
    }));
    let _: () = a.set("k", "v1").unwrap();
    wait_rewritten(&pair.a);
    let _: () = a.set("k2", "v2").unwrap();
    let aof = pair.a.dir.join("appendonlydir");
    let mut text = Vec::new();
    for f in std::fs::read_dir(&aof).unwrap() {
        text.extend(std::fs::read(f.unwrap().path()).unwrap());
    }
    let text = String::from_utf8_lossy(&text).to_lowercase();
    for forbidden in ["bgrewriteaof", "\r\nconfig\r\n"] {
        assert!(!text.contains(forbidden), "the AOF holds {forbidden:?}");
    }
    assert!(
        text.contains("rdmasync.stamps"),
        "the versions are in the AOF"
    );
    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut a).unwrap();
    assert_eq!(get(&pair.a, "k").as_deref(), Some("v1"));
    assert_eq!(get(&pair.a, "k2").as_deref(), Some("v2"));
    pair.wait_converged(SETTLE);
}

/// Sends `cmds` to `node` in one write, so that they run in one event-loop
/// iteration; replies are not awaited (the last one stops the server).
fn send_in_one_iteration(node: &Node, cmds: &[&[&str]]) {
    use std::io::Write;
    let mut bytes = Vec::new();
    for cmd in cmds {
        bytes.extend(format!("*{}\r\n", cmd.len()).bytes());
        for arg in *cmd {
            bytes.extend(format!("${}\r\n{arg}\r\n", arg.len()).bytes());
        }
    }
    let mut s = std::net::TcpStream::connect(("127.0.0.1", node.port)).unwrap();
    s.write_all(&bytes).unwrap();
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut sink = Vec::new();
    let _ = std::io::Read::read_to_end(&mut s, &mut sink);
}

/// A SET, a DEL and a FLUSHDB of another database in the same event-loop
/// iteration as SHUTDOWN reach A's AOF but not their stamps (the server
/// exits before the flush that stamps them). A's load dates them just after
/// the newest stamp it loaded: B, whose copies are older, takes them, and
/// the pair does not keep two values for good.
#[test]
fn changes_in_the_iteration_of_a_shutdown_are_dated_at_the_next_load() {
    let mut pair = pair_persisting(Persistence::AofAlways);
    let mut a = pair.a.conn();
    let _: () = a.set("k", "v1").unwrap();
    let _: () = a.set("d", "x").unwrap();
    let _: () = redis::cmd("SELECT").arg(3).query(&mut a).unwrap();
    let _: () = a.set("in-3", "x").unwrap();
    drop(a);
    let mut b3 = pair.b.conn();
    let _: () = redis::cmd("SELECT").arg(3).query(&mut b3).unwrap();
    assert!(wait_until(SETTLE, || b3.exists::<_, bool>("in-3").unwrap()));
    assert!(wait_value(&pair.b, "d", Some("x")));
    // Each knows it holds the other's changes so far (the acks said so;
    // B has written nothing: its coverage is its clock).
    assert!(
        wait_until(SETTLE, || pair.b.stat("peer_watermark") > 0
            && pair.a.stat("peer_watermark") > 0),
        "no watermark: a={:?} b={:?}",
        pair.a.status(),
        pair.b.status()
    );
    send_in_one_iteration(
        &pair.a,
        &[
            &["SET", "k", "v2"],
            &["DEL", "d"],
            &["SELECT", "3"],
            &["FLUSHDB"],
            &["SHUTDOWN"],
        ],
    );
    pair.a.restart();
    pair.wait_linked();
    let mut a3 = pair.a.conn();
    let _: () = redis::cmd("SELECT").arg(3).query(&mut a3).unwrap();
    assert!(
        !a3.exists::<_, bool>("in-3").unwrap(),
        "the FLUSHDB is in A's AOF"
    );
    for node in [&pair.a, &pair.b] {
        assert!(
            wait_value(node, "k", Some("v2")),
            "k on {} is {:?}",
            node.name,
            get(node, "k")
        );
        assert!(wait_value(node, "d", None), "d on {}", node.name);
    }
    assert!(
        wait_until(SETTLE, || !b3.exists::<_, bool>("in-3").unwrap()),
        "the FLUSHDB of database 3 did not reach B"
    );
    // Redis 7.0 and Valkey run the pipeline and the SHUTDOWN in one
    // event-loop iteration: the three changes are stamped at the next
    // load. On Redis 8.0.6 a flush stamped them before the SHUTDOWN ran
    // (stamps_dated 0: the pipeline did not all run in the SHUTDOWN's
    // iteration), so nothing was left to date. Either way they reached B
    // (above).
    let dated = pair.a.stat("stamps_dated");
    assert!(
        dated == 3 || dated == 0,
        "k, d and the FLUSHDB: {dated} dated"
    );
    for node in [&pair.a, &pair.b] {
        assert_eq!(
            node.status()["catchup"],
            "since",
            "a restart with its AOF: no full sync either way; {}: {:?}",
            node.name,
            node.status()
        );
    }
    pair.wait_converged(SETTLE);
}

/// With the merges on, an increment, a field and a member written in the
/// iteration of a SHUTDOWN reach A's AOF but not their stamps nor their
/// merge records: A's counter and element tables still hold the state
/// before them. Dated at the load, they must still reach B (found by
/// tests/faults.rs with FAULT_MERGES=1: B kept its counter state, or took
/// the hash as a value at rest that adds nothing, and the pair differed).
#[test]
fn merged_changes_in_the_iteration_of_a_shutdown_reach_the_peer() {
    let merges = ["merge-counters=yes", "merge-elements=yes"];
    let mut pair = pair_persisting_with(Persistence::AofAlways, &merges);
    let mut a = pair.a.conn();
    let _: i64 = a.incr("c", 5).unwrap();
    let _: i64 = a.hset("h", "f1", "a").unwrap();
    let _: i64 = a.sadd("s", "m1").unwrap();
    drop(a);
    assert!(wait_value(&pair.b, "c", Some("5")));
    assert!(wait_until(SETTLE, || pair
        .b
        .conn()
        .sismember("s", "m1")
        .unwrap()));
    // At rest on both (the metadata collected), as in a long run.
    assert!(
        wait_until(SETTLE, || {
            [&pair.a, &pair.b]
                .iter()
                .all(|n| n.stat("merge_elements") == 0 && n.stat("merge_counters") == 0)
        }),
        "a={:?} b={:?}",
        pair.a.status(),
        pair.b.status()
    );
    send_in_one_iteration(
        &pair.a,
        &[
            &["INCRBY", "c", "3"],
            &["HSET", "h", "f2", "b"],
            &["SADD", "s", "m2"],
            &["SHUTDOWN"],
        ],
    );
    pair.a.restart();
    pair.wait_linked();
    assert_eq!(
        get(&pair.a, "c").as_deref(),
        Some("8"),
        "the INCRBY is in A's AOF"
    );
    pair.wait_settled(SETTLE);
    for node in [&pair.a, &pair.b] {
        let mut c = node.conn();
        assert_eq!(get(node, "c").as_deref(), Some("8"), "c on {}", node.name);
        let h: std::collections::BTreeMap<String, String> = c.hgetall("h").unwrap();
        assert_eq!(h.len(), 2, "h on {}: {h:?}", node.name);
        let members: std::collections::BTreeSet<String> = c.smembers("s").unwrap();
        assert_eq!(members.len(), 2, "s on {}: {members:?}", node.name);
    }
}

/// With the merges on, a hash whose metadata was collected, then deleted at
/// rest (which journals nothing in the element table) and, after a
/// restart, written again: the restart must not bring the collected
/// elements back from the journal as live ones (found by tests/faults.rs
/// with merges: the old field came back on both nodes).
#[test]
fn a_hash_deleted_at_rest_and_written_after_a_restart_keeps_no_old_field() {
    let merges = ["merge-counters=yes", "merge-elements=yes"];
    let mut pair = pair_persisting_with(Persistence::AofAlways, &merges);
    let _: i64 = pair.a.conn().hset("h", "old", "x").unwrap();
    assert!(wait_until(SETTLE, || pair
        .b
        .conn()
        .hexists("h", "old")
        .unwrap()));
    let at_rest = |pair: &Pair| {
        [&pair.a, &pair.b]
            .iter()
            .all(|n| n.stat("merge_elements") == 0 && n.stat("tombstones") == 0)
    };
    assert!(
        wait_until(SETTLE, || at_rest(&pair)),
        "{:?}",
        pair.a.status()
    );
    let _: i64 = pair.a.conn().del("h").unwrap();
    assert!(wait_until(SETTLE, || !pair
        .b
        .conn()
        .exists::<_, bool>("h")
        .unwrap()));
    assert!(
        wait_until(SETTLE, || at_rest(&pair)),
        "{:?}",
        pair.a.status()
    );
    // A restarts unlinked and writes the key again; the catch-up ships it.
    cut(&pair);
    let peer_arg = format!("port={}", pair.b.listen_port());
    for arg in pair.a.args.iter_mut().filter(|a| **a == peer_arg) {
        *arg = "port=1".into();
    }
    pair.a.restart();
    // Collected before the restart: none comes back from the journal.
    assert_eq!(
        pair.a.stat("merge_elements"),
        0,
        "the collected metadata came back: {}",
        redis::cmd("RDMASYNC.DEBUG")
            .arg("VERSION")
            .arg("h")
            .query::<String>(&mut pair.a.conn())
            .unwrap_or_default()
    );
    let _: i64 = pair.a.conn().hset("h", "new", "y").unwrap();
    let _: i64 = pair.b.conn().hset("h", "from-b", "z").unwrap();
    heal(&pair);
    pair.wait_settled(SETTLE);
    for node in [&pair.a, &pair.b] {
        let h: std::collections::BTreeMap<String, String> = node.conn().hgetall("h").unwrap();
        let names: Vec<&str> = h.keys().map(String::as_str).collect();
        assert_eq!(names, ["from-b", "new"], "h on {}", node.name);
    }
}

/// A costly hot key's change held back by its rest (acknowledged, in the
/// AOF, not yet stamped) when the node is killed survives on both nodes.
#[test]
fn a_held_change_of_a_resting_hot_key_survives_a_kill() {
    let mut pair = pair_persisting(Persistence::AofAlways);
    let mut a = pair.a.conn();
    let mut pipe = redis::pipe();
    for i in 0..30_000 {
        pipe.hset("big", format!("f{i}"), i).ignore();
    }
    let _: () = pipe.query(&mut a).unwrap();
    let fields = || -> usize {
        redis::cmd("HLEN")
            .arg("big")
            .query(&mut pair.b.conn())
            .unwrap()
    };
    assert!(wait_until(SETTLE, || fields() == 30_000));
    // The first change is read (costly: the key rests), the next is held.
    let _: () = a.hset("big", "first", 1).unwrap();
    let _: () = a.hset("big", "held", 1).unwrap();
    pair.a.kill();
    pair.a.restart();
    pair.wait_linked();
    for node in [&pair.a, &pair.b] {
        let held = || -> Option<String> { node.conn().hget("big", "held").unwrap() };
        assert!(
            wait_until(SETTLE, || held().as_deref() == Some("1")),
            "held on {}",
            node.name
        );
    }
    pair.wait_converged(SETTLE);
}

/// A node restarted from an RDB older than its last writes (killed after
/// them, without a save) lost those writes; the peer got them, and ships
/// them back: the restarted node's request says how far its own changes
/// survived. And a restart with every key versioned catches up by syncs
/// since the watermarks, both ways, not full syncs. (A delete lost that way
/// comes back only while the peer still holds its tombstone: see the next
/// test and docs/limitations.md.)
#[test]
fn writes_a_node_lost_in_its_restart_come_back_from_the_peer_by_watermark() {
    let mut pair = pair_persisting(Persistence::Rdb);
    let mut a = pair.a.conn();
    for i in 0..200 {
        let _: () = a.set(format!("saved:{i}"), i).unwrap();
    }
    let _: () = pair.b.conn().set("from-b", 1).unwrap();
    assert!(wait_value(&pair.a, "from-b", Some("1")));
    assert!(wait_value(&pair.b, "saved:199", Some("199")));
    // Each node's watermark of the other is in the snapshot.
    assert!(wait_until(SETTLE, || pair.a.stat("peer_watermark") > 0
        && pair.b.stat("peer_watermark") > 0));
    let _: () = redis::cmd("SAVE").query(&mut a).unwrap();
    let _: () = a.set("after-save", "x").unwrap();
    let _: () = a.set("saved:1", "rewritten").unwrap();
    assert!(wait_value(&pair.b, "after-save", Some("x")));
    assert!(wait_value(&pair.b, "saved:1", Some("rewritten")));
    drop(a);
    // B sends nothing until A was seen to miss the write: on a busy host
    // the catch-up brought it back before the check (seen in a full run on
    // Redis 8.0.6).
    pair.b.hold_sends(true);
    pair.a.restart();
    assert_eq!(get(&pair.a, "after-save"), None, "lost with the kill");
    pair.b.hold_sends(false);
    pair.wait_linked();
    for node in [&pair.a, &pair.b] {
        assert!(
            wait_value(node, "after-save", Some("x")),
            "after-save on {}",
            node.name
        );
        assert!(
            wait_value(node, "saved:1", Some("rewritten")),
            "saved:1 on {}",
            node.name
        );
        assert!(
            wait_value(node, "from-b", Some("1")),
            "from-b on {}",
            node.name
        );
    }
    pair.wait_converged(SETTLE);
    for node in [&pair.a, &pair.b] {
        let s = node.status();
        assert_eq!(s["catchup"], "since", "{}: {s:?}", node.name);
        assert!(s["catchup_since"] != "0", "{}: {s:?}", node.name);
        assert!(
            s["catchup_entries"].parse::<u64>().unwrap() < 10,
            "{}: only what the other misses ships: {s:?}",
            node.name
        );
    }
}

/// A delete the peer collected the tombstone of (the restarted node had
/// applied and acknowledged it) but the restarted node lost (its RDB is
/// older): a sync since the watermark would not ship it, so the peer
/// answers with a full sync and the pair converges (the key comes back on
/// both: docs/limitations.md), instead of keeping two datasets.
#[test]
fn a_delete_lost_in_a_restart_after_its_tombstone_was_collected_still_converges() {
    let mut pair = pair_persisting(Persistence::Rdb);
    let _: () = pair.b.conn().set("k", "v").unwrap();
    assert!(wait_value(&pair.a, "k", Some("v")));
    assert!(wait_until(SETTLE, || pair.a.stat("peer_watermark") > 0));
    let _: () = redis::cmd("SAVE").query(&mut pair.a.conn()).unwrap();
    delete_k_on_b_until_collected(&pair);
    pair.a.restart();
    pair.wait_linked();
    pair.wait_converged(SETTLE);
    assert_eq!(get(&pair.a, "k"), get(&pair.b, "k"));
    assert_eq!(pair.b.status()["catchup"], "full", "{:?}", pair.b.status());
}

/// Both nodes restart from snapshots after B deleted a key and collected
/// its tombstone: A's snapshot still holds the key, B's has the delete.
/// Each asks the other for what it misses at once; B's own request asks
/// only since its watermark, and A's sync since B's surviving changes
/// would not carry the key, so B must also ask A for everything (its
/// answer) or the key stays on A alone.
#[test]
fn a_delete_collected_before_both_nodes_restart_from_snapshots_still_converges() {
    let mut pair = pair_persisting(Persistence::Rdb);
    let _: () = pair.b.conn().set("k", "v").unwrap();
    // Newer than `k`: B's surviving changes reach past it.
    let _: () = pair.b.conn().set("later", "w").unwrap();
    assert!(wait_value(&pair.a, "later", Some("w")));
    assert!(wait_until(SETTLE, || pair.a.stat("peer_watermark") > 0
        && pair.b.stat("peer_watermark") > 0));
    let _: () = redis::cmd("SAVE").query(&mut pair.a.conn()).unwrap();
    delete_k_on_b_until_collected(&pair);
    let _: () = redis::cmd("SAVE").query(&mut pair.b.conn()).unwrap();
    pair.a.kill();
    pair.b.restart();
    pair.a.restart();
    pair.a.set_peer_port(&pair.b.listen_port().to_string());
    pair.b.set_peer_port(&pair.a.listen_port().to_string());
    pair.wait_linked();
    pair.wait_settled(SETTLE);
    assert_eq!(get(&pair.a, "k"), get(&pair.b, "k"));
    assert_eq!(get(&pair.a, "later"), Some("w".to_string()));
}

/// A restarted from a snapshot that lacks its write `w` (which B holds),
/// then, still cut off, changed something and reloaded: the second load
/// keeps changes of A's newer than `w`. A's request must still ask B for
/// its own changes since the first load's loss, or `w` stays on B alone.
#[test]
fn a_write_lost_by_a_restart_comes_back_after_a_second_load() {
    let mut pair = pair_persisting(Persistence::Rdb);
    let _: () = pair.a.conn().set("base", "1").unwrap();
    assert!(wait_value(&pair.b, "base", Some("1")));
    let _: () = redis::cmd("SAVE").query(&mut pair.a.conn()).unwrap();
    let _: () = pair.a.conn().set("w", "x").unwrap();
    assert!(wait_value(&pair.b, "w", Some("x")));
    cut(&pair);
    // A restarts unlinked (peer port 1) from its snapshot, which lacks `w`.
    let peer_arg = format!("port={}", pair.b.listen_port());
    for arg in pair.a.args.iter_mut().filter(|a| **a == peer_arg) {
        *arg = "port=1".into();
    }
    pair.a.restart();
    assert_eq!(get(&pair.a, "w"), None);
    let _: () = pair.a.conn().set("after", "y").unwrap();
    let _: () = redis::cmd("DEBUG")
        .arg("RELOAD")
        .query(&mut pair.a.conn())
        .unwrap();
    heal(&pair);
    pair.wait_settled(SETTLE);
    for node in [&pair.a, &pair.b] {
        assert_eq!(get(node, "w"), Some("x".to_string()), "w came back");
        assert_eq!(get(node, "after"), Some("y".to_string()));
    }
}

/// As above, but A is killed and restarted from a snapshot saved after the
/// second write instead of reloading: the window of what the first restart
/// lost must come back from A's files (the RDB aux data), or A's request
/// asks only after `after` and `w` stays on B alone.
#[test]
fn a_write_lost_by_a_restart_comes_back_after_a_second_restart() {
    let mut pair = pair_persisting(Persistence::Rdb);
    let _: () = pair.a.conn().set("base", "1").unwrap();
    assert!(wait_value(&pair.b, "base", Some("1")));
    let _: () = redis::cmd("SAVE").query(&mut pair.a.conn()).unwrap();
    let _: () = pair.a.conn().set("w", "x").unwrap();
    assert!(wait_value(&pair.b, "w", Some("x")));
    cut(&pair);
    let peer_arg = format!("port={}", pair.b.listen_port());
    for arg in pair.a.args.iter_mut().filter(|a| **a == peer_arg) {
        *arg = "port=1".into();
    }
    pair.a.restart();
    assert_eq!(get(&pair.a, "w"), None);
    assert!(pair.a.stat("own_lost_after") > 0, "{:?}", pair.a.status());
    let _: () = pair.a.conn().set("after", "y").unwrap();
    let _: () = redis::cmd("SAVE").query(&mut pair.a.conn()).unwrap();
    pair.a.restart();
    heal(&pair);
    pair.wait_settled(SETTLE);
    for node in [&pair.a, &pair.b] {
        assert_eq!(get(node, "w"), Some("x".to_string()), "w on {}", node.name);
        assert_eq!(get(node, "after"), Some("y".to_string()));
    }
    // Closed by the peer's next ack that claims coverage again.
    assert!(
        wait_until(SETTLE, || pair.a.stat("own_lost_after") == 0),
        "{:?}",
        pair.a.status()
    );
}

/// A restarted from a snapshot that lacks its write `w` (B holds it), and
/// B took A's request for it (A's own request acknowledged, B's answer
/// taken) and owes the sync, which it holds (`HOLD-SYNCS`).
fn a_lost_w_and_b_holds_its_answer() -> Pair {
    let mut pair = pair_persisting(Persistence::Rdb);
    let _: () = pair.a.conn().set("base", "1").unwrap();
    assert!(wait_value(&pair.b, "base", Some("1")));
    assert!(wait_until(SETTLE, || pair.a.stat("peer_watermark") > 0
        && pair.b.stat("peer_watermark") > 0));
    let _: () = redis::cmd("SAVE").query(&mut pair.a.conn()).unwrap();
    let _: () = pair.a.conn().set("w", "x").unwrap();
    assert!(wait_value(&pair.b, "w", Some("x")));
    pair.b.debug(&["HOLD-SYNCS", "ON"]);
    pair.a.restart();
    assert_eq!(get(&pair.a, "w"), None, "lost with the kill");
    pair.wait_linked();
    // B took A's request (A's own request acknowledged, B's answer taken)
    // and owes the sync it holds.
    let asked = wait_until(SETTLE, || {
        let (sa, sb) = (pair.a.status(), pair.b.status());
        sa["peer_state"] != "probing" && sb["peer_state"] == "snapshot"
    });
    assert!(asked, "a={:?} b={:?}", pair.a.status(), pair.b.status());
    assert!(pair.a.stat("own_lost_after") > 0, "{:?}", pair.a.status());
    pair
}

/// A restarted from a snapshot that lacks its write `w` (which B holds) and
/// asked B for its own changes since; B acknowledged the request but went
/// down before its answering sync left (held on purpose here), and came
/// back from its own snapshot, which holds `w`. B's new request does not
/// know A's: A's answer to it must ask again for its own changes that the
/// load lost, or `w` stays on B alone.
#[test]
fn a_write_lost_by_a_restart_comes_back_when_the_peer_restarts_before_answering() {
    let mut pair = a_lost_w_and_b_holds_its_answer();
    let _: () = redis::cmd("SAVE").query(&mut pair.b.conn()).unwrap();
    pair.b.restart();
    heal(&pair);
    pair.wait_linked();
    pair.wait_settled(SETTLE);
    for node in [&pair.a, &pair.b] {
        assert_eq!(get(node, "w"), Some("x".to_string()), "w on {}", node.name);
        assert_eq!(get(node, "base"), Some("1".to_string()));
    }
    // Closed by the peer's next ack that claims coverage again.
    assert!(
        wait_until(SETTLE, || pair.a.stat("own_lost_after") == 0),
        "{:?}",
        pair.a.status()
    );
}

/// As above, but B reloads its dataset (`DEBUG RELOAD`) instead of
/// restarting, so the link stays up: the reload must not drop the sync B
/// owes A (it was owed as a full one and then forgiven), and A must answer
/// B's new request although it asked B on this link already, or `w`
/// stays on B alone and B claims no coverage until the link drops.
#[test]
fn a_write_lost_by_a_restart_comes_back_when_the_peer_reloads_before_answering() {
    let pair = a_lost_w_and_b_holds_its_answer();
    let _: () = redis::cmd("DEBUG")
        .arg("RELOAD")
        .query(&mut pair.b.conn())
        .unwrap();
    pair.b.debug(&["HOLD-SYNCS", "OFF"]);
    pair.wait_settled(SETTLE);
    for node in [&pair.a, &pair.b] {
        assert_eq!(get(node, "w"), Some("x".to_string()), "w on {}", node.name);
    }
    for node in [&pair.a, &pair.b] {
        let settled = wait_until(SETTLE, || {
            let s = node.status();
            s["peer_state"] == "streaming" && s["own_lost_after"] == "0"
        });
        assert!(settled, "{}: {:?}", node.name, node.status());
    }
}

/// Deletes past `max-tombstones` while cut, then A killed and restarted
/// from its AOF before the link returns: the dropped floor comes back
/// with A's files, so the sync A's restart leads to still sweeps: none of
/// the deleted keys is back on either node.
#[test]
fn a_sweep_owed_survives_a_restart_of_the_node_that_dropped_tombstones() {
    let p = Persistence::AofAlways;
    let (pa, pb) = (free_port(), free_port());
    let (ia, ib) = (test_ip(), test_ip_b());
    let bound = ["max-tombstones=200"];
    let mut a_args = p.server_args();
    a_args.extend(module_args_at(&ia, pa, &ib, pb, &bound));
    let mut b_args = p.server_args();
    b_args.extend(module_args_at(&ib, pb, &ia, pa, &bound));
    let mut pair = Pair {
        a: Node::start("a", a_args),
        b: Node::start("b", b_args),
    };
    pair.wait_linked();
    let mut a = pair.a.conn();
    let mut pipe = redis::pipe();
    for i in 0..600 {
        pipe.set(format!("k{i}"), "base").ignore();
    }
    let _: () = pipe.query(&mut a).unwrap();
    pair.wait_converged(SETTLE);
    cut(&pair);
    for i in 0..500 {
        let _: () = a.del(format!("k{i}")).unwrap();
    }
    drop(a);
    assert!(
        pair.a.stat("tombstones_dropped") >= 300,
        "{:?}",
        pair.a.status()
    );
    restart_a(&mut pair, p, Down::Kill);
    pair.wait_converged(SETTLE);
    for node in [&pair.a, &pair.b] {
        let mut c = node.conn();
        let back = (0..500)
            .filter(|i| c.exists::<_, bool>(format!("k{i}")).unwrap())
            .count();
        assert_eq!(back, 0, "deleted keys back on {}", node.name);
        let kept: usize = (500..600)
            .filter(|i| c.exists::<_, bool>(format!("k{i}")).unwrap())
            .count();
        assert_eq!(kept, 100, "{}", node.name);
    }
    assert!(pair.b.stat("keys_swept") >= 300, "{:?}", pair.b.status());
}

/// A node restarted from an RDB older than its last writes, whose clock
/// had followed the peer's (8 s ahead of its wall clock, within the
/// default `max-clock-offset` of 10 s), stamped its first write after the
/// restart from the newest stamp it loaded, below the writes it lost: the
/// peer held k's lost write under a newer stamp than the write A
/// acknowledged after the restart, kept it and shipped it back, and both
/// nodes ended with the value the restart took (`lost`; found by a review
/// in stop 48, this test failed so before stop 51's lead file, and passes
/// without the skew). The clock now starts at the wall clock plus the
/// lead the node kept (`converge::clock_lead`), above the lost stamps.
#[test]
fn a_write_after_a_restore_from_an_older_copy_beats_the_write_it_lost() {
    restore_from_an_older_copy_then_write(true);
}

/// The same without the lead file (a copy restored into a directory that
/// has none: the clock starts from the newest stamp loaded, below the
/// lost writes). The peer sends k's lost write back, newer by its stamp
/// than the write made since the restart; this node discards it (it
/// wrote k since its load) and ships its write again, newer. Before that
/// rule both nodes ended with the value the restart took (`lost`), the
/// gap the lead file left (stop 51's note).
#[test]
fn a_write_after_a_restore_without_the_lead_file_beats_the_write_it_lost() {
    restore_from_an_older_copy_then_write(false);
}

fn restore_from_an_older_copy_then_write(keep_lead: bool) {
    let mut pair = pair_persisting(Persistence::Rdb);
    let _: () = redis::cmd("RDMASYNC.DEBUG")
        .arg("CLOCK-SKEW")
        .arg("8000")
        .query(&mut pair.b.conn())
        .unwrap();
    // A applies a write of B's: A's clock moves up to B's, and A's lead
    // file keeps how far ahead of its wall clock that is.
    let _: () = pair.b.conn().set("from-b", 1).unwrap();
    assert!(wait_value(&pair.a, "from-b", Some("1")));
    assert!(
        wait_until(SETTLE, || pair.a.stat("clock_lead_kept_ms") >= 7_000),
        "A's lead not kept: {:?}",
        pair.a.status()
    );
    let mut a = pair.a.conn();
    let _: () = redis::cmd("SAVE").query(&mut a).unwrap();
    // Lost with the kill: these writes, then k's, each stamped one above
    // the last (A's wall clock is behind).
    for i in 0..20 {
        let _: () = a.set(format!("lost:{i}"), i).unwrap();
    }
    let _: () = a.set("k", "lost").unwrap();
    assert!(wait_value(&pair.b, "k", Some("lost")));
    drop(a);
    // A comes back unlinked (as after an outage of both): its first write
    // is stamped before it hears from B again.
    cut(&pair);
    for arg in pair.a.args.iter_mut().filter(|a| a.starts_with("port=")) {
        *arg = format!("port={}", common::NOWHERE_PORT);
    }
    pair.a.kill();
    if !keep_lead {
        let mut removed = 0;
        for file in std::fs::read_dir(&pair.a.dir).unwrap().flatten() {
            if file.file_name().to_string_lossy().ends_with(".clock-lead") {
                std::fs::remove_file(file.path()).unwrap();
                removed += 1;
            }
        }
        assert_eq!(removed, 1, "A's lead file");
    }
    pair.a.restart();
    assert_eq!(get(&pair.a, "k"), None, "lost with the kill");
    if keep_lead {
        let kept = pair.a.stat("clock_lead_kept_ms");
        assert!(kept >= 7_000, "the lead read back at the start: {kept}");
    }
    let _: () = pair.a.conn().set("k", "after").unwrap();
    common::heal(&pair);
    if !keep_lead {
        assert!(
            wait_until(SETTLE, || pair.a.stat("lost_changes_superseded") >= 1),
            "k's lost write came back newer by its stamp: {:?}",
            pair.a.status()
        );
    }
    for node in [&pair.a, &pair.b] {
        assert!(
            wait_value(node, "k", Some("after")),
            "k on {}: {:?} (the write acknowledged after the restart)",
            node.name,
            get(node, "k")
        );
    }
}
