//! The read-write lock: `RwLock` with `ReadLock` and `WriteLock` handles.

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
    Digits, OneOrEmpty, OneOrZero, RwLockAcquire, RwLockRelease, ScriptArgs, Token,
};
use crate::redis::keys::{self, Kind, Role};
use crate::redis::link::Link;
use crate::redis::script::lua_script;

lua_script!(ACQUIRE, "rw_lock_acquire.lua");
lua_script!(RELEASE, "rw_lock_release.lua");
lua_script!(RENEW, "rw_lock_renew.lua");
lua_script!(CHECK, "rw_lock_check.lua");
lua_script!(FORCE_UNLOCK, "rw_lock_force_unlock.lua");

/// Poll bound when the lock has no TTL (a key written by something else).
const NO_TTL_POLL: Duration = Duration::from_secs(1);

/// How long a waiter's place in the queue lasts unless it looks again
/// (every third of it while it waits): what a crashed waiter costs the
/// others at most, unless a release handed it the lock in that time (it
/// then keeps it for its lease, as a crashed holder would).
const QUEUE_LEASE: Duration = Duration::from_secs(5);

/// Which side of the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Read,
    Write,
}

impl Side {
    fn tag(self) -> &'static str {
        match self {
            Side::Read => "r",
            Side::Write => "w",
        }
    }

    fn other(self) -> Side {
        match self {
            Side::Read => Side::Write,
            Side::Write => Side::Read,
        }
    }

    fn hold_ops(self) -> &'static HoldOps {
        match self {
            Side::Read => &READ_HOLD,
            Side::Write => &WRITE_HOLD,
        }
    }
}

/// Holds of a read-write lock are kept as `"<side>|<owner id>"` so one owner
/// can hold both sides (a downgrade); Redis sees the bare owner id.
fn raw_owner(holder: &str) -> &str {
    holder.split_once('|').map_or(holder, |(_, o)| o)
}

fn renew_args(h: &Hold, side: Side) -> (Vec<Key>, Vec<Value>) {
    let key = &*h.key;
    (
        vec![Key::from(key), keys::sibling_key(key, Role::Readers)],
        vec![
            Value::String(raw_owner(&h.owner_str()).into()),
            Value::String(h.token.to_string().into()),
            Value::String(side.tag().into()),
        ],
    )
}

static READ_HOLD: HoldOps = HoldOps {
    renew: &RENEW,
    check: &CHECK,
    hold_args: |h| renew_args(h, Side::Read),
    release: |redis, publish, fence_ttl, hold, last| {
        Box::pin(release_side(
            redis,
            publish,
            fence_ttl,
            hold,
            Side::Read,
            last,
        ))
    },
    rebind: None,
    folds_release: false,
};

static WRITE_HOLD: HoldOps = HoldOps {
    renew: &RENEW,
    check: &CHECK,
    hold_args: |h| renew_args(h, Side::Write),
    release: |redis, publish, fence_ttl, hold, last| {
        Box::pin(release_side(
            redis,
            publish,
            fence_ttl,
            hold,
            Side::Write,
            last,
        ))
    },
    rebind: None,
    folds_release: false,
};

fn queue_lease_ms() -> i64 {
    i64::try_from(QUEUE_LEASE.as_millis()).unwrap_or(i64::MAX)
}

/// Releases one hold of `hold` on one side (`last`: the acquisition).
async fn release_side(
    redis: &dyn Link,
    publish: &'static str,
    fence_ttl_ms: i64,
    hold: &Hold,
    side: Side,
    last: bool,
) -> Result<Released> {
    let owner = hold.owner_str();
    let code = RwRelease {
        key: &hold.key,
        channel: &hold.channel,
        owner: raw_owner(&owner),
        side,
        token: Some(hold.token),
        last,
        exactly: true,
        fence_ttl_ms,
    }
    .run(redis, publish)
    .await?;
    Ok(Released::from_lock_release(code))
}

