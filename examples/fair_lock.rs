//! Fair lock: FIFO order across two clients. Client A holds the lock while
//! six tasks, alternating between clients A and B, line up 50 ms apart; when
//! A lets go they get the lock exactly in the order they lined up, each
//! woken by a message addressed to it alone, with strictly increasing
//! fencing tokens. A plain `Lock` makes no such promise across clients.
//!
//! Redis: `REDIS_URL` when set; else 127.0.0.1:6379 if a server answers;
//! else a throwaway redis-server started through redisync-testkit.
//!
//!     cargo run --example fair_lock

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod support;

const WAITERS: usize = 6;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some((url, _server)) = support::find_redis().await else {
        std::process::exit(1);
    };
    let name = format!("example:payouts:{}", std::process::id());
    let a = redisync::Client::connect(&url).await?;
    let b = redisync::Client::connect(&url).await?;

    let holder = a.fair_lock(&name).lock().await?;
    println!("client A holds {name:?} (token {})", holder.fencing_token());
    let started = Instant::now();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        let (label, lock) = if i % 2 == 0 {
            ("A", a.fair_lock(&name))
        } else {
            ("B", b.fair_lock(&name))
        };
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let guard = lock.lock().await?;
            println!(
                "{:>5.0?}  waiter {i} (client {label}) got the lock, token {}",
                started.elapsed(),
                guard.fencing_token()
            );
            order
                .lock()
                .map_err(|e| e.to_string())?
                .push((i, guard.fencing_token()));
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.unlock().await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
        println!(
            "{:>5.0?}  waiter {i} (client {label}) lines up",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("{:>5.0?}  client A unlocks", started.elapsed());
    holder.unlock().await?;
    for w in waiters {
        w.await?.map_err(|e| e.to_string())?;
    }

    let order = order.lock().map_err(|e| e.to_string())?.clone();
    let fifo = order.iter().map(|(i, _)| *i).eq(0..WAITERS);
    let increasing = order.windows(2).all(|w| w[0].1 < w[1].1);
    println!(
        "acquisition order: {:?}",
        order.iter().map(|(i, _)| i).collect::<Vec<_>>()
    );
    println!("FIFO: {fifo}; fencing tokens strictly increasing: {increasing}");
    a.shutdown().await?;
    b.shutdown().await?;
    if !(fifo && increasing) {
        eprintln!("fairness violated!");
        std::process::exit(2);
    }
    Ok(())
}
