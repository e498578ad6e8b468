//! The arithmetic of Redlock, kept free of I/O so it can be tested alone:
//! quorum size, clock drift, validity time, and the random retry delays
//! (full jitter) of both `Redlock` and `MultiLock`.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The fixed part of the clock drift allowance (Redis docs, node-redlock,
/// redsync, rslock all use 2 ms).
pub(crate) const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// Votes needed out of `nodes`: a strict majority, `nodes / 2 + 1`.
pub(crate) fn quorum(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// Clock drift allowed for a lease: `lease * factor + 2 ms`.
///
/// `factor` must be finite and in `[0, 1)` (the builder checks it).
pub(crate) fn drift(lease: Duration, factor: f64) -> Duration {
    lease.mul_f64(factor.clamp(0.0, 1.0)) + DRIFT_FLOOR
}

/// Time left of a lease granted by a majority: `lease - elapsed - drift`,
/// where `elapsed` runs from the start of the attempt that won the majority.
/// `None` when nothing is left (the attempt took too long for its lease).
pub(crate) fn validity(lease: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    lease
        .checked_sub(elapsed)?
        .checked_sub(drift)
        .filter(|v| !v.is_zero())
}

/// The `k`-th largest value (1-based) of `values`, `None` when there are
/// fewer than `k`. With `k` = quorum over the lease ends of the nodes still
/// held, this is when fewer than a quorum will be left.
pub(crate) fn kth_largest<T: Ord + Copy>(values: &mut [T], k: usize) -> Option<T> {
    if k == 0 || values.len() < k {
        return None;
    }
    values.sort_unstable_by(|a, b| b.cmp(a));
    Some(values[k - 1])
}

/// Upper bound of the `round`-th retry delay (round 0 is the first retry):
/// `base * 2^round`, at most `cap`. Full jitter then picks uniformly below it.
pub(crate) fn backoff_bound(base: Duration, round: u32, cap: Duration) -> Duration {
    base.checked_mul(1u32 << round.min(16))
        .unwrap_or(cap)
        .min(cap)
}

/// A small, lock-free xorshift64* generator for retry jitter: good enough to
/// spread competing clients apart, not for anything secret. Seeded from the
/// process's random hash keys and the clock, so no extra dependency.
#[derive(Debug)]
pub(crate) struct Jitter(AtomicU64);

impl Jitter {
    pub(crate) fn new() -> Jitter {
        if let Some(seed) = virtual_clock::next_seed() {
            return Jitter::with_seed(seed);
        }
        let mut h = RandomState::new().build_hasher();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        h.write_u128(nanos);
        Jitter::with_seed(h.finish())
    }

    pub(crate) fn with_seed(seed: u64) -> Jitter {
        // xorshift must not start at zero.
        Jitter(AtomicU64::new(seed | 1))
    }

    pub(crate) fn next_u64(&self) -> u64 {
        let step = |mut x: u64| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x
        };
        let prev = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |x| Some(step(x)))
            .unwrap_or_else(|x| x);
        step(prev).wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Full jitter: uniform in `[0, bound)` (zero when `bound` is zero).
    pub(crate) fn below(&self, bound: Duration) -> Duration {
        let nanos = u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX);
        if nanos == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.next_u64() % nanos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn quorum_is_a_strict_majority() {
        let got: Vec<usize> = (1..=7).map(quorum).collect();
        assert_eq!(got, [1, 2, 2, 3, 3, 4, 4]);
        for n in 1..100 {
            assert!(2 * quorum(n) > n, "two quorums of {n} must intersect");
            assert!(quorum(n) <= n);
        }
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(Duration::from_secs(10), 0.01), 102 * MS);
        assert_eq!(drift(Duration::from_secs(30), 0.01), 302 * MS);
        assert_eq!(drift(Duration::ZERO, 0.01), 2 * MS);
        assert_eq!(drift(Duration::from_secs(1), 0.0), 2 * MS);
        // Out-of-range factors never panic.
        assert_eq!(drift(Duration::from_secs(1), -1.0), 2 * MS);
    }

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        let lease = Duration::from_secs(10);
        let d = drift(lease, 0.01);
        assert_eq!(validity(lease, 50 * MS, d), Some(9848 * MS));
        assert_eq!(validity(lease, Duration::ZERO, d), Some(9898 * MS));
    }

    #[test]
    fn validity_never_underflows() {
        // rslock #9 / redlock-rs: usize underflow on short leases.
        let lease = 10 * MS;
        assert_eq!(validity(lease, 8 * MS, 2 * MS), None);
        assert_eq!(validity(lease, 9 * MS, 2 * MS), None);
        assert_eq!(validity(lease, 20 * MS, 2 * MS), None);
        assert_eq!(validity(lease, Duration::ZERO, 20 * MS), None);
        assert_eq!(validity(Duration::ZERO, Duration::ZERO, 2 * MS), None);
        assert_eq!(validity(lease, 7 * MS, 2 * MS), Some(MS));
    }

    #[test]
    fn kth_largest_picks_the_quorum_edge() {
        let mut v = [5, 1, 9, 3, 7];
        assert_eq!(kth_largest(&mut v, 1), Some(9));
        assert_eq!(kth_largest(&mut v, 3), Some(5));
        assert_eq!(kth_largest(&mut v, 5), Some(1));
        assert_eq!(kth_largest(&mut v, 6), None);
        assert_eq!(kth_largest(&mut v, 0), None);
        assert_eq!(kth_largest::<u8>(&mut [], 1), None);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let cap = 100 * MS;
        let got: Vec<Duration> = (0..6).map(|r| backoff_bound(5 * MS, r, cap)).collect();
        assert_eq!(got, [5 * MS, 10 * MS, 20 * MS, 40 * MS, 80 * MS, 100 * MS]);
        assert_eq!(backoff_bound(5 * MS, 1000, cap), cap);
        assert_eq!(backoff_bound(Duration::MAX, 3, cap), cap);
    }

    #[test]
    fn jitter_stays_below_its_bound_and_spreads() {
        let j = Jitter::with_seed(42);
        let bound = 200 * MS;
        let draws: Vec<Duration> = (0..10_000).map(|_| j.below(bound)).collect();
        assert!(draws.iter().all(|d| *d < bound));
        // Each fifth of the range gets roughly a fifth of the draws.
        let mut buckets = [0u32; 5];
        for d in &draws {
            let i = usize::try_from(d.as_nanos() * 5 / bound.as_nanos()).unwrap();
            buckets[i] += 1;
        }
        assert!(
            buckets.iter().all(|&b| (1700..2300).contains(&b)),
            "{buckets:?}"
        );
        assert_eq!(j.below(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn jitter_seeds_differ() {
        let a = Jitter::new();
        let b = Jitter::new();
        let xs: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..4).map(|_| b.next_u64()).collect();
        assert_ne!(xs, ys);
        assert_ne!(Jitter::with_seed(0).next_u64(), 0);
    }
}

/// This machine's wall clock, in microseconds since the Unix epoch (the
/// token floor of a Redlock), or the virtual one of a simulation.
pub(crate) fn wall_clock_us() -> u64 {
    if let Some(us) = virtual_clock::now_us() {
        return us;
    }
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A simulation's wall clock and jitter seeds (feature `simulation`).
pub(crate) mod virtual_clock {
    #[cfg(feature = "simulation")]
    thread_local! {
        /// Where the virtual clock began, and its wall-clock reading then;
        /// the next jitter seed.
        static CLOCK: std::cell::Cell<Option<(tokio::time::Instant, u64, u64)>> =
            const { std::cell::Cell::new(None) };
    }

    /// Makes this thread's Redlocks read tokio's clock as the wall clock,
    /// starting at `start_us` now, and seed their jitter from `seed`.
    #[cfg(feature = "simulation")]
    pub(crate) fn use_virtual_clock(start_us: u64, seed: u64) {
        CLOCK.set(Some((tokio::time::Instant::now(), start_us, seed)));
    }

    #[cfg(feature = "simulation")]
    pub(crate) fn now_us() -> Option<u64> {
        CLOCK.get().map(|(at, start, _)| {
            start.saturating_add(u64::try_from(at.elapsed().as_micros()).unwrap_or(u64::MAX))
        })
    }

    #[cfg(feature = "simulation")]
    pub(crate) fn next_seed() -> Option<u64> {
        let (at, start, seed) = CLOCK.get()?;
        let next = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        CLOCK.set(Some((at, start, next)));
        Some(next)
    }

    #[cfg(not(feature = "simulation"))]
    pub(crate) fn now_us() -> Option<u64> {
        None
    }

    #[cfg(not(feature = "simulation"))]
    pub(crate) fn next_seed() -> Option<u64> {
        None
    }
}
