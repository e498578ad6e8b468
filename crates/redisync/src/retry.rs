//! [`AcquireRetry`]: how a waiting acquisition rides out a connection blip
//! (a reset connection, a failover, a Redis restart), and the plain-words
//! error it ends with when its wait runs out first.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};

/// How a *waiting* acquisition (`lock()`, `try_lock` with a wait, a
/// semaphore's `acquire`, `run_locked`, `Leader::campaign`, ...) and a
/// latch's `wait` / `wait_timeout` (which only read) ride out
/// a connection blip: an attempt that fails with a connection error, a
/// timeout or a server that is loading or read-only is tried again, after a
/// pause, while the wait has time left and the client is open; the client
/// reconnects meanwhile (see [`ReconnectPolicy`](crate::ReconnectPolicy),
/// which is about the connection, not the acquisition).
///
/// The pauses grow from `min_delay`, doubling up to `max_delay`, each one
/// drawn at random between 1 ms and that bound ("full jitter": clients that
/// lost the same server do not come back in step), and never past the
/// wait's deadline. An attempt whose outcome is unknown (it may have been
/// granted) is undone before the next one is sent, so one acquisition never
/// holds twice.
///
/// A zero wait (`try_lock(Duration::ZERO, ..)`) answers at once, with the
/// error. When the deadline passes (or [`AcquireRetry::max_outage`] does)
/// the call fails with the last error, in plain words naming the address:
/// `Redis at 127.0.0.1:6379/0 unreachable for 2.1 s while waiting for
/// lock "jobs": connection reset by peer`.
///
/// ```
/// use std::time::Duration;
/// use redisync::AcquireRetry;
/// let retry = AcquireRetry::exponential(Duration::from_millis(20), Duration::from_millis(500))
///     .max_outage(Duration::from_secs(30));
/// # let _ = retry;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct AcquireRetry {
    min_delay: Duration,
    max_delay: Duration,
    max_outage: Option<Duration>,
    enabled: bool,
}

impl Default for AcquireRetry {
    /// 50 ms doubling up to 1 s (full jitter), for as long as the wait
    /// lasts (`lock()`: until Redis is back or the client shuts down).
    fn default() -> Self {
        AcquireRetry::exponential(Duration::from_millis(50), Duration::from_secs(1))
    }
}

/// Bounds of [`AcquireRetry`]'s settings.
const MIN_RETRY_DELAY: Duration = Duration::from_millis(1);
const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);
const MAX_OUTAGE: Duration = Duration::from_secs(366 * 24 * 3600);

impl AcquireRetry {
    /// Pauses from `min_delay` doubling up to `max_delay` (full jitter),
    /// for as long as the wait lasts. Checked at connect: `min_delay` at
    /// least 1 ms, `max_delay` at most 60 s, and `min_delay <= max_delay`.
    pub fn exponential(min_delay: Duration, max_delay: Duration) -> AcquireRetry {
        AcquireRetry {
            min_delay,
            max_delay,
            max_outage: None,
            enabled: true,
        }
    }

    /// No retries: the first connection error ends the call, as a zero
    /// wait does.
    pub fn never() -> AcquireRetry {
        AcquireRetry {
            enabled: false,
            ..AcquireRetry::default()
        }
    }

    /// Gives up once Redis has been unreachable for `outage` in a row,
    /// even if the wait has time left (`lock()` has no deadline: without
    /// this it waits until Redis is back or the client shuts down). Checked
    /// at connect: more than zero, at most 366 days.
    pub fn max_outage(mut self, outage: Duration) -> AcquireRetry {
        self.max_outage = Some(outage);
        self
    }

    /// The first pause's bound.
    pub fn min_delay(&self) -> Duration {
        self.min_delay
    }

    /// The longest pause's bound.
    pub fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// The longest outage ridden out; `None`: as long as the wait lasts.
    pub fn outage_bound(&self) -> Option<Duration> {
        self.max_outage
    }

    /// Whether a waiting acquisition retries at all (false for
    /// [`AcquireRetry::never`]).
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    pub(crate) fn validate(&self) -> Result<()> {
        check_delays(
            "acquire_retry",
            (self.min_delay, self.max_delay),
            (MIN_RETRY_DELAY, MAX_RETRY_DELAY),
        )?;
        if let Some(outage) = self.max_outage {
            if outage.is_zero() || outage > MAX_OUTAGE {
                return Err(Error::InvalidArgument(format!(
                    "acquire_retry: max_outage must be more than zero and at most 366 days, got {outage:?}"
                )));
            }
        }
        Ok(())
    }

