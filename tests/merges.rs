//! Writers who meet: a client on each node updates the same key at the same
//! time, every reply is checked, and once the pair has converged every
//! acknowledged update must be in the result on both nodes (issue 27's
//! table: per field, member, counter, push; TTL and delete against
//! concurrent adds).
//!
//! Counters merge with `merge-counters=yes` (INCR, INCRBY, DECR, DECRBY):
//! their tests run, also across a link cut, failed writes, a kill with
//! AOF, deletes, transactions, scripts and flushes. Hash fields merge with
//! `merge-elements=yes` (tests/hash_merges.rs), and so do set and sorted-set
//! members (tests/set_merges.rs) and lists (tests/list_merges.rs).
//! The ignored tests measure what the whole-key merges
//! (`merge-counters=no`, `merge-elements=no`) lose:
//! `cargo nextest run --run-ignored only --test merges` prints it.

mod common;

use std::thread;
use std::time::Duration;

use common::writers::{
    at_once, cmd, integer, lost_on_both, okay, report, write_all, PIPELINE, UPDATES,
};
use common::Pair;
use redis::{Connection, Value};

/// Runs `f`; if it panics, names first what each node holds of `key`
/// (value, version, counter state, merge figures).
fn or_explain<T>(pair: &Pair, key: &str, f: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(why) => {
            explain(pair, key);
            std::panic::resume_unwind(why)
        }
    }
}

fn explain(pair: &Pair, key: &str) {
    let figures = [
        "merge_fallbacks",
        "merge_counters",
        "reconnects",
        "entries_duplicate",
        "conflicts_discarded",
        "apply_errors",
        "partial_syncs",
        "full_syncs",
        "since_syncs",
    ];
    common::merging::explain(pair, key, "GET", &figures);
}

/// A pair that ships increments as increments (`merge-counters=yes`).
fn started_merging_counters() -> Pair {
    let on = ["merge-counters=yes"];
    let pair = Pair::start_with(&on, &on);
    pair.wait_in_step();
    pair
}

/// Counter `c` holds `want` on both nodes (`of` updates were acknowledged),
/// no write fell back and its metadata was collected.
fn counted_and_collected(pair: &Pair, scenario: &str, want: i64, of: usize) {
    let lost = lost_on_both(pair, |c| (want - get_counter(c)).unsigned_abs() as usize);
    report(scenario, lost / 2, of);
    or_explain(pair, "c", || merged_and_collected(pair));
}

/// No write fell back to whole-key last writer wins, and every counter's
/// metadata was collected once the pair settled.
fn merged_and_collected(pair: &Pair) {
    for node in [&pair.a, &pair.b] {
        assert_eq!(node.stat("merge_fallbacks"), 0, "{:?}", node.status());
        let rested =
            common::wait_until(Duration::from_secs(10), || node.stat("merge_counters") == 0);
        assert!(
            rested,
            "counter metadata never collected: {:?}",
            node.status()
        );
    }
}

/// Both nodes add 1 to the same counter `UPDATES` times each.
fn counter_scenario(name: &str, update: fn(usize) -> redis::Cmd, read: fn(&mut Connection) -> i64) {
    let pair = Pair::start_whole_keys(&[], &[]);
    pair.wait_in_step();
    at_once(&pair, update, update, okay);
    let want = 2 * UPDATES as i64;
    let lost = lost_on_both(&pair, |c| (want - read(c)).max(0) as usize);
    report(name, lost / 2, 2 * UPDATES);
}

#[test]
fn incr_of_one_counter_on_both_nodes_counts_every_increment() {
    let pair = started_merging_counters();
    or_explain(&pair, "c", || {
        at_once(&pair, incr_family, incr_family, okay)
    });
    // Per side: 250 x (1 + 3 - 1 + 2).
    let want = 2 * (UPDATES as i64 / 4) * 5;
    counted_and_collected(&pair, "INCR family on one counter", want, 2 * UPDATES);
}

