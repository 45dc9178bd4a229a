//! rdmasync: a Redis module that keeps two Redis masters in sync while both
//! take writes.
//!
//! # Data path (one module per stage)
//! `hook` (keyspace and server events -> dirty set) -> `capture` (once per
//! event-loop iteration: snapshot dirty keys -> `entry::Batch`) -> `queue`
//! (bounded, lock-free) -> `sender` (frames from `wire` into the peer's ring
//! at its tail, bounded by credit, `ring`) -> `transport` (moves bytes into
//! the peer's ring) -> `poller` on the peer (complete, verified frames ->
//! batches) -> `apply` (batch -> Redis on the main thread, echo suppressed).
//! `link` runs the connection lifecycle, `accept` takes incoming
//! connections, `handshake` (with `auth` and, over TCP, `tls`) admits only
//! the real peer before any ring is disclosed; `status` holds the counters.
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
//! `unsafe` lives in `server` (Redis API calls the `redis-module` crate does
//! not wrap) and `transport::rdma` (libibverbs/librdmacm). Every block carries a `SAFETY:`
//! comment. No panic crosses into redis-server: callbacks and threads run
//! under `catch_unwind`.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
// Unit tests build without the Redis wiring (`module`), which is what calls
// most of the crate.
#![cfg_attr(any(test, not(feature = "module")), allow(dead_code))]

pub(crate) mod accept;
pub(crate) mod apply;
pub mod auth;
pub(crate) mod capture;
pub(crate) mod catchup;
pub mod clock;
pub mod config;
pub mod control;
pub mod entry;
pub mod error;
pub(crate) mod faults;
pub(crate) mod fullsync;
pub mod handshake;
pub(crate) mod hook;
pub mod hotkeys;
pub(crate) mod inflight;
pub(crate) mod link;
pub(crate) mod persist;
pub mod poller;
pub mod queue;
pub(crate) mod resend;
pub mod ring;
pub(crate) mod runtime;
pub(crate) mod sender;
pub(crate) mod server;
pub(crate) mod settings;
pub(crate) mod snapshot;
pub mod status;
pub(crate) mod tls;
pub(crate) mod transport;
pub mod version;
pub mod wire;

#[cfg(all(feature = "module", not(test)))]
mod module;
