//! What this node asks of its peer: the probe that learns what each side
//! misses after one of them lost state.
//!
//! Two requests can be outstanding: our *own* (this node lost state: it
//! started, or its dataset was replaced) and an *answer* (the peer asked
//! first; we tell it what we miss of its changes in turn). Each is due,
//! sent and not yet acknowledged, or absent. A link drop makes a sent one
//! due again (it may have been lost); the peer's ack of it ends it. Pure:
//! the flush asks what to send and says what it sent.

/// One request's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asking {
    /// To send at the next chance.
    Due,
    /// Sent as our sequence number `seq`, not yet acknowledged.
    Sent {
        /// Its sequence number.
        seq: u64,
    },
}

/// An answer request's progress and what it asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// Its progress.
    pub asking: Asking,
    /// It asks for everything (a watermark of 0): the peer may have lost
    /// deletes whose tombstones this node collected.
    pub asks_all: bool,
}

/// The probe of one peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    own: Option<Asking>,
    answer: Option<Answer>,
    /// The sequence number of our latest request (our own or an answer)
    /// sent on the current link.
    sent_on_link: Option<u64>,
    /// This node lost state and has not yet taken the peer's request that
    /// says what the peer misses of its changes: until then it claims no
    /// coverage (its backlog was dropped, its stream started over).
    awaiting_peer_request: bool,
}

impl Default for Probe {
    /// A node that just started: it lost state.
    fn default() -> Self {
        Self {
            own: Some(Asking::Due),
            answer: None,
            sent_on_link: None,
            awaiting_peer_request: true,
        }
    }
}

impl Probe {
    /// A probe with nothing to ask (a peer that lost nothing).
    #[cfg(test)]
    pub fn settled() -> Self {
        Self::settled_after(None)
    }

    /// A probe with nothing to ask whose last request on the current link
    /// went out as `last_sent`, if any.
    pub fn settled_after(last_sent: Option<u64>) -> Self {
        Self {
            own: None,
            answer: None,
            sent_on_link: last_sent,
            awaiting_peer_request: false,
        }
    }

    /// Whether it has nothing to ask and awaits nothing.
    pub fn is_settled(&self) -> bool {
        self.own.is_none() && self.answer.is_none() && !self.awaiting_peer_request
    }

    /// The sequence number of our last request sent on the current link.
    pub fn last_sent(&self) -> Option<u64> {
        self.sent_on_link
    }

    /// This node lost state: it asks for what it misses, and waits for the
    /// peer's request before claiming coverage.
    pub fn lost_state(&mut self) {
        self.own = Some(Asking::Due);
        self.awaiting_peer_request = true;
    }

    /// The peer's request was taken: what the peer misses is known now.
    /// An `initial` one (the peer lost state; it had received our entries
    /// up to `received` then) gets an answer back unless a request of ours
    /// is still to reach it (our own due, or one sent on this link after
    /// what it had received: it takes that instead). One it took before it
    /// lost state again (a reload of the peer on the same link) does not
    /// count.
    /// `asks_all` when the answer must ask for everything: then one is due
    /// in any case (our own request asks only since our watermark), and
    /// again if the last one asked for less.
    pub fn peer_request_taken(&mut self, initial: bool, asks_all: bool, received: u64) {
        self.awaiting_peer_request = false;
        let ours_reaches_it =
            self.own == Some(Asking::Due) || self.sent_on_link.is_some_and(|seq| seq > received);
        let answers = initial && !ours_reaches_it;
        let was = self.answer.is_some_and(|a| a.asks_all);
        if answers || (asks_all && !was) {
            self.answer = Some(Answer {
                asking: Asking::Due,
                asks_all: was || asks_all,
            });
        }
    }

    /// The request to send now, if one is due: `Some(false)` our own,
    /// `Some(true)` an answer (our own goes first).
    pub fn next_to_send(&self) -> Option<bool> {
        if self.own == Some(Asking::Due) {
            Some(false)
        } else if self.answer.is_some_and(|a| a.asking == Asking::Due) {
            Some(true)
        } else {
            None
        }
    }

