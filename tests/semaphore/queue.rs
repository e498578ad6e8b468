//! A semaphore across clients: a client that finds too few permits joins
//! the semaphore's wait queue in Redis, and a release hands the freed
//! permits to the oldest waiting clients (FIFO, a large ask never passed
//! over); crashed, departed and shut-down waiters hold the others up for a
//! bounded time.

use crate::common;

use common::{cli, SlotMove};

use std::time::Duration;

use common::Env;
use fred::prelude::*;
use tokio::time::{timeout, Instant};

fn queue_key(name: &str) -> String {
    common::key("sem", "queue", name)
}

/// Sets `name` up with `total` permits through `client` and takes
/// `permits` of them with `lease`.
async fn set_up_and_hold(
    client: &redisync::Client,
    name: &str,
    total: u32,
    permits: u32,
    lease: Duration,
) -> redisync::SemaphorePermit {
    let sem = client.semaphore(name);
    sem.try_set_permits(total).await.unwrap();
    sem.acquire_with_lease(permits, lease).await.unwrap()
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
    let held = set_up_and_hold(&a, "order", 1, 1, lease).await;
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
    let held = set_up_and_hold(&a, "big", 2, 1, lease).await;
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
    let held = set_up_and_hold(&a, "leave", 1, 1, lease).await;
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
    let held = set_up_and_hold(&a, "bye", 1, 1, lease).await;
    let b_waits = wait_for(&b, "bye", 1, lease);
    assert!(common::semaphore_queued(&env.admin, "bye", 1).await);
    let sem = c.semaphore("bye");
    let c_waits = tokio::spawn(async move {
        sem.try_acquire_with_lease(1, Duration::from_secs(30), lease)
            .await
            .map(|p| p.is_some())
    });
    assert!(common::semaphore_queued(&env.admin, "bye", 2).await);
    let d_waits = wait_for(&d, "bye", 1, lease);
    assert!(common::semaphore_queued(&env.admin, "bye", 3).await);
    b_waits.abort();
    assert!(b_waits.await.unwrap_err().is_cancelled());
    c.shutdown().await.unwrap();
    assert!(
        matches!(c_waits.await.unwrap(), Err(redisync::Error::Shutdown)),
        "C's wait ended with its client"
    );
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
    let held = set_up_and_hold(&a, "typed", 1, 1, lease).await;
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
    let held_a = set_up_and_hold(&a, "lost", 2, 1, long).await;
    let held_b = b
        .semaphore("lost")
        .acquire_with_lease(1, long)
        .await
        .unwrap();
    let w_waits = wait_for(&w, "lost", 1, Duration::from_secs(1));
    assert!(common::semaphore_queued(&env.admin, "lost", 1).await);
    // ... and parked: its look after subscribing (the queued one, LPOS) is
    // done, so its next look comes after B's release below.
    assert!(common::queued_waiter_looked(&env).await);
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

// Found by review: the bounds of waiters without a queue entry after a
// hand-off, and a leave refused while the slot migrates.

const GHOST: &str = "00000000-dead-dead-dead-000000000000";

fn hold_key(name: &str) -> String {
    common::key("sem", "hold", name)
}

fn leases_key(name: &str) -> String {
    common::key("sem", "leases", name)
}

/// What a crashed waiter's busy attempt leaves: its queue entry and `~q`.
async fn plant_queued(env: &Env, name: &str, entry: &str) {
    let _: i64 = env.admin.rpush(queue_key(name), entry).await.unwrap();
    let _: i64 = env.admin.hset(hold_key(name), ("~q", 1)).await.unwrap();
}

/// Waits until the lease of `id` (or the earliest one when `None`) ended by
/// the server clock.
async fn lease_ended(env: &Env, name: &str, id: &str) {
    let end: Option<f64> = env.admin.zscore(leases_key(name), id).await.unwrap();
    #[allow(clippy::cast_possible_truncation)]
    let end = end.expect("the lease exists") as i64;
    loop {
        let now = common::server_ms(&env.admin).await;
        if now > end {
            return;
        }
        tokio::time::sleep(Duration::from_millis((end - now + 5).unsigned_abs())).await;
    }
}

/// A client holding a permit of `name` got through a wait (so its slot is
/// subscribed and stays so while the permit is held).
async fn subscribed_holder(
    env: &Env,
    c: &redisync::Client,
    name: &str,
    total: u32,
) -> redisync::SemaphorePermit {
    let y = env.client().await;
    let all = y
        .semaphore(name)
        .acquire_with_lease(total, Duration::from_secs(30))
        .await
        .unwrap();
    let sem = c.semaphore(name);
    let waits = tokio::spawn(async move {
        sem.try_acquire_with_lease(1, Duration::from_secs(20), Duration::from_mins(1))
            .await
            .unwrap()
            .expect("handed")
    });
    assert!(common::semaphore_queued(&env.admin, name, 1).await);
    all.release().await.unwrap();
    let held = timeout(Duration::from_secs(10), waits)
        .await
        .unwrap()
        .unwrap();
    y.shutdown().await.unwrap();
    held
}

/// A grant whose own script handed a permit to a queued crashed waiter (a
/// short lease) and took the last permit tells the client "nothing frees
/// before the earliest lease end" computed BEFORE the hand-off: the
/// client's next waiter sleeps until a long unrelated lease ends instead
/// of the crashed waiter's short one, while a permit is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_bound_ignores_a_lease_handed_in_the_same_script() {
    let env = Env::start().await;
    let c = env.client().await;
    let x = env.client().await;
    let name = "stale";
    c.semaphore(name).try_set_permits(3).await.unwrap();
    // C holds one (60 s lease) and is subscribed.
    let _long = subscribed_holder(&env, &c, name, 3).await;
    // X holds two and crashes.
    let crashed = x
        .semaphore(name)
        .acquire_with_lease(2, Duration::from_millis(800))
        .await
        .unwrap();
    let crashed_id: Vec<String> = env
        .admin
        .zrangebyscore(leases_key(name), "-inf", "+inf", false, None)
        .await
        .unwrap();
    std::mem::forget(crashed);
    // A waiter of a crashed process queued meanwhile (lease 300 ms).
    plant_queued(&env, name, &format!("300 1 {GHOST}:1:1#1")).await;
    for id in crashed_id.iter().filter(|id| id.contains("#2")) {
        lease_ended(&env, name, id).await;
    }
    // C's attempt reclaims X's two, hands one to the ghost, takes the last.
    let first = c
        .semaphore(name)
        .try_acquire_with_lease(1, Duration::from_secs(5), Duration::from_mins(1))
        .await
        .unwrap()
        .expect("granted");
    let ghost: Option<f64> = env
        .admin
        .zscore(leases_key(name), format!("{GHOST}:1:1#1"))
        .await
        .unwrap();
    assert!(ghost.is_some(), "the ghost was handed its permit");
    // The ghost's permit is free again 300 ms later: C's next waiter
    // (lease 1 s) must get it within the ghost's lease plus a quarter of
    // its own, give or take a loaded machine.
    let start = Instant::now();
    let next = c
        .semaphore(name)
        .try_acquire_with_lease(1, Duration::from_secs(5), Duration::from_secs(1))
        .await
        .unwrap();
    let waited = start.elapsed();
    assert!(
        next.is_some() && waited < Duration::from_secs(3),
        "C's next waiter got {:?} after {waited:?} though the ghost's permit was free after 300 ms",
        next.as_ref().map(redisync::Guard::fencing_token)
    );
    drop(first);
}

