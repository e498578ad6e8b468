//! Shared helpers of the integration tests: one fresh redis-server per test.
#![allow(dead_code, unreachable_pub)]

pub mod capture;

use std::time::Duration;

use fred::prelude::*;
use redisync::Client;
use redisync_testkit::RedisServer;

/// A fresh server and a plain fred client on it for inspecting state.
pub struct Env {
    pub server: RedisServer,
    pub admin: fred::clients::Client,
}

impl Env {
    pub async fn start() -> Env {
        let server = RedisServer::start().await;
        let admin = admin(&server.url()).await;
        Env { server, admin }
    }

    pub async fn client(&self) -> Client {
        Client::connect(&self.server.url()).await.expect("connect")
    }

    pub async fn client_with_watchdog(&self, lease: Duration) -> Client {
        Client::builder(&self.server.url())
            .watchdog_timeout(lease)
            .connect()
            .await
            .expect("connect")
    }
}

pub async fn admin(url: &str) -> fred::clients::Client {
    let config = Config::from_url(url).expect("url");
    let client = Builder::from_config(config)
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(5))
        .set_policy(ReconnectPolicy::new_constant(0, 100))
        .build()
        .expect("build");
    client.init().await.expect("admin connect");
    client
}

/// The Redis key of lock `name` (mirrors redisync's naming for plain names).
pub fn lock_key(name: &str) -> String {
    key("lock", "hold", name)
}

/// The Redis key (or channel) of one role of one primitive, for a plain name
/// (no braces); mirrors redisync's key layout (`redisync:v1:<kind>:<role>:
/// {<name>}`), so tests that look at or plant raw keys name them in one
/// place. `kind`: `lock`, `fair`, `rw`, `sem`, `latch`; `role`: `hold` (the main
/// hash), `fence`, `ch` (the channel), and per kind `queue`
/// (fair), `readers` (rw), `leases` (sem).
pub fn key(kind: &str, role: &str, name: &str) -> String {
    assert!(
        matches!(kind, "lock" | "fair" | "rw" | "sem" | "latch"),
        "unknown kind {kind}"
    );
    format!("redisync:v1:{kind}:{role}:{{{name}}}")
}

/// Whether redisync uses sharded pub/sub on this server (Redis >= 7:
/// `SSUBSCRIBE`/`SPUBLISH`; below it `SUBSCRIBE`/`PUBLISH`), so tests watch
/// the channels through the same kind of pub/sub the client uses.
pub fn sharded(admin: &fred::clients::Client) -> bool {
    admin.server_version().is_some_and(|v| v.major >= 7)
}

/// `PUBSUB <sub> args..` through whichever pub/sub the client uses:
/// `shard` is the sharded subcommand (`SHARDCHANNELS`, `SHARDNUMSUB`),
/// `classic` the other (`CHANNELS`, `NUMSUB`).
pub async fn pubsub<R: fred::types::FromValue>(
    admin: &fred::clients::Client,
    shard: &str,
    classic: &str,
    args: Vec<String>,
) -> R {
    let sub = if sharded(admin) { shard } else { classic };
    let mut all = vec![sub.to_owned()];
    all.extend(args);
    admin
        .custom(
            fred::types::CustomCommand::new_static(
                "PUBSUB",
                fred::types::ClusterHash::FirstKey,
                false,
            ),
            all,
        )
        .await
        .unwrap_or_else(|e| panic!("PUBSUB {sub}: {e}"))
}

/// Channels with subscribers (of the pub/sub the client uses) that match
/// `pattern`.
pub async fn channels(admin: &fred::clients::Client, pattern: &str) -> Vec<String> {
    pubsub(admin, "SHARDCHANNELS", "CHANNELS", vec![pattern.to_owned()]).await
}

/// How many subscribers `channel` has (of the pub/sub the client uses).
pub async fn subscribers(admin: &fred::clients::Client, channel: &str) -> i64 {
    let counts: Vec<fred::types::Value> =
        pubsub(admin, "SHARDNUMSUB", "NUMSUB", vec![channel.to_owned()]).await;
    counts
        .get(1)
        .and_then(fred::types::Value::as_i64)
        .unwrap_or(-1)
}

/// Subscribes `sub` to `channel` through the pub/sub the client uses; its
/// `message_rx()` then sees what redisync publishes there.
pub async fn subscribe(sub: &fred::clients::Client, channel: &str) {
    if sharded(sub) {
        sub.ssubscribe(channel).await.expect("SSUBSCRIBE");
    } else {
        sub.subscribe(channel).await.expect("SUBSCRIBE");
    }
}

