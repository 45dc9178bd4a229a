//! Changes Redis makes without a keyspace event reach the peer: stream
//! consumer groups (XREADGROUP, XACK, XCLAIM, XAUTOCLAIM) and HyperLogLog
//! caches and encodings (PFCOUNT, PFDEBUG), run directly, in MULTI/EXEC
//! (also across event-loop iterations), in Lua scripts and in another
//! database.

mod common;

use std::time::Duration;

use common::{info_field, wait_until, Node, Pair};
use redis::{Connection, Value};

const SETTLE: Duration = Duration::from_secs(10);

fn cmd(c: &mut Connection, args: &[&str]) -> Value {
    let mut q = redis::cmd(args[0]);
    for a in &args[1..] {
        q.arg(*a);
    }
    q.query(c)
        .unwrap_or_else(|e| panic!("{args:?} failed: {e}"))
}

fn dump(node: &Node, db: i64, key: &str) -> Option<Vec<u8>> {
    let mut c = node.conn();
    let _: () = redis::cmd("SELECT").arg(db).query(&mut c).unwrap();
    redis::cmd("DUMP").arg(key).query(&mut c).unwrap()
}

/// Waits until `key` of `db` has the same DUMP (which carries a stream's
/// groups, consumers and PEL) on both nodes, and returns it.
fn wait_same_dump(pair: &Pair, db: i64, key: &str) -> Vec<u8> {
    let mut last = (None, None);
    let same = wait_until(SETTLE, || {
        last = (dump(&pair.a, db, key), dump(&pair.b, db, key));
        last.0.is_some() && last.0 == last.1
    });
    assert!(
        same,
        "{key} in db {db} differs: a={:?} b={:?}",
        last.0.map(|d| d.len()),
        last.1.map(|d| d.len())
    );
    last.0.unwrap_or_default()
}

/// `XINFO GROUPS key` of the first group on `node`, as field -> value text.
fn group_info(node: &Node, db: i64, key: &str) -> std::collections::HashMap<String, String> {
    let mut c = node.conn();
    let _: () = redis::cmd("SELECT").arg(db).query(&mut c).unwrap();
    let groups: Vec<Vec<Value>> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(key)
        .query(&mut c)
        .unwrap();
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Nil => "nil".into(),
        other => format!("{other:?}"),
    };
    groups[0]
        .chunks(2)
        .map(|kv| (text(&kv[0]), text(&kv[1])))
        .collect()
}

/// A stream with two entries and a group, on both nodes.
fn stream_with_group(pair: &Pair, db: i64) -> Connection {
    let mut a = pair.a.conn();
    let _: () = redis::cmd("SELECT").arg(db).query(&mut a).unwrap();
    cmd(&mut a, &["XADD", "s", "1-0", "f", "1"]);
    cmd(&mut a, &["XADD", "s", "2-0", "f", "2"]);
    cmd(&mut a, &["XGROUP", "CREATE", "s", "g", "0"]);
    wait_same_dump(pair, db, "s");
    a
}

#[test]
fn consumer_group_reads_acks_and_claims_reach_the_peer() {
    let pair = Pair::start();
    let mut a = stream_with_group(&pair, 0);
    cmd(&mut a, &["XGROUP", "CREATECONSUMER", "s", "g", "c"]);
    wait_same_dump(&pair, 0, "s");
    // An existing consumer reads: no keyspace event.
    cmd(
        &mut a,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "COUNT",
            "2",
            "STREAMS",
            "s",
            ">",
        ],
    );
    wait_same_dump(&pair, 0, "s");
    let b = group_info(&pair.b, 0, "s");
    assert_eq!(b["pending"], "2");
    assert_eq!(b["last-delivered-id"], "2-0");
    assert_eq!(b["entries-read"], "2");
    cmd(&mut a, &["XACK", "s", "g", "1-0"]);
    wait_same_dump(&pair, 0, "s");
    assert_eq!(group_info(&pair.b, 0, "s")["pending"], "1");
    cmd(&mut a, &["XCLAIM", "s", "g", "c2", "0", "2-0"]);
    wait_same_dump(&pair, 0, "s");
    let mut b = pair.b.conn();
    let pending: Vec<Vec<Value>> = redis::cmd("XPENDING")
        .arg("s")
        .arg("g")
        .arg("-")
        .arg("+")
        .arg(10)
        .query(&mut b)
        .unwrap();
    assert_eq!(
        pending[0][1],
        Value::BulkString(b"c2".to_vec()),
        "B sees the claim"
    );
    cmd(&mut a, &["XAUTOCLAIM", "s", "g", "c3", "0", "0-0"]);
    wait_same_dump(&pair, 0, "s");
    pair.wait_converged(SETTLE);
}

