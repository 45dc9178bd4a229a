//! The crate's one error type: a variant per failing operation, with the
//! RDMA transport's calls and the peer's protocol violations as their own
//! enums inside it (causes kept as sources).

mod rdma;
mod violation;

use std::io;

pub use rdma::RdmaError;
pub use violation::Violation;

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
    #[error("cannot listen on {addr}")]
    Listen {
        /// The address we tried.
        addr: String,
        /// The OS error.
        source: io::Error,
    },
    /// Listening for RDMA connections failed (`rdma_bind_addr`/`rdma_listen`).
    #[error("cannot listen for rdma on {addr}")]
    ListenRdma {
        /// The address we tried.
        addr: String,
        /// The verbs error.
        source: RdmaError,
    },
    /// Resolving the peer's address failed (`getaddrinfo`).
    #[error("cannot resolve peer {peer}")]
    Resolve {
        /// The peer as configured.
        peer: String,
        /// The OS error.
        source: io::Error,
    },
    /// Dialing the peer failed (`connect`).
    #[error("cannot connect to {addr}")]
    Connect {
        /// The address dialed.
        addr: String,
        /// The OS error.
        source: io::Error,
    },
    /// Reading from or writing to the link socket failed (`read`/`write`).
    #[error("link i/o")]
    LinkIo(#[from] io::Error),
    /// The peer sent bytes the ring or link protocol does not allow.
    #[error("protocol violation")]
    Violation(#[from] Violation),
    /// A verbs or rdma_cm call failed, or an RDMA check did not hold.
    #[error("rdma")]
    Rdma(#[from] RdmaError),
    /// The configured ring size is not one a ring can have (`ring-size`).
    #[error("invalid local ring size {size}")]
    InvalidRingSize {
        /// The configured size.
        size: u64,
    },
    /// No message from the peer for longer than a live peer is ever silent.
    #[error("peer silent for {secs} s")]
    PeerSilent {
        /// How long.
        secs: u64,
    },
    /// A newer connection from the peer replaced this one.
    #[error("replaced by a newer connection")]
    Replaced,
    /// One ring write larger than a TCP write message can carry.
    #[error("write of {len} bytes over 4 GiB")]
    WriteTooLarge {
        /// Its length.
        len: usize,
    },
    /// The sender popped an entry no frame of the link can carry (the main
    /// thread refuses those before numbering them: a bug). Sending the rest
    /// of its batch would leave a gap in the sequence, so the link closes.
    #[error("entry {seq} cannot be framed in frames of at most {max_frame} bytes")]
    Unframeable {
        /// The entry's sequence number.
        seq: u64,
        /// The largest frame of the link.
        max_frame: usize,
    },
    /// A frame in the ring failed to decode (`wire::decode_frame`).
    #[error("bad frame")]
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
    #[error("cannot spawn thread {name}")]
    Spawn {
        /// The thread's name.
        name: &'static str,
        /// The OS error.
        source: io::Error,
    },
}

pub use crate::proto::handshake::HandshakeFailure;

impl From<crate::proto::handshake::Refusal> for Error {
    fn from(refusal: crate::proto::handshake::Refusal) -> Self {
        Self::Handshake {
            failure: refusal.failure,
            reason: refusal.reason,
        }
    }
}

/// An error and its causes, outermost first, as one line for the log
/// (`cannot connect to 10.0.0.2:7000: Connection refused (os error 111)`).
pub fn report(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        line.push_str(": ");
        line.push_str(&e.to_string());
        cause = e.source();
    }
    line
}

impl Error {
    /// This error and its causes as one line (see [`report`]).
    pub fn report(&self) -> String {
        report(self)
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_names_every_cause_once_outermost_first() {
        let e = Error::ListenRdma {
            addr: "10.0.0.1:7000".into(),
            source: RdmaError::Bind(io::Error::from_raw_os_error(98)),
        };
        let line = e.report();
        assert!(
            line.starts_with("cannot listen for rdma on 10.0.0.1:7000: rdma_bind_addr: "),
            "{line}"
        );
        assert_eq!(line.matches("rdma_bind_addr").count(), 1, "{line}");
        assert!(line.contains("os error 98"), "{line}");
        let v: Error =
            Violation::BadControlMessage(crate::proto::control::ControlError::BadOp(9)).into();
        assert_eq!(v.report().matches("protocol violation").count(), 1);
    }
}
