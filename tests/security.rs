//! Only the real peer gets in, and nothing anyone sends hurts redis-server.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::peer::{self, HelloFields};
use common::{test_transport, wait_until, Node, Pair, PingMonitor};
use redis::Commands;

const SECRET: &str = "the-right-secret-0123456789";
const WRONG: &str = "a-wrong-secret-9876543210";

fn arg(name: &str, value: &str) -> String {
    format!("{name}={value}")
}

/// Replaces (or adds) `name=...` in a node's arguments.
fn set_arg(node: &mut Node, name: &str, value: Option<&str>) {
    node.args.retain(|a| !a.starts_with(&format!("{name}=")));
    if let Some(v) = value {
        node.args.push(arg(name, v));
    }
}

fn replicates(from: &Node, to: &Node, key: &str) -> bool {
    let _: () = from.conn().set(key, "v").unwrap();
    wait_until(Duration::from_secs(15), || {
        to.conn().exists::<_, bool>(key).unwrap()
    })
}

/// Asserts the secret appears nowhere an operator or client can read.
fn assert_secret_hidden(node: &Node, secret: &str) {
    assert!(!node.log().contains(secret), "secret in the log");
    for pattern in ["rdmasync.*", "*"] {
        let cfg: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(pattern)
            .query(&mut node.conn())
            .unwrap();
        assert!(
            !cfg.iter().any(|v| v.contains(secret)),
            "secret in CONFIG GET {pattern}"
        );
    }
    let info: String = redis::cmd("INFO")
        .arg("everything")
        .query(&mut node.conn())
        .unwrap();
    assert!(!info.contains(secret), "secret in INFO");
    assert!(
        !node.status().values().any(|v| v.contains(secret)),
        "secret in RDMASYNC.STATUS"
    );
}

#[test]
fn a_peer_with_the_wrong_or_no_secret_is_refused_and_the_right_one_connects() {
    let good = arg("secret", SECRET);
    let wrong = arg("secret", WRONG);
    let mut pair = Pair::start_unlinked(&[&good], &[&wrong]);
    // Both sides refuse: each counts it, each keeps serving, nobody links.
    let refused = wait_until(Duration::from_secs(20), || {
        pair.a.stat("auth_failures") >= 3 && pair.b.stat("auth_failures") >= 3
    });
    assert!(refused, "a={:?} b={:?}", pair.a.status(), pair.b.status());
    for n in [&pair.a, &pair.b] {
        assert_ne!(n.status()["link"], "up");
        assert_eq!(n.stat("rings_registered"), 0, "a ring was registered");
        assert_eq!(n.stat("rings_live"), 0);
        assert_eq!(n.status()["auth"], "hmac-sha256");
        let _: () = n.conn().set("local", "still serving").unwrap();
    }
    // Logged once per peer, not once per attempt.
    assert_eq!(
        pair.a.log_count("authentication failed"),
        1,
        "{}",
        pair.a.log()
    );
    assert_secret_hidden(&pair.a, SECRET);
    assert_secret_hidden(&pair.b, WRONG);

    // B without a secret: it loads, warns, says auth none; A still refuses it.
    set_arg(&mut pair.b, "secret", None);
    pair.b.restart();
    assert!(pair.b.log().contains("no secret configured"));
    assert_eq!(pair.b.status()["auth"], "none");
    let before = pair.a.stat("auth_failures");
    assert!(wait_until(Duration::from_secs(20), || {
        pair.a.stat("auth_failures") >= before + 2 && pair.b.stat("auth_failures") >= 2
    }));
    assert_ne!(pair.a.status()["link"], "up");
    assert!(
        pair.b.log().contains("the peer requires a secret"),
        "{}",
        pair.b.log()
    );

    // B with the right secret: the link comes up and writes flow both ways.
    set_arg(&mut pair.b, "secret", Some(SECRET));
    pair.b.restart();
    pair.wait_linked();
    assert!(replicates(&pair.a, &pair.b, "after-auth-a"));
    assert!(replicates(&pair.b, &pair.a, "after-auth-b"));
    assert_secret_hidden(&pair.a, SECRET);
    assert_secret_hidden(&pair.b, SECRET);
}

