//! Counter metadata made durable the way versions are: every change of a
//! key's state and every rise of the bound is a record of the version
//! store's journal (into the AOF and the replication stream with the data
//! it describes), and the RDB aux data holds the whole table.
//!
//! `TAG_COUNTER`: no stamp; the key field holds `key_len u32 | key |
//! state` (`codec`), no state when the key rests. `TAG_MERGE_BOUND`: the
//! bound's clock of a node, as a stamp; no key.

use crate::converge::journal::{TAG_COUNTER, TAG_MERGE_BOUND};
use crate::converge::merge::codec;
use crate::converge::merge::counter::Counter;
use crate::converge::version::{Stamp, VersionStore};

/// The key field of a counter record.
pub fn record_key(key: &[u8], state: Option<&Counter>) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + key.len() + 64);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    if let Some(c) = state {
        out.extend_from_slice(&codec::encode_counter(c));
    }
    out
}

/// A counter record's key and state (`None` inside: it rests); `None`
/// when the bytes are not such a record.
pub fn parse_record_key(bytes: &[u8]) -> Option<(&[u8], Option<Counter>)> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let key = bytes.get(4..4usize.checked_add(len)?)?;
    let state = &bytes[4 + len..];
    if state.is_empty() {
        return Some((key, None));
    }
    codec::decode_counter(state).ok().map(|c| (key, Some(c)))
}

impl VersionStore {
    /// Journals the state `key` has now (after a change of it).
    pub fn journal_counter(&mut self, db: u32, key: &[u8]) {
        let bytes = record_key(key, self.counters.get(db, key).as_deref());
        self.journal_record(TAG_COUNTER, db, Stamp::ZERO, &bytes);
    }

    /// Raises the merge bound's clock of `node`, journaled when it moves.
    pub fn raise_merge_bound(&mut self, node: u64, clock: u64) {
        if clock > self.counters.bound().clock(node) {
            self.counters.raise_bound(node, clock);
            self.journal_record(TAG_MERGE_BOUND, 0, Stamp::new(clock, node), &[]);
        }
    }

    /// Lowers the merge bound's clock of `node` to `clock`, journaled when
    /// it moves: the peer lost what it had applied of `node`'s changes
    /// past it (see `receive::apply::note_sync_request`).
    pub fn lower_merge_bound(&mut self, node: u64, clock: u64) {
        if clock < self.counters.bound().clock(node) {
            self.counters.set_bound(node, clock);
            self.journal_record(TAG_MERGE_BOUND, 0, Stamp::new(clock, node), &[]);
        }
    }

    /// Collects the counters at the bound; those that rest are journaled.
    pub fn collect_counters(&mut self) {
        if self.counters.is_empty() {
            return;
        }
        for (db, key) in self.counters.collect() {
            self.journal_counter(db, &key);
        }
    }

    /// Replays a counter record; false when it is not one.
    pub(crate) fn replay_counter(&mut self, db: u32, bytes: &[u8]) -> bool {
        match parse_record_key(bytes) {
            Some((key, state)) => {
                self.counters.restore(db, key, state);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::converge::journal::{replay, FORMAT};
    use crate::converge::version::KeyVersion;

    #[test]
    fn counter_states_and_the_bound_replay_from_the_journal() {
        let mut origin = VersionStore::journaled();
        let v0 = Some(KeyVersion::Live(Stamp::new(1, 1)));
        assert!(origin
            .counters
            .local_increment(0, b"c", Stamp::new(5, 1), 2, 12, v0));
        origin.journal_counter(0, b"c");
        assert!(origin
            .counters
            .local_increment(0, b"d", Stamp::new(6, 1), 1, 1, None));
        origin.journal_counter(0, b"d");
        origin.raise_merge_bound(1, 5);
        origin.raise_merge_bound(2, 3);
        origin.collect_counters();
        let mut payload = vec![FORMAT];
        payload.extend(origin.take_journal());
        let mut loaded = VersionStore::journaled();
        assert!(replay(&payload, &mut loaded).is_ok());
        assert_eq!(loaded.counters.get(0, b"c"), origin.counters.get(0, b"c"));
        assert_eq!(loaded.counters.live_len(), 1, "c rests, d does not");
        assert_eq!(loaded.counters.get(0, b"d"), origin.counters.get(0, b"d"));
        assert_eq!(loaded.counters.bound(), origin.counters.bound());
        assert_eq!(parse_record_key(&[9, 0, 0, 0, 1]), None);
    }

    #[test]
    fn a_lowered_bound_replays_lowered() {
        let mut origin = VersionStore::journaled();
        origin.raise_merge_bound(1, 50);
        origin.raise_merge_bound(2, 30);
        origin.lower_merge_bound(1, 20);
        origin.lower_merge_bound(2, 0);
        origin.lower_merge_bound(1, 40);
        assert_eq!(origin.counters.bound().clock(1), 20, "only ever lowered");
        assert_eq!(origin.counters.bound().clock(2), 0);
        let mut payload = vec![FORMAT];
        payload.extend(origin.take_journal());
        let mut loaded = VersionStore::journaled();
        assert!(replay(&payload, &mut loaded).is_ok());
        assert_eq!(loaded.counters.bound(), origin.counters.bound());
        assert_eq!(
            loaded.counters.folded().clock(1),
            50,
            "what rested folded stays"
        );
        assert_eq!(loaded.counters.folded().clock(2), 30);
        origin.raise_merge_bound(1, 60);
        assert_eq!(origin.counters.bound().clock(1), 60);
    }
}
