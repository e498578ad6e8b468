//! The measured scenarios described in BENCHMARKS.md: S1 (uncontended), S2 (contended loop),
//! S3 (the blog-post scenario: N requests at once, each once) and S5 (many
//! keys: workers loop over randomly picked keys, on one node or a cluster).
//!
//! Every worker uses the `redisync::Lock` (or `FairLock`, ...) handle of one
//! shared `redisync::Client` (or, with `--clients N`, of client `worker % N`),
//! acquires with `try_lock(wait, lease)`, holds the lock for the simulated
//! work and releases it with `LockGuard::unlock`. The spin baseline
//! (`crate::spin`) goes through the same code. An
//! in-process holder counter (incremented right after acquire returns,
//! decremented right before release is called) and an overlap check over the
//! recorded hold intervals detect mutual-exclusion violations (S5: one
//! counter per key, and the overlap check per key).

use crate::redis_stats::{delta, RedisStats, ServerCounters};
use crate::stats::{
    count64, cpu_us_per, len64, nanos, now_ns, overlaps, pct, per_second, process_cpu_s, ratio,
    round_ms, secs_ms, unix_now, us,
};
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How long S1 and the S2 loop let one `try_lock` call wait. S2 workers wait
/// "as long as needed": a `None` after this long is counted under
/// `acquire_failures` and the worker calls again.
const CALL_WAIT: Duration = Duration::from_secs(10);
/// A library call that has not returned this long after its own wait limit
/// is reported as an error (and abandoned) instead of hanging the benchmark.
const CALL_SLACK: Duration = Duration::from_secs(5);
/// S3 reports the commands executed in the first holder's hold time.
const EARLY_WINDOW: Duration = Duration::from_millis(300);
/// Uncounted acquire/release pairs before the S1 window.
const S1_WARMUP: usize = 50;

/// The lock under test: the reentrant `Lock`, (`--kind fair`) the
/// `FairLock`, or (three ports) a `Redlock` over three `Lock`s; they have
/// the same methods.
#[derive(Clone)]
pub(crate) enum Handle {
    Lock(redisync::Lock),
    Fair(redisync::FairLock),
    /// A `Semaphore` with one permit, used as a mutex (its permits are
    /// always watchdog-leased: the fixed lease does not apply).
    Semaphore(redisync::Semaphore),
    /// The write side of an `RwLock`.
    Write(redisync::WriteLock),
    Redlock(redisync_redlock::Redlock),
    /// The naive spin-lock baseline (fixed lease only).
    Spin(crate::spin::SpinLock),
    /// The peer rslock (fixed lease only).
    Rslock(crate::peers::Rslock),
    /// A floor: "acquire" and "release" are one empty round trip each.
    Floor(crate::peers::Floor),
}

/// A guard of any kind.
pub(crate) enum Guard {
    Lock(redisync::LockGuard),
    Fair(redisync::FairLockGuard),
    Semaphore(redisync::SemaphorePermit),
    Rw(redisync::RwLockGuard),
    Redlock(redisync_redlock::RedlockGuard),
    Spin(crate::spin::SpinGuard),
    Rslock(crate::peers::Rslock, rslock::Lock),
    Floor(crate::peers::Floor),
}

impl Handle {
    async fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<Guard>, String> {
        let text = |e: &dyn std::fmt::Display| e.to_string();
        Ok(match self {
            Handle::Lock(l) => l
                .try_lock(wait, lease)
                .await
                .map_err(|e| text(&e))?
                .map(Guard::Lock),
            Handle::Fair(l) => l
                .try_lock(wait, lease)
                .await
                .map_err(|e| text(&e))?
                .map(Guard::Fair),
            Handle::Redlock(l) => l
                .try_lock(wait, lease)
                .await
                .map_err(|e| text(&e))?
                .map(Guard::Redlock),
            Handle::Semaphore(s) => s
                .try_acquire(1, wait)
                .await
                .map_err(|e| text(&e))?
                .map(Guard::Semaphore),
            Handle::Write(l) => l
                .try_lock(wait, lease)
                .await
                .map_err(|e| text(&e))?
                .map(Guard::Rw),
            Handle::Spin(l) => {
                let ttl =
                    lease.ok_or("the spin baseline has no watchdog: it needs a fixed lease")?;
                l.try_lock(wait, ttl).await?.map(Guard::Spin)
            }
            Handle::Rslock(l) => {
                let ttl = lease.ok_or("rslock has no watchdog: it needs a fixed lease")?;
                l.try_lock(wait, ttl)
                    .await?
                    .map(|lock| Guard::Rslock(l.clone(), lock))
            }
            Handle::Floor(f) => {
                f.acquire().await?;
                Some(Guard::Floor(f.clone()))
            }
        })
    }
}

