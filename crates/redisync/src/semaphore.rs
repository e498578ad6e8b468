//! A counting semaphore whose permits are leased like locks.

use std::sync::atomic::{AtomicU64, Ordering};
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
use crate::redis::args::{
    Digits, OneOrEmpty, ScriptArgs, SemaphoreAcquire, SemaphoreAddPermits, SemaphoreAvailable,
    SemaphorePermits, SemaphoreRelease,
};
use crate::redis::keys::{self, Kind, Role};
use crate::redis::link::Link;
use crate::redis::script::{lua_script, LuaScript};

lua_script!(SET_PERMITS, "semaphore_set_permits.lua");
lua_script!(RESET_PERMITS, "semaphore_reset_permits.lua");
lua_script!(ADD_PERMITS, "semaphore_add_permits.lua");
lua_script!(ACQUIRE, "semaphore_acquire.lua");
lua_script!(RELEASE, "semaphore_release.lua");
lua_script!(RENEW, "semaphore_renew.lua");
lua_script!(CHECK, "semaphore_check.lua");
lua_script!(AVAILABLE, "semaphore_available.lua");
lua_script!(FORCE_RELEASE, "semaphore_force_release.lua");

/// Poll bound when no held permit has a lease end to wait for.
const NO_LEASE_POLL: Duration = Duration::from_secs(1);

/// How long the semaphore's wait queue is kept after a waiter queued or
/// looked: 2 x max(lease, watchdog period) + 1 s. A live waiter looks again
/// within a watchdog period (or its lease's quarter), so its entry stays;
/// a crashed waiter's entry does not keep the queue for ever.
fn queue_keep_ms(lease_ms: i64, period: Duration) -> i64 {
    let period_ms = i64::try_from(period.as_millis()).unwrap_or(i64::MAX);
    lease_ms
        .max(period_ms)
        .saturating_mul(2)
        .saturating_add(1000)
}

/// Makes permit ids unique within the process (the owner id adds the client).
static NEXT_PERMIT: AtomicU64 = AtomicU64::new(1);

/// A counting semaphore whose permits are leased like locks: the watchdog
/// renews them while the [`SemaphorePermit`] lives, and a crashed holder's
/// permits come back when its lease (the client's watchdog timeout) ends.
/// [`acquire_with_lease`](Semaphore::acquire_with_lease) and
/// [`try_acquire_with_lease`](Semaphore::try_acquire_with_lease) take a
/// fixed lease nobody renews instead.
///
/// Declare the total on the handle with
/// [`with_permits`](Semaphore::with_permits): an acquisition that finds the
/// semaphore not set up (never, or gone in a Redis restart without
/// persistence) sets it up in the same script, so no set-up call can be
/// missed or lost. [`set_permits`](Semaphore::set_permits) and
/// [`add_permits`](Semaphore::add_permits) change it; acquiring through a
/// handle without a declared total from a semaphore that has none set is
/// [`Error::NotInitialized`].
///
/// ```no_run
/// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
/// let exports = client.semaphore("exports").with_permits(3);
/// let permit = exports.acquire(1).await?;
/// // ... at most 3 permits held across all clients, as long as each
/// // holder stops when its permit's loss signal fires ...
/// permit.release().await?;
/// # Ok(()) }
/// ```
///
/// What fences a permit's writes: its token tells acquisitions apart, but
/// with several permits several valid holders have different tokens, so a
/// resource cannot reject "older" tokens as it does for a lock. A permit
/// limit holds only among holders that honour their loss signal
/// ([`SemaphorePermit::lost_signal`]); guard each write with the permit's
/// validity, or fence per permit slot. Work under a lock and a permit
/// together: [`run_locked`](crate::run_locked) over the pair ("Several
/// guards" there) stops when either is lost. Waiting never polls:
/// tasks of one client queue in FIFO order and only the first of them asks
/// Redis (not at all while the last grant left no permit and nothing was
/// released since); a client that finds too few permits joins the
/// semaphore's wait queue in Redis, and a release hands the freed permits
/// to the oldest queued clients whose asks fit, telling only them (FIFO
/// among waiting clients: a large ask is not passed over; the
/// repository's docs/fairness.md). Every acquisition gets a token,
/// strictly increasing per semaphore.
#[derive(Clone)]
pub struct Semaphore {
    inner: Arc<SemaphoreInner>,
}

