//! The reentrant lock: `Lock` and `LockGuard`.

use std::sync::Arc;
use std::time::Duration;

use fred::types::{Key, Value};
use tokio::time::Instant;

use crate::client::Client;
use crate::engine::guard_core::{guard_accessors, GuardCore};
use crate::engine::hold::{Hold, HoldOps, Released};
use crate::engine::slot::Slot;
use crate::engine::{self, Gate, Named, Reply, Spec, Try};
use crate::error::{Error, Result};
use crate::inspect::{HoldMode, Inspection};
use crate::redis::args::{
    CarriedRelease, Digits, LockAbandon, LockAcquire, LockAdvanceFence, LockHandOff,
    LockPublishIdentity, LockRelease, OneOrEmpty, OneOrZero, ScriptArgs, Token,
};
use crate::redis::keys::{sibling_key, Kind, Role};
use crate::redis::link::Link;
use crate::redis::script::lua_script;

lua_script!(ACQUIRE, "lock_acquire.lua");
lua_script!(RELEASE, "lock_release.lua");
lua_script!(ABANDON, "lock_abandon.lua");
lua_script!(FORCE_UNLOCK, "lock_force_unlock.lua");
lua_script!(ADVANCE_FENCE, "lock_advance_fence.lua");
lua_script!(RENEW, "lock_renew.lua");
lua_script!(CHECK, "lock_check.lua");
lua_script!(PUBLISH_IDENTITY, "lock_publish_identity.lua");
lua_script!(HAND_OFF, "lock_hand_off.lua");

/// Lock holds: renewed by `lock_renew.lua` with (owner, token), checked
/// by `lock_check.lua`; released by `lock_release.lua` (3: another client
/// contended meanwhile).
pub(crate) static LOCK_HOLD: HoldOps = HoldOps {
    renew: &RENEW,
    check: &CHECK,
    hold_args: lock_renew_args,
    release: |redis, publish, fence_ttl_ms, hold, last| {
        Box::pin(release_hold(redis, publish, fence_ttl_ms, hold, last))
    },
    rebind: Some(|redis, hold, from, to| Box::pin(rebind_lock_hash(redis, hold, from, to, "lock"))),
    folds_release: true,
};

/// Keys and arguments of `lock_renew.lua` for one hold of the lock hash
/// layout (owner -> count, '~t' -> token), shared with the fair lock.
pub(crate) fn lock_renew_args(h: &Hold) -> (Vec<Key>, Vec<Value>) {
    (
        vec![Key::from(&*h.key)],
        vec![h.owner(), Value::String(h.token.to_string().into())],
    )
}

/// `lock_hand_off.lua`: moves `hold`'s acquisition in a hash of the lock
/// layout from owner id `from` to `to` (shared with the fair lock; `what`
/// names the kind in a wrong-type error). `Ok(false)`: not held.
pub(crate) async fn rebind_lock_hash(
    redis: &dyn Link,
    hold: &Hold,
    from: &str,
    to: &str,
    what: &'static str,
) -> Result<bool> {
    // Idempotent: a repeat finds the field moved already.
    let done: i64 = HAND_OFF
        .run_idempotent(
            redis,
            &hold.key,
            vec![Key::from(&*hold.key)],
            LockHandOff {
                owner: from,
                new_owner: to,
                token: Digits(hold.token),
                what,
            }
            .into_values(),
        )
        .await?;
    Ok(done == 1)
}

/// The highest value [`Lock::advance_fencing_token`] takes: tokens are
/// computed in Lua (doubles, exact below 2^53), and this leaves room for
/// 2^52 more of them (counters start near the server clock in
/// microseconds, about 2^51 today).
const MAX_ADVANCE: u64 = 1 << 52;

/// Poll bound while the lock has no TTL (a key written by something else).
const NO_TTL_POLL: Duration = Duration::from_secs(1);

/// The acquire script's busy reply when it did not read the lock's TTL.
const PTTL_NOT_READ: i64 = -3;

/// The server's bound for a waiter behind others in the queue: none (the
/// engine looks again within a quarter of the waiter's lease).
const QUEUED_LOOK: Duration = Duration::from_secs(3600);

