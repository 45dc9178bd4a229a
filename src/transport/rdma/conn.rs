//! One RDMA connection: its verbs resources (`Endpoint`), the sending half
//! (`RdmaLink`, a `RingWriter` posting WRITE_WITH_IMM into the peer's ring)
//! and the receive loop (completions -> placed position -> poller -> apply).

use std::collections::VecDeque;
use std::mem::ManuallyDrop;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdma_sys::{ibv_access_flags, ibv_wc, ibv_wc_opcode, ibv_wc_status};

use super::cm::{CmId, QueueDepths, QueuePair};
use super::mem::{MemoryRegion, MmapRegion};
use super::verbs::{self, CompletionChannel, CompletionQueue, ProtectionDomain, SendKind};
use super::{RdmaError, CONNECT_TIMEOUT};
use crate::error::{report, Error, HandshakeFailure, Result, Violation};
use crate::ops::status::RingGuard;
use crate::proto::auth::Side;
use crate::proto::control::{MessageHeader, Op, RemoteRing, HEADER_LEN, MAX_CONTROL_LEN};
use crate::proto::handshake::{decode_header, Local};
use crate::proto::ring::{RingGeometry, RingMemory};
use crate::transport::handshake::{self, Agreed, MessageIo, Watch};
use crate::transport::{credit_message, keepalive_message, Delivery, LinkFlags, RingWriter};

/// Receives pre-posted for control messages and write notifications.
const RECV_SLOTS: usize = 256;
/// Bytes per receive slot: the largest control message, rounded up.
const SLOT_BYTES: usize = 256;
const _: () = assert!(
    SLOT_BYTES >= HEADER_LEN,
    "a receive slot holds a message header"
);

const _: () = assert!(SLOT_BYTES >= MAX_CONTROL_LEN);
/// Send queue depth.
const SEND_WRS: usize = 128;
/// Registered staging memory for outgoing bytes (registered after authentication).
const STAGING_BYTES: u64 = 4 << 20;
/// Empty polls before the receiver arms the CQ and sleeps.
const SPIN_POLLS: u32 = 2000;
/// Work request ids of handshake sends (each waited for before the next).
const HANDSHAKE_WR: u64 = u64::MAX - 1;

/// The message header at the start of a receive slot.
fn slot_header(slot: &[u8; SLOT_BYTES]) -> &[u8; HEADER_LEN] {
    // The fallback is never taken: a slot is longer than a header (asserted above).
    slot.first_chunk().unwrap_or(&[0; HEADER_LEN])
}

/// Verbs resources of one connection. Each object holds an `Arc` of what
/// it depends on (the QP its id, CQs and PD; memory regions the PD; CQs
/// their channel; all of them the id whose device context they use; the
/// id its event channel), so they are released in dependency order
/// whatever the order of the fields. The one order no `Arc` expresses, the
/// QP before the memory its posted requests point into, is `Drop`'s.
///
/// Before authentication a connection holds only receive slots and a small
/// send buffer: the ring (the only memory the peer may write) and the
/// staging region are registered once the peer has proven the secret.
pub(crate) struct Endpoint {
    /// Destroyed first, by `Drop`, before the memory its requests point into.
    qp: ManuallyDrop<QueuePair>,
    send_cq: Arc<CompletionQueue>,
    recv_cq: Arc<CompletionQueue>,
    /// The ring the peer writes into, and its count in `rings_live`.
    ring: OnceLock<(MemoryRegion, RingGuard)>,
    staging: OnceLock<MemoryRegion>,
    slots: MemoryRegion,
    /// Handshake messages are copied here and sent one at a time.
    handshake: MemoryRegion,
    pd: Arc<ProtectionDomain>,
    id: Arc<CmId>,
    device: String,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // SAFETY: `qp` is dropped here once and never used again (the other
        // fields drop after this body). Destroying the QP first ends every
        // request it had posted before the memory regions they point into
        // are deregistered and unmapped.
        unsafe { ManuallyDrop::drop(&mut self.qp) };
    }
}

