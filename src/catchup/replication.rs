//! What the peer has not seen yet: the backlog of local changes not shipped
//! (link down, queue full, catching up), the changes shipped but not yet
//! acknowledged (resent after a reconnect), acknowledgements both ways, and
//! when a full sync is due. Main thread only; no Redis calls here.

use std::time::Instant;

use crate::capture::hook::{DirtySet, PendingOp};
use crate::catchup::fullsync::FullSync;
use crate::catchup::inflight::{InFlight, SentBatch};
use crate::converge::version::{Stamp, VersionStore};
use crate::ops::status::Convergence;

use crate::ops::config::DEFAULT_BACKLOG_OPS;

/// Shortest time between two acks.
pub const ACK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(5);

/// How the pair catches up after the link comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUp {
    /// Ship the backlog (unacknowledged changes included).
    Partial,
    /// Stream the whole keyspace.
    Full,
    /// Ship what the peer misses after a watermark it holds (its request
    /// said): this node's changes after it, and the peer's own changes
    /// after its newest surviving one.
    Since,
}

/// The last catch-up with the peer, for `RDMASYNC.STATUS`.
#[derive(Debug, Clone, Copy, Default)]
pub struct CatchUpReport {
    /// Which (`None`: none since the module loaded).
    pub kind: Option<CatchUp>,
    /// Entries it shipped so far (keys, tombstones, floors; resent changes).
    pub entries: u64,
    /// Our sequence number it started after: what the peer had
    /// acknowledged (partial), or what had been sent (full).
    pub from_seq: u64,
    /// When it started.
    pub started: Option<Instant>,
    /// How long it took, once done.
    pub took_ms: Option<u64>,
    /// For a sync since a watermark: the watermark (the peer held our
    /// changes up to this clock).
    pub since: u64,
}

impl CatchUpReport {
    fn start(kind: CatchUp, from_seq: u64) -> Self {
        Self {
            kind: Some(kind),
            entries: 0,
            from_seq,
            started: Some(Instant::now()),
            took_ms: None,
            since: 0,
        }
    }

    /// The catch-up handed out its last entry.
    pub fn done(&mut self) {
        if self.took_ms.is_none() {
            self.took_ms = self.started.map(|t| t.elapsed().as_millis() as u64);
        }
    }
}

/// Convergence state of this node. Touched on the main thread only (capture,
/// apply, keyspace events, persistence), so its lock is never contended.
#[derive(Debug)]
pub struct Replication {
    /// Per-key versions, tombstones and flush floors.
    pub versions: VersionStore,
    /// Local changes not shipped yet, in order, each key once.
    pub backlog: DirtySet,
    backlog_limit: usize,
    /// Shipped and not acknowledged, in sequence order.
    inflight: InFlight,
    /// A full sync is due at the next link-up (first contact, overflow,
    /// the peer asked, the dataset was replaced).
    pub full_sync_wanted: bool,
    /// The full sync running now, if any.
    pub full_sync: Option<FullSync>,
    /// The sequence number of the last entry of the latest full sync, until
    /// the peer acknowledges it: its entries are not kept for a resend, so a
    /// link drop before then (its tail still queued, or lost in flight)
    /// starts the full sync over.
    full_sync_unacked: Option<u64>,
    /// Changes a resend or full sync could not read (a read error), with the
    /// version they are to ship at; retried once per flush, never shipped
    /// as deleted and never restamped as a new write.
    pub unread: hashbrown::HashMap<(u32, Box<[u8]>), Stamp>,
    /// A full sync started since the current link came up.
    full_sync_on_link: bool,
    /// `last_pushed` when that full sync started: its entries come after.
    full_sync_started_after: u64,
    /// The newest `received` of the peer's sync requests not yet handled.
    request_received: u64,
    /// The peer's sequence number of the last entry received here (applied,
    /// an ack, or dropped while this node was a replica).
    received_from_peer: u64,
    /// `received_from_peer` when this node last lost state (0: it started
    /// empty-handed): what its sync requests tell the peer.
    received_at_loss: u64,
    /// The peer asked for a full sync (it lost state).
    pub sync_requested: bool,
    /// Ask the peer for a full sync at the next link-up (this node lost
    /// state: it just started, or its dataset was replaced).
    pub request_sync: bool,
    /// Sequence number of the sync request sent last, and whether it was
    /// an answer, until the peer acknowledges it (or anything after it):
    /// one lost with a link drop (still queued, or in flight) is sent again
    /// at the next link-up.
    sync_request_unacked: Option<(u64, bool)>,
    /// Send the peer an answer request (it asked us, we had not asked it
    /// on this link): it ships what we miss of its changes, from our
    /// watermark, instead of a first-contact full sync.
    pub answer_wanted: bool,
    /// The answer request asks for everything (a watermark of 0): the peer
    /// may have lost deletes whose tombstones this node collected, so its
    /// whole dataset must come back for the pair to agree.
    pub answer_asks_all: bool,
    /// This node sent a sync request on the current link.
    asked_on_link: bool,
    /// What the peer's pending requests hold: our changes up to `since`,
    /// its own up to `own` (the lowest of each over pending requests), and
    /// whether one of them was not an answer.
    request_since: u64,
    request_own: u64,
    request_initial: bool,
    /// A sync since a watermark is due at the next link-up flush:
    /// `(since, own)` of the peer's request.
    pub since_sync_wanted: Option<(u64, u64)>,
    /// The kind of the sync running or handed out last, to start it over
    /// after a link drop: `None` full, `Some((since, own))`.
    sync_kind: Option<(u64, u64)>,
    /// This node's own changes it held after its last load, up to this
    /// clock (what its requests tell the peer; `None`: no load, the store's
    /// newest own stamp then).
    pub own_durable: Option<u64>,
    /// The newest stamp of this node's own changes so far.
    pub last_local_stamp: u64,
    /// The coverage our last ack told the peer (see [`Self::coverage`]).
    coverage_sent: u64,
    /// This node lost state (it started, or its dataset was replaced) and
    /// has not yet taken the peer's request that says what the peer misses
    /// of its changes: until it has (and shipped that), it claims no
    /// coverage (its backlog was dropped, its stream started over).
    awaiting_peer_request: bool,
    /// `links_established` when the current link was first seen.
    link_epoch: u64,
    /// Our highest sequence number the peer has applied.
    pub peer_acked: u64,
    /// Stamp of the newest SWAPDB from the peer applied here (a resent
    /// swap at or below it was applied already).
    pub last_peer_swap: Stamp,
    /// The peer's sequence number of the last data entry applied here.
    applied_from_peer: u64,
    /// What our last ack said.
    ack_sent: u64,
    /// When the last ack went out.
    last_ack_at: Option<Instant>,
    /// Our last sequence number pushed to the queue.
    pub last_pushed: u64,
    /// `peer_acked` at the last tombstone collection.
    collected_at: u64,
    /// Completed full syncs sent and partial ones.
    pub full_syncs: u64,
    /// Syncs since a watermark sent.
    pub since_syncs: u64,
    /// Reconnects caught up from the backlog alone.
    pub partial_syncs: u64,
    /// A wake-up timer is pending (more to ship).
    pub wake_pending: bool,
    /// The last catch-up.
    pub report: CatchUpReport,
    /// Stamp records replayed from the AOF or a master's stream.
    pub stamps_loaded: u64,
    /// Changes a load found without their stamp, dated then.
    pub stamps_dated: u64,
}

