//! `Redlock`: one lock name on N independent Redis masters, held while a
//! majority of them grants it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use futures::future::{join, join_all, select_all};
use futures::stream::{FuturesUnordered, StreamExt};
use redisync::__private::{self, RestartGuard};
use redisync::{Lock, LockGuard, LostSignal};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::error::{Error, MemberError, Result, Votes};
use crate::validity::{drift, kth_largest, quorum, validity, Jitter};

/// Default bound on one node's answer.
const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// Default clock drift factor (plus 2 ms).
const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
/// Default bound of the random pause between attempts.
const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(200);
/// `lock()` has no wait that could run out: it gives up after this many
/// attempts in a row failed for want of nodes (not because the lock is busy).
const LOCK_UNAVAILABLE_ATTEMPTS: u32 = 3;

/// Leases above this are refused before any I/O, as `redisync::Lock` does
/// (366 days).
pub(crate) const ABSURD_LEASE: Duration = Duration::from_secs(366 * 24 * 3600);

/// The shortest [`RedlockBuilder::retry_delay`]: the pause is uniform below
/// it (mean 10 ms here), so a waiter makes at most about 100 attempts a
/// second on each node however fast the nodes answer. Below it a waiter
/// spins: a zero delay retried at round-trip speed (about 1,500 commands a
/// second on a loaded machine, against about 30 with the default).
const MIN_RETRY_DELAY: Duration = Duration::from_millis(20);
/// The longest [`RedlockBuilder::retry_delay`]: a longer pause leaves a
/// released lock unclaimed that long and outlasts most waits
/// (`Duration::MAX` never retried at all).
const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);

// The restart guard of each node is `redisync::__private::RestartGuard`,
// the one a
// guarded `Client` uses: it counts a reading `u` of `uptime_in_seconds` as
// more than `u - 1 s` only (whole seconds of truncated wall-clock times).
// So with any `max_lease` above zero a restarted node counts only after
// more than 1 s: past every token floor it honoured before the restart (at
// most 1 s ahead of its clock, `next_token` in lua/lib/tokens.lua), so a counter
// lost with a snapshot does not take tokens back (tests/redlock/redlock.rs
// `a_node_restarted_from_a_recent_snapshot_never_takes_tokens_back`).

/// How a node did in its last attempt. A node whose attempt timed out or
/// failed may answer the next ones "busy" from its client's local queue,
/// without asking the node, while the undo of that attempt is still
/// running. So the next attempts on such a node read its uptime in the same
/// round trip: a refusal counts as one (and makes the node healthy again)
/// when the node itself answered in time; otherwise the node counts as its
/// last state said (a hung node stays timed out).
const HEALTHY: u8 = 0;
const TIMED_OUT: u8 = 1;
const FAILED: u8 = 2;

/// Builds a [`Redlock`] with non-default settings.
///
/// ```no_run
/// # async fn demo(locks: Vec<redisync::Lock>) -> redisync_redlock::Result<()> {
/// use std::time::Duration;
/// let redlock = redisync_redlock::Redlock::builder(locks)
///     .max_lease(Duration::from_secs(60))
///     .node_timeout(Duration::from_millis(50))
///     .drift_factor(0.01)
///     .retry_delay(Duration::from_millis(200))
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use]
pub struct RedlockBuilder {
    locks: Vec<Lock>,
    max_lease: Option<Duration>,
    node_timeout: Duration,
    drift_factor: f64,
    retry_delay: Duration,
}

impl RedlockBuilder {
    /// The restart guard: a node whose uptime (`INFO server`, whole
    /// seconds) is below `max_lease` does not count toward the majority,
    /// because it may have restarted without persistence and forgotten a
    /// grant that is still valid elsewhere. Leases longer than `max_lease`
    /// are refused. A freshly started set of nodes therefore grants nothing
    /// for one `max_lease`.
    ///
    /// `Duration::ZERO` turns the rule off: only for nodes that keep their
    /// data across restarts (AOF with `appendfsync always`), or tests.
    ///
    /// Default: the longest watchdog timeout of the locks' clients (30 s
    /// unless configured), so watchdog-renewed locks are covered. At most a
    /// year (366 days, the longest lease a lock takes): [`build`] refuses
    /// more with [`Error::InvalidArgument`].
    ///
    /// [`build`]: RedlockBuilder::build
    pub fn max_lease(mut self, d: Duration) -> Self {
        self.max_lease = Some(d);
        self
    }

    /// Bound on each node's answer in an attempt (and on each node's part in
    /// an extension or release). Keep it far below the lease: a hung node
    /// costs at most this much per attempt.
    ///
    /// Default: 100 ms. Must not be zero, at most a year (366 days): [`build`]
    /// refuses either with [`Error::InvalidArgument`].
    ///
    /// [`build`]: RedlockBuilder::build
    pub fn node_timeout(mut self, d: Duration) -> Self {
        self.node_timeout = d;
        self
    }

    /// Clock drift allowed between this client and the nodes, as a share
    /// of the lease; 2 ms are added. Must be in `[0, 1)`.
    ///
    /// Default: 0.01.
    pub fn drift_factor(mut self, f: f64) -> Self {
        self.drift_factor = f;
        self
    }

    /// Bound of the random pause between two attempts (full jitter: uniform
    /// in `[0, retry_delay)`).
    ///
    /// Default: 200 ms. At least 20 ms (below it a waiter retries in a hot
    /// loop: a zero delay retries at round-trip speed) and at most 60 s (a
    /// longer pause leaves a released lock unclaimed that long; `Duration::MAX`
    /// never retries): [`build`] refuses either with
    /// [`Error::InvalidArgument`].
    ///
    /// [`build`]: RedlockBuilder::build
    pub fn retry_delay(mut self, d: Duration) -> Self {
        self.retry_delay = d;
        self
    }

    /// Checks the settings (no I/O).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when there are no locks, two locks share a
    /// client or a server (they would not be independent nodes), the node
    /// timeout is zero or over a year, the retry delay is outside
    /// `[20 ms, 60 s]`, `max_lease` is over a year, or the drift factor is
    /// outside `[0, 1)`. Two clients
    /// are on one server when their [`Client::endpoints`] share a
    /// `host:port`, whatever the database; one server reached under two
    /// spellings (`localhost` and `127.0.0.1`, a DNS alias) is not detected.
    ///
    /// [`Client::endpoints`]: redisync::Client::endpoints
    pub fn build(self) -> Result<Redlock> {
        check_independent(&self.locks)?;
        self.check_settings()?;
        let watchdogs = self.locks.iter().map(|l| l.client().watchdog_timeout());
        let watchdog_max = watchdogs.clone().max().unwrap_or_default();
        let watchdog_min = watchdogs.min().unwrap_or_default();
        let max_lease = self.max_lease.unwrap_or(watchdog_max);
        let nodes = nodes(self.locks, max_lease);
        Ok(Redlock {
            inner: Arc::new(Inner {
                name: nodes[0].lock.name().to_owned(),
                quorum: quorum(nodes.len()),
                nodes,
                max_lease,
                node_timeout: self.node_timeout,
                drift_factor: self.drift_factor,
                retry_delay: self.retry_delay,
                watchdog_min,
                watchdog_max,
                gate: Arc::new(Semaphore::new(1)),
                jitter: Jitter::new(),
                last_token: AtomicU64::new(0),
            }),
        })
    }

