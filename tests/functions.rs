//! Function libraries (`FUNCTION LOAD/DELETE/FLUSH/RESTORE`), which Redis
//! replicates to its replicas without a keyspace event, reach the peer one
//! library at a time: directly, in MULTI/EXEC, after a link cut (last
//! writer wins per library), after a restart from the AOF, and in the full
//! sync of a fresh node.

mod common;

use std::time::Duration;

use common::{cut, free_port, module_args_at, test_ip, test_ip_b, wait_until, Node, Pair};
use redis::{Connection, Value};

const SETTLE: Duration = Duration::from_secs(10);

fn library(name: &str, function: &str, reply: &str) -> String {
    format!(
        "#!lua name={name}\nredis.register_function('{function}', function(keys, args) return '{reply}' end)"
    )
}

fn load(c: &mut Connection, code: &str, replace: bool) {
    let mut cmd = redis::cmd("FUNCTION");
    cmd.arg("LOAD");
    if replace {
        cmd.arg("REPLACE");
    }
    let _: String = cmd.arg(code).query(c).unwrap();
}

/// What `FCALL function 0` answers on `node` (`None`: an error, e.g. no
/// such function).
fn fcall(node: &Node, function: &str) -> Option<String> {
    redis::cmd("FCALL")
        .arg(function)
        .arg(0)
        .query(&mut node.conn())
        .ok()
}

/// The names of the libraries `node` holds, sorted.
fn libraries(node: &Node) -> Vec<String> {
    let list: Vec<Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query(&mut node.conn())
        .unwrap();
    let mut names: Vec<String> = list
        .iter()
        .filter_map(|lib| {
            let Value::Array(fields) = lib else {
                return None;
            };
            let at = fields
                .iter()
                .position(|f| matches!(f, Value::BulkString(b) if b == b"library_name"))?;
            redis::from_redis_value(fields.get(at + 1)?).ok()
        })
        .collect();
    names.sort();
    names
}

fn wait_fcall(node: &Node, function: &str, want: Option<&str>) {
    let mut got = None;
    let ok = wait_until(SETTLE, || {
        got = fcall(node, function);
        got.as_deref() == want
    });
    assert!(
        ok,
        "FCALL {function} on {}: {got:?}, wanted {want:?}; {:?}",
        node.name,
        node.status()
    );
}

fn wait_same_libraries(pair: &Pair) -> Vec<String> {
    let mut last = (Vec::new(), Vec::new());
    let ok = wait_until(SETTLE, || {
        last = (libraries(&pair.a), libraries(&pair.b));
        last.0 == last.1
    });
    assert!(ok, "libraries differ: a={:?} b={:?}", last.0, last.1);
    last.0
}

#[test]
fn function_loads_replacements_deletes_and_flushes_reach_the_peer() {
    let pair = Pair::start();
    let (mut a, mut b) = (pair.a.conn(), pair.b.conn());
    load(&mut a, &library("lib1", "f1", "one"), false);
    wait_fcall(&pair.b, "f1", Some("one"));
    load(&mut b, &library("lib1", "f1", "uno"), true);
    wait_fcall(&pair.a, "f1", Some("uno"));
    load(&mut b, &library("lib2", "f2", "two"), false);
    wait_fcall(&pair.a, "f2", Some("two"));
    let _: String = redis::cmd("FUNCTION")
        .arg("DELETE")
        .arg("lib1")
        .query(&mut a)
        .unwrap();
    wait_fcall(&pair.b, "f1", None);
    assert_eq!(wait_same_libraries(&pair), ["lib2"]);
    // FUNCTION RESTORE of a dump, then FLUSH.
    let dump: Vec<u8> = redis::cmd("FUNCTION").arg("DUMP").query(&mut b).unwrap();
    let _: String = redis::cmd("FUNCTION").arg("FLUSH").query(&mut b).unwrap();
    wait_fcall(&pair.a, "f2", None);
    let _: String = redis::cmd("FUNCTION")
        .arg("RESTORE")
        .arg(dump)
        .query(&mut a)
        .unwrap();
    wait_fcall(&pair.b, "f2", Some("two"));
    // Reads change nothing and ship nothing. A's sender counts an entry
    // after writing it, so B may apply the RESTORE before A counts it
    // (seen once in a full run: `before` was one short): counted first.
    assert!(wait_until(SETTLE, || pair.a.stat("entries_sent")
        >= pair.b.stat("entries_applied")));
    let before = pair.a.stat("entries_sent");
    let _: Value = redis::cmd("FUNCTION").arg("LIST").query(&mut a).unwrap();
    let _: Value = redis::cmd("FUNCTION").arg("STATS").query(&mut a).unwrap();
    let _: Value = redis::cmd("FUNCTION").arg("DUMP").query(&mut a).unwrap();
    let _: () = redis::cmd("SET")
        .arg("marker")
        .arg("1")
        .query(&mut a)
        .unwrap();
    assert!(wait_until(SETTLE, || pair.a.stat("entries_sent") > before));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        pair.a.stat("entries_sent"),
        before + 1,
        "{:?}",
        pair.a.status()
    );
    pair.wait_converged(SETTLE);
}

