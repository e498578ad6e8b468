//! The API across primitives, against real redis-server processes: the
//! guard trait and `run_locked`, fenced values, the inspector, absurd
//! arguments, and the TTL of every key left behind.

#[path = "../common/mod.rs"]
mod common;

mod absurd_arguments;
mod fenced;
mod guard;
mod inspect;
mod key_ttl;
