//! The fair lock: `FairLock` and `FairLockGuard`, FIFO across clients.

use std::sync::Arc;
use std::time::Duration;

use fred::types::Key;
use tokio::time::Instant;

use crate::client::Client;
use crate::engine::guard_core::{guard_accessors, GuardCore};
use crate::engine::hold::HoldOps;
use crate::engine::slot::Slot;
use crate::engine::{self, Gate, Named, Reply, Spec, Try};
use crate::error::{Error, Result};
use crate::inspect::{HoldMode, Inspection};
use crate::lock::{
    lock_renew_args, rebind_lock_hash, release_hold, CHECK as LOCK_CHECK_SCRIPT,
    RENEW as LOCK_RENEW_SCRIPT,
};
use crate::redis::args::{Digits, FairLockAcquire, FairLockLeave, OneOrEmpty, ScriptArgs, Token};
use crate::redis::keys::{Kind, Role};
use crate::redis::script::checked_ms;
use crate::redis::script::lua_script;

lua_script!(ACQUIRE, "fair_lock_acquire.lua");

/// Fair lock holds: the hash and the queue have the lock layout (a fair
/// entry adds its queue deadline), so the lock's renewal, check and
/// release scripts serve; a release hands the lock to the oldest live
/// waiter.
static FAIR_HOLD: HoldOps = HoldOps {
    renew: &LOCK_RENEW_SCRIPT,
    check: &LOCK_CHECK_SCRIPT,
    hold_args: lock_renew_args,
    release: |redis, publish, fence_ttl_ms, hold, last| {
        Box::pin(release_hold(redis, publish, fence_ttl_ms, hold, last))
    },
    rebind: Some(|redis, hold, from, to| {
        Box::pin(rebind_lock_hash(redis, hold, from, to, "fair lock"))
    }),
    folds_release: false,
};
lua_script!(LEAVE, "fair_lock_leave.lua");
lua_script!(FORCE_UNLOCK, "fair_lock_force_unlock.lua");

/// Default queue lease: how long a queued waiter that stopped calling keeps
/// its place.
const DEFAULT_QUEUE_LEASE: Duration = Duration::from_secs(5);
/// Shortest queue lease accepted: the heartbeat (a third of it) must stay
/// well above a round trip.
const MIN_QUEUE_LEASE: Duration = Duration::from_millis(30);

impl Client {
    /// A handle on the fair lock `name` (no I/O). See [`FairLock`].
    pub fn fair_lock(&self, name: &str) -> FairLock {
        FairLock::new(self.clone(), name)
    }
}

