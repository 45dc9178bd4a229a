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
//! A command queued with no note that may still raise the events notes
//! wait for (SMOVE raises `sadd`, GEOADD `zadd`, a script or a module's
//! command may run anything) is a barrier: an event that would claim a note
//! past it claims nothing, and neither does any later event of that `EXEC`
//! (their keys ship whole). A filtered command that ends the claims while a
//! barrier is still ahead may be one a script of that `EXEC` runs: then the
//! single note of the last filtered command is not trusted either until the
//! flush ([`single_notes_trusted`]), since a later command of the `EXEC`
//! could claim the note of a script's call that raised no event.
//!
//! Pure: the hook says what the filter and the events saw.

use std::cell::Cell;
use std::collections::VecDeque;

use hashbrown::{HashMap, HashSet};

/// Notes queued in `MULTI`, of all clients, kept at most: past it they are
/// all dropped (their `EXEC`s then claim nothing, and their keys ship
/// whole). A client that disconnects in `MULTI` leaves its notes here until
/// then. As many clients cut short at most: past it, no `EXEC` claims
/// again (a client forgotten there could claim with half its notes).
pub const MAX_QUEUED: usize = 4_096;

thread_local! {
    /// Some `EXEC`'s notes are being claimed: every filtered command reads
    /// it, to end the claims ([`Transactions::exec_done`]).
    static CLAIMING: Cell<bool> = const { Cell::new(false) };
    /// Claims ended with a barrier still ahead: until the flush, no single
    /// note is claimed.
    static INTERRUPTED: Cell<bool> = const { Cell::new(false) };
}

/// Whether the note of the last filtered command may be claimed by an
/// event (not after claims that ended with a barrier ahead, until the
/// flush).
pub fn single_notes_trusted() -> bool {
    !INTERRUPTED.get()
}

/// Claims ended with a barrier ahead: maybe inside the `EXEC` still.
pub fn interrupted() {
    INTERRUPTED.set(true);
}

/// The flush: the `EXEC`s of this event-loop iteration are over.
pub fn iteration_over() {
    INTERRUPTED.set(false);
}

