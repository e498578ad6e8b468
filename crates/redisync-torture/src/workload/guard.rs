//! A held guard of any kind ([`Guard`]), a lock to acquire ([`Target`],
//! through every acquisition form), and how an acquisition went.

use std::time::Duration;

use redisync::__private;
use redisync::{
    FairLock, FairLockGuard, Lock, LockGuard, ReadLock, RwLockGuard, Semaphore, SemaphorePermit,
    WriteLock,
};
use redisync_redlock::{MultiLock, MultiLockGuard, Redlock, RedlockGuard};

use super::{min_token, Ctx, How};

/// A held guard of any kind.
pub(crate) enum Guard {
    Lock(LockGuard),
    Fair(FairLockGuard),
    Rw(RwLockGuard),
    Semaphore(SemaphorePermit),
    Multi(MultiLockGuard),
    Redlock(RedlockGuard),
}

impl Guard {
    pub(super) fn token(&self) -> u64 {
        match self {
            Guard::Lock(g) => g.fencing_token(),
            Guard::Fair(g) => g.fencing_token(),
            Guard::Rw(g) => g.fencing_token(),
            Guard::Semaphore(p) => p.fencing_token(),
            Guard::Multi(g) => g.fencing_tokens().first().copied().unwrap_or(0),
            Guard::Redlock(g) => g.fencing_token(),
        }
    }

    pub(super) fn is_lost(&self) -> bool {
        match self {
            Guard::Lock(g) => g.is_lost(),
            Guard::Fair(g) => g.is_lost(),
            Guard::Rw(g) => g.is_lost(),
            Guard::Semaphore(p) => p.is_lost(),
            Guard::Multi(g) => g.is_lost(),
            Guard::Redlock(g) => g.is_lost(),
        }
    }

    /// `hand_off()` (of a `Lock` or `FairLock` guard: others do nothing).
    pub(super) async fn hand_off(&mut self) -> Result<(), String> {
        let r = match self {
            Guard::Lock(g) => g.hand_off().await,
            Guard::Fair(g) => g.hand_off().await,
            _ => return Ok(()),
        };
        r.map_err(|e| e.to_string())
    }

    /// The operation of [`Guard::hand_off`]; `None` for kinds without one.
    pub(super) fn hand_off_op(&self) -> Option<&'static str> {
        match self {
            Guard::Lock(_) => Some("LockGuard::hand_off"),
            Guard::Fair(_) => Some("FairLockGuard::hand_off"),
            _ => None,
        }
    }

    /// `extend` (of a kind that has one, see [`Guard::extend_op`]).
    pub(super) async fn extend(&self, lease: Duration) -> Result<(), String> {
        match self {
            Guard::Lock(g) => g.extend(lease).await.map_err(|e| e.to_string()),
            Guard::Fair(g) => g.extend(lease).await.map_err(|e| e.to_string()),
            Guard::Rw(g) => g.extend(lease).await.map_err(|e| e.to_string()),
            Guard::Redlock(g) => g.extend(lease).await.map_err(|e| e.to_string()),
            Guard::Semaphore(p) => p.extend(lease).await.map_err(|e| e.to_string()),
            Guard::Multi(_) => Ok(()),
        }
    }

    /// The operation of [`Guard::extend`]; `None` for kinds without one.
    pub(super) fn extend_op(&self) -> Option<&'static str> {
        Some(match self {
            Guard::Lock(_) => "LockGuard::extend",
            Guard::Fair(_) => "FairLockGuard::extend",
            Guard::Rw(_) => "RwLockGuard::extend",
            Guard::Redlock(_) => "RedlockGuard::extend",
            Guard::Semaphore(_) => "SemaphorePermit::extend",
            Guard::Multi(_) => return None,
        })
    }

    /// Resolves when the guard is known lost (kinds with `lost`, see
    /// [`Guard::lost_op`]; others at once).
    pub(super) async fn lost(&self) {
        match self {
            Guard::Lock(g) => g.lost().await,
            Guard::Fair(g) => g.lost().await,
            Guard::Rw(g) => g.lost().await,
            Guard::Semaphore(p) => p.lost().await,
            Guard::Multi(_) | Guard::Redlock(_) => {}
        }
    }

    /// The operation of [`Guard::lost`]; `None` for kinds without one.
    pub(super) fn lost_op(&self) -> Option<&'static str> {
        Some(match self {
            Guard::Lock(_) => "LockGuard::lost",
            Guard::Fair(_) => "FairLockGuard::lost",
            Guard::Rw(_) => "RwLockGuard::lost",
            Guard::Semaphore(_) => "SemaphorePermit::lost",
            Guard::Multi(_) | Guard::Redlock(_) => return None,
        })
    }

    /// The operation of [`Guard::release`].
    pub(super) fn release_op(&self) -> &'static str {
        match self {
            Guard::Lock(_) => "LockGuard::unlock",
            Guard::Fair(_) => "FairLockGuard::unlock",
            Guard::Rw(_) => "RwLockGuard::unlock",
            Guard::Semaphore(_) => "SemaphorePermit::release",
            Guard::Multi(_) => "MultiLockGuard::unlock",
            Guard::Redlock(_) => "RedlockGuard::unlock",
        }
    }

    pub(super) async fn release(self) -> Result<(), String> {
        match self {
            Guard::Lock(g) => g.unlock().await.map_err(|e| e.to_string()),
            Guard::Fair(g) => g.unlock().await.map_err(|e| e.to_string()),
            Guard::Rw(g) => g.unlock().await.map_err(|e| e.to_string()),
            Guard::Semaphore(p) => p.release().await.map_err(|e| e.to_string()),
            Guard::Multi(g) => g.unlock().await.map_err(|e| e.to_string()),
            Guard::Redlock(g) => g.unlock().await.map_err(|e| e.to_string()),
        }
    }
}