impl Default for Replication {
    fn default() -> Self {
        Self::new(DEFAULT_BACKLOG_OPS)
    }
}

impl Replication {
    /// A node that just started: it has never talked to the peer, so the
    /// first contact is a full sync both ways.
    pub fn new(backlog_limit: usize) -> Self {
        Self {
            versions: VersionStore::journaled(),
            backlog: DirtySet::default(),
            backlog_limit: backlog_limit.max(1),
            inflight: InFlight::default(),
            // The peer asks for what it misses (this node's request
            // tells it this node lost state; it answers with its own).
            full_sync_wanted: false,
            full_sync: None,
            full_sync_unacked: None,
            unread: hashbrown::HashMap::new(),
            full_sync_on_link: false,
            sync_requested: false,
            full_sync_started_after: 0,
            request_received: 0,
            received_from_peer: 0,
            received_at_loss: 0,
            request_sync: true,
            sync_request_unacked: None,
            answer_wanted: false,
            answer_asks_all: false,
            asked_on_link: false,
            request_since: u64::MAX,
            request_own: u64::MAX,
            request_initial: false,
            since_sync_wanted: None,
            sync_kind: None,
            own_durable: None,
            last_local_stamp: 0,
            coverage_sent: 0,
            awaiting_peer_request: true,
            link_epoch: 0,
            peer_acked: 0,
            last_peer_swap: Stamp::default(),
            applied_from_peer: 0,
            ack_sent: 0,
            last_ack_at: None,
            last_pushed: 0,
            collected_at: 0,
            full_syncs: 0,
            since_syncs: 0,
            partial_syncs: 0,
            wake_pending: false,
            report: CatchUpReport::default(),
            stamps_loaded: 0,
            stamps_dated: 0,
        }
    }

    /// `SWAPDB a b`: versions and unread changes move with the data.
    pub fn swap_dbs(&mut self, a: u32, b: u32) {
        self.versions.swap(a, b);
        if self.unread.is_empty() {
            return;
        }
        self.unread = std::mem::take(&mut self.unread)
            .into_iter()
            .map(|((db, key), stamp)| {
                let db = if db == a {
                    b
                } else if db == b {
                    a
                } else {
                    db
                };
                ((db, key), stamp)
            })
            .collect();
    }

    /// Whether `epoch` (the count of links established) is a link not yet seen.
    pub fn is_new_link(&self, epoch: u64) -> bool {
        epoch != self.link_epoch
    }

