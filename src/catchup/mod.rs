//! Catching up after an outage, on the main thread: the replication
//! state (`replication`: backlog, acks, sync requests), the per-peer part
//! of it (`peer`), what this node asks of the peer (`probe`), the
//! changes shipped and not acknowledged (`inflight`), the sync owed
//! (`snapshot`), full syncs (`fullsync`), the big values a catch-up
//! reads a slice at a time (`big_read`) and the big merge states it ships
//! a slice at a time (`state_slices`). What it decides to resend,
//! `capture::resend` reads.

pub(crate) mod big_read;
pub(crate) mod fullsync;
pub(crate) mod inflight;
pub(crate) mod peer;
pub(crate) mod probe;
pub(crate) mod replication;
pub(crate) mod snapshot;
pub(crate) mod state_slices;
