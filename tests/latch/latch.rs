//! Count-down latches against real redis-server processes: counting down
//! to zero wakes the waiters of every client (by message, not by polling),
//! a count-down counts once, a latch that expires before it opened is an
//! error for its waiters, and bad input or a key of another type is refused
//! without a write.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use common::{eventually, Env};
use fred::prelude::*;
use fred::types::Value;
use redisync::inspect::LockKind;
use redisync::{Client, CountDownLatch, Error};
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};

const COUNT_DOWN: &str = include_str!("../../lua/latch_count_down.lua");
const SET_COUNT: &str = include_str!("../../lua/latch_set_count.lua");

/// Bound on every wait for an event; only reached when the code is wrong.
/// Well below the default watchdog period (30 s): a waiter that wakes
/// within it was woken by a message, not by its periodic look.
const WITHIN: Duration = Duration::from_secs(10);

/// TTL of latches that must not expire during a test.
const LONG_TTL: Duration = Duration::from_mins(10);

/// Waits until the server ran `looks` more EVALSHA than `before`: the
/// first looks of as many waiters (the read script is cached, so each is
/// one EVALSHA), after which each is subscribed and parked.
async fn until_parked(env: &Env, before: u64, looks: u64) {
    let parked = eventually(WITHIN, || async {
        common::evalsha_calls(env).await >= before + looks
    })
    .await;
    assert!(parked, "the {looks} waiters never looked at the latch");
}

/// The task's output, under the [`WITHIN`] bound.
async fn joined<T>(task: JoinHandle<T>) -> T {
    timeout(WITHIN, task)
        .await
        .expect("the task did not finish in time")
        .expect("the task panicked")
}

/// A task waiting on `latch` (`wait()`, or `wait_timeout` of a long time
/// when `bounded`) that reads the count the moment its wait returns: what
/// it woke with, and the count it saw then.
fn waiter(latch: CountDownLatch, bounded: bool) -> JoinHandle<(redisync::Result<bool>, u64)> {
    tokio::spawn(async move {
        let woke = if bounded {
            latch.wait_timeout(LONG_TTL).await
        } else {
            latch.wait().await.map(|()| true)
        };
        let seen = latch.count().await.expect("count after the wait");
        (woke, seen)
    })
}

/// `EXISTS key`.
async fn exists(env: &Env, key: &str) -> bool {
    env.admin.exists::<i64, _>(key).await.unwrap() == 1
}

/// The latch hash, field by field.
async fn fields(env: &Env, key: &str) -> HashMap<String, String> {
    env.admin.hgetall(key).await.unwrap()
}

/// `PTTL key`.
async fn pttl(env: &Env, key: &str) -> i64 {
    env.admin.pttl(key).await.unwrap()
}

/// The publish command the client uses on this server (the scripts'
/// `ARGV[2]`).
fn publish_command(env: &Env) -> &'static str {
    if common::sharded(&env.admin) {
        "spublish"
    } else {
        "publish"
    }
}

/// Runs the count-down script as the library sends it (helpers first),
/// with the count-down id `op`, publishing to `channel`.
async fn raw_count_down(env: &Env, name: &str, op: &str, channel: &str) -> i64 {
    env.admin
        .eval(
            redisync::__private::script_source("latch_count_down.lua").unwrap(),
            vec![
                common::key("latch", "hold", name),
                common::key("latch", "record", name),
                common::key("latch", "forget", name),
            ],
            vec![op, publish_command(env), channel, "60000", ""],
        )
        .await
        .expect("the count-down script")
}

/// Server-side connection ids (`CLIENT LIST`).
async fn connection_ids(env: &Env) -> HashSet<String> {
    let list: String = env
        .admin
        .custom(
            fred::types::CustomCommand::new_static(
                "CLIENT",
                fred::types::ClusterHash::FirstKey,
                false,
            ),
            vec!["LIST"],
        )
        .await
        .expect("CLIENT LIST");
    list.lines()
        .filter_map(|l| l.split(' ').next()?.strip_prefix("id="))
        .map(str::to_owned)
        .collect()
}

/// Resets the connections through `proxy` and heals it once the server
/// saw them end: the replies it held are dropped, never delivered late.
async fn cut(env: &Env, proxy: &redisync_testkit::FaultProxy) {
    let cut = proxy.connections();
    let before = connection_ids(env).await;
    proxy.reset_connections();
    let ended = eventually(WITHIN, || async {
        connection_ids(env).await.intersection(&before).count() + cut <= before.len()
    })
    .await;
    assert!(ended, "the server still sees the {cut} proxied connections");
    proxy.heal();
}

