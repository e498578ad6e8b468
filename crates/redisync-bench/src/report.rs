//! What a run reports: the fields of its JSON line (header, settings,
//! parameters, concurrency model), printing it, and the header of the
//! suites' tables.

use crate::opts::{Kind, Lease, Opts, Release, Scenario, Transport};
use crate::peers;
use serde_json::{json, Map, Value};
use std::process::ExitCode;
use std::time::Duration;

pub(crate) const ALGORITHM: &str =
    "redisync::Lock: reentrant owner hash + fencing counter, acquire and \
     release as EVALSHA Lua scripts; per-client FIFO gate (one Redis contender per client), \
     unlock messages over pub/sub";
pub(crate) const FAIR_ALGORITHM: &str =
    "redisync::FairLock: reentrant owner hash + fencing counter, \
     FIFO queue (list) of entries carrying a server-time queue deadline; every waiting task \
     queues in Redis, and a release hands the lock to the oldest live entry in the same script \
     and publishes its token, so only that waiter wakes, holding it (one subscription per \
     client); nobody overtakes a live queue";
pub(crate) const SEMAPHORE_ALGORITHM: &str =
    "redisync::Semaphore(1): permits hash + lease zset (server \
     time), acquire/release as EVALSHA Lua scripts, permits watchdog-leased; per-client FIFO \
     turn (one Redis contender per client), release messages over pub/sub";
pub(crate) const WRITE_ALGORITHM: &str =
    "redisync::RwLock, write side: hash + readers zset (server time), \
     acquire/release as EVALSHA Lua scripts; per-client FIFO turn (one Redis contender per \
     client); a busy client joins the lock's queue in Redis and a release hands the lock to the \
     oldest live entry (one writer, or the readers ahead of the first writer), telling it over \
     pub/sub";
pub(crate) const REDLOCK_ALGORITHM: &str =
    "redisync_redlock::Redlock over 3 independent servers (one \
     redisync::Lock per server, each from its own Client): acquire = the Lock's acquire script \
     on all 3 at once (try_lock with zero wait, 100 ms node timeout); restart guard: a node up \
     for less than max_lease does not count, its uptime (INFO server) read in the same round \
     trip until it is seen old, then once per connection, \
     majority 2, validity = lease - elapsed - (1% + 2 ms); fencing token = max of the \
     majority's tokens, written back to nodes behind (only when they differ: every node gets \
     the same token floor, the client clock + 10 ms, so they normally agree); release on all \
     3 at once; per-process FIFO gate (one contender per process)";
pub(crate) const REDLOCK_RETRY: &str =
    "try_lock(wait, lease): local waiters queue in the Redlock's FIFO \
     gate; the gate holder retries a failed attempt after a random pause (full jitter below \
     200 ms) until `wait` runs out (S1/S2: 10 s per call, the driver calls again after None)";
pub(crate) const SPIN_ALGORITHM: &str =
    "naive spin lock (baseline implemented in the bench): acquire = \
     SET key token NX PX ttl, release = EVALSHA compare-and-delete script (GET == token then \
     DEL); no watchdog, no fencing token, no queue, no wake-up";
pub(crate) const SPIN_RETRY: &str =
    "SET NX every 50 ms (tokio::time::sleep between failed tries) until \
     `wait` runs out, one last try at the deadline (S1/S2: 10 s per call, the driver calls \
     again after None; S3: what is left of wait-s)";
pub(crate) const RETRY: &str =
    "try_lock(wait, lease): local waiters queue in the client's FIFO gate, the \
     gate holder retries on an unlock message or after the holder's PTTL, until `wait` runs out \
     (S1/S2: 10 s per call, the driver calls again after None; S3: what is left of wait-s)";
impl Opts {
    pub(crate) fn ttl_ms(&self) -> Value {
        match self.lease {
            Lease::Fixed => json!(u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)),
            Lease::Watchdog => Value::Null,
        }
    }

    pub(crate) fn settings(&self) -> Value {
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
                    (with the helpers of lua/lib/ each is made of), through a plain fred client (default config)"})
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

    pub(crate) fn params(&self) -> Value {
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

    pub(crate) fn model(&self) -> String {
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

/// The fields every line starts with (`ok` stays false until the run is done).
pub(crate) fn header(o: &Opts) -> Map<String, Value> {
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

pub(crate) fn emit(out: &Map<String, Value>) -> bool {
    let ok = out.get("ok").and_then(Value::as_bool).unwrap_or(false);
    println!("{}", Value::Object(out.clone()));
    ok
}

/// A suite that cannot go on: says why (stderr and one JSON line), exit 1.
pub(crate) fn suite_failed(why: &str) -> ExitCode {
    eprintln!("error: {why}");
    let mut out = Map::new();
    out.insert("ok".into(), json!(false));
    out.insert("error".into(), json!(why));
    emit(&out);
    ExitCode::FAILURE
}

/// Today's date (UTC) as YYYY-MM-DD, from the system clock.
pub(crate) fn utc_date() -> String {
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
