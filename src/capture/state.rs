//! The main thread's state, in one value: what the hooks recorded (the
//! dirty set, silent changes, expired keys), the keys resting after a
//! costly read, and the convergence state (with the peer's, whose link
//! the link thread's events tell it). Redis calls the module on its
//! main thread (the GIL held) for every part of it: hooks, the flush
//! before sleeping, applying the peer's batches, saves and loads, STATUS
//! and INFO. No other thread touches it.
//!
//! One reentrant lock makes the value shareable; each part is a cell of
//! its own, because a hook can fire inside code that holds another part (a
//! read the flush makes expires a key lazily; a save runs inside a
//! command). Taking a part that code further up the same stack holds gives
//! `None` (and a log line) instead of the deadlock a second lock would be,
//! so there is no lock order to keep.

use crate::converge::appends::AppendWindow;
use std::cell::{RefCell, RefMut};
use std::sync::LazyLock;

use parking_lot::{ReentrantMutex, ReentrantMutexGuard};

use crate::capture::fields::FieldWindow;
use crate::capture::hook::{ExpiredKey, SilentChanges};
use crate::capture::hotkeys::HotKeys;
use crate::capture::increments::IncrementWindow;
use crate::catchup::replication::Replication;
use crate::converge::changes::DirtySet;
use crate::ops::faults::Faults;

/// One part of the main thread's state.
pub struct Part<T> {
    name: &'static str,
    cell: RefCell<T>,
}

impl<T> Part<T> {
    fn new(name: &'static str, value: T) -> Self {
        Self {
            name,
            cell: RefCell::new(value),
        }
    }

    /// The part, unless code further up this thread's stack holds it.
    pub fn get(&self) -> Option<RefMut<'_, T>> {
        let part = self.cell.try_borrow_mut().ok();
        if part.is_none() {
            redis_module::logging::log_warning(format!(
                "rdmasync: internal error: the {} was taken again while held",
                self.name
            ));
        }
        part
    }

    /// The part if free; `None`, silently, when held further up the stack
    /// (a save inside the module's own command, a crash report).
    pub fn try_get(&self) -> Option<RefMut<'_, T>> {
        self.cell.try_borrow_mut().ok()
    }
}

/// The main thread's state.
pub struct MainState {
    /// Keys and events changed since the last flush.
    pub dirty: Part<DirtySet>,
    /// Changes the command filter saw without a keyspace event.
    pub silent: Part<SilentChanges>,
    /// Keys expired or evicted since the last flush.
    pub expired: Part<Vec<ExpiredKey>>,
    /// Keys resting after a costly read.
    pub hot: Part<HotKeys>,
    /// Keys only incremented since the last flush (`merge-counters`).
    pub increments: Part<IncrementWindow>,
    /// Keys changed only field by field since the last flush (`merge-elements`).
    pub fields: Part<FieldWindow>,
    /// Big strings only appended to since the last flush
    /// (`converge::appends`).
    pub appends: Part<AppendWindow>,
    /// Versions, backlog, syncs and acknowledgements with the peer.
    pub replication: Part<Replication>,
    /// The `RDMASYNC.DEBUG` switches the main thread reads.
    pub faults: Part<Faults>,
}

impl Default for MainState {
    fn default() -> Self {
        Self {
            dirty: Part::new("dirty set", DirtySet::default()),
            silent: Part::new("silent-change record", SilentChanges::default()),
            expired: Part::new("expired-key list", Vec::new()),
            hot: Part::new("hot-key record", HotKeys::default()),
            increments: Part::new("increment record", IncrementWindow::default()),
            fields: Part::new("field record", FieldWindow::default()),
            appends: Part::new("append record", AppendWindow::default()),
            replication: Part::new("convergence state", Replication::default()),
            faults: Part::new("fault switches", Faults::default()),
        }
    }
}

impl MainState {
    /// The prefix of the keys whose reads must fail now
    /// (`RDMASYNC.DEBUG FAIL-READS`), for a `Reader`.
    pub fn failing_reads(&self) -> Option<Vec<u8>> {
        self.faults.get()?.failing_reads().map(<[u8]>::to_vec)
    }
}

/// The one handle the C callbacks need: Redis gives them no context to
/// carry state in.
static MAIN: LazyLock<ReentrantMutex<MainState>> = LazyLock::new(ReentrantMutex::default);

/// The main thread's state (taken again on the same thread, it is the
/// same guard).
pub fn main_state() -> ReentrantMutexGuard<'static, MainState> {
    MAIN.lock()
}

/// The main thread's state unless another thread holds it (a crash report
/// asks from the crashing thread: never wait).
pub fn try_main_state() -> Option<ReentrantMutexGuard<'static, MainState>> {
    MAIN.try_lock()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_taken_again_while_held_is_refused_not_deadlocked() {
        let state = MainState::default();
        let held = state.dirty.try_get();
        assert!(held.is_some());
        assert!(state.dirty.try_get().is_none());
        // Other parts stay free.
        assert!(state.expired.try_get().is_some());
        drop(held);
        assert!(state.dirty.try_get().is_some());
    }

    #[test]
    fn the_lock_is_reentrant_on_one_thread() {
        let outer = main_state();
        let inner = main_state();
        assert!(inner.hot.try_get().is_some());
        drop(inner);
        drop(outer);
        assert!(try_main_state().is_some());
    }
}
