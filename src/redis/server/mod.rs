//! The few Redis module API calls `redis-module` does not wrap safely:
//! database selection, event subscriptions, the event-loop fd watch and the
//! detached context the apply path uses.
//! Every `unsafe` block outside `transport/rdma/` lives in this folder.

mod build;
mod collections;
mod element_key;
mod element_reads;
mod element_write;
mod functions;
mod keys;
mod list_write;
mod scan;
mod set_string;
mod sliced;

pub use keys::{
    db_may_hold_field_ttls, field_ttls_possible, is_empty_hash, key_info, key_info_and_value,
    restore_access, string_tail, Access, InPlace, KeyInfo, StringTail,
};
// The module's load probes them (not built in unit tests).
pub use build::{add_elements, build_key, built_len, is_build_key, memory_to_spare, BUILD_SLOTS};
pub use element_key::{kind_of_type, ElementKey};
pub use element_write::write_elements;
pub use functions::{
    function_libraries, function_owner, functions_dump, libraries_count, libraries_held,
};
#[cfg(all(feature = "module", not(test)))]
pub use keys::{probe_field_ttls, FieldTtls};
pub use list_write::{pop_elements, push_elements, End};
pub use scan::KeyScan;
pub use set_string::{set_string, SetTail};
pub use sliced::{Slice, SlicedRead};

use std::ffi::CStr;
use std::os::raw::c_void;
use std::ptr;

use redis_module::{raw, Context};

/// Database the context has selected.
pub fn selected_db(ctx: &Context) -> u32 {
    let Some(get) = (unsafe {
        // SAFETY: the API table is filled by RedisModule_Init before any callback runs.
        raw::RedisModule_GetSelectedDb
    }) else {
        return 0;
    };
    // SAFETY: `ctx.ctx` is the live context Redis handed to this callback.
    let db = unsafe { get(ctx.ctx) };
    u32::try_from(db).unwrap_or(0)
}

/// Selects database `db` on the context; `false` if it does not exist.
pub fn select_db(ctx: &Context, db: u32) -> bool {
    let Ok(db) = i32::try_from(db) else {
        return false;
    };
    // SAFETY: the API table is filled by RedisModule_Init before any callback runs.
    let Some(select) = (unsafe { raw::RedisModule_SelectDb }) else {
        return false;
    };
    // SAFETY: `ctx.ctx` is a live context and Redis validates `db` itself.
    unsafe { select(ctx.ctx, db) == raw::REDISMODULE_OK as i32 }
}

/// What a server event tells the capture code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerEvent {
    /// `FLUSHDB` (`Some(db)`) or `FLUSHALL` (`None`) is about to run.
    FlushStarting(Option<u32>),
    /// `SWAPDB a b` ran.
    Swapped(u32, u32),
    /// The event loop is about to sleep.
    BeforeSleep,
    /// The event loop woke up (after the previous iteration's AOF write).
    AfterSleep,
    /// The dataset is being replaced wholesale (`DEBUG RELOAD`, a replica's
    /// full sync, AOF/RDB load): no per-key notifications will follow.
    DatasetReplaced {
        /// It comes from this node's own files, not a master.
        own_files: bool,
        /// From the AOF (a restart with `appendonly yes`, `DEBUG LOADAOF`).
        aof: bool,
    },
    /// A dataset load finished (AOF, RDB, or from a master).
    LoadingEnded,
    /// The server forked a child (this is the parent, right after the fork).
    ChildBorn,
    /// A child exited (after the server handled its result).
    ChildDied,
    /// This server stopped replicating from a master (`REPLICAOF NO ONE`).
    BecameMaster,
    /// The server process itself starts writing an RDB (SAVE, SHUTDOWN,
    /// DEBUG RELOAD, FLUSHALL with save points) or an AOF preamble.
    SavingStarts,
}

/// Handler the module installs for [`ServerEvent`]s.
pub type ServerEventHandler = fn(&Context, ServerEvent);

