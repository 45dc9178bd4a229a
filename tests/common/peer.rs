//! A hand-written client of the link handshake, following docs/protocol.md
//! (not the module's own code): it plays a peer, honest or hostile.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub const OP_HELLO: u8 = 1;
pub const OP_WRITE: u8 = 2;
pub const OP_PROOF: u8 = 5;
pub const OP_RING: u8 = 6;
pub const OP_REFUSE: u8 = 7;
pub const HELLO_LEN: usize = 128;

/// A 16-byte message header.
pub fn header(op: u8, len: u32, arg: u64) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[0] = op;
    h[4..8].copy_from_slice(&len.to_le_bytes());
    h[8..16].copy_from_slice(&arg.to_le_bytes());
    h
}

/// What a HELLO says.
#[derive(Debug, Clone, Copy)]
pub struct HelloFields {
    pub version: u16,
    pub frame_version: u8,
    pub auth: u8,
    pub node_id: u64,
    pub rdb_version: u16,
    pub nonce: [u8; 32],
    pub server: [u8; 32],
}

impl HelloFields {
    pub fn body(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(b"RSHL");
        b[4..6].copy_from_slice(&self.version.to_le_bytes());
        b[6] = self.frame_version;
        b[7] = self.auth;
        b[8..16].copy_from_slice(&self.node_id.to_le_bytes());
        b[16..18].copy_from_slice(&self.rdb_version.to_le_bytes());
        b[24..56].copy_from_slice(&self.nonce);
        b[56..88].copy_from_slice(&self.server);
        b
    }

    pub fn message(&self) -> Vec<u8> {
        let mut m = header(OP_HELLO, HELLO_LEN as u32, 0).to_vec();
        m.extend_from_slice(&self.body());
        m
    }

    pub fn parse(b: &[u8]) -> HelloFields {
        assert_eq!(&b[0..4], b"RSHL", "not a HELLO");
        HelloFields {
            version: u16::from_le_bytes([b[4], b[5]]),
            frame_version: b[6],
            auth: b[7],
            node_id: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            rdb_version: u16::from_le_bytes([b[16], b[17]]),
            nonce: b[24..56].try_into().unwrap(),
            server: b[56..88].try_into().unwrap(),
        }
    }
}

/// The proof `label` ("dialer" or "acceptor") sends.
pub fn proof(secret: &[u8], label: &str, dialer: &[u8], acceptor: &[u8]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).unwrap();
    mac.update(b"rdmasync link auth v2\0");
    mac.update(format!("{label} proof\0").as_bytes());
    mac.update(dialer);
    mac.update(acceptor);
    mac.update(&[0u8; 32]);
    mac.finalize().into_bytes().into()
}

/// One message: (op, arg, body).
pub fn read_msg(s: &mut TcpStream) -> std::io::Result<(u8, u64, Vec<u8>)> {
    let mut h = [0u8; 16];
    s.read_exact(&mut h)?;
    let len = u32::from_le_bytes(h[4..8].try_into().unwrap()) as usize;
    assert!(len <= 4096, "the node sent a {len}-byte message");
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)?;
    Ok((h[0], u64::from_le_bytes(h[8..16].try_into().unwrap()), body))
}

/// A connection to a node's listen port, with timeouts.
pub fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect((super::test_ip(), port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// What a dialer's handshake recorded.
pub struct Dialed {
    pub stream: TcpStream,
    /// The HELLO and PROOF we sent.
    pub sent: Vec<Vec<u8>>,
    /// The node's HELLO.
    pub node_hello: HelloFields,
    /// Whether the node proved the secret back.
    pub node_proved: bool,
}

/// Dials `port` as node `node_id` with `secret`, mirroring the node's
/// versions, and runs the handshake up to the node's PROOF (and RING, if
/// the node keeps the connection; then sends our RING too).
pub fn dial(port: u16, node_id: u64, secret: &[u8], ring: u64) -> Dialed {
    let mut s = connect(port);
    let (op, _, body) = read_msg(&mut s).unwrap();
    assert_eq!(op, OP_HELLO);
    let node = HelloFields::parse(&body);
    let ours = HelloFields {
        node_id,
        auth: 1,
        nonce: rand_nonce(),
        ..node
    };
    let hello = ours.message();
    s.write_all(&hello).unwrap();
    let p = proof(secret, "dialer", &ours.body(), &body);
    let mut pm = header(OP_PROOF, 32, 0).to_vec();
    pm.extend_from_slice(&p);
    s.write_all(&pm).unwrap();
    let mut node_proved = false;
    if let Ok((op, _, b)) = read_msg(&mut s) {
        if op == OP_PROOF {
            node_proved = b == proof(secret, "acceptor", &ours.body(), &body);
            if node_id < node.node_id {
                let (op, _, _) = read_msg(&mut s).unwrap();
                assert_eq!(op, OP_RING);
                let mut r = header(OP_RING, 24, 0).to_vec();
                r.extend_from_slice(&ring.to_le_bytes());
                r.extend_from_slice(&[0u8; 16]);
                s.write_all(&r).unwrap();
            }
        }
    }
    Dialed {
        stream: s,
        sent: vec![hello, pm],
        node_hello: node,
        node_proved,
    }
}

fn rand_nonce() -> [u8; 32] {
    let mut n = [0u8; 32];
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    for (i, b) in n.iter_mut().enumerate() {
        *b = (t >> (i % 16 * 8)) as u8 ^ (i as u8).wrapping_mul(37) ^ std::process::id() as u8;
    }
    n
}
