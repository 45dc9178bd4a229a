//! One stop token for every thread and every wait of a running module.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Set once at unload. `Shared` holds it (the thread loops and the TCP
/// handshake ask `Shared::stopping`) and every RDMA event channel holds a
/// copy (its rdma_cm waits and the RDMA handshake check it), so each gives
/// up at its next tick and `MODULE UNLOAD` never waits out a dial or
/// handshake timeout. A module load makes a new token: nothing of an
/// earlier run is reset by hand.
#[derive(Clone, Debug, Default)]
pub struct StopToken(Arc<AtomicBool>);

impl StopToken {
    /// A token not yet stopped.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stops every holder of this token (and of its clones).
    pub fn stop(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether [`StopToken::stop`] was called on this token or a clone.
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::StopToken;

    #[test]
    fn a_clone_sees_the_stop_and_a_new_token_does_not() {
        let token = StopToken::new();
        let copy = token.clone();
        assert!(!copy.is_stopped());
        token.stop();
        assert!(copy.is_stopped());
        assert!(token.is_stopped());
        assert!(!StopToken::new().is_stopped());
    }
}
