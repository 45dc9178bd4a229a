//! DUMP payloads built from a value read through the key API (no command):
//! the RDB serialisation of a list, set, sorted set or hash, and the footer
//! RESTORE checks (RDB version, CRC64). The peer RESTOREs them like a DUMP.
//!
//! A small hash or sorted set (at most 128 entries of at most 64 bytes, the
//! servers' default `*-max-listpack-*` limits) is written as the listpack
//! blob Redis itself keeps and DUMPs: the peer loads it with one copy, and
//! converts it if its own limits are lower. Anything larger, and every
//! list and set, is written as the plain RDB type (a length, then each
//! element), which every server since RDB version 8 loads, choosing each
//! encoding from its own settings as for an RDB file.

/// The kinds of value written, with the RDB type byte of their plain form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `RDB_TYPE_LIST`: a length, then each element.
    List = 1,
    /// `RDB_TYPE_SET`: a length, then each member.
    Set = 2,
    /// `RDB_TYPE_HASH`: a length, then each field and its value.
    Hash = 4,
    /// `RDB_TYPE_ZSET_2`: a length, then each member and its score as a
    /// little-endian binary double.
    SortedSet = 5,
}

/// The merged type a DUMP payload holds: a hash without field TTLs
/// (`RDB_TYPE_HASH`, the old zipmap and ziplist encodings 9 and 13, a
/// listpack), a set (plain, intset 11, listpack 20), a sorted set (3 and
/// `RDB_TYPE_ZSET_2`, ziplist 12, listpack) or a list (plain, ziplist 10,
/// quicklists 14 and 18); `None` for any other.
pub fn merged_kind(payload: &[u8]) -> Option<crate::converge::merge::hashes::Kind> {
    use crate::converge::merge::hashes::Kind as Merged;
    match *payload.first()? {
        4 | 9 | 13 | TYPE_HASH_LISTPACK => Some(Merged::Hash),
        2 | 11 | 20 => Some(Merged::Set),
        3 | 5 | 12 | TYPE_ZSET_LISTPACK => Some(Merged::SortedSet),
        1 | 10 | 14 | TYPE_LIST_QUICKLIST_2 => Some(Merged::List),
        _ => None,
    }
}

/// `RDB_TYPE_LIST_QUICKLIST_2`: a list's nodes, each a listpack or one
/// plain element.
const TYPE_LIST_QUICKLIST_2: u8 = 18;

/// `RDB_TYPE_HASH_LISTPACK`: an RDB string holding the listpack of fields
/// and values.
const TYPE_HASH_LISTPACK: u8 = 16;
/// `RDB_TYPE_ZSET_LISTPACK`: an RDB string holding the listpack of members
/// and scores (as text), in score order.
const TYPE_ZSET_LISTPACK: u8 = 17;

/// The RDB version in the footer: the oldest with the listpack types (Redis
/// 7.0's; Valkey 8 writes 11 and accepts any up to it: RESTORE refuses only
/// versions newer than its own).
pub const RDB_VERSION: u16 = 10;

/// The RDB format a DUMP payload (or `FUNCTION DUMP` payload) is written
/// in: the little-endian version before its CRC64; `None` when too short.
pub fn payload_rdb_version(payload: &[u8]) -> Option<u16> {
    let footer = payload.len().checked_sub(10)?;
    Some(u16::from_le_bytes([payload[footer], payload[footer + 1]]))
}

/// Whether a server whose own RDB format is `reader` restores a payload
/// written in format `written` (`reader` 0: not known, taken as yes).
/// RESTORE refuses a format newer than its own; Valkey 9 (format 80)
/// also refuses formats 12 to 79, which it reserves for other servers
/// (Redis 7.4's and 8's 12 among them: its `RDB_FOREIGN_VERSION_MIN..MAX`
/// under the default `rdb-version-check strict`).
pub fn restorable(written: u16, reader: u16) -> bool {
    const FOREIGN: std::ops::RangeInclusive<u16> = 12..=79;
    reader == 0 || (written <= reader && !(reader > *FOREIGN.end() && FOREIGN.contains(&written)))
}

