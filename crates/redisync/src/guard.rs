//! What every guard and permit has in common: the [`Guard`] trait, the owned
//! [`LostSignal`], and [`run_locked`], which runs work only while a lock is
//! held.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};

use crate::engine::hold::Hold;

/// An owned, cloneable signal that an acquisition no longer holds its lock:
/// it was lost (lease ran out, found gone by the watchdog, force-unlocked,
/// Redis restarted or failed over) or its guard was released. Unlike
/// `guard.lost()`, it borrows nothing: move it into another task to cancel
/// work there when the lock goes.
///
/// A release fires it too: `unlock`, `release` or the guard dropped. A
/// signal combined from several guards (`select` over their signals) fires
/// when the first of them is let go, so let the guards go after the work
/// the signal watches, not one by one before it ends.
///
/// It is a future (`signal.await`, or a branch of `tokio::select!`) that
/// resolves once and then stays resolved; clones resolve together.
///
/// ```no_run
/// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
/// let guard = client.lock("jobs:nightly").lock().await?;
/// let lost = guard.lost_signal();
/// let worker = tokio::spawn(async move {
///     tokio::select! {
///         biased;
///         () = lost => println!("lock gone: stopping"),
///         () = tokio::time::sleep(std::time::Duration::from_secs(60)) => println!("done"),
///     }
/// });
/// let _ = worker.await;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a signal does nothing unless awaited or checked"]
pub struct LostSignal {
    fired: Shared<BoxFuture<'static, ()>>,
    /// What is left of the hold by this client's clock (zero once lost),
    /// read at every poll: after a stall the clock already says lost
    /// before any timer fires.
    validity: Arc<dyn Fn() -> Duration + Send + Sync>,
}

impl std::fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LostSignal")
            .field("is_lost", &self.is_lost())
            .finish()
    }
}

impl LostSignal {
    /// A signal from a future that resolves when the hold ends and a check
    /// that tells whether it has: see
    /// [`__private::lost_signal`](crate::__private::lost_signal), through
    /// which `redisync-redlock` reaches it.
    pub(crate) fn new(
        fired: impl Future<Output = ()> + Send + 'static,
        is_lost: impl Fn() -> bool + Send + Sync + 'static,
    ) -> LostSignal {
        LostSignal::with_validity(fired, move || {
            if is_lost() {
                Duration::ZERO
            } else {
                Duration::MAX
            }
        })
    }

    /// A signal from a future that resolves when the hold ends and its
    /// validity (zero once lost, and then for good): see
    /// [`__private::lost_signal_with_validity`](crate::__private::lost_signal_with_validity),
    /// through which `redisync-redlock` reaches it.
    pub(crate) fn with_validity(
        fired: impl Future<Output = ()> + Send + 'static,
        validity: impl Fn() -> Duration + Send + Sync + 'static,
    ) -> LostSignal {
        LostSignal {
            fired: fired.boxed().shared(),
            validity: Arc::new(validity),
        }
    }

    /// A signal that fires with the first of `signals` (a guard over several
    /// locks is lost when one of them is). With no signals it never fires.
    pub fn any(signals: impl IntoIterator<Item = LostSignal>) -> LostSignal {
        let signals: Vec<LostSignal> = signals.into_iter().collect();
        let checks = signals.clone();
        LostSignal::with_validity(
            async move {
                if signals.is_empty() {
                    std::future::pending::<()>().await;
                }
                futures::future::select_all(signals).await;
            },
            move || {
                checks
                    .iter()
                    .map(LostSignal::validity)
                    .min()
                    .unwrap_or(Duration::MAX)
            },
        )
    }

    /// Whether the acquisition is known to no longer hold its lock.
    pub fn is_lost(&self) -> bool {
        self.validity().is_zero()
    }

    /// How much of the hold is left by this client's clock: zero once it is
    /// lost or released, `Duration::MAX` for a signal that knows no lease
    /// and is not lost (such as [`LostSignal::any`] of no signals).
    pub fn validity(&self) -> Duration {
        (self.validity)()
    }

    /// The signal of one hold: it ends when the hold is lost or its last
    /// guard goes.
    pub(crate) fn of_hold(hold: &Arc<Hold>) -> LostSignal {
        let (waits, checks) = (hold.clone(), hold.clone());
        LostSignal::with_validity(async move { waits.lost().await }, move || {
            if checks.is_released() {
                Duration::ZERO
            } else {
                checks.validity()
            }
        })
    }
}

impl Future for LostSignal {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // The clock first: the loss wins over work woken in the same tick.
        // reintroduce: lost-signal-timer-only
        if self.is_lost() {
            return Poll::Ready(());
        }
        Pin::new(&mut self.fired).poll(cx)
    }
}

