//! Which hash keys a flush finds changed only field by field, and which
//! fields (issue 27's hashes, with `merge-hashes`).
//!
//! The command filter sees `HSET`, `HMSET`, `HSETNX`, `HDEL`, `HINCRBY`
//! and `HINCRBYFLOAT` with their arguments just before each runs and notes
//! the key and fields; the keyspace event the command raises once it took
//! effect (`hset`, `hdel`, `hincrby`, `hincrbyfloat`) claims that note. A
//! note no event claims (a failed command, `HSETNX` of a field that
//! exists, one queued in `MULTI`) is dropped by the next filtered command.
//! An event with no note (a transaction: its commands pass the filter when
//! queued), or any other write of the key since the last flush, makes the
//! key's change a write of the whole key, which still keeps every field
//! written elsewhere that it had not seen.
//!
//! Records only; never writes, never blocks.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};

use hashbrown::HashMap;

/// `merge-hashes`, set at load.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether hash field changes are recorded (`merge-hashes`).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Sets `merge-hashes` (at load).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// The fields a filtered command will change, and the event that says it
/// did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldChange<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The fields, as named (maybe twice).
    pub fields: Vec<&'a [u8]>,
    /// The keyspace event the command raises.
    pub event: &'static [u8],
}

/// A noted change: key, fields, the event that will claim it.
type Note = (Vec<u8>, Vec<Vec<u8>>, &'static [u8]);

thread_local! {
    /// The last filtered command's change.
    static NOTED: RefCell<Option<Note>> = const { RefCell::new(None) };
    static HAS_NOTE: Cell<bool> = const { Cell::new(false) };
}

/// The key and fields a hash field command changes (`args`, the name at
/// 0); `None` for anything else or a malformed call.
pub fn change_of<'a>(args: &[&'a [u8]]) -> Option<FieldChange<'a>> {
    let name = args.first()?;
    let is = |s: &str| name.eq_ignore_ascii_case(s.as_bytes());
    let n = args.len();
    let (fields, event): (Vec<&[u8]>, &'static [u8]) =
        if (is("hset") || is("hmset")) && n >= 4 && n.is_multiple_of(2) {
            (args[2..].iter().step_by(2).copied().collect(), b"hset")
        } else if is("hsetnx") && n == 4 {
            (vec![args[2]], b"hset")
        } else if is("hdel") && n >= 3 {
            (args[2..].to_vec(), b"hdel")
        } else if is("hincrby") && n == 4 {
            (vec![args[2]], b"hincrby")
        } else if is("hincrbyfloat") && n == 4 {
            (vec![args[2]], b"hincrbyfloat")
        } else {
            return None;
        };
    Some(FieldChange {
        key: args[1],
        fields,
        event,
    })
}

/// Whether a command named `name` may change hash fields (checked before
/// its arguments are read).
pub fn may_change_fields(name: &[u8]) -> bool {
    (4..=12).contains(&name.len())
        && (name[0] == b'h' || name[0] == b'H')
        && ["hset", "hmset", "hsetnx", "hdel", "hincrby", "hincrbyfloat"]
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
        (c.key.to_vec(), fields, c.event)
    });
    NOTED.with(|n| *n.borrow_mut() = owned);
}

/// Claims the note for `key` and `event`, if the last filtered command
/// changed those fields.
fn claim(key: &[u8], event: &[u8]) -> Option<Vec<Vec<u8>>> {
    if !HAS_NOTE.get() {
        return None;
    }
    HAS_NOTE.set(false);
    NOTED
        .with(|n| n.borrow_mut().take())
        .filter(|(k, _, e)| k == key && *e == event)
        .map(|(_, fields, _)| fields)
}

/// Per key changed since the last flush only field by field: the fields.
#[derive(Debug, Default)]
pub struct FieldWindow {
    keys: HashMap<(u32, Vec<u8>), Vec<Vec<u8>>>,
}

impl FieldWindow {
    /// A write event on `key` of `db`, before the dirty set marks it
    /// (`already_dirty`: it was changed before in this window, or rests).
    pub fn event(&mut self, db: u32, key: &[u8], event: &[u8], already_dirty: bool) {
        let fields = match event {
            b"hset" | b"hdel" | b"hincrby" | b"hincrbyfloat" => claim(key, event),
            _ => None,
        };
        if self.keys.is_empty() && (fields.is_none() || already_dirty) {
            return;
        }
        let k = (db, key.to_vec());
        match (fields, self.keys.get_mut(&k)) {
            (Some(f), Some(list)) => list.extend(f),
            (Some(f), None) if !already_dirty => {
                self.keys.insert(k, f);
            }
            (_, Some(_)) => {
                self.keys.remove(&k);
            }
            (_, None) => {}
        }
    }

    /// The fields of `key` changed since the last flush, each once, if it
    /// changed only field by field; forgets the key.
    pub fn take(&mut self, db: u32, key: &[u8]) -> Option<Vec<Vec<u8>>> {
        if self.keys.is_empty() {
            return None;
        }
        let mut fields = self.keys.remove(&(db, key.to_vec()))?;
        fields.sort_unstable();
        fields.dedup();
        Some(fields)
    }

    /// Forgets every key (a flush of the data, a swap of databases).
    pub fn clear(&mut self) {
        self.keys.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &str) -> Vec<&[u8]> {
        words.split(' ').map(str::as_bytes).collect()
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
        assert_eq!(w.take(0, b"h"), Some(vec![b"a".to_vec(), b"b".to_vec()]));
        assert_eq!(w.take(0, b"g"), None);
        assert_eq!(w.take(0, b"m"), None);
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
