//! The peer's function libraries, applied when newer than ours (one version
//! covers them all, last writer wins for the set): this node ends with
//! exactly the peer's set.
//!
//! Only what differs is written: a library of ours whose code the peer's
//! set lacks is deleted, a library of the peer's whose code we lack is
//! loaded. `FUNCTION RESTORE ... FLUSH` would compile every library again,
//! so a writer loading N libraries one at a time cost this node N squared
//! compilations (Redis 8.0's own suite: 50,000 loads took 175 s against
//! 8 s). When the payload or our libraries cannot be read, or a command
//! fails, the payload is restored whole as before; if that fails too, our
//! set is put back as it was and the entry counts as an apply error, or,
//! in a mixed pair (the payload in another RDB format than ours), as
//! refused (`entries_refused`): no later try would apply it.
//!
//! The code is Lua whatever RDB format the payload has, so the libraries
//! cross between any two servers of a mixed pair (the writer refuses a
//! payload only if it cannot read it either, `capture::flush`).

use hashbrown::HashSet;
use redis_module::{CallOptions, Context};

use super::apply::run;
use super::apply_plan::{functions_decision, Outcome};
use crate::catchup::replication::Replication;
use crate::converge::version::{Decision, Stamp};
use crate::ops::status::Stats;
use crate::redis::{libraries, server};
use crate::shared::Shared;

/// Applies the peer's libraries (a `FUNCTION DUMP` payload) written at
/// `stamp`. The digest recorded is of our own `FUNCTION DUMP` after it (the
/// bytes may differ from the peer's: another `rdbcompression`, another
/// order), so that only a later change here reads as one.
pub(super) fn apply(
    ctx: &Context,
    opts: &CallOptions,
    shared: &Shared,
    st: &mut Replication,
    payload: &[u8],
    stamp: Stamp,
) -> Result<Outcome, String> {
    let ours = st.versions.functions().map(|f| f.stamp);
    match functions_decision(ours, stamp) {
        Decision::Apply => {}
        other => return Ok(Outcome::of(other)),
    }
    if shared.apply.later_function_set_waits() {
        // A later set of the peer's is queued: it replaces this one when
        // it applies (last writer wins for the set). While the peer loads
        // libraries one by one faster than this node applies its sets,
        // applying each would fall further and further behind (Redis
        // 8.0's suite: 50,000 loads).
        return Ok(Outcome::Discarded);
    }
    // Ours, and what to put back if neither way works.
    let before = server::functions_dump(ctx);
    let restored = || run(ctx, opts, "FUNCTION", &[b"RESTORE", payload, b"FLUSH"]);
    let written = if write_differences(ctx, opts, payload, before.as_deref()) {
        Ok(())
    } else {
        restored()
    };
    if written.is_ok() {
        record_ours(ctx, st, stamp, Some(payload));
        return Ok(Outcome::Applied);
    }
    // The peer's set holds a library this server does not compile (in a
    // mixed pair, one calling an API only the writer's server has), or a
    // payload it cannot read: our set stays as it was, under our version.
    if let Some(before) = &before {
        let _ = run(ctx, opts, "FUNCTION", &[b"RESTORE", before, b"FLUSH"]);
    }
    if let Some(ours) = ours {
        // Restoring may order the libraries otherwise: the digest is of
        // what we hold now, or a later read here would take our old set
        // for a change and ship it over the peer's newer one.
        record_ours(ctx, st, ours, None);
    }
    let theirs = crate::redis::dump::payload_rdb_version(payload);
    let mine = before
        .as_deref()
        .and_then(crate::redis::dump::payload_rdb_version);
    let msg = not_applied(theirs, mine, &written.err().unwrap_or_default());
    if theirs == mine {
        return Err(msg);
    }
    // A mixed pair: no later try would do better (docs/operations.md).
    Stats::add(&shared.stats.entries_refused, 1);
    redis_module::logging::log_warning(format!("rdmasync: {msg}"));
    shared.stats.set_error(msg);
    Ok(Outcome::Refused)
}

/// Records our libraries as they are now (their digest) at `stamp`; if
/// they cannot be read, as `otherwise` (else the record stays).
fn record_ours(ctx: &Context, st: &mut Replication, stamp: Stamp, otherwise: Option<&[u8]>) {
    let dump = server::functions_dump(ctx);
    if let Some(dump) = dump.as_deref().or(otherwise) {
        let digest = crate::redis::snapshot::functions_digest(dump);
        st.versions.record_functions(stamp, digest);
    }
}

