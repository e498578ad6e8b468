//! Many clients (processes) on one lock: what a contended acquisition costs
//! in Redis commands, who gets the lock next, and how long a waiter that
//! crashed or left can hold the others up.

use crate::common;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{lock_key, Env};
use fred::prelude::*;
use tokio::time::{timeout, Instant};

/// Every command Redis ran (INFO, the harness's own, excluded).
fn total(calls: &std::collections::HashMap<String, u64>) -> u64 {
    calls
        .iter()
        .filter(|(name, _)| name.as_str() != "info")
        .map(|(_, n)| n)
        .sum()
}

/// `n / d` with two decimals, for messages.
fn per(n: u64, d: u64) -> String {
    let hundredths = n * 100 / d.max(1);
    format!("{}.{:02}", hundredths / 100, hundredths % 100)
}

use common::lock_queue_key as queue_key;

/// What the contending tasks take: a lock, or one permit of a semaphore
/// of one.
#[derive(Clone, Copy, Debug)]
enum Exclusive {
    Lock,
    Fair,
    Semaphore,
    /// The write side of a read-write lock.
    Write,
}

/// A hold of an [`Exclusive`].
enum Taken {
    Lock(redisync::LockGuard),
    Fair(redisync::FairLockGuard),
    Permit(redisync::SemaphorePermit),
    Rw(redisync::RwLockGuard),
}

impl Exclusive {
    /// Takes `name` through `client` within `wait` (10 s leases).
    async fn take(self, client: &redisync::Client, name: &str, wait: Duration) -> Option<Taken> {
        let lease = Duration::from_secs(10);
        match self {
            Exclusive::Lock => client
                .lock(name)
                .try_lock(wait, Some(lease))
                .await
                .unwrap()
                .map(Taken::Lock),
            Exclusive::Fair => client
                .fair_lock(name)
                .try_lock(wait, Some(lease))
                .await
                .unwrap()
                .map(Taken::Fair),
            Exclusive::Semaphore => client
                .semaphore(name)
                .with_permits(1)
                .try_acquire_with_lease(1, wait, lease)
                .await
                .unwrap()
                .map(Taken::Permit),
            Exclusive::Write => client
                .rw_lock(name)
                .write()
                .try_lock(wait, Some(lease))
                .await
                .unwrap()
                .map(Taken::Rw),
        }
    }
}

impl Taken {
    async fn release(self) {
        match self {
            Taken::Lock(g) => g.unlock().await.unwrap(),
            Taken::Fair(g) => g.unlock().await.unwrap(),
            Taken::Permit(p) => p.release().await.unwrap(),
            Taken::Rw(g) => g.unlock().await.unwrap(),
        }
    }
}

/// `clients` clients with `workers` tasks each take `what` `rounds` times
/// per task (holding for a moment each time); returns the acquisitions and
/// the commands Redis ran for them.
async fn contend(
    env: &Env,
    what: Exclusive,
    name: &str,
    (clients, workers): (usize, usize),
    rounds: u32,
) -> (u64, u64) {
    let mut handles = Vec::new();
    for _ in 0..clients {
        let client = env.client().await;
        // Scripts loaded, connection set up: not counted.
        what.take(&client, name, Duration::ZERO)
            .await
            .expect("free before the start")
            .release()
            .await;
        handles.push(client);
    }
    let inside = Arc::new(AtomicU32::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let before = common::command_calls(env).await;
    let mut tasks = Vec::new();
    for client in &handles {
        for _ in 0..workers {
            let (client, name) = (client.clone(), name.to_owned());
            let (inside, done) = (inside.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    let g = what
                        .take(&client, &name, Duration::from_mins(1))
                        .await
                        .expect("acquired within the wait");
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    done.fetch_add(1, Ordering::SeqCst);
                    g.release().await;
                }
            }));
        }
    }
    for t in tasks {
        timeout(Duration::from_mins(2), t).await.unwrap().unwrap();
    }
    let after = common::command_calls(env).await;
    let (done, commands) = (done.load(Ordering::SeqCst), total(&after) - total(&before));
    let mut by_name: Vec<_> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    by_name.sort();
    eprintln!(
        "{what:?} {clients}x{workers}: {commands} commands for {done} acquisitions ({} each): {by_name:?}",
        per(commands, done)
    );
    (done, commands)
}

