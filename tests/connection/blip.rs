//! A waiting acquisition rides out a blip: a connection reset,
//! refused connections or a Redis restart while a task waits do not end the
//! wait with an IO error; it goes on until its deadline and is granted once
//! the holder lets go; a zero wait fails at once; a deadline that passes
//! during the outage ends in plain words naming the address; an attempt
//! whose reply was lost leads to exactly one grant. The waiter goes through
//! a `FaultProxy`; the holder and the checker connect directly.

use crate::common;

use std::time::Duration;

use common::{eventually, Env};
use redisync::inspect::Inspection;
use redisync::{AcquireRetry, Client, Error};
use redisync_testkit::{Direction, FaultProxy, RedisServer};
use tokio::time::Instant;

/// The waiter's command timeout: an attempt sent into the outage fails
/// within it.
const COMMAND_TIMEOUT: Duration = Duration::from_millis(300);
/// The waiter's watchdog lease: it looks again every quarter of it, so an
/// attempt falls into an outage of ~800 ms.
const WATCHDOG: Duration = Duration::from_secs(1);
/// How long connections are refused.
const OUTAGE: Duration = Duration::from_millis(800);
/// A wait that outlasts every outage here.
const LONG_WAIT: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug)]
enum K {
    Lock,
    Fair,
    RwWrite,
    Sem,
}

/// A guard of any kind.
enum G {
    Lock(redisync::LockGuard),
    Fair(redisync::FairLockGuard),
    Rw(redisync::RwLockGuard),
    Sem(redisync::SemaphorePermit),
}

impl G {
    async fn release(self) {
        match self {
            G::Lock(g) => g.unlock().await.expect("unlock"),
            G::Fair(g) => g.unlock().await.expect("unlock"),
            G::Rw(g) => g.unlock().await.expect("unlock"),
            G::Sem(p) => p.release().await.expect("release"),
        }
    }
}

impl K {
    async fn take(self, c: &Client, name: &str, wait: Duration) -> redisync::Result<Option<G>> {
        Ok(match self {
            K::Lock => c.lock(name).try_lock(wait, None).await?.map(G::Lock),
            K::Fair => c.fair_lock(name).try_lock(wait, None).await?.map(G::Fair),
            K::RwWrite => c
                .rw_lock(name)
                .write()
                .try_lock(wait, None)
                .await?
                .map(G::Rw),
            K::Sem => c
                .semaphore(name)
                .with_permits(1)
                .try_acquire(1, wait)
                .await?
                .map(G::Sem),
        })
    }

    async fn inspect(self, c: &Client, name: &str) -> Inspection {
        match self {
            K::Lock => c.lock(name).inspect().await,
            K::Fair => c.fair_lock(name).inspect().await,
            K::RwWrite => c.rw_lock(name).inspect().await,
            K::Sem => c.semaphore(name).inspect().await,
        }
        .expect("inspect")
    }
}

async fn waiter(proxy: &FaultProxy) -> Client {
    Client::builder(&proxy.url())
        .command_timeout(COMMAND_TIMEOUT)
        .watchdog_timeout(WATCHDOG)
        .connect()
        .await
        .expect("connect through the proxy")
}

/// Waits until `name` has a waiter in Redis.
async fn until_waiting(k: K, c: &Client, name: &str) {
    assert!(
        eventually(Duration::from_secs(10), || async {
            !k.inspect(c, name).await.waiters.is_empty()
        })
        .await,
        "{k:?}: the waiter never queued"
    );
}

/// The plain-words error: names the proxy's address, no `Debug` dump.
fn assert_plain(e: &Error, proxy: &FaultProxy) {
    let text = e.to_string();
    assert!(
        text.contains(&format!("127.0.0.1:{}", proxy.port())),
        "no address in {text:?}"
    );
    assert!(
        !text.contains("Os {") && !text.contains("Custom {") && !text.contains("kind: "),
        "a Debug dump in {text:?}"
    );
    assert!(e.is_retryable(), "{text}");
}