/// A lock to acquire.
#[derive(Clone)]
pub(crate) enum Target {
    Lock(Lock),
    Fair(FairLock),
    Read(ReadLock),
    Write(WriteLock),
    Semaphore(Semaphore, u32),
    Multi(MultiLock),
    Redlock(Redlock),
}

/// Why an acquisition failed.
pub(super) struct Failed {
    pub(super) text: String,
    pub(super) upgrade_refused: bool,
    pub(super) not_initialized: bool,
}

impl Failed {
    pub(super) fn of(e: &redisync::Error) -> Failed {
        Failed {
            text: e.to_string(),
            upgrade_refused: matches!(e, redisync::Error::UpgradeNotSupported { .. }),
            not_initialized: matches!(e, redisync::Error::NotInitialized { .. }),
        }
    }

    fn text(e: &dyn std::fmt::Display) -> Failed {
        Failed {
            text: e.to_string(),
            upgrade_refused: false,
            not_initialized: false,
        }
    }
}

impl Target {
    /// The operation of [`Target::acquire`].
    fn op(&self) -> &'static str {
        match self {
            Target::Lock(_) => "Lock::try_lock",
            Target::Fair(_) => "FairLock::try_lock",
            Target::Read(_) => "ReadLock::try_lock",
            Target::Write(_) => "WriteLock::try_lock",
            Target::Semaphore(..) => "Semaphore::try_acquire",
            Target::Multi(_) => "MultiLock::try_lock",
            Target::Redlock(_) => "Redlock::try_lock",
        }
    }

    /// Acquires through [`Ctx::call`].
    pub(super) async fn call(
        &self,
        ctx: &mut Ctx,
        how: How,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Option<Result<Option<Guard>, Failed>> {
        if !wait.is_zero() && ctx.chance(30) {
            return acquire_form(ctx, self, how, wait, lease).await;
        }
        ctx.call(self.op(), how, self.acquire(wait, lease)).await
    }

    async fn acquire(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<Guard>, Failed> {
        match self {
            Target::Lock(l) => l
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Guard::Lock))
                .map_err(|e| Failed::of(&e)),
            Target::Fair(l) => l
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Guard::Fair))
                .map_err(|e| Failed::of(&e)),
            Target::Read(l) => l
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Guard::Rw))
                .map_err(|e| Failed::of(&e)),
            Target::Write(l) => l
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Guard::Rw))
                .map_err(|e| Failed::of(&e)),
            Target::Semaphore(s, permits) => match s.try_acquire(*permits, wait).await {
                Ok(p) => Ok(p.map(Guard::Semaphore)),
                Err(e) => Err(Failed::of(&e)),
            },
            Target::Multi(m) => m
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Guard::Multi))
                .map_err(|e| Failed::text(&e)),
            Target::Redlock(r) => r
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Guard::Redlock))
                .map_err(|e| Failed::text(&e)),
        }
    }
}

