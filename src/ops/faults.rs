//! Fault injection for tests of the error paths, through `RDMASYNC.DEBUG`:
//! - `FAIL-READS SET <prefix>` / `FAIL-READS CLEAR`: while set, every read
//!   of an existing key whose name starts with the prefix fails as an error
//!   reply from Redis would;
//! - `DROP-ACKS ON` / `DROP-ACKS OFF`: while on, acks from the peer are
//!   ignored, so what was shipped stays unacknowledged (and is resent after
//!   a reconnect) although the peer applied it;
//! - `HOLD-SENDS ON` / `HOLD-SENDS OFF`: while on, the sender thread leaves
//!   queued batches in the queue (what a slow link does), so a test can cut
//!   the link with changes queued but not sent.
//!
//! Refused unless Redis's own `enable-debug-command` allows `DEBUG`.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::RwLock;

/// A prefix is set (checked first, so reads cost one load when it is not).
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Keys starting with it fail to read.
static FAIL_READS: RwLock<Vec<u8>> = RwLock::new(Vec::new());

/// Acks from the peer are ignored.
static DROP_ACKS: AtomicBool = AtomicBool::new(false);

/// The sender leaves the queue alone.
static HOLD_SENDS: AtomicBool = AtomicBool::new(false);

/// Whether the sender must leave queued batches where they are now.
pub fn sends_held() -> bool {
    HOLD_SENDS.load(Ordering::Acquire)
}

/// Whether an ack from the peer must be ignored now.
pub fn acks_dropped() -> bool {
    DROP_ACKS.load(Ordering::Acquire)
}

/// Whether reading `key` must fail now.
pub fn read_fails(key: &[u8]) -> bool {
    ACTIVE.load(Ordering::Acquire) && key.starts_with(&FAIL_READS.read())
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
}

/// Parses the arguments after the command name.
///
/// # Errors
/// The usage line, for anything else.
pub fn parse(args: &[&[u8]]) -> Result<DebugRequest, &'static str> {
    const USAGE: &str = "ERR usage: RDMASYNC.DEBUG FAIL-READS SET <key-prefix> | \
                         RDMASYNC.DEBUG FAIL-READS CLEAR | RDMASYNC.DEBUG DROP-ACKS ON|OFF | \
                         RDMASYNC.DEBUG HOLD-SENDS ON|OFF";
    let upper = |a: &[u8]| a.to_ascii_uppercase();
    match args {
        [what, set, prefix] if upper(what) == b"FAIL-READS" && upper(set) == b"SET" => {
            Ok(DebugRequest::FailReads(prefix.to_vec()))
        }
        [what, clear] if upper(what) == b"FAIL-READS" && upper(clear) == b"CLEAR" => {
            Ok(DebugRequest::ClearFaults)
        }
        [what, on] if upper(what) == b"DROP-ACKS" && upper(on) == b"ON" => {
            Ok(DebugRequest::DropAcks(true))
        }
        [what, off] if upper(what) == b"DROP-ACKS" && upper(off) == b"OFF" => {
            Ok(DebugRequest::DropAcks(false))
        }
        [what, on] if upper(what) == b"HOLD-SENDS" && upper(on) == b"ON" => {
            Ok(DebugRequest::HoldSends(true))
        }
        [what, off] if upper(what) == b"HOLD-SENDS" && upper(off) == b"OFF" => {
            Ok(DebugRequest::HoldSends(false))
        }
        _ => Err(USAGE),
    }
}

/// Carries out a parsed request.
pub fn apply(request: DebugRequest) {
    match request {
        DebugRequest::FailReads(prefix) => {
            *FAIL_READS.write() = prefix;
            ACTIVE.store(true, Ordering::Release);
        }
        DebugRequest::ClearFaults => {
            ACTIVE.store(false, Ordering::Release);
            FAIL_READS.write().clear();
        }
        DebugRequest::DropAcks(on) => DROP_ACKS.store(on, Ordering::Release),
        DebugRequest::HoldSends(on) => HOLD_SENDS.store(on, Ordering::Release),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        apply(DebugRequest::FailReads(b"f:".to_vec()));
        assert!(read_fails(b"f:1"));
        assert!(!read_fails(b"g:1"));
        apply(DebugRequest::ClearFaults);
        assert!(!read_fails(b"f:1"));
    }
}
