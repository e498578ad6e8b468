//! Quick start: 2 clients x 4 tasks increment a counter stored in Redis with
//! a non-atomic read-modify-write, each under the lock `quickstart:counter`.
//! Without the lock, updates would be lost; with it, the final count is exact
//! and every critical section carries a strictly increasing fencing token.
//!
//! Redis: `REDIS_URL` when set; else 127.0.0.1:6379 if a server answers;
//! else a throwaway redis-server started through redisync-testkit.
//!
//!     cargo run --example quickstart

use std::time::Instant;

mod support;
use support::find_redis;

use fred::prelude::*;

const CLIENTS: usize = 2;
const TASKS_PER_CLIENT: usize = 4;
const INCREMENTS_PER_TASK: usize = 25;
const COUNTER: &str = "quickstart:count";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some((url, _server)) = find_redis().await else {
        std::process::exit(1);
    };

    let redis = Builder::from_config(Config::from_url(&url)?).build()?;
    redis.init().await?;
    let _: () = redis.del(COUNTER).await?;

    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let client = redisync::Client::connect(&url).await?;
        for _ in 0..TASKS_PER_CLIENT {
            let lock = client.lock("quickstart:counter");
            let redis = redis.clone();
            tasks.push(tokio::spawn(async move {
                let mut tokens = Vec::new();
                for _ in 0..INCREMENTS_PER_TASK {
                    let guard = lock.lock().await?;
                    // Read, think, write: only safe under the lock.
                    let n: i64 = redis.get::<Option<i64>, _>(COUNTER).await?.unwrap_or(0);
                    tokio::task::yield_now().await;
                    let _: () = redis.set(COUNTER, n + 1, None, None, false).await?;
                    tokens.push(guard.fencing_token());
                    guard.unlock().await?;
                }
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(tokens)
            }));
        }
    }
    let mut tokens = Vec::new();
    for t in tasks {
        tokens.extend(t.await?.map_err(|e| e.to_string())?);
    }
    let elapsed = started.elapsed();
    let count: i64 = redis.get(COUNTER).await?;
    tokens.sort_unstable();
    let unique = tokens.windows(2).all(|w| w[0] < w[1]);

    let expected = CLIENTS * TASKS_PER_CLIENT * INCREMENTS_PER_TASK;
    println!("final count: {count} (expected {expected})");
    println!(
        "fencing tokens: {} acquisitions, first {}, last {}, all distinct: {unique}",
        tokens.len(),
        tokens.first().copied().unwrap_or_default(),
        tokens.last().copied().unwrap_or_default()
    );
    println!(
        "time: {elapsed:.2?} ({:.0} locked increments/s over {CLIENTS} clients x {TASKS_PER_CLIENT} tasks)",
        f64::from(u32::try_from(expected).unwrap_or(u32::MAX)) / elapsed.as_secs_f64()
    );
    let _: () = redis.del(COUNTER).await?;
    if i64::try_from(expected) != Ok(count) || !unique {
        eprintln!("mutual exclusion violated!");
        std::process::exit(2);
    }
    Ok(())
}
