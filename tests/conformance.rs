//! The conformance matrix: one set of scenarios run against every kind of
//! lock (`Lock`, `FairLock`, both sides of `RwLock`, a one-permit
//! `Semaphore`), each against its own fresh redis-server.
//!
//! The adapter ([`Kind`], [`AnyGuard`]) hides the differences between the
//! primitives; the table at the end ([`conformance!`]) expands every
//! (kind, scenario) cell into one test `<kind>::<scenario>`, and marks cells
//! `ok` (a test), `na` (the scenario cannot be expressed for the kind: no
//! test) or `ignore("defect N: ...")` (a test that fails today). A new kind
//! is one more variant in [`Kind`] and one more row in the table.
//!
//! The endings dimension: every call that changes who
//! holds a name ([`Op`]: acquire, unlock, extend, hand-off, force-unlock,
//! downgrade) ended each [`Ending`] (a reply, an error reply, an unknown
//! outcome, never sent), each provoked every [`Way`] that applies, is one
//! cell `<op>_ending_<ending>` per kind, run by one driver ([`end_call`]):
//! never two holders, a guard whose call may have removed its hold says
//! lost, a name nobody holds is free within [`LIVE`] (not a lease), and an
//! error reply writes nothing.
//!
//! Not in the matrix: undoing an acquisition that replicas did not
//! acknowledge; `tests/connection/replica_sync.rs` already covers it for every primitive.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use common::{eventually, on_one_thread, stall, woken_at_once, Env};
use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};
use redisync::{Client, Error, FairLockGuard, LockGuard, RwLockGuard, SemaphorePermit};
use tokio::time::{sleep, timeout, Instant};

/// `wait` for [`Kind::acquire`]: wait without a deadline (`lock()`, `acquire()`).
const FOREVER: Duration = Duration::MAX;
const ZERO: Duration = Duration::ZERO;
/// A scenario that runs longer hangs.
const SCENARIO_LIMIT: Duration = Duration::from_mins(1);

// ---------------------------------------------------------------------------
// The adapter
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Lock,
    Fair,
    Read,
    Write,
    Semaphore,
}

/// Every kind once per primitive: the exclusive side of each (for tests that
/// need "some other primitive", e.g. [`names_are_a_namespace`]).
const PRIMITIVES: [Kind; 4] = [Kind::Lock, Kind::Fair, Kind::Write, Kind::Semaphore];

impl Kind {
    /// The `kind` argument of [`common::key`].
    fn primitive(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Fair => "fair",
            Kind::Read | Kind::Write => "rw",
            Kind::Semaphore => "sem",
        }
    }

    /// Every key role of the primitive (see [`common::key`]), channels aside.
    fn roles(self) -> &'static [&'static str] {
        match self.primitive() {
            "lock" => &["hold", "fence"],
            "fair" => &["hold", "queue", "fence"],
            "rw" => &["hold", "readers", "fence", "queue"],
            "sem" => &["hold", "leases"],
            other => unreachable!("{other}"),
        }
    }

    fn reentrant(self) -> bool {
        self != Kind::Semaphore
    }

    /// The side another client takes to tell whether the name is free: the
    /// write side for readers, the same kind otherwise.
    fn exclusive(self) -> Kind {
        if self == Kind::Read {
            Kind::Write
        } else {
            self
        }
    }

    /// What a name needs before it can be acquired: permits for a semaphore.
    async fn prepare(self, client: &Client, name: &str) {
        if self == Kind::Semaphore {
            client
                .semaphore(name)
                .try_set_permits(1)
                .await
                .expect("try_set_permits(1)");
        }
    }

    /// One acquisition: `wait` = [`FOREVER`] uses `lock()` / `lock_with_lease()`
    /// / `acquire(1)`, anything else `try_lock(wait, lease)` /
    /// `try_acquire(1, wait)`; `lease: Some` takes the `_with_lease` variants.
    async fn acquire(
        self,
        client: &Client,
        name: &str,
        wait: Duration,
        lease: Option<Duration>,
    ) -> redisync::Result<Option<AnyGuard>> {
        macro_rules! side {
            ($handle:expr, $wrap:path) => {{
                let h = $handle;
                if wait == FOREVER {
                    match lease {
                        None => h.lock().await,
                        Some(d) => h.lock_with_lease(d).await,
                    }
                    .map(|g| Some($wrap(g)))
                } else {
                    h.try_lock(wait, lease).await.map(|g| g.map($wrap))
                }
            }};
        }
        match self {
            Kind::Lock => side!(client.lock(name), AnyGuard::Lock),
            Kind::Fair => side!(client.fair_lock(name), AnyGuard::Fair),
            Kind::Read => side!(client.rw_lock(name).read(), AnyGuard::Rw),
            Kind::Write => side!(client.rw_lock(name).write(), AnyGuard::Rw),
            Kind::Semaphore => {
                let s = client.semaphore(name);
                match (wait == FOREVER, lease) {
                    (true, None) => s.acquire(1).await.map(Some),
                    (true, Some(d)) => s.acquire_with_lease(1, d).await.map(Some),
                    (false, None) => s.try_acquire(1, wait).await,
                    (false, Some(d)) => s.try_acquire_with_lease(1, wait, d).await,
                }
                .map(|p| p.map(AnyGuard::Permit))
            }
        }
    }

    /// The handle's `force_unlock()` (`force_release()` of a semaphore).
    async fn force_unlock(self, client: &Client, name: &str) -> redisync::Result<bool> {
        match self {
            Kind::Lock => client.lock(name).force_unlock().await,
            Kind::Fair => client.fair_lock(name).force_unlock().await,
            Kind::Read => client.rw_lock(name).read().force_unlock().await,
            Kind::Write => client.rw_lock(name).write().force_unlock().await,
            Kind::Semaphore => client.semaphore(name).force_release().await,
        }
    }

    /// What Redis holds of `name` (the handle's `inspect()`).
    async fn inspect(self, client: &Client, name: &str) -> redisync::inspect::Inspection {
        match self {
            Kind::Lock => client.lock(name).inspect().await,
            Kind::Fair => client.fair_lock(name).inspect().await,
            Kind::Read | Kind::Write => client.rw_lock(name).inspect().await,
            Kind::Semaphore => client.semaphore(name).inspect().await,
        }
        .expect("inspect")
    }

    /// A key an acquisition's script writes (so a test can see that it ran).
    fn granted_key(self, name: &str) -> String {
        match self {
            Kind::Semaphore => common::key("sem", "leases", name),
            _ => common::key(self.primitive(), "hold", name),
        }
    }
}

/// The guard of any kind.
#[derive(Debug)]
enum AnyGuard {
    Lock(LockGuard),
    Fair(FairLockGuard),
    Rw(RwLockGuard),
    Permit(SemaphorePermit),
}

impl AnyGuard {
    fn token(&self) -> u64 {
        match self {
            AnyGuard::Lock(g) => g.fencing_token(),
            AnyGuard::Fair(g) => g.fencing_token(),
            AnyGuard::Rw(g) => g.fencing_token(),
            AnyGuard::Permit(p) => p.fencing_token(),
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            AnyGuard::Lock(g) => g.is_lost(),
            AnyGuard::Fair(g) => g.is_lost(),
            AnyGuard::Rw(g) => g.is_lost(),
            AnyGuard::Permit(p) => p.is_lost(),
        }
    }

    async fn lost(&self) {
        match self {
            AnyGuard::Lock(g) => g.lost().await,
            AnyGuard::Fair(g) => g.lost().await,
            AnyGuard::Rw(g) => g.lost().await,
            AnyGuard::Permit(p) => p.lost().await,
        }
    }

    fn lost_signal(&self) -> redisync::LostSignal {
        match self {
            AnyGuard::Lock(g) => g.lost_signal(),
            AnyGuard::Fair(g) => g.lost_signal(),
            AnyGuard::Rw(g) => g.lost_signal(),
            AnyGuard::Permit(p) => p.lost_signal(),
        }
    }

    fn validity(&self) -> Duration {
        match self {
            AnyGuard::Lock(g) => g.validity(),
            AnyGuard::Fair(g) => g.validity(),
            AnyGuard::Rw(g) => g.validity(),
            AnyGuard::Permit(p) => p.validity(),
        }
    }

    /// `run_locked` over this guard (already acquired) and `work`.
    async fn run_locked<T>(self, work: impl Future<Output = T>) -> redisync::Outcome<T> {
        macro_rules! run {
            ($g:expr) => {
                redisync::run_locked(std::future::ready(Ok($g)), async |_| work.await).await
            };
        }
        match self {
            AnyGuard::Lock(g) => run!(g),
            AnyGuard::Fair(g) => run!(g),
            AnyGuard::Rw(g) => run!(g),
            AnyGuard::Permit(p) => run!(p),
        }
        .expect("run_locked over a guard")
    }

    /// `extend(d)`.
    async fn extend(&self, lease: Duration) -> redisync::Result<()> {
        match self {
            AnyGuard::Lock(g) => g.extend(lease).await,
            AnyGuard::Fair(g) => g.extend(lease).await,
            AnyGuard::Rw(g) => g.extend(lease).await,
            AnyGuard::Permit(p) => p.extend(lease).await,
        }
    }

    /// `unlock()` (`release()` for permits).
    async fn unlock(self) -> redisync::Result<()> {
        match self {
            AnyGuard::Lock(g) => g.unlock().await,
            AnyGuard::Fair(g) => g.unlock().await,
            AnyGuard::Rw(g) => g.unlock().await,
            AnyGuard::Permit(p) => p.release().await,
        }
    }
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Takes the exclusive side of `name` with `other` at once (`try_lock(ZERO)`),
/// calls `check` while holding it, then releases it. Whether it got it.
async fn probe_exclusive(kind: Kind, other: &Client, name: &str, check: impl FnOnce()) -> bool {
    match kind
        .exclusive()
        .acquire(other, name, ZERO, None)
        .await
        .unwrap_or_else(|e| panic!("{kind:?} probe of {name:?}: {e}"))
    {
        Some(g) => {
            check();
            g.unlock().await.expect("probe unlock");
            true
        }
        None => false,
    }
}

/// Whether another client can take the exclusive side of `name` at once.
async fn is_free(kind: Kind, other: &Client, name: &str) -> bool {
    probe_exclusive(kind, other, name, || {}).await
}

/// For `span`, every 10 ms: `g` is not lost and `other` cannot take the name.
async fn stays_held(
    kind: Kind,
    other: &Client,
    name: &str,
    g: &AnyGuard,
    span: Duration,
    what: &str,
) {
    let end = Instant::now() + span;
    loop {
        assert!(!g.is_lost(), "{what}: the guard reports lost");
        assert!(
            !is_free(kind, other, name).await,
            "{what}: another client took {name:?} while the guard holds it"
        );
        if Instant::now() >= end {
            return;
        }
        sleep(Duration::from_millis(10)).await;
    }
}

async fn script_flush(env: &Env) {
    env.admin.script_flush(false).await.expect("SCRIPT FLUSH");
}

async fn all_keys(env: &Env) -> BTreeSet<String> {
    let keys: Vec<String> = env
        .admin
        .custom(
            CustomCommand::new_static("KEYS", ClusterHash::FirstKey, false),
            vec!["*".to_owned()],
        )
        .await
        .expect("KEYS");
    keys.into_iter().collect()
}

/// Runs a scenario in its own task (so that "the same task" is a real tokio
/// task, as in applications), bounded so that a hang fails instead of
/// blocking the suite; a panic is re-raised as is.
async fn run<F, Fut>(scenario: F, kind: Kind)
where
    F: FnOnce(Kind) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let task = tokio::spawn(scenario(kind));
    let joined = timeout(SCENARIO_LIMIT, task)
        .await
        .unwrap_or_else(|_| panic!("{kind:?}: the scenario hung for {SCENARIO_LIMIT:?}"));
    match joined {
        Ok(()) => {}
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("{kind:?}: {e}"),
    }
}

// ---------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------

/// Polls `fut` `n` times, pausing between polls (`sleep`: 1 ms, so the
/// command in flight completes; else one `yield_now`, so it is still in
/// flight), and drops it. Returns what it returned if it finished.
async fn poll_n_then_drop<F: Future>(fut: F, n: u32, sleep_between: bool) -> Option<F::Output> {
    let mut fut = pin!(fut);
    for i in 0..n {
        if let Poll::Ready(out) = futures::poll!(fut.as_mut()) {
            return Some(out);
        }
        if i + 1 < n {
            if sleep_between {
                sleep(Duration::from_millis(1)).await;
            } else {
                tokio::task::yield_now().await;
            }
        }
    }
    None
}

