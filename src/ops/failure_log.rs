//! Which handshake failures have been logged: once per address and kind,
//! so a peer with the wrong secret (or a scanner) does not flood the log.

use std::collections::HashSet;
use std::net::IpAddr;

use crate::error::HandshakeFailure;

/// Distinct (address, kind) pairs whose failures are logged; later ones are only counted.
const MAX_LOGGED: usize = 256;

/// Which failures have been logged: once per address and kind, so a peer
/// with the wrong secret (or a scanner) does not flood the log.
#[derive(Debug, Default)]
pub struct FailureLog {
    logged: HashSet<(Option<IpAddr>, u8)>,
    full_logged: bool,
}

impl FailureLog {
    /// Whether a failure of `kind` from `ip` should be logged now.
    pub fn first(&mut self, ip: Option<IpAddr>, kind: HandshakeFailure) -> Option<bool> {
        let key = (ip, kind as u8);
        if self.logged.contains(&key) {
            return None;
        }
        if self.logged.len() >= MAX_LOGGED {
            let say_full = !self.full_logged;
            self.full_logged = true;
            return say_full.then_some(false);
        }
        self.logged.insert(key);
        Some(true)
    }

    /// A link with `ip` came up: its next failure is news again.
    pub fn forget(&mut self, ip: IpAddr) {
        self.logged.retain(|(a, _)| *a != Some(ip));
        self.full_logged = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_logged_once_per_address_and_kind() {
        let mut log = FailureLog::default();
        let a: IpAddr = [10, 0, 0, 1].into();
        assert_eq!(log.first(Some(a), HandshakeFailure::Auth), Some(true));
        assert_eq!(log.first(Some(a), HandshakeFailure::Auth), None);
        assert_eq!(log.first(Some(a), HandshakeFailure::Malformed), Some(true));
        for i in 0..MAX_LOGGED - 2 {
            let ip: IpAddr = [10, 1, (i / 256) as u8, i as u8].into();
            log.first(Some(ip), HandshakeFailure::Auth);
        }
        let late: IpAddr = [10, 9, 9, 9].into();
        assert_eq!(log.first(Some(late), HandshakeFailure::Auth), Some(false));
        assert_eq!(log.first(Some(late), HandshakeFailure::Auth), None);
    }
}