/// A task waits; the connection is reset and refused for a while; the wait
/// goes on and is granted once the holder lets go, and nobody else holds.
async fn rides_out_a_reset(k: K) {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let holder = env.client().await;
    let checker = env.client().await;
    let b = waiter(&proxy).await;
    let name = "blip";
    let held = k
        .take(&holder, name, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let task = tokio::spawn({
        let b = b.clone();
        async move { k.take(&b, name, LONG_WAIT).await }
    });
    until_waiting(k, &checker, name).await;

    proxy.refuse_connections(true);
    proxy.reset_connections();
    tokio::time::sleep(OUTAGE).await; // the outage's length
    assert!(
        !task.is_finished(),
        "{k:?}: the wait ended during the outage"
    );
    proxy.refuse_connections(false);
    held.release().await;

    let got = tokio::time::timeout(Duration::from_secs(15), task)
        .await
        .expect("granted in time")
        .expect("task")
        .unwrap_or_else(|e| panic!("{k:?}: the wait failed: {e}"));
    let got = got.expect("granted, not timed out");
    assert!(
        k.take(&checker, name, Duration::ZERO)
            .await
            .unwrap()
            .is_none(),
        "{k:?}: two holders"
    );
    got.release().await;
}

/// The server dies and restarts (empty) while a task waits: granted
/// afterwards.
async fn rides_out_a_restart(k: K) {
    let mut env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let b = waiter(&proxy).await;
    let name = "restart";
    let held = {
        let holder = env.client().await;
        let held = k
            .take(&holder, name, Duration::ZERO)
            .await
            .unwrap()
            .unwrap();
        (holder, held)
    };
    let task = tokio::spawn({
        let b = b.clone();
        async move { k.take(&b, name, LONG_WAIT).await }
    });
    until_waiting(k, &env.client().await, name).await;
    // Down for a while (an attempt falls into it), then back, empty.
    env.server.kill().await;
    tokio::time::sleep(OUTAGE).await;
    assert!(
        !task.is_finished(),
        "{k:?}: the wait ended while Redis was down"
    );
    env.server.restart().await;
    // The holder lets go (its hold may be gone with the restart).
    drop(held);
    let got = tokio::time::timeout(Duration::from_secs(15), task)
        .await
        .expect("granted in time")
        .expect("task")
        .unwrap_or_else(|e| panic!("{k:?}: the wait failed: {e}"))
        .expect("granted");
    let checker = env.client().await;
    assert!(
        k.take(&checker, name, Duration::ZERO)
            .await
            .unwrap()
            .is_none(),
        "{k:?}: two holders"
    );
    got.release().await;
}

/// With connections refused, a zero wait answers at once with the error in
/// plain words; a wait whose deadline passes during the outage too.
async fn fails_in_plain_words(k: K) {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let holder = env.client().await;
    let b = waiter(&proxy).await;
    let name = "plain";
    let held = k
        .take(&holder, name, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    proxy.refuse_connections(true);
    proxy.reset_connections();

    let start = Instant::now();
    let zero = k.take(&b, name, Duration::ZERO).await;
    let Err(e) = zero else {
        panic!("{k:?}: a zero wait during the outage did not fail")
    };
    assert!(
        start.elapsed() < COMMAND_TIMEOUT + Duration::from_millis(500),
        "{k:?}: a zero wait took {:?}",
        start.elapsed()
    );
    assert_plain(&e, &proxy);

    let start = Instant::now();
    let wait = Duration::from_millis(1500);
    let Err(e) = k.take(&b, name, wait).await else {
        panic!("{k:?}: a wait through the outage did not fail")
    };
    assert!(
        start.elapsed() >= wait,
        "{k:?}: gave up after {:?}",
        start.elapsed()
    );
    assert!(
        start.elapsed() < wait + COMMAND_TIMEOUT + Duration::from_secs(1),
        "{k:?}: gave up after {:?}",
        start.elapsed()
    );
    assert_plain(&e, &proxy);
    assert!(e.to_string().contains("while waiting for"), "{e}");
    held.release().await;
}

/// The attempt runs in Redis but its reply is lost (a blackhole, then a
/// reset): the acquisition goes on and ends with exactly one grant.
async fn a_lost_reply_leads_to_one_grant(k: K) {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let checker = env.client().await;
    let b = Client::builder(&proxy.url())
        .command_timeout(Duration::from_secs(2))
        .watchdog_timeout(WATCHDOG)
        .connect()
        .await
        .expect("connect");
    // The scripts are loaded (a lost NOSCRIPT reply would run nothing).
    k.take(&b, "warm", Duration::ZERO)
        .await
        .unwrap()
        .unwrap()
        .release()
        .await;
    let name = "lost-reply";
    proxy.blackhole(Direction::Downstream);
    let task = tokio::spawn({
        let b = b.clone();
        async move { k.take(&b, name, LONG_WAIT).await }
    });
    assert!(
        eventually(Duration::from_secs(10), || async {
            !k.inspect(&checker, name).await.holders.is_empty()
        })
        .await,
        "{k:?}: the attempt never ran"
    );
    proxy.reset_connections();
    proxy.heal();
    let got = tokio::time::timeout(Duration::from_secs(15), task)
        .await
        .expect("granted in time")
        .expect("task")
        .unwrap_or_else(|e| panic!("{k:?}: the acquisition failed: {e}"))
        .expect("granted");
    let seen = k.inspect(&checker, name).await;
    assert_eq!(seen.holders.len(), 1, "{k:?}: {seen:?}");
    assert_eq!(seen.holders[0].holds, 1, "{k:?}: {seen:?}");
    assert!(
        k.take(&checker, name, Duration::ZERO)
            .await
            .unwrap()
            .is_none(),
        "{k:?}: two holders"
    );
    got.release().await;
    // Nothing of the first attempt is left: the name is free.
    let again = k.take(&checker, name, Duration::ZERO).await.unwrap();
    assert!(again.is_some(), "{k:?}: a second grant was left behind");
    again.unwrap().release().await;
}

macro_rules! per_kind {
    ($scenario:ident) => {
        mod $scenario {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn lock() {
                $scenario(K::Lock).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fair_lock() {
                $scenario(K::Fair).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn rw_write() {
                $scenario(K::RwWrite).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn semaphore() {
                $scenario(K::Sem).await;
            }
        }
    };
}

per_kind!(rides_out_a_reset);
per_kind!(rides_out_a_restart);
per_kind!(fails_in_plain_words);
per_kind!(a_lost_reply_leads_to_one_grant);

/// `Leader::campaign` rides on `Lock::lock`: a reset while it waits does
/// not end it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_rides_out_a_reset() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let leader = env.client().await;
    let b = waiter(&proxy).await;
    let led = leader.leader("blip").campaign().await.expect("lead");
    let task = tokio::spawn({
        let b = b.clone();
        async move { b.leader("blip").campaign().await }
    });
    until_waiting(K::Lock, &leader, "blip").await;
    proxy.refuse_connections(true);
    proxy.reset_connections();
    tokio::time::sleep(OUTAGE).await;
    assert!(!task.is_finished(), "the campaign ended during the outage");
    proxy.refuse_connections(false);
    led.resign().await.expect("resign");
    let won = tokio::time::timeout(Duration::from_secs(15), task)
        .await
        .expect("led in time")
        .expect("task")
        .unwrap_or_else(|e| panic!("the campaign failed: {e}"));
    won.resign().await.expect("resign");
}

/// A latch's waiter through `proxy`: it looks again every
/// [`LATCH_LOOK`] (its watchdog period), so a look falls into an outage.
async fn latch_waiter(proxy: &FaultProxy, retry: AcquireRetry) -> Client {
    Client::builder(&proxy.url())
        .command_timeout(COMMAND_TIMEOUT)
        .watchdog_timeout(LATCH_LOOK)
        .acquire_retry(retry)
        .connect()
        .await
        .expect("connect through the proxy")
}

/// How often a latch's waiter looks again without a message.
const LATCH_LOOK: Duration = Duration::from_millis(200);

/// A latch's TTL that outlives every test here.
const LATCH_TTL: Duration = Duration::from_mins(10);

/// Waits until the latch `name` has a subscriber (its waiter's).
async fn until_latch_waits(env: &Env, name: &str) {
    let channel = common::key("latch", "ch", name);
    assert!(
        eventually(Duration::from_secs(10), || async {
            common::subscribers(&env.admin, &channel).await >= 1
        })
        .await,
        "the latch's waiter never subscribed"
    );
}

/// A latch's waiter (`wait`, or `wait_timeout` when `bounded`) rides out a
/// reset and refused connections; the latch opens during the outage, and
/// the wait sees it once Redis is back.
async fn a_latch_wait_rides_out_a_reset(bounded: bool) {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let setter = env.client().await;
    let b = latch_waiter(&proxy, AcquireRetry::default()).await;
    let name = "latch-blip";
    let latch = setter.count_down_latch(name);
    assert!(latch.try_set_count(1, LATCH_TTL).await.unwrap());
    let task = tokio::spawn({
        let latch = b.count_down_latch(name);
        async move {
            if bounded {
                latch.wait_timeout(LONG_WAIT).await
            } else {
                latch.wait().await.map(|()| true)
            }
        }
    });
    until_latch_waits(&env, name).await;

    proxy.refuse_connections(true);
    proxy.reset_connections();
    assert_eq!(latch.count_down().await.unwrap(), 0, "opened");
    tokio::time::sleep(OUTAGE).await; // the outage's length
    assert!(!task.is_finished(), "the wait ended during the outage");
    proxy.refuse_connections(false);

    let opened = tokio::time::timeout(Duration::from_secs(15), task)
        .await
        .expect("saw the opening in time")
        .expect("task")
        .unwrap_or_else(|e| panic!("the wait failed: {e}"));
    assert!(opened, "the opening during the outage was not seen");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_wait_rides_out_a_reset_unbounded() {
    a_latch_wait_rides_out_a_reset(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_wait_timeout_rides_out_a_reset() {
    a_latch_wait_rides_out_a_reset(true).await;
}

/// With connections refused, a latch's zero wait answers at once with the
/// error in plain words; a wait whose time runs out during the outage ends
/// with it too (not `Ok(false)`: whether it opened is unknown), as an
/// acquisition's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_wait_fails_in_plain_words() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let setter = env.client().await;
    let b = latch_waiter(&proxy, AcquireRetry::default()).await;
    let name = "latch-plain";
    assert!(setter
        .count_down_latch(name)
        .try_set_count(1, LATCH_TTL)
        .await
        .unwrap());
    let latch = b.count_down_latch(name);
    proxy.refuse_connections(true);
    proxy.reset_connections();

    let start = Instant::now();
    let Err(e) = latch.wait_timeout(Duration::ZERO).await else {
        panic!("a zero wait during the outage did not fail")
    };
    assert!(
        start.elapsed() < COMMAND_TIMEOUT + Duration::from_millis(500),
        "a zero wait took {:?}",
        start.elapsed()
    );
    assert_plain(&e, &proxy);

    let start = Instant::now();
    let wait = Duration::from_millis(1500);
    let Err(e) = latch.wait_timeout(wait).await else {
        panic!("a wait through the outage did not fail")
    };
    assert!(
        start.elapsed() >= wait,
        "gave up after {:?}",
        start.elapsed()
    );
    assert!(
        start.elapsed() < wait + COMMAND_TIMEOUT + Duration::from_secs(1),
        "gave up after {:?}",
        start.elapsed()
    );
    assert_plain(&e, &proxy);
    assert!(e.to_string().contains("while waiting for latch"), "{e}");
}

/// With `AcquireRetry::never()`, a latch's wait ends at the first blip, as
/// it always did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_wait_without_retries_ends_at_a_blip() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let setter = env.client().await;
    let b = latch_waiter(&proxy, AcquireRetry::never()).await;
    let name = "latch-never";
    assert!(setter
        .count_down_latch(name)
        .try_set_count(1, LATCH_TTL)
        .await
        .unwrap());
    let task = tokio::spawn({
        let latch = b.count_down_latch(name);
        async move { latch.wait().await }
    });
    until_latch_waits(&env, name).await;
    proxy.refuse_connections(true);
    proxy.reset_connections();
    let ended = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the wait ended at the blip")
        .expect("task");
    let Err(e) = ended else {
        panic!("the wait did not fail: {ended:?}")
    };
    assert!(e.is_retryable(), "{e}");
    proxy.refuse_connections(false);
}

/// Scripts the server at `port` ran so far.
async fn scripts_run(port: u16) -> u64 {
    let stats = common::cli(port, &["INFO", "commandstats"]).await;
    stats
        .lines()
        .filter_map(|l| {
            let rest = l
                .strip_prefix("cmdstat_evalsha:calls=")
                .or_else(|| l.strip_prefix("cmdstat_eval:calls="))?;
            rest.split(',').next()?.parse::<u64>().ok()
        })
        .sum()
}

/// Waits until `k`'s waiter on `name` is parked in the queue: queued,
/// subscribed to the name's channel, and a look of it ran after that (the
/// waiter looks once more after subscribing, then parks until its next
/// look or a message). Nobody else runs scripts on the server at `port`
/// meanwhile.
async fn until_parked(
    k: K,
    checker: &Client,
    admin: &fred::clients::Client,
    port: u16,
    name: &str,
) {
    until_waiting(k, checker, name).await;
    let kind = match k {
        K::Lock => "lock",
        K::Fair => "fair",
        K::RwWrite => "rw",
        K::Sem => "sem",
    };
    let channel = common::key(kind, "ch", name);
    assert!(
        eventually(Duration::from_secs(10), || async {
            common::subscribers(admin, &channel).await >= 1
        })
        .await,
        "{k:?}: the waiter never subscribed"
    );
    let before = scripts_run(port).await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            scripts_run(port).await > before
        })
        .await,
        "{k:?}: the waiter never looked again"
    );
}

/// The id of the client blocked in `WAIT` on the server at `port`, if any.
async fn waiting_for_replicas(port: u16) -> Option<String> {
    let list = common::cli(port, &["CLIENT", "LIST"]).await;
    list.lines()
        .find(|l| {
            let mut fields = l.split(' ');
            let blocked = fields.clone().any(|f| {
                f.strip_prefix("flags=")
                    .is_some_and(|flags| flags.contains('b'))
            });
            blocked && fields.any(|f| f == "cmd=wait")
        })
        .and_then(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .map(str::to_owned)
}

/// Waits until a client of the server at `port` is blocked in `WAIT`; its id.
async fn until_waiting_for_replicas(port: u16) -> String {
    assert!(
        eventually(Duration::from_secs(10), || async {
            waiting_for_replicas(port).await.is_some()
        })
        .await,
        "nobody waited for the replicas"
    );
    // Blocked for the replica_sync timeout (2 s): still there.
    waiting_for_replicas(port)
        .await
        .expect("a client blocked in WAIT")
}

/// Waits until the client `id` of the server at `port` is gone.
async fn until_client_gone(port: u16, id: &str) {
    let needle = format!("id={id} ");
    assert!(
        eventually(Duration::from_secs(10), || {
            let needle = needle.clone();
            async move {
                !common::cli(port, &["CLIENT", "LIST"])
                    .await
                    .contains(&needle)
            }
        })
        .await,
        "client {id} stayed: {}",
        common::cli(port, &["CLIENT", "LIST"]).await
    );
}

/// A primary with a synced replica, a proxy in front of the primary and a
/// waiter through it that syncs every acquisition with the replica
/// (`WAIT 1` for up to 2 s).
async fn replicated() -> (RedisServer, RedisServer, FaultProxy, Client) {
    let primary = RedisServer::start().await;
    let replica = common::replica_of(&primary).await;
    let proxy = FaultProxy::start(primary.addr()).await;
    let b = Client::builder(&proxy.url())
        .command_timeout(Duration::from_secs(3))
        .replica_sync(1, Duration::from_secs(2))
        .watchdog_timeout(WATCHDOG)
        .connect()
        .await
        .expect("connect through the proxy");
    (primary, replica, proxy, b)
}

/// The waiter's `WAIT` after its grant (the replica paused: it blocks) has
/// its connection reset: the grant is given back and taken again once the
/// replica acknowledges, exactly one grant, and the wait never ends with
/// the IO error. `handed`: the grant is a hold a release handed to the
/// queued waiter (its renewal and `WAIT`), else a free name's.
async fn a_blip_in_the_replica_wait_is_ridden_out(k: K, handed: bool) {
    let (primary, replica, proxy, b) = replicated().await;
    let checker = Client::connect(&primary.url()).await.expect("connect");
    let name = "synced-blip";
    let held = if handed {
        Some(
            k.take(&checker, name, Duration::ZERO)
                .await
                .unwrap()
                .unwrap(),
        )
    } else {
        None
    };
    if !handed {
        replica.pause();
    }
    let task = tokio::spawn({
        let b = b.clone();
        async move { k.take(&b, name, LONG_WAIT).await }
    });
    if let Some(held) = held {
        let admin = common::admin(&primary.url()).await;
        until_parked(k, &checker, &admin, primary.port(), name).await;
        replica.pause();
        held.release().await; // handed to the waiter
    }
    let id = until_waiting_for_replicas(primary.port()).await;
    proxy.reset_connections();
    until_client_gone(primary.port(), &id).await;
    replica.resume();

    let got = tokio::time::timeout(Duration::from_secs(15), task)
        .await
        .expect("granted in time")
        .expect("task")
        .unwrap_or_else(|e| panic!("{k:?}: the wait failed: {e}"))
        .expect("granted");
    let seen = k.inspect(&checker, name).await;
    assert_eq!(seen.holders.len(), 1, "{k:?}: {seen:?}");
    assert!(
        k.take(&checker, name, Duration::ZERO)
            .await
            .unwrap()
            .is_none(),
        "{k:?}: two holders"
    );
    got.release().await;
    let again = k.take(&checker, name, Duration::ZERO).await.unwrap();
    assert!(again.is_some(), "{k:?}: a grant was left behind");
    again.unwrap().release().await;
}

mod a_blip_in_the_replica_wait_after_a_grant {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lock() {
        a_blip_in_the_replica_wait_is_ridden_out(K::Lock, false).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn semaphore() {
        a_blip_in_the_replica_wait_is_ridden_out(K::Sem, false).await;
    }
}

mod a_blip_in_the_replica_wait_after_a_hand_off {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lock() {
        a_blip_in_the_replica_wait_is_ridden_out(K::Lock, true).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fair_lock() {
        a_blip_in_the_replica_wait_is_ridden_out(K::Fair, true).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn semaphore() {
        a_blip_in_the_replica_wait_is_ridden_out(K::Sem, true).await;
    }
}

/// A guarded waiter (restart guard) is handed the hold while its requests
/// stall: the read of the server's age that judges the hand-off times out.
/// The hold is given back and the wait goes on to a grant once Redis
/// answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blip_while_a_hand_off_is_judged_is_ridden_out() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let checker = env.client().await;
    let guard = Duration::from_secs(2);
    let b = Client::builder(&proxy.url())
        .command_timeout(COMMAND_TIMEOUT)
        .watchdog_timeout(guard)
        .restart_guard(guard)
        .connect()
        .await
        .expect("connect through the proxy");
    let k = K::Lock;
    let name = "judged";
    let held = k
        .take(&checker, name, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let task = tokio::spawn({
        let b = b.clone();
        async move { k.take(&b, name, LONG_WAIT).await }
    });
    // Queued once the server is old enough for the guard, then parked.
    until_parked(k, &checker, &env.admin, env.server.port(), name).await;
    // Messages still come; requests stall.
    proxy.blackhole(Direction::Upstream);
    held.release().await; // handed to the waiter
    tokio::time::sleep(OUTAGE).await; // the outage's length
    assert!(!task.is_finished(), "the wait ended during the outage");
    proxy.heal();
    let got = tokio::time::timeout(Duration::from_secs(15), task)
        .await
        .expect("granted in time")
        .expect("task")
        .unwrap_or_else(|e| panic!("the wait failed: {e}"))
        .expect("granted");
    let seen = k.inspect(&checker, name).await;
    assert_eq!(seen.holders.len(), 1, "{seen:?}");
    got.release().await;
    assert!(!checker.lock(name).is_locked().await.unwrap(), "left held");
}

/// An owner that holds a lock takes it again (a re-entry) while the
/// connection is reset and refused: the re-entry waits the outage out and
/// re-enters the same hold, instead of ending with the IO error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_rides_out_a_reset() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let checker = env.client().await;
    // A lease that outlives the outage: the hold is still ours after it.
    let b = Client::builder(&proxy.url())
        .command_timeout(COMMAND_TIMEOUT)
        .watchdog_timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("connect through the proxy");
    let lock = b.lock("reentry");
    let outer = lock.lock().await.expect("lock");
    proxy.refuse_connections(true);
    proxy.reset_connections();
    // One task (one owner): the re-entry, and the outage's end.
    let (inner, ()) = tokio::join!(lock.lock(), async {
        tokio::time::sleep(OUTAGE).await; // the outage's length
        proxy.refuse_connections(false);
    });
    let inner = inner.unwrap_or_else(|e| panic!("the re-entry failed: {e}"));
    assert_eq!(
        inner.fencing_token(),
        outer.fencing_token(),
        "not the same hold"
    );
    inner.unlock().await.expect("unlock");
    assert!(!outer.is_lost(), "the outer hold was lost");
    outer.unlock().await.expect("unlock");
    assert!(
        !checker.lock("reentry").is_locked().await.unwrap(),
        "left held"
    );
}

/// A re-entry during an outage: a zero wait answers at once, a wait whose
/// deadline passes in the outage after it, each with the error in plain
/// words (said once); the outer hold stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_fails_in_plain_words() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let b = Client::builder(&proxy.url())
        .command_timeout(COMMAND_TIMEOUT)
        .watchdog_timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("connect through the proxy");
    let lock = b.lock("reentry-plain");
    let outer = lock.lock().await.expect("lock");
    proxy.refuse_connections(true);
    proxy.reset_connections();
    let at = format!("127.0.0.1:{}", proxy.port());

    let start = Instant::now();
    let Err(e) = lock.try_lock(Duration::ZERO, None).await else {
        panic!("a zero-wait re-entry during the outage did not fail")
    };
    assert!(
        start.elapsed() < COMMAND_TIMEOUT + Duration::from_millis(500),
        "a zero wait took {:?}",
        start.elapsed()
    );
    assert_plain(&e, &proxy);
    assert_eq!(e.to_string().matches(&at).count(), 1, "{e}");

    let start = Instant::now();
    let wait = Duration::from_millis(1500);
    let Err(e) = lock.try_lock(wait, None).await else {
        panic!("a re-entry through the outage did not fail")
    };
    assert!(
        start.elapsed() >= wait,
        "gave up after {:?}",
        start.elapsed()
    );
    assert_plain(&e, &proxy);
    assert!(e.to_string().contains("while waiting for"), "{e}");
    assert_eq!(e.to_string().matches(&at).count(), 1, "{e}");

    proxy.refuse_connections(false);
    let connection = b.connection_state();
    assert!(
        eventually(Duration::from_secs(10), || async {
            connection.state() == redisync::ConnectionState::Reconnected
        })
        .await,
        "never reconnected"
    );
    assert!(!outer.is_lost(), "the outer hold was lost");
    outer.unlock().await.expect("unlock");
}

/// An owner holds a lock and re-enters it while replies are lost (the
/// re-entry runs in Redis, its reply never comes: it is ridden out, sent
/// again). The outer guard is dropped meanwhile (only a count-down: the
/// re-entry's reservation is another local guard), then the re-entry is
/// cancelled. Both calls of the owner are over: the lock is freed, not left
/// held by nobody until its lease ends (found by review: the reservation,
/// the last guard, was given back without a release).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_cancelled_mid_ride_after_the_outer_guard_dropped_frees_the_lock() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let checker = env.client().await;
    let b = Client::builder(&proxy.url())
        .command_timeout(COMMAND_TIMEOUT)
        .watchdog_timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("connect through the proxy");
    let name = "reentry-leak";
    let lock = b.lock(name);
    let outer = lock.lock().await.expect("lock");
    // Requests reach Redis; replies do not come back.
    proxy.blackhole(Direction::Downstream);
    let reentry = lock.try_lock(LONG_WAIT, None);
    let side = async {
        // The re-entry ran in Redis (its count is up), its reply lost.
        let counted = eventually(Duration::from_secs(10), || async {
            K::Lock
                .inspect(&checker, name)
                .await
                .holders
                .first()
                .is_some_and(|h| h.holds >= 2)
        })
        .await;
        assert!(counted, "the re-entry never ran");
        // Dropped while the re-entry's reservation lives: a count-down.
        drop(outer);
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    tokio::select! {
        biased;
        r = reentry => panic!("the re-entry ended first: {r:?}"),
        () = side => {} // the re-entry is dropped here
    }
    proxy.reset_connections();
    proxy.heal();
    let free = eventually(Duration::from_secs(5), || async {
        !checker.lock(name).is_locked().await.unwrap()
    })
    .await;
    let seen = checker.lock(name).inspect().await.unwrap();
    assert!(
        free,
        "both calls of the owner are over, yet the lock stays held: {seen:?}"
    );
}

/// A grant's replica `WAIT` meets a blip while a second flow of the same
/// owner re-entered the fresh hold: the first flow's wait rides the blip out
/// and gets its guard (found by review: the shared hold could not be
/// forgotten, and the call ended with the raw IO error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blip_in_the_grant_wait_is_ridden_out_when_a_sibling_re_entered() {
    let primary = RedisServer::start().await;
    let replica = common::replica_of(&primary).await;
    let proxy = FaultProxy::start(primary.addr()).await;
    let b = Client::builder(&proxy.url())
        .command_timeout(Duration::from_secs(3))
        .replica_sync(1, Duration::from_secs(2))
        .watchdog_timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("connect through the proxy");
    let lock = b.lock("synced-sibling");
    let port = primary.port();
    replica.pause();
    let first = lock.try_lock(LONG_WAIT, None);
    let second = async {
        assert!(
            eventually(Duration::from_secs(10), || async {
                waiting_for_replicas(port).await.is_some()
            })
            .await,
            "nobody waited for the replicas"
        );
        // The grant is in the slot, its WAIT blocked: the same owner (one
        // task) re-enters it; the connection is reset under both.
        let (again, ()) = tokio::join!(lock.try_lock(LONG_WAIT, None), async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            proxy.reset_connections();
            tokio::time::sleep(Duration::from_millis(300)).await;
            replica.resume();
        });
        again
    };
    let (first, second) = tokio::join!(first, second);
    let first = first.unwrap_or_else(|e| panic!("the first flow's wait ended with the blip: {e}"));
    let first = first.expect("granted within its wait");
    if let Ok(Some(second)) = second {
        assert_eq!(second.fencing_token(), first.fencing_token(), "one hold");
        second.unlock().await.expect("unlock");
    }
    first.unlock().await.expect("unlock");
}
