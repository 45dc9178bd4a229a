//! The snapshot part of a peer's progress (raft-rs's
//! `ProgressState::Snapshot`): which sync of its whole state this node owes
//! the peer, and the one it is shipping. One value, with a named transition
//! for each event; the flush and the apply path ask it what to do and tell
//! it what happened. Generic over the sync itself (`catchup::fullsync::
//! FullSync` in the module, a plain value in the tests), so it is pure.
//!
//! ```text
//!            owe(kind)                 start              handed_out
//!   Idle ─────────────► Idle+owed ─────────────► Running ─────────────► Sent
//!     ▲                                            │  ▲                   │
//!     │                 link_up: owed again ◄──────┘  │ resume            │ acknowledged
//!     │                 (cut off, or not known        │                   │ (past its last entry)
//!     │                  to have arrived) ◄───────────┼───────────────────┤
//!     └───────────────────────────────────────────────┴───────────────────┘
//! ```
//!
//! While it hands out entries a running sync is lent out (`take_running`:
//! `Lent`); `resume`, `handed_out` or `end_loan` ends the loan.

/// Which sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncKind {
    /// The whole keyspace, tombstones and floors.
    Full,
    /// What a peer misses that holds our changes up to `since` and its own
    /// up to `own` (its request said so).
    Since {
        /// Our changes after this clock.
        since: u64,
        /// The peer's own changes after this clock.
        own: u64,
    },
}

impl SyncKind {
    /// Two debts as one: a full sync pays any; two syncs since watermarks
    /// are paid by one from the lower of each.
    pub fn merge(self, other: Self) -> Self {
        match (self, other) {
            (Self::Since { since, own }, Self::Since { since: s, own: o }) => Self::Since {
                since: since.min(s),
                own: own.min(o),
            },
            _ => Self::Full,
        }
    }

    /// `(since, own)` of a sync since watermarks.
    pub fn watermarks(self) -> Option<(u64, u64)> {
        match self {
            Self::Full => None,
            Self::Since { since, own } => Some((since, own)),
        }
    }
}

/// A sync being shipped: its kind, the sync, and our last sequence number
/// pushed before it started (what it covers of the peer's requests).
#[derive(Debug)]
pub struct Running<S> {
    /// Which sync.
    pub kind: SyncKind,
    /// The sync itself.
    pub sync: S,
    /// Our last sequence number pushed before it started.
    pub started_after: u64,
}

/// The sync in flight on the current link.
#[derive(Debug)]
enum Shipping<S> {
    /// None: live changes and the backlog keep the peer in step.
    Idle,
    /// Handing out entries.
    Running(Running<S>),
    /// Lent out to hand out entries (`take_running`): still running, but
    /// its pushes are not in step (the merge bound must not rise on them).
    Lent { kind: SyncKind, started_after: u64 },
    /// Handed out whole; its last entry, `last_seq`, is not acknowledged yet
    /// (its tail may still be queued, or lost with a link).
    Sent {
        kind: SyncKind,
        last_seq: u64,
        started_after: u64,
    },
}

/// What this node owes the peer of its whole state and what it ships of it.
#[derive(Debug)]
pub struct SnapshotProgress<S> {
    /// The sync owed next (started at the next flush on an up link, once
    /// none runs).
    owed: Option<SyncKind>,
    shipping: Shipping<S>,
}

impl<S> Default for SnapshotProgress<S> {
    fn default() -> Self {
        Self {
            owed: None,
            shipping: Shipping::Idle,
        }
    }
}

impl<S> SnapshotProgress<S> {
    /// A sync of `kind` is owed (the peer asked, the backlog overflowed,
    /// the data must be merged again); it joins one owed already.
    pub fn owe(&mut self, kind: SyncKind) {
        self.owed = Some(self.owed.map_or(kind, |k| k.merge(kind)));
    }

    /// The sync owed, if any.
    pub fn owed(&self) -> Option<SyncKind> {
        self.owed
    }

    /// Whether a full sync is owed.
    pub fn owes_full(&self) -> bool {
        self.owed == Some(SyncKind::Full)
    }

    /// No sync is owed any more, but one since watermarks owed already
    /// (this node's own files came back: the peer says what it misses).
    pub fn forgive_full(&mut self) {
        self.owed = self.owed.filter(|k| *k != SyncKind::Full);
    }

    /// The sync to start now: the one owed, unless one runs.
    pub fn due(&self) -> Option<SyncKind> {
        match self.shipping {
            Shipping::Running(_) | Shipping::Lent { .. } => None,
            _ => self.owed,
        }
    }

