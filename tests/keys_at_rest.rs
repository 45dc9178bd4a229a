//! Keys at rest (their merge metadata collected) keep what the pair needs:
//! the version of every key, so that a restart of a node holding many of
//! them catches up by a sync since its watermark, not a full sync (issue
//! 27's condition on collecting metadata). The memory they take is
//! measured by `scripts/memory.sh`, not here.

mod common;

use std::time::Duration;

use common::{wait_until, Pair};

const SETTLE: Duration = Duration::from_secs(30);

/// Keys of six kinds in turn, each written by its own commands (the merged
/// types through the element path), as `scripts/memory.sh` writes them.
const FILL: &str = r#"
local from, to = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = from, to - 1 do
  local k = "k:" .. i
  local t = i % 6
  if t == 0 then redis.call("SET", k, string.rep("v", 64))
  elseif t == 1 then redis.call("INCRBY", k, i)
  elseif t == 2 then redis.call("HSET", k, "name", "n" .. i, "n", i)
  elseif t == 3 then redis.call("SADD", k, "a" .. i, "b" .. i)
  elseif t == 4 then redis.call("ZADD", k, 1, "a" .. i, 2, "b" .. i)
  else redis.call("RPUSH", k, "a" .. i, "b" .. i) end
end
return to - from"#;

const KEYS: u64 = 60_000;

#[test]
fn a_restart_of_a_node_holding_keys_at_rest_catches_up_since_its_watermark() {
    let mut pair = Pair::start_with_aof(&[]);
    let mut a = pair.a.conn();
    for from in (0..KEYS).step_by(2_000) {
        let wrote: u64 = redis::cmd("EVAL")
            .arg(FILL)
            .arg(0)
            .arg(from)
            .arg(from + 2_000)
            .query(&mut a)
            .unwrap();
        assert_eq!(wrote, 2_000);
    }
    let at_rest = |n: &common::Node| {
        let s = n.status();
        s["merge_counters"] == "0" && s["merge_elements"] == "0" && s["lag_entries"] == "0"
    };
    let rested = wait_until(SETTLE, || at_rest(&pair.a) && at_rest(&pair.b));
    assert!(rested, "a={:?} b={:?}", pair.a.status(), pair.b.status());
    let digest = pair.wait_converged(SETTLE);
    for node in [&pair.a, &pair.b] {
        assert_eq!(node.stat("versioned_keys"), KEYS, "{}", node.name);
    }
    drop(a);
    pair.a.restart();
    pair.wait_linked();
    assert_eq!(pair.a.stat("versioned_keys"), KEYS, "loaded with the AOF");
    assert_eq!(pair.wait_converged(SETTLE), digest);
    for node in [&pair.a, &pair.b] {
        let s = node.status();
        assert_eq!(s["catchup"], "since", "{}: {s:?}", node.name);
        let entries: u64 = s["catchup_entries"].parse().unwrap();
        assert!(entries < 100, "{}: {s:?}", node.name);
    }
    // Still merged after the restart: an increment on each node counts.
    let _: i64 = redis::cmd("INCR")
        .arg("k:1")
        .query(&mut pair.a.conn())
        .unwrap();
    let _: i64 = redis::cmd("INCR")
        .arg("k:1")
        .query(&mut pair.b.conn())
        .unwrap();
    for node in [&pair.a, &pair.b] {
        let three = wait_until(SETTLE, || {
            redis::cmd("GET")
                .arg("k:1")
                .query::<i64>(&mut node.conn())
                .unwrap()
                == 3
        });
        assert!(three, "k:1 on {}", node.name);
    }
}
