//! Big merge states (issue 26, point 3, with the merges on): a hash, set
//! or sorted set whose elements were written while the peer was away
//! holds each with its metadata until the peer has them; its state ships
//! in slices of 4,096 elements, one per event-loop step, each merged as it
//! comes (a whole state of 2,000,000 fields held the writer's main thread
//! 8.9 s and the peer's 18.4 s; `scripts/stall.sh`). What must hold: the
//! merge is the one the whole state makes (a field the peer wrote later
//! keeps its value, one it wrote alone stays, a removal made before the
//! fields keeps what it removed), and the slices are used (`values_sliced`).

mod common;

use std::time::Duration;

use common::{cut, heal, Node, Pair};

const SETTLE: Duration = Duration::from_secs(60);

/// Elements written on A while away: more than two slices.
const ELEMENTS: u32 = 10_000;

const MAKE: &str = r#"
local n = tonumber(ARGV[1])
for i = 1, n do
  redis.call('HSET', 'big:h', 'f' .. i, 'a' .. i)
  redis.call('SADD', 'big:s', 'm' .. i)
  redis.call('ZADD', 'big:z', i, 'z' .. i)
end
return n
"#;

fn make_big_states(node: &Node) {
    let n: u32 = redis::cmd("EVAL")
        .arg(MAKE)
        .arg(0)
        .arg(ELEMENTS)
        .query(&mut node.conn())
        .unwrap();
    assert_eq!(n, ELEMENTS);
}

/// Each big key's whole value on `node`, sorted.
fn values(node: &Node) -> Vec<Vec<String>> {
    let mut c = node.conn();
    let mut h: Vec<String> = redis::cmd("HGETALL").arg("big:h").query(&mut c).unwrap();
    let mut s: Vec<String> = redis::cmd("SMEMBERS").arg("big:s").query(&mut c).unwrap();
    let mut z: Vec<String> = redis::cmd("ZRANGE")
        .arg("big:z")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut c)
        .unwrap();
    for v in [&mut h, &mut s, &mut z] {
        v.sort();
    }
    vec![h, s, z]
}

fn hget(node: &Node, field: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg("big:h")
        .arg(field)
        .query(&mut node.conn())
        .unwrap()
}

fn assert_same(pair: &Pair) {
    pair.wait_settled(SETTLE);
    let (a, b) = (values(&pair.a), values(&pair.b));
    assert!(a == b, "the big keys differ between the nodes");
}

#[test]
fn a_big_state_written_while_cut_ships_in_slices_and_merges_as_a_whole() {
    let pair = Pair::start();
    pair.wait_in_step();
    // A field at rest on both, which A's delete below removes.
    let _: () = redis::cmd("HSET")
        .arg("big:h")
        .arg("old")
        .arg("o")
        .query(&mut pair.a.conn())
        .unwrap();
    pair.wait_in_step();
    cut(&pair);
    let _: () = redis::cmd("DEL")
        .arg("big:h")
        .query(&mut pair.a.conn())
        .unwrap();
    make_big_states(&pair.a);
    // B, later: a newer write of one of A's fields, one of its own.
    std::thread::sleep(Duration::from_millis(5));
    let _: () = redis::cmd("HSET")
        .arg("big:h")
        .arg("f7")
        .arg("b-newer")
        .arg("own")
        .arg("b")
        .query(&mut pair.b.conn())
        .unwrap();
    let sliced = pair.a.stat("values_sliced");
    heal(&pair);
    assert_same(&pair);
    let shipped = pair.a.stat("values_sliced") - sliced;
    assert!(
        shipped >= 3,
        "A shipped {shipped} states in slices: {:?}",
        pair.a.status()
    );
    for node in [&pair.a, &pair.b] {
        assert_eq!(
            hget(node, "f7").as_deref(),
            Some("b-newer"),
            "B's newer write"
        );
        assert_eq!(hget(node, "own").as_deref(), Some("b"), "B's own field");
        assert_eq!(hget(node, "old"), None, "A's delete had seen it");
        assert_eq!(hget(node, "f9999").as_deref(), Some("a9999"));
        assert_eq!(values(node)[1].len(), ELEMENTS as usize);
    }
    assert_eq!(
        pair.a.stat("merge_fallbacks") + pair.b.stat("merge_fallbacks"),
        0
    );
}

#[test]
fn a_full_sync_ships_a_big_state_in_slices() {
    let mut pair = Pair::start();
    pair.wait_in_step();
    cut(&pair);
    make_big_states(&pair.a);
    let (sliced, syncs) = (pair.a.stat("values_sliced"), pair.a.syncs_sent());
    // B comes back empty (no persistence) and dials A: A owes it a full
    // sync, with the elements' metadata still held.
    pair.b.restart();
    heal(&pair);
    assert_same(&pair);
    assert!(pair.a.syncs_sent() > syncs, "{:?}", pair.a.status());
    let shipped = pair.a.stat("values_sliced") - sliced;
    assert!(
        shipped >= 3,
        "A shipped {shipped} states in slices: {:?}",
        pair.a.status()
    );
    assert_eq!(hget(&pair.b, "f1").as_deref(), Some("a1"));
    assert_eq!(
        values(&pair.b)[2].len(),
        2 * ELEMENTS as usize,
        "members and scores"
    );
}
