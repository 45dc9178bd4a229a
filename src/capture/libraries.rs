//! The function libraries' changes, read and stamped one library at a time
//! (`converge::libraries`): a `FUNCTION LOAD` or `DELETE` names one
//! library, read at the next flush (`FUNCTION LIST LIBRARYNAME ...
//! WITHCODE`) and shipped as its code or its delete. A `FUNCTION FLUSH`,
//! a `RESTORE`, a load by the server or a transaction reads all of them and
//! ships each one whose code is not its version's. A library whose code did
//! not change (a load the server refused) ships nothing.
//!
//! Reading one library costs the server a pass over the names of all (the
//! name is a pattern): a flush with many named libraries reads all of them
//! once instead, and a costly read rests the libraries like a hot key.

use std::time::Instant;

use hashbrown::HashMap;
use redis_module::Context;

use crate::capture::flush::{count_read_failures, entry, rest_if_costly};
use crate::capture::hotkeys::{COSTLY_MIN_BYTES, FUNCTIONS_DB, FUNCTIONS_KEY};
use crate::catchup::replication::Replication;
use crate::converge::changes::PendingOp;
use crate::converge::version::Stamp;
use crate::proto::entry::{Entry, Op};
use crate::redis::{dump, server};
use crate::shared::Shared;

/// Above this many named libraries in one flush, all are read at once.
const READ_ALL_ABOVE: usize = 16;

/// What the FUNCTION commands since the last flush let the flush trust
/// without reading libraries back: `FUNCTION LOAD`s of new libraries (no
/// `REPLACE`), nothing else changing the libraries, and the server's count
/// of libraries known after the last flush. The server keeps the code it
/// was given, and each such load adds one library or fails: a count grown
/// by exactly the number of loads says every one of them happened.
#[derive(Debug, Default)]
pub struct LoadNote {
    /// Each load's library name and code, in order.
    loads: Vec<(Vec<u8>, Vec<u8>)>,
    /// The bytes of code in `loads`.
    bytes: usize,
    /// Another change of the libraries ran since the last flush (or more
    /// loads than the note keeps).
    others: bool,
    /// The server's count of libraries after the last flush.
    count: Option<u64>,
}

/// Code a note keeps at most (past it, the flush reads the libraries).
const NOTE_BYTES: usize = 16 << 20;

impl LoadNote {
    /// A FUNCTION command that changes libraries (`args`, the name at 0).
    /// A load queued in MULTI is noted too: until its EXEC it adds no
    /// library, so the count does not vouch for it (nor for any other).
    pub fn command(&mut self, args: &[&[u8]]) {
        let load = match args {
            [_, sub, code] if sub.eq_ignore_ascii_case(b"load") => {
                crate::redis::libraries::name(code).map(|name| (name.to_vec(), code.to_vec()))
            }
            _ => None,
        };
        match load {
            Some(load) if !self.others && self.bytes + load.1.len() <= NOTE_BYTES => {
                self.bytes += load.1.len();
                self.loads.push(load);
            }
            _ => self.others = true,
        }
    }

    /// The libraries changed some other way (applied from the peer, a
    /// load, an EXEC): their count is not known.
    pub fn forget_count(&mut self) {
        self.count = None;
    }

    /// The loads this note vouches for, with the server holding `count`
    /// libraries now: all of them, or none.
    pub fn trusted(&self, count: u64) -> &[(Vec<u8>, Vec<u8>)] {
        let all_loaded = self
            .count
            .is_some_and(|c| c + self.loads.len() as u64 == count);
        if !self.others && all_loaded {
            &self.loads
        } else {
            &[]
        }
    }

    /// A flush took every change: the server holds `count` libraries.
    pub fn flushed(&mut self, count: Option<u64>) {
        *self = Self {
            count,
            ..Self::default()
        };
    }
}

/// The libraries read during one flush: each named one alone, or all at
/// once when many are named (or all are asked for); the loads the note
/// vouches for are not read at all.
pub(crate) struct LibraryReads {
    all: Option<HashMap<Vec<u8>, Vec<u8>>>,
    read_all: bool,
    /// The code of each library the load note vouches for.
    trusted: HashMap<Vec<u8>, Vec<u8>>,
    /// The server's count of libraries when the flush began.
    count: Option<u64>,
    /// Whether any library change was taken.
    any: bool,
}