    /// Refuses a node timeout, retry delay, `max_lease` or drift factor
    /// outside its range (see [`RedlockBuilder::build`]).
    fn check_settings(&self) -> Result<()> {
        let invalid = |s: String| Err(Error::InvalidArgument(s));
        if self.node_timeout.is_zero() {
            return invalid("node_timeout must not be zero".into());
        }
        if self.node_timeout > ABSURD_LEASE {
            return invalid(format!(
                "node_timeout must be at most a year (366 days), got {:?}",
                self.node_timeout
            ));
        }
        if !(MIN_RETRY_DELAY..=MAX_RETRY_DELAY).contains(&self.retry_delay) {
            return invalid(format!(
                "retry_delay must be at least {MIN_RETRY_DELAY:?} (below it a waiter retries in a \
                 hot loop) and at most {MAX_RETRY_DELAY:?}, got {:?}",
                self.retry_delay
            ));
        }
        if self.max_lease.is_some_and(|m| m > ABSURD_LEASE) {
            return invalid(format!(
                "max_lease must be at most a year (366 days, the longest lease), got {:?}",
                self.max_lease.unwrap_or_default()
            ));
        }
        if !(self.drift_factor.is_finite() && (0.0..1.0).contains(&self.drift_factor)) {
            return invalid(format!(
                "drift_factor must be in [0, 1), got {}",
                self.drift_factor
            ));
        }
        Ok(())
    }
}

/// Refuses no lock at all, and two locks on one client or one server
/// (they would not be independent nodes; see [`RedlockBuilder::build`]).
fn check_independent(locks: &[Lock]) -> Result<()> {
    let invalid = |s: String| Err(Error::InvalidArgument(s));
    if locks.is_empty() {
        return invalid("a Redlock needs at least one lock (one per node)".into());
    }
    // Each node's server, whatever the database: `host:port` (or
    // `service@host:port` through sentinels) of `Client::endpoints`.
    let servers: Vec<Vec<String>> = locks
        .iter()
        .map(|l| {
            let endpoints = l.client().endpoints().into_iter();
            endpoints
                .map(|e| e.rsplit_once('/').map_or(e.clone(), |(s, _)| s.to_owned()))
                .collect()
        })
        .collect();
    for (i, a) in locks.iter().enumerate() {
        for (j, b) in locks.iter().enumerate().skip(i + 1) {
            if a.client().id() == b.client().id() {
                return invalid(format!(
                    "locks #{i} and #{j} share a client: a Redlock needs one lock per \
                         independent Redis node, each from its own Client"
                ));
            }
            if let Some(server) = servers[i].iter().find(|s| servers[j].contains(s)) {
                return invalid(format!(
                    "locks #{i} and #{j} are on the same server {server}: a Redlock needs \
                         one lock per independent Redis node"
                ));
            }
        }
    }
    Ok(())
}

/// The nodes of a Redlock over `locks`, each acquisition its own owner and,
/// unless `max_lease` is zero, under the node's restart guard.
fn nodes(locks: Vec<Lock>, max_lease: Duration) -> Vec<Node> {
    locks
        .into_iter()
        .map(|lock| {
            let restart = Arc::new(RestartGuard::new(max_lease));
            // Every acquisition its own owner: a Redlock never re-enters
            // a hold of the same task (another `Redlock` value over these
            // locks, or a plain `Lock` held on a node).
            // reintroduce: redlock-reentrant-across-values
            let mut lock = lock.non_reentrant();
            // reintroduce: redlock-node-guard-per-connection-only
            if !max_lease.is_zero() {
                // The node's scripts check its LASTSAVE: a restart
                // behind a proxy that keeps the connection is seen.
                lock = __private::with_restart_guard(&lock, restart.clone());
            }
            Node {
                lock,
                health: AtomicU8::new(HEALTHY),
                restart,
            }
        })
        .collect()
}

/// Redlock: the same lock on N independent Redis masters (not replicas, not
/// one cluster), held while a majority (N/2+1) of them grants it within its
/// validity time. It tolerates the failure of a minority of nodes.
///
/// Each node is a [`redisync::Lock`] from its own [`redisync::Client`], so
/// leases, watchdog renewal, owner checks and per-node fencing counters are
/// those of the core lock.
///
/// # Acquisition
///
/// 1. Try the lock on every node at once (one attempt each, no waiting),
///    each bounded by the node timeout, and read the uptime of every node
///    not yet seen old on its current connection in the same round trip (a
///    restart closes the connection, and the node's client counts its
///    connections;
///    behind a proxy that keeps it, the node's script sees the new
///    `LASTSAVE` and the uptime is read again).
/// 2. Acquired when at least N/2+1 nodes that have been up for at least
///    `max_lease` granted it **and** `lease - elapsed - drift > 0`, where
///    `elapsed` runs from the start of this attempt and `drift` is
///    `lease * drift_factor + 2 ms`.
/// 3. Otherwise release on every node won (nodes that did not answer in time
///    are undone by the core lock) and retry after a random pause (full
///    jitter below `retry_delay`) within the wait.
///
/// Tasks of one process sharing a `Redlock` (clones included) queue in
/// FIFO order and only the first of them contends for the nodes; across
/// processes it is not fair. It is not reentrant: a task that holds it and
/// asks again waits for itself, like `tokio::sync::Mutex`, through the same
/// `Redlock` or another one over the same locks. Each node's lock is taken
/// through its [`non_reentrant`](redisync::Lock::non_reentrant) handle, so
/// every acquisition is an owner of its own on every node: it re-enters
/// neither another Redlock guard of the task nor a plain [`Lock`] hold the
/// task has on a node (that node refuses it, as it refuses any contender).
///
/// # Restarted nodes
///
/// A node that restarts without persistence forgets its grants, so with it
/// a second client could win a majority while the first still holds the
/// lock. A node takes part only once it has been up for `max_lease` (the
/// "delayed restarts" of the Redis docs), checked on every attempt; see
/// [`RedlockBuilder::max_lease`].
///
/// # Fencing tokens
///
/// Each node keeps its own counter per lock name. The token of an
/// acquisition is the largest counter of the granting majority, written
/// back to the granting nodes that were behind before the guard is
/// returned, so a majority of nodes holds a counter at least that large.
/// Any later majority includes one of them, so tokens strictly increase
/// across acquisitions as long as that node kept its counter: persistence,
/// or never a majority of nodes losing their data at once (a node that lost
/// its counter resumes from its clock in microseconds, which in practice is
/// larger still). A token floor (below) may set a node's counter up to 1 s
/// ahead of its clock; a node restarted from an older snapshot then counts
/// again only after more than 1 s of uptime (the restart guard, whatever
/// `max_lease` above zero), when its clock is past every such floor.
///
/// # Examples
/// ```no_run
/// # async fn demo() -> redisync_redlock::Result<()> {
/// use redisync_redlock::Redlock;
/// let mut locks = Vec::new();
/// for url in ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"] {
///     locks.push(redisync::Client::connect(url).await?.lock("orders:42"));
/// }
/// let redlock = Redlock::new(locks)?;
/// let guard = redlock.lock().await?;
/// println!("token {}, valid for {:?}", guard.fencing_token(), guard.validity());
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Redlock {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    nodes: Vec<Node>,
    quorum: usize,
    max_lease: Duration,
    node_timeout: Duration,
    drift_factor: f64,
    retry_delay: Duration,
    /// Shortest watchdog lease of the nodes' clients (validity in watchdog mode).
    watchdog_min: Duration,
    /// Longest one (checked against `max_lease`).
    watchdog_max: Duration,
    /// FIFO among the tasks of this process: one contender at a time.
    gate: Arc<Semaphore>,
    jitter: Jitter,
    /// The largest fencing token this Redlock handed out (see
    /// [`Redlock::token_floor`]).
    last_token: AtomicU64,
}

