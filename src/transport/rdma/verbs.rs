//! Verbs objects (protection domain, completion channel and queues) as RAII
//! wrappers, plus posting and polling. Each wrapper holds an `Arc` of what it
//! depends on, so destruction always runs in dependency order.

use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::time::Duration;

use rdma_sys::{
    ibv_ack_cq_events, ibv_alloc_pd, ibv_comp_channel, ibv_context, ibv_cq,
    ibv_create_comp_channel, ibv_create_cq, ibv_dealloc_pd, ibv_destroy_comp_channel,
    ibv_destroy_cq, ibv_get_cq_event, ibv_pd, ibv_poll_cq, ibv_post_recv, ibv_post_send, ibv_qp,
    ibv_recv_wr, ibv_req_notify_cq, ibv_send_flags, ibv_send_wr, ibv_sge, ibv_wc, ibv_wr_opcode,
};

use super::cm::CmId;
use super::RdmaError;

fn log_teardown(what: &str, rc: i32) {
    if rc != 0 {
        redis_module::logging::log_warning(format!("rdmasync: {what} failed: {rc}"));
    }
}

/// The device context of a bound rdma_cm id, for allocating on it.
/// librdmacm owns the context and frees a hot-removed device's with the
/// last id bound to it, so what is allocated on it holds an `Arc` of the id.
fn device_context(id: &CmId) -> Result<*mut ibv_context, RdmaError> {
    let ctx = id.verbs();
    if ctx.is_null() {
        return Err(RdmaError::NoDevice(
            "rdma_cm id is not bound to a device".into(),
        ));
    }
    Ok(ctx)
}

/// A protection domain on the device context of an rdma_cm id.
pub struct ProtectionDomain {
    pd: NonNull<ibv_pd>,
    /// The id whose device context it is allocated on.
    _device: Arc<CmId>,
}

// SAFETY: a PD may be used and deallocated from any thread (libibverbs
// keeps no per-thread state for it).
unsafe impl Send for ProtectionDomain {}
// SAFETY: `&self` only hands out the handle, which libibverbs lets several
// threads use at once (ibv_reg_mr, ibv_create_qp take the device's locks);
// deallocation needs the last Arc (Drop).
unsafe impl Sync for ProtectionDomain {}

impl ProtectionDomain {
    /// Allocates a protection domain on `device`'s context (`ibv_alloc_pd`).
    ///
    /// # Errors
    /// [`RdmaError::NoDevice`] for an unbound id, [`RdmaError::AllocPd`].
    pub fn new(device: &Arc<CmId>) -> Result<Arc<Self>, RdmaError> {
        let context = device_context(device)?;
        // SAFETY: `context` is live while `device` is, which the PD holds.
        let pd = unsafe { ibv_alloc_pd(context) };
        NonNull::new(pd)
            .map(|pd| {
                Arc::new(Self {
                    pd,
                    _device: device.clone(),
                })
            })
            .ok_or_else(|| RdmaError::AllocPd(std::io::Error::last_os_error()))
    }

    /// The raw handle.
    pub fn as_ptr(&self) -> *mut ibv_pd {
        self.pd.as_ptr()
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        // SAFETY: every MR and QP holding this PD holds an Arc of it, so none is left.
        log_teardown("ibv_dealloc_pd", unsafe {
            ibv_dealloc_pd(self.pd.as_ptr())
        });
    }
}

/// A completion channel: a file descriptor that becomes readable when a CQ
/// armed with `req_notify` gets a completion.
pub struct CompletionChannel {
    channel: NonNull<ibv_comp_channel>,
    /// The id whose device context it is created on.
    _device: Arc<CmId>,
}

// SAFETY: a completion channel may be used and destroyed from any thread.
unsafe impl Send for CompletionChannel {}
// SAFETY: `&self` reads only the fd, fixed at creation; waiting on it is a
// poll and read of that fd (`ibv_get_cq_event`), which the kernel serialises
// between threads, each event going to one reader. `conn` has one thread
// wait on it so that no event is taken by another.
unsafe impl Sync for CompletionChannel {}

