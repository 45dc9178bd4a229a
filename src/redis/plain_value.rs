//! A collection payload in the plain RDB form (`dump::DumpWriter::plain`:
//! the type byte of a list, set, hash or sorted set, its length, then each
//! element) read back element by element, so that the peer can build a big
//! value a slice at a time instead of in one `RESTORE` (`receive::staging`).
//! Anything else (a listpack, a stream, a corrupt payload) is `None`, and
//! the peer restores it whole.

use std::borrow::Cow;

use crate::redis::dump::{crc64, Kind};
use crate::redis::rdb_read::{Length, RdbInput};

/// The footer after the value: RDB version and CRC64.
const FOOTER_LEN: usize = 10;

/// One element of a collection.
#[derive(Debug, Clone, PartialEq)]
pub enum Element<'a> {
    /// A list element or set member.
    Member(Cow<'a, [u8]>),
    /// A hash field and its value.
    Field(Cow<'a, [u8]>, Cow<'a, [u8]>),
    /// A sorted-set member and its score.
    Scored(Cow<'a, [u8]>, f64),
}

/// A plain collection payload whose CRC matched.
#[derive(Debug, Clone, Copy)]
pub struct PlainValue<'a> {
    kind: Kind,
    declared: u64,
    /// The payload without its footer.
    body: &'a [u8],
    /// Where the first element starts in `body`.
    first: usize,
}

/// How far a reading of a [`PlainValue`] got: where the next element
/// starts and how many were read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursor {
    at: usize,
    read: u64,
}

impl Cursor {
    /// How many elements were read.
    pub fn read(&self) -> u64 {
        self.read
    }
}

impl<'a> PlainValue<'a> {
    /// The value `payload` holds, if it is a list, set, hash or sorted set
    /// in the plain form and its CRC matches.
    pub fn parse(payload: &'a [u8]) -> Option<Self> {
        payload.len().checked_sub(FOOTER_LEN)?;
        let (checked, crc) = payload.split_at(payload.len() - 8);
        if crc64(checked) != u64::from_le_bytes(crc.try_into().ok()?) {
            return None;
        }
        Self::parse_checked(payload)
    }

    /// The value of a payload [`PlainValue::parse`] accepted before (its
    /// CRC is not computed again: a slice at a time must not cost the
    /// whole payload each time).
    pub fn parse_checked(payload: &'a [u8]) -> Option<Self> {
        let body = &payload[..payload.len().checked_sub(FOOTER_LEN)?];
        let mut input = RdbInput::new(body, 0);
        let kind = match input.byte()? {
            1 => Kind::List,
            2 => Kind::Set,
            4 => Kind::Hash,
            5 => Kind::SortedSet,
            _ => return None,
        };
        let Length::Plain(declared) = input.length()? else {
            return None;
        };
        Some(Self {
            kind,
            declared,
            body,
            first: input.at(),
        })
    }

    /// The kind of collection.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// How many elements the payload says it holds.
    pub fn declared(&self) -> u64 {
        self.declared
    }

    /// A cursor before the first element.
    pub fn start(&self) -> Cursor {
        Cursor {
            at: self.first,
            read: 0,
        }
    }

    /// Whether `cursor` read every declared element and every byte.
    pub fn complete(&self, cursor: &Cursor) -> bool {
        cursor.read == self.declared && cursor.at == self.body.len()
    }

