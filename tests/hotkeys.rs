//! A large collection rewritten by every command rests between snapshots
//! (see src/capture/hotkeys.rs): the flushes that include it wait, so writes made
//! after it never reach the peer before it, and both nodes still converge.
//! The hash here ships whole (`common::WHOLE_KEYS`): with the merges on, an
//! HSET ships its field alone and reads nothing whole, while a list, a
//! string or a stream still rests this way.

mod common;

use std::time::{Duration, Instant};

use common::{wait_until, Pair};
use redis::Connection;

/// Generous: in the emulated Soft-RoCE guest B needs ~20 s to apply the
/// 200 reads of a 40,000-field hash that `hot_key_rest_zero_...` ships.
const SETTLE: Duration = Duration::from_secs(60);

/// A hash large enough that its read is costly (`chunks` x 1,000 fields).
fn fill_hash(a: &mut Connection, chunks: usize) {
    for chunk in 0..chunks {
        let mut cmd = redis::cmd("HSET");
        cmd.arg("big");
        for i in 0..1000 {
            cmd.arg(format!("seed:{chunk}:{i}")).arg("x".repeat(32));
        }
        let _: i64 = cmd.query(a).unwrap();
    }
}

/// `HSET big f:<i> <i>` on `a`.
fn set_field(a: &mut Connection, i: u64) {
    let _: i64 = redis::cmd("HSET")
        .arg("big")
        .arg(format!("f:{i}"))
        .arg(i)
        .query(a)
        .unwrap();
}

/// A hash whose DUMP is costly (40,000 fields).
fn fill_big_hash(a: &mut Connection) {
    fill_hash(a, 40);
}

/// Changes held behind a resting key get their versions before SAVE writes
/// the RDB: restarted from it, the node ships them as the newer writes.
/// (Stamped only after the save, the RDB would hold the new value with the
/// old version, and the peer would keep its old value as a duplicate.)
#[test]
fn a_save_records_the_versions_of_held_changes() {
    let mut pair = Pair::start_whole_keys(&["hot-key-rest=10000"], &[]);
    let mut a = pair.a.conn();
    let _: () = redis::cmd("SET").arg("k").arg("v1").query(&mut a).unwrap();
    // 300,000 fields: a read of several ms, a rest of 19x that.
    fill_hash(&mut a, 300);
    pair.wait_converged(SETTLE);
    // Ships the hash and puts it to rest; the next two changes are held.
    set_field(&mut a, 0);
    set_field(&mut a, 1);
    let _: () = redis::cmd("SET").arg("k").arg("v2").query(&mut a).unwrap();
    let _: () = redis::cmd("SAVE").query(&mut a).unwrap();
    pair.a.restart();
    pair.wait_linked();
    pair.wait_converged(SETTLE);
    let on_b: String = redis::cmd("GET")
        .arg("k")
        .query(&mut pair.b.conn())
        .unwrap();
    assert_eq!(on_b, "v2");
}

#[test]
fn hot_key_rest_zero_ships_every_change_at_once() {
    let pair = Pair::start_whole_keys(&["hot-key-rest=0"], &["hot-key-rest=0"]);
    let mut a = pair.a.conn();
    fill_big_hash(&mut a);
    for i in 0..200u64 {
        set_field(&mut a, i);
    }
    pair.wait_converged(SETTLE);
    assert_eq!(pair.a.stat("flushes_deferred"), 0, "{:?}", pair.a.status());
}

