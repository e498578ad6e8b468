//! Edges of `Lock`'s queue of waiting clients and its hand-off: a waiter's
//! token floor, keys of another type, a shutdown mid-attempt, a hand-off
//! lost before its replica sync, `inspect`, a crashed holder. Each test
//! failed on the first version of the hand-off (its comment says why).

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::{lock_key, Env};
use fred::prelude::*;
use redisync::__private;
use redisync::{Client, Error};
use redisync_testkit::{Direction, FaultProxy};
use tokio::time::timeout;

use common::lock_queue_key as queue_key;

fn fence_key(name: &str) -> String {
    common::key("lock", "fence", name)
}

/// `try_lock_with_min_token` promises a token of at least `min_token` for
/// a new acquisition when the bound is at most one second ahead of the
/// server clock. A waiter that is handed the lock by a release gets
/// `max(old token, ~f) + 1` or the server time: `hand_to_next`
/// (lua/lib/lock.lua) never sees the waiter's floor (the queue entry
/// "<lease> <number> <owner>" does not carry it), so the bound is ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_hold_honours_the_waiters_min_token() {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    let g = a.lock("floor").lock().await.unwrap();
    // 0.95 s ahead of the server clock: honoured by any grant before then.
    let floor = common::server_us(&env.admin).await + 950_000;
    let lock_b = b.lock("floor");
    let waiter = tokio::spawn(async move {
        __private::try_lock_with_min_token(&lock_b, Duration::from_secs(20), None, floor).await
    });
    assert!(
        common::lock_queued(&env.admin, "floor", 1).await,
        "B never queued"
    );
    g.unlock().await.unwrap();
    let got = timeout(Duration::from_secs(10), waiter)
        .await
        .expect("B handed the lock")
        .unwrap()
        .unwrap()
        .expect("B got the lock within its wait");
    let now = common::server_us(&env.admin).await;
    assert!(
        got.fencing_token() >= floor || now >= floor,
        "handed token {} is below the min_token {floor} B asked for \
         (still {} us ahead of the server clock after the grant)",
        got.fencing_token(),
        floor.saturating_sub(now),
    );
    got.unlock().await.unwrap();
}

/// A key of another type at the wait queue's name makes the holder's
/// release fail once anybody marked '~w' (a zero-wait `try_lock` does,
/// without touching the queue): `lock_release.lua` calls `hand_to_next`,
/// whose LPOP on the queue errors, and the release returns the error
/// before deleting the hash. The lock then stays held (the guard is gone,
/// the watchdog no longer renews it) until its 30 s lease ends, although
/// its holder unlocked it. Before the change the release never read the
/// queue key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_type_queue_key_does_not_keep_an_unlocked_lock_held() {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    let g = a.lock("wq").lock().await.unwrap();
    let _: () = env
        .admin
        .set(queue_key("wq"), "not a list", None, None, false)
        .await
        .unwrap();
    // A zero wait never queues, but marks that somebody asked.
    assert!(b
        .lock("wq")
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .is_none());
    let unlocked = g.unlock().await;
    let pttl: i64 = env.admin.pttl(lock_key("wq")).await.unwrap();
    assert!(
        unlocked.is_ok() && pttl == -2,
        "unlock() = {unlocked:?}; the lock stays held for another {pttl} ms"
    );
}

/// A hand-off writes the fencing counter with SET whatever the key holds:
/// `hand_to_next` neither reads nor type-checks it (`lock_release.lua` and
/// `lock_abandon.lua` do not list it in their checks), so a key of another
/// type at the counter's name is silently replaced. Every other script
/// that touches the counter (`grant` in `lock_acquire.lua` via
/// `read_fence`, `lock_advance_fence.lua`, `lock_force_unlock.lua`) answers
/// `WRONGTYPE` and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_never_overwrites_a_key_of_another_type_at_the_fencing_counter() {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    let g = a.lock("wf").lock().await.unwrap();
    let lock_b = b.lock("wf");
    let waiter = tokio::spawn(async move { lock_b.try_lock(Duration::from_secs(20), None).await });
    assert!(
        common::lock_queued(&env.admin, "wf", 1).await,
        "B never queued"
    );
    // Somebody else's data at the counter's name.
    let _: i64 = env.admin.del(fence_key("wf")).await.unwrap();
    let _: i64 = env
        .admin
        .hset(fence_key("wf"), ("precious", "data"))
        .await
        .unwrap();
    let unlocked = g.unlock().await;
    let kind: String = env.admin.r#type(fence_key("wf")).await.unwrap();
    waiter.abort();
    assert_eq!(
        kind, "hash",
        "the release (unlock() = {unlocked:?}) replaced the hash at the fencing counter's key"
    );
}

