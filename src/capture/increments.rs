//! Which keys a flush finds only incremented, and by how much (issue 27's
//! counters, with `merge-counters`).
//!
//! The command filter sees `INCR`, `DECR`, `INCRBY` and `DECRBY` with their
//! arguments just before each runs and notes the key and delta; the
//! keyspace event `incrby` that the command raises once it took effect
//! claims that note. A note no event claims (a failed command) is dropped
//! by the next filtered command.
//!
//! In `MULTI` the filter sees each command when it is queued, not when it
//! runs. Where the server names the filtered command's client (Redis 7.2
//! and later, Valkey), the increments a client queues wait for its `EXEC`
//! (`DISCARD` drops them); the `incrby` events of that `EXEC` claim them in
//! queue order, skipping those that raised none (they failed). A key one of
//! whose queued increments failed is not trusted with a sum: the note an
//! event claimed may have been the failed one, so the key ships as a set.
//!
//! An event with no note (a transaction on Redis 7.0, whose filter does
//! not name the client), or any other write of the key since the last
//! flush, makes the key's change a plain write: a set of the value it
//! holds, which still keeps every increment made elsewhere that it had not
//! seen.
//!
//! Records only; never writes, never blocks.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};

use hashbrown::HashMap;

/// `merge-counters`, set at load.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether increments are recorded (`merge-counters`).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Sets `merge-counters` (at load).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

thread_local! {
    /// The increment the last filtered command will make, if it is one.
    static NOTED: RefCell<Option<(Vec<u8>, i64)>> = const { RefCell::new(None) };
    static HAS_NOTE: Cell<bool> = const { Cell::new(false) };
    /// An `EXEC`'s queued increments are being claimed (mirrors
    /// `IncrementWindow::running`, read by every filtered command).
    static EXEC_RUNNING: Cell<bool> = const { Cell::new(false) };
}

/// Whether an `EXEC`'s queued increments are being claimed: the next
/// command ends it ([`IncrementWindow::exec_done`]).
pub fn exec_running() -> bool {
    EXEC_RUNNING.get()
}

/// The key and delta of `INCR`, `DECR`, `INCRBY`, `DECRBY` (`args`, the
/// name at 0); `None` for anything else or a malformed call.
pub fn increment_of<'a>(args: &[&'a [u8]]) -> Option<(&'a [u8], i64)> {
    let name = args.first()?;
    let is = |s: &str| name.eq_ignore_ascii_case(s.as_bytes());
    let by = || -> Option<i64> { std::str::from_utf8(args.get(2)?).ok()?.parse().ok() };
    let delta = match args.len() {
        2 if is("incr") => 1,
        2 if is("decr") => -1,
        3 if is("incrby") => by()?,
        3 if is("decrby") => by()?.checked_neg()?,
        _ => return None,
    };
    Some((args[1], delta))
}

/// Whether a command named `name` may be an increment (checked before its
/// arguments are read).
pub fn may_increment(name: &[u8]) -> bool {
    let is = |s: &str| name.eq_ignore_ascii_case(s.as_bytes());
    matches!(name.len(), 4 | 6) && (is("incr") || is("decr") || is("incrby") || is("decrby"))
}

/// The filter saw `args`: notes the increment it will make, or drops an
/// older note no event claimed.
pub fn filtered(args: Option<&[&[u8]]>) {
    let noted = args.and_then(increment_of);
    if noted.is_none() && !HAS_NOTE.get() {
        return;
    }
    HAS_NOTE.set(noted.is_some());
    NOTED.with(|n| *n.borrow_mut() = noted.map(|(k, d)| (k.to_vec(), d)));
}

/// Claims the note for `key`, if the last filtered command was its
/// increment.
fn claim(key: &[u8]) -> Option<i64> {
    if !HAS_NOTE.get() {
        return None;
    }
    HAS_NOTE.set(false);
    NOTED
        .with(|n| n.borrow_mut().take())
        .filter(|(k, _)| k == key)
        .map(|(_, d)| d)
}

/// Whether a command named `name` ends a transaction (`EXEC`, `DISCARD`):
/// the increments its client queued run now, or never.
pub fn ends_transaction(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"exec") || name.eq_ignore_ascii_case(b"discard")
}

/// Increments queued in `MULTI`, of all clients, kept at most: past it they
/// are all dropped (their `EXEC`s then ship sets, counted). A client that
/// disconnects in `MULTI` leaves its notes here until then.
const MAX_QUEUED: usize = 4_096;

/// The increments of the `EXEC` running now, in queue order.
#[derive(Debug, Default)]
struct RunningExec {
    notes: std::collections::VecDeque<(Vec<u8>, i64)>,
    /// Keys whose `incrby` event claimed a note.
    claimed: Vec<(u32, Vec<u8>)>,
    /// Keys of notes no event claimed: their commands failed.
    failed: Vec<Vec<u8>>,
}

