//! The function libraries a `FUNCTION DUMP` payload holds, as their code.
//!
//! A payload is, per library, the opcode `RDB_OPCODE_FUNCTION2` (245) and
//! the library's code as an RDB string (plain, or LZF-compressed when the
//! writer has `rdbcompression yes` and the code is over 20 bytes), then the
//! footer every DUMP ends with: the RDB version (2 bytes) and a CRC64 of
//! everything before it (8 bytes, little-endian). Redis 7.0+ and Valkey 8+
//! write it so (`rdbSaveFunctions`, `functionDumpCommand`).
//!
//! The receiver compares these codes with its own libraries and loads only
//! the new ones (`receive::apply`): `FUNCTION RESTORE ... FLUSH` compiles
//! every library again, so loading N libraries one at a time on the writer
//! cost the peer N squared compilations. Anything this reader does not know
//! is `None`, and the peer restores the payload whole as before.

/// `RDB_OPCODE_FUNCTION2`: one library's code follows.
const OPCODE_LIBRARY: u8 = 245;
/// The footer after the libraries: RDB version and CRC64.
const FOOTER_LEN: usize = 10;
/// Longest code accepted from one library (the decompressed length is
/// declared before the bytes; a corrupt one must not allocate gigabytes).
const MAX_CODE_LEN: u64 = 512 << 20;

/// The code of each library in `payload`, in the payload's order; `None`
/// when its CRC does not match or it holds anything else.
pub fn codes(payload: &[u8]) -> Option<Vec<Vec<u8>>> {
    let body_len = payload.len().checked_sub(FOOTER_LEN)?;
    let (checked, crc) = payload.split_at(payload.len() - 8);
    if crate::redis::dump::crc64(checked) != u64::from_le_bytes(crc.try_into().ok()?) {
        return None;
    }
    let mut input = Input {
        bytes: &payload[..body_len],
        at: 0,
    };
    let mut codes = Vec::new();
    while !input.done() {
        if input.byte()? != OPCODE_LIBRARY {
            return None;
        }
        codes.push(input.string()?);
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

/// Whether `payload` is laid out as libraries `codes` can read (opcodes
/// and string lengths; neither the CRC nor the compressed bytes are
/// checked): the writer's test of whether its peer reads it, made on
/// every change of the libraries, so it decompresses nothing.
pub fn readable(payload: &[u8]) -> bool {
    let Some(body_len) = payload.len().checked_sub(FOOTER_LEN) else {
        return false;
    };
    let mut input = Input {
        bytes: &payload[..body_len],
        at: 0,
    };
    while !input.done() {
        if input.byte() != Some(OPCODE_LIBRARY) || input.skip_string().is_none() {
            return false;
        }
    }
    true
}

/// A cursor over the libraries' bytes.
struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
}

/// How an RDB string's first bytes say it is stored (`rdbLoadLenByRef`).
enum Length {
    Plain(u64),
    /// `RDB_ENCVAL`: an integer (0, 1, 2: 8, 16, 32 bits) or LZF (3).
    Encoded(u8),
}

impl Input<'_> {
    fn done(&self) -> bool {
        self.at >= self.bytes.len()
    }

    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(n)?;
        let out = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(out)
    }

    fn byte(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn length(&mut self) -> Option<Length> {
        let first = self.byte()?;
        Some(match first >> 6 {
            0 => Length::Plain(u64::from(first & 0x3f)),
            1 => Length::Plain(u64::from(first & 0x3f) << 8 | u64::from(self.byte()?)),
            2 if first == 0x80 => Length::Plain(u64::from(u32::from_be_bytes(
                self.take(4)?.try_into().ok()?,
            ))),
            2 if first == 0x81 => Length::Plain(u64::from_be_bytes(self.take(8)?.try_into().ok()?)),
            3 => Length::Encoded(first & 0x3f),
            _ => return None,
        })
    }

    fn plain_length(&mut self) -> Option<usize> {
        match self.length()? {
            Length::Plain(n) if n <= MAX_CODE_LEN => usize::try_from(n).ok(),
            _ => None,
        }
    }

    /// Steps over an RDB string without decoding it.
    fn skip_string(&mut self) -> Option<()> {
        let n = match self.length()? {
            Length::Plain(n) if n <= MAX_CODE_LEN => usize::try_from(n).ok()?,
            Length::Encoded(0) => 1,
            Length::Encoded(1) => 2,
            Length::Encoded(2) => 4,
            Length::Encoded(3) => {
                let compressed_len = self.plain_length()?;
                self.plain_length()?;
                compressed_len
            }
            _ => return None,
        };
        self.take(n).map(|_| ())
    }

    /// An RDB string (`rdbGenericLoadStringObject`).
    fn string(&mut self) -> Option<Vec<u8>> {
        match self.length()? {
            Length::Plain(n) if n <= MAX_CODE_LEN => {
                Some(self.take(usize::try_from(n).ok()?)?.to_vec())
            }
            Length::Encoded(0) => Some((self.byte()? as i8).to_string().into_bytes()),
            Length::Encoded(1) => Some(
                i16::from_le_bytes(self.take(2)?.try_into().ok()?)
                    .to_string()
                    .into_bytes(),
            ),
            Length::Encoded(2) => Some(
                i32::from_le_bytes(self.take(4)?.try_into().ok()?)
                    .to_string()
                    .into_bytes(),
            ),
            Length::Encoded(3) => {
                let compressed_len = self.plain_length()?;
                let len = self.plain_length()?;
                lzf_decompress(self.take(compressed_len)?, len)
            }
            _ => None,
        }
    }
}

/// LZF decompression (the format of liblzf's `lzf_d.c`, which Redis uses):
/// `None` unless `input` decodes to exactly `len` bytes.
///
/// Each control byte `c` starts either a literal run (`c < 32`: the next
/// `c + 1` bytes) or a back reference: length `c >> 5` (7 means a further
/// byte is added), plus 2; offset `(c & 31) << 8`, plus the next byte,
/// plus 1, back from the end of the output.
pub fn lzf_decompress(input: &[u8], len: usize) -> Option<Vec<u8>> {
    // Three bytes decode to at most 264: a longer declared length is not
    // LZF (and must not reserve memory).
    if len > input.len().saturating_mul(88) {
        return None;
    }
    let mut out = Vec::with_capacity(len);
    let mut at = 0;
    while at < input.len() {
        let control = usize::from(input[at]);
        at += 1;
        if control < 32 {
            let run = input.get(at..at + control + 1)?;
            out.extend_from_slice(run);
            at += control + 1;
        } else {
            let mut run = control >> 5;
            if run == 7 {
                run += usize::from(*input.get(at)?);
                at += 1;
            }
            let back = ((control & 0x1f) << 8) + usize::from(*input.get(at)?) + 1;
            at += 1;
            let mut from = out.len().checked_sub(back)?;
            // A reference may overlap what it writes: copied in pieces of
            // at most `back` bytes, each already written.
            let mut left = run + 2;
            while left > 0 {
                let piece = left.min(out.len() - from);
                out.extend_from_within(from..from + piece);
                from += piece;
                left -= piece;
            }
        }
        if out.len() > len {
            return None;
        }
    }
    (out.len() == len).then_some(out)
}

#[cfg(test)]
#[path = "libraries_tests.rs"]
mod tests;
