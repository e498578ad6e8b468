//! Launching a `redis-server` process: a free port, its files, and the
//! wait until it answers `PING` (or the tail of its log saying why not).

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{TestCerts, TestkitError};

/// How long a freshly launched server gets to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between two readiness probes.
const READY_POLL: Duration = Duration::from_millis(10);
/// Timeout of a single readiness probe (connect + `PING` + reply).
const PING_TIMEOUT: Duration = Duration::from_millis(500);
/// Lines of the server logs quoted in error messages.
const LOG_TAIL_LINES: usize = 20;

pub(crate) const LOG_FILE: &str = "redis.log";
const OUTPUT_FILE: &str = "redis.out";
const ADDR_IN_USE: &str = "Address already in use";

/// Writes `certs` into `dir` and returns the `redis-server` arguments
/// that use them.
pub(crate) fn write_tls_files(
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
pub(crate) fn free_port() -> Result<u16, TestkitError> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| TestkitError::io("cannot find a free loopback port", e))
}

pub(crate) enum LaunchError {
    /// The server could not bind its port.
    AddrInUse {
        log_tail: String,
    },
    Fatal(TestkitError),
}

/// Spawns `redis-server` on `port` with its files in `dir` and waits until it
/// answers `PING`. On failure the process is killed and reaped.
pub(crate) async fn launch(
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
