//! Connection lifecycle, for either transport: dial, run the handshake
//! (`handshake`: versions, secret, tie-break, fresh ring), run the link, and
//! reconnect with bounded backoff when it drops. Incoming connections are
//! handled in `accept`. While a link is up its thread runs the transport's
//! receive loop, which hands placed bytes to `Inbound`: poller -> apply,
//! with credit back.

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::converge::clock::first_entry_ahead;
use crate::error::{Error, Result, Violation};
use crate::link::accept::report_failure;
use crate::ops::status::{LinkState, Stats};
use crate::proto::auth::{Side, BINDING_LEN};
use crate::proto::control::{Hello, RemoteRing};
use crate::proto::entry::Batch;
use crate::proto::ring::{CreditPolicy, RingGeometry, RingMemory};
use crate::receive::poller::Poller;
use crate::receive::sequence::{Gap, SequenceCheck};
use crate::shared::apply_queue::{ApplyProducer, FromLink};
use crate::shared::{Shared, TransportKind};
use crate::ship::sender::NumberedLink;
use crate::transport::channel::{self, ChannelReader, ChannelWriter, TlsSession};
use crate::transport::handshake::{self, Watch};
use crate::transport::rdma::{self, RdmaLink};
use crate::transport::tcp::{self, LocalRing, TcpLink, TcpMessages};
use crate::transport::{Delivery, RingWriter};

/// Dial timeout (TCP connect).
const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);
/// First and largest pause between connection attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_millis(1000);
/// The geometry of the ring this node registers for its peer (`ring-size`).
fn local_geometry(shared: &Shared) -> Result<RingGeometry> {
    RingGeometry::new(shared.config.ring_size).ok_or(Error::InvalidRingSize {
        size: shared.config.ring_size,
    })
}

pub use crate::transport::IDLE_TICK;
/// The peer is declared dead after this long without a message (it sends a
/// keepalive after a second of silence).
pub const DEAD_PEER: Duration = Duration::from_secs(5);

/// A connection whose handshake is done: authenticated, kept by the
/// tie-break, its fresh ring registered.
pub enum Conn {
    /// A TCP connection (plain or TLS) and the ring its peer writes into.
    Tcp {
        /// Reading half.
        reader: ChannelReader,
        /// Writing half.
        writer: ChannelWriter,
        /// For shutdown.
        control: TcpStream,
        /// Our ring for this connection.
        ring: LocalRing,
    },
    /// An RDMA connection (its sending half; the endpoint lives inside).
    Rdma(Arc<RdmaLink>),
}

/// A running link: the typed halves the receive loop needs.
enum Active {
    Tcp(ChannelReader, Arc<TcpLink>, LocalRing),
    Rdma(Arc<RdmaLink>),
}

impl Active {
    /// The link over `conn`, writing into a peer ring of `geometry`.
    fn of(conn: Conn, geometry: RingGeometry) -> Self {
        match conn {
            Conn::Tcp {
                reader,
                writer,
                control,
                ring,
            } => Self::Tcp(
                reader,
                Arc::new(TcpLink::new(writer, control, geometry)),
                ring,
            ),
            Conn::Rdma(link) => Self::Rdma(link),
        }
    }
}

/// A connection the handshake kept, handed to the link thread.
pub struct Offer {
    conn: Conn,
    peer: Hello,
    peer_ring: RemoteRing,
    /// Where it came from (incoming) or went to (dialed).
    pub from: Option<IpAddr>,
}

