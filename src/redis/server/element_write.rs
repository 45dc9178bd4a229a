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
    commands: (&'static CStr, &'static CStr),
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
            commands: (c"HSET", c"HDEL"),
            events: (c"hset", c"hdel"),
        }),
        Kind::SortedSet => Some(Written {
            key_type: raw::REDISMODULE_KEYTYPE_ZSET,
            class: raw::REDISMODULE_NOTIFY_ZSET,
            commands: (c"ZADD", c"ZREM"),
            events: (c"zadd", c"zrem"),
        }),
        Kind::Set | Kind::List => None,
    }
}

/// What the writes did: how many elements changed value, how many went,
/// the first failure.
#[derive(Default)]
struct Done {
    set: usize,
    removed: usize,
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
    if kind == Kind::SortedSet {
        // Refused before anything is written, as ZADD refuses its command.
        if let Some((_, score)) = set.iter().find(|(_, s)| finite_or_infinite(s).is_none()) {
            return Some(Err(format!("ZADD: a score of {} bytes", score.len())));
        }
    }
    let write = |handle| {
        // Propagated first: a server that cannot (a renamed command)
        // leaves the key untouched and the caller runs the commands.
        // What the replicas get of an element left as it was (an absent
        // element removed, a score set again) changes nothing there.
        let (set_command, del_command) = how.commands;
        let args = set.iter().flat_map(|element| set_args(kind, element));
        let pairs: Vec<Bytes> = args.collect();
        let removals = del.iter().map(Vec::as_slice);
        let propagated = propagate(ctx, (set_command, key), pairs.iter().map(Vec::as_slice), 2)
            && propagate(ctx, (del_command, key), removals, 1);
        // SAFETY: `with_key` hands a live key of `kind` (or empty) opened
        // for writing on the main thread.
        propagated.then(|| unsafe { write_open(handle, kind, set, del) })
    };
    let (done, name, gone) = with_key(ctx, key, how.key_type, write)?;
    let done = done?;
    announce(ctx, &name, &how, (&done, gone));
    Some(done.failed.map_or(Ok(()), Err))
}

/// The arguments that say `element` in its command: a field and its
/// value, or a score (as text that reads back as the same double) and a
/// member.
fn set_args(kind: Kind, (name, value): &(Bytes, Bytes)) -> [Bytes; 2] {
    match kind {
        Kind::SortedSet => {
            let score = finite_or_infinite(value).unwrap_or_default();
            [format!("{score:e}").into_bytes(), name.clone()]
        }
        _ => [name.clone(), value.clone()],
    }
}

/// The score a sorted-set element value holds, unless it holds none or
/// NaN (which no sorted set holds).
fn finite_or_infinite(value: &[u8]) -> Option<f64> {
    score_of(value).filter(|s| !s.is_nan())
}

