//! A hash, set, sorted set or list of the selected database read element
//! by element through the key API, without a trace (no command, no
//! keyspace hit, no access time): what the element merges read of the
//! server (`converge::merge::hashes`). A list is one field,
//! [`lists::REST`], holding every element (`converge::merge::lists` reads
//! its rest and runs from it). A set's membership is the one read with no
//! key API on the servers supported (Redis 7.0-8, Valkey 8-9): it is a
//! `SISMEMBER` through `RM_Call`, on the apply path only.

use redis_module::{raw, CallOptionsBuilder, CallReply, CallResult, Context, RedisString};

use super::element_reads;
use super::keys::quiet_read_mode;
use crate::converge::merge::hashes::{score_bytes, Bytes, Kind, LocalHash};
use crate::converge::merge::lists;

/// Values of some elements, and the key's expiry.
pub type ValuesAndExpiry = (Vec<Option<Bytes>>, Option<u64>);

/// What a key of a merged type holds.
pub struct ElementKey<'a> {
    ctx: &'a Context,
    key: &'a [u8],
    name: RedisString,
}

/// The merged type of a `REDISMODULE_KEYTYPE_*`.
pub fn kind_of_type(key_type: i32) -> Option<Kind> {
    match key_type as isize {
        raw::REDISMODULE_KEYTYPE_HASH => Some(Kind::Hash),
        raw::REDISMODULE_KEYTYPE_SET => Some(Kind::Set),
        raw::REDISMODULE_KEYTYPE_ZSET => Some(Kind::SortedSet),
        raw::REDISMODULE_KEYTYPE_LIST => Some(Kind::List),
        _ => None,
    }
}

impl<'a> ElementKey<'a> {
    /// The key `key` of the database selected on `ctx`.
    pub fn new(ctx: &'a Context, key: &'a [u8]) -> Self {
        Self {
            ctx,
            key,
            name: RedisString::create_from_slice(std::ptr::null_mut(), key),
        }
    }

    /// Runs `read` on the open key with its merged type; `None` when it is
    /// absent, holds another type, or the server lacks the calls.
    fn with_open<T>(
        &self,
        read: impl FnOnce(*mut raw::RedisModuleKey, Kind) -> Option<T>,
    ) -> Option<T> {
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
            let out = kind_of_type(kind_of(handle)).and_then(|kind| read(handle, kind));
            close(handle);
            out
        }
    }

    /// The key's merged type; `None` when absent or of another type.
    pub fn kind(&self) -> Option<Kind> {
        self.with_open(|_, kind| Some(kind))
    }

    /// The values of `names` in a key of `kind` (`None` for one absent),
    /// and the key's absolute expiry in Unix ms; `Err` when the key holds
    /// another type or a read failed. A set's members and a list's
    /// elements are not read (each value `None`): their changes say what
    /// they left.
    pub fn values_and_expiry(&self, kind: Kind, names: &[Bytes]) -> Result<ValuesAndExpiry, ()> {
        // SAFETY: `with_open` hands its reader a live key of `held`, opened
        // on `ctx` on the main thread.
        let read =
            |handle, held| (held == kind).then(|| unsafe { self.read(handle, kind, names) })?;
        self.with_open(read).ok_or(())
    }

    /// The key's merged type, the values of `names` in it and its expiry
    /// (as [`ElementKey::values_and_expiry`]), with one open of the key;
    /// `None` when it is absent, holds another type, or a read failed.
    pub fn kind_values_and_expiry(&self, names: &[Bytes]) -> Option<(Kind, ValuesAndExpiry)> {
        // SAFETY: `with_open` hands its reader a live key of `kind`, opened
        // on `ctx` on the main thread.
        self.with_open(|handle, kind| Some((kind, unsafe { self.read(handle, kind, names) }?)))
    }

    /// The values of `names` in the open key `handle` of `kind`, and its
    /// expiry (see [`ElementKey::values_and_expiry`]).
    ///
    /// # Safety
    /// `handle` is a live key of `kind` opened on `self.ctx`, on the main
    /// thread, as [`ElementKey::with_open`] hands it to its reader.
    unsafe fn read(
        &self,
        handle: *mut raw::RedisModuleKey,
        kind: Kind,
        names: &[Bytes],
    ) -> Option<ValuesAndExpiry> {
        let values = names
            .iter()
            .map(|n| {
                let name = RedisString::create_from_slice(std::ptr::null_mut(), n);
                // SAFETY: the caller's contract; `name` is live for the call.
                unsafe {
                    match kind {
                        Kind::Hash => element_reads::hash_field(self.ctx.ctx, handle, name.inner),
                        Kind::SortedSet => element_reads::zset_score(handle, name.inner)
                            .map(|s| s.map(score_bytes)),
                        Kind::Set | Kind::List => Ok(None),
                    }
                }
            })
            .collect::<Result<Vec<_>, ()>>()
            .ok()?;
        // SAFETY: reading the API table's pointer, then calling it on the
        // live key of the caller's contract.
        let at = unsafe { raw::RedisModule_GetAbsExpire.map(|get| get(handle)) };
        let expiry = at
            .and_then(|at| u64::try_from(at).ok())
            .filter(|&at| at > 0);
        Some((values, expiry))
    }

    /// Whether the key is a hash that may hold a field with a TTL
    /// (`db_field_ttls`: what its database says where the hash cannot be
    /// asked).
    pub fn may_hold_field_ttls(&self, db_field_ttls: bool) -> bool {
        self.with_open(|handle, kind| {
            // SAFETY: `handle` is a live hash key opened on the main thread.
            let may = || unsafe { super::keys::may_hold_field_ttls(handle, db_field_ttls) };
            Some(kind == Kind::Hash && may())
        })
        .unwrap_or(false)
    }

    /// The key's merged type and every element with its value; `None` when
    /// the key holds no merged type or the read did not complete.
    pub fn all(&self) -> Option<(Kind, Vec<(Bytes, Bytes)>)> {
        self.with_open(|handle, kind| {
            // SAFETY: `handle` is a live key of `kind` opened for reading on
            // the main thread, untouched by anything else meanwhile.
            let elements = unsafe {
                match kind {
                    Kind::Hash | Kind::Set => element_reads::scanned_elements(handle)?,
                    Kind::SortedSet => element_reads::zset_members(handle)?
                        .into_iter()
                        .map(|(m, s)| (m, score_bytes(s)))
                        .collect(),
                    Kind::List => {
                        let values = element_reads::list_values(handle)?;
                        vec![(lists::REST.to_vec(), lists::encode_values(&values))]
                    }
                }
            };
            Some((kind, elements))
        })
    }

    /// Whether the set holds `member` (`SISMEMBER`, the one command run).
    fn set_holds(&self, member: &[u8]) -> bool {
        let opts = CallOptionsBuilder::new().errors_as_replies().build();
        let args: [&[u8]; 2] = [self.key, member];
        matches!(
            self.ctx.call_ext::<_, CallResult>("SISMEMBER", &opts, &args[..]),
            Ok(CallReply::I64(n)) if n.to_i64() == 1
        )
    }
}

