//! Convergence decisions, pure: the hybrid clock, the version store
//! (stamps, tombstones, floors, watermarks, last writer wins) and its
//! journal. Knows nothing of threads, sockets or Redis.

pub mod clock;
pub mod journal;
pub mod version;
