//! S1: one task acquires and releases (awaited, or by dropping the guard),
//! uncontended.

use serde_json::{json, Map, Value};
use std::time::Duration;

use super::{into_map, release, warm_up, Handle, Target, CALL_WAIT};
use crate::redis_stats::{delta, RedisStats};
use crate::stats::{
    cpu_us_per, len64, nanos, now_ns, pct, per_second, process_cpu_s, ratio, secs_ms, unix_now, us,
};

/// Uncounted acquire/release pairs before the S1 window.
const S1_WARMUP: usize = 50;

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