/// How far ahead of this machine's clock the token floor of an attempt is
/// set, so that it is also ahead of the nodes' clocks (see
/// [`Redlock::token_floor`]).
const TOKEN_FLOOR_LEAD: Duration = Duration::from_millis(10);

struct Node {
    lock: Lock,
    health: AtomicU8,
    /// Whether the node was seen up for at least `max_lease` on its
    /// client's current connection: a restart closes the connection, so
    /// while it lasts the node has not restarted since and its grants count
    /// without reading its uptime. Shared with `lock`, whose scripts check
    /// the node's `LASTSAVE` for a restart behind a proxy that kept the
    /// connection (the node then answers busy while young).
    restart: Arc<RestartGuard>,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let i = &self.inner;
        f.debug_struct("Redlock")
            .field("name", &i.name)
            .field("nodes", &i.nodes.len())
            .field("quorum", &i.quorum)
            .field("max_lease", &i.max_lease)
            .field("node_timeout", &i.node_timeout)
            .finish_non_exhaustive()
    }
}

/// One node's answer to one attempt.
enum Vote {
    Granted(LockGuard),
    /// The node has been up for less than `max_lease`: its grant (if its
    /// script did not refuse already) does not count and is given back.
    Restarted(Option<LockGuard>),
    /// Somebody else holds it. `answered`: the node itself answered in
    /// time (always assumed for a healthy node).
    Refused {
        answered: bool,
    },
    TimedOut,
    /// The node failed; a grant whose uptime could not be read is given back.
    Failed(redisync::Error, Option<LockGuard>),
}

/// Everything one attempt learned.
struct Round {
    votes: Votes,
    granted: Vec<(usize, LockGuard)>,
    /// Grants that do not count (node too young, uptime unknown).
    extra: Vec<LockGuard>,
    errors: Vec<MemberError>,
}

impl Redlock {
    /// A `Redlock` over `locks`, one per independent Redis node, each from
    /// its own [`redisync::Client`], with default settings (no I/O).
    ///
    /// # Errors
    /// As [`RedlockBuilder::build`].
    pub fn new(locks: Vec<Lock>) -> Result<Redlock> {
        Redlock::builder(locks).build()
    }

    /// A builder for non-default settings.
    pub fn builder(locks: Vec<Lock>) -> RedlockBuilder {
        RedlockBuilder {
            locks,
            max_lease: None,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            drift_factor: DEFAULT_DRIFT_FACTOR,
            retry_delay: DEFAULT_RETRY_DELAY,
        }
    }

    /// The name of the first node's lock (used in errors).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Nodes that must grant: N/2+1.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// The restart guard in force (see [`RedlockBuilder::max_lease`]).
    pub fn max_lease(&self) -> Duration {
        self.inner.max_lease
    }

    /// Waits until a majority grants the lock; each node's lease is renewed
    /// by its client's watchdog until the guard is released.
    ///
    /// Waiting while others hold it has no bound. When attempts fail for want
    /// of nodes rather than because the lock is busy, it gives up after
    /// three such attempts in a row.
    ///
    /// # Errors
    /// [`Error::QuorumNotReached`] when three attempts in a row could not
    /// reach a majority because nodes timed out, failed, or restarted less
    /// than `max_lease` ago (the error says how each node answered);
    /// [`Error::InvalidArgument`] when a client's watchdog timeout exceeds
    /// `max_lease`.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future gives up its place in the local queue;
    /// nodes already won are released in the background and attempts in
    /// flight are undone by the core lock.
    pub async fn lock(&self) -> Result<RedlockGuard> {
        self.acquire(None, None)
            .await?
            .ok_or_else(|| Error::InvalidArgument("a Redlock wait ended without a deadline".into()))
    }

    /// Tries to win a majority within `wait` (zero: one attempt, one
    /// parallel round trip). `lease: None` means each node's lease is
    /// renewed by its client's watchdog; `Some(lease)` is a fixed lease.
    /// `Ok(None)` when the wait ran out while others held the lock.
    ///
    /// # Errors
    /// [`Error::QuorumNotReached`] when the wait ran out and the last attempt
    /// failed for want of nodes (timed out, failed, restarted recently) rather
    /// than because the lock is busy; [`Error::InvalidArgument`] (before any
    /// I/O) for a zero lease, one over a year, one not longer than its
    /// clock drift allowance (`lease × drift_factor + 2 ms`: never valid),
    /// or one above `max_lease`. A `wait` too long for the clock
    /// (`Duration::MAX`) waits as long as [`Redlock::lock`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Redlock::lock`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(redlock: redisync_redlock::Redlock) -> redisync_redlock::Result<()> {
    /// use std::time::Duration;
    /// let lease = Duration::from_secs(10);
    /// if let Some(guard) = redlock.try_lock(Duration::from_secs(1), Some(lease)).await? {
    ///     assert!(guard.validity() < lease);
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<RedlockGuard>> {
        self.acquire(Instant::now().checked_add(wait), lease).await
    }

