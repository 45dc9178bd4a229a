//! Writers who meet on hashes (issue 27, `merge-elements=yes`): a client on
//! each node changes fields of the same hash at the same time, every reply
//! is checked, and once the pair has converged every acknowledged update
//! must be in the result on both nodes: per field the newest write wins, a
//! removal (HDEL, DEL, a rewrite) removes only what its node had seen, and
//! every HINCRBY counts unless a write of a number or a removal had seen it.

mod common;

use std::collections::{HashMap, HashSet};
use std::thread;
use std::time::Duration;

use common::merging::{merged_and_collected, or_explain, started_merging};
use common::writers::{
    at_once, cmd, integer, lost_on_both, okay, report, write_all, PIPELINE, UPDATES,
};
use common::Pair;
use redis::Connection;

fn fields_of(c: &mut Connection, key: &str) -> HashMap<String, String> {
    redis::cmd("HGETALL").arg(key).query(c).unwrap()
}

/// How many of the fields `a{i}` and `b{i}` (value `i`) `key` lacks.
fn missing_fields(c: &mut Connection, key: &str) -> usize {
    let fields = fields_of(c, key);
    (0..UPDATES)
        .flat_map(|i| [format!("a{i}"), format!("b{i}")].map(|f| (f, i.to_string())))
        .filter(|(f, v)| fields.get(f) != Some(v))
        .count()
}

fn hset(side: &'static str) -> impl Fn(usize) -> redis::Cmd {
    move |i| cmd(&["HSET", "h", &format!("{side}{i}"), &i.to_string()])
}

#[test]
fn hset_of_distinct_fields_on_both_nodes_keeps_every_field() {
    let pair = started_merging();
    at_once(&pair, hset("a"), hset("b"), integer);
    let lost = lost_on_both(&pair, |c| missing_fields(c, "h"));
    report("HSET distinct fields", lost / 2, 2 * UPDATES);
    merged_and_collected(&pair);
}

#[test]
fn fields_written_on_both_nodes_while_the_link_is_cut_are_all_kept() {
    let pair = started_merging();
    common::cut(&pair);
    thread::scope(|s| {
        s.spawn(|| write_all(&pair.a, hset("a"), integer));
        s.spawn(|| write_all(&pair.b, hset("b"), integer));
    });
    assert!(pair.a.stat("merge_elements") == 1 && pair.b.stat("merge_elements") == 1);
    common::heal(&pair);
    pair.wait_converged(Duration::from_secs(30));
    let lost = lost_on_both(&pair, |c| missing_fields(c, "h"));
    report(
        "HSET distinct fields across a link cut",
        lost / 2,
        2 * UPDATES,
    );
    merged_and_collected(&pair);
}

#[test]
fn fields_written_in_transactions_and_scripts_are_all_kept() {
    // In MULTI the filter sees HSET when it is queued: A's changes ship as
    // fields claimed at the EXEC (Redis 7.2 and later, Valkey) or, on
    // Redis 7.0, as whole writes of the hash, which keep every field of
    // B's they had not seen. B's script calls pass the filter: they ship
    // as fields.
    let pair = started_merging();
    thread::scope(|s| {
        s.spawn(|| {
            let mut c = pair.a.conn();
            for i in 0..UPDATES {
                let (n,): (i64,) = redis::pipe()
                    .atomic()
                    .cmd("HSET")
                    .arg("h")
                    .arg(format!("a{i}"))
                    .arg(i)
                    .query(&mut c)
                    .unwrap();
                assert_eq!(n, 1);
            }
        });
        let script = "return redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])";
        let b = &pair.b;
        s.spawn(move || {
            write_all(
                b,
                |i| cmd(&["EVAL", script, "1", "h", &format!("b{i}"), &i.to_string()]),
                integer,
            )
        });
    });
    pair.wait_converged(Duration::from_secs(30));
    let lost = lost_on_both(&pair, |c| missing_fields(c, "h"));
    report(
        "HSET in MULTI on A against HSET in EVAL on B",
        lost / 2,
        2 * UPDATES,
    );
    merged_and_collected(&pair);
}

/// `UPDATES` updates on `node`, the `i`th adding 3 to field `n` of `h`
/// (with `incr`) and writing field `<side><i>` to `i`, each a transaction
/// when `multi`.
fn field_updates(node: &common::Node, side: &'static str, multi: bool, incr: bool) {
    let mut c = node.conn();
    for i in 0..UPDATES {
        let mut p = redis::pipe();
        if multi {
            p.atomic();
        }
        if incr {
            p.add_command(cmd(&["HINCRBY", "h", "n", "3"]));
        }
        let replies: Vec<i64> = p.add_command(hset(side)(i)).query(&mut c).unwrap();
        let (added, n) = (replies.last(), replies.first());
        assert!(added == Some(&1) && n >= Some(&1), "{side}{i}: {replies:?}");
    }
}

