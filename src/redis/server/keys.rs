//! Reads of one key through the key API (no command runs): its type, expiry
//! and access stamp, and the value of a long string or a collection.

use redis_module::{raw, Context};

use super::collections;

/// What a key holds, read through the key API (no command runs, the key's
/// access time is not touched).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyInfo {
    /// `REDISMODULE_KEYTYPE_*`; `EMPTY` when the key does not exist.
    pub kind: i32,
    /// Absolute expiry in Unix milliseconds.
    pub expiry_ms: Option<u64>,
    /// Its access stamp, to put back after a command read it.
    pub access: Access,
}

/// What eviction knows of a key's use: its idle time (LRU policies) or its
/// access frequency (LFU policies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Not read (absent key).
    Unknown,
    /// Idle for this many milliseconds.
    IdleMs(i64),
    /// LFU counter.
    Frequency(i64),
}

impl Access {
    /// Whether a command reading the key changes what eviction and `OBJECT
    /// IDLETIME/FREQ` see: always under LFU (the counter moves); under LRU
    /// only for a key idle a second or more (the LRU clock counts whole
    /// seconds, so a key just written reads as just used anyway).
    pub fn read_changes_it(self) -> bool {
        match self {
            Access::Unknown => false,
            Access::IdleMs(ms) => ms >= 1000,
            Access::Frequency(_) => true,
        }
    }
}

impl KeyInfo {
    /// Whether the key exists.
    pub fn exists(&self) -> bool {
        self.kind != raw::REDISMODULE_KEYTYPE_EMPTY as i32
    }

    /// Whether it holds a string.
    pub fn is_string(&self) -> bool {
        self.kind == raw::REDISMODULE_KEYTYPE_STRING as i32
    }

    /// Whether the key holds a stream.
    pub fn is_stream(&self) -> bool {
        self.kind == raw::REDISMODULE_KEYTYPE_STREAM as i32
    }
}

/// Type and absolute expiry of `key` in the selected database (an expired
/// key is reclaimed by the lookup, as a command would).
pub fn key_info(ctx: &Context, key: &[u8]) -> KeyInfo {
    key_info_of(
        ctx,
        &redis_module::RedisString::create_from_slice(std::ptr::null_mut(), key),
    )
}

/// Whether `key` holds a hash with no field left (a field's expiry just
/// took the last one; the server deletes the key next), read without a
/// trace.
pub fn is_empty_hash(ctx: &Context, key: &[u8]) -> bool {
    let name = redis_module::RedisString::create_from_slice(std::ptr::null_mut(), key);
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let api = unsafe {
        (
            raw::RedisModule_OpenKey,
            raw::RedisModule_KeyType,
            raw::RedisModule_ValueLength,
            raw::RedisModule_CloseKey,
        )
    };
    let (Some(open), Some(kind_of), Some(length), Some(close)) = api else {
        return false;
    };
    // SAFETY: main thread with a valid context; `name` is a live Redis
    // string; the handle is checked for null and closed here.
    unsafe {
        let handle = open(ctx.ctx, name.inner, quiet_read_mode());
        if handle.is_null() {
            return false;
        }
        let empty = kind_of(handle) == raw::REDISMODULE_KEYTYPE_HASH as i32 && length(handle) == 0;
        close(handle);
        empty
    }
}

/// [`key_info`] of a name already made into a Redis string (a caller that
/// also passes the name to a command makes it once).
pub fn key_info_of(ctx: &Context, name: &redis_module::RedisString) -> KeyInfo {
    open_key(ctx, name, None).0
}

/// Strings longer than this are always stored `raw` (an sds of their own):
/// `embstr` holds at most 44 bytes and `int` at most 20 digits, in Redis 7.0
/// and Valkey 8 alike. Only those are read in place (`RM_StringDMA` would
/// convert the other two encodings, rewriting the key); a margin is kept
/// for servers that embed somewhat longer values.
pub const READ_IN_PLACE_ABOVE: usize = 256;

/// A value read in place through the key API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InPlace {
    /// The bytes of a string longer than [`READ_IN_PLACE_ABOVE`].
    String(Vec<u8>),
    /// A list, set, sorted set or hash as a DUMP payload (`crate::redis::dump`),
    /// and how long reading it took.
    Dump(Vec<u8>, std::time::Duration),
}