/// A queued waiter whose hand-off message was lost finds its permit on its
/// next look (`handed_before`) with no permit left free: its client's next
/// waiter then waits for a release message without a queue entry, but the
/// script never marks the client in `~w`, so another client's release
/// publishes nothing and that waiter sleeps until the server's bound while
/// a permit is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_hand_off_found_on_a_look_leaves_its_client_unmarked() {
    let env = Env::start().await;
    // D holds both permits (its client is marked, as every grant of the
    // last permit marks), and later takes one again.
    let (w, d) = (env.client().await, env.client().await);
    let h = d.clone();
    let name = "unmarked";
    h.semaphore(name).try_set_permits(2).await.unwrap();
    let held = h
        .semaphore(name)
        .acquire_with_lease(2, Duration::from_secs(30))
        .await
        .unwrap();
    let lease = Duration::from_secs(8);
    let sem = w.semaphore(name);
    let w1 = tokio::spawn(async move {
        sem.try_acquire_with_lease(1, Duration::from_secs(30), lease)
            .await
            .unwrap()
            .expect("W1 granted")
    });
    assert!(common::semaphore_queued(&env.admin, name, 1).await);
    // Parked: its look after subscribing (LPOS) is done.
    assert!(common::queued_waiter_looked(&env).await);
    // W's second task waits behind W1 in its client.
    let sem = w.semaphore(name);
    let w2 = tokio::spawn(async move {
        let p = sem
            .try_acquire_with_lease(1, Duration::from_secs(30), lease)
            .await
            .unwrap()
            .expect("W2 granted");
        (Instant::now(), p)
    });
    // D's release of its two permits hands one to W1, as
    // semaphore_release.lua does (the mark, D's own, stays), but the
    // message is lost.
    let handed: String = env
        .admin
        .eval(
            "local held = redis.call('zrange', KEYS[2], 0, -1)
             redis.call('zrem', KEYS[2], held[1])
             local entry = redis.call('lpop', KEYS[3])
             local lease, number, id = string.match(entry, '^(%d+) (%d+) (.+)$')
             local t = redis.call('time')
             local now = t[1] * 1000 + math.floor(t[2] / 1000)
             redis.call('zadd', KEYS[2], now + tonumber(lease), id)
             local token = math.max(tonumber(redis.call('hget', KEYS[1], '~t')) + 1, t[1] * 1000000 + t[2])
             redis.call('hset', KEYS[1], '~used', 1, '~t', string.format('%.0f', token))
             redis.call('hdel', KEYS[1], '~q')
             return id",
            vec![hold_key(name), leases_key(name), queue_key(name)],
            Vec::<String>::new(),
        )
        .await
        .unwrap();
    assert!(handed.starts_with(&w.id().to_string()));
    std::mem::forget(held); // that acquisition is gone already
                            // D takes the last permit meanwhile.
    let d_held = d
        .semaphore(name)
        .try_acquire_with_lease(1, Duration::ZERO, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("D granted the free permit");
    // W1's next look (within 2 s) finds its permit.
    let w1_held = timeout(Duration::from_secs(10), w1).await.unwrap().unwrap();
    // Who needs a release message now: D only (W is not marked, though
    // its next waiter waits for one).
    let marks: Option<String> = env.admin.hget(hold_key(name), "~w").await.unwrap();
    // D gives its permit back: W2 should get it promptly.
    let released = Instant::now();
    d_held.release().await.unwrap();
    let (at, w2_held) = timeout(Duration::from_secs(20), w2).await.unwrap().unwrap();
    let delay = at - released;
    assert!(
        delay < Duration::from_secs(3),
        "W2 got the permit {delay:?} after D's release (~w before it: {marks:?}; W is {}, D is {})",
        w.id(),
        d.id()
    );
    drop((w1_held, w2_held));
}