#[test]
fn field_increments_and_writes_in_transactions_on_both_nodes_all_count() {
    // Where the server names the filtered command's client (Redis 7.2 and
    // later, Valkey), the element changes a client queues in MULTI wait for
    // its EXEC, whose events claim them: transactions on both nodes at once
    // ship their fields, and every HINCRBY counts. On Redis 7.0 a
    // transaction ships as a whole write of the hash, which keeps the
    // fields of the other node's it had not seen; an HINCRBY of a field
    // that whole write holds ships as a write of its value (counted in
    // merge_fallbacks), and two writes of one field at once keep one: there
    // only A increments `n`, and B writes other fields outside MULTI.
    let pair = started_merging();
    let exact = common::filter_names_clients(&pair.a);
    thread::scope(|s| {
        s.spawn(|| field_updates(&pair.a, "a", true, true));
        s.spawn(|| field_updates(&pair.b, "b", exact, exact));
    });
    or_explain(&pair, "h", || pair.wait_converged(Duration::from_secs(30)));
    let want = if exact { 6 } else { 3 } * UPDATES as i64;
    let lost = lost_on_both(&pair, |c| {
        let counted: i64 = cmd(&["HGET", "h", "n"]).query(c).unwrap();
        let missing = missing_fields(c, "h");
        if missing > 0 || counted != want {
            eprintln!("n = {counted} (want {want}), {missing} fields missing");
        }
        missing + (want - counted).unsigned_abs() as usize / 3
    });
    let updates = if exact { 4 } else { 3 } * UPDATES;
    report("HINCRBY and HSET in MULTI on both nodes", lost / 2, updates);
    merged_and_collected(&pair);
}

#[test]
fn a_delete_on_one_node_keeps_fields_it_had_not_seen() {
    // B adds fields while A deletes the hash four times, each time in a
    // transaction that first reads what the delete removes. A field no
    // delete saw was added concurrently or later: it must survive; one a
    // delete saw must stay deleted.
    let pair = started_merging();
    let added = std::sync::atomic::AtomicUsize::new(0);
    let seen_by_deletes = thread::scope(|s| {
        s.spawn(|| {
            let mut c = pair.b.conn();
            for chunk in (0..UPDATES).collect::<Vec<_>>().chunks(PIPELINE) {
                let mut p = redis::pipe();
                for &i in chunk {
                    p.add_command(cmd(&["HSET", "h", &format!("b{i}"), "1"]));
                }
                let replies: Vec<i64> = p.query(&mut c).expect("HSET");
                assert!(replies.iter().all(|&r| r == 1));
                added.fetch_add(chunk.len(), std::sync::atomic::Ordering::SeqCst);
            }
        });
        let deleter = s.spawn(|| {
            let mut c = pair.a.conn();
            let mut seen = HashSet::new();
            for k in 1..=4 {
                while added.load(std::sync::atomic::Ordering::SeqCst) < k * UPDATES / 5 {
                    thread::sleep(Duration::from_micros(200));
                }
                let (fields, _): (HashMap<String, String>, i64) = redis::pipe()
                    .atomic()
                    .cmd("HGETALL")
                    .arg("h")
                    .cmd("DEL")
                    .arg("h")
                    .query(&mut c)
                    .unwrap();
                seen.extend(fields.into_keys());
            }
            seen
        });
        deleter.join().unwrap()
    });
    or_explain(&pair, "h", || pair.wait_converged(Duration::from_secs(30)));
    let unseen: Vec<String> = (0..UPDATES)
        .map(|i| format!("b{i}"))
        .filter(|f| !seen_by_deletes.contains(f))
        .collect();
    let mut resurrected = 0;
    let lost = lost_on_both(&pair, |c| {
        let fields = fields_of(c, "h");
        resurrected += seen_by_deletes
            .iter()
            .filter(|f| fields.contains_key(*f))
            .count();
        unseen.iter().filter(|f| !fields.contains_key(*f)).count()
    });
    eprintln!(
        "DEL against concurrent HSET: {} of {} deleted fields came back",
        resurrected / 2,
        seen_by_deletes.len()
    );
    report("DEL against concurrent HSET", lost / 2, unseen.len());
    assert_eq!(resurrected, 0, "fields a delete had seen came back");
    merged_and_collected(&pair);
}

#[test]
fn a_field_removed_on_one_node_keeps_a_write_of_it_the_removal_had_not_seen() {
    // Fields f0..f99 and g0..g99 rest on both nodes. With the link cut, B
    // writes f0..f99 and then A removes every field (its removals are the
    // newer writes): after the heal B's writes, unseen by A's removals,
    // survive; the g fields, which A had seen, stay removed.
    let pair = started_merging();
    let fields = |p: &'static str| (0..100).map(move |i| format!("{p}{i}"));
    let mut seed = cmd(&["HSET", "h"]);
    for f in fields("f").chain(fields("g")) {
        seed.arg(f).arg("old");
    }
    let _: i64 = seed.query(&mut pair.a.conn()).unwrap();
    pair.wait_converged(Duration::from_secs(10));
    common::wait_until(Duration::from_secs(10), || {
        pair.a.stat("merge_elements") == 0
    });
    common::cut(&pair);
    let mut b = pair.b.conn();
    for f in fields("f") {
        let _: i64 = cmd(&["HSET", "h", &f, "b"]).query(&mut b).unwrap();
    }
    let mut a = pair.a.conn();
    for f in fields("f").chain(fields("g")) {
        let removed: i64 = cmd(&["HDEL", "h", &f]).query(&mut a).unwrap();
        assert_eq!(removed, 1);
    }
    common::heal(&pair);
    or_explain(&pair, "h", || pair.wait_converged(Duration::from_secs(30)));
    let lost = lost_on_both(&pair, |c| {
        let held = fields_of(c, "h");
        let missing = fields("f").filter(|f| held.get(f).map(String::as_str) != Some("b"));
        missing.count() + fields("g").filter(|g| held.contains_key(g)).count()
    });
    report("HDEL on A against unseen HSET on B", lost / 2, 200);
    merged_and_collected(&pair);
}

