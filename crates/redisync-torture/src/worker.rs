//! Worker tasks: every task takes one kind of lock again and again and
//! records each critical section.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redisync::{
    Client, FairLock, FairLockGuard, Lock, LockGuard, RwLockGuard, Semaphore, SemaphorePermit,
    WriteLock,
};
use redisync_redlock::{Redlock, RedlockGuard};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::history::{now_us, Kind, Section};
use crate::rng::Rng;

/// How long one acquisition waits before it counts as busy.
const WAIT: Duration = Duration::from_millis(1500);
/// How often a holder looks at its guard.
const LOOK_EVERY: Duration = Duration::from_millis(5);
/// Error messages kept per kind for the summary.
const ERROR_SAMPLES: usize = 4;

/// Client settings shared by every process of a run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Watchdog lease of every client (renewed every third of it).
    pub(crate) lease: Duration,
    /// Bound on each Redis command.
    pub(crate) command_timeout: Duration,
    /// Queue lease of the fair lock.
    pub(crate) queue_lease: Duration,
    /// Redlock node timeout.
    pub(crate) node_timeout: Duration,
    /// Sections (in percent) that end by dropping the guard (released in
    /// the background) instead of awaiting `unlock`.
    pub(crate) drop_percent: u64,
}

impl Settings {
    pub(crate) fn new(lease: Duration, drop_percent: u64) -> Settings {
        Settings {
            lease,
            command_timeout: (lease / 2).max(Duration::from_millis(100)),
            queue_lease: lease * 2,
            node_timeout: Duration::from_millis(100),
            drop_percent,
        }
    }
}

/// The servers one client set talks to: the main server and the three
/// Redlock nodes (directly or through fault proxies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Urls {
    pub(crate) main: String,
    pub(crate) nodes: Vec<String>,
}

/// One client for the main server and one per Redlock node.
#[derive(Debug)]
pub(crate) struct ClientSet {
    pub(crate) label: String,
    pub(crate) main: Client,
    pub(crate) nodes: Vec<Client>,
}

impl ClientSet {
    pub(crate) async fn connect(
        label: &str,
        urls: &Urls,
        settings: Settings,
    ) -> Result<ClientSet, String> {
        let connect = |url: String| async move {
            Client::builder(&url)
                .watchdog_timeout(settings.lease)
                .command_timeout(settings.command_timeout)
                .connect()
                .await
                .map_err(|e| format!("{label}: cannot connect to {url}: {e}"))
        };
        let main = connect(urls.main.clone()).await?;
        let mut nodes = Vec::with_capacity(urls.nodes.len());
        for url in &urls.nodes {
            nodes.push(connect(url.clone()).await?);
        }
        Ok(ClientSet {
            label: label.to_owned(),
            main,
            nodes,
        })
    }

    pub(crate) async fn shutdown(&self) {
        let _ = self.main.shutdown().await;
        for n in &self.nodes {
            let _ = n.shutdown().await;
        }
    }
}

/// The lock name of a kind (one lock per kind, so every task of the kind
/// contends).
pub(crate) fn lock_name(kind: Kind) -> String {
    format!("torture:{}", kind.name())
}

/// A lock of some kind.
pub(crate) enum Target {
    Lock(Lock),
    Fair(FairLock),
    RwWrite(WriteLock),
    Semaphore(Semaphore),
    Redlock(Redlock),
}

/// A held lock of some kind.
enum Held {
    Lock(LockGuard),
    Fair(FairLockGuard),
    RwWrite(RwLockGuard),
    Semaphore(SemaphorePermit),
    Redlock(RedlockGuard),
}

impl Target {
    pub(crate) fn new(kind: Kind, set: &ClientSet, settings: Settings) -> Result<Target, String> {
        let name = lock_name(kind);
        Ok(match kind {
            Kind::Lock => Target::Lock(set.main.lock(&name)),
            Kind::FairLock => Target::Fair(
                set.main
                    .fair_lock(&name)
                    .with_queue_lease(settings.queue_lease),
            ),
            Kind::RwWrite => Target::RwWrite(set.main.rw_lock(&name).write()),
            Kind::Semaphore => Target::Semaphore(set.main.semaphore(&name)),
            Kind::Redlock => Target::Redlock(
                Redlock::builder(set.nodes.iter().map(|c| c.lock(&name)).collect())
                    .max_lease(settings.lease)
                    .node_timeout(settings.node_timeout)
                    .build()
                    .map_err(|e| e.to_string())?,
            ),
        })
    }

