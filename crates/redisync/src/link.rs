//! The seam under the engine: everything the engine and the primitives ask
//! of Redis, in their terms (run a script, a plain command, which
//! connection answered). [`FredLink`] is the production side, on fred; a
//! simulated Redis implements the same trait (the `simulation` feature
//! makes it public), so the real engine runs against it.
//!
//! Values, keys and errors stay fred's types: they are plain data, and the
//! engine's error rules (unknown outcome, refusal while a slot moves) read
//! them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use fred::clients::Client as RedisClient;
use fred::error::Error as RedisError;
use fred::interfaces::{ClientLike, EventInterface, LuaInterface};
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand, Key, Value};

/// What a [`Link`] call returns.
pub type LinkFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, RedisError>> + Send + 'a>>;

/// One run of a Lua script.
#[derive(Debug)]
pub struct ScriptCall<'a> {
    /// The script's SHA1 (EVALSHA).
    pub sha: &'a str,
    /// The script's body: set, the script is sent whole (EVAL), after the
    /// server answered NOSCRIPT to its SHA1.
    pub body: Option<&'a str>,
    /// `KEYS`.
    pub keys: Vec<Key>,
    /// `ARGV`.
    pub args: Vec<Value>,
    /// How many times the link may send it (a re-send after a cluster
    /// redirection; never after a connection was lost with it in flight).
    pub attempts: u32,
}

/// One plain command (`WAIT`, `HMGET`, `INFO`, `EXISTS`, `PUBLISH`, ...).
#[derive(Debug)]
pub struct Command<'a> {
    /// The command's name.
    pub name: &'static str,
    /// The key whose server must run it (a cluster routes by it); `None`:
    /// any server.
    pub route: Option<&'a str>,
    /// Its arguments (keys included).
    pub args: Vec<Value>,
}

/// The engine's connection to one Redis deployment (see the [module
/// docs](self)).
pub trait Link: Send + Sync + 'static {
    /// Runs a script on the server of its first key.
    fn script<'a>(&'a self, call: ScriptCall<'a>) -> LinkFuture<'a, Value>;

    /// Runs a plain command; never sent twice.
    fn command<'a>(&'a self, command: Command<'a>) -> LinkFuture<'a, Value>;

    /// How many times the command connection was established again since
    /// the link was made. A reply read before a call came over a connection
    /// this count includes.
    fn connection_generation(&self) -> u64;

    /// Whether keys are spread over a cluster's servers (scripts of one
    /// batch must then share a hash slot).
    fn is_clustered(&self) -> bool;

    /// The server's version (`redis_version` of `INFO server`) as read at
    /// connect, `None` when unknown.
    fn server_version(&self) -> Option<String>;
}

/// The production [`Link`]: fred's command connection.
pub(crate) struct FredLink {
    pub(crate) redis: RedisClient,
    /// Reconnections of the command connection seen so far, and the
    /// channel they are announced on.
    reconnects: Mutex<(
        tokio::sync::broadcast::Receiver<fred::types::config::Server>,
        u64,
    )>,
}

impl FredLink {
    pub(crate) fn new(redis: RedisClient) -> FredLink {
        let reconnects = Mutex::new((redis.reconnect_rx(), 0));
        FredLink { redis, reconnects }
    }
}

impl Link for FredLink {
    fn script<'a>(&'a self, call: ScriptCall<'a>) -> LinkFuture<'a, Value> {
        Box::pin(async move {
            let options = Options {
                max_attempts: Some(call.attempts),
                ..Options::default()
            };
            let redis = self.redis.with_options(&options);
            // The typed calls: fred never re-sends them after a reconnect
            // (see `LuaScript::run_idempotent`).
            match call.body {
                None => redis.evalsha(call.sha, call.keys, call.args).await,
                Some(body) => redis.eval(body, call.keys, call.args).await,
            }
        })
    }

    fn command<'a>(&'a self, command: Command<'a>) -> LinkFuture<'a, Value> {
        Box::pin(async move {
            let hash = match command.route {
                Some(key) => ClusterHash::Custom(fred::util::redis_keyslot(key.as_bytes())),
                None => ClusterHash::Random,
            };
            let custom = CustomCommand::new(command.name, hash, false);
            self.redis.custom(custom, command.args).await
        })
    }

    fn connection_generation(&self) -> u64 {
        use tokio::sync::broadcast::error::TryRecvError;
        let mut guard = crate::hold::lock_unpoisoned(&self.reconnects);
        let (rx, count) = &mut *guard;
        loop {
            match rx.try_recv() {
                Ok(_) => *count += 1,
                // Missed announcements were reconnections too.
                Err(TryRecvError::Lagged(n)) => *count += n + 1,
                Err(TryRecvError::Empty | TryRecvError::Closed) => return *count,
            }
        }
    }

    fn is_clustered(&self) -> bool {
        self.redis.is_clustered()
    }

    fn server_version(&self) -> Option<String> {
        self.redis.server_version().map(|v| v.to_string())
    }
}
