//! Two real redis-servers with the module, replicating both ways.

mod common;

use std::time::{Duration, Instant};

use common::{free_port, wait_until, Node, Pair};
use redis::Commands;

const SETTLE: Duration = Duration::from_secs(20);

/// `args` as one command.
fn command(args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(args[0]);
    for x in &args[1..] {
        cmd.arg(*x);
    }
    cmd
}

/// Runs `args` on `c` (an error reply fails the test).
fn q(c: &mut redis::Connection, args: &[&str]) {
    command(args).query::<redis::Value>(c).unwrap();
}

fn get_on(node: &Node, key: &str) -> Option<String> {
    node.conn().get(key).unwrap()
}

fn wait_value(node: &Node, key: &str, want: &str) {
    let ok = wait_until(SETTLE, || get_on(node, key).as_deref() == Some(want));
    assert!(
        ok,
        "{key} on {} is {:?}, want {want}",
        node.name,
        get_on(node, key)
    );
}

/// `REPLICAOF 127.0.0.1 <master>` on `node`.
fn replicate_from(node: &Node, master: &Node) {
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port)
        .query(&mut node.conn())
        .unwrap();
}

/// `REPLICAOF NO ONE` on `node`.
fn promote(node: &Node) {
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut node.conn())
        .unwrap();
}

/// Writes one key of every type on `node`, with keys prefixed by `p`.
fn write_every_type(node: &Node, p: &str) {
    let mut c = node.conn();
    let q = |cmd: &mut redis::Cmd, c: &mut redis::Connection| cmd.query::<redis::Value>(c).unwrap();
    q(
        redis::cmd("SET").arg(format!("{p}str")).arg("hello"),
        &mut c,
    );
    q(
        redis::cmd("APPEND").arg(format!("{p}str")).arg(" world"),
        &mut c,
    );
    q(redis::cmd("INCRBY").arg(format!("{p}n")).arg(41), &mut c);
    q(redis::cmd("INCR").arg(format!("{p}n")), &mut c);
    q(
        redis::cmd("RPUSH")
            .arg(format!("{p}list"))
            .arg(&["a", "b", "c"]),
        &mut c,
    );
    q(redis::cmd("LPOP").arg(format!("{p}list")), &mut c);
    q(
        redis::cmd("HSET")
            .arg(format!("{p}hash"))
            .arg(&["f1", "v1", "f2", "v2"]),
        &mut c,
    );
    q(redis::cmd("HDEL").arg(format!("{p}hash")).arg("f2"), &mut c);
    q(
        redis::cmd("SADD")
            .arg(format!("{p}set"))
            .arg(&["x", "y", "z"]),
        &mut c,
    );
    q(redis::cmd("SREM").arg(format!("{p}set")).arg("y"), &mut c);
    q(
        redis::cmd("ZADD")
            .arg(format!("{p}zset"))
            .arg(&["1", "one", "2", "two"]),
        &mut c,
    );
    q(
        redis::cmd("ZINCRBY")
            .arg(format!("{p}zset"))
            .arg(5)
            .arg("one"),
        &mut c,
    );
    q(
        redis::cmd("XADD")
            .arg(format!("{p}stream"))
            .arg("*")
            .arg(&["f", "v"]),
        &mut c,
    );
    q(
        redis::cmd("XADD")
            .arg(format!("{p}stream"))
            .arg("*")
            .arg(&["g", "w"]),
        &mut c,
    );
    q(
        redis::cmd("SETRANGE")
            .arg(format!("{p}bits"))
            .arg(3)
            .arg("abc"),
        &mut c,
    );
    q(
        redis::cmd("SETBIT").arg(format!("{p}bits")).arg(100).arg(1),
        &mut c,
    );
    q(
        redis::cmd("PFADD").arg(format!("{p}hll")).arg(&["a", "b"]),
        &mut c,
    );
}

fn assert_every_type(node: &Node, p: &str) {
    let mut c = node.conn();
    assert_eq!(
        c.get::<_, String>(format!("{p}str")).unwrap(),
        "hello world"
    );
    assert_eq!(c.get::<_, i64>(format!("{p}n")).unwrap(), 42);
    assert_eq!(
        c.lrange::<_, Vec<String>>(format!("{p}list"), 0, -1)
            .unwrap(),
        ["b", "c"]
    );
    assert_eq!(
        c.hget::<_, _, String>(format!("{p}hash"), "f1").unwrap(),
        "v1"
    );
    assert!(!c.hexists::<_, _, bool>(format!("{p}hash"), "f2").unwrap());
    let mut members: Vec<String> = c.smembers(format!("{p}set")).unwrap();
    members.sort();
    assert_eq!(members, ["x", "z"]);
    assert_eq!(
        c.zscore::<_, _, f64>(format!("{p}zset"), "one").unwrap(),
        6.0
    );
    assert_eq!(c.xlen::<_, u64>(format!("{p}stream")).unwrap(), 2);
    assert_eq!(c.getbit::<_, u8>(format!("{p}bits"), 100).unwrap(), 1);
    assert_eq!(
        redis::cmd("PFCOUNT")
            .arg(format!("{p}hll"))
            .query::<u64>(&mut c)
            .unwrap(),
        2
    );
}

#[test]
fn every_data_type_replicates_both_ways() {
    let pair = Pair::start();
    write_every_type(&pair.a, "a:");
    write_every_type(&pair.b, "b:");
    pair.wait_converged(SETTLE);
    for node in [&pair.a, &pair.b] {
        assert_every_type(node, "a:");
        assert_every_type(node, "b:");
    }
}

#[test]
fn absolute_expiry_is_preserved_and_persist_clears_it() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    let mut b = pair.b.conn();
    let _: () = redis::cmd("SET")
        .arg("ttl")
        .arg("v")
        .arg("PX")
        .arg(600_000)
        .query(&mut a)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("later")
        .arg("v")
        .query(&mut b)
        .unwrap();
    let _: () = redis::cmd("PEXPIREAT")
        .arg("later")
        .arg(4_000_000_000_000u64)
        .query(&mut b)
        .unwrap();
    let pexpiretime = |c: &mut redis::Connection, k: &str| -> i64 {
        redis::cmd("PEXPIRETIME").arg(k).query(c).unwrap()
    };
    assert!(wait_until(SETTLE, || pexpiretime(&mut b, "ttl") > 0));
    assert_eq!(pexpiretime(&mut a, "ttl"), pexpiretime(&mut b, "ttl"));
    assert!(wait_until(SETTLE, || pexpiretime(&mut a, "later") == 4_000_000_000_000));
    let _: () = redis::cmd("PERSIST").arg("ttl").query(&mut a).unwrap();
    assert!(wait_until(SETTLE, || pexpiretime(&mut b, "ttl") == -1));
    // A key that expires on A is gone on B too.
    let _: () = redis::cmd("SET")
        .arg("short")
        .arg("v")
        .arg("PX")
        .arg(300)
        .query(&mut a)
        .unwrap();
    wait_value(&pair.b, "short", "v");
    assert!(wait_until(SETTLE, || !b
        .exists::<_, bool>("short")
        .unwrap()));
    pair.wait_converged(SETTLE);
}

