//! Hash merge metadata made durable the way versions are: every change of
//! the table is journaled (into the AOF and the replication stream with
//! the data it describes) and the RDB aux data holds the whole table.
//! A key whose metadata is all collected is journaled as not held (else a
//! restart would bring its old elements back as live ones for a key
//! deleted at rest and written again since); the collection of some of a
//! key's fields is not: those come back covered by the bound, with the
//! key's later records, and go again at the next collection.
//!
//! `TAG_HASH` (no stamp); the key field holds `u32 key_len | key | u8 what`
//! then:
//! - 0: the key has no metadata;
//! - 1: its parts: `u8 clear | stamp? base | stamp? expiry_of | Seen
//!   removed | u8 kind` (`stamp?`: `u8` 0, or 1 and the stamp); `clear`:
//!   no field metadata before the field records that follow; `kind` as in
//!   `hash_codec` (absent in records of hashes written before sets and
//!   sorted sets merged: a hash);
//! - 2: a field: `u32 len | field`, then `u8` 0 (no metadata), 1 and its
//!   element (`hash_codec`), or 2, its element and `u32 len | value`: its
//!   value at rest (what its increments add to).

use crate::converge::journal::TAG_HASH;
use crate::converge::merge::codec::{put_seen, put_stamp, Cursor, DecodeError};
use crate::converge::merge::element::Element;
use crate::converge::merge::hash_codec::{decode_element, put_element};
use crate::converge::merge::hashes::{Bytes, Held, Kind};
use crate::converge::version::{Stamp, VersionStore};

fn head(key: &[u8], what: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + key.len() + 48);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.push(what);
    out
}

fn put_optional(out: &mut Vec<u8>, stamp: Option<Stamp>) {
    match stamp {
        Some(s) => {
            out.push(1);
            put_stamp(out, s);
        }
        None => out.push(0),
    }
}

/// The record of `key`'s parts (`None`: not held).
pub fn key_record(key: &[u8], held: Option<&Held>, clear: bool) -> Vec<u8> {
    let Some(held) = held else {
        return head(key, 0);
    };
    let (base, removed, expiry_of) = held.key_parts();
    let mut out = head(key, 1);
    out.push(u8::from(clear));
    put_optional(&mut out, base);
    put_optional(&mut out, expiry_of);
    put_seen(&mut out, removed);
    out.push(held.kind() as u8);
    out
}

/// The record of one field's element (`None`: no metadata).
pub fn field_record(key: &[u8], field: &[u8], element: Option<&Element<Bytes>>) -> Vec<u8> {
    let mut out = head(key, 2);
    out.extend_from_slice(&(field.len() as u32).to_le_bytes());
    out.extend_from_slice(field);
    match element {
        Some(e) => {
            // 2: its value at rest follows (an element with increments
            // adds them to it).
            out.push(if e.rest().is_some() { 2 } else { 1 });
            put_element(&mut out, e);
            if let Some(rest) = e.rest() {
                out.extend_from_slice(&(rest.len() as u32).to_le_bytes());
                out.extend_from_slice(rest);
            }
        }
        None => out.push(0),
    }
    out
}

/// What a record says.
#[derive(Debug, Clone, PartialEq)]
pub enum HashRecord<'a> {
    /// `key` has no metadata.
    NotHeld(&'a [u8]),
    /// `key`'s parts: base, removed, expiry_of, and whether its field
    /// metadata was cleared.
    Parts(
        &'a [u8],
        (
            Option<Stamp>,
            crate::converge::merge::Seen,
            Option<Stamp>,
            Kind,
        ),
        bool,
    ),
    /// A field's element of `key`.
    Field(&'a [u8], &'a [u8], Option<Element<Bytes>>),
}

impl<'a> Cursor<'a> {
    fn optional_stamp(&mut self) -> Result<Option<Stamp>, DecodeError> {
        let at = self.at;
        match self.array::<1>()? {
            [0] => Ok(None),
            [1] => Ok(Some(self.stamp()?)),
            [tag] => Err(DecodeError::BadTag { tag, at }),
        }
    }

    fn slice(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.count(4, 1)?;
        self.take(n)
    }
}

/// A record from its bytes.
pub fn parse_record(bytes: &[u8]) -> Result<HashRecord<'_>, DecodeError> {
    let mut c = Cursor { bytes, at: 0 };
    let key = c.slice()?;
    let at = c.at;
    let record = match c.array::<1>()? {
        [0] => HashRecord::NotHeld(key),
        [1] => {
            let [clear] = c.array::<1>()?;
            let base = c.optional_stamp()?;
            let expiry_of = c.optional_stamp()?;
            let removed = c.seen()?;
            let kind = match c.at < bytes.len() {
                true => {
                    let at = c.at;
                    let [k] = c.array::<1>()?;
                    Kind::from_u8(k).ok_or(DecodeError::BadTag { tag: k, at })?
                }
                false => Kind::Hash,
            };
            HashRecord::Parts(key, (base, removed, expiry_of, kind), clear == 1)
        }
        [2] => {
            let field = c.slice()?;
            let at = c.at;
            let element = match c.array::<1>()? {
                [0] => None,
                [1] => Some(decode_element(&mut c)?),
                [2] => {
                    let mut element = decode_element(&mut c)?;
                    element.set_rest(c.slice()?.to_vec());
                    Some(element)
                }
                [tag] => return Err(DecodeError::BadTag { tag, at }),
            };
            HashRecord::Field(key, field, element)
        }
        [tag] => return Err(DecodeError::BadTag { tag, at }),
    };
    c.end()?;
    Ok(record)
}

