//! The guard core: one acquisition held by one guard. Every public guard
//! (`LockGuard`, `FairLockGuard`, `RwLockGuard`, `SemaphorePermit`) is a thin
//! wrapper over [`GuardCore`], so release, `Drop`, extend, validity and the lost
//! signal are written once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::types::{Key, Value};
use tokio::time::Instant;

use crate::engine::client_inner::ClientInner;
use crate::engine::hold::{Hold, RebindRefused, Released};
use crate::engine::hub::SlotRef;
use crate::error::{Error, Result};
use crate::redis::script::{checked_ms, LuaScript};

/// Local hand-offs in a row (of a hold that keeps the local turn) before
/// waiters of other clients get a turn.
const LOCAL_STREAK_CAP: u32 = 4;

/// Yields of the runtime a parked release waits at most for the attempt
/// that carries it, while a local task has the turn (see [`park_release`]).
const PARKED_YIELDS: u32 = 4;

/// One guard's share of a [`Hold`] (re-entrant guards of one owner share it).
pub(crate) struct GuardCore {
    client: Arc<ClientInner>,
    /// The primitive's name, for errors.
    name: Arc<str>,
    /// The name's local slot, kept while the guard lives.
    slot: SlotRef,
    /// Present until released or dropped.
    hold: Option<Arc<Hold>>,
    /// Whether the watchdog renews this guard's lease.
    watchdog: bool,
}

impl std::fmt::Debug for GuardCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("GuardCore");
        d.field("name", &self.name);
        if let Some(h) = &self.hold {
            d.field("owner", &h.owner_str()).field("token", &h.token);
        }
        d.field("watchdog", &self.watchdog).finish_non_exhaustive()
    }
}

impl GuardCore {
    pub(crate) fn new(
        client: Arc<ClientInner>,
        name: Arc<str>,
        slot: SlotRef,
        hold: Arc<Hold>,
        watchdog: bool,
    ) -> GuardCore {
        GuardCore {
            client,
            name,
            slot,
            hold: Some(hold),
            watchdog,
        }
    }

    pub(crate) fn hold(&self) -> &Arc<Hold> {
        self.hold
            .as_ref()
            .unwrap_or_else(|| unreachable!("guard used after release"))
    }

    fn not_held(&self) -> Error {
        Error::NotHeld {
            name: self.name.to_string(),
        }
    }

    /// How much of the lease is left by this client's clock (zero once lost).
    pub(crate) fn validity(&self) -> Duration {
        self.hold().validity()
    }

    /// Raises the lease in Redis to at least `lease` (one renewal of this
    /// hold); the local estimate follows the reply (with replica sync, only
    /// once enough replicas acknowledged it).
    pub(crate) async fn extend(&self, lease: Duration) -> Result<()> {
        let lease_ms = extension_ms(&self.client, lease)?;
        self.client.check_connected()?;
        let hold = self.hold();
        if hold.is_lost() {
            return Err(self.not_held());
        }
        let sent_at = Instant::now();
        let (keys, args) = (hold.ops.hold_args)(hold);
        let renew = hold.ops.renew;
        if extend_in_redis(
            &self.client,
            &self.name,
            &hold.key,
            renew,
            keys,
            args,
            lease_ms,
        )
        .await?
        {
            // Only once synced: a replica without the longer lease would
            // keep the old one after a failover (the longer lease left in
            // Redis only outlives our belief: safe).
            hold.extend_validity(sent_at, lease);
            Ok(())
        } else {
            hold.mark_lost("extend found it gone");
            Err(self.not_held())
        }
    }