/// Three clients, three waiters each (one `wait`, two `wait_timeout`):
/// every count-down returns the count left and `count()` follows it; no
/// waiter returns before the last count-down, and all of them wake by the
/// opening's message (well before any periodic look), seeing count 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counting_down_to_zero_wakes_the_waiters_of_every_client() {
    let env = Env::start().await;
    let clients = [env.client().await, env.client().await, env.client().await];
    let name = "phase-1";
    let latch = clients[0].count_down_latch(name);
    assert!(latch.try_set_count(3, LONG_TTL).await.unwrap());
    assert_eq!(latch.count().await.unwrap(), 3);
    let before = common::evalsha_calls(&env).await;
    let mut waiters = Vec::new();
    for c in &clients {
        for i in 0..3 {
            waiters.push(waiter(c.count_down_latch(name), i > 0));
        }
    }
    until_parked(&env, before, 9).await;
    for (i, c) in (0_u64..).zip(&clients) {
        let mine = c.count_down_latch(name);
        let left = mine.count_down().await.unwrap();
        assert_eq!(left, 2 - i, "count-down {i}");
        for other in &clients {
            assert_eq!(other.count_down_latch(name).count().await.unwrap(), left);
        }
        if left > 0 {
            assert!(
                waiters.iter().all(|w| !w.is_finished()),
                "a waiter returned with {left} to go"
            );
        }
    }
    for w in waiters {
        let (woke, seen) = joined(w).await;
        assert!(woke.unwrap(), "a waiter did not see the opening");
        assert_eq!(seen, 0, "a waiter woke before the latch opened");
    }
}

/// 4 clients x 8 tasks count a latch of 32 down at once: the counts they
/// get back are 31..=0, each exactly once, and the waiters (two per client)
/// return only after the last count-down: each sees count 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_count_downs_each_count_once() {
    let env = Env::start().await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(env.client().await);
    }
    let name = "fan-in";
    let latch = clients[0].count_down_latch(name);
    assert!(latch.try_set_count(32, LONG_TTL).await.unwrap());
    assert_eq!(latch.count().await.unwrap(), 32);
    let before = common::evalsha_calls(&env).await;
    let mut waiters = Vec::new();
    for c in &clients {
        waiters.push(waiter(c.count_down_latch(name), false));
        waiters.push(waiter(c.count_down_latch(name), true));
    }
    until_parked(&env, before, 8).await;
    let start = Arc::new(tokio::sync::Barrier::new(32));
    let mut counters = Vec::new();
    for c in &clients {
        for _ in 0..8 {
            let latch = c.count_down_latch(name);
            let start = start.clone();
            counters.push(tokio::spawn(async move {
                start.wait().await;
                latch.count_down().await.unwrap()
            }));
        }
    }
    let mut got = Vec::new();
    for c in counters {
        got.push(joined(c).await);
    }
    got.sort_unstable();
    assert_eq!(got, (0..32).collect::<Vec<u64>>());
    for w in waiters {
        let (woke, seen) = joined(w).await;
        assert!(woke.unwrap());
        assert_eq!(seen, 0, "a waiter woke before the last count-down");
    }
    assert_eq!(latch.count().await.unwrap(), 0);
    assert_eq!(latch.inspect().await.unwrap().count, Some(0));
}