    /// One acquisition: `Ok(None)` when busy for the whole wait. A fixed
    /// `lease` does not apply to the semaphore (its permits are always
    /// watchdog-renewed).
    async fn acquire(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<Held>, String> {
        let text = |e: &dyn std::fmt::Display| e.to_string();
        match self {
            Target::Lock(l) => l
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Held::Lock))
                .map_err(|e| text(&e)),
            Target::Fair(l) => l
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Held::Fair))
                .map_err(|e| text(&e)),
            Target::RwWrite(l) => l
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Held::RwWrite))
                .map_err(|e| text(&e)),
            Target::Semaphore(s) => match s.try_acquire(1, wait).await {
                Ok(p) => Ok(p.map(Held::Semaphore)),
                Err(e @ redisync::Error::NotInitialized { .. }) => {
                    // First use, or the server restarted empty.
                    let _ = s.try_set_permits(1).await;
                    Err(text(&e))
                }
                Err(e) => Err(text(&e)),
            },
            Target::Redlock(r) => r
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Held::Redlock))
                .map_err(|e| text(&e)),
        }
    }
}

impl Held {
    fn token(&self) -> u64 {
        match self {
            Held::Lock(g) => g.fencing_token(),
            Held::Fair(g) => g.fencing_token(),
            Held::RwWrite(g) => g.fencing_token(),
            Held::Semaphore(p) => p.fencing_token(),
            Held::Redlock(g) => g.fencing_token(),
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Held::Lock(g) => g.is_lost(),
            Held::Fair(g) => g.is_lost(),
            Held::RwWrite(g) => g.is_lost(),
            Held::Semaphore(p) => p.is_lost(),
            Held::Redlock(g) => g.is_lost(),
        }
    }

    async fn release(self) -> Result<(), String> {
        match self {
            Held::Lock(g) => g.unlock().await.map_err(|e| e.to_string()),
            Held::Fair(g) => g.unlock().await.map_err(|e| e.to_string()),
            Held::RwWrite(g) => g.unlock().await.map_err(|e| e.to_string()),
            Held::Semaphore(p) => p.release().await.map_err(|e| e.to_string()),
            Held::Redlock(g) => g.unlock().await.map_err(|e| e.to_string()),
        }
    }
}

/// What the tasks of one kind did, summed over a process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Sections (acquisitions).
    pub acquired: u64,
    /// Acquisitions whose wait ran out while others held the lock.
    pub busy: u64,
    /// Acquisitions that failed (Redis down, timeouts, no quorum, ...).
    pub errors: u64,
    /// Releases that failed (mostly `NotHeld` after a lost lease).
    pub release_failed: u64,
}

impl Counts {
    pub(crate) fn add(&mut self, other: Counts) {
        self.acquired += other.acquired;
        self.busy += other.busy;
        self.errors += other.errors;
        self.release_failed += other.release_failed;
    }

    /// `"C\t<kind>\t<acquired>\t<busy>\t<errors>\t<release_failed>"`.
    pub(crate) fn to_line(self, kind: Kind) -> String {
        format!(
            "C\t{}\t{}\t{}\t{}\t{}",
            kind.name(),
            self.acquired,
            self.busy,
            self.errors,
            self.release_failed
        )
    }

    pub(crate) fn from_line(line: &str) -> Option<(Kind, Counts)> {
        let f: Vec<&str> = line.split('\t').collect();
        let ["C", kind, acquired, busy, errors, release_failed] = f[..] else {
            return None;
        };
        Some((
            Kind::parse(kind)?,
            Counts {
                acquired: acquired.parse().ok()?,
                busy: busy.parse().ok()?,
                errors: errors.parse().ok()?,
                release_failed: release_failed.parse().ok()?,
            },
        ))
    }
}