    /// A new link is up: what was shipped and not acknowledged may be lost,
    /// so it goes back to the front of the backlog. Returns how to catch up.
    pub fn link_up(&mut self, epoch: u64) -> CatchUp {
        self.link_epoch = epoch;
        self.asked_on_link = false;
        let unacked = self.requeue_unacked();
        self.backlog.restore(unacked);
        match self.sync_request_unacked.take() {
            Some((_, true)) => self.answer_wanted = true,
            Some((_, false)) => self.request_sync = true,
            None => {}
        }
        let cut_off = self.full_sync.take().is_some();
        let unacked = self.full_sync_unacked.take().is_some();
        if cut_off || unacked {
            // Cut off by the link drop, or all handed out but not known to
            // have arrived: start it over.
            match self.sync_kind {
                None => self.full_sync_wanted = true,
                Some(since) => self.since_sync_wanted = Some(since),
            }
        }
        self.full_sync_on_link = false;
        self.check_overflow();
        if self.full_sync_wanted {
            CatchUp::Full
        } else if self.since_sync_wanted.is_some() {
            CatchUp::Since
        } else {
            self.partial_syncs += 1;
            self.report = CatchUpReport::start(CatchUp::Partial, self.peer_acked);
            if self.backlog.is_empty() {
                self.report.done();
            }
            CatchUp::Partial
        }
    }

    /// Takes the unacknowledged changes; their tombstones may be lost with
    /// the link, so they stay until shipped again.
    fn requeue_unacked(&mut self) -> Vec<PendingOp> {
        let acked = self.peer_acked;
        let ops = self.inflight.drain();
        for op in &ops {
            if let PendingOp::Key { db, key } = op {
                self.versions.unship(*db, key, acked);
            }
        }
        ops
    }

    /// Starts a full sync (the link is up): it ships the current state of
    /// every key, tombstone and floor, so the backlog is covered by it.
    pub fn start_full_sync(&mut self, sync: FullSync) {
        // A full sync covers a sync since a watermark.
        self.sync_kind = sync.since();
        if sync.since().is_none() {
            self.full_sync_wanted = false;
        }
        self.since_sync_wanted = None;
        let _ = self.backlog.take();
        let kind = if sync.since().is_some() {
            CatchUp::Since
        } else {
            CatchUp::Full
        };
        self.full_sync = Some(sync);
        self.full_sync_unacked = None;
        self.full_sync_on_link = true;
        self.full_sync_started_after = self.last_pushed;
        self.report = CatchUpReport::start(kind, self.last_pushed);
        self.report.since = self.sync_kind.map_or(0, |(since, _)| since);
    }

    /// Handles a full sync request from the peer once the current link is
    /// known: needless when a full sync this link started had not reached
    /// the peer when it asked (both sides of a first contact ask and send).
    ///
    /// A request that says what the peer holds (`since` above 0) gets a
    /// sync since that watermark when `own_data_versioned` (every key
    /// here has a version: nothing would be missed by shipping only
    /// versions after it), else a full sync. A request that is not an
    /// answer gets an answer request back, unless this node asked on this
    /// link already.
    ///
    /// Nor when this node collected a tombstone that such a sync would
    /// have to ship (one of ours after `since`, one of the peer's after
    /// `own`): the peer may have lost that delete with its state, and only
    /// a full sync makes the two sides agree again.
    pub fn take_sync_request(&mut self, own_data_versioned: bool, me: u64, peer: u64) {
        if !std::mem::take(&mut self.sync_requested) {
            return;
        }
        // What the peer misses is known now (and ships before coverage).
        self.awaiting_peer_request = false;
        let received = std::mem::take(&mut self.request_received);
        let since = std::mem::replace(&mut self.request_since, u64::MAX);
        let own = std::mem::replace(&mut self.request_own, u64::MAX);
        let initial = std::mem::take(&mut self.request_initial);
        if initial && !self.asked_on_link && !self.request_sync {
            self.answer_wanted = true;
        }
        // A full sync running or due covers any request but an initial one
        // that had received part of it (the peer lost that part).
        let running_full =
            self.full_sync_wanted || (self.full_sync.is_some() && self.sync_kind.is_none());
        let covered = self.full_sync_on_link && received <= self.full_sync_started_after;
        if running_full && (!initial || covered) {
            return;
        }
        let deletes_kept =
            !self.versions.collected_after(me, since) && !self.versions.collected_after(peer, own);
        if initial && !deletes_kept {
            self.answer_asks_all = true;
        }
        if since > 0 && since != u64::MAX && own_data_versioned && deletes_kept {
            let (s, o) = self.since_sync_wanted.unwrap_or((u64::MAX, u64::MAX));
            self.since_sync_wanted = Some((s.min(since), o.min(own)));
        } else {
            self.full_sync_wanted = true;
        }
    }

