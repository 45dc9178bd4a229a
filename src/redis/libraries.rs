//! The function libraries a `FUNCTION DUMP` payload holds, as their code.
//!
//! A payload is, per library, the opcode `RDB_OPCODE_FUNCTION2` (245) and
//! the library's code as an RDB string (plain, or LZF-compressed when the
//! writer has `rdbcompression yes` and the code is over 20 bytes), then the
//! footer every DUMP ends with: the RDB version (2 bytes) and a CRC64 of
//! everything before it (8 bytes, little-endian). Redis 7.0+ and Valkey 8+
//! write it so (`rdbSaveFunctions`, `functionDumpCommand`).
//!
//! A node reads its own libraries so (one `FUNCTION DUMP` costs about half
//! of a `FUNCTION LIST WITHCODE`) when it compares all of them with their
//! versions (`capture::libraries`). Anything this reader does not know is
//! `None`, and the node lists them instead.

pub use crate::redis::rdb_read::lzf_decompress;
use crate::redis::rdb_read::RdbInput;

/// `RDB_OPCODE_FUNCTION2`: one library's code follows.
const OPCODE_LIBRARY: u8 = 245;
/// The footer after the libraries: RDB version and CRC64.
const FOOTER_LEN: usize = 10;

/// The code of each library in `payload`, in the payload's order; `None`
/// when its CRC does not match or it holds anything else.
pub fn codes(payload: &[u8]) -> Option<Vec<Vec<u8>>> {
    let body_len = payload.len().checked_sub(FOOTER_LEN)?;
    let (checked, crc) = payload.split_at(payload.len() - 8);
    if crate::redis::dump::crc64(checked) != u64::from_le_bytes(crc.try_into().ok()?) {
        return None;
    }
    let mut input = RdbInput::new(&payload[..body_len], 0);
    let mut codes = Vec::new();
    while !input.done() {
        if input.byte()? != OPCODE_LIBRARY {
            return None;
        }
        codes.push(input.string()?.into_owned());
    }
    Some(codes)
}

/// The name a library's code declares on its first line (`#!lua
/// name=mylib`, as the server reads it in `functionExtractLibMetaData`:
/// words split at white space, `name=` in any case); `None` when the line
/// quotes or escapes anything (the server's splitting would have to be
/// followed further) or the name is not letters, digits and underscores,
/// the only names a server accepts.
pub fn name(code: &[u8]) -> Option<&[u8]> {
    let line = code.split(|&b| b == b'\n').next()?;
    if !line.starts_with(b"#!") || line.iter().any(|b| matches!(b, b'"' | b'\'' | b'\\')) {
        return None;
    }
    let mut names = line
        .split(u8::is_ascii_whitespace)
        .skip(1)
        .filter_map(|word| {
            word.get(..5)
                .filter(|p| p.eq_ignore_ascii_case(b"name="))
                .map(|_| &word[5..])
        });
    let name = names.next()?;
    let valid = !name.is_empty() && name.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_');
    (valid && names.next().is_none()).then_some(name)
}

#[cfg(test)]
#[path = "libraries_tests.rs"]
mod tests;
