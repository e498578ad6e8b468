//! The read-write lock on the hand-off queue, across clients: exclusion and
//! rising tokens under a random mix of operations, FIFO with writer
//! preference, hand-offs after downgrades, force-unlocks and cancelled
//! waiters, and what a key of another type does while the lock is written.

use crate::common;

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Env;
use fred::prelude::*;
use redisync::Error;
use tokio::time::{timeout, Instant};

fn rw_key(name: &str) -> String {
    common::key("rw", "hold", name)
}
fn readers_key(name: &str) -> String {
    common::key("rw", "readers", name)
}
fn queue_key(name: &str) -> String {
    common::key("rw", "queue", name)
}
fn fence_key(name: &str) -> String {
    common::key("rw", "fence", name)
}

async fn queue_len(env: &Env, name: &str) -> i64 {
    env.admin.llen::<i64, _>(queue_key(name)).await.unwrap()
}

/// Waits until the queue of `name` has `len` entries.
async fn queued(env: &Env, name: &str, len: i64) {
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            queue_len(env, name).await == len
        })
        .await,
        "queue of {name} never reached {len}: {:?}",
        env.admin
            .lrange::<Vec<String>, _>(queue_key(name), 0, -1)
            .await
            .unwrap()
    );
}

/// Every key of `name` but the fence is gone within `within`.
async fn all_gone(env: &Env, name: &str, within: Duration) -> bool {
    common::eventually(within, || async {
        let n: i64 = env
            .admin
            .exists(vec![rw_key(name), readers_key(name), queue_key(name)])
            .await
            .unwrap();
        n == 0
    })
    .await
}

/// Shared witness of who is inside: >0 readers, -1 a writer.
#[derive(Default)]
struct Witness {
    state: AtomicI32,
    /// The highest token of any writer that got in.
    max_writer: AtomicU64,
    /// The highest token of anybody that got in.
    max_any: AtomicU64,
}

impl Witness {
    fn writer_in(&self, token: u64, what: &str) {
        assert_eq!(
            self.state
                .compare_exchange(0, -1, Ordering::SeqCst, Ordering::SeqCst),
            Ok(0),
            "{what}: a writer got in with company"
        );
        let before = self.max_any.fetch_max(token, Ordering::SeqCst);
        assert!(
            token > before,
            "{what}: writer token {token} not above an earlier holder's {before}"
        );
        self.max_writer.fetch_max(token, Ordering::SeqCst);
    }
    fn writer_out(&self) {
        assert_eq!(
            self.state
                .compare_exchange(-1, 0, Ordering::SeqCst, Ordering::SeqCst),
            Ok(-1)
        );
    }
    fn reader_in(&self, token: u64, what: &str) {
        let before = self.state.fetch_add(1, Ordering::SeqCst);
        assert!(before >= 0, "{what}: a reader got in beside a writer");
        let w = self.max_writer.load(Ordering::SeqCst);
        assert!(
            token > w,
            "{what}: reader token {token} not above an earlier writer's {w}"
        );
        self.max_any.fetch_max(token, Ordering::SeqCst);
    }
    fn reader_out(&self) {
        assert!(self.state.fetch_sub(1, Ordering::SeqCst) >= 1);
    }
}

/// Three clients of three tasks each mix writes, reads, zero and short
/// waits, cancelled acquisitions, downgrades and dropped guards. Nobody
/// shares with a writer, tokens rise, nobody stalls, nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stress_mixed_ops_keep_exclusion_tokens_and_liveness() {
    stress("stress", 3, 3, 120, 0x9e37_79b9).await;
}

/// The same mix with more clients of fewer tasks (more cross-client
/// hand-offs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stress_many_clients_keep_exclusion_tokens_and_liveness() {
    stress("stress6", 6, 1, 120, 0x1234_5678).await;
}

