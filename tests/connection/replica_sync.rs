//! Replica sync: WAIT after acquisitions, undo when too few replicas acknowledge.

use crate::common;

use std::time::Duration;

use fred::prelude::*;
use redisync::Error;
use redisync_testkit::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_acquisition_is_undone_and_reported() {
    let primary = RedisServer::start().await;
    let replica = common::replica_of(&primary).await;
    let admin = common::admin(&primary.url()).await;
    // 1 s per acknowledgement: a loaded machine must not fail the healthy
    // phase (a paused replica never acknowledges, whatever the window).
    let client = redisync::Client::builder(&primary.url())
        .replica_sync(1, Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let lock = client.lock("synced");
    // Healthy replica: acquired, and the replica has it.
    let g = lock.lock().await.unwrap();
    let on_replica: i64 = common::admin(&replica.url())
        .await
        .exists(common::lock_key("synced"))
        .await
        .unwrap();
    assert_eq!(on_replica, 1);
    g.unlock().await.unwrap();

    replica.pause();
    let err = lock.try_lock(Duration::ZERO, None).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::ReplicaSync {
                acked: 0,
                required: 1,
                ..
            }
        ),
        "{err}"
    );
    let exists: i64 = admin.exists(common::lock_key("synced")).await.unwrap();
    assert_eq!(
        exists, 0,
        "an acquisition reported as failed was left behind"
    );
    // Re-entry that cannot be synced is undone too, keeping the outer hold.
    replica.resume();
    let outer = lock.lock().await.unwrap();
    replica.pause();
    assert!(matches!(
        lock.try_lock(Duration::ZERO, None).await,
        Err(Error::ReplicaSync { .. })
    ));
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    replica.resume();
    outer.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());

    let bad = redisync::Client::builder(&primary.url())
        .replica_sync(0, Duration::from_millis(100))
        .connect()
        .await;
    assert!(matches!(bad, Err(Error::InvalidArgument(_))));
}

/// A primary with one synced replica and a client that requires its
/// acknowledgement within 1 s (a loaded machine must not fail a healthy
/// phase; a paused replica never acknowledges, whatever the window).
async fn synced_pair(watchdog: Duration) -> (RedisServer, RedisServer, redisync::Client) {
    synced_pair_within(watchdog, Duration::from_secs(1)).await
}

/// As [`synced_pair`], with acknowledgements required within `ack`.
async fn synced_pair_within(
    watchdog: Duration,
    ack: Duration,
) -> (RedisServer, RedisServer, redisync::Client) {
    let primary = RedisServer::start().await;
    let replica = common::replica_of(&primary).await;
    let client = redisync::Client::builder(&primary.url())
        .replica_sync(1, ack)
        .watchdog_timeout(watchdog)
        .connect()
        .await
        .unwrap();
    (primary, replica, client)
}

