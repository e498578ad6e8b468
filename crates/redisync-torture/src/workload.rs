//! The workload: what one step of a worker task does with the public API.
//!
//! Each task belongs to one [`Family`] and, step after step, picks a name
//! from [`NAMES`] (hash tags, colons, a name spelled like another lock's
//! key; every family uses the same names) and a plan at random:
//!
//! - the acquisition is awaited, or cancelled: a `timeout` with a tiny
//!   budget, or the future dropped after a random number of polls;
//! - `Lock`, `FairLock` and both `RwLock` sides re-enter at random moments
//!   (nested guards on one token, released in any order, one section);
//! - guards `extend` to short and long leases while the watchdog renews;
//! - the write side downgrades (read taken while writing, write released),
//!   and a reader asks for the write side: it must be refused at once;
//! - semaphores of 1, 2 and 3 permits are taken 1 or 2 permits at a time;
//! - `MultiLock` takes 2 or 3 `Lock` names in random order, against the
//!   `Lock` tasks on the same names;
//! - a section ends with `unlock`, by dropping the guards (released in the
//!   background), or by moving them to another task that releases them;
//! - the rest of the public API (module `ops`): the other acquisition
//!   forms, semaphore administration and force-release, fencing tokens,
//!   fenced values, latches, leaders' campaigns and watches, the queries,
//!   and every call after a client's shutdown.
//!
//! Every call goes through `Ctx::call` (or `Ctx::recorded`), which
//! counts how it ended (the coverage table).
//!
//! Every section is recorded ([`Section`]) while it runs, so that a task
//! that hangs or panics still leaves its open sections to the checker.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use redisync::leader::LeaderTerm;
use redisync::{
    run_locked, Client, FairLock, FairLockGuard, Leader, Lock, LockGuard, Outcome, ReadLock,
    RwLockGuard, Semaphore, SemaphorePermit, WriteLock,
};
use redisync_redlock::{MultiLock, MultiLockGuard, Redlock, RedlockGuard};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::coverage::{Ended, Ending, Recorded, Recorder};
use crate::history::{now_us, Access, Force, Kind, Pause, Probe, Record, Section, Step, Work};
use crate::rng::Rng;

mod ops;

/// The names every family takes: a hash tag inside, colons, and a name
/// spelled like the hold key of the `Lock` named `NAMES[0]`.
pub(crate) const NAMES: [&str; 3] = [
    "torture:a",
    "torture:{t}:b",
    "redisync:v1:lock:hold:{torture:a}",
];

/// The elections of the `Leader` tasks: locks of their own (a leader holds
/// its lock for its whole run, which would starve the `Lock` names).
pub(crate) const LEADER_NAMES: [&str; 2] = ["torture:lead", "torture:{t}:lead"];

/// The names of the restart-guarded client sets: every client that takes a
/// name must have the guard for it to hold, so they share none with the
/// others.
pub(crate) const GUARDED_NAMES: [&str; 3] = ["torture:g:a", "torture:{g}:b", "torture:g:c"];

/// The names of the replica-synced client sets (likewise).
pub(crate) const SYNCED_NAMES: [&str; 3] = ["torture:s:a", "torture:{s}:b", "torture:s:c"];

/// The count-down latch of the `Latch` tasks (see [`Handles::latch_of`]).
const LATCH: &str = "torture:latch";

/// Permits of the semaphore named `NAMES[i]` (and the others' `[i]`).
pub(crate) const SEMAPHORE_PERMITS: [u32; 3] = [1, 3, 2];

/// How long one acquisition waits before it counts as busy.
const WAIT: Duration = Duration::from_millis(1500);
/// How often a holder looks at its guards.
const LOOK_EVERY: Duration = Duration::from_millis(5);

/// A family of locks: the tasks of one family contend for its names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    Lock,
    Fair,
    Rw,
    Semaphore,
    Multi,
    Redlock,
    /// `run_locked` over the `Lock` names.
    Locked,
    /// `Leader::run` on the `Lock` names.
    Leader,
    /// A fresh client takes a few locks and is shut down holding them:
    /// `Client::shutdown` must return within about one command timeout.
    Shutdown,
    /// Count-down latches: set, counted down, waited for.
    Latch,
}

impl Family {
    pub(crate) const ALL: [Family; 10] = [
        Family::Lock,
        Family::Fair,
        Family::Rw,
        Family::Semaphore,
        Family::Multi,
        Family::Redlock,
        Family::Locked,
        Family::Leader,
        Family::Shutdown,
        Family::Latch,
    ];

    /// The families of the restart-guarded and replica-synced client sets:
    /// those on the main server alone (Redlock has a guard of its own).
    pub(crate) const GUARDED: [Family; 5] = [
        Family::Lock,
        Family::Fair,
        Family::Rw,
        Family::Semaphore,
        Family::Locked,
    ];

    /// Short task label prefix.
    pub(crate) fn short(self) -> &'static str {
        match self {
            Family::Lock => "l",
            Family::Fair => "f",
            Family::Rw => "w",
            Family::Semaphore => "s",
            Family::Multi => "m",
            Family::Redlock => "r",
            Family::Locked => "k",
            Family::Leader => "d",
            Family::Shutdown => "x",
            Family::Latch => "a",
        }
    }
}

/// The lock a section of `kind` on `name` holds (see [`Section::lock`]).
pub(crate) fn lock_id(kind: Kind, name: &str) -> String {
    let family = match kind {
        Kind::Lock | Kind::MultiLock | Kind::RunLocked | Kind::Leader => "lock",
        Kind::FairLock => "fair",
        Kind::RwRead | Kind::RwWrite => "rw",
        Kind::Semaphore => "sem",
        Kind::Redlock => "redlock",
    };
    format!("{family}/{name}")
}

/// Client settings shared by every process of a run.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Watchdog lease of every client (renewed every third of it).
    pub lease: Duration,
    /// Bound on each Redis command.
    pub(crate) command_timeout: Duration,
    /// Queue lease of the fair lock.
    pub(crate) queue_lease: Duration,
    /// Redlock node timeout.
    pub(crate) node_timeout: Duration,
    /// Sections (in percent) that end by dropping the guards.
    pub(crate) drop_percent: u64,
}

impl Settings {
    /// The settings of a run whose watchdog lease is `lease`, `drop_percent`
    /// of its sections ending by dropping their guards.
    pub fn new(lease: Duration, drop_percent: u64) -> Settings {
        Settings {
            lease,
            command_timeout: (lease / 2).max(Duration::from_millis(100)),
            queue_lease: lease * 2,
            node_timeout: Duration::from_millis(100),
            drop_percent,
        }
    }

    /// The longest lease a guard may get: `extend` goes up to 2.5 leases.
    pub fn max_lease(&self) -> Duration {
        self.lease.mul_f64(2.5)
    }

