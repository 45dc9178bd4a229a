//! The peer's merged hash fields and sorted-set members written through
//! the key API, as the `HSET`/`HDEL` or `ZADD`/`ZREM` a client would have
//! sent: propagated to this node's AOF and replicas, notified (`hset`,
//! `hdel`, `zadd`, `zrem`, `del`) and signalled to `WATCH` and client
//! tracking (the key's close does), but run as no command: MONITOR,
//! SLOWLOG and INFO commandstats show only what clients did, and the
//! server's command dispatch (a quarter of a merged `HSET`'s cost on the
//! peer) is skipped. Sets have no such calls on the servers supported.

use std::ffi::CStr;
use std::ptr;

use redis_module::{raw, Context, RedisString};

use crate::converge::merge::hashes::{score_of, Bytes, Kind};

/// Elements per propagated command, as the apply path's calls chunk them.
pub(super) const ELEMENTS_PER_COMMAND: usize = 512;

/// The calls and names of one merged type's writes.
struct Written {
    key_type: isize,
    class: i32,
    commands: (&'static str, &'static str),
    events: (&'static CStr, &'static CStr),
}

/// What a write of `kind` goes through; `None` for a set or a list, or
/// when the server lacks a call it needs.
fn written(kind: Kind) -> Option<Written> {
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let calls = unsafe {
        let (hash_set, zset_add, zset_rem) = (
            raw::RedisModule_HashSet,
            raw::RedisModule_ZsetAdd,
            raw::RedisModule_ZsetRem,
        );
        match kind {
            Kind::Hash => hash_set.is_some(),
            _ => zset_add.is_some() && zset_rem.is_some(),
        }
    };
    if !calls {
        return None;
    }
    match kind {
        Kind::Hash => Some(Written {
            key_type: raw::REDISMODULE_KEYTYPE_HASH,
            class: raw::REDISMODULE_NOTIFY_HASH,
            commands: ("HSET", "HDEL"),
            events: (c"hset", c"hdel"),
        }),
        Kind::SortedSet => Some(Written {
            key_type: raw::REDISMODULE_KEYTYPE_ZSET,
            class: raw::REDISMODULE_NOTIFY_ZSET,
            commands: ("ZADD", "ZREM"),
            events: (c"zadd", c"zrem"),
        }),
        Kind::Set | Kind::List => None,
    }
}

/// What the writes did: the arguments of the elements set (field and
/// value, or score and member), the elements removed, the first failure.
#[derive(Default)]
struct Done<'a> {
    set_args: Vec<Vec<u8>>,
    removed: Vec<&'a [u8]>,
    failed: Option<String>,
}

/// Sets the elements `set` (a field and its value, or a member and its
/// score as [`crate::converge::merge::hashes::score_bytes`] holds it) and
/// removes the elements `del` of the `kind` key `key` in the selected
/// database. `None` when `kind` has no key API, the server lacks a call
/// it needs or the key holds another type, before anything was written
/// (the caller runs the commands instead).
///
/// # Errors
/// An element the server did not set, naming it by its length.
pub fn write_elements(
    ctx: &Context,
    (key, kind): (&[u8], Kind),
    set: &[(Bytes, Bytes)],
    del: &[Bytes],
) -> Option<Result<(), String>> {
    let how = written(kind)?;
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let api = unsafe {
        (
            raw::RedisModule_OpenKey,
            raw::RedisModule_KeyType,
            raw::RedisModule_CloseKey,
        )
    };
    let (Some(open), Some(key_type), Some(close)) = api else {
        return None;
    };
    let name = string(key);
    let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as i32;
    // SAFETY: main thread with the apply path's live context; `name` is a
    // live Redis string. A key opened for writing is never null.
    let handle = unsafe { open(ctx.ctx, name.inner, mode) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: `handle` is the live key just opened.
    let held = unsafe { key_type(handle) } as isize;
    let done = (held == raw::REDISMODULE_KEYTYPE_EMPTY || held == how.key_type)
        // SAFETY: `handle` is live, open for writing, of `kind` or empty.
        .then(|| unsafe { write_open(handle, kind, set, del) })
        .flatten();
    // SAFETY: the key's type after the writes, then its close, which
    // signals the key as modified (WATCH, client tracking) as the
    // commands do.
    let gone = unsafe {
        let gone = key_type(handle) as isize == raw::REDISMODULE_KEYTYPE_EMPTY;
        close(handle);
        gone
    };
    let done = done?;
    announce(ctx, (key, &name), &how, (&done, gone));
    Some(done.failed.map_or(Ok(()), Err))
}

/// Propagates and notifies what [`write_open`] did as the commands would
/// (`gone`: the last element went).
fn announce(
    ctx: &Context,
    (key, name): (&[u8], &RedisString),
    how: &Written,
    (done, gone): (&Done, bool),
) {
    // SAFETY: the API table is filled by RedisModule_Init; reading a pointer.
    let Some(notify) = (unsafe { raw::RedisModule_NotifyKeyspaceEvent }) else {
        return;
    };
    let event = |class: i32, event: &CStr| {
        // SAFETY: the live context and key name; `event` is NUL-terminated.
        unsafe { notify(ctx.ctx, class, event.as_ptr(), name.inner) };
    };
    let (set, del) = how.commands;
    propagate(ctx, (set, key), done.set_args.iter().map(Vec::as_slice), 2);
    for _ in done.set_args.chunks(2 * ELEMENTS_PER_COMMAND) {
        event(how.class, how.events.0);
    }
    propagate(ctx, (del, key), done.removed.iter().copied(), 1);
    for _ in done.removed.chunks(ELEMENTS_PER_COMMAND) {
        event(how.class, how.events.1);
    }
    if gone && !done.removed.is_empty() {
        event(raw::REDISMODULE_NOTIFY_GENERIC, c"del");
    }
}

/// Sets `set` and removes `del` in the open key `handle`; `None` when the
/// server lacks a call ([`written`] found them all first).
///
/// # Safety
/// `handle` is a live key opened for writing on the main thread, holding
/// a value of `kind` or nothing.
unsafe fn write_open<'a>(
    handle: *mut raw::RedisModuleKey,
    kind: Kind,
    set: &[(Bytes, Bytes)],
    del: &'a [Bytes],
) -> Option<Done<'a>> {
    let mut done = Done::default();
    for element in set {
        // SAFETY: the caller's contract.
        match unsafe { set_one(handle, kind, element) }? {
            Ok(Some(args)) => done.set_args.extend(args),
            Ok(None) => {}
            Err(why) => {
                done.failed.get_or_insert(why);
            }
        }
    }
    for name in del {
        // SAFETY: the caller's contract.
        if unsafe { remove_one(handle, kind, name) }? {
            done.removed.push(name);
        }
    }
    Some(done)
}