struct SemaphoreInner {
    named: Named,
    leases: Key,
    /// The permit total this handle declares (see [`Semaphore::with_permits`]).
    declared: Option<u32>,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.inner.named.name)
            .field("key", &self.inner.named.key)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A handle on the counting semaphore `name` (no I/O). See [`Semaphore`].
    pub fn semaphore(&self, name: &str) -> Semaphore {
        Semaphore::new(self.clone(), name)
    }
}

impl Semaphore {
    fn new(client: Client, name: &str) -> Semaphore {
        let named = Named::new(client.inner, Kind::Semaphore, name);
        Semaphore {
            inner: Arc::new(SemaphoreInner {
                leases: named.role(Role::Leases),
                declared: None,
                named,
            }),
        }
    }

    /// The same semaphore, declaring its permit total: an acquisition
    /// through this handle that finds the semaphore not set up (never, or
    /// lost when Redis restarted without persistence) sets it up with
    /// `total` permits in the same script, so workers need no set-up call
    /// and a restarted semaphore comes back with its size at its next
    /// acquisition through such a handle. A
    /// semaphore already set up keeps its total (change it with
    /// [`set_permits`](Semaphore::set_permits)).
    ///
    /// ```no_run
    /// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
    /// let payments = client.semaphore("billing:payments").with_permits(4);
    /// let permit = payments.acquire(1).await?; // no try_set_permits needed
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// A total of zero makes every acquisition an
    /// [`Error::InvalidArgument`].
    #[must_use]
    pub fn with_permits(&self, total: u32) -> Semaphore {
        let named = &self.inner.named;
        let mut declared = Semaphore::new(Client::of(named.client.clone()), &named.name);
        if let Some(inner) = Arc::get_mut(&mut declared.inner) {
            inner.declared = Some(total);
        }
        declared
    }

    /// The semaphore's name as given to [`Client::semaphore`].
    pub fn name(&self) -> &str {
        &self.inner.named.name
    }

    fn not_initialized(&self) -> Error {
        Error::NotInitialized {
            name: self.inner.named.name.to_string(),
        }
    }

    /// Sets the number of permits if none is set yet. `Ok(false)` when the
    /// semaphore already had permits (they are left as they are).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for zero permits or an empty name,
    /// [`Error::WrongType`] when the key holds something else, [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: one script, done or not done.
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool> {
        Ok(self.run_set_permits(&SET_PERMITS, permits).await? == 1)
    }

    /// Runs a script that sets the total (`semaphore_set_permits.lua`, only
    /// a first total; `semaphore_reset_permits.lua`, any time) to
    /// `permits`, after the checks both share.
    async fn run_set_permits(&self, script: &LuaScript, permits: u32) -> Result<i64> {
        self.named().check_usable(Self::WHAT)?;
        if permits == 0 {
            return Err(Error::InvalidArgument(
                "a semaphore needs at least one permit".into(),
            ));
        }
        let client = self.named().client_inner();
        script
            .run_idempotent(
                client.link(),
                &self.inner.named.key,
                vec![self.inner.named.hold.clone()],
                SemaphorePermits {
                    permits: i64::from(permits),
                    publish: client.hub.publish_command(),
                    channel: self.inner.named.channel.clone(),
                }
                .into_values(),
            )
            .await
    }