impl Endpoint {
    fn build(id: CmId) -> Result<Self, RdmaError> {
        let id = Arc::new(id);
        let pd = ProtectionDomain::new(&id)?;
        let comp = CompletionChannel::new(&id)?;
        let recv_cq = CompletionQueue::new(&id, (RECV_SLOTS * 2) as i32, Some(comp))?;
        let send_cq = CompletionQueue::new(&id, (SEND_WRS * 2) as i32, None)?;
        let local = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        let slots = MemoryRegion::register(&pd, MmapRegion::new(RECV_SLOTS * SLOT_BYTES)?, local)?;
        let handshake = MemoryRegion::register(&pd, MmapRegion::new(SLOT_BYTES)?, local)?;
        let depths = QueueDepths {
            send: SEND_WRS as u32,
            recv: RECV_SLOTS as u32,
        };
        let qp = QueuePair::create(
            id.clone(),
            pd.clone(),
            send_cq.clone(),
            recv_cq.clone(),
            depths,
        )?;
        let device = id.device_name();
        let ep = Self {
            qp: ManuallyDrop::new(qp),
            send_cq,
            recv_cq,
            ring: OnceLock::new(),
            staging: OnceLock::new(),
            slots,
            handshake,
            pd,
            id,
            device,
        };
        for slot in 0..RECV_SLOTS {
            ep.post_slot(slot as u64)?;
        }
        Ok(ep)
    }

    /// Registers a fresh ring (LOCAL_WRITE | REMOTE_WRITE, never REMOTE_READ)
    /// and the staging region: only for an authenticated peer.
    fn register_ring(&self, ring_size: u64) -> Result<RemoteRing, RdmaError> {
        let remote_write = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        let local = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        let staging =
            MemoryRegion::register(&self.pd, MmapRegion::new(STAGING_BYTES as usize)?, local)?;
        let ring =
            MemoryRegion::register(&self.pd, MmapRegion::new(ring_size as usize)?, remote_write)?;
        let announced = RemoteRing {
            capacity: ring.len() as u64,
            addr: ring.addr(),
            rkey: ring.rkey(),
        };
        if self.ring.set((ring, RingGuard::new())).is_err() || self.staging.set(staging).is_err() {
            return Err(RdmaError::RegisteredTwice);
        }
        Ok(announced)
    }

    fn staging(&self) -> Result<&MemoryRegion, RdmaError> {
        self.staging.get().ok_or(RdmaError::NoStagingRegion)
    }

    fn post_slot(&self, slot: u64) -> Result<(), RdmaError> {
        let addr = self.slots.addr() + slot * SLOT_BYTES as u64;
        // SAFETY: the slot lies inside `slots`, registered and owned by this
        // endpoint; it is only re-posted after its previous completion.
        unsafe {
            verbs::post_recv(
                self.qp.as_ptr(),
                slot,
                addr,
                SLOT_BYTES as u32,
                self.slots.lkey(),
            )
        }
    }