static HANDLER: std::sync::OnceLock<ServerEventHandler> = std::sync::OnceLock::new();

unsafe extern "C" fn on_server_event(
    ctx: *mut raw::RedisModuleCtx,
    eid: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    // SAFETY: Redis passes the data that goes with `eid` (see server_event).
    let Some(event) = (unsafe { server_event(eid.id, subevent, data) }) else {
        return;
    };
    if let Some(handler) = HANDLER.get() {
        let context = Context::new(ctx);
        // A panic must not unwind into redis-server.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&context, event)));
    }
}

/// The event the handler gets for server event `id`/`subevent`, if any
/// (role and loading flags are kept here either way).
///
/// # Safety
/// `data` is what Redis passes with that event.
unsafe fn server_event(id: u64, subevent: u64, data: *mut c_void) -> Option<ServerEvent> {
    match id {
        raw::REDISMODULE_EVENT_FLUSHDB if subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_START => {
            // SAFETY: for FLUSHDB events Redis passes a RedisModuleFlushInfo (7.0: version 1).
            let info = unsafe { &*(data as *const raw::RedisModuleFlushInfo) };
            Some(ServerEvent::FlushStarting(u32::try_from(info.dbnum).ok()))
        }
        raw::REDISMODULE_EVENT_SWAPDB => {
            // SAFETY: for SWAPDB events Redis passes a RedisModuleSwapDbInfo (version 1).
            let info = unsafe { &*(data as *const raw::RedisModuleSwapDbInfo) };
            let a = u32::try_from(info.dbnum_first).ok()?;
            let b = u32::try_from(info.dbnum_second).ok()?;
            Some(ServerEvent::Swapped(a, b))
        }
        raw::REDISMODULE_EVENT_EVENTLOOP
            if subevent == raw::REDISMODULE_SUBEVENT_EVENTLOOP_BEFORE_SLEEP =>
        {
            Some(ServerEvent::BeforeSleep)
        }
        raw::REDISMODULE_EVENT_EVENTLOOP
            if subevent == raw::REDISMODULE_SUBEVENT_EVENTLOOP_AFTER_SLEEP =>
        {
            Some(ServerEvent::AfterSleep)
        }
        raw::REDISMODULE_EVENT_LOADING => loading_event(subevent),
        // Only the saves made by the server process itself: RDB_START and
        // AOF_START fire in the forked child, where nothing may ship.
        raw::REDISMODULE_EVENT_PERSISTENCE
            if matches!(
                subevent,
                raw::REDISMODULE_SUBEVENT_PERSISTENCE_SYNC_RDB_START
                    | raw::REDISMODULE_SUBEVENT_PERSISTENCE_SYNC_AOF_START
            ) =>
        {
            Some(ServerEvent::SavingStarts)
        }
        raw::REDISMODULE_EVENT_REPLICA_CHANGE => {
            // Redis keeps a replication backlog from now on: it propagates.
            REPLICAS_SEEN.store(true, std::sync::atomic::Ordering::Relaxed);
            None
        }
        raw::REDISMODULE_EVENT_FORK_CHILD
            if subevent == raw::REDISMODULE_SUBEVENT_FORK_CHILD_BORN =>
        {
            Some(ServerEvent::ChildBorn)
        }
        raw::REDISMODULE_EVENT_FORK_CHILD
            if subevent == raw::REDISMODULE_SUBEVENT_FORK_CHILD_DIED =>
        {
            Some(ServerEvent::ChildDied)
        }
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED => role_event(subevent),
        _ => None,
    }
}