    /// What this node's stream has covered of its own changes, when it is
    /// in step with the peer: every change of ours stamped at or below it
    /// is in the stream before now (nothing waits in the backlog, for a
    /// retry or in a sync). `None` while catching up.
    pub fn coverage(&self) -> Option<u64> {
        let in_step = !self.awaiting_peer_request
            && self.backlog.is_empty()
            && self.unread.is_empty()
            && self.full_sync.is_none()
            && !self.full_sync_wanted
            && self.since_sync_wanted.is_none()
            && !self.sync_requested;
        in_step.then_some(self.last_local_stamp)
    }

    /// A sync request went out with sequence number `seq`.
    pub fn sync_request_sent(&mut self, seq: u64, answer: bool) {
        if answer {
            self.answer_wanted = false;
            self.answer_asks_all = false;
        } else {
            self.request_sync = false;
        }
        self.asked_on_link = true;
        self.sync_request_unacked = Some((seq, answer));
    }

    /// The full sync handed out its last entry, sequence number `last_seq`
    /// (0: it shipped nothing).
    pub fn full_sync_sent(&mut self, last_seq: u64) {
        self.report.done();
        if self.full_sync.take().is_some_and(|s| s.since().is_some()) {
            self.since_syncs += 1;
        } else {
            self.full_syncs += 1;
        }
        self.full_sync_unacked = (last_seq > self.peer_acked).then_some(last_seq);
    }

    /// Whether an ack is due (something applied since the last one).
    pub fn ack_due(&self) -> bool {
        self.applied_from_peer != self.ack_sent && self.applied_from_peer != 0
    }

    /// The ack taken last could not be queued: send it again later.
    pub fn ack_lost(&mut self) {
        self.ack_sent = 0;
        self.coverage_sent = 0;
    }

    /// Whether acks moved on since the last tombstone collection.
    pub fn collection_due(&self) -> bool {
        // A full sync walks the tombstone index by position: keep it stable.
        self.full_sync.is_none()
            && ((self.peer_acked != self.collected_at && self.versions.tombstones() != 0)
                || self.versions.needs_compaction())
    }

    /// Appends local changes that cannot ship now.
    pub fn defer(&mut self, ops: Vec<PendingOp>) {
        self.backlog.extend(ops);
        self.check_overflow();
    }

    /// Whether the backlog outgrew its bound; if so it is dropped and a full
    /// sync is due instead.
    pub fn check_overflow(&mut self) -> bool {
        if self.backlog.len() > self.backlog_limit || self.inflight.len() > self.backlog_limit {
            let _ = self.backlog.take();
            let _ = self.requeue_unacked();
            self.full_sync_wanted = true;
            return true;
        }
        false
    }

    /// A batch went out whose last sequence number is `last_seq`; its
    /// changes are kept until the peer acknowledges them.
    pub fn shipped(&mut self, batch: SentBatch, last_seq: u64) {
        self.inflight.push(batch);
        self.last_pushed = self.last_pushed.max(last_seq);
        // A peer that never acknowledges (it is a replica, or stuck) must
        // not grow this without bound: a full sync replaces it.
        if self.inflight.len() > self.backlog_limit {
            self.check_overflow();
        }
    }

    /// An entry went out that needs no resend (full sync, ack).
    pub fn pushed(&mut self, seq: u64) {
        self.last_pushed = self.last_pushed.max(seq);
    }

    /// The peer applied our entries up to `applied`.
    pub fn acknowledged(&mut self, applied: u64) {
        self.peer_acked = self.peer_acked.max(applied);
        self.inflight.acknowledged(applied);
        let acked = self.peer_acked;
        self.full_sync_unacked = self.full_sync_unacked.filter(|&last| last > acked);
        self.sync_request_unacked = self.sync_request_unacked.filter(|&(seq, _)| seq > acked);
    }