/// Runs `write` on `key` opened for writing when it holds `key_type` or
/// nothing, then closes it (which signals the key as modified, as the
/// commands do): what `write` gave, the key's name and whether the key is
/// gone after; `None` (nothing run) when the server lacks a call or the
/// key holds another type.
pub(super) fn with_key<T>(
    ctx: &Context,
    key: &[u8],
    key_type: isize,
    write: impl FnOnce(*mut raw::RedisModuleKey) -> T,
) -> Option<(T, RedisString, bool)> {
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let api = unsafe {
        (
            raw::RedisModule_OpenKey,
            raw::RedisModule_KeyType,
            raw::RedisModule_CloseKey,
        )
    };
    let (Some(open), Some(type_of), Some(close)) = api else {
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
    let held = unsafe { type_of(handle) } as isize;
    let fits = held == raw::REDISMODULE_KEYTYPE_EMPTY || held == key_type;
    let out = fits.then(|| write(handle));
    // SAFETY: the key's type after the writes, then its close.
    let gone = unsafe {
        let gone = type_of(handle) as isize == raw::REDISMODULE_KEYTYPE_EMPTY;
        close(handle);
        gone
    };
    Some((out?, name, gone))
}

/// Raises the keyspace events of what [`write_open`] did, as the commands
/// would (`gone`: the last element went).
fn announce(ctx: &Context, name: &RedisString, how: &Written, (done, gone): (&Done, bool)) {
    for _ in (0..done.set).step_by(ELEMENTS_PER_COMMAND) {
        notify(ctx, name, how.class, how.events.0);
    }
    for _ in (0..done.removed).step_by(ELEMENTS_PER_COMMAND) {
        notify(ctx, name, how.class, how.events.1);
    }
    if gone && done.removed > 0 {
        notify(ctx, name, raw::REDISMODULE_NOTIFY_GENERIC, c"del");
    }
}

/// Raises the keyspace event `event` of `class` for the key `name`.
pub(super) fn notify(ctx: &Context, name: &RedisString, class: i32, event: &CStr) {
    // SAFETY: the API table is filled by RedisModule_Init; reading a pointer.
    let Some(notify) = (unsafe { raw::RedisModule_NotifyKeyspaceEvent }) else {
        return;
    };
    // SAFETY: the live context and key name; `event` is NUL-terminated.
    unsafe { notify(ctx.ctx, class, event.as_ptr(), name.inner) };
}

/// Sets `set` and removes `del` in the open key `handle`.
///
/// # Safety
/// `handle` is a live key opened for writing on the main thread, holding
/// a value of `kind` or nothing; the server has the calls of `kind`
/// ([`written`] found them).
unsafe fn write_open(
    handle: *mut raw::RedisModuleKey,
    kind: Kind,
    set: &[(Bytes, Bytes)],
    del: &[Bytes],
) -> Done {
    let mut done = Done::default();
    for element in set {
        // SAFETY: the caller's contract.
        match unsafe { set_one(handle, kind, element) } {
            Ok(true) => done.set += 1,
            Ok(false) => {}
            Err(why) => {
                done.failed.get_or_insert(why);
            }
        }
    }
    for name in del {
        // SAFETY: the caller's contract.
        if unsafe { remove_one(handle, kind, name) } {
            done.removed += 1;
        }
    }
    done
}

/// Sets one element: whether its value changed (a hash's field always
/// counts, as HSET's event does); `Err` when the server refused it.
///
/// # Safety
/// As [`write_open`].
unsafe fn set_one(
    handle: *mut raw::RedisModuleKey,
    kind: Kind,
    (name, value): &(Bytes, Bytes),
) -> Result<bool, String> {
    let none: *mut raw::RedisModuleString = ptr::null_mut();
    let member = string(name);
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let (hash_set, zset_add) = unsafe { (raw::RedisModule_HashSet, raw::RedisModule_ZsetAdd) };
    if kind == Kind::Hash {
        let v = string(value);
        // SAFETY: the caller's contract; the variadic list is one field
        // and value, both live Redis strings, ended by a null pointer as
        // HashSet requires; COUNT_ALL counts a new field as set.
        let n =
            hash_set.map(|set| unsafe { set(handle, HASH_COUNT_ALL, member.inner, v.inner, none) });
        return match n {
            Some(1) => Ok(true),
            _ => Err(format!("HSET: a field of {} bytes not set", name.len())),
        };
    }
    let (Some(zset_add), Some(score)) = (zset_add, finite_or_infinite(value)) else {
        return Err(format!("ZADD: a score of {} bytes", value.len()));
    };
    let mut flags = 0;
    // SAFETY: the caller's contract; `member` is live, `flags` a live int.
    let ok = unsafe { zset_add(handle, score, member.inner, &mut flags) };
    let changed = (raw::REDISMODULE_ZADD_ADDED | raw::REDISMODULE_ZADD_UPDATED) as i32;
    match ok == raw::REDISMODULE_OK as i32 {
        true => Ok(flags & changed != 0),
        false => Err(format!("ZADD: a member of {} bytes not set", name.len())),
    }
}

/// Removes one element: whether it was there. The key goes once its last
/// element does.
///
/// # Safety
/// As [`write_open`].
unsafe fn remove_one(handle: *mut raw::RedisModuleKey, kind: Kind, name: &[u8]) -> bool {
    let member = string(name);
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let (hash_set, zset_rem) = unsafe { (raw::RedisModule_HashSet, raw::RedisModule_ZsetRem) };
    if kind == Kind::Hash {
        let none: *mut raw::RedisModuleString = ptr::null_mut();
        // SAFETY: as in `set_one`; `hash_delete()` is the value that asks
        // for a removal, HASH_NONE counts only a field that was there.
        let n = hash_set
            .map(|set| unsafe { set(handle, HASH_NONE, member.inner, hash_delete(), none) });
        return n == Some(1);
    }
    let mut deleted = 0;
    // SAFETY: the caller's contract; `member` is live, `deleted` a live int.
    let ok = zset_rem.map(|rem| unsafe { rem(handle, member.inner, &mut deleted) });
    ok == Some(raw::REDISMODULE_OK as i32) && deleted == 1
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
/// command; `false` when the server refused the first (a command renamed
/// away), nothing propagated then.
pub(super) fn propagate<'a>(
    ctx: &Context,
    (command, key): (&CStr, &'a [u8]),
    args: impl Iterator<Item = &'a [u8]>,
    per: usize,
) -> bool {
    let args: Vec<&[u8]> = args.collect();
    for chunk in args.chunks(ELEMENTS_PER_COMMAND * per) {
        let mut all: Vec<&[u8]> = Vec::with_capacity(1 + chunk.len());
        all.push(key);
        all.extend_from_slice(chunk);
        let done = match replicate_buffers(ctx, command, &all) {
            Some(done) => done,
            None => {
                let command = command.to_str().unwrap_or_default();
                raw::replicate(ctx.ctx, command, &all[..]) == redis_module::Status::Ok
            }
        };
        if !done {
            return false;
        }
    }
    true
}

/// Propagates `command` with two or three arguments (a key and one
/// element: the usual merged write) from their bytes, which the server
/// copies into its own strings, where the general path makes a Redis
/// string of each first; `None` for other counts (nothing propagated).
fn replicate_buffers(ctx: &Context, command: &CStr, args: &[&[u8]]) -> Option<bool> {
    // SAFETY: the API table is filled by RedisModule_Init; reading a pointer.
    let replicate = unsafe { raw::RedisModule_Replicate }?;
    let ptr = |bytes: &[u8]| bytes.as_ptr().cast::<std::ffi::c_char>();
    // SAFETY: the live context on the main thread; `command` and the
    // formats are NUL-terminated; each `b` of a format takes a pointer and
    // its length (`size_t`), both live for the call, which copies them.
    let status = unsafe {
        match args {
            [a, b] => replicate(
                ctx.ctx,
                command.as_ptr(),
                c"bb".as_ptr(),
                ptr(a),
                a.len(),
                ptr(b),
                b.len(),
            ),
            [a, b, c] => replicate(
                ctx.ctx,
                command.as_ptr(),
                c"bbb".as_ptr(),
                ptr(a),
                a.len(),
                ptr(b),
                b.len(),
                ptr(c),
                c.len(),
            ),
            _ => return None,
        }
    };
    Some(status == raw::REDISMODULE_OK as i32)
}
