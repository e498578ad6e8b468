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

use fred::prelude::{ClientLike, Config};
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
    /// Snapshots taken so far: each sent one `INFO` to every instance.
    snapshots: Arc<AtomicU64>,
}

/// Commands executed between two snapshots, summed over the instances.
pub(crate) struct CmdDelta {
    /// All commands except the harness's own `INFO` calls.
    pub(crate) total: u64,
    /// Command name -> count, only commands that ran.
    pub(crate) breakdown: Value,
}

impl RedisStats {
    /// Connects one admin client per URL.
    pub(crate) async fn connect(urls: &[String]) -> Result<Self, String> {
        let mut clients = Vec::with_capacity(urls.len());
        for url in urls {
            let config = Config::from_url(url).map_err(|e| format!("admin config {url}: {e}"))?;
            let client = Builder::from_config(config)
                .build()
                .map_err(|e| format!("admin client {url}: {e}"))?;
            client
                .init()
                .await
                .map_err(|e| format!("admin connect {url}: {e}"))?;
            clients.push(client);
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

/// `after - before` per command, summed over instances.
pub(crate) fn delta(before: &[CmdCounts], after: &[CmdCounts]) -> CmdDelta {
    let mut sums = BTreeMap::<&str, u64>::new();
    for (b, a) in before.iter().zip(after) {
        for (name, calls) in a {
            let d = calls.saturating_sub(b.get(name).copied().unwrap_or(0));
            if d > 0 {
                *sums.entry(name).or_insert(0) += d;
            }
        }
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
    }
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
    }
}
