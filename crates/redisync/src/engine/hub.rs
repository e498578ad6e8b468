//! Per-client state of every lock name in use: the local FIFO gate, the
//! unlock-message subscription and the local holders.
//!
//! A [`Slot`] lives while any local task waits for or holds the lock (each
//! such user keeps a [`SlotRef`]). Its subscription is taken on the first
//! failed attempt and kept until the slot is dropped, so a busy lock costs one
//! SUBSCRIBE per contention episode, not one per acquisition.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::DashMap;
use fred::types::{Key, Value};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use crate::engine::hold::{Hold, OwnerLines};
use crate::error::{Error, Result};
use crate::link::Link;
use crate::mutex::lock_unpoisoned;

/// Payload that wakes every waiter of a slot, addressed ones included (what
/// the plain lock's scripts publish).
pub(crate) const WAKE_ALL_PAYLOAD: &str = "unlock";

/// Prefix of the payload "g:<token>:<number>:<owner>" of a release that handed the
/// lock to a queued waiter (see `hand_to_next` in `lua/prelude.lua`).
pub(crate) const HANDED_PREFIX: &str = "g:";

/// How long a client's next waiter waits without asking after a hand-off
/// that left no permit free, unless a release wakes it first (a bound for
/// a release that freed one and crossed the hand-off's message).
const HANDED_EXHAUSTED_LOOK: Duration = Duration::from_secs(1);

/// The local state of one lock name on one client.
pub(crate) struct Slot {
    pub(crate) key: Arc<str>,
    pub(crate) channel: Key,
    /// Local FIFO queue: only the permit holder contends in Redis or holds the
    /// lock, so N local waiters cost one Redis contender and local tasks get
    /// the lock in arrival order.
    pub(crate) gate: Arc<Semaphore>,
    /// Woken by every unlock message (and on reconnect / lag).
    pub(crate) wakeup: Wakeup,
    subscribed: AtomicBool,
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
    /// The lines of flows of one owner (see [`OwnerLines`]).
    pub(crate) owner_lines: OwnerLines,
    /// Owners whose cancelled or timed-out acquisition is not undone yet,
    /// and whether that undo has the local turn (its try is running) rather
    /// than waiting for it.
    pending_undo: Mutex<Vec<(Arc<str>, bool)>>,
    /// Told when an undo's try ends (it gave the turn back, or is done).
    undo_tried: tokio::sync::Notify,
    /// A grant took what was left (a semaphore's last permit): the wake-up
    /// generation read before it was sent and the server's bound (the
    /// earliest lease end). The next local contender waits for a wake-up
    /// after that generation instead of asking Redis in vain.
    exhausted: Mutex<Option<(u64, Instant)>>,
    /// Cross-client fairness: local hand-offs in a row while other clients
    /// contended, and the pause the next local contender keeps.
    fairness: Mutex<Fairness>,
    /// Waiters woken only by a message whose payload is their owner id (fair
    /// lock), with the number of local users of each registration.
    addressed: Mutex<HashMap<Arc<str>, AddressedEntry, Hasher>>,
    /// The last look found the name held by another client, or our
    /// release handed it to one (a hint for the next attempt's reads).
    expect_busy: AtomicBool,
    /// A dropped guard's final release not sent yet: the next attempt on
    /// the name carries it in its own script, or its background task sends
    /// it (see `engine::guard_core`).
    parked_release: Mutex<Option<Arc<Hold>>>,
}

/// A registration for addressed messages and its number of local users.
type AddressedEntry = (Arc<Wakeup>, usize);

/// What parked waiters wait on: a generation counter bumped by every
/// wake-up, plus a `Notify`. A slot has one for all its waiters; an owner
/// waiting for messages addressed to it has its own.
#[derive(Default)]
pub(crate) struct Wakeup {
    generation: AtomicU64,
    notify: Notify,
    /// A lock handed to this waiter by a release, from a [`HANDED_PREFIX`]
    /// message: the number of the queue entry it was handed to, and the
    /// fencing token.
    handed: Mutex<Option<(u64, u64)>>,
    /// The numbers of the waiter's queue entry and of the one an attempt in
    /// flight may queue instead: messages for other entries (an earlier
    /// acquisition of the same owner, or an entry handed over and expired,
    /// late) are not ours.
    numbers: Mutex<(u64, u64)>,
}

