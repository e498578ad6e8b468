//! Support for `redisync-redlock`, not for applications: hidden from the
//! documentation and outside the semver promise: it may change in any
//! release, in step with the sister crate.
//!
//! Why a hidden module of free functions rather than `#[doc(hidden)]`
//! methods on [`Lock`] and [`Client`]: a hidden method is still one `.`
//! away on every handle (method-call syntax, editor completion, code
//! copied from the sister crate), and its name does not say that it is
//! not for users. Here every use is spelled `redisync::__private::...`,
//! which says so at the call site; what Redlock needs of the core crate is
//! listed in one place; and the handles' inherent API is exactly the
//! documented one.
//!
//! What it holds: the fencing-token floor and advance Redlock uses to keep
//! its nodes' tokens in agreement, the per-node restart guard with what it
//! reads of a node (uptime, connection generation), and the constructors
//! of [`LostSignal`] for guards built outside this crate. And, for the
//! workspace's tests, simulator and benchmarks, the Lua scripts as the
//! library sends them (their helper files in front).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::error::Result;
use crate::guard::LostSignal;
use crate::lock::{Lock, LockGuard};

pub use crate::redis::restart::RestartGuard;

/// [`Lock::try_lock`], with a lower bound for the fencing token of a new
/// acquisition: the token is at least `min_token` when that is at most one
/// second ahead of the server's clock (tokens are microseconds of the
/// server clock or the counter + 1, whichever is larger; a larger bound is
/// ignored). A re-entry keeps the token it has.
///
/// The same bound on every node makes a Redlock's tokens agree, so no
/// round trip writes the largest back. A token above the server's clock is
/// outside a single server's fencing guarantee (docs/guarantees.md,
/// "Fencing"): once the counter is lost (`FLUSHALL`, a restart from an
/// older snapshot) the next tokens follow the clock and can be below it.
/// Redlock covers that with its majority and its per-node restart guard,
/// within the limits crates/redisync-redlock/README.md states.
///
/// # Errors
/// As [`Lock::try_lock`].
///
/// # Cancel safety
/// Cancel safe, as [`Lock::lock`].
pub async fn try_lock_with_min_token(
    lock: &Lock,
    wait: Duration,
    lease: Option<Duration>,
    min_token: u64,
) -> Result<Option<LockGuard>> {
    lock.try_lock_with_min_token(wait, lease, min_token).await
}

/// Raises `lock`'s fencing counter on its server to at least `token` (at
/// most 2^52, so tokens stay below 2^53) and returns the counter's value
/// afterwards; later acquisitions get larger tokens. Redlock carries the
/// highest token of a majority to the other nodes with it. A counter
/// raised above the server's clock is outside a single server's fencing
/// guarantee, as for [`try_lock_with_min_token`].
///
/// # Errors
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a token
/// above 2^52 (nothing written); [`Error::WrongType`](crate::Error::WrongType)
/// when the counter key holds something else;
/// [`Error::Redis`](crate::Error::Redis).
///
/// # Cancel safety
/// Cancel safe: one script, done or not done.
pub async fn advance_fencing_token(lock: &Lock, token: u64) -> Result<u64> {
    lock.advance_fencing_token(token).await
}

/// The same lock through a handle whose acquisitions' scripts check
/// `guard` in place of the client's restart guard: they refuse to run on a
/// server whose `LASTSAVE` is newer than the one `guard` accepted, and the
/// server's uptime is then read again (each Redlock node's guard sees a
/// restart behind a proxy that keeps the connection).
#[must_use]
pub fn with_restart_guard(lock: &Lock, guard: Arc<RestartGuard>) -> Lock {
    lock.with_restart_guard(guard)
}

/// How long the client's Redis server has been running (`INFO server`,
/// `uptime_in_seconds`). Whole seconds, computed by Redis from truncated
/// wall-clock times, so it can overstate the real uptime by up to one
/// second: subtract a second when using it as a lower bound (as
/// [`RestartGuard::judge`] does). Redlock uses it to ignore nodes that
/// restarted more recently than the longest lease in use.
///
/// # Errors
/// [`Error::Redis`](crate::Error::Redis) when Redis fails or the field is
/// missing.
///
/// # Cancel safety
/// Cancel safe (read-only).
pub async fn server_uptime(client: &Client) -> Result<Duration> {
    client.server_uptime().await
}

/// How many times the client's command connection was established again
/// since it connected (a reconnection after an error or a server restart;
/// on a cluster, to any node).
///
/// Exact at the moment of the call: the client announces a new connection
/// before it sends anything on it, so a reply read before this call came
/// over a connection this count includes. Equal counts before a command
/// and after its reply mean the reply came from the server instance that
/// was connected before the command (a restart closes the connection).
/// Redlock uses this to read a node's uptime once per connection instead
/// of once per attempt.
pub fn connection_generation(client: &Client) -> u64 {
    client.connection_generation()
}

/// A [`LostSignal`] from a future that resolves when the hold ends and a
/// check that tells whether it has (for guards built outside this crate).
/// The check must turn true no later than the future resolves, and stay
/// true. It is read at every poll, so the signal is ready as soon as the
/// check says lost; its validity is `Duration::MAX` until then (it knows
/// no lease).
pub fn lost_signal(
    fired: impl Future<Output = ()> + Send + 'static,
    is_lost: impl Fn() -> bool + Send + Sync + 'static,
) -> LostSignal {
    LostSignal::new(fired, is_lost)
}

/// A [`LostSignal`] from a future that resolves when the hold ends and its
/// validity: how much of the hold is left by this client's clock, zero
/// once it is lost (and then for good). The validity is read at every
/// poll: the signal is ready as soon as it reaches zero, even when the
/// future (a timer) has not fired yet, as after a stalled process.
pub fn lost_signal_with_validity(
    fired: impl Future<Output = ()> + Send + 'static,
    validity: impl Fn() -> Duration + Send + Sync + 'static,
) -> LostSignal {
    LostSignal::with_validity(fired, validity)
}

/// The script `file` of `lua/` (e.g. `"latch_count_down.lua"`) as the
/// library sends it: the helper files of `lua/lib/` it is made of, then
/// the script, each after a line naming its file (`-- lua/lib/common.lua`),
/// so that line N of a Lua error, below line P naming a file, is line
/// N - P of that file. `None` when `lua/` has no script `file`.
pub fn script_source(file: &str) -> Option<&'static str> {
    crate::redis::script::source(file)
}

/// The helper files of `lua/lib/` that the scripts `files` of `lua/` are
/// made of, each once, in the order the library puts them in front of a
/// script (as in [`script_source`]): for a test that runs the bodies of
/// several scripts in one `EVAL`. `None` when one of `files` is no script
/// of `lua/`.
pub fn script_helpers(files: &[&str]) -> Option<String> {
    crate::redis::script::helpers(files)
}
