//! The node's convergence state: its version store (versions, tombstones,
//! floors, watermarks), what it could not read, its own durable changes,
//! and the progress of its peer (`peer::Peer`: backlog, changes in
//! flight, syncs and acknowledgements). What needs both (a link-up that
//! unmarks unacknowledged changes in the store, coverage, tombstone
//! collection) is decided here. Main thread only; no Redis calls here.

use crate::converge::merge::bound::OwnBound;
use crate::converge::merge::Seen;
use std::time::Instant;

use crate::catchup::inflight::SentBatch;
use crate::catchup::peer::{LinkView, Peer, PeerRequest};
use crate::catchup::snapshot::SyncKind;
use crate::converge::changes::PendingOp;
use crate::converge::journal::RewriteBase;
use crate::converge::sweep::SweepFloors;
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
    pub(super) fn start(kind: CatchUp, from_seq: u64) -> Self {
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

/// Keys written since a load that [`Replication::note_local_write`] keeps
/// at most (past it, a lost change of one of the others that comes back
/// wins by its stamp, as before).
pub const MAX_WRITTEN_SINCE_LOAD: usize = 1_000_000;

/// A delete to ship again: database, key, stamp, and the key's version
/// when it was queued (it ships only while the version is that one).
pub type DeleteAgain = (u32, Box<[u8]>, Stamp, Option<Stamp>);

/// Convergence state of this node. Touched on the main thread only (capture,
/// apply, keyspace events, persistence), so its lock is never contended.
#[derive(Debug)]
pub struct Replication {
    /// Per-key versions, tombstones and flush floors.
    pub versions: VersionStore,
    /// Changes a resend or full sync could not read (a read error), with the
    /// version they are to ship at; retried once per flush, never shipped
    /// as deleted and never restamped as a new write.
    pub unread: hashbrown::HashMap<(u32, Box<[u8]>), Stamp>,
    /// Deletes to ship again at these stamps (a key the peer appended to
    /// that this node does not hold: `receive::apply_append`), with the
    /// unread changes, unless the key's version here is no longer the one
    /// it had then (the last field).
    pub deletes_again: Vec<DeleteAgain>,
    /// This node's own changes it held after its last load, up to this
    /// clock (what its requests tell the peer; `None`: no load, the store's
    /// newest own stamp then).
    pub own_durable: Option<u64>,
    /// The clock when the last load ended: this node's own changes stamped
    /// after `own_durable` and up to it may have been lost by that load
    /// (a sweep vouches for none of them).
    pub own_loaded_clock: u64,
    /// The window of own changes loads may have lost, `(from, to]`, kept
    /// from one load to the next until the peer's answering sync has
    /// arrived: a second load (a `DEBUG RELOAD`, a replica's resync) widens
    /// it instead of forgetting what the first lost.
    pub lost_window: Option<(u64, u64)>,
    /// The keys this node wrote since a load, while `lost_window` is open
    /// (at most [`MAX_WRITTEN_SINCE_LOAD`]), each with the stamp of its
    /// last such write: a change of its own that a load lost and the peer
    /// sends back is older than that write, whatever their stamps, while
    /// it is the key's version (`receive::apply::decide`). Kept across a
    /// second load (a reload of an older file leaves another version).
    pub written_since_load: hashbrown::HashMap<(u32, Box<[u8]>), Stamp>,
    /// Tombstones of this node's deletes kept for a peer that has not
    /// acknowledged them (`max-tombstones`).
    pub tombstone_limit: usize,
    /// `max-clock-offset`, in milliseconds.
    pub max_clock_offset_ms: u64,
    /// Below the stamp of this node's first change refused because no frame
    /// could carry it (see `capture::flush::push`): the
    /// coverage it claims never passes a change the peer could not get.
    pub own_coverage_cap: Option<u64>,
    /// Below the stamp of the peer's first change that failed to apply
    /// here: the watermark of the peer never passes a change not held.
    pub peer_coverage_cap: Option<u64>,
    /// The newest stamp of this node's own changes so far.
    pub last_local_stamp: u64,
    /// A wake-up timer is pending (more to ship).
    pub wake_pending: bool,
    /// Stamp records replayed from the AOF or a master's stream.
    pub stamps_loaded: u64,
    /// Changes a load found without their stamp, dated then.
    pub stamps_dated: u64,
    /// The store as of the last AOF rewrite without preamble made while
    /// `appendonly` was off: that base file carries no versions (no
    /// incremental file follows it to carry them), so `DEBUG LOADAOF` of
    /// it takes them from here. Encoded blobs; `None` after any other
    /// rewrite.
    pub rewrite_versions: Option<Vec<Vec<u8>>>,
    /// What the rewrite running now will leave: it replaces
    /// `rewrite_versions` only once the server says the rewrite succeeded
    /// (a failed or killed one leaves the base before it in place).
    pub rewrite_pending: Option<RewriteBase>,
    /// The load running (or last run) reads the AOF.
    pub loading_aof: bool,
    /// The peer's progress (one peer today: a second is a second value).
    pub peer: Peer,
    /// Which of this node's changes the peer applied, for the bound.
    pub own_bound: OwnBound,
    /// The bound the peer sent with the batch being applied (what it had
    /// seen of keys it held at rest).
    pub peer_bound: Option<Seen>,
    /// What the peer had applied when it read the batch being applied
    /// (its bound notice): all a plain delete of its had seen.
    pub peer_applied: Option<Seen>,
    /// The coverage the peer's notice gave for the batch being applied
    /// (origin, clock): once the batch is applied, this node holds every
    /// change of the peer's up to it, and its watermark says so at once
    /// (not only at the peer's next ack), so that what a removal here had
    /// seen includes everything the peer's bound may already count.
    pub peer_batch_coverage: Option<(u64, u64)>,
    /// When a refused change was last logged, and how many were refused
    /// since (the log says it at most every `REFUSAL_LOG_EVERY`).
    pub refusals_logged: (Option<std::time::Instant>, u64),
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
            unread: hashbrown::HashMap::new(),
            deletes_again: Vec::new(),
            own_durable: None,
            own_loaded_clock: 0,
            lost_window: None,
            written_since_load: hashbrown::HashMap::new(),
            tombstone_limit: crate::ops::config::DEFAULT_MAX_TOMBSTONES,
            max_clock_offset_ms: crate::ops::config::DEFAULT_MAX_CLOCK_OFFSET_MS,
            own_coverage_cap: None,
            peer_coverage_cap: None,
            last_local_stamp: 0,
            wake_pending: false,
            stamps_loaded: 0,
            stamps_dated: 0,
            rewrite_versions: None,
            rewrite_pending: None,
            loading_aof: false,
            peer: Peer::new(backlog_limit),
            own_bound: OwnBound::default(),
            peer_bound: None,
            peer_applied: None,
            peer_batch_coverage: None,
            refusals_logged: (None, 0),
        }
    }

    /// `SWAPDB a b`: versions and unread changes move with the data.
    ///
    /// A sweep being received names databases as the peer had them: it
    /// ends, and the return says so.
    pub fn swap_dbs(&mut self, a: u32, b: u32) -> bool {
        use crate::converge::merge::db_key::{swap_dbs_in, swapped};
        self.versions.swap(a, b);
        let sweep_ended = self.peer.incoming_sweep.take().is_some();
        for (db, _, _, _) in &mut self.deletes_again {
            *db = swapped(*db, a, b);
        }
        if !self.written_since_load.is_empty() {
            swap_dbs_in(&mut self.written_since_load, a, b);
        }
        if !self.unread.is_empty() {
            swap_dbs_in(&mut self.unread, a, b);
        }
        sweep_ended
    }

    /// A new link is up: what was shipped and not acknowledged may be lost,
    /// so it goes back to the front of the backlog. Returns how to catch up.
    ///
    /// Taken when the main thread learns of the link, before anything that
    /// came over it: an ack from the new link then covers only what was
    /// queued for it (the sender writes nothing else to it), never a change
    /// the old link lost. The acks and coverage this node sent may have
    /// been lost too: the next ack says them again.
    pub fn link_up(&mut self, link: LinkView) -> CatchUp {
        // Requests sent and syncs cut off by the link drop, or handed out
        // but not known to have arrived: due and owed again.
        self.peer.progress.caught_up(link);
        // Slices of a state at the backlog's front may be lost with the
        // link: the state ships again from its first.
        self.peer.backlog_state = None;
        self.own_bound.link_up();
        self.peer.incoming_sweep = None;
        self.peer.ack_lost();
        let unacked = self.requeue_unacked();
        self.peer.backlog.restore(unacked);
        self.check_overflow();
        match self.peer.progress.owed() {
            Some(SyncKind::Full) => CatchUp::Full,
            Some(SyncKind::Since { .. }) => CatchUp::Since,
            None => {
                self.peer.partial_syncs += 1;
                self.peer.report = CatchUpReport::start(CatchUp::Partial, self.peer.peer_acked);
                if self.peer.backlog.is_empty() {
                    self.peer.report.done();
                }
                CatchUp::Partial
            }
        }
    }

    /// Takes the unacknowledged changes; their tombstones may be lost with
    /// the link, so they stay until shipped again.
    fn requeue_unacked(&mut self) -> Vec<PendingOp> {
        let acked = self.peer.peer_acked;
        let ops = self.peer.inflight.drain();
        for op in &ops {
            match op {
                PendingOp::Key { db, key } => self.versions.unship(*db, key, acked),
                PendingOp::Library(name) => self.versions.unship_library(name, acked),
                _ => {}
            }
        }
        ops
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
        let versions = &self.versions;
        let deletes_kept = |r: &PeerRequest| {
            !versions.collected_after(me, r.since) && !versions.collected_after(peer, r.own)
        };
        // What the peer misses is known now (and ships before coverage);
        // a first request gets an answer back, before any return below: a
        // sync of ours ships no delete whose tombstone we collected, so
        // only the peer's whole dataset makes the two sides agree then.
        let Some(request) = self.peer.progress.take_request(|r| !deletes_kept(r)) else {
            return;
        };
        let PeerRequest {
            received,
            since,
            own,
            initial,
        } = request;
        // A full sync running or due covers any request but an initial one
        // that had received part of it (the peer lost that part).
        let running_full = self.peer.progress.full_running_or_owed();
        let covered = self.peer.progress.sync_started_after(received);
        if running_full && (!initial || covered) {
            return;
        }
        if since > 0 && since != u64::MAX && own_data_versioned && deletes_kept(&request) {
            self.peer.progress.owe(SyncKind::Since { since, own });
        } else {
            self.peer.progress.owe(SyncKind::Full);
        }
    }

    /// What this node's stream has covered of its own changes, when it is
    /// in step with the peer: every change of ours stamped at or below it
    /// is in the stream before now (nothing waits in the backlog, for a
    /// retry or in a sync). `None` while catching up.
    pub fn coverage(&self) -> Option<u64> {
        let in_step = !self.peer.progress.holds_stream_back()
            && self.peer.backlog.is_empty()
            && self.unread.is_empty()
            && self.deletes_again.is_empty();
        let cap = self.own_coverage_cap.unwrap_or(u64::MAX);
        in_step.then_some(self.last_local_stamp.min(cap))
    }

    /// A change stamped `clock` could not be held (by the peer: `ours`,
    /// refused unframeable; here: it failed to apply): the coverage
    /// claimed of its origin stays below it from now on.
    pub fn not_held(&mut self, clock: u64, ours: bool) {
        let cap = if ours {
            &mut self.own_coverage_cap
        } else {
            &mut self.peer_coverage_cap
        };
        let below = clock.saturating_sub(1);
        *cap = Some(cap.map_or(below, |c| c.min(below)));
    }

    /// Whether acks moved on since the last tombstone collection.
    pub fn collection_due(&self) -> bool {
        // A full sync walks the tombstone index by position: keep it stable.
        !self.peer.progress.sync_running()
            && ((self.peer.peer_acked != self.peer.collected_at && self.versions.tombstones() != 0)
                || self.versions.needs_compaction())
    }

    /// Holds the tombstones to `tombstone_limit`: past it the oldest of
    /// this node's own go (the peer has not acknowledged them: it is away
    /// or stuck), and the peer is owed a full sync instead of what it
    /// misses, one that sweeps (its end deletes at the peer the keys held
    /// at versions deleted here; see `converge::sweep`). Not while a full
    /// sync on an up link walks the tombstone index. Returns how many went.
    pub fn bound_tombstones(&mut self, me: u64) -> usize {
        // With the link up the peer acknowledges (and tombstones go) within
        // milliseconds: only twice the bound there (a stuck peer).
        let up = self.peer.link().up;
        let limit = match up {
            true => self.tombstone_limit.saturating_mul(2),
            false => self.tombstone_limit,
        };
        if self.versions.key_tombstones() <= limit || (self.peer.progress.sync_running() && up) {
            return 0;
        }
        // An eighth below the bound: a whole pass over the index is not
        // made again at every delete.
        let target = self.tombstone_limit - self.tombstone_limit / 8;
        let dropped = self.versions.drop_oldest_own(me, target);
        if dropped > 0 {
            self.peer.drop_backlog();
            let _ = self.requeue_unacked();
            self.peer.progress.restart_full();
        }
        dropped
    }

    /// What a full sync starting now vouches for (see `converge::sweep`):
    /// `None` unless this node dropped tombstones over the bound.
    pub fn sweep_floors(&self) -> Option<SweepFloors> {
        let dropped = self.versions.dropped()?;
        let gap_from = self.own_durable.unwrap_or(0);
        let gap_to = self.own_loaded_clock.max(gap_from);
        Some(SweepFloors::new(
            dropped.clock,
            self.versions.covered(self.peer.node_id),
            gap_from,
            gap_to,
        ))
    }

    /// Appends local changes that cannot ship now.
    pub fn defer(&mut self, ops: Vec<PendingOp>) {
        if let Some(slices) = &mut self.peer.backlog_state {
            // Held in the op being sliced, it would not ship by itself.
            if ops.iter().any(|op| slices.is_changed_by(op)) {
                slices.key_changed();
            }
        }
        self.peer.backlog.extend(ops);
        self.check_overflow();
    }

    /// Whether the backlog outgrew its bound; if so it is dropped and a full
    /// sync is due instead.
    pub fn check_overflow(&mut self) -> bool {
        if self.peer.backlog.len() > self.peer.backlog_limit
            || self.peer.inflight.len() > self.peer.backlog_limit
        {
            self.peer.drop_backlog();
            let _ = self.requeue_unacked();
            self.peer.progress.owe(SyncKind::Full);
            return true;
        }
        false
    }

    /// A batch went out whose last sequence number is `last_seq`; its
    /// changes are kept until the peer acknowledges them.
    pub fn shipped(&mut self, batch: SentBatch, last_seq: u64) {
        self.peer.inflight.push(batch);
        self.peer.last_pushed = self.peer.last_pushed.max(last_seq);
        // A peer that never acknowledges (it is a replica, or stuck) must
        // not grow this without bound: a full sync replaces it.
        if self.peer.inflight.len() > self.peer.backlog_limit {
            self.check_overflow();
        }
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
            .peer
            .last_ack_at
            .is_some_and(|at| now.saturating_duration_since(at) < ACK_INTERVAL);
        let coverage = self.coverage().filter(|&c| c > self.peer.coverage_sent);
        if (self.peer.ack_due() || coverage.is_some()) && !recent {
            self.peer.ack_sent = self.peer.applied_written;
            self.peer.last_ack_at = Some(now);
            self.peer.coverage_sent = coverage.unwrap_or(self.peer.coverage_sent);
            Some((self.peer.ack_sent, self.peer.coverage_sent))
        } else {
            None
        }
    }

    /// Collects the tombstones the peer acknowledged, when acks moved on,
    /// and (`acked_remote`: this node just sent an ack) those applied from it.
    pub fn collect_tombstones(&mut self, acked_remote: bool) -> usize {
        let remote_due =
            acked_remote && self.versions.tombstones() != 0 && !self.peer.progress.sync_running();
        if !self.collection_due() && !remote_due {
            return 0;
        }
        self.peer.collected_at = self.peer.peer_acked;
        self.versions.collect(self.peer.peer_acked, acked_remote)
    }

    /// Whether a resting hot key may hold changes back on link `epoch`:
    /// only changes that would ship at once may wait. A catch-up (backlog,
    /// full sync, a sync owed, retries of unread keys) reads current values,
    /// which would overtake the held changes.
    pub fn lets_changes_rest(&self, epoch: u64) -> bool {
        !self.peer.catching_up()
            && self.unread.is_empty()
            && self.deletes_again.is_empty()
            && !self.peer.sync_pending()
            && !self.peer.is_new_link(epoch)
    }

    /// Whether a flush has work on an up link even with no change of its
    /// own: catching up, a sync, an ack or coverage to send, tombstones to
    /// collect, unread keys to retry.
    pub fn has_link_work(&self) -> bool {
        // In step with nothing of ours written yet: the first coverage
        // (the clock now) is set and sent by the next link step.
        let first_coverage = self.last_local_stamp == 0 && self.coverage().is_some();
        first_coverage
            || self.peer.catching_up()
            || self.peer.sync_pending()
            || self.peer.ack_due()
            || self
                .coverage()
                .is_some_and(|c| c > self.peer.coverage_sent())
            || self.collection_due()
            || !self.unread.is_empty()
            || !self.deletes_again.is_empty()
            // Counter metadata waits for the bound (a probe may be due).
            || (self.versions.counters.live_len() + self.versions.hashes.len() != 0
                && self.own_bound.is_idle())
    }

    /// The figures of `RDMASYNC.STATUS`.
    pub fn convergence(&self) -> Convergence {
        Convergence {
            versioned_keys: self.versions.len() as u64,
            merge_counters: self.versions.counters.live_len() as u64,
            merge_elements: self.versions.hashes.len() as u64,
            unread_keys: self.unread.len() as u64,
            tombstones: self.versions.tombstones() as u64,
            backlog: self.peer.backlog.len() as u64,
            lag_entries: self.peer.lag_ops() as u64,
            lag_ms: self.peer.lag_ms(),
            full_syncs: self.peer.full_syncs,
            partial_syncs: self.peer.partial_syncs,
            // A full sync handed out but not yet acknowledged may still start over.
            sync_in_progress: self.peer.catching_up() || self.peer.progress.sync_unacknowledged(),
            catchup: match self.peer.report.kind {
                None => "none",
                Some(CatchUp::Full) => "full",
                Some(CatchUp::Partial) => "partial",
                Some(CatchUp::Since) => "since",
            },
            catchup_since: self.peer.report.since,
            // One peer: the one watermark the store holds.
            peer_watermark: self
                .versions
                .watermarks()
                .map(|(_, c)| c)
                .max()
                .unwrap_or(0),
            since_syncs: self.peer.since_syncs,
            peer_state: self.peer.phase().as_str(),
            // 0 means none lost: a window from 0 (no own change survived
            // the load) reads as 1.
            own_lost_after: self.lost_window.map_or(0, |(from, _)| from.max(1)),
            catchup_entries: self.peer.report.entries,
            catchup_from_seq: self.peer.report.from_seq,
            catchup_ms: self.peer.report.took_ms.unwrap_or_else(|| {
                self.peer
                    .report
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
        // A sync since watermarks the peer asked for and has not got yet:
        // the reload drops it with the full one it owes, and the peer does
        // not ask again (it took its answer before).
        let since = self.peer.progress.since_owed_or_running();
        self.versions.clear();
        self.merge_again();
        if own_files {
            self.peer.progress.forgive_full();
            if let Some(kind) = since {
                self.peer.progress.owe(kind);
            }
        }
    }

    /// A load ended: this node's own changes survived up to `own`, and
    /// those stamped up to `loaded` may have been lost. A window an earlier
    /// load left open (the peer has not answered since) widens.
    pub fn loaded(&mut self, own: u64, loaded: u64) {
        // The window the loaded files still held open (a restart before
        // the peer answered), and the one this process kept (a reload).
        let open = [self.lost_window, self.versions.lost_own()];
        let (from, to) = open
            .into_iter()
            .flatten()
            .fold((own, loaded), |(f, t), (of, ot)| (f.min(of), t.max(ot)));
        self.lost_window = Some((from, to));
        self.versions.record_lost_own(from, to);
        self.own_durable = Some(from);
        self.own_loaded_clock = to;
        // What was loaded is not what this node shipped: no append ships
        // from a version of before the load.
        self.versions.appends.clear();
    }

    /// This node wrote `key` of `db` at `stamp` (a change of its own,
    /// stamped now): while a load's lost changes may still come back,
    /// they are older than it.
    pub fn note_local_write(&mut self, (db, key): (u32, &[u8]), stamp: Stamp) {
        use crate::converge::merge::db_key::DbKey;
        if self.lost_window.is_none() {
            return;
        }
        if let Some(held) = self.written_since_load.get_mut(&DbKey(db, key)) {
            *held = stamp;
        } else if self.written_since_load.len() < MAX_WRITTEN_SINCE_LOAD {
            self.written_since_load.insert((db, Box::from(key)), stamp);
        }
    }

    /// The stamp of the last write of `key` of `db` made here since a
    /// load, while its lost changes may still come back.
    pub fn written_since_load(&self, db: u32, key: &[u8]) -> Option<Stamp> {
        if self.lost_window.is_none() || self.written_since_load.is_empty() {
            return None;
        }
        let key = crate::converge::merge::db_key::DbKey(db, key);
        self.written_since_load.get(&key).copied()
    }

    /// The peer's answering sync arrived whole (its coverage is taken
    /// again): what the loads lost of ours is back.
    pub fn lost_window_closed(&mut self) {
        self.lost_window = None;
        self.versions.close_lost_own();
        self.written_since_load = hashbrown::HashMap::new();
    }

    /// This node's data came from elsewhere (it was a replica and is a
    /// master again): merge with the peer both ways, versions kept.
    pub fn merge_again(&mut self) {
        self.peer.received_at_loss = self.peer.received_from_peer;
        // Its own changes: the store's newest (a load sets it again).
        self.own_durable = None;
        self.peer.drop_backlog();
        let _ = self.requeue_unacked();
        // Its strings came from elsewhere: no append ships from a version
        // it shipped before (`converge::appends`).
        self.versions.appends.clear();
        // It asks what it misses, owes a full sync, and catches up again
        // even if the link stays up.
        self.peer.progress.lost_state();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catchup::fullsync::FullSync;

    fn key(k: &str) -> PendingOp {
        PendingOp::Key {
            db: 0,
            key: k.as_bytes().to_vec(),
        }
    }

    /// Link `epoch`, up.
    fn up(epoch: u64) -> LinkView {
        LinkView::up(epoch, 7, 1 << 20)
    }

    /// Linked on link 1, the request a fresh node makes already sent.
    fn settled() -> Replication {
        let mut r = Replication::new(10);
        r.link_up(up(1));
        r.peer.progress.probe_mut(|p| p.forget_own());
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
            (|r: &mut Replication| r.peer.progress.owe(SyncKind::Full)) as fn(&mut Replication),
            |r| r.peer.progress.owe(SyncKind::Since { since: 1, own: 2 }),
            |r| r.peer.peer_asks_for_sync(0, 1, 1, true),
            |r| r.peer.progress.probe_mut(|p| p.lost_state()),
            |r| {
                r.peer
                    .progress
                    .probe_mut(|p| p.peer_request_taken(true, false, 0))
            },
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
        r.peer.received(5);
        r.peer.applied(5);
        assert!(!r.peer.ack_due(), "not before the server writes it");
        assert!(r.peer.persisting());
        assert!(r.peer.ack_due());
        assert!(r.has_link_work());
        assert!(r.lets_changes_rest(1));
    }

    #[test]
    fn unread_changes_move_with_swapdb() {
        let mut r = Replication::new(10);
        let s = Stamp::new(5, 1);
        r.unread.insert((0, Box::from(&b"k"[..])), s);
        r.unread.insert((2, Box::from(&b"j"[..])), s);
        let _ = r.swap_dbs(0, 1);
        assert_eq!(r.unread.get(&(1, Box::from(&b"k"[..]))), Some(&s));
        assert_eq!(r.unread.get(&(2, Box::from(&b"j"[..]))), Some(&s));
        assert_eq!(r.unread.len(), 2);
    }

    #[test]
    fn first_contact_is_a_full_sync_then_partial() {
        let mut r = Replication::new(10);
        assert!(r.peer.progress.probe().asks_own());
        // A fresh node asks; the peer (fresh too) asks with nothing held.
        assert_eq!(r.link_up(up(1)), CatchUp::Partial);
        r.peer.sync_request_sent(1, false);
        r.peer.peer_asks_for_sync(0, 0, 0, false);
        r.take_sync_request(true, 1, 2);
        assert!(r.peer.progress.owes_full(), "nothing held: a full sync");
        assert!(
            !r.peer.progress.probe().answers(),
            "both asked: no answer needed"
        );
        r.peer.start_full_sync(FullSync::new(16));
        assert!(!r.peer.progress.owes_full());
        r.peer.full_sync_sent(0);
        assert_eq!(r.peer.full_syncs, 1);
        assert!(!r.peer.is_new_link(1));
        assert!(r.peer.is_new_link(2));
        assert_eq!(r.link_up(up(2)), CatchUp::Partial);
        assert_eq!(r.peer.partial_syncs, 2);
    }

    #[test]
    fn a_full_sync_not_acknowledged_when_the_link_drops_starts_over() {
        let mut r = Replication::new(10);
        r.peer.progress.owe(SyncKind::Full);
        assert_eq!(r.link_up(up(1)), CatchUp::Full);
        r.peer.start_full_sync(FullSync::new(16));
        r.peer.pushed(7);
        r.peer.full_sync_sent(7);
        // Its tail may still be queued (or lost in flight) when the link goes.
        r.peer.acknowledged(6);
        assert_eq!(r.link_up(up(2)), CatchUp::Full);
        assert!(r.peer.progress.owes_full());
        r.peer.start_full_sync(FullSync::new(16));
        r.peer.pushed(9);
        r.peer.full_sync_sent(8);
        r.peer.acknowledged(9);
        assert_eq!(r.link_up(up(3)), CatchUp::Partial);
        // A full sync that shipped nothing has nothing to wait for, whatever
        // else went out unacknowledged.
        r.peer.progress.owe(SyncKind::Full);
        assert_eq!(r.link_up(up(4)), CatchUp::Full);
        r.peer.start_full_sync(FullSync::new(16));
        r.peer.pushed(10);
        r.peer.full_sync_sent(0);
        assert_eq!(r.link_up(up(5)), CatchUp::Partial);
    }

    #[test]
    fn a_sync_request_not_acknowledged_when_the_link_drops_is_sent_again() {
        let mut r = Replication::new(10);
        r.link_up(up(1));
        assert_eq!(r.peer.progress.probe().next_to_send(), Some(false));
        r.peer.sync_request_sent(3, false);
        assert_eq!(r.peer.progress.probe().next_to_send(), None);
        r.peer.acknowledged(2);
        r.link_up(up(2));
        assert_eq!(
            r.peer.progress.probe().next_to_send(),
            Some(false),
            "lost with the link: ask again"
        );
        r.peer.sync_request_sent(5, false);
        r.peer.acknowledged(5);
        r.link_up(up(3));
        assert!(!r.peer.progress.probe().asks_own());
    }

    #[test]
    fn a_second_load_before_the_peer_answers_widens_the_window_of_lost_changes() {
        let mut r = Replication::new(10);
        r.loaded(100, 200);
        assert_eq!((r.own_durable, r.own_loaded_clock), (Some(100), 200));
        // Own changes written since survive the second load.
        r.loaded(150, 300);
        assert_eq!((r.own_durable, r.own_loaded_clock), (Some(100), 300));
        r.lost_window_closed();
        r.loaded(400, 500);
        assert_eq!((r.own_durable, r.own_loaded_clock), (Some(400), 500));
    }

    #[test]
    fn writes_since_a_load_are_kept_while_its_lost_changes_may_come_back() {
        let mut r = Replication::new(10);
        let s = |c| Stamp::new(c, 1);
        r.note_local_write((0, b"k"), s(5));
        assert_eq!(r.written_since_load(0, b"k"), None, "no load: nothing lost");
        r.loaded(100, 200);
        r.note_local_write((0, b"k"), s(201));
        r.note_local_write((0, b"k"), s(202));
        r.note_local_write((3, b"j"), s(203));
        assert_eq!(
            r.written_since_load(0, b"k"),
            Some(s(202)),
            "its last write"
        );
        assert_eq!(r.written_since_load(1, b"k"), None, "another database");
        // A second load before the answer keeps them (it widens the window).
        r.loaded(150, 300);
        assert_eq!(r.written_since_load(0, b"k"), Some(s(202)));
        r.swap_dbs(3, 4);
        assert_eq!(r.written_since_load(4, b"j"), Some(s(203)));
        assert_eq!(r.written_since_load(3, b"j"), None);
        r.lost_window_closed();
        assert_eq!(r.written_since_load(0, b"k"), None, "the answer arrived");
        assert!(r.written_since_load.is_empty());
    }

    #[test]
    fn a_reload_keeps_the_sync_since_watermarks_the_peer_asked_for() {
        let mut r = Replication::new(10);
        r.peer.progress.owe(SyncKind::Since { since: 50, own: 7 });
        r.dataset_replaced(true);
        assert_eq!(
            r.peer.progress.owed(),
            Some(SyncKind::Since { since: 50, own: 7 })
        );
        // Running, it is dropped (its reads are of the old data) and owed
        // again from the start.
        let mut running = Replication::new(10);
        running
            .peer
            .progress
            .owe(SyncKind::Since { since: 50, own: 7 });
        running
            .peer
            .start_full_sync(FullSync::since_watermark(&VersionStore::new(), 1, 2, 50, 7));
        running.dataset_replaced(true);
        assert!(!running.peer.progress.sync_running());
        assert_eq!(
            running.peer.progress.owed(),
            Some(SyncKind::Since { since: 50, own: 7 })
        );
        // Data from a master is merged with a full sync.
        let mut replica = Replication::new(10);
        replica
            .peer
            .progress
            .owe(SyncKind::Since { since: 50, own: 7 });
        replica.dataset_replaced(false);
        assert!(replica.peer.progress.owes_full());
    }

    #[test]
    fn a_restart_before_the_peer_answers_keeps_the_window_its_files_held() {
        // The first load's window went to the files (journal, RDB aux).
        let mut first = Replication::new(10);
        first.loaded(100, 200);
        let mut journal = vec![crate::converge::journal::FORMAT];
        journal.extend(first.versions.take_journal());
        // A new process: only the files say what the first load lost.
        let mut second = Replication::new(10);
        assert!(crate::converge::journal::replay(&journal, &mut second.versions).is_ok());
        second.loaded(150, 300);
        assert_eq!(
            (second.own_durable, second.own_loaded_clock),
            (Some(100), 300)
        );
        assert_eq!(second.lost_window, Some((100, 300)));
        second.lost_window_closed();
        assert_eq!(second.versions.lost_own(), None);
    }

    #[test]
    fn a_peer_that_lost_a_delete_we_collected_is_asked_for_everything_in_every_case() {
        // Both nodes lost state and we asked first (our request asks only
        // since our watermark): an answer asking for everything goes too.
        let mut both = Replication::new(10);
        both.link_up(up(1));
        both.peer.sync_request_sent(1, false);
        both.versions.record_collected(Stamp::new(600, 1));
        both.peer.peer_asks_for_sync(0, 500, 400, false);
        both.take_sync_request(true, 1, 2);
        assert!(both.peer.progress.owes_full());
        assert_eq!(both.peer.progress.probe().next_to_send(), Some(true));
        assert!(both.peer.progress.probe().answer_asks_all());
        // A full sync of ours already running covers the request, but
        // ships no delete we collected: the answer still asks for all.
        let mut running = Replication::new(10);
        running.link_up(up(1));
        running.peer.progress.probe_mut(|p| p.forget_own());
        running.peer.pushed(10);
        running.peer.start_full_sync(FullSync::new(16));
        running.versions.record_collected(Stamp::new(600, 1));
        running.peer.peer_asks_for_sync(5, 500, 400, false);
        running.take_sync_request(true, 1, 2);
        assert_eq!(running.peer.progress.probe().next_to_send(), Some(true));
        assert!(running.peer.progress.probe().answer_asks_all());
    }

    #[test]
    fn a_sync_request_is_covered_only_by_a_full_sync_the_peer_had_not_received() {
        let mut r = Replication::new(10);
        r.link_up(up(1));
        r.peer.pushed(10);
        r.peer.start_full_sync(FullSync::new(16));
        // First contact: the peer asked before any of it reached the peer.
        r.peer.peer_asks_for_sync(10, 0, 0, false);
        r.take_sync_request(true, 1, 2);
        assert!(!r.peer.progress.owes_full());
        // Later on the same link (it was a replica, or reloaded): it had
        // received part of that full sync already, so it needs another.
        r.peer.pushed(30);
        r.peer.peer_asks_for_sync(25, 0, 0, false);
        r.take_sync_request(true, 1, 2);
        assert!(r.peer.progress.owes_full());
    }

    #[test]
    fn what_a_replica_drops_counts_as_received() {
        let mut r = Replication::new(10);
        r.peer.applied(4);
        r.peer.received(9);
        r.peer.applied(7);
        r.peer.persisting();
        assert_eq!(r.take_ack(), Some((7, 0)));
        // A fresh node says it had received nothing; one that lost state
        // later says what it had received then, not what came after.
        assert_eq!(r.peer.received_at_loss(), 0);
        r.merge_again();
        r.peer.applied(12);
        assert_eq!(r.peer.received_at_loss(), 9);
    }

    #[test]
    fn unacknowledged_changes_are_resent_first() {
        let mut r = Replication::new(10);
        r.link_up(up(1));
        r.peer.start_full_sync(FullSync::new(16));
        r.peer.full_sync_sent(0);
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
        r.peer.acknowledged(1);
        assert_eq!(r.peer.lag_ops(), 2);
        r.defer(vec![key("d")]);
        assert_eq!(r.link_up(up(2)), CatchUp::Partial);
        assert_eq!(r.peer.backlog.take(), vec![key("b"), key("c"), key("d")]);
        assert_eq!(r.peer.lag_ops(), 0);
    }

    #[test]
    fn the_report_says_which_catch_up_ran_from_where() {
        let mut r = Replication::new(10);
        assert_eq!(r.convergence().catchup, "none");
        r.peer.progress.owe(SyncKind::Full);
        assert_eq!(r.link_up(up(1)), CatchUp::Full);
        r.peer.pushed(4);
        r.peer.start_full_sync(FullSync::new(16));
        r.peer.report.entries = 7;
        r.peer.full_sync_sent(9);
        let c = r.convergence();
        assert_eq!(
            (c.catchup, c.catchup_entries, c.catchup_from_seq),
            ("full", 7, 4)
        );
        r.peer.acknowledged(9);
        r.defer(vec![key("a")]);
        assert_eq!(r.link_up(up(2)), CatchUp::Partial);
        let c = r.convergence();
        assert_eq!(
            (c.catchup, c.catchup_entries, c.catchup_from_seq),
            ("partial", 0, 9)
        );
        assert!(
            r.peer.report.took_ms.is_none(),
            "the backlog is still to ship"
        );
    }

    #[test]
    fn a_restarted_node_and_its_peer_sync_since_their_watermarks() {
        // P, up all along, gets the restarted node's request.
        let mut p = Replication::new(10);
        p.peer.progress.probe_mut(|p| p.forget_own());
        assert_eq!(p.link_up(up(1)), CatchUp::Partial);
        p.peer.peer_asks_for_sync(0, 500, 400, false);
        p.take_sync_request(true, 1, 2);
        assert_eq!(
            p.peer.progress.owed(),
            Some(SyncKind::Since {
                since: 500,
                own: 400
            })
        );
        assert!(!p.peer.progress.owes_full());
        assert_eq!(
            p.peer.progress.probe().next_to_send(),
            Some(true),
            "it asks what it misses in turn"
        );
        p.peer.sync_request_sent(2, true);
        assert_eq!(p.peer.progress.probe().next_to_send(), None);
        // Lost with the link: the answer is asked again, as an answer.
        assert_eq!(p.link_up(up(2)), CatchUp::Since);
        assert_eq!(p.peer.progress.probe().next_to_send(), Some(true));
        p.peer.start_full_sync(FullSync::new(16));
        // A tombstone of ours after its watermark was collected here: full.
        let mut g = Replication::new(10);
        g.peer.progress.probe_mut(|p| p.forget_own());
        g.versions.record_collected(Stamp::new(600, 1));
        g.peer.peer_asks_for_sync(0, 500, 400, false);
        g.take_sync_request(true, 1, 2);
        assert!(g.peer.progress.owes_full());
        assert!(
            g.peer.progress.probe().next_to_send() == Some(true)
                && g.peer.progress.probe().answer_asks_all(),
            "and all of its data back"
        );
        // A request with nothing held, or data without versions here: full.
        let mut q = Replication::new(10);
        q.peer.progress.probe_mut(|p| p.forget_own());
        q.peer.peer_asks_for_sync(0, 0, 0, false);
        q.take_sync_request(true, 1, 2);
        assert!(q.peer.progress.owes_full());
        let mut u = Replication::new(10);
        u.peer.progress.probe_mut(|p| p.forget_own());
        u.peer.peer_asks_for_sync(0, 500, 400, false);
        u.take_sync_request(false, 1, 2);
        assert!(u.peer.progress.owes_full());
        // The restarted node gets the answer: a sync since, no answer back.
        let mut x = Replication::new(10);
        x.link_up(up(1));
        x.peer.sync_request_sent(1, false);
        x.peer.peer_asks_for_sync(0, 700, u64::MAX, true);
        x.take_sync_request(true, 1, 2);
        assert_eq!(
            x.peer.progress.owed(),
            Some(SyncKind::Since {
                since: 700,
                own: u64::MAX
            })
        );
        assert!(!x.peer.progress.probe().answers());
        // A full sync due covers an answer request.
        let mut y = Replication::new(10);
        y.peer.progress.owe(SyncKind::Full);
        y.peer.peer_asks_for_sync(0, 700, u64::MAX, true);
        y.take_sync_request(true, 1, 2);
        assert!(y.peer.progress.owes_full());
    }

    #[test]
    fn coverage_is_void_while_a_request_for_what_we_miss_is_unanswered() {
        let mut x = Replication::new(10);
        assert!(!x.peer.accepts_coverage(), "it lost state: it asks first");
        x.link_up(up(1));
        x.peer.sync_request_sent(4, false);
        assert!(!x.peer.accepts_coverage());
        // An ack of entries before the request speaks of the old stream;
        // the one that acknowledges the request was made after the peer
        // voided its coverage.
        assert!(!x.peer.accepts_coverage_of_ack(3));
        assert!(x.peer.accepts_coverage_of_ack(4));
        x.peer.acknowledged(4);
        assert!(x.peer.accepts_coverage());
        // The peer side: a request from a node that lost state voids what
        // its acks said; the answer request of a peer that did not, not.
        let mut p = Replication::new(10);
        p.peer
            .progress
            .probe_mut(|p| *p = crate::catchup::probe::Probe::settled());
        p.link_up(up(1));
        p.last_local_stamp = 50;
        assert_eq!(p.take_ack(), Some((0, 50)));
        p.peer.peer_asks_for_sync(0, 10, 10, true);
        assert_eq!(p.peer.coverage_sent(), 50);
        p.peer.peer_asks_for_sync(0, 10, 10, false);
        assert_eq!(p.peer.coverage_sent(), 0);
    }

    #[test]
    fn coverage_moves_only_in_step_and_rides_on_acks() {
        let mut r = Replication::new(10);
        r.peer.progress.probe_mut(|p| p.forget_own());
        r.link_up(up(1));
        r.last_local_stamp = 90;
        assert_eq!(r.coverage(), None, "it has not heard what the peer misses");
        r.peer.peer_asks_for_sync(0, 0, 0, true);
        r.take_sync_request(true, 1, 2);
        r.peer.start_full_sync(FullSync::new(16));
        assert_eq!(r.coverage(), None, "a sync to ship first");
        r.peer.full_sync_sent(0);
        assert_eq!(r.coverage(), Some(90));
        assert_eq!(r.take_ack(), Some((0, 90)), "an idle peer learns it");
        assert_eq!(r.take_ack(), None);
        r.defer(vec![key("a")]);
        r.last_local_stamp = 95;
        assert_eq!(r.coverage(), None, "a backlog to ship");
        r.peer.applied(3);
        r.peer.persisting();
        let later = Instant::now() + ACK_INTERVAL;
        assert_eq!(
            r.take_ack_at(later),
            Some((3, 90)),
            "unchanged while catching up"
        );
        let _ = r.peer.backlog.take();
        r.peer.progress.owe(SyncKind::Full);
        assert_eq!(r.coverage(), None);
    }

    #[test]
    fn a_node_that_wrote_nothing_has_link_work_until_its_first_coverage_is_set() {
        let mut r = Replication::new(10);
        r.peer.progress.probe_mut(|p| p.forget_own());
        r.link_up(up(1));
        r.peer.peer_asks_for_sync(0, 0, 0, true);
        r.take_sync_request(true, 1, 2);
        r.peer.start_full_sync(FullSync::new(16));
        r.peer.full_sync_sent(0);
        // Its last ack went out while it was catching up; nothing else is due.
        let _ = r.take_ack();
        assert_eq!(r.coverage(), Some(0));
        assert!(r.has_link_work(), "the first coverage is still to be set");
        r.last_local_stamp = 7;
        let _ = r.take_ack();
        assert!(!r.has_link_work());
    }

    #[test]
    fn overflow_turns_into_a_full_sync() {
        let mut r = Replication::new(2);
        r.link_up(up(1));
        r.peer.start_full_sync(FullSync::new(16));
        r.peer.full_sync_sent(0);
        r.defer(vec![key("a"), key("b")]);
        assert!(!r.peer.progress.owes_full());
        r.defer(vec![key("c")]);
        assert!(r.peer.progress.owes_full());
        assert!(r.peer.backlog.is_empty());
        assert_eq!(r.link_up(up(2)), CatchUp::Full);
        r.peer.start_full_sync(FullSync::new(16));
    }

    #[test]
    fn acks_are_sent_once_per_change() {
        let t0 = Instant::now();
        let later = |n: u32| t0 + ACK_INTERVAL * n;
        let mut r = Replication::new(10);
        assert_eq!(r.take_ack_at(t0), None);
        r.peer.applied(5);
        r.peer.persisting();
        assert_eq!(r.take_ack_at(t0), Some((5, 0)));
        assert_eq!(r.take_ack_at(t0), None);
        r.peer.applied(6);
        r.peer.persisting();
        // Rate-limited: not before the interval.
        assert_eq!(r.take_ack_at(t0 + ACK_INTERVAL / 2), None);
        assert_eq!(r.take_ack_at(later(1)), Some((6, 0)));
        // A new link keeps what was applied on the old one.
        r.peer.applied(7);
        r.peer.persisting();
        r.link_up(up(1));
        assert_eq!(r.take_ack_at(later(2)), Some((7, 0)));
    }

    #[test]
    fn an_ack_covers_only_what_the_server_went_on_to_write() {
        let t0 = Instant::now();
        let mut r = Replication::new(10);
        r.peer.applied(5);
        assert_eq!(r.take_ack_at(t0), None, "in the AOF buffer only");
        assert!(r.peer.persisting(), "an ack is due: wake the loop");
        r.peer.applied(8);
        assert_eq!(r.take_ack_at(t0), Some((5, 0)), "not 8: not written yet");
        assert!(r.peer.persisting());
        assert!(!r.peer.persisting(), "nothing new to write");
        assert_eq!(r.take_ack_at(t0 + ACK_INTERVAL), Some((8, 0)));
    }

    #[test]
    fn tombstones_go_once_acknowledged() {
        use crate::converge::version::Stamp;
        let mut r = Replication::new(10);
        r.versions.record_delete(0, b"k", Stamp::new(5, 1), 3);
        assert_eq!(r.collect_tombstones(false), 0);
        r.peer.acknowledged(2);
        assert_eq!(r.collect_tombstones(false), 0);
        r.peer.acknowledged(3);
        assert_eq!(r.collect_tombstones(false), 1);
        assert_eq!(r.versions.tombstones(), 0);
    }
}
