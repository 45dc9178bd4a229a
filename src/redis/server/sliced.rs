//! A big value read a slice at a time, one slice per call, with the key
//! opened anew for each (issue 26, point 3): a full sync reads a
//! 10,000,000-field hash or a 512 MiB string over many event-loop
//! iterations instead of holding the main thread for seconds. Hashes and
//! sets resume with a `ScanKey` cursor, lists at an index, sorted sets
//! after the last (score, member) read, strings at a byte offset.
//!
//! What runs between two slices may change the key. Each slice checks the
//! type and the element count it started with, the payload checks that as
//! many elements were written as declared, and the caller compares the
//! key's version; a value read across a change is never worse than stale:
//! the change ships by itself at a newer version, which wins over it.

use std::os::raw::c_void;
use std::ptr::NonNull;

use redis_module::{raw, Context};

use super::collections::{bytes_of, free, on_scanned, ScanState};
use super::keys::{may_hold_field_ttls, quiet_read_mode};
use crate::redis::dump::{DumpWriter, Kind};

/// Elements a slice reads (a few milliseconds of the main thread).
pub const SLICE_ELEMENTS: usize = 4096;
/// Bytes of a string a slice copies.
pub const SLICE_BYTES: usize = 4 << 20;
/// Bytes reserved for a collection's payload at its first slice (it grows
/// from there): about 24 bytes an element, at most this.
const MAX_PAYLOAD_RESERVE: usize = 64 << 20;
/// A sorted set whose slice would skip more members than this (members of
/// one score read by the slices before) is read whole instead: resuming
/// inside a long run of equal scores costs the run's length per slice.
const MAX_SKIP: usize = 4 * SLICE_ELEMENTS;

/// Where the next slice starts.
enum Position {
    /// A hash or set: the server's cursor.
    Cursor(NonNull<raw::RedisModuleScanCursor>),
    /// A list: the index of the next element.
    Index(usize),
    /// A sorted set: the last member read and its score.
    Scored(Option<(f64, Vec<u8>)>),
    /// A string: the offset of the next byte.
    Offset(usize),
}

/// What is being written.
enum Out {
    Payload(DumpWriter),
    Bytes(Vec<u8>),
}

/// A big value being read a slice at a time.
pub struct SlicedRead {
    /// `REDISMODULE_KEYTYPE_*` when it started.
    kind: i32,
    /// Elements (bytes of a string) when it started.
    len: usize,
    position: Position,
    out: Out,
    /// Whether room for the value was reserved (at the first slice: a
    /// read only started holds no memory).
    reserved: bool,
    done: bool,
}

// SAFETY: the cursor is a heap value of the server's (a position and a
// flag) with no tie to a thread; it is only stepped on the main thread
// (`advance` takes the main thread's context) and freed with
// `RM_ScanCursorDestroy`, which only frees memory.
unsafe impl Send for SlicedRead {}

impl std::fmt::Debug for SlicedRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlicedRead")
            .field("kind", &self.kind)
            .field("len", &self.len)
            .field("done", &self.done)
            .finish()
    }
}

impl Drop for SlicedRead {
    fn drop(&mut self) {
        if let Position::Cursor(cursor) = self.position {
            // SAFETY: the cursor came from RM_ScanCursorCreate and is freed once.
            unsafe {
                if let Some(destroy) = raw::RedisModule_ScanCursorDestroy {
                    destroy(cursor.as_ptr());
                }
            }
        }
    }
}

/// What one slice found.
#[derive(Debug)]
pub enum Slice {
    /// More slices to read.
    More,
    /// The whole value: a DUMP payload (`true`) or a string's bytes, and
    /// the key's absolute expiry.
    Done(Vec<u8>, bool, Option<u64>),
    /// The key changed type or size, or is gone: read it again.
    Changed,
    /// It cannot be read a slice at a time (a server without the calls, a
    /// run of equal scores too long to resume in): read it whole.
    Whole,
}

/// An open key, closed on drop.
struct OpenKey(NonNull<raw::RedisModuleKey>);