/// A command that gives a key an expiry in the past deletes it: Valkey 9
/// raises `expired` for that delete (Redis 7.0 to 8.0 and Valkey 8 raise
/// `del`), and without the command filter's note the peer kept the key.
/// Fails on Valkey 9.1.2 with the note removed (`capture::past_expiry`).
#[test]
fn a_key_deleted_by_an_expiry_in_the_past_is_deleted_on_the_peer() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    let keys = ["e0", "pat", "setpxat", "getex", "inmulti", "inscript"];
    for k in keys {
        q(&mut a, &["SET", k, "v"]);
    }
    for k in keys {
        wait_value(&pair.b, k, "v");
    }
    q(&mut a, &["EXPIRE", "e0", "0"]);
    q(&mut a, &["PEXPIREAT", "pat", "1"]);
    q(&mut a, &["SET", "setpxat", "w", "PXAT", "1"]);
    q(&mut a, &["GETEX", "getex", "EXAT", "1"]);
    let _: redis::Value = redis::pipe()
        .atomic()
        .cmd("EXPIRE")
        .arg("inmulti")
        .arg(-1)
        .query(&mut a)
        .unwrap();
    q(
        &mut a,
        &[
            "EVAL",
            "return redis.call('PEXPIRE', KEYS[1], 0)",
            "1",
            "inscript",
        ],
    );
    q(&mut a, &["SET", "marker", "after"]);
    wait_value(&pair.b, "marker", "after");
    pair.wait_converged(SETTLE);
    let mut b = pair.b.conn();
    for k in keys {
        assert!(!a.exists::<_, bool>(k).unwrap(), "{k} on A");
        assert!(!b.exists::<_, bool>(k).unwrap(), "{k} kept on B");
    }
}

/// Hash fields with a TTL (Redis 7.4+, Valkey 9) keep it on the peer,
/// expire there and lose it on HPERSIST: a hash holding such fields ships
/// as the server's own DUMP (the module's payload has no field TTLs).
/// Skipped where the server has no HEXPIRE (Redis 7.0, Valkey 8).
#[test]
fn hash_field_ttls_replicate_and_expire_on_the_peer() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    if !has_command(&mut a, "HEXPIRE") {
        eprintln!("skipped: this server has no hash field TTLs (HEXPIRE)");
        return;
    }
    let mut b = pair.b.conn();
    let expiretime = |c: &mut redis::Connection, key: &str, field: &str| -> i64 {
        let t: Vec<i64> = command(&["HPEXPIRETIME", key, "FIELDS", "1", field])
            .query(c)
            .unwrap();
        t[0]
    };
    // A small hash and one past the listpack limits.
    q(
        &mut a,
        &["HSET", "small", "keep", "1", "short", "2", "plain", "3"],
    );
    for i in 0..300 {
        q(&mut a, &["HSET", "big", &format!("f{i}"), &i.to_string()]);
    }
    for key in ["small", "big"] {
        let keep = if key == "small" { "keep" } else { "f1" };
        let short = if key == "small" { "short" } else { "f2" };
        q(&mut a, &["HEXPIRE", key, "100000", "FIELDS", "1", keep]);
        q(&mut a, &["HPEXPIRE", key, "300", "FIELDS", "1", short]);
        let on_a = expiretime(&mut a, key, keep);
        assert!(on_a > 0);
        assert!(
            wait_until(SETTLE, || expiretime(&mut b, key, keep) == on_a),
            "{key}.{keep}: field TTL {} on B, {on_a} on A",
            expiretime(&mut b, key, keep)
        );
        let gone = |c: &mut redis::Connection| -> bool {
            !command(&["HEXISTS", key, short]).query::<bool>(c).unwrap()
        };
        assert!(
            wait_until(SETTLE, || gone(&mut a) && gone(&mut b)),
            "{key}.{short} expired on both"
        );
        q(&mut a, &["HPERSIST", key, "FIELDS", "1", keep]);
        assert!(
            wait_until(SETTLE, || expiretime(&mut b, key, keep) == -1),
            "{key}.{keep}: HPERSIST reached B"
        );
    }
    pair.wait_converged(SETTLE);
}

/// Commands only newer servers have reach the peer: HSETEX and HGETEX
/// (Redis 8, Valkey 9: field TTLs set and cleared), Redis 8's HGETDEL, and
/// Valkey's SET IFEQ and DELIFEQ. Each part is skipped, with the reason,
/// where the server has no such command.
#[test]
fn commands_of_newer_servers_replicate() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    let mut b = pair.b.conn();
    let expiretime = |c: &mut redis::Connection, key: &str, field: &str| -> i64 {
        let t: Vec<i64> = command(&["HPEXPIRETIME", key, "FIELDS", "1", field])
            .query(c)
            .unwrap();
        t[0]
    };
    if has_command(&mut a, "HSETEX") && has_command(&mut a, "HGETEX") {
        q(
            &mut a,
            &[
                "HSETEX", "hx", "PX", "100000", "FIELDS", "2", "f1", "1", "f2", "2",
            ],
        );
        q(&mut a, &["HSET", "hx", "f3", "3", "f4", "4"]);
        q(&mut a, &["HGETEX", "hx", "PERSIST", "FIELDS", "1", "f1"]);
        q(
            &mut a,
            &["HGETEX", "hx", "PX", "200000", "FIELDS", "1", "f3"],
        );
        if has_command(&mut a, "HGETDEL") {
            q(&mut a, &["HGETDEL", "hx", "FIELDS", "1", "f4"]);
        } else {
            eprintln!("no HGETDEL on this server: HDEL instead");
            q(&mut a, &["HDEL", "hx", "f4"]);
        }
        q(&mut a, &["SET", "marker-h", "1"]);
        wait_value(&pair.b, "marker-h", "1");
        pair.wait_converged(SETTLE);
        for field in ["f1", "f2", "f3", "f4"] {
            assert_eq!(
                expiretime(&mut a, "hx", field),
                expiretime(&mut b, "hx", field),
                "hx.{field}"
            );
        }
        assert_eq!(expiretime(&mut b, "hx", "f1"), -1, "HGETEX PERSIST");
        assert!(expiretime(&mut b, "hx", "f2") > 0, "HSETEX PX");
        assert_eq!(expiretime(&mut b, "hx", "f4"), -2, "HGETDEL");
    } else {
        eprintln!("skipped: no HSETEX or HGETEX on this server");
    }
    if has_command(&mut a, "DELIFEQ") {
        q(&mut a, &["SET", "cas", "old"]);
        q(&mut a, &["SET", "cas", "new", "IFEQ", "old"]);
        q(&mut a, &["SET", "cas", "never", "IFEQ", "old"]);
        wait_value(&pair.b, "cas", "new");
        q(&mut a, &["SET", "gone", "v"]);
        q(&mut a, &["DELIFEQ", "gone", "v"]);
        q(&mut a, &["SET", "marker-c", "1"]);
        wait_value(&pair.b, "marker-c", "1");
        assert!(!b.exists::<_, bool>("gone").unwrap(), "DELIFEQ");
        pair.wait_converged(SETTLE);
    } else {
        eprintln!("skipped: no SET IFEQ / DELIFEQ on this server");
    }
}

