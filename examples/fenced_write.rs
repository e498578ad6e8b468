//! Fencing a value stored in Redis. Worker A takes a lock with a 500 ms
//! lease, reads a balance and is paused past its lease (as a GC pause or a
//! SIGSTOP would); worker B takes the lock, claims the balance with its
//! newer fencing token and writes. When A resumes, it writes the balance it
//! computed before the pause: the value refuses it, and B's write stands.
//!
//! Redis: `REDIS_URL` when set; else 127.0.0.1:6379 if a server answers;
//! else a throwaway redis-server started through redisync-testkit.
//!
//!     cargo run --example fenced_write

use std::time::Duration;

mod support;
use support::find_redis;

use fred::prelude::*;
use redisync::fenced::FencedWrite;
use redisync::Guard;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some((url, _server)) = find_redis().await else {
        std::process::exit(1);
    };
    // Fresh names: never touch what a shared server holds.
    let run = uuid::Uuid::new_v4();
    let (lock_name, key) = (format!("example:{run}"), format!("example:{run}:balance"));
    let (a, b) = (
        redisync::Client::connect(&url).await?,
        redisync::Client::connect(&url).await?,
    );

    let lease = Duration::from_millis(500);
    let held_by_a = a.lock(&lock_name).lock_with_lease(lease).await?;
    let balance_a = a.fenced(&key);
    let before = balance_of(balance_a.claim(&held_by_a).await?.value());
    println!(
        "A holds the lock (token {}), reads balance {before}, computes {} and pauses past its {lease:?} lease",
        held_by_a.fencing_token(),
        before + 5
    );

    // B waits for the lock: it is free once A's lease runs out.
    let held_by_b = b.lock(&lock_name).lock().await?;
    let balance_b = b.fenced(&key);
    let seen = balance_of(balance_b.claim(&held_by_b).await?.value());
    let written = balance_b.write(&held_by_b, (seen + 10).to_string()).await?;
    println!(
        "B holds the lock (token {}), reads {seen}, writes {}: {written:?}",
        held_by_b.fencing_token(),
        seen + 10
    );

    // A resumes, unaware, and writes what it computed before the pause.
    let late = balance_a
        .write(&held_by_a, (before + 5).to_string())
        .await?;
    println!("A resumes and writes {}: {late:?}", before + 5);
    let stored = balance_a.read().await?.and_then(|v| v.value);
    let stored = balance_of(stored);
    let refused =
        matches!(late, FencedWrite::Stale { newest } if newest == held_by_b.fencing_token());
    if !refused || stored != seen + 10 {
        eprintln!("FAILED: the late write of A landed (balance {stored})");
        std::process::exit(1);
    }
    println!(
        "proven: the value saw token {} first, so A's late write (token {}) was refused; the balance is {stored}, as B wrote it",
        held_by_b.fencing_token(),
        held_by_a.fencing_token()
    );

    held_by_b.release().await?;
    drop(held_by_a);
    // The example's value goes away with the run.
    let redis = Builder::from_config(Config::from_url(&url)?).build()?;
    redis.init().await?;
    let _: () = redis.del(&key).await?;
    redis.quit().await?;
    a.shutdown().await?;
    b.shutdown().await?;
    Ok(())
}

/// A balance as stored (0 when never written).
fn balance_of(value: Option<Vec<u8>>) -> i64 {
    value
        .and_then(|v| String::from_utf8(v).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}
