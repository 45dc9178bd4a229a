//! Typed, validated module arguments (`loadmodule librdmasync.so peer=.. port=..`).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::proto::auth::{Secret, MAX_SECRET_LEN};

pub use crate::proto::ring::{MAX_RING_SIZE, MIN_RING_SIZE};
/// Default ring size (8 MiB).
pub const DEFAULT_RING_SIZE: u64 = 8 << 20;
/// Default bound of the capture queue, in batches.
pub const DEFAULT_QUEUE_SIZE: usize = 4096;
/// Largest accepted queue bound, in batches.
pub const MAX_QUEUE_SIZE: usize = 1 << 20;

/// Default handshake timeout, in milliseconds.
pub const DEFAULT_HANDSHAKE_TIMEOUT_MS: u64 = 5000;
/// Shortest and longest handshake timeout, in milliseconds.
pub const MIN_HANDSHAKE_TIMEOUT_MS: u64 = 100;
/// Longest handshake timeout, in milliseconds.
pub const MAX_HANDSHAKE_TIMEOUT_MS: u64 = 60_000;

/// Every argument that is also a config, in the order `CONFIG GET
/// rdmasync.*` lists them.
pub const ARG_NAMES: [&str; 21] = [
    "peer",
    "port",
    "listen-port",
    "bind",
    "transport",
    "node-id",
    "ring-size",
    "queue-size",
    "secret-file",
    "handshake-timeout",
    "tls",
    "tls-cert-file",
    "tls-key-file",
    "tls-ca-cert-file",
    "backlog-ops",
    "persist-versions",
    "hot-key-rest",
    "max-clock-offset",
    "max-tombstones",
    "merge-counters",
    "merge-elements",
];

/// The name `merge-elements` had while it covered hashes only: still
/// accepted at load, for the same setting.
pub const MERGE_ELEMENTS_ALIAS: &str = "merge-hashes";

/// Default bound of the catch-up backlog, in changes.
pub const DEFAULT_BACKLOG_OPS: usize = 1_000_000;
/// Largest accepted backlog bound.
pub const MAX_BACKLOG_OPS: usize = 100_000_000;

/// Default bound of this node's tombstones kept for an absent peer.
pub const DEFAULT_MAX_TOMBSTONES: usize = 1_000_000;
/// Smallest and largest accepted `max-tombstones`.
pub const MIN_MAX_TOMBSTONES: usize = 100;
/// See [`MIN_MAX_TOMBSTONES`].
pub const MAX_MAX_TOMBSTONES: usize = 1_000_000_000;

/// Default longest rest of a key costly to snapshot, in milliseconds.
pub const DEFAULT_HOT_KEY_REST_MS: u64 = 100;
/// Largest accepted `hot-key-rest`.
pub const MAX_HOT_KEY_REST_MS: u64 = 10_000;

/// Default bound of a peer's clock offset, in milliseconds.
pub const DEFAULT_MAX_CLOCK_OFFSET_MS: u64 = 10_000;
/// Smallest and largest accepted `max-clock-offset`, in milliseconds.
pub const MIN_MAX_CLOCK_OFFSET_MS: u64 = 100;
/// Largest accepted `max-clock-offset` (one day).
pub const MAX_MAX_CLOCK_OFFSET_MS: u64 = 86_400_000;

/// The one argument that is not a config: `CONFIG GET` must never show it.
pub const SECRET_ARG: &str = "secret";

/// The name an argument is known by (`merge-hashes`: `merge-elements`).
fn canonical(name: &str) -> &str {
    match name {
        MERGE_ELEMENTS_ALIAS => "merge-elements",
        other => other,
    }
}

fn is_known(name: &str) -> bool {
    name == SECRET_ARG || name == MERGE_ELEMENTS_ALIAS || ARG_NAMES.contains(&name)
}

/// The known arguments for an error message: the configs, with the secret
/// beside its file.
fn known_list() -> String {
    let mut names: Vec<&str> = Vec::with_capacity(ARG_NAMES.len() + 1);
    for name in ARG_NAMES {
        if name == "secret-file" {
            names.push(SECRET_ARG);
        }
        names.push(name);
    }
    names.join(", ")
}

