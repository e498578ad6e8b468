//! A guard's release polled once inside its drop: ordering, mutual
//! exclusion, and drops at the edges (runtime shut down, panics, Redis down).
//!
//! A process-wide `log` logger and `tracing` subscriber record every event
//! at warn level or above; every test takes `common::capture::serial`.

use crate::common;

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::capture::{serial, serial_blocking, take_records};
use redisync::Client;
use redisync_testkit::RedisServer;

/// Asserts that `other` takes lock `name` within `within`: whoever held
/// it let go (the take is released again at once).
async fn assert_free_within(
    other: &Client,
    name: &str,
    within: Duration,
    why: impl Fn() -> String,
) {
    let got = other
        .lock(name)
        .try_lock(within, None)
        .await
        .expect("try_lock");
    assert!(got.is_some(), "{}", why());
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A blocking task keeps a guard while its runtime shuts down (dropped or
/// `shutdown_timeout`), then lets it go: the lease ends it. Dropping a guard
/// must never panic (before the change the release was only spawned: a spawn
/// on a shut-down runtime is refused quietly). Now the release is polled in
/// the drop: fred's router is gone, the error is retryable, and the retry's
/// `tokio::time::sleep` is polled on a shut-down timer: panic.
#[test]
fn a_guard_dropped_by_a_blocking_task_after_its_runtime_shut_down_does_not_panic() {
    let _serial = serial_blocking();
    let host = current_thread();
    let server = host.block_on(RedisServer::start());
    let url = server.url();
    let inner = multi_thread();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<Option<String>>();
    let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
    inner.block_on(async {
        let client = Client::connect(&url).await.expect("connect");
        let guard = client.lock("blocking").lock().await.expect("lock");
        tokio::task::spawn_blocking(move || {
            let _ = started_tx.send(());
            let _ = go_rx.recv();
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| drop(guard)));
            let _ = done_tx.send(outcome.err().map(|p| {
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default()
            }));
            drop(client);
        });
    });
    started_rx.recv().expect("the blocking task started");
    // The scheduler and its drivers are shut down once this returns; the
    // blocking task is still waiting for `go`.
    inner.shutdown_timeout(Duration::from_millis(200));
    go_tx.send(()).expect("blocking task alive");
    let panicked = done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the drop finished");
    assert!(
        panicked.is_none(),
        "dropping the guard panicked: {panicked:?}"
    );
    drop(server);
}

/// A runtime dropped while its tasks keep live guards: the guards are
/// dropped with the tasks, the leases end them. Nothing at warn level.
#[test]
fn a_runtime_dropped_with_live_guards_logs_nothing_at_warn_or_above() {
    let _serial = serial_blocking();
    let host = current_thread();
    let server = host.block_on(RedisServer::start());
    let url = server.url();
    for round in 0..3 {
        let inner = multi_thread();
        inner.block_on(async {
            let client = Client::connect(&url).await.expect("connect");
            let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(64);
            for i in 0..16 {
                let lock = client.lock(&format!("rt-drop-{round}-{i}"));
                let tx = tx.clone();
                tokio::spawn(async move {
                    let _guard = lock.lock().await.expect("lock");
                    let _ = tx.send(()).await;
                    std::future::pending::<()>().await;
                });
            }
            for _ in 0..16 {
                rx.recv().await.expect("acquired");
            }
        });
        drop(inner);
    }
    std::thread::sleep(Duration::from_millis(300));
    let records = take_records();
    assert!(
        records.is_empty(),
        "dropping runtimes with live guards logged at warn or above: {records:#?}"
    );
    drop(server);
}

