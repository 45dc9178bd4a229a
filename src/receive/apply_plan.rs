//! What applying the peer's entries decides, apart from the server: which
//! values go out together in one MSET, what a value that arrived already
//! expired becomes, whether a swap or a set of functions is new, and what
//! each decision counts as. Pure and unit-tested; `apply` runs it.

use hashbrown::HashSet;

use crate::converge::merge::counters::integer_of;
use crate::converge::version::{Decision, KeyVersion, Stamp};
use crate::proto::entry::{Encoding, Entry, Op};

/// String values without expiry, consecutive in a batch and of one
/// database, to be written with one MSET (the same effect as one SET each).
pub(super) struct MsetRun<'a> {
    db: u32,
    /// key, value, key, value, ...
    args: Vec<&'a [u8]>,
    /// Each key's version before it joined the run (its new version is
    /// recorded at once, for the rest of the batch to see): put back for a
    /// key that could not be written.
    before: Vec<Option<KeyVersion>>,
    /// The keys in the run: a key appears at most once (a repeat starts a
    /// new run, so each `before` is the version from outside the run).
    keys: HashSet<&'a [u8]>,
}

/// A run taken out to be written.
pub(super) struct TakenRun<'a> {
    /// Its database.
    pub db: u32,
    /// key, value, key, value, ...
    pub args: Vec<&'a [u8]>,
    /// Each key's version before the run, in key order.
    pub before: Vec<Option<KeyVersion>>,
}

impl<'a> MsetRun<'a> {
    /// Keys per MSET, at most.
    pub const MAX_KEYS: usize = 256;

    /// An empty run.
    pub fn new() -> Self {
        Self {
            db: 0,
            args: Vec::new(),
            before: Vec::new(),
            keys: HashSet::new(),
        }
    }

    /// The key of a string value without expiry: what a run can carry.
    /// Not an integer: MSET's values are the module's strings, which the
    /// server does not encode as integers (`server::set_string` writes
    /// those as a client's SET would).
    pub fn is_plain(e: &Entry) -> Option<&[u8]> {
        match &e.op {
            Op::Value {
                key,
                encoding: Encoding::RawString,
                expiry_ms: None,
                payload,
            } if integer_of(payload).is_none() => Some(key),
            _ => None,
        }
    }

    /// Whether `e` may join the run: a plain string value of the run's
    /// database (or of any database while the run is empty), of a key not
    /// in it yet, with room left.
    pub fn admits(&self, e: &Entry) -> bool {
        let Some(key) = Self::is_plain(e) else {
            return false;
        };
        self.args.is_empty()
            || (self.db == e.db && self.args.len() < 2 * Self::MAX_KEYS && !self.keys.contains(key))
    }

    /// Adds `key` = `value` of database `db`, whose version was `before`.
    pub fn push(&mut self, db: u32, key: &'a [u8], value: &'a [u8], before: Option<KeyVersion>) {
        self.db = db;
        self.args.push(key);
        self.args.push(value);
        self.before.push(before);
        self.keys.insert(key);
    }

    /// The run so far, leaving it empty; `None` when it holds nothing.
    pub fn take(&mut self) -> Option<TakenRun<'a>> {
        if self.args.is_empty() {
            return None;
        }
        self.keys.clear();
        Some(TakenRun {
            db: self.db,
            args: std::mem::take(&mut self.args),
            before: std::mem::take(&mut self.before),
        })
    }
}

/// Whether a value whose absolute expiry is `expiry_ms` was already
/// expired at `now_ms` when applied: RESTORE did not create it, so its
/// version is a delete.
pub(super) fn expired_on_arrival(expiry_ms: Option<u64>, now_ms: u64) -> bool {
    expiry_ms.is_some_and(|at| at <= now_ms)
}

/// A SWAPDB from the peer stamped `stamp`, the newest applied here being
/// `last_applied`: a resent swap at or below it was applied already and
/// must not swap the databases back.
pub(super) fn swap_decision(stamp: Stamp, last_applied: Stamp) -> Decision {
    if stamp <= last_applied {
        Decision::Duplicate
    } else {
        Decision::Apply
    }
}

/// What became of one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Written to Redis.
    Applied,
    /// Older than this node's version: discarded (a conflict lost).
    Discarded,
    /// This node has exactly this version already.
    Duplicate,
    /// An ack or sync request: no data.
    Notice,
    /// A change this node's server cannot hold in a mixed pair (function
    /// libraries one of which it cannot compile): counted and reported,
    /// and, as a format refusal on the writer, not held against the
    /// coverage of the peer's acks (nothing would ever carry it here).
    Refused,
}