    /// Hands the hold off: rebinds it, in Redis (one script, token and
    /// lease kept) and locally (the slot finds holds by owner id), from its
    /// owner to an owner id of its own, so its owner's next acquisition
    /// waits like any other instead of re-entering it. Only the only guard
    /// of its hold may (`&mut`: no other call on this guard meanwhile).
    ///
    /// The local binding changes first: a re-entry of the old owner cannot
    /// slip in between (see [`Hold::begin_rebind`]). If the script surely
    /// did not run, it is bound back; if its outcome is unknown, the new id
    /// stays, a renewal that finds nothing under it marks the hold lost,
    /// and the final release sends the hand-off again before it (so a field
    /// the hand-off never moved is freed by the release, not its lease).
    /// Until the hand-off is known to have run, the hold keeps its old
    /// owner's turn: that owner's next acquisition waits for the hold to
    /// end, and never takes over the old field as stale (never held twice).
    pub(crate) async fn hand_off(&mut self) -> Result<()> {
        let hold = self.hold().clone();
        let Some(rebind) = hold.ops.rebind else {
            return Err(Error::InvalidArgument(format!(
                "{:?}: this kind of hold cannot be handed off",
                self.name
            )));
        };
        self.client.check_connected()?;
        if hold.is_lost() {
            return Err(self.not_held());
        }
        // An earlier hand-off still in doubt first: the field may be under
        // an older id than the local one.
        finish_rebind(&self.client, &hold).await?;
        let to = self.client.acquisition_owner_id();
        let from = match hold.begin_rebind(to.clone()) {
            Ok(from) => from,
            Err(RebindRefused::Shared(n)) => {
                return Err(Error::InvalidArgument(format!(
                "{:?} is re-entered ({n} guards share the hold): a re-entered hold belongs to its \
                     owner; hand off the only guard of a hold",
                self.name
            )))
            }
            Err(RebindRefused::Released) => return Err(self.not_held()),
        };
        // Dropped (cancelled) before the reply: the outcome is unknown, the
        // new id stays (see above).
        let mut settle = EndRebind {
            hold: &hold,
            revert: None,
        };
        hold.set_rebind_in_doubt(Some(from.clone()));
        let result = rebind(self.client.link(), &hold, &from, &to).await;
        if !matches!(&result, Err(e) if e.outcome_unknown()) {
            hold.set_rebind_in_doubt(None);
        }
        match result {
            Ok(true) => {
                // Surely bound to its own id now: the old owner's next flow
                // may go (while in doubt, it waits for the hold to end).
                hold.end_owner_turn();
                Ok(())
            }
            Ok(false) => {
                hold.mark_lost("hand-off found it gone");
                Err(self.not_held())
            }
            Err(e) => {
                if !e.outcome_unknown() {
                    settle.revert = Some(from);
                }
                Err(e)
            }
        }
    }

    /// Leaves this guard's hold locally without a release (its renewal
    /// stops, it leaves the slot), for an acquisition that gives it back in
    /// Redis itself, in order, before its next attempt under the same
    /// holder id (an undo: see `acquire::contend`): `true`. When other
    /// guards share the hold (a flow of the same owner re-entered it
    /// meanwhile) it is theirs: this guard counts down the ordinary way (in
    /// the background), and `false`: nothing may undo the hold then.
    pub(crate) fn forget(mut self) -> bool {
        let Some(hold) = self.hold.take() else {
            return false;
        };
        let last = detach(&self.slot, &hold, self.watchdog);
        if !last {
            release_in_background(self.client.clone(), self.slot.clone(), hold, false);
        }
        last
    }

    /// Releases this guard's hold (the acquisition once its owner's last
    /// guard goes). Renewal stops before the release is sent. A final
    /// release that fails for a retryable reason, or whose future is
    /// dropped, is finished in the background while the lease lasts. A hold
    /// known lost is [`Error::NotHeld`] at once (what may be left in Redis is
    /// released in the background, as on a drop), never a wait on Redis.
    pub(crate) async fn release(mut self) -> Result<()> {
        if self.client.check_connected().is_ok() {
            if let Some(hold) = self.hold.take_if(|h| h.is_lost()) {
                // The answer is known: not held. What may be left in Redis
                // goes in the background, as on a drop (it never touches a
                // later acquisition), so a lost guard never waits on Redis.
                let last = detach(&self.slot, &hold, self.watchdog);
                release_in_background(self.client.clone(), self.slot.clone(), hold, last);
                return Err(self.not_held());
            }
        }
        self.release_in_order().await
    }