fn is_replica_sync(r: &redisync::Result<impl std::fmt::Debug>) -> bool {
    matches!(
        r,
        Err(Error::ReplicaSync {
            acked: 0,
            required: 1,
            ..
        })
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_undoes_an_unacknowledged_acquisition() {
    // A generous window: a loaded machine must not fail the healthy phase.
    let (primary, replica, client) =
        synced_pair_within(Duration::from_secs(30), Duration::from_secs(1)).await;
    let admin = common::admin(&primary.url()).await;
    let fair = client.fair_lock("f");
    let rw = client.rw_lock("rw");
    let sem = client.semaphore("s");
    assert!(sem.try_set_permits(2).await.unwrap());

    replica.pause();
    let r = fair.try_lock(Duration::ZERO, None).await;
    assert!(is_replica_sync(&r), "{r:?}");
    assert!(!fair.is_locked().await.unwrap());
    let queued: i64 = admin.llen(common::key("fair", "queue", "f")).await.unwrap();
    assert_eq!(queued, 0, "a reported failure left a queue entry");
    let r = rw.write().try_lock(Duration::ZERO, None).await;
    assert!(is_replica_sync(&r), "{r:?}");
    let r = rw.read().try_lock(Duration::ZERO, None).await;
    assert!(is_replica_sync(&r), "{r:?}");
    assert!(!rw.write().is_locked().await.unwrap());
    let r = sem.try_acquire(1, Duration::ZERO).await;
    assert!(is_replica_sync(&r), "{r:?}");
    assert_eq!(sem.available_permits().await.unwrap(), 2);

    // With the replica back (and caught up: it acknowledges again) every
    // primitive acquires, and releases.
    replica.resume();
    let caught_up = common::replica_caught_up(&admin).await;
    assert!(caught_up, "the resumed replica never acknowledged");
    let g = fair.lock().await.unwrap();
    g.unlock().await.unwrap();
    let g = rw.write().lock().await.unwrap();
    g.unlock().await.unwrap();
    let g = rw.read().lock().await.unwrap();
    g.unlock().await.unwrap();
    let p = sem.acquire(2).await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    p.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 2);
    assert!(!fair.is_locked().await.unwrap() && !rw.write().is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_count_only_when_replicas_acknowledge_them() {
    let lease = Duration::from_millis(1500);
    let (_primary, replica, client) = synced_pair(lease).await;
    let lock = client.lock("renewed");

    // Healthy replica: the watchdog keeps the lock for three leases.
    let g = lock.lock().await.unwrap();
    assert!(
        tokio::time::timeout(lease * 3, g.lost()).await.is_err(),
        "lost although every renewal was acknowledged"
    );
    // Paused replica: renewals still reach the primary, but they do not
    // extend the lease estimate, so the guard is lost within one lease.
    replica.pause();
    let paused = tokio::time::Instant::now();
    tokio::time::timeout(lease * 2, g.lost())
        .await
        .expect("unacknowledged renewals kept the guard alive");
    // Within about one lease of the pause (the last acknowledged renewal
    // came before it; a stalled machine notices a little late).
    assert!(
        paused.elapsed() <= lease + Duration::from_secs(1),
        "lost {:?} after the pause",
        paused.elapsed()
    );
    replica.resume();
    assert!(matches!(g.unlock().await, Err(Error::NotHeld { .. })));
}

/// The fixed lease of the guards below: long enough for a loaded machine to
/// run every step while they hold, far below the lease they are asked to
/// extend or re-enter with ([`LONG`]).
const LEASE: Duration = Duration::from_secs(45);
const LONG: Duration = Duration::from_mins(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_extend_does_not_lengthen_the_guard() {
    let (primary, replica, client) = synced_pair(Duration::from_secs(30)).await;
    let admin = common::admin(&primary.url()).await;
    let sem = client.semaphore("s");
    assert!(sem.try_set_permits(1).await.unwrap());
    let lock = client.lock("l").lock_with_lease(LEASE).await.unwrap();
    let fair = client.fair_lock("f").lock_with_lease(LEASE).await.unwrap();
    let read = client.rw_lock("r").read().lock_with_lease(LEASE).await;
    let read = read.unwrap();
    let write = client.rw_lock("w").write().lock_with_lease(LEASE).await;
    let write = write.unwrap();
    let permit = sem.acquire_with_lease(1, LEASE).await.unwrap();

    // A failover now would promote a replica with the old lease: the guard
    // must not believe the longer one.
    replica.pause();
    let mut wrong = Vec::new();
    macro_rules! unsynced {
        ($what:literal, $g:expr) => {{
            let r = $g.extend(LONG).await;
            let v = $g.validity();
            if !is_replica_sync(&r) || v > LEASE {
                wrong.push(format!("{}: {r:?}, validity {v:?}", $what));
            }
        }};
    }
    unsynced!("lock", lock);
    unsynced!("fair lock", fair);
    unsynced!("read lock", read);
    unsynced!("write lock", write);
    unsynced!("semaphore", permit);
    assert!(
        wrong.is_empty(),
        "an unacknowledged extend did not fail with the guard's lease as it was: {wrong:#?}"
    );

    // Acknowledged, an extend lengthens the guard.
    replica.resume();
    assert!(
        common::replica_caught_up(&admin).await,
        "the resumed replica never acknowledged"
    );
    macro_rules! synced {
        ($what:literal, $g:expr) => {{
            $g.extend(LONG)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", $what));
            let v = $g.validity();
            assert!(v > LEASE, "{}: an acknowledged extend gave {v:?}", $what);
        }};
    }
    synced!("lock", lock);
    synced!("fair lock", fair);
    synced!("read lock", read);
    synced!("write lock", write);
    synced!("semaphore", permit);
    lock.unlock().await.unwrap();
    fair.unlock().await.unwrap();
    read.unlock().await.unwrap();
    write.unlock().await.unwrap();
    permit.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undone_reentry_leaves_the_outer_hold_as_it_was() {
    let (primary, replica, client) = synced_pair(Duration::from_secs(30)).await;
    let admin = common::admin(&primary.url()).await;
    let (lock, fair) = (client.lock("l"), client.fair_lock("f"));
    let (read, write) = (client.rw_lock("r").read(), client.rw_lock("w").write());
    let lock_outer = lock.lock_with_lease(LEASE).await.unwrap();
    let fair_outer = fair.lock_with_lease(LEASE).await.unwrap();
    let read_outer = read.lock_with_lease(LEASE).await.unwrap();
    let write_outer = write.lock_with_lease(LEASE).await.unwrap();

    // The re-entry is undone: the outer guard keeps its lease estimate (a
    // failover would promote a replica with the old lease) and its count.
    replica.pause();
    let mut wrong = Vec::new();
    macro_rules! undone {
        ($what:literal, $lock:expr, $outer:expr) => {{
            let r = $lock.lock_with_lease(LONG).await;
            let v = $outer.validity();
            if !is_replica_sync(&r) || v > LEASE {
                wrong.push(format!("{}: {r:?}, outer validity {v:?}", $what));
            }
        }};
    }
    undone!("lock", lock, lock_outer);
    undone!("fair lock", fair, fair_outer);
    undone!("read lock", read, read_outer);
    undone!("write lock", write, write_outer);
    assert!(
        wrong.is_empty(),
        "an undone re-entry did not leave the outer guard's lease as it was: {wrong:#?}"
    );
    replica.resume();
    assert!(
        common::replica_caught_up(&admin).await,
        "the resumed replica never acknowledged"
    );
    assert_eq!(lock.hold_count().await.unwrap(), 1, "lock");
    assert_eq!(fair.hold_count().await.unwrap(), 1, "fair lock");
    assert_eq!(read.hold_count().await.unwrap(), 1, "read lock");
    assert_eq!(write.hold_count().await.unwrap(), 1, "write lock");

    // Acknowledged, a re-entry lengthens the hold both guards share.
    macro_rules! reentered {
        ($what:literal, $lock:expr, $outer:expr) => {{
            let inner = $lock
                .lock_with_lease(LONG)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", $what));
            let v = $outer.validity();
            assert!(v > LEASE, "{}: an acknowledged re-entry gave {v:?}", $what);
            assert_eq!($lock.hold_count().await.unwrap(), 2, "{}", $what);
            inner.unlock().await.unwrap();
        }};
    }
    reentered!("lock", lock, lock_outer);
    reentered!("fair lock", fair, fair_outer);
    reentered!("read lock", read, read_outer);
    reentered!("write lock", write, write_outer);
    lock_outer.unlock().await.unwrap();
    fair_outer.unlock().await.unwrap();
    read_outer.unlock().await.unwrap();
    write_outer.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap() && !fair.is_locked().await.unwrap());
}

/// A lock handed to a waiting client by another client's release was
/// written on the releaser's connection: the waiter's own `WAIT` counts it
/// only after a write of its own that follows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_handed_over_counts_only_when_replicas_have_the_hand_off() {
    let primary = RedisServer::start().await;
    let replica = common::replica_of(&primary).await;
    let admin = common::admin(&primary.url()).await;
    let releaser = redisync::Client::connect(&primary.url()).await.unwrap();
    let waiter = redisync::Client::builder(&primary.url())
        .replica_sync(1, Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let g = releaser.lock("handed").lock().await.unwrap();
    let lock = waiter.lock("handed");
    let waiting = tokio::spawn(async move {
        lock.try_lock(Duration::from_secs(30), Some(LEASE))
            .await
            .map(|g| g.is_some())
    });
    let queue = common::lock_queue_key("handed");
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            admin.llen::<i64, _>(&queue).await.unwrap() == 1
        })
        .await
    );
    assert!(
        common::replica_caught_up(&admin).await,
        "the replica has the queue entry"
    );
    replica.pause();
    g.unlock().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(got, Err(Error::ReplicaSync { acked: 0, .. })),
        "handed over without the replicas: {got:?}"
    );
    replica.resume();
    let held: i64 = admin.exists(common::lock_key("handed")).await.unwrap();
    assert_eq!(held, 0, "the unacknowledged hand-off was given back");
}

