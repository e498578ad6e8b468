//! `RwLock` against real redis-server processes: both sides, downgrades,
//! and its queue of waiting clients (FIFO with writer preference, hand-offs).

#[path = "../common/mod.rs"]
mod common;

mod queue;
mod rw_lock;
