//! The link to the peer: dialling, the handshake and the receive loop
//! (`session`, thread rdmasync-link) and incoming connections
//! (`accept`, thread rdmasync-accept).

pub(crate) mod accept;
pub(crate) mod session;