/// A hash field's expiry is not a write: each node expires it itself from
/// the TTL that travelled. A write B made of its own lazy field expiry,
/// concurrent with A's HPERSIST and stamped after it (B's clock runs 5 s
/// ahead, A applies nothing meanwhile), would beat it on both nodes
/// (found by CI on Redis 8.0.6, where the two fell in one millisecond). And a command that deletes a field by a TTL in the past
/// (Valkey 9 raises `hexpired` for it) still reaches the peer.
#[test]
fn a_field_expiry_is_no_write_and_a_field_deleted_by_a_past_ttl_is() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    if !has_command(&mut a, "HEXPIRE") {
        eprintln!("skipped: this server has no hash field TTLs (HEXPIRE)");
        return;
    }
    let mut b = pair.b.conn();
    q(
        &mut a,
        &["HSET", "h", "keep", "1", "short", "2", "plain", "3"],
    );
    q(&mut a, &["HEXPIRE", "h", "100000", "FIELDS", "1", "keep"]);
    q(&mut a, &["HPEXPIRE", "h", "200", "FIELDS", "1", "short"]);
    let ttl = |c: &mut redis::Connection, field: &str| -> i64 {
        let t: Vec<i64> = command(&["HPEXPIRETIME", "h", "FIELDS", "1", field])
            .query(c)
            .unwrap();
        t[0]
    };
    assert!(wait_until(SETTLE, || ttl(&mut b, "keep") > 0));
    // What B ships now reaches A's main thread only after A's HPERSIST,
    // and B's clock runs 5 s ahead: a write B made of its field expiry
    // would be concurrent with the HPERSIST and beat it.
    q(&mut a, &["RDMASYNC.DEBUG", "HOLD-APPLY", "ON"]);
    q(&mut b, &["RDMASYNC.DEBUG", "CLOCK-SKEW", "5000"]);
    // B expires `short` lazily (HEXISTS reads it), A as well.
    assert!(wait_until(SETTLE, || {
        !command(&["HEXISTS", "h", "short"])
            .query::<bool>(&mut b)
            .unwrap()
    }));
    std::thread::sleep(Duration::from_millis(100));
    assert!(!command(&["HEXISTS", "h", "short"])
        .query::<bool>(&mut a)
        .unwrap());
    q(&mut a, &["HPERSIST", "h", "FIELDS", "1", "keep"]);
    q(&mut a, &["RDMASYNC.DEBUG", "HOLD-APPLY", "OFF"]);
    assert!(
        wait_until(SETTLE, || ttl(&mut b, "keep") == -1),
        "A's HPERSIST lost on B (field TTL {})",
        ttl(&mut b, "keep")
    );
    // A TTL in the past deletes the field: a write that ships.
    q(&mut a, &["HEXPIRE", "h", "0", "FIELDS", "1", "plain"]);
    assert!(
        wait_until(SETTLE, || {
            !command(&["HEXISTS", "h", "plain"])
                .query::<bool>(&mut b)
                .unwrap()
        }),
        "the field A deleted by HEXPIRE 0 stays on B"
    );
    // A client's DEL right after a field's expiry (in one transaction) is
    // a write, not the expiry emptying the hash.
    q(&mut a, &["HSET", "m", "gone", "1", "stays", "2"]);
    q(&mut a, &["HPEXPIRE", "m", "50", "FIELDS", "1", "gone"]);
    wait_value_of_field(&pair.b, "m", "stays", "2");
    std::thread::sleep(Duration::from_millis(100));
    let _: redis::Value = redis::pipe()
        .atomic()
        .cmd("HGET")
        .arg("m")
        .arg("gone")
        .cmd("DEL")
        .arg("m")
        .query(&mut a)
        .unwrap();
    assert!(
        wait_until(SETTLE, || !b.exists::<_, bool>("m").unwrap()),
        "the DEL after a field's expiry did not reach B"
    );
    pair.wait_converged(SETTLE);
}

fn wait_value_of_field(node: &Node, key: &str, field: &str, want: &str) {
    let ok = wait_until(SETTLE, || {
        let v: Option<String> = node.conn().hget(key, field).unwrap();
        v.as_deref() == Some(want)
    });
    assert!(ok, "{key}.{field} on {} is not {want}", node.name);
}

/// Whether the server has the command `name`.
fn has_command(c: &mut redis::Connection, name: &str) -> bool {
    let info: Vec<redis::Value> = command(&["COMMAND", "INFO", name]).query(c).unwrap();
    info.first().is_some_and(|v| *v != redis::Value::Nil)
}

