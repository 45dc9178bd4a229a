//! The hashes, sets, sorted sets and lists (see `lists`) of one node that carry merge metadata,
//! and the decisions that change them (issue 27, with `merge-elements`): a
//! local change of some elements, a local write of the whole key, the
//! peer's state, and collection. The three types merge alike: an element
//! is a hash's field (its value the field's), a set's member (its value
//! empty) or a sorted set's member (its value the score, [`score_bytes`]);
//! "field" below means any of them.
//!
//! A key's value lives in the server; the table keeps only what may
//! still conflict:
//! - `base`: the stamp of the last whole write of the key (a rewrite:
//!   `RESTORE`, a transaction, `SPOP`...) while some site may not have
//!   it. Every field without metadata of its own was written at it.
//!   Without a base, such fields are at rest: every site holds them.
//! - `expiry_of`: the stamp of the last write of the key's TTL (`EXPIRE`,
//!   `PERSIST`, a whole write, a new key) while some site may not have it:
//!   TTL writes are ordered by stamp among themselves.
//! - `fields`: fields changed since (each an [`Element`]: each origin's
//!   newest write, and what removals of it had seen).
//! - `removed`: what removals of the whole key (DEL, a rewrite) had seen.
//!
//! A removal carries what its site had applied (its own changes and the
//! peer's up to its watermark), so a field written concurrently on
//! another site survives it (observed-remove), and per field the newest
//! write wins. A key leaves the table once collected (every change at or
//! below the bound, see `merge`); a key the table does not hold is at
//! rest.
//!
//! Two sites: a site's write of a field replaces what it had seen of the
//! field rather than keeping each origin's older write (a removal that
//! covers a write also covers what that write's site had seen).

use std::collections::{BTreeMap, BTreeSet};

use hashbrown::HashMap;

use crate::converge::shrink::ShrinkWhenSparse;

use crate::converge::merge::counters::integer_of as integer_field;
use crate::converge::merge::db_key::{entry_or_default, DbKey};
use crate::converge::merge::element::{Collected, Element};
use crate::converge::merge::lists::{self, ListEdit, ListRest, Runs, REST};
use crate::converge::merge::seen::Seen;
use crate::converge::version::Stamp;

/// A field's name or value.
pub type Bytes = Vec<u8>;

/// The type of a key whose elements merge: what an element's value is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Kind {
    /// A hash: field and value.
    #[default]
    Hash = 0,
    /// A set: a member, its value empty.
    Set = 1,
    /// A sorted set: a member, its value the score (see [`score_bytes`]).
    SortedSet = 2,
    /// A list: its rest and runs of pushes (see [`lists`]).
    List = 3,
}

impl Kind {
    /// The kind numbered `n` on the wire and in the journal.
    pub fn from_u8(n: u8) -> Option<Kind> {
        match n {
            0 => Some(Kind::Hash),
            1 => Some(Kind::Set),
            2 => Some(Kind::SortedSet),
            3 => Some(Kind::List),
            _ => None,
        }
    }
}

/// A score as a sorted set's element value: the double's bits, big-endian
/// (`-0` and `0` differ, as they do in the servers, which keep the sign).
pub fn score_bytes(score: f64) -> Bytes {
    score.to_bits().to_be_bytes().to_vec()
}

/// The score an element value of a sorted set holds (`None`: not 8 bytes).
pub fn score_of(value: &[u8]) -> Option<f64> {
    Some(f64::from_bits(u64::from_be_bytes(value.try_into().ok()?)))
}

/// The most increments one element lists: one more is taken as a write of
/// the value it left (counted), which removes the ones its site applied.
pub const MAX_INCREMENTS: usize = 1024;

/// `score` as an integer, when it is one a double holds exactly (2^53 at
/// most): what increments add to the same way on every site.
pub fn integral(score: f64) -> Option<i128> {
    let exact = score.fract() == 0.0 && score.abs() <= 9_007_199_254_740_992.0;
    exact.then_some(score as i128)
}

/// A sorted set's score (see [`score_of`]) as an integer, see [`integral`].
fn integral_score(value: &[u8]) -> Option<i128> {
    integral(score_of(value)?)
}

/// Whether increments add to `value` of a `kind` element (a number): a
/// write of it removes the increments its site had applied.
pub fn counts(kind: Kind, value: &[u8]) -> bool {
    match kind {
        Kind::Hash => integer_field(value).is_some(),
        Kind::SortedSet => integral_score(value).is_some(),
        Kind::Set | Kind::List => false,
    }
}

/// What increments summing to `sum` make of `value` (`None`: absent,
/// they start from 0) in a `kind` element: a hash field's integer (kept
/// within `i64`, as HINCRBY keeps it), a sorted set's integral score; a
/// value that is no such number stays as written.
pub fn add_increments(kind: Kind, value: Option<&Bytes>, sum: i128) -> Option<Bytes> {
    let clamp = |x: i128| x.clamp(i128::from(i64::MIN), i128::from(i64::MAX));
    match (kind, value) {
        (Kind::Hash, None) => Some(clamp(sum).to_string().into_bytes()),
        (Kind::Hash, Some(v)) => match integer_field(v) {
            Some(x) => Some(clamp(x.saturating_add(sum)).to_string().into_bytes()),
            None => Some(v.clone()),
        },
        (Kind::SortedSet, None) => Some(score_bytes(sum as f64)),
        (Kind::SortedSet, Some(v)) => match integral_score(v) {
            Some(x) => Some(score_bytes(x.saturating_add(sum) as f64)),
            None => Some(v.clone()),
        },
        (Kind::Set | Kind::List, v) => v.cloned(),
    }
}

/// A hash's merge state as it travels: a change of some fields (a delta)
/// or a whole write, with the key's removals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HashState {
    /// The type of the key.
    pub kind: Kind,
    /// A write of the key's TTL alone (EXPIRE, PERSIST...): its stamp; the
    /// entry carries the expiry it left.
    pub ttl: Option<Stamp>,
    /// A whole write: its stamp; `base_fields` are every field it wrote.
    pub base: Option<Stamp>,
    /// What removals of the whole key had seen.
    pub removed: Seen,
    /// The fields written by the whole write.
    pub base_fields: Vec<(Bytes, Bytes)>,
    /// Fields with metadata of their own.
    pub elements: Vec<(Bytes, Element<Bytes>)>,
    /// Fields at rest on the sender (no metadata, no base), in a state
    /// shipped by a full sync: a receiver without metadata of the key
    /// lacks them only if it lost its data, and takes them.
    pub rest: Vec<(Bytes, Bytes)>,
    /// More slices of the state follow ([`Held::slice`]): until the last
    /// arrives, the receiver has not seen every write the slices it took
    /// name (see [`Hashes::local_whole`]).
    pub more: bool,
    /// It is the key's whole state as its sender holds it (a whole write,
    /// a delete, a state read whole, the last slice), not a change of some
    /// elements: a key whose state was arriving in slices has arrived.
    pub complete: bool,
}