    /// The bound on each Redis command of every client.
    pub fn command_timeout(&self) -> Duration {
        self.command_timeout
    }
}

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
    /// Per lock (see [`Section::lock`]), the newest fencing token a
    /// section of this process got.
    newest_tokens: Mutex<BTreeMap<String, u64>>,
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
    fn newest_token(&self, lock: &str) -> u64 {
        self.newest_tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(lock)
            .copied()
            .unwrap_or(0)
    }

    fn count_down_started(&self, latch: &str) {
        self.count_downs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(latch.to_owned())
            .or_default()
            .0 += 1;
    }

    fn count_down_answered(&self, latch: &str) {
        self.count_downs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(latch.to_owned())
            .or_default()
            .1 += 1;
    }

    /// A task is about to force `lock`.
    fn forcing(&self, lock: &str) {
        self.forced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(lock.to_owned(), now_us());
    }

    /// When a task of this process last asked to force `lock` (0: never).
    fn forced_at(&self, lock: &str) -> u64 {
        self.forced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(lock)
            .copied()
            .unwrap_or(0)
    }

    /// Count-downs of `latch` started, and answered `Ok`, so far.
    fn count_downs(&self, latch: &str) -> (u64, u64) {
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
struct Rec {
    id: u64,
    section: Section,
    looked: bool,
}

impl Ctx {
    /// A second flow of this task (same owner), recorded as a client of its
    /// own (`<client>~`), so the checker holds the two flows to exclusion.
    fn twin(&mut self) -> Ctx {
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
    fn open(
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
    fn look(&self, rec: &mut Rec, valid: impl FnOnce() -> bool) -> bool {
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
    fn close(&self, mut rec: Rec, valid: impl FnOnce() -> bool) {
        self.look(&mut rec, valid);
        self.finish(rec);
    }

    /// Ends a section at its last look (work cancelled after it).
    fn finish(&self, rec: Rec) {
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
    async fn hold(
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

    fn chance(&mut self, percent: u64) -> bool {
        self.rng.below(100) < percent
    }

    /// Mostly short holds, some long ones beyond the lease.
    fn hold_time(&mut self) -> Duration {
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
    fn lease(&mut self) -> Option<Duration> {
        self.chance(30)
            .then(|| self.settings.lease.mul_f64(0.4 + 0.6 * self.rng.unit()))
    }

    /// The lease a guard believes in at most: `lease` or the watchdog's.
    fn belief(&self, lease: Option<Duration>) -> Duration {
        lease.unwrap_or(self.settings.lease)
    }

    /// A lease for `extend`: short (below the watchdog's) or long (up to
    /// 2.5 leases), at most `cap`.
    fn extend_lease(&mut self, cap: Duration) -> Duration {
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
    fn how(&mut self, cancel_percent: u64) -> How {
        let roll = self.rng.below(100);
        self.how_of(roll, cancel_percent)
    }

    /// [`Ctx::how`] for a `roll` drawn already.
    fn how_of(&mut self, roll: u64, cancel_percent: u64) -> How {
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

    /// Calls `op` (its future `fut`) as `how` says, counting how it ended
    /// (every call of the workload goes through here or [`Ctx::recorded`]);
    /// `None` when it was cut.
    async fn call<F>(&mut self, op: &'static str, how: How, fut: F) -> Option<F::Output>
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
    fn recorded<F>(&self, op: &'static str, fut: F) -> Recorded<F>
    where
        F: Future,
        F::Output: Ended,
    {
        Recorded::new(&self.stats.coverage, op, fut, Ending::Dropped)
    }
}

/// How a call is made (see [`Ctx::call`]).
#[derive(Debug, Clone, Copy)]
enum How {
    Await,
    /// Cut by a `timeout` of this budget.
    Timeout(Duration),
    /// Dropped after at most this many polls.
    Drop(u64),
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A held guard of any kind.
pub(crate) enum Guard {
    Lock(LockGuard),
    Fair(FairLockGuard),
    Rw(RwLockGuard),
    Semaphore(SemaphorePermit),
    Multi(MultiLockGuard),
    Redlock(RedlockGuard),
}

impl Guard {
    fn token(&self) -> u64 {
        match self {
            Guard::Lock(g) => g.fencing_token(),
            Guard::Fair(g) => g.fencing_token(),
            Guard::Rw(g) => g.fencing_token(),
            Guard::Semaphore(p) => p.fencing_token(),
            Guard::Multi(g) => g.fencing_tokens().first().copied().unwrap_or(0),
            Guard::Redlock(g) => g.fencing_token(),
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Guard::Lock(g) => g.is_lost(),
            Guard::Fair(g) => g.is_lost(),
            Guard::Rw(g) => g.is_lost(),
            Guard::Semaphore(p) => p.is_lost(),
            Guard::Multi(g) => g.is_lost(),
            Guard::Redlock(g) => g.is_lost(),
        }
    }

    /// `hand_off()` (of a `Lock` or `FairLock` guard: others do nothing).
    async fn hand_off(&mut self) -> Result<(), String> {
        let r = match self {
            Guard::Lock(g) => g.hand_off().await,
            Guard::Fair(g) => g.hand_off().await,
            _ => return Ok(()),
        };
        r.map_err(|e| e.to_string())
    }

    /// The operation of [`Guard::hand_off`]; `None` for kinds without one.
    fn hand_off_op(&self) -> Option<&'static str> {
        match self {
            Guard::Lock(_) => Some("LockGuard::hand_off"),
            Guard::Fair(_) => Some("FairLockGuard::hand_off"),
            _ => None,
        }
    }

    /// `extend` (of a kind that has one, see [`Guard::extend_op`]).
    async fn extend(&self, lease: Duration) -> Result<(), String> {
        match self {
            Guard::Lock(g) => g.extend(lease).await.map_err(|e| e.to_string()),
            Guard::Fair(g) => g.extend(lease).await.map_err(|e| e.to_string()),
            Guard::Rw(g) => g.extend(lease).await.map_err(|e| e.to_string()),
            Guard::Redlock(g) => g.extend(lease).await.map_err(|e| e.to_string()),
            Guard::Semaphore(p) => p.extend(lease).await.map_err(|e| e.to_string()),
            Guard::Multi(_) => Ok(()),
        }
    }

    /// The operation of [`Guard::extend`]; `None` for kinds without one.
    fn extend_op(&self) -> Option<&'static str> {
        Some(match self {
            Guard::Lock(_) => "LockGuard::extend",
            Guard::Fair(_) => "FairLockGuard::extend",
            Guard::Rw(_) => "RwLockGuard::extend",
            Guard::Redlock(_) => "RedlockGuard::extend",
            Guard::Semaphore(_) => "SemaphorePermit::extend",
            Guard::Multi(_) => return None,
        })
    }

    /// Resolves when the guard is known lost (kinds with `lost`, see
    /// [`Guard::lost_op`]; others at once).
    async fn lost(&self) {
        match self {
            Guard::Lock(g) => g.lost().await,
            Guard::Fair(g) => g.lost().await,
            Guard::Rw(g) => g.lost().await,
            Guard::Semaphore(p) => p.lost().await,
            Guard::Multi(_) | Guard::Redlock(_) => {}
        }
    }

    /// The operation of [`Guard::lost`]; `None` for kinds without one.
    fn lost_op(&self) -> Option<&'static str> {
        Some(match self {
            Guard::Lock(_) => "LockGuard::lost",
            Guard::Fair(_) => "FairLockGuard::lost",
            Guard::Rw(_) => "RwLockGuard::lost",
            Guard::Semaphore(_) => "SemaphorePermit::lost",
            Guard::Multi(_) | Guard::Redlock(_) => return None,
        })
    }

    /// The operation of [`Guard::release`].
    fn release_op(&self) -> &'static str {
        match self {
            Guard::Lock(_) => "LockGuard::unlock",
            Guard::Fair(_) => "FairLockGuard::unlock",
            Guard::Rw(_) => "RwLockGuard::unlock",
            Guard::Semaphore(_) => "SemaphorePermit::release",
            Guard::Multi(_) => "MultiLockGuard::unlock",
            Guard::Redlock(_) => "RedlockGuard::unlock",
        }
    }

    async fn release(self) -> Result<(), String> {
        match self {
            Guard::Lock(g) => g.unlock().await.map_err(|e| e.to_string()),
            Guard::Fair(g) => g.unlock().await.map_err(|e| e.to_string()),
            Guard::Rw(g) => g.unlock().await.map_err(|e| e.to_string()),
            Guard::Semaphore(p) => p.release().await.map_err(|e| e.to_string()),
            Guard::Multi(g) => g.unlock().await.map_err(|e| e.to_string()),
            Guard::Redlock(g) => g.unlock().await.map_err(|e| e.to_string()),
        }
    }
}

/// A lock to acquire.
#[derive(Clone)]
pub(crate) enum Target {
    Lock(Lock),
    Fair(FairLock),
    Read(ReadLock),
    Write(WriteLock),
    Semaphore(Semaphore, u32),
    Multi(MultiLock),
    Redlock(Redlock),
}

/// Why an acquisition failed.
struct Failed {
    text: String,
    upgrade_refused: bool,
    not_initialized: bool,
}

impl Failed {
    fn of(e: &redisync::Error) -> Failed {
        Failed {
            text: e.to_string(),
            upgrade_refused: matches!(e, redisync::Error::UpgradeNotSupported { .. }),
            not_initialized: matches!(e, redisync::Error::NotInitialized { .. }),
        }
    }

    fn text(e: &dyn std::fmt::Display) -> Failed {
        Failed {
            text: e.to_string(),
            upgrade_refused: false,
            not_initialized: false,
        }
    }
}

impl Target {
    /// The operation of [`Target::acquire`].
    fn op(&self) -> &'static str {
        match self {
            Target::Lock(_) => "Lock::try_lock",
            Target::Fair(_) => "FairLock::try_lock",
            Target::Read(_) => "ReadLock::try_lock",
            Target::Write(_) => "WriteLock::try_lock",
            Target::Semaphore(..) => "Semaphore::try_acquire",
            Target::Multi(_) => "MultiLock::try_lock",
            Target::Redlock(_) => "Redlock::try_lock",
        }
    }

    /// Acquires through [`Ctx::call`].
    async fn call(
        &self,
        ctx: &mut Ctx,
        how: How,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Option<Result<Option<Guard>, Failed>> {
        if !wait.is_zero() && ctx.chance(30) {
            return ops::acquire_form(ctx, self, how, wait, lease).await;
        }
        ctx.call(self.op(), how, self.acquire(wait, lease)).await
    }

    async fn acquire(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<Guard>, Failed> {
        match self {
            Target::Lock(l) => l
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Guard::Lock))
                .map_err(|e| Failed::of(&e)),
            Target::Fair(l) => l
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Guard::Fair))
                .map_err(|e| Failed::of(&e)),
            Target::Read(l) => l
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Guard::Rw))
                .map_err(|e| Failed::of(&e)),
            Target::Write(l) => l
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Guard::Rw))
                .map_err(|e| Failed::of(&e)),
            Target::Semaphore(s, permits) => match s.try_acquire(*permits, wait).await {
                Ok(p) => Ok(p.map(Guard::Semaphore)),
                Err(e) => Err(Failed::of(&e)),
            },
            Target::Multi(m) => m
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Guard::Multi))
                .map_err(|e| Failed::text(&e)),
            Target::Redlock(r) => r
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Guard::Redlock))
                .map_err(|e| Failed::text(&e)),
        }
    }
}

/// How an acquisition went.
enum Got {
    Guard(Guard),
    Busy,
    Cancelled,
    Failed(Failed),
}