/// 1. A dropped acquisition, at any of its await points, with the name busy
///    or free, leaves the name free and no subscription behind.
async fn cancel_at_every_await_point(kind: Kind) {
    let env = Env::start().await;
    let a = env.client_with_watchdog(Duration::from_millis(900)).await;
    let holder = env.client().await;
    let other = env.client().await;
    for busy in [true, false] {
        for sleep_between in [true, false] {
            for n in 1..=12_u32 {
                let name = format!("cancel-{busy}-{sleep_between}-{n}");
                let what = format!("busy={busy} sleep={sleep_between} polls={n}");
                kind.prepare(&holder, &name).await;
                let held = if busy {
                    Some(
                        kind.exclusive()
                            .acquire(&holder, &name, ZERO, None)
                            .await
                            .unwrap()
                            .expect("free at the start"),
                    )
                } else {
                    None
                };
                let finished =
                    poll_n_then_drop(kind.acquire(&a, &name, FOREVER, None), n, sleep_between)
                        .await;
                if let Some(r) = finished {
                    assert!(!busy, "{what}: acquired a held name: {r:?}");
                    drop(r.expect("acquire of a free name"));
                }
                if let Some(g) = held {
                    g.unlock().await.expect("the holder's unlock");
                }
                let free =
                    eventually(Duration::from_secs(10), || is_free(kind, &other, &name)).await;
                assert!(
                    free,
                    "{what}: {name:?} is not free 10 s after the cancellation"
                );
            }
        }
    }
    common::assert_no_subscriptions_left(&env, Duration::from_secs(5)).await;
}

/// 2. A re-entry cancelled while its script is re-sent after
///    `SCRIPT FLUSH` never undoes the next acquisition of the same task.
async fn cancelled_reentry_never_undoes_the_next_acquisition(kind: Kind) {
    let env = Env::start().await;
    let a = env.client().await;
    let other = env.client().await;
    let name = "reentry";
    kind.prepare(&a, name).await;
    for i in 0..20 {
        let g1 = kind
            .acquire(&a, name, ZERO, None)
            .await
            .unwrap()
            .expect("free");
        script_flush(&env).await;
        let reentry = poll_n_then_drop(kind.acquire(&a, name, ZERO, None), 1, false).await;
        drop(reentry);
        g1.unlock()
            .await
            .unwrap_or_else(|e| panic!("round {i}: g1.unlock: {e}"));
        let g2 = kind
            .acquire(&a, name, Duration::from_secs(2), None)
            .await
            .unwrap()
            .expect("g2");
        stays_held(
            kind,
            &other,
            name,
            &g2,
            Duration::from_millis(300),
            &format!("round {i}"),
        )
        .await;
        g2.unlock()
            .await
            .unwrap_or_else(|e| panic!("round {i}: g2.unlock: {e}"));
    }
}

/// 3. After a loss, a new acquisition of the same task gets a new
///    token and the old guard can neither release nor share it.
async fn reacquire_after_loss_never_reuses_the_token_or_is_released_by_the_old_guard(kind: Kind) {
    let env = Env::start().await;
    let a = env.client().await;
    let other = env.client().await;
    // The window (lost by the local clock, still in Redis) is short: try a few times.
    for round in 0..8 {
        let name = format!("relost-{round}");
        let name = name.as_str();
        kind.prepare(&a, name).await;
        let g1 = kind
            .acquire(&a, name, ZERO, Some(Duration::from_millis(300)))
            .await
            .unwrap()
            .expect("free");
        timeout(Duration::from_secs(2), g1.lost())
            .await
            .expect("a 300 ms lease is lost within 2 s");
        let g2 = kind
            .acquire(&a, name, Duration::from_secs(1), None)
            .await
            .unwrap()
            .expect("free again after the loss");
        assert!(
            g2.token() > g1.token(),
            "round {round}: the new acquisition reuses token {} (old {})",
            g2.token(),
            g1.token()
        );
        let old_token = g1.token();
        let e = g1.unlock().await.expect_err("the lost guard's unlock");
        assert!(matches!(e, Error::NotHeld { .. }), "round {round}: {e:?}");
        assert!(
            !is_free(kind, &other, name).await,
            "round {round}: the lost guard (token {old_token}) released the new acquisition"
        );
        assert!(
            !g2.is_lost(),
            "round {round}: the new acquisition reports lost"
        );
        g2.unlock().await.expect("g2.unlock");
    }
}

/// Probes `name` with `other` every 5 ms for up to `span`; the moment it gets
/// in, every guard in `guards` must already report lost.
async fn probe_until_free_then_all_lost(
    kind: Kind,
    other: &Client,
    name: &str,
    guards: &[Arc<AnyGuard>],
    span: Duration,
) {
    let end = Instant::now() + span;
    while Instant::now() < end {
        let got = probe_exclusive(kind, other, name, || {
            for (i, g) in guards.iter().enumerate() {
                assert!(
                    g.is_lost(),
                    "another client holds {name:?} while guard {i} (token {}) still believes in its lease",
                    g.token()
                );
            }
        })
        .await;
        if got {
            return;
        }
        sleep(Duration::from_millis(5)).await;
    }
}

/// 4a. `extend` on a re-entered guard shortens the lease in Redis:
///     no guard of the owner may keep a longer local validity.
async fn extend_and_renew_never_leave_local_validity_above_redis_reentered(kind: Kind) {
    let env = Env::start().await;
    let a = env.client().await;
    let other = env.client().await;
    let name = "ext-re";
    kind.prepare(&a, name).await;
    let long = Some(Duration::from_secs(5));
    let outer = Arc::new(
        kind.acquire(&a, name, ZERO, long)
            .await
            .unwrap()
            .expect("free"),
    );
    let inner = Arc::new(
        kind.acquire(&a, name, ZERO, long)
            .await
            .unwrap()
            .expect("re-entry"),
    );
    inner
        .extend(Duration::from_millis(200))
        .await
        .expect("extend");
    probe_until_free_then_all_lost(kind, &other, name, &[outer, inner], Duration::from_secs(2))
        .await;
}

/// 4b. `extend` racing the watchdog's renewals: whatever order
///     they reach Redis in, the local validity never outlives Redis's lease.
async fn extend_and_renew_never_leave_local_validity_above_redis_watchdog(kind: Kind) {
    let env = Env::start().await;
    let a = env.client_with_watchdog(Duration::from_millis(600)).await;
    let other = env.client().await;
    let name = "ext-wd";
    kind.prepare(&a, name).await;
    let g = Arc::new(
        kind.acquire(&a, name, ZERO, None)
            .await
            .unwrap()
            .expect("free"),
    );
    let extender = {
        let g = g.clone();
        tokio::spawn(async move {
            for i in 0..60_u64 {
                if g.extend(Duration::from_millis(50)).await.is_err() {
                    return;
                }
                sleep(Duration::from_millis(i * 7 % 13)).await;
            }
        })
    };
    probe_until_free_then_all_lost(
        kind,
        &other,
        name,
        std::slice::from_ref(&g),
        Duration::from_secs(2),
    )
    .await;
    extender.await.unwrap();
}

/// `first` holds `name` on client `a`; another task of `a` waits to write.
async fn hold_with_a_local_writer_waiting(
    a: &Client,
    name: &'static str,
    first: Kind,
) -> (AnyGuard, tokio::task::JoinHandle<()>) {
    let held = first
        .acquire(a, name, ZERO, None)
        .await
        .unwrap()
        .expect("free");
    let waiter = {
        let a = a.clone();
        tokio::spawn(async move {
            let g = Kind::Write
                .acquire(&a, name, FOREVER, None)
                .await
                .unwrap()
                .expect("write");
            g.unlock().await.unwrap();
        })
    };
    // Not needed for correctness: lets the waiter park first.
    sleep(Duration::from_millis(100)).await;
    (held, waiter)
}

/// 5a. (the write row) A writer that takes the read side
///     (downgrade) does so at once, even with a local task waiting to write.
async fn up_and_downgrade_with_a_local_waiter_downgrade(kind: Kind) {
    assert_eq!(kind, Kind::Write);
    let env = Env::start().await;
    let a = env.client().await;
    let name = "downgrade";
    let (w, waiter) = hold_with_a_local_writer_waiting(&a, name, Kind::Write).await;
    let started = Instant::now();
    let r = timeout(
        Duration::from_secs(3),
        Kind::Read.acquire(&a, name, Duration::from_secs(2), None),
    )
    .await
    .expect("the downgrade hangs")
    .expect("downgrade")
    .expect("a writer may take the read side");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the downgrade took {:?}",
        started.elapsed()
    );
    r.unlock().await.expect("read unlock");
    w.unlock().await.expect("write unlock");
    timeout(Duration::from_secs(3), waiter)
        .await
        .expect("the waiting writer gets in")
        .unwrap();
}

/// 5b. (the read row) A reader asking for the write side gets
///     `UpgradeNotSupported` at once, even with a local task waiting to write.
async fn up_and_downgrade_with_a_local_waiter_upgrade(kind: Kind) {
    assert_eq!(kind, Kind::Read);
    let env = Env::start().await;
    let a = env.client().await;
    let name = "upgrade";
    let (r, waiter) = hold_with_a_local_writer_waiting(&a, name, Kind::Read).await;
    let started = Instant::now();
    let e = timeout(
        Duration::from_secs(3),
        Kind::Write.acquire(&a, name, Duration::from_secs(2), None),
    )
    .await
    .expect("the upgrade hangs")
    .expect_err("a reader must not get the write side");
    assert!(matches!(e, Error::UpgradeNotSupported { .. }), "{e:?}");
    // At once: well before the 2 s wait would run out.
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "UpgradeNotSupported took {:?}",
        started.elapsed()
    );
    r.unlock().await.expect("read unlock");
    timeout(Duration::from_secs(3), waiter)
        .await
        .expect("the waiting writer gets in")
        .unwrap();
}

/// 6. An unlock by an owner that lost the name (force-unlocked) writes
///    nothing: the next owner keeps it.
async fn non_owner_unlock_writes_nothing(kind: Kind) {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    let admin_like = env.client().await;
    let third = env.client().await;
    let name = "owner";
    kind.prepare(&a, name).await;
    let g1 = kind
        .acquire(&a, name, ZERO, None)
        .await
        .unwrap()
        .expect("free");
    assert!(kind
        .force_unlock(&admin_like, name)
        .await
        .expect("force_unlock"));
    let g2 = kind
        .acquire(&b, name, Duration::from_secs(1), None)
        .await
        .unwrap()
        .expect("free after force_unlock");
    let e = g1.unlock().await.expect_err("unlock after force_unlock");
    assert!(matches!(e, Error::NotHeld { .. }), "{e:?}");
    assert!(
        !is_free(kind, &third, name).await,
        "the old guard's unlock released the new owner"
    );
    assert!(!g2.is_lost());
    g2.unlock().await.expect("the new owner's unlock");
}

/// 7. (for the semaphore) A key of any role holding a foreign
///    string: acquisitions fail with `WrongType` and write nothing.
async fn wrong_type_keys_are_an_error_and_untouched(kind: Kind) {
    let env = Env::start().await;
    let a = env.client().await;
    for &role in kind.roles() {
        let name = format!("wt-{role}");
        let key = common::key(kind.primitive(), role, &name);
        let permits_key = common::key("sem", "hold", &name);
        // The semaphore's permits live in its hold key: set them first,
        // unless that is the key under test.
        let with_permits = kind == Kind::Semaphore && role != "hold";
        if with_permits {
            kind.prepare(&a, &name).await;
        }
        let permits_before: HashMap<String, String> = if with_permits {
            env.admin.hgetall(&permits_key).await.unwrap()
        } else {
            HashMap::new()
        };
        let () = env.admin.set(&key, "x", None, None, false).await.unwrap();
        let check = |what: &str, r: redisync::Result<Option<AnyGuard>>| match r {
            Err(Error::WrongType { .. }) => {}
            Err(e) if e.to_string().contains(&key) => {}
            other => panic!("{role}: {what} with {key:?} a string: {other:?}"),
        };
        check("try_lock(ZERO)", kind.acquire(&a, &name, ZERO, None).await);
        check(
            "lock()",
            timeout(
                Duration::from_secs(3),
                kind.acquire(&a, &name, FOREVER, None),
            )
            .await
            .unwrap_or_else(|_| panic!("{role}: lock() hangs")),
        );
        let v: String = env.admin.get(&key).await.unwrap();
        assert_eq!(v, "x", "{role}: the foreign string was changed");
        let ttl: i64 = env.admin.ttl(&key).await.unwrap();
        assert_eq!(ttl, -1, "{role}: the foreign key got a TTL");
        let mut expected = BTreeSet::from([key.clone()]);
        if with_permits {
            expected.insert(permits_key.clone());
            let permits_after: HashMap<String, String> =
                env.admin.hgetall(&permits_key).await.unwrap();
            assert_eq!(permits_after, permits_before, "{role}: the permits changed");
            match a.semaphore(&name).available_permits().await {
                Ok(n) => assert_eq!(n, 1, "{role}: available permits"),
                Err(Error::WrongType { .. }) => {}
                Err(e) => panic!("{role}: available_permits: {e:?}"),
            }
        }
        assert_eq!(
            all_keys(&env).await,
            expected,
            "{role}: something was written"
        );
        let _: i64 = env
            .admin
            .del(expected.into_iter().collect::<Vec<_>>())
            .await
            .unwrap();
    }
}