impl HashState {
    /// The newest stamp in the state (`Stamp::ZERO` for none).
    pub fn newest(&self) -> Stamp {
        let writes = self.elements.iter().flat_map(|(_, e)| {
            let increments = e.increments().iter().map(|(s, _)| *s);
            e.writes().iter().map(|(s, _)| *s).chain(increments)
        });
        writes
            .chain(self.base)
            .chain(self.ttl)
            .max()
            .unwrap_or(Stamp::ZERO)
    }
}

/// What this node holds of a hash, as the decisions read it.
pub trait LocalHash {
    /// The value of field `name`, `None` when absent.
    fn field(&self, name: &[u8]) -> Option<Bytes>;
    /// Every field and value.
    fn fields(&self) -> Vec<(Bytes, Bytes)>;
    /// How many fields.
    fn field_count(&self) -> usize;
    /// The values of fields `names`, in order (`None`: absent): one read
    /// of the server for them all where it can.
    fn fields_of(&self, names: &[&[u8]]) -> Vec<Option<Bytes>> {
        names.iter().map(|n| self.field(n)).collect()
    }
}

/// What the server must do to hold the merged value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Writes {
    /// Delete the key first (every field without metadata went).
    pub clear: bool,
    /// Fields to set.
    pub set: Vec<(Bytes, Bytes)>,
    /// Fields to delete (after `clear`, none).
    pub del: Vec<Bytes>,
    /// The incoming state's expiry is the key's: its whole write or TTL
    /// write is the newest one.
    pub expiry_from_incoming: bool,
    /// The key is cleared but this node's TTL write, which the removal had
    /// not seen, stays: the expiry read before the clear is set again.
    pub expiry_survives: bool,
    /// A list's pops and pushes (what `set` and `del` say of its runs and
    /// rest, as the server does them).
    pub list: ListEdit,
    /// A list's whole write made here lost to one made at once elsewhere:
    /// what it popped or edited is undone (counted by the caller).
    pub whole_undone: bool,
}

impl Writes {
    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        !self.clear && self.set.is_empty() && self.del.is_empty()
    }
}

/// A local change of one element.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Written: its value now.
    Write(Bytes),
    /// Removed.
    Remove,
    /// Only incremented (`HINCRBY`, `ZINCRBY` by an integer), by the
    /// delta, leaving the value read after.
    Increment(i128, Bytes),
}

/// A whole write of a key as a local read found it.
#[derive(Debug, Clone, PartialEq)]
pub enum Whole {
    /// A key of a merged type with these elements.
    Elements(Kind, Vec<(Bytes, Bytes)>),
    /// The key is absent.
    Absent,
    /// The key holds another type.
    Other,
}

/// The merge metadata of one hash.
#[derive(Debug, Clone, Default)]
pub struct Held {
    kind: Kind,
    base: Option<Stamp>,
    removed: Seen,
    fields: BTreeMap<Bytes, Element<Bytes>>,
    /// The stamp of the newest write of the key's TTL (a TTL write, or a
    /// whole write, which carries one): the key's expiry is the one it
    /// set.
    expiry_of: Option<Stamp>,
    /// The number of its place in the collection order (see
    /// `Hashes::order`): older places of the key there are stale.
    place: u64,
    /// Where the pass of a collection over a big key's elements goes on
    /// (see `hashes_collect`).
    collect_from: Option<Bytes>,
}

/// Equal metadata (the place in the collection order aside).
impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        self.key_parts() == other.key_parts()
            && self.kind == other.kind
            && self.fields == other.fields
    }
}

impl Held {
    /// The key-level parts: the base, the removals of the whole key, and
    /// the stamp of the whole write whose expiry the key has.
    pub fn key_parts(&self) -> (Option<Stamp>, &Seen, Option<Stamp>) {
        (self.base, &self.removed, self.expiry_of)
    }

    /// The type of the key.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The key now holds `kind` (its metadata was of another type): the
    /// elements go, what removals of the key had seen stays.
    fn retype(&mut self, kind: Kind) {
        if self.kind != kind {
            self.kind = kind;
            self.fields.clear();
            self.base = None;
            self.expiry_of = None;
        }
    }

    /// The fields with metadata.
    pub fn elements(&self) -> impl Iterator<Item = (&Bytes, &Element<Bytes>)> {
        self.fields.iter()
    }

    /// The element of field `name`, if it has metadata.
    pub fn element_of(&self, name: &[u8]) -> Option<&Element<Bytes>> {
        self.fields.get(name)
    }

    /// Everything the writes held here cover.
    fn observed(&self) -> Seen {
        let mut seen = self.removed.clone();
        for element in self.fields.values() {
            seen.join(&element.observed());
        }
        if let Some(base) = self.base {
            seen.observe(base);
        }
        seen
    }

    /// The element of field `name`: its metadata, or one built from what
    /// the server holds (written at the base, or at rest).
    fn element(
        &mut self,
        name: &[u8],
        local: &impl LocalHash,
        cleared: bool,
    ) -> &mut Element<Bytes> {
        let base = self.base;
        self.fields.entry(name.to_vec()).or_insert_with(|| {
            let held = if cleared { None } else { local.field(name) };
            match (held, base) {
                (None, _) => Element::default(),
                (Some(v), Some(base)) => Element::from_parts(vec![(base, v)], Seen::new()),
                (Some(v), None) => Element::at_rest(v),
            }
        })
    }

    /// Every field without metadata becomes an element (before a second
    /// whole write that keeps them).
    fn make_explicit(&mut self, local: &impl LocalHash) {
        for (name, value) in local.fields() {
            if !self.fields.contains_key(&name) {
                let element = match self.base {
                    Some(base) => Element::from_parts(vec![(base, value)], Seen::new()),
                    None => Element::at_rest(value),
                };
                self.fields.insert(name, element);
            }
        }
        self.base = None;
    }