/// `try_set_count` is refused (`Ok(false)`, nothing changed) while the
/// latch counts, from any client, and succeeds again once it opened; a
/// count-down of an open latch or of one never set returns 0 and writes
/// nothing; waiting on a latch never set returns at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_count_is_refused_while_counting_and_unset_means_open() {
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    let name = "phases";
    let key = common::key("latch", "hold", name);
    let latch = a.count_down_latch(name);
    assert!(latch.try_set_count(2, LONG_TTL).await.unwrap());
    let set = fields(&env, &key).await;
    assert!(!latch.try_set_count(5, LONG_TTL).await.unwrap());
    assert!(!b
        .count_down_latch(name)
        .try_set_count(7, Duration::from_secs(1))
        .await
        .unwrap());
    assert_eq!(fields(&env, &key).await, set, "a refused set wrote");
    assert!(
        pttl(&env, &key).await > 500_000,
        "a refused set changed the TTL"
    );
    assert_eq!(latch.count().await.unwrap(), 2);

    assert_eq!(b.count_down_latch(name).count_down().await.unwrap(), 1);
    assert!(!latch.try_set_count(5, LONG_TTL).await.unwrap());
    assert_eq!(latch.count().await.unwrap(), 1);

    // Open: counting down more changes nothing.
    assert_eq!(latch.count_down().await.unwrap(), 0);
    let open = fields(&env, &key).await;
    assert_eq!(open.get("n").map(String::as_str), Some("0"));
    let ttl = pttl(&env, &key).await;
    assert_eq!(b.count_down_latch(name).count_down().await.unwrap(), 0);
    assert_eq!(latch.count_down().await.unwrap(), 0);
    assert_eq!(
        fields(&env, &key).await,
        open,
        "a count-down of an open latch wrote"
    );
    assert!(
        pttl(&env, &key).await <= ttl,
        "a count-down of an open latch renewed it"
    );
    assert_eq!(latch.count().await.unwrap(), 0);

    // Set again for the next phase, from another client.
    assert!(b
        .count_down_latch(name)
        .try_set_count(4, LONG_TTL)
        .await
        .unwrap());
    assert_eq!(latch.count().await.unwrap(), 4);
    assert!(!latch.try_set_count(1, LONG_TTL).await.unwrap());
    assert_eq!(latch.count().await.unwrap(), 4);

    // Never set: open for its waiters, a count-down is an error (it would
    // be lost), and nothing is written.
    let unset = a.count_down_latch("never-set");
    let got = unset.count_down().await;
    assert!(
        matches!(&got, Err(Error::LatchNotSet { name }) if name == "never-set"),
        "a count-down of an unset latch: {got:?}"
    );
    let got = unset.count_down_as("w1").await;
    assert!(
        matches!(&got, Err(Error::LatchNotSet { .. })),
        "a member count-down of an unset latch: {got:?}"
    );
    assert_eq!(unset.count().await.unwrap(), 0);
    assert!(
        !exists(&env, &common::key("latch", "hold", "never-set")).await,
        "a count-down of an unset latch wrote"
    );
    timeout(WITHIN, unset.wait())
        .await
        .expect("wait on an unset latch returns at once")
        .unwrap();
    assert!(timeout(WITHIN, unset.wait_timeout(LONG_TTL))
        .await
        .expect("wait_timeout on an unset latch returns at once")
        .unwrap());
    assert!(!exists(&env, &common::key("latch", "hold", "never-set")).await);
}

/// `wait_timeout` on a latch nobody counts down returns `Ok(false)` once
/// its time ran out (not before), and the count is what it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_timeout_runs_out_on_a_latch_still_counting() {
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    let latch = a.count_down_latch("slow");
    assert!(latch.try_set_count(2, LONG_TTL).await.unwrap());
    assert_eq!(latch.count_down().await.unwrap(), 1);
    let set = fields(&env, &common::key("latch", "hold", "slow")).await;
    let waiting = b.count_down_latch("slow");
    let started = Instant::now();
    let opened = timeout(WITHIN, waiting.wait_timeout(Duration::from_millis(300)))
        .await
        .expect("wait_timeout returns once its time ran out")
        .unwrap();
    assert!(!opened, "a latch at 1 reported open");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "returned after {:?}, before its time ran out",
        started.elapsed()
    );
    assert_eq!(waiting.count().await.unwrap(), 1);
    assert_eq!(
        fields(&env, &common::key("latch", "hold", "slow")).await,
        set,
        "waiting wrote"
    );
    // A zero timeout just looks.
    assert!(!waiting.wait_timeout(Duration::ZERO).await.unwrap());
}

/// A counter that crashed: it set the count to 2 with a short TTL, counted
/// down once, and its process ended (its own runtime dropped, no shutdown).
/// Waiters that looked while it still counted get `Error::LatchExpired`
/// when the TTL ends (from `wait` and `wait_timeout` alike), never an
/// opening; the key is gone, and a later wait finds a latch not set (open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_that_expires_before_opening_fails_its_waiters() {
    let env = Env::start().await;
    let waiting = env.client().await;
    // The waiters must look while the latch still counts: a longer TTL
    // for another try when this machine is too slow for the shorter one.
    let mut checked = false;
    for (attempt, ttl) in [700_u64, 3_000, 15_000]
        .into_iter()
        .map(Duration::from_millis)
        .enumerate()
    {
        let name = format!("crashed-{attempt}");
        let key = common::key("latch", "hold", &name);
        let url = env.server.url();
        let named = name.clone();
        let counter = common::on_own_runtime(move || async move {
            let counter = Client::connect(&url).await.expect("connect");
            let latch = counter.count_down_latch(&named);
            assert!(latch.try_set_count(2, ttl).await.unwrap());
            assert_eq!(latch.count_down().await.unwrap(), 1);
            // The process ends here: no second count-down, no shutdown.
        });
        tokio::task::spawn_blocking(move || counter.join())
            .await
            .unwrap()
            .expect("the counter ran");
        let mine = waiting.count_down_latch(&name);
        mine.count().await.unwrap(); // caches the read script
        let before = common::evalsha_calls(&env).await;
        let waiters = [
            waiter_result(mine.clone(), false),
            waiter_result(mine.clone(), true),
        ];
        until_parked(&env, before, 2).await;
        // A key that expired never comes back: existing now, it existed
        // at the waiters' looks.
        let looked_in_time = exists(&env, &key).await;
        let bound = ttl + WITHIN;
        for w in waiters {
            let got = timeout(bound, w)
                .await
                .expect("woken at the TTL's end")
                .unwrap();
            if looked_in_time {
                assert!(
                    matches!(&got, Err(Error::LatchExpired { name: n }) if *n == name),
                    "a waiter of an expired latch got {got:?}"
                );
            }
        }
        if !looked_in_time {
            continue;
        }
        assert!(
            !exists(&env, &key).await,
            "the expired latch is still there"
        );
        assert_eq!(mine.count().await.unwrap(), 0);
        assert!(!mine.inspect().await.unwrap().exists);
        timeout(WITHIN, mine.wait())
            .await
            .expect("a later wait returns at once")
            .unwrap();
        checked = true;
        break;
    }
    assert!(
        checked,
        "no waiter looked before the latch expired, even with a 15 s TTL"
    );
}

