//! Every primitive on a 3-primary Redis Cluster (with replicas).
#![allow(clippy::many_single_char_names)]

use crate::common;

use common::{cli, primary_of_slot, SlotMove};

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redisync::Client;
use redisync_testkit::RedisCluster;

async fn client(cluster: &RedisCluster) -> Client {
    Client::connect(&cluster.url())
        .await
        .expect("connect to the cluster")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_spread_over_all_slots_exclude_and_wake() {
    let cluster = RedisCluster::start(3, 1).await;
    let a = client(&cluster).await;
    let b = client(&cluster).await;
    let inside: Arc<Vec<AtomicU32>> = Arc::new((0..12).map(|_| AtomicU32::new(0)).collect());
    let mut tasks = Vec::new();
    for (ci, c) in [a.clone(), b.clone()].into_iter().enumerate() {
        for t in 0..6 {
            let c = c.clone();
            let inside = inside.clone();
            tasks.push(tokio::spawn(async move {
                for round in 0..6 {
                    let n = (t + round + ci) % 12;
                    let lock = c.lock(&format!("cluster:lock:{n}"));
                    let g = lock.lock().await.unwrap();
                    assert_eq!(
                        inside[n].fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders of lock {n}"
                    );
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside[n].fetch_sub(1, Ordering::SeqCst);
                    g.unlock().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("no stuck waiter")
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_hash_tag_names_work_for_every_primitive() {
    let cluster = RedisCluster::start(3, 1).await;
    let a = client(&cluster).await;
    let b = client(&cluster).await;
    for name in ["a{b}c", "{}x", "a{", "{{a}}", "}x", "plain"] {
        let g = a.lock(name).lock().await.unwrap();
        // A waiter on another client is woken by the release (sharded pub/sub).
        let lock = b.lock(name);
        let waiter = tokio::spawn(async move { lock.try_lock(Duration::from_secs(5), None).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let released = tokio::time::Instant::now();
        g.unlock().await.unwrap();
        let got = waiter.await.unwrap().unwrap().expect("woken");
        assert!(
            released.elapsed() < Duration::from_secs(2),
            "{name}: woken after {:?}",
            released.elapsed()
        );
        got.unlock().await.unwrap();

        let f = a.fair_lock(name).lock().await.unwrap();
        f.unlock().await.unwrap();
        let r = a.rw_lock(name).read().lock().await.unwrap();
        let w = b.rw_lock(name).write();
        assert!(w
            .try_lock(Duration::from_millis(50), None)
            .await
            .unwrap()
            .is_none());
        r.unlock().await.unwrap();
        let sem = a.semaphore(name);
        sem.try_set_permits(1).await.unwrap();
        sem.acquire(1).await.unwrap().release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renews_locks_in_many_slots() {
    let cluster = RedisCluster::start(3, 1).await;
    // A lease a stalled test process does not lose; the sleep spans more.
    let c = Client::builder(&cluster.url())
        .watchdog_timeout(Duration::from_millis(1500))
        .connect()
        .await
        .unwrap();
    let mut guards = Vec::new();
    for n in 0..20 {
        guards.push(c.lock(&format!("renewed:{n}")).lock().await.unwrap());
    }
    let p = c.semaphore("renewed:sem");
    p.try_set_permits(1).await.unwrap();
    let permit = p.acquire(1).await.unwrap();
    let read = c.rw_lock("renewed:rw").read().lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for g in &guards {
        assert!(!g.is_lost(), "lost under the watchdog");
    }
    assert!(!permit.is_lost() && !read.is_lost());
    for g in guards {
        g.unlock().await.unwrap();
    }
    permit.release().await.unwrap();
    read.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_progress_through_a_primary_failover() {
    let mut cluster = RedisCluster::start(3, 1).await;
    let url = cluster.url();
    let counter = Arc::new(AtomicU32::new(0));
    let inside = Arc::new(AtomicU32::new(0));
    let double = Arc::new(AtomicU32::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let c = Client::builder(&url)
            .watchdog_timeout(Duration::from_secs(2))
            .command_timeout(Duration::from_millis(500))
            .connect()
            .await
            .unwrap();
        for _ in 0..3 {
            let lock = c.lock("failover:lock");
            let (counter, inside, double, stop) = (
                counter.clone(),
                inside.clone(),
                double.clone(),
                stop.clone(),
            );
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    // Errors while the primary is down are expected: retry.
                    let Ok(Some(g)) = lock.try_lock(Duration::from_secs(2), None).await else {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        // Documented limit: replication is asynchronous, a
                        // failover can lose a lock. Count, do not fail.
                        double.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    counter.fetch_add(1, Ordering::SeqCst);
                    let _ = g.unlock().await;
                }
            }));
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Kill the primary that owns the lock's slot.
    let slot = fred::util::redis_keyslot(common::lock_key("failover:lock").as_bytes());
    let owner_port = primary_of_slot(&cluster, slot).await;
    let idx = cluster
        .nodes()
        .iter()
        .position(|n| n.port() == owner_port)
        .unwrap();
    cluster.nodes_mut()[idx].kill().await;
    let before = counter.load(Ordering::SeqCst);
    let killed_at = tokio::time::Instant::now();
    // A replica takes over (cluster-node-timeout 2 s); waiters must progress.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while counter.load(Ordering::SeqCst) < before + 20 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no progress after the failover ({} acquisitions)",
            counter.load(Ordering::SeqCst) - before
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("progress resumed {:?} after the kill", killed_at.elapsed());
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(10), t)
            .await
            .expect("worker stuck")
            .unwrap();
    }
    eprintln!(
        "acquisitions after failover: {}, double holds seen: {}",
        counter.load(Ordering::SeqCst) - before,
        double.load(Ordering::SeqCst)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_lock_is_fifo_on_the_cluster() {
    let cluster = RedisCluster::start(3, 1).await;
    let clients = [
        client(&cluster).await,
        client(&cluster).await,
        client(&cluster).await,
    ];
    for name in ["fifo:{tagged}", "fifo:plain"] {
        let holder = clients[0].fair_lock(name).lock().await.unwrap();
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..6usize {
            let lock = clients[i % 3].fair_lock(name);
            let order = order.clone();
            waiters.push(tokio::spawn(async move {
                let g = lock.lock().await.unwrap();
                order.lock().unwrap().push(i);
                g.unlock().await.unwrap();
            }));
            // Queued before the next one starts: the order is the test's.
            let queued = common::eventually(Duration::from_secs(10), || async {
                clients[0]
                    .fair_lock(name)
                    .inspect()
                    .await
                    .is_ok_and(|s| s.waiters.len() == i + 1)
            })
            .await;
            assert!(queued, "{name}: waiter {i} queued");
        }
        holder.unlock().await.unwrap();
        for w in waiters {
            tokio::time::timeout(Duration::from_secs(10), w)
                .await
                .expect("waiter stuck")
                .unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4, 5], "{name}");
    }
}

/// A 3-primary cluster, two clients, the lock `name` held by the first
/// with a 20 s lease, and a plan to move its slot.
struct Migration {
    cluster: RedisCluster,
    _a: Client,
    b: Client,
    slot_move: SlotMove,
    held: redisync::LockGuard,
}

impl Migration {
    async fn start(name: &str) -> Migration {
        let cluster = RedisCluster::start(3, 0).await;
        let a = client(&cluster).await;
        let b = client(&cluster).await;
        let slot_move = SlotMove::plan(&cluster, &common::lock_key(name)).await;
        let held = a
            .lock(name)
            .lock_with_lease(Duration::from_secs(20))
            .await
            .unwrap();
        Migration {
            cluster,
            _a: a,
            b,
            slot_move,
            held,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_wake_after_their_slot_migrates() {
    let name = "migrating";
    let Migration {
        cluster,
        b,
        slot_move,
        held,
        ..
    } = Migration::start(name).await;
    let lock = b.lock(name);
    let waiter = tokio::spawn(async move { lock.try_lock(Duration::from_secs(15), None).await });
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Move the slot (and the lock's keys) to another primary.
    slot_move.begin().await;
    let keys = cli(
        slot_move.src,
        &["cluster", "getkeysinslot", &slot_move.slot, "100"],
    )
    .await;
    slot_move.migrate(&keys.lines().collect::<Vec<_>>()).await;
    slot_move.finish(&cluster).await;
    assert_eq!(
        cli(slot_move.dst, &["exists", &common::lock_key("migrating")])
            .await
            .trim(),
        "1",
        "the lock moved with its slot"
    );
    // The server dropped the waiter's sharded subscription with the slot.
    // Within a second its client must notice and subscribe on the new
    // primary; the release (which follows MOVED) must then wake the waiter
    // by message, long before its 15 s budget or the 20 s lease.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let released = tokio::time::Instant::now();
    held.unlock().await.unwrap();
    let got = waiter
        .await
        .unwrap()
        .unwrap()
        .expect("woken after the migration");
    assert!(
        released.elapsed() < Duration::from_secs(3),
        "waiter woke {:?} after the release",
        released.elapsed()
    );
    got.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_ride_out_a_half_migrated_slot() {
    let name = "halfway";
    let Migration {
        cluster,
        b,
        slot_move,
        held,
        ..
    } = Migration::start(name).await;

    // Half-way: the fencing counter has moved, the lock hash has not. A
    // script over both keys now gets TRYAGAIN from the source; it did not
    // run, so the client must send it again until the slot settles.
    slot_move.begin().await;
    slot_move
        .migrate(&[&common::key("lock", "fence", "halfway")])
        .await;
    let lock = b.lock(name);
    let waiter = tokio::spawn(async move { lock.try_lock(Duration::from_secs(10), None).await });
    // Half-way for longer than the script runner's own retries (2 s), as a
    // migration on a loaded machine can be: the wait is what bounds them.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    slot_move.migrate(&[&common::lock_key("halfway")]).await;
    slot_move.finish(&cluster).await;
    held.unlock().await.unwrap();
    let before_7 = b
        .server_version()
        .is_some_and(|v| v.split('.').next().is_some_and(|m| m < "7"));
    let got = match waiter.await.unwrap() {
        Ok(got) => got,
        // Redis 6.2: riding out a half-migrated slot needs Redis 7 (the
        // docs/connecting.md says so). There the waiter fails with a typed, retryable
        // error instead, and that client's later commands time out too,
        // whatever the name (fred 10 on 6.2; a fresh client gets in).
        Err(e) if before_7 => {
            assert!(e.is_retryable(), "{e:?}");
            let fresh = redisync::Client::connect(&cluster.url()).await.unwrap();
            let got = fresh
                .lock(name)
                .try_lock(Duration::from_secs(10), None)
                .await
                .unwrap()
                .expect("a fresh client gets in after the migration");
            got.unlock().await.unwrap();
            return;
        }
        Err(e) => panic!("no error through the migration: {e:?}"),
    };
    let got = got.expect("acquired after the release");
    assert!(got.fencing_token() > 0);
    got.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_parked_before_a_failover_wakes_after_it() {
    let mut cluster = RedisCluster::start(3, 1).await;
    let builder = || Client::builder(&cluster.url()).command_timeout(Duration::from_millis(1500));
    // The holder's lock must survive the failover: acknowledged by the
    // replica that takes over. (The waiter's client cannot sync: after the
    // failover its primary has no replica left.)
    let a = builder()
        .replica_sync(1, Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let b = builder().connect().await.unwrap();
    let name = "parked";
    let held = a
        .lock(name)
        .lock_with_lease(Duration::from_secs(40))
        .await
        .unwrap();
    let lock = b.lock(name);
    let waiter = tokio::spawn(async move {
        let r = common::try_lock_through_failover(&lock, Duration::from_secs(35)).await;
        (r, tokio::time::Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let slot = fred::util::redis_keyslot(common::lock_key("parked").as_bytes());
    let owner_port = primary_of_slot(&cluster, slot).await;
    let idx = cluster
        .nodes()
        .iter()
        .position(|n| n.port() == owner_port)
        .unwrap();
    cluster.nodes_mut()[idx].kill().await;
    // Wait until the holder's client reaches the promoted replica (the lock
    // came along: replica sync had it acknowledged).
    let check = a.lock(name);
    assert!(
        common::eventually(Duration::from_secs(20), || async {
            matches!(check.is_locked().await, Ok(true))
        })
        .await,
        "no failover"
    );
    if waiter.is_finished() {
        let (r, _) = waiter.await.unwrap();
        panic!("the waiter must still be waiting; it returned {r:?}");
    }
    let released = tokio::time::Instant::now();
    held.unlock().await.unwrap();
    // (The unlock itself waits out WAIT's timeout: the promoted primary
    // has no replica left.)
    let (got, at) = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the parked waiter was not woken after the failover")
        .unwrap();
    let got = got.unwrap().expect("acquired");
    let woken = at - released;
    eprintln!("woken {woken:?} after the release");
    // (A missed wake-up would wait for the holder's 40 s lease.)
    assert!(
        woken < Duration::from_secs(5),
        "woken {woken:?} after the release"
    );
    got.unlock().await.unwrap();
}

/// Channels are arguments, not keys: while the lock's slot migrates (no key
/// moved yet), a release touches only keys the source has, so the cluster
/// runs it instead of refusing it (`TRYAGAIN`) until the slot settles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_works_while_its_slot_migrates() {
    let name = "unlock-mid-migration";
    let Migration {
        cluster,
        b,
        slot_move,
        held,
        ..
    } = Migration::start(name).await;
    let sem = b.semaphore(name);
    assert!(sem.try_set_permits(1).await.unwrap());
    let permit = sem.acquire(1).await.unwrap();
    slot_move.begin().await;
    let started = tokio::time::Instant::now();
    held.unlock().await.expect("lock released mid-migration");
    permit
        .release()
        .await
        .expect("permit released mid-migration");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "releases were refused for {:?}",
        started.elapsed()
    );
    slot_move.finish(&cluster).await;
}

/// One paused primary costs only its own locks: the watchdog renews every
/// (kind, slot) batch on its own, so a batch stuck on the paused node for
/// the command timeout does not hold back the renewals of the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_primary_costs_only_its_own_locks() {
    let cluster = RedisCluster::start(3, 0).await;
    let client = Client::builder(&cluster.url())
        .watchdog_timeout(Duration::from_millis(1500))
        .command_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let mut guards = Vec::new();
    for i in 0..24 {
        let name = format!("iso-{i}");
        let slot = fred::util::redis_keyslot(common::lock_key(&name).as_bytes());
        let port = primary_of_slot(&cluster, slot).await;
        guards.push((port, client.lock(&name).lock().await.unwrap()));
    }
    // The window below outlasts the cluster's node timeout (2 s): the
    // others then mark the paused primary failed, and with full coverage
    // required the whole cluster would refuse commands. Partial service
    // is what this test is about.
    for n in cluster.nodes() {
        cli(
            n.port(),
            &["config", "set", "cluster-require-full-coverage", "no"],
        )
        .await;
    }
    let paused = guards[0].0;
    let node = cluster.nodes().iter().find(|n| n.port() == paused).unwrap();
    assert!(guards.iter().any(|(p, _)| *p != paused), "all on one node");
    node.pause();
    // Three leases pass while the paused node's renewals hang for up to the
    // command timeout each: a healthy guard must not be lost meanwhile.
    let healthy: Vec<_> = guards.iter().filter(|(p, _)| *p != paused).collect();
    let lost_any = futures::future::select_all(healthy.iter().map(|(_, g)| Box::pin(g.lost())));
    let r = tokio::time::timeout(Duration::from_millis(4500), lost_any).await;
    node.resume();
    assert!(
        r.is_err(),
        "a lock on a healthy primary was lost while another primary was paused"
    );
    for (p, g) in &healthy {
        assert!(!g.is_lost(), "guard on {p} lost");
    }
}

/// A count-down latch on the cluster, across clients, for a name with a
/// hash tag of its own and for a plain one: waiters of one client (blocked
/// before the last count-down, with `wait` and `wait_timeout`) wake within
/// a bound well below their periodic look, by the opening's sharded
/// message, when count-downs of two other clients bring it to zero; each
/// then sees count 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_down_latch_opens_for_waiters_of_other_clients() {
    let cluster = RedisCluster::start(3, 1).await;
    let a = client(&cluster).await;
    let b = client(&cluster).await;
    let c = client(&cluster).await;
    let ttl = Duration::from_mins(10);
    for name in ["{batch-7}:phase", "phase-plain"] {
        let latch = a.count_down_latch(name);
        assert!(latch.try_set_count(2, ttl).await.unwrap(), "{name}");
        let waiters: Vec<_> = (0..3)
            .map(|i| {
                let mine = b.count_down_latch(name);
                tokio::spawn(async move {
                    let woke = if i == 0 {
                        mine.wait().await.map(|()| true)
                    } else {
                        mine.wait_timeout(ttl).await
                    };
                    (woke, mine.count().await)
                })
            })
            .collect();
        assert_eq!(c.count_down_latch(name).count_down().await.unwrap(), 1);
        assert_eq!(b.count_down_latch(name).count().await.unwrap(), 1);
        assert!(
            !b.count_down_latch(name)
                .wait_timeout(Duration::from_millis(200))
                .await
                .unwrap(),
            "{name}: open at 1"
        );
        assert!(
            waiters.iter().all(|w| !w.is_finished()),
            "{name}: a waiter returned at 1"
        );
        assert_eq!(latch.count_down().await.unwrap(), 0, "{name}");
        for w in waiters {
            let (woke, seen) = tokio::time::timeout(Duration::from_secs(10), w)
                .await
                .expect("woken by the opening")
                .unwrap();
            assert!(woke.unwrap(), "{name}");
            assert_eq!(seen.unwrap(), 0, "{name}: woken before the opening");
        }
        let seen = c.count_down_latch(name).inspect().await.unwrap();
        assert_eq!(seen.count, Some(0), "{name}");
        assert!(
            a.list("*")
                .await
                .unwrap()
                .iter()
                .any(|i| i.name == name && i.kind == redisync::inspect::LockKind::Latch),
            "{name}: not listed"
        );
    }
}
