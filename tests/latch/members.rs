//! Count-down latches with members: a member counts once
//! per phase, also when its worker is restarted after its check-in; a
//! count-down on a latch that is not set is an error; and the latch's
//! record is trimmed as it goes (it does not grow with its count-downs and
//! phases).

use crate::common;

use std::time::Duration;

use common::{eventually, Env};
use fred::prelude::*;
use redisync::Error;
use tokio::time::timeout;

/// Bound on every wait for an event; only reached when the code is wrong.
const WITHIN: Duration = Duration::from_secs(10);

/// TTL of latches that must not expire during a test.
const LONG_TTL: Duration = Duration::from_mins(10);

/// The publish command the client uses on this server.
fn publish_command(env: &Env) -> &'static str {
    if common::sharded(&env.admin) {
        "spublish"
    } else {
        "publish"
    }
}

/// A worker restarted after its check-in (its client gone without a
/// shutdown, a new client under the same member id) checks in again
/// without counting twice: the latch of three members opens only when the
/// third checks in, its waiter wakes then, and the next phase counts every
/// member afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_restarted_after_its_check_in_counts_once() {
    let env = Env::start().await;
    let coordinator = env.client().await;
    let latch = coordinator.count_down_latch("check-in");
    assert!(latch.try_set_count(3, LONG_TTL).await.unwrap());
    let waiting = latch.clone();
    let waiter = tokio::spawn(async move { waiting.wait_timeout(LONG_TTL).await });

    // Worker w1 checks in, then crashes: its client is dropped, never shut
    // down, while a task of it waits on the latch.
    let first = env.client().await;
    let w1 = first.count_down_latch("check-in");
    assert_eq!(w1.count_down_as("w1").await.unwrap(), 2);
    let stuck = tokio::spawn(async move { w1.wait().await });
    stuck.abort();
    drop(first);

    // Restarted, it checks in again under its id: nothing counts.
    let second = env.client().await;
    let w1 = second.count_down_latch("check-in");
    assert_eq!(w1.count_down_as("w1").await.unwrap(), 2);
    assert_eq!(w1.count_down_as("w1").await.unwrap(), 2);
    assert_eq!(latch.count().await.unwrap(), 2);

    let w2 = env.client().await.count_down_latch("check-in");
    assert_eq!(w2.count_down_as("w2").await.unwrap(), 1);
    assert_eq!(w1.count_down_as("w1").await.unwrap(), 1);
    assert!(!waiter.is_finished(), "opened with a member missing");
    assert_eq!(latch.count().await.unwrap(), 1);

    let w3 = env.client().await.count_down_latch("check-in");
    assert_eq!(w3.count_down_as("w3").await.unwrap(), 0);
    let woke = timeout(WITHIN, waiter)
        .await
        .expect("the waiter did not wake")
        .unwrap();
    assert!(woke.unwrap(), "the waiter did not see the latch open");
    // Open: a member that checks in again changes nothing.
    assert_eq!(w2.count_down_as("w2").await.unwrap(), 0);
    assert_eq!(w2.count_down_as("w4").await.unwrap(), 0);

    // The next phase counts every member afresh, once each.
    assert!(latch.try_set_count(2, LONG_TTL).await.unwrap());
    let hold = common::key("latch", "hold", "check-in");
    let fields: Vec<String> = env.admin.hkeys(&hold).await.unwrap();
    assert!(
        !fields.iter().any(|f| f.starts_with("m:")),
        "the members of the phase before stayed: {fields:?}"
    );
    assert_eq!(w1.count_down_as("w1").await.unwrap(), 1);
    assert_eq!(w1.count_down_as("w1").await.unwrap(), 1);
    // A plain count-down counts as well.
    assert_eq!(w2.count_down().await.unwrap(), 0);
}

/// A member id that is empty or longer than 1024 bytes is refused, and
/// nothing is written; a count-down on a latch that is not set (never,
/// or expired) is `Error::LatchNotSet` and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_members_and_unset_latches_are_errors_that_write_nothing() {
    let env = Env::start().await;
    let client = env.client().await;
    let latch = client.count_down_latch("members");
    for bad in [String::new(), "x".repeat(1025)] {
        let got = latch.count_down_as(&bad).await;
        assert!(
            matches!(got, Err(Error::InvalidArgument(_))),
            "member of {} bytes: {got:?}",
            bad.len()
        );
    }
    assert!(matches!(
        latch.count_down_as("w1").await,
        Err(Error::LatchNotSet { .. })
    ));
    assert!(matches!(
        latch.count_down().await,
        Err(Error::LatchNotSet { .. })
    ));
    let keys: Vec<String> = common::all_keys(&env.admin).await;
    assert!(
        keys.is_empty(),
        "an unset latch's count-down wrote {keys:?}"
    );

    // Expired before it opened: the same error, nothing written.
    assert!(latch
        .try_set_count(2, Duration::from_millis(300))
        .await
        .unwrap());
    assert_eq!(latch.count_down_as(&"y".repeat(1024)).await.unwrap(), 1);
    let hold = common::key("latch", "hold", "members");
    let gone = eventually(WITHIN, || async {
        env.admin.exists::<i64, _>(&hold).await.unwrap() == 0
    })
    .await;
    assert!(gone, "the latch did not expire");
    let before: Vec<String> = common::all_keys(&env.admin).await;
    let got = latch.count_down_as("w2").await;
    assert!(
        matches!(&got, Err(Error::LatchNotSet { name }) if name == "members"),
        "{got:?}"
    );
    let after: Vec<String> = common::all_keys(&env.admin).await;
    assert_eq!(before, after, "a count-down of an expired latch wrote");
}