/// Sets one element: the two arguments that say it in the command, `None`
/// when it held that value already; `Err` when the server refused it;
/// `None` outside when the server lacks the call.
///
/// # Safety
/// As [`write_open`].
unsafe fn set_one(
    handle: *mut raw::RedisModuleKey,
    kind: Kind,
    (name, value): &(Bytes, Bytes),
) -> Option<Result<Option<[Bytes; 2]>, String>> {
    let none: *mut raw::RedisModuleString = ptr::null_mut();
    let member = string(name);
    if kind == Kind::Hash {
        // SAFETY: the API table is filled by RedisModule_Init.
        let hash_set = unsafe { raw::RedisModule_HashSet }?;
        let v = string(value);
        // SAFETY: the caller's contract; the variadic list is one field
        // and value, both live Redis strings, ended by a null pointer as
        // HashSet requires; COUNT_ALL counts a new field as set.
        let n = unsafe { hash_set(handle, HASH_COUNT_ALL, member.inner, v.inner, none) };
        return Some(match n {
            1 => Ok(Some([name.clone(), value.clone()])),
            _ => Err(format!("HSET: a field of {} bytes not set", name.len())),
        });
    }
    // SAFETY: the API table is filled by RedisModule_Init.
    let zset_add = unsafe { raw::RedisModule_ZsetAdd }?;
    let Some(score) = score_of(value).filter(|s| !s.is_nan()) else {
        return Some(Err(format!("ZADD: a score of {} bytes", value.len())));
    };
    let mut flags = 0;
    // SAFETY: the caller's contract; `member` is live, `flags` a live int.
    let ok = unsafe { zset_add(handle, score, member.inner, &mut flags) };
    let changed = (raw::REDISMODULE_ZADD_ADDED | raw::REDISMODULE_ZADD_UPDATED) as i32;
    Some(match ok == raw::REDISMODULE_OK as i32 {
        // The text reads back as the same double.
        true => {
            Ok((flags & changed != 0).then(|| [format!("{score:e}").into_bytes(), name.clone()]))
        }
        false => Err(format!("ZADD: a member of {} bytes not set", name.len())),
    })
}

/// Removes one element: whether it was there; `None` when the server
/// lacks the call. The key goes once its last element does.
///
/// # Safety
/// As [`write_open`].
unsafe fn remove_one(handle: *mut raw::RedisModuleKey, kind: Kind, name: &[u8]) -> Option<bool> {
    let member = string(name);
    if kind == Kind::Hash {
        // SAFETY: the API table is filled by RedisModule_Init.
        let hash_set = unsafe { raw::RedisModule_HashSet }?;
        let none: *mut raw::RedisModuleString = ptr::null_mut();
        // SAFETY: as in `set_one`; `hash_delete()` is the value that asks
        // for a removal.
        return Some(
            unsafe { hash_set(handle, HASH_NONE, member.inner, hash_delete(), none) } == 1,
        );
    }
    // SAFETY: the API table is filled by RedisModule_Init.
    let zset_rem = unsafe { raw::RedisModule_ZsetRem }?;
    let mut deleted = 0;
    // SAFETY: the caller's contract; `member` is live, `deleted` a live int.
    let ok = unsafe { zset_rem(handle, member.inner, &mut deleted) };
    Some(ok == raw::REDISMODULE_OK as i32 && deleted == 1)
}

/// `REDISMODULE_HASH_DELETE` of redismodule.h, a marker address no
/// binding carries (a cast in a macro), never dereferenced.
fn hash_delete() -> *mut raw::RedisModuleString {
    ptr::without_provenance_mut(1)
}

/// HashSet's flags, as its `int`.
const HASH_NONE: i32 = raw::REDISMODULE_HASH_NONE as i32;
const HASH_COUNT_ALL: i32 = raw::REDISMODULE_HASH_COUNT_ALL as i32;

/// A Redis string of `bytes`, owned by no context.
pub(super) fn string(bytes: &[u8]) -> RedisString {
    RedisString::create_from_slice(ptr::null_mut(), bytes)
}

/// Propagates `command key args...` to the AOF and replicas, `per` of the
/// arguments making one element, [`ELEMENTS_PER_COMMAND`] elements a
/// command.
pub(super) fn propagate<'a>(
    ctx: &Context,
    (command, key): (&str, &'a [u8]),
    args: impl Iterator<Item = &'a [u8]>,
    per: usize,
) {
    let args: Vec<&[u8]> = args.collect();
    for chunk in args.chunks(ELEMENTS_PER_COMMAND * per) {
        let mut all: Vec<&[u8]> = Vec::with_capacity(1 + chunk.len());
        all.push(key);
        all.extend_from_slice(chunk);
        ctx.replicate(command, &all[..]);
    }
}
