//! `Redlock` against real, independent redis-server processes: minority
//! failures tolerated, majority failures reported in bounded time, validity,
//! mutual exclusion and fencing tokens across clients, the restart guard,
//! extension, watchdog loss, cancellation.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::prelude::KeysInterface;
use redisync::__private;
use redisync::Client;
use redisync_redlock::{Error, Redlock, RedlockGuard, Votes};
use redisync_testkit::RedisNodes;
use tokio::time::{sleep, timeout, Instant};

const NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// Slack for a loaded 2-core machine running many tests at once.
const SLACK: Duration = Duration::from_millis(400);
const LEASE: Duration = Duration::from_secs(10);

/// One "process": its own client on every node.
async fn clients(nodes: &RedisNodes) -> Vec<Client> {
    clients_with_watchdog(nodes, Duration::from_secs(30)).await
}

async fn clients_with_watchdog(nodes: &RedisNodes, watchdog: Duration) -> Vec<Client> {
    let mut out = Vec::new();
    for url in nodes.urls() {
        let c = Client::builder(&url)
            .command_timeout(Duration::from_millis(500))
            .watchdog_timeout(watchdog)
            .connect()
            .await
            .expect("connect");
        out.push(c);
    }
    out
}

/// A Redlock on `name` over `clients`, restart guard off unless a test sets it.
fn redlock(clients: &[Client], name: &str) -> Redlock {
    redlock_with(clients, name, Duration::ZERO)
}

fn redlock_with(clients: &[Client], name: &str, max_lease: Duration) -> Redlock {
    redlock_timed(clients, name, max_lease, NODE_TIMEOUT)
}

fn redlock_timed(
    clients: &[Client],
    name: &str,
    max_lease: Duration,
    node_timeout: Duration,
) -> Redlock {
    Redlock::builder(clients.iter().map(|c| c.lock(name)).collect())
        .node_timeout(node_timeout)
        .retry_delay(Duration::from_millis(50))
        .max_lease(max_lease)
        .build()
        .expect("build")
}

/// Which of the nodes `which` (not paused) hold `name` right now (plain
/// EXISTS through an admin client).
async fn held_on(nodes: &RedisNodes, name: &str, which: &[usize]) -> Vec<usize> {
    let mut out = Vec::new();
    for &i in which {
        let admin = common::admin(&nodes[i].url()).await;
        let exists: i64 = admin.exists(common::lock_key(name)).await.expect("EXISTS");
        if exists == 1 {
            out.push(i);
        }
        let _ = fred::prelude::ClientLike::quit(&admin).await;
    }
    out
}

/// Polls until `name` is held on none of `which` (not paused); false after 10 s.
async fn released_on(nodes: &RedisNodes, name: &str, which: &[usize]) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if held_on(nodes, name, which).await.is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        sleep(Duration::from_millis(20)).await;
    }
}

/// A guard of `rl` that every one of its `n` nodes granted. A round wins
/// with a majority, so a node that missed it (slow on a loaded machine, or
/// still busy undoing an earlier attempt) leaves it out: such a guard is
/// given back and the round tried again.
async fn held_on_all(
    rl: &Redlock,
    n: usize,
    wait: Duration,
    lease: Option<Duration>,
) -> RedlockGuard {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let guard = rl
            .try_lock(wait, lease)
            .await
            .expect("try_lock")
            .expect("free");
        if guard.nodes().len() == n {
            return guard;
        }
        let _ = guard.unlock().await;
        assert!(Instant::now() < deadline, "no round won all {n} nodes");
    }
}

fn votes_of(r: Result<Option<RedlockGuard>, Error>) -> Votes {
    match r {
        Err(Error::QuorumNotReached { votes, .. }) => votes,
        other => panic!("expected QuorumNotReached, got {other:?}"),
    }
}

#[test]
fn bounds() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Redlock>();
    send_sync::<RedlockGuard>();
}

/// Type-checked only: the futures are `Send`.
#[allow(dead_code)]
fn futures_are_send(r: &Redlock, g: RedlockGuard) {
    fn send<T: Send>(_: &T) {}
    send(&r.lock());
    send(&r.try_lock(Duration::ZERO, None));
    send(&g.extend(LEASE));
    send(&g.lost());
    send(&g.unlock());
}

/// Done when: acquisition succeeds with 2 of 5 nodes paused, within about
/// one node timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_with_two_of_five_nodes_paused() {
    let nodes = RedisNodes::start(5).await;
    let cs = clients(&nodes).await;
    let rl = redlock(&cs, "two-paused");
    nodes[0].pause();
    nodes[3].pause();
    // Every round ends within about one node timeout. The three live nodes
    // must all answer in time to win: a loaded machine can make one miss
    // a round, which then fails for want of nodes and is tried again.
    let mut won = 0;
    for round in 0..30 {
        let started = Instant::now();
        let attempt = rl.try_lock(Duration::ZERO, Some(LEASE)).await;
        let took = started.elapsed();
        assert!(took < NODE_TIMEOUT + SLACK, "round {round} took {took:?}");
        let guard = match attempt {
            Ok(Some(guard)) => guard,
            Err(Error::QuorumNotReached { votes, .. }) => {
                assert!(votes.timed_out >= 2, "the paused nodes time out: {votes}");
                continue;
            }
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(guard.nodes(), [1, 2, 4]);
        let v = guard.validity();
        assert!(v > Duration::ZERO && v + took < LEASE, "{v:?}");
        // A node slow to confirm is released in the background.
        if let Err(e) = guard.unlock().await {
            assert!(matches!(e, Error::Release { .. }), "{e:?}");
        }
        won += 1;
        if won == 3 {
            break;
        }
    }
    assert_eq!(won, 3, "3 of 5 grant");
    assert!(released_on(&nodes, "two-paused", &[1, 2, 4]).await);
}