#[test]
fn expire_on_one_node_survives_fields_added_on_the_other() {
    let pair = started_merging();
    let _: () = redis::cmd("HSET")
        .arg("k")
        .arg("f")
        .arg("v")
        .query(&mut pair.a.conn())
        .unwrap();
    pair.wait_converged(Duration::from_secs(10));
    at_once(
        &pair,
        |i| cmd(&["EXPIRE", "k", &(100_000 + i).to_string()]),
        |i| cmd(&["HSET", "k", &format!("b{i}"), "1"]),
        integer,
    );
    let lost = lost_on_both(&pair, |c| {
        let ttl: i64 = redis::cmd("TTL").arg("k").query(c).unwrap();
        let fields = fields_of(c, "k");
        let missing = (0..UPDATES)
            .filter(|i| !fields.contains_key(&format!("b{i}")))
            .count();
        missing + usize::from(ttl < 100_000)
    });
    // Every node's fields count, and the TTL once per node.
    report("EXPIRE against concurrent HSET", lost, 2 * (UPDATES + 1));
    merged_and_collected(&pair);
}

#[test]
fn expire_on_one_node_does_not_bring_back_fields_removed_on_the_other() {
    // Fields f0..f99 rest on both nodes. With the link cut, B removes them
    // and then A sets a TTL on the hash (the newer change): an EXPIRE
    // writes no field, so after the heal the fields are gone on both
    // nodes and the hash has A's TTL on both. Also for a set and SREM.
    let pair = started_merging();
    let names = || (0..100).map(|i| format!("f{i}"));
    let (mut h, mut s) = (
        cmd(&["HSET", "h", "keep", "1"]),
        cmd(&["SADD", "s", "keep"]),
    );
    for f in names() {
        h.arg(&f).arg("old");
        s.arg(&f);
    }
    let _: i64 = h.query(&mut pair.a.conn()).unwrap();
    let _: i64 = s.query(&mut pair.a.conn()).unwrap();
    pair.wait_converged(Duration::from_secs(10));
    for node in [&pair.a, &pair.b] {
        common::wait_until(Duration::from_secs(10), || node.stat("merge_elements") == 0);
    }
    common::cut(&pair);
    let mut b = pair.b.conn();
    for f in names() {
        let _: i64 = cmd(&["HDEL", "h", &f]).query(&mut b).unwrap();
        let _: i64 = cmd(&["SREM", "s", &f]).query(&mut b).unwrap();
    }
    thread::sleep(Duration::from_millis(5));
    for key in ["h", "s"] {
        let set: i64 = cmd(&["EXPIRE", key, "100000"])
            .query(&mut pair.a.conn())
            .unwrap();
        assert_eq!(set, 1);
    }
    common::heal(&pair);
    or_explain(&pair, "h", || pair.wait_converged(Duration::from_secs(30)));
    let lost = lost_on_both(&pair, |c| {
        let back = fields_of(c, "h").len() - 1;
        let members: HashSet<String> = cmd(&["SMEMBERS", "s"]).query(c).unwrap();
        let ttls: Vec<i64> = ["h", "s"]
            .iter()
            .map(|k| cmd(&["TTL", k]).query(c).unwrap())
            .collect();
        back + members.len() - 1 + ttls.iter().filter(|t| **t < 99_000).count()
    });
    report("EXPIRE on A against HDEL and SREM on B", lost / 2, 202);
    merged_and_collected(&pair);
}

#[test]
fn a_delete_on_one_node_against_expire_and_a_write_on_the_other_keeps_one_ttl() {
    // Cut: A deletes h; B sets a TTL on h and writes a field. B's TTL and
    // field were unseen by A's delete: after the heal h is {g} with B's
    // TTL on both nodes (the digests compare TTLs too).
    let pair = started_merging();
    seeded_at_rest(&pair, "h");
    common::cut(&pair);
    let _: i64 = cmd(&["DEL", "h"]).query(&mut pair.a.conn()).unwrap();
    let mut b = pair.b.conn();
    let _: i64 = cmd(&["EXPIRE", "h", "100000"]).query(&mut b).unwrap();
    let _: i64 = cmd(&["HSET", "h", "g", "1"]).query(&mut b).unwrap();
    common::heal(&pair);
    or_explain(&pair, "h", || pair.wait_converged(Duration::from_secs(30)));
    for node in [&pair.a, &pair.b] {
        let mut c = node.conn();
        assert_eq!(fields_of(&mut c, "h").len(), 1);
        let ttl: i64 = cmd(&["TTL", "h"]).query(&mut c).unwrap();
        assert!(ttl > 99_000, "B's TTL: {ttl}");
    }
    merged_and_collected(&pair);
}

