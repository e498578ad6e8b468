//! The read-write lock: `RwLock` with `ReadLock` and `WriteLock` handles.

use std::sync::Arc;
use std::time::Duration;

use fred::types::{Key, Value};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::client::{Client, ClientInner};
use crate::engine::held::{guard_accessors, Held};
use crate::error::{Error, Result};
use crate::hold::{Hold, HoldOps};
use crate::hub::SlotRef;
use crate::keys::{self, Kind, Role};
use crate::replica;
use crate::script::checked_ms;
use crate::script::lua_script;

lua_script!(ACQUIRE, "rw_lock_acquire.lua");
lua_script!(RELEASE, "rw_lock_release.lua");
lua_script!(RENEW, "rw_lock_renew.lua");
lua_script!(INSPECT, "rw_lock_inspect.lua");
lua_script!(FORCE_UNLOCK, "rw_lock_force_unlock.lua");

/// Poll bound when the lock has no TTL (a key written by something else).
const NO_TTL_POLL: Duration = Duration::from_secs(1);

/// Which side of the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
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

    fn hold_ops(self) -> &'static HoldOps {
        match self {
            Side::Read => &READ_HOLD,
            Side::Write => &WRITE_HOLD,
        }
    }
}

/// Holds of a read-write lock are kept as `"<side>|<owner id>"` so one owner
/// can hold both sides (a downgrade); Redis sees the bare owner id.
fn raw_owner(hold: &Hold) -> &str {
    hold.owner_str
        .split_once('|')
        .map_or(&*hold.owner_str, |(_, o)| o)
}

fn renew_args(h: &Hold, side: Side) -> (Vec<Key>, Vec<Value>) {
    let key = &*h.slot.key;
    (
        vec![Key::from(key), keys::sibling_key(key, Role::Readers)],
        vec![
            Value::String(raw_owner(h).into()),
            Value::String(h.token.to_string().into()),
            Value::String(side.tag().into()),
        ],
    )
}

static READ_HOLD: HoldOps = HoldOps {
    renew: &RENEW,
    hold_args: |h| renew_args(h, Side::Read),
    release: |client, hold, last| Box::pin(release_side(client, hold, Side::Read, last)),
};

static WRITE_HOLD: HoldOps = HoldOps {
    renew: &RENEW,
    hold_args: |h| renew_args(h, Side::Write),
    release: |client, hold, last| Box::pin(release_side(client, hold, Side::Write, last)),
};

/// Releases one hold of `hold` on one side (`last`: the acquisition), keys
/// derived from its slot. Only a final release may be sent twice.
async fn release_side(client: &ClientInner, hold: &Hold, side: Side, last: bool) -> Result<i64> {
    let key = &hold.slot.key;
    RELEASE
        .run_with(
            &client.redis,
            key,
            vec![Key::from(&**key), keys::sibling_key(key, Role::Readers)],
            vec![
                Value::String(raw_owner(hold).into()),
                Value::String(hold.token.to_string().into()),
                Value::String(if last { "1" } else { "0" }.into()),
                Value::String(side.tag().into()),
                Value::String(client.hub.publish_command().into()),
                Value::from(hold.slot.channel.clone()),
                Value::String("=".into()),
            ],
            if last { 3 } else { 1 },
        )
        .await
}

/// A distributed read-write lock: many readers or one writer.
///
/// Both sides are re-entrant per owner (`"<client uuid>:<task id>"`), leased
/// and renewed like [`Lock`](crate::Lock). A writer may also take the read
/// side (a downgrade: release the write side afterwards and keep reading;
/// the downgrade wakes waiting readers everywhere). A reader asking for the
/// write side gets [`Error::UpgradeNotSupported`] at once: two readers doing
/// that would wait for each other forever. Each reader's lease is tracked on
/// its own, so a crashed reader's share ends after its lease even while other
/// readers keep renewing theirs. A writer's release wakes every waiting reader.
///
/// Fairness: tasks of one client queue in FIFO order (a waiting writer holds
/// back later local readers); across clients readers are admitted whenever
/// the lock is in read mode, so a steady stream of readers can starve writers.
#[derive(Clone)]
pub struct RwLock {
    inner: Arc<RwInner>,
}

struct RwInner {
    client: Client,
    name: Arc<str>,
    key: Arc<str>,
    hash: Key,
    readers: Key,
    fence: Key,
    channel: Key,
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.inner.name)
            .field("key", &self.inner.key)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A handle on the read-write lock `name` (no I/O). See [`RwLock`].
    pub fn rw_lock(&self, name: &str) -> RwLock {
        let key = keys::key(Kind::Rw, Role::Hold, name);
        let role = |role| Key::from(keys::key(Kind::Rw, role, name));
        RwLock {
            inner: Arc::new(RwInner {
                client: self.clone(),
                name: Arc::from(name),
                hash: Key::from(key.as_str()),
                readers: role(Role::Readers),
                fence: role(Role::Fence),
                channel: role(Role::Channel),
                key: Arc::from(key),
            }),
        }
    }
}

