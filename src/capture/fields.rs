//! Which hashes, sets, sorted sets and lists a flush finds changed only element by
//! element, and which elements (issue 27, with `merge-elements`).
//!
//! The command filter sees `HSET`, `HMSET`, `HSETNX`, `HDEL`, `HINCRBY`,
//! `HINCRBYFLOAT`, `SADD`, `SREM`, `ZADD`, `ZINCRBY`, `ZREM`, `LPUSH`,
//! `LPUSHX`, `RPUSH` and `RPUSHX` with their arguments just before each
//! runs and notes the key and elements (a push's: the values it pushes);
//! the keyspace event the command raises once it took effect (`hset`,
//! `hdel`, `hincrby`, `hincrbyfloat`, `sadd`, `srem`, `zadd`, `zincr`,
//! `zrem`, `lpush`, `rpush`) claims that note. A pop is not noted yet (a
//! popped list is written whole): [`pop_of`] and [`list_notes`] are what
//! `converge::merge::list_flush` will take once pops are on the data
//! path. A note no event claims (a failed command, `HSETNX` of
//! a field that exists, one queued in `MULTI`) is dropped by the next
//! filtered command. What a set's command left is known from the command
//! (`SADD`: present, `SREM`: absent); a field's value or a score is read at
//! the flush. An `expire` or `persist` event (EXPIRE, PEXPIRE, EXPIREAT,
//! PEXPIREAT, PERSIST) is a write of the key's TTL alone: it joins the
//! key's element changes instead of making them whole.
//! In `MULTI`, where the server names the filtered command's client, the
//! notes wait for the client's `EXEC`, whose events claim them
//! (`capture::transactions`).
//! An event with no note (a transaction on Redis 7.0, whose filter does
//! not name the client), or any other write of the key since the last
//! flush, makes the key's change a write of the whole key, which still
//! keeps every field written elsewhere that it had not seen.
//!
//! Records only; never writes, never blocks.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};

use hashbrown::HashMap;

use crate::capture::transactions::{TransactionWindow, Transactions};
use crate::converge::merge::counters::integer_of;
use crate::converge::merge::hashes::Kind;
use crate::converge::merge::list_flush::ListNote;
use crate::converge::merge::lists::End;

/// `merge-elements`, set at load.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether element changes are recorded (`merge-elements`).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Sets `merge-elements` (at load).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// What an element holds after a command that changed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Post {
    /// Its value is read at the flush (a field, a score).
    Read,
    /// A set's member, added.
    Present,
    /// Removed.
    Absent,
    /// Incremented by an integer (`HINCRBY`, `ZINCRBY`), its value read at
    /// the flush.
    Incr(i128),
    /// A list's element pushed at the head (`LPUSH`, `LPUSHX`).
    PushLeft,
    /// A list's element pushed at the tail (`RPUSH`, `RPUSHX`).
    PushRight,
    /// Up to this many elements popped at a list's head (`LPOP`); noted
    /// as one element with no name.
    PopLeft(u64),
    /// Up to this many elements popped at a list's tail (`RPOP`).
    PopRight(u64),
}

impl Post {
    /// What two changes of one element in a row leave: increments add up;
    /// an increment after another change is a write of what it left; any
    /// other change replaces what came before.
    fn then(self, next: Post) -> Post {
        match (self, next) {
            (Post::Incr(a), Post::Incr(b)) => a.checked_add(b).map_or(Post::Read, Post::Incr),
            (_, Post::Incr(_)) => Post::Read,
            (_, next) => next,
        }
    }
}

/// An increment of a score that is an integer a double holds exactly
/// (`ZINCRBY 5 m`); others are writes of the score they leave.
fn integral_score_delta(arg: &[u8]) -> Option<i128> {
    let x: f64 = std::str::from_utf8(arg).ok()?.trim().parse().ok()?;
    crate::converge::merge::hashes::integral(x)
}

/// The elements a filtered command will change, and the event that says it
/// did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldChange<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The elements, as named (maybe twice).
    pub fields: Vec<&'a [u8]>,
    /// The keyspace event the command raises.
    pub event: &'static [u8],
    /// What each element holds after it.
    pub post: Post,
    /// Some element it names may be left as it was and still ship as
    /// written (a conditional `ZADD` of several members: the event says
    /// that one changed, not which).
    pub inexact: bool,
}

