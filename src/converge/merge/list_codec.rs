//! How a list's pops and its positions state travel (`list_positions`):
//! pure encode and decode, little-endian, in the style of `codec`.
//!
//! ```text
//! RunId:    u64 clock, u64 node, u8 end (0 head, 1 tail)
//! Origin:   u8 tag (0 a run, 1 a whole write), RunId or u64 clock, u64 node
//! Taken:    u8 tag (0 a run's element: RunId; 1 a position: Origin;
//!           2 a whole write's element: u64 clock, u64 node), i64 index
//!           or position
//! Pop:      u64 clock, u64 node, u32 count, count x Taken
//! Flush:    u64 clock, u64 node, u8 runs (0 to 2, the head's first),
//!           runs x (u8 end, u32 count, count x (u32 len, bytes)),
//!           u32 count, count x Taken
//! Removals: u32 count, count x (i64 start, i64 end, u64 clock, u64 node),
//!           in order and apart
//! List:     u8 values (0 none, 1 some), [u32 count, count x (u32 len,
//!           bytes)], Removals
//! State:    Origin lineage, i64 written, i64 low, i64 high, Removals of
//!           the lineage,
//!           u32 runs, runs x (RunId, List), by RunId,
//!           u32 writes, writes x (u64 clock, u64 node, List, Seen), by stamp,
//!           u32 places, places x (RunId run, Origin lineage, i64 base,
//!           i64 len), by run,
//!           u32 settling, settling x (u64 clock, u64 node, u8 what
//!           (0 a whole write, 1 a head run, 2 a tail run)), in order,
//!           Seen bound
//! ```
//!
//! Decoding takes bytes from the network or the journal: every count is
//! checked against what is left before anything is allocated, nothing may
//! follow, and a state that breaks a rule of the type (a removal outside
//! the lineage, runs out of order...) is refused.

use crate::converge::merge::codec::{put_seen, put_stamp, Cursor, DecodeError};
use crate::converge::merge::hashes::Bytes;
use crate::converge::merge::list_flush::FlushedList;
use crate::converge::merge::list_positions::{
    Lineage, ListPositions, Origin, Placed, Run, RunId, Taken, Whole,
};
use crate::converge::merge::lists::End;
use crate::converge::merge::removals::{Removals, MAX_POS};
use crate::converge::version::Stamp;

fn put_end(out: &mut Vec<u8>, end: End) {
    out.push(match end {
        End::Left => 0,
        End::Right => 1,
    });
}

fn put_run_id(out: &mut Vec<u8>, id: RunId) {
    put_stamp(out, id.stamp);
    put_end(out, id.end);
}

fn put_origin(out: &mut Vec<u8>, origin: Origin) {
    match origin {
        Origin::Run(run) => {
            out.push(0);
            put_run_id(out, run);
        }
        Origin::Write(stamp) => {
            out.push(1);
            put_stamp(out, stamp);
        }
    }
}

fn put_taken(out: &mut Vec<u8>, taken: Taken) {
    let at = match taken {
        Taken::Run { run, index } => {
            out.push(0);
            put_run_id(out, run);
            index
        }
        Taken::Pos { lineage, pos } => {
            out.push(1);
            put_origin(out, lineage);
            pos
        }
        Taken::Write { write, index } => {
            out.push(2);
            put_stamp(out, write);
            index
        }
    };
    out.extend_from_slice(&at.to_le_bytes());
}

fn put_removals(out: &mut Vec<u8>, removals: &Removals) {
    out.extend_from_slice(&(removals.span_count() as u32).to_le_bytes());
    for (start, end, stamp) in removals.iter() {
        out.extend_from_slice(&start.to_le_bytes());
        out.extend_from_slice(&end.to_le_bytes());
        put_stamp(out, stamp);
    }
}

/// A count, then each value's length and bytes.
fn put_values(out: &mut Vec<u8>, values: &[Bytes]) {
    out.extend_from_slice(&(values.len() as u32).to_le_bytes());
    for v in values {
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
    }
}

