//! The peer's big values built a slice per event-loop step before their
//! batch applies (issue 26, point 3): one `RESTORE` of a 10,000,000-field
//! hash held the main thread for seconds.
//!
//! A batch holding a list, set, hash or sorted set of more than 4,096
//! elements (or over 4 MiB) in the plain form, that would win here, is
//! held (`HeldBatch`): each step writes 2 ms of its elements (up to 20 ms,
//! a quarter of the time the server spent on other work since the last
//! step, so that busy clients do not starve it) into a key of the module's
//! own (`server::build_key`), clients are served in
//! between, and what follows the batch waits in the queue. Once every
//! value is built the batch applies whole as any other, and each built
//! value is moved over its key (`UNLINK`, `RENAME`) where the batch would
//! have restored it; the replicas and the AOF get the `RESTORE` of the
//! payload, as before. Last-writer-wins is decided again at that point.
//!
//! The build key can change under a build (a client's `FLUSHALL`, a
//! `SWAPDB`, a load): each step checks that it holds what was written so
//! far, and starts again if not; after 3 restarts, or when the module
//! cannot write an element, the value is restored whole. A build key left
//! by a crash (in a snapshot taken mid-build) is unlinked at load; every
//! unlink of a build key is propagated, for replicas that loaded one.
//! Nothing is built on a replica, in a cluster, past half of `maxmemory`
//! (the value it replaces lives until the build ends), or when it has
//! expired already.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use redis_module::{CallOptionsBuilder, Context, ContextFlags};

use super::apply::{decide, run};
use super::apply_plan::expired_on_arrival;
use crate::capture::hook::Suppressed;
use crate::capture::state::main_state;
use crate::converge::version::Decision;
use crate::ops::status::{unix_ms, Stats};
use crate::proto::entry::{Batch, Encoding, Entry, Op};
use crate::redis::plain_value::PlainValue;
use crate::redis::server::{self, build_key, BUILD_SLOTS};
use crate::shared::apply_queue::{BuildState, HeldBatch, ValueBuild};
use crate::shared::Shared;

/// A value with more elements than this is built a slice at a time (as a
/// catch-up reads one: `server::SlicedRead`).
const BUILD_MIN_ELEMENTS: u64 = 4096;
/// ... or one whose payload is bigger than this.
const BUILD_MIN_BYTES: usize = 4 << 20;
/// Payloads smaller than this are not looked at (4,096 elements take more).
const LOOK_MIN_BYTES: usize = 8 << 10;
/// Main-thread time one step writes for, at least...
const BUILD_STEP: Duration = Duration::from_millis(2);
/// ... and at most: a quarter of the time the server spent on other work
/// since the last step, so that a build goes on (with a fifth of the main
/// thread) while clients run costly commands.
const MAX_BUILD_STEP: Duration = Duration::from_millis(20);
/// Elements written between two looks at the clock.
const ELEMENTS_PER_LOOK: usize = 256;
/// Restarts after which a value is restored whole instead.
const MAX_RESTARTS: u32 = 3;

/// What the batch loop does next.
pub(super) enum Next {
    /// Apply this batch, with the values built for it.
    Apply(Batch, Built),
    /// A held batch is still being built: serve clients, come back.
    Wait,
    /// Nothing is held.
    Idle,
}

/// The values built for a batch about to apply (entry seq -> build key
/// slot, and what it must hold), and every slot its builds used (unlinked
/// after the batch: a lost or given-up build leaves nothing behind).
#[derive(Default)]
pub(super) struct Built {
    values: RefCell<Vec<(u64, usize, PlainLen)>>,
    slots: Vec<usize>,
}

/// The kind and element count a build key must hold to be moved.
type PlainLen = (crate::redis::dump::Kind, u64);