/// 8. `SCRIPT FLUSH` before every step changes nothing.
async fn script_flush_changes_nothing(kind: Kind) {
    let env = Env::start().await;
    let a = env.client().await;
    let other = env.client().await;
    let name = "flush";
    kind.prepare(&a, name).await;
    script_flush(&env).await;
    let g = kind
        .acquire(&a, name, ZERO, None)
        .await
        .expect("acquire")
        .expect("free");
    script_flush(&env).await;
    let inner = if kind.reentrant() {
        let inner = kind
            .acquire(&a, name, ZERO, None)
            .await
            .expect("re-entry")
            .expect("re-entry");
        script_flush(&env).await;
        Some(inner)
    } else {
        None
    };
    g.extend(Duration::from_secs(10)).await.expect("extend");
    script_flush(&env).await;
    if let Some(inner) = inner {
        inner.unlock().await.expect("inner unlock");
        script_flush(&env).await;
        assert!(
            !is_free(kind, &other, name).await,
            "the inner unlock freed the name"
        );
    }
    g.unlock().await.expect("unlock");
    assert!(
        is_free(kind, &other, name).await,
        "not free after the unlock"
    );
}

/// 9. `shutdown()` fails waiters, tells live guards before anyone
///    else can take their names, and leaves nothing hanging.
async fn shutdown_tells_live_guards_and_fails_waiters(kind: Kind) {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    let name = "bye";
    kind.prepare(&a, name).await;
    let g = kind
        .acquire(&a, name, ZERO, None)
        .await
        .unwrap()
        .expect("free");
    let waiter = {
        let a = a.clone();
        tokio::spawn(async move { kind.exclusive().acquire(&a, name, FOREVER, None).await })
    };
    // Not needed for correctness: lets the waiter park first.
    sleep(Duration::from_millis(100)).await;
    a.shutdown().await.expect("shutdown");
    let r = timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter still waits 5 s after the shutdown")
        .unwrap();
    assert!(matches!(r, Err(Error::Shutdown)), "the waiter got {r:?}");
    probe_exclusive(kind, &b, name, || {
        assert!(
            g.is_lost(),
            "another client holds the name, the guard does not know"
        );
    })
    .await;
    let r = timeout(Duration::from_millis(500), g.unlock())
        .await
        .expect("unlock after shutdown hangs");
    assert!(
        matches!(r, Err(Error::Shutdown | Error::NotHeld { .. })),
        "unlock after shutdown: {r:?}"
    );
    a.shutdown().await.expect("a second shutdown");
    for wait in [ZERO, FOREVER] {
        let r = timeout(
            Duration::from_millis(100),
            kind.acquire(&a, name, wait, None),
        )
        .await
        .expect("an acquisition after shutdown hangs");
        assert!(matches!(r, Err(Error::Shutdown)), "{r:?}");
    }
}

/// The candidate names of [`names_are_a_namespace`].
fn namespace_candidates() -> Vec<String> {
    let mut names = vec!["base".to_owned(), "{base}".to_owned(), "base}".to_owned()];
    for k in PRIMITIVES {
        for role in k.roles().iter().copied().chain(["ch"]) {
            let key = common::key(k.primitive(), role, "base");
            let stripped = key.strip_prefix("redisync:").expect("prefix").to_owned();
            names.push(key);
            names.push(stripped);
        }
    }
    let mut seen = BTreeSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names
}