#[derive(Default)]
struct KindStats {
    acquired: AtomicU64,
    busy: AtomicU64,
    errors: AtomicU64,
    release_failed: AtomicU64,
    samples: Mutex<Vec<String>>,
}

/// Counters of one process, per kind.
#[derive(Default)]
pub(crate) struct Stats {
    kinds: [KindStats; 5],
}

impl Stats {
    fn of(&self, kind: Kind) -> &KindStats {
        &self.kinds[kind.index()]
    }

    fn error(&self, kind: Kind, message: &str) {
        let k = self.of(kind);
        k.errors.fetch_add(1, Ordering::Relaxed);
        let mut samples = k.samples.lock().unwrap_or_else(PoisonError::into_inner);
        let message: String = message
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(200)
            .collect();
        if samples.len() < ERROR_SAMPLES && !samples.contains(&message) {
            samples.push(message);
        }
    }

    pub(crate) fn counts(&self, kind: Kind) -> Counts {
        let k = self.of(kind);
        Counts {
            acquired: k.acquired.load(Ordering::Relaxed),
            busy: k.busy.load(Ordering::Relaxed),
            errors: k.errors.load(Ordering::Relaxed),
            release_failed: k.release_failed.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn samples(&self, kind: Kind) -> Vec<String> {
        self.of(kind)
            .samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The workers of one process: two client sets (direct and proxied), each
/// running `tasks_per_kind` tasks per kind.
pub(crate) struct Workers {
    stop: Arc<AtomicBool>,
    tasks: JoinSet<()>,
    pub(crate) stats: Arc<Stats>,
    sets: Vec<ClientSet>,
}

impl Workers {
    /// Connects the client sets `"<process>.direct"` and
    /// `"<process>.proxied"` and starts the tasks. Sections go to `sink`.
    pub(crate) async fn start(
        process: &str,
        direct: &Urls,
        proxied: &Urls,
        settings: Settings,
        tasks_per_kind: usize,
        seed: u64,
        sink: &mpsc::UnboundedSender<Section>,
    ) -> Result<Workers, String> {
        let sets = vec![
            ClientSet::connect(&format!("{process}.direct"), direct, settings).await?,
            ClientSet::connect(&format!("{process}.proxied"), proxied, settings).await?,
        ];
        let _ = sets[0]
            .main
            .semaphore(&lock_name(Kind::Semaphore))
            .try_set_permits(1)
            .await;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Stats::default());
        let mut tasks = JoinSet::new();
        let mut rng = Rng::new(seed);
        for set in &sets {
            for kind in Kind::ALL {
                for t in 0..tasks_per_kind {
                    let task = Task {
                        target: Target::new(kind, set, settings)?,
                        kind,
                        client: format!("{}.{}{t}", set.label, short(kind)),
                        lease: settings.lease,
                        drop_percent: settings.drop_percent,
                        stop: stop.clone(),
                        stats: stats.clone(),
                        sink: sink.clone(),
                        rng: Rng::new(rng.next()),
                    };
                    tasks.spawn(task.run());
                }
            }
        }
        Ok(Workers {
            stop,
            tasks,
            stats,
            sets,
        })
    }

    /// Stops the tasks after their current section and waits for them
    /// (at most `within`; stragglers are aborted). Clients stay connected.
    pub(crate) async fn stop(&mut self, within: Duration) {
        self.stop.store(true, Ordering::Release);
        let all = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(within, all).await.is_err() {
            self.tasks.abort_all();
        }
    }

    /// Shuts the clients down.
    pub(crate) async fn shutdown(self) {
        for set in &self.sets {
            set.shutdown().await;
        }
    }
}

fn short(kind: Kind) -> &'static str {
    match kind {
        Kind::Lock => "l",
        Kind::FairLock => "f",
        Kind::RwWrite => "w",
        Kind::Semaphore => "s",
        Kind::Redlock => "r",
    }
}

/// One worker task.
struct Task {
    target: Target,
    kind: Kind,
    client: String,
    lease: Duration,
    drop_percent: u64,
    stop: Arc<AtomicBool>,
    stats: Arc<Stats>,
    sink: mpsc::UnboundedSender<Section>,
    rng: Rng,
}

impl Task {
    async fn run(mut self) {
        while !self.stop.load(Ordering::Acquire) {
            // 30 % fixed leases (up to the watchdog lease: Redlock's max).
            let lease = (self.kind != Kind::Semaphore && self.rng.below(100) < 30)
                .then(|| self.lease.mul_f64(0.4 + 0.6 * self.rng.unit()));
            let requested_us = now_us();
            match self.target.acquire(WAIT, lease).await {
                Ok(Some(held)) => {
                    self.stats
                        .of(self.kind)
                        .acquired
                        .fetch_add(1, Ordering::Relaxed);
                    let hold_for = self.hold_time();
                    let drop_guard = self.rng.below(100) < self.drop_percent;
                    let section = self.section(held, requested_us, hold_for, drop_guard).await;
                    let _ = self.sink.send(section);
                }
                Ok(None) => {
                    self.stats
                        .of(self.kind)
                        .busy
                        .fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    self.stats.error(self.kind, &e);
                    let pause = 20 + self.rng.below(100);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
            }
            let pause = self.rng.below(10);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }

    /// Mostly short holds, some long ones beyond the lease (renewed by the
    /// watchdog, or lost with a fixed lease).
    fn hold_time(&mut self) -> Duration {
        let roll = self.rng.below(100);
        if roll < 65 {
            Duration::from_millis(2 + self.rng.below(48))
        } else if roll < 90 {
            Duration::from_millis(50 + self.rng.below(200))
        } else {
            self.lease.mul_f64(0.8 + 1.2 * self.rng.unit())
        }
    }

    /// Holds `held` for `hold_for`, looking at it every few milliseconds,
    /// then lets go: `unlock().await`, or drops the guard (`drop_guard`:
    /// released in the background). The fenced writes are at `start_us` and
    /// `end_us`.
    async fn section(
        &self,
        held: Held,
        requested_us: u64,
        hold_for: Duration,
        drop_guard: bool,
    ) -> Section {
        let until = Instant::now() + hold_for;
        let start_us = now_us();
        let mut looks = Looks::default();
        looks.look(start_us, &held);
        // Code already running does not stop when the lease is lost: the
        // holder carries on until its planned end (and then writes).
        while looks.lost_at_us.is_none() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            tokio::time::sleep(left.min(LOOK_EVERY)).await;
            if Instant::now() < until {
                looks.look(now_us(), &held);
            }
        }
        tokio::time::sleep_until(until).await;
        // The end write goes with the last look, as the start write goes
        // with the first: a holder that stalls after looking (a paused
        // process) wrote, in the history, while it still knew it was valid.
        let end_us = now_us();
        let valid_at_end = looks.look(end_us, &held);
        let token = held.token();
        if drop_guard {
            drop(held);
        } else if held.release().await.is_err() {
            self.stats
                .of(self.kind)
                .release_failed
                .fetch_add(1, Ordering::Relaxed);
        }
        Section {
            lock: lock_name(self.kind),
            kind: self.kind,
            client: self.client.clone(),
            token,
            requested_us,
            start_us,
            end_us,
            valid_until_us: looks.valid_until_us,
            valid_at_end,
            lost_at_us: looks.lost_at_us,
        }
    }
}

/// What the holder saw of its guard.
#[derive(Default)]
struct Looks {
    valid_until_us: Option<u64>,
    lost_at_us: Option<u64>,
}

impl Looks {
    /// Looks at the guard at `at_us` (read before the look). Returns whether
    /// it was valid. Once lost it stays lost.
    fn look(&mut self, at_us: u64, held: &Held) -> bool {
        if self.lost_at_us.is_some() {
            return false;
        }
        if held.is_lost() {
            self.lost_at_us = Some(at_us);
            false
        } else {
            self.valid_until_us = Some(at_us);
            true
        }
    }
}
