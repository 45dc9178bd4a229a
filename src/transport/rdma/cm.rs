//! rdma_cm: event channels, ids, and the connect/accept steps with timeouts.

use std::net::SocketAddr;
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys::{
    ibv_context, ibv_qp, ibv_qp_init_attr, ibv_qp_type, rdma_accept, rdma_ack_cm_event,
    rdma_bind_addr, rdma_cm_event, rdma_cm_event_type, rdma_cm_id, rdma_conn_param, rdma_connect,
    rdma_create_event_channel, rdma_create_id, rdma_create_qp, rdma_destroy_event_channel,
    rdma_destroy_id, rdma_destroy_qp, rdma_disconnect, rdma_event_channel, rdma_get_cm_event,
    rdma_listen, rdma_migrate_id, rdma_port_space, rdma_resolve_addr, rdma_resolve_route,
};

use super::verbs::{CompletionQueue, ProtectionDomain};
use super::RdmaError;
use crate::transport::StopToken;

/// A CM event channel with a non-blocking fd; destroyed on drop. Its waits
/// give up when its stop token is set (unload).
pub struct EventChannel {
    channel: NonNull<rdma_event_channel>,
    stop: StopToken,
}

// SAFETY: an event channel may be read and destroyed from any thread.
unsafe impl Send for EventChannel {}
// SAFETY: through `&self`, `next_event` reads the fd (fixed at creation):
// `rdma_get_cm_event` allocates each event for its caller, who acknowledges
// it once, and the kernel hands each event to one reader, so calls from
// several threads share no memory. Destruction needs the last Arc (Drop).
unsafe impl Sync for EventChannel {}

/// What a CM event said.
#[derive(Debug, Clone, Copy)]
pub struct CmEvent {
    /// `RDMA_CM_EVENT_*`.
    pub kind: rdma_cm_event_type::Type,
    /// Status reported with the event.
    pub status: i32,
    /// The id the event is about (a new id for CONNECT_REQUEST).
    pub id: *mut rdma_cm_id,
}

fn sockaddr_of(addr: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain old data.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let sin = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as u16;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
        }
        SocketAddr::V6(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as u16;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
        }
    }
    ss
}

impl EventChannel {
    /// Creates a channel (`rdma_create_event_channel`) whose waits end when
    /// `stop` is set.
    ///
    /// # Errors
    /// [`RdmaError::CreateEventChannel`].
    pub fn new(stop: StopToken) -> Result<Arc<Self>, RdmaError> {
        // SAFETY: no preconditions; the result is checked.
        let ch = unsafe { rdma_create_event_channel() };
        let channel = NonNull::new(ch)
            .ok_or_else(|| RdmaError::CreateEventChannel(std::io::Error::last_os_error()))?;
        // SAFETY: `channel` is live; fcntl on its fd has no memory effects.
        unsafe {
            let fd = channel.as_ref().fd;
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        Ok(Arc::new(Self { channel, stop }))
    }

    /// The token this channel's waits watch.
    pub fn stop_token(&self) -> &StopToken {
        &self.stop
    }

    /// Whether waits on this channel (and on everything set up from it)
    /// should give up: the module is unloading.
    pub fn stopped(&self) -> bool {
        self.stop.is_stopped()
    }

    /// The raw handle.
    fn as_ptr(&self) -> *mut rdma_event_channel {
        self.channel.as_ptr()
    }

    /// Takes the next event if one arrives within `timeout` (acknowledged before returning).
    ///
    /// # Errors
    /// [`RdmaError::GetCmEvent`] when reading the channel fails.
    pub fn next_event(&self, timeout: Duration) -> Result<Option<CmEvent>, RdmaError> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut ev: *mut rdma_cm_event = ptr::null_mut();
            // SAFETY: the channel is live; the fd is non-blocking.
            let rc = unsafe { rdma_get_cm_event(self.channel.as_ptr(), &mut ev) };
            if rc == 0 && !ev.is_null() {
                // SAFETY: `ev` was just returned by rdma_get_cm_event and is
                // read once, then acknowledged.
                let out = unsafe {
                    CmEvent {
                        kind: (*ev).event,
                        status: (*ev).status,
                        id: (*ev).id,
                    }
                };
                // SAFETY: acknowledges the event we got, exactly once.
                unsafe { rdma_ack_cm_event(ev) };
                return Ok(Some(out));
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::WouldBlock {
                return Err(RdmaError::GetCmEvent(err));
            }
            let left = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(50));
            if left.is_zero() || self.stopped() {
                return Ok(None);
            }
            let mut pfd = libc::pollfd {
                // SAFETY: the channel is live.
                fd: unsafe { self.channel.as_ref().fd },
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: `pfd` is valid for the call.
            unsafe { libc::poll(&mut pfd, 1, left.as_millis().max(1) as i32) };
        }
    }

