//! Frame encode/decode: pure functions over byte slices, little-endian.
//!
//! A frame is a 64-byte header, the key, the value bytes of this frame, a
//! CRC32C of all of those, and zero padding to a multiple of 8 bytes:
//!
//! ```text
//! off size field
//!   0  4   magic "RSYN" (0x4e595352 little-endian)
//!   4  1   version (VERSION; docs/protocol.md lists what each changed)
//!   5  1   kind (1 value, 2 delete, 3 flushdb, 4 flushall, 5 swapdb,
//!            6 ack, 7 sync request, 8 function library, 9 sweep start,
//!            10 sweep end, 11 counter state, 12 merge bound, 13 hash
//!            merge state, 14 function library deleted, 15 expire: a key's
//!            TTL alone)
//!   6  2   flags (1 batch end, 2 more chunks follow, 4 continuation chunk,
//!            8 raw string: the value is a string's bytes, not a DUMP payload,
//!            16 answer: sync requests, 32 in step: acks)
//!   8  4   frame_len (whole frame, padding included)
//!  12  4   db (ack: high half of what the sender holds of ours; sync
//!            request: high half of its own newest stamp)
//!  16  8   origin node id
//!  24  8   sequence
//!  32  8   hybrid logical clock
//!  40  8   absolute expiry, Unix ms (0 = none); ack: sequence applied
//!  48  4   key_len
//!  52  4   value_len (bytes in this frame)
//!  56  4   value_total_len (bytes of the whole value across chunks)
//!  60  4   arg (swapdb: the other db; ack and sync request: the low
//!            halves)
//!  64  ..  key, value, crc32c (u32), zero padding
//! ```
//! A padding marker (magic "RSPD", 8 bytes) tells the reader to skip to the
//! start of the ring.

use crate::proto::entry::FLOORS_LEN;
use crate::proto::entry::{Entry, Op};

/// Magic of a frame header.
pub const FRAME_MAGIC: u32 = u32::from_le_bytes(*b"RSYN");
/// Magic of a padding marker.
pub const PAD_MAGIC: u32 = u32::from_le_bytes(*b"RSPD");
/// Protocol version written in every frame.
pub const VERSION: u8 = 14;
/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 64;
/// Bytes of the CRC trailer.
pub const TRAILER_LEN: usize = 4;
/// Frames start and end on this alignment.
pub const ALIGN: usize = 8;
/// Bytes of a padding marker (the smallest thing in a ring).
pub const PAD_LEN: usize = 8;
/// Largest value an entry may carry once reassembled (Redis' own limit is 512 MB;
/// DUMP adds a few bytes).
pub const MAX_VALUE_LEN: usize = 1 << 30;

/// Set on the last frame of a batch.
pub const FLAG_BATCH_END: u16 = 1;
/// More chunks of this entry's value follow.
pub const FLAG_MORE: u16 = 2;
/// This frame continues a value started by an earlier frame.
pub const FLAG_CONTINUATION: u16 = 4;
/// A value frame carrying a string's bytes, not a DUMP payload.
pub const FLAG_RAW_STRING: u16 = 8;
/// A sync request that answers one of the receiver's (no answer back).
pub const FLAG_ANSWER: u16 = 16;
/// An ack sent in step (`Op::Ack::in_step`).
pub const FLAG_IN_STEP: u16 = 32;
const KNOWN_FLAGS: u16 =
    FLAG_BATCH_END | FLAG_MORE | FLAG_CONTINUATION | FLAG_RAW_STRING | FLAG_ANSWER | FLAG_IN_STEP;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// A key's DUMP payload (possibly one chunk of it).
    Value = 1,
    /// A key was deleted.
    Delete = 2,
    /// A database was flushed.
    FlushDb = 3,
    /// Every database was flushed.
    FlushAll = 4,
    /// Two databases were swapped.
    SwapDb = 5,
    /// The sender applied our entries up to a sequence number.
    Ack = 6,
    /// The sender asks for a full sync.
    SyncRequest = 7,
    /// One function library's code (the key: its name; possibly chunked).
    Library = 8,
    /// A sweeping full sync starts (its floors in the value).
    SweepStart = 9,
    /// A sweeping full sync ended (`arg` 1: complete).
    SweepEnd = 10,
    /// A counter's merge state (the value; its expiry in the header).
    Counter = 11,
    /// The sender's merge bound (the value).
    Bound = 12,
    /// A hash's merge state (the value; its expiry in the header).
    Fields = 13,
    /// A function library was deleted (the key: its name).
    LibraryDelete = 14,
    /// A key's TTL alone was written (its expiry in the header).
    Expire = 15,
    /// Bytes appended to a big string since a version of it (the value:
    /// `converge::appends::AppendEdit`).
    Append = 16,
}

