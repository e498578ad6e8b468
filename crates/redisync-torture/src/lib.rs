//! Torture test of redisync: does any lock ever get granted twice, or any
//! fencing token go back?
//!
//! A run starts the main `redis-server` (for [`Lock`], [`FairLock`],
//! [`RwLock`], [`Semaphore`] and [`MultiLock`]), a replica of it, and three
//! nodes for a [`Redlock`], and two processes of workers: this one and a
//! child process (the same binary, `redisync-torture worker ...`). Each
//! process has four client sets: one connected directly, one through a
//! [`FaultProxy`] per server, one with the restart guard on and one with
//! replica sync on (these two on names of their own; the crate's README.md
//! has the details). Its tasks run the whole public API at random (see the
//! `workload` module: re-entry, `extend`, cancelled and zero-wait
//! acquisitions, both sides of a read-write lock with downgrades and
//! refused upgrades, multi-permit semaphores, `MultiLock`, guards moved to
//! other tasks, `run_locked` work with runtime stalls, `Leader::run` jobs,
//! `force_unlock`, clients shut down holding locks) on a few shared names. Meanwhile a fault schedule runs, one fault at a time
//! ([`FaultKind`]): servers paused, the worker process paused, proxy
//! partitions, servers killed and restarted empty or from an older
//! snapshot, a failover to a lagging replica, subscriber connections
//! killed, the script cache flushed, connections reset, latency added.
//!
//! Every critical section is recorded ([`Section`]). The [`checker`] then
//! verifies (a) that valid holders are compatible (exclusive, shared, at
//! most n permits), (b) that tokens never go back, (c) that a fenced store
//! never accepted a stale write, (e) that no step of work under a lock ran
//! once its holder's lease clock said lost, (f) that zero-wait acquisitions
//! and client shutdowns answered in bounded time, and the run itself
//! verifies (d) that nothing stays held or renewed once the workers are
//! gone, and that no worker panicked or hung and every client set was
//! granted every kind.
//!
//! ```text
//! cargo test -p redisync-torture                                 # the short run
//! cargo run --release -p redisync-torture -- --minutes 10        # a long run
//! ```
//!
//! [`Lock`]: redisync::Lock
//! [`FairLock`]: redisync::FairLock
//! [`RwLock`]: redisync::RwLock
//! [`Semaphore`]: redisync::Semaphore
//! [`Redlock`]: redisync_redlock::Redlock
//! [`MultiLock`]: redisync_redlock::MultiLock
//! [`FaultProxy`]: redisync_testkit::FaultProxy
#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod checker;
mod coverage;
mod faults;
mod history;
mod rng;
mod run;
mod worker;
mod workload;

pub use coverage::{Coverage, Ending};
pub use faults::{FaultKind, FaultRecord};
pub use history::{
    client_of, is_guarded, is_synced, is_virtual_clock, now_us, stall_runtime, use_virtual_clock,
    Access, Force, History, Kill, Kind, Pause, Probe, Record, Section, Server, Step, Work,
};
pub use rng::Rng;
pub use run::{is_bookkeeping, missing_grants_of, run, worker_process, Config, Summary};
pub use worker::{run_workload, ClientSet, WorkloadRun};
pub use workload::{Connect, Counts, Settings};
