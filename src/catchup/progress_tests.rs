//! Every transition of a peer's progress, one test each (the state after
//! it, and what it asks of the I/O code then).

use super::*;

type P = Progress<&'static str>;

const SINCE: SyncKind = SyncKind::Since {
    since: 700,
    own: 40,
};

fn link(epoch: u64) -> LinkView {
    LinkView::up(epoch, 7, 1 << 20)
}

/// The state's name.
fn state(p: &P) -> &'static str {
    match p {
        Progress::Down { .. } => "down",
        Progress::Probe { .. } => "probe",
        Progress::Snapshot { .. } => "snapshot",
        Progress::Replicate { .. } => "replicate",
    }
}

/// Up on link 1, caught up, nothing owed either way.
fn replicating() -> P {
    let mut p = P::default();
    p.caught_up(link(1));
    p.request_sent(1, false);
    p.acknowledged(1);
    p.peer_asks(request(0, false));
    let _ = p.take_request(|_| false);
    assert_eq!(state(&p), "replicate");
    p
}

fn request(received: u64, initial: bool) -> PeerRequest {
    PeerRequest {
        received,
        since: 700,
        own: 40,
        initial,
    }
}

#[test]
fn a_started_node_is_down_and_asks_first_at_its_first_link() {
    let mut p = P::default();
    assert_eq!(state(&p), "down");
    assert!(!p.link().up && p.is_new_link(1));
    assert!(!p.accepts_coverage() && p.awaits_peer_request());
    p.link_came_up(link(1));
    assert_eq!(state(&p), "probe");
    assert!(p.link().up && p.is_new_link(1), "not caught up on it yet");
    p.caught_up(link(1));
    assert!(!p.is_new_link(1) && p.is_new_link(2));
    assert_eq!(p.request_to_send(), Some(false));
    assert!(p.own_request_due());
}

#[test]
fn probe_ends_when_our_request_is_acknowledged_and_the_peers_taken() {
    let mut p = P::default();
    p.caught_up(link(1));
    p.request_sent(5, false);
    assert!(!p.own_request_due() && p.asks_own());
    p.acknowledged(4);
    assert_eq!(state(&p), "probe", "not yet acknowledged");
    p.acknowledged(5);
    assert!(p.accepts_coverage());
    assert_eq!(state(&p), "probe", "the peer's request is awaited");
    p.peer_asks(request(0, false));
    assert_eq!(state(&p), "probe");
    assert!(p.take_request(|_| false).is_some());
    assert_eq!(state(&p), "replicate", "an answer needs no answer");
    assert!(!p.sync_pending());
}

#[test]
fn a_request_of_the_peers_moves_replicate_to_snapshot_until_its_sync_is_acknowledged() {
    let mut p = replicating();
    p.peer_asks(request(3, true));
    assert_eq!(state(&p), "snapshot");
    assert!(p.request_waits() && p.sync_pending());
    let taken = p.take_request(|_| false).unwrap();
    assert!(taken.initial);
    // An initial request gets an answer back (ours went out before what
    // it had received: the peer lost it).
    assert_eq!(p.request_to_send(), Some(true));
    p.owe(SINCE);
    assert_eq!(p.sync_due(), Some(SINCE));
    p.start_sync(SINCE, "sync", 9);
    assert!(p.sync_running() && p.sync_due().is_none());
    assert!(p.sync_started_after(9) && !p.sync_started_after(10));
    p.request_sent(10, true);
    let running = p.lend_sync().unwrap();
    assert!(p.sync_lent() && !p.sync_running());
    p.sync_handed_out(running, 20, 10);
    assert!(p.sync_unacknowledged());
    assert_eq!(state(&p), "snapshot");
    p.acknowledged(19);
    assert_eq!(state(&p), "snapshot", "its last entry not yet acknowledged");
    p.acknowledged(20);
    assert_eq!(state(&p), "replicate");
}

#[test]
fn an_answer_asking_for_everything_is_due_when_the_peer_lost_deletes() {
    let mut p = replicating();
    p.peer_asks(request(3, true));
    let _ = p.take_request(|r| r.since == 700);
    assert_eq!(p.request_to_send(), Some(true));
    assert!(p.answer_asks_all());
    // A request that is an answer never makes one.
    let mut q = replicating();
    q.peer_asks(request(3, false));
    let _ = q.take_request(|_| true);
    assert_eq!(q.request_to_send(), None);
    assert_eq!(state(&q), "replicate");
}

#[test]
fn requests_not_taken_yet_merge() {
    let mut p = replicating();
    p.peer_asks(request(5, false));
    p.peer_asks(PeerRequest {
        received: 3,
        since: 900,
        own: 10,
        initial: true,
    });
    assert_eq!(
        p.request(),
        Some(PeerRequest {
            received: 5,
            since: 700,
            own: 10,
            initial: true
        })
    );
}

#[test]
fn a_link_that_ends_keeps_what_is_owed_for_the_next() {
    let mut p = replicating();
    p.owe(SyncKind::Full);
    p.start_sync(SyncKind::Full, "sync", 4);
    // The end of an older link changes nothing.
    p.link_ended(0);
    assert_eq!(state(&p), "snapshot");
    p.link_ended(1);
    assert_eq!(state(&p), "down");
    assert!(!p.link().up && p.link().epoch == 1);
    assert!(p.sync_running(), "kept until the next link");
    p.link_came_up(link(2));
    assert_eq!(state(&p), "snapshot");
    p.caught_up(link(2));
    assert!(!p.sync_running() && p.owes_full(), "cut off: owed again");
}