/// One run of `rw_lock_release.lua`.
struct RwRelease<'a> {
    /// The hold key; the readers key is its sibling.
    key: &'a str,
    channel: &'a Key,
    owner: &'a str,
    side: Side,
    token: Option<u64>,
    /// The owner's whole hold on that side, not one count.
    last: bool,
    /// `true`: release exactly `token`; `false`: leave the queue and undo
    /// any acquisition of the owner on that side except `token`.
    exactly: bool,
    /// The fencing counter's TTL, for a hand-off.
    fence_ttl_ms: i64,
}

impl RwRelease<'_> {
    /// The script's answer: 0 not held, 1 still held, 2 released, 4
    /// released and handed to queued waiters. Only a final release (or an
    /// undo) may be sent twice.
    async fn run(self, redis: &dyn Link, publish: &'static str) -> Result<i64> {
        RELEASE
            .run_with(
                redis,
                self.key,
                vec![
                    Key::from(self.key),
                    keys::sibling_key(self.key, Role::Readers),
                    keys::sibling_key(self.key, Role::Queue),
                    keys::sibling_key(self.key, Role::Fence),
                ],
                RwLockRelease {
                    owner: self.owner,
                    token: Token(self.token),
                    last: OneOrZero(self.last),
                    side: self.side.tag(),
                    publish,
                    channel: self.channel.clone(),
                    mode: if self.exactly { "=" } else { "!" },
                    fence_ttl_ms: self.fence_ttl_ms,
                }
                .into_values(),
                if self.last { 3 } else { 1 },
            )
            .await
    }
}

/// A distributed read-write lock: many readers or one writer.
///
/// Both sides are re-entrant per [owner](crate::Owner) (`"<client uuid>:<task id>"`), leased
/// and renewed like [`Lock`](crate::Lock). A writer may also take the read
/// side (a downgrade: release the write side afterwards and keep reading;
/// the readers waiting at the head of the queue then get in). A reader
/// asking for the write side gets [`Error::UpgradeNotSupported`] at once: two
/// readers doing that would wait for each other forever. Each reader's lease
/// is tracked on its own, so a crashed reader's share ends after its lease
/// even while other readers keep renewing theirs.
///
/// Across clients, a client that finds the lock busy waits in the lock's
/// queue in Redis, and a release that frees the lock (or turns it to read
/// mode) hands it to the oldest waiting writer, or to every reader queued
/// ahead of it: only those clients wake, already holding it, so a contended
/// acquisition costs a few commands however many clients wait. Writer
/// preference, as with tokio's `RwLock`: once a writer waits, new readers
/// wait behind it, so a steady stream of readers cannot starve writers. A
/// waiter refreshes its place every 5 s / 3; one that stops waiting leaves
/// the queue (a timed-out `try_lock` before it returns, a dropped future in
/// the background), and a crashed one's place lapses after 5 s (if the lock
/// was handed to it before that, it keeps it for its lease, as a crashed
/// holder would). Readers already in keep their hold until they release it.
/// Exempt, so they never wait for themselves: an owner that already reads
/// re-enters, and a writer takes the read side (a downgrade). As with
/// tokio's `RwLock`, a reader that waits for another owner's read (a
/// spawned child without [`Owner::current`](crate::Owner::current), a
/// second flow in its own [`Owner`](crate::Owner) scope, a
/// [`non_reentrant`](RwLock::non_reentrant) handle read twice) deadlocks
/// once a writer waits: hand the owner down, or read once. Within one client
/// tasks queue in FIFO order.
///
/// The safe set-up, as for [`Lock`](crate::Lock): a restart guard on the
/// client, and the write side's token handed to what is written (readers
/// share the lock, so their tokens fence against writers, not each other):
///
/// ```no_run
/// # async fn publish_prices(_token: u64) {}
/// # async fn demo() -> redisync::Result<()> {
/// use std::time::Duration;
///
/// let client = redisync::Client::builder("redis://127.0.0.1:6379")
///     .restart_guard(Duration::from_secs(60))
///     .connect()
///     .await?;
/// let prices = client.rw_lock("prices");
/// let outcome = redisync::run_locked(prices.write().lock(), async |guard| {
///     publish_prices(guard.fencing_token()).await;
/// })
/// .await?;
/// # let _ = outcome;
/// let reading = prices.read().lock().await?; // many readers at once
/// reading.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    inner: Arc<RwInner>,
}

