//! Link messages: fixed-size control messages (hello, credit, keepalive) and
//! the header of a ring write, little-endian, pure.
//!
//! Every message starts with a 16-byte header:
//! `op u8, reserved [u8; 3], len u32, arg u64`. `len` is the number of bytes
//! that follow: 48 for HELLO, the written bytes for WRITE, 0 otherwise.
//! `arg` is the ring position for WRITE and the receiver's head for CREDIT.
//! HELLO body: magic, version u16, reserved u16, node id u64, ring size u64,
//! ring address u64 and rkey u32 (RDMA only, else 0), 12 reserved bytes.

/// Bytes of a message header.
pub const HEADER_LEN: usize = 16;
/// Bytes of a HELLO body.
pub const HELLO_LEN: usize = 48;
/// Magic opening a HELLO body.
pub const HELLO_MAGIC: u32 = u32::from_le_bytes(*b"RSHL");
/// Link protocol version spoken by this build.
pub const LINK_VERSION: u16 = 1;

/// Message kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// Identity and ring geometry; first message each way.
    Hello = 1,
    /// `len` bytes follow, to be placed at ring position `arg` (the TCP stand-in
    /// for an RDMA WRITE_WITH_IMM).
    Write = 2,
    /// The receiver has consumed its ring up to position `arg`.
    Credit = 3,
    /// Nothing to say; the sender is alive.
    Keepalive = 4,
}

/// Why bytes are not a valid message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// Unknown opcode.
    #[error("unknown link opcode {0}")]
    BadOp(u8),
    /// A length not allowed for the opcode.
    #[error("bad length {len} for {op:?}")]
    BadLength {
        /// The opcode.
        op: Op,
        /// The length received.
        len: u32,
    },
    /// HELLO without the magic.
    #[error("not an rdmasync peer (bad hello magic {0:#010x})")]
    BadMagic(u32),
    /// HELLO from an incompatible version.
    #[error("peer speaks link protocol {peer}, this node speaks {LINK_VERSION}")]
    BadVersion {
        /// Version the peer announced.
        peer: u16,
    },
}

/// A decoded message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageHeader {
    /// What the message is.
    pub op: Op,
    /// Body bytes that follow.
    pub len: u32,
    /// Op-specific argument.
    pub arg: u64,
}

impl MessageHeader {
    /// Encodes the header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = self.op as u8;
        b[4..8].copy_from_slice(&self.len.to_le_bytes());
        b[8..16].copy_from_slice(&self.arg.to_le_bytes());
        b
    }

    /// Decodes and checks a header; WRITE bodies may be at most `max_write` bytes.
    ///
    /// # Errors
    /// [`ControlError`] for an unknown opcode or a length the opcode forbids.
    pub fn decode(b: &[u8; HEADER_LEN], max_write: u32) -> Result<Self, ControlError> {
        let op = match b[0] {
            1 => Op::Hello,
            2 => Op::Write,
            3 => Op::Credit,
            4 => Op::Keepalive,
            other => return Err(ControlError::BadOp(other)),
        };
        let len = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let mut arg = [0u8; 8];
        arg.copy_from_slice(&b[8..16]);
        let ok = match op {
            Op::Hello => len as usize == HELLO_LEN,
            Op::Write => len > 0 && len <= max_write,
            Op::Credit | Op::Keepalive => len == 0,
        };
        if !ok {
            return Err(ControlError::BadLength { op, len });
        }
        Ok(Self {
            op,
            len,
            arg: u64::from_le_bytes(arg),
        })
    }
}

/// First message each way: who I am and the ring I registered for you.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Sender's node id.
    pub node_id: u64,
    /// Bytes of the ring the sender of this HELLO registered for its peer.
    pub ring_capacity: u64,
    /// RDMA: virtual address of that ring in the sender's memory (0 over TCP).
    pub ring_addr: u64,
    /// RDMA: remote key of that ring's memory region (0 over TCP).
    pub ring_rkey: u32,
}