    /// [`GuardCore::release`] that always waits for its script (or its failure):
    /// for an acquisition that tries again under the same holder id next,
    /// which must come after the release.
    pub(crate) async fn release_in_order(mut self) -> Result<()> {
        let Some(hold) = self.hold.take() else {
            return Ok(());
        };
        if let Err(e) = self.client.check_connected() {
            // Shut down: the shutdown released it; only leave the hold.
            detach(&self.slot, &hold, self.watchdog);
            return Err(e);
        }
        // Known lost already (the lease ran out by our clock): still release,
        // to free what may be left in Redis, but report it as not held.
        let was_lost = hold.is_lost();
        let last = detach(&self.slot, &hold, self.watchdog);
        let mut finish = FinishInBackground {
            client: self.client.clone(),
            slot: self.slot.clone(),
            hold: last.then(|| hold.clone()),
        };
        let released = release_hold(&self.client, &self.slot, &hold, last, false).await;
        if !matches!(&released, Err(e) if e.is_retryable()) {
            finish.hold = None;
        }
        let released = released?;
        if released.not_held {
            hold.mark_lost("release found it gone");
            return Err(self.not_held());
        }
        crate::redis::replica::after_release(self.client.replicas(), &hold.key).await;
        if was_lost {
            return Err(self.not_held());
        }
        Ok(())
    }
}

/// Ends a hand-off however its future ends (see [`Hold::end_rebind`]).
struct EndRebind<'a> {
    hold: &'a Hold,
    revert: Option<Arc<str>>,
}

impl Drop for EndRebind<'_> {
    fn drop(&mut self) {
        self.hold.end_rebind(self.revert.take());
    }
}

/// `lease` checked for an extension (not zero, not absurd, within the
/// restart guard's bound): its milliseconds.
pub(crate) fn extension_ms(client: &ClientInner, lease: Duration) -> Result<i64> {
    let lease_ms = checked_ms("lease", lease)?;
    if let Some(guard) = &client.restart_guard {
        guard.check_lease("extension", lease)?;
    }
    Ok(lease_ms)
}

/// One renewal of one hold in Redis by `renew` (its keys and per-hold
/// arguments as [`HoldOps::hold_args`] gives them) to at least `lease_ms`,
/// synced to the replicas when it renewed: whether the hold was there. For
/// a guard's `extend` and an extension by permit id alike.
pub(crate) async fn extend_in_redis(
    client: &ClientInner,
    name: &str,
    key: &str,
    renew: &LuaScript,
    keys: Vec<Key>,
    mut args: Vec<Value>,
    lease_ms: i64,
) -> Result<bool> {
    args.insert(0, Value::Integer(lease_ms));
    let flags: Vec<i64> = renew.run_idempotent(client.link(), key, keys, args).await?;
    if flags.first() != Some(&1) {
        return Ok(false);
    }
    crate::redis::replica::writes_synced(client.replicas(), name, key).await?;
    Ok(true)
}

/// Takes one guard off `hold`: its renewal stops at once; the last one also
/// leaves the slot's holders. Returns whether it was the last.
pub(crate) fn detach(slot: &SlotRef, hold: &Arc<Hold>, watchdog: bool) -> bool {
    let last = hold.drop_guard(watchdog);
    if last {
        slot.holds.remove(hold);
    }
    last
}