struct RwInner {
    named: Named,
    readers: Key,
    queue: Key,
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.inner.named.name)
            .field("key", &self.inner.named.key)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A handle on the read-write lock `name` (no I/O). See [`RwLock`].
    pub fn rw_lock(&self, name: &str) -> RwLock {
        let named = Named::new(self.inner.clone(), Kind::Rw, name);
        RwLock {
            inner: Arc::new(RwInner {
                readers: named.role(Role::Readers),
                queue: named.role(Role::Queue),
                named,
            }),
        }
    }
}

impl RwLock {
    /// The lock's name as given to [`Client::rw_lock`].
    pub fn name(&self) -> &str {
        &self.inner.named.name
    }

    /// The same read-write lock through a handle without re-entry: every acquisition
    /// through it is an owner of its own, so a second acquisition by the
    /// same task or flow waits until the first is released (a writer taking
    /// the read side too: no downgrade), like tokio's
    /// `RwLock` (and like it, waits forever if the first guard is kept
    /// alive by the waiting flow itself). Holds taken through it are not the
    /// task's: `is_held_by_current_task` and `hold_count` do not count them.
    /// See [`Owner`](crate::Owner) for the re-entry rule of ordinary handles.
    #[must_use]
    pub fn non_reentrant(&self) -> RwLock {
        RwLock {
            inner: Arc::new(RwInner {
                named: self.inner.named.non_reentrant(),
                readers: self.inner.readers.clone(),
                queue: self.inner.queue.clone(),
            }),
        }
    }

    /// Whether acquisitions through this handle re-enter holds of the same
    /// owner (false for a [`non_reentrant`](RwLock::non_reentrant) handle).
    pub fn is_reentrant(&self) -> bool {
        self.inner.named.reentrant
    }

    /// The read side: shared with other readers.
    pub fn read(&self) -> ReadLock {
        ReadLock { rw: self.clone() }
    }

    /// The write side: exclusive.
    pub fn write(&self) -> WriteLock {
        WriteLock { rw: self.clone() }
    }

    /// What Redis holds of this read-write lock now, read in one script: the writer or
    /// the readers (each with its lease and token), the clients waiting in
    /// its queue (readers and writers), and the last fencing token.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty name; [`Error::WrongType`]
    /// when a key of the read-write lock holds something redisync did not write;
    /// [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe (read-only).
    pub async fn inspect(&self) -> Result<Inspection> {
        crate::inspect::inspect_handle(&self.inner.named, Self::WHAT).await
    }

    #[tracing::instrument(level = "debug", name = "redisync.lock.acquire", skip_all, fields(lock.key = %self.inner.named.key, lock.kind = side.tag()))]
    async fn acquire(
        &self,
        side: Side,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<RwLockGuard>> {
        let held = engine::acquire::acquire(self, side, deadline, lease).await?;
        Ok(held.map(|held| RwLockGuard { side, held }))
    }

    fn upgrade_refused(&self) -> Error {
        Error::UpgradeNotSupported {
            name: self.inner.named.name.to_string(),
        }
    }

    /// The mode a side's hold is recorded in.
    fn hold_mode(side: Side) -> HoldMode {
        match side {
            Side::Read => HoldMode::Read,
            Side::Write => HoldMode::Write,
        }
    }

    async fn force_unlock(&self) -> Result<bool> {
        let named = &self.inner.named;
        let keys = vec![
            named.hold.clone(),
            self.inner.readers.clone(),
            named.fence.clone(),
            self.inner.queue.clone(),
        ];
        named.force_unlock(&FORCE_UNLOCK, keys).await
    }
}

/// The read-write lock on the engine: each side re-entrant per owner
/// (holder `"<side>|<owner>"`), the local turn given up at the grant, a
/// downgrade past the local queue, a waiting client queued in Redis and
/// handed the lock by a release (one writer, or the readers at the head).
/// How soon a write attempt that found a read field of its owner which
/// this client no longer holds (a release in flight) asks again.
const READ_FIELD_LAPSE_POLL: Duration = Duration::from_millis(10);

impl Spec for RwLock {
    type Ask = Side;
    const WHAT: &'static str = "lock";
    const REENTRANT: bool = true;

