//! Replica sync: WAIT after acquisitions, undo when too few replicas acknowledge.

mod common;

use std::time::Duration;

use fred::prelude::*;
use redisync::Error;
use redisync_testkit::RedisServer;

async fn replica_of(primary: &RedisServer) -> RedisServer {
    let port = primary.port().to_string();
    let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]).await;
    let admin = common::admin(&replica.url()).await;
    for _ in 0..100 {
        let info: String = admin
            .info(Some(fred::types::InfoKind::Replication))
            .await
            .unwrap();
        if info.contains("master_link_status:up") {
            return replica;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the replica did not sync");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_acquisition_is_undone_and_reported() {
    let primary = RedisServer::start().await;
    let replica = replica_of(&primary).await;
    let admin = common::admin(&primary.url()).await;
    let client = redisync::Client::builder(&primary.url())
        .replica_sync(1, Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let lock = client.lock("synced");
    // Healthy replica: acquired, and the replica has it.
    let g = lock.lock().await.unwrap();
    let on_replica: i64 = common::admin(&replica.url())
        .await
        .exists(common::lock_key("synced"))
        .await
        .unwrap();
    assert_eq!(on_replica, 1);
    g.unlock().await.unwrap();

    replica.pause();
    let err = lock.try_lock(Duration::ZERO, None).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::ReplicaSync {
                acked: 0,
                required: 1,
                ..
            }
        ),
        "{err}"
    );
    let exists: i64 = admin.exists(common::lock_key("synced")).await.unwrap();
    assert_eq!(
        exists, 0,
        "an acquisition reported as failed was left behind"
    );
    // Re-entry that cannot be synced is undone too, keeping the outer hold.
    replica.resume();
    let outer = lock.lock().await.unwrap();
    replica.pause();
    assert!(matches!(
        lock.try_lock(Duration::ZERO, None).await,
        Err(Error::ReplicaSync { .. })
    ));
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    replica.resume();
    outer.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());

    let bad = redisync::Client::builder(&primary.url())
        .replica_sync(0, Duration::from_millis(100))
        .connect()
        .await;
    assert!(matches!(bad, Err(Error::InvalidArgument(_))));
}
