//! What a flush does, decided from what it found before reading any key
//! (pure; `flush::flush_changes` gathers the facts and runs the steps).

/// What a flush knows before it reads anything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushFacts {
    /// Local changes were taken from the dirty set.
    pub changes: bool,
    /// Keys expired since the last flush.
    pub expired: bool,
    /// The link is up, as its events told the main thread.
    pub link_up: bool,
    /// The link up is not the one the peer was last caught up on.
    pub new_link: bool,
    /// The peer is owed work: a catch-up, a sync, an ack or coverage.
    pub link_work: bool,
    /// A resting hot key held the local changes back.
    pub held: bool,
    /// Stamp records wait to be propagated, and this flush propagates.
    pub stamps_pending: bool,
}

/// The steps of a flush that has something to do, in the order it takes
/// them (recording expired keys and shipping local changes always run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushSteps {
    /// Catch the peer up on the new link first (requeue what it did not
    /// acknowledge, choose partial, full or since-watermark). The `LinkUp`
    /// event does this as it is taken (`flush::link_came_up`); a flush
    /// finds the link new only when that was skipped (a replica, promoted
    /// since) or undone (a dataset merged again).
    pub on_link_up: bool,
    /// Ask for, answer and start syncs, then a slice of catching up and
    /// the ack: only while the link is up.
    pub link_steps: bool,
    /// Come back when the rest may be over, even if no client writes.
    pub keep_awake: bool,
}

/// Whether the changes of this flush may wait for a resting hot key: only
/// a flush that allows it, over a link that is up, with a key resting,
/// and while the peer is in step (catching up reads current values anyway).
/// The last two are asked only when the first two allow a rest (the flush
/// runs every event-loop iteration).
pub fn may_rest(
    allowed: bool,
    link_up: bool,
    key_resting: impl FnOnce() -> bool,
    peer_in_step: impl FnOnce() -> bool,
) -> bool {
    allowed && link_up && key_resting() && peer_in_step()
}

/// The steps to take, or `None` when there is nothing to do (no change, no
/// expiry, no link work, nothing held, no stamp to propagate). Link work
/// and a new link count only while the link is up.
pub fn plan(facts: FlushFacts) -> Option<FlushSteps> {
    let new_link = facts.link_up && facts.new_link;
    let link_work = facts.link_up && facts.link_work;
    let idle = !facts.changes
        && !facts.expired
        && !new_link
        && !link_work
        && !facts.held
        && !facts.stamps_pending;
    (!idle).then_some(FlushSteps {
        on_link_up: new_link,
        link_steps: facts.link_up,
        keep_awake: facts.held,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_found_is_nothing_to_do() {
        assert_eq!(plan(FlushFacts::default()), None);
        let up = FlushFacts {
            link_up: true,
            ..FlushFacts::default()
        };
        assert_eq!(plan(up), None, "an idle link in step needs no flush");
    }

    #[test]
    fn link_work_and_a_new_link_count_only_while_the_link_is_up() {
        let down = FlushFacts {
            new_link: true,
            link_work: true,
            ..FlushFacts::default()
        };
        assert_eq!(plan(down), None);
        let up = FlushFacts {
            link_up: true,
            ..down
        };
        let steps = plan(up).expect("work for the link");
        assert!(steps.on_link_up && steps.link_steps && !steps.keep_awake);
    }

    #[test]
    fn local_changes_ship_with_the_link_down_and_catch_up_only_when_up() {
        let down = FlushFacts {
            changes: true,
            ..FlushFacts::default()
        };
        let steps = plan(down).expect("changes are recorded");
        assert!(!steps.link_steps && !steps.on_link_up);
        let up = FlushFacts {
            link_up: true,
            ..down
        };
        let steps = plan(up).expect("changes ship");
        assert!(steps.link_steps && !steps.on_link_up);
    }

    #[test]
    fn held_changes_keep_the_node_awake() {
        let held = FlushFacts {
            held: true,
            link_up: true,
            ..FlushFacts::default()
        };
        assert_eq!(
            plan(held),
            Some(FlushSteps {
                on_link_up: false,
                link_steps: true,
                keep_awake: true
            })
        );
    }

    #[test]
    fn an_expiry_or_a_pending_stamp_alone_is_a_reason_to_flush() {
        for facts in [
            FlushFacts {
                expired: true,
                ..FlushFacts::default()
            },
            FlushFacts {
                stamps_pending: true,
                ..FlushFacts::default()
            },
        ] {
            let steps = plan(facts).expect("something to do");
            assert!(!steps.keep_awake && !steps.link_steps);
        }
    }

    #[test]
    fn changes_rest_only_over_a_link_up_with_the_peer_in_step() {
        assert!(may_rest(true, true, || true, || true));
        for i in 0..4 {
            let mut args = [true; 4];
            args[i] = false;
            let (c, d) = (args[2], args[3]);
            assert!(!may_rest(args[0], args[1], || c, || d), "{args:?}");
        }
        let asked = || panic!("not asked while the link is down");
        assert!(!may_rest(true, false, asked, asked));
    }
}
