//! `Client::shutdown` against a real redis-server: bounded by about one
//! command timeout however many locks a hung server leaves unanswered, every
//! lock released when the server answers, and nothing of the client reaching
//! the server once it returned.

use crate::common;

use std::time::Duration;

use common::{eventually, Env};
use fred::prelude::*;
use redisync::Client;
use tokio::time::Instant;

/// Bound on every wait for an event; only reached when the code is wrong.
const EVENT_LIMIT: Duration = Duration::from_secs(20);
/// Command timeout of the clients here.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);
/// Locks held at the shutdown.
const LOCKS: usize = 8;

async fn client(env: &Env, lease: Duration) -> Client {
    Client::builder(&env.server.url())
        .command_timeout(COMMAND_TIMEOUT)
        .watchdog_timeout(lease)
        .connect()
        .await
        .expect("connect")
}

/// `connected_clients` of `INFO clients` (the admin connection included).
async fn connected_clients(env: &Env) -> u64 {
    let info: String = env
        .admin
        .info(Some(fred::types::InfoKind::Clients))
        .await
        .expect("INFO clients");
    info.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("connected_clients")
}

/// Script calls (EVALSHA and EVAL) the server ran so far.
async fn script_calls(env: &Env) -> u64 {
    let calls = common::command_calls(env).await;
    calls.get("evalsha").copied().unwrap_or(0) + calls.get("eval").copied().unwrap_or(0)
}

/// A paused server answers none of the releases: the shutdown still returns
/// within about one command timeout (it took one per lock, plus one for the
/// goodbye: 9 s for 8 locks), and every guard is lost when it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_a_hung_server_takes_about_one_command_timeout() {
    let env = Env::start().await;
    // Watchdog and fixed leases both: every hold is released at shutdown.
    let client = client(&env, Duration::from_secs(30)).await;
    let mut guards = Vec::new();
    for i in 0..LOCKS {
        let lock = client.lock(&format!("hung-{i}"));
        let lease = (i % 2 == 1).then_some(Duration::from_secs(30));
        let guard = match lease {
            Some(lease) => lock.lock_with_lease(lease).await,
            None => lock.lock().await,
        };
        guards.push(guard.expect("lock"));
    }

    env.server.pause();
    let started = Instant::now();
    let done = tokio::time::timeout(EVENT_LIMIT, client.shutdown()).await;
    let took = started.elapsed();
    env.server.resume();
    done.expect("shutdown hangs on a paused server")
        .expect("shutdown");
    // One command timeout, with room for a loaded machine: far below the
    // LOCKS + 1 command timeouts of sequential releases.
    assert!(
        took < COMMAND_TIMEOUT * 5 / 2,
        "shutdown of {LOCKS} locks on a paused server took {took:?}"
    );
    assert!(guards.iter().all(redisync::LockGuard::is_lost));
}

/// With the server up, the shutdown releases every lock (all kinds): another
/// client takes each at once instead of waiting for its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_every_lock() {
    let env = Env::start().await;
    let client = client(&env, Duration::from_secs(30)).await;
    let mut guards = Vec::new();
    for i in 0..LOCKS {
        guards.push(client.lock(&format!("up-{i}")).lock().await.expect("lock"));
    }
    let fair = client.fair_lock("up-fair").lock().await.expect("fair lock");
    let write = client.rw_lock("up-rw").write().lock().await.expect("write");
    let sem = client.semaphore("up-sem");
    sem.try_set_permits(1).await.expect("permits");
    let permit = sem.acquire(1).await.expect("permit");

    tokio::time::timeout(EVENT_LIMIT, client.shutdown())
        .await
        .expect("shutdown hangs")
        .expect("shutdown");
    assert!(fair.is_lost() && write.is_lost() && permit.is_lost());

    let other = env.client().await;
    for i in 0..LOCKS {
        let g = other
            .lock(&format!("up-{i}"))
            .try_lock(Duration::ZERO, None)
            .await
            .expect("try_lock");
        assert!(g.is_some(), "lock up-{i} still held after the shutdown");
    }
    let fair = other.fair_lock("up-fair");
    let fair = fair.try_lock(Duration::ZERO, None).await;
    assert!(
        fair.expect("fair try_lock").is_some(),
        "fair lock still held"
    );
    let write = other.rw_lock("up-rw").write();
    let write = write.try_lock(Duration::ZERO, None).await;
    assert!(
        write.expect("write try_lock").is_some(),
        "rw lock still held"
    );
    let sem = other.semaphore("up-sem");
    let permit = sem.try_acquire(1, Duration::ZERO).await;
    assert!(permit.expect("try_acquire").is_some(), "permit still taken");
    drop(guards);
    other.shutdown().await.expect("shutdown");
}

