//! Reads of the local keyspace the module needs, on the main thread: a key's
//! value and absolute expiry, whether it exists, one SCAN page, the number
//! of databases. Values come through the key API where it reads them
//! without a command (`server::key_info_and_value`: long strings, lists,
//! sets, sorted sets, hashes); short strings with one MGET and streams and
//! module types with DUMP (`RM_Call`, docs/limitations.md says why).
//! Callers set the echo guard.

use std::time::{Duration, Instant};

use redis_module::{CallOptions, CallOptionsBuilder, CallReply, CallResult, Context, RedisString};

use crate::proto::entry::{Encoding, Op};
use crate::redis::server::{self, InPlace, Slice, SlicedRead};

/// A key's value as shipped: a string's bytes or a DUMP payload, and its
/// absolute expiry.
pub struct Snapshot {
    /// The value, as `encoding` says.
    pub payload: Vec<u8>,
    /// Absolute expiry in Unix milliseconds.
    pub expiry_ms: Option<u64>,
    /// How `payload` holds the value.
    pub encoding: Encoding,
    /// How long the read took (DUMP payloads only, taken by command or
    /// through the key API; zero for strings).
    pub read_time: Duration,
}

impl Snapshot {
    /// A value a [`SlicedRead`] read: a DUMP payload (`dump`) or a
    /// string's bytes.
    pub fn sliced(payload: Vec<u8>, dump: bool, expiry_ms: Option<u64>) -> Self {
        let encoding = match dump {
            true => Encoding::Dump,
            false => Encoding::RawString,
        };
        Self {
            payload,
            expiry_ms,
            encoding,
            read_time: Duration::ZERO,
        }
    }

    /// The change that ships this value for `key`.
    pub fn into_op(self, key: Vec<u8>) -> Op {
        Op::Value {
            key,
            payload: self.payload,
            expiry_ms: self.expiry_ms,
            encoding: self.encoding,
        }
    }
}

/// What reading one key found.
pub enum Read {
    /// The key's value.
    Value(Snapshot),
    /// The key does not exist (deleted, expired).
    Absent,
    /// The key exists but the read failed (an error reply): nothing may be
    /// concluded about it, least of all that it was deleted.
    Failed,
}

/// Keyspace reads in the database currently selected on `ctx`.
pub struct Reader<'a> {
    ctx: &'a Context,
    opts: CallOptions,
    /// Keys starting with it read as failed (`RDMASYNC.DEBUG FAIL-READS`).
    failing: Option<Vec<u8>>,
}

impl<'a> Reader<'a> {
    /// A reader on `ctx` (errors come back as replies, never raised).
    pub fn new(ctx: &'a Context) -> Self {
        Self {
            ctx,
            opts: CallOptionsBuilder::new().errors_as_replies().build(),
            failing: None,
        }
    }

    /// This reader, with the reads of keys starting with `prefix` failing
    /// as an error reply would.
    pub fn failing(mut self, prefix: Option<Vec<u8>>) -> Self {
        self.failing = prefix;
        self
    }

    /// The context, to select databases.
    pub fn ctx(&self) -> &Context {
        self.ctx
    }

    /// One key's value and expiry: [`Reader::read_many`] of one key.
    pub fn read_one(&self, key: &[u8]) -> Read {
        self.read_many(&[key]).pop().unwrap_or(Read::Failed)
    }

    /// Every key in `keys`, in order: long strings and collections read in
    /// place with the type lookup (`server::key_info_and_value`), the other
    /// strings with one MGET (one command for the lot instead of one each;
    /// one GET each if the MGET fails), streams and module types with DUMP.
    /// Each name is made into a Redis string once, for the lookup and the
    /// command alike.
    pub fn read_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Read> {
        let names: Vec<RedisString> = keys
            .iter()
            .map(|k| RedisString::create_from_slice(std::ptr::null_mut(), k.as_ref()))
            .collect();
        let db_field_ttls = server::db_may_hold_field_ttls(self.ctx, server::selected_db(self.ctx));
        let mut looked_up: Vec<(server::KeyInfo, Option<InPlace>)> = names
            .iter()
            .map(|name| server::key_info_and_value(self.ctx, name, db_field_ttls))
            .collect();
        let strings: Vec<&RedisString> = names
            .iter()
            .zip(&looked_up)
            .filter(|(_, (info, value))| info.is_string() && value.is_none())
            .map(|(name, _)| name)
            .collect();
        // Keys a command reads below whose access stamp the read would
        // change: it goes back after (none, and no allocation, for keys
        // just written).
        let restore: Vec<(usize, server::Access)> = looked_up
            .iter()
            .enumerate()
            .filter(|(_, (info, value))| {
                info.exists() && value.is_none() && info.access.read_changes_it()
            })
            .map(|(i, (info, _))| (i, info.access))
            .collect();
        let mut values = match self.mget(&strings) {
            Some(values) => values,
            None => strings.iter().map(|k| self.bytes_of("GET", k)).collect(),
        }
        .into_iter();
        let reads = keys
            .iter()
            .zip(names.iter().zip(looked_up.iter_mut()))
            .map(|(key, (name, (info, value)))| {
                self.finish_read(key.as_ref(), name, info, value.take(), &mut values)
            })
            .collect();
        for (i, access) in restore {
            server::restore_access(self.ctx, &names[i], access);
        }
        reads
    }

