//! The layout of `src/` is the data path (docs/architecture.md): one folder
//! per stage, and dependencies between them that run one way. Read from the
//! sources (test code left out), this test fails on
//! - a dependency of the pure folders (`proto`, `converge`) on anything but
//!   each other and the error type: they know nothing of threads, sockets
//!   or Redis;
//! - a dependency between folders that `KNOWN_EDGES` does not list: the
//!   list only shrinks, and each cycle it still holds is one to untangle
//!   (issue 18).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Folders (and top-level files) whose code must stay free of I/O.
const PURE: [&str; 2] = ["proto", "converge"];
/// What the pure folders may use.
const PURE_MAY_USE: [&str; 3] = ["proto", "converge", "error"];

/// Every dependency between folders today, `from -> to`.
const KNOWN_EDGES: &[(&str, &str)] = &[
    ("capture", "catchup"),
    ("capture", "converge"),
    ("capture", "ops"),
    ("capture", "proto"),
    ("capture", "redis"),
    ("capture", "runtime"),
    ("catchup", "capture"),
    ("catchup", "converge"),
    ("catchup", "ops"),
    ("catchup", "proto"),
    ("catchup", "redis"),
    ("catchup", "runtime"),
    ("converge", "proto"),
    ("error", "proto"),
    ("link", "error"),
    ("link", "ops"),
    ("link", "proto"),
    ("link", "receive"),
    ("link", "runtime"),
    ("link", "transport"),
    ("module", "capture"),
    ("module", "catchup"),
    ("module", "ops"),
    ("module", "redis"),
    ("module", "runtime"),
    ("ops", "error"),
    ("ops", "proto"),
    ("ops", "transport"),
    ("proto", "error"),
    ("receive", "capture"),
    ("receive", "catchup"),
    ("receive", "converge"),
    ("receive", "error"),
    ("receive", "ops"),
    ("receive", "proto"),
    ("receive", "redis"),
    ("receive", "runtime"),
    ("redis", "capture"),
    ("redis", "converge"),
    ("redis", "error"),
    ("redis", "ops"),
    ("redis", "proto"),
    ("redis", "runtime"),
    ("runtime", "converge"),
    ("runtime", "error"),
    ("runtime", "link"),
    ("runtime", "ops"),
    ("runtime", "proto"),
    ("runtime", "receive"),
    ("runtime", "redis"),
    ("runtime", "ship"),
    ("runtime", "transport"),
    ("ship", "error"),
    ("ship", "ops"),
    ("ship", "proto"),
    ("ship", "runtime"),
    ("ship", "transport"),
    ("transport", "error"),
    ("transport", "ops"),
    ("transport", "proto"),
];

/// The node a source file belongs to: its folder under `src/`, or the name
/// of a top-level file.
fn node_of(path: &Path, src: &Path) -> String {
    let rel = path.strip_prefix(src).expect("under src");
    let first = rel.components().next().expect("a component");
    let name = first.as_os_str().to_string_lossy();
    name.trim_end_matches(".rs").to_string()
}

/// The code of a file without its unit tests (they sit at the end, after
/// `#[cfg(test)]`).
fn non_test_code(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests")
        .map_or(text, |at| &text[..at])
}

/// The top-level names a file's code reaches through `crate::`.
fn crate_references(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // use crate::{a::X, b, c::{Y, Z}}: the first segment of each item.
            let mut depth = 1;
            let mut item_start = true;
            let mut name = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 1 => {
                        if !name.is_empty() {
                            out.insert(std::mem::take(&mut name));
                        }
                        item_start = true;
                    }
                    c if depth == 1 && item_start && (c.is_ascii_lowercase() || c == '_') => {
                        name.push(c)
                    }
                    _ if depth == 1 && item_start && !name.is_empty() => {
                        out.insert(std::mem::take(&mut name));
                        item_start = false;
                    }
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
            }
            if !name.is_empty() {
                out.insert(name);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable source folder") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `from -> {to}` between folders and top-level files.
fn edges() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let from = node_of(&file, &src);
        let text = std::fs::read_to_string(&file).expect("readable source");
        let deps = graph.entry(from.clone()).or_default();
        for to in crate_references(non_test_code(&text)) {
            if to != from {
                deps.insert(to);
            }
        }
    }
    graph
}

#[test]
fn the_pure_folders_use_nothing_but_each_other() {
    let graph = edges();
    for folder in PURE {
        let deps = graph.get(folder).cloned().unwrap_or_default();
        let bad: Vec<&String> = deps
            .iter()
            .filter(|d| !PURE_MAY_USE.contains(&d.as_str()))
            .collect();
        assert!(bad.is_empty(), "src/{folder} uses {bad:?}");
    }
}

#[test]
fn no_dependency_between_folders_beyond_the_known_ones() {
    let known: BTreeSet<(String, String)> = KNOWN_EDGES
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let mut new = Vec::new();
    let mut all = BTreeSet::new();
    for (from, tos) in edges() {
        for to in tos {
            let edge = (from.clone(), to);
            if !known.contains(&edge) {
                new.push(format!("(\"{}\", \"{}\")", edge.0, edge.1));
            }
            all.insert(edge);
        }
    }
    assert!(
        new.is_empty(),
        "dependencies not in KNOWN_EDGES (tests/architecture.rs): {}",
        new.join(", ")
    );
    let gone: Vec<_> = known.difference(&all).collect();
    assert!(
        gone.is_empty(),
        "KNOWN_EDGES lists dependencies that are gone (remove them): {gone:?}"
    );
}

#[test]
fn crate_references_are_read_from_single_and_grouped_paths() {
    let code = "use crate::a::X;\nuse crate::{b::Y, c, d::{E, F}};\nlet _ = crate::g_h::i();";
    let got: Vec<String> = crate_references(code).into_iter().collect();
    assert_eq!(got, ["a", "b", "c", "d", "g_h"]);
}
