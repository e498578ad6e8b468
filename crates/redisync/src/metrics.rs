//! Counters, histograms and gauges through the `metrics` facade (cargo
//! feature `metrics`; without it every call here is empty). The names and
//! labels are the table of docs/operating.md ("Metrics"); the engine calls these at its
//! one acquire loop, its guard core and its watchdog, so every primitive
//! reports the same way.

// Without the feature the methods only drop their arguments.
#![cfg_attr(not(feature = "metrics"), allow(clippy::unused_self))]

use std::time::Duration;

use tokio::time::Instant;

/// Counter: acquisitions granted (re-entries included).
pub(crate) const ACQUISITIONS: &str = "redisync_acquisitions_total";
/// Counter: acquisitions whose wait ran out.
pub(crate) const TIMEOUTS: &str = "redisync_acquire_timeouts_total";
/// Counter: acquisitions dropped while waiting.
pub(crate) const CANCELLATIONS: &str = "redisync_acquire_cancellations_total";
/// Counter: acquisitions that failed with an error.
pub(crate) const ERRORS: &str = "redisync_acquire_errors_total";
/// Counter: holds lost while a guard was alive.
pub(crate) const LOST: &str = "redisync_locks_lost_total";
/// Counter: watchdog renewals that extended a hold.
pub(crate) const RENEWALS: &str = "redisync_renewals_total";
/// Counter: watchdog renewals that failed (Redis unreachable, too few
/// replicas); retried next period.
pub(crate) const RENEWAL_FAILURES: &str = "redisync_renewal_failures_total";
/// Counter: a parked waiter woke, `by` = `message` (a release was heard)
/// or `lease_timer` (the holder's lease or a queue deadline ran out).
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) const WAKEUPS: &str = "redisync_wakeups_total";
/// Histogram: seconds from the call to the grant.
pub(crate) const WAIT_SECONDS: &str = "redisync_wait_seconds";
/// Histogram: seconds from the grant to the release (or the loss).
pub(crate) const HOLD_SECONDS: &str = "redisync_hold_seconds";
/// Gauge: holds alive in this process.
pub(crate) const HELD: &str = "redisync_held";
/// Gauge: acquisitions waiting in this process.
pub(crate) const WAITING: &str = "redisync_waiting";

/// The labels of one handle's metrics: `kind`, and `name` when the client
/// opted in (`ClientBuilder::metrics_lock_names`). The default labels
/// nothing: what it is attached to is not metered.
#[derive(Clone, Debug, Default)]
pub(crate) struct Labels {
    #[cfg(feature = "metrics")]
    labels: Option<std::sync::Arc<[metrics::Label]>>,
    /// Where lost holds are counted for the client's connection watches.
    losses: Option<std::sync::Arc<crate::connection::ConnectionSignal>>,
}

impl Labels {
    pub(crate) fn new(kind: &'static str, name: Option<&str>) -> Labels {
        #[cfg(feature = "metrics")]
        {
            let mut labels = vec![metrics::Label::from_static_parts("kind", kind)];
            if let Some(name) = name {
                labels.push(metrics::Label::new("name", name.to_owned()));
            }
            Labels {
                labels: Some(labels.into()),
                losses: None,
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = (kind, name);
            Labels { losses: None }
        }
    }

    /// Counts lost holds in `losses` (see [`Labels::hold_lost`]).
    pub(crate) fn counting_losses(
        mut self,
        losses: std::sync::Arc<crate::connection::ConnectionSignal>,
    ) -> Labels {
        self.losses = Some(losses);
        self
    }

    /// A hold was found lost while a guard of it was alive: the `lost`
    /// counter, and the client's connection watches.
    pub(crate) fn hold_lost(&self) {
        self.count(LOST);
        if let Some(losses) = &self.losses {
            losses.hold_lost();
        }
    }

    /// Adds 1 to counter `name`.
    pub(crate) fn count(&self, name: &'static str) {
        #[cfg(feature = "metrics")]
        if let Some(labels) = &self.labels {
            metrics::counter!(name, labels.iter()).increment(1);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = name;
    }

    /// Adds 1 to the wake-up counter, by message or by the lease timer.
    pub(crate) fn woken(&self, by_message: bool) {
        #[cfg(feature = "metrics")]
        if let Some(labels) = &self.labels {
            let by = if by_message { "message" } else { "lease_timer" };
            let mut labels = labels.to_vec();
            labels.push(metrics::Label::from_static_parts("by", by));
            metrics::counter!(WAKEUPS, labels).increment(1);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = by_message;
    }

    fn record(&self, name: &'static str, d: Duration) {
        #[cfg(feature = "metrics")]
        if let Some(labels) = &self.labels {
            metrics::histogram!(name, labels.iter()).record(d.as_secs_f64());
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (name, d);
    }

    fn gauge(&self, name: &'static str, delta: f64) {
        #[cfg(feature = "metrics")]
        if let Some(labels) = &self.labels {
            metrics::gauge!(name, labels.iter()).increment(delta);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (name, delta);
    }
}

/// One acquisition call: waiting while it lives; dropped before
/// [`Acquisition::finish`], it was cancelled.
#[derive(Debug)]
pub(crate) struct Acquisition {
    labels: Labels,
    started: Instant,
    done: bool,
}

/// How an acquisition call ended.
pub(crate) enum Outcome {
    Acquired,
    TimedOut,
    Failed,
}

impl Acquisition {
    pub(crate) fn start(labels: &Labels) -> Acquisition {
        labels.gauge(WAITING, 1.0);
        Acquisition {
            labels: labels.clone(),
            started: Instant::now(),
            done: false,
        }
    }

    pub(crate) fn finish(mut self, outcome: &Outcome) {
        self.done = true;
        self.labels.gauge(WAITING, -1.0);
        match outcome {
            Outcome::Acquired => {
                self.labels.count(ACQUISITIONS);
                self.labels.record(WAIT_SECONDS, self.started.elapsed());
            }
            Outcome::TimedOut => self.labels.count(TIMEOUTS),
            Outcome::Failed => self.labels.count(ERRORS),
        }
    }
}

impl Drop for Acquisition {
    fn drop(&mut self) {
        if !self.done {
            self.labels.gauge(WAITING, -1.0);
            self.labels.count(CANCELLATIONS);
        }
    }
}

/// One hold (one fencing token): held while it lives, its hold time
/// recorded when it goes.
#[derive(Debug, Default)]
pub(crate) struct HoldMeter {
    pub(crate) labels: Labels,
    since: Option<Instant>,
}

impl HoldMeter {
    pub(crate) fn start(labels: &Labels) -> HoldMeter {
        labels.gauge(HELD, 1.0);
        HoldMeter {
            labels: labels.clone(),
            since: Some(Instant::now()),
        }
    }
}

impl Drop for HoldMeter {
    fn drop(&mut self) {
        if let Some(since) = self.since {
            self.labels.gauge(HELD, -1.0);
            self.labels.record(HOLD_SECONDS, since.elapsed());
        }
    }
}