#[test]
fn the_secret_can_come_from_a_file() {
    let dir = std::env::temp_dir().join(format!("rdmasync-secret-{}", common::free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("secret");
    std::fs::write(&file, format!("{SECRET}\n")).unwrap();
    let file_arg = arg("secret-file", &file.display().to_string());
    let pair = Pair::start_with(&[&file_arg], &[&arg("secret", SECRET)]);
    assert!(replicates(&pair.a, &pair.b, "from-file"));
    assert_eq!(pair.a.status()["auth"], "hmac-sha256");
    let cfg: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("rdmasync.secret-file")
        .query(&mut pair.a.conn())
        .unwrap();
    assert_eq!(cfg[1], file.display().to_string());
    assert_secret_hidden(&pair.a, SECRET);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn each_link_registers_a_fresh_ring_and_releases_it_on_disconnect() {
    let mut pair = Pair::start_with(&[&arg("secret", SECRET)], &[&arg("secret", SECRET)]);
    let first = pair.a.stat("rings_registered");
    assert_eq!(first, 1);
    assert_eq!(pair.a.stat("rings_live"), 1);
    for round in 1..=2 {
        pair.b.kill();
        // The old ring is released as soon as the link is down (RDMA: the
        // memory region is deregistered), not at the next write.
        assert!(
            wait_until(Duration::from_secs(15), || pair.a.stat("rings_live") == 0),
            "{:?}",
            pair.a.status()
        );
        pair.b.restart();
        pair.wait_linked();
        assert_eq!(pair.a.stat("rings_registered"), first + round);
        assert_eq!(pair.a.stat("rings_live"), 1);
        assert!(replicates(&pair.a, &pair.b, &format!("ring-{round}")));
    }
}

/// Keeps `n` idle connections open to `port` (reopening those the node
/// closes) until stopped; returns how many it opened.
fn flood(port: u16, n: usize, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut open: Vec<TcpStream> = Vec::new();
        let mut opened = 0;
        while !stop.load(Ordering::Relaxed) {
            // Still open while a read would block; closed by the node otherwise.
            open.retain(|s| {
                let mut b = [0u8; 1];
                matches!(std::io::Read::read(&mut &*s, &mut b),
                    Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
            });
            while open.len() < n {
                match TcpStream::connect((common::test_ip(), port)) {
                    Ok(s) => {
                        // Half of them send half a header, then nothing.
                        if opened % 2 == 0 {
                            let _ = (&s).write_all(&[1, 0, 0]);
                        }
                        let _ = s.set_nonblocking(true);
                        open.push(s);
                        opened += 1;
                    }
                    Err(_) => break,
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        opened
    })
}

/// Sends `bytes` on a fresh connection and waits for the node to close it;
/// returns what the node sent back.
fn send_and_wait_close(port: u16, bytes: &[u8]) -> Vec<u8> {
    let mut s = peer::connect(port);
    let _ = s.write_all(bytes);
    let mut got = Vec::new();
    let _ = std::io::Read::read_to_end(&mut s, &mut got);
    got
}

/// The REFUSE reason in what a node sent, if any.
fn refuse_reason(got: &[u8]) -> Option<u64> {
    // The node's HELLO (16 + 128 bytes) comes first.
    let rest = got.get(16 + peer::HELLO_LEN..)?;
    (rest.len() >= 16 && rest[0] == peer::OP_REFUSE)
        .then(|| u64::from_le_bytes(rest[8..16].try_into().unwrap()))
}

#[test]
fn hostile_clients_do_not_hurt_the_server_and_replication_resumes() {
    if test_transport() != "tcp" {
        eprintln!("tcp-only test (the listen port a client can reach); covered by the tcp runs");
        return;
    }
    let extra = [
        arg("secret", SECRET),
        "handshake-timeout=1000".to_string(),
        "ring-size=1mb".to_string(),
    ];
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let mut pair = Pair::start_with(&extra, &extra);
    let port = pair.b.listen_port();
    let a_port = pair.a.listen_port();
    // Under full-system emulation (the Soft-RoCE guest) everything is ~10x slower.
    let slow: u32 = if std::env::var_os("RDMASYNC_TEST_EMULATED").is_some() {
        10
    } else {
        1
    };
    let rss_before = pair.b.proc_kib("VmRSS");
    let ping = PingMonitor::start(&pair.b);
    let b_id: u64 = pair.b.status()["node_id"].parse().unwrap();
    let bad0 = pair.b.stat("bad_frames");

    // Garbage: an HTTP request, and bytes that look like nothing.
    for i in 0..20u8 {
        let mut junk: Vec<u8> = (0..4096u32)
            .map(|j| (j as u8).wrapping_mul(i | 1))
            .collect();
        junk[0] = 200 + (i % 50);
        send_and_wait_close(port, &junk);
    }
    send_and_wait_close(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    // Headers claiming 4 GiB: a WRITE before any handshake, and a HELLO.
    let got = send_and_wait_close(port, &peer::header(peer::OP_WRITE, u32::MAX, 0));
    assert_eq!(refuse_reason(&got), Some(4), "malformed REFUSE expected");
    send_and_wait_close(port, &peer::header(peer::OP_HELLO, u32::MAX, 0));
    assert!(wait_until(Duration::from_secs(10), || {
        pair.b.stat("bad_frames") >= bad0 + 23
    }));

    // Truncated: half a HELLO, then silence until the handshake timeout, and
    // half a HELLO then close.
    let inc0 = pair.b.stat("handshakes_incomplete");
    let mut half = peer::header(peer::OP_HELLO, peer::HELLO_LEN as u32, 0).to_vec();
    half.extend_from_slice(&[0u8; 50]);
    let t = Instant::now();
    send_and_wait_close(port, &half);
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5) * slow,
        "a silent connection was dropped after {waited:?}"
    );
    drop(TcpStream::connect((common::test_ip(), port)).map(|mut s| s.write_all(&half[..20])));
    assert!(wait_until(Duration::from_secs(10), || {
        pair.b.stat("handshakes_incomplete") >= inc0 + 2
    }));

    // A wrong link protocol is refused with a message naming both sides
    // (another RDB format is not: tests/mixed.rs).
    let mut node_hello = None;
    {
        let mut s = peer::connect(port);
        let (_, _, body) = peer::read_msg(&mut s).unwrap();
        node_hello = Some(HelloFields::parse(&body)).or(node_hello);
    }
    let node = node_hello.unwrap();
    let refused0 = pair.b.stat("handshakes_refused");
    let v99 = HelloFields {
        version: 99,
        node_id: 5,
        ..node
    };
    let got = send_and_wait_close(port, &v99.message());
    assert_eq!(refuse_reason(&got), Some(2));
    assert!(wait_until(Duration::from_secs(10), || {
        pair.b.stat("handshakes_refused") > refused0
    }));
    let log = pair.b.log();
    assert!(
        log.contains("peer speaks link protocol 99, this node speaks 2"),
        "{log}"
    );
    let last = pair.b.status()["last_error"].clone();
    assert!(last.contains("link protocol 99"), "{last}");

    // Replay: record a genuine handshake (as a node the tie-break drops, so
    // the real link stays), then replay it on a new connection.
    let auth0 = pair.b.stat("auth_failures");
    let recorded = peer::dial(port, u64::MAX, SECRET.as_bytes(), 0);
    assert!(recorded.node_proved, "the genuine handshake must succeed");
    assert!(b_id < u64::MAX);
    let mut replay = Vec::new();
    for m in &recorded.sent {
        replay.extend_from_slice(m);
    }
    let got = send_and_wait_close(port, &replay);
    assert_eq!(refuse_reason(&got), Some(1), "auth REFUSE expected");
    assert!(wait_until(Duration::from_secs(10), || {
        pair.b.stat("auth_failures") == auth0 + 1
    }));
    // A dialer without the secret learns nothing: the node never proves first.
    let mut s = peer::connect(port);
    let (_, _, body) = peer::read_msg(&mut s).unwrap();
    let ours = HelloFields {
        node_id: 7,
        ..HelloFields::parse(&body)
    };
    s.write_all(&ours.message()).unwrap();
    let mut junk_proof = peer::header(peer::OP_PROOF, 32, 0).to_vec();
    junk_proof.extend_from_slice(&[0u8; 32]);
    s.write_all(&junk_proof).unwrap();
    let (op, arg, _) = peer::read_msg(&mut s).unwrap();
    assert_eq!((op, arg), (peer::OP_REFUSE, 1));
    // One log line per kind so far (malformed, incomplete, version, auth),
    // however many attempts.
    let from_here = format!("handshake from {} failed", common::test_ip());
    assert_eq!(pair.b.log_count(&from_here), 4, "{}", pair.b.log());

    // Many idle and half-open connections to both nodes while the real
    // peer reconnects (A restarts): the link comes back regardless.
    let stop = Arc::new(AtomicBool::new(false));
    let floods = [
        flood(port, 100, stop.clone()),
        flood(a_port, 100, stop.clone()),
    ];
    std::thread::sleep(Duration::from_millis(1500));
    pair.a.restart();
    let t = Instant::now();
    pair.wait_linked();
    let relinked = t.elapsed();
    assert!(replicates(&pair.a, &pair.b, "during-flood-a"));
    assert!(replicates(&pair.b, &pair.a, "during-flood-b"));
    stop.store(true, Ordering::Relaxed);
    let opened: usize = floods.into_iter().map(|f| f.join().unwrap()).sum();

    let (pings, p50, p99, max) = ping.finish();
    let rss_peak = pair.b.proc_kib("VmHWM");
    let rss_after = pair.b.proc_kib("VmRSS");
    println!(
        "hostile clients: {pings} PINGs, p50 {p50:?}, p99 {p99:?}, max {max:?}; \
         {opened} flood connections; relinked in {relinked:?}; \
         RSS before {rss_before} KiB, peak {rss_peak} KiB, after {rss_after} KiB; status {:?}",
        pair.b.status()
    );
    assert!(
        p99 < Duration::from_millis(50) * slow,
        "PING p99 {p99:?} under attack"
    );
    assert!(
        max < Duration::from_millis(500) * slow,
        "PING max {max:?} under attack"
    );
    assert!(
        rss_peak.saturating_sub(rss_before) < 64 * 1024,
        "memory grew from {rss_before} to {rss_peak} KiB"
    );
    // Thousands of failures, a handful of log lines: the real peer's link
    // from the same address (loopback) makes the next failure news again.
    assert!(pair.b.stat("handshakes_incomplete") > inc0 + 100);
    assert!(pair.b.log_count(&from_here) <= 8, "{}", pair.b.log());
    assert!(pair.b.log().contains("further failures of this kind"));
    assert_eq!(pair.b.status()["link"], "up");
}

#[test]
fn an_authenticated_peer_sending_bad_frames_is_cut_off_and_the_real_peer_returns() {
    if test_transport() != "tcp" {
        eprintln!("tcp-only test; covered by the tcp runs");
        return;
    }
    let s = arg("secret", SECRET);
    let pair = Pair::start_with(&[&s], &[&s]);
    let port = pair.b.listen_port();
    let bad0 = pair.b.stat("bad_frames");
    let hostile: [Vec<u8>; 3] = [
        // A WRITE of 64 bytes of garbage where a frame should be.
        {
            let mut m = peer::header(peer::OP_WRITE, 64, 0).to_vec();
            m.extend_from_slice(&[0xAB; 64]);
            m
        },
        // A WRITE claiming 4 GiB.
        peer::header(peer::OP_WRITE, u32::MAX, 0).to_vec(),
        // A consistent frame header claiming a value of 1 GiB - 4 KiB.
        {
            let v: u32 = (1 << 30) - 4096;
            let frame_len = (64 + 1 + v + 4 + 7) & !7;
            let mut f = Vec::new();
            f.extend_from_slice(b"RSYN");
            f.extend_from_slice(&[1, 1]);
            f.extend_from_slice(&1u16.to_le_bytes());
            f.extend_from_slice(&frame_len.to_le_bytes());
            f.extend_from_slice(&[0u8; 4 + 8 * 4]);
            f.extend_from_slice(&1u32.to_le_bytes());
            f.extend_from_slice(&v.to_le_bytes());
            f.extend_from_slice(&v.to_le_bytes());
            f.extend_from_slice(&[0u8; 4]);
            assert_eq!(f.len(), 64);
            let mut m = peer::header(peer::OP_WRITE, 64, 0).to_vec();
            m.extend_from_slice(&f);
            m
        },
    ];
    for (i, msg) in hostile.iter().enumerate() {
        // Node id 1 is below any derived id: the node keeps this connection.
        let mut d = peer::dial(port, 1, SECRET.as_bytes(), 1 << 20);
        assert!(d.node_proved);
        let _ = d.stream.write_all(msg);
        assert!(
            wait_until(Duration::from_secs(10), || pair.b.stat("bad_frames")
                > bad0 + i as u64),
            "message {i} not rejected: {:?}",
            pair.b.status()
        );
    }
    pair.wait_linked();
    assert!(replicates(&pair.a, &pair.b, "after-bad-frames"));
    assert!(pair.b.log().contains("link down"), "{}", pair.b.log());
}

/// A CA and a node certificate signed by it, as PEM files in `dir`.
fn make_pki(dir: &std::path::Path, name: &str) -> [String; 3] {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    };
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, format!("{name} test CA"));
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let mut sans = vec![
        "localhost".to_string(),
        "127.0.0.1".into(),
        common::test_ip(),
    ];
    sans.push(common::test_ip_b());
    let mut node = CertificateParams::new(sans).unwrap();
    node.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    node.distinguished_name
        .push(DnType::CommonName, format!("{name} node"));
    let key = KeyPair::generate().unwrap();
    let cert = node.signed_by(&key, &ca_cert, &ca_key).unwrap();
    let paths = [
        dir.join(format!("{name}-node.crt")),
        dir.join(format!("{name}-node.key")),
        dir.join(format!("{name}-ca.crt")),
    ];
    std::fs::write(&paths[0], cert.pem()).unwrap();
    std::fs::write(&paths[1], key.serialize_pem()).unwrap();
    std::fs::write(&paths[2], ca_cert.pem()).unwrap();
    paths.map(|p| p.display().to_string())
}

fn tls_args(pki: &[String; 3]) -> Vec<String> {
    vec![
        "tls=yes".into(),
        arg("tls-cert-file", &pki[0]),
        arg("tls-key-file", &pki[1]),
        arg("tls-ca-cert-file", &pki[2]),
        arg("secret", SECRET),
    ]
}

#[test]
fn tls_replicates_with_valid_certificates_and_refuses_another_ca() {
    if test_transport() != "tcp" {
        eprintln!(
            "TLS runs over tcp only (transport=rdma refuses tls=yes); covered by the tcp runs"
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("rdmasync-pki-{}", common::free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = make_pki(&dir, "good");
    let other = make_pki(&dir, "other");
    let args = tls_args(&good);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut pair = Pair::start_with(&refs, &refs);
    assert_eq!(pair.a.status()["tls"], "yes");
    assert!(replicates(&pair.a, &pair.b, "over-tls-a"));
    assert!(replicates(&pair.b, &pair.a, "over-tls-b"));
    // A value larger than a TLS record and than the ring's largest frame.
    let big = "x".repeat(3 << 20);
    let _: () = pair.a.conn().set("big-over-tls", &big).unwrap();
    assert!(wait_until(Duration::from_secs(20), || {
        pair.b.conn().strlen::<_, usize>("big-over-tls").unwrap() == big.len()
    }));
    // A plaintext client (no TLS) gets nowhere.
    let bad0 = pair.b.stat("bad_frames");
    let mut s = peer::connect(pair.b.listen_port());
    let _ = s.write_all(&peer::header(peer::OP_HELLO, peer::HELLO_LEN as u32, 0));
    let _ = s.write_all(&[0u8; peer::HELLO_LEN]);
    let mut got = Vec::new();
    let _ = std::io::Read::read_to_end(&mut s, &mut got);
    assert!(wait_until(Duration::from_secs(10), || {
        pair.b.stat("bad_frames") > bad0
    }));

    // B with a certificate from another CA (and trusting only that CA).
    for (i, name) in ["tls-cert-file", "tls-key-file", "tls-ca-cert-file"]
        .iter()
        .enumerate()
    {
        set_arg(&mut pair.b, name, Some(&other[i]));
    }
    pair.b.restart();
    let auth0 = pair.a.stat("auth_failures");
    assert!(
        wait_until(Duration::from_secs(20), || pair.a.stat("auth_failures")
            >= auth0 + 2),
        "{:?}",
        pair.a.status()
    );
    assert_ne!(pair.a.status()["link"], "up");
    assert_ne!(pair.b.status()["link"], "up");
    assert!(
        pair.a.log().contains("TLS handshake failed"),
        "{}",
        pair.a.log()
    );
    let _: () = pair.a.conn().set("still", "serving").unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
