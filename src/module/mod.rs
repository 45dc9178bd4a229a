//! Redis wiring: load/unload, the `RDMASYNC.STATUS` and `RDMASYNC.DEBUG`
//! commands, event handlers.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{
    raw, redis_module, Context, RedisError, RedisResult, RedisString, RedisValue, Status,
};

use crate::capture::state::{main_state, try_main_state};
use crate::catchup::replication::Replication;
use crate::ops::status::{status_fields, Field};
use crate::redis::server::{self, ServerEvent};
use crate::{
    capture::flush, capture::hook, capture::persist, ops::config, ops::faults, runtime, shared,
};

mod settings;

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    // A panic in module code is caught; say so in Redis' own log.
    std::panic::set_hook(Box::new(|info| {
        redis_module::logging::log_warning(format!("rdmasync: internal error (caught): {info}"));
    }));
    let line = match prepare(ctx, args).and_then(|config| {
        // A fresh start: the first contact with the peer is a full sync
        // both ways, and no link yet (the link thread says when one is up).
        if let Some(mut st) = main_state().replication.get() {
            *st = Replication::new(config.backlog_ops);
            st.tombstone_limit = config.max_tombstones;
            crate::capture::increments::set_enabled(config.merge_counters);
            crate::capture::fields::set_enabled(config.merge_elements);
            crate::capture::hook::set_expired_bound(0);
            st.max_clock_offset_ms = config.max_clock_offset_ms;
        }
        runtime::start(config, server::server_info(ctx)).map_err(|e| e.report())
    }) {
        Ok(line) => line,
        Err(why) => {
            ctx.log_warning(&format!("rdmasync: refusing to load: {why}"));
            return Status::Err;
        }
    };
    // Subscriptions come last: Redis 7.0 keeps a failed module's callbacks
    // registered after unloading it, so nothing may fail after them.
    let subscribed = server::subscribe_server_events(ctx, on_server_event)
        .and_then(|()| server::subscribe_keyspace_events(ctx, hook::on_keyspace_event));
    if let Err(what) = subscribed {
        runtime::stop();
        ctx.log_warning(&format!(
            "rdmasync: refusing to load: cannot subscribe to {what} (needs Redis 7.0 or later)"
        ));
        return Status::Err;
    }
    // Last as well (Redis 7.0 keeps a failed module's filters too); without
    // it only the changes that raise no keyspace event stay local.
    if let Err(what) = server::register_command_filter(ctx, hook::on_command) {
        ctx.log_warning(&format!(
            "rdmasync: cannot register the {what}: consumer-group reads and acks, \
             PFCOUNT's cache, PFDEBUG and FUNCTION changes stay on this node"
        ));
    }
    log_field_ttls(ctx);
    // Libraries already loaded (MODULE LOAD at run time) get a version.
    if let Some(mut dirty) = main_state().dirty.get() {
        dirty.mark_functions();
    }
    ctx.log_notice(&line);
    // CONFIG GET shows what is in effect, defaults and derived node id included.
    shared::with_shared(|s| settings::show_effective(s.config.effective(s.node_id)));
    Status::Ok
}

/// Probes how hash fields expire here and says what follows for hashes.
fn log_field_ttls(ctx: &Context) {
    match server::probe_field_ttls(ctx) {
        server::FieldTtls::Absent => {}
        server::FieldTtls::Visible => ctx.log_notice(
            "rdmasync: hash fields can expire on this server: a hash holding such \
         fields ships as the server's own DUMP, which carries their TTLs",
        ),
        server::FieldTtls::Unseen => ctx.log_notice(
            "rdmasync: hash fields can expire on this server and no module call says \
         which hash holds such fields: in a database whose INFO keyspace counts keys \
         with volatile items, hashes ship as the server's own DUMP",
        ),
    }
}

