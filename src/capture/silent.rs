//! Commands that change a key without raising a keyspace event, found by
//! reading the write commands of Redis 7.0 and Valkey 8 (`t_stream.c`,
//! `hyperloglog.c`): Redis's own replication sends their effects to
//! replicas, so the peer must get them too. Pure: a command name and its
//! arguments in, the positions of the keys it changes silently out.
//!
//! - `XREADGROUP`: the group's last-delivered id and entries-read, the
//!   consumer's PEL and seen-time (a new consumer raises an event; an
//!   existing one does not).
//! - `XACK`: the PEL. `XCLAIM`, `XAUTOCLAIM`: the PEL, owners, delivery
//!   counts, the consumer (and `XAUTOCLAIM` drops deleted entries).
//! - `PFCOUNT`: the cached cardinality written into the HyperLogLog.
//! - `PFDEBUG`: `TODENSE` and `GETREG` convert a sparse HyperLogLog.
//! - `BITFIELD` whose every write fails (`OVERFLOW FAIL`) still creates or
//!   extends the key with zero bytes, and then raises no event (nor does
//!   Redis replicate it: its replicas miss that key too).
//!
//! - `FUNCTION LOAD`, `DELETE`, `FLUSH`, `RESTORE`: the function libraries
//!   (no key, no event at all).
//!
//! `EXEC` matters too: commands queued in `MULTI` pass the filter when
//! queued and run at `EXEC`.

/// What a command is, as far as silent changes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Raises events for what it changes (or changes nothing).
    Other,
    /// `EXEC`: the commands queued before it run now.
    Exec,
    /// Changes stream keys silently.
    Stream(Keys),
    /// Changes string keys silently (HyperLogLogs, BITFIELD).
    String(Keys),
    /// Changes the function libraries (the subcommand is checked by
    /// [`changes_functions`]).
    Function,
    /// May delete its key by an expiry in the past (see
    /// `capture::past_expiry`).
    Expiry,
}

/// Where a silent command names its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// The first argument (`XACK key ...`).
    First,
    /// Every argument (`PFCOUNT key [key ...]`).
    All,
    /// The second argument (`PFDEBUG subcommand key`).
    Second,
    /// The first half of the arguments after `STREAMS` (`XREADGROUP`).
    Streams,
}

/// The kind of the command named `name` (any case). Cheap enough to run
/// for every command: most names are ruled out by length or first byte.
pub fn kind(name: &[u8]) -> Kind {
    let is = |s: &str| name.eq_ignore_ascii_case(s.as_bytes());
    match name.first().map(u8::to_ascii_lowercase) {
        Some(b'x') if is("xack") || is("xclaim") || is("xautoclaim") => Kind::Stream(Keys::First),
        Some(b'x') if is("xreadgroup") => Kind::Stream(Keys::Streams),
        Some(b'p') if is("pfcount") => Kind::String(Keys::All),
        Some(b'p') if is("pfdebug") => Kind::String(Keys::Second),
        Some(b'b') if is("bitfield") => Kind::String(Keys::First),
        Some(b'e') if is("exec") => Kind::Exec,
        Some(b'f') if is("function") => Kind::Function,
        Some(b'e') if is("expire") || is("expireat") => Kind::Expiry,
        Some(b'p') if is("pexpire") || is("pexpireat") => Kind::Expiry,
        Some(b's') if is("set") => Kind::Expiry,
        Some(b'g') if is("getex") => Kind::Expiry,
        Some(b'h')
            if is("hexpire")
                || is("hpexpire")
                || is("hexpireat")
                || is("hpexpireat")
                || is("hsetex")
                || is("hgetex") =>
        {
            Kind::Expiry
        }
        _ => Kind::Other,
    }
}

/// Whether `FUNCTION <subcommand> ...` (`args`, the name at 0) changes the
/// function libraries.
pub fn changes_functions(args: &[&[u8]]) -> bool {
    args.get(1).is_some_and(|sub| {
        ["load", "delete", "flush", "restore"]
            .iter()
            .any(|s| sub.eq_ignore_ascii_case(s.as_bytes()))
    })
}

/// The one library `FUNCTION <subcommand> ...` (`args`, the name at 0)
/// changes, when it names one: `LOAD [REPLACE] code` (the name its code
/// declares) and `DELETE name`. `None` for the others (`FLUSH`,
/// `RESTORE`: any library may change) and for code whose name cannot be
/// read.
pub fn library_named<'a>(args: &[&'a [u8]]) -> Option<&'a [u8]> {
    let sub = args.get(1)?;
    let last = *args.last()?;
    if sub.eq_ignore_ascii_case(b"load") && args.len() >= 3 {
        crate::redis::libraries::name(last)
    } else if sub.eq_ignore_ascii_case(b"delete") && args.len() == 3 {
        Some(last)
    } else {
        None
    }
}

/// The positions (in `args`, the name at 0) of the keys `keys` says.
pub fn key_positions(keys: Keys, args: &[&[u8]]) -> Vec<usize> {
    let n = args.len();
    match keys {
        Keys::First if n > 1 => vec![1],
        Keys::Second if n > 2 => vec![2],
        Keys::All => (1..n).collect(),
        Keys::Streams => {
            let Some(at) = streams_keyword(args) else {
                return Vec::new();
            };
            let rest = n - at - 1;
            if rest == 0 || !rest.is_multiple_of(2) {
                return Vec::new();
            }
            (at + 1..at + 1 + rest / 2).collect()
        }
        _ => Vec::new(),
    }
}