    /// The pause before retry number `n` (0: the first) of the waiter
    /// `salt` names: a duration between 1 ms and
    /// `min(max_delay, min_delay * 2^n)`, spread by a hash of both
    /// (waiters of different clients and names draw apart; a simulation
    /// with fixed client ids replays).
    pub(crate) fn pause(&self, n: u32, salt: u64) -> Duration {
        let bound = self
            .min_delay
            .saturating_mul(1u32 << n.min(20))
            .min(self.max_delay);
        let ms = u64::try_from(bound.as_millis()).unwrap_or(u64::MAX).max(1);
        Duration::from_millis(1 + spread(salt, n) % ms)
    }
}

/// Refuses a back-off's `(min_delay, max_delay)` outside `(floor, cap)`
/// or out of order, naming `setting` and the bound (`acquire_retry`,
/// `reconnect_policy`).
pub(crate) fn check_delays(
    setting: &str,
    (min_delay, max_delay): (Duration, Duration),
    (floor, cap): (Duration, Duration),
) -> Result<()> {
    if min_delay < floor {
        return Err(Error::InvalidArgument(format!(
            "{setting}: min_delay must be at least {floor:?}, got {min_delay:?}"
        )));
    }
    if max_delay > cap {
        return Err(Error::InvalidArgument(format!(
            "{setting}: max_delay must be at most {cap:?}, got {max_delay:?}"
        )));
    }
    if min_delay > max_delay {
        return Err(Error::InvalidArgument(format!(
            "{setting}: min_delay ({min_delay:?}) must not exceed max_delay ({max_delay:?})"
        )));
    }
    Ok(())
}

/// A hash of `salt` and `n` with std's fixed-key hasher (no dependency).
fn spread(salt: u64, n: u32) -> u64 {
    use std::hash::Hasher;
    let mut h = std::hash::DefaultHasher::new();
    h.write_u64(salt);
    h.write_u32(n);
    h.finish()
}

/// Whether `e` is a blip a waiting acquisition rides out: the connection
/// failed or was not there, a command timed out or was cancelled with its
/// connection, or the server was loading its data, read-only or without
/// its primary (a restart, a failover).
pub(crate) fn is_blip(e: &Error) -> bool {
    use crate::error::RedisErrorKind as K;
    match e.redis_kind() {
        Some(K::Io | K::Timeout | K::Canceled) => true,
        Some(K::Server | K::Cluster) => e.redis_message().is_some_and(|m| {
            [
                "LOADING",
                "READONLY",
                "MASTERDOWN",
                "CLUSTERDOWN",
                "TRYAGAIN",
            ]
            .iter()
            .any(|code| m.starts_with(code))
        }),
        _ => false,
    }
}

/// An outage an acquisition rides out: when it began, and how many pauses
/// it took.
#[derive(Debug, Default)]
pub(crate) struct Outage {
    since: Option<Instant>,
    pauses: u32,
    /// Spreads this waiter's pauses (see [`AcquireRetry::pause`]).
    salt: u64,
}

impl Outage {
    /// The outages of client `client`'s waiters on `key` (one contends at
    /// a time: the local gate). Not the task: task ids differ between two
    /// runs of one simulated seed.
    pub(crate) fn of(client: uuid::Uuid, key: &str) -> Outage {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        (client, key).hash(&mut h);
        Outage {
            salt: h.finish(),
            ..Outage::default()
        }
    }

    /// Redis answered: the outage (if any) is over.
    pub(crate) fn over(&mut self) {
        self.since = None;
        self.pauses = 0;
    }

    /// When the outage began (now, for its first error).
    pub(crate) fn began(&mut self) -> Instant {
        *self.since.get_or_insert_with(Instant::now)
    }

    /// The pause before the next retry, ending at `deadline` at the
    /// latest; `None` once the deadline or `policy`'s outage bound passed.
    pub(crate) fn next_pause(
        &mut self,
        policy: &AcquireRetry,
        deadline: Option<Instant>,
    ) -> Option<Instant> {
        let now = Instant::now();
        let began = self.began();
        let mut end = deadline;
        if let Some(outage) = policy.max_outage {
            let bound = began.checked_add(outage).unwrap_or(now);
            end = Some(end.map_or(bound, |d| d.min(bound)));
        }
        if end.is_some_and(|end| now >= end) {
            return None;
        }
        let pause = after(policy.pause(self.pauses, self.salt));
        self.pauses = self.pauses.saturating_add(1);
        Some(end.map_or(pause, |end| end.min(pause)))
    }

    /// How long the outage has lasted.
    pub(crate) fn lasted(&self) -> Duration {
        self.since.map_or(Duration::ZERO, |s| s.elapsed())
    }
}

/// `e` (a blip) in plain words for a caller whose acquisition of `what`
/// `name` ends with it: what happened, where, and for how long. The kind
/// stays the same (an IO error stays one, so is its outcome unknown); any
/// other error is returned as it is.
pub(crate) fn plain(e: Error, at: &[String], what: &str, name: &str, lasted: Duration) -> Error {
    let thing = format!("{what} {name:?}");
    plain_while(e, at, &format!("take {thing}"), &thing, lasted)
}