/// How an acquisition went.
pub(super) enum Got {
    Guard(Guard),
    Busy,
    Cancelled,
    Failed(Failed),
}

/// The forms of acquisition besides `try_lock`/`try_acquire` (30 % of
/// acquisitions with a wait): `lock`, `lock_with_lease`,
/// `try_lock_with_min_token`, `acquire`, `acquire_with_lease`,
/// `try_acquire_with_lease`. The forms without a wait are cut by the
/// workload's deadline `wait` (a timeout, not a busy answer).
pub(super) async fn acquire_form(
    ctx: &mut Ctx,
    target: &Target,
    how: How,
    wait: Duration,
    lease: Option<Duration>,
) -> Option<Result<Option<Guard>, Failed>> {
    let bounded = Ctx::bounded(how, wait);
    let form = ctx.rng.below(3);
    // The lease asked for decides between `lock` (the watchdog's) and
    // `lock_with_lease`: the section believes in that lease.
    match (target, form, lease) {
        (Target::Lock(l), 2, _) => {
            let min = min_token(ctx, l.name());
            let asked = async {
                __private::try_lock_with_min_token(l, wait, lease, min)
                    .await
                    .map(|g| g.map(Guard::Lock))
                    .map_err(|e| Failed::of(&e))
            };
            ctx.call("Lock::try_lock_with_min_token", how, asked).await
        }
        (Target::Lock(l), _, None) => {
            ctx.call("Lock::lock", bounded, guard(l.lock(), Guard::Lock))
                .await
        }
        (Target::Lock(l), _, Some(d)) => {
            let asked = guard(l.lock_with_lease(d), Guard::Lock);
            ctx.call("Lock::lock_with_lease", bounded, asked).await
        }
        (Target::Fair(l), _, Some(d)) => {
            let asked = guard(l.lock_with_lease(d), Guard::Fair);
            ctx.call("FairLock::lock_with_lease", bounded, asked).await
        }
        (Target::Fair(l), _, None) => {
            ctx.call("FairLock::lock", bounded, guard(l.lock(), Guard::Fair))
                .await
        }
        (Target::Read(l), _, Some(d)) => {
            let asked = guard(l.lock_with_lease(d), Guard::Rw);
            ctx.call("ReadLock::lock_with_lease", bounded, asked).await
        }
        (Target::Read(l), _, None) => {
            ctx.call("ReadLock::lock", bounded, guard(l.lock(), Guard::Rw))
                .await
        }
        (Target::Write(l), _, Some(d)) => {
            let asked = guard(l.lock_with_lease(d), Guard::Rw);
            ctx.call("WriteLock::lock_with_lease", bounded, asked).await
        }
        (Target::Write(l), _, None) => {
            ctx.call("WriteLock::lock", bounded, guard(l.lock(), Guard::Rw))
                .await
        }
        (Target::Semaphore(s, n), 0, _) | (Target::Semaphore(s, n), _, None) => {
            let asked = guard(s.acquire(*n), Guard::Semaphore);
            ctx.call("Semaphore::acquire", bounded, asked).await
        }
        (Target::Semaphore(s, n), 1, Some(d)) => {
            let asked = guard(s.acquire_with_lease(*n, d), Guard::Semaphore);
            ctx.call("Semaphore::acquire_with_lease", bounded, asked)
                .await
        }
        (Target::Semaphore(s, n), _, Some(d)) => {
            let asked = async {
                s.try_acquire_with_lease(*n, wait, d)
                    .await
                    .map(|g| g.map(Guard::Semaphore))
                    .map_err(|e| Failed::of(&e))
            };
            ctx.call("Semaphore::try_acquire_with_lease", how, asked)
                .await
        }
        (Target::Multi(_) | Target::Redlock(_), _, _) => {
            let op = target.op();
            ctx.call(op, how, target.acquire(wait, lease)).await
        }
    }
}

/// A method that waits without a bound, as `try_lock` answers.
async fn guard<G>(
    asked: impl std::future::Future<Output = redisync::Result<G>>,
    into: impl FnOnce(G) -> Guard,
) -> Result<Option<Guard>, Failed> {
    asked
        .await
        .map(|g| Some(into(g)))
        .map_err(|e| Failed::of(&e))
}
