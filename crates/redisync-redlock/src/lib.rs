//! [`MultiLock`] (all-or-nothing over several [`redisync::Lock`]s) and
//! [`Redlock`] (a majority of independent Redis masters) for redisync.
//!
//! Both are built on [`redisync::Lock`], one per lock or per node, so
//! waiting, leases, watchdog renewal, owner checks and fencing counters are
//! those of the core lock.
//!
//! - [`MultiLock`] holds every member or none: it never holds one member
//!   while waiting for another, so opposite orders cannot deadlock.
//! - [`Redlock`] holds a lock while a majority (N/2+1) of N independent
//!   masters grant it: parallel attempts bounded by a node timeout, validity
//!   `lease - elapsed - drift`, random retries, a restart guard (nodes up for
//!   less than `max_lease` do not count), fencing tokens that strictly
//!   increase across nodes, extension by a majority, loss reporting.
//!
//! Errors are this crate's [`Error`]: [`Error::QuorumNotReached`] carries
//! [`Votes`], saying how many nodes granted, refused, timed out, failed or
//! were too young.
//!
//! ```no_run
//! # async fn demo() -> redisync_redlock::Result<()> {
//! use std::time::Duration;
//! use redisync_redlock::{MultiLock, Redlock};
//!
//! let mut locks = Vec::new();
//! for url in ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"] {
//!     locks.push(redisync::Client::connect(url).await?.lock("orders:42"));
//! }
//! let redlock = Redlock::builder(locks)
//!     .max_lease(Duration::from_secs(30))
//!     .node_timeout(Duration::from_millis(100))
//!     .build()?;
//! if let Some(guard) = redlock.try_lock(Duration::from_secs(5), Some(Duration::from_secs(10))).await? {
//!     println!("token {} valid for {:?}", guard.fencing_token(), guard.validity());
//!     guard.unlock().await?;
//! }
//!
//! let client = redisync::Client::connect("redis://127.0.0.1:6379").await?;
//! let both = MultiLock::new(vec![client.lock("account:1"), client.lock("account:2")])?;
//! let guard = both.lock().await?;
//! guard.unlock().await?;
//! # Ok(()) }
//! ```
#![doc(test(attr(deny(warnings), allow(dead_code, unused_variables))))]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod error;
mod multi_lock;
mod redlock;
mod validity;

pub use error::{Error, MemberError, Result, Votes};
pub use multi_lock::{MultiLock, MultiLockGuard};
pub use redisync;
pub use redlock::{Redlock, RedlockBuilder, RedlockGuard};

/// Makes this thread's Redlocks read tokio's (paused) clock as their wall
/// clock, starting at `start_us` microseconds since the Unix epoch now, and
/// seed their retry jitter from `seed`: a simulated run then replays
/// exactly. Feature `simulation`; not for applications.
#[cfg(feature = "simulation")]
pub fn use_virtual_clock(start_us: u64, seed: u64) {
    validity::virtual_clock::use_virtual_clock(start_us, seed);
}
