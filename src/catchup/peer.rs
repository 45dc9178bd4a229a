//! One peer's replication progress: what it has not seen yet of this
//! node's changes (the backlog, the changes shipped and not acknowledged),
//! the full sync or sync since a watermark owed to it, the sync requests
//! and acknowledgements both ways, the link it was last seen on and the
//! tombstone collection its acknowledgements allow. One value per peer;
//! the version store it ships from is the node's (`Replication`).

use std::time::Instant;

use crate::catchup::fullsync::FullSync;
use crate::catchup::inflight::InFlight;
use crate::catchup::progress::Progress;
use crate::catchup::replication::{CatchUp, CatchUpReport};
use crate::catchup::snapshot::SyncKind;
use crate::converge::changes::DirtySet;
use crate::converge::sweep::Sweep;
use crate::converge::version::Stamp;

/// The link as the main thread knows it: from the link thread's events,
/// in order with the batches (`shared::apply_queue::FromLink`), never from the
/// counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkView {
    /// A link is up.
    pub up: bool,
    /// The number of the last link that came up (0: none yet).
    pub epoch: u64,
    /// The node id the peer gave in that link's handshake.
    pub peer_node: u64,
    /// The largest frame that link's ring takes (0: no link yet).
    pub max_frame: usize,
    /// The RDB format of the peer's server (0: not known): a DUMP payload
    /// it would not restore is refused before it is numbered.
    pub peer_rdb: u16,
}

impl LinkView {
    /// Link `epoch`, with node `peer_node` and frames of at most
    /// `max_frame` bytes, is up.
    pub fn up(epoch: u64, peer_node: u64, max_frame: usize) -> Self {
        Self {
            up: true,
            epoch,
            peer_node,
            max_frame,
            peer_rdb: 0,
        }
    }

    /// The same, the peer's server writing RDB format `peer_rdb`.
    pub fn reading_rdb(self, peer_rdb: u16) -> Self {
        Self { peer_rdb, ..self }
    }

    /// This view once link `epoch` ended.
    pub fn ended(self, epoch: u64) -> Self {
        Self {
            up: self.up && self.epoch != epoch,
            ..self
        }
    }
}

/// What the peer's sync requests ask: our entries it had received (when it
/// lost state), our changes it holds up to `since`, its own that survived up
/// to `own`, and whether one was not an answer (it lost state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerRequest {
    /// Our sequence number it had received.
    pub received: u64,
    /// It holds our changes stamped up to this clock.
    pub since: u64,
    /// Its own changes survived up to this clock.
    pub own: u64,
    /// One of them was not an answer: the peer lost state.
    pub initial: bool,
}

impl PeerRequest {
    /// Two requests not yet handled as one: what both say holds (the newest
    /// `received`, the lowest watermarks).
    pub fn merge(self, other: Self) -> Self {
        Self {
            received: self.received.max(other.received),
            since: self.since.min(other.since),
            own: self.own.min(other.own),
            initial: self.initial || other.initial,
        }
    }
}

/// Where one peer's progress stands, in one word (`peer_state` in STATUS
/// and INFO): its `Progress` state, `Replicate` told apart by whether the
/// backlog is draining.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No link to it.
    Down,
    /// Learning what each side misses: our own request (this node lost
    /// state) is not acknowledged yet, or the peer's request is awaited.
    Probing,
    /// A sync of our whole state (or since its watermarks) is owed,
    /// running, or not yet acknowledged whole; a request of the peer's
    /// waits to be taken, or an answer request of ours is not acknowledged.
    Snapshot,
    /// Changes kept while the link was down are being resent.
    CatchingUp,
    /// In step: changes ship as they are made.
    Streaming,
}

impl Phase {
    /// Its name in STATUS.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Down => "down",
            Self::Probing => "probing",
            Self::Snapshot => "snapshot",
            Self::CatchingUp => "catching-up",
            Self::Streaming => "streaming",
        }
    }
}