impl Hello {
    /// Header plus body, ready to write.
    pub fn encode(&self) -> [u8; HEADER_LEN + HELLO_LEN] {
        let mut b = [0u8; HEADER_LEN + HELLO_LEN];
        let h = MessageHeader {
            op: Op::Hello,
            len: HELLO_LEN as u32,
            arg: 0,
        };
        b[..HEADER_LEN].copy_from_slice(&h.encode());
        let body = &mut b[HEADER_LEN..];
        body[0..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
        body[4..6].copy_from_slice(&LINK_VERSION.to_le_bytes());
        body[8..16].copy_from_slice(&self.node_id.to_le_bytes());
        body[16..24].copy_from_slice(&self.ring_capacity.to_le_bytes());
        body[24..32].copy_from_slice(&self.ring_addr.to_le_bytes());
        body[32..36].copy_from_slice(&self.ring_rkey.to_le_bytes());
        b
    }

    /// Decodes a HELLO body (after its header).
    ///
    /// # Errors
    /// [`ControlError::BadMagic`] or [`ControlError::BadVersion`].
    pub fn decode(body: &[u8; HELLO_LEN]) -> Result<Self, ControlError> {
        let magic = u32::from_le_bytes([body[0], body[1], body[2], body[3]]);
        if magic != HELLO_MAGIC {
            return Err(ControlError::BadMagic(magic));
        }
        let version = u16::from_le_bytes([body[4], body[5]]);
        if version != LINK_VERSION {
            return Err(ControlError::BadVersion { peer: version });
        }
        let mut a = [0u8; 8];
        a.copy_from_slice(&body[8..16]);
        let node_id = u64::from_le_bytes(a);
        a.copy_from_slice(&body[16..24]);
        let ring_capacity = u64::from_le_bytes(a);
        a.copy_from_slice(&body[24..32]);
        Ok(Self {
            node_id,
            ring_capacity,
            ring_addr: u64::from_le_bytes(a),
            ring_rkey: u32::from_le_bytes([body[32], body[33], body[34], body[35]]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hello_round_trips() {
        let h = Hello {
            node_id: 0xdead_beef,
            ring_capacity: 1 << 23,
            ring_addr: 0x7f00_1234_5000,
            ring_rkey: 0x1234,
        };
        let b = h.encode();
        let head = MessageHeader::decode(b[..HEADER_LEN].try_into().unwrap(), 1 << 20).unwrap();
        assert_eq!(head.op, Op::Hello);
        assert_eq!(
            Hello::decode(b[HEADER_LEN..].try_into().unwrap()).unwrap(),
            h
        );
    }

    #[test]
    fn lengths_are_checked_per_op() {
        let enc = |op, len| MessageHeader { op, len, arg: 5 }.encode();
        assert!(MessageHeader::decode(&enc(Op::Write, 100), 100).is_ok());
        assert!(MessageHeader::decode(&enc(Op::Write, 101), 100).is_err());
        assert!(MessageHeader::decode(&enc(Op::Write, 0), 100).is_err());
        assert!(MessageHeader::decode(&enc(Op::Credit, 1), 100).is_err());
        assert!(MessageHeader::decode(&enc(Op::Hello, 47), 100).is_err());
        let mut bad = enc(Op::Keepalive, 0);
        bad[0] = 99;
        assert_eq!(
            MessageHeader::decode(&bad, 100),
            Err(ControlError::BadOp(99))
        );
    }

    #[test]
    fn wrong_version_and_magic_are_refused() {
        let mut b = Hello {
            node_id: 1,
            ring_capacity: 4096,
            ring_addr: 0,
            ring_rkey: 0,
        }
        .encode();
        b[HEADER_LEN + 4] = 9;
        let body: &[u8; HELLO_LEN] = b[HEADER_LEN..].try_into().unwrap();
        assert_eq!(
            Hello::decode(body),
            Err(ControlError::BadVersion { peer: 9 })
        );
        b[HEADER_LEN] = 0;
        let body: &[u8; HELLO_LEN] = b[HEADER_LEN..].try_into().unwrap();
        assert!(matches!(
            Hello::decode(body),
            Err(ControlError::BadMagic(_))
        ));
    }

    proptest! {
        #[test]
        fn decode_never_panics(h in any::<[u8; HEADER_LEN]>(), body in any::<[u8; HELLO_LEN]>(), max in any::<u32>()) {
            let _ = MessageHeader::decode(&h, max);
            let _ = Hello::decode(&body);
        }
    }
}