/// Update `i` of the INCR family: +1, +3, -1, +2 in turn (+5 a cycle).
fn incr_family(i: usize) -> redis::Cmd {
    match i % 4 {
        0 => cmd(&["INCR", "c"]),
        1 => cmd(&["INCRBY", "c", "3"]),
        2 => cmd(&["DECR", "c"]),
        _ => cmd(&["DECRBY", "c", "-2"]),
    }
}

fn get_counter(c: &mut Connection) -> i64 {
    redis::cmd("GET").arg("c").query(c).unwrap()
}

#[test]
fn increments_made_on_both_nodes_while_the_link_is_cut_all_count() {
    let pair = started_merging_counters();
    common::cut(&pair);
    // Each side writes alone; their changes wait in the backlog.
    thread::scope(|s| {
        s.spawn(|| write_all(&pair.a, incr_family, okay));
        s.spawn(|| write_all(&pair.b, incr_family, okay));
    });
    assert!(pair.a.stat("merge_counters") == 1 && pair.b.stat("merge_counters") == 1);
    common::heal(&pair);
    pair.wait_converged(Duration::from_secs(30));
    let want = 2 * (UPDATES as i64 / 4) * 5;
    counted_and_collected(&pair, "INCR family across a link cut", want, 2 * UPDATES);
}

#[test]
fn increments_through_failed_writes_and_lost_batches_all_count() {
    // Both nodes increment while each sender now and then fails a write
    // (the link drops) or loses a batch (the peer sees the gap): the
    // backlog resends counter states, never a value read as a new set.
    let pair = started_merging_counters();
    thread::scope(|s| {
        for (node, name) in [(&pair.a, "a"), (&pair.b, "b")] {
            s.spawn(move || {
                let mut c = node.conn();
                for round in 0..40 {
                    if round % 7 == 3 {
                        node.debug(&["FAIL-NEXT-POST"]);
                    }
                    if round % 11 == 5 {
                        node.debug(&["DROP-NEXT-BATCH"]);
                    }
                    for i in 0..25 {
                        let r: Value = incr_family(i).query(&mut c).unwrap();
                        assert!(okay(&r), "{name}: {r:?}");
                    }
                }
            });
        }
    });
    pair.wait_converged(Duration::from_secs(30));
    // Per side: 40 rounds of 25 updates, 6 full cycles of 5 and 1 more.
    let want = 2 * 40 * (6 * 5 + 1);
    counted_and_collected(
        &pair,
        "INCR family through failed writes",
        want,
        2 * UPDATES,
    );
}

#[test]
fn a_delete_removes_only_the_increments_it_had_seen() {
    // B increments while A now and then reads and deletes the counter in
    // one transaction: each delete removes what it read, and only that;
    // every increment no delete had seen is in the result.
    let pair = started_merging_counters();
    let seen_by_deletes = thread::scope(|s| {
        let b = s.spawn(|| {
            // Paced, so that the deletes fall among the increments.
            let mut c = pair.b.conn();
            for _ in 0..UPDATES / PIPELINE {
                let mut p = redis::pipe();
                for _ in 0..PIPELINE {
                    p.cmd("INCR").arg("c");
                }
                let replies: Vec<i64> = p.query(&mut c).unwrap();
                assert_eq!(replies.len(), PIPELINE);
                thread::sleep(Duration::from_millis(1));
            }
        });
        let a = s.spawn(|| {
            let mut c = pair.a.conn();
            let mut seen = 0;
            for _ in 0..40 {
                thread::sleep(Duration::from_millis(2));
                let (read, _): (Option<i64>, i64) = redis::pipe()
                    .atomic()
                    .get("c")
                    .del("c")
                    .query(&mut c)
                    .unwrap();
                seen += read.unwrap_or(0);
            }
            seen
        });
        b.join().unwrap();
        a.join().unwrap()
    });
    pair.wait_converged(Duration::from_secs(30));
    let want = UPDATES as i64 - seen_by_deletes;
    let lost = lost_on_both(&pair, |c| {
        let v: Option<i64> = redis::cmd("GET").arg("c").query(c).unwrap();
        (want - v.unwrap_or(0)).unsigned_abs() as usize
    });
    eprintln!("deletes saw {seen_by_deletes} of {UPDATES} increments");
    report("DEL against concurrent INCR", lost / 2, UPDATES);
    merged_and_collected(&pair);
}

