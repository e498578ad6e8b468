//! The client's connection state: `Connected` at start,
//! `Suspended` while the command connection is lost, `Reconnected` once it
//! is back, holds lost meanwhile counted, `Shutdown` at the end. Every wait
//! is on `ConnectionWatch::changed`, never a sleep.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{key, lock_key, Env};
use fred::prelude::*;
use redisync::{ConnectionState, ConnectionWatch};
use redisync_testkit::{Direction, FaultProxy};

const WITHIN: Duration = Duration::from_secs(20);

/// Waits (bounded) until the watch says `want`.
async fn until(watch: &mut ConnectionWatch, want: ConnectionState) {
    let reached = tokio::time::timeout(WITHIN, async {
        while watch.state() != want {
            let now = watch.changed().await;
            assert!(
                now != ConnectionState::Shutdown || want == ConnectionState::Shutdown,
                "shut down while waiting for {want:?}"
            );
        }
    })
    .await;
    assert!(reached.is_ok(), "never {want:?} (now {:?})", watch.state());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspended_while_the_connection_is_lost_then_reconnected_with_the_holds_lost() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let client = redisync::Client::builder(&proxy.url())
        .watchdog_timeout(Duration::from_secs(3))
        .command_timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let mut watch = client.connection_state();
    assert_eq!(watch.state(), ConnectionState::Connected);
    assert_eq!(watch.lost_holds(), 0);
    let lost = client.lock("kept").lock().await.unwrap();
    let kept = client.lock("kept:too").lock().await.unwrap();

    proxy.refuse_connections(true);
    proxy.reset_connections();
    until(&mut watch, ConnectionState::Suspended).await;
    // Meanwhile another client takes one of the locks away.
    let other = env.client().await;
    assert!(other.lock("kept").force_unlock().await.unwrap());
    proxy.refuse_connections(false);
    until(&mut watch, ConnectionState::Reconnected).await;
    // The watchdog renews at once: the lock taken away is known lost.
    let counted = tokio::time::timeout(WITHIN, async {
        while watch.lost_holds() == 0 {
            watch.changed().await;
        }
    })
    .await;
    assert!(counted.is_ok(), "the lost hold was never counted");
    assert_eq!(watch.lost_holds(), 1);
    assert!(lost.is_lost(), "its guard says lost");
    assert!(!kept.is_lost(), "the other hold is still held");
    assert_eq!(watch.state(), ConnectionState::Reconnected);
    kept.unlock().await.unwrap();

    let mut late = client.connection_state();
    client.shutdown().await.unwrap();
    until(&mut watch, ConnectionState::Shutdown).await;
    assert_eq!(late.changed().await, ConnectionState::Shutdown);
    assert_eq!(
        watch.changed().await,
        ConnectionState::Shutdown,
        "and stays"
    );
    assert_eq!(
        watch.lost_holds(),
        1,
        "the shutdown gives up holds uncounted"
    );
}

/// A watch whose client was dropped (no shutdown) answers `Shutdown`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_of_a_dropped_client_answers_shutdown() {
    let env = Env::start().await;
    let client = env.client().await;
    let mut watch = client.connection_state();
    drop(client);
    let end = tokio::time::timeout(WITHIN, watch.changed()).await;
    assert_eq!(end.ok(), Some(ConnectionState::Shutdown));
}

/// Waits (bounded) until `guard` reports lost.
async fn until_lost(lost: impl std::future::Future<Output = ()>, what: &str) {
    assert!(
        tokio::time::timeout(WITHIN, lost).await.is_ok(),
        "{what} was never reported lost"
    );
}

/// A hold with a fixed lease (`lock_with_lease`) lost while
/// the client was suspended (force-unlocked, and taken by another client)
/// is looked at on reconnection, as a watchdog-renewed one is: its guard
/// reports lost and `lost_holds()` counts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_hold_lost_while_suspended_is_reported_at_reconnection() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let client = redisync::Client::builder(&proxy.url())
        .watchdog_timeout(Duration::from_secs(3))
        .command_timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let mut watch = client.connection_state();
    let fixed = client
        .lock("fixed")
        .lock_with_lease(Duration::from_mins(1))
        .await
        .unwrap();
    let renewed = client.lock("renewed").lock().await.unwrap();

    proxy.refuse_connections(true);
    proxy.reset_connections();
    until(&mut watch, ConnectionState::Suspended).await;
    // Meanwhile another client takes both locks away, and holds them.
    let other = env.client().await;
    let mut others = Vec::new();
    for name in ["fixed", "renewed"] {
        assert!(other.lock(name).force_unlock().await.unwrap());
        others.push(
            other
                .lock(name)
                .try_lock(Duration::ZERO, None)
                .await
                .unwrap()
                .expect("the other client takes it"),
        );
    }
    proxy.refuse_connections(false);
    until(&mut watch, ConnectionState::Reconnected).await;
    // The control: the watchdog-renewed hold is found lost.
    until_lost(renewed.lost(), "control: the renewed hold").await;
    let held_by_other = env
        .admin
        .hgetall::<std::collections::HashMap<String, String>, _>(lock_key("fixed"))
        .await
        .unwrap();
    assert!(
        fixed.is_lost(),
        "the fixed-lease guard still says held {:?} after the reconnection, while another client holds the lock (Redis: {held_by_other:?}); lost_holds = {}",
        fixed.validity(),
        watch.lost_holds()
    );
    assert_eq!(watch.lost_holds(), 2, "both lost holds counted");
}

