//! How the client connects and rides out its connections' faults: blips
//! while waiting, the connection state, TLS and authentication, Redis
//! Cluster, Sentinel, replica sync and `Client::shutdown`.

#[path = "../common/mod.rs"]
mod common;

mod blip;
mod cluster;
mod replica_sync;
mod sentinel;
mod shutdown;
mod state;
mod tls;