/// Checks the shape of `name=value` arguments (known names, given once)
/// without requiring any; returns them as pairs.
///
/// # Errors
/// [`Error::Config`] naming the first malformed, unknown or repeated argument.
pub fn split_args<S: AsRef<str>>(args: &[S]) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    for raw in args {
        let raw = raw.as_ref();
        let Some((name, value)) = raw.split_once('=') else {
            return Err(bad(raw, "expected name=value"));
        };
        if !is_known(name) {
            return Err(bad(
                name,
                format!("unknown argument (known: {})", known_list()),
            ));
        }
        let name = canonical(name);
        if out.iter().any(|(n, _)| n == name) {
            return Err(bad(name, "given more than once"));
        }
        out.push((name.to_owned(), value.to_owned()));
    }
    Ok(out)
}

/// Settings that may change while the module runs (`CONFIG SET`): where the
/// peer is. The link re-dials; nothing else depends on them.
pub const RUNTIME_ARGS: [&str; 2] = ["peer", "port"];

/// Validates one argument on its own.
///
/// # Errors
/// [`Error::Config`] naming the argument, as at load.
pub fn check_value(name: &str, value: &str) -> Result<()> {
    let mut args: Vec<String> = vec!["peer=127.0.0.1".into(), "port=1".into()];
    args.retain(|a| !a.starts_with(&format!("{name}=")));
    args.push(format!("{name}={value}"));
    parse_args(&args).map(|_| ())
}

/// Which transport moves frames into the peer's ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportChoice {
    /// RDMA when a usable device exists, else TCP.
    Auto,
    /// RDMA verbs only.
    Rdma,
    /// The TCP emulation of the ring protocol.
    Tcp,
}

impl TransportChoice {
    /// The spelling used in arguments and `RDMASYNC.STATUS`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Rdma => "rdma",
            Self::Tcp => "tcp",
        }
    }
}

/// The module's configuration, validated at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Host name or address of the peer module.
    pub peer_host: String,
    /// Port the peer module listens on.
    pub peer_port: u16,
    /// Port this module listens on.
    pub listen_port: u16,
    /// Address this module listens on.
    pub bind: IpAddr,
    /// Requested transport.
    pub transport: TransportChoice,
    /// Explicit node id; `None` derives a stable one (see `clock::default_node_id`).
    pub node_id: Option<u64>,
    /// Bytes of the receive ring this node registers for its peer; a power of two.
    pub ring_size: u64,
    /// Capacity of the capture queue, in batches.
    pub queue_size: usize,
    /// Changes kept for a partial resync while the peer is away; beyond
    /// that a full sync follows.
    pub backlog_ops: usize,
    /// Keep key versions and tombstones in the RDB (module aux data).
    pub persist_versions: bool,
    /// Longest rest of a key costly to snapshot, in milliseconds (0: never
    /// rest, ship every change at the end of its event-loop iteration).
    pub hot_key_rest_ms: u64,
    /// Furthest a peer's clock may be ahead of this node's, in
    /// milliseconds: a peer beyond it is refused at the handshake, an entry
    /// stamped beyond it stops the link (it is neither applied nor
    /// acknowledged).
    pub max_clock_offset_ms: u64,
    /// Tombstones of this node's deletes kept while the peer has not
    /// acknowledged them; beyond that the oldest are dropped and the peer
    /// gets a full sync that sweeps (deletes what they deleted).
    pub max_tombstones: usize,
    /// Ship `INCR`, `DECR`, `INCRBY` and `DECRBY` as increments, so that
    /// those made on both nodes at once all count (issue 27; on by
    /// default, `merge-counters=no` ships each as a write of its value).
    pub merge_counters: bool,
    /// `merge-elements=yes|no` (also `merge-hashes`): changes of hash
    /// fields, set members and sorted-set members (HSET, HDEL, SADD, SREM,
    /// ZADD, ZREM...) and list pushes (LPUSH, RPUSH) ship as the elements
    /// they changed, merged per element on both nodes (issue 27; on by
    /// default, `merge-elements=no` ships the key whole, last writer wins).
    pub merge_elements: bool,
    /// The shared secret (`secret=` or the contents of `secret-file=`).
    pub secret: Option<Secret>,
    /// Where the secret was read from, if from a file.
    pub secret_file: Option<PathBuf>,
    /// A connection that has not completed the handshake by then is dropped.
    pub handshake_timeout_ms: u64,
    /// TLS on the TCP transport.
    pub tls: bool,
    /// This node's certificate chain (PEM).
    pub tls_cert_file: Option<PathBuf>,
    /// This node's private key (PEM).
    pub tls_key_file: Option<PathBuf>,
    /// The CA that signs both nodes' certificates (PEM).
    pub tls_ca_cert_file: Option<PathBuf>,
}

