//! Counting the commands Redis executed, from `INFO commandstats`.
//!
//! One plain `fred` client per instance (separate from the client under
//! test) takes a snapshot before and after the measured window. The count of
//! a command is `calls + rejected_calls`; commands run inside Lua scripts are
//! included (Redis counts them too). The harness's own `INFO` calls are
//! left out (each snapshot knows how many came before it); `INFO` sent by
//! the library under test (the Redlock restart guard reads `INFO server`)
//! is counted. `CONFIG RESETSTAT` is never sent, so other observers can take
//! their own snapshots (their `INFO` calls would count as the library's).

use fred::prelude::{ClientLike, ClusterInterface, Config};
use fred::types::{Builder, InfoKind};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Command name -> calls + rejected calls, for one instance.
pub(crate) type CmdCounts = BTreeMap<String, u64>;

/// Admin connections used only for `INFO commandstats`.
#[derive(Clone)]
pub(crate) struct RedisStats {
    clients: Vec<fred::clients::Client>,
    /// `INFO` calls sent so far to every instance (snapshots and CPU reads).
    snapshots: Arc<AtomicU64>,
}

/// Commands executed between two snapshots, summed over the instances.
pub(crate) struct CmdDelta {
    /// All commands except the harness's own `INFO` calls.
    pub(crate) total: u64,
    /// Command name -> count, only commands that ran.
    pub(crate) breakdown: Value,
    /// The total per instance, in the order of the URLs (how the work
    /// spread over the primaries of a cluster).
    pub(crate) per_instance: Vec<u64>,
}

impl RedisStats {
    /// Connects one admin client per URL.
    pub(crate) async fn connect(urls: &[String]) -> Result<Self, String> {
        let mut clients = Vec::with_capacity(urls.len());
        for url in urls {
            clients.push(admin_client(url).await?);
        }
        Ok(Self {
            clients,
            snapshots: Arc::new(AtomicU64::new(0)),
        })
    }

    /// One `INFO commandstats` per instance. The `info` count excludes the
    /// calls of earlier snapshots (Redis counts a command once it has run,
    /// so a snapshot never sees its own call).
    pub(crate) async fn snapshot(&self) -> Result<Vec<CmdCounts>, String> {
        let earlier = self.snapshots.fetch_add(1, Ordering::SeqCst);
        let mut out = Vec::with_capacity(self.clients.len());
        for client in &self.clients {
            let raw: String = client
                .info(Some(InfoKind::CommandStats))
                .await
                .map_err(|e| format!("INFO commandstats: {e}"))?;
            let mut counts = parse_commandstats(&raw);
            if let Some(info) = counts.get_mut("info") {
                *info = info.saturating_sub(earlier);
            }
            out.push(counts);
        }
        Ok(out)
    }

    /// CPU time and socket reads of every instance, from `INFO` (default
    /// sections; one more harness `INFO` per instance, left out of the
    /// command counts like the snapshots' own).
    pub(crate) async fn counters(&self) -> Result<Vec<ServerCounters>, String> {
        self.snapshots.fetch_add(1, Ordering::SeqCst);
        let mut out = Vec::with_capacity(self.clients.len());
        for client in &self.clients {
            let raw: String = client
                .info(Some(InfoKind::Default))
                .await
                .map_err(|e| format!("INFO: {e}"))?;
            out.push(ServerCounters::parse(&raw).ok_or("INFO has no used_cpu_user/used_cpu_sys")?);
        }
        Ok(out)
    }

