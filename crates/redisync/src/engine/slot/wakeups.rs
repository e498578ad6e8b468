//! How the waiters of one name on this client are woken: the slot's
//! wake-up (every unlock message), the registrations of waiters woken only
//! by messages addressed to them (hand-offs), and whether the name's
//! channel is subscribed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::Hasher;
use crate::mutex::lock_unpoisoned;

/// The wake-ups of one name.
#[derive(Default)]
pub(crate) struct Wakeups {
    /// Woken by every unlock message (and on reconnect / lag).
    pub(crate) all: Wakeup,
    subscribed: AtomicBool,
    /// Waiters woken only by a message whose payload is their owner id (fair
    /// lock), with the number of local users of each registration.
    addressed: Mutex<HashMap<Arc<str>, AddressedEntry, Hasher>>,
}

/// A registration for addressed messages and its number of local users.
type AddressedEntry = (Arc<Wakeup>, usize);

impl Wakeups {
    pub(crate) fn is_subscribed(&self) -> bool {
        self.subscribed.load(Ordering::Acquire)
    }

    /// The name's channel is subscribed for this slot (set once).
    pub(crate) fn set_subscribed(&self) {
        self.subscribed.store(true, Ordering::Release);
    }

    /// Registers `owner` for messages addressed to it (one registration per
    /// owner, counted); undo with [`Wakeups::unregister`].
    pub(crate) fn register(&self, owner: &Arc<str>) -> Arc<Wakeup> {
        let mut map = lock_unpoisoned(&self.addressed);
        let entry = map
            .entry(owner.clone())
            .or_insert_with(|| (Arc::new(Wakeup::default()), 0));
        entry.1 += 1;
        entry.0.clone()
    }

    pub(crate) fn unregister(&self, owner: &str) {
        let mut map = lock_unpoisoned(&self.addressed);
        if let Some(entry) = map.get_mut(owner) {
            entry.1 -= 1;
            if entry.1 == 0 {
                map.remove(owner);
            }
        }
    }

    /// The registration of `owner`, if it waits for addressed messages.
    pub(crate) fn addressed(&self, owner: &str) -> Option<Arc<Wakeup>> {
        lock_unpoisoned(&self.addressed)
            .get(owner)
            .map(|(a, _)| a.clone())
    }

    /// Wakes every addressed waiter.
    pub(crate) fn wake_addressed(&self) {
        for (a, _) in lock_unpoisoned(&self.addressed).values() {
            a.wake();
        }
    }
}

/// What parked waiters wait on: a generation counter bumped by every
/// wake-up, plus a `Notify`. A slot has one for all its waiters; an owner
/// waiting for messages addressed to it has its own.
#[derive(Default)]
pub(crate) struct Wakeup {
    generation: AtomicU64,
    notify: Notify,
    /// A lock handed to this waiter by a release, from a hand-off
    /// message: the number of the queue entry it was handed to, and the
    /// fencing token.
    handed: Mutex<Option<(u64, u64)>>,
    /// The numbers of the waiter's queue entry and of the one an attempt in
    /// flight may queue instead: messages for other entries (an earlier
    /// acquisition of the same owner, or an entry handed over and expired,
    /// late) are not ours.
    numbers: Mutex<(u64, u64)>,
}

impl Wakeup {
    /// The current generation; read it before an attempt.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Waits until a wake-up newer than `since` (true), or `until` (false).
    pub(crate) async fn wait(&self, since: u64, until: Instant) -> bool {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.generation() != since {
            return true;
        }
        tokio::time::timeout_at(until, notified).await.is_ok()
    }

    pub(crate) fn wake(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    /// The waiter's queue entry is numbered `number` (`next`: the number
    /// an attempt in flight may queue a new entry under). A hand-off to an
    /// entry of another number is dropped.
    pub(crate) fn expect_entries(&self, number: u64, next: u64) {
        *lock_unpoisoned(&self.numbers) = (number, next);
        let mut handed = lock_unpoisoned(&self.handed);
        if handed.is_some_and(|(n, _)| n != number && n != next) {
            *handed = None;
        }
    }

    /// Whether a hand-off to the entry `number` came (and is not taken yet).
    pub(crate) fn has_handed(&self, number: u64) -> bool {
        lock_unpoisoned(&self.handed).is_some_and(|(n, _)| n == number)
    }

    /// Takes the token of a lock handed to the entry `number`, if one came
    /// (and forgets one handed to another).
    pub(crate) fn take_handed(&self, number: u64) -> Option<u64> {
        lock_unpoisoned(&self.handed)
            .take()
            .filter(|(n, _)| *n == number)
            .map(|(_, token)| token)
    }

    /// Whether `number` names our queue entry (or the one we may queue).
    pub(crate) fn expects(&self, number: u64) -> bool {
        let (current, next) = *lock_unpoisoned(&self.numbers);
        // reintroduce: stale-hand-off-message
        number == current || number == next
    }

    pub(crate) fn hand(&self, number: u64, token: u64) {
        if self.expects(number) {
            *lock_unpoisoned(&self.handed) = Some((number, token));
            self.wake();
        }
    }
}
