//! The peer's big values built a slice per event-loop step before their
//! batch applies (issue 26, point 3): one `RESTORE` of a 10,000,000-field
//! hash held the main thread for seconds.
//!
//! A batch holding a list, set, hash or sorted set of more than 4,096
//! elements (or over 4 MiB) in the plain form, that would win here, is
//! held (`HeldBatch`): each step writes about 2 ms of its elements into a
//! key of the module's own (`server::build_key`), clients are served in
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
//! by a crash (in a snapshot taken mid-build) is deleted at load.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use redis_module::{CallOptionsBuilder, Context, ContextFlags};

use super::apply::{decide, run};
use crate::capture::hook::Suppressed;
use crate::capture::state::main_state;
use crate::converge::version::Decision;
use crate::ops::status::Stats;
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
/// Main-thread time one step writes for.
const BUILD_STEP: Duration = Duration::from_millis(2);
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

/// The values built for a batch about to apply: entry seq -> build key.
#[derive(Default)]
pub(super) struct Built(RefCell<Vec<(u64, usize, PlainLen)>>);

/// The kind and element count a build key must hold to be moved.
type PlainLen = (crate::redis::dump::Kind, u64);

/// Holds `batch` if it has big values to build first (`None`), else hands
/// it back.
pub(super) fn hold(ctx: &Context, shared: &Shared, batch: Batch) -> Option<Batch> {
    if ctx.get_flags().contains(ContextFlags::SLAVE) {
        return Some(batch);
    }
    let builds = values_to_build(ctx, shared, &batch);
    if builds.is_empty() {
        return Some(batch);
    }
    let original = server::selected_db(ctx);
    let _quiet = Suppressed::new();
    for b in &builds {
        // A fresh build starts empty.
        unlink_everywhere(ctx, b.slot);
    }
    server::select_db(ctx, original);
    *shared.apply.held.lock() = Some(HeldBatch { batch, builds });
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
        let Some((key, value)) = big_plain_value(e) else {
            continue;
        };
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

/// The key and value of `e` if it is a big collection in the plain form.
fn big_plain_value(e: &Entry) -> Option<(&[u8], PlainValue<'_>)> {
    let Op::Value {
        key,
        payload,
        encoding: Encoding::Dump,
        ..
    } = &e.op
    else {
        return None;
    };
    if payload.len() < LOOK_MIN_BYTES {
        return None;
    }
    let value = PlainValue::parse(payload)?;
    let big = value.declared() > BUILD_MIN_ELEMENTS || payload.len() > BUILD_MIN_BYTES;
    big.then_some((key.as_slice(), value))
}

/// Builds the held batch's values for one step; the batch to apply once
/// they are all built.
pub(super) fn next(ctx: &Context, shared: &Shared) -> Next {
    let mut slot = shared.apply.held.lock();
    let Some(held) = slot.as_mut() else {
        return Next::Idle;
    };
    let deadline = Instant::now() + BUILD_STEP;
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
    if held.builds.iter().any(|b| b.state == BuildState::Building) {
        return Next::Wait;
    }
    let Some(HeldBatch { batch, builds }) = slot.take() else {
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
    let value = match &e.op {
        Op::Value { payload, .. } => PlainValue::parse_checked(payload),
        _ => None,
    };
    let Some(value) = value.filter(|_| server::select_db(ctx, e.db)) else {
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
/// moved it), here only: it was never propagated. Leaves a database
/// selected.
fn unlink_everywhere(ctx: &Context, slot: usize) {
    let name = build_key(slot);
    let local = CallOptionsBuilder::new().errors_as_replies().build();
    for db in 0..server::database_count(ctx) {
        if server::select_db(ctx, db) && server::key_info(ctx, &name).exists() {
            let _ = run(ctx, &local, "UNLINK", &[&name]);
        }
    }
}

/// The builds that ended whole, by entry seq.
fn built_of(batch: &Batch, builds: &[ValueBuild]) -> Built {
    let mut built = Vec::new();
    for b in builds.iter().filter(|b| b.state == BuildState::Built) {
        let e = &batch.entries[b.entry];
        if let Some((_, value)) = big_plain_value_checked(e) {
            built.push((e.seq, b.slot, (value.kind(), value.declared())));
        }
    }
    Built(RefCell::new(built))
}

/// As [`big_plain_value`], for a payload whose CRC was checked.
fn big_plain_value_checked(e: &Entry) -> Option<(&[u8], PlainValue<'_>)> {
    match &e.op {
        Op::Value { key, payload, .. } => Some((key, PlainValue::parse_checked(payload)?)),
        _ => None,
    }
}

/// Moves the value built for `e` over `key` in the selected database, in
/// place of restoring `payload`: `Ok(false)` when nothing whole was built
/// for it (the caller restores the payload). The replicas and the AOF get
/// the `RESTORE`, as if it had run.
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
        let mut list = built.0.borrow_mut();
        let at = list.iter().position(|(seq, ..)| *seq == e.seq);
        at.map(|i| list.swap_remove(i))
    };
    let Some((_, slot, (kind, declared))) = found else {
        return Ok(false);
    };
    let name = build_key(slot);
    let local = CallOptionsBuilder::new().errors_as_replies().build();
    if server::built_len(ctx, &name, kind) != Some(declared) {
        let _ = run(ctx, &local, "UNLINK", &[&name]);
        return Ok(false);
    }
    run(ctx, &local, "UNLINK", &[key])?;
    run(ctx, &local, "RENAME", &[&name, key])?;
    if let Some(at) = expiry_ms {
        run(ctx, &local, "PEXPIREAT", &[key, at.to_string().as_bytes()])?;
    }
    let ttl = expiry_ms.unwrap_or(0).to_string();
    ctx.replicate(
        "RESTORE",
        &[key, ttl.as_bytes(), payload, b"REPLACE", b"ABSTTL"],
    );
    crate::shared::with_shared(|s| Stats::add(&s.stats.values_built, 1));
    Ok(true)
}

/// After the batch applied: the build keys it did not move (the value lost
/// to a newer write, or was merged) are unlinked.
pub(super) fn finish(ctx: &Context, built: Built) {
    let left = built.0.into_inner();
    if left.is_empty() {
        return;
    }
    let original = server::selected_db(ctx);
    let _quiet = Suppressed::new();
    for (_, slot, _) in left {
        unlink_everywhere(ctx, slot);
    }
    server::select_db(ctx, original);
}

/// At load: build keys a snapshot taken mid-build holds are deleted (and
/// the deletes propagated, for replicas that loaded the same snapshot).
pub fn remove_leftovers(ctx: &Context) {
    if ctx.get_flags().contains(ContextFlags::SLAVE) {
        // Its master's commit deletes them.
        return;
    }
    let original = server::selected_db(ctx);
    let _quiet = Suppressed::new();
    let opts = CallOptionsBuilder::new()
        .errors_as_replies()
        .replicate()
        .build();
    for db in 0..server::database_count(ctx) {
        if !server::select_db(ctx, db) {
            continue;
        }
        for slot in 0..BUILD_SLOTS {
            let name = build_key(slot);
            if server::key_info(ctx, &name).exists() {
                let _ = run(ctx, &opts, "DEL", &[&name]);
            }
        }
    }
    server::select_db(ctx, original);
}
