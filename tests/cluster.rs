//! Every primitive on a 3-primary Redis Cluster (with replicas).
#![allow(clippy::many_single_char_names)]

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redisync::Client;
use redisync_testkit::RedisCluster;

async fn client(cluster: &RedisCluster) -> Client {
    Client::connect(&cluster.url())
        .await
        .expect("connect to the cluster")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_spread_over_all_slots_exclude_and_wake() {
    let cluster = RedisCluster::start(3, 1).await;
    let a = client(&cluster).await;
    let b = client(&cluster).await;
    let inside: Arc<Vec<AtomicU32>> = Arc::new((0..12).map(|_| AtomicU32::new(0)).collect());
    let mut tasks = Vec::new();
    for (ci, c) in [a.clone(), b.clone()].into_iter().enumerate() {
        for t in 0..6 {
            let c = c.clone();
            let inside = inside.clone();
            tasks.push(tokio::spawn(async move {
                for round in 0..6 {
                    let n = (t + round + ci) % 12;
                    let lock = c.lock(&format!("cluster:lock:{n}"));
                    let g = lock.lock().await.unwrap();
                    assert_eq!(
                        inside[n].fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders of lock {n}"
                    );
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside[n].fetch_sub(1, Ordering::SeqCst);
                    g.unlock().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("no stuck waiter")
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_hash_tag_names_work_for_every_primitive() {
    let cluster = RedisCluster::start(3, 1).await;
    let a = client(&cluster).await;
    let b = client(&cluster).await;
    for name in ["a{b}c", "{}x", "a{", "{{a}}", "}x", "plain"] {
        let g = a.lock(name).lock().await.unwrap();
        // A waiter on another client is woken by the release (sharded pub/sub).
        let lock = b.lock(name);
        let waiter = tokio::spawn(async move { lock.try_lock(Duration::from_secs(5), None).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let released = tokio::time::Instant::now();
        g.unlock().await.unwrap();
        let got = waiter.await.unwrap().unwrap().expect("woken");
        assert!(
            released.elapsed() < Duration::from_millis(500),
            "{name}: woken after {:?}",
            released.elapsed()
        );
        got.unlock().await.unwrap();

        let f = a.fair_lock(name).lock().await.unwrap();
        f.unlock().await.unwrap();
        let r = a.rw_lock(name).read().lock().await.unwrap();
        let w = b.rw_lock(name).write();
        assert!(w
            .try_lock(Duration::from_millis(50), None)
            .await
            .unwrap()
            .is_none());
        r.unlock().await.unwrap();
        let sem = a.semaphore(name);
        sem.try_set_permits(1).await.unwrap();
        sem.acquire(1).await.unwrap().release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renews_locks_in_many_slots() {
    let cluster = RedisCluster::start(3, 1).await;
    let c = Client::builder(&cluster.url())
        .watchdog_timeout(Duration::from_millis(600))
        .connect()
        .await
        .unwrap();
    let mut guards = Vec::new();
    for n in 0..20 {
        guards.push(c.lock(&format!("renewed:{n}")).lock().await.unwrap());
    }
    let p = c.semaphore("renewed:sem");
    p.try_set_permits(1).await.unwrap();
    let permit = p.acquire(1).await.unwrap();
    let read = c.rw_lock("renewed:rw").read().lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1800)).await;
    for g in &guards {
        assert!(!g.is_lost(), "lost under the watchdog");
    }
    assert!(!permit.is_lost() && !read.is_lost());
    for g in guards {
        g.unlock().await.unwrap();
    }
    permit.release().await.unwrap();
    read.unlock().await.unwrap();
}
