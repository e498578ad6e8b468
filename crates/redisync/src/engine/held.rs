//! The guard core: one acquisition held by one guard. Every public guard
//! (`LockGuard`, `FairLockGuard`, `RwLockGuard`, `SemaphorePermit`) is a thin
//! wrapper over [`Held`], so release, `Drop`, extend, validity and the lost
//! signal are written once.

use std::sync::Arc;
use std::time::Duration;

use fred::types::Value;
use tokio::time::Instant;

use crate::client::ClientInner;
use crate::error::{Error, Result};
use crate::hold::Hold;
use crate::script::checked_ms;

/// One guard's share of a [`Hold`] (re-entrant guards of one owner share it).
pub(crate) struct Held {
    client: Arc<ClientInner>,
    /// The primitive's name, for errors.
    name: Arc<str>,
    /// Present until released or dropped.
    hold: Option<Arc<Hold>>,
    /// Whether the watchdog renews this guard's lease.
    watchdog: bool,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Held");
        d.field("name", &self.name);
        if let Some(h) = &self.hold {
            d.field("owner", &h.owner_str).field("token", &h.token);
        }
        d.field("watchdog", &self.watchdog).finish_non_exhaustive()
    }
}

impl Held {
    pub(crate) fn new(
        client: Arc<ClientInner>,
        name: Arc<str>,
        hold: Arc<Hold>,
        watchdog: bool,
    ) -> Held {
        Held {
            client,
            name,
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
        let hold = self.hold();
        if hold.is_lost() {
            return Duration::ZERO;
        }
        hold.valid_until().saturating_duration_since(Instant::now())
    }

    /// Raises the lease in Redis to at least `lease` (one renewal of this
    /// hold); the local estimate follows the reply.
    pub(crate) async fn extend(&self, lease: Duration) -> Result<()> {
        let lease_ms = checked_ms("lease", lease)?;
        self.client.check_connected()?;
        let hold = self.hold();
        if hold.is_lost() {
            return Err(self.not_held());
        }
        let sent_at = Instant::now();
        let (keys, mut args) = (hold.ops.hold_args)(hold);
        args.insert(0, Value::Integer(lease_ms));
        let flags: Vec<i64> = hold
            .ops
            .renew
            .run_idempotent(&self.client.redis, &hold.slot.key, keys, args)
            .await?;
        if flags.first() == Some(&1) {
            hold.extend_validity(sent_at, lease);
            Ok(())
        } else {
            hold.mark_lost("extend found it gone");
            Err(self.not_held())
        }
    }

    /// Releases this guard's hold (the acquisition once its owner's last
    /// guard goes). Renewal stops before the release is sent. A final
    /// release that fails for a retryable reason, or whose future is
    /// dropped, is finished in the background while the lease lasts.
    pub(crate) async fn release(mut self) -> Result<()> {
        let Some(hold) = self.hold.take() else {
            return Ok(());
        };
        if let Err(e) = self.client.check_connected() {
            // Shut down: the shutdown released it; only leave the hold.
            hold.detach(self.watchdog);
            return Err(e);
        }
        // Known lost already (the lease ran out by our clock): still release,
        // to free what may be left in Redis, but report it as not held.
        let was_lost = hold.is_lost();
        let last = hold.detach(self.watchdog);
        let mut finish = FinishInBackground {
            client: self.client.clone(),
            hold: last.then(|| hold.clone()),
        };
        let released = (hold.ops.release)(&self.client, &hold, last).await;
        if !matches!(&released, Err(e) if e.is_retryable()) {
            finish.hold = None;
        }
        if let Ok(1..) = released {
            crate::replica::after_release(&self.client, &hold.slot.key).await;
        }
        match released? {
            0 => {
                hold.mark_lost("release found it gone");
                Err(self.not_held())
            }
            _ if was_lost => Err(self.not_held()),
            _ => Ok(()),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(hold) = self.hold.take() else {
            return;
        };
        let last = hold.detach(self.watchdog);
        if last {
            release_in_background(self.client.clone(), hold);
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return; // the outer guard's final release covers it
        };
        let client = self.client.clone();
        rt.spawn(async move {
            // Counting down a re-entrant hold: one try (not idempotent).
            match (hold.ops.release)(&client, &hold, false).await {
                Ok(0) => hold.mark_lost("release on drop found it gone"),
                Ok(_) => {}
                Err(e) => tracing::warn!(target: "redisync.release.failed", lock_key = %hold.slot.key, error = %e, "release on drop failed; it expires with its lease"),
            }
        });
    }
}

/// A final release in flight: dropped while still set, the release is
/// finished in the background.
struct FinishInBackground {
    client: Arc<ClientInner>,
    hold: Option<Arc<Hold>>,
}

impl Drop for FinishInBackground {
    fn drop(&mut self) {
        if let Some(hold) = self.hold.take() {
            release_in_background(self.client.clone(), hold);
        }
    }
}

/// Releases the whole acquisition of `hold` in a background task, retried
/// while Redis is unreachable until the lease would have run out (a final
/// release is owner- and token-checked, so it never touches a later
/// acquisition). After a shutdown, or outside a runtime, the lease ends it.
fn release_in_background(client: Arc<ClientInner>, hold: Arc<Hold>) {
    if client.check_connected().is_err() {
        return;
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(lock_key = %hold.slot.key, "guard dropped outside a tokio runtime; it expires with its lease");
        return;
    };
    rt.spawn(async move {
        let result = retry_until_deadline(hold.valid_until(), || {
            (hold.ops.release)(&client, &hold, true)
        })
        .await;
        match result {
            Ok(0) => hold.mark_lost("release on drop found it gone"),
            Ok(_) => {}
            Err(e) => tracing::warn!(target: "redisync.release.failed", lock_key = %hold.slot.key, error = %e, "release in the background failed; it expires with its lease"),
        }
    });
}

/// Runs `op` until it succeeds, fails for good, or `until` passes; retries
/// connection trouble with a growing pause. Only for idempotent operations.
pub(crate) async fn retry_until_deadline<T, F, Fut>(until: Instant, mut op: F) -> Result<T>
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
            }
            result => return result,
        }
    }
}

/// The methods every guard type shares, over its `held: Held` field:
/// `fencing_token()`, `lost()`, `is_lost()`, `validity()`.
macro_rules! guard_accessors {
    ($guard:ty) => {
        impl $guard {
            /// The fencing token of this acquisition: strictly increasing per
            /// name across all clients for every new acquisition (a
            /// re-entrant acquisition returns the outer token). Pass it to the
            /// protected resource and have it reject writes with an older token.
            pub fn fencing_token(&self) -> u64 {
                self.held.hold().token
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