    /// This node wrote element `name` (`Some`) or removed it (`None`) at
    /// `stamp`, having applied `applied`: the element becomes that write,
    /// which replaces what this site had seen of it. A removal, and a
    /// write of a number, remove what the site had seen (the increments
    /// too). Returns the element to ship.
    fn local_write(
        &mut self,
        name: &[u8],
        stamp: Stamp,
        now: Option<Bytes>,
        applied: &Seen,
    ) -> Element<Bytes> {
        let base = self.base;
        let element = self.fields.entry(name.to_vec()).or_default();
        let seen = || {
            let mut seen = applied.clone();
            seen.join(&element.observed());
            seen.join(element.removed());
            if let Some(base) = base {
                seen.observe(base);
            }
            seen
        };
        let mut fresh = Element::default();
        match now {
            Some(value) if counts(self.kind, &value) => {
                let seen = seen();
                if !seen.is_empty() {
                    fresh.remove(&seen, &Seen::new());
                }
                fresh.write(stamp, value, &Seen::new());
            }
            Some(value) => {
                // Increments do not add to it, but they count again once a
                // number written where they were unseen wins: they stay,
                // with what had removed some of them.
                for &(s, delta) in element.increments() {
                    fresh.increment(s, delta, &Seen::new());
                }
                if !element.removed().is_empty() {
                    fresh.remove(element.removed(), &Seen::new());
                }
                fresh.write(stamp, value, &Seen::new());
            }
            None => {
                let mut seen = seen();
                seen.observe(stamp);
                fresh.remove(&seen, &Seen::new());
            }
        }
        *element = fresh.clone();
        fresh
    }

    /// This node incremented element `name` by `delta` at `stamp`, leaving
    /// `after`: the increment joins the element (one without metadata
    /// rests at the value before it). Returns the element to ship (the
    /// increment alone); `None` when the element's value with it would not
    /// be `after`, or it lists [`MAX_INCREMENTS`] (the caller writes).
    fn local_increment(
        &mut self,
        name: &[u8],
        stamp: Stamp,
        delta: i128,
        after: &Bytes,
    ) -> Option<Element<Bytes>> {
        let kind = self.kind;
        let before = match kind {
            Kind::Hash => integer_field(after)?.checked_sub(delta)?,
            Kind::SortedSet => integral_score(after)?.checked_sub(delta)?,
            Kind::Set | Kind::List => return None,
        };
        if self.base.is_some() && !self.fields.contains_key(name) {
            // Written by the whole write or absent: the value after does
            // not say which.
            return None;
        }
        let removed = self.removed.clone();
        // At rest: every site holds the value before. At 0 it may have been
        // absent, which counts the same: taken as absent (a value at rest
        // that some site lacks would come back in a sync).
        let element = self
            .fields
            .entry(name.to_vec())
            .or_insert_with(|| match (before, kind) {
                (0, _) => Element::default(),
                (x, Kind::SortedSet) => Element::at_rest(score_bytes(x as f64)),
                (x, _) => Element::at_rest(x.to_string().into_bytes()),
            });
        if element.increments().len() >= MAX_INCREMENTS {
            return None;
        }
        let mut with = element.clone();
        with.increment(stamp, delta, &Seen::new());
        let add = |v: Option<&Bytes>, sum| add_increments(kind, v, sum);
        if with.value_counted(&removed, &add).as_ref() != Some(after) {
            return None;
        }
        *element = with;
        let mut shipped = Element::default();
        shipped.increment(stamp, delta, &Seen::new());
        Some(shipped)
    }

    /// The names of the runs of a list the server holds (with a value).
    fn present_run_names(&self) -> impl Iterator<Item = &Bytes> {
        self.fields
            .iter()
            .filter(|(name, e)| name.as_slice() != REST && e.value(&self.removed).is_some())
            .map(|(name, _)| name)
    }

    /// The runs of a list the server holds (with a value), by name.
    pub(in crate::converge::merge) fn present_runs(&self) -> Runs {
        self.fields
            .iter()
            .filter(|(name, _)| name.as_slice() != REST)
            .filter_map(|(name, e)| Some((name.clone(), e.value(&self.removed)?.1.clone())))
            .collect()
    }

    /// The peer's state merged in: what the server must write. A list is
    /// read as its rest and runs (see [`lists`]).
    fn merge(&mut self, incoming: &HashState, bound: &Seen, local: &impl LocalHash) -> Writes {
        if self.kind != Kind::List {
            return self.merge_elements(incoming, bound, local);
        }
        let pre = self.present_runs();
        let rest_before = self.rest_written();
        let view = ListRest::new(local, &pre);
        let mut w = match incoming.rest.iter().find(|(n, _)| n.as_slice() == REST) {
            Some((_, rest)) => {
                // A run the sender holds with a value is not in its rest.
                let listed = |n: &[u8]| {
                    let held = |e: &Element<Bytes>| e.value(&incoming.removed).is_some();
                    incoming
                        .elements
                        .iter()
                        .any(|(name, e)| name.as_slice() == n && held(e))
                };
                let rest = lists::decode_values(rest).unwrap_or_default();
                let rest = lists::without_collected_runs(rest, &pre, listed);
                let mut incoming = incoming.clone();
                incoming.rest.retain(|(n, _)| n.as_slice() != REST);
                if !rest.is_empty() {
                    incoming
                        .rest
                        .push((REST.to_vec(), lists::encode_values(&rest)));
                }
                self.merge_elements(&incoming, bound, &view)
            }
            None => self.merge_elements(incoming, bound, &view),
        };
        let rest = w.set.iter().find(|(n, _)| n.as_slice() == REST);
        let rest = match rest {
            Some((_, v)) => Some(lists::decode_values(v).unwrap_or_default()),
            None if w.clear || w.del.iter().any(|n| n.as_slice() == REST) => Some(Vec::new()),
            None => None,
        };
        w.list = lists::edit(&pre, &self.present_runs(), rest);
        // This node's whole write replaced by a newer one that had not
        // seen it: its pops or edits, and the runs it took in, are undone.
        w.whole_undone = rest_before.is_some_and(|before| {
            self.rest_written().is_some_and(|after| after > before)
                && !incoming.removed.covers(before)
        });
        w
    }

