//! Capture on the main thread: keyspace events and the command filter
//! record what changed (`hook`, `silent`), costly keys rest (`hotkeys`),
//! and once per event-loop iteration `flush` reads the changed keys into
//! a batch for the sender.

pub(crate) mod flush;
pub(crate) mod hook;
pub mod hotkeys;
pub mod silent;
pub(crate) mod state;