/// What the load needs before the threads start: the configuration, the
/// data type, INFO, command docs, the role. Returns why the load is
/// refused otherwise.
fn prepare(ctx: &Context, args: &[RedisString]) -> std::result::Result<config::Config, String> {
    let args: Vec<String> = args.iter().map(|a| a.to_string_lossy()).collect();
    let config = settings::register(ctx, &args)
        .and_then(|merged| config::parse_args(&merged))
        .map_err(|e| e.report())?;
    if config.persist_versions && persist::VERSIONS_TYPE.create_data_type(ctx.ctx).is_err() {
        return Err("cannot register the data type that persists key versions \
             (persist-versions=no runs without it)"
            .into());
    }
    raw::register_info_function(ctx.ctx, Some(info_func));
    if !(server::set_command_docs(ctx, &STATUS_DOCS) && server::set_command_docs(ctx, &DEBUG_DOCS))
    {
        ctx.log_notice("rdmasync: COMMAND DOCS not set (RedisModule_SetCommandInfo refused)");
    }
    let apis = server::detect_newer_apis();
    ctx.log_notice(&format!(
        "rdmasync: server module API: post-notification jobs {}, key event {} (neither is needed: the hook only records keys)",
        if apis.post_notification_jobs { "yes" } else { "no (Redis 7.0)" },
        if apis.key_event { "yes" } else { "no (Redis 7.0)" },
    ));
    server::init_role(ctx);
    Ok(config)
}

fn deinit(ctx: &Context) -> Status {
    runtime::stop();
    ctx.log_notice("rdmasync: stopped; all threads joined");
    Status::Ok
}

fn on_server_event(ctx: &Context, event: ServerEvent) {
    match event {
        ServerEvent::BeforeSleep => {
            shared::with_shared(|s| {
                persist::write_due_snapshot(ctx, s);
                if server::becoming_replica() {
                    // Its clients' last changes ship now, none held back.
                    flush::flush_now(ctx, s);
                } else {
                    flush::flush(ctx, s);
                }
                flush::before_aof_write(s);
            });
            server::settle_role();
        }
        ServerEvent::AfterSleep => {
            shared::with_shared(|s| flush::ack_after_sleep(s));
        }
        ServerEvent::DatasetReplaced { own_files, aof } => {
            let discarded = hook::on_dataset_replaced();
            if let Some(mut st) = main_state().replication.get() {
                st.dataset_replaced(own_files);
                st.loading_aof = aof;
            }
            shared::with_shared(|s| s.dataset_replaced(discarded));
        }
        ServerEvent::SavingStarts => {
            // Changes still pending (held behind a resting key, or made in
            // this iteration) get their versions before the file records them.
            shared::with_shared(|s| flush::flush_before_save(ctx, s));
        }
        ServerEvent::ChildBorn => {
            shared::with_shared(|s| persist::on_child_born(ctx, s));
        }
        ServerEvent::ChildDied => persist::on_child_died(ctx),
        ServerEvent::LoadingEnded => {
            crate::receive::staging::remove_leftovers(ctx);
            persist::restore_rewrite_versions();
            shared::with_shared(|s| persist::date_unstamped_changes(ctx, s));
            // The loaded libraries are checked against their versions at
            // the next flush.
            crate::capture::libraries::changed_elsewhere();
            if let Some(mut dirty) = main_state().dirty.get() {
                dirty.mark_functions();
            }
        }
        ServerEvent::BecameMaster => {
            // Its data came from another master: merge both ways.
            if let Some(mut st) = main_state().replication.get() {
                st.merge_again();
            }
            // Its libraries too (the filter does not run on a replica).
            crate::capture::libraries::changed_elsewhere();
            if let Some(mut dirty) = main_state().dirty.get() {
                dirty.mark_functions();
            }
        }
        other => hook::on_flush_or_swap(other),
    }
}

const STATUS_DOCS: server::CommandDocs = server::CommandDocs {
    name: c"rdmasync.status",
    summary: c"Returns rdmasync's link state, transport and replication counters.",
    complexity: c"O(1)",
    since: c"0.1.0",
    arity: 1,
};

