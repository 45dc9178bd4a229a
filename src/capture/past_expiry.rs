//! Commands that delete a key by giving it an expiry in the past
//! (`EXPIRE k 0`, `PEXPIREAT k <past>`, `SET k v PXAT <past>`, `GETEX k
//! EXAT <past>`), or hash fields (`HEXPIRE h 0 FIELDS ..`, `HSETEX h PXAT
//! <past> FIELDS ..`). Valkey 9 raises `expired` (`hexpired`) for that
//! deletion where Redis 7.0 to 8.0 and Valkey 8 raise `del` (`hdel`), and
//! an expiry is not a write here
//! (each node expires keys itself from the absolute expiry that travelled
//! with the value): the peer would keep the key for ever. The command
//! filter notes such a command's key; an `expired` event for it that
//! follows is the command's delete. Pure: arguments and the time in, the
//! key out.

/// How far past the filter's clock an absolute expiry may lie and still
/// count as past: the server reads its clock after the filter ran.
pub const SLACK_MS: u64 = 1000;

/// The key `args` (the command name at 0) deletes by an expiry at or before
/// `now_ms` (plus [`SLACK_MS`] for absolute times), if it is such a command.
pub fn past_expiry_key<'a>(args: &[&'a [u8]], now_ms: u64) -> Option<&'a [u8]> {
    let name = args.first()?;
    let key = *args.get(1)?;
    let is = |s: &str| name.eq_ignore_ascii_case(s.as_bytes());
    let past = if is("expire") || is("pexpire") || is("hexpire") || is("hpexpire") {
        number(args.get(2)?)? <= 0
    } else if is("expireat") || is("hexpireat") {
        at_or_before(number(args.get(2)?)?.saturating_mul(1000), now_ms)
    } else if is("pexpireat") || is("hpexpireat") {
        at_or_before(number(args.get(2)?)?, now_ms)
    } else if is("set") {
        absolute_option(args.get(3..)?, now_ms)
    } else if is("getex") || is("hsetex") || is("hgetex") {
        absolute_option(args.get(2..)?, now_ms)
    } else {
        false
    };
    past.then_some(key)
}

/// Whether options of `SET` or `GETEX` hold `EXAT` or `PXAT` in the past
/// (`EX` and `PX` must be positive, or the command fails).
fn absolute_option(options: &[&[u8]], now_ms: u64) -> bool {
    let mut i = 0;
    while let Some(word) = options.get(i) {
        let is = |s: &[u8]| word.eq_ignore_ascii_case(s);
        if is(b"fields") {
            // Field names and values follow (HSETEX, HGETEX).
            return false;
        }
        let scale = if is(b"exat") {
            1000
        } else if is(b"pxat") {
            1
        } else {
            i += 1;
            continue;
        };
        return options
            .get(i + 1)
            .and_then(|v| number(v))
            .is_some_and(|at| at_or_before(at.saturating_mul(scale), now_ms));
    }
    false
}

fn at_or_before(at_ms: i64, now_ms: u64) -> bool {
    u64::try_from(at_ms).map_or(true, |at| at <= now_ms.saturating_add(SLACK_MS))
}

fn number(bytes: &[u8]) -> Option<i64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000_000;

    fn key(words: &[&str]) -> Option<String> {
        let args: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        past_expiry_key(&args, NOW).map(|k| String::from_utf8_lossy(k).into_owned())
    }

    #[test]
    fn relative_expiries_at_or_below_zero_delete() {
        assert_eq!(key(&["EXPIRE", "k", "0"]).as_deref(), Some("k"));
        assert_eq!(key(&["pexpire", "k", "-5", "NX"]).as_deref(), Some("k"));
        assert_eq!(key(&["EXPIRE", "k", "1"]), None);
        assert_eq!(key(&["EXPIRE", "k", "soon"]), None);
        assert_eq!(key(&["EXPIRE", "k"]), None);
    }

    #[test]
    fn absolute_expiries_in_the_past_delete() {
        assert_eq!(key(&["EXPIREAT", "k", "1"]).as_deref(), Some("k"));
        assert_eq!(
            key(&["PEXPIREAT", "k", &NOW.to_string()]).as_deref(),
            Some("k")
        );
        assert_eq!(key(&["PEXPIREAT", "k", &(NOW + 60_000).to_string()]), None);
        assert_eq!(key(&["SET", "k", "v", "PXAT", "100"]).as_deref(), Some("k"));
        assert_eq!(
            key(&["set", "k", "v", "NX", "GET", "exat", "1"]).as_deref(),
            Some("k")
        );
        assert_eq!(key(&["SET", "k", "v", "EX", "100"]), None);
        assert_eq!(
            key(&["SET", "k", "exat", "PXAT", &(NOW * 2).to_string()]),
            None
        );
        assert_eq!(key(&["GETEX", "k", "EXAT", "1"]).as_deref(), Some("k"));
        assert_eq!(key(&["GETEX", "k", "PERSIST"]), None);
        assert_eq!(
            key(&["HEXPIRE", "h", "0", "FIELDS", "1", "f"]).as_deref(),
            Some("h")
        );
        assert_eq!(
            key(&["HPEXPIREAT", "h", "1", "FIELDS", "1", "f"]).as_deref(),
            Some("h")
        );
        assert_eq!(key(&["HEXPIRE", "h", "10", "FIELDS", "1", "f"]), None);
        assert_eq!(
            key(&["HSETEX", "h", "PXAT", "1", "FIELDS", "1", "f", "v"]).as_deref(),
            Some("h")
        );
        assert_eq!(key(&["HSETEX", "h", "FIELDS", "1", "exat", "1"]), None);
        assert_eq!(
            key(&["HGETEX", "h", "EXAT", "1", "FIELDS", "1", "f"]).as_deref(),
            Some("h")
        );
        assert_eq!(key(&["GET", "k"]), None);
    }
}
