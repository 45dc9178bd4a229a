//! What a transport must do: move frame bytes into the peer's ring at a given
//! position and bring the peer's head (credit) back. Everything above this
//! trait (sender, poller, apply) is the same for every transport.

pub mod channel;
pub mod handshake;
pub mod rdma;
pub mod stop;
pub mod tcp;
pub(crate) mod tls;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::ops::status::unix_ms;
use crate::proto::ring::{RingGeometry, RingMemory};
pub use stop::StopToken;

/// How often idle link threads wake to check for unload and a silent peer
/// (a TCP read times out, an RDMA receiver's completion wait returns).
pub const IDLE_TICK: Duration = Duration::from_millis(250);

/// The sending half of an established link, as the sender thread sees it.
pub trait RingWriter: Send + Sync {
    /// Geometry of the ring the peer registered for us.
    fn geometry(&self) -> RingGeometry;

    /// Places `bytes` into the peer's ring at absolute position `pos`.
    /// The caller guarantees the bytes do not wrap and fit the credit.
    ///
    /// # Errors
    /// An I/O or link error; the link is then dead.
    fn post_write(&self, pos: u64, bytes: &[u8]) -> Result<()>;

    /// Highest head the peer has returned: the sender may write up to
    /// `credit() + capacity`.
    fn credit(&self) -> u64;

    /// Whether the link still works.
    fn is_alive(&self) -> bool;

    /// Milliseconds since anything was sent on the link.
    fn idle_ms(&self) -> u64;

    /// Tells the peer we are alive.
    ///
    /// # Errors
    /// An I/O or link error; the link is then dead.
    fn send_keepalive(&self) -> Result<()>;

    /// Tears the link down; blocked reads and writes return.
    fn close(&self);
}

/// What a transport's receive loop hands to the layer above it: placed
/// bytes to decode and apply, credit from the peer, idle ticks.
pub trait Delivery {
    /// The ring holds the peer's bytes up to `placed`: decode and apply what
    /// is complete; returns a head to send back as credit, if one is due.
    ///
    /// # Errors
    /// Bad frames, or unload while waiting to apply.
    fn placed(&mut self, ring: &dyn RingMemory, placed: u64) -> Result<Option<u64>>;
    /// Nothing arrived for a while; `Err` ends the link (unload, silent
    /// peer, replaced by a newer connection).
    ///
    /// # Errors
    /// Why the link must end.
    fn idle(&mut self, last_rx: Instant) -> Result<()>;
    /// Nothing arrived since `last_rx`: once that is a tick ago, a head to
    /// return as credit, if any consumption was held back (see
    /// [`crate::proto::ring::CreditPolicy`]).
    fn idle_credit(&mut self, last_rx: Instant) -> Option<u64>;
    /// The peer returned credit up to `head`.
    fn credit(&mut self, head: u64);
    /// Position up to which the ring has been consumed.
    fn head(&self) -> u64;
    /// Counts bytes the peer placed.
    fn received(&mut self, bytes: u64);
    /// Counts a malformed message or frame (the link then closes).
    fn rejected(&mut self);
}

/// Link-level state every transport's sending half keeps: liveness, the
/// credit the peer returned, credit waiting to go back, last transmission.
#[derive(Debug)]
pub struct LinkFlags {
    peer_head: AtomicU64,
    alive: AtomicBool,
    credit_to_send: AtomicU64,
    credit_pending: AtomicBool,
    last_tx_ms: AtomicU64,
}

impl Default for LinkFlags {
    fn default() -> Self {
        Self {
            peer_head: AtomicU64::new(0),
            alive: AtomicBool::new(true),
            credit_to_send: AtomicU64::new(0),
            credit_pending: AtomicBool::new(false),
            last_tx_ms: AtomicU64::new(unix_ms()),
        }
    }
}

impl LinkFlags {
    /// Highest head the peer returned.
    pub fn credit(&self) -> u64 {
        self.peer_head.load(Ordering::Acquire)
    }

    /// Records credit the peer returned.
    pub fn credit_received(&self, head: u64) {
        self.peer_head.fetch_max(head, Ordering::AcqRel);
    }

    /// Whether the link still works.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Marks the link dead; true only for the first call.
    pub fn kill(&self) -> bool {
        self.alive.swap(false, Ordering::AcqRel)
    }

    /// Milliseconds since the last transmission.
    pub fn idle_ms(&self) -> u64 {
        unix_ms().saturating_sub(self.last_tx_ms.load(Ordering::Relaxed))
    }

    /// Records a transmission.
    pub fn sent(&self) {
        self.last_tx_ms.store(unix_ms(), Ordering::Relaxed);
    }

    /// Queues `head` to be returned to the peer.
    pub fn queue_credit(&self, head: u64) {
        self.credit_to_send.fetch_max(head, Ordering::AcqRel);
        self.credit_pending.store(true, Ordering::Release);
    }

    /// Whether credit waits to be sent.
    pub fn credit_waiting(&self) -> bool {
        self.credit_pending.load(Ordering::Acquire)
    }

    /// Takes the credit waiting to be sent, if any.
    pub fn take_credit(&self) -> Option<u64> {
        self.credit_pending
            .swap(false, Ordering::AcqRel)
            .then(|| self.credit_to_send.load(Ordering::Acquire))
    }
}

/// The CREDIT message returning `head`.
pub fn credit_message(head: u64) -> [u8; crate::proto::control::HEADER_LEN] {
    crate::proto::control::MessageHeader {
        op: crate::proto::control::Op::Credit,
        len: 0,
        arg: head,
    }
    .encode()
}

/// The KEEPALIVE message.
pub fn keepalive_message() -> [u8; crate::proto::control::HEADER_LEN] {
    crate::proto::control::MessageHeader {
        op: crate::proto::control::Op::Keepalive,
        len: 0,
        arg: 0,
    }
    .encode()
}