const DEBUG_DOCS: server::CommandDocs = server::CommandDocs {
    name: c"rdmasync.debug",
    summary: c"Fault injection for tests: FAIL-READS SET <key-prefix> makes reads of those keys fail; FAIL-READS CLEAR stops it; DROP-ACKS ON|OFF ignores the peer's acks; HOLD-SENDS ON|OFF keeps queued changes from the sender; HOLD-APPLY ON|OFF leaves the peer's batches and link events unapplied; FAIL-NEXT-POST fails the sender's next write; DROP-NEXT-BATCH makes the sender skip a batch; EXIT-AFTER-ACK exits once the next ack has left, before the AOF write; CLOCK-SKEW <ms> reads this node's wall clock that far off; EXPIRED-BOUND <n> records at most n expiries per event-loop iteration. Refused where DEBUG is.",
    complexity: c"O(1)",
    since: c"0.1.0",
    arity: -1,
};

/// `INFO rdmasync`: the status figures as `rdmasync_<name>:<value>` lines.
extern "C" fn info_func(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: i32) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Some(fields) = shared::with_shared(|s| {
            status_fields(
                &s.identity(),
                &s.stats,
                s.queue.waiting(),
                // A crash report can ask while the state is held: never wait.
                &try_main_state()
                    .and_then(|main| main.replication.try_get().map(|st| st.convergence()))
                    .unwrap_or_default(),
            )
        }) else {
            return;
        };
        raw::add_info_section(ctx, None);
        for (name, value) in fields {
            match value {
                Field::Int(i) => {
                    raw::add_info_field_long_long(ctx, name, i);
                }
                Field::Text(t) => {
                    let clean: String = t
                        .chars()
                        .map(|c| if c.is_control() { ' ' } else { c })
                        .collect();
                    raw::add_info_field_str(ctx, name, &clean);
                }
            }
        }
    }));
}

fn status_command(_ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    // A panic must not unwind into redis-server.
    catch_unwind(AssertUnwindSafe(|| status_reply(args.len()))).unwrap_or(Err(RedisError::Str(
        "ERR rdmasync internal error (see the log)",
    )))
}