/// 10. Every name is its own lock: names that look like another
///     lock's keys, with or without hash tags, never collide, across kinds.
async fn names_are_a_namespace(kind: Kind) {
    let env = Env::start().await;
    let names = namespace_candidates();
    // Every failure is collected, so one collision does not hide the others.
    let mut failures = Vec::new();
    let mut held = Vec::new();
    let a = env.client().await;
    let take = |k: Kind, client: Client, name: String, what: String| {
        let lease = Some(Duration::from_secs(5));
        async move {
            if k == Kind::Semaphore {
                if let Err(e) = client.semaphore(&name).try_set_permits(1).await {
                    return Err(format!("{what}: try_set_permits: {e}"));
                }
            }
            match k.acquire(&client, &name, ZERO, lease).await {
                Ok(Some(g)) => Ok((k, name, g)),
                Ok(None) => Err(format!("{what}: busy")),
                Err(e) => Err(format!("{what}: {e}")),
            }
        }
    };
    for name in &names {
        let what = format!("{kind:?} {name:?} while the others of its kind are held");
        match take(kind, a.clone(), name.clone(), what).await {
            Ok(h) => held.push(h),
            Err(f) => failures.push(f),
        }
    }
    for other in PRIMITIVES {
        if other.primitive() == kind.primitive() {
            continue;
        }
        let client = env.client().await;
        for name in &names {
            let what = format!("{other:?} {name:?} while {kind:?} holds every candidate");
            match take(other, client.clone(), name.clone(), what).await {
                Ok(h) => held.push(h),
                Err(f) => failures.push(f),
            }
        }
    }
    for (k, name, g) in held {
        if let Err(e) = g.unlock().await {
            failures.push(format!("{k:?} {name:?}: unlock: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} collisions:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// 11. Tokens never go back, even after a restart that reloads
///     an older snapshot (the fence counter it holds is behind).
async fn tokens_never_go_back_after_a_restart_from_an_older_snapshot(kind: Kind) {
    let mut env = Env::start().await;
    let a = env.client().await;
    let name = "snap";
    kind.prepare(&a, name).await;
    let once = |a: Client| async move {
        let g = kind
            .acquire(&a, name, ZERO, None)
            .await
            .unwrap()
            .expect("free");
        let t = g.token();
        g.unlock().await.unwrap();
        t
    };
    let t1 = once(a.clone()).await;
    let marker = "conformance:snapshot-marker";
    let () = env.admin.set(marker, "1", None, None, false).await.unwrap();
    common::save(&env.admin).await;
    let mut last = t1;
    for _ in 0..5 {
        let t = once(a.clone()).await;
        assert!(t > last);
        last = t;
    }
    env.server.kill().await;
    env.server.restart().await;
    let reloaded = eventually(Duration::from_secs(5), || async {
        matches!(env.admin.exists::<i64, _>(marker).await, Ok(1))
    })
    .await;
    assert!(reloaded, "the restart did not load the snapshot");
    let deadline = Instant::now() + Duration::from_secs(5);
    let g = loop {
        match kind.acquire(&a, name, ZERO, None).await {
            Ok(Some(g)) => break g,
            Ok(None) => panic!("busy after the restart"),
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("acquire after the restart: {e}"),
        }
    };
    assert!(
        g.token() > last,
        "token {} after the restart, {last} before it (the snapshot had {t1})",
        g.token()
    );
    g.unlock().await.unwrap();
}

/// 12. A re-entry racing the release of the last guard (dropped
///     in another task) never yields a guard for a hold that is gone.
async fn reentry_racing_the_last_drop_never_revives_a_released_hold(kind: Kind) {
    let env = Env::start().await;
    let a = env.client().await;
    let other = env.client().await;
    let name = "race";
    kind.prepare(&a, name).await;
    for i in 0..200 {
        let g = kind
            .acquire(&a, name, Duration::from_secs(2), None)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("round {i}: still taken"));
        let dropper = tokio::spawn(async move { drop(g) });
        let h = kind.acquire(&a, name, ZERO, None).await.unwrap();
        if let Some(h) = h {
            for check in 0..3 {
                if check > 0 {
                    sleep(Duration::from_millis(10)).await;
                }
                probe_exclusive(kind, &other, name, || {
                    assert!(
                        h.is_lost(),
                        "round {i}: another client holds {name:?}, the re-entered guard does not know"
                    );
                })
                .await;
            }
            let lost = h.is_lost();
            let r = h.unlock().await;
            assert!(
                lost || r.is_ok(),
                "round {i}: unlock of a live guard: {r:?}"
            );
        }
        dropper.await.unwrap();
    }
}

// ---------------------------------------------------------------------------
// The matrix
// ---------------------------------------------------------------------------

/// One cell: `ok` a test, `ignore("why")` an ignored test, `na` no test.
/// 13. A watchdog re-entry over a fixed-lease hold is renewed, even when it
///     is the client's first watchdog hold: the guard outlives many leases
///     and another client cannot take the name meanwhile.
async fn watchdog_reentry_over_a_fixed_lease_is_renewed(kind: Kind) {
    let env = Env::start().await;
    // Short, but not so short that a stalled test process loses it.
    let lease = Duration::from_secs(1);
    let a = env.client_with_watchdog(lease).await;
    let other = env.client().await;
    let name = "wd-re";
    kind.prepare(&a, name).await;
    let outer = kind
        .acquire(&a, name, ZERO, Some(Duration::from_millis(200)))
        .await
        .unwrap()
        .expect("free");
    let inner = kind
        .acquire(&a, name, ZERO, None)
        .await
        .unwrap()
        .expect("re-entry");
    assert!(
        timeout(lease * 3, inner.lost()).await.is_err(),
        "the watchdog re-entry was not renewed"
    );
    assert!(
        !is_free(kind, &other, name).await,
        "another client took a name whose re-entry is renewed"
    );
    inner.unlock().await.unwrap();
    drop(outer);
}

/// 16. A process stalled past its lease (fixed or watchdog) resumes knowing
///     the lock is lost at its first poll: `run_locked`'s work is not
///     polled past its next await point (`Cancelled`), and the lost signal,
///     `lost()`, `is_lost()` and `validity()` agree before any timer fires.
async fn a_stall_past_the_lease_wins_over_the_work(kind: Kind) {
    let env = Env::start().await;
    let url = env.server.url();
    let lease = Duration::from_millis(300);
    on_one_thread(move || async move {
        let client = Client::builder(&url)
            .watchdog_timeout(lease)
            .connect()
            .await
            .expect("connect");
        for watchdog in [false, true] {
            let name = format!("stalled-{watchdog}");
            kind.prepare(&client, &name).await;
            let fixed = (!watchdog).then_some(lease);
            let acquire = || kind.acquire(&client, &name, FOREVER, fixed);

            // In a task of its own: woken, it is polled again before the
            // runtime fires overdue timers (a `block_on` future is not).
            let guard = acquire().await.expect("acquire").expect("granted");
            let past = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let past_in_work = past.clone();
            let outcome = tokio::spawn(guard.run_locked(async move {
                stall(lease * 3);
                woken_at_once().await;
                past_in_work.store(true, std::sync::atomic::Ordering::SeqCst);
            }))
            .await
            .expect("run_locked task");
            assert!(
                !past.load(std::sync::atomic::Ordering::SeqCst),
                "{kind:?} (watchdog {watchdog}): the work went on past an await after a stall that lost the lease"
            );
            assert_eq!(outcome, redisync::Outcome::Cancelled, "{kind:?} (watchdog {watchdog})");

            let guard = acquire().await.expect("acquire").expect("granted");
            let signal = guard.lost_signal();
            // Polled once before the stall, as a select polls them: their
            // timers are set.
            {
                let mut lost = pin!(guard.lost());
                assert!(futures::poll!(lost.as_mut()).is_pending());
                assert!(futures::poll!(signal.clone()).is_pending());
                stall(lease * 3);
                // No await in between: no timer has fired yet.
                assert!(
                    futures::poll!(signal.clone()).is_ready(),
                    "{kind:?} (watchdog {watchdog}): the lost signal waits for its timer after a stall"
                );
                assert!(
                    futures::poll!(lost.as_mut()).is_ready(),
                    "{kind:?} (watchdog {watchdog}): lost() waits for its timer after a stall"
                );
            }
            assert!(guard.is_lost() && signal.is_lost(), "{kind:?} (watchdog {watchdog})");
            assert_eq!(guard.validity(), Duration::ZERO, "{kind:?} (watchdog {watchdog})");
            let _ = guard.unlock().await;
        }
        client.shutdown().await.expect("shutdown");
    })
    .await;
}

/// 17. A force-unlock by the same client that runs in Redis after one of
///     its acquisitions (sent first, its reply read later) leaves that
///     acquisition lost: another client may take the name at once, and the
///     guard must not say it holds it.
async fn force_unlock_after_a_grant_in_flight_loses_that_grant(kind: Kind) {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    // Loads the scripts (a first EVALSHA answered NOSCRIPT would send the
    // script body only at the next poll).
    kind.prepare(&a, "warm-up").await;
    let warm = kind.acquire(&a, "warm-up", ZERO, None).await;
    warm.expect("warm-up")
        .expect("warm-up granted")
        .unlock()
        .await
        .expect("warm-up unlock");
    for round in 0..20 {
        let name = &format!("forced-in-flight-{round}");
        kind.prepare(&a, name).await;
        let granted_key = kind.granted_key(name);
        let mut acquire = pin!(kind.acquire(&a, name, FOREVER, Some(Duration::from_mins(1))));
        // The first poll sends the script; its reply is not read until
        // later. (On an idle machine the reply may be back within that
        // poll: then try again.)
        if let Poll::Ready(r) = futures::poll!(acquire.as_mut()) {
            r.expect("acquire")
                .expect("granted")
                .unlock()
                .await
                .expect("unlock");
            continue;
        }
        assert!(
            eventually(Duration::from_secs(10), || async {
                env.admin
                    .exists::<i64, _>(&granted_key)
                    .await
                    .expect("EXISTS")
                    == 1
            })
            .await,
            "{kind:?}: the acquisition's script never ran"
        );
        assert!(
            kind.force_unlock(&a, name).await.expect("force_unlock"),
            "{kind:?}: the force-unlock found nothing held"
        );
        let other = kind
            .exclusive()
            .acquire(&b, name, ZERO, None)
            .await
            .expect("other acquire")
            .expect("the name is free after the force-unlock");
        let guard = acquire.await.expect("acquire").expect("granted");
        assert!(
            guard.is_lost(),
            "{kind:?}: a guard granted before the force-unlock says it holds (validity {:?}) while another client does",
            guard.validity()
        );
        assert!(futures::poll!(pin!(guard.lost())).is_ready(), "{kind:?}");
        assert!(futures::poll!(guard.lost_signal()).is_ready(), "{kind:?}");
        other.unlock().await.expect("other unlock");
        return;
    }
    panic!("{kind:?}: every acquisition answered within its first poll");
}

/// Runs [`Kind::prepare`] through a reconnect (after a server restart).
async fn prepare_retrying(kind: Kind, client: &Client, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let done = match kind {
            Kind::Semaphore => client.semaphore(name).try_set_permits(1).await.map(|_| ()),
            _ => Ok(()),
        };
        match done {
            Ok(()) => return,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{kind:?}: set-up after the restart: {e}"),
        }
    }
}

/// 18. With the restart guard, a server restarted empty grants nothing
///     until every lease granted before the restart could have ended (a
///     zero wait answers `None`, a wait is granted after that), and a fresh
///     server likewise. Leases and extensions above the bound are refused.
async fn restart_guard_grants_nothing_until_old_leases_could_have_ended(kind: Kind) {
    let mut env = Env::start().await;
    let max_lease = Duration::from_secs(2);
    let guarded = || {
        Client::builder(&env.server.url())
            .restart_guard(max_lease)
            .watchdog_timeout(max_lease)
            .connect()
    };
    let (a, b) = (
        guarded().await.expect("connect"),
        guarded().await.expect("connect"),
    );
    let name = "restarted";
    kind.prepare(&a, name).await;
    // A fresh server is young too.
    assert!(
        kind.acquire(&a, name, ZERO, None)
            .await
            .expect("try")
            .is_none(),
        "{kind:?}: a server up for less than max_lease granted"
    );
    assert!(matches!(
        kind.acquire(&a, name, ZERO, Some(max_lease * 2)).await,
        Err(Error::InvalidArgument(_))
    ));
    let held = kind
        .acquire(&a, name, FOREVER, Some(max_lease))
        .await
        .expect("acquire")
        .expect("granted once the server is old enough");
    let granted_at = Instant::now();
    assert!(matches!(
        held.extend(max_lease * 2).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(
        !held.is_lost(),
        "{kind:?}: a refused extension changes nothing"
    );
    env.server.remove_snapshot().expect("no snapshot");
    env.server.restart().await;
    prepare_retrying(kind, &b, name).await;
    // Through the reconnect: a zero wait is `None` (or a retryable error
    // while the client reconnects), never a grant.
    loop {
        match kind.exclusive().acquire(&b, name, ZERO, None).await {
            Ok(None) => break,
            Err(e) if e.is_retryable() => sleep(Duration::from_millis(50)).await,
            other => panic!("{kind:?}: a restarted server granted at once: {other:?}"),
        }
    }
    let second = kind
        .exclusive()
        .acquire(&b, name, FOREVER, None)
        .await
        .expect("acquire after the restart")
        .expect("granted");
    assert!(
        granted_at.elapsed() >= max_lease,
        "{kind:?}: granted {:?} after the first grant, within its {max_lease:?} lease",
        granted_at.elapsed()
    );
    second.unlock().await.expect("unlock");
    drop(held);
}

/// 19. A force-unlock by the holder's own client whose outcome is unknown
///     (the server stalls past the command timeout, or the caller drops the
///     future after the send) runs in Redis later: the client's guards
///     report lost as soon as the call ends, whatever ended it.
async fn a_force_unlock_whose_outcome_is_unknown_leaves_the_guards_lost(kind: Kind) {
    let env = Env::start().await;
    let a = Client::builder(&env.server.url())
        .command_timeout(Duration::from_millis(300))
        .connect()
        .await
        .expect("connect");
    let b = env.client().await;
    // The force-unlock script is cached: it runs once the server resumes.
    kind.prepare(&a, "warm-up").await;
    kind.force_unlock(&a, "warm-up").await.expect("warm-up");
    for ending in ["command timeout", "dropped by the caller"] {
        let name = &format!("forced-unknown-{}", ending.len());
        kind.prepare(&a, name).await;
        let g = kind
            .acquire(&a, name, FOREVER, Some(Duration::from_mins(1)))
            .await
            .expect("acquire")
            .expect("granted");
        env.server.pause();
        let ended = if ending == "command timeout" {
            format!("{:?}", kind.force_unlock(&a, name).await)
        } else {
            format!(
                "{:?}",
                timeout(Duration::from_millis(100), kind.force_unlock(&a, name)).await
            )
        };
        let lost_at_once = g.is_lost();
        env.server.resume();
        let other = eventually(Duration::from_secs(10), || is_free(kind, &b, name)).await;
        assert!(other, "{kind:?} ({ending}): the force-unlock never ran");
        assert!(
            lost_at_once && g.is_lost(),
            "{kind:?} ({ending}, ended {ended}): the guard says held while the force-unlock ran"
        );
        drop(g);
    }
}

/// 20. Two flows of one owner (`join!` in one task) that ask at the same
///     instant, or both wait behind another client's hold, never both hold:
///     the second queues behind the first (docs/api.md "Who re-enters").
async fn two_flows_of_one_owner_never_both_hold(kind: Kind) {
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    for queued in [false, true] {
        let name = &format!("two-flows-{queued}");
        kind.prepare(&a, name).await;
        let blocker = if queued {
            let g = kind.exclusive().acquire(&b, name, ZERO, None).await;
            Some(g.expect("blocker").expect("free"))
        } else {
            None
        };
        let (inside, peak, asked) = (AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0));
        let flow = || async {
            asked.fetch_add(1, SeqCst);
            let g = kind
                .acquire(&a, name, FOREVER, Some(Duration::from_secs(30)))
                .await
                .expect("acquire")
                .expect("granted");
            peak.fetch_max(inside.fetch_add(1, SeqCst) + 1, SeqCst);
            // A round trip while inside: the other flow's reply lands meanwhile.
            env.admin.ping::<()>(None).await.expect("PING");
            inside.fetch_sub(1, SeqCst);
            // The replaced guard's unlock may fail; the peak tells.
            let _ = g.unlock().await;
        };
        let release = async {
            if let Some(g) = blocker {
                assert!(
                    eventually(Duration::from_secs(10), || async {
                        asked.load(SeqCst) == 2
                    })
                    .await
                );
                // Two round trips: both flows' attempts are in.
                for _ in 0..2 {
                    env.admin.ping::<()>(None).await.expect("PING");
                }
                g.unlock().await.expect("blocker unlock");
            }
        };
        tokio::join!(flow(), flow(), release);
        assert_eq!(
            peak.load(SeqCst),
            1,
            "{kind:?} (queued behind another client: {queued}): two flows of one owner held at once"
        );
    }
}

/// 21. A waiting task aborted right before its client shuts down (its
///     future dropped before the shutdown, or while it runs; once it
///     queued, or while its first attempt may be on its way), the holder
///     letting go before the abort or after it: once the shutdown returned,
///     the name lists neither a waiter nor a holder of that client, so a
///     release does not hand the name to the departed waiter (the next
///     client would wait a whole lease).
async fn an_aborted_waiter_leaves_the_queue_at_shutdown(kind: Kind) {
    let env = Env::start().await;
    let a = env.client().await;
    for (case, (dropped_first, queued_first, holder_first)) in [
        (true, true, false),
        (false, true, false),
        (true, true, true),
        (false, true, true),
        (true, false, false),
        (false, false, true),
    ]
    .into_iter()
    .enumerate()
    {
        let b = env.client().await;
        let name = &format!("aborted-{case}");
        kind.prepare(&a, name).await;
        let g = kind.exclusive().acquire(&a, name, ZERO, None).await;
        let mut g = Some(g.expect("holder").expect("free"));
        let waiter = {
            let (b, name) = (b.clone(), name.clone());
            tokio::spawn(async move { kind.acquire(&b, &name, FOREVER, None).await })
        };
        if queued_first {
            let queued = eventually(Duration::from_secs(10), || async {
                !kind.inspect(&a, name).await.waiters.is_empty()
            })
            .await;
            assert!(queued, "{kind:?}: the waiter never queued");
        } else {
            tokio::task::yield_now().await;
        }
        if holder_first {
            drop(g.take());
        }
        waiter.abort();
        drop(g.take());
        if dropped_first {
            let _ = waiter.await;
        }
        b.shutdown().await.expect("shutdown");
        let seen = kind.inspect(&a, name).await;
        let b_id = Some(b.id());
        assert!(
            !seen.waiters.iter().any(|w| w.client_id == b_id)
                && !seen.holders.iter().any(|h| h.client_id == b_id && h.is_live()),
            "{kind:?} (future dropped before the shutdown: {dropped_first}, queued before the abort: {queued_first}, holder let go before the abort: {holder_first}): the shut-down client is still listed: {seen:?}"
        );
    }
}

/// 22. The restart guard sees a restart behind a proxy that keeps the
///     client's connection (the connection generation never changes): a
///     guarded client takes nothing from the restarted server until every
///     lease granted before the restart could have ended.
async fn restart_guard_sees_a_restart_behind_a_proxy_that_keeps_the_connection(kind: Kind) {
    let mut env = Env::start().await;
    let max_lease = Duration::from_secs(2);
    let proxy = common::StickyProxy::start(env.server.port()).await;
    let guarded = |url: String| {
        Client::builder(&url)
            .restart_guard(max_lease)
            .watchdog_timeout(max_lease)
            .connect()
    };
    let a = guarded(proxy.url())
        .await
        .expect("connect through the proxy");
    let b = guarded(env.server.url()).await.expect("connect");
    let name = "behind-a-proxy";
    kind.prepare(&a, name).await;
    kind.prepare(&a, "warm-up").await;
    // `a` proves the server old (and remembers it for its connection).
    let g = kind
        .exclusive()
        .acquire(&a, "warm-up", FOREVER, Some(max_lease))
        .await
        .expect("warm-up")
        .expect("granted");
    g.unlock().await.expect("unlock");
    let held = kind
        .acquire(&b, name, FOREVER, Some(max_lease))
        .await
        .expect("acquire")
        .expect("granted");
    let granted_at = Instant::now();
    env.server.remove_snapshot().expect("no snapshot");
    env.server.kill().await;
    env.server.restart().await;
    prepare_retrying(kind, &a, name).await;
    let second = loop {
        match kind
            .exclusive()
            .acquire(&a, name, ZERO, Some(max_lease))
            .await
        {
            Ok(Some(g)) => break g,
            Ok(None) => sleep(Duration::from_millis(20)).await,
            Err(e) if e.is_retryable() => sleep(Duration::from_millis(20)).await,
            Err(e) => panic!("{kind:?}: acquire behind the proxy: {e}"),
        }
    };
    assert!(
        granted_at.elapsed() >= max_lease,
        "{kind:?}: granted {:?} after another client's grant, within its {max_lease:?} lease, by a server restarted behind a proxy",
        granted_at.elapsed()
    );
    drop(second);
    drop(held);
}

/// 23. A save moves the server's LASTSAVE, which a guarded acquisition's
///     script takes for a possible restart: the client reads the uptime and
///     tries again at once, so a zero wait on a free name of an old server
///     is still granted (it answered `None`).
async fn a_save_never_makes_a_guarded_zero_wait_miss_a_free_name(kind: Kind) {
    let env = Env::start().await;
    let max_lease = Duration::from_secs(1);
    let a = Client::builder(&env.server.url())
        .restart_guard(max_lease)
        .watchdog_timeout(max_lease)
        .connect()
        .await
        .expect("connect");
    for name in ["warm-up", "after-a-save"] {
        kind.prepare(&a, name).await;
    }
    // Waits until the server is old enough, and proves it so.
    let g = kind.acquire(&a, "warm-up", FOREVER, None).await;
    g.expect("warm-up")
        .expect("granted")
        .unlock()
        .await
        .expect("unlock");
    common::save(&env.admin).await;
    let got = kind.acquire(&a, "after-a-save", ZERO, None).await;
    let got = got.expect("try");
    assert!(
        got.is_some(),
        "{kind:?}: a zero wait on a free name of an old server right after a save answered None"
    );
}

// ---------------------------------------------------------------------------
// Endings: every call that changes who holds a name, ended every way
// ---------------------------------------------------------------------------

/// A call that changes who holds a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// `lock()` / `acquire(1)` of a free name (a zero wait on a busy name
    /// for the refusal).
    Acquire,
    /// `lock()` / `acquire(1)` of a name another client holds: the
    /// acquisition queues in Redis (the refusal: a 300 ms wait that runs
    /// out); the holder lets go at the end, and a queue entry left behind
    /// would be handed the name for a lease.
    AcquireQueued,
    /// `unlock()` / `release()` of the only guard.
    Unlock,
    /// `extend(d)`.
    Extend,
    /// `hand_off()` (`LockGuard`, `FairLockGuard`).
    HandOff,
    /// `force_unlock()` / `force_release()` by the holder's own client.
    ForceUnlock,
    /// The read side taken while writing (an `RwLock` downgrade).
    Downgrade,
}

/// How a call ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// Redis ran the script and answered: Ok, or a refusal it decided.
    Reply,
    /// Redis answered an error: the script did not run, or failed before
    /// its first write.
    ErrorReply,
    /// The client cannot tell whether the script ran.
    Unknown,
    /// Nothing reached Redis.
    NeverSent,
}

/// One way to provoke an [`Ending`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    // Reply.
    /// The call succeeds.
    Granted,
    /// The script refuses: the name is busy, or the hold is gone (another
    /// client force-unlocked it), or nothing is held.
    Refused,
    // Error reply.
    /// A read-only script of another connection runs past
    /// `busy-reply-threshold`: every command is answered `BUSY`, unrun.
    Busy,
    /// `maxmemory 1` with `noeviction`: the script's first write is refused
    /// with `OOM` (nothing written).
    Oom,
    /// `SCRIPT FLUSH`, then `OOM`: `EVALSHA` is answered `NOSCRIPT` and the
    /// `EVAL` fallback fails.
    NoscriptThenOom,
    /// A key of the name holds a foreign string: `WRONGTYPE`.
    WrongType,
    // Unknown outcome.
    /// The server is stopped (SIGSTOP) past the command timeout; the
    /// script runs once it resumes.
    CommandTimeout,
    /// The connection is reset while the command is still on its way: it
    /// never reaches Redis.
    ResetBeforeRun,
    /// The connection is reset once the script ran, before its reply is
    /// read.
    ResetAfterRun,
    /// The future is dropped once the command is sent (to a stopped
    /// server: it runs once the server resumes).
    DroppedAfterSend,
    /// After `SCRIPT FLUSH`, the future is dropped while the `EVAL`
    /// fallback is in flight (it runs later).
    DroppedDuringNoscript,
    // Never sent.
    /// The future is dropped before its first poll.
    DroppedUnpolled,
    /// The server cannot be reached (the connection is reset and new ones
    /// refused); the call is awaited.
    Unreachable,
    /// As [`Way::Unreachable`], but the future is dropped after a few polls.
    DroppedWhileUnreachable,
}

impl Ending {
    fn ways(self, op: Op) -> &'static [Way] {
        let acquires = matches!(op, Op::Acquire | Op::AcquireQueued | Op::Downgrade);
        match self {
            // A downgrade is never refused: a writer may always read.
            Ending::Reply if op == Op::Downgrade => &[Way::Granted],
            Ending::Reply => &[Way::Granted, Way::Refused],
            // OOM only stops a script whose first write may grow memory
            // (an acquisition); releases, renewals and rebinds delete or
            // expire first, which Redis allows at OOM.
            Ending::ErrorReply if acquires => {
                &[Way::Busy, Way::Oom, Way::NoscriptThenOom, Way::WrongType]
            }
            Ending::ErrorReply => &[Way::Busy],
            Ending::Unknown => &[
                Way::CommandTimeout,
                Way::ResetBeforeRun,
                Way::ResetAfterRun,
                Way::DroppedAfterSend,
                Way::DroppedDuringNoscript,
            ],
            Ending::NeverSent => &[
                Way::DroppedUnpolled,
                Way::Unreachable,
                Way::DroppedWhileUnreachable,
            ],
        }
    }
}

