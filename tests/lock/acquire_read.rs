//! The first read of a lock hash, shared by the plain and the fair acquire
//! scripts (`read_hold` in `lua/lib/lock.lua`): re-entry, stale fields of
//! the caller's own owner id, keys of the wrong type; and a fair queue's
//! TTL, which only grows. (From the second review of the fair hand-off.)

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::{eventually, Env};
use fred::prelude::*;
use redisync::{Error, Owner};
use tokio::time::timeout;

fn fair(role: &str, name: &str) -> String {
    common::key("fair", role, name)
}

/// The owner id of the calling task on `client`.
fn me(client: &redisync::Client) -> String {
    format!("{}:{}", client.id(), Owner::current().tag())
}

async fn write_stale(env: &Env, hash: &str, owner: &str, token: &str, lease_ms: i64) {
    let _: () = env
        .admin
        .hset(
            hash,
            vec![(owner, "1".to_owned()), ("~t", token.to_owned())],
        )
        .await
        .unwrap();
    let _: () = env.admin.pexpire(hash, lease_ms, None).await.unwrap();
}

/// A re-entry with a shorter lease keeps the longer one, and the token and
/// count are the hold's (`$lock`: a `Lock` or a `FairLock`, same methods).
macro_rules! reentry_keeps_the_longer_lease {
    ($lock:expr) => {{
        let lock = $lock;
        let g1 = lock.lock_with_lease(Duration::from_secs(20)).await.unwrap();
        let g2 = lock
            .lock_with_lease(Duration::from_millis(500))
            .await
            .unwrap();
        assert_eq!(g1.fencing_token(), g2.fencing_token());
        assert_eq!(lock.hold_count().await.unwrap(), 2);
        let left = lock.remaining_lease().await.unwrap().unwrap();
        assert!(left > Duration::from_secs(15), "lease cut to {left:?}");
        drop(g2);
        g1.unlock().await.unwrap();
    }};
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_reentry_never_shortens_the_lease() {
    let env = Env::start().await;
    reentry_keeps_the_longer_lease!(env.client().await.lock("re"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_reentry_never_shortens_the_lease() {
    let env = Env::start().await;
    reentry_keeps_the_longer_lease!(env.client().await.fair_lock("re"));
}

/// Plain `Lock`: a field of the same owner with another token (left by an
/// acquisition it no longer holds) is replaced with a new, higher token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_stale_field_of_the_same_owner_gets_a_new_token() {
    let env = Env::start().await;
    let c = env.client().await;
    let name = "stale";
    let hash = common::lock_key(name);
    write_stale(&env, &hash, &me(&c), "5", 20_000).await;
    let g = timeout(Duration::from_secs(5), c.lock(name).lock())
        .await
        .expect("the owner's own stale field made it wait")
        .unwrap();
    assert!(g.fencing_token() > 5, "{}", g.fencing_token());
    let h: HashMap<String, String> = env.admin.hgetall(&hash).await.unwrap();
    assert_eq!(h.get("~t"), Some(&g.fencing_token().to_string()), "{h:?}");
    assert_eq!(h.get(&me(&c)).map(String::as_str), Some("1"), "{h:?}");
    g.unlock().await.unwrap();
    assert_eq!(env.admin.exists::<i64, _>(&hash).await.unwrap(), 0);
}

/// Fair lock: a stale field of ours while another client waits: taken over
/// with a new token at once; our release hands it to the waiter, with a
/// higher token; nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_stale_field_of_the_same_owner_is_taken_over_and_handed_on() {
    let env = Env::start().await;
    let (c, w) = (env.client().await, env.client().await);
    let name = "stale";
    let hash = fair("hold", name);
    write_stale(&env, &hash, &me(&c), "5", 20_000).await;
    let waiter = tokio::spawn({
        let lock = w.fair_lock(name);
        async move {
            let g = lock.lock().await.unwrap();
            let t = g.fencing_token();
            g.unlock().await.unwrap();
            t
        }
    });
    let ok = eventually(Duration::from_secs(10), || async {
        env.admin.llen::<i64, _>(fair("queue", name)).await.unwrap() == 1
    })
    .await;
    assert!(ok);
    let g = timeout(Duration::from_secs(5), c.fair_lock(name).lock())
        .await
        .expect("the owner's own stale field made it wait")
        .unwrap();
    assert!(g.fencing_token() > 5);
    let mine = g.fencing_token();
    g.unlock().await.unwrap();
    let theirs = timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(theirs > mine, "{theirs} after {mine}");
    let clean = eventually(Duration::from_secs(3), || async {
        env.admin
            .exists::<i64, _>(vec![hash.clone(), fair("queue", name)])
            .await
            .unwrap()
            == 0
    })
    .await;
    assert!(clean);
}

/// Wrong-type keys: an error naming the key, nothing written (no queue, no
/// counter), for both kinds, fresh and after the caller found it busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_type_lock_keys_error_before_any_write() {
    let env = Env::start().await;
    let c = env.client().await;
    let _: () = env
        .admin
        .set(common::lock_key("wt"), "x", None, None, false)
        .await
        .unwrap();
    let _: () = env
        .admin
        .set(fair("hold", "wt"), "x", None, None, false)
        .await
        .unwrap();
    let r = c
        .lock("wt")
        .try_lock(Duration::from_millis(200), None)
        .await;
    assert!(matches!(r, Err(Error::WrongType { .. })), "{r:?}");
    let r = c
        .fair_lock("wt")
        .try_lock(Duration::from_millis(200), None)
        .await;
    assert!(matches!(r, Err(Error::WrongType { .. })), "{r:?}");
    let mut keys: Vec<String> = env
        .admin
        .custom(
            fred::types::CustomCommand::new_static("KEYS", None::<u16>, false),
            vec!["*"],
        )
        .await
        .unwrap();
    keys.sort();
    assert_eq!(
        keys,
        {
            let mut k = vec![common::lock_key("wt"), fair("hold", "wt")];
            k.sort();
            k
        },
        "something was written"
    );
}

/// The queue's TTL only grows: a waiter with a short queue lease that
/// keeps refreshing never cuts the TTL below the earlier waiter's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_ttl_only_grows_while_a_short_waiter_refreshes() {
    let env = Env::start().await;
    let (h, a, b) = (env.client().await, env.client().await, env.client().await);
    let name = "grow";
    let q = fair("queue", name);
    let holder = h.fair_lock(name).lock().await.unwrap();
    let long = tokio::spawn({
        let lock = a.fair_lock(name).with_queue_lease(Duration::from_mins(2));
        async move { lock.lock().await.unwrap().unlock().await.unwrap() }
    });
    assert!(
        eventually(Duration::from_secs(10), || async {
            env.admin.llen::<i64, _>(&q).await.unwrap() == 1
        })
        .await
    );
    let short = tokio::spawn({
        let lock = b
            .fair_lock(name)
            .with_queue_lease(Duration::from_millis(300));
        async move { lock.lock().await.unwrap().unlock().await.unwrap() }
    });
    assert!(
        eventually(Duration::from_secs(10), || async {
            env.admin.llen::<i64, _>(&q).await.unwrap() == 2
        })
        .await
    );
    let first: Vec<String> = env.admin.lrange(&q, 0, -1).await.unwrap();
    // Wait for several refreshes of B's entry.
    let mut seen = 0;
    let mut last = first[1].clone();
    let mut min_ttl = i64::MAX;
    while seen < 4 {
        let now: Vec<String> = env.admin.lrange(&q, 0, -1).await.unwrap();
        let ttl: i64 = env.admin.pttl(&q).await.unwrap();
        min_ttl = min_ttl.min(ttl);
        if now.len() == 2 && now[1] != last {
            last = now[1].clone();
            seen += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        min_ttl > 100_000,
        "the queue's TTL fell to {min_ttl} ms under a 2 min queue lease"
    );
    holder.unlock().await.unwrap();
    timeout(Duration::from_secs(10), long)
        .await
        .unwrap()
        .unwrap();
    timeout(Duration::from_secs(10), short)
        .await
        .unwrap()
        .unwrap();
}
