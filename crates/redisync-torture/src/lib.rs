//! Torture test of redisync: does any lock ever get granted twice?
//!
//! A run starts four `redis-server`s (the main one, for [`Lock`], [`FairLock`],
//! the write side of [`RwLock`] and a one-permit [`Semaphore`]; and three
//! nodes for a [`Redlock`]) and two processes of workers: this one and a
//! child process (the same binary, `redisync-torture worker ...`). Each
//! process has two client sets, one connected directly and one through a
//! [`FaultProxy`] per server, and runs a few tasks per kind of lock, all
//! contending for one lock per kind. Meanwhile a fault schedule runs, one
//! fault at a time ([`FaultKind`]): servers paused (`SIGSTOP`) for longer
//! than the lease, the worker process paused likewise, proxy partitions, servers killed and restarted empty,
//! subscriber connections killed, the script cache flushed, connections
//! reset, latency added.
//!
//! Every critical section is recorded ([`Section`]): lock, fencing token,
//! start, end, holder, and until when its guard said it was valid. The
//! [`checker`] then verifies (a) mutual exclusion while leases are believed
//! valid, (b) strictly increasing tokens in grant order, (c) that a fenced
//! store never accepted a stale write, and the run itself verifies (d) that
//! nothing stays held or renewed once the workers are gone.
//!
//! ```text
//! cargo test -p redisync-torture                                 # the short run (about 40 s)
//! cargo run --release -p redisync-torture -- --minutes 10        # a long run
//! ```
//!
//! [`Lock`]: redisync::Lock
//! [`FairLock`]: redisync::FairLock
//! [`RwLock`]: redisync::RwLock
//! [`Semaphore`]: redisync::Semaphore
//! [`Redlock`]: redisync_redlock::Redlock
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
mod faults;
mod history;
mod rng;
mod run;
mod worker;

pub use faults::{FaultKind, FaultRecord};
pub use history::{now_us, History, Kill, Kind, Section, Server};
pub use run::{run, worker_process, Config, Summary};
pub use worker::Counts;
