//! Owners of one name whose cancelled or timed-out acquisition is not
//! undone yet: the owner's next acquisition settles its undo first (see
//! `engine::undo`).

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::mutex::lock_unpoisoned;

/// The pending undos of one name.
#[derive(Default)]
pub(crate) struct PendingUndos {
    /// The owners, and whether that undo has the local turn (its try is
    /// running) rather than waiting for it.
    pending: Mutex<Vec<(Arc<str>, bool)>>,
    /// Told when an undo's try ends (it gave the turn back, or is done).
    tried: Notify,
}

impl PendingUndos {
    /// `owner`'s undo is pending; `has_turn`: it starts with the local turn
    /// of the attempt it undoes.
    pub(crate) fn add(&self, owner: &Arc<str>, has_turn: bool) {
        lock_unpoisoned(&self.pending).push((owner.clone(), has_turn));
    }

    pub(crate) fn has(&self, owner: &str) -> bool {
        lock_unpoisoned(&self.pending)
            .iter()
            .any(|(o, _)| &**o == owner)
    }

    /// Whether `owner`'s pending undo has the local turn: its try (one
    /// command) is running, not queued behind another local holder.
    pub(crate) fn has_turn(&self, owner: &str) -> bool {
        lock_unpoisoned(&self.pending)
            .iter()
            .any(|(o, running)| &**o == owner && *running)
    }

    /// `owner`'s pending undo took (`true`) or gave back the local turn.
    pub(crate) fn set_turn(&self, owner: &str, has_turn: bool) {
        for (o, running) in lock_unpoisoned(&self.pending).iter_mut() {
            if &**o == owner {
                *running = has_turn;
            }
        }
        if !has_turn {
            self.tried.notify_waiters();
        }
    }

    pub(crate) fn remove(&self, owner: &str) {
        lock_unpoisoned(&self.pending).retain(|(o, _)| &**o != owner);
        self.tried.notify_waiters();
    }

    /// Returns once `owner`'s pending undo no longer has the local turn (its
    /// try ended: the turn went on, to whoever waited for it first).
    pub(crate) async fn try_ended(&self, owner: &str) {
        loop {
            let tried = self.tried.notified();
            tokio::pin!(tried);
            tried.as_mut().enable();
            // reintroduce: try-zero-waits-for-queued-undo
            if !self.has_turn(owner) {
                return;
            }
            tried.await;
        }
    }
}