/// The change's own promise ("queued on the connection before the drop
/// returns: the next acquisition of the name by the same client goes out
/// right behind it") from a task that used up its coop budget: the drop's
/// poll of the release-order mutex is refused by the budget, so nothing is
/// queued and the turn is still kept: a zero-wait attempt right after finds
/// the lock "busy".
#[test]
fn a_guard_dropped_by_a_task_out_of_budget_frees_the_lock_for_an_attempt_right_after() {
    let _serial = serial_blocking();
    let rt = current_thread();
    let server = rt.block_on(RedisServer::start());
    rt.block_on(async {
        let client = Client::connect(&server.url()).await.expect("connect");
        let lock = client.lock("out-of-budget");
        let mut busy = 0;
        for _ in 0..20 {
            let guard = lock.lock().await.expect("lock");
            while tokio::task::coop::has_budget_remaining() {
                tokio::task::coop::consume_budget().await;
            }
            drop(guard);
            match lock.try_lock(Duration::ZERO, None).await.expect("try_lock") {
                Some(g) => drop(g),
                None => busy += 1,
            }
            // Let the background release finish before the next round.
            while lock.is_locked().await.expect("is_locked") {
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(busy, 0, "busy right after the drop in {busy} of 20 rounds");
        client.shutdown().await.expect("shutdown");
    });
}

/// Re-entrant holds whose guards go in different flows: the inner one
/// dropped in another task, the outer one dropped at once here. The final
/// release must come after the count-down: another client gets the lock
/// right away (not after the 30 s lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reentrant_guards_dropped_in_two_flows_free_the_lock() {
    let _serial = serial().await;
    let server = RedisServer::start().await;
    let client = Client::connect(&server.url()).await.expect("connect");
    let other = Client::connect(&server.url()).await.expect("connect");
    for i in 0..40 {
        let name = format!("reentrant-{i}");
        let lock = client.lock(&name);
        let outer = lock.lock().await.expect("lock");
        let inner = lock.lock().await.expect("re-enter");
        assert_eq!(outer.fencing_token(), inner.fencing_token());
        let (a, b) = if i % 2 == 0 {
            (outer, inner)
        } else {
            (inner, outer)
        };
        let t = tokio::spawn(async move { drop(a) });
        drop(b);
        t.await.expect("task");
        assert_free_within(&other, &name, Duration::from_secs(5), || {
            format!("round {i}: still held after both guards went")
        })
        .await;
    }
    drop(other);
    client.shutdown().await.expect("shutdown");
}

/// Mutual exclusion and fencing order: 3 clients x 8 tasks on 2 names,
/// guards released by drop (sometimes re-entered, sometimes by `try_lock` with
/// zero wait, sometimes dropped in a spawned task or while the task is
/// aborted), for ~3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drop_released_guards_never_overlap() {
    let _serial = serial().await;
    let server = RedisServer::start().await;
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(Client::connect(&server.url()).await.expect("connect"));
    }
    let names = ["stress-a", "stress-b"];
    let busy: Arc<[AtomicBool; 2]> = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
    let last: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let rounds = Arc::new(AtomicU64::new(0));
    let stop = tokio::time::Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for t in 0..8u64 {
            let locks: Vec<_> = names.iter().map(|n| client.lock(n)).collect();
            let (busy, last, rounds) = (busy.clone(), last.clone(), rounds.clone());
            tasks.push(tokio::spawn(async move {
                let mut rnd = common::xorshift((c as u64 + 1) * 7919 + t * 104_729);
                while tokio::time::Instant::now() < stop {
                    let k = (rnd() % 2) as usize;
                    let guard = if rnd().is_multiple_of(3) {
                        match locks[k].try_lock(Duration::ZERO, None).await.expect("try") {
                            Some(g) => g,
                            None => continue,
                        }
                    } else {
                        locks[k].lock().await.expect("lock")
                    };
                    assert!(
                        !busy[k].swap(true, Ordering::SeqCst),
                        "two holders of {k} at once"
                    );
                    let token = guard.fencing_token();
                    let prev = last[k].swap(token, Ordering::SeqCst);
                    assert!(token > prev, "token {token} after {prev} on {k}");
                    let again = rnd().is_multiple_of(4).then_some(());
                    let nested = if again.is_some() {
                        Some(locks[k].lock().await.expect("re-enter"))
                    } else {
                        None
                    };
                    if rnd().is_multiple_of(2) {
                        tokio::task::yield_now().await;
                    }
                    busy[k].store(false, Ordering::SeqCst);
                    match rnd() % 3 {
                        0 => {
                            drop(nested);
                            drop(guard);
                        }
                        1 => {
                            drop(guard);
                            drop(nested);
                        }
                        _ => {
                            let h = tokio::spawn(async move {
                                drop(nested);
                            });
                            drop(guard);
                            h.await.expect("drop task");
                        }
                    }
                    rounds.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("stress task");
    }
    assert!(rounds.load(Ordering::Relaxed) > 100);
    for c in &clients {
        for n in names {
            assert!(
                c.lock(n)
                    .try_lock(Duration::from_secs(5), None)
                    .await
                    .expect("try")
                    .is_some(),
                "{n} left held after the stress"
            );
        }
    }
    for c in clients {
        c.shutdown().await.expect("shutdown");
    }
}

/// A semaphore permit dropped right before the same task asks again: the
/// re-acquisition comes after the release (no permit leaked).
#[tokio::test(flavor = "current_thread")]
#[ignore = "known gap: with the script not cached in Redis (first use, restart, SCRIPT FLUSH) the EVAL sent after NOSCRIPT goes out behind the next acquisition"]
async fn a_semaphore_permit_dropped_then_asked_again_on_a_fresh_server() {
    let _serial = serial().await;
    let server = RedisServer::start().await;
    let client = Client::connect(&server.url()).await.expect("connect");
    let sem = client.semaphore("sem-drop").with_permits(1);
    for i in 0..50 {
        let p = sem
            .try_acquire(1, Duration::ZERO)
            .await
            .expect("acquire")
            .unwrap_or_else(|| panic!("round {i}: the permit is still taken right after the drop"));
        drop(p);
    }
    let other = Client::connect(&server.url()).await.expect("connect");
    assert!(other
        .semaphore("sem-drop")
        .with_permits(1)
        .try_acquire(1, Duration::from_secs(5))
        .await
        .expect("acquire")
        .is_some());
    other.shutdown().await.expect("shutdown");
    client.shutdown().await.expect("shutdown");
}

/// A reader drops its read guard, then the same task asks for the write
/// side: it no longer reads, so this is no upgrade. The drop's release is
/// "queued on the connection before the drop returns", but on a server
/// whose script cache lacks the release script (first use, restart,
/// failover) the queued EVALSHA fails NOSCRIPT and the EVAL goes out after
/// the write attempt, which finds this owner still reading:
/// `UpgradeNotSupported`.
async fn read_dropped_then_write(warm: bool) {
    let server = RedisServer::start().await;
    let client = Client::connect(&server.url()).await.expect("connect");
    let rw = client.rw_lock("rw-drop");
    if warm {
        rw.read()
            .lock()
            .await
            .expect("read")
            .unlock()
            .await
            .expect("unlock");
        rw.write()
            .lock()
            .await
            .expect("write")
            .unlock()
            .await
            .expect("unlock");
    }
    for i in 0..20 {
        let r = rw.read().lock().await.expect("read");
        drop(r);
        let w = rw
            .write()
            .try_lock(Duration::from_secs(5), None)
            .await
            .unwrap_or_else(|e| panic!("round {i}: {e:?}"))
            .unwrap_or_else(|| panic!("round {i}: a reader left behind"));
        drop(w);
    }
    client.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "known gap: with the script not cached in Redis (first use, restart, SCRIPT FLUSH) the EVAL sent after NOSCRIPT goes out behind the next acquisition"]
async fn a_read_guard_dropped_then_write_asked_on_a_fresh_server() {
    let _serial = serial().await;
    read_dropped_then_write(false).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_read_guard_dropped_then_write_asked_with_scripts_loaded() {
    let _serial = serial().await;
    read_dropped_then_write(true).await;
}

/// A reader drops its read guard and reads again at once (same task): the
/// new read must really be held in Redis, so a writer of another client
/// must not get in while it lives.
async fn read_dropped_then_read_again(warm: bool) {
    let server = RedisServer::start().await;
    let client = Client::connect(&server.url()).await.expect("connect");
    let other = Client::connect(&server.url()).await.expect("connect");
    let rw = client.rw_lock("rw-reread");
    if warm {
        rw.read()
            .lock()
            .await
            .expect("read")
            .unlock()
            .await
            .expect("unlock");
    }
    for i in 0..10 {
        let r = rw.read().lock().await.expect("read");
        drop(r);
        let again = rw.read().lock().await.expect("read again");
        let w = other
            .rw_lock("rw-reread")
            .write()
            .try_lock(Duration::from_millis(300), None)
            .await
            .expect("write");
        assert!(
            w.is_none(),
            "round {i}: another client wrote while this reader held its read guard (lost: {})",
            again.is_lost()
        );
        drop(again);
        // Wait (bounded) for the read to be gone before the next round.
        let writer = other
            .rw_lock("rw-reread")
            .write()
            .try_lock(Duration::from_secs(5), None)
            .await
            .expect("write");
        assert!(writer.is_some(), "round {i}: read left behind");
        writer.unwrap().unlock().await.expect("unlock");
    }
    other.shutdown().await.expect("shutdown");
    client.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "current_thread")]
async fn a_read_guard_dropped_then_read_again_on_a_fresh_server() {
    let _serial = serial().await;
    read_dropped_then_read_again(false).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_semaphore_permit_dropped_then_asked_again_with_scripts_loaded() {
    let _serial = serial().await;
    let server = RedisServer::start().await;
    let client = Client::connect(&server.url()).await.expect("connect");
    let sem = client.semaphore("sem-warm").with_permits(1);
    sem.acquire(1)
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
    for i in 0..50 {
        let p = sem
            .try_acquire(1, Duration::ZERO)
            .await
            .expect("acquire")
            .unwrap_or_else(|| panic!("round {i}: the permit is still taken right after the drop"));
        drop(p);
    }
    client.shutdown().await.expect("shutdown");
}

/// A guard dropped while the connection is down (connections refused and
/// reset): the drop's poll fails fast or parks; the spawned task must go on
/// retrying with a real waker and release it once the server is back,
/// long before the 30 s lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_while_the_connection_is_down_is_released_once_it_is_back() {
    let _serial = serial().await;
    let server = RedisServer::start().await;
    let proxy = redisync_testkit::FaultProxy::start(server.addr()).await;
    let client = Client::connect(&proxy.url()).await.expect("connect");
    let other = Client::connect(&server.url()).await.expect("connect");
    // Warm the scripts.
    client
        .lock("warm")
        .lock()
        .await
        .expect("lock")
        .unlock()
        .await
        .expect("unlock");
    for i in 0..3 {
        let name = format!("down-{i}");
        let guard = client.lock(&name).lock().await.expect("lock");
        proxy.refuse_connections(true);
        proxy.reset_connections();
        // Bounded wait until the client sees the connection gone.
        let mut tries = 0;
        while client.lock("probe").is_locked().await.is_ok() && tries < 200 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            tries += 1;
        }
        drop(guard);
        proxy.refuse_connections(false);
        proxy.heal();
        assert_free_within(&other, &name, Duration::from_secs(10), || {
            format!("round {i}: still held 10 s after the connection came back")
        })
        .await;
    }
    drop(other);
    client.shutdown().await.expect("shutdown");
}

/// Guards dropped right before `shutdown` (multi-thread), and guards dropped
/// by a panicking or an aborted task: all released (another client gets them
/// at once), nothing warned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_dropped_by_panics_aborts_and_right_before_shutdown_are_released() {
    let _serial = serial().await;
    let server = RedisServer::start().await;
    let other = Client::connect(&server.url()).await.expect("connect");
    for round in 0..5 {
        let client = Client::connect(&server.url()).await.expect("connect");
        let names: Vec<String> = (0..3).map(|i| format!("sd-{round}-{i}")).collect();
        let g0 = client.lock(&names[0]).lock().await.expect("lock");
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(4);
        let l1 = client.lock(&names[1]);
        let tx1 = tx.clone();
        let panicking = tokio::spawn(async move {
            let _g = l1.lock().await.expect("lock");
            let _ = tx1.send(()).await;
            panic!("boom");
        });
        let l2 = client.lock(&names[2]);
        let aborted = tokio::spawn(async move {
            let _g = l2.lock().await.expect("lock");
            let _ = tx.send(()).await;
            std::future::pending::<()>().await;
        });
        rx.recv().await.expect("acquired");
        rx.recv().await.expect("acquired");
        assert!(panicking.await.is_err());
        aborted.abort();
        let _ = aborted.await;
        drop(g0);
        client.shutdown().await.expect("shutdown");
        for n in &names {
            assert_free_within(&other, n, Duration::from_secs(3), || {
                format!("round {round}: {n} still held")
            })
            .await;
        }
    }
    other.shutdown().await.expect("shutdown");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let records: Vec<_> = take_records()
        .into_iter()
        .filter(|r| !r.2.contains("boom"))
        .collect();
    assert!(records.is_empty(), "warned: {records:#?}");
}

/// A guard dropped and the lock asked for again by the same client: the
/// next attempt carries the dropped guard's release in its own script, so
/// an acquire-and-drop cycle costs one script call, and each cycle is a
/// new acquisition (a higher token). On one thread the background sender
/// only runs once the attempt is sent, so every release is carried.
#[tokio::test(flavor = "current_thread")]
async fn an_acquisition_right_after_a_drop_carries_the_release_in_its_script() {
    const CYCLES: u64 = 50;
    let _serial = serial().await;
    let env = common::Env::start().await;
    let client = env.client().await;
    let lock = client.lock("folded");
    // Warm the script cache (a NOSCRIPT would add calls), then wait until
    // the last release went out on its own.
    drop(lock.lock().await.expect("lock"));
    drop(lock.lock().await.expect("lock"));
    let key = common::lock_key("folded");
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            fred::interfaces::KeysInterface::exists::<i64, _>(&env.admin, &key)
                .await
                .unwrap()
                == 0
        })
        .await
    );
    let before = common::evalsha_calls(&env).await;
    let mut last = 0;
    for i in 0..CYCLES {
        let guard = lock
            .try_lock(Duration::ZERO, None)
            .await
            .expect("try_lock")
            .unwrap_or_else(|| panic!("busy on round {i}, right after the drop"));
        assert!(guard.fencing_token() > last, "a new acquisition each time");
        last = guard.fencing_token();
        drop(guard);
    }
    // The last drop's release goes out on its own once we yield: it may
    // be counted too.
    let calls = common::evalsha_calls(&env).await - before;
    assert!(
        (CYCLES..=CYCLES + 1).contains(&calls),
        "{calls} script calls for {CYCLES} cycles: one per cycle expected"
    );
    let other = env.client().await;
    assert_free_within(&other, "folded", Duration::from_secs(5), || {
        "the last dropped guard's release was never sent".into()
    })
    .await;
}