impl Wakeup {
    /// The current generation; read it before an attempt.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Waits until a wake-up newer than `since` (true), or `until` (false).
    pub(crate) async fn wait(&self, since: u64, until: Instant) -> bool {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.generation() != since {
            return true;
        }
        tokio::time::timeout_at(until, notified).await.is_ok()
    }

    fn wake(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    /// The waiter's queue entry is numbered `number` (`next`: the number
    /// an attempt in flight may queue a new entry under). A hand-off to an
    /// entry of another number is dropped.
    pub(crate) fn expect_entries(&self, number: u64, next: u64) {
        *lock_unpoisoned(&self.numbers) = (number, next);
        let mut handed = lock_unpoisoned(&self.handed);
        if handed.is_some_and(|(n, _)| n != number && n != next) {
            *handed = None;
        }
    }

    /// Whether a hand-off to the entry `number` came (and is not taken yet).
    pub(crate) fn has_handed(&self, number: u64) -> bool {
        lock_unpoisoned(&self.handed).is_some_and(|(n, _)| n == number)
    }

    /// Takes the token of a lock handed to the entry `number`, if one came
    /// (and forgets one handed to another).
    pub(crate) fn take_handed(&self, number: u64) -> Option<u64> {
        lock_unpoisoned(&self.handed)
            .take()
            .filter(|(n, _)| *n == number)
            .map(|(_, token)| token)
    }

    /// Whether `number` names our queue entry (or the one we may queue).
    fn expects(&self, number: u64) -> bool {
        let (current, next) = *lock_unpoisoned(&self.numbers);
        // reintroduce: stale-hand-off-message
        number == current || number == next
    }

    fn hand(&self, number: u64, token: u64) {
        if self.expects(number) {
            *lock_unpoisoned(&self.handed) = Some((number, token));
            self.wake();
        }
    }
}

#[derive(Default)]
struct Fairness {
    streak: u32,
    contended: bool,
    yield_until: Option<Instant>,
}

impl Slot {
    /// Wakes every waiter of the slot (not the addressed ones).
    pub(crate) fn wake(&self) {
        self.wakeup.wake();
    }

    /// See [`Slot::set_expect_busy`].
    pub(crate) fn expects_busy(&self) -> bool {
        self.expect_busy.load(Ordering::Relaxed)
    }

    /// Whether another client holds the name, as far as we last saw.
    pub(crate) fn set_expect_busy(&self, busy: bool) {
        self.expect_busy.store(busy, Ordering::Relaxed);
    }

    pub(crate) fn is_subscribed(&self) -> bool {
        self.subscribed.load(Ordering::Acquire)
    }

    /// The live local hold of `owner`, if any.
    pub(crate) fn holder(&self, owner: &str) -> Option<Arc<Hold>> {
        lock_unpoisoned(&self.holders)
            .iter()
            .find(|h| &*h.owner_str() == owner && !h.is_lost())
            .cloned()
    }

    /// All local holds, for expiry checks, force-unlock and the watchdog.
    pub(crate) fn holders(&self) -> Vec<Arc<Hold>> {
        lock_unpoisoned(&self.holders).clone()
    }