#[allow(clippy::too_many_lines)] // one random step, all its checks in view
async fn stress(name: &'static str, clients: u64, per_client: u64, steps: u32, seed: u64) {
    let env = Env::start().await;
    let witness = Arc::new(Witness::default());
    let mut tasks = Vec::new();
    for c in 0..clients {
        let client = env.client().await;
        for t in 0..per_client {
            let rw = client.rw_lock(name);
            let w = witness.clone();
            tasks.push(tokio::spawn(async move {
                let mut rnd = common::xorshift(seed + c * 131 + t * 7 + 1);
                let lease = Some(Duration::from_secs(20));
                for i in 0..steps {
                    let op = rnd() % 8;
                    let small = Duration::from_micros(rnd() % 20_000);
                    let what = format!("client {c} task {t} step {i} op {op}");
                    let bound = Duration::from_secs(20);
                    match op {
                        0 | 2 | 4 => {
                            let got = match op {
                                0 => Some(
                                    timeout(bound, rw.write().lock())
                                        .await
                                        .unwrap_or_else(|_| panic!("{what}: write stalled"))
                                        .unwrap(),
                                ),
                                2 => rw.write().try_lock(small, lease).await.unwrap(),
                                _ => match timeout(small, rw.write().lock()).await {
                                    Ok(g) => Some(g.unwrap()),
                                    Err(_) => None,
                                },
                            };
                            if let Some(g) = got {
                                w.writer_in(g.fencing_token(), &what);
                                tokio::time::sleep(Duration::from_millis(rnd() % 3)).await;
                                w.writer_out();
                                g.unlock().await.unwrap();
                            }
                        }
                        1 | 3 | 5 => {
                            let got = match op {
                                1 => Some(
                                    timeout(bound, rw.read().lock())
                                        .await
                                        .unwrap_or_else(|_| panic!("{what}: read stalled"))
                                        .unwrap(),
                                ),
                                3 => rw.read().try_lock(small, lease).await.unwrap(),
                                _ => match timeout(small, rw.read().lock()).await {
                                    Ok(g) => Some(g.unwrap()),
                                    Err(_) => None,
                                },
                            };
                            if let Some(g) = got {
                                w.reader_in(g.fencing_token(), &what);
                                tokio::time::sleep(Duration::from_millis(rnd() % 3)).await;
                                w.reader_out();
                                g.unlock().await.unwrap();
                            }
                        }
                        6 => {
                            let wg = timeout(bound, rw.write().lock())
                                .await
                                .unwrap_or_else(|_| panic!("{what}: write stalled"))
                                .unwrap();
                            w.writer_in(wg.fencing_token(), &what);
                            let rg = timeout(bound, rw.read().lock())
                                .await
                                .unwrap_or_else(|_| panic!("{what}: downgrade stalled"))
                                .unwrap();
                            assert!(rg.fencing_token() > wg.fencing_token(), "{what}");
                            w.max_any.fetch_max(rg.fencing_token(), Ordering::SeqCst);
                            assert_eq!(
                                w.state
                                    .compare_exchange(-1, 1, Ordering::SeqCst, Ordering::SeqCst),
                                Ok(-1)
                            );
                            wg.unlock().await.unwrap();
                            tokio::time::sleep(Duration::from_millis(rnd() % 3)).await;
                            w.reader_out();
                            rg.unlock().await.unwrap();
                        }
                        _ => {
                            // A dropped guard: released in the background.
                            let g = timeout(bound, rw.write().lock())
                                .await
                                .unwrap_or_else(|_| panic!("{what}: write stalled"))
                                .unwrap();
                            w.writer_in(g.fencing_token(), &what);
                            w.writer_out();
                            drop(g);
                        }
                    }
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(
        all_gone(&env, name, Duration::from_secs(8)).await,
        "state left behind: hold {:?} readers {:?} queue {:?}",
        env.admin
            .hgetall::<std::collections::HashMap<String, String>, _>(rw_key(name))
            .await
            .unwrap(),
        env.admin
            .zrange::<Vec<String>, _, _, _>(readers_key(name), 0, -1, None, false, None, false)
            .await
            .unwrap(),
        env.admin
            .lrange::<Vec<String>, _>(queue_key(name), 0, -1)
            .await
            .unwrap()
    );
}

/// While another owner writes, an attempt touches only the lock's hash and
/// queue (a contended attempt costs no more): a fencing counter or readers
/// zset of another type is reported by the first attempt once the writer
/// leaves, and is never written to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_counter_or_readers_key_is_reported_once_the_writer_leaves() {
    let env = Env::start().await;
    let holder = env.client().await;
    let other = env.client().await;
    for (name, key) in [("wtf", fence_key("wtf")), ("wtr", readers_key("wtr"))] {
        let g = holder.rw_lock(name).write().lock().await.unwrap();
        let _: () = env.admin.set(&key, "x", None, None, false).await.unwrap();
        for read in [true, false] {
            let rw = other.rw_lock(name);
            let got = if read {
                rw.read().try_lock(Duration::ZERO, None).await
            } else {
                rw.write().try_lock(Duration::ZERO, None).await
            };
            assert!(
                matches!(got, Ok(None)),
                "{key}: busy while written: {got:?}"
            );
        }
        g.unlock().await.unwrap();
        for read in [true, false] {
            let rw = other.rw_lock(name);
            let got = if read {
                rw.read().try_lock(Duration::ZERO, None).await
            } else {
                rw.write().try_lock(Duration::ZERO, None).await
            };
            assert!(
                matches!(&got, Err(Error::WrongType { key: k }) if *k == key),
                "{key}: once free: {got:?}"
            );
        }
        let v: String = env.admin.get(&key).await.unwrap();
        assert_eq!(v, "x", "the foreign key was written");
        let _: () = env.admin.del(&key).await.unwrap();
    }
}

type Log = Arc<std::sync::Mutex<Vec<String>>>;

/// Spawns `side` ("r"/"w") of `name` on `client`: logs "<tag> in" once in,
/// holds until `go` is notified, logs "<tag> out", releases.
fn waiter(
    client: &redisync::Client,
    name: &str,
    side: &'static str,
    tag: &'static str,
    log: &Log,
    go: Arc<tokio::sync::Notify>,
) -> tokio::task::JoinHandle<u64> {
    let rw = client.rw_lock(name);
    let log = log.clone();
    tokio::spawn(async move {
        let g = if side == "w" {
            rw.write().lock().await.unwrap()
        } else {
            rw.read().lock().await.unwrap()
        };
        log.lock().unwrap().push(format!("{tag} in"));
        go.notified().await;
        log.lock().unwrap().push(format!("{tag} out"));
        let token = g.fencing_token();
        g.unlock().await.unwrap();
        token
    })
}

fn logged(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

async fn log_has(log: &Log, what: &str) -> bool {
    common::eventually(Duration::from_secs(10), || async {
        logged(log).iter().any(|l| l == what)
    })
    .await
}

/// Four clients queue, in order, writer A, reader B, writer C, reader D
/// behind a writer. Each release hands on in that order: B never passes A,
/// D never passes C.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_across_clients_with_writer_preference() {
    let env = Env::start().await;
    let name = "fifo";
    let holder = env.client().await;
    let g = holder.rw_lock(name).write().lock().await.unwrap();
    let log: Log = Arc::default();
    let gos: Vec<_> = (0..4)
        .map(|_| Arc::new(tokio::sync::Notify::new()))
        .collect();
    let mut tasks = Vec::new();
    let mut clients = Vec::new();
    for (i, (side, tag)) in [("w", "A"), ("r", "B"), ("w", "C"), ("r", "D")]
        .into_iter()
        .enumerate()
    {
        let c = env.client().await;
        tasks.push(waiter(&c, name, side, tag, &log, gos[i].clone()));
        clients.push(c);
        queued(&env, name, i64::try_from(i).unwrap() + 1).await;
    }
    let mut last = g.fencing_token();
    g.unlock().await.unwrap();
    for (i, tag) in ["A", "B", "C", "D"].into_iter().enumerate() {
        assert!(
            log_has(&log, &format!("{tag} in")).await,
            "{tag} never got in: {:?}",
            logged(&log)
        );
        // Nobody else got in meanwhile.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let ins: Vec<_> = logged(&log)
            .into_iter()
            .filter(|l| l.ends_with(" in"))
            .collect();
        assert_eq!(ins.len(), i + 1, "order broken: {:?}", logged(&log));
        gos[i].notify_one();
        let token = tasks.remove(0).await.unwrap();
        assert!(token > last, "token {token} after {last}");
        last = token;
    }
    assert!(
        all_gone(&env, name, Duration::from_secs(6)).await,
        "state left"
    );
}

/// A writer downgrades while writer B and then reader C queue: its
/// release of the write side keeps B first (C does not pass it); B gets in
/// once the downgraded read ends, C after B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downgrade_does_not_let_readers_pass_a_queued_writer() {
    let env = Env::start().await;
    let name = "downq";
    let a = env.client().await;
    let (b, c) = (env.client().await, env.client().await);
    let rw = a.rw_lock(name);
    let wg = rw.write().lock().await.unwrap();
    let rg = rw.read().lock().await.unwrap();
    let log: Log = Arc::default();
    let go_b = Arc::new(tokio::sync::Notify::new());
    let go_c = Arc::new(tokio::sync::Notify::new());
    let tb = waiter(&b, name, "w", "B", &log, go_b.clone());
    queued(&env, name, 1).await;
    let tc = waiter(&c, name, "r", "C", &log, go_c.clone());
    queued(&env, name, 2).await;
    wg.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(logged(&log).is_empty(), "{:?}", logged(&log));
    let t = rg.fencing_token();
    let released = Instant::now();
    rg.unlock().await.unwrap();
    assert!(log_has(&log, "B in").await);
    assert!(
        released.elapsed() < Duration::from_millis(1200),
        "B waited {:?}",
        released.elapsed()
    );
    assert_eq!(logged(&log), vec!["B in"]);
    go_b.notify_one();
    let tb = tb.await.unwrap();
    assert!(tb > t);
    assert!(log_has(&log, "C in").await);
    go_c.notify_one();
    assert!(tc.await.unwrap() > tb);
    assert!(
        all_gone(&env, name, Duration::from_secs(6)).await,
        "state left"
    );
}

/// Force-unlock of a write lock hands it to the queued readers (every
/// reader before the first writer) with tokens above every token issued
/// before; the old guard is not held any more; the writer comes next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_hands_on_with_higher_tokens() {
    let env = Env::start().await;
    let name = "force";
    let a = env.client().await;
    let g = a.rw_lock(name).write().lock().await.unwrap();
    let log: Log = Arc::default();
    let clients = [env.client().await, env.client().await, env.client().await];
    let gos: Vec<_> = (0..3)
        .map(|_| Arc::new(tokio::sync::Notify::new()))
        .collect();
    let r1 = waiter(&clients[0], name, "r", "R1", &log, gos[0].clone());
    queued(&env, name, 1).await;
    let r2 = waiter(&clients[1], name, "r", "R2", &log, gos[1].clone());
    queued(&env, name, 2).await;
    let w3 = waiter(&clients[2], name, "w", "W3", &log, gos[2].clone());
    queued(&env, name, 3).await;
    assert!(a.rw_lock(name).write().force_unlock().await.unwrap());
    assert!(
        log_has(&log, "R1 in").await && log_has(&log, "R2 in").await,
        "{:?}",
        logged(&log)
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!logged(&log).contains(&"W3 in".to_owned()));
    assert!(matches!(g.unlock().await, Err(Error::NotHeld { .. })));
    assert!(
        !logged(&log).contains(&"W3 in".to_owned()),
        "the stale unlock let the writer in"
    );
    gos[0].notify_one();
    gos[1].notify_one();
    let (t1, t2) = (r1.await.unwrap(), r2.await.unwrap());
    assert!(log_has(&log, "W3 in").await);
    gos[2].notify_one();
    let t3 = w3.await.unwrap();
    assert!(t3 > t1.max(t2), "{t3} {t1} {t2}");
    assert!(
        all_gone(&env, name, Duration::from_secs(6)).await,
        "state left"
    );
}

/// The next waiter of another client is handed the lock promptly, over and
/// over (a release while the waiter subscribes, queues or refreshes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_waiter_is_handed_promptly_every_time() {
    let env = Env::start().await;
    let name = "prompt";
    let a = env.client().await;
    let b = env.client().await;
    for i in 0..30u64 {
        let (a_side_write, b_side_write) = (i % 3 != 0, i % 2 == 0);
        let rw = a.rw_lock(name);
        let g = if a_side_write {
            rw.write().lock().await.unwrap()
        } else {
            rw.read().lock().await.unwrap()
        };
        if !a_side_write && !b_side_write {
            g.unlock().await.unwrap();
            continue;
        }
        let rwb = b.rw_lock(name);
        let t = tokio::spawn(async move {
            let g = if b_side_write {
                rwb.write().lock().await.unwrap()
            } else {
                rwb.read().lock().await.unwrap()
            };
            (Instant::now(), g)
        });
        // Release at varying points of B's way in.
        tokio::time::sleep(Duration::from_micros((i * 997) % 4000)).await;
        let released = Instant::now();
        let tok = g.fencing_token();
        g.unlock().await.unwrap();
        let (at, gb) = timeout(Duration::from_secs(10), t).await.unwrap().unwrap();
        assert!(gb.fencing_token() > tok);
        assert!(
            at.saturating_duration_since(released) < Duration::from_millis(1200),
            "round {i}: waited {:?}",
            at.saturating_duration_since(released)
        );
        gb.unlock().await.unwrap();
    }
}

/// Hold counts through re-entry and a downgrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_counts_through_reentry_and_downgrade() {
    let env = Env::start().await;
    let c = env.client().await;
    let rw = c.rw_lock("counts");
    tokio::spawn(async move {
        let w1 = rw.write().lock().await.unwrap();
        let w2 = rw.write().lock().await.unwrap();
        let r1 = rw.read().lock().await.unwrap();
        let r2 = rw.read().lock().await.unwrap();
        assert_eq!(rw.write().hold_count().await.unwrap(), 2);
        assert_eq!(rw.read().hold_count().await.unwrap(), 2);
        w2.unlock().await.unwrap();
        assert_eq!(rw.write().hold_count().await.unwrap(), 1);
        w1.unlock().await.unwrap();
        assert_eq!(rw.write().hold_count().await.unwrap(), 0);
        assert_eq!(rw.read().hold_count().await.unwrap(), 2);
        assert!(rw.read().is_locked().await.unwrap());
        let err = rw
            .write()
            .try_lock(Duration::from_secs(1), None)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::UpgradeNotSupported { .. }), "{err}");
        r1.unlock().await.unwrap();
        assert_eq!(rw.read().hold_count().await.unwrap(), 1);
        r2.unlock().await.unwrap();
        assert!(!rw.read().is_locked().await.unwrap());
    })
    .await
    .unwrap();
}

