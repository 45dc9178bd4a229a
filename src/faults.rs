//! Fault injection for tests of the error paths, through
//! `RDMASYNC.DEBUG FAIL-READS SET <prefix>` / `RDMASYNC.DEBUG FAIL-READS CLEAR`:
//! while set, every read of an existing key whose name starts with the
//! prefix fails as an error reply from Redis would. Refused unless Redis's
//! own `enable-debug-command` allows `DEBUG`.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::RwLock;

/// A prefix is set (checked first, so reads cost one load when it is not).
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Keys starting with it fail to read.
static FAIL_READS: RwLock<Vec<u8>> = RwLock::new(Vec::new());

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
}

/// Parses the arguments after the command name.
///
/// # Errors
/// The usage line, for anything else.
pub fn parse(args: &[&[u8]]) -> Result<DebugRequest, &'static str> {
    const USAGE: &str =
        "ERR usage: RDMASYNC.DEBUG FAIL-READS SET <key-prefix> | RDMASYNC.DEBUG FAIL-READS CLEAR";
    let upper = |a: &[u8]| a.to_ascii_uppercase();
    match args {
        [what, set, prefix] if upper(what) == b"FAIL-READS" && upper(set) == b"SET" => {
            Ok(DebugRequest::FailReads(prefix.to_vec()))
        }
        [what, clear] if upper(what) == b"FAIL-READS" && upper(clear) == b"CLEAR" => {
            Ok(DebugRequest::ClearFaults)
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
    }

    #[test]
    fn rejects_anything_else() {
        for args in [
            &[][..],
            &[&b"FAIL-READS"[..]][..],
            &[&b"FAIL-READS"[..], b"SET"][..],
            &[&b"FAIL-READS"[..], b"CLEAR", b"x"][..],
            &[&b"FAIL-WRITES"[..], b"SET", b"x"][..],
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
