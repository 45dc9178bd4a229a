//! Load and replication-lag driver for `scripts/bench.sh`: talks to redis-server
//! over its own protocol only (never links the module), so it measures a pair
//! of module nodes and a plain `REPLICAOF` pair the same way.
//!
//! ```text
//! lagbench lag      --write PORT --read PORT [--rate 1000] [--count 2000] [--value-size 64]
//!                   [--bg-rate 0] [--bg-clients 4] [--bg-pipeline 16] [--bg-keys 10000]
//!                   [--label NAME] [--out FILE]
//! lagbench saturate --write PORT [--peer PORT] [--value-size 64] [--keys 100000]
//!                   [--clients 4] [--pipeline 32] [--seconds 4] [--rate 0] [--steps 4]
//!                   [--label NAME] [--timeline FILE]
//! lagbench fill     --port PORT --count N [--value-size 64] [--prefix mem]
//! ```
//! `lag`: writes `--count` probe keys on `--write` at `--rate` per second (one
//! synchronous client, optionally under a background pipelined load of
//! `--bg-rate` writes/s) and times each from the write's acknowledgement (and
//! from its send) to its keyspace notification on `--read`. Samples go to
//! `--out`, one line per probe: `ack_to_visible_ns send_to_visible_ns`.
//! `saturate`: pipelined SETs on `--write` at `--rate` (0: as fast as the
//! server answers); with `--peer` (a module pair), whether the peer keeps up,
//! and if not, lower rates until it does (`--steps` tries in all).
//! `fill`: `--count` distinct keys, pipelined.
//! Options use `--host` (default 127.0.0.1) for every port.

use std::collections::HashMap;
use std::error::Error;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// `--name value` options.
struct Args {
    opts: HashMap<String, String>,
}

impl Args {
    fn parse(raw: impl Iterator<Item = String>) -> Res<Self> {
        let mut opts = HashMap::new();
        let mut raw = raw.peekable();
        while let Some(a) = raw.next() {
            let name = a.strip_prefix("--").ok_or(format!("unexpected {a:?}"))?;
            let v = raw.next().ok_or(format!("--{name} needs a value"))?;
            opts.insert(name.to_string(), v);
        }
        Ok(Self { opts })
    }

    fn get<T: std::str::FromStr>(&self, name: &str, default: T) -> Res<T> {
        match self.opts.get(name) {
            Some(v) => v
                .parse()
                .map_err(|_| format!("--{name}: cannot parse {v:?}").into()),
            None => Ok(default),
        }
    }

    fn need<T: std::str::FromStr>(&self, name: &str) -> Res<T> {
        let v = self.opts.get(name).ok_or(format!("--{name} is required"))?;
        v.parse()
            .map_err(|_| format!("--{name}: cannot parse {v:?}").into())
    }

    fn text(&self, name: &str, default: &str) -> String {
        self.opts
            .get(name)
            .cloned()
            .unwrap_or_else(|| default.to_string())
    }
}

fn connect(host: &str, port: u16) -> Res<redis::Connection> {
    let client = redis::Client::open(format!("redis://{host}:{port}/"))?;
    let mut last = None;
    for _ in 0..50 {
        match client.get_connection() {
            Ok(c) => return Ok(c),
            Err(e) => last = Some(e),
        }
        thread::sleep(Duration::from_millis(100));
    }
    Err(format!("cannot connect to {host}:{port}: {last:?}").into())
}

/// Bytes LZF cannot shrink (DUMP compresses strings over 20 bytes), so the
/// payload is as large on the wire as it is in the key.
fn incompressible(len: usize, seed: u64) -> Vec<u8> {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/";
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ALPHABET[(x % 64) as usize]
        })
        .collect()
}

/// `RDMASYNC.STATUS` as name -> number (non-numeric fields left out).
fn status(con: &mut redis::Connection) -> Res<HashMap<String, i64>> {
    let v: redis::Value = redis::cmd("RDMASYNC.STATUS").query(con)?;
    let pairs: Vec<(redis::Value, redis::Value)> = match v {
        redis::Value::Map(m) => m,
        redis::Value::Array(a) => {
            let mut it = a.into_iter();
            let mut pairs = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                pairs.push((k, v));
            }
            pairs
        }
        other => return Err(format!("RDMASYNC.STATUS: unexpected reply {other:?}").into()),
    };
    let mut out = HashMap::new();
    for (k, v) in pairs {
        let (Ok(k), Ok(v)) = (
            redis::from_redis_value::<String>(&k),
            redis::from_redis_value::<i64>(&v),
        ) else {
            continue;
        };
        out.insert(k, v);
    }
    Ok(out)
}