    /// Sets the number of permits whether or not some were set (Redisson's
    /// `setPermits`; [`try_set_permits`](Semaphore::try_set_permits) only
    /// sets a first total). Raising the total wakes waiters. Lowering it
    /// below what is in use is allowed: holders keep their permits and new
    /// acquisitions wait until enough are given back; a waiter asking for
    /// more than the new total fails with [`Error::InvalidArgument`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for zero permits or an empty name,
    /// [`Error::WrongType`] when the key holds something else (nothing is
    /// written), [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: one script, done or not done.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
    /// let sem = client.semaphore("exports");
    /// sem.set_permits(5).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_permits(&self, permits: u32) -> Result<()> {
        self.run_set_permits(&RESET_PERMITS, permits)
            .await
            .map(drop)
    }

    /// Adds `delta` permits to the total, or removes them for a negative
    /// `delta` (Redisson's `addPermits` and `reducePermits` in one), and
    /// returns the new total. Adding wakes waiters. Removing below what is
    /// in use is allowed: holders keep their permits and new acquisitions
    /// wait until enough are given back; a waiter asking for more than the
    /// new total fails with [`Error::InvalidArgument`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero `delta`, an empty name, or a
    /// new total below 1 or above `u32::MAX` (nothing is written);
    /// [`Error::NotInitialized`] when no total is set;
    /// [`Error::WrongType`] when the key holds something else (nothing is
    /// written); [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: one script, done or not done. Not idempotent: it is
    /// sent once, so a connection lost in flight leaves it unknown whether
    /// the total changed.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
    /// let sem = client.semaphore("exports");
    /// let total = sem.add_permits(2).await?;
    /// let total_after = sem.add_permits(-1).await?;
    /// assert_eq!(total_after + 1, total);
    /// # Ok(()) }
    /// ```
    pub async fn add_permits(&self, delta: i64) -> Result<u32> {
        self.named().check_usable(Self::WHAT)?;
        if delta == 0 {
            return Err(Error::InvalidArgument(
                "add or remove at least one permit".into(),
            ));
        }
        let client = self.named().client_inner();
        let reply: Vec<i64> = ADD_PERMITS
            .run(
                client.link(),
                &self.inner.named.key,
                vec![self.inner.named.hold.clone()],
                SemaphoreAddPermits {
                    delta,
                    max_total: i64::from(u32::MAX),
                    publish: client.hub.publish_command(),
                    channel: self.inner.named.channel.clone(),
                }
                .into_values(),
            )
            .await?;
        match reply[..] {
            [1, total] => u32::try_from(total).map_err(|_| Error::Script {
                name: "semaphore_add_permits.lua",
                message: format!("total {total} out of range"),
            }),
            [-1, _] => Err(self.not_initialized()),
            [-2, total] => Err(Error::InvalidArgument(format!(
                "semaphore {:?} has {total} permits; adding {delta} would leave fewer than 1 or more than {}",
                self.inner.named.name,
                u32::MAX
            ))),
            _ => Err(Error::Script {
                name: "semaphore_add_permits.lua",
                message: format!("unexpected reply {reply:?}"),
            }),
        }
    }

    /// Waits until `permits` permits are acquired.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for zero permits or more than the semaphore
    /// has, [`Error::NotInitialized`] when no total is set (see [`Semaphore::with_permits`]),
    /// [`Error::WrongType`], [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future gives up its place in the local queue;
    /// permits won in flight are given back in the background.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
    /// let sem = client.semaphore("exports").with_permits(3);
    /// let permit = sem.acquire(1).await?;
    /// // ... at most 3 holders across all clients ...
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, permits: u32) -> Result<SemaphorePermit> {
        self.acquire_until(permits, None, None)
            .await?
            .ok_or_else(|| self.unreachable_wait())
    }

    /// The error of a wait without a deadline that ended (never happens).
    fn unreachable_wait(&self) -> Error {
        Error::InvalidArgument(format!(
            "wait for semaphore {:?} ended without a deadline",
            self.inner.named.name
        ))
    }

    /// Waits at most `wait` for `permits` permits (zero: one attempt).
    /// `Ok(None)` when the wait ran out.
    ///
    /// # Errors
    /// As [`Semaphore::acquire`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Semaphore::acquire`].
    pub async fn try_acquire(
        &self,
        permits: u32,
        wait: Duration,
    ) -> Result<Option<SemaphorePermit>> {
        self.acquire_until(permits, Instant::now().checked_add(wait), None)
            .await
    }

    /// Waits until `permits` permits are acquired, with a fixed lease nobody
    /// renews (Redisson's `RPermitExpirableSemaphore`): the permits come back
    /// after `lease` even if the [`SemaphorePermit`] is still alive (it then
    /// reports [`lost`](SemaphorePermit::lost)), and a crashed holder's
    /// permits come back after it.
    ///
    /// # Errors
    /// As [`Semaphore::acquire`], plus [`Error::InvalidArgument`] for a zero
    /// or absurd (over a year) lease.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Semaphore::acquire`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
    /// use std::time::Duration;
    /// let sem = client.semaphore("exports");
    /// let permit = sem.acquire_with_lease(1, Duration::from_secs(10)).await?;
    /// // ... done within 10 s, or the permit is given back anyway ...
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_with_lease(
        &self,
        permits: u32,
        lease: Duration,
    ) -> Result<SemaphorePermit> {
        self.acquire_until(permits, None, Some(lease))
            .await?
            .ok_or_else(|| self.unreachable_wait())
    }

    /// Waits at most `wait` (zero: one attempt) for `permits` permits with a
    /// fixed lease nobody renews, as [`Semaphore::acquire_with_lease`].
    /// `Ok(None)` when the wait ran out.
    ///
    /// # Errors
    /// As [`Semaphore::acquire_with_lease`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Semaphore::acquire`].
    pub async fn try_acquire_with_lease(
        &self,
        permits: u32,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<SemaphorePermit>> {
        self.acquire_until(permits, Instant::now().checked_add(wait), Some(lease))
            .await
    }

    #[tracing::instrument(level = "debug", name = "redisync.semaphore.acquire", skip_all, fields(lock.key = %self.inner.named.key, permits))]
    async fn acquire_until(
        &self,
        permits: u32,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<SemaphorePermit>> {
        let held = engine::acquire::acquire(self, permits, deadline, lease).await?;
        Ok(held.map(|held| SemaphorePermit { held, permits }))
    }

    /// Permits free now (expired leases of crashed holders are reclaimed
    /// first). Through a handle that declares its total
    /// ([`with_permits`](Semaphore::with_permits)), a semaphore not set up
    /// (never, or forgotten in a restart) has that total free: what its
    /// next acquisition finds (reading sets nothing up).
    ///
    /// # Errors
    /// [`Error::NotInitialized`] when no total is set and the handle
    /// declares none, [`Error::WrongType`], [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: one script, done or not done.
    pub async fn available_permits(&self) -> Result<u32> {
        self.named().check_usable(Self::WHAT)?;
        let client = self.named().client_inner();
        let reply: Vec<i64> = AVAILABLE
            .run_idempotent(
                client.link(),
                &self.inner.named.key,
                vec![self.inner.named.hold.clone(), self.inner.leases.clone()],
                SemaphoreAvailable {
                    publish: client.hub.publish_command(),
                    channel: self.inner.named.channel.clone(),
                }
                .into_values(),
            )
            .await?;
        match reply[..] {
            // Below zero while the total is lower than what is in use.
            [1, free] => Ok(u32::try_from(free.max(0)).unwrap_or(u32::MAX)),
            _ => self.inner.declared.ok_or_else(|| self.not_initialized()),
        }
    }

    /// What Redis holds of this semaphore now, read in one script: its permits
    /// (total and in use), every acquisition holding some (owner, permits,
    /// lease left; an ended lease is reclaimed by the next acquisition) and
    /// the last fencing token. Not set up: [`Inspection::exists`](crate::inspect::Inspection::exists) is false.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty name; [`Error::WrongType`]
    /// when a key of the semaphore holds something redisync did not write;
    /// [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe (read-only).
    pub async fn inspect(&self) -> Result<crate::inspect::Inspection> {
        crate::inspect::inspect_handle(self.named(), Self::WHAT).await
    }

    /// Gives back every permit whoever holds it (the set-up is kept) and
    /// wakes the waiters: for an operator freeing permits held by a process
    /// that hangs. Permits of this client report
    /// [`lost`](SemaphorePermit::lost) at once; those of other clients when
    /// they next renew or their lease ends. `Ok(true)` if any was held.
    ///
    /// # Errors
    /// [`Error::WrongType`] when a key of the semaphore holds something else
    /// (nothing is touched); [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: one script, done or not done.
    pub async fn force_release(&self) -> Result<bool> {
        let named = self.named();
        named
            .force_unlock(
                &FORCE_RELEASE,
                vec![named.hold.clone(), self.inner.leases.clone()],
            )
            .await
    }

    /// Gives back the permits of a [detached](SemaphorePermit::detach)
    /// acquisition, from any client (Redisson's
    /// `RPermitExpirableSemaphore.release(id)`), and wakes waiters. A
    /// guard of this client that holds them says lost at once.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if the permits are not held under `id` any more
    /// (released already, or their lease ended and they were reclaimed);
    /// [`Error::Redis`] (the outcome is then unknown: call again, a second
    /// release answers `NotHeld`); [`Error::Shutdown`].
    ///
    /// # Cancel safety
    /// Cancel safe: one script, done or not done (the outcome of a dropped
    /// call is unknown, as above).
    pub async fn release_permit(&self, id: &PermitId) -> Result<()> {
        let named = self.named();
        named.check_usable("semaphore")?;
        let client = named.client_inner();
        let slot = client.hub.existing_slot(&named.key);
        if let Some(hold) = slot.as_ref().and_then(|slot| slot.holds.holder(&id.id)) {
            hold.mark_lost("released by its permit id");
        }
        let (freed, _, _) = give_back(
            client.link(),
            client.hub.publish_command(),
            &named.key,
            &named.channel,
            &id.id,
            false,
            Some(named.client.id),
        )
        .await?;
        if let Some(slot) = slot {
            // This client's waiters are woken by the client itself (the
            // script publishes for the others).
            slot.wake();
        }
        if freed > 0 {
            Ok(())
        } else {
            Err(self.permit_not_held())
        }
    }

    /// Makes the remaining lease of a [detached](SemaphorePermit::detach)
    /// acquisition at least `lease`, from any client (Redisson's
    /// `updateLeaseTime`; a lease is never cut). Keep calling it well
    /// before the lease ends to keep the permits, as the watchdog does for
    /// a guard; `Ok` means they are held until at least `lease` after the
    /// call was sent.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if the permits are not held under `id` any more
    /// (an extension never brings them back); [`Error::InvalidArgument`]
    /// for a zero or absurd lease, or one above the restart guard's bound;
    /// [`Error::ReplicaSync`] with replica sync on and too few replicas;
    /// [`Error::Redis`]; [`Error::Shutdown`].
    ///
    /// # Cancel safety
    /// Cancel safe: one script, done or not done.
    pub async fn extend_permit(&self, id: &PermitId, lease: Duration) -> Result<()> {
        let named = self.named();
        let client = named.client_inner();
        let lease_ms = engine::guard_core::extension_ms(client, lease)?;
        named.check_usable("semaphore")?;
        let keys = vec![self.inner.leases.clone()];
        let args = vec![Value::String(id.id.as_ref().into())];
        let renewed = engine::guard_core::extend_in_redis(
            client,
            &named.name,
            &named.key,
            &RENEW,
            keys,
            args,
            lease_ms,
        )
        .await?;
        if renewed {
            Ok(())
        } else {
            Err(self.permit_not_held())
        }
    }

    fn permit_not_held(&self) -> Error {
        Error::NotHeld {
            name: self.inner.named.name.to_string(),
        }
    }
}

/// The address of a semaphore acquisition that left its guard
/// ([`SemaphorePermit::detach`]): pass it on (its text form, `Display` and
/// `FromStr`) and any client can [release](Semaphore::release_permit) or
/// [extend](Semaphore::extend_permit) the permits by it, as Redisson's
/// `RPermitExpirableSemaphore` does with its permit ids.
///
/// The rules of a guard hold by id: the permits are held until their lease
/// ends (nobody renews them unless a holder calls `extend_permit`), then
/// reclaimed, and an id whose permits were reclaimed or released answers
/// [`Error::NotHeld`] for ever. The id carries the acquisition's
/// [fencing token](PermitId::fencing_token). Whoever holds the id holds
/// the permits: a copy given to two workers is two workers on the same
/// permits.
///
/// ```no_run
/// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
/// use std::time::Duration;
/// let jobs = client.semaphore("jobs").with_permits(8);
/// let permit = jobs.acquire_with_lease(1, Duration::from_secs(60)).await?;
/// let id = permit.detach().to_string(); // e.g. stored with the job
/// // ... later, in any process:
/// let id: redisync::PermitId = id.parse()?;
/// jobs.extend_permit(&id, Duration::from_secs(60)).await?;
/// jobs.release_permit(&id).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PermitId {
    /// The id the permits are held under in Redis.
    id: Arc<str>,
    token: u64,
}

