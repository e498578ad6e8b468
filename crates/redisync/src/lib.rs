#![doc = include_str!("../README.md")]
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
mod client;
mod connect;
mod connection;
mod engine;
mod error;
mod fair_lock;
pub mod fenced;
mod guard;
mod hold;
mod hub;
pub mod inspect;
mod keys;
mod latch;
pub mod leader;
// The seam under the engine, public for a simulated Redis (`redisync-sim`),
// not for applications: hidden from the documentation, which docs.rs
// builds with every feature.
#[cfg(feature = "simulation")]
#[doc(hidden)]
pub mod link;
#[cfg(not(feature = "simulation"))]
#[allow(unreachable_pub)]
mod link;
mod lock;
mod metrics;
mod owner;
mod replica;
mod restart;
mod retry;
mod rw_lock;
mod script;
mod semaphore;

pub use client::{Client, ClientBuilder};
pub use connect::{CredentialError, Credentials, ReconnectPolicy};
pub use connection::{ConnectionState, ConnectionWatch};
pub use error::{Error, RedisErrorKind, RedisFailure, Result};
pub use fair_lock::{FairLock, FairLockGuard};
pub use guard::{run_locked, try_run_locked, Guard, GuardError, LostSignal, Outcome};
pub use keys::KEY_LAYOUT;
pub use latch::CountDownLatch;
pub use leader::{Leader, Leadership};
pub use lock::{Lock, LockGuard};
pub use owner::Owner;
pub use retry::AcquireRetry;
pub use rw_lock::{ReadLock, RwLock, RwLockGuard, WriteLock};
pub use semaphore::{Semaphore, SemaphorePermit};