/// A dropped guard's release carried by the next attempt is owner- and
/// token-checked as any release: the hold was force-unlocked and the lock
/// taken by another client meanwhile, so the carried release frees nothing
/// (the other client keeps the lock), the attempt finds it busy, and the
/// dropped hold's lost signal fires. Once the other client lets go, the
/// next acquisition gets a token above its.
#[tokio::test(flavor = "current_thread")]
async fn a_carried_release_of_a_hold_lost_meanwhile_frees_nothing() {
    let _serial = serial().await;
    let env = common::Env::start().await;
    let client = env.client().await;
    let other = env.client().await;
    let lock = client.lock("folded-lost");
    let guard = lock.lock().await.expect("lock");
    let signal = guard.lost_signal();
    assert!(other
        .lock("folded-lost")
        .force_unlock()
        .await
        .expect("force"));
    let theirs = other
        .lock("folded-lost")
        .try_lock(Duration::ZERO, None)
        .await
        .expect("try_lock")
        .expect("free after the force-unlock");
    drop(guard);
    let mine = lock.try_lock(Duration::ZERO, None).await.expect("try_lock");
    assert!(mine.is_none(), "the other client holds it");
    assert!(
        other
            .lock("folded-lost")
            .is_held_by_current_task()
            .await
            .expect("read"),
        "the carried release freed another client's hold"
    );
    tokio::time::timeout(Duration::from_secs(5), signal)
        .await
        .expect("the dropped hold's lost signal fired");
    let token = theirs.fencing_token();
    theirs.unlock().await.expect("unlock");
    let next = lock
        .try_lock(Duration::from_secs(5), None)
        .await
        .expect("try_lock")
        .expect("free");
    assert!(next.fencing_token() > token);
}

