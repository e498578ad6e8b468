//! A simulated Redis for deterministic simulation of redisync.
//!
//! Every state change of redisync is a Lua script of `lua/` (with the
//! helper files of `lua/lib/` it uses in front), run by EVALSHA. [`SimRedis`] runs those
//! scripts unchanged, in an embedded Lua 5.1 (the version Redis embeds),
//! against an in-memory keyspace whose clock is virtual: the test decides
//! what time it is ([`SimRedis::set_time_us`], [`SimRedis::advance`]), so
//! leases, expiries and fencing tokens (which follow the server clock)
//! are reproducible.
//!
//! What it mirrors of Redis 7.0 (checked against a real `redis-server` by
//! the differential test `tests/differential.rs`, which runs the project's
//! scripts on both with random arguments and compares every reply and the
//! whole keyspace after every step):
//!
//! * the data types the scripts use: strings, hashes (in insertion order,
//!   as a small hash's HGETALL answers), lists and sorted sets (by score,
//!   then member);
//! * expiry in milliseconds on the virtual clock, lazily: a key past its
//!   deadline does not exist; `TIME` answers the virtual clock;
//! * the commands the scripts call, with the options they use and Redis's
//!   error replies (`WRONGTYPE`, integers and floats parsed as Redis does,
//!   doubles formatted as `%.17g`);
//! * scripting: `redis.call` (a failing command fails the script, with
//!   Redis's `script: <sha>, on @user_script:<line>.` suffix, and what it
//!   wrote stays: Redis does not roll back), `redis.pcall` (error tables),
//!   `redis.error_reply`, `redis.status_reply`, the conversions between
//!   Lua values and replies, and the read-only globals;
//! * pub/sub: `PUBLISH`/`SPUBLISH` append to a log drained by
//!   [`SimRedis::take_published`] (no subscribers: they answer 0).
//!
//! Not mirrored: a hash converted to a hash table (more than 128 fields or
//! a value over 64 bytes) still answers HGETALL in insertion order; no
//! RESP3, no script time limit, no `bit`/`cjson`/`struct` libraries, and
//! only the commands listed at [`SimRedis::command`].
//!
//! ```
//! use redisync_sim::{Reply, SimRedis};
//!
//! let mut redis = SimRedis::with_time_us(1_700_000_000_000_000);
//! let reply = redis.eval(
//!     "redis.call('set', KEYS[1], ARGV[1], 'PX', 1000) return redis.call('pttl', KEYS[1])",
//!     &["k"],
//!     &["v"],
//! );
//! assert_eq!(reply, Reply::Integer(1000));
//! redis.advance(std::time::Duration::from_millis(1001));
//! assert_eq!(redis.command(&["exists", "k"]), Reply::Integer(0));
//! ```
#![deny(missing_docs)]

mod db;
mod format;
mod reply;
mod script;
pub mod simulate;
pub mod world;

use std::time::Duration;

pub use db::{Data, KeyDump, Message};
pub use reply::Reply;
pub use simulate::{simulate, SimConfig, SimOutcome};
pub use world::{Faults, Scheduled, SimLink, World};

/// The virtual clock of [`SimRedis::new`]: 2024-01-01T00:00:00Z, in
/// microseconds since the Unix epoch.
pub const DEFAULT_START_US: i64 = 1_704_067_200_000_000;

/// An in-memory Redis with a virtual clock that runs Lua scripts as Redis
/// 7.0 does (see the crate documentation).
#[derive(Debug)]
pub struct SimRedis {
    db: db::Db,
    engine: script::Engine,
    /// When this process started, on its clock (µs): `INFO`'s uptime.
    started_us: i64,
}

impl Default for SimRedis {
    fn default() -> Self {
        SimRedis::new()
    }
}

impl SimRedis {
    /// An empty keyspace, its clock at [`DEFAULT_START_US`].
    pub fn new() -> SimRedis {
        SimRedis::with_time_us(DEFAULT_START_US)
    }

    /// An empty keyspace, its clock at `now_us` (microseconds since the
    /// Unix epoch).
    pub fn with_time_us(now_us: i64) -> SimRedis {
        SimRedis {
            db: db::Db::new(now_us),
            engine: script::Engine::new(),
            started_us: now_us,
        }
    }