    #[tracing::instrument(level = "debug", name = "redisync.redlock.acquire", skip_all, fields(lock.key = %self.inner.name, lock.kind = "redlock"))]
    async fn acquire(
        &self,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<RedlockGuard>> {
        let inner = &self.inner;
        let lease_len = inner.check_lease(lease)?;
        let drift = drift(lease_len, inner.drift_factor);
        let gate = inner.gate.clone().acquire_owned();
        let permit = match deadline {
            None => gate.await.ok(),
            Some(d) => tokio::time::timeout_at(d, gate)
                .await
                .ok()
                .and_then(Result::ok),
        };
        let Some(permit) = permit else {
            return Ok(None);
        };
        let mut unavailable = 0u32;
        let mut attempt = 0u32;
        loop {
            attempt = attempt.saturating_add(1);
            let t1 = Instant::now();
            let mut round = inner.fan_out(lease).await;
            let elapsed = t1.elapsed();
            give_back(std::mem::take(&mut round.extra)).await;
            if round.votes.granted >= inner.quorum {
                let won = inner.fenced_in_time(&mut round, t1, elapsed, lease_len, drift);
                if let Some(token) = won.await {
                    let loss =
                        inner.loss(t1 + lease_len.saturating_sub(drift), drift, lease, token);
                    return Ok(Some(RedlockGuard {
                        inner: inner.clone(),
                        loss,
                        nodes: round.granted,
                        token,
                        permit: Some(permit),
                    }));
                }
            }
            // Release every node won before anyone retries.
            give_back(round.granted.drain(..).map(|(_, g)| g).collect()).await;
            let busy = round.votes.is_busy();
            tracing::debug!(attempt, votes = %round.votes, "redlock attempt failed");
            unavailable = if busy { 0 } else { unavailable + 1 };
            if inner.pause_before_retry(deadline, unavailable).await {
                return if busy {
                    Ok(None)
                } else {
                    Err(Error::QuorumNotReached {
                        name: inner.name.clone(),
                        votes: round.votes,
                        errors: round.errors,
                    })
                };
            }
        }
    }
}

impl Inner {
    /// The fencing token of a round that won a quorum, begun at `t1` and
    /// taking `elapsed`, when it was won and fenced within `lease_len` less
    /// `drift`; a round too slow is marked expired.
    async fn fenced_in_time(
        &self,
        round: &mut Round,
        t1: Instant,
        elapsed: Duration,
        lease_len: Duration,
        drift: Duration,
    ) -> Option<u64> {
        if validity(lease_len, elapsed, drift).is_none() {
            round.votes.expired = true;
            return None;
        }
        let token = self.fence(round).await?;
        // The write-back took time too: check again.
        if validity(lease_len, t1.elapsed(), drift).is_some() {
            return Some(token);
        }
        round.votes.expired = true;
        None
    }

    /// The loss state of a new guard valid until `valid_until`.
    fn loss(
        &self,
        valid_until: Instant,
        drift: Duration,
        lease: Option<Duration>,
        token: u64,
    ) -> Arc<Loss> {
        Arc::new(Loss {
            valid_until: Mutex::new(valid_until),
            lost: AtomicBool::new(false),
            released: AtomicBool::new(false),
            notify: Notify::new(),
            members: OnceLock::new(),
            quorum: self.quorum,
            drift,
            fixed: lease.is_some(),
            name: self.name.clone(),
            token,
        })
    }

    /// Sleeps the (jittered) retry delay, until `deadline` at the latest:
    /// `true` when no retry follows (the deadline came, or, without one,
    /// the nodes were unavailable `unavailable` rounds in a row, the
    /// limit).
    async fn pause_before_retry(&self, deadline: Option<Instant>, unavailable: u32) -> bool {
        match deadline {
            Some(d) => {
                let wake = Instant::now() + self.jitter.below(self.retry_delay);
                tokio::time::sleep_until(wake.min(d)).await;
                wake >= d
            }
            None if unavailable >= LOCK_UNAVAILABLE_ATTEMPTS => true,
            None => {
                tokio::time::sleep(self.jitter.below(self.retry_delay)).await;
                false
            }
        }
    }

    /// The lease every node gets (fixed, or the watchdog's), checked
    /// against the restart guard.
    fn check_lease(&self, lease: Option<Duration>) -> Result<Duration> {
        let guarded = !self.max_lease.is_zero();
        match lease {
            Some(l) if l.is_zero() => Err(Error::InvalidArgument("lease must not be zero".into())),
            // The core lock's own bound: past it every node would refuse the
            // lease, which would read as a lost quorum (and, for an
            // extension, mark the guard lost).
            Some(l) if l > ABSURD_LEASE => Err(Error::InvalidArgument(format!(
                "lease of {l:?} is longer than a year (366 days); is the unit right?"
            ))),
            // Never valid: `lease - elapsed - drift` is never above zero.
            Some(l) if l <= drift(l, self.drift_factor) => Err(Error::InvalidArgument(format!(
                "lease of {l:?} is not longer than its clock drift allowance of {:?} (lease × \
                 drift_factor + 2 ms): it would never be valid",
                drift(l, self.drift_factor)
            ))),
            Some(l) if guarded && l > self.max_lease => Err(Error::InvalidArgument(format!(
                "lease {l:?} is longer than max_lease {:?}: a node restarted within that lease \
                 could grant the lock twice; raise RedlockBuilder::max_lease",
                self.max_lease
            ))),
            Some(l) => Ok(l),
            None if guarded && self.watchdog_max > self.max_lease => {
                Err(Error::InvalidArgument(format!(
                    "a client's watchdog timeout {:?} is longer than max_lease {:?}; raise \
                     RedlockBuilder::max_lease",
                    self.watchdog_max, self.max_lease
                )))
            }
            None => Ok(self.watchdog_min),
        }
    }

    /// The lower bound every node of one attempt gets for its token: this
    /// machine's clock in microseconds plus [`TOKEN_FLOOR_LEAD`], and above
    /// every token this Redlock handed out. Nodes whose clocks and counters
    /// are below it all issue exactly this token, so the majority agrees and
    /// no write-back round trip is needed; where they do not agree, the
    /// largest is written back as before.
    fn token_floor(&self) -> u64 {
        let lead = u64::try_from(TOKEN_FLOOR_LEAD.as_micros()).unwrap_or(u64::MAX);
        let now_us = crate::validity::wall_clock_us().saturating_add(lead);
        now_us.max(self.last_token.load(Ordering::Acquire).saturating_add(1))
    }