/// An attempt that carries a dropped guard's release and is cancelled
/// before its reply (the connection stalls): the release may or may not
/// have run, so it is sent again in the background, and the attempt's own
/// grant is undone. Once the connection is back the lock is free for
/// another client well within the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_attempt_carrying_a_release_leaks_nothing() {
    let _serial = serial().await;
    let server = RedisServer::start().await;
    let proxy = redisync_testkit::FaultProxy::start(server.addr()).await;
    let client = common::client_via(&proxy).await;
    let other = Client::connect(&server.url()).await.expect("connect");
    let lock = client.lock("folded-cancelled");
    drop(lock.lock().await.expect("lock")); // warm the scripts
    for i in 0..3 {
        let guard = lock.lock().await.expect("lock");
        proxy.blackhole(redisync_testkit::Direction::Both);
        drop(guard);
        let attempt = tokio::time::timeout(
            Duration::from_millis(200),
            lock.try_lock(Duration::from_secs(10), None),
        )
        .await;
        assert!(attempt.is_err(), "round {i}: answered through a blackhole");
        proxy.heal();
        proxy.reset_connections();
        assert_free_within(&other, "folded-cancelled", Duration::from_secs(15), || {
            format!("round {i}: still held 15 s after the connection came back (lease 30 s)")
        })
        .await;
    }
    client.shutdown().await.expect("shutdown");
}