/// Polls `fut` at most `polls` times, with short pauses between (spurious
/// polls included), then drops it.
async fn poll_then_drop<F: Future>(fut: F, polls: u64, rng: &mut Rng) -> Option<F::Output> {
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

/// Makes a fresh client of the main server, with the run's settings.
pub type Connect = std::sync::Arc<
    dyn Fn() -> std::pin::Pin<Box<dyn Future<Output = redisync::Result<Client>> + Send>>
        + Send
        + Sync,
>;

/// The handles of one task: one target set per name.
pub(crate) struct Handles {
    /// Makes a fresh client of the main server (`None`: no fresh clients).
    pub(crate) connect: Option<Connect>,
    names: [&'static str; 3],
    locks: Vec<Lock>,
    fair: Vec<FairLock>,
    rw: Vec<(ReadLock, WriteLock)>,
    semaphores: Vec<Semaphore>,
    redlocks: Vec<Redlock>,
    /// A second `Redlock` value over the same locks, per name: asked by a
    /// task that holds the first, it must not re-enter.
    redlock_twins: Vec<Redlock>,
    leaders: Vec<Leader>,
    /// What the steps of [`ops`] use.
    more: ops::More,
}

impl Handles {
    pub(crate) fn new(
        main: &Client,
        nodes: &[Client],
        settings: Settings,
        names: [&'static str; 3],
    ) -> Result<Handles, String> {
        let redlock = |name: &str| {
            Redlock::builder(nodes.iter().map(|c| c.lock(name)).collect())
                .max_lease(settings.max_lease())
                .node_timeout(settings.node_timeout)
                .build()
                .map_err(|e| e.to_string())
        };
        let (mut redlocks, mut redlock_twins) = (Vec::new(), Vec::new());
        for name in names {
            redlocks.push(redlock(name)?);
            redlock_twins.push(redlock(name)?);
        }
        Ok(Handles {
            connect: None,
            names,
            locks: names.iter().map(|n| main.lock(n)).collect(),
            fair: names
                .iter()
                .map(|n| main.fair_lock(n).with_queue_lease(settings.queue_lease))
                .collect(),
            rw: names
                .iter()
                .map(|n| {
                    let rw = main.rw_lock(n);
                    (rw.read(), rw.write())
                })
                .collect(),
            semaphores: names.iter().map(|n| main.semaphore(n)).collect(),
            redlocks,
            redlock_twins,
            leaders: LEADER_NAMES.iter().map(|n| main.leader(n)).collect(),
            more: ops::More::new(main, names, LATCH),
        })
    }

    /// The latch of the process `process` (the part of a client set's
    /// label before its dot): the waiters' check counts the count-downs of
    /// one process, so a process of its own has a latch of its own; the
    /// simulated processes share one (and one process's counters).
    pub(crate) fn latch_of(mut self, main: &Client, process: &str) -> Handles {
        if !crate::is_virtual_clock() {
            self.more = ops::More::new(main, self.names, &format!("{LATCH}:{process}"));
        }
        self
    }

    /// Sets every semaphore's permits where none are set (first use, or a
    /// server restarted empty).
    pub(crate) async fn init_semaphores(&self) {
        for (s, n) in self.semaphores.iter().zip(SEMAPHORE_PERMITS) {
            let _ = s.try_set_permits(n).await;
        }
    }
}

/// One step of a task of `family`.
pub(crate) async fn step(ctx: &mut Ctx, family: Family, h: &Handles) {
    let i = usize::try_from(ctx.rng.below(NAMES.len() as u64)).unwrap_or(0);
    if family != Family::Shutdown && ctx.chance(8) {
        ops::query(ctx, h, i).await;
    }
    match family {
        Family::Lock if ctx.chance(2) => {
            // Another holder's lock, most likely (or none).
            force(ctx, h.names[i], &h.locks[i]).await;
        }
        Family::Lock if ctx.chance(3) => ops::advance(ctx, h.names[i], &h.locks[i]).await,
        Family::Fair if ctx.chance(2) => {
            ops::force_other(ctx, Kind::FairLock, h.names[i], h, i).await;
        }
        Family::Rw if ctx.chance(2) => {
            ops::force_other(ctx, Kind::RwWrite, h.names[i], h, i).await;
        }
        Family::Semaphore if ctx.chance(25) => ops::semaphore_admin(ctx, h).await,
        Family::Latch => ops::latch(ctx, h).await,
        Family::Lock if ctx.chance(5) => {
            let t = Target::Lock(h.locks[i].clone());
            two_flows(ctx, h.names[i], Flow::Reentrant(Kind::Lock, t)).await;
        }
        Family::Lock => {
            let t = Target::Lock(h.locks[i].clone());
            reentrant(ctx, Kind::Lock, h.names[i], &t, Again::Reenter).await;
        }
        Family::Fair if ctx.chance(10) => {
            let t = Target::Fair(h.fair[i].clone());
            two_flows(ctx, h.names[i], Flow::Reentrant(Kind::FairLock, t)).await;
        }
        Family::Rw if ctx.chance(10) => {
            let flow = if ctx.chance(50) {
                Flow::Reentrant(Kind::RwWrite, Target::Write(h.rw[i].1.clone()))
            } else {
                Flow::Reader(h.rw[i].clone())
            };
            Box::pin(two_flows(ctx, h.names[i], flow)).await;
        }
        Family::Fair => {
            let t = Target::Fair(h.fair[i].clone());
            reentrant(ctx, Kind::FairLock, h.names[i], &t, Again::Reenter).await;
        }
        Family::Rw => Box::pin(rw(ctx, h.names[i], &h.rw[i])).await,
        Family::Semaphore => semaphore(ctx, i, &h.semaphores[i]).await,
        Family::Multi => multi(ctx, h).await,
        Family::Redlock => {
            let t = Target::Redlock(h.redlocks[i].clone());
            let twin = Target::Redlock(h.redlock_twins[i].clone());
            reentrant(ctx, Kind::Redlock, h.names[i], &t, Again::Refused(&twin)).await;
        }
        Family::Locked => {
            // Declares the family's total: set up again after an empty restart.
            let sem = h.semaphores[i].with_permits(SEMAPHORE_PERMITS[i]);
            locked(ctx, h.names[i], &h.locks[i], &sem).await;
        }
        Family::Shutdown => {
            if let Some(connect) = &h.connect {
                shutdown(ctx, connect, &h.more.client).await;
            }
        }
        Family::Leader => {
            let i = i % LEADER_NAMES.len();
            if ctx.chance(50) {
                ops::leader_step(ctx, LEADER_NAMES[i], &h.leaders[i], h).await;
            } else {
                leader(ctx, LEADER_NAMES[i], &h.leaders[i]).await;
            }
        }
    }
}

/// What a flow of [`two_flows`] does.
#[derive(Clone)]
enum Flow {
    /// [`reentrant`] on an exclusive kind.
    Reentrant(Kind, Target),
    /// [`reader`] on a read-write lock's sides.
    Reader((ReadLock, WriteLock)),
}

/// Two flows of one owner on one name: `join!` in one task, or a parent and
/// a spawned child run as the parent's owner (`Owner::current()` +
/// `Owner::scope`). When both ask at the same instant or both wait, they
/// take turns and never hold at once (the checker sees them as two
/// clients); nested calls within each flow still re-enter.
async fn two_flows(ctx: &mut Ctx, name: &'static str, flow: Flow) {
    async fn run(ctx: &mut Ctx, name: &'static str, flow: &Flow) {
        match flow {
            Flow::Reentrant(kind, t) => reentrant(ctx, *kind, name, t, Again::Reenter).await,
            Flow::Reader((read, write)) => reader(ctx, name, read, write).await,
        }
    }
    let mut twin = ctx.twin();
    if ctx.chance(50) {
        tokio::join!(run(ctx, name, &flow), run(&mut twin, name, &flow));
        return;
    }
    let child_flow = flow.clone();
    let child = tokio::spawn(redisync::Owner::current().scope(async move {
        run(&mut twin, name, &child_flow).await;
    }));
    run(ctx, name, &flow).await;
    if let Err(e) = child.await {
        ctx.stats.violation(&format!(
            "{}: a child flow run as its parent's owner failed: {e}",
            ctx.client
        ));
    }
}

/// Acquires `target`: awaited (70 %), under a tiny `timeout` (15 %), or
/// polled a few times and dropped (15 %).
///
/// ```text
/// roll:  0 .. cancel/2: timeout | .. cancel: polls, then dropped | .. 100: awaited
/// ```
async fn acquire(ctx: &mut Ctx, kind: Kind, target: &Target, lease: Option<Duration>) -> Got {
    acquire_within(ctx, kind, target, lease, WAIT, 30).await
}

/// [`acquire`] with another wait.
async fn acquire_within(
    ctx: &mut Ctx,
    kind: Kind,
    target: &Target,
    lease: Option<Duration>,
    wait: Duration,
    cancel_percent: u64,
) -> Got {
    let roll = ctx.rng.below(100);
    let outcome = if roll >= cancel_percent && ctx.chance(10) {
        // Zero wait: one attempt, answered within about a round trip.
        let asked_us = now_us();
        let got = target.call(ctx, How::Await, Duration::ZERO, lease).await;
        let _ = ctx.sink.send(Record::Probe(Probe {
            what: "try-zero".into(),
            client: ctx.client.clone(),
            asked_us,
            done_us: now_us(),
            bound_us: try_zero_bound_us(),
        }));
        got
    } else {
        let how = ctx.how_of(roll, cancel_percent);
        target.call(ctx, how, wait, lease).await
    };
    match outcome {
        None => {
            ctx.stats.bump(kind, Count::Cancelled);
            Got::Cancelled
        }
        Some(Ok(Some(g))) => {
            ctx.stats.bump(kind, Count::Acquired);
            Got::Guard(g)
        }
        Some(Ok(None)) => {
            ctx.stats.bump(kind, Count::Busy);
            Got::Busy
        }
        Some(Err(f)) => Got::Failed(f),
    }
}

/// After a failed acquisition: counts it and pauses a little.
async fn failed(ctx: &mut Ctx, kind: Kind, f: &Failed) {
    ctx.stats.error(kind, &f.text);
    let pause = 20 + ctx.rng.below(100);
    tokio::time::sleep(Duration::from_millis(pause)).await;
}

/// Releases `guards` in order: awaited, dropped, or moved to another task.
/// Returns whether every awaited release succeeded.
async fn let_go(ctx: &mut Ctx, kind: Kind, guards: Vec<Guard>, how: LetGo) {
    match how {
        LetGo::Drop => drop(guards),
        LetGo::Unlock => {
            for g in guards {
                if release(ctx, g).await.is_err() {
                    ctx.stats.bump(kind, Count::ReleaseFailed);
                }
            }
        }
        LetGo::Move => {
            ctx.stats.bump(kind, Count::Moved);
            let coverage = ctx.stats.coverage.clone();
            let other = tokio::spawn(async move {
                let mut failed = 0;
                for g in guards {
                    let op = g.release_op();
                    let released = Recorded::new(&coverage, op, g.release(), Ending::Dropped);
                    failed += u64::from(released.await.is_err());
                }
                failed
            });
            match other.await {
                Ok(n) => {
                    for _ in 0..n {
                        ctx.stats.bump(kind, Count::ReleaseFailed);
                    }
                }
                Err(e) => ctx.stats.violation(&format!(
                    "{}: a task releasing moved guards failed: {e}",
                    ctx.client
                )),
            }
        }
    }
}

/// Releases `g`: awaited, or (15 %) cut by a timeout or dropped after a
/// few polls (the guard is gone either way: a release not done is done in
/// the background). A cut release is no failed one.
async fn release(ctx: &mut Ctx, g: Guard) -> Result<(), String> {
    let how = ctx.how(15);
    let op = g.release_op();
    ctx.call(op, how, g.release()).await.unwrap_or(Ok(()))
}

#[derive(Debug, Clone, Copy)]
enum LetGo {
    Unlock,
    Drop,
    Move,
}

fn let_go_how(ctx: &mut Ctx) -> LetGo {
    if ctx.chance(ctx.settings.drop_percent) {
        LetGo::Drop
    } else if ctx.chance(15) {
        LetGo::Move
    } else {
        LetGo::Unlock
    }
}

/// What a section asks again while it holds.
enum Again<'a> {
    /// The same handle, which re-enters (nested guards on one token).
    Reenter,
    /// Another handle on the same lock, which must not grant while the
    /// task holds (a second `Redlock` value): a zero-wait try.
    Refused(&'a Target),
}

/// Now and then asks `twin` (another handle on the lock the task holds
/// with `token`) with a zero wait: granting it on the same token (a
/// re-entry) is a violation. A new token is no re-entry: the hold ran out.
async fn refused_while_held(ctx: &mut Ctx, kind: Kind, name: &str, twin: &Target, token: u64) {
    if !ctx.chance(20) {
        return;
    }
    let lease = ctx.lease();
    if let Some(Ok(Some(g))) = twin.call(ctx, How::Await, Duration::ZERO, lease).await {
        if g.token() != token {
            return;
        }
        ctx.stats.violation(&format!(
            "{}: a second {kind:?} value granted {name:?} (token {}) to the task that holds it (token {token})",
            ctx.client,
            g.token(),
        ));
    }
}

/// Now and then, before a section of `reentrant` lets go: the only guard
/// is handed off and the task asks again, or a lock holder force-unlocks
/// its own lock.
async fn before_release(
    ctx: &mut Ctx,
    kind: Kind,
    name: &str,
    target: &Target,
    guards: &mut [Vec<Guard>],
) {
    let only = guards.len() == 1 && guards[0].len() == 1;
    if matches!(kind, Kind::Lock | Kind::FairLock) && only && ctx.chance(10) {
        hand_off_then_ask(ctx, kind, name, target, &mut guards[0][0]).await;
    }
    if ctx.chance(10) {
        ops::query_held(ctx, target).await;
    }
    if only && ctx.chance(15) {
        let client = match target {
            Target::Lock(l) => Some(l.client()),
            Target::Fair(l) => Some(l.client()),
            _ => None,
        };
        if let Some(client) = client {
            let f = client.fenced(&format!("torture:fenced:{name}"));
            ops::fenced(ctx, &f, &guards[0][0]).await;
        }
    }
    if let (Target::Lock(lock), true) = (target, kind == Kind::Lock && ctx.chance(4)) {
        force_own(ctx, name, lock, guards).await;
    }
    if ctx.chance(15) {
        ops::wait_lost(ctx, &guards[0][0]).await;
    }
}

/// Hands `g` (the only guard of the task's hold of `name`) off, awaited,
/// under a tiny `timeout` or dropped after a few polls, then asks `name`
/// again at once from the task that took it. A new token while `g` still
/// says held is two holders, whatever the hand-off's outcome: done, the
/// task waits for `g` like any contender; undone, it re-enters (the same
/// token); unknown, it waits for `g` to end.
async fn hand_off_then_ask(ctx: &mut Ctx, kind: Kind, name: &str, target: &Target, g: &mut Guard) {
    let since = now_us();
    let how = ctx.how(30);
    let Some(op) = g.hand_off_op() else {
        return;
    };
    match ctx.call(op, how, g.hand_off()).await {
        Some(Ok(())) => ctx.stats.bump(kind, Count::HandedOff),
        Some(Err(e)) => ctx.stats.error(kind, &e),
        None => ctx.stats.bump(kind, Count::Cancelled),
    }
    let token = g.token();
    let lease = ctx.lease();
    if let Some(Ok(Some(again))) = target.call(ctx, How::Await, Duration::ZERO, lease).await {
        // Another client's force of the lock (of this process: the other
        // process's are not seen here) tells `g` only at its next renewal.
        let forced =
            ctx.stats.forced_at(&lock_id(kind, name)) + micros(ctx.settings.max_lease()) >= since;
        // A restart that lost the hold tells `g` within its lease too.
        if again.token() != token && !g.is_lost() && !forced && !ops::lost_data(ctx, target).await {
            ctx.stats.violation(&format!(
                "{}: {kind:?} {name:?} granted again (token {}) to the task that handed its hold (token {token}) off, which still says held",
                ctx.client,
                again.token(),
            ));
        }
        if release(ctx, again).await.is_err() {
            ctx.stats.bump(kind, Count::ReleaseFailed);
        }
    }
}

/// A section of a re-entrant kind (and Redlock, without re-entry): hold,
/// maybe ask again (see [`Again`]) and extend at random moments, release
/// the nested guards in a random order, the last one as [`let_go_how`]
/// says.
///
/// A re-entry whose outer hold was gone from the server is granted afresh
/// with a new token: a section of its own (same holder), which later
/// re-entries join.
async fn reentrant(ctx: &mut Ctx, kind: Kind, name: &str, target: &Target, again: Again<'_>) {
    let lease = ctx.lease();
    let requested_us = now_us();
    let first = match acquire(ctx, kind, target, lease).await {
        Got::Guard(g) => g,
        Got::Busy | Got::Cancelled => return,
        Got::Failed(f) => return failed(ctx, kind, &f).await,
    };
    let mut tokens = vec![first.token()];
    let mut recs = vec![ctx.open(
        kind,
        name,
        Access::Exclusive,
        tokens[0],
        requested_us,
        ctx.belief(lease),
    )];
    // guards[k]: the guards of section recs[k].
    let mut guards = vec![vec![first]];
    let phases = 1 + ctx.rng.below(3);
    for _ in 0..phases {
        let d = ctx.hold_time() / u32::try_from(phases).unwrap_or(1);
        hold_all(ctx, &mut recs, &guards, d).await;
        if let Again::Refused(twin) = again {
            refused_while_held(ctx, kind, name, twin, tokens[0]).await;
        }
        if matches!(again, Again::Reenter) && ctx.chance(30) {
            let lease2 = ctx.lease();
            let requested = now_us();
            match target.call(ctx, How::Await, WAIT, lease2).await {
                None => {}
                Some(Ok(Some(g))) => {
                    let t = g.token();
                    if let Some(k) = tokens.iter().position(|&x| x == t) {
                        ctx.stats.bump(kind, Count::Reentered);
                        recs[k].section.guards += 1;
                        let belief = micros(ctx.belief(lease2));
                        recs[k].section.lease_us = recs[k].section.lease_us.max(belief);
                        guards[k].push(g);
                    } else {
                        ctx.stats.bump(kind, Count::Acquired);
                        let mut r = ctx.open(
                            kind,
                            name,
                            Access::Exclusive,
                            t,
                            requested,
                            ctx.belief(lease2),
                        );
                        ctx.look(&mut r, || !g.is_lost());
                        tokens.push(t);
                        recs.push(r);
                        guards.push(vec![g]);
                    }
                }
                // Busy: the outer hold is gone from the server and someone
                // else has the lock (after a lost lease, or a restart that
                // lost it); if the outer guard still believes, the checker
                // sees the two holders.
                Some(Ok(None)) => ctx
                    .stats
                    .error(kind, "re-entry busy: the outer hold was gone"),
                Some(Err(f)) => ctx.stats.error(kind, &f.text),
            }
        }
        if ctx.chance(25) {
            let cap = if kind == Kind::Redlock {
                ctx.settings.max_lease()
            } else {
                Duration::MAX
            };
            let ext = ctx.extend_lease(cap);
            let last = recs.len() - 1;
            recs[last].section.lease_us = recs[last].section.lease_us.max(micros(ext));
            if extend(ctx, &guards[last][0], ext).await {
                ctx.stats.bump(kind, Count::Extended);
            }
        }
    }
    before_release(ctx, kind, name, target, &mut guards).await;
    // Release the nested guards in a random order; each section goes on
    // while one of its guards is left.
    loop {
        let nested: Vec<usize> = (0..guards.len()).filter(|&k| guards[k].len() > 1).collect();
        if nested.is_empty() {
            break;
        }
        let k = nested[usize::try_from(ctx.rng.below(nested.len() as u64)).unwrap_or(0)];
        let i = usize::try_from(ctx.rng.below(guards[k].len() as u64)).unwrap_or(0);
        let g = guards[k].swap_remove(i);
        if release(ctx, g).await.is_err() {
            ctx.stats.bump(kind, Count::ReleaseFailed);
        }
        let d = Duration::from_millis(ctx.rng.below(20));
        hold_all(ctx, &mut recs, &guards, d).await;
    }
    for (k, (r, gs)) in recs.into_iter().zip(guards).enumerate() {
        ctx.close(r, || gs.iter().all(|g| !g.is_lost()));
        let how = if k == 0 {
            let_go_how(ctx)
        } else {
            LetGo::Unlock
        };
        let_go(ctx, kind, gs, how).await;
    }
}

/// Extends `g` to `lease`, awaited: whether it answered `Ok` (`false` for
/// a kind without `extend`).
async fn extend(ctx: &mut Ctx, g: &Guard, lease: Duration) -> bool {
    let how = ctx.how(15);
    match g.extend_op() {
        Some(op) => matches!(ctx.call(op, how, g.extend(lease)).await, Some(Ok(()))),
        None => false,
    }
}

/// Holds every section for `d`; section `k` is valid while all of
/// `guards[k]` are.
async fn hold_all(ctx: &Ctx, recs: &mut [Rec], guards: &[Vec<Guard>], d: Duration) {
    let mut all: Vec<&mut Rec> = recs.iter_mut().collect();
    ctx.hold(&mut all, d, &|k| guards[k].iter().all(|g| !g.is_lost()))
        .await;
}

/// A read-write lock section: read (45 %), write (40 %), or write then
/// downgrade (15 %); readers sometimes ask for the write side, which must
/// be refused at once.
async fn rw(ctx: &mut Ctx, name: &str, (read, write): &(ReadLock, WriteLock)) {
    let roll = ctx.rng.below(100);
    if roll < 45 {
        return reader(ctx, name, read, write).await;
    }
    if roll < 85 {
        let t = Target::Write(write.clone());
        return reentrant(ctx, Kind::RwWrite, name, &t, Again::Reenter).await;
    }
    // Downgrade: write, take the read side, release the write side, read on.
    let lease = ctx.lease();
    let requested_us = now_us();
    let w = match acquire(ctx, Kind::RwWrite, &Target::Write(write.clone()), lease).await {
        Got::Guard(g) => g,
        Got::Busy | Got::Cancelled => return,
        Got::Failed(f) => return failed(ctx, Kind::RwWrite, &f).await,
    };
    let mut wrec = ctx.open(
        Kind::RwWrite,
        name,
        Access::Exclusive,
        w.token(),
        requested_us,
        ctx.belief(lease),
    );
    let d = ctx.hold_time();
    ctx.hold(&mut [&mut wrec], d, &|_| !w.is_lost()).await;
    let read_lease = ctx.lease();
    let requested = now_us();
    let r = ctx
        .recorded("ReadLock::try_lock", read.try_lock(WAIT, read_lease))
        .await;
    ctx.close(wrec, || !w.is_lost());
    let was_lost = w.is_lost();
    let how = let_go_how(ctx);
    let_go(ctx, Kind::RwWrite, vec![w], how).await;
    let r = match r {
        Ok(Some(g)) => g,
        // The write hold was gone from the server (as for a busy re-entry).
        Ok(None) => {
            return ctx.stats.error(
                Kind::RwRead,
                &format!("downgrade busy: the write hold was gone (lost: {was_lost})"),
            )
        }
        Err(e) => return ctx.stats.error(Kind::RwRead, &e.to_string()),
    };
    ctx.stats.bump(Kind::RwRead, Count::Acquired);
    ctx.stats.bump(Kind::RwRead, Count::Special);
    let g = Guard::Rw(r);
    let mut rrec = ctx.open(
        Kind::RwRead,
        name,
        Access::Shared,
        g.token(),
        requested,
        ctx.belief(read_lease),
    );
    let d = ctx.hold_time();
    ctx.hold(&mut [&mut rrec], d, &|_| !g.is_lost()).await;
    ctx.close(rrec, || !g.is_lost());
    let how = let_go_how(ctx);
    let_go(ctx, Kind::RwRead, vec![g], how).await;
}

/// A read section, re-entered sometimes; sometimes asks for the write side
/// meanwhile (an upgrade: refused at once, or a violation).
async fn reader(ctx: &mut Ctx, name: &str, read: &ReadLock, write: &WriteLock) {
    let lease = ctx.lease();
    let requested_us = now_us();
    let kind = Kind::RwRead;
    let first = match acquire(ctx, kind, &Target::Read(read.clone()), lease).await {
        Got::Guard(g) => g,
        Got::Busy | Got::Cancelled => return,
        Got::Failed(f) => return failed(ctx, kind, &f).await,
    };
    let token = first.token();
    let mut rec = ctx.open(
        kind,
        name,
        Access::Shared,
        token,
        requested_us,
        ctx.belief(lease),
    );
    let mut guards = vec![first];
    let d = ctx.hold_time();
    ctx.hold(&mut [&mut rec], d / 2, &|_| {
        guards.iter().all(|g| !g.is_lost())
    })
    .await;
    if ctx.chance(25) {
        match ctx
            .recorded("ReadLock::try_lock", read.try_lock(WAIT, lease))
            .await
        {
            Ok(Some(g)) if g.fencing_token() == token => {
                ctx.stats.bump(kind, Count::Reentered);
                guards.push(Guard::Rw(g));
            }
            // The read hold was gone from the server: a fresh one, taken
            // by the same holder; its own section would overlap this one
            // harmlessly. Keep it simple: let it go at once.
            Ok(Some(g)) => {
                let _ = release(ctx, Guard::Rw(g)).await;
            }
            Ok(None) => {}
            Err(e) => ctx.stats.error(kind, &e.to_string()),
        }
    }
    if ctx.chance(15) {
        let upgrade = write.try_lock(Duration::from_millis(50), None);
        match ctx.recorded("WriteLock::try_lock", upgrade).await {
            Err(e) if Failed::of(&e).upgrade_refused => {
                ctx.stats.bump(Kind::RwWrite, Count::Special);
            }
            Err(e) => ctx.stats.error(Kind::RwWrite, &e.to_string()),
            // A lost read hold holds nothing: asking for the write side is
            // then an ordinary acquisition; so is one forced by another
            // client of this process (the reader learns it at its next
            // renewal).
            Ok(granted)
                if guards.iter().any(Guard::is_lost)
                    || ctx.stats.forced_at(&lock_id(Kind::RwRead, name))
                        + micros(ctx.settings.max_lease())
                        >= requested_us =>
            {
                if let Some(g) = granted {
                    let _ = release(ctx, Guard::Rw(g)).await;
                }
            }
            Ok(granted) => {
                ctx.stats.violation(&format!(
                    "{}: an upgrade of {name:?} (read held, token {token}) was not refused: {}",
                    ctx.client,
                    if granted.is_some() { "granted" } else { "busy" }
                ));
                if let Some(g) = granted {
                    let _ = release(ctx, Guard::Rw(g)).await;
                }
            }
        }
    }
    if ctx.chance(20) {
        let ext = ctx.extend_lease(Duration::MAX);
        rec.section.lease_us = rec.section.lease_us.max(micros(ext));
        if extend(ctx, &guards[0], ext).await {
            ctx.stats.bump(kind, Count::Extended);
        }
    }
    ctx.hold(&mut [&mut rec], d / 2, &|_| {
        guards.iter().all(|g| !g.is_lost())
    })
    .await;
    while guards.len() > 1 {
        if let Some(g) = guards.pop() {
            let _ = release(ctx, g).await;
        }
    }
    ctx.close(rec, || guards.iter().all(|g| !g.is_lost()));
    let how = let_go_how(ctx);
    let_go(ctx, kind, guards, how).await;
}

/// A semaphore section: 1 or 2 of its permits.
async fn semaphore(ctx: &mut Ctx, i: usize, s: &Semaphore) {
    let of = SEMAPHORE_PERMITS[i];
    let held = u32::try_from(1 + ctx.rng.below(u64::from(of.min(2)))).unwrap_or(1);
    let kind = Kind::Semaphore;
    let requested_us = now_us();
    // A fixed lease only for the forms that take one; the section's belief
    // (the watchdog's lease) bounds it.
    let lease = ctx.lease();
    let g = match acquire(ctx, kind, &Target::Semaphore(s.clone(), held), lease).await {
        Got::Guard(g) => g,
        Got::Busy | Got::Cancelled => return,
        Got::Failed(f) => {
            if f.not_initialized {
                // First use, or the server restarted empty.
                let set = s.try_set_permits(of);
                let _ = ctx.recorded("Semaphore::try_set_permits", set).await;
            }
            return failed(ctx, kind, &f).await;
        }
    };
    let mut rec = ctx.open(
        kind,
        s.name(),
        Access::Permits { held, of },
        g.token(),
        requested_us,
        ctx.settings.lease,
    );
    let d = ctx.hold_time();
    ctx.hold(&mut [&mut rec], d / 2, &|_| !g.is_lost()).await;
    if ctx.chance(20) {
        ops::extend_permit(ctx, &mut rec.section.lease_us, &g).await;
    }
    if ctx.chance(10) {
        ops::query_held(ctx, &Target::Semaphore(s.clone(), held)).await;
    }
    if ctx.chance(10) {
        ops::wait_lost(ctx, &g).await;
    }
    ctx.hold(&mut [&mut rec], d / 2, &|_| !g.is_lost()).await;
    ctx.close(rec, || !g.is_lost());
    let how = let_go_how(ctx);
    let_go(ctx, kind, vec![g], how).await;
}

/// A `MultiLock` over 2 or 3 of the `Lock` names, in random order: one
/// section per member, on that member's lock.
async fn multi(ctx: &mut Ctx, h: &Handles) {
    let mut order: Vec<usize> = (0..h.names.len()).collect();
    for k in (1..order.len()).rev() {
        let j = usize::try_from(ctx.rng.below(k as u64 + 1)).unwrap_or(0);
        order.swap(k, j);
    }
    order.truncate(2 + usize::from(ctx.chance(15)));
    let kind = Kind::MultiLock;
    let m = match MultiLock::new(order.iter().map(|&i| h.locks[i].clone()).collect()) {
        Ok(m) => m,
        Err(e) => return ctx.stats.error(kind, &e.to_string()),
    };
    let lease = ctx.lease();
    let requested_us = now_us();
    // All members at once are harder to get than one lock: a longer wait.
    let g = match acquire_within(ctx, kind, &Target::Multi(m), lease, WAIT * 2, 10).await {
        Got::Guard(Guard::Multi(g)) => g,
        Got::Guard(_) | Got::Busy | Got::Cancelled => return,
        Got::Failed(f) => return failed(ctx, kind, &f).await,
    };
    let tokens = g.fencing_tokens();
    let mut recs: Vec<Rec> = order
        .iter()
        .zip(&tokens)
        .map(|(&i, &t)| {
            ctx.open(
                kind,
                h.names[i],
                Access::Exclusive,
                t,
                requested_us,
                ctx.belief(lease),
            )
        })
        .collect();
    let d = ctx.hold_time();
    {
        let mut members: Vec<&mut Rec> = recs.iter_mut().collect();
        ctx.hold(&mut members, d, &|k| !g.guards()[k].is_lost())
            .await;
    }
    for (k, r) in recs.into_iter().enumerate() {
        ctx.close(r, || !g.guards()[k].is_lost());
    }
    let how = let_go_how(ctx);
    let_go(ctx, kind, vec![Guard::Multi(g)], how).await;
}

/// A stall of the runtime thread inside work (a GC pause, a blocking call):
/// at most one per process this often.
const STALL_EVERY: Duration = Duration::from_secs(6);

/// A `run_locked` section over a `Lock` (30 % of the time with a permit of
/// the name's semaphore too: `run_locked` over the pair, which is lost
/// when either is): the work looks at its guard every few milliseconds,
/// each look a step recorded with the guard's validity (rule (e): no step
/// once the lease clock said lost); now and then the work stalls its
/// runtime thread (`std::thread::sleep`) for longer than the lease, after
/// which the library must not poll it again unless the watchdog renewed
/// meanwhile. (The pair's permit is not a section: the semaphore family's
/// count is checked on its own sections.)
async fn locked(ctx: &mut Ctx, name: &str, lock: &Lock, sem: &Semaphore) {
    let lease = ctx.lease();
    let belief = ctx.belief(lease);
    // Mostly short: these tasks share the `Lock` names, which `MultiLock`
    // needs several of at once.
    let hold = if ctx.chance(80) {
        Duration::from_millis(2 + ctx.rng.below(48))
    } else {
        ctx.hold_time()
    };
    let stall = ctx
        .stats
        .may_stall(STALL_EVERY)
        .then(|| ctx.settings.lease.mul_f64(1.2 + 0.4 * ctx.rng.unit()));
    let plan = WorkPlan {
        name,
        requested_us: now_us(),
        belief,
        hold,
        stall,
        stall_after: ctx.rng.below(4),
    };
    let with_permit = ctx.chance(30);
    let asked = ctx.recorded("Lock::try_lock", lock.try_lock(WAIT, lease));
    let acquire = async {
        match asked.await {
            Ok(Some(g)) => Ok(g),
            Ok(None) => Err(wait_ran_out()),
            Err(e) => Err(e),
        }
    };
    let mut done = WorkDone::default();
    let shared: &Ctx = ctx;
    let outcome = if with_permit {
        let permit: std::pin::Pin<Box<dyn Future<Output = _> + Send>> = match lease {
            Some(l) => Box::pin(shared.recorded(
                "Semaphore::try_acquire_with_lease",
                sem.try_acquire_with_lease(1, WAIT, l),
            )),
            None => Box::pin(shared.recorded("Semaphore::try_acquire", sem.try_acquire(1, WAIT))),
        };
        let both = async {
            let g = acquire.await?;
            match permit.await {
                Ok(Some(p)) => Ok((g, p)),
                Ok(None) => Err(wait_ran_out()),
                Err(e) => Err(e),
            }
        };
        run_locked(both, async |g: &(LockGuard, SemaphorePermit)| {
            locked_work(shared, g, &plan, &mut done).await;
        })
        .await
    } else {
        run_locked(acquire, async |g: &LockGuard| {
            locked_work(shared, g, &plan, &mut done).await;
        })
        .await
    };
    let busy = matches!(&outcome, Err(redisync::Error::InvalidArgument(m)) if m == BUSY);
    let stalled = stall.is_some();
    locked_end(
        ctx,
        name,
        (done.rec, done.steps, done.saw_lost, stalled),
        outcome,
        busy,
    )
    .await;
}

/// The error a [`locked`] section's acquisition stands in for a wait that
/// ran out with (`run_locked` takes a guard or an error): not the library's.
const BUSY: &str = "torture: the wait ran out";

fn wait_ran_out() -> redisync::Error {
    redisync::Error::InvalidArgument(BUSY.into())
}

/// What a [`locked`] section's work does.
struct WorkPlan<'a> {
    name: &'a str,
    requested_us: u64,
    belief: Duration,
    hold: Duration,
    /// A stall of the runtime thread this long, after `stall_after` looks.
    stall: Option<Duration>,
    stall_after: u64,
}

/// What a [`locked`] section's work recorded.
#[derive(Default)]
struct WorkDone {
    rec: Option<Rec>,
    steps: Vec<Step>,
    saw_lost: bool,
}

/// The work of a [`locked`] section under guard `g` (see there).
async fn locked_work<G: redisync::Guard>(
    shared: &Ctx,
    g: &G,
    plan: &WorkPlan<'_>,
    done: &mut WorkDone,
) {
    let r = done.rec.insert(shared.open(
        Kind::RunLocked,
        plan.name,
        Access::Exclusive,
        g.fencing_token(),
        plan.requested_us,
        plan.belief,
    ));
    let until = Instant::now() + plan.hold;
    let mut n = 0;
    loop {
        let mut left = Duration::ZERO;
        shared.look(r, || {
            left = g.validity();
            !left.is_zero()
        });
        done.saw_lost |= left.is_zero();
        done.steps.push(Step {
            at_us: r.section.end_us,
            left_us: Some(micros(left)),
        });
        if let Some(d) = plan.stall.filter(|_| n == plan.stall_after) {
            // Blocks this runtime thread on purpose.
            let from_us = now_us();
            let stall = |to_us| {
                Record::Stall(Pause {
                    process: shared.client.clone(),
                    from_us,
                    to_us,
                })
            };
            if crate::history::is_virtual_clock() {
                // Recorded first: the virtual clock jumps at once, and
                // the work may be cancelled right after (the loss the
                // stall caused).
                let _ = shared.sink.send(stall(from_us + micros(d)));
                crate::history::stall_runtime(d).await;
            } else {
                crate::history::stall_runtime(d).await;
                let _ = shared.sink.send(stall(now_us()));
            }
        }
        n += 1;
        if Instant::now() >= until {
            break;
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// The end of a [`locked`] section: its section and work recorded, its
/// outcome counted (and checked: `Completed` only if held throughout).
async fn locked_end(
    ctx: &mut Ctx,
    name: &str,
    (rec, steps, saw_lost, stalled): (Option<Rec>, Vec<Step>, bool, bool),
    outcome: Result<Outcome<()>, redisync::Error>,
    busy: bool,
) {
    let kind = Kind::RunLocked;
    let belief = rec.as_ref().map_or(0, |r| r.section.lease_us);
    let requested_us = rec.as_ref().map_or(0, |r| r.section.requested_us);
    let token = rec.as_ref().map_or(0, |r| r.section.token);
    if let Some(r) = rec {
        ctx.finish(r);
    }
    let _ = ctx.sink.send(Record::Work(Work {
        lock: lock_id(kind, name),
        kind,
        client: ctx.client.clone(),
        token,
        lease_us: belief,
        requested_us,
        steps,
    }));
    match outcome {
        Ok(o) => {
            ctx.stats.bump(kind, Count::Acquired);
            if stalled {
                ctx.stats.bump(kind, Count::Moved);
            }
            match o {
                Outcome::Completed(()) if saw_lost => ctx.stats.violation(&format!(
                    "{}: run_locked on {name:?} (token {token}) said Completed though its work saw the guard lost",
                    ctx.client
                )),
                Outcome::Completed(()) => {}
                Outcome::Cancelled | Outcome::LostAtEnd(()) => {
                    ctx.stats.bump(kind, Count::Special);
                }
            }
        }
        Err(_) if busy => ctx.stats.bump(kind, Count::Busy),
        Err(e) => failed(ctx, kind, &Failed::of(&e)).await,
    }
}

/// A `Leader::run` for a while (0.3 to 1.8 leases), then dropped (the lead is
/// given back in the background): each job run records its steps with the
/// leadership's token. The checker derives one section per leadership.
async fn leader(ctx: &mut Ctx, name: &str, leader: &Leader) {
    let kind = Kind::Leader;
    let every = Duration::from_millis(20 + ctx.rng.below(60));
    let run_for = ctx.settings.lease.mul_f64(0.3 + 1.5 * ctx.rng.unit());
    let job_steps = 1 + ctx.rng.below(8);
    let started = now_us();
    let log: Arc<Mutex<Vec<Work>>> = Arc::default();
    let lock = lock_id(kind, name);
    let lease_us = micros(ctx.settings.lease);
    let client = ctx.client.clone();
    let job_log = log.clone();
    // Half the runs give their job the term: its first run of each term
    // names it (`LeaderTerm::set_identity`, ending every way).
    let with_term = ctx.chance(50);
    let (set_roll, set_polls, set_budget) = (
        ctx.rng.below(100),
        1 + ctx.rng.below(6),
        Duration::from_millis(ctx.rng.below(30)),
    );
    let set_rng = Rng::new(ctx.rng.next_u64());
    let coverage = ctx.stats.coverage.clone();
    let kept: Arc<Mutex<Option<LeaderTerm>>> = Arc::default();
    let kept_by_job = kept.clone();
    let mut named = 0;
    let mut job = move |token: u64, term: Option<LeaderTerm>| {
        let log = job_log.clone();
        let work = Work {
            lock: lock.clone(),
            kind,
            client: client.clone(),
            token,
            lease_us,
            requested_us: started,
            steps: Vec::new(),
        };
        // Its first run of a term names it, as `Leadership::set_identity`
        // does in the campaign step: a watch must report it with that token.
        let set = term.filter(|_| std::mem::replace(&mut named, token) != token);
        let identity = format!("{client}@{token}");
        let mut set_rng = set_rng.clone();
        let (coverage, kept) = (coverage.clone(), kept_by_job.clone());
        async move {
            if let Some(term) = set {
                let how = (set_roll, set_polls, set_budget);
                name_term(&coverage, &term, &identity, how, &mut set_rng).await;
                *kept.lock().unwrap_or_else(PoisonError::into_inner) = Some(term);
            }
            job_run(&log, work, job_steps).await;
        }
    };
    let (op, run): (_, std::pin::Pin<Box<dyn Future<Output = _> + Send + '_>>) = if with_term {
        let run = leader.run_with_term(every, move |term| job(term.token(), Some(term)));
        ("Leader::run_with_term", Box::pin(run))
    } else {
        (
            "Leader::run",
            Box::pin(leader.run(every, move |token| job(token, None))),
        )
    };
    // Mostly for its time; now and then dropped after a few polls.
    let how = if ctx.chance(10) {
        How::Drop(1 + ctx.rng.below(6))
    } else {
        How::Timeout(run_for)
    };
    if let Some(Err(e)) = ctx.call(op, how, run).await {
        ctx.stats.error(kind, &e.to_string());
    }
    let kept = kept.lock().unwrap_or_else(PoisonError::into_inner).take();
    if let Some(term) = kept {
        term_kept_past_its_run(ctx, name, &term).await;
    }
    let mut works = std::mem::take(&mut *log.lock().unwrap_or_else(PoisonError::into_inner));
    // A leadership was asked for when the one before ended (or at the start).
    let mut campaign_since = started;
    let mut current = None;
    for w in &mut works {
        if current != Some(w.token) {
            current = Some(w.token);
            ctx.stats.bump(kind, Count::Acquired);
        }
        w.requested_us = campaign_since;
        if let Some(last) = w.steps.last() {
            campaign_since = campaign_since.max(last.at_us);
        }
        ctx.stats.bump(kind, Count::Special);
    }
    // Every run of one leadership keeps the request of its first.
    let mut first_request = std::collections::HashMap::new();
    for w in &mut works {
        let r = *first_request.entry(w.token).or_insert(w.requested_us);
        w.requested_us = r;
        let _ = ctx.sink.send(Record::Work(w.clone()));
    }
}

/// One run of a leader's job: `steps` steps, `LOOK_EVERY` apart, logged
/// as `work`'s.
async fn job_run(log: &Mutex<Vec<Work>>, work: Work, steps: u64) {
    let i = {
        let mut l = log.lock().unwrap_or_else(PoisonError::into_inner);
        l.push(work);
        l.len() - 1
    };
    for k in 0..steps {
        let at_us = now_us();
        if let Some(w) = log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(i)
        {
            w.steps.push(Step {
                at_us,
                left_us: None,
            });
        }
        if k + 1 < steps {
            tokio::time::sleep(LOOK_EVERY).await;
        }
    }
}

/// A `run_with_term` job names its term (`LeaderTerm::set_identity`),
/// awaited, cut by a timeout or dropped after a few polls, as `how` (a
/// roll, the polls, the budget) says.
async fn name_term(
    coverage: &Arc<Recorder>,
    term: &LeaderTerm,
    identity: &str,
    (roll, polls, budget): (u64, u64, Duration),
    rng: &mut Rng,
) {
    let op = "LeaderTerm::set_identity";
    let call = term.set_identity(identity);
    if roll < 10 {
        let cut = Recorded::new(coverage, op, call, Ending::Dropped);
        drop(poll_then_drop(cut, polls, rng).await);
    } else if roll < 20 {
        let cut = Recorded::new(coverage, op, call, Ending::Timeout);
        drop(tokio::time::timeout(budget, cut).await);
    } else {
        drop(Recorded::new(coverage, op, call, Ending::Dropped).await);
    }
}

/// A term kept past its run is over: nothing is published.
async fn term_kept_past_its_run(ctx: &mut Ctx, name: &str, term: &LeaderTerm) {
    let how = ctx.how(30);
    let late = ctx
        .call("LeaderTerm::set_identity", how, term.set_identity("over"))
        .await;
    if let Some(Ok(())) = late {
        ctx.stats.violation(&format!(
            "{}: a term of {name:?} (token {}) kept past its run published an identity",
            ctx.client,
            term.token()
        ));
    }
}

/// Force-unlocks the lock `guards` hold, through their own client: they
/// must say lost as soon as the call returns `Ok`.
async fn force_own(ctx: &mut Ctx, name: &str, lock: &Lock, guards: &[Vec<Guard>]) {
    if !force(ctx, name, lock).await {
        return;
    }
    let held: Vec<u64> = guards
        .iter()
        .flatten()
        .filter(|g| !g.is_lost())
        .map(Guard::token)
        .collect();
    if !held.is_empty() {
        ctx.stats.violation(&format!(
            "{}: guards of {name:?} (tokens {held:?}) still said held after this client's force_unlock returned",
            ctx.client
        ));
    }
}

/// Force-unlocks `lock` and records it; whether the call returned `Ok`.
async fn force(ctx: &mut Ctx, name: &str, lock: &Lock) -> bool {
    ctx.stats.forcing(&lock_id(Kind::Lock, name));
    let asked_us = now_us();
    let how = ctx.how(20);
    let result = ctx
        .call("Lock::force_unlock", how, lock.force_unlock())
        .await;
    let done_us = now_us();
    let _ = ctx.sink.send(Record::Force(Force {
        lock: lock_id(Kind::Lock, name),
        client: ctx.client.clone(),
        asked_us,
        done_us,
        ok: matches!(result, Some(Ok(_))),
    }));
    match result {
        Some(Ok(deleted)) => {
            if deleted {
                ctx.stats.bump(Kind::Lock, Count::Special);
            }
            true
        }
        Some(Err(e)) => {
            ctx.stats.error(Kind::Lock, &format!("force_unlock: {e}"));
            false
        }
        // Cut: it may run or not, as a lost reply.
        None => false,
    }
}

/// How long `try_lock(Duration::ZERO)` may take outside faults: about a
/// round trip, with room for a loaded machine; a few round trips, below one
/// command timeout, on the virtual clock.
fn try_zero_bound_us() -> u64 {
    by_clock(1_000_000, 300_000)
}

/// What `Client::shutdown` may take beyond one command timeout: closing
/// connections and scheduling on a loaded machine; a round trip on the
/// virtual clock.
fn shutdown_slack() -> Duration {
    by_clock(Duration::from_millis(500), Duration::from_millis(100))
}

/// `real` in real time, `simulated` on the virtual clock (no machine load
/// to allow for).
fn by_clock<T>(real: T, simulated: T) -> T {
    if crate::is_virtual_clock() {
        simulated
    } else {
        real
    }
}

/// A fresh client takes 1 to 3 locks of its own (watchdog-renewed) and is
/// shut down holding them, whatever the fault of the moment: the call is
/// bounded by about one command timeout (not one per lock), and every
/// guard says lost once it returns.
///
/// Half of them also have a task waiting in Redis for a name `main` holds
/// (see [`AbortedWaiter`]), aborted right before the shutdown.
async fn shutdown(ctx: &mut Ctx, connect: &Connect, main: &Client) {
    // Fresh clients are not cheap: one every second or so per task.
    let pause = 700 + ctx.rng.below(600);
    tokio::time::sleep(Duration::from_millis(pause)).await;
    let connected = connect().await;
    let Ok(client) = connected else {
        return;
    };
    let mut guards = Vec::new();
    for k in 0..=ctx.rng.below(3) {
        let lock = client.lock(&format!("torture:shutdown:{}:{k}", ctx.client));
        let asked = lock.try_lock(Duration::from_millis(300), None);
        if let Ok(Some(g)) = ctx.recorded("Lock::try_lock", asked).await {
            guards.push(g);
        }
    }
    // Half of them hold one of every other kind too, and check every call
    // after the shutdown.
    let mut held = if ctx.chance(50) {
        Some(ops::Held::take(ctx, &client).await)
    } else {
        None
    };
    let aborted = if ctx.chance(50) {
        AbortedWaiter::start(ctx, main, &client).await
    } else {
        None
    };
    tokio::time::sleep(Duration::from_millis(ctx.rng.below(50))).await;
    let aborted = match aborted {
        Some(a) => Some(a.abort(ctx).await),
        None => None,
    };
    let asked_us = now_us();
    // Cut or dropped too: its first poll marks every guard lost.
    let how = ctx.how(20);
    let done = ctx.call("Client::shutdown", how, client.shutdown()).await;
    if done.is_some() {
        let _ = ctx.sink.send(Record::Probe(Probe {
            what: "shutdown".into(),
            client: ctx.client.clone(),
            asked_us,
            done_us: now_us(),
            bound_us: micros(ctx.settings.command_timeout + shutdown_slack()),
        }));
    }
    let others = held.as_ref().map_or(0, |h| {
        h.others.iter().filter(|g| !g.is_lost()).count()
            + usize::from(h.lead.as_ref().is_some_and(|l| !l.is_lost()))
    });
    let still = guards.iter().filter(|g| !g.is_lost()).count() + others;
    if still > 0 {
        ctx.stats.violation(&format!(
            "{}: {still} guards still said held after their client's shutdown {}",
            ctx.client,
            if done.is_some() {
                "returned"
            } else {
                "was polled"
            }
        ));
    }
    if let Some(a) = aborted {
        a.check(ctx, main, &client, asked_us).await;
    }
    if let Some(mut h) = held.take() {
        h.lock = guards.pop();
        ops::after_shutdown(ctx, &client, h).await;
    }
}

/// A task of a client about to shut down that waits in Redis for a name
/// another client (`main`) holds, in one of the four kinds with a queue,
/// and is aborted right before the shutdown (`abort()`,
/// `JoinSet::abort_all()`). `main` lets go before or after the abort, so the
/// name may be handed to the departed waiter. Once the shutdown returned,
/// the name lists neither a waiter nor a holder of that client: else the
/// next waiter waits a full lease behind one that left.
struct AbortedWaiter {
    name: String,
    kind: QueueKind,
    /// `main`'s hold, until it lets go.
    holder: Option<Guard>,
    waiter: tokio::task::JoinHandle<()>,
}

/// The kinds whose waiters queue in Redis.
#[derive(Debug, Clone, Copy)]
enum QueueKind {
    Lock,
    Fair,
    Write,
    Semaphore,
}

impl QueueKind {
    /// `client`'s attempt on `name` for at most `wait`, under `lease` (the
    /// watchdog's when `None`).
    async fn take(
        self,
        client: &Client,
        name: &str,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Option<Guard> {
        let got = match self {
            QueueKind::Lock => client
                .lock(name)
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Guard::Lock)),
            QueueKind::Fair => client
                .fair_lock(name)
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Guard::Fair)),
            QueueKind::Write => client
                .rw_lock(name)
                .write()
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Guard::Rw)),
            QueueKind::Semaphore => {
                let semaphore = client.semaphore(name).with_permits(1);
                match lease {
                    Some(lease) => semaphore.try_acquire_with_lease(1, wait, lease).await,
                    None => semaphore.try_acquire(1, wait).await,
                }
                .map(|g| g.map(Guard::Semaphore))
            }
        };
        got.ok().flatten()
    }
}

