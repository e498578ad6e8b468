//! `MultiLock` (all-or-nothing over several [`redisync::Lock`]s) and Redlock
//! (a majority of independent Redis masters) for redisync.
//!
//! Not implemented yet: this crate is a placeholder so the workspace layout
//! is final. See the project issues for the plan.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub use redisync;
