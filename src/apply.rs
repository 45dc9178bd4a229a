//! Batch -> Redis, on a thread holding the GIL: each batch is applied whole,
//! with the echo guard set, and propagated to this node's replicas and AOF.

use std::time::Duration;

use redis_module::{CallOptions, CallOptionsBuilder, CallResult, Context};

use crate::entry::{Batch, Entry, Op};
use crate::error::{Error, Result};
use crate::hook::Suppressed;
use crate::runtime::Shared;
use crate::server::{self, GilGuard, ThreadContext};
use crate::status::Stats;

/// Waits for the GIL without ever blocking unload: Redis' main thread holds it
/// while running `MODULE UNLOAD`, which joins this thread.
fn lock_gil<'a>(tc: &'a ThreadContext, shared: &Shared) -> Result<GilGuard<'a>> {
    let mut tries = 0u32;
    loop {
        if shared.stopping() {
            return Err(Error::LinkClosed);
        }
        if let Some(guard) = tc.try_lock() {
            return Ok(guard);
        }
        tries += 1;
        if tries < 64 {
            std::hint::spin_loop();
        } else if tries < 256 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

fn run(
    ctx: &Context,
    opts: &CallOptions,
    cmd: &str,
    args: &[&[u8]],
) -> std::result::Result<(), String> {
    match ctx.call_ext::<_, CallResult>(cmd, opts, args) {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("{cmd}: {}", e.to_utf8_string().unwrap_or_default())),
    }
}

fn apply_entry(ctx: &Context, opts: &CallOptions, e: &Entry) -> std::result::Result<(), String> {
    if !server::select_db(ctx, e.db) {
        return Err(format!("no database {}", e.db));
    }
    match &e.op {
        Op::Value {
            key,
            payload,
            expiry_ms,
        } => {
            let ttl = expiry_ms.unwrap_or(0).to_string();
            run(
                ctx,
                opts,
                "RESTORE",
                &[key, ttl.as_bytes(), payload, b"REPLACE", b"ABSTTL"],
            )
        }
        Op::Delete { key } => run(ctx, opts, "DEL", &[key]),
        Op::FlushDb => run(ctx, opts, "FLUSHDB", &[]),
        Op::FlushAll => run(ctx, opts, "FLUSHALL", &[]),
        Op::SwapDb { other } => {
            let a = e.db.to_string();
            let b = other.to_string();
            run(ctx, opts, "SWAPDB", &[a.as_bytes(), b.as_bytes()])
        }
    }
}

/// Applies one batch atomically (under one GIL hold).
///
/// # Errors
/// [`Error::LinkClosed`] when unload began before the GIL was free.
pub fn apply_batch(tc: &ThreadContext, shared: &Shared, batch: &Batch) -> Result<()> {
    let opts = CallOptionsBuilder::new()
        .errors_as_replies()
        .replicate()
        .build();
    let guard = lock_gil(tc, shared)?;
    let ctx = guard.context();
    if ctx.get_flags().contains(redis_module::ContextFlags::SLAVE) {
        // Writing here would diverge from this node's own master.
        drop(guard);
        let n = batch.entries.len() as u64;
        Stats::add(&shared.stats.apply_errors, n);
        shared
            .stats
            .set_error("this node is a replica (REPLICAOF): remote writes not applied");
        return Ok(());
    }
    let suppressed = Suppressed::new();
    let mut failed = 0;
    let mut newest = 0;
    for e in &batch.entries {
        newest = newest.max(e.clock);
        if let Err(msg) = apply_entry(ctx, &opts, e) {
            failed += 1;
            shared.stats.set_error(format!("apply: {msg}"));
        }
    }
    drop(suppressed);
    drop(guard);
    shared.clock.observe(newest);
    let n = batch.entries.len() as u64;
    Stats::add(&shared.stats.entries_applied, n - failed);
    Stats::add(&shared.stats.apply_errors, failed);
    Stats::add(&shared.stats.batches_applied, 1);
    Ok(())
}
