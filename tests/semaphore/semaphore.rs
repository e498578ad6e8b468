//! `Semaphore` against real redis-server processes.

use crate::common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Env;
use fred::prelude::*;
use redisync::Error;

fn sem_key(name: &str) -> String {
    common::key("sem", "hold", name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_holders_than_permits() {
    let env = Env::start().await;
    let inside = Arc::new(AtomicU32::new(0));
    let peak = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    let first = env.client().await;
    assert!(first.semaphore("pool").try_set_permits(3).await.unwrap());
    assert!(
        !first.semaphore("pool").try_set_permits(5).await.unwrap(),
        "set once"
    );
    for _ in 0..3 {
        let client = env.client().await;
        for _ in 0..4 {
            let sem = client.semaphore("pool");
            let (inside, peak) = (inside.clone(), peak.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..8 {
                    let p = sem.acquire(1).await.unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    assert!(now <= 3, "{now} holders of 3 permits");
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    p.release().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        peak.load(Ordering::SeqCst),
        3,
        "the permits were used in parallel"
    );
    assert_eq!(
        first.semaphore("pool").available_permits().await.unwrap(),
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holders_permits_come_back_after_its_lease() {
    let env = Env::start().await;
    let client = env.client().await;
    let sem = client.semaphore("crash");
    sem.try_set_permits(2).await.unwrap();
    // What a crashed holder leaves: 2 permits with 400 ms of lease left.
    // The clock starts first: a slow set-up cannot make the wait look short.
    let started = tokio::time::Instant::now();
    let now_ms = common::server_ms(&env.admin).await;
    let key = sem_key("crash");
    let _: () = env.admin.hincrby(&key, "~used", 2).await.unwrap();
    common::zadd_ms(
        &env.admin,
        &common::key("sem", "leases", "crash"),
        now_ms + 400,
        "00000000-0000-0000-0000-000000000000:1:1#2",
    )
    .await;
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    let p = sem
        .try_acquire(2, Duration::from_secs(5))
        .await
        .unwrap()
        .expect("reclaimed");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert!(waited < Duration::from_millis(2500), "{waited:?}");
    p.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_wakes_as_many_waiters_as_permits_freed() {
    let env = Env::start().await;
    let holder = env.client().await;
    let waiters = env.client().await;
    let sem = holder.semaphore("wake");
    sem.try_set_permits(3).await.unwrap();
    let held = sem.acquire(3).await.unwrap();
    assert_eq!(held.permits(), 3);
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let s = waiters.semaphore("wake");
        tasks.push(tokio::spawn(async move {
            let p = s
                .try_acquire(1, Duration::from_secs(10))
                .await
                .unwrap()
                .expect("woken");
            (tokio::time::Instant::now(), p)
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released_at = tokio::time::Instant::now();
    held.release().await.unwrap();
    let mut permits = Vec::new();
    for t in tasks {
        let (at, p) = t.await.unwrap();
        // (A missed wake-up would wait out the 10 s.)
        assert!(
            at - released_at < Duration::from_secs(2),
            "late wakeup {:?}",
            at - released_at
        );
        permits.push(p);
    }
    let tokens: std::collections::HashSet<u64> = permits
        .iter()
        .map(redisync::SemaphorePermit::fencing_token)
        .collect();
    assert_eq!(tokens.len(), 3);
    for p in permits {
        p.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_keeps_permits_and_drop_returns_them() {
    let env = Env::start().await;
    // A lease a stalled test process does not lose; the sleep spans more
    // than one.
    let client = env.client_with_watchdog(Duration::from_secs(1)).await;
    let sem = client.semaphore("dog");
    sem.try_set_permits(1).await.unwrap();
    let p = sem.acquire(1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!p.is_lost());
    assert_eq!(
        sem.available_permits().await.unwrap(),
        0,
        "renewed, not reclaimed"
    );
    drop(p);
    let back = sem
        .try_acquire(1, Duration::from_secs(2))
        .await
        .unwrap()
        .expect("dropped permit came back");
    back.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_wrong_type_flush_and_cancellation() {
    let env = Env::start().await;
    let client = env.client().await;
    let sem = client.semaphore("s");
    assert!(matches!(
        sem.acquire(1).await,
        Err(Error::NotInitialized { .. })
    ));
    assert!(matches!(
        sem.available_permits().await,
        Err(Error::NotInitialized { .. })
    ));
    assert!(matches!(
        sem.try_set_permits(0).await,
        Err(Error::InvalidArgument(_))
    ));
    sem.try_set_permits(2).await.unwrap();
    assert!(matches!(
        sem.acquire(0).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        sem.acquire(3).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        client.semaphore("").try_set_permits(1).await,
        Err(Error::InvalidArgument(_))
    ));

    let _: () = env
        .admin
        .set(sem_key("w"), "x", None, None, false)
        .await
        .unwrap();
    let w = client.semaphore("w");
    assert!(matches!(
        w.try_set_permits(1).await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        w.try_acquire(1, Duration::ZERO).await,
        Err(Error::WrongType { .. })
    ));
    let v: String = env.admin.get(sem_key("w")).await.unwrap();
    assert_eq!(v, "x");

    let _: () = env.admin.script_flush(false).await.unwrap();
    let p = sem.acquire(2).await.unwrap();
    let _: () = env.admin.script_flush(false).await.unwrap();
    p.release().await.unwrap();

    // Cancelled at any point: no permit leaks.
    for k in 0..100u64 {
        let s = sem.clone();
        let _ = tokio::spawn(async move {
            tokio::time::timeout(Duration::from_micros(k * 37 % 900), s.acquire(2)).await
        })
        .await
        .unwrap();
    }
    // Undone in the background; a leak would hold its permits for the 30 s
    // lease.
    let back = common::eventually(Duration::from_secs(5), || async {
        sem.available_permits().await.unwrap() == 2
    })
    .await;
    assert!(back, "a cancelled acquire leaked permits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_gives_permits_and_read_holds_back() {
    let env = Env::start().await;
    let leaving = env.client().await;
    let staying = env.client().await;
    staying.semaphore("bye").try_set_permits(2).await.unwrap();
    let permit = leaving.semaphore("bye").acquire(2).await.unwrap();
    let read = leaving.rw_lock("bye").read().lock().await.unwrap();
    leaving.shutdown().await.unwrap();
    assert!(permit.is_lost() && read.is_lost());
    let w = staying.rw_lock("bye").write();
    let got = tokio::spawn(async move { w.try_lock(Duration::ZERO, None).await.unwrap() });
    got.await
        .unwrap()
        .expect("read hold released at shutdown")
        .unlock()
        .await
        .unwrap();
    assert_eq!(
        staying.semaphore("bye").available_permits().await.unwrap(),
        2
    );
    drop((permit, read));
}

/// Waits until a client subscribed to semaphore `name`'s channel: some
/// waiter found it busy and parks.
async fn someone_waits_on(env: &Env, name: &str) {
    let channel = common::key("sem", "ch", name);
    let subscribed = common::eventually(Duration::from_secs(5), || async {
        common::our_shard_channels(env).await.contains(&channel)
    })
    .await;
    assert!(subscribed, "no waiter subscribed to {channel}");
}

/// A field of semaphore `name`'s hash, as Redis has it.
async fn sem_field(env: &Env, name: &str, field: &str) -> Option<String> {
    env.admin.hget(sem_key(name), field).await.unwrap()
}

/// Raising the total wakes a waiter of another client (by the message, not
/// its periodic look: its lease is long, so that look is far beyond the
/// bound, which is generous for a loaded machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_permits_raises_the_total_and_wakes_a_waiter() {
    let env = Env::start().await;
    let holder = env.client().await;
    // Queued waiters look again every quarter lease: 5 min here.
    let waiter = env.client_with_watchdog(Duration::from_mins(20)).await;
    let sem = holder.semaphore("raise");
    sem.set_permits(2).await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 2, "set when unset");
    let held = sem.acquire(1).await.unwrap();
    let w = waiter.semaphore("raise");
    let task = tokio::spawn(async move { w.acquire(2).await });
    someone_waits_on(&env, "raise").await;
    assert!(!task.is_finished(), "1 free, 2 asked");
    sem.set_permits(3).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("woken by the raise, without any release")
        .unwrap()
        .unwrap();
    assert_eq!(got.permits(), 2);
    assert!(!held.is_lost());
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    assert_eq!(
        sem_field(&env, "raise", "~permits").await.as_deref(),
        Some("3")
    );
    got.release().await.unwrap();
    held.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 3);
    assert!(matches!(
        sem.set_permits(0).await,
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(
        sem_field(&env, "raise", "~permits").await.as_deref(),
        Some("3")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_permits_below_use_keeps_holders_and_new_acquisitions_wait() {
    let env = Env::start().await;
    let holder = env.client().await;
    let waiter = env.client().await;
    let sem = holder.semaphore("lower");
    sem.try_set_permits(3).await.unwrap();
    let two = sem.acquire(2).await.unwrap();
    let one = sem.acquire(1).await.unwrap();
    sem.set_permits(1).await.unwrap();
    assert_eq!(
        sem.available_permits().await.unwrap(),
        0,
        "3 in use of 1: none free, no underflow"
    );
    assert!(!two.is_lost() && !one.is_lost());
    assert_eq!(
        sem_field(&env, "lower", "~used").await.as_deref(),
        Some("3")
    );
    let w = waiter.semaphore("lower");
    let task = tokio::spawn(async move { w.acquire(1).await });
    someone_waits_on(&env, "lower").await;
    two.release().await.unwrap();
    // 1 in use of 1: a new acquisition still waits.
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    assert!(sem.try_acquire(1, Duration::ZERO).await.unwrap().is_none());
    assert!(!task.is_finished(), "granted while 1 of 1 was in use");
    one.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("woken by the release that made room")
        .unwrap()
        .unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    got.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_permits_adds_wakes_removes_and_refuses_bad_deltas() {
    let env = Env::start().await;
    let holder = env.client().await;
    let waiter = env.client().await;
    let sem = holder.semaphore("add");
    assert!(matches!(
        sem.add_permits(1).await,
        Err(Error::NotInitialized { .. })
    ));
    let exists: i64 = env.admin.exists(sem_key("add")).await.unwrap();
    assert_eq!(exists, 0, "nothing written to an unset semaphore");

    sem.try_set_permits(2).await.unwrap();
    let held = sem.acquire(1).await.unwrap();
    let w = waiter.semaphore("add");
    let task = tokio::spawn(async move { w.acquire(2).await });
    someone_waits_on(&env, "add").await;
    assert_eq!(sem.add_permits(2).await.unwrap(), 4);
    let got = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("woken by add_permits")
        .unwrap()
        .unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    assert_eq!(sem.add_permits(-1).await.unwrap(), 3);
    assert_eq!(sem.available_permits().await.unwrap(), 0);

    for bad in [0, -3, -4, i64::MIN, i64::from(u32::MAX), i64::MAX] {
        assert!(
            matches!(sem.add_permits(bad).await, Err(Error::InvalidArgument(_))),
            "add_permits({bad})"
        );
    }
    assert_eq!(
        sem_field(&env, "add", "~permits").await.as_deref(),
        Some("3")
    );
    assert_eq!(
        sem.add_permits(i64::from(u32::MAX) - 3).await.unwrap(),
        u32::MAX
    );
    assert_eq!(sem.add_permits(3 - i64::from(u32::MAX)).await.unwrap(), 3);
    got.release().await.unwrap();
    held.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_permit_of_a_crashed_holder_comes_back_after_its_lease() {
    let env = Env::start().await;
    let crashing = env.client().await;
    let other = env.client().await;
    let sem = crashing.semaphore("leased");
    sem.try_set_permits(2).await.unwrap();
    let lease = Duration::from_millis(300);
    for bad in [Duration::ZERO, Duration::from_secs(u64::MAX / 2)] {
        assert!(matches!(
            sem.try_acquire_with_lease(1, Duration::ZERO, bad).await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            sem.acquire_with_lease(1, bad).await,
            Err(Error::InvalidArgument(_))
        ));
    }
    assert_eq!(sem.available_permits().await.unwrap(), 2, "nothing taken");

    let asked_at = tokio::time::Instant::now();
    let permit = sem
        .try_acquire_with_lease(2, Duration::from_secs(5), lease)
        .await
        .unwrap()
        .expect("free");
    let validity = permit.validity();
    assert!(
        validity <= lease && validity > Duration::ZERO,
        "{validity:?}"
    );
    // The holder crashes: no release, no renewal.
    std::mem::forget(permit);

    let back = tokio::time::timeout(
        Duration::from_secs(5),
        other.semaphore("leased").acquire_with_lease(2, lease),
    )
    .await
    .expect("the crashed holder's permits came back")
    .unwrap();
    let waited = asked_at.elapsed();
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
    assert!(back.validity() <= lease);
    back.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_and_add_permits_on_a_wrong_type_key_write_nothing() {
    let env = Env::start().await;
    let client = env.client().await;
    let _: () = env
        .admin
        .set(sem_key("w"), "x", None, None, false)
        .await
        .unwrap();
    let w = client.semaphore("w");
    assert!(matches!(
        w.set_permits(2).await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        w.add_permits(1).await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        w.add_permits(-1).await,
        Err(Error::WrongType { .. })
    ));
    let v: String = env.admin.get(sem_key("w")).await.unwrap();
    assert_eq!(v, "x");
    let keys: Vec<String> = env
        .admin
        .custom(
            fred::types::CustomCommand::new_static(
                "KEYS",
                fred::types::ClusterHash::FirstKey,
                false,
            ),
            vec!["*"],
        )
        .await
        .unwrap();
    assert_eq!(keys, vec![sem_key("w")], "nothing else written");
}

/// `extend` never cuts a permit's lease (as locks): a 10 s permit extended
/// to 200 ms keeps its 10 s in Redis, and its local validity stays below
/// what Redis has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_never_cuts_a_permit_lease() {
    let env = Env::start().await;
    let client = env.client().await;
    let sem = client.semaphore("no-cut");
    sem.try_set_permits(1).await.unwrap();
    let permit = sem
        .acquire_with_lease(1, Duration::from_secs(10))
        .await
        .unwrap();
    permit.extend(Duration::from_millis(200)).await.unwrap();
    // The lease end in the zset, minus the server's time: ms left.
    let left: i64 = env
        .admin
        .eval(
            "local t = redis.call('time') \
             local e = redis.call('zrange', KEYS[1], 0, 0, 'WITHSCORES') \
             return tonumber(e[2]) - (t[1] * 1000 + math.floor(t[2] / 1000))",
            vec![common::key("sem", "leases", "no-cut")],
            Vec::<String>::new(),
        )
        .await
        .unwrap();
    assert!(left > 8_000, "the lease was cut to {left} ms");
    assert!(permit.validity() > Duration::from_secs(8));
    permit.release().await.unwrap();
    client.shutdown().await.unwrap();
}

/// A grant that takes the last permit lets its client's next waiter wait
/// without asking Redis. A release by another client must still wake that
/// waiter: the grant marks its client in Redis, so the release publishes.
/// The leases are far longer than the wait allowed, so only the message
/// can wake it in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_behind_the_last_permit_wakes_when_another_client_releases() {
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    let lease = Duration::from_mins(2);
    a.semaphore("last").try_set_permits(2).await.unwrap();
    let take = |client: &redisync::Client| {
        let sem = client.semaphore("last");
        async move { sem.acquire_with_lease(1, lease).await.unwrap() }
    };
    let first_a = take(&a).await;
    assert_eq!(
        sem_field(&env, "last", "~w").await,
        None,
        "a permit is left"
    );
    let held_b = take(&b).await;
    assert_eq!(
        sem_field(&env, "last", "~w").await,
        Some(b.id().to_string()),
        "the grant of the last permit marks its client"
    );
    // A waiter of `a` queues in Redis; `a`'s release hands it the last
    // permit, which marks `a` too.
    let sem = a.semaphore("last");
    let second = tokio::spawn(async move { sem.acquire_with_lease(1, lease).await.unwrap() });
    someone_waits_on(&env, "last").await;
    first_a.release().await.unwrap();
    let second_a = tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .expect("handed the permit by the local release")
        .unwrap();
    assert_eq!(
        sem_field(&env, "last", "~w").await,
        Some("*".to_string()),
        "the hand-off of the last permit marks a, and b stays marked"
    );
    // The next waiter of `a` parks at its first poll, before `b` releases.
    let sem = a.semaphore("last");
    let mut third = Box::pin(sem.acquire_with_lease(1, lease));
    assert!(futures::poll!(third.as_mut()).is_pending());
    held_b.release().await.unwrap();
    let third_a = tokio::time::timeout(Duration::from_secs(10), third)
        .await
        .expect("woken by b's release message, not by a lease end")
        .unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    drop((second_a, third_a));
}

/// Local waiters of one client cost no command while no permit is free: an
/// acquisition is one acquire and one release script, eleven commands in
/// all (two EVALSHA; inside, the acquire script runs 6, the PEXPIRE of the
/// lease zset among them, the release 3), however many tasks wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_cost_eleven_commands_per_acquisition() {
    let env = Env::start().await;
    let a = env.client().await;
    a.semaphore("count").try_set_permits(1).await.unwrap();
    let (tasks, rounds) = (8u64, 10u64);
    let before = common::command_calls(&env).await;
    let mut all = Vec::new();
    for _ in 0..tasks {
        let sem = a.semaphore("count");
        all.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let p = sem
                    .acquire_with_lease(1, Duration::from_mins(1))
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
                p.release().await.unwrap();
            }
        }));
    }
    for t in all {
        tokio::time::timeout(Duration::from_mins(1), t)
            .await
            .expect("all rounds done")
            .unwrap();
    }
    let after = common::command_calls(&env).await;
    let calls: u64 = after
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "info" | "hello" | "client" | "ping"))
        .map(|(name, n)| n - before.get(name).copied().unwrap_or(0))
        .sum();
    // One-offs, however many acquisitions: the subscription (with its
    // contention mark and message) and the first contender's busy attempts
    // around it (4 commands each: 1-2 seen when idle, 807-811 in all; 824
    // seen in CI on a loaded machine, so room for 10). One more command per
    // acquisition would cost 80.
    let one_offs = 40;
    assert!(
        calls <= 11 * tasks * rounds + one_offs,
        "{calls} commands for {} acquisitions: {after:?}",
        tasks * rounds
    );
}

/// A handle that declares its size (`with_permits`) needs no set-up, and a
/// semaphore lost when Redis restarted empty comes back with the same total
/// at the next acquisition. A handle without a declared size still gets
/// `NotInitialized` after such a restart (what a worker that never sets
/// permits met before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_total_sets_the_semaphore_up_again_after_an_empty_restart() {
    let mut env = Env::start().await;
    let client = env.client().await;
    let plain = client.semaphore("payments");
    let declared = plain.with_permits(2);
    let first = declared
        .acquire(1)
        .await
        .expect("set up by the acquisition");
    assert_eq!(plain.available_permits().await.unwrap(), 1);
    let second = declared.acquire(1).await.unwrap();
    assert!(declared
        .try_acquire(1, Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    drop((first, second));
    env.server.remove_snapshot().expect("no snapshot");
    env.server.restart().await;
    assert!(
        matches!(
            plain.try_acquire(1, Duration::ZERO).await,
            Err(Error::NotInitialized { .. })
        ),
        "a handle without a declared total cannot set it up"
    );
    // (The client reconnects to the restarted server first.)
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let again = loop {
        match declared.try_acquire(1, Duration::ZERO).await {
            Ok(Some(permit)) => break permit,
            Err(e) if e.is_retryable() && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("the declared total did not set it up again: {other:?}"),
        }
    };
    assert_eq!(plain.available_permits().await.unwrap(), 1);
    again.release().await.unwrap();

    // A total set already is kept.
    let three = client.semaphore("sized");
    assert!(three.try_set_permits(3).await.unwrap());
    let held = three
        .with_permits(1)
        .acquire(3)
        .await
        .expect("the stored total counts");
    held.release().await.unwrap();
    assert!(matches!(
        client.semaphore("zero").with_permits(0).acquire(1).await,
        Err(Error::InvalidArgument(_))
    ));
}

/// The watchdog renews every permit of a client in one script call. A
/// semaphore whose lease zset holds another type counts as gone in it (its
/// permit is lost) and is not touched; the permits of the other semaphores
/// in the same call are renewed (a failing script would fail them all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_zset_of_another_type_costs_only_its_own_permit() {
    let env = Env::start().await;
    let client = env.client_with_watchdog(Duration::from_secs(2)).await;
    let leases = |name: &str| common::key("sem", "leases", name);
    let mut good = Vec::new();
    for i in 0..4 {
        let sem = client.semaphore(&format!("good-{i}")).with_permits(1);
        good.push(sem.acquire(1).await.unwrap());
    }
    let bad = client
        .semaphore("bad")
        .with_permits(1)
        .acquire(1)
        .await
        .unwrap();
    let only_end = |admin: fred::clients::Client, name: String| async move {
        let all: Vec<(String, f64)> = admin
            .zrange(name, 0, -1, None, false, None, true)
            .await
            .unwrap();
        all.first().map_or(0.0, |(_, s)| *s)
    };
    let _: i64 = env.admin.del(leases("bad")).await.unwrap();
    let _: () = env
        .admin
        .set(leases("bad"), "not a zset", None, None, false)
        .await
        .unwrap();
    let mut before = Vec::new();
    for i in 0..4 {
        before.push(only_end(env.admin.clone(), leases(&format!("good-{i}"))).await);
    }
    // The renewal that finds the bad one gone renews the others.
    tokio::time::timeout(Duration::from_secs(20), bad.lost())
        .await
        .expect("the permit whose lease zset is of another type is lost");
    for (i, p) in good.iter().enumerate() {
        let after = only_end(env.admin.clone(), leases(&format!("good-{i}"))).await;
        assert!(
            after > before[i],
            "good-{i} not renewed: {} -> {after}",
            before[i]
        );
        assert!(!p.is_lost(), "good-{i} lost");
    }
    let kept: String = env.admin.get(leases("bad")).await.unwrap();
    assert_eq!(kept, "not a zset", "the key of another type was touched");
}

/// A detached permit is addressable from any client: its id (text form)
/// releases it elsewhere, once; the fencing token travels with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_permit_is_released_by_id_from_another_client_once() {
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    let sem_a = a.semaphore("by-id").with_permits(1);
    let permit = sem_a
        .acquire_with_lease(1, Duration::from_mins(2))
        .await
        .unwrap();
    let token = redisync::Guard::fencing_token(&permit);
    let text = permit.detach().to_string();
    let sem_b = b.semaphore("by-id").with_permits(1);
    assert!(
        sem_b
            .try_acquire(1, Duration::ZERO)
            .await
            .unwrap()
            .is_none(),
        "a detached permit stays held"
    );
    let id: redisync::PermitId = text.parse().unwrap();
    assert_eq!(id.fencing_token(), token);
    assert_eq!(id.permits(), 1);
    assert_eq!(id.to_string(), text, "the text form round-trips");
    sem_b.release_permit(&id).await.unwrap();
    assert!(
        matches!(sem_b.release_permit(&id).await, Err(Error::NotHeld { .. })),
        "released once"
    );
    assert!(matches!(
        sem_b.extend_permit(&id, Duration::from_secs(5)).await,
        Err(Error::NotHeld { .. })
    ));
    let next = sem_b.try_acquire(1, Duration::ZERO).await.unwrap();
    assert!(next.is_some(), "the permit came back");
    assert!(
        redisync::Guard::fencing_token(next.as_ref().unwrap()) > token,
        "a newer token"
    );
}

/// A detached permit is held until its lease ends, which `extend_permit`
/// raises from any client; once reclaimed, an extension never brings it
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_permit_lives_by_its_lease_and_extend_permit() {
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    let short = Duration::from_millis(300);
    let sem_a = a.semaphore("by-id-lease").with_permits(1);
    let id = sem_a.acquire_with_lease(1, short).await.unwrap().detach();
    let sem_b = b.semaphore("by-id-lease").with_permits(1);
    sem_b
        .extend_permit(&id, Duration::from_mins(2))
        .await
        .expect("held: extended from another client");
    assert!(
        sem_b.try_acquire(1, short * 3).await.unwrap().is_none(),
        "the extension keeps the permit past its first lease"
    );
    assert!(matches!(
        sem_b.extend_permit(&id, Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
    sem_b.release_permit(&id).await.unwrap();
    // A permit left to its lease: a waiter takes it once the lease ends,
    // and its id is dead for good.
    let lapsed = sem_a.acquire_with_lease(1, short).await.unwrap().detach();
    let taken = sem_b.acquire(1).await.unwrap();
    assert!(matches!(
        sem_b.extend_permit(&lapsed, Duration::from_mins(2)).await,
        Err(Error::NotHeld { .. })
    ));
    assert!(matches!(
        sem_a.release_permit(&lapsed).await,
        Err(Error::NotHeld { .. })
    ));
    assert!(!redisync::Guard::is_lost(&taken));
    taken.release().await.unwrap();
}

/// A release by id from another client wakes the waiters of the client
/// that took the last permit (they wait for a message, not in the queue):
/// they are not left waiting for the lease end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_by_id_elsewhere_wakes_the_detaching_clients_waiter() {
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    let lease = Duration::from_mins(2);
    let sem_a = a.semaphore("by-id-wake").with_permits(1);
    let id = sem_a.acquire_with_lease(1, lease).await.unwrap().detach();
    assert_eq!(
        sem_field(&env, "by-id-wake", "~w").await,
        Some(a.id().to_string()),
        "the grant of the last permit marks its client"
    );
    let mut waiter = Box::pin(sem_a.acquire_with_lease(1, lease));
    assert!(futures::poll!(waiter.as_mut()).is_pending());
    b.semaphore("by-id-wake").release_permit(&id).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("woken by the release, not by the lease end (2 min)")
        .unwrap();
    got.release().await.unwrap();
}

/// Text that is not a permit id is refused with a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_permit_ids_are_refused() {
    for bad in [
        "",
        "12",
        "x/00000000-0000-0000-0000-000000000000:t:1#1",
        "12/not-a-uuid-at-all-not-a-uuid-at-all:t:1#1",
        "12/00000000-0000-0000-0000-000000000000:t:1#0",
        "12/00000000-0000-0000-0000-000000000000:t:1",
        "12/00000000-0000-0000-0000-000000000000:t:1#01",
        "+12/00000000-0000-0000-0000-000000000000:t:1#1",
        "12/0000000A-0000-0000-0000-000000000000:t:1#1",
        "12/000000000000000000000000000000000000:t:1#1",
    ] {
        let parsed = bad.parse::<redisync::PermitId>();
        assert!(
            matches!(parsed, Err(Error::InvalidArgument(_))),
            "{bad:?}: {parsed:?}"
        );
    }
    let ok: redisync::PermitId = "12/00000000-0000-0000-0000-000000000000:t:1#3"
        .parse()
        .unwrap();
    assert_eq!((ok.fencing_token(), ok.permits()), (12, 3));
}

/// An extension by id never brings back a permit whose lease ended, even
/// while no acquisition has reclaimed it yet (it counts as gone, as the
/// reconnection check says).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_permit_after_the_lease_ended_is_not_held() {
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    let sem_a = a.semaphore("lapse").with_permits(2);
    // Keeps the lease zset alive past the short lease.
    let keep = sem_a
        .acquire_with_lease(1, Duration::from_mins(2))
        .await
        .unwrap();
    let id = sem_a
        .acquire_with_lease(1, Duration::from_millis(200))
        .await
        .unwrap()
        .detach();
    let leases = common::key("sem", "leases", "lapse");
    let member = id.to_string().split_once('/').unwrap().1.to_owned();
    let ends: i64 = env
        .admin
        .zscore::<Option<String>, _, _>(&leases, &member)
        .await
        .unwrap()
        .expect("held")
        .parse()
        .expect("a lease end in whole milliseconds");
    // The server's clock passes the lease end (nothing reclaims it: no
    // acquisition runs meanwhile).
    while common::server_ms(&env.admin).await <= ends + 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left: Option<f64> = env.admin.zscore(&leases, &member).await.unwrap();
    assert!(left.is_some(), "not reclaimed yet");
    let sem_b = b.semaphore("lapse").with_permits(2);
    let extended = sem_b.extend_permit(&id, Duration::from_mins(2)).await;
    assert!(
        matches!(extended, Err(Error::NotHeld { .. })),
        "a lapsed permit was extended: {extended:?}"
    );
    assert_eq!(sem_b.available_permits().await.unwrap(), 1);
    keep.release().await.unwrap();
}

/// Through a handle that declares its total, a semaphore not set up (never,
/// or forgotten in a restart) has the declared total free: what its next
/// acquisition finds. A plain handle answers `NotInitialized`; nothing is
/// written either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn available_permits_through_a_declaring_handle_answers_the_declared_total() {
    let env = Env::start().await;
    let client = env.client().await;
    let declared = client.semaphore("declared-free").with_permits(3);
    assert_eq!(declared.available_permits().await.unwrap(), 3);
    assert!(matches!(
        client.semaphore("declared-free").available_permits().await,
        Err(Error::NotInitialized { .. })
    ));
    assert_eq!(sem_field(&env, "declared-free", "~permits").await, None);
    let permit = declared.acquire(1).await.unwrap();
    assert_eq!(declared.available_permits().await.unwrap(), 2);
    permit.release().await.unwrap();
}
