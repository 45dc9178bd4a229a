//! A TCP connection as the link sees it, plain or inside TLS: a reading
//! half (the link thread) and a writing half (the sender and credit), usable
//! at the same time from two threads.
//!
//! With TLS both halves share one rustls session behind a lock that is held
//! only to decrypt or encrypt, never across a socket read or write: a
//! writer blocked on a full socket never stops the reader from taking in
//! the credit that would unblock it.

use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;

use parking_lot::Mutex;

/// Plaintext bytes per TLS record the writer produces, and ciphertext bytes
/// the reader takes from the socket at once.
const CHUNK: usize = 16 * 1024;

/// The TLS session both halves share.
pub struct TlsSession {
    conn: Mutex<rustls::Connection>,
}

impl TlsSession {
    /// Wraps a session whose TLS handshake is complete.
    pub fn new(conn: rustls::Connection) -> Arc<Self> {
        Arc::new(Self {
            conn: Mutex::new(conn),
        })
    }
}

fn tls_error(e: rustls::Error) -> std::io::Error {
    std::io::Error::new(ErrorKind::InvalidData, e)
}

/// The reading half.
pub struct ChannelReader {
    sock: TcpStream,
    tls: Option<Arc<TlsSession>>,
    /// Ciphertext read from the socket, not yet given to rustls: `buf[at..end]`.
    buf: Vec<u8>,
    at: usize,
    end: usize,
}

/// The writing half.
pub struct ChannelWriter {
    sock: TcpStream,
    tls: Option<Arc<TlsSession>>,
    plain: Vec<u8>,
    cipher: Vec<u8>,
}

/// Splits a connection into its halves and a handle that shuts it down.
///
/// # Errors
/// When the socket cannot be cloned.
pub fn split(
    sock: TcpStream,
    tls: Option<Arc<TlsSession>>,
) -> std::io::Result<(ChannelReader, ChannelWriter, TcpStream)> {
    let control = sock.try_clone()?;
    let writer = ChannelWriter {
        sock: sock.try_clone()?,
        tls: tls.clone(),
        plain: Vec::new(),
        cipher: Vec::new(),
    };
    let reader = ChannelReader {
        sock,
        buf: if tls.is_some() {
            vec![0; CHUNK]
        } else {
            Vec::new()
        },
        tls,
        at: 0,
        end: 0,
    };
    Ok((reader, writer, control))
}

impl ChannelReader {
    /// The socket, to set timeouts on.
    pub fn socket(&self) -> &TcpStream {
        &self.sock
    }
}

impl Read for ChannelReader {
    /// Like a socket read: `Ok(0)` at the end, `WouldBlock`/`TimedOut` when
    /// the socket's read timeout passes without data.
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let Some(tls) = self.tls.clone() else {
            return self.sock.read(out);
        };
        loop {
            {
                let mut conn = tls.conn.lock();
                match conn.reader().read(out) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                if self.at < self.end {
                    let mut rd = &self.buf[self.at..self.end];
                    let n = conn.read_tls(&mut rd)?;
                    if n == 0 {
                        return Err(std::io::Error::other("TLS receive buffer full"));
                    }
                    self.at += n;
                    conn.process_new_packets().map_err(tls_error)?;
                    continue;
                }
            }
            // No plaintext and no ciphertext left: read the socket, unlocked.
            let n = self.sock.read(&mut self.buf)?;
            if n == 0 {
                let mut conn = tls.conn.lock();
                conn.read_tls(&mut std::io::empty())?;
                conn.process_new_packets().map_err(tls_error)?;
                return match conn.reader().read(out) {
                    Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(0),
                    other => other,
                };
            }
            self.at = 0;
            self.end = n;
        }
    }
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

impl ChannelWriter {
    /// The socket, to set timeouts on.
    pub fn socket(&self) -> &TcpStream {
        &self.sock
    }

    /// Writes every part, in order.
    ///
    /// # Errors
    /// Socket or TLS errors; the connection is then unusable.
    pub fn write_all(&mut self, parts: &mut [IoSlice<'_>]) -> std::io::Result<()> {
        let Some(tls) = self.tls.clone() else {
            return write_all_vectored(&mut self.sock, parts);
        };
        for part in parts.iter() {
            let mut rest: &[u8] = part;
            while !rest.is_empty() {
                let take = (CHUNK - self.plain.len()).min(rest.len());
                self.plain.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
                if self.plain.len() == CHUNK {
                    self.seal_and_send(&tls)?;
                }
            }
        }
        self.seal_and_send(&tls)
    }

    /// Encrypts the staged plaintext (lock held only for that) and sends it.
    fn seal_and_send(&mut self, tls: &TlsSession) -> std::io::Result<()> {
        {
            let mut conn = tls.conn.lock();
            if !self.plain.is_empty() {
                conn.writer().write_all(&self.plain)?;
                self.plain.clear();
            }
            while conn.wants_write() {
                conn.write_tls(&mut self.cipher)?;
            }
        }
        let result = self.sock.write_all(&self.cipher);
        self.cipher.clear();
        result
    }
}

/// Shuts a connection down: blocked reads and writes on its halves return.
pub fn shutdown(control: &TcpStream) {
    let _ = control.shutdown(Shutdown::Both);
}
