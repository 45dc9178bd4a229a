//! What the threads share: the live state `runtime` builds at load
//! (`Shared`, reached by the C callbacks through `with_shared`) and the
//! typed hand-offs between threads: capture -> sender (`queue`), link ->
//! main thread (`apply_queue`).

pub mod apply_queue;
pub mod queue;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Mutex, RwLock};

use crate::converge::clock::HybridClock;
use crate::ops::config::Config;
use crate::ops::failure_log::FailureLog;
use crate::ops::faults::SenderFaults;
use crate::ops::status::{Identity, LinkState, Stats};
use crate::proto::control::AuthMode;
use crate::proto::handshake::Local;
use crate::shared::apply_queue::ApplyConsumer;
use crate::shared::queue::BatchProducer;
use crate::transport::tls::TlsConfig;
use crate::transport::{RingWriter, StopToken};

/// The transport a running module uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// The ring protocol over TCP.
    Tcp,
    /// One-sided RDMA WRITEs.
    Rdma,
}

impl TransportKind {
    /// The spelling used in `RDMASYNC.STATUS` and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Rdma => "rdma",
        }
    }
}

/// State shared by the Redis callbacks and the module's threads.
pub struct Shared {
    /// Validated configuration.
    pub config: Config,
    /// This node's id.
    pub node_id: u64,
    /// Transport in use.
    pub transport: TransportKind,
    /// RDMA device of the current link (empty over TCP).
    pub device: Mutex<String>,
    /// Counters.
    pub stats: Stats,
    /// Hybrid logical clock stamping captured entries.
    pub clock: HybridClock,
    /// The capture end of the capture -> sender queue (the sender thread
    /// owns the other).
    pub queue: BatchProducer,
    /// The main thread's end of the link thread -> main thread queue
    /// (decoded batches and link events; the link thread owns the other).
    pub apply: ApplyConsumer,
    /// The link up now, so that a peer change or unload can close it. The
    /// sender never reads it: the link thread hands each link to it in
    /// order (`ship::sender::run`'s `links`).
    pub link: Mutex<Option<Arc<dyn RingWriter>>>,
    /// Where the peer is: from the config, changeable with `CONFIG SET`.
    pub peer: RwLock<(String, u16)>,
    /// Stopped once at unload: every thread returns and every handshake and
    /// rdma_cm wait gives up. The RDMA listener's and each connection's
    /// event channels hold copies.
    pub stop: StopToken,
    /// The sender's fault switches (`RDMASYNC.DEBUG HOLD-SENDS`,
    /// `FAIL-NEXT-POST`, `DROP-NEXT-BATCH`).
    pub sender_faults: SenderFaults,
    /// What this node says in its handshake (id, versions, secret).
    pub local: Local,
    /// TLS for the TCP transport, when `tls=yes`.
    pub tls: Option<TlsConfig>,
    /// Handshake failures already logged.
    pub failures: Mutex<FailureLog>,
    /// The sequence number of the last entry queued (main thread only:
    /// the one producer numbers entries as it queues them).
    last_seq: AtomicU64,
}

/// Where this process's sequence numbers start: above any number an earlier
/// run of this node can have used (2^20 per millisecond of wall clock), so
/// that the peer's acknowledgements from before a restart never cover
/// entries sent after it.
fn first_seq() -> u64 {
    crate::ops::status::unix_ms() << 20
}

impl Shared {
    /// The sequence number of the last entry queued. Entries are numbered
    /// when they are queued, one after the other with no gap, so that the
    /// peer can check that nothing it is asked to acknowledge went missing
    /// on the way (`receive::sequence`).
    pub fn last_seq(&self) -> u64 {
        self.last_seq.load(Ordering::Relaxed)
    }

    /// `n` more entries were queued after [`Self::last_seq`].
    pub fn seqs_queued(&self, n: u64) {
        self.last_seq.fetch_add(n, Ordering::Relaxed);
    }

    /// Whether unload has begun.
    pub fn stopping(&self) -> bool {
        self.stop.is_stopped()
    }

    /// The dataset was replaced wholesale (`DEBUG RELOAD`, a full sync from a
    /// master, a load): not replicated as writes; a full sync both ways
    /// follows (see `catchup`).
    pub fn dataset_replaced(&self, discarded: usize) {
        Stats::add(&self.stats.resyncs_needed, 1);
        Stats::add(&self.stats.entries_dropped, discarded as u64);
        redis_module::logging::log_notice(
            "rdmasync: dataset loaded or replaced (startup, DEBUG RELOAD, replica sync): \
             a full sync with the peer follows",
        );
    }

