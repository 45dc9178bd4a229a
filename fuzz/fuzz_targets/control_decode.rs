//! Any bytes given to the link message decoders: an error or a message, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmasync::proto::control::{Hello, MessageHeader, RemoteRing, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 + HEADER_LEN {
        return;
    }
    let max = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
    let head: &[u8; HEADER_LEN] = data[4..4 + HEADER_LEN].try_into().unwrap();
    if let Ok(h) = MessageHeader::decode(head, max) {
        assert_eq!(MessageHeader::decode(&h.encode(), max), Ok(h));
    }
    let body = &data[4 + HEADER_LEN..];
    if let Ok(hello) = Hello::decode(body) {
        let enc = hello.encode();
        assert_eq!(Hello::decode(&enc[HEADER_LEN..]), Ok(hello));
        let _ = hello.server_name();
    }
    if let Ok(ring) = RemoteRing::decode(body) {
        let enc = ring.encode();
        assert_eq!(RemoteRing::decode(&enc[HEADER_LEN..]), Ok(ring));
    }
});
