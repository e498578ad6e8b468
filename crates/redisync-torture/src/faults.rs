//! The servers, proxies and fault schedule of a run.
//!
//! One fault at a time, each undone before the next: the kinds take turns
//! in a fixed order (one *round* = every kind once), and targets rotate from
//! round to round so that the first two rounds hit the main server, a
//! Redlock node, and both processes' proxied clients.
//!
//! Clock steps are out of scope: every process of a run shares the
//! machine's one clock, which a test cannot step without root, and the
//! guarantees assume it does not step back (leases are time; a token falls
//! back on the server clock only when its counter was lost).

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use fred::prelude::{ClientLike, LuaInterface};
use fred::types::config::{Config, ReconnectPolicy};
use fred::types::{Builder, ClusterHash, CustomCommand, Value};
use redisync_testkit::{Direction, FaultProxy, RedisServer};

use crate::history::{now_us, Kill, Server};
use crate::rng::Rng;
use crate::worker::Urls;

/// The kinds of fault a run injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// `SIGSTOP` a server for longer than the lease, then `SIGCONT`.
    Pause,
    /// `SIGSTOP` the worker process (a client: a GC pause, a frozen VM) for
    /// longer than the lease, then `SIGCONT`: its holders wake up after
    /// others took their locks, and their writes must be fenced off.
    ClientPause,
    /// Blackhole the proxies between one client set and its servers (or one
    /// of them) for longer than the lease, then heal.
    Partition,
    /// `SIGKILL` a server and restart it empty on the same port.
    KillRestart,
    /// Restart a server from an older snapshot: `SAVE` at a random moment,
    /// keep granting for a while, then `SIGKILL` it and restart it from the
    /// saved file. Holds and fencing counters go back in time: holds
    /// released since come back (until their lease ends), holds granted
    /// since are gone.
    SnapshotRestart,
    /// Fail the main server over to a replica that missed the last writes:
    /// cut the replication link, keep granting for a while, then
    /// `SIGKILL` the primary and bring it back on its address with the
    /// replica's data (what clients see when a lagging replica is
    /// promoted behind a fixed address). The replica then syncs again.
    LaggingFailover,
    /// `CLIENT KILL TYPE pubsub` on a server: every subscriber connection.
    PubsubKill,
    /// `SCRIPT FLUSH` on a server: the next `EVALSHA`s get `NOSCRIPT`.
    ScriptFlush,
    /// Reset every connection of one client set (`RST`) and refuse new ones
    /// for a moment.
    ConnReset,
    /// Add latency to every connection of one client set for a while.
    Latency,
}

impl FaultKind {
    /// Every kind, in schedule order.
    pub const ALL: [FaultKind; 10] = [
        FaultKind::Pause,
        FaultKind::ClientPause,
        FaultKind::Partition,
        FaultKind::KillRestart,
        FaultKind::SnapshotRestart,
        FaultKind::LaggingFailover,
        FaultKind::PubsubKill,
        FaultKind::ScriptFlush,
        FaultKind::ConnReset,
        FaultKind::Latency,
    ];

    /// The name used in summaries.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Pause => "pause",
            FaultKind::ClientPause => "client-pause",
            FaultKind::Partition => "partition",
            FaultKind::KillRestart => "kill-restart",
            FaultKind::SnapshotRestart => "snapshot-restart",
            FaultKind::LaggingFailover => "lagging-failover",
            FaultKind::PubsubKill => "pubsub-kill",
            FaultKind::ScriptFlush => "script-flush",
            FaultKind::ConnReset => "conn-reset",
            FaultKind::Latency => "latency",
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One fault, injected and undone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRecord {
    /// What.
    pub kind: FaultKind,
    /// Where, e.g. `"main"`, `"p1.proxied -> all servers (both ways)"`.
    pub target: String,
    /// When it began.
    pub start_us: u64,
    /// When it was undone.
    pub end_us: u64,
    /// Why it could not be injected, if so (it then does not count).
    pub error: Option<String>,
}

impl fmt::Display for FaultRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} for {} ms",
            self.kind,
            self.target,
            self.end_us.saturating_sub(self.start_us) / 1000
        )?;
        if let Some(e) = &self.error {
            write!(f, " FAILED: {e}")?;
        }
        Ok(())
    }
}

