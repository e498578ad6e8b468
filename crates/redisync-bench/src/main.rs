//! Benchmark driver for redisync: the scenarios S1-S6 described in `BENCHMARKS.md`.
//!
//! ```text
//! redisync-bench --scenario S1|S2|S3 --ports P1[,P2,P3] [parameters]
//!                [--lease fixed|watchdog] [--clients N] [--kind lock|fair|semaphore|write|spin]
//!                [--release await|drop]
//! redisync-bench --scenario S5 --ports P1[,P2,...] [--cluster] [parameters]
//! redisync-bench --scenario S6 --ports P1 --clients N [parameters]
//! redisync-bench --all [--quick] [--repeats N]
//! redisync-bench --compare [--quick] [--repeats N]
//! redisync-bench --tls [--quick] [--repeats N]
//! ```
//!
//! With `--ports` the servers already listening on 127.0.0.1 are used and
//! exactly one JSON line is printed on stdout (logs go to stderr); the exit
//! status is 0 even when the line says `"ok": false` (2 for a bad command
//! line). `--all` starts a fresh `redis-server` through `redisync-testkit`
//! for every run of S1, S2 and S3 with `Lock`, `FairLock`, `Semaphore(1)`
//! and the spin baseline (plus S2 with a watchdog-leased `Lock`), then three
//! fresh servers for each of S4.1 (S1 through a `Redlock`) and S4.2 (S2
//! through a `Redlock`), then S5 on a fresh server and on a fresh
//! 3-primary Redis Cluster, and prints one line per run, then one
//! `"kind":"comparison"` line per (scenario, variant) with the ratios to the
//! spin baseline (and the same as a table on stderr) and one
//! `"kind":"scaling"` line (S5: cluster / one node); it exits with 1 if any
//! run was not ok. `--compare` runs redisync side by side with the peer
//! rslock (see `peers.rs`): S1 with the floors too and with `Lock`
//! "released by drop", S2, S6 and S4 through a `Redlock` and rslock over
//! three servers, each 5 times (variants interleaved), then prints markdown
//! tables of medians with min-max and ratios to rslock on stderr.
//! `--repeats N` runs S1, S2, S4, S5 and S6 N times (variants interleaved)
//! and compares medians; S3 runs once.
//!
//! `--tls` measures what TLS costs: S1 and S2 with `Lock` (fixed lease),
//! each run on a fresh server, alternately over plain TCP (`redis://`, a
//! plain server) and over TLS (`rediss://` to the TLS port of a server of
//! the same binary started with `--tls-port` and test certificates; the
//! client trusts their CA, no client certificate), 5 times each by default
//! (plain, TLS, plain, TLS, ...; `--repeats N`); then a markdown table per
//! scenario on stderr: medians with min-max, and the ratios TLS / plain of
//! the medians with the min-max of the per-repeat pairs. The lines of the
//! TLS runs carry `"transport":"tls"` and the variant `Lock (TLS)`; the
//! commands are counted over the plain port, so cmds/op must match.
//!
//! S1 "released by drop" (`--release drop`, `Lock` only; variant
//! `Lock (released by drop)`): the loop drops the guard instead of awaiting
//! `unlock()`, so the library releases in the background, and acquires
//! again at once. Each acquisition must be a new one (its fencing token above
//! the previous; a re-entry into a hold not yet released would repeat it):
//! those that are not count as `not_released`, and the lock must be free
//! within 5 s after the window (`freed_after_window`); either, or an
//! acquire that got nothing, makes the run not ok.
//!
//! S6 (S2 spread over clients): S2's workload (16 workers on one key, 2 ms
//! holds, fixed 10 s lease, 5 s window) with the workers spread over
//! `--clients N` clients, each its own `redisync::Client` (or rslock
//! `LockManager`, or plain fred client for the spin baseline; worker i uses
//! client i % N). Its lines carry `"scenario":"S6"`, `clients`, `workers`
//! and a `label` with the layout, "S6 16x1" (16 clients x 1 worker each).
//! `--compare` runs the layouts 16x1 and 4x4 for `Lock`, `FairLock`,
//! `Semaphore(1)`, the write side of `RwLock`, rslock and the spin
//! baseline, plus the reference
//! "S6 1x16" (`Lock` with all 16 workers in one client, i.e. S2's `Lock`) in
//! the same interleaving, and prints one table per layout: acq/s (min-max),
//! x rslock, x the reference's acq/s, cmds/acq, the least and the most
//! served worker's acquisitions, wait p99.
//!
//! S5 (many keys): `workers` tasks loop for `duration-s`, each operation on
//! a key `bench:lock:<i>` picked uniformly from `keys` (one `Lock` handle per
//! key, made and warmed up before the window): `try_lock(10 s, lease)`, hold
//! `hold-ms` (a `tokio::time::sleep`, none by default), `unlock`. One port:
//! one server. `--cluster`: the ports are nodes of one Redis Cluster, the
//! client connects with `redis-cluster://127.0.0.1:P1` (a plain `Lock`, not
//! a Redlock; each lock lives in the slot of its name), and the commands are
//! counted on every primary that `CLUSTER NODES` lists (`instances` = their
//! number, `cmds_per_instance` how the work spread).
//!
//! `--kind spin` is the naive spin-lock baseline implemented in the bench
//! (`SET NX PX`, 50 ms sleep between tries, compare-and-delete release; see
//! `spin.rs`), reported with `"lib":"spin-baseline"`, one server only.
//!
//! Three ports mean scenario S4: the same scenario through a
//! `redisync_redlock::Redlock` over the three servers (one `redisync::Client`
//! per server). Its restart guard stays on with `max_lease` = the lease in
//! use; servers younger than that do not count, so the bench first waits
//! until every server has been up that long (`--all` starts the S4 servers
//! first, so they come of age during the other runs).
//!
//! Concurrency model: tokio tasks on the multi-thread runtime, all sharing
//! one `redisync::Client` (`--clients N` spreads the S2/S3/S6 tasks over N
//! clients, to see contention between processes; S5 always uses one).
//! Times come from one monotonic clock (`Instant`).

mod compare;
mod peers;
mod redis_stats;
mod scenarios;
mod spin;
mod stats;

use redis_stats::RedisStats;
use scenarios::{run_s1, run_s2, run_s3, run_s5, warm_up, Handle, Target};
use serde_json::{json, Map, Value};
use spin::SpinLock;
use std::process::ExitCode;
use std::time::Duration;

/// The one key every scenario locks (S5: `bench:lock:<i>`).
const KEY: &str = "bench:lock";

