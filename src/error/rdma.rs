//! Failures of the RDMA transport: a variant per verbs or rdma_cm call
//! that can fail, and per condition the transport checks.

/// Everything that can fail in the RDMA transport, one variant per call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RdmaError {
    /// `ibv_get_device_list` returned no usable device.
    #[error("no RDMA device: {0}")]
    NoDevice(String),
    /// `ibv_fork_init` failed and the kernel does not copy registered pages
    /// on fork: a BGSAVE child would share pages the NIC reads and writes.
    #[error(
        "ibv_fork_init returned {rc} and the kernel does not copy DMA pages on fork \
         (another library registered memory first?): a fork (BGSAVE) would be unsafe"
    )]
    ForkUnsafe {
        /// What `ibv_fork_init` returned.
        rc: i32,
    },
    /// `mmap` of registered memory failed.
    #[error("mmap")]
    Mmap(#[source] std::io::Error),
    /// `ibv_reg_mr` failed.
    #[error("ibv_reg_mr")]
    RegisterMemory(#[source] std::io::Error),
    /// `ibv_alloc_pd` failed.
    #[error("ibv_alloc_pd")]
    AllocPd(#[source] std::io::Error),
    /// `ibv_create_comp_channel` failed.
    #[error("ibv_create_comp_channel")]
    CreateCompChannel(#[source] std::io::Error),
    /// `ibv_create_cq` failed.
    #[error("ibv_create_cq")]
    CreateCq(#[source] std::io::Error),
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
    #[error("rdma_create_event_channel")]
    CreateEventChannel(#[source] std::io::Error),
    /// `rdma_get_cm_event` failed.
    #[error("rdma_get_cm_event")]
    GetCmEvent(#[source] std::io::Error),
    /// `rdma_create_id` failed.
    #[error("rdma_create_id")]
    CreateId(#[source] std::io::Error),
    /// `rdma_migrate_id` failed.
    #[error("rdma_migrate_id")]
    MigrateId(#[source] std::io::Error),
    /// `rdma_bind_addr` failed.
    #[error("rdma_bind_addr")]
    Bind(#[source] std::io::Error),
    /// `rdma_listen` failed.
    #[error("rdma_listen")]
    Listen(#[source] std::io::Error),
    /// `rdma_resolve_addr` failed.
    #[error("rdma_resolve_addr")]
    ResolveAddr(#[source] std::io::Error),
    /// `rdma_resolve_route` failed.
    #[error("rdma_resolve_route")]
    ResolveRoute(#[source] std::io::Error),
    /// `rdma_create_qp` failed.
    #[error("rdma_create_qp")]
    CreateQp(#[source] std::io::Error),
    /// `rdma_connect` failed.
    #[error("rdma_connect")]
    Connect(#[source] std::io::Error),
    /// `rdma_accept` failed.
    #[error("rdma_accept")]
    Accept(#[source] std::io::Error),
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
    /// A completion with an opcode this side never asked for.
    #[error("unexpected completion opcode {0}")]
    UnexpectedCompletion(u32),
    /// The ring or staging region was registered a second time.
    #[error("ring registered twice")]
    RegisteredTwice,
    /// A handshake step ran before the staging region was registered.
    #[error("no staging region before authentication")]
    NoStagingRegion,
    /// No ring was registered before the receive loop started.
    #[error("no ring registered")]
    NoRing,
    /// A receive completion named a slot that was never posted.
    #[error("completion for unknown slot {0}")]
    UnknownSlot(u64),
    /// A message larger than a receive slot (handshake) or half the staging
    /// region (writes, credits).
    #[error("message of {len} bytes exceeds the {limit} bytes it may take")]
    MessageTooLarge {
        /// Its length.
        len: u64,
        /// What it may take.
        limit: u64,
    },
}
