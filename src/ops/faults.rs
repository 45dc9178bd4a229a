//! Fault injection for tests of the error paths, through `RDMASYNC.DEBUG`:
//! - `FAIL-READS SET <prefix>` / `FAIL-READS CLEAR`: while set, every read
//!   of an existing key whose name starts with the prefix fails as an error
//!   reply from Redis would;
//! - `DROP-ACKS ON` / `DROP-ACKS OFF`: while on, acks from the peer are
//!   ignored, so what was shipped stays unacknowledged (and is resent after
//!   a reconnect) although the peer applied it;
//! - `HOLD-SENDS ON` / `HOLD-SENDS OFF`: while on, the sender thread leaves
//!   queued batches in the queue (what a slow link does), so a test can cut
//!   the link with changes queued but not sent;
//! - `FAIL-NEXT-POST`: the sender's next write to the peer's ring fails as
//!   a dying link's would: that batch is dropped and the link closed;
//! - `DROP-NEXT-BATCH`: the sender skips the next batch it pops and keeps
//!   the link up, as a sender that loses a batch would (the peer must
//!   notice the gap);
//! - `HOLD-APPLY ON` / `HOLD-APPLY OFF`: while on, the main thread leaves
//!   what the link thread hands it (batches, acks, link up and down) in the
//!   apply queue, as a backed-up queue would;
//! - `HOLD-SYNCS ON` / `HOLD-SYNCS OFF`: while on, a sync owed to the
//!   peer (full, or since its watermarks) is not started, as a node that
//!   dies between acknowledging the peer's request and answering it would;
//! - `CLOCK-SKEW <ms>`: this node's wall clock reads `ms` off (negative:
//!   behind), as a node with a wrong clock would; 0 reads it right again;
//! - `VERSION <key>`: the version (and counter state, merge bound and
//!   coverage) this node holds of the key in the
//!   selected database (`live <clock> <node>`, `deleted <clock> <node>`,
//!   or `none`), and the database's floor, for a test that must say why
//!   a key differs;
//! - `EXIT-AFTER-ACK`: the process exits right after the next ack it sends
//!   has left, before Redis writes its AOF buffer, as a crash at the worst
//!   moment for an ack would;
//! - `EXPIRED-BOUND <n>`: at most `n` keys expired or evicted in one
//!   event-loop iteration become tombstones (0: the 1,048,576 of a
//!   production build), so the bound is reached on purpose.
//!
//! Refused unless Redis's own `enable-debug-command` allows `DEBUG`.

use std::sync::atomic::{AtomicBool, Ordering};

/// The switches the main thread reads: a part of its state
/// (`capture::state::MainState::faults`). The sender's are [`SenderFaults`],
/// in `Shared`.
#[derive(Debug, Default)]
pub struct Faults {
    /// Keys starting with it fail to read.
    fail_reads: Option<Vec<u8>>,
    /// Acks from the peer are ignored.
    drop_acks: bool,
    /// The apply queue is left alone.
    hold_apply: bool,
    /// Syncs owed to the peer are not started.
    hold_syncs: bool,
    /// The process exits once an ack went out.
    exit_after_ack: bool,
    /// An ack went out while `exit_after_ack` was set.
    ack_went_out: bool,
}

/// The switches the sender thread reads.
#[derive(Debug, Default)]
pub struct SenderFaults {
    /// HOLD-SENDS: queued batches stay queued.
    pub hold_sends: AtomicBool,
    fail_next_post: AtomicBool,
    drop_next_batch: AtomicBool,
}

impl SenderFaults {
    /// Whether the write about to be posted must fail (once per request).
    pub fn take_failed_post(&self) -> bool {
        self.fail_next_post.swap(false, Ordering::AcqRel)
    }

    /// Whether the batch just popped must be skipped (once per request).
    pub fn take_dropped_batch(&self) -> bool {
        self.drop_next_batch.swap(false, Ordering::AcqRel)
    }
}

