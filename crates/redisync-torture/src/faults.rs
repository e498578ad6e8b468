//! The servers, proxies and fault schedule of a run.
//!
//! One fault at a time, each undone before the next: the kinds take turns
//! in a fixed order (one *round* = every kind once), and targets rotate from
//! round to round so that the first two rounds hit the main server, a
//! Redlock node, and both processes' proxied clients.

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
    pub const ALL: [FaultKind; 8] = [
        FaultKind::Pause,
        FaultKind::ClientPause,
        FaultKind::Partition,
        FaultKind::KillRestart,
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
}

impl Cluster {
    /// Starts the four servers and `processes` sets of proxies.
    pub(crate) async fn start(processes: usize) -> Result<Cluster, String> {
        let mut servers = Vec::new();
        for _ in Server::ALL {
            servers.push(RedisServer::try_start().await.map_err(|e| e.to_string())?);
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
        Ok(Cluster {
            servers,
            proxies,
            admins,
        })
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
                let s = cluster.server_mut(server);
                s.kill().await;
                self.kills.push(Kill {
                    server,
                    at_us: now_us(),
                });
                tokio::time::sleep(down).await;
                let error = s.try_restart().await.err().map(|e| e.to_string());
                (server.to_string(), error)
            }
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
