//! `FairLock` against real redis-server processes: FIFO order across
//! clients, eviction of crashed waiters (and only of those), cancellation,
//! faults and owner checks. Every test runs against its own fresh server.

use crate::common;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{eventually, Env};
use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};
use redisync::{Client, Error, FairLock};
use tokio::time::{sleep, timeout, Instant};

fn hash_key(name: &str) -> String {
    common::key("fair", "hold", name)
}

fn queue_key(name: &str) -> String {
    common::key("fair", "queue", name)
}

async fn queue_len(env: &Env, name: &str) -> i64 {
    env.admin.llen(queue_key(name)).await.unwrap()
}

/// The queue's entries without their deadlines (`@<deadline> ` first),
/// which a live waiter refreshes whenever it looks.
async fn queue_places(env: &Env, name: &str) -> Vec<String> {
    queue(env, name)
        .await
        .into_iter()
        .map(
            |e| match e.strip_prefix('@').and_then(|e| e.split_once(' ')) {
                Some((_, place)) => place.to_owned(),
                None => e,
            },
        )
        .collect()
}

/// Waits until `n` waiters are queued on `name`, so the next one queues
/// behind them: spawn order alone does not make queue order on a loaded
/// machine.
async fn queued(env: &Env, name: &str, n: i64) {
    let ok = eventually(Duration::from_secs(10), || async {
        queue_len(env, name).await == n
    })
    .await;
    assert!(
        ok,
        "{name}: {:?} queued, not {n}",
        queue_len(env, name).await
    );
}

/// The server's clock in milliseconds.
async fn server_ms(env: &Env) -> i64 {
    common::server_ms(&env.admin).await
}

/// A task that waits for `lock`, releases it at once and returns when it
/// got it.
fn spawn_taker(lock: FairLock) -> tokio::task::JoinHandle<Instant> {
    tokio::spawn(async move {
        let g = lock.lock().await.unwrap();
        let at = Instant::now();
        g.unlock().await.unwrap();
        at
    })
}

/// What a crashed waiter leaves behind: a queue entry whose deadline is
/// `left` from now (server time), asking for a 30 s lease.
async fn write_ghost(env: &Env, name: &str, ghost: &str, left: Duration) {
    write_ghost_with_lease(env, name, ghost, left, Duration::from_secs(30)).await;
}