impl Config {
    /// The effective value of every argument, in [`ARG_NAMES`] order, with
    /// `node_id` the id in use (given or derived).
    pub fn effective(&self, node_id: u64) -> [String; ARG_NAMES.len()] {
        [
            self.peer_host.clone(),
            self.peer_port.to_string(),
            self.listen_port.to_string(),
            self.bind.to_string(),
            self.transport.as_str().to_owned(),
            node_id.to_string(),
            self.ring_size.to_string(),
            self.queue_size.to_string(),
            path_text(self.secret_file.as_deref()),
            self.handshake_timeout_ms.to_string(),
            if self.tls { "yes" } else { "no" }.to_owned(),
            path_text(self.tls_cert_file.as_deref()),
            path_text(self.tls_key_file.as_deref()),
            path_text(self.tls_ca_cert_file.as_deref()),
            self.backlog_ops.to_string(),
            if self.persist_versions { "yes" } else { "no" }.to_owned(),
            self.hot_key_rest_ms.to_string(),
            self.max_clock_offset_ms.to_string(),
            self.max_tombstones.to_string(),
            if self.merge_counters { "yes" } else { "no" }.to_owned(),
            if self.merge_elements { "yes" } else { "no" }.to_owned(),
        ]
    }

    /// What the log should warn about at load (never the secret itself).
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.secret.is_none() {
            out.push(format!(
                "no secret configured (secret= or secret-file=): peers are not authenticated{}; \
                 anyone who can reach port {} can replicate into this node",
                if self.tls {
                    " except by their TLS certificate"
                } else {
                    ""
                },
                self.listen_port
            ));
        }
        if let Some(path) = &self.secret_file {
            use std::os::unix::fs::PermissionsExt;
            if let Ok(meta) = std::fs::metadata(path) {
                if meta.permissions().mode() & 0o077 != 0 {
                    out.push(format!(
                        "secret-file {} is readable by group or others; chmod 600 it",
                        path.display()
                    ));
                }
            }
        }
        out
    }

    /// `peer:port` as given, for dialing and display.
    pub fn peer_addr(&self) -> String {
        if self.peer_host.contains(':') {
            format!("[{}]:{}", self.peer_host, self.peer_port)
        } else {
            format!("{}:{}", self.peer_host, self.peer_port)
        }
    }
}

fn path_text(p: Option<&Path>) -> String {
    p.map(|p| p.display().to_string()).unwrap_or_default()
}

fn bad(arg: &str, reason: impl Into<String>) -> Error {
    Error::Config {
        arg: arg.to_owned(),
        reason: reason.into(),
    }
}

fn parse_port(arg: &str, value: &str) -> Result<u16> {
    match value.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(bad(
            arg,
            format!("must be a port number 1-65535, got '{value}'"),
        )),
    }
}