#[test]
fn a_hash_that_expires_and_is_written_again_in_one_iteration_ships_as_new() {
    // In one pipeline A gives h a TTL of 5 ms, sleeps past it and writes a
    // field: the write finds h expired and makes a new h {f}. B must end
    // with that h, not its old fields plus f.
    let pair = started_merging();
    seeded_at_rest(&pair, "h");
    let (n,): (i64,) = redis::pipe()
        .cmd("PEXPIRE")
        .arg("h")
        .arg(5)
        .ignore()
        .cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.02")
        .ignore()
        .cmd("HSET")
        .arg("h")
        .arg("f")
        .arg("v")
        .query(&mut pair.a.conn())
        .unwrap();
    assert_eq!(n, 1, "h had expired: f is new");
    or_explain(&pair, "h", || pair.wait_converged(Duration::from_secs(30)));
    let held = fields_of(&mut pair.b.conn(), "h");
    assert_eq!(held.keys().collect::<Vec<_>>(), vec!["f"]);
    // A TTL set in an earlier iteration reached B, which expires the key
    // too: a write after the expiry makes the same new key on both.
    let _: i64 = cmd(&["HSET", "g", "old", "1"])
        .query(&mut pair.a.conn())
        .unwrap();
    let _: i64 = cmd(&["PEXPIRE", "g", "20"])
        .query(&mut pair.a.conn())
        .unwrap();
    pair.wait_converged(Duration::from_secs(10));
    thread::sleep(Duration::from_millis(40));
    let n: i64 = cmd(&["HSET", "g", "f", "v"])
        .query(&mut pair.a.conn())
        .unwrap();
    assert_eq!(n, 1, "g had expired: f is new");
    or_explain(&pair, "g", || pair.wait_converged(Duration::from_secs(30)));
    let held = fields_of(&mut pair.b.conn(), "g");
    assert_eq!(held.keys().collect::<Vec<_>>(), vec!["f"]);
}

#[test]
fn a_node_that_lost_its_data_gets_a_held_hash_whole_in_the_full_sync() {
    // g0..g9 rest on both nodes. Cut: A writes one more field (the hash
    // holds metadata until B has it); B restarts without persistence and
    // comes back empty. The full sync ships h as its state: B must get
    // the fields at rest too, not only the one changed.
    let mut pair = started_merging();
    seeded_at_rest(&pair, "h");
    common::cut(&pair);
    let _: i64 = cmd(&["HSET", "h", "new", "1"])
        .query(&mut pair.a.conn())
        .unwrap();
    assert_eq!(pair.a.stat("merge_elements"), 1);
    pair.b.restart();
    common::heal(&pair);
    or_explain(&pair, "h", || pair.wait_converged(Duration::from_secs(30)));
    assert_eq!(fields_of(&mut pair.b.conn(), "h").len(), 11);
    merged_and_collected(&pair);
}

/// A pair merging hashes, each node with an AOF written at every change.
fn merging_hashes_with_aof() -> Pair {
    Pair::start_with_aof(&["merge-hashes=yes"])
}

#[test]
fn field_merges_survive_a_kill_of_one_node_with_aof() {
    // With the link cut, B writes fields f* that A then removes (unseen by
    // A's removals) and A removes fields g* (seen); each adds fields of its
    // own. A is killed and starts again from its AOF, which holds its
    // field metadata: after the heal B's f* writes survive, the g* stay
    // removed, and every added field is on both nodes.
    let mut pair = merging_hashes_with_aof();
    let names = |p: &'static str| (0..100).map(move |i| format!("{p}{i}"));
    let mut seed = cmd(&["HSET", "h"]);
    for f in names("f").chain(names("g")) {
        seed.arg(f).arg("old");
    }
    let _: i64 = seed.query(&mut pair.a.conn()).unwrap();
    pair.wait_converged(Duration::from_secs(10));
    common::wait_until(Duration::from_secs(10), || {
        pair.a.stat("merge_elements") == 0
    });
    common::cut(&pair);
    let (mut a, mut b) = (pair.a.conn(), pair.b.conn());
    for (f, i) in names("f").zip(0..) {
        let _: i64 = cmd(&["HSET", "h", &f, "b", &format!("b{i}"), "1"])
            .query(&mut b)
            .unwrap();
    }
    for (f, i) in names("f").chain(names("g")).zip(0..) {
        let _: i64 = cmd(&["HDEL", "h", &f]).query(&mut a).unwrap();
        let _: i64 = cmd(&["HSET", "h", &format!("a{i}"), "1"])
            .query(&mut a)
            .unwrap();
    }
    assert_eq!(pair.a.stat("merge_elements"), 1);
    pair.a.restart();
    assert_eq!(
        pair.a.stat("merge_elements"),
        1,
        "the metadata did not come back from the AOF"
    );
    common::heal(&pair);
    or_explain(&pair, "h", || pair.wait_converged(Duration::from_secs(30)));
    let lost = lost_on_both(&pair, |c| {
        let held = fields_of(c, "h");
        let f_lost = names("f").filter(|f| held.get(f).map(String::as_str) != Some("b"));
        let g_back = names("g").filter(|g| held.contains_key(g)).count();
        let added = (0..200)
            .map(|i| format!("a{i}"))
            .chain((0..100).map(|i| format!("b{i}")));
        f_lost.count() + g_back + added.filter(|f| !held.contains_key(f)).count()
    });
    report("HDEL and HSET across a kill with AOF", lost / 2, 500);
    merged_and_collected(&pair);
}

