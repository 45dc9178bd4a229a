//! How merge states travel: pure encode and decode, little-endian.
//!
//! ```text
//! Seen:     u16 count, then count x (u64 node, u64 clock), by node
//! Counter:  u64 base clock, u64 base node,
//!           u8 base tag (0 deleted, 1 value), i128 base value (0 if deleted),
//!           Seen of the base,
//!           u32 count, then count x (u64 clock, u64 node, i128 delta)
//! ```
//!
//! Decoding takes bytes from the network: every length is checked against
//! what is left before anything is allocated, and nothing may follow.

use crate::converge::merge::counter::{Base, Counter};
use crate::converge::merge::seen::Seen;
use crate::converge::version::Stamp;

/// Why bytes are not a merge state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than a field or count needs.
    #[error("merge state truncated at byte {0}")]
    Truncated(usize),
    /// A tag byte out of range.
    #[error("merge state has a bad tag {tag} at byte {at}")]
    BadTag {
        /// The byte.
        tag: u8,
        /// Where.
        at: usize,
    },
    /// Bytes left after the state.
    #[error("merge state followed by {0} byte(s)")]
    Trailing(usize),
    /// Fields that decode but break a rule of the state.
    #[error("merge state breaks a rule at byte {at}: {rule}")]
    Invalid {
        /// The rule.
        rule: &'static str,
        /// Where.
        at: usize,
    },
}

/// Appends `seen`.
pub fn put_seen(out: &mut Vec<u8>, seen: &Seen) {
    let pairs: Vec<(u64, u64)> = seen.iter().collect();
    let count = u16::try_from(pairs.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&count.to_le_bytes());
    for (node, clock) in pairs.into_iter().take(usize::from(count)) {
        out.extend_from_slice(&node.to_le_bytes());
        out.extend_from_slice(&clock.to_le_bytes());
    }
}

/// A [`Seen`] as it travels.
pub fn encode_seen(seen: &Seen) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + 16 * seen.iter().count());
    put_seen(&mut out, seen);
    out
}

/// A counter's state as it travels.
pub fn encode_counter(counter: &Counter) -> Vec<u8> {
    let base = counter.base();
    let incs = counter.increments();
    let mut out = Vec::with_capacity(33 + 2 + 16 * base.seen.iter().count() + 4 + 32 * incs.len());
    put_stamp(&mut out, base.stamp);
    out.push(u8::from(base.value.is_some()));
    out.extend_from_slice(&base.value.unwrap_or(0).to_le_bytes());
    put_seen(&mut out, &base.seen);
    out.extend_from_slice(&(incs.len() as u32).to_le_bytes());
    for &(stamp, delta) in incs {
        put_stamp(&mut out, stamp);
        out.extend_from_slice(&delta.to_le_bytes());
    }
    out
}

pub(super) fn put_stamp(out: &mut Vec<u8>, stamp: Stamp) {
    out.extend_from_slice(&stamp.clock.to_le_bytes());
    out.extend_from_slice(&stamp.node.to_le_bytes());
}

/// Reads fields off a byte slice, front to back.
pub(super) struct Cursor<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) at: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or(DecodeError::Truncated(self.at))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    pub(super) fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub(super) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub(super) fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    pub(super) fn i128(&mut self) -> Result<i128, DecodeError> {
        Ok(i128::from_le_bytes(self.array()?))
    }

    pub(super) fn stamp(&mut self) -> Result<Stamp, DecodeError> {
        let clock = self.u64()?;
        Ok(Stamp::new(clock, self.u64()?))
    }

    /// A count of items of `item_len` bytes each, checked against what is
    /// left.
    pub(super) fn count(&mut self, width: usize, item_len: usize) -> Result<usize, DecodeError> {
        let at = self.at;
        let raw = self.take(width)?;
        let mut b = [0u8; 8];
        b[..width].copy_from_slice(raw);
        let n = usize::try_from(u64::from_le_bytes(b)).map_err(|_| DecodeError::Truncated(at))?;
        let left = self.bytes.len() - self.at;
        if n.checked_mul(item_len).is_none_or(|need| need > left) {
            return Err(DecodeError::Truncated(self.at));
        }
        Ok(n)
    }

    pub(super) fn seen(&mut self) -> Result<Seen, DecodeError> {
        let n = self.count(2, 16)?;
        let mut pairs = Vec::with_capacity(n);
        for _ in 0..n {
            let node = self.u64()?;
            pairs.push((node, self.u64()?));
        }
        Ok(pairs.into_iter().collect())
    }

    pub(super) fn end(&self) -> Result<(), DecodeError> {
        match self.bytes.len() - self.at {
            0 => Ok(()),
            n => Err(DecodeError::Trailing(n)),
        }
    }
}

