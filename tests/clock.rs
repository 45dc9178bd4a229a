//! A peer whose wall clock runs far ahead: its entries are refused and
//! reported, never applied or acknowledged, and the healthy node's clock
//! stays where it was (`max-clock-offset`, docs/convergence.md "Clocks").

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{wait_until, Node, Pair};
use redis::Commands;

const TEN_YEARS_MS: i64 = 10 * 365 * 86_400_000;

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn clock_skew(node: &Node, ms: i64) {
    let _: () = redis::cmd("RDMASYNC.DEBUG")
        .arg("CLOCK-SKEW")
        .arg(ms)
        .query(&mut node.conn())
        .unwrap();
}

/// How far this node's clock is from the wall clock of the test, in ms.
fn clock_drift_ms(node: &Node) -> i64 {
    node.stat("clock_ms") as i64 - unix_ms() as i64
}

#[test]
fn a_peer_ten_years_ahead_is_refused_and_the_healthy_node_keeps_its_clock() {
    let pair = Pair::start();
    pair.wait_in_step();
    let (a, b) = (&pair.a, &pair.b);
    let _: () = a.conn().set("before", "1").unwrap();
    assert!(wait_until(Duration::from_secs(10), || b
        .conn()
        .exists::<_, bool>("before")
        .unwrap()));

    // A's clock jumps ten years ahead; what it writes now is stamped there.
    clock_skew(a, TEN_YEARS_MS);
    let _: () = a.conn().set("from-the-future", "1").unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || b.stat("clock_refusals") >= 1),
        "B never refused A's entry: {:?}",
        b.status()
    );
    // The entry's refusal (counted just before the link thread records
    // it), or already the handshake's that follows it.
    let mut error = String::new();
    assert!(
        wait_until(Duration::from_secs(10), || {
            error = b.status()["last_error"].clone();
            error.contains("ahead of this node's") && error.contains("max-clock-offset")
        }),
        "B's last_error does not say why: {error}"
    );
    assert!(
        b.log()
            .contains("ms ahead of this node's clock, beyond max-clock-offset"),
        "the entry's refusal is not in B's log"
    );

    // The link comes back only to be refused at the handshake, by both.
    assert!(
        wait_until(Duration::from_secs(15), || {
            b.stat("handshakes_refused") >= 1 && a.stat("handshakes_refused") >= 1
        }),
        "no handshake refused: a={:?} b={:?}",
        a.status(),
        b.status()
    );
    assert!(
        b.log().contains("the peer's clock is"),
        "B's log: no clock refusal"
    );

    // Not applied, not acknowledged, not skipped: A still holds it as lag.
    assert!(!b.conn().exists::<_, bool>("from-the-future").unwrap());
    assert!(
        a.stat("lag_entries") >= 1,
        "A's entry was acknowledged: {:?}",
        a.status()
    );

    // B's clock never moved toward A's; both servers keep serving.
    let drift = clock_drift_ms(b);
    assert!(drift.abs() < 60_000, "B's clock moved {drift} ms");
    assert!(clock_drift_ms(a) > TEN_YEARS_MS - 60_000);
    let _: () = b.conn().set("b-still-writes", "1").unwrap();
    let _: () = a.conn().set("a-still-writes", "1").unwrap();
    assert_eq!(b.conn().get::<_, String>("b-still-writes").unwrap(), "1");
    assert!(clock_drift_ms(b).abs() < 60_000);
}

#[test]
fn a_bound_raised_above_the_jump_lets_the_waiting_changes_in() {
    // Recovery as docs/convergence.md says: B reloaded with a bound above
    // the jump takes what A stamped meanwhile; nothing was lost.
    let pair = Pair::start_with(&[], &["max-clock-offset=86400000"]);
    pair.wait_in_step();
    let (a, b) = (&pair.a, &pair.b);
    clock_skew(a, 3_600_000);
    let _: () = a.conn().set("an-hour-ahead", "1").unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || b
            .conn()
            .exists::<_, bool>("an-hour-ahead")
            .unwrap()),
        "B refused an entry within its bound: {:?}",
        b.status()
    );
    assert_eq!(b.stat("clock_refusals"), 0);
    // B accepted the stamp: its clock moved past it (the bound allowed it).
    assert!(clock_drift_ms(b) > 3_600_000 - 60_000);
}
