//! Any bytes given to the frame decoder: an error or a frame whose fields are
//! consistent with the bytes, never a panic. Inputs whose header is valid also
//! get their checksum fixed up, so the paths behind the CRC are explored too.
//! A counter state, hash state or bound notice in a frame's value is
//! decoded too, and the bytes an append frame carries: an error or a
//! state that survives a round trip; a
//! function library's code gives its name or none, and the same bytes
//! read as a `FUNCTION DUMP` payload (the reader of this node's own
//! libraries) give their codes or none. The raw bytes also go through the
//! list decoders (a flush, a pop, a positions state), which will travel in
//! frames once list pops are on the data path: an error or a round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmasync::converge::merge::{codec, hash_codec, list_codec};
use rdmasync::proto::wire::{self, FrameKind, Peeked};

/// The merge state a counter, fields or bound frame carries decodes or
/// fails.
fn check_merge_state(kind: FrameKind, value: &[u8]) {
    match kind {
        FrameKind::Counter => {
            if let Ok(c) = codec::decode_counter(value) {
                assert_eq!(codec::decode_counter(&codec::encode_counter(&c)), Ok(c));
            }
        }
        FrameKind::Bound => {
            if let Ok(notice) = hash_codec::decode_notice(value) {
                let again = hash_codec::encode_notice(&notice);
                assert_eq!(hash_codec::decode_notice(&again), Ok(notice));
            }
        }
        FrameKind::Fields => {
            if let Ok(h) = hash_codec::decode_hash(value) {
                assert_eq!(hash_codec::decode_hash(&hash_codec::encode_hash(&h)), Ok(h));
            }
        }
        FrameKind::Library => {
            use rdmasync::redis::libraries;
            if let Some(name) = libraries::name(value) {
                assert!(!name.is_empty());
            }
            // With the payload's own CRC64 fixed up, past its check too.
            let _ = libraries::codes(value);
            if let Some(at) = value.len().checked_sub(8) {
                let mut sealed = value.to_vec();
                let crc = rdmasync::redis::dump::crc64(&sealed[..at]);
                sealed[at..].copy_from_slice(&crc.to_le_bytes());
                let _ = libraries::codes(&sealed);
            }
        }
        FrameKind::Append => {
            use rdmasync::converge::appends::AppendEdit;
            if let Some(edit) = AppendEdit::decode(value) {
                assert!(!edit.tail.is_empty());
                assert_eq!(edit.encode(), value);
            }
        }
        _ => {}
    }
}

/// The list records decode or fail; what decodes survives a round trip.
fn check_list_records(bytes: &[u8]) {
    if let Ok((stamp, flushed)) = list_codec::decode_flush(bytes) {
        let again = list_codec::encode_flush(stamp, &flushed);
        assert_eq!(list_codec::decode_flush(&again), Ok((stamp, flushed)));
    }
    if let Ok((stamp, taken)) = list_codec::decode_pop(bytes) {
        let again = list_codec::encode_pop(stamp, &taken);
        assert_eq!(list_codec::decode_pop(&again), Ok((stamp, taken)));
    }
    if let Ok(state) = list_codec::decode_list(bytes) {
        let once = list_codec::encode_list(&state);
        let twice = list_codec::decode_list(&once).map(|s| list_codec::encode_list(&s));
        assert_eq!(twice, Ok(once));
    }
}

fn check(data: &[u8]) {
    if let Ok(frame) = wire::decode_frame(data) {
        assert!(frame.len <= data.len());
        assert_eq!(frame.key.len(), frame.header.key_len as usize);
        assert_eq!(frame.value.len(), frame.header.value_len as usize);
        // What decodes re-encodes to the same bytes (padding aside).
        let mut out = vec![0u8; frame.len];
        let n = wire::encode_frame(&frame.header, frame.key, frame.value, &mut out).unwrap();
        assert_eq!(n, frame.len);
        let body = wire::HEADER_LEN + frame.key.len() + frame.value.len() + wire::TRAILER_LEN;
        assert_eq!(&out[..body], &data[..body]);
        check_merge_state(frame.header.kind, frame.value);
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    check_list_records(data);
    if let Ok(Peeked::Frame(len)) = wire::peek(data) {
        if len <= data.len() && data.len() >= wire::HEADER_LEN {
            let key = u32::from_le_bytes([data[48], data[49], data[50], data[51]]) as usize;
            let value = u32::from_le_bytes([data[52], data[53], data[54], data[55]]) as usize;
            let end = wire::HEADER_LEN + key + value;
            if end + wire::TRAILER_LEN <= len {
                let mut fixed = data.to_vec();
                let crc = crc32c::crc32c(&fixed[..end]);
                fixed[end..end + 4].copy_from_slice(&crc.to_le_bytes());
                check(&fixed);
                assert!(wire::decode_frame(&fixed).is_ok());
            }
        }
    }
});