/// What a DUMP payload holds, named by its RDB type byte, for messages.
pub fn type_name(payload: &[u8]) -> &'static str {
    match payload.first() {
        Some(0) => "string",
        Some(1 | 10 | 14 | 18) => "list",
        Some(2 | 11 | 20) => "set",
        Some(3 | 5 | 12 | 17) => "sorted set",
        Some(4 | 9 | 13 | 16) => "hash",
        Some(15 | 19 | 21) => "stream",
        Some(6 | 7) => "module type value",
        Some(22..=25) => "hash with field TTLs",
        _ => "value",
    }
}

/// At most this many entries (hash fields, sorted-set members) go in a
/// listpack: the servers' default `hash-max-listpack-entries` and
/// `zset-max-listpack-entries`.
pub const LISTPACK_MAX_ENTRIES: usize = 128;
/// Nor any string (field, value, member) longer than this: the default
/// `hash-max-listpack-value` and `zset-max-listpack-value`.
pub const LISTPACK_MAX_VALUE: usize = 64;

/// Why [`DumpWriter::finish`] gave no payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsealed {
    /// Not as many elements as declared were written.
    Miscounted,
    /// A string was too long for the listpack form: write the value again
    /// with [`DumpWriter::plain`].
    TooLongForListpack,
}

/// The form a payload is written in.
#[derive(Debug)]
enum Form {
    /// Type byte, length, then each element (`payload` holds them).
    Plain,
    /// The listpack being built, wrapped at `finish`; `too_long` once a
    /// string exceeded [`LISTPACK_MAX_VALUE`].
    Listpack { listpack: Listpack, too_long: bool },
}

/// A DUMP payload being written: created for a kind and element count, then
/// each element, then [`DumpWriter::finish`] seals it.
///
/// Invariant: `finish` seals only when exactly `declared` elements were
/// written (a length that does not match its elements would make RESTORE
/// fail on the peer, or load a different value).
#[derive(Debug)]
pub struct DumpWriter {
    kind: Kind,
    form: Form,
    payload: Vec<u8>,
    declared: u64,
    written: u64,
}

impl DumpWriter {
    /// A payload of `kind` that will hold `len` elements (hash: pairs;
    /// sorted set: members), with room for about `bytes_hint` bytes: a
    /// listpack for a small hash or sorted set, else the plain form.
    pub fn new(kind: Kind, len: u64, bytes_hint: usize) -> Self {
        let small = len <= LISTPACK_MAX_ENTRIES as u64;
        if small && matches!(kind, Kind::Hash | Kind::SortedSet) {
            let mut w = Self::plain(kind, len, 0);
            w.payload = Vec::with_capacity(bytes_hint.saturating_add(24));
            w.form = Form::Listpack {
                listpack: Listpack::with_capacity(bytes_hint),
                too_long: false,
            };
            return w;
        }
        Self::plain(kind, len, bytes_hint)
    }

    /// A payload of `kind` and `len` elements in the plain form, whatever
    /// its size.
    pub fn plain(kind: Kind, len: u64, bytes_hint: usize) -> Self {
        let mut payload = Vec::with_capacity(bytes_hint.saturating_add(24));
        payload.push(kind as u8);
        put_len(&mut payload, len);
        Self {
            kind,
            form: Form::Plain,
            payload,
            declared: len,
            written: 0,
        }
    }

    /// Room for about `bytes` more bytes.
    pub fn reserve(&mut self, bytes: usize) {
        self.payload.reserve(bytes);
    }

    /// The kind being written.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// One string of the value, in whichever form is being written.
    fn put(&mut self, bytes: &[u8]) {
        match &mut self.form {
            Form::Plain => put_string(&mut self.payload, bytes),
            Form::Listpack { listpack, too_long } => {
                *too_long |= bytes.len() > LISTPACK_MAX_VALUE;
                listpack.push(bytes);
            }
        }
    }

    /// One element of a list or member of a set.
    pub fn element(&mut self, bytes: &[u8]) {
        debug_assert!(matches!(self.kind, Kind::List | Kind::Set));
        self.put(bytes);
        self.written += 1;
    }

