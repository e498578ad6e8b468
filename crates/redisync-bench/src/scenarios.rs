//! The measured scenarios described in BENCHMARKS.md: S1 (uncontended), S2 (contended loop),
//! S3 (the blog-post scenario: N requests at once, each once) and S5 (many
//! keys: workers loop over randomly picked keys, on one node or a cluster).
//!
//! Every worker uses the `redisync::Lock` (or `FairLock`, ...) handle of one
//! shared `redisync::Client` (or, with `--clients N`, of client `worker % N`),
//! acquires with `try_lock(wait, lease)`, holds the lock for the simulated
//! work and releases it with `LockGuard::unlock`. The spin baseline
//! (`crate::spin`) goes through the same code. An
//! in-process holder counter (incremented right after acquire returns,
//! decremented right before release is called) and an overlap check over the
//! recorded hold intervals detect mutual-exclusion violations (S5: one
//! counter per key, and the overlap check per key).
//!
//! One file per scenario family: `s1` (uncontended), `contended` (S2 and
//! S3: workers on one key), `many_keys` (S5); this file holds the lock
//! under test and the calls they share.

use serde_json::{Map, Value};
use std::time::Duration;

mod contended;
mod many_keys;
mod s1;

pub(crate) use contended::{run_s2, run_s3};
pub(crate) use many_keys::run_s5;
pub(crate) use s1::run_s1;

/// How long S1 and the S2 loop let one `try_lock` call wait. S2 workers wait
/// "as long as needed": a `None` after this long is counted under
/// `acquire_failures` and the worker calls again.
const CALL_WAIT: Duration = Duration::from_secs(10);
/// A library call that has not returned this long after its own wait limit
/// is reported as an error (and abandoned) instead of hanging the benchmark.
const CALL_SLACK: Duration = Duration::from_secs(5);
/// The lock under test: the reentrant `Lock`, (`--kind fair`) the
/// `FairLock`, or (three ports) a `Redlock` over three `Lock`s; they have
/// the same methods.
#[derive(Clone)]
pub(crate) enum Handle {
    Lock(redisync::Lock),
    Fair(redisync::FairLock),
    /// A `Semaphore` with one permit, used as a mutex (its permits are
    /// always watchdog-leased: the fixed lease does not apply).
    Semaphore(redisync::Semaphore),
    /// The write side of an `RwLock`.
    Write(redisync::WriteLock),
    Redlock(redisync_redlock::Redlock),
    /// The naive spin-lock baseline (fixed lease only).
    Spin(crate::spin::SpinLock),
    /// The peer rslock (fixed lease only).
    Rslock(crate::peers::Rslock),
    /// A floor: "acquire" and "release" are one empty round trip each.
    Floor(crate::peers::Floor),
}

/// A guard of any kind.
pub(crate) enum Guard {
    Lock(redisync::LockGuard),
    Fair(redisync::FairLockGuard),
    Semaphore(redisync::SemaphorePermit),
    Rw(redisync::RwLockGuard),
    Redlock(redisync_redlock::RedlockGuard),
    Spin(crate::spin::SpinGuard),
    Rslock(crate::peers::Rslock, rslock::Lock),
    Floor(crate::peers::Floor),
}

impl Handle {
    async fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<Guard>, String> {
        let text = |e: &dyn std::fmt::Display| e.to_string();
        Ok(match self {
            Handle::Lock(l) => l
                .try_lock(wait, lease)
                .await
                .map_err(|e| text(&e))?
                .map(Guard::Lock),
            Handle::Fair(l) => l
                .try_lock(wait, lease)
                .await
                .map_err(|e| text(&e))?
                .map(Guard::Fair),
            Handle::Redlock(l) => l
                .try_lock(wait, lease)
                .await
                .map_err(|e| text(&e))?
                .map(Guard::Redlock),
            Handle::Semaphore(s) => s
                .try_acquire(1, wait)
                .await
                .map_err(|e| text(&e))?
                .map(Guard::Semaphore),
            Handle::Write(l) => l
                .try_lock(wait, lease)
                .await
                .map_err(|e| text(&e))?
                .map(Guard::Rw),
            Handle::Spin(l) => {
                let ttl =
                    lease.ok_or("the spin baseline has no watchdog: it needs a fixed lease")?;
                l.try_lock(wait, ttl).await?.map(Guard::Spin)
            }
            Handle::Rslock(l) => {
                let ttl = lease.ok_or("rslock has no watchdog: it needs a fixed lease")?;
                l.try_lock(wait, ttl)
                    .await?
                    .map(|lock| Guard::Rslock(l.clone(), lock))
            }
            Handle::Floor(f) => {
                f.acquire().await?;
                Some(Guard::Floor(f.clone()))
            }
        })
    }
}

