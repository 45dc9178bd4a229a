//! Receiving: complete, verified frames out of our ring (`poller`, on
//! the link thread) and their application on the main thread under
//! last-writer-wins (`apply`).

pub(crate) mod apply;
pub mod poller;