    /// One field of a hash and its value.
    pub fn field(&mut self, field: &[u8], value: &[u8]) {
        debug_assert_eq!(self.kind, Kind::Hash);
        self.put(field);
        self.put(value);
        self.written += 1;
    }

    /// One member of a sorted set and its score; members come in score
    /// order (then by member), as the sorted set holds them.
    pub fn scored(&mut self, member: &[u8], score: f64) {
        debug_assert_eq!(self.kind, Kind::SortedSet);
        self.put(member);
        match &mut self.form {
            Form::Plain => self.payload.extend_from_slice(&score.to_le_bytes()),
            Form::Listpack { listpack, .. } => listpack.push(score_text(score).as_bytes()),
        }
        self.written += 1;
    }

    /// How many elements were written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The sealed payload (RDB version and CRC64 appended).
    ///
    /// # Errors
    /// [`Unsealed::Miscounted`] when the elements written are not as many
    /// as declared; [`Unsealed::TooLongForListpack`] when a listpack got a
    /// string too long for it.
    pub fn finish(mut self) -> Result<Vec<u8>, Unsealed> {
        if self.written != self.declared {
            return Err(Unsealed::Miscounted);
        }
        if let Form::Listpack { listpack, too_long } = self.form {
            if too_long {
                return Err(Unsealed::TooLongForListpack);
            }
            self.payload.push(match self.kind {
                Kind::Hash => TYPE_HASH_LISTPACK,
                _ => TYPE_ZSET_LISTPACK,
            });
            put_string(&mut self.payload, &listpack.finish());
        }
        self.payload.extend_from_slice(&RDB_VERSION.to_le_bytes());
        let crc = crc64(&self.payload);
        self.payload.extend_from_slice(&crc.to_le_bytes());
        Ok(self.payload)
    }
}

