//! What every handle, guard and background task of one client shares
//! (`ClientInner`, behind the public `Client`): its link to Redis, its
//! settings, the hub of its names, its background tasks and their count
//! (what a shutdown waits for). The engine runs on it; `crate::client`
//! makes it (connect, shutdown).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::engine::hub::Hub;
use crate::error::{Error, Result};
use crate::owner::Owner;
use crate::redis::connect::{CredentialSource, ReconnectPolicy};
use crate::redis::link::{quit_if_up, stop_routers, FredLink};

/// Settings of a [`Client`]; made by [`ClientBuilder`].
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) watchdog_timeout: Duration,
    pub(crate) command_timeout: Duration,
    /// Bound on connecting (both connections, made at once).
    pub(crate) connect_timeout: Duration,
    /// `WAIT` for this many replicas (within the timeout) after each
    /// acquisition of a `Lock`; too few acknowledgements undo it.
    pub(crate) replica_sync: Option<(u32, Duration)>,
    /// TTL of fencing counters (refreshed at every issue).
    pub(crate) fence_ttl: Duration,
    /// Metrics carry the lock name as a label.
    pub(crate) metrics_lock_names: bool,
    /// The restart guard's bound (see [`ClientBuilder::restart_guard`]).
    pub(crate) restart_guard: Option<Duration>,
    /// Where the credentials come from (see [`ClientBuilder::credentials`]).
    pub(crate) credentials: CredentialSource,
    /// See [`ClientBuilder::reconnect_policy`].
    pub(crate) reconnect: ReconnectPolicy,
    /// See [`ClientBuilder::acquire_retry`].
    pub(crate) acquire_retry: crate::retry::AcquireRetry,
    /// See [`ClientBuilder::tls_ca_pem`] and the other `tls_*` settings.
    #[cfg(feature = "tls")]
    pub(crate) tls: crate::redis::connect::TlsSettings,
}

impl Settings {
    /// [`Settings::fence_ttl`] in milliseconds, for the scripts (validated
    /// to fit at connect).
    pub(crate) fn fence_ttl_ms(&self) -> i64 {
        i64::try_from(self.fence_ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// Checks every setting.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.fence_ttl < Duration::from_secs(1) {
            return Err(Error::InvalidArgument(format!(
                "fence_ttl must be at least 1 s, got {:?}",
                self.fence_ttl
            )));
        }
        crate::redis::script::checked_ms("fence_ttl", self.fence_ttl)?;
        if self.watchdog_timeout < Duration::from_millis(30) {
            return Err(Error::InvalidArgument(format!(
                "watchdog_timeout must be at least 30 ms, got {:?}",
                self.watchdog_timeout
            )));
        }
        crate::redis::script::checked_ms("watchdog_timeout", self.watchdog_timeout)?;
        if let Some((replicas, timeout)) = self.replica_sync {
            if replicas == 0 || timeout.is_zero() || timeout >= self.command_timeout {
                return Err(Error::InvalidArgument(format!(
                    "replica_sync needs at least one replica and a timeout between 0 and the command timeout ({:?}), got {replicas} and {timeout:?}",
                    self.command_timeout
                )));
            }
        }
        // Deadlines are `now + timeout`: past a year the clock may overflow.
        crate::redis::script::checked_ms("command_timeout", self.command_timeout)?;
        crate::redis::script::checked_ms("connect_timeout", self.connect_timeout)?;
        if let Some(max_lease) = self.restart_guard {
            crate::redis::script::checked_ms("restart_guard's max_lease", max_lease)?;
            crate::redis::restart::RestartGuard::new(max_lease)
                .check_lease("watchdog_timeout", self.watchdog_timeout)?;
        }
        self.reconnect.validate()?;
        self.acquire_retry.validate()?;
        #[cfg(feature = "tls")]
        self.tls.validate()?;
        Ok(())
    }
}

