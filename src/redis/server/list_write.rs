//! The peer's merged list pushes, and the pops of this node's own runs
//! they replace, written through the key API as the `LPUSH`, `RPUSH`,
//! `LPOP` and `RPOP` a client would have sent: propagated to this node's
//! AOF and replicas, notified (`lpush`, `rpush`, `lpop`, `rpop`, `del`)
//! and signalled to `WATCH` and client tracking by the key's close, but
//! run as no command (as `element_write` does for hashes and sorted sets).

use std::ffi::CStr;

use redis_module::{raw, Context, RedisString};

use super::element_write::{propagate, string, ELEMENTS_PER_COMMAND};

/// An end of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The head (`LPUSH`, `LPOP`).
    Head,
    /// The tail (`RPUSH`, `RPOP`).
    Tail,
}

impl End {
    fn place(self) -> i32 {
        match self {
            Self::Head => raw::REDISMODULE_LIST_HEAD as i32,
            Self::Tail => raw::REDISMODULE_LIST_TAIL as i32,
        }
    }
}

/// Pushes `elements` at `end` of the list `key` in the selected database,
/// one after the other (at the head the last pushed ends first). `None`
/// when the server lacks a call or the key holds another type, before
/// anything was written (the caller runs the commands instead).
///
/// # Errors
/// An element the server did not push, naming it by its length.
pub fn push_elements(
    ctx: &Context,
    key: &[u8],
    end: End,
    elements: &[&[u8]],
) -> Option<Result<(), String>> {
    // SAFETY: the API table is filled by RedisModule_Init; reading a pointer.
    let push = unsafe { raw::RedisModule_ListPush }?;
    let (command, event) = match end {
        End::Head => ("LPUSH", c"lpush"),
        End::Tail => ("RPUSH", c"rpush"),
    };
    let mut failed = None;
    let write = |handle| {
        for element in elements {
            let value = string(element);
            // SAFETY: `with_list` hands a live list (or empty) key opened
            // for writing; `value` is a live Redis string.
            if unsafe { push(handle, end.place(), value.inner) } != raw::REDISMODULE_OK as i32 {
                let why = format!(
                    "{command}: an element of {} bytes not pushed",
                    element.len()
                );
                failed.get_or_insert(why);
            }
        }
    };
    let (name, _) = with_list(ctx, key, write)?;
    propagate(ctx, (command, key), elements.iter().copied(), 1);
    for _ in elements.chunks(ELEMENTS_PER_COMMAND) {
        notify(ctx, &name, raw::REDISMODULE_NOTIFY_LIST, event);
    }
    Some(failed.map_or(Ok(()), Err))
}

/// Pops `count` elements at `end` of the list `key` in the selected
/// database (fewer when it holds fewer). `None` as [`push_elements`].
pub fn pop_elements(ctx: &Context, key: &[u8], end: End, count: usize) -> Option<()> {
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let (pop, free) = unsafe { (raw::RedisModule_ListPop, raw::RedisModule_FreeString) };
    let (pop, free) = (pop?, free?);
    let mut popped = 0usize;
    let write = |handle| {
        while popped < count {
            // SAFETY: `with_list` hands a live list (or empty) key opened
            // for writing. A popped element is the caller's to free (no
            // automatic memory on this context); null once none is left.
            let element = unsafe { pop(handle, end.place()) };
            if element.is_null() {
                break;
            }
            // SAFETY: the string just popped, freed once, on its context.
            unsafe { free(ctx.ctx, element) };
            popped += 1;
        }
    };
    let (name, gone) = with_list(ctx, key, write)?;
    if popped == 0 {
        return Some(());
    }
    let (command, event) = match end {
        End::Head => ("LPOP", c"lpop"),
        End::Tail => ("RPOP", c"rpop"),
    };
    let n = popped.to_string();
    propagate(ctx, (command, key), [n.as_bytes()].into_iter(), 1);
    notify(ctx, &name, raw::REDISMODULE_NOTIFY_LIST, event);
    if gone {
        notify(ctx, &name, raw::REDISMODULE_NOTIFY_GENERIC, c"del");
    }
    Some(())
}

/// Runs `write` on the list `key` opened for writing, then closes it: the
/// key's name and whether it is gone after; `None` (nothing run) when the
/// server lacks a call or the key holds another type.
fn with_list(
    ctx: &Context,
    key: &[u8],
    write: impl FnOnce(*mut raw::RedisModuleKey),
) -> Option<(RedisString, bool)> {
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
    let fits = held == raw::REDISMODULE_KEYTYPE_EMPTY || held == raw::REDISMODULE_KEYTYPE_LIST;
    if fits {
        write(handle);
    }
    // SAFETY: the key's type after the writes, then its close, which
    // signals the key as modified as the commands do.
    let gone = unsafe {
        let gone = key_type(handle) as isize == raw::REDISMODULE_KEYTYPE_EMPTY;
        close(handle);
        gone
    };
    fits.then_some((name, gone))
}

/// Raises the keyspace event `event` of `class` for the key `name`.
fn notify(ctx: &Context, name: &RedisString, class: i32, event: &CStr) {
    // SAFETY: the API table is filled by RedisModule_Init; reading a pointer.
    let Some(notify) = (unsafe { raw::RedisModule_NotifyKeyspaceEvent }) else {
        return;
    };
    // SAFETY: the live context and key name; `event` is NUL-terminated.
    unsafe { notify(ctx.ctx, class, event.as_ptr(), name.inner) };
}
