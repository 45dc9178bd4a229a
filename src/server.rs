//! The few Redis module API calls `redis-module` does not wrap safely:
//! database selection, event subscriptions, the event-loop fd watch and the
//! detached context the apply path uses.
//! Every `unsafe` block outside `transport/rdma/` lives here.

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
    /// The dataset is being replaced wholesale (`DEBUG RELOAD`, a replica's
    /// full sync, AOF/RDB load): no per-key notifications will follow.
    DatasetReplaced,
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
    let event = match eid.id {
        raw::REDISMODULE_EVENT_FLUSHDB if subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_START => {
            // SAFETY: for FLUSHDB events Redis passes a RedisModuleFlushInfo (7.0: version 1).
            let info = unsafe { &*(data as *const raw::RedisModuleFlushInfo) };
            ServerEvent::FlushStarting(u32::try_from(info.dbnum).ok())
        }
        raw::REDISMODULE_EVENT_SWAPDB => {
            // SAFETY: for SWAPDB events Redis passes a RedisModuleSwapDbInfo (version 1).
            let info = unsafe { &*(data as *const raw::RedisModuleSwapDbInfo) };
            match (
                u32::try_from(info.dbnum_first),
                u32::try_from(info.dbnum_second),
            ) {
                (Ok(a), Ok(b)) => ServerEvent::Swapped(a, b),
                _ => return,
            }
        }
        raw::REDISMODULE_EVENT_EVENTLOOP
            if subevent == raw::REDISMODULE_SUBEVENT_EVENTLOOP_BEFORE_SLEEP =>
        {
            ServerEvent::BeforeSleep
        }
        raw::REDISMODULE_EVENT_LOADING => {
            let starting = matches!(
                subevent,
                raw::REDISMODULE_SUBEVENT_LOADING_RDB_START
                    | raw::REDISMODULE_SUBEVENT_LOADING_AOF_START
                    | raw::REDISMODULE_SUBEVENT_LOADING_REPL_START
            );
            LOADING.store(starting, std::sync::atomic::Ordering::Relaxed);
            if !starting {
                return;
            }
            ServerEvent::DatasetReplaced
        }
        // Only the saves made by the server process itself: RDB_START and
        // AOF_START fire in the forked child, where nothing may ship.
        raw::REDISMODULE_EVENT_PERSISTENCE
            if matches!(
                subevent,
                raw::REDISMODULE_SUBEVENT_PERSISTENCE_SYNC_RDB_START
                    | raw::REDISMODULE_SUBEVENT_PERSISTENCE_SYNC_AOF_START
            ) =>
        {
            ServerEvent::SavingStarts
        }
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED => {
            let replica = subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA;
            REPLICA.store(replica, std::sync::atomic::Ordering::Relaxed);
            if replica {
                return;
            }
            ServerEvent::BecameMaster
        }
        _ => return,
    };
    if let Some(handler) = HANDLER.get() {
        let context = Context::new(ctx);
        // A panic must not unwind into redis-server.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&context, event)));
    }
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

/// Handler the module installs for keyspace notifications: `(ctx, class, key)`,
/// `class` one of `redis_module::NotifyEvent`'s bits.
pub type KeyspaceHandler = fn(&Context, i32, &[u8]);

static KEYSPACE_HANDLER: std::sync::OnceLock<KeyspaceHandler> = std::sync::OnceLock::new();