/// Parses `8388608`, `64kb`, `8mb`, `1gb` (Redis-style units, 1024-based).
fn parse_size(arg: &str, value: &str) -> Result<u64> {
    let lower = value.to_ascii_lowercase();
    let (digits, unit) = match lower.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => lower.split_at(i),
        None => (lower.as_str(), ""),
    };
    let mult: u64 = match unit {
        "" | "b" => 1,
        "k" | "kb" => 1 << 10,
        "m" | "mb" => 1 << 20,
        "g" | "gb" => 1 << 30,
        _ => {
            return Err(bad(
                arg,
                format!("unknown unit in '{value}' (use kb, mb, gb)"),
            ))
        }
    };
    digits
        .parse::<u64>()
        .ok()
        .filter(|_| !digits.is_empty())
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| bad(arg, format!("not a size: '{value}'")))
}

/// A file the module reads at load: it must exist and be a regular file.
fn parse_file(arg: &str, value: &str) -> Result<PathBuf> {
    let path = PathBuf::from(value);
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => Ok(path),
        Ok(_) => Err(bad(arg, format!("'{value}' is not a regular file"))),
        Err(e) => Err(bad(arg, format!("cannot read '{value}': {e}"))),
    }
}

/// Reads a secret file: one trailing newline is not part of the secret.
fn read_secret_file(arg: &str, value: &str) -> Result<(Secret, PathBuf)> {
    let path = parse_file(arg, value)?;
    let too_big = std::fs::metadata(&path).map_or(true, |m| m.len() > MAX_SECRET_LEN as u64 + 2);
    if too_big {
        return Err(bad(
            arg,
            format!("'{value}' is larger than a secret may be ({MAX_SECRET_LEN} bytes)"),
        ));
    }
    let mut bytes =
        std::fs::read(&path).map_err(|e| bad(arg, format!("cannot read '{value}': {e}")))?;
    if bytes.ends_with(b"\n") {
        bytes.pop();
        if bytes.ends_with(b"\r") {
            bytes.pop();
        }
    }
    let secret =
        Secret::new(bytes).map_err(|why| bad(arg, format!("secret in '{value}' is {why}")))?;
    Ok((secret, path))
}

/// Parses the module's `key=value` arguments.
///
/// # Errors
/// [`Error::Config`] naming the first argument that is unknown, repeated,
/// missing or out of range.
pub fn parse_args<S: AsRef<str>>(args: &[S]) -> Result<Config> {
    let mut draft = Draft::default();
    let mut seen: Vec<&str> = Vec::new();
    for raw in args {
        let raw = raw.as_ref();
        let Some((name, value)) = raw.split_once('=') else {
            return Err(bad(raw, "expected name=value"));
        };
        let name = canonical(name);
        if seen.contains(&name) {
            return Err(bad(name, "given more than once"));
        }
        seen.push(name);
        if value.is_empty() {
            return Err(bad(name, "empty value"));
        }
        draft.take(name, value)?;
    }
    draft.finish()
}

/// The arguments seen so far; `finish` checks what they need together.
#[derive(Default)]
struct Draft {
    peer_host: Option<String>,
    peer_port: Option<u16>,
    listen_port: Option<u16>,
    bind: Option<IpAddr>,
    transport: Option<TransportChoice>,
    node_id: Option<u64>,
    ring_size: Option<u64>,
    queue_size: Option<usize>,
    backlog_ops: Option<usize>,
    persist_versions: Option<bool>,
    hot_key_rest_ms: Option<u64>,
    max_clock_offset_ms: Option<u64>,
    max_tombstones: Option<usize>,
    merge_counters: Option<bool>,
    merge_elements: Option<bool>,
    secret: Option<Secret>,
    secret_file: Option<(Secret, PathBuf)>,
    handshake_timeout_ms: Option<u64>,
    tls: Option<bool>,
    tls_cert_file: Option<PathBuf>,
    tls_key_file: Option<PathBuf>,
    tls_ca_cert_file: Option<PathBuf>,
}

