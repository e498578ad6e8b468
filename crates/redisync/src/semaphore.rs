//! A counting semaphore whose permits are leased like locks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::types::{Key, Value};
use tokio::time::Instant;

use crate::client::{Client, ClientInner};
use crate::engine::held::{guard_accessors, retry_until_deadline, Held};
use crate::error::{Error, Result};
use crate::hold::{Hold, HoldOps};
use crate::hub::SlotRef;
use crate::keys::{self, Kind, Role};
use crate::replica;
use crate::script::checked_ms;
use crate::script::lua_script;

lua_script!(SET_PERMITS, "semaphore_set_permits.lua");
lua_script!(ACQUIRE, "semaphore_acquire.lua");
lua_script!(RELEASE, "semaphore_release.lua");
lua_script!(RENEW, "semaphore_renew.lua");
lua_script!(AVAILABLE, "semaphore_available.lua");

/// Poll bound when no held permit has a lease end to wait for.
const NO_LEASE_POLL: Duration = Duration::from_secs(1);

/// Makes permit ids unique within the process (the owner id adds the client).
static NEXT_PERMIT: AtomicU64 = AtomicU64::new(1);

/// A counting semaphore whose permits are leased like locks: the watchdog
/// renews them while the [`SemaphorePermit`] lives, and a crashed holder's
/// permits come back when its lease (the client's watchdog timeout) ends.
///
/// Permits are set once with [`try_set_permits`](Semaphore::try_set_permits);
/// acquiring from a semaphore that has none set is
/// [`Error::NotInitialized`]. Waiting never polls: a release publishes on the
/// semaphore's channel; tasks of one client queue in FIFO order and only the
/// first of them asks Redis, so each release lets in as many local waiters as
/// permits became free, one after the other. Every acquisition gets a
/// fencing token, strictly increasing per semaphore.
#[derive(Clone)]
pub struct Semaphore {
    inner: Arc<SemaphoreInner>,
}

struct SemaphoreInner {
    client: Client,
    name: Arc<str>,
    key: Arc<str>,
    hash: Key,
    leases: Key,
    fence: Key,
    channel: Key,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.inner.name)
            .field("key", &self.inner.key)
            .finish_non_exhaustive()
    }
}

enum Acquired {
    Token(u64),
    Busy { wait_ms: i64 },
}

impl Client {
    /// A handle on the counting semaphore `name` (no I/O). See [`Semaphore`].
    pub fn semaphore(&self, name: &str) -> Semaphore {
        Semaphore::new(self.clone(), name)
    }
}

impl Semaphore {
    fn new(client: Client, name: &str) -> Semaphore {
        let key = keys::key(Kind::Semaphore, Role::Hold, name);
        let role = |role| Key::from(keys::key(Kind::Semaphore, role, name));
        Semaphore {
            inner: Arc::new(SemaphoreInner {
                client,
                name: Arc::from(name),
                hash: Key::from(key.as_str()),
                leases: role(Role::Leases),
                fence: role(Role::Fence),
                channel: role(Role::Channel),
                key: Arc::from(key),
            }),
        }
    }

    /// The semaphore's name as given to [`Client::semaphore`].
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    fn client(&self) -> &ClientInner {
        &self.inner.client.inner
    }

    fn check_usable(&self) -> Result<()> {
        self.client().check_usable(&self.inner.name, "semaphore")
    }