#[test]
fn a_function_load_inside_multi_reaches_the_peer() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    let mut p = redis::pipe();
    p.atomic()
        .cmd("SET")
        .arg("k")
        .arg("v")
        .ignore()
        .cmd("FUNCTION")
        .arg("LOAD")
        .arg(library("inmulti", "fm", "queued"))
        .ignore();
    let _: () = p.query(&mut a).unwrap();
    wait_fcall(&pair.b, "fm", Some("queued"));
}

fn heal(pair: &Pair) {
    pair.a.set_peer_port(&pair.b.listen_port().to_string());
    pair.b.set_peer_port(&pair.a.listen_port().to_string());
    pair.wait_linked();
}

/// Each library has its own version: libraries loaded on both sites at
/// once are all kept, and of one library loaded on both the later wins.
#[test]
fn concurrent_loads_keep_every_library_and_the_last_writer_of_each() {
    let pair = Pair::start();
    load(&mut pair.a.conn(), &library("shared", "fs", "first"), false);
    load(&mut pair.a.conn(), &library("doomed", "fd", "d"), false);
    wait_fcall(&pair.b, "fd", Some("d"));
    cut(&pair);
    load(&mut pair.a.conn(), &library("from_a", "fa", "a"), false);
    load(&mut pair.a.conn(), &library("shared", "fs", "a"), true);
    let _: String = redis::cmd("FUNCTION")
        .arg("DELETE")
        .arg("doomed")
        .query(&mut pair.a.conn())
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    // B's load of `shared` is the later one: it wins on both.
    load(&mut pair.b.conn(), &library("from_b", "fb", "b"), false);
    load(&mut pair.b.conn(), &library("shared", "fs", "b"), true);
    heal(&pair);
    wait_fcall(&pair.a, "fb", Some("b"));
    wait_fcall(&pair.b, "fa", Some("a"));
    wait_fcall(&pair.a, "fs", Some("b"));
    wait_fcall(&pair.b, "fd", None);
    assert_eq!(wait_same_libraries(&pair), ["from_a", "from_b", "shared"]);
    assert_eq!(fcall(&pair.b, "fs").as_deref(), Some("b"));
}

/// Two libraries loaded at once on the two sites register the same
/// function: the server holds only one, and both nodes keep the later.
#[test]
fn libraries_claiming_one_function_keep_the_later_on_both_nodes() {
    let pair = Pair::start();
    pair.wait_in_step();
    cut(&pair);
    load(
        &mut pair.a.conn(),
        &library("old_name", "shared_fn", "a"),
        false,
    );
    std::thread::sleep(Duration::from_millis(20));
    load(
        &mut pair.b.conn(),
        &library("new_name", "shared_fn", "b"),
        false,
    );
    heal(&pair);
    wait_fcall(&pair.a, "shared_fn", Some("b"));
    assert_eq!(wait_same_libraries(&pair), ["new_name"]);
    assert_eq!(fcall(&pair.b, "shared_fn").as_deref(), Some("b"));
    for node in [&pair.a, &pair.b] {
        assert_eq!(node.stat("apply_errors"), 0, "{:?}", node.status());
    }
    // The loser's name is free again on both: loaded anew on either node,
    // it reaches the other.
    load(
        &mut pair.b.conn(),
        &library("old_name", "other_fn", "again"),
        false,
    );
    wait_fcall(&pair.a, "other_fn", Some("again"));
    assert_eq!(wait_same_libraries(&pair), ["new_name", "old_name"]);
}

/// The same conflict with the later load on the other node.
#[test]
fn libraries_claiming_one_function_keep_the_later_either_way() {
    let pair = Pair::start();
    pair.wait_in_step();
    cut(&pair);
    load(
        &mut pair.b.conn(),
        &library("from_b", "shared_fn", "b"),
        false,
    );
    std::thread::sleep(Duration::from_millis(20));
    load(
        &mut pair.a.conn(),
        &library("from_a", "shared_fn", "a"),
        false,
    );
    heal(&pair);
    wait_fcall(&pair.b, "shared_fn", Some("a"));
    assert_eq!(wait_same_libraries(&pair), ["from_a"]);
    load(
        &mut pair.a.conn(),
        &library("from_b", "other_fn", "again"),
        false,
    );
    wait_fcall(&pair.b, "other_fn", Some("again"));
}