impl Way {
    fn ending(self) -> Ending {
        match self {
            Way::Granted | Way::Refused => Ending::Reply,
            Way::Busy | Way::Oom | Way::NoscriptThenOom | Way::WrongType => Ending::ErrorReply,
            Way::CommandTimeout
            | Way::ResetBeforeRun
            | Way::ResetAfterRun
            | Way::DroppedAfterSend
            | Way::DroppedDuringNoscript => Ending::Unknown,
            Way::DroppedUnpolled | Way::Unreachable | Way::DroppedWhileUnreachable => {
                Ending::NeverSent
            }
        }
    }

    /// Whether the call may have run, as the client sees it: it was sent
    /// and no reply says what happened (a timeout, a reset, a drop), so
    /// the guard must take the safe reading.
    fn may_have_run_unseen(self) -> bool {
        matches!(
            self,
            Way::CommandTimeout
                | Way::ResetBeforeRun
                | Way::ResetAfterRun
                | Way::DroppedAfterSend
                | Way::DroppedDuringNoscript
                | Way::Unreachable
                | Way::DroppedWhileUnreachable
        )
    }
}

/// What a call answered.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// Unlock, extend, hand-off: `Ok(())`.
    Done,
    /// An acquisition got a guard.
    Granted,
    /// An acquisition's wait ran out (`Ok(None)`).
    NotGranted,
    /// A force-unlock's `Ok(found)`.
    Forced(bool),
}

/// How the call ended, seen from the caller.
#[derive(Debug)]
enum Ended {
    Returned(redisync::Result<Answer>),
    Dropped,
}

/// The guards of one way: `held`, the one the call works on (or the
/// writer of a downgrade); `got`, what an acquisition won; `blocker`,
/// another client's hold that makes an acquisition busy.
#[derive(Default)]
struct Guards {
    held: Option<AnyGuard>,
    got: Option<AnyGuard>,
    blocker: Option<AnyGuard>,
}

/// The lease of the guards a way starts with, and what `extend` asks:
/// the default watchdog lease, so a name that stays taken "for a lease"
/// shows against [`LIVE`].
const LEASE: Duration = Duration::from_secs(30);
/// The command timeout of the client under test.
const CALL_TIMEOUT: Duration = Duration::from_millis(500);
/// How soon a name nobody holds any more must be free once the fault is
/// lifted: a few retries and a reconnect, far below [`LEASE`].
const LIVE: Duration = Duration::from_secs(6);

impl AnyGuard {
    /// `hand_off()` (a lock or a fair lock).
    async fn hand_off(&mut self) -> redisync::Result<()> {
        match self {
            AnyGuard::Lock(g) => g.hand_off().await,
            AnyGuard::Fair(g) => g.hand_off().await,
            other => panic!("{other:?} cannot be handed off"),
        }
    }
}

/// Every key of `name` with its type and contents (TTLs aside: they run
/// down), to tell whether a failed script wrote anything. Other names are
/// left out: what an earlier way left there may still change (a release
/// or an undo in the background).
async fn keyspace(env: &Env, name: &str) -> std::collections::BTreeMap<String, String> {
    async fn raw(env: &Env, cmd: &'static str, args: Vec<String>) -> fred::types::Value {
        env.admin
            .custom(
                CustomCommand::new_static(cmd, ClusterHash::FirstKey, false),
                args,
            )
            .await
            .unwrap_or_else(|e| panic!("{cmd}: {e}"))
    }
    let mut out = std::collections::BTreeMap::new();
    let tag = format!("{{{name}}}");
    for key in all_keys(env).await.into_iter().filter(|k| k.contains(&tag)) {
        let kind = raw(env, "TYPE", vec![key.clone()])
            .await
            .as_string()
            .unwrap_or_default();
        let value = match kind.as_str() {
            "hash" => {
                let m: HashMap<String, String> = env.admin.hgetall(&key).await.expect("HGETALL");
                format!(
                    "{:?}",
                    m.into_iter().collect::<std::collections::BTreeMap<_, _>>()
                )
            }
            "zset" => format!(
                "{:?}",
                raw(
                    env,
                    "ZRANGE",
                    vec![key.clone(), "0".into(), "-1".into(), "WITHSCORES".into()]
                )
                .await
            ),
            "list" => format!(
                "{:?}",
                raw(env, "LRANGE", vec![key.clone(), "0".into(), "-1".into()]).await
            ),
            "string" => format!("{:?}", raw(env, "GET", vec![key.clone()]).await),
            other => format!("({other})"),
        };
        out.insert(key, format!("{kind} {value}"));
    }
    out
}

/// `CONFIG SET name value`.
async fn config_set(env: &Env, name: &str, value: &str) {
    let _: fred::types::Value = env
        .admin
        .custom(
            CustomCommand::new_static("CONFIG", ClusterHash::FirstKey, false),
            vec!["SET".to_owned(), name.to_owned(), value.to_owned()],
        )
        .await
        .unwrap_or_else(|e| panic!("CONFIG SET {name} {value}: {e}"));
}