impl Guard {
    /// `None` for the spin baseline, which has no fencing token.
    fn fencing_token(&self) -> Option<u64> {
        match self {
            Guard::Lock(g) => Some(g.fencing_token()),
            Guard::Fair(g) => Some(g.fencing_token()),
            Guard::Semaphore(p) => Some(p.fencing_token()),
            Guard::Rw(g) => Some(g.fencing_token()),
            Guard::Redlock(g) => Some(g.fencing_token()),
            Guard::Spin(_) | Guard::Rslock(..) | Guard::Floor(_) => None,
        }
    }

    async fn unlock(self) -> Result<(), String> {
        match self {
            Guard::Lock(g) => g.unlock().await.map_err(|e| e.to_string()),
            Guard::Fair(g) => g.unlock().await.map_err(|e| e.to_string()),
            Guard::Redlock(g) => g.unlock().await.map_err(|e| e.to_string()),
            Guard::Semaphore(p) => p.release().await.map_err(|e| e.to_string()),
            Guard::Rw(g) => g.unlock().await.map_err(|e| e.to_string()),
            Guard::Spin(g) => g.unlock().await,
            Guard::Rslock(l, lock) => {
                l.unlock(&lock).await;
                Ok(())
            }
            Guard::Floor(f) => f.release().await,
        }
    }
}

/// The lock under test plus the lease every acquisition asks for.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) lock: Handle,
    /// `Some(ttl)`: fixed lease; `None`: watchdog.
    pub(crate) lease: Option<Duration>,
}

impl Target {
    /// One `try_lock` call, bounded by `wait + CALL_SLACK` in case the
    /// library hangs.
    async fn try_lock(&self, wait: Duration) -> Result<Option<Guard>, String> {
        match tokio::time::timeout(wait + CALL_SLACK, self.lock.try_lock(wait, self.lease)).await {
            Ok(Ok(guard)) => Ok(guard),
            Ok(Err(e)) => Err(format!("try_lock: {e}")),
            Err(_) => Err(format!(
                "try_lock({wait:?}) had not returned {CALL_SLACK:?} after its wait ran out"
            )),
        }
    }

    /// Acquire with `wait`, or fail.
    pub(crate) async fn acquire(&self, wait: Duration) -> Result<Guard, String> {
        self.try_lock(wait)
            .await?
            .ok_or_else(|| format!("could not acquire an uncontended lock within {wait:?}"))
    }
}

/// Release, bounded by `CALL_SLACK`.
async fn release(guard: Guard) -> Result<(), String> {
    match tokio::time::timeout(CALL_SLACK, guard.unlock()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("unlock: {e}")),
        Err(_) => Err(format!("unlock had not returned after {CALL_SLACK:?}")),
    }
}

/// The critical section's work. tokio's timer has 1 ms granularity (a 2 ms
/// `tokio::time::sleep` lasts ~3 ms), so like the other Rust driver we sleep
/// with `std::thread::sleep` on the blocking pool (~2.05 ms for 2 ms); only
/// the lock holder ever does this.
async fn simulated_work(hold: Duration) {
    // A panic in a plain sleep cannot happen; ignoring the JoinError is fine.
    let _ = tokio::task::spawn_blocking(move || std::thread::sleep(hold)).await;
}

/// One acquire/release pair, for the warm-up before any scenario.
pub(crate) async fn warm_up(target: &Target) -> Result<(), String> {
    release(target.acquire(CALL_WAIT).await?).await
}

fn duration_ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn into_map(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}