/// The progress of one peer. Main thread only.
#[derive(Debug)]
pub struct Peer {
    /// Local changes not shipped yet, in order, each key once.
    pub backlog: DirtySet,
    /// The big value at the front of the backlog, being read a slice at a
    /// time (its op stays in the backlog until it ships).
    pub backlog_read: Option<crate::catchup::big_read::BigRead>,
    /// The big merge state at the front of the backlog, shipping a slice
    /// at a time (its op stays in the backlog until the last one ships).
    pub backlog_state: Option<crate::catchup::state_slices::StateSlices>,
    pub(super) backlog_limit: usize,
    /// Shipped and not acknowledged, in sequence order.
    pub(super) inflight: InFlight,
    /// Where its progress stands: the link, and what this node and the
    /// peer still owe each other (the probe, the sync of our state owed
    /// and shipping, the peer's requests not taken yet).
    pub progress: Progress<FullSync>,
    /// The peer's sequence number of the last entry received here (applied,
    /// an ack, or dropped while this node was a replica).
    pub(super) received_from_peer: u64,
    /// `received_from_peer` when this node last lost state (0: it started
    /// empty-handed): what its sync requests tell the peer.
    pub(super) received_at_loss: u64,
    /// The coverage our last ack told the peer (see `Replication::coverage`).
    pub(super) coverage_sent: u64,
    /// Our highest sequence number the peer has applied.
    pub peer_acked: u64,
    /// Stamp of the newest SWAPDB from the peer applied here (a resent
    /// swap at or below it was applied already).
    pub last_peer_swap: Stamp,
    /// What the peer's last request after it lost state said it held
    /// (`received`, `own`): the same request again is that loss's request
    /// resent on a new link (our ack of it did not reach the peer), not a
    /// new loss (see [`Self::peer_lost_state`]).
    last_loss_request: Option<(u64, u64)>,
    /// The peer's sequence number of the last data entry applied here.
    pub(super) applied_from_peer: u64,
    /// `applied_from_peer` when the server last went to write its AOF
    /// buffer (see [`Self::persisting`]): what an ack may cover.
    pub(super) applied_written: u64,
    /// What our last ack said.
    pub(super) ack_sent: u64,
    /// When the last ack went out.
    pub(super) last_ack_at: Option<Instant>,
    /// Our last sequence number pushed to the queue.
    pub last_pushed: u64,
    /// The peer's node id, from the link it was last caught up on (0: none
    /// yet): whose watermark its sync requests and answers name.
    pub node_id: u64,
    /// `peer_acked` at the last tombstone collection.
    pub(super) collected_at: u64,
    /// Completed full syncs sent and partial ones.
    pub full_syncs: u64,
    /// Syncs since a watermark sent.
    pub since_syncs: u64,
    /// Reconnects caught up from the backlog alone.
    pub partial_syncs: u64,
    /// The last catch-up.
    pub report: CatchUpReport,
    /// A sweeping full sync of the peer's being received: the keys it
    /// carried so far (a new link drops it; the sync starts over).
    pub incoming_sweep: Option<Sweep>,
}

impl Peer {
    /// A peer never talked to: the first contact is a full sync both ways.
    pub fn new(backlog_limit: usize) -> Self {
        Self {
            backlog: DirtySet::default(),
            backlog_read: None,
            backlog_state: None,
            backlog_limit: backlog_limit.max(1),
            inflight: InFlight::default(),
            // It lost state: it asks the peer for what it misses (the
            // peer answers with its own request).
            progress: Progress::default(),
            received_from_peer: 0,
            received_at_loss: 0,
            coverage_sent: 0,
            peer_acked: 0,
            last_peer_swap: Stamp::default(),
            last_loss_request: None,
            applied_from_peer: 0,
            applied_written: 0,
            ack_sent: 0,
            last_ack_at: None,
            last_pushed: 0,
            node_id: 0,
            collected_at: 0,
            full_syncs: 0,
            since_syncs: 0,
            partial_syncs: 0,
            report: CatchUpReport::default(),
            incoming_sweep: None,
        }
    }

    /// Whether `epoch` (a link's number, from its `LinkUp` event) is a link
    /// this peer was not caught up on yet.
    pub fn is_new_link(&self, epoch: u64) -> bool {
        self.progress.is_new_link(epoch)
    }

    /// The link to this peer as the main thread knows it now.
    pub fn link(&self) -> LinkView {
        self.progress.link()
    }

    /// Starts the sync owed (the link is up): a full one ships the current
    /// state of every key, tombstone and floor, a sync since watermarks our
    /// changes after them; either covers the backlog.
    pub fn start_full_sync(&mut self, sync: FullSync) {
        let kind = match sync.since() {
            None => SyncKind::Full,
            Some((since, own)) => SyncKind::Since { since, own },
        };
        self.drop_backlog();
        self.report = CatchUpReport::start(
            match kind {
                SyncKind::Full => CatchUp::Full,
                SyncKind::Since { .. } => CatchUp::Since,
            },
            self.last_pushed,
        );
        self.report.since = kind.watermarks().map_or(0, |(since, _)| since);
        self.progress.start_sync(kind, sync, self.last_pushed);
    }

    /// A sync request went out with sequence number `seq`.
    pub fn sync_request_sent(&mut self, seq: u64, answer: bool) {
        self.progress.request_sent(seq, answer);
    }

