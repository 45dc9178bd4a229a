//! Bounded lock-free queue of batches from capture (main thread) to the
//! sender thread, and the sender's wake-up. [`batch_queue`] makes its two
//! ends, neither of which can be cloned: the producer, kept in `Shared` for
//! the main thread's flush, and the consumer, moved into the sender thread.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;

use crate::proto::entry::Batch;

/// Parks the sender thread and wakes it on a push, on credit and at stop.
///
/// Why no wake-up is lost: the wake is `Thread::unpark`, whose token
/// outlives the call. The sender checks its condition, then parks; a push
/// makes the condition true, then unparks. Either the unpark comes after the
/// sender's check, and then its token is there when the sender parks (or it
/// wakes the parked sender), or it comes before the check, and then the
/// check sees the push, since `unpark` synchronizes with the `park` that
/// consumes its token and the queue's own operations are atomic. A token
/// left by a push the sender saw anyway makes its next park return at once,
/// once: a spurious wake that the caller's loop absorbs. `unpark` of a
/// thread that does not sleep is one atomic swap, no syscall, so the hot
/// path costs what the earlier "is it sleeping" flag cost, without the
/// store-then-load race that flag had (without a SeqCst fence on both
/// sides, the sender's "I sleep" store and the producer's "is it asleep"
/// load could each miss the other, leaving a batch for the park timeout).
#[derive(Debug, Default)]
struct SenderWake {
    thread: OnceLock<Thread>,
}

impl SenderWake {
    /// Registers the calling thread as the one to wake.
    fn register_current(&self) {
        let _ = self.thread.set(std::thread::current());
    }

    /// Wakes the sender, or makes its next park return at once.
    fn wake(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    /// Sleeps up to `timeout` unless `ready()` already holds. Returns early
    /// on a wake (or a spurious wake-up): callers check again.
    fn wait(&self, timeout: Duration, ready: impl Fn() -> bool) {
        if !ready() {
            std::thread::park_timeout(timeout);
        }
    }
}

/// A batch and the link it was queued for: the number of the link the main
/// thread knew to be the newest when it queued the batch (its `LinkUp`
/// epoch). The sender writes it only to that link (see `ship::sender`).
#[derive(Debug)]
pub struct Queued {
    /// The link's epoch (0: none was up yet).
    pub link: u64,
    /// The batch.
    pub batch: Batch,
}

/// Most payload bytes the queue holds; beyond it (unless empty) a push fails
/// like a full queue, so a stalled peer cannot grow memory without bound.
pub const MAX_QUEUED_BYTES: usize = 256 << 20;

/// What the two ends share.
#[derive(Debug)]
struct Inner {
    batches: ArrayQueue<Queued>,
    /// Payload bytes of the queued batches, and of a batch being pushed:
    /// never below the bytes of the batches the sender can pop.
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
    /// Enqueues a batch for link `link`, handing it back when the queue is
    /// full. Never blocks.
    ///
    /// # Errors
    /// The batch itself when the queue is full.
    pub fn push(&self, link: u64, batch: Batch) -> Result<(), Batch> {
        let size = batch.payload_len();
        if self.is_full() {
            return Err(batch);
        }
        // Counted before the batch is visible, so the sender's subtraction
        // after its pop never takes the count below zero (it would wrap).
        self.inner.bytes.fetch_add(size, Ordering::AcqRel);
        if let Err(queued) = self.inner.batches.push(Queued { link, batch }) {
            self.inner.bytes.fetch_sub(size, Ordering::AcqRel);
            return Err(queued.batch);
        }
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
    pub fn pop(&mut self) -> Option<Queued> {
        let batch = self.inner.batches.pop()?;
        let len = batch.batch.payload_len();
        let before = self.inner.bytes.fetch_sub(len, Ordering::AcqRel);
        debug_assert!(
            before >= len,
            "queued bytes {before} below a popped batch's {len}"
        );
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
        q.push(1, Batch::default()).unwrap();
        assert!(q.is_full());
        assert!(q.push(1, Batch::default()).is_err());
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
        q.push(1, Batch::default()).unwrap();
        assert!(t.join().unwrap() < Duration::from_secs(10));
    }
}

#[cfg(test)]
mod wake_stress {
    use super::*;
    use crate::proto::entry::{Entry, Op};
    use std::sync::atomic::AtomicU64;

    fn batch_of_bytes(n: usize) -> Batch {
        Batch {
            entries: vec![Entry {
                origin: 1,
                seq: 1,
                clock: 1,
                db: 0,
                op: Op::Delete { key: vec![b'k'; n] },
            }],
        }
    }

    /// Ping-pong: the producer pushes one batch, then waits until the sender
    /// popped it, so every push lands while the sender is going to sleep or
    /// sleeps. A lost wake-up leaves a batch waiting the whole park timeout;
    /// a pop before the push counted its bytes trips `pop`'s debug assert.
    #[test]
    fn no_push_waits_for_the_park_timeout() {
        const ROUNDS: u64 = if cfg!(miri) { 100 } else { 20_000 };
        let (q, mut c) = batch_queue(4);
        let popped = Arc::new(AtomicU64::new(0));
        let seen = popped.clone();
        let sender = std::thread::spawn(move || {
            c.register_current();
            let mut longest = Duration::ZERO;
            for _ in 0..ROUNDS {
                let start = std::time::Instant::now();
                loop {
                    if c.pop().is_some() {
                        break;
                    }
                    c.wait_for_batch(Duration::from_secs(2));
                }
                longest = longest.max(start.elapsed());
                seen.fetch_add(1, Ordering::Release);
            }
            longest
        });
        for round in 0..ROUNDS {
            q.push(1, batch_of_bytes(100)).unwrap();
            while popped.load(Ordering::Acquire) <= round {
                std::hint::spin_loop();
            }
        }
        let longest = sender.join().unwrap();
        assert!(
            longest < Duration::from_secs(1),
            "a batch waited {longest:?}: a wake-up was lost"
        );
    }
}
