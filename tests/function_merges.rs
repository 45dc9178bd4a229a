//! Writers who meet through functions (issue 27): a client on each node
//! calls the same library function (FCALL) at the same time, the function
//! increments a counter, writes a hash field and increments another, adds
//! a set member and a sorted-set member and pushes to a list. The calls
//! inside a function pass the command filter as a script's do: once the
//! pair has converged every acknowledged update of both nodes is there,
//! and nothing fell back to whole-key last writer wins.

mod common;

use std::collections::{HashMap, HashSet};
use std::thread;
use std::time::Duration;

use common::merging::{merged_and_collected, or_explain, started_merging};
use common::writers::{at_once, cmd, integer, lost_on_both, report, write_all, UPDATES};
use common::Pair;
use redis::Connection;

const LIBRARY: &str = "#!lua name=mergelib
redis.register_function('upd', function(keys, args)
  local name, i = args[1], args[2]
  redis.call('INCRBY', keys[1], 1)
  redis.call('HSET', keys[2], name, i)
  redis.call('HINCRBY', keys[2], 'total', 1)
  redis.call('SADD', keys[3], name)
  redis.call('ZADD', keys[4], i, name)
  return redis.call('RPUSH', keys[5], name)
end)";

fn fcall(side: &'static str) -> impl Fn(usize) -> redis::Cmd {
    move |i| {
        let name = format!("{side}{i}");
        cmd(&[
            "FCALL",
            "upd",
            "5",
            "c",
            "h",
            "s",
            "z",
            "l",
            &name,
            &i.to_string(),
        ])
    }
}

/// Updates each call makes: INCRBY, HSET, HINCRBY, SADD, ZADD, RPUSH.
const PER_CALL: usize = 6;

/// How many of the updates of both sides `c` lacks (an increment missing
/// from a sum counts once per increment, an element once per write).
fn missing(c: &mut Connection) -> usize {
    let counter: i64 = cmd(&["GET", "c"]).query(c).unwrap();
    let hash: HashMap<String, String> = cmd(&["HGETALL", "h"]).query(c).unwrap();
    let set: HashSet<String> = cmd(&["SMEMBERS", "s"]).query(c).unwrap();
    let zset: HashMap<String, f64> = cmd(&["ZRANGE", "z", "0", "-1", "WITHSCORES"])
        .query(c)
        .unwrap();
    let list: HashSet<String> = cmd(&["LRANGE", "l", "0", "-1"])
        .query::<Vec<String>>(c)
        .unwrap()
        .into_iter()
        .collect();
    let total: i64 = hash.get("total").map_or(0, |t| t.parse().unwrap());
    let calls = 2 * UPDATES as i64;
    let mut lost = (calls - counter).max(0) as usize + (calls - total).max(0) as usize;
    for i in 0..UPDATES {
        for name in [format!("a{i}"), format!("b{i}")] {
            lost += usize::from(hash.get(&name) != Some(&i.to_string()))
                + usize::from(!set.contains(&name))
                + usize::from(zset.get(&name) != Some(&(i as f64)))
                + usize::from(!list.contains(&name));
        }
    }
    lost
}

/// Loads the library on A and waits until B has it (the digests the
/// convergence wait compares do not cover libraries).
fn loaded_on_both(pair: &Pair) {
    let _: String = cmd(&["FUNCTION", "LOAD", LIBRARY])
        .query(&mut pair.a.conn())
        .unwrap();
    let has = || {
        let listed: redis::Value = cmd(&["FUNCTION", "LIST", "LIBRARYNAME", "mergelib"])
            .query(&mut pair.b.conn())
            .unwrap();
        matches!(listed, redis::Value::Array(ref l) if !l.is_empty())
    };
    assert!(
        common::wait_until(Duration::from_secs(30), has),
        "the library never reached B: {:?}",
        pair.b.status()
    );
}

#[test]
fn function_calls_on_both_nodes_at_once_keep_every_update() {
    let pair = started_merging();
    loaded_on_both(&pair);
    at_once(&pair, fcall("a"), fcall("b"), integer);
    or_explain(&pair, "l", || pair.wait_converged(Duration::from_secs(60)));
    let lost = lost_on_both(&pair, missing);
    report("FCALL on both nodes", lost / 2, PER_CALL * 2 * UPDATES);
    assert_eq!(lost, 0, "updates made through FCALL were lost");
    merged_and_collected(&pair);
}

#[test]
fn function_calls_on_both_nodes_while_the_link_is_cut_keep_every_update() {
    let pair = started_merging();
    loaded_on_both(&pair);
    common::cut(&pair);
    thread::scope(|s| {
        s.spawn(|| write_all(&pair.a, fcall("a"), integer));
        s.spawn(|| write_all(&pair.b, fcall("b"), integer));
    });
    common::heal(&pair);
    or_explain(&pair, "l", || pair.wait_converged(Duration::from_secs(60)));
    let lost = lost_on_both(&pair, missing);
    report(
        "FCALL on both nodes across a cut",
        lost / 2,
        PER_CALL * 2 * UPDATES,
    );
    assert_eq!(lost, 0, "updates made through FCALL were lost");
    merged_and_collected(&pair);
}
