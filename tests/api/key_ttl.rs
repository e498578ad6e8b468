//! Keys that live for ever: whatever crashes, is cancelled or
//! restarts, every key redisync leaves has a TTL within its documented
//! bound, and once the leases ran out the keys come back to the documented
//! floor (docs/data-layout.md, "Key cost": fencing counters and a semaphore's permit
//! hash).

use crate::common;

use std::time::Duration;

use common::{eventually, Env};
use fred::prelude::*;
use redisync::Client;
use redisync_testkit::{Direction, FaultProxy};

/// The watchdog period (so the lease) of the clients that crash: short, so
/// that the test waits out their leases in seconds.
const LEASE: Duration = Duration::from_secs(2);

/// Bound on every wait for an event; only reached when the code is wrong.
const WITHIN: Duration = Duration::from_secs(20);

/// A client behind a proxy, with the short [`LEASE`], that [`crash`] cuts
/// off from Redis for good.
async fn crashable(env: &Env) -> (Client, FaultProxy) {
    let proxy = FaultProxy::start(env.server.addr()).await;
    let client = Client::builder(&proxy.url())
        .watchdog_timeout(LEASE)
        .command_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect through the proxy");
    (client, proxy)
}

/// The process of `client` dies: its connections stall, then reset, and
/// no new one gets through (nothing it would send on its way out, a
/// release or a queue leave, reaches Redis); then the client is dropped
/// without a shutdown.
fn crash(client: Client, proxy: &FaultProxy) {
    proxy.blackhole(Direction::Both);
    proxy.refuse_connections(true);
    proxy.reset_connections();
    drop(client);
}

/// `PTTL key`.
async fn pttl(env: &Env, key: &str) -> i64 {
    env.admin.pttl(key).await.unwrap()
}

/// A semaphore holder and a queued waiter crash: the lease zset and the
/// queue get a TTL (the lease zset's within the longest lease, the queue's
/// within 2 x max(lease, watchdog period) + 1 s), both are gone once
/// those ended, and the permit the crashed holder held is free again (the
/// hash's count of permits in use follows the lease zset's expiry).
/// Before the fix neither key had a TTL (PTTL -1), ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_semaphore_holder_and_waiter_leave_keys_that_expire() {
    let env = Env::start().await;
    let name = "crashy";
    let (holder, holder_proxy) = crashable(&env).await;
    let (waiter, waiter_proxy) = crashable(&env).await;
    let permit = holder
        .semaphore(name)
        .with_permits(1)
        .acquire(1)
        .await
        .unwrap();
    let sem = waiter.semaphore(name).with_permits(1);
    let waiting = tokio::spawn(async move { sem.acquire(1).await.map(std::mem::forget) });
    assert!(
        common::semaphore_queued(&env.admin, name, 1).await,
        "the waiter did not queue"
    );
    std::mem::forget(permit);
    crash(holder, &holder_proxy);
    crash(waiter, &waiter_proxy);
    waiting.abort();

    let leases = common::key("sem", "leases", name);
    let queue = common::key("sem", "queue", name);
    let lease_ms = i64::try_from(LEASE.as_millis()).unwrap();
    let ttl = pttl(&env, &leases).await;
    assert!(
        ttl > 0 && ttl <= lease_ms,
        "lease zset: PTTL {ttl}, not within the lease of {lease_ms} ms"
    );
    let ttl = pttl(&env, &queue).await;
    assert!(
        ttl > 0 && ttl <= 2 * lease_ms + 1000,
        "queue: PTTL {ttl}, not within 2 leases and a second"
    );
    let gone = eventually(WITHIN, || async {
        env.admin
            .exists::<i64, _>(vec![leases.clone(), queue.clone()])
            .await
            .unwrap()
            == 0
    })
    .await;
    assert!(gone, "the lease zset or the queue did not expire");
    // The crashed holder's permit is free: the count in use followed.
    let fresh = env.client().await;
    let sem = fresh.semaphore(name);
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    let again = sem.try_acquire(1, Duration::ZERO).await.unwrap();
    assert!(again.is_some(), "the crashed holder's permit stayed taken");
}

