//! What a process's tasks counted, per kind ([`Counts`], the summary's
//! lines), and what they saw go wrong ([`Stats`]: error samples,
//! violations, the tokens, forces and count-downs later steps check
//! against).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::micros;
use crate::coverage::Recorder;
use crate::history::{now_us, Kind};

/// What the tasks of one kind did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Acquisitions (sections, re-entries not counted).
    pub acquired: u64,
    /// Acquisitions whose wait ran out while others held the lock.
    pub busy: u64,
    /// Acquisitions that failed (Redis down, timeouts, no quorum, ...).
    pub errors: u64,
    /// Releases that failed (mostly `NotHeld` after a lost lease).
    pub release_failed: u64,
    /// Acquisitions cancelled (timeout or future dropped) before they
    /// returned.
    pub cancelled: u64,
    /// Re-entries (nested guards on the same token).
    pub reentered: u64,
    /// `extend` calls that succeeded.
    pub extended: u64,
    /// Sections whose guards were released by another task.
    pub moved: u64,
    /// Downgrades (read side taken while writing), counted on `rw-read`;
    /// upgrades refused, counted on `rw-write`.
    pub special: u64,
    /// `hand_off()` calls that answered (`Lock`, `FairLock`).
    pub handed_off: u64,
}

/// The counter fields, in line order.
const COUNT_FIELDS: usize = 10;

impl Counts {
    fn fields(&self) -> [u64; COUNT_FIELDS] {
        [
            self.acquired,
            self.busy,
            self.errors,
            self.release_failed,
            self.cancelled,
            self.reentered,
            self.extended,
            self.moved,
            self.special,
            self.handed_off,
        ]
    }

    fn from_fields(f: [u64; COUNT_FIELDS]) -> Counts {
        Counts {
            acquired: f[0],
            busy: f[1],
            errors: f[2],
            release_failed: f[3],
            cancelled: f[4],
            reentered: f[5],
            extended: f[6],
            moved: f[7],
            special: f[8],
            handed_off: f[9],
        }
    }

    pub(crate) fn add(&mut self, other: Counts) {
        let mut sum = self.fields();
        for (s, o) in sum.iter_mut().zip(other.fields()) {
            *s += o;
        }
        *self = Counts::from_fields(sum);
    }

    /// `"C\t<kind>\t<field>..."`.
    pub(crate) fn to_line(self, kind: Kind) -> String {
        let fields: Vec<String> = self.fields().iter().map(u64::to_string).collect();
        format!("C\t{}\t{}", kind.name(), fields.join("\t"))
    }

    pub(crate) fn from_line(line: &str) -> Option<(Kind, Counts)> {
        let mut parts = line.split('\t');
        if parts.next()? != "C" {
            return None;
        }
        let kind = Kind::parse(parts.next()?)?;
        let mut f = [0; COUNT_FIELDS];
        for slot in &mut f {
            *slot = parts.next()?.parse().ok()?;
        }
        parts
            .next()
            .is_none()
            .then(|| (kind, Counts::from_fields(f)))
    }
}

/// Counters of one process, per kind, and what went wrong.
#[derive(Default)]
pub(crate) struct Stats {
    kinds: [[AtomicU64; COUNT_FIELDS]; Kind::ALL.len()],
    samples: Mutex<BTreeMap<Kind, Vec<String>>>,
    violations: Mutex<Vec<String>>,
    /// When a task last stalled its runtime thread (µs).
    last_stall_us: AtomicU64,
    /// Calls per operation and ending.
    pub(crate) coverage: Arc<Recorder>,
    /// Per lock (see [`Section::lock`](crate::history::Section::lock)), the newest fencing token a
    /// section of this process got.
    pub(super) newest_tokens: Mutex<BTreeMap<String, u64>>,
    /// Per lock, when a task of this process last asked to force it
    /// (`force_unlock`, `force_release`), µs.
    forced: Mutex<BTreeMap<String, u64>>,
    /// Per latch name: count-downs started, and answered `Ok`.
    count_downs: Mutex<BTreeMap<String, (u64, u64)>>,
}

/// Which counter of [`Counts`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Count {
    Acquired = 0,
    Busy,
    Errors,
    ReleaseFailed,
    Cancelled,
    Reentered,
    Extended,
    Moved,
    Special,
    HandedOff,
}

/// Error messages kept per kind for the summary.
const ERROR_SAMPLES: usize = 4;

impl Stats {
    pub(crate) fn bump(&self, kind: Kind, count: Count) {
        self.kinds[kind.index()][count as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn error(&self, kind: Kind, message: &str) {
        self.bump(kind, Count::Errors);
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        let samples = samples.entry(kind).or_default();
        let message = one_line(message);
        if samples.len() < ERROR_SAMPLES && !samples.contains(&message) {
            samples.push(message);
        }
    }

    /// Whether a task may stall its runtime thread now: at most once per
    /// `every` in a process (a stall holds up every task on its thread).
    pub(crate) fn may_stall(&self, every: Duration) -> bool {
        let now = now_us();
        let last = self.last_stall_us.load(Ordering::Relaxed);
        now.saturating_sub(last) >= micros(every)
            && self
                .last_stall_us
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Something the library must never do, seen by a task.
    pub(crate) fn violation(&self, what: &str) {
        self.violations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(one_line(what));
    }

    /// The newest token a section of `lock` got (0: none yet).
    pub(super) fn newest_token(&self, lock: &str) -> u64 {
        self.newest_tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(lock)
            .copied()
            .unwrap_or(0)
    }

    pub(super) fn count_down_started(&self, latch: &str) {
        self.count_downs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(latch.to_owned())
            .or_default()
            .0 += 1;
    }

    pub(super) fn count_down_answered(&self, latch: &str) {
        self.count_downs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(latch.to_owned())
            .or_default()
            .1 += 1;
    }

    /// A task is about to force `lock`.
    pub(super) fn forcing(&self, lock: &str) {
        self.forced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(lock.to_owned(), now_us());
    }

    /// When a task of this process last asked to force `lock` (0: never).
    pub(super) fn forced_at(&self, lock: &str) -> u64 {
        self.forced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(lock)
            .copied()
            .unwrap_or(0)
    }

    /// Count-downs of `latch` started, and answered `Ok`, so far.
    pub(super) fn count_downs(&self, latch: &str) -> (u64, u64) {
        self.count_downs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(latch)
            .copied()
            .unwrap_or_default()
    }

    pub(crate) fn counts(&self, kind: Kind) -> Counts {
        let k = &self.kinds[kind.index()];
        let mut f = [0; COUNT_FIELDS];
        for (slot, a) in f.iter_mut().zip(k) {
            *slot = a.load(Ordering::Relaxed);
        }
        Counts::from_fields(f)
    }

    pub(crate) fn samples(&self, kind: Kind) -> Vec<String> {
        self.samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&kind)
            .cloned()
            .unwrap_or_default()
    }

    pub(crate) fn violations(&self) -> Vec<String> {
        self.violations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

fn one_line(message: &str) -> String {
    message
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(300)
        .collect()
}
