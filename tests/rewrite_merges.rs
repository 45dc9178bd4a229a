//! Rewrites of many elements against element writes on the other node
//! (issue 27, `merge-elements=yes`): SUNIONSTORE, SINTERSTORE,
//! ZUNIONSTORE, COPY ... REPLACE, RESTORE ... REPLACE, RENAME and SORT ...
//! STORE write their destination whole. The rule: such a rewrite removes
//! what its node had seen at the destination and writes every element it
//! leaves at its stamp, so an element added at once on the other node
//! survives it, on both nodes, and nothing counts as a fall-back.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::merging::{or_explain, started_merging};
use common::writers::cmd;
use common::{Node, Pair};
use redis::Connection;

/// The value of `key`, of type `kind`, read whole (`common::value_read`).
fn read<T: redis::FromRedisValue>(c: &mut Connection, kind: &str, key: &str) -> T {
    common::value_read(kind, key)
        .expect("a type value_read knows")
        .query(c)
        .unwrap()
}

fn run(node: &Node, words: &[&str]) {
    let _: redis::Value = cmd(words)
        .query(&mut node.conn())
        .unwrap_or_else(|e| panic!("{words:?}: {e}"));
}

/// Sources on A and destinations every node holds at rest.
fn sources_and_destinations(pair: &Pair) {
    for words in [
        &["SADD", "s1", "x", "y"][..],
        &["SADD", "s2", "y", "z"],
        &["ZADD", "z1", "1", "x", "2", "y"],
        &["ZADD", "z2", "10", "y", "3", "z"],
        &["HSET", "hsrc", "f", "1", "g", "2"],
        &["HSET", "hsrc2", "f", "1", "g", "2"],
        &["RPUSH", "src", "c", "a", "b"],
        &["SADD", "dset", "old1", "old2"],
        &["ZADD", "dz", "7", "old"],
        &["HSET", "dh", "old", "v"],
        &["HSET", "dh2", "old", "v"],
        &["HSET", "dh3", "old", "v"],
        &["SADD", "dinter", "old"],
        &["RPUSH", "dl", "old1", "old2"],
    ] {
        run(&pair.a, words);
    }
    or_explain(pair, "dl", || pair.wait_converged(Duration::from_secs(30)));
}

#[test]
fn rewrites_of_many_elements_keep_what_the_other_node_added_at_once() {
    let pair = started_merging();
    sources_and_destinations(&pair);
    let payload: Vec<u8> = cmd(&["DUMP", "hsrc"]).query(&mut pair.a.conn()).unwrap();
    // A has applied every element of the destinations; B's writes below
    // are concurrent with A's rewrites (the link is cut).
    common::cut(&pair);
    for words in [
        &["SADD", "dset", "b1"][..],
        &["ZADD", "dz", "5", "b1"],
        &["HSET", "dh", "bf", "bv"],
        &["HSET", "dh2", "bf", "bv"],
        &["HSET", "dh3", "bf", "bv"],
        &["SADD", "dinter", "b1"],
        &["RPUSH", "dl", "b1"],
    ] {
        run(&pair.b, words);
    }
    run(&pair.a, &["SUNIONSTORE", "dset", "s1", "s2"]);
    run(&pair.a, &["SINTERSTORE", "dinter", "s1", "s2"]);
    run(&pair.a, &["RENAME", "hsrc2", "dh3"]);
    run(&pair.a, &["ZUNIONSTORE", "dz", "2", "z1", "z2"]);
    run(&pair.a, &["COPY", "hsrc", "dh", "REPLACE"]);
    let restored: String = redis::cmd("RESTORE")
        .arg("dh2")
        .arg(0)
        .arg(&payload)
        .arg("REPLACE")
        .query(&mut pair.a.conn())
        .unwrap();
    assert_eq!(restored, "OK");
    run(&pair.a, &["SORT", "src", "ALPHA", "STORE", "dl"]);
    common::heal(&pair);
    or_explain(&pair, "dl", || pair.wait_converged(Duration::from_secs(30)));
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    for node in [&pair.a, &pair.b] {
        let c = &mut node.conn();
        let want: BTreeSet<String> = strings(&["x", "y", "z", "b1"]).into_iter().collect();
        assert_eq!(
            read::<BTreeSet<String>>(c, "set", "dset"),
            want,
            "SUNIONSTORE against SADD"
        );
        let want: BTreeSet<String> = strings(&["y", "b1"]).into_iter().collect();
        assert_eq!(
            read::<BTreeSet<String>>(c, "set", "dinter"),
            want,
            "SINTERSTORE against SADD"
        );
        let want = vec![
            ("x".to_owned(), 1.0),
            ("z".to_owned(), 3.0),
            ("b1".to_owned(), 5.0),
            ("y".to_owned(), 12.0),
        ];
        assert_eq!(
            read::<Vec<(String, f64)>>(c, "zset", "dz"),
            want,
            "ZUNIONSTORE against ZADD"
        );
        let want: BTreeMap<String, String> = [("f", "1"), ("g", "2"), ("bf", "bv")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        assert_eq!(
            read::<BTreeMap<String, String>>(c, "hash", "dh"),
            want,
            "COPY REPLACE against HSET"
        );
        assert_eq!(
            read::<BTreeMap<String, String>>(c, "hash", "dh2"),
            want,
            "RESTORE REPLACE against HSET"
        );
        assert_eq!(
            read::<BTreeMap<String, String>>(c, "hash", "dh3"),
            want,
            "RENAME against HSET"
        );
        assert!(
            read::<BTreeMap<String, String>>(c, "hash", "hsrc2").is_empty(),
            "RENAME's source stays gone"
        );
        assert_eq!(
            read::<Vec<String>>(c, "list", "dl"),
            strings(&["a", "b", "c", "b1"]),
            "SORT STORE against RPUSH"
        );
    }
    for node in [&pair.a, &pair.b] {
        assert_eq!(node.stat("merge_fallbacks"), 0, "{:?}", node.status());
    }
}
