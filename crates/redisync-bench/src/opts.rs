//! The options of one scenario run: which scenario, lock kind, lease and
//! transport, and its parameters.

use crate::compare;
use std::time::Duration;

// On the command line by these names (`--scenario S1`), case-sensitive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Scenario {
    /// Uncontended: one task acquires and releases one key.
    #[value(name = "S1")]
    S1,
    /// Contended: workers loop on one key.
    #[value(name = "S2")]
    S2,
    /// Requests want one key at once, each for a long hold.
    #[value(name = "S3")]
    S3,
    /// Many keys, one node or a cluster.
    #[value(name = "S5")]
    S5,
    /// S2 spread over clients (`--clients N`): its rows carry the layout
    /// ("S6 16x1": 16 clients x 1 worker) as their label.
    #[value(name = "S6")]
    S6,
}

/// Which lease every acquisition asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Lease {
    /// `try_lock(wait, Some(ttl))`: the watchdog is not involved.
    Fixed,
    /// `try_lock(wait, None)`: the library's watchdog keeps the lease alive.
    Watchdog,
}

/// How S1 gives the lock back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Release {
    /// `unlock().await` (the default).
    Await,
    /// The guard is dropped: the library releases in the background and the
    /// next acquire starts at once (`Lock` only).
    Drop,
}

/// Which lock type every acquisition uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Kind {
    /// `redisync::Lock`.
    Lock,
    /// `redisync::FairLock`.
    Fair,
    /// `redisync::Semaphore` with one permit (watchdog-leased).
    Semaphore,
    /// The write side of `redisync::RwLock`.
    Write,
    /// The naive spin-lock baseline of `spin.rs` (SET NX PX, 50 ms sleep; fixed
    /// lease, one port).
    Spin,
    /// The peer rslock (`peers.rs`; fixed lease; three ports: its Redlock).
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
    pub(crate) fn is_redisync(self) -> bool {
        matches!(
            self,
            Kind::Lock | Kind::Fair | Kind::Semaphore | Kind::Write
        )
    }
}

/// How the client under test reaches the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// `redis://`: plain TCP (every run but `--tls`'s TLS rows).
    Plain,
    /// `rediss://`: TLS (rustls with ring) to the TLS port of a server
    /// started by the testkit, trusting its test CA (`Opts::tls`).
    Tls,
}

/// Where a TLS run connects: the server's TLS port and the CA to trust.
#[derive(Clone)]
pub(crate) struct TlsEndpoint {
    pub(crate) port: u16,
    pub(crate) ca_pem: String,
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
pub(crate) struct Opts {
    pub(crate) scenario: Scenario,
    pub(crate) ports: Vec<u16>,
    pub(crate) iterations: usize,
    pub(crate) duration: Duration,
    pub(crate) workers: usize,
    pub(crate) hold: Duration,
    pub(crate) requests: usize,
    pub(crate) wait: Duration,
    pub(crate) ttl: Duration,
    pub(crate) lease: Lease,
    /// redisync Clients the S2/S3 workers are spread over (round-robin).
    pub(crate) clients: usize,
    pub(crate) kind: Kind,
    /// S5: how many keys the workers pick from.
    pub(crate) keys: usize,
    /// S5: the ports are nodes of a Redis Cluster.
    pub(crate) cluster: bool,
    /// Shown as `"label"` (e.g. "S4.1"); none for plain runs (S6 makes
    /// its own from the layout, see `label_text`).
    pub(crate) label: Option<&'static str>,
    /// S1: how the lock is given back.
    pub(crate) release: Release,
    /// Plain TCP or TLS (`--tls` only; redisync's kinds only).
    pub(crate) transport: Transport,
    /// `Transport::Tls`: the endpoint, set when the server has started
    /// (`run_suite`); `ports` stay the plain ports (for `INFO`).
    pub(crate) tls: Option<TlsEndpoint>,
}

impl Opts {
    /// The default parameters of `scenario`.
    pub(crate) fn defaults(scenario: Scenario) -> Self {
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
    pub(crate) fn label_text(&self) -> Option<String> {
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
    pub(crate) fn redlock(&self) -> bool {
        self.ports.len() == 3 && self.scenario != Scenario::S5
    }

    /// The Redlock's restart guard: the lease in use (the clients' default
    /// watchdog timeout, 30 s, with watchdog leases).
    pub(crate) fn max_lease(&self) -> Duration {
        self.lease().unwrap_or(Duration::from_secs(30))
    }

    pub(crate) fn lease(&self) -> Option<Duration> {
        match self.lease {
            Lease::Fixed => Some(self.ttl),
            Lease::Watchdog => None,
        }
    }

    /// The row name in comparisons and in `BENCHMARKS.md`.
    pub(crate) fn variant(&self) -> String {
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
}
