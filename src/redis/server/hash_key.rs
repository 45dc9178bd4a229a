//! A hash key of the selected database read field by field through the
//! key API, without a trace (no command, no keyspace hit, no access time):
//! what the hash merges read of the server (`converge::merge::hashes`).

use redis_module::{raw, Context, RedisString};

use super::collections;
use super::keys::quiet_read_mode;
use crate::converge::merge::hashes::{Bytes, LocalHash};

/// Values of some fields, and the key's expiry.
pub type ValuesAndExpiry = (Vec<Option<Bytes>>, Option<u64>);

/// What a hash key holds.
pub struct HashKey<'a> {
    ctx: &'a Context,
    name: RedisString,
}

impl<'a> HashKey<'a> {
    /// The key `key` of the database selected on `ctx`.
    pub fn new(ctx: &'a Context, key: &[u8]) -> Self {
        Self {
            ctx,
            name: RedisString::create_from_slice(std::ptr::null_mut(), key),
        }
    }

    /// Runs `read` on the open key when it holds a hash; `None` when it is
    /// absent, holds another type, or the server lacks the calls.
    fn with_hash<T>(&self, read: impl FnOnce(*mut raw::RedisModuleKey) -> Option<T>) -> Option<T> {
        // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
        let api = unsafe {
            (
                raw::RedisModule_OpenKey,
                raw::RedisModule_KeyType,
                raw::RedisModule_CloseKey,
            )
        };
        let (Some(open), Some(kind_of), Some(close)) = api else {
            return None;
        };
        // SAFETY: main thread with a valid context; `name` is a live Redis
        // string; the handle is checked for null, used only by `read` and
        // closed here.
        unsafe {
            let handle = open(self.ctx.ctx, self.name.inner, quiet_read_mode());
            if handle.is_null() {
                return None;
            }
            let out = (kind_of(handle) == raw::REDISMODULE_KEYTYPE_HASH as i32)
                .then(|| read(handle))
                .flatten();
            close(handle);
            out
        }
    }

    /// The values of `fields` (`None` for one absent); `Err` when the key
    /// holds no hash or a read failed.
    pub fn values(&self, fields: &[Bytes]) -> Result<Vec<Option<Bytes>>, ()> {
        self.values_and_expiry(fields).map(|(values, _)| values)
    }

    /// [`Self::values`], and the key's absolute expiry in Unix ms.
    pub fn values_and_expiry(&self, fields: &[Bytes]) -> Result<ValuesAndExpiry, ()> {
        self.with_hash(|handle| {
            let values = fields
                .iter()
                .map(|f| {
                    let field = RedisString::create_from_slice(std::ptr::null_mut(), f);
                    // SAFETY: `handle` is a live hash opened on `ctx`, on
                    // the main thread; `field` is live for the call.
                    unsafe { collections::hash_field(self.ctx.ctx, handle, field.inner) }
                })
                .collect::<Result<Vec<_>, ()>>()
                .ok()?;
            // SAFETY: reading the API table's pointer, then calling it on
            // the live key `with_hash` opened.
            let at = unsafe { raw::RedisModule_GetAbsExpire.map(|get| get(handle)) };
            let expiry = at
                .and_then(|at| u64::try_from(at).ok())
                .filter(|&at| at > 0);
            Some((values, expiry))
        })
        .ok_or(())
    }

    /// Whether the hash may hold a field with a TTL (`db_field_ttls`:
    /// what its database says where the hash cannot be asked); false when
    /// the key holds no hash.
    pub fn may_hold_field_ttls(&self, db_field_ttls: bool) -> bool {
        self.with_hash(|handle| {
            // SAFETY: `handle` is a live hash key opened on the main thread.
            let may = unsafe { super::keys::may_hold_field_ttls(handle, db_field_ttls) };
            Some(may)
        })
        .unwrap_or(false)
    }

    /// Every field and value; `None` when the key holds no hash or the
    /// read did not complete.
    pub fn all(&self) -> Option<Vec<(Bytes, Bytes)>> {
        // SAFETY: `handle` is a live hash opened for reading on the main
        // thread, untouched by anything else meanwhile.
        self.with_hash(|handle| unsafe { collections::hash_fields(handle) })
    }
}

impl LocalHash for HashKey<'_> {
    fn field(&self, name: &[u8]) -> Option<Bytes> {
        self.values(&[name.to_vec()]).ok()?.pop().flatten()
    }

    fn fields(&self) -> Vec<(Bytes, Bytes)> {
        self.all().unwrap_or_default()
    }

    fn field_count(&self) -> usize {
        // SAFETY: reading the API table's pointer, then calling it on the
        // live hash `with_hash` opened.
        self.with_hash(|handle| unsafe { raw::RedisModule_ValueLength.map(|len| len(handle)) })
            .unwrap_or(0)
    }
}