    /// The stamp of the whole write a list's rest holds (`None`: at rest):
    /// its element's, when it has one (a merge that made the base explicit
    /// leaves the base beside it), else the base's.
    fn rest_written(&self) -> Option<Stamp> {
        let element = self
            .fields
            .get(REST)
            .and_then(|rest| rest.value(&self.removed));
        match element {
            Some((at, _)) => at.or(self.base),
            None => self.base,
        }
    }

    /// [`Held::merge`] of a hash, set or sorted set (or a list's view).
    fn merge_elements(
        &mut self,
        incoming: &HashState,
        bound: &Seen,
        local: &impl LocalHash,
    ) -> Writes {
        // Each field the merge reads is read from the server once.
        let local = &Cached::new(local);
        let mut w = Writes::default();
        let mut touched = BTreeSet::new();
        if !self.removed.dominates(&incoming.removed) {
            let unlisted_go = match self.base {
                Some(base) => incoming.removed.covers(base),
                None => incoming.removed.dominates(bound),
            };
            self.removed.join(&incoming.removed);
            if unlisted_go {
                // What rests here, it had seen (see `Element::remove`).
                self.fields.values_mut().for_each(Element::forget_rest);
            }
            if unlisted_go && (self.base.is_some() || local.field_count() > 0) {
                w.clear = true;
                w.expiry_survives = self.expiry_of.is_some_and(|e| !incoming.removed.covers(e));
                self.base = None;
            }
            touched.extend(self.fields.keys().cloned());
        }
        self.merge_whole(incoming, bound, local, &mut w, &mut touched);
        if let Some(at) = incoming.ttl {
            if !bound.covers(at) && self.expiry_of.is_none_or(|e| e < at) {
                self.expiry_of = Some(at);
                w.expiry_from_incoming = true;
            }
        }
        if !w.clear {
            // Each is read from the server (by `element` when it has no
            // metadata here, by `settle` to compare): all at once.
            local.prefetch(incoming.elements.iter().map(|(n, _)| n.as_slice()));
        }
        for (name, theirs) in &incoming.elements {
            self.element(name, local, w.clear).merge(theirs, bound);
            touched.insert(name.clone());
        }
        self.settle(touched, local, &mut w);
        self.restore_rest(incoming, local, &mut w);
        w
    }

    /// The sender's fields at rest this node lacks though it has no
    /// metadata saying why (no removal of the key, none of the field): it
    /// lost its data (a restart without persistence); they are written
    /// (with the increments held here that count, added).
    fn restore_rest(&mut self, incoming: &HashState, local: &impl LocalHash, w: &mut Writes) {
        if incoming.rest.is_empty() || !self.removed.is_empty() || w.clear {
            return;
        }
        let empty = local.field_count() == 0;
        let kind = self.kind;
        let add = |v: Option<&Bytes>, sum| add_increments(kind, v, sum);
        for (name, value) in &incoming.rest {
            match self.fields.get_mut(name) {
                // Metadata from this very state (the sender's element at
                // rest, its increments): nothing written, nothing removed
                // here.
                Some(e)
                    if e.value(&self.removed).is_none()
                        && e.removed().is_empty()
                        && (empty || local.field(name).is_none()) =>
                {
                    e.set_rest(value.clone());
                    if let Some(v) = e.value_counted(&self.removed, &add) {
                        w.set.push((name.clone(), v));
                    }
                }
                Some(_) => {}
                None if empty || local.field(name).is_none() => {
                    w.set.push((name.clone(), value.clone()));
                }
                None => {}
            }
        }
    }

    /// The incoming whole write's fields, unless every site had it or a
    /// removal here had seen it.
    fn merge_whole(
        &mut self,
        incoming: &HashState,
        bound: &Seen,
        local: &impl LocalHash,
        w: &mut Writes,
        touched: &mut BTreeSet<Bytes>,
    ) {
        let Some(at) = incoming.base else {
            return;
        };
        if bound.covers(at) || self.removed.covers(at) || self.base == Some(at) {
            return;
        }
        if self.expiry_of.is_none_or(|e| e < at) {
            self.expiry_of = Some(at);
            w.expiry_from_incoming = true;
        }
        let own: BTreeSet<&[u8]> = incoming
            .elements
            .iter()
            .map(|(n, _)| n.as_slice())
            .collect();
        let empty = w.clear || (self.base.is_none() && local.field_count() == 0);
        if !empty {
            self.make_explicit(local);
        } else {
            self.base = Some(at);
        }
        for (name, value) in &incoming.base_fields {
            if empty && !own.contains(name.as_slice()) && !self.fields.contains_key(name) {
                w.set.push((name.clone(), value.clone()));
                continue;
            }
            let element = self.element(name, local, w.clear);
            element.write(at, value.clone(), bound);
            touched.insert(name.clone());
        }
    }

    /// Writes the merged value of each touched field that differs from what
    /// the server holds.
    fn settle(&mut self, touched: BTreeSet<Bytes>, local: &Cached<impl LocalHash>, w: &mut Writes) {
        if !w.clear {
            local.prefetch(touched.iter().map(Vec::as_slice));
        }
        for name in touched {
            let Some(element) = self.fields.get(&name) else {
                continue;
            };
            let kind = self.kind;
            let add = |v: Option<&Bytes>, sum| add_increments(kind, v, sum);
            let merged = element.value_counted(&self.removed, &add);
            let held = if w.clear { None } else { local.field(&name) };
            if merged == held {
                continue;
            }
            match merged {
                Some(v) => w.set.push((name, v)),
                None => w.del.push(name),
            }
        }
    }

    /// Drops what no site can conflict with any more; whether anything is
    /// left.
    fn collect(&mut self, bound: &Seen) -> bool {
        let settled = |e: &Element<Bytes>| e.settled(&self.removed, bound);
        if self.base.is_none_or(|b| bound.covers(b))
            && self.expiry_of.is_none_or(|e| bound.covers(e))
            && bound.dominates(&self.removed)
            && self.fields.values().all(settled)
        {
            // All of it is at rest: the server holds every value.
            return false;
        }
        self.drop_settled_parts(bound);
        let frozen = self.runs_kept_in_place(bound);
        let (removed, base, kind) = (&self.removed, self.base, self.kind);
        self.fields.retain(|name, element| {
            frozen.contains(name) || keeps_metadata(element, (removed, base, kind), bound)
        });
        let still_covers = self
            .fields
            .values()
            .any(|e| e.holds_write_covered_by(&self.removed));
        // A whole write's removal goes with it: its state, shipped again
        // (a resend after a lost batch), must still remove what it had
        // seen, though every site applied all of that. So it stays while the
        // base, or any write (one a merge made of the base), is unsettled.
        let unsettled = self.base.is_some()
            || self
                .fields
                .values()
                .any(|e| !e.settled(&self.removed, bound));
        if bound.dominates(&self.removed) && !still_covers && !unsettled {
            self.removed = Seen::new();
        }
        self.base.is_some()
            || self.expiry_of.is_some()
            || !self.fields.is_empty()
            || !self.removed.is_empty()
    }

