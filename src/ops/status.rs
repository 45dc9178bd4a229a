//! Counters shared by every stage, and the `RDMASYNC.STATUS` reply.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

/// State of the link to the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum LinkState {
    /// Not connected and not trying (shutting down).
    Down = 0,
    /// Dialing, accepting or handshaking.
    Connecting = 1,
    /// Handshake done; frames flow.
    Up = 2,
}

impl LinkState {
    /// The spelling used in `RDMASYNC.STATUS`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Down => "down",
            Self::Connecting => "connecting",
            Self::Up => "up",
        }
    }
}

/// Monotonic counters and the link state, written by any thread, read by
/// `RDMASYNC.STATUS`. Relaxed ordering: they are statistics, not synchronisation.
#[derive(Debug, Default)]
pub struct Stats {
    link: AtomicU8,
    /// Unix ms of the last link state change.
    pub link_since_ms: AtomicU64,
    /// Node id of the connected (or last connected) peer.
    pub peer_node_id: AtomicU64,
    /// The clock's lead over the wall clock the lead file keeps, ms (0:
    /// none, or none kept yet).
    pub clock_lead_kept_ms: AtomicU64,
    /// Entries written into the peer's ring.
    pub entries_sent: AtomicU64,
    /// Batches written into the peer's ring.
    pub batches_sent: AtomicU64,
    /// Bytes written into the peer's ring (frames and padding).
    pub bytes_sent: AtomicU64,
    /// Bytes the peer wrote into our ring.
    pub bytes_received: AtomicU64,
    /// Remote entries applied to this node.
    pub entries_applied: AtomicU64,
    /// Remote batches applied to this node.
    pub batches_applied: AtomicU64,
    /// Remote entries Redis refused to apply.
    pub apply_errors: AtomicU64,
    /// Batches that found the queue full (their keys stay dirty and retry).
    pub queue_overflows: AtomicU64,
    /// Changed keys whose read failed at a flush (kept dirty, read again).
    pub read_failures: AtomicU64,
    /// Flushes held back because a costly key was snapshotted too recently.
    pub flushes_deferred: AtomicU64,
    /// Reads of changed keys costly enough to start a rest (`hotkeys`).
    pub costly_reads: AtomicU64,
    /// Microseconds those reads took together.
    pub costly_read_us: AtomicU64,
    /// Entries not replicated because the link was down (no catch-up yet).
    pub entries_dropped: AtomicU64,
    /// Entries refused because no frame can carry them (key too large).
    pub entries_refused: AtomicU64,
    /// Changes of this node's own that a load lost and the peer sent back,
    /// discarded because this node wrote the key since (that write shipped
    /// again, newer).
    pub lost_changes_superseded: AtomicU64,
    /// Big strings shipped as the bytes appended to them
    /// (`converge::appends`).
    pub appends_shipped: AtomicU64,
    /// The peer's appended bytes not taken: this node held another version
    /// than the one they were appended to (the peer ships the key again).
    pub appends_unapplied: AtomicU64,
    /// Big strings shipped again whole after a write of the peer's lost to
    /// this node's newer one, which may have shipped as appended bytes.
    pub appends_reshipped: AtomicU64,
    /// Writes merged as a whole key where the merge rules would merge them
    /// per element (issue 27).
    pub merge_fallbacks: AtomicU64,
    /// `merge_fallbacks` by reason (`ops::fallbacks`).
    pub merge_fallback_reasons: crate::ops::fallbacks::FallbackCounts,
    /// Keys that expired or were evicted past the bound of one event-loop
    /// iteration: their versions were not turned into tombstones.
    pub expiries_unrecorded: AtomicU64,
    /// Tombstones of this node's deletes dropped over `max-tombstones`
    /// while the peer was away (a sweeping full sync carries them).
    pub tombstones_dropped: AtomicU64,
    /// Keys deleted here at the end of a peer's sweeping full sync (it had
    /// deleted them and dropped their tombstones).
    pub keys_swept: AtomicU64,
    /// Big values a catch-up read a slice per step, not at once.
    pub values_sliced: AtomicU64,
    /// Slice-at-a-time reads started again because the key changed.
    pub slices_restarted: AtomicU64,
    /// The peer's big values built here a slice per step under a key of
    /// the module's, then moved over their key (not one `RESTORE`).
    pub values_built: AtomicU64,
    /// Builds started again (the build key changed under them) or given
    /// up for a whole `RESTORE`.
    pub builds_restarted: AtomicU64,
    /// Times the sender waited for credit.
    pub credit_stalls: AtomicU64,
    /// Sender's tail in the peer's ring (current link).
    pub ring_tail: AtomicU64,
    /// Head the peer last returned (current link).
    pub ring_credit: AtomicU64,
    /// Frames or messages from the peer that failed validation.
    pub bad_frames: AtomicU64,
    /// Links stopped and handshakes refused because the peer's clock was
    /// ahead of this node's beyond `max-clock-offset`.
    pub clock_refusals: AtomicU64,
    /// Times the local dataset was replaced wholesale (needs a resync).
    pub resyncs_needed: AtomicU64,
    /// Remote entries discarded because this node's version was newer.
    pub conflicts_discarded: AtomicU64,
    /// Remote entries this node already had (resends after a reconnect, full syncs).
    pub entries_duplicate: AtomicU64,
    /// Links established after the first one.
    pub reconnects: AtomicU64,
    /// Links established in total.
    pub links_established: AtomicU64,
    /// Unix ms of `last_error`.
    pub last_error_ms: AtomicU64,
    last_error: Mutex<String>,
    /// Connections refused for a wrong or missing secret (or TLS certificate).
    pub auth_failures: AtomicU64,
    /// Connections refused for incompatible versions or a duplicate node id.
    pub handshakes_refused: AtomicU64,
    /// Connections closed, timed out or abandoned before completing the handshake.
    pub handshakes_incomplete: AtomicU64,
    /// Rings registered for an authenticated peer (one per link).
    pub rings_registered: AtomicU64,
}