impl Outcome {
    /// What a decision makes of an entry (`Apply`: once written).
    pub fn of(decision: Decision) -> Self {
        match decision {
            Decision::Apply => Self::Applied,
            Decision::Stale => Self::Discarded,
            Decision::Duplicate => Self::Duplicate,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(db: u32, key: &str, expiry_ms: Option<u64>, encoding: Encoding) -> Entry {
        Entry {
            origin: 2,
            seq: 1,
            clock: 10,
            db,
            op: Op::Value {
                key: key.as_bytes().to_vec(),
                payload: b"v".to_vec(),
                expiry_ms,
                encoding,
            },
        }
    }

    fn plain(db: u32, key: &str) -> Entry {
        value(db, key, None, Encoding::RawString)
    }

    fn join<'a>(run: &mut MsetRun<'a>, e: &'a Entry) {
        let key = MsetRun::is_plain(e).unwrap();
        run.push(e.db, key, b"v", None);
    }

    #[test]
    fn only_strings_without_expiry_join_a_run() {
        let run = MsetRun::new();
        assert!(run.admits(&plain(0, "a")));
        assert!(!run.admits(&value(0, "a", Some(5), Encoding::RawString)));
        assert!(!run.admits(&value(0, "a", None, Encoding::Dump)));
        let delete = Entry {
            op: Op::Delete { key: b"a".to_vec() },
            ..plain(0, "a")
        };
        assert!(!run.admits(&delete));
        let with = |payload: &[u8]| {
            let mut e = plain(0, "a");
            if let Op::Value { payload: p, .. } = &mut e.op {
                *p = payload.to_vec();
            }
            e
        };
        // The server would encode these as integers: written by a SET each.
        for integer in [&b"0"[..], b"-7", b"12345678901", b"9223372036854775807"] {
            assert!(!run.admits(&with(integer)), "{integer:?}");
        }
        for text in [
            &b"007"[..],
            b"+1",
            b"-0",
            b"1.5",
            b"9223372036854775808",
            b"",
        ] {
            assert!(run.admits(&with(text)), "{text:?}");
        }
    }

    #[test]
    fn a_run_keeps_to_one_database_and_each_key_once() {
        let (a, b, other_db) = (plain(3, "a"), plain(3, "b"), plain(4, "c"));
        let mut run = MsetRun::new();
        // An empty run takes any database.
        assert!(run.admits(&other_db));
        join(&mut run, &a);
        assert!(run.admits(&b));
        assert!(!run.admits(&other_db), "another database ends the run");
        assert!(!run.admits(&plain(3, "a")), "a repeated key ends the run");
    }

    #[test]
    fn a_run_is_full_at_its_limit_and_empty_once_taken() {
        let entries: Vec<Entry> = (0..=MsetRun::MAX_KEYS)
            .map(|i| plain(1, &format!("k{i}")))
            .collect();
        let mut run = MsetRun::new();
        for e in &entries[..MsetRun::MAX_KEYS] {
            assert!(run.admits(e));
            join(&mut run, e);
        }
        assert!(!run.admits(&entries[MsetRun::MAX_KEYS]));
        let taken = run.take().unwrap();
        assert_eq!(taken.db, 1);
        assert_eq!(taken.args.len(), 2 * MsetRun::MAX_KEYS);
        assert_eq!(taken.before.len(), MsetRun::MAX_KEYS);
        assert_eq!(taken.args[0], b"k0");
        assert!(run.take().is_none());
        // Emptied, it takes the keys it held again.
        assert!(run.admits(&entries[0]));
    }

    #[test]
    fn a_value_expired_at_or_before_now_is_a_delete() {
        assert!(!expired_on_arrival(None, 100));
        assert!(!expired_on_arrival(Some(101), 100));
        assert!(expired_on_arrival(Some(100), 100));
        assert!(expired_on_arrival(Some(99), 100));
    }

    #[test]
    fn a_resent_swap_is_a_duplicate() {
        let last = Stamp::new(10, 2);
        assert_eq!(swap_decision(Stamp::new(10, 2), last), Decision::Duplicate);
        assert_eq!(swap_decision(Stamp::new(9, 3), last), Decision::Duplicate);
        assert_eq!(swap_decision(Stamp::new(10, 3), last), Decision::Apply);
        assert_eq!(
            swap_decision(Stamp::new(1, 1), Stamp::ZERO),
            Decision::Apply
        );
    }

    #[test]
    fn each_decision_counts_as_its_outcome() {
        assert_eq!(Outcome::of(Decision::Apply), Outcome::Applied);
        assert_eq!(Outcome::of(Decision::Stale), Outcome::Discarded);
        assert_eq!(Outcome::of(Decision::Duplicate), Outcome::Duplicate);
    }
}
