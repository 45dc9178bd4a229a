//! The hand-off from the link thread to the main thread: decoded batches
//! and the link's events, in order (`FromLink`), bounded in count and
//! bytes, with a wake-up pipe the event loop watches.
//!
//! `apply_queue` makes its two ends: an [`ApplyProducer`] the link thread
//! owns (the only one that submits) and an [`ApplyConsumer`] in `Shared`
//! that only the main thread pops. Neither clones.

use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use parking_lot::Mutex;
use redis_module::RedisModuleTimerID;

use crate::error::{Error, Result};
use crate::proto::entry::Batch;
use crate::redis::plain_value::Cursor;
use crate::redis::server::ThreadContext;
use crate::shared::Shared;

/// Batches decoded but not yet applied, at most.
const PENDING_BATCHES: usize = 1024;
/// Key and value bytes decoded but not yet applied, at most (beyond it the
/// link thread stops consuming the ring, and credit stops: backpressure).
const PENDING_BYTES: usize = 8 << 20;

/// What both ends see: the items, their weight, whether a wake-up is owed.
struct Channel {
    items: ArrayQueue<FromLink>,
    /// Payload bytes of the items queued.
    bytes: AtomicUsize,
    /// A wake-up byte is in the pipe and not yet read.
    signaled: AtomicBool,
}

impl Channel {
    /// Writes a wake-up byte into the pipe through `writer`, unless one is
    /// there already.
    fn wake(&self, writer: &UnixStream) {
        if !self.signaled.swap(true, Ordering::AcqRel) {
            let _ = (&*writer).write_all(&[1]);
        }
    }
}

/// The link thread's end: submits items and wakes the event loop.
pub struct ApplyProducer {
    channel: Arc<Channel>,
    /// The pipe's writing end (the event loop watches the other).
    writer: UnixStream,
}

/// The main thread's end: the pipe it watches, the apply timer, the items.
pub struct ApplyConsumer {
    channel: Arc<Channel>,
    /// Non-blocking: the event loop can report it readable after a nested
    /// event loop (a load, `DEBUG LOADAOF`, a busy script) read the byte.
    reader: UnixStream,
    /// The writing end again, for the main thread to wake itself when an
    /// apply run left items (it yields to clients in between).
    rewake: UnixStream,
    /// A detached context, used on the main thread only, to create the timer.
    pub(crate) context: Mutex<Option<ThreadContext>>,
    /// The apply timer, while one is pending (stopped at unload).
    pub(crate) timer: Mutex<Option<RedisModuleTimerID>>,
    /// A batch popped but not applied yet while its big values are built
    /// (`receive::staging`); what follows it waits in the queue.
    pub(crate) held: Mutex<Option<HeldBatch>>,
}

/// A batch taken from the queue whose big values are being built, a slice
/// per event-loop step, under keys of the module's own before it applies
/// (`receive::staging`).
#[derive(Debug)]
pub struct HeldBatch {
    /// The batch, applied whole once every build ended.
    pub batch: Batch,
    /// Its values being built, in entry order.
    pub builds: Vec<ValueBuild>,
    /// When the last build step ended (the time the server spent on
    /// others since sets the next step's share).
    pub stepped_at: std::time::Instant,
}

/// One value of a held batch being built.
#[derive(Debug)]
pub struct ValueBuild {
    /// Its entry's index in the batch.
    pub entry: usize,
    /// The slot of the key it is built under (`server::build_key`).
    pub slot: usize,
    /// How far the payload was read (and written to the build key).
    pub cursor: Cursor,
    /// Times it started again because the build key changed under it.
    pub restarts: u32,
    /// Whether it is done, or given up (the batch then restores it whole).
    pub state: BuildState,
}

/// Where a value's build stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildState {
    /// More elements to write.
    Building,
    /// Every element is in the build key.
    Built,
    /// Given up: the value is restored whole from its payload.
    Abandoned,
}