/// The recipe of docs/connecting.md, run as written: on `Reconnected` it
/// reads `guard.is_lost()`, and must never resume (paused = false) on a
/// hold another client took while this one was suspended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recipe_never_resumes_work_on_a_hold_lost_while_suspended() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let client = redisync::Client::builder(&proxy.url())
        .watchdog_timeout(Duration::from_secs(30))
        .command_timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let guard = client.lock("jobs:import").lock().await.unwrap();
    let mut connection = client.connection_state();
    let other = env.client().await;

    // The docs/connecting.md recipe, recording each decision it makes.
    let decisions: Arc<Mutex<Vec<(ConnectionState, bool)>>> = Arc::default();
    let recipe = {
        let decisions = decisions.clone();
        tokio::spawn(async move {
            let mut paused;
            while !guard.is_lost() {
                match connection.changed().await {
                    ConnectionState::Suspended => {
                        paused = true;
                        decisions
                            .lock()
                            .unwrap()
                            .push((ConnectionState::Suspended, paused));
                    }
                    ConnectionState::Shutdown => break,
                    state => {
                        paused = guard.is_lost();
                        decisions.lock().unwrap().push((state, paused));
                    }
                }
            }
        })
    };

    proxy.refuse_connections(true);
    proxy.reset_connections();
    let mut watch = client.connection_state();
    until(&mut watch, ConnectionState::Suspended).await;
    assert!(other.lock("jobs:import").force_unlock().await.unwrap());
    let taken = other
        .lock("jobs:import")
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .expect("the other client takes it");
    proxy.refuse_connections(false);
    until(&mut watch, ConnectionState::Reconnected).await;
    // The recipe ends once the guard reports lost (the renewal's verdict).
    tokio::time::timeout(WITHIN, recipe)
        .await
        .expect("the guard was never reported lost")
        .unwrap();
    let decisions = decisions.lock().unwrap().clone();
    assert!(
        decisions.iter().all(|&(_, paused)| paused),
        "the recipe resumed its work (paused = false) on {decisions:?} while another client held the lock (token {})",
        taken.fencing_token()
    );
}

/// A partition that keeps the TCP connection open (packets
/// dropped, no reset) raises no connection error: renewals fail by their
/// command timeout, and the state must say `Suspended` before the hold's
/// lease runs out; once Redis answers again, `Reconnected`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_that_costs_a_hold_is_reported_suspended_first() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let client = redisync::Client::builder(&proxy.url())
        .watchdog_timeout(Duration::from_secs(2))
        .command_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let guard = client.lock("partitioned").lock().await.unwrap();
    let mut watch = client.connection_state();
    proxy.blackhole(Direction::Both);
    let suspended_first = tokio::time::timeout(WITHIN, async {
        tokio::select! {
            biased;
            () = until(&mut watch, ConnectionState::Suspended) => true,
            () = guard.lost() => false,
        }
    })
    .await;
    assert_eq!(
        suspended_first,
        Ok(true),
        "the hold was lost to failed renewals with no Suspended before it: now {:?}, lost_holds {}",
        watch.state(),
        watch.lost_holds()
    );
    assert_eq!(watch.lost_holds(), 0, "suspended before the loss");
    until_lost(guard.lost(), "the partitioned hold").await;
    assert_eq!(watch.state(), ConnectionState::Suspended);
    assert_eq!(watch.lost_holds(), 1);
    proxy.heal();
    until(&mut watch, ConnectionState::Reconnected).await;
}

/// The lease end Redis holds for the only member of a zset (a semaphore's
/// leases, a read-write lock's readers), as Redis writes it.
async fn lease_end(env: &Env, zset: &str) -> String {
    let all: Vec<String> = env
        .admin
        .zrange(zset, 0, -1, None, false, None, true)
        .await
        .unwrap();
    assert_eq!(all.len(), 2, "one member in {zset}: {all:?}");
    all[1].clone()
}