/// Unix time in milliseconds.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Stats {
    /// Adds `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Sets a gauge to `n`.
    pub fn set(gauge: &AtomicU64, n: u64) {
        gauge.store(n, Ordering::Relaxed);
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Current link state.
    pub fn link(&self) -> LinkState {
        match self.link.load(Ordering::Relaxed) {
            2 => LinkState::Up,
            1 => LinkState::Connecting,
            _ => LinkState::Down,
        }
    }

    /// Records a link state change; returns whether it changed.
    pub fn set_link(&self, state: LinkState) -> bool {
        let changed = self.link.swap(state as u8, Ordering::Relaxed) != state as u8;
        if changed {
            self.link_since_ms.store(unix_ms(), Ordering::Relaxed);
        }
        changed
    }

    /// Bytes of ours in the peer's ring that it has not credited back yet.
    pub fn ring_used(&self) -> u64 {
        Self::get(&self.ring_tail).saturating_sub(Self::get(&self.ring_credit))
    }

    /// Remembers the latest error (and when) for `RDMASYNC.STATUS`.
    pub fn set_error(&self, message: impl Into<String>) {
        *self.last_error.lock() = message.into();
        self.last_error_ms.store(unix_ms(), Ordering::Relaxed);
    }

    /// The latest error, empty if none.
    pub fn last_error(&self) -> String {
        self.last_error.lock().clone()
    }
}

/// One `RDMASYNC.STATUS` field's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// An integer reply.
    Int(i64),
    /// A bulk string reply.
    Text(String),
}