    /// `INFO`'s `uptime_in_seconds`: whole seconds since this process
    /// started, on its clock.
    pub fn uptime_secs(&self) -> u64 {
        u64::try_from((self.db.now_us - self.started_us).div_euclid(1_000_000)).unwrap_or(0)
    }

    /// `LASTSAVE`: the server's start or its last save, in seconds.
    pub fn lastsave(&self) -> i64 {
        self.db.lastsave
    }

    /// The virtual clock, microseconds since the Unix epoch.
    pub fn time_us(&self) -> i64 {
        self.db.now_us
    }

    /// The virtual clock, milliseconds since the Unix epoch (what expiry
    /// compares deadlines with).
    pub fn time_ms(&self) -> i64 {
        self.db.now_ms()
    }

    /// Sets the virtual clock. It may go back (a real server's clock can
    /// step back too): deadlines stay where they are.
    pub fn set_time_us(&mut self, now_us: i64) {
        self.db.now_us = now_us;
    }

    /// Moves the virtual clock forward.
    ///
    /// # Panics
    /// When the clock would pass `i64::MAX` microseconds.
    pub fn advance(&mut self, by: Duration) {
        let by = i64::try_from(by.as_micros()).expect("an advance fits in i64 microseconds");
        self.db.now_us = self
            .db
            .now_us
            .checked_add(by)
            .expect("the virtual clock stays below i64::MAX microseconds");
    }

    /// Runs a script as EVAL does (and caches it for
    /// [`SimRedis::evalsha`]): its reply, or the error reply of a script
    /// that does not compile or fails.
    pub fn eval<K: AsRef<[u8]>, A: AsRef<[u8]>>(
        &mut self,
        script: &str,
        keys: &[K],
        args: &[A],
    ) -> Reply {
        match self.engine.load(script.as_bytes()) {
            Ok(sha) => self.evalsha(&sha, keys, args),
            Err(e) => e,
        }
    }

    /// Runs a cached script as EVALSHA does (`NOSCRIPT` when unknown).
    pub fn evalsha<K: AsRef<[u8]>, A: AsRef<[u8]>>(
        &mut self,
        sha: &str,
        keys: &[K],
        args: &[A],
    ) -> Reply {
        let keys: Vec<&[u8]> = keys.iter().map(AsRef::as_ref).collect();
        let args: Vec<&[u8]> = args.iter().map(AsRef::as_ref).collect();
        self.engine.run(&mut self.db, sha, &keys, &args)
    }

    /// Caches a script as SCRIPT LOAD does: its SHA-1, or the compile
    /// error reply.
    ///
    /// # Errors
    /// The error reply when the script does not compile.
    pub fn script_load(&mut self, script: &str) -> Result<String, Reply> {
        self.engine.load(script.as_bytes())
    }

    /// Runs one command as a client sends it (outside a script): the
    /// commands the scripts use (DEL EXISTS GET SET HDEL HEXISTS HGET HGETALL
    /// HINCRBY HLEN HMGET HSET HSETNX LINDEX LLEN LPOP LPOS LPUSH LRANGE LREM
    /// LSET LTRIM PEXPIRE PTTL RPOP RPUSH TIME TYPE ZADD ZCARD ZRANGE
    /// ZRANGEBYSCORE ZREM ZREMRANGEBYSCORE ZSCORE PUBLISH SPUBLISH), KEYS,
    /// DBSIZE, FLUSHALL, and EVAL, EVALSHA, SCRIPT LOAD|EXISTS|FLUSH.
    pub fn command<A: AsRef<[u8]>>(&mut self, words: &[A]) -> Reply {
        let argv: Vec<Vec<u8>> = words.iter().map(|a| a.as_ref().to_vec()).collect();
        let Some(first) = argv.first() else {
            return Reply::error("ERR empty command");
        };
        let name = String::from_utf8_lossy(first).to_ascii_lowercase();
        match name.as_str() {
            "eval" | "evalsha" => return self.eval_command(&name, &argv),
            "script" => return self.script_command(&argv),
            _ => {}
        }
        let Some(arity) = db::arity(&name) else {
            let mut shown = String::new();
            for a in &argv[1..] {
                shown.push('\'');
                shown.push_str(&String::from_utf8_lossy(a));
                shown.push_str("' ");
            }
            return Reply::Error(format!(
                "ERR unknown command '{}', with args beginning with: {shown}",
                String::from_utf8_lossy(first)
            ));
        };
        let count = i32::try_from(argv.len()).unwrap_or(i32::MAX);
        if (arity > 0 && count != arity) || count < -arity {
            return Reply::Error(format!(
                "ERR wrong number of arguments for '{name}' command"
            ));
        }
        self.db.execute(&name, &argv)
    }

