//! Incoming connections. The acceptor thread only accepts; each handshake
//! runs on a short-lived thread of its own, with a deadline, so idle or
//! half-open connections never hold up the real peer. At most
//! [`MAX_PENDING`] handshakes run at once: when a new connection arrives at
//! the limit, the oldest one that has not even sent a valid HELLO is
//! abandoned (else the oldest), so a flood cannot keep the peer out.
//! Failures are counted by kind and logged once per address and kind.

use std::net::{IpAddr, TcpListener};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::error::{Error, HandshakeFailure, Result};
use crate::link::session::{rdma_handshake, tcp_handshake, Offer, IDLE_TICK};
use crate::ops::status::Stats;
use crate::proto::auth::Side;
use crate::shared::Shared;
use crate::transport::handshake::Watch;
use crate::transport::rdma;

/// Handshakes in progress at once, at most.
pub const MAX_PENDING: usize = 32;
/// Stack of a handshake thread: it parses a few small messages and runs TLS.
const HANDSHAKE_STACK: usize = 512 * 1024;
/// How long the TCP acceptor sleeps when nothing is waiting, for a second
/// after the last connection (a burst keeps the backlog from filling)...
const BUSY_TICK: Duration = Duration::from_millis(10);
/// ...and once quiet (an idle node costs next to nothing; unload unparks it).
const QUIET_AFTER: Duration = Duration::from_secs(1);

/// Adds a failed handshake to the counter of its kind.
pub fn count_failure(stats: &Stats, failure: HandshakeFailure) {
    let counter = match failure {
        HandshakeFailure::Malformed => &stats.bad_frames,
        HandshakeFailure::Auth => &stats.auth_failures,
        HandshakeFailure::Version | HandshakeFailure::SameNodeId => &stats.handshakes_refused,
        HandshakeFailure::ClockOffset => {
            Stats::add(&stats.clock_refusals, 1);
            &stats.handshakes_refused
        }
        HandshakeFailure::Incomplete => &stats.handshakes_incomplete,
    };
    Stats::add(counter, 1);
}

/// Counts a failed handshake, records it as the last error, and logs it
/// the first time this address fails this way. `dir` is "from" (incoming)
/// or "to" (dialed).
pub fn report_failure(shared: &Shared, ip: Option<IpAddr>, dir: &str, e: &Error) {
    let failure = e.handshake_failure();
    count_failure(&shared.stats, failure);
    let who = ip.map_or_else(|| "an unknown address".to_owned(), |a| a.to_string());
    let msg = format!("handshake {dir} {who} failed: {}", e.report());
    let decision = shared.failures.lock().first(ip, failure);
    match decision {
        Some(true) => redis_module::logging::log_warning(format!(
            "rdmasync: {msg} (further failures of this kind from this address are only counted)"
        )),
        Some(false) => redis_module::logging::log_warning(
            "rdmasync: handshakes keep failing from many addresses; \
             further failures are only counted (see RDMASYNC.STATUS)",
        ),
        None => {}
    }
    shared.stats.set_error(msg);
}

/// One handshake in progress.
struct Slot {
    started: Instant,
    watch: Arc<Watch>,
    thread: JoinHandle<()>,
}

/// The handshakes in progress.
#[derive(Default)]
struct PendingSet {
    slots: Vec<Slot>,
}

impl PendingSet {
    /// Joins finished handshake threads.
    fn reap(&mut self) {
        let (done, running): (Vec<Slot>, Vec<Slot>) = std::mem::take(&mut self.slots)
            .into_iter()
            .partition(|s| s.thread.is_finished());
        self.slots = running;
        for s in done {
            let _ = s.thread.join();
        }
    }

    /// At the limit, abandons the oldest handshake that has not progressed
    /// (else the oldest); it ends at its next read tick.
    fn make_room(&mut self) {
        self.reap();
        if self.slots.len() < MAX_PENDING {
            return;
        }
        let live = self.slots.iter().filter(|s| !s.watch.is_abandoned());
        let victim = live
            .clone()
            .filter(|s| !s.watch.progressed())
            .min_by_key(|s| s.started)
            .or_else(|| live.min_by_key(|s| s.started));
        if let Some(v) = victim {
            v.watch.abandon();
        }
    }

