//! Mixed pairs, for a migration with no downtime (issue 28): two nodes on
//! different servers, whose RDB formats differ, keep in sync both ways.
//! Strings, and the lists, sets, sorted sets and hashes the module
//! serialises itself (RDB format 10, which every server restores), cross
//! in both directions, and so do the function libraries (the peer loads
//! their code); what only a server's own DUMP writes (a stream) crosses
//! only towards a server that restores its format, and going the other way
//! it is refused by name, counted and reported, never dropped silently.
//!
//! Pairs: Redis 7.0 (RDB 10) with Valkey 8 (11), both from the machine's
//! packages; Redis 7.0 with Redis 8.0 (12) and with Valkey 9.1 (80), Redis
//! 7.4 (12) with Valkey 8 and with Valkey 9.1, and Redis 8.0 with Valkey
//! 9.1 when scripts/build-servers.sh built or fetched them (under
//! target/servers/).
//! A pair whose server is missing is skipped with a message saying so.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{free_port, module_args_at, test_ip, test_ip_b, value_read, wait_until, Node, Pair};

const SETTLE: Duration = Duration::from_secs(30);

/// The path of a server binary if it runs here.
fn server(name_or_path: &str) -> Option<String> {
    let runs = std::process::Command::new(name_or_path)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    runs.then(|| name_or_path.to_string())
}

/// A server scripts/build-servers.sh built (`redis` or `valkey`).
fn built(kind: &str) -> Option<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/servers");
    let mut found: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{kind}-")))
        })
        .map(|p| p.join(format!("src/{kind}-server")))
        .filter(|p| p.exists())
        .collect();
    // The newest version (9.1.10 after 9.1.9).
    let version = |p: &std::path::PathBuf| -> Vec<u32> {
        let name = p.parent().and_then(Path::parent).and_then(Path::file_name);
        let name = name
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        name.rsplit('-')
            .next()
            .unwrap_or("")
            .split('.')
            .filter_map(|n| n.parse().ok())
            .collect()
    };
    found.sort_by_key(version);
    server(&found.pop()?.display().to_string())
}

fn start_pair(server_a: &str, server_b: &str) -> Pair {
    start_pair_with(server_a, server_b, &[])
}

fn start_pair_with(server_a: &str, server_b: &str, extra: &[&str]) -> Pair {
    let (pa, pb) = (free_port(), free_port());
    let (ia, ib) = (test_ip(), test_ip_b());
    let a = Node::start_on(server_a, "a", module_args_at(&ia, pa, &ib, pb, extra));
    let b = Node::start_on(server_b, "b", module_args_at(&ib, pb, &ia, pa, extra));
    let pair = Pair { a, b };
    pair.wait_in_step();
    pair
}

/// The RDB format of `node`'s DUMP payloads (their footer).
fn rdb_format(node: &Node) -> u16 {
    let mut c = node.conn();
    let _: () = redis::cmd("SET")
        .arg("probe:rdb")
        .arg("x")
        .query(&mut c)
        .unwrap();
    let dump: Vec<u8> = redis::cmd("DUMP").arg("probe:rdb").query(&mut c).unwrap();
    let at = dump.len() - 10;
    u16::from_le_bytes([dump[at], dump[at + 1]])
}

/// Whether a payload of format `written` restores on a server of format
/// `reader` (as docs/operations.md states the rule).
fn crosses(written: u16, reader: u16) -> bool {
    written <= reader && !(reader >= 80 && (12..80).contains(&written))
}

