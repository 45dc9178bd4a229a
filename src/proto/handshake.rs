//! The link handshake, for every transport: HELLO both ways (versions,
//! node id, auth mode, fresh nonce), then with a secret the dialer's PROOF
//! and the acceptor's PROOF, then RING both ways. No ring address, length or
//! key leaves a node before the peer has proven the secret, and nothing the
//! peer sends before that is applied.
//!
//! `Handshake` is a pure state machine (fuzzed in `fuzz/`) that says why a
//! connection is refused with a [`Refusal`];
//! `transport::handshake::run` drives it over a transport within a deadline.

use crate::proto::auth::{self, Secret, Side, Transcript, BINDING_LEN};
use crate::proto::control::{
    proof_message, server_field, AuthMode, ControlError, Hello, MessageHeader, Op, RefuseReason,
    RemoteRing, HEADER_LEN, HELLO_LEN, NONCE_LEN,
};
use crate::proto::ring::RingGeometry;
use crate::proto::ring::{MAX_RING_SIZE, MIN_RING_SIZE};

/// Kinds of handshake failure; each has its own counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// Bytes no rdmasync peer sends (`bad_frames`).
    Malformed,
    /// Wrong or missing secret, or a TLS certificate that does not verify
    /// (`auth_failures`).
    Auth,
    /// Versions differ (protocol, frames, RDB format) (`handshakes_refused`).
    Version,
    /// Both nodes have the same node id (`handshakes_refused`).
    SameNodeId,
    /// The wall clocks differ by more than `max-clock-offset`
    /// (`handshakes_refused`, `clock_refusals`).
    ClockOffset,
    /// Closed, timed out, or evicted before completing (`handshakes_incomplete`).
    Incomplete,
}

use HandshakeFailure as F;

/// Why a handshake must be refused: the kind, for the counters, and what
/// the log says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Refusal {
    /// What kind of failure.
    pub failure: HandshakeFailure,
    /// What the log says.
    pub reason: String,
}

impl Refusal {
    /// A refusal of `failure` kind.
    pub fn new(failure: HandshakeFailure, reason: impl Into<String>) -> Self {
        Self {
            failure,
            reason: reason.into(),
        }
    }
}

/// What the state machine's steps return.
pub type Result<T, E = Refusal> = std::result::Result<T, E>;

/// What this node says about itself in its HELLO.
#[derive(Debug, Clone)]
pub struct Local {
    /// This node's id.
    pub node_id: u64,
    /// RDB format of this server's DUMP payloads (0: unknown).
    pub rdb_version: u16,
    /// What this node runs ("redis 7.0.15").
    pub server: String,
    /// The shared secret, if configured.
    pub secret: Option<Secret>,
    /// This node's wall clock for this handshake, in milliseconds since the
    /// Unix epoch (0: not said, not checked).
    pub wall_ms: u64,
    /// Furthest the two wall clocks may differ (`max-clock-offset`).
    pub max_clock_offset_ms: u64,
}

impl Local {
    fn auth(&self) -> AuthMode {
        if self.secret.is_some() {
            AuthMode::HmacSha256
        } else {
            AuthMode::None
        }
    }
}

/// Whether two wall clocks (a peer's, read from its handshake, and this
/// node's) differ by more than `max_offset_ms`, either way: `Some(by how
/// many ms)` if so. A reading of 0 is a peer that did not say.
pub fn offset_beyond(peer_ms: u64, local_ms: u64, max_offset_ms: u64) -> Option<u64> {
    if peer_ms == 0 {
        return None;
    }
    let offset = peer_ms.abs_diff(local_ms);
    (offset > max_offset_ms).then_some(offset)
}

/// Exactly one connection survives per pair: the one dialed by the node with
/// the lower id. Both ends compute the same answer.
pub fn keep(side: Side, me: u64, peer: u64) -> bool {
    match side {
        Side::Dialer => me < peer,
        Side::Acceptor => peer < me,
    }
}

