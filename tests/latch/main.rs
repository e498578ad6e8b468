//! `CountDownLatch` against real redis-server processes: counting down and
//! waking waiters, phases, members, faults and shutdown.

#[path = "../common/mod.rs"]
mod common;

mod latch;
mod members;
mod phases;
