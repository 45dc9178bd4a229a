//! What a transport must do: move frame bytes into the peer's ring at a given
//! position and bring the peer's head (credit) back. Everything above this
//! trait (sender, poller, apply) is the same for every transport.

pub mod rdma;
pub mod tcp;

use std::time::Instant;

use crate::error::Result;
use crate::ring::RingGeometry;

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
    fn placed(&mut self, ring: &[u8], placed: u64) -> Result<Option<u64>>;
    /// Nothing arrived for a while; `Err` ends the link (unload, silent
    /// peer, replaced by a newer connection).
    ///
    /// # Errors
    /// Why the link must end.
    fn idle(&mut self, last_rx: Instant) -> Result<()>;
    /// The peer returned credit up to `head`.
    fn credit(&mut self, head: u64);
    /// Position up to which the ring has been consumed.
    fn head(&self) -> u64;
    /// Counts bytes the peer placed.
    fn received(&mut self, bytes: u64);
    /// Counts a malformed message or frame (the link then closes).
    fn rejected(&mut self);
}