/// What the caller does after a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send this message, then read the next one.
    Send(Vec<u8>),
    /// Read the next message.
    Wait,
    /// The peer is authenticated (or neither side has a secret): send
    /// `reply` if any; then, if `keep`, register a fresh ring and send
    /// [`Handshake::ring_message`]; else close (the other connection of the
    /// pair survives).
    Authenticated {
        /// Our proof, when we prove second.
        reply: Option<Vec<u8>>,
        /// Whether the tie-break keeps this connection.
        keep: bool,
    },
    /// The handshake is complete: the ring the peer registered for us.
    Done(RemoteRing),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    AwaitHello,
    AwaitProof,
    AwaitRing,
    Done,
}

/// One side of one handshake.
pub struct Handshake<'a> {
    local: &'a Local,
    side: Side,
    ours: Hello,
    binding: [u8; BINDING_LEN],
    peer: Option<(Hello, [u8; HELLO_LEN])>,
    state: State,
}

fn body_of(hello: &Hello) -> [u8; HELLO_LEN] {
    let mut b = [0u8; HELLO_LEN];
    b.copy_from_slice(&hello.encode()[HEADER_LEN..]);
    b
}

impl<'a> Handshake<'a> {
    /// Starts a handshake; returns it and the HELLO to send first.
    /// `binding` ties the proofs to the channel (TLS exporter; zeros without TLS).
    pub fn new(
        local: &'a Local,
        side: Side,
        nonce: [u8; NONCE_LEN],
        binding: [u8; BINDING_LEN],
    ) -> (Self, Vec<u8>) {
        let ours = Hello {
            node_id: local.node_id,
            frame_version: crate::proto::wire::VERSION,
            auth: local.auth(),
            rdb_version: local.rdb_version,
            nonce,
            server: server_field(&local.server),
            wall_ms: local.wall_ms,
        };
        let hello = ours.encode().to_vec();
        let hs = Self {
            local,
            side,
            ours,
            binding,
            peer: None,
            state: State::AwaitHello,
        };
        (hs, hello)
    }

    /// The peer's HELLO, once received.
    pub fn peer(&self) -> Option<&Hello> {
        self.peer.as_ref().map(|(h, _)| h)
    }

    /// Whether the peer has been authenticated (or no secret is in use).
    pub fn authenticated(&self) -> bool {
        matches!(self.state, State::AwaitRing | State::Done)
    }

    /// The RING message announcing `ring`; only after [`Step::Authenticated`].
    ///
    /// # Errors
    /// A [`Refusal`] when called before the peer is authenticated.
    pub fn ring_message(&self, ring: &RemoteRing) -> Result<Vec<u8>> {
        if !self.authenticated() {
            return Err(Refusal::new(
                F::Auth,
                "ring requested before authentication",
            ));
        }
        Ok(ring.encode().to_vec())
    }

    fn transcript(&self, peer_body: &[u8; HELLO_LEN]) -> Transcript {
        let ours = body_of(&self.ours);
        let (dialer_hello, acceptor_hello) = match self.side {
            Side::Dialer => (ours, *peer_body),
            Side::Acceptor => (*peer_body, ours),
        };
        Transcript {
            dialer_hello,
            acceptor_hello,
            binding: self.binding,
        }
    }