/// Holds `batch` if it has big values to build first (`None`), else hands
/// it back.
pub(super) fn hold(ctx: &Context, shared: &Shared, batch: Batch) -> Option<Batch> {
    // The common case costs a look at each entry's size and type byte.
    if !batch.entries.iter().any(worth_a_look) {
        return Some(batch);
    }
    // A build key would hash to another slot than its value's key.
    let unbuildable = ContextFlags::SLAVE | ContextFlags::CLUSTER;
    if ctx.get_flags().intersects(unbuildable) || !server::memory_to_spare() {
        return Some(batch);
    }
    let builds = values_to_build(ctx, shared, &batch);
    if builds.is_empty() {
        return Some(batch);
    }
    // This node's writes during the build are stamped after the batch's
    // (its clocks were checked against the bound on the link thread), as
    // they would be had it applied at once.
    shared
        .clock
        .observe(batch.entries.iter().map(|e| e.clock).max().unwrap_or(0));
    let original = server::selected_db(ctx);
    let _quiet = Suppressed::new();
    for b in &builds {
        // A fresh build starts empty.
        unlink_everywhere(ctx, b.slot);
    }
    server::select_db(ctx, original);
    *shared.apply.held.lock() = Some(HeldBatch {
        batch,
        builds,
        stepped_at: Instant::now(),
    });
    None
}

/// The entries of `batch` worth building: big plain collections that
/// would win here, on keys without merge metadata, at most `BUILD_SLOTS`.
fn values_to_build(ctx: &Context, shared: &Shared, batch: &Batch) -> Vec<ValueBuild> {
    let main = main_state();
    let Some(st) = main.replication.get() else {
        return Vec::new();
    };
    let original = server::selected_db(ctx);
    let mut builds = Vec::new();
    for (entry, e) in batch.entries.iter().enumerate() {
        if builds.len() == BUILD_SLOTS {
            break;
        }
        let Some((key, value, expiry_ms)) = big_plain_value(e) else {
            continue;
        };
        if expired_on_arrival(expiry_ms, unix_ms()) {
            continue;
        }
        let merged =
            st.versions.counters.contains(e.db, key) || st.versions.hashes.contains(e.db, key);
        if merged || !server::select_db(ctx, e.db) {
            continue;
        }
        if decide(ctx, &st, shared.node_id, e, key) == Decision::Apply {
            builds.push(ValueBuild {
                entry,
                slot: builds.len(),
                cursor: value.start(),
                restarts: 0,
                state: BuildState::Building,
            });
        }
    }
    server::select_db(ctx, original);
    builds
}

/// Whether `e` may hold a big collection in the plain form: a payload that
/// is long enough and starts with a plain collection's type byte.
fn worth_a_look(e: &Entry) -> bool {
    match &e.op {
        Op::Value {
            payload,
            encoding: Encoding::Dump,
            ..
        } => payload.len() >= LOOK_MIN_BYTES && matches!(payload.first(), Some(1 | 2 | 4 | 5)),
        _ => false,
    }
}

/// The key, value and expiry of `e` if it is a big collection in the
/// plain form.
fn big_plain_value(e: &Entry) -> Option<(&[u8], PlainValue<'_>, Option<u64>)> {
    let Op::Value {
        key,
        payload,
        encoding: Encoding::Dump,
        expiry_ms,
    } = &e.op
    else {
        return None;
    };
    // The type byte first: only a plain collection is worth its CRC.
    if !worth_a_look(e) {
        return None;
    }
    let value = PlainValue::parse(payload)?;
    let big = value.declared() > BUILD_MIN_ELEMENTS || payload.len() > BUILD_MIN_BYTES;
    big.then_some((key.as_slice(), value, *expiry_ms))
}

