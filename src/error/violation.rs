//! What a peer can send that the ring or link protocol does not allow. Each
//! closes the link; those found in the ring or in a control message count
//! in `bad_frames`, an unusable ring in the handshake as an incomplete one.

use crate::proto::control::ControlError;

/// Bytes or messages no honest rdmasync peer sends, one variant per rule.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Violation {
    /// The peer says bytes were placed outside the ring's window.
    #[error("placed position {placed} outside ring (head {head}, capacity {capacity})")]
    PlacedOutsideRing {
        /// The position announced as placed.
        placed: u64,
        /// Our consumer head.
        head: u64,
        /// The ring's size.
        capacity: u64,
    },
    /// A frame's announced length exceeds the largest frame the ring allows.
    #[error("frame of {len} bytes exceeds the largest frame ({max} bytes)")]
    FrameTooLarge {
        /// The announced length.
        len: usize,
        /// The largest frame.
        max: usize,
    },
    /// A frame runs past the end of the ring instead of wrapping before it.
    #[error("frame straddles the ring end")]
    FrameStraddlesEnd,
    /// A frame's header said one length when peeked at and another in
    /// the copy taken to decode it: the peer rewrote placed bytes.
    #[error("frame rewritten while it was read")]
    FrameChangedWhileRead,
    /// A continuation chunk arrived with no chunked entry open.
    #[error("continuation chunk without a start")]
    ChunkWithoutStart,
    /// A chunk belongs to another entry than the one open.
    #[error("chunk of a different entry")]
    ChunkOfAnotherEntry,
    /// The chunks carry more bytes than the value announced.
    #[error("chunks exceed the announced value")]
    ChunksExceedValue,
    /// The last chunk ends before the announced value is complete.
    #[error("chunks fall short of the announced value")]
    ChunksShortOfValue,
    /// A new entry started before the open entry's last chunk.
    #[error("new entry before the last chunk")]
    EntryBeforeLastChunk,
    /// A batch grew past the size limit.
    #[error("batch over the size limit")]
    BatchTooLarge,
    /// A batch ended with a chunked value still open.
    #[error("batch ends inside a chunked value")]
    BatchEndsInChunk,
    /// The peer's sequence numbers skipped one on a link: an entry was
    /// lost on the way, and an ack sent after it would cover it.
    #[error("the peer's entries skipped from sequence {expected} to {got} on this link")]
    SequenceGap {
        /// The sequence number that had to come next.
        expected: u64,
        /// The one that came.
        got: u64,
    },
    /// An entry stamped further ahead of this node's wall clock than
    /// `max-clock-offset` allows: neither applied nor acknowledged.
    #[error(
        "the peer's entry (sequence {seq}) is stamped {ahead_ms} ms ahead of this node's clock, \
         beyond max-clock-offset {max_ms} ms: fix the clock of the node that is ahead"
    )]
    ClockAhead {
        /// The entry's sequence number.
        seq: u64,
        /// How far ahead of this node's wall clock its stamp is.
        ahead_ms: u64,
        /// The bound (`max-clock-offset`).
        max_ms: u64,
    },
    /// A TCP write message addresses bytes outside the ring's free window.
    #[error("write of {len} bytes at {at} outside the ring (placed {placed}, head {head})")]
    WriteOutsideRing {
        /// The message's length.
        len: u64,
        /// The ring position it names.
        at: u64,
        /// What was placed before it.
        placed: u64,
        /// Our consumer head.
        head: u64,
    },
    /// An RDMA write's immediate (its length) ends outside the ring.
    #[error("write with immediate {imm} ends outside the ring (placed {placed}, head {head})")]
    ImmediateOutsideRing {
        /// The immediate data.
        imm: u32,
        /// What was placed before it.
        placed: u64,
        /// Our consumer head.
        head: u64,
    },
    /// A control message shorter than its header.
    #[error("control message of {len} bytes")]
    ShortControlMessage {
        /// Its length.
        len: u32,
    },
    /// A control message header that does not decode.
    #[error("bad control message")]
    BadControlMessage(#[source] ControlError),
    /// A handshake message on a link that finished its handshake.
    #[error("{op} on an established link")]
    UnexpectedMessage {
        /// The opcode's name.
        op: String,
    },
    /// The ring the peer announced has a size the protocol does not allow.
    #[error("invalid peer ring of {capacity} bytes")]
    InvalidPeerRing {
        /// The announced size.
        capacity: u64,
    },
}
