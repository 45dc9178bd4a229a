//! Keys that are costly to snapshot and written again and again (a hash or
//! a list that grows with every command): shipping one whole every
//! event-loop iteration can cost more than the commands that change it.
//! After such a snapshot the key rests for a while ([`HotKeys::snapshotted`];
//! `hot-key-rest` bounds it, 0 turns resting off);
//! a flush that finds it dirty during its rest waits as a whole
//! ([`HotKeys::holds_back`]), so writes still ship in the order they were
//! made and a transaction still ships as one batch. Pure: time comes in as
//! an argument.

use std::time::{Duration, Instant};

use hashbrown::HashMap;

/// Snapshots that took at least this long put their key to rest...
pub const COSTLY_SNAPSHOT: Duration = Duration::from_micros(50);
/// ... if their payload is at least this large: reading a few KiB takes a
/// few microseconds, so a small value that "took" 50 us was preempted, not
/// costly (on a shared 2-core host that happened to small hashes).
pub const COSTLY_MIN_BYTES: usize = 4096;

/// Whether a snapshot of `bytes` that took `read_time` is costly.
pub fn is_costly(read_time: Duration, bytes: usize) -> bool {
    read_time >= COSTLY_SNAPSHOT && bytes >= COSTLY_MIN_BYTES
}
/// A resting key's snapshots may take at most this share of the time
/// (the rest lasts `cost * (1 / SNAPSHOT_SHARE - 1)`).
pub const SNAPSHOT_SHARE: u32 = 20; // 1/20 = 5 %
/// A flush is never held back when this many changes wait (the batch it
/// ships stays bounded).
pub const MAX_HELD_OPS: usize = 1024;

/// The function libraries rest as a key of their own: reading one library
/// costs the server a pass over the names of all (`FUNCTION LIST
/// LIBRARYNAME`), reading all of them a `FUNCTION DUMP`, so libraries
/// loaded one by one and read back each time would cost the square of
/// their number without a rest (`capture::libraries`). No database has
/// this number.
pub const FUNCTIONS_DB: u32 = u32::MAX;
/// The name the function libraries rest under.
pub const FUNCTIONS_KEY: &[u8] = b"";

/// Keys resting after a costly snapshot, and until when.
#[derive(Debug, Default)]
pub struct HotKeys {
    until: HashMap<(u32, Box<[u8]>), Instant>,
}

impl HotKeys {
    /// No key rests.
    pub fn is_empty(&self) -> bool {
        self.until.is_empty()
    }

    /// Keys resting (or whose rest ended but was not yet noticed).
    pub fn len(&self) -> usize {
        self.until.len()
    }

    /// `key` of `db` was snapshotted at `now` in `cost`: a costly one rests,
    /// at most `max_rest` (zero: never).
    pub fn snapshotted(
        &mut self,
        db: u32,
        key: &[u8],
        cost: Duration,
        now: Instant,
        max_rest: Duration,
    ) {
        if cost < COSTLY_SNAPSHOT || max_rest.is_zero() {
            return;
        }
        let rest = cost.saturating_mul(SNAPSHOT_SHARE - 1).min(max_rest);
        self.until.insert((db, key.into()), now + rest);
    }

    /// Whether a flush at `now` of `pending` changes should wait: one of the
    /// resting keys is among them (`is_pending`) and not too many wait.
    /// Forgets keys whose rest is over.
    pub fn holds_back(
        &mut self,
        now: Instant,
        pending: usize,
        is_pending: impl Fn(u32, &[u8]) -> bool,
    ) -> bool {
        self.until.retain(|_, until| *until > now);
        pending < MAX_HELD_OPS && self.until.keys().any(|(db, key)| is_pending(*db, key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX_REST: Duration = Duration::from_millis(100);

    #[test]
    fn cheap_snapshots_never_rest() {
        let mut h = HotKeys::default();
        let now = Instant::now();
        h.snapshotted(0, b"k", Duration::from_micros(10), now, MAX_REST);
        assert!(h.is_empty());
        assert!(!h.holds_back(now, 1, |_, _| true));
    }

    #[test]
    fn only_large_values_that_took_long_are_costly() {
        let slow = COSTLY_SNAPSHOT;
        assert!(is_costly(slow, COSTLY_MIN_BYTES));
        assert!(
            !is_costly(slow, COSTLY_MIN_BYTES - 1),
            "preempted, not costly"
        );
        assert!(!is_costly(slow - Duration::from_micros(1), 1 << 20));
    }

    #[test]
    fn a_costly_key_holds_back_flushes_that_include_it_until_its_rest_ends() {
        let mut h = HotKeys::default();
        let t0 = Instant::now();
        h.snapshotted(0, b"big", Duration::from_millis(1), t0, MAX_REST);
        let is_big = |db: u32, k: &[u8]| db == 0 && k == b"big";
        // 1 ms snapshot: 19 ms of rest.
        assert!(h.holds_back(t0 + Duration::from_millis(18), 1, is_big));
        assert!(!h.holds_back(t0 + Duration::from_millis(5), 1, |_, _| false));
        assert!(
            !h.holds_back(t0 + Duration::from_millis(5), 1, |db, k| db == 1
                && k == b"big")
        );
        assert!(!h.holds_back(t0 + Duration::from_millis(19), 1, is_big));
        assert!(h.is_empty(), "the rest is over and forgotten");
    }

    #[test]
    fn the_rest_is_bounded_and_so_is_what_waits() {
        let mut h = HotKeys::default();
        let t0 = Instant::now();
        h.snapshotted(3, b"huge", Duration::from_secs(1), t0, MAX_REST);
        assert!(h.holds_back(t0 + MAX_REST - Duration::from_millis(1), 1, |_, _| true));
        assert!(!h.holds_back(t0 + MAX_REST, 1, |_, _| true));
        h.snapshotted(3, b"huge", Duration::from_secs(1), t0, MAX_REST);
        assert!(!h.holds_back(t0, MAX_HELD_OPS, |_, _| true));
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn a_zero_rest_turns_resting_off() {
        let mut h = HotKeys::default();
        let t0 = Instant::now();
        h.snapshotted(0, b"big", Duration::from_secs(1), t0, Duration::ZERO);
        assert!(h.is_empty());
        assert!(!h.holds_back(t0, 1, |_, _| true));
    }
}