impl OpenKey {
    fn read(ctx: &Context, name: &redis_module::RedisString) -> Option<Self> {
        // SAFETY: the API table is filled by RedisModule_Init; main thread
        // with a valid context and a live name; a null handle is refused.
        unsafe {
            let open = raw::RedisModule_OpenKey?;
            NonNull::new(open(ctx.ctx, name.inner, quiet_read_mode())).map(OpenKey)
        }
    }

    fn handle(&self) -> *mut raw::RedisModuleKey {
        self.0.as_ptr()
    }

    /// Its type and length (elements, or bytes of a string).
    fn kind_and_len(&self) -> Option<(i32, usize)> {
        // SAFETY: the API table is filled by RedisModule_Init; the handle is live.
        unsafe {
            let (kind_of, len_of) = (raw::RedisModule_KeyType?, raw::RedisModule_ValueLength?);
            Some((kind_of(self.handle()), len_of(self.handle())))
        }
    }
}

impl Drop for OpenKey {
    fn drop(&mut self) {
        // SAFETY: the handle came from RM_OpenKey and is closed once.
        unsafe {
            if let Some(close) = raw::RedisModule_CloseKey {
                close(self.handle());
            }
        }
    }
}

impl SlicedRead {
    /// A read of `name` (in the database selected on `ctx`) a slice at a
    /// time, when its value is big: a string of more than
    /// [`SLICE_BYTES`], a collection of more than [`SLICE_ELEMENTS`] (not
    /// a hash that may hold field TTLs: only the server's DUMP carries
    /// them). `None`: read it whole.
    pub fn start(
        ctx: &Context,
        name: &redis_module::RedisString,
        db_field_ttls: bool,
    ) -> Option<Self> {
        let key = OpenKey::read(ctx, name)?;
        let (kind, len) = key.kind_and_len()?;
        // SAFETY: the handle is live (it is closed when `key` drops).
        let field_ttls = unsafe { may_hold_field_ttls(key.handle(), db_field_ttls) };
        let (position, out) = match kind as isize {
            raw::REDISMODULE_KEYTYPE_STRING if len > SLICE_BYTES => {
                (Position::Offset(0), Out::Bytes(Vec::new()))
            }
            _ if len <= SLICE_ELEMENTS => return None,
            raw::REDISMODULE_KEYTYPE_LIST => (Position::Index(0), payload(Kind::List, len)),
            raw::REDISMODULE_KEYTYPE_ZSET => {
                (Position::Scored(None), payload(Kind::SortedSet, len))
            }
            raw::REDISMODULE_KEYTYPE_SET => (cursor()?, payload(Kind::Set, len)),
            raw::REDISMODULE_KEYTYPE_HASH if !field_ttls => (cursor()?, payload(Kind::Hash, len)),
            _ => return None,
        };
        Some(Self {
            kind,
            len,
            position,
            out,
            reserved: false,
            done: false,
        })
    }

    /// Reads the next slice of `name` (in the database selected on `ctx`).
    pub fn advance(&mut self, ctx: &Context, name: &redis_module::RedisString) -> Slice {
        let Some(key) = OpenKey::read(ctx, name) else {
            return Slice::Changed;
        };
        if key.kind_and_len() != Some((self.kind, self.len)) {
            return Slice::Changed;
        }
        if !self.reserved {
            self.reserved = true;
            match &mut self.out {
                Out::Bytes(bytes) => bytes.reserve_exact(self.len),
                Out::Payload(w) => w.reserve(self.len.saturating_mul(24).min(MAX_PAYLOAD_RESERVE)),
            }
        }
        let handle = key.handle();
        // SAFETY: `handle` is live, of the type the position was made for,
        // opened for reading on the main thread, and nothing else runs
        // until the slice returns.
        let read = unsafe {
            match (&mut self.position, &mut self.out) {
                (Position::Offset(at), Out::Bytes(bytes)) => string_slice(handle, at, bytes),
                (Position::Index(at), Out::Payload(w)) => list_slice(handle, self.len, at, w),
                (Position::Scored(last), Out::Payload(w)) => scored_slice(handle, last, w),
                (Position::Cursor(c), Out::Payload(w)) => scan_slice(handle, *c, w),
                _ => Err(Slice::Whole),
            }
        };
        match read {
            Ok(true) => self.finish(handle),
            Ok(false) => Slice::More,
            Err(slice) => slice,
        }
    }