    /// One attempt on every node at once.
    async fn fan_out(&self, lease: Option<Duration>) -> Round {
        let floor = self.token_floor();
        let votes = join_all(self.nodes.iter().map(|n| self.vote(n, lease, floor))).await;
        let mut round = Round {
            votes: Votes::new(self.nodes.len(), self.quorum),
            granted: Vec::with_capacity(self.nodes.len()),
            extra: Vec::new(),
            errors: Vec::new(),
        };
        for (i, (node, vote)) in self.nodes.iter().zip(votes).enumerate() {
            let v = &mut round.votes;
            match vote {
                Vote::Granted(g) => {
                    node.health.store(HEALTHY, Ordering::Relaxed);
                    v.granted += 1;
                    round.granted.push((i, g));
                }
                Vote::Restarted(g) => {
                    node.health.store(HEALTHY, Ordering::Relaxed);
                    v.restarted += 1;
                    round.extra.extend(g);
                }
                Vote::Refused { answered: true } => {
                    node.health.store(HEALTHY, Ordering::Relaxed);
                    v.refused += 1;
                }
                Vote::Refused { answered: false } => match node.health.load(Ordering::Relaxed) {
                    TIMED_OUT => v.timed_out += 1,
                    FAILED => v.failed += 1,
                    _ => v.refused += 1,
                },
                Vote::TimedOut => {
                    node.health.store(TIMED_OUT, Ordering::Relaxed);
                    v.timed_out += 1;
                }
                Vote::Failed(e, g) => {
                    node.health.store(FAILED, Ordering::Relaxed);
                    v.failed += 1;
                    round.errors.push(MemberError::new(i, &node.lock, e));
                    round.extra.extend(g);
                }
            }
        }
        round
    }

    /// One node's attempt: the acquire script, and the node's uptime in the
    /// same round trip when the node is not healthy (see [`HEALTHY`]) or the
    /// restart guard is on and the node was not yet seen old on its current
    /// connection (a grant that came over a newer one has its uptime read
    /// after it), bounded by the node timeout. Cancel safe:
    /// the core lock undoes an acquisition whose future is dropped, and a
    /// guard dropped here is released.
    async fn vote(&self, node: &Node, lease: Option<Duration>, floor: u64) -> Vote {
        let acquire = __private::try_lock_with_min_token(&node.lock, Duration::ZERO, lease, floor);
        let guarded = !self.max_lease.is_zero();
        let healthy = node.health.load(Ordering::Relaxed) == HEALTHY;
        let client = node.lock.client();
        let generation = __private::connection_generation(client);
        let proven_old = node.restart.is_proven_old_on(generation);
        if healthy && (!guarded || proven_old) {
            let vote = match tokio::time::timeout(self.node_timeout, acquire).await {
                Err(_) => Vote::TimedOut,
                Ok(Ok(Some(g))) => Vote::Granted(g),
                Ok(Ok(None)) => Vote::Refused { answered: true },
                Ok(Err(e)) => Vote::Failed(e, None),
            };
            return match vote {
                // Reconnected meanwhile: the grant may come from a restarted
                // node; its uptime decides (read now, after the grant).
                Vote::Granted(g)
                    if guarded && __private::connection_generation(client) != generation =>
                {
                    // Boxed, here and below: rare, and inline it made every
                    // attempt's vote futures kilobytes large (fred's INFO
                    // state), moved and set up on each attempt.
                    Box::pin(self.judge_after_reconnect(node, g)).await
                }
                vote => vote,
            };
        }
        let uptime = __private::server_uptime(client);
        match Box::pin(tokio::time::timeout(
            self.node_timeout,
            join(acquire, uptime),
        ))
        .await
        {
            Err(_) => Vote::TimedOut,
            // Refused by a young node's script (a restart behind a proxy
            // that kept the connection), as its uptime says.
            Ok((Ok(None), Ok(up)))
                if guarded
                    && node
                        .restart
                        .judge(generation, __private::connection_generation(client), up)
                        .is_some() =>
            {
                Vote::Restarted(None)
            }
            Ok((Ok(None), up)) => Vote::Refused {
                answered: healthy || up.is_ok(),
            },
            Ok((Err(e), _)) => Vote::Failed(e, None),
            // The uptime was read only to learn that the node answers.
            Ok((Ok(Some(g)), _)) if !guarded => Vote::Granted(g),
            // Both replies came over one connection: its uptime judges the
            // grant (and is remembered for that connection generation).
            Ok((Ok(Some(g)), up)) if __private::connection_generation(client) == generation => {
                self.judge_grant(node, g, generation, up)
            }
            // Reconnected between the two: the uptime may be another server
            // instance's than the grant's.
            Ok((Ok(Some(g)), _)) => Box::pin(self.judge_after_reconnect(node, g)).await,
        }
    }

    /// A grant that came over a newer connection than the node was judged
    /// on: the node may have restarted; its uptime, read now (after the
    /// grant), decides.
    async fn judge_after_reconnect(&self, node: &Node, g: LockGuard) -> Vote {
        node.restart.forget();
        let client = node.lock.client();
        let now_on = __private::connection_generation(client);
        match tokio::time::timeout(self.node_timeout, __private::server_uptime(client)).await {
            Ok(up) => self.judge_grant(node, g, now_on, up),
            Err(_) => Vote::TimedOut,
        }
    }

    /// A grant of a node whose uptime was read in the same attempt: it
    /// counts when the node has been up for at least `max_lease`.
    fn judge_grant(
        &self,
        node: &Node,
        g: LockGuard,
        generation: u64,
        up: redisync::Result<Duration>,
    ) -> Vote {
        match up {
            Ok(up)
                if node
                    .restart
                    .judge(
                        generation,
                        __private::connection_generation(node.lock.client()),
                        up,
                    )
                    .is_none() =>
            {
                Vote::Granted(g)
            }
            Ok(up) => {
                tracing::debug!(lock.key = %self.name, redis.node = ?node.lock.client(), ?up, "node restarted less than max_lease ago: its grant does not count");
                Vote::Restarted(Some(g))
            }
            Err(e) => Vote::Failed(e, Some(g)),
        }
    }

