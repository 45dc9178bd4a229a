//! The module's live state (`Shared`) and its threads: started at load,
//! stopped and joined at unload.

use std::net::{TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Mutex, RwLock};

use crate::converge::clock::{default_node_id, local_ip_towards, HybridClock};
use crate::error::{report, Error, Result};
use crate::link::accept::{self, FailureLog};
use crate::ops::config::{Config, TransportChoice};
use crate::ops::status::{Identity, LinkState, Stats};
use crate::proto::control::AuthMode;
use crate::proto::handshake::Local;
use crate::receive::apply::{self, ApplyQueue};
use crate::redis::server::ServerInfo;
use crate::ship::queue::BatchQueue;
use crate::transport::tls::TlsConfig;
use crate::transport::{rdma, RingWriter};
use crate::{link::session, redis::server, ship::sender};

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
    /// Capture -> sender queue.
    pub queue: BatchQueue,
    /// Link thread -> main thread: decoded batches to apply.
    pub apply: ApplyQueue,
    /// The link the sender writes to, when one is up.
    pub link: Mutex<Option<Arc<dyn RingWriter>>>,
    /// Where the peer is: from the config, changeable with `CONFIG SET`.
    pub peer: RwLock<(String, u16)>,
    /// Set once at unload: every thread returns.
    pub shutdown: AtomicBool,
    /// What this node says in its handshake (id, versions, secret).
    pub local: Local,
    /// TLS for the TCP transport, when `tls=yes`.
    pub tls: Option<TlsConfig>,
    /// Handshake failures already logged.
    pub failures: Mutex<FailureLog>,
    next_seq: AtomicU64,
}

/// Where this process's sequence numbers start: above any number an earlier
/// run of this node can have used (2^20 per millisecond of wall clock), so
/// that the peer's acknowledgements from before a restart never cover
/// entries sent after it.
fn first_seq() -> u64 {
    crate::ops::status::unix_ms() << 20
}

impl Shared {
    /// Next entry sequence number.
    pub fn next_seq(&self) -> u64 {
        self.next_seq.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Whether unload has begun.
    pub fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::Relaxed)
    }

    /// The link currently up, if any.
    pub fn current_link(&self) -> Option<Arc<dyn RingWriter>> {
        self.link.lock().clone()
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
        }
    }
}

#[cfg(test)]
impl Shared {
    /// A `Shared` with default settings and no threads, for unit tests.
    pub fn for_tests() -> Self {
        let config = crate::ops::config::parse_args(&["peer=127.0.0.1", "port=1"])
            .unwrap_or_else(|e| panic!("test config: {e}"));
        Self {
            queue: BatchQueue::new(config.queue_size),
            apply: ApplyQueue::new().unwrap_or_else(|e| panic!("test apply queue: {e}")),
            local: Local {
                node_id: 1,
                rdb_version: 0,
                server: "test".into(),
                secret: config.secret.clone(),
            },
            tls: None,
            failures: Mutex::new(FailureLog::default()),
            config,
            node_id: 1,
            transport: TransportKind::Tcp,
            device: Mutex::new(String::new()),
            stats: Stats::default(),
            clock: HybridClock::new(),
            link: Mutex::new(None),
            peer: RwLock::new(("127.0.0.1".into(), 1)),
            shutdown: AtomicBool::new(false),
            next_seq: AtomicU64::new(first_seq()),
        }
    }
}

struct Runtime {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

/// The one handle the C callbacks need (Redis gives them no context to
/// carry state in): the live state and its threads, while started. Written
/// only by `start` and `stop` on the main thread; the callbacks, all on the
/// main thread too, read it.
static RUNTIME: RwLock<Option<Runtime>> = RwLock::new(None);

/// Runs `f` on the live state, if the module is started.
pub fn with_shared<R>(f: impl FnOnce(&Arc<Shared>) -> R) -> Option<R> {
    RUNTIME.read().as_ref().map(|rt| f(&rt.shared))
}

fn node_id_for(config: &Config) -> u64 {
    if let Some(id) = config.node_id {
        return id;
    }
    let local = (config.peer_host.as_str(), config.peer_port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .and_then(local_ip_towards)
        .unwrap_or(config.bind);
    default_node_id(local, config.listen_port)
}

fn spawn(
    name: &'static str,
    shared: &Arc<Shared>,
    body: impl FnOnce(Arc<Shared>) + Send + 'static,
) -> Result<JoinHandle<()>> {
    let s = shared.clone();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let s2 = s.clone();
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(s))).is_err() {
                s2.stats
                    .set_error(format!("thread {name} panicked; replication stopped"));
                s2.stats.set_link(LinkState::Down);
            }
        })
        .map_err(|source| Error::Spawn { name, source })
}

