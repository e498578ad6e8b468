//! This client's local queue for one name: the FIFO gate its tasks take
//! turns at, the lines of one owner's flows, fairness towards other
//! clients, and what the last look at Redis said (exhausted, busy).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::engine::hold::OwnerLines;
use crate::mutex::lock_unpoisoned;

/// The local queue of one name.
pub(crate) struct LocalQueue {
    /// Local FIFO queue: only the permit holder contends in Redis or holds the
    /// lock, so N local waiters cost one Redis contender and local tasks get
    /// the lock in arrival order.
    pub(crate) gate: Arc<Semaphore>,
    /// The lines of flows of one owner (see [`OwnerLines`]).
    pub(crate) owner_lines: OwnerLines,
    /// Cross-client fairness: local hand-offs in a row while other clients
    /// contended, and the pause the next local contender keeps.
    fairness: Mutex<Fairness>,
    /// A grant took what was left (a semaphore's last permit): the wake-up
    /// generation read before it was sent and the server's bound (the
    /// earliest lease end). The next local contender waits for a wake-up
    /// after that generation instead of asking Redis in vain.
    exhausted: Mutex<Option<(u64, Instant)>>,
    /// The last look found the name held by another client, or our
    /// release handed it to one (a hint for the next attempt's reads).
    expect_busy: AtomicBool,
}

#[derive(Default)]
struct Fairness {
    streak: u32,
    contended: bool,
    yield_until: Option<Instant>,
}

impl LocalQueue {
    /// A new queue; `expect_busy`: the hint the name's last slot left.
    pub(crate) fn new(expect_busy: bool) -> LocalQueue {
        LocalQueue {
            gate: Arc::new(Semaphore::new(1)),
            owner_lines: OwnerLines::default(),
            fairness: Mutex::new(Fairness::default()),
            exhausted: Mutex::new(None),
            expect_busy: AtomicBool::new(expect_busy),
        }
    }

    /// See [`LocalQueue::set_expect_busy`].
    pub(crate) fn expects_busy(&self) -> bool {
        self.expect_busy.load(Ordering::Relaxed)
    }

    /// Whether another client holds the name, as far as we last saw.
    pub(crate) fn set_expect_busy(&self, busy: bool) {
        self.expect_busy.store(busy, Ordering::Relaxed);
    }

    /// Whether the next hand-off should let other clients in first.
    pub(crate) fn should_yield(&self, cap: u32) -> bool {
        let f = lock_unpoisoned(&self.fairness);
        f.contended && f.streak >= cap
    }

    /// A final release came back; `contended`: another client had tried.
    pub(crate) fn record_release(&self, contended: bool) {
        let mut f = lock_unpoisoned(&self.fairness);
        f.contended = contended;
        f.streak = if contended { f.streak + 1 } else { 0 };
    }

    /// The next local contender waits `pause` before trying.
    pub(crate) fn yield_gate_for(&self, pause: Duration) {
        let mut f = lock_unpoisoned(&self.fairness);
        f.streak = 0;
        f.yield_until = Some(Instant::now() + pause);
    }

    pub(crate) fn take_yield(&self) -> Option<Instant> {
        lock_unpoisoned(&self.fairness).yield_until.take()
    }

    /// Records that a grant sent at wake-up generation `since` left nothing
    /// for another acquisition until a wake-up or `until` (`None`: it did
    /// leave something, or it cannot tell).
    pub(crate) fn note_exhausted(&self, since: u64, until: Option<Instant>) {
        *lock_unpoisoned(&self.exhausted) = until.map(|until| (since, until));
    }

    /// Takes the record of [`LocalQueue::note_exhausted`]: its bound, if no
    /// wake-up came since (generation `now`).
    pub(crate) fn take_exhausted(&self, now: u64) -> Option<Instant> {
        match lock_unpoisoned(&self.exhausted).take() {
            Some((since, until)) if since == now => Some(until),
            _ => None,
        }
    }
}
