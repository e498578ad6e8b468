//! Read-write lock: readers on two clients share the lock, a writer waits for
//! them and excludes everybody; a downgrade lets readers in at once.
//!
//!     cargo run --example rw_lock

use std::time::{Duration, Instant};

mod support;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some((url, _server)) = support::find_redis().await else {
        std::process::exit(1);
    };
    let name = format!("example:catalog:{}", std::process::id());
    let a = redisync::Client::connect(&url).await?;
    let b = redisync::Client::connect(&url).await?;
    let t0 = Instant::now();
    let ms = move || t0.elapsed().as_millis();

    let r1 = a.rw_lock(&name).read().lock().await?;
    let r2 = b.rw_lock(&name).read().lock().await?;
    println!(
        "[{:>4} ms] two readers on two clients hold the lock together",
        ms()
    );

    let writer_lock = b.rw_lock(&name);
    let writer = tokio::spawn(async move {
        let w = writer_lock.write().lock().await?;
        println!(
            "[{:>4} ms] writer in (token {}), alone",
            ms(),
            w.fencing_token()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Downgrade: take the read side, then give up the write side.
        let r = writer_lock.read().lock().await?;
        w.unlock().await?;
        println!("[{:>4} ms] writer downgraded to a reader", ms());
        tokio::time::sleep(Duration::from_millis(100)).await;
        r.unlock().await?;
        Ok::<_, redisync::Error>(())
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    println!(
        "[{:>4} ms] readers leave; the waiting writer goes next",
        ms()
    );
    r1.unlock().await?;
    r2.unlock().await?;

    tokio::time::sleep(Duration::from_millis(50)).await;
    let reader = a.rw_lock(&name).read().lock().await?;
    println!(
        "[{:>4} ms] a reader got in after the downgrade, beside the old writer",
        ms()
    );
    reader.unlock().await?;
    writer.await??;
    Ok(())
}