impl FrameKind {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Value,
            2 => Self::Delete,
            3 => Self::FlushDb,
            4 => Self::FlushAll,
            5 => Self::SwapDb,
            6 => Self::Ack,
            7 => Self::SyncRequest,
            8 => Self::Library,
            9 => Self::SweepStart,
            10 => Self::SweepEnd,
            11 => Self::Counter,
            12 => Self::Bound,
            13 => Self::Fields,
            14 => Self::LibraryDelete,
            15 => Self::Expire,
            16 => Self::Append,
            _ => return None,
        })
    }
}

/// Why bytes are not a valid frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Fewer bytes than the header or the frame claims.
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// Not a frame or padding magic.
    #[error("bad magic {0:#010x}")]
    BadMagic(u32),
    /// A version this build does not speak.
    #[error("unsupported frame version {0} (this build speaks {VERSION})")]
    BadVersion(u8),
    /// Unknown kind byte.
    #[error("unknown frame kind {0}")]
    BadKind(u8),
    /// Unknown flag bits.
    #[error("unknown frame flags {0:#06x}")]
    BadFlags(u16),
    /// Lengths in the header are inconsistent.
    #[error("inconsistent lengths: {0}")]
    BadLength(&'static str),
    /// CRC32C mismatch.
    #[error("checksum mismatch: frame says {expected:#010x}, bytes give {actual:#010x}")]
    Checksum {
        /// Stored in the trailer.
        expected: u32,
        /// Computed over the bytes.
        actual: u32,
    },
    /// The output buffer is too small for the frame.
    #[error("output buffer too small: need {need}, have {have}")]
    NoRoom {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
}

/// The fixed header of a frame, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// What the frame carries.
    pub kind: FrameKind,
    /// `FLAG_*` bits.
    pub flags: u16,
    /// Database index.
    pub db: u32,
    /// Origin node id.
    pub origin: u64,
    /// Entry sequence number.
    pub seq: u64,
    /// Hybrid logical clock.
    pub clock: u64,
    /// Absolute expiry in Unix ms, 0 for none.
    pub expiry_ms: u64,
    /// Key bytes in this frame.
    pub key_len: u32,
    /// Value bytes in this frame.
    pub value_len: u32,
    /// Value bytes of the whole entry.
    pub value_total_len: u32,
    /// Kind-specific argument (swapdb: the other db).
    pub arg: u32,
}

/// A decoded frame borrowing the ring's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRef<'a> {
    /// The header.
    pub header: FrameHeader,
    /// Key bytes.
    pub key: &'a [u8],
    /// This frame's value bytes.
    pub value: &'a [u8],
    /// Bytes the frame occupies (padding included).
    pub len: usize,
}

/// What starts at a position in the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peeked {
    /// A padding marker: skip to the ring's start.
    Padding,
    /// A frame of this many bytes.
    Frame(usize),
}

/// Rounds `n` up to [`ALIGN`].
pub const fn align_up(n: usize) -> usize {
    (n + ALIGN - 1) & !(ALIGN - 1)
}