/// Writes one key of each type, prefixed, on `node`.
fn write_every_type(node: &Node, p: &str) {
    let mut c = node.conn();
    let fields: Vec<(String, String)> = (0..200)
        .map(|i| (format!("f{i}"), format!("v{i}")))
        .collect();
    let _: () = redis::pipe()
        .cmd("SET")
        .arg(format!("{p}:str"))
        .arg("hello")
        .ignore()
        .cmd("INCRBY")
        .arg(format!("{p}:n"))
        .arg(41)
        .ignore()
        .cmd("HSET")
        .arg(format!("{p}:small"))
        .arg("a")
        .arg("1")
        .arg("b")
        .arg("2")
        .ignore()
        .cmd("HSET")
        .arg(format!("{p}:big"))
        .arg(&fields)
        .ignore()
        .cmd("SADD")
        .arg(format!("{p}:set"))
        .arg(&["x", "y", "z"])
        .ignore()
        .cmd("ZADD")
        .arg(format!("{p}:z"))
        .arg(1.5)
        .arg("m1")
        .arg(-2)
        .arg("m2")
        .ignore()
        .cmd("RPUSH")
        .arg(format!("{p}:l"))
        .arg(&["1", "2", "3"])
        .ignore()
        .cmd("SET")
        .arg(format!("{p}:ttl"))
        .arg("v")
        .arg("EX")
        .arg(3600)
        .ignore()
        .query(&mut c)
        .unwrap();
}

/// A key's value as the commands of its type read it (DUMP payloads of
/// two servers differ in their footer).
fn read_value(node: &Node, key: &str) -> String {
    let mut c = node.conn();
    let kind: String = redis::cmd("TYPE").arg(key).query(&mut c).unwrap();
    let Some(cmd) = value_read(&kind, key) else {
        return kind;
    };
    let mut items: Vec<String> = match cmd.query::<redis::Value>(&mut c).unwrap() {
        redis::Value::Array(v) => v.iter().map(|x| format!("{x:?}")).collect(),
        other => vec![format!("{other:?}")],
    };
    if kind == "hash" {
        // Each field with its value, then in order.
        items = items.chunks(2).map(|p| p.join("=")).collect();
    }
    if kind == "set" || kind == "hash" {
        items.sort();
    }
    let ttl: i64 = redis::cmd("PTTL").arg(key).query(&mut c).unwrap();
    format!("{kind} {items:?} expires:{}", ttl > 0)
}

fn check_mixed_pair(server_a: &str, server_b: &str) {
    let pair = start_pair(server_a, server_b);
    let (fa, fb) = (rdb_format(&pair.a), rdb_format(&pair.b));
    eprintln!("mixed pair: {server_a} (RDB {fa}) and {server_b} (RDB {fb})");
    write_every_type(&pair.a, "a");
    write_every_type(&pair.b, "b");
    let keys: Vec<String> = ["a", "b"]
        .iter()
        .flat_map(|p| {
            ["str", "n", "small", "big", "set", "z", "l", "ttl"].map(|k| format!("{p}:{k}"))
        })
        .collect();
    let same = || {
        keys.iter()
            .all(|k| read_value(&pair.a, k) == read_value(&pair.b, k))
    };
    assert!(
        wait_until(SETTLE, same),
        "values differ: {:?}",
        keys.iter()
            .filter(|k| read_value(&pair.a, k) != read_value(&pair.b, k))
            .map(|k| (k, read_value(&pair.a, k), read_value(&pair.b, k)))
            .collect::<Vec<_>>()
    );
    for k in &keys {
        assert!(
            !read_value(&pair.a, k).starts_with("none"),
            "{k} is on neither node"
        );
    }
    // A stream is written by each server's own DUMP, in its own format.
    for (from, to, f_from, f_to, p) in [
        (&pair.a, &pair.b, fa, fb, "a"),
        (&pair.b, &pair.a, fb, fa, "b"),
    ] {
        let refused = from.stat("entries_refused");
        let key = format!("{p}:stream");
        let _: String = redis::cmd("XADD")
            .arg(&key)
            .arg("*")
            .arg("f")
            .arg("v")
            .query(&mut from.conn())
            .unwrap();
        if crosses(f_from, f_to) {
            assert!(
                wait_until(SETTLE, || read_value(to, &key) == read_value(from, &key)),
                "the stream did not cross from RDB {f_from} to {f_to}: {}",
                read_value(to, &key)
            );
            assert_eq!(from.stat("entries_refused"), refused);
        } else {
            assert!(
                wait_until(SETTLE, || from.stat("entries_refused") > refused),
                "a stream of RDB {f_from} going to RDB {f_to} was not refused: {:?}",
                from.status()
            );
            let last = from.status()["last_error"].clone();
            assert!(
                last.contains(&format!("key '{key}'"))
                    && last.contains("stream")
                    && last.contains(&format!("RDB format {f_from}")),
                "{last}"
            );
            let exists: i64 = redis::cmd("EXISTS")
                .arg(&key)
                .query(&mut to.conn())
                .unwrap();
            assert_eq!(exists, 0, "a refused stream reached the peer");
        }
    }
    // The function libraries: a FUNCTION DUMP payload in the server's own
    // format, whose libraries the peer loads as code: they cross both ways.
    for (from, to, f_from, f_to, p) in [
        (&pair.a, &pair.b, fa, fb, "a"),
        (&pair.b, &pair.a, fb, fa, "b"),
    ] {
        let refused = from.stat("entries_refused");
        let code =
            format!("#!lua name=lib{p}\nredis.register_function('f{p}', function() return 1 end)");
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(&code)
            .query(&mut from.conn())
            .unwrap();
        let has = |n: &Node| {
            let v: redis::Value = redis::cmd("FUNCTION")
                .arg("LIST")
                .arg("LIBRARYNAME")
                .arg(format!("lib{p}"))
                .query(&mut n.conn())
                .unwrap();
            matches!(v, redis::Value::Array(ref l) if !l.is_empty())
        };
        assert!(
            wait_until(SETTLE, || has(to)),
            "lib{p} did not cross from RDB {f_from} to {f_to}: {:?}",
            from.status()
        );
        assert_eq!(from.stat("entries_refused"), refused);
    }
    // The pair goes on: a write after the refusals still crosses both ways.
    for (from, to) in [(&pair.a, &pair.b), (&pair.b, &pair.a)] {
        let _: () = redis::cmd("SET")
            .arg("after")
            .arg(from.port)
            .query(&mut from.conn())
            .unwrap();
        assert!(wait_until(SETTLE, || read_value(to, "after")
            == read_value(from, "after")));
    }
    assert_eq!(pair.a.stat("apply_errors") + pair.b.stat("apply_errors"), 0);
}

