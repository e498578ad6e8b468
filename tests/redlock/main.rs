//! `redisync-redlock` against real, independent redis-server processes:
//! `MultiLock` and `Redlock`.

#[path = "../common/mod.rs"]
mod common;

mod multi_lock;
mod redlock;