/// A load starts (the dataset is replaced; `true` unless from a master)
/// or ends; keeps whether one runs.
fn loading_event(subevent: u64) -> Option<ServerEvent> {
    let starting = matches!(
        subevent,
        raw::REDISMODULE_SUBEVENT_LOADING_RDB_START
            | raw::REDISMODULE_SUBEVENT_LOADING_AOF_START
            | raw::REDISMODULE_SUBEVENT_LOADING_REPL_START
    );
    LOADING.store(starting, std::sync::atomic::Ordering::Relaxed);
    LOADING_FROM_MASTER.store(
        subevent == raw::REDISMODULE_SUBEVENT_LOADING_REPL_START,
        std::sync::atomic::Ordering::Relaxed,
    );
    if subevent == raw::REDISMODULE_SUBEVENT_LOADING_ENDED {
        Some(ServerEvent::LoadingEnded)
    } else if starting {
        Some(ServerEvent::DatasetReplaced {
            own_files: subevent != raw::REDISMODULE_SUBEVENT_LOADING_REPL_START,
            aof: subevent == raw::REDISMODULE_SUBEVENT_LOADING_AOF_START,
        })
    } else {
        None
    }
}

/// The node becomes a replica (noted, acted on later) or a master.
fn role_event(subevent: u64) -> Option<ServerEvent> {
    if subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA {
        // The rest of this event-loop iteration still runs this node's own
        // clients (a MULTI that holds REPLICAOF): their changes ship,
        // stamped, before it acts as a replica (`settle_role`, after the
        // flush before sleeping). Nothing from the new master arrives
        // within this iteration.
        BECOMING_REPLICA.store(true, std::sync::atomic::Ordering::Relaxed);
        return None;
    }
    BECOMING_REPLICA.store(false, std::sync::atomic::Ordering::Relaxed);
    REPLICA.store(false, std::sync::atomic::Ordering::Relaxed);
    Some(ServerEvent::BecameMaster)
}

/// Subscribes to FLUSHDB, SWAPDB and event-loop events; `handler` receives them.
///
/// # Errors
/// The name of the event Redis refused (the event loop event needs Redis 7.0).
pub fn subscribe_server_events(
    ctx: &Context,
    handler: ServerEventHandler,
) -> Result<(), &'static str> {
    let _ = HANDLER.set(handler);
    // SAFETY: the API table is filled by RedisModule_Init before OnLoad continues.
    let Some(subscribe) = (unsafe { raw::RedisModule_SubscribeToServerEvent }) else {
        return Err("SubscribeToServerEvent");
    };
    for (id, name) in [
        (raw::REDISMODULE_EVENT_FLUSHDB, "FlushDB"),
        (raw::REDISMODULE_EVENT_SWAPDB, "SwapDB"),
        (raw::REDISMODULE_EVENT_EVENTLOOP, "EventLoop"),
        (raw::REDISMODULE_EVENT_LOADING, "Loading"),
        (raw::REDISMODULE_EVENT_PERSISTENCE, "Persistence"),
        (raw::REDISMODULE_EVENT_FORK_CHILD, "ForkChild"),
        (raw::REDISMODULE_EVENT_REPLICA_CHANGE, "ReplicaChange"),
        (
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
            "ReplicationRoleChanged",
        ),
    ] {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        // SAFETY: `ctx` is the OnLoad context and `on_server_event` matches the
        // callback signature; it lives as long as the module is loaded.
        let rc = unsafe { subscribe(ctx.ctx, event, Some(on_server_event)) };
        if rc != raw::REDISMODULE_OK as i32 {
            return Err(name);
        }
    }
    Ok(())
}

/// A detached thread-safe context, used on the main thread only (to create
/// the apply timer).
pub struct ThreadContext {
    ctx: *mut raw::RedisModuleCtx,
}

// SAFETY: a detached thread-safe context may move between threads; it is
// only used on the main thread, which holds the GIL while running callbacks.
unsafe impl Send for ThreadContext {}

impl ThreadContext {
    /// A detached thread-safe context, or `None` if Redis lacks the API.
    pub fn new() -> Option<Self> {
        // SAFETY: the API table is filled before the module starts threads.
        let get = unsafe { raw::RedisModule_GetThreadSafeContext }?;
        // SAFETY: a null blocked client asks for a detached context.
        let ctx = unsafe { get(ptr::null_mut()) };
        (!ctx.is_null()).then_some(Self { ctx })
    }

