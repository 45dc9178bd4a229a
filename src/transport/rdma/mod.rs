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

use crate::transport::StopToken;
use std::net::SocketAddr;
use std::time::Duration;

pub(crate) use crate::error::RdmaError;
pub(crate) use conn::{receive, Pending, RdmaLink};

/// Prepares libibverbs for redis-server's fork (BGSAVE, BGREWRITEAOF).
/// Must run before any other verbs call. Returns a line for the log.
///
/// # Errors
/// [`RdmaError::ForkUnsafe`] when a fork would share registered pages.
pub(crate) fn fork_init() -> Result<&'static str, RdmaError> {
    // SAFETY: no preconditions beyond being first, which the caller ensures;
    // `ibv_is_fork_initialized` only reads libibverbs' state.
    let (rc, status) = unsafe {
        (
            rdma_sys::ibv_fork_init(),
            rdma_sys::ibv_is_fork_initialized(),
        )
    };
    fork_verdict(rc, status)
}

/// Whether redis-server may fork with registered memory, from what
/// `ibv_fork_init` returned and `ibv_is_fork_initialized` says. EINVAL from
/// `ibv_fork_init` means memory was registered before it (by another
/// library in the process): libibverbs can no longer mark our pages
/// MADV_DONTFORK, and only a kernel that copies DMA pages on fork
/// (IBV_FORK_UNNEEDED, Linux 5.13+) keeps a BGSAVE child safe.
fn fork_verdict(rc: i32, status: rdma_sys::ibv_fork_status) -> Result<&'static str, RdmaError> {
    match (rc, status) {
        (_, rdma_sys::IBV_FORK_UNNEEDED) => {
            Ok("fork: the kernel copies registered pages for the child")
        }
        (0, rdma_sys::IBV_FORK_ENABLED) => Ok("fork: registered memory is MADV_DONTFORK"),
        (rc, _) => Err(RdmaError::ForkUnsafe { rc }),
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

/// Connect and handshake timeout.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A listening rdma_cm id.
pub(crate) struct Listener {
    /// Holds its event channel, where connection requests arrive.
    id: cm::CmId,
}

impl Listener {
    /// Listens on `addr` (`rdma_bind_addr` + `rdma_listen`). Its waits, and
    /// those of every connection it takes, end when `stop` is set.
    ///
    /// # Errors
    /// An [`RdmaError`] naming the failing call.
    pub(crate) fn bind(addr: SocketAddr, stop: StopToken) -> Result<Self, RdmaError> {
        let id = cm::CmId::new(cm::EventChannel::new(stop)?)?;
        id.listen(addr)?;
        Ok(Self { id })
    }

    /// Waits up to `timeout` for a connection request and takes its id onto
    /// a channel of its own; the caller accepts it ([`Incoming::accept`]),
    /// possibly on another thread.
    ///
    /// # Errors
    /// An [`RdmaError`] from the event channel.
    pub(crate) fn next_request(&self, timeout: Duration) -> Result<Option<Incoming>, RdmaError> {
        let Some(ev) = self.id.channel().next_event(timeout)? else {
            return Ok(None);
        };
        if ev.kind != rdma_sys::rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST {
            return Ok(None);
        }
        let channel = cm::EventChannel::new(self.id.channel().stop_token().clone())?;
        // SAFETY: `ev.id` is the new id of a CONNECT_REQUEST we just acknowledged.
        let id = unsafe { cm::CmId::adopt(ev.id, channel)? };
        let peer = id.peer_ip();
        Ok(Some(Incoming { id, peer }))
    }
}

/// A connection request taken off the listener, not yet accepted.
pub(crate) struct Incoming {
    /// On a channel of its own, which it holds.
    id: cm::CmId,
    /// Where it comes from, when known.
    pub(crate) peer: Option<std::net::IpAddr>,
}

impl Incoming {
    /// Sets up the connection's resources and accepts it (`rdma_accept`).
    ///
    /// # Errors
    /// An [`RdmaError`] from any setup step.
    pub(crate) fn accept(self, ring_size: u64) -> Result<Pending, RdmaError> {
        conn::Pending::accept(self.id, ring_size)
    }
}

/// Dials `peer` from `bind` (if not the wildcard) and sets up a connection
/// whose waits end when `stop` is set.
///
/// # Errors
/// An [`RdmaError`] from any connection step.
pub(crate) fn dial(
    bind: Option<SocketAddr>,
    peer: SocketAddr,
    ring_size: u64,
    stop: StopToken,
) -> Result<Pending, RdmaError> {
    let id = cm::CmId::new(cm::EventChannel::new(stop)?)?;
    id.resolve(bind, peer, CONNECT_TIMEOUT)?;
    Pending::connect(id, ring_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fork_is_allowed_only_where_registered_pages_stay_safe() {
        use rdma_sys::{IBV_FORK_DISABLED, IBV_FORK_ENABLED, IBV_FORK_UNNEEDED};
        assert!(fork_verdict(0, IBV_FORK_ENABLED).is_ok());
        assert!(fork_verdict(0, IBV_FORK_UNNEEDED).is_ok());
        // Too late (memory registered first), but the kernel copies: safe.
        assert!(fork_verdict(libc::EINVAL, IBV_FORK_UNNEEDED).is_ok());
        // Too late and the kernel does not copy: a BGSAVE child would share
        // pages the NIC writes.
        assert!(matches!(
            fork_verdict(libc::EINVAL, IBV_FORK_DISABLED),
            Err(RdmaError::ForkUnsafe { rc }) if rc == libc::EINVAL
        ));
        assert!(fork_verdict(libc::ENOMEM, IBV_FORK_DISABLED).is_err());
        assert!(fork_verdict(0, IBV_FORK_DISABLED).is_err());
    }
}
