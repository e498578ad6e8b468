//! What a client knows about one acquisition it holds: shared by the guards of
//! one owner (re-entrant holds), renewed by the watchdog, and the source of
//! `LockGuard::lost()`.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::redis::link::Link;
use fred::types::{Key, Value};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::metrics::{HoldMeter, Labels};
use crate::mutex::lock_unpoisoned;

/// What one kind of hold needs from its primitive after the grant: how to
/// renew it and how to release it. Each primitive defines its own in its
/// module; the guard core, the watchdog and shutdown use nothing else.
///
/// Why a table of functions beside the `Spec` trait: `Spec` is generic and
/// serves the acquisition, which has the typed handle. A hold outlives
/// its acquisition and meets holds of every kind in one place (the
/// watchdog renews a batch per kind, a reconnection checks them all, the
/// shutdown releases them all), where no handle and no type parameter is
/// left: one `&'static HoldOps` per kind keeps `Hold` one type.
pub(crate) struct HoldOps {
    /// The renewal: a batched script whose keys and per-hold arguments come
    /// from [`HoldOps::hold_args`] (a fixed number per hold, appended in
    /// order), with `ARGV[1]` the lease in milliseconds, replying one flag
    /// per hold (1 renewed, 0 gone). It only ever raises a lease. The
    /// watchdog batches it; `extend` runs it for one hold.
    pub(crate) renew: &'static std::sync::LazyLock<crate::redis::script::LuaScript>,
    /// The renewal's ownership check without its write: a batched script
    /// over the same keys and per-hold arguments (without the lease),
    /// replying one flag per hold (1 still ours, 0 gone). It writes
    /// nothing: a hold with a fixed lease is looked at on a reconnection
    /// (see `engine::watchdog::verify_holds`), its lease left as it is.
    pub(crate) check: &'static std::sync::LazyLock<crate::redis::script::LuaScript>,
    /// The keys and the arguments of one hold.
    pub(crate) hold_args: fn(&Hold) -> (Vec<fred::types::Key>, Vec<Value>),
    /// Releases one local hold, or with `last` the whole acquisition,
    /// checked by owner and token, publishing with the given command
    /// (`publish`/`spublish`); a release that hands a lock to a queued
    /// waiter sets its fencing counter with the given TTL (ms). Only a final
    /// release may be sent twice.
    pub(crate) release:
        for<'a> fn(&'a dyn Link, &'static str, i64, &'a Hold, bool) -> ReleaseFuture<'a>,
    /// Rebinds the acquisition in Redis from owner id `from` to `to` in one
    /// script, keeping its token, lease and count (a hand-off); `None` for
    /// kinds that cannot be handed off. Owner- and token-checked and
    /// idempotent (a repeat finds it rebound): `Ok(false)` when that
    /// acquisition no longer holds (nothing written).
    pub(crate) rebind: Option<RebindFn>,
    /// Whether the kind's acquire script can carry a final release of one
    /// of its holds (a dropped guard's, run before the attempt in the same
    /// script: one round trip and one script per acquire-and-drop cycle).
    pub(crate) folds_release: bool,
}

/// See [`HoldOps::rebind`]: (redis, hold, from, to).
pub(crate) type RebindFn = for<'a> fn(
    &'a dyn Link,
    &'a Hold,
    &'a str,
    &'a str,
) -> std::pin::Pin<
    Box<dyn std::future::Future<Output = crate::error::Result<bool>> + Send + 'a>,
>;

/// Why [`Hold::begin_rebind`] refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RebindRefused {
    /// More than one guard shares the hold (a re-entered hold): the count.
    Shared(u32),
    /// The last guard is gone.
    Released,
}

/// What [`HoldOps::release`] returns.
pub(crate) type ReleaseFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = crate::error::Result<Released>> + Send + 'a>,
>;

/// What a release script answered.
#[derive(Debug, Default)]
pub(crate) struct Released {
    /// Nothing was held (nothing written, nothing published).
    pub(crate) not_held: bool,
    /// Another client had tried while it was held (an exclusive lock's
    /// cross-client fairness counts it).
    pub(crate) contended: bool,
    /// Handed to waiting clients: held by others now, nothing is free after
    /// it (a lock, or a semaphore's permits all handed on), so local
    /// waiters need no wake-up.
    pub(crate) handed: bool,
}