impl Faults {
    /// The prefix of the keys whose reads must fail now, if any.
    pub fn failing_reads(&self) -> Option<&[u8]> {
        self.fail_reads.as_deref()
    }

    /// Whether an ack from the peer must be ignored now.
    pub fn acks_dropped(&self) -> bool {
        self.drop_acks
    }

    /// Whether the apply queue must be left alone now.
    pub fn apply_held(&self) -> bool {
        self.hold_apply
    }

    /// Whether a sync owed to the peer must wait now.
    pub fn syncs_held(&self) -> bool {
        self.hold_syncs
    }

    /// An ack was queued for the peer.
    pub fn ack_sent(&mut self) {
        self.ack_went_out |= self.exit_after_ack;
    }

    /// Whether the process must exit now (`EXIT-AFTER-ACK`, an ack sent).
    pub fn exit_due(&self) -> bool {
        self.ack_went_out
    }

    /// Carries out a parsed request; `sender` holds the sender's switches.
    pub fn apply(&mut self, request: DebugRequest, sender: Option<&SenderFaults>) {
        let set = |flag: fn(&SenderFaults) -> &AtomicBool, on: bool| {
            if let Some(s) = sender {
                flag(s).store(on, Ordering::Release);
            }
        };
        match request {
            DebugRequest::FailReads(prefix) => self.fail_reads = Some(prefix),
            DebugRequest::ClearFaults => self.fail_reads = None,
            DebugRequest::DropAcks(on) => self.drop_acks = on,
            DebugRequest::HoldApply(on) => self.hold_apply = on,
            DebugRequest::HoldSyncs(on) => self.hold_syncs = on,
            DebugRequest::HoldSends(on) => set(|s| &s.hold_sends, on),
            DebugRequest::FailNextPost => set(|s| &s.fail_next_post, true),
            DebugRequest::DropNextBatch => set(|s| &s.drop_next_batch, true),
            DebugRequest::ExitAfterAck => self.exit_after_ack = true,
            // The clock's and the hook's, set by the caller (`module`).
            DebugRequest::ClockSkew(_)
            | DebugRequest::ExpiredBound(_)
            | DebugRequest::Version(_) => {}
        }
    }
}

/// Whether reading `key` must fail, with reads of `prefix` failing.
pub fn read_fails(prefix: Option<&[u8]>, key: &[u8]) -> bool {
    prefix.is_some_and(|p| key.starts_with(p))
}

/// What a `RDMASYNC.DEBUG` command asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum DebugRequest {
    /// Fail reads of keys with this prefix.
    FailReads(Vec<u8>),
    /// Stop failing reads.
    ClearFaults,
    /// Ignore acks from the peer (`true`) or stop ignoring them.
    DropAcks(bool),
    /// Hold queued batches in the queue (`true`) or send them again.
    HoldSends(bool),
    /// Read this node's wall clock this many milliseconds off.
    ClockSkew(i64),
    /// Fail the sender's next write.
    FailNextPost,
    /// Skip the next batch the sender pops.
    DropNextBatch,
    /// Exit once the next ack went out, before the AOF is written.
    ExitAfterAck,
    /// Leave the apply queue alone (`true`) or apply again.
    HoldApply(bool),
    /// Start no sync owed to the peer (`true`) or start them again.
    HoldSyncs(bool),
    /// Record at most this many expiries per event-loop iteration.
    ExpiredBound(usize),
    /// Report the version this node holds of a key of the selected
    /// database (a read: changes nothing).
    Version(Vec<u8>),
}

