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
//! Not in the matrix: undoing an acquisition that replicas did not
//! acknowledge; `tests/replica_sync.rs` already covers it for every primitive.

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
    async fn inspect(self, client: &Client, name: &str) -> redisync::Inspection {
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

/// 2. (defect 5) A re-entry cancelled while its script is re-sent after
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

/// 3. (defect 4) After a loss, a new acquisition of the same task gets a new
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

/// 4a. (defect 1) `extend` on a re-entered guard shortens the lease in Redis:
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

/// 4b. (defect 7) `extend` racing the watchdog's renewals: whatever order
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

/// 5a. (defect 2; the write row) A writer that takes the read side
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

/// 5b. (defect 2; the read row) A reader asking for the write side gets
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

/// 7. (defect 8 for the semaphore) A key of any role holding a foreign
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

/// 9. (defect 16) `shutdown()` fails waiters, tells live guards before anyone
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

/// 10. (defect 6) Every name is its own lock: names that look like another
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

/// 11. (defect 3) Tokens never go back, even after a restart that reloads
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

/// 12. (defect 12) A re-entry racing the release of the last guard (dropped
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
///     the second queues behind the first (README "Who re-enters").
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
///     future dropped before the shutdown, or while it runs): the shutdown
///     leaves the wait queue in Redis, so a release does not hand the name
///     to the departed waiter (the next client would wait a whole lease).
async fn an_aborted_waiter_leaves_the_queue_at_shutdown(kind: Kind) {
    let env = Env::start().await;
    let a = env.client().await;
    for dropped_first in [true, false] {
        let b = env.client().await;
        let name = &format!("aborted-{dropped_first}");
        kind.prepare(&a, name).await;
        let g = kind.exclusive().acquire(&a, name, ZERO, None).await;
        let g = g.expect("holder").expect("free");
        let waiter = {
            let (b, name) = (b.clone(), name.clone());
            tokio::spawn(async move { kind.acquire(&b, &name, FOREVER, None).await })
        };
        let queued = eventually(Duration::from_secs(10), || async {
            !kind.inspect(&a, name).await.waiters.is_empty()
        })
        .await;
        assert!(queued, "{kind:?}: the waiter never queued");
        waiter.abort();
        if dropped_first {
            assert!(waiter.await.expect_err("aborted").is_cancelled());
        }
        b.shutdown().await.expect("shutdown");
        let seen = kind.inspect(&a, name).await;
        assert!(
            seen.waiters.is_empty(),
            "{kind:?} (future dropped before the shutdown: {dropped_first}): the shut-down client is still queued: {seen:?}"
        );
        drop(g);
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
    }
}
