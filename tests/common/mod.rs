//! Test harness: real redis-server processes with the built module, on loopback.
//! Each node gets a private directory, free ports, and is killed on drop.
#![allow(dead_code)]

pub mod merging;
pub mod peer;
pub mod proxy;
pub mod writers;

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use redis::Connection;

/// Path of the built module: `$RDMASYNC_SO`, else `target/debug/librdmasync.so`
/// (cargo builds the cdylib alongside the integration tests).
pub fn module_path() -> PathBuf {
    let path = std::env::var_os("RDMASYNC_SO")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/debug/librdmasync.so")
        });
    assert!(
        path.exists(),
        "module not built at {} (run cargo build, or set RDMASYNC_SO)",
        path.display()
    );
    if std::env::var_os("RDMASYNC_SO").is_none() {
        // cargo test builds the rlib, not the cdylib: refuse a stale module.
        let built = std::fs::metadata(&path).and_then(|m| m.modified()).unwrap();
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
        let newest = newest_mtime(&src);
        assert!(
            built >= newest,
            "{} is older than the sources: run cargo build first",
            path.display()
        );
    }
    path
}

fn newest_mtime(dir: &std::path::Path) -> std::time::SystemTime {
    let mut newest = std::time::SystemTime::UNIX_EPOCH;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let t = if p.is_dir() {
            newest_mtime(&p)
        } else {
            e.metadata().and_then(|m| m.modified()).unwrap()
        };
        newest = newest.max(t);
    }
    newest
}

/// The redis-server binary: `$REDIS_SERVER` or `redis-server` on PATH.
pub fn redis_server() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

