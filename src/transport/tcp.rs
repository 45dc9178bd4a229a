//! The ring protocol over one TCP connection (plain or TLS): WRITE messages
//! stand in for RDMA WRITE_WITH_IMM (the receiver copies the bytes into its
//! ring exactly where a NIC would, then learns how far the ring is placed),
//! CREDIT carries the receiver's head back, KEEPALIVE proves liveness.

use std::io::{ErrorKind, IoSlice, Read};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{Error, HandshakeFailure, Result, Violation};
use crate::ops::status::RingGuard;
use crate::proto::control::{MessageHeader, Op, HEADER_LEN, MAX_CONTROL_LEN};
use crate::proto::handshake::decode_header;
use crate::proto::ring::RingGeometry;
use crate::transport::channel::{self, ChannelReader, ChannelWriter};
use crate::transport::handshake::MessageIo;
use crate::transport::{credit_message, keepalive_message, Delivery, LinkFlags, RingWriter};

/// How long a read waits before the receiver checks for shutdown and liveness.
pub const READ_TICK: Duration = super::IDLE_TICK;
/// How long a handshake read waits before checking its deadline.
const HANDSHAKE_TICK: Duration = Duration::from_millis(100);

/// The ring this node allocated for its peer on one connection (plain
/// memory over TCP), counted from allocation to release.
pub struct LocalRing {
    bytes: Vec<u8>,
    geometry: RingGeometry,
    _guard: RingGuard,
}

impl LocalRing {
    /// A zeroed ring of `geometry`'s capacity.
    pub fn new(geometry: RingGeometry) -> Self {
        Self {
            bytes: vec![0u8; geometry.capacity() as usize],
            geometry,
            _guard: RingGuard::new(),
        }
    }
}

/// One established TCP link; the sending half is shared with the sender thread.
pub struct TcpLink {
    /// Writes go through this lock so messages never interleave.
    writer: Mutex<ChannelWriter>,
    /// A handle for `shutdown`, usable while the writer is locked.
    control: TcpStream,
    /// The ring the peer registered for us.
    peer_ring: RingGeometry,
    flags: LinkFlags,
}

impl TcpLink {
    /// Wraps a connection whose handshake is done.
    pub fn new(writer: ChannelWriter, control: TcpStream, peer_ring: RingGeometry) -> Self {
        Self {
            writer: Mutex::new(writer),
            control,
            peer_ring,
            flags: LinkFlags::default(),
        }
    }