#[test]
fn generic_commands_and_databases_replicate() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    q(&mut a, &["SET", "gone", "1"]);
    q(&mut a, &["SET", "old", "2"]);
    q(&mut a, &["SET", "mover", "3"]);
    q(&mut a, &["SET", "src", "4"]);
    wait_value(&pair.b, "src", "4");
    q(&mut a, &["DEL", "gone"]);
    q(&mut a, &["RENAME", "old", "new"]);
    q(&mut a, &["MOVE", "mover", "5"]);
    q(&mut a, &["COPY", "src", "dst", "DB", "6"]);
    q(&mut a, &["SELECT", "3"]);
    q(&mut a, &["SET", "in3", "x"]);
    q(&mut a, &["SELECT", "0"]);
    let mut b = pair.b.conn();
    assert!(wait_until(SETTLE, || {
        let in3: Option<String> = redis::pipe()
            .cmd("SELECT")
            .arg(3)
            .ignore()
            .cmd("GET")
            .arg("in3")
            .cmd("SELECT")
            .arg(0)
            .ignore()
            .query::<(Option<String>,)>(&mut b)
            .map(|t| t.0)
            .unwrap_or(None);
        in3.as_deref() == Some("x")
    }));
    pair.wait_converged(SETTLE);
    assert!(!b.exists::<_, bool>("gone").unwrap());
    assert!(!b.exists::<_, bool>("old").unwrap());
    assert_eq!(get_on(&pair.b, "new").as_deref(), Some("2"));
    assert!(!b.exists::<_, bool>("mover").unwrap());

    // SWAPDB, FLUSHDB and FLUSHALL arrive as such.
    q(&mut a, &["SWAPDB", "0", "3"]);
    wait_value(&pair.b, "in3", "x");
    pair.wait_converged(SETTLE);
    q(&mut a, &["FLUSHDB"]);
    assert!(wait_until(SETTLE, || !b.exists::<_, bool>("in3").unwrap()));
    pair.wait_converged(SETTLE);
    q(&mut b, &["SET", "after", "1"]);
    wait_value(&pair.a, "after", "1");
    q(&mut b, &["FLUSHALL"]);
    assert!(wait_until(SETTLE, || {
        redis::cmd("DBSIZE").query::<u64>(&mut a).unwrap() == 0
            && redis::pipe()
                .cmd("SELECT")
                .arg(6)
                .ignore()
                .cmd("DBSIZE")
                .cmd("SELECT")
                .arg(0)
                .ignore()
                .query::<(u64,)>(&mut a)
                .unwrap()
                .0
                == 0
    }));
    pair.wait_converged(SETTLE);
}

#[test]
fn multi_exec_is_applied_atomically() {
    let pair = Pair::start();
    let keys: Vec<String> = (0..50).map(|i| format!("tx:{i}")).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let torn = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let reads = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let checker = {
        let (stop, torn, reads, keys) = (stop.clone(), torn.clone(), reads.clone(), keys.clone());
        let mut b = pair.b.conn();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let vals: Vec<Option<String>> =
                    redis::cmd("MGET").arg(&keys).query(&mut b).unwrap();
                if vals.iter().any(|v| v != &vals[0]) {
                    torn.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    let mut a = pair.a.conn();
    for round in 0..300 {
        let mut p = redis::pipe();
        p.atomic();
        for k in &keys {
            p.cmd("SET").arg(k).arg(round).ignore();
        }
        let _: () = p.query(&mut a).unwrap();
    }
    wait_value(&pair.b, "tx:49", "299");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    checker.join().unwrap();
    let reads = reads.load(std::sync::atomic::Ordering::Relaxed);
    assert!(reads > 10, "checker made only {reads} reads");
    assert_eq!(
        torn.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "B saw a partial transaction"
    );
    pair.wait_converged(SETTLE);
}

/// B writes consecutive plain strings of one batch with one MSET, between
/// entries of other kinds (another database, an expiry, another type,
/// SWAPDB, DEL): a transaction mixing them all lands whole and equal. (The
/// capture never puts two entries of one key in a batch, so this checks the
/// run boundaries and databases, not the order of writes to one key.)
#[test]
fn a_batch_mixing_strings_with_other_changes_applies_in_order() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    q(&mut a, &["SET", "before", "x"]);
    wait_value(&pair.b, "before", "x");
    // One transaction: one event-loop iteration, one batch on the wire.
    let mut p = redis::pipe();
    p.atomic();
    for args in [
        &["SET", "s1", "a"][..],
        &["SET", "s2", "b"],
        &["RPUSH", "l", "x", "y"],
        &["SET", "s3", "c"],
        &["SET", "ttl", "t", "PX", "600000"],
        &["SET", "s4", "d"],
        &["SELECT", "1"],
        &["SET", "s1", "in-db1"],
        &["SET", "s5", "e"],
        &["SELECT", "0"],
        &["DEL", "before"],
        &["SET", "s6", "f"],
        // Moves s1..s6 (written above) to database 2 (the capture ships
        // them after the swap, in database 2).
        &["SWAPDB", "0", "2"],
        &["SET", "after-swap", "g"],
    ] {
        p.add_command(command(args)).ignore();
    }
    let _: () = p.query(&mut a).unwrap();
    pair.wait_converged(SETTLE);
    let mut b = pair.b.conn();
    q(&mut b, &["SELECT", "2"]);
    let got: Vec<Option<String>> = redis::cmd("MGET")
        .arg(&["s1", "s2", "s3", "s4", "s6", "before"])
        .query(&mut b)
        .unwrap();
    let want = ["a", "b", "c", "d", "f"].map(|v| Some(v.to_owned()));
    assert_eq!(&got[..5], &want[..]);
    assert_eq!(got[5], None);
    let ttl: i64 = redis::cmd("PTTL").arg("ttl").query(&mut b).unwrap();
    assert!(ttl > 500_000, "ttl: {ttl}");
    let len: i64 = redis::cmd("LLEN").arg("l").query(&mut b).unwrap();
    assert_eq!(len, 2);
    q(&mut b, &["SELECT", "0"]);
    let got: Vec<Option<String>> = redis::cmd("MGET")
        .arg(&["after-swap", "s1"])
        .query(&mut b)
        .unwrap();
    assert_eq!(got, [Some("g".to_owned()), None]);
    q(&mut b, &["SELECT", "1"]);
    let got: Vec<Option<String>> = redis::cmd("MGET").arg(&["s1", "s5"]).query(&mut b).unwrap();
    assert_eq!(got, [Some("in-db1".to_owned()), Some("e".to_owned())]);
}

#[test]
fn mixed_workload_from_both_sides_converges() {
    let pair = Pair::start();
    const PER_SIDE: usize = 5_000;
    let start = Instant::now();
    let writer = |node: &Node, side: &'static str| {
        let mut c = node.conn();
        std::thread::spawn(move || {
            for chunk in 0..(PER_SIDE / 100) {
                let mut p = redis::pipe();
                for i in 0..100 {
                    let n = chunk * 100 + i;
                    match n % 6 {
                        0 => p.cmd("SET").arg(format!("{side}:s:{n}")).arg(n).ignore(),
                        1 => p
                            .cmd("HSET")
                            .arg(format!("{side}:h:{}", n % 50))
                            .arg(n)
                            .arg(n)
                            .ignore(),
                        2 => p
                            .cmd("RPUSH")
                            .arg(format!("{side}:l:{}", n % 40))
                            .arg(n)
                            .ignore(),
                        3 => p
                            .cmd("ZADD")
                            .arg(format!("{side}:z:{}", n % 30))
                            .arg(n)
                            .arg(n)
                            .ignore(),
                        4 => p
                            .cmd("SADD")
                            .arg(format!("{side}:t:{}", n % 20))
                            .arg(n)
                            .ignore(),
                        _ => p.cmd("DEL").arg(format!("{side}:s:{}", n - 5)).ignore(),
                    };
                }
                let _: () = p.query(&mut c).unwrap();
            }
        })
    };
    let (ta, tb) = (writer(&pair.a, "A"), writer(&pair.b, "B"));
    ta.join().unwrap();
    tb.join().unwrap();
    let digest = pair.wait_converged(Duration::from_secs(60));
    let elapsed = start.elapsed();
    let sent = pair.a.stat("entries_sent") + pair.b.stat("entries_sent");
    let applied = pair.a.stat("entries_applied") + pair.b.stat("entries_applied");
    eprintln!(
        "mixed workload: {} writes, {sent} entries shipped, converged in {:.2} s ({:.0} writes/s, {:.0} entries/s), digest {digest}",
        2 * PER_SIDE,
        elapsed.as_secs_f64(),
        (2 * PER_SIDE) as f64 / elapsed.as_secs_f64(),
        sent as f64 / elapsed.as_secs_f64()
    );
    assert!(digest != "0".repeat(40));
    assert_eq!(
        pair.a.stat("queue_overflows") + pair.b.stat("queue_overflows"),
        0
    );
    assert!(
        wait_until(SETTLE, || {
            pair.a.stat("entries_applied") + pair.b.stat("entries_applied") == sent
        }),
        "sent {sent}, applied {applied}"
    );
}