impl PermitId {
    /// The fencing token of the acquisition (see
    /// [`Guard::fencing_token`](crate::Guard::fencing_token)).
    pub fn fencing_token(&self) -> u64 {
        self.token
    }

    /// How many permits the acquisition holds.
    pub fn permits(&self) -> u32 {
        permits_in(&self.id).unwrap_or(0)
    }
}

/// The permit count a permit id ends with (`#<n>`, see
/// [`Spec::holder`]), if it is one.
fn permits_in(id: &str) -> Option<u32> {
    let (_, digits) = id.rsplit_once('#')?;
    let n: u32 = digits.parse().ok()?;
    // Canonical digits only: Lua reads the same number from them.
    (n > 0 && n.to_string() == digits).then_some(n)
}

impl std::fmt::Display for PermitId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.token, self.id)
    }
}

impl std::fmt::Debug for PermitId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PermitId({self})")
    }
}

impl std::str::FromStr for PermitId {
    type Err = Error;

    /// Reads the text form `Display` writes (`<token>/<id>`).
    fn from_str(s: &str) -> Result<PermitId> {
        let bad = || Error::InvalidArgument(format!("{s:?} is not a permit id"));
        let (token, id) = s.split_once('/').ok_or_else(bad)?;
        // Digits only, as `Display` writes them (no sign).
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let token: u64 = token.parse().map_err(|_| bad())?;
        // "<client uuid>:<owner>:<n>#<permits>" (see `Spec::holder`), the
        // uuid as a client writes it (lower case, hyphenated).
        let client_ok = id
            .get(..36)
            .is_some_and(|u| uuid::Uuid::parse_str(u).is_ok_and(|parsed| parsed.to_string() == u))
            && id.as_bytes().get(36) == Some(&b':');
        if !client_ok || permits_in(id).is_none() {
            return Err(bad());
        }
        Ok(PermitId {
            id: Arc::from(id),
            token,
        })
    }
}