/// A count, then each element taken.
fn put_taken_list(out: &mut Vec<u8>, taken: &[Taken]) {
    out.extend_from_slice(&(taken.len() as u32).to_le_bytes());
    for &t in taken {
        put_taken(out, t);
    }
}

fn put_list(out: &mut Vec<u8>, run: &Run) {
    match &run.values {
        None => out.push(0),
        Some(values) => {
            out.push(1);
            put_values(out, values);
        }
    }
    put_removals(out, &run.removed);
}

/// A pop stamped `stamp` that took `taken`, as it travels.
pub fn encode_pop(stamp: Stamp, taken: &[Taken]) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + 27 * taken.len());
    put_stamp(&mut out, stamp);
    put_taken_list(&mut out, taken);
    out
}

/// One flush of a list stamped `stamp` (`list_flush`), as it travels.
pub fn encode_flush(stamp: Stamp, flushed: &FlushedList) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    put_stamp(&mut out, stamp);
    out.push(flushed.runs.len() as u8);
    for (end, values) in &flushed.runs {
        put_end(&mut out, *end);
        put_values(&mut out, values);
    }
    put_taken_list(&mut out, &flushed.taken);
    out
}

/// A list's positions state as it travels.
pub fn encode_list(state: &ListPositions) -> Vec<u8> {
    let mut out = Vec::new();
    let l = &state.lineage;
    put_origin(&mut out, l.id);
    out.extend_from_slice(&l.written.to_le_bytes());
    out.extend_from_slice(&l.low.to_le_bytes());
    out.extend_from_slice(&l.high.to_le_bytes());
    put_removals(&mut out, &l.removed);
    let ends = [(End::Left, &state.left), (End::Right, &state.right)];
    let mut runs: Vec<(RunId, &Run)> = ends
        .into_iter()
        .flat_map(|(end, runs)| {
            runs.iter()
                .map(move |(&stamp, r)| (RunId { stamp, end }, r))
        })
        .collect();
    runs.sort_by_key(|&(id, _)| id);
    out.extend_from_slice(&(runs.len() as u32).to_le_bytes());
    for (id, run) in runs {
        put_run_id(&mut out, id);
        put_list(&mut out, run);
    }
    out.extend_from_slice(&(state.wholes.len() as u32).to_le_bytes());
    for (&stamp, whole) in &state.wholes {
        put_stamp(&mut out, stamp);
        put_list(&mut out, &whole.list);
        put_seen(&mut out, &whole.seen);
    }
    out.extend_from_slice(&(state.placed.len() as u32).to_le_bytes());
    for (&run, p) in &state.placed {
        put_run_id(&mut out, run);
        put_origin(&mut out, p.lineage);
        out.extend_from_slice(&p.base.to_le_bytes());
        out.extend_from_slice(&p.len.to_le_bytes());
    }
    out.extend_from_slice(&(state.settling.len() as u32).to_le_bytes());
    for &(stamp, run) in &state.settling {
        put_stamp(&mut out, stamp);
        out.push(match run.map(|r| r.end) {
            None => 0,
            Some(End::Left) => 1,
            Some(End::Right) => 2,
        });
    }
    put_seen(&mut out, &state.bound);
    out
}