#[test]
fn removals_of_fields_at_rest_reach_a_node_that_writes_all_the_time() {
    // A writes other keys without pause, so its own part of the merge
    // bound keeps moving with B's acks; B removes fields that rest on both
    // nodes, one by one, and then deletes a second hash whole. What a
    // removal on B had seen must include all of A's changes B applied,
    // not only those A's last ack told it of: else A keeps the fields.
    let pair = started_merging();
    let names = |p: &'static str| (0..200).map(move |i| format!("{p}{i}"));
    for key in ["h", "g"] {
        let mut seed = cmd(&["HSET", key]);
        for f in names("f") {
            seed.arg(f).arg("old");
        }
        let _: i64 = seed.query(&mut pair.a.conn()).unwrap();
    }
    pair.wait_converged(Duration::from_secs(10));
    for node in [&pair.a, &pair.b] {
        common::wait_until(Duration::from_secs(10), || node.stat("merge_elements") == 0);
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    thread::scope(|s| {
        s.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                write_all(&pair.a, |i| cmd(&["SET", &format!("x{i}"), "1"]), okay);
            }
        });
        s.spawn(|| {
            let mut b = pair.b.conn();
            for f in names("f") {
                let removed: i64 = cmd(&["HDEL", "h", &f]).query(&mut b).unwrap();
                assert_eq!(removed, 1);
                thread::sleep(Duration::from_micros(300));
            }
            let _: i64 = cmd(&["DEL", "g"]).query(&mut b).unwrap();
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
    });
    or_explain(&pair, "h", || pair.wait_converged(Duration::from_secs(30)));
    let lost = lost_on_both(&pair, |c| fields_of(c, "h").len() + fields_of(c, "g").len());
    report(
        "HDEL and DEL of fields at rest against writes elsewhere",
        lost,
        400,
    );
    merged_and_collected(&pair);
}

/// Seeds hash `key` with fields g0..g9 on A and waits until both nodes
/// hold it at rest.
fn seeded_at_rest(pair: &Pair, key: &str) {
    let mut seed = cmd(&["HSET", key]);
    for i in 0..10 {
        seed.arg(format!("g{i}")).arg("old");
    }
    let _: i64 = seed.query(&mut pair.a.conn()).unwrap();
    pair.wait_converged(Duration::from_secs(10));
    for node in [&pair.a, &pair.b] {
        common::wait_until(Duration::from_secs(10), || node.stat("merge_elements") == 0);
    }
}

#[test]
fn a_flush_on_one_node_against_a_field_written_later_on_the_other_converges() {
    // With the link cut A flushes; B then writes a field of a hash A had
    // at rest. The hash is newer than the flush on B, so it survives there
    // whole; A gets the field: the pair must end equal, the field on both.
    let pair = started_merging();
    seeded_at_rest(&pair, "h");
    common::cut(&pair);
    let _: () = redis::cmd("FLUSHDB").query(&mut pair.a.conn()).unwrap();
    thread::sleep(Duration::from_millis(5));
    let _: i64 = cmd(&["HSET", "h", "f", "new"])
        .query(&mut pair.b.conn())
        .unwrap();
    common::heal(&pair);
    or_explain(&pair, "h", || pair.wait_converged(Duration::from_secs(30)));
    let lost = lost_on_both(&pair, |c| usize::from(!fields_of(c, "h").contains_key("f")));
    report("FLUSHDB on A against a later HSET on B", lost, 2);
}

#[test]
fn a_delete_made_while_cut_removes_what_it_had_seen_and_keeps_the_rest() {
    // With the link cut A deletes a hash it holds at rest; B adds a field
    // and removes one. After the heal: B's new field (unseen by A's
    // delete) is there, every field A's delete had seen is gone.
    let pair = started_merging();
    seeded_at_rest(&pair, "h");
    common::cut(&pair);
    let _: i64 = cmd(&["DEL", "h"]).query(&mut pair.a.conn()).unwrap();
    let mut b = pair.b.conn();
    let _: i64 = cmd(&["HSET", "h", "b", "new"]).query(&mut b).unwrap();
    let _: i64 = cmd(&["HDEL", "h", "g0"]).query(&mut b).unwrap();
    common::heal(&pair);
    or_explain(&pair, "h", || pair.wait_converged(Duration::from_secs(30)));
    let lost = lost_on_both(&pair, |c| {
        let held = fields_of(c, "h");
        let back = (0..10)
            .filter(|i| held.contains_key(&format!("g{i}")))
            .count();
        back + usize::from(held.get("b").map(String::as_str) != Some("new"))
    });
    report("DEL while cut against HSET and HDEL", lost, 22);
    merged_and_collected(&pair);
}

#[test]
fn a_field_written_over_a_value_of_another_type_converges() {
    // With the link cut B sets the key to a string, then A (later) writes
    // a field of the hash it held: one whole value wins on both nodes.
    let pair = started_merging();
    seeded_at_rest(&pair, "h");
    common::cut(&pair);
    let _: () = cmd(&["SET", "h", "str"]).query(&mut pair.b.conn()).unwrap();
    thread::sleep(Duration::from_millis(5));
    let _: i64 = cmd(&["HSET", "h", "f", "new"])
        .query(&mut pair.a.conn())
        .unwrap();
    common::heal(&pair);
    or_explain(&pair, "h", || pair.wait_converged(Duration::from_secs(30)));
    let kind: String = redis::cmd("TYPE")
        .arg("h")
        .query(&mut pair.a.conn())
        .unwrap();
    eprintln!("SET on B against a later HSET on A: both hold a {kind}");
}

