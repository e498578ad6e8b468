//! A local Redis Cluster on loopback: primaries with replicas, made with
//! `redis-cli --cluster create`, torn down on drop.

use std::fmt::Write as _;
use std::time::Duration;

use crate::{RedisServer, TestkitError};

/// A running Redis Cluster: `primaries` primaries, each with `replicas`
/// replicas, every node a [`RedisServer`] (killed on drop).
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    primaries: usize,
}

impl RedisCluster {
    /// Starts a cluster and waits until every node reports `cluster_state:ok`
    /// and every replica has finished its initial sync (so a write made
    /// afterwards replicates, and a failover keeps it).
    ///
    /// # Panics
    /// When the cluster cannot be made (no `redis-server` or `redis-cli`,
    /// or it does not converge within 30 s), with the reason.
    pub async fn start(primaries: usize, replicas: usize) -> RedisCluster {
        match RedisCluster::try_start(primaries, replicas).await {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    /// As [`RedisCluster::start`], returning the error instead.
    ///
    /// # Errors
    /// When a node does not start, `redis-cli` is missing or fails, or the
    /// cluster does not reach `cluster_state:ok` within 30 s.
    pub async fn try_start(
        primaries: usize,
        replicas: usize,
    ) -> Result<RedisCluster, TestkitError> {
        let total = primaries * (1 + replicas);
        let mut nodes = Vec::with_capacity(total);
        for _ in 0..total {
            nodes.push(
                RedisServer::try_start_with_args(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                    // A replica always takes over (test clusters are idle, and
                    // the data-age check can refuse a failover).
                    "--cluster-replica-validity-factor",
                    "0",
                    // Replicas sync at once (the default waits 5 s).
                    "--repl-diskless-sync-delay",
                    "0",
                ])
                .await?,
            );
        }
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())));
        args.extend([
            "--cluster-replicas".into(),
            replicas.to_string(),
            "--cluster-yes".into(),
        ]);
        let out = tokio::process::Command::new("redis-cli")
            .args(&args)
            .output()
            .await
            .map_err(|e| TestkitError::Io {
                context: "running redis-cli --cluster create (install redis-tools)".into(),
                source: e,
            })?;
        if !out.status.success() {
            return Err(TestkitError::NotReady {
                port: nodes[0].port(),
                reason: format!(
                    "redis-cli --cluster create failed: {}",
                    String::from_utf8_lossy(&out.stdout)
                ),
                log_tail: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        let cluster = RedisCluster { nodes, primaries };
        cluster.wait_ok(Duration::from_secs(30)).await?;
        cluster
            .wait_replicas_synced(Duration::from_secs(30))
            .await?;
        Ok(cluster)
    }

    /// Waits until every running node says `cluster_state:ok` and knows
    /// every node (the state can turn ok before the last MEET spreads).
    ///
    /// # Errors
    /// When `within` passes first.
    pub async fn wait_ok(&self, within: Duration) -> Result<(), TestkitError> {
        let deadline = tokio::time::Instant::now() + within;
        let known = self.nodes.len().to_string();
        loop {
            let mut all_ok = true;
            for n in self.nodes.iter().filter(|n| n.is_running()) {
                let info = cluster_info(n.port()).await;
                let field = |name: &str| {
                    info.lines()
                        .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
                        .map(str::to_owned)
                };
                if field("cluster_state").as_deref() != Some("ok")
                    || field("cluster_known_nodes").as_deref() != Some(known.as_str())
                {
                    all_ok = false;
                    break;
                }
            }
            if all_ok {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(TestkitError::NotReady {
                    port: self.nodes[0].port(),
                    reason: "the cluster did not reach cluster_state:ok".into(),
                    log_tail: cluster_info(self.nodes[0].port()).await,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until every replica's link to its primary is up with no sync in
    /// progress.
    ///
    /// # Errors
    /// When `within` passes first.
    pub async fn wait_replicas_synced(&self, within: Duration) -> Result<(), TestkitError> {
        let deadline = tokio::time::Instant::now() + within;
        for n in self.nodes.iter().filter(|n| n.is_running()) {
            loop {
                let info = redis_cli(n.port(), &["info", "replication"]).await;
                let synced = !info.contains("role:slave")
                    || (info.contains("master_link_status:up")
                        && info.contains("master_sync_in_progress:0"));
                if synced {
                    break;
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(TestkitError::NotReady {
                        port: n.port(),
                        reason: "a replica did not finish its initial sync".into(),
                        log_tail: info,
                    });
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    /// A `redis-cluster://` URL listing every node.
    pub fn url(&self) -> String {
        let mut url = format!("redis-cluster://127.0.0.1:{}", self.nodes[0].port());
        for (i, n) in self.nodes.iter().enumerate().skip(1) {
            url.push(if i == 1 { '?' } else { '&' });
            let _ = write!(url, "node=127.0.0.1:{}", n.port());
        }
        url
    }

    /// Every node (primaries and replicas, in creation order).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Mutable access, e.g. to kill a node.
    pub fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }

    /// How many primaries the cluster was made with.
    pub fn primaries(&self) -> usize {
        self.primaries
    }
}

/// `CLUSTER INFO` of the node on `port`, empty on failure.
async fn cluster_info(port: u16) -> String {
    redis_cli(port, &["cluster", "info"]).await
}

/// `redis-cli -p port args...` stdout, empty on failure.
async fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = tokio::process::Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .await;
    out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_three_primary_cluster_comes_up() {
        let cluster = RedisCluster::start(3, 1).await;
        assert_eq!(cluster.nodes().len(), 6);
        assert!(cluster.url().starts_with("redis-cluster://127.0.0.1:"));
        assert!(cluster_info(cluster.nodes()[3].port())
            .await
            .contains("cluster_known_nodes:6"));
    }
}