    /// The whole value, once every element was read.
    fn finish(&mut self, handle: *mut raw::RedisModuleKey) -> Slice {
        // SAFETY: the API table is filled by RedisModule_Init; `handle` is live.
        let expiry = unsafe { raw::RedisModule_GetAbsExpire.map(|at| at(handle)) };
        let expiry_ms = expiry
            .and_then(|at| u64::try_from(at).ok())
            .filter(|&at| at > 0);
        self.done = true;
        match std::mem::replace(&mut self.out, Out::Bytes(Vec::new())) {
            Out::Bytes(bytes) => Slice::Done(bytes, false, expiry_ms),
            Out::Payload(writer) => match writer.finish() {
                Ok(payload) => Slice::Done(payload, true, expiry_ms),
                // Elements seen twice or missed across a change.
                Err(_) => Slice::Changed,
            },
        }
    }
}

fn payload(kind: Kind, len: usize) -> Out {
    Out::Payload(DumpWriter::plain(kind, len as u64, 0))
}

fn cursor() -> Option<Position> {
    // SAFETY: the API table is filled by RedisModule_Init; a present
    // RM_ScanCursorCreate returns a fresh cursor (checked for null).
    unsafe {
        raw::RedisModule_ScanKey?;
        raw::RedisModule_ScanCursorDestroy?;
        let create = raw::RedisModule_ScanCursorCreate?;
        NonNull::new(create()).map(Position::Cursor)
    }
}

/// Up to [`SLICE_BYTES`] more bytes of a string; `Ok(true)` once all.
///
/// # Safety
/// `handle` is a live string key opened for reading.
unsafe fn string_slice(
    handle: *mut raw::RedisModuleKey,
    at: &mut usize,
    out: &mut Vec<u8>,
) -> Result<bool, Slice> {
    // SAFETY: the API table is filled by RedisModule_Init. StringDMA in
    // read mode returns `len` bytes that stay valid and unchanged until the
    // key is closed; the slice taken is copied before.
    unsafe {
        let dma = raw::RedisModule_StringDMA.ok_or(Slice::Whole)?;
        let mut len = 0usize;
        let bytes = dma(handle, &mut len, raw::REDISMODULE_READ as i32);
        if bytes.is_null() || *at > len {
            return Err(Slice::Changed);
        }
        let end = len.min(*at + SLICE_BYTES);
        let all = std::slice::from_raw_parts(bytes.cast::<u8>(), len);
        out.extend_from_slice(&all[*at..end]);
        *at = end;
        Ok(end == len)
    }
}

/// Up to [`SLICE_ELEMENTS`] more elements of a list of `len`.
///
/// # Safety
/// `handle` is a live list key opened for reading.
unsafe fn list_slice(
    handle: *mut raw::RedisModuleKey,
    len: usize,
    at: &mut usize,
    out: &mut DumpWriter,
) -> Result<bool, Slice> {
    // SAFETY: the API table is filled by RedisModule_Init; reading a pointer.
    let get = unsafe { raw::RedisModule_ListGet }.ok_or(Slice::Whole)?;
    let end = len.min(*at + SLICE_ELEMENTS);
    for index in *at..end {
        let index = std::os::raw::c_long::try_from(index).map_err(|_| Slice::Whole)?;
        // SAFETY: `handle` is a live list key; the element returned is
        // owned here, copied, then freed.
        unsafe {
            let element = get(handle, index);
            if element.is_null() {
                return Err(Slice::Changed);
            }
            let copied = bytes_of(element).map(|b| out.element(b)).is_some();
            free(element);
            if !copied {
                return Err(Slice::Changed);
            }
        }
    }
    *at = end;
    Ok(end == len)
}