    /// The peer asked for a full sync; it had received our entries up to
    /// `received`.
    pub fn peer_asks_for_sync(&mut self, received: u64, since: u64, own: u64, answer: bool) {
        if !answer {
            // It lost state: what our acks told it of our coverage is void
            // until the sync that answers this request has reached it.
            self.coverage_sent = 0;
        }
        self.sync_requested = true;
        self.request_received = self.request_received.max(received);
        self.request_since = self.request_since.min(since);
        self.request_own = self.request_own.min(own);
        self.request_initial |= !answer;
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

    /// The ack to send now, if anything was applied since the last one and
    /// the last ack is at least [`ACK_INTERVAL`] old (acks cost the peer a
    /// frame each; under load one per interval is plenty).
    ///
    /// Returns `(applied, coverage)`: the peer's last data entry applied
    /// here, and what our stream has covered of our own changes (sent when
    /// it moved on too, so an idle peer still learns it; an unchanged
    /// coverage while catching up).
    pub fn take_ack(&mut self) -> Option<(u64, u64)> {
        self.take_ack_at(Instant::now())
    }

    /// [`Self::take_ack`] at time `now`.
    fn take_ack_at(&mut self, now: Instant) -> Option<(u64, u64)> {
        let recent = self
            .last_ack_at
            .is_some_and(|at| now.saturating_duration_since(at) < ACK_INTERVAL);
        let coverage = self.coverage().filter(|&c| c > self.coverage_sent);
        if (self.ack_due() || coverage.is_some()) && !recent {
            self.ack_sent = self.applied_from_peer;
            self.last_ack_at = Some(now);
            self.coverage_sent = coverage.unwrap_or(self.coverage_sent);
            Some((self.ack_sent, self.coverage_sent))
        } else {
            None
        }
    }

    /// Whether the coverage in the peer's acks may raise this node's
    /// watermark of it: not while a request of ours for what we miss (we
    /// lost state) is unanswered, since the peer's earlier acks speak of a
    /// stream whose earlier links this node no longer holds.
    pub fn accepts_coverage(&self) -> bool {
        !self.request_sync && !matches!(self.sync_request_unacked, Some((_, false)))
    }

    /// The last coverage our acks told the peer.
    pub fn coverage_sent(&self) -> u64 {
        self.coverage_sent
    }

    /// Collects the tombstones the peer acknowledged, when acks moved on,
    /// and (`acked_remote`: this node just sent an ack) those applied from it.
    pub fn collect_tombstones(&mut self, acked_remote: bool) -> usize {
        let remote_due =
            acked_remote && self.versions.tombstones() != 0 && self.full_sync.is_none();
        if !self.collection_due() && !remote_due {
            return 0;
        }
        self.collected_at = self.peer_acked;
        self.versions.collect(self.peer_acked, acked_remote)
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

    /// Whether shipping is still catching up (backlog or full sync).
    pub fn catching_up(&self) -> bool {
        !self.backlog.is_empty() || self.full_sync.is_some()
    }

    /// A sync is wanted, asked for or owed to the peer.
    pub fn sync_pending(&self) -> bool {
        self.full_sync_wanted
            || self.since_sync_wanted.is_some()
            || self.sync_requested
            || self.request_sync
            || self.answer_wanted
    }

    /// Whether a resting hot key may hold changes back on link `epoch`:
    /// only changes that would ship at once may wait. A catch-up (backlog,
    /// full sync, a sync owed, retries of unread keys) reads current values,
    /// which would overtake the held changes.
    pub fn lets_changes_rest(&self, epoch: u64) -> bool {
        !self.catching_up()
            && self.unread.is_empty()
            && !self.sync_pending()
            && !self.is_new_link(epoch)
    }

    /// Whether a flush has work on an up link even with no change of its
    /// own: catching up, a sync, an ack or coverage to send, tombstones to
    /// collect, unread keys to retry.
    pub fn has_link_work(&self) -> bool {
        self.catching_up()
            || self.sync_pending()
            || self.ack_due()
            || self.coverage().is_some_and(|c| c > self.coverage_sent())
            || self.collection_due()
            || !self.unread.is_empty()
    }

    /// The figures of `RDMASYNC.STATUS`.
    pub fn convergence(&self) -> Convergence {
        Convergence {
            versioned_keys: self.versions.len() as u64,
            unread_keys: self.unread.len() as u64,
            tombstones: self.versions.tombstones() as u64,
            backlog: self.backlog.len() as u64,
            lag_entries: self.lag_ops() as u64,
            lag_ms: self.lag_ms(),
            full_syncs: self.full_syncs,
            partial_syncs: self.partial_syncs,
            // A full sync handed out but not yet acknowledged may still start over.
            sync_in_progress: self.catching_up() || self.full_sync_unacked.is_some(),
            catchup: match self.report.kind {
                None => "none",
                Some(CatchUp::Full) => "full",
                Some(CatchUp::Partial) => "partial",
                Some(CatchUp::Since) => "since",
            },
            catchup_since: self.report.since,
            // One peer: the one watermark the store holds.
            peer_watermark: self
                .versions
                .watermarks()
                .map(|(_, c)| c)
                .max()
                .unwrap_or(0),
            since_syncs: self.since_syncs,
            catchup_entries: self.report.entries,
            catchup_from_seq: self.report.from_seq,
            catchup_ms: self.report.took_ms.unwrap_or_else(|| {
                self.report
                    .started
                    .map_or(0, |t| t.elapsed().as_millis() as u64)
            }),
            stamps_loaded: self.stamps_loaded,
            stamps_dated: self.stamps_dated,
        }
    }

    /// The dataset was replaced wholesale: versions restart (persistence
    /// refills them) and this node asks the peer for what it misses. From
    /// its own files (a restart, `DEBUG RELOAD`/`LOADAOF`: `own_files`)
    /// the versions come back with the data, and the peer's answer request
    /// says what to send it (a sync since its watermark when every key has
    /// a version); data from a master is merged both ways with full syncs.
    pub fn dataset_replaced(&mut self, own_files: bool) {
        self.versions.clear();
        self.merge_again();
        if own_files {
            self.full_sync_wanted = false;
        }
    }

    /// This node's data came from elsewhere (it was a replica and is a
    /// master again): merge with the peer both ways, versions kept.
    pub fn merge_again(&mut self) {
        self.received_at_loss = self.received_from_peer;
        // Its own changes: the store's newest (a load sets it again).
        self.own_durable = None;
        self.awaiting_peer_request = true;
        let _ = self.backlog.take();
        let _ = self.requeue_unacked();
        self.full_sync = None;
        self.full_sync_wanted = true;
        self.request_sync = true;
        // Force a new catch-up even if the link stays up.
        self.link_epoch = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> PendingOp {
        PendingOp::Key {
            db: 0,
            key: k.as_bytes().to_vec(),
        }
    }

    /// Linked on link 1, the request a fresh node makes already sent.
    fn settled() -> Replication {
        let mut r = Replication::new(10);
        r.link_up(1);
        r.request_sync = false;
        r
    }

    #[test]
    fn changes_rest_only_when_nothing_is_caught_up_or_owed() {
        let r = settled();
        assert!(r.lets_changes_rest(1));
        assert!(!r.has_link_work());
        // A link not seen yet: its catch-up comes first.
        assert!(!r.lets_changes_rest(2));
        for set in [
            (|r: &mut Replication| r.full_sync_wanted = true) as fn(&mut Replication),
            |r| r.since_sync_wanted = Some((1, 2)),
            |r| r.sync_requested = true,
            |r| r.request_sync = true,
            |r| r.answer_wanted = true,
            |r| r.defer(vec![key("k")]),
            |r| {
                r.unread.insert((0, b"k".to_vec().into()), Stamp::new(1, 1));
            },
        ] {
            let mut busy = settled();
            set(&mut busy);
            assert!(!busy.lets_changes_rest(1));
            assert!(busy.has_link_work());
        }
    }

    #[test]
    fn an_ack_due_is_link_work_but_lets_changes_rest() {
        let mut r = settled();
        r.received(5);
        r.applied(5);
        assert!(r.ack_due());
        assert!(r.has_link_work());
        assert!(r.lets_changes_rest(1));
    }

    #[test]
    fn unread_changes_move_with_swapdb() {
        let mut r = Replication::new(10);
        let s = Stamp::new(5, 1);
        r.unread.insert((0, Box::from(&b"k"[..])), s);
        r.unread.insert((2, Box::from(&b"j"[..])), s);
        r.swap_dbs(0, 1);
        assert_eq!(r.unread.get(&(1, Box::from(&b"k"[..]))), Some(&s));
        assert_eq!(r.unread.get(&(2, Box::from(&b"j"[..]))), Some(&s));
        assert_eq!(r.unread.len(), 2);
    }

    #[test]
    fn first_contact_is_a_full_sync_then_partial() {
        let mut r = Replication::new(10);
        assert!(r.request_sync);
        // A fresh node asks; the peer (fresh too) asks with nothing held.
        assert_eq!(r.link_up(1), CatchUp::Partial);
        r.sync_request_sent(1, false);
        r.peer_asks_for_sync(0, 0, 0, false);
        r.take_sync_request(true, 1, 2);
        assert!(r.full_sync_wanted, "nothing held: a full sync");
        assert!(!r.answer_wanted, "both asked: no answer needed");
        r.start_full_sync(FullSync::new(16));
        assert!(!r.full_sync_wanted);
        r.full_sync_sent(0);
        assert_eq!(r.full_syncs, 1);
        assert!(!r.is_new_link(1));
        assert!(r.is_new_link(2));
        assert_eq!(r.link_up(2), CatchUp::Partial);
        assert_eq!(r.partial_syncs, 2);
    }

    #[test]
    fn a_full_sync_not_acknowledged_when_the_link_drops_starts_over() {
        let mut r = Replication::new(10);
        r.full_sync_wanted = true;
        assert_eq!(r.link_up(1), CatchUp::Full);
        r.start_full_sync(FullSync::new(16));
        r.pushed(7);
        r.full_sync_sent(7);
        // Its tail may still be queued (or lost in flight) when the link goes.
        r.acknowledged(6);
        assert_eq!(r.link_up(2), CatchUp::Full);
        assert!(r.full_sync_wanted);
        r.start_full_sync(FullSync::new(16));
        r.pushed(9);
        r.full_sync_sent(8);
        r.acknowledged(9);
        assert_eq!(r.link_up(3), CatchUp::Partial);
        // A full sync that shipped nothing has nothing to wait for, whatever
        // else went out unacknowledged.
        r.full_sync_wanted = true;
        assert_eq!(r.link_up(4), CatchUp::Full);
        r.start_full_sync(FullSync::new(16));
        r.pushed(10);
        r.full_sync_sent(0);
        assert_eq!(r.link_up(5), CatchUp::Partial);
    }

    #[test]
    fn a_sync_request_not_acknowledged_when_the_link_drops_is_sent_again() {
        let mut r = Replication::new(10);
        r.link_up(1);
        assert!(r.request_sync);
        r.sync_request_sent(3, false);
        assert!(!r.request_sync);
        r.acknowledged(2);
        r.link_up(2);
        assert!(r.request_sync, "lost with the link: ask again");
        r.sync_request_sent(5, false);
        r.acknowledged(5);
        r.link_up(3);
        assert!(!r.request_sync);
    }

    #[test]
    fn a_sync_request_is_covered_only_by_a_full_sync_the_peer_had_not_received() {
        let mut r = Replication::new(10);
        r.link_up(1);
        r.pushed(10);
        r.start_full_sync(FullSync::new(16));
        // First contact: the peer asked before any of it reached the peer.
        r.peer_asks_for_sync(10, 0, 0, false);
        r.take_sync_request(true, 1, 2);
        assert!(!r.full_sync_wanted);
        // Later on the same link (it was a replica, or reloaded): it had
        // received part of that full sync already, so it needs another.
        r.pushed(30);
        r.peer_asks_for_sync(25, 0, 0, false);
        r.take_sync_request(true, 1, 2);
        assert!(r.full_sync_wanted);
    }

    #[test]
    fn what_a_replica_drops_counts_as_received() {
        let mut r = Replication::new(10);
        r.applied(4);
        r.received(9);
        r.applied(7);
        assert_eq!(r.take_ack(), Some((7, 0)));
        // A fresh node says it had received nothing; one that lost state
        // later says what it had received then, not what came after.
        assert_eq!(r.received_at_loss(), 0);
        r.merge_again();
        r.applied(12);
        assert_eq!(r.received_at_loss(), 9);
    }

    #[test]
    fn unacknowledged_changes_are_resent_first() {
        let mut r = Replication::new(10);
        r.link_up(1);
        r.start_full_sync(FullSync::new(16));
        r.full_sync_sent(0);
        for (seq, k) in [(1, "a"), (2, "b"), (3, "c")] {
            let mut batch = SentBatch::new(Instant::now());
            let key = k.as_bytes().to_vec();
            batch.record(&crate::proto::entry::Entry {
                origin: 1,
                seq,
                clock: seq,
                db: 0,
                op: crate::proto::entry::Op::Delete { key },
            });
            r.shipped(batch, seq);
        }
        r.acknowledged(1);
        assert_eq!(r.lag_ops(), 2);
        r.defer(vec![key("d")]);
        assert_eq!(r.link_up(2), CatchUp::Partial);
        assert_eq!(r.backlog.take(), vec![key("b"), key("c"), key("d")]);
        assert_eq!(r.lag_ops(), 0);
    }

    #[test]
    fn the_report_says_which_catch_up_ran_from_where() {
        let mut r = Replication::new(10);
        assert_eq!(r.convergence().catchup, "none");
        r.full_sync_wanted = true;
        assert_eq!(r.link_up(1), CatchUp::Full);
        r.pushed(4);
        r.start_full_sync(FullSync::new(16));
        r.report.entries = 7;
        r.full_sync_sent(9);
        let c = r.convergence();
        assert_eq!(
            (c.catchup, c.catchup_entries, c.catchup_from_seq),
            ("full", 7, 4)
        );
        r.acknowledged(9);
        r.defer(vec![key("a")]);
        assert_eq!(r.link_up(2), CatchUp::Partial);
        let c = r.convergence();
        assert_eq!(
            (c.catchup, c.catchup_entries, c.catchup_from_seq),
            ("partial", 0, 9)
        );
        assert!(r.report.took_ms.is_none(), "the backlog is still to ship");
    }

    #[test]
    fn a_restarted_node_and_its_peer_sync_since_their_watermarks() {
        // P, up all along, gets the restarted node's request.
        let mut p = Replication::new(10);
        p.request_sync = false;
        assert_eq!(p.link_up(1), CatchUp::Partial);
        p.peer_asks_for_sync(0, 500, 400, false);
        p.take_sync_request(true, 1, 2);
        assert_eq!(p.since_sync_wanted, Some((500, 400)));
        assert!(!p.full_sync_wanted);
        assert!(p.answer_wanted, "it asks what it misses in turn");
        p.sync_request_sent(2, true);
        assert!(!p.answer_wanted);
        // Lost with the link: the answer is asked again, as an answer.
        assert_eq!(p.link_up(2), CatchUp::Since);
        assert!(p.answer_wanted && !p.request_sync);
        p.start_full_sync(FullSync::new(16));
        // A tombstone of ours after its watermark was collected here: full.
        let mut g = Replication::new(10);
        g.request_sync = false;
        g.versions.record_collected(Stamp::new(600, 1));
        g.peer_asks_for_sync(0, 500, 400, false);
        g.take_sync_request(true, 1, 2);
        assert!(g.full_sync_wanted && g.since_sync_wanted.is_none());
        assert!(
            g.answer_wanted && g.answer_asks_all,
            "and all of its data back"
        );
        // A request with nothing held, or data without versions here: full.
        let mut q = Replication::new(10);
        q.request_sync = false;
        q.peer_asks_for_sync(0, 0, 0, false);
        q.take_sync_request(true, 1, 2);
        assert!(q.full_sync_wanted);
        let mut u = Replication::new(10);
        u.request_sync = false;
        u.peer_asks_for_sync(0, 500, 400, false);
        u.take_sync_request(false, 1, 2);
        assert!(u.full_sync_wanted && u.since_sync_wanted.is_none());
        // The restarted node gets the answer: a sync since, no answer back.
        let mut x = Replication::new(10);
        x.link_up(1);
        x.sync_request_sent(1, false);
        x.peer_asks_for_sync(0, 700, u64::MAX, true);
        x.take_sync_request(true, 1, 2);
        assert_eq!(x.since_sync_wanted, Some((700, u64::MAX)));
        assert!(!x.answer_wanted);
        // A full sync due covers an answer request.
        let mut y = Replication::new(10);
        y.full_sync_wanted = true;
        y.peer_asks_for_sync(0, 700, u64::MAX, true);
        y.take_sync_request(true, 1, 2);
        assert!(y.since_sync_wanted.is_none());
    }

    #[test]
    fn coverage_is_void_while_a_request_for_what_we_miss_is_unanswered() {
        let mut x = Replication::new(10);
        assert!(!x.accepts_coverage(), "it lost state: it asks first");
        x.link_up(1);
        x.sync_request_sent(4, false);
        assert!(!x.accepts_coverage());
        x.acknowledged(4);
        assert!(x.accepts_coverage());
        // The peer side: a request from a node that lost state voids what
        // its acks said; the answer request of a peer that did not, not.
        let mut p = Replication::new(10);
        p.request_sync = false;
        p.awaiting_peer_request = false;
        p.link_up(1);
        p.last_local_stamp = 50;
        assert_eq!(p.take_ack(), Some((0, 50)));
        p.peer_asks_for_sync(0, 10, 10, true);
        assert_eq!(p.coverage_sent(), 50);
        p.peer_asks_for_sync(0, 10, 10, false);
        assert_eq!(p.coverage_sent(), 0);
    }

    #[test]
    fn coverage_moves_only_in_step_and_rides_on_acks() {
        let mut r = Replication::new(10);
        r.request_sync = false;
        r.link_up(1);
        r.last_local_stamp = 90;
        assert_eq!(r.coverage(), None, "it has not heard what the peer misses");
        r.peer_asks_for_sync(0, 0, 0, true);
        r.take_sync_request(true, 1, 2);
        r.start_full_sync(FullSync::new(16));
        assert_eq!(r.coverage(), None, "a sync to ship first");
        r.full_sync_sent(0);
        assert_eq!(r.coverage(), Some(90));
        assert_eq!(r.take_ack(), Some((0, 90)), "an idle peer learns it");
        assert_eq!(r.take_ack(), None);
        r.defer(vec![key("a")]);
        r.last_local_stamp = 95;
        assert_eq!(r.coverage(), None, "a backlog to ship");
        r.applied(3);
        let later = Instant::now() + ACK_INTERVAL;
        assert_eq!(
            r.take_ack_at(later),
            Some((3, 90)),
            "unchanged while catching up"
        );
        let _ = r.backlog.take();
        r.full_sync_wanted = true;
        assert_eq!(r.coverage(), None);
    }

    #[test]
    fn overflow_turns_into_a_full_sync() {
        let mut r = Replication::new(2);
        r.link_up(1);
        r.start_full_sync(FullSync::new(16));
        r.full_sync_sent(0);
        r.defer(vec![key("a"), key("b")]);
        assert!(!r.full_sync_wanted);
        r.defer(vec![key("c")]);
        assert!(r.full_sync_wanted);
        assert!(r.backlog.is_empty());
        assert_eq!(r.link_up(2), CatchUp::Full);
        r.start_full_sync(FullSync::new(16));
    }

    #[test]
    fn acks_are_sent_once_per_change() {
        let t0 = Instant::now();
        let later = |n: u32| t0 + ACK_INTERVAL * n;
        let mut r = Replication::new(10);
        assert_eq!(r.take_ack_at(t0), None);
        r.applied(5);
        assert_eq!(r.take_ack_at(t0), Some((5, 0)));
        assert_eq!(r.take_ack_at(t0), None);
        r.applied(6);
        // Rate-limited: not before the interval.
        assert_eq!(r.take_ack_at(t0 + ACK_INTERVAL / 2), None);
        assert_eq!(r.take_ack_at(later(1)), Some((6, 0)));
        // A new link keeps what was applied on the old one.
        r.applied(7);
        r.link_up(1);
        assert_eq!(r.take_ack_at(later(2)), Some((7, 0)));
    }

    #[test]
    fn tombstones_go_once_acknowledged() {
        use crate::converge::version::Stamp;
        let mut r = Replication::new(10);
        r.versions.record_delete(0, b"k", Stamp::new(5, 1), 3);
        assert_eq!(r.collect_tombstones(false), 0);
        r.acknowledged(2);
        assert_eq!(r.collect_tombstones(false), 0);
        r.acknowledged(3);
        assert_eq!(r.collect_tombstones(false), 1);
        assert_eq!(r.versions.tombstones(), 0);
    }
}