/// The semaphore's hand-off, as the lock's: written by the releaser's
/// connection, so the waiter's own write (a renewal in the same
/// millisecond must still write) comes before its `WAIT`; unacknowledged,
/// the permit goes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_handed_over_counts_only_when_replicas_have_the_hand_off() {
    let primary = RedisServer::start().await;
    let replica = common::replica_of(&primary).await;
    let admin = common::admin(&primary.url()).await;
    let releaser = redisync::Client::connect(&primary.url()).await.unwrap();
    let waiter = redisync::Client::builder(&primary.url())
        .replica_sync(1, Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let sem = releaser.semaphore("handed").with_permits(1);
    let p = sem.acquire_with_lease(1, LEASE).await.unwrap();
    let sem = waiter.semaphore("handed").with_permits(1);
    let waiting = tokio::spawn(async move {
        sem.try_acquire_with_lease(1, Duration::from_secs(30), LEASE)
            .await
            .map(|p| p.is_some())
    });
    assert!(common::semaphore_queued(&admin, "handed", 1).await);
    assert!(
        common::replica_caught_up(&admin).await,
        "the replica has the queue entry"
    );
    replica.pause();
    p.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(got, Err(Error::ReplicaSync { acked: 0, .. })),
        "handed over without the replicas: {got:?}"
    );
    replica.resume();
    let held: i64 = admin
        .zcard(common::key("sem", "leases", "handed"))
        .await
        .unwrap();
    assert_eq!(held, 0, "the unacknowledged hand-off was given back");
}