/// The servers of a run (in [`Server::ALL`] order), a fault proxy per
/// process and server, and an admin connection per server.
pub(crate) struct Cluster {
    servers: Vec<RedisServer>,
    /// `proxies[process][server]`.
    proxies: Vec<Vec<FaultProxy>>,
    admins: Vec<fred::clients::Client>,
    /// A replica of the main server (for [`FaultKind::LaggingFailover`]),
    /// its replication link through `link`, and an admin connection.
    replica: RedisServer,
    link: FaultProxy,
    replica_admin: fred::clients::Client,
}

impl Cluster {
    /// Starts the four servers and `processes` sets of proxies.
    pub(crate) async fn start(processes: usize) -> Result<Cluster, String> {
        let mut servers = Vec::new();
        for _ in Server::ALL {
            // A replica's full sync starts at once (not after the default
            // 5 s wait for more replicas): it comes back within a fault.
            let server = RedisServer::try_start_with_args(&["--repl-diskless-sync-delay", "0"])
                .await
                .map_err(|e| e.to_string())?;
            servers.push(server);
        }
        let mut proxies = Vec::new();
        for _ in 0..processes {
            let mut row = Vec::new();
            for s in &servers {
                row.push(
                    FaultProxy::try_start(s.addr())
                        .await
                        .map_err(|e| format!("fault proxy: {e}"))?,
                );
            }
            proxies.push(row);
        }
        let mut admins = Vec::new();
        for s in &servers {
            admins.push(admin(&s.url()).await?);
        }
        let link = FaultProxy::try_start(servers[0].addr())
            .await
            .map_err(|e| format!("fault proxy: {e}"))?;
        let port = link.port().to_string();
        let replica = RedisServer::try_start_with_args(&["--replicaof", "127.0.0.1", &port])
            .await
            .map_err(|e| format!("replica: {e}"))?;
        let replica_admin = admin(&replica.url()).await?;
        let cluster = Cluster {
            servers,
            proxies,
            admins,
            replica,
            link,
            replica_admin,
        };
        cluster.replica_in_sync(Duration::from_secs(10)).await?;
        Ok(cluster)
    }

    /// Waits (at most `within`) until the replica's link is up and it has
    /// everything the main server sent.
    async fn replica_in_sync(&self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        let mut last = String::new();
        while Instant::now() < deadline {
            let main = info(self.admin(Server::Main), "replication").await;
            let replica = info(&self.replica_admin, "replication").await;
            match (main, replica) {
                (Ok(m), Ok(r)) => {
                    let up = field(&r, "master_link_status") == Some("up");
                    let sent = field(&m, "master_repl_offset");
                    let got = field(&r, "slave_repl_offset");
                    if up && sent.is_some() && sent == got {
                        return Ok(());
                    }
                    last = format!(
                        "link {:?}, offsets {sent:?} / {got:?}",
                        field(&r, "master_link_status")
                    );
                }
                (Err(e), _) | (_, Err(e)) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(format!(
            "the replica did not sync within {within:?}: {last}"
        ))
    }

    /// The servers, directly.
    pub(crate) fn direct(&self) -> Urls {
        Urls {
            main: self.servers[0].url(),
            nodes: self.servers[1..].iter().map(RedisServer::url).collect(),
        }
    }

    /// The servers through the proxies of `process`.
    pub(crate) fn proxied(&self, process: usize) -> Urls {
        let row = &self.proxies[process];
        Urls {
            main: row[0].url(),
            nodes: row[1..].iter().map(FaultProxy::url).collect(),
        }
    }

    /// The admin connection to `server` (direct).
    pub(crate) fn admin(&self, server: Server) -> &fred::clients::Client {
        &self.admins[server.index()]
    }

    fn server_mut(&mut self, server: Server) -> &mut RedisServer {
        &mut self.servers[server.index()]
    }

    /// Ends every fault (safety net; each fault undoes itself).
    pub(crate) fn heal_all(&self) {
        for s in &self.servers {
            s.resume();
        }
        for p in self.proxies.iter().flatten() {
            p.heal();
        }
        self.link.heal();
    }

    /// The keys under `redisync:*` on `server` that exist, with their PTTL
    /// in ms (-1: no TTL) and when it was asked and answered.
    pub(crate) async fn leased_keys(&self, server: Server) -> Result<Vec<KeyTtl>, String> {
        let admin = self.admin(server);
        let keys: Vec<String> = admin
            .custom(
                CustomCommand::new_static("KEYS", ClusterHash::FirstKey, false),
                vec![Value::from("redisync:*")],
            )
            .await
            .map_err(|e| format!("KEYS on {server}: {e}"))?;
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let asked = Instant::now();
            let pttl: i64 = fred::interfaces::KeysInterface::pttl(admin, key.as_str())
                .await
                .map_err(|e| format!("PTTL on {server}: {e}"))?;
            if pttl != -2 {
                out.push(KeyTtl {
                    key,
                    pttl,
                    asked,
                    answered: Instant::now(),
                });
            }
        }
        Ok(out)
    }
}

/// A key's PTTL, and when it was asked and answered (the server read it in
/// between).
#[derive(Debug, Clone)]
pub(crate) struct KeyTtl {
    pub(crate) key: String,
    pub(crate) pttl: i64,
    pub(crate) asked: Instant,
    pub(crate) answered: Instant,
}

/// Sends `SIG<name>` to `pid` with the `kill` command.
fn signal(pid: u32, name: &str) -> Result<(), String> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("`kill -{name} {pid}` failed: {s}")),
        Err(e) => Err(format!("cannot run `kill -{name} {pid}`: {e}")),
    }
}