/// Runs the release of one guard's hold (`last`: the acquisition) and tells
/// local waiters.
///
/// A hold that keeps the local turn (an exclusive lock) passes it on as soon
/// as its final release is queued on the connection, not when the reply is
/// back (commands of one connection run in order): a local hand-off then
/// costs one round trip. That lets this client's queue win against waiters
/// of other clients, who learn of the release through pub/sub; so after
/// [`LOCAL_STREAK_CAP`] such hand-offs in a row while other clients contend,
/// the turn passes only after the reply plus a pause of a few round trips,
/// in which remote waiters get their chance.
async fn release_hold(
    client: &ClientInner,
    slot: &SlotRef,
    hold: &Hold,
    last: bool,
    turn_passed: bool,
) -> Result<Released> {
    let hands_off = last && (turn_passed || hold.keeps_turn());
    let yield_turn = hands_off && slot.queue.should_yield(LOCAL_STREAK_CAP);
    let sent_at = Instant::now();
    // Guards of one hold may go in several flows at once. A count-down
    // runs its round trip under the order lock, and the final release is
    // queued under it: a count-down never runs after the final release. One
    // that comes after the final release has nothing left to count down
    // (the final release removes the whole acquisition).
    let mut order = hold.release_order().await;
    if last {
        *order = true;
    } else if *order {
        return Ok(Released::default());
    }
    if last {
        finish_rebind(client, hold).await?;
    }
    let release = (hold.ops.release)(
        client.link(),
        client.hub.publish_command(),
        client.settings.fence_ttl_ms(),
        hold,
        last,
    );
    tokio::pin!(release);
    // The first poll queues the script on the connection; commands of one
    // connection run in order.
    let first = futures::poll!(release.as_mut());
    // A count-down keeps it until its reply is back.
    let order = (!last).then_some(order);
    if hands_off && !yield_turn {
        hold.open_gate();
    }
    let result = match first {
        std::task::Poll::Ready(result) => result,
        std::task::Poll::Pending => release.await,
    };
    drop(order);
    if let Ok(released) = &result {
        after_release(slot, released, last, hands_off);
    }
    if yield_turn {
        let pause =
            (sent_at.elapsed() * 4).clamp(Duration::from_micros(200), Duration::from_millis(20));
        slot.queue.yield_gate_for(pause);
        hold.open_gate();
    }
    result
}

/// The release of `hold` by [`Client::shutdown`](crate::Client::shutdown):
/// final, after a hand-off in doubt is sent again (as [`release_hold`]
/// does), so the name is freed rather than left under the old owner id.
pub(crate) async fn release_at_shutdown(client: &ClientInner, hold: &Hold) -> Result<Released> {
    // reintroduce: shutdown-skips-hand-off-in-doubt
    finish_rebind(client, hold).await?;
    (hold.ops.release)(
        client.link(),
        client.hub.publish_command(),
        client.settings.fence_ttl_ms(),
        hold,
        true,
    )
    .await
}

/// Before the final release of a hold whose hand-off stayed in doubt:
/// sends that hand-off again (idempotent, token-checked), so a field left
/// under the old owner id (the hand-off never ran) moves to the hold's id
/// and the release frees the name, rather than its lease.
async fn finish_rebind(client: &ClientInner, hold: &Hold) -> Result<()> {
    let (Some(from), Some(rebind)) = (hold.rebind_in_doubt(), hold.ops.rebind) else {
        return Ok(());
    };
    rebind(client.link(), hold, &from, &hold.owner_str()).await?;
    hold.set_rebind_in_doubt(None);
    Ok(())
}

/// What a release that came back tells the slot (`hands_off`: the hold
/// kept the local turn and passed it on).
fn after_release(slot: &SlotRef, released: &Released, last: bool, hands_off: bool) {
    if hands_off {
        slot.queue.record_release(released.contended);
    }
    if last {
        slot.queue.set_expect_busy(released.handed);
    }
    if last && !released.not_held && !released.handed {
        // Local waiters need not wait for our own message.
        slot.wake();
    }
}

impl Drop for GuardCore {
    fn drop(&mut self) {
        let Some(hold) = self.hold.take() else {
            return;
        };
        let last = detach(&self.slot, &hold, self.watchdog);
        if !(last && park_release(&self.client, &self.slot, &hold)) {
            release_in_background(self.client.clone(), self.slot.clone(), hold, last);
        }
    }
}

