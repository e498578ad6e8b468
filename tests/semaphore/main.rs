//! `Semaphore` against real redis-server processes: permits and their
//! leases, the queue of waiting clients and its hand-off, and the
//! bookkeeping of its scripts.

#[path = "../common/mod.rs"]
mod common;

mod queue;
mod scripts;
mod semaphore;
