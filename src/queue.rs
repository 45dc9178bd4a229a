//! Bounded lock-free queue of batches from capture (main thread) to the
//! sender thread, and the sender's wake-up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;

use crate::entry::Batch;

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

/// Capture -> sender queue.
#[derive(Debug)]
pub struct BatchQueue {
    batches: ArrayQueue<Batch>,
    /// Wakes the sender on push and on credit.
    pub wake: SenderWake,
}

impl BatchQueue {
    /// A queue holding at most `capacity` batches.
    pub fn new(capacity: usize) -> Self {
        Self {
            batches: ArrayQueue::new(capacity.max(1)),
            wake: SenderWake::default(),
        }
    }

    /// Enqueues a batch, handing it back when the queue is full. Never blocks.
    ///
    /// # Errors
    /// The batch itself when the queue is full.
    pub fn push(&self, batch: Batch) -> Result<(), Batch> {
        self.batches.push(batch)?;
        self.wake.wake();
        Ok(())
    }

    /// The oldest batch, if any.
    pub fn pop(&self) -> Option<Batch> {
        self.batches.pop()
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
