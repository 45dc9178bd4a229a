//! What the peer has not seen yet: the backlog of local changes not shipped
//! (link down, queue full, catching up), the changes shipped but not yet
//! acknowledged (resent after a reconnect), acknowledgements both ways, and
//! when a full sync is due. Main thread only; no Redis calls here.

use std::sync::LazyLock;
use std::time::Instant;

use parking_lot::Mutex;

use crate::fullsync::FullSync;
use crate::hook::{DirtySet, PendingOp};
use crate::inflight::{InFlight, SentBatch};
use crate::status::Convergence;
use crate::version::{Stamp, VersionStore};

use crate::config::DEFAULT_BACKLOG_OPS;

/// Shortest time between two acks.
pub const ACK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(5);

/// How the pair catches up after the link comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUp {
    /// Ship the backlog (unacknowledged changes included).
    Partial,
    /// Stream the whole keyspace.
    Full,
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
    /// Sequence number of the sync request sent last, until the peer
    /// acknowledges it (or anything after it): one lost with a link drop
    /// (still queued, or in flight) is sent again at the next link-up.
    sync_request_unacked: Option<u64>,
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
    /// Reconnects caught up from the backlog alone.
    pub partial_syncs: u64,
    /// A wake-up timer is pending (more to ship).
    pub wake_pending: bool,
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
            versions: VersionStore::new(),
            backlog: DirtySet::default(),
            backlog_limit: backlog_limit.max(1),
            inflight: InFlight::default(),
            full_sync_wanted: true,
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
            link_epoch: 0,
            peer_acked: 0,
            last_peer_swap: Stamp::default(),
            applied_from_peer: 0,
            ack_sent: 0,
            last_ack_at: None,
            last_pushed: 0,
            collected_at: 0,
            full_syncs: 0,
            partial_syncs: 0,
            wake_pending: false,
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
        let unacked = self.requeue_unacked();
        self.backlog.restore(unacked);
        if self.sync_request_unacked.take().is_some() {
            self.request_sync = true;
        }
        let cut_off = self.full_sync.take().is_some();
        let unacked = self.full_sync_unacked.take().is_some();
        if cut_off || unacked {
            // Cut off by the link drop, or all handed out but not known to
            // have arrived: start it over.
            self.full_sync_wanted = true;
        }
        self.full_sync_on_link = false;
        self.check_overflow();
        if self.full_sync_wanted {
            CatchUp::Full
        } else {
            self.partial_syncs += 1;
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
        self.full_sync_wanted = false;
        let _ = self.backlog.take();
        self.full_sync = Some(sync);
        self.full_sync_unacked = None;
        self.full_sync_on_link = true;
        self.full_sync_started_after = self.last_pushed;
    }

    /// Handles a full sync request from the peer once the current link is
    /// known: needless when a full sync this link started had not reached
    /// the peer when it asked (both sides of a first contact ask and send).
    pub fn take_sync_request(&mut self) {
        let received = std::mem::take(&mut self.request_received);
        // Covered only if the peer had received none of that full sync when
        // it asked (all of it then arrives after its loss of state).
        let covered = self.full_sync_on_link && received <= self.full_sync_started_after;
        if std::mem::take(&mut self.sync_requested) && !covered {
            self.full_sync_wanted = true;
        }
    }

    /// A sync request went out with sequence number `seq`.
    pub fn sync_request_sent(&mut self, seq: u64) {
        self.request_sync = false;
        self.sync_request_unacked = Some(seq);
    }

    /// The full sync handed out its last entry, sequence number `last_seq`
    /// (0: it shipped nothing).
    pub fn full_sync_sent(&mut self, last_seq: u64) {
        self.full_sync = None;
        self.full_syncs += 1;
        self.full_sync_unacked = (last_seq > self.peer_acked).then_some(last_seq);
    }

    /// Whether an ack is due (something applied since the last one).
    pub fn ack_due(&self) -> bool {
        self.applied_from_peer != self.ack_sent && self.applied_from_peer != 0
    }

    /// The ack taken last could not be queued: send it again later.
    pub fn ack_lost(&mut self) {
        self.ack_sent = 0;
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
        self.sync_request_unacked = self.sync_request_unacked.filter(|&seq| seq > acked);
    }

    /// The peer asked for a full sync; it had received our entries up to
    /// `received`.
    pub fn peer_asks_for_sync(&mut self, received: u64) {
        self.sync_requested = true;
        self.request_received = self.request_received.max(received);
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
    pub fn take_ack(&mut self) -> Option<u64> {
        let recent = self
            .last_ack_at
            .is_some_and(|at| at.elapsed() < ACK_INTERVAL);
        if self.ack_due() && !recent {
            self.ack_sent = self.applied_from_peer;
            self.last_ack_at = Some(Instant::now());
            Some(self.ack_sent)
        } else {
            None
        }
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
        }
    }

    /// The dataset was replaced wholesale: versions restart (persistence
    /// refills them), and both directions need a full sync.
    pub fn dataset_replaced(&mut self) {
        self.versions.clear();
        self.merge_again();
    }

    /// This node's data came from elsewhere (it was a replica and is a
    /// master again): merge with the peer both ways, versions kept.
    pub fn merge_again(&mut self) {
        self.received_at_loss = self.received_from_peer;
        let _ = self.backlog.take();
        let _ = self.requeue_unacked();
        self.full_sync = None;
        self.full_sync_wanted = true;
        self.request_sync = true;
        // Force a new catch-up even if the link stays up.
        self.link_epoch = 0;
    }
}

