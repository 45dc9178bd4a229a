//! Link messages: fixed-size control messages (handshake, credit,
//! keepalive) and the header of a ring write, little-endian, pure.
//!
//! Every message starts with a 16-byte header:
//! `op u8, reserved [u8; 3], len u32, arg u64`. `len` is the number of bytes
//! that follow; each opcode allows exactly one length (WRITE: 1 to the
//! ring's capacity). `arg` is the ring position for WRITE, the receiver's
//! head for CREDIT and the reason for REFUSE. The handshake messages (HELLO,
//! PROOF, RING, REFUSE) are described in `handshake` and docs/protocol.md.

/// Bytes of a message header.
pub const HEADER_LEN: usize = 16;
/// Bytes of a HELLO body (link protocol 2).
pub const HELLO_LEN: usize = 128;
/// Bytes of a HELLO body in link protocol 1: accepted only to say which
/// version the peer speaks.
pub const HELLO_V1_LEN: usize = 48;
/// Bytes of a PROOF body (an HMAC-SHA256 tag).
pub const PROOF_LEN: usize = 32;
/// Bytes of a RING body.
pub const RING_LEN: usize = 24;
/// Largest control message (header and body): RDMA receive slots hold one.
pub const MAX_CONTROL_LEN: usize = HEADER_LEN + HELLO_LEN;
/// Magic opening a HELLO body.
pub const HELLO_MAGIC: u32 = u32::from_le_bytes(*b"RSHL");
/// Link protocol version spoken by this build.
pub const LINK_VERSION: u16 = 2;
/// Bytes of the nonce in a HELLO.
pub const NONCE_LEN: usize = 32;
/// Bytes of the server description in a HELLO.
pub const SERVER_LEN: usize = 32;

/// Message kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// Identity, versions, auth mode and a fresh nonce; first message each way.
    Hello = 1,
    /// `len` bytes follow, to be placed at ring position `arg` (the TCP stand-in
    /// for an RDMA WRITE_WITH_IMM).
    Write = 2,
    /// The receiver has consumed its ring up to position `arg`.
    Credit = 3,
    /// Nothing to say; the sender is alive.
    Keepalive = 4,
    /// The HMAC proving knowledge of the shared secret.
    Proof = 5,
    /// The ring the sender registered for its peer (after authentication).
    Ring = 6,
    /// The sender refuses the connection; `arg` says why ([`RefuseReason`]).
    Refuse = 7,
}

/// Why a node refused a connection (the `arg` of REFUSE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum RefuseReason {
    /// Wrong or missing secret.
    Auth = 1,
    /// Link protocol, frame or RDB format versions differ.
    Version = 2,
    /// Both nodes have the same node id.
    SameNodeId = 3,
    /// A message the handshake does not allow.
    Malformed = 4,
    /// Anything else (a reason from a newer version).
    Other = 5,
    /// The wall clocks differ by more than `max-clock-offset`.
    ClockOffset = 6,
}

impl RefuseReason {
    /// The reason for a REFUSE `arg`; unknown values are [`Self::Other`].
    pub fn from_arg(arg: u64) -> Self {
        match arg {
            1 => Self::Auth,
            2 => Self::Version,
            3 => Self::SameNodeId,
            4 => Self::Malformed,
            6 => Self::ClockOffset,
            _ => Self::Other,
        }
    }

    /// What the log says.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auth => "authentication failed (wrong or missing secret)",
            Self::Version => "incompatible versions",
            Self::SameNodeId => "same node id",
            Self::Malformed => "malformed handshake",
            Self::Other => "unspecified reason",
            Self::ClockOffset => "the clocks differ by more than max-clock-offset",
        }
    }
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
    /// HELLO with an unknown auth mode.
    #[error("unknown auth mode {0}")]
    BadAuthMode(u8),
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
            5 => Op::Proof,
            6 => Op::Ring,
            7 => Op::Refuse,
            other => return Err(ControlError::BadOp(other)),
        };
        let len = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let mut arg = [0u8; 8];
        arg.copy_from_slice(&b[8..16]);
        let ok = match op {
            // A version 1 HELLO is read only to name the peer's version.
            Op::Hello => len as usize == HELLO_LEN || len as usize == HELLO_V1_LEN,
            Op::Write => len > 0 && len <= max_write,
            Op::Proof => len as usize == PROOF_LEN,
            Op::Ring => len as usize == RING_LEN,
            Op::Credit | Op::Keepalive | Op::Refuse => len == 0,
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

/// How a node authenticates its peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum AuthMode {
    /// No secret configured: the peer is not authenticated.
    None = 0,
    /// Mutual challenge-response with HMAC-SHA256 over the handshake.
    HmacSha256 = 1,
}

