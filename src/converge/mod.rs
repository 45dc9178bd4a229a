//! Convergence decisions, pure: the hybrid clock, the changes still to
//! ship (`changes`), the version store (stamps, tombstones, floors,
//! watermarks, last writer wins) and its journal. Knows nothing of
//! threads, sockets or Redis.

pub mod appends;
pub mod changes;
pub mod clock;
pub mod clock_lead;
pub mod db_versions;
pub mod journal;
pub mod key_table;
pub mod libraries;
pub mod merge;
pub mod node_places;
pub mod shrink;
pub mod sweep;
pub mod ttl_ops;
pub mod version;
