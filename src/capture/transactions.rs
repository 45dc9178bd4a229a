//! Notes of merged changes queued in `MULTI`, claimed at their `EXEC`
//! (issue 27: increments with `merge-counters`, element changes with
//! `merge-elements`).
//!
//! The command filter sees a command of a transaction when it is queued,
//! not when it runs, and the events of the `EXEC` come with no filtered
//! command before them. Where the server names the filtered command's
//! client (Redis 7.2 and later, Valkey), what each client queues waits
//! here for its `EXEC` (`DISCARD` drops it). The `EXEC`'s events then claim
//! the notes in queue order: an event claims the first note of its key
//! that fits it, and the notes before that one belong to commands that ran
//! before it and raised no event (they failed, or changed nothing). The
//! next command, or the flush, ends the claims.
//!
//! A claim can take the wrong note: when one command of a key raised no
//! event and a later one of the same key did, the event claims the first.
//! So a key that claimed a note and has a note no event claimed is not
//! trusted: its change ships whole (a set of a counter, a whole write of a
//! collection), counted in `merge_fallbacks`.
//!
//! Pure: the hook says what the filter and the events saw.

use std::cell::Cell;
use std::collections::VecDeque;

use hashbrown::HashMap;

/// Notes queued in `MULTI`, of all clients, kept at most: past it they are
/// all dropped (their `EXEC`s then ship whole, counted). A client that
/// disconnects in `MULTI` leaves its notes here until then.
pub const MAX_QUEUED: usize = 4_096;

thread_local! {
    /// Some `EXEC`'s notes are being claimed: every filtered command reads
    /// it, to end the claims ([`Transactions::exec_done`]).
    static CLAIMING: Cell<bool> = const { Cell::new(false) };
}

/// Whether an `EXEC`'s notes may be being claimed (of increments or of
/// elements): the next command ends the claims.
pub fn claiming() -> bool {
    CLAIMING.get()
}

/// The claims of every window ended ([`Transactions::exec_done`] of each).
pub fn claims_ended() {
    CLAIMING.set(false);
}

/// Whether a command named `name` ends a transaction (`EXEC`, `DISCARD`).
pub fn ends_transaction(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"exec") || name.eq_ignore_ascii_case(b"discard")
}

/// The notes of the `EXEC` running now, in queue order.
#[derive(Debug)]
struct Running<N> {
    notes: VecDeque<(Vec<u8>, N)>,
    /// Keys whose events claimed a note.
    claimed: Vec<(u32, Vec<u8>)>,
    /// Keys of notes no event claimed.
    unclaimed: Vec<Vec<u8>>,
}

/// Each client's notes queued in `MULTI` (`N`: what a note says), and
/// those of the `EXEC` running now.
#[derive(Debug)]
pub struct Transactions<N> {
    queued: HashMap<u64, Vec<(Vec<u8>, N)>>,
    queued_len: usize,
    running: Option<Running<N>>,
}

impl<N> Default for Transactions<N> {
    fn default() -> Self {
        Self {
            queued: HashMap::new(),
            queued_len: 0,
            running: None,
        }
    }
}

impl<N> Transactions<N> {
    /// Client `client`, in `MULTI`, queued a command of `key` that `note`
    /// describes.
    pub fn queue(&mut self, client: u64, key: &[u8], note: N) {
        if self.queued_len >= MAX_QUEUED {
            self.queued.clear();
            self.queued_len = 0;
        }
        self.queued
            .entry(client)
            .or_default()
            .push((key.to_vec(), note));
        self.queued_len += 1;
    }

    /// Client `client` ends its transaction: with `exec`, its notes are
    /// claimed from now on; else they are dropped. An `EXEC` still being
    /// claimed ends first: the keys it leaves untrusted.
    pub fn end_transaction(&mut self, client: u64, exec: bool) -> Vec<(u32, Vec<u8>)> {
        let untrusted = self.exec_done();
        let notes = self.queued.remove(&client).unwrap_or_default();
        self.queued_len = self.queued_len.saturating_sub(notes.len());
        if exec && !notes.is_empty() {
            self.running = Some(Running {
                notes: notes.into(),
                claimed: Vec::new(),
                unclaimed: Vec::new(),
            });
            CLAIMING.set(true);
        }
        untrusted
    }

