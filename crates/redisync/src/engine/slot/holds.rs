//! The holds this client has of one name, and what a force-unlock of
//! ours did to them; the dropped guard's final release parked for the next
//! attempt to carry.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use crate::engine::hold::Hold;
use crate::mutex::lock_unpoisoned;

/// The local holds of one name.
#[derive(Default)]
pub(crate) struct LocalHolds {
    /// Local holders (owner ids with live holds).
    holders: Mutex<Vec<Arc<Hold>>>,
    /// The last fencing token a force-unlock of this client found issued:
    /// a hold with a token up to it was granted before that force-unlock
    /// ran, so it is lost even when its grant's reply comes in after.
    forced_through: AtomicU64,
    /// When the latest force-unlock of this client whose outcome is unknown
    /// ended: it may run in Redis any time later, so every hold won by a
    /// command sent before then is lost.
    forced_in_doubt: Mutex<Option<Instant>>,
    /// A dropped guard's final release not sent yet: the next attempt on
    /// the name carries it in its own script, or its background task sends
    /// it (see `engine::guard_core`).
    parked_release: Mutex<Option<Arc<Hold>>>,
}

impl LocalHolds {
    /// The live local hold of `owner`, if any.
    pub(crate) fn holder(&self, owner: &str) -> Option<Arc<Hold>> {
        lock_unpoisoned(&self.holders)
            .iter()
            .find(|h| &*h.owner_str() == owner && !h.is_lost())
            .cloned()
    }

    /// All local holds, for expiry checks, force-unlock and the watchdog.
    pub(crate) fn all(&self) -> Vec<Arc<Hold>> {
        lock_unpoisoned(&self.holders).clone()
    }

    /// Adds a new hold; lost at once if a force-unlock ran after its grant,
    /// or may have (see [`LocalHolds::forced_in_doubt`]).
    pub(crate) fn add(&self, hold: Arc<Hold>) {
        let mut holders = lock_unpoisoned(&self.holders);
        let forced = self.forced_through.load(Ordering::SeqCst);
        if forced > 0 && hold.token <= forced {
            hold.mark_lost("force-unlocked while its grant was on its way");
        }
        if lock_unpoisoned(&self.forced_in_doubt).is_some_and(|end| hold.sent_at <= end) {
            hold.mark_lost("a force-unlock whose outcome is unknown may have run after its grant");
        }
        holders.push(hold);
    }

    pub(crate) fn remove(&self, hold: &Arc<Hold>) {
        lock_unpoisoned(&self.holders).retain(|h| !Arc::ptr_eq(h, hold));
    }

    /// A force-unlock of this client ended without its reply (timed out,
    /// the connection lost, the call dropped): it may still run, after any
    /// grant sent before now. Those holds are lost, now and when their
    /// replies come in (the safe reading of an unknown outcome).
    pub(crate) fn forced_in_doubt(&self) {
        let holders = lock_unpoisoned(&self.holders);
        let now = Instant::now();
        *lock_unpoisoned(&self.forced_in_doubt) = Some(now);
        for hold in holders.iter() {
            if hold.sent_at <= now {
                hold.mark_lost("force-unlocked (its outcome unknown)");
            }
        }
    }

    /// A force-unlock ran after every grant with a token up to `last`: those
    /// holds are lost, now and when their replies come in.
    pub(crate) fn forced_through(&self, last: u64) {
        self.forced_through.fetch_max(last, Ordering::SeqCst);
        for hold in lock_unpoisoned(&self.holders).iter() {
            if hold.token <= last {
                hold.mark_lost("force-unlocked");
            }
        }
    }

    /// The earliest local lease end among holders, for gate waiters.
    pub(crate) fn earliest_deadline(&self) -> Option<Instant> {
        lock_unpoisoned(&self.holders)
            .iter()
            .filter(|h| !h.is_marked_lost())
            .map(|h| h.valid_until())
            .min()
    }

    /// Parks `hold`'s final release for the next attempt on the name to
    /// carry; `false` when another one is parked already.
    pub(crate) fn park_release(&self, hold: &Arc<Hold>) -> bool {
        let mut parked = lock_unpoisoned(&self.parked_release);
        if parked.is_some() {
            return false;
        }
        *parked = Some(hold.clone());
        true
    }

    /// Takes the parked release, if any, to carry it in an attempt.
    pub(crate) fn take_parked_release(&self) -> Option<Arc<Hold>> {
        lock_unpoisoned(&self.parked_release).take()
    }

    /// Whether a release is parked.
    pub(crate) fn has_parked(&self) -> bool {
        lock_unpoisoned(&self.parked_release).is_some()
    }

    /// Whether `hold`'s release is still parked.
    pub(crate) fn has_parked_release(&self, hold: &Arc<Hold>) -> bool {
        lock_unpoisoned(&self.parked_release)
            .as_ref()
            .is_some_and(|p| Arc::ptr_eq(p, hold))
    }

    /// Runs `send` on `hold` if it is still parked, under the parking lock:
    /// an attempt that finds nothing parked comes after what `send` queued.
    pub(crate) fn send_parked_release(&self, hold: &Arc<Hold>, send: impl FnOnce()) -> bool {
        let mut parked = lock_unpoisoned(&self.parked_release);
        if !parked.as_ref().is_some_and(|p| Arc::ptr_eq(p, hold)) {
            return false;
        }
        *parked = None;
        send();
        true
    }
}