    /// The read of one key looked up by `read_many`: its value read in
    /// place, else its string from `mget_values` (in order), else its DUMP.
    fn finish_read(
        &self,
        key: &[u8],
        name: &RedisString,
        info: &server::KeyInfo,
        value: Option<InPlace>,
        mget_values: &mut impl Iterator<Item = Option<Vec<u8>>>,
    ) -> Read {
        if !info.exists() {
            return Read::Absent;
        }
        let by_mget = info.is_string() && value.is_none();
        if crate::ops::faults::read_fails(self.failing.as_deref(), key) {
            // Its string value (if any) is still taken, in order.
            if by_mget {
                mget_values.next();
            }
            return Read::Failed;
        }
        let read = match value {
            Some(InPlace::String(bytes)) => Some((bytes, Encoding::RawString, Duration::ZERO)),
            Some(InPlace::Dump(payload, took)) => Some((payload, Encoding::Dump, took)),
            None if by_mget => mget_values
                .next()
                .flatten()
                .map(|v| (v, Encoding::RawString, Duration::ZERO)),
            None => {
                let started = Instant::now();
                self.bytes_of("DUMP", name)
                    .map(|p| (p, Encoding::Dump, started.elapsed()))
            }
        };
        match read {
            Some((payload, encoding, read_time)) => Read::Value(Snapshot {
                payload,
                expiry_ms: info.expiry_ms,
                encoding,
                read_time,
            }),
            None => Read::Failed,
        }
    }

    /// `MGET keys`: one entry per key, `None` for a key that holds no
    /// string; `None` as a whole when the reply is not what MGET returns
    /// (an error, e.g. keys of several slots in cluster mode).
    fn mget(&self, keys: &[&RedisString]) -> Option<Vec<Option<Vec<u8>>>> {
        if keys.is_empty() {
            return Some(Vec::new());
        }
        let Ok(CallReply::Array(reply)) =
            self.ctx.call_ext::<_, CallResult>("MGET", &self.opts, keys)
        else {
            return None;
        };
        Some(
            (0..keys.len())
                .map(|i| match reply.get(i) {
                    Some(Ok(CallReply::String(s))) => Some(s.as_bytes().to_vec()),
                    _ => None,
                })
                .collect(),
        )
    }

    /// The bulk string `command key` returns (GET, DUMP); `None` for
    /// anything else (nil, an error).
    fn bytes_of(&self, command: &str, key: &RedisString) -> Option<Vec<u8>> {
        let args: [&RedisString; 1] = [key];
        match self
            .ctx
            .call_ext::<_, CallResult>(command, &self.opts, &args[..])
        {
            Ok(CallReply::String(s)) => Some(s.as_bytes().to_vec()),
            _ => None,
        }
    }

    /// A read of `key` a slice at a time when its value is big (see
    /// [`SlicedRead`]); `None`: read it with `read_many`.
    pub fn start_sliced(&self, key: &[u8]) -> Option<SlicedRead> {
        if crate::ops::faults::read_fails(self.failing.as_deref(), key) {
            return None;
        }
        let name = RedisString::create_from_slice(std::ptr::null_mut(), key);
        let db_field_ttls = server::db_may_hold_field_ttls(self.ctx, server::selected_db(self.ctx));
        SlicedRead::start(self.ctx, &name, db_field_ttls)
    }

    /// The next slice of `key`'s read.
    pub fn read_slice(&self, read: &mut SlicedRead, key: &[u8]) -> Slice {
        let name = RedisString::create_from_slice(std::ptr::null_mut(), key);
        read.advance(self.ctx, &name)
    }

    /// Whether the key exists.
    pub fn exists(&self, key: &[u8]) -> bool {
        server::key_info(self.ctx, key).exists()
    }

    /// One `SCAN cursor COUNT count` page: the next cursor (0 at the end)
    /// and the keys; `None` when the reply is not what SCAN returns.
    pub fn scan(&self, cursor: u64, count: usize) -> Option<(u64, Vec<Vec<u8>>)> {
        let c = cursor.to_string();
        let n = count.to_string();
        let args: [&[u8]; 3] = [c.as_bytes(), b"COUNT", n.as_bytes()];
        let Ok(CallReply::Array(reply)) =
            self.ctx
                .call_ext::<_, CallResult>("SCAN", &self.opts, &args[..])
        else {
            return None;
        };
        let next = match reply.get(0) {
            Some(Ok(CallReply::String(s))) => {
                std::str::from_utf8(s.as_bytes()).ok()?.parse().ok()?
            }
            _ => return None,
        };
        let keys = match reply.get(1) {
            Some(Ok(CallReply::Array(keys))) => keys
                .iter()
                .filter_map(|k| match k {
                    Ok(CallReply::String(s)) => Some(s.as_bytes().to_vec()),
                    _ => None,
                })
                .collect(),
            _ => return None,
        };
        Some((next, keys))
    }

    /// Keys in every database (the selected one is kept).
    pub fn total_keys(&self) -> u64 {
        let original = server::selected_db(self.ctx);
        let mut n = 0;
        for db in 0..self.databases() {
            if server::select_db(self.ctx, db) {
                n += server::db_size(self.ctx);
            }
        }
        server::select_db(self.ctx, original);
        n
    }

    /// How many databases the server has (found without a command).
    pub fn databases(&self) -> u32 {
        server::database_count(self.ctx)
    }
}
