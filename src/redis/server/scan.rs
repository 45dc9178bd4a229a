//! A walk over the key names of a database through the key API
//! (`RM_Scan`): no SCAN command runs, so a full sync leaves nothing in
//! MONITOR, SLOWLOG or INFO commandstats.

use std::os::raw::c_void;
use std::ptr::NonNull;

use redis_module::{raw, Context};

/// A scan of the keys of the database selected on the context it is
/// given, with the same guarantee as SCAN: every key present for the whole
/// walk is returned at least once, whatever runs between pages.
pub struct KeyScan {
    cursor: NonNull<raw::RedisModuleScanCursor>,
    done: bool,
}

// SAFETY: the cursor is a heap value of the server's (a position and a
// flag) with no tie to a thread; it is only stepped with `RM_Scan` on the
// main thread (`next_page` takes the main thread's context) and freed with
// `RM_ScanCursorDestroy`, which only frees memory.
unsafe impl Send for KeyScan {}

impl std::fmt::Debug for KeyScan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyScan").field("done", &self.done).finish()
    }
}

impl Drop for KeyScan {
    fn drop(&mut self) {
        // SAFETY: the cursor came from RM_ScanCursorCreate and is freed once.
        unsafe {
            if let Some(destroy) = raw::RedisModule_ScanCursorDestroy {
                destroy(self.cursor.as_ptr());
            }
        }
    }
}

/// `RM_Scan` callback: copies one key name into the page.
unsafe extern "C" fn on_key(
    _ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    _key: *mut raw::RedisModuleKey,
    privdata: *mut c_void,
) {
    // SAFETY: `privdata` is the page `next_page` passed, alive and not
    // aliased for the whole RM_Scan call; `name` is live for the callback.
    unsafe {
        let page = &mut *privdata.cast::<Vec<Vec<u8>>>();
        let Some(ptr_len) = raw::RedisModule_StringPtrLen else {
            return;
        };
        let mut len = 0usize;
        let at = ptr_len(name, &mut len);
        if !at.is_null() {
            page.push(std::slice::from_raw_parts(at.cast::<u8>(), len).to_vec());
        }
    }
}

impl KeyScan {
    /// A scan from the start; `None` on a server without the API.
    pub fn new() -> Option<Self> {
        // SAFETY: the API table is filled by RedisModule_Init; a present
        // RM_ScanCursorCreate returns a fresh cursor (checked for null).
        unsafe {
            let create = raw::RedisModule_ScanCursorCreate?;
            raw::RedisModule_Scan?;
            raw::RedisModule_ScanCursorDestroy?;
            Some(Self {
                cursor: NonNull::new(create())?,
                done: false,
            })
        }
    }

    /// Whether the walk has reached its end.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// About `count` more key names (more when a step's bucket holds more,
    /// fewer at the end) of the database selected on `ctx`.
    pub fn next_page(&mut self, ctx: &Context, count: usize) -> Vec<Vec<u8>> {
        let mut page: Vec<Vec<u8>> = Vec::with_capacity(count);
        // SAFETY: the API table is filled by RedisModule_Init (checked in
        // `new`); main thread with a valid context; `page` outlives every
        // RM_Scan call that hands it to the callback.
        unsafe {
            let Some(scan) = raw::RedisModule_Scan else {
                self.done = true;
                return page;
            };
            let privdata = (&raw mut page).cast::<c_void>();
            while !self.done && page.len() < count {
                self.done = scan(ctx.ctx, self.cursor.as_ptr(), Some(on_key), privdata) == 0;
            }
        }
        page
    }
}