/// The fencing counters' TTL of the clients of [`every_key_left_has_a_bounded_ttl`].
const FENCE_TTL: Duration = Duration::from_hours(1);

/// The count-down latch's TTL there.
const LATCH_TTL: Duration = Duration::from_secs(3);

/// How long the record of a latch outlives what it records
/// (docs/data-layout.md, "Key cost": a minute).
const LATCH_RECORD: Duration = Duration::from_mins(1);

/// Bound of the PTTL of any other key (holds, queues, reader tables, lease
/// zsets) with the [`LEASE`] of 2 s: a lease, or a queue lease and a
/// lease, or 2 x max(lease, watchdog period) + 1 s.
const HELD_BOUND: Duration = Duration::from_secs(10);

/// The documented PTTL bound of `key` (`None`: kept without one, a
/// semaphore's configuration), and whether it stays once every lease ran
/// out (the floor: fencing counters, a semaphore's hash, a latch's record
/// and its index).
fn bound(key: &str) -> (Option<Duration>, bool) {
    let rest = key.strip_prefix("redisync:v1:").expect("a redisync key");
    let mut parts = rest.splitn(3, ':');
    let (kind, role) = (parts.next().unwrap(), parts.next().unwrap());
    match (kind, role) {
        (_, "fence") => (Some(FENCE_TTL), true),
        ("sem", "hold") => (None, true),
        ("latch", "hold") => (Some(LATCH_TTL), false),
        ("latch", "record" | "forget") => (Some(LATCH_RECORD + LATCH_TTL), true),
        _ => (Some(HELD_BOUND), false),
    }
}

/// Every key of the server is redisync's and has a TTL within its bound;
/// returns the keys above the floor.
async fn check_ttls(env: &Env, when: &str) -> Vec<String> {
    let mut above = Vec::new();
    for key in common::all_keys(&env.admin).await {
        let (most, floor) = bound(&key);
        let ttl = pttl(env, &key).await;
        match most {
            None => assert_eq!(ttl, -1, "{when}: {key} has a TTL"),
            // Gone between KEYS and PTTL.
            Some(_) if ttl == -2 => continue,
            Some(most) => assert!(
                ttl > 0 && ttl <= i64::try_from(most.as_millis()).unwrap(),
                "{when}: {key}: PTTL {ttl}, not within {most:?}"
            ),
        }
        eprintln!("{when}: {key} PTTL {ttl}");
        if !floor {
            above.push(key);
        }
    }
    above
}

/// A client behind a proxy (see [`crashable`]) with the fencing TTL of
/// [`FENCE_TTL`].
async fn crashable_fenced(env: &Env) -> (Client, FaultProxy) {
    let proxy = FaultProxy::start(env.server.addr()).await;
    let client = Client::builder(&proxy.url())
        .watchdog_timeout(LEASE)
        .fence_ttl(FENCE_TTL)
        .command_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect through the proxy");
    (client, proxy)
}

/// A fresh client takes the lock, the fair lock and the semaphore once the
/// crashed leases ended, lets go, and shuts down; the keys are checked
/// before its shutdown.
async fn fresh_turn(env: &Env) {
    let fresh = Client::builder(&env.server.url())
        .watchdog_timeout(LEASE)
        .fence_ttl(FENCE_TTL)
        .connect()
        .await
        .unwrap();
    let wait = Duration::from_secs(15);
    let guard = fresh.lock("l").try_lock(wait, None).await.unwrap().unwrap();
    guard.unlock().await.unwrap();
    let guard = fresh
        .fair_lock("f")
        .try_lock(wait, None)
        .await
        .unwrap()
        .unwrap();
    guard.unlock().await.unwrap();
    let permit = fresh
        .semaphore("s")
        .with_permits(1)
        .try_acquire(1, wait)
        .await
        .unwrap()
        .unwrap();
    permit.release().await.unwrap();
    check_ttls(env, "after a fresh client's turn").await;
    fresh.shutdown().await.unwrap();
}