impl Guard {
    /// `None` for the spin baseline, which has no fencing token.
    fn fencing_token(&self) -> Option<u64> {
        match self {
            Guard::Lock(g) => Some(g.fencing_token()),
            Guard::Fair(g) => Some(g.fencing_token()),
            Guard::Semaphore(p) => Some(p.fencing_token()),
            Guard::Rw(g) => Some(g.fencing_token()),
            Guard::Redlock(g) => Some(g.fencing_token()),
            Guard::Spin(_) | Guard::Rslock(..) | Guard::Floor(_) => None,
        }
    }

    async fn unlock(self) -> Result<(), String> {
        match self {
            Guard::Lock(g) => g.unlock().await.map_err(|e| e.to_string()),
            Guard::Fair(g) => g.unlock().await.map_err(|e| e.to_string()),
            Guard::Redlock(g) => g.unlock().await.map_err(|e| e.to_string()),
            Guard::Semaphore(p) => p.release().await.map_err(|e| e.to_string()),
            Guard::Rw(g) => g.unlock().await.map_err(|e| e.to_string()),
            Guard::Spin(g) => g.unlock().await,
            Guard::Rslock(l, lock) => {
                l.unlock(&lock).await;
                Ok(())
            }
            Guard::Floor(f) => f.release().await,
        }
    }
}

/// The lock under test plus the lease every acquisition asks for.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) lock: Handle,
    /// `Some(ttl)`: fixed lease; `None`: watchdog.
    pub(crate) lease: Option<Duration>,
}

impl Target {
    /// One `try_lock` call, bounded by `wait + CALL_SLACK` in case the
    /// library hangs.
    async fn try_lock(&self, wait: Duration) -> Result<Option<Guard>, String> {
        match tokio::time::timeout(wait + CALL_SLACK, self.lock.try_lock(wait, self.lease)).await {
            Ok(Ok(guard)) => Ok(guard),
            Ok(Err(e)) => Err(format!("try_lock: {e}")),
            Err(_) => Err(format!(
                "try_lock({wait:?}) had not returned {CALL_SLACK:?} after its wait ran out"
            )),
        }
    }

    /// Acquire with `wait`, or fail.
    pub(crate) async fn acquire(&self, wait: Duration) -> Result<Guard, String> {
        self.try_lock(wait)
            .await?
            .ok_or_else(|| format!("could not acquire an uncontended lock within {wait:?}"))
    }
}

/// Release, bounded by `CALL_SLACK`.
async fn release(guard: Guard) -> Result<(), String> {
    match tokio::time::timeout(CALL_SLACK, guard.unlock()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("unlock: {e}")),
        Err(_) => Err(format!("unlock had not returned after {CALL_SLACK:?}")),
    }
}

/// The critical section's work. tokio's timer has 1 ms granularity (a 2 ms
/// `tokio::time::sleep` lasts ~3 ms), so like the other Rust driver we sleep
/// with `std::thread::sleep` on the blocking pool (~2.05 ms for 2 ms); only
/// the lock holder ever does this.
async fn simulated_work(hold: Duration) {
    // A panic in a plain sleep cannot happen; ignoring the JoinError is fine.
    let _ = tokio::task::spawn_blocking(move || std::thread::sleep(hold)).await;
}

/// How long S1 "released by drop" waits, after its window, for the last
/// dropped guard's background release to free the lock.
const DROP_SETTLE: Duration = Duration::from_secs(5);

impl Handle {
    /// Whether the lock is held by anyone (`Lock` only).
    async fn is_locked(&self) -> Result<bool, String> {
        match self {
            Handle::Lock(l) => l.is_locked().await.map_err(|e| format!("is_locked: {e}")),
            _ => Err("only a Lock is released by drop in the bench".into()),
        }
    }
}