impl AbortedWaiter {
    /// `main` takes a name of this task's own; a task of `client` waits for
    /// it. `None` when `main` could not take it (a fault).
    async fn start(ctx: &mut Ctx, main: &Client, client: &Client) -> Option<AbortedWaiter> {
        let kinds = [
            QueueKind::Lock,
            QueueKind::Fair,
            QueueKind::Write,
            QueueKind::Semaphore,
        ];
        let kind = kinds[usize::try_from(ctx.rng.below(4)).unwrap_or(0)];
        let name = format!("torture:abort:{}", ctx.client);
        let holder = Some(kind.take(main, &name, Duration::ZERO, ctx.lease()).await?);
        let (waiting, name2, lease) = (client.clone(), name.clone(), ctx.lease());
        let waiter = tokio::spawn(async move {
            // Held until the task is aborted.
            let _held = kind.take(&waiting, &name2, Duration::MAX, lease).await;
            std::future::pending::<()>().await;
        });
        Some(AbortedWaiter {
            name,
            kind,
            holder,
            waiter,
        })
    }

    /// Aborts the waiter once it had time to queue (or not), `main`
    /// letting go before, or right after.
    async fn abort(mut self, ctx: &mut Ctx) -> AbortedWaiter {
        tokio::time::sleep(Duration::from_millis(ctx.rng.below(100))).await;
        let before = ctx.chance(50);
        if before {
            drop(self.holder.take());
        }
        self.waiter.abort();
        if !before {
            drop(self.holder.take());
        }
        self
    }