    /// Whether the answer due asks for everything.
    pub fn answer_asks_all(&self) -> bool {
        self.answer.is_some_and(|a| a.asks_all)
    }

    /// Our own request is taken as sent and acknowledged (tests that
    /// start past it).
    #[cfg(test)]
    pub fn forget_own(&mut self) {
        self.own = None;
    }

    /// The request `next_to_send` named went out as sequence `seq`.
    pub fn sent(&mut self, seq: u64, answer: bool) {
        let sent = Asking::Sent { seq };
        if answer {
            if let Some(a) = self.answer.as_mut() {
                a.asking = sent;
            }
        } else {
            self.own = Some(sent);
        }
        self.sent_on_link = Some(seq);
    }

    /// The peer acknowledged our entries up to `acked`: requests sent at
    /// or below it arrived.
    pub fn acknowledged(&mut self, acked: u64) {
        let arrived = |a: Asking| matches!(a, Asking::Sent { seq } if seq <= acked);
        if self.own.is_some_and(arrived) {
            self.own = None;
        }
        if self.answer.is_some_and(|a| arrived(a.asking)) {
            self.answer = None;
        }
    }

    /// A new link: requests sent on an older one may be lost, so they are
    /// due again.
    pub fn link_up(&mut self) {
        if let Some(Asking::Sent { .. }) = self.own {
            self.own = Some(Asking::Due);
        }
        if let Some(a) = self.answer.as_mut() {
            a.asking = Asking::Due;
        }
        self.sent_on_link = None;
    }

    /// Whether our own request waits to be sent (the queue had no room):
    /// no sync of ours goes before it, since the peer, learning from it
    /// that this node lost state, drops what it noted of an earlier one.
    pub fn own_due(&self) -> bool {
        self.own == Some(Asking::Due)
    }

    /// Whether a request is due (a flush has link work).
    pub fn is_due(&self) -> bool {
        self.next_to_send().is_some()
    }

    /// Whether the coverage in the peer's acks may raise this node's
    /// watermark of it: not while our own request is unanswered, since the
    /// peer's earlier acks speak of a stream whose earlier links this node
    /// no longer holds.
    pub fn accepts_coverage(&self) -> bool {
        self.own.is_none()
    }

    /// Whether the coverage of an ack that acknowledges our entries up to
    /// `applied` may be taken: also when that very ack acknowledges our
    /// own request. The peer voided its coverage when it applied the
    /// request, so what such an ack claims was reached after the sync that
    /// answers it was in the stream, ahead of the ack.
    pub fn accepts_coverage_of_ack(&self, applied: u64) -> bool {
        match self.own {
            None => true,
            Some(Asking::Sent { seq }) => seq <= applied,
            Some(Asking::Due) => false,
        }
    }

    /// Whether this node still waits for the peer's request.
    pub fn awaits_peer_request(&self) -> bool {
        self.awaiting_peer_request
    }

    /// Whether our own request is due or unacknowledged.
    pub fn asks_own(&self) -> bool {
        self.own.is_some()
    }

