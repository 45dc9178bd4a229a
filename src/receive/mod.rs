//! Receiving: complete, verified frames out of our ring (`poller`, on
//! the link thread) and their application on the main thread under
//! last-writer-wins (`apply`, which runs what `apply_plan` decides).

pub(crate) mod apply;
mod apply_plan;
pub mod poller;
