//! Ring position arithmetic and credit policy, pure.
//!
//! The ring is receiver-owned memory of `capacity` bytes (a power of two).
//! Positions are monotonic 64-bit byte counters: the sender owns the tail,
//! the receiver the head, and `tail - head <= capacity` always holds. A
//! position maps to the byte offset `pos & (capacity - 1)`.

use crate::proto::wire::PAD_LEN;

/// Smallest ring a peer may register: room for several maximal frames.
pub const MIN_RING_SIZE: u64 = 64 * 1024;
/// Largest ring: registered memory is pinned, keep it sane.
pub const MAX_RING_SIZE: u64 = 1 << 30;

/// The receiver's ring as the poller reads it: bytes are only ever copied
/// out, never borrowed, because the peer (its NIC, over RDMA) may write
/// them at any time. The poller checks a frame on its own copy, so what it
/// checked is what it uses.
pub trait RingMemory {
    /// Bytes in the ring.
    fn len(&self) -> usize;

    /// Whether the ring has no bytes (not registered yet).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `dst.len()` bytes from offset `off` into `dst`. The caller
    /// keeps `off + dst.len() <= self.len()`; past it, copies nothing and
    /// returns false.
    fn copy_out(&self, off: usize, dst: &mut [u8]) -> bool;
}

/// A ring in this process's private memory (the TCP receiver's copy, tests).
impl RingMemory for [u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    fn copy_out(&self, off: usize, dst: &mut [u8]) -> bool {
        match off
            .checked_add(dst.len())
            .and_then(|end| self.get(off..end))
        {
            Some(src) => {
                dst.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
}

/// The same, owned (what a `dyn RingMemory` can point at).
impl RingMemory for Vec<u8> {
    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn copy_out(&self, off: usize, dst: &mut [u8]) -> bool {
        self.as_slice().copy_out(off, dst)
    }
}

/// Geometry of one ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingGeometry {
    /// Bytes in the ring; a power of two, at least 4 KiB.
    capacity: u64,
}

/// Where the next frame of `len` bytes goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// At the tail; it fits before the end of the ring.
    AtTail,
    /// Write a padding marker at the tail covering `pad` bytes, then the frame at
    /// the start of the ring.
    WrapAfterPadding {
        /// Bytes from the tail to the end of the ring.
        pad: u64,
    },
}

impl RingGeometry {
    /// A ring of `capacity` bytes, or `None` unless a power of two of at least 4 KiB.
    pub fn new(capacity: u64) -> Option<Self> {
        (capacity.is_power_of_two() && capacity >= 4096).then_some(Self { capacity })
    }

    /// Bytes in the ring.
    pub fn capacity(self) -> u64 {
        self.capacity
    }

    /// Byte offset of `pos` in the ring memory.
    pub fn offset(self, pos: u64) -> usize {
        (pos & (self.capacity - 1)) as usize
    }

    /// Bytes from `pos` to the end of the ring memory.
    pub fn to_end(self, pos: u64) -> u64 {
        self.capacity - self.offset(pos) as u64
    }

    /// Bytes the sender may still write given the receiver's `head`.
    pub fn free(self, tail: u64, head: u64) -> u64 {
        debug_assert!(tail >= head && tail - head <= self.capacity);
        self.capacity - (tail - head)
    }

    /// Where a frame of `len` bytes (aligned, `<= capacity / 2`) written at `tail` goes.
    pub fn place(self, tail: u64, len: u64) -> Placement {
        let to_end = self.to_end(tail);
        if len <= to_end {
            Placement::AtTail
        } else {
            debug_assert!(to_end >= PAD_LEN as u64, "tail must stay frame-aligned");
            Placement::WrapAfterPadding { pad: to_end }
        }
    }

    /// Bytes the sender needs free to write a frame of `len` at `tail`
    /// (padding included).
    pub fn needed(self, tail: u64, len: u64) -> u64 {
        match self.place(tail, len) {
            Placement::AtTail => len,
            Placement::WrapAfterPadding { pad } => pad + len,
        }
    }

    /// Whether a write of `len` bytes at `pos` continues a ring whose bytes are
    /// placed up to `placed`: either right there, or at the start of the next
    /// lap after a padding marker. It must not wrap nor overrun `head`.
    pub fn write_continues(self, placed: u64, head: u64, pos: u64, len: u64) -> bool {
        let contiguous = pos == placed
            || (self.offset(pos) == 0 && pos > placed && pos - placed == self.to_end(placed));
        contiguous
            && len > 0
            && self.offset(pos) as u64 + len <= self.capacity
            && pos + len - head <= self.capacity
    }

    /// Where the bytes placed end after a WRITE_WITH_IMM whose immediate is
    /// the low 32 bits of its end position, with bytes placed up to
    /// `placed` and the receiver's head at `head`. `None` when that end does
    /// not move forward or lies more than a ring past the head.
    pub fn imm_write_end(self, placed: u64, imm: u32, head: u64) -> Option<u64> {
        let end = placed + u64::from(imm.wrapping_sub(placed as u32));
        (end > placed && end - head <= self.capacity).then_some(end)
    }

    /// Largest frame a sender may write: a quarter of the ring, at most 1 MiB,
    /// so that wrapping never needs more than the ring and bulk traffic keeps
    /// several frames in flight.
    pub fn max_frame(self) -> usize {
        (self.capacity / 4).min(1 << 20) as usize
    }
}

/// When the receiver returns its head to the sender.
///
/// Credit goes back once an eighth of the ring has been consumed since the
/// last return, so the sender never waits for the whole ring to drain. When
/// the receiver runs out of placed bytes it returns credit only once a
/// sixty-fourth has accumulated: one message per small batch would cost a
/// send, a wake-up of the peer's receiver and of its sender for every batch.
/// What is left over goes back when the link idles ([`Self::leftover`]).
/// The sender never needs that leftover to make progress: less than an
/// eighth stays unreturned, and a frame with its wrap padding needs at most
/// half the ring ([`RingGeometry::max_frame`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditPolicy {
    /// Head last returned to the sender.
    returned: u64,
    /// Consumed bytes that trigger a return without waiting for idle.
    threshold: u64,
    /// Consumed bytes that trigger a return once the receiver is idle.
    idle_threshold: u64,
}

