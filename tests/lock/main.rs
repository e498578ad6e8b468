//! `Lock` against real redis-server processes: acquisition and release,
//! faults, the queue of waiting clients and its hand-off, contention, the
//! acquire scripts' first read, and who re-enters (`Owner`, flows of one
//! owner, `hand_off()`; these also for the other re-entrant primitives).

#[path = "../common/mod.rs"]
mod common;

mod acquire_read;
mod contention;
mod faults;
mod hand_off;
mod lock;
mod owner;
mod owner_turns;
mod queue;