/// A renewal in flight on a paused server at the shutdown: once the server
/// resumes, the client's connections go away and nothing of the client runs
/// on the server any more (no renewal resent after the resume, no
/// reconnection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_renewal_reaches_the_server_after_shutdown() {
    let env = Env::start().await;
    // Renewed every 100 ms: one is in flight a moment after the pause.
    let lease = Duration::from_millis(300);
    let client = client(&env, lease).await;
    let mut guards = Vec::new();
    for i in 0..3 {
        guards.push(client.lock(&format!("renewed-{i}")).lock().await.unwrap());
    }
    let renewed = eventually(EVENT_LIMIT, || async {
        guards.iter().all(|g| g.validity() > lease / 2)
    })
    .await;
    assert!(renewed);
    assert_eq!(connected_clients(&env).await, 3, "admin + the client's two");

    env.server.pause();
    // Not a bound: lets the watchdog send a renewal into the paused server
    // (a loaded machine that sends none only tests less).
    tokio::time::sleep(lease).await;
    let shutdown = tokio::time::timeout(EVENT_LIMIT, client.shutdown()).await;
    env.server.resume();
    shutdown.expect("shutdown hangs").expect("shutdown");

    let closed = eventually(EVENT_LIMIT, || async { connected_clients(&env).await == 1 }).await;
    assert!(
        closed,
        "the client's connections are still open after its shutdown: {}",
        connected_clients(&env).await
    );
    let calls = script_calls(&env).await;
    // Absence needs a window: several renewal periods and a command timeout.
    tokio::time::sleep(lease * 3 + COMMAND_TIMEOUT).await;
    assert_eq!(
        script_calls(&env).await,
        calls,
        "a script ran after the shutdown"
    );
    assert_eq!(connected_clients(&env).await, 1, "the client reconnected");
    for i in 0..3 {
        let key = common::lock_key(&format!("renewed-{i}"));
        let exists: i64 = env.admin.exists(&key).await.unwrap();
        assert_eq!(exists, 0, "{key} still held");
    }
}

/// A zero-wait attempt of each kind whose script is in flight (the server
/// stopped) when its task is aborted right before `client.shutdown()`: the
/// grant it makes once the server runs it is undone, so the name is free
/// after the shutdown, not taken for the whole lease. On one thread, so the
/// aborted future is dropped inside the shutdown. (The shutdown once waited only for the undos
/// of attempts that may queue.)
#[tokio::test(flavor = "current_thread")]
async fn a_zero_wait_attempt_aborted_right_before_shutdown_leaves_no_grant() {
    let env = Env::start().await;
    let b = env.client().await;
    for kind in ["lock", "fair", "write", "semaphore"] {
        let a = client(&env, Duration::from_secs(30)).await;
        let name = format!("zw-{kind}");
        assert!(b.semaphore(&name).try_set_permits(1).await.unwrap() || kind != "semaphore");
        // Whether `client`'s attempt on the name within `wait` was granted
        // (a lease of 30 s for `a`, of 5 s for `b`'s probe).
        let attempt = |client: Client, wait: Duration| {
            let name = name.clone();
            let lease = Duration::from_secs(if wait.is_zero() { 30 } else { 5 });
            async move {
                let granted = match kind {
                    "lock" => client
                        .lock(&name)
                        .try_lock(wait, Some(lease))
                        .await?
                        .is_some(),
                    "fair" => client
                        .fair_lock(&name)
                        .try_lock(wait, Some(lease))
                        .await?
                        .is_some(),
                    "write" => client
                        .rw_lock(&name)
                        .write()
                        .try_lock(wait, Some(lease))
                        .await?
                        .is_some(),
                    _ => client
                        .semaphore(&name)
                        .try_acquire_with_lease(1, wait, lease)
                        .await?
                        .is_some(),
                };
                Ok::<bool, redisync::Error>(granted)
            }
        };
        // The slot and the subscription exist already (one cycle).
        assert!(attempt(a.clone(), Duration::ZERO).await.unwrap());
        env.server.pause();
        let task = tokio::spawn(attempt(a.clone(), Duration::ZERO));
        // Time for the task to send its script to the stopped server (no
        // event to wait on there; a script not sent yet only makes the
        // test pass without proving anything).
        tokio::time::sleep(Duration::from_millis(300)).await;
        task.abort();
        env.server.resume();
        a.shutdown().await.unwrap();
        assert!(task.await.is_err(), "{kind}: the task was aborted");
        let free = attempt(b.clone(), Duration::from_secs(6)).await.unwrap();
        assert!(
            free,
            "{kind}: the aborted attempt's grant outlived its client's shutdown"
        );
    }
}

