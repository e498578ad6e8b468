//! Phases of a count-down latch (expired, opened, set again), its waiters
//! under faults, `Leader::status` with several runs, and shutdown.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{eventually, Env};
use fred::prelude::*;
use redisync::leader::LeaderStatus;
use redisync::{Client, CountDownLatch, Error};
use redisync_testkit::{Direction, FaultProxy};
use tokio::time::{sleep, timeout, Instant};

const WITHIN: Duration = Duration::from_secs(10);

/// A waiter `w` of `name` is spawned and has made its first look (one
/// EVALSHA of the read script ran on the server after it started).
async fn spawn_waiter_after_first_look(
    env: &Env,
    w: &Client,
    name: &str,
) -> tokio::task::JoinHandle<redisync::Result<()>> {
    // Warm: the read script is cached and the connection is up.
    let _ = w.count_down_latch(name).count().await.unwrap();
    let before = common::evalsha_calls(env).await;
    let latch = w.count_down_latch(name);
    let task = tokio::spawn(async move { latch.wait().await });
    assert!(
        eventually(WITHIN, || async {
            common::evalsha_calls(env).await > before
        })
        .await,
        "the waiter never looked"
    );
    task
}

/// A waiter of a latch, through a proxy: past its first look, its next look
/// is held on the way to Redis until [`HeldWaiter::result`].
struct HeldWaiter {
    proxy: FaultProxy,
    waiter: tokio::task::JoinHandle<redisync::Result<()>>,
}

impl HeldWaiter {
    /// Sets latch `name` to 1 for `ttl` (through the returned latch, of a
    /// client that talks to Redis directly) and starts the held waiter.
    async fn start(env: &Env, name: &str, ttl: Duration) -> (HeldWaiter, CountDownLatch) {
        let proxy = FaultProxy::start(env.server.addr()).await;
        let w = common::client_via(&proxy).await;
        let latch = env.client().await.count_down_latch(name);
        assert!(latch.try_set_count(1, ttl).await.unwrap());
        let waiter = spawn_waiter_after_first_look(env, &w, name).await;
        proxy.blackhole(Direction::Upstream);
        (HeldWaiter { proxy, waiter }, latch)
    }

    /// Lets the held look through and returns what the wait returned.
    async fn result(self) -> redisync::Result<()> {
        self.proxy.heal();
        timeout(WITHIN, self.waiter)
            .await
            .expect("waiter returns")
            .unwrap()
    }
}

async fn key_gone(env: &Env, key: &str) -> bool {
    eventually(WITHIN, || async {
        env.admin.exists::<i64, _>(key).await.unwrap() == 0
    })
    .await
}

/// Contract: "an expiry before opening must be `LatchExpired` for waiters,
/// never an opening". Phase A expires (never opened); phase B is then set and
/// opened before the waiter's next look arrives (its read is late on the
/// network): the waiter of A is told A opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_phase_then_next_phase_opened_is_not_reported_open() {
    let env = Env::start().await;
    let name = "exp-then-open";
    // The waiter's next read is held on the way to Redis.
    let (waiter, latch) = HeldWaiter::start(&env, name, Duration::from_millis(800)).await;
    assert!(
        key_gone(&env, &common::key("latch", "hold", name)).await,
        "phase A never expired"
    );
    // Phase B, set and opened.
    assert!(latch
        .try_set_count(1, Duration::from_secs(30))
        .await
        .unwrap());
    assert_eq!(latch.count_down().await.unwrap(), 0);
    let got = waiter.result().await;
    assert!(
        matches!(got, Err(Error::LatchExpired { .. })),
        "phase A expired unopened, the waiter got {got:?}"
    );
}