#[test]
fn redis_7_0_and_valkey_8_keep_in_sync_both_ways() {
    let (Some(a), Some(b)) = (server("redis-server"), server("valkey-server")) else {
        eprintln!("skipped: redis-server or valkey-server is not installed");
        return;
    };
    check_mixed_pair(&a, &b);
}

#[test]
fn redis_7_0_and_redis_8_keep_in_sync_both_ways() {
    let (Some(a), Some(b)) = (server("redis-server"), built("redis")) else {
        eprintln!("skipped: no Redis 8 under target/servers (scripts/build-servers.sh redis)");
        return;
    };
    check_mixed_pair(&a, &b);
}

/// Redis 7.4.1 as scripts/build-servers.sh redis-7.4 fetches it.
fn redis_7_4() -> Option<String> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("target/servers/redis-7.4.1/redis-server");
    server(&path.display().to_string())
}

#[test]
fn redis_7_0_and_valkey_9_keep_in_sync_both_ways() {
    let (Some(a), Some(b)) = (server("redis-server"), built("valkey")) else {
        eprintln!("skipped: no Valkey 9 under target/servers (scripts/build-servers.sh valkey)");
        return;
    };
    check_mixed_pair(&a, &b);
}

#[test]
fn redis_7_4_and_valkey_9_keep_in_sync_both_ways() {
    let (Some(a), Some(b)) = (redis_7_4(), built("valkey")) else {
        eprintln!(
            "skipped: no Redis 7.4 or Valkey 9 under target/servers \
             (scripts/build-servers.sh redis-7.4 valkey)"
        );
        return;
    };
    check_mixed_pair(&a, &b);
}

#[test]
fn redis_7_4_and_valkey_8_keep_in_sync_both_ways() {
    let (Some(a), Some(b)) = (redis_7_4(), server("valkey-server")) else {
        eprintln!(
            "skipped: no Redis 7.4 under target/servers (scripts/build-servers.sh redis-7.4) \
             or valkey-server is not installed"
        );
        return;
    };
    check_mixed_pair(&a, &b);
}