    /// Waits for `want` about any id; any other event is an error.
    ///
    /// # Errors
    /// [`RdmaError::CmEvent`] for an unexpected event, [`RdmaError::Timeout`].
    pub fn expect(
        &self,
        want: rdma_cm_event_type::Type,
        timeout: Duration,
        step: &'static str,
    ) -> Result<CmEvent, RdmaError> {
        match self.next_event(timeout)? {
            Some(ev) if ev.kind == want && ev.status == 0 => Ok(ev),
            Some(ev) => Err(RdmaError::CmEvent {
                step,
                event: ev.kind,
                status: ev.status,
            }),
            None => Err(RdmaError::Timeout(step)),
        }
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: every id on this channel holds an Arc of it, so none is left.
        unsafe { rdma_destroy_event_channel(self.channel.as_ptr()) };
    }
}

/// An rdma_cm id; destroyed on drop, before the event channel it holds.
/// A [`QueuePair`] and the verbs objects made on its device context hold an
/// `Arc` of it.
pub struct CmId {
    id: NonNull<rdma_cm_id>,
    /// The channel its events arrive on (a migrated id holds its new one).
    channel: Arc<EventChannel>,
}

// SAFETY: an rdma_cm id may be used and destroyed from any thread.
unsafe impl Send for CmId {}
// SAFETY: librdmacm's calls on an id are commands written to the rdma_cm
// (ucma) fd, which the kernel serialises per id, so calls on one id from
// several threads share no user memory beyond fields read only. In this crate the id is
// set up (listen, resolve, connect or accept) by the one thread running its
// handshake; once the link is shared, the calls through `&self` are
// `disconnect` (any thread, to end the link) and reads of fields fixed at
// connection (`verbs`, `qp`, `channel`, `peer_ip`, `device_name`).
unsafe impl Sync for CmId {}

impl CmId {
    /// Creates an RC (`RDMA_PS_TCP`) id on `channel`.
    ///
    /// # Errors
    /// [`RdmaError::CreateId`].
    pub fn new(channel: Arc<EventChannel>) -> Result<Self, RdmaError> {
        let mut id = ptr::null_mut();
        // SAFETY: `channel` is live; `id` receives the new id.
        let rc = unsafe {
            rdma_create_id(
                channel.as_ptr(),
                &mut id,
                ptr::null_mut(),
                rdma_port_space::RDMA_PS_TCP,
            )
        };
        if rc != 0 {
            return Err(RdmaError::CreateId(std::io::Error::last_os_error()));
        }
        NonNull::new(id)
            .map(|id| Self { id, channel })
            .ok_or_else(|| RdmaError::CreateId(std::io::Error::other("null id")))
    }

    /// Takes ownership of an id delivered by a CONNECT_REQUEST and moves it
    /// to `channel` (`rdma_migrate_id`).
    ///
    /// # Safety
    /// `id` must come from a CONNECT_REQUEST event and not be owned elsewhere.
    pub unsafe fn adopt(
        id: *mut rdma_cm_id,
        channel: Arc<EventChannel>,
    ) -> Result<Self, RdmaError> {
        let id = NonNull::new(id)
            .ok_or_else(|| RdmaError::CreateId(std::io::Error::other("null id")))?;
        let target = channel.as_ptr();
        // If the move fails, the id is destroyed where it is (on the
        // listener's channel, which outlives it), and `channel` is left with none.
        let me = Self { id, channel };
        // SAFETY: `id` is a live id with all its events acknowledged.
        if unsafe { rdma_migrate_id(id.as_ptr(), target) } != 0 {
            return Err(RdmaError::MigrateId(std::io::Error::last_os_error()));
        }
        Ok(me)
    }

    /// The device context the id is bound to (null before address resolution).
    pub fn verbs(&self) -> *mut ibv_context {
        // SAFETY: the id is live.
        unsafe { self.id.as_ref().verbs }
    }

