//! The layout of `src/` is the data path (docs/architecture.md): one folder
//! per stage, and dependencies between them that run one way. Read from the
//! sources (test code left out), this test fails on
//! - a dependency of the pure folders (`proto`, `converge`) on anything but
//!   each other: they know nothing of threads, sockets, Redis or the
//!   crate's error type; nor do they name a thread, lock, socket, file,
//!   Redis or the verbs FFI (`IMPURE`);
//! - a dependency that runs upward in `LAYERS` (which is how an import
//!   cycle between folders starts), or a folder `LAYERS` does not place.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Folders (and top-level files) whose code must stay free of I/O.
const PURE: [&str; 2] = ["proto", "converge"];
/// What the pure folders may use.
const PURE_MAY_USE: [&str; 2] = ["proto", "converge"];

/// The folders (and top-level files) from the bottom up: each may use the
/// folders of the layers below it, never one above. The crate's error type
/// sits above the pure folders: it wraps their decode errors and refusals.
const LAYERS: &[&[&str]] = &[
    &["proto"],
    &["converge"],
    &["error"],
    &["ops"],
    &["transport"],
    &["redis"],
    &["catchup"],
    &["shared"],
    &["capture"],
    &["ship"],
    &["receive"],
    &["link"],
    &["runtime"],
    &["module"],
    &["lib"],
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

/// What the pure folders' code never names: threads, locks, sockets,
/// files, Redis, the verbs FFI. (The wall clock and the OS's randomness
/// for a nonce are inputs they read, named in `converge::clock` and
/// `proto::auth`.)
const IMPURE: &[&str] = &[
    "redis_module",
    "std::thread",
    "std::net",
    "std::fs",
    "std::process",
    "libc::",
    "rdma_sys",
    "parking_lot",
    "Mutex",
    "RwLock",
    "TcpStream",
    "UdpSocket",
];

/// The impure names `code` uses.
fn impure_names(code: &str) -> Vec<&'static str> {
    IMPURE
        .iter()
        .copied()
        .filter(|name| code.contains(name))
        .collect()
}

#[test]
fn the_pure_folders_name_no_thread_lock_socket_file_or_redis() {
    let mut found = Vec::new();
    for (path, code) in sources() {
        if PURE.iter().any(|p| path.starts_with(&format!("{p}/"))) {
            for name in impure_names(&code) {
                found.push(format!("src/{path}: {name}"));
            }
        }
    }
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn an_impure_name_is_found_in_any_path_form() {
    assert_eq!(
        impure_names("use std::net::UdpSocket;"),
        ["std::net", "UdpSocket"]
    );
    assert_eq!(
        impure_names("let m = parking_lot::Mutex::new(1);"),
        ["parking_lot", "Mutex"]
    );
    assert_eq!(impure_names("redis_module::Context"), ["redis_module"]);
    assert!(impure_names("use std::time::SystemTime;").is_empty());
}

/// The layer of `folder` in [`LAYERS`], if it has one.
fn layer_of(folder: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&folder))
}

#[test]
fn dependencies_between_folders_run_down_the_layers_only() {
    let graph = edges();
    let unplaced: Vec<&String> = graph.keys().filter(|f| layer_of(f).is_none()).collect();
    assert!(
        unplaced.is_empty(),
        "folders LAYERS (tests/architecture.rs) does not place: {unplaced:?}"
    );
    let mut upward = Vec::new();
    for (from, tos) in &graph {
        let below = layer_of(from).unwrap_or(0);
        for to in tos {
            match layer_of(to) {
                Some(layer) if layer <= below => {}
                _ => upward.push(format!("src/{from} uses src/{to}")),
            }
        }
    }
    assert!(
        upward.is_empty(),
        "dependencies that run upward (an import cycle in the making): {}",
        upward.join(", ")
    );
}

/// Folders that reach each other through their dependencies (strongly
/// connected components of more than one folder), each sorted.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reaches = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(f) = todo.pop() {
            for to in graph.get(&f).into_iter().flatten() {
                if seen.insert(to.clone()) {
                    todo.push(to.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|f| (f, reaches(f))).collect();
    let mut out: BTreeSet<Vec<String>> = BTreeSet::new();
    for (f, r) in &reach {
        let mut component: Vec<String> = r
            .iter()
            .filter(|g| *g != *f && reach.get(g).is_some_and(|back| back.contains(*f)))
            .cloned()
            .collect();
        if !component.is_empty() {
            component.push((*f).clone());
            component.sort();
            out.insert(component);
        }
    }
    out.into_iter().collect()
}

#[test]
fn no_import_cycle_between_folders() {
    let found = cycles(&edges());
    assert!(found.is_empty(), "import cycles between folders: {found:?}");
}

#[test]
fn a_cycle_is_found_through_any_number_of_folders() {
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]
            .iter()
            .fold(BTreeMap::new(), |mut g, (from, to)| {
                g.entry(from.to_string())
                    .or_insert_with(BTreeSet::new)
                    .insert(to.to_string());
                g
            });
    assert_eq!(cycles(&graph), vec![vec!["a", "b", "c"]]);
}

