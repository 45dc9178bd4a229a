//! The crate's one error type: a variant per failing operation.

use std::io;

/// Everything that can fail in rdmasync, one variant per failing call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A module argument was missing, unknown or invalid (`RedisModule_OnLoad`).
    #[error("argument '{arg}': {reason}")]
    Config {
        /// The argument's name as the operator wrote it.
        arg: String,
        /// Why it was refused.
        reason: String,
    },
    /// Binding the listening socket failed (`bind`/`listen`).
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address we tried.
        addr: String,
        /// The OS error.
        source: io::Error,
    },
    /// Resolving the peer's address failed (`getaddrinfo`).
    #[error("cannot resolve peer {peer}: {source}")]
    Resolve {
        /// The peer as configured.
        peer: String,
        /// The OS error.
        source: io::Error,
    },
    /// Dialing the peer failed (`connect`).
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The address dialed.
        addr: String,
        /// The OS error.
        source: io::Error,
    },
    /// Reading from or writing to the link socket failed (`read`/`write`).
    #[error("link i/o: {0}")]
    LinkIo(#[from] io::Error),
    /// The peer said something the protocol does not allow.
    #[error("protocol: {0}")]
    Protocol(String),
    /// A frame in the ring failed to decode (`wire::decode_frame`).
    #[error("bad frame: {0}")]
    Wire(#[from] crate::proto::wire::WireError),
    /// The link was closed (by us, the peer, or shutdown).
    #[error("link closed")]
    LinkClosed,
    /// The handshake with a connecting or dialed peer failed
    /// (`handshake::Handshake`, TLS, or the transport during the handshake).
    #[error("{reason}")]
    Handshake {
        /// What kind of failure, for the counters.
        failure: HandshakeFailure,
        /// What the log says.
        reason: String,
    },
    /// Starting a background thread failed (`std::thread::Builder::spawn`).
    #[error("cannot spawn thread {name}: {source}")]
    Spawn {
        /// The thread's name.
        name: &'static str,
        /// The OS error.
        source: io::Error,
    },
}

/// Kinds of handshake failure; each has its own counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// Bytes no rdmasync peer sends (`bad_frames`).
    Malformed,
    /// Wrong or missing secret, or a TLS certificate that does not verify
    /// (`auth_failures`).
    Auth,
    /// Versions differ (protocol, frames, RDB format) (`handshakes_refused`).
    Version,
    /// Both nodes have the same node id (`handshakes_refused`).
    SameNodeId,
    /// Closed, timed out, or evicted before completing (`handshakes_incomplete`).
    Incomplete,
}

impl Error {
    /// A handshake error of `failure` kind.
    pub fn handshake(failure: HandshakeFailure, reason: impl Into<String>) -> Self {
        Self::Handshake {
            failure,
            reason: reason.into(),
        }
    }

    /// How a failed handshake is counted: its kind, or
    /// [`HandshakeFailure::Incomplete`] for I/O and transport errors.
    pub fn handshake_failure(&self) -> HandshakeFailure {
        match self {
            Self::Handshake { failure, .. } => *failure,
            _ => HandshakeFailure::Incomplete,
        }
    }
}

/// Shorthand used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
