//! The inspector's view of every primitive (`inspect`, `Client::inspect`,
//! `Client::list`), read from real servers; and the semaphore's force release.

use crate::common;

use std::time::Duration;

use common::{eventually, Env};
use fred::prelude::*;
use futures::FutureExt;
use redisync::inspect::{HoldMode, Inspection, LockKind};
use redisync::Error;
use redisync_testkit::RedisCluster;

const WITHIN: Duration = Duration::from_secs(10);

fn owner_of(client: &redisync::Client, i: &Inspection) -> Vec<(bool, u32)> {
    i.holders
        .iter()
        .map(|h| (h.client_id == Some(client.id()), h.holds))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_shows_its_holder_hold_count_token_and_a_contender() {
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    let lock = a.lock("orders:42");
    let outer = lock.lock_with_lease(Duration::from_secs(90)).await.unwrap();
    let inner = lock.lock().await.unwrap();
    assert!(b
        .lock("orders:42")
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .is_none());

    let seen = lock.inspect().await.unwrap();
    assert_eq!(
        (seen.kind, seen.name.as_str()),
        (LockKind::Lock, "orders:42")
    );
    assert!(seen.exists && seen.is_held() && seen.contended);
    assert_eq!(owner_of(&a, &seen), [(true, 2)]);
    assert_eq!(seen.token, Some(outer.fencing_token()));
    assert_eq!(seen.holders[0].token, Some(outer.fencing_token()));
    assert_eq!(seen.last_token, Some(outer.fencing_token()));
    let left = seen.lease_left.unwrap();
    assert!(
        left > Duration::from_secs(30) && left <= Duration::from_secs(90),
        "{left:?}"
    );
    // The same view from any client, by name alone.
    let by_name = b.inspect("orders:42").await.unwrap();
    assert_eq!(by_name.len(), 1);
    assert_eq!(
        (&by_name[0].holders[0].owner, by_name[0].token),
        (&seen.holders[0].owner, seen.token)
    );

    let token = outer.fencing_token();
    drop(inner);
    outer.unlock().await.unwrap();
    let free = lock.inspect().await.unwrap();
    assert!(!free.exists && !free.is_held());
    assert_eq!((free.token, free.last_token), (None, Some(token)));
    // A released lock leaves its counter: still found by name, as free.
    assert!(!b.inspect("orders:42").await.unwrap()[0].is_held());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_shows_its_queue_in_order() {
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    let guard = a.fair_lock("fair").lock().await.unwrap();
    let mut waiting = Vec::new();
    for n in 0..2 {
        let lock = b.fair_lock("fair");
        waiting.push(tokio::spawn(async move {
            lock.lock().await.map(|g| g.fencing_token())
        }));
        // Queue one at a time, so the order is known.
        let queued = eventually(WITHIN, || async {
            a.fair_lock("fair").inspect().await.unwrap().waiters.len() == n + 1
        })
        .await;
        assert!(queued, "waiter {n} never queued");
    }
    let seen = a.fair_lock("fair").inspect().await.unwrap();
    assert_eq!(owner_of(&a, &seen), [(true, 1)]);
    assert_eq!(seen.token, Some(guard.fencing_token()));
    assert_eq!(seen.waiters.len(), 2);
    for w in &seen.waiters {
        assert_eq!((w.client_id, w.mode), (Some(b.id()), HoldMode::Exclusive));
        assert!(w.expires_in > Duration::ZERO, "{w:?}");
    }
    assert_ne!(seen.waiters[0].owner, seen.waiters[1].owner);
    guard.unlock().await.unwrap();
    for w in waiting {
        assert!(w.await.unwrap().unwrap() > seen.token.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rw_lock_shows_its_readers_and_the_writer_waiting() {
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    let r1 = a
        .rw_lock("doc")
        .read()
        .lock_with_lease(Duration::from_secs(90))
        .await
        .unwrap();
    let r2 = b
        .rw_lock("doc")
        .read()
        .lock_with_lease(Duration::from_secs(30))
        .await
        .unwrap();
    let writer = b.rw_lock("doc");
    let w = tokio::spawn(async move { writer.write().lock().await.map(|g| g.fencing_token()) });
    let marked = eventually(WITHIN, || async {
        !a.rw_lock("doc").inspect().await.unwrap().waiters.is_empty()
    })
    .await;
    assert!(marked, "the writer never showed as waiting");

    let seen = a.rw_lock("doc").inspect().await.unwrap();
    assert_eq!(seen.token, None, "no writer holds it");
    let mut readers: Vec<_> = seen
        .holders
        .iter()
        .map(|h| (h.mode, h.client_id == Some(a.id()), h.token))
        .collect();
    readers.sort_by_key(|r| !r.1);
    assert_eq!(
        readers,
        [
            (HoldMode::Read, true, Some(r1.fencing_token())),
            (HoldMode::Read, false, Some(r2.fencing_token())),
        ]
    );
    let lease_a = seen
        .holders
        .iter()
        .find(|h| h.client_id == Some(a.id()))
        .unwrap();
    assert!(lease_a.lease_left.unwrap() > Duration::from_secs(30));
    assert_eq!(seen.waiters[0].mode, HoldMode::Write);
    assert_eq!(seen.waiters[0].client_id, Some(b.id()));

    r1.unlock().await.unwrap();
    r2.unlock().await.unwrap();
    let token = w.await.unwrap().unwrap();
    let writing = a.rw_lock("doc").inspect().await;
    // The writer's guard was dropped by its task: free again, or still
    // releasing; either way its token is the newest.
    assert_eq!(writing.unwrap().last_token, Some(token));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_shows_its_permits_and_a_force_release_frees_them() {
    let env = Env::start().await;
    // a renews every ~330 ms: it learns of the force release at its next renewal.
    let (a, b) = (
        env.client_with_watchdog(Duration::from_secs(1)).await,
        env.client().await,
    );
    let sem = a.semaphore("pool");
    assert!(!sem.inspect().await.unwrap().exists, "not set up yet");
    sem.set_permits(3).await.unwrap();
    let two = sem.acquire(2).await.unwrap();
    let one = b.semaphore("pool").acquire(1).await.unwrap();

    let seen = sem.inspect().await.unwrap();
    let permits = seen.permits.unwrap();
    assert_eq!((permits.total, permits.in_use), (3, 3));
    assert_eq!(seen.last_token, Some(one.fencing_token()));
    let mut held: Vec<_> = seen
        .holders
        .iter()
        .map(|h| (h.mode, h.client_id == Some(a.id())))
        .collect();
    held.sort_by_key(|h| !h.1);
    assert_eq!(
        held,
        [(HoldMode::Permits(2), true), (HoldMode::Permits(1), false)]
    );

    let waiter = b.semaphore("pool");
    let wants_one = tokio::spawn(async move { waiter.acquire(1).await.map(|p| p.fencing_token()) });
    assert!(b.semaphore("pool").force_release().await.unwrap());
    // The releasing client's permits are lost at once, others' at their renewal.
    assert!(
        one.lost().now_or_never().is_some(),
        "b's permit is lost at once"
    );
    tokio::time::timeout(WITHIN, two.lost())
        .await
        .expect("a's permit is lost at its renewal");
    assert!(wants_one.await.unwrap().unwrap() > one.fencing_token());
    // The set-up is kept.
    assert_eq!(sem.inspect().await.unwrap().permits.unwrap().total, 3);
    drop(one);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_finds_the_names_matching_a_pattern() {
    let env = Env::start().await;
    let client = env.client().await;
    let _l = client.lock("inv:a").lock().await.unwrap();
    let _f = client.fair_lock("inv:b").lock().await.unwrap();
    let _r = client.rw_lock("inv:{c}").read().lock().await.unwrap();
    client.semaphore("other").set_permits(2).await.unwrap();
    client
        .lock("inv:released")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let _: () = env
        .admin
        .set("inv:plain", "x", None, None, false)
        .await
        .unwrap();

    let names = |found: Vec<Inspection>| -> Vec<(String, LockKind)> {
        found.into_iter().map(|i| (i.name, i.kind)).collect()
    };
    assert_eq!(
        names(client.list("inv:*").await.unwrap()),
        [
            ("inv:a".to_owned(), LockKind::Lock),
            ("inv:b".to_owned(), LockKind::FairLock),
            ("inv:{c}".to_owned(), LockKind::RwLock),
        ]
    );
    assert_eq!(client.list("*").await.unwrap().len(), 4);
    assert_eq!(
        names(client.list("oth?r").await.unwrap()),
        [("other".to_owned(), LockKind::Semaphore)]
    );
    assert!(client.list("nothing*").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_hold_no_lock_and_keys_that_are_not_ours_are_clear_errors() {
    let env = Env::start().await;
    let client = env.client().await;
    assert!(client.inspect("nobody").await.unwrap().is_empty());
    assert!(matches!(
        client.inspect("").await,
        Err(Error::InvalidArgument(_))
    ));
    let _: () = env
        .admin
        .set("session:1", "x", None, None, false)
        .await
        .unwrap();
    match client.inspect("session:1").await {
        Err(e @ Error::NotALock { .. }) => {
            assert!(e.to_string().contains("is a Redis key"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    let key = common::key("lock", "hold", "bad");
    let _: () = env
        .admin
        .set(key.as_str(), "x", None, None, false)
        .await
        .unwrap();
    match client.lock("bad").inspect().await {
        Err(Error::WrongType { key: k }) => assert_eq!(k, key),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        client.inspect("bad").await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        client.list("*").await,
        Err(Error::WrongType { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_scans_every_primary_of_a_cluster() {
    let cluster = RedisCluster::start(3, 0).await;
    let client = redisync::Client::connect(&cluster.url()).await.unwrap();
    let mut guards = Vec::new();
    for n in 0..12 {
        guards.push(client.lock(&format!("spread:{n}")).lock().await.unwrap());
    }
    let found = client.list("spread:*").await.unwrap();
    assert_eq!(found.len(), 12);
    assert!(found.iter().all(Inspection::is_held));
    let seen = client.inspect("spread:3").await.unwrap();
    assert_eq!(seen[0].token, Some(guards[3].fencing_token()));
    client.shutdown().await.unwrap();
}