#[test]
fn applied_writes_are_not_echoed_back() {
    let pair = Pair::start();
    // A write racing the first-contact full syncs may ship twice, and back
    // in the peer's sync (a duplicate either way): this test is about live
    // changes.
    pair.wait_in_step();
    let mut a = pair.a.conn();
    for i in 0..100 {
        let _: () = a.set(format!("echo:{i}"), i).unwrap();
    }
    wait_value(&pair.b, "echo:99", "99");
    assert!(wait_until(SETTLE, || pair.b.stat("entries_applied")
        == pair.a.stat("entries_sent")));
    // B's acknowledgement (rate-limited) has reached A: nothing is pending.
    assert!(wait_until(SETTLE, || pair.a.stat("lag_entries") == 0));
    std::thread::sleep(Duration::from_millis(200));
    let before = (pair.a.status(), pair.b.status());
    std::thread::sleep(Duration::from_millis(700));
    let after = (pair.a.status(), pair.b.status());
    for f in [
        "entries_sent",
        "entries_applied",
        "bytes_sent",
        "batches_sent",
    ] {
        assert_eq!(before.0[f], after.0[f], "a.{f} moved after writes stopped");
        assert_eq!(before.1[f], after.1[f], "b.{f} moved after writes stopped");
    }
    assert_eq!(after.1["entries_sent"], "0", "B sent entries back: echo");
    assert_eq!(after.0["entries_applied"], "0");
    let sent: u64 = after.0["entries_sent"].parse().unwrap();
    assert!(
        (1..=100).contains(&sent),
        "A sent {sent} entries for 100 keys"
    );
}

#[test]
fn restarted_node_reconnects_and_fresh_writes_flow() {
    let mut pair = Pair::start();
    let _: () = pair.a.conn().set("before", 1).unwrap();
    wait_value(&pair.b, "before", "1");
    pair.b.restart();
    // A notices the old link died (EOF, or a CM disconnect) and takes the new one.
    assert!(wait_until(SETTLE, || pair.a.stat("reconnects") >= 1));
    pair.wait_linked();
    let _: () = pair.a.conn().set("after-a", 2).unwrap();
    let _: () = pair.b.conn().set("after-b", 3).unwrap();
    wait_value(&pair.b, "after-a", "2");
    wait_value(&pair.a, "after-b", "3");
    // And again the other way round.
    let b_reconnects = pair.b.stat("reconnects");
    pair.a.restart();
    assert!(wait_until(SETTLE, || pair.b.stat("reconnects") > b_reconnects));
    pair.wait_linked();
    let _: () = pair.b.conn().set("again", 4).unwrap();
    wait_value(&pair.a, "again", "4");
}

#[test]
fn value_larger_than_the_ring_is_chunked_and_the_link_keeps_working() {
    let pair = Pair::start_with(&["ring-size=64kb"], &["ring-size=64kb"]);
    let big: String = (0..1_000_000)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let _: () = pair.a.conn().set("big", &big).unwrap();
    let _: () = pair.a.conn().set("small", "after").unwrap();
    wait_value(&pair.b, "small", "after");
    assert_eq!(get_on(&pair.b, "big").map(|v| v.len()), Some(big.len()));
    assert_eq!(get_on(&pair.b, "big"), Some(big));
    assert_eq!(pair.a.stat("entries_refused"), 0);
    assert_eq!(pair.b.status()["link"], "up");
    pair.wait_converged(SETTLE);
}