/// A client that shuts down while its first (queuing) attempt is in flight
/// leaves its entry in the queue: `contend` passes `failed()` the `queued`
/// flag from before the attempt (false for the first), so
/// `leave_at_shutdown` does nothing, and the armed undo's background task
/// is refused because the client is closed (`spawn_undo`:
/// `start_background()` is `None`). docs/fairness.md says a client shut
/// down leaves the queue before it returns; instead the next release hands
/// the lock to the dead entry and everybody waits for its 30 s lease.
///
/// On a current-thread runtime (here) it always happens. On a multi-thread
/// runtime it is a race, lost in about half the runs: the waiter may see
/// `closing` (set by `Hub::close`, which then wakes every slot) before
/// `Client::shutdown` sets `closed`, and then its background undo still
/// starts and removes the entry.
#[tokio::test]
async fn a_client_shut_down_during_its_first_attempt_leaves_the_queue() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let a = env.client().await;
    let b = Client::connect(&proxy.url()).await.expect("connect");
    let g = a.lock("sd").lock().await.unwrap();
    // B's attempt runs in Redis (it queues), its reply is held back.
    proxy.blackhole(Direction::Downstream);
    let lock_b = b.lock("sd");
    let b_waits = tokio::spawn(async move { lock_b.lock().await.map(|_| ()) });
    assert!(
        common::lock_queued(&env.admin, "sd", 1).await,
        "B's attempt never ran"
    );
    // The shutdown starts (its first poll closes the client at once) while
    // the attempt's reply is held back; then the reply may flow again (a
    // shutdown that leaves the queue needs its own replies).
    let mut shutdown = Box::pin(b.shutdown());
    assert!(futures::poll!(shutdown.as_mut()).is_pending());
    proxy.heal();
    let got = timeout(Duration::from_secs(20), b_waits)
        .await
        .expect("B's waiter ends at the shutdown")
        .unwrap();
    assert!(matches!(got, Err(Error::Shutdown)), "{got:?}");
    timeout(Duration::from_secs(20), shutdown)
        .await
        .expect("shutdown ends")
        .unwrap();
    let left: Vec<String> = env.admin.lrange(queue_key("sd"), 0, -1).await.unwrap();
    // What that costs: A's release hands the lock to the shut-down client.
    g.unlock().await.unwrap();
    let fields: HashMap<String, String> = env.admin.hgetall(lock_key("sd")).await.unwrap();
    let pttl: i64 = env.admin.pttl(lock_key("sd")).await.unwrap();
    assert!(
        left.is_empty(),
        "the shut-down client's entry {left:?} stays queued; A's release handed it the lock: \
         {fields:?}, held for another {pttl} ms"
    );
}

/// With `replica_sync`, `handed()` (engine/acquire.rs) renews the handed
/// hold before its `WAIT` and returns whatever error that renewal gives
/// (`held.extend(..)?`-like: `return Err(e)`). When the hold is gone by
/// the time the renewal runs (force-unlocked here; expired or taken over
/// after a partition likewise), the acquisition fails with
/// `Error::NotHeld`, an error `lock`/`try_lock` never document (they
/// document `InvalidArgument`, `WrongType`, `Redis`; replica sync adds
/// `ReplicaSync`), instead of waiting on like any acquisition that finds the
/// lock free or busy. A fresh grant in the same spot answers with the
/// guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_lost_before_its_sync_does_not_fail_the_wait_with_not_held() {
    const LEASE: Duration = Duration::from_secs(45);
    let primary = redisync_testkit::RedisServer::start().await;
    let _replica = common::replica_of(&primary).await;
    let admin = common::admin(&primary.url()).await;
    let proxy = FaultProxy::start(primary.addr()).await;
    let a = Client::connect(&primary.url()).await.unwrap();
    let w = Client::builder(&proxy.url())
        .replica_sync(1, Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let g = a.lock("nh").lock().await.unwrap();
    let lock_w = w.lock("nh");
    let waiting =
        tokio::spawn(async move { lock_w.try_lock(Duration::from_mins(1), Some(LEASE)).await });
    assert!(common::lock_queued(&admin, "nh", 1).await, "W never queued");
    // W hears the hand-off; its renewal waits in the proxy.
    proxy.blackhole(Direction::Upstream);
    g.unlock().await.unwrap();
    let fields: HashMap<String, String> = admin.hgetall(lock_key("nh")).await.unwrap();
    assert!(
        fields.keys().any(|f| f.starts_with(&w.id().to_string())),
        "{fields:?}"
    );
    // The hand-off message reaches W (downstream is open) meanwhile.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(a.lock("nh").force_unlock().await.unwrap());
    proxy.heal();
    let got = timeout(Duration::from_secs(20), waiting)
        .await
        .expect("W's wait ends or goes on")
        .unwrap();
    assert!(
        !matches!(got, Err(Error::NotHeld { .. })),
        "the wait failed with {got:?}"
    );
}