/// A client whose grant took the last permit has its next waiter wait
/// (without a queue entry) until a release or the earliest lease end. When
/// that client's release hands the permit to a queued waiter of a crashed
/// process (short lease), the release no longer wakes its own waiters
/// (`Released::handed`), and nothing tells them when the crashed waiter's
/// lease ends: they sleep until the old bound while the permit is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_handed_to_a_crashed_waiter_leaves_local_waiters_asleep() {
    let env = Env::start().await;
    let a = env.client().await;
    let name = "handsoff";
    a.semaphore(name).try_set_permits(2).await.unwrap();
    // A holds one (60 s lease) and is subscribed.
    let _long = subscribed_holder(&env, &a, name, 2).await;
    // A1 takes the last permit (A is marked, its next waiter waits).
    let a1 = a
        .semaphore(name)
        .try_acquire_with_lease(1, Duration::from_secs(5), Duration::from_mins(1))
        .await
        .unwrap()
        .expect("A1 granted");
    // A waiter of a crashed process queued meanwhile (lease 300 ms).
    plant_queued(&env, name, &format!("300 1 {GHOST}:1:1#1")).await;
    let sem = a.semaphore(name);
    let a2 = tokio::spawn(async move {
        let start = Instant::now();
        let p = sem
            .try_acquire_with_lease(1, Duration::from_secs(8), Duration::from_secs(1))
            .await
            .unwrap();
        (start.elapsed(), p)
    });
    // A1's release hands its permit to the ghost.
    a1.release().await.unwrap();
    let ghost: Option<f64> = env
        .admin
        .zscore(leases_key(name), format!("{GHOST}:1:1#1"))
        .await
        .unwrap();
    assert!(ghost.is_some(), "the ghost was handed the permit");
    let (waited, got) = timeout(Duration::from_secs(20), a2).await.unwrap().unwrap();
    assert!(
        got.is_some() && waited < Duration::from_secs(3),
        "A2 got {:?} after {waited:?} though the ghost's permit was free 300 ms after A1's release",
        got.as_ref().map(redisync::Guard::fencing_token)
    );
}