    /// The context, for use on Redis' main thread only (which holds the GIL
    /// whenever it runs module callbacks).
    pub fn main_thread_context(&self) -> Context {
        Context::new(self.ctx)
    }
}

impl Drop for ThreadContext {
    fn drop(&mut self) {
        // SAFETY: the API table is filled; the context is ours and no longer used.
        if let Some(free) = unsafe { raw::RedisModule_FreeThreadSafeContext } {
            // SAFETY: `self.ctx` came from GetThreadSafeContext and is freed once.
            unsafe { free(self.ctx) };
        }
    }
}

/// Watches `fd` from Redis' event loop; `on_readable` runs on the main thread
/// when it is readable (`RedisModule_EventLoopAdd`, Redis 7.0+).
///
/// # Errors
/// When Redis refuses (no such API, or a bad fd).
pub fn watch_fd(fd: i32, on_readable: fn()) -> Result<(), &'static str> {
    let _ = FD_HANDLER.set(on_readable);
    // SAFETY: the API table is filled by RedisModule_Init before OnLoad continues.
    let Some(add) = (unsafe { raw::RedisModule_EventLoopAdd }) else {
        return Err("EventLoopAdd");
    };
    // SAFETY: `fd` is a live pipe end owned by the runtime until `unwatch_fd`;
    // the callback lives as long as the module is loaded.
    let rc = unsafe {
        add(
            fd,
            raw::REDISMODULE_EVENTLOOP_READABLE as i32,
            Some(on_fd_readable),
            ptr::null_mut(),
        )
    };
    if rc == raw::REDISMODULE_OK as i32 {
        Ok(())
    } else {
        Err("EventLoopAdd")
    }
}

/// Stops watching `fd` (before it is closed).
pub fn unwatch_fd(fd: i32) {
    // SAFETY: the API table is filled by RedisModule_Init.
    if let Some(del) = unsafe { raw::RedisModule_EventLoopDel } {
        // SAFETY: removes the watch added by `watch_fd` on the main thread.
        unsafe { del(fd, raw::REDISMODULE_EVENTLOOP_READABLE as i32) };
    }
}

static FD_HANDLER: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

unsafe extern "C" fn on_fd_readable(
    _fd: std::os::raw::c_int,
    _data: *mut c_void,
    _mask: std::os::raw::c_int,
) {
    if let Some(handler) = FD_HANDLER.get() {
        // A panic must not unwind into redis-server.
        let _ = std::panic::catch_unwind(handler);
    }
}

/// What `COMMAND DOCS` says about one of the module's commands.
pub struct CommandDocs {
    /// `rdmasync.status`.
    pub name: &'static CStr,
    /// One line.
    pub summary: &'static CStr,
    /// Big-O.
    pub complexity: &'static CStr,
    /// Module version that added it.
    pub since: &'static CStr,
    /// Redis arity (1: no arguments).
    pub arity: i32,
}

/// Describes a registered command for `COMMAND DOCS`/`COMMAND INFO`
/// (`RedisModule_SetCommandInfo`, Redis 7.0+). Returns false if refused.
pub fn set_command_docs(ctx: &Context, docs: &CommandDocs) -> bool {
    // SAFETY: the API table is filled by RedisModule_Init before OnLoad continues.
    let (Some(get), Some(set)) = (unsafe { raw::RedisModule_GetCommand }, unsafe {
        // SAFETY: as above.
        raw::RedisModule_SetCommandInfo
    }) else {
        return false;
    };
    // SAFETY: `ctx` is the OnLoad context and the name a C string.
    let command = unsafe { get(ctx.ctx, docs.name.as_ptr()) };
    if command.is_null() {
        return false;
    }
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: docs.summary.as_ptr(),
        complexity: docs.complexity.as_ptr(),
        since: docs.since.as_ptr(),
        history: ptr::null_mut(),
        tips: ptr::null(),
        arity: docs.arity,
        key_specs: ptr::null_mut(),
        args: ptr::null_mut(),
    };
    // SAFETY: `command` is ours; Redis copies everything it keeps from `info`
    // during the call, and `info`'s pointers live until it returns.
    unsafe { set(command, &info) == raw::REDISMODULE_OK as i32 }
}