/// [`key_info_of`], and the value where the key API reads it without a
/// command (one lookup, one copy, no reply to build and parse): a string
/// longer than [`READ_IN_PLACE_ABOVE`], or a list, set, sorted set or hash.
/// `None` for the rest: shorter strings (`RM_StringDMA` would re-encode
/// them), streams (their consumer groups have no reader), module types, or
/// a read that did not complete, and a hash that may hold fields with a
/// TTL (see [`db_may_hold_field_ttls`] for `db_field_ttls`).
pub fn key_info_and_value(
    ctx: &Context,
    name: &redis_module::RedisString,
    db_field_ttls: bool,
) -> (KeyInfo, Option<InPlace>) {
    open_key(ctx, name, Some(db_field_ttls))
}

/// Type and expiry of `name`, and (`read_value`) its value where read in
/// place; `read_value` says whether its database may hold hash fields with
/// a TTL.
fn open_key(
    ctx: &Context,
    name: &redis_module::RedisString,
    read_value: Option<bool>,
) -> (KeyInfo, Option<InPlace>) {
    let absent = KeyInfo {
        kind: raw::REDISMODULE_KEYTYPE_EMPTY as i32,
        expiry_ms: None,
        access: Access::Unknown,
    };
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let api = unsafe {
        (
            raw::RedisModule_OpenKey,
            raw::RedisModule_KeyType,
            raw::RedisModule_GetAbsExpire,
            raw::RedisModule_CloseKey,
        )
    };
    let (Some(open), Some(kind_of), Some(expire_of), Some(close)) = api else {
        return (absent, None);
    };
    // SAFETY: main thread with a valid context; `name` is a live Redis
    // string borrowed for the call; the key handle is checked for null
    // before use and closed here, after the value was copied out of it.
    unsafe {
        let handle = open(ctx.ctx, name.inner, quiet_read_mode());
        if handle.is_null() {
            return (absent, None);
        }
        let expiry = expire_of(handle);
        let info = KeyInfo {
            kind: kind_of(handle),
            expiry_ms: u64::try_from(expiry).ok().filter(|&at| at > 0),
            access: access_of(handle),
        };
        let value = match read_value {
            None => None,
            Some(_) if info.is_string() => long_string(handle).map(InPlace::String),
            // The module's payload carries no field TTLs: the server's own
            // DUMP does.
            Some(db_field_ttls)
                if info.kind == raw::REDISMODULE_KEYTYPE_HASH as i32
                    && may_hold_field_ttls(handle, db_field_ttls) =>
            {
                None
            }
            Some(_) => {
                let started = std::time::Instant::now();
                collections::dump_payload(handle, info.kind)
                    .map(|p| InPlace::Dump(p, started.elapsed()))
            }
        };
        close(handle);
        (info, value)
    }
}

/// How this server lets a hash's fields expire (HEXPIRE, HSETEX...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldTtls {
    /// It has no field TTLs (before Redis 7.4 and Valkey 9).
    Absent,
    /// `RedisModule_HashFieldMinExpire` says which hash holds some (Redis
    /// 8.0+).
    Visible,
    /// It has them, but no module call says which hash holds some (Redis
    /// 7.4, Valkey 9): a hash of a database INFO keyspace counts such keys
    /// in may.
    Unseen,
}

static FIELD_TTLS: std::sync::OnceLock<FieldTtls> = std::sync::OnceLock::new();

/// Finds out at load whether hash fields can expire here and how a hash
/// that holds such fields is told: a probe of the command (`COMMAND INFO
/// HEXPIRE`) and of the module call, not of a version.
pub fn probe_field_ttls(ctx: &Context) -> FieldTtls {
    let has_command = matches!(
        ctx.call("COMMAND", &["INFO", "HEXPIRE"]),
        Ok(redis_module::RedisValue::Array(ref info))
            if info.first().is_some_and(|c| matches!(c, redis_module::RedisValue::Array(_)))
    );
    // SAFETY: the API table is filled by RedisModule_Init; reading a pointer.
    let min_expire = unsafe { raw::RedisModule_HashFieldMinExpire }.is_some();
    let found = match (has_command, min_expire) {
        (false, _) => FieldTtls::Absent,
        (true, true) => FieldTtls::Visible,
        (true, false) => FieldTtls::Unseen,
    };
    *FIELD_TTLS.get_or_init(|| found)
}

