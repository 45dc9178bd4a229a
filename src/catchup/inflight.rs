//! Changes shipped and not yet acknowledged, oldest first, kept to be resent
//! after a reconnect. The changes of one pushed batch are recorded together,
//! their key names packed into one buffer: shipping a change allocates
//! nothing per key, and an ack frees whole batches.

use std::collections::VecDeque;
use std::time::Instant;

use crate::converge::changes::PendingOp;
use crate::converge::version::Stamp;
use crate::proto::entry::{Entry, Op};

/// One shipped change; a key name is `names[start..end]` of its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Key {
        db: u32,
        start: usize,
        end: usize,
    },
    FlushDb(u32),
    FlushAll,
    SwapDb(u32, u32, Stamp),
    /// A function library's code or delete; its name is `names[start..end]`.
    Library {
        start: usize,
        end: usize,
    },
}

/// The changes of one pushed batch, in sequence order.
#[derive(Debug)]
pub struct SentBatch {
    sent: Instant,
    /// The changes before this index are acknowledged.
    acked: usize,
    changes: Vec<(u64, Change)>,
    names: Vec<u8>,
}

impl SentBatch {
    /// An empty record of a batch pushed at `sent`.
    pub fn new(sent: Instant) -> Self {
        Self {
            sent,
            acked: 0,
            changes: Vec::new(),
            names: Vec::new(),
        }
    }

    /// Records the change `e` carries; acks and sync requests are not
    /// changes and are not recorded.
    pub fn record(&mut self, e: &Entry) {
        let (seq, db) = (e.seq, e.db);
        let change = match &e.op {
            Op::Value { key, .. }
            | Op::Delete { key }
            | Op::Expire { key, .. }
            | Op::Counter { key, .. }
            | Op::Fields { key, .. }
            | Op::Append { key, .. } => {
                let start = self.names.len();
                self.names.extend_from_slice(key);
                Change::Key {
                    db,
                    start,
                    end: self.names.len(),
                }
            }
            Op::FlushDb => Change::FlushDb(db),
            Op::FlushAll => Change::FlushAll,
            Op::SwapDb { other } => Change::SwapDb(db, *other, Stamp::new(e.clock, e.origin)),
            Op::Library { name, .. } | Op::LibraryDelete { name } => {
                let start = self.names.len();
                self.names.extend_from_slice(name);
                Change::Library {
                    start,
                    end: self.names.len(),
                }
            }
            // A sync cut off starts over whole: its sweep marks with it.
            Op::Ack { .. }
            | Op::Bound { .. }
            | Op::SyncRequest { .. }
            | Op::SweepStart { .. }
            | Op::SweepEnd { .. } => return,
        };
        self.changes.push((seq, change));
    }

    fn unacked(&self) -> usize {
        self.changes.len() - self.acked
    }

    fn pending_op(&self, change: Change) -> PendingOp {
        match change {
            Change::Key { db, start, end } => PendingOp::Key {
                db,
                key: self.names[start..end].to_vec(),
            },
            Change::FlushDb(db) => PendingOp::FlushDb(db),
            Change::FlushAll => PendingOp::FlushAll,
            Change::SwapDb(a, b, stamp) => PendingOp::SwapDb(a, b, Some(stamp)),
            Change::Library { start, end } => PendingOp::Library(self.names[start..end].to_vec()),
        }
    }
}

/// Shipped changes the peer has not acknowledged, in sequence order.
#[derive(Debug, Default)]
pub struct InFlight {
    batches: VecDeque<SentBatch>,
    len: usize,
}

impl InFlight {
    /// Appends a pushed batch's changes (their sequence numbers follow those
    /// already held).
    pub fn push(&mut self, batch: SentBatch) {
        if batch.unacked() > 0 {
            self.len += batch.unacked();
            self.batches.push_back(batch);
        }
    }

    /// Changes held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The peer applied our entries up to `applied`: their changes go.
    pub fn acknowledged(&mut self, applied: u64) {
        while let Some(front) = self.batches.front_mut() {
            let before = front.unacked();
            while front
                .changes
                .get(front.acked)
                .is_some_and(|&(seq, _)| seq <= applied)
            {
                front.acked += 1;
            }
            self.len -= before - front.unacked();
            if front.unacked() > 0 {
                return;
            }
            self.batches.pop_front();
        }
    }

    /// When the oldest change held was pushed.
    pub fn oldest_sent(&self) -> Option<Instant> {
        self.batches.front().map(|b| b.sent)
    }