impl VersionStore {
    /// Journals what changed in the hash table since the last call (taken
    /// also when no journal is kept).
    pub fn journal_hashes(&mut self) {
        let touched = self.hashes.take_touched();
        if !self.journaling() {
            return;
        }
        for t in touched {
            let (db, key) = (t.key.0, t.key.1.as_slice());
            let held = self.hashes.get(db, key);
            // A change of fields alone leaves the key's parts as they were.
            let mut records = Vec::new();
            if t.whole || t.parts || held.is_none() {
                records.push(key_record(key, held, t.whole));
            }
            if let Some(held) = held {
                if t.whole {
                    records.extend(held.elements().map(|(f, e)| field_record(key, f, Some(e))));
                } else {
                    records.extend(
                        t.fields
                            .iter()
                            .map(|f| field_record(key, f, held.element_of(f))),
                    );
                }
            }
            for r in records {
                self.journal_record(TAG_HASH, db, Stamp::ZERO, &r);
            }
        }
    }

    /// Collects the metadata `bound` passed (`Hashes::collect`); a key
    /// that leaves the table is journaled as not held. Without that
    /// record, a restart would bring its collected metadata back from the
    /// journal: a key deleted at rest since (which journals nothing) and
    /// written again would then hold its old elements as live ones.
    pub fn collect_hashes(&mut self, bound: &crate::converge::merge::Seen) {
        let gone = self.hashes.collect(bound);
        if !self.journaling() {
            return;
        }
        for (db, key) in gone {
            self.journal_record(TAG_HASH, db, Stamp::ZERO, &key_record(&key, None, true));
        }
    }

    /// Replays a hash record; false when it is not one.
    pub(crate) fn replay_hash(&mut self, db: u32, bytes: &[u8]) -> bool {
        match parse_record(bytes) {
            Ok(HashRecord::NotHeld(key)) => self.hashes.restore_key((db, key), None, true),
            Ok(HashRecord::Parts(key, parts, clear)) => {
                self.hashes.restore_key((db, key), Some(parts), clear)
            }
            Ok(HashRecord::Field(key, field, element)) => {
                self.hashes.restore_field((db, key), field, element)
            }
            Err(_) => return false,
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::converge::journal::{replay, FORMAT};
    use crate::converge::merge::hashes::{Change, Kind, Whole};
    use crate::converge::merge::Seen;

    #[test]
    fn the_journal_and_the_aux_records_bring_the_table_back() {
        let mut origin = VersionStore::journaled();
        let applied: Seen = [(1, 4), (2, 7)].into_iter().collect();
        let k = (0, &b"h"[..]);
        let hash = Whole::Elements(Kind::Hash, vec![(b"a".to_vec(), b"1".to_vec())]);
        origin
            .hashes
            .local_whole(k, Stamp::new(5, 1), hash, &applied);
        origin.journal_hashes();
        let change = vec![(b"b".to_vec(), Some(b"2".to_vec())), (b"a".to_vec(), None)];
        origin.hashes.local_fields(
            (0, b"h", Kind::Hash),
            Stamp::new(6, 1),
            (change, false),
            &applied,
            false,
        );
        let members = vec![(b"m".to_vec(), Some(Vec::new()))];
        let set = (0, &b"s"[..], Kind::Set);
        origin
            .hashes
            .local_fields(set, Stamp::new(6, 2), (members, true), &applied, true);
        origin.journal_hashes();
        // A field at rest at 10, incremented by 5: its value at rest and
        // its increment come back.
        let counted = vec![(b"f".to_vec(), Change::Increment(5, b"15".to_vec()))];
        let key = (0, &b"c"[..], Kind::Hash);
        origin
            .hashes
            .local_changes(key, Stamp::new(6, 1), (counted, false), &applied, false);
        origin.journal_hashes();
        let other = (0, &b"gone"[..], Kind::SortedSet);
        origin.hashes.local_fields(
            other,
            Stamp::new(7, 1),
            (vec![(b"x".to_vec(), None)], false),
            &applied,
            true,
        );
        origin.hashes.forget(0, b"gone");
        origin.journal_hashes();
        // A record of a hash's parts from before the kind was written.
        let mut old = key_record(b"old", origin.hashes.get(0, b"h"), true);
        old.pop();
        origin.journal_record(TAG_HASH, 0, Stamp::ZERO, &old);
        origin.journal_hashes();
        let mut journal = vec![FORMAT];
        journal.extend(origin.take_journal());
        let mut loaded = VersionStore::journaled();
        replay(&journal, &mut loaded).unwrap();
        assert_eq!(loaded.hashes.get(0, b"h"), origin.hashes.get(0, b"h"));
        assert!(loaded.hashes.get(0, b"h").is_some());
        assert_eq!(loaded.hashes.get(0, b"s"), origin.hashes.get(0, b"s"));
        assert_eq!(loaded.hashes.get(0, b"s").map(Held::kind), Some(Kind::Set));
        assert_eq!(
            loaded.hashes.get(0, b"old").map(Held::kind),
            Some(Kind::Hash)
        );
        assert!(!loaded.hashes.contains(0, b"gone"));
        let f = loaded.hashes.get(0, b"c").and_then(|h| h.element_of(b"f"));
        assert_eq!(f.and_then(|e| e.rest()), Some(&b"10".to_vec()));
        assert_eq!(f.map(|e| e.increments().len()), Some(1));
    }

    #[test]
    fn a_bad_record_is_refused() {
        assert!(parse_record(&[1, 0, 0, 0, b'k', 9]).is_err());
        assert!(parse_record(&[1, 0, 0, 0, b'k', 1, 0]).is_err());
        let good = key_record(b"k", None, false);
        assert_eq!(parse_record(&good).unwrap(), HashRecord::NotHeld(b"k"));
    }
}