    /// Adds a new hold; lost at once if a force-unlock ran after its grant,
    /// or may have (see [`Slot::forced_in_doubt`]).
    pub(crate) fn add_holder(&self, hold: Arc<Hold>) {
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

    pub(crate) fn remove_holder(&self, hold: &Arc<Hold>) {
        lock_unpoisoned(&self.holders).retain(|h| !Arc::ptr_eq(h, hold));
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

    /// Takes the record of [`Slot::note_exhausted`]: its bound, if no wake-up
    /// came since (generation `now`).
    pub(crate) fn take_exhausted(&self, now: u64) -> Option<Instant> {
        match lock_unpoisoned(&self.exhausted).take() {
            Some((since, until)) if since == now => Some(until),
            _ => None,
        }
    }

    /// `owner`'s undo is pending; `has_turn`: it starts with the local turn
    /// of the attempt it undoes.
    pub(crate) fn add_pending_undo(&self, owner: &Arc<str>, has_turn: bool) {
        lock_unpoisoned(&self.pending_undo).push((owner.clone(), has_turn));
    }

    pub(crate) fn has_pending_undo(&self, owner: &str) -> bool {
        lock_unpoisoned(&self.pending_undo)
            .iter()
            .any(|(o, _)| &**o == owner)
    }

    /// Whether `owner`'s pending undo has the local turn: its try (one
    /// command) is running, not queued behind another local holder.
    pub(crate) fn undo_has_turn(&self, owner: &str) -> bool {
        lock_unpoisoned(&self.pending_undo)
            .iter()
            .any(|(o, running)| &**o == owner && *running)
    }

    /// `owner`'s pending undo took (`true`) or gave back the local turn.
    pub(crate) fn set_undo_turn(&self, owner: &str, has_turn: bool) {
        for (o, running) in lock_unpoisoned(&self.pending_undo).iter_mut() {
            if &**o == owner {
                *running = has_turn;
            }
        }
        if !has_turn {
            self.undo_tried.notify_waiters();
        }
    }

    pub(crate) fn remove_pending_undo(&self, owner: &str) {
        lock_unpoisoned(&self.pending_undo).retain(|(o, _)| &**o != owner);
        self.undo_tried.notify_waiters();
    }

    /// Returns once `owner`'s pending undo no longer has the local turn (its
    /// try ended: the turn went on, to whoever waited for it first).
    pub(crate) async fn undo_try_ended(&self, owner: &str) {
        loop {
            let tried = self.undo_tried.notified();
            tokio::pin!(tried);
            tried.as_mut().enable();
            // reintroduce: try-zero-waits-for-queued-undo
            if !self.undo_has_turn(owner) {
                return;
            }
            tried.await;
        }
    }

    /// Registers `owner` for messages addressed to it (one registration per
    /// owner, counted); undo with [`Slot::unregister_addressed`].
    pub(crate) fn register_addressed(&self, owner: &Arc<str>) -> Arc<Wakeup> {
        let mut map = lock_unpoisoned(&self.addressed);
        let entry = map
            .entry(owner.clone())
            .or_insert_with(|| (Arc::new(Wakeup::default()), 0));
        entry.1 += 1;
        entry.0.clone()
    }

    pub(crate) fn unregister_addressed(&self, owner: &str) {
        let mut map = lock_unpoisoned(&self.addressed);
        if let Some(entry) = map.get_mut(owner) {
            entry.1 -= 1;
            if entry.1 == 0 {
                map.remove(owner);
            }
        }
    }

    /// The lock was handed to `owner` with `token`: its waiter, if any,
    /// wakes holding it. Nobody else wakes. Without a waiter (it left), its
    /// undo gives the lock to the next one.
    ///
    /// `free`: the permits a semaphore's hand-off left free. None: this
    /// client's next waiter waits for a release (ours wakes the slot, one of
    /// another client publishes) rather than ask in vain, as after a grant
    /// that took the last permit. Noted before the waiter wakes, so before
    /// its client's next waiter looks; a wake-up after the hand-off (of the
    /// release that freed something after it) cancels it.
    fn handed(&self, owner: &str, number: u64, token: u64, free: Option<u64>) {
        let Some(wakeup) = lock_unpoisoned(&self.addressed)
            .get(owner)
            .map(|(a, _)| a.clone())
        else {
            return;
        };
        if free == Some(0) && wakeup.expects(number) {
            let until = Instant::now() + HANDED_EXHAUSTED_LOOK;
            self.note_exhausted(self.wakeup.generation(), Some(until));
        }
        wakeup.hand(number, token);
    }

    fn wake_all_addressed(&self) {
        for (a, _) in lock_unpoisoned(&self.addressed).values() {
            a.wake();
        }
    }

    /// The earliest local lease end among holders, for gate waiters.
    pub(crate) fn earliest_holder_deadline(&self) -> Option<Instant> {
        lock_unpoisoned(&self.holders)
            .iter()
            .filter(|h| !h.is_marked_lost())
            .map(|h| h.valid_until())
            .min()
    }
}

struct SlotEntry {
    slot: Arc<Slot>,
    users: usize,
}

/// All slots of one client plus its subscriber connection.
pub(crate) struct Hub {
    slots: DashMap<Arc<str>, SlotEntry, Hasher>,
    /// Channel -> number of slots subscribed to it. Subscribe and unsubscribe
    /// of one channel are serialised by its stripe so they reach Redis in order.
    stripes: Vec<tokio::sync::Mutex<HashMap<Key, usize, Hasher>>>,
    /// Subscribes and unsubscribes the channels.
    link: Arc<dyn Link>,
    /// SSUBSCRIBE/SPUBLISH (Redis >= 7): the subscribe reply is awaited, so a
    /// retry after subscribing cannot miss an unlock.
    pub(crate) sharded: bool,
    /// Names whose last slot expected them held by another client when it
    /// went (see [`Slot::set_expect_busy`]): the next slot of the name
    /// starts with that hint. Kept while the slot's subscription lingers.
    busy_hints: DashMap<Arc<str>, (), Hasher>,
    /// Set when the client starts shutting down: no new acquisition, and
    /// every waiter fails with `Error::Shutdown` at once.
    closing: AtomicBool,
    closing_notify: Notify,
}

const STRIPES: usize = 16;

/// The hasher of the hub's maps, whose order wakes and subscribes follow:
/// random per process, fixed for a simulation (a seed replays the same
/// order).
#[cfg(not(feature = "simulation"))]
type Hasher = std::collections::hash_map::RandomState;
#[cfg(feature = "simulation")]
type Hasher = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;
/// How long a channel stays subscribed after its last local user left.
const SUBSCRIPTION_LINGER: Duration = Duration::from_millis(500);

impl Hub {
    pub(crate) fn new(link: Arc<dyn Link>, sharded: bool) -> Hub {
        Hub {
            slots: DashMap::with_hasher(Hasher::default()),
            stripes: (0..STRIPES)
                .map(|_| tokio::sync::Mutex::new(HashMap::with_hasher(Hasher::default())))
                .collect(),
            link,
            sharded,
            busy_hints: DashMap::with_hasher(Hasher::default()),
            closing: AtomicBool::new(false),
            closing_notify: Notify::new(),
        }
    }

    /// Refuses new acquisitions and fails every waiter (parked, or queued
    /// for the local gate) with `Error::Shutdown`.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Release);
        self.closing_notify.notify_waiters();
        self.wake_all();
    }

    /// `Err(Shutdown)` once the client is shutting down.
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closing.load(Ordering::Acquire) {
            Err(Error::Shutdown)
        } else {
            Ok(())
        }
    }

