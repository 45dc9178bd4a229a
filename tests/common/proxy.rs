//! A TCP proxy the test owns, between a node and the peer port it dials:
//! it can cut the link (drop every connection and refuse new ones) and
//! stall it (stop moving bytes, connections kept).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Control {
    cut: AtomicBool,
    stalled: AtomicBool,
    stopping: AtomicBool,
    live: Mutex<Vec<TcpStream>>,
}

impl Control {
    fn drop_all(&self) {
        for s in self.live.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// Forwards `127.0.0.1:<port>` to a target port until dropped.
pub struct Proxy {
    /// The port to dial instead of the target.
    pub port: u16,
    control: Arc<Control>,
    acceptor: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// A proxy on a free port in front of `target_ip:target_port`.
    pub fn start(target_ip: &str, target_port: u16) -> Proxy {
        let port = super::free_port();
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let control = Arc::new(Control::default());
        let target = format!("{target_ip}:{target_port}");
        let acceptor = {
            let control = control.clone();
            std::thread::spawn(move || accept_loop(&listener, &target, &control))
        };
        Proxy {
            port,
            control,
            acceptor: Some(acceptor),
        }
    }

    /// Cuts the link (`true`: every connection dropped, new ones refused)
    /// or lets it through again.
    pub fn set_cut(&self, cut: bool) {
        self.control.cut.store(cut, Ordering::SeqCst);
        if cut {
            self.control.drop_all();
        }
    }

    /// Stops moving bytes (`true`) or moves them again.
    pub fn set_stalled(&self, stalled: bool) {
        self.control.stalled.store(stalled, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.control.stopping.store(true, Ordering::SeqCst);
        self.control.drop_all();
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, target: &str, control: &Arc<Control>) {
    while !control.stopping.load(Ordering::SeqCst) {
        let Ok((client, _)) = listener.accept() else {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        };
        if control.cut.load(Ordering::SeqCst) {
            continue;
        }
        let Ok(server) = TcpStream::connect(target) else {
            continue;
        };
        let _ = client.set_nonblocking(false);
        let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
            continue;
        };
        {
            let mut live = control.live.lock().unwrap();
            live.push(c2);
            live.push(s2);
        }
        for (from, to) in [(&client, &server), (&server, &client)] {
            let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) else {
                continue;
            };
            let control = control.clone();
            std::thread::spawn(move || pump(from, to, &control));
        }
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, control: &Control) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        while control.stalled.load(Ordering::SeqCst) && !control.stopping.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while control.stalled.load(Ordering::SeqCst) && !control.stopping.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