    /// Drops the base and the TTL write every site has (collection does
    /// it first: the elements the base kept then rest as they pass).
    fn drop_settled_parts(&mut self, bound: &Seen) {
        if self.base.is_some_and(|b| bound.covers(b)) {
            self.base = None;
        }
        if self.expiry_of.is_some_and(|e| bound.covers(e)) {
            self.expiry_of = None;
        }
    }

    /// A list's present runs that collection must leave as they are: a run
    /// collected joins the rest, so only the innermost runs of each end
    /// may, and none while the rest itself holds a write some site may not
    /// have (the rest would then not be the elements between the runs).
    fn runs_kept_in_place(&self, bound: &Seen) -> BTreeSet<Bytes> {
        if self.kind != Kind::List {
            return BTreeSet::new();
        }
        let rest_settled = self.base.is_none()
            && self
                .fields
                .get(REST)
                .is_none_or(|e| e.settled(&self.removed, bound));
        let mut kept = BTreeSet::new();
        for end in [lists::End::Left, lists::End::Right] {
            let mut inner_settled = rest_settled;
            // By name: innermost (oldest) first.
            let at_end = self
                .present_run_names()
                .filter(|n| lists::run_of(n).is_some_and(|(e, _)| e == end));
            for name in at_end {
                inner_settled = inner_settled
                    && self
                        .fields
                        .get(name)
                        .is_some_and(|e| e.settled(&self.removed, bound));
                if !inner_settled {
                    kept.insert(name.clone());
                }
            }
        }
        kept
    }

    /// This state as it travels whole: the base's fields read from `local`
    /// (with `rest`, the fields at rest too when there is no base).
    fn whole(&self, local: &impl LocalHash, rest: bool) -> HashState {
        if self.kind == Kind::List {
            return self.whole_of(&ListRest::new(local, &self.present_runs()), rest);
        }
        self.whole_of(local, rest)
    }

    /// [`Held::whole`] of a hash, set or sorted set (or a list's view).
    fn whole_of(&self, local: &impl LocalHash, rest: bool) -> HashState {
        let unlisted = || {
            local
                .fields()
                .into_iter()
                .filter(|(n, _)| !self.fields.contains_key(n))
                .collect()
        };
        // With the fields at rest, the elements whose value is at rest.
        let resting = || {
            let mut all: Vec<(Bytes, Bytes)> = unlisted();
            all.extend(self.fields.iter().filter_map(|(n, e)| {
                let (at, v) = e.value(&self.removed)?;
                at.is_none().then(|| (n.clone(), v.clone()))
            }));
            all
        };
        let (base_fields, rest) = match self.base {
            Some(_) => (unlisted(), Vec::new()),
            None if rest => (Vec::new(), resting()),
            None => (Vec::new(), Vec::new()),
        };
        HashState {
            kind: self.kind,
            ttl: self.expiry_of.filter(|e| self.base.is_none_or(|b| b < *e)),
            base: self.base,
            removed: self.removed.clone(),
            base_fields,
            elements: self
                .fields
                .iter()
                .map(|(n, e)| (n.clone(), e.clone()))
                .collect(),
            rest,
            more: false,
            complete: true,
        }
    }
}

/// Collects `element` of a key of `kind` whose removals are `removed` and
/// whose base is `base`; whether it keeps metadata (at rest, only while a
/// base says otherwise).
fn keeps_metadata(
    element: &mut Element<Bytes>,
    (removed, base, kind): (&Seen, Option<Stamp>, Kind),
    bound: &Seen,
) -> bool {
    let add = |v: Option<&Bytes>, sum| add_increments(kind, v, sum);
    match element.collect(removed, bound, &add) {
        Collected::Kept => true,
        Collected::Rest => base.is_some(),
        Collected::Gone => false,
    }
}

/// Elements per slice of a big key's state (see [`Held::slice`]).
pub const STATE_SLICE: usize = 4096;

impl Held {
    /// Whether it holds more than [`STATE_SLICE`] elements.
    pub fn is_big(&self) -> bool {
        self.fields.len() > STATE_SLICE
    }

    /// Whether the state ships in slices ([`Held::slice`]): it
    /// [`is_big`](Held::is_big), is not a list's, holds no whole write,
    /// and the server's `present` elements are exactly the ones written
    /// with a stamp here (none at rest: a sync ships those apart, for a
    /// peer that lost its data).
    pub fn ships_in_slices(&self, present: usize) -> bool {
        let stamped =
            |e: &&Element<Bytes>| e.value(&self.removed).is_some_and(|(at, _)| at.is_some());
        self.kind != Kind::List
            && self.base.is_none()
            && self.is_big()
            && self.fields.values().filter(stamped).count() == present
    }

    /// Up to `max` elements named after `after` (from the first: `None`)
    /// as a state, and the last name when more follow. The first slice
    /// carries the key's parts (its TTL write, its removals); the others
    /// only elements. Merged one after the other they are the state
    /// [`Held::whole`] ships (elements merge one by one, the parts once),
    /// and each is a state by itself, as a change of some elements is.
    pub fn slice(&self, after: Option<&[u8]>, max: usize) -> (HashState, Option<Bytes>) {
        use std::ops::Bound;
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut range = self.fields.range::<[u8], _>((from, Bound::Unbounded));
        let elements: Vec<(Bytes, Element<Bytes>)> = range
            .by_ref()
            .take(max.max(1))
            .map(|(n, e)| (n.clone(), e.clone()))
            .collect();
        let next = match range.next() {
            Some(_) => elements.last().map(|(n, _)| n.clone()),
            None => None,
        };
        let first = after.is_none();
        let state = HashState {
            kind: self.kind,
            ttl: self.expiry_of.filter(|_| first),
            base: None,
            removed: if first {
                self.removed.clone()
            } else {
                Seen::new()
            },
            base_fields: Vec::new(),
            elements,
            rest: Vec::new(),
            more: next.is_some(),
            complete: next.is_none(),
        };
        (state, next)
    }
}