/// A reentrant distributed lock, Redisson's `RLock` for async Rust.
///
/// The lock is a Redis hash whose field is the owner id
/// `"<client uuid>:<tokio task id>"` and whose value is the hold count; the
/// key's TTL is the lease. A task that holds the lock may take it again (each
/// guard releases one hold). Waiting tasks never poll: tasks of one client
/// queue in FIFO order and only the first of them contends in Redis; a
/// client that finds the lock held by another joins the lock's wait queue
/// in Redis, and a release hands the lock to the oldest waiting client
/// (its message carries the token: one subscription per lock per client,
/// only that client wakes). A free lock goes to whoever asks first, so the
/// order is FIFO between waiting clients, not a fair lock's FIFO among all
/// tasks (docs/fairness.md).
///
/// Leases: [`lock`](Lock::lock) and `try_lock(wait, None)` take the client's
/// watchdog lease (30 s by default) and renew it every lease/3 while the
/// guard lives; [`lock_with_lease`](Lock::lock_with_lease) and
/// `try_lock(wait, Some(lease))` take a fixed lease that nobody renews. A
/// re-entrant acquisition never shortens the lease (PTTL becomes
/// max(PTTL, lease)).
///
/// Every acquisition returns a [fencing token](LockGuard::fencing_token).
///
/// The owner is the tokio task, unless an [`Owner`](crate::Owner) scope says
/// otherwise (give sibling flows of one task, `join!` or
/// `for_each_concurrent`, a scope each, or they share their holds); outside
/// a tokio task (in `block_on`, e.g. directly in `#[tokio::main]`) it is the
/// OS thread. A [`non_reentrant`](Lock::non_reentrant) handle re-enters
/// nothing.
///
/// The safe set-up: a restart guard (a Redis that restarts without its data
/// grants nothing for the longest lease), work that runs only while the lock
/// is held, and the token handed to what is written:
///
/// ```no_run
/// # async fn save_report(_token: u64) {}
/// # async fn demo() -> redisync::Result<()> {
/// use std::time::Duration;
/// use redisync::{run_locked, Outcome};
///
/// let client = redisync::Client::builder("redis://127.0.0.1:6379")
///     .restart_guard(Duration::from_secs(60))
///     .connect()
///     .await?;
/// let lock = client.lock("reports:daily");
/// // A loss of the lock cancels the work at its next await point.
/// let outcome = run_locked(lock.lock(), async |guard| {
///     // The store refuses a write older than the newest token it saw.
///     save_report(guard.fencing_token()).await;
/// })
/// .await?;
/// if !matches!(outcome, Outcome::Completed(())) {
///     println!("the lock was lost: the report may be incomplete");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    inner: Arc<Named>,
    client: Client,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.inner.name)
            .field("key", &self.inner.key)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A handle on the reentrant lock `name` (no I/O). See [`Lock`].
    pub fn lock(&self, name: &str) -> Lock {
        Lock::new(self.clone(), name)
    }
}

impl Lock {
    fn new(client: Client, name: &str) -> Lock {
        Lock {
            inner: Arc::new(Named::new(client.inner.clone(), Kind::Lock, name)),
            client,
        }
    }

    /// The lock's name as given to [`Client::lock`].
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The same lock through a handle without re-entry: every acquisition
    /// through it is an owner of its own, so a second acquisition by the
    /// same task or flow waits until the first is released, like tokio's
    /// `Mutex` (and like it, waits forever if the first guard is kept
    /// alive by the waiting flow itself). Holds taken through it are not the
    /// task's: `is_held_by_current_task` and `hold_count` do not count them.
    /// See [`Owner`](crate::Owner) for the re-entry rule of ordinary handles.
    #[must_use]
    pub fn non_reentrant(&self) -> Lock {
        Lock {
            inner: Arc::new(self.inner.non_reentrant()),
            client: self.client.clone(),
        }
    }

    /// The same lock through a handle whose acquisitions' scripts check
    /// `guard` in place of the client's restart guard (see
    /// [`__private::with_restart_guard`](crate::__private::with_restart_guard),
    /// through which `redisync-redlock` reaches it).
    #[must_use]
    pub(crate) fn with_restart_guard(
        &self,
        guard: Arc<crate::redis::restart::RestartGuard>,
    ) -> Lock {
        Lock {
            inner: Arc::new(self.inner.with_restart_guard(guard)),
            client: self.client.clone(),
        }
    }

    /// Whether acquisitions through this handle re-enter holds of the same
    /// owner (false for a [`non_reentrant`](Lock::non_reentrant) handle).
    pub fn is_reentrant(&self) -> bool {
        self.inner.reentrant
    }