fn status_reply(argc: usize) -> RedisResult {
    if argc != 1 {
        return Err(RedisError::WrongArity);
    }
    let fields = shared::with_shared(|s| {
        status_fields(
            &s.identity(),
            &s.stats,
            s.queue.waiting(),
            &main_state()
                .replication
                .get()
                .map(|st| st.convergence())
                .unwrap_or_default(),
        )
    })
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

fn debug_command(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    catch_unwind(AssertUnwindSafe(|| debug_reply(ctx, &args))).unwrap_or(Err(RedisError::Str(
        "ERR rdmasync internal error (see the log)",
    )))
}

fn debug_reply(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let words: Vec<&[u8]> = args.iter().skip(1).map(|a| a.as_slice()).collect();
    let request = faults::parse(&words).map_err(RedisError::Str)?;
    // Behind Redis's own DEBUG switch, fully open only ('local' would need
    // the caller's address checked, as Redis does for DEBUG).
    let allowed = match ctx.call("CONFIG", &["GET", "enable-debug-command"]) {
        Ok(RedisValue::Array(kv)) => {
            matches!(kv.get(1), Some(RedisValue::SimpleString(v) | RedisValue::BulkString(v)) if v == "yes")
        }
        _ => false,
    };
    if !allowed {
        return Err(RedisError::Str(
            "ERR RDMASYNC.DEBUG is refused: it needs enable-debug-command yes",
        ));
    }
    let state = main_state();
    if let faults::DebugRequest::Version(key) = &request {
        let db = server::selected_db(ctx);
        let Some(st) = state.replication.get() else {
            return Err(RedisError::Str("ERR rdmasync internal error (see the log)"));
        };
        let line = version_line(&st.versions, db, key)
            + &counter_line(&st.versions.counters, db, key)
            + &hash_line(&st.versions.hashes, db, key)
            + &format!(
                "; coverage {:?}; waiting acks {}; accepts coverage {}",
                st.coverage(),
                !st.own_bound.is_idle(),
                st.peer.accepts_coverage()
            );
        return Ok(RedisValue::BulkString(line));
    }
    let Some(mut faults) = state.faults.get() else {
        return Err(RedisError::Str("ERR rdmasync internal error (see the log)"));
    };
    let live = shared::with_shared(std::sync::Arc::clone);
    match (&request, &live) {
        (faults::DebugRequest::ClockSkew(ms), Some(s)) => s.clock.set_skew_ms(*ms),
        (faults::DebugRequest::ExpiredBound(n), _) => crate::capture::hook::set_expired_bound(*n),
        _ => {}
    }
    faults.apply(request, live.as_ref().map(|s| &s.sender_faults));
    Ok(RedisValue::SimpleStringStatic("OK"))
}

/// `RDMASYNC.DEBUG VERSION`'s answer: the key's version and the floor.
fn version_line(versions: &crate::converge::version::VersionStore, db: u32, key: &[u8]) -> String {
    use crate::converge::version::KeyVersion;
    let floor = versions.floor(db);
    let version = match versions.get(db, key) {
        Some(KeyVersion::Live(s)) => format!("live {} {}", s.clock, s.node),
        Some(KeyVersion::Deleted { stamp, .. }) => {
            format!("deleted {} {}", stamp.clock, stamp.node)
        }
        None => "none".to_owned(),
    };
    let ttl = match versions.ttls.get(db, key) {
        Some((s, at)) => format!("; ttl write {} {} expiry {at:?}", s.clock, s.node),
        None => String::new(),
    };
    format!("{version}{ttl}; floor {} {}", floor.clock, floor.node)
}

/// The counter state of `key` for `RDMASYNC.DEBUG VERSION`, if it holds
/// merge metadata: base, its `Seen`, increments, the bound.
fn counter_line(
    counters: &crate::converge::merge::counters::Counters,
    db: u32,
    key: &[u8],
) -> String {
    let bound: Vec<_> = counters.bound().iter().collect();
    match counters.get(db, key) {
        None => format!("; no counter state; bound {bound:?}"),
        Some(c) => {
            let b = c.base();
            format!(
                "; counter base {:?} at {} {} seen {:?}; increments {:?}; bound {bound:?}",
                b.value,
                b.stamp.clock,
                b.stamp.node,
                b.seen.iter().collect::<Vec<_>>(),
                c.increments()
                    .iter()
                    .map(|(s, d)| (s.clock, s.node, *d))
                    .collect::<Vec<_>>()
            )
        }
    }
}

/// What `RDMASYNC.DEBUG VERSION` says of a hash's merge metadata.
fn hash_line(hashes: &crate::converge::merge::hashes::Hashes, db: u32, key: &[u8]) -> String {
    let Some(held) = hashes.get(db, key) else {
        return "; no hash state".to_owned();
    };
    let (base, removed, expiry_of) = held.key_parts();
    format!(
        "; hash base {:?} removed {:?} expiry of {:?}; {} fields with metadata",
        base.map(|s| (s.clock, s.node)),
        removed.iter().collect::<Vec<_>>(),
        expiry_of.map(|s| (s.clock, s.node)),
        held.elements().count()
    )
}

redis_module! {
    name: "rdmasync",
    version: 1,
    // Redis's allocator, every alignment honoured (`redis::alloc`).
    allocator: (
        crate::redis::alloc::Aligned<redis_module::alloc::RedisAlloc>,
        crate::redis::alloc::Aligned(redis_module::alloc::RedisAlloc)
    ),
    data_types: [],
    init: init,
    deinit: deinit,
    commands: [
        // admin: the status exposes topology and internals; a user needs
        // +rdmasync.status or +@admin to read it.
        ["rdmasync.status", status_command, "readonly fast admin allow-loading allow-stale", 0, 0, 0, ""],
        // Fault injection for tests; gated like DEBUG.
        ["rdmasync.debug", debug_command, "admin", 0, 0, 0, ""],
        // Internal: the stamps of this node's changes, in its AOF and its
        // replication stream; refused from clients.
        ["rdmasync.stamps", persist::stamps_command, "write", 0, 0, 0, ""],
    ],
}