impl Draft {
    /// Validates one argument and keeps its value.
    fn take(&mut self, name: &str, value: &str) -> Result<()> {
        match name {
            "peer" => self.peer_host = Some(parse_host(name, value)?),
            "port" => self.peer_port = Some(parse_port(name, value)?),
            "listen-port" => self.listen_port = Some(parse_port(name, value)?),
            "bind" => self.bind = Some(parse_ip(name, value)?),
            "transport" => self.transport = Some(parse_transport(name, value)?),
            "node-id" => self.node_id = Some(int_in(name, value, 1, u64::MAX, "")?),
            "ring-size" => self.ring_size = Some(parse_ring_size(name, value)?),
            "queue-size" => {
                self.queue_size = Some(count_in(name, value, MAX_QUEUE_SIZE, "batches")?)
            }
            "backlog-ops" => {
                self.backlog_ops = Some(count_in(name, value, MAX_BACKLOG_OPS, "changes")?)
            }
            "hot-key-rest" => {
                self.hot_key_rest_ms = Some(int_in(
                    name,
                    value,
                    0,
                    MAX_HOT_KEY_REST_MS,
                    " (milliseconds)",
                )?)
            }
            "max-tombstones" => self.max_tombstones = Some(parse_max_tombstones(name, value)?),
            "max-clock-offset" => {
                self.max_clock_offset_ms = Some(int_in(
                    name,
                    value,
                    MIN_MAX_CLOCK_OFFSET_MS,
                    MAX_MAX_CLOCK_OFFSET_MS,
                    " (milliseconds)",
                )?)
            }
            "persist-versions" => self.persist_versions = Some(parse_yes_no(name, value)?),
            "merge-counters" => self.merge_counters = Some(parse_yes_no(name, value)?),
            "merge-elements" => self.merge_elements = Some(parse_yes_no(name, value)?),
            // Never echo the value: it is the secret.
            SECRET_ARG => {
                self.secret =
                    Some(Secret::new(value.as_bytes().to_vec()).map_err(|why| bad(name, why))?)
            }
            "secret-file" => self.secret_file = Some(read_secret_file(name, value)?),
            "handshake-timeout" => {
                self.handshake_timeout_ms = Some(parse_handshake_timeout(name, value)?)
            }
            "tls" => self.tls = Some(parse_yes_no(name, value)?),
            "tls-cert-file" => self.tls_cert_file = Some(parse_file(name, value)?),
            "tls-key-file" => self.tls_key_file = Some(parse_file(name, value)?),
            "tls-ca-cert-file" => self.tls_ca_cert_file = Some(parse_file(name, value)?),
            _ => {
                return Err(bad(
                    name,
                    format!("unknown argument (known: {})", known_list()),
                ))
            }
        }
        Ok(())
    }

    /// Checks what the arguments need together and fills in the defaults.
    fn finish(self) -> Result<Config> {
        if self.secret.is_some() && self.secret_file.is_some() {
            return Err(bad(
                "secret-file",
                "give either secret= or secret-file=, not both",
            ));
        }
        let tls = self.tls.unwrap_or(false);
        if tls {
            for (arg, given) in [
                ("tls-cert-file", self.tls_cert_file.is_some()),
                ("tls-key-file", self.tls_key_file.is_some()),
                ("tls-ca-cert-file", self.tls_ca_cert_file.is_some()),
            ] {
                if !given {
                    return Err(bad(arg, "required with tls=yes"));
                }
            }
        }
        let (secret, secret_file) = match self.secret_file {
            Some((s, path)) => (Some(s), Some(path)),
            None => (self.secret, None),
        };
        let peer_host = self
            .peer_host
            .ok_or_else(|| bad("peer", "required (peer=<ip or host>)"))?;
        let peer_port = self
            .peer_port
            .ok_or_else(|| bad("port", "required (port=<peer's port>)"))?;
        Ok(Config {
            peer_host,
            peer_port,
            listen_port: self.listen_port.unwrap_or(peer_port),
            bind: self.bind.unwrap_or(IpAddr::from([0, 0, 0, 0])),
            transport: self.transport.unwrap_or(TransportChoice::Auto),
            node_id: self.node_id,
            ring_size: self.ring_size.unwrap_or(DEFAULT_RING_SIZE),
            queue_size: self.queue_size.unwrap_or(DEFAULT_QUEUE_SIZE),
            backlog_ops: self.backlog_ops.unwrap_or(DEFAULT_BACKLOG_OPS),
            persist_versions: self.persist_versions.unwrap_or(true),
            hot_key_rest_ms: self.hot_key_rest_ms.unwrap_or(DEFAULT_HOT_KEY_REST_MS),
            max_clock_offset_ms: self
                .max_clock_offset_ms
                .unwrap_or(DEFAULT_MAX_CLOCK_OFFSET_MS),
            max_tombstones: self.max_tombstones.unwrap_or(DEFAULT_MAX_TOMBSTONES),
            merge_counters: self.merge_counters.unwrap_or(true),
            merge_elements: self.merge_elements.unwrap_or(true),
            secret,
            secret_file,
            handshake_timeout_ms: self
                .handshake_timeout_ms
                .unwrap_or(DEFAULT_HANDSHAKE_TIMEOUT_MS),
            tls,
            tls_cert_file: self.tls_cert_file,
            tls_key_file: self.tls_key_file,
            tls_ca_cert_file: self.tls_ca_cert_file,
        })
    }
}

