//! A peer driving the handshake with arbitrary messages, honest ones, and
//! honest ones with a byte flipped: the state machine returns steps or
//! errors, never panics, never authenticates a peer that does not know the
//! secret, and never completes before authenticating.
#![no_main]

use std::collections::VecDeque;

use libfuzzer_sys::fuzz_target;
use rdmasync::proto::auth::{Secret, Side};
use rdmasync::proto::control::{RemoteRing, HEADER_LEN};
use rdmasync::proto::handshake::{decode_header, Handshake, Local, Step};

const SECRET: &[u8] = b"fuzz-secret-0123456789";
const RING: RemoteRing = RemoteRing {
    capacity: 1 << 20,
    addr: 0x1000,
    rkey: 7,
};

fn local(node_id: u64, secret: bool) -> Local {
    Local {
        node_id,
        rdb_version: 10,
        server: "redis 7.0.15".into(),
        secret: secret.then(|| Secret::new(SECRET.to_vec()).unwrap()),
        // The honest side checks the clock of whatever the fuzzer says.
        wall_ms: 1_764_000_000_000,
        max_clock_offset_ms: 10_000,
    }
}

/// Delivers `msg` to the honest peer; queues what it answers.
fn to_honest(honest: &mut Handshake<'_>, msg: &[u8], out: &mut VecDeque<Vec<u8>>) {
    let Ok(h) = decode_header(msg[..HEADER_LEN].try_into().unwrap()) else {
        return;
    };
    match honest.on_message(&h, &msg[HEADER_LEN..]) {
        Ok(Step::Send(m)) => out.push_back(m),
        Ok(Step::Authenticated { reply, keep }) => {
            out.extend(reply);
            if keep {
                out.push_back(honest.ring_message(&RING).unwrap());
            }
        }
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let (side, peer_side) = if mode & 1 == 0 {
        (Side::Dialer, Side::Acceptor)
    } else {
        (Side::Acceptor, Side::Dialer)
    };
    let we_have_secret = mode & 2 != 0;
    let peer_knows = mode & 4 != 0;
    let peer_id = if mode & 8 == 0 { 5 } else { 50 };
    let me = local(10, we_have_secret);
    let them = local(peer_id, peer_knows);
    let (mut hs, hello) = Handshake::new(&me, side, [1; 32], [0; 32]);
    let (mut honest, honest_hello) = Handshake::new(&them, peer_side, [2; 32], [0; 32]);
    let mut from_honest: VecDeque<Vec<u8>> = VecDeque::from([honest_hello]);
    let mut to_peer: VecDeque<Vec<u8>> = VecDeque::from([hello]);
    while let Some((&action, r)) = rest.split_first() {
        rest = r;
        // Our messages reach the honest peer first, in order.
        while let Some(m) = to_peer.pop_front() {
            to_honest(&mut honest, &m, &mut from_honest);
        }
        let msg: Vec<u8> = match action % 4 {
            0 | 1 => from_honest.pop_front().unwrap_or_default(),
            2 => {
                let mut m = from_honest.pop_front().unwrap_or_default();
                if let [pos, x, tail @ ..] = rest {
                    if !m.is_empty() {
                        let i = *pos as usize % m.len();
                        m[i] ^= *x | 1;
                    }
                    rest = tail;
                }
                m
            }
            _ => {
                let n = rest.first().map_or(0, |&n| n as usize);
                let body = rest.get(1..).unwrap_or_default();
                let n = n.min(body.len());
                let m = body[..n].to_vec();
                rest = &body[n..];
                m
            }
        };
        if msg.len() < HEADER_LEN {
            continue;
        }
        let Ok(header) = decode_header(msg[..HEADER_LEN].try_into().unwrap()) else {
            continue;
        };
        match hs.on_message(&header, &msg[HEADER_LEN..]) {
            Err(_) => return,
            Ok(Step::Send(m)) => to_peer.push_back(m),
            Ok(Step::Wait) => {}
            Ok(Step::Authenticated { reply, keep }) => {
                assert!(hs.authenticated());
                assert!(
                    !we_have_secret || peer_knows,
                    "authenticated a peer that does not know the secret"
                );
                to_peer.extend(reply);
                if keep {
                    to_peer.push_back(hs.ring_message(&RING).unwrap());
                } else {
                    return;
                }
            }
            Ok(Step::Done(ring)) => {
                assert!(hs.authenticated());
                assert!(!we_have_secret || peer_knows);
                assert!(ring.capacity.is_power_of_two());
                return;
            }
        }
        if !hs.authenticated() {
            assert!(hs.ring_message(&RING).is_err());
        }
    }
});
