//! Flush the dirty set once per event-loop iteration: snapshot each key
//! (DUMP payload and absolute expiry, or "deleted"), stamp the clock, and
//! queue the lot as one batch. A transaction or script runs inside one
//! iteration, so it always ships as one atomic batch.

use redis_module::{CallOptions, CallOptionsBuilder, CallReply, CallResult, Context};

use crate::entry::{Batch, Entry, Op};
use crate::hook::{PendingOp, Suppressed, DIRTY};
use crate::runtime::Shared;
use crate::server;
use crate::status::{LinkState, Stats};

/// Reads one key's current state: its DUMP payload and expiry, or `Delete`.
fn snapshot_key(ctx: &Context, opts: &CallOptions, key: Vec<u8>) -> Op {
    let args: [&[u8]; 1] = [&key];
    let payload = match ctx.call_ext::<_, CallResult>("DUMP", opts, &args[..]) {
        Ok(CallReply::String(s)) => s.as_bytes().to_vec(),
        _ => return Op::Delete { key },
    };
    let expiry_ms = match ctx.call_ext::<_, CallResult>("PEXPIRETIME", opts, &args[..]) {
        Ok(CallReply::I64(ms)) if ms.to_i64() > 0 => Some(ms.to_i64() as u64),
        _ => None,
    };
    Op::Value {
        key,
        payload,
        expiry_ms,
    }
}

/// Turns pending ops into a stamped batch, reading values now.
fn snapshot(ctx: &Context, shared: &Shared, ops: Vec<PendingOp>) -> Batch {
    let opts = CallOptionsBuilder::new().errors_as_replies().build();
    let original_db = server::selected_db(ctx);
    let entries = ops
        .into_iter()
        .map(|op| {
            let (db, op) = match op {
                PendingOp::Key { db, key } => {
                    server::select_db(ctx, db);
                    (db, snapshot_key(ctx, &opts, key))
                }
                PendingOp::FlushDb(db) => (db, Op::FlushDb),
                PendingOp::FlushAll => (0, Op::FlushAll),
                PendingOp::SwapDb(a, b) => (a, Op::SwapDb { other: b }),
            };
            Entry {
                origin: shared.node_id,
                seq: shared.next_seq(),
                clock: shared.clock.now(),
                db,
                op,
            }
        })
        .collect();
    server::select_db(ctx, original_db);
    Batch { entries }
}

/// The pending ops a batch was made from (to keep its keys dirty).
fn pending_of(batch: Batch) -> Vec<PendingOp> {
    batch
        .entries
        .into_iter()
        .map(|e| match e.op {
            Op::Value { key, .. } | Op::Delete { key } => PendingOp::Key { db: e.db, key },
            Op::FlushDb => PendingOp::FlushDb(e.db),
            Op::FlushAll => PendingOp::FlushAll,
            Op::SwapDb { other } => PendingOp::SwapDb(e.db, other),
        })
        .collect()
}

/// Ships what changed since the last call. Called before the event loop sleeps.
pub fn flush(ctx: &Context, shared: &Shared) {
    let ops = {
        let mut dirty = DIRTY.lock();
        if dirty.is_empty() {
            return;
        }
        dirty.take()
    };
    if server::is_replica_or_loading() {
        // A replica's data comes from its master; it has nothing of its own to ship.
        Stats::add(&shared.stats.entries_dropped, ops.len() as u64);
        return;
    }
    if shared.stats.link() != LinkState::Up {
        // No catch-up yet: what changes while the link is down is not replicated.
        Stats::add(&shared.stats.entries_dropped, ops.len() as u64);
        return;
    }
    if shared.queue.is_full() {
        // Never block Redis, and do not DUMP what cannot be queued: keep the
        // keys dirty and retry next iteration.
        Stats::add(&shared.stats.queue_overflows, 1);
        DIRTY.lock().restore(ops);
        return;
    }
    let batch = {
        let _guard = Suppressed::new();
        snapshot(ctx, shared, ops)
    };
    // Cannot fail after `is_full` said no (this thread is the only producer),
    // but if it did, the keys would stay dirty like above.
    if let Err(batch) = shared.queue.push(batch) {
        Stats::add(&shared.stats.queue_overflows, 1);
        DIRTY.lock().restore(pending_of(batch));
    }
}