fn parse_host(arg: &str, value: &str) -> Result<String> {
    if value.chars().any(char::is_whitespace) {
        return Err(bad(arg, format!("not a host name or address: '{value}'")));
    }
    Ok(value.to_owned())
}

fn parse_ip(arg: &str, value: &str) -> Result<IpAddr> {
    value
        .parse::<IpAddr>()
        .map_err(|_| bad(arg, format!("not an IP address: '{value}'")))
}

fn parse_transport(arg: &str, value: &str) -> Result<TransportChoice> {
    match value {
        "auto" => Ok(TransportChoice::Auto),
        "rdma" => Ok(TransportChoice::Rdma),
        "tcp" => Ok(TransportChoice::Tcp),
        _ => Err(bad(
            arg,
            format!("must be auto, rdma or tcp, got '{value}'"),
        )),
    }
}

fn parse_yes_no(arg: &str, value: &str) -> Result<bool> {
    match value {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(bad(arg, format!("must be yes or no, got '{value}'"))),
    }
}

/// An integer in `lo..=hi`; `unit` (" (batches)") follows the range in the error.
fn int_in(arg: &str, value: &str, lo: u64, hi: u64, unit: &str) -> Result<u64> {
    match value.parse::<u64>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(bad(
            arg,
            format!("must be an integer {lo}-{hi}{unit}, got '{value}'"),
        )),
    }
}

/// `max-tombstones`: a count in its range.
fn parse_max_tombstones(arg: &str, value: &str) -> Result<usize> {
    let (lo, hi) = (MIN_MAX_TOMBSTONES as u64, MAX_MAX_TOMBSTONES as u64);
    Ok(int_in(arg, value, lo, hi, "")? as usize)
}

/// A count of `unit` in `1..=max`.
fn count_in(arg: &str, value: &str, max: usize, unit: &str) -> Result<usize> {
    let n = int_in(arg, value, 1, max as u64, &format!(" ({unit})"))?;
    usize::try_from(n).map_err(|_| bad(arg, format!("too large: '{value}'")))
}

fn parse_ring_size(arg: &str, value: &str) -> Result<u64> {
    let n = parse_size(arg, value)?;
    if !(MIN_RING_SIZE..=MAX_RING_SIZE).contains(&n) || !n.is_power_of_two() {
        return Err(bad(
            arg,
            format!(
                "must be a power of two between {MIN_RING_SIZE} (64kb) and {MAX_RING_SIZE} (1gb) bytes, got '{value}'"
            ),
        ));
    }
    Ok(n)
}