/// The scripts as the library runs them (helpers first), loaded once.
struct Raw {
    count_down: String,
    set_count: String,
}

impl Raw {
    async fn load(env: &Env) -> Raw {
        let count_down = env
            .admin
            .script_load(redisync::__private::script_source("latch_count_down.lua").unwrap())
            .await
            .unwrap();
        let set_count = env
            .admin
            .script_load(redisync::__private::script_source("latch_set_count.lua").unwrap())
            .await
            .unwrap();
        Raw {
            count_down,
            set_count,
        }
    }

    fn keys(name: &str) -> Vec<String> {
        vec![
            common::key("latch", "hold", name),
            common::key("latch", "record", name),
            common::key("latch", "forget", name),
        ]
    }

    /// A count-down `op` that the record remembers for `keep_ms`.
    async fn count_down(&self, env: &Env, name: &str, op: &str, keep_ms: u64) -> i64 {
        let channel = common::key("latch", "ch", name);
        env.admin
            .evalsha(
                &self.count_down,
                Raw::keys(name),
                vec![
                    op.to_owned(),
                    publish_command(env).to_owned(),
                    channel,
                    keep_ms.to_string(),
                    String::new(),
                ],
            )
            .await
            .expect("the count-down script")
    }

    async fn set_count(&self, env: &Env, name: &str, n: u64, ttl_ms: u64, id: &str) -> i64 {
        env.admin
            .evalsha(
                &self.set_count,
                Raw::keys(name),
                vec![n.to_string(), ttl_ms.to_string(), id.to_owned()],
            )
            .await
            .expect("the set-count script")
    }
}

/// `MEMORY USAGE key` (0 for a missing key).
async fn memory(env: &Env, key: &str) -> u64 {
    let used: Option<u64> = env
        .admin
        .custom(
            fred::types::CustomCommand::new_static(
                "MEMORY",
                fred::types::ClusterHash::FirstKey,
                false,
            ),
            vec!["USAGE", key],
        )
        .await
        .unwrap();
    used.unwrap_or(0)
}

/// 200 phases opened, then 2,000 count-downs of one phase, then a
/// count-down now and then (each within the record's memory of the one
/// before, so the record never expires as a whole): once what they
/// recorded ended, the record keeps only the last few count-downs, its
/// index as many. (Before the fix every count-down and phase stayed a
/// field for as long as count-downs kept coming: 2,200 fields here.) Run
/// through the scripts with a record kept 1 s instead of the library's
/// minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_forgets_what_ended() {
    let env = Env::start().await;
    let raw = Raw::load(&env).await;
    let name = "busy";
    let keep_ms = 1000;
    for phase in 0..200 {
        let id = format!("phase-{phase}");
        assert_eq!(raw.set_count(&env, name, 1, 300, &id).await, 1);
        assert_eq!(
            raw.count_down(&env, name, &format!("p{phase}"), keep_ms)
                .await,
            0
        );
    }
    assert_eq!(raw.set_count(&env, name, 1 << 40, 600_000, "long").await, 1);
    for op in 0..2000 {
        raw.count_down(&env, name, &format!("c{op}"), keep_ms).await;
    }
    // What the burst recorded ends 1 s after it (the phases' 0.3 s TTL and
    // 1 s after the last opened); count down now and then until then.
    let until = common::server_ms(&env.admin).await + 1400;
    let mut sparse = 0;
    while common::server_ms(&env.admin).await <= until {
        raw.count_down(&env, name, &format!("s{sparse}"), keep_ms)
            .await;
        sparse += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    raw.count_down(&env, name, "last", keep_ms).await;
    let record = common::key("latch", "record", name);
    let forget = common::key("latch", "forget", name);
    let fields: u64 = env.admin.hlen(&record).await.unwrap();
    let indexed: u64 = env.admin.zcard(&forget).await.unwrap();
    let bytes = memory(&env, &record).await + memory(&env, &forget).await;
    // At most the count-downs of the last second: one per 200 ms (more
    // under load only if the loop ran faster, which it cannot), the last.
    assert!(fields <= 8, "{fields} fields left in the record");
    assert!(indexed <= 8, "{indexed} entries left in its index");
    // Bytes are not asserted: a hash or zset that grew past its small
    // encoding keeps its hash table (4,096 buckets here) until it expires or
    // Redis shrinks it, 20 to 70 KB seen, against about 200 KB for the
    // 2,200 fields kept before; the fields, which grew without end, do not.
    eprintln!("the record and its index take {bytes} bytes");
    for key in [&record, &forget] {
        let ttl: i64 = env.admin.pttl(key).await.unwrap();
        assert!(
            ttl > 0 && ttl <= 1000,
            "{key}: PTTL {ttl}, not within the record's 1 s"
        );
    }
}