/// A pair whose servers run with `appendonly yes`, `appendfsync always`.
fn aof_pair() -> Pair {
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    let pair = Pair::start_with_server_args(&aof, &[]);
    pair.wait_linked();
    pair
}

#[test]
fn a_change_made_while_cut_survives_a_restart_from_the_aof() {
    let mut pair = aof_pair();
    load(&mut pair.a.conn(), &library("lib", "f", "v1"), false);
    wait_fcall(&pair.b, "f", Some("v1"));
    cut(&pair);
    // Acknowledged on A while B cannot hear it, then A goes down hard.
    load(&mut pair.a.conn(), &library("lib", "f", "v2"), true);
    pair.a.restart();
    // A comes back pointed at B's real port (its arguments); B at A's.
    pair.b.set_peer_port(&pair.a.listen_port().to_string());
    pair.wait_linked();
    wait_fcall(&pair.b, "f", Some("v2"));
    assert_eq!(fcall(&pair.a, "f").as_deref(), Some("v2"));
    // The restart changed nothing in A's libraries: nothing was restamped,
    // so a later change on B still wins.
    load(&mut pair.b.conn(), &library("lib", "f", "v3"), true);
    wait_fcall(&pair.a, "f", Some("v3"));
}

#[test]
fn a_fresh_node_gets_the_libraries_in_its_full_sync() {
    let (pa, pb) = (free_port(), free_port());
    let (ia, ib) = (test_ip(), test_ip_b());
    let a = Node::start("a", module_args_at(&ia, pa, &ib, pb, &[]));
    load(
        &mut a.conn(),
        &library("early", "fe", "before the peer"),
        false,
    );
    let b = Node::start("b", module_args_at(&ib, pb, &ia, pa, &[]));
    let pair = Pair { a, b };
    pair.wait_linked();
    wait_fcall(&pair.b, "fe", Some("before the peer"));
}

/// How many times `node` ran `command` (as INFO commandstats names it,
/// e.g. `function|dump`): the module's own calls count there too.
fn calls(node: &Node, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut node.conn())
        .unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// How many times `node` ran `FUNCTION DUMP` (the module reads the
/// libraries with it).
fn function_dumps(node: &Node) -> u64 {
    calls(node, "function|dump")
}

/// The peer writes only the libraries that differ: each library loaded on
/// A is compiled once on B, however many times the set ships. Restoring
/// the whole set at every change (`FUNCTION RESTORE ... FLUSH`) compiled
/// every library again: N squared (Redis 8.0's own suite, 50,000 loads:
/// 175 s against 8 s on a plain server).
#[test]
fn the_peer_compiles_each_new_library_once_instead_of_the_whole_set() {
    const ROUNDS: usize = 20;
    const PER_ROUND: usize = 10;
    let pair = Pair::start();
    let mut a = pair.a.conn();
    let count = |command| calls(&pair.b, command);
    let (loads, restores, deletes) = (
        count("function|load"),
        count("function|restore"),
        count("function|delete"),
    );
    let mut want = Vec::new();
    for round in 0..ROUNDS {
        for i in round * PER_ROUND..(round + 1) * PER_ROUND {
            load(
                &mut a,
                &library(&format!("lib{i}"), &format!("f{i}"), "r"),
                false,
            );
            want.push(format!("lib{i}"));
        }
        want.sort();
        assert!(
            wait_until(SETTLE, || libraries(&pair.b) == want),
            "round {round}: B holds {} libraries",
            libraries(&pair.b).len()
        );
    }
    assert_eq!(
        count("function|restore") - restores,
        0,
        "the whole set restored"
    );
    assert_eq!(
        count("function|load") - loads,
        (ROUNDS * PER_ROUND) as u64,
        "each library compiled once"
    );
    // A replacement is one load; a delete is a delete.
    load(&mut a, &library("lib0", "f0", "changed"), true);
    let _: String = redis::cmd("FUNCTION")
        .arg("DELETE")
        .arg("lib1")
        .query(&mut a)
        .unwrap();
    wait_fcall(&pair.b, "f0", Some("changed"));
    wait_fcall(&pair.b, "f1", None);
    assert_eq!(wait_same_libraries(&pair).len(), ROUNDS * PER_ROUND - 1);
    assert_eq!(
        count("function|load") - loads,
        (ROUNDS * PER_ROUND + 1) as u64
    );
    assert_eq!(count("function|delete") - deletes, 1);
    assert_eq!(count("function|restore") - restores, 0);
}

