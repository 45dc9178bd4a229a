pub mod clock;
pub mod config;
pub mod control;
pub mod entry;
pub mod error;
pub mod poller;
pub mod ring;
pub mod wire;
