//! A semaphore across clients: a client that finds too few permits joins
//! the semaphore's wait queue in Redis, and a release hands the freed
//! permits to the oldest waiting clients (FIFO, a large ask never passed
//! over); crashed, departed and shut-down waiters hold the others up for a
//! bounded time.

mod common;

use std::time::Duration;

use common::Env;
use fred::prelude::*;
use tokio::time::{timeout, Instant};

fn queue_key(name: &str) -> String {
    common::key("sem", "queue", name)
}

/// A waiting client's attempt: `permits` of `name` within 30 s, with
/// `lease`, as a task (its instant of grant with the permit).
fn wait_for(
    client: &redisync::Client,
    name: &str,
    permits: u32,
    lease: Duration,
) -> tokio::task::JoinHandle<(Instant, redisync::SemaphorePermit)> {
    let sem = client.semaphore(name);
    tokio::spawn(async move {
        let p = sem
            .try_acquire_with_lease(permits, Duration::from_secs(30), lease)
            .await
            .unwrap()
            .expect("acquired within the wait");
        (Instant::now(), p)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_permit_to_the_oldest_waiting_client() {
    let env = Env::start().await;
    let (a, b, c) = (env.client().await, env.client().await, env.client().await);
    let lease = Duration::from_secs(30);
    a.semaphore("order").try_set_permits(1).await.unwrap();
    let held = a
        .semaphore("order")
        .acquire_with_lease(1, lease)
        .await
        .unwrap();
    let b_waits = wait_for(&b, "order", 1, lease);
    assert!(common::semaphore_queued(&env.admin, "order", 1).await);
    let c_waits = wait_for(&c, "order", 1, lease);
    assert!(common::semaphore_queued(&env.admin, "order", 2).await);
    let t = held.fencing_token();
    held.release().await.unwrap();
    let (_, got_b) = timeout(Duration::from_secs(10), b_waits)
        .await
        .expect("B handed the permit")
        .unwrap();
    assert!(got_b.fencing_token() > t);
    assert!(!c_waits.is_finished(), "C waits behind B");
    assert_eq!(
        env.admin.llen::<i64, _>(queue_key("order")).await.unwrap(),
        1
    );
    let t = got_b.fencing_token();
    got_b.release().await.unwrap();
    let (_, got_c) = timeout(Duration::from_secs(10), c_waits)
        .await
        .expect("C handed the permit")
        .unwrap();
    assert!(got_c.fencing_token() > t);
    got_c.release().await.unwrap();
    assert_eq!(a.semaphore("order").available_permits().await.unwrap(), 1);
}

/// FIFO across clients: a client asking for two permits at the head of the
/// queue is not passed over by a later client asking for one, even while
/// one is free; the release that frees the second hands both to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_ask_at_the_head_of_the_queue_is_not_passed_over() {
    let env = Env::start().await;
    let (a, b, c) = (env.client().await, env.client().await, env.client().await);
    let lease = Duration::from_secs(30);
    a.semaphore("big").try_set_permits(2).await.unwrap();
    let held = a
        .semaphore("big")
        .acquire_with_lease(1, lease)
        .await
        .unwrap();
    let b_waits = wait_for(&b, "big", 2, lease);
    assert!(common::semaphore_queued(&env.admin, "big", 1).await);
    // One permit is free, but B was first.
    assert!(c
        .semaphore("big")
        .try_acquire_with_lease(1, Duration::ZERO, lease)
        .await
        .unwrap()
        .is_none());
    let c_waits = wait_for(&c, "big", 1, lease);
    assert!(common::semaphore_queued(&env.admin, "big", 2).await);
    held.release().await.unwrap();
    let (_, got_b) = timeout(Duration::from_secs(10), b_waits)
        .await
        .expect("B handed both permits")
        .unwrap();
    assert_eq!(got_b.permits(), 2);
    assert!(!c_waits.is_finished(), "C waits behind B");
    got_b.release().await.unwrap();
    let (_, got_c) = timeout(Duration::from_secs(10), c_waits)
        .await
        .expect("C handed a permit")
        .unwrap();
    got_c.release().await.unwrap();
}

/// A waiter of a process that died (its queue entry, nobody behind it) is
/// handed the permit and keeps it for its lease; the next waiter gets it
/// then, within a quarter of its own lease (how often a queued waiter
/// looks again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_waiter_holds_the_others_up_for_one_lease_at_most() {
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    let lease = Duration::from_millis(1500);
    a.semaphore("crash").try_set_permits(1).await.unwrap();
    let held = a
        .semaphore("crash")
        .acquire_with_lease(1, Duration::from_secs(30))
        .await
        .unwrap();
    let ghost_lease = 1200;
    let _: i64 = env
        .admin
        .rpush(
            queue_key("crash"),
            format!("{ghost_lease} 1 00000000-dead-dead-dead-000000000000:1:1#1"),
        )
        .await
        .unwrap();
    let b_waits = wait_for(&b, "crash", 1, lease);
    assert!(common::semaphore_queued(&env.admin, "crash", 2).await);
    let released = Instant::now();
    held.release().await.unwrap();
    let holders: Vec<String> = env
        .admin
        .zrange(
            common::key("sem", "leases", "crash"),
            0,
            -1,
            None,
            false,
            None,
            false,
        )
        .await
        .unwrap();
    assert!(
        holders.iter().any(|h| h.starts_with("00000000-dead")),
        "handed to the ghost: {holders:?}"
    );
    let (at, got) = timeout(Duration::from_secs(20), b_waits)
        .await
        .unwrap()
        .unwrap();
    let delay = at - released;
    assert!(
        delay >= Duration::from_millis(ghost_lease - 100),
        "{delay:?}"
    );
    // One lease of the ghost, a quarter of B's, and slack for a loaded
    // machine.
    assert!(
        delay < Duration::from_millis(ghost_lease) + lease / 4 + Duration::from_millis(1500),
        "{delay:?}"
    );
    got.release().await.unwrap();
}

/// A holder that crashed (its permit never released) holds queued waiters
/// up for its lease: the first look after it ends reclaims the permit and
/// hands it to the head of the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holders_permit_goes_to_the_queue_when_its_lease_ends() {
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    a.semaphore("gone").try_set_permits(1).await.unwrap();
    let crashed = Duration::from_secs(1);
    let held = a
        .semaphore("gone")
        .acquire_with_lease(1, crashed)
        .await
        .unwrap();
    let start = Instant::now();
    // Never released: as if its process died.
    std::mem::forget(held);
    let lease = Duration::from_millis(1200);
    let b_waits = wait_for(&b, "gone", 1, lease);
    let (at, got) = timeout(Duration::from_secs(20), b_waits)
        .await
        .unwrap()
        .unwrap();
    let delay = at - start;
    assert!(delay >= Duration::from_millis(900), "{delay:?}");
    assert!(
        delay < crashed + lease / 4 + Duration::from_millis(1500),
        "{delay:?}"
    );
    got.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_leaves_the_queue_and_the_next_one_is_handed_the_permit() {
    let env = Env::start().await;
    let (a, b, c) = (env.client().await, env.client().await, env.client().await);
    let lease = Duration::from_secs(30);
    a.semaphore("leave").try_set_permits(1).await.unwrap();
    let held = a
        .semaphore("leave")
        .acquire_with_lease(1, lease)
        .await
        .unwrap();
    let sem = b.semaphore("leave");
    let gave_up = tokio::spawn(async move {
        sem.try_acquire_with_lease(1, Duration::from_millis(400), lease)
            .await
            .unwrap()
            .is_none()
    });
    assert!(common::semaphore_queued(&env.admin, "leave", 1).await);
    let c_waits = wait_for(&c, "leave", 1, lease);
    assert!(common::semaphore_queued(&env.admin, "leave", 2).await);
    assert!(timeout(Duration::from_secs(10), gave_up)
        .await
        .unwrap()
        .unwrap());
    assert_eq!(
        env.admin.llen::<i64, _>(queue_key("leave")).await.unwrap(),
        1,
        "B left the queue"
    );
    held.release().await.unwrap();
    let (_, got) = timeout(Duration::from_secs(5), c_waits)
        .await
        .expect("C handed the permit at once")
        .unwrap();
    got.release().await.unwrap();
    assert_eq!(
        env.admin.llen::<i64, _>(queue_key("leave")).await.unwrap(),
        0
    );
}

/// A cancelled waiter leaves the queue in the background; a waiter whose
/// client shuts down leaves it before the shutdown returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_and_shut_down_waiters_leave_the_queue() {
    let env = Env::start().await;
    let (a, b, c, d) = (
        env.client().await,
        env.client().await,
        env.client().await,
        env.client().await,
    );
    let lease = Duration::from_secs(30);
    a.semaphore("bye").try_set_permits(1).await.unwrap();
    let held = a
        .semaphore("bye")
        .acquire_with_lease(1, lease)
        .await
        .unwrap();
    let b_waits = wait_for(&b, "bye", 1, lease);
    assert!(common::semaphore_queued(&env.admin, "bye", 1).await);
    let c_waits = wait_for(&c, "bye", 1, lease);
    assert!(common::semaphore_queued(&env.admin, "bye", 2).await);
    let d_waits = wait_for(&d, "bye", 1, lease);
    assert!(common::semaphore_queued(&env.admin, "bye", 3).await);
    b_waits.abort();
    assert!(b_waits.await.unwrap_err().is_cancelled());
    c.shutdown().await.unwrap();
    assert!(c_waits.await.is_err(), "C's wait ended with its client");
    assert!(common::semaphore_queued(&env.admin, "bye", 1).await);
    held.release().await.unwrap();
    let (_, got) = timeout(Duration::from_secs(5), d_waits)
        .await
        .expect("D handed the permit at once")
        .unwrap();
    got.release().await.unwrap();
}

