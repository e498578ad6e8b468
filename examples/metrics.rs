//! redisync's metrics (cargo feature `metrics`) in Prometheus text format.
//! Four tasks share one lock for a moment, one more gives up waiting; the
//! example then prints what a Prometheus scrape would read, and checks the
//! counts (it exits 1 if they are wrong). With `--serve ADDR` it keeps
//! serving them at `http://ADDR/metrics` until stopped.
//!
//! Redis: `REDIS_URL` when set; else 127.0.0.1:6379 if a server answers;
//! else a throwaway redis-server started through redisync-testkit.
//!
//!     cargo run --example metrics
//!     cargo run --example metrics -- --serve 127.0.0.1:9898

use std::time::Duration;

mod support;
use support::find_redis;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let serve = std::env::args().skip_while(|a| a != "--serve").nth(1);
    // Histograms as real Prometheus histograms, with buckets that fit lock
    // waits and holds (seconds).
    let prometheus = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Suffix("_seconds".into()),
            &[0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0],
        )?
        .install_recorder()?;

    let Some((url, _server)) = find_redis().await else {
        std::process::exit(1);
    };
    // The name as a label: fine for a handful of names (each is a series).
    let client = redisync::Client::builder(&url)
        .metrics_lock_names(true)
        .connect()
        .await?;
    let name = format!("example:{}", uuid::Uuid::new_v4().simple());

    let mut tasks = Vec::new();
    for _ in 0..4 {
        let lock = client.lock(&name);
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let guard = lock.lock().await?;
                tokio::time::sleep(Duration::from_millis(5)).await;
                guard.unlock().await?;
            }
            Ok::<(), redisync::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let holder = client.lock(&name).lock().await?;
    let other = redisync::Client::builder(&url)
        .metrics_lock_names(true)
        .connect()
        .await?;
    let gave_up = other
        .lock(&name)
        .try_lock(Duration::from_millis(50), None)
        .await?;
    assert!(gave_up.is_none(), "the lock is held");
    holder.unlock().await?;

    let text = prometheus.render();
    let ours: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("redisync_") && !l.contains("_bucket"))
        .collect();
    println!("{}", ours.join("\n"));
    let label = format!("kind=\"lock\",name=\"{name}\"");
    let expect = [
        format!("redisync_acquisitions_total{{{label}}} 21"),
        format!("redisync_acquire_timeouts_total{{{label}}} 1"),
        format!("redisync_wait_seconds_count{{{label}}} 21"),
    ];
    let missing: Vec<&String> = expect
        .iter()
        .filter(|e| !text.contains(e.as_str()))
        .collect();
    if !missing.is_empty() {
        eprintln!("missing from the scrape: {missing:?}");
        std::process::exit(1);
    }
    println!("checked: 21 acquisitions, 1 timeout and 21 wait times of {name} are in the scrape");
    other.shutdown().await?;

    if let Some(addr) = serve {
        serve_metrics(&addr, prometheus).await?;
    }
    client.shutdown().await?;
    Ok(())
}

/// Answers every connection with the current scrape (a minimal HTTP/1.1
/// responder: enough for Prometheus and curl, no HTTP server dependency).
async fn serve_metrics(addr: &str, prometheus: PrometheusHandle) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!(
        "serving http://{}/metrics (Ctrl-C stops)",
        listener.local_addr()?
    );
    loop {
        let (mut socket, _) = listener.accept().await?;
        let body = prometheus.render();
        tokio::spawn(async move {
            let mut request = [0u8; 1024];
            let _ = socket.read(&mut request).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(body.as_bytes()).await;
        });
    }
}
