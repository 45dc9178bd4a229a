//! Keyspace and server events -> the dirty set. Runs inside Redis commands:
//! records `(db, key)` and nothing else; never writes, never blocks.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use redis_module::{Context, NotifyEvent};

use crate::capture::fields;
use crate::capture::increments;
use crate::capture::state::main_state;
use crate::capture::transactions::{self, Queuing, TransactionWindow};
use crate::ops::fallbacks::Fallback;

use crate::redis::server;

/// Set while the module itself runs commands (applying remote batches,
/// snapshotting): the events they raise are not local writes (echo guard).
pub static SUPPRESS: AtomicBool = AtomicBool::new(false);

/// Sets [`SUPPRESS`] for its lifetime, clearing it even if the code in
/// between panics (and the panic is caught).
pub struct Suppressed(());

impl Suppressed {
    /// Starts suppressing capture. A client command's element note that no
    /// event claimed (an `RPUSHX` of an absent list) is dropped: what the
    /// module runs passes no filter, and a client it unblocks (a `BLMOVE`
    /// served by an applied push) raises events no filtered command noted,
    /// which must not claim that note.
    pub fn new() -> Self {
        SUPPRESS.store(true, Ordering::Relaxed);
        fields::filtered(None);
        Self(())
    }
}

impl Drop for Suppressed {
    fn drop(&mut self) {
        SUPPRESS.store(false, Ordering::Relaxed);
    }
}

/// Keyspace notification handler: marks the key dirty. Writes that come
/// from this node's own master (it is a replica) or from loading a dataset
/// are not this node's writes and are not captured. An expiry or eviction
/// is not a write either: each node expires keys itself from the absolute
/// expiry that travels with the value, so it only turns the key's last
/// version into a tombstone.
pub fn on_keyspace_event(ctx: &Context, class: i32, event: &[u8], key: &[u8]) {
    let local_only = NotifyEvent::EXPIRED | NotifyEvent::EVICTED;
    let db = server::selected_db(ctx);
    if field_expiry(ctx, db, event, key, class) {
        return;
    }
    if server::is_replica_or_loading() {
        // A command replayed from the AOF: its stamp record, if the node
        // wrote one, comes after it.
        if server::is_loading_own_files()
            && !NotifyEvent::from_bits_truncate(class).intersects(local_only)
        {
            crate::capture::persist::loaded_change(server::selected_db(ctx), key);
        }
        return;
    }
    if NotifyEvent::from_bits_truncate(class).intersects(local_only) {
        expired_or_evicted(db, key);
        return;
    }
    // Checked before the state is taken: every write applied from the
    // peer raises an event here.
    if SUPPRESS.load(Ordering::Relaxed) {
        return;
    }
    let main = main_state();
    if PAST_EXPIRIES.load(Ordering::Relaxed) > 0 {
        // The server raised a write event (`del`, `hdel`) for a command's
        // expiry in the past (all but Valkey 9): the note is not needed.
        if let Some(mut silent) = main.silent.get() {
            silent.take_past_expiry(key, std::time::Instant::now());
        }
    }
    mark_written(&main, db, key, event);
}

/// An expiry or eviction of `key`: a delete of a command's (its key was
/// written in the command) or one of the server's own, which turns the
/// key's last version into a tombstone. Also while suppressed: the
/// module's own reads expire keys lazily.
fn expired_or_evicted(db: u32, key: &[u8]) {
    let main = main_state();
    forget_appends(&main, db, key);
    if !SUPPRESS.load(Ordering::Relaxed) && deleted_by_command(&main, key) {
        if let Some(mut dirty) = main.dirty.get() {
            if increments::enabled() {
                if let Some(mut window) = main.increments.get() {
                    let _ = window.event(db, key, b"del", true);
                }
            }
            if fields::enabled() {
                if let Some(mut window) = main.fields.get() {
                    window.event(db, key, b"del", true);
                }
            }
            dirty.mark(db, key);
        }
        return;
    }
    if fields::enabled() {
        // What the window held of the key went with it: a write of
        // it later in this iteration makes a new key, shipped whole.
        if let Some(mut window) = main.fields.get() {
            window.event(db, key, b"del", true);
        }
    }
    note_expired(&main, db, key);
}