/// Parks the final release of a dropped guard's hold in its slot and passes
/// the local turn on at once: the next attempt on the name by this client
/// (the dropping task's, or the next local waiter's) carries the release in
/// its own script, so an acquire-and-drop cycle costs one round trip and
/// one script. A task sends it after one yield of the runtime if no attempt
/// took it by then. Only for kinds whose acquire script can carry it
/// ([`HoldOps::folds_release`](crate::engine::hold::HoldOps)), without replica sync
/// (a release then waits for replicas), not when the turn goes to other
/// clients first, and not while a hand-off is in flight or in doubt (the
/// final release finishes it first). `false`: release it the ordinary way.
fn park_release(client: &Arc<ClientInner>, slot: &SlotRef, hold: &Arc<Hold>) -> bool {
    if !hold.ops.folds_release
        || client.settings.replica_sync.is_some()
        || !hold.keeps_turn()
        || slot.queue.should_yield(LOCAL_STREAK_CAP)
        || hold.owner_epoch() % 2 == 1
        || hold.rebind_in_doubt().is_some()
        || !client.routers_running()
    {
        return false;
    }
    // Only on the runtime that runs the client's connections: the task that
    // sends the release if no attempt takes it needs a runtime that is
    // driven (a sync caller's runtime may sit idle after the drop; the
    // release is then queued on the connection at once, below).
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return false;
    };
    if rt.id() != client.runtime {
        return false;
    }
    let Some(task) = client.start_background() else {
        return false;
    };
    if !hold.try_mark_final_queued() || !slot.holds.park_release(hold) {
        return false;
    }
    hold.open_gate();
    let (owner, home, parked) = (client.clone(), slot.clone(), hold.clone());
    let sender = rt.spawn(async move {
        // The dropping task (or the next local waiter) is likely on its way
        // to an attempt that will carry the release: a few yields of the
        // runtime let it, and bound how long the release waits.
        for _ in 0..PARKED_YIELDS {
            tokio::task::yield_now().await;
            if !home.holds.has_parked_release(&parked) {
                return;
            }
        }
        // Queued on the connection under the parking lock: an attempt that
        // finds nothing parked is sent after it.
        let send = || send_with(task, owner, home.clone(), parked.clone(), true, true);
        home.holds.send_parked_release(&parked, send);
    });
    if sender.is_finished() {
        // Refused (the runtime shuts down): nothing will send it.
        if slot.holds.send_parked_release(hold, || {}) {
            tracing::debug!(lock_key = %hold.key, "guard dropped while the runtime shuts down; it expires with its lease");
        }
    }
    true
}

/// Sends the release parked in `key`'s slot now, if any (queued on the
/// connection before this returns): a read of the name by this client
/// (`is_locked`, `inspect`) then sees what the drop left, as it would
/// without the parking.
pub(crate) fn send_parked_release(
    client: &Arc<ClientInner>,
    key: &Arc<str>,
    channel: &fred::types::Key,
) {
    if !client
        .hub
        .existing_slot(key)
        .is_some_and(|s| s.holds.has_parked())
    {
        return;
    }
    let slot = client.hub.slot(key, channel);
    if let Some(hold) = slot.holds.take_parked_release() {
        send_in_background(client.clone(), slot, hold, true, true);
    }
}

/// A parked release an attempt took to carry (see [`park_release`]): given
/// the attempt's answer with [`Folded::finish`]; dropped unfinished (the
/// attempt failed, was refused or cancelled: the release may or may not
/// have run), it is sent again in the background (owner- and
/// token-checked: it never touches a later acquisition).
pub(crate) struct Folded {
    client: Arc<ClientInner>,
    slot: SlotRef,
    hold: Option<Arc<Hold>>,
    /// A shutdown waits for the release.
    task: Option<crate::engine::client_inner::BackgroundTask>,
}

impl Folded {
    /// The release parked in `slot`, if any, for an attempt of a kind whose
    /// script can carry it.
    pub(crate) fn take(client: &Arc<ClientInner>, slot: &SlotRef) -> Option<Folded> {
        // Shutting down: left to its own task, which the shutdown waits for.
        let task = client.start_background()?;
        slot.holds.take_parked_release().map(|hold| Folded {
            client: client.clone(),
            slot: slot.clone(),
            hold: Some(hold),
            task: Some(task),
        })
    }

    pub(crate) fn hold(&self) -> &Hold {
        self.hold
            .as_deref()
            .unwrap_or_else(|| unreachable!("a folded release used after it finished"))
    }

    /// The carrying script answered the release's `code` (see
    /// [`Released::from_code`]).
    pub(crate) fn finish(mut self, code: i64) {
        let Some(hold) = self.hold.take() else {
            return;
        };
        let released = Released::from_lock_release(code);
        after_release(&self.slot, &released, true, true);
        if released.not_held {
            hold.mark_lost("release on drop found it gone");
        }
    }
}

impl Drop for Folded {
    fn drop(&mut self) {
        if let (Some(hold), Some(task)) = (self.hold.take(), self.task.take()) {
            send_with(
                task,
                self.client.clone(),
                self.slot.clone(),
                hold,
                true,
                true,
            );
        }
    }
}