/// Bytes a frame with these key and value lengths occupies.
pub const fn frame_len(key_len: usize, value_len: usize) -> usize {
    align_up(HEADER_LEN + key_len + value_len + TRAILER_LEN)
}

/// CRC32C (Castagnoli) of `bytes`: the frame checksum.
pub fn checksum(bytes: &[u8]) -> u32 {
    // The algorithm's CRC is 32 bits wide; the crate returns it in a u64.
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
/// The little-endian `u32` at `b[o..o + 4]` (the caller checked the length).
pub(crate) fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
/// The little-endian `u64` at `b[o..o + 8]` (the caller checked the length).
pub(crate) fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

/// Writes a frame into `out` and returns its length.
///
/// # Errors
/// [`WireError::NoRoom`] when `out` is shorter than [`frame_len`];
/// [`WireError::BadLength`] when a length does not fit its field.
pub fn encode_frame(
    header: &FrameHeader,
    key: &[u8],
    value: &[u8],
    out: &mut [u8],
) -> Result<usize, WireError> {
    let len = frame_len(key.len(), value.len());
    if out.len() < len {
        return Err(WireError::NoRoom {
            need: len,
            have: out.len(),
        });
    }
    let frame_len32 = u32::try_from(len).map_err(|_| WireError::BadLength("frame over 4 GiB"))?;
    let key_len = u32::try_from(key.len()).map_err(|_| WireError::BadLength("key over 4 GiB"))?;
    let value_len =
        u32::try_from(value.len()).map_err(|_| WireError::BadLength("value over 4 GiB"))?;
    let h = &mut out[..HEADER_LEN];
    h[0..4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
    h[4] = VERSION;
    h[5] = header.kind as u8;
    h[6..8].copy_from_slice(&header.flags.to_le_bytes());
    h[8..12].copy_from_slice(&frame_len32.to_le_bytes());
    h[12..16].copy_from_slice(&header.db.to_le_bytes());
    h[16..24].copy_from_slice(&header.origin.to_le_bytes());
    h[24..32].copy_from_slice(&header.seq.to_le_bytes());
    h[32..40].copy_from_slice(&header.clock.to_le_bytes());
    h[40..48].copy_from_slice(&header.expiry_ms.to_le_bytes());
    h[48..52].copy_from_slice(&key_len.to_le_bytes());
    h[52..56].copy_from_slice(&value_len.to_le_bytes());
    h[56..60].copy_from_slice(&header.value_total_len.to_le_bytes());
    h[60..64].copy_from_slice(&header.arg.to_le_bytes());
    let key_end = HEADER_LEN + key.len();
    let value_end = key_end + value.len();
    out[HEADER_LEN..key_end].copy_from_slice(key);
    out[key_end..value_end].copy_from_slice(value);
    let crc = checksum(&out[..value_end]);
    out[value_end..value_end + TRAILER_LEN].copy_from_slice(&crc.to_le_bytes());
    out[value_end + TRAILER_LEN..len].fill(0);
    Ok(len)
}

/// Writes a padding marker into `out[..PAD_LEN]`.
///
/// # Errors
/// [`WireError::NoRoom`] when `out` is shorter than [`PAD_LEN`].
pub fn encode_padding(out: &mut [u8]) -> Result<(), WireError> {
    let have = out.len();
    let pad = out.get_mut(..PAD_LEN).ok_or(WireError::NoRoom {
        need: PAD_LEN,
        have,
    })?;
    pad[..4].copy_from_slice(&PAD_MAGIC.to_le_bytes());
    pad[4..].fill(0);
    Ok(())
}

/// Says what starts at `buf[0]` without checking the checksum.
///
/// # Errors
/// [`WireError::Truncated`] when `buf` is too short to tell, or a header error.
pub fn peek(buf: &[u8]) -> Result<Peeked, WireError> {
    if buf.len() < PAD_LEN {
        return Err(WireError::Truncated {
            need: PAD_LEN,
            have: buf.len(),
        });
    }
    match u32_at(buf, 0) {
        PAD_MAGIC => Ok(Peeked::Padding),
        FRAME_MAGIC => {
            if buf.len() < HEADER_LEN {
                return Err(WireError::Truncated {
                    need: HEADER_LEN,
                    have: buf.len(),
                });
            }
            let header = decode_header(buf)?;
            let len = u32_at(buf, 8) as usize;
            check_lengths(&header, len)?;
            Ok(Peeked::Frame(len))
        }
        other => Err(WireError::BadMagic(other)),
    }
}

fn decode_header(b: &[u8]) -> Result<FrameHeader, WireError> {
    if b[4] != VERSION {
        return Err(WireError::BadVersion(b[4]));
    }
    let kind = FrameKind::from_u8(b[5]).ok_or(WireError::BadKind(b[5]))?;
    let flags = u16_at(b, 6);
    if flags & !KNOWN_FLAGS != 0 {
        return Err(WireError::BadFlags(flags));
    }
    Ok(FrameHeader {
        kind,
        flags,
        db: u32_at(b, 12),
        origin: u64_at(b, 16),
        seq: u64_at(b, 24),
        clock: u64_at(b, 32),
        expiry_ms: u64_at(b, 40),
        key_len: u32_at(b, 48),
        value_len: u32_at(b, 52),
        value_total_len: u32_at(b, 56),
        arg: u32_at(b, 60),
    })
}

fn check_lengths(h: &FrameHeader, len: usize) -> Result<(), WireError> {
    let key = h.key_len as usize;
    let value = h.value_len as usize;
    if len != frame_len(key, value) {
        return Err(WireError::BadLength(
            "frame_len does not match key and value lengths",
        ));
    }
    if h.value_len > h.value_total_len || h.value_total_len as usize > MAX_VALUE_LEN {
        return Err(WireError::BadLength(
            "value_len over value_total_len or limit",
        ));
    }
    let chunked = h.flags & (FLAG_MORE | FLAG_CONTINUATION) != 0;
    let carries_value = matches!(
        h.kind,
        FrameKind::Value
            | FrameKind::Library
            | FrameKind::SweepStart
            | FrameKind::Counter
            | FrameKind::Fields
            | FrameKind::Bound
            | FrameKind::Append
    );
    if h.kind == FrameKind::SweepStart && h.value_total_len as usize != FLOORS_LEN {
        return Err(WireError::BadLength("sweep floors of another length"));
    }
    if !carries_value && (value != 0 || chunked) {
        return Err(WireError::BadLength("only value frames carry values"));
    }
    if h.kind != FrameKind::Value && h.flags & FLAG_RAW_STRING != 0 {
        return Err(WireError::BadLength("only value frames hold raw strings"));
    }
    if matches!(
        h.kind,
        FrameKind::Value
            | FrameKind::Delete
            | FrameKind::Expire
            | FrameKind::Counter
            | FrameKind::Fields
            | FrameKind::Append
            | FrameKind::Library
            | FrameKind::LibraryDelete
    ) == (key == 0)
    {
        return Err(WireError::BadLength("key presence does not match kind"));
    }
    if !chunked && h.value_len != h.value_total_len {
        return Err(WireError::BadLength(
            "unchunked value_len != value_total_len",
        ));
    }
    Ok(())
}

/// Decodes and verifies the frame at the start of `buf` (`buf` may run on).
///
/// # Errors
/// A [`WireError`] for truncation, bad header fields or a checksum mismatch.
pub fn decode_frame(buf: &[u8]) -> Result<FrameRef<'_>, WireError> {
    let len = match peek(buf)? {
        Peeked::Frame(len) => len,
        Peeked::Padding => return Err(WireError::BadMagic(PAD_MAGIC)),
    };
    if buf.len() < len {
        return Err(WireError::Truncated {
            need: len,
            have: buf.len(),
        });
    }
    let header = decode_header(buf)?;
    let key_end = HEADER_LEN + header.key_len as usize;
    let value_end = key_end + header.value_len as usize;
    let expected = u32_at(buf, value_end);
    let actual = checksum(&buf[..value_end]);
    if expected != actual {
        return Err(WireError::Checksum { expected, actual });
    }
    Ok(FrameRef {
        header,
        key: &buf[HEADER_LEN..key_end],
        value: &buf[key_end..value_end],
        len,
    })
}

/// The header of the entry's first (or only) frame and its value bytes.
pub fn entry_header(entry: &Entry) -> (FrameHeader, &[u8], &[u8]) {
    let mut h = FrameHeader {
        kind: FrameKind::Delete,
        flags: 0,
        db: entry.db,
        origin: entry.origin,
        seq: entry.seq,
        clock: entry.clock,
        expiry_ms: 0,
        key_len: 0,
        value_len: 0,
        value_total_len: 0,
        arg: 0,
    };
    let (key, value) = place_op(&entry.op, &mut h);
    h.key_len = key.len() as u32;
    h.value_len = value.len() as u32;
    h.value_total_len = value.len() as u32;
    (h, key, value)
}

/// Sets the header fields `op` carries; returns its key and value bytes.
fn place_op<'a>(op: &'a Op, h: &mut FrameHeader) -> (&'a [u8], &'a [u8]) {
    let (kind, key, value): (FrameKind, &[u8], &[u8]) = match op {
        Op::Value {
            key,
            payload,
            expiry_ms,
            encoding,
        } => {
            h.expiry_ms = expiry_ms.unwrap_or(0);
            if *encoding == crate::proto::entry::Encoding::RawString {
                h.flags |= FLAG_RAW_STRING;
            }
            (FrameKind::Value, key, payload)
        }
        Op::Delete { key } => (FrameKind::Delete, key, &[]),
        Op::Expire { key, expiry_ms } => {
            h.expiry_ms = expiry_ms.unwrap_or(0);
            (FrameKind::Expire, key, &[])
        }
        Op::Counter { .. } | Op::Fields { .. } | Op::Append { .. } => place_state(op, h),
        Op::Bound { seen } => (FrameKind::Bound, &[], seen),
        Op::Library { name, code } => (FrameKind::Library, name, code),
        Op::LibraryDelete { name } => (FrameKind::LibraryDelete, name, &[]),
        Op::FlushDb => (FrameKind::FlushDb, &[], &[]),
        Op::FlushAll => (FrameKind::FlushAll, &[], &[]),
        Op::SwapDb { other } => {
            h.arg = *other;
            (FrameKind::SwapDb, &[], &[])
        }
        Op::Ack { .. } | Op::SyncRequest { .. } => (place_notice(op, h), &[], &[]),
        Op::SweepStart { floors } => (FrameKind::SweepStart, &[], floors.as_bytes()),
        Op::SweepEnd { complete } => {
            h.arg = u32::from(*complete);
            (FrameKind::SweepEnd, &[], &[])
        }
    };
    h.kind = kind;
    (key, value)
}