/// `Inspection::waiters` is documented as "who waits for it in Redis,
/// first in line first". A plain lock's waiting clients now wait in Redis
/// (the queue key), but the inspector reads only the hash and the fencing
/// counter for `Kind::Lock` (`roles()` in inspect.rs), so it reports
/// nobody waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_lists_the_clients_queued_for_a_lock() {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    let g = a.lock("seen").lock().await.unwrap();
    let lock_b = b.lock("seen");
    let waiter = tokio::spawn(async move { lock_b.try_lock(Duration::from_secs(20), None).await });
    assert!(
        common::lock_queued(&env.admin, "seen", 1).await,
        "B never queued"
    );
    let seen = a.lock("seen").inspect().await.unwrap();
    let queue: Vec<String> = env.admin.lrange(queue_key("seen"), 0, -1).await.unwrap();
    waiter.abort();
    drop(g);
    assert_eq!(
        seen.waiters.len(),
        1,
        "Redis queues {queue:?}, the inspection lists {:?}",
        seen.waiters
    );
}

/// A release hands the lock to the oldest queued waiter only when the
/// hash carries '~w', which a busy attempt writes into the hash it finds.
/// When the lock becomes free without a release (its holder crashed and
/// the lease ran out), the head waiter's fresh `grant()` (`lock_acquire.lua`)
/// writes a new hash without '~w' although others are still queued; its
/// release then deletes the lock silently (code 2, nothing published, the
/// queue not read), and the next queued client sleeps until its own next
/// look (a quarter of its 30 s lease) while the lock is free.
/// docs/fairness.md: "A release that finds somebody queued does not free the
/// lock: the same script gives it to the oldest entry".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_a_crashed_holder_hands_the_lock_to_the_next_queued_client() {
    let env = Env::start().await;
    let b = env.client().await;
    let c = env.client().await;
    // A holder that crashed: its hash (ours: it has a token), 1.5 s left.
    let _: i64 = env
        .admin
        .hset(
            lock_key("crash"),
            [("00000000-dead-dead-dead-000000000000:1", "1"), ("~t", "5")],
        )
        .await
        .unwrap();
    let _: bool = env
        .admin
        .pexpire(lock_key("crash"), 1500, None)
        .await
        .unwrap();
    let lock_b = b.lock("crash");
    let b_waits = tokio::spawn(async move { lock_b.lock().await.unwrap() });
    assert!(
        common::lock_queued(&env.admin, "crash", 1).await,
        "B never queued"
    );
    let lock_c = c.lock("crash");
    let c_waits = tokio::spawn(async move { lock_c.lock().await.unwrap() });
    assert!(
        common::lock_queued(&env.admin, "crash", 2).await,
        "C never queued"
    );
    // B, first in line, takes the lock once the crashed holder's lease ends.
    let got_b = timeout(Duration::from_secs(10), b_waits)
        .await
        .expect("B got the lock after the crashed holder's lease")
        .unwrap();
    let queued: Vec<String> = env.admin.lrange(queue_key("crash"), 0, -1).await.unwrap();
    let released = tokio::time::Instant::now();
    got_b.unlock().await.unwrap();
    let got_c = timeout(Duration::from_secs(20), c_waits)
        .await
        .expect("C got the lock")
        .unwrap();
    let delay = released.elapsed();
    assert!(
        delay < Duration::from_secs(3),
        "C (queued: {queued:?} when B released) got the free lock only {delay:?} after B's release"
    );
    got_c.unlock().await.unwrap();
}