    fn named(&self) -> &Named {
        &self.inner.named
    }
    fn holder(&self, owner: &Arc<str>, side: Side) -> Arc<str> {
        Arc::from(format!("{}|{owner}", side.tag()))
    }
    fn hold_ops(&self, side: Side) -> &'static HoldOps {
        side.hold_ops()
    }
    /// A queue entry lives its queue lease.
    fn linger(&self, lease: Duration) -> Duration {
        lease.max(QUEUE_LEASE)
    }

    /// This owner holding the other side decides before the local queue,
    /// whose head may wait for that very hold: a reader asking for the write
    /// side is refused at once (it would wait for itself); a writer asking
    /// for the read side (a downgrade) goes straight to Redis, which grants it.
    fn gate(&self, slot: &Slot, owner: &str, side: Side) -> Result<Gate> {
        let holds_other = slot
            .holds
            .holder(&format!("{}|{owner}", side.other().tag()))
            .is_some();
        match (side, holds_other) {
            (Side::Write, true) => Err(self.upgrade_refused()),
            (Side::Read, true) => Ok(Gate::Bypass),
            (_, false) => Ok(Gate::UntilGranted),
        }
    }

    fn bypassing_holder(&self, owner: &str, side: Side) -> Option<String> {
        Some(format!("{}|{owner}", side.other().tag()))
    }

    async fn attempt(&self, t: Try<'_, Side>) -> Result<Reply> {
        let client = self.named().client_inner();
        // Sent once: a repeat could queue a second entry.
        let args = RwLockAcquire {
            owner: raw_owner(t.holder),
            lease_ms: t.lease_ms,
            side: t.ask.tag(),
            keep: Token(t.keep),
            fence_ttl_ms: client.settings.fence_ttl_ms(),
            wait: t.wait_mode(),
            queue_lease_ms: queue_lease_ms(),
            number: Digits(t.number),
            next_number: Digits(t.next_number),
            publish: client.hub.publish_command(),
            channel: self.inner.named.channel.clone(),
            expire_gt: OneOrEmpty(client.hub.has_expire_gt()),
            restart_guard: self.named().restart_guard_args(),
        }
        .into_values();
        let reply: Vec<i64> = ACQUIRE
            .run(
                client.link(),
                &self.inner.named.key,
                vec![
                    self.inner.named.hold.clone(),
                    self.inner.readers.clone(),
                    self.inner.named.fence.clone(),
                    self.inner.queue.clone(),
                ],
                args,
            )
            .await?;
        match reply[..] {
            [1 | 2, token] => Ok(Reply::granted(token)),
            // Queued: look again well before the entry's deadline passes
            // (and the head, when the holders' leases end).
            [0, wait_ms, queued @ 1..=2] => Ok(Reply::Busy {
                until: Reply::bound(wait_ms, QUEUE_LEASE / 3).min(Instant::now() + QUEUE_LEASE / 3),
                queued: true,
                renumbered: queued == 2,
            }),
            [0, wait_ms, _] => Ok(Reply::busy_for(wait_ms, NO_TTL_POLL)),
            // A read field of this owner in Redis. Held here: an upgrade,
            // refused. Not held here: its release is on its way (a sibling
            // flow's, whose turn passed as it was sent) or a lost hold's
            // field lapses: busy, for a moment.
            [-3, _] => {
                let reader = format!("{}|{}", Side::Read.tag(), raw_owner(t.holder));
                let reads_here = client
                    .hub
                    .existing_slot(&self.inner.named.key)
                    .is_some_and(|slot| slot.holds.holder(&reader).is_some());
                if reads_here {
                    Err(self.upgrade_refused())
                } else {
                    Ok(Reply::busy_for(-1, READ_FIELD_LAPSE_POLL))
                }
            }
            _ => Err(Error::Script {
                name: "rw_lock_acquire.lua",
                message: format!("unexpected reply {reply:?}"),
            }),
        }
    }

