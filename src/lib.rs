//! rdmasync: a Redis module that keeps two Redis masters in sync while both
//! take writes.
//!
//! # Data path (one folder per stage, docs/architecture.md)
//! `capture::hook` (keyspace and server events -> dirty set) ->
//! `capture::flush` (once per event-loop iteration: snapshot dirty keys
//! through `redis::snapshot` -> `proto::entry::Batch`) -> `shared::queue`
//! (bounded, lock-free) -> `ship::sender` (frames from `proto::wire` into
//! the peer's ring at its tail, bounded by credit, `proto::ring`) ->
//! `transport` (moves bytes into the peer's ring) -> `receive::poller` on
//! the peer (complete, verified frames -> batches) -> `receive::apply`
//! (batch -> Redis on the main thread, echo suppressed). `link::session`
//! runs the connection lifecycle, `link::accept` takes incoming
//! connections, `proto::handshake` (driven by `transport::handshake`, with `proto::auth` and, over TCP,
//! `transport::tls`) admits only the real peer before any ring is
//! disclosed; `ops::status` holds the counters. The convergence state
//! (`converge::version`: stamps, tombstones, floors, watermarks) is as
//! durable as the data: `capture::persist` writes it as RDB aux data,
//! `converge::journal` records every change of it into the AOF and the
//! replication stream with the change (`rdmasync.stamps`), and `catchup`
//! decides what the peer misses after an outage.
//!
//! # Threads
//! Redis' main thread runs the hook, the capture, the apply (woken through a
//! pipe, run in a 0 ms timer), `RDMASYNC.STATUS` and `RDMASYNC.DEBUG` (`faults`). The module adds three
//! threads: `rdmasync-send` (queue -> ring), `rdmasync-link` (dial, handshake,
//! then receive and decode) and `rdmasync-accept` (incoming connections),
//! plus one short-lived `rdmasync-hs` per incoming handshake (at most
//! `accept::MAX_PENDING`, joined by the acceptor).
//! All are joined at `MODULE UNLOAD`; none ever takes the GIL, so a
//! busy server cannot starve them and unload cannot deadlock with them.
//!
//! # Safety
//! `unsafe` lives in `redis::server` (Redis API calls the `redis-module`
//! crate does not wrap) and `transport::rdma` (libibverbs/librdmacm). Every block carries a `SAFETY:`
//! comment. No panic crosses into redis-server: callbacks and threads run
//! under `catch_unwind`.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
// Unit tests build without the Redis wiring (`module`), which is what calls
// most of the crate.
#![cfg_attr(any(test, not(feature = "module")), allow(dead_code))]

pub mod capture;
pub mod catchup;
pub mod converge;
pub mod error;
pub mod link;
pub mod ops;
pub mod proto;
pub mod receive;
pub mod redis;
pub(crate) mod runtime;
pub mod shared;
pub mod ship;
pub(crate) mod transport;

#[cfg(all(feature = "module", not(test)))]
mod module;
