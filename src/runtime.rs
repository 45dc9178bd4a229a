//! Starts the module at load: builds the live state (`shared::Shared`)
//! and spawns the threads; stops and joins them at unload.

use std::net::{IpAddr, SocketAddr, TcpListener, ToSocketAddrs, UdpSocket};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::converge::clock::default_node_id;
use crate::converge::clock_lead;
use crate::error::{report, Error, Result};
use crate::link::accept;
use crate::ops::clock_file;
use crate::ops::config::{Config, TransportChoice};
use crate::ops::status::{LinkState, Stats};
use crate::proto::handshake::Local;
use crate::receive::apply;
use crate::redis::server::ServerInfo;
use crate::shared::apply_queue::{apply_queue, ApplyProducer};
use crate::shared::queue::{batch_queue, BatchConsumer};
use crate::shared::{self, Live, Shared, TransportKind};
use crate::transport::rdma;
use crate::transport::tls::TlsConfig;
use crate::transport::StopToken;
use crate::{link::session, redis::server, ship::sender};

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

/// The local address the kernel would use to reach `peer` (no packet is sent),
/// or `None` when there is no route.
fn local_ip_towards(peer: SocketAddr) -> Option<IpAddr> {
    let any: SocketAddr = if peer.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    };
    let socket = UdpSocket::bind(any).ok()?;
    socket.connect(peer).ok()?;
    socket.local_addr().ok().map(|a| a.ip())
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
    log_warnings(&config, &server);
    let listen_addr = std::net::SocketAddr::new(config.bind, config.listen_port);
    let node_id = node_id_for(&config);
    let (to_main, apply) = apply_queue()?;
    let (queue, to_send) = batch_queue(config.queue_size);
    let local = Local {
        node_id,
        rdb_version: server.rdb_version,
        server: server.description,
        secret: config.secret.clone(),
        wall_ms: 0,
        max_clock_offset_ms: config.max_clock_offset_ms,
    };
    let shared = Arc::new(Shared::new(
        config, node_id, transport, local, tls, queue, apply,
    ));
    let listener = bind(transport, listen_addr, &shared.stop)?;
    let kept_lead = start_from_kept_lead(&shared);
    let mut threads = Vec::new();
    let started =
        spawn_threads(&shared, listener, (to_send, to_main), &mut threads).and_then(|()| {
            threads.push(spawn("rdmasync-clock", &shared, move |s| {
                keep_clock_lead(&s, kept_lead)
            })?);
            Ok(())
        });
    let line = format!(
        "rdmasync: node {node_id} ({}, RDB format {}) listening on {listen_addr}, peer {}, {why}, auth {}{}",
        shared.local.server,
        shared.local.rdb_version,
        shared.peer_addr(),
        shared.auth_mode().as_str(),
        if shared.tls.is_some() { ", tls" } else { "" },
    );
    shared::install(Live { shared, threads });
    if let Err(e) = started {
        stop();
        return Err(e);
    }
    Ok(line)
}

/// Starts the clock above every stamp this node gave while the lead its
/// file kept held (`converge::clock_lead`): a restart from an older copy
/// then never stamps a write below one it lost. The lead kept, if any.
fn start_from_kept_lead(shared: &Shared) -> Option<u64> {
    let path = clock_file::path(shared.node_id);
    match clock_file::read(&path) {
        Ok(Some(kept)) => {
            let max_offset = shared.config.max_clock_offset_ms;
            let wall = shared.clock.wall_ms();
            shared
                .clock
                .observe(clock_lead::floor_after_restart(wall, kept, max_offset));
            Stats::set(&shared.stats.clock_lead_kept_ms, kept);
            if kept > 0 {
                redis_module::logging::log_notice(format!(
                    "rdmasync: the clock ran {kept} ms ahead of the wall clock before this \
                     start ({}); it starts that far ahead",
                    path.display()
                ));
            }
            Some(kept)
        }
        Ok(None) => None,
        Err(why) => {
            let what = format!(
                "clock lead not read ({why}); the clock starts from the newest stamp loaded"
            );
            redis_module::logging::log_warning(format!("rdmasync: {what}"));
            shared.stats.set_error(what);
            None
        }
    }
}

/// The clock thread's body: writes the clock's lead over the wall clock
/// to the lead file where it grew (or fell far), every
/// [`clock_lead::CHECK_EVERY_MS`], and once more at the stop.
fn keep_clock_lead(shared: &Shared, mut kept: Option<u64>) {
    let path = clock_file::path(shared.node_id);
    let mut failing = false;
    loop {
        let stopping = shared.stop.is_stopped();
        let lead = shared.clock.lead_ms();
        if clock_lead::worth_writing(kept, lead) {
            match clock_file::write(&path, lead) {
                Ok(()) => {
                    kept = Some(lead);
                    failing = false;
                    Stats::set(&shared.stats.clock_lead_kept_ms, lead);
                }
                Err(e) if !failing => {
                    failing = true;
                    shared.stats.set_error(format!(
                        "clock lead not written to {}: {e}; a restart from an older copy \
                         may stamp writes below ones it lost",
                        path.display()
                    ));
                }
                Err(_) => {}
            }
        }
        if stopping {
            return;
        }
        std::thread::park_timeout(std::time::Duration::from_millis(clock_lead::CHECK_EVERY_MS));
    }
}