/// A port nobody listens on right now, on any address (a wildcard bind
/// conflicts with every address's listeners). Taken below the kernel's
/// ephemeral range (32768 and up), so that outgoing connections, which get
/// their local port from that range, cannot grab it before the server binds it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = 20_000 + (std::process::id() * 97) % 12_000;
    for _ in 0..12_000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (20_000 + (base - 20_000 + n * 7) % 12_000) as u16;
        if TcpListener::bind(("0.0.0.0", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port below the ephemeral range")
}

/// The address nodes bind and dial: `$RDMASYNC_TEST_IP` (the Soft-RoCE guest
/// sets its rxe address) or loopback.
pub fn test_ip() -> String {
    std::env::var("RDMASYNC_TEST_IP").unwrap_or_else(|_| "127.0.0.1".into())
}

/// B's address when the pair spans two addresses (`$RDMASYNC_TEST_IP_B`,
/// set for the Soft-RoCE `pair` topology), else the same as A's.
pub fn test_ip_b() -> String {
    std::env::var("RDMASYNC_TEST_IP_B").unwrap_or_else(|_| test_ip())
}

/// The transport under test: `$RDMASYNC_TEST_TRANSPORT` or `tcp`.
pub fn test_transport() -> String {
    std::env::var("RDMASYNC_TEST_TRANSPORT").unwrap_or_else(|_| "tcp".into())
}

/// Polls `f` until it returns true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// One redis-server process; killed (SIGKILL) and reaped on drop.
pub struct Node {
    pub name: String,
    pub port: u16,
    pub dir: PathBuf,
    pub args: Vec<String>,
    /// The server binary it runs.
    pub server: String,
    child: Option<Child>,
}

impl Node {
    /// Starts redis-server on a free port with extra `args` (e.g. `--loadmodule ...`).
    pub fn start(name: &str, args: Vec<String>) -> Node {
        Self::start_on(&redis_server(), name, args)
    }

    /// Starts the server binary `server` (a mixed pair: each node its own).
    pub fn start_on(server: &str, name: &str, args: Vec<String>) -> Node {
        let dir = std::env::temp_dir().join(format!(
            "rdmasync-test-{}-{}-{}",
            std::process::id(),
            name,
            free_port()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut node = Node {
            name: name.into(),
            port: free_port(),
            dir,
            args,
            server: server.to_string(),
            child: None,
        };
        node.spawn();
        node.connect_retry();
        node
    }

    fn spawn(&mut self) {
        let child = Command::new(&self.server)
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg("no")
            .args([
                "--enable-debug-command",
                "yes",
                "--enable-module-command",
                "yes",
            ])
            .args(["--repl-diskless-sync-delay", "0"])
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start redis-server (is it installed?)");
        self.child = Some(child);
    }

    fn connect_retry(&mut self) {
        let ok = wait_until(Duration::from_secs(10), || {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!(
                    "{} exited with {status} during start; log:\n{}",
                    self.name,
                    self.log()
                );
            }
            self.try_conn()
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c).ok())
                .is_some()
        });
        assert!(
            ok,
            "{} did not answer PING; log:\n{}",
            self.name,
            self.log()
        );
    }

    fn try_conn(&self) -> Option<Connection> {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .ok()?
            .get_connection_with_timeout(Duration::from_secs(5))
            .ok()
    }

    /// A new client connection.
    pub fn conn(&self) -> Connection {
        self.try_conn()
            .unwrap_or_else(|| panic!("cannot connect to {}", self.name))
    }

    /// Contents of the server log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// Server process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// SIGKILLs the server and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kills and starts the server again with the same port, dir and args.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
        self.connect_retry();
    }

    /// `RDMASYNC.STATUS` as strings.
    pub fn status(&self) -> HashMap<String, String> {
        let mut c = self.conn();
        let v: Vec<redis::Value> = redis::cmd("RDMASYNC.STATUS").query(&mut c).unwrap();
        let mut m = HashMap::new();
        for pair in v.chunks(2) {
            let k: String = redis::from_redis_value(&pair[0]).unwrap();
            let val: String = match &pair[1] {
                redis::Value::Int(i) => i.to_string(),
                other => redis::from_redis_value(other).unwrap(),
            };
            m.insert(k, val);
        }
        m
    }

    /// One numeric status field.
    pub fn stat(&self, field: &str) -> u64 {
        self.status()
            .get(field)
            .unwrap_or_else(|| panic!("no status field {field}"))
            .parse()
            .unwrap()
    }

    /// `merge_fallbacks` counted under `reason` (`merge_fallbacks_by_reason`);
    /// panics when the reasons do not add up to the total.
    pub fn fallbacks_for(&self, reason: &str) -> u64 {
        let status = self.status();
        let by_reason: Vec<(String, u64)> = status
            .get("merge_fallbacks_by_reason")
            .expect("no merge_fallbacks_by_reason")
            .split(',')
            .map(|kv| {
                let (k, v) = kv.split_once('=').expect("reason=count");
                (k.to_owned(), v.parse().expect("a count"))
            })
            .collect();
        let total: u64 = by_reason.iter().map(|(_, n)| n).sum();
        assert_eq!(
            Some(total.to_string().as_str()),
            status.get("merge_fallbacks").map(String::as_str),
            "the reasons do not add up to merge_fallbacks: {status:?}"
        );
        by_reason
            .into_iter()
            .find(|(k, _)| k == reason)
            .unwrap_or_else(|| panic!("no reason {reason}: {status:?}"))
            .1
    }

    /// Syncs this node sent its peer: of its whole keyspace (`full_syncs`)
    /// or since the peer's watermark (`since_syncs`).
    pub fn syncs_sent(&self) -> u64 {
        self.stat("full_syncs") + self.stat("since_syncs")
    }

    /// The module's listen port (from `listen-port=`).
    pub fn listen_port(&self) -> u16 {
        self.args
            .iter()
            .find_map(|a| a.strip_prefix("listen-port="))
            .expect("listen-port= in the node's arguments")
            .parse()
            .unwrap()
    }

    /// A figure from /proc/<pid>/status in KiB (`VmRSS`, `VmHWM`).
    pub fn proc_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc status"))
    }

    /// Lines of the log containing `needle`.
    pub fn log_count(&self, needle: &str) -> usize {
        self.log().lines().filter(|l| l.contains(needle)).count()
    }

    /// Points this node's module at another peer port (`CONFIG SET rdmasync.port`).
    pub fn set_peer_port(&self, port: &str) {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("rdmasync.port")
            .arg(port)
            .query(&mut self.conn())
            .unwrap();
    }

    /// Makes the module's reads of keys starting with `prefix` fail
    /// (`RDMASYNC.DEBUG FAIL-READS`); `None` ends it.
    pub fn fail_reads(&self, prefix: Option<&str>) {
        let mut cmd = redis::cmd("RDMASYNC.DEBUG");
        match prefix {
            Some(p) => cmd.arg("FAIL-READS").arg("SET").arg(p),
            None => cmd.arg("FAIL-READS").arg("CLEAR"),
        };
        let _: () = cmd.query(&mut self.conn()).unwrap();
    }

    /// `RDMASYNC.DEBUG HOLD-SENDS ON|OFF`: while on, the module's sender
    /// leaves queued batches in the queue (no keepalives either: held over
    /// 5 s, the peer drops the link).
    pub fn hold_sends(&self, on: bool) {
        let _: () = redis::cmd("RDMASYNC.DEBUG")
            .arg("HOLD-SENDS")
            .arg(if on { "ON" } else { "OFF" })
            .query(&mut self.conn())
            .unwrap();
    }

    /// Whether the server process has exited on its own.
    pub fn has_exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// `RDMASYNC.DEBUG <words>` (fault hooks), which must answer OK.
    pub fn debug(&self, words: &[&str]) {
        let _: () = redis::cmd("RDMASYNC.DEBUG")
            .arg(words)
            .query(&mut self.conn())
            .unwrap_or_else(|e| panic!("RDMASYNC.DEBUG {words:?}: {e}"));
    }

    /// `DEBUG DIGEST`.
    pub fn digest(&self) -> String {
        redis::cmd("DEBUG")
            .arg("DIGEST")
            .query(&mut self.conn())
            .unwrap()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!(
                "--- {} log ({}):\n{}",
                self.name,
                self.dir.display(),
                self.log()
            );
        }
    }
}