/// A score as a sorted set's listpack holds it: an integer (then stored as
/// one) when it is one below 2^52, as Redis writes it, else the shortest
/// text that reads back as the same double (at most 24 bytes: the server
/// parses at most 127). `-0` stays `-0`, so the peer reads the same double.
fn score_text(score: f64) -> String {
    const EXACT: f64 = 4_503_599_627_370_496.0; // 2^52
    if score == 0.0 {
        return if score.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    if score.abs() < EXACT && score.fract() == 0.0 {
        return format!("{}", score as i64);
    }
    let (plain, exp) = (format!("{score}"), format!("{score:e}"));
    if plain.len() <= exp.len() {
        plain
    } else {
        exp
    }
}

/// A listpack (Redis's `listpack.c`) being built: a 6-byte header (total
/// bytes, element count), each entry (encoding, data, back-length), `0xFF`.
///
/// Invariant: `bytes[..6]` is the header placeholder until `finish`.
#[derive(Debug)]
struct Listpack {
    bytes: Vec<u8>,
    count: usize,
}

impl Listpack {
    fn with_capacity(bytes_hint: usize) -> Self {
        let mut bytes = Vec::with_capacity(bytes_hint.saturating_add(7));
        bytes.extend_from_slice(&[0; 6]);
        Self { bytes, count: 0 }
    }

    /// One entry: as an integer when the server would store it as one
    /// (`lpStringToInt64`), else as a string.
    fn push(&mut self, s: &[u8]) {
        let start = self.bytes.len();
        match listpack_integer(s) {
            Some(v) => put_lp_integer(&mut self.bytes, v),
            None => put_lp_string(&mut self.bytes, s),
        }
        let entry_len = (self.bytes.len() - start) as u64;
        put_backlen(&mut self.bytes, entry_len);
        self.count += 1;
    }

    /// The finished blob, header filled in.
    fn finish(mut self) -> Vec<u8> {
        self.bytes.push(0xFF);
        let total = u32::try_from(self.bytes.len()).unwrap_or(u32::MAX);
        self.bytes[..4].copy_from_slice(&total.to_le_bytes());
        // LP_HDR_NUMELE_UNKNOWN from 65535 on: the server counts them.
        let count = u16::try_from(self.count).unwrap_or(u16::MAX);
        self.bytes[4..6].copy_from_slice(&count.to_le_bytes());
        self.bytes
    }
}

/// The integer a listpack stores `s` as: canonical decimal (no sign but a
/// leading `-`, no leading zero, no `-0`) of at most 20 bytes in `i64`.
fn listpack_integer(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let text = std::str::from_utf8(s).ok()?;
    let v: i64 = text.parse().ok()?;
    // Canonical: prints back the same ("+1", "01", "-0" do not).
    (v.to_string().as_bytes() == s).then_some(v)
}

/// A listpack integer entry in its smallest encoding (`lpEncodeIntegerGetType`).
fn put_lp_integer(out: &mut Vec<u8>, v: i64) {
    // Two's complement in the encoding's width, little-endian.
    let le = (v as u64).to_le_bytes();
    if (0..=127).contains(&v) {
        out.push(v as u8);
    } else if (-4096..=4095).contains(&v) {
        let u = (v as u64) & 0x1FFF;
        out.extend_from_slice(&[0xC0 | (u >> 8) as u8, u as u8]);
    } else if (-32768..=32767).contains(&v) {
        out.push(0xF1);
        out.extend_from_slice(&le[..2]);
    } else if (-8_388_608..=8_388_607).contains(&v) {
        out.push(0xF2);
        out.extend_from_slice(&le[..3]);
    } else if (-2_147_483_648..=2_147_483_647).contains(&v) {
        out.push(0xF3);
        out.extend_from_slice(&le[..4]);
    } else {
        out.push(0xF4);
        out.extend_from_slice(&le);
    }
}

/// A listpack string entry (`lpEncodeString`): 6-bit, 12-bit or 32-bit length.
fn put_lp_string(out: &mut Vec<u8>, s: &[u8]) {
    let len = s.len();
    if len < 64 {
        out.push(0x80 | len as u8);
    } else if len < 4096 {
        out.extend_from_slice(&[0xE0 | (len >> 8) as u8, len as u8]);
    } else {
        out.push(0xF0);
        out.extend_from_slice(&(len as u32).to_le_bytes());
    }
    out.extend_from_slice(s);
}

/// An entry's back-length (`lpEncodeBacklen`): 7 bits a byte, most
/// significant first, every byte but the first with the high bit set.
fn put_backlen(out: &mut Vec<u8>, l: u64) {
    let bytes = match l {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2_097_150 => 3,
        2_097_151..=268_435_454 => 4,
        _ => 5,
    };
    for i in (0..bytes).rev() {
        let septet = ((l >> (7 * i)) & 127) as u8;
        out.push(if i == bytes - 1 {
            (l >> (7 * i)) as u8
        } else {
            septet | 128
        });
    }
}

/// Redis's CRC64 (Jones polynomial, reflected, as `crc64.c`), over which
/// RESTORE checks a payload.
pub fn crc64(bytes: &[u8]) -> u64 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Redis, bytes)
}