const USAGE: &str = "\
usage: redisync-bench --scenario S1|S2|S3 --ports P1[,P2,P3] [parameters]
       redisync-bench --scenario S5 --ports P1[,P2,...] [--cluster] [parameters]
       redisync-bench --scenario S6 --ports P1 --clients N [parameters]
       redisync-bench --all [--quick] [--repeats N]
       redisync-bench --compare [--quick] [--repeats N]
       redisync-bench --tls [--quick] [--repeats N]
  --all        every scenario and variant (Lock, FairLock, Semaphore(1), spin baseline,
               rslock, the floors, Redlock S4, S5 on one server and on a 3-primary
               cluster) on fresh servers, then the ratios to the spin baseline and to
               rslock and the S5 cluster / one-node ratio
  --compare    side by side with the peer rslock, interleaved: S1 (Lock, Lock released
               by drop, rslock, Lock's scripts, fred floor, raw floor), S2 (Lock, rslock),
               S6 (layouts 16x1 and 4x4: Lock, FairLock, Semaphore(1), RwLock (write),
               rslock, spin; plus
               the reference Lock 1x16), S4.1/S4.2 (Redlock, rslock over 3 servers);
               markdown tables of medians (min-max) and ratios to rslock on stderr
  --tls        the cost of TLS: S1 and S2 (Lock, fixed lease) over plain TCP and over
               TLS (rustls + ring, test CA) on fresh servers of the same binary,
               interleaved; markdown tables of medians (min-max) and TLS / plain ratios
  --repeats N  run S1, S2, S4, S5 and S6 N times (interleaved) and compare medians
               (default 5 with --compare and --tls, 1 with --all)
  --quick      small workloads (smoke run; numbers not comparable)
parameters (defaults per scenario as in BENCHMARKS.md):
  S1: --iterations 3000 --duration-s 5 [--ttl-ms 10000]
  S2: --workers 16 --hold-ms 2 --duration-s 5 --ttl-ms 10000
  S3: --requests 100 --hold-ms 300 --wait-s 35 --ttl-ms 60000
  S5: --workers 64 --keys 1000 --duration-s 5 --ttl-ms 10000 [--hold-ms 0]
      many keys: each worker loops on a uniformly random key bench:lock:<i>, i < keys
  S6: as S2 (--workers 16 --hold-ms 2 --duration-s 5 --ttl-ms 10000), spread over
      --clients N clients (each its own redisync Client / rslock LockManager / fred
      client for spin); one port; the line's label is the layout, e.g. \"S6 4x4\"
      (clients x workers per client)
  --cluster                S5 only: the ports are Redis Cluster nodes; connect with
                           redis-cluster://127.0.0.1:P1 (plain Lock); without it, one port
  --lease fixed|watchdog   fixed: try_lock(wait, Some(ttl)) (default); watchdog: try_lock(wait, None)
  --clients N              S2/S3/S6: spread the workers over N clients (default 1): redisync
                           Clients, rslock LockManagers or (spin) plain fred clients
  --release await|drop     S1 with --kind lock, one port: await unlock() (default) or drop
                           the guard (released in the background) and acquire again at once;
                           an acquisition that is not a new one (fencing token not above
                           the previous) or a lock still held 5 s after the window: not ok
  --kind lock|fair|semaphore|write|spin|rslock|fred-floor|raw-floor|script-floor
                           lock: redisync::Lock (default); fair: redisync::FairLock;
                           semaphore: redisync::Semaphore with 1 permit (watchdog-leased);
                           spin: the naive baseline (SET NX PX, sleep 50 ms, Lua release;
                           fixed lease, one port); rslock: the peer (fixed lease; three
                           ports: its Redlock); fred-floor / raw-floor: S1 floors, two
                           empty EVALSHA through fred / two hand-written PINGs;
                           script-floor: S1 with Lock's own scripts through fred, no engine";

const ALGORITHM: &str = "redisync::Lock: reentrant owner hash + fencing counter, acquire and \
     release as EVALSHA Lua scripts; per-client FIFO gate (one Redis contender per client), \
     unlock messages over pub/sub";
const FAIR_ALGORITHM: &str = "redisync::FairLock: reentrant owner hash + fencing counter, \
     FIFO queue (list) of entries carrying a server-time queue deadline; every waiting task \
     queues in Redis, and a release hands the lock to the oldest live entry in the same script \
     and publishes its token, so only that waiter wakes, holding it (one subscription per \
     client); nobody overtakes a live queue";
const SEMAPHORE_ALGORITHM: &str = "redisync::Semaphore(1): permits hash + lease zset (server \
     time), acquire/release as EVALSHA Lua scripts, permits watchdog-leased; per-client FIFO \
     turn (one Redis contender per client), release messages over pub/sub";
const WRITE_ALGORITHM: &str = "redisync::RwLock, write side: hash + readers zset (server time), \
     acquire/release as EVALSHA Lua scripts; per-client FIFO turn (one Redis contender per \
     client); a busy client joins the lock's queue in Redis and a release hands the lock to the \
     oldest live entry (one writer, or the readers ahead of the first writer), telling it over \
     pub/sub";
const REDLOCK_ALGORITHM: &str = "redisync_redlock::Redlock over 3 independent servers (one \
     redisync::Lock per server, each from its own Client): acquire = the Lock's acquire script \
     on all 3 at once (try_lock with zero wait, 100 ms node timeout); restart guard: a node up \
     for less than max_lease does not count, its uptime (INFO server) read in the same round \
     trip until it is seen old, then once per connection, \
     majority 2, validity = lease - elapsed - (1% + 2 ms); fencing token = max of the \
     majority's tokens, written back to nodes behind (only when they differ: every node gets \
     the same token floor, the client clock + 10 ms, so they normally agree); release on all \
     3 at once; per-process FIFO gate (one contender per process)";
const REDLOCK_RETRY: &str = "try_lock(wait, lease): local waiters queue in the Redlock's FIFO \
     gate; the gate holder retries a failed attempt after a random pause (full jitter below \
     200 ms) until `wait` runs out (S1/S2: 10 s per call, the driver calls again after None)";
const SPIN_ALGORITHM: &str = "naive spin lock (baseline implemented in the bench): acquire = \
     SET key token NX PX ttl, release = EVALSHA compare-and-delete script (GET == token then \
     DEL); no watchdog, no fencing token, no queue, no wake-up";
const SPIN_RETRY: &str = "SET NX every 50 ms (tokio::time::sleep between failed tries) until \
     `wait` runs out, one last try at the deadline (S1/S2: 10 s per call, the driver calls \
     again after None; S3: what is left of wait-s)";
const RETRY: &str = "try_lock(wait, lease): local waiters queue in the client's FIFO gate, the \
     gate holder retries on an unlock message or after the holder's PTTL, until `wait` runs out \
     (S1/S2: 10 s per call, the driver calls again after None; S3: what is left of wait-s)";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    S1,
    S2,
    S3,
    /// Many keys, one node or a cluster.
    S5,
    /// S2 spread over clients (`--clients N`): its rows carry the layout
    /// ("S6 16x1": 16 clients x 1 worker) as their label.
    S6,
}

/// Which lease every acquisition asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lease {
    /// `try_lock(wait, Some(ttl))`: the watchdog is not involved.
    Fixed,
    /// `try_lock(wait, None)`: the library's watchdog keeps the lease alive.
    Watchdog,
}

impl Lease {
    fn parse(s: &str) -> Result<Self, String> {
        match s {
            "fixed" => Ok(Lease::Fixed),
            "watchdog" => Ok(Lease::Watchdog),
            _ => Err("--lease fixed|watchdog".into()),
        }
    }
}

/// How S1 gives the lock back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Release {
    /// `unlock().await` (the default).
    Await,
    /// The guard is dropped: the library releases in the background and the
    /// next acquire starts at once (`Lock` only).
    Drop,
}

impl Release {
    fn parse(s: &str) -> Result<Self, String> {
        match s {
            "await" => Ok(Release::Await),
            "drop" => Ok(Release::Drop),
            _ => Err("--release await|drop".into()),
        }
    }
}

/// Which lock type every acquisition uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `redisync::Lock`.
    Lock,
    /// `redisync::FairLock`.
    Fair,
    /// `redisync::Semaphore` with one permit.
    Semaphore,
    /// The write side of `redisync::RwLock`.
    Write,
    /// The naive spin-lock baseline of `spin.rs`.
    Spin,
    /// The peer rslock (`peers.rs`).
    Rslock,
    /// Floor: two empty `EVALSHA` through a plain fred client (S1 only).
    FredFloor,
    /// Floor: two hand-written `PING` round trips (S1 only).
    RawFloor,
    /// `Lock`'s own acquire and release scripts, one `EVALSHA` each through
    /// a plain fred client, without the engine (S1 only).
    ScriptFloor,
}

impl Kind {
    /// redisync's own lock types (not the baseline, the peer or a floor).
    fn is_redisync(self) -> bool {
        matches!(
            self,
            Kind::Lock | Kind::Fair | Kind::Semaphore | Kind::Write
        )
    }

    fn parse(s: &str) -> Result<Self, String> {
        match s {
            "lock" => Ok(Kind::Lock),
            "fair" => Ok(Kind::Fair),
            "semaphore" => Ok(Kind::Semaphore),
            "write" => Ok(Kind::Write),
            "spin" => Ok(Kind::Spin),
            "rslock" => Ok(Kind::Rslock),
            "fred-floor" => Ok(Kind::FredFloor),
            "raw-floor" => Ok(Kind::RawFloor),
            "script-floor" => Ok(Kind::ScriptFloor),
            _ => Err(
                "--kind lock|fair|semaphore|write|spin|rslock|fred-floor|raw-floor|script-floor"
                    .into(),
            ),
        }
    }
}

/// How the client under test reaches the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    /// `redis://`: plain TCP (every run but `--tls`'s TLS rows).
    Plain,
    /// `rediss://`: TLS (rustls with ring) to the TLS port of a server
    /// started by the testkit, trusting its test CA (`Opts::tls`).
    Tls,
}

/// Where a TLS run connects: the server's TLS port and the CA to trust.
#[derive(Clone)]
struct TlsEndpoint {
    port: u16,
    ca_pem: String,
}

impl std::fmt::Debug for TlsEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsEndpoint")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

/// One scenario run.
#[derive(Clone, Debug)]
struct Opts {
    scenario: Scenario,
    ports: Vec<u16>,
    iterations: usize,
    duration: Duration,
    workers: usize,
    hold: Duration,
    requests: usize,
    wait: Duration,
    ttl: Duration,
    lease: Lease,
    /// redisync Clients the S2/S3 workers are spread over (round-robin).
    clients: usize,
    kind: Kind,
    /// S5: how many keys the workers pick from.
    keys: usize,
    /// S5: the ports are nodes of a Redis Cluster.
    cluster: bool,
    /// Shown as `"label"` (e.g. "S4.1"); none for plain runs (S6 makes
    /// its own from the layout, see `label_text`).
    label: Option<&'static str>,
    /// S1: how the lock is given back.
    release: Release,
    /// Plain TCP or TLS (`--tls` only; redisync's kinds only).
    transport: Transport,
    /// `Transport::Tls`: the endpoint, set when the server has started
    /// (`run_suite`); `ports` stay the plain ports (for `INFO`).
    tls: Option<TlsEndpoint>,
}

impl Opts {
    /// The default parameters of `scenario`.
    fn defaults(scenario: Scenario) -> Self {
        Self {
            scenario,
            ports: Vec::new(),
            iterations: 3000,
            duration: Duration::from_secs(5),
            workers: if scenario == Scenario::S5 { 64 } else { 16 },
            hold: Duration::from_millis(match scenario {
                Scenario::S3 => 300,
                Scenario::S5 => 0,
                Scenario::S1 | Scenario::S2 | Scenario::S6 => 2,
            }),
            requests: 100,
            wait: Duration::from_secs(35),
            ttl: Duration::from_millis(if scenario == Scenario::S3 {
                60_000
            } else {
                10_000
            }),
            lease: Lease::Fixed,
            clients: 1,
            kind: Kind::Lock,
            keys: 1000,
            cluster: false,
            label: None,
            release: Release::Await,
            transport: Transport::Plain,
            tls: None,
        }
    }

    /// The `"label"` of the line: S6's layout ("S6 16x1": clients x workers
    /// per client), or `label`.
    fn label_text(&self) -> Option<String> {
        if self.scenario != Scenario::S6 {
            return self.label.map(String::from);
        }
        let c = self.clients.max(1);
        Some(if self.workers % c == 0 {
            format!("S6 {c}x{}", self.workers / c)
        } else {
            format!("S6 {} workers over {c} clients", self.workers)
        })
    }

    /// Three ports: scenario S4, through a Redlock (not S5: its ports are
    /// cluster nodes).
    fn redlock(&self) -> bool {
        self.ports.len() == 3 && self.scenario != Scenario::S5
    }

    /// The Redlock's restart guard: the lease in use (the clients' default
    /// watchdog timeout, 30 s, with watchdog leases).
    fn max_lease(&self) -> Duration {
        self.lease().unwrap_or(Duration::from_secs(30))
    }

