//! Lua scripts: embedded once, run by EVALSHA, falling back to EVAL when the
//! server's script cache is empty (NOSCRIPT after a restart, failover or
//! `SCRIPT FLUSH`). EVAL also caches the script, so the next EVALSHA hits.

use std::time::Duration;

use fred::types::{FromValue, Key, Value};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::link::{Link, ScriptCall};

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
    /// a cluster refusal while a slot moves (MOVED/ASK after a migration or
    /// a failover, TRYAGAIN mid-migration): each means the script did not
    /// run, so it ran at most once. Refusals are retried for up to 2 s.
    pub(crate) async fn run<R: FromValue>(
        &self,
        link: &dyn Link,
        key: &str,
        keys: Vec<Key>,
        args: Vec<Value>,
    ) -> Result<R> {
        self.run_with(link, key, keys, args, 1).await
    }

    /// Runs a script whose second run changes nothing that matters (owner-
    /// and token-checked releases, renewals, reads, an acquisition that a
    /// repeat only re-enters), with up to 3 sends.
    ///
    /// What the attempts change, as fred 10.1 behaves: with one attempt
    /// ([`LuaScript::run`]) a script in flight when the connection drops is
    /// **not** sent again after the reconnect; it fails with an IO error
    /// (outcome unknown, compensated by the caller; shown through the fault
    /// proxy by `tests/lock/faults.rs::a_force_unlock_whose_reply_is_lost_never_runs_twice`).
    /// With more attempts it **may** be sent again and run twice (the
    /// conformance matrix's endings saw an acquisition reset after it ran
    /// come back granted), and fred re-sends after a cluster redirection.
    /// So only scripts whose second run changes nothing that matters come
    /// here; scripts that must never run twice (force-unlock deletes whoever
    /// holds the lock, a semaphore acquisition counts permits) use
    /// [`LuaScript::run`].
    pub(crate) async fn run_idempotent<R: FromValue>(
        &self,
        link: &dyn Link,
        key: &str,
        keys: Vec<Key>,
        args: Vec<Value>,
    ) -> Result<R> {
        self.run_with(link, key, keys, args, 3).await
    }

    /// Runs the script with at most `attempts` sends (see [`LuaScript::run`]
    /// and [`LuaScript::run_idempotent`]).
    pub(crate) async fn run_with<R: FromValue>(
        &self,
        link: &dyn Link,
        key: &str,
        keys: Vec<Key>,
        args: Vec<Value>,
        attempts: u32,
    ) -> Result<R> {
        self.run_refused_for(link, key, keys, args, attempts, REFUSED_RETRY_FOR)
            .await
    }

    /// [`LuaScript::run_with`] that returns a refusal while the slot moves
    /// at once (the caller has a way that the cluster does not refuse).
    pub(crate) async fn run_unless_refused<R: FromValue>(
        &self,
        link: &dyn Link,
        key: &str,
        keys: Vec<Key>,
        args: Vec<Value>,
        attempts: u32,
    ) -> Result<R> {
        self.run_refused_for(link, key, keys, args, attempts, Duration::ZERO)
            .await
    }

    async fn run_refused_for<R: FromValue>(
        &self,
        link: &dyn Link,
        key: &str,
        keys: Vec<Key>,
        args: Vec<Value>,
        attempts: u32,
        refusals_for: Duration,
    ) -> Result<R> {
        let mut refused_since = None;
        let mut pause = Duration::from_millis(5);
        loop {
            let send = |body| {
                link.script(ScriptCall {
                    sha: &self.sha,
                    body,
                    keys: keys.clone(),
                    args: args.clone(),
                    attempts,
                })
            };
            let result = match send(None).await {
                Err(e) if e.details().starts_with("NOSCRIPT") => {
                    tracing::debug!(script = self.name, "NOSCRIPT, sending the script body");
                    send(Some(self.src)).await
                }
                other => other,
            }
            .and_then(R::from_value);
            match result {
                Err(e) if crate::error::refused_unrun(&e) => {
                    // The slot is moving: the script did not run. Send it
                    // again (fred has refreshed its slot map after MOVED)
                    // until the slot settles or REFUSED_RETRY_FOR passes.
                    let since = *refused_since.get_or_insert_with(Instant::now);
                    if since.elapsed() + pause > refusals_for {
                        return Err(Error::from_script(self.name, key, e));
                    }
                    tracing::debug!(script = self.name, error = %e, "refused while the slot moves, sending again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                other => return other.map_err(|e| Error::from_script(self.name, key, e)),
            }
        }
    }
}

/// How long a script the cluster refuses while its slot moves is sent again.
const REFUSED_RETRY_FOR: Duration = Duration::from_secs(2);

/// Longest lease or wait bound accepted, to catch unit mistakes.
const MAX_LEASE: Duration = Duration::from_secs(366 * 24 * 3600);
/// A fencing token as a script argument; `None` is `''` (no token). An
/// integer goes out as the same bulk string of decimal digits a string
/// would, without building one (two allocations per argument: the string,
/// and fred's shared copy of it).
pub(crate) fn token_arg(token: Option<u64>) -> Value {
    match token.map(|t| (t, i64::try_from(t))) {
        None => Value::String("".into()),
        Some((_, Ok(t))) => Value::Integer(t),
        Some((t, Err(_))) => Value::String(t.to_string().into()),
    }
}

/// `d` in whole milliseconds for Lua, rounded up; zero and absurd values are
/// [`Error::InvalidArgument`].
pub(crate) fn checked_ms(what: &str, d: Duration) -> Result<i64> {
    if d.is_zero() {
        return Err(Error::InvalidArgument(format!("{what} must not be zero")));
    }
    if d > MAX_LEASE {
        return Err(Error::InvalidArgument(format!(
            "{what} of {d:?} is longer than a year (366 days); is the unit right?"
        )));
    }
    Ok(i64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(i64::MAX))
}

/// A `static` script of `lua/`, with `lua/prelude.lua` (shared type checks,
/// server time, the fencing-token rule) in front of it.
macro_rules! lua_script {
    ($static:ident, $file:literal) => {
        pub(crate) static $static: std::sync::LazyLock<$crate::redis::script::LuaScript> =
            std::sync::LazyLock::new(|| {
                $crate::redis::script::LuaScript::new(
                    $file,
                    concat!(
                        include_str!("../lua/prelude.lua"),
                        include_str!(concat!("../lua/", $file))
                    ),
                )
            });
    };
}
pub(crate) use lua_script;

#[cfg(test)]
mod tests {
    use super::*;

    /// Tokens go out as integers (fred sends them as bulk strings of their
    /// digits, as the strings were), unless too large for one.
    #[test]
    fn token_args_are_integers_where_they_fit() {
        assert_eq!(token_arg(None), Value::String("".into()));
        assert_eq!(token_arg(Some(42)), Value::Integer(42));
        let huge = u64::MAX;
        assert_eq!(
            token_arg(Some(huge)),
            Value::String(huge.to_string().into())
        );
    }
}