#[test]
fn silent_changes_in_multi_scripts_and_other_databases_reach_the_peer() {
    let pair = Pair::start();
    let mut a = stream_with_group(&pair, 3);
    // In another database, inside a script.
    cmd(
        &mut a,
        &[
            "EVAL",
            "return redis.call('XREADGROUP','GROUP','g','c','STREAMS','s','>')",
            "0",
        ],
    );
    wait_same_dump(&pair, 3, "s");
    assert_eq!(group_info(&pair.b, 3, "s")["pending"], "2");
    // Queued in MULTI, EXEC in the same pipeline.
    let _: () = redis::pipe()
        .atomic()
        .cmd("XACK")
        .arg("s")
        .arg("g")
        .arg("1-0")
        .query(&mut a)
        .unwrap();
    wait_same_dump(&pair, 3, "s");
    assert_eq!(group_info(&pair.b, 3, "s")["pending"], "1");
    // Queued in one event-loop iteration, run by an EXEC in a later one
    // (a flush ran in between, and another client's EXEC too).
    cmd(&mut a, &["MULTI"]);
    cmd(&mut a, &["XACK", "s", "g", "2-0"]);
    std::thread::sleep(Duration::from_millis(300));
    let mut other = pair.a.conn();
    let _: () = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("x")
        .arg(1)
        .query(&mut other)
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    cmd(&mut a, &["EXEC"]);
    wait_same_dump(&pair, 3, "s");
    assert_eq!(group_info(&pair.b, 3, "s")["pending"], "0");
    pair.wait_converged(SETTLE);
}

#[test]
fn hyperloglog_caches_and_encodings_reach_the_peer() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    cmd(&mut a, &["PFADD", "h", "a", "b", "c"]);
    wait_same_dump(&pair, 0, "h");
    // PFCOUNT writes the cached cardinality into the key.
    cmd(&mut a, &["PFCOUNT", "h"]);
    let after_count = wait_same_dump(&pair, 0, "h");
    cmd(&mut a, &["PFDEBUG", "TODENSE", "h"]);
    let dense = wait_same_dump(&pair, 0, "h");
    assert_ne!(after_count, dense, "TODENSE changed the encoding");
    let mut b = pair.b.conn();
    let encoding: String = redis::cmd("PFDEBUG")
        .arg("ENCODING")
        .arg("h")
        .query(&mut b)
        .unwrap();
    assert_eq!(encoding, "dense");
    pair.wait_converged(SETTLE);
}

fn wait_exists(node: &Node, key: &str) {
    assert!(
        wait_until(SETTLE, || {
            let n: i64 = redis::cmd("EXISTS")
                .arg(key)
                .query(&mut node.conn())
                .unwrap();
            n == 1
        }),
        "{key} did not arrive"
    );
}

#[test]
fn reading_a_changed_key_keeps_its_idle_time_and_frequency() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    cmd(&mut a, &["SET", "s", "v"]);
    cmd(&mut a, &["HSET", "h", "f", "v"]);
    let string: Vec<u8> = redis::cmd("DUMP").arg("s").query(&mut a).unwrap();
    let hash: Vec<u8> = redis::cmd("DUMP").arg("h").query(&mut a).unwrap();
    cmd(
        &mut a,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
    );
    // Read by MGET (a short string) and by DUMP (a hash) when they ship.
    for (key, payload) in [("s2", &string), ("h2", &hash)] {
        let _: () = redis::cmd("RESTORE")
            .arg(key)
            .arg(0)
            .arg(payload.as_slice())
            .arg("IDLETIME")
            .arg(1000)
            .query(&mut a)
            .unwrap();
        wait_exists(&pair.b, key);
        let idle: i64 = redis::cmd("OBJECT")
            .arg("IDLETIME")
            .arg(key)
            .query(&mut a)
            .unwrap();
        assert!(
            (1000..1010).contains(&idle),
            "{key}: OBJECT IDLETIME {idle} after the module read it"
        );
    }
    cmd(
        &mut a,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"],
    );
    for (key, payload) in [("s3", &string), ("h3", &hash)] {
        let _: () = redis::cmd("RESTORE")
            .arg(key)
            .arg(0)
            .arg(payload.as_slice())
            .arg("FREQ")
            .arg(100)
            .query(&mut a)
            .unwrap();
        wait_exists(&pair.b, key);
        let freq: i64 = redis::cmd("OBJECT")
            .arg("FREQ")
            .arg(key)
            .query(&mut a)
            .unwrap();
        assert_eq!(freq, 100, "{key}: OBJECT FREQ after the module read it");
    }
}

