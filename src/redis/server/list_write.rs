//! The peer's merged list pushes, and the pops of this node's own runs
//! they replace, written through the key API as the `LPUSH`, `RPUSH`,
//! `LPOP` and `RPOP` a client would have sent: propagated to this node's
//! AOF and replicas, notified (`lpush`, `rpush`, `lpop`, `rpop`, `del`)
//! and signalled to `WATCH` and client tracking by the key's close, but
//! run as no command (as `element_write` does for hashes and sorted sets).

use redis_module::{raw, Context};

use super::element_write::{notify, propagate, string, with_key, ELEMENTS_PER_COMMAND};

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
/// when the server lacks a call, cannot propagate the command or the key
/// holds another type, before anything was written (the caller runs the
/// commands instead).
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
        End::Head => (c"LPUSH", c"lpush"),
        End::Tail => (c"RPUSH", c"rpush"),
    };
    let write = |handle| {
        if !propagate(ctx, (command, key), elements.iter().copied(), 1) {
            return None;
        }
        let mut failed = None;
        for element in elements {
            let value = string(element);
            // SAFETY: `with_key` hands a live list (or empty) key opened
            // for writing; `value` is a live Redis string.
            if unsafe { push(handle, end.place(), value.inner) } != raw::REDISMODULE_OK as i32 {
                let why = format!(
                    "{}: an element of {} bytes not pushed",
                    command.to_string_lossy(),
                    element.len()
                );
                failed.get_or_insert(why);
            }
        }
        Some(failed)
    };
    let (failed, name, _) = with_key(ctx, key, raw::REDISMODULE_KEYTYPE_LIST, write)?;
    let failed = failed?;
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
    let (command, event) = match end {
        End::Head => (c"LPOP", c"lpop"),
        End::Tail => (c"RPOP", c"rpop"),
    };
    let write = |handle| {
        // A replica holds the same list: it pops as many as there are.
        let n = count.to_string();
        if !propagate(ctx, (command, key), [n.as_bytes()].into_iter(), 1) {
            return None;
        }
        let mut popped = 0usize;
        while popped < count {
            // SAFETY: `with_key` hands a live list (or empty) key opened
            // for writing. A popped element is the caller's to free; null
            // once none is left.
            let element = unsafe { pop(handle, end.place()) };
            if element.is_null() {
                break;
            }
            // SAFETY: the string just popped, freed once, on its context.
            unsafe { free(ctx.ctx, element) };
            popped += 1;
        }
        Some(popped)
    };
    let (popped, name, gone) = with_key(ctx, key, raw::REDISMODULE_KEYTYPE_LIST, write)?;
    if popped? > 0 {
        notify(ctx, &name, raw::REDISMODULE_NOTIFY_LIST, event);
        if gone {
            notify(ctx, &name, raw::REDISMODULE_NOTIFY_GENERIC, c"del");
        }
    }
    Some(())
}