/// A queue key of another type: the attempt that would queue fails naming
/// it, and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_of_another_type_is_an_error_naming_it() {
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    let lease = Duration::from_secs(30);
    a.semaphore("typed").try_set_permits(1).await.unwrap();
    let held = a
        .semaphore("typed")
        .acquire_with_lease(1, lease)
        .await
        .unwrap();
    let _: () = env
        .admin
        .set(queue_key("typed"), "not a queue", None, None, false)
        .await
        .unwrap();
    let hash: std::collections::HashMap<String, String> = env
        .admin
        .hgetall(common::key("sem", "hold", "typed"))
        .await
        .unwrap();
    let err = b
        .semaphore("typed")
        .try_acquire_with_lease(1, Duration::from_secs(5), lease)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, redisync::Error::WrongType { key, .. } if key.contains("queue")),
        "{err:?}"
    );
    let after: std::collections::HashMap<String, String> = env
        .admin
        .hgetall(common::key("sem", "hold", "typed"))
        .await
        .unwrap();
    assert_eq!(hash, after, "nothing written");
    // The holder's release still frees the permit.
    held.release().await.unwrap();
    assert_eq!(a.semaphore("typed").available_permits().await.unwrap(), 1);
}

/// A waiter handed a permit whose message never arrives finds it on its
/// next look (a fresh grant of the same permit, with a new token), also
/// when other permits are free by then: the permit is counted once, so
/// every permit is free again after the releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_whose_message_is_lost_is_found_on_the_next_look_and_counted_once() {
    let env = Env::start().await;
    let (a, b, w) = (env.client().await, env.client().await, env.client().await);
    let long = Duration::from_secs(30);
    a.semaphore("lost").try_set_permits(2).await.unwrap();
    let held_a = a
        .semaphore("lost")
        .acquire_with_lease(1, long)
        .await
        .unwrap();
    let held_b = b
        .semaphore("lost")
        .acquire_with_lease(1, long)
        .await
        .unwrap();
    let w_waits = wait_for(&w, "lost", 1, Duration::from_secs(1));
    assert!(common::semaphore_queued(&env.admin, "lost", 1).await);
    // ... and parked: its look after subscribing (the queued one, LPOS) is
    // done, so its next look comes after B's release below.
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            common::command_calls(&env)
                .await
                .get("lpos")
                .copied()
                .unwrap_or(0)
                >= 1
        })
        .await
    );
    // A's permit handed to W as a release would, but no message is sent.
    let _: String = env
        .admin
        .eval(
            "local a = redis.call('zrange', KEYS[1], 0, -1)
             for _, id in ipairs(a) do
               if string.sub(id, 1, 36) == ARGV[1] then redis.call('zrem', KEYS[1], id) end
             end
             local entry = redis.call('lpop', KEYS[2])
             local lease, number, id = string.match(entry, '^(%d+) (%d+) (.+)$')
             local t = redis.call('time')
             redis.call('zadd', KEYS[1], t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(lease), id)
             return id",
            vec![
                common::key("sem", "leases", "lost"),
                queue_key("lost"),
            ],
            vec![a.id().to_string()],
        )
        .await
        .unwrap();
    // B's release frees a permit: W's next look finds one free.
    held_b.release().await.unwrap();
    let (_, got) = timeout(Duration::from_secs(10), w_waits)
        .await
        .expect("W found its permit")
        .unwrap();
    got.release().await.unwrap();
    assert!(matches!(
        held_a.release().await,
        Err(redisync::Error::NotHeld { .. })
    ));
    assert_eq!(
        w.semaphore("lost").available_permits().await.unwrap(),
        2,
        "a permit counted twice"
    );
}
