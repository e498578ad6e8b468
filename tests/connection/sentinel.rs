//! redisync through Redis Sentinel: `redis-sentinel://` URLs and failover.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redisync::Client;
use redisync_testkit::RedisSentinels;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_follow_a_sentinel_failover() {
    let mut setup = RedisSentinels::start().await;
    let url = setup.url();
    let counter = Arc::new(AtomicU32::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let client = Client::builder(&url)
            .watchdog_timeout(Duration::from_secs(2))
            .command_timeout(Duration::from_millis(500))
            .connect()
            .await
            .expect("connect through the sentinels");
        for _ in 0..2 {
            let lock = client.lock("sentinel:lock");
            let (counter, stop) = (counter.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    // Errors while the primary is down are expected: retry.
                    let Ok(Some(g)) = lock.try_lock(Duration::from_secs(2), None).await else {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    counter.fetch_add(1, Ordering::SeqCst);
                    let _ = g.unlock().await;
                }
            }));
        }
    }
    let working = common::eventually(Duration::from_secs(10), || async {
        counter.load(Ordering::SeqCst) > 5
    })
    .await;
    assert!(working, "works through the sentinels");
    let replica = setup.replica().port();
    setup.primary_mut().kill().await;
    let killed_at = tokio::time::Instant::now();
    let before = counter.load(Ordering::SeqCst);
    let deadline = killed_at + Duration::from_secs(25);
    while counter.load(Ordering::SeqCst) < before + 20 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no progress after the failover"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The sentinel asked may learn of the promotion a moment after the
    // clients followed it.
    let promoted = common::eventually(Duration::from_secs(10), || async {
        setup.current_primary_port().await == Some(replica)
    })
    .await;
    assert!(promoted, "the replica was promoted");
    eprintln!(
        "progress resumed {:?} after the primary was killed",
        killed_at.elapsed()
    );
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(10), t)
            .await
            .expect("worker stuck")
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_parked_before_a_failover_wakes_after_it() {
    use fred::interfaces::KeysInterface;
    let mut setup = RedisSentinels::start().await;
    let url = setup.url();
    let connect = || {
        Client::builder(&url)
            .command_timeout(Duration::from_millis(500))
            .connect()
    };
    let (a, b) = (connect().await.unwrap(), connect().await.unwrap());
    let held = a
        .lock("parked")
        .lock_with_lease(Duration::from_secs(40))
        .await
        .unwrap();
    // The replica has the lock before the primary dies.
    let replica_admin = common::admin(&setup.replica().url()).await;
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            replica_admin
                .exists::<i64, _>(common::lock_key("parked"))
                .await
                .unwrap()
                == 1
        })
        .await
    );
    let lock = b.lock("parked");
    let waiter = tokio::spawn(async move {
        common::try_lock_through_failover(&lock, Duration::from_secs(35)).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let replica = setup.replica().port();
    setup.primary_mut().kill().await;
    // Wait for the promotion and for the holder's client to reach the new
    // primary (its lock came along through replication).
    let check = a.lock("parked");
    assert!(
        common::eventually(Duration::from_secs(20), || async {
            setup.current_primary_port().await == Some(replica)
                && matches!(check.is_locked().await, Ok(true))
        })
        .await,
        "no failover"
    );
    assert!(!waiter.is_finished(), "the waiter must still be waiting");
    let released = tokio::time::Instant::now();
    held.unlock().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the parked waiter was not woken after the failover")
        .unwrap()
        .unwrap()
        .expect("acquired");
    eprintln!("woken {:?} after the release", released.elapsed());
    got.unlock().await.unwrap();
}