/// `UPDATES / 2` transactions on `node`, each of `first` then `second`
/// (increments of `c`): each EXEC's replies add up.
fn transactions(node: &common::Node, first: &[&str], second: &[&str]) {
    let mut c = node.conn();
    for _ in 0..UPDATES / 2 {
        let (x, y): (i64, i64) = redis::pipe()
            .atomic()
            .add_command(cmd(first))
            .add_command(cmd(second))
            .query(&mut c)
            .unwrap();
        assert!(y != x, "{first:?} then {second:?}: {x}, {y}");
    }
}

#[test]
fn increments_in_transactions_on_both_nodes_all_count() {
    // Inside MULTI the filter sees an increment when it is queued, not when
    // it runs. Where the server names the filtered command's client (Redis
    // 7.2 and later, Valkey) the increments a client queues wait for its
    // EXEC, whose events claim them: transactions on both nodes at once
    // all count, with no fallback. On Redis 7.0 they ship as sets of the
    // value the node holds (counted in merge_fallbacks), which keep every
    // increment of the other node's they had not seen; two such sets at
    // once lose one another, so there B increments outside MULTI.
    let pair = started_merging_counters();
    let exact = common::filter_names_clients(&pair.a);
    thread::scope(|s| {
        s.spawn(|| transactions(&pair.a, &["INCR", "c"], &["INCRBY", "c", "2"]));
        if exact {
            s.spawn(|| transactions(&pair.b, &["DECRBY", "c", "-4"], &["DECR", "c"]));
        } else {
            s.spawn(|| write_all(&pair.b, |_| cmd(&["INCR", "c"]), integer));
        }
    });
    or_explain(&pair, "c", || pair.wait_converged(Duration::from_secs(30)));
    // A: 3 a transaction; B: 3 a transaction, or 1 an INCR.
    let on_b = if exact {
        3 * (UPDATES as i64 / 2)
    } else {
        UPDATES as i64
    };
    let want = (UPDATES as i64 / 2) * 3 + on_b;
    let scenario = if exact {
        "INCR in MULTI on both nodes"
    } else {
        "INCR in MULTI on A against INCR on B (Redis 7.0)"
    };
    if exact {
        counted_and_collected(&pair, scenario, want, 2 * UPDATES);
        return;
    }
    let lost = lost_on_both(&pair, |c| (want - get_counter(c)).unsigned_abs() as usize);
    report(scenario, lost / 2, 2 * UPDATES);
    assert!(
        pair.a.stat("merge_fallbacks") >= UPDATES as u64,
        "A's increments in transactions were not counted as fallbacks: {:?}",
        pair.a.status()
    );
    assert!(
        pair.a.fallbacks_for("unnoted") >= UPDATES as u64,
        "counted under another reason: {:?}",
        pair.a.status()
    );
    assert_eq!(pair.b.stat("merge_fallbacks"), 0, "{:?}", pair.b.status());
}

#[test]
fn increments_in_scripts_on_both_nodes_all_count() {
    // The command filter sees the calls a script makes: they ship as
    // increments, as the client's own INCR does.
    let pair = started_merging_counters();
    let script = |_: usize| {
        cmd(&[
            "EVAL",
            "redis.call('INCR', KEYS[1]); return redis.call('INCRBY', KEYS[1], 2)",
            "1",
            "c",
        ])
    };
    or_explain(&pair, "c", || at_once(&pair, script, script, integer));
    let want = 2 * UPDATES as i64 * 3;
    counted_and_collected(&pair, "INCR in scripts on both nodes", want, 2 * UPDATES);
}

