//! The restart guard. A Redis server restarted without persistence has
//! forgotten every lease it granted, so a second holder could get a lock
//! while the first still works. The guard makes a server count as able to
//! grant only once it has been up for at least `max_lease` (the longest
//! lease a guarded client issues): by then every lease granted before the
//! restart has ended. Written once, for a [`Client`] on one server (which
//! then grants nothing while young) and for each node of a Redlock (whose
//! grants then do not count while young).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::redis::args::RestartGuardArgs;

/// `INFO`'s `uptime_in_seconds` is whole seconds of truncated wall-clock
/// times: it may overstate the real uptime by up to this much.
const UPTIME_SLACK: Duration = Duration::from_secs(1);

/// What a restart guard knows of one server: its bound, and the connection
/// on which the server was last seen old enough (a restart closes the
/// connection, so a server seen old on the current connection still is).
///
/// `redisync` runs one per guarded [`Client`](crate::Client) (see
/// [`ClientBuilder::restart_guard`](crate::ClientBuilder::restart_guard));
/// `redisync-redlock` one per node of a `Redlock` with a `max_lease`,
/// through [`__private`](crate::__private) (not for applications).
#[derive(Debug)]
pub struct RestartGuard {
    max_lease: Duration,
    /// The connection generation + 1 on which the server was seen up for
    /// at least `max_lease`; 0: not seen yet.
    old_on: AtomicU64,
    /// The server's `LASTSAVE` when it was last proven old (-1: none): a
    /// guarded acquisition's script runs only on a server whose `LASTSAVE`
    /// is this one or older than the bound (see `script_args`), so a
    /// restart is seen even when the connection survives it (a proxy).
    saved: AtomicI64,
}

impl RestartGuard {
    /// A guard for leases of at most `max_lease`. Any value is taken (no
    /// I/O, nothing to refuse): `Duration::MAX` makes a server never old
    /// enough, zero makes every server old enough. [`Client`]'s and
    /// `Redlock`'s builders refuse over a year (366 days).
    ///
    /// [`Client`]: crate::Client
    pub fn new(max_lease: Duration) -> RestartGuard {
        RestartGuard {
            max_lease,
            old_on: AtomicU64::new(0),
            saved: AtomicI64::new(-1),
        }
    }

    /// Refuses a lease (or an extension, `what`) above the bound: a server
    /// restarted within it could grant the lock twice.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming both durations.
    pub fn check_lease(&self, what: &str, lease: Duration) -> Result<()> {
        if lease > self.max_lease {
            return Err(Error::InvalidArgument(format!(
                "{what} of {lease:?} is longer than the restart guard's max_lease of {:?}: a \
                 server restarted within that lease could grant the lock twice; raise max_lease \
                 or take a shorter lease",
                self.max_lease
            )));
        }
        Ok(())
    }

    /// Whether the server was seen old enough on connection `generation`
    /// (the client's current one: then it has not restarted since).
    pub fn is_proven_old_on(&self, generation: u64) -> bool {
        // Wrapping: generation `u64::MAX` maps to 0, "not seen" (never
        // proven old), rather than overflowing.
        self.old_on.load(Ordering::Acquire) == generation.wrapping_add(1)
    }

    /// Judges an `uptime` read over connection `judged_on`, the client's
    /// connection being `current` now: `None` when the server is old enough
    /// (remembered for that connection if it is still the current one),
    /// else how long it stays too young to grant.
    pub fn judge(&self, judged_on: u64, current: u64, uptime: Duration) -> Option<Duration> {
        let left = young_left(self.max_lease, uptime);
        if left.is_none() {
            if judged_on == current {
                self.old_on
                    .store(judged_on.wrapping_add(1), Ordering::Release);
            }
        } else {
            self.forget();
        }
        left
    }

    /// Forgets that the server was seen old (a grant of it did not count).
    pub fn forget(&self) {
        self.old_on.store(0, Ordering::Release);
    }

    /// The server proven old had `LASTSAVE` `saved` (read in the same
    /// `INFO` as the uptime that proved it).
    pub(crate) fn accept_save(&self, saved: i64) {
        self.saved.store(saved, Ordering::Release);
    }

    /// The last three arguments of a guarded acquisition's script (see the
    /// restart guard, `lua/lib/restart_guard.lua`): the marker, the bound in whole
    /// seconds (`max_lease` plus the slack of INFO's rounding) and the
    /// accepted `LASTSAVE`.
    pub(crate) fn script_args(&self) -> RestartGuardArgs {
        // Saturating: a guard built with `Duration::MAX` waits forever
        // rather than overflowing.
        let bound = self
            .max_lease
            .saturating_add(UPTIME_SLACK)
            .as_millis()
            .div_ceil(1000);
        let saved = self.saved.load(Ordering::Acquire);
        RestartGuardArgs {
            marker: "~restart-guard",
            bound: i64::try_from(bound).unwrap_or(i64::MAX),
            saved: if saved < 0 {
                String::new()
            } else {
                saved.to_string()
            },
        }
    }
}

/// How much longer a server up for `uptime` is too young for leases of
/// `max_lease`, `None` when it is old enough.
fn young_left(max_lease: Duration, uptime: Duration) -> Option<Duration> {
    // reintroduce: no-restart-guard
    let up = uptime.saturating_sub(UPTIME_SLACK);
    max_lease.checked_sub(up).filter(|left| !left.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_uptime_counts_one_second_less_and_a_young_server_waits_out_the_rest() {
        let guard = RestartGuard::new(Duration::from_secs(10));
        let up = |secs| Duration::from_secs(secs);
        let young = |uptime| young_left(guard.max_lease, uptime);
        assert_eq!(young(up(0)), Some(up(10)));
        assert_eq!(young(up(10)), Some(up(1)));
        assert_eq!(young(up(11)), None);
        // Remembered only for the connection the uptime came over.
        assert_eq!(guard.judge(3, 4, up(11)), None);
        assert!(!guard.is_proven_old_on(3) && !guard.is_proven_old_on(4));
        assert_eq!(guard.judge(4, 4, up(11)), None);
        assert!(guard.is_proven_old_on(4) && !guard.is_proven_old_on(5));
        assert_eq!(guard.judge(5, 5, up(2)), Some(up(9)));
        assert!(!guard.is_proven_old_on(4), "a young reading forgets");
        assert!(guard.check_lease("lease", up(10)).is_ok());
        assert!(matches!(
            guard.check_lease("lease", up(11)),
            Err(Error::InvalidArgument(m)) if m.contains("max_lease")
        ));
    }

    /// The arguments as they were built by hand before their builder.
    #[test]
    fn the_script_args_are_what_they_were() {
        use crate::redis::args::ScriptArgs;
        use fred::types::Value;
        for (max_lease, saved) in [(Duration::from_secs(9), -1), (Duration::MAX, 1_700_000_000)] {
            let guard = RestartGuard::new(max_lease);
            guard.accept_save(saved);
            let bound = max_lease
                .saturating_add(UPTIME_SLACK)
                .as_millis()
                .div_ceil(1000);
            let old = [
                Value::String("~restart-guard".into()),
                Value::Integer(i64::try_from(bound).unwrap_or(i64::MAX)),
                Value::String(
                    if saved < 0 {
                        String::new()
                    } else {
                        saved.to_string()
                    }
                    .into(),
                ),
            ];
            assert_eq!(guard.script_args().into_values(), old);
        }
    }
}
