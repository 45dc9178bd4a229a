//! Catching up after an outage, on the main thread. In reading order:
//!
//! 1. `progress`: where one peer stands, one value (`Down`, `Probe`,
//!    `Snapshot`, `Replicate`), with a named transition per event;
//! 2. what it holds while something is owed: what this node asks of the
//!    peer (`probe`) and the sync of our state owed and shipping
//!    (`snapshot`);
//! 3. `peer`: one peer's progress with its ledgers (backlog, changes
//!    shipped and not acknowledged in `inflight`, acks both ways);
//! 4. `replication`: the node's state and the decisions that need both
//!    (backlog, acks, sync requests, coverage, tombstones);
//! 5. what ships: full syncs and syncs since watermarks (`fullsync`), the
//!    big values a catch-up reads a slice at a time (`big_read`) and the
//!    big merge states it ships a slice at a time (`state_slices`).
//!
//! The I/O is elsewhere and asks these what to do: `capture::flush`
//! (link up, requests, syncs started, acks), `capture::resend` (reading
//! what is shipped again), `receive::apply` (acks, requests and link
//! events from the peer).

pub(crate) mod big_read;
pub(crate) mod fullsync;
pub(crate) mod inflight;
pub(crate) mod peer;
pub(crate) mod probe;
pub(crate) mod progress;
pub(crate) mod replication;
pub(crate) mod snapshot;
pub(crate) mod state_slices;