/// A server's hash with each field read at most once.
struct Cached<'a, L> {
    local: &'a L,
    read: std::cell::RefCell<HashMap<Bytes, Option<Bytes>>>,
}

impl<'a, L: LocalHash> Cached<'a, L> {
    fn new(local: &'a L) -> Self {
        Self {
            local,
            read: std::cell::RefCell::new(HashMap::new()),
        }
    }

    /// Reads the fields of `names` not read yet, together (a state of
    /// many elements costs one read of the server, not one each).
    fn prefetch<'n>(&self, names: impl Iterator<Item = &'n [u8]>) {
        let wanted: Vec<&[u8]> = {
            let read = self.read.borrow();
            names.filter(|n| !read.contains_key(*n)).collect()
        };
        if wanted.len() < 2 {
            return;
        }
        let values = self.local.fields_of(&wanted);
        let mut read = self.read.borrow_mut();
        for (name, value) in wanted.into_iter().zip(values) {
            read.insert(name.to_vec(), value);
        }
    }
}

impl<L: LocalHash> LocalHash for Cached<'_, L> {
    fn field(&self, name: &[u8]) -> Option<Bytes> {
        if let Some(v) = self.read.borrow().get(name) {
            return v.clone();
        }
        let v = self.local.field(name);
        self.read.borrow_mut().insert(name.to_vec(), v.clone());
        v
    }
    fn fields(&self) -> Vec<(Bytes, Bytes)> {
        self.local.fields()
    }
    fn field_count(&self) -> usize {
        self.local.field_count()
    }
}

/// The hashes with merge metadata, by database and key.
#[derive(Debug, Default, Clone)]
pub struct Hashes {
    keys: HashMap<(u32, Bytes), Held>,
    /// What changed since the journal last took it (see [`Touched`]).
    touched: Vec<Touched>,
    /// Keys by their last change, oldest first, with the number of that
    /// place: collection visits them from the front (older changes pass
    /// the bound first) and stops at a run of keys it keeps.
    order: std::collections::VecDeque<(u64, (u32, Bytes))>,
    /// The next place's number.
    next_place: u64,
    /// The bound of the last collection, and whether a key changed since:
    /// a collection with neither new changes its nothing.
    collected_at: Option<Seen>,
    /// Keys whose state is arriving from the peer in slices: a slice said
    /// more follow, and no whole state of the key (`complete`) has come
    /// since (not journaled: see `hashes_arriving`).
    arriving: hashbrown::HashSet<(u32, Bytes)>,
}

/// Keys collection keeps in a row before it stops: the rest, changed
/// later, waits for the next rise of the bound.
const KEPT_RUN: usize = 64;

/// A change of the table for the journal: the key's parts, and either all
/// its fields (`whole`) or the ones named.
#[derive(Debug, Clone, PartialEq)]
pub struct Touched {
    /// Database and key.
    pub key: (u32, Bytes),
    /// Every field may have changed (and fields may have gone).
    pub whole: bool,
    /// The key's parts changed (its TTL's stamp), not only the fields.
    pub parts: bool,
    /// The fields that changed, when not whole.
    pub fields: Vec<Bytes>,
}

impl Hashes {
    /// Hashes with metadata.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether none has metadata.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether `key` of `db` has metadata naming a change `wanted` asks
    /// for (a write, a whole write, or what a removal had seen): a sync
    /// since a watermark ships such a key whatever its version's origin.
    pub fn changed_after(&self, db: u32, key: &[u8], wanted: impl Fn(Stamp) -> bool) -> bool {
        let Some(held) = (!self.keys.is_empty()).then(|| self.get(db, key)).flatten() else {
            return false;
        };
        let seen_wanted = |s: &Seen| {
            s.iter()
                .any(|(node, clock)| wanted(Stamp::new(clock, node)))
        };
        held.base.is_some_and(&wanted)
            || held.expiry_of.is_some_and(&wanted)
            || seen_wanted(&held.removed)
            || held.fields.values().any(|e| {
                e.writes().iter().any(|(s, _)| wanted(*s))
                    || e.increments().iter().any(|(s, _)| wanted(*s))
                    || seen_wanted(e.removed())
            })
    }

    /// Whether `key` of `db` has metadata.
    pub fn contains(&self, db: u32, key: &[u8]) -> bool {
        !self.keys.is_empty() && self.keys.contains_key(&DbKey(db, key))
    }

    /// The metadata of `key`, if any.
    pub fn get(&self, db: u32, key: &[u8]) -> Option<&Held> {
        self.keys.get(&DbKey(db, key))
    }

    /// Whether `key`'s state is arriving in slices (see
    /// `hashes_arriving`): a whole write of it reads the key's elements.
    pub fn is_arriving(&self, db: u32, key: &[u8]) -> bool {
        !self.arriving.is_empty() && self.arriving.contains(&DbKey(db, key))
    }

    /// `key`'s state is no longer taken for arriving in slices (a whole
    /// write of it whose elements could not be read).
    pub fn end_arrival(&mut self, db: u32, key: &[u8]) {
        self.arrived(db, key);
    }

    /// `key`'s state is no longer arriving in slices.
    fn arrived(&mut self, db: u32, key: &[u8]) {
        if !self.arriving.is_empty() {
            self.arriving.remove(&DbKey(db, key));
        }
    }

    /// Forgets `key` (a write of another type won); whether it was held.
    pub fn forget(&mut self, db: u32, key: &[u8]) -> bool {
        self.arrived(db, key);
        let held = self.keys.remove(&DbKey(db, key)).is_some();
        if held {
            self.note((db, key), true, Vec::new());
        }
        held
    }

    /// A change of `key` (held from now on): queued for collection and
    /// noted for the journal.
    fn touch(&mut self, (db, key): (u32, &[u8]), whole: bool, fields: Vec<Bytes>) {
        // A key new to the table journals its parts too (a record of
        // them from before it was collected may be in the journal).
        let new = self.queue((db, key));
        self.note((db, key), whole || new, fields);
    }

