//! redisync through Redis Sentinel: `redis-sentinel://` URLs and failover.

mod common;

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
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        counter.load(Ordering::SeqCst) > 5,
        "works through the sentinels"
    );
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
    assert_eq!(
        setup.current_primary_port().await,
        Some(replica),
        "the replica was promoted"
    );
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