/// Whether a hash of the selected database `db` may hold fields with a
/// TTL on a server where no module call says which hash does (Redis 7.4,
/// Valkey 9): its INFO keyspace counts such keys per database
/// (read through the module API, not a command). A count it does not show
/// says yes. Elsewhere no: each hash is asked, or no field expires.
pub fn db_may_hold_field_ttls(ctx: &Context, db: u32) -> bool {
    if !field_ttls_possible() {
        return false;
    }
    if FIELD_TTLS.get() != Some(&FieldTtls::Unseen) {
        return false;
    }
    let keyspace = ctx.server_info("keyspace");
    let Some(line) = keyspace.field(&format!("db{db}")) else {
        return false;
    };
    volatile_items_in(&line.to_string_lossy()).is_none_or(|n| n > 0)
}

/// Whether this server has hash field TTLs at all (probed at load).
pub fn field_ttls_possible() -> bool {
    FIELD_TTLS.get().is_some_and(|f| *f != FieldTtls::Absent)
}

/// The count of keys holding fields with a TTL in an INFO keyspace line:
/// `keys_with_volatile_items` (Valkey 9,
/// `keys=3,expires=0,avg_ttl=0,keys_with_volatile_items=1`) or `subexpiry`
/// (Redis 7.4, `keys=3,expires=0,avg_ttl=0,subexpiry=1`).
fn volatile_items_in(line: &str) -> Option<u64> {
    line.split(',')
        .find_map(|kv| {
            kv.strip_prefix("keys_with_volatile_items=")
                .or_else(|| kv.strip_prefix("subexpiry="))
        })
        .and_then(|n| n.trim().parse().ok())
}

/// Whether the hash `handle` may hold fields with a TTL (`db_field_ttls`:
/// what its database says where the hash cannot be asked).
///
/// # Safety
/// `handle` is a live, non-null key handle of a hash.
pub(super) unsafe fn may_hold_field_ttls(
    handle: *mut raw::RedisModuleKey,
    db_field_ttls: bool,
) -> bool {
    match FIELD_TTLS.get().copied().unwrap_or(FieldTtls::Absent) {
        FieldTtls::Absent => false,
        FieldTtls::Unseen => db_field_ttls,
        FieldTtls::Visible => {
            // SAFETY: the API table is filled by RedisModule_Init; the
            // pointer was present at the probe. `handle` is live (the
            // caller's contract).
            unsafe { raw::RedisModule_HashFieldMinExpire }
                .is_some_and(|min| unsafe { min(handle) } != raw::REDISMODULE_NO_EXPIRE as i64)
        }
    }
}

/// The bytes of the string `handle` holds if it is longer than
/// [`READ_IN_PLACE_ABOVE`].
///
/// # Safety
/// `handle` is a live, non-null key handle of a string, opened for reading.
unsafe fn long_string(handle: *mut raw::RedisModuleKey) -> Option<Vec<u8>> {
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let (value_len, dma) = unsafe { (raw::RedisModule_ValueLength?, raw::RedisModule_StringDMA?) };
    // SAFETY: `handle` is live (the caller's contract). StringDMA in read
    // mode on a raw string (longer than READ_IN_PLACE_ABOVE, see there)
    // returns `len` bytes that stay valid and unchanged until the key is
    // closed; they are copied before.
    unsafe {
        if value_len(handle) <= READ_IN_PLACE_ABOVE {
            return None;
        }
        let mut len = 0usize;
        let at = dma(handle, &mut len, raw::REDISMODULE_READ as i32);
        (!at.is_null()).then(|| std::slice::from_raw_parts(at.cast::<u8>(), len).to_vec())
    }
}

