//! The error type of `redisync-redlock`.

use std::fmt;

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong with a [`MultiLock`](crate::MultiLock) or a
/// [`Redlock`](crate::Redlock).
///
/// Busy is not an error: `try_lock` returns `Ok(None)` when its wait ran out
/// because somebody else holds the lock.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A caller's argument or a builder setting is out of range: no locks,
    /// two locks on one client, zero lease, a lease above `max_lease`, ...
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Too few nodes granted (or extended) the lock for a majority, and not
    /// because somebody else holds it: nodes timed out, failed, or restarted
    /// less than `max_lease` ago. [`Votes`] says how each node answered in
    /// the last attempt; `errors` holds the errors of the nodes that failed.
    #[error("redlock {name:?}: quorum not reached: {votes}{}", list(errors))]
    QuorumNotReached {
        /// The lock's name.
        name: String,
        /// How the nodes answered.
        votes: Votes,
        /// The error of every node counted in `votes.failed`.
        errors: Vec<MemberError>,
    },
    /// Acquiring one member of a [`MultiLock`](crate::MultiLock) failed;
    /// every member taken was released.
    #[error("{0}")]
    Member(MemberError),
    /// A release did not reach every lock it should have. For a `MultiLock`
    /// any member failing is an error; for a `Redlock` it is one when fewer
    /// than a majority of nodes confirmed (the rest expire with their lease).
    #[error("release confirmed by {released} of {required} required{}{}",
        if *.pending > 0 { format!(", {} still in flight after the node timeout", .pending) } else { String::new() },
        list(failures))]
    Release {
        /// Locks (nodes) that confirmed the release.
        released: usize,
        /// Confirmations needed for success.
        required: usize,
        /// Releases still running in the background after the node timeout.
        pending: usize,
        /// Every release that failed.
        failures: Vec<MemberError>,
    },
    /// Extending a [`MultiLockGuard`](crate::MultiLockGuard) did not reach
    /// every member: the members listed failed (a lost member:
    /// [`redisync::Error::NotHeld`]); the others were extended.
    #[error(
        "extension confirmed by {extended} of {required} locks{}",
        list(failures)
    )]
    Extend {
        /// Members that were extended.
        extended: usize,
        /// Members in all (each must be extended).
        required: usize,
        /// Every extension that failed.
        failures: Vec<MemberError>,
    },
    /// An error of a single lock operation (for example
    /// [`redisync::Error::NotHeld`] when extending a guard already lost).
    #[error(transparent)]
    Lock(#[from] redisync::Error),
}

impl Error {
    /// True when trying again later may succeed: nodes that timed out,
    /// failed with connection trouble or restarted recently, and retryable
    /// Redis errors.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::QuorumNotReached { .. } => true,
            Error::Member(m) => m.error.is_retryable(),
            Error::Lock(e) => e.is_retryable(),
            Error::Release { failures, .. } | Error::Extend { failures, .. } => {
                failures.iter().all(|f| f.error.is_retryable())
            }
            Error::InvalidArgument(_) => false,
        }
    }
}

impl Error {
    /// True when the guard no longer held its lock (routine after a loss;
    /// trying again cannot help): a single lock's
    /// [`redisync::Error::NotHeld`]; a release or extension whose every
    /// failure is `NotHeld` (with nothing left in flight); a `Redlock`
    /// extension refused by nodes that no longer hold it, with no node
    /// timed out, failed or restarted.
    pub fn is_not_held(&self) -> bool {
        let all_not_held =
            |f: &[MemberError]| !f.is_empty() && f.iter().all(|m| m.error.is_not_held());
        match self {
            Error::Lock(e) => e.is_not_held(),
            Error::Member(m) => m.error.is_not_held(),
            Error::Release {
                failures,
                pending: 0,
                ..
            }
            | Error::Extend { failures, .. } => all_not_held(failures),
            Error::QuorumNotReached { votes, errors, .. } => {
                errors.is_empty()
                    && votes.refused > 0
                    && votes.timed_out == 0
                    && votes.failed == 0
                    && votes.restarted == 0
            }
            Error::Release { .. } | Error::InvalidArgument(_) => false,
        }
    }
}

impl redisync::GuardError for Error {
    fn is_not_held(&self) -> bool {
        Error::is_not_held(self)
    }
}

