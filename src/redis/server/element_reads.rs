//! Elements of hashes and sorted sets read one by one, and of hashes,
//! sets and lists read whole, through the key API (no command runs): what
//! the element merges read of the server (issue 27).

use std::os::raw::c_void;

use redis_module::raw;

use super::collections::{bytes_of, each_scored, free};

/// Field `field` of the hash `handle` holds (`Ok(None)`: no such field);
/// `Err` on a server without the call or a key that is not a hash.
///
/// # Safety
/// `handle` is a live, non-null key handle opened for reading, on the main
/// thread, with `ctx` the context it was opened with; `field` is a live
/// Redis string.
pub(super) unsafe fn hash_field(
    ctx: *mut raw::RedisModuleCtx,
    handle: *mut raw::RedisModuleKey,
    field: *mut raw::RedisModuleString,
) -> Result<Option<Vec<u8>>, ()> {
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let api = unsafe { (raw::RedisModule_HashGet, raw::RedisModule_FreeString) };
    let (Some(get), Some(free)) = api else {
        return Err(());
    };
    let mut value: *mut raw::RedisModuleString = std::ptr::null_mut();
    // SAFETY: HashGet takes (field, &value) pairs ended by a null pointer;
    // `field` is live and `value` a local the server fills (or leaves
    // null). The string it returns is owned here: copied, then freed with
    // the context it was created for.
    unsafe {
        let flags = raw::REDISMODULE_HASH_NONE as i32;
        let status = get(
            handle,
            flags,
            field,
            &raw mut value,
            std::ptr::null_mut::<c_void>(),
        );
        if status != raw::REDISMODULE_OK as i32 {
            return Err(());
        }
        if value.is_null() {
            return Ok(None);
        }
        let copied = bytes_of(value).map(<[u8]>::to_vec);
        free(ctx, value);
        copied.map(Some).ok_or(())
    }
}

/// `ScanKey` callback gathering every field and value of a hash, or every
/// member of a set (its value empty).
unsafe extern "C" fn on_field(
    _key: *mut raw::RedisModuleKey,
    field: *mut raw::RedisModuleString,
    value: *mut raw::RedisModuleString,
    privdata: *mut c_void,
) {
    // SAFETY: `privdata` is the `Option<Vec<..>>` hash_fields passed, alive
    // for the whole ScanKey call and not aliased meanwhile; field and value
    // are live strings for the duration of the callback.
    unsafe {
        let out = &mut *privdata.cast::<Option<Vec<(Vec<u8>, Vec<u8>)>>>();
        let pair = match (bytes_of(field), value.is_null()) {
            (Some(f), false) => bytes_of(value).map(|v| (f.to_vec(), v.to_vec())),
            (Some(member), true) => Some((member.to_vec(), Vec::new())),
            (None, _) => None,
        };
        match (out.as_mut(), pair) {
            (Some(fields), Some(pair)) => fields.push(pair),
            _ => *out = None,
        }
    }
}

/// Every field and value of the hash `handle` holds, or every member of
/// the set (its value empty); `None` on a server without the calls or a
/// read that did not complete.
///
/// # Safety
/// As [`super::collections::dump_payload`], for a hash or a set.
pub(super) unsafe fn scanned_elements(
    handle: *mut raw::RedisModuleKey,
) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let api = unsafe {
        (
            raw::RedisModule_ScanCursorCreate,
            raw::RedisModule_ScanKey,
            raw::RedisModule_ScanCursorDestroy,
            raw::RedisModule_ValueLength,
        )
    };
    let (Some(create), Some(scan), Some(destroy), Some(len)) = api else {
        return None;
    };
    // SAFETY: `handle` is live (the caller's contract); the cursor is
    // created, used only here and destroyed; `out` outlives every ScanKey
    // call that hands it to the callback.
    unsafe {
        let mut out: Option<Vec<(Vec<u8>, Vec<u8>)>> = Some(Vec::with_capacity(len(handle)));
        let cursor = create();
        if cursor.is_null() {
            return None;
        }
        let privdata = (&raw mut out).cast::<c_void>();
        while scan(handle, cursor, Some(on_field), privdata) != 0 {}
        destroy(cursor);
        out.filter(|f| f.len() == len(handle))
    }
}

/// The score of `member` in the sorted set `handle` holds (`Ok(None)`: no
/// such member); `Err` on a server without the call.
///
/// # Safety
/// `handle` is a live, non-null sorted-set key opened for reading, on the
/// main thread; `member` is a live Redis string.
pub(super) unsafe fn zset_score(
    handle: *mut raw::RedisModuleKey,
    member: *mut raw::RedisModuleString,
) -> Result<Option<f64>, ()> {
    // SAFETY: the API table is filled by RedisModule_Init; reading a pointer.
    let Some(score_of) = (unsafe { raw::RedisModule_ZsetScore }) else {
        return Err(());
    };
    let mut score = 0f64;
    // SAFETY: the caller's contract; `score` is a local the server fills.
    let found = unsafe { score_of(handle, member, &raw mut score) } == raw::REDISMODULE_OK as i32;
    Ok(found.then_some(score))
}

/// Every member of the sorted set `handle` holds with its score; `None`
/// when the read did not complete.
///
/// # Safety
/// As [`super::collections::dump_payload`], for a sorted set.
pub(super) unsafe fn zset_members(handle: *mut raw::RedisModuleKey) -> Option<Vec<(Vec<u8>, f64)>> {
    let mut out = Vec::new();
    // SAFETY: the caller's contract.
    let complete = unsafe { each_scored(handle, |m, score| out.push((m.to_vec(), score))) };
    complete.then_some(out)
}

/// Every element of the list `handle` holds, head to tail; `None` on a
/// server without the calls or a read that did not complete.
///
/// # Safety
/// As [`super::collections::dump_payload`], for a list.
pub(super) unsafe fn list_values(handle: *mut raw::RedisModuleKey) -> Option<Vec<Vec<u8>>> {
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let (get, len) = unsafe { (raw::RedisModule_ListGet?, raw::RedisModule_ValueLength?) };
    // SAFETY: `handle` is a live list key (the caller's contract).
    let n = unsafe { len(handle) };
    let mut out = Vec::with_capacity(n);
    for index in 0..n {
        let index = std::os::raw::c_long::try_from(index).ok()?;
        // SAFETY: `handle` is a live list key; RM_ListGet keeps an
        // iterator on it (a sequential read is linear); the element it
        // returns is owned here, copied, then freed.
        unsafe {
            let element = get(handle, index);
            if element.is_null() {
                return None;
            }
            let copied = bytes_of(element).map(<[u8]>::to_vec);
            free(element);
            out.push(copied?);
        }
    }
    Some(out)
}
