//! The link handshake over a transport: drives the pure state machine of
//! [`crate::proto::handshake`] over any [`MessageIo`] within a deadline,
//! sending a REFUSE saying why when it fails.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::error::{Error, HandshakeFailure as F, Result};
use crate::proto::auth::{self, Side, BINDING_LEN};
use crate::proto::control::{refuse_message, Hello, MessageHeader, RefuseReason, RemoteRing};
use crate::proto::handshake::{Handshake, Local, Step};

/// Moves handshake messages over a transport.
pub trait MessageIo {
    /// Sends one whole message.
    ///
    /// # Errors
    /// I/O or transport errors.
    fn send(&mut self, msg: &[u8]) -> Result<()>;

    /// Receives the next message (header checked, body of `header.len`
    /// bytes, at most [`crate::proto::control::MAX_CONTROL_LEN`] in all), giving up
    /// at `deadline`.
    ///
    /// # Errors
    /// Malformed headers ([`HandshakeFailure::Malformed`](F::Malformed)),
    /// the deadline ([`HandshakeFailure::Incomplete`](F::Incomplete)), I/O errors.
    fn recv(&mut self, deadline: Instant) -> Result<(MessageHeader, Vec<u8>)>;
}

/// Shared between a handshake in progress and whoever may cut it short.
#[derive(Debug, Default)]
pub struct Watch {
    abandoned: AtomicBool,
    progressed: AtomicBool,
}

impl Watch {
    /// Asks the handshake to give up at its next read tick.
    pub fn abandon(&self) {
        self.abandoned.store(true, Ordering::Release);
    }

    /// Whether the handshake was asked to give up.
    pub fn is_abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Acquire)
    }

    /// Whether the peer has sent a valid HELLO: a real peer does so at
    /// once, an idle or half-open connection never does.
    pub fn progressed(&self) -> bool {
        self.progressed.load(Ordering::Acquire)
    }
}

/// What a completed handshake yields.
#[derive(Debug, Clone, Copy)]
pub struct Agreed {
    /// The peer's HELLO (authenticated when a secret is in use).
    pub peer: Hello,
    /// The ring the peer registered for us.
    pub peer_ring: RemoteRing,
}

/// Runs a handshake over `io` until `deadline`. `register` is called once
/// the peer is authenticated and kept, and returns the fresh ring to
/// announce. `Ok(None)`: authenticated but the tie-break drops this
/// connection. On failure a REFUSE is sent (best effort) before returning.
/// `watch` learns when the peer's HELLO was accepted.
///
/// # Errors
/// [`Error::Handshake`] or transport errors.
pub fn run(
    io: &mut dyn MessageIo,
    local: &Local,
    side: Side,
    binding: [u8; BINDING_LEN],
    deadline: Instant,
    watch: &Watch,
    register: &mut dyn FnMut() -> Result<RemoteRing>,
) -> Result<Option<Agreed>> {
    let nonce = auth::nonce()?;
    let (mut hs, hello) = Handshake::new(local, side, nonce, binding);
    let result = drive(io, &mut hs, hello, deadline, watch, register);
    if let Err(Error::Handshake { failure, .. }) = &result {
        let reason = match failure {
            F::Auth => Some(RefuseReason::Auth),
            F::Version => Some(RefuseReason::Version),
            F::SameNodeId => Some(RefuseReason::SameNodeId),
            F::ClockOffset => Some(RefuseReason::ClockOffset),
            F::Malformed => Some(RefuseReason::Malformed),
            F::Incomplete => None,
        };
        if let Some(r) = reason {
            let _ = io.send(&refuse_message(r));
        }
    }
    result
}

fn drive(
    io: &mut dyn MessageIo,
    hs: &mut Handshake<'_>,
    hello: Vec<u8>,
    deadline: Instant,
    watch: &Watch,
    register: &mut dyn FnMut() -> Result<RemoteRing>,
) -> Result<Option<Agreed>> {
    io.send(&hello)?;
    loop {
        let (header, body) = io.recv(deadline)?;
        let step = hs.on_message(&header, &body)?;
        watch.progressed.store(true, Ordering::Release);
        match step {
            Step::Send(msg) => io.send(&msg)?,
            Step::Wait => {}
            Step::Authenticated { reply, keep } => {
                if let Some(msg) = reply {
                    io.send(&msg)?;
                }
                if !keep {
                    return Ok(None);
                }
                let ring = register()?;
                io.send(&hs.ring_message(&ring)?)?;
            }
            Step::Done(peer_ring) => {
                let peer = *hs
                    .peer()
                    .ok_or_else(|| Error::handshake(F::Malformed, "RING before HELLO"))?;
                return Ok(Some(Agreed { peer, peer_ring }));
            }
        }
    }
}