fn list(failures: &[MemberError]) -> String {
    let mut out = String::new();
    for (i, f) in failures.iter().enumerate() {
        out.push_str(if i == 0 { ": " } else { "; " });
        out.push_str(&f.to_string());
    }
    out
}

/// The error of one lock of a `MultiLock`, or one node of a `Redlock`.
#[derive(Debug, thiserror::Error)]
#[error("lock #{index} {name:?}: {error}")]
#[non_exhaustive]
pub struct MemberError {
    /// Position of the lock in the `Vec` given to `MultiLock::new` or `Redlock::new`.
    pub index: usize,
    /// The lock's name.
    pub name: String,
    /// What went wrong.
    #[source]
    pub error: redisync::Error,
}

impl MemberError {
    pub(crate) fn new(index: usize, lock: &redisync::Lock, error: redisync::Error) -> MemberError {
        MemberError {
            index,
            name: lock.name().to_owned(),
            error,
        }
    }
}

/// How the nodes of a `Redlock` answered one acquisition or extension, like
/// redsync's `ErrTaken{Nodes}` or node-redlock's execution stats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Votes {
    /// Nodes of the `Redlock`.
    pub nodes: usize,
    /// Votes needed: `nodes / 2 + 1`.
    pub required: usize,
    /// Nodes that granted (or extended) and count toward the majority.
    pub granted: usize,
    /// Nodes where somebody else holds the lock (for an extension: where
    /// this guard no longer holds it).
    pub refused: usize,
    /// Nodes that did not answer within the node timeout (or that timed out
    /// in an earlier attempt and have not answered since).
    pub timed_out: usize,
    /// Nodes that answered with an error.
    pub failed: usize,
    /// Nodes that granted but had been up for less than `max_lease`, so did
    /// not count (they may have forgotten an earlier grant in a restart).
    pub restarted: usize,
    /// A majority granted, but the attempt took longer than the lease minus
    /// the clock drift allowance, so nothing was left of it.
    pub expired: bool,
}

impl Votes {
    pub(crate) fn new(nodes: usize, required: usize) -> Votes {
        Votes {
            nodes,
            required,
            ..Votes::default()
        }
    }

    /// Whether the attempt failed because others hold the lock: the nodes
    /// that answered could have formed a majority had it been free.
    pub fn is_busy(&self) -> bool {
        !self.expired
            && self.granted < self.required
            && self.granted + self.refused >= self.required
    }
}

impl fmt::Display for Votes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} nodes granted, {} required ({} refused, {} timed out, {} failed, {} up for less than max_lease)",
            self.granted,
            self.nodes,
            self.required,
            self.refused,
            self.timed_out,
            self.failed,
            self.restarted
        )?;
        if self.expired {
            f.write_str("; the attempt outlasted the lease's validity")?;
        }
        if self.restarted > 0 {
            f.write_str(
                "; a node counts only once it has been up longer than max_lease (it may have \
                 forgotten grants in a restart): wait, or see RedlockBuilder::max_lease",
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn votes_explain_themselves() {
        let mut v = Votes::new(5, 3);
        v.granted = 2;
        v.timed_out = 3;
        assert!(!v.is_busy());
        assert_eq!(
            v.to_string(),
            "2 of 5 nodes granted, 3 required (0 refused, 3 timed out, 0 failed, 0 up for less than max_lease)"
        );
        v.timed_out = 0;
        v.refused = 3;
        assert!(v.is_busy());
        v.restarted = 1;
        assert!(v.to_string().contains("max_lease"));
    }

    #[test]
    fn errors_list_every_failure() {
        let e = Error::Release {
            released: 1,
            required: 3,
            pending: 0,
            failures: vec![
                MemberError {
                    index: 0,
                    name: "a".into(),
                    error: redisync::Error::NotHeld { name: "a".into() },
                },
                MemberError {
                    index: 2,
                    name: "c".into(),
                    error: redisync::Error::Shutdown,
                },
            ],
        };
        let s = e.to_string();
        assert!(
            s.starts_with("release confirmed by 1 of 3 required: lock #0 \"a\""),
            "{s}"
        );
        assert!(
            s.contains("; lock #2 \"c\": the redisync client was shut down"),
            "{s}"
        );
        assert!(!e.is_retryable());
    }
}