/// Done when: acquisition fails in bounded time with 3 of 5 nodes paused,
/// saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_in_bounded_time_with_three_of_five_nodes_paused() {
    let nodes = RedisNodes::start(5).await;
    let cs = clients(&nodes).await;
    let rl = redlock(&cs, "three-paused");
    for i in [0, 2, 4] {
        nodes[i].pause();
    }
    // The paused nodes time out, never count as refusals (their clients'
    // busy local queues answer "busy" without asking them). A live node a
    // loaded machine makes slow adds a time-out or a refusal of its own.
    let expect = |v: Votes| {
        assert_eq!((v.nodes, v.required), (5, 3), "{v}");
        assert!(v.timed_out >= 3 && v.granted <= 2, "{v}");
        assert_eq!(v.granted + v.timed_out + v.refused, 5, "{v}");
    };
    // One attempt.
    let started = Instant::now();
    expect(votes_of(rl.try_lock(Duration::ZERO, Some(LEASE)).await));
    assert!(started.elapsed() < NODE_TIMEOUT + SLACK);
    // Attempts until the wait runs out; the paused nodes still count as
    // timed out (not as refusals from their clients' busy local queues).
    let started = Instant::now();
    let err = rl
        .try_lock(Duration::from_millis(500), Some(LEASE))
        .await
        .expect_err("no majority");
    assert!(started.elapsed() < Duration::from_millis(500) + NODE_TIMEOUT + SLACK);
    assert!(err.is_retryable());
    let text = err.to_string();
    assert!(text.contains("2 of 5 nodes granted, 3 required"), "{text}");
    expect(votes_of(Err(err)));
    // lock() gives up after a few attempts that fail for want of nodes.
    let started = Instant::now();
    match rl.lock().await {
        Err(Error::QuorumNotReached { votes, .. }) => expect(votes),
        other => panic!("unexpected {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    // Nothing is left held on the live nodes.
    assert!(released_on(&nodes, "three-paused", &[1, 3]).await);
}

/// Done when: validity is below the lease and positive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validity_is_positive_and_below_the_lease() {
    let nodes = RedisNodes::start(3).await;
    let cs = clients_with_watchdog(&nodes, Duration::from_millis(600)).await;
    let rl = redlock(&cs, "validity");
    let lease = Duration::from_secs(2);
    let started = Instant::now();
    let guard = rl
        .try_lock(Duration::ZERO, Some(lease))
        .await
        .expect("try_lock")
        .expect("free");
    let v1 = guard.validity();
    // lease - elapsed - (1% + 2 ms) = at most 2000 - 22 ms.
    assert!(v1 > Duration::ZERO, "{v1:?}");
    assert!(v1 + Duration::from_millis(22) <= lease, "{v1:?}");
    assert!(
        v1 + Duration::from_millis(22) + started.elapsed() >= lease,
        "{v1:?}"
    );
    sleep(Duration::from_millis(300)).await;
    let v2 = guard.validity();
    assert!(v2 + Duration::from_millis(300) <= v1, "{v1:?} then {v2:?}");
    assert!(!guard.is_lost());
    guard.unlock().await.expect("unlock");

    // Watchdog mode: the nodes' renewals keep it valid past the first lease.
    let guard = rl.lock().await.expect("lock");
    for _ in 0..5 {
        sleep(Duration::from_millis(250)).await;
        let v = guard.validity();
        assert!(
            v > Duration::ZERO && v < Duration::from_millis(600),
            "{v:?}"
        );
        assert!(!guard.is_lost());
    }
    guard.unlock().await.expect("unlock");

    // A lease within its drift allowance (2 ms + 1 %) could never be
    // valid: refused before any I/O.
    let never = rl
        .try_lock(Duration::ZERO, Some(Duration::from_millis(2)))
        .await;
    match never {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("drift"), "{m}"),
        other => panic!("unexpected {other:?}"),
    }
    // A lease too short for the attempt (79 µs above its drift allowance:
    // less than a round trip to three nodes) never hands out a guard.
    let short = rl
        .try_lock(Duration::ZERO, Some(Duration::from_micros(2100)))
        .await;
    match short {
        Err(Error::QuorumNotReached { votes, .. }) => assert!(votes.expired, "{votes}"),
        other => panic!("unexpected {other:?}"),
    }
}

/// Done when: mutual exclusion and unique increasing tokens across 4 clients
/// sharing 3 nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_and_increasing_tokens_across_four_clients() {
    let nodes = RedisNodes::start(3).await;
    let holders = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for client in 0..4 {
        let cs = clients(&nodes).await;
        let rl = Redlock::builder(cs.iter().map(|c| c.lock("shared")).collect())
            .node_timeout(NODE_TIMEOUT)
            .retry_delay(Duration::from_millis(20))
            .max_lease(Duration::ZERO)
            .build()
            .expect("build");
        let (holders, overlaps, tokens) = (holders.clone(), overlaps.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..10 {
                let guard = rl
                    .try_lock(Duration::from_secs(8), Some(Duration::from_secs(2)))
                    .await
                    .expect("try_lock")
                    .unwrap_or_else(|| panic!("client {client} attempt {i} starved"));
                if holders.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokens.lock().unwrap().push((client, guard.fencing_token()));
                sleep(Duration::from_millis(2)).await;
                holders.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().await.expect("unlock");
            }
            drop(cs);
        }));
    }
    let results = timeout(Duration::from_secs(30), futures::future::join_all(tasks))
        .await
        .expect("40 acquisitions finish");
    for r in results {
        r.expect("task");
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "mutual exclusion");
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), 40);
    // Recorded while holding the lock, so in acquisition order.
    for w in tokens.windows(2) {
        assert!(w[1].1 > w[0].1, "tokens must strictly increase: {w:?}");
    }
}