    fn slot_bytes(&self, slot: u64) -> Result<[u8; SLOT_BYTES], RdmaError> {
        let slot = usize::try_from(slot)
            .ok()
            .filter(|s| *s < RECV_SLOTS)
            .ok_or(RdmaError::UnknownSlot(slot))?;
        let mut out = [0u8; SLOT_BYTES];
        // SAFETY: the slot's receive completed, so the NIC no longer writes it
        // until we re-post it; the range is inside `slots`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.slots.as_ptr().add(slot * SLOT_BYTES),
                out.as_mut_ptr(),
                SLOT_BYTES,
            );
        }
        Ok(out)
    }

    /// The ring the peer writes into (empty before authentication). The
    /// poller only copies bytes out of it: an honest peer's NIC writes only
    /// between what we were told is placed and `head + capacity`, but any
    /// authenticated peer may write anywhere in it at any time.
    fn ring(&self) -> &dyn RingMemory {
        match self.ring.get() {
            Some((mr, _)) => mr,
            None => {
                const UNREGISTERED: &Vec<u8> = &Vec::new();
                UNREGISTERED
            }
        }
    }

    /// Sends one handshake message and waits for its completion.
    fn send_handshake(&self, msg: &[u8], deadline: Instant) -> Result<(), RdmaError> {
        if msg.len() > SLOT_BYTES {
            return Err(RdmaError::MessageTooLarge {
                len: msg.len() as u64,
                limit: SLOT_BYTES as u64,
            });
        }
        // SAFETY: the region is ours and no send is outstanding on it: the
        // previous one was waited for below.
        unsafe {
            std::ptr::copy_nonoverlapping(msg.as_ptr(), self.handshake.as_ptr(), msg.len());
        }
        let sge = (
            self.handshake.addr(),
            msg.len() as u32,
            self.handshake.lkey(),
        );
        // SAFETY: the QP is live; the bytes stay untouched until the
        // completion below.
        unsafe { verbs::post_send(self.qp.as_ptr(), HANDSHAKE_WR, SendKind::Send, sge, true)? };
        let mut wcs = std::array::from_fn::<_, 1, _>(|_| verbs::empty_wc());
        loop {
            if self.send_cq.poll(&mut wcs)? == 1 {
                return check_status(&wcs[0]);
            }
            if Instant::now() >= deadline || self.id.channel().stopped() {
                // The QP is torn down with the endpoint, which the caller drops.
                return Err(RdmaError::Timeout("handshake send"));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// A connection that is established but has not done its handshake yet.
pub(crate) struct Pending {
    ep: Endpoint,
    ring_size: u64,
}

/// Handshake messages over SEND/RECV on one endpoint.
struct RdmaMessages<'a> {
    ep: &'a Endpoint,
    timeout_ms: u64,
    abandoned: &'a dyn Fn() -> bool,
}

fn incomplete(what: impl std::fmt::Display) -> Error {
    Error::handshake(HandshakeFailure::Incomplete, what.to_string())
}

impl MessageIo for RdmaMessages<'_> {
    fn send(&mut self, msg: &[u8]) -> Result<()> {
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        self.ep
            .send_handshake(msg, deadline)
            .map_err(|e| incomplete(format!("rdma: {}", report(&e))))
    }

    fn recv(&mut self, deadline: Instant) -> Result<(MessageHeader, Vec<u8>)> {
        let ep = self.ep;
        // One completion at a time: what arrives after the handshake (the
        // peer's first writes) stays queued for the receive loop.
        let mut wcs = std::array::from_fn::<_, 1, _>(|_| verbs::empty_wc());
        loop {
            let mut n = ep.recv_cq.poll(&mut wcs)?;
            if n == 0 {
                if Instant::now() >= deadline {
                    return Err(incomplete(format!(
                        "handshake not completed within {} ms",
                        self.timeout_ms
                    )));
                }
                if (self.abandoned)() || ep.id.channel().stopped() {
                    return Err(incomplete("handshake abandoned"));
                }
                if let Some(ev) = ep.id.channel().next_event(Duration::ZERO)? {
                    return Err(incomplete(format!(
                        "rdma_cm event {} during the handshake",
                        ev.kind
                    )));
                }
                ep.recv_cq.arm()?;
                n = ep.recv_cq.poll(&mut wcs)?;
                if n == 0 {
                    ep.recv_cq.wait(Duration::from_millis(10));
                    continue;
                }
            }
            let wc = &wcs[0];
            check_status(wc).map_err(|e| incomplete(format!("rdma: {}", report(&e))))?;
            if wc.opcode != ibv_wc_opcode::IBV_WC_RECV {
                return Err(Error::handshake(
                    HandshakeFailure::Malformed,
                    format!("completion opcode {} during the handshake", wc.opcode),
                ));
            }
            let bytes = ep.slot_bytes(wc.wr_id)?;
            ep.post_slot(wc.wr_id)?;
            let got = (wc.byte_len as usize).min(SLOT_BYTES);
            let header = decode_header(slot_header(&bytes))?;
            let end = HEADER_LEN + header.len as usize;
            if got < HEADER_LEN || end > got {
                return Err(Error::handshake(
                    HandshakeFailure::Malformed,
                    format!("handshake message of {got} bytes, its header says {end}"),
                ));
            }
            return Ok((header, bytes[HEADER_LEN..end].to_vec()));
        }
    }
}

impl Pending {
    /// Dialer side: resources, then `rdma_connect`.
    pub(crate) fn connect(id: CmId, ring_size: u64) -> Result<Self, RdmaError> {
        let ep = Endpoint::build(id)?;
        ep.id.connect(CONNECT_TIMEOUT)?;
        Ok(Self { ep, ring_size })
    }

    /// Acceptor side: resources, then `rdma_accept`.
    pub(crate) fn accept(id: CmId, ring_size: u64) -> Result<Self, RdmaError> {
        let ep = Endpoint::build(id)?;
        ep.id.accept(CONNECT_TIMEOUT)?;
        Ok(Self { ep, ring_size })
    }

    /// Runs the handshake (see `handshake`); registers a fresh ring only
    /// once the peer is authenticated and kept. `Ok(None)`: the tie-break
    /// drops this connection.
    ///
    /// # Errors
    /// [`Error::Handshake`] or transport errors.
    pub(crate) fn handshake(
        self,
        local: &Local,
        side: Side,
        timeout_ms: u64,
        watch: &Watch,
    ) -> Result<Option<(Arc<RdmaLink>, Agreed)>> {
        let Self { ep, ring_size } = self;
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        let abandoned = || watch.is_abandoned();
        let mut io = RdmaMessages {
            ep: &ep,
            timeout_ms,
            abandoned: &abandoned,
        };
        let mut register = || ep.register_ring(ring_size).map_err(Error::from);
        let agreed = handshake::run(
            &mut io,
            local,
            side,
            [0; 32],
            deadline,
            watch,
            &mut register,
        );
        let agreed = match agreed {
            Ok(Some(a)) => a,
            Ok(None) => {
                ep.id.disconnect();
                return Ok(None);
            }
            Err(e) => {
                ep.id.disconnect();
                return Err(e);
            }
        };
        let geometry =
            RingGeometry::new(agreed.peer_ring.capacity).ok_or(Violation::InvalidPeerRing {
                capacity: agreed.peer_ring.capacity,
            })?;
        let link = RdmaLink::new(
            Arc::new(ep),
            geometry,
            agreed.peer_ring.addr,
            agreed.peer_ring.rkey,
        );
        Ok(Some((Arc::new(link), agreed)))
    }
}

fn check_status(wc: &ibv_wc) -> Result<(), RdmaError> {
    if wc.status == ibv_wc_status::IBV_WC_SUCCESS {
        Ok(())
    } else {
        Err(RdmaError::Completion {
            status: wc.status,
            opcode: wc.opcode,
            vendor: wc.vendor_err,
        })
    }
}

/// Sender-side bookkeeping of staging memory and outstanding work requests.
#[derive(Debug, Default)]
struct SendState {
    next_wr: u64,
    /// Staging bytes before this position are free again (a completion covered them).
    staging_head: u64,
    /// Next staging byte to hand out.
    staging_tail: u64,
    /// Posted, not yet known complete: (wr_id, staging end).
    inflight: VecDeque<(u64, u64)>,
    unsignaled: u32,
    unsignaled_bytes: u64,
}

impl SendState {
    /// Reserves `len` contiguous staging bytes; returns their offset.
    fn reserve(&mut self, len: u64) -> Option<u64> {
        let to_end = STAGING_BYTES - self.staging_tail % STAGING_BYTES;
        let skip = if len > to_end { to_end } else { 0 };
        if STAGING_BYTES - (self.staging_tail - self.staging_head) < skip + len {
            return None;
        }
        self.staging_tail += skip;
        let at = self.staging_tail % STAGING_BYTES;
        self.staging_tail += len;
        Some(at)
    }

    /// Signal every 16th request, and always when unsignaled work would pin a
    /// quarter of the staging memory or of the send queue: then a completion
    /// is always on its way when the sender waits for room.
    fn should_signal(&self, len: u64) -> bool {
        self.unsignaled + 1 >= 16
            || self.unsignaled_bytes + len >= STAGING_BYTES / 4
            || self.inflight.len() >= SEND_WRS / 4
    }
}

/// The sending half of an RDMA connection.
pub(crate) struct RdmaLink {
    ep: Arc<Endpoint>,
    send: Mutex<SendState>,
    peer_ring: RingGeometry,
    peer_addr: u64,
    peer_rkey: u32,
    flags: LinkFlags,
}

impl RdmaLink {
    fn new(ep: Arc<Endpoint>, peer_ring: RingGeometry, peer_addr: u64, peer_rkey: u32) -> Self {
        Self {
            ep,
            send: Mutex::new(SendState::default()),
            peer_ring,
            peer_addr,
            peer_rkey,
            flags: LinkFlags::default(),
        }
    }

    /// Name of the device this connection uses.
    pub(crate) fn device(&self) -> &str {
        &self.ep.device
    }

    fn reap(&self, st: &mut SendState) -> Result<(), RdmaError> {
        let mut wcs = std::array::from_fn::<_, 16, _>(|_| verbs::empty_wc());
        loop {
            let n = self.ep.send_cq.poll(&mut wcs)?;
            for wc in &wcs[..n] {
                check_status(wc)?;
                while st.inflight.front().is_some_and(|(id, _)| *id <= wc.wr_id) {
                    if let Some((_, end)) = st.inflight.pop_front() {
                        st.staging_head = end;
                    }
                }
            }
            if n < wcs.len() {
                return Ok(());
            }
        }
    }

    fn post_locked(&self, st: &mut SendState, kind: SendKind, bytes: &[u8]) -> Result<()> {
        let len = bytes.len() as u64;
        if len > STAGING_BYTES / 2 {
            return Err(RdmaError::MessageTooLarge {
                len,
                limit: STAGING_BYTES / 2,
            }
            .into());
        }
        // Wait for completions to free staging or send-queue room for as long
        // as the link lives: the peer may be stalled (its receives run out and
        // our requests retry), which is not a failure; a dead peer is noticed
        // by the receiver (silence, error completion, CM event) and closes us.
        let at = loop {
            self.reap(st)?;
            if st.inflight.len() < SEND_WRS - 1 {
                if let Some(at) = st.reserve(len) {
                    break at;
                }
            }
            if !self.is_alive() {
                return Err(Error::LinkClosed);
            }
            std::thread::sleep(Duration::from_micros(20));
        };
        let staging = self.ep.staging()?;
        // SAFETY: `at..at+len` lies inside `staging` and was just reserved:
        // no posted request still reads it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                staging.as_ptr().add(at as usize),
                bytes.len(),
            );
        }
        let signaled = st.should_signal(len);
        let wr_id = st.next_wr;
        st.next_wr += 1;
        let sge = (staging.addr() + at, len as u32, staging.lkey());
        // SAFETY: the QP is live while `ep` is; the staging bytes stay untouched
        // until a completion covering `wr_id` frees them (see `reap`).
        if let Err(e) = unsafe { verbs::post_send(self.ep.qp.as_ptr(), wr_id, kind, sge, signaled) }
        {
            self.close();
            return Err(e.into());
        }
        st.inflight.push_back((wr_id, st.staging_tail));
        if signaled {
            st.unsignaled = 0;
            st.unsignaled_bytes = 0;
        } else {
            st.unsignaled += 1;
            st.unsignaled_bytes += len;
        }
        self.flags.sent();
        Ok(())
    }

    fn flush_credit(&self, st: &mut SendState) -> Result<()> {
        if let Some(head) = self.flags.take_credit() {
            self.post_locked(st, SendKind::Send, &credit_message(head))?;
        }
        Ok(())
    }

    /// Returns `head` to the peer without waiting on the sender.
    ///
    /// # Errors
    /// Posting errors; the link is then dead.
    pub(crate) fn return_credit(&self, head: u64) -> Result<()> {
        self.flags.queue_credit(head);
        if let Some(mut st) = self.send.try_lock() {
            self.flush_credit(&mut st)?;
        }
        Ok(())
    }
}

