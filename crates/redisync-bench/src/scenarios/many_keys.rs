//! S5: workers loop over keys picked at random, on one server or a
//! cluster; exclusion and tokens checked per key, CPU per acquisition.

use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{duration_ms, into_map, release, warm_up, Target, CALL_WAIT};
use crate::redis_stats::{delta, RedisStats, ServerCounters};
use crate::stats::{
    count64, cpu_us_per, len64, nanos, now_ns, overlaps, pct, per_second, process_cpu_s, ratio,
    round_ms, secs_ms, unix_now, us,
};

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