    /// Takes every change held, oldest first.
    pub fn drain(&mut self) -> Vec<PendingOp> {
        let mut ops = Vec::with_capacity(self.len);
        for batch in self.batches.drain(..) {
            ops.extend(
                batch.changes[batch.acked..]
                    .iter()
                    .map(|&(_, change)| batch.pending_op(change)),
            );
        }
        self.len = 0;
        ops
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The entry `seq` of `db` carrying `op` (its clock is 10 x `seq`).
    fn at(seq: u64, db: u32, op: Op) -> Entry {
        Entry {
            origin: 1,
            seq,
            clock: seq * 10,
            db,
            op,
        }
    }

    fn delete(key: &str) -> Op {
        Op::Delete {
            key: key.as_bytes().to_vec(),
        }
    }

    fn key(db: u32, k: &str) -> PendingOp {
        PendingOp::Key {
            db,
            key: k.as_bytes().to_vec(),
        }
    }

    #[test]
    fn every_kind_of_change_comes_back_in_order_and_acks_are_skipped() {
        let mut b = SentBatch::new(Instant::now());
        b.record(&at(1, 3, delete("a")));
        b.record(&at(
            2,
            0,
            Op::Ack {
                applied: 9,
                in_step: false,
                holds: 0,
            },
        ));
        b.record(&at(3, 2, Op::FlushDb));
        b.record(&at(4, 0, Op::FlushAll));
        b.record(&at(5, 1, Op::SwapDb { other: 4 }));
        b.record(&at(
            6,
            5,
            Op::Value {
                key: b"bb".to_vec(),
                payload: vec![1, 2],
                expiry_ms: None,
                encoding: crate::proto::entry::Encoding::RawString,
            },
        ));
        let mut log = InFlight::default();
        log.push(b);
        assert_eq!(log.len(), 5);
        assert_eq!(
            log.drain(),
            vec![
                key(3, "a"),
                PendingOp::FlushDb(2),
                PendingOp::FlushAll,
                PendingOp::SwapDb(1, 4, Some(Stamp::new(50, 1))),
                key(5, "bb"),
            ]
        );
        assert_eq!(log.len(), 0);
        assert!(log.oldest_sent().is_none());
    }

    #[test]
    fn an_ack_inside_a_batch_keeps_its_rest() {
        let t0 = Instant::now();
        let mut log = InFlight::default();
        let mut b = SentBatch::new(t0);
        for (seq, k) in [(1, "a"), (2, "b"), (3, "c")] {
            b.record(&at(seq, 0, delete(k)));
        }
        log.push(b);
        let mut b = SentBatch::new(Instant::now());
        b.record(&at(4, 0, delete("d")));
        log.push(b);
        log.acknowledged(2);
        assert_eq!(log.len(), 2);
        assert_eq!(log.oldest_sent(), Some(t0));
        log.acknowledged(3);
        assert_eq!(log.len(), 1);
        assert_ne!(log.oldest_sent(), Some(t0));
        assert_eq!(log.drain(), vec![key(0, "d")]);
    }

    #[test]
    fn a_batch_of_acks_only_holds_nothing() {
        let mut log = InFlight::default();
        let mut b = SentBatch::new(Instant::now());
        b.record(&at(
            7,
            0,
            Op::Ack {
                applied: 1,
                in_step: false,
                holds: 0,
            },
        ));
        log.push(b);
        assert_eq!(log.len(), 0);
        assert!(log.oldest_sent().is_none());
    }

    proptest! {
        /// Against the obvious model: one (seq, key) per change in a deque.
        #[test]
        fn matches_a_deque_of_changes(
            batches in proptest::collection::vec(
                proptest::collection::vec("[a-c]{0,3}", 0..5), 1..12),
            acks in proptest::collection::vec(0u64..40, 0..6),
        ) {
            let mut log = InFlight::default();
            let mut model: VecDeque<(u64, PendingOp)> = VecDeque::new();
            let mut seq = 0;
            let mut acks = acks.into_iter();
            for keys in &batches {
                let mut b = SentBatch::new(Instant::now());
                for k in keys {
                    seq += 1;
                    b.record(&at(seq, 0, delete(k)));
                    model.push_back((seq, key(0, k)));
                }
                log.push(b);
                if let Some(applied) = acks.next() {
                    log.acknowledged(applied);
                    while model.front().is_some_and(|(s, _)| *s <= applied) {
                        model.pop_front();
                    }
                }
                prop_assert_eq!(log.len(), model.len());
            }
            let expected: Vec<PendingOp> = model.into_iter().map(|(_, op)| op).collect();
            prop_assert_eq!(log.drain(), expected);
        }
    }
}