    /// The QP created on this id (null before `QueuePair::create`).
    fn qp(&self) -> *mut ibv_qp {
        // SAFETY: the id is live.
        unsafe { self.id.as_ref().qp }
    }

    /// The channel the id's events arrive on.
    pub fn channel(&self) -> &EventChannel {
        &self.channel
    }

    /// The remote address of a connected or requesting id.
    pub fn peer_ip(&self) -> Option<std::net::IpAddr> {
        // SAFETY: the id is live; the address is a sockaddr whose family
        // says which struct it is, and both fit the storage rdma_cm keeps.
        unsafe {
            let sa = rdma_sys::rdma_get_peer_addr(self.id.as_ref());
            match i32::from(sa.sa_family) {
                libc::AF_INET => {
                    let sin = &*(sa as *const libc::sockaddr).cast::<libc::sockaddr_in>();
                    Some(std::net::IpAddr::from(sin.sin_addr.s_addr.to_ne_bytes()))
                }
                libc::AF_INET6 => {
                    let sin6 = &*(sa as *const libc::sockaddr).cast::<libc::sockaddr_in6>();
                    Some(std::net::IpAddr::from(sin6.sin6_addr.s6_addr))
                }
                _ => None,
            }
        }
    }

    /// Name of the device the id is bound to.
    pub fn device_name(&self) -> String {
        let ctx = self.verbs();
        if ctx.is_null() {
            return String::new();
        }
        // SAFETY: a bound id's context and device are live; the name is a C string.
        unsafe {
            let name = rdma_sys::ibv_get_device_name((*ctx).device);
            if name.is_null() {
                String::new()
            } else {
                std::ffi::CStr::from_ptr(name)
                    .to_string_lossy()
                    .into_owned()
            }
        }
    }