/// About [`SLICE_ELEMENTS`] more fields of a hash or members of a set (a
/// `ScanKey` step reads one bucket of the table).
///
/// # Safety
/// `handle` is a live hash or set key opened for reading; `cursor` is the
/// cursor of this read.
unsafe fn scan_slice(
    handle: *mut raw::RedisModuleKey,
    cursor: NonNull<raw::RedisModuleScanCursor>,
    out: &mut DumpWriter,
) -> Result<bool, Slice> {
    // SAFETY: the API table is filled by RedisModule_Init; reading a pointer.
    let scan = unsafe { raw::RedisModule_ScanKey }.ok_or(Slice::Whole)?;
    let until = out.written() + SLICE_ELEMENTS as u64;
    let mut state = ScanState {
        out,
        complete: true,
    };
    let privdata = (&raw mut state).cast::<c_void>();
    let mut more = true;
    while more && state.out.written() < until {
        // SAFETY: `state` outlives the call that hands it to the callback;
        // the cursor is this read's own.
        more = unsafe { scan(handle, cursor.as_ptr(), Some(on_scanned), privdata) } != 0;
    }
    match state.complete {
        true => Ok(!more),
        false => Err(Slice::Changed),
    }
}

/// The sorted-set range calls, all present.
struct ZsetRange {
    first: unsafe extern "C" fn(*mut raw::RedisModuleKey, f64, f64, i32, i32) -> i32,
    ended: unsafe extern "C" fn(*mut raw::RedisModuleKey) -> i32,
    current:
        unsafe extern "C" fn(*mut raw::RedisModuleKey, *mut f64) -> *mut raw::RedisModuleString,
    next: unsafe extern "C" fn(*mut raw::RedisModuleKey) -> i32,
    stop: unsafe extern "C" fn(*mut raw::RedisModuleKey),
}

impl ZsetRange {
    fn get() -> Option<Self> {
        // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
        unsafe {
            Some(Self {
                first: raw::RedisModule_ZsetFirstInScoreRange?,
                ended: raw::RedisModule_ZsetRangeEndReached?,
                current: raw::RedisModule_ZsetRangeCurrentElement?,
                next: raw::RedisModule_ZsetRangeNext?,
                stop: raw::RedisModule_ZsetRangeStop?,
            })
        }
    }
}

/// About [`SLICE_ELEMENTS`] more members of a sorted set, in score order,
/// resuming after `last` (the members of its score up to it skipped).
///
/// # Safety
/// `handle` is a live sorted-set key opened for reading.
unsafe fn scored_slice(
    handle: *mut raw::RedisModuleKey,
    last: &mut Option<(f64, Vec<u8>)>,
    out: &mut DumpWriter,
) -> Result<bool, Slice> {
    let z = ZsetRange::get().ok_or(Slice::Whole)?;
    let min = last
        .as_ref()
        .map_or(raw::REDISMODULE_NEGATIVE_INFINITE, |(s, _)| *s);
    let until = out.written() + SLICE_ELEMENTS as u64;
    let mut skipped = 0usize;
    // SAFETY: `handle` is a live sorted-set key; each member returned is
    // owned here, copied, then freed; the iterator is stopped before return.
    unsafe {
        if (z.first)(handle, min, raw::REDISMODULE_POSITIVE_INFINITE, 0, 0)
            != raw::REDISMODULE_OK as i32
        {
            return Err(Slice::Changed);
        }
        let result = loop {
            if (z.ended)(handle) != 0 {
                break Ok(true);
            }
            let mut score = 0f64;
            let member = (z.current)(handle, &mut score);
            if member.is_null() {
                break Err(Slice::Changed);
            }
            let Some(bytes) = bytes_of(member) else {
                free(member);
                break Err(Slice::Changed);
            };
            let seen = last
                .as_ref()
                .is_some_and(|(s, m)| score == *s && bytes <= m.as_slice());
            if seen {
                skipped += 1;
            } else {
                out.scored(bytes, score);
                *last = Some((score, bytes.to_vec()));
            }
            free(member);
            if skipped > MAX_SKIP {
                break Err(Slice::Whole);
            }
            if out.written() >= until {
                break Ok(false);
            }
            if (z.next)(handle) == 0 {
                break Ok(true);
            }
        };
        (z.stop)(handle);
        result
    }
}