/// The state every clone of a `Client` shares.
pub(crate) struct ClientInner {
    pub(crate) id: uuid::Uuid,
    pub(crate) id_str: String,
    /// What the engine and the primitives run their commands on.
    pub(crate) link: Arc<dyn crate::redis::link::Link>,
    /// fred's connections behind `link` (`None` on another link): what only
    /// they have (a cluster's slot map, the configured endpoints, quitting).
    pub(crate) fred: Option<Arc<FredLink>>,
    pub(crate) hub: Arc<Hub>,
    pub(crate) settings: Settings,
    pub(crate) closed: AtomicBool,
    /// Set once both connections were told to quit (by the shutdown or by
    /// the drop, whichever comes first: fred warns about a second quit).
    pub(crate) connections_closed: AtomicBool,
    /// Background releases and undos in flight (see [`BackgroundTask`]).
    pub(crate) background: AtomicUsize,
    /// Notified when the last background task ends.
    pub(crate) background_idle: Notify,
    /// Set when the watchdog task started (with the first renewed hold).
    pub(crate) watchdog_started: AtomicBool,
    pub(crate) tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
    /// The connection tasks of both connections: stopped once they were
    /// told to quit (see [`ClientInner::close_connections`]).
    pub(crate) routers: std::sync::Mutex<Vec<fred::types::ConnectHandle>>,
    /// See [`ClientBuilder::restart_guard`].
    pub(crate) restart_guard: Option<crate::redis::restart::RestartGuard>,
    /// The connection state users watch (see [`Client::connection_state`]).
    pub(crate) connection: Arc<crate::connection::ConnectionSignal>,
    /// The runtime the client was connected on, which runs its connection
    /// tasks (and is driven while they work).
    pub(crate) runtime: tokio::runtime::Id,
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        for t in crate::mutex::lock_unpoisoned(&self.tasks).drain(..) {
            t.abort();
        }
        if self.connections_closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let routers = self.take_routers();
        if let (Ok(rt), Some(fred)) = (tokio::runtime::Handle::try_current(), self.fred.clone()) {
            rt.spawn(async move {
                futures::join!(quit_if_up(&fred.subscriber), quit_if_up(&fred.redis));
                stop_routers(routers);
            });
        } else {
            stop_routers(routers);
        }
    }
}

/// A background release or undo of a client in flight: the client's
/// shutdown waits for it (for up to the command timeout) before it closes the
/// connections, so a guard dropped just before the shutdown is still
/// released, and the task's command is not cut off by the closing connection.
pub(crate) struct BackgroundTask(Arc<ClientInner>);

impl Drop for BackgroundTask {
    fn drop(&mut self) {
        if self.0.background.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.background_idle.notify_waiters();
        }
    }
}

impl ClientInner {
    /// See [`Client::server_uptime`].
    pub(crate) async fn server_uptime(&self) -> Result<Duration> {
        self.server_age().await.map(|(uptime, _)| uptime)
    }

    /// The server's uptime and its `LASTSAVE` (`rdb_last_save_time`, when
    /// `INFO` tells it), from one `INFO` of the default sections (one
    /// server answered both).
    pub(crate) async fn server_age(&self) -> Result<(Duration, Option<i64>)> {
        self.check_open()?;
        let info: String = self
            .link()
            .call(crate::redis::link::Command {
                name: "INFO",
                route: None,
                args: Vec::new(),
            })
            .await
            .map_err(Error::redis)?;
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let saved = field("rdb_last_save_time").and_then(|v| v.parse::<i64>().ok());
        field("uptime_in_seconds")
            .and_then(|v| v.parse::<u64>().ok())
            .map(|up| (Duration::from_secs(up), saved))
            .ok_or_else(|| {
                Error::redis(fred::error::Error::new(
                    fred::error::ErrorKind::Parse,
                    "INFO has no uptime_in_seconds",
                ))
            })
    }

    /// See `Client::endpoints`.
    pub(crate) fn endpoints(&self) -> Vec<String> {
        self.fred
            .as_ref()
            .map_or_else(Vec::new, |fred| fred.endpoints())
    }

    /// See `Client::connection_generation`.
    pub(crate) fn connection_generation(&self) -> u64 {
        self.link.connection_generation()
    }

    /// Keeps a background task of this client: aborted at shutdown or when
    /// the client is dropped (at once if that happened already).
    pub(crate) fn add_task(&self, task: JoinHandle<()>) {
        let mut tasks = crate::mutex::lock_unpoisoned(&self.tasks);
        if self.closed.load(Ordering::Acquire) {
            task.abort();
        } else {
            tasks.push(task);
        }
    }

    /// Registers a background release or undo, unless the client was shut
    /// down (`None`: the shutdown released what it could, leases end the
    /// rest). Keep the returned value in the task until it ends.
    pub(crate) fn start_background(self: &Arc<Self>) -> Option<BackgroundTask> {
        // Counted before the check (both SeqCst), so a shutdown that sets
        // `closed` and then reads the count either sees this task or this
        // task sees `closed`.
        self.background.fetch_add(1, Ordering::SeqCst);
        let task = BackgroundTask(self.clone());
        if self.closed.load(Ordering::SeqCst) {
            return None; // dropping `task` takes it off the count
        }
        Some(task)
    }

