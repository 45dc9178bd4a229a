//! The RDMA transport: the only place with FFI to libibverbs/librdmacm
//! (through `rdma-sys`), behind a safe `pub(crate)` API.
//!
//! `cm` connects (rdma_cm with timeouts), `verbs` wraps PD/CQ/channels and
//! posting, `mem` owns page-aligned registered memory, `conn` assembles one
//! connection: the ring the peer writes into (LOCAL_WRITE | REMOTE_WRITE,
//! never REMOTE_READ), pre-posted receives for control messages and
//! WRITE_WITH_IMM notifications, and a staging region for our sends.

mod cm;
pub(crate) mod conn;
mod mem;
mod verbs;

use std::net::SocketAddr;
use std::time::Duration;

pub(crate) use conn::{receive, Pending, RdmaLink};

/// Everything that can fail in the RDMA transport, one variant per call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RdmaError {
    /// `ibv_get_device_list` returned no usable device.
    #[error("no RDMA device: {0}")]
    NoDevice(String),
    /// `mmap` of registered memory failed.
    #[error("mmap: {0}")]
    Mmap(std::io::Error),
    /// `ibv_reg_mr` failed.
    #[error("ibv_reg_mr: {0}")]
    RegisterMemory(std::io::Error),
    /// `ibv_alloc_pd` failed.
    #[error("ibv_alloc_pd: {0}")]
    AllocPd(std::io::Error),
    /// `ibv_create_comp_channel` failed.
    #[error("ibv_create_comp_channel: {0}")]
    CreateCompChannel(std::io::Error),
    /// `ibv_create_cq` failed.
    #[error("ibv_create_cq: {0}")]
    CreateCq(std::io::Error),
    /// `ibv_poll_cq` failed.
    #[error("ibv_poll_cq returned {0}")]
    PollCq(i32),
    /// `ibv_req_notify_cq` failed.
    #[error("ibv_req_notify_cq returned {0}")]
    NotifyCq(i32),
    /// `ibv_post_recv` failed.
    #[error("ibv_post_recv returned {0}")]
    PostRecv(i32),
    /// `ibv_post_send` failed.
    #[error("ibv_post_send returned {0}")]
    PostSend(i32),
    /// A work completion with an error status.
    #[error("work completion error: status {status} (opcode {opcode}, vendor error {vendor})")]
    Completion {
        /// `ibv_wc_status`.
        status: u32,
        /// `ibv_wc_opcode`.
        opcode: u32,
        /// Vendor error.
        vendor: u32,
    },
    /// `rdma_create_event_channel` failed.
    #[error("rdma_create_event_channel: {0}")]
    CreateEventChannel(std::io::Error),
    /// `rdma_get_cm_event` failed.
    #[error("rdma_get_cm_event: {0}")]
    GetCmEvent(std::io::Error),
    /// `rdma_create_id` failed.
    #[error("rdma_create_id: {0}")]
    CreateId(std::io::Error),
    /// `rdma_migrate_id` failed.
    #[error("rdma_migrate_id: {0}")]
    MigrateId(std::io::Error),
    /// `rdma_bind_addr` failed.
    #[error("rdma_bind_addr: {0}")]
    Bind(std::io::Error),
    /// `rdma_listen` failed.
    #[error("rdma_listen: {0}")]
    Listen(std::io::Error),
    /// `rdma_resolve_addr` failed.
    #[error("rdma_resolve_addr: {0}")]
    ResolveAddr(std::io::Error),
    /// `rdma_resolve_route` failed.
    #[error("rdma_resolve_route: {0}")]
    ResolveRoute(std::io::Error),
    /// `rdma_create_qp` failed.
    #[error("rdma_create_qp: {0}")]
    CreateQp(std::io::Error),
    /// `rdma_connect` failed.
    #[error("rdma_connect: {0}")]
    Connect(std::io::Error),
    /// `rdma_accept` failed.
    #[error("rdma_accept: {0}")]
    Accept(std::io::Error),
    /// An unexpected rdma_cm event (rejected, unreachable, disconnected...).
    #[error("{step}: rdma_cm event {event} (status {status})")]
    CmEvent {
        /// The step waiting for an event.
        step: &'static str,
        /// `RDMA_CM_EVENT_*`.
        event: u32,
        /// Its status.
        status: i32,
    },
    /// A step did not finish in time.
    #[error("{0}: timed out")]
    Timeout(&'static str),
    /// The peer sent a control message the protocol does not allow.
    #[error("protocol: {0}")]
    Protocol(String),
}

impl From<RdmaError> for crate::error::Error {
    fn from(e: RdmaError) -> Self {
        crate::error::Error::Protocol(format!("rdma: {e}"))
    }
}