/// An error a guard's `extend` or release can return, as [`run_locked`]
/// needs to tell it apart.
pub trait GuardError: std::error::Error + Send + Sync + 'static {
    /// The acquisition no longer held its lock (routine after a loss).
    fn is_not_held(&self) -> bool;
}

impl GuardError for crate::error::Error {
    fn is_not_held(&self) -> bool {
        crate::error::Error::is_not_held(self)
    }
}

/// What every guard and permit has: its fencing token, whether it is lost,
/// its validity, `extend`, and its release under one name. Implemented by
/// [`LockGuard`](crate::LockGuard), [`FairLockGuard`](crate::FairLockGuard),
/// [`RwLockGuard`](crate::RwLockGuard) and
/// [`SemaphorePermit`](crate::SemaphorePermit), and by the `RedlockGuard`
/// and `MultiLockGuard` of `redisync-redlock` (whose token for the set is
/// the largest member token), so code such as [`run_locked`] works with any.
pub trait Guard: Send + Sync + Sized + 'static {
    /// What `extend` and `release` fail with.
    type Error: GuardError;

    /// The fencing token of this acquisition (see
    /// [`LockGuard::fencing_token`](crate::LockGuard::fencing_token)).
    fn fencing_token(&self) -> u64;

    /// The fencing token as an `i64`, for stores without unsigned integers
    /// (SQL `BIGINT`). Tokens are always below 2^53, so this is exact.
    fn fencing_token_i64(&self) -> i64 {
        i64::try_from(self.fencing_token()).unwrap_or(i64::MAX)
    }

    /// Whether the acquisition is known to be lost.
    fn is_lost(&self) -> bool;

    /// An owned signal that fires when the acquisition no longer holds its
    /// lock (see [`LostSignal`]).
    fn lost_signal(&self) -> LostSignal;

    /// How much of the lease is left by this client's clock (zero once lost).
    fn validity(&self) -> Duration;

    /// Makes the remaining lease at least `lease` if still held.
    fn extend(&self, lease: Duration) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Releases this acquisition (`unlock()` of a lock guard, `release()` of
    /// a permit). An error for which [`GuardError::is_not_held`] is true
    /// means it had been lost; nothing was written.
    fn release(self) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

// Guards held together as one (see "Several guards" on `run_locked`): the
// first member's token, lost when any member is, the shortest validity;
// extend and release try every member.
macro_rules! guard_tuple {
    ($($g:ident $v:ident $i:tt),+) => {
        impl<E: GuardError, $($g: Guard<Error = E>),+> Guard for ($($g,)+) {
            type Error = E;

            fn fencing_token(&self) -> u64 {
                self.0.fencing_token()
            }

            fn is_lost(&self) -> bool {
                false $(|| self.$i.is_lost())+
            }

            fn lost_signal(&self) -> LostSignal {
                LostSignal::any([$(self.$i.lost_signal()),+])
            }

            fn validity(&self) -> Duration {
                Duration::MAX $(.min(self.$i.validity()))+
            }

            /// Extends every member (all are tried); the first error.
            async fn extend(&self, lease: Duration) -> Result<(), E> {
                let ($($v,)+) = futures::join!($(self.$i.extend(lease)),+);
                Ok(()) $(.and($v))+
            }

            /// Releases every member at once (all are tried): a member
            /// found lost ("not held") first, else the first error.
            async fn release(self) -> Result<(), E> {
                let ($($v,)+) = futures::join!($(self.$i.release()),+);
                let results = [$($v),+];
                let mut first = None;
                for result in results {
                    match result {
                        Err(e) if e.is_not_held() => return Err(e),
                        Err(e) => first = first.or(Some(e)),
                        Ok(()) => {}
                    }
                }
                first.map_or(Ok(()), Err)
            }
        }
    };
}

guard_tuple!(A a 0, B b 1);
guard_tuple!(A a 0, B b 1, C c 2);

/// How [`run_locked`]'s work ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Outcome<T> {
    /// The work ran to its end with the lock held throughout, and the lock
    /// was released.
    Completed(T),
    /// The lock was lost while the work ran: the work was dropped at its
    /// next await point that was not ready at once (what it did before may
    /// need undoing; fencing tokens make the store reject its late writes).
    /// An await whose future is ready when first polled (a message already
    /// waiting, a free mutex) does not yield, so the work runs on through it
    /// within the same poll.
    Cancelled,
    /// The work ran to its end, but the lock was found lost when it ended
    /// or at its release: its last effects may overlap another holder's.
    LostAtEnd(T),
}

impl<T> Outcome<T> {
    /// Whether the work ran to its end with the lock held throughout.
    pub fn held_throughout(&self) -> bool {
        matches!(self, Outcome::Completed(_))
    }

    /// The work's result, if it ran to its end (held throughout or not).
    pub fn into_value(self) -> Option<T> {
        match self {
            Outcome::Completed(v) | Outcome::LostAtEnd(v) => Some(v),
            Outcome::Cancelled => None,
        }
    }
}