#[test]
fn module_reads_count_no_keyspace_hits_where_the_server_allows() {
    let pair = Pair::start();
    let server = info_field(&pair.a, "server", "server_name");
    if server != "valkey" {
        // Redis 7.0 has no way to read a key without counting it (no
        // REDISMODULE_OPEN_KEY_NOSTATS, and MGET/DUMP count): docs/limitations.md.
        eprintln!(
            "skipped: {} counts every read (docs/limitations.md)",
            if server.is_empty() {
                "redis 7.0"
            } else {
                &server
            }
        );
        return;
    }
    let mut a = pair.a.conn();
    cmd(&mut a, &["CONFIG", "RESETSTAT"]);
    cmd(&mut a, &["SET", "k", &"x".repeat(1000)]);
    cmd(&mut a, &["DEL", "gone"]);
    wait_exists(&pair.b, "k");
    assert_eq!(info_field(&pair.a, "stats", "keyspace_hits"), "0");
    assert_eq!(info_field(&pair.a, "stats", "keyspace_misses"), "0");
}

/// The MONITOR feed of `node`, as lines, from the moment it returns.
fn monitor(node: &Node) -> std::io::BufReader<std::net::TcpStream> {
    use std::io::{BufRead, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", node.port)).unwrap();
    s.set_read_timeout(Some(SETTLE)).unwrap();
    s.write_all(b"MONITOR\r\n").unwrap();
    let mut r = std::io::BufReader::new(s);
    let mut ok = String::new();
    r.read_line(&mut ok).unwrap();
    assert_eq!(ok, "+OK\r\n");
    r
}

/// Collections of every encoding and a long string, written on `c`.
fn write_collections(c: &mut Connection) {
    cmd(c, &["HSET", "h", "f", "v", "", "empty"]);
    cmd(c, &["SADD", "ints", "1", "2", "-3"]);
    cmd(c, &["SADD", "words", "a", "b", ""]);
    cmd(
        c,
        &[
            "ZADD", "z", "1", "a", "2.5", "b", "-inf", "low", "+inf", "high",
        ],
    );
    cmd(c, &["RPUSH", "l", "a", "", "c"]);
    let ints = [
        "-5",
        "127",
        "4096",
        "70000",
        "-8388609",
        "1099511627776",
        "-9223372036854775808",
        "01",
        "-0",
        "+1",
    ];
    for (i, v) in ints.iter().enumerate() {
        cmd(c, &["HSET", "hints", v, &i.to_string()]);
        cmd(c, &["ZADD", "zints", &i.to_string(), v]);
    }
    let (at_limit, over) = ("v".repeat(64), "w".repeat(65));
    cmd(c, &["HSET", "hlimit", "f", &at_limit]);
    cmd(c, &["HSET", "hover", "f", &over, "g", "1"]);
    cmd(c, &["ZADD", "zover", "1", &over]);
    cmd(
        c,
        &[
            "ZADD", "zscores", "-0", "neg0", "0.1", "tenth", "1e300", "huge", "-1e-300", "tiny",
        ],
    );
    for i in 0..600 {
        let (i, v) = (i.to_string(), format!("value-{i}"));
        cmd(c, &["HSET", "bigh", &i, &v]);
        cmd(c, &["SADD", "bigs", &v]);
        cmd(c, &["ZADD", "bigz", &format!("{i}.{i}"), &v]);
        cmd(c, &["RPUSH", "bigl", &v]);
    }
    cmd(c, &["SET", "long", &"x".repeat(1000)]);
}

#[test]
fn reading_collections_and_long_strings_runs_no_command() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    cmd(&mut a, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    cmd(&mut a, &["SLOWLOG", "RESET"]);
    cmd(&mut a, &["CONFIG", "RESETSTAT"]);
    let mut feed = monitor(&pair.a);
    write_collections(&mut a);
    pair.wait_converged(SETTLE);
    cmd(&mut a, &["ECHO", "done"]);
    let mut seen = Vec::new();
    loop {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut feed, &mut line).expect("MONITOR feed");
        assert!(!line.is_empty(), "MONITOR closed");
        if line.contains("\"ECHO\" \"done\"") {
            break;
        }
        seen.push(line);
    }
    let module = |l: &&String| {
        ["\"DUMP\"", "\"MGET\"", "\"GET\"", "\"SCAN\""]
            .iter()
            .any(|c| l.contains(c))
    };
    let reads: Vec<&String> = seen.iter().filter(module).collect();
    assert!(
        reads.is_empty(),
        "{} reads of the module in MONITOR, the first: {:?}",
        reads.len(),
        &reads[..reads.len().min(5)]
    );
    let stats = String::from_utf8(
        redis::cmd("INFO")
            .arg("commandstats")
            .query::<Vec<u8>>(&mut a)
            .unwrap(),
    )
    .unwrap();
    for command in [
        "cmdstat_dump:",
        "cmdstat_mget:",
        "cmdstat_get:",
        "cmdstat_scan:",
    ] {
        assert!(
            !stats.contains(command),
            "{command} in INFO commandstats:\n{stats}"
        );
    }
    // CONFIG RESETSTAT counts itself; the module's CONFIG GET/SET
    // rdbcompression would show as well.
    for command in ["cmdstat_config|get:", "cmdstat_config|set:"] {
        assert!(
            !stats.contains(command),
            "{command} in INFO commandstats:\n{stats}"
        );
    }
    let slowlog: Vec<Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(10_000)
        .query(&mut a)
        .unwrap();
    for entry in &slowlog {
        let text = format!("{entry:?}");
        for command in ["\"DUMP\"", "\"MGET\"", "rdbcompression"] {
            assert!(
                !text
                    .to_ascii_lowercase()
                    .contains(&command.to_ascii_lowercase()),
                "the module's read in SLOWLOG: {text}"
            );
        }
    }
}