    /// Whether an answer request is due or unacknowledged.
    #[cfg(test)]
    pub fn answers(&self) -> bool {
        self.answer.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_started_node_asks_sends_and_stops_when_acknowledged() {
        let mut p = Probe::default();
        assert!(!p.accepts_coverage() && p.awaits_peer_request());
        assert_eq!(p.next_to_send(), Some(false));
        assert!(p.own_due());
        p.sent(10, false);
        assert!(!p.own_due(), "sent: syncs may follow it");
        assert!(!p.is_due());
        p.acknowledged(9);
        assert!(p.asks_own(), "not yet");
        p.acknowledged(10);
        assert!(!p.asks_own() && p.accepts_coverage());
        assert!(p.awaits_peer_request(), "until the peer's request is taken");
        p.peer_request_taken(false, false, 0);
        assert!(!p.awaits_peer_request() && !p.is_due() && !p.answers());
    }

    #[test]
    fn a_peer_that_lost_state_after_taking_our_request_is_answered() {
        let mut p = Probe::default();
        p.sent(10, false);
        // Crossing requests: it lost state before ours reached it, and
        // takes ours instead of an answer.
        p.peer_request_taken(true, false, 9);
        assert!(!p.answers());
        p.acknowledged(10);
        // It took ours, then lost state again on the same link (a reload):
        // its new request gets an answer.
        p.peer_request_taken(true, false, 10);
        assert!(p.answers());
        assert_eq!(p.next_to_send(), Some(true));
    }

    #[test]
    fn a_request_lost_with_the_link_is_due_again() {
        let mut p = Probe::default();
        p.sent(10, false);
        p.link_up();
        assert_eq!(p.next_to_send(), Some(false));
        p.sent(12, false);
        p.acknowledged(12);
        assert!(!p.asks_own());
    }

    #[test]
    fn the_peers_first_request_gets_an_answer_unless_we_asked_on_this_link() {
        let mut p = Probe::settled();
        p.peer_request_taken(true, false, 0);
        assert_eq!(p.next_to_send(), Some(true));
        assert!(!p.answer_asks_all());
        p.sent(5, true);
        assert!(p.answers() && !p.is_due());
        assert!(p.accepts_coverage(), "an answer does not void coverage");
        p.link_up();
        assert_eq!(p.next_to_send(), Some(true), "lost with the link");
        p.sent(6, true);
        p.acknowledged(6);
        assert!(!p.answers());
        // Asked on this link already: no answer.
        let mut q = Probe::default();
        q.sent(1, false);
        q.peer_request_taken(true, false, 0);
        assert!(!q.answers());
        // A later request of the peer's is no first one: no answer either.
        let mut r = Probe::settled();
        r.peer_request_taken(false, false, 0);
        assert!(!r.answers());
    }

    #[test]
    fn an_answer_that_must_ask_for_everything_keeps_asking_so() {
        let mut p = Probe::settled();
        p.peer_request_taken(true, true, 0);
        assert!(p.answer_asks_all());
        p.peer_request_taken(true, false, 0);
        assert!(p.answer_asks_all(), "not taken back");
    }

    #[test]
    fn an_answer_asking_for_everything_goes_out_even_beside_our_own_request() {
        // Both nodes lost state and we asked first: our request asks only
        // since our watermark, so the peer would never ship everything.
        let mut p = Probe::default();
        p.lost_state();
        p.sent(1, false);
        p.peer_request_taken(true, true, 0);
        assert_eq!(p.next_to_send(), Some(true));
        assert!(p.answer_asks_all());
        // An answer that went out asking for less is sent again.
        let mut q = Probe::settled();
        q.peer_request_taken(true, false, 0);
        q.sent(5, true);
        q.peer_request_taken(true, true, 0);
        assert_eq!(q.next_to_send(), Some(true), "due again");
        assert!(q.answer_asks_all());
        // One that asked for everything already is not.
        q.sent(6, true);
        q.peer_request_taken(true, true, 0);
        assert_eq!(q.next_to_send(), None);
    }

    #[test]
    fn our_own_request_goes_before_an_answer_and_both_can_be_lost() {
        let mut p = Probe::settled();
        p.peer_request_taken(true, false, 0);
        p.lost_state();
        assert_eq!(p.next_to_send(), Some(false));
        p.sent(3, false);
        assert_eq!(p.next_to_send(), Some(true));
        p.sent(4, true);
        p.link_up();
        assert_eq!(p.next_to_send(), Some(false));
        p.sent(7, false);
        p.sent(8, true);
        p.acknowledged(8);
        assert!(!p.asks_own() && !p.answers());
    }
}
