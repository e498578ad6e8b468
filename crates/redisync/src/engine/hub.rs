//! The client's router of unlock messages: the slot of every name in use
//! (counted by its users, [`SlotRef`]), the channels subscribed for them,
//! and each message delivered to the waiters it concerns.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use fred::types::{Key, Value};
use tokio::sync::Notify;

use crate::engine::slot::{Hasher, Slot};
use crate::error::{Error, Result};
use crate::redis::link::Link;

/// Payload that wakes every waiter of a slot, addressed ones included (what
/// the plain lock's scripts publish).
pub(crate) const WAKE_ALL_PAYLOAD: &str = "unlock";

/// Prefix of the payload "g:<token>:<number>:<owner>" of a release that handed the
/// lock to a queued waiter (see `hand_to_next` in `lua/lib/lock.lua`).
pub(crate) const HANDED_PREFIX: &str = "g:";

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
    /// went (see `LocalQueue::set_expect_busy`): the next slot of the name
    /// starts with that hint. Kept while the slot's subscription lingers.
    busy_hints: DashMap<Arc<str>, (), Hasher>,
    /// Set when the client starts shutting down: no new acquisition, and
    /// every waiter fails with `Error::Shutdown` at once.
    closing: AtomicBool,
    closing_notify: Notify,
}

const STRIPES: usize = 16;

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
            slot: Arc::new(Slot::new(
                key.clone(),
                channel.clone(),
                self.busy_hints.remove(key).is_some(),
            )),
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
        if slot.wakeups.is_subscribed() {
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
        if slot.wakeups.is_subscribed() {
            return true;
        }
        let Ok(mut refs) = self.stripe(&slot.channel).try_lock() else {
            return false;
        };
        if slot.wakeups.is_subscribed() {
            return true;
        }
        let Some(count) = refs.get_mut(&slot.channel) else {
            return false;
        };
        *count += 1;
        slot.wakeups.set_subscribed();
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
        if slot.wakeups.is_subscribed() {
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
        slot.wakeups.set_subscribed();
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
                    entry.slot.wakeups.wake_addressed();
                }
            }
        }
    }

    /// Messages may have been lost (lagging receiver, reconnect): every waiter
    /// re-checks.
    pub(crate) fn wake_all(&self) {
        for entry in &self.slots {
            entry.slot.wake();
            entry.slot.wakeups.wake_addressed();
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
        if self.slot.wakeups.is_subscribed() {
            let hub = self.hub.clone();
            let channel = self.slot.channel.clone();
            let key = self.slot.key.clone();
            if self.slot.queue.expects_busy() {
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