/// The semaphore on the engine: a fresh permit id per acquisition (no
/// re-entry, nothing to order), the local turn given up at the grant; a
/// client whose attempt finds too few permits queues in Redis, and a
/// release hands freed permits to the oldest queued clients
/// (the engine's hand-off).
impl Spec for Semaphore {
    type Ask = u32;
    const WHAT: &'static str = "semaphore";
    const REENTRANT: bool = false;

    fn named(&self) -> &Named {
        &self.inner.named
    }
    fn check(&self, permits: u32) -> Result<()> {
        if permits == 0 {
            return Err(Error::InvalidArgument("acquire at least one permit".into()));
        }
        if self.inner.declared == Some(0) {
            return Err(Error::InvalidArgument(format!(
                "semaphore {:?} is declared with 0 permits (with_permits(0)): declare at least one",
                self.inner.named.name
            )));
        }
        Ok(())
    }
    fn holder(&self, owner: &Arc<str>, permits: u32) -> Arc<str> {
        // The id says how many permits it holds: the lease zset alone lets a
        // crashed holder's permits be reclaimed.
        Arc::from(format!(
            "{owner}:{}#{permits}",
            NEXT_PERMIT.fetch_add(1, Ordering::Relaxed)
        ))
    }
    fn hold_ops(&self, _: u32) -> &'static HoldOps {
        &SEMAPHORE_HOLD
    }
    fn gate(&self, _: &Slot, _: &str, _: u32) -> Result<Gate> {
        Ok(Gate::UntilGranted)
    }

    /// Sent once: a re-send would count the permits twice.
    async fn attempt(&self, t: Try<'_, u32>) -> Result<Reply> {
        let client = self.named().client_inner();
        let named = self.named();
        let permits = t.ask;
        let args = SemaphoreAcquire {
            permit_id: t.holder,
            lease_ms: t.lease_ms,
            declared: self.inner.declared.map(i64::from),
            wait: t.wait_mode(),
            number: Digits(t.number),
            next_number: Digits(t.next_number),
            publish: client.hub.publish_command(),
            channel: named.channel.clone(),
            queue_keep_ms: queue_keep_ms(t.lease_ms, client.settings.watchdog_timeout),
            restart_guard: self.named().restart_guard_args(),
        }
        .into_values();
        let reply: Vec<i64> = ACQUIRE
            .run(
                client.link(),
                &named.key,
                vec![
                    named.hold.clone(),
                    self.inner.leases.clone(),
                    named.role(Role::Queue),
                ],
                args,
            )
            .await?;
        match reply[..] {
            [1, token, free, lease_ends_ms] => Ok(Reply::Granted {
                token: u64::try_from(token).unwrap_or(0),
                exhausted: (free <= 0).then(|| Reply::bound(lease_ends_ms, NO_LEASE_POLL)),
            }),
            [0, wait_ms, queued] => Ok(Reply::Busy {
                until: Reply::bound(wait_ms, NO_LEASE_POLL),
                queued: queued > 0,
                renumbered: queued == 2,
            }),
            [-1, _] => Err(self.not_initialized()),
            [-2, total] => Err(Error::InvalidArgument(format!(
                "{permits} permits asked from semaphore {:?}, which has {total}",
                self.inner.named.name
            ))),
            _ => Err(Error::Script {
                name: "semaphore_acquire.lua",
                message: format!("unexpected reply {reply:?}"),
            }),
        }
    }

    /// Gives back whatever the permit id `holder` holds and takes its queue
    /// entry out; local waiters need not wait for our own message.
    async fn undo(&self, slot: &Slot, holder: &str, _: Option<u64>) -> Result<()> {
        let client = self.named().client_inner();
        let named = self.named();
        give_back(
            client.link(),
            client.hub.publish_command(),
            &named.key,
            &named.channel,
            holder,
            true,
            None,
        )
        .await?;
        slot.wake();
        Ok(())
    }
}

