//! A Sentinel setup on loopback: one primary, one replica and three
//! sentinels (the server binary run as `<server> <conf> --sentinel`, quorum
//! 2), torn down on drop.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::resp::command_or_empty;
use crate::{RedisServer, TestkitError};

/// The name the sentinels monitor.
pub const SENTINEL_SERVICE: &str = "mymaster";

/// A running primary + replica watched by three sentinels.
#[derive(Debug)]
pub struct RedisSentinels {
    primary: RedisServer,
    replica: RedisServer,
    sentinels: Vec<Sentinel>,
}

#[derive(Debug)]
struct Sentinel {
    child: Child,
    port: u16,
    /// Its TLS port, when started with [`RedisSentinels::try_start_tls`].
    tls_port: Option<u16>,
    _dir: tempfile::TempDir,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RedisSentinels {
    /// Starts the servers and the sentinels and waits until every sentinel
    /// knows the primary, the replica and the other sentinels.
    ///
    /// # Panics
    /// When it cannot (no server binary, or no convergence within 20 s),
    /// with the reason.
    pub async fn start() -> RedisSentinels {
        match RedisSentinels::try_start().await {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    /// As [`RedisSentinels::start`], returning the error instead.
    ///
    /// # Errors
    /// When a process does not start or the setup does not converge.
    pub async fn try_start() -> Result<RedisSentinels, TestkitError> {
        RedisSentinels::try_start_with(None).await
    }

    /// As [`RedisSentinels::try_start`], everything over TLS with `certs`:
    /// the servers replicate over TLS, the sentinels monitor the primary's
    /// TLS port and talk to each other over TLS (`tls-replication yes`), so
    /// the address a sentinel gives is a TLS one. Every process keeps a
    /// plain port for the set-up; clients connect with
    /// [`RedisSentinels::tls_url`].
    ///
    /// # Errors
    /// As [`RedisSentinels::try_start`]; [`TestkitError::NoTls`] when the
    /// server binary has no TLS.
    pub async fn try_start_tls(certs: &crate::TestCerts) -> Result<RedisSentinels, TestkitError> {
        RedisSentinels::try_start_with(Some(certs)).await
    }

    async fn try_start_with(
        tls: Option<&crate::TestCerts>,
    ) -> Result<RedisSentinels, TestkitError> {
        let (primary, replica) = match tls {
            None => {
                let primary = RedisServer::try_start().await?;
                let port = primary.port().to_string();
                let replica =
                    RedisServer::try_start_with_args(&["--replicaof", "127.0.0.1", &port]).await?;
                (primary, replica)
            }
            Some(certs) => {
                let over_tls = ["--tls-replication", "yes"];
                let primary = RedisServer::try_start_tls(certs, false, &over_tls).await?;
                let port = primary.tls_port().unwrap_or(primary.port()).to_string();
                let mut args = over_tls.to_vec();
                args.extend(["--replicaof", "127.0.0.1", &port]);
                let replica = RedisServer::try_start_tls(certs, false, &args).await?;
                (primary, replica)
            }
        };
        let monitored = primary.tls_port().unwrap_or(primary.port());
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            sentinels.push(start_sentinel(monitored, tls)?);
        }
        let setup = RedisSentinels {
            primary,
            replica,
            sentinels,
        };
        setup.wait_converged(Duration::from_secs(20)).await?;
        Ok(setup)
    }

    async fn wait_converged(&self, within: Duration) -> Result<(), TestkitError> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let mut ready = true;
            for s in &self.sentinels {
                let info = command_or_empty(s.port, &["info", "sentinel"]).await;
                if !(info.contains("status=ok")
                    && info.contains("slaves=1")
                    && info.contains("sentinels=3"))
                {
                    ready = false;
                    break;
                }
            }
            if ready {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(TestkitError::NotReady {
                    port: self.sentinels[0].port,
                    reason: "the sentinels did not converge".into(),
                    log_tail: command_or_empty(self.sentinels[0].port, &["info", "sentinel"]).await,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A `redis-sentinel://` URL naming all three sentinels.
    pub fn url(&self) -> String {
        let mut url = format!(
            "redis-sentinel://127.0.0.1:{}/0?sentinelServiceName={SENTINEL_SERVICE}",
            self.sentinels[0].port
        );
        for s in &self.sentinels[1..] {
            let _ = write!(url, "&node=127.0.0.1:{}", s.port);
        }
        url
    }

    /// A `rediss-sentinel://` URL naming all three sentinels' TLS ports,
    /// for a setup started with [`RedisSentinels::try_start_tls`]; `None`
    /// for a plain one.
    pub fn tls_url(&self) -> Option<String> {
        let mut url = format!(
            "rediss-sentinel://127.0.0.1:{}/0?sentinelServiceName={SENTINEL_SERVICE}",
            self.sentinels[0].tls_port?
        );
        for s in &self.sentinels[1..] {
            let _ = write!(url, "&node=127.0.0.1:{}", s.tls_port?);
        }
        Some(url)
    }

    /// The server that was primary at start.
    pub fn primary(&self) -> &RedisServer {
        &self.primary
    }

    /// Mutable access to the first primary, e.g. to kill it.
    pub fn primary_mut(&mut self) -> &mut RedisServer {
        &mut self.primary
    }

    /// The server that was the replica at start.
    pub fn replica(&self) -> &RedisServer {
        &self.replica
    }

    /// The port the sentinels currently name as primary.
    pub async fn current_primary_port(&self) -> Option<u16> {
        let out = command_or_empty(
            self.sentinels[0].port,
            &["sentinel", "get-master-addr-by-name", SENTINEL_SERVICE],
        )
        .await;
        out.lines().nth(1).and_then(|p| p.trim().parse().ok())
    }
}

fn start_sentinel(
    primary_port: u16,
    tls: Option<&crate::TestCerts>,
) -> Result<Sentinel, TestkitError> {
    let dir = tempfile::Builder::new()
        .prefix("redisync-sentinel-")
        .tempdir()
        .map_err(|e| TestkitError::Io {
            context: "cannot create a temporary directory".into(),
            source: e,
        })?;
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| TestkitError::Io {
            context: "cannot find a free port".into(),
            source: e,
        })?
        .port();
    let conf = dir.path().join("sentinel.conf");
    let mut text = format!(
        "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {dir}/sentinel.log\n\
         sentinel monitor {SENTINEL_SERVICE} 127.0.0.1 {primary_port} 2\n\
         sentinel down-after-milliseconds {SENTINEL_SERVICE} 1000\n\
         sentinel failover-timeout {SENTINEL_SERVICE} 3000\n\
         sentinel parallel-syncs {SENTINEL_SERVICE} 1\n",
        dir = dir.path().display()
    );
    let tls_port = match tls {
        None => None,
        Some(certs) => {
            let tls_port = crate::free_port()?;
            // The files as a server's, written as config lines.
            let args = crate::write_tls_files(dir.path(), certs, false)?;
            for pair in args.chunks(2) {
                let _ = writeln!(text, "{} {}", pair[0].trim_start_matches("--"), pair[1]);
            }
            let _ = writeln!(text, "tls-port {tls_port}\ntls-replication yes");
            Some(tls_port)
        }
    };
    std::fs::write(&conf, text).map_err(|e| TestkitError::Io {
        context: "cannot write sentinel.conf".into(),
        source: e,
    })?;
    let child = Command::new(crate::server_binary()?)
        .arg(&conf)
        .arg("--sentinel")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| TestkitError::Io {
            context: "cannot run the server binary as a sentinel".into(),
            source: e,
        })?;
    Ok(Sentinel {
        child,
        port,
        tls_port,
        _dir: dir,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sentinels_come_up_and_fail_over() {
        let mut setup = RedisSentinels::start().await;
        assert_eq!(
            setup.current_primary_port().await,
            Some(setup.primary().port())
        );
        assert!(setup.url().starts_with("redis-sentinel://127.0.0.1:"));
        let replica = setup.replica().port();
        setup.primary_mut().kill().await;
        // Usually 2-3 s (down after 1 s, then an election); on a loaded
        // machine an election can fail and the next waits out the failover
        // timeout, more than once: a bound, not a sleep.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while setup.current_primary_port().await != Some(replica) {
            assert!(tokio::time::Instant::now() < deadline, "no failover");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