    fn lease(&self) -> Option<Duration> {
        match self.lease {
            Lease::Fixed => Some(self.ttl),
            Lease::Watchdog => None,
        }
    }

    fn ttl_ms(&self) -> Value {
        match self.lease {
            Lease::Fixed => json!(u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)),
            Lease::Watchdog => Value::Null,
        }
    }

    fn settings(&self) -> Value {
        let ttl_ms = self.ttl.as_millis();
        match self.kind {
            Kind::Rslock => return peers::Rslock::settings(ttl_ms, self.ports.len()),
            Kind::FredFloor => {
                return json!({"algorithm": "floor: acquire and release are one EVALSHA each \
                    of a script that returns 0, through a plain fred client (default config)"})
            }
            Kind::RawFloor => {
                return json!({"algorithm": "floor: acquire and release are one PING each, \
                    written and read by hand on one TCP connection (TCP_NODELAY)"})
            }
            Kind::ScriptFloor => {
                return json!({"algorithm": "Lock's scripts without the engine: acquire and \
                    release are one EVALSHA each of lua/lock_acquire.lua and lua/lock_release.lua \
                    (with the prelude), through a plain fred client (default config)"})
            }
            _ => {}
        }
        if self.redlock() {
            return json!({
                "algorithm": REDLOCK_ALGORITHM,
                "retry": REDLOCK_RETRY,
                "ttl_ms": self.ttl_ms(),
                "lease": match self.lease {
                    Lease::Fixed => "fixed",
                    Lease::Watchdog => "watchdog",
                },
                "watchdog_timeout": match self.lease {
                    Lease::Fixed => Value::Null,
                    Lease::Watchdog => json!("library default"),
                },
                "node_timeout_ms": 100,
                "drift_factor": 0.01,
                "max_lease_ms": u64::try_from(self.max_lease().as_millis()).unwrap_or(u64::MAX),
                "restart_guard": "on, max_lease = the lease in use: nodes up for less than \
                    max_lease do not count; the bench waits until every server is that old \
                    (restart_guard_wait_s)",
            });
        }
        if self.scenario == Scenario::S5 {
            return json!({
                "algorithm": ALGORITHM,
                "retry": RETRY,
                "ttl_ms": self.ttl_ms(),
                "lease": match self.lease {
                    Lease::Fixed => "fixed",
                    Lease::Watchdog => "watchdog",
                },
                "watchdog_timeout": match self.lease {
                    Lease::Fixed => Value::Null,
                    Lease::Watchdog => json!("library default"),
                },
                "topology": if self.cluster {
                    "Redis Cluster through fred's cluster client (redis-cluster:// URL, one seed \
                     node); every key and the channel of one lock share its hash tag (one slot \
                     per lock), so the locks spread over the primaries by name"
                } else {
                    "one redis-server"
                },
            });
        }
        json!({
            "algorithm": match self.kind {
                Kind::Lock => ALGORITHM,
                Kind::Fair => FAIR_ALGORITHM,
                Kind::Semaphore => SEMAPHORE_ALGORITHM,
                Kind::Write => WRITE_ALGORITHM,
                Kind::Spin => SPIN_ALGORITHM,
                Kind::Rslock | Kind::FredFloor | Kind::RawFloor | Kind::ScriptFloor => {
                    unreachable!("the peers' settings are returned above")
                }
            },
            "retry": if self.kind == Kind::Spin { SPIN_RETRY } else { RETRY },
            "ttl_ms": self.ttl_ms(),
            "watchdog_timeout": match self.lease {
                Lease::Fixed => Value::Null,
                Lease::Watchdog => json!("library default"),
            },
            "lease": match self.lease {
                Lease::Fixed => "fixed",
                Lease::Watchdog => "watchdog",
            },
        })
    }

    fn params(&self) -> Value {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        match self.scenario {
            Scenario::S1 if self.release == Release::Drop => json!({
                "iterations": self.iterations,
                "duration_s": self.duration.as_secs_f64(),
                "ttl_ms": self.ttl_ms(),
                "release": "drop",
            }),
            Scenario::S1 => json!({
                "iterations": self.iterations,
                "duration_s": self.duration.as_secs_f64(),
                "ttl_ms": self.ttl_ms(),
            }),
            Scenario::S2 | Scenario::S6 => json!({
                "workers": self.workers,
                "hold_ms": ms(self.hold),
                "duration_s": self.duration.as_secs_f64(),
                "ttl_ms": self.ttl_ms(),
                "clients": self.clients,
            }),
            Scenario::S3 => json!({
                "requests": self.requests,
                "hold_ms": ms(self.hold),
                "wait_s": self.wait.as_secs_f64(),
                "ttl_ms": self.ttl_ms(),
                "clients": self.clients,
            }),
            Scenario::S5 => json!({
                "workers": self.workers,
                "keys": self.keys,
                "cluster": self.cluster,
                "hold_ms": ms(self.hold),
                "duration_s": self.duration.as_secs_f64(),
                "ttl_ms": self.ttl_ms(),
            }),
        }
    }

    /// The row name in comparisons and in `BENCHMARKS.md`.
    fn variant(&self) -> String {
        let name = match (self.kind, self.redlock()) {
            (Kind::Rslock, _) => return "rslock".into(),
            (Kind::FredFloor, _) => return "fred floor".into(),
            (Kind::RawFloor, _) => return "raw floor".into(),
            (Kind::ScriptFloor, _) => return "Lock's scripts".into(),
            (_, true) => "Redlock(3)",
            (Kind::Lock, false) if self.release == Release::Drop => {
                return "Lock (released by drop)".into()
            }
            (Kind::Lock, false) => "Lock",
            (Kind::Fair, false) => "FairLock",
            (Kind::Spin, false) => compare::BASELINE,
            // Its permits are always watchdog-leased.
            (Kind::Semaphore, false) => return "Semaphore(1)".into(),
            (Kind::Write, false) => "RwLock (write)",
        };
        let name = if self.cluster { "Lock (cluster)" } else { name };
        let name = match self.lease {
            Lease::Fixed => name.into(),
            Lease::Watchdog => format!("{name} (watchdog)"),
        };
        match self.transport {
            Transport::Plain => name,
            Transport::Tls => format!("{name}{}", compare::TLS_SUFFIX),
        }
    }

    fn model(&self) -> String {
        let clients = match (self.redlock(), self.clients) {
            _ if self.kind == Kind::Rslock && self.clients > 1 && self.scenario != Scenario::S1 => {
                format!(
                    "{} rslock LockManagers (task i uses manager i % {}), each over {} \
                     instance(s) with its own redis-rs multiplexed connection(s)",
                    self.clients,
                    self.clients,
                    self.ports.len()
                )
            }
            _ if self.kind == Kind::Rslock => format!(
                "one rslock LockManager over {} instance(s) (redis-rs multiplexed connections)",
                self.ports.len()
            ),
            _ if matches!(self.kind, Kind::FredFloor | Kind::ScriptFloor) => {
                "one plain fred Client".to_string()
            }
            _ if self.kind == Kind::RawFloor => "one tokio TcpStream".to_string(),
            (false, 1) if self.kind == Kind::Spin => "one plain fred Client".to_string(),
            (false, n) if self.kind == Kind::Spin => {
                format!("{n} plain fred Clients (task i uses client i % {n})")
            }
            (false, 1) if self.transport == Transport::Tls => {
                "one redisync Client over TLS (rediss://, rustls with ring; server \
                 certificate from a test CA, no client certificate)"
                    .to_string()
            }
            (false, 1) => "one redisync Client".to_string(),
            (false, n) => format!("{n} redisync Clients (task i uses client i % {n})"),
            (true, 1) => "one Redlock over 3 redisync Clients (one per server)".to_string(),
            (true, n) => format!(
                "{n} Redlocks (task i uses Redlock i % {n}), each over its own 3 redisync Clients"
            ),
        };
        let runtime = format!(
            "multi-thread runtime ({} workers), {clients}",
            tokio::runtime::Handle::current().metrics().num_workers()
        );
        let work = "hold = std::thread::sleep on the blocking pool";
        match self.scenario {
            Scenario::S1 if self.release == Release::Drop => format!(
                "1 tokio task, {runtime}; the guard is dropped (the library releases in the \
                 background) and the next acquire starts at once"
            ),
            Scenario::S1 => format!("1 tokio task, {runtime}"),
            Scenario::S2 | Scenario::S6 => {
                format!("{} tokio tasks, {runtime}; {work}", self.workers)
            }
            Scenario::S3 => format!("{} tokio tasks, {runtime}; {work}", self.requests),
            Scenario::S5 => format!(
                "{} tokio tasks, {runtime}{}; one Lock handle per key, made before the window; \
                 key per operation uniform from an xorshift64* seeded per task; hold = {}",
                self.workers,
                if self.cluster {
                    " (redis-cluster:// URL)"
                } else {
                    ""
                },
                if self.hold.is_zero() {
                    "none"
                } else {
                    "tokio::time::sleep"
                }
            ),
        }
    }
}

/// What the command line asks for.
enum Command {
    One(Opts),
    /// `--all`, `--compare` or `--tls`.
    Suite(Suite),
    Help,
}

/// Which suite runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    /// `--all`: every scenario and variant.
    All,
    /// `--compare`: side by side with rslock.
    Compare,
    /// `--tls`: S1 and S2 with `Lock` over TLS and over plain TCP.
    Tls,
}

impl Which {
    fn flag(self) -> &'static str {
        match self {
            Which::All => "--all",
            Which::Compare => "--compare",
            Which::Tls => "--tls",
        }
    }
}

/// The runs of `--all` / `--compare` / `--tls`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Suite {
    which: Which,
    quick: bool,
    /// Runs of each S1/S2/S4 row (S3 runs once).
    repeats: usize,
}