/// `INFO <section>` of a server.
async fn info(admin: &fred::clients::Client, section: &'static str) -> Result<String, String> {
    admin
        .custom(
            CustomCommand::new_static("INFO", ClusterHash::FirstKey, false),
            vec![Value::from(section)],
        )
        .await
        .map_err(|e| format!("INFO {section}: {e}"))
}

/// The value of `name` in an `INFO` reply.
fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
}

/// `DBSIZE`, asked again while the server is still coming back (at most
/// 3 s: its admin connection reconnects on its own).
async fn dbsize(admin: &fred::clients::Client) -> Result<i64, String> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let reply: Result<i64, _> = admin
            .custom(
                CustomCommand::new_static("DBSIZE", ClusterHash::FirstKey, false),
                Vec::<Value>::new(),
            )
            .await;
        match reply {
            Ok(n) => return Ok(n),
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(format!("DBSIZE: {e}")),
        }
    }
}

/// `SAVE`: the server's data to its snapshot file, now.
async fn save(admin: &fred::clients::Client) -> Result<(), String> {
    admin
        .custom::<Value, Value>(
            CustomCommand::new_static("SAVE", ClusterHash::FirstKey, false),
            Vec::new(),
        )
        .await
        .map(|_| ())
        .map_err(|e| format!("SAVE: {e}"))
}

/// A plain fred client for injecting faults and inspecting keys.
async fn admin(url: &str) -> Result<fred::clients::Client, String> {
    let config = Config::from_url(url).map_err(|e| e.to_string())?;
    let client = Builder::from_config(config)
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(2))
        .set_policy(ReconnectPolicy::new_constant(0, 50))
        .build()
        .map_err(|e| e.to_string())?;
    client
        .init()
        .await
        .map_err(|e| format!("admin connection to {url}: {e}"))?;
    Ok(client)
}

/// The fault schedule and what it did.
pub(crate) struct Schedule {
    rng: Rng,
    /// The worker process (for client pauses).
    worker_pid: Option<u32>,
    lease: Duration,
    next: usize,
    verbose: bool,
    /// Every fault, in order.
    pub(crate) log: Vec<FaultRecord>,
    /// Every kill, for the checker.
    pub(crate) kills: Vec<Kill>,
}

impl Schedule {
    pub(crate) fn new(
        seed: u64,
        lease: Duration,
        worker_pid: Option<u32>,
        verbose: bool,
    ) -> Schedule {
        Schedule {
            rng: Rng::new(seed),
            worker_pid,
            lease,
            next: 0,
            verbose,
            log: Vec::new(),
            kills: Vec::new(),
        }
    }

    /// Rounds completed (every kind once per round).
    pub(crate) fn rounds(&self) -> usize {
        self.next / FaultKind::ALL.len()
    }