    /// Starts `body` on a handshake thread of its own.
    fn start(
        &mut self,
        shared: &Arc<Shared>,
        body: impl FnOnce(&Shared, &Watch) + Send + 'static,
    ) -> Result<()> {
        self.make_room();
        let watch = Arc::new(Watch::default());
        let (s, w) = (shared.clone(), watch.clone());
        let thread = std::thread::Builder::new()
            .name("rdmasync-hs".into())
            .stack_size(HANDSHAKE_STACK)
            .spawn(move || {
                let run = std::panic::AssertUnwindSafe(|| body(&s, &w));
                if std::panic::catch_unwind(run).is_err() {
                    s.stats.set_error("handshake thread panicked");
                }
            })
            .map_err(|source| Error::Spawn {
                name: "rdmasync-hs",
                source,
            })?;
        self.slots.push(Slot {
            started: Instant::now(),
            watch,
            thread,
        });
        Ok(())
    }

    /// Abandons every handshake and waits for all of them (unload).
    fn stop(&mut self) {
        for s in &self.slots {
            s.watch.abandon();
        }
        for s in self.slots.drain(..) {
            let _ = s.thread.join();
        }
    }
}

/// Passes a kept connection to the link thread, or reports the failure.
fn finish(shared: &Shared, offers: &Sender<Offer>, from: Option<IpAddr>, r: Result<Option<Offer>>) {
    match r {
        Ok(Some(mut offer)) => {
            offer.from = from;
            // A full hand-off means newer connections wait already: drop this one.
            let _ = offers.try_send(offer);
        }
        Ok(None) => {}
        Err(e) => report_failure(shared, from, "from", &e),
    }
}

/// Accepts TCP connections; each handshake runs on its own thread.
pub fn run_tcp_acceptor(shared: Arc<Shared>, listener: TcpListener, offers: Sender<Offer>) {
    if let Err(e) = listener.set_nonblocking(true) {
        shared.stats.set_error(format!("listener: {e}"));
    }
    let mut pending = PendingSet::default();
    let mut last_accept = Instant::now();
    while !shared.stopping() {
        match listener.accept() {
            Ok((stream, from)) => {
                last_accept = Instant::now();
                let offers = offers.clone();
                let started = pending.start(&shared, move |s, watch| {
                    let r = tcp_handshake(s, stream, Side::Acceptor, None, watch);
                    finish(s, &offers, Some(from.ip()), r);
                });
                if let Err(e) = started {
                    report_failure(&shared, Some(from.ip()), "from", &e);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                pending.reap();
                let busy = last_accept.elapsed() < QUIET_AFTER;
                std::thread::park_timeout(if busy { BUSY_TICK } else { IDLE_TICK });
            }
            Err(e) => {
                shared.stats.set_error(format!("accept: {e}"));
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    pending.stop();
}

/// Accepts RDMA connection requests; each setup and handshake runs on its own thread.
pub fn run_rdma_acceptor(shared: Arc<Shared>, listener: rdma::Listener, offers: Sender<Offer>) {
    let mut pending = PendingSet::default();
    while !shared.stopping() {
        pending.reap();
        match listener.next_request(IDLE_TICK) {
            Ok(Some(incoming)) => {
                let offers = offers.clone();
                let from = incoming.peer;
                let started = pending.start(&shared, move |s, watch| {
                    let r = incoming
                        .accept(s.config.ring_size)
                        .map_err(Error::from)
                        .and_then(|p| rdma_handshake(s, p, Side::Acceptor, watch));
                    finish(s, &offers, from, r);
                });
                if let Err(e) = started {
                    report_failure(&shared, from, "from", &e);
                }
            }
            Ok(None) => {}
            Err(e) => {
                shared
                    .stats
                    .set_error(format!("rdma accept: {}", crate::error::report(&e)));
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    pending.stop();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_count_by_kind() {
        let stats = Stats::default();
        count_failure(&stats, HandshakeFailure::Auth);
        count_failure(&stats, HandshakeFailure::Malformed);
        count_failure(&stats, HandshakeFailure::Version);
        count_failure(&stats, HandshakeFailure::SameNodeId);
        count_failure(&stats, HandshakeFailure::Incomplete);
        assert_eq!(Stats::get(&stats.auth_failures), 1);
        assert_eq!(Stats::get(&stats.bad_frames), 1);
        assert_eq!(Stats::get(&stats.handshakes_refused), 2);
        assert_eq!(Stats::get(&stats.handshakes_incomplete), 1);
    }
}