impl RwLock {
    /// The lock's name as given to [`Client::rw_lock`].
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The read side: shared with other readers.
    pub fn read(&self) -> ReadLock {
        ReadLock { rw: self.clone() }
    }

    /// The write side: exclusive.
    pub fn write(&self) -> WriteLock {
        WriteLock { rw: self.clone() }
    }

    fn client(&self) -> &ClientInner {
        &self.inner.client.inner
    }

    fn check_usable(&self) -> Result<()> {
        self.client().check_usable(&self.inner.name, "lock")
    }

    #[tracing::instrument(level = "debug", name = "redisync.lock.acquire", skip_all, fields(lock.key = %self.inner.key, lock.kind = side.tag()))]
    async fn acquire(
        &self,
        side: Side,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<RwLockGuard>> {
        self.check_usable()?;
        let client = self.client();
        let watchdog = lease.is_none();
        let lease = lease.unwrap_or(client.settings.watchdog_timeout);
        let lease_ms = checked_ms("lease", lease)?;
        let owner = client.owner_id();
        let holder_id: Arc<str> = Arc::from(format!("{}|{owner}", side.tag()));
        let slot = client.hub.slot(&self.inner.key, &self.inner.channel);

        // Reserved first (see `Hold::reserve`); a released hold is not
        // re-entered.
        let reentry = slot
            .holder(&holder_id)
            .and_then(|hold| Some((hold.reserve(watchdog)?, hold)));
        if let Some((reserved, hold)) = reentry {
            let sent_at = Instant::now();
            let mut undo = Undo::arm(self, &slot, side, &holder_id, Some(hold.token), None);
            let acquired = self.attempt(&mut undo, side, &owner, lease_ms).await?;
            undo.armed = false;
            match acquired {
                Acquired::Token(token) if token == hold.token => {
                    let guard = self.guard(side, reserved.confirm(sent_at, lease), watchdog);
                    return self.synced(guard).await.map(Some);
                }
                Acquired::Token(token) => {
                    hold.mark_lost("re-entry found the lock expired");
                    let guard =
                        self.new_guard(&slot, side, holder_id, token, sent_at, lease, watchdog);
                    return self.synced(guard).await.map(Some);
                }
                Acquired::Busy { .. } => hold.mark_lost("re-entry found the lock taken"),
            }
        }

        // This owner holding the other side decides before the local queue,
        // whose head may wait for that very hold: a reader asking for the
        // write side is refused at once (it would wait for itself); a
        // writer asking for the read side (a downgrade) goes straight to
        // Redis, which grants it.
        let other_side = match side {
            Side::Read => Side::Write,
            Side::Write => Side::Read,
        };
        let holds_other = slot
            .holder(&format!("{}|{owner}", other_side.tag()))
            .is_some();
        if side == Side::Write && holds_other {
            return Err(Error::UpgradeNotSupported {
                name: self.inner.name.to_string(),
            });
        }
        // Local FIFO turn to ask Redis (not held while holding: readers share).
        let mut turn = None;
        if !holds_other {
            let Some(t) = client.hub.gate_turn(&slot, deadline).await? else {
                return Ok(None);
            };
            turn = Some(t);
        }
        if slot.has_pending_undo(&holder_id) {
            self.release_script(side, &owner, None, true, '!').await?;
            slot.remove_pending_undo(&holder_id);
        }
        loop {
            let since = slot.generation();
            let sent_at = Instant::now();
            let mut undo = Undo::arm(self, &slot, side, &holder_id, None, turn.take());
            undo.expires_at = sent_at + lease;
            let acquired = self.attempt(&mut undo, side, &owner, lease_ms).await?;
            undo.armed = false;
            turn = undo.turn.take();
            let wait_ms = match acquired {
                Acquired::Token(token) => {
                    drop(turn);
                    let guard =
                        self.new_guard(&slot, side, holder_id, token, sent_at, lease, watchdog);
                    return self.synced(guard).await.map(Some);
                }
                Acquired::Busy { wait_ms } => wait_ms,
            };
            if slot
                .park_after_busy(since, wait_ms, NO_TTL_POLL, deadline)
                .await?
                .is_none()
            {
                return Ok(None);
            }
        }
    }

    /// Replica sync of an acquisition (see [`replica::synced`]).
    async fn synced(&self, guard: RwLockGuard) -> Result<RwLockGuard> {
        replica::synced(
            self.client(),
            &self.inner.name,
            &self.inner.key,
            guard,
            RwLockGuard::unlock,
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    fn new_guard(
        &self,
        slot: &SlotRef,
        side: Side,
        holder_id: Arc<str>,
        token: u64,
        sent_at: Instant,
        lease: Duration,
        watchdog: bool,
    ) -> RwLockGuard {
        let hold = Arc::new(Hold::new(
            side.hold_ops(),
            slot.clone(),
            holder_id,
            token,
            sent_at + lease,
            watchdog,
            None,
        ));
        slot.add_holder(hold.clone());
        self.guard(side, hold, watchdog)
    }

    fn guard(&self, side: Side, hold: Arc<Hold>, watchdog: bool) -> RwLockGuard {
        RwLockGuard {
            side,
            held: Held::new(
                self.inner.client.inner.clone(),
                self.inner.name.clone(),
                hold,
                watchdog,
            ),
        }
    }

    /// Runs the acquire script under an armed undo (disarmed when the error
    /// says nothing ran).
    async fn attempt(
        &self,
        undo: &mut Undo,
        side: Side,
        owner: &str,
        lease_ms: i64,
    ) -> Result<Acquired> {
        let client = self.client();
        let reply: Result<Vec<i64>> = client
            .hub
            .unless_closing(ACQUIRE.run_idempotent(
                &client.redis,
                &self.inner.key,
                vec![
                    self.inner.hash.clone(),
                    self.inner.readers.clone(),
                    self.inner.fence.clone(),
                ],
                vec![
                    Value::String(owner.into()),
                    Value::Integer(lease_ms),
                    Value::String(side.tag().into()),
                    Value::String(
                        undo.keep_token
                            .map(|t| t.to_string())
                            .unwrap_or_default()
                            .into(),
                    ),
                    Value::Integer(client.settings.fence_ttl_ms()),
                ],
            ))
            .await;
        if matches!(&reply, Err(e) if !e.outcome_unknown()) {
            undo.armed = false;
        }
        let reply = reply?;
        match reply[..] {
            [1 | 2, token] => Ok(Acquired::Token(u64::try_from(token).unwrap_or(0))),
            [0, wait_ms] => Ok(Acquired::Busy { wait_ms }),
            [-3, _] => {
                undo.armed = false;
                Err(Error::UpgradeNotSupported {
                    name: self.inner.name.to_string(),
                })
            }
            _ => Err(Error::Script {
                name: "rw_lock_acquire.lua",
                message: format!("unexpected reply {reply:?}"),
            }),
        }
    }

    /// Runs the release script. `token: None` with `'!'` undoes any
    /// acquisition of the owner on that side; `'='` releases exactly `token`.
    async fn release_script(
        &self,
        side: Side,
        owner: &str,
        token: Option<u64>,
        last: bool,
        matching: char,
    ) -> Result<i64> {
        let client = self.client();
        // Only a final release (or an undo) may be sent twice.
        RELEASE
            .run_with(
                &client.redis,
                &self.inner.key,
                vec![self.inner.hash.clone(), self.inner.readers.clone()],
                vec![
                    Value::String(owner.into()),
                    Value::String(token.map(|t| t.to_string()).unwrap_or_default().into()),
                    Value::String(if last { "1" } else { "0" }.into()),
                    Value::String(side.tag().into()),
                    Value::String(client.hub.publish_command().into()),
                    Value::from(self.inner.channel.clone()),
                    Value::String(matching.to_string().into()),
                ],
                if last { 3 } else { 1 },
            )
            .await
    }

    async fn inspect(&self, side: Side) -> Result<(i64, i64, u32)> {
        self.check_usable()?;
        let client = self.client();
        let owner = client.owner_id();
        let reply: Vec<i64> = INSPECT
            .run_idempotent(
                &client.redis,
                &self.inner.key,
                vec![self.inner.hash.clone()],
                vec![
                    Value::String(owner.as_ref().into()),
                    Value::String(side.tag().into()),
                ],
            )
            .await?;
        match reply[..] {
            [mode, pttl, count] => Ok((mode, pttl, u32::try_from(count).unwrap_or(0))),
            _ => Err(Error::Script {
                name: "rw_lock_inspect.lua",
                message: format!("unexpected reply {reply:?}"),
            }),
        }
    }

    async fn force_unlock(&self) -> Result<bool> {
        self.check_usable()?;
        let client = self.client();
        let deleted: i64 = FORCE_UNLOCK
            .run(
                &client.redis,
                &self.inner.key,
                vec![self.inner.hash.clone(), self.inner.readers.clone()],
                vec![
                    Value::String(client.hub.publish_command().into()),
                    Value::from(self.inner.channel.clone()),
                ],
            )
            .await?;
        if let Some(slot) = client.hub.existing_slot(&self.inner.key) {
            for hold in slot.holders() {
                hold.mark_lost("force-unlocked");
            }
        }
        Ok(deleted == 1)
    }
}

enum Acquired {
    Token(u64),
    Busy { wait_ms: i64 },
}

/// An acquire in flight; dropped armed it undoes a possible acquisition
/// (fresh attempts: retried in the background, keeping the local turn, the
/// owner running a pending undo itself before acquiring again; re-entrant
/// attempts: one try keeping the earlier acquisition).
struct Undo {
    armed: bool,
    rw: RwLock,
    slot: SlotRef,
    side: Side,
    holder_id: Arc<str>,
    keep_token: Option<u64>,
    turn: Option<OwnedSemaphorePermit>,
    expires_at: Instant,
}

impl Undo {
    fn arm(
        rw: &RwLock,
        slot: &SlotRef,
        side: Side,
        holder_id: &Arc<str>,
        keep_token: Option<u64>,
        turn: Option<OwnedSemaphorePermit>,
    ) -> Undo {
        Undo {
            armed: true,
            rw: rw.clone(),
            slot: slot.clone(),
            side,
            holder_id: holder_id.clone(),
            keep_token,
            turn,
            expires_at: Instant::now(),
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
        let (rw, slot, side, holder_id) = (
            self.rw.clone(),
            self.slot.clone(),
            self.side,
            self.holder_id.clone(),
        );
        let owner: Arc<str> = Arc::from(holder_id.split_once('|').map_or(&*holder_id, |(_, o)| o));
        // A pending undo, run under the local gate: the owner's next fresh
        // acquisition settles it first, so it never lands after that. A
        // cancelled re-entry keeps the outer acquisition (`keep`): it only
        // removes a fresh grant the re-entry may have made.
        let keep = self.keep_token;
        slot.add_pending_undo(&holder_id);
        let mut turn = self.turn.take();
        let expires_at = self.expires_at;
        rt.spawn(async move {
            let mut pause = Duration::from_millis(50);
            loop {
                let mine = match turn.take() {
                    Some(t) => t,
                    None => match slot.gate.clone().acquire_owned().await {
                        Ok(t) => t,
                        Err(_) => return,
                    },
                };
                if !slot.has_pending_undo(&holder_id) {
                    return;
                }
                match rw.release_script(side, &owner, keep, true, '!').await {
                    Err(e) if e.is_retryable() && Instant::now() + pause < expires_at => {
                        drop(mine);
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(1));
                    }
                    result => {
                        if let Err(e) = result {
                            tracing::warn!(target: "redisync.release.failed", lock_key = %rw.inner.key, error = %e, "could not undo a cancelled acquisition; it expires with its lease");
                        }
                        slot.remove_pending_undo(&holder_id);
                        return;
                    }
                }
            }
        });
    }
}

macro_rules! side_handle {
    ($handle:ident, $side:expr, $what:literal) => {
        impl $handle {
            /// The lock's name.
            pub fn name(&self) -> &str {
                &self.rw.inner.name
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

            #[doc = concat!("Whether the lock is held in ", $what, " mode by anybody.")]
            ///
            /// # Errors
            /// [`Error::WrongType`], [`Error::Redis`].
            ///
            /// # Cancel safety
            /// Cancel safe (read-only).
            pub async fn is_locked(&self) -> Result<bool> {
                let (mode, _, _) = self.rw.inspect($side).await?;
                Ok(match $side {
                    Side::Read => mode == 1,
                    Side::Write => mode == 2,
                })
            }

            #[doc = concat!("Whether the calling task holds the ", $what, " side.")]
            ///
            /// # Errors
            /// [`Error::WrongType`], [`Error::Redis`].
            ///
            /// # Cancel safety
            /// Cancel safe (read-only).
            pub async fn is_held_by_current_task(&self) -> Result<bool> {
                Ok(self.rw.inspect($side).await?.2 > 0)
            }

            #[doc = concat!("How many ", $what, " holds the calling task has.")]
            ///
            /// # Errors
            /// [`Error::WrongType`], [`Error::Redis`].
            ///
            /// # Cancel safety
            /// Cancel safe (read-only).
            pub async fn hold_count(&self) -> Result<u32> {
                Ok(self.rw.inspect($side).await?.2)
            }

            /// The lock's remaining lease (either side); `None` when free.
            ///
            /// # Errors
            /// [`Error::WrongType`], [`Error::Redis`].
            ///
            /// # Cancel safety
            /// Cancel safe (read-only).
            pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
                let (mode, pttl, _) = self.rw.inspect($side).await?;
                Ok(crate::lock::lease_left(mode != 0, pttl))
            }

            /// Deletes the whole read-write lock (every reader and the
            /// writer) and wakes waiters. `Ok(true)` if it was locked.
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
    held: Held,
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
    /// read mode after a downgrade) and wakes waiters.
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
