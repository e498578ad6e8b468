//! A count-down latch across processes: a coordinator waits for its workers.
//!
//! 1. **A phase.** The coordinator sets a latch to 3 and starts three worker
//!    processes; each works a little, then counts down once. The
//!    coordinator's `wait_timeout` returns `true` once the third has counted
//!    down, and not before: the counts the workers got back are 2, 1 and 0,
//!    each once.
//! 2. **A crashed worker.** The next latch counts 2, with a 2 s TTL. One
//!    worker counts down; the other is killed (SIGKILL) before it does. The
//!    coordinator's wait fails with `LatchExpired` when the TTL ends (it does
//!    not read the expiry as an opening), and nothing of the latch is left
//!    in Redis.
//! 3. **A worker restarted after its check-in.** The next latch counts 2.
//!    Worker 0 checks in (`count_down_as("worker-0")`) and is killed
//!    (SIGKILL); restarted, it checks in again under its id: the count
//!    stays 1 and the coordinator's wait does not return. Worker 1's
//!    check-in opens it.
//!
//! The example prints what happened and exits 1 if any of it does not hold.
//!
//! Redis: `REDIS_URL` when set; else 127.0.0.1:6379 if a server answers;
//! else a throwaway redis-server started through redisync-testkit.
//!
//!     cargo run --example countdown

use std::time::Duration;

use redisync::Error;
use tokio::process::Child;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

mod support;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const WORKER_ENV: &str = "COUNTDOWN_EXAMPLE_WORKER";
/// The crashed phase's TTL: its latch expires then.
const CRASH_TTL: Duration = Duration::from_secs(2);
/// Scheduling slack on top of the TTL for the waiter to be told.
const SLACK: Duration = Duration::from_millis(1500);

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    if let Ok(worker) = std::env::var(WORKER_ENV) {
        return worker_main(&worker).await;
    }
    let Some((url, _server)) = support::find_redis().await else {
        std::process::exit(1);
    };
    let mut violations = Vec::new();
    let run = uuid::Uuid::new_v4().simple().to_string();
    let client = redisync::Client::connect(&url).await?;
    phase(&client, &url, &run, &mut violations).await?;
    crashed_phase(&client, &url, &run, &mut violations).await?;
    restarted_worker(&client, &url, &run, &mut violations).await?;
    support::report(&violations, "the coordinator woke once all three workers had counted down (each count-down counted once), a latch whose worker crashed expired with its TTL and told its waiter so instead of opening, and a worker restarted after its check-in counted once");
    Ok(())
}

/// Worker processes; each prints one event per line.
struct Workers {
    children: Vec<Child>,
    lines: UnboundedReceiver<(usize, String)>,
}

impl Workers {
    /// Starts one worker per entry of `modes` ("work" or "hang") on `latch`.
    fn start(url: &str, latch: &str, modes: &[&str]) -> Result<Workers, BoxError> {
        Workers::start_as(url, latch, modes.iter().copied().enumerate())
    }

    /// Starts one worker per (id, mode) of `workers` on `latch` ("work",
    /// "hang", or "check-in" that hangs after its count-down).
    fn start_as<'a>(
        url: &str,
        latch: &str,
        workers: impl IntoIterator<Item = (usize, &'a str)>,
    ) -> Result<Workers, BoxError> {
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        let mut children = Vec::new();
        for (id, mode) in workers {
            let mut cmd = tokio::process::Command::new(std::env::current_exe()?);
            cmd.env(WORKER_ENV, format!("{id} {mode}"))
                .env("COUNTDOWN_EXAMPLE_URL", url)
                .env("COUNTDOWN_EXAMPLE_LATCH", latch);
            children.push(support::spawn_with_lines(cmd, id, tx.clone(), true)?);
        }
        Ok(Workers { children, lines })
    }

    /// The next line of a worker that starts with `word`, within 30 s.
    async fn next(&mut self, word: &str) -> Result<(usize, String), BoxError> {
        self.next_of(&[word]).await
    }

    /// The next line of a worker that starts with one of `words`, within
    /// 30 s.
    async fn next_of(&mut self, words: &[&str]) -> Result<(usize, String), BoxError> {
        let what = format!("a worker to say one of {words:?}");
        support::next_line(
            &mut self.lines,
            Duration::from_secs(30),
            &what,
            |_, line| words.iter().any(|w| line.starts_with(w)),
        )
        .await
    }
}

async fn phase(
    client: &redisync::Client,
    url: &str,
    run: &str,
    violations: &mut Vec<String>,
) -> Result<(), BoxError> {
    let name = format!("example:{run}:phase-1");
    let latch = client.count_down_latch(&name);
    if !latch.try_set_count(3, Duration::from_mins(1)).await? {
        violations.push("a fresh latch refused its count".into());
    }
    println!("phase 1: latch set to 3; three workers start");
    let mut workers = Workers::start(url, &name, &["work", "work", "work"])?;
    let started = Instant::now();
    let opened = latch.wait_timeout(Duration::from_secs(30)).await?;
    println!(
        "phase 1: the coordinator's wait returned {opened} after {:?}",
        started.elapsed()
    );
    if !opened {
        violations.push("the latch did not open within 30 s".into());
    }
    let mut left = Vec::new();
    for _ in 0..3 {
        let (_, line) = workers.next("counted").await?;
        // "counted down, N left"
        left.push(line.split_whitespace().nth(2).unwrap_or("?").to_owned());
    }
    left.sort();
    if left != ["0", "1", "2"] {
        violations.push(format!(
            "the workers were left the counts {left:?}, not 0, 1, 2"
        ));
    }
    let count = latch.count().await?;
    if count != 0 {
        violations.push(format!("the latch counts {count} after it opened"));
    }
    drop(workers.children);
    Ok(())
}