/// A task waiting on `latch` (`wait_timeout` of a long time when
/// `bounded`): what its wait returned.
fn waiter_result(latch: CountDownLatch, bounded: bool) -> JoinHandle<redisync::Result<bool>> {
    tokio::spawn(async move {
        if bounded {
            latch.wait_timeout(LONG_TTL).await
        } else {
            latch.wait().await.map(|()| true)
        }
    })
}

/// A waiter of a latch that expired and was set again (a new phase, not
/// an opening) before the waiter looked again gets `LatchExpired`, not the
/// new phase's count: the deletion stands in for the TTL's end, and the
/// waiter's client has a short watchdog period, so it looks again by
/// itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_of_an_expired_phase_is_not_fooled_by_the_next_one() {
    let env = Env::start().await;
    let setter = env.client().await;
    let waiting = env.client_with_watchdog(Duration::from_secs(1)).await;
    let name = "reborn";
    let latch = setter.count_down_latch(name);
    assert!(latch.try_set_count(2, LONG_TTL).await.unwrap());
    assert_eq!(latch.count().await.unwrap(), 2);
    let before = common::evalsha_calls(&env).await;
    let w = waiter_result(waiting.count_down_latch(name), true);
    until_parked(&env, before, 1).await;
    let _: i64 = env
        .admin
        .del(common::key("latch", "hold", name))
        .await
        .unwrap();
    assert!(latch.try_set_count(3, LONG_TTL).await.unwrap());
    let got = joined(w).await;
    assert!(
        matches!(&got, Err(Error::LatchExpired { name: n }) if n == name),
        "got {got:?}"
    );
    assert_eq!(latch.count().await.unwrap(), 3);
}

/// A waiter whose wake-up message never came (the opening published
/// elsewhere, as a message lost in a reconnect) still returns: it looks
/// again within a watchdog period. The latch was set again for the next
/// phase meanwhile: the waiter still sees that its own phase opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_without_its_message_sees_its_phase_opened_after_the_next_is_set() {
    let env = Env::start().await;
    let setter = env.client().await;
    let waiting = env.client_with_watchdog(Duration::from_secs(1)).await;
    let name = "quiet";
    let latch = setter.count_down_latch(name);
    assert!(latch.try_set_count(1, LONG_TTL).await.unwrap());
    assert_eq!(latch.count().await.unwrap(), 1);
    let before = common::evalsha_calls(&env).await;
    let waiters = [
        waiter_result(waiting.count_down_latch(name), false),
        waiter_result(waiting.count_down_latch(name), true),
    ];
    until_parked(&env, before, 2).await;
    // The opening and the next setting in one script (each script's text
    // as a function of its own KEYS and ARGV): no waiter can see the latch
    // open in between.
    let helpers =
        redisync::__private::script_helpers(&["latch_count_down.lua", "latch_set_count.lua"])
            .unwrap();
    let both = format!(
        "{helpers}\nlocal function count_down(KEYS, ARGV)\n{COUNT_DOWN}\nend\n\
         local function set_count(KEYS, ARGV)\n{SET_COUNT}\nend\n\
         return {{count_down(KEYS, {{ARGV[1], ARGV[2], ARGV[3], ARGV[7], ''}}), \
         set_count(KEYS, {{ARGV[4], ARGV[5], ARGV[6]}})}}"
    );
    let replies: Vec<i64> = env
        .admin
        .eval(
            both,
            vec![
                common::key("latch", "hold", name),
                common::key("latch", "record", name),
                common::key("latch", "forget", name),
            ],
            vec![
                "silent",
                publish_command(&env),
                "elsewhere",
                "5",
                "600000",
                "phase-2",
                "60000",
            ],
        )
        .await
        .unwrap();
    assert_eq!(replies, [0, 1], "opened, then set again");
    for w in waiters {
        let got = joined(w).await;
        assert!(matches!(got, Ok(true)), "got {got:?}");
    }
    assert_eq!(latch.count().await.unwrap(), 5, "the next phase counts");
}

