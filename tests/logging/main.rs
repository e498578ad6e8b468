//! Tests that read what the process logs (`common::capture`: a process-wide
//! `log` logger and `tracing` subscriber recording every event at warn level
//! or above): errors and logging, and a `Lock` guard's release in its drop.
//!
//! They take `capture::serial` and share their process with no other test:
//! a test elsewhere that warns while one of these runs would put records in
//! its capture. A test that does not read the capture belongs in another
//! binary (a `Lock` test in `lock`).

#[path = "../common/mod.rs"]
mod common;

mod drop_fold;
mod drop_release;
mod errors;