    /// Feeds the next message from the peer: its decoded header and its body
    /// (exactly `header.len` bytes).
    ///
    /// # Errors
    /// A [`Refusal`] saying why the connection must be refused.
    pub fn on_message(&mut self, header: &MessageHeader, body: &[u8]) -> Result<Step> {
        if body.len() != header.len as usize {
            return Err(Refusal::new(F::Malformed, "body length mismatch"));
        }
        if header.op == Op::Refuse {
            let reason = RefuseReason::from_arg(header.arg);
            let failure = match reason {
                RefuseReason::Auth => F::Auth,
                RefuseReason::Version => F::Version,
                RefuseReason::SameNodeId => F::SameNodeId,
                RefuseReason::ClockOffset => F::ClockOffset,
                RefuseReason::Malformed | RefuseReason::Other => F::Malformed,
            };
            return Err(Refusal::new(
                failure,
                format!("the peer refused the connection: {}", reason.as_str()),
            ));
        }
        match (self.state, header.op) {
            (State::AwaitHello, Op::Hello) => self.on_hello(body),
            (State::AwaitProof, Op::Proof) => self.on_proof(body),
            (State::AwaitProof, op) => Err(Refusal::new(
                F::Auth,
                format!("the peer sent {op:?} instead of its proof"),
            )),
            (State::AwaitRing, Op::Ring) => self.on_ring(body),
            (state, op) => Err(Refusal::new(
                F::Malformed,
                format!("unexpected {op:?} during the handshake (waiting for {state:?})"),
            )),
        }
    }

    fn on_hello(&mut self, body: &[u8]) -> Result<Step> {
        let peer = Hello::decode(body).map_err(|e| match e {
            ControlError::BadVersion { .. } => Refusal::new(F::Version, e.to_string()),
            other => Refusal::new(F::Malformed, other.to_string()),
        })?;
        let mut peer_body = [0u8; HELLO_LEN];
        peer_body.copy_from_slice(body);
        self.check_peer(&peer)?;
        self.peer = Some((peer, peer_body));
        if self.local.secret.is_none() {
            // Neither side has a secret (checked above): nothing to prove.
            self.state = State::AwaitRing;
            return Ok(Step::Authenticated {
                reply: None,
                keep: keep(self.side, self.local.node_id, peer.node_id),
            });
        }
        self.state = State::AwaitProof;
        match (self.side, &self.local.secret) {
            // The dialer proves first: whoever connects to a listener learns
            // nothing about the secret before proving it.
            (Side::Dialer, Some(secret)) => {
                let tag = auth::proof(secret, Side::Dialer, &self.transcript(&peer_body));
                Ok(Step::Send(proof_message(&tag).to_vec()))
            }
            _ => Ok(Step::Wait),
        }
    }

    fn check_peer(&self, peer: &Hello) -> Result<()> {
        if peer.frame_version != self.ours.frame_version {
            return Err(Refusal::new(
                F::Version,
                format!(
                    "the peer ({}) writes frame format {}, this node ({}) reads {}",
                    peer.server_name(),
                    peer.frame_version,
                    self.local.server,
                    self.ours.frame_version
                ),
            ));
        }
        // Servers may differ (a migration): each side refuses per change
        // what the other cannot restore, which needs both formats known.
        if (peer.rdb_version == 0) != (self.ours.rdb_version == 0) {
            return Err(Refusal::new(
                F::Version,
                format!(
                    "the peer runs {} with RDB format {}, this node runs {} with RDB format {} \
                     (0: FUNCTION DUMP failed at load): what one side writes could not be \
                     checked against what the other restores",
                    peer.server_name(),
                    peer.rdb_version,
                    self.local.server,
                    self.ours.rdb_version
                ),
            ));
        }
        if peer.node_id == self.local.node_id {
            return Err(Refusal::new(
                F::SameNodeId,
                format!(
                    "the peer has the same node id {}; set node-id= on one of them",
                    peer.node_id
                ),
            ));
        }
        self.check_clock(peer)?;
        match (self.ours.auth, peer.auth) {
            (AuthMode::HmacSha256, AuthMode::None) => Err(Refusal::new(
                F::Auth,
                "authentication failed: the peer has no secret configured, this node requires one",
            )),
            (AuthMode::None, AuthMode::HmacSha256) => Err(Refusal::new(
                F::Auth,
                "authentication failed: the peer requires a secret, none is configured here",
            )),
            _ => Ok(()),
        }
    }