/// A local write of `key`: dirty, and (`merge-counters`) an increment or
/// not for the flush (an increment the filter did not note is counted).
fn mark_written(main: &crate::capture::state::MainState, db: u32, key: &[u8], event: &[u8]) {
    let Some(mut dirty) = main.dirty.get() else {
        return;
    };
    let contains = dirty.contains(db, key);
    // An increment the filter did not note, or an inexact element note.
    let unpaired = increments::enabled()
        && main
            .increments
            .get()
            .is_some_and(|mut w| w.event(db, key, event, contains));
    let inexact = fields::enabled()
        && main
            .fields
            .get()
            .is_some_and(|mut w| w.event(db, key, event, contains));
    if let Some(mut window) = main.appends.get() {
        window.event(db, key, event, contains);
    }
    if unpaired || inexact {
        crate::shared::with_shared(|s| {
            crate::ops::fallbacks::count(&s.stats, Fallback::Unnoted, u64::from(unpaired));
            crate::ops::fallbacks::count(&s.stats, Fallback::InexactZadd, u64::from(inexact));
        });
    }
    dirty.mark(db, key);
}

/// An expired or evicted key: its last version becomes a tombstone at the
/// next flush, within the per-iteration bound (past it, counted).
fn note_expired(main: &crate::capture::state::MainState, db: u32, key: &[u8]) {
    let Some(mut expired) = main.expired.get() else {
        return;
    };
    if expired.len() < EXPIRED_BOUND.load(Ordering::Relaxed) {
        expired.push((db, key.to_vec()));
    } else {
        // Its version stays until the key is written again: counted.
        crate::shared::with_shared(|s| {
            crate::ops::status::Stats::add(&s.stats.expiries_unrecorded, 1)
        });
    }
}

thread_local! {
    /// The hash whose last field just expired: a `del` of it that follows
    /// at once is that expiry emptying the hash.
    static FIELDS_EXPIRED: std::cell::RefCell<Option<(u32, Vec<u8>)>> =
        const { std::cell::RefCell::new(None) };
}

/// Whether the event is a hash field's expiry (`hexpired`), or the `del`
/// of the hash it emptied: not a write. Each node expires fields itself
/// from the absolute TTLs that travelled with the hash, as it expires
/// keys; shipping the expiry as a write gave it a stamp that could beat a
/// real write made on the peer in the same millisecond (an HPERSIST on A
/// was lost to B's lazy field expiry). The `del` turns the key's version
/// into a tombstone, as an expiry of the key does.
fn field_expiry(ctx: &Context, db: u32, event: &[u8], key: &[u8], class: i32) -> bool {
    FIELDS_EXPIRED.with(|last| {
        let mut last = last.borrow_mut();
        if event == b"hexpired" {
            if !SUPPRESS.load(Ordering::Relaxed) && deleted_by_command(&main_state(), key) {
                // HEXPIRE with a time in the past on Valkey 9: a write.
                *last = None;
                return false;
            }
            // Only an expiry that took the last field deletes the key next
            // (a DEL of a client that follows a lazy expiry, in MULTI, is
            // a write).
            *last = server::is_empty_hash(ctx, key).then(|| (db, key.to_vec()));
            return true;
        }
        let emptied = event == b"del"
            && NotifyEvent::from_bits_truncate(class).contains(NotifyEvent::GENERIC)
            && last.as_ref().is_some_and(|(d, k)| *d == db && k == key);
        *last = None;
        if emptied && !server::is_replica_or_loading() {
            note_expired(&main_state(), db, key);
        }
        emptied
    })
}

/// Whether an `expired` event for `key` is the delete of a command that
/// gave it an expiry in the past (Valkey 9 raises `expired` for it): a
/// write, shipped as the delete it is. The note is used once.
fn deleted_by_command(main: &crate::capture::state::MainState, key: &[u8]) -> bool {
    if PAST_EXPIRIES.load(Ordering::Relaxed) == 0 {
        return false;
    }
    let Some(mut silent) = main.silent.get() else {
        return false;
    };
    silent.take_past_expiry(key, std::time::Instant::now())
}

/// How long a silent change queued in `MULTI` waits for its `EXEC` to be
/// captured again (when the server cannot say which client queued it,
/// every `EXEC` in that time captures it again).
const QUEUED_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// At most this many silent changes wait for an `EXEC` (the oldest go).
const MAX_QUEUED: usize = 4096;

/// What a silent change's key must hold for a database to be the one it
/// ran in (on servers that cannot say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SilentType {
    /// Stream commands.
    Stream,
    /// HyperLogLog commands (a HyperLogLog is a string).
    String,
}