    /// Resolves once the client starts shutting down.
    pub(crate) async fn closing(&self) {
        loop {
            let notified = self.closing_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.closing.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }

    /// Runs an acquisition's command unless the client shuts down first:
    /// then `Err(Shutdown)` at once, without waiting for a reply the closed
    /// connection may never bring (what it may have won ends with its
    /// lease, as after a crash).
    pub(crate) async fn unless_closing<T>(
        &self,
        command: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        // Boxed: the script's future is large, and it would otherwise sit
        // inside every acquisition future.
        let command = Box::pin(command);
        tokio::select! {
            biased;
            () = self.closing() => Err(Error::Shutdown),
            reply = command => reply,
        }
    }

    /// The publish command the release scripts use.
    pub(crate) fn publish_command(&self) -> &'static str {
        if self.sharded {
            "spublish"
        } else {
            "publish"
        }
    }

    /// Whether the server has `PEXPIRE .. GT` (Redis >= 7, as sharded
    /// pub/sub).
    pub(crate) fn has_expire_gt(&self) -> bool {
        self.sharded
    }

    /// Registers a user of the lock `key` (creating its slot).
    pub(crate) fn slot(self: &Arc<Self>, key: &Arc<str>, channel: &Key) -> SlotRef {
        let mut entry = self.slots.entry(key.clone()).or_insert_with(|| SlotEntry {
            slot: Arc::new(Slot {
                key: key.clone(),
                channel: channel.clone(),
                gate: Arc::new(Semaphore::new(1)),
                wakeup: Wakeup::default(),
                subscribed: AtomicBool::new(false),
                holders: Mutex::new(Vec::new()),
                forced_through: AtomicU64::new(0),
                forced_in_doubt: Mutex::new(None),
                owner_lines: OwnerLines::default(),
                pending_undo: Mutex::new(Vec::new()),
                undo_tried: tokio::sync::Notify::new(),
                exhausted: Mutex::new(None),
                fairness: Mutex::new(Fairness::default()),
                addressed: Mutex::new(HashMap::with_hasher(Hasher::default())),
                expect_busy: AtomicBool::new(self.busy_hints.remove(key).is_some()),
                parked_release: Mutex::new(None),
            }),
            users: 0,
        });
        entry.users += 1;
        SlotRef {
            hub: self.clone(),
            slot: entry.slot.clone(),
        }
    }