/// [`run_locked`] for an acquisition that may not acquire: takes what a
/// `try_lock` (or `try_acquire`) returns, runs `work` only when it acquired,
/// and returns `Ok(None)` when it did not (the wait ran out).
///
/// ```no_run
/// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
/// use std::time::Duration;
/// use redisync::try_run_locked;
///
/// let lock = client.lock("reports:daily");
/// match try_run_locked(lock.try_lock(Duration::ZERO, None), async |guard| {
///     guard.fencing_token()
/// })
/// .await?
/// {
///     Some(outcome) => println!("ran: {outcome:?}"),
///     None => println!("somebody else holds it; skipped"),
/// }
/// # Ok(()) }
/// ```
///
/// # Errors
/// As [`run_locked`].
///
/// # Cancel safety
/// As [`run_locked`].
pub async fn try_run_locked<G, T, A>(
    acquire: A,
    work: impl AsyncFnOnce(&G) -> T,
) -> Result<Option<Outcome<T>>, G::Error>
where
    G: Guard,
    A: Future<Output = Result<Option<G>, G::Error>>,
{
    let Some(guard) = acquire.await? else {
        return Ok(None);
    };
    run_locked(std::future::ready(Ok(guard)), work)
        .await
        .map(Some)
}

/// Acquires with `acquire`, runs `work` with the guard, cancels the work
/// (dropping it at its next await point) as soon as the lock is lost, then
/// releases the lock, and tells how it went.
///
/// The loss is checked first (a `biased` select): work is never polled
/// once the lock is known to be lost. The lock is released whatever
/// happened (also when the work panics: the guard's `Drop` releases it).
///
/// ```no_run
/// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
/// use redisync::{run_locked, Outcome};
///
/// let lock = client.lock("orders:42");
/// let outcome = run_locked(lock.lock(), async |guard| {
///     // ... write with guard.fencing_token_i64() ...
///     guard.fencing_token()
/// })
/// .await?;
/// match outcome {
///     Outcome::Completed(token) => println!("done under token {token}"),
///     Outcome::Cancelled => println!("lost the lock; the work was stopped"),
///     Outcome::LostAtEnd(_) => println!("finished, but the lock was gone at the end"),
/// }
/// # Ok(()) }
/// ```
///
/// # Several guards
///
/// A tuple of two or three guards is a [`Guard`] too: a lock and a permit,
/// say. The work is cancelled when any of them is lost (a signal combined
/// by hand would fire on `run_locked`'s own release), and all are released
/// at the end. The tuple's token is its first guard's (put the guard whose
/// token the store checks first); its validity is the shortest.
///
/// ```no_run
/// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
/// use redisync::run_locked;
///
/// let job = client.lock("exports:daily");
/// let slots = client.semaphore("exports").with_permits(3);
/// let acquire = async { Ok((job.lock().await?, slots.acquire(1).await?)) };
/// let outcome = run_locked(acquire, async |(lock, _permit)| {
///     // ... write with lock.fencing_token() ...
/// })
/// .await?;
/// if !outcome.held_throughout() {
///     println!("the lock or the permit was lost: the export stopped");
/// }
/// # Ok(()) }
/// ```
///
/// # Errors
/// What `acquire` fails with. A release that fails for another reason than
/// "not held" (Redis unreachable) still counts as held throughout when the
/// lock was not known lost at the end: its release is retried in the
/// background or it ends with its lease.
///
/// # Cancel safety
/// Cancel safe: dropping the future drops the work and the guard, whose
/// `Drop` releases the lock in the background.
pub async fn run_locked<G, T, A>(
    acquire: A,
    work: impl AsyncFnOnce(&G) -> T,
) -> Result<Outcome<T>, G::Error>
where
    G: Guard,
    A: Future<Output = Result<G, G::Error>>,
{
    let guard = acquire.await?;
    let lost = guard.lost_signal();
    let finished = {
        let work = work(&guard);
        tokio::select! {
            biased;
            () = lost.clone() => None,
            value = work => Some(value),
        }
    };
    let held_at_end = !guard.is_lost();
    let released = guard.release().await;
    Ok(match (finished, released) {
        (None, _) => Outcome::Cancelled,
        (Some(value), Err(e)) if e.is_not_held() => Outcome::LostAtEnd(value),
        (Some(value), Err(e)) => {
            if held_at_end {
                tracing::debug!(error = %e, "release after run_locked failed; the lock ends with its lease");
                Outcome::Completed(value)
            } else {
                Outcome::LostAtEnd(value)
            }
        }
        (Some(value), Ok(())) if held_at_end => Outcome::Completed(value),
        (Some(value), Ok(())) => Outcome::LostAtEnd(value),
    })
}
