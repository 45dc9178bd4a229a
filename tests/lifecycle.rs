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

#[test]
fn bad_module_arguments_refuse_the_load_and_name_the_argument() {
    let port = free_port().to_string();
    let listen = format!("listen-port={}", free_port());
    let peer_port = format!("port={port}");
    let mut cases: Vec<(Vec<String>, &str)> = vec![
        (vec![peer_port.clone()], "peer"),
        (vec!["peer=127.0.0.1".into()], "port"),
        (vec!["peer=127.0.0.1".into(), "port=0".into()], "port"),
        (vec!["peer=127.0.0.1".into(), "port=99999".into()], "port"),
        (vec!["peer=127.0.0.1".into(), "port=abc".into()], "port"),
        (vec!["peer=".into(), peer_port.clone()], "peer"),
        (
            vec![
                "peer=127.0.0.1".into(),
                peer_port.clone(),
                "listen-port=-1".into(),
            ],
            "listen-port",
        ),
        (
            vec![
                "peer=127.0.0.1".into(),
                peer_port.clone(),
                listen.clone(),
                "bind=nohost".into(),
            ],
            "bind",
        ),
        (
            vec![
                "peer=127.0.0.1".into(),
                peer_port.clone(),
                listen.clone(),
                "transport=carrier-pigeon".into(),
            ],
            "transport",
        ),
        (
            vec![
                "peer=127.0.0.1".into(),
                peer_port.clone(),
                listen.clone(),
                "node-id=0".into(),
            ],
            "node-id",
        ),
        (
            vec![
                "peer=127.0.0.1".into(),
                peer_port.clone(),
                listen.clone(),
                "ring-size=1000".into(),
            ],
            "ring-size",
        ),
        (
            vec![
                "peer=127.0.0.1".into(),
                peer_port.clone(),
                listen.clone(),
                "ring-size=".into(),
            ],
            "ring-size",
        ),
        (
            vec![
                "peer=127.0.0.1".into(),
                peer_port.clone(),
                listen.clone(),
                "queue-size=0".into(),
            ],
            "queue-size",
        ),
        (
            vec![
                "peer=127.0.0.1".into(),
                peer_port.clone(),
                listen.clone(),
                "colour=blue".into(),
            ],
            "colour",
        ),
    ];
    if std::env::var_os("RDMASYNC_TEST_HAS_RDMA").is_none() {
        // Without a usable device, an explicit transport=rdma is refused.
        cases.push((
            vec![
                "peer=127.0.0.1".into(),
                peer_port.clone(),
                listen.clone(),
                "transport=rdma".into(),
            ],
            "transport",
        ));
    }
    for (args, name) in cases {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, log) = load_with(&refs);
        assert!(!ok, "redis-server started with {args:?}");
        assert!(
            log.contains(&format!("argument '{name}'")),
            "log for {args:?} does not name '{name}':\n{log}"
        );
    }
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
    assert_eq!(module_threads(pid), 3);
    let mut b = pair.b.conn();
    let _: () = pair.a.conn().set("pre", 1).unwrap();
    assert!(wait_until(Duration::from_secs(10), || b
        .exists::<_, bool>("pre")
        .unwrap()));
    let ok: String = redis::cmd("MODULE")
        .arg("UNLOAD")
        .arg("rdmasync")
        .query(&mut b)
        .unwrap();
    assert_eq!(ok, "OK");
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