/// The string `key` holds (`None`: absent or another type): its length,
/// when it is longer than `from` bytes its bytes past `from` (read in
/// place, the bytes before `from` never copied: `converge::appends`), and
/// its absolute expiry.
pub fn string_tail(ctx: &Context, key: &[u8], from: Option<usize>) -> Option<StringTail> {
    let name = redis_module::RedisString::create_from_slice(std::ptr::null_mut(), key);
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let api = unsafe {
        (
            raw::RedisModule_OpenKey,
            raw::RedisModule_KeyType,
            raw::RedisModule_ValueLength,
            raw::RedisModule_StringDMA,
            raw::RedisModule_GetAbsExpire,
            raw::RedisModule_CloseKey,
        )
    };
    let (Some(open), Some(kind_of), Some(length), Some(dma), Some(expire_of), Some(close)) = api
    else {
        return None;
    };
    // SAFETY: main thread with a valid context; `name` is a live Redis
    // string; the handle is checked for null and closed here. StringDMA in
    // read mode is asked only of a string longer than READ_IN_PLACE_ABOVE
    // (a raw one: see there), whose bytes stay valid and unchanged until
    // the key is closed; the tail is copied before.
    unsafe {
        let handle = open(ctx.ctx, name.inner, quiet_read_mode());
        if handle.is_null() {
            return None;
        }
        let mut out = None;
        if kind_of(handle) == raw::REDISMODULE_KEYTYPE_STRING as i32 {
            let len = length(handle);
            let mut tail = Vec::new();
            if let Some(from) = from.filter(|&f| f < len && len > READ_IN_PLACE_ABOVE) {
                let mut held = 0usize;
                let at = dma(handle, &mut held, raw::REDISMODULE_READ as i32);
                if !at.is_null() && held == len {
                    tail =
                        std::slice::from_raw_parts(at.cast::<u8>().add(from), len - from).to_vec();
                }
            }
            let expiry_ms = u64::try_from(expire_of(handle)).ok().filter(|&at| at > 0);
            out = Some(StringTail {
                len,
                tail,
                expiry_ms,
            });
        }
        close(handle);
        out
    }
}

/// What [`string_tail`] read of a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StringTail {
    /// Its length.
    pub len: usize,
    /// Its bytes past the offset asked for (empty when none was).
    pub tail: Vec<u8>,
    /// Its absolute expiry, Unix ms.
    pub expiry_ms: Option<u64>,
}

/// The mode to open keys for reading without a trace: no access-time
/// update, and where the server has them (7.2+, Valkey) no keyspace
/// hit/miss counted and no key-miss event.
pub(super) fn quiet_read_mode() -> i32 {
    static MODE: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *MODE.get_or_init(|| {
        let base = (raw::REDISMODULE_READ | raw::REDISMODULE_OPEN_KEY_NOTOUCH) as i32;
        // SAFETY: the API table is filled by RedisModule_Init; the pointer
        // is null on servers before 7.2.
        let Some(modes) = (unsafe { raw::RedisModule_GetOpenKeyModesAll }) else {
            return base;
        };
        let quiet = (raw::REDISMODULE_OPEN_KEY_NOSTATS | raw::REDISMODULE_OPEN_KEY_NONOTIFY) as i32;
        // SAFETY: a plain query of the server's supported modes.
        let supported = unsafe { modes() };
        base | (supported & quiet)
    })
}

/// The access stamp of an open key (LRU idle time, or LFU counter under an
/// LFU policy, where the LRU read fails).
///
/// # Safety
/// `handle` is a live, non-null key handle.
unsafe fn access_of(handle: *mut raw::RedisModuleKey) -> Access {
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let (get_lru, get_lfu) = unsafe { (raw::RedisModule_GetLRU, raw::RedisModule_GetLFU) };
    let ok = raw::REDISMODULE_OK as i32;
    let mut value = 0i64;
    // SAFETY: `handle` is live (the caller's contract); `value` outlives the call.
    if get_lru.is_some_and(|f| unsafe { f(handle, &raw mut value) } == ok) {
        return Access::IdleMs(value);
    }
    // SAFETY: as above.
    if get_lfu.is_some_and(|f| unsafe { f(handle, &raw mut value) } == ok) {
        return Access::Frequency(value);
    }
    Access::Unknown
}