/// Semaphore acquisitions: renewed by `semaphore_renew.lua` with the lease
/// zset and the permit id; a release gives back all permits of the id.
static SEMAPHORE_HOLD: HoldOps = HoldOps {
    renew: &RENEW,
    check: &CHECK,
    hold_args: |h| {
        (
            vec![keys::sibling_key(&h.key, Role::Leases)],
            vec![h.owner()],
        )
    },
    release: |redis, publish, _, hold, _| Box::pin(release_permit(redis, publish, hold)),
    rebind: None,
    folds_release: false,
};

/// Gives back the permits of `hold`.
async fn release_permit(redis: &dyn Link, publish: &'static str, hold: &Hold) -> Result<Released> {
    let (freed, free, to_others) = give_back(
        redis,
        publish,
        &hold.key,
        &hold.channel,
        &hold.owner_str(),
        false,
        None,
    )
    .await?;
    Ok(Released {
        // All handed on within this client: its waiters need no wake-up (the
        // one handed the permits wakes them in turn). Handed to another
        // client, they join the queue behind it.
        handed: freed > 0 && free == 0 && to_others == 0,
        ..Released::from_code(freed)
    })
}

/// `semaphore_release.lua` for permit id `id` of the semaphore whose hold
/// key is `key` (`leave`: also take the id's queue entry out): the permits
/// given back (0: it held none), the permits free after it, and 1 if some
/// went to a waiter of another client. `releaser`: the releasing client,
/// when it is not the one the id names (a release by [`PermitId`]).
async fn give_back(
    redis: &dyn Link,
    publish: &'static str,
    key: &str,
    channel: &Key,
    id: &str,
    leave: bool,
    releaser: Option<uuid::Uuid>,
) -> Result<(i64, i64, i64)> {
    let mut keys = vec![
        Key::from(key),
        keys::sibling_key(key, Role::Leases),
        keys::sibling_key(key, Role::Queue),
    ];
    let args = SemaphoreRelease {
        permit_id: id,
        publish,
        channel: channel.clone(),
        leave: OneOrEmpty(leave),
        releaser: releaser.map(|u| u.to_string()),
    }
    .into_values();
    match RELEASE
        .run_unless_refused(redis, key, keys.clone(), args.clone(), 3)
        .await
    {
        // While the slot migrates, a cluster refuses a script over keys the
        // source may not have (the queue, mostly missing): give back
        // without it, waking every waiter instead of handing off. Not for
        // a waiter leaving the queue: the refusal is returned, and its undo
        // tries again while its lease lasts.
        Err(e) if e.is_refused() && !leave => {
            keys.pop();
            RELEASE.run_idempotent(redis, key, keys, args).await
        }
        other => other,
    }
}

