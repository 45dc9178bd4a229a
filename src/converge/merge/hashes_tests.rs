use super::*;

use crate::converge::merge::hashes_sim::Server as Map;

fn map(pairs: &[(&str, &str)]) -> Map {
    Map(pairs
        .iter()
        .map(|(f, v)| (f.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect())
}

fn seen(pairs: &[(u64, u64)]) -> Seen {
    pairs.iter().copied().collect()
}

const K: (u32, &[u8]) = (0, b"h");
const KH: (u32, &[u8], Kind) = (0, b"h", Kind::Hash);

#[test]
fn fields_written_on_both_sites_are_all_set() {
    let mut a = Hashes::default();
    let change = vec![(b"a".to_vec(), Some(b"1".to_vec()))];
    let delta = a.local_fields(
        KH,
        Stamp::new(10, 1),
        (change, false),
        &seen(&[(1, 9)]),
        true,
    );
    let mut b = Hashes::default();
    let change = vec![(b"b".to_vec(), Some(b"2".to_vec()))];
    b.local_fields(
        KH,
        Stamp::new(9, 2),
        (change, false),
        &seen(&[(2, 8)]),
        true,
    );
    let mut here = map(&[("b", "2")]);
    let w = b.remote(K, &delta, &Seen::new(), &here);
    if w.clear {
        here.0.clear();
    }
    here.0.extend(w.set);
    assert!(w.del.is_empty());
    assert_eq!(here.fields().len(), 2, "both fields: {:?}", here.0);
}

#[test]
fn a_delete_keeps_the_fields_it_had_not_seen() {
    let mut b = Hashes::default();
    // B wrote `new` at (12, 2), unseen by A's delete.
    let change = vec![(b"new".to_vec(), Some(b"x".to_vec()))];
    b.local_fields(
        KH,
        Stamp::new(12, 2),
        (change, false),
        &seen(&[(2, 11)]),
        false,
    );
    let here = map(&[("old", "o"), ("new", "x")]);
    let mut a = Hashes::default();
    a.keys.insert((0, b"h".to_vec()), Held::default());
    let delete = a
        .local_whole(
            K,
            Stamp::new(13, 1),
            Whole::Absent,
            &seen(&[(1, 12), (2, 5)]),
        )
        .expect("a held key's delete ships its state");
    let w = b.remote(K, &delete, &seen(&[(1, 5), (2, 5)]), &here);
    assert!(w.clear, "the fields at rest went");
    assert_eq!(w.set, vec![(b"new".to_vec(), b"x".to_vec())]);
}

#[test]
fn a_removal_of_a_field_loses_to_a_concurrent_write_of_it() {
    let mut a = Hashes::default();
    let mut b = Hashes::default();
    let here_a = map(&[("f", "v")]);
    let del = a.local_fields(
        KH,
        Stamp::new(10, 1),
        (vec![(b"f".to_vec(), None)], false),
        &seen(&[(1, 9)]),
        false,
    );
    let set = vec![(b"f".to_vec(), Some(b"w".to_vec()))];
    let write = b.local_fields(KH, Stamp::new(9, 2), (set, false), &seen(&[(2, 8)]), false);
    let on_a = a.remote(K, &write, &Seen::new(), &map(&[]));
    assert_eq!(on_a.set, vec![(b"f".to_vec(), b"w".to_vec())]);
    let on_b = b.remote(K, &del, &Seen::new(), &map(&[("f", "w")]));
    assert!(on_b.is_empty(), "{on_b:?}");
    let _ = here_a;
}

#[test]
fn metadata_is_collected_once_the_bound_passes_it() {
    let mut a = Hashes::default();
    let change = vec![(b"f".to_vec(), Some(b"v".to_vec()))];
    a.local_fields(
        KH,
        Stamp::new(10, 1),
        (change, false),
        &seen(&[(1, 9)]),
        true,
    );
    assert!(a.collect(&seen(&[(1, 9)])).is_empty());
    assert_eq!(a.len(), 1);
    assert_eq!(
        a.collect(&seen(&[(1, 10), (2, 3)])),
        vec![(0, b"h".to_vec())]
    );
    assert!(a.is_empty());
}

#[test]
fn a_write_of_another_type_leaves_the_table() {
    let mut a = Hashes::default();
    let change = vec![(b"f".to_vec(), Some(b"v".to_vec()))];
    a.local_fields(KH, Stamp::new(10, 1), (change, false), &Seen::new(), true);
    assert!(a
        .local_whole(K, Stamp::new(11, 1), Whole::Other, &Seen::new())
        .is_none());
    assert!(!a.contains(0, b"h"));
    assert!(
        a.local_whole(K, Stamp::new(12, 1), Whole::Absent, &Seen::new())
            .is_none(),
        "a delete of a key not held ships plain"
    );
}

#[test]
fn a_key_changed_again_and_again_keeps_one_place_in_the_collection_order() {
    let mut a = Hashes::default();
    for i in 0..10_000u64 {
        let change = vec![(b"f".to_vec(), Some(i.to_le_bytes().to_vec()))];
        a.local_fields(
            KH,
            Stamp::new(i + 1, 1),
            (change, false),
            &Seen::new(),
            false,
        );
        let _ = a.take_touched();
    }
    assert!(a.order.len() <= 2 * a.len() + 1025, "{}", a.order.len());
    assert_eq!(a.collect(&seen(&[(1, 10_000)])), vec![(0, b"h".to_vec())]);
}

#[test]
fn a_key_of_another_kind_starts_its_elements_afresh_and_keeps_its_removals() {
    let mut a = Hashes::default();
    let change = vec![(b"f".to_vec(), Some(b"v".to_vec()))];
    a.local_fields(KH, Stamp::new(10, 1), (change, false), &Seen::new(), true);
    a.local_whole(K, Stamp::new(11, 1), Whole::Absent, &seen(&[(2, 4)]))
        .expect("a held key's delete ships");
    // The key comes back as a set: its hash fields are not its members.
    let member = vec![(b"m".to_vec(), Some(Vec::new()))];
    let delta = a.local_fields(
        (0, b"h", Kind::Set),
        Stamp::new(12, 1),
        (member, false),
        &seen(&[(1, 11), (2, 4)]),
        false,
    );
    assert_eq!(delta.kind, Kind::Set);
    let held = a.get(0, b"h").expect("held");
    assert_eq!(held.kind(), Kind::Set);
    assert_eq!(held.elements().count(), 1);
    assert!(held.key_parts().1.covers(Stamp::new(11, 1)));
    // The peer's sorted set meets the set's metadata: it takes the key's
    // kind, its members start afresh.
    let mut zset = HashState {
        kind: Kind::SortedSet,
        ..HashState::default()
    };
    zset.elements.push((b"z".to_vec(), {
        let mut e = Element::default();
        e.write(Stamp::new(13, 2), score_bytes(1.5), &Seen::new());
        e
    }));
    let w = a.remote(K, &zset, &Seen::new(), &map(&[]));
    assert_eq!(w.set, vec![(b"z".to_vec(), score_bytes(1.5))]);
    let held = a.get(0, b"h").expect("held");
    assert_eq!((held.kind(), held.elements().count()), (Kind::SortedSet, 1));
}

#[test]
fn scores_as_bytes_round_trip_with_their_sign() {
    for s in [0.0, 1.5, -2.25, f64::INFINITY, f64::NEG_INFINITY, 1e-300] {
        assert_eq!(score_of(&score_bytes(s)), Some(s));
    }
    assert_ne!(
        score_bytes(-0.0),
        score_bytes(0.0),
        "the servers keep the sign"
    );
    assert_eq!(format!("{:e}", -0.0f64), "-0e0", "as ZADD's argument");
    assert_eq!(score_of(b"short"), None);
}

#[test]
fn a_new_set_s_second_change_removes_nothing() {
    let mut a = Hashes::default();
    let set = (0, &b"s"[..], Kind::Set);
    let first = vec![(b"m1".to_vec(), Some(Vec::new()))];
    let applied = seen(&[(2, 4)]);
    a.local_fields(set, Stamp::new(10, 1), (first, false), &applied, false);
    let second = vec![(b"m2".to_vec(), Some(Vec::new()))];
    let delta = a.local_fields(set, Stamp::new(11, 1), (second, false), &applied, false);
    assert!(delta.removed.is_empty(), "{delta:?}");
    assert_eq!(a.get(0, b"s").map(Held::kind), Some(Kind::Set));
}

#[test]
fn a_ttl_write_wins_by_stamp_writes_no_element_and_waits_for_the_bound() {
    let mut a = Hashes::default();
    let mut b = Hashes::default();
    let here = map(&[("f", "v")]);
    // B removes f (seen at rest); A then writes the TTL alone, newer.
    let del = b.local_fields(
        KH,
        Stamp::new(10, 2),
        (vec![(b"f".to_vec(), None)], false),
        &seen(&[(2, 9)]),
        false,
    );
    let ttl = a.local_fields(
        KH,
        Stamp::new(11, 1),
        (Vec::new(), true),
        &seen(&[(1, 10)]),
        false,
    );
    assert_eq!(ttl.ttl, Some(Stamp::new(11, 1)));
    let w = a.remote(K, &del, &Seen::new(), &here);
    assert_eq!(w.del, vec![b"f".to_vec()], "the TTL wrote no field");
    let w = b.remote(K, &ttl, &Seen::new(), &map(&[]));
    assert!(w.expiry_from_incoming && w.set.is_empty());
    // An older TTL write loses.
    let mut c = Hashes::default();
    let old = c.local_fields(
        KH,
        Stamp::new(5, 3),
        (Vec::new(), true),
        &Seen::new(),
        false,
    );
    assert!(
        !b.remote(K, &old, &Seen::new(), &map(&[]))
            .expiry_from_incoming
    );
    // Kept until the bound covers the TTL write, then collected.
    assert!(b.collect(&seen(&[(2, 10)])).is_empty());
    assert_eq!(
        b.collect(&seen(&[(1, 11), (2, 10), (3, 5)])),
        vec![(0, b"h".to_vec())]
    );
}

#[test]
fn a_new_key_writes_its_ttl_and_a_sync_finds_a_ttl_write() {
    let mut a = Hashes::default();
    let change = (vec![(b"f".to_vec(), Some(b"v".to_vec()))], false);
    let delta = a.local_fields(KH, Stamp::new(10, 1), change, &Seen::new(), true);
    assert_eq!(
        delta.ttl,
        Some(Stamp::new(10, 1)),
        "a new key has its own TTL"
    );
    let ttl = a.local_fields(
        KH,
        Stamp::new(11, 1),
        (Vec::new(), true),
        &Seen::new(),
        false,
    );
    assert_eq!(ttl.ttl, Some(Stamp::new(11, 1)));
    assert!(a.changed_after(0, b"h", |s| s == Stamp::new(11, 1)));
}

#[test]
fn a_ttl_write_the_removal_had_not_seen_survives_the_clear() {
    let mut b = Hashes::default();
    let ttl = (Vec::new(), true);
    b.local_fields(KH, Stamp::new(10, 2), ttl, &seen(&[(2, 9)]), false);
    let here = map(&[("old", "o")]);
    // A's delete had seen only the fields at rest.
    let delete = HashState {
        removed: seen(&[(1, 12), (2, 5)]),
        ..HashState::default()
    };
    let w = b.remote(K, &delete, &seen(&[(1, 5), (2, 5)]), &here);
    assert!(w.clear && w.expiry_survives, "{w:?}");
    let seen_it = HashState {
        removed: seen(&[(1, 13), (2, 10)]),
        ..HashState::default()
    };
    let w = b.remote(K, &seen_it, &seen(&[(1, 5), (2, 5)]), &map(&[("x", "1")]));
    assert!(!w.expiry_survives, "{w:?}");
}

#[test]
fn increments_add_to_numbers_and_leave_other_values() {
    use crate::converge::merge::hashes::{add_increments, counts};
    let b = |s: &str| s.as_bytes().to_vec();
    assert_eq!(add_increments(Kind::Hash, Some(&b("10")), -3), Some(b("7")));
    assert_eq!(add_increments(Kind::Hash, None, 4), Some(b("4")));
    assert_eq!(
        add_increments(Kind::Hash, Some(&b("abc")), 4),
        Some(b("abc"))
    );
    assert_eq!(
        add_increments(Kind::Hash, Some(&b("9223372036854775800")), 100),
        Some(b("9223372036854775807")),
        "kept within i64, as HINCRBY keeps it"
    );
    let z = |x: f64| score_bytes(x);
    assert_eq!(
        add_increments(Kind::SortedSet, Some(&z(2.0)), 3),
        Some(z(5.0))
    );
    assert_eq!(
        add_increments(Kind::SortedSet, Some(&z(2.5)), 3),
        Some(z(2.5))
    );
    assert_eq!(add_increments(Kind::SortedSet, None, -2), Some(z(-2.0)));
    assert!(counts(Kind::Hash, b"-12") && !counts(Kind::Hash, b"012"));
    assert!(counts(Kind::SortedSet, &z(3.0)) && !counts(Kind::SortedSet, &z(0.25)));
    assert!(!counts(Kind::Set, b""));
}

#[test]
fn an_increment_whose_value_disagrees_with_the_table_is_taken_as_a_write() {
    use crate::converge::merge::hashes::Change;
    let mut a = Hashes::default();
    let f = || b"f".to_vec();
    let key = (0, &b"h"[..], Kind::Hash);
    let one = vec![(f(), Change::Increment(5, b"5".to_vec()))];
    let (state, written) =
        a.local_changes(key, Stamp::new(1, 1), (one, false), &Seen::new(), false);
    assert_eq!(written, 0);
    assert_eq!(state.elements[0].1.increments(), &[(Stamp::new(1, 1), 5)]);
    // The table says 5 + 2 = 7, the server left 9 (a change it missed).
    let two = vec![(f(), Change::Increment(2, b"9".to_vec()))];
    let (state, written) =
        a.local_changes(key, Stamp::new(2, 1), (two, false), &Seen::new(), false);
    assert_eq!(written, 1);
    assert_eq!(
        state.elements[0].1.writes(),
        &[(Stamp::new(2, 1), b"9".to_vec())]
    );
}

#[test]
fn a_sync_s_value_at_rest_is_not_added_to_a_field_this_node_holds() {
    use crate::converge::merge::hashes::Change;
    // A incremented the absent f by 5 (its element: the increment alone,
    // back from its AOF after a restart); B collected it (f rests at 5
    // there) and incremented by 1. B's sync: the increment, and f at rest
    // at 5. A holds 5: it ends at 6, not 5 + 5 + 1.
    let mut a = Hashes::default();
    let inc = |d: i128, after: &str| vec![(b"f".to_vec(), Change::Increment(d, after.into()))];
    a.local_changes(
        KH,
        Stamp::new(1, 1),
        (inc(5, "5"), false),
        &Seen::new(),
        true,
    );
    let mut b = Hashes::default();
    let bound = seen(&[(1, 1)]);
    let (delta, _) = b.local_changes(KH, Stamp::new(2, 2), (inc(1, "6"), false), &bound, false);
    let mut sync = delta;
    sync.rest = vec![(b"f".to_vec(), b"5".to_vec())];
    let w = a.remote(K, &sync, &Seen::new(), &map(&[("f", "5")]));
    let last = w
        .set
        .iter()
        .rev()
        .find(|(f, _)| f == b"f")
        .map(|(_, v)| v.clone());
    assert_eq!(last, Some(b"6".to_vec()), "{w:?}");
}

#[test]
fn a_list_s_rest_was_written_by_its_element_s_write_before_its_base() {
    // A merge made the base explicit (the rest an element holding both
    // whole writes) and left the base: the rest holds the newer write.
    let (mine, theirs) = (Stamp::new(2, 1), Stamp::new(3, 2));
    let mut held = Held {
        kind: Kind::List,
        base: Some(mine),
        ..Held::default()
    };
    assert_eq!(held.rest_written(), Some(mine));
    let rest = Element::from_parts(
        vec![(mine, b"a".to_vec()), (theirs, b"b".to_vec())],
        Seen::new(),
    );
    held.fields.insert(REST.to_vec(), rest);
    assert_eq!(held.rest_written(), Some(theirs));
}

#[test]
fn a_removal_stays_while_a_write_it_came_with_is_unsettled() {
    // The removal of a whole write made explicit by a merge (no base, its
    // fields elements written at its stamp) stays until they settle: a
    // resend of the state must still remove what it had seen.
    let whole = Stamp::new(5, 2);
    let mut held = Held {
        kind: Kind::Hash,
        removed: seen(&[(1, 3)]),
        ..Held::default()
    };
    held.fields.insert(
        b"f".to_vec(),
        Element::from_parts(vec![(whole, b"v".to_vec())], Seen::new()),
    );
    let bound = seen(&[(1, 3), (2, 4)]);
    assert!(held.collect(&bound), "the write at (5, 2) is not settled");
    assert_eq!(held.removed, seen(&[(1, 3)]), "the removal stays");
    assert!(
        !held.collect(&seen(&[(1, 3), (2, 5)])),
        "all settled: it goes"
    );
}

/// The server map after `w`.
fn written(here: Map, w: &Writes) -> Map {
    here.written(w)
}

/// A's big state: the key deleted, then `n` fields written a slice at
/// a time (the first write recreates it: a removal of what A had
/// applied), a TTL write with the second; and its server.
fn big_held(n: usize) -> (Hashes, Map) {
    let mut a = Hashes::default();
    let names: Vec<Bytes> = (0..n).map(|i| format!("f{i:06}").into_bytes()).collect();
    let mut server = Map(Default::default());
    for (round, chunk) in names.chunks(STATE_SLICE).enumerate() {
        let value = format!("a{round}").into_bytes();
        let change: Vec<(Bytes, Option<Bytes>)> = chunk
            .iter()
            .map(|f| (f.clone(), Some(value.clone())))
            .collect();
        server
            .0
            .extend(chunk.iter().map(|f| (f.clone(), value.clone())));
        let stamp = Stamp::new(20 + round as u64, 1);
        let applied = seen(&[(1, 19), (2, 7)]);
        a.local_fields(KH, stamp, (change, round == 1), &applied, round == 0);
    }
    (a, server)
}

/// `held`'s slices merged one after the other into `b` over `here`:
/// the server after them, and how many there were.
fn merge_in_slices(held: &Held, b: &mut Hashes, mut here: Map) -> (Map, usize) {
    let (mut after, mut slices) = (None, 0);
    loop {
        let (state, next) = held.slice(after.as_deref(), STATE_SLICE);
        assert!(state.elements.len() <= STATE_SLICE);
        assert_eq!(
            state.removed.is_empty(),
            after.is_some(),
            "parts once, first"
        );
        let w = b.remote(K, &state, &Seen::new(), &here);
        here = written(here, &w);
        slices += 1;
        match next {
            Some(n) => after = Some(n),
            None => return (here, slices),
        }
    }
}

#[test]
fn a_big_state_merged_a_slice_at_a_time_is_the_whole_state_merged() {
    let n = 3 * STATE_SLICE + 5;
    let (a, server_a) = big_held(n);
    let held = a.get(0, b"h").expect("held");
    assert!(held.ships_in_slices(n), "{n} stamped fields, none at rest");
    assert!(
        !held.ships_in_slices(n + 1),
        "a field at rest on the server"
    );
    // B: a field at rest that A's removal had seen, one B wrote after it
    // (unseen), and a newer write of one of A's fields.
    let mut b = Hashes::default();
    let mine = vec![
        (b"f000003".to_vec(), Some(b"b-newer".to_vec())),
        (b"own".to_vec(), Some(b"b".to_vec())),
    ];
    let applied = seen(&[(2, 39)]);
    b.local_fields(KH, Stamp::new(40, 2), (mine, false), &applied, false);
    let server_b = map(&[("old", "o"), ("f000003", "b-newer"), ("own", "b")]);

    let mut whole_b = b.clone();
    let whole = held.whole(&server_a, false);
    let w = whole_b.remote(K, &whole, &Seen::new(), &server_b);
    let after_whole = written(server_b.clone(), &w);
    let (here, slices) = merge_in_slices(held, &mut b, server_b);
    assert_eq!(slices, 4);
    assert_eq!(here.0, after_whole.0, "the server holds the same");
    assert!(
        !here.0.contains_key(b"old".as_slice()),
        "the removal took it"
    );
    assert_eq!(
        here.0.get(b"f000003".as_slice()),
        Some(&b"b-newer".to_vec())
    );
    assert_eq!(b.get(0, b"h"), whole_b.get(0, b"h"), "the same metadata");
}

/// A's big state written in four rounds of interleaved names (round `r`
/// the names `i` with `i % 4 == r`): every slice holds writes of every
/// round, so the first names A's newest clock.
fn big_held_interleaved(n: usize) -> (Hashes, Map) {
    let mut a = Hashes::default();
    let mut server = Map(Default::default());
    for round in 0..4u64 {
        let value = format!("a{round}").into_bytes();
        let change: Vec<(Bytes, Option<Bytes>)> = (0..n)
            .filter(|i| *i as u64 % 4 == round)
            .map(|i| (format!("f{i:06}").into_bytes(), Some(value.clone())))
            .collect();
        server
            .0
            .extend(change.iter().map(|(f, _)| (f.clone(), value.clone())));
        let applied = seen(&[(1, 19 + round), (2, 7)]);
        a.local_fields(
            KH,
            Stamp::new(20 + round, 1),
            (change, false),
            &applied,
            false,
        );
    }
    (a, server)
}

#[test]
fn a_delete_made_while_slices_arrive_removes_only_what_they_brought() {
    let n = 3 * STATE_SLICE + 5;
    let (mut a, server_a) = big_held_interleaved(n);
    let held = a.get(0, b"h").expect("held").clone();
    let mut b = Hashes::default();
    let (first, next) = held.slice(None, STATE_SLICE);
    assert!(first.more && next.is_some());
    let w = b.remote(K, &first, &Seen::new(), &Map(Default::default()));
    let mut had = written(Map(Default::default()), &w);
    assert_eq!(had.0.len(), STATE_SLICE);
    // A change A made since arrives before the other slices (it ships by
    // itself during a sync): it is no whole state, they still arrive.
    let change = vec![(b"live".to_vec(), Some(b"x".to_vec()))];
    let applied_a = seen(&[(1, 29), (2, 7)]);
    let delta = a.local_fields(KH, Stamp::new(30, 1), (change, false), &applied_a, false);
    assert!(!delta.complete && !delta.more);
    let w = b.remote(K, &delta, &Seen::new(), &had);
    had = written(had, &w);
    let mut server_a = server_a;
    server_a.0.insert(b"live".to_vec(), b"x".to_vec());
    // B deletes the key before the other slices arrive.
    let applied = seen(&[(2, 49), (1, 5)]);
    let delete = b
        .local_whole(K, Stamp::new(50, 2), Whole::Absent, &applied)
        .expect("a held key's delete ships its state");
    let w = a.remote(K, &delete, &Seen::new(), &server_a);
    let on_a = written(server_a, &w);
    let mut on_b = Map(Default::default());
    let mut after = next;
    while let Some(name) = after {
        let (state, next) = held.slice(Some(&name), STATE_SLICE);
        let w = b.remote(K, &state, &Seen::new(), &on_b);
        on_b = written(on_b, &w);
        after = next;
    }
    assert_eq!(
        on_b.0.len(),
        n - STATE_SLICE,
        "the slices B had not got stay"
    );
    assert!(!b.is_arriving(0, b"h"), "the last slice arrived");
    assert!(
        had.0.keys().all(|f| !on_b.0.contains_key(f)),
        "what B deleted went"
    );
    assert_eq!(on_a.0, on_b.0, "both nodes hold the same");
}

#[test]
fn a_big_key_is_collected_a_slice_of_elements_at_a_time() {
    let (a, _) = big_held(3 * STATE_SLICE + 5);
    let mut whole = a.get(0, b"h").expect("held").clone();
    let mut sliced = whole.clone();
    let bound = seen(&[(1, 100), (2, 100)]);
    let mut calls = 0;
    let left = loop {
        calls += 1;
        if let Some(left) = sliced.collect_some(&bound, STATE_SLICE) {
            break left;
        }
    };
    assert_eq!(calls, 4, "a pass of four slices");
    assert_eq!(left, whole.collect(&bound));
    assert!(!left, "every element passed the bound: the key rests");
    // The table goes on where it stopped at the next collection, though
    // the bound is the same.
    let (mut big, _) = big_held(collect_slices::COLLECT_BUDGET + 10);
    assert!(big.collect(&bound).is_empty(), "one slice, the key stays");
    assert!(big.contains(0, b"h"));
    assert_eq!(big.collect(&bound), vec![(0, b"h".to_vec())], "the rest");
}

#[test]
fn a_write_of_another_type_made_while_slices_arrive_is_a_whole_write() {
    let (a, _) = big_held_interleaved(2 * STATE_SLICE);
    let held = a.get(0, b"h").expect("held").clone();
    let mut b = Hashes::default();
    let (first, _) = held.slice(None, STATE_SLICE);
    b.remote(K, &first, &Seen::new(), &Map(Default::default()));
    assert!(b.is_arriving(0, b"h"));
    let members = vec![(b"m".to_vec(), Vec::new())];
    let now = Whole::Elements(Kind::Set, members);
    let applied = seen(&[(2, 49), (1, 5)]);
    let state = b
        .local_whole(K, Stamp::new(50, 2), now, &applied)
        .expect("a state");
    assert_eq!(
        state.base,
        Some(Stamp::new(50, 2)),
        "the newest type wins whole"
    );
    assert_eq!(state.kind, Kind::Set);
}

#[test]
fn a_big_key_s_covered_whole_write_rests_its_elements_slice_by_slice() {
    // A whole write made explicit by a merge: its base and every field an
    // element written at it, all of it covered by the bound.
    let at = Stamp::new(5, 2);
    let mut held = Held {
        kind: Kind::Hash,
        base: Some(at),
        ..Held::default()
    };
    for i in 0..3 * STATE_SLICE {
        let element = Element::from_parts(vec![(at, b"v".to_vec())], Seen::new());
        held.fields.insert(format!("f{i:06}").into_bytes(), element);
    }
    let bound = seen(&[(2, 9)]);
    assert_eq!(held.collect_some(&bound, STATE_SLICE), None);
    assert_eq!(held.base, None, "the covered base went first");
    assert_eq!(held.fields.len(), 2 * STATE_SLICE, "the first slice rested");
}