/// Polls until nobody holds `target`'s lock, for at most `limit`; whether
/// it got free.
async fn wait_until_free(target: &Target, limit: Duration) -> Result<bool, String> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if !target.lock.is_locked().await? {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// One acquire/release pair, for the warm-up before any scenario.
pub(crate) async fn warm_up(target: &Target) -> Result<(), String> {
    release(target.acquire(CALL_WAIT).await?).await
}

/// S1: one task, acquire + release, `iterations` times or `duration`,
/// whichever comes first.
///
/// `drop_guard`: the guard is dropped instead of `unlock().await`ed (the
/// library releases in the background) and the next acquire starts at
/// once. Every acquisition must then be a new one: its fencing token must be
/// above the previous one (not the same token of a re-entry into a hold
/// whose release had not run yet); those that are not are counted as
/// `not_released`, and the lock must be free shortly after the window.
pub(crate) async fn run_s1(
    target: &Target,
    stats: &RedisStats,
    iterations: usize,
    duration: Duration,
    drop_guard: bool,
) -> Result<Map<String, Value>, String> {
    for _ in 0..S1_WARMUP {
        warm_up(target).await?;
    }
    let mut lat: Vec<u64> = Vec::with_capacity(iterations);
    let mut failures = 0u64;
    let mut not_released = 0u64;
    let mut last_token: Option<u64> = None;
    let before = stats.snapshot().await?;
    let w0 = unix_now();
    let cpu0 = process_cpu_s();
    let t_start = now_ns();
    let deadline = t_start + nanos(duration);
    for _ in 0..iterations {
        let t0 = now_ns();
        if t0 >= deadline {
            break;
        }
        match target.try_lock(CALL_WAIT).await? {
            Some(guard) if drop_guard => {
                let token = guard.fencing_token();
                if token.is_none() || token <= last_token {
                    not_released += 1;
                }
                last_token = token;
                drop(guard);
                lat.push(now_ns() - t0);
            }
            Some(guard) => {
                release(guard).await?;
                lat.push(now_ns() - t0);
            }
            None => failures += 1,
        }
    }
    let elapsed = now_ns() - t_start;
    let bench_cpu = cpu0.zip(process_cpu_s()).map(|(a, b)| b - a);
    let w1 = unix_now();
    // The last dropped guard's release is part of the work measured: wait
    // for it before the command count. Each poll is one `is_locked` (a
    // handful of commands, counted as the library's: ~0.002 per acquisition
    // over 3000).
    let freed = if drop_guard {
        Some(wait_until_free(target, DROP_SETTLE).await?)
    } else {
        None
    };
    let cmds = delta(&before, &stats.snapshot().await?);
    let n = len64(&lat);
    let mean = lat.iter().sum::<u64>().checked_div(n);
    let mut errors = Vec::new();
    if not_released > 0 {
        errors.push(format!(
            "{not_released} acquisitions after a dropped guard were not new ones (fencing \
             token not above the previous): the drop had not released yet"
        ));
    }
    if drop_guard && failures > 0 {
        errors.push(format!(
            "{failures} acquires after a dropped guard got nothing within {CALL_WAIT:?}"
        ));
    }
    if freed == Some(false) {
        errors.push(format!(
            "the lock was still held {DROP_SETTLE:?} after the last guard was dropped"
        ));
    }
    let v = json!({
        "iterations": n,
        // The client side's cost: CPU of this process (user + system).
        "cpu_us_per_op": bench_cpu.map_or(Value::Null, |c| cpu_us_per(c, n)),
        "elapsed_s": secs_ms(elapsed),
        "ops_per_s": per_second(n, elapsed),
        "lat_p50_us": us(pct(&lat, 50)),
        "lat_p99_us": us(pct(&lat, 99)),
        "lat_mean_us": us(mean),
        "acquire_failures": failures,
        "redis_cmds": cmds.total,
        "cmds_per_acq": ratio(cmds.total, n, 2),
        "cmd_breakdown": cmds.breakdown,
        "window_unix": [w0, w1],
    });
    let mut m = into_map(v);
    if drop_guard {
        m.insert("release".into(), json!("drop"));
        m.insert("not_released".into(), json!(not_released));
        m.insert("freed_after_window".into(), json!(freed));
        m.insert("errors".into(), json!(errors));
    }
    Ok(m)
}

/// One completed acquisition (all times from `now_ns`).
#[derive(Clone, Copy)]
struct Rec {
    /// The worker started wanting the lock.
    want: u64,
    /// `try_lock` returned the guard.
    acq: u64,
    /// The work ended; `unlock` is called now.
    rel_start: u64,
    /// `unlock` returned.
    released: u64,
    worker: usize,
    fencing_token: Option<u64>,
}

/// State shared by the workers of one contended run.
#[derive(Default)]
struct Shared {
    holders: AtomicI64,
    violations: AtomicU64,
    failures: AtomicU64,
    timed_out: AtomicU64,
    records: Mutex<Vec<Rec>>,
    errors: Mutex<Vec<String>>,
}

impl Shared {
    fn error(&self, e: String) {
        eprintln!("worker error: {e}");
        self.errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(e);
    }
}

/// How a contended worker behaves.
#[derive(Clone, Copy)]
enum Mode {
    /// S2: loop want -> acquire -> hold -> release until `deadline` (ns).
    Loop { deadline: u64 },
    /// S3: acquire once within `wait`, hold, release.
    OneShot { wait: Duration },
}

async fn worker(id: usize, target: Target, hold: Duration, mode: Mode, sh: Arc<Shared>) {
    let mut want: Option<u64> = None;
    loop {
        let t0 = now_ns();
        let wt = if let Some(w) = want {
            w
        } else {
            if let Mode::Loop { deadline } = mode {
                if t0 >= deadline {
                    return;
                }
            }
            want = Some(t0);
            t0
        };
        let call_wait = match mode {
            Mode::Loop { .. } => CALL_WAIT,
            Mode::OneShot { wait } => {
                let left = wait.saturating_sub(Duration::from_nanos(t0 - wt));
                if left.is_zero() {
                    sh.timed_out.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                left
            }
        };
        let guard = match target.try_lock(call_wait).await {
            Ok(Some(guard)) => guard,
            Ok(None) => {
                // The wait ran out: keep wanting the lock (the wait time spans
                // the calls) until the scenario's limit.
                sh.failures.fetch_add(1, Ordering::Relaxed);
                if let Mode::Loop { deadline } = mode {
                    if now_ns() >= deadline {
                        return;
                    }
                }
                continue;
            }
            Err(e) => {
                sh.error(e);
                return;
            }
        };
        let t1 = now_ns();
        let fencing_token = guard.fencing_token();
        if sh.holders.fetch_add(1, Ordering::SeqCst) >= 1 {
            sh.violations.fetch_add(1, Ordering::Relaxed);
        }
        simulated_work(hold).await;
        let t2 = now_ns();
        sh.holders.fetch_sub(1, Ordering::SeqCst);
        if let Err(e) = release(guard).await {
            sh.error(e);
        }
        let t3 = now_ns();
        sh.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Rec {
                want: wt,
                acq: t1,
                rel_start: t2,
                released: t3,
                worker: id,
                fencing_token,
            });
        want = None;
        if let Mode::OneShot { .. } = mode {
            return;
        }
    }
}

/// Everything a contended run collected.
struct Outcome {
    /// Acquisitions sorted by acquire time.
    recs: Vec<Rec>,
    sh: Arc<Shared>,
    t_start: u64,
    t_end: u64,
    /// The result fields every contended scenario reports.
    common: Map<String, Value>,
    /// Commands executed in the first `EARLY_WINDOW` (S3 only).
    early_cmds: Option<u64>,
}

/// Spawns `workers` tasks (all at once; worker `i` uses `targets[i % len]`),
/// waits for all of them and collects the common fields.
async fn run_workers(
    targets: &[Target],
    stats: &RedisStats,
    workers: usize,
    hold: Duration,
    mode: impl Fn(u64) -> Mode,
    measure_early: bool,
) -> Result<Outcome, String> {
    let sh = Arc::new(Shared::default());
    let before = stats.snapshot().await?;
    let w0 = unix_now();
    let t_start = now_ns();
    let mode = mode(t_start);
    let early = measure_early.then(|| {
        let stats = stats.clone();
        tokio::spawn(async move {
            tokio::time::sleep(EARLY_WINDOW).await;
            stats.snapshot().await
        })
    });
    let handles: Vec<_> = (0..workers)
        .map(|id| {
            let target = targets[id % targets.len()].clone();
            tokio::spawn(worker(id, target, hold, mode, Arc::clone(&sh)))
        })
        .collect();
    for h in handles {
        if let Err(e) = h.await {
            sh.error(format!("task: {e}"));
        }
    }
    let t_end = now_ns();
    let w1 = unix_now();
    let cmds = delta(&before, &stats.snapshot().await?);
    let early_cmds = match early {
        Some(h) => match h.await {
            Ok(Ok(snap)) => Some(delta(&before, &snap).total),
            Ok(Err(e)) => return Err(e),
            Err(e) => return Err(format!("early snapshot task: {e}")),
        },
        None => None,
    };

    let mut recs = sh
        .records
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    recs.sort_by_key(|r| r.acq);
    let mut intervals: Vec<(u64, u64)> = recs.iter().map(|r| (r.acq, r.rel_start)).collect();
    let holds: Vec<u64> = recs.iter().map(|r| r.rel_start - r.acq).collect();
    // Fencing tokens must grow with every new holder (`null`: no tokens).
    let token_regressions = recs.iter().all(|r| r.fencing_token.is_some()).then(|| {
        recs.windows(2)
            .filter(|p| p[1].fencing_token <= p[0].fencing_token)
            .count()
    });
    let errors = sh
        .errors
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let total = len64(&recs);
    let common = into_map(json!({
        "acquisitions_total": total,
        "acquire_failures": sh.failures.load(Ordering::Relaxed),
        "violations": sh.violations.load(Ordering::Relaxed),
        "overlaps": overlaps(&mut intervals),
        "fencing_token_regressions": token_regressions,
        "errors": errors.iter().take(5).collect::<Vec<_>>(),
        "error_count": errors.len(),
        "redis_cmds": cmds.total,
        "cmds_per_acq": ratio(cmds.total, total, 2),
        "cmd_breakdown": cmds.breakdown,
        "hold_p50_us": us(pct(&holds, 50)),
        "window_unix": [w0, w1],
    }));
    Ok(Outcome {
        recs,
        sh,
        t_start,
        t_end,
        common,
        early_cmds,
    })
}

/// Handoff gaps (next acquire minus previous release start) over
/// consecutive acquisitions, overall and across workers, and the share of
/// acquisitions won by the worker that had just released.
fn handoff(recs: &[Rec], m: &mut Map<String, Value>) {
    let gap = |p: &[Rec]| p[1].acq.saturating_sub(p[0].rel_start);
    let gaps: Vec<u64> = recs.windows(2).map(gap).collect();
    let xgaps: Vec<u64> = recs
        .windows(2)
        .filter(|p| p[1].worker != p[0].worker)
        .map(gap)
        .collect();
    let same = recs
        .windows(2)
        .filter(|p| p[1].worker == p[0].worker)
        .count();
    m.insert("handoff_gap_p50_us".into(), us(pct(&gaps, 50)));
    m.insert("handoff_gap_p99_us".into(), us(pct(&gaps, 99)));
    m.insert("xhandoff_gap_p50_us".into(), us(pct(&xgaps, 50)));
    m.insert(
        "self_reacquire_frac".into(),
        ratio(count64(same), len64(&gaps), 2),
    );
}

/// S2: `workers` tasks loop on one key for `duration`.
pub(crate) async fn run_s2(
    targets: &[Target],
    stats: &RedisStats,
    workers: usize,
    hold: Duration,
    duration: Duration,
) -> Result<Map<String, Value>, String> {
    let window = nanos(duration);
    let out = run_workers(
        targets,
        stats,
        workers,
        hold,
        |t_start| Mode::Loop {
            deadline: t_start + window,
        },
        false,
    )
    .await?;
    let deadline = out.t_start + window;
    let mut m = out.common;
    let win: Vec<Rec> = out
        .recs
        .iter()
        .copied()
        .filter(|r| r.acq <= deadline)
        .collect();
    let waits: Vec<u64> = win.iter().map(|r| r.acq - r.want).collect();
    let busy: u64 = win
        .iter()
        .map(|r| r.rel_start.min(deadline).saturating_sub(r.acq))
        .sum();
    let mut per_worker = vec![0u64; workers];
    for r in &win {
        per_worker[r.worker] += 1;
    }
    let n = len64(&win);
    m.insert("workers".into(), json!(workers));
    m.insert("hold_ms".into(), json!(duration_ms(hold)));
    m.insert("duration_s".into(), json!(duration.as_secs_f64()));
    m.insert("acquisitions".into(), json!(n));
    m.insert("acq_per_s".into(), per_second(n, window));
    m.insert("wait_p50_us".into(), us(pct(&waits, 50)));
    m.insert("wait_p99_us".into(), us(pct(&waits, 99)));
    m.insert("wait_max_us".into(), us(waits.iter().max().copied()));
    handoff(&win, &mut m);
    m.insert("worker_acq_min".into(), json!(per_worker.iter().min()));
    m.insert("worker_acq_max".into(), json!(per_worker.iter().max()));
    m.insert("worker_acq".into(), json!(per_worker));
    m.insert("utilization".into(), ratio(busy, window, 3));
    m.insert(
        "overrun_s".into(),
        json!(secs_ms(out.t_end.saturating_sub(deadline))),
    );
    Ok(m)
}

/// S3: `requests` tasks start at once, each needs the lock once for `hold`
/// and waits at most `wait`.
pub(crate) async fn run_s3(
    targets: &[Target],
    stats: &RedisStats,
    requests: usize,
    hold: Duration,
    wait: Duration,
) -> Result<Map<String, Value>, String> {
    let out = run_workers(
        targets,
        stats,
        requests,
        hold,
        |_| Mode::OneShot { wait },
        true,
    )
    .await?;
    let mut m = out.common;
    let recs = &out.recs;
    let waits: Vec<u64> = recs.iter().map(|r| r.acq - r.want).collect();
    let done = recs.iter().map(|r| r.released).max();
    m.insert("requests".into(), json!(requests));
    m.insert("hold_ms".into(), json!(duration_ms(hold)));
    m.insert("wait_limit_s".into(), json!(wait.as_secs_f64()));
    m.insert("completed".into(), json!(recs.len()));
    m.insert(
        "timed_out".into(),
        json!(out.sh.timed_out.load(Ordering::Relaxed)),
    );
    m.insert(
        "total_s".into(),
        json!(done.map(|d| secs_ms(d - out.t_start))),
    );
    m.insert(
        "ideal_s".into(),
        json!(secs_ms(nanos(hold) * count64(requests))),
    );
    m.insert("wait_p50_us".into(), us(pct(&waits, 50)));
    m.insert("wait_max_us".into(), us(waits.iter().max().copied()));
    handoff(recs, &mut m);
    m.insert("cmds_first_300ms".into(), json!(out.early_cmds));
    Ok(m)
}

fn duration_ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn into_map(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// xorshift64* (Vigna): a tiny, fast, seedable generator, good enough to
/// pick keys uniformly (no `rand` dependency for one `next`).
struct XorShift(u64);

impl XorShift {
    /// Seeded from the worker id through splitmix64 (never zero), so runs
    /// are reproducible and workers draw different sequences.
    fn new(worker: usize) -> Self {
        let mut z = count64(worker)
            .wrapping_add(1)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Self((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n >= 1`; Lemire's multiply-shift, no modulo bias
    /// worth speaking of for n = 1000).
    fn below(&mut self, n: usize) -> usize {
        let wide = u128::from(self.next()) * u128::from(count64(n));
        usize::try_from(wide >> 64).unwrap_or(0)
    }
}

/// One completed S5 operation (times from `now_ns`).
#[derive(Clone, Copy)]
struct KeyRec {
    key: usize,
    worker: usize,
    want: u64,
    acq: u64,
    rel_start: u64,
    released: u64,
    fencing_token: Option<u64>,
}

/// Per-key counters of an S5 run.
#[derive(Default)]
struct KeySlot {
    /// Workers between "acquired" and "release called" (> 1: violation).
    holders: AtomicU32,
    /// Workers between "want" and "unlock returned": a worker that finds
    /// another one here has to wait for it (a busy wait).
    users: AtomicU32,
}

/// State shared by the S5 workers.
struct ManyKeys {
    slots: Vec<KeySlot>,
    violations: AtomicU64,
    failures: AtomicU64,
    busy_waits: AtomicU64,
    error_count: AtomicU64,
    /// The first few error messages (the count is in `error_count`).
    errors: Mutex<Vec<String>>,
}

impl ManyKeys {
    const KEPT_ERRORS: usize = 5;

    fn new(keys: usize) -> Self {
        Self {
            slots: (0..keys).map(|_| KeySlot::default()).collect(),
            violations: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            busy_waits: AtomicU64::new(0),
            error_count: AtomicU64::new(0),
            errors: Mutex::new(Vec::new()),
        }
    }

    fn error(&self, e: String) {
        self.error_count.fetch_add(1, Ordering::Relaxed);
        let mut errors = self.errors.lock().unwrap_or_else(PoisonError::into_inner);
        if errors.len() < Self::KEPT_ERRORS {
            eprintln!("worker error: {e}");
            errors.push(e);
        }
    }
}

/// One S5 worker: until `deadline`, pick a key, acquire it (calling
/// `try_lock` again after a `None`), hold `hold` (a `tokio::time::sleep`,
/// skipped at zero), release. An error abandons the operation (counted,
/// the worker goes on).
async fn many_keys_worker(
    id: usize,
    keys: Arc<[Target]>,
    sh: Arc<ManyKeys>,
    hold: Duration,
    deadline: u64,
) -> Vec<KeyRec> {
    let mut rng = XorShift::new(id);
    let mut recs = Vec::new();
    loop {
        let want = now_ns();
        if want >= deadline {
            return recs;
        }
        let key = rng.below(keys.len());
        let slot = &sh.slots[key];
        if slot.users.fetch_add(1, Ordering::SeqCst) > 0 {
            sh.busy_waits.fetch_add(1, Ordering::Relaxed);
        }
        let guard = loop {
            match keys[key].try_lock(CALL_WAIT).await {
                Ok(Some(guard)) => break Some(guard),
                Ok(None) => {
                    sh.failures.fetch_add(1, Ordering::Relaxed);
                    if now_ns() >= deadline {
                        break None;
                    }
                }
                Err(e) => {
                    sh.error(e);
                    break None;
                }
            }
        };
        let Some(guard) = guard else {
            slot.users.fetch_sub(1, Ordering::SeqCst);
            continue;
        };
        let acq = now_ns();
        let fencing_token = guard.fencing_token();
        if slot.holders.fetch_add(1, Ordering::SeqCst) >= 1 {
            sh.violations.fetch_add(1, Ordering::Relaxed);
        }
        if !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        let rel_start = now_ns();
        slot.holders.fetch_sub(1, Ordering::SeqCst);
        if let Err(e) = release(guard).await {
            sh.error(e);
        }
        let released = now_ns();
        slot.users.fetch_sub(1, Ordering::SeqCst);
        recs.push(KeyRec {
            key,
            worker: id,
            want,
            acq,
            rel_start,
            released,
            fencing_token,
        });
    }
}

/// Per key, in acquire order: overlapping hold intervals, and fencing
/// tokens that did not grow (`None`: no tokens). Sorts `recs` by key.
fn per_key_checks(recs: &mut [KeyRec]) -> (u64, Option<usize>) {
    recs.sort_by_key(|r| (r.key, r.acq));
    let mut overlap_count = 0;
    let mut token_regressions = recs.iter().all(|r| r.fencing_token.is_some()).then_some(0);
    for same_key in recs.chunk_by(|a, b| a.key == b.key) {
        let mut intervals: Vec<(u64, u64)> =
            same_key.iter().map(|r| (r.acq, r.rel_start)).collect();
        overlap_count += overlaps(&mut intervals);
        if let Some(n) = token_regressions.as_mut() {
            *n += same_key
                .windows(2)
                .filter(|p| p[1].fencing_token <= p[0].fencing_token)
                .count();
        }
    }
    (overlap_count, token_regressions)
}

/// S5: `workers` tasks loop for `duration`, each operation on a key picked
/// uniformly from `keys` (one `Target` per key, made up front). Every key
/// is warmed up once (sequentially) before the window.
pub(crate) async fn run_s5(
    keys: &[Target],
    stats: &RedisStats,
    workers: usize,
    hold: Duration,
    duration: Duration,
) -> Result<Map<String, Value>, String> {
    for target in keys {
        warm_up(target).await?;
    }
    let keys: Arc<[Target]> = keys.into();
    let sh = Arc::new(ManyKeys::new(keys.len()));
    let window = nanos(duration);
    let before = stats.snapshot().await?;
    let redis0 = stats.counters().await?;
    let cpu0 = process_cpu_s();
    let w0 = unix_now();
    let t_start = now_ns();
    let deadline = t_start + window;
    let handles: Vec<_> = (0..workers)
        .map(|id| {
            tokio::spawn(many_keys_worker(
                id,
                Arc::clone(&keys),
                Arc::clone(&sh),
                hold,
                deadline,
            ))
        })
        .collect();
    let mut recs = Vec::new();
    for h in handles {
        match h.await {
            Ok(mut r) => recs.append(&mut r),
            Err(e) => sh.error(format!("task: {e}")),
        }
    }
    let t_end = now_ns();
    let w1 = unix_now();
    let bench_cpu = cpu0.zip(process_cpu_s()).map(|(a, b)| b - a);
    let redis1 = stats.counters().await?;
    let cmds = delta(&before, &stats.snapshot().await?);
    let (overlap_count, token_regressions) = per_key_checks(&mut recs);
    let total = len64(&recs);
    let win: Vec<&KeyRec> = recs.iter().filter(|r| r.acq <= deadline).collect();
    let waits: Vec<u64> = win.iter().map(|r| r.acq - r.want).collect();
    // Acquire + release: the hold itself is not part of an operation's cost.
    let lat: Vec<u64> = win
        .iter()
        .map(|r| (r.acq - r.want) + (r.released - r.rel_start))
        .collect();
    let mut per_worker = vec![0u64; workers];
    let mut keys_used = vec![false; keys.len()];
    for r in &win {
        per_worker[r.worker] += 1;
        keys_used[r.key] = true;
    }
    let n = len64(&win);
    let errors = sh
        .errors
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let v = json!({
        "workers": workers,
        "keys": keys.len(),
        "keys_used": keys_used.iter().filter(|&&u| u).count(),
        "hold_ms": duration_ms(hold),
        "duration_s": duration.as_secs_f64(),
        "acquisitions": n,
        "acquisitions_total": total,
        "acq_per_s": per_second(n, window),
        "lat_p50_us": us(pct(&lat, 50)),
        "lat_p99_us": us(pct(&lat, 99)),
        "lat_max_us": us(lat.iter().max().copied()),
        "wait_p50_us": us(pct(&waits, 50)),
        "wait_p99_us": us(pct(&waits, 99)),
        "wait_max_us": us(waits.iter().max().copied()),
        "worker_acq_min": per_worker.iter().min(),
        "worker_acq_max": per_worker.iter().max(),
        "busy_waits": sh.busy_waits.load(Ordering::Relaxed),
        "acquire_failures": sh.failures.load(Ordering::Relaxed),
        "violations": sh.violations.load(Ordering::Relaxed),
        "overlaps": overlap_count,
        "fencing_token_regressions": token_regressions,
        "errors": errors,
        "error_count": sh.error_count.load(Ordering::Relaxed),
        "redis_cmds": cmds.total,
        "cmds_per_acq": ratio(cmds.total, total, 2),
        "cmd_breakdown": cmds.breakdown,
        "cmds_per_instance": cmds.per_instance,
        "overrun_s": secs_ms(t_end.saturating_sub(deadline)),
        "window_unix": [w0, w1],
    });
    let mut m = into_map(v);
    m.extend(cpu_fields(bench_cpu, &redis0, &redis1, total));
    Ok(m)
}

/// CPU used while the S5 workers ran (until the last one stopped) by the
/// bench and by each instance, per acquisition, and the socket reads Redis
/// needed per acquisition (2 requests each: fewer reads = bigger pipelined
/// batches).
fn cpu_fields(
    bench_cpu: Option<f64>,
    before: &[ServerCounters],
    after: &[ServerCounters],
    acquisitions: u64,
) -> Map<String, Value> {
    let redis_cpu: Vec<f64> = before
        .iter()
        .zip(after)
        .map(|(a, b)| b.cpu_s - a.cpu_s)
        .collect();
    let reads: Option<u64> = before
        .iter()
        .zip(after)
        .map(|(a, b)| Some(b.reads?.saturating_sub(a.reads?)))
        .sum();
    into_map(json!({
        "bench_cpu_s": bench_cpu.map(round_ms),
        "redis_cpu_s": redis_cpu.iter().copied().map(round_ms).collect::<Vec<_>>(),
        "cpu_us_per_acq": {
            "bench": bench_cpu.map_or(Value::Null, |c| cpu_us_per(c, acquisitions)),
            "redis": cpu_us_per(redis_cpu.iter().sum(), acquisitions),
        },
        "redis_reads_per_acq": reads.map_or(Value::Null, |r| ratio(r, acquisitions, 3)),
    }))
}

#[cfg(test)]
mod tests {
    use super::XorShift;

    #[test]
    fn xorshift_picks_every_key_about_equally() {
        let mut rng = XorShift::new(0);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[rng.below(10)] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_000..11_000).contains(&c)),
            "{counts:?}"
        );
        assert_ne!(XorShift::new(1).next(), XorShift::new(2).next());
    }
}
