//! A big value built on the peer a slice at a time, under a key of the
//! module's own (`receive::staging`), then moved over the real key in one
//! step: a 10,000,000-field hash no longer holds the main thread for
//! seconds in one `RESTORE`. Lists, hashes and sorted sets are written
//! through the key API (no command runs, nothing is propagated or
//! notified); sets, which have no key API call on the servers supported,
//! with `SADD` through `RM_Call`, not propagated either.

use std::ptr;

use redis_module::{raw, CallOptionsBuilder, CallResult, Context, RedisString};

use crate::redis::dump::Kind;
use crate::redis::plain_value::Element;

/// The names of the keys values are built under: this prefix, then the
/// value's slot in its batch. No client command is expected to use it.
pub const BUILD_KEY_PREFIX: &[u8] = b"\xffrdmasync:building:";
/// Values of one batch built at once, at most (and the slots a leftover
/// of a crash can hold).
pub const BUILD_SLOTS: usize = 8;

/// The key the value of `slot` is built under.
pub fn build_key(slot: usize) -> Vec<u8> {
    let mut name = BUILD_KEY_PREFIX.to_vec();
    name.extend_from_slice(slot.to_string().as_bytes());
    name
}

/// Whether `key` is one values are built under (skipped by full syncs).
pub fn is_build_key(key: &[u8]) -> bool {
    key.starts_with(BUILD_KEY_PREFIX)
}

/// Whether a value may be built beside the one it replaces: no
/// `maxmemory`, or less than half of it in use.
pub fn memory_to_spare() -> bool {
    // SAFETY: reading a pointer of the API table.
    let Some(ratio) = (unsafe { raw::RedisModule_GetUsedMemoryRatio }) else {
        return true;
    };
    // SAFETY: a pure query of the server's memory use, on the main thread.
    let used = unsafe { ratio() };
    used < 0.5
}

/// The `REDISMODULE_KEYTYPE_*` of a kind.
fn key_type_of(kind: Kind) -> isize {
    match kind {
        Kind::List => raw::REDISMODULE_KEYTYPE_LIST,
        Kind::Set => raw::REDISMODULE_KEYTYPE_SET,
        Kind::Hash => raw::REDISMODULE_KEYTYPE_HASH,
        Kind::SortedSet => raw::REDISMODULE_KEYTYPE_ZSET,
    }
}

/// Runs `write` on the key `name` of the selected database opened for
/// writing, if it is absent or of `kind`: `None` when it holds another
/// type or the server lacks the calls.
fn with_key<T>(
    ctx: &Context,
    name: &[u8],
    kind: Kind,
    write: impl FnOnce(*mut raw::RedisModuleKey) -> T,
) -> Option<T> {
    super::element_write::with_key(ctx, name, key_type_of(kind), write).map(|(out, _, _)| out)
}

/// How many elements the key `name` of the selected database holds (0 when
/// absent); `None` when it holds another type than `kind`.
pub fn built_len(ctx: &Context, name: &[u8], kind: Kind) -> Option<u64> {
    // SAFETY: reading a pointer of the API table.
    let length = unsafe { raw::RedisModule_ValueLength }?;
    // SAFETY: `handle` is the open key `with_key` passes.
    with_key(ctx, name, kind, |handle| unsafe { length(handle) } as u64)
}

/// Adds `elements` (all of `kind`) to the key `name` of the selected
/// database, creating it. Nothing is propagated.
///
/// # Errors
/// The call that failed, when the key holds another type or the server
/// refused an element.
pub fn add_elements(
    ctx: &Context,
    name: &[u8],
    kind: Kind,
    elements: &[Element<'_>],
) -> Result<(), String> {
    if kind == Kind::Set {
        return add_members(ctx, name, elements);
    }
    let written = with_key(ctx, name, kind, |handle| {
        elements.iter().all(|e| add_one(handle, e))
    });
    match written {
        Some(true) => Ok(()),
        Some(false) => Err("the key API refused an element".to_owned()),
        None => Err("the build key holds another type".to_owned()),
    }
}

/// One element through the key API of the open key `handle`.
fn add_one(handle: *mut raw::RedisModuleKey, element: &Element<'_>) -> bool {
    let string = |b: &[u8]| RedisString::create_from_slice(ptr::null_mut(), b);
    // SAFETY: reading pointers of the API table.
    let api = unsafe {
        (
            raw::RedisModule_ListPush,
            raw::RedisModule_HashSet,
            raw::RedisModule_ZsetAdd,
        )
    };
    match (element, api) {
        (Element::Member(m), (Some(push), _, _)) => {
            let m = string(m);
            let tail = raw::REDISMODULE_LIST_TAIL as i32;
            // SAFETY: `handle` is an open list key (or empty); the server
            // copies the live string.
            unsafe { push(handle, tail, m.inner) == raw::REDISMODULE_OK as i32 }
        }
        (Element::Field(f, v), (_, Some(set), _)) => {
            let (f, v) = (string(f), string(v));
            let none = raw::REDISMODULE_HASH_NONE as i32;
            let null: *mut raw::RedisModuleString = ptr::null_mut();
            // SAFETY: `handle` is an open hash key (or empty); the pairs
            // end with the null the call expects; the server copies the
            // live strings. It returns how many existing fields changed
            // (0 for a new one): the length is checked at the end instead.
            unsafe { set(handle, none, f.inner, v.inner, null) };
            true
        }
        (Element::Scored(m, score), (_, _, Some(add))) => {
            let m = string(m);
            let mut flags = 0;
            // SAFETY: `handle` is an open sorted-set key (or empty); the
            // server copies the live string; `flags` outlives the call.
            unsafe { add(handle, *score, m.inner, &mut flags) == raw::REDISMODULE_OK as i32 }
        }
        _ => false,
    }
}

/// Set members through `SADD` (the servers supported have no key API call
/// for sets), not propagated.
fn add_members(ctx: &Context, name: &[u8], elements: &[Element<'_>]) -> Result<(), String> {
    let mut args: Vec<&[u8]> = Vec::with_capacity(elements.len() + 1);
    args.push(name);
    for e in elements {
        match e {
            Element::Member(m) => args.push(m),
            _ => return Err("a set member of another kind".to_owned()),
        }
    }
    let opts = CallOptionsBuilder::new().errors_as_replies().build();
    match ctx.call_ext::<_, CallResult>("SADD", &opts, args.as_slice()) {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("SADD: {}", e.to_utf8_string().unwrap_or_default())),
    }
}