/// A fixed-lease hold's verdict at reconnection for every kind with a fixed lease: a lock (`try_lock` with a lease),
/// a fair lock, both sides of a read-write lock and semaphore permits, all
/// lost while suspended, are known lost when `Reconnected` is published
/// (not later); holds with a fixed lease that were kept are not, and the
/// look did not extend them (their lease ends in Redis are unchanged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_fixed_lease_hold_has_its_verdict_at_reconnection_and_is_never_extended() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let client = redisync::Client::builder(&proxy.url())
        .watchdog_timeout(Duration::from_secs(30))
        .command_timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let lease = Duration::from_mins(1);
    let mut watch = client.connection_state();
    let lock = client
        .lock("l")
        .try_lock(Duration::ZERO, Some(lease))
        .await
        .unwrap()
        .expect("free");
    let fair = client.fair_lock("f").lock_with_lease(lease).await.unwrap();
    let write = client
        .rw_lock("w")
        .write()
        .lock_with_lease(lease)
        .await
        .unwrap();
    let read = client
        .rw_lock("r")
        .read()
        .lock_with_lease(lease)
        .await
        .unwrap();
    let permit = client
        .semaphore("s")
        .with_permits(2)
        .acquire_with_lease(1, lease)
        .await
        .unwrap();
    // Shorter than the watchdog's lease: a renewal would raise it.
    let short = Duration::from_secs(20);
    let kept_lock = client.lock("kept").lock_with_lease(short).await.unwrap();
    let kept_read = client
        .rw_lock("kept-r")
        .read()
        .lock_with_lease(short)
        .await
        .unwrap();
    let kept_permit = client
        .semaphore("kept-s")
        .with_permits(1)
        .acquire_with_lease(1, short)
        .await
        .unwrap();
    let kept_pttl: i64 = env.admin.pttl(lock_key("kept")).await.unwrap();
    let kept_reader = lease_end(&env, &key("rw", "readers", "kept-r")).await;
    let kept_lease = lease_end(&env, &key("sem", "leases", "kept-s")).await;

    proxy.refuse_connections(true);
    proxy.reset_connections();
    until(&mut watch, ConnectionState::Suspended).await;
    let other = env.client().await;
    assert!(other.lock("l").force_unlock().await.unwrap());
    assert!(other.fair_lock("f").force_unlock().await.unwrap());
    assert!(other.rw_lock("w").write().force_unlock().await.unwrap());
    assert!(other.rw_lock("r").read().force_unlock().await.unwrap());
    assert!(other.semaphore("s").force_release().await.unwrap());
    proxy.refuse_connections(false);
    until(&mut watch, ConnectionState::Reconnected).await;

    // The verdict came before the state: nothing to wait for.
    for (what, lost) in [
        ("lock", lock.is_lost()),
        ("fair lock", fair.is_lost()),
        ("write side", write.is_lost()),
        ("read side", read.is_lost()),
        ("permit", permit.is_lost()),
    ] {
        assert!(
            lost,
            "the {what} lost while suspended still says held at Reconnected"
        );
    }
    assert_eq!(watch.lost_holds(), 5, "each lost hold counted");
    assert!(!kept_lock.is_lost() && !kept_read.is_lost() && !kept_permit.is_lost());
    let pttl: i64 = env.admin.pttl(lock_key("kept")).await.unwrap();
    assert!(
        pttl <= kept_pttl,
        "the look extended a fixed lease: PTTL {kept_pttl} -> {pttl}"
    );
    assert_eq!(
        lease_end(&env, &key("rw", "readers", "kept-r")).await,
        kept_reader,
        "the look moved a fixed reader's lease end"
    );
    assert_eq!(
        lease_end(&env, &key("sem", "leases", "kept-s")).await,
        kept_lease,
        "the look moved a fixed permit's lease end"
    );
    assert!(kept_lock.validity() <= short && kept_permit.validity() <= short);
}

/// A client with no holds reports the connection's loss and return as it
/// always did: `Suspended`, then `Reconnected` once the connection is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_holds_follows_the_connection() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let client = redisync::Client::builder(&proxy.url())
        .command_timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let mut watch = client.connection_state();
    proxy.refuse_connections(true);
    proxy.reset_connections();
    until(&mut watch, ConnectionState::Suspended).await;
    proxy.refuse_connections(false);
    until(&mut watch, ConnectionState::Reconnected).await;
    assert_eq!(watch.lost_holds(), 0);
    // And it still works.
    client
        .lock("after")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

/// A partition that keeps TCP open, the other ending: a partition healed before the lease runs out is
/// `Suspended` (the renewal timed out), then `Reconnected` once a look
/// renewed the hold; nothing was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_healed_in_time_is_suspended_then_reconnected_with_the_hold_kept() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let client = redisync::Client::builder(&proxy.url())
        .watchdog_timeout(Duration::from_secs(6))
        .command_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let guard = client.lock("partitioned").lock().await.unwrap();
    let mut watch = client.connection_state();
    proxy.blackhole(Direction::Both);
    until(&mut watch, ConnectionState::Suspended).await;
    assert!(!guard.is_lost());
    proxy.heal();
    until(&mut watch, ConnectionState::Reconnected).await;
    assert!(!guard.is_lost(), "renewed in time");
    assert_eq!(watch.lost_holds(), 0);
    assert!(
        guard.validity() > Duration::from_secs(3),
        "the look renewed it: {:?}",
        guard.validity()
    );
    guard.unlock().await.unwrap();
}