    /// Whether an `EXEC`'s notes are being claimed.
    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// An event of `key` in `db`, while an `EXEC` runs: the first note of
    /// `key` that `fits` it (`None`: none, or no `EXEC` runs).
    pub fn claim(&mut self, db: u32, key: &[u8], fits: impl Fn(&N) -> bool) -> Option<N> {
        let exec = self.running.as_mut()?;
        let at = exec.notes.iter().position(|(k, n)| k == key && fits(n))?;
        exec.unclaimed
            .extend(exec.notes.drain(..at).map(|(k, _)| k));
        let (_, note) = exec.notes.pop_front()?;
        if !exec.claimed.iter().any(|(d, k)| *d == db && k == key) {
            exec.claimed.push((db, key.to_vec()));
        }
        Some(note)
    }

    /// The claims of the running `EXEC` end (the next command came, or the
    /// flush): the keys that claimed a note and have one no event claimed.
    pub fn exec_done(&mut self) -> Vec<(u32, Vec<u8>)> {
        let Some(mut exec) = self.running.take() else {
            return Vec::new();
        };
        exec.unclaimed.extend(exec.notes.drain(..).map(|(k, _)| k));
        exec.claimed
            .into_iter()
            .filter(|(_, key)| exec.unclaimed.contains(key))
            .collect()
    }

    /// The number of notes queued (tests).
    #[cfg(test)]
    pub fn queued_len(&self) -> usize {
        self.queued_len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any(_: &i64) -> bool {
        true
    }

    #[test]
    fn notes_are_claimed_at_their_exec_in_queue_order() {
        let mut t = Transactions::default();
        t.queue(7, b"a", 2);
        t.queue(8, b"a", 100);
        t.queue(7, b"b", -1);
        t.queue(7, b"a", 3);
        assert!(t.end_transaction(8, false).is_empty(), "client 8 discards");
        assert!(t.end_transaction(7, true).is_empty());
        assert!(t.is_running() && claiming());
        assert_eq!(t.claim(0, b"a", any), Some(2));
        assert_eq!(t.claim(0, b"b", any), Some(-1));
        assert_eq!(t.claim(0, b"a", any), Some(3));
        assert_eq!(t.claim(0, b"a", any), None, "no note left");
        assert!(t.exec_done().is_empty());
        claims_ended();
        assert!(!t.is_running() && !claiming());
        assert!(t.end_transaction(8, true).is_empty());
        assert!(!t.is_running(), "client 8's notes were dropped");
    }

    #[test]
    fn a_key_with_an_unclaimed_note_is_not_trusted() {
        let mut t = Transactions::default();
        // a's first command raised no event: its event claims 5, not 7.
        t.queue(1, b"a", 5);
        t.queue(1, b"a", 7);
        t.queue(1, b"b", 1);
        t.end_transaction(1, true);
        assert_eq!(t.claim(0, b"a", any), Some(5));
        assert_eq!(t.claim(0, b"b", any), Some(1), "a's second note skipped");
        assert_eq!(t.exec_done(), vec![(0, b"a".to_vec())]);
        // A note skipped by a later key's event, of a key never claimed,
        // leaves nothing untrusted.
        t.queue(1, b"c", 1);
        t.queue(1, b"d", 1);
        t.end_transaction(1, true);
        assert_eq!(t.claim(0, b"d", any), Some(1));
        assert!(t.exec_done().is_empty());
    }

    #[test]
    fn a_claim_takes_the_first_note_that_fits_the_event() {
        let mut t = Transactions::default();
        t.queue(1, b"h", 1);
        t.queue(1, b"h", 2);
        t.end_transaction(1, true);
        assert_eq!(t.claim(3, b"h", |n| *n == 2), Some(2));
        assert_eq!(t.exec_done(), vec![(3, b"h".to_vec())]);
    }

    #[test]
    fn the_next_transaction_ends_the_running_one() {
        let mut t = Transactions::default();
        t.queue(1, b"e", 4);
        t.queue(1, b"e", 5);
        t.queue(2, b"e", 9);
        t.end_transaction(1, true);
        assert_eq!(t.claim(0, b"e", any), Some(4));
        assert_eq!(t.end_transaction(2, true), vec![(0, b"e".to_vec())]);
        assert_eq!(t.claim(0, b"e", any), Some(9));
    }

    #[test]
    fn queued_notes_are_bounded() {
        let mut t = Transactions::default();
        for _ in 0..MAX_QUEUED {
            t.queue(1, b"a", 1);
        }
        t.queue(2, b"a", 1);
        assert_eq!(t.queued_len(), 1);
        t.end_transaction(1, true);
        assert!(!t.is_running(), "client 1's notes went");
    }
}