#[test]
fn a_replicating_peer_that_loses_its_link_is_down_then_replicates_again() {
    let mut p = replicating();
    p.link_ended(1);
    assert_eq!(state(&p), "down");
    p.link_came_up(link(2));
    assert_eq!(state(&p), "replicate");
    assert!(p.is_new_link(2));
    p.caught_up(link(2));
    assert!(!p.is_new_link(2));
    assert_eq!(state(&p), "replicate");
}

#[test]
fn a_request_sent_on_a_link_that_dropped_is_due_again() {
    let mut p = P::default();
    p.caught_up(link(1));
    p.request_sent(5, false);
    p.link_ended(1);
    p.link_came_up(link(2));
    assert_eq!(p.request_to_send(), None, "not before the catch-up");
    p.caught_up(link(2));
    assert_eq!(p.request_to_send(), Some(false));
}

#[test]
fn lost_state_asks_again_owes_a_full_sync_and_catches_up_on_the_same_link() {
    let mut p = replicating();
    p.owe(SINCE);
    p.start_sync(SINCE, "sync", 4);
    p.lost_state();
    assert_eq!(state(&p), "probe");
    assert!(p.is_new_link(1), "caught up again on link 1");
    assert!(!p.sync_running() && p.owes_full());
    assert!(p.own_request_due() && p.awaits_peer_request());
    assert_eq!(p.since_owed_or_running(), None);
}

#[test]
fn restarting_a_sync_since_owes_a_full_one_and_forgiving_it_leaves_nothing_owed() {
    let mut p = replicating();
    p.owe(SINCE);
    p.start_sync(SINCE, "sync", 4);
    assert_eq!(p.since_owed_or_running(), Some(SINCE));
    p.restart_full();
    assert!(!p.sync_running() && p.owes_full());
    p.forgive_full();
    assert_eq!(p.owed(), None);
    assert_eq!(state(&p), "replicate");
}

#[test]
fn a_full_sync_running_or_owed_covers_requests() {
    let mut p = replicating();
    assert!(!p.full_running_or_owed());
    p.owe(SyncKind::Full);
    assert!(p.full_running_or_owed());
    p.start_sync(SyncKind::Full, "sync", 4);
    assert!(p.full_running_or_owed());
    let running = p.lend_sync().unwrap();
    assert!(p.full_running_or_owed(), "lent, still running");
    p.return_sync(running);
    assert!(p.sync_running() && !p.sync_lent());
}

#[test]
fn a_sync_that_cannot_go_on_is_owed_again_whole() {
    let mut p = replicating();
    p.owe(SINCE);
    p.start_sync(SINCE, "sync", 4);
    let _lent = p.lend_sync().unwrap();
    p.sync_dropped();
    assert!(!p.sync_lent() && !p.sync_running());
    assert_eq!(p.sync_due(), Some(SyncKind::Full));
    assert_eq!(state(&p), "snapshot");
}

#[test]
fn a_request_sent_is_no_longer_due_and_a_sync_returned_runs_on() {
    let mut p = P::default();
    p.caught_up(link(1));
    assert!(p.own_request_due());
    p.request_sent(3, false);
    assert!(!p.own_request_due() && p.request_to_send().is_none());
    assert!(p.accepts_coverage_of_ack(3) && !p.accepts_coverage_of_ack(2));
    p.owe(SINCE);
    p.start_sync(SINCE, "sync", 4);
    let running = p.lend_sync().unwrap();
    assert!(p.lend_sync().is_none(), "lent once");
    p.return_sync(running);
    assert!(p.sync_running());
    assert_eq!(p.lend_sync().map(|r| r.sync), Some("sync"));
}

#[test]
fn a_sync_handed_out_already_acknowledged_ends_at_once() {
    let mut p = replicating();
    p.owe(SyncKind::Full);
    p.start_sync(SyncKind::Full, "sync", 4);
    let running = p.lend_sync().unwrap();
    p.sync_handed_out(running, 0, 4);
    assert_eq!(state(&p), "replicate", "it shipped nothing");
}

#[test]
fn replicate_remembers_the_last_request_sent_on_its_link() {
    // Our own request went out as 9 and was acknowledged: an initial
    // request of the peer's that had received only up to 5 takes ours
    // instead of an answer (it reaches the peer after its loss).
    let mut p = replicating();
    p.probe_mut(|probe| probe.lost_state());
    p.request_sent(9, false);
    p.acknowledged(9);
    p.peer_asks(request(0, false));
    let _ = p.take_request(|_| false);
    assert!(matches!(
        p,
        Progress::Replicate {
            last_request: Some(9),
            ..
        }
    ));
    p.peer_asks(request(5, true));
    let _ = p.take_request(|_| false);
    assert_eq!(p.request_to_send(), None);
    assert_eq!(state(&p), "replicate");
}

#[test]
fn the_stream_is_held_back_only_by_what_keeps_coverage_back() {
    let mut p = replicating();
    assert!(!p.holds_stream_back());
    p.owe(SINCE);
    assert!(p.holds_stream_back(), "a sync owed");
    p.start_sync(SINCE, "sync", 4);
    assert!(p.holds_stream_back(), "running");
    let running = p.lend_sync().unwrap();
    assert!(p.holds_stream_back(), "lent out");
    p.sync_handed_out(running, 9, 4);
    assert_eq!(state(&p), "snapshot");
    assert!(
        !p.holds_stream_back(),
        "handed out whole, not yet acknowledged"
    );
    p.peer_asks(request(0, false));
    assert!(p.holds_stream_back(), "a request of the peer's waits");
    // A node that lost state: held back until the peer's request is taken,
    // not while only its own request is unacknowledged.
    let mut q = P::default();
    q.caught_up(link(1));
    q.request_sent(5, false);
    assert!(q.holds_stream_back());
    q.peer_asks(request(0, false));
    let _ = q.take_request(|_| false);
    assert_eq!(state(&q), "probe");
    assert!(!q.holds_stream_back());
}