#[test]
fn flushes_on_one_node_against_increments_on_the_other_converge() {
    // A counter state older than a flush the receiver applied is stale, as
    // any older write is: both nodes end with the same counter.
    let pair = started_merging_counters();
    thread::scope(|s| {
        s.spawn(|| write_all(&pair.b, |_| cmd(&["INCR", "c"]), integer));
        s.spawn(|| {
            let mut c = pair.a.conn();
            for _ in 0..20 {
                thread::sleep(Duration::from_millis(2));
                let _: () = redis::cmd("FLUSHDB").query(&mut c).unwrap();
            }
        });
    });
    or_explain(&pair, "c", || pair.wait_converged(Duration::from_secs(30)));
    or_explain(&pair, "c", || merged_and_collected(&pair));
}

/// A pair merging counters whose servers write an AOF, fsynced always.
fn merging_counters_with_aof() -> Pair {
    Pair::start_with_aof(&["merge-counters=yes"])
}

#[test]
fn increments_survive_a_kill_of_one_node_with_aof() {
    // A and B increment at once; A is killed at once after its last
    // acknowledged increment (its states unacknowledged, some unsent) and
    // starts again from its AOF, which holds its counter metadata: every
    // acknowledged increment counts once, none twice.
    let mut pair = merging_counters_with_aof();
    at_once(&pair, incr_family, incr_family, okay);
    if std::env::var_os("MERGES_EXPLAIN").is_some() {
        explain(&pair, "c");
    }
    common::cut(&pair);
    for node in [&pair.a, &pair.b] {
        let mut c = node.conn();
        for i in 0..UPDATES {
            let r: Value = incr_family(i).query(&mut c).unwrap();
            assert!(okay(&r), "{r:?}");
        }
    }
    assert!(pair.a.stat("merge_counters") == 1);
    pair.a.restart();
    // Held as a counter again (with its metadata, or at rest if the link
    // came back and collected it already): from the AOF's records.
    let state: String = redis::cmd("RDMASYNC.DEBUG")
        .arg("VERSION")
        .arg("c")
        .query(&mut pair.a.conn())
        .unwrap();
    assert!(
        state.contains("counter base"),
        "the counter's state did not come back from the AOF: {state}"
    );
    if std::env::var_os("MERGES_EXPLAIN").is_some() {
        explain(&pair, "c");
    }
    common::heal(&pair);
    or_explain(&pair, "c", || pair.wait_converged(Duration::from_secs(30)));
    let want = 4 * (UPDATES as i64 / 4) * 5;
    counted_and_collected(
        &pair,
        "INCR family across a kill with AOF",
        want,
        4 * UPDATES,
    );
}

#[test]
#[ignore = "measures the loss with merge-counters=no (the merges are on by default): run with --ignored"]
fn incr_of_one_counter_without_merge_counters_loses_increments() {
    counter_scenario(
        "INCR one counter (merge-counters=no)",
        |_| cmd(&["INCR", "c"]),
        |c| redis::cmd("GET").arg("c").query(c).unwrap(),
    );
}

#[test]
#[ignore = "measures the loss with merge-elements=no (the merges are on by default; tests/hash_merges.rs counts them with it): run with --ignored"]
fn hincrby_of_one_field_without_merge_elements_loses_increments() {
    counter_scenario(
        "HINCRBY one field (merge-elements=no)",
        |_| cmd(&["HINCRBY", "h", "f", "1"]),
        |c| redis::cmd("HGET").arg("h").arg("f").query(c).unwrap(),
    );
}

#[test]
#[ignore = "measures the loss with merge-elements=no (the merges are on by default; tests/set_merges.rs counts them with it): run with --ignored"]
fn zincrby_of_one_member_without_merge_elements_loses_increments() {
    counter_scenario(
        "ZINCRBY one member (merge-elements=no)",
        |_| cmd(&["ZINCRBY", "z", "1", "m"]),
        |c| {
            let score: f64 = redis::cmd("ZSCORE").arg("z").arg("m").query(c).unwrap();
            score as i64
        },
    );
}

