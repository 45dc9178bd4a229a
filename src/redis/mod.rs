//! The Redis side: the module API the `redis-module` crate does not
//! wrap (`server`, the only `unsafe` outside `transport::rdma`), reads of
//! the keyspace (`snapshot`, with `dump` encoding collections), the
//! versions in the RDB and the AOF (`persist`) and module configs
//! (`settings`).

pub mod dump;
pub(crate) mod persist;
pub(crate) mod server;
pub(crate) mod settings;
pub(crate) mod snapshot;