/// Channels with subscribers that belong to redisync (sharded or not, as
/// the client uses).
pub async fn our_shard_channels(env: &Env) -> Vec<String> {
    channels(&env.admin, "redisync:*").await
}

/// Every subscription of ours is gone within `within` (they linger a
/// moment after their last waiter).
pub async fn assert_no_subscriptions_left(env: &Env, within: Duration) {
    let unsubscribed = eventually(within, || async {
        our_shard_channels(env).await.is_empty()
    })
    .await;
    assert!(
        unsubscribed,
        "subscriptions left behind: {:?}",
        our_shard_channels(env).await
    );
}

/// Polls `check` every 10 ms until it returns true; false if `within` passes first.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The server's clock in milliseconds (`TIME`), for writing what a crashed
/// holder would have left behind.
pub async fn server_ms(admin: &fred::clients::Client) -> i64 {
    i64::try_from(server_us(admin).await / 1000).expect("milliseconds fit")
}

/// The server's clock in microseconds (`TIME`).
pub async fn server_us(admin: &fred::clients::Client) -> u64 {
    let (secs, micros): (String, String) = admin
        .custom(
            fred::types::CustomCommand::new_static(
                "TIME",
                fred::types::ClusterHash::FirstKey,
                false,
            ),
            Vec::<String>::new(),
        )
        .await
        .expect("TIME");
    secs.parse::<u64>().expect("seconds") * 1_000_000 + micros.parse::<u64>().expect("micros")
}

/// `ZADD key score member` with an exact integer score.
pub async fn zadd_ms(admin: &fred::clients::Client, key: &str, score_ms: i64, member: &str) {
    let _: i64 = admin
        .custom(
            fred::types::CustomCommand::new_static(
                "ZADD",
                fred::types::ClusterHash::FirstKey,
                false,
            ),
            vec![key.to_owned(), score_ms.to_string(), member.to_owned()],
        )
        .await
        .expect("ZADD");
}

/// INFO commandstats as command -> calls.
/// A client that talks to Redis through `proxy` (a 5 s command timeout:
/// longer than the faults the tests inject).
pub async fn client_via(proxy: &redisync_testkit::FaultProxy) -> Client {
    Client::builder(&proxy.url())
        .command_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect through the proxy")
}

/// EVALSHA calls the server ran so far (each script call is one).
pub async fn evalsha_calls(env: &Env) -> u64 {
    command_calls(env)
        .await
        .get("evalsha")
        .copied()
        .unwrap_or(0)
}

pub async fn command_calls(env: &Env) -> std::collections::HashMap<String, u64> {
    let info: String = env
        .admin
        .info(Some(fred::types::InfoKind::CommandStats))
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.strip_prefix("calls=")?.split(',').next()?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

/// `lock.try_lock(wait, None)` as the docs tell callers to use it through a
/// failover: an error that says it is retryable (a command that failed
/// while the failover was under way) is tried again until `wait` runs out.
pub async fn try_lock_through_failover(
    lock: &redisync::Lock,
    wait: Duration,
) -> redisync::Result<Option<redisync::LockGuard>> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match lock.try_lock(left, None).await {
            Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(50)).await,
            r => return r,
        }
    }
}

/// Stalls the whole thread, as a GC-like pause or SIGSTOP stalls a process
/// (the scenario runs on a current-thread runtime: timers, the watchdog and
/// the connections stop too).
pub fn stall(span: Duration) {
    std::thread::sleep(span);
}