    /// The first server's name and version ("Redis 7.0.15", "Valkey
    /// 9.1.2"), from `INFO server` (Valkey reports a Redis version too).
    pub(crate) async fn server_version(&self) -> Result<String, String> {
        let client = self.clients.first().ok_or("no server")?;
        let raw: String = client
            .info(Some(InfoKind::Server))
            .await
            .map_err(|e| format!("INFO server: {e}"))?;
        self.snapshots.fetch_add(1, Ordering::SeqCst);
        let field = |name: &str| {
            raw.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        Ok(match (field("valkey_version"), field("redis_version")) {
            (Some(v), _) => format!("Valkey {v}"),
            (None, Some(v)) => format!("Redis {v}"),
            (None, None) => "unknown server".into(),
        })
    }

    /// Closes the admin connections (best effort).
    pub(crate) async fn quit(&self) {
        for client in &self.clients {
            if let Err(e) = client.quit().await {
                eprintln!("admin quit: {e}");
            }
        }
    }
}

/// Parses the `cmdstat_<name>:calls=..,rejected_calls=..` lines.
pub(crate) fn parse_commandstats(raw: &str) -> CmdCounts {
    let mut out = CmdCounts::new();
    for line in raw.lines() {
        let Some(rest) = line.trim().strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let n = fields
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .filter(|(k, _)| *k == "calls" || *k == "rejected_calls")
            .map(|(_, v)| v.trim().parse::<u64>().unwrap_or(0))
            .sum();
        out.insert(name.to_string(), n);
    }
    out
}

/// What an instance has done so far, from `INFO`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ServerCounters {
    /// `used_cpu_user + used_cpu_sys`, seconds.
    pub(crate) cpu_s: f64,
    /// `total_reads_processed` (socket reads that carried requests; Redis
    /// 6+): requests per read show how well the client pipelines.
    pub(crate) reads: Option<u64>,
}