/// [`plain`] for a caller that was trying to `try_to` (a wait that ended
/// at once: "read latch \"x\"") or waiting for `wait_for` ("latch \"x\"")
/// for `lasted`.
pub(crate) fn plain_while(
    e: Error,
    at: &[String],
    try_to: &str,
    wait_for: &str,
    lasted: Duration,
) -> Error {
    let Error::Redis(crate::error::RedisFailure(inner)) = &e else {
        return e;
    };
    if !is_blip(&e) {
        return e;
    }
    let at = if at.is_empty() {
        "Redis".to_owned()
    } else {
        format!("Redis at {}", at.join(", "))
    };
    let details = crate::error::tidy(inner.details());
    let waited = if lasted.is_zero() {
        format!("while trying to {try_to}")
    } else {
        // Under a second in milliseconds: "0.0 s" would say it never waited.
        let how_long = if lasted < Duration::from_secs(1) {
            format!("{} ms", lasted.as_millis().max(1))
        } else {
            format!("{:.1} s", lasted.as_secs_f64())
        };
        format!("for {how_long} while waiting for {wait_for}")
    };
    let message = match e.redis_kind() {
        // The server's own reply (LOADING, READONLY, ...) comes first: its
        // code still tells the kind.
        Some(crate::error::RedisErrorKind::Server | crate::error::RedisErrorKind::Cluster) => {
            format!("{details} ({at}, {waited})")
        }
        Some(crate::error::RedisErrorKind::Timeout) => {
            format!("{at} did not answer {waited}: {details}")
        }
        _ => format!("{at} unreachable {waited}: {details}"),
    };
    Error::redis(fred::error::Error::new(inner.kind().clone(), message))
}

/// `d` from now, or (a `d` too long for the clock, as a restart guard built
/// with `Duration::MAX` gives) about thirty years from now, which is never
/// for a wait: saturating, never an overflow.
pub(crate) fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .or_else(|| now.checked_add(FAR_FUTURE))
        .unwrap_or(now)
}

/// What [`after`] gives for a duration the clock cannot add.
const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_stay_within_their_bounds() {
        let p = AcquireRetry::exponential(Duration::from_millis(10), Duration::from_millis(80));
        for n in 0..40 {
            let pause = p.pause(n, 7);
            assert!(pause >= Duration::from_millis(1), "{pause:?}");
            let bound = Duration::from_millis(10 * (1 << n.min(3)) + 1);
            assert!(pause <= bound, "{n}: {pause:?} > {bound:?}");
        }
    }

    #[test]
    fn absurd_settings_are_refused_naming_the_bound() {
        let ms = Duration::from_millis;
        for (policy, bound) in [
            (AcquireRetry::exponential(Duration::ZERO, ms(10)), "1ms"),
            (
                AcquireRetry::exponential(ms(10), Duration::from_secs(61)),
                "60s",
            ),
            (AcquireRetry::exponential(ms(20), ms(10)), "must not exceed"),
            (
                AcquireRetry::default().max_outage(Duration::ZERO),
                "366 days",
            ),
        ] {
            match policy.validate() {
                Err(Error::InvalidArgument(m)) => assert!(m.contains(bound), "{m}"),
                other => panic!("{policy:?}: {other:?}"),
            }
        }
        assert!(AcquireRetry::default().validate().is_ok());
        assert!(AcquireRetry::never().validate().is_ok());
    }

    #[test]
    fn the_plain_error_names_the_address_and_no_debug_dump() {
        let e = Error::redis(fred::error::Error::new(
            fred::error::ErrorKind::IO,
            "Os { code: 104, kind: ConnectionReset, message: \"Connection reset by peer\" }",
        ));
        let p = plain(
            e,
            &["127.0.0.1:6379/0".to_owned()],
            "lock",
            "x",
            Duration::from_millis(2100),
        );
        assert!(p.to_string().ends_with(
            "Redis at 127.0.0.1:6379/0 unreachable for 2.1 s while waiting for lock \"x\": Connection reset by peer"
        ), "{p}");
        assert_eq!(p.redis_kind(), Some(crate::RedisErrorKind::Io));
    }

    /// An outage under a second reads in milliseconds, never "0.0 s".
    #[test]
    fn a_short_outage_is_said_in_milliseconds() {
        let e = Error::redis(fred::error::Error::new(
            fred::error::ErrorKind::Timeout,
            "Request timed out.",
        ));
        let at = ["127.0.0.1:6379/0".to_owned()];
        let p = plain(e, &at, "lock", "x", Duration::from_millis(40));
        assert!(
            p.to_string()
                .contains("did not answer for 40 ms while waiting for lock"),
            "{p}"
        );
    }
}