impl Released {
    /// From a script answer where 0 is "not held".
    pub(crate) fn from_code(code: i64) -> Released {
        Released {
            not_held: code == 0,
            ..Released::default()
        }
    }

    /// From `release_lock`'s answer (`lua/lib/lock.lua`: `lock_release.lua`, and
    /// a release carried by `lock_acquire.lua`): 3 = another client had
    /// tried, 4 = handed to a queued waiter.
    pub(crate) fn from_lock_release(code: i64) -> Released {
        Released {
            contended: code == 3,
            handed: code == 4,
            ..Released::from_code(code)
        }
    }
}

/// The lines of one name's owners on this client: flows of one owner (a
/// `join!` of two acquisitions in one task, a parent and a child sharing
/// an owner) take turns. Only one of them contends at a time, and the turn
/// stays with the hold it wins until that hold ends (released, lost, or
/// surely handed off), so a second flow never sends a fresh attempt while
/// the first one's field is in Redis (a script would take it over as a
/// stale field of the owner): it waits, then asks anew (docs/api.md, "Who
/// re-enters"). One line per owner, whatever it asks: the write and the
/// read side of an `RwLock` take turns too (a downgrade, the read side
/// asked by the flow that holds the write side, needs no turn). Kinds
/// whose local gate is kept while held need none.
#[derive(Default)]
pub(crate) struct OwnerLines(Arc<Mutex<OwnerLineMap>>);

type OwnerLineMap = std::collections::HashMap<Arc<str>, (Arc<Semaphore>, usize)>;

impl OwnerLines {
    /// A place in `owner`'s line (the line goes when its last place does).
    pub(crate) fn join(&self, holder: &Arc<str>) -> OwnerLine {
        let mut lines = lock_unpoisoned(&self.0);
        let (turn, users) = lines
            .entry(holder.clone())
            .or_insert_with(|| (Arc::new(Semaphore::new(1)), 0));
        *users += 1;
        OwnerLine {
            turn: turn.clone(),
            lines: self.0.clone(),
            holder: holder.clone(),
        }
    }
}

/// A place in one owner's line (see [`OwnerLines`]).
pub(crate) struct OwnerLine {
    pub(crate) turn: Arc<Semaphore>,
    lines: Arc<Mutex<OwnerLineMap>>,
    holder: Arc<str>,
}

impl Drop for OwnerLine {
    fn drop(&mut self) {
        let mut lines = lock_unpoisoned(&self.lines);
        if let Some((_, users)) = lines.get_mut(&self.holder) {
            *users -= 1;
            if *users == 0 {
                lines.remove(&self.holder);
            }
        }
    }
}

/// One owner's turn on one name (see [`OwnerLines`]): shared by the
/// acquisition that waits with it and the hold it wins; the next flow of
/// the owner goes when both are done with it.
pub(crate) struct OwnerTurn {
    // Dropped before the place in line: the line is still there for the
    // next flow.
    _permit: OwnedSemaphorePermit,
    _line: OwnerLine,
}

impl OwnerTurn {
    pub(crate) fn new(permit: OwnedSemaphorePermit, line: OwnerLine) -> OwnerTurn {
        OwnerTurn {
            _permit: permit,
            _line: line,
        }
    }
}

