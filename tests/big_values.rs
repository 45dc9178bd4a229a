//! Big values (issue 26, point 3): a string over 4 MiB and collections of
//! more than 4,096 elements (10,000 here) travel in a catch-up (the backlog after a cut,
//! a full sync to a peer that lost its data) read a slice per event-loop
//! step, not at once, and arrive whole and equal, also while a client
//! changes them during the read. Every key ships whole here
//! (`common::WHOLE_KEYS`): with the merges on, the collections written by
//! element would ship their element metadata instead.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{cut, heal, Node, Pair};

const SETTLE: Duration = Duration::from_secs(60);

/// Elements of each big collection (the slice is 4,096).
const ELEMENTS: u32 = 10_000;

/// The big keys and how each is made on `node`.
const MAKE: &str = r#"
local n = tonumber(ARGV[1])
for i = 1, n do
  redis.call('HSET', 'big:h', 'f' .. i, 'v' .. i)
  redis.call('SADD', 'big:s', 'm' .. i)
  redis.call('ZADD', 'big:z', math.floor(i / 3), 'z' .. i)
  redis.call('RPUSH', 'big:l', 'e' .. i)
end
-- One score for every member (a sorted set used as a lexical index): too
-- long a run to resume in (a slice would skip more than 16,384 members),
-- read at once.
for i = 1, n * 5 / 2 do
  redis.call('ZADD', 'big:lex', 0, 'x' .. i)
end
for i = 1, 6000 do
  redis.call('APPEND', 'big:str', string.rep(string.char(65 + i % 26), 1000 + i % 97))
end
redis.call('PEXPIRE', 'big:h', 3600000)
return redis.call('STRLEN', 'big:str')
"#;

const KEYS: [&str; 6] = ["big:h", "big:s", "big:z", "big:l", "big:lex", "big:str"];

fn make_big_values(node: &Node) {
    let len: u64 = redis::cmd("EVAL")
        .arg(MAKE)
        .arg(0)
        .arg(ELEMENTS)
        .query(&mut node.conn())
        .unwrap();
    assert!(len > 5 << 20, "the string is {len} bytes, not over 5 MiB");
}

/// The digest of each big key's value, its length and whether it expires.
fn fingerprint(node: &Node) -> Vec<(String, String, i64, bool)> {
    let mut c = node.conn();
    KEYS.iter()
        .map(|&key| {
            let digest: Vec<String> = redis::cmd("DEBUG")
                .arg("DIGEST-VALUE")
                .arg(key)
                .query(&mut c)
                .unwrap();
            let kind: String = redis::cmd("TYPE").arg(key).query(&mut c).unwrap();
            let len_cmd = match kind.as_str() {
                "hash" => "HLEN",
                "set" => "SCARD",
                "zset" => "ZCARD",
                "list" => "LLEN",
                _ => "STRLEN",
            };
            let len: i64 = redis::cmd(len_cmd).arg(key).query(&mut c).unwrap();
            let ttl: i64 = redis::cmd("PTTL").arg(key).query(&mut c).unwrap();
            (key.to_string(), digest.concat(), len, ttl > 0)
        })
        .collect()
}

fn assert_same_values(pair: &Pair) {
    pair.wait_settled(SETTLE);
    let (a, b) = (fingerprint(&pair.a), fingerprint(&pair.b));
    assert_eq!(a, b, "the big values differ between the nodes");
}

/// Changes every big key on `node` until `stop`: fields and members added
/// and removed, elements pushed, bytes appended.
fn change_until(port: u16, stop: Arc<AtomicBool>) -> u64 {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut c = client.get_connection().unwrap();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let _: () = redis::pipe()
            .cmd("HSET")
            .arg("big:h")
            .arg(format!("w{i}"))
            .arg(i)
            .ignore()
            .cmd("HDEL")
            .arg("big:h")
            .arg(format!("f{}", i * 7 % 10_000 + 1))
            .ignore()
            .cmd("SADD")
            .arg("big:s")
            .arg(format!("w{i}"))
            .ignore()
            .cmd("SREM")
            .arg("big:s")
            .arg(format!("m{}", i * 11 % 10_000 + 1))
            .ignore()
            .cmd("ZADD")
            .arg("big:z")
            .arg(i % 5_000)
            .arg(format!("w{i}"))
            .ignore()
            .cmd("RPUSH")
            .arg("big:l")
            .arg(format!("w{i}"))
            .ignore()
            .cmd("APPEND")
            .arg("big:str")
            .arg(format!("<{i}>"))
            .ignore()
            .query(&mut c)
            .unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    i
}

