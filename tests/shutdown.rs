//! `Client::shutdown` against a real redis-server: bounded by about one
//! command timeout however many locks a hung server leaves unanswered, every
//! lock released when the server answers, and nothing of the client reaching
//! the server once it returned.

mod common;

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
