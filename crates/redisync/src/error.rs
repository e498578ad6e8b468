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
    #[error("{name:?} is not held by this owner any more: its lease ran out, it was force-released, or Redis lost it")]
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
    /// outer re-entrant hold of the same owner stays, its lease estimate as
    /// it was). From `extend`: the guard's lease estimate stays as it was.
    #[error(
        "{name:?}: {acked} of {required} replicas acknowledged the write; an acquisition was undone, an extension left the guard's lease as it was"
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
    #[error("semaphore {name:?} has no permits set; call try_set_permits first, or declare the total with the handle: semaphore(name).with_permits(n)")]
    NotInitialized {
        /// The semaphore's name.
        name: String,
    },
    /// A caller's argument is out of range: empty name, zero or absurd
    /// duration, zero permits, ...
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The key exists in Redis but holds another type than redisync keeps
    /// there (not one of its locks, semaphores or fenced values); it was
    /// left untouched.
    #[error(
        "key {key:?} holds a value of another type than redisync keeps there; it was left untouched"
    )]
    WrongType {
        /// The Redis key.
        key: String,
    },
    /// A name given to the inspector is a plain Redis key, not the name of
    /// a redisync primitive (whose keys are derived from the name); it was
    /// left untouched.
    #[error(
        "{key:?} is a Redis key, not the name of a redisync lock: its keys look like \
         redisync:v1:lock:hold:{{name}}"
    )]
    NotALock {
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
    /// [`Error::redis_kind`] and [`Error::redis_message`] tell what happened
    /// without naming the Redis client's types. The Redis message is part of
    /// this error's message and `source()` is `None`, so a printer that
    /// walks the error chain shows it once.
    #[error("redis: {0}")]
    Redis(RedisFailure),
    /// The server is older than redisync supports (Redis 6.2: its scripts
    /// use `ZADD GT`); the connection was closed. Valkey reports the Redis
    /// version it is compatible with (7.2 for Valkey 8 and 9).
    #[error(
        "redis server {version} is too old: redisync needs Redis {minimum} or newer (or Valkey)"
    )]
    UnsupportedServer {
        /// The `redis_version` the server reported.
        version: String,
        /// The oldest version redisync supports.
        minimum: &'static str,
    },
    /// A [`CountDownLatch`](crate::CountDownLatch) expired (its TTL ended)
    /// before its count reached zero: a counter may have crashed, or the
    /// phase took longer than the TTL. It did not open.
    #[error("count-down latch {name:?} expired before its count reached zero (a counter may have crashed, or the TTL was too short)")]
    LatchExpired {
        /// The latch's name.
        name: String,
    },
    /// A count-down found the [`CountDownLatch`](crate::CountDownLatch)
    /// not set: its count was never set, or it expired (before it opened,
    /// or its TTL ended after it opened). Nothing was counted: a count-down
    /// that comes before `try_set_count` is lost otherwise, so the caller
    /// decides (set the count first, or treat the phase as over).
    #[error("count-down latch {name:?} is not set (never set, or expired): nothing was counted")]
    LatchNotSet {
        /// The latch's name.
        name: String,
    },
    /// [`Client::shutdown`](crate::Client::shutdown) was called.
    #[error("the redisync client was shut down")]
    Shutdown,
}

/// A failure of the connection or of a command, as [`Error::Redis`] carries
/// it: its [`kind`](RedisFailure::kind) and its
/// [`message`](RedisFailure::message). The Redis client's own error type
/// stays inside (a new major version of it is not one of redisync's).
#[derive(Debug, Clone)]
pub struct RedisFailure(pub(crate) RedisError);

impl RedisFailure {
    /// What kind of failure it is.
    pub fn kind(&self) -> RedisErrorKind {
        RedisErrorKind::of(&self.0)
    }

    /// The detail text: the server's error reply (`WRONGTYPE ...`,
    /// `NOSCRIPT ...`) or the client's description.
    pub fn message(&self) -> &str {
        self.0.details()
    }
}

impl std::fmt::Display for RedisFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for RedisFailure {}

