//! Per-client state of one lock name in use, in four parts: the local
//! queue ([`queue`]), the local holds ([`holds`]), the pending undos
//! ([`undos`]) and the wake-ups ([`wakeups`]).
//!
//! A [`Slot`] lives while any local task waits for or holds the name (each
//! such user keeps a `SlotRef`, counted by the hub). Its subscription is
//! taken on the first failed attempt and kept until the slot is dropped,
//! so a busy lock costs one SUBSCRIBE per contention episode, not one per
//! acquisition.

use std::sync::Arc;
use std::time::Duration;

use fred::types::Key;
use tokio::time::Instant;

pub(crate) mod holds;
pub(crate) mod queue;
pub(crate) mod undos;
pub(crate) mod wakeups;

use holds::LocalHolds;
use queue::LocalQueue;
use undos::PendingUndos;
pub(crate) use wakeups::Wakeup;
use wakeups::Wakeups;

/// How long a client's next waiter waits without asking after a hand-off
/// that left no permit free, unless a release wakes it first (a bound for
/// a release that freed one and crossed the hand-off's message).
const HANDED_EXHAUSTED_LOOK: Duration = Duration::from_secs(1);

/// The hasher of the client's maps of names and owners, whose order wakes
/// and subscribes follow: random per process, fixed for a simulation (a
/// seed replays the same order).
#[cfg(not(feature = "simulation"))]
pub(crate) type Hasher = std::collections::hash_map::RandomState;
#[cfg(feature = "simulation")]
pub(crate) type Hasher = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

/// The local state of one lock name on one client.
pub(crate) struct Slot {
    pub(crate) key: Arc<str>,
    pub(crate) channel: Key,
    pub(crate) queue: LocalQueue,
    pub(crate) holds: LocalHolds,
    pub(crate) undos: PendingUndos,
    pub(crate) wakeups: Wakeups,
}

impl Slot {
    /// A new slot of `key`; `expect_busy`: the hint the name's last slot
    /// left (see [`LocalQueue::set_expect_busy`]).
    pub(crate) fn new(key: Arc<str>, channel: Key, expect_busy: bool) -> Slot {
        Slot {
            key,
            channel,
            queue: LocalQueue::new(expect_busy),
            holds: LocalHolds::default(),
            undos: PendingUndos::default(),
            wakeups: Wakeups::default(),
        }
    }

    /// Wakes every waiter of the slot (not the addressed ones).
    pub(crate) fn wake(&self) {
        self.wakeups.all.wake();
    }

    /// The lock was handed to `owner` with `token`: its waiter, if any,
    /// wakes holding it. Nobody else wakes. Without a waiter (it left), its
    /// undo gives the lock to the next one.
    ///
    /// `free`: the permits a semaphore's hand-off left free. None: this
    /// client's next waiter waits for a release (ours wakes the slot, one of
    /// another client publishes) rather than ask in vain, as after a grant
    /// that took the last permit. Noted before the waiter wakes, so before
    /// its client's next waiter looks; a wake-up after the hand-off (of the
    /// release that freed something after it) cancels it.
    pub(crate) fn handed(&self, owner: &str, number: u64, token: u64, free: Option<u64>) {
        let Some(wakeup) = self.wakeups.addressed(owner) else {
            return;
        };
        if free == Some(0) && wakeup.expects(number) {
            let until = Instant::now() + HANDED_EXHAUSTED_LOOK;
            self.queue
                .note_exhausted(self.wakeups.all.generation(), Some(until));
        }
        wakeup.hand(number, token);
    }
}