/// As `expired_phase_then_next_phase_opened_is_not_reported_open`, with no
/// fault at all: the waiter looks again 20 ms after A's TTL ends; a member
/// that sets and opens the next phase within those 20 ms (it sees A gone
/// and, as the docs say, "members that race can all call `try_set_count`")
/// made the waiter of the expired phase A return as if A opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_phase_is_not_reported_open_when_the_next_opens_at_once() {
    let env = Env::start().await;
    let w = env.client().await;
    let d = env.client().await;
    let name = "exp-race";
    let key = common::key("latch", "hold", name);
    let latch = d.count_down_latch(name);
    assert!(latch
        .try_set_count(1, Duration::from_millis(500))
        .await
        .unwrap());
    let waiter = spawn_waiter_after_first_look(&env, &w, name).await;
    // Bounded polling for the TTL to pass (no sleep: the next phase starts
    // as soon as A is gone).
    let until = Instant::now() + WITHIN;
    while env.admin.exists::<i64, _>(&key).await.unwrap() == 1 {
        assert!(Instant::now() < until, "phase A never expired");
    }
    assert!(latch
        .try_set_count(1, Duration::from_secs(30))
        .await
        .unwrap());
    assert_eq!(latch.count_down().await.unwrap(), 0);
    let got = timeout(WITHIN, waiter)
        .await
        .expect("waiter returns")
        .unwrap();
    assert!(
        matches!(got, Err(Error::LatchExpired { .. })),
        "phase A expired unopened, the waiter got {got:?}"
    );
}

/// Contract: "a waiter of the previous phase still sees its phase opened".
/// A opens, B is set (short TTL) and expires before the waiter's next look:
/// the waiter of A is told A expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opened_phase_then_next_phase_expired_is_reported_open() {
    let env = Env::start().await;
    let name = "open-then-exp";
    let (waiter, latch) = HeldWaiter::start(&env, name, Duration::from_secs(30)).await;
    assert_eq!(latch.count_down().await.unwrap(), 0, "phase A opens");
    assert!(latch
        .try_set_count(1, Duration::from_millis(300))
        .await
        .unwrap());
    assert!(
        key_gone(&env, &common::key("latch", "hold", name)).await,
        "phase B never expired"
    );
    let got = waiter.result().await;
    assert!(got.is_ok(), "phase A opened, the waiter got {got:?}");
}

/// As above with two phases after A: A opens, B set and opens, C set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opened_phase_two_phases_back_is_reported_open() {
    let env = Env::start().await;
    let name = "open-two-back";
    let (waiter, latch) = HeldWaiter::start(&env, name, Duration::from_secs(30)).await;
    assert_eq!(latch.count_down().await.unwrap(), 0, "phase A opens");
    assert!(latch
        .try_set_count(1, Duration::from_secs(30))
        .await
        .unwrap());
    assert_eq!(latch.count_down().await.unwrap(), 0, "phase B opens");
    assert!(latch
        .try_set_count(1, Duration::from_secs(30))
        .await
        .unwrap());
    let got = waiter.result().await;
    assert!(got.is_ok(), "phase A opened, the waiter got {got:?}");
}

/// A dropped wait leaves no subscription; a wait that returns neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_and_finished_waits_leave_no_subscription() {
    let env = Env::start().await;
    let w = env.client().await;
    let name = "cancel";
    let latch = w.count_down_latch(name);
    assert!(latch
        .try_set_count(1, Duration::from_mins(1))
        .await
        .unwrap());
    for i in 0..20u64 {
        let _ = timeout(Duration::from_millis(i), latch.wait()).await;
    }
    let task = {
        let l = latch.clone();
        tokio::spawn(async move { l.wait().await })
    };
    assert!(
        eventually(WITHIN, || async {
            common::subscribers(&env.admin, &common::key("latch", "ch", name)).await == 1
        })
        .await
    );
    task.abort();
    let _ = task.await;
    common::assert_no_subscriptions_left(&env, Duration::from_secs(5)).await;
    // Opened while waited for.
    let task = {
        let l = latch.clone();
        tokio::spawn(async move { l.wait_timeout(WITHIN).await })
    };
    assert!(
        eventually(WITHIN, || async {
            common::subscribers(&env.admin, &common::key("latch", "ch", name)).await == 1
        })
        .await
    );
    assert_eq!(latch.count_down().await.unwrap(), 0);
    assert!(timeout(WITHIN, task).await.unwrap().unwrap().unwrap());
    common::assert_no_subscriptions_left(&env, Duration::from_secs(5)).await;
}

