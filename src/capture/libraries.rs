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

/// The libraries read during one flush: each named one alone, or all at
/// once when many are named (or all are asked for).
pub(crate) struct LibraryReads {
    all: Option<HashMap<Vec<u8>, Vec<u8>>>,
    read_all: bool,
}

impl LibraryReads {
    /// For the pending `ops` of one flush.
    pub(crate) fn new(ops: &[PendingOp]) -> Self {
        let named = ops
            .iter()
            .filter(|op| matches!(op, PendingOp::Library(_)))
            .count();
        Self {
            all: None,
            read_all: named > READ_ALL_ABOVE,
        }
    }

    /// The code of library `name` (`Some(None)`: there is none); `None`
    /// when it could not be read.
    fn one(&mut self, ctx: &Context, shared: &Shared, name: &[u8]) -> Option<Option<Vec<u8>>> {
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
/// (counted; not retried at every flush: the next FUNCTION command or load
/// reads them again).
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

/// Library `name` changed after its version: the next flush reads it.
fn mark_changed(name: &[u8]) {
    if let Some(mut dirty) = crate::capture::state::main_state().dirty.get() {
        dirty.mark_library(name.to_vec());
    }
}