unsafe extern "C" fn on_keyspace_event(
    ctx: *mut raw::RedisModuleCtx,
    class: std::os::raw::c_int,
    _event: *const std::os::raw::c_char,
    key: *mut raw::RedisModuleString,
) -> std::os::raw::c_int {
    if let Some(handler) = KEYSPACE_HANDLER.get() {
        let context = Context::new(ctx);
        let key = redis_module::RedisString::string_as_slice(key);
        // A panic must not unwind into redis-server.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            handler(&context, class, key)
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
/// This server is loading a dataset (kept current by the loading event).
static LOADING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Reads the role and loading state once, at load.
pub fn init_role(ctx: &Context) {
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

/// Whether this server currently replicates from a master (its data, and
/// every write it sees, then comes from there, not from its own clients), or
/// is loading a dataset. Two atomic loads: cheap enough for every write.
pub fn is_replica_or_loading() -> bool {
    REPLICA.load(std::sync::atomic::Ordering::Relaxed)
        || LOADING.load(std::sync::atomic::Ordering::Relaxed)
}

/// What a key holds, read through the key API (no command runs, the key's
/// access time is not touched).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyInfo {
    /// `REDISMODULE_KEYTYPE_*`; `EMPTY` when the key does not exist.
    pub kind: i32,
    /// Absolute expiry in Unix milliseconds.
    pub expiry_ms: Option<u64>,
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
}

/// Type and absolute expiry of `key` in the selected database (an expired
/// key is reclaimed by the lookup, as a command would).
pub fn key_info(ctx: &Context, key: &[u8]) -> KeyInfo {
    key_info_of(
        ctx,
        &redis_module::RedisString::create_from_slice(std::ptr::null_mut(), key),
    )
}

/// [`key_info`] of a name already made into a Redis string (a caller that
/// also passes the name to a command makes it once).
pub fn key_info_of(ctx: &Context, name: &redis_module::RedisString) -> KeyInfo {
    open_key(ctx, name, false).0
}

/// Strings longer than this are always stored `raw` (an sds of their own):
/// `embstr` holds at most 44 bytes and `int` at most 20 digits, in Redis 7.0
/// and Valkey 8 alike. Only those are read in place (`RM_StringDMA` would
/// convert the other two encodings, rewriting the key); a margin is kept
/// for servers that embed somewhat longer values.
pub const READ_IN_PLACE_ABOVE: usize = 256;

/// [`key_info_of`], and the bytes of a string longer than
/// [`READ_IN_PLACE_ABOVE`], copied straight from the key (one copy, no
/// command, no reply to build and parse).
pub fn key_info_and_long_string(
    ctx: &Context,
    name: &redis_module::RedisString,
) -> (KeyInfo, Option<Vec<u8>>) {
    open_key(ctx, name, true)
}

/// Type and expiry of `name`, and (`copy_long`) the bytes of a long string.
fn open_key(
    ctx: &Context,
    name: &redis_module::RedisString,
    copy_long: bool,
) -> (KeyInfo, Option<Vec<u8>>) {
    let absent = KeyInfo {
        kind: raw::REDISMODULE_KEYTYPE_EMPTY as i32,
        expiry_ms: None,
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
    // SAFETY: the API table is filled by RedisModule_Init; reading pointers.
    let (value_len, dma) = unsafe { (raw::RedisModule_ValueLength, raw::RedisModule_StringDMA) };
    let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_OPEN_KEY_NOTOUCH) as i32;
    // SAFETY: main thread with a valid context; `name` is a live Redis
    // string borrowed for the call; the key handle is checked for null
    // before use and closed here. StringDMA in read mode on a raw string
    // (longer than READ_IN_PLACE_ABOVE, see there) returns `len` bytes that
    // stay valid and unchanged until CloseKey; they are copied before it.
    unsafe {
        let handle = open(ctx.ctx, name.inner, mode);
        if handle.is_null() {
            return (absent, None);
        }
        let expiry = expire_of(handle);
        let info = KeyInfo {
            kind: kind_of(handle),
            expiry_ms: u64::try_from(expiry).ok().filter(|&at| at > 0),
        };
        let mut bytes = None;
        if let (true, Some(value_len), Some(dma)) = (copy_long && info.is_string(), value_len, dma)
        {
            if value_len(handle) > READ_IN_PLACE_ABOVE {
                let mut len = 0usize;
                let at = dma(handle, &mut len, raw::REDISMODULE_READ as i32);
                if !at.is_null() {
                    bytes = Some(std::slice::from_raw_parts(at.cast::<u8>(), len).to_vec());
                }
            }
        }
        close(handle);
        (info, bytes)
    }
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
    let empty: [&str; 1] = ["DUMP"];
    let rdb_version = match ctx.call_ext::<_, CallResult>("FUNCTION", &opts, &empty[..]) {
        Ok(CallReply::String(s)) => {
            let b = s.as_bytes();
            b.len()
                .checked_sub(10)
                .map_or(0, |at| u16::from_le_bytes([b[at], b[at + 1]]))
        }
        _ => 0,
    };
    ServerInfo {
        description,
        rdb_version,
    }
}