    /// Makes the round's token safe to hand out: the largest token of the
    /// granting nodes, written back to those behind until a majority of
    /// nodes has a counter at least that large. `None` when too few writes
    /// succeeded (the round's votes then say which nodes failed).
    async fn fence(&self, round: &mut Round) -> Option<u64> {
        let max = round.granted.iter().map(|(_, g)| g.fencing_token()).max()?;
        self.last_token.fetch_max(max, Ordering::AcqRel);
        let mut at_max = round
            .granted
            .iter()
            .filter(|(_, g)| g.fencing_token() == max)
            .count();
        if at_max >= self.quorum {
            return Some(max);
        }
        let behind = round
            .granted
            .iter()
            .filter(|(_, g)| g.fencing_token() < max)
            .map(|(i, g)| async move {
                let write = __private::advance_fencing_token(g.lock(), max);
                (*i, tokio::time::timeout(self.node_timeout, write).await)
            });
        for (i, result) in join_all(behind).await {
            let v = &mut round.votes;
            match result {
                Ok(Ok(counter)) if counter >= max => at_max += 1,
                Ok(Ok(_)) => {
                    v.granted -= 1;
                    v.failed += 1;
                }
                Ok(Err(e)) => {
                    v.granted -= 1;
                    v.failed += 1;
                    round
                        .errors
                        .push(MemberError::new(i, &self.nodes[i].lock, e));
                }
                Err(_) => {
                    v.granted -= 1;
                    v.timed_out += 1;
                }
            }
        }
        (at_max >= self.quorum).then_some(max)
    }
}

/// A [`Redlock`] held on a majority of its nodes. Release it with
/// [`unlock`](RedlockGuard::unlock).
///
/// Dropping the guard without `unlock` releases every node in a background
/// task on the current tokio runtime that only logs errors
/// (`unlock().await` returns them); outside a runtime the leases expire.
#[must_use = "if unused the lock is released immediately"]
#[clippy::has_significant_drop]
pub struct RedlockGuard {
    inner: Arc<Inner>,
    /// (node index, that node's guard) for every node that counted.
    nodes: Vec<(usize, LockGuard)>,
    token: u64,
    /// What the guard shares with its owned lost signals.
    loss: Arc<Loss>,
    /// The local queue's turn; handed on once the releases are sent.
    permit: Option<OwnedSemaphorePermit>,
}

/// A guard's loss state, shared with its owned [`LostSignal`]s: one
/// validity that the guard and its signals both read.
struct Loss {
    /// Fixed lease: start of the winning attempt (or of the last extension)
    /// + lease - drift.
    valid_until: Mutex<Instant>,
    lost: AtomicBool,
    /// Set when the guard is released or dropped: its signals fire.
    released: AtomicBool,
    /// Woken on a loss and on the release.
    notify: Notify,
    /// The lost signals of the nodes' guards, made with the guard's first
    /// own signal (most guards never have one: each signal costs a few
    /// allocations per node); until then the guard reads its nodes.
    members: OnceLock<Vec<LostSignal>>,
    quorum: usize,
    drift: Duration,
    /// A fixed lease (not renewed by watchdogs).
    fixed: bool,
    /// For the loss warning.
    name: String,
    token: u64,
}

impl Loss {
    fn valid_until(&self) -> Instant {
        *self
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The nodes' lost signals (none before the guard's first signal).
    fn members(&self) -> &[LostSignal] {
        self.members.get().map_or(&[], Vec::as_slice)
    }

    /// [`Loss::validity_of`] the member signals: the signals' view (they
    /// exist only once the members do).
    fn validity(&self) -> Duration {
        self.validity_of(self.members().iter().map(LostSignal::validity))
    }

    /// What is left by this client's clock, zero once over: lost, released,
    /// or fewer than a quorum of nodes with more than the drift left (a
    /// fixed lease also ends with the validity of its winning attempt), given
    /// what each node has left. The same number in both lease modes for the
    /// guard (from its nodes' guards) and its signals (from theirs): the
    /// signal fires when `validity()` ends, not a drift later.
    fn validity_of(&self, nodes: impl Iterator<Item = Duration>) -> Duration {
        if self.lost.load(Ordering::Acquire) || self.released.load(Ordering::Acquire) {
            return Duration::ZERO;
        }
        let mut left: Vec<Duration> = nodes.filter(|v| !v.is_zero()).collect();
        let by_nodes = kth_largest(&mut left, self.quorum)
            // reintroduce: redlock-validity-without-drift
            .map_or(Duration::ZERO, |edge| edge.saturating_sub(self.drift));
        let left = if self.fixed {
            by_nodes.min(self.valid_until().saturating_duration_since(Instant::now()))
        } else {
            by_nodes
        };
        // reintroduce: redlock-loss-not-for-good
        if left.is_zero() {
            // For good, whoever looked: a renewal that lands later must not
            // make a guard (or a signal that fired) hold again.
            self.mark_lost();
        }
        left
    }

    /// Marks the loss once, tells the waiters.
    fn mark_lost(&self) {
        if !self.lost.swap(true, Ordering::AcqRel) {
            if !self.released.load(Ordering::Acquire) {
                tracing::warn!(target: "redisync.lease.lost", lock_key = %self.name, token = self.token, "redlock lost: its validity ran out, an extension failed, or fewer than a majority of nodes still hold it");
            }
            self.notify.notify_waiters();
        }
    }

    fn release(&self) {
        if !self.released.swap(true, Ordering::AcqRel) {
            self.notify.notify_waiters();
        }
    }
}

/// Resolves once `loss` is over (see [`Loss::validity`]).
async fn majority_lost(loss: Arc<Loss>) {
    loop {
        let notified = loss.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        // The nodes to wait on first, then the verdict: a member lost after
        // this look is in `alive` and wakes us; one lost before counts
        // against the validity. (The other order could see two members go
        // in between and wait on the rest only.)
        let alive: Vec<LostSignal> = loss
            .members()
            .iter()
            .filter(|m| !m.is_lost())
            .cloned()
            .collect();
        let left = loss.validity();
        if left.is_zero() || alive.is_empty() {
            return;
        }
        let timer = async {
            match Instant::now().checked_add(left) {
                Some(end) => tokio::time::sleep_until(end).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            // Biased: any of them ends the wait; a fixed order keeps a
            // simulated run replayable.
            biased;
            () = &mut notified => {}
            _ = select_all(alive) => {}
            () = timer => {}
        }
    }
}

impl std::fmt::Debug for RedlockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockGuard")
            .field("name", &self.inner.name)
            .field(
                "nodes",
                &self.nodes.iter().map(|(i, _)| i).collect::<Vec<_>>(),
            )
            .field("token", &self.token)
            .field("watchdog", &!self.loss.fixed)
            .field("validity", &self.validity())
            .finish_non_exhaustive()
    }
}

impl RedlockGuard {
    /// The fencing token: strictly increasing across acquisitions of this
    /// lock by any client (see "Fencing tokens" on [`Redlock`] for the
    /// assumption). Pass it to the protected resource and have it reject
    /// writes with an older token.
    pub fn fencing_token(&self) -> u64 {
        self.token
    }

    /// Indices (in the `Vec` given to [`Redlock::new`]) of the nodes this
    /// guard holds.
    pub fn nodes(&self) -> Vec<usize> {
        self.nodes.iter().map(|(i, _)| *i).collect()
    }