/// Sets the header fields of a key's merge state or appended bytes (their
/// expiry); returns its kind, key and value bytes.
fn place_state<'a>(op: &'a Op, h: &mut FrameHeader) -> (FrameKind, &'a [u8], &'a [u8]) {
    let (kind, key, value, expiry_ms) = match op {
        Op::Counter {
            key,
            state,
            expiry_ms,
        } => (FrameKind::Counter, key, state, expiry_ms),
        Op::Fields {
            key,
            state,
            expiry_ms,
        } => (FrameKind::Fields, key, state, expiry_ms),
        Op::Append {
            key,
            edit,
            expiry_ms,
        } => (FrameKind::Append, key, edit, expiry_ms),
        // `place_op` gives only the three above.
        _ => return (FrameKind::Bound, &[], &[]),
    };
    h.expiry_ms = expiry_ms.unwrap_or(0);
    (kind, key, value)
}

/// Sets the header fields of an ack or sync request (their values travel
/// in the header); returns its kind.
fn place_notice(op: &Op, h: &mut FrameHeader) -> FrameKind {
    match op {
        Op::Ack {
            applied,
            in_step,
            holds,
        } => {
            h.expiry_ms = *applied;
            // The watermark split over db and arg (an ack has no database).
            h.db = (*holds >> 32) as u32;
            h.arg = *holds as u32;
            if *in_step {
                h.flags |= FLAG_IN_STEP;
            }
            FrameKind::Ack
        }
        Op::SyncRequest {
            received,
            since,
            own,
            answer,
        } => {
            h.expiry_ms = *received;
            // The watermark in the clock, the own newest stamp split over
            // db and arg (a request has no database).
            h.clock = *since;
            h.db = (*own >> 32) as u32;
            h.arg = *own as u32;
            if *answer {
                h.flags |= FLAG_ANSWER;
            }
            FrameKind::SyncRequest
        }
        _ => FrameKind::Ack,
    }
}

