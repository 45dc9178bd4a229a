//! Receiving: complete, verified frames out of our ring (`poller`, on
//! the link thread) and their application on the main thread under
//! last-writer-wins (`apply`, which runs what `apply_plan` decides); on
//! the link thread, `sequence` checks that nothing went missing on a link.

pub(crate) mod apply;
mod apply_append;
mod apply_counter;
mod apply_fields;
mod apply_functions;
mod apply_plan;
pub mod poller;
pub mod sequence;
pub(crate) mod staging;
