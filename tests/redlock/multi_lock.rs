//! `MultiLock` against real servers: all-or-nothing, no deadlock between
//! opposite orders, cancellation, waiting, and release reporting every failure.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redisync::Client;
use redisync_redlock::{Error, MultiLock, MultiLockGuard};
use redisync_testkit::RedisNodes;
use tokio::time::{sleep, timeout, Instant};

/// Two independent servers and a client on each, for one "process".
struct Pair {
    a: Client,
    b: Client,
}

async fn pair(nodes: &RedisNodes) -> Pair {
    Pair {
        a: Client::connect(&nodes[0].url()).await.expect("connect a"),
        b: Client::connect(&nodes[1].url()).await.expect("connect b"),
    }
}

/// x and y on server A, z on server B.
fn xyz(p: &Pair) -> MultiLock {
    MultiLock::new(vec![p.a.lock("x"), p.a.lock("y"), p.b.lock("z")]).expect("multi")
}

async fn locked(client: &Client, name: &str) -> bool {
    client.lock(name).is_locked().await.expect("is_locked")
}

/// Polls until none of `names` is locked on `client`; false after `within`.
async fn all_free(client: &Client, names: &[&str], within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        let mut any = false;
        for n in names {
            any |= locked(client, n).await;
        }
        if !any {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn bounds() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<MultiLock>();
    send_sync::<MultiLockGuard>();
    send_sync::<Error>();
}

/// Type-checked only: the futures are `Send`.
#[allow(dead_code)]
fn futures_are_send(m: &MultiLock, g: MultiLockGuard) {
    fn send<T: Send>(_: &T) {}
    send(&m.lock());
    send(&m.try_lock(Duration::ZERO, None));
    send(&g.lost());
    send(&g.unlock());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_is_an_error() {
    assert!(matches!(
        MultiLock::new(Vec::new()),
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takes_every_member_and_releases_every_member() {
    let nodes = RedisNodes::start(2).await;
    let p = pair(&nodes).await;
    let multi = xyz(&p);
    let guard = multi
        .try_lock(Duration::ZERO, Some(Duration::from_secs(10)))
        .await
        .expect("try_lock")
        .expect("free locks are granted");
    assert_eq!(guard.guards().len(), 3);
    assert_eq!(guard.guards()[2].lock().name(), "z");
    assert!(locked(&p.a, "x").await && locked(&p.a, "y").await && locked(&p.b, "z").await);
    assert!(guard.fencing_tokens().iter().all(|t| *t > 0));
    assert!(!guard.is_lost());
    guard.unlock().await.expect("unlock");
    assert!(!locked(&p.a, "x").await && !locked(&p.a, "y").await && !locked(&p.b, "z").await);
    // Watchdog leases too.
    let guard = multi.lock().await.expect("lock");
    guard.unlock().await.expect("unlock");
}

/// Done when: all-or-nothing (a busy member leaves no other member held).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_member_leaves_no_other_member_held() {
    let nodes = RedisNodes::start(2).await;
    let p = pair(&nodes).await;
    let other = pair(&nodes).await;
    let multi = xyz(&p);
    // Another client holds y (the middle one) and z (on the other server),
    // in turn.
    for busy in ["y", "z"] {
        let client = if busy == "z" { &other.b } else { &other.a };
        let holder = client.lock(busy).lock().await.expect("hold");
        let started = Instant::now();
        let got = multi
            .try_lock(Duration::from_millis(300), Some(Duration::from_secs(10)))
            .await
            .expect("try_lock");
        assert!(got.is_none(), "{busy} is held by someone else");
        assert!(started.elapsed() >= Duration::from_millis(290));
        // Nothing else of ours is left behind.
        let free: Vec<&str> = ["x", "y", "z"].into_iter().filter(|n| *n != busy).collect();
        let (a_names, b_names): (Vec<&str>, Vec<&str>) = free.iter().partition(|n| **n != "z");
        assert!(
            all_free(&p.a, &a_names, Duration::from_secs(1)).await,
            "{a_names:?} left held"
        );
        assert!(
            all_free(&p.b, &b_names, Duration::from_secs(1)).await,
            "{b_names:?} left held"
        );
        // A zero wait is one round of tries, no waiting.
        let started = Instant::now();
        assert!(multi
            .try_lock(Duration::ZERO, None)
            .await
            .expect("try_lock")
            .is_none());
        assert!(started.elapsed() < Duration::from_millis(500));
        holder.unlock().await.expect("unlock holder");
    }
    let guard = multi
        .try_lock(Duration::from_secs(2), None)
        .await
        .expect("try_lock")
        .expect("all free again");
    guard.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_a_busy_member_and_takes_all_when_it_frees() {
    let nodes = RedisNodes::start(2).await;
    let p = pair(&nodes).await;
    let other = pair(&nodes).await;
    let multi = xyz(&p);
    let holder = other.b.lock("z").lock().await.expect("hold z");
    // The time the release starts: the waiter, woken by it, can be done
    // before this task is polled again after the unlock.
    let release = tokio::spawn(async move {
        sleep(Duration::from_millis(300)).await;
        let released_at = Instant::now();
        holder.unlock().await.expect("unlock z");
        released_at
    });
    let guard = multi
        .try_lock(Duration::from_secs(5), Some(Duration::from_secs(10)))
        .await
        .expect("try_lock")
        .expect("z frees after 300 ms");
    let got_at = Instant::now();
    let released_at = release.await.expect("release task");
    // Woken by the release, not by polling late (the holder's lease is
    // 30 s).
    assert!(got_at >= released_at);
    assert!(got_at - released_at < Duration::from_secs(2));
    guard.unlock().await.expect("unlock");
}

/// Done when: opposite-order `MultiLock`s finish without deadlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_finish_without_deadlock() {
    let nodes = RedisNodes::start(2).await;
    let holders = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for k in 0..4 {
        // Four "processes": each has its own clients; half give the locks in
        // one order, half in the other.
        let p = pair(&nodes).await;
        let locks = if k % 2 == 0 {
            vec![p.a.lock("left"), p.b.lock("right"), p.a.lock("middle")]
        } else {
            vec![p.a.lock("middle"), p.b.lock("right"), p.a.lock("left")]
        };
        let multi = MultiLock::new(locks).expect("multi");
        let (holders, overlaps) = (holders.clone(), overlaps.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..25 {
                let guard = if i % 2 == 0 {
                    multi.lock().await.expect("lock")
                } else {
                    multi
                        .try_lock(Duration::from_secs(30), Some(Duration::from_secs(10)))
                        .await
                        .expect("try_lock")
                        .expect("30 s is plenty")
                };
                if holders.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                sleep(Duration::from_millis(1)).await;
                holders.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().await.expect("unlock");
            }
            drop(p);
        }));
    }
    let all = futures::future::join_all(tasks);
    let results = timeout(Duration::from_secs(30), all)
        .await
        .expect("100 acquisitions in opposite orders finish: no deadlock, no livelock");
    for r in results {
        r.expect("task");
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "mutual exclusion");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquisition_releases_what_it_took() {
    let nodes = RedisNodes::start(2).await;
    let p = pair(&nodes).await;
    let other = pair(&nodes).await;
    let multi = xyz(&p);
    let holder = other.b.lock("z").lock().await.expect("hold z");
    // Cancelled while waiting for z (x and y were taken in the first round
    // and released), and while the first round is in flight.
    assert!(timeout(Duration::from_millis(200), multi.lock())
        .await
        .is_err());
    for _ in 0..20 {
        let _ = timeout(Duration::from_micros(100), multi.lock()).await;
    }
    assert!(all_free(&p.a, &["x", "y"], Duration::from_secs(2)).await);
    holder.unlock().await.expect("unlock z");
    assert!(all_free(&p.b, &["z"], Duration::from_secs(2)).await);
    // Cancelled after winning everything: the guard inside is dropped.
    let won = multi.try_lock(Duration::ZERO, None);
    let guard = won.await.expect("try_lock").expect("free");
    drop(guard);
    assert!(all_free(&p.a, &["x", "y"], Duration::from_secs(2)).await);
    assert!(all_free(&p.b, &["z"], Duration::from_secs(2)).await);
}

/// Unlock releases every member and reports every failure, not the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_reports_every_failure() {
    let nodes = RedisNodes::start(2).await;
    let p = pair(&nodes).await;
    let other = pair(&nodes).await;
    let multi = xyz(&p);
    let guard = multi.lock().await.expect("lock");
    // Someone force-unlocks x and z; y is still ours.
    assert!(other.a.lock("x").force_unlock().await.expect("force x"));
    assert!(other.b.lock("z").force_unlock().await.expect("force z"));
    let err = guard.unlock().await.expect_err("two members were lost");
    match &err {
        Error::Release {
            released,
            required,
            failures,
            ..
        } => {
            assert_eq!((*released, *required), (1, 3));
            let lost: Vec<(usize, &str)> = failures
                .iter()
                .map(|f| (f.index, f.name.as_str()))
                .collect();
            assert_eq!(lost, [(0, "x"), (2, "z")]);
            assert!(failures
                .iter()
                .all(|f| matches!(f.error, redisync::Error::NotHeld { .. })));
        }
        other => panic!("unexpected {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("\"x\"") && text.contains("\"z\""), "{text}");
    assert!(
        !locked(&p.a, "y").await,
        "the member still held was released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_member_is_reported() {
    let nodes = RedisNodes::start(2).await;
    let p = pair(&nodes).await;
    let multi = xyz(&p);
    let guard = multi
        .try_lock(Duration::ZERO, Some(Duration::from_millis(300)))
        .await
        .expect("try_lock")
        .expect("free");
    timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("a fixed lease runs out");
    assert!(guard.is_lost());
    assert!(guard.unlock().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_errors_name_the_member() {
    let nodes = RedisNodes::start(2).await;
    let p = pair(&nodes).await;
    let admin = common::admin(&nodes[1].url()).await;
    // z's key holds a string: the member fails, the others are released.
    let _: () = fred::prelude::KeysInterface::set(
        &admin,
        common::lock_key("z"),
        "not a lock",
        None,
        None,
        false,
    )
    .await
    .expect("SET");
    let multi = xyz(&p);
    match multi.try_lock(Duration::ZERO, None).await {
        Err(Error::Member(m)) => {
            assert_eq!((m.index, m.name.as_str()), (2, "z"));
            assert!(matches!(m.error, redisync::Error::WrongType { .. }));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(all_free(&p.a, &["x", "y"], Duration::from_secs(2)).await);
    assert!(matches!(
        multi.try_lock(Duration::ZERO, Some(Duration::ZERO)).await,
        Err(Error::InvalidArgument(_))
    ));
}

/// Defect 9: the same lock twice (one handle cloned, one name through one
/// client twice, one name through two clients of one server) used to chase
/// itself forever; `new` refuses it without I/O. The same name on two
/// servers, or in two databases of one server, is two different locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_lock_twice_is_refused_by_new() {
    let nodes = RedisNodes::start(2).await;
    let p = pair(&nodes).await;
    let a_again = Client::connect(&nodes[0].url()).await.expect("connect");
    let refused = |r: Result<MultiLock, Error>| match r {
        Err(Error::InvalidArgument(msg)) => msg,
        other => panic!("expected InvalidArgument, got {other:?}"),
    };
    let x = p.a.lock("x");
    let msg = refused(MultiLock::new(vec![x.clone(), x]));
    assert!(msg.contains("#0") && msg.contains("#1"), "{msg}");
    let msg = refused(MultiLock::new(vec![
        p.a.lock("x"),
        p.b.lock("z"),
        p.a.lock("x"),
    ]));
    assert!(msg.contains("#0") && msg.contains("#2"), "{msg}");
    refused(MultiLock::new(vec![p.a.lock("x"), a_again.lock("x")]));
    // Different servers, different databases: three locks, taken at once.
    let db1 = Client::connect(&format!("{}/1", nodes[0].url()))
        .await
        .expect("connect db 1");
    let three = MultiLock::new(vec![p.a.lock("x"), p.b.lock("x"), db1.lock("x")])
        .expect("three different locks");
    let guard = timeout(Duration::from_secs(5), three.try_lock(Duration::ZERO, None))
        .await
        .expect("one round")
        .expect("try_lock")
        .expect("all free");
    guard.unlock().await.expect("unlock");
}

/// `MultiLockGuard` through the `Guard` trait: one token for the set (the
/// largest member token, which rises for every later holder of the set), an
/// owned lost signal that fires when any member is lost and on release,
/// `extend` of every member, and `run_locked`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lock_guard_is_a_guard_with_an_owned_lost_signal() {
    use redisync::{run_locked, Guard, GuardError, Outcome};
    let nodes = RedisNodes::start(2).await;
    let p = Pair {
        a: Client::builder(&nodes[0].url())
            .watchdog_timeout(Duration::from_secs(3))
            .connect()
            .await
            .expect("connect a"),
        b: Client::builder(&nodes[1].url())
            .watchdog_timeout(Duration::from_secs(3))
            .connect()
            .await
            .expect("connect b"),
    };
    let other = pair(&nodes).await;
    let multi = xyz(&p);
    let limit = Duration::from_secs(20);

    let first = multi.lock().await.expect("lock");
    let token = Guard::fencing_token(&first);
    assert_eq!(Some(token), first.fencing_tokens().into_iter().max());
    assert_eq!(
        Guard::fencing_token_i64(&first),
        i64::try_from(token).unwrap()
    );
    assert!(Guard::validity(&first) > Duration::ZERO);
    Guard::extend(&first, Duration::from_secs(5))
        .await
        .expect("extend");
    assert!(!Guard::is_lost(&first));
    first.unlock().await.expect("unlock");
    let guard = multi.lock().await.expect("lock");
    assert!(
        Guard::fencing_token(&guard) > token,
        "the set's token rises"
    );

    let signal = Guard::lost_signal(&guard);
    let watcher = tokio::spawn(signal.clone());
    assert!(other.a.lock("y").force_unlock().await.expect("force"));
    timeout(limit, watcher)
        .await
        .expect("the signal fires in another task")
        .unwrap();
    assert!(signal.is_lost() && guard.is_lost());
    let late = Guard::extend(&guard, Duration::from_secs(5))
        .await
        .expect_err("a member is lost");
    assert!(GuardError::is_not_held(&late), "{late:?}");
    let late = Guard::release(guard).await.expect_err("a member is lost");
    assert!(late.is_not_held(), "{late:?}");

    let guard = multi.lock().await.expect("lock");
    let signal = guard.lost_signal();
    guard.unlock().await.expect("unlock");
    timeout(limit, signal)
        .await
        .expect("a release fires the signal");

    let done = run_locked(multi.lock(), async |g: &MultiLockGuard| {
        g.fencing_tokens().len()
    })
    .await
    .expect("run_locked");
    assert_eq!(done, Outcome::Completed(3));
    let forcer = other.b.clone();
    let stopped = run_locked(multi.lock(), async move |_g: &MultiLockGuard| {
        assert!(forcer.lock("z").force_unlock().await.expect("force"));
        std::future::pending::<()>().await;
    });
    let stopped = timeout(limit, stopped)
        .await
        .expect("cancelled on the loss");
    assert!(matches!(stopped, Ok(Outcome::Cancelled)), "{stopped:?}");
}

/// Defect 5, `MultiLock` side: it follows the handles it is built
/// from. Over `non_reentrant()` handles, a second `MultiLock` of the same
/// task waits like any other contender and then takes every member with
/// higher tokens; over ordinary handles it re-enters every member, with
/// the same tokens, as `Lock` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_multi_lock_of_the_same_task_follows_its_handles() {
    let nodes = RedisNodes::start(2).await;
    let p = pair(&nodes).await;
    let lease = Some(Duration::from_secs(10));
    let strict = |p: &Pair| {
        MultiLock::new(vec![
            p.a.lock("x").non_reentrant(),
            p.a.lock("y").non_reentrant(),
            p.b.lock("z").non_reentrant(),
        ])
        .expect("multi")
    };
    let (first, second) = (strict(&p), strict(&p));
    let held = first
        .try_lock(Duration::ZERO, lease)
        .await
        .expect("try_lock")
        .expect("free");
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    let again = second.try_lock(wait, None).await.expect("busy is Ok(None)");
    if let Some(g) = &again {
        panic!(
            "re-entered through non-reentrant handles: tokens {:?} (the first's: {:?})",
            g.fencing_tokens(),
            held.fencing_tokens()
        );
    }
    assert!(started.elapsed() >= Duration::from_millis(290));
    let before = held.fencing_tokens();
    held.unlock().await.expect("unlock");
    let after = second
        .try_lock(Duration::from_secs(10), None)
        .await
        .expect("try_lock")
        .expect("free once the first is released");
    for (b, a) in before.iter().zip(after.fencing_tokens()) {
        assert!(a > *b, "{before:?} then {:?}", after.fencing_tokens());
    }
    after.unlock().await.expect("unlock");
    assert!(all_free(&p.a, &["x", "y"], Duration::from_secs(5)).await);
    assert!(all_free(&p.b, &["z"], Duration::from_secs(5)).await);

    // Ordinary handles: the task is one owner, so the second re-enters.
    let (first, second) = (xyz(&p), xyz(&p));
    let held = first
        .try_lock(Duration::ZERO, lease)
        .await
        .expect("try_lock")
        .expect("free");
    let inner = timeout(
        Duration::from_secs(5),
        second.try_lock(Duration::ZERO, lease),
    )
    .await
    .expect("one round")
    .expect("try_lock")
    .expect("re-entered");
    assert_eq!(inner.fencing_tokens(), held.fencing_tokens());
    inner.unlock().await.expect("unlock the inner hold");
    assert!(locked(&p.a, "x").await && locked(&p.a, "y").await && locked(&p.b, "z").await);
    held.unlock().await.expect("unlock");
    assert!(!locked(&p.a, "x").await && !locked(&p.a, "y").await && !locked(&p.b, "z").await);
}

/// A process stalled past the lease: the `MultiLock` guard's lost signal and
/// `lost()` are ready at the first poll after it (before any timer fires),
/// and `run_locked` does not poll its work past its next await.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_past_the_lease_wins_over_the_work() {
    let env = common::Env::start().await;
    let url = env.server.url();
    common::on_one_thread(move || async move {
        let lease = Duration::from_millis(300);
        let client = Client::builder(&url)
            .watchdog_timeout(lease)
            .connect()
            .await
            .unwrap();
        let multi = MultiLock::new(vec![client.lock("stall:a"), client.lock("stall:b")]).unwrap();
        for fixed in [Some(lease), None] {
            let guard = multi
                .try_lock(Duration::from_secs(5), fixed)
                .await
                .unwrap()
                .unwrap();
            let past = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let in_work = past.clone();
            let outcome = tokio::spawn(redisync::run_locked(
                std::future::ready(Ok::<_, Error>(guard)),
                async move |_| {
                    common::stall(lease * 3);
                    common::woken_at_once().await;
                    in_work.store(true, Ordering::SeqCst);
                },
            ))
            .await
            .unwrap()
            .unwrap();
            assert!(
                !past.load(Ordering::SeqCst),
                "the work went on after the stall ({fixed:?})"
            );
            assert_eq!(outcome, redisync::Outcome::Cancelled);

            let guard = multi
                .try_lock(Duration::from_secs(5), fixed)
                .await
                .unwrap()
                .unwrap();
            let signal = guard.lost_signal();
            {
                let mut lost = std::pin::pin!(guard.lost());
                assert!(futures::poll!(lost.as_mut()).is_pending());
                assert!(futures::poll!(signal.clone()).is_pending());
                common::stall(lease * 3);
                assert!(
                    futures::poll!(signal.clone()).is_ready(),
                    "signal ({fixed:?})"
                );
                assert!(
                    futures::poll!(lost.as_mut()).is_ready(),
                    "lost() ({fixed:?})"
                );
            }
            assert!(guard.is_lost() && guard.validity().is_zero());
            drop(guard);
        }
        client.shutdown().await.unwrap();
    })
    .await;
}

/// Ten tasks (ten clients of one process each: ten owners) ask for the same
/// three free locks with a zero wait, all at once: exactly one of them gets
/// all three, every time (Redisson's `RedissonMultiLock` has one winner;
/// members tried all at once could leave each task one member and none all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_wait_race_over_free_locks_has_one_winner() {
    let nodes = RedisNodes::start(2).await;
    let mut pairs = Vec::new();
    for _ in 0..10 {
        pairs.push(pair(&nodes).await);
    }
    for round in 0..20 {
        let start = Arc::new(tokio::sync::Barrier::new(pairs.len()));
        let tasks: Vec<_> = pairs
            .iter()
            .map(|p| {
                let multi = xyz(p);
                let start = start.clone();
                tokio::spawn(async move {
                    start.wait().await;
                    multi.try_lock(Duration::ZERO, None).await
                })
            })
            .collect();
        let mut winners = Vec::new();
        for t in tasks {
            if let Some(g) = t.await.expect("task").expect("try_lock") {
                winners.push(g);
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: one winner");
        for g in winners {
            g.unlock().await.expect("unlock");
        }
        assert!(
            all_free(&pairs[0].a, &["x", "y"], Duration::from_secs(10)).await
                && all_free(&pairs[0].b, &["z"], Duration::from_secs(10)).await,
            "round {round}: the losers left nothing held"
        );
    }
}