/// A waiter that gives up while its semaphore's slot migrates (the queue
/// moved already, the hash and the lease zset not yet) runs its undo; the
/// cluster refuses the script over the three keys, so the release runs
/// without the queue key, which also skips the leave: the undo reports
/// success and the entry stays in the queue (no TTL). After the migration
/// the dead entry is handed the next free permit, for its whole lease.
///
/// Known gap (`cargo test --test semaphore -- --ignored queue::`): the undo now
/// returns the refusal instead of skipping the leave, and retries; but B's
/// client shuts down before the slot settles, which cuts the retries short,
/// and the entry costs what a crashed waiter's costs (one lease). Closing
/// it needs a leave that the cluster does not refuse mid-migration (by the
/// queue key alone: a one-key script timed out on the ASK redirect here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "known gap: a leave refused mid-migration and cut short by a shutdown"]
async fn a_waiter_that_gives_up_mid_migration_leaves_its_entry_behind() {
    let name = "mig";
    let cluster = redisync_testkit::RedisCluster::start(3, 0).await;
    let a = redisync::Client::connect(&cluster.url()).await.unwrap();
    let b = redisync::Client::connect(&cluster.url()).await.unwrap();
    let slot_move = SlotMove::plan(&cluster, &hold_key(name)).await;
    let (src, dst) = (slot_move.src, slot_move.dst);
    a.semaphore(name).try_set_permits(1).await.unwrap();
    let held = a
        .semaphore(name)
        .acquire_with_lease(1, Duration::from_secs(30))
        .await
        .unwrap();
    let sem = b.semaphore(name);
    let gives_up = tokio::spawn(async move {
        sem.try_acquire_with_lease(1, Duration::from_secs(4), Duration::from_secs(30))
            .await
    });
    let queued = common::eventually(Duration::from_secs(10), || async {
        cli(src, &["llen", &queue_key(name)]).await == "1"
    })
    .await;
    assert!(queued, "B queued");
    // The slot starts to move; the queue goes first.
    slot_move.begin().await;
    slot_move.migrate(&[&queue_key(name)]).await;
    // B gives up (its deadline passes) while the slot is half moved: it
    // times out or fails (the attempts are refused meanwhile); either way
    // its undo runs, before B's shutdown returns.
    let outcome = timeout(Duration::from_secs(20), gives_up)
        .await
        .unwrap()
        .unwrap();
    assert!(!matches!(outcome, Ok(Some(_))), "B gave up: {outcome:?}");
    let b_id = b.id();
    b.shutdown().await.unwrap();
    // The slot finishes moving.
    slot_move
        .migrate(&[&hold_key(name), &leases_key(name)])
        .await;
    slot_move.finish(&cluster).await;
    let left = cli(dst, &["lrange", &queue_key(name), "0", "-1"]).await;
    // What it costs: once A gives its permit back, a newcomer finds it
    // taken by the entry of B, which gave up long ago.
    held.release().await.unwrap();
    let c = redisync::Client::connect(&cluster.url()).await.unwrap();
    let got = c
        .semaphore(name)
        .try_acquire_with_lease(1, Duration::ZERO, Duration::from_secs(30))
        .await
        .unwrap();
    let holders = cli(dst, &["zrange", &leases_key(name), "0", "-1"]).await;
    assert!(
        left.is_empty() && got.is_some(),
        "B gave up ({outcome:?}) but its queue entry stayed: {left:?}; after A's release a newcomer got {:?} and the permit is held by {holders:?} (B is {b_id})",
        got.as_ref().map(redisync::Guard::fencing_token)
    );
}

/// FIFO keeps a small ask behind a large one at the head of the queue while
/// permits are free. When the large ask gives up (its deadline passes; a
/// cancellation or a shutdown leaves the same way), its leave hands the free
/// permits on to the entries behind it: the next waiter does not sleep until
/// its own next look (a quarter of its lease: here 150 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_ask_that_gives_up_at_the_head_hands_free_permits_to_the_waiter_behind_it() {
    let name = "head-leaves";
    let long = Duration::from_mins(10);
    let env = Env::start().await;
    let (a, b, c) = (env.client().await, env.client().await, env.client().await);
    a.semaphore(name).try_set_permits(3).await.unwrap();
    let held = a.semaphore(name).acquire_with_lease(1, long).await.unwrap();
    // B asks for all 3 and gives up after 2 s.
    let sem = b.semaphore(name);
    let big = tokio::spawn(async move {
        sem.try_acquire_with_lease(3, Duration::from_secs(2), long)
            .await
            .map(|p| p.is_some())
    });
    assert!(common::semaphore_queued(&env.admin, name, 1).await);
    // C asks for 1 (2 are free) and queues behind B.
    let sem = c.semaphore(name);
    let small = tokio::spawn(async move {
        sem.try_acquire_with_lease(1, Duration::from_mins(1), long)
            .await
    });
    assert!(common::semaphore_queued(&env.admin, name, 2).await);
    let gave_up = timeout(Duration::from_secs(20), big)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(gave_up, Ok(false)), "B gave up: {gave_up:?}");
    let got = timeout(Duration::from_secs(20), small)
        .await
        .expect("C still waits with 2 permits free after B left the head of the queue")
        .unwrap()
        .unwrap()
        .expect("C granted");
    got.release().await.unwrap();
    held.release().await.unwrap();
}