    fn send(&self, w: &mut ChannelWriter, parts: &mut [IoSlice<'_>]) -> Result<()> {
        if !self.is_alive() {
            return Err(Error::LinkClosed);
        }
        if let Err(e) = w.write_all(parts) {
            self.close();
            return Err(e.into());
        }
        self.flags.sent();
        Ok(())
    }

    /// Sends a pending credit while holding the writer.
    fn flush_credit(&self, w: &mut ChannelWriter) -> Result<()> {
        if let Some(head) = self.flags.take_credit() {
            self.send(w, &mut [IoSlice::new(&credit_message(head))])?;
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
            u32::try_from(bytes.len()).map_err(|_| Error::WriteTooLarge { len: bytes.len() })?;
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
        channel::shutdown(&self.control);
    }
}

/// Reads exactly `buf.len()` bytes, calling `on_idle` whenever a read times
/// out so the caller can stop or give up on a silent peer.
///
/// # Errors
/// [`Error::LinkClosed`] on EOF, an I/O error, or whatever `on_idle` returns.
pub fn read_full(
    stream: &mut ChannelReader,
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

/// Handshake messages over a TCP connection (plain or TLS).
pub struct TcpMessages<'a> {
    /// Reading half.
    pub reader: &'a mut ChannelReader,
    /// Writing half.
    pub writer: &'a mut ChannelWriter,
    /// For the timeout message.
    pub timeout_ms: u64,
    /// Checked on every read tick: eviction or unload ends the handshake.
    pub abandoned: &'a dyn Fn() -> bool,
}

impl MessageIo for TcpMessages<'_> {
    fn send(&mut self, msg: &[u8]) -> Result<()> {
        self.writer
            .write_all(&mut [IoSlice::new(msg)])
            .map_err(Error::from)
    }

    fn recv(&mut self, deadline: Instant) -> Result<(MessageHeader, Vec<u8>)> {
        let timeout_ms = self.timeout_ms;
        let abandoned = self.abandoned;
        let mut give_up = || {
            if abandoned() {
                Err(Error::handshake(
                    HandshakeFailure::Incomplete,
                    "handshake abandoned (too many pending connections, or unload)",
                ))
            } else if Instant::now() >= deadline {
                Err(Error::handshake(
                    HandshakeFailure::Incomplete,
                    format!("handshake not completed within {timeout_ms} ms"),
                ))
            } else {
                Ok(())
            }
        };
        let mut head = [0u8; HEADER_LEN];
        read_full(self.reader, &mut head, &mut give_up).map_err(incomplete)?;
        let header = decode_header(&head)?;
        let len = header.len as usize;
        if HEADER_LEN + len > MAX_CONTROL_LEN {
            return Err(Error::handshake(
                HandshakeFailure::Malformed,
                format!("handshake message of {len} bytes"),
            ));
        }
        let mut body = vec![0u8; len];
        read_full(self.reader, &mut body, &mut give_up).map_err(incomplete)?;
        Ok((header, body))
    }
}

/// EOF or an I/O error during the handshake: the connection did not complete it.
fn incomplete(e: Error) -> Error {
    match e {
        Error::Handshake { .. } => e,
        Error::LinkClosed => Error::handshake(
            HandshakeFailure::Incomplete,
            "connection closed during the handshake",
        ),
        other => Error::handshake(
            HandshakeFailure::Incomplete,
            format!("handshake i/o: {}", other.report()),
        ),
    }
}

/// Prepares a freshly connected socket for the handshake.
///
/// # Errors
/// Socket option errors.
pub fn prepare(stream: &TcpStream, write_timeout: Duration) -> Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(HANDSHAKE_TICK))?;
    stream.set_write_timeout(Some(write_timeout))?;
    Ok(())
}

/// The receive loop of one TCP link: socket -> ring (at the position each
/// WRITE names) -> `delivery`; runs until the link ends.
///
/// # Errors
/// Why the link ended.
pub fn receive(
    stream: &mut ChannelReader,
    link: &TcpLink,
    ring: &mut LocalRing,
    delivery: &mut dyn Delivery,
) -> Result<()> {
    let geometry = ring.geometry;
    let ring = &mut ring.bytes;
    let max_write = u32::try_from(geometry.capacity()).unwrap_or(u32::MAX);
    let mut placed = 0u64;
    let mut last_rx = Instant::now();
    stream.socket().set_read_timeout(Some(READ_TICK))?;
    loop {
        let mut head = [0u8; HEADER_LEN];
        read_full(stream, &mut head, &mut || idle(link, delivery, last_rx))?;
        let msg = MessageHeader::decode(&head, max_write).map_err(|e| {
            delivery.rejected();
            Violation::BadControlMessage(e)
        })?;
        match msg.op {
            Op::Write => {
                let len = u64::from(msg.len);
                if !geometry.write_continues(placed, delivery.head(), msg.arg, len) {
                    delivery.rejected();
                    return Err(Violation::WriteOutsideRing {
                        len,
                        at: msg.arg,
                        placed,
                        head: delivery.head(),
                    }
                    .into());
                }
                let off = geometry.offset(msg.arg);
                read_full(stream, &mut ring[off..off + len as usize], &mut || {
                    idle(link, delivery, last_rx)
                })?;
                placed = msg.arg + len;
                delivery.received(len);
                if let Some(h) = delivery.placed(ring, placed)? {
                    link.return_credit(h)?;
                }
            }
            Op::Credit => {
                link.credit_received(msg.arg);
                delivery.credit(msg.arg);
            }
            Op::Keepalive => {}
            other => {
                delivery.rejected();
                return Err(Violation::UnexpectedMessage {
                    op: format!("{other:?}"),
                }
                .into());
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
    if let Some(head) = delivery.idle_credit(last_rx) {
        return link.return_credit(head);
    }
    link.retry_credit()
}