#[test]
fn crate_references_are_read_from_single_and_grouped_paths() {
    let code = "use crate::a::X;\nuse crate::{b::Y, c, d::{E, F}};\nlet _ = crate::g_h::i();";
    let got: Vec<String> = crate_references(code).into_iter().collect();
    assert_eq!(got, ["a", "b", "c", "d", "g_h"]);
}

/// The non-test code of every source file, by path under `src/`.
fn sources() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .into_iter()
        .map(|file| {
            let rel = file.strip_prefix(&src).expect("under src");
            let text = std::fs::read_to_string(&file).expect("readable source");
            let rel = rel.to_string_lossy().into_owned();
            (rel, non_test_code(&text).to_owned())
        })
        .collect()
}

/// The statics that hold a lock, as `file: line`.
fn static_locks(sources: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (file, code) in sources {
        for line in code.lines() {
            let decl = line.trim_start();
            let decl = decl
                .strip_prefix("pub(crate) ")
                .or_else(|| decl.strip_prefix("pub "))
                .unwrap_or(decl);
            let locked = ["Mutex<", "RwLock<", "Mutex::", "RwLock::"]
                .iter()
                .any(|l| decl.contains(l));
            if decl.starts_with("static ") && locked {
                out.push(format!("{file}: {}", line.trim()));
            }
        }
    }
    out
}

#[test]
fn the_only_static_locks_are_the_handles_the_c_callbacks_need() {
    // Redis calls the module's C callbacks with no state of the module's
    // own: they reach the live state (`shared::LIVE`) and the main thread's
    // state (`capture::state::MAIN`, under the GIL) through these two.
    let allowed = [
        "shared/mod.rs: static LIVE:",
        "capture/state.rs: static MAIN:",
    ];
    let locks = static_locks(&sources());
    let others: Vec<&String> = locks
        .iter()
        .filter(|l| !allowed.iter().any(|a| l.starts_with(a)))
        .collect();
    assert!(
        others.is_empty(),
        "static locks besides the two handles: {others:?}"
    );
    assert_eq!(
        locks.len(),
        allowed.len(),
        "the two handles are found: {locks:?}"
    );
}

#[test]
fn a_static_lock_is_found_in_any_spelling() {
    let code = [(
        "x.rs".to_owned(),
        "static A: Mutex<u8> = Mutex::new(0);\npub(crate) static B: LazyLock<RwLock<u8>> = \
         LazyLock::new(Default::default);\nstatic C: AtomicBool = AtomicBool::new(false);\n"
            .to_owned(),
    )];
    assert_eq!(static_locks(&code).len(), 2);
}

#[test]
fn counters_are_read_only_where_they_are_reported() {
    // The counters (`ops::status::Stats`) are statistics: written by every
    // stage, read back only to report them (STATUS, INFO), never to decide.
    // Decisions take their facts from the state that owns them (the link
    // events in the apply queue, `MainState`, the peer's progress).
    let readers = ["ops/status.rs", "ops/fallbacks.rs"];
    let reads = [
        "Stats::get(",
        "stats.link()",
        "ring_used()",
        ".last_error()",
    ];
    for (file, code) in sources() {
        if readers.contains(&file.as_str()) {
            continue;
        }
        for read in reads {
            assert!(
                !code.contains(read),
                "{file} reads a counter back ({read}): counters are for reporting only"
            );
        }
    }
}

/// The functions of `code` longer than `limit` lines, as `name: lines`.
/// A function runs from its `fn` line to the closing brace at its own
/// indentation (rustfmt's layout); declarations without a body are skipped.
fn long_functions(code: &str, limit: usize) -> Vec<String> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let indent = line.len() - line.trim_start().len();
        let decl = line.trim_start();
        let Some(at) = decl.find("fn ") else { continue };
        let prefix = &decl[..at];
        let is_fn = prefix.split_whitespace().all(|w| {
            [
                "pub",
                "pub(crate)",
                "pub(super)",
                "unsafe",
                "extern",
                "\"C\"",
                "const",
            ]
            .contains(&w)
        });
        if !is_fn {
            continue;
        }
        let name: String = decl[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let Some(open) = lines[start..]
            .iter()
            .position(|l| l.trim_end().ends_with('{') || l.trim_end().ends_with(';'))
        else {
            continue;
        };
        if lines[start + open].trim_end().ends_with(';') {
            continue;
        }
        let close = format!("{}}}", " ".repeat(indent));
        let Some(len) = lines[start..].iter().position(|l| l.trim_end() == close) else {
            continue;
        };
        if len + 1 > limit {
            out.push(format!("{name}: {} lines", len + 1));
        }
    }
    out
}

#[test]
fn no_function_outside_tests_is_over_60_lines() {
    let mut long = Vec::new();
    for (file, code) in sources() {
        for f in long_functions(&code, 60) {
            long.push(format!("{file}: {f}"));
        }
    }
    assert!(long.is_empty(), "split these: {long:?}");
}

#[test]
fn a_long_function_is_found_and_a_declaration_is_not() {
    let body = "    x += 1;\n".repeat(60);
    let code = format!(
        "pub(crate) fn long(x: &mut u8) {{\n{body}}}\n\nfn short() {{\n}}\n\
         trait T {{\n    fn declared(&self);\n}}\n"
    );
    assert_eq!(long_functions(&code, 60), ["long: 62 lines"]);
}
