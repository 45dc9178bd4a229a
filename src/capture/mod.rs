//! Capture on the main thread: keyspace events and the command filter
//! record what changed (`hook`, `silent`, `past_expiry`), costly keys rest (`hotkeys`),
//! once per event-loop iteration `flush` reads the changed keys into a
//! batch for the sender (what it does decided by `flush_plan`, pure), `resend` reads again what the peer misses
//! (backlog, full sync), and `persist` keeps the versions durable with the
//! data (RDB aux data, the stamps in the AOF). `state` is the main
//! thread's state, in one value. `transactions` holds the merged changes
//! queued in MULTI until their EXEC. `ttl` ships a write of a whole-value
//! key's TTL alone as such.

pub(crate) mod appends;
pub mod command_names;
pub(crate) mod counters;
pub mod fields;
pub(crate) mod flush;
pub mod flush_plan;
pub(crate) mod hashes;
pub(crate) mod hook;
pub mod hotkeys;
pub mod increments;
pub(crate) mod libraries;
pub mod past_expiry;
pub(crate) mod persist;
pub(crate) mod resend;
pub mod silent;
pub(crate) mod state;
pub mod transactions;
pub(crate) mod ttl;