    /// Waits until the lock is acquired; the watchdog renews the lease until
    /// the guard is released.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty name, [`Error::WrongType`] when
    /// the key holds something else, [`Error::Redis`] when Redis fails (each
    /// command is bounded by the client's command timeout).
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future gives up its place in the local queue;
    /// if the lock was won in flight it is released in the background.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
    /// let guard = client.lock("orders:42").lock().await?;
    /// // ... work, passing guard.fencing_token() to the protected store ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<LockGuard> {
        let guard = self.acquire(None, None, None).await?;
        guard.ok_or_else(|| unreachable_wait(&self.inner.name))
    }

    /// Waits until the lock is acquired, with a fixed lease nobody renews:
    /// the lock is freed after `lease` even if the guard is still alive (the
    /// guard then reports [`lost`](LockGuard::lost)).
    ///
    /// # Errors
    /// As [`Lock::lock`], plus [`Error::InvalidArgument`] for a zero or
    /// absurd (over a year) lease.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Lock::lock`].
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        let guard = self.acquire(None, Some(lease), None).await?;
        guard.ok_or_else(|| unreachable_wait(&self.inner.name))
    }

    /// Redisson's `tryLock(waitTime, leaseTime)`: waits at most `wait` (zero:
    /// one attempt, no subscription). `lease: None` means watchdog-renewed.
    /// `Ok(None)` when the wait ran out.
    ///
    /// # Errors
    /// As [`Lock::lock_with_lease`]. With Redis down it returns an error
    /// within `wait` plus the command timeout.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Lock::lock`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.lock("orders:42");
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
    ) -> Result<Option<LockGuard>> {
        // A wait too long to represent is "forever".
        self.acquire(Instant::now().checked_add(wait), lease, None)
            .await
    }

    /// [`Lock::try_lock`], with a lower bound for the fencing token of a new
    /// acquisition: see
    /// [`__private::try_lock_with_min_token`](crate::__private::try_lock_with_min_token),
    /// through which `redisync-redlock` reaches it.
    pub(crate) async fn try_lock_with_min_token(
        &self,
        wait: Duration,
        lease: Option<Duration>,
        min_token: u64,
    ) -> Result<Option<LockGuard>> {
        self.acquire(Instant::now().checked_add(wait), lease, Some(min_token))
            .await
    }

    #[tracing::instrument(level = "debug", name = "redisync.lock.acquire", skip_all, fields(lock.key = %self.inner.key, lock.kind = "lock"))]
    async fn acquire(
        &self,
        deadline: Option<Instant>,
        lease: Option<Duration>,
        min_token: Option<u64>,
    ) -> Result<Option<LockGuard>> {
        let held = engine::acquire::acquire(self, min_token, deadline, lease).await?;
        Ok(held.map(|held| LockGuard {
            lock: self.clone(),
            held,
        }))
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
    /// As [`Lock::is_locked`].
    ///
    /// # Cancel safety
    /// Cancel safe (read-only).
    pub async fn is_held_by_current_task(&self) -> Result<bool> {
        Ok(self.hold_count().await? > 0)
    }

    /// How many holds the calling task has on the lock (0 when none).
    ///
    /// # Errors
    /// As [`Lock::is_locked`].
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
    /// As [`Lock::is_locked`].
    ///
    /// # Cancel safety
    /// Cancel safe (read-only).
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        Ok(self.inspect().await?.remaining_lease())
    }

    /// What Redis holds of this lock now, read in one script: the holder
    /// (owner, hold count, token, lease left), the last fencing token issued,
    /// and whether another client asked while it was held.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty name; [`Error::WrongType`]
    /// when a key of the lock holds something redisync did not write;
    /// [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe (read-only).
    pub async fn inspect(&self) -> Result<Inspection> {
        crate::inspect::inspect_handle(self.named(), Self::WHAT).await
    }

    /// The client this lock belongs to.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Raises the lock's fencing counter on this server to at least `token`
    /// and returns the counter's value afterwards: see
    /// [`__private::advance_fencing_token`](crate::__private::advance_fencing_token),
    /// through which `redisync-redlock` reaches it.
    pub(crate) async fn advance_fencing_token(&self, token: u64) -> Result<u64> {
        self.named().check_usable(Self::WHAT)?;
        if token > MAX_ADVANCE {
            return Err(Error::InvalidArgument(format!(
                "fencing token {token} is above 2^52: tokens must stay exact below 2^53"
            )));
        }
        let client = self.named().client_inner();
        let fence = self.inner.fence.as_str().unwrap_or_default().to_owned();
        let value: i64 = ADVANCE_FENCE
            .run_idempotent(
                client.link(),
                &fence,
                vec![self.inner.fence.clone(), self.inner.hold.clone()],
                LockAdvanceFence {
                    minimum: Digits(token),
                    fence_ttl_ms: client.settings.fence_ttl_ms(),
                }
                .into_values(),
            )
            .await?;
        Ok(u64::try_from(value).unwrap_or(0))
    }

    /// Deletes the lock whoever holds it and wakes its waiters. Guards of this
    /// client on the lock report [`lost`](LockGuard::lost) at once; guards of
    /// other clients when their watchdog next renews or their lease ends.
    /// `Ok(true)` if it was locked.
    ///
    /// # Errors
    /// [`Error::WrongType`] when the key holds something else (it is left
    /// untouched); [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: the delete is one script; dropping the future may leave
    /// it done or not done, never half done.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.inner
            .force_unlock(
                &FORCE_UNLOCK,
                vec![self.inner.hold.clone(), self.inner.fence.clone()],
            )
            .await
    }
}