/// Update `i` of the HINCRBY family on field `f` of `h`: +1, +3, -1, +2 in
/// turn (+5 a cycle).
fn hincrby_family(i: usize) -> redis::Cmd {
    let by = ["1", "3", "-1", "2"][i % 4];
    cmd(&["HINCRBY", "h", "f", by])
}

fn field_f(c: &mut Connection) -> i64 {
    redis::cmd("HGET").arg("h").arg("f").query(c).unwrap()
}

/// Both nodes ran the HINCRBY family `UPDATES` times: f holds every
/// increment on both (each missing or extra unit counts as one lost).
fn every_increment_counted(pair: &Pair, scenario: &str) {
    let want = 2 * (UPDATES as i64 / 4) * 5;
    let lost = lost_on_both(pair, |c| (want - field_f(c)).unsigned_abs() as usize);
    report(scenario, lost / 2, 2 * UPDATES);
}

#[test]
fn hincrby_of_one_field_on_both_nodes_counts_every_increment() {
    let pair = started_merging();
    // Another field written beside, so the hash is more than a counter.
    let _: i64 = cmd(&["HSET", "h", "name", "x"])
        .query(&mut pair.a.conn())
        .unwrap();
    or_explain(&pair, "h", || {
        at_once(&pair, hincrby_family, hincrby_family, integer)
    });
    every_increment_counted(&pair, "HINCRBY one field");
    merged_and_collected(&pair);
}

#[test]
fn increments_of_one_field_made_while_the_link_is_cut_all_count() {
    let pair = started_merging();
    common::cut(&pair);
    thread::scope(|s| {
        s.spawn(|| write_all(&pair.a, hincrby_family, integer));
        s.spawn(|| write_all(&pair.b, hincrby_family, integer));
    });
    common::heal(&pair);
    or_explain(&pair, "h", || pair.wait_converged(Duration::from_secs(30)));
    every_increment_counted(&pair, "HINCRBY one field across a link cut");
    merged_and_collected(&pair);
}

#[test]
fn a_write_or_removal_of_a_counting_field_keeps_the_increments_it_had_not_seen() {
    // While cut: A increments f and g 10 times, then HSETs f to 1000 and
    // HDELs g (both had seen A's increments); B increments each 7 times,
    // unseen by them. After the heal: f = 1000 + 7, g = 7 on both.
    let pair = started_merging();
    common::cut(&pair);
    let (mut a, mut b) = (pair.a.conn(), pair.b.conn());
    for _ in 0..10 {
        for f in ["f", "g"] {
            let _: i64 = cmd(&["HINCRBY", "h", f, "2"]).query(&mut a).unwrap();
        }
    }
    let _: i64 = cmd(&["HSET", "h", "f", "1000"]).query(&mut a).unwrap();
    let _: i64 = cmd(&["HDEL", "h", "g"]).query(&mut a).unwrap();
    for _ in 0..7 {
        for f in ["f", "g"] {
            let _: i64 = cmd(&["HINCRBY", "h", f, "1"]).query(&mut b).unwrap();
        }
    }
    common::heal(&pair);
    or_explain(&pair, "h", || pair.wait_converged(Duration::from_secs(30)));
    for node in [&pair.a, &pair.b] {
        let fields = fields_of(&mut node.conn(), "h");
        assert_eq!(
            fields.get("f").map(String::as_str),
            Some("1007"),
            "{fields:?}"
        );
        assert_eq!(fields.get("g").map(String::as_str), Some("7"), "{fields:?}");
    }
    merged_and_collected(&pair);
}

#[test]
fn increments_of_one_field_survive_a_kill_of_one_node_with_aof() {
    // Cut, both increment; A is killed and starts again from its AOF, which
    // holds its increments' metadata: after the heal each counts once.
    let mut pair = merging_hashes_with_aof();
    common::cut(&pair);
    for node in [&pair.a, &pair.b] {
        let mut c = node.conn();
        for i in 0..UPDATES {
            let _: i64 = hincrby_family(i).query(&mut c).unwrap();
        }
    }
    pair.a.restart();
    assert_eq!(
        pair.a.stat("merge_elements"),
        1,
        "the metadata did not come back from the AOF"
    );
    common::heal(&pair);
    or_explain(&pair, "h", || pair.wait_converged(Duration::from_secs(30)));
    every_increment_counted(&pair, "HINCRBY one field across a kill with AOF");
    merged_and_collected(&pair);
}

#[test]
fn a_field_at_rest_incremented_by_the_peer_keeps_its_value_across_a_restart() {
    // f rests at 100 on both; B increments it (A's element: 100 at rest
    // plus B's increment), the link is cut, A is killed and starts again
    // from its AOF, B increments again: after the heal both hold 102 (A's
    // table must bring back the value at rest, not only the increment).
    let mut pair = merging_hashes_with_aof();
    let _: i64 = cmd(&["HSET", "h", "f", "100"])
        .query(&mut pair.a.conn())
        .unwrap();
    pair.wait_converged(Duration::from_secs(10));
    common::wait_until(Duration::from_secs(10), || {
        pair.a.stat("merge_elements") == 0 && pair.b.stat("merge_elements") == 0
    });
    let _: i64 = cmd(&["HINCRBY", "h", "f", "1"])
        .query(&mut pair.b.conn())
        .unwrap();
    common::wait_until(Duration::from_secs(10), || {
        let held: Option<i64> = redis::cmd("HGET")
            .arg("h")
            .arg("f")
            .query(&mut pair.a.conn())
            .unwrap();
        held == Some(101)
    });
    common::cut(&pair);
    pair.a.restart();
    let _: i64 = cmd(&["HINCRBY", "h", "f", "1"])
        .query(&mut pair.b.conn())
        .unwrap();
    common::heal(&pair);
    or_explain(&pair, "h", || pair.wait_converged(Duration::from_secs(30)));
    for node in [&pair.a, &pair.b] {
        assert_eq!(field_f(&mut node.conn()), 102);
    }
    merged_and_collected(&pair);
}