    /// Up to `max` elements after `cursor` (fewer at the end), moving it
    /// past them; `None` when the bytes do not hold them (the cursor is
    /// then left where it was).
    pub fn read(&self, cursor: &mut Cursor, max: usize) -> Option<Vec<Element<'a>>> {
        let left = self.declared.saturating_sub(cursor.read);
        let n = usize::try_from(left).unwrap_or(usize::MAX).min(max);
        let mut input = RdbInput::new(self.body, cursor.at);
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.element(&mut input)?);
        }
        *cursor = Cursor {
            at: input.at(),
            read: cursor.read + out.len() as u64,
        };
        Some(out)
    }

    fn element(&self, input: &mut RdbInput<'a>) -> Option<Element<'a>> {
        let first = input.string()?;
        Some(match self.kind {
            Kind::List | Kind::Set => Element::Member(first),
            Kind::Hash => Element::Field(first, input.string()?),
            Kind::SortedSet => {
                let score = f64::from_le_bytes(input.take(8)?.try_into().ok()?);
                if score.is_nan() {
                    // RESTORE refuses it too.
                    return None;
                }
                Element::Scored(first, score)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::dump::DumpWriter;
    use proptest::prelude::*;

    fn read_all(payload: &[u8], step: usize) -> Option<(Kind, Vec<Element<'_>>)> {
        let value = PlainValue::parse(payload)?;
        let mut cursor = value.start();
        let mut all = Vec::new();
        loop {
            let got = value.read(&mut cursor, step)?;
            if got.is_empty() {
                break;
            }
            all.extend(got);
        }
        value.complete(&cursor).then_some((value.kind(), all))
    }

    fn members(strings: &[Vec<u8>]) -> Vec<Element<'static>> {
        strings
            .iter()
            .map(|s| Element::Member(Cow::Owned(s.clone())))
            .collect()
    }

    #[test]
    fn a_plain_set_reads_back_member_by_member_in_any_slices() {
        let names: Vec<Vec<u8>> = (0..300).map(|i| format!("m{i}").into_bytes()).collect();
        let mut w = DumpWriter::plain(Kind::Set, names.len() as u64, 0);
        names.iter().for_each(|m| w.element(m));
        let payload = w.finish().unwrap();
        for step in [1, 7, 300, 1000] {
            assert_eq!(read_all(&payload, step), Some((Kind::Set, members(&names))));
        }
    }

    #[test]
    fn a_listpack_a_bad_crc_or_a_short_value_is_not_read() {
        let mut w = DumpWriter::new(Kind::Hash, 1, 8);
        w.field(b"f", b"v");
        assert!(
            PlainValue::parse(&w.finish().unwrap()).is_none(),
            "listpack"
        );
        let mut w = DumpWriter::plain(Kind::List, 2, 8);
        w.element(b"a");
        w.element(b"b");
        let mut payload = w.finish().unwrap();
        payload[3] ^= 1;
        assert!(PlainValue::parse(&payload).is_none(), "CRC");
        // Declares 3, holds 2 (CRC made right): read fails at the third.
        let mut body = vec![1u8, 3, 1, b'a', 1, b'b'];
        body.extend_from_slice(&10u16.to_le_bytes());
        let crc = crc64(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(read_all(&body, 10), None);
    }

    #[test]
    fn integer_and_compressed_strings_are_decoded() {
        // A set of 12 (int8), -2 (int8), 1000 (int16), then "aaaa..." LZF.
        let mut body = vec![2u8, 4, 0xc0, 12, 0xc0, 0xfe, 0xc1, 0xe8, 0x03];
        body.extend_from_slice(&[0xc3, 5, 10, 0, b'a', 0xe0, 0, 0]);
        body.extend_from_slice(&10u16.to_le_bytes());
        let crc = crc64(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        let names: Vec<Vec<u8>> = vec![b"12".to_vec(), b"-2".to_vec(), b"1000".to_vec()];
        let (kind, got) = read_all(&body, 2).expect("readable");
        assert_eq!(kind, Kind::Set);
        assert_eq!(got[..3], members(&names)[..]);
        assert_eq!(got[3], Element::Member(Cow::Owned(vec![b'a'; 10])));
    }

    proptest! {
        #[test]
        fn what_the_writer_writes_reads_back_the_same(
            fields in prop::collection::vec(
                (prop::collection::vec(any::<u8>(), 0..80), -1e300f64..1e300), 0..200),
            step in 1usize..50,
        ) {
            let mut hash = DumpWriter::plain(Kind::Hash, fields.len() as u64, 0);
            let mut zset = DumpWriter::plain(Kind::SortedSet, fields.len() as u64, 0);
            for (name, score) in &fields {
                hash.field(name, &score.to_le_bytes());
                zset.scored(name, *score);
            }
            let (hash, zset) = (hash.finish().unwrap(), zset.finish().unwrap());
            let want_hash: Vec<Element> = fields.iter().map(|(n, s)| {
                Element::Field(Cow::Owned(n.clone()), Cow::Owned(s.to_le_bytes().to_vec()))
            }).collect();
            let want_zset: Vec<Element> = fields.iter()
                .map(|(n, s)| Element::Scored(Cow::Owned(n.clone()), *s)).collect();
            prop_assert_eq!(read_all(&hash, step), Some((Kind::Hash, want_hash)));
            prop_assert_eq!(read_all(&zset, step), Some((Kind::SortedSet, want_zset)));
        }

        #[test]
        fn any_bytes_are_read_or_refused_without_a_panic(
            bytes in prop::collection::vec(any::<u8>(), 0..200),
        ) {
            let mut payload = bytes;
            payload.extend_from_slice(&10u16.to_le_bytes());
            let crc = crc64(&payload);
            payload.extend_from_slice(&crc.to_le_bytes());
            let _ = read_all(&payload, 3);
        }
    }
}
