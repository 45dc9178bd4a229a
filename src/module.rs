//! Redis wiring: load/unload, the `RDMASYNC.STATUS` command, event handlers.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{
    redis_module, Context, NotifyEvent, RedisError, RedisResult, RedisString, RedisValue, Status,
};

use crate::server::{self, ServerEvent};
use crate::status::{status_fields, Field};
use crate::{capture, config, hook, runtime};

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    // A panic in module code is caught; say so in Redis' own log.
    std::panic::set_hook(Box::new(|info| {
        redis_module::logging::log_warning(format!("rdmasync: internal error (caught): {info}"));
    }));
    let args: Vec<String> = args.iter().map(|a| a.to_string_lossy()).collect();
    let config = match config::parse_args(&args) {
        Ok(c) => c,
        Err(e) => {
            ctx.log_warning(&format!("rdmasync: refusing to load: {e}"));
            return Status::Err;
        }
    };
    if let Err(event) = server::subscribe_server_events(ctx, on_server_event) {
        ctx.log_warning(&format!(
            "rdmasync: refusing to load: cannot subscribe to the {event} server event (needs Redis 7.0 or later)"
        ));
        return Status::Err;
    }
    match runtime::start(config) {
        Ok(line) => {
            ctx.log_notice(&line);
            Status::Ok
        }
        Err(e) => {
            ctx.log_warning(&format!("rdmasync: refusing to load: {e}"));
            Status::Err
        }
    }
}

fn deinit(ctx: &Context) -> Status {
    runtime::stop();
    ctx.log_notice("rdmasync: stopped; all threads joined");
    Status::Ok
}

fn on_server_event(ctx: &Context, event: ServerEvent) {
    match event {
        ServerEvent::BeforeSleep => {
            runtime::with_shared(|s| capture::flush(ctx, s));
        }
        other => hook::on_flush_or_swap(other),
    }
}

fn on_keyspace_event(ctx: &Context, kind: NotifyEvent, event: &str, key: &[u8]) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        hook::on_keyspace_event(ctx, kind, event, key)
    }));
}

fn status_command(_ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if args.len() != 1 {
        return Err(RedisError::WrongArity);
    }
    let fields = runtime::with_shared(|s| status_fields(&s.identity(), &s.stats, s.queue.len()))
        .ok_or(RedisError::Str("ERR rdmasync is not running"))?;
    let map: BTreeMap<_, _> = fields
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                Field::Int(i) => RedisValue::Integer(i),
                Field::Text(t) => RedisValue::BulkString(t),
            };
            (k.to_owned().into(), v)
        })
        .collect();
    Ok(RedisValue::OrderedMap(map))
}

redis_module! {
    name: "rdmasync",
    version: 1,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [],
    init: init,
    deinit: deinit,
    commands: [
        ["rdmasync.status", status_command, "readonly fast", 0, 0, 0, ""],
    ],
    event_handlers: [
        [@GENERIC @STRING @LIST @SET @HASH @ZSET @EXPIRED @EVICTED @STREAM: on_keyspace_event],
    ],
}
