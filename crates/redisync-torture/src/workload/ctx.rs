//! What every step runs in: the task's context ([`Ctx`]: sections opened,
//! looked at and closed; the random plans; every call made and counted),
//! what the task shows the outside ([`TaskState`]), and how a call is cut.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{lock_id, Settings, Stats, LOOK_EVERY};
use crate::coverage::{Ended, Ending, Recorded};
use crate::history::{now_us, Access, Kind, Record, Section};
use crate::rng::Rng;

/// What a task shows the outside while it runs: its open sections (so a
/// hung or panicked task's sections still reach the checker) and its step.
#[derive(Default)]
pub(crate) struct TaskState {
    open: Mutex<BTreeMap<u64, Section>>,
    next_id: AtomicU64,
    /// What the current step does and since when (µs).
    step: Mutex<(String, u64)>,
    /// Set when the task returned normally.
    pub(crate) done: AtomicBool,
}

impl TaskState {
    /// The sections still open (a task that did not finish).
    pub(crate) fn open_sections(&self) -> Vec<Section> {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// The current step and since when.
    pub(crate) fn step(&self) -> (String, u64) {
        self.step
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn set_step(&self, what: String) {
        *self.step.lock().unwrap_or_else(PoisonError::into_inner) = (what, now_us());
    }
}

/// Everything a task's step needs.
pub(crate) struct Ctx {
    pub(crate) client: String,
    pub(crate) settings: Settings,
    pub(crate) stats: Arc<Stats>,
    pub(crate) sink: mpsc::UnboundedSender<Record>,
    pub(crate) state: Arc<TaskState>,
    pub(crate) rng: Rng,
}

/// One section being recorded.
pub(super) struct Rec {
    id: u64,
    pub(super) section: Section,
    looked: bool,
}

impl Ctx {
    /// A second flow of this task (same owner), recorded as a client of its
    /// own (`<client>~`), so the checker holds the two flows to exclusion.
    pub(super) fn twin(&mut self) -> Ctx {
        Ctx {
            client: format!("{}~", self.client),
            settings: self.settings,
            stats: self.stats.clone(),
            sink: self.sink.clone(),
            state: self.state.clone(),
            rng: Rng::new(self.rng.next_u64()),
        }
    }

    /// Opens a section; its first look sets its start.
    pub(super) fn open(
        &self,
        kind: Kind,
        name: &str,
        access: Access,
        token: u64,
        requested_us: u64,
        lease: Duration,
    ) -> Rec {
        let id = self.state.next_id.fetch_add(1, Ordering::Relaxed);
        let lock = lock_id(kind, name);
        {
            let mut newest = self
                .stats
                .newest_tokens
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let n = newest.entry(lock.clone()).or_default();
            *n = (*n).max(token);
        }
        let now = now_us();
        Rec {
            id,
            section: Section {
                lock,
                kind,
                access,
                client: self.client.clone(),
                guards: 1,
                lease_us: micros(lease),
                token,
                requested_us,
                start_us: now,
                end_us: now,
                valid_until_us: None,
                valid_at_end: false,
                lost_at_us: None,
            },
            looked: false,
        }
    }

    /// Looks at a section's guards (`valid` asks them) at the time read
    /// before asking: a look and the fenced write with it are one step.
    pub(super) fn look(&self, rec: &mut Rec, valid: impl FnOnce() -> bool) -> bool {
        let at = now_us();
        let ok = rec.section.lost_at_us.is_none() && valid();
        if !rec.looked {
            rec.looked = true;
            rec.section.start_us = at;
        }
        rec.section.end_us = at;
        rec.section.valid_at_end = ok;
        if ok {
            rec.section.valid_until_us = Some(at);
        } else if rec.section.lost_at_us.is_none() {
            rec.section.lost_at_us = Some(at);
        }
        self.state
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(rec.id, rec.section.clone());
        ok
    }

    /// Ends a section with a last look (its end write).
    pub(super) fn close(&self, mut rec: Rec, valid: impl FnOnce() -> bool) {
        self.look(&mut rec, valid);
        self.finish(rec);
    }

    /// Ends a section at its last look (work cancelled after it).
    pub(super) fn finish(&self, rec: Rec) {
        self.state
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&rec.id);
        let _ = self.sink.send(Record::Section(rec.section));
    }

    /// Holds for `d`, looking every few milliseconds (`valid` per section).
    /// Code that is running does not stop when its lease is lost: the
    /// holder carries on until its planned end.
    pub(super) async fn hold(
        &self,
        recs: &mut [&mut Rec],
        d: Duration,
        valid: &(dyn Fn(usize) -> bool + Sync),
    ) {
        let until = Instant::now() + d;
        for (i, r) in recs.iter_mut().enumerate() {
            self.look(r, || valid(i));
        }
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            tokio::time::sleep(left.min(LOOK_EVERY)).await;
            for (i, r) in recs.iter_mut().enumerate() {
                self.look(r, || valid(i));
            }
        }
    }

