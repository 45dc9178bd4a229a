//! `SET` of a peer's string value, stored as a client's `SET` stores it.
//!
//! `redis-module` passes a call's arguments as module strings (`RM_Call`'s
//! `v`), which the server shares with the module while the command runs,
//! and the server does not re-encode a shared value: an integer string
//! arrived as `embstr` where its writer holds `int` (16 bytes more for
//! each, a shared integer below 10,000 not shared, and `OBJECT ENCODING`
//! differed between the nodes). Passed as plain buffers (`b`), each
//! argument is a new object of the command's own, encoded as a client's.

use std::os::raw::c_char;

use redis_module::{raw, Context};

/// What follows the key and the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTail<'a> {
    /// Nothing: the key loses any TTL.
    Plain,
    /// `KEEPTTL`.
    KeepTtl,
    /// `PXAT` with these digits.
    PxAt(&'a [u8]),
}

/// `SET key value [KEEPTTL | PXAT at]`, propagated to the AOF and
/// replicas (as the apply path's calls are).
///
/// # Errors
/// The text of the server's error reply (or of the call's failure),
/// naming the command, as the apply path's other calls give it.
pub fn set_string(
    ctx: &Context,
    key: &[u8],
    value: &[u8],
    tail: SetTail<'_>,
) -> Result<(), String> {
    // SAFETY: the API table is filled by RedisModule_Init before any callback runs.
    let Some(call) = (unsafe { raw::RedisModule_Call }) else {
        return Err("SET: RedisModule_Call is missing".into());
    };
    let set = c"SET".as_ptr();
    let (k, klen) = (key.as_ptr().cast::<c_char>(), key.len());
    let (v, vlen) = (value.as_ptr().cast::<c_char>(), value.len());
    let reply = match tail {
        // SAFETY: `ctx.ctx` is the live context of this callback; the format
        // names exactly the arguments that follow (`b`: pointer and length of
        // a buffer alive for the call, `c`: a NUL-terminated string), `!`
        // propagates and `E` returns an error as a reply.
        SetTail::Plain => unsafe { call(ctx.ctx, set, c"!Ebb".as_ptr(), k, klen, v, vlen) },
        // SAFETY: as above.
        SetTail::KeepTtl => unsafe {
            let keep = c"KEEPTTL".as_ptr();
            call(ctx.ctx, set, c"!Ebbc".as_ptr(), k, klen, v, vlen, keep)
        },
        // SAFETY: as above.
        SetTail::PxAt(at) => unsafe {
            let (pxat, a, alen) = (c"PXAT".as_ptr(), at.as_ptr().cast::<c_char>(), at.len());
            call(
                ctx.ctx,
                set,
                c"!Ebbcb".as_ptr(),
                k,
                klen,
                v,
                vlen,
                pxat,
                a,
                alen,
            )
        },
    };
    reply_result(reply)
}

/// The call's outcome: an error reply's text as the error; frees the reply.
fn reply_result(reply: *mut raw::RedisModuleCallReply) -> Result<(), String> {
    if reply.is_null() {
        return Err("SET: the call failed".into());
    }
    // SAFETY: the API table is filled by RedisModule_Init before any callback runs.
    let (kind, text, free) = unsafe {
        (
            raw::RedisModule_CallReplyType,
            raw::RedisModule_CallReplyStringPtr,
            raw::RedisModule_FreeCallReply,
        )
    };
    // A reply whose type cannot be read is taken for an error.
    // SAFETY: `reply` is the live reply RM_Call just returned.
    let is_error = kind.is_none_or(|f| unsafe { f(reply) } == raw::REDISMODULE_REPLY_ERROR as i32);
    let mut outcome = Ok(());
    if is_error {
        let mut len = 0usize;
        // SAFETY: `reply` is live; the pointer it returns is valid for `len`
        // bytes until the reply is freed, and copied before that.
        let message = text.map_or(Vec::new(), |f| unsafe {
            let p = f(reply, &mut len);
            match p.is_null() {
                true => Vec::new(),
                false => std::slice::from_raw_parts(p.cast::<u8>(), len).to_vec(),
            }
        });
        outcome = Err(format!("SET: {}", String::from_utf8_lossy(&message)));
    }
    if let Some(f) = free {
        // SAFETY: `reply` is live and freed once, here.
        unsafe { f(reply) };
    }
    outcome
}