impl CreditPolicy {
    /// A policy for `geometry`.
    pub fn new(geometry: RingGeometry) -> Self {
        Self {
            returned: 0,
            threshold: (geometry.capacity() / 8).max(1),
            idle_threshold: (geometry.capacity() / 64).max(1),
        }
    }

    /// The head to return now, if any. `idle` means no more placed bytes wait.
    pub fn due(&self, head: u64, idle: bool) -> Option<u64> {
        let consumed = head - self.returned;
        (consumed >= self.threshold || (idle && consumed >= self.idle_threshold)).then_some(head)
    }

    /// The head to return when the link has been quiet for a while: any
    /// consumption not yet returned.
    pub fn leftover(&self, head: u64) -> Option<u64> {
        (head > self.returned).then_some(head)
    }

    /// Records that `head` was returned.
    pub fn returned(&mut self, head: u64) {
        debug_assert!(head >= self.returned);
        self.returned = head;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn geometry_rejects_bad_capacities() {
        assert!(RingGeometry::new(0).is_none());
        assert!(RingGeometry::new(1000).is_none());
        assert!(RingGeometry::new(2048).is_none());
        assert_eq!(RingGeometry::new(65536).unwrap().capacity(), 65536);
    }

    #[test]
    fn an_immediate_extends_what_is_placed_across_32_bit_wraps() {
        let g = RingGeometry::new(65536).unwrap();
        assert_eq!(g.imm_write_end(0, 100, 0), Some(100));
        // The immediate carries the low 32 bits of the end position.
        let placed = (5u64 << 32) - 10;
        assert_eq!(g.imm_write_end(placed, 20, placed), Some((5 << 32) + 20));
        // Nothing new, or further than a ring past the head: refused.
        assert_eq!(g.imm_write_end(100, 100, 0), None);
        assert_eq!(g.imm_write_end(0, 65537, 0), None);
        assert_eq!(g.imm_write_end(0, 65536, 0), Some(65536));
    }

    #[test]
    fn offsets_wrap() {
        let g = RingGeometry::new(4096).unwrap();
        assert_eq!(g.offset(0), 0);
        assert_eq!(g.offset(4096), 0);
        assert_eq!(g.offset(4096 * 3 + 8), 8);
        assert_eq!(g.to_end(4096 + 4000), 96);
    }

    #[test]
    fn full_ring_has_no_free_space() {
        let g = RingGeometry::new(4096).unwrap();
        assert_eq!(g.free(4096, 0), 0);
        assert_eq!(g.free(5000, 1000), 96);
        assert_eq!(g.free(100, 100), 4096);
    }

    #[test]
    fn frame_that_would_straddle_wraps_after_padding() {
        let g = RingGeometry::new(4096).unwrap();
        assert_eq!(g.place(4000, 96), Placement::AtTail);
        assert_eq!(g.place(4000, 104), Placement::WrapAfterPadding { pad: 96 });
        assert_eq!(g.needed(4000, 104), 200);
    }

    #[test]
    fn writes_must_continue_the_ring() {
        let g = RingGeometry::new(4096).unwrap();
        assert!(g.write_continues(0, 0, 0, 100));
        assert!(!g.write_continues(0, 0, 8, 100), "gap");
        assert!(!g.write_continues(0, 0, 0, 4097), "wraps");
        assert!(!g.write_continues(4000, 100, 4000, 200), "crosses the end");
        // After a padding marker at 4000, the next write starts the next lap.
        assert!(g.write_continues(4008, 300, 4096, 200));
        assert!(!g.write_continues(4008, 300, 4096 + 8, 200));
        // Never past head + capacity.
        assert!(
            !g.write_continues(4096, 0, 4096, 8),
            "overruns unread bytes"
        );
        assert!(g.write_continues(4096, 8, 4096, 8));
    }

    #[test]
    fn credit_is_returned_incrementally() {
        let g = RingGeometry::new(8192).unwrap();
        let mut p = CreditPolicy::new(g);
        assert_eq!(p.due(0, true), None);
        assert_eq!(p.due(512, false), None);
        assert_eq!(p.due(1024, false), Some(1024));
        p.returned(1024);
        assert_eq!(p.due(1100, false), None);
        // Idle: only once a 64th of the ring (128 bytes) waits.
        assert_eq!(p.due(1100, true), None);
        assert_eq!(p.leftover(1100), Some(1100));
        assert_eq!(p.due(1152, true), Some(1152));
        p.returned(1152);
        assert_eq!(p.leftover(1152), None);
    }

    proptest! {
        /// A sender and a receiver driven in random order never overwrite unread
        /// bytes, never straddle the end, and the receiver sees every frame in order.
        #[test]
        fn sender_and_receiver_agree(
            lens in proptest::collection::vec(1u64..128, 1..300),
            steps in proptest::collection::vec(any::<bool>(), 1..2000),
        ) {
            let g = RingGeometry::new(4096).unwrap();
            let frames: Vec<u64> = lens.iter().map(|l| l * 8).collect();
            // What the sender wrote, per position: Some(frame index) or padding.
            let mut ring: Vec<Option<(usize, u64)>> = vec![None; 4096];
            let (mut tail, mut head, mut credit) = (0u64, 0u64, 0u64);
            let mut next_send = 0usize;
            let mut next_recv = 0usize;
            let mut policy = CreditPolicy::new(g);
            // After the random steps, alternate until every frame went through.
            let tail_steps = [true, false].into_iter().cycle().take(8 * frames.len() + 8);
            for send in steps.iter().copied().chain(tail_steps) {
                if send && next_send < frames.len() {
                    let len = frames[next_send];
                    // the sender only knows the credited head; with every
                    // placed byte consumed, the credit held back must never
                    // stop it (only the idle tick would return it)
                    let fits = g.needed(tail, len) <= g.free(tail, credit);
                    prop_assert!(fits || head < tail, "sender stuck on leftover credit");
                    if fits {
                        if let Placement::WrapAfterPadding { pad } = g.place(tail, len) {
                            ring[g.offset(tail)] = Some((usize::MAX, pad));
                            tail += pad;
                        }
                        prop_assert!(g.offset(tail) as u64 + len <= 4096);
                        ring[g.offset(tail)] = Some((next_send, len));
                        tail += len;
                        prop_assert!(tail - head <= 4096);
                        next_send += 1;
                    }
                } else if head < tail {
                    let (idx, len) = ring[g.offset(head)].take().unwrap();
                    head += len;
                    if idx != usize::MAX {
                        prop_assert_eq!(idx, next_recv);
                        next_recv += 1;
                    }
                    if let Some(h) = policy.due(head, head == tail) {
                        credit = h;
                        policy.returned(h);
                    }
                } else if next_send == frames.len() && head == tail {
                    break;
                }
            }
            prop_assert_eq!(next_recv, next_send);
            prop_assert_eq!(next_send, frames.len());
        }
    }
}