/// Inputs of the status reply that do not live in [`Stats`].
#[derive(Debug, Clone)]
pub struct Identity {
    /// This node's id.
    pub node_id: u64,
    /// `peer:port`.
    pub peer: String,
    /// Transport in use.
    pub transport: &'static str,
    /// RDMA device of the current link, empty over TCP.
    pub device: String,
    /// Ring bytes this node registers for its peer.
    pub ring_size: u64,
    /// How peers are authenticated: `none` or `hmac-sha256`.
    pub auth: &'static str,
    /// Whether the TCP transport runs over TLS.
    pub tls: bool,
    /// The milliseconds part of this node's hybrid clock: its wall clock,
    /// or the newest clock it stamped or accepted if that is ahead.
    pub clock_ms: u64,
}

/// Convergence figures of the status reply (from the main thread's state).
#[derive(Debug, Clone, Copy, Default)]
pub struct Convergence {
    /// Keys with a recorded version (tombstones included).
    pub versioned_keys: u64,
    /// Counters holding merge metadata (increments not yet collected).
    pub merge_counters: u64,
    /// Hashes, sets and sorted sets holding merge metadata (element
    /// changes not yet collected).
    pub merge_elements: u64,
    /// Tombstones held.
    pub tombstones: u64,
    /// Local changes waiting to ship.
    pub backlog: u64,
    /// Changes the peer has not applied yet (backlog plus unacknowledged).
    pub lag_entries: u64,
    /// Age of the oldest change the peer has not acknowledged, ms.
    pub lag_ms: u64,
    /// Full syncs sent to the peer.
    pub full_syncs: u64,
    /// Reconnects caught up from the backlog alone.
    pub partial_syncs: u64,
    /// A full sync or backlog drain is running.
    pub sync_in_progress: bool,
    /// Resent or full-sync changes waiting for a read that failed to succeed.
    pub unread_keys: u64,
    /// The last catch-up: `none`, `full`, `partial` or `since`.
    pub catchup: &'static str,
    /// Entries the last catch-up shipped.
    pub catchup_entries: u64,
    /// Our sequence number the last catch-up started after (partial: what
    /// the peer had acknowledged; full: what had been sent).
    pub catchup_from_seq: u64,
    /// How long the last catch-up took (so far, while it runs), ms.
    pub catchup_ms: u64,
    /// The watermark the last catch-up started from, when a sync since one.
    pub catchup_since: u64,
    /// Syncs since a watermark sent to the peer.
    pub since_syncs: u64,
    /// This node holds every change of the peer stamped at or below this
    /// clock (durable; what its requests ask the peer to sync from).
    pub peer_watermark: u64,
    /// Where the peer's progress stands (`catchup::peer::Phase`).
    pub peer_state: &'static str,
    /// A load lost this node's own changes stamped after this clock, and
    /// the peer has not sent them back yet (0: none lost).
    pub own_lost_after: u64,
    /// Stamp records replayed from the AOF or a master's stream.
    pub stamps_loaded: u64,
    /// Changes a load found without their stamp, dated then.
    pub stamps_dated: u64,
}

/// The ordered `(name, value)` pairs of `RDMASYNC.STATUS`.
pub fn status_fields(
    id: &Identity,
    stats: &Stats,
    queue_depth: usize,
    conv: &Convergence,
) -> Vec<(&'static str, Field)> {
    let mut fields = link_fields(id, stats);
    fields.extend(traffic_fields(stats, queue_depth));
    fields.extend(convergence_fields(conv));
    fields.extend(security_fields(id, stats));
    fields
}

/// A counter as a field (saturating at `i64::MAX`).
fn counter(a: &AtomicU64) -> Field {
    number(Stats::get(a))
}

/// A number as a field (saturating at `i64::MAX`).
fn number(v: u64) -> Field {
    Field::Int(i64::try_from(v).unwrap_or(i64::MAX))
}

/// A text field.
fn text(s: String) -> Field {
    Field::Text(s)
}