/// A writer that also reads (a downgrade) with a short read lease: once
/// that read lease has ended, releasing the write side frees the lock,
/// and the writer queued behind it is handed the lock by that release
/// (before this change the release dropped dead readers first and freed
/// the lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_write_after_own_read_lease_ended_hands_to_queued_writer() {
    let env = Env::start().await;
    let name = "deadread";
    let a = env.client().await;
    let b = env.client().await;
    let rw = a.rw_lock(name);
    let (wg, rg) = tokio::spawn(async move {
        let wg = rw
            .write()
            .lock_with_lease(Duration::from_secs(20))
            .await
            .unwrap();
        let rg = rw
            .read()
            .lock_with_lease(Duration::from_millis(300))
            .await
            .unwrap();
        (wg, rg)
    })
    .await
    .unwrap();
    let rwb = b.rw_lock(name);
    let tb = tokio::spawn(async move {
        let g = rwb.write().lock().await.unwrap();
        (Instant::now(), g)
    });
    queued(&env, name, 1).await;
    // The writer's own read lease ends (server clock).
    let ended = common::eventually(Duration::from_secs(5), || async {
        let first: Vec<String> = env
            .admin
            .zrange(readers_key(name), 0, 0, None, false, None, true)
            .await
            .unwrap();
        let now = common::server_ms(&env.admin).await;
        // (The zset goes with its TTL, the lease of its one member.)
        first
            .get(1)
            .and_then(|s| s.parse::<i64>().ok())
            .is_none_or(|end| end < now)
    })
    .await;
    assert!(
        ended,
        "the read lease never ended: {:?} now {} hash {:?}",
        env.admin
            .zrange::<Vec<String>, _, _, _>(readers_key(name), 0, -1, None, false, None, true)
            .await
            .unwrap(),
        common::server_ms(&env.admin).await,
        env.admin
            .hgetall::<std::collections::HashMap<String, String>, _>(rw_key(name))
            .await
            .unwrap()
    );
    let released = Instant::now();
    wg.unlock().await.unwrap();
    let after: std::collections::HashMap<String, String> =
        env.admin.hgetall(rw_key(name)).await.unwrap();
    let (at, gb) = timeout(Duration::from_secs(10), tb).await.unwrap().unwrap();
    let waited = at - released;
    drop(rg);
    gb.unlock().await.unwrap();
    assert_eq!(
        after.get("~mode").map(String::as_str),
        Some("write"),
        "the write release left {after:?} (only a dead reader inside); the queued writer got in after {waited:?}"
    );
}