impl RingWriter for RdmaLink {
    fn geometry(&self) -> RingGeometry {
        self.peer_ring
    }

    fn post_write(&self, pos: u64, bytes: &[u8]) -> Result<()> {
        let end = pos + bytes.len() as u64;
        let kind = SendKind::WriteWithImm {
            remote_addr: self.peer_addr + self.peer_ring.offset(pos) as u64,
            rkey: self.peer_rkey,
            imm: end as u32,
        };
        let mut st = self.send.lock();
        self.post_locked(&mut st, kind, bytes)?;
        self.flush_credit(&mut st)
    }

    fn credit(&self) -> u64 {
        self.flags.credit()
    }

    fn is_alive(&self) -> bool {
        self.flags.is_alive()
    }

    fn idle_ms(&self) -> u64 {
        self.flags.idle_ms()
    }

    fn send_keepalive(&self) -> Result<()> {
        let mut st = self.send.lock();
        self.post_locked(&mut st, SendKind::Send, &keepalive_message())?;
        self.flush_credit(&mut st)
    }

    fn close(&self) {
        if self.flags.kill() {
            self.ep.id.disconnect();
        }
    }
}

/// The receive loop of one connection: runs until the link ends.
///
/// # Errors
/// Why the link ended.
pub(crate) fn receive(link: &RdmaLink, delivery: &mut dyn Delivery) -> Result<()> {
    let capacity = link.ep.ring().len() as u64;
    let geometry = RingGeometry::new(capacity).ok_or(RdmaError::NoRing)?;
    let mut wcs = std::array::from_fn::<_, 16, _>(|_| verbs::empty_wc());
    let mut placed = 0u64;
    let mut last_rx = Instant::now();
    // Spin briefly after activity (the next write is likely close), then sleep
    // on the completion channel; an idle link does not spin at all.
    let mut spins_left = 0u32;
    loop {
        let n = next_completions(link, delivery, &mut wcs, &mut spins_left, last_rx)?;
        if n == 0 {
            continue;
        }
        spins_left = SPIN_POLLS;
        last_rx = Instant::now();
        for wc in &wcs[..n] {
            check_status(wc)?;
            match wc.opcode {
                ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM => {
                    placed = on_ring_write(link, delivery, wc, geometry, placed)?;
                }
                ibv_wc_opcode::IBV_WC_RECV => on_control_message(link, delivery, wc)?,
                other => return Err(RdmaError::UnexpectedCompletion(other).into()),
            }
        }
    }
}