/// An RDB length: 6 bits in one byte, 14 bits in two, else a marker byte
/// and 32 or 64 bits big-endian (`rdbSaveLen`).
fn put_len(out: &mut Vec<u8>, len: u64) {
    if len < 1 << 6 {
        out.push(len as u8);
    } else if len < 1 << 14 {
        out.push(0x40 | (len >> 8) as u8);
        out.push(len as u8);
    } else if let Ok(len) = u32::try_from(len) {
        out.push(0x80);
        out.extend_from_slice(&len.to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

/// An RDB string in its plain form: its length, then its bytes.
fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_crosses_to_a_server_of_its_format_or_newer() {
        let mut w = DumpWriter::new(Kind::Set, 1, 8);
        w.element(b"m");
        let payload = w.finish().unwrap();
        assert_eq!(payload_rdb_version(&payload), Some(RDB_VERSION));
        assert_eq!(type_name(&payload), "set");
        assert_eq!(payload_rdb_version(b"short"), None);
        // Redis 7.0 (10), Valkey 8 (11), Redis 7.4/8.0 (12), Valkey 9 (80).
        for reader in [10, 11, 12, 80] {
            assert!(restorable(10, reader), "10 -> {reader}");
        }
        assert!(restorable(11, 12) && restorable(11, 80) && restorable(12, 12));
        assert!(!restorable(11, 10) && !restorable(12, 11) && !restorable(80, 12));
        assert!(
            !restorable(12, 80),
            "Valkey 9 refuses the formats it reserves"
        );
        assert!(restorable(80, 0) && restorable(80, 80));
    }

    fn len_bytes(len: u64) -> Vec<u8> {
        let mut out = Vec::new();
        put_len(&mut out, len);
        out
    }

    #[test]
    fn crc64_is_the_one_redis_checks() {
        // The check value of crc64.c's own test ("123456789").
        assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }

    #[test]
    fn lengths_take_the_shortest_rdb_form() {
        assert_eq!(len_bytes(0), [0x00]);
        assert_eq!(len_bytes(63), [0x3f]);
        assert_eq!(len_bytes(64), [0x40, 0x40]);
        assert_eq!(len_bytes(16383), [0x7f, 0xff]);
        assert_eq!(len_bytes(16384), [0x80, 0, 0, 0x40, 0]);
        assert_eq!(len_bytes(u32::MAX as u64), [0x80, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(len_bytes(1 << 32), [0x81, 0, 0, 0, 1, 0, 0, 0, 0]);
    }

    #[test]
    fn a_plain_hash_payload_matches_its_rdb_layout() {
        let mut w = DumpWriter::plain(Kind::Hash, 2, 16);
        w.field(b"f1", b"v1");
        w.field(b"", b"xyz");
        let payload = w.finish().expect("two pairs as declared");
        let body = [
            4, 2, 2, b'f', b'1', 2, b'v', b'1', 0, 3, b'x', b'y', b'z', 10, 0,
        ];
        assert_eq!(&payload[..body.len()], &body);
        assert_eq!(payload.len(), body.len() + 8);
        let crc = u64::from_le_bytes(payload[body.len()..].try_into().unwrap());
        assert_eq!(crc, crc64(&body));
    }

    #[test]
    fn a_plain_sorted_set_carries_exact_binary_scores() {
        let mut w = DumpWriter::plain(Kind::SortedSet, 3, 0);
        for (m, s) in [(b"a", 0.1), (b"b", f64::NEG_INFINITY), (b"c", -0.0)] {
            w.scored(m, s);
        }
        let p = w.finish().expect("three members");
        assert_eq!(&p[..2], &[5, 3]);
        assert_eq!(&p[2..4], &[1, b'a']);
        assert_eq!(f64::from_le_bytes(p[4..12].try_into().unwrap()), 0.1);
        assert_eq!(
            f64::from_le_bytes(p[14..22].try_into().unwrap()),
            f64::NEG_INFINITY
        );
        let zero = f64::from_le_bytes(p[24..32].try_into().unwrap());
        assert!(zero == 0.0 && zero.is_sign_negative());
    }

    #[test]
    fn lists_and_sets_write_each_element_once() {
        for kind in [Kind::List, Kind::Set] {
            let mut w = DumpWriter::new(kind, 70, 0);
            for i in 0..70u32 {
                w.element(i.to_string().as_bytes());
            }
            assert_eq!(w.written(), 70);
            let p = w.finish().expect("as declared");
            assert_eq!(&p[..3], &[kind as u8, 0x40, 70]);
            assert_eq!(&p[3..5], &[1, b'0']);
        }
    }

    #[test]
    fn a_count_other_than_declared_is_refused() {
        let mut w = DumpWriter::new(Kind::Set, 2, 0);
        w.element(b"only one");
        assert_eq!(w.finish(), Err(Unsealed::Miscounted));
        let mut w = DumpWriter::new(Kind::Set, 1, 0);
        w.element(b"a");
        w.element(b"a");
        assert_eq!(w.finish(), Err(Unsealed::Miscounted));
        let mut w = DumpWriter::new(Kind::Hash, 2, 0);
        w.field(b"a", b"b");
        assert_eq!(w.finish(), Err(Unsealed::Miscounted));
    }

    /// `DUMP h` of Redis 7.0.15 (rdbcompression no) after
    /// `HSET h f v n 1 neg -5 big 70000 e ""`.
    const REDIS_HASH_DUMP: &[u8] = b"\x10))\x00\x00\x00\n\x00\x81f\x02\x81v\x02\x81n\x02\x01\x01\x83neg\x04\xdf\xfb\x02\x83big\x04\xf2p\x11\x01\x04\x81e\x02\x80\x01\xff\n\x009\x93\x83Q\r&\xcc1";

    /// `DUMP z` of Redis 7.0.15 after `ZADD z 1 a -inf c 2.5 d 0 e 3 ""`.
    const REDIS_ZSET_DUMP: &str = "1126260000000a00816302842d696e66058165020001816102010181640283322e350480010301ff0a00442ae858b3a25413";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn a_small_hash_is_the_listpack_redis_dumps() {
        let mut w = DumpWriter::new(Kind::Hash, 5, 0);
        for (f, v) in [
            ("f", "v"),
            ("n", "1"),
            ("neg", "-5"),
            ("big", "70000"),
            ("e", ""),
        ] {
            w.field(f.as_bytes(), v.as_bytes());
        }
        assert_eq!(w.finish().expect("five pairs"), REDIS_HASH_DUMP);
    }

    #[test]
    fn hash_payloads_are_told_from_the_others() {
        let mut small = DumpWriter::new(Kind::Hash, 1, 16);
        small.field(b"f", b"v");
        let mut plain = DumpWriter::plain(Kind::Hash, 1, 16);
        plain.field(b"f", b"v");
        let mut list = DumpWriter::new(Kind::List, 1, 16);
        list.element(b"x");
        use crate::converge::merge::hashes::Kind as Merged;
        assert_eq!(merged_kind(&small.finish().unwrap()), Some(Merged::Hash));
        assert_eq!(merged_kind(&plain.finish().unwrap()), Some(Merged::Hash));
        assert_eq!(merged_kind(&list.finish().unwrap()), Some(Merged::List));
        assert_eq!(merged_kind(&[]), None);
        assert_eq!(merged_kind(&[Kind::Set as u8]), Some(Merged::Set));
        assert_eq!(merged_kind(&[TYPE_ZSET_LISTPACK]), Some(Merged::SortedSet));
    }

    #[test]
    fn a_small_sorted_set_is_the_listpack_redis_dumps() {
        let mut w = DumpWriter::new(Kind::SortedSet, 5, 0);
        // In score order, as the iterator gives them.
        for (m, s) in [
            ("c", f64::NEG_INFINITY),
            ("e", 0.0),
            ("a", 1.0),
            ("d", 2.5),
            ("", 3.0),
        ] {
            w.scored(m.as_bytes(), s);
        }
        assert_eq!(w.finish().expect("five members"), hex(REDIS_ZSET_DUMP));
    }

    #[test]
    fn a_long_string_sends_a_small_hash_back_to_the_plain_form() {
        let long = [b'x'; LISTPACK_MAX_VALUE + 1];
        let mut w = DumpWriter::new(Kind::Hash, 1, 0);
        w.field(b"f", &long);
        assert_eq!(w.finish(), Err(Unsealed::TooLongForListpack));
        let mut w = DumpWriter::new(Kind::SortedSet, 1, 0);
        w.scored(&long, 1.0);
        assert_eq!(w.finish(), Err(Unsealed::TooLongForListpack));
        let mut w = DumpWriter::plain(Kind::Hash, 1, 0);
        w.field(b"f", &long);
        assert_eq!(w.finish().expect("plain")[0], Kind::Hash as u8);
        // Exactly at the limit, and at the entry limit, a listpack still.
        let mut w = DumpWriter::new(Kind::Hash, LISTPACK_MAX_ENTRIES as u64, 0);
        for i in 0..LISTPACK_MAX_ENTRIES {
            w.field(i.to_string().as_bytes(), &long[..LISTPACK_MAX_VALUE]);
        }
        assert_eq!(w.finish().expect("listpack")[0], TYPE_HASH_LISTPACK);
        let w = DumpWriter::new(Kind::Hash, LISTPACK_MAX_ENTRIES as u64 + 1, 0);
        assert!(matches!(w.form, Form::Plain));
    }

    #[test]
    fn listpack_integers_are_only_what_the_server_would_store_as_integers() {
        for (s, v) in [("0", Some(0)), ("-1", Some(-1)), ("127", Some(127))] {
            assert_eq!(listpack_integer(s.as_bytes()), v, "{s}");
        }
        let max = i64::MAX.to_string();
        let min = i64::MIN.to_string();
        assert_eq!(listpack_integer(max.as_bytes()), Some(i64::MAX));
        assert_eq!(listpack_integer(min.as_bytes()), Some(i64::MIN));
        for s in [
            "",
            "-0",
            "01",
            "+1",
            " 1",
            "1 ",
            "1.0",
            "9223372036854775808",
            "-",
            "1e3",
        ] {
            assert_eq!(listpack_integer(s.as_bytes()), None, "{s:?}");
        }
    }

    #[test]
    fn listpack_integers_take_the_smallest_encoding() {
        let enc = |v: i64| {
            let mut out = Vec::new();
            put_lp_integer(&mut out, v);
            out
        };
        assert_eq!(enc(5), [5]);
        assert_eq!(enc(-5), [0xDF, 0xFB]);
        assert_eq!(enc(4095), [0xCF, 0xFF]);
        assert_eq!(enc(-4096), [0xD0, 0x00]);
        assert_eq!(enc(4096), [0xF1, 0x00, 0x10]);
        assert_eq!(enc(-32768), [0xF1, 0x00, 0x80]);
        assert_eq!(enc(70000), [0xF2, 0x70, 0x11, 0x01]);
        assert_eq!(enc(-8_388_609), [0xF3, 0xFF, 0xFF, 0x7F, 0xFF]);
        assert_eq!(enc(i64::MIN), [0xF4, 0, 0, 0, 0, 0, 0, 0, 0x80]);
    }

    #[test]
    fn backlengths_and_string_lengths_match_listpack_c() {
        let back = |l: u64| {
            let mut out = Vec::new();
            put_backlen(&mut out, l);
            out
        };
        assert_eq!(back(127), [127]);
        assert_eq!(back(128), [1, 128]);
        assert_eq!(back(16382), [127, 0xFE]);
        assert_eq!(back(16383), [0, 0xFF, 0xFF]);
        assert_eq!(back(2_097_151), [0, 0xFF, 0xFF, 0xFF]);
        let string = |len: usize| {
            let mut out = Vec::new();
            put_lp_string(&mut out, &vec![b'x'; len]);
            out[..out.len() - len].to_vec()
        };
        assert_eq!(string(63), [0x80 | 63]);
        assert_eq!(string(64), [0xE0, 64]);
        assert_eq!(string(4095), [0xEF, 0xFF]);
        assert_eq!(string(4096), [0xF0, 0x00, 0x10, 0, 0]);
    }

    #[test]
    fn scores_read_back_as_the_same_double() {
        assert_eq!(score_text(1.0), "1");
        assert_eq!(score_text(-3.0), "-3");
        assert_eq!(score_text(-0.0), "-0");
        assert_eq!(score_text(0.0), "0");
        assert_eq!(score_text(f64::INFINITY), "inf");
        assert_eq!(score_text(f64::NEG_INFINITY), "-inf");
        for s in [
            0.1,
            2.5,
            1e300,
            -1e-300,
            4_503_599_627_370_496.0,
            1.0 / 3.0,
            f64::MIN_POSITIVE,
        ] {
            let text = score_text(s);
            assert!(text.len() <= 24, "{text}");
            assert_eq!(
                text.parse::<f64>().unwrap().to_bits(),
                s.to_bits(),
                "{text}"
            );
        }
    }

    #[test]
    fn a_long_string_takes_a_two_byte_length() {
        let value = vec![7u8; 300];
        let mut w = DumpWriter::new(Kind::List, 1, 300);
        w.element(&value);
        let p = w.finish().expect("one element");
        assert_eq!(&p[..4], &[1, 1, 0x41, 0x2c]);
        assert_eq!(p.len(), 4 + 300 + 10);
    }
}
