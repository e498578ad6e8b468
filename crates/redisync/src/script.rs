//! Lua scripts: embedded once, run by EVALSHA, falling back to EVAL when the
//! server's script cache is empty (NOSCRIPT after a restart, failover or
//! `SCRIPT FLUSH`). EVAL also caches the script, so the next EVALSHA hits.

use fred::clients::Client as RedisClient;
use fred::interfaces::ClientLike;
use fred::interfaces::LuaInterface;
use fred::types::config::Options;
use fred::types::{FromValue, Key, Value};
use std::time::Duration;

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

    /// Runs the script once: no re-send after a reconnect (for scripts
    /// whose second run would change the outcome, e.g. counting down a
    /// re-entrant hold). `key` names the lock in errors.
    ///
    /// The EVAL fallback only follows a NOSCRIPT reply and the re-send only
    /// a cluster redirection (MOVED/ASK after a slot migration or a
    /// failover): both mean the script did not run, so it ran at most once.
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
    /// repeat only re-enters): fred may also re-send it after a reconnect.
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
        let mut redirected = 0;
        loop {
            let first = redis
                .evalsha::<R, _, _, _>(self.sha.as_str(), keys.clone(), args.clone())
                .await;
            let result = match first {
                Err(e) if e.details().starts_with("NOSCRIPT") => {
                    tracing::debug!(script = self.name, "NOSCRIPT, sending the script body");
                    redis
                        .eval::<R, _, _, _>(self.src, keys.clone(), args.clone())
                        .await
                }
                other => other,
            };
            match result {
                Err(e) if was_redirected(&e) && redirected < MAX_REDIRECTED_RUNS => {
                    // The server answered MOVED/ASK (slot migration or
                    // failover), so the script did not run; fred has
                    // refreshed its slot map. Send it again ourselves.
                    redirected += 1;
                    tracing::debug!(script = self.name, redirected, "redirected, sending again");
                    if redirected > 1 {
                        // ASK while a slot is migrating: give it a moment.
                        tokio::time::sleep(Duration::from_millis(10 * u64::from(redirected))).await;
                    }
                }
                other => return other.map_err(|e| Error::from_script(self.name, key, e)),
            }
        }
    }
}

/// How often a script is sent again after the cluster redirected it.
const MAX_REDIRECTED_RUNS: u32 = 8;

/// fred answers "Too many failed write attempts." when it would write a
/// command again but its attempts are used up. With our settings (no
/// re-send after a connection loss: those commands fail with the IO error)
/// the only second write is the one that follows a MOVED or ASK reply, i.e.
/// the server refused the command before running it.
pub(crate) fn was_redirected(e: &fred::error::Error) -> bool {
    e.details().contains("Too many failed write attempts")
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
