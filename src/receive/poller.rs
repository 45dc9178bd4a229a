//! Ring -> complete, verified frames -> entries -> batches. Transport-agnostic
//! and pure: the transport says how far the ring is placed, the poller says
//! how far it consumed (the head to return as credit).

use crate::error::{Result, Violation};
use crate::proto::entry::SweepFloors;
use crate::proto::entry::{Batch, Encoding, Entry, Op};
use crate::proto::ring::{RingGeometry, RingMemory};
use crate::proto::wire::{
    self, FrameHeader, FrameKind, FrameRef, Peeked, WireError, FLAG_BATCH_END, FLAG_CONTINUATION,
    FLAG_MORE, HEADER_LEN, MAX_VALUE_LEN,
};

/// Most bytes a batch may hold before it completes; a peer that exceeds it is
/// cut off rather than allowed to grow our memory without bound.
pub const MAX_BATCH_BYTES: usize = 2 << 30;

/// A chunked value being put back together.
#[derive(Debug)]
struct Reassembly {
    header: FrameHeader,
    key: Vec<u8>,
    value: Vec<u8>,
}

/// Consumer side of one ring (one connection).
#[derive(Debug)]
pub struct Poller {
    geometry: RingGeometry,
    /// Next position to read; `head <= placed` always.
    head: u64,
    /// Entries of the batch not yet ended.
    batch: Vec<Entry>,
    /// Payload bytes in `batch`.
    batch_bytes: usize,
    /// A value whose remaining chunks have not arrived yet.
    partial: Option<Reassembly>,
    /// Frames decoded, for status.
    frames: u64,
    /// The frame being decoded, copied out of the ring: its checks and its
    /// use read this copy, never the ring, which the peer may write.
    scratch: Vec<u8>,
}

/// Where the frame at the head sits: its ring offset, the bytes placed
/// from there to the ring's end, and how far the ring is placed.
#[derive(Debug, Clone, Copy)]
struct Placed {
    off: usize,
    avail: usize,
    placed: u64,
}

/// Copies `dst.len()` ring bytes from `off`; the poller keeps within the
/// ring, so a refusal is a bug reported as a violation, never a panic.
fn copy_out<R: RingMemory + ?Sized>(ring: &R, off: usize, dst: &mut [u8]) -> Result<()> {
    if ring.copy_out(off, dst) {
        Ok(())
    } else {
        Err(Violation::PlacedOutsideRing {
            placed: (off + dst.len()) as u64,
            head: off as u64,
            capacity: ring.len() as u64,
        }
        .into())
    }
}

fn entry_from(header: &FrameHeader, key: Vec<u8>, value: Vec<u8>) -> Entry {
    let no_db = matches!(
        header.kind,
        FrameKind::Ack
            | FrameKind::SyncRequest
            | FrameKind::SweepStart
            | FrameKind::SweepEnd
            | FrameKind::Bound
    );
    Entry {
        origin: header.origin,
        seq: header.seq,
        clock: header.clock,
        db: if no_db { 0 } else { header.db },
        op: op_from(header, key, value),
    }
}

