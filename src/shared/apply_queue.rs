//! The hand-off from the link thread to the main thread: decoded batches
//! and the link's events, in order (`FromLink`), bounded in count and
//! bytes, with a wake-up pipe the event loop watches.

use std::io::{Read as _, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use parking_lot::Mutex;
use redis_module::RedisModuleTimerID;

use crate::error::{Error, Result};
use crate::proto::entry::Batch;
use crate::redis::server::ThreadContext;
use crate::shared::Shared;

/// Batches decoded but not yet applied, at most.
const PENDING_BATCHES: usize = 1024;
/// Key and value bytes decoded but not yet applied, at most (beyond it the
/// link thread stops consuming the ring, and credit stops: backpressure).
const PENDING_BYTES: usize = 8 << 20;

/// Link thread -> main thread hand-off.
pub struct ApplyQueue {
    batches: ArrayQueue<FromLink>,
    /// Payload bytes of the batches in `batches`.
    bytes: std::sync::atomic::AtomicUsize,
    /// A wake-up byte is in the pipe and not yet read.
    signaled: AtomicBool,
    /// Non-blocking: the event loop can report it readable after a nested
    /// event loop (a load, `DEBUG LOADAOF`, a busy script) read the byte.
    reader: Mutex<std::os::unix::net::UnixStream>,
    writer: Mutex<std::os::unix::net::UnixStream>,
    /// A detached context, used on the main thread only, to create the timer.
    pub(crate) context: Mutex<Option<ThreadContext>>,
    /// The apply timer, while one is pending (stopped at unload).
    pub(crate) timer: Mutex<Option<RedisModuleTimerID>>,
}

/// What the link thread hands the main thread, in the order it happened: a
/// link comes up, its batches, it goes down. The main thread learns of a
/// link only from here, so a batch is never applied under the state of
/// another link.
#[derive(Debug)]
pub enum FromLink {
    /// Link `epoch` (1 for the first link of this process, then one more
    /// per link) is up: what follows came over it.
    LinkUp {
        /// The link's number.
        epoch: u64,
        /// The peer's node id, from the handshake.
        peer_node: u64,
    },
    /// A batch the poller decoded.
    Batch(Batch),
    /// Link `epoch` ended.
    LinkDown {
        /// The link's number.
        epoch: u64,
    },
}

impl FromLink {
    /// Payload bytes (events carry none).
    fn payload_len(&self) -> usize {
        match self {
            Self::Batch(b) => b.payload_len(),
            Self::LinkUp { .. } | Self::LinkDown { .. } => 0,
        }
    }
}

impl ApplyQueue {
    /// A queue and its wake-up pipe.
    ///
    /// # Errors
    /// [`Error::LinkIo`] when the pipe cannot be created.
    pub fn new() -> Result<Self> {
        let (reader, writer) = std::os::unix::net::UnixStream::pair()?;
        reader.set_nonblocking(true)?;
        Ok(Self {
            batches: ArrayQueue::new(PENDING_BATCHES),
            bytes: std::sync::atomic::AtomicUsize::new(0),
            signaled: AtomicBool::new(false),
            reader: Mutex::new(reader),
            writer: Mutex::new(writer),
            context: Mutex::new(ThreadContext::new()),
            timer: Mutex::new(None),
        })
    }

    /// The pipe end the event loop watches.
    pub fn wake_fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.reader.lock().as_raw_fd()
    }

    /// Reads the wake-up byte. A byte is in the pipe when `signaled` is
    /// set; none when a nested event loop took it since the event was
    /// reported: the read then fails at once instead of waiting.
    pub(crate) fn take_wakeup(&self) {
        let mut byte = [0u8; 1];
        let _ = self.reader.lock().read(&mut byte);
        self.signaled.store(false, Ordering::Release);
    }

    pub(crate) fn signal(&self) {
        if !self.signaled.swap(true, Ordering::AcqRel) {
            let _ = self.writer.lock().write_all(&[1]);
        }
    }

    /// Hands a batch or a link event to the main thread, waiting while the
    /// queue is full (that backpressure reaches the peer through credit).
    ///
    /// # Errors
    /// [`Error::LinkClosed`] when unload begins while waiting.
    pub fn submit(&self, shared: &Shared, mut batch: FromLink) -> Result<()> {
        let size = batch.payload_len();
        loop {
            let room = self.batches.is_empty()
                || self.bytes.load(Ordering::Acquire) + size <= PENDING_BYTES;
            if room {
                match self.batches.push(batch) {
                    Ok(()) => {
                        self.bytes.fetch_add(size, Ordering::AcqRel);
                        self.signal();
                        return Ok(());
                    }
                    Err(back) => batch = back,
                }
            }
            if shared.stopping() {
                return Err(Error::LinkClosed);
            }
            self.signal();
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// The oldest item waiting, if any.
    pub(crate) fn pop(&self) -> Option<FromLink> {
        let batch = self.batches.pop()?;
        self.bytes.fetch_sub(batch.payload_len(), Ordering::AcqRel);
        Some(batch)
    }

    /// Cancels a pending apply timer (main thread, at unload).
    pub fn cancel_timer(&self) {
        if let Some(id) = self.timer.lock().take() {
            if let Some(tc) = self.context.lock().as_ref() {
                let _ = tc.main_thread_context().stop_timer::<()>(id);
            }
        }
    }

    /// Batches received but not applied (dropped at unload).
    pub fn discard(&self) -> u64 {
        let mut n = 0;
        while let Some(item) = self.pop() {
            if let FromLink::Batch(b) = item {
                n += b.entries.len() as u64;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::entry::{Entry, Op};

    #[test]
    fn a_wakeup_with_nothing_to_read_returns_at_once() {
        let queue = ApplyQueue::new().expect("a socket pair");
        queue.signal();
        queue.take_wakeup();
        // Reported readable again after a nested event loop took the byte:
        // a blocking read would never return.
        queue.take_wakeup();
        queue.signal();
        queue.take_wakeup();
        assert!(!queue.signaled.load(Ordering::Acquire));
    }

    #[test]
    fn link_events_come_out_in_order_with_the_batches_and_weigh_nothing() {
        let shared = Shared::for_tests();
        let queue = &shared.apply;
        let batch = Batch {
            entries: vec![Entry {
                db: 0,
                origin: 2,
                seq: 1,
                clock: 1,
                op: Op::Delete { key: b"k".to_vec() },
            }],
        };
        let bytes = batch.payload_len();
        let up = FromLink::LinkUp {
            epoch: 3,
            peer_node: 9,
        };
        queue.submit(&shared, up).unwrap();
        queue.submit(&shared, FromLink::Batch(batch)).unwrap();
        queue
            .submit(&shared, FromLink::LinkDown { epoch: 3 })
            .unwrap();
        assert_eq!(queue.bytes.load(Ordering::Acquire), bytes);
        assert!(matches!(
            queue.pop(),
            Some(FromLink::LinkUp {
                epoch: 3,
                peer_node: 9
            })
        ));
        assert!(matches!(queue.pop(), Some(FromLink::Batch(_))));
        assert_eq!(queue.bytes.load(Ordering::Acquire), 0);
        assert!(matches!(queue.pop(), Some(FromLink::LinkDown { epoch: 3 })));
        assert!(queue.pop().is_none());
    }
}