    /// Notes a change of `key` for the journal.
    fn note(&mut self, (db, key): (u32, &[u8]), whole: bool, fields: Vec<Bytes>) {
        self.touched.push(Touched {
            key: (db, key.to_vec()),
            whole,
            parts: false,
            fields,
        });
    }

    /// Notes that `key`'s parts changed (its TTL's stamp) for the journal.
    fn note_parts(&mut self, (db, key): (u32, &[u8])) {
        if let Some(last) = self
            .touched
            .last_mut()
            .filter(|t| t.key.0 == db && t.key.1 == key)
        {
            last.parts = true;
        }
    }

    /// The changes since the last call, for the journal.
    pub fn take_touched(&mut self) -> Vec<Touched> {
        std::mem::take(&mut self.touched)
    }

    /// Sets what a journal record says of `key`: its parts (`None`: not
    /// held) and, when `clear`, no field metadata before the records of
    /// its fields that follow.
    pub fn restore_key(
        &mut self,
        (db, key): (u32, &[u8]),
        parts: Option<(Option<Stamp>, Seen, Option<Stamp>, Kind)>,
        clear: bool,
    ) {
        let k = (db, key.to_vec());
        let Some((base, removed, expiry_of, kind)) = parts else {
            self.keys.remove(&k);
            return;
        };
        self.queue((db, key));
        let held = self.keys.entry(k).or_default();
        if clear {
            held.fields.clear();
        }
        held.kind = kind;
        held.base = base;
        held.removed = removed;
        held.expiry_of = expiry_of;
    }

    /// Sets the element of a field as a journal record says (`None`: it
    /// has no metadata).
    pub fn restore_field(
        &mut self,
        (db, key): (u32, &[u8]),
        name: &[u8],
        element: Option<Element<Bytes>>,
    ) {
        self.queue((db, key));
        let held = entry_or_default(&mut self.keys, (db, key));
        match element {
            Some(e) => {
                held.fields.insert(name.to_vec(), e);
            }
            None => {
                held.fields.remove(name);
            }
        }
    }

    /// Every held key with its metadata (the RDB aux data).
    pub fn entries(&self) -> impl Iterator<Item = (u32, &[u8], &Held)> {
        self.keys.iter().map(|((db, k), h)| (*db, k.as_slice(), h))
    }

    /// A local change of some elements of a `kind` key stamped `stamp`
    /// (`changes`: each element's value after it, `None` when removed).
    /// `applied` is what this node had applied before it; `created`: the
    /// key was absent before, so everything applied of it was removed.
    /// Returns the delta to ship.
    pub fn local_fields(
        &mut self,
        key: (u32, &[u8], Kind),
        stamp: Stamp,
        (changes, ttl): (Vec<(Bytes, Option<Bytes>)>, bool),
        applied: &Seen,
        created: bool,
    ) -> HashState {
        let changes = changes
            .into_iter()
            .map(|(name, now)| match now {
                Some(v) => (name, Change::Write(v)),
                None => (name, Change::Remove),
            })
            .collect();
        self.local_changes(key, stamp, (changes, ttl), applied, created)
            .0
    }

    /// [`Hashes::local_fields`] with increments: each `Change` of an
    /// element. Returns the delta to ship and how many increments were
    /// taken as writes of the value they left (the table's value was not
    /// it, or the element lists [`MAX_INCREMENTS`]: counted by the caller).
    pub fn local_changes(
        &mut self,
        (db, key, kind): (u32, &[u8], Kind),
        stamp: Stamp,
        (changes, ttl): (Vec<(Bytes, Change)>, bool),
        applied: &Seen,
        created: bool,
    ) -> (HashState, usize) {
        let names = changes.iter().map(|(n, _)| n.clone()).collect();
        let held = self.keys.get(&DbKey(db, key));
        let created = created || held.is_some_and(|h| h.kind != kind);
        self.touch((db, key), created, names);
        if ttl || created {
            self.note_parts((db, key));
        }
        let held = entry_or_default(&mut self.keys, (db, key));
        if created {
            held.removed.join(applied);
            held.fields.clear();
            held.base = None;
        }
        // A new key's TTL (none, or one set since) is written with it.
        let ttl = ttl || created;
        if ttl {
            held.expiry_of = Some(stamp);
        }
        held.kind = kind;
        let mut written_instead = 0;
        let mut elements = Vec::with_capacity(changes.len());
        for (name, change) in changes {
            let shipped = match change {
                Change::Increment(delta, after) => held
                    .local_increment(&name, stamp, delta, &after)
                    .unwrap_or_else(|| {
                        written_instead += 1;
                        held.local_write(&name, stamp, Some(after), applied)
                    }),
                Change::Write(value) => held.local_write(&name, stamp, Some(value), applied),
                Change::Remove => held.local_write(&name, stamp, None, applied),
            };
            elements.push((name, shipped));
        }
        let state = HashState {
            kind,
            ttl: ttl.then_some(stamp),
            base: None,
            removed: held.removed.clone(),
            base_fields: Vec::new(),
            elements,
            rest: Vec::new(),
            more: false,
            complete: false,
        };
        (state, written_instead)
    }

    /// A local write of the whole key stamped `stamp` (`applied`: what this
    /// node had applied before it). Returns the state to ship; `None` when
    /// the key now holds another type (it ships plain, and leaves the
    /// table) or was absent and not held (a plain delete says it all).
    pub fn local_whole(
        &mut self,
        (db, key): (u32, &[u8]),
        stamp: Stamp,
        now: Whole,
        applied: &Seen,
    ) -> Option<HashState> {
        let k = (db, key.to_vec());
        match now {
            Whole::Other => {
                self.forget(db, key);
                return None;
            }
            Whole::Absent if !self.keys.contains_key(&k) => return None,
            _ => {}
        }
        self.touch((db, key), true, Vec::new());
        let arriving = self.arriving.contains(&DbKey(db, key));
        let held = self.keys.entry(k).or_default();
        let same_kind = match &now {
            Whole::Elements(kind, _) => *kind == held.kind,
            _ => true,
        };
        if arriving && same_kind && held.kind != Kind::List {
            let now = match now {
                Whole::Elements(kind, fields) => Some((kind, fields)),
                _ => None,
            };
            return Some(held.whole_element_by_element(stamp, now, applied));
        }
        let mut seen = held.observed();
        seen.join(applied);
        held.removed.join(&seen);
        held.fields.clear();
        let base_fields = match now {
            Whole::Elements(kind, fields) => {
                held.kind = kind;
                held.base = Some(stamp);
                held.expiry_of = Some(stamp);
                fields
            }
            _ => {
                held.base = None;
                Vec::new()
            }
        };
        Some(HashState {
            kind: held.kind,
            ttl: None,
            base: held.base,
            removed: held.removed.clone(),
            base_fields,
            elements: Vec::new(),
            rest: Vec::new(),
            more: false,
            complete: true,
        })
    }