/// At most this many keys of commands that set an expiry in the past wait
/// for their `expired` event (the oldest go).
const MAX_PAST_EXPIRIES: usize = 1024;

/// How many such keys wait: write events look at the notes only when some do.
static PAST_EXPIRIES: AtomicUsize = AtomicUsize::new(0);

/// A silent change queued in `MULTI`, to capture at its `EXEC`.
#[derive(Debug)]
struct Queued {
    key: Vec<u8>,
    kind: SilentType,
    /// Database and client, where the server said.
    client: Option<server::FilteredClient>,
    at: std::time::Instant,
}

/// Changes without a keyspace event (`silent`), as the command filter saw
/// them: keys whose database is not known yet, and changes queued in
/// `MULTI`. Main thread only.
#[derive(Debug, Default)]
pub struct SilentChanges {
    /// Keys to mark dirty in each database where they hold `SilentType`.
    pub unresolved: Vec<(Vec<u8>, SilentType)>,
    queued: VecDeque<Queued>,
    /// When a FUNCTION change was last (maybe) queued in MULTI: the
    /// libraries are read again at every EXEC until `QUEUED_FOR` after.
    functions_queued_at: Option<std::time::Instant>,
    /// The FUNCTION commands since the last flush, as far as a load of a
    /// new library can be trusted without reading it back.
    pub(crate) library_load: crate::capture::libraries::LoadNote,
    /// Keys of commands that gave them an expiry in the past, each until
    /// its `expired` event or `QUEUED_FOR` (a command queued in `MULTI`
    /// runs at its `EXEC`).
    past_expiries: VecDeque<(Vec<u8>, std::time::Instant)>,
}

impl SilentChanges {
    /// A change queued in `MULTI` (or maybe queued: the client is unknown).
    fn queue(&mut self, key: &[u8], kind: SilentType, client: Option<server::FilteredClient>) {
        if self.queued.len() >= MAX_QUEUED {
            self.queued.pop_front();
        }
        self.queued.push_back(Queued {
            key: key.to_vec(),
            kind,
            client,
            at: std::time::Instant::now(),
        });
    }

    /// Notes that a command gave `key` an expiry in the past.
    fn note_past_expiry(&mut self, key: &[u8], now: std::time::Instant) {
        if self.past_expiries.len() >= MAX_PAST_EXPIRIES {
            self.past_expiries.pop_front();
        }
        self.past_expiries.push_back((key.to_vec(), now));
        PAST_EXPIRIES.store(self.past_expiries.len(), Ordering::Relaxed);
    }

    /// Whether a command gave `key` an expiry in the past lately; forgets it.
    pub fn take_past_expiry(&mut self, key: &[u8], now: std::time::Instant) -> bool {
        self.past_expiries
            .retain(|(_, at)| now.saturating_duration_since(*at) < QUEUED_FOR);
        let found = self.past_expiries.iter().position(|(k, _)| k == key);
        if let Some(i) = found {
            self.past_expiries.remove(i);
        }
        PAST_EXPIRIES.store(self.past_expiries.len(), Ordering::Relaxed);
        found.is_some()
    }

    /// `EXEC` of `client` (unknown: any client) at `now`: the changes it
    /// runs, as `(db, key)` where the database is known, else unresolved.
    fn exec(&mut self, client: Option<u64>, now: std::time::Instant) -> Vec<(u32, Vec<u8>)> {
        self.queued
            .retain(|q| now.saturating_duration_since(q.at) < QUEUED_FOR);
        let mut known = Vec::new();
        let mut kept = VecDeque::new();
        for q in std::mem::take(&mut self.queued) {
            match (q.client, client) {
                (Some(c), Some(id)) if c.id == id => known.push((c.db, q.key)),
                (None, _) => {
                    // Which client queued it is unknown: it stays for a later EXEC.
                    self.unresolved.push((q.key.clone(), q.kind));
                    kept.push_back(q);
                }
                _ => kept.push_back(q),
            }
        }
        self.queued = kept;
        known
    }
}

