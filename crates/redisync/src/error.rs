//! The one error type of redisync.

use fred::error::{Error as RedisError, ErrorKind};

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in redisync.
///
/// Busy is not an error: `try_lock` returns `Ok(None)` when its wait runs out.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Unlock, extend or release by an owner that does not hold the lock (any
    /// more): its lease ran out, it was force-unlocked, or Redis lost it.
    /// Nothing was written.
    #[error("lock {name:?} is not held by this owner")]
    NotHeld {
        /// The lock's name.
        name: String,
    },
    /// The write side of a read-write lock was asked by an owner that holds
    /// only its read side: waiting would deadlock (two such readers would
    /// wait for each other forever). Release the read side first.
    #[error("read-write lock {name:?}: a reader cannot take the write side (release the read lock first)")]
    UpgradeNotSupported {
        /// The lock's name.
        name: String,
    },
    /// Replica sync is on and too few replicas acknowledged an acquisition
    /// within the timeout: the acquisition was undone (it holds nothing; an
    /// outer re-entrant hold of the same owner stays).
    #[error(
        "lock {name:?}: {acked} of {required} replicas acknowledged the acquisition; it was undone"
    )]
    ReplicaSync {
        /// The lock's name.
        name: String,
        /// Replicas that acknowledged.
        acked: i64,
        /// Replicas required.
        required: u32,
    },
    /// The semaphore has no permits set yet (see `Semaphore::try_set_permits`).
    #[error("semaphore {name:?} has no permits set; call try_set_permits first")]
    NotInitialized {
        /// The semaphore's name.
        name: String,
    },
    /// A caller's argument is out of range: empty name, zero or absurd
    /// duration, zero permits, ...
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The key exists in Redis but is not a redisync lock; it was left untouched.
    #[error(
        "key {key:?} holds a value of another type, not a redisync lock; it was left untouched"
    )]
    WrongType {
        /// The Redis key.
        key: String,
    },
    /// A Lua script failed for a reason other than a wrong key type.
    #[error("script {name} failed: {message}")]
    Script {
        /// The script's file name in `lua/`.
        name: &'static str,
        /// What Redis said.
        message: String,
    },
    /// The connection or a command failed (Redis down, timed out, ...).
    /// After a timeout the outcome of a write is unknown; redisync has then
    /// already sent a compensating, owner-checked release for acquisitions.
    ///
    /// The Redis message is part of this error's message and `source()` is
    /// `None`, so a printer that walks the error chain shows it once.
    #[error("redis: {0}")]
    Redis(RedisError),
    /// [`Client::shutdown`](crate::Client::shutdown) was called.
    #[error("the redisync client was shut down")]
    Shutdown,
}

impl From<RedisError> for Error {
    /// [`Error::Redis`]. Written out: a derived `From` would also make the
    /// Redis error the `source()`, and its message would print twice.
    fn from(e: RedisError) -> Self {
        Error::Redis(e)
    }
}

impl Error {
    /// True for [`Error::NotHeld`]: an unlock, extend or release of an
    /// acquisition that no longer holds its lock (its lease ran out, it was
    /// force-unlocked, Redis lost it). Routine after a loss; nothing was
    /// written, and trying again cannot help.
    pub fn is_not_held(&self) -> bool {
        matches!(self, Error::NotHeld { .. })
    }