/// A noted change: key, elements, the event that will claim it, what the
/// elements hold after it, whether it is inexact.
type Note = (Vec<u8>, Vec<Vec<u8>>, &'static [u8], Post, bool);

/// A note queued in `MULTI`: a [`Note`] without its key.
type QueuedNote = (Vec<Vec<u8>>, &'static [u8], Post, bool);

thread_local! {
    /// The last filtered command's change.
    static NOTED: RefCell<Option<Note>> = const { RefCell::new(None) };
    static HAS_NOTE: Cell<bool> = const { Cell::new(false) };
}

/// A command's elements, the event it raises, what it leaves.
type Elements<'a> = (Vec<&'a [u8]>, &'static [u8], Post);

/// The key and elements a hash, set or sorted-set command changes (`args`,
/// the name at 0); `None` for anything else or a malformed call.
pub fn change_of<'a>(args: &[&'a [u8]]) -> Option<FieldChange<'a>> {
    let name = args.first()?;
    let is = |s: &str| name.eq_ignore_ascii_case(s.as_bytes());
    let n = args.len();
    let elements = |from: usize| args.get(from..).map(<[_]>::to_vec);
    let mut inexact = false;
    let (fields, event, post): Elements =
        if (is("hset") || is("hmset")) && n >= 4 && n.is_multiple_of(2) {
            let fields = args[2..].iter().step_by(2).copied().collect();
            (fields, b"hset", Post::Read)
        } else if is("hsetnx") && n == 4 {
            (vec![args[2]], b"hset", Post::Read)
        } else if is("hdel") && n >= 3 {
            (elements(2)?, b"hdel", Post::Absent)
        } else if is("hincrby") && n == 4 {
            let post = integer_of(args[3]).map_or(Post::Read, Post::Incr);
            (vec![args[2]], b"hincrby", post)
        } else if is("hincrbyfloat") && n == 4 {
            (vec![args[2]], b"hincrbyfloat", Post::Read)
        } else if (is("lpush") || is("lpushx")) && n >= 3 {
            (elements(2)?, b"lpush", Post::PushLeft)
        } else if (is("rpush") || is("rpushx")) && n >= 3 {
            (elements(2)?, b"rpush", Post::PushRight)
        } else if is("sadd") && n >= 3 {
            (elements(2)?, b"sadd", Post::Present)
        } else if is("srem") && n >= 3 {
            (elements(2)?, b"srem", Post::Absent)
        } else if is("zrem") && n >= 3 {
            (elements(2)?, b"zrem", Post::Absent)
        } else if is("zincrby") && n == 4 {
            let post = integral_score_delta(args[2]).map_or(Post::Read, Post::Incr);
            (vec![args[3]], b"zincr", post)
        } else if is("zadd") && n >= 4 {
            let (elements, conditional) = zadd_members(&args[2..])?;
            inexact = conditional && elements.0.len() > 1;
            elements
        } else {
            return None;
        };
    Some(FieldChange {
        key: args[1],
        fields,
        event,
        post,
        inexact,
    })
}

/// The pop `LPOP` or `RPOP` (`args`, the name at 0) will make: its key,
/// one element with no name, the event it raises and its count; `None`
/// for anything else or a malformed call. Not noted on the data path yet
/// (`change_of` leaves pops out, so a popped list is written whole):
/// noted, a pop in `MULTI` that raises no event (an empty list, a count
/// of 0) would leave its key's notes unclaimed and the key written whole.
pub fn pop_of<'a>(args: &[&'a [u8]]) -> Option<FieldChange<'a>> {
    let name = args.first()?;
    let left = name.eq_ignore_ascii_case(b"lpop");
    if !(left || name.eq_ignore_ascii_case(b"rpop")) || !(2..=3).contains(&args.len()) {
        return None;
    }
    let count = match args.get(2) {
        None => 1,
        Some(count) => u64::try_from(integer_of(count)?).ok()?,
    };
    let (event, post): (&'static [u8], Post) = if left {
        (b"lpop", Post::PopLeft(count))
    } else {
        (b"rpop", Post::PopRight(count))
    };
    Some(FieldChange {
        key: args[1],
        fields: vec![&b""[..]],
        event,
        post,
        inexact: false,
    })
}