/// A [`Seen`] from its bytes.
pub fn decode_seen(bytes: &[u8]) -> Result<Seen, DecodeError> {
    let mut c = Cursor { bytes, at: 0 };
    let seen = c.seen()?;
    c.end()?;
    Ok(seen)
}

/// A counter's state from its bytes.
pub fn decode_counter(bytes: &[u8]) -> Result<Counter, DecodeError> {
    let mut c = Cursor { bytes, at: 0 };
    let stamp = c.stamp()?;
    let at = c.at;
    let [tag] = c.array()?;
    let raw = c.i128()?;
    let value = match tag {
        0 => None,
        1 => Some(raw),
        tag => return Err(DecodeError::BadTag { tag, at }),
    };
    let seen = c.seen()?;
    let n = c.count(4, 32)?;
    let mut incs = Vec::with_capacity(n);
    for _ in 0..n {
        let s = c.stamp()?;
        incs.push((s, c.i128()?));
    }
    c.end()?;
    Ok(Counter::from_parts(Base { stamp, value, seen }, incs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn counter() -> impl Strategy<Value = Counter> {
        let stamp = (0u64..50, 1u64..4).prop_map(|(c, n)| Stamp::new(c, n));
        let seen = proptest::collection::vec((1u64..4, 0u64..50), 0..4)
            .prop_map(|p| p.into_iter().collect::<Seen>());
        (
            stamp.clone(),
            proptest::option::of(any::<i128>()),
            seen,
            proptest::collection::vec((stamp, any::<i128>()), 0..6),
        )
            .prop_map(|(stamp, value, seen, incs)| {
                Counter::from_parts(Base { stamp, value, seen }, incs)
            })
    }

    proptest! {
        #[test]
        fn a_counter_comes_back_as_it_went(c in counter()) {
            prop_assert_eq!(decode_counter(&encode_counter(&c)), Ok(c));
        }

        #[test]
        fn any_bytes_decode_or_fail_without_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_counter(&b);
            let _ = decode_seen(&b);
        }

        #[test]
        fn a_cut_or_padded_state_is_refused(c in counter(), cut in 1usize..40) {
            let bytes = encode_counter(&c);
            let short = &bytes[..bytes.len().saturating_sub(cut)];
            prop_assert!(decode_counter(short).is_err());
            let mut long = bytes.clone();
            long.push(0);
            prop_assert_eq!(decode_counter(&long), Err(DecodeError::Trailing(1)));
        }
    }

    #[test]
    fn seen_round_trips_and_a_huge_count_is_refused_before_allocating() {
        let seen: Seen = [(1, 5), (7, 9)].into_iter().collect();
        assert_eq!(decode_seen(&encode_seen(&seen)), Ok(seen));
        assert_eq!(decode_seen(&[0xff, 0xff]), Err(DecodeError::Truncated(2)));
        let mut lie = vec![0u8; 16];
        lie.extend_from_slice(&[1, 0xff]);
        lie.extend_from_slice(&[0u8; 16]);
        assert!(decode_counter(&lie).is_err());
    }
}