    /// True for a command that timed out (its outcome on the server is unknown).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Redis(e) if *e.kind() == ErrorKind::Timeout)
    }

    /// True when trying again later may succeed (connection trouble,
    /// timeouts), false for errors that will repeat (bad input, wrong type).
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Redis(e) => matches!(
                e.kind(),
                ErrorKind::Timeout
                    | ErrorKind::IO
                    | ErrorKind::Canceled
                    | ErrorKind::Unknown
                    | ErrorKind::Routing
                    | ErrorKind::Backpressure
                    | ErrorKind::Cluster
            ),
            Error::ReplicaSync { .. } => true,
            _ => false,
        }
    }

    /// Whether the cluster refused the command, unrun, while its slot moved
    /// (see [`refused_unrun`]): safe to send again.
    pub(crate) fn is_refused(&self) -> bool {
        matches!(self, Error::Redis(e) if refused_unrun(e))
    }

    /// Whether the outcome of a write that failed this way is unknown (it may
    /// have run on the server).
    ///
    /// With one attempt per command, fred fails a command it could not write
    /// (no connection) with "Failed to route command", and one the cluster
    /// kept refusing while a slot moved (MOVED/ASK, TRYAGAIN): neither ran.
    pub(crate) fn outcome_unknown(&self) -> bool {
        let Error::Redis(e) = self else { return false };
        match e.kind() {
            ErrorKind::Timeout | ErrorKind::IO | ErrorKind::Canceled => true,
            ErrorKind::Unknown => !(e.details().contains("Failed to route") || refused_unrun(e)),
            _ => false,
        }
    }

    pub(crate) fn from_script(name: &'static str, key: &str, e: RedisError) -> Error {
        if let Some(at) = e.details().find("WRONGTYPE") {
            // Our scripts name the key that failed ("WRONGTYPE <key> is a
            // ..."); Redis's own message names none: then the main key.
            let named = e.details()[at + "WRONGTYPE".len()..]
                .split_whitespace()
                .next()
                .filter(|k| k.starts_with("redisync:"));
            return Error::WrongType {
                key: named.unwrap_or(key).to_owned(),
            };
        }
        let details = e.details();
        if matches!(e.kind(), ErrorKind::InvalidArgument | ErrorKind::Unknown)
            && (details.contains("user_script") || details.starts_with("ERR"))
        {
            return Error::Script {
                name,
                message: details.to_owned(),
            };
        }
        Error::Redis(e)
    }
}

/// Whether the cluster refused the command before running it because its
/// slot is moving:
/// - fred answers "Too many failed write attempts." when it would write a
///   command again with its attempts used up. With our settings (no re-send
///   after a connection loss: those fail with the IO error) the only second
///   write is the one that follows a MOVED or ASK reply.
/// - "Max attempts reached." (`Routing`): fred could not send the `ASKING`
///   that must precede the command's re-send after an ASK reply (seen on a
///   loaded machine mid-migration); the command itself was refused.
/// - `TRYAGAIN`: a multi-key command while some of its keys have moved and
///   others not (mid-migration).
pub(crate) fn refused_unrun(e: &fred::error::Error) -> bool {
    e.details().contains("Too many failed write attempts")
        || e.details().starts_with("TRYAGAIN")
        || (*e.kind() == ErrorKind::Routing && e.details().contains("Max attempts reached"))
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    /// The error as an error-chain printer shows it: each error's
    /// `Display`, then its `source()`'s, and so on.
    fn chain(e: &Error) -> String {
        let mut text = e.to_string();
        let mut source = e.source();
        while let Some(s) = source {
            text.push_str(": ");
            text.push_str(&s.to_string());
            source = s.source();
        }
        text
    }

    fn redis(kind: ErrorKind, details: &'static str) -> Error {
        Error::from(RedisError::new(kind, details))
    }

    #[test]
    fn the_redis_message_is_printed_once_in_an_error_chain() {
        let e = redis(ErrorKind::IO, "connection reset by peer");
        assert!(matches!(e, Error::Redis(_)));
        let text = chain(&e);
        assert_eq!(
            text.matches("connection reset by peer").count(),
            1,
            "{text}"
        );
    }

    #[test]
    fn no_variant_repeats_its_source() {
        let all = [
            Error::NotHeld { name: "n".into() },
            Error::UpgradeNotSupported { name: "n".into() },
            Error::ReplicaSync {
                name: "n".into(),
                acked: 0,
                required: 1,
            },
            Error::NotInitialized { name: "n".into() },
            Error::InvalidArgument("bad".into()),
            Error::WrongType { key: "k".into() },
            Error::Script {
                name: "lock_acquire.lua",
                message: "ERR boom".into(),
            },
            redis(ErrorKind::Timeout, "Request timed out."),
            Error::Shutdown,
        ];
        for e in &all {
            let mut outer = e.to_string();
            let mut source = e.source();
            while let Some(s) = source {
                let inner = s.to_string();
                assert!(
                    !outer.contains(&inner),
                    "{outer:?} repeats its source {inner:?}"
                );
                outer = inner;
                source = s.source();
            }
        }
    }
}