    /// The running sync handed out its last entry, sequence number
    /// `last_seq` (0: it shipped nothing).
    pub fn full_sync_sent(&mut self, last_seq: u64) {
        let Some(running) = self.progress.lend_sync() else {
            return;
        };
        self.report.done();
        match running.kind {
            SyncKind::Full => self.full_syncs += 1,
            SyncKind::Since { .. } => self.since_syncs += 1,
        }
        self.progress
            .sync_handed_out(running, last_seq, self.peer_acked);
    }

    /// Whether an ack is due (something applied and written since the
    /// last one).
    pub fn ack_due(&self) -> bool {
        self.applied_written != self.ack_sent && self.applied_written != 0
    }

    /// The server goes on to write its AOF buffer (the end of its
    /// `BeforeSleep` event: Redis writes the buffer, and syncs it under
    /// `appendfsync always`, before it sleeps or answers a client), which
    /// holds everything applied so far: acks may cover it from now on.
    /// An ack sent earlier covers changes a crash can still take from this
    /// node, which the peer then counts as applied here for good: it
    /// collects their tombstones and folds their increments, and its sync
    /// after our restart ships neither. Whether an ack became due.
    pub fn persisting(&mut self) -> bool {
        let moved = self.applied_written != self.applied_from_peer;
        self.applied_written = self.applied_from_peer;
        moved && self.ack_due()
    }

    /// The ack taken last could not be queued: send it again later.
    pub fn ack_lost(&mut self) {
        self.ack_sent = 0;
        self.coverage_sent = 0;
    }

    /// An entry went out that needs no resend (full sync, ack).
    pub fn pushed(&mut self, seq: u64) {
        self.last_pushed = self.last_pushed.max(seq);
    }

    /// The peer applied our entries up to `applied`.
    pub fn acknowledged(&mut self, applied: u64) {
        self.peer_acked = self.peer_acked.max(applied);
        self.inflight.acknowledged(applied);
        self.progress.acknowledged(self.peer_acked);
    }

    /// The peer asked for a full sync; it had received our entries up to
    /// `received`.
    pub fn peer_asks_for_sync(&mut self, received: u64, since: u64, own: u64, answer: bool) {
        if !answer {
            // It lost state: what our acks told it of our coverage is void
            // until the sync that answers this request has reached it.
            self.coverage_sent = 0;
        }
        let request = PeerRequest {
            received,
            since,
            own,
            initial: !answer,
        };
        self.progress.peer_asks(request);
    }

    /// The peer's request says it lost state, holding our entries up to
    /// `received` and its own changes up to `own`: whether that is a new
    /// loss. The same request as the last such one is that loss's request
    /// sent again on a new link, because our ack of it never reached the
    /// peer; the swaps of the peer's applied since it was taken were made
    /// after that loss and are still the peer's, so a resend of one of
    /// them must still be found a duplicate. (Two losses whose requests
    /// say the same, with no change between them, pass for one: the
    /// peer's clock then runs past the swaps it made before, unless it
    /// went back.)
    pub fn peer_lost_state(&mut self, received: u64, own: u64) -> bool {
        let new = self.last_loss_request != Some((received, own));
        self.last_loss_request = Some((received, own));
        new
    }

    /// Entries of the peer up to sequence number `seq` reached this node
    /// (applied, an ack, or dropped while it is a replica).
    pub fn received(&mut self, seq: u64) {
        self.received_from_peer = self.received_from_peer.max(seq);
    }

    /// What a sync request of ours says this node had received when it
    /// lost state (what it received since was applied after the loss).
    pub fn received_at_loss(&self) -> u64 {
        self.received_at_loss
    }

    /// A data entry with the peer's sequence number `seq` was applied here.
    pub fn applied(&mut self, seq: u64) {
        self.received(seq);
        self.applied_from_peer = seq;
    }

    /// Whether the coverage in the peer's acks may raise this node's
    /// watermark of it: not while a request of ours for what we miss (we
    /// lost state) is unanswered, since the peer's earlier acks speak of a
    /// stream whose earlier links this node no longer holds.
    pub fn accepts_coverage(&self) -> bool {
        self.progress.accepts_coverage()
    }

    /// Whether the coverage of an ack acknowledging our entries up to
    /// `applied` may raise this node's watermark of the peer (see
    /// `Probe::accepts_coverage_of_ack`).
    pub fn accepts_coverage_of_ack(&self, applied: u64) -> bool {
        self.progress.accepts_coverage_of_ack(applied)
    }