    /// Binds to `addr` and listens (`rdma_bind_addr`, `rdma_listen`).
    ///
    /// # Errors
    /// [`RdmaError::Bind`], [`RdmaError::Listen`].
    pub fn listen(&self, addr: SocketAddr) -> Result<(), RdmaError> {
        let mut ss = sockaddr_of(addr);
        // SAFETY: the id is live; `ss` is a valid sockaddr for the call.
        if unsafe {
            rdma_bind_addr(
                self.id.as_ptr(),
                (&mut ss as *mut libc::sockaddr_storage).cast(),
            )
        } != 0
        {
            return Err(RdmaError::Bind(std::io::Error::last_os_error()));
        }
        // SAFETY: the id is bound.
        if unsafe { rdma_listen(self.id.as_ptr(), 16) } != 0 {
            return Err(RdmaError::Listen(std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Resolves `dst` (from `src` if given) and its route, waiting on the id's channel.
    ///
    /// # Errors
    /// [`RdmaError::ResolveAddr`], [`RdmaError::ResolveRoute`], CM event errors, timeouts.
    pub fn resolve(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<(), RdmaError> {
        let mut d = sockaddr_of(dst);
        let mut s = src.map(sockaddr_of);
        let sp = s.as_mut().map_or(ptr::null_mut(), |s| {
            (s as *mut libc::sockaddr_storage).cast()
        });
        let ms = timeout.as_millis() as i32;
        // SAFETY: the id is live; the sockaddrs are valid for the call.
        if unsafe {
            rdma_resolve_addr(
                self.id.as_ptr(),
                sp,
                (&mut d as *mut libc::sockaddr_storage).cast(),
                ms,
            )
        } != 0
        {
            return Err(RdmaError::ResolveAddr(std::io::Error::last_os_error()));
        }
        self.channel.expect(
            rdma_cm_event_type::RDMA_CM_EVENT_ADDR_RESOLVED,
            timeout,
            "rdma_resolve_addr",
        )?;
        // SAFETY: the address is resolved.
        if unsafe { rdma_resolve_route(self.id.as_ptr(), ms) } != 0 {
            return Err(RdmaError::ResolveRoute(std::io::Error::last_os_error()));
        }
        self.channel.expect(
            rdma_cm_event_type::RDMA_CM_EVENT_ROUTE_RESOLVED,
            timeout,
            "rdma_resolve_route",
        )?;
        Ok(())
    }

    fn conn_param() -> rdma_conn_param {
        // SAFETY: rdma_conn_param is plain old data.
        let mut p: rdma_conn_param = unsafe { std::mem::zeroed() };
        p.responder_resources = 1;
        p.initiator_depth = 1;
        p.retry_count = 7;
        p.rnr_retry_count = 7; // retry forever while the peer re-posts receives
        p
    }

    /// Connects (dialer side) and waits for ESTABLISHED.
    ///
    /// # Errors
    /// [`RdmaError::Connect`], CM event errors (rejected, unreachable), timeouts.
    pub fn connect(&self, timeout: Duration) -> Result<(), RdmaError> {
        let mut p = Self::conn_param();
        // SAFETY: the id has a route and a QP; `p` is valid for the call.
        if unsafe { rdma_connect(self.id.as_ptr(), &mut p) } != 0 {
            return Err(RdmaError::Connect(std::io::Error::last_os_error()));
        }
        self.channel.expect(
            rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED,
            timeout,
            "rdma_connect",
        )?;
        Ok(())
    }

    /// Accepts (acceptor side) and waits for ESTABLISHED.
    ///
    /// # Errors
    /// [`RdmaError::Accept`], CM event errors, timeouts.
    pub fn accept(&self, timeout: Duration) -> Result<(), RdmaError> {
        let mut p = Self::conn_param();
        // SAFETY: the id came from a CONNECT_REQUEST and has a QP.
        if unsafe { rdma_accept(self.id.as_ptr(), &mut p) } != 0 {
            return Err(RdmaError::Accept(std::io::Error::last_os_error()));
        }
        self.channel.expect(
            rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED,
            timeout,
            "rdma_accept",
        )?;
        Ok(())
    }

    /// Starts a disconnect; the QP moves to error and outstanding work flushes.
    pub fn disconnect(&self) {
        // SAFETY: the id is live; disconnecting twice is harmless (EINVAL).
        unsafe { rdma_disconnect(self.id.as_ptr()) };
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: the id is live and all its events were acknowledged; its QP
        // is gone (a `QueuePair` holds an Arc of the id), as rdma_destroy_id
        // requires; the channel it holds is destroyed after it.
        unsafe { rdma_destroy_id(self.id.as_ptr()) };
    }
}

/// The RC queue pair of an id (`rdma_create_qp`), destroyed on drop before
/// the id, the CQs and the PD it holds.
pub struct QueuePair {
    id: Arc<CmId>,
    _send_cq: Arc<CompletionQueue>,
    _recv_cq: Arc<CompletionQueue>,
    _pd: Arc<ProtectionDomain>,
}

/// The queues' depths and scatter lists of a [`QueuePair`].
#[derive(Debug, Clone, Copy)]
pub struct QueueDepths {
    /// Send work requests outstanding at most.
    pub send: u32,
    /// Receive work requests posted at most.
    pub recv: u32,
}

impl QueuePair {
    /// Creates an RC QP on `id` with one scatter element per request and
    /// no implicit signalling.
    ///
    /// # Errors
    /// [`RdmaError::CreateQp`].
    pub fn create(
        id: Arc<CmId>,
        pd: Arc<ProtectionDomain>,
        send_cq: Arc<CompletionQueue>,
        recv_cq: Arc<CompletionQueue>,
        depths: QueueDepths,
    ) -> Result<Self, RdmaError> {
        // SAFETY: ibv_qp_init_attr is plain old data; fields set below.
        let mut attr: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        attr.send_cq = send_cq.as_ptr();
        attr.recv_cq = recv_cq.as_ptr();
        attr.cap.max_send_wr = depths.send;
        attr.cap.max_recv_wr = depths.recv;
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = 1;
        attr.qp_type = ibv_qp_type::IBV_QPT_RC;
        attr.sq_sig_all = 0;
        // SAFETY: the id, PD and CQs are live, and the QP holds an Arc of
        // each, so they outlive it.
        if unsafe { rdma_create_qp(id.id.as_ptr(), pd.as_ptr(), &mut attr) } != 0 {
            return Err(RdmaError::CreateQp(std::io::Error::last_os_error()));
        }
        Ok(Self {
            id,
            _send_cq: send_cq,
            _recv_cq: recv_cq,
            _pd: pd,
        })
    }

    /// The raw handle, for posting.
    pub fn as_ptr(&self) -> *mut ibv_qp {
        self.id.qp()
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: the QP was created on this live id and is destroyed once,
        // while the CQs and PD it uses are still held.
        unsafe { rdma_destroy_qp(self.id.id.as_ptr()) };
    }
}
