//! `RwLock` against real redis-server processes.

mod common;

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Env;
use fred::prelude::*;
use redisync::Error;
use tokio::time::{sleep, Instant};

fn rw_key(name: &str) -> String {
    common::key("rw", "hold", name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_writers_exclude() {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    let r1 = a.rw_lock("doc").read().lock().await.unwrap();
    let r2 = b
        .rw_lock("doc")
        .read()
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .expect("readers share");
    // Another task (another owner) wants to write: it waits for the readers.
    let w = b.rw_lock("doc").write();
    let got = tokio::spawn(async move {
        w.try_lock(Duration::from_millis(100), None)
            .await
            .unwrap()
            .is_some()
    });
    assert!(!got.await.unwrap(), "a writer got in beside readers");
    r1.unlock().await.unwrap();
    r2.unlock().await.unwrap();
    let w = b
        .rw_lock("doc")
        .write()
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .expect("free for a writer");
    assert!(a
        .rw_lock("doc")
        .read()
        .try_lock(Duration::from_millis(100), None)
        .await
        .unwrap()
        .is_none());
    assert!(a
        .rw_lock("doc")
        .write()
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .is_none());
    assert!(b.rw_lock("doc").write().is_locked().await.unwrap());
    w.unlock().await.unwrap();
    assert!(!a.rw_lock("doc").read().is_locked().await.unwrap());
    let exists: i64 = env.admin.exists(rw_key("doc")).await.unwrap();
    assert_eq!(exists, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_of_writers_against_readers_under_load() {
    let env = Env::start().await;
    // >0: readers inside; -1: a writer inside.
    let state = Arc::new(AtomicI32::new(0));
    let mut tasks = Vec::new();
    for c in 0..2 {
        let client = env.client().await;
        for i in 0..6 {
            let rw = client.rw_lock("mix");
            let state = state.clone();
            let writer = (i + c) % 3 == 0;
            tasks.push(tokio::spawn(async move {
                for _ in 0..6 {
                    if writer {
                        let g = rw.write().lock().await.unwrap();
                        assert_eq!(
                            state.compare_exchange(0, -1, Ordering::SeqCst, Ordering::SeqCst),
                            Ok(0),
                            "writer with company"
                        );
                        sleep(Duration::from_millis(1)).await;
                        state.store(0, Ordering::SeqCst);
                        g.unlock().await.unwrap();
                    } else {
                        let g = rw.read().lock().await.unwrap();
                        assert!(
                            state.fetch_add(1, Ordering::SeqCst) >= 0,
                            "reader beside a writer"
                        );
                        sleep(Duration::from_millis(1)).await;
                        state.fetch_sub(1, Ordering::SeqCst);
                        g.unlock().await.unwrap();
                    }
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_sides_and_refused_upgrade() {
    let env = Env::start().await;
    let client = env.client().await;
    let rw = client.rw_lock("re");
    tokio::spawn(async move {
        let r1 = rw.read().lock().await.unwrap();
        let r2 = rw.read().lock().await.unwrap();
        assert_eq!(r1.fencing_token(), r2.fencing_token());
        assert_eq!(rw.read().hold_count().await.unwrap(), 2);
        let started = Instant::now();
        let err = rw
            .write()
            .try_lock(Duration::from_secs(5), None)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::UpgradeNotSupported { .. }), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "refused at once"
        );
        r2.unlock().await.unwrap();
        r1.unlock().await.unwrap();
        let w1 = rw.write().lock().await.unwrap();
        let w2 = rw.write().lock().await.unwrap();
        assert_eq!(w1.fencing_token(), w2.fencing_token());
        assert_eq!(rw.write().hold_count().await.unwrap(), 2);
        w2.unlock().await.unwrap();
        w1.unlock().await.unwrap();
        assert!(!rw.write().is_locked().await.unwrap());
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downgrade_keeps_reading_and_wakes_remote_readers() {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    let rw = a.rw_lock("down");
    let (tx, rx) = tokio::sync::oneshot::channel();
    let holder = tokio::spawn(async move {
        let w = rw
            .write()
            .lock_with_lease(Duration::from_secs(20))
            .await
            .unwrap();
        let r = rw
            .read()
            .lock_with_lease(Duration::from_secs(20))
            .await
            .unwrap();
        assert!(r.fencing_token() > w.fencing_token());
        rx.await.unwrap();
        w.unlock().await.unwrap(); // downgrade: still reading
        assert!(rw.read().is_locked().await.unwrap());
        assert!(rw.read().is_held_by_current_task().await.unwrap());
        sleep(Duration::from_millis(300)).await;
        r.unlock().await.unwrap();
    });
    sleep(Duration::from_millis(100)).await;
    let remote = b.rw_lock("down");
    let waiter =
        tokio::spawn(async move { remote.read().try_lock(Duration::from_secs(10), None).await });
    sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "a reader got in beside the writer");
    let downgraded = Instant::now();
    tx.send(()).unwrap();
    let g = waiter
        .await
        .unwrap()
        .unwrap()
        .expect("woken by the downgrade");
    assert!(
        downgraded.elapsed() < Duration::from_millis(250),
        "remote reader waited {:?}",
        downgraded.elapsed()
    );
    g.unlock().await.unwrap();
    holder.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_release_wakes_all_waiting_readers() {
    let env = Env::start().await;
    let w = env
        .client()
        .await
        .rw_lock("wake")
        .write()
        .lock_with_lease(Duration::from_secs(20))
        .await
        .unwrap();
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let client = env.client().await;
        for _ in 0..3 {
            let rw = client.rw_lock("wake");
            waiters.push(tokio::spawn(async move {
                let g = rw
                    .read()
                    .try_lock(Duration::from_secs(10), None)
                    .await
                    .unwrap()
                    .expect("woken");
                let at = Instant::now();
                sleep(Duration::from_millis(200)).await; // overlap: readers share
                g.unlock().await.unwrap();
                at
            }));
        }
    }
    sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    w.unlock().await.unwrap();
    for t in waiters {
        let at = t.await.unwrap();
        assert!(
            at - released < Duration::from_millis(150),
            "a reader waited {:?}",
            at - released
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_readers_share_expires_while_others_renew() {
    let env = Env::start().await;
    let live = env.client_with_watchdog(Duration::from_millis(300)).await;
    let writer = env.client().await;
    let r = live.rw_lock("ghost").read().lock().await.unwrap();
    // A crashed reader of another process: its share has 400 ms left.
    let now_ms = common::server_ms(&env.admin).await;
    let key = rw_key("ghost");
    let _: () = env
        .admin
        .hset(&key, [("r:dead:1", "1"), ("t:dead:1", "1")])
        .await
        .unwrap();
    common::zadd_ms(
        &env.admin,
        &common::key("rw", "readers", "ghost"),
        now_ms + 400,
        "dead:1",
    )
    .await;
    let rw = writer.rw_lock("ghost");
    let w_task = tokio::spawn(async move {
        let g = rw
            .write()
            .try_lock(Duration::from_secs(10), None)
            .await
            .unwrap()
            .expect("writer gets in");
        (Instant::now(), g)
    });
    sleep(Duration::from_millis(900)).await;
    assert!(!w_task.is_finished(), "the live reader still holds");
    let dead: i64 = env.admin.hexists(&key, "r:dead:1").await.unwrap();
    assert_eq!(
        dead, 0,
        "the crashed reader's share is gone while the live one renews"
    );
    assert!(!r.is_lost());
    let released = Instant::now();
    r.unlock().await.unwrap();
    let (at, g) = w_task.await.unwrap();
    assert!(
        at - released < Duration::from_millis(300),
        "writer waited {:?}",
        at - released
    );
    g.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_type_flush_non_owner_and_cancellation() {
    let env = Env::start().await;
    let client = env.client().await;
    let _: () = env
        .admin
        .set(rw_key("str"), "x", None, None, false)
        .await
        .unwrap();
    let rw = client.rw_lock("str");
    assert!(matches!(
        rw.read().try_lock(Duration::ZERO, None).await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        rw.write().try_lock(Duration::ZERO, None).await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        rw.read().is_locked().await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        rw.write().force_unlock().await,
        Err(Error::WrongType { .. })
    ));
    let v: String = env.admin.get(rw_key("str")).await.unwrap();
    assert_eq!(v, "x");
    assert!(matches!(
        client.rw_lock("").read().lock().await,
        Err(Error::InvalidArgument(_))
    ));

    let rw = client.rw_lock("ok");
    let _: () = env.admin.script_flush(false).await.unwrap();
    let g = rw.write().lock().await.unwrap();
    let _: () = env.admin.script_flush(false).await.unwrap();
    g.extend(Duration::from_secs(40)).await.unwrap();
    g.unlock().await.unwrap();

    // A stale writer cannot release the new one.
    let stale = rw
        .write()
        .lock_with_lease(Duration::from_millis(200))
        .await
        .unwrap();
    sleep(Duration::from_millis(300)).await;
    let other = env.client().await;
    let fresh = other
        .rw_lock("ok")
        .write()
        .try_lock(Duration::from_secs(1), None)
        .await
        .unwrap()
        .expect("expired");
    assert!(matches!(stale.unlock().await, Err(Error::NotHeld { .. })));
    assert!(other.rw_lock("ok").write().is_locked().await.unwrap());
    fresh.unlock().await.unwrap();

    for k in 0..100u64 {
        let (r, w) = (rw.read(), rw.write());
        let _ = tokio::spawn(async move {
            if k % 2 == 0 {
                let _ = tokio::time::timeout(Duration::from_micros(k * 37 % 900), r.lock()).await;
            } else {
                let _ = tokio::time::timeout(Duration::from_micros(k * 37 % 900), w.lock()).await;
            }
        })
        .await;
    }
    sleep(Duration::from_millis(300)).await;
    let exists: i64 = env.admin.exists(rw_key("ok")).await.unwrap();
    assert_eq!(exists, 0, "a cancelled acquisition left the lock held");
}