impl Cursor<'_> {
    fn end_tag(&mut self) -> Result<End, DecodeError> {
        let at = self.at;
        match self.array::<1>()? {
            [0] => Ok(End::Left),
            [1] => Ok(End::Right),
            [tag] => Err(DecodeError::BadTag { tag, at }),
        }
    }

    fn run_id(&mut self) -> Result<RunId, DecodeError> {
        let stamp = self.stamp()?;
        let end = self.end_tag()?;
        Ok(RunId { stamp, end })
    }

    fn origin(&mut self) -> Result<Origin, DecodeError> {
        let at = self.at;
        match self.array::<1>()? {
            [0] => Ok(Origin::Run(self.run_id()?)),
            [1] => Ok(Origin::Write(self.stamp()?)),
            [tag] => Err(DecodeError::BadTag { tag, at }),
        }
    }

    fn taken(&mut self) -> Result<Taken, DecodeError> {
        let at = self.at;
        let taken = match self.array::<1>()? {
            [0] => Taken::Run {
                run: self.run_id()?,
                index: self.i64()?,
            },
            [1] => Taken::Pos {
                lineage: self.origin()?,
                pos: self.i64()?,
            },
            [2] => Taken::Write {
                write: self.stamp()?,
                index: self.i64()?,
            },
            [tag] => return Err(DecodeError::BadTag { tag, at }),
        };
        match taken {
            Taken::Run { index, .. } | Taken::Write { index, .. } if index < 0 => {
                Err(invalid("an element has a negative index", at))
            }
            taken => Ok(taken),
        }
    }

    fn removals(&mut self) -> Result<Removals, DecodeError> {
        let n = self.count(4, 32)?;
        let at = self.at;
        let mut spans = Vec::with_capacity(n);
        for _ in 0..n {
            let (start, end) = (self.i64()?, self.i64()?);
            spans.push((start, end, self.stamp()?));
        }
        Removals::from_spans(spans).ok_or(invalid("removed spans out of order", at))
    }

    /// A run's or a whole write's list, its removals inside it.
    fn list(&mut self) -> Result<Run, DecodeError> {
        let values = self.values()?;
        let at = self.at;
        let removed = self.removals()?;
        let run = Run { values, removed };
        let len = run.values.as_ref().map_or(MAX_POS, |v| v.len() as i64);
        if !run.removed.iter().all(|(s, e, _)| 0 <= s && e <= len) {
            return Err(invalid("removals outside a list", at));
        }
        Ok(run)
    }

    fn values(&mut self) -> Result<Option<Vec<Bytes>>, DecodeError> {
        let at = self.at;
        match self.array::<1>()? {
            [0] => return Ok(None),
            [1] => {}
            [tag] => return Err(DecodeError::BadTag { tag, at }),
        }
        self.value_list().map(Some)
    }

    /// A count, then each value's length and bytes.
    fn value_list(&mut self) -> Result<Vec<Bytes>, DecodeError> {
        let n = self.count(4, 4)?;
        let mut values = Vec::with_capacity(n);
        for _ in 0..n {
            let len = self.count(4, 1)?;
            values.push(self.take(len)?.to_vec());
        }
        Ok(values)
    }

    /// A count, then each element taken.
    fn taken_list(&mut self) -> Result<Vec<Taken>, DecodeError> {
        let n = self.count(4, 25)?;
        let mut taken = Vec::with_capacity(n);
        for _ in 0..n {
            taken.push(self.taken()?);
        }
        Ok(taken)
    }
}

fn invalid(rule: &'static str, at: usize) -> DecodeError {
    DecodeError::Invalid { rule, at }
}

/// A pop from its bytes: its stamp and what it took.
pub fn decode_pop(bytes: &[u8]) -> Result<(Stamp, Vec<Taken>), DecodeError> {
    let mut c = Cursor { bytes, at: 0 };
    let stamp = c.stamp()?;
    let taken = c.taken_list()?;
    c.end()?;
    Ok((stamp, taken))
}

/// A flush of a list from its bytes: its stamp, runs and pops. At most
/// one run per end, the head's first, none empty.
pub fn decode_flush(bytes: &[u8]) -> Result<(Stamp, FlushedList), DecodeError> {
    let mut c = Cursor { bytes, at: 0 };
    let stamp = c.stamp()?;
    let at = c.at;
    let n = c.count(1, 5)?;
    let mut runs: Vec<(End, Vec<Bytes>)> = Vec::with_capacity(n.min(2));
    for _ in 0..n {
        let at = c.at;
        let end = c.end_tag()?;
        if runs.last().is_some_and(|(last, _)| *last >= end) {
            return Err(invalid("a flush's runs: one per end, the head's first", at));
        }
        runs.push((end, c.value_list()?));
    }
    if runs.iter().any(|(_, values)| values.is_empty()) {
        return Err(invalid("a flush's run holds no element", at));
    }
    let taken = c.taken_list()?;
    c.end()?;
    Ok((stamp, FlushedList { runs, taken }))
}