/// What a stalled waiter sends back: whether it got the permits, and a way
/// to have it release them.
type Outcome = (
    redisync::Result<bool>,
    Option<tokio::sync::oneshot::Sender<()>>,
);

/// A hand-off the waiter finds gone when it renews it (force-released while
/// the waiter's process stood still) is given up, and the waiter tries again
/// under the same permit id: the hold given up is released before that next
/// attempt, never after it, where it would free the fresh grant the waiter
/// counts as held (the torture found 2-permit semaphores held twice so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_given_up_is_released_before_the_waiter_tries_again() {
    const NAME: &str = "given-up";
    let primary = RedisServer::start().await;
    let _replica = common::replica_of(&primary).await;
    let admin = common::admin(&primary.url()).await;
    let other = redisync::Client::connect(&primary.url()).await.unwrap();
    let sem = other.semaphore(NAME).with_permits(1);
    let p = sem.acquire_with_lease(1, LEASE).await.unwrap();

    // The waiter runs on a runtime of its own, on one thread the test can
    // stop (as a process stops under a pause).
    let (stall, stall_asked) = tokio::sync::oneshot::channel::<()>();
    let (stalled_tell, stalled) = tokio::sync::oneshot::channel::<()>();
    let (resume, resume_asked) = std::sync::mpsc::channel::<()>();
    let (outcome_tell, outcome) = tokio::sync::oneshot::channel::<Outcome>();
    let url = primary.url();
    let waiter_thread = common::on_own_runtime(move || async move {
        let waiter = redisync::Client::builder(&url)
            .replica_sync(1, Duration::from_secs(2))
            .connect()
            .await
            .unwrap();
        let sem = waiter.semaphore(NAME).with_permits(1);
        tokio::spawn(async move {
            if stall_asked.await.is_ok() {
                let _ = stalled_tell.send(());
                // Blocks the runtime's only thread.
                let _ = resume_asked.recv();
            }
        });
        let got = sem.try_acquire_with_lease(1, LEASE, LEASE).await;
        match got {
            Ok(Some(permit)) => {
                let (release, released) = tokio::sync::oneshot::channel();
                let _ = outcome_tell.send((Ok(true), Some(release)));
                let _ = released.await;
                let _ = permit.release().await;
            }
            other => {
                let _ = outcome_tell.send((other.map(|p| p.is_some()), None));
            }
        }
        let _ = waiter.shutdown().await;
    });
    assert!(common::semaphore_queued(&admin, NAME, 1).await);
    stall.send(()).unwrap();
    stalled.await.unwrap();
    // Handed to the stopped waiter, then force-released before it renews.
    p.release().await.unwrap();
    let leases = common::key("sem", "leases", NAME);
    let handed: i64 = admin.zcard(&leases).await.unwrap();
    assert_eq!(handed, 1, "the release handed the permit to the waiter");
    assert!(sem.force_release().await.unwrap());
    resume.send(()).unwrap();

    let (got, release) = tokio::time::timeout(Duration::from_secs(30), outcome)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(got, Ok(true)), "{got:?}");
    // The waiter holds the permit: Redis has it, and nobody else gets it.
    let held: i64 = admin.zcard(&leases).await.unwrap();
    let again = sem.try_acquire(1, Duration::ZERO).await.unwrap();
    assert_eq!(held, 1, "the waiter's permit was released under it");
    assert!(again.is_none(), "a second holder of the only permit");
    release.unwrap().send(()).unwrap();
    waiter_thread.join().unwrap();
}

