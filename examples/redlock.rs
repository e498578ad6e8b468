//! Redlock over three independent Redis servers: a majority (2 of 3) must
//! grant the lock, so one hung node is tolerated and two are not.
//!
//! 1. Fresh servers do not count until they have been up for `max_lease`
//!    (the restart rule: a node that restarted empty may have forgotten a
//!    grant that is still valid), so the first acquisition waits for that.
//! 2. Lock, print the fencing token and the validity time, unlock.
//! 3. Hang one node (SIGSTOP): acquiring still works, in about one node
//!    timeout, and so does extending.
//! 4. Hang a second node: no majority; the error says how each node answered.
//!
//! Redis: `REDIS_URLS` (three or more comma-separated URLs of independent
//! servers) when set, and nodes are hung with a timed `CLIENT PAUSE`;
//! otherwise three throwaway redis-servers are started through
//! redisync-testkit and hung with SIGSTOP.
//!
//!     cargo run --example redlock

use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::CustomCommand;
use redisync_redlock::{Error, Redlock};
use redisync_testkit::RedisNodes;

/// Longest lease used here, and the restart guard.
const MAX_LEASE: Duration = Duration::from_secs(2);
const NODE_TIMEOUT: Duration = Duration::from_millis(100);

/// The servers: external URLs, or our own throwaway ones.
enum Nodes {
    External(Vec<String>),
    Own(RedisNodes),
}

impl Nodes {
    async fn find() -> Result<Nodes, Box<dyn std::error::Error>> {
        if let Ok(list) = std::env::var("REDIS_URLS") {
            let urls: Vec<String> = list.split(',').map(|s| s.trim().to_owned()).collect();
            if urls.len() < 3 {
                return Err("REDIS_URLS needs three or more URLs of independent servers".into());
            }
            println!("using REDIS_URLS: {urls:?}");
            return Ok(Nodes::External(urls));
        }
        let nodes = RedisNodes::try_start(3).await?;
        println!(
            "started three throwaway redis-servers on ports {:?}",
            nodes.ports()
        );
        Ok(Nodes::Own(nodes))
    }

    fn urls(&self) -> Vec<String> {
        match self {
            Nodes::External(urls) => urls.clone(),
            Nodes::Own(nodes) => nodes.urls(),
        }
    }

    /// Makes node `i` hang: SIGSTOP for our own servers, `CLIENT PAUSE` for
    /// 1.5 s for external ones.
    async fn hang(&self, i: usize) -> Result<(), Box<dyn std::error::Error>> {
        match self {
            Nodes::Own(nodes) => nodes[i].pause(),
            Nodes::External(urls) => {
                let admin = Client::new(Config::from_url(&urls[i])?, None, None, None);
                admin.init().await?;
                let pause = CustomCommand::new_static("CLIENT", None, false);
                let _: Value = admin.custom(pause, vec!["PAUSE", "1500", "ALL"]).await?;
                admin.quit().await?;
            }
        }
        Ok(())
    }

    /// Lets node `i` answer again.
    async fn recover(&self, i: usize) {
        match self {
            Nodes::Own(nodes) => nodes[i].resume(),
            // The pause ends by itself.
            Nodes::External(_) => tokio::time::sleep(Duration::from_millis(1600)).await,
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes = match Nodes::find().await {
        Ok(nodes) => nodes,
        Err(e) => {
            eprintln!("no Redis servers: {e}");
            std::process::exit(1);
        }
    };
    let name = format!("example:ledger:{}", std::process::id());
    // One client (and so one lock) per independent node.
    let mut locks = Vec::new();
    for url in nodes.urls() {
        let client = redisync::Client::builder(&url)
            .command_timeout(Duration::from_millis(500))
            .watchdog_timeout(MAX_LEASE)
            .connect()
            .await?;
        locks.push(client.lock(&name));
    }
    let redlock = Redlock::builder(locks)
        .max_lease(MAX_LEASE)
        .node_timeout(NODE_TIMEOUT)
        .build()?;
    println!(
        "Redlock {name:?} over {} nodes, quorum {}, max_lease {MAX_LEASE:?}, node timeout {NODE_TIMEOUT:?}",
        nodes.urls().len(),
        redlock.quorum()
    );

    // 1. The restart rule.
    match redlock.try_lock(Duration::ZERO, Some(MAX_LEASE)).await {
        Err(e @ Error::QuorumNotReached { .. }) => {
            println!("\n1. right after start: {e}");
            println!("   waiting for the nodes to have been up for max_lease ...");
        }
        Ok(Some(guard)) => {
            println!("\n1. the nodes are older than max_lease: granted at once");
            guard.unlock().await?;
        }
        other => {
            other?;
        }
    }
    let started = Instant::now();
    let guard = redlock
        .try_lock(Duration::from_secs(5), Some(MAX_LEASE))
        .await?
        .ok_or("the lock is busy")?;
    println!("   granted after {:.1?}", started.elapsed());

    // 2. Token and validity.
    println!(
        "\n2. held on nodes {:?}: fencing token {}, valid for {:?} of a {MAX_LEASE:?} lease",
        guard.nodes(),
        guard.fencing_token(),
        guard.validity()
    );
    guard.unlock().await?;

    // 3. One node hangs: a minority failure is tolerated.
    nodes.hang(0).await?;
    println!("\n3. node 0 hangs");
    let started = Instant::now();
    let guard = redlock
        .try_lock(Duration::from_secs(1), Some(MAX_LEASE))
        .await?
        .ok_or("the lock is busy")?;
    println!(
        "   still granted by nodes {:?} in {:.0?} (node timeout {NODE_TIMEOUT:?}), token {}",
        guard.nodes(),
        started.elapsed(),
        guard.fencing_token()
    );
    guard.extend(MAX_LEASE).await?;
    println!(
        "   extended on a majority: valid for {:?}",
        guard.validity()
    );

    // 4. A second node hangs: no majority.
    nodes.hang(1).await?;
    println!("\n4. node 1 hangs too");
    match guard.extend(MAX_LEASE).await {
        Err(e) => println!("   extend: {e}\n   guard lost: {}", guard.is_lost()),
        Ok(()) => println!("   extend unexpectedly succeeded"),
    }
    // A lost guard still holds its place in the local queue and whatever
    // nodes it has: give them back.
    drop(guard);
    let started = Instant::now();
    match redlock.try_lock(Duration::ZERO, Some(MAX_LEASE)).await {
        Err(e) => println!("   acquire, after {:.0?}: {e}", started.elapsed()),
        Ok(None) => println!("   acquire: busy"),
        Ok(Some(_)) => println!("   acquire unexpectedly succeeded"),
    }
    nodes.recover(0).await;
    nodes.recover(1).await;
    println!("\nnodes 0 and 1 answer again");
    let guard = redlock
        .try_lock(Duration::from_secs(5), Some(MAX_LEASE))
        .await?
        .ok_or("the lock is busy")?;
    println!(
        "granted by nodes {:?}, token {} (larger than every earlier one)",
        guard.nodes(),
        guard.fencing_token()
    );
    guard.unlock().await?;
    Ok(())
}