impl LocalHash for ElementKey<'_> {
    fn field(&self, name: &[u8]) -> Option<Bytes> {
        // A hash's field or a member's score with one open of the key.
        let mut other = None;
        let value = self.with_open(|handle, kind| match kind {
            Kind::Hash | Kind::SortedSet => {
                // SAFETY: `with_open` hands its reader a live key of `kind`,
                // opened on `ctx` on the main thread.
                let (mut values, _) = unsafe { self.read(handle, kind, &[name.to_vec()]) }?;
                values.pop().flatten()
            }
            Kind::Set | Kind::List => {
                other = Some(kind);
                None
            }
        });
        match other {
            Some(Kind::Set) => self.set_holds(name).then(Vec::new),
            Some(Kind::List) if name == lists::REST => {
                self.all().and_then(|(_, mut e)| e.pop()).map(|(_, v)| v)
            }
            _ => value,
        }
    }

    fn fields(&self) -> Vec<(Bytes, Bytes)> {
        self.all().map(|(_, e)| e).unwrap_or_default()
    }

    fn fields_of(&self, names: &[&[u8]]) -> Vec<Option<Bytes>> {
        let one_by_one = || names.iter().map(|n| self.field(n)).collect();
        match self.kind() {
            // Absent, or of another type: `field` finds none either.
            None => vec![None; names.len()],
            Some(Kind::Hash | Kind::SortedSet) => {
                let owned: Vec<Bytes> = names.iter().map(|n| n.to_vec()).collect();
                match self.kind_values_and_expiry(&owned) {
                    Some((_, (values, _))) if values.len() == names.len() => values,
                    _ => one_by_one(),
                }
            }
            Some(Kind::Set | Kind::List) => one_by_one(),
        }
    }

    fn field_count(&self) -> usize {
        // SAFETY: reading the API table's pointer, then calling it on the
        // live key `with_open` opened.
        self.with_open(|handle, _| unsafe { raw::RedisModule_ValueLength.map(|len| len(handle)) })
            .unwrap_or(0)
    }
}
