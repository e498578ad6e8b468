//! Why a `redis-server` could not be started ([`TestkitError`]).

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::REDIS_SERVER_ENV;

/// Why a `redis-server` could not be started.
#[derive(Debug)]
#[non_exhaustive]
pub enum TestkitError {
    /// No `redis-server` binary on `PATH` (and `REDISYNC_REDIS_SERVER` unset).
    BinaryNotFound,
    /// No server on `PATH`, and none could be fetched (downloads forbidden,
    /// no Python 3 or pip, no network): the message says what to install.
    NoServer(String),
    /// `REDISYNC_REDIS_SERVER` is set but does not name an existing file.
    InvalidBinary {
        /// The value of the environment variable.
        path: PathBuf,
    },
    /// An I/O operation needed to launch the server failed.
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: io::Error,
    },
    /// A TLS server was asked for, and this `redis-server` was built
    /// without TLS (its log says so).
    NoTls {
        /// The server binary.
        binary: PathBuf,
        /// The last lines of the server's log file and console output.
        log_tail: String,
    },
    /// The server was launched but never answered `PING`.
    NotReady {
        /// The port the server was told to listen on.
        port: u16,
        /// What went wrong (exit status, timeout, port taken, ...).
        reason: String,
        /// The last lines of the server's log file and console output.
        log_tail: String,
    },
}

impl fmt::Display for TestkitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BinaryNotFound => f.write_str(
                "redis-server not found on PATH: install it with \
                 `apt-get install -y redis-server` (Debian/Ubuntu) or `brew install redis` (macOS)",
            ),
            Self::NoServer(why) => f.write_str(why),
            Self::InvalidBinary { path } => write!(
                f,
                "{REDIS_SERVER_ENV}={} does not name an existing redis-server binary",
                path.display()
            ),
            Self::Io { context, source } => write!(f, "{context}: {source}"),
            Self::NoTls { binary, log_tail } => write!(
                f,
                "{} has no TLS support (--tls-port refused); Debian's redis-server has it\n\
                 --- tail of the server log ---\n{log_tail}",
                binary.display()
            ),
            Self::NotReady {
                port,
                reason,
                log_tail,
            } => {
                write!(
                    f,
                    "redis-server on 127.0.0.1:{port} did not become ready: {reason}"
                )?;
                if log_tail.is_empty() {
                    f.write_str(" (the server log is empty)")
                } else {
                    write!(f, "\n--- tail of the server log ---\n{log_tail}")
                }
            }
        }
    }
}

impl std::error::Error for TestkitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl TestkitError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}