/// Parses the arguments after the command name.
///
/// # Errors
/// The usage line, for anything else.
pub fn parse(args: &[&[u8]]) -> Result<DebugRequest, &'static str> {
    const USAGE: &str = "ERR usage: RDMASYNC.DEBUG FAIL-READS SET <key-prefix> | \
                         RDMASYNC.DEBUG FAIL-READS CLEAR | RDMASYNC.DEBUG DROP-ACKS ON|OFF | \
                         RDMASYNC.DEBUG HOLD-SENDS ON|OFF | RDMASYNC.DEBUG HOLD-APPLY ON|OFF | \
                         RDMASYNC.DEBUG HOLD-SYNCS ON|OFF | \
                         RDMASYNC.DEBUG FAIL-NEXT-POST | RDMASYNC.DEBUG DROP-NEXT-BATCH | \
                         RDMASYNC.DEBUG EXIT-AFTER-ACK | \
                         RDMASYNC.DEBUG CLOCK-SKEW <ms> | RDMASYNC.DEBUG EXPIRED-BOUND <n> | \
                         RDMASYNC.DEBUG VERSION <key>";
    if let [what, on] = args {
        if let Some(request) = switch(what, on) {
            return Ok(request);
        }
    }
    let upper = |a: &[u8]| a.to_ascii_uppercase();
    match args {
        [what, set, prefix] if upper(what) == b"FAIL-READS" && upper(set) == b"SET" => {
            Ok(DebugRequest::FailReads(prefix.to_vec()))
        }
        [what, clear] if upper(what) == b"FAIL-READS" && upper(clear) == b"CLEAR" => {
            Ok(DebugRequest::ClearFaults)
        }
        [what, key] if upper(what) == b"VERSION" => Ok(DebugRequest::Version(key.to_vec())),
        [what] if upper(what) == b"FAIL-NEXT-POST" => Ok(DebugRequest::FailNextPost),
        [what] if upper(what) == b"DROP-NEXT-BATCH" => Ok(DebugRequest::DropNextBatch),
        [what] if upper(what) == b"EXIT-AFTER-ACK" => Ok(DebugRequest::ExitAfterAck),
        [what, ms] if upper(what) == b"CLOCK-SKEW" => std::str::from_utf8(ms)
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map(DebugRequest::ClockSkew)
            .ok_or(USAGE),
        [what, n] if upper(what) == b"EXPIRED-BOUND" => std::str::from_utf8(n)
            .ok()
            .and_then(|n| n.parse().ok())
            .map(DebugRequest::ExpiredBound)
            .ok_or(USAGE),
        _ => Err(USAGE),
    }
}