impl Error {
    /// [`Error::Redis`] of the Redis client's error. Not a `From`: that
    /// would name the client's type in the public API.
    pub(crate) fn redis(e: RedisError) -> Error {
        Error::Redis(RedisFailure(e))
    }
}

/// What kind of failure an [`Error::Redis`] is (see [`Error::redis_kind`]).
///
/// More kinds may be added; match with a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RedisErrorKind {
    /// A command (or connecting) timed out: the outcome of a write is unknown.
    Timeout,
    /// The connection failed, or there was none to send the command on
    /// (refused, reset, closed; reconnecting).
    Io,
    /// Authentication or authorization failed (`NOAUTH`, `WRONGPASS`,
    /// `NOPERM`).
    Auth,
    /// The cluster refused or could not route the command: its slot is
    /// moving (`MOVED`/`ASK` redirections used up, `TRYAGAIN`), the cluster
    /// is down (`CLUSTERDOWN`), or its slot map is changing.
    Cluster,
    /// A reply was malformed or not of the expected shape.
    Protocol,
    /// The server answered with an error reply (`ERR ...`, `BUSY`,
    /// `LOADING`, `READONLY`, `OOM`, ...): [`Error::redis_message`] has it.
    Server,
    /// The command was cancelled before its reply came (its connection
    /// closed while it was out).
    Canceled,
    /// A TLS handshake failed (an untrusted or wrong certificate, a client
    /// certificate required, a plain server behind `rediss://`): the
    /// message says which, and names the address.
    Tls,
    /// Anything else (client-side configuration, back-pressure, ...).
    Other,
}

impl RedisErrorKind {
    /// The kind of a Redis client error.
    fn of(e: &RedisError) -> RedisErrorKind {
        if refused_unrun(e) {
            return RedisErrorKind::Cluster;
        }
        match e.kind() {
            ErrorKind::Timeout => RedisErrorKind::Timeout,
            ErrorKind::IO => RedisErrorKind::Io,
            ErrorKind::Canceled => RedisErrorKind::Canceled,
            ErrorKind::Auth => RedisErrorKind::Auth,
            #[cfg(feature = "tls")]
            ErrorKind::Tls => RedisErrorKind::Tls,
            // No connection to write the command on (fred says `Unknown`
            // or, for replicas, `Routing`); the other routing failures are
            // the cluster's redirections.
            ErrorKind::Routing | ErrorKind::Unknown
                if e.details().contains("Failed to route command") =>
            {
                RedisErrorKind::Io
            }
            ErrorKind::Cluster | ErrorKind::Routing => RedisErrorKind::Cluster,
            ErrorKind::Protocol | ErrorKind::Parse | ErrorKind::NotFound => {
                RedisErrorKind::Protocol
            }
            ErrorKind::Unknown
            | ErrorKind::InvalidArgument
            | ErrorKind::InvalidCommand
            | ErrorKind::Config => match server_error_code(e.details()) {
                Some("NOAUTH" | "WRONGPASS" | "NOPERM") => RedisErrorKind::Auth,
                Some("MOVED" | "ASK" | "CLUSTERDOWN" | "TRYAGAIN") => RedisErrorKind::Cluster,
                Some(_) => RedisErrorKind::Server,
                None => RedisErrorKind::Other,
            },
            _ => RedisErrorKind::Other,
        }
    }
}

