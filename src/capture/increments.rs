//! Which keys a flush finds only incremented, and by how much (issue 27's
//! counters, with `merge-counters`).
//!
//! The command filter sees `INCR`, `DECR`, `INCRBY` and `DECRBY` with their
//! arguments just before each runs and notes the key and delta; the
//! keyspace event `incrby` that the command raises once it took effect
//! claims that note. A note no event claims (a failed command) is dropped
//! by the next filtered command.
//!
//! In `MULTI`, where the server names the filtered command's client, the
//! notes wait for the client's `EXEC`, whose events claim them
//! (`capture::transactions`): a key one of whose queued increments raised
//! no event ships as a set.
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

use crate::capture::transactions::{TransactionWindow, Transactions};

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
    if !crate::capture::transactions::single_notes_trusted() {
        NOTED.with(|n| n.borrow_mut().take());
        return None;
    }
    NOTED
        .with(|n| n.borrow_mut().take())
        .filter(|(k, _)| k == key)
        .map(|(_, d)| d)
}

/// Per key changed since the last flush and only incremented: the sum.
/// Also the increments queued in `MULTI`, per client, and those of the
/// `EXEC` running now.
#[derive(Debug, Default)]
pub struct IncrementWindow {
    sums: HashMap<(u32, Vec<u8>), i128>,
    transactions: Transactions<i64>,
}

impl IncrementWindow {
    /// A write event on `key` of `db`, before the dirty set marks it
    /// (`already_dirty`: it was changed before in this window, or rests).
    /// Returns whether it was an increment whose delta the filter did not
    /// note (in a transaction or script): it ships as a set, counted.
    pub fn event(&mut self, db: u32, key: &[u8], event: &[u8], already_dirty: bool) -> bool {
        let incrby = event == b"incrby";
        let delta = match incrby {
            false => None,
            true if self.transactions.is_running() => self.transactions.claim(db, key, |_| true),
            true => claim(key),
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
}

/// Increments queued in `MULTI`: a key not trusted ships as a set.
impl TransactionWindow for IncrementWindow {
    type Note = i64;

    fn transactions(&mut self) -> &mut Transactions<i64> {
        &mut self.transactions
    }

    fn note_of<'a>(args: &[&'a [u8]]) -> Option<(&'a [u8], i64)> {
        increment_of(args)
    }

    fn distrust(&mut self, key: &(u32, Vec<u8>)) -> bool {
        self.sums.remove(key).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::transactions::Queuing;

    fn args(line: &str) -> Vec<&[u8]> {
        line.split(' ').map(str::as_bytes).collect()
    }

    /// Client `client`, in `MULTI`, queues `line`.
    fn queue(w: &mut IncrementWindow, client: u64, line: &str) {
        assert_eq!(w.in_transaction(client, &Queuing::Note(args(line))), 0);
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
    fn increments_queued_in_multi_add_up_at_their_exec() {
        let mut w = IncrementWindow::default();
        queue(&mut w, 7, "incrby a 2");
        queue(&mut w, 7, "decr b");
        queue(&mut w, 7, "get a");
        queue(&mut w, 7, "incrby a 3");
        assert_eq!(w.in_transaction(7, &Queuing::End(true)), 0);
        assert!(!w.event(0, b"a", b"incrby", false));
        assert!(!w.event(0, b"b", b"incrby", false));
        assert!(!w.event(0, b"a", b"incrby", true));
        assert_eq!(w.exec_done(), 0);
        assert_eq!(w.take(0, b"a"), Some(5));
        assert_eq!(w.take(0, b"b"), Some(-1));
        assert!(
            w.event(0, b"a", b"incrby", false),
            "no EXEC: unpaired, a set"
        );
    }

    #[test]
    fn a_key_with_a_failed_queued_increment_ships_as_a_set() {
        let mut w = IncrementWindow::default();
        // `incrby a 5` fails (no event), `incrby a 7` runs: the event
        // claims 5, so `a` is not trusted with a sum.
        queue(&mut w, 1, "incrby a 5");
        queue(&mut w, 1, "incrby a 7");
        queue(&mut w, 1, "incr b");
        w.in_transaction(1, &Queuing::End(true));
        w.event(0, b"a", b"incrby", false);
        w.event(0, b"b", b"incrby", false);
        assert_eq!(w.exec_done(), 1);
        assert_eq!(w.take(0, b"a"), None);
        assert_eq!(w.take(0, b"b"), Some(1));
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
