//! The peer's merged hash fields written through the key API, as the
//! `HSET` and `HDEL` a client would have sent: propagated to this node's
//! AOF and replicas, notified (`hset`, `hdel`, `del`) and signalled to
//! `WATCH` and client tracking, but run as no command: MONITOR, SLOWLOG and
//! INFO commandstats show only what clients did, and the server's command
//! dispatch (a quarter of a merged `HSET`'s cost on the peer) is skipped.

use std::ptr;

use redis_module::{raw, Context, RedisString};

use crate::converge::merge::hashes::Bytes;

/// Fields per propagated command, as the apply path's calls chunk them.
const FIELDS_PER_COMMAND: usize = 512;

/// `REDISMODULE_HASH_DELETE` of redismodule.h, a marker address no
/// binding carries (a cast in a macro), never dereferenced.
fn hash_delete() -> *mut raw::RedisModuleString {
    ptr::without_provenance_mut(1)
}

/// HashSet's flags, as its `int`.
const HASH_NONE: i32 = raw::REDISMODULE_HASH_NONE as i32;
const HASH_COUNT_ALL: i32 = raw::REDISMODULE_HASH_COUNT_ALL as i32;

/// Sets the fields `set` and removes the fields `del` of the hash `key` in
/// the selected database. `None` when the server lacks a call it needs or
/// the key holds another type, before anything was written (the caller
/// runs the commands instead).
///
/// # Errors
/// A field the server did not set, naming it by its length.
pub fn write_hash_fields(
    ctx: &Context,
    key: &[u8],
    set: &[(Bytes, Bytes)],
    del: &[Bytes],
) -> Option<Result<(), String>> {
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let api = unsafe {
        (
            raw::RedisModule_OpenKey,
            raw::RedisModule_KeyType,
            raw::RedisModule_HashSet,
            raw::RedisModule_CloseKey,
        )
    };
    let (Some(open), Some(key_type), Some(hash_set), Some(close)) = api else {
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
    if held != raw::REDISMODULE_KEYTYPE_EMPTY && held != raw::REDISMODULE_KEYTYPE_HASH {
        // SAFETY: closing the key opened above, written to by nothing.
        unsafe { close(handle) };
        return None;
    }
    // SAFETY: `handle` is live, open for writing, a hash or empty.
    let (failed, removed) = unsafe { write_open(hash_set, handle, set, del) };
    // SAFETY: the key's type after the writes, then its close, which
    // signals the key as modified (WATCH, client tracking) as HSET does.
    let gone = unsafe {
        let gone = key_type(handle) as isize == raw::REDISMODULE_KEYTYPE_EMPTY;
        close(handle);
        gone
    };
    announce(ctx, (key, &name), set, (&removed, gone));
    Some(failed.map_or(Ok(()), Err))
}

/// Propagates and notifies what [`write_open`] did as the `HSET` and
/// `HDEL` commands would (`gone`: the last field went).
fn announce(
    ctx: &Context,
    (key, name): (&[u8], &RedisString),
    set: &[(Bytes, Bytes)],
    (removed, gone): (&[&[u8]], bool),
) {
    // SAFETY: the API table is filled by RedisModule_Init; reading a pointer.
    let Some(notify) = (unsafe { raw::RedisModule_NotifyKeyspaceEvent }) else {
        return;
    };
    let event = |class: i32, event: &std::ffi::CStr| {
        // SAFETY: the live context and key name; `event` is NUL-terminated.
        unsafe { notify(ctx.ctx, class, event.as_ptr(), name.inner) };
    };
    let pairs = set.iter().flat_map(|(f, v)| [f.as_slice(), v.as_slice()]);
    propagate(ctx, ("HSET", key), pairs, 2);
    for _ in set.chunks(FIELDS_PER_COMMAND) {
        event(raw::REDISMODULE_NOTIFY_HASH, c"hset");
    }
    propagate(ctx, ("HDEL", key), removed.iter().copied(), 1);
    for _ in removed.chunks(FIELDS_PER_COMMAND) {
        event(raw::REDISMODULE_NOTIFY_HASH, c"hdel");
    }
    if gone && !removed.is_empty() {
        event(raw::REDISMODULE_NOTIFY_GENERIC, c"del");
    }
}

/// `RedisModule_HashSet` as bound.
type HashSet = unsafe extern "C" fn(*mut raw::RedisModuleKey, i32, ...) -> i32;

/// Sets `set` and removes `del` in the open hash `handle`: the first
/// field not set, and the fields removed.
///
/// # Safety
/// `handle` is a live key opened for writing on the main thread, holding
/// a hash or nothing.
unsafe fn write_open<'a>(
    hash_set: HashSet,
    handle: *mut raw::RedisModuleKey,
    set: &[(Bytes, Bytes)],
    del: &'a [Bytes],
) -> (Option<String>, Vec<&'a [u8]>) {
    let none: *mut raw::RedisModuleString = ptr::null_mut();
    let mut failed = None;
    for (field, value) in set {
        let (f, v) = (string(field), string(value));
        // SAFETY: the caller's contract; the variadic list is one field
        // and value, both live Redis strings, ended by a null pointer as
        // HashSet requires; COUNT_ALL counts a new field as set.
        let n = unsafe { hash_set(handle, HASH_COUNT_ALL, f.inner, v.inner, none) };
        if n != 1 && failed.is_none() {
            failed = Some(format!("HSET: a field of {} bytes not set", field.len()));
        }
    }
    let mut removed = Vec::new();
    for field in del {
        let f = string(field);
        // SAFETY: as above; `HASH_DELETE` is the value that asks for a
        // removal. The key goes once its last field does.
        let n = unsafe { hash_set(handle, HASH_NONE, f.inner, hash_delete(), none) };
        if n == 1 {
            removed.push(field.as_slice());
        }
    }
    (failed, removed)
}

/// A Redis string of `bytes`, owned by no context.
fn string(bytes: &[u8]) -> RedisString {
    RedisString::create_from_slice(ptr::null_mut(), bytes)
}

/// Propagates `command key args...` to the AOF and replicas, `per` of the
/// arguments making one element, [`FIELDS_PER_COMMAND`] elements a command.
fn propagate<'a>(
    ctx: &Context,
    (command, key): (&str, &'a [u8]),
    args: impl Iterator<Item = &'a [u8]>,
    per: usize,
) {
    let args: Vec<&[u8]> = args.collect();
    for chunk in args.chunks(FIELDS_PER_COMMAND * per) {
        let mut all: Vec<&[u8]> = Vec::with_capacity(1 + chunk.len());
        all.push(key);
        all.extend_from_slice(chunk);
        ctx.replicate(command, &all[..]);
    }
}