/// This node's convergence state.
pub static STATE: LazyLock<Mutex<Replication>> = LazyLock::new(Mutex::default);

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> PendingOp {
        PendingOp::Key {
            db: 0,
            key: k.as_bytes().to_vec(),
        }
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
        assert_eq!(r.link_up(1), CatchUp::Full);
        r.start_full_sync(FullSync::new(16));
        assert!(!r.full_sync_wanted);
        r.full_sync_sent(0);
        assert_eq!(r.full_syncs, 1);
        assert!(!r.is_new_link(1));
        assert!(r.is_new_link(2));
        assert_eq!(r.link_up(2), CatchUp::Partial);
        assert_eq!(r.partial_syncs, 1);
    }

    #[test]
    fn a_full_sync_not_acknowledged_when_the_link_drops_starts_over() {
        let mut r = Replication::new(10);
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
        r.sync_request_sent(3);
        assert!(!r.request_sync);
        r.acknowledged(2);
        r.link_up(2);
        assert!(r.request_sync, "lost with the link: ask again");
        r.sync_request_sent(5);
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
        r.peer_asks_for_sync(10);
        r.take_sync_request();
        assert!(!r.full_sync_wanted);
        // Later on the same link (it was a replica, or reloaded): it had
        // received part of that full sync already, so it needs another.
        r.pushed(30);
        r.peer_asks_for_sync(25);
        r.take_sync_request();
        assert!(r.full_sync_wanted);
    }

    #[test]
    fn what_a_replica_drops_counts_as_received() {
        let mut r = Replication::new(10);
        r.applied(4);
        r.received(9);
        r.applied(7);
        assert_eq!(r.take_ack(), Some(7));
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
            batch.record(&crate::entry::Entry {
                origin: 1,
                seq,
                clock: seq,
                db: 0,
                op: crate::entry::Op::Delete { key },
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
        let mut r = Replication::new(10);
        assert_eq!(r.take_ack(), None);
        r.applied(5);
        assert_eq!(r.take_ack(), Some(5));
        assert_eq!(r.take_ack(), None);
        r.applied(6);
        // Rate-limited: not before the interval.
        assert_eq!(r.take_ack(), None);
        std::thread::sleep(ACK_INTERVAL);
        assert_eq!(r.take_ack(), Some(6));
        // A new link keeps what was applied on the old one.
        r.applied(7);
        r.link_up(1);
        std::thread::sleep(ACK_INTERVAL);
        assert_eq!(r.take_ack(), Some(7));
    }

    #[test]
    fn tombstones_go_once_acknowledged() {
        use crate::version::Stamp;
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