/// Done when: a node that restarted empty cannot make a second client win
/// while the first holder's lock is valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_node_cannot_grant_the_lock_twice() {
    let mut nodes = RedisNodes::start(3).await;
    let max_lease = Duration::from_secs(1);
    let a = redlock_with(&clients(&nodes).await, "restart", max_lease);
    let b = redlock_with(&clients(&nodes).await, "restart", max_lease);
    // Fresh nodes count only once they are up for max_lease (unless this
    // machine took over a second to get here).
    if let Err(Error::QuorumNotReached { votes, .. }) =
        a.try_lock(Duration::ZERO, Some(max_lease)).await
    {
        // (A node a loaded machine makes slow times out instead.)
        assert_eq!(
            votes.restarted + votes.granted + votes.timed_out,
            3,
            "{votes}"
        );
        if votes.restarted > 0 {
            assert!(votes.to_string().contains("max_lease"), "{votes}");
        }
    }
    assert!(released_on(&nodes, "restart", &[0, 1, 2]).await);
    let within = "nodes come of age within 3 s (2 s of uptime as Redis rounds it)";
    let (held, a_valid_until) =
        held_on_0_and_1_then_node_1_restarts(&mut nodes, &a, max_lease, within).await;
    // B gets nodes 1 and 2, but node 1 is too young to count.
    let refused = wins_only_after(&b, max_lease, a_valid_until).await;
    assert!(refused > 0, "B was refused while A held the lock");
    drop(held);
}

/// A holds nodes 0 and 1 only (node 2 hangs during its attempt), then
/// node 1 restarts empty and forgets A's grant: A's guard and the end of
/// its validity.
async fn held_on_0_and_1_then_node_1_restarts(
    nodes: &mut RedisNodes,
    a: &Redlock,
    max_lease: Duration,
    within: &str,
) -> (RedlockGuard, Instant) {
    nodes[2].pause();
    let held = a
        .try_lock(Duration::from_secs(3), Some(max_lease))
        .await
        .expect("try_lock")
        .expect(within);
    let a_valid_until = Instant::now() + held.validity();
    assert_eq!(held.nodes(), [0, 1]);
    nodes[2].resume();
    nodes[1].restart().await;
    (held, a_valid_until)
}

/// Tries `b` every 25 ms until it wins, and asserts that this was not
/// before `valid_until` (the validity of another holder); returns the tries
/// refused before `valid_until`.
async fn wins_only_after(b: &Redlock, lease: Duration, valid_until: Instant) -> u32 {
    let (mut tries, mut refused) = (0, 0);
    let won_at = loop {
        match b.try_lock(Duration::ZERO, Some(lease)).await {
            Ok(Some(g)) => {
                let at = Instant::now();
                // (A node slow to confirm is released in the background.)
                let _ = g.unlock().await;
                break at;
            }
            // Busy, or a node still reconnecting: not a majority either way.
            Ok(None) | Err(Error::QuorumNotReached { .. }) => {
                refused += u32::from(Instant::now() < valid_until);
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
        tries += 1;
        assert!(tries < 200, "B never won");
        sleep(Duration::from_millis(25)).await;
    };
    assert!(
        won_at >= valid_until,
        "B won {:?} before A's validity ended",
        valid_until - won_at
    );
    refused
}

/// The restart guard reads a node's uptime once per connection: a node B
/// has already seen old, which then restarts empty, is judged again (its
/// grants do not count until it is old again) and B cannot win while A
/// holds the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_seen_old_that_restarts_is_judged_again() {
    let mut nodes = RedisNodes::start(3).await;
    let max_lease = Duration::from_secs(1);
    let a = redlock_with(&clients(&nodes).await, "seen-old", max_lease);
    // B's node timeout is long: the INFO count below must not see a node
    // that a loaded machine made B time out on.
    let b = redlock_timed(
        &clients(&nodes).await,
        "seen-old",
        max_lease,
        Duration::from_secs(2),
    );
    // B sees every node old (nodes come of age within 3 s: 2 s of uptime
    // as Redis rounds it) in one round.
    let seen = held_on_all(&b, 3, Duration::from_secs(3), Some(max_lease)).await;
    seen.unlock().await.expect("unlock");
    // A second round of B on the same connections reads no uptime.
    let before = calls(&nodes, "info").await;
    let again = b
        .try_lock(Duration::ZERO, Some(max_lease))
        .await
        .expect("try_lock")
        .expect("free");
    again.unlock().await.expect("unlock");
    // The one INFO per node is the previous count's own.
    assert_eq!(
        calls(&nodes, "info").await,
        before + 3,
        "no INFO per attempt"
    );
    // B had seen node 1 old.
    let (held, a_valid_until) =
        held_on_0_and_1_then_node_1_restarts(&mut nodes, &a, max_lease, "nodes 0 and 1").await;
    wins_only_after(&b, max_lease, a_valid_until).await;
    drop(held);
}

/// For Redlock's per-node guard: B reaches node 1 through a
/// proxy that redials the server and keeps B's connection, so B's client
/// never reconnects. Node 1, seen old by B, restarts empty: B must not
/// count its grant while A's lease (nodes 0 and 1) may still run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_behind_a_proxy_that_keeps_the_connection_is_judged_again() {
    let mut nodes = RedisNodes::start(3).await;
    let max_lease = Duration::from_secs(1);
    let name = "behind-a-proxy";
    let a = redlock_with(&clients(&nodes).await, name, max_lease);
    let proxy = common::StickyProxy::start(nodes[1].port()).await;
    let mut b_clients = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let url = if i == 1 { proxy.url() } else { node.url() };
        b_clients.push(Client::connect(&url).await.expect("connect"));
    }
    let b = redlock_timed(&b_clients, name, max_lease, Duration::from_secs(2));
    // B sees every node old on its connections.
    let seen = held_on_all(&b, 3, Duration::from_secs(3), Some(max_lease)).await;
    seen.unlock().await.expect("unlock");
    let generation = __private::connection_generation(&b_clients[1]);
    // B's connection to node 1 stays.
    let (held, a_valid_until) =
        held_on_0_and_1_then_node_1_restarts(&mut nodes, &a, max_lease, "nodes 0 and 1").await;
    wins_only_after(&b, max_lease, a_valid_until).await;
    assert_eq!(
        __private::connection_generation(&b_clients[1]),
        generation,
        "the proxy kept B's connection"
    );
    drop(held);
}

/// Calls of `command` so far, summed over the nodes (an `INFO` count does
/// not include its own call; the next one does).
async fn calls(nodes: &RedisNodes, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    let mut total = 0;
    for node in nodes {
        let stats = redisync_testkit::command(node.port(), &["INFO", "commandstats"])
            .await
            .expect("INFO commandstats");
        total += stats
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|v| v.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0);
    }
    total
}

