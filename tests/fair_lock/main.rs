//! `FairLock` against real redis-server processes: FIFO order across
//! clients, eviction of crashed waiters, cancellation, faults and owner
//! checks.

#[path = "../common/mod.rs"]
mod common;

mod fair_lock;
