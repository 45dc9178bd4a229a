//! Why a write merged as a whole key where the merge rules would merge it
//! per element or as a counter (issue 27): each fall-back is counted in
//! `merge_fallbacks` and under its reason in `merge_fallbacks_by_reason`,
//! so that no partial merge hides in one total.

use std::sync::atomic::AtomicU64;

use crate::ops::status::Stats;

/// The reason of one fall-back to whole-key last writer wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// An increment shipped as the value it left: the merge state's value
    /// disagreed with it, a whole write had written the element, or too
    /// many increments wait for the peer.
    IncrementAsWrite,
    /// An increment whose `incrby` event no note of the command filter
    /// claimed (INCR-family commands in `MULTI` on Redis 7.0, whose filter
    /// does not name the client).
    Unnoted,
    /// A transaction's queued change that raised no event: its key ships
    /// whole.
    Transaction,
    /// A conditional `ZADD` of several members: the event does not say
    /// which changed.
    InexactZadd,
    /// A write of another type met a merged key (or a merged change met a
    /// key of another type): one whole value wins. Also a held hash
    /// written again where field TTLs may be, which ships whole.
    TypeChange,
    /// A list's pops or edits made here undone by a whole write of the
    /// list made at once elsewhere.
    ListWholeUndone,
    /// A merged key written here after a flush the peer made ships again
    /// whole.
    FlushSurvivor,
}

impl Fallback {
    /// Every reason, in the order STATUS lists them.
    pub const ALL: [Fallback; 7] = [
        Fallback::IncrementAsWrite,
        Fallback::Unnoted,
        Fallback::Transaction,
        Fallback::InexactZadd,
        Fallback::TypeChange,
        Fallback::ListWholeUndone,
        Fallback::FlushSurvivor,
    ];

    /// Its name in `merge_fallbacks_by_reason`.
    pub fn name(self) -> &'static str {
        match self {
            Fallback::IncrementAsWrite => "increment_as_write",
            Fallback::Unnoted => "unnoted",
            Fallback::Transaction => "transaction",
            Fallback::InexactZadd => "inexact_zadd",
            Fallback::TypeChange => "type_change",
            Fallback::ListWholeUndone => "list_whole_undone",
            Fallback::FlushSurvivor => "flush_survivor",
        }
    }

    /// Its place in [`Fallback::ALL`] and in [`FallbackCounts`].
    fn index(self) -> usize {
        self as usize
    }
}

/// The fall-backs counted per reason.
#[derive(Debug, Default)]
pub struct FallbackCounts([AtomicU64; Fallback::ALL.len()]);

impl FallbackCounts {
    /// Adds `n` under `reason`.
    pub fn add(&self, reason: Fallback, n: u64) {
        Stats::add(&self.0[reason.index()], n);
    }

    /// The count under `reason`.
    pub fn get(&self, reason: Fallback) -> u64 {
        Stats::get(&self.0[reason.index()])
    }

    /// `reason=count` for every reason, comma-separated (the STATUS and
    /// INFO field).
    pub fn render(&self) -> String {
        Fallback::ALL
            .iter()
            .map(|r| format!("{}={}", r.name(), self.get(*r)))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Counts `n` fall-backs for `reason` in `stats` (the total too).
pub fn count(stats: &Stats, reason: Fallback, n: u64) {
    if n == 0 {
        return;
    }
    Stats::add(&stats.merge_fallbacks, n);
    stats.merge_fallback_reasons.add(reason, n);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_place_and_name() {
        for (i, r) in Fallback::ALL.iter().enumerate() {
            assert_eq!(r.index(), i, "{r:?} out of order");
        }
        let mut names: Vec<&str> = Fallback::ALL.iter().map(|r| r.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Fallback::ALL.len(), "names differ");
    }

    #[test]
    fn counts_add_to_the_total_and_to_their_reason_only() {
        let stats = Stats::default();
        count(&stats, Fallback::TypeChange, 2);
        count(&stats, Fallback::InexactZadd, 1);
        count(&stats, Fallback::Unnoted, 0);
        assert_eq!(Stats::get(&stats.merge_fallbacks), 3);
        assert_eq!(stats.merge_fallback_reasons.get(Fallback::TypeChange), 2);
        assert_eq!(stats.merge_fallback_reasons.get(Fallback::Unnoted), 0);
        assert_eq!(
            stats.merge_fallback_reasons.render(),
            "increment_as_write=0,unnoted=0,transaction=0,inexact_zadd=1,type_change=2,\
             list_whole_undone=0,flush_survivor=0"
        );
    }
}