    /// Whether nothing is owed, shipping or unacknowledged.
    pub fn is_idle(&self) -> bool {
        self.owed.is_none() && matches!(self.shipping, Shipping::Idle)
    }

    /// Whether the running sync is lent out (`take_running`).
    pub fn is_lent(&self) -> bool {
        matches!(self.shipping, Shipping::Lent { .. })
    }

    /// The sync lent out is dropped (it could not go on).
    pub fn end_loan(&mut self) {
        if self.is_lent() {
            self.shipping = Shipping::Idle;
        }
    }

    /// Starts `sync`, of the kind [`Self::due`] said, after our sequence
    /// number `started_after`: the debt is paid by it (one not acknowledged
    /// before is replaced by it).
    pub fn start(&mut self, kind: SyncKind, sync: S, started_after: u64) {
        self.owed = None;
        self.shipping = Shipping::Running(Running {
            kind,
            sync,
            started_after,
        });
    }

    /// Whether a sync is handing out entries.
    pub fn is_running(&self) -> bool {
        matches!(self.shipping, Shipping::Running(_))
    }

    /// The kind of the sync running, if any.
    pub fn running_kind(&self) -> Option<SyncKind> {
        match &self.shipping {
            Shipping::Running(r) => Some(r.kind),
            Shipping::Lent { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// Lends the running sync out to advance it (with the rest of the
    /// state at hand); [`Self::resume`], [`Self::handed_out`] or
    /// [`Self::end_loan`] ends the loan.
    pub fn take_running(&mut self) -> Option<Running<S>> {
        match std::mem::replace(&mut self.shipping, Shipping::Idle) {
            Shipping::Running(r) => {
                self.shipping = Shipping::Lent {
                    kind: r.kind,
                    started_after: r.started_after,
                };
                Some(r)
            }
            other => {
                self.shipping = other;
                None
            }
        }
    }

    /// The sync lent out has more to hand out.
    pub fn resume(&mut self, running: Running<S>) {
        self.shipping = Shipping::Running(running);
    }

    /// The sync lent out handed out its last entry, `last_seq` (0: it
    /// shipped nothing); the peer acknowledged ours up to `acked`.
    pub fn handed_out(&mut self, running: Running<S>, last_seq: u64, acked: u64) {
        self.shipping = if last_seq > acked {
            Shipping::Sent {
                kind: running.kind,
                last_seq,
                started_after: running.started_after,
            }
        } else {
            Shipping::Idle
        };
    }

    /// The peer applied our entries up to `acked`: a sync handed out whole
    /// and covered by it is done.
    pub fn acknowledged(&mut self, acked: u64) {
        if matches!(self.shipping, Shipping::Sent { last_seq, .. } if last_seq <= acked) {
            self.shipping = Shipping::Idle;
        }
    }

    /// A new link is up: a sync cut off, or handed out but not known to
    /// have arrived, is owed again (from the start).
    pub fn link_up(&mut self) {
        let kind = match std::mem::replace(&mut self.shipping, Shipping::Idle) {
            Shipping::Idle => return,
            Shipping::Running(r) => r.kind,
            Shipping::Lent { kind, .. } | Shipping::Sent { kind, .. } => kind,
        };
        self.owe(kind);
    }

    /// The sync since watermarks owed or running, if any (what a reload
    /// from this node's own files must not forget: the peer asked for it).
    pub fn since_owed_or_running(&self) -> Option<SyncKind> {
        let running = match &self.shipping {
            Shipping::Running(r) => Some(r.kind),
            Shipping::Lent { kind, .. } => Some(*kind),
            _ => None,
        };
        [self.owed, running]
            .into_iter()
            .flatten()
            .filter(|k| *k != SyncKind::Full)
            .reduce(SyncKind::merge)
    }

    /// The data was replaced or must be merged again: the sync running
    /// is dropped (its reads are of the old data) and a full one is owed.
    pub fn restart_full(&mut self) {
        if self.is_running() || self.is_lent() {
            self.shipping = Shipping::Idle;
        }
        self.owed = Some(SyncKind::Full);
    }

    /// Whether a sync handed out whole may still start over (not yet
    /// acknowledged).
    pub fn unacknowledged(&self) -> bool {
        matches!(self.shipping, Shipping::Sent { .. })
    }

    /// Whether a full sync runs or is owed: it covers the peer's requests
    /// (but an initial one that had received part of it).
    pub fn full_running_or_owed(&self) -> bool {
        self.owes_full() || self.running_kind() == Some(SyncKind::Full)
    }

    /// Whether a sync shipped on this link started after our entry
    /// `received` (what the peer's request says it had received when it
    /// lost state): it then carries all the peer lost.
    pub fn started_after(&self, received: u64) -> bool {
        match &self.shipping {
            Shipping::Idle => false,
            Shipping::Running(r) => received <= r.started_after,
            Shipping::Lent { started_after, .. } | Shipping::Sent { started_after, .. } => {
                received <= *started_after
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SINCE: SyncKind = SyncKind::Since {
        since: 700,
        own: 40,
    };

    fn running(kind: SyncKind) -> SnapshotProgress<&'static str> {
        let mut p = SnapshotProgress::default();
        p.owe(kind);
        p.start(kind, "sync", 10);
        p
    }

    #[test]
    fn debts_merge_a_full_one_pays_any() {
        let lower = SyncKind::Since {
            since: 500,
            own: 90,
        };
        assert_eq!(
            SINCE.merge(lower),
            SyncKind::Since {
                since: 500,
                own: 40
            }
        );
        assert_eq!(SINCE.merge(SyncKind::Full), SyncKind::Full);
        assert_eq!(SyncKind::Full.merge(SINCE), SyncKind::Full);
        let mut p = SnapshotProgress::<()>::default();
        p.owe(SINCE);
        p.owe(lower);
        assert_eq!(
            p.owed(),
            Some(SyncKind::Since {
                since: 500,
                own: 40
            })
        );
        p.owe(SyncKind::Full);
        assert!(p.owes_full());
    }

    #[test]
    fn start_pays_the_debt_and_nothing_more_is_due_while_it_runs() {
        let mut p = running(SINCE);
        assert_eq!(p.owed(), None);
        assert!(p.is_running());
        assert_eq!(p.running_kind(), Some(SINCE));
        // A full sync asked for meanwhile waits for the running one.
        p.owe(SyncKind::Full);
        assert_eq!(p.due(), None);
        let r = p.take_running().unwrap();
        p.handed_out(r, 0, 0);
        assert_eq!(p.due(), Some(SyncKind::Full));
    }

    #[test]
    fn handed_out_waits_for_the_ack_of_its_last_entry() {
        let mut p = running(SyncKind::Full);
        let r = p.take_running().unwrap();
        assert!(!p.is_running(), "taken out");
        p.handed_out(r, 50, 20);
        assert!(p.unacknowledged());
        p.acknowledged(49);
        assert!(p.unacknowledged());
        p.acknowledged(50);
        assert!(!p.unacknowledged());
        assert_eq!(p.due(), None);
        // A sync that shipped nothing new is done at once.
        let mut q = running(SyncKind::Full);
        let r = q.take_running().unwrap();
        q.handed_out(r, 20, 20);
        assert!(!q.unacknowledged());
    }

    #[test]
    fn resume_puts_back_what_was_taken() {
        let mut p = running(SINCE);
        let r = p.take_running().unwrap();
        assert!(p.take_running().is_none());
        p.resume(r);
        assert!(p.is_running());
    }

    #[test]
    fn a_link_drop_owes_again_a_sync_cut_off_or_not_acknowledged() {
        let mut p = running(SINCE);
        p.link_up();
        assert!(!p.is_running());
        assert_eq!(p.owed(), Some(SINCE));
        let mut q = running(SyncKind::Full);
        let r = q.take_running().unwrap();
        q.handed_out(r, 50, 0);
        q.link_up();
        assert!(!q.unacknowledged());
        assert!(q.owes_full());
        // Nothing shipping: nothing owed.
        let mut idle = SnapshotProgress::<()>::default();
        idle.link_up();
        assert_eq!(idle.owed(), None);
    }

    #[test]
    fn restarting_drops_the_running_sync_and_owes_a_full_one() {
        let mut p = running(SINCE);
        p.restart_full();
        assert!(!p.is_running());
        assert!(p.owes_full());
        p.forgive_full();
        assert_eq!(p.owed(), None);
        let mut q = SnapshotProgress::<()>::default();
        q.owe(SINCE);
        q.forgive_full();
        assert_eq!(q.owed(), Some(SINCE), "only a full debt is forgiven");
    }

    #[test]
    fn a_sync_started_after_what_the_peer_had_received_covers_its_loss() {
        let mut p = running(SyncKind::Full);
        assert!(p.full_running_or_owed());
        assert!(p.started_after(10));
        assert!(!p.started_after(11));
        let r = p.take_running().unwrap();
        p.handed_out(r, 50, 0);
        assert!(p.started_after(10), "still on this link until acknowledged");
        p.acknowledged(50);
        assert!(!p.started_after(0));
        assert!(!p.full_running_or_owed());
    }
}