/// The change a frame carries (its key and whole value given).
fn op_from(header: &FrameHeader, key: Vec<u8>, value: Vec<u8>) -> Op {
    let expiry_ms = (header.expiry_ms != 0).then_some(header.expiry_ms);
    match header.kind {
        FrameKind::Value => Op::Value {
            key,
            payload: value,
            expiry_ms,
            encoding: if header.flags & crate::proto::wire::FLAG_RAW_STRING != 0 {
                Encoding::RawString
            } else {
                Encoding::Dump
            },
        },
        FrameKind::Delete => Op::Delete { key },
        FrameKind::Expire => Op::Expire { key, expiry_ms },
        FrameKind::Counter => Op::Counter {
            key,
            state: value,
            expiry_ms,
        },
        FrameKind::Fields => Op::Fields {
            key,
            state: value,
            expiry_ms,
        },
        FrameKind::Append => Op::Append {
            key,
            edit: value,
            expiry_ms,
        },
        FrameKind::Bound => Op::Bound { seen: value },
        FrameKind::Library => Op::Library {
            name: key,
            code: value,
        },
        FrameKind::LibraryDelete => Op::LibraryDelete { name: key },
        FrameKind::FlushDb => Op::FlushDb,
        FrameKind::FlushAll => Op::FlushAll,
        FrameKind::SwapDb => Op::SwapDb { other: header.arg },
        FrameKind::Ack => Op::Ack {
            applied: header.expiry_ms,
            in_step: header.flags & crate::proto::wire::FLAG_IN_STEP != 0,
            holds: (u64::from(header.db) << 32) | u64::from(header.arg),
        },
        FrameKind::SyncRequest => Op::SyncRequest {
            received: header.expiry_ms,
            since: header.clock,
            own: (u64::from(header.db) << 32) | u64::from(header.arg),
            answer: header.flags & crate::proto::wire::FLAG_ANSWER != 0,
        },
        // The frame check made sure of the length.
        FrameKind::SweepStart => match SweepFloors::from_bytes(&value) {
            Some(floors) => Op::SweepStart { floors },
            None => Op::SweepEnd { complete: false },
        },
        FrameKind::SweepEnd => Op::SweepEnd {
            complete: header.arg == 1,
        },
    }
}

impl Poller {
    /// A poller at the start of an empty ring.
    pub fn new(geometry: RingGeometry) -> Self {
        Self {
            geometry,
            head: 0,
            batch: Vec::new(),
            batch_bytes: 0,
            partial: None,
            frames: 0,
            scratch: Vec::new(),
        }
    }

