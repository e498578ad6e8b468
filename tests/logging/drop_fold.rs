//! A dropped `Lock` guard's release parked for the next attempt of the same
//! client (or sent by a task after a few yields): drops on runtimes that
//! are not driven afterwards, reads right after a drop, shutdown, and
//! cancelled attempts that carry a release. Every test takes
//! `common::capture::serial`.
use crate::common;

use std::time::Duration;

use common::capture::serial;

const LEASE: Duration = Duration::from_secs(20);

/// A fresh server and two clients on it, the first with its scripts loaded.
async fn two_warm_clients() -> (common::Env, redisync::Client, redisync::Client) {
    let env = common::Env::start().await;
    let client = env.client().await;
    let other = env.client().await;
    client
        .lock("warm")
        .try_lock(Duration::from_secs(5), Some(LEASE))
        .await
        .expect("lock")
        .expect("free")
        .unlock()
        .await
        .expect("unlock");
    (env, client, other)
}

/// One acquisition of `lock` with a fixed lease, dropped at once; its token.
async fn acquire_and_drop(lock: &redisync::Lock) -> u64 {
    let guard = lock
        .try_lock(Duration::from_secs(5), Some(LEASE))
        .await
        .expect("lock")
        .expect("free");
    let token = guard.fencing_token();
    drop(guard);
    token
}

/// `other` takes `name` within 3 s: the guard with `token` dropped just
/// before was released (its client is alive and Redis reachable).
async fn taken_soon(
    env: &common::Env,
    other: &redisync::Client,
    name: &str,
    token: u64,
) -> redisync::LockGuard {
    let got = other
        .lock(name)
        .try_lock(Duration::from_secs(3), Some(LEASE))
        .await
        .expect("try_lock");
    let pttl: i64 = fred::interfaces::KeysInterface::pttl(&env.admin, &common::lock_key(name))
        .await
        .unwrap();
    got.unwrap_or_else(|| {
        panic!(
            "the guard (token {token}) dropped 3 s ago is still held (pttl {pttl} ms left of its \
             {LEASE:?} lease) although its client is alive and Redis reachable"
        )
    })
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// The client lives on the test's runtime (its connections keep running);
/// one acquire-and-drop cycle runs on a current-thread runtime of another
/// thread (a sync caller's `block_on`), which then stays idle (kept, not
/// driven) until the end of the test. The client is alive and Redis
/// reachable: the dropped guard must be released long before its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_on_an_idle_second_runtime_is_released() {
    let _serial = serial().await;
    let (env, client, other) = two_warm_clients().await;
    let lock = client.lock("idle-rt");
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<u64>();
    let (quit_tx, quit_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = current_thread();
        let token = rt.block_on(acquire_and_drop(&lock));
        let _ = done_tx.send(token);
        // Kept, not driven (a sync caller between two calls).
        let _ = quit_rx.recv();
        drop(rt);
    });
    let token = done_rx.await.expect("cycle ran");
    let theirs = taken_soon(&env, &other, "idle-rt", token).await;
    let _ = quit_tx.send(());
    thread.join().expect("thread");
    drop(theirs);
    other.shutdown().await.expect("shutdown");
    client.shutdown().await.expect("shutdown");
}

/// The same, with the second runtime dropped right after the cycle (a
/// short-lived runtime for one job). The client is alive on the test's
/// runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_on_a_short_lived_second_runtime_is_released() {
    let _serial = serial().await;
    let (env, client, other) = two_warm_clients().await;
    let lock = client.lock("short-rt");
    let token = tokio::task::spawn_blocking(move || {
        let rt = current_thread();
        let token = rt.block_on(acquire_and_drop(&lock));
        drop(rt);
        token
    })
    .await
    .expect("cycle ran");
    let theirs = taken_soon(&env, &other, "short-rt", token).await;
    drop(theirs);
    other.shutdown().await.expect("shutdown");
    client.shutdown().await.expect("shutdown");
}