/// A suite, with only `--repeats N` among the options.
fn parse_suite(which: Which, quick: bool, pairs: &[(String, String)]) -> Result<Command, String> {
    // Ratios between peers need repeats (the machine is noisy).
    let mut repeats = if which == Which::All { 1 } else { 5 };
    for (k, v) in pairs {
        if k == "repeats" {
            repeats = v
                .parse::<usize>()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or(format!("--repeats {v}: a whole number >= 1"))?;
        } else {
            return Err(format!("--{k} cannot be combined with {}", which.flag()));
        }
    }
    Ok(Command::Suite(Suite {
        which,
        quick,
        repeats,
    }))
}

/// The suite the flags `--all`, `--compare` and `--tls` (`flags`, in the
/// order given) ask for, if any.
fn which_suite(flags: &[Which], cluster: bool) -> Result<Option<Which>, String> {
    let has = |w: Which| flags.contains(&w);
    if has(Which::All) && has(Which::Compare) {
        return Err("--all already includes --compare".into());
    }
    if has(Which::Tls) && flags.iter().any(|&w| w != Which::Tls) {
        return Err("--tls is a suite of its own: not with --all or --compare".into());
    }
    let which = flags.first().copied();
    if which.is_some() && cluster {
        return Err("--cluster only goes with --scenario S5".into());
    }
    Ok(which)
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut suites = Vec::new();
    let mut quick = false;
    let mut cluster = false;
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let Some(name) = arg.strip_prefix("--") else {
            return Err(format!("unexpected argument {arg:?}"));
        };
        match name {
            "all" => suites.push(Which::All),
            "compare" => suites.push(Which::Compare),
            "tls" => suites.push(Which::Tls),
            "quick" => quick = true,
            "cluster" => cluster = true,
            "help" => return Ok(Command::Help),
            _ => {
                let (key, value) = match name.split_once('=') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => (
                        name.to_string(),
                        args.next().ok_or(format!("missing value for --{name}"))?,
                    ),
                };
                pairs.push((key, value));
            }
        }
    }
    if let Some(which) = which_suite(&suites, cluster)? {
        return parse_suite(which, quick, &pairs);
    }
    if quick {
        return Err("--quick only goes with --all, --compare or --tls".into());
    }
    let scenario = match pairs
        .iter()
        .find(|(k, _)| k == "scenario")
        .map(|(_, v)| v.as_str())
    {
        Some("S1") => Scenario::S1,
        Some("S2") => Scenario::S2,
        Some("S3") => Scenario::S3,
        Some("S5") => Scenario::S5,
        Some("S6") => Scenario::S6,
        _ => return Err("--scenario S1|S2|S3|S5|S6 is required".into()),
    };
    let mut o = Opts::defaults(scenario);
    o.cluster = cluster;
    let mut have_ports = false;
    for (key, value) in &pairs {
        let secs = |v: &str| -> Result<Duration, String> {
            let x: f64 = v.parse().map_err(|e| format!("--{key} {v}: {e}"))?;
            Duration::try_from_secs_f64(x).map_err(|e| format!("--{key} {v}: {e}"))
        };
        let count = |v: &str| -> Result<usize, String> {
            v.parse().map_err(|e| format!("--{key} {v}: {e}"))
        };
        match key.as_str() {
            "scenario" => {}
            "ports" => {
                o.ports = value
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| {
                        s.parse::<u16>()
                            .map_err(|e| format!("--ports {value}: {e}"))
                    })
                    .collect::<Result<_, _>>()?;
                have_ports = true;
            }
            "iterations" => o.iterations = count(value)?,
            "workers" => o.workers = count(value)?,
            "requests" => o.requests = count(value)?,
            "keys" => o.keys = count(value)?,
            "clients" => o.clients = count(value)?.max(1),
            "duration-s" => o.duration = secs(value)?,
            "wait-s" => o.wait = secs(value)?,
            "hold-ms" => o.hold = secs(value)? / 1000,
            "ttl-ms" => o.ttl = secs(value)? / 1000,
            "kind" => o.kind = Kind::parse(value)?,
            "lease" => o.lease = Lease::parse(value)?,
            "release" => o.release = Release::parse(value)?,
            _ => return Err(format!("unknown option --{key}")),
        }
    }
    if !have_ports {
        return Err("--ports is required".into());
    }
    check(&o)?;
    Ok(Command::One(o))
}

/// The combinations a single run does not support.
fn check(o: &Opts) -> Result<(), String> {
    if o.scenario == Scenario::S5 {
        if o.cluster && o.ports.is_empty() {
            return Err("S5 --cluster: --ports P1[,P2,...] (cluster nodes) is required".into());
        }
        if !o.cluster && o.ports.len() != 1 {
            return Err("S5 without --cluster runs on one server: --ports P1".into());
        }
        if o.kind != Kind::Lock {
            return Err("S5 measures redisync::Lock only (--kind lock)".into());
        }
        if o.clients != 1 {
            return Err("S5 uses one redisync Client (no --clients)".into());
        }
        if o.keys == 0 || o.workers == 0 {
            return Err("S5 needs --keys >= 1 and --workers >= 1".into());
        }
        return Ok(());
    }
    if o.cluster {
        return Err("--cluster only goes with --scenario S5".into());
    }
    if o.release == Release::Drop
        && (o.scenario != Scenario::S1 || o.kind != Kind::Lock || o.ports.len() != 1)
    {
        return Err("--release drop measures S1 with --kind lock on one server".into());
    }
    if o.scenario == Scenario::S6 && o.ports.len() != 1 {
        return Err("S6 runs on one server: --ports P1".into());
    }
    if o.scenario == Scenario::S6 && o.workers == 0 {
        return Err("S6 needs --workers >= 1".into());
    }
    if !matches!(o.ports.len(), 1 | 3) {
        return Err("--ports P1 or --ports P1,P2,P3 is required".into());
    }
    if matches!(o.kind, Kind::FredFloor | Kind::RawFloor | Kind::ScriptFloor)
        && (o.scenario != Scenario::S1 || o.ports.len() != 1)
    {
        return Err("the floors measure S1 on one server".into());
    }
    if o.kind == Kind::Rslock && o.lease == Lease::Watchdog {
        return Err("--kind rslock has no watchdog: use --lease fixed".into());
    }
    if o.kind == Kind::Spin {
        if o.redlock() {
            return Err("--kind spin runs on one server (one port)".into());
        }
        if o.lease == Lease::Watchdog {
            return Err("--kind spin has no watchdog: use --lease fixed".into());
        }
    }
    Ok(())
}

/// The one-server runs of a suite, in order: every S1 row `repeats` times
/// (variants interleaved), then every S2 row likewise, then S3 once per
/// variant. `--compare`: `Lock` and the spin baseline; `--all`: also
/// `FairLock`, `Semaphore(1)` and (S2 only) `Lock` with the watchdog lease.
fn suite_runs(suite: Suite) -> Vec<Opts> {
    if suite.which == Which::Tls {
        return tls_runs(suite);
    }
    let (s1, s2) = s1_s2(suite);
    let mut s3 = Opts::defaults(Scenario::S3);
    if suite.quick {
        s3.requests = 20;
        s3.hold = Duration::from_millis(50);
    }
    let compare_only = suite.which == Which::Compare;
    let mut variants = vec![(Kind::Lock, Lease::Fixed), (Kind::Rslock, Lease::Fixed)];
    if !compare_only {
        variants.extend([
            (Kind::Fair, Lease::Fixed),
            (Kind::Semaphore, Lease::Watchdog),
            (Kind::Spin, Lease::Fixed),
        ]);
    }
    let floors = [
        (Kind::ScriptFloor, Lease::Fixed),
        (Kind::FredFloor, Lease::Fixed),
        (Kind::RawFloor, Lease::Fixed),
    ];
    let with = |base: &Opts, (kind, lease): (Kind, Lease)| Opts {
        lease,
        kind,
        ..base.clone()
    };
    let dropped = Opts {
        release: Release::Drop,
        ..s1.clone()
    };
    let mut runs = Vec::new();
    for _ in 0..suite.repeats {
        for &v in variants.iter().chain(&floors) {
            runs.push(with(&s1, v));
            // `--compare`: the dropped guard next to the awaited one.
            if v == (Kind::Lock, Lease::Fixed) && compare_only {
                runs.push(dropped.clone());
            }
        }
    }
    for _ in 0..suite.repeats {
        for &v in &variants {
            runs.push(with(&s2, v));
            if v == (Kind::Lock, Lease::Fixed) && !compare_only {
                runs.push(with(&s2, (Kind::Lock, Lease::Watchdog)));
            }
        }
    }
    if compare_only {
        runs.extend(s6_runs(suite));
    } else {
        runs.extend(variants.iter().map(|&v| with(&s3, v)));
    }
    runs
}

/// S1 and S2 with their defaults, or (`--quick`) small: 500 iterations,
/// a 2 s window.
fn s1_s2(suite: Suite) -> (Opts, Opts) {
    let mut s1 = Opts::defaults(Scenario::S1);
    let mut s2 = Opts::defaults(Scenario::S2);
    if suite.quick {
        s1.iterations = 500;
        s2.duration = Duration::from_secs(2);
    }
    (s1, s2)
}

/// The runs of `--tls`: S1, then S2, with `Lock` and a fixed lease, over
/// plain TCP and over TLS alternately (plain, TLS, plain, TLS, ...),
/// `repeats` times each.
fn tls_runs(suite: Suite) -> Vec<Opts> {
    let (s1, s2) = s1_s2(suite);
    let mut runs = Vec::new();
    for plain in [s1, s2] {
        let tls = Opts {
            transport: Transport::Tls,
            ..plain.clone()
        };
        for _ in 0..suite.repeats {
            runs.extend([plain.clone(), tls.clone()]);
        }
    }
    runs
}