/// `ZADD`'s members, event and whether it is conditional (NX, XX, GT, LT)
/// from what follows the key: its options, then score and member pairs.
fn zadd_members<'a>(rest: &[&'a [u8]]) -> Option<(Elements<'a>, bool)> {
    let options = ["nx", "xx", "gt", "lt", "ch", "incr"];
    let is_option = |a: &[u8]| options.iter().any(|o| a.eq_ignore_ascii_case(o.as_bytes()));
    let given = rest.iter().take_while(|a| is_option(a)).count();
    let has = |o: &[u8]| rest[..given].iter().any(|a| a.eq_ignore_ascii_case(o));
    let incr = has(b"incr");
    let conditional = [&b"nx"[..], b"xx", b"gt", b"lt"].iter().any(|o| has(o));
    let pairs = &rest[given..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return None;
    }
    let members = pairs.iter().skip(1).step_by(2).copied().collect();
    if incr {
        // One member (the server refuses more): an increment when it took
        // effect (a condition that fails raises no event).
        let post = integral_score_delta(pairs[0]).map_or(Post::Read, Post::Incr);
        return Some(((members, b"zincr", post), conditional));
    }
    Some(((members, b"zadd", Post::Read), conditional))
}

/// Whether a command named `name` may change elements of a hash, set or
/// sorted set (checked before its arguments are read).
pub fn may_change_fields(name: &[u8]) -> bool {
    const NAMES: [&str; 15] = [
        "lpush",
        "lpushx",
        "rpush",
        "rpushx",
        "hset",
        "hmset",
        "hsetnx",
        "hdel",
        "hincrby",
        "hincrbyfloat",
        "sadd",
        "srem",
        "zadd",
        "zincrby",
        "zrem",
    ];
    (4..=12).contains(&name.len())
        && matches!(
            name[0],
            b'h' | b'H' | b's' | b'S' | b'z' | b'Z' | b'l' | b'L' | b'r' | b'R'
        )
        && NAMES
            .iter()
            .any(|c| name.eq_ignore_ascii_case(c.as_bytes()))
}

/// The filter saw `args`: notes the fields it will change, or drops an
/// older note no event claimed.
pub fn filtered(args: Option<&[&[u8]]>) {
    let noted = args.and_then(change_of);
    if noted.is_none() && !HAS_NOTE.get() {
        return;
    }
    HAS_NOTE.set(noted.is_some());
    let owned = noted.map(|c| {
        let fields = c.fields.iter().map(|f| f.to_vec()).collect();
        (c.key.to_vec(), fields, c.event, c.post, c.inexact)
    });
    NOTED.with(|n| *n.borrow_mut() = owned);
}

/// Claims the note for `key` and `event`, if the last filtered command
/// changed those elements: each with what it holds after, and whether the
/// note is inexact.
fn claim(key: &[u8], event: &[u8]) -> Option<(Changed, bool)> {
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
        .filter(|(k, _, e, _, _)| k == key && *e == event)
        .map(|(_, fields, _, post, inexact)| {
            (fields.into_iter().map(|f| (f, post)).collect(), inexact)
        })
}

/// The merged type an element event is of; `None` for other events.
fn kind_of_event(event: &[u8]) -> Option<Kind> {
    match event {
        b"hset" | b"hdel" | b"hincrby" | b"hincrbyfloat" => Some(Kind::Hash),
        b"sadd" | b"srem" => Some(Kind::Set),
        b"zadd" | b"zincr" | b"zrem" => Some(Kind::SortedSet),
        b"lpush" | b"rpush" => Some(Kind::List),
        _ => None,
    }
}

/// A list's noted changes (in the order made) as the flush replays them
/// (`converge::merge::list_flush`): each push command's values, each
/// pop's count; `None` when one is not a push or pop.
pub fn list_notes(changed: &[(Vec<u8>, Post)]) -> Option<Vec<ListNote>> {
    let mut notes: Vec<ListNote> = Vec::new();
    for (value, post) in changed {
        let note = match *post {
            Post::PushLeft => ListNote::Push(End::Left, vec![value.clone()]),
            Post::PushRight => ListNote::Push(End::Right, vec![value.clone()]),
            Post::PopLeft(count) => ListNote::Pop(End::Left, usize::try_from(count).ok()?),
            Post::PopRight(count) => ListNote::Pop(End::Right, usize::try_from(count).ok()?),
            _ => return None,
        };
        match (notes.last_mut(), note) {
            (Some(ListNote::Push(end, values)), ListNote::Push(next, more)) if *end == next => {
                values.extend(more);
            }
            (_, note) => notes.push(note),
        }
    }
    Some(notes)
}