/// A waiter whose hand-off was gone when it renewed it (force-unlocked while
/// its process stood still) tries again as the first of its client's tasks:
/// it keeps the client's local turn, so the task queued behind it locally
/// does not get ahead of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_hand_off_was_gone_keeps_its_place_among_its_clients_tasks() {
    const NAME: &str = "keeps-place";
    let primary = RedisServer::start().await;
    let _replica = common::replica_of(&primary).await;
    let admin = common::admin(&primary.url()).await;
    let other = redisync::Client::connect(&primary.url()).await.unwrap();
    let lock = other.lock(NAME);
    let held = lock.lock_with_lease(LEASE).await.unwrap();

    let (second, second_asked) = tokio::sync::oneshot::channel::<()>();
    let (stalled_tell, stalled) = tokio::sync::oneshot::channel::<()>();
    let (resume, resume_asked) = std::sync::mpsc::channel::<()>();
    let (order_tell, order) = tokio::sync::oneshot::channel::<Vec<&'static str>>();
    let url = primary.url();
    let waiter_thread = common::on_own_runtime(move || async move {
        let waiter = redisync::Client::builder(&url)
            .replica_sync(1, Duration::from_secs(2))
            .connect()
            .await
            .unwrap();
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let task = |who: &'static str| {
            let lock = waiter.lock(NAME);
            let order = order.clone();
            tokio::spawn(async move {
                let g = lock
                    .try_lock(Duration::from_secs(30), Some(LEASE))
                    .await
                    .unwrap()
                    .expect("acquired");
                order.lock().unwrap().push(who);
                g.unlock().await.unwrap();
            })
        };
        let first = task("first");
        // On the test's word (the first is queued in Redis): the second
        // task starts and waits behind the first locally, then the
        // runtime stops.
        let _ = second_asked.await;
        let second = task("second");
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        let _ = stalled_tell.send(());
        // Blocks the runtime's only thread.
        let _ = resume_asked.recv();
        first.await.unwrap();
        second.await.unwrap();
        let got = order.lock().unwrap().clone();
        let _ = order_tell.send(got);
        let _ = waiter.shutdown().await;
    });
    let queue = common::lock_queue_key(NAME);
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            admin.llen::<i64, _>(&queue).await.unwrap() == 1
        })
        .await
    );
    second.send(()).unwrap();
    stalled.await.unwrap();
    // Handed to the stopped waiter's first task, then force-unlocked
    // before it renews.
    held.unlock().await.unwrap();
    assert!(lock.force_unlock().await.unwrap());
    resume.send(()).unwrap();
    let got = tokio::time::timeout(Duration::from_secs(30), order)
        .await
        .unwrap()
        .unwrap();
    waiter_thread.join().unwrap();
    assert_eq!(
        got,
        ["first", "second"],
        "a later task of the client got ahead"
    );
}