/// Deletes and loads what makes our libraries (`ours`, our `FUNCTION
/// DUMP`) those of `payload`; false when it could not (the caller then
/// restores the payload whole, which also replaces whatever this wrote).
fn write_differences(
    ctx: &Context,
    opts: &CallOptions,
    payload: &[u8],
    ours: Option<&[u8]>,
) -> bool {
    let (Some(theirs), Some(ours)) = (libraries::codes(payload), our_libraries(ctx, ours)) else {
        return false;
    };
    let changes = Changes::between(&ours, &theirs);
    changes
        .delete
        .iter()
        .all(|name| run(ctx, opts, "FUNCTION", &[b"DELETE", name]).is_ok())
        && changes
            .load
            .iter()
            .all(|code| run(ctx, opts, "FUNCTION", &[b"LOAD", b"REPLACE", code]).is_ok())
}

/// Our libraries' names and codes: read from our dump (each name from its
/// code's first line), else listed (`FUNCTION LIST WITHCODE`, which costs
/// about as much as the dump again).
fn our_libraries(ctx: &Context, dump: Option<&[u8]>) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let from_dump = dump.and_then(libraries::codes).and_then(|codes| {
        codes
            .into_iter()
            .map(|code| Some((libraries::name(&code)?.to_vec(), code)))
            .collect::<Option<Vec<_>>>()
    });
    from_dump.or_else(|| server::function_libraries(ctx))
}

/// What turns one set of libraries into another.
#[derive(Debug, PartialEq, Eq)]
struct Changes<'a> {
    /// Names of ours to delete: the other set has no library with their
    /// code. Deleted before any load, so that a function name they
    /// register is free for a library loaded in their place.
    delete: Vec<&'a [u8]>,
    /// Codes of theirs to load: we have no library with that code.
    load: Vec<&'a [u8]>,
}

impl<'a> Changes<'a> {
    /// From `ours` (name and code of each library) to `theirs` (codes).
    fn between(ours: &'a [(Vec<u8>, Vec<u8>)], theirs: &'a [Vec<u8>]) -> Self {
        let their_codes: HashSet<&[u8]> = theirs.iter().map(Vec::as_slice).collect();
        let our_codes: HashSet<&[u8]> = ours.iter().map(|(_, code)| code.as_slice()).collect();
        Changes {
            delete: ours
                .iter()
                .filter(|(_, code)| !their_codes.contains(code.as_slice()))
                .map(|(name, _)| name.as_slice())
                .collect(),
            load: theirs
                .iter()
                .map(Vec::as_slice)
                .filter(|code| !our_codes.contains(code))
                .collect(),
        }
    }
}

/// Why the peer's set was not applied, for the log and `last_error`.
fn not_applied(theirs: Option<u16>, mine: Option<u16>, why: &str) -> String {
    format!(
        "the peer's function libraries (RDB format {}) were not applied: this server (RDB \
         format {}) could neither load each library nor restore the set ({why}); ours are kept",
        theirs.unwrap_or(0),
        mine.unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib(name: &str, code: &str) -> (Vec<u8>, Vec<u8>) {
        (name.as_bytes().to_vec(), code.as_bytes().to_vec())
    }

    #[test]
    fn only_libraries_whose_code_differs_are_deleted_or_loaded() {
        let ours = vec![
            lib("kept", "#!lua name=kept\nA"),
            lib("changed", "#!lua name=changed\nold"),
            lib("gone", "#!lua name=gone\nG"),
        ];
        let theirs = vec![
            b"#!lua name=new\nN".to_vec(),
            b"#!lua name=kept\nA".to_vec(),
            b"#!lua name=changed\nnew".to_vec(),
        ];
        let changes = Changes::between(&ours, &theirs);
        assert_eq!(changes.delete, vec![&b"changed"[..], &b"gone"[..]]);
        assert_eq!(
            changes.load,
            vec![&b"#!lua name=new\nN"[..], &b"#!lua name=changed\nnew"[..]]
        );
    }

    #[test]
    fn equal_sets_change_nothing_and_an_empty_one_deletes_everything() {
        let ours = vec![lib("a", "#!lua name=a\n1"), lib("b", "#!lua name=b\n2")];
        let same = vec![b"#!lua name=b\n2".to_vec(), b"#!lua name=a\n1".to_vec()];
        let none = Changes::between(&ours, &same);
        assert!(none.delete.is_empty() && none.load.is_empty());
        let flushed = Changes::between(&ours, &[]);
        assert_eq!(flushed.delete, vec![&b"a"[..], &b"b"[..]]);
        assert!(flushed.load.is_empty());
    }
}