/// S6's window (S2's is 5 s; see `s6_runs`).
const S6_DURATION: Duration = Duration::from_secs(5);

/// The S6 layouts of `--compare`: (clients, workers per client).
const S6_LAYOUTS: [(usize, usize); 2] = [(16, 1), (4, 4)];

/// The S6 runs of `--compare`, `repeats` times, every variant of every
/// layout interleaved: first the reference `Lock` in one client (1x16, S2's
/// `Lock`), then per layout `Lock`, `FairLock`, `Semaphore(1)`, rslock and
/// the spin baseline.
fn s6_runs(suite: Suite) -> Vec<Opts> {
    let mut s6 = Opts::defaults(Scenario::S6);
    s6.duration = if suite.quick {
        Duration::from_secs(2)
    } else {
        S6_DURATION
    };
    let variants = [
        (Kind::Lock, Lease::Fixed),
        (Kind::Fair, Lease::Fixed),
        (Kind::Semaphore, Lease::Watchdog),
        (Kind::Write, Lease::Fixed),
        (Kind::Rslock, Lease::Fixed),
        (Kind::Spin, Lease::Fixed),
    ];
    let layout = |clients: usize, per_client: usize, (kind, lease): (Kind, Lease)| Opts {
        clients,
        workers: clients * per_client,
        kind,
        lease,
        ..s6.clone()
    };
    let mut runs = Vec::new();
    for _ in 0..suite.repeats {
        runs.push(layout(1, 16, (Kind::Lock, Lease::Fixed)));
        for (clients, per_client) in S6_LAYOUTS {
            runs.extend(variants.iter().map(|&v| layout(clients, per_client, v)));
        }
    }
    runs
}

/// The S4 runs: S1 and S2 (fixed lease) through a Redlock and through
/// rslock over three servers, `repeats` times each, interleaved; none for
/// `--tls`.
fn s4_runs(suite: Suite) -> Vec<Opts> {
    if suite.which == Which::Tls {
        return Vec::new();
    }
    let (mut s41, mut s42) = s1_s2(suite);
    s41.label = Some("S4.1");
    s42.label = Some("S4.2");
    let peer = |o: &Opts| Opts {
        kind: Kind::Rslock,
        ..o.clone()
    };
    let mut runs = Vec::new();
    for o in [s41, s42] {
        for _ in 0..suite.repeats {
            runs.extend([o.clone(), peer(&o)]);
        }
    }
    runs
}

/// The S5 runs of `--all`: one server, then a 3-primary cluster, `repeats`
/// times (interleaved); none for `--compare` and `--tls`.
fn s5_runs(suite: Suite) -> Vec<Opts> {
    if suite.which != Which::All {
        return Vec::new();
    }
    let mut one = Opts::defaults(Scenario::S5);
    if suite.quick {
        one.duration = Duration::from_secs(1);
    }
    let cluster = Opts {
        cluster: true,
        ..one.clone()
    };
    (0..suite.repeats)
        .flat_map(|_| [one.clone(), cluster.clone()])
        .collect()
}

/// The fields every line starts with (`ok` stays false until the run is done).
fn header(o: &Opts) -> Map<String, Value> {
    let (lib, version, client) = match o.kind {
        Kind::Spin => (
            "spin-baseline",
            env!("CARGO_PKG_VERSION"),
            "fred 10.1 (plain Client, default config)",
        ),
        Kind::Rslock => (
            "rslock",
            peers::RSLOCK_VERSION,
            "redis-rs 1.8 (multiplexed, tokio)",
        ),
        Kind::FredFloor => (
            "fred-floor",
            env!("CARGO_PKG_VERSION"),
            "fred 10.1 (plain Client, default config)",
        ),
        Kind::RawFloor => ("raw-floor", env!("CARGO_PKG_VERSION"), "tokio TcpStream"),
        Kind::ScriptFloor => (
            "script-floor",
            env!("CARGO_PKG_VERSION"),
            "fred 10.1 (plain Client, default config)",
        ),
        Kind::Lock | Kind::Fair | Kind::Semaphore | Kind::Write => (
            "redisync",
            env!("CARGO_PKG_VERSION"),
            "fred 10.1 (redisync::Client)",
        ),
    };
    let mut out = Map::new();
    out.insert("ok".into(), json!(false));
    out.insert("peer".into(), json!(lib));
    out.insert("lib".into(), json!(lib));
    out.insert("lib_version".into(), json!(version));
    match o.transport {
        Transport::Plain => out.insert("client".into(), json!(client)),
        Transport::Tls => out.insert(
            "client".into(),
            json!(format!("{client}, TLS: rustls + ring")),
        ),
    };
    out.insert(
        "transport".into(),
        json!(match o.transport {
            Transport::Plain => "plain",
            Transport::Tls => "tls",
        }),
    );
    out.insert("lang".into(), json!("rust"));
    out.insert("scenario".into(), json!(format!("{:?}", o.scenario)));
    if let Some(label) = o.label_text() {
        out.insert("label".into(), json!(label));
    }
    if o.scenario == Scenario::S6 {
        out.insert("clients".into(), json!(o.clients));
        out.insert("workers".into(), json!(o.workers));
    }
    out.insert("variant".into(), json!(o.variant()));
    out.insert("instances".into(), json!(o.ports.len()));
    out.insert("settings".into(), o.settings());
    out.insert("model".into(), json!(o.model()));
    out.insert("params".into(), o.params());
    out
}

/// S5: connects one client (cluster or not), makes one `Lock` per key, runs
/// the scenario (which warms every key up) and merges its fields into `out`.
async fn run_many_keys(o: &Opts, out: &mut Map<String, Value>) -> Result<(), String> {
    let port = o.ports[0];
    let (url, stat_urls) = if o.cluster {
        (
            format!("redis-cluster://127.0.0.1:{port}"),
            redis_stats::cluster_primaries(port).await?,
        )
    } else {
        let url = format!("redis://127.0.0.1:{port}");
        (url.clone(), vec![url])
    };
    out.insert("instances".into(), json!(stat_urls.len()));
    out.insert("instance_urls".into(), json!(stat_urls));
    let stats = RedisStats::connect(&stat_urls).await?;
    let client = match redisync::Client::connect(&url).await {
        Ok(c) => c,
        Err(e) => {
            stats.quit().await;
            return Err(format!("connect {url}: {e}"));
        }
    };
    let targets: Vec<Target> = (0..o.keys)
        .map(|i| Target {
            lock: Handle::Lock(client.lock(&format!("{KEY}:{i}"))),
            lease: o.lease(),
        })
        .collect();
    let result = run_s5(&targets, &stats, o.workers, o.hold, o.duration).await;
    drop(targets);
    let shutdown = client.shutdown().await;
    stats.quit().await;
    out.extend(result?);
    shutdown.map_err(|e| format!("shutdown: {e}"))
}

/// The handle of a run that is not redisync's (the spin baseline, rslock, a
/// floor), connected; `None` for redisync's kinds.
async fn other_handle(o: &Opts, urls: &[String]) -> Result<Option<Handle>, String> {
    Ok(Some(match o.kind {
        Kind::Spin => Handle::Spin(SpinLock::connect(&urls[0], KEY).await?),
        Kind::Rslock => Handle::Rslock(peers::Rslock::new(urls, KEY)),
        Kind::FredFloor => Handle::Floor(peers::Floor::fred(&urls[0]).await?),
        Kind::RawFloor => Handle::Floor(peers::Floor::raw(o.ports[0]).await?),
        Kind::ScriptFloor => Handle::Floor(peers::Floor::scripts(&urls[0], KEY).await?),
        Kind::Lock | Kind::Fair | Kind::Semaphore | Kind::Write => return Ok(None),
    }))
}

/// What redisync's clients under test connect to: the servers' plain
/// `urls`, or (TLS) the TLS port of the one server.
fn client_urls(o: &Opts, urls: &[String]) -> Result<Vec<String>, String> {
    match (o.transport, &o.tls) {
        (Transport::Plain, _) => Ok(urls.to_vec()),
        (Transport::Tls, Some(tls)) if urls.len() == 1 && o.kind.is_redisync() => {
            Ok(vec![format!("rediss://127.0.0.1:{}", tls.port)])
        }
        (Transport::Tls, Some(_)) => Err("TLS runs measure redisync's kinds on one server".into()),
        (Transport::Tls, None) => Err("a TLS run without its TLS endpoint".into()),
    }
}

/// One redisync client under test on `url` (trusting the test CA for TLS).
async fn connect(o: &Opts, url: &str) -> Result<redisync::Client, String> {
    let mut builder = redisync::Client::builder(url);
    if let Some(tls) = &o.tls {
        builder = builder.tls_ca_pem(tls.ca_pem.clone());
    }
    builder
        .connect()
        .await
        .map_err(|e| format!("connect {url}: {e}"))
}

