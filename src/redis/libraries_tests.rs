use super::*;
use proptest::prelude::*;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// `FUNCTION DUMP` of Redis 7.0.15 holding two libraries: `x2` stored
/// plain (compressing it saved too little) and `mylib` LZF-compressed.
const TWO_LIBRARIES: &str = "f5404423216c7561206e616d653d78320a72656469732e72656769737465725f66756e6374696f6e28226632222c2066756e6374696f6e28292072657475726e203220656e6429f5c3405d40791f23216c7561206e616d653d6d796c69620a72656469732e72656769737465725f0e66756e6374696f6e28226b6e6f636b600402222c20e0001617292072657475726e202257686f2069732074686572653f20e0120d052220656e64290a00bede8bd9b7098e05";

#[test]
fn a_dump_of_redis_gives_each_library_s_code_plain_or_compressed() {
    let codes = codes(&hex(TWO_LIBRARIES)).expect("a payload Redis wrote");
    assert_eq!(
        codes,
        vec![
            b"#!lua name=x2\nredis.register_function(\"f2\", function() return 2 end)".to_vec(),
            b"#!lua name=mylib\nredis.register_function(\"knockknock\", function() return \"Who is there? Who is there? Who is there?\" end)".to_vec(),
        ]
    );
}

#[test]
fn an_empty_dump_holds_no_library() {
    let mut payload = vec![10, 0];
    payload.extend_from_slice(&crate::redis::dump::crc64(&payload).to_le_bytes());
    assert_eq!(codes(&payload), Some(vec![]));
}

#[test]
fn a_payload_with_a_wrong_crc_or_an_unknown_opcode_is_not_read() {
    let good = hex(TWO_LIBRARIES);
    let mut flipped = good.clone();
    flipped[20] ^= 1;
    assert_eq!(codes(&flipped), None, "CRC mismatch");
    // The pre-GA opcode (246), with a CRC that matches.
    let mut old = good[..good.len() - 8].to_vec();
    old[0] = 246;
    old.extend_from_slice(&crate::redis::dump::crc64(&old).to_le_bytes());
    assert_eq!(codes(&old), None, "unknown opcode");
    assert_eq!(codes(&[]), None);
}

/// One step of an LZF stream the way liblzf's compressor may write it.
#[derive(Debug, Clone)]
enum Step {
    Literal(Vec<u8>),
    /// A back reference: `back` is taken modulo what is written so far.
    Copy {
        len: usize,
        back: usize,
    },
}

/// Encodes `steps` as LZF, returning the stream and what it decodes to.
fn encode(steps: &[Step]) -> (Vec<u8>, Vec<u8>) {
    let (mut stream, mut out) = (Vec::new(), Vec::new());
    for step in steps {
        match step {
            Step::Literal(bytes) => {
                stream.push((bytes.len() - 1) as u8);
                stream.extend_from_slice(bytes);
                out.extend_from_slice(bytes);
            }
            Step::Copy { len, back } => {
                if out.is_empty() {
                    continue;
                }
                let back = 1 + back % out.len().min(8192);
                let offset = back - 1;
                let l = len - 2;
                if l < 7 {
                    stream.push(((l << 5) | (offset >> 8)) as u8);
                } else {
                    stream.push(((7 << 5) | (offset >> 8)) as u8);
                    stream.push((l - 7) as u8);
                }
                stream.push((offset & 0xff) as u8);
                let from = out.len() - back;
                for i in from..from + len {
                    out.push(out[i]);
                }
            }
        }
    }
    (stream, out)
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 1..=32).prop_map(Step::Literal),
        (3usize..=264, any::<usize>()).prop_map(|(len, back)| Step::Copy { len, back }),
    ]
}

proptest! {
    #[test]
    fn lzf_streams_decode_to_what_they_encode(steps in prop::collection::vec(step(), 0..40)) {
        let (stream, expected) = encode(&steps);
        prop_assert_eq!(lzf_decompress(&stream, expected.len()), Some(expected.clone()));
        if !expected.is_empty() {
            prop_assert_eq!(lzf_decompress(&stream, expected.len() - 1), None);
        }
        prop_assert_eq!(lzf_decompress(&stream, expected.len() + 1), None);
    }

    #[test]
    fn any_bytes_are_read_or_refused_without_a_panic(bytes in prop::collection::vec(any::<u8>(), 0..200), len in 0usize..400) {
        let _ = lzf_decompress(&bytes, len);
        let _ = codes(&bytes);
        let mut sealed = bytes.clone();
        sealed.extend_from_slice(&[10, 0]);
        sealed.extend_from_slice(&crate::redis::dump::crc64(&sealed).to_le_bytes());
        let _ = codes(&sealed);
    }
}

#[test]
fn a_reference_before_the_start_is_refused() {
    // A literal "a", then a copy 2 back.
    assert_eq!(lzf_decompress(&[0, b'a', 0x20, 1], 4), None);
    assert_eq!(
        lzf_decompress(&[0, b'a', 0x20, 0], 4),
        Some(b"aaaa".to_vec())
    );
}

#[test]
fn a_library_s_name_is_read_from_its_first_line() {
    assert_eq!(name(b"#!lua name=mylib\nreturn 1"), Some(&b"mylib"[..]));
    assert_eq!(name(b"#!lua   NAME=lib_2 \nx"), Some(&b"lib_2"[..]));
    assert_eq!(name(b"#!lua\tname=t\r\nx"), Some(&b"t"[..]));
    for unread in [
        &b"#!lua name=\"q\"\nx"[..],
        b"#!lua nom=x\nx",
        b"#!lua name=a name=b\nx",
        b"#!lua name=a-b\nx",
        b"#!lua name=\nx",
        b"lua name=x\nx",
    ] {
        assert_eq!(name(unread), None, "{}", String::from_utf8_lossy(unread));
    }
}