/// Runs the handshake on a connected TCP socket (TLS first when configured).
/// `host` is the peer as dialed (the dialer checks its certificate against it).
///
/// # Errors
/// [`Error::Handshake`] or socket errors.
pub fn tcp_handshake(
    shared: &Shared,
    mut stream: TcpStream,
    side: Side,
    host: Option<&str>,
    watch: &Watch,
) -> Result<Option<Offer>> {
    let timeout_ms = shared.config.handshake_timeout_ms;
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    let abandoned = || watch.is_abandoned() || shared.stopping();
    tcp::prepare(&stream, Duration::from_millis(timeout_ms))?;
    let (session, binding) = tls_session(shared, &mut stream, side, host, deadline, &abandoned)?;
    let (mut reader, mut writer, control) = channel::split(stream, session)?;
    let geometry = local_geometry(shared)?;
    let mut ring = None;
    let agreed = {
        let mut io = TcpMessages {
            reader: &mut reader,
            writer: &mut writer,
            timeout_ms,
            abandoned: &abandoned,
        };
        let mut register = || {
            let r = LocalRing::new(geometry);
            ring = Some(r);
            Ok(RemoteRing {
                capacity: geometry.capacity(),
                addr: 0,
                rkey: 0,
            })
        };
        handshake::run(
            &mut io,
            &shared.local_now(),
            side,
            binding,
            deadline,
            watch,
            &mut register,
        )?
    };
    let (Some(agreed), Some(ring)) = (agreed, ring) else {
        return Ok(None);
    };
    // The established link writes block (credit bounds them); reads tick.
    writer.socket().set_write_timeout(None)?;
    Ok(Some(Offer {
        conn: Conn::Tcp {
            reader,
            writer,
            control,
            ring,
        },
        peer: agreed.peer,
        peer_ring: agreed.peer_ring,
        from: None,
    }))
}

/// The TLS session (with `tls=yes`) and the channel binding the handshake's
/// proof covers (zeros without TLS).
fn tls_session(
    shared: &Shared,
    stream: &mut TcpStream,
    side: Side,
    host: Option<&str>,
    deadline: Instant,
    abandoned: &dyn Fn() -> bool,
) -> Result<(Option<Arc<TlsSession>>, [u8; BINDING_LEN])> {
    let timeout_ms = shared.config.handshake_timeout_ms;
    let Some(tls) = &shared.tls else {
        return Ok((None, [0; BINDING_LEN]));
    };
    let (session, binding) = match side {
        Side::Dialer => {
            let host = host.unwrap_or_default();
            tls.connect(stream, host, deadline, timeout_ms, abandoned)?
        }
        Side::Acceptor => tls.accept(stream, deadline, timeout_ms, abandoned)?,
    };
    Ok((Some(session), binding))
}