/// Elements changed, each with what the change left, in order.
type Changed = Vec<(Vec<u8>, Post)>;

/// Whether an event writes the key's TTL alone.
fn writes_ttl(event: &[u8]) -> bool {
    matches!(event, b"expire" | b"persist")
}

/// A key's changes since the last flush.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Changes {
    /// Its type, if an element changed (a TTL alone does not say).
    pub kind: Option<Kind>,
    /// The elements changed, each once with what its last change left.
    pub changed: Changed,
    /// Its TTL was written (EXPIRE, PEXPIRE..., PERSIST).
    pub ttl: bool,
}

/// Per key changed since the last flush only element by element (and in
/// its TTL): what changed.
#[derive(Debug, Default)]
pub struct FieldWindow {
    keys: HashMap<(u32, Vec<u8>), Changes>,
    transactions: Transactions<QueuedNote>,
}

impl FieldWindow {
    /// A write event on `key` of `db`, before the dirty set marks it
    /// (`already_dirty`: it was changed before in this window, or rests);
    /// whether it claimed an inexact note (counted as a fall-back).
    pub fn event(&mut self, db: u32, key: &[u8], event: &[u8], already_dirty: bool) -> bool {
        let kind = kind_of_event(event);
        let claimed = match kind {
            None => None,
            Some(_) if self.transactions.is_running() => self
                .transactions
                .claim(db, key, |n| n.1 == event)
                .map(|(fields, _, post, inexact)| {
                    (fields.into_iter().map(|f| (f, post)).collect(), inexact)
                }),
            Some(_) => claim(key, event),
        };
        let (fields, inexact) = match claimed {
            Some((fields, inexact)) => (Some(fields), inexact),
            None => (None, false),
        };
        let ttl = writes_ttl(event);
        let noted = fields.is_some() || ttl;
        if self.keys.is_empty() && (!noted || already_dirty) {
            return inexact;
        }
        let k = (db, key.to_vec());
        let fresh = || Changes {
            kind,
            changed: fields.clone().unwrap_or_default(),
            ttl,
        };
        match self.keys.get_mut(&k) {
            // Not dirty: what the window held of the key is stale (the
            // dirty set was dropped without it).
            _ if noted && !already_dirty => {
                self.keys.insert(k, fresh());
            }
            Some(held) if noted && kind.is_none_or(|k| held.kind.is_none_or(|h| h == k)) => {
                held.kind = held.kind.or(kind);
                held.changed.extend(fields.unwrap_or_default());
                held.ttl |= ttl;
            }
            Some(_) => {
                self.keys.remove(&k);
            }
            None => {}
        }
        inexact
    }

    /// What changed of `key` since the last flush, each element once with
    /// what its changes left (see `Post::then`), if it changed only element by element
    /// (and in its TTL); forgets the key.
    pub fn take(&mut self, db: u32, key: &[u8]) -> Option<Changes> {
        if self.keys.is_empty() {
            return None;
        }
        let mut changes = self.keys.remove(&(db, key.to_vec()))?;
        if changes.kind == Some(Kind::List) {
            // Pushes, in the order they were made.
            return Some(changes);
        }
        // By name, each name's changes in their order (a stable sort).
        changes.changed.sort_by(|a, b| a.0.cmp(&b.0));
        changes.changed.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1 = kept.1.then(later.1);
            }
            same
        });
        Some(changes)
    }

    /// Forgets `key`: it changed in a way no event says (a command the
    /// module marks itself, `capture::silent`), so its change is not one
    /// of elements or of its TTL alone.
    pub fn forget(&mut self, db: u32, key: &[u8]) {
        if !self.keys.is_empty() {
            self.keys.remove(&(db, key.to_vec()));
        }
    }

    /// Forgets every key (a flush of the data, a swap of databases).
    pub fn clear(&mut self) {
        self.keys.clear();
    }
}

/// Element changes queued in `MULTI`: a key not trusted is written whole.
impl TransactionWindow for FieldWindow {
    type Note = QueuedNote;