#[test]
fn redis_8_and_valkey_9_keep_in_sync_both_ways() {
    let (Some(a), Some(b)) = (built("redis"), built("valkey")) else {
        eprintln!(
            "skipped: no Redis 8 or Valkey 9 under target/servers (scripts/build-servers.sh)"
        );
        return;
    };
    check_mixed_pair(&a, &b);
}

/// A refusal for the RDB format does not hold back what the node's acks
/// claim: the merge metadata of its later changes is still collected.
#[test]
fn merges_go_on_and_settle_after_a_refusal() {
    let (Some(a), Some(b)) = (server("redis-server"), server("valkey-server")) else {
        eprintln!("skipped: redis-server or valkey-server is not installed");
        return;
    };
    let pair = start_pair_with(&a, &b, &["merge-elements=yes"]);
    let (newer, older) = match rdb_format(&pair.a) < rdb_format(&pair.b) {
        true => (&pair.b, &pair.a),
        false => (&pair.a, &pair.b),
    };
    let _: String = redis::cmd("XADD")
        .arg("s")
        .arg("*")
        .arg("f")
        .arg("v")
        .query(&mut newer.conn())
        .unwrap();
    assert!(
        wait_until(SETTLE, || newer.stat("entries_refused") > 0),
        "{:?}",
        newer.status()
    );
    for i in 0..20 {
        let _: () = redis::cmd("HSET")
            .arg("h")
            .arg(format!("f{i}"))
            .arg(i)
            .query(&mut newer.conn())
            .unwrap();
        let _: () = redis::cmd("HSET")
            .arg("h")
            .arg(format!("g{i}"))
            .arg(i)
            .query(&mut older.conn())
            .unwrap();
    }
    assert!(wait_until(SETTLE, || read_value(&pair.a, "h")
        == read_value(&pair.b, "h")));
    let hlen: i64 = redis::cmd("HLEN")
        .arg("h")
        .query(&mut older.conn())
        .unwrap();
    assert_eq!(hlen, 40);
    for node in [newer, older] {
        assert!(
            wait_until(SETTLE, || node.stat("merge_elements") == 0),
            "element metadata never collected after a refusal: {:?}",
            node.status()
        );
    }
}

/// A library only the newer server compiles (Valkey's `server.` API) is
/// refused on the older one, which keeps its libraries: counted in
/// `entries_refused` and named in `last_error`, not an apply error, and not
/// held against the coverage of its acks (as a format refusal on the
/// writer): the merge metadata of later changes is still collected.
#[test]
fn a_library_the_older_server_cannot_compile_is_refused_there_and_merges_go_on() {
    let (Some(a), Some(b)) = (server("redis-server"), server("valkey-server")) else {
        eprintln!("skipped: redis-server or valkey-server is not installed");
        return;
    };
    let pair = start_pair_with(&a, &b, &["merge-elements=yes"]);
    let (valkey, redis) = (&pair.b, &pair.a);
    let code = "#!lua name=vlib\nserver.register_function('vf', function() return 1 end)";
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(code)
        .query(&mut valkey.conn())
        .unwrap();
    assert!(
        wait_until(SETTLE, || redis.stat("entries_refused") > 0),
        "{:?}",
        redis.status()
    );
    let last = redis.status()["last_error"].clone();
    assert!(last.contains("function library 'vlib'"), "{last}");
    assert_eq!(redis.stat("apply_errors"), 0);
    let listed: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query(&mut redis.conn())
        .unwrap();
    assert!(listed.is_empty(), "Redis 7.0 holds {listed:?}");
    for i in 0..20 {
        for (node, p) in [(valkey, "v"), (redis, "r")] {
            let _: () = redis::cmd("HSET")
                .arg("h")
                .arg(format!("{p}{i}"))
                .arg(i)
                .query(&mut node.conn())
                .unwrap();
        }
    }
    assert!(wait_until(SETTLE, || read_value(&pair.a, "h")
        == read_value(&pair.b, "h")));
    for node in [valkey, redis] {
        assert!(
            wait_until(SETTLE, || node.stat("merge_elements") == 0),
            "element metadata never collected after a refused library: {:?}",
            node.status()
        );
    }
}
