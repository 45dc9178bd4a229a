//! Where one peer's progress stands, as one value (raft-rs's
//! `tracker::Progress` and its `ProgressState`): the link this node has to
//! it, and what the two still owe each other before the stream alone keeps
//! them in step. Each state holds what it needs and nothing else: a peer in
//! `Replicate` owes and asks nothing, so no flag can say otherwise. Every
//! event is a named transition (a method below); after it the state is
//! chosen again from what is left owed (`Progress::settle`). Pure: the
//! flush and the apply path ask it what to do and tell it what happened.
//! Generic over the sync shipped (`catchup::fullsync::FullSync` in the
//! module), so the tests drive it with plain values.
//!
//! ```text
//!        link comes up: the state owed picks Probe, Snapshot or Replicate
//!   Down ───────────────────────► Probe ─► Snapshot ───────────► Replicate
//!    ▲  ◄───────────────────────   │ ▲        │ ▲   nothing owed   │
//!    │        link ends            │ └────────┘ └──────────────────┤
//!    │                             │ lost state   the peer asks,   │
//!    │                             │ (load)       a sync is owed   │
//!    └─────────────────────────────┴───────────────────────────────┘
//!                                     link ends
//! ```
//!
//! - **Down**: no link; what the next link starts with is kept.
//! - **Probe**: this node lost state and learns what each side misses: our
//!   own request is not acknowledged yet, or the peer's is awaited.
//! - **Snapshot**: a sync of our state is owed, running or not yet
//!   acknowledged whole, a request of the peer's waits to be taken, or an
//!   answer request of ours is not acknowledged yet.
//! - **Replicate**: in step; changes ship as they are made (the backlog
//!   kept while the link was down drains first).

use crate::catchup::peer::{LinkView, PeerRequest};
use crate::catchup::probe::Probe;
use crate::catchup::snapshot::{Running, SnapshotProgress, SyncKind};

/// What this node and the peer still owe each other before the stream
/// alone keeps them in step.
#[derive(Debug)]
pub struct Owed<S> {
    /// What this node asks of the peer (it lost state, or answers the
    /// peer's request).
    pub probe: Probe,
    /// The sync of our state owed to the peer, and the one shipping.
    pub snapshot: SnapshotProgress<S>,
    /// The peer's sync requests not taken yet, together.
    pub request: Option<PeerRequest>,
}

impl<S> Owed<S> {
    /// Nothing owed either way; `last_request`: the sequence number of our
    /// last request sent on the current link, if any.
    fn nothing(last_request: Option<u64>) -> Self {
        Self {
            probe: Probe::settled_after(last_request),
            snapshot: SnapshotProgress::default(),
            request: None,
        }
    }

    /// Whether our own request or the peer's is outstanding (this node
    /// lost state).
    fn probing(&self) -> bool {
        self.probe.asks_own() || self.probe.awaits_peer_request()
    }

    /// Whether nothing is owed either way.
    fn is_nothing(&self) -> bool {
        self.probe.is_settled() && self.snapshot.is_idle() && self.request.is_none()
    }
}

/// An up link as the peer's progress knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpLink {
    /// The link.
    pub view: LinkView,
    /// This peer was caught up on it (`Progress::caught_up`): changes not
    /// acknowledged on an earlier link were queued again, and what was sent
    /// on one and not known to have arrived is due again.
    pub caught_up: bool,
}

/// One peer's progress. See the module's docs for the states.
#[derive(Debug)]
pub enum Progress<S> {
    /// No link. `last`: the last link that came up (ended), if any.
    Down {
        /// The last link (`up` is false).
        last: LinkView,
        /// What the next link starts with.
        owed: Owed<S>,
    },
    /// A link is up and this node learns what each side misses.
    Probe {
        /// The link.
        link: UpLink,
        /// Our own request outstanding, or the peer's awaited.
        owed: Owed<S>,
    },
    /// A link is up and a sync or a request is outstanding.
    Snapshot {
        /// The link.
        link: UpLink,
        /// The sync owed, shipping or unacknowledged, or a request.
        owed: Owed<S>,
    },
    /// A link is up and nothing is owed: changes ship as they are made.
    Replicate {
        /// The link.
        link: UpLink,
        /// The sequence number of our last request sent on this link (a
        /// request the peer makes after it tells whether ours reached it).
        last_request: Option<u64>,
    },
}