/// A final release in flight: dropped while still set, the release is
/// finished in the background.
struct FinishInBackground {
    client: Arc<ClientInner>,
    slot: SlotRef,
    hold: Option<Arc<Hold>>,
}

impl Drop for FinishInBackground {
    fn drop(&mut self) {
        if let Some(hold) = self.hold.take() {
            release_in_background(self.client.clone(), self.slot.clone(), hold, true);
        }
    }
}

/// Releases one guard's hold (`last`: the whole acquisition) in a
/// background task. A final release is owner- and token-checked, so it never
/// touches a later acquisition: it is retried while Redis is unreachable
/// until the lease would have run out. Counting down a re-entrant hold is
/// not idempotent: one try. A shutdown waits for it a while; after a
/// shutdown, or outside a runtime, the lease ends it.
pub(crate) fn release_in_background(
    client: Arc<ClientInner>,
    slot: SlotRef,
    hold: Arc<Hold>,
    last: bool,
) {
    send_in_background(client, slot, hold, last, false);
}

/// [`release_in_background`]; `turn_passed`: the hold's local turn was
/// passed on already (a parked release).
fn send_in_background(
    client: Arc<ClientInner>,
    slot: SlotRef,
    hold: Arc<Hold>,
    last: bool,
    turn_passed: bool,
) {
    if let Some(task) = client.start_background() {
        send_with(task, client, slot, hold, last, turn_passed);
    }
}

/// [`send_in_background`] under a background task already counted (a
/// shutdown waits for it).
fn send_with(
    task: crate::engine::client_inner::BackgroundTask,
    client: Arc<ClientInner>,
    slot: SlotRef,
    hold: Arc<Hold>,
    last: bool,
    turn_passed: bool,
) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(lock_key = %hold.key, "guard dropped outside a tokio runtime; it expires with its lease");
        return;
    };
    let client_alive = client.routers_running();
    let release = release_task(client, slot, hold, last, turn_passed);
    let release = async move {
        let _task = task;
        release.await;
    };
    // Polled once here, then by its task: the script is queued on the
    // connection and the local turn passed on before the dropping task goes
    // on, so its next acquisition of the name follows at once, without
    // waiting for the task to be scheduled. The task is spawned first: a
    // runtime that shuts down refuses it, and then nothing is polled (fred's
    // connection task may be gone: a send would make fred warn, and a retry
    // would time on a stopped timer); the lease ends the hold.
    let release = Arc::new(std::sync::Mutex::new(Some(Box::pin(release))));
    let task = rt.spawn({
        let release = release.clone();
        async move {
            let first = crate::mutex::lock_unpoisoned(&release).take();
            if let Some(release) = first {
                release.await;
            }
        }
    });
    if task.is_finished() || !client_alive {
        return;
    }
    let mut first = crate::mutex::lock_unpoisoned(&release);
    if let Some(release) = first.as_mut() {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if release.as_mut().poll(&mut cx).is_ready() {
            *first = None;
        }
    }
}

/// The release of one guard's hold in the background (`last`: the
/// acquisition, retried while Redis is unreachable until the lease would
/// have run out; `turn_passed`: the hold's local turn was passed on
/// already), reporting what it found.
async fn release_task(
    client: Arc<ClientInner>,
    slot: SlotRef,
    hold: Arc<Hold>,
    last: bool,
    turn_passed: bool,
) {
    let result = if last {
        // Retried during a shutdown too, until it closes the connections:
        // the shutdown waits for this task, and a hold left would keep the
        // name for its lease.
        retry_until_deadline(
            hold.valid_until(),
            // reintroduce: release-gives-up-during-shutdown
            || client.check_still_connected(),
            || release_hold(&client, &slot, &hold, true, turn_passed),
        )
        .await
    } else {
        release_hold(&client, &slot, &hold, false, false).await
    };
    match result {
        Ok(r) if r.not_held => hold.mark_lost("release on drop found it gone"),
        Ok(_) => {}
        Err(e) if client.check_open().is_err() => {
            tracing::debug!(lock_key = %hold.key, error = %e, "release in the background cut short by the shutdown; it expires with its lease");
        }
        Err(e) => {
            tracing::warn!(target: "redisync.release.failed", lock_key = %hold.key, error = %e, "release in the background failed; it expires with its lease");
        }
    }
}