/// Polls the receive completions into `wcs`: spins while `spins_left`, else
/// does the idle work (liveness, CM events, idle credit), arms the queue
/// and sleeps on its channel for up to one idle tick. Returns how many
/// completions arrived (0: poll again).
fn next_completions(
    link: &RdmaLink,
    delivery: &mut dyn Delivery,
    wcs: &mut [ibv_wc],
    spins_left: &mut u32,
    last_rx: Instant,
) -> Result<usize> {
    let ep = &link.ep;
    let n = ep.recv_cq.poll(wcs)?;
    if n > 0 {
        return Ok(n);
    }
    if *spins_left > 0 {
        *spins_left -= 1;
        std::hint::spin_loop();
        return Ok(0);
    }
    idle_work(link, delivery, last_rx)?;
    ep.recv_cq.arm()?;
    // A completion that landed before arming raised no event: poll again.
    let n = ep.recv_cq.poll(wcs)?;
    if n == 0 {
        ep.recv_cq.wait(crate::transport::IDLE_TICK);
    }
    Ok(n)
}

/// What an idle receiver checks: the link is alive, no CM event ended it,
/// the delivery's idle duties, credit owed to the peer.
fn idle_work(link: &RdmaLink, delivery: &mut dyn Delivery, last_rx: Instant) -> Result<()> {
    if !link.is_alive() {
        return Err(Error::LinkClosed);
    }
    if let Some(ev) = link.ep.id.channel().next_event(Duration::ZERO)? {
        return Err(RdmaError::CmEvent {
            step: "established link",
            event: ev.kind,
            status: ev.status,
        }
        .into());
    }
    delivery.idle(last_rx)?;
    if let Some(head) = delivery.idle_credit(last_rx) {
        link.return_credit(head)?;
    }
    if link.flags.credit_waiting() {
        if let Some(mut st) = link.send.try_lock() {
            link.flush_credit(&mut st)?;
        }
    }
    Ok(())
}