    fn transactions(&mut self) -> &mut Transactions<QueuedNote> {
        &mut self.transactions
    }

    fn note_of<'a>(args: &[&'a [u8]]) -> Option<(&'a [u8], QueuedNote)> {
        let c = change_of(args)?;
        let fields = c.fields.iter().map(|f| f.to_vec()).collect();
        Some((c.key, (fields, c.event, c.post, c.inexact)))
    }

    fn distrust(&mut self, key: &(u32, Vec<u8>)) -> bool {
        self.keys.remove(key).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &str) -> Vec<&[u8]> {
        words.split(' ').map(str::as_bytes).collect()
    }

    fn changes(kind: Kind, changed: Changed, ttl: bool) -> Changes {
        Changes {
            kind: Some(kind),
            changed,
            ttl,
        }
    }

    #[test]
    fn a_ttl_alone_is_noted_and_joins_element_changes() {
        let mut w = FieldWindow::default();
        filtered(Some(&args("EXPIRE k 10")));
        w.event(0, b"k", b"expire", false);
        let ttl_only = Changes {
            kind: None,
            changed: Vec::new(),
            ttl: true,
        };
        assert_eq!(w.take(0, b"k"), Some(ttl_only));
        filtered(Some(&args("PERSIST k")));
        w.event(0, b"k", b"persist", false);
        filtered(Some(&args("SADD k a")));
        w.event(0, b"k", b"sadd", true);
        let both = changes(Kind::Set, vec![(b"a".to_vec(), Post::Present)], true);
        assert_eq!(w.take(0, b"k"), Some(both));
        // Any other write makes it whole.
        filtered(Some(&args("EXPIRE k 10")));
        w.event(0, b"k", b"expire", false);
        filtered(None);
        w.event(0, b"k", b"rename_to", true);
        assert_eq!(w.take(0, b"k"), None);
    }

    #[test]
    fn field_commands_name_their_key_fields_and_event() {
        let c = change_of(&args("HSET h a 1 b 2")).unwrap();
        assert_eq!(
            (c.key, c.fields, c.event),
            (&b"h"[..], vec![&b"a"[..], b"b"], &b"hset"[..])
        );
        assert_eq!(change_of(&args("hdel h a b")).unwrap().fields.len(), 2);
        assert_eq!(change_of(&args("HINCRBY h a 5")).unwrap().event, b"hincrby");
        assert!(change_of(&args("HSET h a")).is_none(), "malformed");
        assert!(change_of(&args("HGET h a")).is_none());
        assert!(may_change_fields(b"HINCRBYFLOAT") && !may_change_fields(b"HGETALL"));
    }

    #[test]
    fn set_and_sorted_set_commands_name_their_members() {
        let c = change_of(&args("SADD s a b")).unwrap();
        assert_eq!(
            (c.fields, c.event, c.post),
            (vec![&b"a"[..], b"b"], &b"sadd"[..], Post::Present)
        );
        assert_eq!(change_of(&args("srem s a")).unwrap().post, Post::Absent);
        let z = change_of(&args("ZADD z NX CH 1 a 2.5 b")).unwrap();
        assert_eq!((z.fields, z.event), (vec![&b"a"[..], b"b"], &b"zadd"[..]));
        let z = change_of(&args("zadd z xx incr 1 a")).unwrap();
        assert_eq!((z.fields, z.event), (vec![&b"a"[..]], &b"zincr"[..]));
        assert_eq!(
            change_of(&args("ZINCRBY z 5 m")).unwrap().fields,
            vec![&b"m"[..]]
        );
        assert_eq!(change_of(&args("ZREM z a b")).unwrap().post, Post::Absent);
        assert!(change_of(&args("ZADD z NX 1")).is_none(), "malformed");
        assert!(change_of(&args("ZADD z CH")).is_none(), "malformed");
        assert!(change_of(&args("SADD s")).is_none(), "malformed");
        assert!(change_of(&args("SMOVE a b m")).is_none(), "two keys: whole");
        assert!(may_change_fields(b"zincrby") && may_change_fields(b"SREM"));
        assert!(!may_change_fields(b"SPOP") && !may_change_fields(b"ZPOPMIN"));
    }

    #[test]
    fn a_conditional_zadd_of_several_members_is_inexact() {
        let mut w = FieldWindow::default();
        filtered(Some(&args("ZADD z NX 1 a 2 b")));
        assert!(w.event(0, b"z", b"zadd", false), "counted");
        filtered(Some(&args("ZADD z GT 5 a")));
        assert!(!w.event(0, b"z", b"zadd", true), "one member: it changed");
        filtered(Some(&args("ZADD z 1 a 2 b")));
        assert!(
            !w.event(0, b"z", b"zadd", true),
            "unconditional: both written"
        );
    }

    #[test]
    fn what_a_key_not_dirty_had_in_the_window_is_replaced() {
        let mut w = FieldWindow::default();
        filtered(Some(&args("SADD s a")));
        w.event(0, b"s", b"sadd", false);
        // The dirty set was dropped (a reload) without a flush taking it.
        filtered(Some(&args("SREM s b")));
        w.event(0, b"s", b"srem", false);
        let only_b = vec![(b"b".to_vec(), Post::Absent)];
        assert_eq!(w.take(0, b"s"), Some(changes(Kind::Set, only_b, false)));
    }

    #[test]
    fn integer_increments_of_a_field_add_up_and_others_are_writes() {
        let post = |words: &str| change_of(&args(words)).map(|c| c.post);
        assert_eq!(post("HINCRBY h f -3"), Some(Post::Incr(-3)));
        assert_eq!(post("HINCRBY h f 1.5"), Some(Post::Read));
        assert_eq!(post("HINCRBYFLOAT h f 2"), Some(Post::Read));
        assert_eq!(post("ZINCRBY z 4 m"), Some(Post::Incr(4)));
        assert_eq!(post("ZINCRBY z 4.0 m"), Some(Post::Incr(4)));
        assert_eq!(post("ZINCRBY z 0.5 m"), Some(Post::Read));
        assert_eq!(post("ZINCRBY z inf m"), Some(Post::Read));
        assert_eq!(post("ZADD z INCR 3 m"), Some(Post::Incr(3)));
        assert_eq!(post("ZADD z XX INCR 0.5 m"), Some(Post::Read));
        let mut w = FieldWindow::default();
        let commands: [(&str, &[u8]); 6] = [
            ("HINCRBY h a 2", b"hincrby"),
            ("HINCRBY h a 5", b"hincrby"),
            ("HSET h b 1", b"hset"),
            ("HINCRBY h b 5", b"hincrby"),
            ("HINCRBY h c 5", b"hincrby"),
            ("HDEL h c", b"hdel"),
        ];
        for (i, (words, event)) in commands.into_iter().enumerate() {
            filtered(Some(&args(words)));
            // The first change makes the key dirty.
            w.event(0, b"h", event, i > 0);
        }
        let want = vec![
            (b"a".to_vec(), Post::Incr(7)),
            (b"b".to_vec(), Post::Read),
            (b"c".to_vec(), Post::Absent),
        ];
        assert_eq!(w.take(0, b"h"), Some(changes(Kind::Hash, want, false)));
    }

    #[test]
    fn a_member_s_last_change_is_what_it_holds() {
        let mut w = FieldWindow::default();
        filtered(Some(&args("SADD s a b")));
        w.event(0, b"s", b"sadd", false);
        filtered(Some(&args("SREM s a")));
        w.event(0, b"s", b"srem", true);
        filtered(Some(&args("SADD s a")));
        w.event(0, b"s", b"sadd", true);
        filtered(Some(&args("SREM s b")));
        w.event(0, b"s", b"srem", true);
        let want = vec![
            (b"a".to_vec(), Post::Present),
            (b"b".to_vec(), Post::Absent),
        ];
        assert_eq!(w.take(0, b"s"), Some(changes(Kind::Set, want, false)));
        // A sorted set's event on a key noted as a set: a whole change.
        filtered(Some(&args("SADD k a")));
        w.event(0, b"k", b"sadd", false);
        filtered(Some(&args("ZADD k 1 a")));
        w.event(0, b"k", b"zadd", true);
        assert_eq!(w.take(0, b"k"), None);
    }

    #[test]
    fn only_keys_changed_field_by_field_are_kept() {
        let mut w = FieldWindow::default();
        filtered(Some(&args("HSET h a 1")));
        w.event(0, b"h", b"hset", false);
        filtered(Some(&args("HDEL h b")));
        w.event(0, b"h", b"hdel", true);
        filtered(Some(&args("HSET g a 1")));
        w.event(0, b"g", b"hset", false);
        filtered(Some(&args("EXPIRE g 10")));
        w.event(0, b"g", b"expire", true);
        // An event with no note (inside MULTI): the whole key.
        filtered(None);
        w.event(0, b"m", b"hset", false);
        let h = vec![(b"a".to_vec(), Post::Read), (b"b".to_vec(), Post::Absent)];
        assert_eq!(w.take(0, b"h"), Some(changes(Kind::Hash, h, false)));
        let g = vec![(b"a".to_vec(), Post::Read)];
        assert_eq!(
            w.take(0, b"g"),
            Some(changes(Kind::Hash, g, true)),
            "EXPIRE: its TTL"
        );
        assert_eq!(w.take(0, b"m"), None);
    }

    #[test]
    fn a_list_s_pushes_are_kept_in_order_and_any_other_write_makes_it_whole() {
        let mut w = FieldWindow::default();
        let pushes: [(&str, &[u8]); 3] = [
            ("RPUSH l a b", b"rpush"),
            ("LPUSHX l c", b"lpush"),
            ("rpush l a", b"rpush"),
        ];
        for (i, (words, event)) in pushes.into_iter().enumerate() {
            filtered(Some(&args(words)));
            w.event(0, b"l", event, i > 0);
        }
        let want = vec![
            (b"a".to_vec(), Post::PushRight),
            (b"b".to_vec(), Post::PushRight),
            (b"c".to_vec(), Post::PushLeft),
            (b"a".to_vec(), Post::PushRight),
        ];
        assert_eq!(w.take(0, b"l"), Some(changes(Kind::List, want, false)));
        filtered(Some(&args("RPUSH l a")));
        w.event(0, b"l", b"rpush", false);
        // A blocked client served by the push pops it (no note).
        filtered(None);
        w.event(0, b"l", b"lpop", true);
        assert_eq!(w.take(0, b"l"), None);
        assert!(may_change_fields(b"RPUSHX") && !may_change_fields(b"LPOP"));
        assert!(change_of(&args("LPUSH l")).is_none(), "malformed");
    }

    #[test]
    fn a_list_s_pops_read_with_their_counts_go_among_its_pushes_in_order() {
        let pop = pop_of(&args("rpop l 2")).expect("a pop");
        assert_eq!(
            (pop.key, pop.event, pop.post),
            (&b"l"[..], &b"rpop"[..], Post::PopRight(2))
        );
        let pop = pop_of(&args("LPOP l")).expect("a pop");
        assert_eq!((pop.event, pop.post), (&b"lpop"[..], Post::PopLeft(1)));
        for malformed in ["LPOP l -1", "LPOP l x", "RPOP l 1 2", "LPOP", "LPUSH l a"] {
            assert!(pop_of(&args(malformed)).is_none(), "{malformed}");
        }
        assert!(
            change_of(&args("LPOP l")).is_none(),
            "not noted on the data path yet"
        );
        let changed = vec![
            (b"a".to_vec(), Post::PushRight),
            (b"b".to_vec(), Post::PushRight),
            (Vec::new(), Post::PopLeft(1)),
            (Vec::new(), Post::PopRight(2)),
            (b"c".to_vec(), Post::PushRight),
        ];
        let ab = vec![b"a".to_vec(), b"b".to_vec()];
        let want = vec![
            ListNote::Push(End::Right, ab),
            ListNote::Pop(End::Left, 1),
            ListNote::Pop(End::Right, 2),
            ListNote::Push(End::Right, vec![b"c".to_vec()]),
        ];
        assert_eq!(list_notes(&changed), Some(want));
        assert_eq!(list_notes(&[(b"f".to_vec(), Post::Read)]), None);
    }

    #[test]
    fn a_note_for_another_key_or_event_is_not_claimed() {
        let mut w = FieldWindow::default();
        filtered(Some(&args("HSET h a 1")));
        w.event(0, b"other", b"hset", false);
        filtered(Some(&args("HDEL h a")));
        w.event(0, b"h", b"hset", false);
        assert_eq!(w.take(0, b"h"), None);
        assert_eq!(w.take(0, b"other"), None);
    }
}