/// Connects, warms up, runs the scenario and merges its fields into `out`.
async fn run(o: &Opts, out: &mut Map<String, Value>) -> Result<(), String> {
    if o.scenario == Scenario::S5 {
        return run_many_keys(o, out).await;
    }
    let urls: Vec<String> = o
        .ports
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    let stats = RedisStats::connect(&urls).await?;
    out.insert(
        "server_version".into(),
        json!(stats.server_version().await?),
    );
    let n_clients = if o.scenario == Scenario::S1 {
        1
    } else {
        o.clients
    };
    let client_urls = client_urls(o, &urls)?;
    let mut clients = Vec::with_capacity(n_clients * urls.len());
    let mut others = Vec::new();
    let mut targets = Vec::with_capacity(n_clients);
    for _ in 0..n_clients {
        if let Some(lock) = other_handle(o, &urls).await? {
            others.push(lock.clone());
            targets.push(Target {
                lock,
                lease: o.lease(),
            });
            continue;
        }
        let mut locks = Vec::with_capacity(urls.len());
        for url in &client_urls {
            let client = connect(o, url).await?;
            locks.push(client.lock(KEY));
            clients.push(client);
        }
        let last = &clients[clients.len() - 1];
        let lock = match (o.kind, o.redlock()) {
            (Kind::Lock, false) => Handle::Lock(locks.remove(0)),
            (Kind::Fair, false) => Handle::Fair(last.fair_lock(KEY)),
            (Kind::Semaphore, false) => Handle::Semaphore(last.semaphore(KEY)),
            (Kind::Write, false) => Handle::Write(last.rw_lock(KEY).write()),
            (Kind::Lock, true) => Handle::Redlock(
                redisync_redlock::Redlock::builder(locks)
                    .max_lease(o.max_lease())
                    .build()
                    .map_err(|e| format!("Redlock: {e}"))?,
            ),
            (
                Kind::Spin | Kind::Rslock | Kind::FredFloor | Kind::RawFloor | Kind::ScriptFloor,
                _,
            ) => {
                unreachable!("the baseline and the peers are set up above")
            }
            (kind, true) => return Err(format!("--kind {kind:?} has no Redlock (S4) variant")),
        };
        targets.push(Target {
            lock,
            lease: o.lease(),
        });
    }
    if o.kind == Kind::Semaphore {
        // One permit: the semaphore is a mutex (kept if a previous run set it).
        let set = clients[0].semaphore(KEY).try_set_permits(1).await;
        set.map_err(|e| format!("try_set_permits: {e}"))?;
    }
    if o.redlock() && o.kind == Kind::Lock {
        let waited = wait_for_restart_guard(&clients[..urls.len()], o.max_lease()).await?;
        out.insert("restart_guard_wait_s".into(), json!(secs_f(waited)));
    }
    let result = warm_up_and_run(o, &targets, &stats).await;
    let mut shutdown = Ok(());
    for client in &clients {
        if let Err(e) = client.shutdown().await {
            shutdown = Err(format!("shutdown: {e}"));
        }
    }
    for other in &others {
        match other {
            Handle::Spin(spin) => spin.quit().await,
            Handle::Floor(floor) => floor.quit().await,
            _ => {}
        }
    }
    stats.quit().await;
    out.extend(result?);
    shutdown
}

/// Warms every target up, then runs the (one-key) scenario.
async fn warm_up_and_run(
    o: &Opts,
    targets: &[Target],
    stats: &RedisStats,
) -> Result<Map<String, Value>, String> {
    for target in targets {
        warm_up(target).await?;
    }
    match o.scenario {
        Scenario::S1 => {
            let drop_guard = o.release == Release::Drop;
            run_s1(&targets[0], stats, o.iterations, o.duration, drop_guard).await
        }
        Scenario::S2 | Scenario::S6 => run_s2(targets, stats, o.workers, o.hold, o.duration).await,
        Scenario::S3 => run_s3(targets, stats, o.requests, o.hold, o.wait).await,
        Scenario::S5 => Err("S5 runs in run_many_keys".into()),
    }
}

/// Waits until every server has been up for `max_lease` as the Redlock's
/// restart guard reads it (whole seconds, so one more); returns how long.
async fn wait_for_restart_guard(
    clients: &[redisync::Client],
    max_lease: Duration,
) -> Result<Duration, String> {
    let started = std::time::Instant::now();
    let needed = max_lease + Duration::from_secs(1);
    loop {
        let mut youngest = Duration::MAX;
        for c in clients {
            // The reading Redlock's restart guard makes (support for
            // redisync-redlock, not a user API).
            let up = redisync::__private::server_uptime(c)
                .await
                .map_err(|e| format!("uptime: {e}"))?;
            youngest = youngest.min(up);
        }
        if youngest >= needed {
            return Ok(started.elapsed());
        }
        let left = needed.saturating_sub(youngest);
        eprintln!(
            "restart guard: the youngest server is up {youngest:?}; waiting {left:?} so it counts"
        );
        tokio::time::sleep(left.min(Duration::from_secs(1))).await;
    }
}