/// Runs `op` until it succeeds, fails for good, or `until` passes; retries
/// connection trouble with a growing pause, as long as `open` says the
/// client is (a retry after a shutdown could follow the connection's quit).
/// Only for idempotent operations.
pub(crate) async fn retry_until_deadline<T, F, Fut>(
    until: Instant,
    open: impl Fn() -> Result<()>,
    mut op: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut pause = Duration::from_millis(50);
    loop {
        match op().await {
            Err(e) if e.is_retryable() && Instant::now() + pause < until => {
                tracing::debug!(error = %e, "retrying in the background");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
                open()?;
            }
            result => return result,
        }
    }
}

/// The methods every guard type shares, over its `held: GuardCore` field:
/// `fencing_token()`, `fencing_token_i64()`, `lost()`, `lost_signal()`,
/// `is_lost()`, `validity()`, and the [`Guard`](crate::Guard) trait.
macro_rules! guard_accessors {
    ($guard:ty) => {
        impl crate::guard::Guard for $guard {
            type Error = crate::error::Error;

            fn fencing_token(&self) -> u64 {
                self.held.hold().token
            }

            fn is_lost(&self) -> bool {
                self.held.hold().is_lost()
            }

            fn lost_signal(&self) -> crate::guard::LostSignal {
                crate::guard::LostSignal::of_hold(self.held.hold())
            }

            fn validity(&self) -> std::time::Duration {
                self.held.validity()
            }

            fn extend(
                &self,
                lease: std::time::Duration,
            ) -> impl std::future::Future<Output = crate::error::Result<()>> + Send {
                self.held.extend(lease)
            }

            fn release(self) -> impl std::future::Future<Output = crate::error::Result<()>> + Send {
                self.held.release()
            }
        }

        impl $guard {
            /// The fencing token of this acquisition: strictly increasing per
            /// name across all clients for every new acquisition (a
            /// re-entrant acquisition returns the outer token). For an
            /// exclusive hold (a lock, a write hold), pass it to the
            /// protected resource and have it reject writes with an older
            /// token. Shared holds (read holds, semaphore permits) have
            /// several valid holders with different tokens at once: an older
            /// token is not a stale holder there, so it fences against
            /// writers of the exclusive side (a write hold's newer token),
            /// not against each other.
            pub fn fencing_token(&self) -> u64 {
                self.held.hold().token
            }

            /// The fencing token as an `i64`, for stores without unsigned
            /// integers (SQL `BIGINT`): tokens are always below 2^53, so
            /// it is exact.
            pub fn fencing_token_i64(&self) -> i64 {
                i64::try_from(self.held.hold().token).unwrap_or(i64::MAX)
            }

            /// An owned signal, for another task, that fires when this
            /// acquisition no longer holds its lock: lost (as
            /// [`lost`](Self::lost)) or released. See
            /// [`LostSignal`](crate::LostSignal).
            pub fn lost_signal(&self) -> crate::guard::LostSignal {
                crate::guard::LostSignal::of_hold(self.held.hold())
            }

            /// Resolves when the client learns the hold was lost: its lease
            /// ran out, the watchdog found it gone (expired, forced, Redis
            /// restarted or failed over) or could not renew it in time.
            ///
            /// # Cancel safety
            /// Cancel safe.
            pub async fn lost(&self) {
                self.held.hold().lost().await;
            }

            /// Whether the hold is known to be lost (see `lost`).
            pub fn is_lost(&self) -> bool {
                self.held.hold().is_lost()
            }

            /// How much of the lease is left by this client's clock: measured
            /// from when the command that last set the lease (the
            /// acquisition, an `extend` or a watchdog renewal) was sent, so
            /// it is never longer than what Redis has left, clock drift
            /// aside. Zero once the hold is known to be lost.
            pub fn validity(&self) -> std::time::Duration {
                self.held.validity()
            }
        }
    };
}
pub(crate) use guard_accessors;
