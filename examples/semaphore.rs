//! Semaphore: 3 permits shared by 8 workers on two clients; at most 3 run at
//! once; a dropped permit is given back in the background.
//!
//!     cargo run --example semaphore

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod support;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some((url, _server)) = support::find_redis().await else {
        std::process::exit(1);
    };
    let name = format!("example:exports:{}", std::process::id());
    let a = redisync::Client::connect(&url).await?;
    let b = redisync::Client::connect(&url).await?;
    a.semaphore(&name).try_set_permits(3).await?;

    let running = Arc::new(AtomicU32::new(0));
    let peak = Arc::new(AtomicU32::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for i in 0..8 {
        let sem = if i % 2 == 0 {
            a.semaphore(&name)
        } else {
            b.semaphore(&name)
        };
        let (running, peak) = (running.clone(), peak.clone());
        workers.push(tokio::spawn(async move {
            let permit = sem.acquire(1).await?;
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            println!(
                "worker {i} runs (token {}, {now} running)",
                permit.fencing_token()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            running.fetch_sub(1, Ordering::SeqCst);
            permit.release().await?;
            Ok::<_, redisync::Error>(())
        }));
    }
    for w in workers {
        w.await??;
    }
    println!(
        "8 workers, 3 permits: at most {} ran at once; took {:.2?} (ideal 3 rounds of 100 ms)",
        peak.load(Ordering::SeqCst),
        started.elapsed()
    );

    // A permit dropped without release() is given back in the background.
    let dropped = b.semaphore(&name).acquire(3).await?;
    drop(dropped);
    let t = Instant::now();
    let again = a.semaphore(&name).acquire(3).await?;
    println!("a dropped permit came back after {:.2?}", t.elapsed());
    again.release().await?;
    Ok(())
}
