//! No acknowledgement covers a change the peer did not apply, whatever a
//! link loses when it dies or drops: each race is hit on purpose with the
//! module's fault hooks (`RDMASYNC.DEBUG`), so it runs the same over tcp
//! and over rdma (no test proxy can sit on an rdma link).

mod common;

use std::time::Duration;

use common::{wait_until, Node, Pair};
use redis::Commands;

fn arrives(node: &Node, key: &str) -> bool {
    wait_until(Duration::from_secs(15), || {
        node.conn().exists::<_, bool>(key).unwrap()
    })
}

/// Everything `node` shipped is acknowledged (soon).
fn assert_all_acknowledged(node: &Node) {
    assert!(
        wait_until(Duration::from_secs(15), || node.stat("lag_entries") == 0),
        "changes wait for an ack: {:?}",
        node.status()
    );
}

#[test]
fn an_ack_over_a_fast_new_link_never_covers_a_batch_the_old_link_lost() {
    let pair = Pair::start();
    pair.wait_in_step();
    let (a, b) = (&pair.a, &pair.b);
    // A's main thread learns of link events late, as when its apply queue
    // is backed up; meanwhile its sender loses a batch with the old link.
    let reconnects = a.stat("reconnects");
    a.debug(&["HOLD-APPLY", "ON"]);
    a.debug(&["FAIL-NEXT-POST"]);
    let _: () = a.conn().set("lost-with-the-link", "1").unwrap();
    assert!(
        wait_until(Duration::from_secs(15), || a.stat("reconnects")
            > reconnects),
        "the link did not come back: {:?}",
        a.status()
    );
    // Queued while A still believes in the old link. Written to the new one
    // (as before the fix), B would apply it and its ack would cover the batch
    // the old link lost; now the sender drops it (it was queued for the old
    // link) and A resends it once it learns of the new link.
    let dropped = a.stat("entries_dropped");
    let _: () = a.conn().set("after-the-reconnect", "1").unwrap();
    assert!(
        wait_until(Duration::from_secs(15), || {
            a.stat("entries_dropped") > dropped
                || b.conn().exists::<_, bool>("after-the-reconnect").unwrap()
        }),
        "the second write went nowhere: a={:?}",
        a.status()
    );
    // Room for B's ack of it to reach A's (held) apply queue.
    std::thread::sleep(Duration::from_millis(200));
    a.debug(&["HOLD-APPLY", "OFF"]);
    assert!(
        arrives(b, "lost-with-the-link"),
        "the batch lost with the link never reached B: a={:?} b={:?}",
        a.status(),
        b.status()
    );
    assert!(arrives(b, "after-the-reconnect"));
    pair.wait_converged(Duration::from_secs(15));
    assert_all_acknowledged(a);
}

#[test]
fn a_batch_lost_on_a_live_link_stops_it_and_arrives_on_the_next() {
    let pair = Pair::start();
    pair.wait_in_step();
    let (a, b) = (&pair.a, &pair.b);
    let bad_before = b.stat("bad_frames");
    a.debug(&["DROP-NEXT-BATCH"]);
    let _: () = a.conn().set("skipped", "1").unwrap();
    let _: () = a.conn().set("next", "1").unwrap();
    assert!(
        arrives(b, "skipped"),
        "the lost batch never reached B (a later ack covered it): a={:?} b={:?}",
        a.status(),
        b.status()
    );
    assert!(arrives(b, "next"));
    assert!(b.stat("bad_frames") > bad_before);
    assert!(
        b.log().contains("skipped from sequence"),
        "B's log does not name the gap"
    );
    pair.wait_converged(Duration::from_secs(15));
}

#[test]
fn a_change_no_frame_can_carry_is_refused_visibly_and_the_link_stays_up() {
    // With the smallest ring a frame holds at most 16 KiB: a key of 20 KB
    // cannot be framed. It is refused before it is numbered (counted,
    // logged, last_error), and what comes after it, in the same batch and
    // in a full sync, still arrives over the same link.
    let pair = Pair::start_with(&["ring-size=65536"], &["ring-size=65536"]);
    pair.wait_in_step();
    let (a, b) = (&pair.a, &pair.b);
    let links = a.stat("reconnects");
    let huge = "k".repeat(20_000);
    let _: () = redis::pipe()
        .atomic()
        .set(&huge, "1")
        .ignore()
        .set("beside-the-huge-key", "1")
        .ignore()
        .query(&mut a.conn())
        .unwrap();
    assert!(arrives(b, "beside-the-huge-key"));
    assert!(a.stat("entries_refused") >= 1, "{:?}", a.status());
    assert!(
        a.status()["last_error"].contains("refused"),
        "{:?}",
        a.status()
    );
    assert!(a.log().contains("refused: the peer's ring takes frames"));
    assert!(!b.conn().exists::<_, bool>(&huge).unwrap());
    let _: () = a.conn().set("after-the-huge-key", "1").unwrap();
    assert!(arrives(b, "after-the-huge-key"));
    assert_eq!(a.stat("reconnects"), links, "the refusal cost a reconnect");
    assert_eq!(b.stat("bad_frames"), 0, "{:?}", b.status());
    // The refused change waits for no ack.
    assert_all_acknowledged(a);
}