impl AuthMode {
    /// The spelling used in `RDMASYNC.STATUS`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::HmacSha256 => "hmac-sha256",
        }
    }
}

/// First message each way: who I am, what I run, and a fresh nonce. It
/// discloses nothing about memory: the ring follows only after both sides
/// have proven the secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Sender's node id.
    pub node_id: u64,
    /// Version of the frames the sender writes (`wire::VERSION`).
    pub frame_version: u8,
    /// How the sender authenticates.
    pub auth: AuthMode,
    /// RDB format of the sender's DUMP payloads (0: unknown).
    pub rdb_version: u16,
    /// Random bytes, fresh for every connection.
    pub nonce: [u8; NONCE_LEN],
    /// What the sender runs ("redis 7.0.15"), ASCII, NUL-padded.
    pub server: [u8; SERVER_LEN],
    /// The sender's wall clock when it sent the HELLO, in milliseconds
    /// since the Unix epoch (0: not said).
    pub wall_ms: u64,
}

/// `text` as a NUL-padded server description (cut to [`SERVER_LEN`]).
pub fn server_field(text: &str) -> [u8; SERVER_LEN] {
    let mut out = [0u8; SERVER_LEN];
    for (o, c) in out.iter_mut().zip(text.bytes()) {
        *o = c;
    }
    out
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
        body[6] = self.frame_version;
        body[7] = self.auth as u8;
        body[8..16].copy_from_slice(&self.node_id.to_le_bytes());
        body[16..18].copy_from_slice(&self.rdb_version.to_le_bytes());
        body[24..56].copy_from_slice(&self.nonce);
        body[56..88].copy_from_slice(&self.server);
        body[88..96].copy_from_slice(&self.wall_ms.to_le_bytes());
        b
    }

    /// Decodes a HELLO body (after its header). A body of another protocol
    /// version is refused by naming that version.
    ///
    /// # Errors
    /// [`ControlError::BadMagic`], [`ControlError::BadVersion`],
    /// [`ControlError::BadAuthMode`], or a length that is not [`HELLO_LEN`].
    pub fn decode(body: &[u8]) -> Result<Self, ControlError> {
        let short = || ControlError::BadLength {
            op: Op::Hello,
            len: u32::try_from(body.len()).unwrap_or(u32::MAX),
        };
        let head = body.get(..6).ok_or_else(short)?;
        let magic = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        if magic != HELLO_MAGIC {
            return Err(ControlError::BadMagic(magic));
        }
        let version = u16::from_le_bytes([head[4], head[5]]);
        if version != LINK_VERSION {
            return Err(ControlError::BadVersion { peer: version });
        }
        let body: &[u8; HELLO_LEN] = body.try_into().map_err(|_| short())?;
        let auth = match body[7] {
            0 => AuthMode::None,
            1 => AuthMode::HmacSha256,
            other => return Err(ControlError::BadAuthMode(other)),
        };
        let mut id = [0u8; 8];
        id.copy_from_slice(&body[8..16]);
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&body[24..56]);
        let mut server = [0u8; SERVER_LEN];
        server.copy_from_slice(&body[56..88]);
        let mut wall = [0u8; 8];
        wall.copy_from_slice(&body[88..96]);
        Ok(Self {
            wall_ms: u64::from_le_bytes(wall),
            node_id: u64::from_le_bytes(id),
            frame_version: body[6],
            auth,
            rdb_version: u16::from_le_bytes([body[16], body[17]]),
            nonce,
            server,
        })
    }

    /// The server description, printable ASCII only (safe for the log).
    pub fn server_name(&self) -> String {
        let text: String = self
            .server
            .iter()
            .take_while(|b| **b != 0)
            .map(|&b| {
                if b.is_ascii_graphic() || b == b' ' {
                    b as char
                } else {
                    '?'
                }
            })
            .collect();
        if text.is_empty() {
            "an unnamed server".into()
        } else {
            text
        }
    }
}