/// An opened latch stays open: count 0, `inspect` shows count 0 with the
/// TTL started again at the opening; a late `wait` returns at once. Once
/// that TTL ends the latch is gone (not set: open again for waiters).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opened_latch_stays_open_for_its_ttl_then_is_gone() {
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    let name = "done";
    let key = common::key("latch", "hold", name);
    let latch = a.count_down_latch(name);
    assert!(latch
        .try_set_count(1, Duration::from_mins(1))
        .await
        .unwrap());
    // Most of the TTL has passed by the time it opens.
    let _: bool = env.admin.pexpire(&key, 5_000, None).await.unwrap();
    assert_eq!(latch.count_down().await.unwrap(), 0);
    assert!(
        pttl(&env, &key).await > 50_000,
        "the opening did not start the TTL again"
    );
    let seen = b.count_down_latch(name).inspect().await.unwrap();
    assert!(seen.exists);
    assert_eq!(seen.kind, LockKind::Latch);
    assert_eq!(seen.count, Some(0));
    let left = seen.lease_left.expect("a TTL");
    assert!(left > Duration::from_secs(50) && left <= Duration::from_mins(1));
    let late = b.count_down_latch(name);
    assert_eq!(late.count().await.unwrap(), 0);
    timeout(WITHIN, late.wait())
        .await
        .expect("a late wait returns at once")
        .unwrap();
    assert!(timeout(WITHIN, late.wait_timeout(LONG_TTL))
        .await
        .expect("a late wait_timeout returns at once")
        .unwrap());

    // A short-lived one: open, then gone when its TTL ends.
    let brief = a.count_down_latch("brief");
    assert!(brief
        .try_set_count(1, Duration::from_millis(300))
        .await
        .unwrap());
    assert_eq!(brief.count_down().await.unwrap(), 0);
    let gone = eventually(WITHIN, || async {
        !exists(&env, &common::key("latch", "hold", "brief")).await
    })
    .await;
    assert!(gone, "an open latch outlived its TTL");
    assert_eq!(brief.count().await.unwrap(), 0);
    assert!(!brief.inspect().await.unwrap().exists);
    timeout(WITHIN, brief.wait()).await.unwrap().unwrap();
}

/// The count-down script run twice with one id (a count-down sent again)
/// counts once, for an intermediate count-down and for the opening one;
/// another id counts again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_down_sent_twice_counts_once() {
    let env = Env::start().await;
    let client = env.client().await;
    let name = "retried";
    let latch = client.count_down_latch(name);
    let ch = common::key("latch", "ch", name);
    assert!(latch.try_set_count(3, LONG_TTL).await.unwrap());
    assert_eq!(raw_count_down(&env, name, "op-1", &ch).await, 2);
    assert_eq!(
        raw_count_down(&env, name, "op-1", &ch).await,
        2,
        "op-1 counted twice"
    );
    assert_eq!(latch.count().await.unwrap(), 2);
    assert_eq!(raw_count_down(&env, name, "op-2", &ch).await, 1);
    // Answered as the first time, counting nothing.
    assert_eq!(raw_count_down(&env, name, "op-1", &ch).await, 2);
    assert_eq!(
        raw_count_down(&env, name, "op-2", &ch).await,
        1,
        "op-2 counted twice"
    );
    assert_eq!(latch.count().await.unwrap(), 1);
    assert_eq!(raw_count_down(&env, name, "op-3", &ch).await, 0);
    assert_eq!(raw_count_down(&env, name, "op-3", &ch).await, 0);
    assert_eq!(latch.count().await.unwrap(), 0);
    assert_eq!(latch.inspect().await.unwrap().count, Some(0));
}

/// A count-down whose reply is lost (the request reached Redis, then the
/// connection was reset) is sent again by the client and still counts
/// once: `count_down` returns the count after its single count-down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_down_whose_reply_is_lost_counts_once() {
    let env = Env::start().await;
    let proxy = redisync_testkit::FaultProxy::start(env.server.addr()).await;
    let counter = common::client_via(&proxy).await;
    let other = env.client().await;
    // Caches the count-down script: the EVALSHA below runs at once.
    assert!(matches!(
        counter.count_down_latch("warm").count_down().await,
        Err(Error::LatchNotSet { .. })
    ));
    let name = "lossy";
    let latch = other.count_down_latch(name);
    assert!(latch.try_set_count(3, LONG_TTL).await.unwrap());
    proxy.blackhole(redisync_testkit::Direction::Downstream);
    let mine = counter.count_down_latch(name);
    let sent = tokio::spawn(async move { mine.count_down().await });
    let ran = eventually(WITHIN, || async { latch.count().await.unwrap() == 2 }).await;
    assert!(ran, "the count-down never reached Redis");
    cut(&env, &proxy).await;
    let before = common::evalsha_calls(&env).await;
    let got = joined(sent).await;
    assert!(
        common::evalsha_calls(&env).await > before,
        "the count-down was not sent again"
    );
    assert_eq!(got.unwrap(), 2, "the count-down's answer");
    assert_eq!(
        latch.count().await.unwrap(),
        2,
        "the count-down counted twice"
    );
}