/// Applies `CONFIG` values given by `MODULE LOADEX ... CONFIG` or redis.conf
/// to the registered configs (`RedisModule_LoadConfigs`).
pub fn load_configs(ctx: &Context) -> bool {
    // SAFETY: the API table is filled by RedisModule_Init before OnLoad continues.
    match unsafe { raw::RedisModule_LoadConfigs } {
        // SAFETY: `ctx` is the OnLoad context, as LoadConfigs requires.
        Some(load) => unsafe { load(ctx.ctx) == raw::REDISMODULE_OK as i32 },
        None => false,
    }
}

/// Module APIs newer than Redis 7.0 that this server offers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NewerApis {
    /// `RedisModule_AddPostNotificationJob` (Redis 7.2+, Valkey 7.2+).
    pub post_notification_jobs: bool,
    /// The `Key` server event (Redis 7.2+, Valkey 7.2+).
    pub key_event: bool,
}

/// Detects the newer APIs at load (a 7.0 server leaves them null or refuses
/// the event). Neither is needed by the data path: the hook never writes (so
/// no post-notification job), and deleted/expired/evicted keys are captured
/// from keyspace notifications on every version.
pub fn detect_newer_apis() -> NewerApis {
    // SAFETY: the API table is filled by RedisModule_Init; reading a pointer.
    let post_notification_jobs = unsafe { raw::RedisModule_AddPostNotificationJob }.is_some();
    // SAFETY: as above.
    let key_event = match unsafe { raw::RedisModule_IsSubEventSupported } {
        // SAFETY: a pure query of the server's event table.
        Some(supported) => unsafe {
            supported(
                raw::RedisModuleEvent {
                    id: raw::REDISMODULE_EVENT_KEY,
                    dataver: 1,
                },
                0,
            ) != 0
        },
        None => false,
    };
    NewerApis {
        post_notification_jobs,
        key_event,
    }
}

/// Handler the module installs for keyspace notifications: `(ctx, class,
/// event, key)`, `class` one of `redis_module::NotifyEvent`'s bits, `event`
/// the event's name (`del`, `hexpired`...).
pub type KeyspaceHandler = fn(&Context, i32, &[u8], &[u8]);

static KEYSPACE_HANDLER: std::sync::OnceLock<KeyspaceHandler> = std::sync::OnceLock::new();

unsafe extern "C" fn on_keyspace_event(
    ctx: *mut raw::RedisModuleCtx,
    class: std::os::raw::c_int,
    event: *const std::os::raw::c_char,
    key: *mut raw::RedisModuleString,
) -> std::os::raw::c_int {
    if let Some(handler) = KEYSPACE_HANDLER.get() {
        let context = Context::new(ctx);
        let key = redis_module::RedisString::string_as_slice(key);
        let event = if event.is_null() {
            &[][..]
        } else {
            // SAFETY: the server passes the event's name as a
            // NUL-terminated string that lives for the callback.
            unsafe { std::ffi::CStr::from_ptr(event) }.to_bytes()
        };
        // A panic must not unwind into redis-server.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            handler(&context, class, event, key)
        }));
    }
    raw::REDISMODULE_OK as i32
}