/// The ring a node registered for its peer: sent only after authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteRing {
    /// Bytes in the ring (a power of two).
    pub capacity: u64,
    /// RDMA: virtual address of the ring in the sender's memory (0 over TCP).
    pub addr: u64,
    /// RDMA: remote key of the ring's memory region (0 over TCP).
    pub rkey: u32,
}

impl RemoteRing {
    /// Header plus body, ready to write.
    pub fn encode(&self) -> [u8; HEADER_LEN + RING_LEN] {
        let mut b = [0u8; HEADER_LEN + RING_LEN];
        let h = MessageHeader {
            op: Op::Ring,
            len: RING_LEN as u32,
            arg: 0,
        };
        b[..HEADER_LEN].copy_from_slice(&h.encode());
        b[HEADER_LEN..HEADER_LEN + 8].copy_from_slice(&self.capacity.to_le_bytes());
        b[HEADER_LEN + 8..HEADER_LEN + 16].copy_from_slice(&self.addr.to_le_bytes());
        b[HEADER_LEN + 16..HEADER_LEN + 20].copy_from_slice(&self.rkey.to_le_bytes());
        b
    }

    /// Decodes a RING body (after its header). The geometry is checked by the caller.
    ///
    /// # Errors
    /// [`ControlError::BadLength`] for a body that is not [`RING_LEN`] bytes.
    pub fn decode(body: &[u8]) -> Result<Self, ControlError> {
        let body: &[u8; RING_LEN] = body.try_into().map_err(|_| ControlError::BadLength {
            op: Op::Ring,
            len: u32::try_from(body.len()).unwrap_or(u32::MAX),
        })?;
        let mut a = [0u8; 8];
        a.copy_from_slice(&body[0..8]);
        let capacity = u64::from_le_bytes(a);
        a.copy_from_slice(&body[8..16]);
        Ok(Self {
            capacity,
            addr: u64::from_le_bytes(a),
            rkey: u32::from_le_bytes([body[16], body[17], body[18], body[19]]),
        })
    }
}

/// A PROOF message carrying `tag`.
pub fn proof_message(tag: &[u8; PROOF_LEN]) -> [u8; HEADER_LEN + PROOF_LEN] {
    let mut b = [0u8; HEADER_LEN + PROOF_LEN];
    let h = MessageHeader {
        op: Op::Proof,
        len: PROOF_LEN as u32,
        arg: 0,
    };
    b[..HEADER_LEN].copy_from_slice(&h.encode());
    b[HEADER_LEN..].copy_from_slice(tag);
    b
}