    /// Time left before the lock may be held by someone else: `lease -
    /// elapsed - drift`, measured from the start of the attempt that won it
    /// (or of the last [`extend`](RedlockGuard::extend)). In watchdog mode,
    /// from the renewals of the nodes: the time until fewer than a majority
    /// of the nodes would still be within their lease, minus the drift.
    /// Zero once lost. [`lost_signal`](RedlockGuard::lost_signal) fires
    /// when it ends.
    pub fn validity(&self) -> Duration {
        self.loss
            .validity_of(self.nodes.iter().map(|(_, g)| g.validity()))
    }

    fn mark_lost(&self) {
        self.loss.mark_lost();
    }

    /// Whether the lock is known to be lost: its validity ran out, fewer
    /// than a majority of its nodes still hold it (each node's guard reports
    /// its own loss: lease ended, renewal found it gone or failed), or an
    /// extension failed.
    pub fn is_lost(&self) -> bool {
        self.validity().is_zero()
    }

    /// Resolves once the lock is known to be lost (see
    /// [`is_lost`](RedlockGuard::is_lost)): when its validity ends.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn lost(&self) {
        self.lost_signal().await;
    }

    /// An owned signal that fires once the lock is known to be lost (as
    /// [`is_lost`](RedlockGuard::is_lost): its validity ended, fewer than a
    /// majority of its nodes still hold it, an extension failed) or the
    /// guard is released or dropped. Unlike [`lost`](RedlockGuard::lost) it
    /// borrows nothing: move it into another task to stop work there when
    /// the lock goes. Ready at every poll once the validity is zero.
    pub fn lost_signal(&self) -> LostSignal {
        self.loss
            .members
            .get_or_init(|| self.nodes.iter().map(|(_, g)| g.lost_signal()).collect());
        let (waits, checks) = (self.loss.clone(), self.loss.clone());
        __private::lost_signal_with_validity(majority_lost(waits), move || checks.validity())
    }

    /// Sets every node's remaining lease to `lease`; succeeds when a
    /// majority of the nodes still held by this guard did so within the
    /// node timeout and `lease - elapsed - drift` is still positive. A failed
    /// extension marks the guard lost and deletes nothing (the nodes that
    /// did extend keep the lock until their lease ends or the guard is
    /// released). With a watchdog lease the watchdogs keep renewing.
    ///
    /// # Errors
    /// [`Error::QuorumNotReached`] when fewer than a majority extended (votes:
    /// `refused` counts nodes that no longer hold it; nodes the guard never
    /// held count as they answered the acquisition);
    /// `Error::Lock(`[`redisync::Error::NotHeld`]`)` when the guard was
    /// already lost; [`Error::InvalidArgument`] for a zero lease, one over a
    /// year, one not longer than its clock drift allowance, or one above
    /// `max_lease`: checked before any I/O, the guard is
    /// left as it was (not lost).
    ///
    /// # Cancel safety
    /// Cancel safe: each node's extension is one script, done or not done;
    /// a dropped future leaves the guard's local validity as it was.
    #[tracing::instrument(level = "debug", name = "redisync.redlock.extend", skip_all, fields(lock.key = %self.inner.name))]
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        let inner = &*self.inner;
        let lease = inner.check_lease(Some(lease))?;
        if self.is_lost() {
            return Err(Error::Lock(redisync::Error::NotHeld {
                name: inner.name.clone(),
            }));
        }
        let t1 = Instant::now();
        let extensions = self.nodes.iter().map(|(i, g)| async move {
            (
                *i,
                tokio::time::timeout(inner.node_timeout, g.extend(lease)).await,
            )
        });
        let mut votes = Votes::new(inner.nodes.len(), inner.quorum);
        // Nodes this guard does not hold count as their last attempt went.
        for (i, node) in inner.nodes.iter().enumerate() {
            if self.nodes.iter().any(|(j, _)| *j == i) {
                continue;
            }
            match node.health.load(Ordering::Relaxed) {
                TIMED_OUT => votes.timed_out += 1,
                FAILED => votes.failed += 1,
                _ => votes.refused += 1,
            }
        }
        let mut errors = Vec::new();
        for (i, result) in join_all(extensions).await {
            match result {
                Ok(Ok(())) => votes.granted += 1,
                Ok(Err(redisync::Error::NotHeld { .. })) => votes.refused += 1,
                Ok(Err(e)) => {
                    votes.failed += 1;
                    errors.push(MemberError::new(i, &inner.nodes[i].lock, e));
                }
                Err(_) => votes.timed_out += 1,
            }
        }
        let drift = drift(lease, inner.drift_factor);
        if votes.granted >= inner.quorum {
            if validity(lease, t1.elapsed(), drift).is_some() {
                *self
                    .loss
                    .valid_until
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = t1 + lease.saturating_sub(drift);
                return Ok(());
            }
            votes.expired = true;
        }
        self.mark_lost();
        Err(Error::QuorumNotReached {
            name: inner.name.clone(),
            votes,
            errors,
        })
    }

    /// Releases the lock on every node it holds, all at once.
    ///
    /// Succeeds when a majority of the nodes confirmed within the node
    /// timeout; releases still in flight then finish in the background, and
    /// nodes that failed free themselves when their lease ends.
    ///
    /// # Errors
    /// [`Error::Release`] when fewer than a majority of the nodes confirmed,
    /// listing every node that failed ([`redisync::Error::NotHeld`] where
    /// the lock had been lost) and how many were still in flight.
    ///
    /// # Cancel safety
    /// Cancel safe in effect: every release is sent on the first poll and the
    /// local queue moves on then; a dropped future leaves releases not yet
    /// confirmed to finish or to the lease expiry.
    pub async fn unlock(mut self) -> Result<()> {
        self.loss.release();
        let nodes = std::mem::take(&mut self.nodes);
        let permit = self.permit.take();
        release(self.inner.clone(), nodes, permit).await
    }
}

/// Sends the release of every guard now (each one's first poll queues it on
/// its node's connection and lets the node's next local contender in) and
/// leaves the replies to a background task. Dropping the guards instead
/// would release them from spawned tasks that may run after our next attempt.
pub(crate) async fn give_back(guards: Vec<LockGuard>) {
    if guards.is_empty() {
        return;
    }
    let mut in_flight: FuturesUnordered<_> = guards.into_iter().map(LockGuard::unlock).collect();
    while let std::task::Poll::Ready(Some(_)) = futures::poll!(in_flight.next()) {}
    if !in_flight.is_empty() {
        tokio::spawn(async move { while in_flight.next().await.is_some() {} });
    }
}

