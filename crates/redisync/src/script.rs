//! Lua scripts: embedded once, run by EVALSHA, falling back to EVAL when the
//! server's script cache is empty (NOSCRIPT after a restart, failover or
//! `SCRIPT FLUSH`). EVAL also caches the script, so the next EVALSHA hits.

use fred::clients::Client as RedisClient;
use fred::interfaces::ClientLike;
use fred::interfaces::LuaInterface;
use fred::types::config::Options;
use fred::types::{FromValue, Key, Value};

use crate::error::{Error, Result};

/// One script of `lua/`.
pub(crate) struct LuaScript {
    pub(crate) name: &'static str,
    src: &'static str,
    sha: String,
}

impl LuaScript {
    pub(crate) fn new(name: &'static str, src: &'static str) -> LuaScript {
        LuaScript {
            name,
            src,
            sha: fred::util::sha1_hash(src),
        }
    }

    /// Runs the script once: no re-send after a reconnect or a cluster
    /// redirection (for scripts whose second run would change the outcome,
    /// e.g. counting down a re-entrant hold). `key` names the lock in errors.
    ///
    /// The EVAL fallback only follows a NOSCRIPT reply, so the script ran at
    /// most once.
    pub(crate) async fn run<R: FromValue>(
        &self,
        redis: &RedisClient,
        key: &str,
        keys: Vec<Key>,
        args: Vec<Value>,
    ) -> Result<R> {
        self.run_with(redis, key, keys, args, 1).await
    }

    /// Runs a script whose second run changes nothing that matters (owner-
    /// and token-checked releases, renewals, reads, an acquisition that a
    /// repeat only re-enters): fred may re-send it after a reconnect and
    /// follows cluster redirections (MOVED/ASK after a slot migration or a
    /// failover), which a single attempt cannot.
    pub(crate) async fn run_idempotent<R: FromValue>(
        &self,
        redis: &RedisClient,
        key: &str,
        keys: Vec<Key>,
        args: Vec<Value>,
    ) -> Result<R> {
        self.run_with(redis, key, keys, args, 3).await
    }

    /// Runs the script with at most `attempts` sends (see [`LuaScript::run`]
    /// and [`LuaScript::run_idempotent`]).
    pub(crate) async fn run_with<R: FromValue>(
        &self,
        redis: &RedisClient,
        key: &str,
        keys: Vec<Key>,
        args: Vec<Value>,
        attempts: u32,
    ) -> Result<R> {
        let options = Options {
            max_attempts: Some(attempts),
            ..Options::default()
        };
        let redis = redis.with_options(&options);
        let first = redis
            .evalsha::<R, _, _, _>(self.sha.as_str(), keys.clone(), args.clone())
            .await;
        let result = match first {
            Err(e) if e.details().starts_with("NOSCRIPT") => {
                tracing::debug!(script = self.name, "NOSCRIPT, sending the script body");
                redis.eval::<R, _, _, _>(self.src, keys, args).await
            }
            other => other,
        };
        result.map_err(|e| Error::from_script(self.name, key, e))
    }
}

macro_rules! lua_script {
    ($static:ident, $file:literal) => {
        pub(crate) static $static: std::sync::LazyLock<$crate::script::LuaScript> =
            std::sync::LazyLock::new(|| {
                $crate::script::LuaScript::new($file, include_str!(concat!("../lua/", $file)))
            });
    };
}
pub(crate) use lua_script;