/// The link part of a progress, taken apart to apply an event.
enum LinkPart {
    Down(LinkView),
    Up(UpLink),
}

impl<S> Default for Progress<S> {
    /// A node that just started, with no link yet: it lost state (it asks
    /// the peer for what it misses and waits for the peer's request).
    fn default() -> Self {
        Self::Down {
            last: LinkView::default(),
            owed: Owed {
                probe: Probe::default(),
                snapshot: SnapshotProgress::default(),
                request: None,
            },
        }
    }
}

impl<S> Progress<S> {
    /// The state for `link` and what is left `owed`: `Down` without a link;
    /// else `Probe` while this node learns what each side misses,
    /// `Snapshot` while anything else is owed, `Replicate` when nothing is.
    fn settle(link: LinkPart, owed: Owed<S>) -> Self {
        match link {
            LinkPart::Down(last) => Self::Down { last, owed },
            LinkPart::Up(link) if owed.probing() => Self::Probe { link, owed },
            LinkPart::Up(link) if !owed.is_nothing() => Self::Snapshot { link, owed },
            LinkPart::Up(link) => Self::Replicate {
                link,
                last_request: owed.probe.last_sent(),
            },
        }
    }

    /// Takes the state apart (a peer in `Replicate` owes nothing).
    fn into_parts(self) -> (LinkPart, Owed<S>) {
        match self {
            Self::Down { last, owed } => (LinkPart::Down(last), owed),
            Self::Probe { link, owed } | Self::Snapshot { link, owed } => {
                (LinkPart::Up(link), owed)
            }
            Self::Replicate { link, last_request } => {
                (LinkPart::Up(link), Owed::nothing(last_request))
            }
        }
    }

    /// Applies an event to the link and what is owed, then settles.
    fn step<R>(&mut self, event: impl FnOnce(&mut LinkPart, &mut Owed<S>) -> R) -> R {
        let placeholder = Self::Down {
            last: LinkView::default(),
            owed: Owed::nothing(None),
        };
        let (mut link, mut owed) = std::mem::replace(self, placeholder).into_parts();
        let out = event(&mut link, &mut owed);
        *self = Self::settle(link, owed);
        out
    }

    /// Applies an event to what is owed only.
    fn owe_step<R>(&mut self, event: impl FnOnce(&mut Owed<S>) -> R) -> R {
        self.step(|_, owed| event(owed))
    }

    /// Reads what is owed (nothing, in `Replicate`).
    fn read<R>(&self, query: impl FnOnce(&Owed<S>) -> R) -> R {
        match self {
            Self::Down { owed, .. } | Self::Probe { owed, .. } | Self::Snapshot { owed, .. } => {
                query(owed)
            }
            Self::Replicate { last_request, .. } => query(&Owed::nothing(*last_request)),
        }
    }

    // ---- the link ----

    /// The link as the main thread knows it now.
    pub fn link(&self) -> LinkView {
        match self {
            Self::Down { last, .. } => *last,
            Self::Probe { link, .. }
            | Self::Snapshot { link, .. }
            | Self::Replicate { link, .. } => link.view,
        }
    }

    /// Link `view` came up (its `LinkUp` event, in order with what came
    /// over the links); this peer is not caught up on it yet.
    pub fn link_came_up(&mut self, view: LinkView) {
        self.step(|link, _| {
            *link = LinkPart::Up(UpLink {
                view,
                caught_up: false,
            })
        });
    }

    /// Link `epoch` ended (one that ended after a newer came up changes
    /// nothing).
    pub fn link_ended(&mut self, epoch: u64) {
        self.step(|link, _| {
            if let LinkPart::Up(up) = link {
                if up.view.epoch == epoch {
                    *link = LinkPart::Down(up.view.ended(epoch));
                }
            }
        });
    }

    /// Whether this peer is not caught up on link `epoch` (no link is up,
    /// another is, or this one came up or lost state since).
    pub fn is_new_link(&self, epoch: u64) -> bool {
        match self {
            Self::Down { .. } => true,
            Self::Probe { link, .. }
            | Self::Snapshot { link, .. }
            | Self::Replicate { link, .. } => link.view.epoch != epoch || !link.caught_up,
        }
    }

