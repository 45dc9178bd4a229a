//! Lists, sets, sorted sets and hashes read through the key API (`ScanKey`,
//! the list and sorted-set iterators) straight into a DUMP payload: no
//! command runs, so nothing shows in MONITOR, SLOWLOG, LATENCY or INFO
//! commandstats, and `rdbcompression` never matters.

use std::os::raw::c_void;

use redis_module::raw;

use crate::redis::dump::{DumpWriter, Kind, Unsealed};

/// Bytes reserved per element before the first one is read.
const BYTES_PER_ELEMENT_HINT: usize = 24;

/// The DUMP payload of the collection `handle` holds (`kind`: its
/// `REDISMODULE_KEYTYPE_*`); `None` for other types, on a server without
/// the API, or when the elements read are not as many as the key holds.
///
/// # Safety
/// `handle` is a live, non-null key handle opened for reading, on the main
/// thread; nothing else touches the key until this returns.
pub(super) unsafe fn dump_payload(handle: *mut raw::RedisModuleKey, kind: i32) -> Option<Vec<u8>> {
    let kind = match kind as isize {
        raw::REDISMODULE_KEYTYPE_LIST => Kind::List,
        raw::REDISMODULE_KEYTYPE_SET => Kind::Set,
        raw::REDISMODULE_KEYTYPE_HASH => Kind::Hash,
        raw::REDISMODULE_KEYTYPE_ZSET => Kind::SortedSet,
        _ => return None,
    };
    // SAFETY: the API table is filled by RedisModule_Init; reading a pointer.
    let value_len = unsafe { raw::RedisModule_ValueLength }?;
    // SAFETY: `handle` is live (the caller's contract).
    let len = unsafe { value_len(handle) };
    let hint = len.saturating_mul(BYTES_PER_ELEMENT_HINT);
    // SAFETY: the caller's contract, passed on.
    let sealed = unsafe { fill(handle, len, DumpWriter::new(kind, len as u64, hint)) };
    match sealed {
        Ok(payload) => Some(payload),
        // SAFETY: as above; the key is unchanged since (same callback).
        Err(Unsealed::TooLongForListpack) => unsafe {
            fill(handle, len, DumpWriter::plain(kind, len as u64, hint)).ok()
        },
        Err(Unsealed::Miscounted) => None,
    }
}

/// Every element of the collection of `len` elements `handle` holds,
/// written into `writer` and sealed.
///
/// # Safety
/// As [`dump_payload`].
unsafe fn fill(
    handle: *mut raw::RedisModuleKey,
    len: usize,
    mut writer: DumpWriter,
) -> Result<Vec<u8>, Unsealed> {
    // SAFETY: the caller's contract, passed on.
    let complete = unsafe {
        match writer.kind() {
            Kind::List => read_list(handle, len, &mut writer),
            Kind::SortedSet => read_sorted_set(handle, &mut writer),
            Kind::Set | Kind::Hash => scan_key(handle, &mut writer),
        }
    };
    if complete {
        writer.finish()
    } else {
        Err(Unsealed::Miscounted)
    }
}

/// The bytes of a Redis string the server handed to a callback or returned.
///
/// # Safety
/// `s` is a live Redis string; the slice is used before it is freed.
pub(super) unsafe fn bytes_of<'a>(s: *const raw::RedisModuleString) -> Option<&'a [u8]> {
    // SAFETY: the API table is filled by RedisModule_Init; reading a pointer.
    let ptr_len = unsafe { raw::RedisModule_StringPtrLen }?;
    let mut len = 0usize;
    // SAFETY: `s` is live (the caller's contract); StringPtrLen returns
    // `len` bytes owned by it.
    unsafe {
        let at = ptr_len(s, &mut len);
        (!at.is_null()).then(|| std::slice::from_raw_parts(at.cast::<u8>(), len))
    }
}

/// Frees a string the list or sorted-set iterator returned.
///
/// # Safety
/// `s` is a string the caller owns and no longer uses.
pub(super) unsafe fn free(s: *mut raw::RedisModuleString) {
    // SAFETY: the API table is filled by RedisModule_Init; a null context
    // is allowed (the strings were not in automatic memory).
    unsafe {
        if let Some(free) = raw::RedisModule_FreeString {
            free(std::ptr::null_mut(), s);
        }
    }
}

/// Every element of a list, head to tail (`RM_ListGet` keeps an iterator
/// on the key: a sequential read is linear).
///
/// # Safety
/// As [`dump_payload`], for a list of `len` elements.
unsafe fn read_list(handle: *mut raw::RedisModuleKey, len: usize, out: &mut DumpWriter) -> bool {
    // SAFETY: the API table is filled by RedisModule_Init; reading a pointer.
    let Some(get) = (unsafe { raw::RedisModule_ListGet }) else {
        return false;
    };
    for index in 0..len {
        let Ok(index) = std::os::raw::c_long::try_from(index) else {
            return false;
        };
        // SAFETY: `handle` is a live list key; the element returned is
        // owned here, copied, then freed.
        unsafe {
            let element = get(handle, index);
            if element.is_null() {
                return false;
            }
            let copied = bytes_of(element).map(|b| out.element(b)).is_some();
            free(element);
            if !copied {
                return false;
            }
        }
    }
    true
}

