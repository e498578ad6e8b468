//! Leader election against real redis-server processes.

#[path = "../common/mod.rs"]
mod common;

mod leader;