/// The same as the test above, at a phase boundary: the last count-down
/// opens the latch but its reply is lost; the coordinator, woken by the
/// opening, sets the count for the next phase; the client then sends the
/// count-down again. By the contract ("a second run of it changes
/// nothing") the next phase keeps its full count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_opening_count_down_sent_again_does_not_count_the_next_phase() {
    let env = Env::start().await;
    let proxy = redisync_testkit::FaultProxy::start(env.server.addr()).await;
    let counter = common::client_via(&proxy).await;
    let coordinator = env.client().await;
    assert!(matches!(
        counter.count_down_latch("warm").count_down().await,
        Err(Error::LatchNotSet { .. })
    ));
    let name = "chained";
    let latch = coordinator.count_down_latch(name);
    assert!(latch.try_set_count(1, LONG_TTL).await.unwrap());
    assert_eq!(latch.count().await.unwrap(), 1);
    let before = common::evalsha_calls(&env).await;
    let phase_1 = waiter_result(coordinator.count_down_latch(name), false);
    until_parked(&env, before, 1).await;
    proxy.blackhole(redisync_testkit::Direction::Downstream);
    let mine = counter.count_down_latch(name);
    let sent = tokio::spawn(async move { mine.count_down().await });
    assert!(joined(phase_1).await.unwrap(), "phase 1 opened");
    assert!(
        latch.try_set_count(2, LONG_TTL).await.unwrap(),
        "phase 2 set"
    );
    cut(&env, &proxy).await;
    let got = joined(sent).await;
    assert_eq!(
        latch.count().await.unwrap(),
        2,
        "the re-sent count-down of phase 1 counted phase 2 down"
    );
    assert_eq!(got.unwrap(), 0, "the count-down opened phase 1");
}

/// The same at the script level: one count-down id run again after its
/// latch opened and was set for the next phase changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_down_run_again_in_the_next_phase_changes_nothing() {
    let env = Env::start().await;
    let client = env.client().await;
    let name = "replayed";
    let ch = common::key("latch", "ch", name);
    let latch = client.count_down_latch(name);
    assert!(latch.try_set_count(1, LONG_TTL).await.unwrap());
    assert_eq!(raw_count_down(&env, name, "op-last", &ch).await, 0);
    assert!(latch.try_set_count(2, LONG_TTL).await.unwrap());
    raw_count_down(&env, name, "op-last", &ch).await;
    assert_eq!(
        latch.count().await.unwrap(),
        2,
        "a replayed count-down counted the next phase"
    );
}

/// A waiter stalled (its whole process paused, as by a long GC pause or
/// SIGSTOP) from before the opening until after the open latch's TTL ended
/// comes back to find the latch gone: Redis remembers that its phase
/// opened (for a minute after the open latch ended), so the wait returns
/// `Ok`, not `LatchExpired`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_stalled_past_the_open_latchs_ttl_still_sees_it_opened() {
    let env = Env::start().await;
    let opener = env.client().await;
    let name = "stalled";
    let latch = opener.count_down_latch(name);
    assert!(latch
        .try_set_count(1, Duration::from_secs(3))
        .await
        .unwrap());
    assert_eq!(latch.count().await.unwrap(), 1);
    let (stall, stall_now) = tokio::sync::oneshot::channel::<()>();
    let (stalled, stalling) = tokio::sync::oneshot::channel::<()>();
    let (resume, resumed) = std::sync::mpsc::channel::<()>();
    let (report, reported) = tokio::sync::oneshot::channel();
    let before = common::evalsha_calls(&env).await;
    let url = env.server.url();
    let thread = common::on_own_runtime(move || async move {
        let client = Client::connect(&url).await.expect("connect");
        let w = waiter_result(client.count_down_latch("stalled"), false);
        // The runtime runs the waiter until the test asks for the stall...
        stall_now.await.expect("the test asks for the stall");
        stalled.send(()).expect("the test waits for the stall");
        // ...then its only thread blocks: nothing of the client runs.
        resumed.recv().expect("the test resumes");
        let _ = report.send(w.await.expect("the waiter panicked"));
    });
    until_parked(&env, before, 1).await;
    stall.send(()).unwrap();
    stalling.await.unwrap();
    assert_eq!(latch.count_down().await.unwrap(), 0, "opened");
    let gone = eventually(WITHIN, || async {
        !exists(&env, &common::key("latch", "hold", name)).await
    })
    .await;
    assert!(gone, "the open latch did not expire");
    resume.send(()).unwrap();
    let got = timeout(WITHIN, reported).await.unwrap().unwrap();
    tokio::task::spawn_blocking(move || thread.join())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(got, Ok(true)),
        "the waiter of an opened latch got {got:?}"
    );
}

