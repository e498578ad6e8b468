//! The metrics (feature `metrics`) of a scripted scenario, read by a
//! recording recorder: acquisitions, timeouts, cancellations, renewals, a
//! lost lock, wake-ups by message and by the lease timer, wait and hold
//! times, the held and waiting gauges.

// Counts and gauges here are small integers, exact in f64.
#![allow(clippy::float_cmp)]

mod common;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use common::{eventually, Env};
use fred::prelude::*;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

const WITHIN: Duration = Duration::from_secs(10);

/// Every metric seen so far, summed over snapshots (a snapshot drains the
/// recorder: counters and gauge increments since the last one, histogram
/// samples), keyed by name and sorted labels.
struct Recorded {
    snapshotter: Snapshotter,
    sums: Mutex<HashMap<String, (f64, usize)>>,
}

fn recorded() -> &'static Recorded {
    static RECORDED: OnceLock<Recorded> = OnceLock::new();
    RECORDED.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("the only recorder");
        Recorded {
            snapshotter,
            sums: Mutex::new(HashMap::new()),
        }
    })
}

/// The value of `name` with exactly `labels`: a counter's count, a gauge's
/// value, or a histogram's number of samples (and their sum).
fn metric(name: &str, labels: &[(&str, &str)]) -> (f64, usize) {
    let r = recorded();
    let mut sums = r.sums.lock().unwrap();
    for (key, _, _, value) in r.snapshotter.snapshot().into_vec() {
        let mut l: Vec<String> = key
            .key()
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        l.sort();
        let id = format!("{}{{{}}}", key.key().name(), l.join(","));
        let entry = sums.entry(id).or_insert((0.0, 0));
        match value {
            #[allow(clippy::cast_precision_loss)]
            DebugValue::Counter(n) => entry.0 += n as f64,
            DebugValue::Gauge(g) => entry.0 += g.into_inner(),
            DebugValue::Histogram(samples) => {
                entry.0 += samples.iter().map(|s| s.into_inner()).sum::<f64>();
                entry.1 += samples.len();
            }
        }
    }
    let mut l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    l.sort();
    sums.get(&format!("{name}{{{}}}", l.join(",")))
        .copied()
        .unwrap_or_default()
}

fn lock_named(name: &str) -> [(&str, &str); 2] {
    [("kind", "lock"), ("name", name)]
}

async fn count_reaches(name: &str, labels: &[(&str, &str)], at_least: f64) -> bool {
    eventually(WITHIN, || async { metric(name, labels).0 >= at_least }).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_scenario_records_every_metric() {
    recorded();
    let env = Env::start().await;
    let client = |watchdog: Duration| {
        redisync::Client::builder(&env.server.url())
            .watchdog_timeout(watchdog)
            .metrics_lock_names(true)
            .connect()
    };
    // A watchdog that renews within the test's waits (every second) and
    // that a stalled test process does not lose.
    let a = client(Duration::from_secs(3)).await.unwrap();
    let b = client(Duration::from_secs(30)).await.unwrap();
    let l = lock_named("m:lock");

    // A waiter woken by the release message. Released only once the
    // waiter's second attempt ran (the first, then the subscription, then
    // a second one before it parks): nothing else runs scripts yet.
    let held = a
        .lock("m:wake")
        .lock_with_lease(Duration::from_secs(30))
        .await
        .unwrap();
    let scripts_before = common::command_calls(&env).await["evalsha"];
    let lock = b.lock("m:wake");
    let waiter = tokio::spawn(async move { lock.lock().await.map(|g| g.fencing_token()) });
    let parked = eventually(WITHIN, || async {
        common::command_calls(&env).await["evalsha"] >= scripts_before + 2
    })
    .await;
    assert!(parked, "the waiter never tried twice");
    held.unlock().await.unwrap();
    waiter.await.unwrap().unwrap();
    let by_message = [("kind", "lock"), ("name", "m:wake"), ("by", "message")];
    assert_eq!(metric("redisync_wakeups_total", &by_message).0, 1.0);

    // Acquired: one acquisition, one wait sample, one hold.
    let guard = a.lock("m:lock").lock().await.unwrap();
    assert_eq!(metric("redisync_acquisitions_total", &l).0, 1.0);
    assert_eq!(metric("redisync_wait_seconds", &l).1, 1);
    assert_eq!(metric("redisync_held", &l).0, 1.0);

    // A wait that runs out.
    let busy = b
        .lock("m:lock")
        .try_lock(Duration::from_millis(200), None)
        .await
        .unwrap();
    assert!(busy.is_none());
    assert_eq!(metric("redisync_acquire_timeouts_total", &l).0, 1.0);

    // A waiter dropped while waiting: cancelled, no longer waiting.
    let lock = b.lock("m:lock");
    let waiter = tokio::spawn(async move { lock.lock().await.map(drop) });
    assert!(
        count_reaches("redisync_waiting", &l, 1.0).await,
        "never waiting"
    );
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    assert_eq!(metric("redisync_acquire_cancellations_total", &l).0, 1.0);
    assert_eq!(metric("redisync_waiting", &l).0, 0.0);

    // The watchdog renews (every second).
    assert!(
        count_reaches("redisync_renewals_total", &l, 1.0).await,
        "no renewal counted"
    );

    guard.unlock().await.unwrap();
    // The hold ended: one hold time, nothing held.
    let ended = eventually(WITHIN, || async {
        metric("redisync_hold_seconds", &l).1 == 1 && metric("redisync_held", &l).0 == 0.0
    })
    .await;
    assert!(
        ended,
        "hold times {:?}, held {:?}",
        metric("redisync_hold_seconds", &l),
        metric("redisync_held", &l)
    );

    // A waiter woken by the lease timer: a holder that never releases (a
    // hash written as a crashed client would leave it, 3 s lease: long
    // enough for the waiter to park first, even on a loaded machine).
    let key = common::key("lock", "hold", "m:timer");
    let _: () = env
        .admin
        .hset(key.as_str(), [("gone:1", "1"), ("~t", "5")])
        .await
        .unwrap();
    let _: () = env.admin.pexpire(key.as_str(), 3000, None).await.unwrap();
    b.lock("m:timer")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let by_timer = [("kind", "lock"), ("name", "m:timer"), ("by", "lease_timer")];
    assert!(metric("redisync_wakeups_total", &by_timer).0 >= 1.0);

    // A lock lost while its guard lives: forced by another client, found
    // gone by the next renewal.
    let held = a.lock("m:lost").lock().await.unwrap();
    assert!(b.lock("m:lost").force_unlock().await.unwrap());
    tokio::time::timeout(WITHIN, held.lost())
        .await
        .expect("lost");
    assert_eq!(
        metric("redisync_locks_lost_total", &lock_named("m:lost")).0,
        1.0
    );
    drop(held);

    // Without the name option: the kind alone labels them.
    let plain = redisync::Client::connect(&env.server.url()).await.unwrap();
    let before = metric("redisync_acquisitions_total", &[("kind", "semaphore")]).0;
    let sem = plain.semaphore("m:sem");
    sem.set_permits(1).await.unwrap();
    sem.acquire(1).await.unwrap().release().await.unwrap();
    let after = metric("redisync_acquisitions_total", &[("kind", "semaphore")]).0;
    assert_eq!(after - before, 1.0);

    for c in [a, b, plain] {
        c.shutdown().await.unwrap();
    }
}
