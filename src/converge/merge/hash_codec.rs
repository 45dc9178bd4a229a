//! How a hash's merge state and a bound notice travel: pure encode and
//! decode, little-endian (`codec` for `Seen` and stamps).
//!
//! ```text
//! HashState: u8 flags (bit 0: a whole write; bits 1-2: the kind, 0 hash,
//!              1 set, 2 sorted set, 3 list; bit 3: a write of the TTL),
//!              [u64 clock, u64 node: the whole write's stamp],
//!              [u64 clock, u64 node: the TTL write's stamp],
//!            Seen removed,
//!            u32 count, then count x (bytes field, bytes value): the whole
//!              write's fields
//!            u32 count, then count x (bytes field, Element),
//!            [if flag bit 4: u32 count, then count x (bytes field, bytes
//!              value): the sender's fields at rest, in a full sync]
//!            (flag bit 5: more slices of this state follow, see
//!              `Held::slice`; bit 6: the key's whole state, not a change
//!              of some elements)
//! Element:   u16 count (bit 15: increments follow; count below it), then
//!            count x (u64 clock, u64 node, bytes value), Seen removed,
//!            [if bit 15: u32 n, then n x (u64 clock, u64 node, i128 delta):
//!            the increments]
//! bytes:     u32 length, then the bytes
//! Notice:    Seen bound, then (optional) Seen applied, then (optional)
//!            u64 coverage: the sender's own changes at or below it are in
//!            the stream up to the end of the batch
//! ```
//!
//! Decoding takes bytes from the network: every length is checked against
//! what is left before anything is allocated, and nothing may follow.

use crate::converge::merge::codec::{put_seen, put_stamp, Cursor, DecodeError};
use crate::converge::merge::element::Element;
use crate::converge::merge::hashes::{Bytes, HashState, Kind};
use crate::converge::merge::seen::Seen;

/// The flag bit that says a TTL write's stamp follows.
const TTL_SHIFT: u8 = 3;
/// The flag bit that says the sender's fields at rest follow.
const REST_SHIFT: u8 = 4;
/// The flag bit that says more slices of the state follow.
const MORE_SHIFT: u8 = 5;
/// The flag bit that says the state is the key's whole state.
const COMPLETE_SHIFT: u8 = 6;

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// The bit of an element's count that says its increments follow.
const INCREMENTS_BIT: u16 = 1 << 15;

/// Appends an element.
pub fn put_element(out: &mut Vec<u8>, element: &Element<Bytes>) {
    let writes = element.writes();
    let increments = element.increments();
    let flag = if increments.is_empty() {
        0
    } else {
        INCREMENTS_BIT
    };
    // One write per origin node: far below the flag bit.
    out.extend_from_slice(&(writes.len() as u16 | flag).to_le_bytes());
    for (stamp, value) in writes {
        put_stamp(out, *stamp);
        put_bytes(out, value);
    }
    put_seen(out, element.removed());
    if !increments.is_empty() {
        // At most one per flush of each origin since the bound (a local
        // increment past `MAX_INCREMENTS` is written instead).
        out.extend_from_slice(&(increments.len() as u32).to_le_bytes());
        for (stamp, delta) in increments {
            put_stamp(out, *stamp);
            out.extend_from_slice(&delta.to_le_bytes());
        }
    }
}

/// A hash's state as it travels.
pub fn encode_hash(state: &HashState) -> Vec<u8> {
    let payload: usize = state
        .base_fields
        .iter()
        .map(|(f, v)| 8 + f.len() + v.len())
        .sum();
    let mut out = Vec::with_capacity(64 + payload + 64 * state.elements.len());
    let ttl = u8::from(state.ttl.is_some()) << TTL_SHIFT;
    let rest = u8::from(!state.rest.is_empty()) << REST_SHIFT;
    let more = u8::from(state.more) << MORE_SHIFT;
    let complete = u8::from(state.complete) << COMPLETE_SHIFT;
    let parts = ttl | rest | more | complete;
    out.push(u8::from(state.base.is_some()) | (state.kind as u8) << 1 | parts);
    if let Some(base) = state.base {
        put_stamp(&mut out, base);
    }
    if let Some(ttl) = state.ttl {
        put_stamp(&mut out, ttl);
    }
    put_seen(&mut out, &state.removed);
    out.extend_from_slice(&(state.base_fields.len() as u32).to_le_bytes());
    for (field, value) in &state.base_fields {
        put_bytes(&mut out, field);
        put_bytes(&mut out, value);
    }
    out.extend_from_slice(&(state.elements.len() as u32).to_le_bytes());
    for (field, element) in &state.elements {
        put_bytes(&mut out, field);
        put_element(&mut out, element);
    }
    if !state.rest.is_empty() {
        out.extend_from_slice(&(state.rest.len() as u32).to_le_bytes());
        for (field, value) in &state.rest {
            put_bytes(&mut out, field);
            put_bytes(&mut out, value);
        }
    }
    out
}

