//! `MultiLock` (all-or-nothing over several [`redisync::Lock`]s) and
//! `Redlock` (a majority of independent Redis masters) for redisync.
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
