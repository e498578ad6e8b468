//! Keys that live for ever (issue 4 §6): whatever crashes, is cancelled or
//! restarts, every key redisync leaves has a TTL within its documented
//! bound, and once the leases ran out the keys come back to the documented
//! floor (README "Key cost": fencing counters and a semaphore's permit
//! hash).

mod common;

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
    let lease_ms = LEASE.as_millis() as i64;
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