/// Prepares libibverbs for redis-server's fork (BGSAVE, BGREWRITEAOF).
/// Must run before any other verbs call. Returns a line for the log.
pub(crate) fn fork_init() -> String {
    // SAFETY: no preconditions beyond being first, which the caller ensures.
    let rc = unsafe { rdma_sys::ibv_fork_init() };
    if rc == 0 {
        "ibv_fork_init: ok".into()
    } else {
        format!(
            "ibv_fork_init: {} (the kernel's copy-on-fork covers registered memory)",
            std::io::Error::from_raw_os_error(rc)
        )
    }
}

/// Names of RDMA devices with an active port, or why there are none.
///
/// # Errors
/// [`RdmaError::NoDevice`] with the reason.
pub(crate) fn probe() -> Result<Vec<String>, RdmaError> {
    let mut n = 0;
    // SAFETY: `n` receives the count; the list is freed below.
    let list = unsafe { rdma_sys::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Err(RdmaError::NoDevice(format!(
            "ibv_get_device_list: {}",
            std::io::Error::last_os_error()
        )));
    }
    let mut active = Vec::new();
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: `list` holds `n` live device pointers until freed.
        let dev = unsafe { *list.add(i) };
        // SAFETY: `dev` is live; the name is a C string owned by libibverbs.
        let name = unsafe { std::ffi::CStr::from_ptr(rdma_sys::ibv_get_device_name(dev)) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: opening a listed device; closed right after the query.
        let ctx = unsafe { rdma_sys::ibv_open_device(dev) };
        if ctx.is_null() {
            continue;
        }
        // SAFETY: ibv_port_attr is plain old data, filled by the query.
        let mut attr: rdma_sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `ctx` is open; port 1 exists on every device.
        let rc = unsafe { rdma_sys::___ibv_query_port(ctx, 1, &mut attr) };
        if rc == 0 && attr.state == rdma_sys::ibv_port_state::IBV_PORT_ACTIVE {
            active.push(name);
        }
        // SAFETY: closes the context opened above.
        unsafe { rdma_sys::ibv_close_device(ctx) };
    }
    // SAFETY: frees the list returned above, once.
    unsafe { rdma_sys::ibv_free_device_list(list) };
    if active.is_empty() {
        Err(RdmaError::NoDevice(format!(
            "{n} device(s), none with an active port"
        )))
    } else {
        Ok(active)
    }
}

pub(crate) use cm::{abort_waits, waits_aborted};

/// Connect and handshake timeout.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A listening rdma_cm id.
pub(crate) struct Listener {
    id: cm::CmId,
    channel: cm::EventChannel,
}

impl Listener {
    /// Listens on `addr` (`rdma_bind_addr` + `rdma_listen`).
    ///
    /// # Errors
    /// An [`RdmaError`] naming the failing call.
    pub(crate) fn bind(addr: SocketAddr) -> Result<Self, RdmaError> {
        let channel = cm::EventChannel::new()?;
        let id = cm::CmId::new(&channel)?;
        id.listen(addr)?;
        Ok(Self { id, channel })
    }

    /// Waits up to `timeout` for a connection request and takes its id onto
    /// a channel of its own; the caller accepts it ([`Incoming::accept`]),
    /// possibly on another thread.
    ///
    /// # Errors
    /// An [`RdmaError`] from the event channel.
    pub(crate) fn next_request(&self, timeout: Duration) -> Result<Option<Incoming>, RdmaError> {
        let _ = &self.id;
        let Some(ev) = self.channel.next_event(timeout)? else {
            return Ok(None);
        };
        if ev.kind != rdma_sys::rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST {
            return Ok(None);
        }
        let channel = cm::EventChannel::new()?;
        // SAFETY: `ev.id` is the new id of a CONNECT_REQUEST we just acknowledged.
        let id = unsafe { cm::CmId::adopt(ev.id, &channel)? };
        let peer = id.peer_ip();
        Ok(Some(Incoming { id, channel, peer }))
    }
}

/// A connection request taken off the listener, not yet accepted.
pub(crate) struct Incoming {
    // Field order: the id is destroyed before its channel.
    id: cm::CmId,
    channel: cm::EventChannel,
    /// Where it comes from, when known.
    pub(crate) peer: Option<std::net::IpAddr>,
}

impl Incoming {
    /// Sets up the connection's resources and accepts it (`rdma_accept`).
    ///
    /// # Errors
    /// An [`RdmaError`] from any setup step.
    pub(crate) fn accept(self, ring_size: u64) -> Result<Pending, RdmaError> {
        conn::Pending::accept(self.id, self.channel, ring_size)
    }
}

/// Dials `peer` from `bind` (if not the wildcard) and sets up a connection.
///
/// # Errors
/// An [`RdmaError`] from any connection step.
pub(crate) fn dial(
    bind: Option<SocketAddr>,
    peer: SocketAddr,
    ring_size: u64,
) -> Result<Pending, RdmaError> {
    let channel = cm::EventChannel::new()?;
    let id = cm::CmId::new(&channel)?;
    id.resolve(&channel, bind, peer, CONNECT_TIMEOUT)?;
    Pending::connect(id, channel, ring_size)
}
