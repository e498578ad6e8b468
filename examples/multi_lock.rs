//! `MultiLock`: all-or-nothing over several locks.
//!
//! Four tasks move money between three accounts, each transfer holding the
//! locks of both of its accounts. Half of them name the accounts in the
//! opposite order; a naive "lock one, then wait for the other" would
//! deadlock, a `MultiLock` does not. The total never changes. Then, while
//! another client holds one account, a `MultiLock` over it gives up after its
//! wait and leaves no other account held.
//!
//! Redis: `REDIS_URL` when set; else 127.0.0.1:6379 if a server answers;
//! else a throwaway redis-server started through redisync-testkit. The locks
//! may as well live on different servers.
//!
//!     cargo run --example multi_lock

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redisync_redlock::MultiLock;

mod support;

const ACCOUNTS: [&str; 3] = ["alice", "bob", "carol"];
const TRANSFERS: usize = 25;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some((url, _server)) = support::find_redis().await else {
        std::process::exit(1);
    };
    let prefix = format!("example:account:{}", std::process::id());
    let key = |who: &str| format!("{prefix}:{who}");
    // The "database": balances only touched under both accounts' locks.
    let balances: Arc<Mutex<HashMap<&str, i64>>> =
        Arc::new(Mutex::new(ACCOUNTS.iter().map(|a| (*a, 100)).collect()));

    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..4 {
        // Each task is its own "process" with its own client.
        let client = redisync::Client::connect(&url).await?;
        let (from, to) = (ACCOUNTS[t % 3], ACCOUNTS[(t + 1) % 3]);
        // Tasks 0 and 2 give (from, to); 1 and 3 give (to, from).
        let pair = if t % 2 == 0 { [from, to] } else { [to, from] };
        let both = MultiLock::new(pair.iter().map(|a| client.lock(&key(a))).collect())?;
        let balances = balances.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..TRANSFERS {
                let guard = both.lock().await?;
                {
                    let mut b = balances.lock().map_err(|e| e.to_string())?;
                    *b.entry(from).or_default() -= 1;
                    *b.entry(to).or_default() += 1;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                guard.unlock().await?;
            }
            println!("task {t}: {TRANSFERS} transfers {from} -> {to} done");
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for task in tasks {
        task.await?.map_err(|e| e.to_string())?;
    }
    let total: i64 = balances.lock().map_err(|e| e.to_string())?.values().sum();
    println!(
        "{} transfers in {:.0?}, opposite orders and all: no deadlock; total still {total}",
        4 * TRANSFERS,
        started.elapsed()
    );

    // All or nothing.
    let other = redisync::Client::connect(&url).await?;
    let held = other.lock(&key("carol")).lock().await?;
    println!("\nanother client holds carol");
    let client = redisync::Client::connect(&url).await?;
    let all = MultiLock::new(ACCOUNTS.iter().map(|a| client.lock(&key(a))).collect())?;
    let got = all
        .try_lock(Duration::from_millis(300), Some(Duration::from_secs(10)))
        .await?;
    println!(
        "MultiLock over all three, waiting 300 ms: {}",
        if got.is_some() {
            "granted"
        } else {
            "not granted"
        }
    );
    for a in ACCOUNTS {
        println!(
            "  {a:>5} locked: {}",
            client.lock(&key(a)).is_locked().await?
        );
    }
    held.unlock().await?;
    let guard = all.lock().await?;
    println!(
        "carol released: MultiLock granted, tokens {:?}",
        guard.fencing_tokens()
    );
    guard.unlock().await?;
    Ok(())
}