/// One frame of an entry split to fit `max_frame` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// Header with chunk lengths and flags set (batch end not set).
    pub header: FrameHeader,
    /// Range of the value carried by this chunk.
    pub value_range: (usize, usize),
}

/// Whether [`chunk_entry`] can send `entry` in frames of at most
/// `max_frame` bytes (without splitting it).
pub fn can_frame(entry: &Entry, max_frame: usize) -> bool {
    let (_, key, value) = entry_header(entry);
    if value.len() > MAX_VALUE_LEN || key.len() > u32::MAX as usize {
        return false;
    }
    if frame_len(key.len(), value.len()) <= max_frame {
        return true;
    }
    max_frame
        .checked_sub(frame_len(key.len(), 0))
        .and_then(|room| room.checked_sub(ALIGN))
        .is_some_and(|room| room & !(ALIGN - 1) >= 64)
}

/// Splits an entry's value into chunks so that every frame is at most
/// `max_frame` bytes; `None` when the key alone (or the value, over
/// [`MAX_VALUE_LEN`]) cannot be sent.
pub fn chunk_entry(entry: &Entry, max_frame: usize) -> Option<Vec<Chunk>> {
    let (header, key, value) = entry_header(entry);
    if value.len() > MAX_VALUE_LEN || key.len() > u32::MAX as usize {
        return None;
    }
    if frame_len(key.len(), value.len()) <= max_frame {
        return Some(vec![Chunk {
            header,
            value_range: (0, value.len()),
        }]);
    }
    // Room for value bytes per frame, kept a multiple of ALIGN.
    let room = max_frame
        .checked_sub(frame_len(key.len(), 0))?
        .checked_sub(ALIGN)?
        & !(ALIGN - 1);
    if room < 64 {
        return None;
    }
    let mut chunks = Vec::with_capacity(value.len() / room + 1);
    let mut start = 0;
    while start < value.len() {
        let end = (start + room).min(value.len());
        let mut h = header;
        h.value_len = (end - start) as u32;
        if start > 0 {
            h.flags |= FLAG_CONTINUATION;
        }
        if end < value.len() {
            h.flags |= FLAG_MORE;
        }
        chunks.push(Chunk {
            header: h,
            value_range: (start, end),
        });
        start = end;
    }
    Some(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value_entry(key: &[u8], payload: &[u8]) -> Entry {
        Entry {
            origin: 7,
            seq: 9,
            clock: 11,
            db: 3,
            op: Op::Value {
                key: key.to_vec(),
                payload: payload.to_vec(),
                expiry_ms: Some(1_700_000_000_000),
                encoding: crate::proto::entry::Encoding::Dump,
            },
        }
    }

    #[test]
    fn round_trip_value_frame() {
        let e = value_entry(b"k", b"payload");
        let (h, k, v) = entry_header(&e);
        let mut buf = vec![0xAA; 256];
        let n = encode_frame(&h, k, v, &mut buf).unwrap();
        assert_eq!(n, frame_len(1, 7));
        assert_eq!(n % ALIGN, 0);
        let f = decode_frame(&buf).unwrap();
        assert_eq!(f.header, h);
        assert_eq!(f.key, b"k");
        assert_eq!(f.value, b"payload");
        assert_eq!(f.len, n);
    }

    #[test]
    fn corrupt_byte_is_caught() {
        let e = value_entry(b"key", b"value");
        let (h, k, v) = entry_header(&e);
        let mut buf = vec![0; 128];
        let n = encode_frame(&h, k, v, &mut buf).unwrap();
        for i in 0..n - 4 {
            if (8..12).contains(&i) {
                continue; // frame_len: caught as a length error, tested below
            }
            let mut b = buf.clone();
            b[i] ^= 0x40;
            assert!(decode_frame(&b).is_err(), "flip at {i} went unnoticed");
        }
        let mut b = buf.clone();
        b[8] ^= 0x40;
        assert!(decode_frame(&b).is_err());
    }

    #[test]
    fn truncated_frame_is_reported() {
        let e = value_entry(b"key", b"value");
        let (h, k, v) = entry_header(&e);
        let mut buf = vec![0; 128];
        let n = encode_frame(&h, k, v, &mut buf).unwrap();
        for cut in 0..n {
            assert!(decode_frame(&buf[..cut]).is_err());
        }
    }

    #[test]
    fn padding_is_recognised() {
        let mut b = [0u8; 8];
        encode_padding(&mut b).unwrap();
        assert_eq!(peek(&b).unwrap(), Peeked::Padding);
        assert!(encode_padding(&mut [0u8; 4]).is_err());
    }

    #[test]
    fn chunking_respects_max_frame_and_reassembles() {
        let payload: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let e = value_entry(b"big", &payload);
        let chunks = chunk_entry(&e, 1024).unwrap();
        assert!(chunks.len() > 9);
        let mut joined = Vec::new();
        for (i, c) in chunks.iter().enumerate() {
            let part = &payload[c.value_range.0..c.value_range.1];
            assert!(frame_len(3, part.len()) <= 1024);
            assert_eq!(c.header.flags & FLAG_CONTINUATION != 0, i > 0);
            assert_eq!(c.header.flags & FLAG_MORE != 0, i + 1 < chunks.len());
            let mut buf = vec![0; 1024];
            encode_frame(&c.header, b"big", part, &mut buf).unwrap();
            let f = decode_frame(&buf).unwrap();
            joined.extend_from_slice(f.value);
        }
        assert_eq!(joined, payload);
        // A key that leaves no room for value bytes is refused.
        assert!(chunk_entry(&value_entry(&[b'k'; 2000], b"v"), 1024).is_none());
    }

    fn arb_entry() -> impl Strategy<Value = Entry> {
        let op = prop_oneof![
            (
                proptest::collection::vec(any::<u8>(), 1..40),
                proptest::collection::vec(any::<u8>(), 0..300),
                proptest::option::of(1u64..u64::MAX),
                any::<bool>()
            )
                .prop_map(|(key, payload, expiry_ms, raw)| Op::Value {
                    key,
                    payload,
                    expiry_ms,
                    encoding: if raw {
                        crate::proto::entry::Encoding::RawString
                    } else {
                        crate::proto::entry::Encoding::Dump
                    },
                }),
            proptest::collection::vec(any::<u8>(), 1..40).prop_map(|key| Op::Delete { key }),
            (
                proptest::collection::vec(any::<u8>(), 1..40),
                proptest::collection::vec(any::<u8>(), 0..300)
            )
                .prop_map(|(name, code)| Op::Library { name, code }),
            proptest::collection::vec(any::<u8>(), 1..40)
                .prop_map(|name| Op::LibraryDelete { name }),
            Just(Op::FlushDb),
            Just(Op::FlushAll),
            any::<u32>().prop_map(|other| Op::SwapDb { other }),
            (
                proptest::collection::vec(any::<u8>(), 1..40),
                proptest::option::of(1u64..u64::MAX),
            )
                .prop_map(|(key, expiry_ms)| Op::Expire { key, expiry_ms }),
            (any::<u64>(), any::<bool>(), any::<u64>()).prop_map(|(applied, in_step, holds)| {
                Op::Ack {
                    applied,
                    in_step,
                    holds,
                }
            }),
            (
                proptest::collection::vec(any::<u8>(), 1..40),
                proptest::collection::vec(any::<u8>(), 1..300),
                proptest::option::of(1u64..u64::MAX),
            )
                .prop_map(|(key, state, expiry_ms)| Op::Counter {
                    key,
                    state,
                    expiry_ms
                }),
            (
                proptest::collection::vec(any::<u8>(), 1..40),
                proptest::collection::vec(any::<u8>(), 1..300),
                proptest::option::of(1u64..u64::MAX),
            )
                .prop_map(|(key, state, expiry_ms)| Op::Fields {
                    key,
                    state,
                    expiry_ms
                }),
            (
                proptest::collection::vec(any::<u8>(), 1..40),
                proptest::collection::vec(any::<u8>(), 25..300),
                proptest::option::of(1u64..u64::MAX),
            )
                .prop_map(|(key, edit, expiry_ms)| Op::Append {
                    key,
                    edit,
                    expiry_ms
                }),
            proptest::collection::vec(any::<u8>(), 0..100).prop_map(|seen| Op::Bound { seen }),
            (any::<u64>(), any::<u64>(), any::<u64>(), any::<bool>()).prop_map(
                |(received, since, own, answer)| Op::SyncRequest {
                    received,
                    since,
                    own,
                    answer
                }
            ),
        ];
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u32>(), op).prop_map(
            |(origin, seq, clock, db, op)| Entry {
                origin,
                seq,
                clock,
                db,
                op,
            },
        )
    }

    #[test]
    fn checksum_is_crc32c() {
        // The standard check value of CRC-32C.
        assert_eq!(checksum(b"123456789"), 0xE306_9283);
        assert_eq!(checksum(b""), 0);
    }

    proptest! {
        #[test]
        fn checksum_matches_the_reference_crc32c(
            bytes in proptest::collection::vec(any::<u8>(), 0..70_000),
            skip in 0usize..64,
        ) {
            // Lengths and start offsets that exercise every SIMD tail path.
            let s = &bytes[skip.min(bytes.len())..];
            prop_assert_eq!(checksum(s), crc32c::crc32c(s));
        }
    }

    proptest! {
        #[test]
        fn any_entry_round_trips(e in arb_entry()) {
            let (h, k, v) = entry_header(&e);
            let mut buf = vec![0; frame_len(k.len(), v.len())];
            encode_frame(&h, k, v, &mut buf).unwrap();
            let f = decode_frame(&buf).unwrap();
            prop_assert_eq!(f.header, h);
            prop_assert_eq!(f.key, k);
            prop_assert_eq!(f.value, v);
        }

        #[test]
        fn can_frame_says_what_chunk_entry_does(e in arb_entry(), max_frame in 0usize..512) {
            prop_assert_eq!(can_frame(&e, max_frame), chunk_entry(&e, max_frame).is_some());
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_frame(&bytes);
            let _ = peek(&bytes);
        }

        #[test]
        fn decode_of_mutated_frame_never_panics(e in arb_entry(), pos in any::<usize>(), x in 1u8..) {
            let (h, k, v) = entry_header(&e);
            let mut buf = vec![0; frame_len(k.len(), v.len())];
            encode_frame(&h, k, v, &mut buf).unwrap();
            let i = pos % buf.len();
            buf[i] ^= x;
            if let Ok(f) = decode_frame(&buf) {
                // Only bytes outside header, key, value and CRC (the zero padding) may change undetected.
                prop_assert!(i >= HEADER_LEN + k.len() + v.len() + TRAILER_LEN);
                prop_assert_eq!(f.key, k);
            }
        }
    }
}