/// One acquisition (one fencing token) held by one owner on this client.
pub(crate) struct Hold {
    pub(crate) ops: &'static HoldOps,
    /// The owner id the acquisition is bound to in Redis; changes only by a
    /// hand-off (see [`Hold::begin_rebind`]).
    owner: Mutex<Arc<str>>,
    /// Bumped at the start and at the end of each hand-off (odd while one
    /// is in flight): a renewal built under another epoch than the one its
    /// reply comes back in cannot tell that the hold is gone.
    owner_epoch: AtomicU64,
    /// The id a hand-off whose outcome is unknown moved the hold from: its
    /// field may still be under that id in Redis. The final release moves
    /// it first (see [`Hold::rebind_in_doubt`]).
    rebound_from: Mutex<Option<Arc<str>>>,
    pub(crate) token: u64,
    /// The hold key (its local slot's key) and the release channel.
    pub(crate) key: Arc<str>,
    pub(crate) channel: Key,
    /// Local holds (guards) alive; the Redis count follows it.
    holds: AtomicU32,
    /// Guards among `holds` whose lease the watchdog renews.
    watchdog_holds: AtomicU32,
    /// Local, conservative end of the lease: measured from when the command
    /// that set it was sent, so it is never later than the server's expiry.
    valid_until: Mutex<Instant>,
    lost: AtomicBool,
    lost_notify: Notify,
    /// Set once the last guard is gone: no renewal, no loss warnings.
    released: AtomicBool,
    /// The local gate permit: the next local waiter goes when the hold ends
    /// (and no re-entry of it is in flight: see [`Hold::turns`]).
    permit: Mutex<Option<Arc<OwnedSemaphorePermit>>>,
    /// Its owner's turn (see [`OwnerLines`]): the owner's next flow goes
    /// when the hold ends, or once it is surely handed off.
    owner_turn: Mutex<Option<Arc<OwnerTurn>>>,
    /// When the command that won it was sent (a force-unlock whose outcome
    /// is unknown takes every hold won before it ended as lost).
    pub(crate) sent_at: Instant,
    /// Whether the final release is queued on the connection. Held through
    /// a count-down's round trip and until the final release is queued, so
    /// a count-down never runs after the final release in Redis (a NOSCRIPT
    /// fallback or a cluster retry would re-send it out of order).
    final_queued: tokio::sync::Mutex<bool>,
    /// Held gauge and hold time (the metrics; empty unless metered).
    pub(crate) meter: HoldMeter,
}

impl Hold {
    /// The hold, counted in the metrics of `labels` while it lives.
    pub(crate) fn metered(mut self, labels: &Labels) -> Hold {
        self.meter = HoldMeter::start(labels);
        self
    }