/// Puts back a key's access stamp that a command reading it (MGET, DUMP)
/// reset: eviction and `OBJECT IDLETIME/FREQ` see what clients did.
pub fn restore_access(ctx: &Context, name: &redis_module::RedisString, access: Access) {
    if !access.read_changes_it() {
        return;
    }
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let api = unsafe {
        (
            raw::RedisModule_OpenKey,
            raw::RedisModule_CloseKey,
            raw::RedisModule_SetLFU,
        )
    };
    let (Some(open), Some(close), Some(set_lfu)) = api else {
        return;
    };
    // SAFETY: main thread with a valid context; `name` is a live Redis
    // string; the handle is checked for null and closed here. Setting the
    // access stamp changes no data and signals nothing.
    unsafe {
        let handle = open(ctx.ctx, name.inner, quiet_read_mode());
        if handle.is_null() {
            return;
        }
        match access {
            Access::IdleMs(idle) => set_idle(handle, idle),
            Access::Frequency(freq) => {
                set_lfu(handle, freq);
            }
            Access::Unknown => {}
        };
        close(handle);
    }
}

/// Set once `SetLRU` was seen to scale its argument (see [`set_idle`]).
static LRU_SCALED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets the idle time of `handle` to `idle_ms`. Valkey 9.1's `SetLRU`
/// takes milliseconds but hands them on as seconds times a thousand (a key
/// came out idle for years): the first idle time set is read back, and if
/// it came out wrong while the scaled reading holds, later ones are passed
/// scaled, to the nearest 1,000 s (the finest that server can take).
///
/// # Safety
/// `handle` is a live, non-null key handle opened by the caller.
unsafe fn set_idle(handle: *mut raw::RedisModuleKey, idle_ms: i64) {
    use std::sync::atomic::Ordering;
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let (Some(set_lru), Some(get_lru)) = (unsafe { raw::RedisModule_SetLRU }, unsafe {
        raw::RedisModule_GetLRU
    }) else {
        return;
    };
    let set_and_read = |arg: i64| -> i64 {
        let mut back = -1;
        // SAFETY: `handle` is live (the caller's contract); `back` is a
        // local the call writes.
        unsafe {
            set_lru(handle, arg);
            get_lru(handle, &mut back);
        }
        back
    };
    if LRU_SCALED.load(Ordering::Relaxed) {
        set_and_read(scaled_idle(idle_ms));
        return;
    }
    let back = set_and_read(idle_ms);
    if !(CHECKED_IDLE_MS.contains(&idle_ms) && idle_read_back_wrong(idle_ms, back)) {
        return;
    }
    let scaled_back = set_and_read(scaled_idle(idle_ms));
    if (scaled_back - idle_ms).abs() <= 500_000 {
        LRU_SCALED.store(true, Ordering::Relaxed);
    } else {
        set_and_read(idle_ms);
    }
}

/// Idle times the check of [`set_idle`] trusts: long enough for a scaled
/// one to show, short of the LRU clock's wrap (about 194 days).
const CHECKED_IDLE_MS: std::ops::Range<i64> = 1_000..100_000_000;

/// An idle time in the unit a scaling `SetLRU` applies (to the nearest
/// 1,000 s).
fn scaled_idle(idle_ms: i64) -> i64 {
    (idle_ms + 500_000) / 1_000_000
}

/// Whether `idle_ms`, set, read back as `back_ms` beyond the clock's
/// one-second resolution.
fn idle_read_back_wrong(idle_ms: i64, back_ms: i64) -> bool {
    (back_ms - idle_ms).abs() > 2_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_of_keys_with_volatile_items_is_read_from_an_info_line() {
        let line = "keys=3,expires=0,avg_ttl=0,keys_with_volatile_items=2";
        assert_eq!(volatile_items_in(line), Some(2));
        assert_eq!(volatile_items_in("keys=3,expires=0,avg_ttl=0"), None);
        assert_eq!(
            volatile_items_in("keys=3,expires=0,avg_ttl=0,subexpiry=0"),
            Some(0)
        );
    }

    #[test]
    fn an_idle_time_read_back_wrong_is_told_from_rounding_and_scaled_to_the_nearest_1000_s() {
        assert!(idle_read_back_wrong(1_000_000, 1_554_321_408));
        assert!(!idle_read_back_wrong(1_000_000, 1_000_000));
        assert!(!idle_read_back_wrong(1_999, 1_000));
        assert_eq!(scaled_idle(1_000_000), 1);
        assert_eq!(scaled_idle(1_499_999), 1);
        assert_eq!(scaled_idle(1_500_000), 2);
        assert_eq!(scaled_idle(400_000), 0);
    }
}