/// Builds the held batch's values for one step; the batch to apply once
/// they are all built.
pub(super) fn next(ctx: &Context, shared: &Shared) -> Next {
    let mut slot = shared.apply.held.lock();
    let Some(held) = slot.as_mut() else {
        return Next::Idle;
    };
    let now = Instant::now();
    let share =
        (now.saturating_duration_since(held.stepped_at) / 4).clamp(BUILD_STEP, MAX_BUILD_STEP);
    let deadline = now + share;
    let replica = ctx.get_flags().contains(ContextFlags::SLAVE);
    let original = server::selected_db(ctx);
    let quiet = Suppressed::new();
    for build in &mut held.builds {
        if build.state != BuildState::Building {
            continue;
        }
        let e = &held.batch.entries[build.entry];
        if replica {
            // Its master's data only: the batch is refused whole.
            build.state = BuildState::Abandoned;
        } else if !step(ctx, shared, e, build, deadline) {
            break;
        }
    }
    drop(quiet);
    server::select_db(ctx, original);
    held.stepped_at = Instant::now();
    if held.builds.iter().any(|b| b.state == BuildState::Building) {
        return Next::Wait;
    }
    let Some(HeldBatch { batch, builds, .. }) = slot.take() else {
        return Next::Idle;
    };
    let built = built_of(&batch, &builds);
    Next::Apply(batch, built)
}

/// Writes elements of `build` until `deadline`: `false` once it passed
/// (the other builds wait for the next step).
fn step(
    ctx: &Context,
    shared: &Shared,
    e: &Entry,
    build: &mut ValueBuild,
    deadline: Instant,
) -> bool {
    let Some(value) = held_value(e).filter(|_| server::select_db(ctx, e.db)) else {
        build.state = BuildState::Abandoned;
        return true;
    };
    let name = build_key(build.slot);
    // What ran since the last step may have changed the build key.
    if server::built_len(ctx, &name, value.kind()) != Some(build.cursor.read()) {
        restart(ctx, shared, build, &value);
    }
    while build.state == BuildState::Building {
        let Some(elements) = value.read(&mut build.cursor, ELEMENTS_PER_LOOK) else {
            build.state = BuildState::Abandoned;
            break;
        };
        if elements.is_empty() {
            build.state = if value.complete(&build.cursor) {
                BuildState::Built
            } else {
                BuildState::Abandoned
            };
            break;
        }
        if let Err(msg) = server::add_elements(ctx, &name, value.kind(), &elements) {
            shared
                .stats
                .set_error(format!("apply: building a big value: {msg}"));
            restart(ctx, shared, build, &value);
        }
        if Instant::now() >= deadline {
            return false;
        }
    }
    true
}

/// Starts `build` again from its first element (or gives it up after
/// [`MAX_RESTARTS`]).
fn restart(ctx: &Context, shared: &Shared, build: &mut ValueBuild, value: &PlainValue<'_>) {
    Stats::add(&shared.stats.builds_restarted, 1);
    let db = server::selected_db(ctx);
    unlink_everywhere(ctx, build.slot);
    server::select_db(ctx, db);
    build.restarts += 1;
    build.cursor = value.start();
    if build.restarts > MAX_RESTARTS {
        build.state = BuildState::Abandoned;
    }
}

/// Unlinks the build key of `slot` in every database (a `SWAPDB` may have
/// moved it). The unlink is propagated as well: a replica that loaded a
/// snapshot taken mid-build holds the key too. Leaves a database selected.
fn unlink_everywhere(ctx: &Context, slot: usize) {
    unlink_in_every_db(ctx, slot, true);
}

/// [`unlink_everywhere`], propagated only with `propagate`.
fn unlink_in_every_db(ctx: &Context, slot: usize, propagate: bool) {
    let name = build_key(slot);
    let opts = match propagate {
        true => CallOptionsBuilder::new().errors_as_replies().replicate(),
        false => CallOptionsBuilder::new().errors_as_replies(),
    }
    .build();
    for db in 0..server::database_count(ctx) {
        if server::select_db(ctx, db) && server::key_info(ctx, &name).exists() {
            let _ = run(ctx, &opts, "UNLINK", &[&name]);
        }
    }
}

/// The builds that ended whole, by entry seq.
fn built_of(batch: &Batch, builds: &[ValueBuild]) -> Built {
    let mut values = Vec::new();
    for b in builds.iter().filter(|b| b.state == BuildState::Built) {
        let e = &batch.entries[b.entry];
        if let Some(value) = held_value(e) {
            values.push((e.seq, b.slot, (value.kind(), value.declared())));
        }
    }
    Built {
        values: RefCell::new(values),
        slots: builds.iter().map(|b| b.slot).collect(),
    }
}