/// The hazard the restart guard removes: with it off, a node that restarted
/// empty hands the lock to a second client while the first still holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_restart_guard_a_restarted_node_grants_twice() {
    let mut nodes = RedisNodes::start(3).await;
    let a = redlock(&clients(&nodes).await, "unguarded");
    let b = redlock(&clients(&nodes).await, "unguarded");
    nodes[2].pause();
    let held = a
        .try_lock(Duration::ZERO, Some(LEASE))
        .await
        .expect("try_lock")
        .expect("2 of 3");
    nodes[2].resume();
    nodes[1].restart().await;
    let mut second = None;
    for _ in 0..100 {
        if let Ok(Some(g)) = b.try_lock(Duration::ZERO, Some(LEASE)).await {
            second = Some(g);
            break;
        }
        sleep(Duration::from_millis(20)).await;
    }
    let second = second.expect("B wins while A's lease has time left");
    assert!(
        second.fencing_token() > held.fencing_token(),
        "fencing still tells them apart"
    );
    // A's lease clock still says held; A learns of the loss only when its
    // client, reconnected to the restarted node, checks its holds there
    // (it may have done so already): the window is the hazard.
    let learns = common::eventually(Duration::from_secs(10), || {
        let lost = held.is_lost();
        async move { lost }
    })
    .await;
    assert!(learns, "A learns it lost its member on the restarted node");
    drop((held, second));
}

