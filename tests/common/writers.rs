//! Writers who meet: a client on each node updating the same key at the
//! same time, every reply checked (tests/merges.rs, tests/hash_merges.rs).

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use redis::{Connection, Value};

use super::{Node, Pair};

/// Updates per side per scenario.
pub const UPDATES: usize = 1000;
/// Commands per pipeline (replies checked one by one).
pub const PIPELINE: usize = 10;

/// Runs `update(i)` for `i` in `0..UPDATES` on `node`, `PIPELINE` at a time,
/// checking every reply with `ok`.
pub fn write_all(node: &Node, update: impl Fn(usize) -> redis::Cmd, ok: impl Fn(&Value) -> bool) {
    let mut c = node.conn();
    for chunk in (0..UPDATES).collect::<Vec<_>>().chunks(PIPELINE) {
        let mut p = redis::pipe();
        for &i in chunk {
            p.add_command(update(i));
        }
        let replies: Vec<Value> = p.query(&mut c).expect("pipeline");
        for (i, r) in chunk.iter().zip(&replies) {
            assert!(
                ok(r),
                "update {i} on {}: unexpected reply {r:?}",
                node.pid()
            );
        }
    }
}

/// Both writers at once, then waits for the pair to converge.
pub fn at_once(
    pair: &Pair,
    a: impl Fn(usize) -> redis::Cmd + Send + 'static,
    b: impl Fn(usize) -> redis::Cmd + Send + 'static,
    ok: fn(&Value) -> bool,
) {
    let start = Arc::new(Barrier::new(2));
    thread::scope(|s| {
        let (sa, sb) = (start.clone(), start.clone());
        s.spawn(move || {
            sa.wait();
            write_all(&pair.a, a, ok)
        });
        s.spawn(move || {
            sb.wait();
            write_all(&pair.b, b, ok)
        });
    });
    pair.wait_converged(Duration::from_secs(30));
}

pub fn integer(v: &Value) -> bool {
    matches!(v, Value::Int(_))
}

pub fn okay(v: &Value) -> bool {
    matches!(
        v,
        Value::Okay | Value::Int(_) | Value::SimpleString(_) | Value::BulkString(_)
    )
}

pub fn cmd(words: &[&str]) -> redis::Cmd {
    let mut c = redis::cmd(words[0]);
    for w in &words[1..] {
        c.arg(*w);
    }
    c
}

/// How many of `expected` a check finds missing, on either node, once the
/// pair has settled (`Pair::wait_settled`: equal digests alone can be a
/// link reconnecting with the same amount missing on both).
pub fn lost_on_both(pair: &Pair, mut missing: impl FnMut(&mut Connection) -> usize) -> usize {
    pair.wait_settled(std::time::Duration::from_secs(30));
    missing(&mut pair.a.conn()) + missing(&mut pair.b.conn())
}

pub fn report(scenario: &str, lost: usize, of: usize) {
    eprintln!("{scenario}: {lost} of {of} acknowledged updates lost");
    assert_eq!(lost, 0, "{scenario}: acknowledged updates lost");
}