/// A reentrant distributed lock that is fair across clients: waiters get it
/// in the order they first asked for it (Redisson's `RFairLock`).
///
/// Besides the lock hash (laid out as [`Lock`](crate::Lock)'s: owner id ->
/// hold count, with a fencing token) a fair lock keeps a Redis list of
/// waiting tasks, each entry carrying the waiter's *queue deadline*,
/// measured by the Redis server's clock (`TIME` inside the scripts; client
/// clocks are never compared). A task's first busy attempt puts it at the
/// tail. A release hands the lock to the oldest entry whose deadline has not
/// passed, in the same script, and publishes the new fencing token: only
/// that waiter wakes, already holding the lock (one subscription per lock
/// per client, however many tasks wait). Nobody overtakes a live waiter: a
/// free lock with live waiters is taken only by the oldest of them. A
/// contended acquisition costs about 14 Redis commands (two script calls),
/// however many clients and tasks wait.
///
/// Waiters that stop waiting leave at once: a wait that runs out removes its
/// entry before `try_lock` returns, and a cancelled (dropped) acquisition
/// removes it in a background task; what a release handed it meanwhile goes
/// on to the next waiter. A waiter that crashed is skipped once its queue
/// deadline passes, so it delays the others by at most its
/// [queue lease](FairLock::with_queue_lease); one that crashed within its
/// last queue lease may be handed the lock first and then keeps it for its
/// lease, as a crashed holder would (the next waiter finds it free at its
/// next heartbeat). Live waiters are never skipped: they refresh their
/// deadline every queue lease / 3 while they wait.
///
/// Waiting never polls Redis in a loop: a waiter sleeps until it is handed
/// the lock, its heartbeat is due, or, when it found itself the head, the
/// holder's lease ends (a crashed holder), or, behind a live waiter of a
/// free lock, that waiter's deadline passes. A waiter that became the head
/// without being told (the waiter ahead of it left, or was handed the lock
/// and crashed holding it) finds a crashed holder's lock free at its next
/// heartbeat after the lease ends (or within a quarter of its own lease,
/// if sooner).
///
/// Leases, re-entry and fencing tokens are as for [`Lock`](crate::Lock):
/// [`lock`](FairLock::lock) and `try_lock(wait, None)` take the client's
/// watchdog lease and renew it while the guard lives; a task that holds the
/// lock takes it again at once (queue or not); every non-reentrant
/// acquisition gets a new token, strictly increasing per lock name.
///
/// Unlike [`Lock`](crate::Lock), every waiting task contends in Redis on its
/// own (it needs its own place in the queue), so a fair lock costs one
/// script call per waiter to queue, one per heartbeat while it waits, and
/// none to be woken.
///
/// The safe set-up, as for [`Lock`](crate::Lock): a restart guard on the
/// client, work that runs only while the lock is held, and its token handed
/// to what is written:
///
/// ```no_run
/// # async fn charge(_token: u64) {}
/// # async fn demo() -> redisync::Result<()> {
/// use std::time::Duration;
///
/// let client = redisync::Client::builder("redis://127.0.0.1:6379")
///     .restart_guard(Duration::from_secs(60))
///     .connect()
///     .await?;
/// let account = client.fair_lock("accounts:7"); // served in arrival order
/// let outcome = redisync::run_locked(account.lock(), async |guard| {
///     charge(guard.fencing_token()).await; // the ledger refuses older tokens
/// })
/// .await?;
/// # let _ = outcome;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FairLock {
    inner: Arc<FairLockInner>,
    queue_lease: Duration,
}

struct FairLockInner {
    named: Named,
    queue: Key,
    client: Client,
}

impl std::fmt::Debug for FairLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairLock")
            .field("name", &self.inner.named.name)
            .field("key", &self.inner.named.key)
            .field("queue_lease", &self.queue_lease)
            .finish_non_exhaustive()
    }
}

/// `ms` milliseconds plus a little slack, for waking after a server-side
/// deadline.
fn after_ms(now: Instant, ms: i64) -> Option<Instant> {
    u64::try_from(ms)
        .ok()
        .map(|ms| now + Duration::from_millis(ms.saturating_add(2)))
}

impl FairLock {
    fn new(client: Client, name: &str) -> FairLock {
        let named = Named::new(client.inner.clone(), Kind::Fair, name);
        FairLock {
            inner: Arc::new(FairLockInner {
                queue: named.role(Role::Queue),
                named,
                client,
            }),
            queue_lease: DEFAULT_QUEUE_LEASE,
        }
    }

    /// The lock's name as given to [`Client::fair_lock`].
    pub fn name(&self) -> &str {
        &self.inner.named.name
    }

    /// The same fair lock through a handle without re-entry: every acquisition
    /// through it is an owner of its own, so a second acquisition by the
    /// same task or flow waits until the first is released, like tokio's
    /// `Mutex` (and like it, waits forever if the first guard is kept
    /// alive by the waiting flow itself). Holds taken through it are not the
    /// task's: `is_held_by_current_task` and `hold_count` do not count them.
    /// See [`Owner`](crate::Owner) for the re-entry rule of ordinary handles.
    #[must_use]
    pub fn non_reentrant(&self) -> FairLock {
        FairLock {
            inner: Arc::new(FairLockInner {
                named: self.inner.named.non_reentrant(),
                queue: self.inner.queue.clone(),
                client: self.inner.client.clone(),
            }),
            queue_lease: self.queue_lease,
        }
    }

