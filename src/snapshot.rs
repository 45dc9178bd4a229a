//! Reads of the local keyspace the module needs, through `RM_Call` on the
//! main thread: a key's DUMP payload and absolute expiry, whether it exists,
//! one SCAN page, the number of databases. Callers set the echo guard.

use std::time::{Duration, Instant};

use redis_module::{CallOptions, CallOptionsBuilder, CallReply, CallResult, Context, RedisString};

use crate::entry::{Encoding, Op};
use crate::server;

/// A key's value as shipped: a string's bytes or a DUMP payload, and its
/// absolute expiry.
pub struct Snapshot {
    /// The value, as `encoding` says.
    pub payload: Vec<u8>,
    /// Absolute expiry in Unix milliseconds.
    pub expiry_ms: Option<u64>,
    /// How `payload` holds the value.
    pub encoding: Encoding,
    /// How long the read took (DUMPs only; zero for strings).
    pub read_time: Duration,
}

impl Snapshot {
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

/// What a reader did to the server's `rdbcompression` setting.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Compression {
    /// Not looked at yet (no DUMP so far).
    Unchecked,
    /// Left as it was (already off, or could not be changed).
    Untouched,
    /// Switched off for this reader's DUMPs; switched back on when it drops.
    SwitchedOff,
}

/// Keyspace reads in the database currently selected on `ctx`.
///
/// DUMP compresses with LZF when `rdbcompression` is on, and RESTORE on the
/// peer decompresses: on a local or RDMA link that is CPU for nothing (11 %
/// of A's and 15 % of B's main thread in a profile of small hashes). So the first DUMP of a
/// reader switches the setting off and dropping the reader switches it back,
/// all on the main thread within one callback: no client, save or fork can
/// see the change.
pub struct Reader<'a> {
    ctx: &'a Context,
    opts: CallOptions,
    compression: std::cell::Cell<Compression>,
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        if self.compression.get() == Compression::SwitchedOff && !self.set_rdbcompression(b"yes") {
            redis_module::logging::log_warning(
                "rdmasync: could not switch rdbcompression back on after reading keys; \
                 CONFIG SET rdbcompression yes to restore it",
            );
        }
    }
}

impl<'a> Reader<'a> {
    /// A reader on `ctx` (errors come back as replies, never raised).
    pub fn new(ctx: &'a Context) -> Self {
        Self {
            ctx,
            opts: CallOptionsBuilder::new().errors_as_replies().build(),
            compression: std::cell::Cell::new(Compression::Unchecked),
        }
    }

    fn set_rdbcompression(&self, value: &[u8]) -> bool {
        let args: [&[u8]; 3] = [b"SET", b"rdbcompression", value];
        matches!(
            self.ctx
                .call_ext::<_, CallResult>("CONFIG", &self.opts, &args[..]),
            Ok(CallReply::String(_))
        )
    }

    /// Switches `rdbcompression` off before the first DUMP, if it is on.
    fn uncompressed_dumps(&self) {
        if self.compression.get() != Compression::Unchecked {
            return;
        }
        let args: [&[u8]; 2] = [b"GET", b"rdbcompression"];
        let on = match self
            .ctx
            .call_ext::<_, CallResult>("CONFIG", &self.opts, &args[..])
        {
            Ok(CallReply::Array(kv)) => {
                matches!(kv.get(1), Some(Ok(CallReply::String(v))) if v.as_bytes() == b"yes")
            }
            _ => false,
        };
        self.compression
            .set(if on && self.set_rdbcompression(b"no") {
                Compression::SwitchedOff
            } else {
                Compression::Untouched
            });
    }

    /// The context, to select databases.
    pub fn ctx(&self) -> &Context {
        self.ctx
    }

    /// One key's value and expiry: [`Reader::read_many`] of one key.
    pub fn read_one(&self, key: &[u8]) -> Read {
        self.read_many(&[key]).pop().unwrap_or(Read::Failed)
    }

    /// Every key in `keys`, in order: long strings read in place with the
    /// type lookup, the other strings with one MGET (one command for the lot
    /// instead of one each; one GET each if the MGET fails), the rest with
    /// DUMP. Each name is made into a Redis string once, for the type lookup
    /// and the command alike.
    pub fn read_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Read> {
        let names: Vec<RedisString> = keys
            .iter()
            .map(|k| RedisString::create_from_slice(std::ptr::null_mut(), k.as_ref()))
            .collect();
        let (infos, mut in_place): (Vec<server::KeyInfo>, Vec<Option<Vec<u8>>>) = names
            .iter()
            .map(|name| server::key_info_and_long_string(self.ctx, name))
            .unzip();
        let strings: Vec<&RedisString> = names
            .iter()
            .zip(infos.iter().zip(&in_place))
            .filter(|(_, (info, read))| info.is_string() && read.is_none())
            .map(|(name, _)| name)
            .collect();
        let mut values = match self.mget(&strings) {
            Some(values) => values,
            None => strings.iter().map(|k| self.bytes_of("GET", k)).collect(),
        }
        .into_iter();
        keys.iter()
            .zip(names.iter().zip(infos))
            .zip(in_place.iter_mut())
            .map(|((key, (name, info)), read)| {
                if !info.exists() {
                    return Read::Absent;
                }
                let read = read.take();
                if crate::faults::read_fails(key.as_ref()) {
                    // Its string value (if any) is still taken, in order.
                    if info.is_string() && read.is_none() {
                        values.next();
                    }
                    return Read::Failed;
                }
                let (payload, encoding, read_time) = if let Some(bytes) = read {
                    (bytes, Encoding::RawString, Duration::ZERO)
                } else if info.is_string() {
                    match values.next().flatten() {
                        Some(v) => (v, Encoding::RawString, Duration::ZERO),
                        None => return Read::Failed,
                    }
                } else {
                    self.uncompressed_dumps();
                    let started = Instant::now();
                    match self.bytes_of("DUMP", name) {
                        Some(p) => (p, Encoding::Dump, started.elapsed()),
                        None => return Read::Failed,
                    }
                };
                Read::Value(Snapshot {
                    payload,
                    expiry_ms: info.expiry_ms,
                    encoding,
                    read_time,
                })
            })
            .collect()
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

    /// `CONFIG GET databases` (16 when unreadable).
    pub fn databases(&self) -> u32 {
        let args: [&[u8]; 2] = [b"GET", b"databases"];
        match self
            .ctx
            .call_ext::<_, CallResult>("CONFIG", &self.opts, &args[..])
        {
            Ok(CallReply::Array(a)) => match a.get(1) {
                Some(Ok(CallReply::String(s))) => std::str::from_utf8(s.as_bytes())
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(16),
                _ => 16,
            },
            Ok(CallReply::Map(m)) => m
                .iter()
                .find_map(|kv| match kv {
                    (Ok(_), Ok(CallReply::String(s))) => {
                        std::str::from_utf8(s.as_bytes()).ok()?.parse().ok()
                    }
                    _ => None,
                })
                .unwrap_or(16),
            _ => 16,
        }
    }
}