fn parse_handshake_timeout(arg: &str, value: &str) -> Result<u64> {
    match value.parse::<u64>() {
        Ok(n) if (MIN_HANDSHAKE_TIMEOUT_MS..=MAX_HANDSHAKE_TIMEOUT_MS).contains(&n) => Ok(n),
        _ => Err(bad(
            arg,
            format!(
                "must be milliseconds {MIN_HANDSHAKE_TIMEOUT_MS}-{MAX_HANDSHAKE_TIMEOUT_MS}, got '{value}'"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_hashes_is_the_old_name_of_merge_elements() {
        let c = parse_args(&["peer=127.0.0.1", "port=1", "merge-hashes=yes"]).unwrap();
        assert!(c.merge_elements);
        let given = split_args(&["merge-hashes=yes"]).unwrap();
        assert_eq!(given, vec![("merge-elements".to_owned(), "yes".to_owned())]);
        assert!(split_args(&["merge-hashes=yes", "merge-elements=no"]).is_err());
    }

    fn arg_of(r: Result<Config>) -> String {
        match r {
            Err(Error::Config { arg, .. }) => arg,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn minimal_arguments_take_defaults() {
        let c = parse_args(&["peer=10.0.0.2", "port=7000"]).unwrap();
        assert_eq!(c.peer_host, "10.0.0.2");
        assert_eq!(c.peer_port, 7000);
        assert_eq!(c.listen_port, 7000);
        assert_eq!(c.bind.to_string(), "0.0.0.0");
        assert_eq!(c.transport, TransportChoice::Auto);
        assert_eq!(c.ring_size, DEFAULT_RING_SIZE);
        assert_eq!(c.node_id, None);
    }

    #[test]
    fn every_argument_parses() {
        let c = parse_args(&[
            "peer=host-b",
            "port=7001",
            "listen-port=7000",
            "bind=127.0.0.1",
            "transport=tcp",
            "node-id=42",
            "ring-size=64kb",
            "queue-size=8",
            "backlog-ops=10",
            "persist-versions=no",
            "hot-key-rest=0",
        ])
        .unwrap();
        assert_eq!(c.hot_key_rest_ms, 0);
        assert_eq!(c.listen_port, 7000);
        assert_eq!(c.transport, TransportChoice::Tcp);
        assert_eq!(c.node_id, Some(42));
        assert_eq!(c.ring_size, 65536);
        assert_eq!(c.queue_size, 8);
        assert_eq!(c.peer_addr(), "host-b:7001");
    }

    #[test]
    fn single_values_are_checked_alone() {
        assert!(check_value("peer", "10.0.0.9").is_ok());
        assert!(check_value("port", "7001").is_ok());
        assert_eq!(
            arg_of(check_value("port", "0").map(|_| unreachable!())),
            "port"
        );
        assert_eq!(
            arg_of(check_value("peer", "").map(|_| unreachable!())),
            "peer"
        );
    }

    #[test]
    fn split_checks_names_but_requires_nothing() {
        assert_eq!(
            split_args(&["port=1"]).unwrap(),
            vec![("port".to_string(), "1".to_string())]
        );
        assert_eq!(
            arg_of(split_args(&["port=1", "port=2"]).map(|_| unreachable!())),
            "port"
        );
        assert_eq!(
            arg_of(split_args(&["nope=1"]).map(|_| unreachable!())),
            "nope"
        );
        assert_eq!(
            arg_of(split_args(&["bare"]).map(|_| unreachable!())),
            "bare"
        );
    }

    #[test]
    fn bad_arguments_name_the_argument() {
        let base = ["peer=a", "port=1"];
        let with = |extra: &str| {
            let mut v: Vec<&str> = base.to_vec();
            v.push(extra);
            arg_of(parse_args(&v))
        };
        assert_eq!(arg_of(parse_args(&["port=1"])), "peer");
        assert_eq!(arg_of(parse_args(&["peer=a"])), "port");
        assert_eq!(arg_of(parse_args(&["peer=a", "port=0"])), "port");
        assert_eq!(arg_of(parse_args(&["peer=a", "port=70000"])), "port");
        assert_eq!(arg_of(parse_args(&["peer=", "port=1"])), "peer");
        assert_eq!(with("listen-port=-1"), "listen-port");
        assert_eq!(with("bind=nowhere"), "bind");
        assert_eq!(with("transport=udp"), "transport");
        assert_eq!(with("node-id=0"), "node-id");
        assert_eq!(with("node-id=x"), "node-id");
        assert_eq!(with("ring-size=1000"), "ring-size");
        assert_eq!(with("ring-size=4gb"), "ring-size");
        assert_eq!(with("ring-size=12parsecs"), "ring-size");
        assert_eq!(with("queue-size=0"), "queue-size");
        assert_eq!(with("backlog-ops=0"), "backlog-ops");
        assert_eq!(with("backlog-ops=-1"), "backlog-ops");
        assert_eq!(with("persist-versions=maybe"), "persist-versions");
        assert_eq!(with("hot-key-rest=-1"), "hot-key-rest");
        assert_eq!(with("hot-key-rest=10001"), "hot-key-rest");
        assert_eq!(with("hot-key-rest=soon"), "hot-key-rest");
        assert_eq!(with("max-clock-offset=99"), "max-clock-offset");
        assert_eq!(with("max-tombstones=99"), "max-tombstones");
        assert_eq!(with("max-tombstones=1000000001"), "max-tombstones");
        assert_eq!(with("max-tombstones=1k"), "max-tombstones");
        assert_eq!(with("max-clock-offset=86400001"), "max-clock-offset");
        assert_eq!(with("max-clock-offset=1s"), "max-clock-offset");
        assert_eq!(with("colour=blue"), "colour");
        assert_eq!(with("justaword"), "justaword");
        assert_eq!(with("port=2"), "port");
        assert_eq!(with("secret=tooshort"), "secret");
        assert_eq!(with("secret="), "secret");
        assert_eq!(with("secret-file=/nonexistent/secret"), "secret-file");
        assert_eq!(with("secret-file=/"), "secret-file");
        assert_eq!(with("handshake-timeout=0"), "handshake-timeout");
        assert_eq!(with("handshake-timeout=-1"), "handshake-timeout");
        assert_eq!(with("handshake-timeout=soon"), "handshake-timeout");
        assert_eq!(with("handshake-timeout=60001"), "handshake-timeout");
        assert_eq!(with("tls=maybe"), "tls");
        assert_eq!(with("tls=yes"), "tls-cert-file");
        assert_eq!(with("tls-key-file=/nonexistent.pem"), "tls-key-file");
        assert_eq!(with("tls-ca-cert-file="), "tls-ca-cert-file");
    }

    #[test]
    fn secrets_come_from_an_argument_or_a_file_and_are_never_echoed() {
        let c = parse_args(&["peer=a", "port=1", "secret=0123456789abcdef!"]).unwrap();
        assert_eq!(
            c.secret,
            Some(Secret::new(b"0123456789abcdef!".to_vec()).unwrap())
        );
        assert!(!format!("{c:?}").contains("0123456789abcdef!"));
        assert_eq!(c.effective(1)[8], "", "no secret file");
        let err = parse_args(&["peer=a", "port=1", "secret=hunter2"]).unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");

        let dir = std::env::temp_dir().join(format!("rdmasync-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("secret");
        std::fs::write(&file, "from-a-file-0123456789\n").unwrap();
        let arg = format!("secret-file={}", file.display());
        let c = parse_args(&["peer=a", "port=1", arg.as_str()]).unwrap();
        assert_eq!(
            c.secret,
            Some(Secret::new(b"from-a-file-0123456789".to_vec()).unwrap())
        );
        assert_eq!(c.effective(1)[8], file.display().to_string());
        let both = parse_args(&["peer=a", "port=1", arg.as_str(), "secret=0123456789abcdef!"]);
        assert_eq!(arg_of(both), "secret-file");
        std::fs::write(&file, "short\n").unwrap();
        let err = parse_args(&["peer=a", "port=1", arg.as_str()]).unwrap_err();
        assert!(!err.to_string().contains("short\n"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn without_a_secret_the_load_warns() {
        let c = parse_args(&["peer=a", "port=1"]).unwrap();
        assert!(c.warnings()[0].contains("no secret configured"));
        let c = parse_args(&["peer=a", "port=1", "secret=0123456789abcdef!"]).unwrap();
        assert!(c.warnings().is_empty());
    }
}
