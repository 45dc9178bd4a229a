//! Shipping: the bounded queue from the main thread to the sender
//! (`queue`) and the sender thread that writes frames into the peer's
//! ring within its credit (`sender`).

pub mod queue;
pub(crate) mod sender;
