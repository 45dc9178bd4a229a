//! How far this node's clock ran ahead of its wall clock, kept across
//! restarts (the lead file, written by `runtime`): a node restarted from
//! a copy older than its last writes stamps its first writes from the
//! newest stamp it loaded, which can lie below stamps it gave before the
//! loss when its clock followed a peer's that runs ahead (a write made
//! after the restart would then lose to a lost one the peer holds). Its
//! clock after a restart starts at its wall clock plus the lead it kept,
//! above every stamp it gave while that lead held.

use crate::converge::clock::pack_millis;

/// How often the lead is looked at and, where it grew, written, in ms: a
/// lead that grew in the last such interval before a crash is not kept.
pub const CHECK_EVERY_MS: u64 = 100;

/// A lead that fell by less than this is not written again (the lead of a
/// clock following a peer's moves by a few ms with every entry).
const FALL_WRITTEN_MS: u64 = 100;

/// Whether a lead `now` is written over the one `kept` in the file: when
/// none is kept, when it grew, or when it fell by [`FALL_WRITTEN_MS`] or
/// more.
pub fn worth_writing(kept: Option<u64>, now: u64) -> bool {
    match kept {
        None => true,
        Some(kept) => now > kept || now.saturating_add(FALL_WRITTEN_MS) <= kept,
    }
}

/// The clock a node starts from after a restart (packed): its wall clock
/// plus the lead it kept, one ms more for the logical part of its last
/// stamp, and at most `max_offset_ms` ahead (a larger lead came from this
/// node's own wall clock set back since). A peer whose wall clock is behind
/// this one's by more than what the cap leaves still refuses the first
/// stamps for as long (its link stops and heals by itself).
pub fn floor_after_restart(wall_ms: u64, kept_ms: u64, max_offset_ms: u64) -> u64 {
    let lead = kept_ms.saturating_add(1).min(max_offset_ms);
    pack_millis(wall_ms.saturating_add(lead))
}

/// The file's text for a lead of `ms`.
pub fn encode(ms: u64) -> String {
    format!("rdmasync-clock-lead-ms {ms}\n")
}

/// The lead the file's text `text` holds; `None` for any other text.
pub fn decode(text: &str) -> Option<u64> {
    let value = text
        .strip_prefix("rdmasync-clock-lead-ms ")?
        .strip_suffix('\n')?;
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::converge::clock::lead_ms;

    #[test]
    fn the_lead_is_whole_ms_ahead_of_the_wall_clock_and_never_below_zero() {
        assert_eq!(lead_ms(pack_millis(10_500) + 7, 2_500), 8_000);
        assert_eq!(lead_ms(pack_millis(1_000), 2_000), 0);
    }

    #[test]
    fn a_lead_is_written_when_none_is_kept_when_it_grows_or_falls_far() {
        assert!(worth_writing(None, 0));
        assert!(worth_writing(Some(8_000), 8_001));
        assert!(!worth_writing(Some(8_000), 8_000));
        assert!(!worth_writing(Some(8_000), 7_950));
        assert!(worth_writing(Some(8_000), 7_900));
        assert!(worth_writing(Some(8_000), 0));
    }

    #[test]
    fn the_floor_after_a_restart_lies_above_every_stamp_the_kept_lead_allowed() {
        // Stamps before the crash: at most its wall clock then plus the lead.
        let before = pack_millis(100_000 + 8_000) + 65_535;
        let floor = floor_after_restart(100_000, 8_000, 10_000);
        assert!(floor > before);
        // No lead kept: one ms past the wall clock.
        assert_eq!(floor_after_restart(5_000, 0, 10_000), pack_millis(5_001));
    }

    #[test]
    fn a_kept_lead_beyond_the_offset_bound_is_cut_to_it() {
        let floor = floor_after_restart(5_000, 315_360_000_000, 10_000);
        assert_eq!(floor, pack_millis(15_000));
    }

    #[test]
    fn the_file_text_reads_back_and_nothing_else_reads() {
        for ms in [0, 1, 8_000, u64::MAX] {
            assert_eq!(decode(&encode(ms)), Some(ms));
        }
        for bad in [
            "",
            "rdmasync-clock-lead-ms \n",
            "rdmasync-clock-lead-ms 12",
            "rdmasync-clock-lead-ms -1\n",
            "rdmasync-clock-lead-ms +1\n",
            "rdmasync-clock-lead-ms 99999999999999999999\n",
            "other 12\n",
        ] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }
}