    /// This peer is caught up on the link now up (`view`, when the link
    /// came up without its event, in tests): requests sent and syncs
    /// shipped on an earlier link may be lost, so they are due again.
    pub fn caught_up(&mut self, view: LinkView) {
        self.step(|link, owed| {
            let view = match link {
                LinkPart::Up(up) if up.view.epoch == view.epoch => up.view,
                _ => view,
            };
            *link = LinkPart::Up(UpLink {
                view,
                caught_up: true,
            });
            owed.probe.link_up();
            owed.snapshot.link_up();
        });
    }

    /// This node lost state (a load, data from a master): it asks the peer
    /// for what it misses, the sync it was shipping reads old data (a full
    /// one is owed instead), and it catches up again even on the same link.
    pub fn lost_state(&mut self) {
        self.step(|link, owed| {
            owed.probe.lost_state();
            owed.snapshot.restart_full();
            if let LinkPart::Up(up) = link {
                up.caught_up = false;
            }
        });
    }

    // ---- what this node asks of the peer ----

    /// The request to send now, if one is due: `Some(false)` our own,
    /// `Some(true)` an answer.
    pub fn request_to_send(&self) -> Option<bool> {
        self.read(|o| o.probe.next_to_send())
    }

    /// Whether the answer due asks for everything.
    pub fn answer_asks_all(&self) -> bool {
        self.read(|o| o.probe.answer_asks_all())
    }

    /// Whether our own request waits to be sent (no sync goes before it).
    pub fn own_request_due(&self) -> bool {
        self.read(|o| o.probe.own_due())
    }

    /// Whether our own request is due or unacknowledged.
    #[cfg(test)]
    pub fn asks_own(&self) -> bool {
        self.read(|o| o.probe.asks_own())
    }

    /// Whether this node still waits for the peer's request.
    #[cfg(test)]
    pub fn awaits_peer_request(&self) -> bool {
        self.read(|o| o.probe.awaits_peer_request())
    }

    /// Whether the peer's acks may raise this node's watermark of it.
    pub fn accepts_coverage(&self) -> bool {
        self.read(|o| o.probe.accepts_coverage())
    }

    /// The same, for an ack acknowledging our entries up to `applied`.
    pub fn accepts_coverage_of_ack(&self, applied: u64) -> bool {
        self.read(|o| o.probe.accepts_coverage_of_ack(applied))
    }

    /// Our request (`answer` or our own) went out as sequence `seq`.
    pub fn request_sent(&mut self, seq: u64, answer: bool) {
        self.owe_step(|o| o.probe.sent(seq, answer));
    }

    /// The peer applied our entries up to `acked`: requests and a sync
    /// handed out whole at or below it arrived.
    pub fn acknowledged(&mut self, acked: u64) {
        self.owe_step(|o| {
            o.probe.acknowledged(acked);
            o.snapshot.acknowledged(acked);
        });
    }

    // ---- the peer's requests ----

    /// The peer asked for a sync (`request`); it joins one not taken yet.
    pub fn peer_asks(&mut self, request: PeerRequest) {
        self.owe_step(|o| o.request = Some(o.request.map_or(request, |r| r.merge(request))));
    }

    /// Whether a request of the peer's waits to be taken.
    pub fn request_waits(&self) -> bool {
        self.read(|o| o.request.is_some())
    }

    /// Takes the peer's request waiting, if any: what the peer misses is
    /// known now. An `initial` one gets an answer back (see
    /// `Probe::peer_request_taken`), asking for everything when `asks_all`
    /// says the answer must.
    pub fn take_request(
        &mut self,
        asks_all: impl FnOnce(&PeerRequest) -> bool,
    ) -> Option<PeerRequest> {
        self.owe_step(|o| {
            let request = o.request.take()?;
            let all = request.initial && asks_all(&request);
            o.probe
                .peer_request_taken(request.initial, all, request.received);
            Some(request)
        })
    }

    // ---- the sync of our state owed to the peer ----

    /// A sync of `kind` is owed; it joins one owed already.
    pub fn owe(&mut self, kind: SyncKind) {
        self.owe_step(|o| o.snapshot.owe(kind));
    }

    /// The sync owed, if any.
    pub fn owed(&self) -> Option<SyncKind> {
        self.read(|o| o.snapshot.owed())
    }

    /// No full sync is owed any more (one since watermarks stays).
    pub fn forgive_full(&mut self) {
        self.owe_step(|o| o.snapshot.forgive_full());
    }

    /// The data must be merged again: the sync running is dropped and a
    /// full one is owed.
    pub fn restart_full(&mut self) {
        self.owe_step(|o| o.snapshot.restart_full());
    }

