//! Reentrant `Lock` under faults: flushed script cache, foreign keys, dead,
//! paused and restarted servers, killed subscriber connections, cancelled
//! waiters and owner checks. Every test runs against its own fresh server.

use crate::common;

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use common::{admin, eventually, lock_key, Env};
use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};
use redisync::{Client, Error};
use tokio::time::{sleep, timeout, Instant};

const COMMAND_TIMEOUT: Duration = Duration::from_millis(500);

/// A short watchdog lease that a stalled test process does not lose.
const WATCHDOG: Duration = Duration::from_millis(1500);

/// A client with a short command timeout and the given watchdog lease.
async fn fast_client(url: &str, watchdog: Duration) -> Client {
    Client::builder(url)
        .command_timeout(COMMAND_TIMEOUT)
        .watchdog_timeout(watchdog)
        .connect()
        .await
        .expect("connect")
}

async fn exists(env: &Env, name: &str) -> i64 {
    env.admin.exists(lock_key(name)).await.expect("EXISTS")
}

async fn pttl(env: &Env, name: &str) -> i64 {
    env.admin.pttl(lock_key(name)).await.expect("PTTL")
}

/// A tiny deterministic LCG (Knuth's MMIX constants).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_changes_nothing() {
    let env = Env::start().await;
    // A watchdog lease a stalled machine does not lose (renewed every
    // 500 ms); the sleep below still spans more than one lease.
    let a = fast_client(&env.server.url(), WATCHDOG).await;
    let b = fast_client(&env.server.url(), WATCHDOG).await;
    let lock_a = a.lock("flush");
    let lock_b = b.lock("flush");
    let flush = || async { env.admin.script_flush(false).await.expect("SCRIPT FLUSH") };

    // Every script's first EVALSHA after a flush answers NOSCRIPT.
    flush().await;
    let outer = lock_a
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .expect("free lock");
    flush().await;
    let inner = lock_a.lock().await.expect("re-enter after flush");
    let first_token = outer.fencing_token();
    assert_eq!(inner.fencing_token(), first_token);
    flush().await;
    assert_eq!(lock_a.hold_count().await.unwrap(), 2);

    // The watchdog's renewal script too: the lease is kept alive.
    flush().await;
    sleep(WATCHDOG + Duration::from_millis(500)).await;
    assert!(
        !outer.is_lost(),
        "watchdog could not renew after SCRIPT FLUSH"
    );
    assert!(pttl(&env, "flush").await > 0);

    flush().await;
    inner.unlock().await.expect("inner unlock after flush");
    assert_eq!(lock_a.hold_count().await.unwrap(), 1);
    flush().await;
    outer.unlock().await.expect("outer unlock after flush");
    assert_eq!(exists(&env, "flush").await, 0);

    flush().await;
    let g = lock_b
        .lock()
        .await
        .expect("acquire from another client after flush");
    assert!(
        g.fencing_token() > first_token,
        "fencing token did not increase"
    );
    flush().await;
    assert!(lock_b
        .force_unlock()
        .await
        .expect("force_unlock after flush"));
    assert!(g.is_lost(), "a force-unlocked local guard reports lost");
    assert_eq!(exists(&env, "flush").await, 0);
    assert!(matches!(g.unlock().await, Err(Error::NotHeld { .. })));

    // Extending a fixed lease after a flush.
    let g = lock_a
        .try_lock(Duration::ZERO, Some(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("free");
    flush().await;
    g.extend(Duration::from_secs(10))
        .await
        .expect("extend after flush");
    assert!(pttl(&env, "flush").await > 5_000);
    g.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_type_key_is_an_error_and_untouched() {
    let env = Env::start().await;
    let client = fast_client(&env.server.url(), Duration::from_secs(30)).await;
    let key = lock_key("w");
    let () = env
        .admin
        .set(&key, "hello", None, None, false)
        .await
        .unwrap();
    let lock = client.lock("w");

    let is_wrong_type = |r: &Error| matches!(r, Error::WrongType { key: k } if *k == key);
    let e = lock
        .try_lock(Duration::ZERO, None)
        .await
        .expect_err("string key");
    assert!(is_wrong_type(&e), "try_lock: {e:?}");
    let e = lock
        .try_lock(Duration::from_millis(300), Some(Duration::from_secs(1)))
        .await
        .expect_err("string key");
    assert!(is_wrong_type(&e), "try_lock with wait: {e:?}");
    let e = timeout(Duration::from_secs(3), lock.lock())
        .await
        .expect("lock() on a string key must not hang")
        .expect_err("string key");
    assert!(is_wrong_type(&e), "lock: {e:?}");
    let e = lock.is_locked().await.expect_err("string key");
    assert!(is_wrong_type(&e), "is_locked: {e:?}");
    let e = lock.hold_count().await.expect_err("string key");
    assert!(is_wrong_type(&e), "hold_count: {e:?}");
    let e = lock.force_unlock().await.expect_err("string key");
    assert!(is_wrong_type(&e), "force_unlock: {e:?}");
    assert!(!e.is_retryable());

    let value: String = env.admin.get(&key).await.unwrap();
    assert_eq!(value, "hello");
    let ttl: i64 = env.admin.ttl(&key).await.unwrap();
    assert_eq!(ttl, -1, "the foreign key got a TTL");

    // A hash without TTL that redisync did not write: busy, never an error,
    // panic or hang, and left as it was.
    let hkey = lock_key("h");
    let () = env.admin.hset(&hkey, ("foo", 1)).await.unwrap();
    let hlock = client.lock("h");
    let started = Instant::now();
    let got = timeout(
        Duration::from_secs(3),
        hlock.try_lock(Duration::from_millis(200), None),
    )
    .await
    .expect("try_lock on a foreign hash must not hang")
    .expect("a foreign hash is busy, not an error");
    assert!(got.is_none(), "acquired a lock held by a foreign hash");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(hlock.is_locked().await.unwrap());
    assert_eq!(hlock.remaining_lease().await.unwrap(), Some(Duration::MAX));
    let fields: HashMap<String, String> = env.admin.hgetall(&hkey).await.unwrap();
    assert_eq!(fields, HashMap::from([("foo".to_owned(), "1".to_owned())]));
    let ttl: i64 = env.admin.ttl(&hkey).await.unwrap();
    assert_eq!(ttl, -1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_server_is_an_error_in_bounded_time() {
    let mut env = Env::start().await;
    let url = env.server.url();
    let client = fast_client(&url, Duration::from_secs(30)).await;
    let lock = client.lock("dead");
    assert!(!lock.is_locked().await.unwrap());
    env.server.kill().await;

    let started = Instant::now();
    let r = timeout(
        Duration::from_secs(10),
        lock.try_lock(Duration::from_secs(1), None),
    )
    .await
    .expect("try_lock hangs on a dead server");
    let elapsed = started.elapsed();
    let e = r.expect_err("try_lock on a dead server");
    assert!(matches!(e, Error::Redis(_)), "{e:?}");
    assert!(e.is_retryable(), "{e:?}");
    assert!(
        elapsed < Duration::from_secs(3),
        "try_lock took {elapsed:?}"
    );

    // `lock()` has no deadline: it rides the outage out (`AcquireRetry`),
    // waiting for Redis to come back rather than failing.
    let r = timeout(Duration::from_secs(2), lock.lock()).await;
    assert!(r.is_err(), "lock() on a dead server did not wait: {r:?}");

    // Connecting to a port nobody listens on.
    let started = Instant::now();
    let r = timeout(
        Duration::from_secs(5),
        Client::builder(&url)
            .command_timeout(COMMAND_TIMEOUT)
            .connect(),
    )
    .await
    .expect("connect hangs on a refused port");
    let elapsed = started.elapsed();
    let e = r.expect_err("connect to a refused port");
    assert!(matches!(e, Error::Redis(_)), "{e:?}");
    assert!(elapsed < Duration::from_secs(3), "connect took {elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_is_an_error_in_bounded_time() {
    let env = Env::start().await;
    // The default 30 s lease: a leaked acquisition would outlive the test.
    let client = fast_client(&env.server.url(), Duration::from_secs(30)).await;
    let lock = client.lock("paused");
    // Cache the acquire script, so the server runs the EVALSHA it finds
    // buffered on resume (a NOSCRIPT reply would make the test vacuous).
    lock.lock().await.unwrap().unlock().await.unwrap();
    let fence_key = common::key("lock", "fence", "paused");
    let fence_before: u64 = env.admin.get(&fence_key).await.unwrap();

    env.server.pause();
    let started = Instant::now();
    let r = timeout(Duration::from_secs(5), lock.try_lock(Duration::ZERO, None))
        .await
        .expect("try_lock hangs on a paused server");
    let elapsed = started.elapsed();
    env.server.resume();
    let e = r.expect_err("try_lock on a paused server");
    assert!(e.is_timeout(), "{e:?}");
    assert!(
        elapsed < Duration::from_secs(2),
        "try_lock took {elapsed:?}"
    );

    // The server now runs the buffered acquire; the compensating release
    // sent after the timeout must undo it.
    let clean = eventually(Duration::from_secs(2), || async {
        matches!(lock.is_locked().await, Ok(false))
    })
    .await;
    let fence_after: u64 = env.admin.get(&fence_key).await.unwrap();
    assert!(
        clean,
        "lock still held 2 s after resume, pttl {}",
        pttl(&env, "paused").await
    );
    assert!(
        fence_after > fence_before,
        "the timed-out acquire never ran on the server"
    );
    let g = lock
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .expect("lock free after resume");
    g.unlock().await.unwrap();
}

/// As `paused_server_is_an_error_in_bounded_time`, but the server stays
/// frozen longer than two command timeouts, so the compensating release
/// times out as well before the server wakes up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_pause_compensating_release_is_retried() {
    let env = Env::start().await;
    let client = fast_client(&env.server.url(), Duration::from_secs(30)).await;
    let lock = client.lock("paused");
    lock.lock().await.unwrap().unlock().await.unwrap();

    env.server.pause();
    let e = lock
        .try_lock(Duration::ZERO, None)
        .await
        .expect_err("paused server");
    assert!(e.is_timeout(), "{e:?}");
    // The compensating release goes out now and times out 500 ms later.
    sleep(Duration::from_millis(1500)).await;
    env.server.resume();

    // The server runs the buffered acquire (EVALSHA, cached) and then the
    // buffered release (EVALSHA of lock_abandon.lua, never used on this
    // server: NOSCRIPT); nobody is left to send the EVAL fallback.
    let clean = eventually(Duration::from_secs(2), || async {
        matches!(lock.is_locked().await, Ok(false))
    })
    .await;
    assert!(
        clean,
        "a timed-out acquisition still holds the lock 2 s after resume, pttl {} ms",
        pttl(&env, "paused").await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_wake_after_pubsub_connections_are_killed() {
    let env = Env::start().await;
    let a = fast_client(&env.server.url(), Duration::from_secs(30)).await;
    let b = fast_client(&env.server.url(), Duration::from_secs(30)).await;
    let lock_a = a.lock("pubsub");
    for round in 0..2 {
        let held = lock_a
            .try_lock(Duration::ZERO, Some(Duration::from_secs(20)))
            .await
            .unwrap()
            .expect("free lock");
        let lock_b = b.lock("pubsub");
        let waiter = tokio::spawn(async move {
            let r = lock_b.try_lock(Duration::from_secs(10), None).await;
            (Instant::now(), r)
        });
        sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "round {round}: B did not wait");

        let killed: i64 = env
            .admin
            .custom(
                CustomCommand::new_static("CLIENT", ClusterHash::FirstKey, false),
                vec!["KILL", "TYPE", "pubsub"],
            )
            .await
            .expect("CLIENT KILL");
        assert!(
            killed >= 1,
            "round {round}: no pubsub connection was killed"
        );
        sleep(Duration::from_millis(500)).await;
        assert!(!waiter.is_finished(), "round {round}: B stopped waiting");

        let unlocked_at = Instant::now();
        held.unlock().await.unwrap();
        let (acquired_at, r) = timeout(Duration::from_secs(3), waiter)
            .await
            .unwrap_or_else(|_| panic!("round {round}: B was not woken by the unlock"))
            .unwrap();
        let guard = r.unwrap().expect("B acquires");
        let delay = acquired_at.duration_since(unlocked_at);
        assert!(
            delay < Duration::from_millis(1500),
            "round {round}: B took {delay:?} after the unlock"
        );
        guard.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_is_reported_as_lost() {
    let mut env = Env::start().await;
    let client = fast_client(&env.server.url(), WATCHDOG).await;
    let lock = client.lock("restart");
    let guard = lock.lock().await.unwrap();
    let before = guard.fencing_token();

    env.server.restart().await;
    timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the guard did not report the lock lost within 5 s");
    assert!(guard.is_lost());

    let reconnected = eventually(Duration::from_secs(5), || async {
        lock.is_locked().await.is_ok()
    })
    .await;
    assert!(reconnected, "the client did not reconnect within 5 s");
    assert!(
        !lock.is_locked().await.unwrap(),
        "data should be gone after the restart"
    );
    let e = guard
        .unlock()
        .await
        .expect_err("unlock of a lock lost by a restart");
    assert!(
        matches!(&e, Error::NotHeld { name } if name == "restart"),
        "{e:?}"
    );

    let again = lock
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .expect("acquire after the restart");
    assert!(
        again.fencing_token() > before,
        "fencing token went backwards: {} after {before}",
        again.fencing_token()
    );
    sleep(WATCHDOG + Duration::from_millis(500)).await;
    assert!(
        !again.is_lost(),
        "the watchdog must renew after the restart"
    );
    again.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waiters_leave_no_lock() {
    let env = Env::start().await;
    let url = env.server.url();
    let a = fast_client(&url, Duration::from_secs(30)).await;
    let b = fast_client(&url, Duration::from_secs(30)).await;
    let c = fast_client(&url, Duration::from_secs(30)).await;

    let held = a
        .lock("cancel")
        .try_lock(Duration::ZERO, Some(Duration::from_secs(30)))
        .await
        .unwrap()
        .expect("free lock");
    let mut rng = Lcg(42);
    let mut tasks = Vec::new();
    for client in [&b, &c] {
        for k in 0..10 {
            let lock = client.lock("cancel");
            // The first waiter of each client outlives the check below.
            let wait = match k {
                0 => Duration::from_secs(2),
                _ => Duration::from_millis(1 + rng.next() % 300),
            };
            tasks.push(tokio::spawn(
                async move { timeout(wait, lock.lock()).await },
            ));
        }
    }
    // Precondition: the waiters did subscribe (the first waiter of each
    // client lives 2 s), so the check below is not vacuous.
    let channel = common::key("lock", "ch", "cancel");
    let subscribed = eventually(Duration::from_millis(1500), || async {
        common::our_shard_channels(&env).await.contains(&channel)
    })
    .await;
    assert!(subscribed, "the waiters never subscribed to {channel}");
    for t in tasks {
        let r = t.await.unwrap();
        assert!(
            r.is_err(),
            "a waiter finished while the lock was held: {r:?}"
        );
    }
    // A cancelled waiter leaves the lock's queue in the background (until
    // then a release could hand it the lock, and it would hand it on):
    // every one has left before the release.
    assert!(
        common::lock_queued(&env.admin, "cancel", 0).await,
        "a cancelled waiter stayed queued"
    );
    held.unlock().await.unwrap();

    // No cancelled waiter takes the lock when the unlock message goes out.
    for _ in 0..10 {
        assert_eq!(
            exists(&env, "cancel").await,
            0,
            "a cancelled waiter took the lock"
        );
        sleep(Duration::from_millis(100)).await;
    }
    common::assert_no_subscriptions_left(&env, Duration::from_secs(2)).await;
    let g = b
        .lock("cancel")
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .expect("lock free after the cancelled waiters");
    g.unlock().await.unwrap();

    cancel_at_any_point(&env, &b).await;
}

/// Polls `fut` (yielding in between) until it completes or `after` has
/// passed, then drops it: unlike `tokio::time::timeout`, whose timer ticks in
/// whole milliseconds, this cancels at any microsecond of the future's life.
async fn cancel_after<F: Future>(after: Duration, fut: F) -> Option<F::Output> {
    let started = std::time::Instant::now();
    let mut fut = std::pin::pin!(fut);
    loop {
        if let std::task::Poll::Ready(out) = futures::poll!(fut.as_mut()) {
            return Some(out);
        }
        if started.elapsed() >= after {
            return None;
        }
        tokio::task::yield_now().await;
    }
}

/// Cancels `lock()` on a free lock at every point of its life. Each attempt
/// runs in its own task, i.e. as its own owner, so a leaked acquisition is not
/// healed by the next attempt re-entering it.
async fn cancel_at_any_point(env: &Env, other: &Client) {
    // A 5 s lease: a leaked acquisition stays visible far longer than the
    // 2 s the background undo is given, even on a stalled machine.
    let client = fast_client(&env.server.url(), Duration::from_secs(5)).await;
    let lock = client.lock("stress");
    let (mut cancelled, mut completed) = (0, 0);
    for k in 0..400_u64 {
        let lock = lock.clone();
        let finished = tokio::spawn(async move {
            let r = if k < 200 {
                timeout(Duration::from_micros(k * 37 % 900), lock.lock())
                    .await
                    .ok()
            } else {
                // An acquire takes ~100-300 us here: most land in flight.
                cancel_after(Duration::from_micros(k * 37 % 400), lock.lock()).await
            };
            match r {
                Some(r) => {
                    r.expect("lock() on a free lock")
                        .unlock()
                        .await
                        .expect("unlock");
                    true
                }
                None => false,
            }
        })
        .await
        .unwrap();
        if finished {
            completed += 1;
        } else {
            cancelled += 1;
        }
        // A cancelled acquisition that won in Redis is undone in the
        // background at once, not left to its 5 s lease.
        let free = eventually(Duration::from_secs(2), || async {
            exists(env, "stress").await == 0
        })
        .await;
        assert!(free, "attempt {k}: a cancelled lock() left the lock taken");
    }
    println!("stress: {cancelled} cancelled, {completed} completed");
    assert!(cancelled > 0);

    sleep(Duration::from_millis(300)).await;
    assert_eq!(
        exists(env, "stress").await,
        0,
        "a cancelled acquisition left the lock taken"
    );
    sleep(Duration::from_secs(1)).await;
    assert_eq!(
        pttl(env, "stress").await,
        -2,
        "something renews or retakes the lock"
    );
    let g = other
        .lock("stress")
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .expect("free after the stress");
    g.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_owner_unlock_writes_nothing() {
    let env = Env::start().await;
    let url = env.server.url();
    let a = fast_client(&url, Duration::from_secs(30)).await;
    let b = fast_client(&url, Duration::from_secs(30)).await;
    let lock_a = a.lock("owner");
    let lock_b = b.lock("owner");

    let stale = lock_a
        .try_lock(Duration::ZERO, Some(Duration::from_millis(300)))
        .await
        .unwrap()
        .expect("free lock");
    sleep(Duration::from_millis(500)).await;
    let current = lock_b
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .expect("A's lease ran out");
    assert!(current.fencing_token() > stale.fencing_token());

    let channel = common::key("lock", "ch", "owner");
    let sub = admin(&url).await;
    let mut messages = sub.message_rx();
    common::subscribe(&sub, &channel).await;

    let e = stale.unlock().await.expect_err("unlock by a non-owner");
    assert!(
        matches!(&e, Error::NotHeld { name } if name == "owner"),
        "{e:?}"
    );

    sleep(Duration::from_millis(200)).await;
    assert!(messages.try_recv().is_err(), "a non-owner unlock published");
    let fields: HashMap<String, String> = env.admin.hgetall(lock_key("owner")).await.unwrap();
    let b_prefix = format!("{}:", b.id());
    let a_prefix = format!("{}:", a.id());
    assert_eq!(fields.len(), 2, "{fields:?}");
    assert_eq!(
        fields.get("~t"),
        Some(&current.fencing_token().to_string()),
        "{fields:?}"
    );
    assert!(
        fields
            .iter()
            .any(|(k, v)| k.starts_with(&b_prefix) && v == "1"),
        "B's owner field is gone: {fields:?}"
    );
    assert!(
        !fields.keys().any(|k| k.starts_with(&a_prefix)),
        "{fields:?}"
    );
    // B's 30 s lease is untouched (a loaded machine may take seconds to get here).
    assert!(pttl(&env, "owner").await > 20_000);
    assert!(lock_b.is_locked().await.unwrap());
    assert_eq!(lock_b.hold_count().await.unwrap(), 1);
    assert!(!current.is_lost());

    // A release publishes only when another client tried meanwhile: try once.
    assert!(lock_a
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .is_none());
    current.unlock().await.expect("the owner's unlock");
    let msg = timeout(Duration::from_secs(1), messages.recv())
        .await
        .expect("the owner's unlock publishes")
        .unwrap();
    assert_eq!(msg.channel.to_string(), channel);
    assert_eq!(exists(&env, "owner").await, 0);
}

/// `force_unlock` deletes whoever holds the lock, so it must never run twice.
/// Its reply is lost and the connection cut: fred must not send the script
/// again after the reconnect (which would delete the next holder's lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_whose_reply_is_lost_never_runs_twice() {
    let env = Env::start().await;
    let proxy = redisync_testkit::FaultProxy::start(env.server.addr()).await;
    let forcer = Client::builder(&proxy.url())
        .command_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect through the proxy");
    let holder = env.client().await;
    for (i, kind) in ["lock", "fair", "rw"].into_iter().enumerate() {
        let name = format!("forced-{kind}");
        let key = common::key(kind, "hold", &name);
        let take = || async {
            match kind {
                "lock" => holder
                    .lock(&name)
                    .lock()
                    .await
                    .map(|g| Box::new(g) as Box<dyn std::any::Any + Send>),
                "fair" => holder
                    .fair_lock(&name)
                    .lock()
                    .await
                    .map(|g| Box::new(g) as Box<dyn std::any::Any + Send>),
                _ => holder
                    .rw_lock(&name)
                    .write()
                    .lock()
                    .await
                    .map(|g| Box::new(g) as Box<dyn std::any::Any + Send>),
            }
        };
        // Warm the script cache: the EVALSHA below must run at once (a
        // NOSCRIPT reply would be swallowed too).
        let warm = match kind {
            "lock" => forcer.lock(&name).force_unlock().await,
            "fair" => forcer.fair_lock(&name).force_unlock().await,
            _ => forcer.rw_lock(&name).write().force_unlock().await,
        };
        assert!(!warm.unwrap(), "{kind}: not locked yet");
        let first = take().await.unwrap();
        // The request reaches Redis, the reply does not.
        proxy.blackhole(redisync_testkit::Direction::Downstream);
        let force = {
            let forcer = forcer.clone();
            let name = name.clone();
            tokio::spawn(async move {
                match kind {
                    "lock" => forcer.lock(&name).force_unlock().await,
                    "fair" => forcer.fair_lock(&name).force_unlock().await,
                    _ => forcer.rw_lock(&name).write().force_unlock().await,
                }
            })
        };
        let ran = eventually(Duration::from_secs(3), || async {
            env.admin.exists::<i64, _>(&key).await.unwrap() == 0
        })
        .await;
        assert!(ran, "{kind}: the force-unlock never ran");
        drop(first);
        // The next holder, then the cut: a re-sent force-unlock would delete it.
        let second = take().await.unwrap();
        proxy.reset_connections();
        let r = timeout(Duration::from_secs(6), force)
            .await
            .unwrap()
            .unwrap();
        proxy.heal();
        assert!(r.is_err(), "{kind}: the lost reply was reported as {r:?}");
        // The forcer reconnects (a command through it works again)...
        let back = eventually(Duration::from_secs(10), || async {
            forcer.lock(&format!("probe-{i}")).is_locked().await.is_ok()
        })
        .await;
        assert!(back, "{kind}: the forcer never reconnected");
        // ...and nothing it had in flight ran again.
        assert_eq!(
            env.admin.exists::<i64, _>(&key).await.unwrap(),
            1,
            "{kind}: the force-unlock ran twice and deleted the next holder"
        );
        drop(second);
    }
}

/// `unlock()` of a guard already known lost, with Redis down, says
/// `NotHeld` at once (as documented), not a retryable timeout after the
/// whole command timeout; for every kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlocking_a_lost_guard_with_redis_down_says_not_held_at_once() {
    let mut server = redisync_testkit::RedisServer::start().await;
    let client = Client::builder(&server.url())
        .command_timeout(Duration::from_secs(20))
        .connect()
        .await
        .unwrap();
    let lease = Duration::from_millis(200);
    let lock = client.lock("lost").lock_with_lease(lease).await.unwrap();
    let fair = client
        .fair_lock("lost")
        .try_lock(Duration::ZERO, Some(lease))
        .await
        .unwrap()
        .unwrap();
    let write = client
        .rw_lock("lost")
        .write()
        .try_lock(Duration::ZERO, Some(lease))
        .await
        .unwrap()
        .unwrap();
    let permit = client
        .semaphore("lost")
        .with_permits(1)
        .acquire_with_lease(1, lease)
        .await
        .unwrap();
    timeout(Duration::from_secs(10), async {
        lock.lost().await;
        fair.lost().await;
        write.lost().await;
        permit.lost().await;
    })
    .await
    .expect("the fixed leases ran out");
    server.kill().await;
    let started = Instant::now();
    let answers = [
        lock.unlock().await,
        fair.unlock().await,
        write.unlock().await,
        permit.release().await,
    ];
    let took = started.elapsed();
    for answer in answers {
        assert!(matches!(answer, Err(Error::NotHeld { .. })), "{answer:?}");
    }
    // Far below the command timeout it once waited for (each).
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

/// With Redis down, `try_lock` fails with a connection error in plain
/// words, whatever state fred is in (the first try, then the name's own
/// pending undo): no internal words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_the_error_has_no_internal_words() {
    let mut server = redisync_testkit::RedisServer::start().await;
    let client = Client::builder(&server.url())
        .command_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    server.kill().await;
    for _ in 0..4 {
        let text = client
            .lock("down")
            .try_lock(Duration::ZERO, None)
            .await
            .expect_err("the server is gone")
            .to_string();
        assert!(!text.contains("undo"), "{text}");
    }
    client.shutdown().await.unwrap();
}

/// The lease of the force-unlock test below (it must outlast the test).
const FORCE_LEASE: Duration = Duration::from_secs(30);

/// A force-unlock whose outcome is unknown (its future dropped after its
/// second send: the NOSCRIPT fallback's EVAL), called while this client
/// had no slot for the name, and an acquisition of the same client sent
/// during the call (after the force's EVALSHA, before its EVAL). The
/// engine's table ("Unknown outcomes"): force-unlock read as ran, "this
/// client's holds of the name are lost from the call's start, and so is
/// every hold won by a command sent before the call ended". Here the grant
/// runs in Redis before the force's EVAL, which deletes it: its guard must
/// report lost, or another client takes the name while it says held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_in_doubt_loses_a_grant_sent_during_the_call_without_an_earlier_slot() {
    use futures::FutureExt;
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    let name = "forced-in-doubt";
    let mut proven = 0;
    for round in 0..20 {
        let name = &format!("{name}-{round}");
        env.admin.script_flush(false).await.expect("SCRIPT FLUSH");
        // The acquire and release scripts are cached again, the force's not.
        let warm = a
            .lock("warm-up")
            .try_lock(Duration::ZERO, Some(FORCE_LEASE))
            .await;
        warm.expect("warm-up")
            .expect("free")
            .unlock()
            .await
            .expect("unlock");
        env.server.pause();
        let lock = a.lock(name);
        let mut force = Box::pin(lock.force_unlock());
        let mut acquire = Box::pin(lock.try_lock(Duration::ZERO, Some(FORCE_LEASE)));
        // Sent in this order on the one command connection: the force's
        // EVALSHA, then the acquisition's.
        for _ in 0..3 {
            assert!((&mut force).now_or_never().is_none());
            tokio::task::yield_now().await;
        }
        for _ in 0..3 {
            assert!((&mut acquire).now_or_never().is_none());
            tokio::task::yield_now().await;
        }
        env.server.resume();
        // The force polled first: its NOSCRIPT reply makes it send EVAL;
        // then the acquisition's reply ends the call, dropping the force.
        let got = tokio::select! {
            biased;
            // Its outcome is known: not this case.
            _ = &mut force => None,
            g = &mut acquire => Some(g),
        };
        drop(force);
        let Some(got) = got else { continue };
        let Some(guard) = got.expect("acquire") else {
            continue;
        };
        // Give the force's EVAL time to run in Redis (it was sent).
        let gone = common::eventually(Duration::from_secs(2), || async {
            let n: i64 = env
                .admin
                .exists(common::lock_key(name))
                .await
                .expect("EXISTS");
            n == 0
        })
        .await;
        if !gone {
            let _ = guard.unlock().await;
            continue; // the EVAL was never sent: nothing deleted
        }
        proven += 1;
        let other = b
            .lock(name)
            .try_lock(Duration::ZERO, Some(FORCE_LEASE))
            .await
            .expect("b");
        assert!(
            other.is_none() || guard.is_lost(),
            "round {round}: a's guard (token {}) says held while b holds the name (token {:?}): the force-unlock in doubt deleted a grant sent during its call",
            guard.fencing_token(),
            other.as_ref().map(redisync::LockGuard::fencing_token)
        );
        break;
    }
    assert!(
        proven > 0,
        "the force's EVAL never ran after the grant: scenario not reached"
    );
}