/// Releases `nodes` all at once. The local queue's `permit` is handed on
/// as soon as every release is on its way (the next local contender's
/// attempts then reach each node after the release).
#[tracing::instrument(level = "debug", name = "redisync.redlock.release", skip_all, fields(lock.key = %inner.name))]
async fn release(
    inner: Arc<Inner>,
    nodes: Vec<(usize, LockGuard)>,
    permit: Option<OwnedSemaphorePermit>,
) -> Result<()> {
    let mut in_flight: FuturesUnordered<_> = nodes
        .into_iter()
        .map(|(i, g)| async move { (i, g.unlock().await) })
        .collect();
    let mut results = Vec::with_capacity(in_flight.len());
    // Poll every release once (FuturesUnordered polls each new future on the
    // first call), then let the next local waiter go.
    while let std::task::Poll::Ready(Some(r)) = futures::poll!(in_flight.next()) {
        results.push(r);
    }
    drop(permit);
    // One timer for all the replies, not one per reply.
    let timer = tokio::time::sleep(inner.node_timeout);
    tokio::pin!(timer);
    let mut pending = 0;
    loop {
        tokio::select! {
            biased;
            r = in_flight.next() => match r {
                Some(r) => results.push(r),
                None => break,
            },
            () = &mut timer => {
                pending = in_flight.len();
                let name = inner.name.clone();
                tokio::spawn(async move {
                    while let Some((i, result)) = in_flight.next().await {
                        if let Err(e) = result {
                            tracing::warn!(target: "redisync.release.failed", lock_key = %name, node = i, error = %e, "late redlock release failed; the node's lease expires");
                        }
                    }
                });
                break;
            }
        }
    }
    let mut released = 0;
    let mut failures = Vec::new();
    for (i, result) in results {
        match result {
            Ok(()) => released += 1,
            Err(e) => failures.push(MemberError::new(i, &inner.nodes[i].lock, e)),
        }
    }
    if released >= inner.quorum {
        for f in &failures {
            tracing::warn!(target: "redisync.release.failed", lock_key = %inner.name, error = %f, "redlock release failed on a node; its lease expires");
        }
        return Ok(());
    }
    Err(Error::Release {
        released,
        required: inner.quorum,
        pending,
        failures,
    })
}

impl Drop for RedlockGuard {
    fn drop(&mut self) {
        self.loss.release();
        let nodes = std::mem::take(&mut self.nodes);
        let permit = self.permit.take();
        if nodes.is_empty() {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let inner = self.inner.clone();
            rt.spawn(async move {
                match release(inner.clone(), nodes, permit).await {
                    Ok(()) => {}
                    // Its leases had run out already: nothing left to release.
                    Err(Error::Release { failures, pending: 0, .. })
                        if failures
                            .iter()
                            .all(|f| matches!(f.error, redisync::Error::NotHeld { .. })) =>
                    {
                        tracing::debug!(lock_key = %inner.name, "redlock dropped after it was lost");
                    }
                    Err(e) => {
                        tracing::warn!(target: "redisync.release.failed", lock_key = %inner.name, error = %e, "redlock release on drop failed; the nodes' leases expire");
                    }
                }
            });
        } else {
            tracing::warn!(lock_key = %self.inner.name, "redlock guard dropped outside a tokio runtime; the nodes' leases expire");
            drop(nodes);
            drop(permit);
        }
    }
}

impl redisync::Guard for RedlockGuard {
    type Error = Error;

    fn fencing_token(&self) -> u64 {
        self.token
    }

    fn is_lost(&self) -> bool {
        RedlockGuard::is_lost(self)
    }

    fn lost_signal(&self) -> LostSignal {
        RedlockGuard::lost_signal(self)
    }

    fn validity(&self) -> Duration {
        RedlockGuard::validity(self)
    }

    fn extend(&self, lease: Duration) -> impl std::future::Future<Output = Result<()>> + Send {
        RedlockGuard::extend(self, lease)
    }

    fn release(self) -> impl std::future::Future<Output = Result<()>> + Send {
        self.unlock()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    fn loss(valid_for: Duration, members: Vec<LostSignal>) -> Arc<Loss> {
        Arc::new(Loss {
            valid_until: Mutex::new(Instant::now() + valid_for),
            lost: AtomicBool::new(false),
            released: AtomicBool::new(false),
            notify: Notify::new(),
            members: OnceLock::from(members),
            quorum: 2,
            drift: Duration::from_millis(2),
            fixed: false,
            name: "test".into(),
            token: 1,
        })
    }

    /// Whether the signal of a watchdog-leased guard over `members` (3
    /// nodes, quorum 2) fires within an hour of paused time.
    async fn fires(members: Vec<LostSignal>) -> bool {
        let hour = Duration::from_secs(3600);
        let signal = majority_lost(loss(hour, members));
        tokio::time::timeout(hour, signal).await.is_ok()
    }

    /// A node that stays held: its signal never fires.
    fn held() -> LostSignal {
        __private::lost_signal(std::future::pending(), || false)
    }

    /// A node lost right after its first look: the check says so from its
    /// second call on, and the signal has fired by the time it is polled.
    fn lost_after_first_look() -> LostSignal {
        let looks = AtomicUsize::new(0);
        __private::lost_signal(std::future::ready(()), move || {
            looks.fetch_add(1, Ordering::SeqCst) >= 1
        })
    }

    /// Two nodes of three lost while the signal looks at them (two watchdogs
    /// finding their nodes gone at once): the signal fires. It used to
    /// count the members for the quorum in one look and pick those to wait
    /// on in another, so it waited on the one node still held, for ever.
    #[tokio::test(start_paused = true)]
    async fn a_majority_lost_between_two_looks_fires_the_signal() {
        let members = vec![held(), lost_after_first_look(), lost_after_first_look()];
        assert!(fires(members).await, "the loss of a majority was missed");
    }

    /// Every attempt builds one vote future per node, and `join_all` moves
    /// each into place: a rare branch inlined in it (the uptime read after
    /// a reconnection, kilobytes of fred's command state) was copied, and
    /// the memory set up, on every attempt of every acquisition.
    #[tokio::test]
    async fn a_vote_future_stays_small() {
        let server = redisync_testkit::RedisServer::start().await;
        let client = redisync::Client::connect(&server.url()).await.unwrap();
        let redlock = Redlock::new(vec![client.lock("size")]).unwrap();
        let inner = &*redlock.inner;
        let size = std::mem::size_of_val(&inner.vote(&inner.nodes[0], None, 0));
        assert!(size <= 2048, "a vote future takes {size} bytes");
    }

    #[tokio::test(start_paused = true)]
    async fn a_majority_still_held_keeps_the_signal_quiet() {
        let members = vec![held(), held(), lost_after_first_look()];
        assert!(!fires(members).await, "fired with a majority held");
    }
}