/// Who this node and its peer are, and the link's state.
fn link_fields(id: &Identity, stats: &Stats) -> Vec<(&'static str, Field)> {
    vec![
        ("node_id", text(id.node_id.to_string())),
        ("peer", text(id.peer.clone())),
        (
            "peer_node_id",
            text(Stats::get(&stats.peer_node_id).to_string()),
        ),
        ("transport", text(id.transport.to_owned())),
        ("device", text(id.device.clone())),
        ("link", text(stats.link().as_str().to_owned())),
        ("link_since_ms", counter(&stats.link_since_ms)),
        ("ring_size", Field::Int(id.ring_size as i64)),
        ("clock_ms", number(id.clock_ms)),
        ("clock_lead_kept_ms", counter(&stats.clock_lead_kept_ms)),
    ]
}

/// What was sent, received and applied, and what went wrong on the way.
fn traffic_fields(stats: &Stats, queue_depth: usize) -> Vec<(&'static str, Field)> {
    vec![
        ("entries_sent", counter(&stats.entries_sent)),
        ("batches_sent", counter(&stats.batches_sent)),
        ("bytes_sent", counter(&stats.bytes_sent)),
        ("bytes_received", counter(&stats.bytes_received)),
        ("entries_applied", counter(&stats.entries_applied)),
        ("batches_applied", counter(&stats.batches_applied)),
        ("apply_errors", counter(&stats.apply_errors)),
        ("queue_depth", Field::Int(queue_depth as i64)),
        ("queue_overflows", counter(&stats.queue_overflows)),
        ("flushes_deferred", counter(&stats.flushes_deferred)),
        ("costly_reads", counter(&stats.costly_reads)),
        ("costly_read_us", counter(&stats.costly_read_us)),
        ("read_failures", counter(&stats.read_failures)),
        ("entries_dropped", counter(&stats.entries_dropped)),
        ("entries_refused", counter(&stats.entries_refused)),
        (
            "lost_changes_superseded",
            counter(&stats.lost_changes_superseded),
        ),
        ("appends_shipped", counter(&stats.appends_shipped)),
        ("appends_unapplied", counter(&stats.appends_unapplied)),
        ("appends_reshipped", counter(&stats.appends_reshipped)),
        ("merge_fallbacks", counter(&stats.merge_fallbacks)),
        (
            "merge_fallbacks_by_reason",
            text(stats.merge_fallback_reasons.render()),
        ),
        ("expiries_unrecorded", counter(&stats.expiries_unrecorded)),
        ("tombstones_dropped", counter(&stats.tombstones_dropped)),
        ("keys_swept", counter(&stats.keys_swept)),
        ("values_sliced", counter(&stats.values_sliced)),
        ("slices_restarted", counter(&stats.slices_restarted)),
        ("values_built", counter(&stats.values_built)),
        ("builds_restarted", counter(&stats.builds_restarted)),
        ("ring_used_bytes", Field::Int(stats.ring_used() as i64)),
        ("credit_stalls", counter(&stats.credit_stalls)),
        ("bad_frames", counter(&stats.bad_frames)),
        ("clock_refusals", counter(&stats.clock_refusals)),
        ("reconnects", counter(&stats.reconnects)),
        ("resyncs_needed", counter(&stats.resyncs_needed)),
        ("conflicts_discarded", counter(&stats.conflicts_discarded)),
        ("entries_duplicate", counter(&stats.entries_duplicate)),
    ]
}

/// The version store, the backlog and the catch-up.
fn convergence_fields(conv: &Convergence) -> Vec<(&'static str, Field)> {
    vec![
        ("versioned_keys", number(conv.versioned_keys)),
        ("merge_counters", number(conv.merge_counters)),
        ("merge_elements", number(conv.merge_elements)),
        ("unread_keys", number(conv.unread_keys)),
        ("tombstones", number(conv.tombstones)),
        ("backlog", number(conv.backlog)),
        ("lag_entries", number(conv.lag_entries)),
        ("lag_ms", number(conv.lag_ms)),
        ("full_syncs", number(conv.full_syncs)),
        ("partial_syncs", number(conv.partial_syncs)),
        ("sync_in_progress", number(u64::from(conv.sync_in_progress))),
        ("catchup", text(conv.catchup.to_owned())),
        ("catchup_entries", number(conv.catchup_entries)),
        ("catchup_from_seq", number(conv.catchup_from_seq)),
        ("catchup_ms", number(conv.catchup_ms)),
        ("catchup_since", number(conv.catchup_since)),
        ("since_syncs", number(conv.since_syncs)),
        ("peer_watermark", number(conv.peer_watermark)),
        ("peer_state", text(conv.peer_state.to_owned())),
        ("own_lost_after", number(conv.own_lost_after)),
        ("stamps_loaded", number(conv.stamps_loaded)),
        ("stamps_dated", number(conv.stamps_dated)),
    ]
}