impl CompletionChannel {
    /// Creates a completion channel with a non-blocking fd on `device`'s context.
    ///
    /// # Errors
    /// [`RdmaError::NoDevice`] for an unbound id, [`RdmaError::CreateCompChannel`].
    pub fn new(device: &Arc<CmId>) -> Result<Arc<Self>, RdmaError> {
        let context = device_context(device)?;
        // SAFETY: `context` is live while `device` is, which the channel holds.
        let ch = unsafe { ibv_create_comp_channel(context) };
        let channel = NonNull::new(ch)
            .ok_or_else(|| RdmaError::CreateCompChannel(std::io::Error::last_os_error()))?;
        // SAFETY: `channel` is live; fcntl on its fd has no memory effects.
        unsafe {
            let fd = channel.as_ref().fd;
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        Ok(Arc::new(Self {
            channel,
            _device: device.clone(),
        }))
    }

    fn fd(&self) -> i32 {
        // SAFETY: the channel is live until drop.
        unsafe { self.channel.as_ref().fd }
    }
}

impl Drop for CompletionChannel {
    fn drop(&mut self) {
        // SAFETY: every CQ using the channel holds an Arc of it, so none is left.
        log_teardown("ibv_destroy_comp_channel", unsafe {
            ibv_destroy_comp_channel(self.channel.as_ptr())
        });
    }
}

/// A completion queue, optionally attached to a completion channel.
pub struct CompletionQueue {
    cq: NonNull<ibv_cq>,
    channel: Option<Arc<CompletionChannel>>,
    /// The id whose device context it is created on.
    _device: Arc<CmId>,
}

// SAFETY: a CQ may be polled, armed and destroyed from any thread.
unsafe impl Send for CompletionQueue {}
// SAFETY: `ibv_poll_cq` and `ibv_req_notify_cq` on one CQ from several
// threads are memory-safe: the providers serialise them with the CQ's own
// lock, which they skip only for a CQ created single-threaded
// (IBV_CREATE_CQ_ATTR_SINGLE_THREADED through ibv_create_cq_ex), and this
// crate creates CQs with plain `ibv_create_cq`. `conn` still has one thread
// poll each CQ (the send CQ under the sender's lock, the receive CQ on the
// link thread) so that completions are not split between threads.
unsafe impl Sync for CompletionQueue {}

impl CompletionQueue {
    /// Creates a CQ of `entries` entries on `device`'s context, reporting
    /// to `channel` if given.
    ///
    /// # Errors
    /// [`RdmaError::NoDevice`] for an unbound id, [`RdmaError::CreateCq`].
    pub fn new(
        device: &Arc<CmId>,
        entries: i32,
        channel: Option<Arc<CompletionChannel>>,
    ) -> Result<Arc<Self>, RdmaError> {
        let context = device_context(device)?;
        let ch = channel
            .as_ref()
            .map_or(ptr::null_mut(), |c| c.channel.as_ptr());
        // SAFETY: `context` is live while `device` is, which the CQ holds;
        // `ch` is null or a live channel, which the CQ holds too.
        let cq = unsafe { ibv_create_cq(context, entries, ptr::null_mut(), ch, 0) };
        let cq =
            NonNull::new(cq).ok_or_else(|| RdmaError::CreateCq(std::io::Error::last_os_error()))?;
        Ok(Arc::new(Self {
            cq,
            channel,
            _device: device.clone(),
        }))
    }

    /// The raw handle.
    pub fn as_ptr(&self) -> *mut ibv_cq {
        self.cq.as_ptr()
    }

    /// Polls up to `wcs.len()` completions; returns how many.
    ///
    /// # Errors
    /// [`RdmaError::PollCq`] when the provider reports an error.
    pub fn poll(&self, wcs: &mut [ibv_wc]) -> Result<usize, RdmaError> {
        // SAFETY: `cq` is live and `wcs` has room for `len` entries.
        let n = unsafe { ibv_poll_cq(self.cq.as_ptr(), wcs.len() as i32, wcs.as_mut_ptr()) };
        usize::try_from(n).map_err(|_| RdmaError::PollCq(n))
    }

    /// Asks for an event on the next completion (`ibv_req_notify_cq`).
    /// Poll once more after arming: a completion that arrived just before
    /// raises no event.
    ///
    /// # Errors
    /// [`RdmaError::NotifyCq`] when arming fails.
    pub fn arm(&self) -> Result<(), RdmaError> {
        // SAFETY: `cq` is live.
        let rc = unsafe { ibv_req_notify_cq(self.cq.as_ptr(), 0) };
        if rc == 0 {
            Ok(())
        } else {
            Err(RdmaError::NotifyCq(rc))
        }
    }