/// What the operator should know about the configuration at load.
fn log_warnings(config: &Config, server: &ServerInfo) {
    for warning in config.warnings() {
        redis_module::logging::log_warning(format!("rdmasync: {warning}"));
    }
    if server.rdb_version == 0 {
        redis_module::logging::log_warning(
            "rdmasync: cannot tell this server's RDB format (FUNCTION DUMP failed); \
             the handshake will only accept a peer that cannot tell either",
        );
    }
}

/// Listens on `addr` with `transport`.
/// The RDMA listener's waits end when `stop` is set.
fn bind(
    transport: TransportKind,
    addr: std::net::SocketAddr,
    stop: &StopToken,
) -> Result<Listener> {
    let name = addr.to_string();
    Ok(match transport {
        TransportKind::Tcp => Listener::Tcp(
            TcpListener::bind(addr).map_err(|source| Error::Listen { addr: name, source })?,
        ),
        TransportKind::Rdma => Listener::Rdma(
            rdma::Listener::bind(addr, stop.clone())
                .map_err(|source| Error::ListenRdma { addr: name, source })?,
        ),
    })
}

/// Registers the apply wake-up and starts the sender (which takes the
/// capture queue's consumer end `to_send`), acceptor and link threads (the
/// link thread takes the apply queue's producer end `to_main`); those that
/// started are in `threads` even when one fails.
fn spawn_threads(
    shared: &Arc<Shared>,
    listener: Listener,
    (to_send, to_main): (BatchConsumer, ApplyProducer),
    threads: &mut Vec<JoinHandle<()>>,
) -> Result<()> {
    let (offer_tx, offer_rx) = crossbeam_channel::bounded(4);
    let (link_tx, link_rx) = crossbeam_channel::unbounded();
    server::watch_fd(shared.apply.wake_fd(), on_apply_wake).map_err(|what| Error::Spawn {
        name: "apply watcher",
        source: std::io::Error::other(format!("RedisModule_{what} refused")),
    })?;
    threads.push(spawn("rdmasync-send", shared, move |s| {
        sender::run(s, to_send, link_rx)
    })?);
    threads.push(match listener {
        Listener::Tcp(l) => spawn("rdmasync-accept", shared, move |s| {
            accept::run_tcp_acceptor(s, l, offer_tx)
        })?,
        Listener::Rdma(l) => spawn("rdmasync-accept", shared, move |s| {
            accept::run_rdma_acceptor(s, l, offer_tx)
        })?,
    });
    threads.push(spawn("rdmasync-link", shared, move |s| {
        session::run_link(s, offer_rx, link_tx, to_main)
    })?);
    Ok(())
}

/// Event-loop callback: the link thread handed the main thread something.
fn on_apply_wake() {
    shared::with_shared(|s| apply::on_wake(s));
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
    let probe = rdma::fork_init().and_then(|fork| Ok((fork, rdma::probe()?)));
    match (choice, probe) {
        (_, Ok((fork, devices))) => Ok((
            TransportKind::Rdma,
            format!(
                "transport={} chose rdma: active device(s) {}; {fork}",
                choice.as_str(),
                devices.join(", ")
            ),
        )),
        (TransportChoice::Rdma, Err(e)) => Err(Error::Config {
            arg: "transport".into(),
            reason: format!("rdma requested but not usable: {}", report(&e)),
        }),
        (_, Err(e)) => Ok((
            TransportKind::Tcp,
            format!("transport=auto chose tcp: {}", report(&e)),
        )),
    }
}

/// Points the link at a new peer address: the current link closes and the
/// link thread dials the new one (backoff as usual).
pub fn change_peer(host: &str, port: u16) {
    shared::with_shared(|s| {
        *s.peer.write() = (host.to_owned(), port);
        redis_module::logging::log_notice(format!(
            "rdmasync: peer changed to {}; reconnecting",
            s.peer_addr()
        ));
        if let Some(link) = s.link.lock().take() {
            link.close();
        }
        s.queue.wake_sender();
    });
}

/// Stops every thread and waits for it. Safe to call when not started.
pub fn stop() {
    let Some(rt) = shared::uninstall() else {
        return;
    };
    server::unwatch_fd(rt.shared.apply.wake_fd());
    rt.shared.apply.cancel_timer();
    rt.shared.stop.stop();
    rt.shared.queue.wake_sender();
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

#[cfg(test)]
mod tests {
    use super::local_ip_towards;

    #[test]
    fn loopback_route_is_found() {
        let ip = local_ip_towards("127.0.0.1:9".parse().unwrap());
        assert_eq!(ip, Some("127.0.0.1".parse().unwrap()));
    }
}