/// [`write_ghost`] asking for `lease`.
async fn write_ghost_with_lease(
    env: &Env,
    name: &str,
    ghost: &str,
    left: Duration,
    lease: Duration,
) {
    let deadline = server_ms(env).await + i64::try_from(left.as_millis()).unwrap();
    let entry = format!("@{deadline} {} 1 0 {ghost}", lease.as_millis());
    let _: () = env.admin.rpush(queue_key(name), entry).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_order_across_three_clients() {
    let env = Env::start().await;
    let clients = [env.client().await, env.client().await, env.client().await];
    let holder = clients[0].fair_lock("fifo").lock().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..6usize {
        let lock = clients[i % 3].fair_lock("fifo");
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = lock.lock().await.unwrap();
            order.lock().unwrap().push(i);
            sleep(Duration::from_millis(5)).await;
            g.unlock().await.unwrap();
        }));
        queued(&env, "fifo", i64::try_from(i).unwrap() + 1).await;
    }
    let released_at = Instant::now();
    holder.unlock().await.unwrap();
    for t in tasks {
        timeout(Duration::from_secs(5), t).await.unwrap().unwrap();
    }
    let took = released_at.elapsed();
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4, 5]);
    // Woken by messages: one missed wake-up waits for a 10 s heartbeat.
    assert!(took < Duration::from_secs(3), "6 hand-offs took {took:?}");
    assert_eq!(queue_len(&env, "fifo").await, 0);
    assert!(!clients[0].fair_lock("fifo").is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_waiter_delays_the_next_one_at_most_its_queue_lease_or_its_lease() {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;

    // A crashed waiter at the head of a free lock: the next one gets in when
    // the ghost's queue deadline passes, and not before.
    // (The clock starts before the ghost's deadline is set: a slow set-up
    // cannot make the wait look short.)
    let started = Instant::now();
    write_ghost(&env, "ghost", "dead-client:1", Duration::from_millis(400)).await;
    // The waiters' own heartbeat (queue lease / 3 = 10 s) is far off, so a
    // wait well below it shows they were woken by the ghost's deadline,
    // with room for a loaded machine.
    let heartbeat_far = Duration::from_secs(30);
    let g = a
        .fair_lock("ghost")
        .with_queue_lease(heartbeat_far)
        .try_lock(Duration::from_secs(20), None)
        .await
        .unwrap()
        .expect("the ghost was evicted");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert_eq!(queue_len(&env, "ghost").await, 0);
    g.unlock().await.unwrap();

    // A waiter whose process crashed (it cannot leave) sits between the
    // holder and the next waiter. A ghost whose queue deadline passed is
    // skipped by the release at once; one whose deadline has not passed yet
    // (it crashed within its last queue lease) is handed the lock and keeps
    // it for its lease (here 2 s), as a crashed holder would.
    for (left, lease, least) in [
        (Duration::ZERO, Duration::from_secs(30), Duration::ZERO),
        (
            Duration::from_secs(30),
            Duration::from_secs(2),
            Duration::from_millis(1900),
        ),
    ] {
        let g = a
            .fair_lock("ghost")
            .try_lock(Duration::from_secs(20), None)
            .await
            .unwrap()
            .expect("the lock is free");
        write_ghost_with_lease(&env, "ghost", "dead-client:2", left, lease).await;
        assert_eq!(queue_len(&env, "ghost").await, 1);
        // A heartbeat every second: once the ghost's lease ends, the next
        // waiter (not the head when it last looked) finds it by then.
        let heartbeat = Duration::from_secs(1);
        let next = spawn_taker(b.fair_lock("ghost").with_queue_lease(heartbeat * 3));
        queued(&env, "ghost", 2).await;
        let released_at = Instant::now();
        g.unlock().await.unwrap();
        let got_at = timeout(Duration::from_secs(20), next)
            .await
            .unwrap()
            .unwrap();
        let delay = got_at - released_at;
        let most = if left.is_zero() {
            Duration::ZERO
        } else {
            lease + heartbeat
        };
        assert!(
            delay >= least && delay < most + Duration::from_secs(3),
            "the crashed waiter ({left:?} left, lease {lease:?}) delayed the next one by {delay:?}"
        );
        assert_eq!(queue_len(&env, "ghost").await, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_behind_a_dead_head_sleep_until_its_deadline() {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    // A dead head of a free lock: Redisson's waiters busy-poll here. (The
    // clock starts before its deadline is set.)
    let started = Instant::now();
    let ghost = Duration::from_millis(1500);
    write_ghost(&env, "dead", "dead-client:1", ghost).await;
    let before = common::command_calls(&env).await;
    let mut tasks = Vec::new();
    for i in 0..3usize {
        // A 30 s queue lease: no heartbeat (every 10 s) in the count below.
        let lock = [&a, &b][i % 2]
            .fair_lock("dead")
            .with_queue_lease(Duration::from_secs(30));
        tasks.push(tokio::spawn(async move {
            let g = lock.lock().await.unwrap();
            let at = started.elapsed();
            g.unlock().await.unwrap();
            (i, at)
        }));
        queued(&env, "dead", i64::try_from(i).unwrap() + 2).await;
    }
    let mut got = Vec::new();
    for t in tasks {
        got.push(timeout(Duration::from_secs(10), t).await.unwrap().unwrap());
    }
    let after = common::command_calls(&env).await;
    got.sort_by_key(|(_, at)| *at);
    assert_eq!(
        got.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    // Not before the deadline, and woken by it (a heartbeat is 10 s off).
    assert!(got[0].1 + Duration::from_millis(100) >= ghost, "{got:?}");
    assert!(got[2].1 < ghost + Duration::from_secs(3), "{got:?}");
    let scripts = after.get("evalsha").copied().unwrap_or(0)
        + after.get("eval").copied().unwrap_or(0)
        - before.get("evalsha").copied().unwrap_or(0)
        - before.get("eval").copied().unwrap_or(0);
    assert!(
        scripts <= 20,
        "{scripts} script calls while the head was dead"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_that_stop_waiting_leave_at_once() {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    let c = env.client().await;
    let holder = a.fair_lock("leave").lock().await.unwrap();

    // try_lock whose wait runs out: no entry left when it returns.
    let none = b
        .fair_lock("leave")
        .try_lock(Duration::from_millis(100), None)
        .await
        .unwrap();
    assert!(none.is_none());
    assert_eq!(queue_len(&env, "leave").await, 0);

    // A cancelled waiter (its future dropped) ahead of another one. Both
    // have 30 s queue leases: an entry left behind would stay, and the next
    // waiter's heartbeat (10 s) would be far off.
    let far = Duration::from_secs(30);
    let cancelled = tokio::spawn({
        let lock = b.fair_lock("leave").with_queue_lease(far);
        async move { lock.lock().await.map(drop) }
    });
    queued(&env, "leave", 1).await;
    let next = spawn_taker(c.fair_lock("leave").with_queue_lease(far));
    queued(&env, "leave", 2).await;
    cancelled.abort();
    assert!(cancelled.await.unwrap_err().is_cancelled());
    assert!(
        eventually(Duration::from_secs(2), || async {
            queue_len(&env, "leave").await == 1
        })
        .await,
        "the cancelled waiter is still queued"
    );
    let released_at = Instant::now();
    holder.unlock().await.unwrap();
    let got_at = timeout(Duration::from_secs(10), next)
        .await
        .unwrap()
        .unwrap();
    assert!(
        got_at - released_at < Duration::from_secs(3),
        "next waiter was late: {:?}",
        got_at - released_at
    );
    assert_eq!(queue_len(&env, "leave").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_leaves_a_free_lock_tells_the_next_waiter() {
    let env = Env::start().await;
    let c = env.client().await;
    // The head leaves a free lock before taking it: the leave tells the next
    // waiter. A ghost head stands in for the slow one, and its leave runs
    // fair_lock_leave.lua for it.
    // With a message, the waiter's heartbeat (queue lease / 3 = 10 s) is far
    // off; without one, the heartbeat (every 500 ms) finds the lock free.
    for (fallback, queue_lease) in [
        (false, Duration::from_secs(30)),
        (true, Duration::from_millis(1500)),
    ] {
        write_ghost(&env, "leave", "slow-client:1", Duration::from_secs(30)).await;
        let next = spawn_taker(c.fair_lock("leave").with_queue_lease(queue_lease));
        assert!(
            eventually(Duration::from_secs(10), || async {
                queue_len(&env, "leave").await == 2
            })
            .await
        );
        sleep(Duration::from_millis(50)).await;
        let left_at = Instant::now();
        if fallback {
            // Removed without a message (as if it was lost): the waiter's
            // heartbeat (every queue lease / 3) finds the lock free.
            let _: () = env.admin.lpop(queue_key("leave"), None).await.unwrap();
        } else {
            let _: i64 = env
                .admin
                .eval(
                    redisync::__private::script_source("fair_lock_leave.lua").unwrap(),
                    vec![
                        hash_key("leave"),
                        common::key("fair", "fence", "leave"),
                        queue_key("leave"),
                    ],
                    vec![
                        "slow-client:1".to_owned(),
                        String::new(),
                        if common::sharded(&env.admin) {
                            "spublish"
                        } else {
                            "publish"
                        }
                        .to_owned(),
                        common::key("fair", "ch", "leave"),
                        "60000".to_owned(),
                    ],
                )
                .await
                .unwrap();
        }
        let got_at = timeout(Duration::from_secs(10), next)
            .await
            .unwrap()
            .unwrap();
        let bound = if fallback {
            queue_lease / 3 + Duration::from_secs(2)
        } else {
            Duration::from_secs(3)
        };
        assert!(
            got_at - left_at < bound,
            "fallback {fallback}: {:?}",
            got_at - left_at
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_waiter_is_never_evicted() {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    // Short, but not so short that a stalled test process misses a
    // heartbeat (every 500 ms).
    let queue_lease = Duration::from_millis(1500);
    let holder = a.fair_lock("live").lock().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..2usize {
        let lock = [&a, &b][i].fair_lock("live").with_queue_lease(queue_lease);
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = lock.lock().await.unwrap();
            order.lock().unwrap().push(i);
            g.unlock().await.unwrap();
        }));
        queued(&env, "live", i64::try_from(i).unwrap() + 1).await;
    }
    // Three queue leases: somebody else's script purges expired entries now
    // and then (a third waiter with an instant timeout).
    for _ in 0..6 {
        sleep(queue_lease / 2).await;
        assert!(b
            .fair_lock("live")
            .try_lock(Duration::ZERO, None)
            .await
            .unwrap()
            .is_none());
        assert_eq!(
            queue_len(&env, "live").await,
            2,
            "a live waiter was evicted"
        );
    }
    holder.unlock().await.unwrap();
    for t in tasks {
        timeout(Duration::from_secs(10), t).await.unwrap().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_wait_never_queues_nor_overtakes() {
    let env = Env::start().await;
    let client = env.client().await;
    let lock = client.fair_lock("zero");
    let g = lock
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .expect("free");
    g.unlock().await.unwrap();
    // A queued waiter (a ghost here) comes first even though the lock is free.
    write_ghost(&env, "zero", "other-client:1", Duration::from_secs(30)).await;
    assert!(lock.try_lock(Duration::ZERO, None).await.unwrap().is_none());
    assert_eq!(queue_len(&env, "zero").await, 1);
    let channels = common::channels(&env.admin, "redisync:*").await;
    assert!(channels.is_empty(), "a zero wait subscribed: {channels:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_tokens_and_inspection() {
    let env = Env::start().await;
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let client = env.client().await;
        for _ in 0..3 {
            let lock = client.fair_lock("fenced");
            let tokens = tokens.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let g = lock.lock().await.unwrap();
                    // Recorded while holding: grant order = list order.
                    tokens.lock().unwrap().push(g.fencing_token());
                    g.unlock().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        timeout(Duration::from_secs(8), t).await.unwrap().unwrap();
    }
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 90);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not strictly increasing: {tokens:?}"
    );

    let client = env.client().await;
    let lock = client.fair_lock("fenced");
    tokio::spawn(async move {
        let outer = lock.lock().await.unwrap();
        assert!(outer.fencing_token() > *tokens.last().unwrap());
        let inner = lock
            .try_lock(Duration::ZERO, Some(Duration::from_mins(1)))
            .await
            .unwrap()
            .expect("re-entry");
        assert_eq!(inner.fencing_token(), outer.fencing_token());
        assert_eq!(lock.hold_count().await.unwrap(), 2);
        assert!(lock.is_held_by_current_task().await.unwrap());
        let left = lock.remaining_lease().await.unwrap().unwrap();
        assert!(
            left > Duration::from_secs(59),
            "re-entry never shortens: {left:?}"
        );
        // Another task is excluded and queues.
        let probe = lock.clone();
        let other = tokio::spawn(async move {
            assert!(!probe.is_held_by_current_task().await.unwrap());
            probe
                .try_lock(Duration::from_millis(100), None)
                .await
                .unwrap()
                .is_some()
        });
        assert!(!other.await.unwrap());
        inner.unlock().await.unwrap();
        assert_eq!(lock.hold_count().await.unwrap(), 1);
        outer.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap());
        assert_eq!(lock.remaining_lease().await.unwrap(), None);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_drop_and_force_unlock_hand_over_to_the_next_waiter() {
    let env = Env::start().await;
    let lease = Duration::from_millis(300);
    let short = env.client_with_watchdog(lease).await;
    // The hand-overs below are timed against a long lease: a waiter told by
    // a message gets in far sooner than one that waits the lease out, even
    // on a loaded machine.
    let long_lease = Duration::from_secs(6);
    let a = env.client_with_watchdog(long_lease).await;
    let b = env.client().await;
    let kept = short.fair_lock("kept").lock().await.unwrap();
    sleep(lease * 3).await;
    assert!(!kept.is_lost(), "the watchdog let the lease run out");
    kept.unlock().await.unwrap();

    let guard = a.fair_lock("dog").lock().await.unwrap();
    let waiter = tokio::spawn({
        let lock = b.fair_lock("dog");
        async move {
            let g = lock.lock().await.unwrap();
            (Instant::now(), g)
        }
    });
    assert!(
        eventually(Duration::from_secs(10), || async {
            queue_len(&env, "dog").await == 1
        })
        .await
    );
    let dropped_at = Instant::now();
    drop(guard);
    let (got_at, g) = timeout(long_lease * 2, waiter).await.unwrap().unwrap();
    assert!(
        got_at - dropped_at < long_lease / 2,
        "drop released late: {:?}",
        got_at - dropped_at
    );

    // Force unlock: the holder is lost, the next waiter is told.
    let held_by_a = a.fair_lock("dog2").lock().await.unwrap();
    let waiter = tokio::spawn({
        let lock = b.fair_lock("dog2");
        async move {
            let g = lock.lock().await.unwrap();
            (Instant::now(), g)
        }
    });
    assert!(
        eventually(Duration::from_secs(10), || async {
            queue_len(&env, "dog2").await == 1
        })
        .await
    );
    let forced_at = Instant::now();
    assert!(b.fair_lock("dog2").force_unlock().await.unwrap());
    let (got_at, g2) = timeout(long_lease * 2, waiter).await.unwrap().unwrap();
    assert!(
        got_at - forced_at < long_lease / 2,
        "told late: {:?}",
        got_at - forced_at
    );
    timeout(long_lease * 2, held_by_a.lost())
        .await
        .expect("lost by the watchdog");
    let late = held_by_a.unlock().await;
    assert!(matches!(late, Err(Error::NotHeld { .. })), "{late:?}");
    assert!(g2.fencing_token() > 0);
    g2.unlock().await.unwrap();
    g.unlock().await.unwrap();
    assert!(!b.fair_lock("dog2").force_unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_and_the_next_waiter_gets_in() {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    let guard = a.fair_lock("bye").lock().await.unwrap();
    // A 30 s queue lease: without the release's message the waiter would
    // wait for its heartbeat (10 s).
    let waiter = tokio::spawn({
        let lock = b.fair_lock("bye").with_queue_lease(Duration::from_secs(30));
        async move {
            let g = lock.lock().await.unwrap();
            (Instant::now(), g)
        }
    });
    assert!(
        eventually(Duration::from_secs(10), || async {
            queue_len(&env, "bye").await == 1
        })
        .await
    );
    let shut_at = Instant::now();
    a.shutdown().await.unwrap();
    assert!(guard.is_lost());
    let (got_at, g) = timeout(Duration::from_secs(15), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(
        got_at - shut_at < Duration::from_secs(3),
        "{:?}",
        got_at - shut_at
    );
    g.unlock().await.unwrap();
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_changes_nothing() {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    let flush = || async { env.admin.script_flush(false).await.unwrap() };
    flush().await;
    let g = a.fair_lock("flush").lock().await.unwrap();
    flush().await;
    let waiter = tokio::spawn({
        let lock = b.fair_lock("flush");
        async move { lock.lock().await.unwrap() }
    });
    assert!(
        eventually(Duration::from_secs(10), || async {
            queue_len(&env, "flush").await == 1
        })
        .await
    );
    flush().await;
    assert!(a.fair_lock("flush").is_locked().await.unwrap());
    flush().await;
    g.extend(Duration::from_secs(10)).await.unwrap();
    flush().await;
    g.unlock().await.unwrap();
    let g = timeout(Duration::from_secs(2), waiter)
        .await
        .unwrap()
        .unwrap();
    flush().await;
    assert!(a.fair_lock("flush").force_unlock().await.unwrap());
    assert!(g.is_lost() || matches!(g.unlock().await, Err(Error::NotHeld { .. })));
    flush().await;
    assert!(a
        .fair_lock("flush")
        .try_lock(Duration::from_millis(100), None)
        .await
        .unwrap()
        .is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_type_keys_and_bad_input() {
    let env = Env::start().await;
    let client = env.client().await;
    let lock = |name: &str| client.fair_lock(name);
    for (name, key) in [
        ("wh", hash_key("wh")),
        ("wq", queue_key("wq")),
        ("wf", common::key("fair", "fence", "wf")),
    ] {
        let _: () = env.admin.set(&key, "x", None, None, false).await.unwrap();
        let err = lock(name).try_lock(Duration::ZERO, None).await.unwrap_err();
        assert!(matches!(err, Error::WrongType { .. }), "{name}: {err}");
        let err = lock(name).lock().await.unwrap_err();
        assert!(matches!(err, Error::WrongType { .. }), "{name}: {err}");
        let err = lock(name).force_unlock().await.unwrap_err();
        assert!(matches!(err, Error::WrongType { .. }), "{name}: {err}");
        let v: String = env.admin.get(&key).await.unwrap();
        assert_eq!(v, "x", "{name}: the foreign key was changed");
        let keys: Vec<String> = env
            .admin
            .custom(
                CustomCommand::new_static("KEYS", ClusterHash::FirstKey, false),
                vec![format!("*{{{name}}}*")],
            )
            .await
            .unwrap();
        assert_eq!(keys, vec![key.clone()], "{name}: something was written");
    }
    assert!(matches!(
        lock("wh").is_locked().await,
        Err(Error::WrongType { .. })
    ));
    let err = lock("").lock().await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    let err = lock("x").lock_with_lease(Duration::ZERO).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    let err = lock("x")
        .with_queue_lease(Duration::from_millis(10))
        .lock()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    let g = lock("x")
        .try_lock(Duration::MAX, None)
        .await
        .unwrap()
        .expect("free");
    assert!(matches!(
        g.extend(Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
    g.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_owner_unlock_writes_and_publishes_nothing() {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    let c = env.client().await;
    let stale = a
        .fair_lock("owner")
        .lock_with_lease(Duration::from_millis(200))
        .await
        .unwrap();
    sleep(Duration::from_millis(300)).await;
    assert!(stale.is_lost());
    // A fixed lease: no watchdog renewal writes while the test counts writes.
    let fresh = b
        .fair_lock("owner")
        .lock_with_lease(Duration::from_mins(1))
        .await
        .unwrap();
    assert!(fresh.fencing_token() > stale.fencing_token());
    let waiter = tokio::spawn({
        let lock = c.fair_lock("owner");
        async move { lock.lock().await.unwrap().unlock().await.unwrap() }
    });
    assert!(
        eventually(Duration::from_secs(10), || async {
            queue_len(&env, "owner").await == 1
        })
        .await
    );

    let sub = common::admin(&env.server.url()).await;
    let mut messages = sub.message_rx();
    common::subscribe(&sub, &common::key("fair", "ch", "owner")).await;
    let before: HashMap<String, String> = env.admin.hgetall(hash_key("owner")).await.unwrap();
    let pttl_before: i64 = env.admin.pttl(hash_key("owner")).await.unwrap();
    let queue_before = queue_places(&env, "owner").await;
    let calls_before = common::command_calls(&env).await;

    assert!(matches!(
        stale.extend(Duration::from_secs(5)).await,
        Err(Error::NotHeld { .. })
    ));
    assert!(matches!(stale.unlock().await, Err(Error::NotHeld { .. })));

    let calls_after = common::command_calls(&env).await;
    // The waiter may still be refreshing its place (it tries once more after
    // subscribing): LSET of its entry and PEXPIRE of the queue are its own,
    // so they are not counted; the lock's TTL and the queue's order are
    // checked instead.
    for write in [
        "del", "hset", "hincrby", "lpop", "lrem", "ltrim", "rpush", "zrem", "spublish", "publish",
    ] {
        assert_eq!(
            calls_before.get(write),
            calls_after.get(write),
            "{write} ran for a non-owner"
        );
    }
    let after: HashMap<String, String> = env.admin.hgetall(hash_key("owner")).await.unwrap();
    assert_eq!(before, after);
    let pttl_after: i64 = env.admin.pttl(hash_key("owner")).await.unwrap();
    assert!(
        (0..=pttl_before).contains(&pttl_after),
        "the lock's TTL went from {pttl_before} to {pttl_after} ms"
    );
    assert_eq!(queue_before, queue_places(&env, "owner").await);
    sleep(Duration::from_millis(100)).await;
    assert!(messages.try_recv().is_err(), "a non-owner unlock published");

    fresh.unlock().await.unwrap();
    timeout(Duration::from_secs(2), waiter)
        .await
        .unwrap()
        .unwrap();
    // The test's own subscriber may hear the hand-off after the waiter has
    // the lock: wait for the message, do not only look.
    let msg = timeout(Duration::from_secs(2), messages.recv())
        .await
        .expect("the release told the next owner")
        .unwrap();
    let payload: String = msg.value.convert().unwrap();
    assert!(
        payload.starts_with("g:") && payload.contains(&format!(":{}:", c.id())),
        "handed to {payload}"
    );
}

/// Cancels `fut` after `after` (a zero or tiny duration cancels at the first
/// await points).
async fn cancel_after<F: Future>(after: Duration, fut: F) -> Option<F::Output> {
    timeout(after, fut).await.ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_at_any_point_leaves_no_lock_and_no_queue_entry() {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    // A holder that keeps the lock busy now and then.
    let busy = tokio::spawn({
        let lock = a.fair_lock("cancel");
        async move {
            let end = Instant::now() + Duration::from_millis(1500);
            while Instant::now() < end {
                let g = lock.lock().await.unwrap();
                sleep(Duration::from_millis(3)).await;
                g.unlock().await.unwrap();
                sleep(Duration::from_millis(2)).await;
            }
        }
    });
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut tasks = Vec::new();
    for i in 0..200u64 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let client = if i % 2 == 0 { &a } else { &b };
        let lock = client.fair_lock("cancel");
        let after = Duration::from_micros(seed % 4000);
        let hold = i % 3 == 0;
        tasks.push(tokio::spawn(async move {
            if let Some(Ok(g)) = cancel_after(after, lock.lock()).await {
                if hold {
                    // Dropped mid-hold, or released with its unlock cancelled.
                    let _ = cancel_after(Duration::from_micros(seed % 700), g.unlock()).await;
                }
            }
        }));
        if i % 10 == 0 {
            sleep(Duration::from_millis(5)).await;
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    busy.await.unwrap();
    let lock = b.fair_lock("cancel");
    assert!(
        eventually(Duration::from_secs(2), || async {
            queue_len(&env, "cancel").await == 0
                && env
                    .admin
                    .exists::<i64, _>(hash_key("cancel"))
                    .await
                    .unwrap()
                    == 0
        })
        .await,
        "left behind: queue {:?}, lock {:?}",
        queue_len(&env, "cancel").await,
        env.admin
            .hgetall::<HashMap<String, String>, _>(hash_key("cancel"))
            .await
            .unwrap()
    );
    let g = lock
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .expect("free after the cancellations");
    g.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wakeups_are_addressed_constant_commands_per_acquisition() {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    let holder = a.fair_lock("herd").lock().await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..10usize {
        let lock = [&a, &b][i % 2].fair_lock("herd");
        tasks.push(tokio::spawn(async move {
            let g = lock.lock().await.unwrap();
            sleep(Duration::from_millis(5)).await;
            g.unlock().await.unwrap();
        }));
        sleep(Duration::from_millis(5)).await;
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            queue_len(&env, "herd").await == 10
        })
        .await
    );
    // One subscription per client, however many of its tasks wait.
    let count = common::subscribers(&env.admin, &common::key("fair", "ch", "herd")).await;
    assert_eq!(count, 2, "subscriptions: {count}");
    let before = common::command_calls(&env).await;
    holder.unlock().await.unwrap();
    for t in tasks {
        timeout(Duration::from_secs(3), t).await.unwrap().unwrap();
    }
    let after = common::command_calls(&env).await;
    let delta = |c: &str| after.get(c).copied().unwrap_or(0) - before.get(c).copied().unwrap_or(0);
    // 11 releases and 10 acquisitions: one script each, plus at most a few
    // spurious attempts (a herd would be ~10 per hand-off).
    let scripts = delta("evalsha") + delta("eval");
    assert!(scripts <= 25, "{scripts} script calls for 10 hand-offs");
    let total: u64 = after.values().sum::<u64>() - before.values().sum::<u64>();
    assert!(total <= 10 * 40, "{total} commands for 10 hand-offs");
}

#[test]
fn bounds() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>(_: &T) {}
    send_sync::<redisync::FairLock>();
    send_sync::<redisync::FairLockGuard>();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let env = Env::start().await;
        let client: Client = env.client().await;
        let lock: FairLock = client.fair_lock("bounds");
        send(&lock.lock());
        send(&lock.try_lock(Duration::ZERO, None));
    });
}

/// (c) A fair lock that is free but queued behind a crashed head (a long
/// queue lease): `force_unlock` removes that head and tells the next
/// waiter, which gets in at once. It used to remove nothing (`false`) and
/// leave the live waiter stuck until the dead head's queue lease ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_frees_waiters_stuck_behind_a_crashed_head() {
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    let dead_for = Duration::from_mins(1);
    write_ghost(&env, "stuck", "dead-client:1", dead_for).await;
    let waiter = tokio::spawn({
        let lock = b.fair_lock("stuck");
        async move { lock.lock().await.unwrap().unlock().await.unwrap() }
    });
    queued(&env, "stuck", 2).await;
    assert!(
        a.fair_lock("stuck").force_unlock().await.unwrap(),
        "the crashed head was removed"
    );
    // Woken by the force-unlock's message, far below the 60 s lease.
    timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter got in after the force-unlock")
        .unwrap();
    assert_eq!(queue_len(&env, "stuck").await, 0);
}

// The adversarial review of the hand-off design (each test failed on the
// code it reviewed, or pins a bound the review asked about).

async fn queue(env: &Env, name: &str) -> Vec<String> {
    env.admin.lrange(queue_key(name), 0, -1).await.unwrap()
}

/// Waits until an entry of `client` is in the queue of `name`.
async fn queued_from(env: &Env, name: &str, client: &redisync::Client) {
    let id = client.id().to_string();
    let ok = eventually(Duration::from_secs(10), || async {
        queue(env, name).await.iter().any(|e| e.contains(&id))
    })
    .await;
    assert!(
        ok,
        "{name}: no entry of {id} in {:?}",
        queue(env, name).await
    );
}

/// A raw queue entry (what a crashed waiter leaves), deadline `left_ms`
/// from now (negative: passed already).
async fn write_ghost_ms(env: &Env, name: &str, ghost: &str, left_ms: i64) {
    let deadline = server_ms(env).await + left_ms;
    let entry = format!("@{deadline} 30000 1 0 {ghost}");
    let _: () = env.admin.rpush(queue_key(name), entry).await.unwrap();
}

/// What a crashed holder leaves: its hold, with `lease` left.
async fn write_crashed_holder(env: &Env, name: &str, lease: Duration) {
    let token = common::server_us(&env.admin).await.to_string();
    let _: () = env
        .admin
        .hset(
            hash_key(name),
            vec![("dead-client:9", "1".to_owned()), ("~t", token)],
        )
        .await
        .unwrap();
    let _: () = env
        .admin
        .pexpire(
            hash_key(name),
            i64::try_from(lease.as_millis()).unwrap(),
            None,
        )
        .await
        .unwrap();
}

/// FIFO across handles with different queue leases (each waiter uses its
/// handle's, as documented): a waiter with a short queue lease and short
/// lease must not make the queue key expire under an earlier live waiter
/// with a long queue lease, letting a later arrival go first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_queue_lease_waiter_does_not_expire_an_earlier_waiters_place() {
    let env = Env::start().await;
    let (holding, a, b, c) = (
        env.client().await,
        env.client().await,
        env.client().await,
        env.client().await,
    );
    let name = "ttl";
    let holder = holding.fair_lock(name).lock().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    // A: the first waiter, a long queue lease (heartbeat every 20 s).
    let first = tokio::spawn({
        let lock = a.fair_lock(name).with_queue_lease(Duration::from_mins(1));
        let order = order.clone();
        async move {
            let g = lock.lock().await.unwrap();
            order.lock().unwrap().push("A");
            g.unlock().await.unwrap();
        }
    });
    queued(&env, name, 1).await;
    // B: a short queue lease and a short lease; gives up after 100 ms.
    let none = b
        .fair_lock(name)
        .with_queue_lease(Duration::from_millis(30))
        .try_lock(Duration::from_millis(100), Some(Duration::from_millis(30)))
        .await
        .unwrap();
    assert!(none.is_none());
    // Give the queue's TTL a chance to run out (it must not).
    let _ = eventually(Duration::from_millis(500), || async {
        env.admin.exists::<i64, _>(queue_key(name)).await.unwrap() == 0
    })
    .await;
    let after_b: Vec<String> = queue(&env, name).await;
    // C arrives after A.
    let later = tokio::spawn({
        let lock = c.fair_lock(name);
        let order = order.clone();
        async move {
            let g = lock.lock().await.unwrap();
            order.lock().unwrap().push("C");
            g.unlock().await.unwrap();
        }
    });
    queued_from(&env, name, &c).await;
    holder.unlock().await.unwrap();
    timeout(Duration::from_secs(20), first)
        .await
        .unwrap()
        .unwrap();
    timeout(Duration::from_secs(20), later)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        *order.lock().unwrap(),
        vec!["A", "C"],
        "C overtook the earlier live waiter A (queue after B left: {after_b:?})"
    );
}

/// How long a waiter that became the head without being told (the waiter
/// ahead of it left, or was handed the lock) takes to find a crashed
/// holder's lock free: its next heartbeat (queue lease / 3) after the lease
/// ends. (With a 60 s queue lease it was 7.5 s, a quarter of the default
/// 30 s lease: the head is told only by a hand-off, as before the hand-off
/// design, when a grant of its own made the next waiter the head silently.)
const HEARTBEAT: Duration = Duration::from_secs(1);

/// A crashed holder's lock goes to the head within a heartbeat after its
/// lease ends. Here the head became the head because the waiter ahead of
/// it gave up (its `try_lock` ran out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_new_head_after_a_leave_takes_a_crashed_holders_lock_within_a_heartbeat() {
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    let name = "newhead";
    let started = Instant::now();
    let crash_lease = Duration::from_millis(1500);
    write_crashed_holder(&env, name, crash_lease).await;
    // A queues first and gives up after 300 ms.
    let leaver = tokio::spawn({
        let lock = a.fair_lock(name).with_queue_lease(Duration::from_mins(1));
        async move {
            lock.try_lock(Duration::from_millis(300), None)
                .await
                .unwrap()
                .is_none()
        }
    });
    queued(&env, name, 1).await;
    let next = spawn_taker(b.fair_lock(name).with_queue_lease(HEARTBEAT * 3));
    queued(&env, name, 2).await;
    assert!(timeout(Duration::from_secs(10), leaver)
        .await
        .unwrap()
        .unwrap());
    let got_at = timeout(Duration::from_secs(30), next)
        .await
        .unwrap()
        .unwrap()
        - started;
    assert!(
        got_at < crash_lease + HEARTBEAT + Duration::from_secs(3),
        "the head got the crashed holder's lock {got_at:?} after the start (its lease was {crash_lease:?})"
    );
}

/// A crashed waiter whose queue deadline passes first delays the others at
/// most its queue lease: here a dead entry sits ahead of the only live
/// waiter while a crashed holder's lease runs; the live waiter finds itself
/// the head at its next heartbeat and gets the lock when that lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_entry_ahead_does_not_delay_the_live_head_past_a_crashed_holders_lease() {
    let env = Env::start().await;
    let b = env.client().await;
    let name = "deadahead";
    let started = Instant::now();
    let crash_lease = Duration::from_millis(1500);
    write_crashed_holder(&env, name, crash_lease).await;
    // A crashed waiter whose queue deadline passes 200 ms from now.
    write_ghost_ms(&env, name, "dead-client:1", 200).await;
    let next = spawn_taker(b.fair_lock(name).with_queue_lease(HEARTBEAT * 3));
    queued(&env, name, 2).await;
    let got_at = timeout(Duration::from_secs(30), next)
        .await
        .unwrap()
        .unwrap()
        - started;
    assert!(
        got_at < crash_lease + Duration::from_secs(2),
        "the live waiter got the lock {got_at:?} after the start (holder lease {crash_lease:?}, dead entry's deadline 200 ms)"
    );
}

/// A waiter whose client shuts down leaves the queue: the holder's release
/// goes to the next live waiter at once, and nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_client_that_shuts_down_leaves_and_the_next_waiter_gets_in() {
    let env = Env::start().await;
    let (h, w, x) = (env.client().await, env.client().await, env.client().await);
    let name = "wbye";
    let holder = h.fair_lock(name).lock().await.unwrap();
    let far = Duration::from_mins(1);
    let leaving = tokio::spawn({
        let lock = w.fair_lock(name).with_queue_lease(far);
        async move { lock.lock().await.map(drop) }
    });
    queued(&env, name, 1).await;
    let next = spawn_taker(x.fair_lock(name).with_queue_lease(far));
    queued(&env, name, 2).await;
    w.shutdown().await.unwrap();
    let r = timeout(Duration::from_secs(5), leaving)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(r, Err(redisync::Error::Shutdown)), "{r:?}");
    assert_eq!(
        queue_len(&env, name).await,
        1,
        "{:?}",
        queue(&env, name).await
    );
    let released = Instant::now();
    holder.unlock().await.unwrap();
    let got = timeout(Duration::from_secs(20), next)
        .await
        .unwrap()
        .unwrap();
    assert!(
        got - released < Duration::from_secs(3),
        "{:?}",
        got - released
    );
    assert_eq!(queue_len(&env, name).await, 0);
    assert_eq!(env.admin.exists::<i64, _>(hash_key(name)).await.unwrap(), 0);
}

/// `inspect()` reports the holder, the queue in order with each waiter's
/// queue deadline, and a dead entry as expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reports_holder_and_queue_with_deadlines() {
    let env = Env::start().await;
    let (h, w) = (env.client().await, env.client().await);
    let name = "insp";
    let holder = h.fair_lock(name).lock().await.unwrap();
    write_ghost_ms(&env, name, "dead-client:1", -1000).await;
    let ql = Duration::from_secs(9);
    let waiter = tokio::spawn({
        let lock = w.fair_lock(name).with_queue_lease(ql);
        async move { lock.lock().await.unwrap().unlock().await.unwrap() }
    });
    queued(&env, name, 2).await;
    let i = h.fair_lock(name).inspect().await.unwrap();
    assert!(i.is_held());
    let waiters: Vec<_> = i
        .waiters
        .iter()
        .map(|x| (x.owner.clone(), x.expires_in))
        .collect();
    assert_eq!(waiters.len(), 2, "{waiters:?}");
    assert_eq!(waiters[0].0, "dead-client:1");
    assert_eq!(waiters[0].1, Duration::ZERO);
    assert!(waiters[1].0.starts_with(&w.id().to_string()), "{waiters:?}");
    assert!(
        waiters[1].1 > Duration::from_secs(5) && waiters[1].1 <= ql,
        "{waiters:?}"
    );
    assert!(w.fair_lock(name).is_locked().await.unwrap());
    assert_eq!(w.fair_lock(name).hold_count().await.unwrap(), 0);
    holder.unlock().await.unwrap();
    timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(queue_len(&env, name).await, 0);
}

/// Many tasks on three clients, reentrant and non-reentrant handles, short
/// `try_lock` waits, cancellations, dropped guards and zero waits: never two
/// live holders, tokens strictly increasing in grant order, nothing left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stress_exclusion_tokens_and_no_leaks() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let env = Env::start().await;
    let clients = [env.client().await, env.client().await, env.client().await];
    let name = "stress";
    let inside = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::<u64>::new()));
    let violations = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut tasks = Vec::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for i in 0..24usize {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut lock = clients[i % 3]
            .fair_lock(name)
            .with_queue_lease(Duration::from_millis(300 + (seed % 600)));
        if i % 4 == 1 {
            lock = lock.non_reentrant();
        }
        let (inside, tokens, violations) = (inside.clone(), tokens.clone(), violations.clone());
        let mut s = seed;
        tasks.push(tokio::spawn(async move {
            for round in 0..8u64 {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let got = match s % 5 {
                    0 => lock.try_lock(Duration::ZERO, None).await.unwrap(),
                    1 => lock
                        .try_lock(Duration::from_millis(s % 40), None)
                        .await
                        .unwrap(),
                    2 => timeout(Duration::from_micros(s % 30_000), lock.lock())
                        .await
                        .ok()
                        .map(Result::unwrap),
                    _ => Some(lock.lock().await.unwrap()),
                };
                let Some(g) = got else { continue };
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    violations
                        .lock()
                        .unwrap()
                        .push(format!("two holders (token {})", g.fencing_token()));
                }
                {
                    let mut t = tokens.lock().unwrap();
                    if let Some(last) = t.last() {
                        if *last >= g.fencing_token() {
                            violations
                                .lock()
                                .unwrap()
                                .push(format!("token {} after {last}", g.fencing_token()));
                        }
                    }
                    t.push(g.fencing_token());
                }
                tokio::time::sleep(Duration::from_millis(s % 4)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                if round % 3 == 0 {
                    drop(g);
                } else {
                    g.unlock().await.unwrap();
                }
            }
        }));
    }
    for t in tasks {
        timeout(Duration::from_mins(2), t).await.unwrap().unwrap();
    }
    assert!(
        violations.lock().unwrap().is_empty(),
        "{:?}",
        violations.lock().unwrap()
    );
    assert!(
        tokens.lock().unwrap().len() > 40,
        "{}",
        tokens.lock().unwrap().len()
    );
    let clean = eventually(Duration::from_secs(3), || async {
        queue_len(&env, name).await == 0
            && env.admin.exists::<i64, _>(hash_key(name)).await.unwrap() == 0
    })
    .await;
    assert!(
        clean,
        "left: queue {:?}, hold {:?}",
        queue(&env, name).await,
        env.admin
            .hgetall::<HashMap<String, String>, _>(hash_key(name))
            .await
            .unwrap()
    );
}

/// The most common crash: a waiter is handed the lock and its process dies
/// holding it (a fixed lease nobody releases). The next waiter, the head
/// since the hand-off, gets the lock within a heartbeat after that lease
/// ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiter_behind_a_handed_holder_that_crashed_gets_in_within_a_heartbeat() {
    let env = Env::start().await;
    let (h, a, b) = (env.client().await, env.client().await, env.client().await);
    let name = "handcrash";
    let holder = h.fair_lock(name).lock().await.unwrap();
    let crash_lease = Duration::from_millis(1500);
    let crasher = tokio::spawn({
        let lock = a.fair_lock(name).with_queue_lease(Duration::from_mins(1));
        async move {
            let g = lock.lock_with_lease(crash_lease).await.unwrap();
            let at = Instant::now();
            // Crashes holding it: never released.
            std::mem::forget(g);
            at
        }
    });
    queued(&env, name, 1).await;
    let next = spawn_taker(b.fair_lock(name).with_queue_lease(HEARTBEAT * 3));
    queued(&env, name, 2).await;
    holder.unlock().await.unwrap();
    let handed_at = timeout(Duration::from_secs(10), crasher)
        .await
        .unwrap()
        .unwrap();
    let got_at = timeout(Duration::from_secs(30), next)
        .await
        .unwrap()
        .unwrap();
    let delay = got_at - handed_at;
    assert!(
        delay < crash_lease + HEARTBEAT + Duration::from_secs(3),
        "the next waiter got the lock {delay:?} after the crashed holder was handed it (lease {crash_lease:?})"
    );
}

/// A garbage entry at the head of the queue is skipped by the release, and
/// a force-unlock hands the lock to the next waiter with a higher token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_entries_and_force_unlock_hand_on_with_higher_tokens() {
    let env = Env::start().await;
    let (holding, w, x) = (env.client().await, env.client().await, env.client().await);
    let name = "garbage";
    let far = Duration::from_mins(1);
    let holder = holding.fair_lock(name).lock().await.unwrap();
    let first = holder.fencing_token();
    let _: () = env
        .admin
        .rpush(queue_key(name), "not an entry")
        .await
        .unwrap();
    let w_task = tokio::spawn({
        let lock = w.fair_lock(name).with_queue_lease(far);
        async move { lock.lock().await.unwrap() }
    });
    queued(&env, name, 2).await;
    let x_task = tokio::spawn({
        let lock = x.fair_lock(name).with_queue_lease(far);
        async move {
            let g = lock.lock().await.unwrap();
            let t = g.fencing_token();
            g.unlock().await.unwrap();
            t
        }
    });
    queued(&env, name, 3).await;
    holder.unlock().await.unwrap();
    let gw = timeout(Duration::from_secs(3), w_task)
        .await
        .unwrap()
        .unwrap();
    assert!(gw.fencing_token() > first);
    assert!(holding.fair_lock(name).force_unlock().await.unwrap());
    let tx = timeout(Duration::from_secs(3), x_task)
        .await
        .unwrap()
        .unwrap();
    assert!(tx > gw.fencing_token(), "{tx} after {}", gw.fencing_token());
    // Another client's guard learns of it at its next renewal; its
    // release is refused.
    let late = gw.unlock().await;
    assert!(
        matches!(late, Err(redisync::Error::NotHeld { .. })),
        "{late:?}"
    );
    assert_eq!(queue_len(&env, name).await, 0);
}

/// A waiter that leaves while the lock's hash holds something else (it
/// was just told `WrongType`) still takes its queue entry with it: no
/// acquisition of its can live in a key of another type, so there is
/// nothing else to undo. (The refused leave left the entry until its queue
/// deadline, delaying the next comer by up to a queue lease.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leave_over_a_wrong_type_hash_still_removes_its_queue_entry() {
    let env = Env::start().await;
    let name = "wrong-leave";
    write_ghost_ms(&env, name, "gone-client:1", 60_000).await;
    let _: () = env
        .admin
        .set(hash_key(name), "x", None, None, false)
        .await
        .unwrap();
    let left: i64 = env
        .admin
        .eval(
            redisync::__private::script_source("fair_lock_leave.lua").unwrap(),
            vec![
                hash_key(name),
                common::key("fair", "fence", name),
                queue_key(name),
            ],
            vec![
                "gone-client:1".to_owned(),
                String::new(),
                if common::sharded(&env.admin) {
                    "spublish"
                } else {
                    "publish"
                }
                .to_owned(),
                common::key("fair", "ch", name),
                "60000".to_owned(),
            ],
        )
        .await
        .unwrap();
    assert_eq!(left, 0);
    assert_eq!(queue_len(&env, name).await, 0, "the entry stayed");
    let v: String = env.admin.get(hash_key(name)).await.unwrap();
    assert_eq!(v, "x", "the foreign key was changed");
}
