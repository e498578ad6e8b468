//! Clocks and statistics: monotonic nanosecond timestamps, nearest-rank
//! percentiles, rounding for the JSON output and the overlap check.
//!
//! All integer-to-float conversions of the crate live here. Durations in
//! nanoseconds of a benchmark run (well below 2^53) convert to `f64` exactly,
//! so `cast_precision_loss` is allowed for this module.
#![allow(clippy::cast_precision_loss)]

use serde_json::{json, Value};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

static BASE: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds since the first call, from the monotonic clock (`Instant`).
pub(crate) fn now_ns() -> u64 {
    nanos(BASE.get_or_init(Instant::now).elapsed())
}

/// A duration in whole nanoseconds (saturating; 2^64 ns is 584 years).
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Wall-clock time in Unix seconds with sub-millisecond precision.
pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// CPU time (user + system, all threads) this process has used so far, in
/// seconds, from `/proc/self/stat` (Linux; 10 ms ticks); `None` elsewhere.
pub(crate) fn process_cpu_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name (which may contain spaces): state is
    // field 3 of proc(5), utime 14, stime 15.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // USER_HZ, the unit of these fields, is 100 on Linux.
    Some(ticks as f64 / 100.0)
}

/// Microseconds of CPU per event, one decimal; `null` without events.
pub(crate) fn cpu_us_per(cpu_s: f64, events: u64) -> Value {
    if events == 0 {
        return Value::Null;
    }
    json!((cpu_s * 1e7 / events as f64).round() / 10.0)
}

/// Seconds rounded to milliseconds.
pub(crate) fn round_ms(s: f64) -> f64 {
    (s * 1000.0).round() / 1000.0
}

/// Nearest-rank percentile (`p` in percent, 1..=100) of unsorted samples.
pub(crate) fn pct(samples: &[u64], p: usize) -> Option<u64> {
    if samples.is_empty() {
        return None;
    }
    let mut s = samples.to_vec();
    s.sort_unstable();
    let rank = (p * s.len()).div_ceil(100).clamp(1, s.len());
    Some(s[rank - 1])
}

/// Nanoseconds as microseconds with one decimal; `null` when absent.
pub(crate) fn us(ns: Option<u64>) -> Value {
    match ns {
        Some(n) => json!((n as f64 / 100.0).round() / 10.0),
        None => Value::Null,
    }
}

/// Nanoseconds as seconds, rounded to milliseconds.
pub(crate) fn secs_ms(ns: u64) -> f64 {
    (ns as f64 / 1e6).round() / 1000.0
}

/// `num / den` rounded to `decimals`; `null` when `den` is zero.
pub(crate) fn ratio(num: u64, den: u64, decimals: i32) -> Value {
    if den == 0 {
        return Value::Null;
    }
    let scale = 10f64.powi(decimals);
    json!((num as f64 / den as f64 * scale).round() / scale)
}

/// Events per second, one decimal.
pub(crate) fn per_second(events: u64, elapsed_ns: u64) -> Value {
    if elapsed_ns == 0 {
        return Value::Null;
    }
    json!((events as f64 * 1e9 / elapsed_ns as f64 * 10.0).round() / 10.0)
}

/// Number of hold intervals `[start, end)` that begin before an earlier
/// interval has ended. Sorts `intervals` in place.
pub(crate) fn overlaps(intervals: &mut [(u64, u64)]) -> u64 {
    intervals.sort_unstable();
    let mut n = 0;
    let mut last_end: Option<u64> = None;
    for &(start, end) in intervals.iter() {
        last_end = Some(match last_end {
            Some(e) => {
                if start < e {
                    n += 1;
                }
                e.max(end)
            }
            None => end,
        });
    }
    n
}

/// A count as `u64` (lossless on every supported target).
pub(crate) fn count64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Length of a slice as `u64`.
pub(crate) fn len64<T>(v: &[T]) -> u64 {
    count64(v.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(pct(&v, 50), Some(50));
        assert_eq!(pct(&v, 99), Some(99));
        assert_eq!(pct(&v, 100), Some(100));
        assert_eq!(pct(&[7], 99), Some(7));
        assert_eq!(pct(&[3, 1, 2], 50), Some(2));
        assert_eq!(pct(&[], 50), None);
    }

    #[test]
    fn rounding() {
        assert_eq!(us(Some(123_456)), json!(123.5));
        assert_eq!(us(None), Value::Null);
        assert_eq!(ratio(1, 3, 2), json!(0.33));
        assert_eq!(ratio(1, 0, 2), Value::Null);
        assert_eq!(per_second(5, 2_000_000_000), json!(2.5));
        assert!((secs_ms(1_234_567_890) - 1.235).abs() < 1e-9);
        assert_eq!(cpu_us_per(1.5, 100_000), json!(15.0));
        assert_eq!(cpu_us_per(1.5, 0), Value::Null);
        assert!((round_ms(1.234_56) - 1.235).abs() < 1e-9);
        assert!(process_cpu_s().is_some_and(|s| s >= 0.0));
    }

    #[test]
    fn overlap_check() {
        assert_eq!(overlaps(&mut [(0, 10), (10, 20), (20, 30)]), 0);
        assert_eq!(overlaps(&mut [(10, 20), (0, 11)]), 1);
        assert_eq!(overlaps(&mut [(0, 100), (10, 20), (30, 40)]), 2);
    }
}
