//! What operators touch: INFO, CONFIG, COMMAND DOCS, ACLs, MODULE LOADEX.

mod common;

use std::collections::HashMap;

use common::{free_port, module_args, module_path, test_ip, Node, Pair};

fn info_rdmasync(node: &Node, section: &str) -> HashMap<String, String> {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query(&mut node.conn())
        .unwrap();
    info.lines()
        .filter_map(|l| l.strip_prefix("rdmasync_"))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

#[test]
fn info_section_carries_the_status_figures() {
    let pair = Pair::start();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut pair.a.conn())
        .unwrap();
    common::wait_until(std::time::Duration::from_secs(10), || {
        pair.b.stat("entries_applied") >= 1
    });
    let info = info_rdmasync(&pair.b, "rdmasync");
    let status = pair.b.status();
    for f in [
        "node_id",
        "transport",
        "link",
        "entries_sent",
        "entries_applied",
        "queue_overflows",
        "reconnects",
    ] {
        assert_eq!(
            info.get(f),
            status.get(f),
            "INFO and STATUS disagree on {f}"
        );
    }
    assert_eq!(info["link"], "up");
    let everything = info_rdmasync(&pair.b, "everything");
    assert_eq!(everything.get("link").map(String::as_str), Some("up"));
    let default: String = redis::cmd("INFO").query(&mut pair.b.conn()).unwrap();
    assert!(
        !default.contains("rdmasync_"),
        "the default INFO should stay unchanged"
    );
}

fn config_get(node: &Node, pattern: &str) -> HashMap<String, String> {
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(pattern)
        .query(&mut node.conn())
        .unwrap();
    v.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect()
}

#[test]
fn config_get_shows_effective_values_and_set_changes_only_the_peer() {
    let pair = Pair::start_with(&["ring-size=64kb"], &[]);
    let cfg = config_get(&pair.a, "rdmasync.*");
    assert_eq!(cfg["rdmasync.ring-size"], "65536");
    assert_eq!(cfg["rdmasync.queue-size"], "4096");
    assert_eq!(cfg["rdmasync.peer"], common::test_ip_b());
    assert_eq!(cfg["rdmasync.node-id"], pair.a.status()["node_id"]);
    assert_eq!(cfg["rdmasync.backlog-ops"], "1000000");
    assert_eq!(cfg["rdmasync.persist-versions"], "yes");
    assert_eq!(cfg["rdmasync.hot-key-rest"], "100");
    assert_eq!(cfg["rdmasync.max-clock-offset"], "10000");
    assert_eq!(cfg["rdmasync.max-tombstones"], "1000000");
    assert_eq!(cfg["rdmasync.merge-counters"], "yes");
    assert_eq!(cfg["rdmasync.merge-elements"], "yes");
    assert_eq!(cfg.len(), 21, "{cfg:?}");
    assert!(
        !cfg.contains_key("rdmasync.secret"),
        "the secret is not a config"
    );
    assert_eq!(cfg["rdmasync.tls"], "no");
    assert_eq!(cfg["rdmasync.handshake-timeout"], "5000");
    let set = |name: &str, value: &str| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query::<String>(&mut pair.a.conn())
    };
    let err = set("rdmasync.ring-size", "1mb").unwrap_err();
    assert!(err.to_string().contains("immutable"), "{err}");
    // The value in effect may be set again (CONFIG sanity in Redis's suite).
    let ring = cfg["rdmasync.ring-size"].clone();
    assert_eq!(set("rdmasync.ring-size", &ring).unwrap(), "OK");
    let err = set("rdmasync.port", "0").unwrap_err();
    assert!(err.to_string().contains("argument 'port'"), "{err}");
    assert_eq!(
        config_get(&pair.a, "rdmasync.port")["rdmasync.port"],
        cfg["rdmasync.port"]
    );
    // The peer's address may change at run time: the link re-dials it.
    // (Setting the value it already has is not a change: Redis skips it.)
    let reconnects = pair.a.stat("reconnects");
    let elsewhere = common::NOWHERE_PORT.to_string();
    assert_eq!(set("rdmasync.port", &elsewhere).unwrap(), "OK");
    assert!(pair.a.status()["peer"].ends_with(&format!(":{elsewhere}")));
    assert_eq!(set("rdmasync.port", &cfg["rdmasync.port"]).unwrap(), "OK");
    assert!(common::wait_until(
        std::time::Duration::from_secs(20),
        || { pair.a.stat("reconnects") > reconnects }
    ));
    pair.wait_linked();
    assert!(pair.a.log().contains("peer changed to"), "{}", pair.a.log());
    let _: () = redis::cmd("SET")
        .arg("after-config-set")
        .arg(1)
        .query(&mut pair.a.conn())
        .unwrap();
    assert!(common::wait_until(
        std::time::Duration::from_secs(20),
        || {
            redis::cmd("EXISTS")
                .arg("after-config-set")
                .query::<bool>(&mut pair.b.conn())
                .unwrap()
        }
    ));
}

