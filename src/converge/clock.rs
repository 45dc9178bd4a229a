//! Hybrid logical clock and the node's stable identity.

use core::net::IpAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::proto::entry::Entry;

/// Bits of the logical counter in a packed clock value.
const LOGICAL_BITS: u32 = 16;

/// A hybrid logical clock packed in a `u64`: milliseconds since the Unix
/// epoch in the high 48 bits, a logical counter in the low 16. It never goes
/// backwards, even if the wall clock does, and `observe` moves it past any
/// clock received from the peer.
#[derive(Debug, Default)]
pub struct HybridClock {
    /// Last value handed out or observed; only increases.
    last: AtomicU64,
    /// Milliseconds added to every wall-clock reading: 0 but in tests that
    /// set a node's clock wrong (`RDMASYNC.DEBUG CLOCK-SKEW`).
    skew_ms: AtomicI64,
}

/// Whether a clock received from the peer is further ahead of this node's
/// wall clock than `max_offset_ms`: `Some(by how many ms)` if so. Clocks
/// behind are never refused (an entry stamped long ago may arrive late).
pub fn ahead_beyond(remote_ms: u64, local_ms: u64, max_offset_ms: u64) -> Option<u64> {
    let ahead = remote_ms.saturating_sub(local_ms);
    (ahead > max_offset_ms).then_some(ahead)
}

/// The first of `entries` stamped more than `max_offset_ms` ahead of
/// `local_ms`: its sequence number and how far ahead it is.
pub fn first_entry_ahead(
    entries: &[Entry],
    local_ms: u64,
    max_offset_ms: u64,
) -> Option<(u64, u64)> {
    entries.iter().find_map(|e| {
        ahead_beyond(millis_of(e.clock), local_ms, max_offset_ms).map(|ahead| (e.seq, ahead))
    })
}

/// The lead of the clock value `clock` over the wall clock `wall_ms`, in
/// whole ms (0 when behind).
pub fn lead_ms(clock: u64, wall_ms: u64) -> u64 {
    millis_of(clock).saturating_sub(wall_ms)
}

/// Packs wall-clock milliseconds into the clock's format (logical part zero).
pub fn pack_millis(ms: u64) -> u64 {
    ms << LOGICAL_BITS
}

/// The physical milliseconds of a packed clock value.
pub fn millis_of(clock: u64) -> u64 {
    clock >> LOGICAL_BITS
}

fn wall_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl HybridClock {
    /// A clock starting at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fresh timestamp, greater than every earlier one and every observed one.
    pub fn now(&self) -> u64 {
        self.tick(self.wall())
    }

    /// The wall clock, packed: one reading shared by many [`Self::tick`]s.
    pub fn wall(&self) -> u64 {
        pack_millis(self.wall_ms())
    }

    /// The wall clock in milliseconds since the Unix epoch (with the test
    /// skew, if one is set).
    pub fn wall_ms(&self) -> u64 {
        wall_millis().saturating_add_signed(self.skew_ms.load(Ordering::Relaxed))
    }

    /// The milliseconds part of the clock now: the wall clock, or the
    /// newest clock handed out or observed if that is ahead. Hands nothing
    /// out.
    pub fn now_ms(&self) -> u64 {
        millis_of(self.last.load(Ordering::Acquire)).max(self.wall_ms())
    }

    /// Makes this node's wall clock read `ms` off from now, for tests of a
    /// peer whose clock is wrong; 0 reads it right again. Stamps already
    /// handed out stay: the clock never goes back.
    pub fn set_skew_ms(&self, ms: i64) {
        self.skew_ms.store(ms, Ordering::Relaxed);
    }

    /// `now` with an explicit wall-clock reading (packed): many stamps in
    /// a row from one reading of the wall clock.
    pub fn tick(&self, wall: u64) -> u64 {
        let mut prev = self.last.load(Ordering::Relaxed);
        loop {
            let next = wall.max(prev.saturating_add(1));
            match self
                .last
                .compare_exchange_weak(prev, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return next,
                Err(p) => prev = p,
            }
        }
    }

    /// How far the newest clock handed out or observed runs ahead of the
    /// wall clock, in whole ms (0 when it does not).
    pub fn lead_ms(&self) -> u64 {
        lead_ms(self.last.load(Ordering::Acquire), self.wall_ms())
    }

    /// Moves the clock past a timestamp received from the peer.
    pub fn observe(&self, remote: u64) {
        self.last.fetch_max(remote, Ordering::AcqRel);
    }
}