/// The error code an error reply of the server starts with (`ERR`,
/// `WRONGTYPE`, `NOSCRIPT`, ...: one upper-case word); `None` for the
/// client's own messages.
fn server_error_code(details: &str) -> Option<&str> {
    let code = details.split_whitespace().next()?;
    (code.len() >= 2 && code.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')).then_some(code)
}

impl Error {
    /// The kind of an [`Error::Redis`]; `None` for every other variant.
    ///
    /// ```
    /// # fn demo(e: redisync::Error) {
    /// use redisync::RedisErrorKind;
    /// match e.redis_kind() {
    ///     Some(RedisErrorKind::Io | RedisErrorKind::Timeout) => { /* Redis unreachable or slow */ }
    ///     Some(_) => { /* another Redis failure */ }
    ///     None => { /* not a Redis failure */ }
    /// }
    /// # }
    /// ```
    pub fn redis_kind(&self) -> Option<RedisErrorKind> {
        match self {
            Error::Redis(RedisFailure(e)) => Some(RedisErrorKind::of(e)),
            _ => None,
        }
    }

    /// The detail text of an [`Error::Redis`]: the server's error reply
    /// (`"ERR ..."`), or what the connection reported; `None` for every
    /// other variant. Unlike `Display`, without the kind and the `redis:`
    /// prefix.
    pub fn redis_message(&self) -> Option<&str> {
        match self {
            Error::Redis(RedisFailure(e)) => Some(e.details()),
            _ => None,
        }
    }

    /// True for [`Error::NotHeld`]: an unlock, extend or release of an
    /// acquisition that no longer holds its lock (its lease ran out, it was
    /// force-unlocked, Redis lost it). Routine after a loss; nothing was
    /// written, and trying again cannot help.
    pub fn is_not_held(&self) -> bool {
        matches!(self, Error::NotHeld { .. })
    }

    /// True for a command that timed out (its outcome on the server is unknown).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Redis(RedisFailure(e)) if *e.kind() == ErrorKind::Timeout)
    }

    /// True when trying again later may succeed (connection trouble,
    /// timeouts), false for errors that will repeat (bad input, wrong type).
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Redis(RedisFailure(e)) => matches!(
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

    /// Whether a guarded acquisition's script refused to run because the
    /// server may have restarted (see `RestartGuard::script_args`): nothing
    /// was written; the uptime decides.
    pub(crate) fn is_restart_suspected(&self) -> bool {
        matches!(self, Error::Redis(RedisFailure(e)) if e.details().starts_with(RESTART_SUSPECTED))
    }

    /// Whether Redis could not be reached or did not answer in time (a
    /// timeout, a connection error, a command cancelled with its
    /// connection): what suspends the connection state when a renewal
    /// fails this way. Not a script's error, not a refusal.
    pub(crate) fn is_unreachable(&self) -> bool {
        matches!(self, Error::Redis(RedisFailure(e)) if matches!(
            e.kind(),
            ErrorKind::Timeout | ErrorKind::IO | ErrorKind::Canceled
        ))
    }

    /// Whether the cluster refused the command, unrun, while its slot moved
    /// (see [`refused_unrun`]): safe to send again.
    pub(crate) fn is_refused(&self) -> bool {
        matches!(self, Error::Redis(RedisFailure(e)) if refused_unrun(e))
    }

    /// Whether the outcome of a write that failed this way is unknown (it may
    /// have run on the server).
    ///
    /// With one attempt per command, fred fails a command it could not write
    /// (no connection) with "Failed to route command", and one the cluster
    /// kept refusing while a slot moved (MOVED/ASK, TRYAGAIN): neither ran.
    pub(crate) fn outcome_unknown(&self) -> bool {
        let Error::Redis(RedisFailure(e)) = self else {
            return false;
        };
        match e.kind() {
            ErrorKind::Timeout | ErrorKind::IO | ErrorKind::Canceled => true,
            ErrorKind::Unknown => {
                !(e.details().contains("Failed to route")
                    || refused_unrun(e)
                    || e.details().starts_with(RESTART_SUSPECTED))
            }
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
        Error::Redis(RedisFailure(e))
    }
}

/// How a guarded acquisition's script says the server may have restarted
/// (`lua/lib/restart_guard.lua`).
const RESTART_SUSPECTED: &str = "REDISYNC-RESTARTED";

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

/// fred's details of an I/O error without the `Debug` wrapping of
/// `std::io::Error` (`Custom { kind: InvalidData, error: X }` -> `X`).
pub(crate) fn tidy(details: &str) -> &str {
    let custom = details
        .strip_prefix("Custom { kind: ")
        .and_then(|rest| rest.split_once(", error: "))
        .and_then(|(_, inner)| inner.strip_suffix(" }"));
    let os = details
        .strip_prefix("Os { ")
        .and_then(|rest| rest.split_once("message: "))
        .and_then(|(_, inner)| inner.strip_suffix(" }"));
    custom
        .or(os)
        .map_or(details, |inner| inner.trim_matches('"'))
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
        Error::redis(RedisError::new(kind, details))
    }

    #[test]
    fn the_redis_message_is_printed_once_in_an_error_chain() {
        let e = redis(ErrorKind::IO, "connection reset by peer");
        assert!(matches!(e, Error::Redis(RedisFailure(_))));
        let text = chain(&e);
        assert_eq!(
            text.matches("connection reset by peer").count(),
            1,
            "{text}"
        );
        assert_eq!(e.redis_message(), Some("connection reset by peer"));
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

    #[test]
    fn only_redis_errors_have_a_redis_kind_and_message() {
        let e = Error::Script {
            name: "lock_acquire.lua",
            message: "ERR boom".into(),
        };
        assert_eq!(e.redis_kind(), None);
        assert_eq!(e.redis_message(), None);
        assert_eq!(Error::Shutdown.redis_kind(), None);
        assert_eq!(Error::Shutdown.redis_message(), None);
    }

    #[test]
    fn redis_kinds_map_from_the_client_errors() {
        use RedisErrorKind as K;
        let cases = [
            (ErrorKind::Timeout, "Request timed out.", K::Timeout),
            (ErrorKind::IO, "Connection reset by peer", K::Io),
            (ErrorKind::Canceled, "Canceled.", K::Canceled),
            (
                ErrorKind::Auth,
                "WRONGPASS invalid username-password pair",
                K::Auth,
            ),
            (
                ErrorKind::Unknown,
                "NOPERM this user has no permissions",
                K::Auth,
            ),
            (ErrorKind::Cluster, "MOVED 3999 127.0.0.1:6381", K::Cluster),
            (
                ErrorKind::Cluster,
                "CLUSTERDOWN The cluster is down",
                K::Cluster,
            ),
            (
                ErrorKind::Unknown,
                "TRYAGAIN Multiple keys request during rehashing of slot",
                K::Cluster,
            ),
            (
                ErrorKind::Unknown,
                "Too many failed write attempts.",
                K::Cluster,
            ),
            (ErrorKind::Routing, "Max attempts reached.", K::Cluster),
            (ErrorKind::Routing, "Too many redirections.", K::Cluster),
            (ErrorKind::Routing, "Failed to route command.", K::Io),
            // fred 10 without replicas: no connection to write on (seen in
            // CI right after the server was killed).
            (ErrorKind::Unknown, "Failed to route command.", K::Io),
            (ErrorKind::Protocol, "Invalid frame", K::Protocol),
            (
                ErrorKind::Parse,
                "Could not convert to string.",
                K::Protocol,
            ),
            (ErrorKind::NotFound, "nil", K::Protocol),
            (ErrorKind::Unknown, "ERR unknown command 'FOO'", K::Server),
            (
                ErrorKind::Unknown,
                "BUSY Redis is busy running a script",
                K::Server,
            ),
            (
                ErrorKind::Unknown,
                "LOADING Redis is loading the dataset in memory",
                K::Server,
            ),
            (
                ErrorKind::Unknown,
                "READONLY You can't write against a read only replica.",
                K::Server,
            ),
            (
                ErrorKind::InvalidArgument,
                "WRONGTYPE Operation against a key holding the wrong kind of value",
                K::Server,
            ),
            (ErrorKind::Unknown, "Client is not initialized.", K::Other),
            (
                ErrorKind::Backpressure,
                "Max in-flight commands reached.",
                K::Other,
            ),
            (ErrorKind::Config, "Invalid config", K::Other),
            (ErrorKind::Url, "Invalid URL", K::Other),
        ];
        for (kind, details, expected) in cases {
            let e = redis(kind.clone(), details);
            assert_eq!(e.redis_kind(), Some(expected), "{kind:?} {details:?}");
            assert_eq!(e.redis_message(), Some(details));
        }
    }
}