fn unreachable_wait(name: &str) -> Error {
    Error::InvalidArgument(format!("wait for lock {name:?} ended without a deadline"))
}

/// The lock on the engine: re-entrant per owner, the local turn kept while
/// held; a client that finds it held by another queues in Redis and is
/// handed it by a release (the engine's hand-off).
/// Its ask is the token floor of [`__private::try_lock_with_min_token`](crate::__private::try_lock_with_min_token).
impl Spec for Lock {
    type Ask = Option<u64>;
    const WHAT: &'static str = "lock";
    const REENTRANT: bool = true;

    fn named(&self) -> &Named {
        &self.inner
    }
    fn hold_ops(&self, _: Option<u64>) -> &'static HoldOps {
        &LOCK_HOLD
    }
    fn gate(&self, _: &Slot, _: &str, _: Option<u64>) -> Result<Gate> {
        Ok(Gate::WhileHeld)
    }

    async fn attempt(&self, t: Try<'_, Option<u64>>) -> Result<Reply> {
        let client = self.named().client_inner();
        let args = LockAcquire {
            owner: t.holder,
            lease_ms: t.lease_ms,
            keep: Token(t.keep),
            fence_ttl_ms: client.settings.fence_ttl_ms(),
            floor: Token(t.ask),
            wait: t.wait_mode(),
            expect_busy: OneOrEmpty(t.expect_busy),
            number: Digits(t.number),
            next_number: Digits(t.next_number),
            // A dropped guard's final release, run first (release_lock).
            release: t.release.map(|(hold, _)| CarriedRelease {
                owner: hold.owner_str(),
                token: Digits(hold.token),
                publish: client.hub.publish_command(),
                channel: hold.channel.clone(),
            }),
            restart_guard: self.named().restart_guard_args(),
        }
        .into_values();
        let mut reply: Vec<i64> = ACQUIRE
            .run_idempotent(
                client.link(),
                &self.inner.key,
                vec![
                    self.inner.hold.clone(),
                    self.inner.fence.clone(),
                    self.inner.role(Role::Queue),
                ],
                args,
            )
            .await?;
        if let Some((_, released)) = t.release {
            match reply.pop() {
                Some(code) => released.store(code, std::sync::atomic::Ordering::Release),
                None => {
                    return Err(Error::Script {
                        name: "lock_acquire.lua",
                        message: "no answer for the release it carried".into(),
                    })
                }
            }
        }
        match reply[..] {
            [1 | 2, token] => Ok(Reply::granted(token)),
            [0, pttl, queued] => Ok(Reply::Busy {
                // Behind others in the queue: handed the lock, or looking
                // again on its own (the engine's bound for queued waiters).
                until: if pttl == PTTL_NOT_READ && queued > 0 {
                    Instant::now() + QUEUED_LOOK
                } else {
                    Reply::bound(pttl, NO_TTL_POLL)
                },
                queued: queued > 0,
                renumbered: queued == 2,
            }),
            _ => Err(Error::Script {
                name: "lock_acquire.lua",
                message: format!("unexpected reply {reply:?}"),
            }),
        }
    }

    /// `lock_abandon.lua`: deletes an acquisition of `holder` unless its
    /// token is `keep`.
    async fn undo(&self, _: &Slot, holder: &str, keep: Option<u64>) -> Result<()> {
        let client = self.named().client_inner();
        let _undone: i64 = ABANDON
            .run_idempotent(
                client.link(),
                &self.inner.key,
                vec![
                    self.inner.hold.clone(),
                    self.inner.fence.clone(),
                    self.inner.role(Role::Queue),
                ],
                LockAbandon {
                    owner: holder,
                    keep: Token(keep),
                    publish: client.hub.publish_command(),
                    channel: self.inner.channel.clone(),
                    fence_ttl_ms: client.settings.fence_ttl_ms(),
                }
                .into_values(),
            )
            .await?;
        Ok(())
    }
}