    /// Whether acquisitions through this handle re-enter holds of the same
    /// owner (false for a [`non_reentrant`](FairLock::non_reentrant) handle).
    pub fn is_reentrant(&self) -> bool {
        self.inner.named.reentrant
    }

    /// The same lock with another queue lease: how long a waiter that
    /// stopped refreshing its place (it crashed) keeps it before the others
    /// skip it. Live waiters refresh every `queue_lease / 3`, so it bounds
    /// both the delay a crashed waiter causes and the heartbeat traffic of
    /// live ones. Each waiter uses the queue lease of the handle it waits on.
    /// A waiter that cannot refresh for longer than its queue lease (a
    /// frozen process, Redis unreachable) counts as crashed: it queues again
    /// at the tail when it resumes.
    ///
    /// Default: 5 s. Must be at least 30 ms (checked when acquiring) and
    /// well above a Redis round trip.
    #[must_use]
    pub fn with_queue_lease(mut self, queue_lease: Duration) -> FairLock {
        self.queue_lease = queue_lease;
        self
    }

    /// The queue lease of this handle (see [`FairLock::with_queue_lease`]).
    pub fn queue_lease(&self) -> Duration {
        self.queue_lease
    }

    /// The client this lock belongs to.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    fn queue_lease_ms(&self) -> Result<i64> {
        if self.queue_lease < MIN_QUEUE_LEASE {
            return Err(Error::InvalidArgument(format!(
                "queue lease must be at least {MIN_QUEUE_LEASE:?}, got {:?}",
                self.queue_lease
            )));
        }
        checked_ms("queue lease", self.queue_lease)
    }

    /// The keys of the acquire, leave and force-unlock scripts: the hash,
    /// the fencing counter and the queue (the lock scripts' order).
    fn script_keys(&self) -> Vec<Key> {
        vec![
            self.inner.named.hold.clone(),
            self.inner.named.fence.clone(),
            self.inner.queue.clone(),
        ]
    }

    /// Waits until the lock is acquired (in FIFO order with the other
    /// waiters); the watchdog renews the lease until the guard is released.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty name or a queue lease under
    /// 30 ms, [`Error::WrongType`] when one of the lock's keys holds something
    /// else, [`Error::Redis`] when Redis fails (each command is bounded by the
    /// client's command timeout).
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future loses its place in the queue (its entry
    /// is removed in the background at once, and the next waiter is told if
    /// it is now the head of a free lock); a lock already won in flight is
    /// released in the background.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
    /// let guard = client.fair_lock("payouts").lock().await?;
    /// // ... work, passing guard.fencing_token() to the protected store ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<FairLockGuard> {
        let guard = self.acquire(None, None).await?;
        guard.ok_or_else(|| unreachable_wait(&self.inner.named.name))
    }

    /// Waits until the lock is acquired, with a fixed lease nobody renews:
    /// the lock is freed after `lease` even if the guard is still alive (the
    /// guard then reports [`lost`](FairLockGuard::lost)).
    ///
    /// # Errors
    /// As [`FairLock::lock`], plus [`Error::InvalidArgument`] for a zero or
    /// absurd (over a year) lease.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`FairLock::lock`].
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<FairLockGuard> {
        let guard = self.acquire(None, Some(lease)).await?;
        guard.ok_or_else(|| unreachable_wait(&self.inner.named.name))
    }

    /// Redisson's `tryLock(waitTime, leaseTime)`: waits at most `wait` in the
    /// queue. `lease: None` means watchdog-renewed. `Ok(None)` when the wait
    /// ran out; the queue entry is gone by then.
    ///
    /// With a zero `wait` it is one round trip that never queues and never
    /// subscribes; it succeeds only when the lock is free and nobody is
    /// queued (it does not overtake waiters).
    ///
    /// # Errors
    /// As [`FairLock::lock_with_lease`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`FairLock::lock`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.fair_lock("payouts");
    /// if let Some(guard) = lock.try_lock(Duration::from_secs(5), None).await? {
    ///     println!("token {}", guard.fencing_token());
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<FairLockGuard>> {
        // A wait too long to represent is "forever".
        self.acquire(Instant::now().checked_add(wait), lease).await
    }

    #[tracing::instrument(level = "debug", name = "redisync.lock.acquire", skip_all, fields(lock.key = %self.inner.named.key, lock.kind = "fair"))]
    async fn acquire(
        &self,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<FairLockGuard>> {
        let held = engine::acquire::acquire(self, (), deadline, lease).await?;
        Ok(held.map(|held| FairLockGuard {
            lock: self.clone(),
            held,
        }))
    }

    /// Removes `owner` from the queue and deletes any acquisition of it
    /// except a live local hold; tells the next owner when the lock is free
    /// and its head changed. Returns whether an acquisition was deleted.
    /// `keep`: an acquisition to keep whatever happens locally (the outer
    /// hold of a cancelled re-entry, whose release may still be on its way).
    async fn leave(&self, slot: &Slot, owner: &str, keep: Option<u64>) -> Result<bool> {
        let keep = keep.or_else(|| slot.holds.holder(owner).map(|h| h.token));
        let client = self.named().client_inner();
        let freed: i64 = LEAVE
            .run_idempotent(
                client.link(),
                &self.inner.named.key,
                self.script_keys(),
                FairLockLeave {
                    owner,
                    keep: keep.map(Digits),
                    publish: client.hub.publish_command(),
                    channel: self.inner.named.channel.clone(),
                    fence_ttl_ms: client.settings.fence_ttl_ms(),
                }
                .into_values(),
            )
            .await?;
        Ok(freed == 1)
    }

    /// Whether anybody holds the lock.
    ///
    /// # Errors
    /// [`Error::WrongType`] when the key holds something else; [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe (read-only).
    pub async fn is_locked(&self) -> Result<bool> {
        Ok(self.inspect().await?.is_held())
    }

    /// Whether the calling task (its owner id) holds the lock.
    ///
    /// # Errors
    /// As [`FairLock::is_locked`].
    ///
    /// # Cancel safety
    /// Cancel safe (read-only).
    pub async fn is_held_by_current_task(&self) -> Result<bool> {
        Ok(self.hold_count().await? > 0)
    }

    /// How many holds the calling task has on the lock (0 when none).
    ///
    /// # Errors
    /// As [`FairLock::is_locked`].
    ///
    /// # Cancel safety
    /// Cancel safe (read-only).
    pub async fn hold_count(&self) -> Result<u32> {
        let owner = self.named().client_inner().owner_id();
        Ok(self.inspect().await?.holds_of(&owner, HoldMode::Exclusive))
    }

    /// The lock's remaining lease; `None` when it is not locked. A key
    /// without TTL (not written by redisync) reports `Duration::MAX`.
    ///
    /// # Errors
    /// As [`FairLock::is_locked`].
    ///
    /// # Cancel safety
    /// Cancel safe (read-only).
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        Ok(self.inspect().await?.remaining_lease())
    }

    /// What Redis holds of this fair lock now, read in one script: the holder, the
    /// queue in order with each waiter's deadline, and the last fencing token.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty name; [`Error::WrongType`]
    /// when a key of the fair lock holds something redisync did not write;
    /// [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe (read-only).
    pub async fn inspect(&self) -> Result<Inspection> {
        crate::inspect::inspect_handle(self.named(), Self::WHAT).await
    }

    /// Removes what blocks the lock and tells the next waiter in the queue:
    /// the holder, whoever it is; when the lock is free, the queue's head (a
    /// crashed waiter otherwise keeps every waiter behind it waiting until
    /// its queue lease ends; a live head queues again at its next attempt).
    /// The rest of the queue keeps its order. Guards of this client on the
    /// lock report [`lost`](FairLockGuard::lost) at once, also one whose
    /// grant was still on its way; guards of other clients when their
    /// watchdog next renews or their lease ends. `Ok(true)` if it removed
    /// the holder or a head.
    ///
    /// # Errors
    /// [`Error::WrongType`] when one of the lock's keys holds something else
    /// (nothing is touched); [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: the delete is one script; dropping the future may leave
    /// it done or not done, never half done.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.inner
            .named
            .force_unlock(&FORCE_UNLOCK, self.script_keys())
            .await
    }
}