    fn eval_command(&mut self, name: &str, argv: &[Vec<u8>]) -> Reply {
        if argv.len() < 3 {
            return Reply::Error(format!(
                "ERR wrong number of arguments for '{name}' command"
            ));
        }
        let Some(numkeys) = format::parse_i64(&argv[2]) else {
            return Reply::error("ERR value is not an integer or out of range");
        };
        let rest = &argv[3..];
        let Ok(numkeys) = usize::try_from(numkeys) else {
            return Reply::error("ERR Number of keys can't be negative");
        };
        if numkeys > rest.len() {
            return Reply::error("ERR Number of keys can't be greater than number of args");
        }
        let (keys, values) = rest.split_at(numkeys);
        if name == "eval" {
            match self.engine.load(&argv[1]) {
                Ok(sha) => self.evalsha(&sha, keys, values),
                Err(e) => e,
            }
        } else {
            self.evalsha(&String::from_utf8_lossy(&argv[1]), keys, values)
        }
    }

    fn script_command(&mut self, argv: &[Vec<u8>]) -> Reply {
        let sub = argv
            .get(1)
            .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase());
        match (sub.as_deref(), argv.len()) {
            (Some("load"), 3) => match self.engine.load(&argv[2]) {
                Ok(sha) => Reply::Bulk(sha.into_bytes()),
                Err(e) => e,
            },
            (Some("exists"), n) if n >= 3 => Reply::Array(
                argv[2..]
                    .iter()
                    .map(|s| {
                        Reply::Integer(i64::from(self.engine.exists(&String::from_utf8_lossy(s))))
                    })
                    .collect(),
            ),
            (Some("flush"), 2 | 3) => {
                self.engine.flush();
                Reply::ok()
            }
            _ => Reply::error("ERR unknown subcommand or wrong number of arguments for 'script'"),
        }
    }

    /// The messages published since the last call (oldest first).
    pub fn take_published(&mut self) -> Vec<Message> {
        std::mem::take(&mut self.db.published)
    }

    /// Every live key, sorted, with its value and PTTL (nothing expires
    /// through this look).
    pub fn dump(&self) -> Vec<KeyDump> {
        self.db.dump()
    }

    /// One live key, as [`SimRedis::dump`] shows it.
    pub fn key(&self, key: impl AsRef<[u8]>) -> Option<KeyDump> {
        let key = key.as_ref();
        self.db.dump().into_iter().find(|k| k.key == key)
    }

    /// Drops the keys past their deadline (as Redis's active expiry does
    /// in the background; nothing observable changes).
    pub fn purge_expired(&mut self) {
        self.db.purge_expired();
    }

    /// Deletes every key (FLUSHALL); cached scripts stay.
    pub fn flush(&mut self) {
        self.db.execute("flushall", &[b"flushall".to_vec()]);
    }

    /// The keyspace as a snapshot (an RDB save) would keep it; `LASTSAVE`
    /// becomes now.
    pub fn snapshot(&mut self) -> Snapshot {
        self.db.lastsave = self.db.now_us.div_euclid(1_000_000);
        let mut db = self.db.clone();
        db.published.clear();
        Snapshot(db)
    }

    /// A restart: the script cache is empty, and the keyspace is empty or
    /// loaded from `from` (keys whose deadline passed meanwhile are gone,
    /// as Redis drops them on load). The clock stays.
    pub fn restart(&mut self, from: Option<&Snapshot>) {
        let now_us = self.db.now_us;
        self.db = from.map_or_else(|| db::Db::new(now_us), |s| s.0.clone());
        self.db.now_us = now_us;
        // A new process: its start is its last save.
        self.db.lastsave = now_us.div_euclid(1_000_000);
        self.started_us = now_us;
        self.db.published.clear();
        self.db.purge_expired();
        self.engine.flush();
    }
}

/// A keyspace saved by [`SimRedis::snapshot`].
#[derive(Debug, Clone)]
pub struct Snapshot(db::Db);