    /// Undoes any acquisition of the holder's owner on the holder's side,
    /// except the one with token `keep`.
    async fn undo(&self, _: &Slot, holder: &str, keep: Option<u64>) -> Result<()> {
        let side = if holder.starts_with("w|") {
            Side::Write
        } else {
            Side::Read
        };
        let (named, client) = (self.named(), self.named().client_inner());
        RwRelease {
            key: &named.key,
            channel: &named.channel,
            owner: raw_owner(holder),
            side,
            token: keep,
            last: true,
            exactly: false,
            fence_ttl_ms: client.settings.fence_ttl_ms(),
        }
        .run(client.link(), client.hub.publish_command())
        .await
        .map(drop)
    }
}

macro_rules! side_handle {
    ($handle:ident, $side:expr, $what:literal) => {
        impl $handle {
            /// The lock's name.
            pub fn name(&self) -> &str {
                &self.rw.inner.named.name
            }

            #[doc = concat!("Waits until the ", $what, " side is acquired; the watchdog renews the lease until the guard is released.")]
            ///
            /// # Errors
            /// [`Error::InvalidArgument`] for an empty name, [`Error::UpgradeNotSupported`]
            /// for the write side while this owner holds only the read side,
            /// [`Error::WrongType`] when the key holds something else, [`Error::Redis`].
            ///
            /// # Cancel safety
            /// Cancel safe: a dropped future gives up its place in the local
            /// queue; a hold won in flight is released in the background.
            pub async fn lock(&self) -> Result<RwLockGuard> {
                self.rw.acquire($side, None, None).await?.ok_or_else(|| Error::InvalidArgument("wait ended without a deadline".into()))
            }

            #[doc = concat!("Waits until the ", $what, " side is acquired, with a fixed lease nobody renews.")]
            ///
            /// # Errors
            /// As `lock`, plus [`Error::InvalidArgument`] for a zero or absurd lease.
            ///
            /// # Cancel safety
            /// Cancel safe, as `lock`.
            pub async fn lock_with_lease(&self, lease: Duration) -> Result<RwLockGuard> {
                self.rw.acquire($side, None, Some(lease)).await?.ok_or_else(|| Error::InvalidArgument("wait ended without a deadline".into()))
            }

            /// Waits at most `wait` (zero: one attempt); `lease: None` means
            /// watchdog-renewed. `Ok(None)` when the wait ran out.
            ///
            /// # Errors
            /// As `lock_with_lease`.
            ///
            /// # Cancel safety
            /// Cancel safe, as `lock`.
            pub async fn try_lock(&self, wait: Duration, lease: Option<Duration>) -> Result<Option<RwLockGuard>> {
                self.rw.acquire($side, Instant::now().checked_add(wait), lease).await
            }

            #[doc = concat!("Whether the lock is held in ", $what, " mode by anybody: every hold of this side counts, a read held beside a write (a downgrade's first step) too.")]
            ///
            /// # Errors
            /// [`Error::WrongType`], [`Error::Redis`].
            ///
            /// # Cancel safety
            /// Cancel safe (read-only).
            pub async fn is_locked(&self) -> Result<bool> {
                let seen = self.rw.inspect().await?;
                Ok(seen.is_held_as(match $side {
                    Side::Read => HoldMode::Read,
                    Side::Write => HoldMode::Write,
                }))
            }

            #[doc = concat!("Whether the calling task holds the ", $what, " side.")]
            ///
            /// # Errors
            /// [`Error::WrongType`], [`Error::Redis`].
            ///
            /// # Cancel safety
            /// Cancel safe (read-only).
            pub async fn is_held_by_current_task(&self) -> Result<bool> {
                Ok(self.hold_count().await? > 0)
            }

            #[doc = concat!("How many ", $what, " holds the calling task has.")]
            ///
            /// # Errors
            /// [`Error::WrongType`], [`Error::Redis`].
            ///
            /// # Cancel safety
            /// Cancel safe (read-only).
            pub async fn hold_count(&self) -> Result<u32> {
                let owner = self.rw.named().client_inner().owner_id();
                let seen = self.rw.inspect().await?;
                Ok(seen.holds_of(&owner, RwLock::hold_mode($side)))
            }

            /// The lock's remaining lease (either side); `None` when free.
            ///
            /// # Errors
            /// [`Error::WrongType`], [`Error::Redis`].
            ///
            /// # Cancel safety
            /// Cancel safe (read-only).
            pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
                Ok(self.rw.inspect().await?.remaining_lease())
            }

            /// Deletes the whole read-write lock (every reader and the
            /// writer) and hands it to the oldest waiters. `Ok(true)` if it
            /// was locked.
            ///
            /// # Errors
            /// [`Error::WrongType`], [`Error::Redis`].
            ///
            /// # Cancel safety
            /// Cancel safe: one script, done or not done.
            pub async fn force_unlock(&self) -> Result<bool> {
                self.rw.force_unlock().await
            }
        }
    };
}