/// A REFUSE message giving `reason`.
pub fn refuse_message(reason: RefuseReason) -> [u8; HEADER_LEN] {
    MessageHeader {
        op: Op::Refuse,
        len: 0,
        arg: reason as u64,
    }
    .encode()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hello() -> Hello {
        Hello {
            node_id: 0xdead_beef,
            frame_version: 1,
            auth: AuthMode::HmacSha256,
            rdb_version: 10,
            nonce: [7; NONCE_LEN],
            server: server_field("redis 7.0.15"),
            wall_ms: 1_764_000_000_000,
        }
    }

    #[test]
    fn hello_round_trips() {
        let h = hello();
        let b = h.encode();
        let head = MessageHeader::decode(b[..HEADER_LEN].try_into().unwrap(), 1 << 20).unwrap();
        assert_eq!(head.op, Op::Hello);
        assert_eq!(head.len as usize, HELLO_LEN);
        assert_eq!(Hello::decode(&b[HEADER_LEN..]).unwrap(), h);
        assert_eq!(h.server_name(), "redis 7.0.15");
    }

    #[test]
    fn ring_and_proof_round_trip() {
        let r = RemoteRing {
            capacity: 1 << 23,
            addr: 0x7f00_1234_5000,
            rkey: 0x1234,
        };
        let b = r.encode();
        let head = MessageHeader::decode(b[..HEADER_LEN].try_into().unwrap(), 0).unwrap();
        assert_eq!(head.op, Op::Ring);
        assert_eq!(RemoteRing::decode(&b[HEADER_LEN..]).unwrap(), r);
        let p = proof_message(&[3; PROOF_LEN]);
        let head = MessageHeader::decode(p[..HEADER_LEN].try_into().unwrap(), 0).unwrap();
        assert_eq!((head.op, head.len as usize), (Op::Proof, PROOF_LEN));
        let r = refuse_message(RefuseReason::Auth);
        let head = MessageHeader::decode(&r, 0).unwrap();
        assert_eq!(RefuseReason::from_arg(head.arg), RefuseReason::Auth);
        assert_eq!(RefuseReason::from_arg(99), RefuseReason::Other);
    }

    #[test]
    fn lengths_are_checked_per_op() {
        let enc = |op, len| MessageHeader { op, len, arg: 5 }.encode();
        assert!(MessageHeader::decode(&enc(Op::Write, 100), 100).is_ok());
        assert!(MessageHeader::decode(&enc(Op::Write, 101), 100).is_err());
        assert!(MessageHeader::decode(&enc(Op::Write, 0), 100).is_err());
        assert!(MessageHeader::decode(&enc(Op::Write, u32::MAX), 1 << 23).is_err());
        assert!(MessageHeader::decode(&enc(Op::Credit, 1), 100).is_err());
        assert!(MessageHeader::decode(&enc(Op::Hello, 47), 100).is_err());
        assert!(MessageHeader::decode(&enc(Op::Hello, u32::MAX), 100).is_err());
        assert!(MessageHeader::decode(&enc(Op::Proof, 31), 100).is_err());
        assert!(MessageHeader::decode(&enc(Op::Ring, 25), 100).is_err());
        assert!(MessageHeader::decode(&enc(Op::Refuse, 1), 100).is_err());
        let mut bad = enc(Op::Keepalive, 0);
        bad[0] = 99;
        assert_eq!(
            MessageHeader::decode(&bad, 100),
            Err(ControlError::BadOp(99))
        );
    }

    #[test]
    fn wrong_version_magic_and_mode_are_refused() {
        let mut b = hello().encode();
        b[HEADER_LEN + 4] = 9;
        assert_eq!(
            Hello::decode(&b[HEADER_LEN..]),
            Err(ControlError::BadVersion { peer: 9 })
        );
        // A version 1 HELLO (48 bytes) is named as such.
        let mut v1 = [0u8; HELLO_V1_LEN];
        v1[..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
        v1[4] = 1;
        assert_eq!(
            Hello::decode(&v1),
            Err(ControlError::BadVersion { peer: 1 })
        );
        let mut b = hello().encode();
        b[HEADER_LEN + 7] = 9;
        assert_eq!(
            Hello::decode(&b[HEADER_LEN..]),
            Err(ControlError::BadAuthMode(9))
        );
        b[HEADER_LEN] = 0;
        assert!(matches!(
            Hello::decode(&b[HEADER_LEN..]),
            Err(ControlError::BadMagic(_))
        ));
        assert!(Hello::decode(&b[HEADER_LEN..HEADER_LEN + 3]).is_err());
    }

    #[test]
    fn server_names_are_sanitised_for_the_log() {
        let mut h = hello();
        h.server = server_field("evil\nname\x1b[31m");
        assert_eq!(h.server_name(), "evil?name?[31m");
        h.server = [0; SERVER_LEN];
        assert_eq!(h.server_name(), "an unnamed server");
    }

    proptest! {
        #[test]
        fn decode_never_panics(h in any::<[u8; HEADER_LEN]>(), body in proptest::collection::vec(any::<u8>(), 0..200), max in any::<u32>()) {
            let _ = MessageHeader::decode(&h, max);
            let _ = Hello::decode(&body);
            let _ = RemoteRing::decode(&body);
        }
    }
}