#[test]
fn collections_read_in_place_arrive_whole_in_every_encoding() {
    // As DUMP payloads: with the merges on, the hashes, sets and sorted
    // sets would ship as element states.
    let pair = Pair::start_whole_keys(&[], &[]);
    let mut a = pair.a.conn();
    // B checks every payload in depth (listpacks entry by entry), where
    // the server still has the setting (Valkey 9 dropped it).
    let sanitizing = redis::cmd("CONFIG")
        .arg("SET")
        .arg("sanitize-dump-payload")
        .arg("yes")
        .query::<()>(&mut pair.b.conn())
        .is_ok();
    write_collections(&mut a);
    cmd(&mut a, &["PEXPIREAT", "bigz", "4000000000000"]);
    pair.wait_converged(SETTLE);
    if sanitizing {
        let sanitized: u64 = info_field(&pair.b, "stats", "dump_payload_sanitizations")
            .parse()
            .unwrap();
        assert!(sanitized >= 10, "{sanitized} payloads checked in depth");
    } else {
        eprintln!("no sanitize-dump-payload on this server: payloads not checked in depth");
    }
    let keys = [
        "h", "ints", "words", "z", "l", "bigh", "bigs", "bigz", "bigl", "hints", "zints", "hlimit",
        "hover", "zover", "zscores",
    ];
    for key in keys {
        let read = |node: &Node, args: &[&str]| -> Value {
            let mut c = node.conn();
            cmd(&mut c, args)
        };
        let encoding = ["OBJECT", "ENCODING", key];
        assert_eq!(read(&pair.a, &encoding), read(&pair.b, &encoding), "{key}");
        let expiry = ["PEXPIRETIME", key];
        assert_eq!(read(&pair.a, &expiry), read(&pair.b, &expiry), "{key}");
    }
    let mut b = pair.b.conn();
    let zrange = |c: &mut Connection, key: &str| cmd(c, &["ZRANGE", key, "0", "-1", "WITHSCORES"]);
    assert_eq!(zrange(&mut a, "z"), zrange(&mut b, "z"));
    assert_eq!(zrange(&mut a, "bigz"), zrange(&mut b, "bigz"));
    assert_eq!(zrange(&mut a, "zscores"), zrange(&mut b, "zscores"));
    assert_eq!(zrange(&mut a, "zints"), zrange(&mut b, "zints"));
    let lrange = |c: &mut Connection, key: &str| cmd(c, &["LRANGE", key, "0", "-1"]);
    assert_eq!(lrange(&mut a, "bigl"), lrange(&mut b, "bigl"));
    assert_eq!(lrange(&mut a, "l"), lrange(&mut b, "l"));
}