/// Pending once, waking its own task at once: the task goes back on the run
/// queue as one woken by I/O during a stall does, ahead of overdue timers
/// (tokio's `yield_now` defers its wake until after the timers instead).
pub async fn woken_at_once() {
    let mut first = true;
    std::future::poll_fn(|cx| {
        if std::mem::take(&mut first) {
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
}

/// Runs `scenario` on a current-thread runtime of its own thread, so that a
/// [`stall`] stops everything the client runs.
pub async fn on_one_thread<Fut: std::future::Future<Output = ()> + 'static>(
    scenario: impl FnOnce() -> Fut + Send + 'static,
) {
    tokio::task::spawn_blocking(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(scenario());
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
}

/// The wait queue of the lock `name` (clients waiting in Redis).
pub fn lock_queue_key(name: &str) -> String {
    key("lock", "queue", name)
}

/// Whether the wait queue of the lock `name` reaches `len` entries within
/// 10 s (the waiters' busy attempts ran).
pub async fn lock_queued(admin: &fred::clients::Client, name: &str, len: i64) -> bool {
    queue_reaches(admin, &lock_queue_key(name), len).await
}

/// [`lock_queued`] for the semaphore `name`.
pub async fn semaphore_queued(admin: &fred::clients::Client, name: &str, len: i64) -> bool {
    queue_reaches(admin, &key("sem", "queue", name), len).await
}

async fn queue_reaches(admin: &fred::clients::Client, queue: &str, len: i64) -> bool {
    eventually(Duration::from_secs(10), || async {
        admin.llen::<i64, _>(queue).await.unwrap() == len
    })
    .await
}

/// Whether a replica acknowledges everything `admin`'s connection wrote,
/// within `ms`: `WAIT` counts only the connection's own writes, so one is
/// made first.
pub async fn replica_acks(admin: &fred::clients::Client, ms: i64) -> bool {
    let _: i64 = admin.incr("replica:ready").await.unwrap();
    let acked: i64 = admin
        .custom(
            fred::types::CustomCommand::new_static(
                "WAIT",
                fred::types::ClusterHash::FirstKey,
                false,
            ),
            vec![1, ms],
        )
        .await
        .unwrap();
    acked >= 1
}

/// Whether the replica (resumed after a pause) acknowledges the primary's
/// writes again within a generous bound.
pub async fn replica_caught_up(admin: &fred::clients::Client) -> bool {
    eventually(Duration::from_secs(10), || replica_acks(admin, 500)).await
}

/// A replica of `primary`, ready once it acknowledges a write (a replica
/// still loading the initial sync shows "online" with offset 0 and acks
/// late).
pub async fn replica_of(primary: &RedisServer) -> RedisServer {
    let admin = admin(&primary.url()).await;
    // Start the full sync at once (the default waits 5 s for more replicas).
    let _: fred::types::Value = admin
        .custom(
            fred::types::CustomCommand::new_static(
                "CONFIG",
                fred::types::ClusterHash::FirstKey,
                false,
            ),
            vec!["SET", "repl-diskless-sync-delay", "0"],
        )
        .await
        .unwrap();
    let port = primary.port().to_string();
    let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]).await;
    assert!(
        eventually(Duration::from_secs(20), || replica_acks(&admin, 100)).await,
        "the replica did not sync"
    );
    replica
}

/// One command to the node on `port`, its reply as `redis-cli` prints it.
pub async fn cli(port: u16, args: &[&str]) -> String {
    redisync_testkit::command(port, args)
        .await
        .unwrap()
        .trim()
        .to_owned()
}

/// The port of the primary serving `slot` (from CLUSTER SLOTS).
pub async fn primary_of_slot(cluster: &redisync_testkit::RedisCluster, slot: u16) -> u16 {
    let text = cli(cluster.nodes()[0].port(), &["cluster", "slots"]).await;
    let lines: Vec<&str> = text.lines().collect();
    // Groups: start, end, ip, port, id, (replica ip, port, id)...
    let mut i = 0;
    while i + 3 < lines.len() {
        if let (Ok(start), Ok(end)) = (lines[i].parse::<u16>(), lines[i + 1].parse::<u16>()) {
            if (start..=end).contains(&slot) && lines[i + 2].contains('.') {
                return lines[i + 3].parse().unwrap();
            }
        }
        i += 1;
    }
    panic!("no primary for slot {slot} in {text}");
}

/// Whether a queued waiter looked again within 10 s: its first attempt
/// after subscribing (`LPOS` of its queue entry) ran, so it is parked and
/// its next look is on its own bound.
pub async fn queued_waiter_looked(env: &Env) -> bool {
    eventually(Duration::from_secs(10), || async {
        command_calls(env).await.get("lpos").copied().unwrap_or(0) >= 1
    })
    .await
}

/// Runs the future `work` builds on a current-thread runtime of its own, on
/// a thread of its own: blocking that thread from inside (a std channel's
/// `recv`) stops everything it runs, timers and connections included, as a
/// process stops under SIGSTOP.
pub fn on_own_runtime<W, F>(work: W) -> std::thread::JoinHandle<()>
where
    W: FnOnce() -> F + Send + 'static,
    F: std::future::Future<Output = ()>,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(work());
    })
}