#[test]
fn module_loadex_configs_override_arguments() {
    let ip = test_ip();
    let node = Node::start("loadex", vec![]);
    let (listen, peer) = (free_port(), free_port());
    let reply: String = redis::cmd("MODULE")
        .arg("LOADEX")
        .arg(module_path().display().to_string())
        .arg("CONFIG")
        .arg("rdmasync.ring-size")
        .arg("128kb")
        .arg("CONFIG")
        .arg("rdmasync.transport")
        .arg(common::test_transport())
        .arg("ARGS")
        .arg(format!("peer={ip}"))
        .arg(format!("port={peer}"))
        .arg(format!("listen-port={listen}"))
        .arg(format!("bind={ip}"))
        .arg("ring-size=64kb")
        .query(&mut node.conn())
        .unwrap();
    assert_eq!(reply, "OK");
    assert_eq!(node.status()["ring_size"], "131072");
    assert_eq!(
        config_get(&node, "rdmasync.listen-port")["rdmasync.listen-port"],
        listen.to_string()
    );
    // A bad CONFIG value is refused like a bad argument.
    let node2 = Node::start("loadex-bad", vec![]);
    let err = redis::cmd("MODULE")
        .arg("LOADEX")
        .arg(module_path().display().to_string())
        .arg("CONFIG")
        .arg("rdmasync.ring-size")
        .arg("1000")
        .arg("ARGS")
        .arg(format!("peer={ip}"))
        .arg(format!("port={}", free_port()))
        .query::<String>(&mut node2.conn())
        .unwrap_err();
    assert!(err.to_string().contains("Error loading"), "{err}");
    assert!(
        node2.log().contains("argument 'ring-size'"),
        "{}",
        node2.log()
    );
}

#[test]
fn status_needs_permission_and_is_documented() {
    let pair = Pair::start();
    let mut admin = pair.a.conn();
    for (user, rules) in [("reader", "+@read -@admin"), ("ops", "+rdmasync.status")] {
        let _: String = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(user)
            .arg("on")
            .arg(">pw")
            .arg(rules.split(' ').collect::<Vec<_>>())
            .query(&mut admin)
            .unwrap();
    }
    let as_user = |user: &str| {
        let mut c = redis::Client::open(format!("redis://{user}:pw@127.0.0.1:{}/", pair.a.port))
            .unwrap()
            .get_connection()
            .unwrap();
        redis::cmd("RDMASYNC.STATUS").query::<redis::Value>(&mut c)
    };
    let denied = as_user("reader").unwrap_err();
    assert!(denied.to_string().contains("NOPERM"), "{denied}");
    assert!(as_user("ops").is_ok());
    let docs: redis::Value = redis::cmd("COMMAND")
        .arg("DOCS")
        .arg("rdmasync.status")
        .query(&mut admin)
        .unwrap();
    let text = format!("{docs:?}");
    assert!(text.contains("link state"), "{text}");
    let wrong = redis::cmd("RDMASYNC.STATUS")
        .arg("extra")
        .query::<redis::Value>(&mut admin)
        .unwrap_err();
    assert!(
        wrong.to_string().contains("wrong number of arguments"),
        "{wrong}"
    );
}

#[test]
fn debug_command_checks_its_arguments_and_the_debug_switch() {
    let node = Node::start("dbg", module_args(free_port(), free_port(), &[]));
    let mut c = node.conn();
    for args in [
        vec![],
        vec!["FAIL-READS"],
        vec!["FAIL-READS", "SET"],
        vec!["NOPE", "CLEAR"],
    ] {
        let r: redis::RedisResult<()> = redis::cmd("RDMASYNC.DEBUG").arg(&args).query(&mut c);
        let e = r.expect_err("bad arguments accepted");
        assert!(e.to_string().contains("usage"), "{args:?}: {e}");
    }
    let ok: String = redis::cmd("RDMASYNC.DEBUG")
        .arg(&["FAIL-READS", "CLEAR"])
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
}

#[test]
fn debug_command_is_refused_unless_debug_is_fully_enabled() {
    for setting in ["no", "local"] {
        let mut args = vec!["--enable-debug-command".to_string(), setting.to_string()];
        args.extend(module_args(free_port(), free_port(), &[]));
        let node = Node::start("nodbg", args);
        let r: redis::RedisResult<()> = redis::cmd("RDMASYNC.DEBUG")
            .arg(&["FAIL-READS", "SET", "k"])
            .query(&mut node.conn());
        let e = r.expect_err("fault injection allowed");
        assert!(
            e.to_string().contains("enable-debug-command yes"),
            "{setting}: {e}"
        );
    }
}
