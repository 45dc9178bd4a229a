//! Connection lifecycle: listen and dial, handshake, keep exactly one link
//! per pair (the one dialed by the lower node id), run it, and reconnect with
//! bounded backoff when it drops. While a link is up its thread is the
//! receiver: socket -> ring -> poller -> apply, with credit back.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::apply::apply_batch;
use crate::config::{MAX_RING_SIZE, MIN_RING_SIZE};
use crate::control::{Hello, MessageHeader, Op, HEADER_LEN};
use crate::error::{Error, Result};
use crate::poller::Poller;
use crate::ring::{CreditPolicy, RingGeometry};
use crate::runtime::Shared;
use crate::server::ThreadContext;
use crate::status::{LinkState, Stats};
use crate::transport::tcp::{exchange_hello, read_full, TcpLink, DEAD_PEER, READ_TICK};
use crate::transport::RingWriter;

/// Handshake and dial timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);
/// First and largest pause between connection attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_millis(1000);

/// A connection whose handshake succeeded and that the tie-break keeps.
pub struct Offer {
    stream: TcpStream,
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

fn handshake(shared: &Shared, mut stream: TcpStream, role: Role) -> Result<Option<Offer>> {
    let ours = Hello {
        node_id: shared.node_id,
        ring_capacity: shared.config.ring_size,
    };
    let peer = exchange_hello(&mut stream, &ours, CONNECT_TIMEOUT)?;
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
    Ok(keep(role, shared.node_id, peer.node_id).then_some(Offer { stream, peer }))
}

/// Accepts connections and hands kept ones to the link thread.
pub fn run_acceptor(shared: Arc<Shared>, listener: TcpListener, offers: Sender<Offer>) {
    if let Err(e) = listener.set_nonblocking(true) {
        shared.stats.set_error(format!("listener: {e}"));
    }
    while !shared.stopping() {
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = stream.set_nonblocking(false);
                match handshake(&shared, stream, Role::Acceptor) {
                    Ok(Some(offer)) => {
                        let _ = offers.try_send(offer);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        Stats::add(&shared.stats.bad_frames, 1);
                        shared.stats.set_error(format!("incoming handshake: {e}"));
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::park_timeout(Duration::from_millis(20));
            }
            Err(e) => {
                shared.stats.set_error(format!("accept: {e}"));
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn dial(shared: &Shared) -> Result<Option<Offer>> {
    let peer = shared.config.peer_addr();
    let addrs: Vec<SocketAddr> = (shared.config.peer_host.as_str(), shared.config.peer_port)
        .to_socket_addrs()
        .map_err(|source| Error::Resolve {
            peer: peer.clone(),
            source,
        })?
        .collect();
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
            Ok(stream) => return handshake(shared, stream, Role::Dialer),
            Err(source) => {
                last = Some(Error::Connect {
                    addr: addr.to_string(),
                    source,
                })
            }
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
    let mut dialed_error_logged = false;
    while !shared.stopping() {
        shared.stats.set_link(LinkState::Connecting);
        let offer = match offers.try_recv() {
            Ok(offer) => Some(offer),
            Err(_) => match dial(&shared) {
                Ok(offer) => offer,
                Err(e) => {
                    if !dialed_error_logged {
                        redis_module::logging::log_notice(format!(
                            "rdmasync: cannot reach peer yet ({e}); retrying with backoff"
                        ));
                        dialed_error_logged = true;
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
        dialed_error_logged = false;
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
    let Offer { mut stream, peer } = offer;
    let peer_ring = RingGeometry::new(peer.ring_capacity)
        .ok_or_else(|| Error::Protocol("invalid peer ring".into()))?;
    let link = Arc::new(TcpLink::new(&stream, peer_ring)?);
    stream.set_read_timeout(Some(READ_TICK))?;
    shared.stats.ring_tail.store(0, Ordering::Relaxed);
    shared.stats.ring_credit.store(0, Ordering::Relaxed);
    *shared.link.lock() = Some(link.clone());
    Stats::add(&shared.stats.links_established, 1);
    if Stats::get(&shared.stats.links_established) > 1 {
        Stats::add(&shared.stats.reconnects, 1);
    }
    shared
        .stats
        .peer_node_id
        .store(peer.node_id, Ordering::Relaxed);
    shared.stats.set_link(LinkState::Up);
    shared.stats.set_error(""); // connect errors before this link are history (see the log)
    redis_module::logging::log_notice(format!(
        "rdmasync: link up with node {} ({}), transport {}",
        peer.node_id,
        shared.config.peer_addr(),
        shared.transport
    ));
    let result = receive(shared, &mut stream, &link, offers);
    link.close();
    {
        let mut slot = shared.link.lock();
        if slot
            .as_ref()
            .is_some_and(|l| Arc::ptr_eq(l, &(link.clone() as Arc<dyn RingWriter>)))
        {
            *slot = None;
        }
    }
    shared.queue.wake.wake();
    result
}

/// Socket -> ring -> poller -> apply, returning credit as the head moves.
fn receive(
    shared: &Shared,
    stream: &mut TcpStream,
    link: &TcpLink,
    offers: &Receiver<Offer>,
) -> Result<()> {
    let geometry = RingGeometry::new(shared.config.ring_size)
        .ok_or_else(|| Error::Protocol("invalid local ring size".into()))?;
    // The ring the peer writes into (for TCP, plain memory: nothing is registered).
    let mut ring = vec![0u8; geometry.capacity() as usize];
    let mut poller = Poller::new(geometry);
    let mut credit = CreditPolicy::new(geometry);
    let mut placed = 0u64;
    let mut batches = Vec::new();
    let tc =
        ThreadContext::new().ok_or_else(|| Error::Protocol("no thread-safe context".into()))?;
    let max_write = u32::try_from(geometry.capacity()).unwrap_or(u32::MAX);
    let mut last_rx = Instant::now();
    loop {
        let mut on_idle = || -> Result<()> {
            if shared.stopping() {
                return Err(Error::LinkClosed);
            }
            if !link.is_alive() {
                return Err(Error::LinkClosed);
            }
            if last_rx.elapsed() > DEAD_PEER {
                return Err(Error::Protocol(format!(
                    "peer silent for {} s",
                    DEAD_PEER.as_secs()
                )));
            }
            if !offers.is_empty() {
                return Err(Error::Protocol("replaced by a newer connection".into()));
            }
            link.retry_credit()
        };
        let mut head = [0u8; HEADER_LEN];
        read_full(stream, &mut head, &mut on_idle)?;
        let msg = match MessageHeader::decode(&head, max_write) {
            Ok(m) => m,
            Err(e) => {
                Stats::add(&shared.stats.bad_frames, 1);
                return Err(Error::Protocol(e.to_string()));
            }
        };
        match msg.op {
            Op::Write => {
                let len = u64::from(msg.len);
                let off = geometry.offset(msg.arg);
                if !geometry.write_continues(placed, poller.head(), msg.arg, len) {
                    Stats::add(&shared.stats.bad_frames, 1);
                    return Err(Error::Protocol(format!(
                        "write of {len} bytes at {} outside the ring (placed {placed}, head {})",
                        msg.arg,
                        poller.head()
                    )));
                }
                read_full(stream, &mut ring[off..off + len as usize], &mut on_idle)?;
                placed = msg.arg + len;
                Stats::add(&shared.stats.bytes_received, len);
                if let Err(e) = poller.consume(&ring, placed, &mut batches) {
                    Stats::add(&shared.stats.bad_frames, 1);
                    return Err(e);
                }
                for batch in batches.drain(..) {
                    apply_batch(&tc, shared, &batch)?;
                }
                if let Some(h) = credit.due(poller.head(), poller.head() == placed) {
                    link.return_credit(h)?;
                    credit.returned(h);
                }
            }
            Op::Credit => {
                link.credit_received(msg.arg);
                shared.stats.ring_credit.store(msg.arg, Ordering::Relaxed);
                shared.queue.wake.wake();
            }
            Op::Keepalive => {}
            Op::Hello => {
                Stats::add(&shared.stats.bad_frames, 1);
                return Err(Error::Protocol("HELLO on an established link".into()));
            }
        }
        last_rx = Instant::now();
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
