//! Shipping: the sender thread takes batches off the queue from the main
//! thread (`shared::queue`) and writes frames into the peer's ring within
//! its credit (`sender`).

pub(crate) mod sender;
