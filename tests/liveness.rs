//! Liveness under forks, silent peers and idleness, on a real pair.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{wait_until, Node, Pair};
use redis::Commands;

fn info_field(node: &Node, section: &str, field: &str) -> String {
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

#[test]
fn bgsave_with_the_link_up_and_traffic_flowing_succeeds() {
    let pair = Pair::start();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let mut a = pair.a.conn();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _: () = a.set(format!("bg:{}", n % 500), n).unwrap();
                n += 1;
            }
            n
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    for node in [&pair.b, &pair.a] {
        let before = info_field(node, "persistence", "rdb_last_bgsave_time_sec");
        let _: String = redis::cmd("BGSAVE").query(&mut node.conn()).unwrap();
        assert!(
            wait_until(Duration::from_secs(30), || {
                info_field(node, "persistence", "rdb_bgsave_in_progress") == "0"
                    && info_field(node, "persistence", "rdb_last_bgsave_time_sec") != before
            }),
            "BGSAVE on {} did not finish",
            node.name
        );
        assert_eq!(
            info_field(node, "persistence", "rdb_last_bgsave_status"),
            "ok"
        );
        assert!(node.dir.join("dump.rdb").exists());
    }
    stop.store(true, Ordering::Relaxed);
    let writes = writer.join().unwrap();
    assert!(writes > 0);
    // Both servers survived the forks and replication still flows.
    let _: () = pair.a.conn().set("after-bgsave", "yes").unwrap();
    assert!(wait_until(Duration::from_secs(20), || {
        pair.b
            .conn()
            .get::<_, Option<String>>("after-bgsave")
            .unwrap()
            .as_deref()
            == Some("yes")
    }));
    pair.wait_converged(Duration::from_secs(30));
    assert_eq!(pair.a.status()["link"], "up");
}

#[test]
fn silent_peer_is_declared_dead_then_the_link_comes_back() {
    let pair = Pair::start();
    let pid = pair.b.pid() as i32;
    // SIGSTOP: the peer's process is frozen, its sockets/QPs stay open (half-dead).
    assert_eq!(send_signal(pid, signal::SIGSTOP), 0);
    let down = wait_until(Duration::from_secs(15), || pair.a.status()["link"] != "up");
    assert_eq!(send_signal(pid, signal::SIGCONT), 0);
    assert!(down, "A never noticed its peer went silent");
    let last_error = pair.a.status()["last_error"].clone();
    assert!(last_error.contains("silent"), "{last_error}");
    pair.wait_linked();
    let _: () = pair.a.conn().set("after-stop", 1).unwrap();
    assert!(wait_until(Duration::from_secs(20), || {
        pair.b.conn().exists::<_, bool>("after-stop").unwrap()
    }));
}

/// Seconds of CPU (user + system) used by `pid`'s threads named `rdmasync*`
/// (the module's own threads), or by the whole process when `all`.
fn cpu_seconds(pid: u32, all: bool) -> f64 {
    let ticks = |stat: &str| -> f64 {
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = after.split(' ').collect();
        f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()
    };
    if all {
        return ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap()) / 100.0;
    }
    let mut total = 0.0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.starts_with("rdmasync") {
            total += ticks(&std::fs::read_to_string(t.path().join("stat")).unwrap_or_default());
        }
    }
    total / 100.0
}

#[test]
fn an_idle_connected_pair_uses_little_cpu() {
    let pair = Pair::start();
    let _: () = pair.a.conn().set("warm", 1).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let plain = Node::start("plain", vec![]);
    let probes = [
        (pair.a.pid(), false),
        (pair.b.pid(), false),
        (plain.pid(), true),
    ];
    let before: Vec<f64> = probes
        .iter()
        .map(|(p, all)| cpu_seconds(*p, *all))
        .collect();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(6));
    let wall = t0.elapsed().as_secs_f64();
    let used: Vec<f64> = probes
        .iter()
        .zip(&before)
        .map(|((p, all), b)| (cpu_seconds(*p, *all) - b) / wall * 100.0)
        .collect();
    // Under software emulation (the Soft-RoCE guest) every wake-up costs far
    // more CPU than on hardware; the bound there only catches busy-polling.
    let emulated = std::env::var_os("RDMASYNC_TEST_EMULATED").is_some();
    let bound = if emulated { 5.0 } else { 1.0 };
    eprintln!(
        "idle CPU: module threads a {:.2}%, b {:.2}% of a core; a whole plain redis-server {:.2}% (bound {bound}%{})",
        used[0],
        used[1],
        used[2],
        if emulated { ", emulated" } else { "" }
    );
    for (name, u) in [("a", used[0]), ("b", used[1])] {
        assert!(
            u < bound,
            "idle node {name}: module threads used {u:.2}% of a core"
        );
    }
    assert_eq!(pair.a.status()["link"], "up");
}

mod signal {
    pub const SIGSTOP: i32 = 19;
    pub const SIGCONT: i32 = 18;
}

fn send_signal(pid: i32, sig: i32) -> i32 {
    std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .map(|s| if s.success() { 0 } else { 1 })
        .unwrap_or(1)
}
