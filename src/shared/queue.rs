//! Bounded lock-free queue of batches from capture (main thread) to the
//! sender thread, and the sender's wake-up. [`batch_queue`] makes its two
//! ends, neither of which can be cloned: the producer, kept in `Shared` for
//! the main thread's flush, and the consumer, moved into the sender thread.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;

use crate::proto::entry::Batch;

/// Parks the sender thread and wakes it only when it sleeps, so the hot path
/// (a push from the main thread) costs no syscall while the sender is busy.
#[derive(Debug, Default)]
struct SenderWake {
    sleeping: AtomicBool,
    thread: OnceLock<Thread>,
}

impl SenderWake {
    /// Registers the calling thread as the one to wake.
    fn register_current(&self) {
        let _ = self.thread.set(std::thread::current());
    }

    /// Wakes the sender if it sleeps.
    fn wake(&self) {
        if self.sleeping.swap(false, Ordering::AcqRel) {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }

    /// Sleeps up to `timeout` unless `ready()` already holds.
    fn wait(&self, timeout: Duration, ready: impl Fn() -> bool) {
        self.sleeping.store(true, Ordering::Release);
        if !ready() {
            std::thread::park_timeout(timeout);
        }
        self.sleeping.store(false, Ordering::Release);
    }
}

/// Most payload bytes the queue holds; beyond it (unless empty) a push fails
/// like a full queue, so a stalled peer cannot grow memory without bound.
pub const MAX_QUEUED_BYTES: usize = 256 << 20;

/// What the two ends share.
#[derive(Debug)]
struct Inner {
    batches: ArrayQueue<Batch>,
    /// Payload bytes of the queued batches.
    bytes: AtomicUsize,
    /// Wakes the sender on push, on credit and at stop.
    wake: SenderWake,
}

/// The capture end of the queue: the main thread pushes.
#[derive(Debug)]
pub struct BatchProducer {
    inner: Arc<Inner>,
}

/// The sender's end of the queue: the sender thread pops and sleeps on it.
#[derive(Debug)]
pub struct BatchConsumer {
    inner: Arc<Inner>,
}

/// A queue holding at most `capacity` batches, as its two ends.
pub fn batch_queue(capacity: usize) -> (BatchProducer, BatchConsumer) {
    let inner = Arc::new(Inner {
        batches: ArrayQueue::new(capacity.max(1)),
        bytes: AtomicUsize::new(0),
        wake: SenderWake::default(),
    });
    (
        BatchProducer {
            inner: inner.clone(),
        },
        BatchConsumer { inner },
    )
}

impl BatchProducer {
    /// Enqueues a batch, handing it back when the queue is full. Never blocks.
    ///
    /// # Errors
    /// The batch itself when the queue is full.
    pub fn push(&self, batch: Batch) -> Result<(), Batch> {
        let size = batch.payload_len();
        if self.is_full() {
            return Err(batch);
        }
        self.inner.batches.push(batch)?;
        self.inner.bytes.fetch_add(size, Ordering::AcqRel);
        self.inner.wake.wake();
        Ok(())
    }

    /// Whether a push would fail now: no slot, or the byte bound reached.
    /// This is the only producer, so a `false` stays false until it pushes.
    pub fn is_full(&self) -> bool {
        let inner = &self.inner;
        inner.batches.is_full()
            || (inner.bytes.load(Ordering::Acquire) >= MAX_QUEUED_BYTES
                && !inner.batches.is_empty())
    }

    /// Batches waiting (for STATUS and INFO).
    pub fn waiting(&self) -> usize {
        self.inner.batches.len()
    }

    /// Wakes the sender if it sleeps: credit came back, the link changed,
    /// or the module stops.
    pub fn wake_sender(&self) {
        self.inner.wake.wake();
    }
}

impl BatchConsumer {
    /// Makes the calling thread the one a push or [`BatchProducer::wake_sender`] wakes.
    pub fn register_current(&self) {
        self.inner.wake.register_current();
    }

    /// The oldest batch, if any.
    pub fn pop(&mut self) -> Option<Batch> {
        let batch = self.inner.batches.pop()?;
        self.inner
            .bytes
            .fetch_sub(batch.payload_len(), Ordering::AcqRel);
        Some(batch)
    }

    /// Whether no batch waits.
    pub fn is_empty(&self) -> bool {
        self.inner.batches.is_empty()
    }

    /// Sleeps up to `timeout`, or until woken, unless a batch already waits.
    pub fn wait_for_batch(&self, timeout: Duration) {
        self.inner.wake.wait(timeout, || !self.is_empty());
    }

    /// Sleeps up to `timeout`, or until woken, unless `ready()` already holds.
    pub fn wait_until(&self, timeout: Duration, ready: impl Fn() -> bool) {
        self.inner.wake.wait(timeout, ready);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_queue_hands_the_batch_back() {
        let (q, mut c) = batch_queue(1);
        q.push(Batch::default()).unwrap();
        assert!(q.is_full());
        assert!(q.push(Batch::default()).is_err());
        assert_eq!(q.waiting(), 1);
        assert!(c.pop().is_some());
        assert!(c.is_empty());
        assert!(!q.is_full());
    }

    #[test]
    fn push_wakes_a_waiting_sender() {
        let (q, c) = batch_queue(4);
        let t = std::thread::spawn(move || {
            c.register_current();
            let start = std::time::Instant::now();
            while c.is_empty() {
                c.wait_for_batch(Duration::from_secs(30));
            }
            start.elapsed()
        });
        std::thread::sleep(Duration::from_millis(50));
        q.push(Batch::default()).unwrap();
        assert!(t.join().unwrap() < Duration::from_secs(10));
    }
}