/// Subscribes to every keyspace notification class that signals a write.
/// Done last in OnLoad: Redis 7.0 does not unsubscribe a module whose load
/// fails, and a dangling callback would crash the next write.
///
/// # Errors
/// When Redis refuses the subscription.
pub fn subscribe_keyspace_events(
    ctx: &Context,
    handler: KeyspaceHandler,
) -> Result<(), &'static str> {
    let _ = KEYSPACE_HANDLER.set(handler);
    // SAFETY: the API table is filled by RedisModule_Init before OnLoad continues.
    let Some(subscribe) = (unsafe { raw::RedisModule_SubscribeToKeyspaceEvents }) else {
        return Err("SubscribeToKeyspaceEvents");
    };
    let kinds = redis_module::NotifyEvent::GENERIC
        | redis_module::NotifyEvent::STRING
        | redis_module::NotifyEvent::LIST
        | redis_module::NotifyEvent::SET
        | redis_module::NotifyEvent::HASH
        | redis_module::NotifyEvent::ZSET
        | redis_module::NotifyEvent::EXPIRED
        | redis_module::NotifyEvent::EVICTED
        | redis_module::NotifyEvent::STREAM;
    // SAFETY: `ctx` is the OnLoad context; the callback matches the expected
    // signature and lives as long as the module is loaded.
    let rc = unsafe { subscribe(ctx.ctx, kinds.bits(), Some(on_keyspace_event)) };
    if rc == raw::REDISMODULE_OK as i32 {
        Ok(())
    } else {
        Err("keyspace notifications")
    }
}

/// This server replicates from a master (kept current by the role-change event).
static REPLICA: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// This server became a replica in the current event-loop iteration; it
/// counts as one from the next flush on.
static BECOMING_REPLICA: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// This server is loading a dataset (kept current by the loading event).
static LOADING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// The dataset being loaded comes from a master (a replica sync), not from
/// this node's own files.
static LOADING_FROM_MASTER: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// A replica connected to this server since it started (Redis then keeps
/// a replication backlog and propagates to it).
static REPLICAS_SEEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this server has had replicas (see [`REPLICAS_SEEN`]).
pub fn has_had_replicas() -> bool {
    REPLICAS_SEEN.load(std::sync::atomic::Ordering::Relaxed)
}