    /// The slot of `key` if some local task uses it.
    pub(crate) fn existing_slot(&self, key: &str) -> Option<Arc<Slot>> {
        self.slots.get(key).map(|e| e.slot.clone())
    }

    /// Every slot in use (watchdog, shutdown).
    pub(crate) fn all_slots(&self) -> Vec<Arc<Slot>> {
        self.slots.iter().map(|e| e.slot.clone()).collect()
    }

    /// Subscribes the slot's channel (once per slot; the Redis subscription is
    /// shared by all slots of the channel). Runs in its own task so that a
    /// cancelled waiter cannot leave the bookkeeping half done.
    ///
    /// # Cancel safety
    /// Cancel safe: the subscription completes in the background and is
    /// undone when the slot is dropped.
    pub(crate) async fn ensure_subscribed(self: &Arc<Self>, slot: &SlotRef) -> Result<()> {
        if slot.is_subscribed() {
            return Ok(());
        }
        let user = slot.clone();
        tokio::spawn(async move { user.hub.subscribe(&user.slot).await })
            .await
            .map_err(|e| {
                Error::redis(fred::error::Error::new(
                    fred::error::ErrorKind::Canceled,
                    e.to_string(),
                ))
            })?
    }

    /// Counts the slot in when its channel is subscribed already (a slot of
    /// the same name lingers, or another kind shares it): no command, and
    /// the slot's first attempt is then heard. `false` when it is not (or
    /// the stripe is busy): [`Hub::ensure_subscribed`] then.
    pub(crate) fn attach_if_subscribed(&self, slot: &Slot) -> bool {
        if slot.is_subscribed() {
            return true;
        }
        let Ok(mut refs) = self.stripe(&slot.channel).try_lock() else {
            return false;
        };
        if slot.is_subscribed() {
            return true;
        }
        let Some(count) = refs.get_mut(&slot.channel) else {
            return false;
        };
        *count += 1;
        slot.subscribed.store(true, Ordering::Release);
        true
    }

    fn stripe(&self, channel: &Key) -> &tokio::sync::Mutex<HashMap<Key, usize, Hasher>> {
        let h = channel.as_bytes().iter().fold(0usize, |h, b| {
            h.wrapping_mul(31).wrapping_add(usize::from(*b))
        });
        &self.stripes[h % STRIPES]
    }

    async fn subscribe(&self, slot: &Slot) -> Result<()> {
        let mut refs = self.stripe(&slot.channel).lock().await;
        if slot.is_subscribed() {
            return Ok(());
        }
        let count = refs.entry(slot.channel.clone()).or_insert(0);
        *count += 1;
        if *count == 1 {
            let sent = self
                .link
                .subscribe(slot.channel.clone(), self.sharded)
                .await;
            if let Err(e) = sent {
                refs.remove(&slot.channel);
                return Err(Error::Redis(crate::error::RedisFailure(e)));
            }
        }
        slot.subscribed.store(true, Ordering::Release);
        Ok(())
    }

    async fn unsubscribe(&self, channel: Key) {
        let mut refs = self.stripe(&channel).lock().await;
        let Some(count) = refs.get_mut(&channel) else {
            return;
        };
        *count -= 1;
        if *count > 0 {
            return;
        }
        refs.remove(&channel);
        if self.check_open().is_err() {
            // The subscriber is closing (or closed: fred would hold the
            // command until it timed out); the server forgets its
            // subscriptions with the connection.
            return;
        }
        let sent = self.link.unsubscribe(channel, self.sharded).await;
        if let Err(e) = sent {
            tracing::debug!(error = %e, "unsubscribe failed");
        }
    }

    /// Subscribes every channel in use again (after the subscriber
    /// reconnected: the server forgot them). Holding each stripe keeps
    /// concurrent subscribe/unsubscribe calls in order.
    pub(crate) async fn resubscribe(&self) -> Result<()> {
        for stripe in &self.stripes {
            let refs = stripe.lock().await;
            for channel in refs.keys() {
                self.link
                    .subscribe(channel.clone(), self.sharded)
                    .await
                    .map_err(Error::redis)?;
            }
        }
        Ok(())
    }

    /// The cluster hash slots of the channels subscribed now (sharded
    /// subscriptions in a cluster), deduplicated.
    pub(crate) async fn subscribed_hash_slots(&self) -> Vec<u16> {
        let mut slots = Vec::new();
        for stripe in &self.stripes {
            let refs = stripe.lock().await;
            slots.extend(refs.keys().map(|c| fred::util::redis_keyslot(c.as_bytes())));
        }
        slots.sort_unstable();
        slots.dedup();
        slots
    }

