//! A local Redis Cluster on loopback: primaries with replicas, set up over
//! RESP (the steps of `redis-cli --cluster create`, without `redis-cli`),
//! torn down on drop.

use std::fmt::Write as _;
use std::time::Duration;

use crate::resp::{command, command_or_empty};
use crate::{RedisServer, TestkitError};

/// Slots of a Redis Cluster.
const SLOTS: usize = 16384;

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
    /// When the cluster cannot be made (no server binary, or it does not
    /// converge within 30 s), with the reason.
    pub async fn start(primaries: usize, replicas: usize) -> RedisCluster {
        match RedisCluster::try_start(primaries, replicas).await {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    /// As [`RedisCluster::start`], returning the error instead.
    ///
    /// # Errors
    /// When a node does not start, a set-up command fails, or the cluster
    /// does not reach `cluster_state:ok` within 30 s.
    pub async fn try_start(
        primaries: usize,
        replicas: usize,
    ) -> Result<RedisCluster, TestkitError> {
        RedisCluster::try_start_with(primaries, replicas, None).await
    }

    /// As [`RedisCluster::try_start`], every node over TLS with `certs`
    /// (`--tls-cluster yes`: the cluster announces its TLS ports, and the
    /// bus and replication run over TLS). Each node keeps a plain port for
    /// the set-up; clients connect with [`RedisCluster::tls_url`].
    ///
    /// # Errors
    /// As [`RedisCluster::try_start`]; [`TestkitError::NoTls`] when the
    /// server binary has no TLS.
    pub async fn try_start_tls(
        primaries: usize,
        replicas: usize,
        certs: &crate::TestCerts,
    ) -> Result<RedisCluster, TestkitError> {
        RedisCluster::try_start_with(primaries, replicas, Some(certs)).await
    }

    async fn try_start_with(
        primaries: usize,
        replicas: usize,
        tls: Option<&crate::TestCerts>,
    ) -> Result<RedisCluster, TestkitError> {
        const ARGS: [&str; 10] = [
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
        ];
        let total = primaries * (1 + replicas);
        let mut nodes = Vec::with_capacity(total);
        for _ in 0..total {
            nodes.push(match tls {
                None => RedisServer::try_start_with_args(&ARGS).await?,
                Some(certs) => {
                    let mut args = ARGS.to_vec();
                    args.extend(["--tls-cluster", "yes", "--tls-replication", "yes"]);
                    RedisServer::try_start_tls(certs, false, &args).await?
                }
            });
        }
        let cluster = RedisCluster { nodes, primaries };
        cluster.join().await?;
        cluster.wait_ok(Duration::from_secs(30)).await?;
        cluster
            .wait_replicas_synced(Duration::from_secs(30))
            .await?;
        Ok(cluster)
    }

    /// What `redis-cli --cluster create` does: slots split evenly over the
    /// primaries (each with its own config epoch), every node met, each
    /// replica attached to its primary (round robin).
    async fn join(&self) -> Result<(), TestkitError> {
        let fail = |port: u16, what: String, reply: String| TestkitError::NotReady {
            port,
            reason: format!("{what} failed: {reply}"),
            log_tail: String::new(),
        };
        let mut ids = Vec::with_capacity(self.nodes.len());
        for n in &self.nodes {
            ids.push(command(n.port(), &["CLUSTER", "MYID"]).await?);
        }
        for (i, n) in self.nodes.iter().take(self.primaries).enumerate() {
            let (from, to) = (i * SLOTS / self.primaries, (i + 1) * SLOTS / self.primaries);
            let slots: Vec<String> = (from..to).map(|s| s.to_string()).collect();
            let mut args = vec!["CLUSTER", "ADDSLOTS"];
            args.extend(slots.iter().map(String::as_str));
            let reply = command(n.port(), &args).await?;
            if reply != "OK" {
                return Err(fail(n.port(), "CLUSTER ADDSLOTS".into(), reply));
            }
            let epoch = (i + 1).to_string();
            let _ = command(n.port(), &["CLUSTER", "SET-CONFIG-EPOCH", &epoch]).await?;
        }
        // The bus listens 10000 above the port clients use: the TLS one
        // with `--tls-cluster yes`.
        let first = self.nodes[0]
            .tls_port()
            .unwrap_or(self.nodes[0].port())
            .to_string();
        for n in self.nodes.iter().skip(1) {
            let reply = command(n.port(), &["CLUSTER", "MEET", "127.0.0.1", &first]).await?;
            if reply != "OK" {
                return Err(fail(n.port(), "CLUSTER MEET".into(), reply));
            }
        }
        // A replica can only follow a primary it knows: retry until gossip
        // has spread.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        for (k, n) in self.nodes.iter().skip(self.primaries).enumerate() {
            let primary = &ids[k % self.primaries];
            loop {
                let reply = command(n.port(), &["CLUSTER", "REPLICATE", primary]).await?;
                if reply == "OK" {
                    break;
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(fail(
                        n.port(),
                        format!("CLUSTER REPLICATE {primary}"),
                        reply,
                    ));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
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
                let info = command_or_empty(n.port(), &["INFO", "replication"]).await;
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

    /// A `rediss-cluster://` URL listing every node's TLS port, for a
    /// cluster started with [`RedisCluster::try_start_tls`]; `None` for a
    /// plain one.
    pub fn tls_url(&self) -> Option<String> {
        let mut url = String::from("rediss-cluster://");
        for (i, n) in self.nodes.iter().enumerate() {
            let port = n.tls_port()?;
            match i {
                0 => {
                    let _ = write!(url, "127.0.0.1:{port}");
                }
                1 => {
                    let _ = write!(url, "?node=127.0.0.1:{port}");
                }
                _ => {
                    let _ = write!(url, "&node=127.0.0.1:{port}");
                }
            }
        }
        Some(url)
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
    command_or_empty(port, &["CLUSTER", "INFO"]).await
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
