//! The protocol, pure and fuzzed: what travels (`entry`), its frames
//! (`wire`), the ring they land in (`ring`), the link's control messages
//! (`control`), the handshake and its authentication (`handshake`, `auth`).
//! Knows nothing of threads, sockets or Redis.

pub mod auth;
pub mod control;
pub mod entry;
pub mod handshake;
pub mod ring;
pub mod wire;