impl LibraryReads {
    /// For the pending `ops` of one flush.
    pub(crate) fn new(ctx: &Context, ops: &[PendingOp]) -> Self {
        let mut reads = Self {
            all: None,
            read_all: false,
            trusted: HashMap::new(),
            count: None,
            any: false,
        };
        if !ops
            .iter()
            .any(|op| matches!(op, PendingOp::Functions | PendingOp::Library(_)))
        {
            // Most flushes: no library changed.
            return reads;
        }
        reads.any = true;
        let all = ops.iter().any(|op| matches!(op, PendingOp::Functions));
        let named: Vec<&Vec<u8>> = ops
            .iter()
            .filter_map(|op| match op {
                PendingOp::Library(name) => Some(name),
                _ => None,
            })
            .collect();
        if !all && !named.is_empty() {
            reads.count = server::libraries_count(ctx);
            let main = crate::capture::state::main_state();
            if let (Some(silent), Some(count)) = (main.silent.try_get(), reads.count) {
                reads.trusted = silent.library_load.trusted(count).iter().cloned().collect();
            };
        }
        let untrusted = named
            .iter()
            .filter(|name| !reads.trusted.contains_key(name.as_slice()))
            .count();
        reads.read_all = untrusted > READ_ALL_ABOVE;
        reads
    }

    /// Tells the load note the flush took every change of the libraries.
    pub(crate) fn finish(self, ctx: &Context) {
        if !self.any {
            return;
        }
        // A flush reads the libraries, it changes none.
        let count = self.count.or_else(|| server::libraries_count(ctx));
        if let Some(mut silent) = crate::capture::state::main_state().silent.try_get() {
            silent.library_load.flushed(count);
        }
    }

    /// The code of library `name` (`Some(None)`: there is none); `None`
    /// when it could not be read.
    fn one(&mut self, ctx: &Context, shared: &Shared, name: &[u8]) -> Option<Option<Vec<u8>>> {
        if let Some(code) = self.trusted.get(name) {
            return Some(Some(code.clone()));
        }
        if self.read_all {
            return self.all(ctx, shared).map(|all| all.get(name).cloned());
        }
        let started = Instant::now();
        let read = server::function_libraries(ctx, Some(name));
        note_cost(shared, started);
        Some(read?.pop().map(|(_, code)| code))
    }

    /// Every library's code by name; `None` when they could not be read.
    fn all(&mut self, ctx: &Context, shared: &Shared) -> Option<&HashMap<Vec<u8>, Vec<u8>>> {
        if self.all.is_none() {
            let started = Instant::now();
            let held = server::libraries_held(ctx);
            note_cost(shared, started);
            self.all = Some(held?.into_iter().collect());
        }
        self.all.as_ref()
    }
}

/// A read of the libraries that took since `started`: a costly one rests
/// them (its cost is the server's pass over every library, whatever the
/// reply's size).
fn note_cost(shared: &Shared, started: Instant) {
    let cost = started.elapsed();
    rest_if_costly(shared, FUNCTIONS_DB, FUNCTIONS_KEY, cost, COSTLY_MIN_BYTES);
}

/// Stamps at `stamp` what changed in the libraries `op` names (a library,
/// or all of them) and returns what ships it: each changed library's code
/// or delete. Nothing when nothing changed, or when they could not be read
/// (counted, and read again at the next flush, as a key is).
pub(crate) fn record(
    reads: &mut LibraryReads,
    ctx: &Context,
    shared: &Shared,
    st: &mut Replication,
    op: &PendingOp,
    stamp: Stamp,
) -> Vec<Op> {
    let changed: Vec<(Vec<u8>, Option<Vec<u8>>)> = match op {
        PendingOp::Library(name) => {
            let Some(code) = reads.one(ctx, shared, name) else {
                count_read_failures(shared, 1);
                mark_changed(name);
                return Vec::new();
            };
            let recorded = st.versions.libraries().get(name).and_then(|v| v.crc());
            if recorded == code.as_deref().map(dump::crc64) {
                return Vec::new();
            }
            vec![(name.clone(), code)]
        }
        PendingOp::Functions => {
            let Some(all) = reads.all(ctx, shared) else {
                count_read_failures(shared, 1);
                if let Some(mut dirty) = crate::capture::state::main_state().dirty.get() {
                    dirty.mark_functions();
                }
                return Vec::new();
            };
            let held: Vec<(Vec<u8>, u64)> = all
                .iter()
                .map(|(name, code)| (name.clone(), dump::crc64(code)))
                .collect();
            let differences = st.versions.libraries().differences(&held);
            differences
                .into_iter()
                .map(|(name, crc)| (name.to_vec(), crc.and_then(|_| all.get(name).cloned())))
                .collect()
        }
        _ => return Vec::new(),
    };
    changed
        .into_iter()
        .map(|(name, code)| {
            let crc = code.as_deref().map(dump::crc64);
            st.versions.record_library(&name, stamp, crc, 0);
            match code {
                Some(code) => Op::Library { name, code },
                None => Op::LibraryDelete { name },
            }
        })
        .collect()
}