/// Command filter handler: records the keys a command changes without a
/// keyspace event (see `silent`), and at `EXEC` those queued before it.
/// Records only; the database of a key the server did not name is found
/// at the next flush ([`resolve_silent`]). The name decides (once) whether
/// the arguments are read at all.
pub fn on_command(command: &server::FilteredCommand<'_>) {
    use crate::capture::silent::Kind;
    note_merged_changes(command);
    let kind = crate::capture::silent::kind(command.name());
    if matches!(kind, Kind::Other)
        || SUPPRESS.load(Ordering::Relaxed)
        || server::is_replica_or_loading()
    {
        return;
    }
    if matches!(kind, Kind::Expiry) {
        note_past_expiry(command);
        return;
    }
    let args = command.args();
    if matches!(kind, Kind::Function) && !crate::capture::silent::changes_functions(&args) {
        return;
    }
    let client = command.client();
    let main = main_state();
    let (Some(mut silent), Some(mut dirty)) = (main.silent.get(), main.dirty.get()) else {
        return;
    };
    let (keys, kind) = match kind {
        Kind::Stream(keys) => (keys, SilentType::Stream),
        Kind::String(keys) => (keys, SilentType::String),
        Kind::Exec => {
            on_exec(&mut silent, &mut dirty, client.map(|c| c.id));
            return;
        }
        Kind::Function => {
            on_function(&mut silent, &mut dirty, &args, client);
            return;
        }
        Kind::Other | Kind::Expiry => return,
    };
    for key in crate::capture::silent::key_positions(keys, &args)
        .into_iter()
        .filter_map(|i| args.get(i))
    {
        match client {
            Some(c) if !c.queuing => {
                // An EXPIRE before it in this iteration left the key noted
                // as changed in its TTL alone: no more.
                forget_fields(&main, c.db, key);
                dirty.mark(c.db, key);
            }
            Some(c) => silent.queue(key, kind, Some(c)),
            None => {
                silent.unresolved.push((key.to_vec(), kind));
                silent.queue(key, kind, None);
            }
        }
    }
}

/// With `merge-counters` or `merge-elements`: notes the increment or the
/// elements the command will make (a client's, not one applied from the
/// peer or loaded), or drops an older note no event claimed. In `MULTI`
/// (where the server names the client) the note waits for the client's
/// `EXEC`; at `EXEC` or `DISCARD` the client's notes are claimed or
/// dropped. Any command ends the claims of an `EXEC` before it.
fn note_merged_changes(command: &server::FilteredCommand<'_>) {
    let (counters, elements) = (increments::enabled(), fields::enabled());
    if !counters && !elements {
        return;
    }
    if transactions::claiming() {
        settle_exec(true);
    }
    let ours = || !SUPPRESS.load(Ordering::Relaxed) && !server::is_replica_or_loading();
    let name = command.name();
    let counted = counters && increments::may_increment(name) && ours();
    let noted = elements && fields::may_change_fields(name) && ours();
    let other = !counted && !noted && ours();
    let ends = other && transactions::ends_transaction(name);
    let barrier = other && !ends && transactions::is_barrier(name);
    let asks = counted || noted || ends || barrier;
    let client = if asks { command.client() } else { None };
    if ends && client.is_none() && name.eq_ignore_ascii_case(b"exec") {
        // A server that does not name the client (Redis 7.0): what the
        // EXEC runs passed the filter long before, and a script it runs
        // may leave a note no event claims, which a later command of it
        // would claim.
        transactions::interrupted();
    }
    let queued = client.filter(|c| c.queuing).map(|c| c.id);
    let now = queued.is_none();
    if counters {
        increments::filtered((counted && now).then(|| command.args()).as_deref());
    }
    if elements {
        fields::filtered((noted && now).then(|| command.args()).as_deref());
    }
    if let Some(client) = queued {
        let queuing = match (ends, barrier) {
            (true, _) => Queuing::End(name.eq_ignore_ascii_case(b"exec")),
            (_, true) => Queuing::Barrier,
            _ => Queuing::Note(command.args()),
        };
        in_transaction(client, queuing);
    }
}

/// A command of `client` in `MULTI`, in both windows.
fn in_transaction(client: u64, queuing: Queuing<'_>) {
    let main = main_state();
    let mut untrusted = 0;
    if let Some(mut w) = increments::enabled()
        .then(|| main.increments.get())
        .flatten()
    {
        untrusted += w.in_transaction(client, &queuing);
    }
    if let Some(mut w) = fields::enabled().then(|| main.fields.get()).flatten() {
        untrusted += w.in_transaction(client, &queuing);
    }
    count_fallbacks(untrusted);
}

