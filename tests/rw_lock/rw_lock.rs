//! `RwLock` against real redis-server processes.

use crate::common;

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Env;
use fred::prelude::*;
use redisync::Error;
use tokio::time::{sleep, timeout, Instant};

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
    let (ready_tx, ready) = tokio::sync::oneshot::channel();
    let (done, done_rx) = tokio::sync::oneshot::channel::<()>();
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
        ready_tx.send(()).unwrap();
        rx.await.unwrap();
        w.unlock().await.unwrap(); // downgrade: still reading
        assert!(rw.read().is_locked().await.unwrap());
        assert!(rw.read().is_held_by_current_task().await.unwrap());
        // Still reading until the remote reader got in: only the
        // downgrade's message can let it in.
        done_rx.await.unwrap();
        r.unlock().await.unwrap();
    });
    ready.await.unwrap();
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
    // (The write lease a missed message would wait for is 20 s.)
    assert!(
        downgraded.elapsed() < Duration::from_secs(3),
        "remote reader waited {:?}",
        downgraded.elapsed()
    );
    done.send(()).unwrap();
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
    // Every reader holds until all six are in: they share, and each was
    // woken (one left waiting would keep the others from the barrier).
    let all_in = Arc::new(tokio::sync::Barrier::new(6));
    for _ in 0..2 {
        let client = env.client().await;
        for _ in 0..3 {
            let rw = client.rw_lock("wake");
            let all_in = all_in.clone();
            waiters.push(tokio::spawn(async move {
                let g = rw
                    .read()
                    .try_lock(Duration::from_secs(10), None)
                    .await
                    .unwrap()
                    .expect("woken");
                let at = Instant::now();
                timeout(Duration::from_secs(5), all_in.wait())
                    .await
                    .expect("all six readers hold at once");
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
        // (A missed message would wait for the 20 s write lease.)
        assert!(
            at - released < Duration::from_secs(3),
            "a reader waited {:?}",
            at - released
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_readers_share_expires_while_others_renew() {
    let env = Env::start().await;
    // A watchdog lease a stalled test process does not lose; the wait
    // below spans more than one.
    let live = env.client_with_watchdog(Duration::from_millis(1500)).await;
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
    sleep(Duration::from_secs(2)).await;
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
    // Woken by the release (the live reader's lease is renewed for ever).
    assert!(
        at - released < Duration::from_secs(3),
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
    // Undone in the background; a leak would hold its 30 s lease.
    let free = common::eventually(Duration::from_secs(5), || async {
        env.admin.exists::<i64, _>(rw_key("ok")).await.unwrap() == 0
    })
    .await;
    assert!(free, "a cancelled acquisition left the lock held");
}

fn queue_key(name: &str) -> String {
    common::key("rw", "queue", name)
}

/// Waits until a writer of `name` waits in its queue in Redis.
async fn writer_waits(env: &Env, name: &str) {
    let key = queue_key(name);
    assert!(
        common::eventually(Duration::from_secs(10), || {
            let admin = env.admin.clone();
            let key = key.clone();
            async move {
                let entries: Vec<String> = admin.lrange(&key, 0, -1).await.unwrap_or_default();
                entries.iter().any(|e| e.split(' ').nth(3) == Some("w"))
            }
        })
        .await,
        "the writer never queued"
    );
}

/// A relay of readers on two clients, each new reader in before the last
/// leaves, never leaves the lock free. A writer waiting on a third client
/// gets in anyway: once it waits, new readers wait behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_holds_back_new_readers_across_clients() {
    let env = Env::start().await;
    let readers = [env.client().await, env.client().await];
    let writer = env.client().await;
    let first = readers[0].rw_lock("relay").read().lock().await.unwrap();
    let writer_in = Arc::new(tokio::sync::Notify::new());
    let w = writer.rw_lock("relay").write();
    let in_at = writer_in.clone();
    let wtask = tokio::spawn(async move {
        let g = w.lock().await.unwrap();
        in_at.notify_one();
        g
    });
    // Each step: the next reader tries (a fresh owner: its own task), and
    // only then the previous one leaves. Without writer preference every
    // try succeeds and the lock is never free for 200 steps.
    let mut held = first;
    let mut steps = 0;
    let mut blocked = false;
    while steps < 200 {
        steps += 1;
        let rw = readers[steps % 2].rw_lock("relay");
        let next = tokio::spawn(async move {
            rw.read()
                .try_lock(Duration::from_millis(50), None)
                .await
                .unwrap()
        })
        .await
        .unwrap();
        let Some(next) = next else {
            blocked = true;
            break;
        };
        held.unlock().await.unwrap();
        held = next;
        tokio::task::yield_now().await;
    }
    assert!(
        blocked,
        "readers kept the lock for {steps} hand-overs past a waiting writer"
    );
    held.unlock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), writer_in.notified())
        .await
        .expect("the writer got in once the readers inside left");
    let g = wtask.await.unwrap();
    // Readers come back after the writer.
    let rw = readers[0].rw_lock("relay");
    let reader = tokio::spawn(async move { rw.read().lock().await.unwrap() });
    g.unlock().await.unwrap();
    reader.await.unwrap().unlock().await.unwrap();
    let marks: i64 = env.admin.exists(queue_key("relay")).await.unwrap();
    assert_eq!(marks, 0, "no queue entry is left behind");
}

/// The owner that reads already re-enters past a waiting writer (it would
/// deadlock otherwise), a child handed the owner too, and a writer's read
/// (downgrade) is never held back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_and_downgrade_pass_a_waiting_writer() {
    let env = Env::start().await;
    let reader_client = env.client().await;
    let writer_client = env.client().await;
    let rw = reader_client.rw_lock("pass");
    let held = rw.read().lock().await.unwrap();
    let writer_owner = redisync::Owner::new();
    let w = writer_client.rw_lock("pass").write();
    let first_writer = tokio::spawn(
        writer_owner
            .clone()
            .scope(async move { w.lock().await.unwrap() }),
    );
    writer_waits(&env, "pass").await;
    // Another owner of the same client waits behind the writer.
    let other = reader_client.rw_lock("pass");
    let fresh = tokio::spawn(async move {
        other
            .read()
            .try_lock(Duration::ZERO, None)
            .await
            .unwrap()
            .is_some()
    });
    assert!(
        !fresh.await.unwrap(),
        "reader_client new reader passed reader_client waiting writer"
    );
    let again = rw
        .read()
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .expect("the reading owner re-enters");
    let owner = redisync::Owner::current();
    let child_rw = rw.clone();
    let child = tokio::spawn(owner.scope(async move {
        child_rw
            .read()
            .try_lock(Duration::ZERO, None)
            .await
            .unwrap()
            .map(|g| g.fencing_token())
    }));
    assert_eq!(child.await.unwrap(), Some(again.fencing_token()));
    again.unlock().await.unwrap();
    held.unlock().await.unwrap();
    let wg = first_writer.await.unwrap();
    // While another writer waits, the writer still takes the read side (reader_client
    // downgrade), and reader_client new reader of its client does not.
    let third_client = env.client().await;
    let w_other = third_client.rw_lock("pass").write();
    let second_writer = tokio::spawn(async move { w_other.lock().await.unwrap() });
    writer_waits(&env, "pass").await;
    let rw_b = writer_client.rw_lock("pass");
    let read_b = rw_b.clone();
    let downgrade = writer_owner
        .scope(async move { read_b.read().try_lock(Duration::ZERO, None).await })
        .await
        .unwrap()
        .expect("the writer reads at once");
    let fresh = tokio::spawn(async move {
        rw_b.read()
            .try_lock(Duration::ZERO, None)
            .await
            .unwrap()
            .is_some()
    });
    assert!(
        !fresh.await.unwrap(),
        "reader_client new reader passed reader_client waiting writer"
    );
    wg.unlock().await.unwrap();
    assert!(
        !second_writer.is_finished(),
        "reader_client writer got in beside the downgraded reader"
    );
    downgrade.unlock().await.unwrap();
    second_writer.await.unwrap().unlock().await.unwrap();
}

/// A writer that stops waiting (timeout, cancelled future, crashed process)
/// stops holding readers back: at once, or after its queue lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_stops_waiting_lets_readers_in() {
    let env = Env::start().await;
    let reader_client = env.client().await;
    let writer_client = env.client().await;
    let other_client = env.client().await;
    let held = reader_client.rw_lock("gone").read().lock().await.unwrap();
    // Timeout: its undo removes its queue entry before try_lock returns.
    let timed_out = writer_client
        .rw_lock("gone")
        .write()
        .try_lock(Duration::from_millis(300), None)
        .await
        .unwrap();
    assert!(timed_out.is_none());
    let marks: i64 = env.admin.exists(queue_key("gone")).await.unwrap();
    assert_eq!(marks, 0, "a timed-out writer left its queue entry");
    other_client
        .rw_lock("gone")
        .read()
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .expect("readers share again")
        .unlock()
        .await
        .unwrap();
    // Cancelled: the background undo removes its entry, and the readers
    // behind it are handed the lock.
    let write = writer_client.rw_lock("gone").write();
    let wtask = tokio::spawn(async move { write.lock().await });
    writer_waits(&env, "gone").await;
    let rc = other_client.rw_lock("gone");
    let reader = tokio::spawn(async move { rc.read().lock().await.unwrap() });
    tokio::task::yield_now().await;
    wtask.abort();
    let got = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("reader_client reader waiting behind reader_client cancelled writer got in")
        .unwrap();
    got.unlock().await.unwrap();
    // Crashed: an entry nobody refreshes holds readers back until its
    // deadline only.
    let now_ms = common::server_ms(&env.admin).await;
    let dead = format!("@{} 10000 1 w dead:1", now_ms + 400);
    let _: () = env.admin.rpush(queue_key("gone"), dead).await.unwrap();
    let _: () = env
        .admin
        .pexpire(queue_key("gone"), 5000, None)
        .await
        .unwrap();
    let rc = other_client.rw_lock("gone");
    assert!(rc
        .read()
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .is_none());
    rc.read()
        .try_lock(Duration::from_secs(10), None)
        .await
        .unwrap()
        .expect("in once the dead writer's deadline passed")
        .unlock()
        .await
        .unwrap();
    held.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_key_of_another_type_is_an_error_and_nothing_is_written() {
    let env = Env::start().await;
    let client = env.client().await;
    let _: () = env
        .admin
        .set(queue_key("wt"), "x", None, None, false)
        .await
        .unwrap();
    let rw = client.rw_lock("wt");
    for res in [
        rw.read().try_lock(Duration::ZERO, None).await,
        rw.write().try_lock(Duration::ZERO, None).await,
    ] {
        assert!(matches!(res, Err(Error::WrongType { .. })), "{res:?}");
    }
    let hold: i64 = env.admin.exists(rw_key("wt")).await.unwrap();
    assert_eq!(hold, 0, "a failed script wrote the hold");
}

/// Found by the simulation: a read re-entry that runs when the readers
/// zset key has run out (its TTL follows the reader's lease) while the hash
/// lives on (a longer write lease before a downgrade covers it). The script
/// found no live reader, freed the lock (deleting the hash with the
/// caller's own read in it), and then answered "re-entered" from the
/// fields it had read first: it wrote a hash with no mode, so another
/// client's writer got in while the re-entered guard said held. The key is
/// deleted here to stand for that expiry (a race of milliseconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_reentry_after_the_readers_key_ran_out_is_a_fresh_read() {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    let rw = a.rw_lock("lapsed");
    // A long write lease covers the hash; the downgrade's read is the only
    // reader once the write side is released.
    let w = rw
        .write()
        .try_lock(Duration::ZERO, Some(Duration::from_secs(30)))
        .await
        .unwrap()
        .expect("free");
    let r = rw
        .read()
        .try_lock(Duration::ZERO, Some(Duration::from_secs(20)))
        .await
        .unwrap()
        .expect("a downgrade");
    w.unlock().await.unwrap();
    let _: i64 = env
        .admin
        .del(common::key("rw", "readers", "lapsed"))
        .await
        .unwrap();
    let again = rw
        .read()
        .try_lock(Duration::ZERO, Some(Duration::from_secs(20)))
        .await
        .unwrap()
        .expect("the read side is free");
    assert!(!again.is_lost());
    let other = b
        .rw_lock("lapsed")
        .write()
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap();
    assert!(
        other.is_none(),
        "a writer got in beside a read guard that says held (token {}, the old one {})",
        again.fencing_token(),
        r.fencing_token()
    );
    assert!(
        again.fencing_token() > r.fencing_token() && r.is_lost(),
        "the lapsed read was re-entered on its old token"
    );
}

/// `is_locked` of a side counts every hold of that side: a writer that
/// also reads (a downgrade's first step) has both sides locked, as
/// Redisson answers; once the write is let go only the read is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn is_locked_counts_every_hold_of_its_side() {
    let env = Env::start().await;
    let client = env.client().await;
    let observer = env.client().await;
    let rw = client.rw_lock("both-sides");
    let w = rw.write().lock().await.unwrap();
    let r = rw.read().lock().await.unwrap();
    assert_eq!(rw.read().hold_count().await.unwrap(), 1);
    let seen = observer.rw_lock("both-sides");
    assert!(seen.write().is_locked().await.unwrap());
    assert!(
        seen.read().is_locked().await.unwrap(),
        "a read held beside the write counts"
    );
    w.unlock().await.unwrap();
    assert!(!seen.write().is_locked().await.unwrap());
    assert!(seen.read().is_locked().await.unwrap());
    r.unlock().await.unwrap();
    assert!(!seen.read().is_locked().await.unwrap());
}
