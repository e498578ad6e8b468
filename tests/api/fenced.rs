//! Fenced values against real redis-server processes: a write carrying an
//! older fencing token than the value has seen is refused and changes
//! nothing.

use crate::common;

use std::time::Duration;

use common::Env;
use fred::prelude::*;
use redisync::fenced::{Fenced, FencedClaim, FencedValue, FencedWrite};
use redisync::{Error, Guard};

/// A holder paused past its lease comes back and writes: refused, since the
/// next holder claimed the value with a newer token. The next holder may
/// write as often as it likes with its own token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_write_of_a_holder_whose_lock_ran_out_is_refused() {
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    let balance = a.fenced("acct:1");
    let first = a
        .lock("acct")
        .lock_with_lease(Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(
        balance.write(&first, "100").await.unwrap(),
        FencedWrite::Written
    );
    // `a` is "paused": its lease runs out and `b` takes the lock.
    let second = b
        .lock("acct")
        .try_lock(Duration::from_secs(10), Some(Duration::from_secs(30)))
        .await
        .unwrap()
        .expect("free once the first lease ran out");
    assert!(second.fencing_token() > first.fencing_token());
    let seen = b.fenced("acct:1").claim(&second).await.unwrap();
    assert_eq!(seen, FencedClaim::Claimed(Some(b"100".to_vec())));
    // `a` resumes and writes what it computed before the pause.
    assert_eq!(
        balance.write(&first, "90").await.unwrap(),
        FencedWrite::Stale {
            newest: second.fencing_token()
        }
    );
    assert_eq!(
        balance.read().await.unwrap(),
        Some(FencedValue {
            value: Some(b"100".to_vec()),
            token: second.fencing_token()
        }),
        "the refused write changed nothing"
    );
    let mine = b.fenced("acct:1");
    assert!(mine.write(&second, "110").await.unwrap().is_written());
    assert!(mine.write(&second, "120").await.unwrap().is_written());
    assert!(balance.claim(&first).await.unwrap().is_stale());
    let stored = balance.read().await.unwrap().unwrap();
    assert_eq!(stored.value.as_deref(), Some(&b"120"[..]));
    second.unlock().await.unwrap();
}

/// Claims then writes `value` under `guard`, then releases it.
async fn step<G: Guard>(value: &Fenced, guard: G, text: &str) {
    assert!(!value.claim(&guard).await.unwrap().is_stale(), "{text}");
    assert!(
        value.write(&guard, text).await.unwrap().is_written(),
        "{text}"
    );
    guard.release().await.unwrap();
}

/// Every guard and permit fences a value: claim then write with each, one
/// after the other, each acquisition's token newer than the last one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_guard_kind_claims_and_writes() {
    let env = Env::start().await;
    let client = env.client().await;
    client.semaphore("res").try_set_permits(1).await.unwrap();
    // One lock per value; each kind fences its own value.
    for round in 0..2 {
        step(
            &client.fenced("f:lock"),
            client.lock("res").lock().await.unwrap(),
            "lock",
        )
        .await;
        step(
            &client.fenced("f:fair"),
            client.fair_lock("res").lock().await.unwrap(),
            "fair",
        )
        .await;
        let rw = client.rw_lock("res");
        step(
            &client.fenced("f:rw"),
            rw.write().lock().await.unwrap(),
            "write",
        )
        .await;
        step(
            &client.fenced("f:sem"),
            client.semaphore("res").acquire(1).await.unwrap(),
            "sem",
        )
        .await;
        for key in ["f:lock", "f:fair", "f:rw", "f:sem"] {
            let v = client.fenced(key).read().await.unwrap().unwrap();
            assert!(v.value.is_some(), "{key} in round {round}");
        }
    }
}

/// A claim of a value never written raises its token and returns nothing;
/// bad input is a clear error and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_of_new_values_and_bad_input() {
    let env = Env::start().await;
    let client = env.client().await;
    let fresh = client.fenced("fresh");
    assert_eq!(fresh.read().await.unwrap(), None);
    assert_eq!(
        fresh.claim_with_token(7).await.unwrap(),
        FencedClaim::Claimed(None)
    );
    assert_eq!(
        fresh.read().await.unwrap(),
        Some(FencedValue {
            value: None,
            token: 7
        })
    );
    assert_eq!(
        fresh.write_with_token(6, "x").await.unwrap(),
        FencedWrite::Stale { newest: 7 }
    );

    let () = env
        .admin
        .set("plain", "x", None, None, false)
        .await
        .unwrap();
    let plain = client.fenced("plain");
    let wrong = plain.write_with_token(1, "y").await.unwrap_err();
    assert!(
        matches!(&wrong, Error::WrongType { key } if key == "plain"),
        "{wrong:?}"
    );
    assert!(matches!(plain.read().await, Err(Error::WrongType { .. })));
    assert!(matches!(
        plain.claim_with_token(1).await,
        Err(Error::WrongType { .. })
    ));
    let v: String = env.admin.get("plain").await.unwrap();
    assert_eq!(v, "x", "the foreign key was changed");

    let () = env.admin.hset("garbled", ("token", "abc")).await.unwrap();
    let garbled = client.fenced("garbled");
    assert!(matches!(
        garbled.write_with_token(1, "y").await,
        Err(Error::WrongType { .. })
    ));
    let fields: std::collections::HashMap<String, String> =
        env.admin.hgetall("garbled").await.unwrap();
    assert_eq!(fields.len(), 1, "{fields:?}");

    assert!(matches!(
        client.fenced("").write_with_token(1, "y").await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        fresh.write_with_token(1 << 53, "y").await,
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(fresh.read().await.unwrap().unwrap().token, 7);
}