    pub(super) fn chance(&mut self, percent: u64) -> bool {
        self.rng.below(100) < percent
    }

    /// Mostly short holds, some long ones beyond the lease.
    pub(super) fn hold_time(&mut self) -> Duration {
        let roll = self.rng.below(100);
        if roll < 65 {
            Duration::from_millis(2 + self.rng.below(48))
        } else if roll < 90 {
            Duration::from_millis(50 + self.rng.below(200))
        } else {
            self.settings.lease.mul_f64(0.8 + 1.2 * self.rng.unit())
        }
    }

    /// 30 % fixed leases of 0.4 to 1 watchdog lease; else the watchdog.
    pub(super) fn lease(&mut self) -> Option<Duration> {
        self.chance(30)
            .then(|| self.settings.lease.mul_f64(0.4 + 0.6 * self.rng.unit()))
    }

    /// The lease a guard believes in at most: `lease` or the watchdog's.
    pub(super) fn belief(&self, lease: Option<Duration>) -> Duration {
        lease.unwrap_or(self.settings.lease)
    }

    /// A lease for `extend`: short (below the watchdog's) or long (up to
    /// 2.5 leases), at most `cap`.
    pub(super) fn extend_lease(&mut self, cap: Duration) -> Duration {
        let l = self.settings.lease;
        let d = if self.chance(50) {
            l.mul_f64(0.2 + 0.3 * self.rng.unit())
        } else {
            l.mul_f64(1.5 + self.rng.unit())
        };
        d.min(cap)
    }

    /// How a call is made: awaited (`100 - cancel_percent` %), cut by a
    /// `timeout` of 0-30 ms (half the rest) or dropped after 1-6 polls.
    pub(super) fn how(&mut self, cancel_percent: u64) -> How {
        let roll = self.rng.below(100);
        self.how_of(roll, cancel_percent)
    }

    /// [`Ctx::how`] for a `roll` drawn already.
    pub(super) fn how_of(&mut self, roll: u64, cancel_percent: u64) -> How {
        if roll >= cancel_percent {
            How::Await
        } else if roll < cancel_percent / 2 {
            // A third cut right after the first poll: a call that answers
            // within a round trip is cut too.
            let budget = if self.chance(33) {
                0
            } else {
                self.rng.below(30)
            };
            How::Timeout(Duration::from_millis(budget))
        } else {
            How::Drop(1 + self.rng.below(6))
        }
    }

    /// A call cut by the workload's deadline `wait` when it would be
    /// awaited: for methods that wait without a bound (`lock`, `campaign`,
    /// `wait`).
    pub(super) fn bounded(how: How, wait: Duration) -> How {
        match how {
            How::Await => How::Timeout(wait),
            other => other,
        }
    }

    /// Calls `op` (its future `fut`) as `how` says, counting how it ended
    /// (every call of the workload goes through here or [`Ctx::recorded`]);
    /// `None` when it was cut.
    pub(super) async fn call<F>(&mut self, op: &'static str, how: How, fut: F) -> Option<F::Output>
    where
        F: Future,
        F::Output: Ended,
    {
        match how {
            How::Await => Some(self.recorded(op, fut).await),
            How::Timeout(budget) => {
                let cut = Recorded::new(&self.stats.coverage, op, fut, Ending::Timeout);
                tokio::time::timeout(budget, cut).await.ok()
            }
            How::Drop(polls) => {
                let cut = Recorded::new(&self.stats.coverage, op, fut, Ending::Dropped);
                poll_then_drop(cut, polls, &mut self.rng).await
            }
        }
    }

    /// An awaited call of `op`, counted; dropped by whoever holds it, it
    /// counts as dropped.
    pub(super) fn recorded<F>(&self, op: &'static str, fut: F) -> Recorded<F>
    where
        F: Future,
        F::Output: Ended,
    {
        Recorded::new(&self.stats.coverage, op, fut, Ending::Dropped)
    }
}

/// How a call is made (see [`Ctx::call`]).
#[derive(Debug, Clone, Copy)]
pub(super) enum How {
    Await,
    /// Cut by a `timeout` of this budget.
    Timeout(Duration),
    /// Dropped after at most this many polls.
    Drop(u64),
}

pub(super) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Polls `fut` at most `polls` times, with short pauses between (spurious
/// polls included), then drops it.
pub(super) async fn poll_then_drop<F: Future>(
    fut: F,
    polls: u64,
    rng: &mut Rng,
) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    for _ in 0..polls {
        let ready = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await;
        if let Poll::Ready(v) = ready {
            return Some(v);
        }
        tokio::time::sleep(Duration::from_millis(rng.below(6))).await;
    }
    None
}

/// `real` in real time, `simulated` on the virtual clock (no machine load
/// to allow for).
pub(super) fn by_clock<T>(real: T, simulated: T) -> T {
    if crate::is_virtual_clock() {
        simulated
    } else {
        real
    }
}