    /// Sleeps up to `timeout` on the completion channel of an armed CQ and
    /// acknowledges the event. Returns whether one arrived.
    pub fn wait(&self, timeout: Duration) -> bool {
        let Some(channel) = &self.channel else {
            std::thread::sleep(timeout);
            return false;
        };
        let mut pfd = libc::pollfd {
            fd: channel.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pfd` is a valid pollfd for the duration of the call.
        let ready = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) };
        if ready <= 0 {
            return false;
        }
        let mut cq = ptr::null_mut();
        let mut ctx = ptr::null_mut();
        // SAFETY: the fd is readable, so ibv_get_cq_event returns at once with
        // our CQ, whose event we acknowledge right away.
        unsafe {
            if ibv_get_cq_event(channel.channel.as_ptr(), &mut cq, &mut ctx) == 0 {
                ibv_ack_cq_events(cq, 1);
            }
        }
        true
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: a QP using this CQ holds an Arc of it (`cm::QueuePair`), so
        // none is left, and all events were acknowledged.
        log_teardown("ibv_destroy_cq", unsafe {
            ibv_destroy_cq(self.cq.as_ptr())
        });
    }
}

/// An empty work completion to poll into.
pub fn empty_wc() -> ibv_wc {
    // SAFETY: ibv_wc is plain old data; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// Posts one receive of `len` bytes at `addr` (registered with `lkey`).
///
/// # Safety
/// `qp` must be live and the buffer must stay registered and unused by
/// anything else until the receive completes or the QP is destroyed.
pub unsafe fn post_recv(
    qp: *mut ibv_qp,
    wr_id: u64,
    addr: u64,
    len: u32,
    lkey: u32,
) -> Result<(), RdmaError> {
    let mut sge = ibv_sge {
        addr,
        length: len,
        lkey,
    };
    // SAFETY: ibv_recv_wr is plain old data; the fields we need are set below.
    let mut wr: ibv_recv_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = wr_id;
    wr.sg_list = &mut sge;
    wr.num_sge = 1;
    let mut bad = ptr::null_mut();
    // SAFETY: the caller guarantees `qp` and the buffer; `wr` and `sge` live
    // for the call, which copies them.
    let rc = unsafe { ibv_post_recv(qp, &mut wr, &mut bad) };
    if rc == 0 {
        Ok(())
    } else {
        Err(RdmaError::PostRecv(rc))
    }
}

/// What a send work request does.
#[derive(Debug, Clone, Copy)]
pub enum SendKind {
    /// A two-sided SEND (control message).
    Send,
    /// RDMA WRITE into `remote_addr`/`rkey` with 32-bit immediate data.
    WriteWithImm {
        /// Peer virtual address.
        remote_addr: u64,
        /// Peer rkey.
        rkey: u32,
        /// Immediate data (host order; sent big-endian).
        imm: u32,
    },
}

/// Posts one send work request of `len` bytes from `addr` (registered with `lkey`).
///
/// # Safety
/// `qp` must be live and the buffer must stay registered and unchanged until
/// a completion covering this request is polled.
pub unsafe fn post_send(
    qp: *mut ibv_qp,
    wr_id: u64,
    kind: SendKind,
    (addr, len, lkey): (u64, u32, u32),
    signaled: bool,
) -> Result<(), RdmaError> {
    let mut sge = ibv_sge {
        addr,
        length: len,
        lkey,
    };
    // SAFETY: ibv_send_wr is plain old data; the fields we need are set below.
    let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = wr_id;
    wr.sg_list = &mut sge;
    wr.num_sge = 1;
    wr.send_flags = if signaled {
        ibv_send_flags::IBV_SEND_SIGNALED.0
    } else {
        0
    };
    match kind {
        SendKind::Send => wr.opcode = ibv_wr_opcode::IBV_WR_SEND,
        SendKind::WriteWithImm {
            remote_addr,
            rkey,
            imm,
        } => {
            wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
            wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            wr.wr.rdma.remote_addr = remote_addr;
            wr.wr.rdma.rkey = rkey;
        }
    }
    let mut bad = ptr::null_mut();
    // SAFETY: the caller guarantees `qp` and the buffer; `wr` and `sge` live
    // for the call, which copies them.
    let rc = unsafe { ibv_post_send(qp, &mut wr, &mut bad) };
    if rc == 0 {
        Ok(())
    } else {
        Err(RdmaError::PostSend(rc))
    }
}
