//! The one guard trait, the owned lost signal and `run_locked`, for every
//! guard and permit, against a real redis-server.

use crate::common;

use std::future::Future;
use std::time::Duration;

use common::Env;
use fred::prelude::*;
use redisync::{run_locked, Client, Guard, GuardError, Outcome};

/// Bound on every wait for an event; only reached when the code is wrong.
const EVENT_LIMIT: Duration = Duration::from_secs(20);
/// Watchdog lease of the clients here: a key deleted behind a guard's back
/// is found gone by the next renewal (every lease/3); long enough that a
/// stalled test process does not lose a guard it keeps.
const LEASE: Duration = Duration::from_millis(1500);

async fn within<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(EVENT_LIMIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no progress within {EVENT_LIMIT:?}"))
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Lock,
    Fair,
    Read,
    Write,
    Semaphore,
}

const KINDS: [Kind; 5] = [
    Kind::Lock,
    Kind::Fair,
    Kind::Read,
    Kind::Write,
    Kind::Semaphore,
];

impl Kind {
    /// The keys that hold a guard of this kind (deleting them loses it).
    fn hold_keys(self, name: &str) -> Vec<String> {
        match self {
            Kind::Lock => vec![common::key("lock", "hold", name)],
            Kind::Fair => vec![common::key("fair", "hold", name)],
            Kind::Read | Kind::Write => vec![common::key("rw", "hold", name)],
            Kind::Semaphore => vec![
                common::key("sem", "hold", name),
                common::key("sem", "leases", name),
            ],
        }
    }
}

/// Runs `check` with a fresh watchdog guard of `kind` on `name`, through the
/// `Guard` trait only.
macro_rules! with_guard {
    ($client:expr, $kind:expr, $name:expr, $check:ident $(, $arg:expr)*) => {{
        let (client, name): (&Client, &str) = (&$client, &$name);
        match $kind {
            Kind::Lock => $check(client.lock(name).lock() $(, $arg)*).await,
            Kind::Fair => $check(client.fair_lock(name).lock() $(, $arg)*).await,
            Kind::Read => $check(client.rw_lock(name).read().lock() $(, $arg)*).await,
            Kind::Write => $check(client.rw_lock(name).write().lock() $(, $arg)*).await,
            Kind::Semaphore => {
                let sem = client.semaphore(name);
                sem.try_set_permits(1).await.unwrap();
                $check(Box::pin(async move { sem.acquire(1).await }) $(, $arg)*).await
            }
        }
    }};
}