impl Cursor<'_> {
    fn bytes(&mut self) -> Result<Bytes, DecodeError> {
        let n = self.count(4, 1)?;
        Ok(self.take(n)?.to_vec())
    }

    fn element(&mut self) -> Result<Element<Bytes>, DecodeError> {
        let at = self.at;
        let [lo, hi] = self.array()?;
        let raw = u16::from_le_bytes([lo, hi]);
        let n = usize::from(raw & !INCREMENTS_BIT);
        if n.checked_mul(20)
            .is_none_or(|need| need > self.bytes.len() - self.at)
        {
            return Err(DecodeError::Truncated(at));
        }
        let mut writes = Vec::with_capacity(n);
        for _ in 0..n {
            let stamp = self.stamp()?;
            writes.push((stamp, self.bytes()?));
        }
        let element = Element::from_parts(writes, self.seen()?);
        if raw & INCREMENTS_BIT == 0 {
            return Ok(element);
        }
        let n = self.count(4, 32)?;
        let mut increments = Vec::with_capacity(n);
        for _ in 0..n {
            let stamp = self.stamp()?;
            increments.push((stamp, self.i128()?));
        }
        // Sorted once (inserting one at a time is quadratic).
        Ok(element.with_increments(increments))
    }
}

/// An element read off `c`.
pub(super) fn decode_element(c: &mut Cursor<'_>) -> Result<Element<Bytes>, DecodeError> {
    c.element()
}

/// A hash's state from its bytes.
pub fn decode_hash(bytes: &[u8]) -> Result<HashState, DecodeError> {
    let mut c = Cursor { bytes, at: 0 };
    let at = c.at;
    let [flags] = c.array()?;
    let kind = Kind::from_u8((flags >> 1) & 3);
    let (Some(kind), 0) = (kind, flags >> (COMPLETE_SHIFT + 1)) else {
        return Err(DecodeError::BadTag { tag: flags, at });
    };
    let base = match flags & 1 {
        0 => None,
        _ => Some(c.stamp()?),
    };
    let ttl = match (flags >> TTL_SHIFT) & 1 {
        0 => None,
        _ => Some(c.stamp()?),
    };
    let removed = c.seen()?;
    let n = c.count(4, 8)?;
    let mut base_fields = Vec::with_capacity(n);
    for _ in 0..n {
        let field = c.bytes()?;
        base_fields.push((field, c.bytes()?));
    }
    let n = c.count(4, 8)?;
    let mut elements = Vec::with_capacity(n);
    for _ in 0..n {
        let field = c.bytes()?;
        elements.push((field, c.element()?));
    }
    let mut rest = Vec::new();
    if (flags >> REST_SHIFT) & 1 == 1 {
        let n = c.count(4, 8)?;
        rest.reserve(n);
        for _ in 0..n {
            let field = c.bytes()?;
            rest.push((field, c.bytes()?));
        }
    }
    c.end()?;
    Ok(HashState {
        kind,
        ttl,
        base,
        removed,
        base_fields,
        elements,
        rest,
        more: (flags >> MORE_SHIFT) & 1 == 1,
        complete: (flags >> COMPLETE_SHIFT) & 1 == 1,
    })
}

/// What a bound notice says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Notice {
    /// The sender's merge bound.
    pub bound: Seen,
    /// What the sender had applied when it read the keys of the batch.
    pub applied: Option<Seen>,
    /// The sender's own changes at or below it are in the stream up to the
    /// end of the batch (it was in step).
    pub coverage: Option<u64>,
}

/// A bound notice as it travels.
pub fn encode_notice(notice: &Notice) -> Vec<u8> {
    let mut out = Vec::new();
    put_seen(&mut out, &notice.bound);
    if let Some(applied) = &notice.applied {
        put_seen(&mut out, applied);
        if let Some(c) = notice.coverage {
            out.extend_from_slice(&c.to_le_bytes());
        }
    }
    out
}

