//! S2 and S3: workers contend for one key, in a loop for a while (S2) or
//! each once with a wait limit (S3); the hand-off and fairness figures.

use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{duration_ms, into_map, release, simulated_work, Target, CALL_WAIT};
use crate::redis_stats::{delta, RedisStats};
use crate::stats::{
    count64, len64, nanos, now_ns, overlaps, pct, per_second, ratio, secs_ms, unix_now, us,
};

/// S3 reports the commands executed in the first holder's hold time.
const EARLY_WINDOW: Duration = Duration::from_millis(300);
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