    fn not_initialized(&self) -> Error {
        Error::NotInitialized {
            name: self.inner.name.to_string(),
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
        self.check_usable()?;
        if permits == 0 {
            return Err(Error::InvalidArgument(
                "a semaphore needs at least one permit".into(),
            ));
        }
        let client = self.client();
        let set: i64 = SET_PERMITS
            .run_idempotent(
                &client.redis,
                &self.inner.key,
                vec![self.inner.hash.clone()],
                vec![
                    Value::Integer(i64::from(permits)),
                    Value::String(client.hub.publish_command().into()),
                    Value::from(self.inner.channel.clone()),
                ],
            )
            .await?;
        Ok(set == 1)
    }

    /// Waits until `permits` permits are acquired.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for zero permits or more than the semaphore
    /// has, [`Error::NotInitialized`] before `try_set_permits`,
    /// [`Error::WrongType`], [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future gives up its place in the local queue;
    /// permits won in flight are given back in the background.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
    /// let sem = client.semaphore("exports");
    /// sem.try_set_permits(3).await?;
    /// let permit = sem.acquire(1).await?;
    /// // ... at most 3 holders across all clients ...
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, permits: u32) -> Result<SemaphorePermit> {
        self.acquire_until(permits, None).await?.ok_or_else(|| {
            Error::InvalidArgument(format!(
                "wait for semaphore {:?} ended without a deadline",
                self.inner.name
            ))
        })
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
        self.acquire_until(permits, Instant::now().checked_add(wait))
            .await
    }

    #[tracing::instrument(level = "debug", name = "redisync.semaphore.acquire", skip_all, fields(lock.key = %self.inner.key, permits))]
    async fn acquire_until(
        &self,
        permits: u32,
        deadline: Option<Instant>,
    ) -> Result<Option<SemaphorePermit>> {
        self.check_usable()?;
        if permits == 0 {
            return Err(Error::InvalidArgument("acquire at least one permit".into()));
        }
        let client = self.client();
        let lease = client.settings.watchdog_timeout;
        let lease_ms = checked_ms("lease", lease)?;
        let slot = client.hub.slot(&self.inner.key, &self.inner.channel);
        let Some(turn) = client.hub.gate_turn(&slot, deadline).await? else {
            return Ok(None);
        };
        let id: Arc<str> = Arc::from(format!(
            "{}:{}",
            client.owner_id(),
            NEXT_PERMIT.fetch_add(1, Ordering::Relaxed)
        ));
        loop {
            let since = slot.generation();
            let sent_at = Instant::now();
            let mut undo = Undo::arm(self, &slot, &id);
            let reply = self.run_acquire(&id, permits, lease_ms).await;
            if matches!(&reply, Err(e) if !e.outcome_unknown()) {
                undo.armed = false;
            }
            let acquired = reply?;
            undo.armed = false;
            let wait_ms = match acquired {
                Acquired::Token(token) => {
                    drop(turn); // the next local waiter may take what is left
                    let hold = Arc::new(Hold::new(
                        &SEMAPHORE_HOLD,
                        slot.clone(),
                        id,
                        token,
                        sent_at + lease,
                        true,
                        None,
                    ));
                    slot.add_holder(hold.clone());
                    let permit = SemaphorePermit {
                        held: Held::new(
                            self.inner.client.inner.clone(),
                            self.inner.name.clone(),
                            hold,
                            true,
                        ),
                        permits,
                    };
                    return replica::synced(
                        client,
                        &self.inner.name,
                        &self.inner.key,
                        permit,
                        SemaphorePermit::release,
                    )
                    .await
                    .map(Some);
                }
                Acquired::Busy { wait_ms } => wait_ms,
            };
            if slot
                .park_after_busy(since, wait_ms, NO_LEASE_POLL, deadline)
                .await?
                .is_none()
            {
                return Ok(None);
            }
        }
    }

    async fn run_acquire(&self, id: &str, permits: u32, lease_ms: i64) -> Result<Acquired> {
        let client = self.client();
        let reply: Vec<i64> = client
            .hub
            .unless_closing(ACQUIRE.run(
                &client.redis,
                &self.inner.key,
                vec![
                    self.inner.hash.clone(),
                    self.inner.leases.clone(),
                    self.inner.fence.clone(),
                ],
                vec![
                    Value::String(id.into()),
                    Value::Integer(i64::from(permits)),
                    Value::Integer(lease_ms),
                    Value::Integer(client.settings.fence_ttl_ms()),
                ],
            ))
            .await?;
        match reply[..] {
            [1, token] => Ok(Acquired::Token(u64::try_from(token).unwrap_or(0))),
            [0, wait_ms] => Ok(Acquired::Busy { wait_ms }),
            [-1, _] => Err(self.not_initialized()),
            [-2, total] => Err(Error::InvalidArgument(format!(
                "{permits} permits asked from semaphore {:?}, which has {total}",
                self.inner.name
            ))),
            _ => Err(Error::Script {
                name: "semaphore_acquire.lua",
                message: format!("unexpected reply {reply:?}"),
            }),
        }
    }