/// Whether a command named `name`, queued in `MULTI` without a note, may
/// still raise an event a note waits for: SMOVE (`srem`, `sadd`), GEOADD
/// (`zadd`), LMOVE, RPOPLPUSH and their blocking forms (`lpush` or
/// `rpush` on the destination), the hash field commands of newer servers, a script or
/// function, or a command this module does not know: a module's (its
/// name holds a dot, or not: Redis 8's vector sets), a renamed one
/// (`rename-command`: a renamed SADD raises `sadd` and leaves no note), a
/// newer server's.
pub fn is_barrier(name: &[u8]) -> bool {
    const NAMES: [&str; 20] = [
        "smove",
        "geoadd",
        "lmove",
        "blmove",
        "rpoplpush",
        "brpoplpush",
        "hsetex",
        "hgetdel",
        "hgetex",
        "hexpire",
        "hpexpire",
        "hexpireat",
        "hpexpireat",
        "hpersist",
        "eval",
        "evalsha",
        "eval_ro",
        "evalsha_ro",
        "fcall",
        "fcall_ro",
    ];
    !crate::capture::command_names::is_known(name)
        || NAMES
            .iter()
            .any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
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

/// Whether a command named `name` ends a transaction (`EXEC`; `DISCARD`
/// and `RESET` drop it).
pub fn ends_transaction(name: &[u8]) -> bool {
    ["exec", "discard", "reset"]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
}

/// A queued command: one a note describes, or a barrier.
#[derive(Debug)]
enum Item<N> {
    Note(Vec<u8>, N),
    Barrier,
}

/// The notes of the `EXEC` running now, in queue order.
#[derive(Debug)]
struct Running<N> {
    items: VecDeque<Item<N>>,
    /// Keys whose events claimed a note.
    claimed: Vec<(u32, Vec<u8>)>,
    /// Keys of notes no event claimed.
    unclaimed: Vec<Vec<u8>>,
    /// An event met a barrier: no later one claims.
    blocked: bool,
}

impl<N> Running<N> {
    /// The items before `at` raised no event: their notes go unclaimed.
    fn skip(&mut self, at: usize) {
        let skipped = self.items.drain(..at).filter_map(|i| match i {
            Item::Note(key, _) => Some(key),
            Item::Barrier => None,
        });
        self.unclaimed.extend(skipped);
    }
}

/// Each client's notes queued in `MULTI` (`N`: what a note says), and
/// those of the `EXEC` running now.
#[derive(Debug)]
pub struct Transactions<N> {
    queued: HashMap<u64, Vec<Item<N>>>,
    queued_len: usize,
    /// Clients whose queued notes the bound dropped: their `EXEC` claims
    /// nothing.
    dropped: HashSet<u64>,
    /// Too many clients were cut short: no `EXEC` claims any more.
    disabled: bool,
    running: Option<Running<N>>,
}

impl<N> Default for Transactions<N> {
    fn default() -> Self {
        Self {
            queued: HashMap::new(),
            queued_len: 0,
            dropped: HashSet::new(),
            disabled: false,
            running: None,
        }
    }
}

impl<N> Transactions<N> {
    /// Client `client`, in `MULTI`, queued a command of `key` that `note`
    /// describes.
    pub fn queue(&mut self, client: u64, key: &[u8], note: N) {
        self.push(client, Item::Note(key.to_vec(), note));
    }

    /// Client `client`, in `MULTI`, queued a command that may raise the
    /// events notes wait for without a note of its own.
    pub fn queue_barrier(&mut self, client: u64) {
        self.push(client, Item::Barrier);
    }

    fn push(&mut self, client: u64, item: Item<N>) {
        if self.disabled || self.dropped.contains(&client) {
            return;
        }
        if self.queued_len >= MAX_QUEUED {
            if self.dropped.len() >= MAX_QUEUED {
                // Clients that disconnected in MULTI, mostly; any of them
                // forgotten could queue again with half its notes.
                self.disabled = true;
                self.queued.clear();
                self.queued_len = 0;
                return;
            }
            self.dropped.extend(self.queued.drain().map(|(c, _)| c));
            self.queued_len = 0;
            if self.dropped.contains(&client) {
                return;
            }
        }
        self.queued.entry(client).or_default().push(item);
        self.queued_len += 1;
    }

    /// Client `client` ends its transaction: with `exec`, its notes are
    /// claimed from now on; else they are dropped. An `EXEC` still being
    /// claimed ends first: the keys it leaves untrusted. The `EXEC` of a
    /// client cut short by the bound claims nothing, and neither does the
    /// single note of a script it runs (see [`single_notes_trusted`]).
    pub fn end_transaction(&mut self, client: u64, exec: bool) -> Vec<(u32, Vec<u8>)> {
        let untrusted = self.exec_done();
        if exec && (self.disabled || self.dropped.contains(&client)) {
            INTERRUPTED.set(true);
        }
        self.dropped.remove(&client);
        let items = self.queued.remove(&client).unwrap_or_default();
        self.queued_len = self.queued_len.saturating_sub(items.len());
        if exec && !items.is_empty() {
            self.running = Some(Running {
                items: items.into(),
                claimed: Vec::new(),
                unclaimed: Vec::new(),
                blocked: false,
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
    /// A barrier before it: this event and every later one claim nothing.
    pub fn claim(&mut self, db: u32, key: &[u8], fits: impl Fn(&N) -> bool) -> Option<N> {
        let exec = self.running.as_mut().filter(|e| !e.blocked)?;
        let at = exec.items.iter().position(|i| match i {
            Item::Note(k, n) => k == key && fits(n),
            Item::Barrier => true,
        })?;
        exec.skip(at);
        let Some(Item::Note(_, note)) = exec.items.pop_front() else {
            exec.blocked = true;
            return None;
        };
        if !exec.claimed.iter().any(|(d, k)| *d == db && k == key) {
            exec.claimed.push((db, key.to_vec()));
        }
        if exec.items.iter().any(|i| matches!(i, Item::Barrier)) {
            // The event may be a barrier's (SMOVE raises `srem` and `sadd`
            // of two keys), the notes' commands before it having raised
            // none: the key is not trusted.
            exec.unclaimed.push(key.to_vec());
        }
        Some(note)
    }

    /// Whether the running `EXEC` holds a barrier, ahead or met: a
    /// filtered command now may be one that a script or module command of
    /// it runs.
    pub fn holds_barrier(&self) -> bool {
        self.running
            .as_ref()
            .is_some_and(|e| e.blocked || e.items.iter().any(|i| matches!(i, Item::Barrier)))
    }

    /// The claims of the running `EXEC` end (the next command came, or the
    /// flush): the keys that claimed a note and have one no event claimed.
    pub fn exec_done(&mut self) -> Vec<(u32, Vec<u8>)> {
        let Some(mut exec) = self.running.take() else {
            return Vec::new();
        };
        let left = exec.items.len();
        exec.skip(left);
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

/// What a command of a client in `MULTI` does to its queued notes.
pub enum Queuing<'a> {
    /// Queued with a note (an increment or an element change: its
    /// arguments, read by each window's [`TransactionWindow::note_of`]).
    Note(Vec<&'a [u8]>),
    /// Queued, a barrier ([`is_barrier`]).
    Barrier,
    /// `EXEC` (`true`), `DISCARD` or `RESET`.
    End(bool),
}

/// A window of merged changes whose commands may be queued in `MULTI`
/// (the increments, the element changes): it says what a queued command's
/// note is and what not trusting a key means; the queueing and claiming
/// are [`Transactions`]'.
pub trait TransactionWindow {
    /// What a note says.
    type Note;

    /// The window's queued notes.
    fn transactions(&mut self) -> &mut Transactions<Self::Note>;

    /// The key and note of a queued command (`args`, the name at 0), if
    /// it is one of this window's.
    fn note_of<'a>(args: &[&'a [u8]]) -> Option<(&'a [u8], Self::Note)>;

    /// The key is not trusted: its change ships whole. Returns whether
    /// the window held a change of it.
    fn distrust(&mut self, key: &(u32, Vec<u8>)) -> bool;

    /// A command of `client` in `MULTI`. Returns the number of keys an
    /// `EXEC` that ended leaves untrusted.
    fn in_transaction(&mut self, client: u64, queuing: &Queuing<'_>) -> u64 {
        match queuing {
            Queuing::Note(args) => {
                if let Some((key, note)) = Self::note_of(args) {
                    self.transactions().queue(client, key, note);
                }
                0
            }
            Queuing::Barrier => {
                self.transactions().queue_barrier(client);
                0
            }
            Queuing::End(exec) => {
                let untrusted = self.transactions().end_transaction(client, *exec);
                self.distrust_all(untrusted)
            }
        }
    }

    /// The claims of the running `EXEC` end (the next command came, or the
    /// flush): a key one of whose queued changes raised no event ships
    /// whole. Returns the number of such keys the window held.
    fn exec_done(&mut self) -> u64 {
        let untrusted = self.transactions().exec_done();
        self.distrust_all(untrusted)
    }

    /// Whether the running `EXEC` holds a barrier.
    fn holds_barrier(&mut self) -> bool {
        self.transactions().holds_barrier()
    }

    /// [`Self::distrust`] of each of `keys`; how many the window held.
    fn distrust_all(&mut self, keys: Vec<(u32, Vec<u8>)>) -> u64 {
        keys.iter().filter(|k| self.distrust(k)).count() as u64
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
    fn queued_notes_are_bounded_and_a_client_cut_short_claims_nothing() {
        let mut t = Transactions::default();
        for _ in 0..MAX_QUEUED {
            t.queue(1, b"a", 1);
        }
        t.queue(2, b"a", 1);
        assert_eq!(t.queued_len(), 1);
        // Client 1 goes on queuing: a part of its transaction would be
        // claimed by events of commands whose notes went.
        t.queue(1, b"b", 2);
        iteration_over();
        t.end_transaction(1, true);
        assert!(!t.is_running(), "client 1 claims nothing");
        assert!(!single_notes_trusted(), "nor a script's note in its EXEC");
        iteration_over();
        t.queue(1, b"b", 2);
        t.end_transaction(1, true);
        assert!(t.is_running(), "its next transaction is noted again");
        t.exec_done();
    }

    #[test]
    fn too_many_clients_cut_short_end_the_claims_for_good() {
        let mut t = Transactions::default();
        // The bound's worth of clients of one note each, dropped by the
        // next; again, and the set of those cut short is full.
        let clients = MAX_QUEUED as u64;
        for client in 0..2 * clients + 1 {
            t.queue(client, b"a", 1);
        }
        t.queue(u64::MAX, b"a", 1);
        iteration_over();
        t.end_transaction(u64::MAX, true);
        assert!(!t.is_running(), "disabled");
        assert!(!single_notes_trusted());
        iteration_over();
    }

    #[test]
    fn no_event_claims_past_a_barrier() {
        let mut t = Transactions::default();
        // MULTI; SADD s x (raises nothing); SMOVE src s m; SADD s y; EXEC:
        // SMOVE's `sadd` claims `x` (it cannot be told from the SADD's),
        // and `s` is not trusted; nothing claims past the barrier.
        t.queue(1, b"s", 1);
        t.queue_barrier(1);
        t.queue(1, b"s", 2);
        t.end_transaction(1, true);
        assert!(t.holds_barrier());
        assert_eq!(t.claim(0, b"s", any), Some(1));
        assert_eq!(t.claim(0, b"s", any), None, "the barrier's, or blocked");
        assert_eq!(t.claim(0, b"s", any), None, "blocked from there on");
        assert!(t.holds_barrier());
        assert_eq!(t.exec_done(), vec![(0, b"s".to_vec())]);
        // An event of another key skips to the barrier and blocks.
        t.queue(1, b"s", 1);
        t.queue_barrier(1);
        t.queue(1, b"t", 2);
        t.end_transaction(1, true);
        assert_eq!(t.claim(0, b"src", any), None);
        assert_eq!(t.claim(0, b"t", any), None, "blocked");
        assert!(t.exec_done().is_empty(), "nothing was claimed");
        // MULTI; SREM s q (nothing); SADD d x (nothing); SMOVE s d m: the
        // SMOVE's `srem s` claims q's note, and s is not trusted although
        // another note stands between.
        t.queue(1, b"s", 1);
        t.queue(1, b"d", 2);
        t.queue_barrier(1);
        t.end_transaction(1, true);
        assert_eq!(t.claim(0, b"s", any), Some(1));
        assert_eq!(t.claim(0, b"d", any), Some(2));
        assert_eq!(
            t.exec_done(),
            vec![(0, b"s".to_vec()), (0, b"d".to_vec())],
            "either event may be the barrier's"
        );
        // Past a barrier nothing is claimed.
        t.queue_barrier(1);
        t.queue(1, b"k", 5);
        t.end_transaction(1, true);
        assert_eq!(t.claim(0, b"x", |_| false), None, "the barrier's event");
        assert!(t.exec_done().is_empty());
        assert!(!t.holds_barrier());
    }

    #[test]
    fn reset_ends_a_transaction_and_the_barriers_are_named() {
        assert!(ends_transaction(b"RESET") && ends_transaction(b"exec"));
        assert!(!ends_transaction(b"multi"));
        for name in ["SMOVE", "geoadd", "EVAL", "fcall_ro", "json.set", "mysadd"] {
            assert!(is_barrier(name.as_bytes()), "{name}");
        }
        for name in ["set", "hset", "get", "del", "expire"] {
            assert!(!is_barrier(name.as_bytes()), "{name}");
        }
    }

    #[test]
    fn single_notes_are_not_trusted_after_interrupted_claims_until_the_flush() {
        assert!(single_notes_trusted());
        interrupted();
        assert!(!single_notes_trusted());
        iteration_over();
        assert!(single_notes_trusted());
    }
}