/// Ends the claims of an `EXEC`'s queued notes (`by_command`: a filtered
/// command came, maybe one a script of that `EXEC` runs; else the flush);
/// a key one of whose queued changes raised no event ships whole, counted.
pub fn settle_exec(by_command: bool) {
    if !by_command {
        transactions::iteration_over();
    }
    if !transactions::claiming() {
        return;
    }
    let main = main_state();
    let (Some(mut counts), Some(mut elements)) = (main.increments.get(), main.fields.get()) else {
        return;
    };
    if by_command && (counts.holds_barrier() || elements.holds_barrier()) {
        transactions::interrupted();
    }
    let untrusted = counts.exec_done() + elements.exec_done();
    transactions::claims_ended();
    count_fallbacks(untrusted);
}

/// Counts `n` keys of transactions that ship whole in `merge_fallbacks`.
fn count_fallbacks(n: u64) {
    if n > 0 {
        crate::shared::with_shared(|s| {
            crate::ops::fallbacks::count(&s.stats, Fallback::Transaction, n)
        });
    }
}

/// A FUNCTION command that changes libraries, of `client` (`None`: not
/// known, maybe queued in MULTI): the library it names is read at the next
/// flush, or all of them; one maybe queued is read again (all) at the
/// EXECs after. An unchanged library ships nothing.
fn on_function(
    silent: &mut SilentChanges,
    dirty: &mut crate::converge::changes::DirtySet,
    args: &[&[u8]],
    client: Option<server::FilteredClient>,
) {
    silent.library_load.command(args);
    let named = crate::capture::silent::library_named(args);
    match (named, client) {
        (Some(name), Some(c)) if !c.queuing => dirty.mark_library(name.to_vec()),
        (Some(name), None) => dirty.mark_library(name.to_vec()),
        _ => dirty.mark_functions(),
    }
    if client.is_none_or(|c| c.queuing) {
        silent.functions_queued_at = Some(std::time::Instant::now());
    }
}

/// `EXEC` of `client` (unknown: any): the silent changes queued before it
/// run now.
fn on_exec(
    silent: &mut SilentChanges,
    dirty: &mut crate::converge::changes::DirtySet,
    client: Option<u64>,
) {
    let now = std::time::Instant::now();
    // It may run FUNCTION commands queued long before, which no note
    // covers: the count of libraries no longer vouches for loads.
    silent.library_load.forget_count();
    for (db, key) in silent.exec(client, now) {
        dirty.mark(db, &key);
    }
    let functions = silent
        .functions_queued_at
        .is_some_and(|at| now.saturating_duration_since(at) < QUEUED_FOR);
    if functions {
        dirty.mark_functions();
    }
}