/// The value of a held entry (its CRC was checked when it was held).
fn held_value(e: &Entry) -> Option<PlainValue<'_>> {
    match &e.op {
        Op::Value { payload, .. } => PlainValue::parse_checked(payload),
        _ => None,
    }
}

/// Moves the value built for `e` over `key` in the selected database, in
/// place of restoring `payload`: `Ok(false)` when nothing whole was built
/// for it (the caller restores the payload). The replicas and the AOF get
/// the `UNLINK` and the `RESTORE`, as if the payload had been restored.
///
/// # Errors
/// The command that failed.
pub(super) fn commit(
    ctx: &Context,
    built: &Built,
    e: &Entry,
    key: &[u8],
    payload: &[u8],
    expiry_ms: Option<u64>,
) -> Result<bool, String> {
    let found = {
        let mut values = built.values.borrow_mut();
        let at = values.iter().position(|(seq, ..)| *seq == e.seq);
        at.map(|i| values.swap_remove(i))
    };
    let Some((_, slot, (kind, declared))) = found else {
        return Ok(false);
    };
    let name = build_key(slot);
    if server::built_len(ctx, &name, kind) != Some(declared) {
        return Ok(false);
    }
    let replicated = CallOptionsBuilder::new()
        .errors_as_replies()
        .replicate()
        .build();
    // The value it replaces is freed off the main thread, here and on the
    // replicas (as `restore` does for a big payload).
    run(ctx, &replicated, "UNLINK", &[key])?;
    if expired_on_arrival(expiry_ms, unix_ms()) {
        // As RESTORE with a past TTL: no key (the unlink went out).
        return Ok(true);
    }
    if !move_built(ctx, &name, key, expiry_ms) {
        let _ = run(ctx, &replicated, "UNLINK", &[key]);
        return Ok(false);
    }
    let ttl = expiry_ms.unwrap_or(0).to_string();
    ctx.replicate(
        "RESTORE",
        &[key, ttl.as_bytes(), payload, b"REPLACE", b"ABSTTL"],
    );
    crate::shared::with_shared(|s| Stats::add(&s.stats.values_built, 1));
    Ok(true)
}

/// Renames the build key `name` to `key` and sets its expiry, here only:
/// whether both took.
fn move_built(ctx: &Context, name: &[u8], key: &[u8], expiry_ms: Option<u64>) -> bool {
    let local = CallOptionsBuilder::new().errors_as_replies().build();
    run(ctx, &local, "RENAME", &[name, key]).is_ok()
        && expiry_ms.is_none_or(|at| {
            run(ctx, &local, "PEXPIREAT", &[key, at.to_string().as_bytes()]).is_ok()
        })
}

/// After the batch applied: the build keys it did not move (the value lost
/// to a newer write, was merged, or its build was given up) are unlinked.
pub(super) fn finish(ctx: &Context, built: Built) {
    if built.slots.is_empty() {
        return;
    }
    let original = server::selected_db(ctx);
    let _quiet = Suppressed::new();
    for slot in built.slots {
        unlink_everywhere(ctx, slot);
    }
    server::select_db(ctx, original);
}

/// At load: build keys a snapshot taken mid-build holds are unlinked (and
/// the unlinks propagated, for replicas that loaded the same snapshot).
pub fn remove_leftovers(ctx: &Context) {
    if ctx.get_flags().contains(ContextFlags::SLAVE) {
        // Its master propagates the unlink of each build key it ends.
        return;
    }
    let original = server::selected_db(ctx);
    let _quiet = Suppressed::new();
    // Nothing propagates while clients are paused (Redis asserts).
    let propagate = !server::clients_paused();
    for slot in 0..BUILD_SLOTS {
        unlink_in_every_db(ctx, slot, propagate);
    }
    server::select_db(ctx, original);
}
