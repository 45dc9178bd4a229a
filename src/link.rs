//! Connection lifecycle, for either transport: listen and dial, exchange
//! HELLO, keep exactly one link per pair (the one dialed by the lower node
//! id), run it, and reconnect with bounded backoff when it drops. While a
//! link is up its thread runs the transport's receive loop, which hands
//! placed bytes to `Inbound`: poller -> apply, with credit back.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::config::{MAX_RING_SIZE, MIN_RING_SIZE};
use crate::control::Hello;
use crate::entry::Batch;
use crate::error::{Error, Result};
use crate::poller::Poller;
use crate::ring::{CreditPolicy, RingGeometry};
use crate::runtime::{Shared, TransportKind};
use crate::status::{LinkState, Stats};
use crate::transport::rdma::{self, RdmaLink};
use crate::transport::tcp::{self, exchange_hello, TcpLink};
use crate::transport::{Delivery, RingWriter};

/// Handshake and dial timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);
/// First and largest pause between connection attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_millis(1000);
/// How often idle threads wake to check for unload and a silent peer.
pub const IDLE_TICK: Duration = Duration::from_millis(250);
/// The peer is declared dead after this long without a message (it sends a
/// keepalive after a second of silence).
pub const DEAD_PEER: Duration = Duration::from_secs(5);

/// A connected transport whose HELLO exchange is done.
pub enum Conn {
    /// A TCP stream.
    Tcp(TcpStream),
    /// An RDMA connection (its sending half; the endpoint lives inside).
    Rdma(Arc<RdmaLink>),
}

/// A running link: the typed halves the receive loop needs.
enum Active {
    Tcp(TcpStream, Arc<TcpLink>),
    Rdma(Arc<RdmaLink>),
}

/// A connection the tie-break keeps, handed to the link thread.
pub struct Offer {
    conn: Conn,
    peer: Hello,
}

/// Which side opened the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Dialer,
    Acceptor,
}

/// Exactly one connection survives per pair: the one dialed by the node with
/// the lower id. Both ends compute the same answer.
fn keep(role: Role, me: u64, peer: u64) -> bool {
    match role {
        Role::Dialer => me < peer,
        Role::Acceptor => peer < me,
    }
}

fn check_peer(shared: &Shared, peer: &Hello) -> Result<()> {
    if peer.node_id == shared.node_id {
        return Err(Error::Protocol(format!(
            "peer has the same node id {}; set node-id= on one of them",
            peer.node_id
        )));
    }
    if !(MIN_RING_SIZE..=MAX_RING_SIZE).contains(&peer.ring_capacity)
        || RingGeometry::new(peer.ring_capacity).is_none()
    {
        return Err(Error::Protocol(format!(
            "peer announced an invalid ring of {} bytes",
            peer.ring_capacity
        )));
    }
    Ok(())
}

fn tcp_handshake(shared: &Shared, mut stream: TcpStream, role: Role) -> Result<Option<Offer>> {
    let ours = Hello {
        node_id: shared.node_id,
        ring_capacity: shared.config.ring_size,
        ring_addr: 0,
        ring_rkey: 0,
    };
    let peer = exchange_hello(&mut stream, &ours, CONNECT_TIMEOUT)?;
    check_peer(shared, &peer)?;
    Ok(keep(role, shared.node_id, peer.node_id).then_some(Offer {
        conn: Conn::Tcp(stream),
        peer,
    }))
}

fn rdma_handshake(shared: &Shared, pending: rdma::Pending, role: Role) -> Result<Option<Offer>> {
    let ours = pending.hello(shared.node_id);
    let (link, peer) = pending.exchange(&ours)?;
    if let Err(e) = check_peer(shared, &peer) {
        link.close();
        return Err(e);
    }
    if keep(role, shared.node_id, peer.node_id) {
        Ok(Some(Offer {
            conn: Conn::Rdma(link),
            peer,
        }))
    } else {
        link.close();
        Ok(None)
    }
}

/// Passes a kept connection to the link thread; counts and logs a failed
/// handshake (once per distinct error, so a flood of bad connections does
/// not flood the log).
fn hand_over(
    shared: &Shared,
    offers: &Sender<Offer>,
    result: Result<Option<Offer>>,
    last_logged: &mut String,
) {
    match result {
        Ok(Some(offer)) => {
            let _ = offers.try_send(offer);
        }
        Ok(None) => {}
        Err(e) => {
            Stats::add(&shared.stats.bad_frames, 1);
            let msg = format!("incoming handshake: {e}");
            if *last_logged != msg {
                redis_module::logging::log_warning(format!("rdmasync: {msg}"));
                last_logged.clone_from(&msg);
            }
            shared.stats.set_error(msg);
        }
    }
}