/// `failed_calls` of EVALSHA so far (a NOSCRIPT reply counts).
async fn evalsha_failures(env: &Env) -> u64 {
    let info: String = env
        .admin
        .info(Some(fred::types::InfoKind::CommandStats))
        .await
        .expect("INFO commandstats");
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .and_then(|rest| {
            rest.split(',')
                .find_map(|f| f.strip_prefix("failed_calls="))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// Polls `fut` every 5 ms for `span`; what it returned if it finished.
async fn poll_for<F: Future + ?Sized>(
    mut fut: std::pin::Pin<&mut F>,
    span: Duration,
) -> Option<F::Output> {
    let end = Instant::now() + span;
    loop {
        if let Poll::Ready(out) = futures::poll!(fut.as_mut()) {
            return Some(out);
        }
        if Instant::now() >= end {
            return None;
        }
        sleep(Duration::from_millis(5)).await;
    }
}

/// Whether the call answered what `way` makes of it: a reply says what
/// happened, an error reply or an awaited fault is an error, a dropped
/// call returns nothing.
fn answered_as_expected(op: Op, way: Way, ended: &Ended) -> bool {
    match (way, &ended) {
        (Way::Granted, Ended::Returned(Ok(answer))) => match op {
            Op::Acquire | Op::AcquireQueued | Op::Downgrade => *answer == Answer::Granted,
            Op::ForceUnlock => *answer == Answer::Forced(true),
            _ => *answer == Answer::Done,
        },
        (Way::Refused, Ended::Returned(r)) => match op {
            Op::Acquire | Op::AcquireQueued => matches!(r, Ok(Answer::NotGranted)),
            Op::ForceUnlock => matches!(r, Ok(Answer::Forced(false))),
            _ => matches!(r, Err(Error::NotHeld { .. })),
        },
        // Memory, not a key of another type.
        (Way::Oom | Way::NoscriptThenOom, Ended::Returned(r)) => matches!(
            r,
            Err(e) if !matches!(e, Error::NotHeld { .. } | Error::Shutdown | Error::WrongType { .. })
        ),
        (
            Way::Busy | Way::WrongType | Way::CommandTimeout | Way::Unreachable,
            Ended::Returned(r),
        ) => matches!(r, Err(e) if !matches!(e, Error::NotHeld { .. } | Error::Shutdown)),
        // An idempotent script may be sent again over the new
        // connection (fred's attempts): then it answers, or waits on (a
        // queued acquisition) until the caller gives up.
        (Way::ResetBeforeRun | Way::ResetAfterRun, _)
        | (
            Way::DroppedAfterSend
            | Way::DroppedDuringNoscript
            | Way::DroppedUnpolled
            | Way::DroppedWhileUnreachable,
            Ended::Dropped,
        ) => true,
        _ => false,
    }
}

/// One server, the client under test `a` (through a fault proxy, short
/// command timeout) and another client `b` that probes the name.
struct Bench {
    env: Env,
    proxy: redisync_testkit::FaultProxy,
    a: Client,
    b: Client,
    kind: Kind,
}

impl Bench {
    async fn start(kind: Kind) -> Bench {
        let env = Env::start().await;
        let proxy = redisync_testkit::FaultProxy::start(env.server.addr()).await;
        // Calls end with their fault (the endings under test): a waiting
        // acquisition would ride it out instead (`AcquireRetry`, checked
        // in tests/connection/blip.rs), so the bench's waits do not retry.
        let a = Client::builder(&proxy.url())
            .command_timeout(CALL_TIMEOUT)
            .acquire_retry(redisync::AcquireRetry::never())
            .connect()
            .await
            .expect("connect through the proxy");
        let b = env.client().await;
        // BUSY 50 ms into a script; every key may be written (noeviction).
        config_set(&env, "lua-time-limit", "50").await;
        config_set(&env, "maxmemory-policy", "noeviction").await;
        let bench = Bench {
            env,
            proxy,
            a,
            b,
            kind,
        };
        bench.warm_up().await;
        bench
    }

    /// Runs every call once, so the server caches their scripts: a call
    /// sent to a stopped server then runs once it resumes (a first
    /// `EVALSHA` would be answered NOSCRIPT, and the dropped or timed-out
    /// call would never send the body). [`Way::DroppedDuringNoscript`]
    /// takes the other path on purpose.
    async fn warm_up(&self) {
        let (kind, a) = (self.kind, &self.a);
        let name = "warm-up";
        kind.prepare(a, name).await;
        let mut g = kind
            .acquire(a, name, ZERO, Some(LEASE))
            .await
            .expect("warm-up")
            .expect("free");
        g.extend(LEASE).await.expect("warm-up extend");
        if matches!(kind, Kind::Lock | Kind::Fair) {
            g.hand_off().await.expect("warm-up hand-off");
        }
        if kind == Kind::Write {
            let r = Kind::Read.acquire(a, name, ZERO, Some(LEASE)).await;
            let r = r.expect("warm-up downgrade").expect("a writer reads");
            r.unlock().await.expect("warm-up read unlock");
        }
        g.unlock().await.expect("warm-up unlock");
        assert!(!kind.force_unlock(a, name).await.expect("warm-up force"));
    }

    /// Runs `fut` to its end, bounded so that a hang fails.
    async fn bounded<F: Future + ?Sized>(fut: std::pin::Pin<&mut F>, what: &str) -> F::Output {
        timeout(Duration::from_secs(15), fut)
            .await
            .unwrap_or_else(|_| panic!("{what}: the call hangs"))
    }

    /// Starts a read-only script on another connection that loops until
    /// killed; returns once the server answers `BUSY`.
    async fn start_busy(&self) -> tokio::task::JoinHandle<()> {
        let port = self.env.server.port();
        let task = tokio::spawn(async move {
            let _ = redisync_testkit::command(port, &["EVAL", "while true do end", "0"]).await;
        });
        let busy = eventually(Duration::from_secs(5), || async {
            matches!(self.env.admin.ping::<String>(None).await, Err(e) if e.details().contains("BUSY"))
        })
        .await;
        assert!(busy, "the server never answered BUSY");
        task
    }

    async fn end_busy(&self, task: tokio::task::JoinHandle<()>) {
        let _: fred::types::Value = self
            .env
            .admin
            .custom(
                CustomCommand::new_static("SCRIPT", ClusterHash::FirstKey, false),
                vec!["KILL".to_owned()],
            )
            .await
            .expect("SCRIPT KILL");
        timeout(Duration::from_secs(5), task)
            .await
            .expect("the busy script ends")
            .expect("busy task");
    }

    /// The key a [`Way::WrongType`] plants a foreign string at: one the
    /// acquisition reads (`readers` for a downgrade).
    fn foreign_key(&self, op: Op, name: &str) -> String {
        let role = match (op, self.kind) {
            (Op::Downgrade, _) => "readers",
            // A busy name's attempt reads the queue (not the counter).
            (Op::AcquireQueued, _) => "queue",
            (_, k) => k.roles()[1],
        };
        common::key(self.kind.primitive(), role, name)
    }

    /// [`Bench::provoke`] for an error reply: the keyspace after it is
    /// the one before (the client's own follow-ups, a release or an undo
    /// sent again, are held in the proxy until it is compared).
    async fn error_reply<F: Future<Output = redisync::Result<Answer>> + ?Sized>(
        &self,
        way: Way,
        fut: std::pin::Pin<&mut F>,
        op: Op,
        name: &str,
        what: &str,
    ) -> Ended {
        let env = &self.env;
        let foreign = self.foreign_key(op, name);
        if way == Way::WrongType {
            let () = env
                .admin
                .set(&foreign, "x", None, None, false)
                .await
                .unwrap();
        }
        let before = keyspace(env, name).await;
        let busy = match way {
            Way::Busy => Some(self.start_busy().await),
            Way::NoscriptThenOom => {
                script_flush(env).await;
                config_set(env, "maxmemory", "1").await;
                None
            }
            Way::Oom => {
                config_set(env, "maxmemory", "1").await;
                None
            }
            _ => None,
        };
        let r = Self::bounded(fut, what).await;
        self.proxy.blackhole(redisync_testkit::Direction::Upstream);
        if let Some(busy) = busy {
            self.end_busy(busy).await;
        }
        let after = keyspace(env, name).await;
        config_set(env, "maxmemory", "0").await;
        if way == Way::WrongType {
            let _: i64 = env.admin.del(&foreign).await.unwrap();
        }
        self.proxy.heal();
        assert_eq!(
            before, after,
            "{what}: a call answered with an error ({r:?}) changed the keyspace"
        );
        Ended::Returned(r)
    }

    /// Runs the call `fut` ended by `way`, lifting the fault before it
    /// returns.
    async fn provoke<F: Future<Output = redisync::Result<Answer>>>(
        &self,
        way: Way,
        fut: F,
        op: Op,
        name: &str,
        what: &str,
    ) -> Ended {
        use redisync_testkit::Direction;
        let mut fut = pin!(fut);
        let env = &self.env;
        match way {
            Way::Granted | Way::Refused => Ended::Returned(Self::bounded(fut, what).await),
            Way::Busy | Way::Oom | Way::NoscriptThenOom | Way::WrongType => {
                self.error_reply(way, fut, op, name, what).await
            }
            Way::CommandTimeout => {
                env.server.pause();
                let r = Self::bounded(fut, what).await;
                env.server.resume();
                Ended::Returned(r)
            }
            Way::ResetBeforeRun | Way::ResetAfterRun => {
                self.proxy.blackhole(if way == Way::ResetBeforeRun {
                    Direction::Upstream
                } else {
                    Direction::Downstream
                });
                let reset = async {
                    // The command is in the proxy (or has run) by then.
                    sleep(Duration::from_millis(150)).await;
                    self.proxy.reset_connections();
                    self.proxy.heal();
                };
                // Sent again over the new connection (fred's attempts), a
                // queued acquisition waits on: the caller gives up then.
                let (r, ()) = tokio::join!(timeout(Duration::from_secs(3), fut), reset);
                r.map_or(Ended::Dropped, Ended::Returned)
            }
            Way::DroppedAfterSend => {
                env.server.pause();
                let r = poll_for(fut, Duration::from_millis(60)).await;
                env.server.resume();
                r.map_or(Ended::Dropped, Ended::Returned)
            }
            Way::DroppedDuringNoscript => {
                script_flush(env).await;
                let failures = evalsha_failures(env).await;
                if let Poll::Ready(r) = futures::poll!(fut.as_mut()) {
                    return Ended::Returned(r);
                }
                // The NOSCRIPT reply is on its way back (not read yet).
                let answered = eventually(Duration::from_secs(3), || async {
                    evalsha_failures(env).await > failures
                })
                .await;
                assert!(answered, "{what}: no NOSCRIPT seen");
                env.server.pause();
                // Reads NOSCRIPT, sends the EVAL to the stopped server.
                let r = poll_for(fut, Duration::from_millis(60)).await;
                env.server.resume();
                r.map_or(Ended::Dropped, Ended::Returned)
            }
            Way::DroppedUnpolled => Ended::Dropped,
            Way::Unreachable | Way::DroppedWhileUnreachable => {
                self.proxy.refuse_connections(true);
                self.proxy.reset_connections();
                // Not an assertion: lets the client see its connection go.
                sleep(Duration::from_millis(100)).await;
                let r = if way == Way::Unreachable {
                    Some(Self::bounded(fut, what).await)
                } else {
                    poll_for(fut, Duration::from_millis(60)).await
                };
                self.proxy.heal();
                r.map_or(Ended::Dropped, Ended::Returned)
            }
        }
    }

    /// The call itself, over the guards of the way. An unlock takes its
    /// guard when the call is made (a dropped unpolled unlock drops it).
    fn call<'a>(
        &'a self,
        op: Op,
        way: Way,
        name: &'a str,
        st: &'a mut Guards,
    ) -> std::pin::Pin<Box<dyn Future<Output = redisync::Result<Answer>> + Send + 'a>> {
        let (kind, a) = (self.kind, &self.a);
        match op {
            Op::Acquire | Op::AcquireQueued | Op::Downgrade => {
                let side = if op == Op::Downgrade {
                    Kind::Read
                } else {
                    kind
                };
                let wait = match (op, way) {
                    (Op::AcquireQueued, Way::Refused) => Duration::from_millis(300),
                    (_, Way::Refused) => ZERO,
                    _ => FOREVER,
                };
                Box::pin(async move {
                    Ok(match side.acquire(a, name, wait, None).await? {
                        Some(g) => {
                            st.got = Some(g);
                            Answer::Granted
                        }
                        None => Answer::NotGranted,
                    })
                })
            }
            Op::Unlock => {
                let g = st.held.take().expect("a guard to unlock");
                Box::pin(async move { g.unlock().await.map(|()| Answer::Done) })
            }
            Op::Extend => {
                let g = st.held.as_ref().expect("a guard to extend");
                Box::pin(async move { g.extend(LEASE + LEASE / 3).await.map(|()| Answer::Done) })
            }
            Op::HandOff => {
                let g = st.held.as_mut().expect("a guard to hand off");
                Box::pin(async move { g.hand_off().await.map(|()| Answer::Done) })
            }
            Op::ForceUnlock => {
                Box::pin(async move { kind.force_unlock(a, name).await.map(Answer::Forced) })
            }
        }
    }

    /// Another client's zero-wait acquisition of `name`: if it gets the
    /// name, every guard in `guards` must already say lost.
    async fn no_second_holder(&self, guards: &[&AnyGuard], name: &str, what: &str) {
        if guards.iter().all(|g| g.is_lost()) {
            return;
        }
        probe_exclusive(self.kind, &self.b, name, || {
            for g in guards {
                assert!(
                    g.is_lost(),
                    "{what}: another client holds {name:?} while our guard (token {}) says held",
                    g.token()
                );
            }
        })
        .await;
    }

    /// The guards a way starts with on `name`: `a` holds it (the write
    /// side for a downgrade), except for an acquisition (free, or held by
    /// `b` for the refusal) and a refused force-unlock (free); a refused
    /// unlock, extend or hand-off finds it force-unlocked by `b`.
    async fn setup(&self, op: Op, way: Way, name: &str) -> Guards {
        let (kind, a, b) = (self.kind, &self.a, &self.b);
        let mut st = Guards::default();
        match op {
            Op::AcquireQueued => {
                let g = kind.exclusive().acquire(b, name, ZERO, Some(LEASE)).await;
                st.blocker = Some(g.expect("blocker").expect("free"));
            }
            Op::Acquire if way == Way::Refused => {
                let g = kind.exclusive().acquire(b, name, ZERO, Some(LEASE)).await;
                st.blocker = Some(g.expect("blocker").expect("free"));
            }
            Op::Acquire => {}
            Op::ForceUnlock if way == Way::Refused => {}
            _ => {
                let side = if op == Op::Downgrade {
                    Kind::Write
                } else {
                    kind
                };
                let g = side.acquire(a, name, ZERO, Some(LEASE)).await;
                st.held = Some(g.expect("setup acquire").expect("free"));
            }
        }
        if way == Way::Refused && matches!(op, Op::Unlock | Op::Extend | Op::HandOff) {
            assert!(kind.force_unlock(b, name).await.expect("force_unlock by b"));
        }
        st
    }

    /// Releases every guard of the way (`really_held`: whether each of
    /// `held`, `got` was found held, which must unlock), then the name
    /// must be free within [`LIVE`]: nobody holds it, whatever the call
    /// left (an undo, a release sent again).
    async fn let_go_then_free(
        &self,
        mut st: Guards,
        really_held: Vec<bool>,
        name: &str,
        what: &str,
    ) {
        let (kind, b) = (self.kind, &self.b);
        let (held, got) = (st.held.take(), st.got.take());
        for (g, really) in [got, held]
            .into_iter()
            .flatten()
            .zip(really_held.into_iter().rev())
        {
            let token = g.token();
            let r = g.unlock().await;
            assert!(
                !really || r.is_ok(),
                "{what}: unlock of a held guard (token {token}): {r:?}"
            );
        }
        if let Some(g) = st.blocker.take() {
            g.unlock().await.expect("blocker unlock");
        }
        let released_at = Instant::now();
        let free = eventually(LIVE, || is_free(kind, b, name)).await;
        assert!(
            free,
            "{what}: {name:?} is still taken {:?} after we let go of everything (a whole lease for nothing): {:?}",
            released_at.elapsed(),
            kind.inspect(b, name).await
        );
    }

    /// One way of ending `op` on a fresh name, and every check of it.
    async fn one(&self, op: Op, way: Way) {
        let (kind, a, b) = (self.kind, &self.a, &self.b);
        let name = &format!("{op:?}-{way:?}");
        let what = &format!("{kind:?} {op:?} ended by {way:?} ({:?})", way.ending());
        kind.prepare(b, name).await;
        let mut st = self.setup(op, way, name).await;

        // A queued acquisition is granted once the holder lets go.
        let blocker = (op == Op::AcquireQueued && way == Way::Granted)
            .then(|| st.blocker.take())
            .flatten();
        let call = self.call(op, way, name, &mut st);
        let ended = if way == Way::DroppedUnpolled {
            drop(call);
            Ended::Dropped
        } else if let Some(blocker) = blocker {
            let release = async {
                let queued = eventually(Duration::from_secs(5), || async {
                    !kind.inspect(b, name).await.waiters.is_empty()
                })
                .await;
                assert!(queued, "{what}: the acquisition never queued");
                blocker.unlock().await.expect("blocker unlock");
            };
            let mut call = call;
            let (r, ()) = tokio::join!(Self::bounded(call.as_mut(), what), release);
            Ended::Returned(r)
        } else {
            self.provoke(way, call, op, name, what).await
        };

        assert!(
            answered_as_expected(op, way, &ended),
            "{what}: the call ended {ended:?}"
        );
        eprintln!("{what}: ended {ended:?}");
        if std::env::var_os("ENDINGS_DEBUG").is_some() {
            eprintln!(
                "{what}: lost {:?}, in Redis {:?}",
                st.held.as_ref().map(AnyGuard::is_lost),
                kind.inspect(b, name).await.holders
            );
        }

        // Safety at once: a force-unlock that may have run leaves the
        // guard lost; so does a refusal that found the hold gone.
        if let Some(g) = &st.held {
            let must_be_lost = match op {
                Op::ForceUnlock => way == Way::Granted || way.may_have_run_unseen(),
                Op::Extend | Op::HandOff => way == Way::Refused,
                _ => false,
            };
            assert!(
                !must_be_lost || g.is_lost(),
                "{what}: the guard says held (validity {:?})",
                g.validity()
            );
        }

        // Right away: while a guard of ours says held, another client
        // gets nothing.
        let guards: Vec<&AnyGuard> = [&st.held, &st.got].into_iter().flatten().collect();
        self.no_second_holder(&guards, name, what).await;

        // The client is back (a reset or an unreachable server lifted).
        let back = eventually(Duration::from_secs(10), || async {
            redisync::__private::server_uptime(a).await.is_ok()
        })
        .await;
        assert!(back, "{what}: the client never reached the server again");

        // A hand-off that may have run moved the hold away from its owner
        // (this task): the owner's next acquisition must not get it while
        // the guard says held.
        if op == Op::HandOff && (way == Way::Granted || way.may_have_run_unseen()) {
            if let Some(g) = &st.held {
                let mine = kind.acquire(a, name, ZERO, Some(LEASE)).await;
                if let Ok(Some(mine)) = mine {
                    assert!(
                        g.is_lost(),
                        "{what}: the handed guard (token {}) says held, and its old owner was granted token {}",
                        g.token(),
                        mine.token()
                    );
                    let _ = mine.unlock().await;
                }
            }
        }

        // Safety and reality: while a guard of ours says held, another
        // client gets nothing, and the guard really holds (extend
        // succeeds, or at least the name is taken).
        let mut really_held = Vec::new();
        for g in &guards {
            if g.is_lost() {
                really_held.push(false);
                continue;
            }
            self.no_second_holder(&guards, name, what).await;
            match g.extend(LEASE).await {
                Ok(()) => really_held.push(true),
                Err(Error::NotHeld { .. }) => {
                    assert!(
                        g.is_lost(),
                        "{what}: extend found it gone, the guard says held"
                    );
                    assert!(
                        !is_free(kind, b, name).await,
                        "{what}: a guard that said held held nothing"
                    );
                    really_held.push(false);
                }
                Err(e) => panic!("{what}: extend of a guard that says held: {e}"),
            }
        }

        self.let_go_then_free(st, really_held, name, what).await;
    }
}

/// Ends `op` each way of `ending` on a name of `kind` (see [`Way`]), and
/// checks safety (never two holders; a guard whose call may have removed
/// its hold reports lost), liveness (once everything is let go, the name
/// is free within [`LIVE`], not a lease) and that an error reply wrote
/// nothing.
async fn end_call(kind: Kind, op: Op, ending: Ending) {
    use futures::FutureExt;
    let bench = Bench::start(kind).await;
    // Every way runs, so a failing cell tells all the ways that fail.
    let mut failures = Vec::new();
    for &way in ending.ways(op) {
        if let Err(panic) = std::panic::AssertUnwindSafe(bench.one(op, way))
            .catch_unwind()
            .await
        {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            failures.push(format!("{way:?}: {message}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{kind:?} {op:?} ({ending:?}): {} of {} ways fail:\n{}",
        failures.len(),
        ending.ways(op).len(),
        failures.join("\n")
    );
}

/// One scenario per (operation, ending), each run for every kind the
/// operation applies to.
macro_rules! ending_scenarios {
    ($($scenario:ident: $op:ident, $ending:ident;)*) => {
        $(
            async fn $scenario(kind: Kind) {
                end_call(kind, Op::$op, Ending::$ending).await;
            }
        )*
    };
}

ending_scenarios! {
    acquire_ending_reply: Acquire, Reply;
    acquire_ending_error_reply: Acquire, ErrorReply;
    acquire_ending_unknown: Acquire, Unknown;
    acquire_ending_never_sent: Acquire, NeverSent;
    acquire_queued_ending_reply: AcquireQueued, Reply;
    acquire_queued_ending_error_reply: AcquireQueued, ErrorReply;
    acquire_queued_ending_unknown: AcquireQueued, Unknown;
    acquire_queued_ending_never_sent: AcquireQueued, NeverSent;
    unlock_ending_reply: Unlock, Reply;
    unlock_ending_error_reply: Unlock, ErrorReply;
    unlock_ending_unknown: Unlock, Unknown;
    unlock_ending_never_sent: Unlock, NeverSent;
    extend_ending_reply: Extend, Reply;
    extend_ending_error_reply: Extend, ErrorReply;
    extend_ending_unknown: Extend, Unknown;
    extend_ending_never_sent: Extend, NeverSent;
    hand_off_ending_reply: HandOff, Reply;
    hand_off_ending_error_reply: HandOff, ErrorReply;
    hand_off_ending_unknown: HandOff, Unknown;
    hand_off_ending_never_sent: HandOff, NeverSent;
    force_unlock_ending_reply: ForceUnlock, Reply;
    force_unlock_ending_error_reply: ForceUnlock, ErrorReply;
    force_unlock_ending_unknown: ForceUnlock, Unknown;
    force_unlock_ending_never_sent: ForceUnlock, NeverSent;
    downgrade_ending_reply: Downgrade, Reply;
    downgrade_ending_error_reply: Downgrade, ErrorReply;
    downgrade_ending_unknown: Downgrade, Unknown;
    downgrade_ending_never_sent: Downgrade, NeverSent;
}

macro_rules! cell {
    ($kind:ident, $scenario:ident, ok) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $scenario() {
            run(super::$scenario, Kind::$kind).await;
        }
    };
    ($kind:ident, $scenario:ident, ignore($why:literal)) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = $why]
        async fn $scenario() {
            run(super::$scenario, Kind::$kind).await;
        }
    };
    ($kind:ident, $scenario:ident, na) => {};
}

/// One module of tests per kind (row), one test per scenario (cell).
macro_rules! conformance {
    ($($row:ident: $kind:ident { $($scenario:ident: $status:ident $(($why:literal))?,)* })*) => {
        $(
            mod $row {
                use super::{run, Kind};
                $( cell!($kind, $scenario, $status $(($why))?); )*
            }
        )*
    };
}

conformance! {
    lock: Lock {
        cancel_at_every_await_point: ok,
        cancelled_reentry_never_undoes_the_next_acquisition: ok,
        reacquire_after_loss_never_reuses_the_token_or_is_released_by_the_old_guard: ok,
        extend_and_renew_never_leave_local_validity_above_redis_reentered: ok,
        extend_and_renew_never_leave_local_validity_above_redis_watchdog: ok,
        up_and_downgrade_with_a_local_waiter_downgrade: na,
        up_and_downgrade_with_a_local_waiter_upgrade: na,
        non_owner_unlock_writes_nothing: ok,
        wrong_type_keys_are_an_error_and_untouched: ok,
        script_flush_changes_nothing: ok,
        shutdown_tells_live_guards_and_fails_waiters: ok,
        names_are_a_namespace: ok,
        tokens_never_go_back_after_a_restart_from_an_older_snapshot: ok,
        reentry_racing_the_last_drop_never_revives_a_released_hold: ok,
        watchdog_reentry_over_a_fixed_lease_is_renewed: ok,
        a_stall_past_the_lease_wins_over_the_work: ok,
        force_unlock_after_a_grant_in_flight_loses_that_grant: ok,
        restart_guard_grants_nothing_until_old_leases_could_have_ended: ok,
        a_force_unlock_whose_outcome_is_unknown_leaves_the_guards_lost: ok,
        an_aborted_waiter_leaves_the_queue_at_shutdown: ok,
        restart_guard_sees_a_restart_behind_a_proxy_that_keeps_the_connection: ok,
        a_save_never_makes_a_guarded_zero_wait_miss_a_free_name: ok,
        two_flows_of_one_owner_never_both_hold: ok,
        acquire_ending_reply: ok,
        acquire_ending_error_reply: ok,
        acquire_ending_unknown: ok,
        acquire_ending_never_sent: ok,
        acquire_queued_ending_reply: ok,
        acquire_queued_ending_error_reply: ok,
        acquire_queued_ending_unknown: ok,
        acquire_queued_ending_never_sent: ok,
        unlock_ending_reply: ok,
        unlock_ending_error_reply: ok,
        unlock_ending_unknown: ok,
        unlock_ending_never_sent: ok,
        extend_ending_reply: ok,
        extend_ending_error_reply: ok,
        extend_ending_unknown: ok,
        extend_ending_never_sent: ok,
        hand_off_ending_reply: ok,
        hand_off_ending_error_reply: ok,
        hand_off_ending_unknown: ok,
        hand_off_ending_never_sent: ok,
        force_unlock_ending_reply: ok,
        force_unlock_ending_error_reply: ok,
        force_unlock_ending_unknown: ok,
        force_unlock_ending_never_sent: ok,
        // A downgrade is the write side taking the read side.
        downgrade_ending_reply: na,
        downgrade_ending_error_reply: na,
        downgrade_ending_unknown: na,
        downgrade_ending_never_sent: na,
    }
    fair: Fair {
        cancel_at_every_await_point: ok,
        cancelled_reentry_never_undoes_the_next_acquisition: ok,
        reacquire_after_loss_never_reuses_the_token_or_is_released_by_the_old_guard: ok,
        extend_and_renew_never_leave_local_validity_above_redis_reentered: ok,
        extend_and_renew_never_leave_local_validity_above_redis_watchdog: ok,
        up_and_downgrade_with_a_local_waiter_downgrade: na,
        up_and_downgrade_with_a_local_waiter_upgrade: na,
        non_owner_unlock_writes_nothing: ok,
        wrong_type_keys_are_an_error_and_untouched: ok,
        script_flush_changes_nothing: ok,
        shutdown_tells_live_guards_and_fails_waiters: ok,
        names_are_a_namespace: ok,
        tokens_never_go_back_after_a_restart_from_an_older_snapshot: ok,
        reentry_racing_the_last_drop_never_revives_a_released_hold: ok,
        watchdog_reentry_over_a_fixed_lease_is_renewed: ok,
        a_stall_past_the_lease_wins_over_the_work: ok,
        force_unlock_after_a_grant_in_flight_loses_that_grant: ok,
        restart_guard_grants_nothing_until_old_leases_could_have_ended: ok,
        a_force_unlock_whose_outcome_is_unknown_leaves_the_guards_lost: ok,
        an_aborted_waiter_leaves_the_queue_at_shutdown: ok,
        restart_guard_sees_a_restart_behind_a_proxy_that_keeps_the_connection: ok,
        a_save_never_makes_a_guarded_zero_wait_miss_a_free_name: ok,
        two_flows_of_one_owner_never_both_hold: ok,
        acquire_ending_reply: ok,
        acquire_ending_error_reply: ok,
        acquire_ending_unknown: ok,
        acquire_ending_never_sent: ok,
        acquire_queued_ending_reply: ok,
        acquire_queued_ending_error_reply: ok,
        acquire_queued_ending_unknown: ok,
        acquire_queued_ending_never_sent: ok,
        unlock_ending_reply: ok,
        unlock_ending_error_reply: ok,
        unlock_ending_unknown: ok,
        unlock_ending_never_sent: ok,
        extend_ending_reply: ok,
        extend_ending_error_reply: ok,
        extend_ending_unknown: ok,
        extend_ending_never_sent: ok,
        hand_off_ending_reply: ok,
        hand_off_ending_error_reply: ok,
        hand_off_ending_unknown: ok,
        hand_off_ending_never_sent: ok,
        force_unlock_ending_reply: ok,
        force_unlock_ending_error_reply: ok,
        force_unlock_ending_unknown: ok,
        force_unlock_ending_never_sent: ok,
        // A downgrade is the write side taking the read side.
        downgrade_ending_reply: na,
        downgrade_ending_error_reply: na,
        downgrade_ending_unknown: na,
        downgrade_ending_never_sent: na,
    }
    read: Read {
        cancel_at_every_await_point: ok,
        cancelled_reentry_never_undoes_the_next_acquisition: ok,
        reacquire_after_loss_never_reuses_the_token_or_is_released_by_the_old_guard: ok,
        extend_and_renew_never_leave_local_validity_above_redis_reentered: ok,
        extend_and_renew_never_leave_local_validity_above_redis_watchdog: ok,
        up_and_downgrade_with_a_local_waiter_downgrade: na,
        up_and_downgrade_with_a_local_waiter_upgrade: ok,
        non_owner_unlock_writes_nothing: ok,
        wrong_type_keys_are_an_error_and_untouched: ok,
        script_flush_changes_nothing: ok,
        shutdown_tells_live_guards_and_fails_waiters: ok,
        names_are_a_namespace: ok,
        tokens_never_go_back_after_a_restart_from_an_older_snapshot: ok,
        reentry_racing_the_last_drop_never_revives_a_released_hold: ok,
        watchdog_reentry_over_a_fixed_lease_is_renewed: ok,
        a_stall_past_the_lease_wins_over_the_work: ok,
        force_unlock_after_a_grant_in_flight_loses_that_grant: ok,
        restart_guard_grants_nothing_until_old_leases_could_have_ended: ok,
        a_force_unlock_whose_outcome_is_unknown_leaves_the_guards_lost: ok,
        an_aborted_waiter_leaves_the_queue_at_shutdown: ok,
        restart_guard_sees_a_restart_behind_a_proxy_that_keeps_the_connection: ok,
        a_save_never_makes_a_guarded_zero_wait_miss_a_free_name: ok,
        two_flows_of_one_owner_never_both_hold: ok,
        acquire_ending_reply: ok,
        acquire_ending_error_reply: ok,
        acquire_ending_unknown: ok,
        acquire_ending_never_sent: ok,
        acquire_queued_ending_reply: ok,
        acquire_queued_ending_error_reply: ok,
        acquire_queued_ending_unknown: ok,
        acquire_queued_ending_never_sent: ok,
        unlock_ending_reply: ok,
        unlock_ending_error_reply: ok,
        unlock_ending_unknown: ok,
        unlock_ending_never_sent: ok,
        extend_ending_reply: ok,
        extend_ending_error_reply: ok,
        extend_ending_unknown: ok,
        extend_ending_never_sent: ok,
        // No hand_off: RwLockGuard keeps owners per side; permits have no owner.
        hand_off_ending_reply: na,
        hand_off_ending_error_reply: na,
        hand_off_ending_unknown: na,
        hand_off_ending_never_sent: na,
        force_unlock_ending_reply: ok,
        force_unlock_ending_error_reply: ok,
        force_unlock_ending_unknown: ok,
        force_unlock_ending_never_sent: ok,
        // A downgrade is the write side taking the read side.
        downgrade_ending_reply: na,
        downgrade_ending_error_reply: na,
        downgrade_ending_unknown: na,
        downgrade_ending_never_sent: na,
    }
    write: Write {
        cancel_at_every_await_point: ok,
        cancelled_reentry_never_undoes_the_next_acquisition: ok,
        reacquire_after_loss_never_reuses_the_token_or_is_released_by_the_old_guard: ok,
        extend_and_renew_never_leave_local_validity_above_redis_reentered: ok,
        extend_and_renew_never_leave_local_validity_above_redis_watchdog: ok,
        up_and_downgrade_with_a_local_waiter_downgrade: ok,
        up_and_downgrade_with_a_local_waiter_upgrade: na,
        non_owner_unlock_writes_nothing: ok,
        wrong_type_keys_are_an_error_and_untouched: ok,
        script_flush_changes_nothing: ok,
        shutdown_tells_live_guards_and_fails_waiters: ok,
        names_are_a_namespace: ok,
        tokens_never_go_back_after_a_restart_from_an_older_snapshot: ok,
        reentry_racing_the_last_drop_never_revives_a_released_hold: ok,
        watchdog_reentry_over_a_fixed_lease_is_renewed: ok,
        a_stall_past_the_lease_wins_over_the_work: ok,
        force_unlock_after_a_grant_in_flight_loses_that_grant: ok,
        restart_guard_grants_nothing_until_old_leases_could_have_ended: ok,
        a_force_unlock_whose_outcome_is_unknown_leaves_the_guards_lost: ok,
        an_aborted_waiter_leaves_the_queue_at_shutdown: ok,
        restart_guard_sees_a_restart_behind_a_proxy_that_keeps_the_connection: ok,
        a_save_never_makes_a_guarded_zero_wait_miss_a_free_name: ok,
        two_flows_of_one_owner_never_both_hold: ok,
        acquire_ending_reply: ok,
        acquire_ending_error_reply: ok,
        acquire_ending_unknown: ok,
        acquire_ending_never_sent: ok,
        acquire_queued_ending_reply: ok,
        acquire_queued_ending_error_reply: ok,
        acquire_queued_ending_unknown: ok,
        acquire_queued_ending_never_sent: ok,
        unlock_ending_reply: ok,
        unlock_ending_error_reply: ok,
        unlock_ending_unknown: ok,
        unlock_ending_never_sent: ok,
        extend_ending_reply: ok,
        extend_ending_error_reply: ok,
        extend_ending_unknown: ok,
        extend_ending_never_sent: ok,
        // No hand_off: RwLockGuard keeps owners per side; permits have no owner.
        hand_off_ending_reply: na,
        hand_off_ending_error_reply: na,
        hand_off_ending_unknown: na,
        hand_off_ending_never_sent: na,
        force_unlock_ending_reply: ok,
        force_unlock_ending_error_reply: ok,
        force_unlock_ending_unknown: ok,
        force_unlock_ending_never_sent: ok,
        downgrade_ending_reply: ok,
        downgrade_ending_error_reply: ok,
        downgrade_ending_unknown: ok,
        downgrade_ending_never_sent: ok,
    }
    semaphore: Semaphore {
        cancel_at_every_await_point: ok,
        // Permits are not re-entrant.
        cancelled_reentry_never_undoes_the_next_acquisition: na,
        reacquire_after_loss_never_reuses_the_token_or_is_released_by_the_old_guard: ok,
        // Permits are not re-entrant.
        extend_and_renew_never_leave_local_validity_above_redis_reentered: na,
        extend_and_renew_never_leave_local_validity_above_redis_watchdog: ok,
        up_and_downgrade_with_a_local_waiter_downgrade: na,
        up_and_downgrade_with_a_local_waiter_upgrade: na,
        // A Semaphore has no force_unlock.
        non_owner_unlock_writes_nothing: na,
        wrong_type_keys_are_an_error_and_untouched: ok,
        script_flush_changes_nothing: ok,
        shutdown_tells_live_guards_and_fails_waiters: ok,
        names_are_a_namespace: ok,
        tokens_never_go_back_after_a_restart_from_an_older_snapshot: ok,
        // Permits are not re-entrant.
        reentry_racing_the_last_drop_never_revives_a_released_hold: na,
        // Permits are not re-entrant.
        watchdog_reentry_over_a_fixed_lease_is_renewed: na,
        a_stall_past_the_lease_wins_over_the_work: ok,
        force_unlock_after_a_grant_in_flight_loses_that_grant: ok,
        restart_guard_grants_nothing_until_old_leases_could_have_ended: ok,
        a_force_unlock_whose_outcome_is_unknown_leaves_the_guards_lost: ok,
        an_aborted_waiter_leaves_the_queue_at_shutdown: ok,
        restart_guard_sees_a_restart_behind_a_proxy_that_keeps_the_connection: ok,
        a_save_never_makes_a_guarded_zero_wait_miss_a_free_name: ok,
        // Permits are not re-entrant.
        two_flows_of_one_owner_never_both_hold: na,
        acquire_ending_reply: ok,
        acquire_ending_error_reply: ok,
        acquire_ending_unknown: ok,
        acquire_ending_never_sent: ok,
        acquire_queued_ending_reply: ok,
        acquire_queued_ending_error_reply: ok,
        acquire_queued_ending_unknown: ok,
        acquire_queued_ending_never_sent: ok,
        unlock_ending_reply: ok,
        unlock_ending_error_reply: ok,
        unlock_ending_unknown: ok,
        unlock_ending_never_sent: ok,
        extend_ending_reply: ok,
        extend_ending_error_reply: ok,
        extend_ending_unknown: ok,
        extend_ending_never_sent: ok,
        // No hand_off on a permit.
        hand_off_ending_reply: na,
        hand_off_ending_error_reply: na,
        hand_off_ending_unknown: na,
        hand_off_ending_never_sent: na,
        force_unlock_ending_reply: ok,
        force_unlock_ending_error_reply: ok,
        force_unlock_ending_unknown: ok,
        force_unlock_ending_never_sent: ok,
        // A downgrade is the write side taking the read side.
        downgrade_ending_reply: na,
        downgrade_ending_error_reply: na,
        downgrade_ending_unknown: na,
        downgrade_ending_never_sent: na,
    }
}