/// Permits of a [`Semaphore`]. Give them back with
/// [`release`](SemaphorePermit::release).
///
/// Dropping a permit without `release` stops its lease renewal at once and
/// gives the permits back in a background task on the current tokio runtime
/// (errors are only logged); outside a runtime the lease expiry returns them.
#[must_use = "if unused the permits are released immediately"]
#[clippy::has_significant_drop]
pub struct SemaphorePermit {
    held: GuardCore,
    permits: u32,
}

impl std::fmt::Debug for SemaphorePermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemaphorePermit")
            .field("permits", &self.permits)
            .field("held", &self.held)
            .finish()
    }
}

guard_accessors!(SemaphorePermit);

impl SemaphorePermit {
    /// How many permits this acquisition holds.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Makes the remaining lease of these permits at least `lease` if this
    /// acquisition still holds them (a lease is never cut).
    ///
    /// # Errors
    /// [`Error::NotHeld`] if they were lost; [`Error::InvalidArgument`] for
    /// a zero or absurd lease; [`Error::Redis`]; [`Error::Shutdown`].
    ///
    /// # Cancel safety
    /// Cancel safe: one script, done or not done.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        self.held.extend(lease).await
    }

    /// Takes the permits out of this guard and this client, without giving
    /// them back: their address, to pass on. The watchdog stops renewing
    /// them and nothing releases them on a drop or at
    /// [`Client::shutdown`](crate::Client::shutdown); they are held until
    /// their lease ends (a watchdog lease ends within the client's
    /// watchdog timeout) unless some client
    /// [extends](Semaphore::extend_permit) or
    /// [releases](Semaphore::release_permit) them by the id. Acquire with
    /// [`acquire_with_lease`](Semaphore::acquire_with_lease) for a lease
    /// of your choice.
    ///
    /// This guard lets the permits go as a release does: a
    /// [`LostSignal`](crate::LostSignal) taken from it fires, and this
    /// client reports nothing more about them.
    pub fn detach(self) -> PermitId {
        let id = PermitId {
            id: self.held.hold().owner_str(),
            token: self.held.hold().token,
        };
        // Semaphore holds are never shared (no re-entry): this guard is
        // its hold's last, so it leaves without any release.
        self.held.forget();
        id
    }

    /// Gives the permits back and wakes waiters.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if the permits were lost already (their lease ended
    /// and they were reclaimed); [`Error::Redis`] (the release is then
    /// retried in the background while the lease lasts); [`Error::Shutdown`]
    /// at once after [`Client::shutdown`](crate::Client::shutdown) (which
    /// gave them back).
    ///
    /// # Cancel safety
    /// Cancel safe: renewal stops at once; if the future is dropped before
    /// the release is done, it is done in the background.
    pub async fn release(self) -> Result<()> {
        self.held.release().await
    }
}