/// Per key changed since the last flush and only incremented: the sum.
/// Also the increments queued in `MULTI`, per client, and those of the
/// `EXEC` running now.
#[derive(Debug, Default)]
pub struct IncrementWindow {
    sums: HashMap<(u32, Vec<u8>), i128>,
    queued: HashMap<u64, Vec<(Vec<u8>, i64)>>,
    queued_len: usize,
    running: Option<RunningExec>,
}

impl IncrementWindow {
    /// A write event on `key` of `db`, before the dirty set marks it
    /// (`already_dirty`: it was changed before in this window, or rests).
    /// Returns whether it was an increment whose delta the filter did not
    /// note (in a transaction or script): it ships as a set, counted.
    pub fn event(&mut self, db: u32, key: &[u8], event: &[u8], already_dirty: bool) -> bool {
        let incrby = event == b"incrby";
        let delta = match (incrby, self.running.as_mut()) {
            (false, _) => None,
            (true, Some(exec)) => exec.claim(db, key),
            (true, None) => claim(key),
        };
        self.record(db, key, delta, already_dirty);
        incrby && delta.is_none()
    }

    /// [`Self::event`] with the claimed delta (`None`: not an increment).
    fn record(&mut self, db: u32, key: &[u8], delta: Option<i64>, already_dirty: bool) {
        if self.sums.is_empty() && (delta.is_none() || already_dirty) {
            return;
        }
        let k = (db, key.to_vec());
        match (delta, self.sums.get_mut(&k)) {
            (Some(d), Some(sum)) => *sum = sum.saturating_add(i128::from(d)),
            (Some(d), None) if !already_dirty => {
                self.sums.insert(k, i128::from(d));
            }
            (_, Some(_)) => {
                self.sums.remove(&k);
            }
            (_, None) => {}
        }
    }

    /// The sum of `key`'s increments since the last flush, if it was only
    /// incremented; forgets the key.
    pub fn take(&mut self, db: u32, key: &[u8]) -> Option<i128> {
        if self.sums.is_empty() {
            return None;
        }
        self.sums.remove(&(db, key.to_vec()))
    }

    /// Forgets everything (a flush of the databases, a load).
    pub fn clear(&mut self) {
        self.sums.clear();
    }

    /// Client `client`, in `MULTI`, queued `args` (an increment, as
    /// [`increment_of`] reads it).
    pub fn queue(&mut self, client: u64, args: &[&[u8]]) {
        let Some((key, delta)) = increment_of(args) else {
            return;
        };
        if self.queued_len >= MAX_QUEUED {
            self.queued.clear();
            self.queued_len = 0;
        }
        self.queued
            .entry(client)
            .or_default()
            .push((key.to_vec(), delta));
        self.queued_len += 1;
    }

    /// Client `client` ends its transaction: `exec`, its queued increments
    /// run now (the events that follow claim them); else they are dropped.
    /// An `EXEC` still running ends first.
    pub fn end_transaction(&mut self, client: u64, exec: bool) -> u64 {
        let untrusted = self.exec_done();
        let notes = self.queued.remove(&client).unwrap_or_default();
        self.queued_len = self.queued_len.saturating_sub(notes.len());
        if exec && !notes.is_empty() {
            self.running = Some(RunningExec {
                notes: notes.into(),
                ..RunningExec::default()
            });
            EXEC_RUNNING.set(true);
        }
        untrusted
    }

    /// The running `EXEC` is over (the next command came, or the flush):
    /// a key one of whose queued increments failed ships as a set. Returns
    /// the number of such keys that had a sum.
    pub fn exec_done(&mut self) -> u64 {
        EXEC_RUNNING.set(false);
        let Some(mut exec) = self.running.take() else {
            return 0;
        };
        exec.failed.extend(exec.notes.drain(..).map(|(k, _)| k));
        let mut untrusted = 0;
        for (db, key) in exec.claimed {
            if exec.failed.contains(&key) && self.sums.remove(&(db, key)).is_some() {
                untrusted += 1;
            }
        }
        untrusted
    }
}