    /// A duration of `lo..hi` times the lease.
    fn leases(&mut self, lo: f64, hi: f64) -> Duration {
        self.lease.mul_f64(lo + (hi - lo) * self.rng.unit())
    }

    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.rng.below(hi - lo))
    }

    /// Injects the next fault, undoes it, then pauses a little.
    pub(crate) async fn step(&mut self, cluster: &mut Cluster) {
        let kind = FaultKind::ALL[self.next % FaultKind::ALL.len()];
        let round = self.rounds();
        self.next += 1;
        let start_us = now_us();
        let (target, error) = self.inject(kind, round, cluster).await;
        // The replica finds out at once that its primary came back (through
        // a proxy it would wait for its replication timeout).
        cluster.link.reset_connections();
        let record = FaultRecord {
            kind,
            target,
            start_us,
            end_us: now_us(),
            error,
        };
        if self.verbose {
            println!("fault: {record}");
        }
        self.log.push(record);
        let gap = self.millis(300, 1000);
        tokio::time::sleep(gap).await;
    }

    async fn inject(
        &mut self,
        kind: FaultKind,
        round: usize,
        cluster: &mut Cluster,
    ) -> (String, Option<String>) {
        // Round 0 hits the main server, round 1 a Redlock node, ...
        let server = if round % 2 == 0 {
            Server::Main
        } else {
            Server::Node((round / 2) % 3)
        };
        let any_server = Server::ALL[round % Server::ALL.len()];
        // Subscribers are on the main server only: Redlock never waits on a
        // node (one attempt per node), so its nodes have none to kill.
        let subscribed = Server::Main;
        let processes = cluster.proxies.len();
        match kind {
            FaultKind::Pause => {
                let stopped = self.leases(1.5, 2.2);
                cluster.server_mut(server).pause();
                tokio::time::sleep(stopped).await;
                cluster.server_mut(server).resume();
                (server.to_string(), None)
            }
            FaultKind::KillRestart => {
                let down = self.millis(100, 600);
                self.kill(cluster, server, false).await;
                tokio::time::sleep(down).await;
                let s = cluster.server_mut(server);
                let error = match s.remove_snapshot() {
                    Ok(()) => s.try_restart().await.err().map(|e| e.to_string()),
                    Err(e) => Some(e.to_string()),
                };
                (server.to_string(), error)
            }
            FaultKind::SnapshotRestart => self.snapshot_restart(cluster, server).await,
            FaultKind::LaggingFailover => self.lagging_failover(cluster).await,
            FaultKind::ClientPause => self.client_pause().await,
            FaultKind::Partition => {
                self.partition(cluster, (round + 1) % processes, round)
                    .await
            }
            FaultKind::PubsubKill => {
                let killed: Result<i64, _> = cluster
                    .admin(subscribed)
                    .custom(
                        CustomCommand::new_static("CLIENT", ClusterHash::FirstKey, false),
                        vec![
                            Value::from("KILL"),
                            Value::from("TYPE"),
                            Value::from("pubsub"),
                        ],
                    )
                    .await;
                match killed {
                    Ok(n) => (format!("{subscribed} ({n} connections)"), None),
                    Err(e) => (subscribed.to_string(), Some(e.to_string())),
                }
            }
            FaultKind::ScriptFlush => {
                let flushed = cluster.admin(any_server).script_flush(false).await;
                (any_server.to_string(), flushed.err().map(|e| e.to_string()))
            }
            FaultKind::ConnReset => {
                let process = round % processes;
                let refused = self.millis(100, 400);
                let row = &cluster.proxies[process];
                for p in row {
                    p.refuse_connections(true);
                    p.reset_connections();
                }
                tokio::time::sleep(refused).await;
                for p in row {
                    p.refuse_connections(false);
                }
                (format!("p{process}.proxied -> all servers"), None)
            }
            FaultKind::Latency => self.latency(cluster, (round + 1) % processes).await,
        }
    }

    /// Kills `server` (`SIGKILL`, waited for) and records when it was dead
    /// (and whether it comes back with its replica's data).
    async fn kill(&mut self, cluster: &mut Cluster, server: Server, failover: bool) {
        cluster.server_mut(server).kill().await;
        self.kills.push(Kill {
            server,
            at_us: now_us(),
            failover,
        });
    }

    /// Kills `server` and restarts it from a snapshot taken a while before.
    async fn snapshot_restart(
        &mut self,
        cluster: &mut Cluster,
        server: Server,
    ) -> (String, Option<String>) {
        let target = server.to_string();
        if let Err(e) = save(cluster.admin(server)).await {
            return (target, Some(e));
        }
        let saved_at = Instant::now();
        let saved = dbsize(cluster.admin(server)).await.unwrap_or(-1);
        let granting = self.leases(0.3, 1.5);
        tokio::time::sleep(granting).await;
        let down = self.millis(100, 600);
        let age = saved_at.elapsed();
        self.kill(cluster, server, false).await;
        tokio::time::sleep(down).await;
        let s = cluster.server_mut(server);
        let restarted = s.try_restart().await.map_err(|e| e.to_string());
        let removed = s.remove_snapshot().map_err(|e| e.to_string());
        let loaded = dbsize(cluster.admin(server)).await;
        let target = format!(
            "{server} (snapshot of {saved} keys, {} ms old, {} keys loaded)",
            age.as_millis(),
            loaded.as_ref().map_or(-1, |n| *n)
        );
        let error = restarted
            .and(removed)
            .and(loaded)
            .and_then(|n| {
                if saved > 0 && n == 0 {
                    Err("the snapshot was not loaded".to_owned())
                } else {
                    Ok(())
                }
            })
            .err();
        (target, error)
    }

    /// Cuts the replica off, lets the main server grant on, kills it and
    /// brings it back with the replica's (older) data.
    async fn lagging_failover(&mut self, cluster: &mut Cluster) -> (String, Option<String>) {
        let target = "main via its replica".to_owned();
        if let Err(e) = cluster.replica_in_sync(Duration::from_secs(5)).await {
            return (target, Some(e));
        }
        cluster.link.blackhole(Direction::Both);
        let cut_at = Instant::now();
        let granting = self.leases(0.3, 1.5);
        tokio::time::sleep(granting).await;
        let down = self.millis(100, 600);
        let main = Server::Main;
        self.kill(cluster, main, true).await;
        let behind = cut_at.elapsed();
        // The replica's data becomes the primary's.
        let copied = match save(&cluster.replica_admin).await {
            Ok(()) => std::fs::copy(
                cluster.replica.snapshot_path(),
                cluster.servers[main.index()].snapshot_path(),
            )
            .map(|_| ())
            .map_err(|e| format!("cannot copy the replica's snapshot: {e}")),
            Err(e) => Err(e),
        };
        tokio::time::sleep(down).await;
        let s = cluster.server_mut(main);
        if copied.is_err() {
            let _ = s.remove_snapshot();
        }
        let restarted = s.try_restart().await.map_err(|e| e.to_string());
        let removed = s.remove_snapshot().map_err(|e| e.to_string());
        let loaded = dbsize(cluster.admin(main)).await;
        // The replica reconnects and syncs from the restarted primary.
        cluster.link.heal();
        cluster.link.reset_connections();
        let resynced = cluster.replica_in_sync(Duration::from_secs(10)).await;
        let target = format!(
            "{target} ({} keys loaded, {} ms behind)",
            loaded.as_ref().map_or(-1, |n| *n),
            behind.as_millis()
        );
        let error = copied
            .and(restarted)
            .and(removed)
            .and(loaded.map(|_| ()))
            .and(resynced)
            .err();
        (target, error)
    }

    /// Freezes the worker process for longer than the lease.
    async fn client_pause(&mut self) -> (String, Option<String>) {
        let Some(pid) = self.worker_pid else {
            return ("worker process".into(), Some("no worker process".into()));
        };
        let target = format!("worker process {pid}");
        let stopped = self.leases(1.5, 2.2);
        if let Err(e) = signal(pid, "STOP") {
            return (target, Some(e));
        }
        tokio::time::sleep(stopped).await;
        (target, signal(pid, "CONT").err())
    }

    /// Blackholes the proxies of `process`: to every server both ways on
    /// even rounds, to one server one way on odd ones.
    async fn partition(
        &mut self,
        cluster: &Cluster,
        process: usize,
        round: usize,
    ) -> (String, Option<String>) {
        let cut = self.leases(1.5, 2.2);
        let row = &cluster.proxies[process];
        let (proxies, direction, what) = if round % 2 == 0 {
            (&row[..], Direction::Both, "all servers".to_owned())
        } else {
            let s = Server::ALL[(round / 2) % Server::ALL.len()];
            let d = if (round / 2) % 2 == 0 {
                Direction::Upstream
            } else {
                Direction::Downstream
            };
            (&row[s.index()..=s.index()], d, s.to_string())
        };
        for p in proxies {
            p.blackhole(direction);
        }
        tokio::time::sleep(cut).await;
        for p in proxies {
            p.heal();
        }
        (
            format!("p{process}.proxied -> {what} ({direction:?})"),
            None,
        )
    }

    /// Slows every connection of `process` down for a while.
    async fn latency(&mut self, cluster: &Cluster, process: usize) -> (String, Option<String>) {
        let delay = self.millis(60, 200);
        let slow = self.millis(1500, 2500);
        let row = &cluster.proxies[process];
        for p in row {
            p.set_latency(delay);
        }
        tokio::time::sleep(slow).await;
        for p in row {
            p.heal();
        }
        (
            format!(
                "p{process}.proxied -> all servers (+{} ms each way)",
                delay.as_millis()
            ),
            None,
        )
    }
}