fn unreachable_wait(name: &str) -> Error {
    Error::InvalidArgument(format!(
        "wait for fair lock {name:?} ended without a deadline"
    ))
}

/// The fair lock on the engine: re-entrant per owner, no local turn (each
/// waiter holds its own place in Redis's queue); a release hands the lock
/// to the oldest live entry and its message wakes only that waiter, holding
/// it (the engine's hand-off).
impl Spec for FairLock {
    type Ask = ();
    const WHAT: &'static str = "lock";
    const REENTRANT: bool = true;

    fn named(&self) -> &Named {
        &self.inner.named
    }
    fn check(&self, (): ()) -> Result<()> {
        self.queue_lease_ms().map(drop)
    }
    fn hold_ops(&self, (): ()) -> &'static HoldOps {
        &FAIR_HOLD
    }
    fn gate(&self, _: &Slot, _: &str, (): ()) -> Result<Gate> {
        Ok(Gate::None)
    }
    /// A queue entry lives for the queue lease.
    fn linger(&self, lease: Duration) -> Duration {
        lease.max(self.queue_lease)
    }

    /// Sent once. Busy: look again for the heartbeat (refresh our queue
    /// deadline well before it passes), or, at the head, when the holder's
    /// lease ends (it may have crashed), or, behind a live waiter of a free
    /// lock, when its queue deadline passes (it may have crashed); a
    /// hand-off wakes us before.
    async fn attempt(&self, t: Try<'_, ()>) -> Result<Reply> {
        let client = self.named().client_inner();
        let args = FairLockAcquire {
            owner: t.holder,
            lease_ms: t.lease_ms,
            keep: Token(t.keep),
            fence_ttl_ms: client.settings.fence_ttl_ms(),
            queue_lease_ms: self.queue_lease_ms()?,
            wait: t.wait_mode(),
            number: Digits(t.number),
            next_number: Digits(t.next_number),
            publish: client.hub.publish_command(),
            channel: self.inner.named.channel.clone(),
            expect_busy: OneOrEmpty(t.expect_busy),
            expire_gt: OneOrEmpty(client.hub.has_expire_gt()),
            restart_guard: self.named().restart_guard_args(),
        }
        .into_values();
        let reply: Vec<i64> = ACQUIRE
            .run(
                client.link(),
                &self.inner.named.key,
                self.script_keys(),
                args,
            )
            .await?;
        match reply[..] {
            [1 | 2, token] => Ok(Reply::granted(token)),
            [0, pttl_ms, queued, head_ms] => {
                let now = Instant::now();
                let mut until = now + self.queue_lease / 3;
                for at in [after_ms(now, pttl_ms), after_ms(now, head_ms)]
                    .into_iter()
                    .flatten()
                {
                    until = until.min(at);
                }
                Ok(Reply::Busy {
                    until,
                    queued: queued > 0,
                    renumbered: queued == 2,
                })
            }
            _ => Err(Error::Script {
                name: "fair_lock_acquire.lua",
                message: format!("unexpected reply {reply:?}"),
            }),
        }
    }

    /// Leaves the queue and deletes what `holder` may have won (see
    /// [`FairLock::leave`]).
    async fn undo(&self, slot: &Slot, holder: &str, keep: Option<u64>) -> Result<()> {
        self.leave(slot, holder, keep).await.map(drop)
    }
}