/// Library `name` of this node's at its recorded version, to ship again:
/// its code read now, or its delete. `None` when the version is the
/// peer's, or the code changed since (the next flush reads and stamps it).
pub(crate) fn resend_entry(
    ctx: &Context,
    shared: &Shared,
    st: &Replication,
    name: &[u8],
) -> Option<Entry> {
    let version = st.versions.libraries().get(name)?;
    let stamp = version.stamp();
    if stamp.node != shared.node_id {
        return None;
    }
    let Some(crc) = version.crc() else {
        return Some(entry(
            0,
            stamp,
            Op::LibraryDelete {
                name: name.to_vec(),
            },
        ));
    };
    let code = match server::function_libraries(ctx, Some(name)) {
        Some(mut found) => found.pop().map(|(_, code)| code),
        None => {
            count_read_failures(shared, 1);
            return None;
        }
    };
    match code {
        Some(code) if dump::crc64(&code) == crc => Some(entry(
            0,
            stamp,
            Op::Library {
                name: name.to_vec(),
                code,
            },
        )),
        _ => {
            mark_changed(name);
            None
        }
    }
}

/// The libraries changed other than through a client's FUNCTION command
/// (applied from the peer, loaded): the next flush reads what it ships.
pub(crate) fn changed_elsewhere() {
    if let Some(mut silent) = crate::capture::state::main_state().silent.get() {
        silent.library_load.forget_count();
    }
}

/// Library `name` was deleted here to make room for a newer one of the
/// peer's registering the same function (`receive::apply_functions`): the
/// next flush stamps and ships its delete.
pub(crate) fn displaced(name: &[u8]) {
    mark_changed(name);
}

/// Library `name` changed after its version: the next flush reads it.
fn mark_changed(name: &[u8]) {
    if let Some(mut dirty) = crate::capture::state::main_state().dirty.get() {
        dirty.mark_library(name.to_vec());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CODE: &[u8] = b"#!lua name=lib\nredis.register_function('f', function() return 1 end)";

    fn args<'a>(line: &'a [&'a [u8]]) -> &'a [&'a [u8]] {
        line
    }

    fn names(loads: &[(Vec<u8>, Vec<u8>)]) -> Vec<&[u8]> {
        loads.iter().map(|(n, _)| n.as_slice()).collect()
    }

    const OTHER: &[u8] = b"#!lua name=other\nredis.register_function('g', function() return 1 end)";

    #[test]
    fn loads_of_new_libraries_are_trusted_when_the_count_grew_by_as_many() {
        let mut note = LoadNote::default();
        note.command(args(&[b"FUNCTION", b"LOAD", CODE]));
        assert!(note.trusted(1).is_empty(), "the count before is unknown");
        note.flushed(Some(4));
        note.command(args(&[b"FUNCTION", b"load", CODE]));
        assert_eq!(note.trusted(5), &[(b"lib".to_vec(), CODE.to_vec())]);
        assert!(note.trusted(4).is_empty(), "refused: nothing was added");
        note.command(args(&[b"FUNCTION", b"LOAD", OTHER]));
        assert_eq!(names(note.trusted(6)), [&b"lib"[..], b"other"]);
        assert!(note.trusted(5).is_empty(), "one of the two was refused");
        note.forget_count();
        assert!(note.trusted(6).is_empty(), "the peer changed them");
    }

    #[test]
    fn a_replace_or_another_change_is_read_back() {
        let cases: [&[&[u8]]; 3] = [
            &[b"FUNCTION", b"LOAD", b"REPLACE", CODE],
            &[b"FUNCTION", b"LOAD", b"#!lua name='quoted'\n"],
            &[b"FUNCTION", b"FLUSH"],
        ];
        for line in cases {
            let mut note = LoadNote::default();
            note.flushed(Some(0));
            note.command(line);
            note.command(args(&[b"FUNCTION", b"LOAD", CODE]));
            for count in 0..3 {
                assert!(note.trusted(count).is_empty(), "{line:?}");
            }
        }
        let mut note = LoadNote::default();
        note.flushed(Some(0));
        note.command(args(&[b"FUNCTION", b"LOAD", CODE]));
        note.command(args(&[b"FUNCTION", b"DELETE", b"x"]));
        assert!(note.trusted(1).is_empty(), "a load, then a delete");
        note.flushed(Some(1));
        note.command(args(&[b"FUNCTION", b"LOAD", CODE]));
        assert_eq!(
            names(note.trusted(2)),
            [&b"lib"[..]],
            "a flush starts afresh"
        );
    }
}