    /// Refuses a peer whose wall clock differs from ours by more than
    /// `max-clock-offset` (not checked when either side did not say).
    fn check_clock(&self, peer: &Hello) -> Result<()> {
        if self.local.wall_ms == 0 {
            return Ok(());
        }
        let bound = self.local.max_clock_offset_ms;
        let Some(offset) = offset_beyond(peer.wall_ms, self.local.wall_ms, bound) else {
            return Ok(());
        };
        let way = if peer.wall_ms > self.local.wall_ms {
            "ahead of"
        } else {
            "behind"
        };
        Err(Refusal::new(
            F::ClockOffset,
            format!(
                "the peer's clock is {offset} ms {way} this node's, beyond \
                 max-clock-offset {bound} ms: fix the clock of the node that is wrong"
            ),
        ))
    }

    fn on_proof(&mut self, body: &[u8]) -> Result<Step> {
        let (Some(secret), Some((peer, peer_body))) = (&self.local.secret, &self.peer) else {
            return Err(Refusal::new(F::Malformed, "PROOF without a secret"));
        };
        let transcript = self.transcript(peer_body);
        let peer_side = match self.side {
            Side::Dialer => Side::Acceptor,
            Side::Acceptor => Side::Dialer,
        };
        if !auth::verify(secret, peer_side, &transcript, body) {
            return Err(Refusal::new(
                F::Auth,
                "authentication failed: the peer's proof does not match (wrong secret on one side, or a replayed handshake)",
            ));
        }
        let keep = keep(self.side, self.local.node_id, peer.node_id);
        let reply = match self.side {
            Side::Acceptor => {
                Some(proof_message(&auth::proof(secret, Side::Acceptor, &transcript)).to_vec())
            }
            Side::Dialer => None,
        };
        self.state = State::AwaitRing;
        Ok(Step::Authenticated { reply, keep })
    }

    fn on_ring(&mut self, body: &[u8]) -> Result<Step> {
        let ring =
            RemoteRing::decode(body).map_err(|e| Refusal::new(F::Malformed, e.to_string()))?;
        if !(MIN_RING_SIZE..=MAX_RING_SIZE).contains(&ring.capacity)
            || RingGeometry::new(ring.capacity).is_none()
        {
            return Err(Refusal::new(
                F::Malformed,
                format!(
                    "the peer announced an invalid ring of {} bytes",
                    ring.capacity
                ),
            ));
        }
        self.state = State::Done;
        Ok(Step::Done(ring))
    }
}