/// Runs the handshake on an established RDMA connection.
///
/// # Errors
/// [`Error::Handshake`] or transport errors.
pub fn rdma_handshake(
    shared: &Shared,
    pending: rdma::Pending,
    side: Side,
    watch: &Watch,
) -> Result<Option<Offer>> {
    let done = pending.handshake(
        &shared.local_now(),
        side,
        shared.config.handshake_timeout_ms,
        watch,
    )?;
    Ok(done.map(|(link, agreed)| Offer {
        conn: Conn::Rdma(link),
        peer: agreed.peer,
        peer_ring: agreed.peer_ring,
        from: None,
    }))
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
    let watch = Watch::default();
    for addr in addrs {
        let attempt = match shared.transport {
            TransportKind::Tcp => TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
                .map_err(|source| Error::Connect {
                    addr: addr.to_string(),
                    source,
                })
                .and_then(|s| tcp_handshake(shared, s, Side::Dialer, Some(&host), &watch)),
            TransportKind::Rdma => {
                let bind = SocketAddr::new(shared.config.bind, 0);
                let src = (!bind.ip().is_unspecified()).then_some(bind);
                rdma::dial(src, addr, shared.config.ring_size, shared.stop.clone())
                    .map_err(Error::from)
                    .and_then(|p| rdma_handshake(shared, p, Side::Dialer, &watch))
            }
        };
        if *shared.peer.read() != (host.clone(), port) {
            // CONFIG SET moved the peer while this dial was in flight: a
            // link to the old address must not come up after the change.
            return Ok(None);
        }
        match attempt {
            Ok(offer) => {
                return Ok(offer.map(|mut o| {
                    o.from = Some(addr.ip());
                    o
                }))
            }
            Err(e @ Error::Handshake { .. }) => {
                report_failure(shared, Some(addr.ip()), "to", &e);
                last = Some(e);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or(Error::Resolve {
        peer,
        source: ErrorKind::NotFound.into(),
    }))
}

/// What the link thread keeps across its links.
struct Links {
    /// Links this thread brought up: the last one's number is its epoch.
    up: u64,
    /// Each link as it comes up, to the sender thread.
    to_sender: Sender<NumberedLink>,
    /// Links' events and batches, to the main thread (only this thread submits).
    to_main: ApplyProducer,
}

/// The link thread: connects, runs the link, reconnects; until unload.
/// Each link that comes up goes to the sender through `to_sender`; its
/// events and batches go to the main thread through `to_main`.
pub fn run_link(
    shared: Arc<Shared>,
    offers: Receiver<Offer>,
    to_sender: Sender<NumberedLink>,
    to_main: ApplyProducer,
) {
    let mut backoff = BACKOFF_MIN;
    let mut dial_error_logged = false;
    let mut links = Links {
        up: 0,
        to_sender,
        to_main,
    };
    while !shared.stopping() {
        shared.stats.set_link(LinkState::Connecting);
        let offer = match offers.try_recv() {
            Ok(offer) => Some(offer),
            Err(_) => dial_logged(&shared, &mut dial_error_logged),
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
        if let Some(ip) = offer.from {
            shared.failures.lock().forget(ip);
        }
        let started = Instant::now();
        let result = run_connection(&shared, offer, &offers, &mut links);
        shared.stats.set_link(LinkState::Connecting);
        if let Err(e) = result {
            if !shared.stopping() {
                let why = e.report();
                redis_module::logging::log_warning(format!("rdmasync: link down: {why}"));
                shared.stats.set_error(format!("link down: {why}"));
            }
        }
        if started.elapsed() > Duration::from_secs(2) {
            backoff = BACKOFF_MIN;
        }
    }
}

/// Dials the peer; a failure is logged once until a link comes up.
fn dial_logged(shared: &Shared, logged: &mut bool) -> Option<Offer> {
    match dial(shared) {
        Ok(offer) => offer,
        Err(e) => {
            if !*logged && !matches!(e, Error::Handshake { .. }) {
                redis_module::logging::log_notice(format!(
                    "rdmasync: cannot reach peer yet ({}); retrying with backoff",
                    e.report()
                ));
                *logged = true;
            }
            shared.stats.set_error(e.report());
            None
        }
    }
}

/// Runs one link until it ends (fails, is replaced, or unload begins); `links` counts it once it is up (its
/// number, 1 for the thread's first, is the epoch the main thread sees)
/// and hands it to the sender first.
fn run_connection(
    shared: &Shared,
    offer: Offer,
    offers: &Receiver<Offer>,
    links: &mut Links,
) -> Result<()> {
    let Offer {
        conn,
        peer,
        peer_ring,
        ..
    } = offer;
    let geometry = RingGeometry::new(peer_ring.capacity).ok_or(Violation::InvalidPeerRing {
        capacity: peer_ring.capacity,
    })?;
    let active = Active::of(conn, geometry);
    let (writer, device): (Arc<dyn RingWriter>, String) = match &active {
        Active::Tcp(_, link, _) => (link.clone(), String::new()),
        Active::Rdma(link) => (link.clone(), link.device().to_owned()),
    };
    shared.stats.ring_tail.store(0, Ordering::Relaxed);
    shared.stats.ring_credit.store(0, Ordering::Relaxed);
    *shared.device.lock() = device.clone();
    *shared.link.lock() = Some(writer.clone());
    links.up += 1;
    let epoch = links.up;
    // The sender thread lives as long as this one (both end at unload).
    let _ = links.to_sender.send((epoch, writer.clone()));
    announce_link_up(shared, &peer, &device, epoch);
    let up = FromLink::LinkUp {
        epoch,
        peer_node: peer.node_id,
        max_frame: geometry.max_frame(),
        peer_rdb: peer.rdb_version,
    };
    let to_main = &links.to_main;
    let result = to_main
        .submit(shared, up)
        .and_then(|()| receive(shared, offers, to_main, active));
    writer.close();
    {
        let mut slot = shared.link.lock();
        if slot.as_ref().is_some_and(|l| Arc::ptr_eq(l, &writer)) {
            *slot = None;
        }
    }
    shared.queue.wake_sender();
    // Unless unloading (the main thread then applies nothing more).
    let _ = to_main.submit(shared, FromLink::LinkDown { epoch });
    result
}

/// Receives over the link until it ends: poller -> apply queue -> credit.
fn receive(
    shared: &Shared,
    offers: &Receiver<Offer>,
    to_main: &ApplyProducer,
    active: Active,
) -> Result<()> {
    let mut inbound = Inbound::new(shared, offers, to_main)?;
    match active {
        Active::Tcp(mut reader, link, mut ring) => {
            tcp::receive(&mut reader, &link, &mut ring, &mut inbound)
        }
        Active::Rdma(link) => rdma::receive(&link, &mut inbound),
    }
}

/// Counts link `epoch`, marks it up and logs who the peer is and how the
/// link runs.
fn announce_link_up(shared: &Shared, peer: &Hello, device: &str, epoch: u64) {
    Stats::add(&shared.stats.links_established, 1);
    Stats::add(&shared.stats.rings_registered, 1);
    if epoch > 1 {
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
    let tls = if shared.tls.is_some() {
        " over TLS"
    } else {
        ""
    };
    redis_module::logging::log_notice(format!(
        "rdmasync: link up with node {} ({}, {}), transport {}{on}{tls}, auth {}",
        peer.node_id,
        shared.peer_addr(),
        peer.server_name(),
        shared.transport.as_str(),
        shared.auth_mode().as_str(),
    ));
    let ours = shared.local.rdb_version;
    if peer.rdb_version != ours && epoch == 1 {
        redis_module::logging::log_notice(format!(
            "rdmasync: the peer's server writes RDB format {}, this one {ours}: values \
             only this server's DUMP writes (streams, module types, hashes with field TTLs, \
             function libraries) cross only towards the newer format (docs/operations.md)",
            peer.rdb_version
        ));
    }
}

/// A batch with an entry stamped further ahead of this node's clock than
/// `max-clock-offset` is not handed on: the link stops with the reason (in
/// the log, `last_error` and `clock_refusals`), so the entry is neither
/// applied nor acknowledged and the peer ships it again on a later link,
/// once the clocks agree.
fn refuse_clock_ahead(shared: &Shared, batch: &Batch) -> Result<()> {
    let bound = shared.config.max_clock_offset_ms;
    let Some((seq, ahead_ms)) = first_entry_ahead(&batch.entries, shared.clock.wall_ms(), bound)
    else {
        return Ok(());
    };
    Stats::add(&shared.stats.clock_refusals, 1);
    Err(Violation::ClockAhead {
        seq,
        ahead_ms,
        max_ms: bound,
    }
    .into())
}

/// The receiving side shared by every transport: poller -> apply -> credit.
struct Inbound<'a> {
    shared: &'a Shared,
    offers: &'a Receiver<Offer>,
    to_main: &'a ApplyProducer,
    poller: Poller,
    credit: CreditPolicy,
    batches: Vec<Batch>,
    /// The peer's sequence numbers on this link.
    sequence: SequenceCheck,
}

impl<'a> Inbound<'a> {
    fn new(
        shared: &'a Shared,
        offers: &'a Receiver<Offer>,
        to_main: &'a ApplyProducer,
    ) -> Result<Self> {
        let geometry = local_geometry(shared)?;
        Ok(Self {
            shared,
            offers,
            to_main,
            poller: Poller::new(geometry),
            credit: CreditPolicy::new(geometry),
            batches: Vec::new(),
            sequence: SequenceCheck::default(),
        })
    }
}

impl Delivery for Inbound<'_> {
    fn placed(&mut self, ring: &dyn RingMemory, placed: u64) -> Result<Option<u64>> {
        if let Err(e) = self.poller.consume(ring, placed, &mut self.batches) {
            self.rejected();
            return Err(e);
        }
        for batch in self.batches.drain(..) {
            if let Err(Gap { expected, got }) = self.sequence.admit(&batch) {
                Stats::add(&self.shared.stats.bad_frames, 1);
                return Err(Violation::SequenceGap { expected, got }.into());
            }
            refuse_clock_ahead(self.shared, &batch)?;
            self.to_main.submit(self.shared, FromLink::Batch(batch))?;
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
            return Err(Error::PeerSilent {
                secs: DEAD_PEER.as_secs(),
            });
        }
        if !self.offers.is_empty() {
            return Err(Error::Replaced);
        }
        Ok(())
    }

    fn idle_credit(&mut self, last_rx: Instant) -> Option<u64> {
        if last_rx.elapsed() < IDLE_TICK {
            return None;
        }
        let due = self.credit.leftover(self.poller.head());
        if let Some(h) = due {
            self.credit.returned(h);
        }
        due
    }

    fn credit(&mut self, head: u64) {
        self.shared.stats.ring_credit.store(head, Ordering::Relaxed);
        self.shared.queue.wake_sender();
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