/// Reads the role, the loading state and whether replicas were seen, once, at load.
pub fn init_role(ctx: &Context) {
    let replication = ctx.server_info("replication");
    let field = |name: &str| replication.field(name).map(|v| v.to_string_lossy());
    let backlog = field("repl_backlog_active").is_some_and(|v| v == "1");
    let replicas = field("connected_slaves").is_some_and(|v| v != "0");
    REPLICAS_SEEN.store(backlog || replicas, std::sync::atomic::Ordering::Relaxed);
    let flags = ctx.get_flags();
    REPLICA.store(
        flags.contains(redis_module::ContextFlags::SLAVE),
        std::sync::atomic::Ordering::Relaxed,
    );
    LOADING.store(
        flags.contains(redis_module::ContextFlags::LOADING),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// Keys in the selected database (`RedisModule_DbSize`).
pub fn db_size(ctx: &Context) -> u64 {
    // SAFETY: `ctx` is a live main-thread context; a pure read.
    unsafe { raw::RedisModule_DbSize }.map_or(0, |f| {
        // SAFETY: as above; the API table is filled at load.
        unsafe { f(ctx.ctx) }
    })
}

/// Whether clients are paused (CLIENT PAUSE, FAILOVER, a SHUTDOWN waiting
/// for replicas): nothing may change the dataset or propagate then
/// (`RedisModule_AvoidReplicaTraffic`).
pub fn clients_paused() -> bool {
    // SAFETY: a pure query of the server's pause state, on the main thread.
    unsafe { raw::RedisModule_AvoidReplicaTraffic }.is_some_and(|f| {
        // SAFETY: as above; the API table is filled at load.
        unsafe { f() != 0 }
    })
}

/// Whether this server is loading a dataset (AOF, RDB, or from a master).
pub fn is_loading() -> bool {
    LOADING.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether this server is loading its own files (AOF, RDB): what a load
/// replays may be this node's own changes. A dataset from a master is not:
/// Valkey 9 raises keyspace and flush events while it loads one (its
/// "Flushing old data" runs inside the load), and dating them as this
/// node's changes gave the flush a stamp above every key it loaded.
pub fn is_loading_own_files() -> bool {
    is_loading() && !LOADING_FROM_MASTER.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether this server became a replica in this event-loop iteration (its
/// pending changes are still its clients' and ship before it settles).
pub fn becoming_replica() -> bool {
    BECOMING_REPLICA.load(std::sync::atomic::Ordering::Relaxed)
}

/// After the flush before sleeping: a node that became a replica in this
/// iteration now acts as one.
pub fn settle_role() {
    if BECOMING_REPLICA.swap(false, std::sync::atomic::Ordering::Relaxed) {
        REPLICA.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Whether this server currently replicates from a master (its data, and
/// every write it sees, then comes from there, not from its own clients), or
/// is loading a dataset. Two atomic loads: cheap enough for every write.
pub fn is_replica_or_loading() -> bool {
    REPLICA.load(std::sync::atomic::Ordering::Relaxed)
        || LOADING.load(std::sync::atomic::Ordering::Relaxed)
}

/// What this server is, for the handshake: a description and the RDB format
/// of its DUMP payloads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// "redis 7.0.15", "valkey 8.0.2".
    pub description: String,
    /// RDB format version of DUMP payloads (0: unknown).
    pub rdb_version: u16,
}

/// Reads the server's name, version and DUMP format at load. The format
/// comes from `FUNCTION DUMP` (read-only, no key touched): its payload ends
/// with the RDB version (u16 little-endian) and a CRC64, like every DUMP.
pub fn server_info(ctx: &Context) -> ServerInfo {
    use redis_module::{CallOptionsBuilder, CallReply, CallResult};
    let opts = CallOptionsBuilder::new().errors_as_replies().build();
    let info = match ctx.call_ext::<_, CallResult>("INFO", &opts, &["server"][..]) {
        Ok(CallReply::String(s)) => s.as_bytes().to_vec(),
        Ok(CallReply::VerbatimString(s)) => s.to_parts().map(|(_, d)| d).unwrap_or_default(),
        _ => Vec::new(),
    };
    let info = String::from_utf8_lossy(&info);
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    };
    let description = match (field("server_name"), field("valkey_version")) {
        (Some(name), Some(version)) => format!("{name} {version}"),
        (_, Some(version)) => format!("valkey {version}"),
        _ => format!(
            "redis {}",
            field("redis_version").unwrap_or_else(|| "?".into())
        ),
    };
    let rdb_version = functions_dump(ctx).map_or(0, |b| {
        b.len()
            .checked_sub(10)
            .map_or(0, |at| u16::from_le_bytes([b[at], b[at + 1]]))
    });
    ServerInfo {
        description,
        rdb_version,
    }
}

/// The client a filtered command runs for, where the server can say
/// (Redis 7.2+ and Valkey have `CommandFilterGetClientId`; 7.0 has not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilteredClient {
    /// Client id.
    pub id: u64,
    /// Its selected database.
    pub db: u32,
    /// It is in `MULTI`: the command is being queued, not run.
    pub queuing: bool,
}

/// A command the filter sees: its name at once, its arguments and client
/// only when asked (most commands are ruled out by name alone).
pub struct FilteredCommand<'a> {
    fctx: *mut raw::RedisModuleCommandFilterCtx,
    name: &'a [u8],
    argc: i32,
    get: ArgGet,
}

type ArgGet =
    unsafe extern "C" fn(*mut raw::RedisModuleCommandFilterCtx, i32) -> *mut raw::RedisModuleString;

impl<'a> FilteredCommand<'a> {
    fn arg(&self, i: i32) -> Option<&'a [u8]> {
        // SAFETY: `fctx` is the live filter context of the running callback,
        // which this value does not outlive; the strings it returns stay
        // valid until the callback returns (nothing here changes them).
        unsafe {
            let s = (self.get)(self.fctx, i);
            (!s.is_null()).then(|| redis_module::RedisString::string_as_slice(s))
        }
    }

    /// The command's name as the client sent it.
    pub fn name(&self) -> &'a [u8] {
        self.name
    }

    /// How many arguments, the name included.
    pub fn arg_count(&self) -> usize {
        usize::try_from(self.argc).unwrap_or(0)
    }

    /// The arguments, the name at 0.
    pub fn args(&self) -> Vec<&'a [u8]> {
        (0..self.argc).map_while(|i| self.arg(i)).collect()
    }

    /// The client it runs for, on servers that tell it.
    pub fn client(&self) -> Option<FilteredClient> {
        filtered_client(self.fctx)
    }
}

/// What the command filter hands every command to.
pub type CommandHandler = fn(&FilteredCommand<'_>);

static COMMAND_HANDLER: std::sync::OnceLock<CommandHandler> = std::sync::OnceLock::new();

unsafe extern "C" fn on_command(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    let Some(handler) = COMMAND_HANDLER.get() else {
        return;
    };
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let (count, get) = unsafe {
        (
            raw::RedisModule_CommandFilterArgsCount,
            raw::RedisModule_CommandFilterArgGet,
        )
    };
    let (Some(count), Some(get)) = (count, get) else {
        return;
    };
    // A panic must not unwind into redis-server.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `fctx` is the live filter context of this callback.
        let argc = unsafe { count(fctx) };
        let mut command = FilteredCommand {
            fctx,
            name: &[],
            argc,
            get,
        };
        let Some(name) = command.arg(0) else { return };
        command.name = name;
        handler(&command);
    }));
}