/// Accepts TCP connections and hands kept ones to the link thread.
pub fn run_tcp_acceptor(shared: Arc<Shared>, listener: TcpListener, offers: Sender<Offer>) {
    if let Err(e) = listener.set_nonblocking(true) {
        shared.stats.set_error(format!("listener: {e}"));
    }
    let mut last_logged = String::new();
    while !shared.stopping() {
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let result = tcp_handshake(&shared, stream, Role::Acceptor);
                hand_over(&shared, &offers, result, &mut last_logged);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::park_timeout(IDLE_TICK); // stop() unparks
            }
            Err(e) => {
                shared.stats.set_error(format!("accept: {e}"));
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Accepts RDMA connections and hands kept ones to the link thread.
pub fn run_rdma_acceptor(shared: Arc<Shared>, listener: rdma::Listener, offers: Sender<Offer>) {
    let mut last_logged = String::new();
    while !shared.stopping() {
        match listener.accept(shared.config.ring_size, IDLE_TICK) {
            Ok(Some(pending)) => {
                let result = rdma_handshake(&shared, pending, Role::Acceptor);
                hand_over(&shared, &offers, result, &mut last_logged);
            }
            Ok(None) => {}
            Err(e) => {
                shared.stats.set_error(format!("rdma accept: {e}"));
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn dial(shared: &Shared) -> Result<Option<Offer>> {
    let peer = shared.peer_addr();
    let (host, port) = shared.peer.read().clone();
    let addrs: Vec<SocketAddr> = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|source| Error::Resolve {
            peer: peer.clone(),
            source,
        })?
        .collect();
    let mut last = None;
    for addr in addrs {
        let attempt = match shared.transport {
            TransportKind::Tcp => TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
                .map_err(|source| Error::Connect {
                    addr: addr.to_string(),
                    source,
                })
                .and_then(|s| tcp_handshake(shared, s, Role::Dialer)),
            TransportKind::Rdma => {
                let bind = SocketAddr::new(shared.config.bind, 0);
                let src = (!bind.ip().is_unspecified()).then_some(bind);
                rdma::dial(src, addr, shared.config.ring_size)
                    .map_err(Error::from)
                    .and_then(|p| rdma_handshake(shared, p, Role::Dialer))
            }
        };
        match attempt {
            Ok(offer) => return Ok(offer),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or(Error::Resolve {
        peer,
        source: ErrorKind::NotFound.into(),
    }))
}

/// The link thread: connects, runs the link, reconnects; until unload.
pub fn run_link(shared: Arc<Shared>, offers: Receiver<Offer>) {
    let mut backoff = BACKOFF_MIN;
    let mut dial_error_logged = false;
    while !shared.stopping() {
        shared.stats.set_link(LinkState::Connecting);
        let offer = match offers.try_recv() {
            Ok(offer) => Some(offer),
            Err(_) => match dial(&shared) {
                Ok(offer) => offer,
                Err(e) => {
                    if !dial_error_logged {
                        redis_module::logging::log_notice(format!(
                            "rdmasync: cannot reach peer yet ({e}); retrying with backoff"
                        ));
                        dial_error_logged = true;
                    }
                    shared.stats.set_error(e.to_string());
                    None
                }
            },
        };
        let offer = match offer {
            Some(o) => Some(o),
            // The peer dials us (tie-break) or is not up yet: wait for it.
            None => match offers.recv_timeout(backoff) {
                Ok(o) => Some(o),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            },
        };
        let Some(offer) = offer else {
            backoff = (backoff * 2).min(BACKOFF_MAX);
            continue;
        };
        dial_error_logged = false;
        let started = Instant::now();
        let result = run_connection(&shared, offer, &offers);
        shared.stats.set_link(LinkState::Connecting);
        if let Err(e) = result {
            if !shared.stopping() {
                redis_module::logging::log_warning(format!("rdmasync: link down: {e}"));
                shared.stats.set_error(format!("link down: {e}"));
            }
        }
        if started.elapsed() > Duration::from_secs(2) {
            backoff = BACKOFF_MIN;
        }
    }
}

/// Runs one established link until it fails, is replaced, or unload begins.
fn run_connection(shared: &Shared, offer: Offer, offers: &Receiver<Offer>) -> Result<()> {
    let Offer { conn, peer } = offer;
    let peer_ring = RingGeometry::new(peer.ring_capacity)
        .ok_or_else(|| Error::Protocol("invalid peer ring".into()))?;
    let active = match conn {
        Conn::Tcp(stream) => {
            let link = Arc::new(TcpLink::new(&stream, peer_ring)?);
            Active::Tcp(stream, link)
        }
        Conn::Rdma(link) => Active::Rdma(link),
    };
    let (writer, device): (Arc<dyn RingWriter>, String) = match &active {
        Active::Tcp(_, link) => (link.clone(), String::new()),
        Active::Rdma(link) => (link.clone(), link.device().to_owned()),
    };
    shared.stats.ring_tail.store(0, Ordering::Relaxed);
    shared.stats.ring_credit.store(0, Ordering::Relaxed);
    *shared.device.lock() = device.clone();
    *shared.link.lock() = Some(writer.clone());
    Stats::add(&shared.stats.links_established, 1);
    if Stats::get(&shared.stats.links_established) > 1 {
        Stats::add(&shared.stats.reconnects, 1);
    }
    shared
        .stats
        .peer_node_id
        .store(peer.node_id, Ordering::Relaxed);
    shared.stats.set_link(LinkState::Up);
    let on = if device.is_empty() {
        String::new()
    } else {
        format!(" on {device}")
    };
    redis_module::logging::log_notice(format!(
        "rdmasync: link up with node {} ({}), transport {}{on}",
        peer.node_id,
        shared.peer_addr(),
        shared.transport.as_str(),
    ));
    let result = Inbound::new(shared, offers).and_then(|mut inbound| match active {
        Active::Tcp(mut stream, link) => {
            tcp::receive(&mut stream, &link, shared.config.ring_size, &mut inbound)
        }
        Active::Rdma(link) => rdma::receive(&link, &mut inbound),
    });
    writer.close();
    {
        let mut slot = shared.link.lock();
        if slot.as_ref().is_some_and(|l| Arc::ptr_eq(l, &writer)) {
            *slot = None;
        }
    }
    shared.queue.wake.wake();
    result
}

/// The receiving side shared by every transport: poller -> apply -> credit.
struct Inbound<'a> {
    shared: &'a Shared,
    offers: &'a Receiver<Offer>,
    poller: Poller,
    credit: CreditPolicy,
    batches: Vec<Batch>,
}

impl<'a> Inbound<'a> {
    fn new(shared: &'a Shared, offers: &'a Receiver<Offer>) -> Result<Self> {
        let geometry = RingGeometry::new(shared.config.ring_size)
            .ok_or_else(|| Error::Protocol("invalid local ring size".into()))?;
        Ok(Self {
            shared,
            offers,
            poller: Poller::new(geometry),
            credit: CreditPolicy::new(geometry),
            batches: Vec::new(),
        })
    }
}

impl Delivery for Inbound<'_> {
    fn placed(&mut self, ring: &[u8], placed: u64) -> Result<Option<u64>> {
        if let Err(e) = self.poller.consume(ring, placed, &mut self.batches) {
            self.rejected();
            return Err(e);
        }
        for batch in self.batches.drain(..) {
            self.shared.apply.submit(self.shared, batch)?;
        }
        let head = self.poller.head();
        let due = self.credit.due(head, head == placed);
        if let Some(h) = due {
            self.credit.returned(h);
        }
        Ok(due)
    }

    fn idle(&mut self, last_rx: Instant) -> Result<()> {
        if self.shared.stopping() {
            return Err(Error::LinkClosed);
        }
        if last_rx.elapsed() > DEAD_PEER {
            return Err(Error::Protocol(format!(
                "peer silent for {} s",
                DEAD_PEER.as_secs()
            )));
        }
        if !self.offers.is_empty() {
            return Err(Error::Protocol("replaced by a newer connection".into()));
        }
        Ok(())
    }

    fn credit(&mut self, head: u64) {
        self.shared.stats.ring_credit.store(head, Ordering::Relaxed);
        self.shared.queue.wake.wake();
    }

    fn head(&self) -> u64 {
        self.poller.head()
    }

    fn received(&mut self, bytes: u64) {
        Stats::add(&self.shared.stats.bytes_received, bytes);
    }

    fn rejected(&mut self) {
        Stats::add(&self.shared.stats.bad_frames, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_one_connection_survives() {
        // A dials B and B dials A: exactly one of the two is kept, by both ends.
        let (a, b) = (3, 9);
        let a_to_b = (keep(Role::Dialer, a, b), keep(Role::Acceptor, b, a));
        let b_to_a = (keep(Role::Dialer, b, a), keep(Role::Acceptor, a, b));
        assert_eq!(a_to_b, (true, true));
        assert_eq!(b_to_a, (false, false));
    }
}