/// The lineage, checked: it holds 0 and a whole write's list, lies within
/// the positions allowed, and its removals lie inside it.
fn decode_lineage(c: &mut Cursor<'_>) -> Result<Lineage, DecodeError> {
    let at = c.at;
    let id = c.origin()?;
    let written = c.i64()?;
    let (low, high) = (c.i64()?, c.i64()?);
    let removed = c.removals()?;
    let inside = removed.iter().all(|(s, e, _)| low <= s && e <= high);
    let bounded = -MAX_POS < low && low <= 0 && 0 <= written && written <= high && high < MAX_POS;
    if !(bounded && inside) {
        return Err(invalid(
            "a lineage out of bounds, or removals outside it",
            at,
        ));
    }
    Ok(Lineage {
        id,
        written,
        low,
        high,
        removed,
    })
}

/// The runs, checked: by name, none twice, removals inside known values.
fn decode_runs(c: &mut Cursor<'_>, state: &mut ListPositions) -> Result<(), DecodeError> {
    let n = c.count(4, 22)?;
    let mut last = None;
    for _ in 0..n {
        let at = c.at;
        let id = c.run_id()?;
        let run = c.list()?;
        if last.is_some_and(|l| l >= id) {
            return Err(invalid("runs out of order", at));
        }
        last = Some(id);
        match id.end {
            End::Left => state.left.insert(id.stamp, run),
            End::Right => state.right.insert(id.stamp, run),
        };
    }
    Ok(())
}

/// A list's positions state from its bytes.
pub fn decode_list(bytes: &[u8]) -> Result<ListPositions, DecodeError> {
    let mut c = Cursor { bytes, at: 0 };
    let mut state = ListPositions {
        lineage: decode_lineage(&mut c)?,
        ..ListPositions::default()
    };
    decode_runs(&mut c, &mut state)?;
    decode_wholes(&mut c, &mut state)?;
    decode_places(&mut c, &mut state)?;
    state.bound = c.seen()?;
    c.end()?;
    Ok(state)
}

/// The whole writes held, by stamp.
fn decode_wholes(c: &mut Cursor<'_>, state: &mut ListPositions) -> Result<(), DecodeError> {
    let n = c.count(4, 23)?;
    for _ in 0..n {
        let at = c.at;
        let stamp = c.stamp()?;
        let list = c.list()?;
        let seen = c.seen()?;
        if state
            .wholes
            .last_key_value()
            .is_some_and(|(&l, _)| l >= stamp)
        {
            return Err(invalid("whole writes out of order", at));
        }
        state.wholes.insert(stamp, Whole { list, seen });
    }
    Ok(())
}

