//! A `hand_off()` whose outcome stayed unknown and that never ran (the
//! server unreachable for the whole call): whatever follows it (a second
//! hand-off, a drop whose release the next attempt carries, `unlock`), the
//! name is free once everything is released, not after the lease.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use crate::common::{self, Env};
use fred::interfaces::HashesInterface;
use redisync::{Client, Owner};
use redisync_testkit::FaultProxy;
use tokio::time::{sleep, timeout};

const LEASE: Duration = Duration::from_secs(20);

/// A server, a client `a` through a fault proxy (800 ms command timeout)
/// and a direct client `b` that probes.
struct Setup {
    env: Env,
    proxy: FaultProxy,
    a: Client,
    b: Client,
}

impl Setup {
    async fn start() -> Setup {
        let env = Env::start().await;
        let proxy = FaultProxy::start(env.server.addr()).await;
        let a = Client::builder(&proxy.url())
            .command_timeout(Duration::from_millis(800))
            .connect()
            .await
            .expect("connect through the proxy");
        let b = env.client().await;
        Setup { env, proxy, a, b }
    }

    /// Runs `hand_off` with the server unreachable (connections reset and
    /// refused) for the whole call, which must fail; then heals the proxy
    /// and waits until `a` reaches the server again.
    async fn unreachable_during(&self, hand_off: impl Future<Output = redisync::Result<()>>) {
        self.proxy.refuse_connections(true);
        self.proxy.reset_connections();
        sleep(Duration::from_millis(100)).await;
        let r = timeout(Duration::from_secs(10), hand_off)
            .await
            .expect("hand-off hangs");
        assert!(r.is_err(), "hand-off while unreachable: {r:?}");
        self.proxy.heal();
        let lock = self.a.lock("reconnected");
        let ok = common::eventually(Duration::from_secs(10), || async {
            lock.is_locked().await.is_ok()
        })
        .await;
        assert!(ok, "client never reconnected");
    }

    /// `a` takes `name` in a task of its own; its hand-off is then in doubt.
    async fn lock_handed_off_in_doubt(&self, name: &str) -> redisync::LockGuard {
        let lock = self.a.lock(name);
        let mut g = tokio::spawn(async move { lock.lock_with_lease(LEASE).await.unwrap() })
            .await
            .unwrap();
        self.unreachable_during(g.hand_off()).await;
        g
    }

    async fn fields(&self, key: String) -> HashMap<String, String> {
        self.env.admin.hgetall(key).await.unwrap()
    }

    /// Whether `b` can take the lock `name` within 6 s (not a 20 s lease).
    async fn free_soon(&self, name: &str) -> bool {
        match self
            .b
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
}

/// A hand-off in doubt (never ran) followed by a second hand-off and the
/// unlock: the second one must not rebind from the in-doubt id only (it
/// finds nothing there, and the field stays under the first owner id).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_hand_off_after_one_in_doubt_frees_the_name_on_unlock() {
    let s = Setup::start().await;
    let name = "ho2";
    let mut g = s.lock_handed_off_in_doubt(name).await;
    let second = g.hand_off().await;
    let unlocked = g.unlock().await;
    assert!(
        s.free_soon(name).await,
        "everything released (second hand-off {second:?}, unlock {unlocked:?}), yet the name \
         stays taken: {:?}",
        s.fields(common::lock_key(name)).await
    );
}

/// A hand-off in doubt (never ran), then the guard dropped: its release
/// must not be parked for the next attempt of this client on the name
/// (here by another owner in the same task), which would carry it under
/// the new id and free nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_guard_after_hand_off_in_doubt_frees_the_name() {
    let s = Setup::start().await;
    let name = "hodrop";
    let g = s.lock_handed_off_in_doubt(name).await;
    let lock = s.a.lock(name);
    let other = tokio::spawn(async move {
        drop(g);
        Owner::new()
            .scope(lock.try_lock(Duration::ZERO, Some(Duration::from_secs(5))))
            .await
    })
    .await
    .unwrap();
    if let Ok(Some(g)) = other {
        g.unlock().await.unwrap();
    }
    sleep(Duration::from_millis(200)).await;
    assert!(
        s.free_soon(name).await,
        "everything released, yet the name stays taken: {:?}",
        s.fields(common::lock_key(name)).await
    );
}

/// The same in-doubt hand-off, then `unlock`: the final release re-sends
/// the hand-off first and frees the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_after_a_hand_off_in_doubt_frees_the_name() {
    let s = Setup::start().await;
    let name = "hoctl";
    let g = s.lock_handed_off_in_doubt(name).await;
    let unlocked = g.unlock().await;
    assert!(
        s.free_soon(name).await,
        "unlock {unlocked:?}: {:?}",
        s.fields(common::lock_key(name)).await
    );
}

/// The guard dropped, and no attempt of this client follows: the release's
/// own sender re-sends the hand-off and frees the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_without_a_carrying_attempt_frees_the_name() {
    let s = Setup::start().await;
    let name = "hoctl2";
    let g = s.lock_handed_off_in_doubt(name).await;
    tokio::spawn(async move { drop(g) }).await.unwrap();
    assert!(
        s.free_soon(name).await,
        "{:?}",
        s.fields(common::lock_key(name)).await
    );
}

/// The fair lock: a hand-off in doubt (never ran), then a second hand-off
/// and the unlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_a_second_hand_off_after_one_in_doubt_frees_the_name_on_unlock() {
    let s = Setup::start().await;
    let name = "fho2";
    let lock = s.a.fair_lock(name);
    let mut g = tokio::spawn(async move { lock.lock_with_lease(LEASE).await.unwrap() })
        .await
        .unwrap();
    s.unreachable_during(g.hand_off()).await;
    let second = g.hand_off().await;
    let unlocked = g.unlock().await;
    let got =
        s.b.fair_lock(name)
            .try_lock(Duration::from_secs(6), Some(Duration::from_secs(5)))
            .await
            .unwrap();
    let left = s.fields(common::key("fair", "hold", name)).await;
    assert!(
        got.is_some(),
        "fair: everything released (second {second:?}, unlock {unlocked:?}), yet the name \
         stays taken: {left:?}"
    );
}

/// The same in-doubt hand-off, then `client.shutdown()` while the guard
/// lives: the shutdown releases every hold, re-sending the hand-off first as
/// the guard's own final release does (it released under the new owner id
/// only, and the name stayed taken for the lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_after_a_hand_off_in_doubt_frees_the_name() {
    let s = Setup::start().await;
    let name = "hoshut";
    let g = s.lock_handed_off_in_doubt(name).await;
    s.a.shutdown().await.unwrap();
    assert!(g.is_lost(), "a live guard is lost after the shutdown");
    assert!(
        s.free_soon(name).await,
        "{:?}",
        s.fields(common::lock_key(name)).await
    );
}

/// The fair lock: the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_shutdown_after_a_hand_off_in_doubt_frees_the_name() {
    let s = Setup::start().await;
    let name = "fhoshut";
    let lock = s.a.fair_lock(name);
    let mut g = tokio::spawn(async move { lock.lock_with_lease(LEASE).await.unwrap() })
        .await
        .unwrap();
    s.unreachable_during(g.hand_off()).await;
    s.a.shutdown().await.unwrap();
    let got =
        s.b.fair_lock(name)
            .try_lock(Duration::from_secs(6), Some(Duration::from_secs(5)))
            .await
            .unwrap();
    assert!(
        got.is_some(),
        "fair: the name stays taken after the shutdown: {:?}",
        s.fields(common::key("fair", "hold", name)).await
    );
}