/// `<what> ON|OFF` of one of the switches, if `what` names one.
fn switch(what: &[u8], on: &[u8]) -> Option<DebugRequest> {
    let on = match on.to_ascii_uppercase().as_slice() {
        b"ON" => true,
        b"OFF" => false,
        _ => return None,
    };
    Some(match what.to_ascii_uppercase().as_slice() {
        b"DROP-ACKS" => DebugRequest::DropAcks(on),
        b"HOLD-SENDS" => DebugRequest::HoldSends(on),
        b"HOLD-APPLY" => DebugRequest::HoldApply(on),
        b"HOLD-SYNCS" => DebugRequest::HoldSyncs(on),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_names_one_key() {
        assert_eq!(
            parse(&[b"version", b"k"]),
            Ok(DebugRequest::Version(b"k".to_vec()))
        );
        assert!(parse(&[b"VERSION"]).is_err());
    }

    #[test]
    fn parses_set_and_clear_in_any_case() {
        assert_eq!(
            parse(&[b"fail-reads", b"set", b"k:"]),
            Ok(DebugRequest::FailReads(b"k:".to_vec()))
        );
        assert_eq!(
            parse(&[b"FAIL-READS", b"CLEAR"]),
            Ok(DebugRequest::ClearFaults)
        );
        assert_eq!(
            parse(&[b"drop-acks", b"on"]),
            Ok(DebugRequest::DropAcks(true))
        );
        assert_eq!(
            parse(&[b"DROP-ACKS", b"OFF"]),
            Ok(DebugRequest::DropAcks(false))
        );
        assert_eq!(parse(&[b"fail-next-post"]), Ok(DebugRequest::FailNextPost));
        assert_eq!(parse(&[b"exit-after-ack"]), Ok(DebugRequest::ExitAfterAck));
        assert_eq!(
            parse(&[b"DROP-NEXT-BATCH"]),
            Ok(DebugRequest::DropNextBatch)
        );
        assert_eq!(
            parse(&[b"hold-apply", b"on"]),
            Ok(DebugRequest::HoldApply(true))
        );
        assert_eq!(
            parse(&[b"HOLD-APPLY", b"OFF"]),
            Ok(DebugRequest::HoldApply(false))
        );
        assert_eq!(
            parse(&[b"hold-syncs", b"On"]),
            Ok(DebugRequest::HoldSyncs(true))
        );
        assert!(parse(&[b"HOLD-SYNCS", b"maybe"]).is_err());
        assert_eq!(
            parse(&[b"clock-skew", b"-315360000000"]),
            Ok(DebugRequest::ClockSkew(-315_360_000_000))
        );
        assert_eq!(
            parse(&[b"expired-bound", b"10"]),
            Ok(DebugRequest::ExpiredBound(10))
        );
        assert!(parse(&[b"EXPIRED-BOUND", b"-1"]).is_err());
        assert_eq!(
            parse(&[b"CLOCK-SKEW", b"soon"]).map(|_| ()),
            Err(parse(&[]).unwrap_err())
        );
        assert_eq!(
            parse(&[b"hold-sends", b"ON"]),
            Ok(DebugRequest::HoldSends(true))
        );
        assert_eq!(
            parse(&[b"HOLD-SENDS", b"off"]),
            Ok(DebugRequest::HoldSends(false))
        );
    }

    #[test]
    fn rejects_anything_else() {
        for args in [
            &[][..],
            &[&b"FAIL-READS"[..]][..],
            &[&b"FAIL-READS"[..], b"SET"][..],
            &[&b"FAIL-READS"[..], b"CLEAR", b"x"][..],
            &[&b"FAIL-WRITES"[..], b"SET", b"x"][..],
            &[&b"DROP-ACKS"[..]][..],
            &[&b"DROP-ACKS"[..], b"maybe"][..],
            &[&b"HOLD-SENDS"[..]][..],
            &[&b"HOLD-SENDS"[..], b"ON", b"x"][..],
        ] {
            assert!(parse(args).is_err(), "{args:?}");
        }
    }

    #[test]
    fn set_then_clear() {
        let mut faults = Faults::default();
        let sender = SenderFaults::default();
        let hold = &sender.hold_sends;
        assert!(!read_fails(faults.failing_reads(), b"f:1"));
        faults.apply(DebugRequest::FailReads(b"f:".to_vec()), Some(&sender));
        assert!(read_fails(faults.failing_reads(), b"f:1"));
        assert!(!read_fails(faults.failing_reads(), b"g:1"));
        faults.apply(DebugRequest::ClearFaults, Some(&sender));
        assert!(!read_fails(faults.failing_reads(), b"f:1"));
        faults.apply(DebugRequest::DropAcks(true), Some(&sender));
        assert!(faults.acks_dropped());
        faults.apply(DebugRequest::HoldSends(true), Some(&sender));
        assert!(hold.load(Ordering::Acquire));
        faults.apply(DebugRequest::HoldSends(false), None);
        assert!(hold.load(Ordering::Acquire), "no sender: nothing to switch");
        faults.apply(DebugRequest::FailNextPost, Some(&sender));
        assert!(sender.take_failed_post());
        assert!(!sender.take_failed_post(), "once per request");
        faults.apply(DebugRequest::DropNextBatch, Some(&sender));
        assert!(sender.take_dropped_batch());
        assert!(!sender.take_dropped_batch(), "once per request");
        faults.apply(DebugRequest::HoldApply(true), None);
        assert!(faults.apply_held());
    }
}