/// One hold of a [`FairLock`]; the same methods as
/// [`LockGuard`](crate::LockGuard). Release it with
/// [`unlock`](FairLockGuard::unlock).
///
/// Dropping a guard without `unlock` stops its lease renewal at once and
/// releases the hold in a background task on the current tokio runtime (the
/// next waiter is told as with `unlock`); that task only logs errors
/// (`unlock().await` returns them). Outside a runtime the lease expiry
/// releases the lock.
#[must_use = "if unused the lock is released immediately"]
#[clippy::has_significant_drop]
pub struct FairLockGuard {
    lock: FairLock,
    held: GuardCore,
}

impl std::fmt::Debug for FairLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairLockGuard")
            .field("held", &self.held)
            .finish_non_exhaustive()
    }
}

guard_accessors!(FairLockGuard);

impl FairLockGuard {
    /// Call this before moving the guard to another task. A guard belongs
    /// to the owner that took it (by default its task; see
    /// [`Owner`](crate::Owner)), wherever the guard goes: moved into a
    /// spawned task, it is still re-entered at once, with the same token,
    /// by the task that took it, whose next `lock()` for the same name
    /// would then share the critical section with the moved guard. This
    /// rebinds the hold, in Redis and in this client, to an owner id of its
    /// own, in one script that keeps its fencing token, its lease and the
    /// watchdog's renewal: afterwards nobody re-enters it, and the old
    /// owner's next acquisition waits for its release like any other.
    ///
    /// ```no_run
    /// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
    /// let lock = client.fair_lock("customer:7");
    /// let mut guard = lock.lock().await?;
    /// guard.hand_off().await?;
    /// tokio::spawn(async move {
    ///     // ... work under guard.fencing_token() ...
    ///     let _ = guard.unlock().await;
    /// });
    /// // The next message for customer 7 waits for the background work.
    /// let next = lock.lock().await?;
    /// # drop(next); Ok(()) }
    /// ```
    ///
    /// It takes `&mut self` rather than the guard: a refusal leaves the
    /// guard as it was, still held and still its owner's.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the hold is re-entered (another
    /// guard of the same owner shares it: a re-entered hold belongs to its
    /// owner), nothing changed; [`Error::NotHeld`] when this acquisition no
    /// longer holds the lock (nothing written; the guard reports lost);
    /// [`Error::WrongType`] when the key holds something else (nothing
    /// written); [`Error::Redis`]; [`Error::Shutdown`] after a shutdown.
    ///
    /// # Cancel safety
    /// One script, done or not done. If it fails with an unknown outcome
    /// (a timeout, a dropped connection) or the future is dropped before
    /// the reply, the guard keeps the new owner id: if Redis never ran the
    /// hand-off, the next renewal finds nothing under it and the guard
    /// reports [`lost`](Self::lost) (it is never held twice).
    pub async fn hand_off(&mut self) -> Result<()> {
        self.held.hand_off().await
    }