/// Done when: extend fails without a majority and succeeds with one; a
/// failed extend marks the guard lost and deletes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_needs_a_majority_and_deletes_nothing_when_it_fails() {
    let nodes = RedisNodes::start(3).await;
    let cs = clients(&nodes).await;
    // The live nodes must answer each extension in time on a loaded
    // machine, so the node timeout is longer here (a paused node still
    // costs exactly one; it stays below the clients' 500 ms command
    // timeout so a paused node counts as timed out, not failed).
    let node_timeout = Duration::from_millis(300);
    let rl = redlock_timed(&cs, "extend", Duration::ZERO, node_timeout);
    let lease = Duration::from_secs(5);
    let guard = held_on_all(&rl, 3, Duration::ZERO, Some(lease)).await;
    // Long enough that an extension (at most one node timeout) shows.
    sleep(Duration::from_millis(1500)).await;
    let before = guard.validity();
    // One node of three hangs: two still make a majority.
    nodes[0].pause();
    let started = Instant::now();
    guard.extend(lease).await.expect("2 of 3 extend");
    assert!(started.elapsed() < node_timeout + SLACK);
    let after = guard.validity();
    assert!(after > before, "{before:?} then {after:?}");
    assert!(after < lease);
    // Two of three hang: no majority.
    nodes[1].pause();
    let err = guard.extend(lease).await.expect_err("1 of 3");
    match &err {
        Error::QuorumNotReached { votes, .. } => {
            assert_eq!(
                (votes.granted, votes.timed_out, votes.required),
                (1, 2, 2),
                "{votes}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(guard.is_lost());
    assert_eq!(guard.validity(), Duration::ZERO);
    timeout(Duration::from_millis(100), guard.lost())
        .await
        .expect("lost() resolves at once");
    assert!(matches!(
        guard.extend(lease).await,
        Err(Error::Lock(redisync::Error::NotHeld { .. }))
    ));
    nodes[0].resume();
    nodes[1].resume();
    // Nothing was deleted: all three nodes still hold it (rslock would DEL).
    assert_eq!(held_on(&nodes, "extend", &[0, 1, 2]).await, [0, 1, 2]);
    guard.unlock().await.expect("the nodes still held release");
    assert!(held_on(&nodes, "extend", &[0, 1, 2]).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_mode_reports_loss_of_the_majority() {
    let nodes = RedisNodes::start(3).await;
    // A watchdog lease long enough that a stalled test process does not
    // lose it; the sleep still spans more than one lease.
    let cs = clients_with_watchdog(&nodes, Duration::from_secs(1)).await;
    let other = clients(&nodes).await;
    let rl = redlock(&cs, "watched");
    let guard = held_on_all(&rl, 3, Duration::from_secs(5), None).await;
    sleep(Duration::from_millis(1500)).await;
    assert!(!guard.is_lost(), "renewed on every node");
    assert_eq!(held_on(&nodes, "watched", &[0, 1, 2]).await, [0, 1, 2]);
    // Losing one node is tolerated.
    assert!(other[0]
        .lock("watched")
        .force_unlock()
        .await
        .expect("force"));
    sleep(Duration::from_millis(700)).await;
    assert!(!guard.is_lost());
    // Losing a second one is not.
    assert!(other[2]
        .lock("watched")
        .force_unlock()
        .await
        .expect("force"));
    timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the watchdog notices within a renewal period");
    assert!(guard.is_lost());
    assert_eq!(guard.validity(), Duration::ZERO);
    // Unlock still releases the node it holds, but reports that fewer than
    // a majority confirmed.
    match guard.unlock().await {
        Err(Error::Release {
            released, required, ..
        }) => assert_eq!((released, required), (1, 2)),
        other => panic!("unexpected {other:?}"),
    }
    assert!(held_on(&nodes, "watched", &[0, 1, 2]).await.is_empty());
}

/// Under the watchdog the lost signal fires when `validity()` ends, not a
/// clock drift later (the nodes' own leases): with `drift_factor(0.5)` it
/// used to fire half a lease late, and `run_locked` worked on meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_signal_fires_when_validity_ends() {
    let nodes = RedisNodes::start(3).await;
    let cs = clients_with_watchdog(&nodes, Duration::from_secs(2)).await;
    let rl = Redlock::builder(cs.iter().map(|c| c.lock("drifting")).collect())
        .node_timeout(NODE_TIMEOUT)
        .retry_delay(Duration::from_millis(50))
        .drift_factor(0.5)
        .build()
        .expect("build");
    let guard = held_on_all(&rl, 3, Duration::from_secs(5), None).await;
    let signal = guard.lost_signal();
    assert!(futures::poll!(signal.clone()).is_pending());
    // No renewal gets through any more.
    for node in &*nodes {
        node.pause();
    }
    // Past the end of validity (asking the guard at the end would mark the
    // loss itself): the signal is ready, unless a renewal sent before the
    // pause landed meanwhile and validity grew (then wait for its end).
    loop {
        let left = guard.validity();
        assert!(
            !left.is_zero(),
            "validity ended before the signal was checked"
        );
        sleep(left + Duration::from_millis(20)).await;
        if futures::poll!(signal.clone()).is_ready() {
            break;
        }
        assert!(
            !guard.validity().is_zero(),
            "validity is zero but the lost signal waits for the nodes' leases (one drift more)"
        );
    }
    assert!(futures::poll!(std::pin::pin!(guard.lost())).is_ready());
    assert!(guard.is_lost() && signal.is_lost());
    for node in &*nodes {
        node.resume();
    }
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_are_carried_to_the_majority() {
    let nodes = RedisNodes::start(3).await;
    let cs = clients(&nodes).await;
    let rl = redlock(&cs, "fenced");
    // Node 2's counter is far ahead of the others (fresh counters start
    // from the server clock in microseconds, ~1.8e15; Lua keeps integers
    // exact below 2^53 ~ 9e15).
    let admin2 = common::admin(&nodes[2].url()).await;
    let far: u64 = 4_000_000_000_000_000;
    let _: () = admin2
        .set(
            common::key("lock", "fence", "fenced"),
            far,
            None,
            None,
            false,
        )
        .await
        .expect("SET");
    // (A round a loaded machine makes one node miss uses up a token: the
    // checks below say "above", not "equal".)
    let first = held_on_all(&rl, 3, Duration::ZERO, Some(LEASE)).await;
    let t1 = first.fencing_token();
    assert!(t1 > far, "{t1}");
    first.unlock().await.expect("unlock");
    // The next majority is nodes 0 and 1 only: they were brought up to date.
    nodes[2].pause();
    let second = rl
        .try_lock(Duration::from_secs(3), Some(LEASE))
        .await
        .expect("try_lock")
        .expect("2 of 3");
    assert_eq!(second.nodes(), [0, 1]);
    let t2 = second.fencing_token();
    assert!(t2 > t1, "{t1} then {t2}");
    second.unlock().await.expect("unlock");
    nodes[2].resume();
    let third = rl
        .try_lock(Duration::from_secs(2), Some(LEASE))
        .await
        .expect("try_lock")
        .expect("free");
    assert!(third.fencing_token() > t2);
    third.unlock().await.expect("unlock");
}

/// The nodes of one attempt agree on the token (every node gets the same
/// floor), so an acquisition is one round trip: no write-back of the
/// largest token (2 EVALSHA per node for acquire + release, nothing else).
/// The floor leads this machine's clock by a few milliseconds: a script
/// that a loaded machine sends later than that finds the node's clock past
/// it, and that attempt writes the largest token back (one more EVALSHA per
/// node behind). So most attempts, not all, must do without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_agree_on_the_token_so_nothing_is_written_back() {
    let nodes = RedisNodes::start(3).await;
    let cs = clients(&nodes).await;
    // Every node's release is awaited, so the counts below are complete.
    let rl = Redlock::builder(cs.iter().map(|c| c.lock("agree")).collect())
        .node_timeout(Duration::from_secs(5))
        .max_lease(Duration::ZERO)
        .build()
        .expect("build");
    let (mut last, mut agreed) = (0, 0);
    for _ in 0..10 {
        let before = calls(&nodes, "evalsha").await;
        let guard = rl
            .try_lock(Duration::ZERO, Some(LEASE))
            .await
            .expect("try_lock")
            .expect("free");
        assert_eq!(guard.nodes(), [0, 1, 2]);
        assert!(guard.fencing_token() > last);
        last = guard.fencing_token();
        guard.unlock().await.expect("unlock");
        let used = calls(&nodes, "evalsha").await - before;
        assert!(
            (6..=8).contains(&used),
            "{used} EVALSHA for one acquisition"
        );
        agreed += u32::from(used == 6);
    }
    assert!(
        agreed >= 5,
        "only {agreed} of 10 acquisitions did without a write-back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_lock_is_not_an_error_and_leaves_nothing_held() {
    let nodes = RedisNodes::start(3).await;
    let ours = clients(&nodes).await;
    let theirs = clients(&nodes).await;
    let rl = redlock(&ours, "busy");
    // Another client holds the plain lock on nodes 0 and 1.
    let g0 = theirs[0].lock("busy").lock().await.expect("hold 0");
    let g1 = theirs[1].lock("busy").lock().await.expect("hold 1");
    let started = Instant::now();
    let got = rl
        .try_lock(Duration::from_millis(300), Some(LEASE))
        .await
        .expect("busy is Ok(None)");
    assert!(got.is_none());
    assert!(started.elapsed() >= Duration::from_millis(290));
    // Node 2, won in every attempt, was given back each time.
    assert!(released_on(&nodes, "busy", &[2]).await);
    // Cancelled while retrying, and in the middle of attempts.
    assert!(timeout(Duration::from_millis(200), rl.lock())
        .await
        .is_err());
    for _ in 0..10 {
        let _ = timeout(Duration::from_micros(300), rl.lock()).await;
    }
    assert!(released_on(&nodes, "busy", &[2]).await);
    g0.unlock().await.expect("unlock 0");
    g1.unlock().await.expect("unlock 1");
    let guard = rl
        .try_lock(Duration::from_secs(1), Some(LEASE))
        .await
        .expect("try_lock")
        .expect("free now");
    // Dropping a guard releases every node in the background.
    drop(guard);
    assert!(released_on(&nodes, "busy", &[0, 1, 2]).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_sharing_a_redlock_take_turns() {
    let nodes = RedisNodes::start(3).await;
    let cs = clients(&nodes).await;
    let rl = redlock(&cs, "turns");
    let holders = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (rl, holders) = (rl.clone(), holders.clone());
            tokio::spawn(async move {
                for _ in 0..10 {
                    let g = rl.lock().await.expect("lock");
                    assert_eq!(holders.fetch_add(1, Ordering::SeqCst), 0);
                    sleep(Duration::from_millis(1)).await;
                    holders.fetch_sub(1, Ordering::SeqCst);
                    if rand_bit() {
                        g.unlock().await.expect("unlock");
                    } else {
                        drop(g);
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    // 80 local hand-offs: the queue hands over without retry pauses.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

fn rand_bit() -> bool {
    use std::sync::atomic::AtomicU64;
    static X: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
    let x = X.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
    (x >> 61) & 1 == 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_settings_are_refused() {
    let nodes = RedisNodes::start(2).await;
    let cs = clients(&nodes).await;
    let invalid = |r: Result<Redlock, Error>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(invalid(Redlock::new(Vec::new())));
    assert!(invalid(Redlock::new(vec![
        cs[0].lock("x"),
        cs[0].lock("x")
    ])));
    let two = || vec![cs[0].lock("x"), cs[1].lock("x")];
    assert!(invalid(
        Redlock::builder(two()).node_timeout(Duration::ZERO).build()
    ));
    for f in [1.0, -0.1, f64::NAN, f64::INFINITY] {
        assert!(
            invalid(Redlock::builder(two()).drift_factor(f).build()),
            "{f}"
        );
    }
    // Default max_lease: the clients' watchdog timeout (30 s).
    let rl = Redlock::new(two()).expect("new");
    assert_eq!(rl.max_lease(), Duration::from_secs(30));
    assert_eq!(rl.quorum(), 2);
    assert!(matches!(
        rl.try_lock(Duration::ZERO, Some(Duration::from_secs(31)))
            .await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        rl.try_lock(Duration::ZERO, Some(Duration::ZERO)).await,
        Err(Error::InvalidArgument(_))
    ));
    // A watchdog lease above max_lease is refused too.
    let short = Redlock::builder(two())
        .max_lease(Duration::from_secs(5))
        .build()
        .expect("build");
    assert!(matches!(short.lock().await, Err(Error::InvalidArgument(_))));
}

/// Defect 9 (Redlock side): two "independent" nodes that are one server
/// (two clients of one URL, or two databases of one server) are refused by
/// `new`; today's check only caught one shared client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_twice_is_not_a_redlock() {
    let nodes = RedisNodes::start(2).await;
    let cs = clients(&nodes).await;
    let again = Client::connect(&nodes[0].url()).await.expect("connect");
    let db1 = Client::connect(&format!("{}/1", nodes[0].url()))
        .await
        .expect("connect db 1");
    for twin in [&again, &db1] {
        match Redlock::new(vec![cs[0].lock("x"), cs[1].lock("x"), twin.lock("x")]) {
            Err(Error::InvalidArgument(msg)) => {
                assert!(msg.contains("#0") && msg.contains("#2"), "{msg}");
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
}

/// Defect 10: an absurd lease (zero, over a year) is refused before any
/// I/O; the guard is not lost and a valid extension and the unlock still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_with_an_absurd_lease_keeps_the_guard() {
    let nodes = RedisNodes::start(3).await;
    let cs = clients(&nodes).await;
    // Restart guard off: no max_lease bound, only the one-year bound.
    let rl = redlock(&cs, "absurd");
    let over_a_year = Duration::from_secs(367 * 24 * 3600 + 1);
    for bad in [Duration::ZERO, over_a_year, Duration::MAX] {
        assert!(
            matches!(
                rl.try_lock(Duration::ZERO, Some(bad)).await,
                Err(Error::InvalidArgument(_))
            ),
            "try_lock {bad:?}"
        );
    }
    let guard = rl
        .try_lock(Duration::ZERO, Some(LEASE))
        .await
        .expect("try_lock")
        .expect("free");
    for bad in [Duration::ZERO, over_a_year, Duration::MAX] {
        match guard.extend(bad).await {
            Err(Error::InvalidArgument(_)) => {}
            other => panic!("extend {bad:?}: expected InvalidArgument, got {other:?}"),
        }
        assert!(!guard.is_lost(), "extend {bad:?} marked the guard lost");
        assert!(guard.validity() > Duration::ZERO);
    }
    guard.extend(LEASE).await.expect("a valid extension");
    assert!(!guard.is_lost());
    guard.unlock().await.expect("unlock");
    assert!(held_on(&nodes, "absurd", &[0, 1, 2]).await.is_empty());
}

/// Defect 14: nodes that were once slower than the node timeout used to
/// count as timed out until they granted again, so a lock merely held by
/// someone else looked like a lost quorum. Any answer in time makes a node
/// count again: `try_lock` says `Ok(None)` and `lock()` waits for the holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_stalled_once_count_again_when_they_answer() {
    let nodes = RedisNodes::start(3).await;
    let ours = clients(&nodes).await;
    let theirs = clients(&nodes).await;
    let rl = redlock(&ours, "stalled");
    let other = redlock(&theirs, "stalled");
    // Nodes 0 and 1 stall through one attempt, then come back.
    nodes[0].pause();
    nodes[1].pause();
    let v = votes_of(rl.try_lock(Duration::ZERO, Some(LEASE)).await);
    assert!(v.timed_out >= 2, "{v}");
    nodes[0].resume();
    nodes[1].resume();
    // The attempts sent to them are undone once they answer: our own client
    // takes and gives back the plain lock on each when that is done.
    for c in &ours[..2] {
        let g = c
            .lock("stalled")
            .try_lock(Duration::from_secs(5), Some(LEASE))
            .await
            .expect("plain try_lock")
            .expect("undone in time");
        g.unlock().await.expect("plain unlock");
    }
    assert!(released_on(&nodes, "stalled", &[0, 1, 2]).await);
    // Somebody else holds it; every node is up and answers.
    let held = other
        .try_lock(Duration::from_secs(2), Some(LEASE))
        .await
        .expect("other try_lock")
        .expect("free");
    let got = rl
        .try_lock(Duration::from_millis(300), Some(LEASE))
        .await
        .expect("busy is Ok(None), not a lost quorum");
    assert!(got.is_none());
    // lock() keeps waiting (it used to give up after three attempts) ...
    let waiter = {
        let rl = rl.clone();
        tokio::spawn(async move { rl.lock().await })
    };
    let mut waiter = std::pin::pin!(waiter);
    assert!(
        timeout(Duration::from_millis(500), &mut waiter)
            .await
            .is_err(),
        "lock() returned while the lock was held"
    );
    // ... and gets it once the holder lets go.
    held.unlock().await.expect("other unlock");
    let guard = timeout(Duration::from_secs(5), waiter)
        .await
        .expect("lock() in time")
        .expect("task")
        .expect("lock()");
    assert!(guard.fencing_token() > 0);
    guard.unlock().await.expect("unlock");
}

/// Generic code over the `Guard` trait, as `run_locked` is.
async fn trait_checks<G: redisync::Guard>(guard: &G, token: u64) {
    use redisync::Guard;
    assert_eq!(Guard::fencing_token(guard), token);
    assert_eq!(
        Guard::fencing_token_i64(guard),
        i64::try_from(token).unwrap()
    );
    assert!(!Guard::is_lost(guard));
    assert!(!Guard::lost_signal(guard).is_lost());
    assert!(Guard::validity(guard) > Duration::ZERO);
    Guard::extend(guard, LEASE).await.expect("extend");
}

/// `RedlockGuard` through the `Guard` trait: its owned lost signal, moved
/// into another task, fires when a majority of nodes lose the lock and when
/// the guard is released; `run_locked` stops the work on a loss; a release
/// after the loss is told apart with `is_not_held`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_guard_is_a_guard_with_an_owned_lost_signal() {
    use redisync::{run_locked, Guard, GuardError, Outcome};
    let nodes = RedisNodes::start(3).await;
    let cs = clients_with_watchdog(&nodes, Duration::from_secs(3)).await;
    let other = clients(&nodes).await;
    let rl = redlock(&cs, "owned");
    let limit = Duration::from_secs(20);

    let guard = rl.lock().await.expect("lock");
    trait_checks(&guard, guard.fencing_token()).await;
    let signal = Guard::lost_signal(&guard);
    let watcher = tokio::spawn(signal.clone());
    // Two of the nodes this guard holds (a round can win with two).
    for i in guard.nodes().into_iter().take(2) {
        assert!(other[i].lock("owned").force_unlock().await.expect("force"));
    }
    timeout(limit, watcher)
        .await
        .expect("the signal fires in another task")
        .unwrap();
    assert!(signal.is_lost() && guard.is_lost());
    let late = Guard::release(guard).await.expect_err("lost on a majority");
    assert!(GuardError::is_not_held(&late), "{late:?}");
    assert!(late.is_not_held());

    let guard = rl.lock().await.expect("lock");
    let signal = guard.lost_signal();
    assert!(!signal.is_lost());
    guard.unlock().await.expect("unlock");
    timeout(limit, signal.clone())
        .await
        .expect("a release fires the signal");
    assert!(signal.is_lost());

    let done = run_locked(rl.lock(), async |g: &RedlockGuard| g.fencing_token())
        .await
        .expect("run_locked");
    assert!(matches!(done, Outcome::Completed(t) if t > 0), "{done:?}");
    let others = other.clone();
    let stopped = run_locked(rl.lock(), async move |g: &RedlockGuard| {
        for i in g.nodes().into_iter().rev().take(2) {
            assert!(others[i].lock("owned").force_unlock().await.expect("force"));
        }
        std::future::pending::<()>().await;
    });
    let stopped = timeout(limit, stopped)
        .await
        .expect("cancelled on the loss");
    assert!(matches!(stopped, Ok(Outcome::Cancelled)), "{stopped:?}");
}

/// Defect 5: a Redlock is not reentrant, also across `Redlock` values.
/// Two values over the same clients and name, used by one task: each
/// node's `Lock` re-enters per task, so the second used to be granted at
/// once, with the first's token, while the first was held. It waits like
/// any other contender, and takes the lock with a higher token once the
/// first is released (unlocked, or dropped: released in the background).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_redlock_of_the_same_task_waits_for_the_first() {
    let nodes = RedisNodes::start(3).await;
    let cs = clients(&nodes).await;
    let (first, second) = (redlock(&cs, "twice"), redlock(&cs, "twice"));
    let wait = Duration::from_millis(300);
    let mut last = 0;
    for drop_it in [false, true] {
        let held = first
            .try_lock(Duration::ZERO, None)
            .await
            .expect("try_lock")
            .expect("free");
        assert!(held.fencing_token() > last);
        let started = Instant::now();
        let again = second.try_lock(wait, None).await.expect("busy is Ok(None)");
        if let Some(g) = &again {
            panic!(
                "re-entered the first guard's hold: token {} (the first's: {})",
                g.fencing_token(),
                held.fencing_token()
            );
        }
        assert!(started.elapsed() >= Duration::from_millis(290));
        let t1 = held.fencing_token();
        if drop_it {
            drop(held);
        } else {
            held.unlock().await.expect("unlock");
        }
        let after = second
            .try_lock(Duration::from_secs(10), None)
            .await
            .expect("try_lock")
            .expect("free once the first is released");
        assert!(
            after.fencing_token() > t1,
            "{t1} then {}",
            after.fencing_token()
        );
        last = after.fencing_token();
        after.unlock().await.expect("unlock");
    }
    assert!(released_on(&nodes, "twice", &[0, 1, 2]).await);
}

/// Suspicion (a), settled: a token floor lets a node's fencing counter run
/// up to 1 s ahead of the node's clock (a Redlock's floor is its client's
/// clock, and a node honours a floor up to 1 s ahead of its own), so a node
/// restarted from a snapshot taken before that token can resume below it
/// for up to 1 s. Across the Redlock, tokens still never go back:
///
/// - the restart guard: a restarted node counts only once INFO reports an
///   uptime `u` with `u - 1 s >= max_lease`, and `u` is whole seconds, so
///   for any `max_lease > 0` only once it has been up for more than 1 s.
///   By then its clock is past every floor it honoured before the restart
///   (each at most 1 s ahead of its clock then), and a token is at least
///   the node's clock. `max_lease(ZERO)` turns the guard off, for nodes
///   that lose nothing across restarts, whose counters are not lost either.
/// - with every client on one clock, a later floor is above every earlier
///   one anyway; the lost token only matters for a client whose clock runs
///   behind the one that got it. That client is this test's Redlock; the
///   one ahead is played by calling the node locks as a Redlock attempt
///   does (`try_lock_with_min_token`, the floor 950 ms ahead).
///
/// (With the guard off, a Redlock doing the same hands out a token below
/// the lost one while the restart took less than the 950 ms: ~890 ms below
/// in 3 runs of 3 when this was written.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_from_a_recent_snapshot_never_takes_tokens_back() {
    let mut nodes = RedisNodes::start(3).await;
    let name = "floor-restart";
    let max_lease = Duration::from_secs(1);
    let ours = redlock_with(&clients(&nodes).await, name, max_lease);
    // Fresh nodes count once they are up for 2 s as Redis rounds it.
    let first = ours
        .try_lock(Duration::from_secs(10), Some(max_lease))
        .await
        .expect("try_lock")
        .expect("nodes come of age");
    let t0 = first.fencing_token();
    first.unlock().await.expect("unlock");
    // Node 1's snapshot has a counter from before the token below.
    redisync_testkit::command(nodes[1].port(), &["SAVE"])
        .await
        .expect("SAVE");

    // A client whose clock runs 950 ms ahead wins nodes 0 and 1 (node 2
    // missed its attempt): both honour its floor.
    let ahead = clients(&nodes).await;
    let admin1 = common::admin(&nodes[1].url()).await;
    let floor = common::server_us(&admin1).await + 950_000;
    let mut lost = 0;
    for c in &ahead[..2] {
        let lock = c.lock(name).non_reentrant();
        let g = __private::try_lock_with_min_token(
            &lock,
            Duration::from_secs(5),
            Some(max_lease),
            floor,
        )
        .await
        .expect("try_lock")
        .expect("free");
        // Equal unless the machine took 950 ms to get it.
        assert!(g.fencing_token() >= floor && g.fencing_token() > t0);
        lost = lost.max(g.fencing_token());
        g.unlock().await.expect("unlock");
    }

    // Node 1 restarts from its snapshot: its counter goes back below it.
    nodes[1].restart().await;
    let admin1 = common::admin(&nodes[1].url()).await;
    let counter: Option<u64> = admin1
        .get(common::key("lock", "fence", name))
        .await
        .expect("GET");
    assert!(
        counter.is_none_or(|c| c < lost),
        "node 1's counter after the restart: {counter:?} (lost {lost})"
    );
    let behind = lost.saturating_sub(common::server_us(&admin1).await);
    eprintln!("node 1's clock is {behind} us below the token it lost");
    // Node 0 is busy: the next majority is nodes 1 and 2, neither of which
    // has the lost token.
    let other = Client::connect(&nodes[0].url()).await.expect("connect");
    let busy = other
        .lock(name)
        .try_lock(Duration::from_secs(5), Some(LEASE))
        .await
        .expect("try_lock")
        .expect("free");
    let next = ours
        .try_lock(Duration::from_secs(10), Some(max_lease))
        .await
        .expect("try_lock")
        .expect("nodes 1 and 2, once node 1 is old");
    assert_eq!(next.nodes(), [1, 2]);
    assert!(
        next.fencing_token() > lost,
        "token {} after the restart, {lost} before it ({} us below)",
        next.fencing_token(),
        lost - next.fencing_token()
    );
    next.unlock().await.expect("unlock");
    busy.unlock().await.expect("unlock");
}

/// Review finding 1: under the watchdog a `RedlockGuard`'s loss is not for
/// good. Its validity is read from the nodes' lease estimates minus the
/// drift; once it reads zero the lost signal fires (and `run_locked` cancels
/// its work), but `Loss::validity` does not remember it: a renewal that
/// gets through later makes the same signal say "not lost" again, and the
/// guard say it holds. `__private::lost_signal_with_validity` promises "zero once it
/// is lost (and then for good)". The nodes are paused (no renewal) until
/// the signal says lost, then resumed before the nodes' own leases end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_redlock_loss_is_for_good() {
    let nodes = RedisNodes::start(3).await;
    // 6 s watchdog lease, renewed every 2 s; drift 3 s: the guard's validity
    // ends 3 s before the nodes' leases, room for a renewal after the resume.
    let cs = clients_with_watchdog(&nodes, Duration::from_secs(6)).await;
    let rl = Redlock::builder(cs.iter().map(|c| c.lock("unlost")).collect())
        .node_timeout(NODE_TIMEOUT)
        .max_lease(Duration::ZERO)
        .retry_delay(Duration::from_millis(50))
        .drift_factor(0.5)
        .build()
        .expect("build");
    let guard = held_on_all(&rl, 3, Duration::from_secs(5), None).await;
    let signal = guard.lost_signal();
    assert!(!signal.is_lost());
    for node in &*nodes {
        node.pause();
    }
    // Only the signal is asked (asking the guard would mark the loss).
    let said_lost = common::eventually(Duration::from_secs(10), || {
        let s = signal.clone();
        async move { s.is_lost() }
    })
    .await;
    for node in &*nodes {
        node.resume();
    }
    assert!(
        said_lost,
        "the signal never said lost with every node paused"
    );
    // The signal fired: a run_locked work would have been cancelled here.
    timeout(Duration::from_secs(1), signal.clone())
        .await
        .expect("a signal that says lost is ready");
    // From now on every view must agree that the guard is lost.
    let unlost = common::eventually(Duration::from_secs(5), || {
        let s = signal.clone();
        async move { !s.is_lost() }
    })
    .await;
    assert!(
        !unlost,
        "the lost signal fired, then said not lost again (guard validity {:?}, guard is_lost {})",
        guard.validity(),
        guard.is_lost()
    );
    assert!(
        guard.is_lost(),
        "the signal fired but the guard says it holds"
    );
}