/// A watchdog renewal in the millisecond of a hand-off (the lease it would
/// set is the one the hand-off just set) still writes, so a `WAIT` after it
/// covers the hand-off, which another connection wrote. Each renewal script
/// runs right behind a hand-off's writes in one script (the same
/// millisecond, bar a rare tick in between: 20 runs each), and its own
/// writes are counted. A renewal that skipped an equal lease wrote nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_in_the_millisecond_of_a_hand_off_still_writes() {
    const LEASE: &str = "30000";
    // (what, the hand-off's writes, the renewal's script file, its keys'
    // prefixes, its arguments after the lease, the command a renewal writes
    // with, how many of them the hand-off wrote, how many the renewal writes)
    type Case<'a> = (
        &'a str,
        &'a str,
        &'a str,
        &'a [&'a str],
        &'a [&'a str],
        &'a str,
        u64,
        u64,
    );
    let cases: [Case<'_>; 4] = [
        (
            "lock",
            "redis.call('hset', KEYS[1], ARGV[2], 1, '~t', ARGV[3])
             redis.call('pexpire', KEYS[1], ARGV[1])",
            "lock_renew.lua",
            &["lock"],
            &["owner", "7"],
            "pexpire",
            1,
            1,
        ),
        (
            "write hold",
            "redis.call('hset', KEYS[1], 'w:' .. ARGV[2], 1, '~t', ARGV[3])
             redis.call('pexpire', KEYS[1], ARGV[1])",
            "rw_lock_renew.lua",
            &["rw", "readers"],
            &["owner", "7", "w"],
            "pexpire",
            1,
            1,
        ),
        (
            "read hold",
            "local t = redis.call('time')
             local ends = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ARGV[1]
             redis.call('hset', KEYS[1], 'r:' .. ARGV[2], 1, 't:' .. ARGV[2], ARGV[3])
             redis.call('zadd', KEYS[2], ends, ARGV[2])
             redis.call('pexpire', KEYS[1], ARGV[1])
             redis.call('pexpire', KEYS[2], ARGV[1])",
            "rw_lock_renew.lua",
            &["rw", "readers"],
            &["owner", "7", "r"],
            "pexpire",
            2,
            2,
        ),
        (
            "permit",
            "local t = redis.call('time')
             local ends = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ARGV[1]
             redis.call('zadd', KEYS[1], ends, ARGV[2])",
            "semaphore_renew.lua",
            &["leases"],
            &["permit"],
            "zadd",
            1,
            1,
        ),
    ];
    let env = common::Env::start().await;
    for (what, hand_off, renewal, keys, args, writes_with, handed, renewed) in cases {
        let script = format!(
            "do\n{hand_off}\nend\n{}",
            redisync::__private::script_source(renewal).unwrap()
        );
        let runs = 20u64;
        let before = common::command_calls(&env).await;
        for run in 0..runs {
            let keys: Vec<String> = keys.iter().map(|k| format!("{k}:{run}")).collect();
            let mut argv = vec![LEASE.to_owned()];
            argv.extend(args.iter().map(|a| (*a).to_owned()));
            let renewed_flags: Vec<i64> = env.admin.eval(&script, keys, argv).await.unwrap();
            assert_eq!(renewed_flags, vec![1], "{what}: the hold is ours");
        }
        let after = common::command_calls(&env).await;
        let wrote = after[writes_with] - before.get(writes_with).copied().unwrap_or(0);
        assert_eq!(
            wrote,
            runs * (handed + renewed),
            "{what}: {} renewals of {runs} in the hand-off's millisecond wrote nothing",
            (runs * (handed + renewed) - wrote) / renewed
        );
    }
}