    /// The sync to start now, if any.
    pub fn sync_due(&self) -> Option<SyncKind> {
        self.read(|o| o.snapshot.due())
    }

    /// Starts `sync` of `kind` after our sequence number `started_after`.
    pub fn start_sync(&mut self, kind: SyncKind, sync: S, started_after: u64) {
        self.owe_step(|o| o.snapshot.start(kind, sync, started_after));
    }

    /// Whether a sync is running and not lent out.
    pub fn sync_running(&self) -> bool {
        self.read(|o| o.snapshot.is_running())
    }

    /// Whether the running sync is lent out to hand out entries.
    #[cfg(test)]
    pub fn sync_lent(&self) -> bool {
        self.read(|o| o.snapshot.is_lent())
    }

    /// Lends the running sync out to hand out entries (see
    /// `SnapshotProgress::take_running`); `return_sync`, `sync_handed_out`
    /// or `sync_dropped` ends the loan.
    pub fn lend_sync(&mut self) -> Option<Running<S>> {
        self.owe_step(|o| o.snapshot.take_running())
    }

    /// The sync lent out has more to hand out.
    pub fn return_sync(&mut self, running: Running<S>) {
        self.owe_step(|o| o.snapshot.resume(running));
    }

    /// The sync lent out handed out its last entry, `last_seq`; the peer
    /// acknowledged ours up to `acked`.
    pub fn sync_handed_out(&mut self, running: Running<S>, last_seq: u64, acked: u64) {
        self.owe_step(|o| o.snapshot.handed_out(running, last_seq, acked));
    }

    /// The sync lent out could not go on: a full one is owed instead.
    pub fn sync_dropped(&mut self) {
        self.owe_step(|o| {
            o.snapshot.end_loan();
            o.snapshot.owe(SyncKind::Full);
        });
    }

    /// Whether a sync handed out whole is not acknowledged yet.
    pub fn sync_unacknowledged(&self) -> bool {
        self.read(|o| o.snapshot.unacknowledged())
    }

    /// Whether a full sync runs or is owed.
    pub fn full_running_or_owed(&self) -> bool {
        self.read(|o| o.snapshot.full_running_or_owed())
    }

    /// Whether a sync shipped on this link started after our entry
    /// `received`.
    pub fn sync_started_after(&self, received: u64) -> bool {
        self.read(|o| o.snapshot.started_after(received))
    }

    /// The sync since watermarks owed or running, if any.
    pub fn since_owed_or_running(&self) -> Option<SyncKind> {
        self.read(|o| o.snapshot.since_owed_or_running())
    }

    /// Whether a full sync is owed.
    #[cfg(test)]
    pub fn owes_full(&self) -> bool {
        self.owed() == Some(SyncKind::Full)
    }

    /// What this node asks of the peer (a copy, for tests).
    #[cfg(test)]
    pub fn probe(&self) -> Probe {
        self.read(|o| o.probe.clone())
    }

    /// Changes what this node asks of the peer directly (tests that start
    /// past a step).
    #[cfg(test)]
    pub fn probe_mut<R>(&mut self, change: impl FnOnce(&mut Probe) -> R) -> R {
        self.owe_step(|o| change(&mut o.probe))
    }

    /// The peer's requests not taken yet (a copy, for tests).
    #[cfg(test)]
    pub fn request(&self) -> Option<PeerRequest> {
        self.read(|o| o.request)
    }

    /// Whether what is owed keeps this node's stream out of step with the
    /// peer (see `Replication::coverage`): the peer's request awaited, a
    /// sync owed, running or lent out, or a request of the peer's waiting.
    pub fn holds_stream_back(&self) -> bool {
        match self {
            Self::Replicate { .. } => false,
            _ => self.read(|o| {
                o.probe.awaits_peer_request()
                    || o.snapshot.owed().is_some()
                    || o.snapshot.is_running()
                    || o.snapshot.is_lent()
                    || o.request.is_some()
            }),
        }
    }

    /// Whether a sync is owed, or a request due or waiting (a flush has
    /// link work).
    pub fn sync_pending(&self) -> bool {
        self.read(|o| o.snapshot.owed().is_some() || o.request.is_some() || o.probe.is_due())
    }
}

#[cfg(test)]
#[path = "progress_tests.rs"]
mod tests;
