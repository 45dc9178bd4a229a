//! Appends to big strings (issue 26, point 3): a string of 64 KiB or more
//! that was only appended to since it last shipped ships the bytes
//! appended, not its whole value (`converge::appends`), and the pair still
//! converges when the peer wrote the key at once.

mod common;

use std::time::Duration;

use common::{wait_until, Node, Pair};

const SETTLE: Duration = Duration::from_secs(30);

/// Bytes of the big string (over the 64 KiB the edits need).
const BIG: usize = 200 * 1024;

fn get(node: &Node, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(&mut node.conn()).unwrap()
}

fn run(node: &Node, args: &[&[u8]]) {
    let _: redis::Value = redis::cmd(std::str::from_utf8(args[0]).unwrap())
        .arg(&args[1..])
        .query(&mut node.conn())
        .unwrap();
}

/// Waits until B holds `want` at `key`.
fn wait_for_value(pair: &Pair, key: &str, want: &[u8]) {
    let ok = wait_until(SETTLE, || get(&pair.b, key).as_deref() == Some(want));
    assert!(
        ok,
        "B holds {:?} bytes at {key}, A {:?}; a={:?} b={:?}",
        get(&pair.b, key).map(|v| v.len()),
        get(&pair.a, key).map(|v| v.len()),
        pair.a.status(),
        pair.b.status()
    );
}

/// A pair in step, `log` a string of `BIG` bytes written on A and held by
/// both; returns it with the value.
fn pair_with_a_big_string() -> (Pair, Vec<u8>) {
    let pair = Pair::start();
    pair.wait_in_step();
    let want = vec![b'a'; BIG];
    run(&pair.a, &[b"SET", b"log", &want]);
    wait_for_value(&pair, "log", &want);
    pair.wait_settled(SETTLE);
    (pair, want)
}

#[test]
fn appends_to_a_big_string_ship_the_appended_bytes_alone() {
    let pair = Pair::start();
    pair.wait_in_step();
    let mut want = vec![b'a'; BIG];
    run(&pair.a, &[b"SET", b"log", &want]);
    run(&pair.a, &[b"PEXPIRE", b"log", b"3600000"]);
    wait_for_value(&pair, "log", &want);
    pair.wait_settled(SETTLE);
    let sent_before = pair.a.stat("bytes_sent");
    for i in 0..50 {
        let line = format!("line {i}\n");
        run(&pair.a, &[b"APPEND", b"log", line.as_bytes()]);
        want.extend_from_slice(line.as_bytes());
    }
    wait_for_value(&pair, "log", &want);
    pair.wait_settled(SETTLE);
    let shipped = pair.a.stat("appends_shipped");
    let sent = pair.a.stat("bytes_sent") - sent_before;
    // Whole, the 50 appends would have shipped at least 50 x 200 KiB. The
    // first may ship whole: the PEXPIRE, once at rest, is the key's version.
    assert!(
        shipped >= 45,
        "{shipped} appends shipped as their bytes: {:?}",
        pair.a.status()
    );
    assert!(
        sent < 2 * BIG as u64,
        "{sent} bytes sent for 50 appends of a {BIG}-byte string ({shipped} as appends)"
    );
    let ttl: i64 = redis::cmd("PTTL")
        .arg("log")
        .query(&mut pair.b.conn())
        .unwrap();
    assert!(ttl > 0, "B's copy kept its TTL: {ttl}");
    assert_eq!(pair.b.stat("appends_unapplied"), 0);

    // Anything but appends since the last flush ships whole, and equal.
    let shipped = pair.a.stat("appends_shipped");
    run(&pair.a, &[b"SETRANGE", b"log", b"5", b"range"]);
    want[5..10].copy_from_slice(b"range");
    wait_for_value(&pair, "log", &want);
    let mut c = pair.a.conn();
    let _: () = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("log")
        .arg(&want)
        .ignore()
        .cmd("APPEND")
        .arg("log")
        .arg("after a set")
        .ignore()
        .query(&mut c)
        .unwrap();
    want.extend_from_slice(b"after a set");
    wait_for_value(&pair, "log", &want);
    assert_eq!(
        pair.a.stat("appends_shipped"),
        shipped,
        "SETRANGE and SET ship whole"
    );
    // Appends from B too: B took A's last value whole and ships from it.
    run(&pair.b, &[b"APPEND", b"log", b" and B"]);
    want.extend_from_slice(b" and B");
    assert!(
        wait_until(SETTLE, || get(&pair.a, "log").as_deref() == Some(&want[..])),
        "A did not get B's append"
    );
    pair.wait_settled(SETTLE);
    assert!(
        pair.b.stat("appends_shipped") >= 1,
        "B shipped its append whole"
    );
}