fn secs_f(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// One scenario run as one JSON object.
async fn run_one(o: &Opts) -> Map<String, Value> {
    let mut out = header(o);
    // The machine is shared: note its load next to every run.
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        eprintln!("{:?} start, loadavg {}", o.scenario, load.trim());
        let avg: Vec<&str> = load.split_whitespace().take(3).collect();
        out.insert("loadavg_start".into(), json!(avg));
    }
    match run(o, &mut out).await {
        Ok(()) => {
            let mut problems = Vec::new();
            let count = |k: &str| out.get(k).and_then(Value::as_u64).unwrap_or(0);
            let (violations, overlaps) = (count("violations"), count("overlaps"));
            if violations + overlaps > 0 {
                problems.push(format!(
                    "mutual exclusion violated (violations={violations}, overlaps={overlaps})"
                ));
            }
            if let Some(Value::Array(errors)) = out.get("errors") {
                problems.extend(errors.iter().filter_map(Value::as_str).map(String::from));
            }
            if count("fencing_token_regressions") > 0 {
                eprintln!("warning: fencing tokens did not grow with every new holder");
            }
            if problems.is_empty() {
                out.insert("ok".into(), json!(true));
            } else {
                out.insert("error".into(), json!(problems.join("; ")));
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            out.insert("error".into(), json!(e));
        }
    }
    out
}

fn emit(out: &Map<String, Value>) -> bool {
    let ok = out.get("ok").and_then(Value::as_bool).unwrap_or(false);
    println!("{}", Value::Object(out.clone()));
    ok
}

async fn run_suite(suite: Suite) -> ExitCode {
    let mut all_ok = true;
    let mut rows = Vec::new();
    // S4's fresh servers start now, so they are older than the restart
    // guard's max_lease by the time their runs come.
    let mut s4 = Vec::new();
    for o in s4_runs(suite) {
        s4.push((o, redisync_testkit::RedisNodes::start(3).await));
    }
    // `--tls`: one set of test certificates for every TLS server.
    let certs = match suite.which {
        Which::Tls => match redisync_testkit::TestCerts::generate() {
            Ok(certs) => Some(certs),
            Err(e) => return suite_failed(&format!("test certificates: {e}")),
        },
        Which::All | Which::Compare => None,
    };
    for mut o in suite_runs(suite) {
        let server = match start_server(&mut o, certs.as_ref()).await {
            Ok(server) => server,
            Err(e) => return suite_failed(&e),
        };
        eprintln!(
            "running {} ({}) against {}",
            o.label_text()
                .unwrap_or_else(|| format!("{:?}", o.scenario)),
            o.variant(),
            server.tls_url().unwrap_or_else(|| server.url())
        );
        let out = run_one(&o).await;
        drop(server);
        all_ok &= emit(&out);
        rows.push(out);
    }
    for (mut o, nodes) in s4 {
        o.ports = nodes.ports();
        eprintln!(
            "running {} ({:?} through a Redlock, lease {:?}) against ports {:?}",
            o.label.unwrap_or("S4"),
            o.scenario,
            o.lease,
            o.ports
        );
        let out = run_one(&o).await;
        drop(nodes);
        all_ok &= emit(&out);
        rows.push(out);
    }
    for mut o in s5_runs(suite) {
        all_ok &= run_s5_fresh(&mut o, &mut rows).await;
    }
    match suite.which {
        Which::All => eprintln!("{}", compare::peer_table(&rows)),
        Which::Compare => {
            eprintln!("{}", peer_table_header(&rows, suite));
            eprintln!("{}", compare::peer_table(&rows));
        }
        Which::Tls => {
            eprintln!("{}", peer_table_header(&rows, suite));
            eprintln!("{}", compare::TLS_TABLE.render(&rows));
        }
    }
    let s6 = compare::s6_table(&rows);
    if !s6.is_empty() {
        eprintln!("{s6}");
    }
    let comparisons = compare::comparisons(&rows);
    for c in &comparisons {
        println!("{c}");
    }
    if !comparisons.is_empty() {
        eprint!("{}", compare::summary(&comparisons));
    }
    if let Some(scaling) = compare::scaling(&rows) {
        println!("{scaling}");
        eprint!("{}", compare::scaling_summary(&scaling));
    }
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// A fresh server for one run of a suite: plain, or (`Transport::Tls`) with
/// a TLS port too, whose endpoint goes into `o.tls`; `o.ports` is the plain
/// port either way.
async fn start_server(
    o: &mut Opts,
    certs: Option<&redisync_testkit::TestCerts>,
) -> Result<redisync_testkit::RedisServer, String> {
    let server = match (o.transport, certs) {
        (Transport::Plain, _) => redisync_testkit::RedisServer::start().await,
        (Transport::Tls, Some(certs)) => {
            let server = redisync_testkit::RedisServer::try_start_tls(certs, false, &[]).await;
            let server = server.map_err(|e| format!("TLS server: {e}"))?;
            o.tls = Some(TlsEndpoint {
                port: server.tls_port().ok_or("TLS server without a TLS port")?,
                ca_pem: certs.ca_pem.clone(),
            });
            server
        }
        (Transport::Tls, None) => return Err("a TLS run without certificates".into()),
    };
    o.ports = vec![server.port()];
    Ok(server)
}

/// A suite that cannot go on: says why (stderr and one JSON line), exit 1.
fn suite_failed(why: &str) -> ExitCode {
    eprintln!("error: {why}");
    let mut out = Map::new();
    out.insert("ok".into(), json!(false));
    out.insert("error".into(), json!(why));
    emit(&out);
    ExitCode::FAILURE
}

/// What the peer table was measured on: the date, the machine's cores, the
/// server's version and the load at the start of the runs (min-max).
fn peer_table_header(rows: &[Map<String, Value>], suite: Suite) -> String {
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let loads: Vec<f64> = rows
        .iter()
        .filter_map(|r| r.get("loadavg_start")?.get(0)?.as_str()?.parse().ok())
        .collect();
    let lo = loads.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = loads.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let server = rows
        .iter()
        .find_map(|r| r.get("server_version")?.as_str().map(String::from))
        .unwrap_or_else(|| "?".into());
    let what = match suite.which {
        Which::Tls => {
            "min-max in parentheses; TLS: rustls (ring) client, server certificate from \
             a test CA, no client certificate; x plain = TLS / plain of the medians \
             (min-max of the per-repeat pairs in parentheses)"
        }
        Which::All | Which::Compare => "headline min-max in parentheses",
    };
    format!(
        "redisync-bench {}, {} (UTC): {cores} cores, server {server}, 1-min load \
         {lo:.2}-{hi:.2} at the starts of the runs; medians of {} interleaved repeats, \
         {what}",
        suite.which.flag(),
        utc_date(),
        suite.repeats
    )
}

/// Today's date (UTC) as YYYY-MM-DD, from the system clock.
fn utc_date() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// One S5 run of a suite on a fresh server or a fresh 3-primary cluster;
/// emits its line, keeps it in `rows` and says whether it was ok.
async fn run_s5_fresh(o: &mut Opts, rows: &mut Vec<Map<String, Value>>) -> bool {
    let out = if o.cluster {
        match redisync_testkit::RedisCluster::try_start(3, 0).await {
            Ok(cluster) => {
                o.ports = cluster
                    .nodes()
                    .iter()
                    .map(redisync_testkit::RedisServer::port)
                    .collect();
                eprintln!(
                    "running S5 (many keys) against the cluster {}",
                    cluster.url()
                );
                let out = run_one(o).await;
                drop(cluster);
                out
            }
            Err(e) => {
                let mut out = header(o);
                out.insert("error".into(), json!(format!("cluster start: {e}")));
                out
            }
        }
    } else {
        let server = redisync_testkit::RedisServer::start().await;
        o.ports = vec![server.port()];
        eprintln!("running S5 (many keys) against {}", server.url());
        let out = run_one(o).await;
        drop(server);
        out
    };
    let ok = emit(&out);
    rows.push(out);
    ok
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    stats::now_ns(); // starts the monotonic clock
    match parse_args(std::env::args().skip(1)) {
        Ok(Command::One(o)) => {
            emit(&run_one(&o).await);
            ExitCode::SUCCESS
        }
        Ok(Command::Suite(suite)) => run_suite(suite).await,
        Ok(Command::Help) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            let mut out = Map::new();
            out.insert("ok".into(), json!(false));
            out.insert("error".into(), json!(e));
            out.insert("lib".into(), json!("redisync"));
            out.insert("lib_version".into(), json!(env!("CARGO_PKG_VERSION")));
            out.insert("lang".into(), json!("rust"));
            emit(&out);
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Command, String> {
        parse_args(s.split_whitespace().map(String::from))
    }

    #[test]
    fn defaults_and_overrides() {
        let Ok(Command::One(o)) = parse("--scenario S3 --ports 7400") else {
            panic!("S3 did not parse");
        };
        assert_eq!(o.requests, 100);
        assert_eq!(o.hold, Duration::from_millis(300));
        assert_eq!(o.ttl, Duration::from_secs(60));
        let Ok(Command::One(o)) =
            parse("--scenario S2 --ports 1,2,3 --workers 4 --hold-ms 2.5 --lease watchdog")
        else {
            panic!("S2 did not parse");
        };
        assert_eq!(o.ports, vec![1, 2, 3]);
        assert_eq!(o.workers, 4);
        assert_eq!(o.hold, Duration::from_micros(2500));
        assert_eq!(o.lease, Lease::Watchdog);
        assert_eq!(o.clients, 1);
        let Ok(Command::One(o)) = parse("--scenario S2 --ports 1 --clients=4") else {
            panic!("--clients did not parse");
        };
        assert_eq!(o.clients, 4);
        assert_eq!(o.kind, Kind::Lock);
        let Ok(Command::One(o)) = parse("--scenario S2 --ports 1 --kind fair") else {
            panic!("--kind did not parse");
        };
        assert_eq!(o.kind, Kind::Fair);
        assert!(parse("--scenario S2 --ports 1 --kind bogus").is_err());
        let Ok(Command::One(o)) = parse("--scenario S3 --ports 1 --kind spin") else {
            panic!("--kind spin did not parse");
        };
        assert_eq!(o.kind, Kind::Spin);
        assert_eq!(o.variant(), "spin");
        assert_eq!(o.lease(), Some(Duration::from_secs(60)));
        assert!(matches!(
            parse("--all --quick"),
            Ok(Command::Suite(Suite {
                which: Which::All,
                quick: true,
                repeats: 1
            }))
        ));
        assert!(matches!(
            parse("--compare --repeats 3"),
            Ok(Command::Suite(Suite {
                which: Which::Compare,
                quick: false,
                repeats: 3
            }))
        ));
    }

    #[test]
    fn s6_and_release_by_drop_parse() {
        let Ok(Command::One(o)) = parse("--scenario S6 --ports 1 --clients 16 --kind rslock")
        else {
            panic!("S6 did not parse");
        };
        assert_eq!(o.scenario, Scenario::S6);
        assert_eq!((o.workers, o.clients), (16, 16));
        assert_eq!(o.hold, Duration::from_millis(2));
        assert_eq!(o.label_text().as_deref(), Some("S6 16x1"));
        let Ok(Command::One(o)) = parse("--scenario S6 --ports 1 --clients 3 --workers 16") else {
            panic!("S6 with uneven layout did not parse");
        };
        assert_eq!(
            o.label_text().as_deref(),
            Some("S6 16 workers over 3 clients")
        );
        assert!(parse("--scenario S6 --ports 1,2,3 --clients 4").is_err());
        assert!(parse("--scenario S6 --ports 1 --workers 0").is_err());
        let Ok(Command::One(o)) = parse("--scenario S1 --ports 1 --release drop") else {
            panic!("--release drop did not parse");
        };
        assert_eq!(o.release, Release::Drop);
        assert_eq!(o.variant(), "Lock (released by drop)");
        assert!(parse("--scenario S1 --ports 1 --release later").is_err());
        assert!(parse("--scenario S2 --ports 1 --release drop").is_err());
        assert!(parse("--scenario S1 --ports 1 --release drop --kind fair").is_err());
        assert!(parse("--scenario S1 --ports 1,2,3 --release drop").is_err());
        assert!(parse("--scenario S1 --ports 1 --release await --kind fair").is_ok());
    }

    #[test]
    fn floors_measure_s1_on_one_server() {
        assert!(parse("--scenario S1 --ports 1 --kind script-floor").is_ok());
        assert!(parse("--scenario S2 --ports 1 --kind script-floor").is_err());
        assert!(parse("--scenario S1 --ports 1,2,3 --kind script-floor").is_err());
    }

    #[test]
    fn spin_needs_one_port_and_a_fixed_lease() {
        assert!(parse("--scenario S1 --ports 1,2,3 --kind spin").is_err());
        assert!(parse("--scenario S2 --ports 1 --kind spin --lease watchdog").is_err());
        assert!(parse("--scenario S2 --ports 1 --kind spin --lease fixed").is_ok());
    }

    // `header` reads the runtime's worker count.
    #[tokio::test]
    async fn compare_adds_s6_and_the_dropped_guard() {
        let compare = Suite {
            which: Which::Compare,
            quick: false,
            repeats: 2,
        };
        let runs = suite_runs(compare);
        // Then S6, every layout and variant interleaved per repeat.
        let s6: Vec<String> = runs[16..]
            .iter()
            .map(|o| format!("{} {}", o.label_text().unwrap_or_default(), o.variant()))
            .collect();
        let one_repeat = [
            "S6 1x16 Lock",
            "S6 16x1 Lock",
            "S6 16x1 FairLock",
            "S6 16x1 Semaphore(1)",
            "S6 16x1 RwLock (write)",
            "S6 16x1 rslock",
            "S6 16x1 spin",
            "S6 4x4 Lock",
            "S6 4x4 FairLock",
            "S6 4x4 Semaphore(1)",
            "S6 4x4 RwLock (write)",
            "S6 4x4 rslock",
            "S6 4x4 spin",
        ];
        assert_eq!(s6, [one_repeat, one_repeat].concat());
        assert_eq!(
            runs[16].label_text().as_deref(),
            Some(compare::S6_REFERENCE)
        );
        assert!(runs[16..].iter().all(|o| o.scenario == Scenario::S6
            && o.workers == 16
            && o.hold == Duration::from_millis(2)
            && o.ttl == Duration::from_secs(10)
            && o.duration == S6_DURATION));
        // S6 rows say their layout, clients and workers.
        let h = header(&runs[23]);
        assert_eq!(h["scenario"], "S6");
        assert_eq!(h["label"], "S6 4x4");
        assert_eq!(
            (h["clients"].as_u64(), h["workers"].as_u64()),
            (Some(4), Some(4 * 4))
        );
        assert_eq!(h["params"]["clients"], 4);
        // The dropped guard: S1, Lock, fixed lease; the awaited row unchanged.
        let dropped = &runs[1];
        assert_eq!(dropped.release, Release::Drop);
        assert_eq!(header(dropped)["params"]["release"], "drop");
        assert!(header(&runs[0])["params"].get("release").is_none());
    }

    #[test]
    fn suites() {
        let compare = Suite {
            which: Which::Compare,
            quick: false,
            repeats: 2,
        };
        let runs = suite_runs(compare);
        let names: Vec<String> = runs
            .iter()
            .map(|o| format!("{:?} {}", o.scenario, o.variant()))
            .collect();
        assert_eq!(
            names[..16],
            [
                "S1 Lock",
                "S1 Lock (released by drop)",
                "S1 rslock",
                "S1 Lock's scripts",
                "S1 fred floor",
                "S1 raw floor",
                "S1 Lock",
                "S1 Lock (released by drop)",
                "S1 rslock",
                "S1 Lock's scripts",
                "S1 fred floor",
                "S1 raw floor",
                "S2 Lock",
                "S2 rslock",
                "S2 Lock",
                "S2 rslock"
            ]
        );
        let s4: Vec<String> = s4_runs(compare)
            .iter()
            .map(|o| format!("{} {:?}", o.label.unwrap_or("?"), o.kind))
            .collect();
        assert_eq!(
            s4,
            [
                "S4.1 Lock",
                "S4.1 Rslock",
                "S4.1 Lock",
                "S4.1 Rslock",
                "S4.2 Lock",
                "S4.2 Rslock",
                "S4.2 Lock",
                "S4.2 Rslock"
            ]
        );
        let all = Suite {
            which: Which::All,
            quick: true,
            repeats: 1,
        };
        let names: Vec<String> = suite_runs(all)
            .iter()
            .map(|o| format!("{:?} {}", o.scenario, o.variant()))
            .collect();
        assert_eq!(
            names,
            [
                "S1 Lock",
                "S1 rslock",
                "S1 FairLock",
                "S1 Semaphore(1)",
                "S1 spin",
                "S1 Lock's scripts",
                "S1 fred floor",
                "S1 raw floor",
                "S2 Lock",
                "S2 Lock (watchdog)",
                "S2 rslock",
                "S2 FairLock",
                "S2 Semaphore(1)",
                "S2 spin",
                "S3 Lock",
                "S3 rslock",
                "S3 FairLock",
                "S3 Semaphore(1)",
                "S3 spin"
            ]
        );
        assert!(s5_runs(compare).is_empty());
        let s5: Vec<String> = s5_runs(all).iter().map(Opts::variant).collect();
        assert_eq!(s5, ["Lock", "Lock (cluster)"]);
        assert!(s5_runs(all)
            .iter()
            .all(|o| o.scenario == Scenario::S5 && o.duration == Duration::from_secs(1)));
        let three = Suite { repeats: 3, ..all };
        let s5: Vec<bool> = s5_runs(three).iter().map(|o| o.cluster).collect();
        assert_eq!(s5, [false, true, false, true, false, true]);
        let s4: Vec<_> = s4_runs(all).iter().map(|o| o.label).collect();
        assert_eq!(s4, [Some("S4.1"), Some("S4.1"), Some("S4.2"), Some("S4.2")]);
        let mut s41 = s4_runs(all).remove(0);
        s41.ports = vec![1, 2, 3]; // set by run_suite
        assert_eq!(s41.variant(), "Redlock(3)");
    }

    #[test]
    fn s5_defaults_and_cluster() {
        let Ok(Command::One(o)) = parse("--scenario S5 --ports 7000") else {
            panic!("S5 did not parse");
        };
        assert_eq!(o.scenario, Scenario::S5);
        assert_eq!((o.workers, o.keys), (64, 1000));
        assert_eq!(o.hold, Duration::ZERO);
        assert_eq!(o.duration, Duration::from_secs(5));
        assert_eq!(o.lease(), Some(Duration::from_secs(10)));
        assert!(!o.cluster);
        assert_eq!(o.variant(), "Lock");
        assert_eq!(o.params()["keys"], 1000);
        let Ok(Command::One(o)) = parse(
            "--scenario S5 --ports 7000,7001,7002 --cluster --workers 8 --keys=10 \
             --duration-s 1 --ttl-ms 5000 --hold-ms 1",
        ) else {
            panic!("S5 --cluster did not parse");
        };
        assert!(o.cluster);
        // Three cluster nodes are not a Redlock.
        assert!(!o.redlock());
        assert_eq!(o.ports, vec![7000, 7001, 7002]);
        assert_eq!((o.workers, o.keys), (8, 10));
        assert_eq!(o.hold, Duration::from_millis(1));
        assert_eq!(o.ttl, Duration::from_secs(5));
        assert_eq!(o.variant(), "Lock (cluster)");
        assert_eq!(o.params()["cluster"], true);
        // --cluster goes before or after the rest.
        assert!(parse("--cluster --scenario S5 --ports 7000").is_ok());
    }

    #[test]
    fn s5_rejects_bad_input() {
        // Needs ports: exactly one without --cluster, at least one with it.
        assert!(parse("--scenario S5").is_err());
        assert!(parse("--scenario S5 --cluster").is_err());
        assert!(parse("--scenario S5 --ports 1,2,3").is_err());
        assert!(parse("--scenario S5 --ports 1,2").is_err());
        // --cluster only with S5.
        assert!(parse("--scenario S1 --ports 1 --cluster").is_err());
        assert!(parse("--scenario S2 --ports 1,2,3 --cluster").is_err());
        assert!(parse("--all --cluster").is_err());
        assert!(parse("--compare --cluster").is_err());
        // Lock only, one client, something to lock.
        assert!(parse("--scenario S5 --ports 1 --kind spin").is_err());
        assert!(parse("--scenario S5 --ports 1 --kind fair").is_err());
        assert!(parse("--scenario S5 --ports 1 --clients 2").is_err());
        assert!(parse("--scenario S5 --ports 1 --keys 0").is_err());
        assert!(parse("--scenario S5 --ports 1 --workers 0").is_err());
        assert!(parse("--scenario S5 --ports 1 --keys many").is_err());
        assert!(parse("--scenario S5 --ports 1 --cluster --lease watchdog").is_ok());
    }

    #[test]
    fn rejects_bad_input() {
        assert!(parse("--scenario S9 --ports 1").is_err());
        assert!(parse("--scenario S1").is_err());
        assert!(parse("--scenario S1 --ports 1,2").is_err());
        assert!(parse("--scenario S1 --ports 1 --bogus 3").is_err());
        assert!(parse("--all --ports 1").is_err());
        assert!(parse("--all --compare").is_err());
        assert!(parse("--compare --repeats 0").is_err());
        assert!(parse("--compare --kind spin").is_err());
        assert!(parse("--scenario S1 --ports 1 --quick").is_err());
    }

    #[test]
    fn tls_parses_as_a_suite() {
        assert!(matches!(
            parse("--tls"),
            Ok(Command::Suite(Suite {
                which: Which::Tls,
                quick: false,
                repeats: 5
            }))
        ));
        assert!(matches!(
            parse("--tls --quick --repeats=7"),
            Ok(Command::Suite(Suite {
                which: Which::Tls,
                quick: true,
                repeats: 7
            }))
        ));
        assert!(matches!(
            parse("--repeats 6 --tls"),
            Ok(Command::Suite(Suite {
                which: Which::Tls,
                repeats: 6,
                ..
            }))
        ));
        // A suite of its own, with only --repeats and --quick.
        assert!(parse("--tls --all").is_err());
        assert!(parse("--compare --tls").is_err());
        assert!(parse("--tls --cluster").is_err());
        assert!(parse("--tls --repeats 0").is_err());
        assert!(parse("--tls --repeats many").is_err());
        assert!(parse("--tls --ports 1").is_err());
        assert!(parse("--tls --scenario S1").is_err());
        assert!(parse("--tls --kind spin").is_err());
        assert_eq!(
            parse("--tls --kind spin").err().as_deref(),
            Some("--kind cannot be combined with --tls")
        );
        // Not an option of a single run.
        assert!(parse("--scenario S1 --ports 1 --tls=yes").is_err());
        // Single runs stay plain.
        let Ok(Command::One(o)) = parse("--scenario S1 --ports 1") else {
            panic!("S1 did not parse");
        };
        assert_eq!(o.transport, Transport::Plain);
        assert!(o.tls.is_none());
    }

    // `header` reads the runtime's worker count.
    #[tokio::test]
    async fn tls_interleaves_plain_and_tls_of_s1_then_s2() {
        let suite = Suite {
            which: Which::Tls,
            quick: false,
            repeats: 3,
        };
        let runs = suite_runs(suite);
        let names: Vec<String> = runs
            .iter()
            .map(|o| format!("{:?} {}", o.scenario, o.variant()))
            .collect();
        let s1 = ["S1 Lock", "S1 Lock (TLS)"];
        let s2 = ["S2 Lock", "S2 Lock (TLS)"];
        assert_eq!(names, [s1, s1, s1, s2, s2, s2].concat());
        // The same workload either way: S1's and S2's defaults, fixed lease.
        for pair in runs.chunks(2) {
            let (plain, tls) = (&pair[0], &pair[1]);
            assert_eq!(plain.transport, Transport::Plain);
            assert_eq!(tls.transport, Transport::Tls);
            assert_eq!(header(plain)["params"], header(tls)["params"]);
            assert_eq!(header(plain)["settings"], header(tls)["settings"]);
            assert_eq!((plain.kind, plain.lease), (Kind::Lock, Lease::Fixed));
            assert_eq!((tls.kind, tls.lease), (Kind::Lock, Lease::Fixed));
            assert!(plain.tls.is_none() && tls.tls.is_none(), "set at start");
        }
        assert_eq!(runs[0].iterations, 3000);
        assert_eq!(runs[6].duration, Duration::from_secs(5));
        assert_eq!(header(&runs[0])["transport"], "plain");
        assert_eq!(header(&runs[1])["transport"], "tls");
        assert_eq!(header(&runs[1])["variant"], "Lock (TLS)");
        // --quick: the suites' small workloads; no S3, S4, S5 or S6.
        let quick = suite_runs(Suite {
            quick: true,
            repeats: 1,
            ..suite
        });
        assert_eq!(quick.len(), 4);
        assert_eq!(quick[1].iterations, 500);
        assert_eq!(quick[3].duration, Duration::from_secs(2));
        assert!(s4_runs(suite).is_empty());
        assert!(s5_runs(suite).is_empty());
    }
}