/// Every member of a sorted set with its exact score (the score-range
/// iterator from -inf to +inf, both included).
///
/// # Safety
/// As [`dump_payload`], for a sorted set.
unsafe fn read_sorted_set(handle: *mut raw::RedisModuleKey, out: &mut DumpWriter) -> bool {
    // SAFETY: the caller's contract.
    unsafe { each_scored(handle, |member, score| out.scored(member, score)) }
}

/// Calls `visit` with every member of a sorted set and its exact score, in
/// score order; false when the read did not complete.
///
/// # Safety
/// As [`dump_payload`], for a sorted set.
pub(super) unsafe fn each_scored(
    handle: *mut raw::RedisModuleKey,
    mut visit: impl FnMut(&[u8], f64),
) -> bool {
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let api = unsafe {
        (
            raw::RedisModule_ZsetFirstInScoreRange,
            raw::RedisModule_ZsetRangeEndReached,
            raw::RedisModule_ZsetRangeCurrentElement,
            raw::RedisModule_ZsetRangeNext,
            raw::RedisModule_ZsetRangeStop,
        )
    };
    let (Some(first), Some(ended), Some(current), Some(next), Some(stop)) = api else {
        return false;
    };
    let (min, max) = (
        raw::REDISMODULE_NEGATIVE_INFINITE,
        raw::REDISMODULE_POSITIVE_INFINITE,
    );
    // SAFETY: `handle` is a live sorted-set key; each member returned is
    // owned here, copied, then freed; the iterator is stopped before return.
    unsafe {
        if first(handle, min, max, 0, 0) != raw::REDISMODULE_OK as i32 {
            return false;
        }
        let mut complete = true;
        while ended(handle) == 0 {
            let mut score = 0f64;
            let member = current(handle, &mut score);
            if member.is_null() {
                complete = false;
                break;
            }
            complete = bytes_of(member).map(|m| visit(m, score)).is_some();
            free(member);
            if !complete || next(handle) == 0 {
                break;
            }
        }
        stop(handle);
        complete
    }
}

/// The writer a `ScanKey` callback fills, and whether every string it was
/// handed could be read (a whole read here, a slice in `sliced`).
pub(super) struct ScanState<'a> {
    pub(super) out: &'a mut DumpWriter,
    pub(super) complete: bool,
}

/// `ScanKey` callback: one set member (`value` null) or hash field and value.
pub(super) unsafe extern "C" fn on_scanned(
    _key: *mut raw::RedisModuleKey,
    field: *mut raw::RedisModuleString,
    value: *mut raw::RedisModuleString,
    privdata: *mut c_void,
) {
    // SAFETY: `privdata` is the `ScanState` its caller passed, alive for the
    // whole ScanKey call, not aliased meanwhile; field and value are live
    // strings for the duration of the callback.
    unsafe {
        let state = &mut *privdata.cast::<ScanState>();
        let field = bytes_of(field);
        match (state.out.kind(), field) {
            (Kind::Set, Some(member)) => state.out.element(member),
            (Kind::Hash, Some(field)) if !value.is_null() => match bytes_of(value) {
                Some(value) => state.out.field(field, value),
                None => state.complete = false,
            },
            _ => state.complete = false,
        }
    }
}

/// Every member of a set or field of a hash. The scan runs to its end in
/// this one call on the main thread, so the table is never resized between
/// its steps and each element comes exactly once (the writer checks the
/// count all the same).
///
/// # Safety
/// As [`dump_payload`], for a set or a hash.
unsafe fn scan_key(handle: *mut raw::RedisModuleKey, out: &mut DumpWriter) -> bool {
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let api = unsafe {
        (
            raw::RedisModule_ScanCursorCreate,
            raw::RedisModule_ScanKey,
            raw::RedisModule_ScanCursorDestroy,
        )
    };
    let (Some(create), Some(scan), Some(destroy)) = api else {
        return false;
    };
    let mut state = ScanState {
        out,
        complete: true,
    };
    // SAFETY: the cursor is created, used only here and destroyed; `state`
    // outlives every ScanKey call that hands it to the callback.
    unsafe {
        let cursor = create();
        if cursor.is_null() {
            return false;
        }
        let privdata = (&raw mut state).cast::<c_void>();
        while scan(handle, cursor, Some(on_scanned), privdata) != 0 {}
        destroy(cursor);
    }
    state.complete
}