#[test]
fn a_script_s_failed_increment_in_a_transaction_is_not_taken_for_a_later_one() {
    // A script's INCRBY that overflows leaves its note (+10) and raises no
    // event; the DECRBY queued after the script must not take that note.
    // Found by a review: the peer got +10 where A made -100.
    let pair = started_merging_counters();
    let mut a = pair.a.conn();
    let near_max = (i64::MAX - 8).to_string();
    let _: () = cmd(&["SET", "c", &near_max]).query(&mut a).unwrap();
    pair.wait_converged(Duration::from_secs(30));
    let script = "return redis.pcall('INCRBY', KEYS[1], 10)";
    // The EXEC's first reply is the overflow error (redis-rs returns it).
    let exec = redis::pipe()
        .atomic()
        .add_command(cmd(&["EVAL", script, "1", "c"]))
        .add_command(cmd(&["DECRBY", "c", "100"]))
        .query::<redis::Value>(&mut a);
    assert!(exec.is_err_and(|e| e.to_string().contains("overflow")));
    or_explain(&pair, "c", || pair.wait_converged(Duration::from_secs(30)));
    let want = i64::MAX - 108;
    assert_eq!(get_counter(&mut a), want);
    assert_eq!(get_counter(&mut pair.b.conn()), want);
}

#[test]
fn a_counter_made_after_a_flush_keeps_its_value_once_at_rest() {
    // A counter made after a FLUSHALL folds its increments into a base at
    // rest once both nodes applied them; later increments on either node
    // ship that base again, and neither node may take the other's base for
    // a newer one that drops what it folded. (The bug this guards against,
    // a base stamped zero on the writer and with the flush on the peer,
    // showed in durability's reload test on Redis 8; this sequence did not
    // reproduce it alone.)
    let pair = started_merging_counters();
    let _: () = cmd(&["FLUSHALL"]).query(&mut pair.b.conn()).unwrap();
    pair.wait_converged(Duration::from_secs(30));
    let (mut a, mut b) = (pair.a.conn(), pair.b.conn());
    for _ in 0..5 {
        let _: i64 = cmd(&["INCR", "c"]).query(&mut a).unwrap();
    }
    merged_and_collected(&pair);
    let _: i64 = cmd(&["INCR", "c"]).query(&mut a).unwrap();
    let _: i64 = cmd(&["INCR", "c"]).query(&mut b).unwrap();
    // Until each holds the other's increment: both at 6 have equal
    // digests too (CI saw wait_converged return there, on Redis 7.4.1).
    let mut both = || (get_counter(&mut a), get_counter(&mut b));
    common::wait_until(Duration::from_secs(30), || both() == (7, 7));
    or_explain(&pair, "c", || pair.wait_converged(Duration::from_secs(30)));
    assert_eq!(both(), (7, 7));
    merged_and_collected(&pair);
}

#[test]
fn a_type_change_against_increments_keeps_the_newest_type_on_both_nodes() {
    // With the link cut, one node writes a string that is no number over
    // c, the other increments c; the newer write's type wins whole
    // on both nodes, whichever it is (counted as a type change).
    for string_first in [true, false] {
        let pair = started_merging_counters();
        let _: () = cmd(&["SET", "c", "5"]).query(&mut pair.a.conn()).unwrap();
        pair.wait_converged(Duration::from_secs(10));
        common::cut(&pair);
        let string = || {
            let _: () = cmd(&["SET", "c", "abc"]).query(&mut pair.a.conn()).unwrap();
        };
        let incr = || {
            let _: i64 = cmd(&["INCRBY", "c", "2"])
                .query(&mut pair.b.conn())
                .unwrap();
        };
        if string_first {
            string();
            thread::sleep(Duration::from_millis(5));
            incr();
        } else {
            incr();
            thread::sleep(Duration::from_millis(5));
            string();
        }
        common::heal(&pair);
        or_explain(&pair, "c", || pair.wait_converged(Duration::from_secs(30)));
        let want = if string_first { "7" } else { "abc" };
        for node in [&pair.a, &pair.b] {
            let got: String = cmd(&["GET", "c"]).query(&mut node.conn()).unwrap();
            assert_eq!(got, want, "string first: {string_first}");
        }
        let changes = pair.a.fallbacks_for("type_change") + pair.b.fallbacks_for("type_change");
        assert!(changes > 0, "a type change is counted as one");
    }
}