    /// After the shutdown asked at `asked_us` returned: records how long
    /// until the name listed nothing of `client` but a permit whose lease
    /// ended (it blocks nobody: the next acquisition reclaims it; a probe bounded like the
    /// shutdown; the checker excuses one under a fault: nothing can leave a
    /// queue on a server out of reach).
    async fn check(self, ctx: &mut Ctx, main: &Client, client: &Client, asked_us: u64) {
        let bound = ctx.settings.command_timeout + shutdown_slack();
        let give_up = tokio::time::Instant::now() + bound + Duration::from_secs(1);
        let gone = client.id();
        loop {
            let listed = main.inspect(&self.name).await.map(|all| {
                all.iter().any(|i| {
                    i.waiters.iter().any(|w| w.client_id == Some(gone))
                        || i.holders
                            .iter()
                            .any(|h| h.client_id == Some(gone) && h.is_live())
                })
            });
            if matches!(listed, Ok(false)) || tokio::time::Instant::now() >= give_up {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = ctx.sink.send(Record::Probe(Probe {
            what: format!("queue-left:{:?}", self.kind),
            client: ctx.client.clone(),
            asked_us,
            done_us: now_us(),
            bound_us: micros(bound),
        }));
        // The held name's leftovers (a grant to `main`'s next attempt) go
        // with its lease; nothing else uses the name.
        let _ = self.waiter.await;
    }
}