#[test]
fn full_queue_never_blocks_redis_and_loses_nothing() {
    let pair = Pair::start_with(&["queue-size=1"], &["ring-size=64kb"]);
    // Stall B's main thread: its receiver cannot apply, A runs out of credit.
    let b_port = pair.b.port;
    let sleeper = std::thread::spawn(move || {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{b_port}/"))
            .unwrap()
            .get_connection()
            .unwrap();
        let _: () = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(3)
            .query(&mut c)
            .unwrap();
    });
    std::thread::sleep(Duration::from_millis(200));
    let mut a = pair.a.conn();
    let value = "x".repeat(16_000);
    // Write while B sleeps 3 s: for 1.5 s, and on until A's queue has
    // overflowed (a slow emulated guest writes fewer rounds in that time),
    // but no longer than 2.5 s, inside B's sleep. No pipeline on A may wait
    // for B.
    let t0 = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut round = 0;
    let mut overflowed = false;
    while t0.elapsed() < Duration::from_millis(2500)
        && !(overflowed && t0.elapsed() >= Duration::from_millis(1500))
    {
        let t = Instant::now();
        let mut p = redis::pipe();
        for i in 0..10 {
            p.cmd("SET")
                .arg(format!("q:{i}:{}", round % 50))
                .arg(format!("{value}{round}"))
                .ignore();
        }
        let _: () = p.query(&mut a).unwrap();
        slowest = slowest.max(t.elapsed());
        round += 1;
        overflowed = overflowed || pair.a.stat("queue_overflows") > 0;
    }
    assert!(
        slowest < Duration::from_millis(1000),
        "A blocked while B stalled: slowest pipeline {slowest:?}"
    );
    let last = round - 1;
    assert!(
        overflowed,
        "{round} rounds in {:?} never overflowed A's queue: {:?}",
        t0.elapsed(),
        pair.a.status()
    );
    sleeper.join().unwrap();
    pair.wait_converged(Duration::from_secs(30));
    let key = format!("q:9:{}", last % 50);
    assert_eq!(get_on(&pair.b, &key).unwrap(), format!("{value}{last}"));
    assert!(wait_until(SETTLE, || pair.a.stat("ring_used_bytes") == 0));
}