/// Decodes a header received during the handshake (no WRITE allowed).
///
/// # Errors
/// A [`Refusal`] ([`HandshakeFailure::Malformed`](F::Malformed)).
pub fn decode_header(bytes: &[u8; HEADER_LEN]) -> Result<MessageHeader> {
    MessageHeader::decode(bytes, 0).map_err(|e| {
        Refusal::new(
            F::Malformed,
            format!("not an rdmasync handshake message: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    fn local(id: u64, secret: Option<&str>) -> Local {
        Local {
            node_id: id,
            rdb_version: 10,
            server: "redis 7.0.15".into(),
            secret: secret.map(|s| Secret::new(s.as_bytes().to_vec()).unwrap()),
            wall_ms: 1_000_000,
            max_clock_offset_ms: 10_000,
        }
    }

    #[test]
    fn handshake_offsets_count_both_ways_and_zero_is_unknown() {
        assert_eq!(offset_beyond(20_001, 10_000, 10_000), Some(10_001));
        assert_eq!(offset_beyond(10_000, 20_001, 10_000), Some(10_001));
        assert_eq!(offset_beyond(20_000, 10_000, 10_000), None);
        assert_eq!(offset_beyond(0, 10_000, 10), None);
    }

    fn split(msg: &[u8]) -> (MessageHeader, Vec<u8>) {
        let h = decode_header(msg[..HEADER_LEN].try_into().unwrap()).unwrap();
        (h, msg[HEADER_LEN..].to_vec())
    }

    const RING: RemoteRing = RemoteRing {
        capacity: 1 << 20,
        addr: 0,
        rkey: 0,
    };

    type Outcome = Option<Result<Option<RemoteRing>>>;

    /// Feeds one message from `inbox` to `hs`, queueing what it sends.
    fn step(
        hs: &mut Handshake<'_>,
        inbox: &mut VecDeque<Vec<u8>>,
        outbox: &mut VecDeque<Vec<u8>>,
        out: &mut Outcome,
    ) {
        if out.is_some() {
            return;
        }
        let Some(msg) = inbox.pop_front() else { return };
        let (h, b) = split(&msg);
        match hs.on_message(&h, &b) {
            Ok(Step::Send(m)) => outbox.push_back(m),
            Ok(Step::Wait) => {}
            Ok(Step::Authenticated { reply, keep }) => {
                outbox.extend(reply);
                if keep {
                    outbox.push_back(hs.ring_message(&RING).unwrap());
                } else {
                    *out = Some(Ok(None));
                }
            }
            Ok(Step::Done(r)) => *out = Some(Ok(Some(r))),
            Err(e) => *out = Some(Err(e)),
        }
    }

    /// Runs both state machines against each other; returns each side's outcome.
    fn pair(d: &Local, a: &Local) -> (Result<Option<RemoteRing>>, Result<Option<RemoteRing>>) {
        let (mut hd, hello_d) = Handshake::new(d, Side::Dialer, [1; NONCE_LEN], [0; 32]);
        let (mut ha, hello_a) = Handshake::new(a, Side::Acceptor, [2; NONCE_LEN], [0; 32]);
        let mut to_a: VecDeque<Vec<u8>> = VecDeque::from([hello_d]);
        let mut to_d: VecDeque<Vec<u8>> = VecDeque::from([hello_a]);
        let (mut out_d, mut out_a) = (None, None);
        for _ in 0..10 {
            step(&mut hd, &mut to_d, &mut to_a, &mut out_d);
            step(&mut ha, &mut to_a, &mut to_d, &mut out_a);
        }
        (
            out_d.unwrap_or(Err(Refusal::new(F::Incomplete, "no outcome"))),
            out_a.unwrap_or(Err(Refusal::new(F::Incomplete, "no outcome"))),
        )
    }

    fn failure<T: std::fmt::Debug>(r: Result<T>) -> F {
        match r {
            Err(e) => e.failure,
            Ok(v) => panic!("expected a failure, got {v:?}"),
        }
    }

    #[test]
    fn same_secret_connects_and_exchanges_rings() {
        let s = Some("0123456789abcdef-secret");
        let (d, a) = pair(&local(1, s), &local(2, s));
        assert_eq!(d.unwrap(), Some(RING));
        assert_eq!(a.unwrap(), Some(RING));
    }

    #[test]
    fn no_secret_on_either_side_connects() {
        let (d, a) = pair(&local(1, None), &local(2, None));
        assert_eq!(d.unwrap(), Some(RING));
        assert_eq!(a.unwrap(), Some(RING));
    }

    #[test]
    fn tie_break_drops_the_connection_dialed_by_the_higher_id() {
        let s = Some("0123456789abcdef-secret");
        let (d, a) = pair(&local(9, s), &local(2, s));
        assert_eq!(d.unwrap(), None);
        assert_eq!(a.unwrap(), None);
    }

    #[test]
    fn wrong_or_missing_secret_is_refused_by_the_acceptor_before_any_ring() {
        let good = Some("0123456789abcdef-secret");
        let bad = Some("0123456789abcdef-wrong!");
        // The acceptor never proves anything to a dialer with the wrong secret.
        let (d, a) = pair(&local(1, bad), &local(2, good));
        assert_eq!(failure(a), F::Auth);
        assert!(d.is_err());
        for (x, y) in [(None, good), (good, None)] {
            let (d, a) = pair(&local(1, x), &local(2, y));
            assert_eq!(failure(d), F::Auth);
            assert_eq!(failure(a), F::Auth);
        }
    }

    #[test]
    fn versions_and_identity_are_checked() {
        // Another server and RDB format pair (a migration): what one
        // writes that the other cannot restore is refused per change.
        let mut other = local(2, None);
        other.rdb_version = 11;
        other.server = "valkey 8.0.2".into();
        let (d, a) = pair(&local(1, None), &other);
        assert!(d.is_ok() && a.is_ok(), "{d:?} {a:?}");
        // Unless one cannot tell its format: nothing could be checked.
        other.rdb_version = 0;
        let (d, a) = pair(&local(1, None), &other);
        let msg = d.as_ref().unwrap_err().to_string();
        assert!(msg.contains("valkey 8.0.2 with RDB format 0"), "{msg}");
        assert_eq!(failure(d), F::Version);
        assert_eq!(failure(a), F::Version);
        let (d, _) = pair(&local(3, None), &local(3, None));
        assert_eq!(failure(d), F::SameNodeId);
    }

    #[test]
    fn a_replayed_or_reflected_proof_fails() {
        let s = local(2, Some("0123456789abcdef-secret"));
        // Record a genuine dialer's proof on one connection...
        let (mut acc1, hello_a1) = Handshake::new(&s, Side::Acceptor, [5; NONCE_LEN], [0; 32]);
        let dialer = local(1, Some("0123456789abcdef-secret"));
        let (mut dial, hello_d) = Handshake::new(&dialer, Side::Dialer, [6; NONCE_LEN], [0; 32]);
        let (h, b) = split(&hello_a1);
        let Step::Send(proof) = dial.on_message(&h, &b).unwrap() else {
            panic!("dialer must prove")
        };
        let (h, b) = split(&hello_d);
        assert_eq!(acc1.on_message(&h, &b).unwrap(), Step::Wait);
        // ...and replay the same HELLO and PROOF to a new connection.
        let (mut acc2, _) = Handshake::new(&s, Side::Acceptor, [7; NONCE_LEN], [0; 32]);
        assert_eq!(acc2.on_message(&h, &b).unwrap(), Step::Wait);
        let (ph, pb) = split(&proof);
        assert_eq!(failure(acc2.on_message(&ph, &pb)), F::Auth);
        // The genuine connection still works.
        assert!(matches!(
            acc1.on_message(&ph, &pb).unwrap(),
            Step::Authenticated { keep: true, .. }
        ));
    }

    #[test]
    fn nothing_but_a_proof_passes_the_proof_state() {
        let s = local(2, Some("0123456789abcdef-secret"));
        let (mut acc, _) = Handshake::new(&s, Side::Acceptor, [5; NONCE_LEN], [0; 32]);
        let dialer = local(1, Some("0123456789abcdef-secret"));
        let (_, hello_d) = Handshake::new(&dialer, Side::Dialer, [6; NONCE_LEN], [0; 32]);
        let (h, b) = split(&hello_d);
        acc.on_message(&h, &b).unwrap();
        let ring = RING.encode();
        let (h, b) = split(&ring);
        assert_eq!(failure(acc.on_message(&h, &b)), F::Auth);
        assert!(acc.ring_message(&RING).is_err());
    }

    #[test]
    fn an_invalid_ring_is_refused() {
        let me = local(1, None);
        let (mut d, _) = Handshake::new(&me, Side::Dialer, [1; NONCE_LEN], [0; 32]);
        let peer = local(2, None);
        let (_, hello_a) = Handshake::new(&peer, Side::Acceptor, [2; NONCE_LEN], [0; 32]);
        let (h, b) = split(&hello_a);
        d.on_message(&h, &b).unwrap();
        for capacity in [0, 1000, 4096, 3 << 20, 1 << 40] {
            let msg = RemoteRing {
                capacity,
                addr: 0,
                rkey: 0,
            }
            .encode();
            let (h, b) = split(&msg);
            assert_eq!(failure(d.on_message(&h, &b)), F::Malformed, "{capacity}");
        }
    }
}