/// A bound notice from its bytes (an older sender sent only its bound).
pub fn decode_notice(bytes: &[u8]) -> Result<Notice, DecodeError> {
    let mut c = Cursor { bytes, at: 0 };
    let bound = c.seen()?;
    let mut notice = Notice {
        bound,
        ..Notice::default()
    };
    if c.at == bytes.len() {
        return Ok(notice);
    }
    notice.applied = Some(c.seen()?);
    if c.at != bytes.len() {
        notice.coverage = Some(c.u64()?);
    }
    c.end()?;
    Ok(notice)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::converge::version::Stamp;
    use proptest::prelude::*;

    fn seen() -> impl Strategy<Value = Seen> {
        proptest::collection::vec((1u64..4, 1u64..100), 0..4).prop_map(|p| p.into_iter().collect())
    }

    fn bytes() -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), 0..6)
    }

    fn element() -> impl Strategy<Value = Element<Bytes>> {
        let writes = proptest::collection::vec(((1u64..100, 1u64..4), bytes()), 0..3);
        let increments = proptest::collection::vec(((1u64..100, 1u64..4), any::<i128>()), 0..3);
        (writes, seen(), increments).prop_map(|(w, s, incs)| {
            let w = w
                .into_iter()
                .map(|((c, n), v)| (Stamp::new(c, n), v))
                .collect();
            let incs = incs
                .into_iter()
                .map(|((c, n), d)| (Stamp::new(c, n), d))
                .collect();
            Element::from_parts(w, s).with_increments(incs)
        })
    }

    fn state() -> impl Strategy<Value = HashState> {
        let base = proptest::option::of((1u64..100, 1u64..4).prop_map(|(c, n)| Stamp::new(c, n)));
        let fields = proptest::collection::vec((bytes(), bytes()), 0..4);
        let elements = proptest::collection::vec((bytes(), element()), 0..4);
        let kind = (0u8..4).prop_map(|k| Kind::from_u8(k).unwrap_or_default());
        let ttl = proptest::option::of((1u64..100, 1u64..4).prop_map(|(c, n)| Stamp::new(c, n)));
        let rest = proptest::collection::vec((bytes(), bytes()), 0..3);
        let flags = (proptest::bool::ANY, proptest::bool::ANY);
        ((kind, ttl, rest, flags), base, seen(), fields, elements).prop_map(
            |((kind, ttl, rest, (more, complete)), base, removed, base_fields, elements)| {
                HashState {
                    kind,
                    ttl,
                    rest,
                    more,
                    complete,
                    base,
                    removed,
                    base_fields,
                    elements,
                }
            },
        )
    }

    proptest! {
        #[test]
        fn a_hash_state_round_trips(s in state()) {
            prop_assert_eq!(decode_hash(&encode_hash(&s)).unwrap(), s);
        }

        #[test]
        fn any_bytes_decode_or_fail_without_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_hash(&b);
            let _ = decode_notice(&b);
        }

        #[test]
        fn a_truncated_state_is_refused(s in state(), cut in 1usize..8) {
            let bytes = encode_hash(&s);
            let cut = cut.min(bytes.len());
            prop_assert!(decode_hash(&bytes[..bytes.len() - cut]).is_err());
        }
    }

    #[test]
    fn every_kind_decodes_and_an_unknown_flag_is_refused() {
        let mut bytes = encode_hash(&HashState::default());
        bytes[0] = 3 << 1;
        let list = decode_hash(&bytes).map(|s| s.kind);
        assert!(matches!(list, Ok(Kind::List)), "{list:?}");
        bytes[0] = 1 << 5;
        assert!(decode_hash(&bytes).is_ok_and(|s| s.more), "more slices");
        bytes[0] = 1 << 6;
        assert!(
            decode_hash(&bytes).is_ok_and(|s| s.complete),
            "a whole state"
        );
        bytes[0] = 1 << 7;
        assert!(decode_hash(&bytes).is_err(), "an unknown flag");
    }

    #[test]
    fn a_notice_with_and_without_what_was_applied_and_its_coverage() {
        let bound: Seen = [(1, 5)].into_iter().collect();
        let applied: Seen = [(1, 9), (2, 4)].into_iter().collect();
        for coverage in [None, Some(9)] {
            let notice = Notice {
                bound: bound.clone(),
                applied: Some(applied.clone()),
                coverage,
            };
            assert_eq!(decode_notice(&encode_notice(&notice)).unwrap(), notice);
        }
        let old = crate::converge::merge::codec::encode_seen(&bound);
        assert_eq!(decode_notice(&old).unwrap().applied, None);
        let huge = [0xff, 0xff, 0, 0];
        assert!(decode_notice(&huge).is_err());
        let mut short = encode_notice(&Notice {
            bound,
            applied: Some(applied),
            coverage: Some(3),
        });
        short.pop();
        assert!(decode_notice(&short).is_err());
    }
}