async fn crashed_phase(
    client: &redisync::Client,
    url: &str,
    run: &str,
    violations: &mut Vec<String>,
) -> Result<(), BoxError> {
    let name = format!("example:{run}:phase-2");
    let latch = client.count_down_latch(&name);
    latch.try_set_count(2, CRASH_TTL).await?;
    let set_at = Instant::now();
    println!("phase 2: latch set to 2 with a {CRASH_TTL:?} TTL; one worker counts down, one hangs");
    let mut workers = Workers::start(url, &name, &["work", "hang"])?;
    // Both lines, in whatever order the workers print them.
    let (first, _) = workers.next_of(&["counted", "hanging"]).await?;
    workers
        .next_of(&[if first == 0 { "hanging" } else { "counted" }])
        .await?;
    let hung = workers.children[1].id().ok_or("worker gone")?;
    support::signal(hung, "KILL").await?;
    println!("phase 2: killed worker 1 before it counted down");
    match latch.wait_timeout(Duration::from_secs(30)).await {
        Err(Error::LatchExpired { .. }) => {
            let took = set_at.elapsed();
            println!(
                "phase 2: the coordinator was told the latch expired, {took:?} after it was set"
            );
            if took > CRASH_TTL + SLACK {
                violations.push(format!("the expiry was seen only after {took:?}"));
            }
        }
        Ok(opened) => violations.push(format!(
            "a latch whose worker crashed was read as {}",
            if opened {
                "open"
            } else {
                "still counting after 30 s"
            }
        )),
        Err(e) => return Err(e.into()),
    }
    if !client.inspect(&name).await?.is_empty() {
        violations.push("the expired latch left keys in Redis".into());
    }
    Ok(())
}

async fn restarted_worker(
    client: &redisync::Client,
    url: &str,
    run: &str,
    violations: &mut Vec<String>,
) -> Result<(), BoxError> {
    let name = format!("example:{run}:phase-3");
    let latch = client.count_down_latch(&name);
    latch.try_set_count(2, Duration::from_mins(1)).await?;
    println!("phase 3: latch set to 2; worker 0 checks in and is killed");
    let mut first = Workers::start_as(url, &name, [(0, "check-in")])?;
    let (_, line) = first.next("counted").await?;
    let pid = first.children[0].id().ok_or("worker gone")?;
    support::signal(pid, "KILL").await?;
    println!("phase 3: worker 0 {line}, killed; restarted, it checks in again");
    let mut again = Workers::start_as(url, &name, [(0, "work")])?;
    let (_, line) = again.next("counted").await?;
    println!("phase 3: restarted worker 0 {line}");
    if line != "counted down, 1 left" || latch.count().await? != 1 {
        violations.push(format!("a restarted worker counted again: {line}"));
    }
    if latch.wait_timeout(Duration::from_millis(300)).await? {
        violations.push("the latch opened with worker 1 missing".into());
    }
    let mut last = Workers::start_as(url, &name, [(1, "work")])?;
    let (_, line) = last.next("counted").await?;
    let opened = latch.wait_timeout(Duration::from_secs(30)).await?;
    println!("phase 3: worker 1 {line}; the coordinator's wait returned {opened}");
    if !opened {
        violations.push("the latch did not open after worker 1's check-in".into());
    }
    Ok(())
}

/// One worker process: `"<id> work"` counts down once after a short job,
/// `"<id> hang"` never does (it is killed), `"<id> check-in"` hangs after
/// its count-down (it is killed and restarted).
async fn worker_main(spec: &str) -> Result<(), BoxError> {
    let url = std::env::var("COUNTDOWN_EXAMPLE_URL")?;
    let name = std::env::var("COUNTDOWN_EXAMPLE_LATCH")?;
    let (id, mode) = spec.split_once(' ').ok_or("bad worker spec")?;
    let id: u64 = id.parse()?;
    let client = redisync::Client::connect(&url).await?;
    let latch = client.count_down_latch(&name);
    if mode == "hang" {
        println!("hanging before counting down");
        std::future::pending::<()>().await;
    }
    tokio::time::sleep(Duration::from_millis(100 + 100 * id)).await;
    // By its id: a worker restarted after it counted counts once.
    let left = latch.count_down_as(&format!("worker-{id}")).await?;
    println!("counted down, {left} left");
    if mode == "check-in" {
        std::future::pending::<()>().await;
    }
    client.shutdown().await?;
    Ok(())
}