/// A waiter whose subscriber connection is cut (and misses the opening
/// message) still returns, promptly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_missed_the_message_returns() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let w = common::client_via(&proxy).await;
    let d = env.client().await;
    let name = "missed";
    let latch = d.count_down_latch(name);
    assert!(latch
        .try_set_count(1, Duration::from_mins(1))
        .await
        .unwrap());
    let waiter = spawn_waiter_after_first_look(&env, &w, name).await;
    proxy.blackhole(Direction::Both);
    assert_eq!(latch.count_down().await.unwrap(), 0);
    // The opening message is discarded with the connections.
    proxy.refuse_connections(true);
    proxy.reset_connections();
    assert!(eventually(WITHIN, || async { proxy.connections() == 0 }).await);
    proxy.heal();
    let got = timeout(WITHIN, waiter)
        .await
        .expect("waiter returns")
        .unwrap();
    assert!(got.is_ok(), "{got:?}");
}

async fn dump(env: &Env, key: String) -> String {
    let v: Value = env
        .admin
        .custom(
            fred::types::CustomCommand::new_static(
                "DUMP",
                fred::types::ClusterHash::FirstKey,
                false,
            ),
            vec![key],
        )
        .await
        .unwrap();
    format!("{v:?}")
}

/// Keys of the wrong type: a clear error, nothing written. Every operation
/// runs on a fresh copy of each planted key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_types_are_errors_and_untouched() {
    let env = Env::start().await;
    let c = env.client().await;
    let mut failures = Vec::new();
    for kind in ["string", "list", "hash-no-n", "hash-n-text", "hash-n-nan"] {
        for op in ["set", "count_down", "count", "wait"] {
            let name = format!("wt-{kind}-{op}");
            let key = common::key("latch", "hold", &name);
            match kind {
                "string" => env
                    .admin
                    .set::<(), _, _>(&key, "x", None, None, false)
                    .await
                    .unwrap(),
                "list" => env.admin.rpush::<(), _, _>(&key, "x").await.unwrap(),
                "hash-no-n" => env.admin.hset::<(), _, _>(&key, ("a", "1")).await.unwrap(),
                "hash-n-text" => env
                    .admin
                    .hset::<(), _, _>(&key, ("n", "abc"))
                    .await
                    .unwrap(),
                _ => env
                    .admin
                    .hset::<(), _, _>(&key, [("n", "nan"), ("user", "data")])
                    .await
                    .unwrap(),
            }
            let before = dump(&env, key.clone()).await;
            let latch = c.count_down_latch(&name);
            let r = match op {
                "set" => latch
                    .try_set_count(3, Duration::from_mins(1))
                    .await
                    .map(|v| format!("{v}")),
                "count_down" => latch.count_down().await.map(|v| format!("{v}")),
                "count" => latch.count().await.map(|v| format!("{v}")),
                _ => latch
                    .wait_timeout(Duration::from_millis(200))
                    .await
                    .map(|v| format!("{v}")),
            };
            let after = dump(&env, key.clone()).await;
            let untouched = before == after;
            let wrong_type = matches!(r, Err(Error::WrongType { .. }));
            if !untouched || !wrong_type {
                failures.push(format!(
                    "{kind} / {op}: {r:?}; key {}",
                    if untouched {
                        "untouched"
                    } else {
                        "CHANGED (now {after})"
                    }
                    .replace("{after}", &after)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `Leader::status` of two runs on clones of one handle: while one of them
/// leads, the status says so, also once the other campaigns; when the other
/// ends, the leading one's status is not Idle. (It went Campaigning, then
/// Idle, when the status was one value for every run.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_of_two_runs_on_clones() {
    let env = Env::start().await;
    let client = env.client().await;
    let leader = client.leader("clones");
    let status = leader.status();
    let a = {
        let l = leader.clone();
        tokio::spawn(async move { l.run(Duration::from_millis(50), |_| async {}).await })
    };
    let mut s = status.clone();
    timeout(
        WITHIN,
        s.wait_for(|s| matches!(s, LeaderStatus::Leading { .. })),
    )
    .await
    .unwrap()
    .unwrap();
    let started = Arc::new(tokio::sync::Notify::new());
    let b = {
        let l = leader.clone();
        let started = started.clone();
        tokio::spawn(async move {
            started.notify_one();
            l.run(Duration::from_millis(50), |_| async {}).await
        })
    };
    // b's run campaigns (a leads). It waits behind a's hold in its client
    // and sends nothing to Redis, so nothing outside shows it: its task ran,
    // and a while later it is parked. (This waited for an EVALSHA of b's,
    // which never comes: a's watchdog renewal came at about 10 s, just
    // inside the wait, or, on a loaded machine, just outside.)
    timeout(WITHIN, started.notified()).await.unwrap();
    sleep(Duration::from_millis(200)).await;
    assert!(!b.is_finished(), "b's run ended while a leads");
    let now = *status.borrow();
    assert!(
        matches!(now, LeaderStatus::Leading { .. }),
        "a leads while b campaigns, status says {now:?}"
    );
    b.abort();
    let _ = b.await;
    let now2 = *status.borrow();
    eprintln!("after b dropped, a still leading: {now2:?}");
    let cur = client.leader("clones").current().await.unwrap();
    assert!(cur.is_some(), "a still leads");
    assert!(
        matches!(now2, LeaderStatus::Leading { .. }),
        "a run of this handle still leads, status says {now2:?} (before b ended: {now:?})"
    );
    a.abort();
}

/// `Leader::status` is Idle when run returns on shutdown, and when its
/// future is dropped while campaigning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_idle_after_shutdown_and_drop() {
    let env = Env::start().await;
    let client = env.client().await;
    let other = env.client().await;
    let held = other.leader("idle").campaign().await.unwrap();
    let leader = client.leader("idle");
    let mut status = leader.status();
    let fut = {
        let l = leader.clone();
        tokio::spawn(async move { l.run(Duration::from_millis(50), |_| async {}).await })
    };
    timeout(WITHIN, status.wait_for(|s| *s == LeaderStatus::Campaigning))
        .await
        .unwrap()
        .unwrap();
    fut.abort();
    let _ = fut.await;
    assert_eq!(*status.borrow(), LeaderStatus::Idle);
    drop(held);
    let fut = {
        let l = leader.clone();
        tokio::spawn(async move { l.run(Duration::from_millis(50), |_| async {}).await })
    };
    timeout(
        WITHIN,
        status.wait_for(|s| matches!(s, LeaderStatus::Leading { .. })),
    )
    .await
    .unwrap()
    .unwrap();
    client.shutdown().await.unwrap();
    let r = timeout(WITHIN, fut).await.unwrap().unwrap();
    assert!(matches!(r, Err(Error::Shutdown)), "{r:?}");
    assert_eq!(*status.borrow(), LeaderStatus::Idle);
}

/// After shutdown with Redis up, no connection of the client is left, and
/// the locks were released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_redis_up_closes_everything() {
    let env = Env::start().await;
    let count = || async {
        let list = common::cli(env.server.port(), &["CLIENT", "LIST"]).await;
        list.lines().count()
    };
    let base = count().await;
    let c = env.client().await;
    let g = c.lock("held").lock().await.unwrap();
    let name = "sd";
    let l = c.count_down_latch(name);
    assert!(l.try_set_count(1, Duration::from_mins(1)).await.unwrap());
    let waiter = {
        let l = l.clone();
        tokio::spawn(async move { l.wait().await })
    };
    assert!(
        eventually(WITHIN, || async {
            common::subscribers(&env.admin, &common::key("latch", "ch", name)).await == 1
        })
        .await
    );
    assert!(count().await >= base + 2);
    c.shutdown().await.unwrap();
    assert!(matches!(waiter.await.unwrap(), Err(Error::Shutdown)));
    let other = env.client().await;
    assert!(
        !other.lock("held").is_locked().await.unwrap(),
        "released at shutdown"
    );
    other.shutdown().await.unwrap();
    drop(g);
    assert!(
        eventually(Duration::from_secs(3), || async { count().await == base }).await,
        "connections left: {}",
        common::cli(env.server.port(), &["CLIENT", "LIST"]).await
    );
}

/// A wait bound too long to represent: `try_lock` treats it as "forever"
/// (`checked_add`); `wait_timeout` should not panic either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_timeout_with_a_huge_bound_does_not_panic() {
    let env = Env::start().await;
    let c = env.client().await;
    let lock = c.lock("huge-wait");
    let g = lock.try_lock(Duration::MAX, None).await.unwrap();
    assert!(g.is_some(), "try_lock(Duration::MAX) works");
    let latch = c.count_down_latch("huge-wait");
    let r = tokio::spawn(async move { latch.wait_timeout(Duration::MAX).await }).await;
    assert!(
        matches!(r, Ok(Ok(true))),
        "wait_timeout(Duration::MAX) on a latch never set: {r:?}"
    );
}