#[test]
fn a_costly_hot_key_rests_and_later_writes_never_overtake_it() {
    let pair = Pair::start_whole_keys(&[], &[]);
    let mut a = pair.a.conn();
    fill_big_hash(&mut a);
    pair.wait_converged(SETTLE);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let checker = {
        let stop = stop.clone();
        let mut b = pair.b.conn();
        std::thread::spawn(move || {
            let (mut checks, mut overtaken) = (0u64, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let seen: Option<u64> = redis::cmd("GET").arg("marker").query(&mut b).unwrap();
                let Some(m) = seen else { continue };
                // The field was written before the marker, in an earlier command.
                let has: bool = redis::cmd("HEXISTS")
                    .arg("big")
                    .arg(format!("f:{m}"))
                    .query(&mut b)
                    .unwrap();
                checks += 1;
                if !has {
                    overtaken.push(m);
                }
            }
            (checks, overtaken)
        })
    };
    for i in 0..3000u64 {
        set_field(&mut a, i);
        let _: () = redis::cmd("SET")
            .arg("marker")
            .arg(i)
            .query(&mut a)
            .unwrap();
    }
    let b_has_last = wait_until(SETTLE, || {
        redis::cmd("GET")
            .arg("marker")
            .query::<Option<u64>>(&mut pair.b.conn())
            .unwrap()
            == Some(2999)
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (checks, overtaken) = checker.join().unwrap();
    assert!(
        b_has_last,
        "B never got the last marker: {:?}",
        pair.b.status()
    );
    assert!(checks > 10, "only {checks} checks");
    assert!(
        overtaken.is_empty(),
        "markers seen before their field: {overtaken:?}"
    );
    assert!(
        pair.a.stat("flushes_deferred") > 0,
        "the big hash never rested: {:?}",
        pair.a.status()
    );
    pair.wait_converged(SETTLE);
}

/// A's reads costly enough to start a rest so far, and their time in us.
fn costly_reads(pair: &Pair) -> (u64, u64) {
    (pair.a.stat("costly_reads"), pair.a.stat("costly_read_us"))
}

/// At least 3 s of writes, and then until A read the hash 3 times (a rest
/// is 19x a read: in the emulated guest a read of the hash takes ~335 ms,
/// so 3 s may hold no read at all), for at most 30 s.
fn window_is_over(pair: &Pair, before: (u64, u64), started: Instant) -> bool {
    let elapsed = started.elapsed();
    elapsed >= Duration::from_secs(30)
        || (elapsed >= Duration::from_secs(3) && costly_reads(pair).0 >= before.0 + 3)
}

/// Writes `big` on A every 2 ms for at least 3 s (see `window_is_over`) (and, with `peer_writes`, other
/// keys on B meanwhile, which A applies); returns A's reads of the hash in
/// that time and the most a resting hash allows. Each read starts a rest of
/// 19x its time: about one per 20 read times. Allowed: twice that (timing
/// noise), plus two.
fn dumps_while_writing(pair: &Pair, peer_writes: bool) -> (u64, f64) {
    let mut a = pair.a.conn();
    fill_big_hash(&mut a);
    pair.wait_converged(SETTLE);
    let before = costly_reads(pair);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let on_b = peer_writes.then(|| {
        let stop = stop.clone();
        let mut b = pair.b.conn();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _: () = redis::cmd("SET")
                    .arg(format!("b:{}", n % 100))
                    .arg(n)
                    .query(&mut b)
                    .unwrap();
                n += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            n
        })
    });
    let started = Instant::now();
    let mut writes = 0;
    while !window_is_over(pair, before, started) {
        for _ in 0..25 {
            set_field(&mut a, writes);
            writes += 1;
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let elapsed_us = started.elapsed().as_secs_f64() * 1e6;
    let after = costly_reads(pair);
    let dumps = after.0 - before.0;
    let dump_us = (after.1 - before.1) as f64 / dumps.max(1) as f64;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let b_writes = on_b.map_or(0, |t| t.join().unwrap());
    pair.wait_converged(SETTLE);
    assert!(dumps >= 1, "the hash never shipped");
    let most = elapsed_us / (10.0 * dump_us) + 2.0;
    eprintln!(
        "{writes} writes on A, {b_writes} on B: {dumps} reads of {dump_us} us, at most {most:.1} expected"
    );
    (dumps, most)
}

/// An ack from the peer writes nothing here, so it must not end a rest.
/// (Each ack used to flush at once, holding nothing: the hot hash was
/// read again after every apply on the peer, one per 3-4 read times.)
#[test]
fn acks_from_the_peer_do_not_end_a_rest() {
    // No cap on the rest below 19x the read's time.
    let pair = Pair::start_whole_keys(&["hot-key-rest=10000"], &[]);
    let (dumps, most) = dumps_while_writing(&pair, false);
    assert!(
        dumps as f64 <= most,
        "{dumps} reads, at most {most:.1} expected: acks end the hash's rest; {:?}",
        pair.a.status()
    );
}

/// The peer's writes to other keys cannot overwrite the held change, so
/// applying them must not end its rest either (an active-active pair where
/// both nodes write would otherwise dump a hot key per incoming batch).
#[test]
fn writes_from_the_peer_to_other_keys_do_not_end_a_rest() {
    let pair = Pair::start_whole_keys(&["hot-key-rest=10000"], &[]);
    let (dumps, most) = dumps_while_writing(&pair, true);
    assert!(
        dumps as f64 <= most,
        "{dumps} reads, at most {most:.1} expected: the peer's writes end the hash's rest; {:?}",
        pair.a.status()
    );
}
