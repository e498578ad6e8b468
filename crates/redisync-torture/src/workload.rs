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
//! - the rest of the public API: the other acquisition
//!   forms, semaphore administration and force-release, fencing tokens,
//!   fenced values, latches, leaders' campaigns and watches, the queries,
//!   and every call after a client's shutdown.
//!
//! Every call goes through `Ctx::call` (or `Ctx::recorded`), which
//! counts how it ended (the coverage table).
//!
//! Every section is recorded ([`Section`](crate::history::Section)) while it runs, so that a task
//! that hangs or panics still leaves its open sections to the checker.
//!
//! One file per family of steps: `reentrant` (`Lock`, `FairLock`, the
//! write side, `Redlock`), `rw`, `semaphore`, `multi`, `run_locked`,
//! `leader`, `latch`, `shutdown` and `after_shutdown`; the calls besides
//! sections in `query`, `force` and `fencing`. The plumbing under them:
//! `ctx` (the task's context and how calls are made), `guard` (guards and
//! targets of every kind), `section` (acquire, extend, let go), `stats`
//! (counters and violations), `uptime` (server restarts).

use std::future::Future;
use std::time::Duration;

use redisync::fenced::Fenced;
use redisync::{
    Client, CountDownLatch, FairLock, Leader, Lock, ReadLock, RwLock, Semaphore, WriteLock,
};
use redisync_redlock::Redlock;

use crate::history::Kind;

mod after_shutdown;
mod ctx;
mod fencing;
mod force;
mod guard;
mod latch;
mod leader;
mod multi;
mod query;
mod reentrant;
mod run_locked;
mod rw;
mod section;
mod semaphore;
mod shutdown;
mod stats;
mod uptime;

// The files below share their items through here (`use super::...`).
use after_shutdown::{after_shutdown, Held};
use ctx::{by_clock, micros, poll_then_drop, How, Rec};
pub(crate) use ctx::{Ctx, TaskState};
use fencing::{advance, fenced, min_token};
use force::{force, force_other, force_own, force_release};
use guard::{Failed, Got, Guard, Target};
use latch::latch;
use leader::{leader, leader_step, term_existed};
use multi::multi;
use query::{query, query_held};
use reentrant::{reentrant, two_flows, Again, Flow};
use run_locked::locked;
use rw::{reader, rw};
use section::{
    acquire, acquire_within, extend, failed, hold_all, let_go, let_go_how, release, wait_lost,
    LetGo,
};
use semaphore::{semaphore, semaphore_admin, ADMIN_PERMITS};
use shutdown::shutdown;
pub use stats::Counts;
pub(crate) use stats::{Count, Stats};
use uptime::{lost_data, restarted, uptime};

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

/// The lock a section of `kind` on `name` holds (see [`Section::lock`](crate::history::Section::lock)).
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
    /// What the steps besides sections use.
    more: More,
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
            more: More::new(main, names, LATCH),
        })
    }

    /// The latch of the process `process` (the part of a client set's
    /// label before its dot): the waiters' check counts the count-downs of
    /// one process, so a process of its own has a latch of its own; the
    /// simulated processes share one (and one process's counters).
    pub(crate) fn latch_of(mut self, main: &Client, process: &str) -> Handles {
        if !crate::is_virtual_clock() {
            self.more = More::new(main, self.names, &format!("{LATCH}:{process}"));
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

/// The handles the steps besides sections use, besides [`Handles`]' own.
pub(crate) struct More {
    client: Client,
    rw_locks: Vec<RwLock>,
    fenced: Vec<Fenced>,
    /// A semaphore whose total the tasks change (plain handle).
    admin: Semaphore,
    /// The same, declaring [`ADMIN_PERMITS`] (set up by its acquisitions
    /// after an empty restart).
    admin_declared: Semaphore,
    /// The latch whose waiters are checked (see `latch_waiter` in `latch`).
    latch: CountDownLatch,
    /// A latch with short TTLs: waiters see it expire.
    short_latch: CountDownLatch,
}

impl More {
    fn new(main: &Client, names: [&'static str; 3], latch: &str) -> More {
        More {
            client: main.clone(),
            rw_locks: names.iter().map(|n| main.rw_lock(n)).collect(),
            fenced: names
                .iter()
                .map(|n| main.fenced(&format!("torture:fenced:{n}")))
                .collect(),
            admin: main.semaphore(&format!("{}:adm", names[0])),
            admin_declared: main
                .semaphore(&format!("{}:adm", names[0]))
                .with_permits(ADMIN_PERMITS),
            latch: main.count_down_latch(latch),
            short_latch: main.count_down_latch(&format!("{latch}:short")),
        }
    }
}

/// One step of a task of `family`.
pub(crate) async fn step(ctx: &mut Ctx, family: Family, h: &Handles) {
    let i = usize::try_from(ctx.rng.below(NAMES.len() as u64)).unwrap_or(0);
    if family != Family::Shutdown && ctx.chance(8) {
        query(ctx, h, i).await;
    }
    match family {
        Family::Lock if ctx.chance(2) => {
            // Another holder's lock, most likely (or none).
            force(ctx, h.names[i], &h.locks[i]).await;
        }
        Family::Lock if ctx.chance(3) => advance(ctx, h.names[i], &h.locks[i]).await,
        Family::Fair if ctx.chance(2) => {
            force_other(ctx, Kind::FairLock, h.names[i], h, i).await;
        }
        Family::Rw if ctx.chance(2) => {
            force_other(ctx, Kind::RwWrite, h.names[i], h, i).await;
        }
        Family::Semaphore if ctx.chance(25) => semaphore_admin(ctx, h).await,
        Family::Latch => latch(ctx, h).await,
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
                leader_step(ctx, LEADER_NAMES[i], &h.leaders[i], h).await;
            } else {
                leader(ctx, LEADER_NAMES[i], &h.leaders[i]).await;
            }
        }
    }
}