/// Same client, same task: a guard dropped, then `is_locked()` at once. A
/// read of the name sends a parked release first, so it sees the lock
/// free, as when the release was queued during the drop.
#[tokio::test(flavor = "current_thread")]
async fn is_locked_right_after_a_drop_sees_the_lock_free() {
    let _serial = serial().await;
    let env = common::Env::start().await;
    let client = env.client().await;
    let lock = client.lock("ryw");
    drop(lock.lock().await.expect("lock"));
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            !lock.is_locked().await.unwrap()
        })
        .await
    );
    let mut seen_held = 0;
    for _ in 0..20 {
        let g = lock.lock().await.expect("lock");
        drop(g);
        if lock.is_locked().await.expect("is_locked") {
            seen_held += 1;
        }
        assert!(
            common::eventually(Duration::from_secs(5), || async {
                !lock.is_locked().await.unwrap()
            })
            .await
        );
    }
    assert_eq!(
        seen_held, 0,
        "is_locked() right after the drop said held in {seen_held} of 20 rounds"
    );
    client.shutdown().await.expect("shutdown");
}

/// A guard dropped on an idle second runtime (as above), then the client
/// shut down from the test's runtime: the shutdown "lets the releases of
/// guards dropped just before finish" (docs/api.md). Either the lock is free
/// afterwards, or the shutdown warned that a release failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_after_a_drop_on_an_idle_runtime_releases_or_warns() {
    let _serial = serial().await;
    let (_env, client, other) = two_warm_clients().await;
    let _ = common::capture::take_records();
    let lock = client.lock("idle-sd");
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let (quit_tx, quit_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = current_thread();
        rt.block_on(acquire_and_drop(&lock));
        let _ = done_tx.send(());
        let _ = quit_rx.recv();
        drop(rt);
    });
    done_rx.await.expect("cycle ran");
    let started = tokio::time::Instant::now();
    client.shutdown().await.expect("shutdown");
    let took = started.elapsed();
    let got = other
        .lock("idle-sd")
        .try_lock(Duration::from_secs(2), Some(LEASE))
        .await
        .expect("try_lock");
    let records = common::capture::take_records();
    let _ = quit_tx.send(());
    thread.join().expect("thread");
    assert!(
        got.is_some() || !records.is_empty(),
        "after the shutdown (which took {took:?}) the dropped guard's lock is still held and \
         nothing was warned"
    );
    drop(got);
    other.shutdown().await.expect("shutdown");
}

/// Stress of carried releases under cancellation: 2 clients x 6 tasks on
/// one name, acquisitions cut by short timeouts (cancelling attempts that
/// carry a release), guards dropped; no overlap, tokens increasing, nothing
/// left held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn carried_releases_under_cancellation_never_overlap_or_leak() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let _serial = serial().await;
    let env = common::Env::start().await;
    let clients = vec![env.client().await, env.client().await];
    let busy = Arc::new(AtomicBool::new(false));
    let last = Arc::new(AtomicU64::new(0));
    let rounds = Arc::new(AtomicU64::new(0));
    let stop = tokio::time::Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for t in 0..6u64 {
            let lock = if t % 3 == 2 {
                client.lock("cx").non_reentrant()
            } else {
                client.lock("cx")
            };
            let (busy, last, rounds) = (busy.clone(), last.clone(), rounds.clone());
            tasks.push(tokio::spawn(async move {
                let mut rnd = common::xorshift((c as u64 + 3) * 7919 + t * 104_729);
                while tokio::time::Instant::now() < stop {
                    let cut = Duration::from_micros(rnd() % 3000);
                    let guard = match tokio::time::timeout(cut, lock.lock()).await {
                        Ok(g) => g.expect("lock"),
                        Err(_) => continue,
                    };
                    assert!(!busy.swap(true, Ordering::SeqCst), "two holders at once");
                    let token = guard.fencing_token();
                    let prev = last.swap(token, Ordering::SeqCst);
                    assert!(token > prev, "token {token} after {prev}");
                    if rnd().is_multiple_of(2) {
                        tokio::task::yield_now().await;
                    }
                    busy.store(false, Ordering::SeqCst);
                    drop(guard);
                    rounds.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("stress task");
    }
    assert!(rounds.load(Ordering::Relaxed) > 50);
    for c in &clients {
        assert!(
            c.lock("cx")
                .try_lock(Duration::from_secs(5), Some(LEASE))
                .await
                .expect("try")
                .is_some(),
            "left held after the stress"
        );
    }
    for c in clients {
        c.shutdown().await.expect("shutdown");
    }
}
