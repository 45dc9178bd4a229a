//! The Redis side: the module API the `redis-module` crate does not
//! wrap (`server` and the allocator `alloc`, the only `unsafe` outside
//! `transport::rdma`) and reads
//! of the keyspace (`snapshot`, with `dump` encoding collections). Knows
//! nothing of the module's state.

pub mod alloc;
pub mod dump;
pub mod libraries;
pub mod plain_value;
pub mod rdb_read;
pub(crate) mod server;
pub(crate) mod snapshot;