/// The places of collected runs, then the settling order, every place in
/// it.
fn decode_places(c: &mut Cursor<'_>, state: &mut ListPositions) -> Result<(), DecodeError> {
    let n = c.count(4, 50)?;
    for _ in 0..n {
        let at = c.at;
        let run = c.run_id()?;
        let lineage = c.origin()?;
        let (base, len) = (c.i64()?, c.i64()?);
        let bounded = -MAX_POS < base && (0..MAX_POS).contains(&len) && base + len < MAX_POS;
        if state
            .placed
            .last_key_value()
            .is_some_and(|(&l, _)| l >= run)
            || !bounded
        {
            return Err(invalid("places out of order or out of bounds", at));
        }
        state.placed.insert(run, Placed { lineage, base, len });
    }
    let n = c.count(4, 17)?;
    for _ in 0..n {
        let stamp = c.stamp()?;
        let at = c.at;
        let run = match c.array::<1>()? {
            [0] => None,
            [1] => Some(End::Left),
            [2] => Some(End::Right),
            [tag] => return Err(DecodeError::BadTag { tag, at }),
        };
        state
            .settling
            .push_back((stamp, run.map(|end| RunId { stamp, end })));
    }
    let settling: Vec<RunId> = state.settling.iter().filter_map(|&(_, r)| r).collect();
    if !state.placed.keys().all(|r| settling.contains(r)) {
        return Err(invalid("a place that is not settling", c.at));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(clock: u64, end: End) -> RunId {
        RunId {
            stamp: Stamp::new(clock, 1),
            end,
        }
    }

    #[test]
    fn a_pop_comes_back_as_it_went() {
        let taken = [
            Taken::Run {
                run: id(3, End::Right),
                index: 2,
            },
            Taken::Pos {
                lineage: Origin::Run(id(1, End::Left)),
                pos: -4,
            },
            Taken::Write {
                write: Stamp::new(4, 2),
                index: 0,
            },
        ];
        let bytes = encode_pop(Stamp::new(9, 2), &taken);
        assert_eq!(decode_pop(&bytes), Ok((Stamp::new(9, 2), taken.to_vec())));
        let mut bad = bytes.clone();
        bad[20] = 7;
        assert_eq!(
            decode_pop(&bad),
            Err(DecodeError::BadTag { tag: 7, at: 20 })
        );
    }

    #[test]
    fn a_flush_with_two_runs_at_one_end_or_an_empty_run_is_refused() {
        let run = |end| (end, vec![b"v".to_vec()]);
        let refused = [
            vec![run(End::Right), run(End::Right)],
            vec![run(End::Right), run(End::Left)],
            vec![(End::Left, Vec::new())],
        ];
        for runs in refused {
            let flushed = FlushedList {
                runs,
                taken: Vec::new(),
            };
            let bytes = encode_flush(Stamp::new(2, 1), &flushed);
            assert!(
                matches!(decode_flush(&bytes), Err(DecodeError::Invalid { .. })),
                "{flushed:?}"
            );
        }
    }

    #[test]
    fn a_state_that_breaks_a_rule_is_refused() {
        let mut state = ListPositions::default();
        state.local_push(End::Left, Stamp::new(1, 1), vec![b"a".to_vec()]);
        let good = encode_list(&state);
        assert_eq!(encode_list(&decode_list(&good).expect("decodes")), good);
        // low = 1: a lineage that does not hold 0.
        let mut bad = good.clone();
        bad[26] = 1;
        assert!(matches!(
            decode_list(&bad),
            Err(DecodeError::Invalid { .. })
        ));
        // A lineage reaching past the positions allowed.
        let mut far = good.clone();
        far[26..34].copy_from_slice(&(-(1i64 << 62)).to_le_bytes());
        assert!(matches!(
            decode_list(&far),
            Err(DecodeError::Invalid { .. })
        ));
        // The run's one removal span, claimed: a count with no spans.
        let mut cut = good.clone();
        let at = cut.len() - 2 - 4 - 4 - 4 - 4;
        cut[at] = 1;
        assert!(decode_list(&cut).is_err());
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_fail_without_panic(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode_pop(&b);
            let _ = decode_list(&b);
            let _ = decode_flush(&b);
        }

        #[test]
        fn a_flush_comes_back_as_it_went(
            left in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..4), 0..3),
            right in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..4), 0..3),
            popped in proptest::collection::vec((1u64..9, -3i64..9), 0..4),
        ) {
            let runs: Vec<(End, Vec<Bytes>)> = [(End::Left, left), (End::Right, right)]
                .into_iter()
                .filter(|(_, v)| !v.is_empty())
                .collect();
            let taken = popped
                .into_iter()
                .map(|(clock, at)| match at {
                    ..0 => Taken::Pos { lineage: Origin::Write(Stamp::new(clock, 2)), pos: at },
                    _ => Taken::Run { run: id(clock, End::Right), index: at },
                })
                .collect();
            let flushed = FlushedList { runs, taken };
            let bytes = encode_flush(Stamp::new(9, 1), &flushed);
            prop_assert_eq!(decode_flush(&bytes), Ok((Stamp::new(9, 1), flushed)));
            for cut in 0..bytes.len() {
                prop_assert!(decode_flush(&bytes[..cut]).is_err());
            }
        }
    }
}
