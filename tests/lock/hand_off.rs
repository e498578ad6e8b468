//! A guard moved to another task still belongs to the owner that took it:
//! that owner re-enters at once, with the same token. `hand_off()` rebinds
//! the hold to an owner id of its own first, so the original task waits like
//! any other contender. Against a real redis-server, for the lock and the
//! fair lock.

use crate::common;
/// A hand-off whose outcome stayed unknown.
mod in_doubt;

use std::time::Duration;

use common::Env;
use fred::interfaces::{HashesInterface, KeysInterface, LuaInterface};
use redisync::Error;
use tokio::sync::oneshot;

/// Bound on every wait for an event; only reached when the code is wrong.
const EVENT_LIMIT: Duration = Duration::from_secs(20);

/// Long enough for a loaded machine to renew in time (renewals every third).
const WATCHDOG_LEASE: Duration = Duration::from_millis(1500);

async fn within<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(EVENT_LIMIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {EVENT_LIMIT:?}"))
}

/// The same scenarios for each re-entrant exclusive kind: `$handle` is the
/// client's constructor (`lock`, `fair_lock`), `$kind` the key kind.
macro_rules! scenarios {
    ($module:ident, $handle:ident, $kind:literal) => {
        mod $module {
            use super::*;

            /// The reported case: the task that moved its guard away
            /// re-enters it at once (the default, kept), unless the guard was
            /// handed off before the move; then it waits, and gets a newer
            /// token once the moved guard is released.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_moved_guard_reenters_unless_handed_off() {
                let env = Env::start().await;
                let client = env.client().await;
                // T is a task (the test body runs in `block_on`, whose
                // owner is the OS thread).
                let t = tokio::spawn(moved_guard_in_task(client.clone()));
                within("task T", t).await.unwrap();
                client.shutdown().await.unwrap();
            }

            async fn moved_guard_in_task(client: redisync::Client) {
                let lock = client.$handle("moved");

                // Default: the moved guard is still the task's.
                let g = lock.lock().await.unwrap();
                let token = g.fencing_token();
                let (release, released) = oneshot::channel::<()>();
                let moved = tokio::spawn(async move {
                    released.await.unwrap();
                    g.unlock().await.unwrap();
                });
                let again = within("re-entry", lock.try_lock(Duration::from_millis(200), None))
                    .await
                    .unwrap()
                    .expect("the task re-enters the guard it moved away");
                assert_eq!(again.fencing_token(), token, "a re-entry keeps the token");
                again.unlock().await.unwrap();
                release.send(()).unwrap();
                within("moved guard", moved).await.unwrap();

                // Handed off: the task is one contender among others.
                let mut g = lock.lock().await.unwrap();
                let token = g.fencing_token();
                within("hand-off", g.hand_off()).await.unwrap();
                assert_eq!(g.fencing_token(), token, "the hand-off keeps the token");
                let (release, released) = oneshot::channel::<()>();
                let moved = tokio::spawn(async move {
                    released.await.unwrap();
                    g.unlock().await.unwrap();
                });
                let refused = lock
                    .try_lock(Duration::from_millis(200), None)
                    .await
                    .unwrap();
                assert!(
                    refused.is_none(),
                    "the task re-entered a handed-off guard (token {:?}, held {token})",
                    refused.as_ref().map(|g| g.fencing_token())
                );
                assert_eq!(lock.hold_count().await.unwrap(), 0, "no longer the task's");
                let (got, ()) =
                    tokio::join!(within("lock after the moved guard", lock.lock()), async {
                        release.send(()).unwrap();
                        within("moved guard", moved).await.unwrap();
                    });
                let got = got.unwrap();
                assert!(
                    got.fencing_token() > token,
                    "a new acquisition, a newer token"
                );
                got.unlock().await.unwrap();
            }

            /// The handed-off hold keeps its token and lease, the watchdog
            /// renews it under its new owner id past several leases, and its
            /// unlock frees the lock for another client at once.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_handed_off_hold_is_renewed_and_released() {
                let env = Env::start().await;
                let client = env.client_with_watchdog(WATCHDOG_LEASE).await;
                let other = env.client().await;
                let lock = client.$handle("renewed");
                let mut g = lock.lock().await.unwrap();
                let token = g.fencing_token();
                let task_owner = lock.inspect().await.unwrap().holders[0].owner.clone();
                within("hand-off", g.hand_off()).await.unwrap();
                assert_eq!(g.fencing_token(), token);
                let validity = g.validity();
                assert!(
                    !validity.is_zero() && validity <= WATCHDOG_LEASE,
                    "the lease estimate is kept: {validity:?}"
                );
                let seen = lock.inspect().await.unwrap();
                assert_eq!(seen.holders.len(), 1, "{seen:?}");
                let new_owner = seen.holders[0].owner.clone();
                assert_ne!(new_owner, task_owner, "rebound to an owner id of its own");
                assert_eq!(
                    (seen.holders[0].holds, seen.token),
                    (1, Some(token)),
                    "{seen:?}"
                );
                assert!(seen.lease_left.is_some_and(|l| !l.is_zero()), "{seen:?}");
                let key = common::key($kind, "hold", "renewed");
                let fields: std::collections::HashMap<String, String> =
                    env.admin.hgetall(&key).await.unwrap();
                assert!(
                    !fields.contains_key(&task_owner),
                    "the old field is gone: {fields:?}"
                );

                let moved = tokio::spawn(async move {
                    // Four leases: renewed three times a lease, or lost.
                    tokio::select! {
                        biased;
                        () = g.lost() => panic!("the handed-off hold was lost"),
                        () = tokio::time::sleep(WATCHDOG_LEASE * 4) => {}
                    }
                    assert!(!g.validity().is_zero());
                    assert_eq!(g.fencing_token(), token);
                    g.unlock().await.unwrap();
                });
                within("moved guard", moved).await.unwrap();
                let seen = lock.inspect().await.unwrap();
                assert!(!seen.is_held(), "released: {seen:?}");
                let next = other
                    .$handle("renewed")
                    .try_lock(Duration::ZERO, None)
                    .await
                    .unwrap()
                    .expect("free at once after the unlock");
                assert!(next.fencing_token() > token);
                next.unlock().await.unwrap();
                client.shutdown().await.unwrap();
                other.shutdown().await.unwrap();
            }

            /// A hand-off whose script never ran (the script cache was
            /// empty and the server stalled past the command timeout, so
            /// the EVAL with the body was never sent): Redis still has the
            /// old owner's field. The old owner's next acquisition must not
            /// take it over while the guard says held.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_hand_off_that_never_ran_leaves_one_holder() {
                let env = Env::start().await;
                let client = redisync::Client::builder(&env.server.url())
                    .command_timeout(Duration::from_millis(300))
                    .connect()
                    .await
                    .unwrap();
                let lock = client.$handle("never-ran");
                let mut g = lock.lock_with_lease(Duration::from_secs(30)).await.unwrap();
                env.admin.script_flush(false).await.unwrap();
                env.server.pause();
                let handed = within("hand-off", g.hand_off()).await;
                env.server.resume();
                assert!(handed.is_err(), "a stalled server answered: {handed:?}");
                let again = within(
                    "the old owner's next acquisition",
                    lock.try_lock(Duration::from_millis(300), Some(Duration::from_secs(30))),
                )
                .await
                .unwrap();
                assert!(
                    again.is_none() || g.is_lost(),
                    "two guards say held: the handed-off one (token {}) and the old owner's new one (token {:?})",
                    g.fencing_token(),
                    again.as_ref().map(|a| a.fencing_token())
                );
                drop(again);
                drop(g);
                client.shutdown().await.unwrap();
            }

            /// A re-entered hold belongs to its task: refused, and both
            /// guards stay usable. A hold lost in Redis gives `NotHeld` and
            /// writes nothing; a key of another type is an error.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn refusals_write_nothing() {
                let env = Env::start().await;
                let client = env.client().await;
                let other = env.client().await;
                let lock = client.$handle("refused");

                let outer = lock.lock().await.unwrap();
                let mut inner = lock.lock().await.unwrap();
                match inner.hand_off().await {
                    Err(Error::InvalidArgument(m)) => assert!(m.contains("re-entered"), "{m}"),
                    other => panic!("a re-entered hold was handed off: {other:?}"),
                }
                assert_eq!(inner.fencing_token(), outer.fencing_token());
                inner.extend(Duration::from_secs(20)).await.unwrap();
                assert_eq!(lock.hold_count().await.unwrap(), 2, "still the task's");
                inner.unlock().await.unwrap();
                assert_eq!(lock.hold_count().await.unwrap(), 1);
                outer.unlock().await.unwrap();
                assert!(!lock.is_locked().await.unwrap());

                // Lost in Redis (force-unlocked by another client, then taken
                // by it) before this client knows.
                let mut lost = lock.lock().await.unwrap();
                let theirs = other.$handle("refused");
                assert!(theirs.force_unlock().await.unwrap());
                let taken = theirs
                    .try_lock(Duration::ZERO, None)
                    .await
                    .unwrap()
                    .unwrap();
                let key = common::key($kind, "hold", "refused");
                let before: std::collections::HashMap<String, String> =
                    env.admin.hgetall(&key).await.unwrap();
                match lost.hand_off().await {
                    Err(e) if e.is_not_held() => {}
                    other => panic!("a lost hold was handed off: {other:?}"),
                }
                assert!(lost.is_lost());
                let after: std::collections::HashMap<String, String> =
                    env.admin.hgetall(&key).await.unwrap();
                assert_eq!(after, before, "nothing written");
                assert_eq!(
                    lock.inspect().await.unwrap().token,
                    Some(taken.fencing_token())
                );
                drop(lost);
                taken.unlock().await.unwrap();

                // A key of another type: an error naming it, the key kept.
                let mut g = lock.lock().await.unwrap();
                let _: () = env.admin.del(&key).await.unwrap();
                let _: () = env.admin.set(&key, "x", None, None, false).await.unwrap();
                match g.hand_off().await {
                    Err(Error::WrongType { .. }) => {}
                    other => panic!("a string key was handed off: {other:?}"),
                }
                let kept: String = env.admin.get(&key).await.unwrap();
                assert_eq!(kept, "x");
                let _: () = env.admin.del(&key).await.unwrap();
                drop(g);
                client.shutdown().await.unwrap();
                other.shutdown().await.unwrap();
            }
        }
    };
}

scenarios!(lock, lock, "lock");
scenarios!(fair_lock, fair_lock, "fair");
