//! The client's connection state (issue 3 §1): `Connected` at start,
//! `Suspended` while the command connection is lost, `Reconnected` once it
//! is back, holds lost meanwhile counted, `Shutdown` at the end. Every wait
//! is on `ConnectionWatch::changed`, never a sleep.

mod common;

use std::time::Duration;

use common::Env;
use redisync::{ConnectionState, ConnectionWatch};
use redisync_testkit::FaultProxy;

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