    // One call site (the engine's grant), every field its own.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        ops: &'static HoldOps,
        key: Arc<str>,
        channel: Key,
        owner: std::sync::Arc<str>,
        token: u64,
        sent_at: Instant,
        lease: Duration,
        watchdog: bool,
    ) -> Hold {
        Hold {
            ops,
            owner: Mutex::new(owner),
            owner_epoch: AtomicU64::new(0),
            rebound_from: Mutex::new(None),
            token,
            key,
            channel,
            holds: AtomicU32::new(1),
            watchdog_holds: AtomicU32::new(u32::from(watchdog)),
            valid_until: Mutex::new(sent_at + lease),
            lost: AtomicBool::new(false),
            lost_notify: Notify::new(),
            released: AtomicBool::new(false),
            permit: Mutex::new(None),
            owner_turn: Mutex::new(None),
            sent_at,
            meter: HoldMeter::default(),
            final_queued: tokio::sync::Mutex::new(false),
        }
    }

    /// The owner id the acquisition is bound to now.
    pub(crate) fn owner_str(&self) -> Arc<str> {
        lock_unpoisoned(&self.owner).clone()
    }

    /// The owner id as a script argument.
    pub(crate) fn owner(&self) -> Value {
        Value::String(self.owner_str().as_ref().into())
    }

    /// See the field; read it before [`Hold::owner`] for a renewal.
    pub(crate) fn owner_epoch(&self) -> u64 {
        self.owner_epoch.load(Ordering::Acquire)
    }

    /// Starts a hand-off: binds the hold to `to` locally and returns the id
    /// it was bound to, unless another guard shares it (a re-entered hold
    /// belongs to its owner) or its last guard is gone. From here on no
    /// re-entry of the old owner finds it ([`Hold::add_guard`] checks the
    /// owner under the same lock), and the watchdog leaves it alone until
    /// [`Hold::end_rebind`].
    pub(crate) fn begin_rebind(&self, to: Arc<str>) -> Result<Arc<str>, RebindRefused> {
        let mut owner = lock_unpoisoned(&self.owner);
        if self.released.load(Ordering::Acquire) {
            return Err(RebindRefused::Released);
        }
        match self.holds.load(Ordering::Acquire) {
            1 => {}
            0 => return Err(RebindRefused::Released),
            n => return Err(RebindRefused::Shared(n)),
        }
        self.owner_epoch.fetch_add(1, Ordering::AcqRel);
        Ok(std::mem::replace(&mut *owner, to))
    }

    /// Marks a hand-off from `from` as in doubt (`Some`: sent, its outcome
    /// not known yet) or settled (`None`).
    pub(crate) fn set_rebind_in_doubt(&self, from: Option<Arc<str>>) {
        *lock_unpoisoned(&self.rebound_from) = from;
    }

    /// The id a hand-off whose outcome stayed unknown moved the hold from
    /// (see the field).
    pub(crate) fn rebind_in_doubt(&self) -> Option<Arc<str>> {
        lock_unpoisoned(&self.rebound_from).clone()
    }

    /// Ends a hand-off; `revert`: the id to bind back to (the script
    /// surely did not run).
    pub(crate) fn end_rebind(&self, revert: Option<Arc<str>>) {
        let mut owner = lock_unpoisoned(&self.owner);
        if let Some(from) = revert {
            // reintroduce: hand-off-in-doubt-frees-owner
            *owner = from;
        }
        self.owner_epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// One more guard of the same acquisition (a re-entry by `owner`),
    /// unless the last guard is gone already (its final release may be on
    /// its way: a released hold is never revived) or the hold was handed
    /// off to another owner id meanwhile.
    pub(crate) fn add_guard(&self, owner: &str, watchdog: bool) -> bool {
        // Under the owner lock: a hand-off sees this guard, or this sees
        // the hand-off.
        let bound = lock_unpoisoned(&self.owner);
        if **bound != *owner {
            return false;
        }
        let added = self
            .holds
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                // reintroduce: reentry-revives-released-hold
                (n > 0 && !self.released.load(Ordering::Acquire)).then_some(n + 1)
            })
            .is_ok();
        drop(bound);
        if added && watchdog {
            self.watchdog_holds.fetch_add(1, Ordering::AcqRel);
        }
        added
    }

    /// Whether more than one guard shares the hold (another flow of its
    /// owner re-entered it).
    pub(crate) fn is_shared(&self) -> bool {
        self.holds.load(Ordering::Acquire) > 1
    }

    /// The hold keeps its slot's local turn `permit` while it lives (an
    /// exclusive lock): the next local waiter goes when it ends.
    pub(crate) fn keep_turn(&self, permit: Option<OwnedSemaphorePermit>) {
        *lock_unpoisoned(&self.permit) = permit.map(Arc::new);
    }

    /// The local turns the hold keeps (the slot's gate, its owner's turn),
    /// shared by a re-entry in flight: a hold lost meanwhile lets the
    /// owner's next flow go only once the re-entry is done, or its undo is
    /// pending (which that flow then settles first). Otherwise the undo of
    /// a re-entry whose reply was lost could land after that flow's grant
    /// and delete it (it keeps only the hold's own token).
    pub(crate) fn turns(&self) -> (Option<Arc<OwnedSemaphorePermit>>, Option<Arc<OwnerTurn>>) {
        (
            lock_unpoisoned(&self.permit).clone(),
            lock_unpoisoned(&self.owner_turn).clone(),
        )
    }

    /// The hold keeps its owner's turn while it lives (see [`OwnerLines`]).
    pub(crate) fn keep_owner_turn(&self, turn: Option<Arc<OwnerTurn>>) {
        *lock_unpoisoned(&self.owner_turn) = turn;
    }

    /// Lets the owner's next flow go (the hold ended, or is surely bound
    /// to another owner id).
    pub(crate) fn end_owner_turn(&self) {
        drop(lock_unpoisoned(&self.owner_turn).take());
    }

    /// The order of this hold's releases: `true` once the final release is
    /// queued (see the field).
    pub(crate) async fn release_order(&self) -> tokio::sync::MutexGuard<'_, bool> {
        self.final_queued.lock().await
    }

    /// Marks the final release queued without waiting: `false` when a
    /// count-down of this hold is running (the caller then releases the
    /// ordinary way, which waits for it).
    pub(crate) fn try_mark_final_queued(&self) -> bool {
        match self.final_queued.try_lock() {
            Ok(mut queued) => {
                *queued = true;
                true
            }
            Err(_) => false,
        }
    }

    /// Whether the hold keeps its slot's local turn (an exclusive lock).
    pub(crate) fn keeps_turn(&self) -> bool {
        lock_unpoisoned(&self.permit).is_some()
    }

    /// A guard goes away: stops its renewal first. Returns true for the last one.
    pub(crate) fn drop_guard(&self, watchdog: bool) -> bool {
        if watchdog {
            self.watchdog_holds.fetch_sub(1, Ordering::AcqRel);
        }
        let last = self.holds.fetch_sub(1, Ordering::AcqRel) == 1;
        if last {
            self.released.store(true, Ordering::Release);
            self.end_owner_turn();
            // Owned lost signals fire: the acquisition is no longer held.
            self.lost_notify.notify_waiters();
        }
        last
    }

    pub(crate) fn renewed_by_watchdog(&self) -> bool {
        self.owner_epoch() % 2 == 0
            && self.watchdog_holds.load(Ordering::Acquire) > 0
            && !self.released.load(Ordering::Acquire)
            && !self.lost.load(Ordering::Acquire)
    }

    pub(crate) fn valid_until(&self) -> Instant {
        *lock_unpoisoned(&self.valid_until)
    }

    /// The lease now lasts at least until `sent_at + lease`. Redis only ever
    /// raises a lease (renewals and extends), so the estimate only grows too,
    /// and stays below what Redis holds whatever order replies arrive in.
    pub(crate) fn extend_validity(&self, sent_at: Instant, lease: Duration) {
        let mut v = lock_unpoisoned(&self.valid_until);
        // reintroduce: validity-from-reply
        *v = (*v).max(sent_at + lease);
    }

    /// Lost for good: the lease ran out (by the local clock), a renewal or an
    /// owner check found it gone, or it was force-unlocked.
    pub(crate) fn is_lost(&self) -> bool {
        if self.lost.load(Ordering::Acquire) {
            return true;
        }
        if Instant::now() >= self.valid_until() {
            self.mark_lost("the lease ran out");
            return true;
        }
        false
    }

    /// Lost, without looking at the clock.
    pub(crate) fn is_marked_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    pub(crate) fn mark_lost(&self, why: &str) {
        if self.lost.swap(true, Ordering::AcqRel) {
            return;
        }
        if !self.released.load(Ordering::Acquire) {
            tracing::warn!(
                target: "redisync.lease.lost",
                lock_key = %self.key,
                owner = %self.owner_str(),
                token = self.token,
                why,
                "lock lost while a guard was alive"
            );
            self.meter.labels.hold_lost();
        }
        // The lock is no longer ours in Redis: let the next local waiter try.
        drop(lock_unpoisoned(&self.permit).take());
        self.end_owner_turn();
        self.lost_notify.notify_waiters();
    }

    /// Lets the next local waiter go. Called once the final release is queued
    /// on the connection: the waiter's acquire then runs right after it in
    /// Redis, saving a round trip per hand-off.
    pub(crate) fn open_gate(&self) {
        drop(lock_unpoisoned(&self.permit).take());
    }

    /// Whether the last guard is gone (the acquisition is released or
    /// being released).
    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// How much of the lease is left by this client's clock (zero once lost).
    pub(crate) fn validity(&self) -> Duration {
        if self.is_lost() {
            return Duration::ZERO;
        }
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// Whether the hold is over for its signals: lost, or its last guard gone.
    fn is_over(&self) -> bool {
        self.is_released() || self.is_lost()
    }

    /// Resolves once the hold is lost (see [`Hold::is_lost`]) or its last
    /// guard is gone. The clock is read at every poll, not only when the
    /// lease timer fires: after a stall, tokio polls tasks woken meanwhile
    /// before it fires overdue timers, and the loss must win over them.
    pub(crate) async fn lost(&self) {
        loop {
            let notified = self.lost_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_over() {
                return;
            }
            let timer = tokio::time::sleep_until(self.valid_until());
            tokio::pin!(timer);
            let over = std::future::poll_fn(|cx| {
                if self.is_over() {
                    return std::task::Poll::Ready(true);
                }
                if notified.as_mut().poll(cx).is_ready() || timer.as_mut().poll(cx).is_ready() {
                    return std::task::Poll::Ready(false);
                }
                std::task::Poll::Pending
            })
            .await;
            if over {
                return;
            }
        }
    }
}
