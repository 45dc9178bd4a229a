//! Reading RDB serialisations (`rdb.c`): lengths and strings, plain,
//! integer-encoded or LZF-compressed, from a byte slice. Shared by the
//! readers of `FUNCTION DUMP` payloads (`libraries`) and of the plain
//! collection payloads the module writes (`plain_value`). Anything it
//! does not know is `None`: bytes from the network are never trusted.

use std::borrow::Cow;

/// Longest string accepted (the default `proto-max-bulk-len`): the length
/// is declared before the bytes, and a corrupt one must not allocate
/// gigabytes.
const MAX_STRING_LEN: u64 = 512 << 20;

/// A cursor over RDB bytes.
pub struct RdbInput<'a> {
    bytes: &'a [u8],
    at: usize,
}

/// How an RDB string's first bytes say it is stored (`rdbLoadLenByRef`).
pub enum Length {
    /// A plain length.
    Plain(u64),
    /// `RDB_ENCVAL`: an integer (0, 1, 2: 8, 16, 32 bits) or LZF (3).
    Encoded(u8),
}

impl<'a> RdbInput<'a> {
    /// A cursor at `at` in `bytes`.
    pub fn new(bytes: &'a [u8], at: usize) -> Self {
        Self { bytes, at }
    }

    /// Where the cursor is.
    pub fn at(&self) -> usize {
        self.at
    }

    /// Whether every byte was read.
    pub fn done(&self) -> bool {
        self.at >= self.bytes.len()
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let out = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(out)
    }

    /// The next byte.
    pub fn byte(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    /// A length or a string's encoding (`rdbLoadLenByRef`).
    pub fn length(&mut self) -> Option<Length> {
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

    /// A plain length of at most [`MAX_STRING_LEN`].
    pub fn plain_length(&mut self) -> Option<usize> {
        match self.length()? {
            Length::Plain(n) if n <= MAX_STRING_LEN => usize::try_from(n).ok(),
            _ => None,
        }
    }

    /// Steps over an RDB string without decoding it.
    pub fn skip_string(&mut self) -> Option<()> {
        let n = match self.length()? {
            Length::Plain(n) if n <= MAX_STRING_LEN => usize::try_from(n).ok()?,
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

    /// An RDB string (`rdbGenericLoadStringObject`): borrowed when stored
    /// plain, decoded otherwise.
    pub fn string(&mut self) -> Option<Cow<'a, [u8]>> {
        let int = |v: i64| Some(Cow::Owned(v.to_string().into_bytes()));
        match self.length()? {
            Length::Plain(n) if n <= MAX_STRING_LEN => {
                Some(Cow::Borrowed(self.take(usize::try_from(n).ok()?)?))
            }
            Length::Encoded(0) => int(i64::from(self.byte()? as i8)),
            Length::Encoded(1) => int(i64::from(i16::from_le_bytes(
                self.take(2)?.try_into().ok()?,
            ))),
            Length::Encoded(2) => int(i64::from(i32::from_le_bytes(
                self.take(4)?.try_into().ok()?,
            ))),
            Length::Encoded(3) => {
                let compressed_len = self.plain_length()?;
                let len = self.plain_length()?;
                lzf_decompress(self.take(compressed_len)?, len).map(Cow::Owned)
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