/// Starts the module's threads. Returns a log line saying what was chosen.
/// `server` describes this server for the handshake.
///
/// # Errors
/// [`Error::Config`] for a transport this build cannot provide or TLS
/// files that do not load, [`Error::Listen`] when the listen port is taken,
/// [`Error::Spawn`].
pub fn start(config: Config, server: ServerInfo) -> Result<String> {
    let (transport, why) = choose_transport(config.transport, config.tls)?;
    let tls = config.tls.then(|| TlsConfig::load(&config)).transpose()?;
    for warning in config.warnings() {
        redis_module::logging::log_warning(format!("rdmasync: {warning}"));
    }
    if server.rdb_version == 0 {
        redis_module::logging::log_warning(
            "rdmasync: cannot tell this server's RDB format (FUNCTION DUMP failed); \
             the handshake will only accept a peer that cannot tell either",
        );
    }
    rdma::abort_waits(false);
    let listen_addr = std::net::SocketAddr::new(config.bind, config.listen_port);
    let listener =
        match transport {
            TransportKind::Tcp => Listener::Tcp(TcpListener::bind(listen_addr).map_err(
                |source| Error::Listen {
                    addr: listen_addr.to_string(),
                    source,
                },
            )?),
            TransportKind::Rdma => {
                Listener::Rdma(rdma::Listener::bind(listen_addr).map_err(|source| {
                    Error::ListenRdma {
                        addr: listen_addr.to_string(),
                        source,
                    }
                })?)
            }
        };
    let node_id = node_id_for(&config);
    let apply = ApplyQueue::new()?;
    let local = Local {
        node_id,
        rdb_version: server.rdb_version,
        server: server.description,
        secret: config.secret.clone(),
    };
    let shared = Arc::new(Shared {
        local,
        tls,
        failures: Mutex::new(FailureLog::default()),
        queue: BatchQueue::new(config.queue_size),
        apply,
        config,
        node_id,
        transport,
        device: Mutex::new(String::new()),
        stats: Stats::default(),
        clock: HybridClock::new(),
        link: Mutex::new(None),
        peer: RwLock::new((String::new(), 0)),
        shutdown: AtomicBool::new(false),
        next_seq: AtomicU64::new(first_seq()),
    });
    *shared.peer.write() = (shared.config.peer_host.clone(), shared.config.peer_port);
    shared.stats.set_link(LinkState::Connecting);
    let (offer_tx, offer_rx) = crossbeam_channel::bounded(4);
    let mut threads = Vec::new();
    let started = (|| -> Result<()> {
        server::watch_fd(shared.apply.wake_fd(), apply::on_wake_current).map_err(|what| {
            Error::Spawn {
                name: "apply watcher",
                source: std::io::Error::other(format!("RedisModule_{what} refused")),
            }
        })?;
        threads.push(spawn("rdmasync-send", &shared, sender::run)?);
        threads.push(match listener {
            Listener::Tcp(l) => spawn("rdmasync-accept", &shared, move |s| {
                accept::run_tcp_acceptor(s, l, offer_tx)
            })?,
            Listener::Rdma(l) => spawn("rdmasync-accept", &shared, move |s| {
                accept::run_rdma_acceptor(s, l, offer_tx)
            })?,
        });
        threads.push(spawn("rdmasync-link", &shared, move |s| {
            session::run_link(s, offer_rx)
        })?);
        Ok(())
    })();
    let line = format!(
        "rdmasync: node {node_id} ({}, RDB format {}) listening on {listen_addr}, peer {}, {why}, auth {}{}",
        shared.local.server,
        shared.local.rdb_version,
        shared.peer_addr(),
        shared.auth_mode().as_str(),
        if shared.tls.is_some() { ", tls" } else { "" },
    );
    *RUNTIME.write() = Some(Runtime { shared, threads });
    if let Err(e) = started {
        stop();
        return Err(e);
    }
    Ok(line)
}

enum Listener {
    Tcp(TcpListener),
    Rdma(rdma::Listener),
}

/// Picks the transport and says why, for the log. TLS runs over TCP only.
fn choose_transport(choice: TransportChoice, tls: bool) -> Result<(TransportKind, String)> {
    match (choice, tls) {
        (TransportChoice::Tcp, _) => return Ok((TransportKind::Tcp, "transport=tcp".into())),
        (TransportChoice::Rdma, true) => {
            return Err(Error::Config {
                arg: "tls".into(),
                reason: "tls=yes needs transport=tcp (or auto); RDMA traffic is not encrypted"
                    .into(),
            })
        }
        (TransportChoice::Auto, true) => {
            return Ok((
                TransportKind::Tcp,
                "transport=auto chose tcp: tls=yes".into(),
            ))
        }
        _ => {}
    }
    // Before any other verbs call: BGSAVE forks with registered memory.
    let fork = rdma::fork_init();
    match (choice, rdma::probe()) {
        (_, Ok(devices)) => Ok((
            TransportKind::Rdma,
            format!(
                "transport={} chose rdma: active device(s) {}; {fork}",
                choice.as_str(),
                devices.join(", ")
            ),
        )),
        (TransportChoice::Rdma, Err(e)) => Err(Error::Config {
            arg: "transport".into(),
            reason: format!("rdma requested but no usable RDMA device: {}", report(&e)),
        }),
        (_, Err(e)) => Ok((
            TransportKind::Tcp,
            format!("transport=auto chose tcp: {}", report(&e)),
        )),
    }
}

/// Whether the module's threads run (configs set now are run-time changes).
pub fn is_running() -> bool {
    RUNTIME.read().is_some()
}

/// Points the link at a new peer address: the current link closes and the
/// link thread dials the new one (backoff as usual).
pub fn change_peer(host: &str, port: u16) {
    with_shared(|s| {
        *s.peer.write() = (host.to_owned(), port);
        redis_module::logging::log_notice(format!(
            "rdmasync: peer changed to {}; reconnecting",
            s.peer_addr()
        ));
        if let Some(link) = s.link.lock().take() {
            link.close();
        }
        s.queue.wake.wake();
    });
}

/// Stops every thread and waits for it. Safe to call when not started.
pub fn stop() {
    let Some(rt) = RUNTIME.write().take() else {
        return;
    };
    rdma::abort_waits(true);
    server::unwatch_fd(rt.shared.apply.wake_fd());
    rt.shared.apply.cancel_timer();
    rt.shared.shutdown.store(true, Ordering::SeqCst);
    rt.shared.queue.wake.wake();
    if let Some(link) = rt.shared.link.lock().take() {
        link.close();
    }
    for t in rt.threads {
        t.thread().unpark();
        let _ = t.join();
    }
    Stats::add(&rt.shared.stats.entries_dropped, rt.shared.apply.discard());
    rt.shared.stats.set_link(LinkState::Down);
}