#[test]
fn the_tombstone_of_a_held_hash_deleted_is_collected() {
    // A hash with element metadata ships its delete as its merge state:
    // the tombstone must still become collectable once the peer
    // acknowledged it (it stayed for good, found by tests/convergence.rs).
    let pair = started_merging();
    common::cut(&pair);
    let mut a = pair.a.conn();
    let _: i64 = cmd(&["HSET", "h", "f", "1"]).query(&mut a).unwrap();
    let _: i64 = cmd(&["SADD", "s", "m"]).query(&mut a).unwrap();
    let _: i64 = cmd(&["DEL", "h", "s"]).query(&mut a).unwrap();
    assert!(pair.a.stat("tombstones") >= 2, "{:?}", pair.a.status());
    common::heal(&pair);
    pair.wait_converged(Duration::from_secs(30));
    let collected = common::wait_until(Duration::from_secs(10), || {
        pair.a.stat("tombstones") + pair.b.stat("tombstones") == 0
    });
    assert!(
        collected,
        "A {:?}\nB {:?}",
        pair.a.status(),
        pair.b.status()
    );
    merged_and_collected(&pair);
}

/// A node that has not taken its peer's coverage yet (here: it never
/// does, its own first-contact request is never acknowledged) still
/// applies and acknowledges the peer's changes. The peer's merge bound of
/// its own changes must rise no higher than what that node says it holds:
/// the node's whole writes carry a removal no higher, and a bound above it
/// took such a write for one that had not seen the fields at rest, which
/// then stayed on the peer only (found by CI on Redis 8.0.6: a field an
/// `HEXPIRE 0` deleted on A stayed on B).
#[test]
fn a_whole_write_made_before_its_node_took_the_peer_s_coverage_removes_what_it_saw() {
    let merging = ["merge-elements=yes"];
    let (pa, pb) = (common::free_port(), common::free_port());
    let (ia, ib) = (common::test_ip(), common::test_ip_b());
    let a = common::Node::start("a", common::module_args_at(&ia, pa, &ib, 1, &merging));
    // A drops every ack it receives: its request for what it lost (it is
    // new) stays unanswered, and it takes none of B's coverage.
    a.debug(&["DROP-ACKS", "ON"]);
    let b = common::Node::start("b", common::module_args_at(&ib, pb, &ia, pa, &merging));
    a.set_peer_port(&pb.to_string());
    let pair = Pair { a, b };
    pair.wait_linked();
    let (mut a, mut b) = (pair.a.conn(), pair.b.conn());
    run(&mut b, &["HSET", "h", "f1", "1", "f2", "2"]);
    assert!(common::wait_until(Duration::from_secs(10), || {
        fields_of(&mut a, "h").len() == 2
    }));
    // A later change of B's that A applies and acknowledges: B's bound of
    // its own changes would pass the stamp of f1 that A's write observed.
    run(&mut b, &["SET", "later", "1"]);
    assert!(common::wait_until(Duration::from_secs(10), || {
        redis::cmd("EXISTS")
            .arg("later")
            .query::<bool>(&mut a)
            .unwrap()
    }));
    thread::sleep(Duration::from_millis(500));
    // A whole write of h on A (COPY over it): f1 goes.
    run(&mut a, &["HSET", "tmp", "f2", "2"]);
    run(&mut a, &["COPY", "tmp", "h", "REPLACE"]);
    or_explain(&pair, "h", || {
        assert!(
            common::wait_until(Duration::from_secs(10), || {
                fields_of(&mut b, "h") == fields_of(&mut a, "h")
            }),
            "B kept a field A's whole write removed: A {:?}, B {:?}",
            fields_of(&mut a, "h"),
            fields_of(&mut b, "h")
        );
    });
    assert_eq!(fields_of(&mut b, "h").len(), 1);
}

/// Runs `args` on `c`; any reply but an error.
fn run(c: &mut Connection, args: &[&str]) {
    let reply: redis::RedisResult<redis::Value> = cmd(args).query(c);
    reply.unwrap_or_else(|e| panic!("{args:?}: {e}"));
}