#[test]
fn a_full_sync_with_a_key_no_frame_can_carry_finishes() {
    let mut pair = Pair::start_with(&["ring-size=65536"], &["ring-size=65536"]);
    pair.wait_in_step();
    let huge = "k".repeat(20_000);
    {
        let a = &pair.a;
        let mut c = a.conn();
        for i in 0..50 {
            let _: () = c.set(format!("before-{i}"), i).unwrap();
        }
        let _: () = c.set(&huge, "1").unwrap();
        for i in 0..50 {
            let _: () = c.set(format!("after-{i}"), i).unwrap();
        }
    }
    // B starts empty-handed: A's sync to it walks past the huge key.
    pair.b.kill();
    let _ = std::fs::remove_dir_all(pair.b.dir.join("appendonlydir"));
    let _ = std::fs::remove_file(pair.b.dir.join("dump.rdb"));
    pair.b.restart();
    let (a, b) = (&pair.a, &pair.b);
    pair.wait_linked();
    assert!(
        wait_until(Duration::from_secs(20), || (0..50).all(|i| {
            b.conn().exists::<_, bool>(format!("after-{i}")).unwrap()
                && b.conn().exists::<_, bool>(format!("before-{i}")).unwrap()
        })),
        "the sync never got past the huge key: a={:?} b={:?}",
        a.status(),
        b.status()
    );
    assert!(!b.conn().exists::<_, bool>(&huge).unwrap());
    assert!(a.stat("entries_refused") >= 2, "{:?}", a.status());
    let reconnects = a.stat("reconnects");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(a.stat("reconnects"), reconnects, "the link flaps");
    assert_eq!(a.stat("sync_in_progress"), 0, "{:?}", a.status());
}

#[test]
fn writes_on_both_nodes_through_repeated_failed_writes_all_arrive() {
    // Both nodes write their own keys and one shared key while the sender
    // of each fails a write or loses a batch now and then: every
    // acknowledged write is on both.
    let pair = Pair::start();
    pair.wait_in_step();
    let (a, b) = (&pair.a, &pair.b);
    let mut expected = Vec::new();
    for round in 0..20 {
        let (writer, name) = if round % 2 == 0 { (a, "a") } else { (b, "b") };
        if round % 3 == 0 {
            writer.debug(&["FAIL-NEXT-POST"]);
        }
        if round % 5 == 0 {
            writer.debug(&["DROP-NEXT-BATCH"]);
        }
        for i in 0..5 {
            let own = format!("{name}:{round}:{i}");
            let _: () = writer.conn().set(&own, round).unwrap();
            expected.push((own, round.to_string()));
            let _: () = writer
                .conn()
                .set("shared", format!("{name}:{round}"))
                .unwrap();
        }
    }
    pair.wait_converged(Duration::from_secs(30));
    for node in [a, b] {
        for (key, value) in &expected {
            let got: Option<String> = node.conn().get(key).unwrap();
            assert_eq!(
                got.as_deref(),
                Some(value.as_str()),
                "{key} on {}",
                node.name
            );
        }
        // The last write by the clock of this one machine wins on both.
        let shared: String = node.conn().get("shared").unwrap();
        assert_eq!(shared, "b:19", "on {}", node.name);
    }
}

/// What a reader of the peer sees of a transaction made while the link was
/// down (docs/convergence.md "Transactions across a catch-up"): the
/// catch-up resends the keys it touched, read again at their current
/// values, in batches of at most 256 keys, each applied whole. A reader
/// of B can see the transaction's keys arrive batch by batch (each key
/// either not yet there or at its value on A, never anything else), and
/// all of them once the catch-up is done. Live, the same transaction is one
/// batch (replication::multi_exec_is_applied_atomically).
#[test]
fn a_transaction_made_while_cut_arrives_in_whole_batches_of_its_keys() {
    const KEYS: usize = 600;
    let pair = Pair::start();
    pair.wait_in_step();
    let (a, b) = (&pair.a, &pair.b);
    let keys: Vec<String> = (0..KEYS).map(|i| format!("tx:{i}")).collect();
    common::cut(&pair);
    let mut p = redis::pipe();
    p.atomic();
    for k in &keys {
        p.cmd("SET").arg(k).arg("v1").ignore();
    }
    let _: () = p.query(&mut a.conn()).unwrap();
    let applied_before = b.stat("batches_applied");
    // A reader of B while the catch-up runs: what it may see.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (seen, stop, keys) = (seen.clone(), stop.clone(), keys.clone());
        let mut c = b.conn();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let vals: Vec<Option<String>> =
                    redis::cmd("MGET").arg(&keys).query(&mut c).unwrap();
                assert!(
                    vals.iter()
                        .all(|v| v.is_none() || v.as_deref() == Some("v1")),
                    "a key of the transaction held a value A never gave it"
                );
                let n = vals.iter().filter(|v| v.is_some()).count();
                seen.lock().unwrap().insert(n);
                if n == KEYS {
                    return;
                }
            }
        })
    };
    // The link back: each node dials the other's listen port again.
    a.set_peer_port(&b.listen_port().to_string());
    b.set_peer_port(&a.listen_port().to_string());
    pair.wait_linked();
    assert!(
        wait_until(Duration::from_secs(20), || b
            .conn()
            .exists::<_, bool>(&keys[KEYS - 1])
            .unwrap()
            && (0..KEYS).all(|i| b.conn().exists::<_, bool>(&keys[i]).unwrap())),
        "the transaction never arrived whole: a={:?}",
        a.status()
    );
    // All are on B: the reader's next read sees them and it returns.
    reader.join().unwrap();
    drop(stop);
    // Resent in batches of at most 256 keys: at least three of them.
    assert!(
        b.stat("batches_applied") >= applied_before + KEYS.div_ceil(256) as u64,
        "{:?}",
        b.status()
    );
    assert_eq!(a.status()["catchup"], "partial", "{:?}", a.status());
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.contains(&KEYS),
        "the reader never saw the whole: {seen:?}"
    );
    eprintln!("a reader of B saw {seen:?} of the transaction's {KEYS} keys");
    pair.wait_converged(Duration::from_secs(15));
}