/// Module arguments for a node on the test address whose peer is on the same address.
pub fn module_args(listen: u16, peer_port: u16, extra: &[&str]) -> Vec<String> {
    module_args_at(&test_ip(), listen, &test_ip(), peer_port, extra)
}

/// Module arguments for a node bound to `ip` whose peer is `peer_ip:peer_port`.
pub fn module_args_at(
    ip: &str,
    listen: u16,
    peer_ip: &str,
    peer_port: u16,
    extra: &[&str],
) -> Vec<String> {
    let mut v = vec![
        "--loadmodule".to_string(),
        module_path().display().to_string(),
        format!("peer={peer_ip}"),
        format!("port={peer_port}"),
        format!("listen-port={listen}"),
        format!("bind={ip}"),
        format!("transport={}", test_transport()),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// The `field` line of `INFO section` on `node` ("" when absent).
/// Whether `node`'s server names a filtered command's client to modules
/// (Redis 7.2 and later, and Valkey, which reports a Redis version of 7.2):
/// then the module sees which commands are queued in MULTI.
pub fn filter_names_clients(node: &Node) -> bool {
    let version = info_field(node, "server", "redis_version");
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (7, 2)
}

pub fn info_field(node: &Node, section: &str, field: &str) -> String {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query(&mut node.conn())
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Module args that ship every write as its whole key, last writer wins
/// (the merges off): the tests of the whole-value paths (big values read a
/// slice at a time, hot keys at rest, DUMP payloads) state them, since with
/// the merges on a hash, set or sorted set changed by element ships those
/// elements and reads nothing whole. Lists, strings and streams take those
/// paths either way.
pub const WHOLE_KEYS: [&str; 2] = ["merge-counters=no", "merge-elements=no"];

/// Two nodes with the module, each the other's peer.
pub struct Pair {
    pub a: Node,
    pub b: Node,
}

impl Pair {
    /// Starts A and B (extra module args per node) and waits until both links are up.
    pub fn start_with(a_extra: &[&str], b_extra: &[&str]) -> Pair {
        let (pa, pb) = (free_port(), free_port());
        let (ia, ib) = (test_ip(), test_ip_b());
        let a = Node::start("a", module_args_at(&ia, pa, &ib, pb, a_extra));
        let b = Node::start("b", module_args_at(&ib, pb, &ia, pa, b_extra));
        let pair = Pair { a, b };
        pair.wait_linked();
        pair
    }

    /// Starts A and B with the same server arguments (`--appendonly yes`,
    /// `--rename-command ...`) and extra module arguments, without waiting
    /// for the link.
    pub fn start_with_server_args(server: &[&str], extra: &[&str]) -> Pair {
        let (pa, pb) = (free_port(), free_port());
        let (ia, ib) = (test_ip(), test_ip_b());
        let args = |mine: (&str, u16), peer: (&str, u16)| {
            let mut v: Vec<String> = server.iter().map(|s| s.to_string()).collect();
            v.extend(module_args_at(mine.0, mine.1, peer.0, peer.1, extra));
            v
        };
        Pair {
            a: Node::start("a", args((&ia, pa), (&ib, pb))),
            b: Node::start("b", args((&ib, pb), (&ia, pa))),
        }
    }

    /// Starts A and B (the same extra module args for both), each with an
    /// AOF written at every change, and waits until they are in step.
    pub fn start_with_aof(extra: &[&str]) -> Pair {
        let aof = ["--appendonly", "yes", "--appendfsync", "always"];
        let pair = Self::start_with_server_args(&aof, extra);
        pair.wait_in_step();
        pair
    }

    /// Starts A and B without waiting for the link.
    pub fn start_unlinked(a_extra: &[&str], b_extra: &[&str]) -> Pair {
        let (pa, pb) = (free_port(), free_port());
        let (ia, ib) = (test_ip(), test_ip_b());
        let a = Node::start("a", module_args_at(&ia, pa, &ib, pb, a_extra));
        let b = Node::start("b", module_args_at(&ib, pb, &ia, pa, b_extra));
        Pair { a, b }
    }

    /// A pair with default arguments.
    pub fn start() -> Pair {
        Self::start_with(&[], &[])
    }

    /// A pair that ships every write as its whole key (`WHOLE_KEYS`), with
    /// `a_extra` and `b_extra` as well.
    pub fn start_whole_keys(a_extra: &[&str], b_extra: &[&str]) -> Pair {
        let a: Vec<&str> = WHOLE_KEYS.iter().chain(a_extra).copied().collect();
        let b: Vec<&str> = WHOLE_KEYS.iter().chain(b_extra).copied().collect();
        Self::start_with(&a, &b)
    }

    /// Waits until both nodes report `link` = `up`.
    pub fn wait_linked(&self) {
        let ok = wait_until(Duration::from_secs(20), || {
            self.a.status()["link"] == "up" && self.b.status()["link"] == "up"
        });
        assert!(
            ok,
            "link did not come up: a={:?} b={:?}",
            self.a.status(),
            self.b.status()
        );
    }

    /// Waits until both nodes finished their first-contact syncs (each
    /// full-syncs its dataset to the other at link-up) and nothing is
    /// pending, so that what a test writes next travels only as live
    /// changes.
    pub fn wait_in_step(&self) {
        self.wait_linked();
        let settled = |n: &Node| {
            let s = n.status();
            (s["full_syncs"] != "0" || s["since_syncs"] != "0")
                && s["sync_in_progress"] == "0"
                && s["lag_entries"] == "0"
                // Its first-contact request acknowledged: resent on a
                // later link it would ask for a full sync again.
                && s["peer_state"] == "streaming"
        };
        let ok = wait_until(Duration::from_secs(20), || {
            settled(&self.a) && settled(&self.b)
        });
        assert!(
            ok,
            "first-contact syncs did not finish: a={:?} b={:?}",
            self.a.status(),
            self.b.status()
        );
    }

    /// Waits until the pair has settled: both links up, nothing queued,
    /// in flight or syncing on either node, and the digests equal at two
    /// polls in a row. Equal digests alone can be a moment of a link
    /// still reconnecting: a CI run of merges.rs found both nodes missing
    /// the other's last two rounds of increments, the same amount on both,
    /// 0.25 s after a link dropped (each held 2,418 of 2,480).
    pub fn wait_settled(&self, timeout: Duration) -> String {
        let quiet = |n: &Node| {
            let s = n.status();
            s["link"] == "up"
                && s["backlog"] == "0"
                && s["lag_entries"] == "0"
                && s["sync_in_progress"] == "0"
        };
        let mut last = (String::new(), String::new());
        let mut seen_equal = None;
        let ok = wait_until(timeout, || {
            let settled = quiet(&self.a) && quiet(&self.b);
            if !settled {
                // No digest while busy: on big values it costs the nodes
                // much of the time they need to settle.
                seen_equal = None;
                return false;
            }
            let (da, db) = (self.a.digest(), self.b.digest());
            let stable = settled && da == db && seen_equal.as_ref() == Some(&da);
            seen_equal = (settled && da == db).then(|| da.clone());
            last = (da, db);
            stable
        });
        assert!(
            ok,
            "the pair did not settle in {timeout:?}: digests a={} b={}; a={:?} b={:?}; {}",
            last.0,
            last.1,
            self.a.status(),
            self.b.status(),
            key_differences(&self.a, &self.b)
        );
        last.0
    }

    /// Waits until both digests are equal; returns it.
    pub fn wait_converged(&self, timeout: Duration) -> String {
        let mut last = String::new();
        let ok = wait_until(timeout, || {
            let (da, db) = (self.a.digest(), self.b.digest());
            last = format!("a={da} b={db}");
            da == db
        });
        assert!(
            ok,
            "digests differ after {timeout:?}: {last}; {}",
            key_differences(&self.a, &self.b)
        );
        self.a.digest()
    }
}

/// The command that reads the whole value of `key`, a key of type `kind`
/// (what `TYPE` answered); `None` for a type without one here.
pub fn value_read(kind: &str, key: &str) -> Option<redis::Cmd> {
    let mut cmd = match kind {
        "string" => redis::cmd("GET"),
        "hash" => redis::cmd("HGETALL"),
        "set" => redis::cmd("SMEMBERS"),
        "zset" => redis::cmd("ZRANGE"),
        "list" => redis::cmd("LRANGE"),
        "stream" => redis::cmd("XRANGE"),
        _ => return None,
    };
    cmd.arg(key);
    match kind {
        "zset" => cmd.arg(0).arg(-1).arg("WITHSCORES"),
        "list" => cmd.arg(0).arg(-1),
        "stream" => cmd.arg("-").arg("+"),
        _ => &mut cmd,
    };
    Some(cmd)
}

/// The keys (database, name) whose DUMP differs between two nodes, the
/// first few, to say what a digest mismatch is made of.
pub fn key_differences(a: &Node, b: &Node) -> String {
    let dumps = |node: &Node, db: i64| -> std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>> {
        let mut c = node.conn();
        let _: () = redis::cmd("SELECT").arg(db).query(&mut c).unwrap();
        let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
            .arg("*")
            .query(&mut c)
            .unwrap_or_default();
        keys.into_iter()
            .map(|k| {
                let d: Option<Vec<u8>> = redis::cmd("DUMP").arg(&k).query(&mut c).ok().flatten();
                (k, d)
            })
            .collect()
    };
    let mut out = Vec::new();
    for db in 0..16 {
        let (da, dbb) = (dumps(a, db), dumps(b, db));
        for key in da
            .keys()
            .chain(dbb.keys())
            .collect::<std::collections::BTreeSet<_>>()
        {
            let (x, y) = (da.get(key), dbb.get(key));
            if x != y && out.len() < 8 {
                let show = |v: Option<&Option<Vec<u8>>>| match v {
                    None => "absent".to_owned(),
                    Some(d) => format!("{} bytes", d.as_ref().map_or(0, Vec::len)),
                };
                out.push(format!(
                    "db {db} {:?}: a {} b {}",
                    String::from_utf8_lossy(key),
                    show(x),
                    show(y)
                ));
            }
        }
    }
    format!("differing keys: [{}]", out.join(", "))
}

/// Pings a node every few milliseconds on its own connection until dropped;
/// records each round trip.
pub struct PingMonitor {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<Duration>>>,
}

impl PingMonitor {
    pub fn start(node: &Node) -> PingMonitor {
        let mut c = node.conn();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut rtts = Vec::new();
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                let pong: String = redis::cmd("PING").query(&mut c).unwrap();
                assert_eq!(pong, "PONG");
                rtts.push(t.elapsed());
                std::thread::sleep(Duration::from_millis(5));
            }
            rtts
        });
        PingMonitor {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops; returns (count, p50, p99, max).
    pub fn finish(mut self) -> (usize, Duration, Duration, Duration) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut rtts = self.thread.take().unwrap().join().unwrap();
        rtts.sort();
        let at = |q: f64| rtts[((rtts.len() - 1) as f64 * q) as usize];
        (rtts.len(), at(0.5), at(0.99), *rtts.last().unwrap())
    }
}

/// A port no test ever listens on (they take theirs from [`free_port`]'s
/// range): a node pointed at it stays unlinked. A port that is merely free
/// now could be taken by another test's node, which the cut node would
/// then link with and exchange data.
pub const NOWHERE_PORT: &str = "1";

/// Cuts the link of `pair`: both nodes dial a port nobody listens on, and
/// the connection between them is dropped.
pub fn cut(pair: &Pair) {
    let nowhere = NOWHERE_PORT;
    pair.a.set_peer_port(nowhere);
    pair.b.set_peer_port(nowhere);
    assert!(
        wait_until(Duration::from_secs(10), || pair.a.status()["link"] != "up"
            && pair.b.status()["link"] != "up"),
        "the link stayed up"
    );
}

/// Points both nodes back at each other and waits for the link.
pub fn heal(pair: &Pair) {
    for (n, peer) in [(&pair.a, &pair.b), (&pair.b, &pair.a)] {
        let port = peer
            .args
            .iter()
            .find_map(|a| a.strip_prefix("listen-port="))
            .unwrap();
        n.set_peer_port(port);
    }
    pair.wait_linked();
}