/// The peer writes merged fields, members and pushes through the key API:
/// its clients see the writes (keyspace events, an aborted `WATCH`, its
/// replica's copy, the scores exact) but no command of the module's (INFO
/// commandstats counts only theirs).
#[test]
fn merged_elements_reach_the_peer_as_writes_and_as_no_command() {
    let pair = started_merging();
    let mut args = common::module_args(common::free_port(), common::free_port(), &[]);
    args.extend([
        "--replicaof".into(),
        "127.0.0.1".into(),
        pair.b.port.to_string(),
    ]);
    let replica = common::Node::start("b-replica", args);
    let (mut a, mut b) = (pair.a.conn(), pair.b.conn());
    run(
        &mut b,
        &["CONFIG", "SET", "notify-keyspace-events", "Kghzl"],
    );
    run(&mut b, &["CONFIG", "RESETSTAT"]);
    let mut watcher = pair.b.conn();
    run(&mut watcher, &["WATCH", "h", "z", "l"]);
    let mut listener = pair.b.conn();
    let mut events = listener.as_pubsub();
    events.psubscribe("__keyspace@0__:[hzl]").unwrap();
    events
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let steps: [(&[&str], &str, usize); 6] = [
        (&["HSET", "h", "f1", "1", "f2", "2"], "HLEN", 2),
        (&["HDEL", "h", "f1"], "HLEN", 1),
        (
            &["ZADD", "z", "0.1", "m1", "1e300", "m2", "-inf", "m3"],
            "ZCARD",
            3,
        ),
        (&["ZREM", "z", "m1"], "ZCARD", 2),
        (&["RPUSH", "l", "a", "b"], "LLEN", 2),
        (&["LPUSH", "l", "x", "y"], "LLEN", 4),
    ];
    for (command, length, left) in steps {
        run(&mut a, command);
        let arrived = common::wait_until(Duration::from_secs(10), || {
            redis::cmd(length)
                .arg(command[1])
                .query::<usize>(&mut b)
                .unwrap()
                == left
        });
        assert!(arrived, "{command:?} did not reach B");
    }
    let mut seen = Vec::new();
    while seen.len() < steps.len() {
        seen.push(
            events
                .get_message()
                .unwrap()
                .get_payload::<String>()
                .unwrap(),
        );
    }
    assert_eq!(seen, ["hset", "hdel", "zadd", "zrem", "rpush", "lpush"]);
    let exec: redis::Value = redis::pipe()
        .atomic()
        .cmd("GET")
        .arg("h")
        .query(&mut watcher)
        .unwrap();
    assert_eq!(exec, redis::Value::Nil, "WATCH h z l saw no write on B");
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut b)
        .unwrap();
    for command in ["hset", "hdel", "zadd", "zrem", "rpush", "lpush"] {
        assert!(
            !stats.contains(&format!("cmdstat_{command}:")),
            "{command} on B:\n{stats}"
        );
    }
    let zset = |c: &mut Connection| -> Vec<(String, f64)> {
        redis::cmd("ZRANGE")
            .arg("z")
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(c)
            .unwrap()
    };
    let list = |c: &mut Connection| -> Vec<String> {
        redis::cmd("LRANGE")
            .arg("l")
            .arg(0)
            .arg(-1)
            .query(c)
            .unwrap()
    };
    assert_eq!(zset(&mut b), zset(&mut a));
    assert_eq!(list(&mut b), ["y", "x", "a", "b"]);
    let mut r = replica.conn();
    let same = common::wait_until(Duration::from_secs(10), || {
        fields_of(&mut r, "h") == fields_of(&mut b, "h")
            && zset(&mut r) == zset(&mut b)
            && list(&mut r) == list(&mut b)
    });
    assert!(
        same,
        "B's replica: {:?} {:?} {:?}",
        fields_of(&mut r, "h"),
        zset(&mut r),
        list(&mut r)
    );
    merged_and_collected(&pair);
}

/// A peer whose server cannot propagate the merged write (its HSET renamed
/// away) writes nothing: the apply fails as the command would, and the
/// peer's replica holds what the peer holds (the key API wrote before it
/// propagated, the replica would have missed the field).
#[test]
fn a_merged_write_the_peer_cannot_propagate_is_not_written_there() {
    let merging = ["merge-elements=yes"];
    let (pa, pb) = (common::free_port(), common::free_port());
    let (ia, ib) = (common::test_ip(), common::test_ip_b());
    let a = common::Node::start("a", common::module_args_at(&ia, pa, &ib, pb, &merging));
    let mut args = common::module_args_at(&ib, pb, &ia, pa, &merging);
    args.extend(["--rename-command".into(), "HSET".into(), String::new()]);
    let b = common::Node::start("b", args);
    let pair = Pair { a, b };
    pair.wait_linked();
    let mut args = common::module_args(common::free_port(), common::free_port(), &[]);
    args.extend([
        "--replicaof".into(),
        "127.0.0.1".into(),
        pair.b.port.to_string(),
    ]);
    let replica = common::Node::start("b-replica", args);
    let mut r = replica.conn();
    let linked = common::wait_until(Duration::from_secs(10), || {
        common::info_field(&replica, "replication", "master_link_status") == "up"
    });
    assert!(linked, "B's replica never linked");
    run(&mut pair.a.conn(), &["HSET", "h", "f", "1"]);
    let failed = common::wait_until(Duration::from_secs(10), || pair.b.stat("apply_errors") > 0);
    assert!(
        failed,
        "B applied an HSET it cannot run: {:?}",
        pair.b.status()
    );
    run(&mut pair.b.conn(), &["SET", "after", "1"]);
    let caught_up = common::wait_until(Duration::from_secs(10), || {
        redis::cmd("EXISTS")
            .arg("after")
            .query::<bool>(&mut r)
            .unwrap()
    });
    assert!(caught_up, "B's replica never got B's own write");
    assert_eq!(fields_of(&mut pair.b.conn(), "h"), fields_of(&mut r, "h"));
    assert!(fields_of(&mut r, "h").is_empty());
}