/// Where `XREADGROUP`'s `STREAMS` keyword is, its options read in order
/// the way the server reads them (a group or consumer may be named
/// "streams").
fn streams_keyword(args: &[&[u8]]) -> Option<usize> {
    let mut i = 1;
    while let Some(arg) = args.get(i) {
        let is = |s: &[u8]| arg.eq_ignore_ascii_case(s);
        i += if is(b"streams") {
            return Some(i);
        } else if is(b"group") {
            3
        } else if is(b"count") || is(b"block") {
            2
        } else {
            1
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<&[u8]> {
        line.split(' ').map(str::as_bytes).collect()
    }

    fn keys_of(line: &str) -> Vec<&str> {
        let a = args(line);
        let keys = match kind(a[0]) {
            Kind::Stream(k) | Kind::String(k) => k,
            _ => return Vec::new(),
        };
        key_positions(keys, &a)
            .into_iter()
            .map(|i| line.split(' ').nth(i).unwrap_or(""))
            .collect()
    }

    #[test]
    fn silent_commands_name_their_keys() {
        assert_eq!(keys_of("XACK s g 1-0 2-0"), ["s"]);
        assert_eq!(keys_of("xclaim s g c 0 1-0"), ["s"]);
        assert_eq!(keys_of("XAutoClaim s g c 0 0-0"), ["s"]);
        assert_eq!(keys_of("PFCOUNT h1 h2"), ["h1", "h2"]);
        assert_eq!(keys_of("PFDEBUG TODENSE h"), ["h"]);
        assert_eq!(keys_of("BITFIELD b OVERFLOW FAIL SET i8 0 200"), ["b"]);
        assert_eq!(kind(b"bitfield_ro"), Kind::Other);
        assert_eq!(
            keys_of("XREADGROUP GROUP g c COUNT 2 STREAMS s1 s2 > >"),
            ["s1", "s2"]
        );
        // A consumer or group named "streams" comes before the keyword.
        assert_eq!(
            keys_of("XREADGROUP GROUP streams streams STREAMS s >"),
            ["s"]
        );
    }

    #[test]
    fn malformed_or_other_commands_name_none() {
        assert_eq!(
            keys_of("XREADGROUP GROUP g c STREAMS s1 s2 >"),
            Vec::<&str>::new()
        );
        assert_eq!(keys_of("XREADGROUP GROUP g c STREAMS"), Vec::<&str>::new());
        assert_eq!(keys_of("XACK"), Vec::<&str>::new());
        assert_eq!(keys_of("PFDEBUG TODENSE"), Vec::<&str>::new());
        assert_eq!(keys_of("SET k v"), Vec::<&str>::new());
        assert_eq!(keys_of("XADD s * f v"), Vec::<&str>::new());
        assert_eq!(kind(b"exec"), Kind::Exec);
        assert_eq!(kind(b"Function"), Kind::Function);
        for changes in [
            "FUNCTION LOAD code",
            "function delete lib",
            "FUNCTION FLUSH ASYNC",
            "FUNCTION RESTORE p",
        ] {
            assert!(
                changes_functions(&changes.split(' ').map(str::as_bytes).collect::<Vec<_>>()),
                "{changes}"
            );
        }
        for reads in [
            "FUNCTION LIST",
            "FUNCTION DUMP",
            "FUNCTION STATS",
            "FUNCTION KILL",
            "FUNCTION",
        ] {
            assert!(
                !changes_functions(&reads.split(' ').map(str::as_bytes).collect::<Vec<_>>()),
                "{reads}"
            );
        }
        assert_eq!(kind(b"EXECUTE"), Kind::Other);
        assert_eq!(kind(b""), Kind::Other);
    }

    #[test]
    fn a_load_or_a_delete_names_its_library_and_the_rest_none() {
        let named = |line: &str| {
            let args: Vec<&[u8]> = line.split('|').map(str::as_bytes).collect();
            library_named(&args).map(|n| String::from_utf8_lossy(n).into_owned())
        };
        let code = "#!lua name=mylib\nredis.register_function('f', function() return 1 end)";
        assert_eq!(
            named(&format!("FUNCTION|LOAD|{code}")).as_deref(),
            Some("mylib")
        );
        assert_eq!(
            named(&format!("function|load|REPLACE|{code}")).as_deref(),
            Some("mylib")
        );
        assert_eq!(named("FUNCTION|DELETE|mylib").as_deref(), Some("mylib"));
        for none in [
            "FUNCTION|LOAD",
            "FUNCTION|LOAD|no shebang",
            "FUNCTION|LOAD|#!lua name='quoted'\n",
            "FUNCTION|DELETE",
            "FUNCTION|DELETE|a|b",
            "FUNCTION|FLUSH",
            "FUNCTION|RESTORE|payload|FLUSH",
            "FUNCTION",
        ] {
            assert_eq!(named(none), None, "{none}");
        }
    }
}