/// The last error, authentication and the rings a peer may write.
fn security_fields(id: &Identity, stats: &Stats) -> Vec<(&'static str, Field)> {
    vec![
        ("last_error", text(stats.last_error())),
        ("last_error_ms", counter(&stats.last_error_ms)),
        ("auth", text(id.auth.to_owned())),
        ("tls", text(if id.tls { "yes" } else { "no" }.to_owned())),
        ("auth_failures", counter(&stats.auth_failures)),
        ("handshakes_refused", counter(&stats.handshakes_refused)),
        (
            "handshakes_incomplete",
            counter(&stats.handshakes_incomplete),
        ),
        ("rings_registered", counter(&stats.rings_registered)),
        ("rings_live", Field::Int(rings_live() as i64)),
    ]
}

/// Rings registered for a peer in this process and not yet released.
static RINGS_LIVE: AtomicU64 = AtomicU64::new(0);

/// How many rings a peer could write into right now (RDMA: registered
/// memory regions with REMOTE_WRITE; TCP: receive rings). One per live link.
pub fn rings_live() -> u64 {
    RINGS_LIVE.load(Ordering::Relaxed)
}

/// Counts one ring from its registration to its release (dropped after the
/// ring's memory region is deregistered).
#[derive(Debug)]
pub struct RingGuard(());

#[allow(clippy::new_without_default)] // counting is the point of `new`
impl RingGuard {
    /// A ring was just registered.
    pub fn new() -> Self {
        RINGS_LIVE.fetch_add(1, Ordering::Relaxed);
        Self(())
    }
}

impl Drop for RingGuard {
    fn drop(&mut self) {
        RINGS_LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_has_every_required_field() {
        let stats = Stats::default();
        stats.set_link(LinkState::Up);
        Stats::add(&stats.entries_sent, 3);
        stats.set_error("boom");
        let id = Identity {
            node_id: 1,
            clock_ms: 0,
            peer: "h:1".into(),
            transport: "tcp",
            device: String::new(),
            ring_size: 65536,
            auth: "none",
            tls: false,
        };
        let conv = Convergence {
            tombstones: 4,
            ..Convergence::default()
        };
        let f = status_fields(&id, &stats, 2, &conv);
        let get = |n: &str| f.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone());
        for name in [
            "node_id",
            "peer",
            "transport",
            "link",
            "entries_sent",
            "entries_applied",
            "bytes_sent",
            "queue_depth",
            "queue_overflows",
            "ring_used_bytes",
            "reconnects",
            "last_error",
            "conflicts_discarded",
            "tombstones",
            "full_syncs",
            "partial_syncs",
            "sync_in_progress",
            "peer_state",
            "own_lost_after",
            "catchup",
            "catchup_entries",
            "catchup_from_seq",
            "stamps_loaded",
            "stamps_dated",
            "lag_entries",
            "lag_ms",
            "auth",
            "auth_failures",
            "rings_live",
        ] {
            assert!(get(name).is_some(), "missing {name}");
        }
        assert_eq!(get("link"), Some(Field::Text("up".into())));
        assert_eq!(get("entries_sent"), Some(Field::Int(3)));
        assert_eq!(get("queue_depth"), Some(Field::Int(2)));
        assert_eq!(get("tombstones"), Some(Field::Int(4)));
        assert_eq!(get("last_error"), Some(Field::Text("boom".into())));
    }
}
