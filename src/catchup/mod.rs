//! Catching up after an outage, on the main thread: the replication
//! state (`replication`: backlog, acks, sync requests), the changes
//! shipped and not acknowledged (`inflight`), resends (`resend`) and
//! full syncs (`fullsync`).

pub(crate) mod fullsync;
pub(crate) mod inflight;
pub(crate) mod peer;
pub(crate) mod replication;
pub(crate) mod resend;