#[test]
fn big_values_travel_a_slice_at_a_time_and_arrive_whole() {
    let pair = Pair::start_whole_keys(&[], &[]);
    pair.wait_in_step();

    // The backlog after a cut: written while the peer is away.
    let (partial, full) = (pair.a.stat("partial_syncs"), pair.a.syncs_sent());
    cut(&pair);
    make_big_values(&pair.a);
    heal(&pair);
    assert_same_values(&pair);
    assert!(
        pair.a.stat("partial_syncs") > partial,
        "{:?}",
        pair.a.status()
    );
    assert_eq!(
        pair.a.syncs_sent(),
        full,
        "not the backlog: {:?}",
        pair.a.status()
    );
    let sliced = pair.a.stat("values_sliced");
    // Each but the sorted set of one score (read at once).
    assert!(
        sliced >= 5,
        "A read {sliced} values a slice at a time; {:?}",
        pair.a.status()
    );
    assert_eq!(pair.b.stat("values_sliced"), 0, "{:?}", pair.b.status());
    assert_built_on_b(&pair);
}

/// B built the big collections a slice at a time (no `RESTORE` of them).
fn assert_built_on_b(pair: &Pair) {
    let built = pair.b.stat("values_built");
    assert!(
        built >= 5,
        "B built {built} of the 5 big collections: {:?}",
        pair.b.status()
    );
}

#[test]
fn a_full_sync_reads_big_values_in_slices() {
    let mut pair = Pair::start_whole_keys(&[], &[]);
    pair.wait_in_step();
    make_big_values(&pair.a);
    assert_same_values(&pair);
    let (before, syncs) = (pair.a.stat("values_sliced"), pair.a.syncs_sent());
    // B comes back empty (no persistence): A owes it a full sync.
    pair.b.restart();
    assert!(
        common::wait_until(SETTLE, || pair.a.syncs_sent() > syncs),
        "A sent no sync: {:?}",
        pair.a.status()
    );
    assert_same_values(&pair);
    let sliced = pair.a.stat("values_sliced") - before;
    assert!(
        sliced >= 5,
        "the full sync read {sliced} values a slice at a time: {:?}",
        pair.a.status()
    );
    assert_built_on_b(&pair);
}

#[test]
fn a_full_sync_reads_big_values_in_slices_while_a_client_changes_them() {
    let mut pair = Pair::start_whole_keys(&[], &[]);
    pair.wait_in_step();
    make_big_values(&pair.a);
    assert_same_values(&pair);
    let before = pair.a.stat("values_sliced") + pair.a.stat("slices_restarted");
    let syncs = pair.a.syncs_sent();

    // B comes back empty (no persistence): A owes it a full sync, and a
    // client changes every big key while it runs.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (port, stop) = (pair.a.port, stop.clone());
        std::thread::spawn(move || change_until(port, stop))
    };
    pair.b.restart();
    assert!(
        common::wait_until(SETTLE, || pair.a.syncs_sent() > syncs),
        "A sent no sync: {:?}",
        pair.a.status()
    );
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    let changes = writer.join().unwrap();
    assert!(changes > 0);
    assert_same_values(&pair);
    let after = pair.a.stat("values_sliced") + pair.a.stat("slices_restarted");
    assert!(
        after > before,
        "the full sync read no value a slice at a time: {:?}",
        pair.a.status()
    );
    let hlen: i64 = redis::cmd("HLEN")
        .arg("big:h")
        .query(&mut pair.b.conn())
        .unwrap();
    assert!(hlen > ELEMENTS as i64 / 2, "B holds {hlen} fields of big:h");
}

/// Fields of the hash the peer builds in the tests below (a few hundred
/// 2 ms steps in a debug build).
const BUILT_FIELDS: u32 = 300_000;
/// The key the peer builds its first big value of a batch under.
const BUILD_KEY: &[u8] = b"\xffrdmasync:building:0";

/// Writes a hash of `BUILT_FIELDS` fields on `node` in one command (it
/// ships as one value).
fn write_big_hash(node: &Node) {
    let _: i64 = redis::cmd("EVAL")
        .arg(
            "for i = 1, tonumber(ARGV[1]) do redis.call('HSET', 'built', 'f' .. i, i) end \
             return 1",
        )
        .arg(0)
        .arg(BUILT_FIELDS)
        .query(&mut node.conn())
        .unwrap();
}