/// A result with its value printed, so results of any type compare alike.
fn shown<T: std::fmt::Debug>(got: redisync::Result<T>) -> Result<String, Error> {
    got.map(|v| format!("{v:?}"))
}

/// Asserts that `got` is `Err(Error::InvalidArgument(_))`.
fn assert_invalid<T: std::fmt::Debug>(what: &str, got: &redisync::Result<T>) {
    assert!(
        matches!(got, Err(Error::InvalidArgument(_))),
        "{what}: got {got:?}"
    );
}

/// Bad input is refused with `InvalidArgument` and writes nothing: an
/// empty name for every method, a count of 0 or of 2^53 and more, a zero
/// or absurd TTL. The largest count, 2^53 - 1, is accepted and counts down
/// exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_writes_nothing() {
    let env = Env::start().await;
    let client = env.client().await;
    let empty = client.count_down_latch("");
    assert_invalid("set", &empty.try_set_count(1, LONG_TTL).await);
    assert_invalid("count_down", &empty.count_down().await);
    assert_invalid("count", &empty.count().await);
    assert_invalid("wait", &empty.wait().await);
    assert_invalid("wait_timeout", &empty.wait_timeout(LONG_TTL).await);
    assert_invalid("inspect", &empty.inspect().await);
    assert_invalid("client inspect", &client.inspect("").await);

    let latch = client.count_down_latch("bounds");
    assert_invalid("count 0", &latch.try_set_count(0, LONG_TTL).await);
    assert_invalid("count 2^53", &latch.try_set_count(1 << 53, LONG_TTL).await);
    assert_invalid(
        "count u64::MAX",
        &latch.try_set_count(u64::MAX, LONG_TTL).await,
    );
    assert_invalid("TTL 0", &latch.try_set_count(1, Duration::ZERO).await);
    assert_invalid(
        "TTL of 400 days",
        &latch.try_set_count(1, Duration::from_hours(400 * 24)).await,
    );
    let keys: i64 = env.admin.dbsize().await.unwrap();
    assert_eq!(keys, 0, "refused input wrote");

    let most = (1_u64 << 53) - 1;
    assert!(latch.try_set_count(most, LONG_TTL).await.unwrap());
    assert_eq!(latch.count().await.unwrap(), most);
    assert_eq!(latch.count_down().await.unwrap(), most - 1);
    assert_eq!(latch.count().await.unwrap(), most - 1);
    assert_eq!(latch.inspect().await.unwrap().count, Some(most - 1));
}

/// A latch key that holds something else (a string, a list, a hash
/// without a count, a hash with a count that is no number) is refused by
/// every method with `Error::WrongType` naming the key, and left exactly
/// as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_refused_and_left_untouched() {
    let env = Env::start().await;
    let client = env.client().await;
    for (case, plant) in [
        ("string", vec!["SET", "_", "not a latch"]),
        ("list", vec!["RPUSH", "_", "a", "b"]),
        ("hash", vec!["HSET", "_", "field", "1"]),
        ("text-count", vec!["HSET", "_", "n", "many", "id", "x"]),
    ] {
        let key = common::key("latch", "hold", case);
        let args: Vec<&str> = plant
            .iter()
            .map(|a| if *a == "_" { key.as_str() } else { a })
            .collect();
        redisync_testkit::command(env.server.port(), &args)
            .await
            .unwrap();
        let dumped: Value = env.admin.dump(&key).await.unwrap();
        let latch = client.count_down_latch(case);
        let wrong = |what: &str, got: Result<String, Error>| {
            assert!(
                matches!(&got, Err(Error::WrongType { key: k }) if *k == key),
                "{case}, {what}: got {got:?}"
            );
        };
        wrong("set", shown(latch.try_set_count(2, LONG_TTL).await));
        wrong("count_down", shown(latch.count_down().await));
        wrong("count", shown(latch.count().await));
        wrong(
            "wait",
            shown(timeout(WITHIN, latch.wait()).await.expect("wait returns")),
        );
        wrong(
            "wait_timeout",
            shown(
                timeout(WITHIN, latch.wait_timeout(LONG_TTL))
                    .await
                    .expect("wait_timeout returns"),
            ),
        );
        wrong("inspect", shown(latch.inspect().await));
        wrong("client inspect", shown(client.inspect(case).await));
        let after: Value = env.admin.dump(&key).await.unwrap();
        assert_eq!(after, dumped, "{case}: the key was changed");
        assert_eq!(pttl(&env, &key).await, -1, "{case}: the key got a TTL");
    }
}

