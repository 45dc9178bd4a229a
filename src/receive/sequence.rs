//! What the peer's sequence numbers must do on one link: follow each other
//! with no gap. The peer numbers its entries as it queues them and writes
//! to a link only what it queued for that link, in order (`ship::sender`),
//! so a gap means an entry was lost on the way; an ack sent after it would
//! cover a change this node never applied. The link is stopped instead:
//! the peer resends what it holds unacknowledged on the next link.

use crate::proto::entry::Batch;

/// The sequence numbers seen on one link (a new link starts a new one).
#[derive(Debug, Default)]
pub struct SequenceCheck {
    /// The last sequence number received on this link (None: nothing yet).
    last: Option<u64>,
}

/// A batch that does not follow what came before it on the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    /// The sequence number that had to come next.
    pub expected: u64,
    /// The one that came.
    pub got: u64,
}

impl SequenceCheck {
    /// Takes `batch` if its entries follow the last one received, one by
    /// one; the first batch on a link may start anywhere.
    ///
    /// # Errors
    /// The first [`Gap`]; nothing of the batch is taken then.
    pub fn admit(&mut self, batch: &Batch) -> Result<(), Gap> {
        let mut last = self.last;
        for e in &batch.entries {
            if let Some(prev) = last {
                let expected = prev.wrapping_add(1);
                if e.seq != expected {
                    return Err(Gap {
                        expected,
                        got: e.seq,
                    });
                }
            }
            last = Some(e.seq);
        }
        self.last = last;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::entry::{Entry, Op};
    use proptest::prelude::*;

    fn batch(seqs: &[u64]) -> Batch {
        Batch {
            entries: seqs
                .iter()
                .map(|&seq| Entry {
                    origin: 1,
                    seq,
                    clock: 1,
                    db: 0,
                    op: Op::FlushAll,
                })
                .collect(),
        }
    }

    #[test]
    fn a_link_starts_anywhere_then_numbers_follow_each_other() {
        let mut check = SequenceCheck::default();
        assert_eq!(check.admit(&batch(&[1000, 1001])), Ok(()));
        assert_eq!(check.admit(&batch(&[1002])), Ok(()));
        assert_eq!(
            check.admit(&batch(&[1004, 1005])),
            Err(Gap {
                expected: 1003,
                got: 1004
            })
        );
        // Refused whole: the check still expects 1003.
        assert_eq!(check.admit(&batch(&[1003])), Ok(()));
    }

    #[test]
    fn a_gap_inside_a_batch_or_a_repeat_is_refused() {
        let mut check = SequenceCheck::default();
        assert!(check.admit(&batch(&[5, 7])).is_err());
        assert_eq!(check.admit(&batch(&[5, 6])), Ok(()));
        assert!(check.admit(&batch(&[6])).is_err(), "a repeat is not next");
    }

    proptest! {
        /// Splitting a run of numbers into batches any way is admitted;
        /// leaving any one number out is refused at the batch that skips it.
        #[test]
        fn only_runs_without_a_hole_are_admitted(
            start in 1u64..1 << 50,
            cuts in proptest::collection::vec(1usize..5, 1..20),
            hole in any::<proptest::sample::Index>(),
        ) {
            let total: usize = cuts.iter().sum();
            let seqs: Vec<u64> = (start..start + total as u64).collect();
            let mut whole = SequenceCheck::default();
            let mut at = 0;
            for n in &cuts {
                prop_assert!(whole.admit(&batch(&seqs[at..at + n])).is_ok());
                at += n;
            }
            let missing = hole.index(total);
            let mut holed = SequenceCheck::default();
            let mut refused = false;
            let mut at = 0;
            for n in &cuts {
                let part: Vec<u64> =
                    seqs[at..at + n].iter().copied().filter(|&s| s != seqs[missing]).collect();
                at += n;
                if part.is_empty() {
                    continue;
                }
                refused |= holed.admit(&batch(&part)).is_err();
            }
            // Only a missing first or last number leaves no visible hole.
            prop_assert_eq!(refused, missing != 0 && missing != total - 1);
        }
    }
}
