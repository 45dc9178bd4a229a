//! The floor of capturing writes through keyspace notifications, for
//! `scripts/bench.sh`: a Redis module that subscribes to the same event
//! classes as rdmasync's hook and does nothing in its callback. A server
//! with it loaded pays only what Redis charges a module per notified write
//! (a module context and the callback per key), so its overhead against a
//! plain server is the least that any capture through this API can cost.
//!
//! Built by `cargo build --release --example notify_floor`
//! (`target/release/examples/libnotify_floor.so`); loaded with `--loadmodule`.

use redis_module::{redis_module, Context, NotifyEvent};

/// Records nothing: the measured cost is Redis's dispatch alone.
fn on_keyspace_event(_ctx: &Context, _kind: NotifyEvent, _event: &str, _key: &[u8]) {}

redis_module! {
    name: "notifyfloor",
    version: 1,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [],
    commands: [],
    event_handlers: [
        [@GENERIC @STRING @LIST @SET @HASH @ZSET @EXPIRED @EVICTED @STREAM: on_keyspace_event],
    ]
}
