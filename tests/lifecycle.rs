//! Loading, refusing and unloading the module in a real redis-server.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{free_port, module_args, module_path, redis_server, wait_until, Node, Pair};
use redis::Commands;

/// Starts redis-server with the module and `args`; returns (exit success, log).
fn load_with(args: &[&str]) -> (bool, String) {
    let dir = std::env::temp_dir().join(format!(
        "rdmasync-badargs-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("redis.log");
    let mut cmd = Command::new(redis_server());
    cmd.arg("--port")
        .arg(free_port().to_string())
        .arg("--save")
        .arg("")
        .arg("--dir")
        .arg(&dir)
        .arg("--logfile")
        .arg(&log)
        .arg("--loadmodule")
        .arg(module_path())
        .args(args);
    let mut child = cmd.spawn().unwrap();
    let exited = wait_until(Duration::from_secs(10), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&dir);
        return (true, String::new());
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    (child.wait().unwrap().success(), text)
}

/// Valid PEM files (certificate, key, CA) and a file that is not PEM.
fn pem_files(dir: &std::path::Path) -> [String; 4] {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &ca_cert, &ca_key)
        .unwrap();
    let files = [
        ("node.crt", cert.pem()),
        ("node.key", key.serialize_pem()),
        ("ca.crt", ca_cert.pem()),
        ("garbage.pem", "this is not PEM\n".to_string()),
    ];
    files.map(|(name, text)| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    })
}

