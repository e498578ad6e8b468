//! Distributed locks and coordination for async Rust on Redis: what
//! Redisson is to Java, on the `fred` client and tokio.
//!
//! ```no_run
//! # async fn write_order(_token: u64) -> redisync::Result<()> { Ok(()) }
//! # async fn demo() -> redisync::Result<()> {
//! let client = redisync::Client::connect("redis://127.0.0.1:6379").await?;
//! let guard = client.lock("orders:42").lock().await?; // renewed while held
//! write_order(guard.fencing_token()).await?; // the resource rejects older tokens
//! guard.unlock().await?;
//! # Ok(()) }
//! ```
//!
//! # What is here
//!
//! | primitive | handle | guard |
//! |---|---|---|
//! | re-entrant lock | [`Lock`] (`client.lock(name)`) | [`LockGuard`] |
//! | fair lock (FIFO across clients) | [`FairLock`] | [`FairLockGuard`] |
//! | read-write lock | [`RwLock`] ([`ReadLock`], [`WriteLock`]) | [`RwLockGuard`] |
//! | semaphore with leased permits | [`Semaphore`] (declare its size: [`Semaphore::with_permits`]) | [`SemaphorePermit`] |
//! | count-down latch, by event or by member | [`CountDownLatch`] | |
//! | leader election | [`Leader`] ([`leader`]: status, watch, terms) | [`Leadership`] |
//! | fenced values in Redis | [`fenced::Fenced`] | |
//! | who holds what | [`inspect`] | |
//!
//! `MultiLock` (all-or-nothing over several locks) and `Redlock` (a majority
//! of independent Redis masters) are in the `redisync-redlock` crate.
//!
//! Every guard has a fencing token, a loss signal and its validity
//! ([`Guard`], [`LostSignal`]); [`run_locked`] runs work only while a lock is
//! held. [`Owner`] says who re-enters (the tokio task by default).
//! [`Client::connection_state`] tells when holds may be lost;
//! [`ClientBuilder`] sets TLS (feature `tls`), credentials, timeouts, the
//! reconnect policy and [`AcquireRetry`].
//!
//! # Guarantees in short
//!
//! - At most one holder per lock name while its lease lasts, whatever a
//!   call's outcome (reply, error, timeout, the future dropped): an
//!   acquisition in doubt is undone before the next attempt.
//! - Tokens strictly increase per name, also after Redis lost the name's
//!   keys.
//! - A guard knows when its hold is lost, by its own lease clock first: a
//!   stalled process never works on past its lease.
//! - A dropped future, guard or panicking task leaves nothing held beyond
//!   the lease; releases finish in the background.
//! - A waiting acquisition rides out a Redis blip until its deadline.
//! - What Redis itself can lose (a failover before replication, a restart
//!   without persistence) is bounded by [`ClientBuilder::replica_sync`] and
//!   [`ClientBuilder::restart_guard`]; fencing tokens protect the resource
//!   in any case.
//!
//! The repository's docs have the detail, the set-up and the recipes:
//! guarantees and their limits
//! (<https://github.com/redisync/redisync/blob/main/docs/guarantees.md>),
//! connecting (<https://github.com/redisync/redisync/blob/main/docs/connecting.md>),
//! fairness (<https://github.com/redisync/redisync/blob/main/docs/fairness.md>),
//! the data layout (<https://github.com/redisync/redisync/blob/main/docs/data-layout.md>),
//! and the rest from the README (<https://github.com/redisync/redisync#readme>).
#![doc(test(attr(deny(warnings), allow(dead_code, unused_variables))))]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

// The root holds the client, the primitives with their guards, what every
// guard has, the errors and the connection settings; the families'
// auxiliary types are in the public modules `inspect`, `fenced` and
// `leader` (as tokio's `sync::mpsc`). `tests/public_api.rs` compares what
// this file exports with `tests/public_api.txt`: a new public name is a
// decision, made in that listing.

// Support for `redisync-redlock`, not for applications: a hidden module
// rather than hidden methods on the handles, so that a user cannot reach it
// by accident (see its comment).
#[doc(hidden)]
pub mod __private;
// The code blocks of the README and of docs/*.md are compiled as doctests
// (they are not the crate's docs: those are written for docs.rs, above).
// `README.md` and `docs` are links in this crate's directory to the
// repository's, so `cargo package` ships them and the package builds.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/api.md")]
struct ApiDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/writing-a-service.md")]
struct WritingAServiceDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/guarantees.md")]
struct GuaranteesDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/fairness.md")]
struct FairnessDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/connecting.md")]
struct ConnectingDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/data-layout.md")]
struct DataLayoutDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/operating.md")]
struct OperatingDoctests;

mod client;
mod connection;
mod engine;
mod error;
mod fair_lock;
pub mod fenced;
mod guard;
pub mod inspect;
mod latch;
pub mod leader;
// The seam under the engine (`redis::link`), public for a simulated Redis
// (`redisync-sim`), not for applications: hidden from the documentation,
// which docs.rs builds with every feature.
#[cfg(feature = "simulation")]
#[doc(hidden)]
pub use redis::link;
mod lock;
mod metrics;
mod mutex;
mod owner;
mod redis;
mod retry;
mod rw_lock;
mod semaphore;

pub use client::{Client, ClientBuilder};
pub use connection::{ConnectionState, ConnectionWatch};
pub use error::{Error, RedisErrorKind, RedisFailure, Result};
pub use fair_lock::{FairLock, FairLockGuard};
pub use guard::{run_locked, try_run_locked, Guard, GuardError, LostSignal, Outcome};
pub use latch::CountDownLatch;
pub use leader::{Leader, Leadership};
pub use lock::{Lock, LockGuard};
pub use owner::Owner;
pub use redis::connect::{CredentialError, Credentials, ReconnectPolicy};
pub use redis::keys::KEY_LAYOUT;
pub use retry::AcquireRetry;
pub use rw_lock::{ReadLock, RwLock, RwLockGuard, WriteLock};
pub use semaphore::{PermitId, Semaphore, SemaphorePermit};