/// B writes the key while its sends are held, then A appends (newer): B
/// cannot take the appended bytes (it holds its own version, not the one
/// A appended to), and A, whose newer version B's write loses to, ships
/// its value again whole at its version. Without that, B kept its own
/// value for good.
#[test]
fn a_write_made_at_once_on_the_peer_makes_the_appended_string_ship_again() {
    let (pair, mut want) = pair_with_a_big_string();
    pair.b.hold_sends(true);
    run(&pair.b, &[b"SET", b"log", b"written on B"]);
    std::thread::sleep(Duration::from_millis(20));
    run(&pair.a, &[b"APPEND", b"log", b"+A"]);
    want.extend_from_slice(b"+A");
    let unapplied = wait_until(SETTLE, || pair.b.stat("appends_unapplied") >= 1);
    pair.b.hold_sends(false);
    assert!(
        unapplied,
        "B took A's appended bytes onto its own write: {:?}",
        pair.b.status()
    );
    wait_for_value(&pair, "log", &want);
    pair.wait_settled(SETTLE);
    assert_eq!(get(&pair.a, "log").as_deref(), Some(&want[..]));
    assert!(
        pair.a.stat("appends_reshipped") >= 1,
        "{:?}",
        pair.a.status()
    );
}

/// B sets a TTL while its sends are held, then A appends (newer, without
/// a TTL): the appended bytes carry A's expiry as a whole value would, so
/// B's older TTL write loses on both nodes. Without the expiry in the
/// append, B kept its TTL and A none (B would delete the key alone).
#[test]
fn an_append_newer_than_a_ttl_written_at_once_leaves_the_same_ttl_on_both() {
    let (pair, mut want) = pair_with_a_big_string();
    let shipped = pair.a.stat("appends_shipped");
    pair.b.hold_sends(true);
    run(&pair.b, &[b"PEXPIRE", b"log", b"3600000"]);
    std::thread::sleep(Duration::from_millis(20));
    run(&pair.a, &[b"APPEND", b"log", b"+A"]);
    want.extend_from_slice(b"+A");
    wait_for_value(&pair, "log", &want);
    pair.b.hold_sends(false);
    pair.wait_settled(SETTLE);
    assert!(
        pair.a.stat("appends_shipped") > shipped,
        "the append shipped whole"
    );
    let ttl = |n: &Node| -> i64 { redis::cmd("PTTL").arg("log").query(&mut n.conn()).unwrap() };
    assert_eq!(
        (ttl(&pair.a), ttl(&pair.b)),
        (-1, -1),
        "the newer append's TTL (none) on both"
    );
}

/// B evicts every key (maxmemory), the big string's tombstone with them:
/// A's next appends reach a node without the key and without a write of
/// it on the way. B ships a delete at an older stamp, which A discards and
/// answers with its whole value. Without that, B never got the key back
/// (each append counted unapplied, none written).
#[test]
fn a_peer_that_evicted_the_string_gets_it_back_whole() {
    let (pair, mut want) = pair_with_a_big_string();
    let mut b = pair.b.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-random")
        .query(&mut b)
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query(&mut b)
        .unwrap();
    // A write command evicts before it runs (and is refused).
    let _ = redis::cmd("SET")
        .arg("x")
        .arg("y")
        .query::<redis::Value>(&mut b);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query(&mut b)
        .unwrap();
    assert_eq!(get(&pair.b, "log"), None, "B evicted it");
    run(&pair.a, &[b"APPEND", b"log", b"+A"]);
    want.extend_from_slice(b"+A");
    wait_for_value(&pair, "log", &want);
    pair.wait_settled(SETTLE);
    assert!(
        pair.b.stat("appends_unapplied") >= 1,
        "{:?}",
        pair.b.status()
    );
    assert!(
        pair.a.stat("appends_reshipped") >= 1,
        "{:?}",
        pair.a.status()
    );
}