/// The two ends of a fresh link -> main thread queue.
///
/// # Errors
/// [`Error::LinkIo`] when the wake-up pipe cannot be created.
pub fn apply_queue() -> Result<(ApplyProducer, ApplyConsumer)> {
    let (reader, writer) = UnixStream::pair()?;
    reader.set_nonblocking(true)?;
    let channel = Arc::new(Channel {
        items: ArrayQueue::new(PENDING_BATCHES),
        bytes: AtomicUsize::new(0),
        signaled: AtomicBool::new(false),
    });
    let rewake = writer.try_clone()?;
    let producer = ApplyProducer {
        channel: channel.clone(),
        writer,
    };
    let consumer = ApplyConsumer {
        channel,
        reader,
        rewake,
        context: Mutex::new(ThreadContext::new()),
        timer: Mutex::new(None),
        held: Mutex::new(None),
    };
    Ok((producer, consumer))
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
        /// The largest frame the peer's ring takes: what cannot be framed
        /// in it is refused before it is numbered.
        max_frame: usize,
        /// The RDB format of the peer's server, from the handshake: a DUMP
        /// payload it would not restore is refused the same way.
        peer_rdb: u16,
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

impl ApplyProducer {
    fn signal(&self) {
        self.channel.wake(&self.writer);
    }

    /// Hands a batch or a link event to the main thread, waiting while the
    /// queue is full (that backpressure reaches the peer through credit).
    ///
    /// # Errors
    /// [`Error::LinkClosed`] when unload begins while waiting.
    pub fn submit(&self, shared: &Shared, mut item: FromLink) -> Result<()> {
        let channel = &*self.channel;
        let size = item.payload_len();
        loop {
            let room = channel.items.is_empty()
                || channel.bytes.load(Ordering::Acquire) + size <= PENDING_BYTES;
            if room {
                match channel.items.push(item) {
                    Ok(()) => {
                        channel.bytes.fetch_add(size, Ordering::AcqRel);
                        self.signal();
                        return Ok(());
                    }
                    Err(back) => item = back,
                }
            }
            if shared.stopping() {
                return Err(Error::LinkClosed);
            }
            self.signal();
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

impl ApplyConsumer {
    /// The pipe end the event loop watches.
    pub fn wake_fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.reader.as_raw_fd()
    }

    /// Reads the wake-up byte. A byte is in the pipe when `signaled` is
    /// set; none when a nested event loop took it since the event was
    /// reported: the read then fails at once instead of waiting.
    pub(crate) fn take_wakeup(&self) {
        let mut byte = [0u8; 1];
        let _ = (&self.reader).read(&mut byte);
        self.channel.signaled.store(false, Ordering::Release);
    }

    /// Wakes the event loop again if items are left (after an apply run
    /// that ended to let clients in).
    pub(crate) fn rewake_if_left(&self) {
        if !self.channel.items.is_empty() {
            self.channel.wake(&self.rewake);
        }
    }

    /// Wakes the event loop again (a held batch's build goes on).
    pub(crate) fn rewake(&self) {
        self.channel.wake(&self.rewake);
    }

    /// The oldest item waiting, if any.
    pub(crate) fn pop(&self) -> Option<FromLink> {
        let item = self.channel.items.pop()?;
        self.channel
            .bytes
            .fetch_sub(item.payload_len(), Ordering::AcqRel);
        Some(item)
    }

    /// Cancels a pending apply timer (main thread, at unload).
    pub fn cancel_timer(&self) {
        if let Some(id) = self.timer.lock().take() {
            if let Some(tc) = self.context.lock().as_ref() {
                let _ = tc.main_thread_context().stop_timer::<()>(id);
            }
        }
    }

    /// Entries received but not applied (dropped at unload).
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
        let (producer, consumer) = apply_queue().expect("a socket pair");
        producer.signal();
        consumer.take_wakeup();
        // Reported readable again after a nested event loop took the byte:
        // a blocking read would never return.
        consumer.take_wakeup();
        producer.signal();
        consumer.take_wakeup();
        assert!(!consumer.channel.signaled.load(Ordering::Acquire));
    }

    #[test]
    fn link_events_come_out_in_order_with_the_batches_and_weigh_nothing() {
        let shared = Shared::for_tests();
        let (producer, consumer) = apply_queue().expect("a socket pair");
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
            max_frame: 1 << 20,
            peer_rdb: 10,
        };
        producer.submit(&shared, up).unwrap();
        producer.submit(&shared, FromLink::Batch(batch)).unwrap();
        producer
            .submit(&shared, FromLink::LinkDown { epoch: 3 })
            .unwrap();
        assert_eq!(consumer.channel.bytes.load(Ordering::Acquire), bytes);
        assert!(matches!(
            consumer.pop(),
            Some(FromLink::LinkUp {
                epoch: 3,
                peer_node: 9,
                ..
            })
        ));
        assert!(matches!(consumer.pop(), Some(FromLink::Batch(_))));
        assert_eq!(consumer.channel.bytes.load(Ordering::Acquire), 0);
        assert!(matches!(
            consumer.pop(),
            Some(FromLink::LinkDown { epoch: 3 })
        ));
        assert!(consumer.pop().is_none());
        assert_eq!(consumer.discard(), 0);
    }

    #[test]
    fn a_full_queue_waits_until_the_main_thread_pops() {
        let shared = Arc::new(Shared::for_tests());
        let (producer, consumer) = apply_queue().expect("a socket pair");
        let down = |epoch| FromLink::LinkDown { epoch };
        for epoch in 0..PENDING_BATCHES as u64 {
            producer.submit(&shared, down(epoch)).unwrap();
        }
        let s = shared.clone();
        let late = std::thread::spawn(move || producer.submit(&s, down(u64::MAX)));
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            !late.is_finished(),
            "a full queue must make the link thread wait"
        );
        assert!(matches!(
            consumer.pop(),
            Some(FromLink::LinkDown { epoch: 0 })
        ));
        late.join()
            .expect("no panic")
            .expect("submitted once there was room");
        let mut last = None;
        while let Some(FromLink::LinkDown { epoch }) = consumer.pop() {
            last = Some(epoch);
        }
        assert_eq!(last, Some(u64::MAX), "the waiting item comes out last");
    }
}