/// Notes the key of a command that deletes it by an expiry in the past.
/// A plain `SET k v` (three arguments) is ruled out before any argument is
/// read.
fn note_past_expiry(command: &server::FilteredCommand<'_>) {
    const SET_WITH_OPTION: usize = 5;
    if command.name().eq_ignore_ascii_case(b"set") && command.arg_count() < SET_WITH_OPTION {
        return;
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let args = command.args();
    let Some(key) = crate::capture::past_expiry::past_expiry_key(&args, now_ms) else {
        return;
    };
    if let Some(mut silent) = main_state().silent.get() {
        silent.note_past_expiry(key, std::time::Instant::now());
    }
}

/// Marks dirty the silent changes whose database the server did not name:
/// in every database where the key holds what the command changes (on
/// Redis 7.0 a key of that name and type in another database ships too,
/// unchanged).
pub fn resolve_silent(ctx: &Context) {
    let main = main_state();
    let Some(unresolved) = main
        .silent
        .get()
        .map(|mut s| std::mem::take(&mut s.unresolved))
    else {
        return;
    };
    if unresolved.is_empty() {
        return;
    }
    let original = server::selected_db(ctx);
    let Some(mut dirty) = main.dirty.get() else {
        return;
    };
    for db in 0..server::database_count(ctx) {
        if !server::select_db(ctx, db) {
            break;
        }
        for (key, kind) in &unresolved {
            let info = server::key_info(ctx, key);
            let holds = match kind {
                SilentType::Stream => info.is_stream(),
                SilentType::String => info.is_string(),
            };
            if holds {
                forget_fields(&main, db, key);
                dirty.mark(db, key);
            }
        }
    }
    server::select_db(ctx, original);
}

/// A change no event reports (a silent command's): the key's changes are
/// no longer those of elements or of its TTL alone.
fn forget_fields(main: &crate::capture::state::MainState, db: u32, key: &[u8]) {
    if let Some(mut window) = main.fields.get() {
        window.forget(db, key);
    }
    forget_appends(main, db, key);
}

/// A change that is no `APPEND` (an expiry, a silent command's): the key
/// ships whole (see `converge::appends`).
fn forget_appends(main: &crate::capture::state::MainState, db: u32, key: &[u8]) {
    if let Some(mut window) = main.appends.get() {
        window.forget(db, key);
    }
}

/// Whether silent changes wait for [`resolve_silent`].
pub fn silent_unresolved() -> bool {
    main_state()
        .silent
        .get()
        .is_some_and(|s| !s.unresolved.is_empty())
}

/// Keys expired or evicted since the last flush, at most this many (beyond
/// it their versions simply stay until the key is written again).
const MAX_EXPIRED_PENDING: usize = 1 << 20;

/// The bound in effect: [`MAX_EXPIRED_PENDING`] unless
/// `RDMASYNC.DEBUG EXPIRED-BOUND` lowered it for a test.
static EXPIRED_BOUND: AtomicUsize = AtomicUsize::new(MAX_EXPIRED_PENDING);

/// Sets the bound of expiries recorded per flush (0: the default).
pub fn set_expired_bound(n: usize) {
    let n = if n == 0 {
        MAX_EXPIRED_PENDING
    } else {
        n.min(MAX_EXPIRED_PENDING)
    };
    EXPIRED_BOUND.store(n, Ordering::Relaxed);
}

/// `(db, key)` of a key that expired or was evicted: its last version
/// becomes a tombstone at the next flush (the convergence state may be
/// held when it expires).
pub type ExpiredKey = (u32, Vec<u8>);

/// Records FLUSHDB/FLUSHALL and SWAPDB, which have no per-key notification.
pub fn on_flush_or_swap(event: server::ServerEvent) {
    if server::is_loading() {
        if !server::is_loading_own_files() {
            // The flush of a replica sync: what the master sends replaces
            // the dataset; this node's versions go with it (see
            // `DatasetReplaced`).
            return;
        }
        // A flush replayed from the AOF: its stamp record, if any, follows.
        match event {
            server::ServerEvent::FlushStarting(db) => crate::capture::persist::loaded_flush(db),
            server::ServerEvent::Swapped(a, b) => crate::capture::persist::loaded_swap(a, b),
            _ => {}
        }
        return;
    }
    if SUPPRESS.load(Ordering::Relaxed) || server::is_replica_or_loading() {
        return;
    }
    let main = main_state();
    let Some(mut dirty) = main.dirty.get() else {
        return;
    };
    if matches!(
        event,
        server::ServerEvent::FlushStarting(_) | server::ServerEvent::Swapped(..)
    ) {
        // The keys move or go: their increments and fields ship as whole
        // writes.
        if let Some(mut window) = main.increments.get() {
            window.clear();
        }
        if let Some(mut window) = main.fields.get() {
            window.clear();
        }
        if let Some(mut window) = main.appends.get() {
            window.clear();
        }
    }
    match event {
        server::ServerEvent::FlushStarting(db) => dirty.flushing(db),
        server::ServerEvent::Swapped(a, b) => dirty.swapped(a, b),
        server::ServerEvent::BeforeSleep
        | server::ServerEvent::AfterSleep
        | server::ServerEvent::DatasetReplaced { .. }
        | server::ServerEvent::BecameMaster
        | server::ServerEvent::LoadingEnded
        | server::ServerEvent::ChildBorn
        | server::ServerEvent::ChildDied
        | server::ServerEvent::SavingStarts => {}
    }
}

/// The dataset is being replaced wholesale (`DEBUG RELOAD`, a full sync from
/// a master, a load at startup): the flush that precedes it is internal, and
/// the loaded keys raise no notifications. Nothing pending may ship (it would
/// wipe the peer); returns how many pending ops were discarded.
pub fn on_dataset_replaced() -> usize {
    let main = main_state();
    if let Some(mut window) = main.fields.get() {
        window.clear();
    }
    if let Some(mut window) = main.appends.get() {
        window.clear();
    }
    main.dirty.get().map_or(0, |mut d| d.take().len())
}