/// One slot moved by hand from its primary to another, the steps
/// `redis-cli --cluster reshard` takes, over RESP.
pub struct SlotMove {
    pub slot: String,
    pub src: u16,
    pub dst: u16,
    pub src_id: String,
    pub dst_id: String,
}

impl SlotMove {
    /// Plans moving the slot of `key` to another primary.
    pub async fn plan(cluster: &redisync_testkit::RedisCluster, key: &str) -> SlotMove {
        let slot = fred::util::redis_keyslot(key.as_bytes());
        let src = primary_of_slot(cluster, slot).await;
        let dst = cluster
            .nodes()
            .iter()
            .map(redisync_testkit::RedisServer::port)
            .find(|p| *p != src)
            .unwrap();
        SlotMove {
            slot: slot.to_string(),
            src,
            dst,
            src_id: cli(src, &["cluster", "myid"]).await,
            dst_id: cli(dst, &["cluster", "myid"]).await,
        }
    }

    /// Marks the slot importing on the target, migrating on the source.
    pub async fn begin(&self) {
        cli(
            self.dst,
            &["cluster", "setslot", &self.slot, "importing", &self.src_id],
        )
        .await;
        cli(
            self.src,
            &["cluster", "setslot", &self.slot, "migrating", &self.dst_id],
        )
        .await;
    }

    /// Moves `keys` of the slot to the target.
    pub async fn migrate(&self, keys: &[&str]) {
        let dst = self.dst.to_string();
        let mut args = vec!["migrate", "127.0.0.1", &dst, "", "0", "5000", "keys"];
        args.extend_from_slice(keys);
        assert_eq!(cli(self.src, &args).await, "OK", "MIGRATE {keys:?}");
    }

    /// Hands the slot to the target on every node.
    pub async fn finish(&self, cluster: &redisync_testkit::RedisCluster) {
        for n in cluster.nodes() {
            cli(
                n.port(),
                &["cluster", "setslot", &self.slot, "node", &self.dst_id],
            )
            .await;
        }
    }
}

/// A small deterministic pseudo-random source (xorshift64) for stress
/// tests: the same `seed` (not 0) gives the same sequence.
pub fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

/// `SAVE`: a snapshot the server loads when it restarts.
pub async fn save(admin: &fred::clients::Client) {
    let _: String = admin
        .custom(
            fred::types::CustomCommand::new_static(
                "SAVE",
                fred::types::ClusterHash::FirstKey,
                false,
            ),
            Vec::<String>::new(),
        )
        .await
        .expect("SAVE");
}

/// A TCP proxy that keeps its clients' connections when the server goes
/// away: it dials the server again and goes on (as proxies in front of
/// managed Redis do), so a client never sees its connection close. Bytes in
/// flight when the server went away are lost; use it while the client is
/// idle.
pub struct StickyProxy {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl StickyProxy {
    pub async fn start(upstream_port: u16) -> StickyProxy {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind");
        let port = listener.local_addr().expect("address").port();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(sticky_serve(client, upstream_port));
            }
        });
        StickyProxy { port, task }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for StickyProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn sticky_serve(mut client: tokio::net::TcpStream, upstream_port: u16) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut from_client, mut from_server) = (vec![0_u8; 16 * 1024], vec![0_u8; 16 * 1024]);
    loop {
        // (Re)dial the server for up to 10 s.
        let mut server = None;
        for _ in 0..500 {
            if let Ok(s) = tokio::net::TcpStream::connect(("127.0.0.1", upstream_port)).await {
                server = Some(s);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let Some(mut server) = server else { return };
        loop {
            tokio::select! {
                n = client.read(&mut from_client) => match n {
                    Ok(0) | Err(_) => return,
                    Ok(n) => if server.write_all(&from_client[..n]).await.is_err() { break },
                },
                n = server.read(&mut from_server) => match n {
                    Ok(0) | Err(_) => break,
                    Ok(n) => if client.write_all(&from_server[..n]).await.is_err() { return },
                },
            }
        }
    }
}

/// Every key of the server (`KEYS *`), sorted.
pub async fn all_keys(admin: &fred::clients::Client) -> Vec<String> {
    let mut keys: Vec<String> = admin
        .custom(
            fred::types::CustomCommand::new_static("KEYS", fred::types::ClusterHash::Random, false),
            vec!["*"],
        )
        .await
        .expect("KEYS");
    keys.sort();
    keys
}
