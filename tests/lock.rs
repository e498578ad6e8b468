//! Reentrant `Lock` against real redis-server processes.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{lock_key, Env};
use fred::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_and_release() {
    let env = Env::start().await;
    let client = env.client().await;
    let lock = client.lock("orders:42");
    let guard = lock.try_lock(Duration::ZERO, None).await.unwrap().expect("free lock");
    assert!(guard.fencing_token() > 0);
    assert!(lock.is_locked().await.unwrap());
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    let ttl: i64 = env.admin.pttl(lock_key("orders:42")).await.unwrap();
    assert!(ttl > 29_000, "watchdog lease set, got {ttl}");
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    let exists: i64 = env.admin.exists(lock_key("orders:42")).await.unwrap();
    assert_eq!(exists, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_three_clients_ten_tasks() {
    let env = Env::start().await;
    let inside = Arc::new(AtomicU32::new(0));
    let total = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let client = env.client().await;
        for _ in 0..10 {
            let lock = client.lock("shared");
            let inside = inside.clone();
            let total = total.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    let g = lock.lock().await.unwrap();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders at once");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    total.fetch_add(1, Ordering::SeqCst);
                    g.unlock().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(total.load(Ordering::SeqCst), 150);
}