    /// The last coverage our acks told the peer.
    pub fn coverage_sent(&self) -> u64 {
        self.coverage_sent
    }

    /// Changes the peer has not applied: unacknowledged plus backlog.
    pub fn lag_ops(&self) -> usize {
        self.inflight.len() + self.backlog.len()
    }

    /// Age of the oldest unacknowledged change, in milliseconds.
    pub fn lag_ms(&self) -> u64 {
        self.inflight
            .oldest_sent()
            .map_or(0, |sent| sent.elapsed().as_millis() as u64)
    }

    /// Forgets the backlog (a full sync covers it) and the read of its
    /// first value or state.
    pub fn drop_backlog(&mut self) {
        let _ = self.backlog.take();
        self.backlog_read = None;
        self.backlog_state = None;
    }

    /// Whether shipping is still catching up (backlog or full sync).
    pub fn catching_up(&self) -> bool {
        !self.backlog.is_empty() || self.progress.sync_running()
    }

    /// Where this peer's progress stands.
    pub fn phase(&self) -> Phase {
        match self.progress {
            Progress::Down { .. } => Phase::Down,
            Progress::Probe { .. } => Phase::Probing,
            Progress::Snapshot { .. } => Phase::Snapshot,
            Progress::Replicate { .. }
                if !self.backlog.is_empty() || self.backlog_read.is_some() =>
            {
                Phase::CatchingUp
            }
            Progress::Replicate { .. } => Phase::Streaming,
        }
    }

    /// A sync is wanted, asked for or owed to the peer.
    pub fn sync_pending(&self) -> bool {
        self.progress.sync_pending()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_that_ended_leaves_a_newer_one_up() {
        let view = LinkView::up(2, 7, 1 << 20);
        assert!(!view.ended(2).up);
        assert_eq!(view.ended(2).epoch, 2);
        // The end of link 1, decoded after link 2 came up, changes nothing.
        assert_eq!(view.ended(1), view);
    }

    #[test]
    fn requests_not_yet_handled_merge_to_what_both_hold() {
        let mut peer = Peer::new(10);
        peer.peer_asks_for_sync(5, 700, 40, true);
        assert_eq!(
            peer.progress.request(),
            Some(PeerRequest {
                received: 5,
                since: 700,
                own: 40,
                initial: false
            })
        );
        peer.peer_asks_for_sync(3, 900, 10, false);
        assert_eq!(
            peer.progress.request(),
            Some(PeerRequest {
                received: 5,
                since: 700,
                own: 10,
                initial: true
            })
        );
        assert!(peer.sync_pending());
    }

    #[test]
    fn the_phase_follows_the_link_the_probe_and_the_sync_owed() {
        let mut peer = Peer::new(10);
        assert_eq!(peer.phase(), Phase::Down);
        peer.progress.link_came_up(LinkView::up(1, 7, 1 << 20));
        // A node that just started asks first.
        assert_eq!(peer.phase(), Phase::Probing);
        peer.sync_request_sent(1, false);
        peer.acknowledged(1);
        assert_eq!(
            peer.phase(),
            Phase::Probing,
            "still awaits the peer's request"
        );
        peer.peer_asks_for_sync(0, 500, u64::MAX, true);
        peer.progress
            .probe_mut(|p| p.peer_request_taken(true, false, 0));
        assert_eq!(peer.phase(), Phase::Snapshot, "its request not yet taken");
        let _ = peer.progress.take_request(|_| false);
        peer.progress.owe(SyncKind::Since { since: 500, own: 9 });
        assert_eq!(peer.phase(), Phase::Snapshot);
        peer.start_full_sync(FullSync::new(1));
        peer.full_sync_sent(5);
        assert_eq!(peer.phase(), Phase::Snapshot, "not acknowledged whole");
        peer.acknowledged(5);
        assert_eq!(peer.phase(), Phase::Streaming);
        peer.progress.link_ended(1);
        assert_eq!(peer.phase(), Phase::Down);
    }

    #[test]
    fn a_loss_request_sent_again_is_the_same_loss() {
        let mut peer = Peer::new(10);
        assert!(peer.peer_lost_state(0, 40), "the first");
        assert!(!peer.peer_lost_state(0, 40), "resent on a new link");
        assert!(peer.peer_lost_state(0, 55), "lost state again since");
        assert!(peer.peer_lost_state(9, 55), "it had received more");
    }

    #[test]
    fn a_new_peer_knows_no_link() {
        let peer = Peer::new(10);
        assert_eq!(peer.link(), LinkView::default());
        assert!(!peer.link().up);
        assert!(peer.is_new_link(1));
    }
}
