//! Catching up after an outage, on the main thread: the replication
//! state (`replication`: backlog, acks, sync requests), the per-peer part
//! of it (`peer`), the changes shipped and not acknowledged (`inflight`)
//! and full syncs (`fullsync`). What it decides to resend, `capture::resend`
//! reads.

pub(crate) mod fullsync;
pub(crate) mod inflight;
pub(crate) mod peer;
pub(crate) mod replication;
pub(crate) mod snapshot;