/// A WRITE_WITH_IMM landed in the ring: its immediate says where the bytes
/// placed now end. Returns that end.
fn on_ring_write(
    link: &RdmaLink,
    delivery: &mut dyn Delivery,
    wc: &ibv_wc,
    geometry: RingGeometry,
    placed: u64,
) -> Result<u64> {
    link.ep.post_slot(wc.wr_id)?;
    // SAFETY: for RECV_RDMA_WITH_IMM completions the union holds imm_data.
    let imm = u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data });
    let Some(end) = geometry.imm_write_end(placed, imm, delivery.head()) else {
        delivery.rejected();
        return Err(Violation::ImmediateOutsideRing {
            imm,
            placed,
            head: delivery.head(),
        }
        .into());
    };
    delivery.received(u64::from(wc.byte_len));
    if let Some(head) = delivery.placed(link.ep.ring(), end)? {
        link.return_credit(head)?;
    }
    Ok(end)
}

/// A control message (credit or keepalive) arrived in a receive slot.
fn on_control_message(link: &RdmaLink, delivery: &mut dyn Delivery, wc: &ibv_wc) -> Result<()> {
    let bytes = link.ep.slot_bytes(wc.wr_id)?;
    link.ep.post_slot(wc.wr_id)?;
    if (wc.byte_len as usize) < HEADER_LEN {
        delivery.rejected();
        return Err(Violation::ShortControlMessage { len: wc.byte_len }.into());
    }
    let msg = MessageHeader::decode(slot_header(&bytes), 0).map_err(|e| {
        delivery.rejected();
        Violation::BadControlMessage(e)
    })?;
    match msg.op {
        Op::Credit => {
            link.flags.credit_received(msg.arg);
            delivery.credit(msg.arg);
        }
        Op::Keepalive => {}
        other => {
            delivery.rejected();
            return Err(Violation::UnexpectedMessage {
                op: format!("{other:?}"),
            }
            .into());
        }
    }
    Ok(())
}