impl ServerCounters {
    /// `None` without the CPU fields.
    pub(crate) fn parse(raw: &str) -> Option<Self> {
        let field = |name: &str| {
            raw.lines()
                .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let secs = |name: &str| field(name)?.parse::<f64>().ok();
        Some(Self {
            cpu_s: secs("used_cpu_user")? + secs("used_cpu_sys")?,
            reads: field("total_reads_processed").and_then(|v| v.parse().ok()),
        })
    }
}

/// `after - before` per command, summed over instances.
pub(crate) fn delta(before: &[CmdCounts], after: &[CmdCounts]) -> CmdDelta {
    let mut sums = BTreeMap::<&str, u64>::new();
    let mut per_instance = Vec::with_capacity(after.len());
    for (b, a) in before.iter().zip(after) {
        let mut here = 0;
        for (name, calls) in a {
            let d = calls.saturating_sub(b.get(name).copied().unwrap_or(0));
            if d > 0 {
                *sums.entry(name).or_insert(0) += d;
                here += d;
            }
        }
        per_instance.push(here);
    }
    let total = sums.values().sum();
    // serde_json's Map (without `preserve_order`) is ordered by name.
    let breakdown: Map<String, Value> = sums
        .into_iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    CmdDelta {
        total,
        breakdown: Value::Object(breakdown),
        per_instance,
    }
}

/// A connected admin client for `url`.
async fn admin_client(url: &str) -> Result<fred::clients::Client, String> {
    plain_client(url, "admin").await
}

/// A plain fred client (default configuration) connected to `url`; errors
/// name `what` it is for.
pub(crate) async fn plain_client(url: &str, what: &str) -> Result<fred::clients::Client, String> {
    let config = Config::from_url(url).map_err(|e| format!("{what} config {url}: {e}"))?;
    let client = Builder::from_config(config)
        .build()
        .map_err(|e| format!("{what} client {url}: {e}"))?;
    client
        .init()
        .await
        .map_err(|e| format!("{what} connect {url}: {e}"))?;
    Ok(client)
}

/// The `redis://` URLs of the primaries that serve slots, from `CLUSTER
/// NODES` of the cluster node on 127.0.0.1:`seed_port`, sorted (failed
/// nodes and replicas left out).
pub(crate) async fn cluster_primaries(seed_port: u16) -> Result<Vec<String>, String> {
    let url = format!("redis://127.0.0.1:{seed_port}");
    let client = admin_client(&url).await?;
    let nodes: Result<String, _> = client.cluster_nodes().await;
    if let Err(e) = client.quit().await {
        eprintln!("admin quit: {e}");
    }
    let nodes = nodes.map_err(|e| format!("CLUSTER NODES on {url}: {e}"))?;
    let primaries = parse_cluster_nodes(&nodes);
    if primaries.is_empty() {
        return Err(format!(
            "CLUSTER NODES on {url} lists no primary with slots"
        ));
    }
    Ok(primaries)
}

/// `redis://host:port` of every line of `CLUSTER NODES` whose flags say
/// `master` (and not `fail`) and that has slots, sorted. A node that never
/// learned its own address (a one-node cluster) shows `:port`: 127.0.0.1.
pub(crate) fn parse_cluster_nodes(raw: &str) -> Vec<String> {
    let mut out: Vec<String> = raw
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags: Vec<&str> = fields.get(2)?.split(',').collect();
            let primary = flags.contains(&"master") && !flags.iter().any(|f| f.starts_with("fail"));
            // Fields 8.. are slot ranges ("0-5460", "42"; "[..]" = migrating).
            let slots = fields.iter().skip(8).any(|f| !f.starts_with('['));
            let addr = fields.get(1)?.split(['@', ',']).next()?;
            let host = if addr.starts_with(':') {
                "127.0.0.1"
            } else {
                ""
            };
            (primary && slots).then(|| format!("redis://{host}{addr}"))
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "# Commandstats\r\n\
        cmdstat_evalsha:calls=10,usec=50,usec_per_call=5.00,rejected_calls=1,failed_calls=0\r\n\
        cmdstat_info:calls=3,usec=1,usec_per_call=0.3,rejected_calls=0,failed_calls=0\r\n";
    const AFTER: &str = "# Commandstats\r\n\
        cmdstat_evalsha:calls=30,usec=50,usec_per_call=5.00,rejected_calls=1,failed_calls=0\r\n\
        cmdstat_hset:calls=5,usec=5,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_client|setinfo:calls=2,usec=5,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_info:calls=5,usec=1,usec_per_call=0.3,rejected_calls=0,failed_calls=0\r\n";

    #[test]
    fn parses_and_subtracts() {
        let b = parse_commandstats(BEFORE);
        assert_eq!(b.get("evalsha"), Some(&11));
        let d = delta(&[b], &[parse_commandstats(AFTER)]);
        // (Unadjusted counts: snapshot() takes the harness's INFO out.)
        assert_eq!(d.total, 29);
        assert_eq!(
            d.breakdown,
            json!({"evalsha": 20, "hset": 5, "client|setinfo": 2, "info": 2})
        );
        assert_eq!(d.per_instance, [29]);
    }

    #[test]
    fn reads_cpu_and_reads() {
        let raw = "# Stats\r\ntotal_reads_processed:1234\r\n# CPU\r\n\
            used_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\n\
            used_cpu_sys_children:9.0\r\nused_cpu_user_main_thread:7.0\r\n";
        let c = ServerCounters::parse(raw).expect("has the CPU fields");
        assert!((c.cpu_s - 3.75).abs() < 1e-9);
        assert_eq!(c.reads, Some(1234));
        let old = ServerCounters::parse("used_cpu_sys:1\r\nused_cpu_user:2\r\n");
        assert_eq!(old.and_then(|c| c.reads), None);
        assert_eq!(ServerCounters::parse("used_cpu_sys_children:1.0\r\n"), None);
    }

    #[test]
    fn finds_the_primaries() {
        let raw = "\
            a1 127.0.0.1:7002@17002 master - 0 1 2 connected 5461-10922\n\
            b2 127.0.0.1:7001@17001,host myself,master - 0 0 1 connected 0-5460\n\
            c3 127.0.0.1:7004@17004 slave b2 0 1 1 connected\n\
            d4 127.0.0.1:7005@17005 master,fail - 0 1 5 disconnected 10923-16383\n\
            e5 127.0.0.1:7006@17006 master - 0 1 6 connected\n";
        assert_eq!(
            parse_cluster_nodes(raw),
            ["redis://127.0.0.1:7001", "redis://127.0.0.1:7002"]
        );
        let alone = "9d94 :7454@17454 myself,master - 0 0 0 connected 0-16383\n";
        assert_eq!(parse_cluster_nodes(alone), ["redis://127.0.0.1:7454"]);
    }
}