    /// What this node says in a handshake starting now: its identity and
    /// its wall clock at this moment.
    pub fn local_now(&self) -> Local {
        Local {
            wall_ms: self.clock.wall_ms(),
            ..self.local.clone()
        }
    }

    /// How peers are authenticated.
    pub fn auth_mode(&self) -> AuthMode {
        if self.local.secret.is_some() {
            AuthMode::HmacSha256
        } else {
            AuthMode::None
        }
    }

    /// `host:port` of the peer now.
    pub fn peer_addr(&self) -> String {
        let (host, port) = &*self.peer.read();
        if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }
    }

    /// Identity fields of `RDMASYNC.STATUS`.
    pub fn identity(&self) -> Identity {
        Identity {
            node_id: self.node_id,
            peer: self.peer_addr(),
            transport: self.transport.as_str(),
            device: self.device.lock().clone(),
            ring_size: self.config.ring_size,
            auth: self.auth_mode().as_str(),
            tls: self.tls.is_some(),
            clock_ms: self.clock.now_ms(),
        }
    }
}

impl Shared {
    /// The state of a module about to start, its link connecting.
    pub fn new(
        config: Config,
        node_id: u64,
        transport: TransportKind,
        local: Local,
        tls: Option<TlsConfig>,
        queue: BatchProducer,
        apply: ApplyConsumer,
    ) -> Self {
        let shared = Self {
            local,
            tls,
            failures: Mutex::new(FailureLog::default()),
            queue,
            apply,
            peer: RwLock::new((config.peer_host.clone(), config.peer_port)),
            config,
            node_id,
            transport,
            device: Mutex::new(String::new()),
            stats: Stats::default(),
            clock: HybridClock::new(),
            link: Mutex::new(None),
            stop: StopToken::new(),
            sender_faults: SenderFaults::default(),
            last_seq: AtomicU64::new(first_seq()),
        };
        shared.stats.set_link(LinkState::Connecting);
        shared
    }
}

#[cfg(test)]
impl Shared {
    /// A `Shared` with default settings and no threads, for unit tests.
    pub fn for_tests() -> Self {
        let config = crate::ops::config::parse_args(&["peer=127.0.0.1", "port=1"])
            .unwrap_or_else(|e| panic!("test config: {e}"));
        let local = Local {
            node_id: 1,
            rdb_version: 0,
            server: "test".into(),
            secret: config.secret.clone(),
            wall_ms: 0,
            max_clock_offset_ms: config.max_clock_offset_ms,
        };
        let (_, apply) = crate::shared::apply_queue::apply_queue()
            .unwrap_or_else(|e| panic!("test apply queue: {e}"));
        let (queue, _) = crate::shared::queue::batch_queue(config.queue_size);
        Self::new(config, 1, TransportKind::Tcp, local, None, queue, apply)
    }
}

/// The running module: its live state and its threads.
pub struct Live {
    /// The state the threads share.
    pub shared: Arc<Shared>,
    /// The threads `runtime::start` spawned, joined by `runtime::stop`.
    pub threads: Vec<JoinHandle<()>>,
}

/// The one handle the C callbacks need (Redis gives them no context to
/// carry state in): the live state and its threads, while started. Written
/// only by `runtime::start` and `runtime::stop` on the main thread; the
/// callbacks, all on the main thread too, read it.
static LIVE: RwLock<Option<Live>> = RwLock::new(None);

/// Runs `f` on the live state, if the module is started.
pub fn with_shared<R>(f: impl FnOnce(&Arc<Shared>) -> R) -> Option<R> {
    LIVE.read().as_ref().map(|live| f(&live.shared))
}

/// Whether the module's threads run (configs set now are run-time changes).
pub fn is_running() -> bool {
    LIVE.read().is_some()
}

/// Makes `live` the running module (`runtime::start`).
pub fn install(live: Live) {
    *LIVE.write() = Some(live);
}

/// Takes the running module out, for `runtime::stop` to end it.
pub fn uninstall() -> Option<Live> {
    LIVE.write().take()
}