/// The client of a filtered command, on servers that tell it.
fn filtered_client(fctx: *mut raw::RedisModuleCommandFilterCtx) -> Option<FilteredClient> {
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers
    // (the first is null on Redis 7.0).
    let (client_id, info_by_id) = unsafe {
        (
            raw::RedisModule_CommandFilterGetClientId,
            raw::RedisModule_GetClientInfoById,
        )
    };
    let (Some(client_id), Some(info_by_id)) = (client_id, info_by_id) else {
        return None;
    };
    // SAFETY: `fctx` is the live filter context of the running callback.
    let id = unsafe { client_id(fctx) };
    let mut info = raw::RedisModuleClientInfo {
        version: 1,
        flags: 0,
        id: 0,
        addr: [0; 46],
        port: 0,
        db: 0,
    };
    // SAFETY: `info` is a version-1 client info the call fills in.
    let rc = unsafe { info_by_id((&raw mut info).cast(), id) };
    (rc == raw::REDISMODULE_OK as i32).then_some(FilteredClient {
        id,
        db: u32::from(info.db),
        queuing: info.flags & u64::from(raw::REDISMODULE_CLIENTINFO_FLAG_MULTI) != 0,
    })
}

/// Registers the command filter that finds changes without keyspace
/// events (`silent`). Commands the module runs itself are not filtered.
///
/// # Errors
/// When Redis refuses the filter.
pub fn register_command_filter(ctx: &Context, handler: CommandHandler) -> Result<(), &'static str> {
    let _ = COMMAND_HANDLER.set(handler);
    // SAFETY: the API table is filled by RedisModule_Init before OnLoad continues.
    let Some(register) = (unsafe { raw::RedisModule_RegisterCommandFilter }) else {
        return Err("RegisterCommandFilter");
    };
    // SAFETY: `ctx` is the OnLoad context; the callback matches the
    // expected signature and lives as long as the module is loaded.
    let filter = unsafe {
        register(
            ctx.ctx,
            Some(on_command),
            raw::REDISMODULE_CMDFILTER_NOSELF as i32,
        )
    };
    if filter.is_null() {
        Err("command filter")
    } else {
        Ok(())
    }
}

/// How many databases the server has, found by selecting (no command
/// runs); the selected database is kept.
pub fn database_count(ctx: &Context) -> u32 {
    static COUNT: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *COUNT.get_or_init(|| {
        let original = selected_db(ctx);
        // The highest database that can be selected, by bisection.
        let (mut low, mut high) = (0u32, 1u32 << 20);
        while high - low > 1 {
            let mid = low + (high - low) / 2;
            if select_db(ctx, mid) {
                low = mid;
            } else {
                high = mid;
            }
        }
        select_db(ctx, original);
        low + 1
    })
}
