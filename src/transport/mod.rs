//! What a transport must do: move frame bytes into the peer's ring at a given
//! position and bring the peer's head (credit) back. Everything above this
//! trait (sender, poller, apply) is the same for every transport.

pub mod tcp;

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