impl RunningExec {
    /// The first queued increment of `key` not yet claimed: the notes
    /// before it belong to commands that ran before it and raised no event.
    fn claim(&mut self, db: u32, key: &[u8]) -> Option<i64> {
        let at = self.notes.iter().position(|(k, _)| k == key)?;
        self.failed.extend(self.notes.drain(..at).map(|(k, _)| k));
        let (_, delta) = self.notes.pop_front()?;
        if !self.claimed.iter().any(|(d, k)| *d == db && k == key) {
            self.claimed.push((db, key.to_vec()));
        }
        Some(delta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<&[u8]> {
        line.split(' ').map(str::as_bytes).collect()
    }

    #[test]
    fn the_increment_commands_name_key_and_delta() {
        assert_eq!(increment_of(&args("INCR k")), Some((&b"k"[..], 1)));
        assert_eq!(increment_of(&args("decr k")), Some((&b"k"[..], -1)));
        assert_eq!(increment_of(&args("incrby k -5")), Some((&b"k"[..], -5)));
        assert_eq!(increment_of(&args("DECRBY k 7")), Some((&b"k"[..], -7)));
        for bad in [
            "incr",
            "incr a b",
            "incrby k x",
            "decrby k -9223372036854775808",
            "get k",
        ] {
            assert_eq!(increment_of(&args(bad)), None, "{bad}");
        }
        assert!(may_increment(b"INCRBY") && !may_increment(b"incrbyfloat"));
    }

    #[test]
    fn a_note_is_claimed_once_by_its_own_key() {
        filtered(Some(&args("incrby k 5")));
        assert_eq!(claim(b"other"), None);
        assert_eq!(claim(b"k"), None, "a claim by another key drops it");
        filtered(Some(&args("incr k")));
        filtered(Some(&args("get k")));
        assert_eq!(claim(b"k"), None, "a later command drops it");
        filtered(Some(&args("incr k")));
        assert_eq!(claim(b"k"), Some(1));
        assert_eq!(claim(b"k"), None);
    }

    #[test]
    fn increments_queued_in_multi_are_claimed_at_their_exec_in_order() {
        let mut w = IncrementWindow::default();
        w.queue(7, &args("incrby a 2"));
        w.queue(8, &args("incrby a 100"));
        w.queue(7, &args("decr b"));
        w.queue(7, &args("incrby a 3"));
        assert_eq!(w.end_transaction(8, false), 0, "client 8 discards");
        assert_eq!(w.end_transaction(7, true), 0);
        assert!(exec_running());
        assert!(!w.event(0, b"a", b"incrby", false));
        assert!(!w.event(0, b"b", b"incrby", false));
        assert!(!w.event(0, b"a", b"incrby", true));
        assert_eq!(w.exec_done(), 0);
        assert!(!exec_running());
        assert_eq!(w.take(0, b"a"), Some(5));
        assert_eq!(w.take(0, b"b"), Some(-1));
        // Client 8's were dropped: its EXEC claims nothing.
        w.end_transaction(8, true);
        assert!(!exec_running());
        assert!(w.event(0, b"a", b"incrby", false), "unpaired: a set");
    }

    #[test]
    fn a_key_with_a_failed_queued_increment_ships_as_a_set() {
        let mut w = IncrementWindow::default();
        // `incrby a 5` fails (no event), `incrby a 7` runs: the event
        // claims 5, so `a` is not trusted with a sum.
        w.queue(1, &args("incrby a 5"));
        w.queue(1, &args("incrby a 7"));
        w.queue(1, &args("incr b"));
        w.end_transaction(1, true);
        w.event(0, b"a", b"incrby", false);
        w.event(0, b"b", b"incrby", false);
        assert_eq!(w.exec_done(), 1);
        assert_eq!(w.take(0, b"a"), None);
        assert_eq!(w.take(0, b"b"), Some(1), "b's note was skipped, not failed");
        // One that fails after another key's event is skipped as failed.
        w.queue(1, &args("incr c"));
        w.queue(1, &args("incr d"));
        w.end_transaction(1, true);
        w.event(0, b"d", b"incrby", false);
        assert_eq!(w.exec_done(), 0, "c had no sum to distrust");
        assert_eq!(w.take(0, b"d"), Some(1));
        // The next transaction ends the running one.
        w.queue(1, &args("incrby e 4"));
        w.queue(2, &args("incrby e 9"));
        w.end_transaction(1, true);
        w.event(0, b"e", b"incrby", false);
        assert_eq!(w.end_transaction(2, true), 0);
        w.event(0, b"e", b"incrby", true);
        w.exec_done();
        assert_eq!(w.take(0, b"e"), Some(13));
    }

    #[test]
    fn queued_increments_are_bounded() {
        let mut w = IncrementWindow::default();
        for _ in 0..MAX_QUEUED {
            w.queue(1, &args("incr a"));
        }
        w.queue(2, &args("incr a"));
        assert_eq!(w.queued_len, 1);
        w.end_transaction(1, true);
        assert!(!exec_running(), "client 1's notes went");
    }

    #[test]
    fn only_a_key_incremented_from_the_start_of_the_window_keeps_a_sum() {
        let mut w = IncrementWindow::default();
        w.record(0, b"a", Some(2), false);
        w.record(0, b"a", Some(3), true);
        w.record(0, b"b", Some(1), true);
        w.record(0, b"c", Some(1), false);
        w.record(0, b"c", None, true);
        w.record(1, b"a", Some(7), false);
        assert_eq!(w.take(0, b"a"), Some(5));
        assert_eq!(w.take(0, b"a"), None);
        assert_eq!(w.take(0, b"b"), None, "written before its increment");
        assert_eq!(w.take(0, b"c"), None, "written after its increment");
        assert_eq!(w.take(1, b"a"), Some(7));
    }
}