/// Every primitive, crashed, cancelled and restarted: a client holds a
/// lock, a fair lock, both sides of read-write locks, a semaphore permit
/// and a leadership and checks in on a latch, and crashes with all of it
/// (guards forgotten, its connections cut, dropped without a shutdown);
/// another client's waiters queue behind each, are cancelled, and it
/// crashes too. Every key has a TTL within its documented bound then,
/// after a snapshot and a restart from it, and while a fresh client takes
/// every primitive and lets go; once the leases ran out, only the
/// documented floor is left (fencing counters, the semaphore's hash, the
/// latch's record), each within its bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_left_has_a_bounded_ttl() {
    let mut env = Env::start().await;
    let (holder, holder_proxy) = crashable_fenced(&env).await;
    std::mem::forget(holder.lock("l").lock().await.unwrap());
    std::mem::forget(holder.fair_lock("f").lock().await.unwrap());
    std::mem::forget(holder.rw_lock("w").write().lock().await.unwrap());
    std::mem::forget(holder.rw_lock("r").read().lock().await.unwrap());
    let sem = holder.semaphore("s").with_permits(1);
    std::mem::forget(sem.acquire(1).await.unwrap());
    std::mem::forget(holder.leader("ld").campaign().await.unwrap());
    let latch = holder.count_down_latch("c");
    assert!(latch.try_set_count(2, LATCH_TTL).await.unwrap());
    assert_eq!(latch.count_down_as("w1").await.unwrap(), 1);

    let (waiter, waiter_proxy) = crashable_fenced(&env).await;
    let mut waiters = Vec::new();
    {
        let lock = waiter.lock("l");
        waiters.push(tokio::spawn(async move { drop(lock.lock().await) }));
        let fair = waiter.fair_lock("f");
        waiters.push(tokio::spawn(async move { drop(fair.lock().await) }));
        let reader = waiter.rw_lock("w").read();
        waiters.push(tokio::spawn(async move { drop(reader.lock().await) }));
        let writer = waiter.rw_lock("r").write();
        waiters.push(tokio::spawn(async move { drop(writer.lock().await) }));
        let sem = waiter.semaphore("s").with_permits(1);
        waiters.push(tokio::spawn(async move { drop(sem.acquire(1).await) }));
        let latch = waiter.count_down_latch("c");
        waiters.push(tokio::spawn(async move { drop(latch.wait().await) }));
    }
    let queues = [
        common::key("lock", "queue", "l"),
        common::key("fair", "queue", "f"),
        common::key("rw", "queue", "w"),
        common::key("rw", "queue", "r"),
        common::key("sem", "queue", "s"),
    ];
    let every_one = eventually(WITHIN, || async {
        let there = env.admin.exists::<i64, _>(queues.to_vec()).await.unwrap();
        usize::try_from(there).unwrap() == queues.len()
    })
    .await;
    assert!(every_one, "not every waiter queued in Redis");
    crash(holder, &holder_proxy);
    // Half the waiters are cancelled (their client leaves the queue), then
    // their client crashes with the rest.
    for (i, task) in waiters.iter().enumerate() {
        if i % 2 == 0 {
            task.abort();
        }
    }
    tokio::task::yield_now().await;
    crash(waiter, &waiter_proxy);
    for task in &waiters {
        task.abort();
    }
    check_ttls(&env, "after the crashes").await;

    // A snapshot, and a restart from it.
    common::save(&env.admin).await;
    env.server.kill().await;
    env.server.restart().await;
    let back = eventually(WITHIN, || async {
        env.admin.ping::<String>(None).await.is_ok()
    })
    .await;
    assert!(back, "the server did not come back");
    check_ttls(&env, "after the restart").await;

    // A fresh client takes every primitive once the crashed leases ended
    // and lets go, and shuts down.
    fresh_turn(&env).await;

    // Once every lease ran out: the floor.
    let floor = eventually(WITHIN, || async {
        check_ttls(&env, "while the leases run out")
            .await
            .is_empty()
    })
    .await;
    let left = check_ttls(&env, "after the leases ran out").await;
    assert!(floor, "keys above the floor stayed: {left:?}");
    let keys = common::all_keys(&env.admin).await;
    assert!(
        keys.iter().any(|k| k.contains(":sem:hold:")),
        "the semaphore's configuration is gone: {keys:?}"
    );
}