    async fn release_id(&self, id: &Value) -> Result<i64> {
        let client = self.client();
        let freed = RELEASE
            .run_idempotent(
                &client.redis,
                &self.inner.key,
                vec![self.inner.hash.clone(), self.inner.leases.clone()],
                vec![
                    id.clone(),
                    Value::String(client.hub.publish_command().into()),
                    Value::from(self.inner.channel.clone()),
                ],
            )
            .await?;
        // Local waiters need not wait for our own message.
        if let Some(slot) = client.hub.existing_slot(&self.inner.key) {
            slot.wake();
        }
        Ok(freed)
    }

    /// Permits free now (expired leases of crashed holders are reclaimed first).
    ///
    /// # Errors
    /// [`Error::NotInitialized`] before `try_set_permits`, [`Error::WrongType`],
    /// [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: one script, done or not done.
    pub async fn available_permits(&self) -> Result<u32> {
        self.check_usable()?;
        let client = self.client();
        let reply: Vec<i64> = AVAILABLE
            .run_idempotent(
                &client.redis,
                &self.inner.key,
                vec![self.inner.hash.clone(), self.inner.leases.clone()],
                vec![
                    Value::String(client.hub.publish_command().into()),
                    Value::from(self.inner.channel.clone()),
                ],
            )
            .await?;
        match reply[..] {
            [1, free] => Ok(u32::try_from(free).unwrap_or(0)),
            _ => Err(self.not_initialized()),
        }
    }
}

/// An acquire in flight; dropped armed, it gives back what it may have won
/// (the permit id is unique, so this never touches another acquisition).
struct Undo {
    armed: bool,
    semaphore: Semaphore,
    slot: SlotRef,
    id: Arc<str>,
}

impl Undo {
    fn arm(semaphore: &Semaphore, slot: &SlotRef, id: &Arc<str>) -> Undo {
        Undo {
            armed: true,
            semaphore: semaphore.clone(),
            slot: slot.clone(),
            id: id.clone(),
        }
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let semaphore = self.semaphore.clone();
        let slot = self.slot.clone();
        let id = Value::String(self.id.as_ref().into());
        let until = Instant::now() + semaphore.client().settings.watchdog_timeout;
        rt.spawn(async move {
            if let Err(e) = retry_until_deadline(until, || semaphore.release_id(&id)).await {
                tracing::warn!(target: "redisync.release.failed", lock_key = %semaphore.inner.key, error = %e, "could not give back permits of a cancelled acquire; they return when the lease ends");
            }
            drop(slot);
        });
    }
}

/// Semaphore acquisitions: renewed by `semaphore_renew.lua` with the lease
/// zset and the permit id; a release gives back all permits of the id.
static SEMAPHORE_HOLD: HoldOps = HoldOps {
    renew: &RENEW,
    hold_args: |h| {
        (
            vec![keys::sibling_key(&h.slot.key, Role::Leases)],
            vec![h.owner.clone()],
        )
    },
    release: |client, hold, _| Box::pin(release_permit(client, hold)),
};

/// Gives back the permits of `hold` (keys derived from its slot) and wakes
/// local waiters at once.
async fn release_permit(client: &ClientInner, hold: &Hold) -> Result<i64> {
    let key = &hold.slot.key;
    let freed = RELEASE
        .run_idempotent(
            &client.redis,
            key,
            vec![Key::from(&**key), keys::sibling_key(key, Role::Leases)],
            vec![
                hold.owner.clone(),
                Value::String(client.hub.publish_command().into()),
                Value::from(hold.slot.channel.clone()),
            ],
        )
        .await?;
    hold.slot.wake();
    Ok(freed)
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
    held: Held,
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