    /// The peer's state of `key` merged in: what the server must write.
    pub fn remote(
        &mut self,
        (db, key): (u32, &[u8]),
        incoming: &HashState,
        bound: &Seen,
        local: &impl LocalHash,
    ) -> Writes {
        let whole =
            incoming.base.is_some() || !incoming.removed.is_empty() || incoming.ttl.is_some();
        let names = incoming.elements.iter().map(|(n, _)| n.clone()).collect();
        let held = self.keys.get(&DbKey(db, key));
        let whole = whole || held.is_some_and(|h| h.kind != incoming.kind);
        self.touch((db, key), whole, names);
        if incoming.more {
            self.arriving.insert((db, key.to_vec()));
        } else if incoming.complete {
            self.arrived(db, key);
        }
        let held = entry_or_default(&mut self.keys, (db, key));
        held.retype(incoming.kind);
        held.merge(incoming, bound, local)
    }

    /// This node deleted `key` (at rest, so not recorded then) having
    /// applied `seen`: the removal goes into its metadata, so that a state
    /// of the key shipped later still carries it.
    pub fn note_delete(&mut self, (db, key): (u32, &[u8]), seen: &Seen) {
        self.touch((db, key), true, Vec::new());
        if let Some(held) = self.keys.get_mut(&DbKey(db, key)) {
            held.removed.join(seen);
        }
    }

    /// The peer's plain delete of `key`, made having applied `applied`
    /// (its bound notice): merged as a removal of the whole key when the
    /// key is held, `None` otherwise (every site holds a key at rest: the
    /// delete applies as any).
    pub fn remote_delete(
        &mut self,
        (db, key): (u32, &[u8]),
        applied: &Seen,
        bound: &Seen,
        local: &impl LocalHash,
    ) -> Option<Writes> {
        // The peer's delete is its whole state of the key.
        self.arrived(db, key);
        if !self.keys.contains_key(&DbKey(db, key)) {
            return None;
        }
        self.touch((db, key), true, Vec::new());
        let held = self.keys.get_mut(&DbKey(db, key))?;
        let removal = HashState {
            kind: held.kind,
            ttl: None,
            removed: applied.clone(),
            ..HashState::default()
        };
        Some(held.merge(&removal, bound, local))
    }

    /// The whole state of a held key, to ship (catch-up, full sync; with
    /// `rest`, its fields at rest too).
    pub fn whole(
        &self,
        db: u32,
        key: &[u8],
        local: &impl LocalHash,
        rest: bool,
    ) -> Option<HashState> {
        Some(self.get(db, key)?.whole(local, rest))
    }

    /// Puts `key` at the back of the collection order (it just changed);
    /// whether it was new to the table.
    fn queue(&mut self, (db, key): (u32, &[u8])) -> bool {
        let place = self.next_place;
        self.next_place += 1;
        let k = (db, key.to_vec());
        let new = match self.keys.get_mut(&k) {
            Some(held) => {
                held.place = place;
                false
            }
            None => {
                self.keys.insert(
                    k.clone(),
                    Held {
                        place,
                        ..Held::default()
                    },
                );
                true
            }
        };
        self.order.push_back((place, k));
        self.collected_at = None;
        if self.order.len() > 2 * self.keys.len() + 1024 {
            // Keys changed again and again between collections (a link
            // down): only each key's last place is kept.
            let keys = &self.keys;
            self.order
                .retain(|(place, k)| keys.get(k).is_some_and(|h| h.place == *place));
        }
        new
    }

    /// Drops the metadata `bound` passed, oldest changes first, until a run
    /// of keys it keeps; the keys that left the table.
    pub fn collect(&mut self, bound: &Seen) -> Vec<(u32, Bytes)> {
        if self.collected_at.as_ref() == Some(bound) {
            return Vec::new();
        }
        self.collected_at = Some(bound.clone());
        let mut gone = Vec::new();
        let mut kept = 0;
        for _ in 0..self.order.len() {
            let Some((place, k)) = self.order.pop_front() else {
                break;
            };
            let Some(held) = self.keys.get_mut(&k).filter(|h| h.place == place) else {
                // Forgotten, or changed since: a later place holds it.
                continue;
            };
            match held.collect_some(bound, collect_slices::COLLECT_BUDGET) {
                None => {
                    // A big key's pass goes on at the next collection, first.
                    self.order.push_front((place, k));
                    self.collected_at = None;
                    break;
                }
                Some(true) => {
                    self.order.push_back((place, k));
                    kept += 1;
                    if kept == KEPT_RUN {
                        break;
                    }
                }
                Some(false) => {
                    self.keys.remove(&k);
                    if !self.arriving.is_empty() {
                        self.arriving.remove(&k);
                    }
                    gone.push(k);
                }
            }
        }
        self.keys.shrink_when_sparse();
        self.order.shrink_when_sparse();
        self.arriving.shrink_when_sparse();
        gone
    }

    /// Forgets every key of `db` (every database: `None`), flushed.
    pub fn flushed(&mut self, db: Option<u32>) {
        self.keys.retain(|(d, _), _| db.is_some_and(|f| f != *d));
        self.arriving.retain(|(d, _)| db.is_some_and(|f| f != *d));
    }

    /// Swaps databases `a` and `b`.
    pub fn swap_dbs(&mut self, a: u32, b: u32) {
        use crate::converge::merge::db_key::{swap_dbs_in, swapped};
        for (_, (d, _)) in self.order.iter_mut() {
            *d = swapped(*d, a, b);
        }
        swap_dbs_in(&mut self.keys, a, b);
        let arriving = std::mem::take(&mut self.arriving);
        self.arriving = (arriving.into_iter())
            .map(|(d, k)| (swapped(d, a, b), k))
            .collect();
    }
}

#[cfg(test)]
#[path = "hashes_tests.rs"]
mod tests;

#[path = "hashes_arriving.rs"]
mod arriving;

#[path = "hashes_collect.rs"]
mod collect_slices;