/// `clients` x `workers` tasks, 15 acquisitions each, cost at most
/// `budget` commands per acquisition, plus an allowance of `budget` per
/// client (its first contention: a second attempt after subscribing, the
/// SUBSCRIBE; the last release).
async fn commands_per_acquisition_at_most(
    budget: u64,
    what: Exclusive,
    name: &str,
    layout: (usize, usize),
) {
    let env = Env::start().await;
    // Before Redis 7 (no PEXPIRE .. GT) a fair waiter's busy attempt reads
    // the queue's PTTL before it extends it: one command more.
    let budget = match what {
        Exclusive::Fair if !common::sharded(&env.admin) => budget + 1,
        _ => budget,
    };
    let (acquisitions, commands) = contend(&env, what, name, layout, 15).await;
    assert_eq!(acquisitions, 16 * 15);
    let allowance = budget * layout.0 as u64;
    assert!(
        commands <= budget * acquisitions + allowance,
        "{what:?}: {commands} commands for {acquisitions} acquisitions ({} each)",
        per(commands, acquisitions)
    );
}

/// A lock: a waiting client's busy attempt joins the queue (4 commands);
/// the release hands the lock to the oldest waiter and tells it the token
/// (8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_clients_cost_at_most_twelve_commands_per_acquisition() {
    commands_per_acquisition_at_most(12, Exclusive::Lock, "herd", (16, 1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_clients_of_four_tasks_cost_at_most_twelve_commands_per_acquisition() {
    commands_per_acquisition_at_most(12, Exclusive::Lock, "herd4", (4, 4)).await;
}

/// A fair lock, every waiting task queued in Redis: a busy attempt joins
/// the queue (5 commands; 6 before Redis 7); the release hands the lock to
/// the oldest live entry and tells it the token (9). (32 when the head took
/// the lock with a script of its own.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_of_sixteen_clients_costs_at_most_fifteen_commands_per_acquisition() {
    commands_per_acquisition_at_most(15, Exclusive::Fair, "fair-herd", (16, 1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_of_four_clients_of_four_tasks_costs_at_most_fifteen_commands_per_acquisition()
{
    commands_per_acquisition_at_most(15, Exclusive::Fair, "fair-herd4", (4, 4)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_of_one_client_of_sixteen_tasks_costs_at_most_fifteen_commands_per_acquisition()
{
    commands_per_acquisition_at_most(15, Exclusive::Fair, "fair-herd1", (1, 16)).await;
}

/// A semaphore of one permit: a waiting client's busy attempt joins the
/// queue (6 commands); the release hands the permit to the oldest waiter
/// (8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_of_sixteen_clients_costs_at_most_fifteen_commands_per_acquisition() {
    commands_per_acquisition_at_most(15, Exclusive::Semaphore, "sem-herd", (16, 1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_of_four_clients_of_four_tasks_costs_at_most_fifteen_commands_per_acquisition()
{
    commands_per_acquisition_at_most(15, Exclusive::Semaphore, "sem-herd4", (4, 4)).await;
}

/// The write side of a read-write lock: a waiting client's busy attempt
/// joins the queue; the release hands the lock to the oldest waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_of_sixteen_clients_cost_at_most_fifteen_commands_per_acquisition() {
    commands_per_acquisition_at_most(15, Exclusive::Write, "rw-herd", (16, 1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_of_four_clients_of_four_tasks_cost_at_most_fifteen_commands_per_acquisition() {
    commands_per_acquisition_at_most(15, Exclusive::Write, "rw-herd4", (4, 4)).await;
}

/// Readers of eight clients and writers of eight more, 15 rounds each: a
/// release hands the lock to one writer or to the readers at the head of
/// the queue (a batch, all told at once), so a contended acquisition costs
/// O(1) commands whatever the mix (about 18: a reader's grant and release
/// also keep the readers' lease zset); readers share, writers exclude.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_of_sixteen_clients_cost_at_most_twenty_commands_per_acquisition() {
    let env = Env::start().await;
    let name = "rw-mix";
    let mut clients = Vec::new();
    for _ in 0..16 {
        let client = env.client().await;
        // Scripts loaded, connection set up: not counted.
        let rw = client.rw_lock(name);
        rw.write()
            .try_lock(Duration::ZERO, None)
            .await
            .unwrap()
            .expect("free before the start")
            .unlock()
            .await
            .unwrap();
        clients.push(client);
    }
    // >0: readers inside; -1: a writer inside.
    let inside = Arc::new(std::sync::Mutex::new(0i64));
    let (done, shared) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let before = common::command_calls(&env).await;
    let mut tasks = Vec::new();
    for (i, client) in clients.iter().enumerate() {
        let rw = client.rw_lock(name);
        let (inside, done, shared) = (inside.clone(), done.clone(), shared.clone());
        let writer = i % 2 == 1;
        tasks.push(tokio::spawn(async move {
            let lease = Some(Duration::from_secs(10));
            for _ in 0..15 {
                let wait = Duration::from_mins(1);
                let g = if writer {
                    rw.write().try_lock(wait, lease).await
                } else {
                    rw.read().try_lock(wait, lease).await
                };
                let g = g.unwrap().expect("acquired within the wait");
                {
                    let mut n = inside.lock().unwrap();
                    if writer {
                        assert_eq!(*n, 0, "a writer with company");
                        *n = -1;
                    } else {
                        assert!(*n >= 0, "a reader beside a writer");
                        if *n > 0 {
                            shared.fetch_add(1, Ordering::SeqCst);
                        }
                        *n += 1;
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                {
                    let mut n = inside.lock().unwrap();
                    *n = if writer { 0 } else { *n - 1 };
                }
                done.fetch_add(1, Ordering::SeqCst);
                g.unlock().await.unwrap();
            }
        }));
    }
    for t in tasks {
        timeout(Duration::from_mins(2), t).await.unwrap().unwrap();
    }
    let after = common::command_calls(&env).await;
    let (done, commands) = (done.load(Ordering::SeqCst), total(&after) - total(&before));
    let mut by_name: Vec<_> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    by_name.sort();
    eprintln!(
        "RwLock 8 reader + 8 writer clients: {commands} commands for {done} acquisitions ({} each), {} reads joined others: {by_name:?}",
        per(commands, done),
        shared.load(Ordering::SeqCst)
    );
    assert_eq!(done, 16 * 15);
    assert!(
        commands <= 20 * done + 20 * 16,
        "{commands} commands for {done} acquisitions ({} each)",
        per(commands, done)
    );
    assert!(
        shared.load(Ordering::SeqCst) > 0,
        "readers never shared the lock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_lock_to_the_waiting_client_before_its_own_tasks() {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    let busy = Arc::new(AtomicU32::new(0));
    let stop = Arc::new(tokio::sync::Notify::new());
    // Four tasks of A take turns on the lock without a pause.
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let lock = a.lock("turns");
        let (busy, stop) = (busy.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let acquire = lock.try_lock(Duration::from_secs(30), Some(Duration::from_secs(10)));
                let g = tokio::select! {
                    g = acquire => g.unwrap().unwrap(),
                    () = stop.notified() => return,
                };
                busy.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                g.unlock().await.unwrap();
            }
        }));
    }
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            busy.load(Ordering::SeqCst) > 10
        })
        .await
    );
    // B queues behind A's holder; A's next release hands it to B, not to
    // A's next task.
    let waiter = tokio::spawn({
        let lock = b.lock("turns");
        async move {
            lock.try_lock(Duration::from_secs(30), Some(Duration::from_secs(10)))
                .await
        }
    });
    let queued = common::eventually(Duration::from_secs(10), || async {
        env.admin.llen::<i64, _>(queue_key("turns")).await.unwrap() >= 1
    })
    .await;
    assert!(queued, "B never queued");
    let at_queue = busy.load(Ordering::SeqCst);
    let g = timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .expect("B got the lock");
    let a_meanwhile = busy.load(Ordering::SeqCst) - at_queue;
    // The holder when B queued may finish; A's queue may have had one more
    // grant in flight. Nothing else.
    assert!(
        a_meanwhile <= 2,
        "A took the lock {a_meanwhile} times while B waited"
    );
    g.unlock().await.unwrap();
    stop.notify_waiters();
    // Those between two acquisitions miss the notification: cancelled.
    for t in tasks {
        t.abort();
        let _ = t.await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_waiter_holds_the_others_up_for_one_lease_at_most() {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    let lease = Duration::from_millis(1500);
    let g = a.lock("crash").lock_with_lease(lease).await.unwrap();
    // A waiter of a process that died: its queue entry (lease 1.2 s), no
    // client behind it.
    let ghost_lease = 1200;
    let _: i64 = env
        .admin
        .rpush(
            queue_key("crash"),
            format!("{ghost_lease} 1 0 00000000-dead-dead-dead-000000000000:1"),
        )
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let lock = b.lock("crash");
        async move {
            let g = lock.try_lock(Duration::from_secs(20), Some(lease)).await;
            (Instant::now(), g)
        }
    });
    assert!(
        common::lock_queued(&env.admin, "crash", 2).await,
        "B never queued"
    );
    let released = Instant::now();
    g.unlock().await.unwrap();
    // The ghost got it.
    let fields: std::collections::HashMap<String, String> =
        env.admin.hgetall(lock_key("crash")).await.unwrap();
    assert!(
        fields.keys().any(|f| f.starts_with("00000000-dead")),
        "handed to the ghost: {fields:?}"
    );
    let (at, got) = timeout(Duration::from_secs(20), waiter)
        .await
        .unwrap()
        .unwrap();
    let _held = got
        .unwrap()
        .expect("B got the lock once the ghost's lease ended");
    let delay = at - released;
    // Documented bound: one lease, the dead waiter's (or a quarter of B's
    // own, how often B looks again, if longer), plus scheduling slack for
    // a loaded machine.
    assert!(
        delay >= Duration::from_millis(ghost_lease - 100),
        "{delay:?}"
    );
    assert!(
        delay < Duration::from_millis(ghost_lease) + Duration::from_millis(1500),
        "{delay:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_leaves_the_queue_and_the_next_one_is_handed_the_lock() {
    let env = Env::start().await;
    let first = env.client().await;
    let leaver = env.client().await;
    let next = env.client().await;
    let g = first.lock("leave").lock().await.unwrap();
    let b_lock = leaver.lock("leave");
    let gave_up = tokio::spawn(async move {
        b_lock
            .try_lock(Duration::from_millis(400), None)
            .await
            .unwrap()
            .is_none()
    });
    assert!(common::lock_queued(&env.admin, "leave", 1).await);
    let c_lock = next.lock("leave");
    let waiter = tokio::spawn(async move { c_lock.lock().await.unwrap() });
    assert!(common::lock_queued(&env.admin, "leave", 2).await);
    assert!(timeout(Duration::from_secs(10), gave_up)
        .await
        .unwrap()
        .unwrap());
    assert_eq!(
        env.admin.llen::<i64, _>(queue_key("leave")).await.unwrap(),
        1,
        "B left the queue"
    );
    let t = g.fencing_token();
    g.unlock().await.unwrap();
    let got = timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(got.fencing_token() > t);
    got.unlock().await.unwrap();
    let left: i64 = env.admin.exists(queue_key("leave")).await.unwrap();
    assert_eq!(left, 0, "the queue is gone with its last waiter");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_shuts_down_while_waiting_leaves_the_queue() {
    let env = Env::start().await;
    let first = env.client().await;
    let leaver = env.client().await;
    let next = env.client().await;
    let g = first.lock("bye").lock().await.unwrap();
    let b_lock = leaver.lock("bye");
    let b_waits = tokio::spawn(async move { b_lock.lock().await.map(|_| ()) });
    assert!(common::lock_queued(&env.admin, "bye", 1).await);
    let c_lock = next.lock("bye");
    let c_waits = tokio::spawn(async move { c_lock.lock().await.unwrap() });
    assert!(common::lock_queued(&env.admin, "bye", 2).await);
    leaver.shutdown().await.unwrap();
    assert!(matches!(
        timeout(Duration::from_secs(10), b_waits)
            .await
            .unwrap()
            .unwrap(),
        Err(redisync::Error::Shutdown)
    ));
    // B's entry is gone, so A's release hands the lock to C at once (not
    // after B's 30 s watchdog lease).
    assert_eq!(env.admin.llen::<i64, _>(queue_key("bye")).await.unwrap(), 1);
    g.unlock().await.unwrap();
    let got = timeout(Duration::from_secs(5), c_waits)
        .await
        .expect("C handed the lock at once")
        .unwrap();
    got.unlock().await.unwrap();
}

/// A restart from an older snapshot brings back a hold and its queue; the
/// old holder's release then hands the lock over with a token above every
/// token issued since (a token is never below the server time of its
/// grant, as for a fresh grant), not merely one above the old token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_after_a_restart_from_an_older_snapshot_never_issues_a_lower_token() {
    let mut env = Env::start().await;
    let old = env.client().await;
    let waiter = env.client().await;
    let later = env.client().await;
    let lease = Some(Duration::from_mins(1));
    let g = old
        .lock("snap")
        .try_lock(Duration::ZERO, lease)
        .await
        .unwrap()
        .expect("free");
    let lock = waiter.lock("snap");
    let waiting = tokio::spawn(async move {
        lock.try_lock(Duration::from_secs(30), lease)
            .await
            .unwrap()
            .expect("handed")
    });
    assert!(common::lock_queued(&env.admin, "snap", 1).await);
    // ... and parked: its look after subscribing (the queued one, LPOS)
    // is done, so it does not take the lock when it is free below.
    assert!(common::queued_waiter_looked(&env).await);
    common::save(&env.admin).await;
    // After the snapshot: the hold is gone (as if it expired) and a later
    // acquisition takes a newer token.
    let _: i64 = env.admin.del(lock_key("snap")).await.unwrap();
    let newer = later
        .lock("snap")
        .try_lock(Duration::ZERO, lease)
        .await
        .unwrap();
    let state: std::collections::HashMap<String, String> =
        env.admin.hgetall(lock_key("snap")).await.unwrap();
    let newer = newer.unwrap_or_else(|| panic!("busy after the delete: {state:?}"));
    let newest = newer.fencing_token();
    drop(newer.unlock().await);
    env.server.kill().await;
    env.server.restart().await;
    let reloaded = common::eventually(Duration::from_secs(10), || async {
        matches!(env.admin.exists::<i64, _>(lock_key("snap")).await, Ok(1))
    })
    .await;
    assert!(reloaded, "the restart did not load the snapshot");
    // The old holder still believes it holds: its release hands over (a
    // release that meets the reconnect is finished in the background).
    drop(g.unlock().await);
    let got = timeout(Duration::from_secs(20), waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(
        got.fencing_token() > newest,
        "handed over with token {}, {newest} was issued before",
        got.fencing_token()
    );
}

/// A hand-off message meant for another acquisition of the same owner (a
/// late one, from an acquisition that ended meanwhile) hands nothing to the
/// acquisition waiting now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_hand_off_message_for_an_earlier_wait_is_ignored() {
    let env = Env::start().await;
    let holder = env.client().await;
    let waiter = env.client().await;
    let g = holder.lock("late").lock().await.unwrap();
    let lock = waiter.lock("late");
    let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
    let entry = loop {
        let entries: Vec<String> = env.admin.lrange(queue_key("late"), 0, -1).await.unwrap();
        if let Some(e) = entries.into_iter().next() {
            break e;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let mut parts = entry.splitn(3, ' ');
    let (_lease, number, owner) = (parts.next(), parts.next().unwrap(), parts.next().unwrap());
    let earlier: u64 = number.parse::<u64>().unwrap() - 1;
    let channel = common::key("lock", "ch", "late");
    let payload = format!("g:{}:{earlier}:{owner}", g.fencing_token() + 1);
    let _: i64 = if common::sharded(&env.admin) {
        env.admin.spublish(&channel, payload).await.unwrap()
    } else {
        env.admin.publish(&channel, payload).await.unwrap()
    };
    // Not handed: still waiting while the holder holds.
    assert!(timeout(Duration::from_millis(500), async {
        while !waiting.is_finished() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .is_err());
    let t = g.fencing_token();
    g.unlock().await.unwrap();
    let got = timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(got.fencing_token() > t);
    got.unlock().await.unwrap();
}