    /// The lock this guard holds.
    pub fn lock(&self) -> &FairLock {
        &self.lock
    }

    /// Makes the remaining lease at least `lease` if this acquisition still
    /// holds the lock; a longer lease is kept (a lease is never cut: another
    /// guard of the same hold, or a watchdog renewal in flight, may count on
    /// it). With a watchdog lease the watchdog keeps renewing afterwards.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if the lock was lost (the guard then reports lost);
    /// [`Error::InvalidArgument`] for a zero or absurd lease; [`Error::Redis`];
    /// [`Error::Shutdown`] after [`Client::shutdown`](crate::Client::shutdown).
    ///
    /// # Cancel safety
    /// Cancel safe: one script, done or not done.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        self.held.extend(lease).await
    }

    /// Releases this hold; after the owner's last one the lock is free and
    /// the next waiter in the queue is told. Renewal stops before the
    /// release is sent.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if this acquisition no longer holds the lock
    /// (nothing was written or published); [`Error::Redis`] if Redis failed
    /// (the release of a last hold is then retried in the background while
    /// the lease lasts); [`Error::Shutdown`] at once after
    /// [`Client::shutdown`](crate::Client::shutdown) (which released the hold).
    ///
    /// # Cancel safety
    /// Cancel safe: renewal stops at once; if the future is dropped before
    /// the final release is done, it is done in the background.
    #[tracing::instrument(level = "debug", name = "redisync.lock.release", skip_all, fields(lock.key = %self.lock.inner.named.key, lock.kind = "fair"))]
    pub async fn unlock(self) -> Result<()> {
        self.held.release().await
    }
}
