//! A `hand_off()` whose outcome stayed unknown and that never ran (the
//! server unreachable for the whole call): whatever follows it (a second
//! hand-off, a drop whose release the next attempt carries, `unlock`), the
//! name is free once everything is released, not after the lease. Found by
//! the second adversarial review of issue 39.

mod common;

use std::time::Duration;

use common::Env;
use fred::interfaces::HashesInterface;
use redisync::{Client, Owner};
use redisync_testkit::FaultProxy;
use tokio::time::{sleep, timeout};

const LEASE: Duration = Duration::from_secs(20);

async fn via(proxy: &FaultProxy) -> Client {
    Client::builder(&proxy.url())
        .command_timeout(Duration::from_millis(800))
        .connect()
        .await
        .expect("connect through the proxy")
}

/// Makes a hand-off whose outcome is unknown and that never ran: the server
/// is unreachable (connections reset and refused) for the whole call.
async fn hand_off_unreachable(proxy: &FaultProxy, g: &mut redisync::LockGuard) {
    proxy.refuse_connections(true);
    proxy.reset_connections();
    sleep(Duration::from_millis(100)).await;
    let r = timeout(Duration::from_secs(10), g.hand_off())
        .await
        .expect("hand-off hangs");
    assert!(r.is_err(), "hand-off while unreachable: {r:?}");
    proxy.heal();
}

async fn reconnected(client: &Client, name: &str) {
    let lock = client.lock(name);
    let ok = common::eventually(Duration::from_secs(10), || async {
        lock.is_locked().await.is_ok()
    })
    .await;
    assert!(ok, "client never reconnected");
}

async fn fields(env: &Env, name: &str) -> std::collections::HashMap<String, String> {
    env.admin.hgetall(common::lock_key(name)).await.unwrap()
}

/// Whether another client can take `name` within 6 s (not a 20 s lease).
async fn free_soon(other: &Client, name: &str) -> bool {
    match other
        .lock(name)
        .try_lock(Duration::from_secs(6), Some(Duration::from_secs(5)))
        .await
        .unwrap()
    {
        Some(g) => {
            g.unlock().await.unwrap();
            true
        }
        None => false,
    }
}

/// A hand-off in doubt (never ran) followed by a second hand-off: the
/// second one rebinds from the in-doubt id, finds nothing, and the field
/// stays under the first owner id for the whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_hand_off_after_one_in_doubt_frees_the_name_on_unlock() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let a = via(&proxy).await;
    let b = env.client().await;
    let name = "ho2";
    let (a2, env_ref) = (a.clone(), &env);
    let lock = a2.lock(name);
    let mut g = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock_with_lease(LEASE).await.unwrap() }
    })
    .await
    .unwrap();
    hand_off_unreachable(&proxy, &mut g).await;
    reconnected(&a, name).await;
    let before = fields(env_ref, name).await;
    eprintln!("after the in-doubt hand-off: {before:?}");
    let second = g.hand_off().await;
    eprintln!(
        "second hand-off: {second:?}; fields {:?}",
        fields(env_ref, name).await
    );
    let unlocked = g.unlock().await;
    eprintln!(
        "unlock: {unlocked:?}; fields {:?}",
        fields(env_ref, name).await
    );
    assert!(
        free_soon(&b, name).await,
        "everything released (second hand-off {second:?}, unlock {unlocked:?}), yet the name \
         stays taken: {:?}",
        fields(env_ref, name).await
    );
}

/// A hand-off in doubt (never ran), then the guard dropped: its release is
/// parked and carried by the next attempt of this client on the name (here
/// by another owner in the same task); the carried release goes under the
/// new id and frees nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_guard_after_hand_off_in_doubt_frees_the_name() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let a = via(&proxy).await;
    let b = env.client().await;
    let name = "hodrop";
    let lock = a.lock(name);
    let task = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock_with_lease(LEASE).await.unwrap() }
    });
    let mut g = task.await.unwrap();
    hand_off_unreachable(&proxy, &mut g).await;
    reconnected(&a, name).await;
    eprintln!(
        "after the in-doubt hand-off: {:?}",
        fields(&env, name).await
    );
    let other = tokio::spawn({
        let lock = lock.clone();
        async move {
            drop(g);
            Owner::new()
                .scope(lock.try_lock(Duration::ZERO, Some(Duration::from_secs(5))))
                .await
        }
    })
    .await
    .unwrap();
    eprintln!(
        "other owner's attempt: {:?}",
        other.as_ref().map(Option::is_some)
    );
    if let Ok(Some(g)) = other {
        g.unlock().await.unwrap();
    }
    sleep(Duration::from_millis(200)).await;
    eprintln!("after all released: {:?}", fields(&env, name).await);
    assert!(
        free_soon(&b, name).await,
        "everything released, yet the name stays taken: {:?}",
        fields(&env, name).await
    );
}

/// Control: the same in-doubt hand-off, then `unlock`: the final release
/// re-sends the hand-off first and frees the name (the fix works here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_after_a_hand_off_in_doubt_frees_the_name() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let a = via(&proxy).await;
    let b = env.client().await;
    let name = "hoctl";
    let lock = a.lock(name);
    let mut g = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock_with_lease(LEASE).await.unwrap() }
    })
    .await
    .unwrap();
    hand_off_unreachable(&proxy, &mut g).await;
    reconnected(&a, name).await;
    let unlocked = g.unlock().await;
    assert!(
        free_soon(&b, name).await,
        "unlock {unlocked:?}: {:?}",
        fields(&env, name).await
    );
}

/// Control: the guard dropped, and no attempt of this client follows: the
/// parked release's own sender re-sends the hand-off and frees the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_without_a_carrying_attempt_frees_the_name() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let a = via(&proxy).await;
    let b = env.client().await;
    let name = "hoctl2";
    let lock = a.lock(name);
    let mut g = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock_with_lease(LEASE).await.unwrap() }
    })
    .await
    .unwrap();
    hand_off_unreachable(&proxy, &mut g).await;
    reconnected(&a, name).await;
    tokio::spawn(async move { drop(g) }).await.unwrap();
    assert!(free_soon(&b, name).await, "{:?}", fields(&env, name).await);
}

/// The fair lock: a hand-off in doubt (never ran), then a second
/// hand-off and the unlock: the name stays taken for the whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_a_second_hand_off_after_one_in_doubt_frees_the_name_on_unlock() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let a = via(&proxy).await;
    let b = env.client().await;
    let name = "fho2";
    let lock = a.fair_lock(name);
    let mut g = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock_with_lease(LEASE).await.unwrap() }
    })
    .await
    .unwrap();
    proxy.refuse_connections(true);
    proxy.reset_connections();
    sleep(Duration::from_millis(100)).await;
    let first = timeout(Duration::from_secs(10), g.hand_off())
        .await
        .expect("hangs");
    assert!(first.is_err(), "{first:?}");
    proxy.heal();
    let ok = common::eventually(Duration::from_secs(10), || async {
        lock.is_locked().await.is_ok()
    })
    .await;
    assert!(ok);
    let second = g.hand_off().await;
    let unlocked = g.unlock().await;
    let fair_key = common::key("fair", "hold", name);
    let got = b
        .fair_lock(name)
        .try_lock(Duration::from_secs(6), Some(Duration::from_secs(5)))
        .await
        .unwrap();
    let left: std::collections::HashMap<String, String> =
        env.admin.hgetall(&fair_key).await.unwrap();
    assert!(
        got.is_some(),
        "fair: everything released (first {first:?}, second {second:?}, unlock {unlocked:?}), \
         yet the name stays taken: {left:?}"
    );
}