/// The read side of an [`RwLock`]: shared. Same methods as [`Lock`](crate::Lock).
#[derive(Debug, Clone)]
pub struct ReadLock {
    rw: RwLock,
}

/// The write side of an [`RwLock`]: exclusive. Same methods as [`Lock`](crate::Lock).
#[derive(Debug, Clone)]
pub struct WriteLock {
    rw: RwLock,
}

side_handle!(ReadLock, Side::Read, "read");
side_handle!(WriteLock, Side::Write, "write");

/// One hold of the read or the write side of an [`RwLock`].
///
/// Dropping it without [`unlock`](RwLockGuard::unlock) stops its renewal at
/// once and releases it in a background task (errors only logged).
#[must_use = "if unused the lock is released immediately"]
#[clippy::has_significant_drop]
pub struct RwLockGuard {
    side: Side,
    held: GuardCore,
}

impl std::fmt::Debug for RwLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLockGuard")
            .field("side", &self.side)
            .field("held", &self.held)
            .finish()
    }
}

guard_accessors!(RwLockGuard);

impl RwLockGuard {
    /// Whether this guard holds the write side (else the read side).
    pub fn is_write(&self) -> bool {
        self.side == Side::Write
    }

    /// Makes the remaining lease of this hold at least `lease` if this
    /// acquisition still holds it; a longer lease is kept (a lease is never
    /// cut).
    ///
    /// # Errors
    /// [`Error::NotHeld`] if it was lost; [`Error::InvalidArgument`];
    /// [`Error::Redis`]; [`Error::Shutdown`] after
    /// [`Client::shutdown`](crate::Client::shutdown).
    ///
    /// # Cancel safety
    /// Cancel safe: one script, done or not done.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        self.held.extend(lease).await
    }

    /// Releases this hold. The last write hold frees the lock (or turns it to
    /// read mode after a downgrade) and hands it to the oldest waiters.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if this acquisition no longer holds it (nothing
    /// written); [`Error::Redis`] (a final release is then retried in the
    /// background while the lease lasts); [`Error::Shutdown`] at once after
    /// [`Client::shutdown`](crate::Client::shutdown) (which released the hold).
    ///
    /// # Cancel safety
    /// Cancel safe: renewal stops at once; if the future is dropped before
    /// the final release is done, it is done in the background.
    pub async fn unlock(self) -> Result<()> {
        self.held.release().await
    }
}