fn field(s: &HashMap<String, i64>, name: &str) -> i64 {
    s.get(name).copied().unwrap_or(0)
}

/// A pipelined writer: `pipeline` SETs per round trip to keys
/// `{prefix}:{n % keys}` with `n = first, first + stride, ...`, paced to
/// `rate` writes/s (0: unpaced). Counts acknowledged writes in `acked`.
#[derive(Clone)]
struct Load {
    host: String,
    port: u16,
    rate: f64,
    pipeline: usize,
    keys: u64,
    prefix: String,
    first: u64,
    stride: u64,
    value: Vec<u8>,
}

impl Load {
    fn run(&self, stop: &AtomicBool, acked: &AtomicU64) -> Res<()> {
        let mut con = connect(&self.host, self.port)?;
        let interval =
            (self.rate > 0.0).then(|| Duration::from_secs_f64(self.pipeline as f64 / self.rate));
        let start = Instant::now();
        let mut n = self.first;
        let mut rounds = 0u32;
        let mut pipe = redis::pipe();
        let mut key = String::new();
        while !stop.load(Ordering::Relaxed) {
            if let Some(iv) = interval {
                let due = start + iv * rounds;
                let now = Instant::now();
                if due > now {
                    thread::sleep(due - now);
                }
            }
            pipe.clear();
            for _ in 0..self.pipeline {
                key.clear();
                let _ = write!(key, "{}:{}", self.prefix, n % self.keys);
                pipe.cmd("SET").arg(&key).arg(&self.value).ignore();
                n += self.stride;
            }
            pipe.query::<()>(&mut con)?;
            acked.fetch_add(self.pipeline as u64, Ordering::Relaxed);
            rounds = rounds.wrapping_add(1);
        }
        Ok(())
    }
}

/// Background writers, stopped and joined on drop.
struct Loaders {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
    threads: Vec<thread::JoinHandle<Res<()>>>,
}

impl Loaders {
    fn start(loads: Vec<Load>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let threads = loads
            .into_iter()
            .map(|l| {
                let (stop, acked) = (stop.clone(), acked.clone());
                thread::spawn(move || l.run(&stop, &acked))
            })
            .collect();
        Self {
            stop,
            acked,
            threads,
        }
    }

    fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }

    fn finish(mut self) -> Res<u64> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            t.join().map_err(|_| "load thread panicked")??;
        }
        Ok(self.acked())
    }
}

