//! Shared by the examples: which Redis to use.
#![allow(dead_code)]

use std::time::Duration;

use redisync_testkit::RedisServer;

/// `REDIS_URL` when set (any URL redisync takes: `rediss://` too, the
/// examples are built with the `tls` feature; a private CA is trusted
/// through `SSL_CERT_FILE=ca.pem`); else 127.0.0.1:6379 if a Redis answers there; else
/// a throwaway redis-server started through the testkit (kept alive by the
/// returned handle). Says which on stdout; `None` (after saying how to
/// install one) when there is no Redis and no redis-server binary.
pub(crate) async fn find_redis() -> Option<(String, Option<RedisServer>)> {
    if let Ok(url) = std::env::var("REDIS_URL") {
        println!("using REDIS_URL={url}");
        return Some((url, None));
    }
    if answers_ping("127.0.0.1:6379").await {
        println!("using the Redis at 127.0.0.1:6379");
        return Some(("redis://127.0.0.1:6379".into(), None));
    }
    match RedisServer::try_start().await {
        Ok(server) => {
            println!(
                "no Redis at 127.0.0.1:6379: started a throwaway redis-server on {}",
                server.url()
            );
            Some((server.url(), Some(server)))
        }
        Err(e) => {
            eprintln!("no Redis found and none could be started: {e}");
            None
        }
    }
}

async fn answers_ping(addr: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(b"PING\r\n").await.ok()?;
        let mut buf = [0u8; 16];
        let n = s.read(&mut buf).await.ok()?;
        Some(buf[..n].starts_with(b"+PONG"))
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), attempt).await,
        Ok(Some(true))
    )
}

/// Sends `kill -SIG pid` (`STOP`, `CONT`, `KILL`): the multi-process
/// examples' faults.
pub(crate) async fn signal(
    pid: u32,
    sig: &str,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let status = tokio::process::Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .status()
        .await?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill -{sig} {pid}: {status}").into())
    }
}

/// Spawns `cmd` with its stdout piped (killed when dropped) and sends each
/// line it prints, tagged with `id`, to `lines`.
pub(crate) fn spawn_with_lines(
    mut cmd: tokio::process::Command,
    id: usize,
    lines: tokio::sync::mpsc::UnboundedSender<(usize, String)>,
    echo: bool,
) -> std::io::Result<tokio::process::Child> {
    use tokio::io::AsyncBufReadExt;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("no stdout"))?;
    tokio::spawn(async move {
        let mut out = tokio::io::BufReader::new(stdout).lines();
        while let Ok(Some(line)) = out.next_line().await {
            if echo {
                println!("  member {id}: {line}");
            }
            let _ = lines.send((id, line));
        }
    });
    Ok(child)
}

/// The next line of `lines` (from [`spawn_with_lines`]) that `want` accepts
/// (given the process id and the line), within `within`; an error naming
/// `waiting_for` when none comes.
pub(crate) async fn next_line(
    lines: &mut tokio::sync::mpsc::UnboundedReceiver<(usize, String)>,
    within: Duration,
    waiting_for: &str,
    want: impl Fn(usize, &str) -> bool,
) -> Result<(usize, String), Box<dyn std::error::Error + Send + Sync>> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let got = tokio::time::timeout_at(deadline, lines.recv()).await;
        let (id, line) = got
            .map_err(|_| format!("timed out waiting for {waiting_for}"))?
            .ok_or("the child processes are gone")?;
        if want(id, &line) {
            return Ok((id, line));
        }
    }
}

/// Ends an example that proves something: prints `proven` and returns when
/// nothing was violated, else prints each violation and exits 1.
pub(crate) fn report(violations: &[String], proven: &str) {
    if violations.is_empty() {
        println!("proven: {proven}");
        return;
    }
    for v in violations {
        eprintln!("VIOLATION: {v}");
    }
    std::process::exit(1);
}