    /// Position up to which the ring has been consumed.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Frames decoded so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Consumes every complete frame in `ring` between the head and `placed`,
    /// pushing each finished batch to `out`. Each frame is copied out of the
    /// ring once, then checked (header, lengths, CRC) and decoded from that
    /// copy.
    ///
    /// # Errors
    /// [`crate::error::Error::Wire`] or [`crate::error::Error::Violation`] for bytes no honest peer writes;
    /// the link must then be closed.
    pub fn consume<R: RingMemory + ?Sized>(
        &mut self,
        ring: &R,
        placed: u64,
        out: &mut Vec<Batch>,
    ) -> Result<()> {
        let cap = self.geometry.capacity();
        if ring.len() as u64 != cap || placed < self.head || placed - self.head > cap {
            return Err(Violation::PlacedOutsideRing {
                placed,
                head: self.head,
                capacity: cap,
            }
            .into());
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = self.consume_copies(ring, placed, &mut scratch, out);
        self.scratch = scratch;
        result
    }

    fn consume_copies<R: RingMemory + ?Sized>(
        &mut self,
        ring: &R,
        placed: u64,
        scratch: &mut Vec<u8>,
        out: &mut Vec<Batch>,
    ) -> Result<()> {
        while self.head < placed {
            let off = self.geometry.offset(self.head);
            let avail = (placed - self.head).min(self.geometry.to_end(self.head)) as usize;
            let mut head = [0u8; HEADER_LEN];
            let seen = avail.min(HEADER_LEN);
            copy_out(ring, off, &mut head[..seen])?;
            match wire::peek(&head[..seen]) {
                Ok(Peeked::Padding) => {
                    let skip = self.geometry.to_end(self.head);
                    if placed - self.head < skip {
                        return Ok(()); // the next frame, at the ring's start, is not placed yet
                    }
                    self.head += skip;
                }
                Ok(Peeked::Frame(len)) => {
                    let at = Placed { off, avail, placed };
                    if !self.take_placed_frame(ring, at, len, scratch, out)? {
                        return Ok(()); // not completely placed yet
                    }
                }
                Err(WireError::Truncated { .. }) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Copies the frame of `len` bytes at `at` out of the ring, checks and
    /// takes it; false when it is not completely placed yet.
    fn take_placed_frame<R: RingMemory + ?Sized>(
        &mut self,
        ring: &R,
        at: Placed,
        len: usize,
        scratch: &mut Vec<u8>,
        out: &mut Vec<Batch>,
    ) -> Result<bool> {
        // No sender writes a frame larger than this (it chunks): a header
        // claiming more would wait forever for bytes the ring cannot hold.
        if len > self.geometry.max_frame() {
            return Err(Violation::FrameTooLarge {
                len,
                max: self.geometry.max_frame(),
            }
            .into());
        }
        if len > at.avail {
            if self.head + len as u64 <= at.placed {
                return Err(Violation::FrameStraddlesEnd.into());
            }
            return Ok(false);
        }
        if scratch.len() < len {
            scratch.resize(len, 0);
        }
        let copy = &mut scratch[..len];
        copy_out(ring, at.off, copy)?;
        // Decided on the copy: a header rewritten since it was peeked at no
        // longer says `len`.
        let frame = match wire::decode_frame(copy) {
            Ok(f) if f.len == len => f,
            Ok(_) | Err(WireError::Truncated { .. }) => {
                return Err(Violation::FrameChangedWhileRead.into())
            }
            Err(e) => return Err(e.into()),
        };
        self.take_frame(&frame, out)?;
        self.head += len as u64;
        self.frames += 1;
        Ok(true)
    }

    fn take_frame(&mut self, frame: &FrameRef<'_>, out: &mut Vec<Batch>) -> Result<()> {
        let h = frame.header;
        let entry = if h.flags & FLAG_CONTINUATION != 0 {
            let Some(mut part) = self.partial.take() else {
                return Err(Violation::ChunkWithoutStart.into());
            };
            if part.header.seq != h.seq || part.key != frame.key {
                return Err(Violation::ChunkOfAnotherEntry.into());
            }
            if part.value.len() + frame.value.len() > part.header.value_total_len as usize {
                return Err(Violation::ChunksExceedValue.into());
            }
            part.value.extend_from_slice(frame.value);
            if h.flags & FLAG_MORE != 0 {
                self.partial = Some(part);
                None
            } else if part.value.len() != part.header.value_total_len as usize {
                return Err(Violation::ChunksShortOfValue.into());
            } else {
                Some(entry_from(&part.header, part.key, part.value))
            }
        } else {
            if self.partial.is_some() {
                return Err(Violation::EntryBeforeLastChunk.into());
            }
            if h.flags & FLAG_MORE != 0 {
                let total = h.value_total_len as usize;
                let mut value = Vec::with_capacity(total.min(16 << 20).min(MAX_VALUE_LEN));
                value.extend_from_slice(frame.value);
                self.partial = Some(Reassembly {
                    header: h,
                    key: frame.key.to_vec(),
                    value,
                });
                None
            } else {
                Some(entry_from(&h, frame.key.to_vec(), frame.value.to_vec()))
            }
        };
        if let Some(entry) = entry {
            self.batch_bytes += entry.payload_len();
            if self.batch_bytes > MAX_BATCH_BYTES {
                return Err(Violation::BatchTooLarge.into());
            }
            self.batch.push(entry);
        }
        if h.flags & FLAG_BATCH_END != 0 {
            if self.partial.is_some() {
                return Err(Violation::BatchEndsInChunk.into());
            }
            self.batch_bytes = 0;
            out.push(Batch {
                entries: std::mem::take(&mut self.batch),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::ring::Placement;
    use crate::proto::wire::{chunk_entry, encode_frame, encode_padding, frame_len, PAD_LEN};

    /// A minimal sender: writes batches into a ring the way `sender` does.
    struct TestSender {
        g: RingGeometry,
        tail: u64,
        /// Where the last padding marker ended (what a transport had placed then).
        pad_end: Option<u64>,
    }

    impl TestSender {
        /// A sender at the start of an empty ring of geometry `g`.
        fn at_start(g: RingGeometry) -> Self {
            Self {
                g,
                tail: 0,
                pad_end: None,
            }
        }

        fn write_batch(&mut self, ring: &mut [u8], batch: &Batch) {
            let n = batch.entries.len();
            for (i, e) in batch.entries.iter().enumerate() {
                let chunks = chunk_entry(e, self.g.max_frame()).unwrap();
                let last_chunk = chunks.len() - 1;
                let (_, key, value) = wire::entry_header(e);
                for (j, c) in chunks.iter().enumerate() {
                    let mut h = c.header;
                    if i + 1 == n && j == last_chunk {
                        h.flags |= FLAG_BATCH_END;
                    }
                    let part = &value[c.value_range.0..c.value_range.1];
                    let len = frame_len(key.len(), part.len()) as u64;
                    if let Placement::WrapAfterPadding { pad } = self.g.place(self.tail, len) {
                        let o = self.g.offset(self.tail);
                        encode_padding(&mut ring[o..o + PAD_LEN]).unwrap();
                        self.pad_end = Some(self.tail + PAD_LEN as u64);
                        self.tail += pad;
                    }
                    let o = self.g.offset(self.tail);
                    encode_frame(&h, key, part, &mut ring[o..]).unwrap();
                    self.tail += len;
                }
            }
        }
    }

    fn entry(seq: u64, key: &str, len: usize) -> Entry {
        Entry {
            origin: 1,
            seq,
            clock: seq,
            db: 0,
            op: Op::Value {
                key: key.as_bytes().to_vec(),
                payload: vec![seq as u8; len],
                expiry_ms: None,
                encoding: if seq.is_multiple_of(2) {
                    Encoding::RawString
                } else {
                    Encoding::Dump
                },
            },
        }
    }

    /// A ring a hostile peer rewrites as it is read: `rewrite(n, bytes)`
    /// runs before the n-th copy out of it (0-based).
    struct RewrittenRing<F: Fn(usize, &mut Vec<u8>)> {
        bytes: std::cell::RefCell<Vec<u8>>,
        copies: std::cell::Cell<usize>,
        rewrite: F,
    }

    impl<F: Fn(usize, &mut Vec<u8>)> RingMemory for RewrittenRing<F> {
        fn len(&self) -> usize {
            self.bytes.borrow().len()
        }
        fn copy_out(&self, off: usize, dst: &mut [u8]) -> bool {
            let n = self.copies.get();
            self.copies.set(n + 1);
            (self.rewrite)(n, &mut self.bytes.borrow_mut());
            self.bytes.borrow().as_slice().copy_out(off, dst)
        }
    }

    /// A ring holding one frame, how far it is placed, and its batch.
    type OneFrame<F> = (RewrittenRing<F>, u64, Batch);

    fn one_frame_ring(
        rewrite: impl Fn(usize, &mut Vec<u8>),
    ) -> OneFrame<impl Fn(usize, &mut Vec<u8>)> {
        let g = RingGeometry::new(4096).unwrap();
        let mut ring = vec![0u8; 4096];
        let mut s = TestSender::at_start(g);
        let batch = Batch {
            entries: vec![entry(1, "k", 100)],
        };
        s.write_batch(&mut ring, &batch);
        let ring = RewrittenRing {
            bytes: std::cell::RefCell::new(ring),
            copies: std::cell::Cell::new(0),
            rewrite,
        };
        (ring, s.tail, batch)
    }

    #[test]
    fn what_was_checked_is_what_is_applied_whatever_the_peer_writes_after() {
        // The value is rewritten after every copy: the entry holds the
        // bytes the CRC covered, read once.
        let (ring, placed, batch) = one_frame_ring(|n, b| {
            if n >= 2 {
                b[HEADER_LEN + 1..HEADER_LEN + 50].fill(0xEE);
            }
        });
        let mut p = Poller::new(RingGeometry::new(4096).unwrap());
        let mut out = Vec::new();
        p.consume(&ring, placed, &mut out).unwrap();
        assert_eq!(out, vec![batch]);
        assert_eq!(
            ring.copies.get(),
            2,
            "the header peeked, then the frame copied once"
        );
    }

    #[test]
    fn a_frame_rewritten_between_its_peek_and_its_copy_is_refused() {
        // The value changes after the header was peeked: the CRC, checked
        // on the copy, refuses it.
        let (ring, placed, _) = one_frame_ring(|n, b| {
            if n == 1 {
                b[HEADER_LEN + 1] ^= 0xFF;
            }
        });
        let mut p = Poller::new(RingGeometry::new(4096).unwrap());
        let err = p.consume(&ring, placed, &mut Vec::new()).unwrap_err();
        assert!(
            matches!(err, crate::error::Error::Wire(WireError::Checksum { .. })),
            "{err:?}"
        );
        // The length in the header changes: refused (it no longer matches
        // the key and value lengths, or no longer says the length peeked).
        let (ring, placed, _) = one_frame_ring(|n, b| {
            if n == 1 {
                let len = u32::from_le_bytes(b[8..12].try_into().unwrap()) + 8;
                b[8..12].copy_from_slice(&len.to_le_bytes());
            }
        });
        let mut p = Poller::new(RingGeometry::new(4096).unwrap());
        let mut out = Vec::new();
        assert!(p.consume(&ring, placed, &mut out).is_err());
        assert!(out.is_empty());
    }

    #[test]
    fn batches_come_out_whole_and_in_order_across_wraps() {
        let g = RingGeometry::new(4096).unwrap();
        let mut ring = vec![0u8; 4096];
        let mut s = TestSender::at_start(g);
        let mut p = Poller::new(g);
        let mut out = Vec::new();
        let mut seq = 0;
        let mut wrapped = 0;
        for round in 0..50 {
            let batch = Batch {
                entries: (0..3)
                    .map(|i| {
                        seq += 1;
                        entry(seq, &format!("k{round}-{i}"), 100 + round * 7)
                    })
                    .collect(),
            };
            s.write_batch(&mut ring, &batch);
            if let Some(pad_end) = s.pad_end.take() {
                // Placed only up to the padding marker: wait, do not fail.
                if pad_end > p.head() {
                    p.consume(&ring, pad_end, &mut out).unwrap();
                    wrapped += 1;
                }
            }
            p.consume(&ring, s.tail, &mut out).unwrap();
            assert_eq!(p.head(), s.tail);
            assert_eq!(out.pop().unwrap(), batch);
            assert!(out.is_empty());
        }
        assert!(
            wrapped > 3,
            "the test must cross the ring end several times"
        );
    }

    #[test]
    fn appended_bytes_come_out_with_their_key_and_expiry() {
        let g = RingGeometry::new(4096).unwrap();
        let mut ring = vec![0u8; 4096];
        let mut s = TestSender::at_start(g);
        let mut p = Poller::new(g);
        let append = |seq: u64, expiry_ms| Entry {
            origin: 7,
            seq,
            clock: 90 + seq,
            db: 2,
            op: Op::Append {
                key: b"log".to_vec(),
                edit: vec![seq as u8; 30],
                expiry_ms,
            },
        };
        let batch = Batch {
            entries: vec![append(1, Some(1_900_000_000_000)), append(2, None)],
        };
        s.write_batch(&mut ring, &batch);
        let mut out = Vec::new();
        p.consume(&ring, s.tail, &mut out).unwrap();
        assert_eq!(out, vec![batch]);
    }

    #[test]
    fn notices_come_out_with_what_they_carry() {
        let g = RingGeometry::new(4096).unwrap();
        let mut ring = vec![0u8; 4096];
        let mut s = TestSender::at_start(g);
        let notice = |seq: u64, clock: u64, op: Op| Entry {
            origin: 7,
            seq,
            clock,
            db: 0,
            op,
        };
        let batch = Batch {
            entries: vec![
                notice(
                    1,
                    1 << 40,
                    Op::Ack {
                        applied: 99,
                        in_step: true,
                        holds: (117_739_506 << 16) | 0xbeef,
                    },
                ),
                notice(
                    2,
                    5 << 30,
                    Op::SyncRequest {
                        received: 12,
                        since: 5 << 30,
                        own: (3 << 33) | 0xdead_beef,
                        answer: true,
                    },
                ),
                notice(
                    3,
                    0,
                    Op::SyncRequest {
                        received: 0,
                        since: 0,
                        own: u64::MAX,
                        answer: false,
                    },
                ),
            ],
        };
        s.write_batch(&mut ring, &batch);
        let mut p = Poller::new(g);
        let mut out = Vec::new();
        p.consume(&ring, s.tail, &mut out).unwrap();
        assert_eq!(out, vec![batch]);
    }

    #[test]
    fn incomplete_batch_is_held_back() {
        let g = RingGeometry::new(4096).unwrap();
        let mut ring = vec![0u8; 4096];
        let mut s = TestSender::at_start(g);
        let batch = Batch {
            entries: vec![entry(1, "a", 10), entry(2, "b", 10)],
        };
        s.write_batch(&mut ring, &batch);
        let first_len = frame_len(1, 10) as u64;
        let mut p = Poller::new(g);
        let mut out = Vec::new();
        // Only the first frame placed, then half of the second.
        p.consume(&ring, first_len, &mut out).unwrap();
        p.consume(&ring, first_len + 20, &mut out).unwrap();
        assert!(out.is_empty());
        assert_eq!(p.head(), first_len);
        p.consume(&ring, s.tail, &mut out).unwrap();
        assert_eq!(out, vec![batch]);
    }

    #[test]
    fn value_larger_than_ring_is_reassembled() {
        let g = RingGeometry::new(4096).unwrap();
        let mut ring = vec![0u8; 4096];
        let mut s = TestSender::at_start(g);
        let mut p = Poller::new(g);
        let big = entry(1, "big", 50_000);
        let mut out = Vec::new();
        // Feed chunk by chunk, consuming as we go (the ring is far too small otherwise).
        let chunks = chunk_entry(&big, g.max_frame()).unwrap();
        let (_, key, value) = wire::entry_header(&big);
        for (j, c) in chunks.iter().enumerate() {
            let mut h = c.header;
            if j + 1 == chunks.len() {
                h.flags |= FLAG_BATCH_END;
            }
            let part = &value[c.value_range.0..c.value_range.1];
            let len = frame_len(key.len(), part.len()) as u64;
            if let Placement::WrapAfterPadding { pad } = g.place(s.tail, len) {
                let o = g.offset(s.tail);
                encode_padding(&mut ring[o..o + PAD_LEN]).unwrap();
                s.tail += pad;
            }
            let o = g.offset(s.tail);
            encode_frame(&h, key, part, &mut ring[o..]).unwrap();
            s.tail += len;
            p.consume(&ring, s.tail, &mut out).unwrap();
        }
        assert_eq!(out, vec![Batch { entries: vec![big] }]);
    }

    #[test]
    fn a_header_claiming_a_huge_frame_is_refused_at_once() {
        let g = RingGeometry::new(65536).unwrap();
        let mut ring = vec![0u8; 65536];
        let value = vec![0u8; 10];
        let h = FrameHeader {
            kind: FrameKind::Value,
            flags: FLAG_BATCH_END,
            db: 0,
            origin: 1,
            seq: 1,
            clock: 1,
            expiry_ms: 0,
            key_len: 1,
            value_len: 10,
            value_total_len: 10,
            arg: 0,
        };
        encode_frame(&h, b"k", &value, &mut ring).unwrap();
        // Rewrite the lengths: a value of 1 GiB - 4 KiB, consistent fields.
        let v = (MAX_VALUE_LEN - 4096) as u32;
        ring[52..56].copy_from_slice(&v.to_le_bytes());
        ring[56..60].copy_from_slice(&v.to_le_bytes());
        let len = frame_len(1, v as usize) as u32;
        ring[8..12].copy_from_slice(&len.to_le_bytes());
        let mut p = Poller::new(g);
        let err = p.consume(&ring, 4096, &mut Vec::new()).unwrap_err();
        assert!(
            matches!(
                err,
                crate::error::Error::Violation(Violation::FrameTooLarge { .. })
            ),
            "{err:?}"
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let g = RingGeometry::new(4096).unwrap();
        let ring: Vec<u8> = (0..4096u32).map(|i| (i * 31) as u8).collect();
        let mut p = Poller::new(g);
        assert!(p.consume(&ring, 200, &mut Vec::new()).is_err());
        let mut p = Poller::new(g);
        let err = p.consume(&ring, 5000, &mut Vec::new()).unwrap_err();
        assert!(
            matches!(
                err,
                crate::error::Error::Violation(Violation::PlacedOutsideRing {
                    placed: 5000,
                    head: 0,
                    capacity: 4096
                })
            ),
            "{err:?}"
        );
    }
}