#[test]
fn bad_module_arguments_refuse_the_load_and_name_the_argument() {
    let dir = std::env::temp_dir().join(format!("rdmasync-args-{}", free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    let [cert, key, ca, garbage] = pem_files(&dir);
    let long_secret = "s".repeat(5000);
    // Every argument: empty, negative, out of range, unparsable (where the
    // argument has such values).
    let per_arg: Vec<(&str, Vec<&str>)> = vec![
        ("peer", vec!["", "not a host"]),
        ("port", vec!["", "-1", "0", "65536", "abc"]),
        ("listen-port", vec!["", "-1", "0", "65536", "abc"]),
        ("bind", vec!["", "-1", "300.1.1.1", "nohost"]),
        ("transport", vec!["", "-1", "carrier-pigeon"]),
        ("node-id", vec!["", "-1", "0", "18446744073709551616", "x"]),
        ("ring-size", vec!["", "-1", "1000", "2gb", "12parsecs"]),
        ("queue-size", vec!["", "-1", "0", "1048577", "many"]),
        ("secret", vec!["", "short", long_secret.as_str()]),
        ("secret-file", vec!["", "/nonexistent/secret", "/"]),
        ("handshake-timeout", vec!["", "-1", "99", "60001", "soon"]),
        ("tls", vec!["", "-1", "maybe"]),
        ("tls-cert-file", vec!["", "/nonexistent.pem", "/"]),
        ("tls-key-file", vec!["", "/nonexistent.pem", "/"]),
        ("tls-ca-cert-file", vec!["", "/nonexistent.pem", "/"]),
        ("backlog-ops", vec!["", "-1", "0", "100000001", "lots"]),
        ("persist-versions", vec!["", "-1", "maybe"]),
        ("hot-key-rest", vec!["", "-1", "10001", "soon"]),
    ];
    let port = free_port().to_string();
    let base = |skip: &str| -> Vec<String> {
        [
            ("peer", "127.0.0.1".to_string()),
            ("port", port.clone()),
            ("listen-port", free_port().to_string()),
            ("transport", "tcp".to_string()),
        ]
        .into_iter()
        .filter(|(n, _)| *n != skip)
        .map(|(n, v)| format!("{n}={v}"))
        .collect()
    };
    let mut cases: Vec<(Vec<String>, &str)> = Vec::new();
    for (name, values) in &per_arg {
        for v in values {
            let mut args = base(name);
            args.push(format!("{name}={v}"));
            cases.push((args, name));
        }
    }
    let tls = |c: &str, k: &str, a: &str| -> Vec<String> {
        let mut v = base("");
        v.extend([
            "tls=yes".to_string(),
            format!("tls-cert-file={c}"),
            format!("tls-key-file={k}"),
            format!("tls-ca-cert-file={a}"),
        ]);
        v
    };
    // Files that exist but do not parse, or do not fit together.
    cases.push((tls(&garbage, &key, &ca), "tls-cert-file"));
    cases.push((tls(&cert, &garbage, &ca), "tls-key-file"));
    cases.push((tls(&cert, &key, &garbage), "tls-ca-cert-file"));
    cases.push((tls(&cert, &ca, &ca), "tls-key-file"));
    let mut missing_key = tls(&cert, &key, &ca);
    missing_key.retain(|a| !a.starts_with("tls-key-file="));
    cases.push((missing_key, "tls-key-file"));
    let mut tls_over_rdma = tls(&cert, &key, &ca);
    tls_over_rdma.retain(|a| a != "transport=tcp");
    tls_over_rdma.push("transport=rdma".into());
    cases.push((tls_over_rdma, "tls"));
    // Missing, unknown, repeated, contradictory.
    cases.push((base("peer"), "peer"));
    cases.push((base("port"), "port"));
    let with = |extra: &[&str]| {
        let mut v = base("");
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    cases.push((with(&["colour=blue"]), "colour"));
    cases.push((with(&["justaword"]), "justaword"));
    cases.push((with(&["ring-size=1mb", "ring-size=2mb"]), "ring-size"));
    let secret_file = dir.join("secret");
    std::fs::write(&secret_file, "0123456789abcdef0123").unwrap();
    cases.push((
        with(&[
            "secret=0123456789abcdef0123",
            &format!("secret-file={}", secret_file.display()),
        ]),
        "secret-file",
    ));
    if std::env::var_os("RDMASYNC_TEST_HAS_RDMA").is_none() {
        // Without a usable device, an explicit transport=rdma is refused.
        let mut v = base("transport");
        v.push("transport=rdma".into());
        cases.push((v, "transport"));
    }
    for (args, name) in cases {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, log) = load_with(&refs);
        assert!(!ok, "redis-server started with {args:?}");
        assert!(
            log.contains(&format!("argument '{name}'")),
            "log for {args:?} does not name '{name}':\n{log}"
        );
        assert!(!log.contains(&long_secret) && !log.contains("secret=short"));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn taken_listen_port_refuses_the_load() {
    let taken = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let (ok, log) = load_with(&["peer=127.0.0.1", &format!("port={port}"), "transport=tcp"]);
    assert!(!ok);
    assert!(log.contains("cannot listen"), "{log}");
}

/// Threads of `pid` whose name starts with `rdmasync`.
fn module_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|t| t.ok())
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .map(|c| c.starts_with("rdmasync"))
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn module_unload_is_refused_while_versions_are_persisted() {
    // The aux-data type that carries versions in the RDB pins the module.
    let pair = Pair::start();
    let mut b = pair.b.conn();
    let err = redis::cmd("MODULE")
        .arg("UNLOAD")
        .arg("rdmasync")
        .query::<String>(&mut b)
        .unwrap_err();
    assert!(err.to_string().contains("data types"), "{err}");
    let _: () = pair.a.conn().set("still", 1).unwrap();
    assert!(wait_until(Duration::from_secs(10), || b
        .exists::<_, bool>("still")
        .unwrap()));
}

#[test]
fn module_unload_joins_every_thread_and_reload_works() {
    let pair = Pair::start_with(&["persist-versions=no"], &["persist-versions=no"]);
    let pid = pair.b.pid();
    // rdmasync-send, -accept, -link and -clock. Each thread names itself
    // once it runs: on a busy host the last may not have yet (a count of 2
    // failed a full run under load).
    assert!(
        wait_until(Duration::from_secs(10), || module_threads(pid) == 4),
        "{} module threads",
        module_threads(pid)
    );
    let mut b = pair.b.conn();
    let _: () = pair.a.conn().set("pre", 1).unwrap();
    assert!(wait_until(Duration::from_secs(10), || b
        .exists::<_, bool>("pre")
        .unwrap()));
    timed_unload(&pair.b);
    assert_eq!(module_threads(pid), 0, "threads left after unload");
    let pong: String = redis::cmd("PING").query(&mut b).unwrap();
    assert_eq!(pong, "PONG");
    assert!(wait_until(Duration::from_secs(10), || pair.a.status()
        ["link"]
        != "up"));
    // Load it again with the same arguments: the link comes back and writes flow.
    let args = &pair.b.args[1..];
    let mut load = redis::cmd("MODULE");
    load.arg("LOAD");
    for a in args {
        load.arg(a);
    }
    let ok: String = load.query(&mut b).unwrap();
    assert_eq!(ok, "OK");
    pair.wait_linked();
    let _: () = pair.a.conn().set("post", 2).unwrap();
    assert!(wait_until(Duration::from_secs(10), || b
        .exists::<_, bool>("post")
        .unwrap()));
}

#[test]
fn node_without_peer_keeps_serving_and_reports_connecting() {
    let node = Node::start("lonely", module_args(free_port(), free_port(), &[]));
    let _: () = node.conn().set("k", "v").unwrap();
    assert_eq!(node.status()["link"], "connecting");
    // The first dial fails quickly over TCP, within the rdma_cm timeouts over RDMA.
    assert!(
        wait_until(Duration::from_secs(10), || !node.status()["last_error"]
            .is_empty()),
        "{:?}",
        node.status()
    );
    // The write waits in the backlog for the peer (a partial resync later).
    assert!(wait_until(Duration::from_secs(5), || node.stat("backlog") >= 1));
    assert_eq!(node.stat("entries_dropped"), 0);
}

#[test]
fn transport_auto_picks_rdma_with_a_device_else_tcp_and_says_why() {
    let ip = common::test_ip();
    let node = Node::start(
        "auto",
        common::module_args_at(&ip, free_port(), &ip, free_port(), &["transport=auto"])
            .into_iter()
            .filter(|a| a != "transport=rdma" && a != "transport=tcp")
            .collect(),
    );
    let log = node.log();
    if std::env::var_os("RDMASYNC_TEST_HAS_RDMA").is_some() {
        assert_eq!(node.status()["transport"], "rdma");
        assert!(
            log.contains("transport=auto chose rdma: active device(s)"),
            "{log}"
        );
    } else {
        assert_eq!(node.status()["transport"], "tcp");
        assert!(
            log.contains("transport=auto chose tcp: no RDMA device"),
            "{log}"
        );
    }
}

#[test]
fn failed_module_load_leaves_the_server_running() {
    // Redis 7.0 keeps a failed module's notification callbacks: nothing may be
    // subscribed before every check has passed, or the next write crashes.
    let node = Node::start("failed-load", vec![]);
    let mut c = node.conn();
    let taken = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let attempts = [
        vec![
            "peer=127.0.0.1".to_string(),
            "port=1".into(),
            "bogus=1".into(),
        ],
        vec![
            "peer=127.0.0.1".to_string(),
            format!("port={taken_port}"),
            "transport=tcp".into(),
        ],
    ];
    for args in attempts {
        let mut load = redis::cmd("MODULE");
        load.arg("LOAD").arg(module_path().display().to_string());
        for a in &args {
            load.arg(a);
        }
        assert!(load.query::<String>(&mut c).is_err(), "{args:?} loaded");
        let _: () = c.set("still", "alive").unwrap();
        let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
        let pong: String = redis::cmd("PING").query(&mut c).unwrap();
        assert_eq!(pong, "PONG");
    }
}

/// Unloads the module on `node`; returns how long `MODULE UNLOAD` took.
fn timed_unload(node: &Node) -> Duration {
    let started = std::time::Instant::now();
    let ok: String = redis::cmd("MODULE")
        .arg("UNLOAD")
        .arg("rdmasync")
        .query(&mut node.conn())
        .unwrap();
    assert_eq!(ok, "OK");
    started.elapsed()
}

/// Waits until the other end of `stream` has sent its HELLO (both sides
/// send theirs first): that end now waits for ours.
fn hello_arrived(stream: &std::net::TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut first = [0u8; 1];
    matches!(stream.peek(&mut first), Ok(1))
}

#[test]
fn module_unload_during_a_handshake_returns_without_waiting_it_out() {
    // A peer that accepts the connection and never answers: the dialer
    // waits in its handshake for up to handshake-timeout (60 s). Unload
    // stops the one stop token the handshake watches, so it returns
    // within a tick.
    let ip = common::test_ip();
    let silent = std::net::TcpListener::bind((ip.as_str(), 0)).unwrap();
    silent.set_nonblocking(true).unwrap();
    let port = silent.local_addr().unwrap().port();
    let node = Node::start(
        "unload-in-handshake",
        module_args(
            free_port(),
            port,
            &["persist-versions=no", "handshake-timeout=60000"],
        ),
    );
    let pid = node.pid();
    // Kept open until the unload: a closed connection ends the handshake.
    let mut held = None;
    if common::test_transport() == "tcp" {
        assert!(wait_until(Duration::from_secs(10), || {
            held = silent.accept().ok().map(|(s, _)| s);
            held.is_some()
        }));
        let stream = held.as_ref().unwrap();
        stream.set_nonblocking(false).unwrap();
        assert!(hello_arrived(stream), "no HELLO from the dialer");
    } else {
        // Over rdma nothing listens there for rdma_cm and a peer that
        // accepts and stays silent can only be a module: the dial fails
        // and the unload comes while the link thread waits to redial.
        assert!(
            wait_until(Duration::from_secs(10), || !node.status()["last_error"]
                .is_empty()),
            "{:?}",
            node.status()
        );
    }
    // rdmasync-send, -accept, -link and -clock. Each thread names itself
    // once it runs: on a busy host the last may not have yet (a count of 2
    // failed a full run under load).
    assert!(
        wait_until(Duration::from_secs(10), || module_threads(pid) == 4),
        "{} module threads",
        module_threads(pid)
    );
    let took = timed_unload(&node);
    assert!(took < Duration::from_secs(5), "unload took {took:?}");
    assert_eq!(module_threads(pid), 0, "threads left after unload");
    drop(held);
}

#[test]
fn module_unload_while_an_incoming_handshake_waits_returns_at_once() {
    // Over rdma a raw TCP connection reaches no listener: nothing to test.
    if common::test_transport() != "tcp" {
        eprintln!("skipped: needs a silent TCP client on the listen port (transport=tcp)");
        return;
    }
    // A client connects to the listen port and never answers: the node's
    // accept side waits in its handshake for up to handshake-timeout, until
    // unload abandons it (the acceptor's handshake watch).
    let listen = free_port();
    let node = Node::start(
        "unload-in-accept",
        module_args(
            listen,
            free_port(),
            &["persist-versions=no", "handshake-timeout=60000"],
        ),
    );
    let silent = std::net::TcpStream::connect((common::test_ip().as_str(), listen)).unwrap();
    assert!(hello_arrived(&silent), "no HELLO from the acceptor");
    let took = timed_unload(&node);
    assert!(took < Duration::from_secs(5), "unload took {took:?}");
    assert_eq!(module_threads(node.pid()), 0, "threads left after unload");
    drop(silent);
}