/// A waiter handed the lock whose message is late is cancelled: its undo
/// gives the lock on to the writer queued behind it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waiter_handed_the_lock_passes_it_on() {
    let env = Env::start().await;
    let name = "latecancel";
    let proxy = redisync_testkit::FaultProxy::start(env.server.addr()).await;
    let a = env.client().await;
    let b = common::client_via(&proxy).await;
    let c = env.client().await;
    let g = a.rw_lock(name).write().lock().await.unwrap();
    let rwb = b.rw_lock(name);
    let rtask = tokio::spawn(async move { rwb.read().lock().await });
    queued(&env, name, 1).await;
    let rwc = c.rw_lock(name);
    let wtask = tokio::spawn(async move {
        let g = rwc.write().lock().await.unwrap();
        (Instant::now(), g)
    });
    queued(&env, name, 2).await;
    proxy.set_latency_in(
        redisync_testkit::Direction::Downstream,
        Duration::from_secs(2),
    );
    g.unlock().await.unwrap();
    let mode: Option<String> = env.admin.hget(rw_key(name), "~mode").await.unwrap();
    assert_eq!(mode.as_deref(), Some("read"), "handed to the reader");
    rtask.abort();
    let cancelled = Instant::now();
    let (at, gw) = timeout(Duration::from_secs(15), wtask)
        .await
        .unwrap()
        .unwrap();
    proxy.heal();
    assert!(
        at - cancelled < Duration::from_millis(1500),
        "the writer behind waited {:?}",
        at - cancelled
    );
    gw.unlock().await.unwrap();
    assert!(
        all_gone(&env, name, Duration::from_secs(8)).await,
        "state left"
    );
}