/// `CountDownLatch::inspect`, `Client::inspect` and `Client::list` show a
/// latch as kind `Latch` with its count left and its TTL left, and no
/// holders; a lock of the same name is shown next to it as a lock; a latch
/// never set is not shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspection_shows_the_count_and_the_ttl() {
    let env = Env::start().await;
    let client = env.client().await;
    let jobs = client.count_down_latch("jobs");
    assert!(jobs.try_set_count(3, LONG_TTL).await.unwrap());
    assert_eq!(jobs.count_down().await.unwrap(), 2);
    let seen = jobs.inspect().await.unwrap();
    assert_eq!(seen.kind, LockKind::Latch);
    assert_eq!(seen.name, "jobs");
    assert!(seen.exists);
    assert_eq!(seen.count, Some(2));
    let left = seen.lease_left.expect("a TTL");
    assert!(
        left > Duration::from_mins(9) && left <= LONG_TTL,
        "TTL left {left:?}"
    );
    assert!(seen.holders.is_empty() && seen.waiters.is_empty());
    assert_eq!((seen.permits, seen.token), (None, None));

    let found = client.inspect("jobs").await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, LockKind::Latch);
    assert_eq!(found[0].count, Some(2));

    let guard = client.lock("jobs").lock().await.unwrap();
    let done = client.count_down_latch("done");
    assert!(done.try_set_count(1, LONG_TTL).await.unwrap());
    assert_eq!(done.count_down().await.unwrap(), 0);
    let kinds = |all: &[redisync::inspect::Inspection]| -> Vec<(String, LockKind, Option<u64>)> {
        all.iter()
            .map(|i| (i.name.clone(), i.kind, i.count))
            .collect()
    };
    let both = client.inspect("jobs").await.unwrap();
    assert_eq!(
        kinds(&both),
        [
            ("jobs".to_owned(), LockKind::Lock, None),
            ("jobs".to_owned(), LockKind::Latch, Some(2)),
        ]
    );
    let all = client.list("*").await.unwrap();
    assert_eq!(
        kinds(&all),
        [
            ("done".to_owned(), LockKind::Latch, Some(0)),
            ("jobs".to_owned(), LockKind::Lock, None),
            ("jobs".to_owned(), LockKind::Latch, Some(2)),
        ]
    );
    assert!(all.iter().all(|i| i.lease_left.is_some()));
    assert_eq!(
        kinds(&client.list("do*").await.unwrap()),
        [("done".to_owned(), LockKind::Latch, Some(0))]
    );
    guard.unlock().await.unwrap();

    let never = client.count_down_latch("never");
    let none = never.inspect().await.unwrap();
    assert!(!none.exists);
    assert_eq!((none.count, none.lease_left), (None, None));
    assert!(client.inspect("never").await.unwrap().is_empty());
}

/// Tasks blocked in `wait` and `wait_timeout` return `Err(Error::Shutdown)`
/// promptly when their client shuts down (the latch still counting, long
/// before any periodic look); every method fails so afterwards, writing
/// nothing. A waiter of another client is untouched and wakes at the
/// opening.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_the_waits_of_its_client_only() {
    let env = Env::start().await;
    let (closing, other, counter) = (env.client().await, env.client().await, env.client().await);
    let name = "closing";
    let latch = counter.count_down_latch(name);
    assert!(latch.try_set_count(1, LONG_TTL).await.unwrap());
    assert_eq!(latch.count().await.unwrap(), 1);
    let before = common::evalsha_calls(&env).await;
    let ended = [
        waiter_result(closing.count_down_latch(name), false),
        waiter_result(closing.count_down_latch(name), true),
    ];
    let untouched = waiter_result(other.count_down_latch(name), false);
    until_parked(&env, before, 3).await;
    timeout(WITHIN, closing.shutdown())
        .await
        .expect("the shutdown returns")
        .unwrap();
    for w in ended {
        let got = joined(w).await;
        assert!(matches!(got, Err(Error::Shutdown)), "got {got:?}");
    }
    let late = closing.count_down_latch(name);
    assert!(matches!(late.wait().await, Err(Error::Shutdown)));
    assert!(matches!(late.count_down().await, Err(Error::Shutdown)));
    assert!(matches!(
        late.try_set_count(1, LONG_TTL).await,
        Err(Error::Shutdown)
    ));
    assert_eq!(
        latch.count().await.unwrap(),
        1,
        "a failed count-down counted"
    );
    assert!(
        !untouched.is_finished(),
        "the other client's waiter returned"
    );
    assert_eq!(latch.count_down().await.unwrap(), 0);
    assert!(joined(untouched).await.unwrap());
}