/// A waiter aborted right before `client.shutdown()` whose undo (leaving
/// the queue) meets a connection reset while the shutdown runs: the undo is
/// sent again once the client reconnects, within the shutdown's bound, so
/// the shut-down client is not left in the queue (it gave up at the reset:
/// the next release handed the name to the departed waiter, and every
/// other client waited out its lease). Found by the simulation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undo_reset_during_the_shutdown_is_sent_again() {
    use redisync_testkit::{Direction, FaultProxy};
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let b = env.client().await;
    for kind in ["lock", "fair"] {
        let a = Client::builder(&proxy.url())
            .command_timeout(Duration::from_secs(2))
            .connect()
            .await
            .expect("connect through the proxy");
        let name = format!("reset-undo-{kind}");
        let inspect = || async {
            let i = match kind {
                "lock" => b.lock(&name).inspect().await,
                _ => b.fair_lock(&name).inspect().await,
            };
            i.unwrap()
        };
        let guard: Box<dyn std::any::Any + Send> = match kind {
            "lock" => Box::new(b.lock(&name).lock().await.unwrap()),
            _ => Box::new(b.fair_lock(&name).lock().await.unwrap()),
        };
        let waiter = {
            let (a, name) = (a.clone(), name.clone());
            tokio::spawn(async move {
                match kind {
                    "lock" => drop(a.lock(&name).lock().await),
                    _ => drop(a.fair_lock(&name).lock().await),
                }
            })
        };
        let queued = eventually(EVENT_LIMIT, || async {
            inspect()
                .await
                .waiters
                .iter()
                .any(|w| w.client_id == Some(a.id()))
        })
        .await;
        assert!(queued, "{kind}: the waiter never queued");
        // The undo's command stays in the proxy, then its connection is
        // reset while the shutdown waits for it.
        proxy.blackhole(Direction::Upstream);
        waiter.abort();
        let _ = waiter.await;
        let shutdown = tokio::spawn({
            let a = a.clone();
            async move { a.shutdown().await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        proxy.reset_connections();
        proxy.heal();
        shutdown.await.unwrap().unwrap();
        let seen = inspect().await;
        assert!(
            !seen.waiters.iter().any(|w| w.client_id == Some(a.id())),
            "{kind}: the shut-down client is still queued: {seen:?}"
        );
        drop(guard);
    }
}

/// A guard dropped right before `client.shutdown()` whose release meets a
/// connection reset while the shutdown runs: the release is sent again once
/// the client reconnects, within the shutdown's bound (it gave up at the
/// reset, and the name stayed taken for the lease). Found by the
/// simulation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_reset_during_the_shutdown_is_sent_again() {
    use redisync_testkit::{Direction, FaultProxy};
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let b = env.client().await;
    for kind in ["lock", "fair"] {
        let a = Client::builder(&proxy.url())
            .command_timeout(Duration::from_secs(2))
            .connect()
            .await
            .expect("connect through the proxy");
        let name = format!("reset-release-{kind}");
        let guard: Box<dyn std::any::Any + Send> = match kind {
            "lock" => Box::new(a.lock(&name).lock().await.unwrap()),
            _ => Box::new(a.fair_lock(&name).lock().await.unwrap()),
        };
        // The release stays in the proxy, then its connection is reset
        // while the shutdown waits for it.
        proxy.blackhole(Direction::Upstream);
        tokio::spawn(async move { drop(guard) }).await.unwrap();
        let shutdown = tokio::spawn({
            let a = a.clone();
            async move { a.shutdown().await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        proxy.reset_connections();
        proxy.heal();
        shutdown.await.unwrap().unwrap();
        let free = match kind {
            "lock" => b
                .lock(&name)
                .try_lock(Duration::ZERO, None)
                .await
                .unwrap()
                .is_some(),
            _ => b
                .fair_lock(&name)
                .try_lock(Duration::ZERO, None)
                .await
                .unwrap()
                .is_some(),
        };
        assert!(
            free,
            "{kind}: the dropped guard's release was given up at the reset"
        );
    }
}
