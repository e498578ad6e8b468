//! Adversarial review tests of the `FairLock` hand-off redesign, against real
//! redis-server processes.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{eventually, Env};
use fred::prelude::*;
use tokio::time::{timeout, Instant};

fn hash_key(name: &str) -> String {
    common::key("fair", "hold", name)
}

fn queue_key(name: &str) -> String {
    common::key("fair", "queue", name)
}

async fn queue(env: &Env, name: &str) -> Vec<String> {
    env.admin.lrange(queue_key(name), 0, -1).await.unwrap()
}

async fn queue_len(env: &Env, name: &str) -> i64 {
    env.admin.llen(queue_key(name)).await.unwrap()
}

async fn queued(env: &Env, name: &str, n: i64) {
    let ok = eventually(Duration::from_secs(10), || async {
        queue_len(env, name).await == n
    })
    .await;
    assert!(ok, "{name}: {:?} queued, not {n}", queue(env, name).await);
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

async fn server_ms(env: &Env) -> i64 {
    common::server_ms(&env.admin).await
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
    let next = tokio::spawn({
        let lock = b.fair_lock(name).with_queue_lease(HEARTBEAT * 3);
        async move {
            let g = lock.lock().await.unwrap();
            let at = started.elapsed();
            g.unlock().await.unwrap();
            at
        }
    });
    queued(&env, name, 2).await;
    assert!(timeout(Duration::from_secs(10), leaver)
        .await
        .unwrap()
        .unwrap());
    let got_at = timeout(Duration::from_secs(30), next)
        .await
        .unwrap()
        .unwrap();
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
    let next = tokio::spawn({
        let lock = b.fair_lock(name).with_queue_lease(HEARTBEAT * 3);
        async move {
            let g = lock.lock().await.unwrap();
            let at = started.elapsed();
            g.unlock().await.unwrap();
            at
        }
    });
    queued(&env, name, 2).await;
    let got_at = timeout(Duration::from_secs(30), next)
        .await
        .unwrap()
        .unwrap();
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
    let next = tokio::spawn({
        let lock = x.fair_lock(name).with_queue_lease(far);
        async move {
            let g = lock.lock().await.unwrap();
            let at = Instant::now();
            g.unlock().await.unwrap();
            at
        }
    });
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
    let next = tokio::spawn({
        let lock = b.fair_lock(name).with_queue_lease(HEARTBEAT * 3);
        async move {
            let g = lock.lock().await.unwrap();
            let at = Instant::now();
            g.unlock().await.unwrap();
            at
        }
    });
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
