//! The peer's function libraries, one at a time: a library's code is
//! loaded (`FUNCTION LOAD REPLACE`) and a delete deletes it (`FUNCTION
//! DELETE`) when newer than this node's version of that library (last
//! writer wins per library, `converge::libraries`). Loading N libraries
//! one by one on the writer costs this node N loads.
//!
//! Two libraries may register the same function (each site loads its own
//! at once): the server refuses the second. The newer library wins: the
//! node that meets the conflict removes the older one (an older one of
//! its own, or the peer's newer-stamped load it refuses) and marks it
//! changed, so that its next flush stamps and ships that library's delete
//! like a client's: the delete is newer than both loads and ends the
//! older library on both nodes, in either order of arrival.
//!
//! A library this server does not compile (in a mixed pair, one calling an
//! API only the writer's server has) is refused: counted
//! (`entries_refused`), logged and kept as `last_error`; this node keeps
//! what it held.

use redis_module::{CallOptions, Context};

use super::apply::run;
use super::apply_plan::Outcome;
use crate::catchup::replication::Replication;
use crate::converge::version::{Decision, Stamp, GC_AT_NEXT_ACK};
use crate::ops::status::Stats;
use crate::redis::{dump, server};
use crate::shared::Shared;

/// Libraries holding a function the new one registers that are deleted
/// for it, at most (each refusal names one function).
const MAX_DISPLACED: usize = 64;

/// Loads the peer's library `name` of code `code` written at `stamp`.
pub(super) fn load(
    ctx: &Context,
    opts: &CallOptions,
    shared: &Shared,
    st: &mut Replication,
    (name, code): (&[u8], &[u8]),
    stamp: Stamp,
) -> Result<Outcome, String> {
    if let Some(outcome) = not_newer(st, name, stamp) {
        return Ok(outcome);
    }
    let crc = dump::crc64(code);
    if st.versions.libraries().get(name).and_then(|v| v.crc()) == Some(crc) {
        // The same code here already (both sites loaded it).
        st.versions.record_library(name, stamp, Some(crc), 0);
        return Ok(Outcome::Applied);
    }
    for _ in 0..=MAX_DISPLACED {
        let why = match run(ctx, opts, "FUNCTION", &[b"LOAD", b"REPLACE", code]) {
            Ok(()) => {
                st.versions.record_library(name, stamp, Some(crc), 0);
                return Ok(Outcome::Applied);
            }
            Err(why) => why,
        };
        let owner = taken_function(&why).and_then(|f| server::function_owner(ctx, f));
        let Some(owner) = owner.filter(|o| o != name) else {
            return Ok(refuse(shared, name, &why));
        };
        if !make_room(ctx, opts, st, (name, stamp), &owner)? {
            // A conflict lost, as an older write is.
            return Ok(Outcome::Discarded);
        }
    }
    Err(format!(
        "FUNCTION LOAD of library '{}': more than {MAX_DISPLACED} libraries hold its functions",
        String::from_utf8_lossy(name)
    ))
}

/// The CRC recorded for a library this node does not hold but the peer
/// may (displaced by a conflict): no code read here has it, so the next
/// flush ships the library's delete, or its code if a client loaded it.
const NOT_HELD: u64 = 0;

/// The peer's library `name` (written at `stamp`)
/// registers a function library `owner` holds here: the older of the two
/// is deleted here, and this node's next flush ships that delete. True
/// when `owner` went (load `name` again), false when `name` lost.
fn make_room(
    ctx: &Context,
    opts: &CallOptions,
    st: &mut Replication,
    (name, stamp): (&[u8], Stamp),
    owner: &[u8],
) -> Result<bool, String> {
    let owner_version = st.versions.libraries().get(owner);
    let owner_stamp = owner_version.map_or(Stamp::ZERO, |v| v.stamp());
    if owner_stamp > stamp {
        // Ours is newer: the peer's loses. Recorded at its stamp with a
        // code no library has (it is not held: any load of that name here
        // differs from it), then deleted by this node's own next flush (a
        // delete that ships).
        let _ = run(ctx, opts, "FUNCTION", &[b"DELETE", name]);
        st.versions.record_library(name, stamp, Some(NOT_HELD), 0);
        crate::capture::libraries::displaced(name);
        return Ok(false);
    }
    run(ctx, opts, "FUNCTION", &[b"DELETE", owner])?;
    if owner_version.and_then(|v| v.crc()).is_none() {
        // Never versioned here: live as far as the flush can tell.
        st.versions
            .record_library(owner, owner_stamp, Some(NOT_HELD), 0);
    }
    crate::capture::libraries::displaced(owner);
    Ok(true)
}

/// Deletes library `name` as the peer did at `stamp`.
pub(super) fn delete(
    ctx: &Context,
    opts: &CallOptions,
    st: &mut Replication,
    name: &[u8],
    stamp: Stamp,
) -> Result<Outcome, String> {
    if let Some(outcome) = not_newer(st, name, stamp) {
        return Ok(outcome);
    }
    if let Err(why) = run(ctx, opts, "FUNCTION", &[b"DELETE", name]) {
        if !why.to_ascii_lowercase().contains("library not found") {
            return Err(why);
        }
    }
    st.versions
        .record_library(name, stamp, None, GC_AT_NEXT_ACK);
    Ok(Outcome::Applied)
}

/// What becomes of the peer's change of library `name` at `stamp` when it
/// is not newer than ours; `None` when it is (the libraries are about to
/// change here: the load note's count no longer holds).
fn not_newer(st: &Replication, name: &[u8], stamp: Stamp) -> Option<Outcome> {
    match st.versions.libraries().decide(name, stamp) {
        Decision::Apply => {
            crate::capture::libraries::changed_elsewhere();
            None
        }
        other => Some(Outcome::of(other)),
    }
}

/// The function a refused load registers that another library holds: the
/// server says `Function <name> already exists`.
fn taken_function(why: &str) -> Option<&[u8]> {
    let (_, rest) = why.split_once("Function ")?;
    let (function, _) = rest.split_once(" already exists")?;
    (!function.is_empty() && !function.contains(' ')).then_some(function.as_bytes())
}

/// A library this server does not compile: counted, logged, kept as
/// `last_error`.
fn refuse(shared: &Shared, name: &[u8], why: &str) -> Outcome {
    let msg = format!(
        "the peer's function library '{}' was not loaded: this server refused it ({why}); \
         this node keeps its own until the library is loaded again in a form it compiles",
        String::from_utf8_lossy(name)
    );
    Stats::add(&shared.stats.entries_refused, 1);
    redis_module::logging::log_warning(format!("rdmasync: {msg}"));
    shared.stats.set_error(msg);
    Outcome::Refused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_taken_function_is_read_from_the_server_s_refusal() {
        assert_eq!(
            taken_function("FUNCTION: ERR Function f1 already exists"),
            Some(&b"f1"[..])
        );
        assert_eq!(
            taken_function("FUNCTION: Function already exists in the library"),
            None
        );
        assert_eq!(
            taken_function("FUNCTION: ERR Error compiling function"),
            None
        );
    }
}