impl Drop for Loaders {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// `clients` copies of `one`, sharing its rate and interleaving their keys.
fn spread(one: Load, clients: u64) -> Vec<Load> {
    (0..clients)
        .map(|c| Load {
            rate: one.rate / clients as f64,
            first: c,
            stride: clients,
            ..one.clone()
        })
        .collect()
}

fn nanos(epoch: Instant) -> u64 {
    epoch.elapsed().as_nanos() as u64
}

/// Probe keys written on one node, timed to their keyspace notification on the other.
fn cmd_lag(a: &Args) -> Res<()> {
    let host = a.text("host", "127.0.0.1");
    let write_port: u16 = a.need("write")?;
    let read_port: u16 = a.need("read")?;
    let rate: f64 = a.get("rate", 1000.0)?;
    let count: usize = a.get("count", 2000)?;
    let value = incompressible(a.get("value-size", 64)?, 7);
    let bg_rate: f64 = a.get("bg-rate", 0.0)?;
    let label = a.text("label", "lag");
    let prefix = format!(
        "lag{}x{}",
        std::process::id(),
        nanos_since_unix() % 1_000_000_007
    );

    let mut sub_con = connect(&host, read_port)?;
    let (_, notify_before): (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("notify-keyspace-events")
        .query(&mut sub_con)?;
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("KEA")
        .query::<()>(&mut sub_con)?;
    let epoch = Instant::now();
    // 0: not seen yet; else nanoseconds since `epoch` + 1.
    let seen: Arc<Vec<AtomicU64>> = Arc::new((0..count).map(|_| AtomicU64::new(0)).collect());
    let done = Arc::new(AtomicBool::new(false));
    let warm = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let subscriber = {
        let (seen, done, warm) = (seen.clone(), done.clone(), warm.clone());
        let channel_prefix = format!("__keyspace@0__:{prefix}:");
        thread::spawn(move || -> Res<()> {
            let mut ps = sub_con.as_pubsub();
            ps.psubscribe(format!("{channel_prefix}*"))?;
            ps.set_read_timeout(Some(Duration::from_millis(100)))?;
            let _ = ready_tx.send(());
            while !done.load(Ordering::Relaxed) {
                let msg = match ps.get_message() {
                    Ok(m) => m,
                    Err(e) if e.is_timeout() => continue,
                    Err(e) => return Err(e.into()),
                };
                let t = nanos(epoch) + 1;
                let Some(tag) = msg.get_channel_name().strip_prefix(&channel_prefix) else {
                    continue;
                };
                if tag == "end" {
                    return Ok(());
                }
                if tag == "warm" {
                    warm.store(true, Ordering::Relaxed);
                    continue;
                }
                if let Some(slot) = tag.parse::<usize>().ok().and_then(|i| seen.get(i)) {
                    let _ = slot.compare_exchange(0, t, Ordering::Relaxed, Ordering::Relaxed);
                }
            }
            Ok(())
        })
    };
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .map_err(|_| "subscriber did not start")?;

    let bg = (bg_rate > 0.0).then(|| {
        let v = incompressible(a.get("value-size", 64).unwrap_or(64), 11);
        let one = Load {
            host: host.clone(),
            port: write_port,
            rate: bg_rate,
            pipeline: a.get("bg-pipeline", 16).unwrap_or(16),
            keys: a.get("bg-keys", 10_000).unwrap_or(10_000),
            prefix: "bg".into(),
            first: 0,
            stride: 1,
            value: v,
        };
        Loaders::start(spread(one, a.get("bg-clients", 4).unwrap_or(4)))
    });
    if bg.is_some() {
        thread::sleep(Duration::from_millis(500)); // reach a steady state first
    }
    let bg_start = (Instant::now(), bg.as_ref().map_or(0, Loaders::acked));

    let mut con = connect(&host, write_port)?;
    // The path is up end to end before the first probe (a replica may still be syncing).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !warm.load(Ordering::Relaxed) {
        if Instant::now() > deadline {
            return Err("no write reached the reading node within 30 s".into());
        }
        redis::cmd("SET")
            .arg(format!("{prefix}:warm"))
            .arg(1)
            .query::<()>(&mut con)?;
        thread::sleep(Duration::from_millis(20));
    }
    let mut sent = vec![0u64; count];
    let mut acked = vec![0u64; count];
    let interval = Duration::from_secs_f64(1.0 / rate);
    let start = Instant::now();
    let mut key = String::new();
    for i in 0..count {
        let due = start + interval * i as u32;
        let now = Instant::now();
        if due > now {
            thread::sleep(due - now);
        }
        key.clear();
        let _ = write!(key, "{prefix}:{i}");
        sent[i] = nanos(epoch) + 1;
        redis::cmd("SET")
            .arg(&key)
            .arg(&value)
            .query::<()>(&mut con)?;
        acked[i] = nanos(epoch) + 1;
    }
    let bg_rate_done = bg.as_ref().map_or(0.0, |l| {
        (l.acked() - bg_start.1) as f64 / bg_start.0.elapsed().as_secs_f64()
    });
    // Stragglers: wait until every probe is seen, or 3 s.
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline && seen.iter().any(|s| s.load(Ordering::Relaxed) == 0) {
        thread::sleep(Duration::from_millis(10));
    }
    if let Some(bg) = bg {
        bg.finish()?;
    }
    redis::cmd("SET")
        .arg(format!("{prefix}:end"))
        .arg(1)
        .query::<()>(&mut con)?;
    thread::sleep(Duration::from_millis(200));
    done.store(true, Ordering::Relaxed);
    subscriber.join().map_err(|_| "subscriber panicked")??;
    // Publishing notifications costs the reading node; leave it as it was.
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg(notify_before)
        .query::<()>(&mut connect(&host, read_port)?)?;

    let mut ack_lag = Vec::with_capacity(count);
    let mut send_lag = Vec::with_capacity(count);
    let mut file = String::new();
    for i in 0..count {
        let t = seen[i].load(Ordering::Relaxed);
        if t == 0 {
            continue;
        }
        let (al, sl) = (t as i64 - acked[i] as i64, t as i64 - sent[i] as i64);
        ack_lag.push(al);
        send_lag.push(sl);
        let _ = writeln!(file, "{al} {sl}");
    }
    if let Some(out) = a.opts.get("out") {
        std::fs::write(out, file)?;
    }
    let lost = count - ack_lag.len();
    println!(
        "{label}: probes {count} lost {lost} bg {bg_rate_done:.0}/s | ack->visible us {} | send->visible us {}",
        summary(&mut ack_lag),
        summary(&mut send_lag)
    );
    Ok(())
}

fn nanos_since_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Nearest-rank percentile of sorted samples.
fn pct(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn us(ns: i64) -> String {
    format!("{:.1}", ns as f64 / 1000.0)
}

/// `p50 p99 p99.9 max` in microseconds.
fn summary(samples: &mut [i64]) -> String {
    samples.sort_unstable();
    format!(
        "p50 {} p99 {} p99.9 {} max {}",
        us(pct(samples, 50.0)),
        us(pct(samples, 99.0)),
        us(pct(samples, 99.9)),
        us(samples.last().copied().unwrap_or(0))
    )
}

/// `count` distinct keys, 1000 per round trip.
fn cmd_fill(a: &Args) -> Res<()> {
    let mut con = connect(&a.text("host", "127.0.0.1"), a.need("port")?)?;
    let count: u64 = a.need("count")?;
    let value = incompressible(a.get("value-size", 64)?, 5);
    let prefix = a.text("prefix", "mem");
    let mut pipe = redis::pipe();
    let mut i = 0;
    while i < count {
        pipe.clear();
        for _ in 0..1000.min(count - i) {
            pipe.cmd("SET")
                .arg(format!("{prefix}:{i}"))
                .arg(&value)
                .ignore();
            i += 1;
        }
        pipe.query::<()>(&mut con)?;
    }
    Ok(())
}

/// Counters of a module pair that say whether B keeps up with A.
#[derive(Clone, Copy, Default)]
struct PairCounters {
    sent: i64,
    queue_depth: i64,
    overflows: i64,
    dropped: i64,
    applied: i64,
    received_bytes: i64,
}

struct Pair {
    a: redis::Connection,
    b: redis::Connection,
}

impl Pair {
    fn read(&mut self) -> Res<PairCounters> {
        let (sa, sb) = (status(&mut self.a)?, status(&mut self.b)?);
        Ok(PairCounters {
            sent: field(&sa, "entries_sent"),
            queue_depth: field(&sa, "queue_depth"),
            overflows: field(&sa, "queue_overflows"),
            dropped: field(&sa, "entries_dropped"),
            applied: field(&sb, "entries_applied"),
            received_bytes: field(&sb, "bytes_received"),
        })
    }

    /// Waits until B has applied everything A captured; the time it took.
    fn drain(&mut self, limit: Duration) -> Res<Option<Duration>> {
        let start = Instant::now();
        let mut quiet = 0;
        while start.elapsed() < limit {
            let c = self.read()?;
            if c.queue_depth == 0 && c.applied >= c.sent {
                quiet += 1;
                if quiet == 2 {
                    return Ok(Some(start.elapsed()));
                }
            } else {
                quiet = 0;
            }
            thread::sleep(Duration::from_millis(2));
        }
        Ok(None)
    }
}

struct Step {
    offered: f64,
    /// Writes acknowledged on A per second over the step.
    write_rate: f64,
    /// Entries applied on B per second, from the step's start until B drained.
    apply_rate: f64,
    /// A's write rate and B's apply rate over the step's second half (steady state).
    write_rate_2: f64,
    apply_rate_2: f64,
    /// How fast the backlog grew from the second quarter to the last (entries/s).
    growth: f64,
    wire_rate: f64,
    backlog_end: i64,
    backlog_max: i64,
    overflows: i64,
    dropped: i64,
    drain: Option<Duration>,
}

impl Step {
    /// B kept up with bounded lag: nothing overflowed or dropped, the backlog
    /// grew by less than 3% of A's write rate (B applies at >= 97% of A's
    /// rate), and B caught up within half a second once A stopped.
    fn kept_up(&self) -> bool {
        self.overflows == 0
            && self.dropped == 0
            && self.growth <= 0.03 * self.write_rate_2
            && self.drain.is_some_and(|d| d <= Duration::from_millis(500))
    }
}

/// Pipelined SETs at a rate (or flat out); with `--peer`, steps down the rate
/// until the peer keeps up.
fn cmd_saturate(a: &Args) -> Res<()> {
    let host = a.text("host", "127.0.0.1");
    let port: u16 = a.need("write")?;
    let size: usize = a.get("value-size", 64)?;
    let keys: u64 = a.get("keys", 100_000)?;
    let clients: u64 = a.get("clients", 4)?;
    let pipeline: usize = a.get("pipeline", 32)?;
    let seconds: f64 = a.get("seconds", 4.0)?;
    let steps: usize = a.get("steps", 4)?;
    let label = a.text("label", "saturate");
    let value = incompressible(size, 3);
    let mut pair = match a.opts.get("peer") {
        Some(p) => Some(Pair {
            a: connect(&host, port)?,
            b: connect(&host, p.parse()?)?,
        }),
        None => None,
    };
    let mut timeline = String::new();
    let mut t_base = 0.0;
    let mut rate: f64 = a.get("rate", 0.0)?;
    let mut best: Option<Step> = None;
    let mut first_write_rate = 0.0;
    for step_no in 0..steps.max(1) {
        if let Some(p) = pair.as_mut() {
            p.drain(Duration::from_secs(60))?
                .ok_or("peer still busy after 60 s")?;
        }
        let c0 = match pair.as_mut() {
            Some(p) => p.read()?,
            None => PairCounters::default(),
        };
        let one = Load {
            host: host.clone(),
            port,
            rate,
            pipeline,
            keys,
            prefix: "sat".into(),
            first: 0,
            stride: 1,
            value: value.clone(),
        };
        let load = Loaders::start(spread(one, clients));
        let start = Instant::now();
        let (mut last_t, mut last_acked, mut last_applied) = (0.0, 0u64, c0.applied);
        let mut backlog_max = 0;
        // (seconds into the step, writes acked, entries applied, backlog)
        let mut samples: Vec<(f64, u64, i64, i64)> = Vec::new();
        let mut c = c0;
        while start.elapsed().as_secs_f64() < seconds {
            thread::sleep(Duration::from_millis(100));
            let t = start.elapsed().as_secs_f64();
            let acked = load.acked();
            if let Some(p) = pair.as_mut() {
                c = p.read()?;
            }
            let backlog = match pair {
                Some(_) => acked as i64 - (c.applied - c0.applied),
                None => 0,
            };
            backlog_max = backlog_max.max(backlog);
            samples.push((t, acked, c.applied - c0.applied, backlog));
            let _ = writeln!(
                timeline,
                "{:.2} {:.0} {:.0} {}",
                t_base + t,
                (acked - last_acked) as f64 / (t - last_t),
                (c.applied - last_applied) as f64 / (t - last_t),
                backlog
            );
            (last_t, last_acked, last_applied) = (t, acked, c.applied);
        }
        let elapsed = start.elapsed().as_secs_f64();
        let acked = load.finish()?;
        if let Some(p) = pair.as_mut() {
            c = p.read()?;
        }
        let backlog_end = match pair {
            Some(_) => acked as i64 - (c.applied - c0.applied),
            None => 0,
        };
        let drain = match pair.as_mut() {
            Some(p) => p.drain(Duration::from_secs(30))?,
            None => Some(Duration::ZERO),
        };
        let after = match pair.as_mut() {
            Some(p) => p.read()?,
            None => c,
        };
        t_base += elapsed + 0.5;
        let write_rate = acked as f64 / elapsed;
        let mean_backlog = |from: f64, to: f64| {
            let in_range: Vec<f64> = samples
                .iter()
                .filter(|s| s.0 >= from * elapsed && s.0 <= to * elapsed)
                .map(|s| s.3 as f64)
                .collect();
            in_range.iter().sum::<f64>() / in_range.len().max(1) as f64
        };
        let growth = (mean_backlog(0.75, 1.0) - mean_backlog(0.25, 0.5)) / (0.5 * elapsed);
        let mid = samples
            .iter()
            .find(|s| s.0 >= elapsed / 2.0)
            .copied()
            .unwrap_or_default();
        let last = samples.last().copied().unwrap_or_default();
        let half = (last.0 - mid.0).max(1e-3);
        let drained_in = drain.map_or(30.0, |d| d.as_secs_f64());
        let s = Step {
            offered: rate,
            write_rate,
            apply_rate: match pair {
                Some(_) => (after.applied - c0.applied) as f64 / (elapsed + drained_in),
                None => write_rate,
            },
            write_rate_2: (last.1 - mid.1) as f64 / half,
            apply_rate_2: match pair {
                Some(_) => (last.2 - mid.2) as f64 / half,
                None => (last.1 - mid.1) as f64 / half,
            },
            growth,
            wire_rate: (c.received_bytes - c0.received_bytes) as f64 / elapsed,
            backlog_end,
            backlog_max,
            overflows: after.overflows - c0.overflows,
            dropped: after.dropped - c0.dropped,
            drain,
        };
        if step_no == 0 {
            first_write_rate = s.write_rate;
        }
        println!(
            "{label} step {}: offered {} written {:.0}/s applied {:.0}/s; 2nd half: written {:.0}/s applied {:.0}/s backlog growth {:.0}/s; wire {:.1} MB/s backlog end {} max {} overflows {} dropped {} drain {} ms -> {}",
            step_no + 1,
            if s.offered > 0.0 { format!("{:.0}/s", s.offered) } else { "max".into() },
            s.write_rate,
            s.apply_rate,
            s.write_rate_2,
            s.apply_rate_2,
            s.growth,
            s.wire_rate / 1e6,
            s.backlog_end,
            s.backlog_max,
            s.overflows,
            s.dropped,
            s.drain.map_or("timeout".into(), |d| d.as_millis().to_string()),
            if pair.is_none() { "plain" } else if s.kept_up() { "kept up" } else { "fell behind" }
        );
        let kept = pair.is_none() || s.kept_up();
        let next = 0.9 * s.apply_rate_2.min(s.write_rate_2);
        if kept {
            best = Some(s);
            break;
        }
        rate = if rate > 0.0 {
            (0.8 * rate).min(next)
        } else {
            next
        };
    }
    if let Some(out) = a.opts.get("timeline") {
        std::fs::write(out, timeline)?;
    }
    // One machine-readable line for the script.
    match best {
        Some(s) => println!(
            "RESULT {label} size {size} max_write {first_write_rate:.0} sustained {:.0} entries_per_s {:.0} value_mb_per_s {:.2} wire_mb_per_s {:.2} backlog_max {} lag_max_ms {:.1} drain_ms {}",
            s.write_rate,
            s.apply_rate,
            s.apply_rate * size as f64 / 1e6,
            s.wire_rate / 1e6,
            s.backlog_max,
            s.backlog_max as f64 * 1e3 / s.write_rate,
            s.drain.map_or(-1, |d| d.as_millis() as i64),
        ),
        None => println!(
            "RESULT {label} size {size} max_write {first_write_rate:.0} sustained 0 entries_per_s 0 value_mb_per_s 0 wire_mb_per_s 0 backlog_max -1 lag_max_ms -1 drain_ms -1"
        ),
    }
    Ok(())
}

fn main() {
    let mut raw = std::env::args().skip(1);
    let cmd = raw.next().unwrap_or_default();
    let result = Args::parse(raw).and_then(|a| match cmd.as_str() {
        "lag" => cmd_lag(&a),
        "saturate" => cmd_saturate(&a),
        "fill" => cmd_fill(&a),
        _ => Err(
            "usage: lagbench lag|saturate|fill [--option value]... (see the source's header)"
                .into(),
        ),
    });
    if let Err(e) = result {
        eprintln!("lagbench {cmd}: {e}");
        std::process::exit(1);
    }
}
