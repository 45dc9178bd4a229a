//! The ring protocol over one TCP connection: WRITE messages stand in for
//! RDMA WRITE_WITH_IMM (the receiver copies the bytes into its ring exactly
//! where a NIC would, then learns how far the ring is placed), CREDIT carries
//! the receiver's head back, KEEPALIVE proves liveness.

use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::control::{Hello, MessageHeader, Op, HEADER_LEN, HELLO_LEN};
use crate::error::{Error, Result};
use crate::ring::RingGeometry;
use crate::transport::{credit_message, keepalive_message, Delivery, LinkFlags, RingWriter};

/// How long a read waits before the receiver checks for shutdown and liveness.
pub const READ_TICK: Duration = crate::link::IDLE_TICK;

/// One established TCP link; the sending half is shared with the sender thread.
pub struct TcpLink {
    /// Writes go through this lock so messages never interleave.
    writer: Mutex<TcpStream>,
    /// A handle for `shutdown`, usable while the writer is locked.
    control: TcpStream,
    /// The ring the peer registered for us.
    peer_ring: RingGeometry,
    flags: LinkFlags,
}

fn write_all_vectored(
    stream: &mut TcpStream,
    mut parts: &mut [IoSlice<'_>],
) -> std::io::Result<()> {
    while !parts.is_empty() {
        match stream.write_vectored(parts) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut parts, n),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl TcpLink {
    /// Wraps a connection whose handshake is done.
    ///
    /// # Errors
    /// [`Error::LinkIo`] when the socket cannot be cloned.
    pub fn new(stream: &TcpStream, peer_ring: RingGeometry) -> Result<Self> {
        Ok(Self {
            writer: Mutex::new(stream.try_clone()?),
            control: stream.try_clone()?,
            peer_ring,
            flags: LinkFlags::default(),
        })
    }

    fn send(&self, stream: &mut TcpStream, parts: &mut [IoSlice<'_>]) -> Result<()> {
        if !self.is_alive() {
            return Err(Error::LinkClosed);
        }
        if let Err(e) = write_all_vectored(stream, parts) {
            self.close();
            return Err(e.into());
        }
        self.flags.sent();
        Ok(())
    }

    /// Sends a pending credit while holding the writer.
    fn flush_credit(&self, stream: &mut TcpStream) -> Result<()> {
        if let Some(head) = self.flags.take_credit() {
            self.send(stream, &mut [IoSlice::new(&credit_message(head))])?;
        }
        Ok(())
    }

    /// Returns `head` to the peer. Never waits for the writer: if the sender
    /// holds it (possibly blocked on a full socket), it sends the credit when done.
    ///
    /// # Errors
    /// An I/O error; the link is then dead.
    pub fn return_credit(&self, head: u64) -> Result<()> {
        self.flags.queue_credit(head);
        if let Some(mut w) = self.writer.try_lock() {
            self.flush_credit(&mut w)?;
        }
        Ok(())
    }

    /// Sends a credit that found the writer busy earlier, if the writer is free now.
    ///
    /// # Errors
    /// An I/O error; the link is then dead.
    pub fn retry_credit(&self) -> Result<()> {
        if self.flags.credit_waiting() {
            if let Some(mut w) = self.writer.try_lock() {
                self.flush_credit(&mut w)?;
            }
        }
        Ok(())
    }

    /// Records credit the peer returned.
    pub fn credit_received(&self, head: u64) {
        self.flags.credit_received(head);
    }
}

impl RingWriter for TcpLink {
    fn geometry(&self) -> RingGeometry {
        self.peer_ring
    }

    fn post_write(&self, pos: u64, bytes: &[u8]) -> Result<()> {
        let len =
            u32::try_from(bytes.len()).map_err(|_| Error::Protocol("write over 4 GiB".into()))?;
        let msg = MessageHeader {
            op: Op::Write,
            len,
            arg: pos,
        }
        .encode();
        let mut w = self.writer.lock();
        self.send(&mut w, &mut [IoSlice::new(&msg), IoSlice::new(bytes)])?;
        self.flush_credit(&mut w)
    }

    fn credit(&self) -> u64 {
        self.flags.credit()
    }

    fn is_alive(&self) -> bool {
        self.flags.is_alive()
    }

    fn idle_ms(&self) -> u64 {
        self.flags.idle_ms()
    }

    fn send_keepalive(&self) -> Result<()> {
        let mut w = self.writer.lock();
        self.send(&mut w, &mut [IoSlice::new(&keepalive_message())])?;
        self.flush_credit(&mut w)
    }

    fn close(&self) {
        self.flags.kill();
        let _ = self.control.shutdown(Shutdown::Both);
    }
}

/// Reads exactly `buf.len()` bytes, calling `on_idle` whenever a read times
/// out so the caller can stop or give up on a silent peer.
///
/// # Errors
/// [`Error::LinkClosed`] on EOF, an I/O error, or whatever `on_idle` returns.
pub fn read_full(
    stream: &mut TcpStream,
    buf: &mut [u8],
    on_idle: &mut dyn FnMut() -> Result<()>,
) -> Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match stream.read(&mut buf[got..]) {
            Ok(0) => return Err(Error::LinkClosed),
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => on_idle()?,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Sends our HELLO and reads the peer's, within `timeout`.
///
/// # Errors
/// I/O errors, a timeout, or a HELLO that is malformed or from another version.
pub fn exchange_hello(stream: &mut TcpStream, ours: &Hello, timeout: Duration) -> Result<Hello> {
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    stream.write_all(&ours.encode())?;
    let mut head = [0u8; HEADER_LEN];
    let deadline = Instant::now() + timeout;
    let mut give_up = || {
        if Instant::now() >= deadline {
            Err(Error::Protocol("handshake timed out".into()))
        } else {
            Ok(())
        }
    };
    read_full(stream, &mut head, &mut give_up)?;
    let header = MessageHeader::decode(&head, 0).map_err(|e| Error::Protocol(e.to_string()))?;
    if header.op != Op::Hello {
        return Err(Error::Protocol(format!(
            "expected HELLO, got {:?}",
            header.op
        )));
    }
    let mut body = [0u8; HELLO_LEN];
    read_full(stream, &mut body, &mut give_up)?;
    let hello = Hello::decode(&body).map_err(|e| Error::Protocol(e.to_string()))?;
    stream.set_write_timeout(None)?;
    Ok(hello)
}

/// The receive loop of one TCP link: socket -> ring (at the position each
/// WRITE names) -> `delivery`; runs until the link ends.
///
/// # Errors
/// Why the link ended.
pub fn receive(
    stream: &mut TcpStream,
    link: &TcpLink,
    ring_size: u64,
    delivery: &mut dyn Delivery,
) -> Result<()> {
    let geometry = RingGeometry::new(ring_size)
        .ok_or_else(|| Error::Protocol("invalid local ring size".into()))?;
    // The ring the peer writes into: plain memory, nothing to register over TCP.
    let mut ring = vec![0u8; geometry.capacity() as usize];
    let max_write = u32::try_from(geometry.capacity()).unwrap_or(u32::MAX);
    let mut placed = 0u64;
    let mut last_rx = Instant::now();
    stream.set_read_timeout(Some(READ_TICK))?;
    loop {
        let mut head = [0u8; HEADER_LEN];
        read_full(stream, &mut head, &mut || idle(link, delivery, last_rx))?;
        let msg = MessageHeader::decode(&head, max_write).map_err(|e| {
            delivery.rejected();
            Error::Protocol(e.to_string())
        })?;
        match msg.op {
            Op::Write => {
                let len = u64::from(msg.len);
                if !geometry.write_continues(placed, delivery.head(), msg.arg, len) {
                    delivery.rejected();
                    return Err(Error::Protocol(format!(
                        "write of {len} bytes at {} outside the ring (placed {placed}, head {})",
                        msg.arg,
                        delivery.head()
                    )));
                }
                let off = geometry.offset(msg.arg);
                read_full(stream, &mut ring[off..off + len as usize], &mut || {
                    idle(link, delivery, last_rx)
                })?;
                placed = msg.arg + len;
                delivery.received(len);
                if let Some(h) = delivery.placed(&ring, placed)? {
                    link.return_credit(h)?;
                }
            }
            Op::Credit => {
                link.credit_received(msg.arg);
                delivery.credit(msg.arg);
            }
            Op::Keepalive => {}
            Op::Hello => {
                delivery.rejected();
                return Err(Error::Protocol("HELLO on an established link".into()));
            }
        }
        last_rx = Instant::now();
    }
}

fn idle(link: &TcpLink, delivery: &mut dyn Delivery, last_rx: Instant) -> Result<()> {
    if !link.is_alive() {
        return Err(Error::LinkClosed);
    }
    delivery.idle(last_rx)?;
    link.retry_credit()
}