/// Runs the release script for one hold (`last`: drop the owner's whole
/// field). The script answers 0 not held, 1 still held, 2 released, 3
/// released after another client tried.
pub(crate) async fn release_hold(
    redis: &dyn Link,
    publish: &'static str,
    fence_ttl_ms: i64,
    hold: &Hold,
    last: bool,
) -> Result<Released> {
    let key = &hold.key;
    // A final release is idempotent (owner and token checked); counting
    // down a re-entrant hold twice would free the lock too early.
    let attempts = if last { 3 } else { 1 };
    let args = LockRelease {
        owner: hold.owner_str(),
        token: Digits(hold.token),
        last: OneOrZero(last),
        publish,
        channel: hold.channel.clone(),
        fence_ttl_ms,
    }
    .into_values();
    let keys = vec![
        Key::from(&**key),
        sibling_key(key, Role::Fence),
        sibling_key(key, Role::Queue),
    ];
    let code: i64 = match RELEASE
        .run_unless_refused(redis, key, keys, args.clone(), attempts)
        .await
    {
        // While the slot migrates, a cluster refuses a script over keys the
        // source may not have (the queue, mostly missing): release by the
        // hash alone, waking every waiter instead of handing off.
        Err(e) if e.is_refused() => {
            RELEASE
                .run_with(redis, key, vec![Key::from(&**key)], args, attempts)
                .await?
        }
        other => other?,
    };
    // A hand-off (4) needs no pause for other clients: the queue decides.
    Ok(Released::from_lock_release(code))
}

/// One hold of a [`Lock`]. Release it with [`unlock`](LockGuard::unlock).
///
/// Dropping a guard without `unlock` stops its lease renewal at once and
/// releases the hold in a background task on the current tokio runtime; that
/// task only logs errors (`unlock().await` returns them). Outside a runtime
/// the lease expiry releases the lock.
#[must_use = "if unused the lock is released immediately"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    lock: Lock,
    held: GuardCore,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("held", &self.held)
            .finish_non_exhaustive()
    }
}

guard_accessors!(LockGuard);

impl LockGuard {
    /// The handle it was acquired through.
    pub(crate) fn lock_handle(&self) -> &Lock {
        &self.lock
    }

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
    /// let lock = client.lock("customer:7");
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
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// Stores `identity` in the lock's hash while this acquisition holds it
    /// (it goes with the lock); `Ok(false)` when it no longer does.
    pub(crate) async fn publish_identity(&self, identity: &str) -> Result<bool> {
        let hold = self.held.hold();
        let client = self.lock.named().client_inner();
        // After a shutdown nothing is sent (it released the lead).
        client.check_connected()?;
        let done: i64 = PUBLISH_IDENTITY
            .run_idempotent(
                client.link(),
                &hold.key,
                vec![self.lock.inner.hold.clone()],
                LockPublishIdentity {
                    owner: hold.owner_str(),
                    token: Digits(hold.token),
                    identity,
                    publish: client.hub.publish_command(),
                    channel: self.lock.named().channel.clone(),
                }
                .into_values(),
            )
            .await?;
        Ok(done == 1)
    }

    /// Makes the remaining lease at least `lease` if this acquisition still
    /// holds the lock; a longer lease is kept (a lease is never cut: another
    /// guard of the same hold, or a watchdog renewal in flight, may count on
    /// it). With a watchdog lease the watchdog keeps renewing afterwards.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if the lock was lost (the guard then reports lost);
    /// [`Error::InvalidArgument`] for a zero or absurd lease; [`Error::Redis`];
    /// [`Error::Shutdown`] after [`Client::shutdown`].
    ///
    /// # Cancel safety
    /// Cancel safe: one script, done or not done.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        self.held.extend(lease).await
    }

    /// Releases this hold (the lock itself once the last hold of the owner
    /// goes). Renewal stops before the release is sent.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if this acquisition no longer holds the lock
    /// (nothing was written), or if the guard was already known lost (its
    /// lease had run out by this client's clock; whatever was left in Redis
    /// is released anyway); [`Error::Redis`] if Redis failed (a final
    /// release is then retried in the background while the lease lasts);
    /// [`Error::Shutdown`] at once after [`Client::shutdown`] (which
    /// released the hold).
    ///
    /// # Cancel safety
    /// Cancel safe: renewal stops at once; if the future is dropped before
    /// the final release is done, it is done in the background.
    #[tracing::instrument(level = "debug", name = "redisync.lock.release", skip_all, fields(lock.key = %self.lock.inner.key))]
    pub async fn unlock(self) -> Result<()> {
        self.held.release().await
    }
}