async fn trait_methods<G: Guard<Error = redisync::Error>>(
    acquire: impl Future<Output = redisync::Result<G>>,
) {
    let g = acquire.await.unwrap();
    assert_eq!(
        g.fencing_token_i64(),
        i64::try_from(g.fencing_token()).unwrap()
    );
    assert!(g.fencing_token() < 1 << 53);
    assert!(!g.is_lost());
    assert!(g.validity() > Duration::ZERO && g.validity() <= LEASE);
    g.extend(LEASE * 2).await.unwrap();
    assert!(g.validity() > LEASE);
    let signal = g.lost_signal();
    assert!(!signal.is_lost());
    g.release().await.unwrap();
    // Released: the owned signal fires (the acquisition is no longer held).
    within("signal after release", signal.clone()).await;
    assert!(signal.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_guard_has_the_trait_methods() {
    let env = Env::start().await;
    let client = env.client_with_watchdog(LEASE).await;
    for kind in KINDS {
        with_guard!(client, kind, format!("trait-{kind:?}"), trait_methods);
    }
    client.shutdown().await.unwrap();
}

/// The owned signal moves into another task and fires there when the lock
/// is lost behind the guard's back (its key deleted: the watchdog's next
/// renewal finds it gone); the guard's release then says "not held".
async fn signal_in_another_task<G: Guard<Error = redisync::Error>>(
    acquire: impl Future<Output = redisync::Result<G>>,
    admin: &fred::clients::Client,
    key: Vec<String>,
) {
    let g = acquire.await.unwrap();
    let signal = g.lost_signal();
    let watcher = tokio::spawn(async move {
        signal.await;
        "fired"
    });
    let _: i64 = admin.del(key).await.unwrap();
    assert_eq!(within("signal in a task", watcher).await.unwrap(), "fired");
    assert!(g.is_lost());
    let e = g.release().await.unwrap_err();
    assert!(GuardError::is_not_held(&e), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_signal_fires_in_another_task() {
    let env = Env::start().await;
    let client = env.client_with_watchdog(LEASE).await;
    for kind in KINDS {
        let name = format!("signal-{kind:?}");
        let key = kind.hold_keys(&name);
        with_guard!(client, kind, name, signal_in_another_task, &env.admin, key);
    }
    client.shutdown().await.unwrap();
}

/// `run_locked` ends each of the three ways for every kind: work that runs
/// to its end, work cancelled by a loss while it waits, and work that ends
/// right after learning of the loss.
async fn three_outcomes<G, A>(
    acquire: impl Fn() -> A,
    admin: &fred::clients::Client,
    key: Vec<String>,
    set: bool,
) where
    G: Guard<Error = redisync::Error>,
    A: Future<Output = redisync::Result<G>>,
{
    let outcome = run_locked(acquire(), async |g: &G| g.fencing_token())
        .await
        .unwrap();
    assert!(outcome.held_throughout());
    let first = outcome.into_value().unwrap();

    let outcome = run_locked(acquire(), async |g: &G| {
        assert!(g.fencing_token() > first);
        let _: i64 = admin.del(key.clone()).await.unwrap();
        // Waits for ever: only the loss ends it.
        std::future::pending::<()>().await;
    });
    assert_eq!(
        within("cancelled", outcome).await.unwrap(),
        Outcome::Cancelled
    );

    let outcome = run_locked(acquire(), async |g: &G| {
        let _: i64 = admin.del(key.clone()).await.unwrap();
        // Learns of the loss and returns in the same step.
        g.extend(LEASE).await.is_err()
    });
    let outcome = within("lost at end", outcome).await.unwrap();
    if set {
        // The member found lost says so before the others' extensions
        // answer: the work may be cancelled at that await instead.
        assert!(
            matches!(outcome, Outcome::LostAtEnd(true) | Outcome::Cancelled),
            "{outcome:?}"
        );
    } else {
        assert_eq!(outcome, Outcome::LostAtEnd(true));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_locked_completes_cancels_or_reports_a_late_loss() {
    let env = Env::start().await;
    let client = env.client_with_watchdog(LEASE).await;
    for kind in KINDS {
        let name = format!("outcome-{kind:?}");
        let key = kind.hold_keys(&name);
        let c = &client;
        let n = name.as_str();
        match kind {
            Kind::Lock => {
                let h = c.lock(n);
                Box::pin(three_outcomes(|| h.lock(), &env.admin, key, false)).await;
            }
            Kind::Fair => {
                let h = c.fair_lock(n);
                Box::pin(three_outcomes(|| h.lock(), &env.admin, key, false)).await;
            }
            Kind::Read => {
                let h = c.rw_lock(n).read();
                Box::pin(three_outcomes(|| h.lock(), &env.admin, key, false)).await;
            }
            Kind::Write => {
                let h = c.rw_lock(n).write();
                Box::pin(three_outcomes(|| h.lock(), &env.admin, key, false)).await;
            }
            Kind::Semaphore => {
                let sem = c.semaphore(n);
                let acquire = || {
                    let sem = sem.clone();
                    async move {
                        // The delete also removed the permits: set them again.
                        sem.try_set_permits(1).await?;
                        sem.acquire(1).await
                    }
                };
                Box::pin(three_outcomes(acquire, &env.admin, key, false)).await;
            }
        }
    }
    client.shutdown().await.unwrap();
}

/// `run_locked` over a lock and a permit (a tuple is a guard): completes;
/// is cancelled when either member is lost (not by its own release); says
/// lost at end when one is found lost as the work ends; and lets both go
/// every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_locked_over_a_lock_and_a_permit() {
    let env = Env::start().await;
    let client = env.client_with_watchdog(LEASE).await;
    for lost in [Kind::Lock, Kind::Semaphore] {
        let name = format!("pair-{lost:?}");
        let lock = client.lock(&name);
        let sem = client.semaphore(&name).with_permits(1);
        let acquire = || {
            let (lock, sem) = (lock.clone(), sem.clone());
            async move { Ok((lock.lock().await?, sem.acquire(1).await?)) }
        };
        Box::pin(three_outcomes(
            acquire,
            &env.admin,
            lost.hold_keys(&name),
            true,
        ))
        .await;
        // Both were let go (the member found lost and the other).
        let again = client.lock(&name).try_lock(Duration::ZERO, None).await;
        assert!(again.unwrap().is_some(), "{lost:?}: the lock is free");
        let permit = sem.try_acquire(1, Duration::ZERO).await.unwrap();
        assert!(permit.is_some(), "{lost:?}: the permit is free");
    }
    client.shutdown().await.unwrap();
}

/// Work that panics inside `run_locked` still lets the lock go: another
/// client gets it (no wait for the lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_locked_releases_when_the_work_panics() {
    let env = Env::start().await;
    let client = env.client().await;
    let lock = client.lock("panics");
    let task = tokio::spawn(async move {
        run_locked(lock.lock(), async |_: &redisync::LockGuard| -> u32 {
            panic!("work failed")
        })
        .await
    });
    assert!(task.await.unwrap_err().is_panic());
    let other = env.client().await;
    let g = within("lock after a panic", other.lock("panics").lock())
        .await
        .unwrap();
    // Well within the 30 s watchdog lease: released, not expired.
    g.unlock().await.unwrap();
    client.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

/// `try_run_locked` takes a `try_lock`'s result both ways: acquired, the
/// work runs and the lock is released; not acquired (another client holds
/// it), the work never runs and the answer is `Ok(None)`.
async fn try_both_ways<G, A>(
    try_acquire: impl Fn() -> A,
    holder: impl Future<Output = Box<dyn std::any::Any + Send>>,
    is_free: impl AsyncFn() -> bool,
) where
    G: Guard<Error = redisync::Error>,
    A: Future<Output = redisync::Result<Option<G>>>,
{
    let outcome = redisync::try_run_locked(try_acquire(), async |g: &G| g.fencing_token())
        .await
        .unwrap()
        .expect("acquired when free");
    assert!(outcome.held_throughout());
    assert!(is_free().await, "released after the work");
    let held = holder.await;
    let mut ran = false;
    let skipped = redisync::try_run_locked(try_acquire(), async |_: &G| ran = true)
        .await
        .unwrap();
    assert!(skipped.is_none(), "acquired while another client holds it");
    assert!(!ran, "the work ran without the lock");
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_run_locked_runs_when_acquired_and_says_none_when_not() {
    let env = Env::start().await;
    let client = env.client().await;
    let other = env.client().await;
    let no_wait = Duration::ZERO;
    for kind in KINDS {
        let n = format!("try-run-{kind:?}");
        let n = n.as_str();
        match kind {
            Kind::Lock => {
                let h = client.lock(n);
                let o = other.lock(n);
                let holder =
                    async { Box::new(o.lock().await.unwrap()) as Box<dyn std::any::Any + Send> };
                let free = async || !h.is_locked().await.unwrap();
                try_both_ways(|| h.try_lock(no_wait, None), holder, free).await;
            }
            Kind::Fair => {
                let h = client.fair_lock(n);
                let o = other.fair_lock(n);
                let holder =
                    async { Box::new(o.lock().await.unwrap()) as Box<dyn std::any::Any + Send> };
                let free = async || !h.is_locked().await.unwrap();
                try_both_ways(|| h.try_lock(no_wait, None), holder, free).await;
            }
            Kind::Read => {
                let h = client.rw_lock(n);
                let o = other.rw_lock(n);
                let holder = async {
                    Box::new(o.write().lock().await.unwrap()) as Box<dyn std::any::Any + Send>
                };
                let read = h.read();
                let free = async || !h.write().is_locked().await.unwrap();
                try_both_ways(|| read.try_lock(no_wait, None), holder, free).await;
            }
            Kind::Write => {
                let h = client.rw_lock(n);
                let o = other.rw_lock(n);
                let holder = async {
                    Box::new(o.read().lock().await.unwrap()) as Box<dyn std::any::Any + Send>
                };
                let write = h.write();
                let free = async || !write.is_locked().await.unwrap();
                try_both_ways(|| write.try_lock(no_wait, None), holder, free).await;
            }
            Kind::Semaphore => {
                let h = client.semaphore(n).with_permits(1);
                let o = other.semaphore(n).with_permits(1);
                let holder = async {
                    Box::new(o.acquire(1).await.unwrap()) as Box<dyn std::any::Any + Send>
                };
                let free = async || h.available_permits().await.unwrap() == 1;
                try_both_ways(|| h.try_acquire(1, no_wait), holder, free).await;
            }
        }
    }
}
