//! Hybrid logical clock and the node's stable identity.

use core::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

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
        self.tick(pack_millis(wall_millis()))
    }

    /// The wall clock, packed: one reading shared by many [`Self::tick`]s.
    pub fn wall() -> u64 {
        pack_millis(wall_millis())
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
