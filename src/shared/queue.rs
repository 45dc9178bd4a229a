//! Bounded lock-free queue of batches from capture (main thread) to the
//! sender thread, and the sender's wake-up.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;

use crate::proto::entry::Batch;

/// Parks the sender thread and wakes it only when it sleeps, so the hot path
/// (a push from the main thread) costs no syscall while the sender is busy.
#[derive(Debug, Default)]
pub struct SenderWake {
    sleeping: AtomicBool,
    thread: OnceLock<Thread>,
}

impl SenderWake {
    /// Registers the calling thread as the one to wake.
    pub fn register_current(&self) {
        let _ = self.thread.set(std::thread::current());
    }

    /// Wakes the sender if it sleeps.
    pub fn wake(&self) {
        if self.sleeping.swap(false, Ordering::AcqRel) {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }

    /// Sleeps up to `timeout` unless `ready()` already holds.
    pub fn wait(&self, timeout: Duration, ready: impl Fn() -> bool) {
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

/// Capture -> sender queue.
#[derive(Debug)]
pub struct BatchQueue {
    batches: ArrayQueue<Batch>,
    /// Payload bytes of the queued batches.
    bytes: AtomicUsize,
    /// Wakes the sender on push and on credit.
    pub wake: SenderWake,
}

impl BatchQueue {
    /// A queue holding at most `capacity` batches.
    pub fn new(capacity: usize) -> Self {
        Self {
            batches: ArrayQueue::new(capacity.max(1)),
            bytes: AtomicUsize::new(0),
            wake: SenderWake::default(),
        }
    }

    /// Enqueues a batch, handing it back when the queue is full. Never blocks.
    ///
    /// # Errors
    /// The batch itself when the queue is full.
    pub fn push(&self, batch: Batch) -> Result<(), Batch> {
        let size = batch.payload_len();
        if self.is_full() {
            return Err(batch);
        }
        self.batches.push(batch)?;
        self.bytes.fetch_add(size, Ordering::AcqRel);
        self.wake.wake();
        Ok(())
    }

    /// Whether a push would fail now: no slot, or the byte bound reached.
    /// The capture side is the only producer, so a `false` stays true until it pushes.
    pub fn is_full(&self) -> bool {
        self.batches.is_full()
            || (self.bytes.load(Ordering::Acquire) >= MAX_QUEUED_BYTES && !self.batches.is_empty())
    }

    /// The oldest batch, if any.
    pub fn pop(&self) -> Option<Batch> {
        let batch = self.batches.pop()?;
        self.bytes.fetch_sub(batch.payload_len(), Ordering::AcqRel);
        Some(batch)
    }

    /// Batches waiting.
    pub fn len(&self) -> usize {
        self.batches.len()
    }

    /// Whether no batch waits.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_queue_hands_the_batch_back() {
        let q = BatchQueue::new(1);
        q.push(Batch::default()).unwrap();
        assert!(q.is_full());
        assert!(q.push(Batch::default()).is_err());
        assert_eq!(q.len(), 1);
        assert!(q.pop().is_some());
        assert!(q.is_empty());
    }

    #[test]
    fn push_wakes_a_waiting_sender() {
        let q = std::sync::Arc::new(BatchQueue::new(4));
        let q2 = q.clone();
        let t = std::thread::spawn(move || {
            q2.wake.register_current();
            let start = std::time::Instant::now();
            while q2.is_empty() {
                q2.wake.wait(Duration::from_secs(30), || !q2.is_empty());
            }
            start.elapsed()
        });
        std::thread::sleep(Duration::from_millis(50));
        q.push(Batch::default()).unwrap();
        assert!(t.join().unwrap() < Duration::from_secs(10));
    }
}
