//! A pair merging elements (`merge-elements=yes`) and what the merge tests
//! check of it once it settled (tests/hash_merges.rs, tests/set_merges.rs).

use std::time::Duration;

use super::{wait_until, Pair};

/// A pair that ships element changes as elements (`merge-elements=yes`),
/// in step.
pub fn started_merging() -> Pair {
    let on = ["merge-elements=yes"];
    let pair = Pair::start_with(&on, &on);
    pair.wait_in_step();
    pair
}

/// A pair merging elements, each node with an AOF written at every change.
pub fn merging_with_aof() -> Pair {
    Pair::start_with_aof(&["merge-elements=yes"])
}

/// No write fell back to whole-key last writer wins, and every key's
/// metadata was collected once the pair settled.
pub fn merged_and_collected(pair: &Pair) {
    for node in [&pair.a, &pair.b] {
        assert_eq!(node.stat("merge_fallbacks"), 0, "{:?}", node.status());
        let rested = wait_until(Duration::from_secs(10), || node.stat("merge_elements") == 0);
        assert!(
            rested,
            "element metadata never collected: {:?}",
            node.status()
        );
    }
}

/// The merge figures the element tests name when they fail.
const ELEMENT_FIGURES: [&str; 5] = [
    "merge_fallbacks",
    "merge_elements",
    "apply_errors",
    "conflicts_discarded",
    "reconnects",
];

/// Runs `f`; if it panics, names first what each node holds of `key` (its
/// type, its version, the merge figures).
pub fn or_explain<T>(pair: &Pair, key: &str, f: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(why) => {
            explain(pair, key, "TYPE", &ELEMENT_FIGURES);
            std::panic::resume_unwind(why)
        }
    }
}

/// Prints, for each node, `read` of `key` (a command taking the key, such
/// as GET or TYPE), the key's version and state, and the STATUS `figures`.
pub fn explain(pair: &Pair, key: &str, read: &str, figures: &[&str]) {
    for (name, node) in [("a", &pair.a), ("b", &pair.b)] {
        let mut c = node.conn();
        let held: Option<String> = redis::cmd(read).arg(key).query(&mut c).ok();
        let version: String = redis::cmd("RDMASYNC.DEBUG")
            .arg("VERSION")
            .arg(key)
            .query(&mut c)
            .unwrap_or_default();
        let st = node.status();
        let figures: Vec<String> = figures.iter().map(|f| format!("{f}={}", st[*f])).collect();
        eprintln!(
            "{name}: {read} {key}={held:?} {version}; {}",
            figures.join(" ")
        );
    }
}