    /// Resolves once no background task is in flight, or at `deadline`.
    pub(crate) async fn background_finished(&self, deadline: tokio::time::Instant) {
        let idle = async {
            loop {
                let notified = self.background_idle.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.background.load(Ordering::SeqCst) == 0 {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout_at(deadline, idle).await.is_err() {
            tracing::debug!("background releases still running at shutdown; closing anyway");
        }
    }

    /// Tells both connections to quit, once, and stops them at `deadline`
    /// at the latest (a hung server never answers the quit). Both quits are
    /// sent at the first poll (a timeout polls its future before it looks
    /// at the clock), so a dropped shutdown future leaves no connection open.
    pub(crate) async fn close_connections(&self, deadline: tokio::time::Instant) {
        if self.connections_closed.swap(true, Ordering::AcqRel) {
            return;
        }
        // A client that fred is reconnecting is not told to quit: commands
        // sent meanwhile wait in fred's queue, and a quit makes fred warn of
        // each as it drops them. Stopping its connection task drops them
        // quietly (their callers gave up already: the releases above ended).
        let quits = async {
            if let Some(fred) = &self.fred {
                futures::join!(quit_if_up(&fred.subscriber), quit_if_up(&fred.redis));
            }
        };
        if tokio::time::timeout_at(deadline, quits).await.is_err() {
            tracing::debug!("the server did not answer the quit in time; closing anyway");
        }
        stop_routers(self.take_routers());
    }

    /// Whether fred's connection tasks all still run: not once the runtime
    /// they ran on shut down (a command sent then fails, and fred warns).
    pub(crate) fn routers_running(&self) -> bool {
        crate::mutex::lock_unpoisoned(&self.routers)
            .iter()
            .all(|r| !r.is_finished())
    }

    pub(crate) fn take_routers(&self) -> Vec<fred::types::ConnectHandle> {
        crate::mutex::lock_unpoisoned(&self.routers)
            .drain(..)
            .collect()
    }

    /// Owner id of the running code: `"<client uuid>:<owner tag>"` (see
    /// `Owner::current`).
    pub(crate) fn owner_id(&self) -> Arc<str> {
        Arc::from(format!("{}:{}", self.id_str, Owner::current().tag()))
    }

    /// An owner id for one acquisition of a non-reentrant handle: unique,
    /// so that acquisition re-enters nothing and nothing re-enters it.
    pub(crate) fn acquisition_owner_id(&self) -> Arc<str> {
        crate::owner::acquisition_owner_id(&self.id_str)
    }

    /// What the engine and the primitives run their commands on.
    /// Where and how this client waits for its replicas (see
    /// [`ClientBuilder::replica_sync`]).
    pub(crate) fn replicas(&self) -> crate::redis::replica::Replicas<'_> {
        crate::redis::replica::Replicas {
            link: self.link(),
            wanted: self.settings.replica_sync,
        }
    }

    pub(crate) fn link(&self) -> &dyn crate::redis::link::Link {
        &*self.link
    }

    /// `Err(Shutdown)` once a shutdown began: no new acquisition or query.
    pub(crate) fn check_open(&self) -> Result<()> {
        self.hub.check_open()
    }

    /// `Err(Shutdown)` once the connections are closed: releases fail at
    /// once instead of timing out.
    pub(crate) fn check_connected(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::Shutdown)
        } else {
            Ok(())
        }
    }

    /// Whether the connections were told to quit (the shutdown's end).
    pub(crate) fn connections_closed(&self) -> bool {
        self.connections_closed.load(Ordering::Acquire)
    }

    /// `Err(Shutdown)` once the connections were told to quit: what a
    /// shutdown waits for (a background release, an undo) may still send
    /// until then.
    pub(crate) fn check_still_connected(&self) -> Result<()> {
        if self.connections_closed() {
            Err(Error::Shutdown)
        } else {
            Ok(())
        }
    }

    /// `Err` (an IO error, retryable) while the connection is down and fred
    /// reconnects.
    pub(crate) fn check_reachable(&self) -> Result<()> {
        if self.link.is_connected() {
            Ok(())
        } else {
            Err(Error::redis(fred::error::Error::new(
                fred::error::ErrorKind::IO,
                "not connected to Redis; try again once it is back",
            )))
        }
    }

    /// Whether a handle on `name` (a `what`: "lock", "semaphore") may run a
    /// command: the client is open and the name is not empty.
    pub(crate) fn check_usable(&self, name: &str, what: &str) -> Result<()> {
        self.check_open()?;
        if name.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{what} name must not be empty"
            )));
        }
        Ok(())
    }
}
