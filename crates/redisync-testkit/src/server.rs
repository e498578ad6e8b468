//! One `redis-server` process ([`RedisServer`]): started, paused and
//! resumed, killed, restarted on its port (empty or from a snapshot), and
//! killed when dropped.

use std::fmt;
use std::fs;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::launch::{free_port, launch, write_tls_files, LaunchError, LOG_FILE};
use crate::{named_server_binary, server_binary, tls, TestCerts, TestkitError};

/// How many fresh ports [`RedisServer::try_start`] tries when the port it
/// picked was taken by someone else in the meantime.
const START_ATTEMPTS: usize = 5;
/// How long [`RedisServer::restart`] keeps retrying to bind the same port.
const RESTART_BIND_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait for a killed process to exit before blocking on it.
const EXIT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `pause`/`resume` wait for the process state to change.
const SIGNAL_SETTLE_TIMEOUT: Duration = Duration::from_secs(1);
/// The snapshot file name (`dbfilename`, the default).
const SNAPSHOT_FILE: &str = "dump.rdb";
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

    /// Starts the [known server](crate::known_servers) `name` (fetched on first
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RedisNodes;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

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
}