#[test]
fn a_bitfield_whose_writes_all_fail_still_ships_the_key_it_created() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    // 200 does not fit an i8: the SET fails, yet the key is created
    // (zero-filled) without a keyspace event.
    let reply = cmd(
        &mut a,
        &[
            "BITFIELD", "bits", "OVERFLOW", "FAIL", "SET", "i8", "0", "200",
        ],
    );
    assert_eq!(reply, Value::Array(vec![Value::Nil]));
    assert_eq!(cmd(&mut a, &["STRLEN", "bits"]), Value::Int(1));
    wait_exists(&pair.b, "bits");
    pair.wait_converged(SETTLE);
}

/// A TTL write and then, in the same event-loop iteration, a change no
/// keyspace event reports (a consumer group's read): the key's change is
/// not one of its TTL alone, and the read reaches the peer (found by a
/// review: the key shipped only its TTL).
#[test]
fn a_silent_change_after_a_ttl_write_in_one_iteration_reaches_the_peer() {
    let pair = Pair::start();
    let mut a = stream_with_group(&pair, 0);
    cmd(&mut a, &["XGROUP", "CREATECONSUMER", "s", "g", "c"]);
    wait_same_dump(&pair, 0, "s");
    let mut p = redis::pipe();
    p.cmd("PEXPIRE").arg("s").arg(100_000_000);
    p.cmd("XREADGROUP")
        .arg("GROUP")
        .arg("g")
        .arg("c")
        .arg("COUNT")
        .arg(1)
        .arg("STREAMS")
        .arg("s")
        .arg(">");
    let _: Vec<Value> = p.query(&mut a).unwrap();
    wait_same_dump(&pair, 0, "s");
    assert_eq!(group_info(&pair.b, 0, "s")["pending"], "1");
    pair.wait_converged(SETTLE);
}

#[test]
fn strings_arrive_in_the_encoding_and_size_their_writer_holds() {
    let pair = Pair::start();
    let mut a = pair.a.conn();
    // A small integer is a shared object on a client's SET, a larger one
    // `int`; each kind of write the peer applies: a run of plain strings,
    // one with a TTL, a merged counter, values that only look numeric.
    cmd(
        &mut a,
        &["MSET", "small", "42", "big", "12345678901", "text", "hi"],
    );
    cmd(
        &mut a,
        &["MSET", "neg", "-7", "zeros", "007", "long", &"x".repeat(60)],
    );
    cmd(&mut a, &["SET", "ttl", "99999", "PX", "100000"]);
    cmd(&mut a, &["INCRBY", "counter", "123456"]);
    cmd(&mut a, &["SET", "plus", "+5"]);
    let keys = [
        "small", "big", "text", "neg", "zeros", "long", "ttl", "counter", "plus",
    ];
    pair.wait_converged(SETTLE);
    let mut b = pair.b.conn();
    for key in keys {
        let encoding = ["OBJECT", "ENCODING", key];
        assert_eq!(cmd(&mut a, &encoding), cmd(&mut b, &encoding), "{key}");
        let usage = ["MEMORY", "USAGE", key];
        assert_eq!(cmd(&mut a, &usage), cmd(&mut b, &usage), "{key}");
        assert_eq!(
            cmd(&mut a, &["GET", key]),
            cmd(&mut b, &["GET", key]),
            "{key}"
        );
    }
}