/// FNV-1a, 64 bit: a stable hash for deriving node ids (not for security).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The default node id: a hash of the address this node uses to reach its
/// peer and the port it listens on. Stable across restarts while addressing
/// stays the same, and different for the two nodes of a pair (they differ in
/// address, or share a host and differ in listen port). Never zero.
pub fn default_node_id(local_ip: IpAddr, listen_port: u16) -> u64 {
    let id = fnv1a(format!("{local_ip}:{listen_port}").as_bytes());
    if id == 0 {
        1
    } else {
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn clock_is_monotonic_when_wall_clock_steps_back() {
        let c = HybridClock::new();
        let a = c.tick(pack_millis(1000));
        let b = c.tick(pack_millis(500));
        assert!(b > a);
        assert_eq!(millis_of(b), 1000);
    }

    #[test]
    fn observe_moves_past_remote() {
        let c = HybridClock::new();
        c.observe(pack_millis(5000) + 3);
        let t = c.tick(pack_millis(10));
        assert!(t > pack_millis(5000) + 3);
        assert!(c.now() > t);
    }

    #[test]
    fn only_a_clock_further_ahead_than_the_bound_is_refused() {
        assert_eq!(ahead_beyond(10_500, 10_000, 500), None);
        assert_eq!(ahead_beyond(10_501, 10_000, 500), Some(501));
        // Behind is late, not wrong.
        assert_eq!(ahead_beyond(1, 10_000, 500), None);
        const TEN_YEARS_MS: u64 = 10 * 365 * 86_400_000;
        assert_eq!(
            ahead_beyond(10_000 + TEN_YEARS_MS, 10_000, 10_000),
            Some(TEN_YEARS_MS)
        );
    }

    #[test]
    fn the_first_entry_too_far_ahead_is_named() {
        use crate::proto::entry::Op;
        let at = |seq, ms| Entry {
            origin: 2,
            seq,
            clock: pack_millis(ms) + 5,
            db: 0,
            op: Op::FlushAll,
        };
        let batch = [at(1, 9_000), at(2, 10_000), at(3, 30_000), at(4, 40_000)];
        assert_eq!(first_entry_ahead(&batch, 10_000, 10_000), Some((3, 20_000)));
        assert_eq!(first_entry_ahead(&batch[..2], 10_000, 10_000), None);
    }

    #[test]
    fn a_skewed_clock_stamps_ahead_and_never_back() {
        let c = HybridClock::new();
        let right = c.now();
        c.set_skew_ms(3_600_000);
        let ahead = c.now();
        assert!(millis_of(ahead) >= millis_of(right) + 3_600_000);
        c.set_skew_ms(0);
        assert!(c.now() > ahead, "the clock never goes back");
    }

    #[test]
    fn node_ids_are_stable_and_distinct_per_port() {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(default_node_id(ip, 7000), default_node_id(ip, 7000));
        assert_ne!(default_node_id(ip, 7000), default_node_id(ip, 7001));
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        assert_ne!(default_node_id(ip, 7000), default_node_id(other, 7000));
    }

    proptest! {
        #[test]
        fn ticks_strictly_increase(walls in proptest::collection::vec(0u64..1u64 << 40, 1..100)) {
            let c = HybridClock::new();
            let mut prev = 0;
            for w in walls {
                let t = c.tick(pack_millis(w));
                prop_assert!(t > prev);
                prev = t;
            }
        }
    }
}