/// Loading libraries one by one ships each library alone: the writer never
/// reads the whole set back (`FUNCTION DUMP`), and what it sends is about
/// the libraries' own code, not a set of up to N libraries per load (Redis
/// 8.0's own suite loads 50,000 libraries one by one; shipping the set
/// after each load cost the square of their number).
#[test]
fn libraries_loaded_one_by_one_ship_each_library_alone() {
    const LIBRARIES: usize = 400;
    let pair = Pair::start();
    pair.wait_in_step();
    let mut a = pair.a.conn();
    let body = "x".repeat(2000);
    let reads = |node: &Node| function_dumps(node) + calls(node, "function|list");
    let (reads_before, sent_before) = (reads(&pair.a), pair.a.stat("bytes_sent"));
    let mut code_bytes = 0;
    for i in 0..LIBRARIES {
        let code = format!(
            "#!lua name=lib{i}\nredis.register_function('f{i}', function(keys, args) return '{body}' end)"
        );
        code_bytes += code.len() as u64;
        load(&mut a, &code, false);
    }
    let want: Vec<String> = {
        let mut names: Vec<String> = (0..LIBRARIES).map(|i| format!("lib{i}")).collect();
        names.sort();
        names
    };
    assert!(
        wait_until(SETTLE, || libraries(&pair.b) == want),
        "B holds {} of {LIBRARIES} libraries",
        libraries(&pair.b).len()
    );
    let read = reads(&pair.a) - reads_before;
    let sent = pair.a.stat("bytes_sent") - sent_before;
    eprintln!("{LIBRARIES} loads: {read} reads of libraries, {sent} bytes sent for {code_bytes} bytes of code");
    // A load the server's count of libraries vouches for is not read
    // back at all; a read of one library or of all of them is the
    // exception (a check after the link came up).
    assert!(read <= 2, "libraries read back {read} times");
    assert!(
        sent < 2 * code_bytes,
        "{sent} bytes sent for {code_bytes} bytes of code"
    );
    assert_eq!(fcall(&pair.b, "f399").as_deref(), Some(body.as_str()));
}

/// A load the server refuses (the name is taken, the code does not
/// compile) ships nothing, even among loads that ship without a read back
/// (the server's count of libraries vouches only for loads it grew by).
#[test]
fn a_refused_load_ships_nothing() {
    let pair = Pair::start();
    pair.wait_in_step();
    let mut a = pair.a.conn();
    load(&mut a, &library("taken", "ft", "first"), false);
    wait_fcall(&pair.b, "ft", Some("first"));
    // One pipeline, one event-loop iteration: a refused load between two
    // that succeed.
    let (first, refused, last) = (
        library("one", "f1", "1"),
        library("taken", "ft", "second"),
        library("two", "f2", "2"),
    );
    // The pipeline's reply is an error (two of its loads are refused);
    // all four ran.
    let _: redis::RedisResult<redis::Value> = redis::pipe()
        .cmd("FUNCTION")
        .arg("LOAD")
        .arg(&first)
        .cmd("FUNCTION")
        .arg("LOAD")
        .arg(&refused)
        .cmd("FUNCTION")
        .arg("LOAD")
        .arg(&last)
        .cmd("FUNCTION")
        .arg("LOAD")
        .arg("#!lua name=broken\nthis is not lua")
        .query(&mut a);
    assert_eq!(libraries(&pair.a), ["one", "taken", "two"]);
    wait_fcall(&pair.b, "f2", Some("2"));
    wait_fcall(&pair.b, "f1", Some("1"));
    assert_eq!(fcall(&pair.b, "ft").as_deref(), Some("first"));
    assert_eq!(wait_same_libraries(&pair), ["one", "taken", "two"]);
}

/// A delete and a load made while the link is cut, then a hard restart
/// from the AOF: the journal's library records come back with the data,
/// the tombstone among them (without it the delete would be forgotten:
/// the load finds the library gone and no version saying it was there),
/// and the peer gets both changes; the name is free again afterwards.
#[test]
fn a_delete_made_while_cut_survives_a_restart_from_the_aof() {
    let mut pair = aof_pair();
    load(&mut pair.a.conn(), &library("kept", "fk", "k"), false);
    load(&mut pair.a.conn(), &library("doomed", "fd", "d"), false);
    wait_fcall(&pair.b, "fd", Some("d"));
    cut(&pair);
    let _: String = redis::cmd("FUNCTION")
        .arg("DELETE")
        .arg("doomed")
        .query(&mut pair.a.conn())
        .unwrap();
    load(&mut pair.a.conn(), &library("new", "fn", "n"), false);
    pair.a.restart();
    pair.b.set_peer_port(&pair.a.listen_port().to_string());
    pair.wait_linked();
    wait_fcall(&pair.b, "fd", None);
    wait_fcall(&pair.b, "fn", Some("n"));
    assert_eq!(wait_same_libraries(&pair), ["kept", "new"]);
    load(&mut pair.b.conn(), &library("doomed", "fd", "back"), false);
    wait_fcall(&pair.a, "fd", Some("back"));
}