    /// An unlock message with `payload` arrived on `channel`. A hand-off
    /// ([`HANDED_PREFIX`]) wakes only the waiter it names, holding the lock.
    /// Any other wakes the slot's waiters; the addressed waiters (of the
    /// hand-off kinds) only for [`WAKE_ALL_PAYLOAD`].
    pub(crate) fn on_message(&self, channel: &str, payload: &Value) {
        if let Some(key) = crate::redis::keys::sibling(channel, crate::redis::keys::Role::Hold) {
            if let Some(entry) = self.slots.get(key.as_str()) {
                let text = payload.as_str();
                if let Some((owner, number, token, free)) = text.as_deref().and_then(parse_handed) {
                    entry.slot.handed(owner, number, token, free);
                    return;
                }
                entry.slot.wake();
                if text.is_some_and(|p| p == WAKE_ALL_PAYLOAD) {
                    entry.slot.wake_all_addressed();
                }
            }
        }
    }

    /// Messages may have been lost (lagging receiver, reconnect): every waiter
    /// re-checks.
    pub(crate) fn wake_all(&self) {
        for entry in &self.slots {
            entry.slot.wake();
            entry.slot.wake_all_addressed();
        }
    }
}

/// When a watcher of a key (a leader watch, a latch's waiter) reads it again
/// without a message: a little after the key's TTL `left` ends (an expiry
/// publishes nothing, and the key is gone by then), and at least once per
/// `period` (a message lost in a reconnect).
pub(crate) fn look_again_after(left: Option<Duration>, period: Duration) -> Duration {
    left.map_or(period, |left| {
        (left + Duration::from_millis(20)).min(period)
    })
}

/// The owner, acquisition number, token and (a semaphore's) permits left
/// free of a [`HANDED_PREFIX`] payload "g:<token>:<number>[/<free>]:<owner>".
fn parse_handed(payload: &str) -> Option<(&str, u64, u64, Option<u64>)> {
    let (token, rest) = payload.strip_prefix(HANDED_PREFIX)?.split_once(':')?;
    let (number, owner) = rest.split_once(':')?;
    let token = token.parse().ok().filter(|t| *t > 0)?;
    let (number, free) = match number.split_once('/') {
        Some((number, free)) => (number, Some(free.parse().ok()?)),
        None => (number, None),
    };
    Some((owner, number.parse().ok()?, token, free))
}

/// A counted use of a slot; the slot is dropped (and unsubscribed) with its
/// last user.
pub(crate) struct SlotRef {
    hub: Arc<Hub>,
    slot: Arc<Slot>,
}

impl std::ops::Deref for SlotRef {
    type Target = Slot;
    fn deref(&self) -> &Slot {
        &self.slot
    }
}

impl Clone for SlotRef {
    fn clone(&self) -> SlotRef {
        if let Some(mut e) = self.hub.slots.get_mut(&self.slot.key) {
            if Arc::ptr_eq(&e.slot, &self.slot) {
                e.users += 1;
            }
        }
        SlotRef {
            hub: self.hub.clone(),
            slot: self.slot.clone(),
        }
    }
}

impl Drop for SlotRef {
    fn drop(&mut self) {
        let dashmap::Entry::Occupied(mut e) = self.hub.slots.entry(self.slot.key.clone()) else {
            return;
        };
        if !Arc::ptr_eq(&e.get().slot, &self.slot) {
            return;
        }
        e.get_mut().users -= 1;
        if e.get().users > 0 {
            return;
        }
        e.remove();
        if self.slot.is_subscribed() {
            let hub = self.hub.clone();
            let channel = self.slot.channel.clone();
            let key = self.slot.key.clone();
            if self.slot.expects_busy() {
                hub.busy_hints.insert(key.clone(), ());
            }
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                // Linger: a lock contended again soon reuses the subscription
                // (no SSUBSCRIBE/SUNSUBSCRIBE per contention episode), and
                // its next slot the hint.
                rt.spawn(async move {
                    tokio::time::sleep(SUBSCRIPTION_LINGER).await;
                    hub.busy_hints.remove(&key);
                    hub.unsubscribe(channel).await;
                });
            } else {
                hub.busy_hints.remove(&key);
            }
        }
    }
}