/// A pair whose node B is building the big hash A wrote.
fn pair_building_a_big_hash() -> Pair {
    let pair = Pair::start_whole_keys(&[], &[]);
    pair.wait_in_step();
    write_big_hash(&pair.a);
    assert!(
        wait_for_build(&pair.b, SETTLE),
        "B never built the hash: {:?}",
        pair.b.status()
    );
    pair
}

/// Whether `node` holds the build key (0 or 1).
fn build_key_held(node: &Node) -> i64 {
    redis::cmd("EXISTS")
        .arg(BUILD_KEY)
        .query(&mut node.conn())
        .unwrap()
}

/// Polls `node` until its build key exists (`true`) or `timeout` passes.
fn wait_for_build(node: &Node, timeout: Duration) -> bool {
    let mut c = node.conn();
    common::wait_until(timeout, || {
        redis::cmd("EXISTS")
            .arg(BUILD_KEY)
            .query::<i64>(&mut c)
            .unwrap()
            == 1
    })
}

#[test]
fn the_peer_serves_clients_while_it_builds_a_big_value_and_shows_it_only_whole() {
    let pair = Pair::start_whole_keys(&[], &[]);
    pair.wait_in_step();
    let stop = Arc::new(AtomicBool::new(false));
    // A reader of B: the hash's length at each poll, and whether the
    // build key existed then.
    let reader = {
        let (port, stop) = (pair.b.port, stop.clone());
        std::thread::spawn(move || {
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
            let mut c = client.get_connection().unwrap();
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let (len, building): (i64, i64) = redis::pipe()
                    .cmd("HLEN")
                    .arg("built")
                    .cmd("EXISTS")
                    .arg(BUILD_KEY)
                    .query(&mut c)
                    .unwrap();
                seen.push((len, building == 1));
                std::thread::sleep(Duration::from_millis(1));
            }
            seen
        })
    };
    write_big_hash(&pair.a);
    pair.wait_settled(SETTLE);
    stop.store(true, Ordering::Relaxed);
    let seen = reader.join().unwrap();
    let partial: Vec<i64> = seen
        .iter()
        .map(|&(len, _)| len)
        .filter(|&len| len != 0 && len != i64::from(BUILT_FIELDS))
        .collect();
    assert!(
        partial.is_empty(),
        "a reader of B saw part of the hash: {partial:?}"
    );
    let during = seen.iter().filter(|&&(_, building)| building).count();
    assert!(
        during >= 5,
        "B answered {during} polls while it built the hash (of {}): {:?}",
        seen.len(),
        pair.b.status()
    );
    assert_eq!(pair.b.stat("values_built"), 1, "{:?}", pair.b.status());
    assert_eq!(
        build_key_held(&pair.b),
        0,
        "the build key is gone once the value is in place"
    );
}

#[test]
fn a_client_write_on_the_peer_during_a_build_is_newer_and_wins() {
    let pair = pair_building_a_big_hash();
    // Newer than A's hash: with whole-key last-writer-wins it replaces it.
    let _: () = redis::cmd("DEL")
        .arg("built")
        .query(&mut pair.b.conn())
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg("built")
        .arg("late")
        .arg("1")
        .query(&mut pair.b.conn())
        .unwrap();
    pair.wait_settled(SETTLE);
    for node in [&pair.a, &pair.b] {
        let fields: Vec<String> = redis::cmd("HKEYS")
            .arg("built")
            .query(&mut node.conn())
            .unwrap();
        assert_eq!(fields, ["late"], "the newer write wins on both nodes");
    }
    assert_eq!(pair.b.stat("values_built"), 0, "{:?}", pair.b.status());
    assert_eq!(
        build_key_held(&pair.b),
        0,
        "the build key of the losing value is removed"
    );
}

#[test]
fn a_reload_during_a_build_drops_the_build_key_and_the_value_still_arrives_whole() {
    let pair = pair_building_a_big_hash();
    // The snapshot holds the build key; the load deletes it.
    let _: () = redis::cmd("DEBUG")
        .arg("RELOAD")
        .query(&mut pair.b.conn())
        .unwrap();
    pair.wait_settled(SETTLE);
    let len: i64 = redis::cmd("HLEN")
        .arg("built")
        .query(&mut pair.b.conn())
        .unwrap();
    assert_eq!(len, i64::from(BUILT_FIELDS));
    assert!(
        pair.b.stat("builds_restarted") >= 1,
        "the build did not start again: {:?}",
        pair.b.status()
    );
    assert_eq!(build_key_held(&pair.b), 0);
}