#[test]
fn applied_writes_reach_the_nodes_own_replica() {
    let pair = Pair::start();
    // B's RDB carries key versions as module aux data: its replicas load
    // the module too (idle while they replicate; its peer is unreachable).
    let mut args = common::module_args(free_port(), free_port(), &[]);
    args.extend([
        "--replicaof".into(),
        "127.0.0.1".into(),
        pair.b.port.to_string(),
    ]);
    let replica = Node::start("b-replica", args);
    let mut r = replica.conn();
    assert!(wait_until(SETTLE, || {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut r).unwrap();
        info.contains("master_link_status:up")
    }));
    let _: () = pair.a.conn().set("via-b", "to-replica").unwrap();
    let _: () = pair.a.conn().hset("h-via-b", "f", "v").unwrap();
    wait_value(&replica, "via-b", "to-replica");
    assert!(wait_until(SETTLE, || replica.digest() == pair.a.digest()));
    // Volume with expiring keys: B's active expiry runs while it applies (Redis
    // asserts if applied writes were left unpropagated), and B's replica ends
    // equal to A once the short-lived keys are gone everywhere.
    let mut a = pair.a.conn();
    for chunk in 0..40 {
        let mut p = redis::pipe();
        for i in 0..250 {
            let n = chunk * 250 + i;
            let ttl = if n % 3 == 0 { 50 } else { 600_000 };
            p.cmd("SET")
                .arg(format!("vol:{n}"))
                .arg(n)
                .arg("PX")
                .arg(ttl)
                .ignore();
        }
        let _: () = p.query(&mut a).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    // DEBUG DIGEST counts expired keys not yet reclaimed; a full SCAN on the
    // masters reclaims them (and B's DELs reach its replica).
    let reclaim = |node: &Node| {
        let mut c = node.conn();
        let mut cursor = 0u64;
        loop {
            let (next, _): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("COUNT")
                .arg(1000)
                .query(&mut c)
                .unwrap();
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
    };
    let mut last = String::new();
    let ok = wait_until(SETTLE, || {
        reclaim(&pair.a);
        reclaim(&pair.b);
        let d = [&pair.a, &pair.b, &replica].map(|n| {
            let size: u64 = redis::cmd("DBSIZE").query(&mut n.conn()).unwrap();
            (n.digest(), size)
        });
        last = format!(
            "(digest, dbsize) a={:?} b={:?} replica={:?}",
            d[0], d[1], d[2]
        );
        d[0].0 == d[1].0 && d[0].0 == d[2].0
    });
    assert!(ok, "{last}\nb: {:?}", pair.b.status());
    let pong: String = redis::cmd("PING").query(&mut pair.b.conn()).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn status_answers_in_resp3_as_a_map() {
    let pair = Pair::start();
    let mut c = redis::Client::open(format!("redis://127.0.0.1:{}/?protocol=resp3", pair.a.port))
        .unwrap()
        .get_connection()
        .unwrap();
    let v: redis::Value = redis::cmd("RDMASYNC.STATUS").query(&mut c).unwrap();
    let redis::Value::Map(fields) = v else {
        panic!("RESP3 reply is not a map: {v:?}");
    };
    let names: Vec<String> = fields
        .iter()
        .map(|(k, _)| redis::from_redis_value(k).unwrap())
        .collect();
    for f in [
        "node_id",
        "peer",
        "transport",
        "link",
        "entries_sent",
        "entries_applied",
        "bytes_sent",
        "queue_depth",
        "queue_overflows",
        "ring_used_bytes",
        "reconnects",
        "last_error",
    ] {
        assert!(names.iter().any(|n| n == f), "missing {f} in {names:?}");
    }
    assert_ne!(pair.a.status()["node_id"], pair.b.status()["node_id"]);
    let want = std::env::var("RDMASYNC_TEST_TRANSPORT").unwrap_or_else(|_| "tcp".into());
    assert_eq!(pair.a.status()["transport"], want);
    if want == "rdma" {
        assert!(
            !pair.a.status()["device"].is_empty(),
            "no device in {:?}",
            pair.a.status()
        );
    }
}

#[test]
fn debug_reload_on_one_node_does_not_wipe_the_other() {
    let pair = Pair::start();
    for i in 0..3 {
        let _: () = pair.a.conn().set(format!("keep:{i}"), i).unwrap();
    }
    wait_value(&pair.b, "keep:2", "2");
    let _: String = redis::cmd("DEBUG")
        .arg("RELOAD")
        .query(&mut pair.b.conn())
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let dbsize = |n: &Node| redis::cmd("DBSIZE").query::<u64>(&mut n.conn()).unwrap();
    assert_eq!(dbsize(&pair.a), 3, "the reload's internal flush reached A");
    assert_eq!(dbsize(&pair.b), 3);
    assert_eq!(pair.b.stat("resyncs_needed"), 1);
    // Replication keeps working afterwards.
    let _: () = pair.b.conn().set("after-reload", 1).unwrap();
    wait_value(&pair.a, "after-reload", "1");
}

#[test]
fn a_node_that_becomes_a_replica_neither_wipes_nor_loops() {
    let pair = Pair::start();
    let _: () = pair.a.conn().set("on-a", 1).unwrap();
    wait_value(&pair.b, "on-a", "1");
    let master = Node::start("c-master", vec![]);
    let _: () = master.conn().set("from-c", 1).unwrap();
    replicate_from(&pair.b, &master);
    wait_value(&pair.b, "from-c", "1");
    let _: () = master.conn().set("more-from-c", 2).unwrap();
    wait_value(&pair.b, "more-from-c", "2");
    // A writes while B is a replica: B must not apply them.
    let _: () = pair.a.conn().set("while-replica", 1).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let mut a = pair.a.conn();
    assert!(
        a.exists::<_, bool>("on-a").unwrap(),
        "B's full sync wiped A"
    );
    assert!(
        !a.exists::<_, bool>("from-c").unwrap(),
        "C's data leaked to A"
    );
    let applied = pair.a.stat("entries_applied");
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(pair.a.stat("entries_applied"), applied, "replication loop");
    assert!(!pair.b.conn().exists::<_, bool>("while-replica").unwrap());
    // Promoted again, B's own writes flow to A.
    promote(&pair.b);
    let _: () = pair.b.conn().set("promoted", 1).unwrap();
    wait_value(&pair.a, "promoted", "1");
    // What A wrote while B was a replica reaches B now (B asked A for a full
    // sync when it became a master again).
    wait_value(&pair.b, "while-replica", "1");
    std::thread::sleep(Duration::from_millis(1500));
    eprintln!(
        "DEBUGSTATUS a={:?}\nb={:?}",
        pair.a.status(),
        pair.b.status()
    );
    pair.wait_converged(SETTLE);
}

/// B's own write, applied by A, is lost on B when B replicates from another
/// master (its dataset is replaced). Promoted again, B asks A for a full
/// sync, which must not count as covered by A's first-contact one: B had
/// received A's acks since. Only acks came from A, so nothing else tells.
#[test]
fn a_node_promoted_again_gets_back_its_own_writes_from_the_peer() {
    let pair = Pair::start();
    let _: () = pair.b.conn().set("b-own", 1).unwrap();
    wait_value(&pair.a, "b-own", "1");
    // A's ack of it reaches B.
    assert!(wait_until(SETTLE, || pair.b.stat("lag_entries") == 0));
    let master = Node::start("c-master", vec![]);
    let _: () = master.conn().set("from-c", 1).unwrap();
    replicate_from(&pair.b, &master);
    wait_value(&pair.b, "from-c", "1");
    assert!(!pair.b.conn().exists::<_, bool>("b-own").unwrap());
    promote(&pair.b);
    wait_value(&pair.b, "b-own", "1");
    wait_value(&pair.a, "from-c", "1");
    pair.wait_converged(SETTLE);
}

/// A sync request that finds the queue full at the flush that sees the new
/// link (here: B's sender held, its queue of 2 batches full) goes out at a
/// later flush, not only at the next link-up.
#[test]
fn a_sync_request_that_finds_the_queue_full_is_sent_later() {
    let pair = Pair::start_with(&[], &["queue-size=2"]);
    pair.b.hold_sends(true);
    for i in 0..2 {
        let _: () = pair.b.conn().set(format!("b{i}"), i).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(wait_until(SETTLE, || pair.b.stat("queue_depth") >= 2));
    let master = Node::start("c-master", vec![]);
    let _: () = master.conn().set("from-c", 1).unwrap();
    replicate_from(&pair.b, &master);
    wait_value(&pair.b, "from-c", "1");
    // Dropped by B, a replica now.
    let _: () = pair.a.conn().set("while-replica", 1).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    promote(&pair.b);
    // B's flushes ask; the queue has no room yet.
    std::thread::sleep(Duration::from_millis(300));
    assert!(!pair.b.conn().exists::<_, bool>("while-replica").unwrap());
    if pair.b.status()["link"] != "up" {
        // A slow host (the emulated guest) held it past the peer's 5 s
        // silence limit: the link-up then asks anyway, and this run cannot
        // tell the retry from it.
        eprintln!("note: the link dropped while B's sender was held");
    }
    pair.b.hold_sends(false);
    wait_value(&pair.b, "while-replica", "1");
    std::thread::sleep(Duration::from_millis(1500));
    eprintln!(
        "DEBUGSTATUS a={:?}\nb={:?}",
        pair.a.status(),
        pair.b.status()
    );
    pair.wait_converged(SETTLE);
}

/// Strings of every length and encoding (int, embstr, raw; long ones are
/// read in place) arrive whole, with their expiry, and reading them for
/// shipping leaves their encoding on A as it was.
#[test]
fn strings_of_every_encoding_arrive_whole_and_keep_their_encoding() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    let lengths = [0usize, 3, 20, 44, 45, 255, 256, 257, 300, 4096, 70_000];
    let value =
        |n: usize| -> String { (0..n).map(|i| char::from(b'a' + (i % 26) as u8)).collect() };
    for n in lengths {
        q(&mut a, &["SET", &format!("s{n}"), &value(n)]);
        q(
            &mut a,
            &["SET", &format!("t{n}"), &value(n), "PX", "600000"],
        );
    }
    q(&mut a, &["SET", "int", "12345"]);
    q(&mut a, &["APPEND", "appended", &value(300)]);
    let encoding = |c: &mut redis::Connection, k: &str| -> String {
        redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(k)
            .query(c)
            .unwrap()
    };
    let mut keys: Vec<String> = lengths
        .iter()
        .flat_map(|n| [format!("s{n}"), format!("t{n}")])
        .collect();
    keys.extend(["int".into(), "appended".into()]);
    let before: Vec<String> = keys.iter().map(|k| encoding(&mut a, k)).collect();
    pair.wait_converged(SETTLE);
    let mut b = pair.b.conn();
    for (k, enc) in keys.iter().zip(&before) {
        let on_a: Vec<u8> = a.get(k).unwrap();
        let on_b: Vec<u8> = b.get(k).unwrap();
        assert_eq!(on_a, on_b, "{k}");
        let at = |c: &mut redis::Connection| -> i64 {
            redis::cmd("PEXPIRETIME").arg(k).query(c).unwrap()
        };
        assert_eq!(at(&mut a), at(&mut b), "{k}");
        assert_eq!(
            &encoding(&mut a, k),
            enc,
            "reading {k} changed its encoding"
        );
    }
    assert_eq!(encoding(&mut a, "int"), "int");
    assert_eq!(encoding(&mut a, "s44"), "embstr");
}

#[test]
fn applied_writes_reach_the_nodes_own_aof() {
    let pair = Pair::start();
    let mut b = pair.b.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut b)
        .unwrap();
    let info = |c: &mut redis::Connection| -> String {
        redis::cmd("INFO").arg("persistence").query(c).unwrap()
    };
    assert!(wait_until(SETTLE, || {
        let i = info(&mut b);
        i.contains("aof_enabled:1")
            && i.contains("aof_rewrite_in_progress:0")
            && i.contains("aof_rewrite_scheduled:0")
    }));
    let _: () = pair.a.conn().set("into-aof", "from-a").unwrap();
    wait_value(&pair.b, "into-aof", "from-a");
    let aof_text = || -> String {
        let dir = pair.b.dir.join("appendonlydir");
        std::fs::read_dir(&dir)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".incr.aof"))
                    .map(|e| {
                        String::from_utf8_lossy(&std::fs::read(e.path()).unwrap_or_default())
                            .into_owned()
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(
        wait_until(SETTLE, || aof_text().contains("into-aof")),
        "the applied write is not in B's AOF: {}",
        aof_text()
    );
    // A string travels as its bytes and is applied with SET.
    assert!(aof_text().contains("from-a"), "{}", aof_text());
    assert!(aof_text().to_uppercase().contains("SET"));
}

#[test]
fn collections_ship_uncompressed_and_rdbcompression_is_left_as_it_was() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    let rdbcompression = |node: &Node| -> String {
        let kv: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("rdbcompression")
            .query(&mut node.conn())
            .unwrap();
        kv[1].clone()
    };
    assert_eq!(rdbcompression(&pair.a), "yes");
    // 100 fields of 60 repeated bytes: a listpack of about 7 KB that LZF
    // squeezes to a few hundred bytes.
    let before = pair.b.stat("bytes_received");
    let fields: Vec<(String, String)> = (0..100)
        .map(|i| (format!("f{i:03}"), "a".repeat(60)))
        .collect();
    let _: () = a.hset_multiple("h", &fields).unwrap();
    let _: () = a.set("marker", "1").unwrap();
    wait_value(&pair.b, "marker", "1");
    let n: usize = pair.b.conn().hlen("h").unwrap();
    assert_eq!(n, 100);
    let shipped = pair.b.stat("bytes_received") - before;
    assert!(shipped > 6000, "{shipped} bytes: the DUMP was compressed");
    // Switched back at once; a setting of "no" is left alone.
    assert_eq!(rdbcompression(&pair.a), "yes");
    q(&mut a, &["CONFIG", "SET", "rdbcompression", "no"]);
    let _: () = a.hset("h", "f000", "b").unwrap();
    let _: () = a.set("marker", "2").unwrap();
    wait_value(&pair.b, "marker", "2");
    assert_eq!(rdbcompression(&pair.a), "no");
    pair.wait_converged(SETTLE);
}

/// The state Redis's own list.tcl leaves before "BLPOP when new key is
/// moved into place" (issue 26, point 8): a SWAPDB of a database holding a
/// key that expired while active expiry was off, a transaction that sleeps
/// with a blocked client waiting, two DEBUG RELOADs. Then a client blocked
/// on BLPOP is served by a RENAME into place, and both nodes hold the same
/// data. (The suite file hung only where its replication-stream tests,
/// which the module fails by design, stopped before selecting db 9 again:
/// its writer then ran in db 1 and its blocked client waited in db 9. With
/// those tests skipped, as scripts/server-suite.sh does, the file passes on
/// Redis 8.0.6 too.)
#[test]
fn a_blocked_pop_is_served_by_a_rename_after_swaps_sleeps_and_reloads() {
    let pair = Pair::start();
    pair.wait_in_step();
    let mut a = pair.a.conn();
    for args in [
        &["FLUSHALL"][..],
        &["DEBUG", "SET-ACTIVE-EXPIRE", "0"],
        &["SELECT", "1"],
        &["RPUSH", "k", "hello"],
        &["PEXPIRE", "k", "100"],
    ] {
        q(&mut a, args);
    }
    std::thread::sleep(Duration::from_millis(200));
    for args in [
        &["SWAPDB", "1", "9"][..],
        &["SELECT", "9"],
        &["SET", "somekey1", "someval1"],
        &["SELECT", "1"],
        &["SET", "somekey2", "someval2"],
        &["DEBUG", "SET-ACTIVE-EXPIRE", "1"],
        &["SELECT", "9"],
        &["DEBUG", "RELOAD"],
        &["DEBUG", "RELOAD"],
    ] {
        q(&mut a, args);
    }
    let mut blocked = pair.a.conn();
    q(&mut blocked, &["SELECT", "9"]);
    let waiter = std::thread::spawn(move || {
        let got: Vec<String> = command(&["BLPOP", "foo{t}", "0"])
            .query(&mut blocked)
            .unwrap();
        got
    });
    assert!(wait_until(SETTLE, || {
        let info: String = redis::cmd("INFO").arg("clients").query(&mut a).unwrap();
        info.contains("blocked_clients:1")
    }));
    let mut p = redis::pipe();
    p.atomic()
        .cmd("RPUSH")
        .arg("k")
        .arg("hello")
        .ignore()
        .cmd("PEXPIRE")
        .arg("k")
        .arg(100)
        .ignore()
        .cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.2")
        .ignore();
    let _: () = p.query(&mut a).unwrap();
    q(&mut a, &["LPUSH", "bob{t}", "abc", "def", "hij"]);
    q(&mut a, &["RENAME", "bob{t}", "foo{t}"]);
    assert_eq!(
        waiter.join().unwrap(),
        vec!["foo{t}".to_string(), "hij".to_string()]
    );
    pair.wait_converged(SETTLE);
    let mut b = pair.b.conn();
    q(&mut b, &["SELECT", "9"]);
    let left: Vec<String> = b.lrange("foo{t}", 0, -1).unwrap();
    assert_eq!(left, vec!["def".to_string(), "abc".to_string()]);
    let v: Option<String> = b.get("somekey1").unwrap();
    assert_eq!(v.as_deref(), Some("someval1"));
}
